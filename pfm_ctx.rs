// SPDX-License-Identifier: GPL-2.0

//! The monitoring context: one per open of `/dev/perfmon`. It owns its
//! state (every change goes through the table of `pfm_state`), its
//! counters (one `Counters` value for whichever PMU model runs), its
//! messages and its time accounting. Each ioctl verb is a method here that
//! takes the lock once; the thread side (`pfm_ctxsw`) calls the methods of
//! `thread.rs` through its `Monitor` trait and never touches a field.
//!
//! Rooms: `regs.rs` the register array calls, `mailbox.rs` the messages
//! and the file's `read`/`poll`/`fasync`, `thread.rs` what the thread side
//! asks of a context.
//!
//! Locking: `Context::inner` is an IRQ-safe raw spinlock, taken from ioctls,
//! from the preempt notifiers (with the raw runqueue lock held, IRQs off) and
//! from IPIs: raw, so that it nests validly under the runqueue lock on
//! PREEMPT_RT too (`PROVE_RAW_LOCK_NESTING` checks it). Nothing that sleeps,
//! wakes a task or takes a `spinlock_t` runs under it. Lock order:
//! the registry before `Context::inner`.

use core::sync::atomic::Ordering;

use kernel::prelude::*;
use kernel::sync::Arc;

use crate::abi;
use crate::pfm_ctxsw::Attachment;
use crate::pfm_msgq::{MsgQueue, Ring};
use crate::pfm_state::{Lifecycle, Op, State, StateError};
use crate::pfm_x86::counters::Counters;
use crate::pfm_x86::soft::next_clock_overflow;
use crate::pfm_x86::ThreadDeltas;
use crate::rust::{self as glue, new_irq_raw_spinlock, InSlab, IrqRawSpinLock, SlabArc, SlabCache};
use crate::{ebadfd, globals};

mod clone;
mod control;
mod family;
mod faults;
mod life;
mod mailbox;
mod page;
mod parts;
mod regs;
mod sets;
mod smpl;
mod thread;

use family::Family;
use faults::{fold_faults, FaultBase};
use mailbox::{Mailbox, Reader};
use parts::Parts;
use sets::CtxSets;

/// The part of a context protected by its lock.
pub(crate) struct CtxInner {
    /// Where the context is in its life.
    life: Lifecycle,
    /// `PFM_CTXFL_*`.
    flags: u32,
    /// START issued and no STOP since.
    started: bool,
    /// The target has installed the context (its notifier is registered).
    active: bool,
    /// The target exited while attached.
    exited: bool,
    /// The thread's user registers may not be the loader's to see: it is
    /// in an exec whose credentials are not checked yet
    /// (`pfm_ctxsw::exec_hook`; overflows wait, without user IP), or its
    /// monitoring was revoked (until the next LOAD).
    exec_check: bool,
    /// `PFM_CTXFL_START_ON_EXEC`: loaded, waiting for the thread's exec.
    exec_armed: bool,
    /// This context armed its CPU's task-clock timer since it last
    /// released it (`sync_clock`): only then does a switch have a timer
    /// to release. Another owner may have taken the timer since (then
    /// the release finds it not ours and does nothing); never false while
    /// the timer names this context.
    clock_armed: bool,
    /// The counters, on the model the module runs.
    counters: Counters,
    /// PMDs written (PMD numbers are below `PFM_MAX_PMDS`, 32: a `u32`
    /// keeps the context in its slab class with the page pointer).
    used_pmds: u32,
    /// The thread side, while attached (and until its cleanup has run).
    attach: Option<Arc<Attachment<Context>>>,
    /// Monitored thread id in the loader's pid namespace.
    tid: u32,
    /// The CPU the target is running on right now, if it is.
    on_cpu: Option<i32>,
    /// The CPU the target last ran on while attached.
    last_cpu: i32,
    /// The thread's scheduler runtime (`se.sum_exec_runtime`, made live)
    /// when the counters were last advanced, or at its last switch-out:
    /// task-clock is this runtime, the thread CPU time
    /// `CLOCK_THREAD_CPUTIME_ID` reports. Only the thread's own running
    /// advances that runtime, so between a switch-out and the next
    /// switch-in it stays valid.
    run_base: u64,
    /// When the context was last started (caller's clock).
    enabled_start: u64,
    /// ns loaded and started, up to the last stop.
    time_enabled: u64,
    /// ns the thread ran while started.
    time_running: u64,
    /// Messages for the tool (the overflow ring is allocated when a PMD
    /// first asks for notification).
    msgs: MsgQueue<KBox<Ring>>,
    /// Whether a `read(2)` holds the messages.
    reader: Reader,
    /// Overflowed PMDs not yet handled by the overflow interrupt.
    pending_ovfl: u64,
    /// User instruction pointer of the thread when they overflowed.
    pending_ip: u64,
    /// What the context has beyond counting (`parts.rs`): the mapped
    /// page, event sets, a sampling buffer, a place in a whole program;
    /// each from the first call that asks for it on.
    parts: Option<KBox<Parts>>,
}

