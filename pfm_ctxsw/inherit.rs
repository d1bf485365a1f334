// SPDX-License-Identifier: GPL-2.0

//! Whole programs, the thread side: the fork tracepoint hands each new task
//! of a monitored thread to its context's family, and the exec tracepoint
//! starts a context armed for its thread's exec. Both probes run with
//! preemption disabled in the parent (fork) or the execing thread (exec),
//! for every task of the system: they cost one atomic load while no
//! context inherits or waits for an exec. What they start runs in a
//! task_work of the task concerned, in process context, before its next
//! (for a child: its first) instruction in user mode. The exit probe ends
//! a process monitored whole (`processes`).

use core::sync::atomic::Ordering;

use kernel::bindings;
use kernel::ffi::{c_char, c_int, c_void};
use kernel::prelude::*;
use kernel::sync::Arc;

use super::{release, Monitor};
use crate::globals;
use crate::rust::{
    self as glue, impl_has_task_work, ModuleRef, Notify, SlabArc, TaskWork, TaskWorkItem,
};

/// What a probe leaves for a task_work to do.
pub(super) enum Job<M: Monitor> {
    /// A new task joins this family.
    Adopt(Arc<M::Lineage>),
    /// This context's thread completed its exec: start it.
    StartOnExec(SlabArc<M>),
    /// The process of this key, which this family monitors whole, is gone
    /// (run at the exit of its last thread): its entry leaves the list
    /// (`processes`).
    ProcessGone(Arc<M::Lineage>, u64),
}

/// A probe's job, queued on the task it concerns.
#[pin_data]
pub(super) struct Deferred<M: Monitor> {
    #[pin]
    work: TaskWork<Self, 0>,
    job: Job<M>,
    /// Keeps the module loaded until the job has run.
    _module: ModuleRef,
}

impl_has_task_work! {
    impl{M: Monitor} HasTaskWork<0> for Deferred<M> { self.work }
}

// SAFETY: The task_work's head is touched only by the one `TaskWork::queue`
// whose exchange won and by the task_work list it is then on, until it has
// run; the job is `Send + Sync` (contexts and families are), and so is the
// module reference. A `Deferred` held in the list of processes monitored
// whole (`processes`) is shared between the LOAD that made it, the exit
// probe that queues it and the thread that runs it.
unsafe impl<M: Monitor> Send for Deferred<M> {}
// SAFETY: See `Send`.
unsafe impl<M: Monitor> Sync for Deferred<M> {}

impl<M: Monitor> Deferred<M> {
    /// `job`, ready to be queued (allocated with `flags`).
    pub(super) fn new(job: Job<M>, flags: kernel::alloc::Flags) -> Option<Arc<Self>> {
        // SAFETY: This module is live: we run its code.
        let module = unsafe { ModuleRef::try_get(crate::this_module()) }?;
        let init = pin_init!(Self {
            work <- TaskWork::new(),
            job,
            _module: module,
        });
        Arc::pin_init(init, flags).ok()
    }

    /// Queues `job` on `task`, from a probe (no sleeping allocation).
    /// Whether it was queued.
    fn queue(task: &kernel::task::Task, job: Job<M>) -> bool {
        let Some(d) = Self::new(job, GFP_ATOMIC) else {
            return false;
        };
        // Refused only if the task is past its exit's task_works: it will
        // never run user code.
        TaskWork::<Self, 0>::queue(&d, task, Notify::Resume).is_ok()
    }
}

impl<M: Monitor> TaskWorkItem<0> for Deferred<M> {
    fn run(this: Arc<Self>) {
        // A task killed before it ever ran runs its task_works from its
        // exit: nothing to monitor. A process's end runs from its last
        // thread's exit, by design.
        let exiting = glue::is_exiting(kernel::current!());
        match &this.job {
            Job::Adopt(lineage) if !exiting => M::adopt_current(lineage),
            Job::StartOnExec(ctx) if !exiting => ctx.start_on_exec(),
            Job::ProcessGone(lineage, key) => super::processes::unwatch::<M>(*key, lineage),
            _ => {}
        }
        // The last reference may go with the module's: return at once
        // (see `release`).
        drop(this);
    }
}

