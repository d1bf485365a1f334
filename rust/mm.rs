// SPDX-License-Identifier: GPL-2.0

//! Memory shared with user space: a zeroed kernel page that a file's `mmap`
//! maps read-only into the caller's address space (`vm_insert_page`), and
//! the VMA that `mmap` is asked to fill.

use core::marker::PhantomData;
use core::ptr::NonNull;

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
        // SAFETY: As for `len`.
        let f = unsafe { ffi::pfm_vma_flags(self.raw.as_ptr()) };
        f & (bindings::VM_WRITE | bindings::VM_EXEC) as c_ulong != 0
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
