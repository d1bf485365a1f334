// SPDX-License-Identifier: GPL-2.0

//! The thread side: one [`Attachment`] per (context, thread) pair, which
//! follows the thread through the scheduler (a preempt notifier), acts in
//! it (task_works: install, exec check, block, cleanup), defers out of the
//! scheduler (irq_work) and is freed by the reaper (a workqueue); the
//! registry of attachments; and the permission checks of LOAD.
//!
//! The thread side never touches a context's fields: it calls the
//! context's methods through [`Monitor`], which the context implements, so
//! calls go one way: the context drives its attachment, and C callbacks
//! enter here and are handed to the context.
//!
//! Lifetimes: a remote LOAD leaves the notifier registration to the target
//! itself (task_work), so that no remote hlist manipulation races the
//! scheduler; perfmon2 did the same with its `TIF_PERFMON_CTXSW` /
//! `TIF_NOTIFY_RESUME` dance. A closed context whose thread is still
//! running becomes a ZOMBIE (the LKML thread in `../shared/seed/`): the
//! thread frees it at its next return to user mode, or the reaper when the
//! thread exits first.

use core::sync::atomic::{AtomicPtr, Ordering};

use kernel::bindings;
use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::task::Task;
use kernel::types::ARef;

use crate::globals;
use crate::pfm_x86::HwClaim;
use crate::rust::{
    self as glue, impl_has_preempt_notifier, impl_has_task_work, CredFacts, CredRef, IrqWork,
    ModuleRef, Notify, PreemptNotifier, SlabArc, TaskWork, WorkLink, WorkListItem,
};

mod access;
mod attach;
mod inherit;
mod life;
mod monitor;
mod processes;
mod ptrace_rule;
mod registry;
mod switch;
mod works;

pub(crate) use access::{loader, may_load, may_open, Loader};
pub(crate) use attach::{attach, attach_heir, attach_heir_remote, let_go, monitored_by};
pub(crate) use inherit::{exec_probe, exit_probe, fork_probe, rename_probe};
use life::Life;
pub(crate) use monitor::Monitor;
pub(crate) use processes::{
    unwatch as unwatch_process, watch as watch_process, watched_processes, Processes,
};
pub(crate) use registry::Registry;
pub(crate) use works::exec_hook;

/// What an install found in the thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Monitor it.
    Proceed,
    /// Monitor it from where it sleeps: a remote LOAD holds it off every
    /// CPU (`rust::with_blocked`); it last ran on `cpu`, and has run
    /// `runtime` ns (its scheduler runtime).
    Blocked { cpu: i32, runtime: u64 },
    /// It lost the loader's access (an exec committed after LOAD's check).
    Lost,
    /// It is exiting and will not return to user mode.
    Exiting,
}

/// What an install did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Installed {
    /// Following the thread (the notifier is registered).
    Yes,
    /// The monitoring ended (revoked, or the thread exits).
    Ended,
    /// The context no longer wants this attachment.
    NotWanted,
}

/// Task_work ids of an attachment.
const INSTALL: u64 = 0;
const CLEANUP: u64 = 1;
const BLOCK: u64 = 2;
const EXEC: u64 = 3;

/// The credentials a thread monitored by an unprivileged loader must keep
/// (unused, without credentials, for a privileged one: see
/// [`Attachment::watch`]).
struct Watch {
    /// The loader's credentials at LOAD, against which ptrace's rule is
    /// decided again when the thread's change.
    loader: Option<CredRef>,
    /// The thread's real credentials as last found acceptable (a counted
    /// reference, so comparing addresses is exact: a freed credential's
    /// address cannot come back while we hold it). Replaced only by the
    /// thread itself in process context.
    cred_seen: AtomicPtr<bindings::cred>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        let cred = self.cred_seen.load(Ordering::Relaxed);
        if !cred.is_null() {
            // SAFETY: The reference `cred_seen` holds; an attachment is
            // dropped in process context (the reaper, or a file operation),
            // and a watch that never became one where it was made (LOAD).
            unsafe { glue::put_cred(cred) };
        }
    }
}

