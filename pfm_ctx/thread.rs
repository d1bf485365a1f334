// SPDX-License-Identifier: GPL-2.0

//! What the thread side asks of a context (`pfm_ctxsw::Monitor`): each
//! call takes the lock once, and acts on an attachment only if it is still
//! the context's own; and what the context does, under its lock, at the
//! thread's switches and at the end of its monitoring.

use kernel::prelude::*;
use kernel::sync::Arc;

use super::{state_err, Context, CtxInner, Family};
use crate::globals;
use crate::pfm_ctxsw::{Attachment, Installed, Monitor, Processes, Registry, Verdict};
use crate::pfm_msgq::{FinalMsg, FINAL_END, FINAL_REVOKED};
use crate::pfm_state::{Op, State};
use crate::pfm_x86::ThreadDeltas;
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
        // The task-clock timer is this CPU's: it leaves with the thread.
        if mine {
            inner.release_clock_here();
        } else {
            globals().pmu.clock_release_here(att.owner_token());
        }
        if mine && wanted {
            // Takes the hardware counters off the PMU too.
            inner.sched_out(cpu);
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
        // A cheap check first (the soft model puts nothing on a PMU, and
        // its task-clock timer is armed only while it samples); a re-check
        // under the lock makes it exact.
        if !pmu.is_owner_here(owner) && !core::ptr::eq(pmu.clock_owner_here(), owner) {
            return;
        }
        let mut inner = self.inner.lock();
        // The timer must not name an attachment that may go away either.
        pmu.clock_release_here(owner);
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
        if inner.multiplexed() && inner.hw_overflows_waiting() {
            // Overflows may switch event sets: the time run so far is
            // charged to the set that counted it, then its overflows
            // counted, then the active set's registers go on the PMU.
            let cpu = glue::this_cpu();
            inner.fold_running(cpu);
            inner.sync_hw();
        }
    }

    fn hw_mux(&self) {
        let mut inner = self.inner.lock();
        let cpu = glue::this_cpu();
        if inner.on_cpu == Some(cpu) && inner.multiplexed() {
            // The fold charges the running time to the active set, which
            // switches if its time is up; `sync_hw` puts the active set's
            // registers on the PMU and arms the timer for what is left.
            inner.fold_running(cpu);
            inner.sync_hw();
        }
    }

    fn clock_due(&self, owner: *const ()) {
        let mut inner = self.inner.lock();
        let cpu = glue::this_cpu();
        if !core::ptr::eq(inner.owner_token(), owner) || inner.on_cpu != Some(cpu) {
            // Armed for an attachment the context no longer has.
            globals().pmu.clock_release_here(owner);
            return;
        }
        // The fold counts the time to now, which reaches the overflow:
        // it is raised (or sampled) here, the thread interrupted where it
        // runs; then the timer is armed for the next one.
        inner.fold_running(cpu);
        inner.sync_hw();
        inner.page_update();
        inner.sync_clock();
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
            Verdict::Blocked { cpu, runtime } => {
                inner.install_blocked(cpu, runtime);
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
            inner.drop_pending_sets();
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
        load_set: u16,
        claim: impl FnOnce() -> Result,
        install: Option<&dyn Fn()>,
    ) -> Result<Option<Arc<Attachment<Self>>>> {
        let mut inner = self.inner.lock();
        inner.life.check(Op::Load).map_err(state_err)?;
        // Asked before the claim, applied after it: a LOAD refused
        // changes nothing.
        inner.check_load_sets(load_set)?;
        claim()?;
        inner.transition(Op::Load)?;
        inner.load_sets(load_set);
        inner.reset_for_load(tid);
        let old = inner.attach.replace(att.clone());
        if let Some(register) = install {
            inner.install_here(glue::this_cpu());
            register();
        }
        Ok(old)
    }

    type Lineage = Family;

    fn lineage(&self) -> Option<Arc<Family>> {
        self.joinable_family()
    }

    fn processes() -> &'static IrqSpinLock<Processes<Self>> {
        &globals().processes
    }

    fn adopt_current(lineage: &Arc<Family>) {
        Family::adopt_current(lineage);
    }

    fn lost_one(lineage: &Arc<Family>) {
        lineage.lost_one();
    }

    fn exec_armed(&self) -> bool {
        self.waits_for_exec()
    }

    fn start_on_exec(&self) {
        self.exec_done();
    }

    fn exec_committed(&self) {
        let mut inner = self.inner.lock();
        if !inner.exec_armed || inner.started {
            return;
        }
        // The thread is current, on this CPU, interrupts off: START's
        // live operation, here. `exec_armed` stays, for `start_on_exec`
        // to start the family.
        let cpu = glue::this_cpu();
        inner.live_op(cpu, |inner, now| {
            if inner.transition(Op::Start).is_ok() {
                inner.started = true;
                inner.enabled_start = now;
                if inner.on_cpu == Some(cpu) {
                    inner.run_base = glue::current_runtime_ns();
                }
                inner.rebase_faults();
            }
        });
    }

    fn load_failed(&self, att: &Attachment<Self>) {
        let mut inner = self.inner.lock();
        if inner.owns(att) && inner.transition(Op::LoadFailed).is_ok() {
            inner.unload_sets();
        }
    }
}

