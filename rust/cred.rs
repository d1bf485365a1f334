// SPDX-License-Identifier: GPL-2.0

//! Credentials and the permission facts read off a task: its ids, whether
//! it may be dumped (ptrace's test), capabilities, the exec lock that
//! keeps them still during a check.

use kernel::bindings;
use kernel::prelude::*;
use kernel::task::Task;

use super::{ffi, task_ptr};

/// A counted reference to a `struct cred`, put when dropped.
///
/// # Invariants
///
/// `0` is a referenced cred.
pub(crate) struct CredRef(core::ptr::NonNull<bindings::cred>);

// SAFETY: A cred reference may be taken and put from any thread.
unsafe impl Send for CredRef {}
// SAFETY: A cred is immutable once published.
unsafe impl Sync for CredRef {}

impl CredRef {
    /// `task`'s objective credentials (`get_task_cred`).
    pub(crate) fn of_task(task: &Task) -> Result<Self> {
        // SAFETY: `task` is live; `get_task_cred` returns a referenced cred.
        let c = unsafe { bindings::get_task_cred(task_ptr(task)) };
        // INVARIANT: referenced (never NULL for a live task).
        Ok(Self(core::ptr::NonNull::new(c as *mut _).ok_or(ESRCH)?))
    }

    /// The ids.
    pub(crate) fn ids(&self) -> CredIds {
        // SAFETY: Referenced (type invariant).
        unsafe { cred_ids(self.0.as_ptr()) }
    }

    /// What ptrace's rule reads of these credentials.
    pub(crate) fn facts(&self) -> CredFacts<'_> {
        // SAFETY: Referenced (type invariant) for as long as `self` is borrowed.
        unsafe { CredFacts::of(self.0.as_ptr()) }
    }

    /// Gives up the reference to the caller, as a raw pointer (put it with
    /// [`put_cred`]).
    pub(crate) fn into_raw(self) -> *const bindings::cred {
        let p = self.0.as_ptr();
        core::mem::forget(self);
        p
    }
}

impl Clone for CredRef {
    fn clone(&self) -> Self {
        // SAFETY: Referenced (type invariant), so live during the call;
        // `get_cred` takes one more reference on the same cred.
        unsafe { get_cred(self.0.as_ptr()) };
        // INVARIANT: the copy owns the reference just taken.
        Self(self.0)
    }
}

impl Drop for CredRef {
    fn drop(&mut self) {
        // SAFETY: The reference this value owned (type invariant).
        unsafe { put_cred(self.0.as_ptr()) };
    }
}

/// `capable(cap)` for the calling thread.
pub(crate) fn capable(cap: u32) -> bool {
    // SAFETY: No preconditions.
    unsafe { bindings::capable(cap as i32) }
}

/// A thread's credential ids: real, effective and saved uid, then gid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CredIds {
    /// uid, euid, suid.
    pub(crate) uids: [u32; 3],
    /// gid, egid, sgid.
    pub(crate) gids: [u32; 3],
}

/// The ids of `cred`.
///
/// # Safety
///
/// `cred` must be a live cred (referenced, or the current thread's own).
pub(crate) unsafe fn cred_ids(cred: *const bindings::cred) -> CredIds {
    let mut ids = [0u32; 6];
    // SAFETY: `cred` is live (caller); `ids` has the 6 slots the shim fills.
    unsafe { ffi::pfm_cred_ids(cred, ids.as_mut_ptr()) };
    CredIds {
        uids: [ids[0], ids[1], ids[2]],
        gids: [ids[3], ids[4], ids[5]],
    }
}

/// The calling thread's id in its own pid namespace (`task_pid_vnr`).
pub(crate) fn current_tid() -> u32 {
    // SAFETY: No preconditions.
    unsafe { ffi::pfm_current_tid() as u32 }
}

/// Whether `task` is a thread of the calling process.
///
/// # Safety
///
/// `task` must be referenced.
pub(crate) unsafe fn same_thread_group_as_current(task: *mut bindings::task_struct) -> bool {
    // SAFETY: Forwarded.
    unsafe { ffi::pfm_same_thread_group_as_current(task) }
}

/// `task->real_cred`: the objective credentials, the ones others act on
/// (`__task_cred`; `override_creds` swaps only `task->cred`). Compare it,
/// or dereference it where it cannot change (in the task itself).
///
/// # Safety
///
/// `task` must be a live task.
pub(crate) unsafe fn task_real_cred_ptr(task: *mut bindings::task_struct) -> *const bindings::cred {
    // SAFETY: Forwarded.
    unsafe { ffi::pfm_task_real_cred(task) }
}

