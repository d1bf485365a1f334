// SPDX-License-Identifier: GPL-2.0

//! The monitoring context: one per open of `/dev/perfmon`. It owns the
//! registers, the state machine, the message queue and the time accounting;
//! `pfm_ctxsw` attaches it to a thread.
//!
//! Locking: `Context::inner` is an IRQ-safe spinlock, taken from ioctls, from
//! the preempt notifiers (with the runqueue lock held, IRQs off) and from IPIs.
//! Nothing that sleeps or wakes a task runs under it. Lock order:
//! `Globals::registry` before `Context::inner`.

use core::sync::atomic::Ordering;

use kernel::bindings;
use kernel::prelude::*;
use kernel::sync::{new_mutex, Arc, Mutex};
use kernel::uaccess::{UserSlice, UserSliceWriter};

use crate::abi;
use crate::pfm_ctxsw::{self, Attachment};
use crate::pfm_msgq::{MsgQueue, MSG_QUEUE_DEPTH};
use crate::pfm_state::{Op, State, StateError};
use crate::pfm_x86::driver::{HwModel, HwRegs};
use crate::pfm_x86::{soft_count, PmdState, PmiThrottle, SoftDeltas};
use crate::rust::{self as glue, new_irq_spinlock, IrqSpinLock};
use crate::{ebadfd, globals};

/// The part of a context protected by its lock.
pub(crate) struct CtxInner {
    /// Where the context is in its life.
    pub(crate) state: State,
    /// `PFM_CTXFL_*`.
    pub(crate) flags: u32,
    /// START issued and no STOP since.
    pub(crate) started: bool,
    /// PMC values (event selection; for a hardware model, as validated),
    /// one per PMC number of the model.
    pub(crate) pmcs: KVec<u64>,
    /// PMCs written.
    pub(crate) pmc_used: u64,
    /// Bit n of `ev_pmds[e]`: PMD n counts soft event e (recomputed at
    /// WRITE_PMCS; soft model only).
    pub(crate) ev_pmds: [u8; 4],
    /// Hardware model: the PMDs the written PMCs make count.
    pub(crate) hw_used: u64,
    /// Hardware model: the CPU whose PMU holds the counters now, if any.
    /// Invariant (kept by [`CtxInner::hw_sync`]): installed only where
    /// the context counts and its thread runs.
    pub(crate) hw_cpu: Option<i32>,
    /// Hardware model: the CPU and PMU register generation at which the
    /// counters left the PMU with every register still in place (nothing
    /// wrapped or overflowed at that stop); a switch-in there, if no other
    /// context wrote the PMU since, only restarts counting. Cleared by any
    /// register write.
    pub(crate) hw_resume: Option<(i32, u64)>,
    /// Hardware model: keeps the PMI rate bounded (see `PmiThrottle`).
    pub(crate) throttle: PmiThrottle,
    /// PMD state, one per PMD number of the model.
    pub(crate) pmds: KVec<PmdState>,
    /// PMDs written.
    pub(crate) used_pmds: u64,
    /// The thread side, while attached (and until its cleanup has run).
    pub(crate) attach: Option<Arc<Attachment>>,
    /// Monitored thread id in the loader's pid namespace.
    pub(crate) tid: u32,
    /// The target has installed the context (its notifier is registered).
    pub(crate) active: bool,
    /// The target exited while attached.
    pub(crate) exited: bool,
    /// The CPU the target is running on right now, if it is.
    pub(crate) on_cpu: Option<i32>,
    /// The CPU the target last ran on while attached.
    pub(crate) last_cpu: i32,
    /// The thread's scheduler runtime (`se.sum_exec_runtime`, made live)
    /// when the counters were last advanced, or at its last switch-out:
    /// task-clock is this runtime, the thread CPU time
    /// `CLOCK_THREAD_CPUTIME_ID` reports. Only the thread's own running
    /// advances that runtime, so between a switch-out and the next
    /// switch-in it stays valid.
    pub(crate) run_base: u64,
    /// When the context was last started (caller's clock).
    pub(crate) enabled_start: u64,
    /// ns loaded and started, up to the last stop.
    pub(crate) time_enabled: u64,
    /// ns the thread ran while started.
    pub(crate) time_running: u64,
    /// Messages for the tool.
    pub(crate) msgs: MsgQueue,
    /// Overflowed PMDs not yet handled by the overflow interrupt.
    pub(crate) pending_ovfl: u64,
    /// User instruction pointer of the thread when they overflowed.
    pub(crate) pending_ip: u64,
    /// Overflow interrupts taken (sysfs and tests).
    pub(crate) ovfl_interrupts: u64,
    /// The thread is in an exec whose credentials are not checked yet
    /// (`pfm_ctxsw::pfm_exec_hook`): overflows wait, without user IP.
    pub(crate) exec_check: bool,
}

impl CtxInner {
    /// Whether the counters advance now.
    pub(crate) fn counting(&self) -> bool {
        self.state == State::Loaded && self.started && self.active
    }

