// SPDX-License-Identifier: GPL-2.0

//! The thread side of a context: attach, context switch, detach, exit and
//! the lazy cleanup of zombies.
//!
//! An [`Attachment`] binds one context to one thread. Its preempt notifier is
//! registered from the thread itself (a task_work for another thread, as the
//! scheduler requires), saves the counters at switch-out and restores them at
//! switch-in. It is never freed from inside a notifier callback: the final
//! switch of a dying thread only marks it and queues an irq_work; the irq_work
//! wakes the tool and queues the attachment on the reap workqueue, which
//! unregisters and frees in process context.
//!
//! References to an [`Attachment`] (all `Arc`s): the registry, the context's
//! `attach` field, the registered notifier, each pending task_work and the
//! pending reap work. The last one is always dropped on the reap workqueue,
//! never under a lock or in a scheduler callback ([`release`]).

use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, Ordering};

use kernel::bindings;
use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::task::Task;
use kernel::types::{ARef, Opaque};
use kernel::workqueue::{self, impl_has_work, new_work, Work, WorkItem};

use crate::pfm_ctx::Context;
use crate::pfm_state::{Op, State};
use crate::pfm_x86::HwClaim;
use crate::rust::{self as glue, IrqWork};
use crate::{ebadfd, edquot, globals, MAX_ATTACHED};

/// The attachment's notifier is not registered and will not be.
const REG_NONE: u8 = 0;
/// The notifier is registered on the thread.
const REG_ACTIVE: u8 = 1;
/// The notifier was registered and has been unregistered.
const REG_DONE: u8 = 2;

/// One context attached to one thread.
///
/// # Invariants
///
/// - `notifier.ops` points to [`PREEMPT_OPS`]; the notifier is on `task`'s
///   list exactly while `registered == REG_ACTIVE`, and then one `Arc`
///   reference is held on behalf of the list.
/// - `live` is cleared, never set again, once the context no longer wants
///   the thread (unload, close, exit); callbacks do nothing after that.
#[pin_data(PinnedDrop)]
pub(crate) struct Attachment {
    #[pin]
    notifier: Opaque<bindings::preempt_notifier>,
    #[pin]
    install_work: Opaque<bindings::callback_head>,
    #[pin]
    cleanup_work: Opaque<bindings::callback_head>,
    #[pin]
    block_work: Opaque<bindings::callback_head>,
    #[pin]
    irq_work: IrqWork,
    #[pin]
    reap_work: Work<Attachment>,
    /// The monitored thread (a counted reference).
    task: ARef<Task>,
    /// The context (keeps a zombie's memory alive).
    ctx: Arc<Context>,
    /// The context still wants this thread.
    live: AtomicBool,
    /// `REG_*`: touched only by the thread itself and by the reaper after
    /// the thread is dead.
    registered: AtomicU8,
    /// The thread has done its final switch.
    dead: AtomicBool,
    /// The attachment was handed to the reap workqueue for its final cleanup.
    reaping: AtomicBool,
    /// `block_work` is queued on the thread.
    block_queued: AtomicBool,
    /// `cleanup_work` was queued (it runs once and does everything).
    cleanup_queued: AtomicBool,
    #[pin]
    exec_work: Opaque<bindings::callback_head>,
    /// `exec_work` is queued on the thread.
    exec_queued: AtomicBool,
    /// The loader's real uid and gid if it was not privileged (a thread
    /// monitoring itself included): the thread stays monitored only while
    /// its credentials are ones this user may monitor (`None`: privileged).
    tool_ids: Option<(u32, u32)>,
    /// The real uid of the loader (the per-user limit's account).
    owner_uid: u32,
    /// The thread's real credentials as last found acceptable: a counted
    /// reference (null when `tool_ids` is `None`), so comparing addresses
    /// is exact (a freed credential's address cannot come back while we
    /// hold it). Replaced only by the thread itself in process context.
    cred_seen: AtomicPtr<bindings::cred>,
    /// Monitoring was revoked in a scheduler callback; the irq_work queues
    /// the thread's cleanup.
    revoked: AtomicBool,
    /// A hardware model's claim on the counters, taken when the attachment
    /// is published and given back at its drop.
    hw_claim: HwClaim,
}

impl_has_work! {
    impl HasWork<Self> for Attachment { self.reap_work }
}

static PREEMPT_OPS: bindings::preempt_ops = bindings::preempt_ops {
    sched_in: Some(sched_in),
    sched_out: Some(sched_out),
};

impl Attachment {
    /// A new attachment of `ctx` to `task`, as `access` allowed it. On
    /// failure the credential reference in `access` is dropped.
    fn new(task: ARef<Task>, ctx: Arc<Context>, access: Access) -> Result<Arc<Self>> {
        let Access {
            tool_ids,
            owner_uid,
            cred,
        } = access;
        let att = Arc::pin_init(
            pin_init!(Self {
                // INVARIANT: `ops` is set; the link is unused until registration.
                notifier <- Opaque::ffi_init(|n: *mut bindings::preempt_notifier| {
                    // SAFETY: `n` is valid for writes.
                    unsafe {
                        n.write(bindings::preempt_notifier {
                            link: bindings::hlist_node {
                                next: core::ptr::null_mut(),
                                pprev: core::ptr::null_mut(),
                            },
                            ops: &PREEMPT_OPS as *const _ as *mut _,
                        })
                    }
                }),
                install_work <- Opaque::ffi_init(|w: *mut bindings::callback_head| {
                    // SAFETY: `w` is valid for writes.
                    unsafe { w.write(bindings::callback_head { next: core::ptr::null_mut(), func: Some(install_fn) }) }
                }),
                cleanup_work <- Opaque::ffi_init(|w: *mut bindings::callback_head| {
                    // SAFETY: `w` is valid for writes.
                    unsafe { w.write(bindings::callback_head { next: core::ptr::null_mut(), func: Some(cleanup_fn) }) }
                }),
                block_work <- Opaque::ffi_init(|w: *mut bindings::callback_head| {
                    // SAFETY: `w` is valid for writes.
                    unsafe { w.write(bindings::callback_head { next: core::ptr::null_mut(), func: Some(block_fn) }) }
                }),
                exec_work <- Opaque::ffi_init(|w: *mut bindings::callback_head| {
                    // SAFETY: `w` is valid for writes.
                    unsafe { w.write(bindings::callback_head { next: core::ptr::null_mut(), func: Some(exec_fn) }) }
                }),
                exec_queued: AtomicBool::new(false),
                irq_work <- IrqWork::new(irq_work_fn),
                reap_work <- new_work!("perfmon_reap"),
                task,
                ctx,
                live: AtomicBool::new(true),
                registered: AtomicU8::new(REG_NONE),
                dead: AtomicBool::new(false),
                reaping: AtomicBool::new(false),
                block_queued: AtomicBool::new(false),
                cleanup_queued: AtomicBool::new(false),
                tool_ids,
                owner_uid,
                cred_seen: AtomicPtr::new(cred as *mut bindings::cred),
                revoked: AtomicBool::new(false),
                hw_claim: HwClaim::new(),
            }),
            GFP_KERNEL_ACCOUNT,
        );
        if att.is_err() && !cred.is_null() {
            // SAFETY: The reference `may_monitor` took, not handed over.
            unsafe { glue::put_cred(cred) };
        }
        att
    }

