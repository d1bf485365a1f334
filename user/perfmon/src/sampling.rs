//! Sampling: the context's buffer (`PFM_IOC_SMPL_SETUP`, then `mmap` at
//! `PFM_SMPL_OFFSET`), drained with the ring protocol of `pfm_smpl` (the
//! module's own file: every access to the shared pages is atomic, so the
//! reader has no data race in Rust's memory model). All the unsafe code
//! of sampling is here: the mapping and its view as the protocol's cells.

use std::fmt;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

use crate::abi::{
    PfmSmplEntry, PFM_PAGE_SIZE, PFM_SMPL_MAX_CHAIN, PFM_SMPL_OFFSET, PFM_SMPL_VERSION,
};
use crate::pfm_smpl::{self, DataCells, HeaderCells, SmplRing};

/// A context's sampling buffer, mapped; unmapped when dropped.
///
/// # Invariants
///
/// `base` is a live shared, readable and writable mapping of `(1 +
/// data_pages) * PFM_PAGE_SIZE` bytes of a perfmon sampling buffer, owned
/// by this value; its header says `PFM_SMPL_VERSION`. `entry_size` is the
/// header's, one the kernel can write: a power of two from
/// `pfm_smpl::ENTRY` to the size with `PFM_SMPL_MAX_CHAIN` return
/// addresses.
pub struct SampleBuffer {
    base: NonNull<u8>,
    data_pages: usize,
    entry_size: u64,
}

/// An entry and its user call chain (empty unless the buffer was set up
/// with a `chain_depth`): the return addresses, the caller of `ip`'s
/// function first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    /// The entry.
    pub entry: PfmSmplEntry,
    /// The return addresses.
    pub chain: Vec<u64>,
}

// SAFETY: Shared memory accessed only through atomics.
unsafe impl Send for SampleBuffer {}
// SAFETY: See `Send`; `drain` takes `&mut self`, so one consumer.
unsafe impl Sync for SampleBuffer {}

impl fmt::Debug for SampleBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SampleBuffer")
            .field("addr", &self.base)
            .field("data_pages", &self.data_pages)
            .finish()
    }
}

/// The buffer's counters ([`SampleBuffer::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleStats {
    /// Entries written since setup.
    pub written: u64,
    /// Entries dropped because the buffer was full (`PFM_SMPL_DROP`).
    pub lost: u64,
    /// Bytes written and not yet consumed.
    pub unread: u64,
}

impl SampleBuffer {
    /// Maps the buffer of the context `fd` (set up with `data_pages`).
    /// An errno on failure (`ENODEV`: no buffer; `EBUSY`: mapped already).
    pub(crate) fn map(fd: BorrowedFd<'_>, data_pages: usize) -> Result<Self, i32> {
        let len = (1 + data_pages) * PFM_PAGE_SIZE;
        // SAFETY: A new mapping chosen by the kernel (address NULL): no
        // existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                PFM_SMPL_OFFSET as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO));
        }
        let base = NonNull::new(p.cast::<u8>()).ok_or(libc::EIO)?;
        let mut b = SampleBuffer {
            base,
            data_pages,
            entry_size: pfm_smpl::ENTRY as u64,
        };
        use std::sync::atomic::Ordering::Relaxed;
        if b.hdr().version.load(Relaxed) != PFM_SMPL_VERSION {
            return Err(libc::EPROTO);
        }
        let size = b.hdr().entry_size.load(Relaxed) as usize;
        if !size.is_power_of_two()
            || !(pfm_smpl::ENTRY..=pfm_smpl::entry_size(PFM_SMPL_MAX_CHAIN)).contains(&size)
        {
            return Err(libc::EPROTO);
        }
        b.entry_size = size as u64;
        // INVARIANT: the mapping is ours, of that length, version and
        // entry size checked.
        Ok(b)
    }

    fn hdr(&self) -> &HeaderCells {
        // SAFETY: The first page of the mapping (type invariant), aligned,
        // only accessed through atomics.
        unsafe { self.base.cast::<HeaderCells>().as_ref() }
    }

    fn page(&self, i: usize) -> Option<&DataCells> {
        if i >= self.data_pages {
            return None;
        }
        // SAFETY: Page `1 + i` of the mapping (type invariant), aligned,
        // only accessed through atomics.
        Some(unsafe {
            self.base
                .add((1 + i) * PFM_PAGE_SIZE)
                .cast::<DataCells>()
                .as_ref()
        })
    }

    /// Calls `f` with every entry written and not yet consumed, oldest
    /// first, then consumes them (the kernel may write over them). Returns
    /// how many. The monitored thread need not stop.
    pub fn drain(&mut self, mut f: impl FnMut(&PfmSmplEntry)) -> usize {
        self.drain_chains(|e, _| f(e))
    }

    /// [`SampleBuffer::drain`], with each entry's call chain.
    pub fn drain_chains(&mut self, f: impl FnMut(&PfmSmplEntry, &[u64])) -> usize {
        let page = |i: usize| self.page(i);
        let ring = SmplRing {
            hdr: self.hdr(),
            page: &page,
            data_size: (self.data_pages * PFM_PAGE_SIZE) as u64,
            entry_size: self.entry_size,
        };
        ring.drain(f)
    }

    /// Every entry not yet consumed, consumed.
    pub fn take(&mut self) -> Vec<PfmSmplEntry> {
        let mut v = Vec::new();
        self.drain(|e| v.push(*e));
        v
    }

    /// Every entry not yet consumed with its call chain, consumed.
    pub fn take_samples(&mut self) -> Vec<Sample> {
        let mut v = Vec::new();
        self.drain_chains(|e, c| {
            v.push(Sample {
                entry: *e,
                chain: c.to_vec(),
            })
        });
        v
    }

    /// Bytes per entry (the header's `entry_size`).
    pub fn entry_size(&self) -> usize {
        self.entry_size as usize
    }

    /// Written, lost and unread, as the header says now.
    pub fn stats(&self) -> SampleStats {
        use std::sync::atomic::Ordering;
        let h = self.hdr();
        let head = h.head.load(Ordering::Acquire);
        SampleStats {
            written: h.written.load(Ordering::Relaxed),
            lost: h.lost.load(Ordering::Relaxed),
            unread: head.saturating_sub(h.tail.load(Ordering::Relaxed)),
        }
    }

    /// Bytes of entries.
    pub fn data_size(&self) -> usize {
        self.data_pages * PFM_PAGE_SIZE
    }
}

impl Drop for SampleBuffer {
    fn drop(&mut self) {
        // SAFETY: Our own mapping, of that length (type invariant), unmapped
        // once; no reference into it outlives `self`.
        unsafe {
            libc::munmap(
                self.base.as_ptr().cast(),
                (1 + self.data_pages) * PFM_PAGE_SIZE,
            )
        };
    }
}