/// What a new context starts with: nothing for `open`, another context's
/// registers for `PFM_IOC_CLONE` (`clone.rs`).
struct Programming {
    flags: u32,
    used_pmds: u32,
    counters: Counters,
    /// Parts holding a copy of the source's event sets, or nothing.
    parts: Option<KBox<Parts>>,
}

impl Programming {
    /// A context never written to.
    fn blank() -> Result<Self> {
        Ok(Self {
            flags: 0,
            used_pmds: 0,
            counters: Counters::new(&globals().pmu)?,
            parts: None,
        })
    }
}

/// Maps a state-table refusal to its errno.
fn state_err(e: StateError) -> Error {
    match e {
        StateError::BadState => ebadfd(),
        StateError::Busy => EBUSY,
    }
}

impl CtxInner {
    /// The state.
    fn state(&self) -> State {
        self.life.get()
    }

    /// Goes where the table says `op` leads, keeping the zombie count.
    fn transition(&mut self, op: Op) -> Result<State> {
        let before = self.life.get();
        let after = self.life.apply(op).map_err(state_err)?;
        let zombies = &globals().zombies;
        match (before == State::Zombie, after == State::Zombie) {
            (false, true) => {
                zombies.fetch_add(1, Ordering::Relaxed);
            }
            (true, false) => {
                zombies.fetch_sub(1, Ordering::Relaxed);
            }
            _ => {}
        }
        Ok(after)
    }

    /// Whether the counters advance now.
    fn counting(&self) -> bool {
        self.state() == State::Loaded && self.started && self.active
    }

    /// Whether `att` is this context's attachment.
    fn owns(&self, att: &Attachment<Context>) -> bool {
        matches!(&self.attach, Some(a) if core::ptr::eq(&**a, att))
    }

    /// The PMU layer's name for this context: its attachment.
    fn owner_token(&self) -> *const () {
        self.attach
            .as_ref()
            .map_or(core::ptr::null(), |a| a.owner_token())
    }

    /// Advances the counters if the target runs on `cpu`, which must be
    /// this CPU: the target is then the current thread, and its scheduler
    /// runtime is what task-clock reads, no further than the scheduler
    /// will account (`current_runtime_and_clock`). A hardware model's
    /// counters are folded by taking them off the PMU; `sync_hw` puts them
    /// back after the caller's change. Returns the `local_clock` time now
    /// (the fold's own, when it folds: one clock read per call).
    fn fold_running(&mut self, cpu: i32) -> u64 {
        if self.on_cpu != Some(cpu) {
            return glue::now_ns();
        }
        let (runtime, now) = glue::current_runtime_and_clock();
        // A hardware model's counters leave the PMU first: the fold may
        // switch event sets, whose registers then go on instead.
        let ovfl = self.counters.uninstall_here(&globals().pmu);
        self.overflowed(ovfl);
        self.fold_to(runtime.max(self.page_promise()));
        now
    }

    /// Runs `op` on the live context (the thread runs on `cpu`, this CPU,
    /// or nowhere): counters advanced first, hardware counters put back
    /// (or not) after, as `op` left the state.
    fn live_op<R>(&mut self, cpu: i32, op: impl FnOnce(&mut Self, u64) -> R) -> R {
        let now = self.fold_running(cpu);
        let r = op(self, now);
        self.sync_hw();
        self.sync_clock();
        self.page_update();
        r
    }

