// SPDX-License-Identifier: GPL-2.0

//! What the attachment does in its thread (task_works, on the thread's way
//! back to user mode or at its exit): install after a remote LOAD, block
//! after a notifying overflow, clean up, re-check an exec's credentials;
//! and the exec watch that queues the last.

use kernel::sync::Arc;

use super::{
    release, Attachment, Installed, Life, Monitor, Verdict, BLOCK, CLEANUP, EXEC, INSTALL,
};
use crate::rust::{self as glue, Notify, TaskWork, TaskWorkItem};

impl<M: Monitor> TaskWorkItem<INSTALL> for Attachment<M> {
    /// A remote LOAD's install, in the target thread.
    fn run(att: Arc<Self>) {
        let exiting = glue::is_exiting(&att.task);
        // An exec that committed after the LOAD's check (it waited for the
        // exec_update_lock) runs no user code before this: check again.
        // SAFETY: task_work callbacks run in the task they were queued on.
        let verdict = if exiting {
            Verdict::Exiting
        } else if unsafe { att.lost_access() } {
            Verdict::Lost
        } else {
            Verdict::Proceed
        };
        let installed = if att.life.wanted() {
            // SAFETY: We are `task`, with the context lock held.
            att.ctx.install(&att, verdict, || unsafe { att.register() })
        } else {
            Installed::NotWanted
        };
        match installed {
            Installed::Ended => {
                att.life.clear(Life::WANTED);
                att.ctx.wake();
                att.retire();
            }
            // SAFETY: We are the task, in process context.
            Installed::Yes => unsafe { att.accept_current_cred() },
            Installed::NotWanted => {
                if !att.life.wanted() && !att.life.has(Life::REGISTERED) {
                    // Unloaded or closed before it could install.
                    att.retire();
                }
            }
        }
        // Possibly the module's last reference: return at once (see `release`).
        release(att);
    }
}

impl<M: Monitor> TaskWorkItem<BLOCK> for Attachment<M> {
    /// Blocks the thread on its way to user mode after a notifying
    /// overflow, until RESTART.
    fn run(att: Arc<Self>) {
        // A thread on its way out does not wait for a RESTART that may
        // never come; nor does one whose exec is not checked yet (the new
        // image may not be its loader's to stall).
        if !glue::is_exiting(&att.task) && !att.ctx.exec_unchecked() {
            att.ctx.block_until_restart(|| att.life.wanted());
        }
        release(att);
    }
}

impl<M: Monitor> TaskWorkItem<CLEANUP> for Attachment<M> {
    /// Removes the notifier in the thread and frees what is left.
    fn run(att: Arc<Self>) {
        // SAFETY: task_work callbacks run in the task they were queued on.
        unsafe { att.unregister() };
        att.ctx.reap_zombie();
        att.retire();
        release(att);
    }
}

impl<M: Monitor> TaskWorkItem<EXEC> for Attachment<M> {
    /// After an exec (or a failed one), in the thread, before it returns
    /// to user mode: ends the monitoring if the loader may not monitor the
    /// new image (`PFM_MSG_REVOKED`), or resumes the overflow path.
    fn run(att: Arc<Self>) {
        let exiting = glue::is_exiting(&att.task);
        // SAFETY: task_work callbacks run in the task they were queued on.
        let lost = !exiting && unsafe { att.lost_access() };
        let lost = lost && att.life.wanted();
        let pending = att.ctx.exec_end(&att, lost);
        if lost {
            att.life.clear(Life::WANTED);
            att.ctx.wake();
            // SAFETY: We are the task.
            unsafe { att.unregister() };
            att.retire();
        } else if !exiting {
            // SAFETY: We are the task, in process context.
            unsafe { att.accept_current_cred() };
            if pending {
                // Overflows held back during the exec.
                att.irq_work_queue();
            }
        }
        release(att);
    }
}

/// Every `execve()`, in the execing thread, before the new image is
/// loaded: if the thread is monitored by a loader without privileges, the
/// overflow path stops acting on it (no message, no user IP, no blocking)
/// and a task_work re-checks the credentials once the exec is done, before
/// the new image's first instruction. perf_events ends such monitoring in
/// `begin_new_exec`, which a module cannot hook; the task_work runs on the
/// way back to user mode.
pub(crate) fn exec_hook<M: Monitor>() {
    let me = kernel::current!();
    let att = {
        let reg = M::registry().lock();
        let found = reg
            .of_task(&me)
            .find(|a| a.watch().is_some() && a.life.wanted())
            .cloned();
        found
    };
    let Some(att) = att else {
        return;
    };
    // A script's interpreter comes back here: one check covers both.
    if !att.exec_work.is_queued() {
        att.ctx.exec_begin(&att);
        let _ = TaskWork::<Attachment<M>, EXEC>::queue(&att, &me, Notify::Resume);
    }
    release(att);
}