    /// Queues, once, the task_work that removes the notifier from the thread
    /// at its next return to user mode (or at its exit) and frees what is
    /// left: a zombie, a detached or a revoked context's attachment. The
    /// same `callback_head` must never be queued twice.
    ///
    /// `prompt`: kick the thread out of an interruptible sleep (like a
    /// signal would, `TWA_SIGNAL`) instead of waiting for it to return to
    /// user mode on its own (`TWA_RESUME`, the lazy cleanup of zombies).
    fn queue_cleanup(self: &Arc<Self>, prompt: bool) {
        if self.cleanup_queued.swap(true, Ordering::AcqRel) {
            return;
        }
        let mode = if prompt {
            glue::TWA_SIGNAL
        } else {
            glue::TWA_RESUME
        };
        let work_ref = Arc::into_raw(self.clone());
        // SAFETY: The leaked reference keeps `cleanup_work` alive until it
        // runs; `cleanup_queued` keeps it from being queued twice.
        let queued = unsafe { glue::task_work_add(self.task_ptr(), self.cleanup_work.get(), mode) };
        if queued.is_err() {
            // The thread is past exit_task_work(): its final switch marks
            // the attachment dead and the reaper cleans up.
            // SAFETY: Not queued: take the leaked reference back.
            release(unsafe { Arc::from_raw(work_ref) });
        }
    }

    /// Queues the irq_work: the fallback of the overflow interrupt, and the
    /// deferral out of `sched_out`.
    pub(crate) fn irq_work_queue(&self) {
        self.irq_work.queue();
    }

    /// A hardware PMI on the CPU whose PMU holds this attachment's context
    /// (hard IRQ): the overflowed PMDs are raised as pending overflows,
    /// which the same interrupt handler then delivers.
    pub(crate) fn hw_pmi(&self) {
        self.ctx.inner.lock().hw_pmi();
    }

    /// Takes the context's hardware counters off this CPU's PMU if this
    /// attachment put them there: before it stops being called at switches
    /// (a zombie, a detached context) or goes away. No-op for the soft model.
    fn hw_drop_here(&self) {
        let g = globals();
        // Cheap checks first: the soft model, or another owner (a re-check
        // under the lock makes it exact).
        if g.pmu.hw.is_none() || !g.pmu.is_owner_here(core::ptr::from_ref(self).cast()) {
            return;
        }
        let mut inner = self.ctx.inner.lock();
        // Under the lock (IRQs off): the owner of this CPU cannot change.
        if g.pmu.is_owner_here(core::ptr::from_ref(self).cast()) {
            inner.hw_uninstall();
        }
    }

    /// The overflow interrupt of this attachment's context (hard IRQ).
    pub(crate) fn overflow_interrupt(self: &Arc<Self>) {
        if !self.ctx.overflow_interrupt() {
            return;
        }
        // Block the thread on its way back to user mode, until RESTART.
        if self.block_queued.swap(true, Ordering::AcqRel) {
            return;
        }
        let work_ref = Arc::into_raw(self.clone());
        // SAFETY: The leaked reference keeps `block_work` alive until it runs;
        // `block_queued` keeps it from being queued twice.
        let queued = unsafe {
            glue::task_work_add(self.task_ptr(), self.block_work.get(), glue::TWA_RESUME)
        };
        if queued.is_err() {
            self.block_queued.store(false, Ordering::Release);
            // SAFETY: Not queued: take the leaked reference back.
            release(unsafe { Arc::from_raw(work_ref) });
        }
    }

    /// Whether the thread's credentials are no longer ones the loader may
    /// monitor (a setuid exec, or a setuid() to another user): perf's and
    /// ptrace's rule (`__ptrace_may_access`) on the thread's real
    /// credentials: all of its uids and gids the loader's, and its mm
    /// dumpable. Cheap when nothing changed since the last check: one
    /// address comparison (exact: `cred_seen` holds a reference).
    ///
    /// # Safety
    ///
    /// Must run in `task` itself or in a scheduler callback of it (its
    /// credentials and mm cannot change under us: only the thread itself
    /// changes them).
    unsafe fn lost_access(&self) -> bool {
        let Some((uid, gid)) = self.tool_ids else {
            return false;
        };
        let task = self.task_ptr();
        // SAFETY: The caller's guarantee: `task` is current or being switched.
        let cred = unsafe { glue::task_real_cred_ptr(task) };
        if cred == self.cred_seen.load(Ordering::Relaxed) as *const _ {
            return false;
        }
        // SAFETY: `cred` is the thread's live real credentials (see above).
        let same_ids = unsafe { glue::cred_ids(cred) }.all_are(uid, gid);
        // SAFETY: As above; the thread's mm cannot go away under us.
        let dumpable = unsafe { glue::task_dumpable(task) } == Some(bindings::SUID_DUMP_USER);
        !(same_ids && dumpable)
    }

