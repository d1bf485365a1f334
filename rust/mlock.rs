// SPDX-License-Identifier: GPL-2.0

//! Locked memory, charged where `perf_mmap` (`kernel/events/core.c`, 6.12)
//! charges a ring buffer's pages: the user's `perf_mlock` (within
//! `perf_event_mlock_kb`), then the caller's `mm->pinned_vm` (`VmPin` in
//! `/proc/PID/status`), which perf holds to `RLIMIT_MEMLOCK`. The same
//! counters as perf's, so that perf and perfmon together give a user no
//! more than perf alone would.
//!
//! Not `account_locked_vm`: that charges `mm->locked_vm` under the mmap
//! lock and refuses with `ENOMEM`, where perf charges `pinned_vm` (an
//! atomic, no lock) and refuses with `EPERM`. What to charge is the
//! caller's decision (`pfm_ctx/smpl.rs`, with `pfm_smpl`'s arithmetic);
//! this file only reads the counters, adds, and gives back.

use core::ptr::NonNull;

use kernel::bindings;
use kernel::ffi::{c_long, c_uint, c_ulong};
use kernel::prelude::*;

mod ffi {
    use super::*;

    // Kernel structures with zero-sized members (bindgen's empty structs) are
    // only passed by pointer here, as `bindings` itself does.
    #[allow(improper_ctypes)]
    extern "C" {
        pub(crate) fn pfm_get_current_user() -> *mut bindings::user_struct;
        pub(crate) fn pfm_user_perf_mlock(user: *mut bindings::user_struct) -> c_long;
        pub(crate) fn pfm_user_perf_mlock_add(user: *mut bindings::user_struct, pages: c_long);
        pub(crate) fn pfm_current_mm_grab() -> *mut bindings::mm_struct;
        pub(crate) fn pfm_mmdrop(mm: *mut bindings::mm_struct);
        pub(crate) fn pfm_mm_pinned_vm(mm: *mut bindings::mm_struct) -> i64;
        pub(crate) fn pfm_mm_pinned_vm_add(mm: *mut bindings::mm_struct, pages: i64);
        pub(crate) fn pfm_rlimit_memlock() -> c_ulong;
        pub(crate) fn pfm_num_online_cpus() -> c_uint;
        // Exported (kernel/user.c); declared here with the type used above.
        pub(crate) fn free_uid(user: *mut bindings::user_struct);
    }
}

/// The counters a charge is decided from, read just before it.
pub(crate) struct LockedNow {
    /// Pages the calling thread's user has charged (`perf_mlock`).
    pub(crate) user_locked: usize,
    /// Pages pinned in the calling thread's mm (`pinned_vm`).
    pub(crate) pinned: u64,
    /// The thread's `RLIMIT_MEMLOCK`, in bytes (soft limit).
    pub(crate) rlimit: u64,
}

/// Pages charged as locked memory to a user and an mm (see the module's
/// comment), given back when dropped: whatever holds the memory holds
/// this, so the charge goes exactly once, with the memory.
///
/// # Invariants
///
/// `user` holds a reference to its `user_struct` (`get_current_user`) and
/// `mm`, if any, one to its `mm_struct` (`mmgrab`: the structure, not the
/// address space); `user_pages` were added to `user`'s `perf_mlock` and
/// `pinned` to `mm`'s `pinned_vm` (0 without an mm) by [`Self::charge`],
/// and are taken back once, by `drop`.
pub(crate) struct LockedCharge {
    user: NonNull<bindings::user_struct>,
    mm: Option<NonNull<bindings::mm_struct>>,
    user_pages: usize,
    pinned: usize,
}

// SAFETY: References to reference-counted kernel objects, whose counters
// are atomics; their references may be dropped by any task.
unsafe impl Send for LockedCharge {}
// SAFETY: `&LockedCharge` gives access to nothing.
unsafe impl Sync for LockedCharge {}