/// One context attached to one thread.
///
/// # Invariants
///
/// The notifier is on `task`'s list exactly while `life.on_list()`, and
/// then one `Arc` reference is held on behalf of the list.
#[pin_data(PinnedDrop)]
pub(crate) struct Attachment<M: Monitor> {
    #[pin]
    notifier: PreemptNotifier<Self>,
    #[pin]
    install_work: TaskWork<Self, INSTALL>,
    #[pin]
    cleanup_work: TaskWork<Self, CLEANUP>,
    #[pin]
    block_work: TaskWork<Self, BLOCK>,
    #[pin]
    exec_work: TaskWork<Self, EXEC>,
    #[pin]
    irq_work: IrqWork,
    /// Its place in the reaper's list (`Monitor::reaper`).
    reap_link: WorkLink,
    /// The monitored thread (a counted reference).
    task: ARef<Task>,
    /// The context (keeps a zombie's memory alive).
    ctx: SlabArc<M>,
    life: Life,
    /// What is watched, if `life` has `WATCHED` (not an `Option`, which
    /// would take 8 more bytes: see [`Attachment::watch`]).
    watch: Watch,
    /// The real uid of the loader (the per-user limit's account).
    owner_uid: u32,
    /// A hardware model's claim on the counters, taken when the attachment
    /// is published and given back at its drop.
    hw_claim: HwClaim,
    /// Keeps the module loaded while the thread may call into it.
    _module: ModuleRef,
}

crate::rust::impl_has_work_link! {
    impl{M: Monitor} HasWorkLink for Attachment<M> { self.reap_link }
}
impl_has_preempt_notifier! {
    impl{M: Monitor} HasPreemptNotifier for Attachment<M> { self.notifier }
}
impl_has_task_work! {
    impl{M: Monitor} HasTaskWork<0> for Attachment<M> { self.install_work }
    impl{M: Monitor} HasTaskWork<1> for Attachment<M> { self.cleanup_work }
    impl{M: Monitor} HasTaskWork<2> for Attachment<M> { self.block_work }
    impl{M: Monitor} HasTaskWork<3> for Attachment<M> { self.exec_work }
}

// SAFETY: The kernel objects inside are used only as the comments at their
// uses say (the notifier by its thread, the works by their queues); the
// rest is atomics and `Sync` types.
unsafe impl<M: Monitor> Send for Attachment<M> {}
// SAFETY: See `Send`.
unsafe impl<M: Monitor> Sync for Attachment<M> {}

impl<M: Monitor> Attachment<M> {
    /// What is watched: `None` if the loader is privileged.
    fn watch(&self) -> Option<&Watch> {
        self.life.has(Life::WATCHED).then_some(&self.watch)
    }

    /// Whether the attachment counts against its owner's per-user limit
    /// (`max_attached_per_user`): an unprivileged loader's, and every
    /// heir's. A privileged loader's own LOADs are not counted (perf's
    /// per-user limits exempt them too); the threads a monitored program
    /// creates are, whoever loaded it: that program, not the loader,
    /// decides how many there are, and it must not be able to take every
    /// registry slot from everyone (Documentation/perfmon.rst, Limits).
    fn counted(&self) -> bool {
        self.life.has(Life::WATCHED | Life::HEIR)
    }

    /// The monitored thread.
    pub(crate) fn task(&self) -> &Task {
        &self.task
    }

    /// The identity the PMU layer knows this attachment's context by.
    pub(crate) fn owner_token(&self) -> *const () {
        (self as *const Self).cast()
    }

    /// Queues the irq_work: the fallback of the overflow interrupt, and the
    /// deferral out of `sched_out`.
    pub(crate) fn irq_work_queue(&self) {
        self.irq_work.queue();
    }

    /// A hardware PMI on the CPU whose PMU holds this context (hard IRQ).
    pub(crate) fn hw_pmi(&self) {
        if self.revoked_in_interrupt() {
            return;
        }
        self.ctx.hw_pmi();
    }

    /// The multiplexing timer of the CPU whose PMU holds this context
    /// (hard IRQ).
    pub(crate) fn hw_mux(&self) {
        self.ctx.hw_mux();
    }

    /// The task-clock timer of the CPU this context's thread runs on
    /// (hard IRQ, the thread interrupted).
    pub(crate) fn clock_due(&self) {
        if self.revoked_in_interrupt() {
            return;
        }
        self.ctx.clock_due(self.owner_token());
    }