    /// Advances the counters if the target runs on `cpu`, which must be
    /// this CPU: the target is then the current thread, and its live
    /// scheduler runtime is what task-clock reads.
    pub(crate) fn fold_running(&mut self, cpu: i32) {
        if self.on_cpu == Some(cpu) {
            self.fold_to(glue::current_runtime_ns());
            // A hardware model's counters are folded by taking them off
            // the PMU; `hw_sync` puts them back after the caller's change.
            self.hw_uninstall();
        }
    }

    /// Runs `op` on the live context (the thread runs on `cpu`, this CPU,
    /// or nowhere): counters advanced first, hardware counters put back
    /// (or not) after, as `op` left the state.
    pub(crate) fn live_op<R>(
        &mut self,
        cpu: i32,
        now: u64,
        op: impl FnOnce(&mut Self, u64) -> R,
    ) -> R {
        self.fold_running(cpu);
        let r = op(self, now);
        self.hw_sync();
        r
    }

    /// Keeps a hardware model's counters on this CPU's PMU exactly while
    /// the context counts and its thread runs here: installs or removes
    /// them. No-op for the soft model. Lock held (IRQs off).
    pub(crate) fn hw_sync(&mut self) {
        if globals().pmu.hw.is_none() {
            return;
        }
        let cpu = glue::this_cpu();
        let want = self.counting() && self.on_cpu == Some(cpu);
        match self.hw_cpu {
            Some(c) if c == cpu && !want => self.hw_uninstall(),
            None if want => self.hw_install(cpu),
            _ => {}
        }
    }

    /// The context's registers, as the hardware driver takes them.
    fn hw_regs<'a>(&'a mut self, model: &'a HwModel, min_arm: u64) -> HwRegs<'a, HwModel> {
        HwRegs {
            model,
            pmcs: &self.pmcs,
            pmc_used: self.pmc_used,
            pmds: &mut self.pmds,
            used: self.hw_used,
            tally: None,
            min_arm,
        }
    }

    /// Puts the counters on this CPU's PMU, counting.
    fn hw_install(&mut self, cpu: i32) {
        let g = globals();
        let (Some(model), Some(att)) = (&g.pmu.hw, &self.attach) else {
            return;
        };
        let owner: *const Attachment = &**att;
        // The attachment holds a claim: the PMI must reach the vector.
        g.intr.own_lvtpc_here();
        let min_arm = self.throttle.min_arm();
        let lazy = self.hw_resume.take() == Some((cpu, g.pmu.generation_here()));
        let resumed = if lazy {
            self.hw_regs(model, min_arm).resume(&mut g.pmu.bus())
        } else {
            None
        };
        let out = match resumed {
            Some(out) => {
                g.pmu.lazy_restores.fetch_add(1, Ordering::Relaxed);
                out
            }
            None => {
                g.pmu.full_restores.fetch_add(1, Ordering::Relaxed);
                g.pmu.bump_generation_here();
                self.hw_regs(model, min_arm).install(&mut g.pmu.bus(), true)
            }
        };
        g.pmu.note(&out);
        g.pmu.set_owner_here(owner.cast());
        self.hw_cpu = Some(cpu);
    }

    /// Takes the counters off this CPU's PMU (stopped, folded into the
    /// 64-bit values), if they are there. Lock held (IRQs off).
    pub(crate) fn hw_uninstall(&mut self) {
        let g = globals();
        let Some(model) = &g.pmu.hw else {
            return;
        };
        if self.hw_cpu != Some(glue::this_cpu()) {
            return;
        }
        let min_arm = self.throttle.min_arm();
        let out = self.hw_regs(model, min_arm).stop(&mut g.pmu.bus(), false);
        g.pmu.note(&out);
        g.pmu.set_owner_here(core::ptr::null());
        // A counter that wrapped is no longer armed: the next switch-in
        // must write everything again.
        self.hw_resume = (out.wrapped == 0 && out.overflowed == 0 && out.fault.is_none())
            .then(|| (glue::this_cpu(), g.pmu.generation_here()));
        self.hw_cpu = None;
        if out.overflowed != 0 {
            self.overflowed(out.overflowed);
        }
    }

    /// The hardware PMI, on the CPU whose PMU holds the counters: fold,
    /// re-arm, and raise the overflowed PMDs as the soft model does.
    pub(crate) fn hw_pmi(&mut self) {
        let g = globals();
        let Some(model) = &g.pmu.hw else {
            return;
        };
        if self.hw_cpu != Some(glue::this_cpu()) {
            return;
        }
        let started = self.counting();
        let min_arm = self.throttle.pmi(glue::now_ns());
        let out = self.hw_regs(model, min_arm).pmi(&mut g.pmu.bus(), started);
        g.pmu.note(&out);
        if out.overflowed != 0 {
            self.overflowed(out.overflowed);
        }
    }

