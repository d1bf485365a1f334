// SPDX-License-Identifier: GPL-2.0

//! Tasks: finding one by thread id, the few facts read off one, and typed
//! task_works (`task_work_add`), which run a callback in the task itself on
//! its way back to user mode or at its exit.

use core::marker::PhantomData;
use core::sync::atomic::{AtomicPtr, Ordering};

use kernel::bindings;
use kernel::ffi::{c_int, c_void};
use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::task::Task;
use kernel::types::{ARef, Opaque};

use super::ffi;

/// The C task behind `task`.
pub(crate) fn task_ptr(task: &Task) -> *mut bindings::task_struct {
    task as *const Task as *mut bindings::task_struct
}

/// Whether `task` is the calling thread.
pub(crate) fn is_current(task: &Task) -> bool {
    let me = kernel::current!();
    core::ptr::eq(&*me, task)
}

/// Finds the task with thread id `tid` in the caller's pid namespace
/// (`ESRCH` if there is none).
pub(crate) fn find_task(tid: u32) -> Result<ARef<Task>> {
    let nr = i32::try_from(tid).map_err(|_| ESRCH)?;
    // SAFETY: `find_get_pid` takes a reference on the pid it returns.
    let pid = unsafe { bindings::find_get_pid(nr) };
    if pid.is_null() {
        return Err(ESRCH);
    }
    // SAFETY: `pid` is referenced; `get_pid_task` returns a referenced task or NULL.
    let task = unsafe { bindings::get_pid_task(pid, bindings::pid_type_PIDTYPE_PID) };
    // SAFETY: Drops the reference `find_get_pid` took.
    unsafe { bindings::put_pid(pid) };
    let task = core::ptr::NonNull::new(task.cast::<Task>()).ok_or(ESRCH)?;
    // SAFETY: `get_pid_task` took the reference this `ARef` now owns.
    Ok(unsafe { ARef::from_raw(task) })
}

/// `task->flags`, read once.
fn task_flags(task: &Task) -> u32 {
    // SAFETY: `task` is a live task (a reference to it exists); `flags` is
    // read racily, as the kernel's own `PF_*` tests of other tasks do.
    unsafe { core::ptr::read_volatile(&(*task_ptr(task)).flags) }
}

/// Whether `task` is a kernel thread.
pub(crate) fn is_kthread(task: &Task) -> bool {
    task_flags(task) & bindings::PF_KTHREAD != 0
}

/// Whether `task` is exiting (`PF_EXITING`): exact in the task itself
/// (a task_work run from `exit_task_work` sees it set).
pub(crate) fn is_exiting(task: &Task) -> bool {
    task_flags(task) & bindings::PF_EXITING != 0
}

/// Whether the current thread, exiting, has begun to tear down its user
/// state: `exit_mm` has started releasing its futexes (`futex_state` left
/// `FUTEX_STATE_OK`) or its address space (`mm` cleared). For its own
/// scheduler callbacks: perf_events stops counting a thread in
/// `perf_event_exit_task`, just before `exit_mm` in `do_exit`, so the
/// switches of the exit path up to there count for both and none after.
/// `PF_EXITING` alone would stop earlier, at `exit_signals`, before the
/// exit's itimer, accounting and taskstats steps, which can sleep.
pub(crate) fn current_is_tearing_down() -> bool {
    let me = super::current_ptr();
    // SAFETY: `current` is a valid task; only the task itself sets
    // `PF_EXITING` in its own flags, clears its `mm` (`exit_mm`) and moves
    // its `futex_state` on from OK (`futex_cleanup_begin`), so each field
    // read is one the thread itself last wrote.
    unsafe {
        let flags = core::ptr::read_volatile(core::ptr::addr_of!((*me).flags));
        if flags & bindings::PF_EXITING == 0 {
            // An exec moves `futex_state` on and back too.
            return false;
        }
        let mm = core::ptr::read_volatile(core::ptr::addr_of!((*me).mm));
        let futex = core::ptr::read_volatile(core::ptr::addr_of!((*me).futex_state));
        mm.is_null() || futex != FUTEX_STATE_OK
    }
}

/// Whether the current thread is inside an `execve()` (`in_execve`, set by
/// `bprm_execve` from the new credentials' preparation to the exec's end).
pub(crate) fn current_in_execve() -> bool {
    // SAFETY: `current` is a valid task; only it writes the bit.
    unsafe { super::ffi::pfm_task_in_execve(super::current_ptr()) }
}

/// `FUTEX_STATE_OK` of include/linux/futex.h: the thread's futexes are
/// not being released.
const FUTEX_STATE_OK: core::ffi::c_uint = 0;