    /// The thread (current, process context) keeps its monitoring: remember
    /// its present credentials as checked, so later switches compare one
    /// address again.
    ///
    /// # Safety
    ///
    /// Must run in `task` itself, in process context.
    unsafe fn accept_current_cred(&self) {
        if self.tool_ids.is_none() {
            return;
        }
        // SAFETY: We are the task: its real credentials are live.
        let cred = unsafe { glue::get_cred(glue::task_real_cred_ptr(self.task_ptr())) };
        let old = self.cred_seen.swap(cred as *mut _, Ordering::Relaxed);
        if !old.is_null() {
            // SAFETY: The reference this field held; process context.
            unsafe { glue::put_cred(old) };
        }
    }

    /// Ends monitoring in a scheduler callback when the thread gained
    /// privileges (see [`Attachment::lost_access`]); returns whether it did.
    ///
    /// # Safety
    ///
    /// As for [`Attachment::lost_access`].
    unsafe fn check_access(&self) -> bool {
        // SAFETY: Forwarded.
        if !unsafe { self.lost_access() } {
            return false;
        }
        {
            let mut inner = self.ctx.inner.lock();
            if matches!(&inner.attach, Some(a) if core::ptr::eq(&**a, self)) {
                let (now, cpu) = (glue::now_ns(), glue::this_cpu());
                inner.fold_running(cpu);
                inner.revoke(now);
            }
        }
        self.live.store(false, Ordering::Relaxed);
        self.revoked.store(true, Ordering::Release);
        self.irq_work.queue();
        true
    }

    fn task_ptr(&self) -> *mut bindings::task_struct {
        let t: &Task = &self.task;
        t as *const Task as *mut bindings::task_struct
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
        self.registered.store(REG_ACTIVE, Ordering::Relaxed);
        // SAFETY: The notifier is initialised and pinned inside `self`, which
        // the leaked reference keeps alive; we run in the owning task.
        unsafe { bindings::preempt_notifier_register(self.notifier.get()) };
    }

    /// Unregisters the notifier if it is registered and drops the list's
    /// reference through [`release`].
    ///
    /// # Safety
    ///
    /// Must run in `task`'s own context, or after `task` has done its final
    /// switch (nothing walks its notifier list any more).
    unsafe fn unregister(&self) {
        if self.registered.load(Ordering::Relaxed) != REG_ACTIVE {
            return;
        }
        // The PMU must not name an attachment that may go away.
        self.hw_drop_here();
        self.registered.store(REG_DONE, Ordering::Relaxed);
        // SAFETY: The notifier is on the task's list (type invariant); the
        // caller guarantees no concurrent walk of that list.
        unsafe { bindings::preempt_notifier_unregister(self.notifier.get()) };
        // SAFETY: This is the reference leaked by `register`.
        release(unsafe { Arc::from_raw(self as *const Self) });
    }

    /// Removes this attachment from the registry and breaks the
    /// context/attachment cycle. Process or task context, no locks held.
    fn retire(self: &Arc<Self>) {
        let removed = globals().registry.lock().remove(self);
        let mine = {
            let mut inner = self.ctx.inner.lock();
            match &inner.attach {
                Some(a) if Arc::ptr_eq(a, self) => inner.attach.take(),
                _ => None,
            }
        };
        if let Some(a) = removed {
            release(a);
        }
        if let Some(a) = mine {
            release(a);
        }
    }
}

/// Every attachment, by thread: a dense array allocated once for the
/// documented limit of `MAX_ATTACHED` (nothing allocates under its lock),
/// so lookups cost what is attached, not the limit.
///
/// # Invariants
///
/// `slots.len() <= MAX_ATTACHED <= slots.capacity()`.
pub(crate) struct Registry {
    slots: KVec<Arc<Attachment>>,
}

impl Registry {
    /// An empty registry with room for `MAX_ATTACHED` attachments.
    pub(crate) fn new() -> Result<Self> {
        // INVARIANT: empty, with the capacity of the limit.
        Ok(Self {
            slots: KVec::with_capacity(MAX_ATTACHED, GFP_KERNEL)?,
        })
    }

    fn iter(&self) -> impl Iterator<Item = &Arc<Attachment>> {
        self.slots.iter()
    }

    /// Whether every slot is taken.
    fn is_full(&self) -> bool {
        self.slots.len() >= MAX_ATTACHED
    }

    /// Adds `att`; `false` at the limit.
    fn insert(&mut self, att: &Arc<Attachment>) -> bool {
        if self.is_full() {
            return false;
        }
        // Within the capacity (type invariant): `push` does not allocate.
        self.slots.push(att.clone(), GFP_ATOMIC).is_ok()
    }

    /// Removes `att` and returns the registry's reference to it.
    fn remove(&mut self, att: &Arc<Attachment>) -> Option<Arc<Attachment>> {
        let i = self.slots.iter().position(|a| Arc::ptr_eq(a, att))?;
        let last = self.slots.len() - 1;
        self.slots.as_mut_slice().swap(i, last);
        // SAFETY: `last` is within the initialised length; reading the
        // element out and then shortening the length by one moves it out
        // exactly once (nothing is dropped twice or leaked).
        let removed = unsafe { core::ptr::read(self.slots.as_ptr().add(last)) };
        // SAFETY: `last < len <= capacity`; the element at `last` was moved out.
        unsafe { self.slots.set_len(last) };
        Some(removed)
    }
}

