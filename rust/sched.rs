// SPDX-License-Identifier: GPL-2.0

//! The scheduler: preempt notifiers (a task's switch-in and switch-out
//! callbacks), the thread's CPU time as the scheduler accounts it, and
//! holding a blocked thread off every CPU to act on it from outside.

use core::marker::PhantomData;

use kernel::bindings;
use kernel::prelude::*;
use kernel::types::Opaque;

use super::{ffi, now_ns};

/// What a [`PreemptNotifier`] calls. Both run in the scheduler with the
/// runqueue lock held and interrupts off: nothing may sleep or wake a task.
pub(crate) trait PreemptNotify: Sized {
    /// The thread is switched in on `cpu` (this CPU).
    fn sched_in(&self, cpu: i32);
    /// The thread is switched out (for the last time if it is dying).
    fn sched_out(&self);
}

/// Says where a type keeps its [`PreemptNotifier`].
///
/// # Safety
///
/// `OFFSET` must be the offset of a field of type `PreemptNotifier<Self>`.
pub(crate) unsafe trait HasPreemptNotifier: Sized {
    /// Offset of the field.
    const OFFSET: usize;
}

/// A `struct preempt_notifier` embedded in a `T`.
///
/// # Invariants
///
/// `raw.ops` points to `Self::OPS`, whose callbacks find the `T` at
/// `OFFSET` before the notifier.
#[repr(C)]
#[pin_data]
pub(crate) struct PreemptNotifier<T> {
    #[pin]
    raw: Opaque<bindings::preempt_notifier>,
    _owner: PhantomData<T>,
}

impl<T: PreemptNotify + HasPreemptNotifier> PreemptNotifier<T> {
    const OPS: bindings::preempt_ops = bindings::preempt_ops {
        sched_in: Some(Self::sched_in),
        sched_out: Some(Self::sched_out),
    };

    /// A notifier on no task's list.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            // INVARIANT: `ops` is `OPS`; the link is unused until registration.
            raw <- Opaque::ffi_init(|n: *mut bindings::preempt_notifier| {
                // SAFETY: `n` is valid for writes.
                unsafe {
                    n.write(bindings::preempt_notifier {
                        link: bindings::hlist_node {
                            next: core::ptr::null_mut(),
                            pprev: core::ptr::null_mut(),
                        },
                        ops: &Self::OPS as *const _ as *mut _,
                    })
                }
            }),
            _owner: PhantomData,
        })
    }

    /// Puts the notifier on the calling thread's list.
    ///
    /// # Safety
    ///
    /// `self` is inside a `T` that stays alive (and pinned) until
    /// [`PreemptNotifier::unregister`]; not registered already. The
    /// preempt-notifier key must be raised ([`PreemptNotifierKey`]).
    pub(crate) unsafe fn register(&self) {
        // SAFETY: The caller's guarantees; we run in the owning task.
        unsafe { bindings::preempt_notifier_register(self.raw.get()) };
    }

    /// Puts the notifier on the list of `pinned`'s thread, which is held off
    /// every CPU: nothing walks its list until it is woken, after this.
    ///
    /// # Safety
    ///
    /// As for [`PreemptNotifier::register`], for `pinned`'s thread.
    pub(crate) unsafe fn register_on(&self, pinned: &Blocked<'_>) {
        // SAFETY: The caller's guarantees; the list is not walked while the
        // thread is pinned (`with_blocked`).
        unsafe { ffi::pfm_preempt_notifier_add(pinned.task, self.raw.get()) };
    }

    /// Takes the notifier off its thread's list.
    ///
    /// # Safety
    ///
    /// Registered; called in that thread, with the thread held off every
    /// CPU ([`with_blocked`]), or once the thread has done its final switch
    /// (nothing walks its list any more).
    pub(crate) unsafe fn unregister(&self) {
        // SAFETY: The caller's guarantees.
        unsafe { bindings::preempt_notifier_unregister(self.raw.get()) };
    }

    /// The `T` around `notifier`.
    ///
    /// # Safety
    ///
    /// `notifier` is the `raw` field of a registered `PreemptNotifier<T>`,
    /// whose `T` is alive (registration's contract).
    unsafe fn owner<'a>(notifier: *mut bindings::preempt_notifier) -> &'a T {
        // `raw` is the first field of the `repr(C)` notifier, at `OFFSET` in `T`.
        let owner = notifier.cast::<u8>().wrapping_sub(T::OFFSET).cast::<T>();
        // SAFETY: The caller's guarantee.
        unsafe { &*owner }
    }

    unsafe extern "C" fn sched_in(notifier: *mut bindings::preempt_notifier, cpu: c_int) {
        // SAFETY: The scheduler passes a registered notifier of ours.
        unsafe { Self::owner(notifier) }.sched_in(cpu)
    }

    unsafe extern "C" fn sched_out(
        notifier: *mut bindings::preempt_notifier,
        _next: *mut bindings::task_struct,
    ) {
        // SAFETY: As for `sched_in`.
        unsafe { Self::owner(notifier) }.sched_out()
    }
}