/// The context's side of the thread's switches and of its end.
impl CtxInner {
    /// The thread (current) runs on `cpu` from now on, after a context
    /// switch: counting resumes from the runtime its last switch-out left
    /// in `run_base`.
    ///
    /// `se.sum_exec_runtime` is not sampled here: the scheduler fires the
    /// sched-in notifiers after `finish_task_switch` has re-enabled
    /// interrupts, so a tick, a wake-up preemption check from another CPU
    /// or a remote `task_sched_runtime` (`/proc/PID/schedstat`, a thread
    /// CPU clock) may already have accounted part of this time slice.
    /// Whatever was added since the switch-out is this thread's own running
    /// time, and the next switch-out counts it.
    #[inline]
    fn sched_in(&mut self, cpu: i32) {
        // An exiting thread's migrations stop with its switches (see
        // `sched_out`).
        if self.counting() && cpu != self.last_cpu && !glue::current_is_tearing_down() {
            self.advance(&ThreadDeltas {
                migrations: 1,
                ..ThreadDeltas::default()
            });
        }
        self.last_cpu = cpu;
        self.on_cpu = Some(cpu);
        self.sync_hw();
        self.sync_clock();
        self.page_update();
    }

    /// The context starts following the thread (current) mid-slice, on
    /// `cpu`: a self-LOAD, or a remote LOAD's install in the thread.
    fn install_here(&mut self, cpu: i32) {
        self.active = true;
        self.run_base = glue::current_runtime_ns();
        // Before `sched_in`, whose migration fold counts faults if the
        // context was started before this install.
        self.rebase_faults_here();
        self.sched_in(cpu);
    }

    /// The context starts following the thread while it sleeps (a remote
    /// LOAD holds it off every CPU): as if it had been switched out of
    /// `cpu`, its last, having run `runtime` ns. Its next switch-in counts
    /// a migration if it wakes elsewhere, as perf counts one then.
    fn install_blocked(&mut self, cpu: i32, runtime: u64) {
        self.active = true;
        self.run_base = runtime;
        self.last_cpu = cpu;
        self.on_cpu = None;
        self.rebase_faults();
        self.page_update();
    }

    /// The thread is switched out of `cpu`.
    /// The scheduler has just accounted its time slice, so the slice ends
    /// exactly at its `sum_exec_runtime`, where the next one starts.
    #[inline]
    fn sched_out(&mut self, cpu: i32) {
        let ovfl = self.counters.uninstall_here(&globals().pmu);
        self.overflowed(ovfl);
        if self.counters.read_only_where_running() && self.has_parts() {
            self.sets_off_cpu();
        }
        let runtime = glue::current_sum_exec_runtime();
        let mut d = ThreadDeltas::default();
        if self.on_cpu == Some(cpu) {
            // A preempted thread's slice may end before what its page let
            // it see: not below that. The next slice counts from the
            // scheduler's end of this one.
            let end = runtime.max(self.switch_out_promise());
            d.task_clock = end.saturating_sub(self.run_base);
        }
        self.run_base = runtime;
        if self.counting() {
            self.time_running += d.task_clock;
            // perf_events stops counting a thread's switches in
            // `perf_event_exit_task`, right before `exit_mm` (whose futex
            // release, mmap lock and unmapping may sleep); the exit path's
            // switches before it (itimers, accounting, taskstats) count.
            // This one stops where `exit_mm` begins, so the two agree; the
            // final switch is never counted. task-clock keeps counting to
            // the final switch: it is the thread's CPU time, all of it
            // (Documentation, "Accuracy").
            d.switches = u64::from(!glue::current_is_tearing_down());
            self.advance(&d);
        }
        self.on_cpu = None;
        self.page_update();
    }

    /// The monitoring of the thread ends (`op`: its exit, or a revoke):
    /// the counts stay, the tool gets `msg_type` (END, REVOKED), which is
    /// never lost (it has a slot of its own, read after the overflow
    /// messages). Whether the table allowed it.
    fn end(&mut self, op: Op, msg_type: u16) -> bool {
        let now = glue::now_ns();
        if self.transition(op).is_err() {
            return false;
        }
        // An exec that will never come (the thread is gone) or that the
        // trust rules revoked starts nothing: the exec probe stops waiting.
        self.arm_exec(false);
        self.stop_clock(now);
        self.unload_sets();
        self.msgs.push_last(FinalMsg {
            msg_type,
            tid: self.tid,
            cpu: self.last_cpu as u16,
            tstamp: now,
        });
        self.active = false;
        self.on_cpu = None;
        self.page_update();
        true
    }

    /// The target exited: keep the final counts, queue END; a zombie whose
    /// thread died is freed (nobody reads it any more).
    fn target_exited(&mut self) {
        if self.state() == State::Zombie {
            let _ = self.transition(Op::TargetExit);
        } else {
            self.exited = self.end(Op::TargetExit, FINAL_END);
        }
        self.active = false;
        self.on_cpu = None;
        self.page_update();
    }

    /// The thread gained privileges the tool lacks: stop monitoring it,
    /// keep the counts, tell the tool (`PFM_MSG_REVOKED`). In the thread.
    fn revoke(&mut self) {
        // The thread's registers are no longer the loader's to see: the
        // last fold samples and reports without its user IP or chain.
        self.exec_check = true;
        let cpu = glue::this_cpu();
        self.fold_running(cpu);
        if self.end(Op::Revoke, FINAL_REVOKED) {
            self.started = false;
        }
    }
}