impl LockedCharge {
    /// Charges the calling thread's user and mm what `decide` answers
    /// from their counters now (`(user pages, pinned pages)`), as
    /// `perf_mmap` charges a ring; `decide`'s error (its refusal) charges
    /// nothing. Like perf, the look and the charge are not one atomic
    /// step: two charges at once may both fit where one of them alone
    /// would. Process context; takes no lock, does not sleep.
    pub(crate) fn charge(
        decide: impl FnOnce(&LockedNow) -> Result<(usize, usize)>,
    ) -> Result<Self> {
        // SAFETY: Process context: `current` has credentials.
        let user = NonNull::new(unsafe { ffi::pfm_get_current_user() }).ok_or(EINVAL)?;
        // SAFETY: No precondition: `current->mm` is stable for `current`.
        let mm = NonNull::new(unsafe { ffi::pfm_current_mm_grab() });
        // INVARIANT: both referenced above; nothing charged yet.
        let mut charge = Self {
            user,
            mm,
            user_pages: 0,
            pinned: 0,
        };
        let now = LockedNow {
            // SAFETY: `user` is referenced (type invariant).
            user_locked: usize::try_from(unsafe { ffi::pfm_user_perf_mlock(user.as_ptr()) })
                .unwrap_or(0),
            // SAFETY: `mm` is referenced (type invariant).
            pinned: mm
                .map_or(0, |mm| unsafe { ffi::pfm_mm_pinned_vm(mm.as_ptr()) })
                .max(0) as u64,
            // SAFETY: No precondition.
            rlimit: unsafe { ffi::pfm_rlimit_memlock() } as u64,
        };
        // On a refusal `charge` drops with nothing charged: the references
        // go.
        let (user_pages, pinned) = decide(&now)?;
        // Without an mm (never for an ioctl from user space) nothing can
        // be pinned.
        if pinned > 0 && mm.is_none() {
            return Err(EPERM);
        }
        let user_delta = c_long::try_from(user_pages).map_err(|_| EINVAL)?;
        let pinned_delta = i64::try_from(pinned).map_err(|_| EINVAL)?;
        // SAFETY: `user` is referenced (type invariant).
        unsafe { ffi::pfm_user_perf_mlock_add(user.as_ptr(), user_delta) };
        charge.user_pages = user_pages;
        if let Some(mm) = mm {
            // SAFETY: `mm` is referenced (type invariant).
            unsafe { ffi::pfm_mm_pinned_vm_add(mm.as_ptr(), pinned_delta) };
            charge.pinned = pinned;
        }
        // INVARIANT: what was added is recorded.
        Ok(charge)
    }
}

impl Drop for LockedCharge {
    fn drop(&mut self) {
        // The deltas were converted when charged: they fit.
        let user_delta = self.user_pages as c_long;
        let pinned_delta = self.pinned as i64;
        // SAFETY: `user` is referenced, `user_pages` charged to it (type
        // invariant); taken back once, here.
        unsafe { ffi::pfm_user_perf_mlock_add(self.user.as_ptr(), -user_delta) };
        if let Some(mm) = self.mm {
            // The structure outlives its address space, so the uncharge is
            // right after the process's exit too (its counter is then read
            // by nobody).
            // SAFETY: `mm` is referenced, `pinned` charged to it (type
            // invariant); taken back once, here.
            unsafe { ffi::pfm_mm_pinned_vm_add(mm.as_ptr(), -pinned_delta) };
            // The last reference may free the structure (`__mmdrop`): we
            // run in process context without locks, as every free of a
            // sampling buffer does (`pfm_ctx/smpl.rs`).
            // SAFETY: The `mmgrab` reference taken by `charge` (type
            // invariant), put once.
            unsafe { ffi::pfm_mmdrop(mm.as_ptr()) };
        }
        // SAFETY: The reference taken by `charge` (type invariant), put once.
        unsafe { ffi::free_uid(self.user.as_ptr()) };
    }
}

/// `num_online_cpus()`: perf's allowance is per online CPU.
pub(crate) fn online_cpus() -> u32 {
    // SAFETY: No precondition.
    unsafe { ffi::pfm_num_online_cpus() }
}

/// `capable(CAP_IPC_LOCK)` of the calling thread: perf's exemption from
/// `RLIMIT_MEMLOCK` (audited, as perf's check is, and asked in the same
/// place: only when over the limit).
pub(crate) fn ipc_lock_capable() -> bool {
    // SAFETY: No precondition (process context).
    unsafe { bindings::capable(bindings::CAP_IPC_LOCK as i32) }
}