    /// Keeps a hardware model's counters on this CPU's PMU exactly while
    /// the context counts and its thread runs here. Lock held (IRQs off).
    #[inline(always)]
    fn sync_hw(&mut self) {
        // The soft model puts nothing on a PMU: one test on its path.
        if !self.counters.read_only_where_running() {
            return;
        }
        if self.has_table() {
            return self.sync_hw_sets();
        }
        let (counting, on_cpu, owner) = (self.counting(), self.on_cpu, self.owner_token());
        let ovfl = self
            .counters
            .sync_here(&globals().pmu, counting, on_cpu, owner);
        self.overflowed(ovfl);
    }

    /// Keeps this CPU's task-clock timer armed, while the context counts
    /// and its thread runs here, for the first task-clock PMD to overflow:
    /// the soft model's counters raise no interrupt of their own, and
    /// without the timer a running thread's overflow would wait for its
    /// next switch or read (a sample's IP would be its switch's, not where
    /// the time went). Lock held (IRQs off), on this CPU.
    #[inline]
    fn sync_clock(&mut self) {
        let clock = self.counters.clock_pmds();
        let next = if clock != 0 && self.counting() && self.on_cpu == Some(glue::this_cpu()) {
            next_clock_overflow(self.counters.pmds(), clock)
        } else {
            None
        };
        match next {
            // Not sooner than perf's floor for its hrtimer events: a
            // shorter period is sampled less often, each fold then
            // crossing several periods (counts stay exact).
            Some(ns) => {
                self.clock_armed = true;
                globals()
                    .pmu
                    .clock_arm_here(self.owner_token(), ns.max(MIN_CLOCK_TIMER_NS));
            }
            // Nothing to release unless armed (the common case of every
            // switch-in: no counter near its overflow).
            None => self.release_clock_here(),
        }
    }

    /// Disarms this CPU's task-clock timer if this context armed it.
    #[inline(always)]
    fn release_clock_here(&mut self) {
        if self.clock_armed {
            self.clock_armed = false;
            globals().pmu.clock_release_here(self.owner_token());
        }
    }

    /// Advances the counters to the thread's scheduler runtime `runtime`.
    fn fold_to(&mut self, runtime: u64) {
        // Never back: a reading below the last (a reschedule asked without
        // accounting the thread: see `current_runtime_and_clock`) counts
        // nothing until the runtime passes the last again.
        let runtime = runtime.max(self.run_base);
        let ran = runtime - self.run_base;
        self.run_base = runtime;
        if self.counting() {
            self.time_running += ran;
            self.advance(&ThreadDeltas {
                task_clock: ran,
                ..ThreadDeltas::default()
            });
        }
    }

    /// A new thread's first count, in the thread (current) on `cpu`: the
    /// scheduler's events `d` it had before its install (its switches and
    /// migrations since creation) with its runtime since `run_base`, in
    /// one count, so that the entries of the periods they cross carry the
    /// values after both (with the runtime counted after the switches, an
    /// entry at a switch before the install carried a task-clock of 0).
    /// The runtime is the scheduler's as it stands (`sum_exec_runtime`, as
    /// of the thread's last switch-out or tick), the next fold counting the
    /// rest: a live reading here may count past the end of a slice a
    /// remote wake-up is ending (see `current_runtime_and_clock`), which
    /// the switch-out cannot take back (seen: an heir 7.3 µs above its
    /// traced life, `pfm_test_inherit`).
    fn count_since_creation(&mut self, cpu: i32, mut d: ThreadDeltas) {
        if self.on_cpu == Some(cpu) {
            let runtime = glue::current_sum_exec_runtime();
            let runtime = runtime.max(self.run_base);
            d.task_clock = runtime - self.run_base;
            self.run_base = runtime;
        }
        if self.counting() {
            self.time_running += d.task_clock;
            self.advance(&d);
        }
    }

