// SPDX-License-Identifier: GPL-2.0

//! Waiting: wait queues, `poll`, and SIGIO owners (`fasync`).

use kernel::bindings;
use kernel::ffi::c_int;
use kernel::prelude::*;
use kernel::types::Opaque;

use super::ffi;

/// `POLLIN` (uapi `asm-generic/poll.h`).
pub(crate) const POLLIN: u32 = 0x0001;
/// `POLLRDNORM`.
pub(crate) const POLLRDNORM: u32 = 0x0040;
/// `POLLHUP`.
pub(crate) const POLLHUP: u32 = 0x0010;

/// Registers a `poll_table` entry for `queue` (the static inline `poll_wait`).
///
/// # Safety
///
/// `file` and `table` come from the VFS's `poll` call; `queue` outlives the file.
pub(crate) unsafe fn poll_wait(
    file: *mut bindings::file,
    queue: *mut bindings::wait_queue_head,
    table: *mut bindings::poll_table_struct,
) {
    // SAFETY: Forwarded from the caller's guarantees.
    unsafe { ffi::pfm_poll_wait(file, queue, table) }
}

/// A wait queue (`wait_queue_head_t`).
///
/// # Invariants
///
/// `head` is initialised (`init_waitqueue_head`).
#[pin_data]
pub(crate) struct WaitQueue {
    #[pin]
    head: Opaque<bindings::wait_queue_head>,
}

// SAFETY: A wait queue has its own lock; it is used from any thread.
unsafe impl Send for WaitQueue {}
// SAFETY: See `Send`.
unsafe impl Sync for WaitQueue {}

impl WaitQueue {
    /// An empty wait queue.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            // INVARIANT: initialised by `init_waitqueue_head`.
            head <- Opaque::ffi_init(|q: *mut bindings::wait_queue_head| {
                // SAFETY: `q` is valid for writes and not in use yet.
                unsafe { ffi::pfm_init_waitqueue_head(q) }
            }),
        })
    }

    /// The raw head, for `poll_wait`.
    pub(crate) fn as_ptr(&self) -> *mut bindings::wait_queue_head {
        self.head.get()
    }

    /// Wakes every waiter (`wake_up`). Not with the runqueue lock held.
    pub(crate) fn wake_all(&self) {
        // SAFETY: `head` is initialised (type invariant).
        unsafe {
            bindings::__wake_up(
                self.head.get(),
                bindings::TASK_NORMAL,
                0,
                core::ptr::null_mut(),
            )
        };
    }

    /// Sleeps (interruptibly) once, unless `done()` says there is no need:
    /// the caller is queued before `done` runs, so a wake-up between the
    /// check and the sleep is not lost. `exclusive`: one of the exclusive
    /// waiters per wake-up. Returns what `done` returned; the caller loops.
    pub(crate) fn wait_unless(&self, exclusive: bool, done: impl FnOnce() -> bool) -> bool {
        self.wait_once(exclusive, None, done).is_none()
    }

    /// [`WaitQueue::wait_unless`] (not exclusive) for at most `jiffies`:
    /// the jiffies left, 0 if the time ran out (or `done()` said so at
    /// once: then `jiffies`).
    pub(crate) fn wait_unless_for(&self, jiffies: u32, done: impl FnOnce() -> bool) -> u32 {
        self.wait_once(false, Some(jiffies), done)
            .unwrap_or(jiffies)
    }

    /// One wait: `None` if `done()` said there was no need, else the
    /// jiffies left of `timeout` (`Some(0)` for an untimed sleep).
    fn wait_once(
        &self,
        exclusive: bool,
        timeout: Option<u32>,
        done: impl FnOnce() -> bool,
    ) -> Option<u32> {
        let entry = Opaque::<bindings::wait_queue_entry>::uninit();
        let state = bindings::TASK_INTERRUPTIBLE as i32;
        // SAFETY: `entry` lives until `finish_wait` below; `head` is
        // initialised (type invariant).
        unsafe {
            bindings::init_wait(entry.get());
            if exclusive {
                bindings::prepare_to_wait_exclusive(self.head.get(), entry.get(), state);
            } else {
                bindings::prepare_to_wait(self.head.get(), entry.get(), state);
            }
        }
        let left = if done() {
            None
        } else if let Some(jiffies) = timeout {
            let jiffies = isize::try_from(jiffies).unwrap_or(isize::MAX);
            // SAFETY: A timed sleep; `wake_all`, a signal or the timer ends it.
            let left = unsafe { bindings::schedule_timeout(jiffies) };
            Some(u32::try_from(left).unwrap_or(0))
        } else {
            // SAFETY: A plain sleep; `wake_all` (or a signal) wakes us.
            unsafe { bindings::schedule() };
            Some(0)
        };
        // SAFETY: Pairs with the `prepare_to_wait*` above.
        unsafe { bindings::finish_wait(self.head.get(), entry.get()) };
        left
    }
}

/// A file's SIGIO owners, the list `fasync_helper` maintains.
///
/// # Invariants
///
/// The list head is NULL or a list `fasync_helper` built.
pub(crate) struct FasyncList(Opaque<*mut bindings::fasync_struct>);

// SAFETY: The list has its own locking (fasync_lock, RCU).
unsafe impl Send for FasyncList {}
// SAFETY: See `Send`.
unsafe impl Sync for FasyncList {}

impl FasyncList {
    /// An empty list.
    pub(crate) const fn new() -> Self {
        // INVARIANT: NULL, the empty list.
        Self(Opaque::new(core::ptr::null_mut()))
    }

    /// The `fasync` file operation: adds or removes `file`'s owner.
    ///
    /// # Safety
    ///
    /// `file` is the open file whose owners this list holds, and the list
    /// lives as long as it.
    pub(crate) unsafe fn helper(&self, fd: c_int, file: *mut bindings::file, on: c_int) -> c_int {
        // SAFETY: The caller's guarantees; the head is valid (type invariant).
        unsafe { bindings::fasync_helper(fd, file, on, self.0.get()) }
    }

    /// Sends SIGIO (`POLL_IN`) to every owner.
    pub(crate) fn signal_io(&self) {
        // SAFETY: The head is valid (type invariant).
        unsafe {
            bindings::kill_fasync(
                self.0.get(),
                bindings::SIGIO as i32,
                bindings::POLL_IN as i32,
            )
        };
    }
}