/// Drops `att`; if it is the last reference, the final drop happens on the
/// reap workqueue (its `Drop` puts the task and the module reference, which
/// must not run under a lock, in a scheduler callback or in module code
/// that could be unloaded under it).
///
/// Why no module code runs after the module's last reference is gone
/// (issue 12, item 9). An attachment's module reference is put only by
/// its `Drop`, which runs in the reap work (`WorkItem::run`): the final
/// drop is always enqueued here. (The one exception, [`release_in_fop`],
/// drops inside a file operation of this module, whose open file holds
/// another module reference until the VFS has left our code.) What runs
/// in module text after that `module_put` is the rest of the drop and of
/// the work function,
/// and module exit's `destroy_workqueue` returns only once the work
/// function has returned into the workqueue core (`ReapQueueInstalled`
/// in pfm_core.rs). What runs in module text after a caller's reference
/// is gone, once the reaper may have put the module's last reference and
/// `rmmod` may be under way, is this function's own tail (after the
/// decrement, or after the enqueue) and the caller's epilogue: the
/// task_work callbacks (`install_fn`, `block_fn`, `cleanup_fn`), the
/// overflow interrupt and irq_work, the CPU-offline callback. None of
/// those tails sleeps; module exit waits them out last
/// (`rust::wait_for_module_text_users`: an RCU grace period for the tails
/// that run with interrupts or preemption off, then Tasks RCU, or on a
/// non-preemptible kernel a context switch on every CPU, for the task_work
/// tails, which run preemptible). Callers keep it so: after a `release`
/// that may drop their last reference, return without sleeping.
pub(crate) fn release(att: Arc<Attachment>) {
    if let Some(last) = Arc::into_unique_or_drop(att) {
        let arc: Arc<Attachment> = last.into();
        arc.reaping.store(true, Ordering::Relaxed);
        // A pending reap work holds a reference, so ours is not the last if
        // one were queued: enqueueing cannot fail here.
        let _ = globals().reap_queue().enqueue(arc);
    }
}

/// What the overflow vectors deliver to: forwarders to the methods above.
impl crate::pfm_intr::OverflowSink for Attachment {
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
}

/// Drops `att` here, in a file operation of this module: the open file
/// holds a module reference (the file operations' owner) until the VFS has
/// returned from the operation, we run in process context with no lock
/// held, and outside any scheduler callback, so even the last reference
/// may be dropped at once (`release`'s reasons to defer do not hold). Its
/// pending irq_work, if any, is waited for by `Drop`.
fn release_in_fop(att: Arc<Attachment>) {
    drop(att);
}

impl WorkItem for Attachment {
    type Pointer = Arc<Attachment>;

    fn run(this: Arc<Attachment>) {
        if this.dead.load(Ordering::Relaxed) && !this.reaping.load(Ordering::Relaxed) {
            // `dead` is set inside the final switch, whose notifier loop
            // still reads this notifier's link after our callback returns;
            // an irq_work left on another CPU can get us here that early.
            // The scheduler clears `on_cpu` once the switch is complete
            // (`finish_task`): wait for it, as `wait_task_inactive` does.
            // SAFETY: `task` is referenced by the attachment.
            while unsafe { glue::task_on_cpu(this.task_ptr()) } {
                glue::cpu_relax();
            }
            // The thread is dead: unregister from its (unwalked) list and
            // drop every reference but ours.
            // SAFETY: The thread did its final switch, all of it.
            unsafe { this.unregister() };
            this.retire();
        }
        drop(this);
    }
}

// SAFETY: The raw kernel objects inside are used only as the comments at
// their uses say (the notifier by its thread, the works by their queues);
// the rest is atomics and `Sync` types.
unsafe impl Send for Attachment {}
// SAFETY: See `Send`.
unsafe impl Sync for Attachment {}

#[pinned_drop]
impl PinnedDrop for Attachment {
    fn drop(self: Pin<&mut Self>) {
        // An overflow fallback raised just before the last reference went.
        self.irq_work.sync();
        // The counters left every PMU before the attachment could go.
        globals().pmu.hw_unclaim(&self.hw_claim);
        globals().attached.fetch_sub(1, Ordering::Relaxed);
        let cred = self.cred_seen.load(Ordering::Relaxed);
        if !cred.is_null() {
            // SAFETY: The reference `cred_seen` held; the last drop runs in
            // process context (the reaper, or a file operation).
            unsafe { glue::put_cred(cred) };
        }
        // SAFETY: `attach` took this reference with `try_module_get`.
        unsafe { bindings::module_put(crate::this_module()) };
    }
}

/// Gets the attachment from a pointer to one of its fields.
///
/// # Safety
///
/// `ptr` must point to the field named by `$field` of a live `Attachment`.
macro_rules! attachment_of {
    ($ptr:expr, $field:ident) => {
        // SAFETY: Guaranteed by the caller of the enclosing function.
        unsafe { &*kernel::container_of!($ptr, Attachment, $field) }
    };
}

unsafe extern "C" fn sched_in(notifier: *mut bindings::preempt_notifier, cpu: kernel::ffi::c_int) {
    // The notifier is embedded in a live attachment: the list holds a reference.
    let att = attachment_of!(notifier, notifier);
    if !att.live.load(Ordering::Relaxed) {
        // A zombie or a detached context: nothing to restore.
        return;
    }
    // SAFETY: A scheduler callback of the attachment's thread.
    if att.tool_ids.is_some() && unsafe { att.check_access() } {
        return;
    }
    let mut inner = att.ctx.inner.lock();
    inner.sched_in(cpu);
}

unsafe extern "C" fn sched_out(
    notifier: *mut bindings::preempt_notifier,
    _next: *mut bindings::task_struct,
) {
    let att = attachment_of!(notifier, notifier);
    // A hardware model's counters leave the PMU with their thread, whatever
    // the context's state (a zombie's included): on every path below.
    // SAFETY: `task` is alive (counted reference); reading its state is what
    // the scheduler does itself. `__state` is TASK_DEAD for the final switch.
    let dead = unsafe { (*att.task_ptr()).__state } == bindings::TASK_DEAD;
    if !dead && !att.live.load(Ordering::Relaxed) {
        att.hw_drop_here();
        return;
    }
    // SAFETY: A scheduler callback of the attachment's thread.
    if !dead && att.tool_ids.is_some() && unsafe { att.check_access() } {
        att.hw_drop_here();
        return;
    }
    let wake;
    {
        let mut inner = att.ctx.inner.lock();
        let wanted = matches!(&inner.attach, Some(a) if core::ptr::eq(&**a, att));
        let cpu = glue::this_cpu();
        if wanted && att.live.load(Ordering::Relaxed) {
            // Takes the hardware counters off the PMU too.
            inner.sched_out(cpu, dead);
        } else if globals().pmu.is_owner_here(core::ptr::from_ref(att).cast()) {
            inner.hw_uninstall();
        }
        if dead {
            if wanted && inner.state.is_attached() {
                inner.target_exited(glue::now_ns());
            }
            att.live.store(false, Ordering::Relaxed);
            att.dead.store(true, Ordering::Relaxed);
        }
        wake = dead;
    }
    if wake {
        // Runqueue lock held: defer the wake-up (and, for the dead, the cleanup).
        att.irq_work.queue();
    }
}