    /// Applies `d` to every counter and records overflows. Called in the
    /// thread (current), while the context counts.
    fn advance(&mut self, d: &ThreadDeltas) {
        // A context without parts (the common case, on every switch) looks
        // at the parts pointer once.
        let Some(parts) = self.parts.as_deref_mut() else {
            let ovfl = self.counters.advance(d);
            return self.overflowed(ovfl);
        };
        // The thread's faults since the last fold, if they are counted
        // (`faults.rs`).
        let mut with_faults;
        let (d, faults) = match &mut parts.faults {
            FaultBase::At(base) => {
                with_faults = *d;
                fold_faults(base, &mut with_faults);
                (&with_faults, true)
            }
            FaultBase::Off => (d, false),
        };
        if parts.sets.as_deref().is_some_and(CtxSets::multiplexed) {
            return self.advance_sets(d);
        }
        // A sampling buffer takes an entry per period crossed. Only a
        // context that counts faults looks at them.
        let ovfl = match (parts.smpl.as_deref(), faults) {
            (Some(smpl), false) => self
                .counters
                .advance_each::<false>(d, |pmd, n, random| smpl.note_overflows(pmd, n, random)),
            (Some(smpl), true) => self
                .counters
                .advance_each::<true>(d, |pmd, n, random| smpl.note_overflows(pmd, n, random)),
            (None, false) => self.counters.advance(d),
            (None, true) => self.counters.advance_each::<true>(d, |_, _, _| {}),
        };
        self.overflowed(ovfl);
    }

    /// Records overflowed PMDs and raises the overflow interrupt, as a
    /// hardware PMU would; the interrupt handler does the rest
    /// ([`Context::overflow_interrupt`]). Runs on the thread's CPU, in the
    /// thread's context, with the lock held.
    #[inline]
    fn overflowed(&mut self, ovfl: u64) {
        // Checked here, inline: every switch and read asks, almost never
        // with an overflow.
        if ovfl != 0 {
            self.raise_overflow(ovfl);
        }
    }

    /// [`CtxInner::overflowed`]'s work, when there is some.
    #[cold]
    fn raise_overflow(&mut self, ovfl: u64) {
        // A hardware model's overflow counts since the last, once, to the
        // parts that use them (sampling's entries, the sets' overflow
        // switches).
        if self.has_parts() {
            self.hand_out_hw_tally();
        }
        // A sampling buffer takes each overflow as an entry; only what
        // needs more (a message, a full buffer, a reader to wake) goes on
        // to the interrupt.
        let ovfl = match self.smpl() {
            Some(_) => self.smpl_overflowed(ovfl),
            None => ovfl,
        };
        if ovfl == 0 {
            return;
        }
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
        if self.multiplexed() {
            self.sets_overflowed(ovfl);
        }
        if let Some(att) = &self.attach {
            if !crate::pfm_intr::raise(att) {
                att.irq_work_queue();
            }
        }
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
        let enabled = if self.started && self.state().is_attached() {
            self.time_enabled + now.saturating_sub(self.enabled_start)
        } else {
            self.time_enabled
        };
        enabled.max(self.time_running)
    }

    /// Resets what a new attachment starts from.
    fn reset_for_load(&mut self, tid: u32) {
        self.tid = tid;
        self.for_each_image(Counters::forget_placement);
        self.exited = false;
        self.active = false;
        self.on_cpu = None;
        self.last_cpu = -1;
        self.started = false;
        self.time_enabled = 0;
        self.time_running = 0;
        self.exec_check = false;
        self.arm_exec(self.flags & abi::PFM_CTXFL_START_ON_EXEC != 0);
        self.msgs.clear();
        self.page_update();
    }
}

// Memory per monitored thread (`make bench --only many`): a soft
// context, its counters inline and its message ring not yet allocated,
// packs 11 to a 4 KiB page in its own cache with the count before it
// (`rust/slab.rs`), and an attachment fits `kmalloc-192` with the `Arc`
// header. Without lock debugging, whose locks are larger.
#[cfg(not(CONFIG_DEBUG_LOCK_ALLOC))]
const _: () = assert!(core::mem::size_of::<Context>() + 8 <= 4096 / 11);
#[cfg(not(CONFIG_DEBUG_LOCK_ALLOC))]
const _: () = assert!(core::mem::size_of::<Attachment<Context>>() <= 192 - 8);

/// How many times [`Context::with_live`] tries to reach a running
/// thread's CPU.
const LIVE_TRIES: usize = 4;

/// The task-clock timer fires no sooner than this (ns) after it is armed:
/// perf's floor for its hrtimer-driven software events
/// (`perf_swevent_init_hrtimer`).
const MIN_CLOCK_TIMER_NS: u64 = 10_000;

