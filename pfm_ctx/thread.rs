// SPDX-License-Identifier: GPL-2.0

//! What the thread side asks of a context (`pfm_ctxsw::Monitor`): each
//! call takes the lock once, and acts on an attachment only if it is still
//! the context's own.

use kernel::prelude::*;
use kernel::sync::Arc;

use super::{state_err, Context};
use crate::globals;
use crate::pfm_ctxsw::{Attachment, Installed, Monitor, Registry, Verdict};
use crate::pfm_state::{Op, State};
use crate::rust::{self as glue, IrqSpinLock, WorkList};

impl Monitor for Context {
    fn registry() -> &'static IrqSpinLock<Registry<Self>> {
        &globals().registry
    }

    fn reaper() -> &'static WorkList<Attachment<Self>> {
        &globals().reaper
    }

    #[inline]
    fn switched_in(&self, cpu: i32) {
        self.inner.lock().sched_in(cpu);
    }

    #[inline]
    fn switched_out(&self, att: &Attachment<Self>, dead: bool, wanted: bool) {
        let mut inner = self.inner.lock();
        let mine = inner.owns(att);
        let cpu = glue::this_cpu();
        if mine && wanted {
            // Takes the hardware counters off the PMU too.
            inner.sched_out(cpu, dead);
        } else if globals().pmu.is_owner_here(att.owner_token()) {
            let ovfl = inner.counters.uninstall_here(&globals().pmu);
            inner.overflowed(ovfl);
        }
        if dead && mine && inner.state().is_attached() {
            inner.target_exited();
        }
    }

    fn drop_hw_here(&self, owner: *const ()) {
        let pmu = &globals().pmu;
        // A cheap check first (never true for the soft model, which puts
        // nothing on a PMU); a re-check under the lock makes it exact.
        if !pmu.is_owner_here(owner) {
            return;
        }
        let mut inner = self.inner.lock();
        // Under the lock (IRQs off): the owner of this CPU cannot change.
        if pmu.is_owner_here(owner) {
            let ovfl = inner.counters.uninstall_here(pmu);
            inner.overflowed(ovfl);
        }
    }

    fn hw_pmi(&self) {
        let mut inner = self.inner.lock();
        let counting = inner.counting();
        let ovfl = inner.counters.pmi_here(&globals().pmu, counting);
        inner.overflowed(ovfl);
    }

    fn overflow_interrupt(&self) -> bool {
        self.take_overflows()
    }

    fn wake(&self) {
        Context::wake(self);
    }

    fn install(
        &self,
        att: &Attachment<Self>,
        verdict: Verdict,
        register: impl FnOnce(),
    ) -> Installed {
        let mut inner = self.inner.lock();
        if !inner.owns(att) {
            return Installed::NotWanted;
        }
        match verdict {
            Verdict::Lost => {
                inner.revoke();
                Installed::Ended
            }
            // Run from exit_task_work(): the thread will not return to
            // user mode; end the monitoring now.
            Verdict::Exiting => {
                inner.target_exited();
                Installed::Ended
            }
            Verdict::Proceed => {
                inner.install_here(glue::this_cpu());
                register();
                Installed::Yes
            }
        }
    }

    fn revoke(&self, att: &Attachment<Self>) {
        let mut inner = self.inner.lock();
        if inner.owns(att) {
            inner.revoke();
        }
    }

    fn exec_begin(&self, att: &Attachment<Self>) {
        let mut inner = self.inner.lock();
        if inner.owns(att) {
            inner.exec_check = true;
        }
    }

    fn exec_end(&self, att: &Attachment<Self>, lost: bool) -> bool {
        let mut inner = self.inner.lock();
        inner.exec_check = false;
        if lost && inner.owns(att) {
            // Overflows held back during the exec are the new image's.
            inner.fold_running(glue::this_cpu());
            inner.pending_ovfl = 0;
            inner.revoke();
            return false;
        }
        inner.pending_ovfl != 0
    }

    fn exec_unchecked(&self) -> bool {
        self.inner.lock().exec_check
    }

    fn block_until_restart(&self, still_wanted: impl Fn() -> bool) {
        self.wait_for_restart(still_wanted);
    }

    fn reap_zombie(&self) {
        let mut inner = self.inner.lock();
        if inner.state() == State::Zombie {
            let _ = inner.transition(Op::Reap);
        }
    }

    fn forget(&self, att: &Attachment<Self>) -> Option<Arc<Attachment<Self>>> {
        let mut inner = self.inner.lock();
        if inner.owns(att) {
            inner.attach.take()
        } else {
            None
        }
    }

    fn publish(
        &self,
        att: &Arc<Attachment<Self>>,
        tid: u32,
        claim: impl FnOnce() -> Result,
        install: Option<&dyn Fn()>,
    ) -> Result<Option<Arc<Attachment<Self>>>> {
        let mut inner = self.inner.lock();
        inner.life.check(Op::Load).map_err(state_err)?;
        claim()?;
        inner.transition(Op::Load)?;
        inner.reset_for_load(tid);
        let old = inner.attach.replace(att.clone());
        if let Some(register) = install {
            inner.install_here(glue::this_cpu());
            register();
        }
        Ok(old)
    }

    fn load_failed(&self, att: &Attachment<Self>) {
        let mut inner = self.inner.lock();
        if inner.owns(att) {
            let _ = inner.transition(Op::LoadFailed);
        }
    }
}