    /// Advances the counters to the thread's scheduler runtime `runtime`.
    fn fold_to(&mut self, runtime: u64) {
        let ran = runtime.saturating_sub(self.run_base);
        self.run_base = runtime;
        if self.counting() {
            self.time_running += ran;
            self.count(&SoftDeltas {
                task_clock: ran,
                ..SoftDeltas::default()
            });
        }
    }

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
    pub(crate) fn sched_in(&mut self, cpu: i32) {
        if self.counting() && cpu != self.last_cpu {
            self.count(&SoftDeltas {
                migrations: 1,
                ..SoftDeltas::default()
            });
        }
        self.last_cpu = cpu;
        self.on_cpu = Some(cpu);
        self.hw_sync();
    }

    /// The context starts following the thread (current) mid-slice, on
    /// `cpu`: a self-LOAD, or a remote LOAD's install in the thread.
    pub(crate) fn install_here(&mut self, cpu: i32) {
        self.run_base = glue::current_runtime_ns();
        self.sched_in(cpu);
    }

    /// The thread is switched out of `cpu`; `dead` for its final switch.
    /// The scheduler has just accounted its time slice, so the slice ends
    /// exactly at its `sum_exec_runtime`, where the next one starts.
    pub(crate) fn sched_out(&mut self, cpu: i32, dead: bool) {
        self.hw_uninstall();
        let runtime = glue::current_sum_exec_runtime();
        let mut d = SoftDeltas::default();
        if self.on_cpu == Some(cpu) {
            d.task_clock = runtime.saturating_sub(self.run_base);
        }
        self.run_base = runtime;
        if self.counting() {
            self.time_running += d.task_clock;
            // perf_events stops counting a thread before its final switch
            // (perf_event_exit_task): so does this, so the two agree.
            d.switches = u64::from(!dead);
            self.count(&d);
        }
        self.on_cpu = None;
    }

    /// Applies `d` to every counter and records overflows.
    fn count(&mut self, d: &SoftDeltas) {
        let width = globals().pmu.width;
        let ovfl = soft_count(&self.ev_pmds, &mut self.pmds, d, width);
        if ovfl != 0 {
            self.overflowed(ovfl);
        }
    }

    /// Records overflowed PMDs and raises the overflow interrupt, as a
    /// hardware PMU would; the interrupt handler does the rest
    /// ([`Context::overflow_interrupt`]). Runs on the thread's CPU, in the
    /// thread's context, with the lock held.
    fn overflowed(&mut self, ovfl: u64) {
        if self.pending_ovfl == 0 {
            // During an exec not yet checked, the user registers may be the
            // new image's, which its loader may not be allowed to see.
            // We run in the monitored thread (every caller of `count` does).
            self.pending_ip = if self.exec_check {
                0
            } else {
                glue::current_user_ip()
            };
        }
        self.pending_ovfl |= ovfl;
        if let Some(att) = &self.attach {
            if !crate::pfm_intr::raise(att) {
                att.irq_work_queue();
            }
        }
    }

    /// The target exited: keep the final counts, queue END.
    pub(crate) fn target_exited(&mut self, now: u64) {
        if let Ok(next) = self.state.next(Op::TargetExit) {
            if next == State::Unloaded {
                self.stop_clock(now);
                self.exited = true;
                let end = abi::PfmMsg {
                    msg_type: abi::PFM_MSG_END,
                    tid: self.tid,
                    cpu: self.last_cpu as u16,
                    tstamp: now,
                    ..abi::PfmMsg::default()
                };
                // END must not be lost behind overflow messages: it replaces
                // the oldest one if the ring is full.
                self.msgs.push_forced(end);
            } else {
                // A zombie whose thread died: nobody reads it any more.
                globals().zombies.fetch_sub(1, Ordering::Relaxed);
            }
            self.state = next;
        }
        self.active = false;
        self.on_cpu = None;
    }

    /// The thread gained privileges the tool lacks: stop monitoring it,
    /// keep the counts, tell the tool. Runs in the thread, lock held.
    pub(crate) fn revoke(&mut self, now: u64) {
        if !matches!(self.state, State::Loaded | State::Masked) {
            return;
        }
        self.stop_clock(now);
        self.started = false;
        self.state = State::Unloaded;
        self.active = false;
        self.on_cpu = None;
        let msg = abi::PfmMsg {
            msg_type: abi::PFM_MSG_REVOKED,
            tid: self.tid,
            cpu: self.last_cpu as u16,
            tstamp: now,
            ..abi::PfmMsg::default()
        };
        self.msgs.push_forced(msg);
    }

    /// Closes the enabled-time window at `now`.
    fn stop_clock(&mut self, now: u64) {
        if self.started {
            self.time_enabled += now.saturating_sub(self.enabled_start);
            self.enabled_start = now;
        }
    }

    /// ns loaded and started, as reported: never below `time_running`.
    /// The two come from different clocks (`local_clock` here, the
    /// scheduler's runtime there) sampled a few instructions apart, so a
    /// thread that ran all along could otherwise show a running time a few
    /// hundred ns above its enabled time.
    fn time_enabled(&self, now: u64) -> u64 {
        let enabled = if self.started && self.state.is_attached() {
            self.time_enabled + now.saturating_sub(self.enabled_start)
        } else {
            self.time_enabled
        };
        enabled.max(self.time_running)
    }
}

