// SPDX-License-Identifier: GPL-2.0

//! The scheduler's two hooks (a preempt notifier): a monitored thread's
//! switch in and out, the module's hottest path. Each checks the thread's
//! access first (a revoked thread counts nothing more), then hands the
//! switch to its context; a dying thread's last switch-out ends its
//! attachment from an irq_work, since the runqueue lock is held here.

use super::{Attachment, Life, Monitor};
use crate::rust::{self as glue, PreemptNotify};

impl<M: Monitor> PreemptNotify for Attachment<M> {
    fn sched_in(&self, cpu: i32) {
        if !self.life.wanted() {
            // A zombie or a detached context: nothing to restore.
            return;
        }
        // SAFETY: A scheduler callback of the attachment's thread.
        if unsafe { self.check_access() } {
            return;
        }
        self.ctx.switched_in(cpu);
    }

    fn sched_out(&self) {
        // SAFETY: A scheduler callback of the attachment's thread.
        let dead = unsafe { glue::is_dying(&self.task) };
        // A hardware model's counters leave the PMU with their thread,
        // whatever the context's state (a zombie's included).
        // SAFETY: A scheduler callback of the attachment's thread.
        if !dead && (!self.life.wanted() || unsafe { self.check_access() }) {
            self.ctx.drop_hw_here(self.owner_token());
            return;
        }
        let wanted = if dead {
            self.life.set(Life::DEAD);
            self.life.clear(Life::WANTED)
        } else {
            true
        };
        self.ctx.switched_out(self, dead, wanted);
        if dead {
            // Runqueue lock held: defer the wake-up and the cleanup.
            self.irq_work.queue();
        }
    }
}
