// SPDX-License-Identifier: GPL-2.0

//! LOAD's thread side (find the thread, check, publish, hand the install
//! to the thread) and letting an attachment go (UNLOAD, close).

use core::sync::atomic::{AtomicPtr, Ordering};

use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::task::Task;
use kernel::types::ARef;

use super::access::{may_monitor, Access, Loader};
use super::{
    release, release_in_fop, Attachment, Installed, Life, Monitor, Verdict, Watch, INSTALL,
};
use crate::pfm_x86::HwClaim;
use crate::rust::{
    self as glue, IrqWork, ModuleRef, Notify, PreemptNotifier, SlabArc, TaskWork, WorkLink,
};
use crate::{edquot, globals};

/// Attachments a thread may hold awaiting its own cleanup (it runs them at
/// its next return to user mode). A LOAD beyond it removes them itself if
/// the thread is blocked (asleep or stopped: `reclaim_if_blocked`), else
/// waits for the thread to run them (see [`PENDING_WAIT_JIFFIES`]), or
/// fails with `EAGAIN`.
const MAX_PENDING_PER_THREAD: usize = 4;

/// How long (jiffies) a LOAD waits, at most, for a running thread to run
/// the cleanups it was kicked for (it does within moments), before
/// refusing with `EAGAIN`: so a tool that attaches to and detaches from a
/// busy thread in a loop is not refused. Woken as each cleanup retires an
/// attachment (`retired`), not napping a jiffy: a nap made every other
/// cycle of such a loop last 4 ms at HZ=250 (`make bench --only attach`:
/// mean 1.95 ms, median 31 us).
const PENDING_WAIT_JIFFIES: u32 = 20;

impl<M: Monitor> Attachment<M> {
    /// A new attachment of `ctx` to `task`, as `access` allowed it.
    fn new(
        task: ARef<Task>,
        ctx: SlabArc<M>,
        access: Access,
        module: ModuleRef,
    ) -> Result<Arc<Self>> {
        let Access { loader, cred } = access;
        let Loader {
            cred: loader_cred,
            owner_uid,
        } = loader;
        let life = match loader_cred {
            Some(_) => Life::WANTED | Life::WATCHED,
            None => Life::WANTED,
        };
        let watch = Watch {
            loader: loader_cred,
            // The reference moves into the field (put by `Drop`).
            cred_seen: AtomicPtr::new(
                cred.map_or(core::ptr::null_mut(), |c| c.into_raw() as *mut _),
            ),
        };
        Arc::pin_init(
            pin_init!(Self {
                notifier <- PreemptNotifier::new(),
                install_work <- TaskWork::new(),
                cleanup_work <- TaskWork::new(),
                block_work <- TaskWork::new(),
                exec_work <- TaskWork::new(),
                irq_work <- IrqWork::new(super::irq_work_fn::<M>),
                reap_link: WorkLink::new(),
                task,
                ctx,
                life: Life::new(life),
                watch,
                owner_uid,
                hw_claim: HwClaim::new(),
                _module: module,
            }),
            GFP_KERNEL_ACCOUNT,
        )
    }
}

/// Why a LOAD's checks under the registry lock refuse it.
fn registry_refusal<M: Monitor>(reg: &super::Registry<M>, att: &Attachment<M>) -> Result {
    // One user cannot take every slot from the others (privileged loaders'
    // own LOADs are not counted, as perf's per-user limits exempt them;
    // heirs are, whoever loaded: `Attachment::counted`). A full registry
    // is ENOSPC for everyone, whoever holds it. O(1): the registry keeps
    // each user's count.
    if att.counted() && !reg.is_full() {
        let limit = glue::param_max_attached_per_user() as usize;
        if reg.user_count(att.owner_uid) >= limit {
            return Err(edquot());
        }
    }
    let mut pending = 0;
    for a in reg.of_task(&att.task) {
        if a.life.wanted() {
            return Err(EBUSY);
        }
        // A zombie (or a detached context on its way out) of this thread:
        // a zombie is reclaimed now; the thread's cleanup still unregisters
        // its notifier when it next runs.
        a.ctx.reap_zombie();
        pending += 1;
    }
    // A thread that does not run (stopped, or asleep in the kernel) keeps
    // what it has to clean up: bound it, or LOAD/UNLOAD cycles on one
    // stopped thread would fill every registry slot.
    if pending >= MAX_PENDING_PER_THREAD {
        return Err(EAGAIN);
    }
    Ok(())
}