/// A monitoring context.
///
/// # Invariants
///
/// `waitq` and `fasync` are the wait queue and SIGIO owners of the one
/// file this context is the private data of.
#[pin_data(PinnedDrop)]
pub(crate) struct Context {
    #[pin]
    pub(crate) inner: IrqSpinLock<CtxInner>,
    #[pin]
    waitq: glue::WaitQueue,
    /// Held by a `read(2)` from taking messages to removing them.
    #[pin]
    reader: Mutex<()>,
    fasync: glue::FasyncList,
}

// SAFETY: The raw fields are kernel objects with their own locking
// (wait queue lock, fasync's RCU list); the rest is behind `inner`.
unsafe impl Send for Context {}
// SAFETY: See `Send`.
unsafe impl Sync for Context {}

/// Maps a state-table refusal to its errno.
fn state_err(e: StateError) -> Error {
    match e {
        StateError::BadState => ebadfd(),
        StateError::Busy => EBUSY,
    }
}

/// Whether PMD `reg` exists in the bitmap `implemented`.
fn pmd_exists(implemented: u64, reg: u16) -> bool {
    reg < 64 && implemented & (1u64 << reg) != 0
}

/// An element of a register array call.
trait RegElem: kernel::types::FromBytes + kernel::types::AsBytes + Default + Copy {
    /// Replaces the `PFM_REG_RETFL_*` output bits of `reg_flags`.
    fn set_retfl(&mut self, retfl: u32);
}

impl RegElem for abi::PfmPmc {
    fn set_retfl(&mut self, retfl: u32) {
        self.reg_flags = (self.reg_flags & !abi::PFM_REG_RETFL_MASK) | retfl;
    }
}

impl RegElem for abi::PfmPmd {
    fn set_retfl(&mut self, retfl: u32) {
        self.reg_flags = (self.reg_flags & !abi::PFM_REG_RETFL_MASK) | retfl;
    }
}

impl Context {
    /// A new, UNLOADED context.
    pub(crate) fn new() -> Result<Arc<Self>> {
        let (n_pmcs, n_pmds) = globals().pmu.table_sizes();
        let mut pmcs = KVec::with_capacity(n_pmcs, GFP_KERNEL_ACCOUNT)?;
        let mut pmds = KVec::with_capacity(n_pmds, GFP_KERNEL_ACCOUNT)?;
        for _ in 0..n_pmcs {
            pmcs.push(0, GFP_KERNEL_ACCOUNT)?;
        }
        for _ in 0..n_pmds {
            pmds.push(PmdState::default(), GFP_KERNEL_ACCOUNT)?;
        }
        let ctx = Arc::pin_init(
            pin_init!(Self {
                inner <- new_irq_spinlock!(
                    CtxInner {
                        state: State::Unloaded,
                        flags: 0,
                        started: false,
                        pmcs,
                        pmc_used: 0,
                        ev_pmds: [0; 4],
                        hw_used: 0,
                        hw_cpu: None,
                        hw_resume: None,
                        throttle: PmiThrottle::new(),
                        pmds,
                        used_pmds: 0,
                        attach: None,
                        tid: 0,
                        active: false,
                        exited: false,
                        on_cpu: None,
                        last_cpu: -1,
                        run_base: 0,
                        enabled_start: 0,
                        time_enabled: 0,
                        time_running: 0,
                        msgs: MsgQueue::new(),
                        pending_ovfl: 0,
                        pending_ip: 0,
                        ovfl_interrupts: 0,
                        exec_check: false,
                    },
                    "perfmon_ctx"
                ),
                waitq <- glue::WaitQueue::new(),
                reader <- new_mutex!((), "perfmon_reader"),
                fasync: glue::FasyncList::new(),
            }),
            GFP_KERNEL_ACCOUNT,
        )?;
        globals().live_contexts.fetch_add(1, Ordering::Relaxed);
        Ok(ctx)
    }

    /// Wakes readers, pollers and a thread blocked on an overflow, and
    /// signals SIGIO owners. Must not be
    /// called with the runqueue lock held (use the attachment's irq_work).
    pub(crate) fn wake(&self) {
        self.waitq.wake_all();
        self.fasync.signal_io();
    }