/// A monitoring context.
#[pin_data(PinnedDrop)]
pub(crate) struct Context {
    /// A raw spinlock: the scheduler's callbacks take it under the runqueue
    /// lock. Nothing is allocated or freed under it, not even a `GFP_ATOMIC`
    /// allocation or a `kfree`: either may take the page allocator's
    /// `zone->lock` (a KASAN kernel's `kfree` grows its stack depot), a
    /// sleeping lock on PREEMPT_RT, which lockdep refuses under a raw one.
    /// What a change replaces is moved out and dropped after the guard.
    #[pin]
    inner: IrqRawSpinLock<CtxInner>,
    #[pin]
    mailbox: Mailbox,
}

// SAFETY: One cache, the globals', which outlive every context (each holds
// a module reference, through its file or its attachment).
unsafe impl InSlab for Context {
    fn slab() -> &'static SlabCache<Self> {
        &globals().contexts
    }
}

impl Context {
    /// A new, UNLOADED context.
    pub(crate) fn new() -> Result<SlabArc<Self>> {
        Self::new_programmed(Programming::blank()?)
    }

    /// A new, UNLOADED context with `p`'s flags and registers.
    fn new_programmed(p: Programming) -> Result<SlabArc<Self>> {
        let Programming {
            flags,
            used_pmds,
            counters,
            parts,
        } = p;
        let ctx = SlabArc::pin_init(pin_init!(Self {
            inner <- new_irq_raw_spinlock!(
                CtxInner {
                    life: Lifecycle::new(),
                    flags,
                    started: false,
                    active: false,
                    exited: false,
                    exec_check: false,
                    exec_armed: false,
                    clock_armed: false,
                    counters,
                    used_pmds,
                    attach: None,
                    tid: 0,
                    on_cpu: None,
                    last_cpu: -1,
                    run_base: 0,
                    enabled_start: 0,
                    time_enabled: 0,
                    time_running: 0,
                    msgs: MsgQueue::new(),
                    reader: Reader::Idle,
                    pending_ovfl: 0,
                    pending_ip: 0,
                    parts,
                },
                "perfmon_ctx"
            ),
            mailbox <- Mailbox::new(),
        }))?;
        globals().live_contexts.fetch_add(1, Ordering::Relaxed);
        Ok(ctx)
    }

    /// Runs `op` on the context where its thread's live counters are: on
    /// the target's CPU through an IPI if it runs elsewhere, here otherwise.
    /// `op` sees the counters advanced to the current time.
    ///
    /// A thread that keeps migrating could make us chase it forever: after
    /// a few tries, the soft model reads what was saved at its last switch
    /// (nothing counts behind our back: its counters advance only at its
    /// switches). A hardware model's counters are live on the other CPU's
    /// PMU, which only that CPU can stop or read: `EAGAIN` (STOP or UNLOAD
    /// run here would leave them counting until the thread's next switch).
    fn with_live<T: Send>(
        &self,
        mut op: impl FnMut(&mut CtxInner, u64) -> Result<T> + Send,
    ) -> Result<T> {
        for _ in 0..LIVE_TRIES {
            let target_cpu = {
                let mut inner = self.inner.lock();
                let cpu = glue::this_cpu();
                match inner.on_cpu {
                    Some(c) if c != cpu => c,
                    _ => return inner.live_op(cpu, &mut op),
                }
            };
            let mut result = None;
            let mut remote = || {
                let cpu = glue::this_cpu();
                let mut inner = self.inner.lock();
                // Only if the thread is still running here.
                if inner.on_cpu == Some(cpu) {
                    result = Some(inner.live_op(cpu, &mut op));
                }
            };
            if glue::call_on_cpu(target_cpu, &mut remote).is_ok() {
                if let Some(r) = result {
                    return r;
                }
            }
        }
        let mut inner = self.inner.lock();
        let cpu = glue::this_cpu();
        if inner.counters.read_only_where_running() && inner.on_cpu.is_some_and(|c| c != cpu) {
            return Err(EAGAIN);
        }
        inner.live_op(cpu, &mut op)
    }
}

#[pinned_drop]
impl PinnedDrop for Context {
    fn drop(self: Pin<&mut Self>) {
        self.inner.lock().arm_exec(false);
        globals().live_contexts.fetch_sub(1, Ordering::Relaxed);
    }
}