unsafe extern "C" fn irq_work_fn(work: *mut IrqWork) {
    let att = attachment_of!(work, irq_work);
    // An overflow that could not use the vector (see `pfm_intr::raise`).
    // The attachment is alive: whoever queued the work holds a reference
    // (the notifier list, or the context's `attach`) until it has run.
    // SAFETY: `att` came from `Arc::into_raw`-managed memory (see above).
    let arc = core::mem::ManuallyDrop::new(unsafe { Arc::from_raw(att as *const Attachment) });
    arc.overflow_interrupt();
    att.ctx.wake();
    if att.revoked.swap(false, Ordering::AcqRel) {
        arc.queue_cleanup(false);
    }
    if att.dead.load(Ordering::Relaxed) {
        // The notifier list's reference keeps `att` alive until the reaper
        // unregisters it, so taking one more here is sound.
        // SAFETY: `att` came from `Arc::into_raw` (the list's reference).
        let arc = unsafe { Arc::from_raw(att as *const Attachment) };
        let extra = arc.clone();
        core::mem::forget(arc);
        let _ = globals().reap_queue().enqueue(extra);
    }
}

unsafe extern "C" fn install_fn(head: *mut bindings::callback_head) {
    let att = attachment_of!(head, install_work);
    // SAFETY: `attach` leaked one reference for this task_work.
    let att = unsafe { Arc::from_raw(att as *const Attachment) };
    // SAFETY: task_work callbacks run in the task they were queued on.
    let exiting = unsafe { (*att.task_ptr()).flags } & bindings::PF_EXITING != 0;
    let mut ended = false;
    {
        let mut inner = att.ctx.inner.lock();
        let wanted = matches!(&inner.attach, Some(a) if Arc::ptr_eq(a, &att));
        // An exec that committed after the LOAD's check (it waited for the
        // exec_update_lock) runs no user code before this: check again.
        // SAFETY: task_work callbacks run in the task they were queued on.
        let lost = !exiting && unsafe { att.lost_access() };
        if wanted && att.live.load(Ordering::Relaxed) {
            let now = glue::now_ns();
            if lost {
                inner.revoke(now);
                att.live.store(false, Ordering::Relaxed);
                ended = true;
            } else if exiting {
                // Run from exit_task_work(): the thread will not return to
                // user mode; end the monitoring now.
                inner.target_exited(now);
                att.live.store(false, Ordering::Relaxed);
                ended = true;
            } else {
                inner.active = true;
                inner.install_here(glue::this_cpu());
                // SAFETY: We are `task`, with the context lock held.
                unsafe { att.register() };
            }
        }
    }
    if ended {
        att.ctx.wake();
        att.retire();
    } else if att.registered.load(Ordering::Relaxed) == REG_ACTIVE {
        // SAFETY: We are the task, in process context.
        unsafe { att.accept_current_cred() };
    } else if !att.live.load(Ordering::Relaxed)
        && att.registered.load(Ordering::Relaxed) == REG_NONE
    {
        // Unloaded or closed before it could install: nothing on the thread.
        att.retire();
    }
    // Possibly the module's last reference: return at once (see `release`).
    release(att);
}

unsafe extern "C" fn block_fn(head: *mut bindings::callback_head) {
    let att = attachment_of!(head, block_work);
    // SAFETY: `overflow_interrupt` leaked one reference for this task_work.
    let att = unsafe { Arc::from_raw(att as *const Attachment) };
    att.block_queued.store(false, Ordering::Release);
    // SAFETY: task_work callbacks run in the task they were queued on.
    let exiting = unsafe { (*att.task_ptr()).flags } & bindings::PF_EXITING != 0;
    // A thread on its way out (this runs from exit_task_work() too) does not
    // wait for a RESTART that may never come; nor does one whose exec is
    // not checked yet (the new image may not be its loader's to stall).
    let exec_unchecked = att.ctx.inner.lock().exec_check;
    if !exiting && !exec_unchecked {
        att.ctx
            .block_until_restart(|| att.live.load(Ordering::Relaxed));
    }
    // Possibly the module's last reference: return at once (see `release`).
    release(att);
}

unsafe extern "C" fn cleanup_fn(head: *mut bindings::callback_head) {
    let att = attachment_of!(head, cleanup_work);
    // SAFETY: `detach`/`close` leaked one reference for this task_work.
    let att = unsafe { Arc::from_raw(att as *const Attachment) };
    // SAFETY: task_work callbacks run in the task they were queued on.
    unsafe { att.unregister() };
    reap_zombie(&att);
    att.retire();
    // Possibly the module's last reference: return at once (see `release`).
    release(att);
}