use kernel::ffi::c_int;

/// Implements [`HasPreemptNotifier`] for a field.
macro_rules! impl_has_preempt_notifier {
    ($(impl$({$($generics:tt)*})? HasPreemptNotifier for $self:ty { self.$field:ident })*) => {$(
        // SAFETY: The closure checks the field's type; `offset_of!` its place.
        unsafe impl$(<$($generics)+>)? $crate::rust::HasPreemptNotifier for $self {
            const OFFSET: usize = {
                fn _check$(<$($generics)+>)?(s: &$self) -> &$crate::rust::PreemptNotifier<$self> { &s.$field }
                ::core::mem::offset_of!(Self, $field)
            };
        }
    )*};
}
pub(crate) use impl_has_preempt_notifier;

/// The current thread's scheduler runtime in ns, live: its
/// `se.sum_exec_runtime` plus what it ran since the scheduler last updated
/// it (`exec_start` is on the `local_clock` time base, as `rq->clock` is).
/// Call with IRQs off (this CPU's scheduler then cannot run).
///
/// Another CPU may update the two fields meanwhile (a wake-up onto this
/// runqueue runs `update_curr` on its current task under the runqueue lock,
/// which this path does not hold): a pair read across that update is off by
/// the time since the previous one, up to a tick (seen: a mapped page and a
/// READ_VALUES 0.8 ms ahead of the thread's own clock). So the pair is read
/// until both fields read the same twice in a row (a few tries).
///
/// Where counting starts (START, RESTART, an install): a base above the
/// slice's end that a pending reschedule may stamp (see
/// [`current_runtime_and_clock`]) counts nothing of the stretch, the
/// switch-out then counting from the scheduler's end; one below it would
/// count time from before the start.
pub(crate) fn current_runtime_ns() -> u64 {
    current_live_runtime_and_clock().0
}

/// The thread's runtime for a fold (what task-clock counts up to) and
/// the `local_clock` time it was taken at.
///
/// No more than the scheduler will account: while a reschedule
/// is pending, the slice may already have ended. A wake-up that preempts
/// the thread (`wakeup_preempt`) accounts it (`update_curr`), sets
/// need_resched and asks `__schedule` to skip its own clock update
/// (`rq_clock_skip_update`): the slice ends at that wake-up, and what the
/// thread runs until its switch is charged to no one. Counted live, that
/// time stayed counted, the switch-out's slice end being below it (seen:
/// task-clock 17% above the scheduler's runtime for a thread preempted
/// by a napping thread on its CPU while a timer and reads folded it;
/// `pfm_test_preempt`). So with need_resched set the runtime is
/// `sum_exec_runtime` as it stands, read after the flag: a wake-up that
/// comes after the flag's test accounted the thread up to itself, later
/// than the live reading, so that is no more than the scheduler accounts
/// either. A reschedule asked by the tick (its `update_curr` just ran)
/// ends the slice at `__schedule`: reading less here, the switch-out
/// counts the rest. (One instant escapes the test: a fold between a
/// remote `update_curr` and the `resched_curr` after it reads the
/// nanoseconds between the two past the slice's end.)
#[inline]
pub(crate) fn current_runtime_and_clock() -> (u64, u64) {
    let (live, now) = current_live_runtime_and_clock();
    if current_need_resched() {
        return (current_sum_exec_runtime(), now);
    }
    (live, now)
}

