//! Reads without a system call: the context's mapped counter page
//! (`mmap` of the fd), read with the seqlock protocol of `pfm_page` (the
//! module's own file: every access to the shared page is atomic, so the
//! reader has no data race in Rust's memory model).

use std::fmt;
use std::ptr::NonNull;

use crate::abi::{PFM_PAGE_COUNTING, PFM_PAGE_RUNNING, PFM_PAGE_VERSION};
use crate::pfm_page::{Meta, PageCells};
use crate::sys;

/// A context's counter page, mapped read-only; unmapped when dropped.
///
/// The page describes the monitored thread. Only that thread, while it
/// runs, reads values as of now; any other reader gets the values of the
/// kernel's last update (at the thread's last switch or the last call on
/// the context), flagged by [`MappedReading::live`] being false.
///
/// # Invariants
///
/// `page` is a live read-only mapping of `PFM_PAGE_SIZE` bytes of a perfmon
/// counter page, owned by this value.
pub struct CounterPage {
    page: NonNull<u8>,
}

// SAFETY: The mapping is plain shared memory, read only through atomics.
unsafe impl Send for CounterPage {}
// SAFETY: See `Send`.
unsafe impl Sync for CounterPage {}

impl fmt::Debug for CounterPage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CounterPage")
            .field("addr", &self.page)
            .finish()
    }
}

/// What one consistent read of the page says besides the values
/// ([`CounterPage::read_into`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MappedStatus {
    meta: Meta,
}

impl MappedStatus {
    /// The reader is the monitored thread, running: the values are as of
    /// now. Otherwise they are as of the kernel's last update.
    pub fn live(&self) -> bool {
        self.meta.live
    }

    /// The context counts (loaded, started, not masked).
    pub fn counting(&self) -> bool {
        self.meta.flags & PFM_PAGE_COUNTING != 0
    }

    /// The monitored thread was on a CPU at the last update, and still is.
    pub fn thread_running(&self) -> bool {
        self.meta.flags & PFM_PAGE_RUNNING != 0
    }

    /// ns loaded and started.
    pub fn time_enabled(&self) -> u64 {
        self.meta.time_enabled
    }

    /// ns the thread ran while started.
    pub fn time_running(&self) -> u64 {
        self.meta.time_running
    }

    /// The PMDs the page describes.
    pub fn pmd_mask(&self) -> u64 {
        self.meta.pmd_mask
    }

    /// `PFM_STATE_*`.
    pub fn state(&self) -> u32 {
        self.meta.state
    }

    /// The event set whose values these are: the active one (0 without
    /// sets). While sets take turns, task-clock PMDs are not extended
    /// between updates: a live reader gets them from the system call.
    pub fn set(&self) -> u16 {
        self.meta.set as u16
    }

    /// Whether the values equal what `PFM_IOC_READ_VALUES` would return
    /// now: a live reading, or one of a context that does not count (then
    /// nothing changes until a call on the context).
    pub fn exact(&self) -> bool {
        self.meta.live || !self.counting()
    }

    /// Times the kernel updated the page under the reader.
    pub fn retries(&self) -> u32 {
        self.meta.retries
    }
}

/// One consistent read of the page, values by PMD number
/// ([`CounterPage::read`]); the status through `Deref`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MappedReading {
    values: [u64; crate::abi::PFM_MAX_PMDS],
    status: MappedStatus,
}

impl MappedReading {
    /// The value of PMD `pmd` (0 for a PMD the page does not describe or
    /// that was not asked for).
    pub fn value(&self, pmd: u16) -> u64 {
        self.values.get(usize::from(pmd)).copied().unwrap_or(0)
    }
}

impl std::ops::Deref for MappedReading {
    type Target = MappedStatus;

    fn deref(&self) -> &MappedStatus {
        &self.status
    }
}

impl CounterPage {
    /// Maps the counter page of the context open on `fd`.
    pub(crate) fn map(fd: std::os::fd::BorrowedFd<'_>) -> Result<Self, i32> {
        let page = sys::mmap_page(fd)?;
        // INVARIANT: a fresh mapping of the page, ours.
        let p = Self { page };
        if p.cells().version() != PFM_PAGE_VERSION {
            return Err(libc::EPROTO);
        }
        Ok(p)
    }

    /// The page as atomics.
    fn cells(&self) -> &PageCells {
        // SAFETY: The mapping is live while `self` is (type invariant),
        // page-aligned and at least as large as `PageCells`, whose fields
        // are atomics: any bytes are valid, and concurrent kernel writes are
        // what atomics allow.
        unsafe { self.page.cast::<PageCells>().as_ref() }
    }

    /// Reads the PMDs of `pmd_mask` (bit n: PMD n) consistently, without a
    /// system call; `None` if the kernel kept updating the page under the
    /// reader (then use the system call).
    pub fn read(&self, pmd_mask: u64) -> Option<MappedReading> {
        self.cells()
            .read(pmd_mask, &sys::Instructions)
            .map(|r| MappedReading {
                values: r.values,
                status: MappedStatus { meta: r.meta },
            })
    }

    /// Reads the PMDs of `pmd_mask` into `out` in PMD order, as
    /// `PFM_IOC_READ_VALUES` does (the fastest read: nothing but the
    /// requested PMDs is touched); `None` as for [`CounterPage::read`].
    #[inline]
    pub fn read_into(&self, pmd_mask: u64, out: &mut [u64]) -> Option<MappedStatus> {
        self.cells()
            .read_into(pmd_mask, &sys::Instructions, out)
            .map(|meta| MappedStatus { meta })
    }

    /// The page's sequence count: it changes at every kernel update.
    pub fn seq(&self) -> u32 {
        self.cells().seq()
    }
}

impl Drop for CounterPage {
    fn drop(&mut self) {
        // SAFETY: Our mapping (type invariant), unmapped once; borrows of
        // the cells end with `&self` borrows, before `drop`.
        unsafe { sys::munmap_page(self.page) };
    }
}