    /// In an interrupt of the thread (a PMI, its task-clock timer, the
    /// overflow vector), before anything is sampled or reported: ends the
    /// monitoring at once, and takes its counters and timer off this CPU,
    /// if the thread lost the loader's access since the last check. A
    /// setuid() without exec would otherwise be seen only at the thread's
    /// next switch, and every sample until then would record its IP and
    /// call chain for a loader that may no longer see them. Whether it
    /// ended. One address comparison when the credentials are unchanged.
    #[inline]
    fn revoked_in_interrupt(&self) -> bool {
        if self.watch().is_none() || !self.life.wanted() || !glue::is_current(&self.task) {
            return false;
        }
        // SAFETY: The thread is current on this CPU, interrupted: only it
        // changes its credentials, and its mm stays, until we return.
        if !unsafe { self.check_access() } {
            return false;
        }
        self.ctx.drop_hw_here(self.owner_token());
        true
    }

    /// Queues, once, the task_work that removes the notifier from the thread
    /// and frees what is left: a zombie, a detached or a revoked context's
    /// attachment. `prompt`: kick the thread out of an interruptible sleep
    /// (UNLOAD) instead of waiting for its return to user mode (the lazy
    /// cleanup of zombies).
    fn queue_cleanup(self: &Arc<Self>, prompt: bool) {
        let notify = if prompt {
            Notify::Signal
        } else {
            Notify::Resume
        };
        // Already queued: that run does everything. Refused because the
        // thread is past exit_task_work(): its final switch marks the
        // attachment dead and the reaper cleans up.
        let _ = TaskWork::<Self, CLEANUP>::queue(self, &self.task, notify);
    }

    /// The overflow interrupt of this attachment's context (hard IRQ).
    pub(crate) fn overflow_interrupt(self: &Arc<Self>) {
        if self.revoked_in_interrupt() {
            return;
        }
        if self.ctx.overflow_interrupt() {
            // Block the thread on its way back to user mode, until RESTART
            // (once: a queued block covers this overflow too).
            let _ = TaskWork::<Self, BLOCK>::queue(self, &self.task, Notify::Resume);
        }
    }

    /// Whether the thread's credentials are no longer ones the loader may
    /// monitor (a setuid exec, a setuid() to another user, capabilities
    /// gained): ptrace's rule (`__ptrace_may_access` and commoncap's
    /// `cap_ptrace_access_check`, [`access::allows`]) decided again on the
    /// thread's real credentials, for the loader's credentials as at LOAD.
    /// Cheap when nothing changed since the last check: one address
    /// comparison.
    ///
    /// # Safety
    ///
    /// Must run in `task` itself (in process context, or in an interrupt
    /// of it), in a scheduler callback of it, or with it held off every
    /// CPU (`rust::with_blocked`): its credentials and mm cannot change
    /// under us.
    unsafe fn lost_access(&self) -> bool {
        let Some(watch) = self.watch() else {
            return false;
        };
        let Some(loader) = &watch.loader else {
            return false;
        };
        let task = glue::task_ptr(&self.task);
        // SAFETY: The caller's guarantee: `task` is current, being switched
        // or held off every CPU.
        let cred = unsafe { glue::task_real_cred_ptr(task) };
        if cred == watch.cred_seen.load(Ordering::Relaxed) as *const _ {
            return false;
        }
        // SAFETY: `cred` is the thread's live real credentials, and its mm
        // cannot go away, for the duration of this call (see above).
        let (target, mm) = unsafe { (CredFacts::of(cred), glue::task_mm_facts(task)) };
        !access::allows(loader, target, mm)
    }

    /// The thread (current, process context) keeps its monitoring: remember
    /// its present credentials as checked.
    ///
    /// # Safety
    ///
    /// Must run in `task` itself, in process context.
    unsafe fn accept_current_cred(&self) {
        // SAFETY: The caller's guarantee.
        let old = unsafe { self.swap_cred_seen() };
        if !old.is_null() {
            // SAFETY: The reference the field held; process context.
            unsafe { glue::put_cred(old) };
        }
    }

    /// Remembers the thread's present real credentials as checked (a
    /// reference taken) and returns the ones remembered before (null, or a
    /// reference for the caller to put, in process context and without
    /// raw locks held: it may be the last).
    ///
    /// # Safety
    ///
    /// Must run in `task` itself, or with it held off every CPU
    /// (`rust::with_blocked`): its real credentials cannot change.
    unsafe fn swap_cred_seen(&self) -> *const bindings::cred {
        let Some(watch) = self.watch() else {
            return core::ptr::null();
        };
        let task = glue::task_ptr(&self.task);
        // SAFETY: The caller's guarantee: its real credentials are live.
        let cred = unsafe { glue::get_cred(glue::task_real_cred_ptr(task)) };
        watch.cred_seen.swap(cred as *mut _, Ordering::Relaxed)
    }