/// `test_tsk_need_resched(current)`: the flags word of its `thread_info`
/// (the task's first member; its offset checked by `pfm_c_layout`).
#[inline(always)]
fn current_need_resched() -> bool {
    let current = super::current_ptr();
    // SAFETY: The current task's flags word, read once (`READ_ONCE`):
    // other CPUs set bits in it atomically.
    let flags =
        unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*current).thread_info.flags)) };
    flags & (1 << bindings::TIF_NEED_RESCHED) != 0
}

/// [`current_runtime_ns`] and the `local_clock` time it was taken at:
/// the runtime as `task_sched_runtime` would give it now (what a reader
/// of the mapped page extends; see `current_runtime_and_clock` for what a
/// fold may count).
#[inline(always)]
fn current_live_runtime_and_clock() -> (u64, u64) {
    let current = super::current_ptr();
    let mut pair = (0, 0);
    for _ in 0..4 {
        // SAFETY: `current` is a valid task; its `se` fields are read
        // once each (`READ_ONCE`), racing only with the scheduler's own
        // updates, which the loop detects.
        let (s1, e1, s2, e2) = unsafe {
            let se = core::ptr::addr_of!((*current).se);
            (
                core::ptr::read_volatile(core::ptr::addr_of!((*se).sum_exec_runtime)),
                core::ptr::read_volatile(core::ptr::addr_of!((*se).exec_start)),
                core::ptr::read_volatile(core::ptr::addr_of!((*se).sum_exec_runtime)),
                core::ptr::read_volatile(core::ptr::addr_of!((*se).exec_start)),
            )
        };
        pair = (s2, e2);
        if s1 == s2 && e1 == e2 {
            break;
        }
    }
    let now = now_ns();
    // ns since boot: no wrap for 584 years (no overflow check to pay).
    (pair.0.wrapping_add(now.saturating_sub(pair.1)), now)
}

/// The current thread's `se.sum_exec_runtime`: exact at a switch-in (the
/// start of its time slice) and at a switch-out (the scheduler has just
/// accounted the slice); stale by up to a tick in between.
pub(crate) fn current_sum_exec_runtime() -> u64 {
    // SAFETY: As for `current_runtime_and_clock`.
    unsafe {
        let current = super::current_ptr();
        core::ptr::read_volatile(core::ptr::addr_of!((*current).se.sum_exec_runtime))
    }
}

/// The current thread's page faults, minor and major (`min_flt`,
/// `maj_flt`: what `getrusage(RUSAGE_THREAD)` reports), since it was
/// created (`copy_mm` zeroes them in every new task). Through C, as the
/// switch count: bindgen's `task_struct` is not this compiler's past the
/// fields `pfm_c_layout` checks.
pub(crate) fn current_faults() -> [u64; 2] {
    // SAFETY: The current task's own counters, read by itself: only its
    // own faults (`mm_account_fault`, in its own context) change them.
    unsafe {
        [
            ffi::pfm_current_min_flt() as u64,
            ffi::pfm_current_maj_flt() as u64,
        ]
    }
}

/// [`current_faults`] of another thread, for a base taken while it is off
/// every CPU (it takes no fault there: exact).
pub(crate) fn task_faults(task: &kernel::task::Task) -> [u64; 2] {
    let t = super::task_ptr(task);
    // SAFETY: Reads two fields of a live task (a reference to it exists),
    // once each (`READ_ONCE`).
    unsafe {
        [
            ffi::pfm_task_min_flt(t) as u64,
            ffi::pfm_task_maj_flt(t) as u64,
        ]
    }
}

/// Whether `task` is still on a CPU, its last switch not complete
/// (`smp_load_acquire(&task->on_cpu)`).
pub(crate) fn task_on_cpu(task: &kernel::task::Task) -> bool {
    // SAFETY: Reads one field of a live task (a reference to it exists).
    unsafe { ffi::pfm_task_on_cpu(super::task_ptr(task)) }
}

