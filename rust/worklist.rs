// SPDX-License-Identifier: GPL-2.0

//! Objects that finish in process context, through one work item for all
//! of them.
//!
//! Each object waiting is linked into a lock-free stack by an 8-byte
//! [`WorkLink`] instead of carrying a 32-byte `work_struct` of its own
//! (memory per monitored thread: an attachment fits `kmalloc-192` with
//! it). Any context may push (hard IRQ included); the list's one work item
//! takes the whole stack at once and runs each object's [`WorkListItem::run`]
//! in the workqueue. Since the consumer only ever takes everything, a
//! pusher's compare-exchange on the head cannot be fooled by an object that
//! left and came back (the ABA problem of single pops).
//!
//! The work runs [`BATCH_DELAY`] after the first push of a batch, not at
//! once: a worker woken per object would run on the pusher's CPU just as
//! the thread that the object's end woke gets it (a monitored child's
//! exit wakes its parent in `wait`, then its final switch hands the
//! attachment here), preempting that thread once per exit: one switch
//! more per fork for the monitored program (`make bench --only inherit`:
//! 381 against 200 for 200 forks). Batched, a jiffy's ends cost one
//! wake-up.
//!
//! The semantics are a work item's: an object is queued at most once at a
//! time (a second push while it waits is refused and hands the reference
//! back), and it may be queued again from the moment its `run` starts.

use core::marker::PhantomData;
use core::sync::atomic::{AtomicPtr, Ordering};

use kernel::bindings;
use kernel::init::PinInit;
use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::types::Opaque;

use super::ffi;

/// How long the work waits after the first push of a batch (a jiffy).
const BATCH_DELAY: usize = 1;

/// `WorkLink::next` of an object in no list.
const IDLE: *mut WorkLink = core::ptr::without_provenance_mut(1);

/// What an object carries to wait in a [`WorkList`].
///
/// # Invariants
///
/// `next` is [`IDLE`] exactly while the object is in no list (and not
/// being pushed); otherwise it is the next waiting object's link, or null
/// at the end of the list.
pub(crate) struct WorkLink {
    next: AtomicPtr<WorkLink>,
}

impl WorkLink {
    /// A link in no list.
    pub(crate) const fn new() -> Self {
        // INVARIANT: in no list.
        Self {
            next: AtomicPtr::new(IDLE),
        }
    }
}

/// What runs when a [`WorkList`]'s work takes an object.
pub(crate) trait WorkListItem: Sized {
    /// Runs in the workqueue (process context, no lock held), with the
    /// reference that was pushed.
    fn run(this: Arc<Self>);
}

/// Says where a type keeps its [`WorkLink`].
///
/// # Safety
///
/// `OFFSET` must be the offset of a field of type `WorkLink`; use
/// [`impl_has_work_link`].
pub(crate) unsafe trait HasWorkLink: Sized {
    /// Offset of the field.
    const OFFSET: usize;

    /// The link inside `self`.
    fn work_link(&self) -> &WorkLink {
        let base = self as *const Self as *const u8;
        // SAFETY: `OFFSET` is the offset of a `WorkLink` field (trait
        // contract), inside `self`.
        unsafe { &*base.add(Self::OFFSET).cast::<WorkLink>() }
    }
}

/// Implements [`HasWorkLink`] for a field.
macro_rules! impl_has_work_link {
    (impl$({$($generics:tt)*})? HasWorkLink for $self:ty { self.$field:ident }) => {
        // SAFETY: The offset is that of `$field`, which `_check` proves is
        // a `WorkLink`.
        unsafe impl$(<$($generics)+>)? $crate::rust::HasWorkLink for $self {
            const OFFSET: usize = {
                // Type check: the field is a `WorkLink`.
                fn _check$(<$($generics)+>)?(s: &$self) -> &$crate::rust::WorkLink { &s.$field }
                ::core::mem::offset_of!(Self, $field)
            };
        }
    };
}
pub(crate) use impl_has_work_link;

/// Objects of type `T` waiting to run in a workqueue.
///
/// # Invariants
///
/// `head` is the first waiting object's link (null: none), and each
/// waiting object holds one leaked `Arc<T>` reference for the list.
/// `work` is initialised with [`WorkList::work_fn`]; while `queue` is not
/// null it is a live workqueue. An armed `work` timer has a waiting object
/// (holding its reference), or [`WorkList::flush`] waits it out.
#[pin_data]
pub(crate) struct WorkList<T> {
    head: AtomicPtr<WorkLink>,
    queue: AtomicPtr<bindings::workqueue_struct>,
    #[pin]
    work: Opaque<bindings::delayed_work>,
    _items: PhantomData<T>,
}

// SAFETY: The list is lock-free atomics and a work item, which the kernel
// queues from any CPU; the objects it holds are `Send + Sync`.
unsafe impl<T: Send + Sync> Send for WorkList<T> {}
// SAFETY: See `Send`.
unsafe impl<T: Send + Sync> Sync for WorkList<T> {}