    /// Ends monitoring in a scheduler callback when the thread gained
    /// privileges; returns whether it did.
    ///
    /// # Safety
    ///
    /// As for [`Attachment::lost_access`].
    #[inline]
    unsafe fn check_access(&self) -> bool {
        // SAFETY: Forwarded.
        if self.watch().is_none() || !unsafe { self.lost_access() } {
            return false;
        }
        self.revoke_here();
        true
    }

    /// [`Attachment::check_access`]'s work, when access was lost.
    #[cold]
    fn revoke_here(&self) {
        self.ctx.revoke(self);
        self.life.clear(Life::WANTED);
        self.life.set(Life::REVOKED);
        self.irq_work.queue();
    }

    /// Registers the notifier on the current thread, which must be `task`.
    ///
    /// # Safety
    ///
    /// Must run in `task`'s own context, with the context lock held (IRQs
    /// off, so the switch-in state set by the caller cannot be preempted).
    unsafe fn register(self: &Arc<Self>) {
        // INVARIANT: one reference for the notifier list.
        let _ = Arc::into_raw(self.clone());
        self.life.set(Life::REGISTERED);
        // SAFETY: The notifier is pinned inside `self`, which the leaked
        // reference keeps alive; we run in the owning task.
        unsafe { self.notifier.register() };
    }

    /// Registers the notifier on `pinned`, the attachment's thread, held off
    /// every CPU.
    ///
    /// # Safety
    ///
    /// `pinned` is `task`, and the context lock is held.
    unsafe fn register_on(self: &Arc<Self>, pinned: &glue::Blocked<'_>) {
        // INVARIANT: one reference for the notifier list.
        let _ = Arc::into_raw(self.clone());
        self.life.set(Life::REGISTERED);
        // SAFETY: The notifier is pinned inside `self`, which the leaked
        // reference keeps alive; nothing walks the list while it is held.
        unsafe { self.notifier.register_on(pinned) };
    }

    /// Unregisters the notifier if it is registered and drops the list's
    /// reference through [`release`] (never the last: the caller holds
    /// one).
    ///
    /// # Safety
    ///
    /// Must run in `task`'s own context, with `task` held off every CPU
    /// (`rust::with_blocked`), or after `task` has done its final switch
    /// (nothing walks its notifier list any more).
    unsafe fn unregister(&self) {
        if !self.life.on_list() {
            return;
        }
        // The PMU must not name an attachment that may go away.
        self.ctx.drop_hw_here(self.owner_token());
        self.life.set(Life::UNREGISTERED);
        // SAFETY: On the task's list (type invariant); the caller
        // guarantees no concurrent walk of that list.
        unsafe { self.notifier.unregister() };
        // SAFETY: This is the reference leaked by `register`.
        release(unsafe { Arc::from_raw(self as *const Self) });
    }

    /// Removes this attachment from the registry and breaks the
    /// context/attachment cycle. Process or task context, no locks held.
    fn retire(self: &Arc<Self>) {
        let removed = M::registry().lock().remove(self);
        let mine = self.ctx.forget(self);
        if removed.is_some() {
            // A LOAD may wait for this slot (`attach::publish_waiting`).
            globals().retired.wake_all();
        }
        if let Some(a) = removed {
            release(a);
        }
        if let Some(a) = mine {
            release(a);
        }
    }
}