/// The context of the calling thread's live attachment, if any.
fn current_context<M: Monitor>() -> Option<SlabArc<M>> {
    let me = kernel::current!();
    let att = {
        let reg = M::registry().lock();
        let found = reg.of_task(&me).find(|a| a.life.wanted()).cloned();
        found
    }?;
    let ctx = att.ctx.clone();
    release(att);
    Some(ctx)
}

/// `sched_process_fork`: `parent` (current) created `child`, which has not
/// run yet. If `parent` is monitored by an inheriting context, or belongs
/// to a process a context monitors whole, the child is queued to join that
/// context's family; if that cannot be queued, the family counts a lost
/// thread.
///
/// # Safety
///
/// A `sched_process_fork` probe: `child` is a live task.
pub(crate) unsafe fn on_fork<M: Monitor>(child: *mut bindings::task_struct) {
    if globals().inheriting.load(Ordering::Relaxed) == 0 {
        return;
    }
    // SAFETY: The caller's guarantee.
    let child = unsafe { glue::task_from_ptr(child) };
    if !glue::is_user_thread(child) {
        return;
    }
    let lineage = match current_context::<M>() {
        Some(ctx) => ctx.lineage(),
        None => None,
    };
    let Some(lineage) = lineage.or_else(super::processes::lineage_of_current::<M>) else {
        return;
    };
    let lost = lineage.clone();
    if !Deferred::<M>::queue(child, Job::Adopt(lineage)) {
        M::lost_one(&lost);
    }
}

/// `sched_process_exec`: the calling thread completed an exec. A context
/// waiting for it (`PFM_CTXFL_START_ON_EXEC`) starts before the new
/// image's first instruction.
pub(crate) fn on_exec<M: Monitor>() {
    if globals().exec_armed.load(Ordering::Relaxed) == 0 {
        return;
    }
    let Some(ctx) = current_context::<M>() else {
        return;
    };
    if ctx.exec_armed() {
        let me = kernel::current!();
        // Queued with a reference to the context: it starts even if the
        // attachment goes meanwhile (as a START would fail then, so does it).
        let _ = Deferred::<M>::queue(&me, Job::StartOnExec(ctx));
    }
}

/// `task_rename` in an exec: the calling thread's exec has just passed
/// `perf_event_exec`, where perf's `enable_on_exec` starts counting, and
/// nothing between the two switches. A context waiting for the exec starts
/// counting the thread here (the rest, its family, when the exec is
/// complete: `on_exec`). Renames outside an exec (`PR_SET_NAME`, a write
/// to `/proc/PID/comm`) are ignored.
fn on_exec_commit<M: Monitor>() {
    if globals().exec_armed.load(Ordering::Relaxed) == 0 || !glue::current_in_execve() {
        return;
    }
    if let Some(ctx) = current_context::<M>() {
        ctx.exec_committed();
    }
}

/// The fork probe's C signature.
///
/// # Safety
///
/// Called by the `sched_process_fork` tracepoint only.
pub(crate) unsafe extern "C" fn fork_probe<M: Monitor>(
    _data: *mut c_void,
    _parent: *mut bindings::task_struct,
    child: *mut bindings::task_struct,
) {
    // SAFETY: The tracepoint passes the live child.
    unsafe { on_fork::<M>(child) };
}

/// The exec probe's C signature.
///
/// # Safety
///
/// Called by the `sched_process_exec` tracepoint only, in the execing task.
pub(crate) unsafe extern "C" fn exec_probe<M: Monitor>(
    _data: *mut c_void,
    _task: *mut bindings::task_struct,
    _old_pid: c_int,
    _bprm: *mut bindings::linux_binprm,
) {
    on_exec::<M>();
}

/// The exit probe's C signature.
///
/// # Safety
///
/// Called by the `sched_process_exit` tracepoint only, in the exiting task.
pub(crate) unsafe extern "C" fn exit_probe<M: Monitor>(
    _data: *mut c_void,
    _task: *mut bindings::task_struct,
) {
    super::processes::on_exit::<M>();
}

/// The rename probe's C signature.
///
/// # Safety
///
/// Called by the `task_rename` tracepoint only.
pub(crate) unsafe extern "C" fn rename_probe<M: Monitor>(
    _data: *mut c_void,
    task: *mut bindings::task_struct,
    _comm: *const c_char,
) {
    // An exec renames the execing thread itself.
    if task == glue::current_ptr() {
        on_exec_commit::<M>();
    }
}
