// SPDX-License-Identifier: GPL-2.0

//! Memory shared with user space: a zeroed kernel page that a file's `mmap`
//! maps read-only into the caller's address space (`vm_insert_page`), and
//! the VMA that `mmap` is asked to fill.

use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicUsize, Ordering};

use kernel::bindings;
use kernel::ffi::{c_int, c_ulong, c_void};
use kernel::prelude::*;

mod ffi {
    use super::*;

    // Kernel structures with zero-sized members (bindgen's empty structs) are
    // only passed by pointer here, as `bindings` itself does.
    #[allow(improper_ctypes)]
    extern "C" {
        pub(crate) fn pfm_page_alloc() -> *mut c_void;
        pub(crate) fn pfm_page_free(p: *mut c_void);
        pub(crate) fn pfm_vma_len(v: *mut bindings::vm_area_struct) -> c_ulong;
        pub(crate) fn pfm_vma_pgoff(v: *mut bindings::vm_area_struct) -> c_ulong;
        pub(crate) fn pfm_vma_flags(v: *mut bindings::vm_area_struct) -> c_ulong;
        pub(crate) fn pfm_vma_insert_ro_page(
            v: *mut bindings::vm_area_struct,
            p: *mut c_void,
        ) -> c_int;
        pub(crate) fn pfm_vma_insert_shared_page(
            v: *mut bindings::vm_area_struct,
            offset: c_ulong,
            p: *mut c_void,
        ) -> c_int;
        pub(crate) fn pfm_vma_set_ops(
            v: *mut bindings::vm_area_struct,
            ops: *const bindings::vm_operations_struct,
            data: *mut c_void,
        );
        pub(crate) fn pfm_vma_private(v: *mut bindings::vm_area_struct) -> *mut c_void;
    }
}

/// Types a [`SharedPage`] may hold.
///
/// # Safety
///
/// All-zero bytes are a valid `Self`; `Self` fits in a page; every change
/// after creation goes through atomics (user space reads the page while the
/// kernel changes it, so nothing may assume it is not observed).
pub(crate) unsafe trait PageContents: Sync {}

/// One zeroed page of kernel memory holding a `T`, to be mapped into user
/// space read-only. Freed when dropped; user mappings keep their own
/// reference to the page (`vm_insert_page` takes one), so a mapping that
/// outlives its `SharedPage` stays valid and frozen.
///
/// # Invariants
///
/// `addr` is the direct-map address of a page from `pfm_page_alloc`, owned
/// by this value.
pub(crate) struct SharedPage<T: PageContents> {
    addr: NonNull<c_void>,
    _t: PhantomData<T>,
}

// SAFETY: The page is plain memory owned by the value; `T: Sync` is all
// the contents ask.
unsafe impl<T: PageContents> Send for SharedPage<T> {}
// SAFETY: Shared access only gives `&T`, and `T: Sync`.
unsafe impl<T: PageContents> Sync for SharedPage<T> {}

impl<T: PageContents> SharedPage<T> {
    /// A zeroed page, charged to the caller's memory cgroup. May sleep.
    pub(crate) fn new() -> Result<Self> {
        const { assert!(core::mem::size_of::<T>() <= bindings::PAGE_SIZE as usize) };
        // SAFETY: No precondition (process context, may sleep).
        let p = unsafe { ffi::pfm_page_alloc() };
        let addr = NonNull::new(p).ok_or(ENOMEM)?;
        // INVARIANT: a page we own.
        Ok(Self {
            addr,
            _t: PhantomData,
        })
    }

    /// The contents.
    pub(crate) fn get(&self) -> &T {
        // SAFETY: The page is ours and page-aligned; zeroed bytes are a valid
        // `T` and every later change is through its atomics (`PageContents`).
        unsafe { self.addr.cast::<T>().as_ref() }
    }
}

impl<T: PageContents> Drop for SharedPage<T> {
    fn drop(&mut self) {
        // SAFETY: The page from `pfm_page_alloc`, freed once (type invariant);
        // mappings hold their own references.
        unsafe { ffi::pfm_page_free(self.addr.as_ptr()) };
    }
}

/// The VMA a file's `mmap` is asked to fill, for the duration of the call.
pub(crate) struct Vma<'a> {
    raw: NonNull<bindings::vm_area_struct>,
    _call: PhantomData<&'a mut bindings::vm_area_struct>,
}

impl<'a> Vma<'a> {
    /// Wraps the VMA of an `mmap` file operation.
    ///
    /// # Safety
    ///
    /// `raw` is the VMA the VFS passed to `mmap`, with the mmap lock held for
    /// writing, for the lifetime `'a` (the call).
    pub(crate) unsafe fn from_raw(raw: *mut bindings::vm_area_struct) -> Option<Self> {
        Some(Self {
            raw: NonNull::new(raw)?,
            _call: PhantomData,
        })
    }

    /// Its length in bytes.
    pub(crate) fn len(&self) -> usize {
        // SAFETY: A valid VMA for the call (`from_raw`).
        unsafe { ffi::pfm_vma_len(self.raw.as_ptr()) as usize }
    }

    /// Its offset into the file, in pages.
    pub(crate) fn pgoff(&self) -> usize {
        // SAFETY: As for `len`.
        unsafe { ffi::pfm_vma_pgoff(self.raw.as_ptr()) as usize }
    }

    /// Whether it is mapped writable or executable.
    pub(crate) fn writable_or_exec(&self) -> bool {
        self.flags() & (bindings::VM_WRITE | bindings::VM_EXEC) as c_ulong != 0
    }

    /// Whether it is executable.
    pub(crate) fn exec(&self) -> bool {
        self.flags() & bindings::VM_EXEC as c_ulong != 0
    }