    /// The overflow interrupt for this context: acts on the overflowed PMDs
    /// (message, masking, blocking). Hard-IRQ context; returns whether the
    /// monitored thread must block until RESTART.
    pub(crate) fn overflow_interrupt(&self) -> bool {
        let mut block = false;
        {
            let mut inner = self.inner.lock();
            if inner.exec_check {
                // Held until the exec's credentials are checked.
                return false;
            }
            let ovfl = core::mem::take(&mut inner.pending_ovfl);
            if ovfl == 0 {
                return false;
            }
            inner.ovfl_interrupts += 1;
            match inner.state {
                // Lazy cleanup: stop a zombie's counters, do not re-arm.
                State::Zombie => {
                    inner.started = false;
                    inner.hw_sync();
                    return false;
                }
                State::Loaded | State::Masked => {}
                State::Unloaded | State::Freed => return false,
            }
            let mut notify = 0u64;
            for (i, pmd) in inner.pmds.iter().enumerate() {
                if ovfl & (1 << i) != 0 && pmd.flags & abi::PFM_REGFL_OVFL_NOTIFY != 0 {
                    notify |= 1 << i;
                }
            }
            if notify == 0 {
                return false;
            }
            if inner.flags & abi::PFM_CTXFL_NO_MSG == 0 {
                let msg = abi::PfmMsg {
                    msg_type: abi::PFM_MSG_OVFL,
                    tid: inner.tid,
                    cpu: inner.on_cpu.unwrap_or(inner.last_cpu) as u16,
                    ip: inner.pending_ip,
                    ovfl_pmds: notify,
                    tstamp: glue::now_ns(),
                    ..abi::PfmMsg::default()
                };
                if !inner.msgs.push(msg) {
                    // A full queue masks the context instead of losing the
                    // overflow: it stays in the newest message until RESTART.
                    inner.msgs.merge_into_newest(notify);
                    inner.msgs.lost += 1;
                    if inner.state == State::Loaded {
                        inner.state = State::Masked;
                    }
                }
            }
            if inner.flags & abi::PFM_CTXFL_NOTIFY_BLOCK != 0 {
                if let Ok(next) = inner.state.next(Op::OverflowBlock) {
                    inner.state = next;
                    block = true;
                }
            }
            // A masked context stops counting (hardware: leaves the PMU).
            inner.hw_sync();
        }
        self.wake();
        block
    }

    /// Blocks the calling thread (the monitored one, on its way back to
    /// user mode) while the context is MASKED and still wants it; a signal
    /// releases it early (the counters stay stopped until RESTART).
    pub(crate) fn block_until_restart(&self, still_wanted: impl Fn() -> bool) {
        // RESTART, UNLOAD and close wake us.
        while !self.waitq.wait_unless(false, || {
            self.inner.lock().state != State::Masked
                || !still_wanted()
                || kernel::current!().signal_pending()
        }) {}
    }

    /// `fasync` file operation.
    pub(crate) fn fasync(&self, fd: i32, file: *mut bindings::file, on: i32) -> i32 {
        // SAFETY: `file` is the open file this context belongs to (type
        // invariant), which the context outlives.
        unsafe { self.fasync.helper(fd, file, on) }
    }

    /// `poll` file operation.
    ///
    /// # Safety
    ///
    /// `file` and `table` come from the VFS's `poll` call on this context's file.
    pub(crate) unsafe fn poll(
        &self,
        file: *mut bindings::file,
        table: *mut bindings::poll_table_struct,
    ) -> u32 {
        // SAFETY: The caller's guarantees; the queue lives as long as the file.
        unsafe { glue::poll_wait(file, self.waitq.as_ptr(), table) };
        let inner = self.inner.lock();
        let mut mask = 0;
        if !inner.msgs.is_empty() {
            mask |= glue::POLLIN | glue::POLLRDNORM;
        } else if inner.exited {
            mask |= glue::POLLHUP;
        }
        mask
    }

    /// `read` file operation: one or more whole messages.
    pub(crate) fn read(&self, out: UserSliceWriter, nonblock: bool) -> Result<usize> {
        const MSG: usize = core::mem::size_of::<abi::PfmMsg>();
        let mut out = out;
        if out.len() < MSG {
            return Err(EINVAL);
        }
        loop {
            let (mut ready, mut exited, mut interrupted) = (false, false, false);
            // Woken by `wake`; one reader per message (exclusive).
            self.waitq.wait_unless(true, || {
                let inner = self.inner.lock();
                ready = !inner.msgs.is_empty();
                exited = inner.exited;
                if ready || exited || nonblock {
                    return true;
                }
                interrupted = kernel::current!().signal_pending();
                interrupted
            });
            if interrupted {
                return Err(ERESTARTSYS);
            }
            if ready {
                if let Some(r) = self.deliver(&mut out) {
                    return r;
                }
                // Another reader took them: wait again.
                continue;
            }
            if exited {
                return Ok(0);
            }
            if nonblock {
                return Err(EAGAIN);
            }
        }
    }

    /// Copies the oldest messages that fit to `out` and removes from the
    /// queue exactly those that reached it (`pfm_msgq`): a faulting copy
    /// leaves every message queued. `None` if the queue was empty.
    fn deliver(&self, out: &mut UserSliceWriter) -> Option<Result<usize>> {
        const MSG: usize = core::mem::size_of::<abi::PfmMsg>();
        // One reader between peek and commit, so no message reaches two.
        let _reading = self.reader.lock();
        let mut batch = [abi::PfmMsg::default(); MSG_QUEUE_DEPTH];
        let room = (out.len() / MSG).min(MSG_QUEUE_DEPTH);
        let (n, mark) = self.inner.lock().msgs.peek(&mut batch[..room]);
        if n == 0 {
            return None;
        }
        let mut delivered = 0;
        let mut fault = None;
        for m in &batch[..n] {
            match out.write(m) {
                Ok(()) => delivered += 1,
                Err(e) => {
                    fault = Some(e);
                    break;
                }
            }
        }
        self.inner.lock().msgs.commit(mark, delivered);
        match fault {
            Some(e) if delivered == 0 => Some(Err(e)),
            _ => Some(Ok(delivered * MSG)),
        }
    }