/// Whether `task` is being switched out for the last time (`TASK_DEAD`).
///
/// # Safety
///
/// Must be called from a scheduler callback of `task` (its state is the
/// one the scheduler is acting on).
pub(crate) unsafe fn is_dying(task: &Task) -> bool {
    // SAFETY: The caller's guarantee; `__state` is what the scheduler reads.
    unsafe { (*task_ptr(task)).__state == bindings::TASK_DEAD }
}

/// Whether the current thread is still runnable as the scheduler switches
/// it out: preempted (or yielding), not blocking. For a sched-out
/// notifier, which runs in the outgoing thread.
pub(crate) fn current_is_runnable() -> bool {
    // SAFETY: `current` is a valid task; its `__state` is read once, as
    // the scheduler reads it.
    unsafe {
        core::ptr::read_volatile(core::ptr::addr_of!((*super::current_ptr()).__state))
            == bindings::TASK_RUNNING
    }
}

/// How a queued task_work reaches a task that is not returning to user
/// mode on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Notify {
    /// At its next return to user mode, whenever that is (`TWA_RESUME`).
    Resume,
    /// Kicked out of an interruptible sleep as a signal would
    /// (`TWA_SIGNAL`).
    Signal,
}

/// Why a task_work was not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// It is already queued and has not started running.
    AlreadyQueued,
    /// The task is past `exit_task_work()`: nothing runs there any more.
    TaskGone,
}

/// A task_work embedded in a `T`, queued with one `Arc<T>` reference that
/// the callback gets back ([`TaskWorkItem::run`]). `ID` tells several works
/// of one type apart.
///
/// Whether it is queued is `head.func` itself: set (to the trampoline) by
/// the one `queue` that wins, cleared by the trampoline once
/// `task_work_run` has unlinked the work and read `func`. While the work is
/// on a task's list nothing writes `func` (a losing `queue`'s exchange
/// fails without a store), so the kernel's own plain reads of it (a
/// `task_work_cancel_func` scanning the list) race with nothing. An
/// attachment has four of these: no flag of their own keeps each at the
/// 16 bytes of a `callback_head`.
///
/// # Invariants
///
/// `head.func` is [`TaskWork::trampoline`] exactly while `head` is on a
/// task's list (or being put there by `queue`), and a leaked `Arc<T>`
/// reference is held for it then; `None` otherwise.
#[repr(C)]
#[pin_data]
pub(crate) struct TaskWork<T, const ID: u64 = 0> {
    #[pin]
    head: Opaque<bindings::callback_head>,
    _owner: PhantomData<T>,
}

/// What runs when a [`TaskWork`] of `Self` with this `ID` runs.
pub(crate) trait TaskWorkItem<const ID: u64 = 0>: Sized {
    /// Runs in the task the work was queued on (process context, no lock
    /// held), with the reference that queued it.
    fn run(this: Arc<Self>);
}

/// Says where a type keeps its [`TaskWork`] with `ID`.
///
/// # Safety
///
/// `OFFSET` must be the offset of a field of type `TaskWork<Self, ID>`;
/// use [`impl_has_task_work`].
pub(crate) unsafe trait HasTaskWork<const ID: u64 = 0>: Sized {
    /// Offset of the field.
    const OFFSET: usize;

    /// The work inside `self`.
    fn task_work(&self) -> &TaskWork<Self, ID> {
        let base = self as *const Self as *const u8;
        // SAFETY: `OFFSET` is the offset of a `TaskWork<Self, ID>` field
        // (trait contract), inside `self`.
        unsafe { &*base.add(Self::OFFSET).cast::<TaskWork<Self, ID>>() }
    }
}

/// Implements [`HasTaskWork`] for a field.
macro_rules! impl_has_task_work {
    ($(impl$({$($generics:tt)*})? HasTaskWork<$id:tt> for $self:ty { self.$field:ident })*) => {$(
        // SAFETY: `offset_of!` names a field the compiler checks has the
        // right type through `task_work`'s cast only if it is one: the
        // field must be declared as `TaskWork<Self, $id>`.
        unsafe impl$(<$($generics)+>)? $crate::rust::HasTaskWork<$id> for $self {
            const OFFSET: usize = {
                // Type check: the field is a `TaskWork<Self, $id>`.
                fn _check$(<$($generics)+>)?(s: &$self) -> &$crate::rust::TaskWork<$self, $id> { &s.$field }
                ::core::mem::offset_of!(Self, $field)
            };
        }
    )*};
}
pub(crate) use impl_has_task_work;

