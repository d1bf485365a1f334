// SPDX-License-Identifier: GPL-2.0

//! Reference-counted objects in a slab cache of their own.
//!
//! 6.12's `Arc` allocates from `kmalloc`, whose size classes jump from 256
//! to 512 bytes: a 368-byte context would take 512. A `kmem_cache` sized to
//! the object packs 11 in a 4 KiB page instead of 8. [`SlabArc`] is `Arc`'s
//! shape (a `refcount_t` before the value, the same saturation and the same
//! orderings, as `refcount_inc`/`refcount_dec_and_test` give them) over such
//! a cache.

use core::marker::PhantomData;
use core::ops::Deref;
use core::ptr::NonNull;

use kernel::bindings;
use kernel::init::PinInit;
use kernel::prelude::*;
use kernel::str::CStr;
use kernel::types::Opaque;

use super::ffi;

/// What a [`SlabArc`] points to: the count, then the value.
#[repr(C)]
struct SlabArcInner<T> {
    refcount: Opaque<bindings::refcount_t>,
    data: T,
}

/// A slab cache for `SlabArc<T>` objects.
///
/// # Invariants
///
/// `raw` is a cache created for `SlabArcInner<T>`'s size and alignment,
/// destroyed only at drop.
pub(crate) struct SlabCache<T> {
    raw: NonNull<bindings::kmem_cache>,
    _type: PhantomData<fn() -> T>,
}

// SAFETY: A `kmem_cache` is used from any CPU with its own locking.
unsafe impl<T> Send for SlabCache<T> {}
// SAFETY: See `Send`.
unsafe impl<T> Sync for SlabCache<T> {}

impl<T> SlabCache<T> {
    /// Creates the cache, named `name` in `/proc/slabinfo`.
    pub(crate) fn new(name: &'static CStr) -> Result<Self> {
        let size = u32::try_from(core::mem::size_of::<SlabArcInner<T>>()).map_err(|_| EINVAL)?;
        let mut args = bindings::kmem_cache_args {
            align: core::mem::align_of::<SlabArcInner<T>>() as u32,
            ..Default::default()
        };
        // Not merged into another cache of a similar size: its name and
        // object size (`object_size`, the sysfs `context_bytes`) stay its
        // own, and objects left at destroy are reported under it. No
        // hardware-cache alignment, which would round the objects up; the
        // charge to a memory cgroup comes with the allocation's GFP flags.
        let flags: bindings::slab_flags_t = 1 << bindings::_slab_flag_bits__SLAB_NO_MERGE;
        // SAFETY: `name` lives forever; `args` is valid for the call (the
        // cache copies what it needs).
        let raw = unsafe {
            bindings::__kmem_cache_create_args(name.as_char_ptr(), size, &mut args, flags)
        };
        // INVARIANT: created for `SlabArcInner<T>`.
        Ok(Self {
            raw: NonNull::new(raw).ok_or(ENOMEM)?,
            _type: PhantomData,
        })
    }

    /// Bytes per object, as the cache lays them out.
    pub(crate) fn object_size(&self) -> usize {
        // SAFETY: `raw` is a live cache (type invariant).
        unsafe { bindings::kmem_cache_size(self.raw.as_ptr()) as usize }
    }
}

impl<T> Drop for SlabCache<T> {
    fn drop(&mut self) {
        // SAFETY: `raw` is a live cache (type invariant). The caller frees
        // every object first (a `SlabArc` holds what keeps the cache's
        // owner alive); one left would be reported by the slab, not freed.
        unsafe { bindings::kmem_cache_destroy(self.raw.as_ptr()) };
    }
}

/// A type whose [`SlabArc`]s come from one cache.
///
/// # Safety
///
/// [`InSlab::slab`] must return the same cache at every call, alive as
/// long as any `SlabArc<Self>`: objects are freed to the cache it returns.
pub(crate) unsafe trait InSlab: Sized + 'static {
    /// The cache.
    fn slab() -> &'static SlabCache<Self>;
}

/// A reference-counted, pinned `T` in `T`'s slab cache.
///
/// # Invariants
///
/// `ptr` points to a `SlabArcInner<T>` allocated from `T::slab()`, whose
/// `data` is initialised and whose count includes this reference. The
/// value never moves.
pub(crate) struct SlabArc<T: InSlab> {
    ptr: NonNull<SlabArcInner<T>>,
    _owns: PhantomData<SlabArcInner<T>>,
}

// SAFETY: Like `Arc`: the value is shared between threads, and may be
// dropped on any of them.
unsafe impl<T: InSlab + Send + Sync> Send for SlabArc<T> {}
// SAFETY: See `Send`.
unsafe impl<T: InSlab + Send + Sync> Sync for SlabArc<T> {}