/// Takes a reference on `cred` (`get_cred`) and returns it.
///
/// # Safety
///
/// `cred` must be live for the duration of the call (referenced, or the
/// current task's own).
pub(crate) unsafe fn get_cred(cred: *const bindings::cred) -> *const bindings::cred {
    // SAFETY: Forwarded.
    unsafe { ffi::pfm_get_cred(cred) }
}

/// `down_read_interruptible(&task->signal->exec_update_lock)`: held, an
/// exec of `task` cannot change its credentials or mm (perf_event_open's
/// guard between its permission check and the event's installation).
/// Released when the guard drops.
pub(crate) struct ExecUpdateGuard {
    task: *mut bindings::task_struct,
}

impl ExecUpdateGuard {
    /// Takes the lock for reading; `ERESTARTSYS` if a signal interrupts
    /// the wait (the call restarts under `SA_RESTART`, else `EINTR`).
    ///
    /// # Safety
    ///
    /// `task` must stay referenced until the guard drops.
    pub(crate) unsafe fn lock(task: *mut bindings::task_struct) -> Result<Self> {
        // SAFETY: `task` is referenced (caller), so is its signal_struct.
        if unsafe { ffi::pfm_exec_update_lock_read(task) } != 0 {
            return Err(ERESTARTSYS);
        }
        Ok(Self { task })
    }
}

impl Drop for ExecUpdateGuard {
    fn drop(&mut self) {
        // SAFETY: Taken in `lock`; the task is still referenced (its contract).
        unsafe { ffi::pfm_exec_update_unlock_read(self.task) };
    }
}

/// Whether `task` is a descendant of the current process (Yama's
/// `task_is_descendant`: its ancestry, by process, reaches the caller's).
///
/// # Safety
///
/// `task` must be referenced by the caller.
pub(crate) unsafe fn is_descendant_of_current(task: *mut bindings::task_struct) -> bool {
    // SAFETY: An RCU read-side section around the walk: the parents seen
    // stay valid until it ends.
    unsafe { ffi::pfm_rcu_read_lock() };
    // SAFETY: `current` is valid; its group leader too (RCU).
    let me = unsafe { ffi::pfm_task_group_leader(bindings::get_current()) };
    let mut walker = task;
    let mut found = false;
    // SAFETY: `task` is referenced; every parent reached is RCU-protected.
    while !walker.is_null() && unsafe { ffi::pfm_task_pid(walker) } > 0 {
        // SAFETY: As above.
        walker = unsafe { ffi::pfm_task_group_leader(walker) };
        if walker == me {
            found = true;
            break;
        }
        // SAFETY: As above.
        walker = unsafe { ffi::pfm_task_real_parent(walker) };
    }
    // SAFETY: Ends the section begun above.
    unsafe { ffi::pfm_rcu_read_unlock() };
    found
}

/// `capable(CAP_SYS_ADMIN)`.
pub(crate) fn sys_admin_capable() -> bool {
    // SAFETY: No preconditions.
    unsafe { bindings::capable(bindings::CAP_SYS_ADMIN as i32) }
}

/// `ns_capable_noaudit(&init_user_ns, CAP_SYS_ADMIN)`: as
/// [`sys_admin_capable`], without an audit record when it is refused (for
/// a check that a refusal does not end).
pub(crate) fn sys_admin_capable_noaudit() -> bool {
    // SAFETY: `init_user_ns` is a static kernel object.
    unsafe {
        bindings::ns_capable_noaudit(
            core::ptr::addr_of_mut!(bindings::init_user_ns),
            bindings::CAP_SYS_ADMIN as i32,
        )
    }
}

/// `get_dumpable(task->mm)`, or `None` without an mm.
///
/// # Safety
///
/// `task` must be the current thread, or a thread in a scheduler callback
/// (its mm cannot go away under us).
pub(crate) unsafe fn task_dumpable(task: *mut bindings::task_struct) -> Option<u32> {
    // SAFETY: Forwarded.
    let d = unsafe { ffi::pfm_task_dumpable(task) };
    u32::try_from(d).ok()
}

/// `get_dumpable(mm)`.
///
/// # Safety
///
/// `mm` must be referenced.
pub(crate) unsafe fn mm_dumpable(mm: *mut bindings::mm_struct) -> u32 {
    // SAFETY: Forwarded.
    unsafe { ffi::pfm_mm_dumpable(mm) as u32 }
}

/// Drops a reference on a `cred` (the static inline `put_cred`).
///
/// # Safety
///
/// `cred` must be a referenced cred whose reference the caller gives up.
pub(crate) unsafe fn put_cred(cred: *const bindings::cred) {
    // SAFETY: Forwarded from the caller's guarantees.
    unsafe { ffi::pfm_put_cred(cred) }
}