    /// Runs `op` on the context where its thread's live counters are: on
    /// the target's CPU through an IPI if it runs elsewhere, here otherwise.
    /// `op` sees the counters advanced to the current time.
    pub(crate) fn with_live<R>(&self, mut op: impl FnMut(&mut CtxInner, u64) -> R) -> R {
        // A thread that keeps migrating could make us chase it forever:
        // after a few tries, read what was saved at its last switch.
        for _ in 0..4 {
            let target_cpu = {
                let mut inner = self.inner.lock();
                let cpu = glue::this_cpu();
                match inner.on_cpu {
                    Some(c) if c != cpu => c,
                    _ => {
                        let now = glue::now_ns();
                        return inner.live_op(cpu, now, &mut op);
                    }
                }
            };
            if let Some(r) = pfm_ctxsw::run_on_cpu(target_cpu, self, &mut op) {
                return r;
            }
        }
        let mut inner = self.inner.lock();
        let now = glue::now_ns();
        let cpu = glue::this_cpu();
        inner.live_op(cpu, now, &mut op)
    }

    /// `PFM_IOC_GET_STATE`.
    pub(crate) fn get_state(&self) -> abi::PfmCtxInfo {
        let inner = self.inner.lock();
        let mut status = 0;
        if inner.started {
            status |= abi::PFM_CTXST_STARTED;
        }
        if inner.active {
            status |= abi::PFM_CTXST_ACTIVE;
        }
        if inner.exited {
            status |= abi::PFM_CTXST_EXITED;
        }
        abi::PfmCtxInfo {
            state: inner.state.abi_value(),
            tid: inner.tid,
            flags: inner.flags,
            status,
            used_pmds: inner.used_pmds,
            reserved: [0; 3],
        }
    }

    /// `PFM_IOC_SET_FLAGS`.
    pub(crate) fn set_flags(&self, arg: &abi::PfmCtxFlags) -> Result {
        if arg.flags & !abi::PFM_CTXFL_MASK != 0 || arg.pad != 0 || arg.reserved != [0; 3] {
            return Err(EINVAL);
        }
        let mut inner = self.inner.lock();
        inner.state.next(Op::SetFlags).map_err(state_err)?;
        inner.flags = arg.flags;
        Ok(())
    }

    /// The shape of the three register array calls, as perfmon2 had them:
    /// every element is read from user memory once; `check` gives each its
    /// `PFM_REG_RETFL_*` verdict; one bad element fails the whole call with
    /// `EINVAL`, every element's `reg_flags` telling its verdict and `done`
    /// the first bad index; otherwise `apply` runs on the live context.
    ///
    /// `writes_state`: the call changes the context, so the array is written
    /// back (`reg_flags` output bits cleared) before `apply`: a buffer that
    /// cannot be written fails with `EFAULT` before anything is applied.
    fn reg_array_call<T: RegElem, R>(
        &self,
        arg: &mut abi::PfmRegsArg,
        regs: UserSlice,
        writes_state: bool,
        check: impl Fn(&T) -> u32,
        mut apply: impl FnMut(&mut CtxInner, u64, &mut [T]) -> Result<R>,
    ) -> Result<R> {
        let (mut reader, mut writer) = regs.reader_writer();
        let n = arg.count as usize;
        let size = core::mem::size_of::<T>();
        // Uninitialised storage (no 4 KiB memset per call): one copy_from_user fills the first n.
        let mut storage =
            [const { core::mem::MaybeUninit::<T>::uninit() }; abi::PFM_MAX_REGS_PER_CALL];
        // SAFETY: `storage` has room for n <= PFM_MAX_REGS_PER_CALL elements, viewed as bytes.
        let raw = unsafe {
            core::slice::from_raw_parts_mut(
                storage.as_mut_ptr().cast::<core::mem::MaybeUninit<u8>>(),
                n * size,
            )
        };
        reader.read_raw(raw)?;
        // SAFETY: `read_raw` wrote all n elements; `T: FromBytes` accepts any bytes.
        let elems: &mut [T] =
            unsafe { core::slice::from_raw_parts_mut(storage.as_mut_ptr().cast::<T>(), n) };
        let as_bytes = |e: &[T]| -> &[u8] {
            // SAFETY: `T: AsBytes`: no padding, every byte initialised.
            unsafe { core::slice::from_raw_parts(e.as_ptr().cast::<u8>(), e.len() * size) }
        };
        if let Some(bad) = elems.iter().position(|e| check(e) != 0) {
            arg.done = bad as u32;
            for e in elems.iter_mut() {
                let v = check(e);
                e.set_retfl(v);
            }
            writer.write_slice(as_bytes(elems))?;
            return Err(EINVAL);
        }
        for e in elems.iter_mut() {
            e.set_retfl(0);
        }
        if writes_state {
            writer.write_slice(as_bytes(elems))?;
        }
        let out = self.with_live(|inner, now| apply(inner, now, &mut *elems))?;
        if !writes_state {
            writer.write_slice(as_bytes(elems))?;
        }
        arg.done = n as u32;
        Ok(out)
    }