    /// Whether it is `MAP_SHARED` and writable (`PROT_WRITE`).
    pub(crate) fn shared_writable(&self) -> bool {
        let want = (bindings::VM_SHARED | bindings::VM_WRITE) as c_ulong;
        self.flags() & want == want
    }

    fn flags(&self) -> c_ulong {
        // SAFETY: As for `len`.
        unsafe { ffi::pfm_vma_flags(self.raw.as_ptr()) }
    }

    /// Maps `first` and then each of `rest` from the VMA's start, shared
    /// and writable (both sides write the pages), and makes the mapping
    /// one that cannot be split, grown, made executable, copied at fork
    /// (unless `MADV_DOFORK`) or dumped. `mappings` counts the VMAs that
    /// map the pages: this call is refused with `EBUSY` unless it is 0,
    /// and the VMA's operations keep it (an `mremap` move or a fork adds
    /// one, each `munmap` or exit removes one). The VMA must be exactly as
    /// long as the pages. May sleep (page tables).
    ///
    /// # Safety
    ///
    /// `mappings` must outlive the VMAs: its owner must be kept alive by
    /// the file the VMA maps (each VMA holds a reference to the file).
    pub(crate) unsafe fn insert_shared_pages<H: PageContents, D: PageContents>(
        &self,
        first: &SharedPage<H>,
        rest: &[SharedPage<D>],
        mappings: &AtomicUsize,
    ) -> Result {
        if mappings
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(EBUSY);
        }
        let pages = Iterator::chain(core::iter::once(first.addr), rest.iter().map(|p| p.addr));
        for (i, addr) in pages.enumerate() {
            let offset = (i * bindings::PAGE_SIZE as usize) as c_ulong;
            // SAFETY: A valid VMA under the mmap lock (`from_raw`); each page
            // is a whole page we own, which `vm_insert_page` references; the
            // caller sized the VMA for them all.
            let r = unsafe {
                ffi::pfm_vma_insert_shared_page(self.raw.as_ptr(), offset, addr.as_ptr())
            };
            if r < 0 {
                // The failed mmap's VMA is torn down with what is in it,
                // without its operations (not set yet).
                mappings.store(0, Ordering::Release);
                return Err(Error::from_errno(r));
            }
        }
        // SAFETY: The VMA is valid; `TRACKED_OPS` is static; `mappings`
        // outlives the VMA (the caller's promise), and the operations read
        // it back only as an `AtomicUsize`.
        unsafe {
            ffi::pfm_vma_set_ops(
                self.raw.as_ptr(),
                &TRACKED_OPS.0,
                (mappings as *const AtomicUsize).cast_mut().cast(),
            )
        };
        Ok(())
    }

    /// Maps `page` at the VMA's start, read-only for good: the VMA loses
    /// `VM_MAYWRITE` and `VM_MAYEXEC` (no `mprotect` can add them), and
    /// cannot grow. May sleep (page tables).
    pub(crate) fn insert_ro_page<T: PageContents>(&self, page: &SharedPage<T>) -> Result {
        // SAFETY: A valid VMA under the mmap lock (`from_raw`); the page is
        // a whole page we own, which `vm_insert_page` references.
        let r = unsafe { ffi::pfm_vma_insert_ro_page(self.raw.as_ptr(), page.addr.as_ptr()) };
        if r < 0 {
            return Err(Error::from_errno(r));
        }
        Ok(())
    }
}

/// The operations of a [`Vma::insert_shared_pages`] mapping: each VMA
/// that maps the pages is counted (`open` for a copy made by `mremap` or
/// fork, `close` at its end); none may be split (a partial `munmap` or
/// `mprotect` would leave two). `mremap` cannot grow it (`VM_DONTEXPAND`).
struct VmOps(bindings::vm_operations_struct);

// SAFETY: Function pointers, never written.
unsafe impl Sync for VmOps {}

static TRACKED_OPS: VmOps = VmOps(bindings::vm_operations_struct {
    open: Some(tracked_open),
    close: Some(tracked_close),
    may_split: Some(tracked_no_split),
    // SAFETY: All-zero is a valid `vm_operations_struct`: every other
    // entry absent.
    ..unsafe { core::mem::zeroed() }
});

/// The count of a tracked VMA.
///
/// # Safety
///
/// `vma` was set up by [`Vma::insert_shared_pages`] (or copied from one).
unsafe fn tracked_count<'a>(vma: *mut bindings::vm_area_struct) -> &'a AtomicUsize {
    // SAFETY: `vm_private_data` is the `AtomicUsize` the mapping was made
    // with (copies keep it), alive while the VMA is (`insert_shared_pages`'
    // contract).
    unsafe { &*ffi::pfm_vma_private(vma).cast::<AtomicUsize>() }
}

/// `open` of a tracked mapping: a copy of it (`mremap` move, fork).
///
/// # Safety
///
/// Called by the mm with a VMA copied from a tracked one.
unsafe extern "C" fn tracked_open(vma: *mut bindings::vm_area_struct) {
    // SAFETY: The caller's guarantee.
    unsafe { tracked_count(vma) }.fetch_add(1, Ordering::AcqRel);
}

/// `close` of a tracked mapping.
///
/// # Safety
///
/// Called by the mm with a tracked VMA.
unsafe extern "C" fn tracked_close(vma: *mut bindings::vm_area_struct) {
    // SAFETY: The caller's guarantee.
    unsafe { tracked_count(vma) }.fetch_sub(1, Ordering::AcqRel);
}

/// `may_split` of a tracked mapping: never.
///
/// # Safety
///
/// Called by the mm with a VMA set up by [`Vma::insert_shared_pages`].
unsafe extern "C" fn tracked_no_split(
    _vma: *mut bindings::vm_area_struct,
    _addr: c_ulong,
) -> c_int {
    EINVAL.to_errno()
}