/// The current thread's context switches (`nvcsw + nivcsw`, what
/// `getrusage(RUSAGE_THREAD)` reports) and migrations (`se.nr_migrations`)
/// since it was created: what a thread monitored from its birth has
/// counted before its monitoring could be installed.
pub(crate) fn current_switches_and_migrations() -> (u64, u64) {
    let current = super::current_ptr();
    // SAFETY: The current task's own counters, read by itself (only its
    // own switches and migrations change them).
    unsafe {
        (
            ffi::pfm_current_switches() as u64,
            (*current).se.nr_migrations,
        )
    }
}

/// A thread [`with_blocked`] holds off every CPU.
///
/// # Invariants
///
/// `task` is a live task, blocked, its last switch-out complete and its
/// `pi_lock` held for as long as this exists (only inside `with_blocked`).
pub(crate) struct Blocked<'a> {
    task: *mut bindings::task_struct,
    _task: PhantomData<&'a kernel::task::Task>,
}

impl Blocked<'_> {
    /// The CPU it last ran on.
    pub(crate) fn cpu(&self) -> i32 {
        // SAFETY: A live task (type invariant).
        unsafe { ffi::pfm_task_cpu(self.task) as i32 }
    }

    /// Whether it is inside an `execve()` (`in_execve`): it may commit
    /// new credentials and return to user mode without a switch.
    pub(crate) fn in_execve(&self) -> bool {
        // SAFETY: A live task (type invariant); only the task itself
        // writes the bit.
        unsafe { ffi::pfm_task_in_execve(self.task) }
    }

    /// Its scheduler runtime (`se.sum_exec_runtime`), which does not move
    /// while it is held.
    pub(crate) fn runtime(&self) -> u64 {
        // SAFETY: A live task (type invariant); only its own switches and
        // ticks update the field, and it is not on any CPU.
        unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*self.task).se.sum_exec_runtime)) }
    }
}

/// Runs `f` with `task` held off every CPU, if it is blocked (asleep, or
/// stopped): its `pi_lock` held, so no wake-up can begin (`try_to_wake_up`
/// takes it first), and its last switch-out complete (`on_cpu` clear), so
/// nothing walks its preempt notifiers and its runtime, credentials and mm
/// stay as they are. `None`, without calling `f`, if it is running,
/// runnable, being woken or dead. This is the blocked case of the
/// scheduler's own `task_call_func`, which modules cannot call: it lets a
/// LOAD or UNLOAD of a sleeping thread act at once instead of waking the
/// thread to act itself. `f` runs with interrupts off under a raw lock.
pub(crate) fn with_blocked<R>(
    task: &kernel::task::Task,
    f: impl FnOnce(&Blocked<'_>) -> R,
) -> Option<R> {
    let p = super::task_ptr(task);
    // SAFETY: A live task; released below.
    let flags = unsafe { ffi::pfm_task_pi_lock(p) };
    // SAFETY: A live task: the fields are read as `task_call_func` reads
    // them, the state before `on_rq` (a wake-up sets them in the other
    // order).
    let blocked = unsafe {
        let state = core::ptr::read_volatile(core::ptr::addr_of!((*p).__state));
        ffi::pfm_smp_rmb();
        let on_rq = core::ptr::read_volatile(core::ptr::addr_of!((*p).on_rq));
        state != bindings::TASK_RUNNING
            && state != bindings::TASK_WAKING
            && state != bindings::TASK_DEAD
            && on_rq == 0
    };
    let r = blocked.then(|| {
        // Dequeued, but perhaps still finishing its switch-out, whose
        // notifier walk must be over (`try_to_wake_up` waits the same way).
        // SAFETY: A live task.
        while unsafe { ffi::pfm_task_on_cpu(p) } {
            // SAFETY: No preconditions.
            unsafe { ffi::pfm_cpu_relax() };
        }
        // INVARIANT: blocked, off every CPU, `pi_lock` held until `f`
        // returns.
        f(&Blocked {
            task: p,
            _task: PhantomData,
        })
    });
    // SAFETY: Taken above.
    unsafe { ffi::pfm_task_pi_unlock(p, flags) };
    r
}