    /// `PFM_IOC_WRITE_PMCS`.
    pub(crate) fn write_pmcs(&self, arg: &mut abi::PfmRegsArg, regs: UserSlice) -> Result {
        let pmu = &globals().pmu;
        let policy = crate::pfm_x86::Pmu::caller_policy();
        let check = |p: &abi::PfmPmc| {
            if p.reg_set != 0 {
                abi::PFM_REG_RETFL_NOSET
            } else if p.reg_flags & !abi::PFM_REG_RETFL_MASK != 0 || p.reserved != [0; 2] {
                abi::PFM_REG_RETFL_EINVAL
            } else {
                pmu.validate_pmc(p.reg_num as usize, p.reg_value, policy)
                    .err()
                    .unwrap_or(0)
            }
        };
        self.reg_array_call(
            arg,
            regs,
            true,
            check,
            |inner, _, pmcs: &mut [abi::PfmPmc]| {
                inner.state.next(Op::WriteRegs).map_err(state_err)?;
                inner.hw_resume = None;
                for p in pmcs.iter() {
                    let reg = p.reg_num as usize;
                    // Checked above: valid, and within the table.
                    if let (Ok(v), Some(slot)) = (
                        pmu.validate_pmc(reg, p.reg_value, policy),
                        inner.pmcs.get_mut(reg),
                    ) {
                        *slot = v;
                        inner.pmc_used |= 1 << reg;
                    }
                }
                if pmu.hw.is_some() {
                    let mut used = 0;
                    for (i, &v) in inner.pmcs.iter().enumerate() {
                        if inner.pmc_used & (1 << i) != 0 {
                            used |= pmu.pmc_pmds(i, v);
                        }
                    }
                    inner.hw_used = used;
                    return Ok(());
                }
                let mut ev = [0u8; 4];
                for (i, &pmc) in inner.pmcs.iter().enumerate() {
                    if (pmc as usize) < ev.len() {
                        ev[pmc as usize] |= 1 << i;
                    }
                }
                ev[0] = 0;
                inner.ev_pmds = ev;
                Ok(())
            },
        )
    }

    /// `PFM_IOC_WRITE_PMDS`.
    pub(crate) fn write_pmds(&self, arg: &mut abi::PfmRegsArg, regs: UserSlice) -> Result {
        let implemented = globals().pmu.impl_mask();
        let width = globals().pmu.width;
        let check = |p: &abi::PfmPmd| {
            if p.reg_set != 0 {
                abi::PFM_REG_RETFL_NOSET
            } else if !pmd_exists(implemented, p.reg_num) {
                abi::PFM_REG_RETFL_NOTAVAIL
            } else if p.reg_flags & !(abi::PFM_REGFL_PMD_MASK | abi::PFM_REG_RETFL_MASK) != 0
                || p.reserved != [0; 2]
                || p.reg_reset_pmds & !implemented != 0
            {
                abi::PFM_REG_RETFL_EINVAL
            } else {
                0
            }
        };
        self.reg_array_call(
            arg,
            regs,
            true,
            check,
            |inner, _, pmds: &mut [abi::PfmPmd]| {
                inner.state.next(Op::WriteRegs).map_err(state_err)?;
                inner.hw_resume = None;
                for p in pmds.iter() {
                    // Checked above: implemented, so within the table.
                    let Some(pmd) = inner.pmds.get_mut(p.reg_num as usize) else {
                        continue;
                    };
                    pmd.write(p.reg_value, width);
                    pmd.short_reset = p.reg_short_reset;
                    pmd.long_reset = p.reg_long_reset;
                    pmd.flags = p.reg_flags & abi::PFM_REGFL_PMD_MASK;
                    pmd.reset_pmds = p.reg_reset_pmds;
                    inner.used_pmds |= 1 << p.reg_num;
                }
                Ok(())
            },
        )
    }

    /// `PFM_IOC_READ_PMDS`.
    pub(crate) fn read_pmds(&self, arg: &mut abi::PfmRegsArg, regs: UserSlice) -> Result {
        let implemented = globals().pmu.impl_mask();
        let check = |p: &abi::PfmPmd| {
            if p.reg_set != 0 {
                abi::PFM_REG_RETFL_NOSET
            } else if !pmd_exists(implemented, p.reg_num) {
                abi::PFM_REG_RETFL_NOTAVAIL
            } else if p.reserved != [0; 2] {
                abi::PFM_REG_RETFL_EINVAL
            } else {
                0
            }
        };
        let (enabled, running) = self.reg_array_call(
            arg,
            regs,
            false,
            check,
            |inner, now, pmds: &mut [abi::PfmPmd]| {
                inner.state.next(Op::Read).map_err(state_err)?;
                for p in pmds.iter_mut() {
                    let Some(pmd) = inner.pmds.get(p.reg_num as usize) else {
                        continue;
                    };
                    p.reg_value = pmd.value;
                    p.reg_short_reset = pmd.short_reset;
                    p.reg_long_reset = pmd.long_reset;
                    p.reg_last_reset_val = pmd.last_reset;
                    p.reg_reset_pmds = pmd.reset_pmds;
                    p.reg_flags = pmd.flags;
                }
                Ok((inner.time_enabled(now), inner.time_running))
            },
        )?;
        arg.time_enabled = enabled;
        arg.time_running = running;
        Ok(())
    }