impl<T: InSlab> SlabArc<T> {
    /// Allocates from `T`'s cache and initialises the value in place with
    /// `init`. May sleep; the object is charged to the caller's memory
    /// cgroup (`GFP_KERNEL_ACCOUNT`), as the file that owns it is.
    pub(crate) fn pin_init<E>(init: impl PinInit<T, E>) -> Result<Self>
    where
        Error: From<E>,
    {
        let cache = T::slab().raw.as_ptr();
        // SAFETY: `cache` is live (`InSlab`), and made for `SlabArcInner<T>`.
        let raw = unsafe { ffi::pfm_kmem_cache_alloc(cache, bindings::GFP_KERNEL_ACCOUNT) };
        let ptr = NonNull::new(raw.cast::<SlabArcInner<T>>()).ok_or(ENOMEM)?;
        let p = ptr.as_ptr();
        // SAFETY: `p` is a fresh object of the right size and alignment:
        // the count starts at one, for the reference returned.
        unsafe {
            Opaque::raw_get(core::ptr::addr_of!((*p).refcount)).write(bindings::REFCOUNT_INIT(1))
        };
        // SAFETY: `data` is valid for writes and never moves (the object
        // stays where the cache put it).
        if let Err(e) = unsafe { init.__pinned_init(core::ptr::addr_of_mut!((*p).data)) } {
            // SAFETY: Nothing was initialised (`__pinned_init` cleans up
            // after itself on failure); the object goes back to its cache.
            unsafe { bindings::kmem_cache_free(cache, raw) };
            return Err(e.into());
        }
        // INVARIANT: allocated from `T::slab()`, initialised, one reference.
        Ok(Self {
            ptr,
            _owns: PhantomData,
        })
    }

    /// Gives up the reference as a pointer to the value, for C to keep
    /// (`from_raw` takes it back, `borrow_raw` lends it).
    pub(crate) fn into_raw(self) -> *const T {
        let me = core::mem::ManuallyDrop::new(self);
        // SAFETY: `ptr` is valid (type invariant); no reference is formed.
        unsafe { core::ptr::addr_of!((*me.ptr.as_ptr()).data) }
    }

    /// The inner object of a pointer `into_raw` returned.
    ///
    /// # Safety
    ///
    /// `data` came from [`SlabArc::into_raw`] of a live object.
    unsafe fn inner_of(data: *const T) -> NonNull<SlabArcInner<T>> {
        let offset = core::mem::offset_of!(SlabArcInner<T>, data);
        // SAFETY: `data` is at `offset` in its `SlabArcInner<T>` (caller).
        unsafe { NonNull::new_unchecked(data.cast::<u8>().sub(offset).cast_mut().cast()) }
    }

    /// Takes back a reference given up by [`SlabArc::into_raw`].
    ///
    /// # Safety
    ///
    /// `data` came from `into_raw`, and its reference is not taken back
    /// twice.
    pub(crate) unsafe fn from_raw(data: *const T) -> Self {
        // INVARIANT: the reference `into_raw` gave up (caller).
        Self {
            // SAFETY: From `into_raw` (caller).
            ptr: unsafe { Self::inner_of(data) },
            _owns: PhantomData,
        }
    }

    /// Lends the value of a reference `into_raw` gave up, for `'a`.
    ///
    /// # Safety
    ///
    /// `data` came from `into_raw`, and that reference is not taken back
    /// (`from_raw`) during `'a`.
    pub(crate) unsafe fn borrow_raw<'a>(data: *const T) -> SlabArcBorrow<'a, T> {
        SlabArcBorrow {
            // SAFETY: From `into_raw` (caller).
            ptr: unsafe { Self::inner_of(data) },
            _life: PhantomData,
        }
    }
}

impl<T: InSlab> Clone for SlabArc<T> {
    fn clone(&self) -> Self {
        // SAFETY: The count is live (type invariant); it saturates rather
        // than wraps, as `Arc`'s does.
        unsafe { bindings::refcount_inc(self.ptr.as_ref().refcount.get()) };
        // INVARIANT: the count includes the new reference.
        Self {
            ptr: self.ptr,
            _owns: PhantomData,
        }
    }
}

impl<T: InSlab> Deref for SlabArc<T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: Initialised and alive while this reference is (type
        // invariant).
        unsafe { &self.ptr.as_ref().data }
    }
}

impl<T: InSlab> Drop for SlabArc<T> {
    fn drop(&mut self) {
        let p = self.ptr.as_ptr();
        // SAFETY: The count is live (type invariant). `refcount_dec_and_test`
        // orders every earlier access before the free, as `Arc`'s drop does.
        let last = unsafe {
            bindings::refcount_dec_and_test(Opaque::raw_get(core::ptr::addr_of!((*p).refcount)))
        };
        if last {
            // SAFETY: The last reference: nobody else can reach the value.
            // It is dropped in place (it never moved), then the object
            // goes back to the cache it came from (type invariant).
            unsafe {
                core::ptr::drop_in_place(core::ptr::addr_of_mut!((*p).data));
                bindings::kmem_cache_free(T::slab().raw.as_ptr(), p.cast());
            }
        }
    }
}

/// A borrowed [`SlabArc`]: the value for `'a`, without touching the count.
///
/// # Invariants
///
/// `ptr` is a live `SlabArcInner<T>` with a reference held for at least
/// `'a`.
pub(crate) struct SlabArcBorrow<'a, T: InSlab> {
    ptr: NonNull<SlabArcInner<T>>,
    _life: PhantomData<&'a T>,
}

impl<T: InSlab> Clone for SlabArcBorrow<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: InSlab> Copy for SlabArcBorrow<'_, T> {}

impl<T: InSlab> SlabArcBorrow<'_, T> {
    /// A new counted reference.
    pub(crate) fn to_arc(self) -> SlabArc<T> {
        let borrowed = core::mem::ManuallyDrop::new(SlabArc {
            ptr: self.ptr,
            _owns: PhantomData,
        });
        // INVARIANT: `clone` counts the reference it returns; `borrowed`
        // is never dropped, so the lender's reference is untouched.
        (*borrowed).clone()
    }
}

impl<T: InSlab> Deref for SlabArcBorrow<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: Alive for `'a` (type invariant).
        unsafe { &self.ptr.as_ref().data }
    }
}