/// Drops `att`; if it is the last reference, the final drop happens on the
/// reap workqueue (its `Drop` puts the task and the module reference, which
/// must not run under a lock, in a scheduler callback or in module code
/// that could be unloaded under it).
///
/// Why no module code runs after the module's last reference is gone. An
/// attachment's module reference is put only by its `Drop`, which runs in
/// the reap work (`WorkItem::run`): the final drop is always enqueued here.
/// (The one exception, [`release_in_fop`], drops inside a file operation of
/// this module, whose open file holds another module reference until the
/// VFS has left our code.) What runs in module text after that
/// `module_put` is the rest of the drop and of the work function, and
/// module exit's `destroy_workqueue` returns only once the work function
/// has returned into the workqueue core. What runs in module text after a
/// caller's reference is gone is this function's own tail and the caller's
/// epilogue: the task_work callbacks, the overflow interrupt and irq_work,
/// the CPU-offline callback. None of those tails sleeps; module exit waits
/// them out last (`rust::wait_for_module_text_users`). Callers keep it so:
/// after a `release` that may drop their last reference, return without
/// sleeping.
pub(crate) fn release<M: Monitor>(att: Arc<Attachment<M>>) {
    if let Some(last) = Arc::into_unique_or_drop(att) {
        let arc: Arc<Attachment<M>> = last.into();
        arc.life.set(Life::REAPING);
        // A waiting reap holds a reference, so ours is not the last if one
        // were queued: the push cannot be refused here.
        let _ = M::reaper().push(arc);
    }
}

/// The overflow vectors deliver to the attachment.
impl<M: Monitor> crate::pfm_intr::OverflowSink for Attachment<M> {
    unsafe fn hw_pmi(owner: *const Self) {
        // SAFETY: The caller's contract: `owner` is alive.
        unsafe { &*owner }.hw_pmi();
    }
    fn overflow_interrupt(this: &Arc<Self>) {
        this.overflow_interrupt();
    }
    fn release(this: Arc<Self>) {
        release(this);
    }
    unsafe fn evict_hw(owner: *const Self) {
        // SAFETY: The caller's contract: `owner` is alive.
        let this = unsafe { &*owner };
        this.ctx.drop_hw_here(this.owner_token());
    }
}

/// Drops `att` here, in a file operation of this module: the open file
/// holds a module reference until the VFS has returned from the operation,
/// we run in process context with no lock held and outside any scheduler
/// callback, so even the last reference may be dropped at once. Its
/// pending irq_work, if any, is waited for by `Drop`.
fn release_in_fop<M: Monitor>(att: Arc<Attachment<M>>) {
    drop(att);
}

impl<M: Monitor> WorkListItem for Attachment<M> {
    fn run(this: Arc<Attachment<M>>) {
        if this.life.has(Life::DEAD) && !this.life.has(Life::REAPING) {
            // `DEAD` is set inside the final switch, whose notifier loop
            // still reads this notifier's link after our callback returns;
            // an irq_work left on another CPU can get us here that early.
            // The scheduler clears `on_cpu` once the switch is complete
            // (`finish_task`): wait for it, as `wait_task_inactive` does.
            while glue::task_on_cpu(&this.task) {
                glue::cpu_relax();
            }
            // SAFETY: The thread did its final switch, all of it.
            unsafe { this.unregister() };
            this.retire();
        }
        drop(this);
    }
}

#[pinned_drop]
impl<M: Monitor> PinnedDrop for Attachment<M> {
    fn drop(self: Pin<&mut Self>) {
        // An overflow fallback raised just before the last reference went.
        self.irq_work.sync();
        // The counters left every PMU before the attachment could go.
        globals().pmu.hw_unclaim(&self.hw_claim);
        globals().attached.fetch_sub(1, Ordering::Relaxed);
        // The watched credentials are put by `Watch`'s drop.
    }
}

/// The irq_work: an overflow that could not use the vector, and what a
/// scheduler callback had to defer (wake-ups, the dead thread's reaping,
/// a revoke's cleanup).
///
/// # Safety
///
/// `work` is the `irq_work` of a live `Attachment<M>` (whoever queued it
/// holds a reference until it has run: the notifier list, or the context).
unsafe extern "C" fn irq_work_fn<M: Monitor>(work: *mut IrqWork) {
    let att = work
        .cast::<u8>()
        .wrapping_sub(core::mem::offset_of!(Attachment<M>, irq_work))
        .cast::<Attachment<M>>();
    // SAFETY: See above: `att` is an `Arc`-managed, live attachment; the
    // `ManuallyDrop` borrows a reference without taking it.
    let arc = core::mem::ManuallyDrop::new(unsafe { Arc::from_raw(att) });
    arc.overflow_interrupt();
    arc.ctx.wake();
    if arc.life.clear(Life::REVOKED) {
        arc.queue_cleanup(false);
    }
    if arc.life.has(Life::DEAD) {
        // The notifier list's reference keeps `att` alive until the reaper
        // unregisters it, so taking one more here is sound.
        let _ = M::reaper().push((*arc).clone());
    }
}