impl<T: HasTaskWork<ID> + TaskWorkItem<ID>, const ID: u64> TaskWork<T, ID> {
    /// A work not queued anywhere.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            // INVARIANT: not queued, so no `func`.
            head <- Opaque::ffi_init(|w: *mut bindings::callback_head| {
                // SAFETY: `w` is valid for writes.
                unsafe {
                    w.write(bindings::callback_head {
                        next: core::ptr::null_mut(),
                        func: None,
                    })
                }
            }),
            _owner: PhantomData,
        })
    }

    /// `head.func`, as the queued flag (see the type's comment).
    fn func(&self) -> &AtomicPtr<c_void> {
        // SAFETY: `func` is a pointer-sized, pointer-aligned field (an
        // `Option` of a function pointer is a nullable pointer) of the
        // pinned `head`, which lives as long as `self`. Rust writes it only
        // through this atomic view; see the type's comment for C's reads.
        unsafe { AtomicPtr::from_ptr(core::ptr::addr_of_mut!((*self.head.get()).func).cast()) }
    }

    /// Whether the work is queued and has not started running.
    pub(crate) fn is_queued(&self) -> bool {
        !self.func().load(Ordering::Acquire).is_null()
    }

    /// Queues `this`'s work on `task`. On refusal nothing is queued and
    /// no reference is kept.
    pub(crate) fn queue(this: &Arc<T>, task: &Task, notify: Notify) -> Result<(), Refused> {
        let work = this.task_work();
        let trampoline: unsafe extern "C" fn(*mut bindings::callback_head) = Self::trampoline;
        if work
            .func()
            .compare_exchange(
                core::ptr::null_mut(),
                trampoline as *mut c_void,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            return Err(Refused::AlreadyQueued);
        }
        // Queued from any context, hard IRQ included: never allocate.
        let mode: c_int = super::TWAF_NO_ALLOC
            | match notify {
                Notify::Resume => super::TWA_RESUME,
                Notify::Signal => super::TWA_SIGNAL,
            };
        // INVARIANT: the reference the list holds.
        let leaked = Arc::into_raw(this.clone());
        // SAFETY: The leaked reference keeps `head` alive until the callback
        // has run; `func`, set above by the one exchange that won, keeps it
        // from being queued twice.
        let ret = unsafe { ffi::task_work_add(task_ptr(task), work.head.get(), mode) };
        if ret < 0 {
            work.func().store(core::ptr::null_mut(), Ordering::Release);
            // SAFETY: Not queued: take the leaked reference back. The caller
            // holds another, so this is not the last.
            drop(unsafe { Arc::from_raw(leaked) });
            return Err(Refused::TaskGone);
        }
        Ok(())
    }

    /// What `task_work_run` calls.
    ///
    /// # Safety
    ///
    /// `head` is the `head` of a `TaskWork<T, ID>` in a live `T`, queued by
    /// [`TaskWork::queue`], and unlinked by `task_work_run`.
    unsafe extern "C" fn trampoline(head: *mut bindings::callback_head) {
        // `head` is the first field of the `repr(C)` `TaskWork`, which is
        // at `OFFSET` in a `T`.
        let owner = head.cast::<u8>().wrapping_sub(T::OFFSET).cast::<T>();
        // SAFETY: `queue` leaked this reference for the queued work.
        let this = unsafe { Arc::from_raw(owner) };
        // INVARIANT: off the task's list now (task_work_run unlinked it and
        // read `func` before calling us).
        this.task_work()
            .func()
            .store(core::ptr::null_mut(), Ordering::Release);
        T::run(this);
    }
}

/// The identity of `task`'s process (thread group): the address of its
/// `signal_struct`, which every thread of the process shares and which is
/// freed only with the last `task_struct` that refers to it
/// (`__put_task_struct`): while a reference on `task` is held, no other
/// process can have this key.
pub(crate) fn thread_group_key(task: &Task) -> u64 {
    // SAFETY: `task` is live (the caller holds it); its `signal` is set at
    // its creation and stays until it is freed.
    unsafe { ffi::pfm_thread_group_key(task_ptr(task)) as u64 }
}

/// In `do_exit` of the calling thread: whether no thread of its process is
/// live any more (the count `do_exit` decrements to find `group_dead`). A
/// process whose count reached 0 creates no thread again.
pub(crate) fn current_group_dead() -> bool {
    // SAFETY: The calling thread's `signal` is live while it runs.
    unsafe { ffi::pfm_current_group_dead() }
}