    /// `PFM_IOC_READ_VALUES`: the values of the PMDs in `pmd_mask`, in PMD
    /// order, into the user array `values`; the times into `arg`.
    pub(crate) fn read_values(&self, arg: &mut abi::PfmValues) -> Result {
        let implemented = globals().pmu.impl_mask();
        if arg.reserved != [0; 2] || arg.pmd_mask == 0 || arg.pmd_mask & !implemented != 0 {
            return Err(EINVAL);
        }
        let mut values = [0u64; abi::PFM_MAX_PMDS];
        let mut n = 0;
        let (enabled, running) = self.with_live(|inner, now| -> Result<(u64, u64)> {
            inner.state.next(Op::Read).map_err(state_err)?;
            n = 0;
            for (i, pmd) in inner.pmds.iter().enumerate() {
                if arg.pmd_mask & (1 << i) != 0 {
                    values[n] = pmd.value;
                    n += 1;
                }
            }
            Ok((inner.time_enabled(now), inner.time_running))
        })?;
        let out = &values[..n];
        // SAFETY: `u64`s are plain bytes: the slice's memory, viewed as bytes.
        let bytes =
            unsafe { core::slice::from_raw_parts(out.as_ptr().cast::<u8>(), out.len() * 8) };
        UserSlice::new(arg.values as usize, bytes.len())
            .writer()
            .write_slice(bytes)?;
        arg.time_enabled = enabled;
        arg.time_running = running;
        Ok(())
    }

    /// `PFM_IOC_START`.
    pub(crate) fn start(&self) -> Result {
        self.with_live(|inner, now| -> Result {
            let next = inner.state.next(Op::Start).map_err(state_err)?;
            if !inner.started {
                inner.started = true;
                inner.enabled_start = now;
                // The thread's time on CPU counts from now, not from its switch-in.
                if inner.on_cpu == Some(glue::this_cpu()) {
                    inner.run_base = glue::current_runtime_ns();
                }
            }
            inner.state = next;
            Ok(())
        })
    }

    /// `PFM_IOC_STOP`.
    pub(crate) fn stop(&self) -> Result {
        self.with_live(|inner, now| -> Result {
            let next = inner.state.next(Op::Stop).map_err(state_err)?;
            inner.stop_clock(now);
            inner.started = false;
            inner.state = next;
            Ok(())
        })
    }

    /// `PFM_IOC_RESTART`: leave MASKED, apply the long reset.
    pub(crate) fn restart(&self) -> Result {
        let width = globals().pmu.width;
        self.with_live(|inner, _| -> Result {
            let next = inner.state.next(Op::Restart).map_err(state_err)?;
            inner.hw_resume = None;
            for pmd in inner.pmds.iter_mut() {
                if pmd.flags & abi::PFM_REGFL_OVFL_NOTIFY != 0 {
                    let reset = pmd.long_reset;
                    pmd.write(reset, width);
                    pmd.last_reset = reset;
                }
            }
            if inner.on_cpu == Some(glue::this_cpu()) {
                inner.run_base = glue::current_runtime_ns();
            }
            inner.state = next;
            Ok(())
        })?;
        // A thread blocked on the overflow resumes.
        self.wake();
        Ok(())
    }

    /// `PFM_IOC_LOAD`.
    pub(crate) fn load(self: &Arc<Self>, arg: &abi::PfmLoad) -> Result {
        if arg.flags != 0 || arg.reserved != [0; 3] {
            return Err(EINVAL);
        }
        {
            let inner = self.inner.lock();
            inner.state.next(Op::Load).map_err(state_err)?;
        }
        pfm_ctxsw::attach(self, arg.tid)
    }

    /// `PFM_IOC_UNLOAD`.
    pub(crate) fn unload(self: &Arc<Self>) -> Result {
        pfm_ctxsw::detach(self)
    }

    /// Tool side of `release`: free now, or leave a zombie for the target.
    pub(crate) fn close(self: &Arc<Self>) {
        pfm_ctxsw::close(self);
    }

    /// Resets what a new attachment starts from.
    pub(crate) fn reset_for_load(inner: &mut CtxInner, tid: u32) {
        inner.tid = tid;
        inner.hw_resume = None;
        inner.exited = false;
        inner.active = false;
        inner.on_cpu = None;
        inner.last_cpu = -1;
        inner.started = false;
        inner.time_enabled = 0;
        inner.time_running = 0;
        inner.exec_check = false;
        inner.msgs.clear();
    }
}

#[pinned_drop]
impl PinnedDrop for Context {
    fn drop(self: Pin<&mut Self>) {
        globals().live_contexts.fetch_sub(1, Ordering::Relaxed);
    }
}