/// `PFM_IOC_LOAD`'s thread side: attach `ctx` to thread `tid` (0: the
/// caller), monitoring starting in event set `load_set`.
pub(crate) fn attach<M: Monitor>(ctx: &SlabArc<M>, tid: u32, load_set: u16) -> Result {
    let me = kernel::current!();
    let my_tid = glue::current_tid();
    let is_self = tid == 0 || tid == my_tid;
    let task: ARef<Task> = if is_self {
        ARef::from(&*me)
    } else {
        glue::find_task(tid)?
    };
    if glue::is_kthread(&task) {
        return Err(EPERM);
    }
    if glue::is_exiting(&task) {
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
        Some(unsafe { glue::ExecUpdateGuard::lock(glue::task_ptr(&task)) }?)
    };
    let access = may_monitor(&task)?;
    let shown_tid = if is_self { my_tid } else { tid };
    // SAFETY: This module is live: we run its code.
    let module = unsafe { ModuleRef::try_get(crate::this_module()) }.ok_or(ENODEV)?;
    let att = Attachment::new(task, ctx.clone(), access, module)?;
    globals().attached.fetch_add(1, Ordering::Relaxed);
    // A hardware model's claim on the counters, before `publish` takes its
    // spinlocks: the claim's lock sleeps. A LOAD refused after this gives
    // it back with its attachment.
    if let Err(e) = globals().pmu.hw_claim(&att.hw_claim) {
        release(att);
        return Err(e);
    }
    if let Err(e) = publish_waiting(&**ctx, &att, shown_tid, load_set, is_self) {
        refuse(att);
        return Err(e);
    }
    if is_self {
        release(att);
        return Ok(());
    }
    install_remote(ctx, att)
}

/// Drops a refused LOAD's attachment, which never reached a PMU, giving
/// its hardware claim back first: before the LOAD returns, as the manual
/// says, not when the reaper gets to the attachment (its drop would).
/// Process context, no lock held (the claim's lock sleeps).
fn refuse<M: Monitor>(att: Arc<Attachment<M>>) {
    globals().pmu.hw_unclaim(&att.hw_claim);
    release(att);
}

/// A published remote LOAD's install: here if the thread is blocked, else
/// by the thread itself, promptly (TWA_SIGNAL kicks it out of an
/// interruptible sleep like a signal would). `ESRCH`, the LOAD undone, if
/// the thread is past running task_works.
fn install_remote<M: Monitor>(ctx: &SlabArc<M>, att: Arc<Attachment<M>>) -> Result {
    if att.install_if_blocked() {
        release(att);
        return Ok(());
    }
    if TaskWork::<Attachment<M>, INSTALL>::queue(&att, &att.task, Notify::Signal).is_err() {
        att.life.clear(Life::WANTED);
        ctx.load_failed(&att);
        att.retire();
        refuse(att);
        return Err(ESRCH);
    }
    release(att);
    Ok(())
}

/// [`publish`], waiting (up to [`PENDING_WAIT_JIFFIES`]; a signal ends it)
/// while it is refused because another thread still holds the attachments
/// of earlier contexts, unless that thread is stopped: nothing would change.
fn publish_waiting<M: Monitor>(
    ctx: &M,
    att: &Arc<Attachment<M>>,
    tid: u32,
    load_set: u16,
    is_self: bool,
) -> Result {
    let mut left = PENDING_WAIT_JIFFIES;
    let mut reclaimed = false;
    loop {
        let r = publish(ctx, att, tid, load_set, is_self);
        // A blocked (asleep or stopped) thread's cleanups are done here,
        // once, instead of waiting for it to wake and do them: for the
        // thread's own bound (EAGAIN) or a full registry (ENOSPC).
        if matches!(&r, Err(e) if *e == EAGAIN || *e == ENOSPC) && !is_self && !reclaimed {
            reclaimed = true;
            if reclaim_if_blocked::<M>(&att.task) {
                continue;
            }
        }
        match r {
            Err(e) if e == EAGAIN && !is_self && left > 0 && !glue::is_stopped(&att.task) => {
                // Queued before the count is taken again: a cleanup that
                // retires one between the two wakes us.
                let mut freed = false;
                let now_left = globals().retired.wait_unless_for(left, || {
                    freed = pending_of::<M>(&att.task) < MAX_PENDING_PER_THREAD;
                    freed
                });
                // A slot freed already and taken again by another LOAD
                // before ours: a jiffy of the budget, so this ends.
                left = if freed { left - 1 } else { now_left };
                if kernel::current!().signal_pending() {
                    return Err(EAGAIN);
                }
            }
            r => return r,
        }
    }
}