/// Whether `task` is a user thread: not a kernel thread nor an io_uring
/// worker (which never returns to user mode).
pub(crate) fn is_user_thread(task: &Task) -> bool {
    task_flags(task) & (bindings::PF_KTHREAD | bindings::PF_IO_WORKER) == 0
}

/// The task behind a C pointer the kernel handed us.
///
/// # Safety
///
/// `task` is a live task for at least `'a`.
pub(crate) unsafe fn task_from_ptr<'a>(task: *mut bindings::task_struct) -> &'a Task {
    // SAFETY: `Task` is a transparent wrapper of `task_struct`; the caller
    // guarantees it lives for `'a`.
    unsafe { &*task.cast::<Task>() }
}

/// A counted reference to a pid namespace: the one a tool's ids are in.
///
/// # Invariants
///
/// `0` is a pid namespace on which this value holds one reference.
pub(crate) struct PidNs(core::ptr::NonNull<bindings::pid_namespace>);

// SAFETY: A reference count; the namespace is only read through the
// kernel's functions, which any thread may call.
unsafe impl Send for PidNs {}
// SAFETY: See `Send`.
unsafe impl Sync for PidNs {}

impl PidNs {
    /// The calling thread's active pid namespace.
    pub(crate) fn of_current() -> Option<Self> {
        // SAFETY: The current task is live; its active namespace lives as
        // long as it does, and we take our own reference at once.
        let ns = unsafe { ffi::pfm_get_pid_ns(ffi::task_active_pid_ns(super::current_ptr())) };
        // INVARIANT: `pfm_get_pid_ns` took the reference we hold.
        core::ptr::NonNull::new(ns).map(Self)
    }

    /// `task`'s thread id and process id in this namespace (0 where it is
    /// not visible).
    pub(crate) fn ids_of(&self, task: &Task) -> (u32, u32) {
        let t = task_ptr(task);
        // SAFETY: `task` is live (a reference exists) and the namespace is
        // referenced (type invariant).
        let (tid, pid) = unsafe {
            (
                bindings::__task_pid_nr_ns(t, bindings::pid_type_PIDTYPE_PID, self.0.as_ptr()),
                bindings::__task_pid_nr_ns(t, bindings::pid_type_PIDTYPE_TGID, self.0.as_ptr()),
            )
        };
        (tid.max(0) as u32, pid.max(0) as u32)
    }
}

impl Drop for PidNs {
    fn drop(&mut self) {
        // SAFETY: The reference this value holds (type invariant).
        unsafe { ffi::pfm_put_pid_ns(self.0.as_ptr()) };
    }
}

/// Every thread of `task`'s process as it is now (referenced), `task`
/// included if it is alive.
pub(crate) fn process_threads(task: &Task) -> Result<KVec<ARef<Task>>> {
    let mut room = 16usize;
    loop {
        let mut ptrs: KVec<*mut bindings::task_struct> = KVec::with_capacity(room, GFP_KERNEL)?;
        let max = c_int::try_from(room).map_err(|_| ENOMEM)?;
        // SAFETY: `task` is live; `ptrs` has room for `max` pointers, and
        // the shim writes at most that many, each with a reference taken.
        let n = unsafe { ffi::pfm_process_threads(task_ptr(task), ptrs.as_mut_ptr(), max) };
        let n = usize::try_from(n).unwrap_or(0);
        let got = n.min(room);
        // SAFETY: The shim initialised the first `got` elements.
        unsafe { ptrs.set_len(got) };
        let mut threads = KVec::with_capacity(got, GFP_KERNEL);
        for &p in ptrs.iter() {
            // SAFETY: Each pointer carries the reference the shim took,
            // which the `ARef` now owns (dropped if the list is not kept).
            let t = unsafe { ARef::from_raw(core::ptr::NonNull::new_unchecked(p.cast::<Task>())) };
            if let Ok(v) = threads.as_mut() {
                let _ = KVec::push(v, t, GFP_ATOMIC);
            }
        }
        if n <= room {
            return threads.map_err(Error::from);
        }
        // Threads were created meanwhile: again, with room for them.
        room = n + 16;
    }
}

/// Whether `task` is stopped or traced (it runs nothing, task_works
/// included, until continued). Racy: a hint.
pub(crate) fn is_stopped(task: &Task) -> bool {
    // SAFETY: `task` is live (a reference exists); `__state` is read once.
    let state = unsafe { core::ptr::read_volatile(&(*task_ptr(task)).__state) };
    state & (bindings::__TASK_STOPPED | bindings::__TASK_TRACED) != 0
}