/// If `att`'s context is a zombie, frees it (state and accounting).
fn reap_zombie(att: &Attachment) {
    let mut inner = att.ctx.inner.lock();
    if inner.state == State::Zombie {
        if let Ok(next) = inner.state.next(Op::Reap) {
            inner.state = next;
            globals().zombies.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Every `execve()` (`rust/shim.c`'s exec watch), in the execing thread,
/// before the new image is loaded: if the thread is monitored by a loader
/// without privileges, the overflow path stops acting on it (no message,
/// no user IP, no blocking) and a task_work re-checks the credentials once
/// the exec is done, before the new image's first instruction
/// ([`exec_fn`]). perf_events ends such monitoring in `begin_new_exec`
/// (`perf_event_exit_task` when the new mm is not `SUID_DUMP_USER`), which
/// a module cannot hook; the task_work runs on the way back to user mode.
#[no_mangle]
extern "C" fn pfm_exec_hook() {
    let me = kernel::current!();
    let me_ptr = &*me as *const Task as *mut bindings::task_struct;
    let att = {
        let reg = globals().registry.lock();
        let found = reg
            .iter()
            .find(|a| {
                a.task_ptr() == me_ptr && a.tool_ids.is_some() && a.live.load(Ordering::Relaxed)
            })
            .cloned();
        found
    };
    let Some(att) = att else {
        return;
    };
    // A script's interpreter comes back here: one check covers both.
    if !att.exec_queued.swap(true, Ordering::AcqRel) {
        {
            let mut inner = att.ctx.inner.lock();
            if matches!(&inner.attach, Some(a) if Arc::ptr_eq(a, &att)) {
                inner.exec_check = true;
            }
        }
        let work_ref = Arc::into_raw(att.clone());
        // SAFETY: The leaked reference keeps `exec_work` alive until it
        // runs; `exec_queued` keeps it from being queued twice.
        let queued = unsafe { glue::task_work_add(me_ptr, att.exec_work.get(), glue::TWA_RESUME) };
        if queued.is_err() {
            att.exec_queued.store(false, Ordering::Release);
            // SAFETY: Not queued: take the leaked reference back.
            release(unsafe { Arc::from_raw(work_ref) });
        }
    }
    release(att);
}

/// After an exec (or a failed one), in the thread, before it returns to
/// user mode: ends the monitoring if the loader may not monitor the new
/// image (`PFM_MSG_REVOKED`), or resumes the overflow path.
unsafe extern "C" fn exec_fn(head: *mut bindings::callback_head) {
    let att = attachment_of!(head, exec_work);
    // SAFETY: `pfm_exec_hook` leaked one reference for this task_work.
    let att = unsafe { Arc::from_raw(att as *const Attachment) };
    att.exec_queued.store(false, Ordering::Release);
    // SAFETY: task_work callbacks run in the task they were queued on.
    let exiting = unsafe { (*att.task_ptr()).flags } & bindings::PF_EXITING != 0;
    // SAFETY: As above: we are the thread.
    let lost = !exiting && unsafe { att.lost_access() };
    let mut pending = false;
    {
        let mut inner = att.ctx.inner.lock();
        inner.exec_check = false;
        let wanted = matches!(&inner.attach, Some(a) if Arc::ptr_eq(a, &att));
        if lost && wanted && att.live.load(Ordering::Relaxed) {
            let (now, cpu) = (glue::now_ns(), glue::this_cpu());
            inner.fold_running(cpu);
            inner.pending_ovfl = 0;
            inner.revoke(now);
            att.live.store(false, Ordering::Relaxed);
        } else {
            pending = inner.pending_ovfl != 0;
        }
    }
    if lost {
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

/// Finds the task with thread id `tid` in the caller's pid namespace.
fn find_task(tid: u32) -> Result<ARef<Task>> {
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

/// What a LOAD was allowed, as checked: handed to the attachment.
struct Access {
    /// The loader's real uid and gid if it is not privileged.
    tool_ids: Option<(u32, u32)>,
    /// The loader's real uid.
    owner_uid: u32,
    /// A reference to the target's real credentials as checked (null if
    /// privileged).
    cred: *const bindings::cred,
}

/// Whether the caller may monitor `task` (itself included): perf_events'
/// rule (`ptrace_may_access(task, PTRACE_MODE_READ_REALCREDS)`, or
/// CAP_PERFMON / CAP_SYS_ADMIN). `ptrace_may_access` is not exported to
/// modules, so its credential test is done here, on real credentials: the
/// same thread group, or the caller's real uid/gid equal to all of the
/// target's uids/gids and the target dumpable; CAP_SYS_PTRACE in the initial
/// user namespace (stricter than ptrace's target namespace).
///
/// The caller holds the target's `exec_update_lock` (or is the target), so
/// what is checked is what an exec would have to change afterwards, and
/// the attachment then watches for exactly that (see
/// [`Attachment::lost_access`]). `Err(EACCES)`: refused.
fn may_monitor(task: *mut bindings::task_struct) -> Result<Access> {
    let me = kernel::current!();
    let me_ptr: *mut bindings::task_struct = &*me as *const Task as *mut _;
    // SAFETY: `get_task_cred` returns a referenced cred of a live task.
    let mycred = unsafe { bindings::get_task_cred(me_ptr) };
    // SAFETY: `mycred` is referenced.
    let mine = unsafe { glue::cred_ids(mycred) };
    // SAFETY: Drops the reference taken above.
    unsafe { glue::put_cred(mycred) };
    let ids = (mine.uids[0], mine.gids[0]);
    // SAFETY: `capable` has no preconditions.
    let privileged = unsafe {
        bindings::capable(bindings::CAP_PERFMON as i32)
            || bindings::capable(bindings::CAP_SYS_ADMIN as i32)
            || bindings::capable(bindings::CAP_SYS_PTRACE as i32)
    };
    if privileged {
        return Ok(Access {
            tool_ids: None,
            owner_uid: ids.0,
            cred: core::ptr::null(),
        });
    }
    // SAFETY: `task` is referenced by the caller.
    let same_process = unsafe { glue::same_thread_group_as_current(task) };
    // SAFETY: As above, for the target: its real (objective) credentials.
    let tcred = unsafe { bindings::get_task_cred(task) };
    // SAFETY: `tcred` is referenced.
    let same_ids = unsafe { glue::cred_ids(tcred) }.all_are(ids.0, ids.1);
    if !same_process {
        if let Err(e) = yama_allows(task) {
            // SAFETY: Drops the reference taken above.
            unsafe { glue::put_cred(tcred) };
            return Err(e);
        }
    }
    let allowed = same_process || {
        // A setuid program that dropped to the caller's ids is still not
        // dumpable: refuse it, as ptrace does.
        // SAFETY: `get_task_mm` returns a referenced mm or NULL (kernel thread, exiting).
        let mm = unsafe { bindings::get_task_mm(task) };
        !mm.is_null() && {
            // SAFETY: `mm` is referenced.
            let dumpable = unsafe { glue::mm_dumpable(mm) };
            // SAFETY: Drops the `get_task_mm` reference.
            unsafe { bindings::mmput(mm) };
            same_ids && dumpable == bindings::SUID_DUMP_USER
        }
    };
    if !allowed {
        // SAFETY: Drops the reference taken above.
        unsafe { glue::put_cred(tcred) };
        return Err(EACCES);
    }
    Ok(Access {
        tool_ids: Some(ids),
        owner_uid: ids.0,
        cred: tcred,
    })
}

/// `kernel.perf_event_paranoid` as perf applies it when a context is
/// created (`open`): above 2 (Debian's default 3), only CAP_SYS_ADMIN may
/// (`EACCES`, as perf_event_open). Levels 2 and below need nothing more
/// here: kernel-mode counting is refused to callers without CAP_PERFMON
/// at every level (`Pmu::caller_policy`), as perf does from level 2 on.
/// Unreadable (no /proc in the caller's root): treated as 3.
pub(crate) fn may_open() -> Result {
    let paranoid = read_paranoid().ok().flatten().unwrap_or(3);
    if paranoid > 2 && !glue::sys_admin_capable() {
        return Err(EACCES);
    }
    Ok(())
}

/// `kernel.perf_event_paranoid` (see [`glue::read_sysctl_int`]).
fn read_paranoid() -> Result<Option<i32>> {
    glue::read_sysctl_int(kernel::c_str!("/proc/sys/kernel/perf_event_paranoid"))
}

/// Yama's `ptrace_scope` for an unprivileged LOAD of another process's
/// thread, since the ptrace access check perf calls (LSM hooks included)
/// is not exported to modules: 1 allows descendants only, 2 and 3 nobody
/// without privileges (`EPERM`, as ptrace). Without Yama, nothing more;
/// with Yama but its setting unreadable (no /proc in the caller's root),
/// as 3. Stricter than Yama: its `PR_SET_PTRACER` exceptions are not
/// honoured.
fn yama_allows(task: *mut bindings::task_struct) -> Result {
    match glue::read_sysctl_int(kernel::c_str!("/proc/sys/kernel/yama/ptrace_scope")) {
        Ok(Some(0)) => Ok(()),
        // No Yama, if /proc/sys answers at all (perf's own setting is
        // always there); no /proc in the caller's root tells nothing.
        Ok(None) if matches!(read_paranoid(), Ok(Some(_))) => Ok(()),
        // SAFETY: `task` is referenced by the caller.
        Ok(Some(1)) if unsafe { glue::is_descendant_of_current(task) } => Ok(()),
        // Yama is there but unreadable from here: the strictest reading.
        Ok(_) | Err(_) => Err(EPERM),
    }
}

/// Attachments a thread may hold awaiting its own cleanup (it runs them at
/// its next return to user mode); a LOAD beyond it fails with `EAGAIN`.
const MAX_PENDING_PER_THREAD: usize = 4;

/// `PFM_IOC_LOAD`: attach `ctx` to thread `tid` (0: the caller).
pub(crate) fn attach(ctx: &Arc<Context>, tid: u32) -> Result {
    let me = kernel::current!();
    let my_tid = glue::current_tid();
    let is_self = tid == 0 || tid == my_tid;
    let task: ARef<Task> = if is_self {
        ARef::from(&*me)
    } else {
        find_task(tid)?
    };
    let tptr: *mut bindings::task_struct = &*task as *const Task as *mut _;
    // SAFETY: `task` is referenced.
    let flags = unsafe { (*tptr).flags };
    if flags & bindings::PF_KTHREAD != 0 {
        return Err(EPERM);
    }
    if flags & bindings::PF_EXITING != 0 {
        return Err(ESRCH);
    }
    // From the permission check until the attachment is published, an exec
    // of the target cannot change its credentials (perf_event_open does
    // the same); one that commits later is seen by the install and by the
    // exec watch. Self: the caller cannot be in an exec.
    let _exec_guard = if is_self {
        None
    } else {
        // SAFETY: `task` is referenced until the end of this function.
        Some(unsafe { glue::ExecUpdateGuard::lock(tptr) }?)
    };
    let access = may_monitor(tptr)?;
    let shown_tid = if is_self { my_tid } else { tid };

    // SAFETY: `this_module` is this module, which is live (we run its code).
    if !unsafe { bindings::try_module_get(crate::this_module()) } {
        if !access.cred.is_null() {
            // SAFETY: The reference `may_monitor` took.
            unsafe { glue::put_cred(access.cred) };
        }
        return Err(ENODEV);
    }
    let att = match Attachment::new(task, ctx.clone(), access) {
        Ok(att) => att,
        Err(e) => {
            // SAFETY: Returns the reference taken above.
            unsafe { bindings::module_put(crate::this_module()) };
            return Err(e);
        }
    };
    // From here on, dropping `att` returns the module reference (`Drop`).
    globals().attached.fetch_add(1, Ordering::Relaxed);

    {
        let mut reg = globals().registry.lock();
        // One user cannot take every slot from the others (privileged
        // loaders are not counted, as perf's per-user limits exempt them).
        // A full registry is ENOSPC for everyone, whoever holds it.
        if att.tool_ids.is_some() && !reg.is_full() {
            let limit = glue::param_max_attached_per_user() as usize;
            let mine = reg
                .iter()
                .filter(|a| a.tool_ids.is_some() && a.owner_uid == att.owner_uid)
                .count();
            if mine >= limit {
                drop(reg);
                release(att);
                return Err(edquot());
            }
        }
        let mut pending = 0;
        let mut busy = false;
        for a in reg.iter().filter(|a| a.task_ptr() == tptr) {
            if a.live.load(Ordering::Relaxed) {
                busy = true;
            } else {
                // A zombie (or a detached context on its way out) of this
                // thread: a zombie is reclaimed now; the thread's cleanup
                // still unregisters its notifier when it next runs.
                reap_zombie(a);
                pending += 1;
            }
        }
        if busy {
            drop(reg);
            release(att);
            return Err(EBUSY);
        }
        // A thread that does not run (stopped, or asleep in the kernel)
        // keeps what it has to clean up: bound it, or LOAD/UNLOAD cycles
        // on one stopped thread would fill every registry slot.
        if pending >= MAX_PENDING_PER_THREAD {
            drop(reg);
            release(att);
            return Err(EAGAIN);
        }
        let mut inner = ctx.inner.lock();
        if let Err(e) = inner.state.next(Op::Load) {
            drop(inner);
            drop(reg);
            release(att);
            return Err(if e == crate::pfm_state::StateError::Busy {
                EBUSY
            } else {
                ebadfd()
            });
        }
        if !reg.insert(&att) {
            drop(inner);
            drop(reg);
            release(att);
            return Err(ENOSPC);
        }
        // Every check passed: a hardware model claims the counters now.
        if let Err(e) = globals().pmu.hw_claim(&att.hw_claim) {
            let ours = reg.remove(&att);
            drop(inner);
            drop(reg);
            if let Some(o) = ours {
                release(o);
            }
            release(att);
            return Err(e);
        }
        Context::reset_for_load(&mut inner, shown_tid);
        inner.state = State::Loaded;
        let old = inner.attach.replace(att.clone());
        if is_self {
            inner.active = true;
            inner.install_here(glue::this_cpu());
            // SAFETY: We are the task, with the context lock held.
            unsafe { att.register() };
        }
        drop(inner);
        drop(reg);
        if let Some(o) = old {
            release(o);
        }
    }
    if is_self {
        release(att);
        return Ok(());
    }
    // The target registers the notifier itself, promptly (TWA_SIGNAL kicks
    // it out of an interruptible sleep like a signal would).
    let work_ref = Arc::into_raw(att.clone());
    // SAFETY: The leaked reference keeps `install_work` alive until it runs.
    let queued = unsafe { glue::task_work_add(tptr, att.install_work.get(), glue::TWA_SIGNAL) };
    if queued.is_err() {
        // SAFETY: Not queued: take the leaked reference back.
        release(unsafe { Arc::from_raw(work_ref) });
        att.live.store(false, Ordering::Relaxed);
        {
            let mut inner = ctx.inner.lock();
            inner.state = State::Unloaded;
        }
        att.retire();
        release(att);
        return Err(ESRCH);
    }
    release(att);
    Ok(())
}

/// Stops `att` from being wanted; removes it now if we are its thread,
/// or queues its removal on the thread: `prompt`ly for an UNLOAD (the
/// thread is kicked out of an interruptible sleep), lazily for a zombie
/// (at the thread's next return to user mode, whenever that is).
fn let_go(att: Arc<Attachment>, prompt: bool) {
    att.live.store(false, Ordering::Relaxed);
    // A thread blocked on an overflow of this context is released.
    att.ctx.wake();
    let is_current = {
        let me = kernel::current!();
        core::ptr::eq(
            &*me as *const Task as *const bindings::task_struct,
            att.task_ptr(),
        )
    };
    if is_current {
        // SAFETY: We are the task.
        unsafe { att.unregister() };
        att.retire();
        // Usually the last reference now: freed before the UNLOAD or the
        // close returns (`live_contexts` says so at once).
        release_in_fop(att);
        return;
    }
    if att.dead.load(Ordering::Relaxed) {
        // The reaper handles the dead.
        release(att);
        return;
    }
    att.queue_cleanup(prompt);
    release(att);
}

/// `PFM_IOC_UNLOAD`.
pub(crate) fn detach(ctx: &Arc<Context>) -> Result {
    let att = ctx.with_live(|inner, now| -> Result<Option<Arc<Attachment>>> {
        let next = inner.state.next(Op::Unload).map_err(|_| ebadfd())?;
        if inner.started {
            inner.time_enabled += now.saturating_sub(inner.enabled_start);
        }
        inner.started = false;
        inner.state = next;
        inner.active = false;
        inner.on_cpu = None;
        inner.tid = 0;
        Ok(inner.attach.take())
    })?;
    if let Some(att) = att {
        let_go(att, true);
    }
    Ok(())
}

/// The fd is closed: free at once if we are the thread (or unattached),
/// otherwise leave a zombie that the thread frees at its next return to user.
pub(crate) fn close(ctx: &Arc<Context>) {
    let me = kernel::current!();
    let me_ptr = &*me as *const Task as *mut bindings::task_struct;
    let att = {
        let mut inner = ctx.inner.lock();
        let remote = match &inner.attach {
            Some(a) => a.task_ptr() != me_ptr,
            None => false,
        };
        match inner.state.next(Op::Close { remote }) {
            Ok(State::Zombie) => {
                inner.state = State::Zombie;
                globals().zombies.fetch_add(1, Ordering::Relaxed);
                // The attachment keeps the context alive; the context's
                // reference to it stays until the thread reaps it.
                inner.attach.clone()
            }
            Ok(next) => {
                inner.state = next;
                inner.attach.take()
            }
            Err(_) => inner.attach.take(),
        }
    };
    if let Some(att) = att {
        let_go(att, false);
    }
}

/// Runs `op` on `ctx` from `cpu` through an IPI, if the thread is still
/// running there when the IPI lands; `None` if it moved.
pub(crate) fn run_on_cpu<R>(
    cpu: i32,
    ctx: &Context,
    op: &mut dyn FnMut(&mut crate::pfm_ctx::CtxInner, u64) -> R,
) -> Option<R> {
    struct Call<'a, R> {
        ctx: &'a Context,
        op: &'a mut dyn FnMut(&mut crate::pfm_ctx::CtxInner, u64) -> R,
        result: Option<R>,
    }
    unsafe extern "C" fn trampoline<R>(info: *mut kernel::ffi::c_void) {
        // SAFETY: `info` is the `Call` below; the caller waits for us.
        let call = unsafe { &mut *(info as *mut Call<'_, R>) };
        let cpu = glue::this_cpu();
        let mut inner = call.ctx.inner.lock();
        if inner.on_cpu == Some(cpu) {
            let now = glue::now_ns();
            let op = &mut call.op;
            call.result = Some(inner.live_op(cpu, now, |i, n| op(i, n)));
        }
    }
    let mut call = Call {
        ctx,
        op,
        result: None,
    };
    // SAFETY: `wait = 1`: `call` outlives the remote execution.
    let ret = unsafe {
        bindings::smp_call_function_single(
            cpu,
            Some(trampoline::<R>),
            &mut call as *mut Call<'_, R> as *mut kernel::ffi::c_void,
            1,
        )
    };
    if ret != 0 {
        return None;
    }
    call.result
}

/// The reap workqueue of the module.
pub(crate) type ReapQueue = workqueue::Queue;