/// Removes, here and now, the attachments `task` holds awaiting its own
/// cleanup (unloaded, or zombies), if it is blocked: held off every CPU,
/// its notifier list can be changed from outside, as its cleanup would.
/// Their queued cleanups find nothing left to do. Whether any was removed.
fn reclaim_if_blocked<M: Monitor>(task: &Task) -> bool {
    let mut pending: [Option<Arc<Attachment<M>>>; MAX_PENDING_PER_THREAD] =
        core::array::from_fn(|_| None);
    {
        let reg = M::registry().lock();
        let unwanted = reg.of_task(task).filter(|a| !a.life.wanted());
        for (slot, a) in pending.iter_mut().zip(unwanted) {
            *slot = Some(a.clone());
        }
    }
    if pending[0].is_none() {
        return false;
    }
    let done = glue::with_blocked(task, |_| {
        for a in pending.iter().flatten() {
            // SAFETY: The thread is held off every CPU.
            unsafe { a.unregister() };
        }
    })
    .is_some();
    let mut removed = false;
    for a in pending.into_iter().flatten() {
        if done {
            a.ctx.reap_zombie();
            a.retire();
            removed = true;
        }
        release(a);
    }
    removed
}

impl<M: Monitor> Attachment<M> {
    /// A remote LOAD's install, done at once if the thread is blocked
    /// (asleep or stopped): held off every CPU, it needs no waking to
    /// install itself, as perf installs events in a sleeping task without
    /// an IPI. A thread inside an exec (it may commit credentials and run
    /// the new image without a switch) or exiting installs itself, with
    /// its checks; so does one whose credentials no longer pass (its
    /// install revokes). Whether it was installed here.
    fn install_if_blocked(self: &Arc<Self>) -> bool {
        let mut old_cred = core::ptr::null();
        let installed = glue::with_blocked(&self.task, |pinned| {
            // SAFETY: Held off every CPU, its credentials and mm stay.
            if glue::is_exiting(&self.task) || pinned.in_execve() || unsafe { self.lost_access() } {
                return false;
            }
            let verdict = Verdict::Blocked {
                cpu: pinned.cpu(),
                runtime: pinned.runtime(),
            };
            // SAFETY: The thread is held off every CPU; `install` runs the
            // closure under the context lock.
            let done = self
                .ctx
                .install(self, verdict, || unsafe { self.register_on(pinned) });
            if done == Installed::Yes {
                // SAFETY: As above.
                old_cred = unsafe { self.swap_cred_seen() };
            }
            done == Installed::Yes
        }) == Some(true);
        if !old_cred.is_null() {
            // SAFETY: The reference the field held; process context, no
            // lock held.
            unsafe { glue::put_cred(old_cred) };
        }
        installed
    }

    /// UNLOAD's cleanup, done at once if the thread is blocked. Whether it
    /// was.
    fn unregister_if_blocked(&self) -> bool {
        // SAFETY: The thread is held off every CPU.
        glue::with_blocked(&self.task, |_| unsafe { self.unregister() }).is_some()
    }
}

/// The attachments `task` holds in the registry.
fn pending_of<M: Monitor>(task: &Task) -> usize {
    M::registry().lock().of_task(task).count()
}

/// Publishes `att` in the registry and in its context, under the registry
/// lock (lock order: registry, then context).
fn publish<M: Monitor>(
    ctx: &M,
    att: &Arc<Attachment<M>>,
    tid: u32,
    load_set: u16,
    is_self: bool,
) -> Result {
    let mut reg = M::registry().lock();
    registry_refusal(&reg, att)?;
    // SAFETY: We are the task (`is_self`), with the context lock held
    // (`publish` runs `install` under it).
    let register = || unsafe { att.register() };
    let install: Option<&dyn Fn()> = if is_self { Some(&register) } else { None };
    // Once the context's state allows the LOAD: a registry slot (the
    // hardware claim was taken before the locks).
    let claim = || {
        if !reg.insert(att) {
            return Err(ENOSPC);
        }
        Ok(())
    };
    let published = ctx.publish(att, tid, load_set, claim, install);
    drop(reg);
    if let Some(old) = published? {
        release(old);
    }
    Ok(())
}