impl<T: HasWorkLink + WorkListItem + Send + Sync> WorkList<T> {
    /// An empty list with no workqueue yet.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            head: AtomicPtr::new(core::ptr::null_mut()),
            queue: AtomicPtr::new(core::ptr::null_mut()),
            // INVARIANT: initialised with `work_fn`.
            // SAFETY: `w` is valid for writes; `INIT_DELAYED_WORK`
            // initialises it.
            work <- Opaque::ffi_init(|w| unsafe { ffi::pfm_init_delayed_work(w, Self::work_fn) }),
            _items: PhantomData,
        })
    }

    /// Runs the objects pushed from now on in `queue` (null: none).
    ///
    /// # Safety
    ///
    /// `queue` must be a live workqueue, and stay live while anything may
    /// be pushed: its owner calls [`WorkList::quiesce`] once nothing new can
    /// be pushed, and only then destroys it (which drains it) and sets null.
    pub(crate) unsafe fn set_queue(&self, queue: *mut bindings::workqueue_struct) {
        // INVARIANT: the caller's guarantee.
        self.queue.store(queue, Ordering::Release);
    }

    /// Waits until every push in progress has queued the work. A push runs
    /// with interrupts off from publishing its object to queueing the work,
    /// so an RCU grace period covers it: without that, the object could be
    /// taken and freed by a run already pending (the module's last
    /// reference, for an attachment) while its pusher had yet to queue,
    /// and the queue be destroyed in between. Process context.
    pub(crate) fn quiesce(&self) {
        super::synchronize_rcu();
    }

    /// Runs the work now if its timer is armed, and waits for it: a push
    /// that published its object, then queued the work after a run had
    /// already taken the object, leaves a timer that no waiting object
    /// accounts for. After [`WorkList::quiesce`], before the queue goes.
    /// Process context.
    pub(crate) fn flush(&self) {
        // SAFETY: `work` is initialised (type invariant) and its queue
        // still live (the caller's order).
        unsafe { bindings::flush_delayed_work(self.work.get()) };
    }

    /// Queues `this` to run in the workqueue. Refused, with the reference
    /// handed back, if it is waiting already.
    pub(crate) fn push(&self, this: Arc<T>) -> Result<(), Arc<T>> {
        if this
            .work_link()
            .next
            .compare_exchange(
                IDLE,
                core::ptr::null_mut(),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            return Err(this);
        }
        // From publishing to queueing, interrupts off (see `quiesce`).
        let flags = super::local_irq_save();
        // INVARIANT: the reference the list holds, taken back by `work_fn`.
        let raw = Arc::into_raw(this);
        // SAFETY: The leaked reference keeps the object alive until
        // `work_fn` takes it back.
        let link = unsafe { (*raw).work_link() };
        let link_ptr = link as *const WorkLink as *mut WorkLink;
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            link.next.store(head, Ordering::Relaxed);
            // Release: the link, and all the object's state, before the
            // consumer's acquiring swap sees it.
            match self.head.compare_exchange_weak(
                head,
                link_ptr,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(h) => head = h,
            }
        }
        // Queueing a work that is pending (its timer armed, or queued) does
        // nothing: it has not yet taken the list.
        // SAFETY: `queue` is live while objects may be pushed, and until
        // `quiesce` has waited for this section (`set_queue`); `work` is
        // initialised (type invariant).
        unsafe {
            bindings::queue_delayed_work_on(
                bindings::wq_misc_consts_WORK_CPU_UNBOUND as i32,
                self.queue.load(Ordering::Acquire),
                self.work.get(),
                BATCH_DELAY,
            )
        };
        super::local_irq_restore(flags);
        Ok(())
    }

    /// The work: takes every waiting object and runs it.
    ///
    /// # Safety
    ///
    /// `work` is the `work_struct` inside the `work` field of a live
    /// `WorkList<T>`.
    unsafe extern "C" fn work_fn(work: *mut bindings::work_struct) {
        let list = work
            .cast::<u8>()
            .wrapping_sub(core::mem::offset_of!(bindings::delayed_work, work))
            .wrapping_sub(core::mem::offset_of!(Self, work))
            .cast::<Self>();
        // SAFETY: The caller's guarantee.
        let list = unsafe { &*list };
        let mut p = list.head.swap(core::ptr::null_mut(), Ordering::Acquire);
        while !p.is_null() {
            // SAFETY: A waiting object's link: its object is alive, the
            // list holding a reference to it (type invariant).
            let link = unsafe { &*p };
            let next = link.next.load(Ordering::Relaxed);
            let owner = p.cast::<u8>().wrapping_sub(T::OFFSET).cast::<T>();
            // SAFETY: `push` leaked this reference for the list; `owner` is
            // the object the link is in (`HasWorkLink`).
            let this = unsafe { Arc::from_raw(owner) };
            // INVARIANT: out of the list from here on: it may be pushed
            // again (as a work item may be queued again once it runs).
            link.next.store(IDLE, Ordering::Release);
            T::run(this);
            p = next;
        }
    }
}