/// A user namespace, borrowed for `'a` from a referenced cred or mm (which
/// hold a reference on it, and their namespace holds its parents).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UserNsRef<'a>(
    core::ptr::NonNull<bindings::user_namespace>,
    core::marker::PhantomData<&'a bindings::user_namespace>,
);

impl<'a> UserNsRef<'a> {
    /// # Safety
    ///
    /// `ns`, if not null, must stay live for `'a`.
    unsafe fn new(ns: *mut bindings::user_namespace) -> Option<Self> {
        Some(Self(
            core::ptr::NonNull::new(ns)?,
            core::marker::PhantomData,
        ))
    }

    /// Its depth (0: the initial namespace).
    pub(crate) fn level(self) -> u32 {
        // SAFETY: Live for `'a` (constructor).
        let level = unsafe { ffi::pfm_user_ns_level(self.0.as_ptr()) };
        u32::try_from(level).unwrap_or(0)
    }

    /// The namespace it was created in: `None` for the initial one.
    pub(crate) fn parent(self) -> Option<Self> {
        // SAFETY: Live for `'a`; a namespace holds its parent.
        unsafe { Self::new(ffi::pfm_user_ns_parent(self.0.as_ptr())) }
    }

    /// Its creator's kuid.
    pub(crate) fn owner(self) -> u32 {
        // SAFETY: Live for `'a`.
        unsafe { ffi::pfm_user_ns_owner(self.0.as_ptr()) }
    }
}

/// What ptrace's rule reads of a `struct cred`: ids, the permitted and
/// effective capability sets, the user namespace.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CredFacts<'a> {
    pub(crate) ids: CredIds,
    pub(crate) permitted: u64,
    pub(crate) effective: u64,
    pub(crate) user_ns: UserNsRef<'a>,
}

impl<'a> CredFacts<'a> {
    /// # Safety
    ///
    /// `cred` must be live for `'a` (referenced, or the credentials of a
    /// thread that cannot change them meanwhile: current, in a scheduler
    /// callback, or held off every CPU).
    pub(crate) unsafe fn of(cred: *const bindings::cred) -> Self {
        // SAFETY: Live (caller); a cred's user_ns is never null and is
        // referenced by it.
        unsafe {
            let ns = ffi::pfm_cred_user_ns(cred);
            Self {
                ids: cred_ids(cred),
                permitted: ffi::pfm_cred_cap_permitted(cred),
                effective: ffi::pfm_cred_cap_effective(cred),
                user_ns: UserNsRef(
                    core::ptr::NonNull::new_unchecked(ns),
                    core::marker::PhantomData,
                ),
            }
        }
    }
}

/// `task`'s mm as ptrace's rule reads it: `get_dumpable(mm)` and
/// `mm->user_ns`; `None` without an mm.
///
/// # Safety
///
/// `task` must be the current thread, or a thread in a scheduler callback
/// or held off every CPU (its mm cannot go away under us), for `'a`.
pub(crate) unsafe fn task_mm_facts<'a>(
    task: *mut bindings::task_struct,
) -> Option<(u32, UserNsRef<'a>)> {
    // SAFETY: Forwarded; the mm holds its user_ns.
    unsafe {
        let ns = UserNsRef::new(ffi::pfm_task_mm_user_ns(task))?;
        Some((task_dumpable(task)?, ns))
    }
}

/// A counted reference to a task's mm (`get_task_mm`), put when dropped.
///
/// # Invariants
///
/// `0` is a referenced mm.
pub(crate) struct MmRef(core::ptr::NonNull<bindings::mm_struct>);

impl MmRef {
    /// `task`'s mm, referenced; `None` for a thread without one (a kernel
    /// thread, or one past `exit_mm`).
    pub(crate) fn of_task(task: &Task) -> Option<Self> {
        // SAFETY: `task` is live; `get_task_mm` returns a referenced mm or NULL.
        let mm = unsafe { bindings::get_task_mm(task_ptr(task)) };
        // INVARIANT: referenced when not null.
        Some(Self(core::ptr::NonNull::new(mm)?))
    }

    /// `get_dumpable(mm)` and `mm->user_ns`, borrowed with the mm.
    pub(crate) fn facts(&self) -> (u32, UserNsRef<'_>) {
        // SAFETY: Referenced (type invariant); the mm holds its user_ns,
        // which is never null.
        unsafe {
            let ns = ffi::pfm_mm_user_ns(self.0.as_ptr());
            (
                mm_dumpable(self.0.as_ptr()),
                UserNsRef(
                    core::ptr::NonNull::new_unchecked(ns),
                    core::marker::PhantomData,
                ),
            )
        }
    }
}

impl Drop for MmRef {
    fn drop(&mut self) {
        // SAFETY: The reference this value owned (type invariant).
        unsafe { bindings::mmput(self.0.as_ptr()) };
    }
}