/// Stops `att` from being wanted; removes it now if we are its thread,
/// or queues its removal on the thread: `prompt`ly for an UNLOAD (the
/// thread is kicked out of an interruptible sleep), lazily for a zombie
/// (at the thread's next return to user mode, whenever that is).
pub(crate) fn let_go<M: Monitor>(att: Arc<Attachment<M>>, prompt: bool) {
    att.life.clear(Life::WANTED);
    // A thread blocked on an overflow of this context is released.
    att.ctx.wake();
    if glue::is_current(&att.task) {
        // SAFETY: We are the task.
        unsafe { att.unregister() };
        att.retire();
        // Usually the last reference now: freed before the UNLOAD or the
        // close returns (`live_contexts` says so at once).
        release_in_fop(att);
        return;
    }
    if att.life.has(Life::DEAD) {
        // The reaper handles the dead.
        release(att);
        return;
    }
    // An UNLOAD of a sleeping thread does not wake it. A zombie's cleanup
    // stays lazy: the thread does it when it next returns to user mode.
    if prompt && att.unregister_if_blocked() {
        att.retire();
        release(att);
        return;
    }
    att.queue_cleanup(prompt);
    release(att);
}

/// Inheritance's LOAD, in the new thread itself before its first
/// instruction in user mode: attaches `ctx` (an heir context, made for
/// this thread) to the calling thread, for `loader`. The thread's
/// credentials are checked as an install checks them after an exec (it
/// may have been created by a thread that had just gained privileges):
/// `EACCES` if the loader may not see it. The per-user limit (which
/// counts every heir, a privileged loader's too) and the registry's apply
/// as to any LOAD (`EDQUOT`, `ENOSPC`). Monitoring starts in event set
/// `load_set`, as the family's LOAD did.
pub(crate) fn attach_heir<M: Monitor>(ctx: &SlabArc<M>, loader: Loader, load_set: u16) -> Result {
    let me = kernel::current!();
    if glue::is_exiting(&me) {
        return Err(ESRCH);
    }
    // SAFETY: This module is live: we run its code.
    let module = unsafe { ModuleRef::try_get(crate::this_module()) }.ok_or(ENODEV)?;
    // No credentials seen yet: the first check below compares everything.
    let access = Access { loader, cred: None };
    let att = Attachment::new(ARef::from(&*me), ctx.clone(), access, module)?;
    att.life.set(Life::HEIR);
    globals().attached.fetch_add(1, Ordering::Relaxed);
    // SAFETY: We are the attachment's thread.
    if unsafe { att.lost_access() } {
        release(att);
        return Err(EACCES);
    }
    if let Err(e) = globals().pmu.hw_claim(&att.hw_claim) {
        release(att);
        return Err(e);
    }
    if let Err(e) = publish(&**ctx, &att, glue::current_tid(), load_set, true) {
        refuse(att);
        return Err(e);
    }
    // SAFETY: We are the thread, in process context.
    unsafe { att.accept_current_cred() };
    release(att);
    Ok(())
}

/// `PFM_LOAD_PROCESS`'s LOAD of one more thread of the process, `task`,
/// with `ctx` (an heir context made for it), for `loader`: as a remote
/// LOAD, except that the one permission check of the process stands for
/// it; the thread's own credentials are checked by its install, in the
/// thread (`Verdict::Lost` ends it there). In event set `load_set`.
pub(crate) fn attach_heir_remote<M: Monitor>(
    ctx: &SlabArc<M>,
    task: ARef<Task>,
    tid: u32,
    loader: Loader,
    load_set: u16,
) -> Result {
    if glue::is_exiting(&task) {
        return Err(ESRCH);
    }
    // SAFETY: This module is live: we run its code.
    let module = unsafe { ModuleRef::try_get(crate::this_module()) }.ok_or(ENODEV)?;
    let access = Access { loader, cred: None };
    let att = Attachment::new(task, ctx.clone(), access, module)?;
    att.life.set(Life::HEIR);
    globals().attached.fetch_add(1, Ordering::Relaxed);
    if let Err(e) = globals().pmu.hw_claim(&att.hw_claim) {
        release(att);
        return Err(e);
    }
    if let Err(e) = publish(&**ctx, &att, tid, load_set, false) {
        refuse(att);
        return Err(e);
    }
    install_remote(ctx, att)
}

/// Whether `task` is monitored by a context that `is_ours` recognises.
pub(crate) fn monitored_by<M: Monitor>(task: &Task, is_ours: impl Fn(&M) -> bool) -> bool {
    let ctx = {
        let reg = M::registry().lock();
        let found = reg
            .of_task(task)
            .find(|a| a.life.wanted())
            .map(|a| a.ctx.clone());
        found
    };
    ctx.is_some_and(|c| is_ours(&c))
}
