// SPDX-License-Identifier: GPL-2.0

//! The sampling buffer's protocol, one copy for both sides: the kernel
//! writes entries and `head` ([`SmplRing::push`]); the tool reads `head`,
//! the entries before it, and writes `tail` ([`SmplRing::drain`]).
//!
//! The buffer is shared memory that both sides write (the kernel its
//! entries and `head`, the tool `tail`), so both see it only as atomics, as
//! the counter page (`pfm_page`): every data access `Relaxed`, ordered by
//! perf's ring-buffer barriers (`kernel/events/ring_buffer.c`): the writer
//! loads `tail` with `Acquire` before it writes over consumed entries, and
//! publishes `head` with `Release` after the entry; the reader loads `head`
//! with `Acquire`, reads the entries, and stores `tail` with `Release`. On
//! x86 each is a plain `mov`.
//!
//! `head` and `tail` count bytes since setup and never wrap (2^64 bytes of
//! 128-byte entries is 2^57 samples); the entry at byte `x` is at data
//! offset `x % data_size`. Entries are a power of two in size (128 bytes,
//! more with a call chain: [`entry_size`]), so none straddles a page. The kernel does not trust `tail`: one that is behind
//! `head - data_size` or ahead of `head` reads as "nothing consumed" (the
//! buffer full), so a tool that writes garbage loses its own samples and
//! nothing else.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::abi;

/// Bytes per page of the buffer.
pub const PAGE: usize = abi::PFM_PAGE_SIZE;
/// 64-bit words per page.
const WORDS: usize = PAGE / 8;
/// Bytes per entry without a call chain.
pub const ENTRY: usize = core::mem::size_of::<abi::PfmSmplEntry>();
/// 64-bit words of an entry before its chain.
const ENTRY_WORDS: usize = ENTRY / 8;

// An entry's words: 8 of fields, then the values (copied word by word).
const _: () = assert!(ENTRY_WORDS == 8 + abi::PFM_SMPL_MAX_VALUES);

/// Return addresses an entry holds at most.
pub const MAX_CHAIN: usize = abi::PFM_SMPL_MAX_CHAIN as usize;

/// Bytes per entry of a buffer whose entries hold `chain_depth` return
/// addresses: the smallest power of two that holds them after the entry.
pub const fn entry_size(chain_depth: u32) -> usize {
    (ENTRY + 8 * chain_depth as usize).next_power_of_two()
}
const _: () = assert!(
    ENTRY.is_power_of_two()
        && entry_size(0) == ENTRY
        && entry_size(abi::PFM_SMPL_MAX_CHAIN) <= PAGE
        && PAGE % entry_size(abi::PFM_SMPL_MAX_CHAIN) == 0
);

/// The header page, as atomics (the layout of [`abi::PfmSmplHdr`]).
#[repr(C)]
pub struct HeaderCells {
    /// `PFM_SMPL_VERSION`.
    pub version: AtomicU32,
    /// Bytes per entry.
    pub entry_size: AtomicU32,
    /// Bytes of entries.
    pub data_size: AtomicU64,
    /// Bytes written (kernel).
    pub head: AtomicU64,
    /// Bytes consumed (tool).
    pub tail: AtomicU64,
    /// Entries written.
    pub written: AtomicU64,
    /// Entries dropped.
    pub lost: AtomicU64,
    reserved: [AtomicU64; 10],
}
const _: () = assert!(
    core::mem::size_of::<HeaderCells>() == core::mem::size_of::<abi::PfmSmplHdr>()
        && core::mem::offset_of!(HeaderCells, tail) == core::mem::offset_of!(abi::PfmSmplHdr, tail)
        && core::mem::offset_of!(HeaderCells, lost) == core::mem::offset_of!(abi::PfmSmplHdr, lost)
);

/// One data page, as atomics.
#[repr(C)]
pub struct DataCells(
    /// The page's words.
    pub [AtomicU64; WORDS],
);

/// Why a setup is refused (`EINVAL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetupError {
    /// `data_pages` is not a power of two in `1..=PFM_SMPL_MAX_PAGES`.
    Pages,
    /// Undefined flags, non-zero padding or reserved fields.
    Reserved,
    /// A PMD's `smpl_pmds` names a PMD the model lacks, or more than
    /// `PFM_SMPL_MAX_VALUES`; or a PMD the model lacks has one.
    SmplPmds,
    /// The watermark is beyond the data.
    Watermark,
    /// `chain_depth` is above `PFM_SMPL_MAX_CHAIN`.
    ChainDepth,
}

/// A setup, checked: the buffer's geometry and what each entry records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Data pages.
    pub data_pages: usize,
    /// Bytes of entries.
    pub data_size: u64,
    /// Unread bytes that make the buffer readable for `poll`.
    pub watermark: u64,
    /// Drop (and count) when full, instead of masking.
    pub drop: bool,
    /// Return addresses an entry records at most.
    pub chain_depth: u32,
    /// Bytes per entry: [`entry_size`] of `chain_depth`.
    pub entry_size: u64,
}

impl Geometry {
    /// Checks `s` against the PMDs the model implements.
    pub fn of(s: &abi::PfmSmplSetup, impl_pmds: u64) -> Result<Self, SetupError> {
        if s.flags & !abi::PFM_SMPL_MASK != 0 || s.pad != 0 || s.pad2 != 0 || s.reserved != [0; 3] {
            return Err(SetupError::Reserved);
        }
        if s.chain_depth > abi::PFM_SMPL_MAX_CHAIN {
            return Err(SetupError::ChainDepth);
        }
        let pages = s.data_pages;
        if !pages.is_power_of_two() || pages > abi::PFM_SMPL_MAX_PAGES {
            return Err(SetupError::Pages);
        }
        for (pmd, &mask) in s.smpl_pmds.iter().enumerate() {
            let implemented = impl_pmds & (1 << pmd) != 0;
            if mask & !impl_pmds != 0
                || mask.count_ones() as usize > abi::PFM_SMPL_MAX_VALUES
                || (mask != 0 && !implemented)
            {
                return Err(SetupError::SmplPmds);
            }
        }
        let data_size = u64::from(pages) * PAGE as u64;
        let watermark = match u64::from(s.watermark) {
            0 => data_size / 2,
            w if w <= data_size => w,
            _ => return Err(SetupError::Watermark),
        };
        Ok(Self {
            data_pages: pages as usize,
            data_size,
            watermark,
            drop: s.flags & abi::PFM_SMPL_DROP != 0,
            chain_depth: s.chain_depth,
            entry_size: entry_size(s.chain_depth) as u64,
        })
    }
}

/// The writer's own record of what it publishes in the header: kernel
/// memory, never read back from the page, which the tool can write
/// (only `tail` is read from there, and bounded).
pub struct Writer {
    head: AtomicU64,
    written: AtomicU64,
    lost: AtomicU64,
}

impl Writer {
    /// Nothing written yet.
    pub const fn new() -> Self {
        Self {
            head: AtomicU64::new(0),
            written: AtomicU64::new(0),
            lost: AtomicU64::new(0),
        }
    }
}

impl Default for Writer {
    fn default() -> Self {
        Self::new()
    }
}

/// What [`SmplRing::push`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pushed {
    /// The entry is in the buffer (else it was dropped and counted, or
    /// there was no room under the mask policy).
    pub written: bool,
    /// The unread bytes reached the watermark with this entry.
    pub crossed_watermark: bool,
    /// No room is left for another entry: under the mask policy, the
    /// context must stop until RESTART.
    pub full: bool,
}

/// The buffer as one side sees it: its header and data pages.
pub struct SmplRing<'a> {
    /// The header page.
    pub hdr: &'a HeaderCells,
    /// Data page `i` of the buffer (`None` past its end, which the
    /// offsets, below `data_size`, never reach).
    pub page: &'a dyn Fn(usize) -> Option<&'a DataCells>,
    /// Bytes of entries.
    pub data_size: u64,
    /// Bytes per entry: [`entry_size`] of some depth (a power of two, at
    /// least [`ENTRY`], at most a page).
    pub entry_size: u64,
}

impl SmplRing<'_> {
    /// Writes the constant fields of a new buffer.
    pub fn init(hdr: &HeaderCells, data_size: u64, entry_size: u64) {
        hdr.version.store(abi::PFM_SMPL_VERSION, Ordering::Relaxed);
        hdr.entry_size.store(entry_size as u32, Ordering::Relaxed);
        hdr.data_size.store(data_size, Ordering::Relaxed);
    }

    /// The words of the slot at byte `off` of the data, if the ring's
    /// geometry is sound (it is the writer's, or checked by `map`).
    fn slot(&self, off: u64) -> Option<&[AtomicU64]> {
        // Checked: no division (and no panic path) by a size of 0.
        let off = off.checked_rem(self.data_size)? as usize;
        let first = (off % PAGE) / 8;
        (self.page)(off / PAGE).and_then(|p| p.0.get(first..first + self.entry_size as usize / 8))
    }

    /// The bytes not yet consumed, with `head` as the writer knows it:
    /// a `tail` out of range counts as nothing consumed.
    fn unread(&self, head: u64) -> u64 {
        let tail = self.hdr.tail.load(Ordering::Acquire);
        match head.checked_sub(tail) {
            Some(n) if n <= self.data_size => n,
            _ => self.data_size,
        }
    }

    /// Kernel side: appends `e` (its `seq` set here) and `chain` after it
    /// (as much as the slot holds, `MAX_CHAIN` at most: `e.chain_len` says
    /// how much), or, full,
    /// drops it and counts it in `lost` (under the mask policy, only an
    /// overflow of a context RESTARTed before the tool drained meets a
    /// full buffer). The writer is one context under its lock; its
    /// positions and counts are `w`'s, published to the header after the
    /// entry. The caller masks on `full` under the mask policy.
    pub fn push(&self, w: &Writer, e: &abi::PfmSmplEntry, chain: &[u64], watermark: u64) -> Pushed {
        let head = w.head.load(Ordering::Relaxed);
        let unread = self.unread(head);
        let size = self.entry_size;
        let dropped = Pushed {
            written: false,
            crossed_watermark: false,
            full: true,
        };
        if unread + size > self.data_size {
            let lost = w.lost.load(Ordering::Relaxed).wrapping_add(1);
            w.lost.store(lost, Ordering::Relaxed);
            self.hdr.lost.store(lost, Ordering::Relaxed);
            return dropped;
        }
        let written = w.written.load(Ordering::Relaxed);
        let mut e = *e;
        e.seq = written;
        // `head` is the writer's own, a multiple of the entry size: the
        // slot is inside one page.
        let Some(cells) = self.slot(head) else {
            return dropped;
        };
        let (base, room) = cells.split_at(ENTRY_WORDS);
        let chain = chain.get(..room.len().min(MAX_CHAIN)).unwrap_or(chain);
        e.chain_len = chain.len() as u16;
        for (cell, word) in base.iter().zip(entry_words(&e).iter()) {
            cell.store(*word, Ordering::Relaxed);
        }
        for (cell, word) in room.iter().zip(chain) {
            cell.store(*word, Ordering::Relaxed);
        }
        let head = head.wrapping_add(size);
        w.head.store(head, Ordering::Relaxed);
        w.written.store(written.wrapping_add(1), Ordering::Relaxed);
        self.hdr
            .written
            .store(written.wrapping_add(1), Ordering::Relaxed);
        // After the entry: a reader that sees the new head sees it whole.
        self.hdr.head.store(head, Ordering::Release);
        let now = unread + size;
        Pushed {
            written: true,
            crossed_watermark: unread < watermark && now >= watermark,
            full: now + size > self.data_size,
        }
    }

    /// Kernel side: counts `n` entries as lost without writing them (the
    /// periods an overflow crossed past what it may write, or those a
    /// full buffer under the mask policy had no room for).
    pub fn lose(&self, w: &Writer, n: u64) {
        let lost = w.lost.load(Ordering::Relaxed).wrapping_add(n);
        w.lost.store(lost, Ordering::Relaxed);
        self.hdr.lost.store(lost, Ordering::Relaxed);
    }

    /// Writes the writer's `head`, `written` and `lost` to the header
    /// again (a new mapping starts from them, whatever an earlier one
    /// wrote there). Under the writer's lock.
    pub fn publish(&self, w: &Writer) {
        self.hdr
            .written
            .store(w.written.load(Ordering::Relaxed), Ordering::Relaxed);
        self.hdr
            .lost
            .store(w.lost.load(Ordering::Relaxed), Ordering::Relaxed);
        self.hdr
            .head
            .store(w.head.load(Ordering::Relaxed), Ordering::Release);
    }

    /// Whether the unread bytes are at least `watermark` (for `poll`).
    pub fn above_watermark(&self, w: &Writer, watermark: u64) -> bool {
        self.unread(w.head.load(Ordering::Relaxed)) >= watermark
    }

    /// Whether another entry fits.
    pub fn has_room(&self, w: &Writer) -> bool {
        self.unread(w.head.load(Ordering::Relaxed)) + self.entry_size <= self.data_size
    }

    /// Tool side: calls `f` with each entry between `tail` and `head` and
    /// its call chain, oldest first, then consumes them (stores `tail`).
    /// Returns how many. The header is the tool's own memory too: a
    /// `tail` out of step with `head` (not a whole number of entries
    /// behind it, or more than the buffer) is resynchronised to the oldest
    /// entry still there, and a bad `head` ends the drain; neither can
    /// make it panic or loop. A chain is never longer than the slot holds.
    pub fn drain(&self, mut f: impl FnMut(&abi::PfmSmplEntry, &[u64])) -> usize {
        let head = self.hdr.head.load(Ordering::Acquire);
        let mut tail = self.hdr.tail.load(Ordering::Relaxed);
        let e = self.entry_size;
        match head.checked_sub(tail) {
            Some(n) if n <= self.data_size && n % e == 0 => {}
            _ => tail = head.saturating_sub(self.data_size),
        }
        let mut n = 0;
        let mut chain = [0u64; MAX_CHAIN];
        while tail < head && n < (self.data_size / e) as usize {
            let Some(cells) = self.slot(tail) else {
                break;
            };
            let (base, room) = cells.split_at(ENTRY_WORDS);
            let mut words = [0u64; ENTRY_WORDS];
            for (w, cell) in words.iter_mut().zip(base) {
                *w = cell.load(Ordering::Relaxed);
            }
            let entry = entry_of(&words);
            let len = usize::from(entry.chain_len).min(room.len()).min(MAX_CHAIN);
            for (w, cell) in chain.iter_mut().zip(&room[..len]) {
                *w = cell.load(Ordering::Relaxed);
            }
            f(&entry, &chain[..len]);
            tail += e;
            n += 1;
        }
        // After the reads: the writer may reuse the space.
        self.hdr.tail.store(tail, Ordering::Release);
        n
    }
}

/// An entry as 64-bit words, in its ABI layout.
fn entry_words(e: &abi::PfmSmplEntry) -> [u64; ENTRY_WORDS] {
    let mut w = [0u64; ENTRY_WORDS];
    w[0] = u64::from(e.tid) | u64::from(e.pid) << 32;
    w[1] = u64::from(e.cpu)
        | u64::from(e.ovfl_pmd) << 16
        | u64::from(e.set) << 32
        | u64::from(e.nvalues) << 48;
    w[2] = e.seq;
    w[3] = e.last_reset_val;
    w[4] = e.ip;
    w[5] = e.tstamp;
    w[6] = e.smpl_pmds;
    w[7] = u64::from(e.chain_len) | u64::from(e.chain_flags) << 16 | u64::from(e.pad) << 32;
    // Element by element: no length check that could panic (objtool
    // reports the panic path of `copy_from_slice`'s).
    for (d, v) in w.iter_mut().skip(8).zip(e.values.iter()) {
        *d = *v;
    }
    w
}

/// [`entry_words`]' inverse.
fn entry_of(w: &[u64; ENTRY_WORDS]) -> abi::PfmSmplEntry {
    let mut values = [0u64; abi::PFM_SMPL_MAX_VALUES];
    for (v, d) in values.iter_mut().zip(w.iter().skip(8)) {
        *v = *d;
    }
    abi::PfmSmplEntry {
        tid: w[0] as u32,
        pid: (w[0] >> 32) as u32,
        cpu: w[1] as u16,
        ovfl_pmd: (w[1] >> 16) as u16,
        set: (w[1] >> 32) as u16,
        nvalues: (w[1] >> 48) as u16,
        seq: w[2],
        last_reset_val: w[3],
        ip: w[4],
        tstamp: w[5],
        smpl_pmds: w[6],
        chain_len: w[7] as u16,
        chain_flags: (w[7] >> 16) as u16,
        pad: (w[7] >> 32) as u32,
        values,
    }
}

/// Walks a user stack's frame-pointer chain from the frame pointer `fp`
/// (x86-64 with frame pointers: the frame at `fp` holds the caller's frame
/// pointer, then the return address into the caller), writing the return
/// addresses to `out`, innermost first. `read(fp)` reads the frame's two
/// words without faulting (`None`: not readable). Returns how many and
/// the `PFM_SMPL_CHAIN_*` flags: the walk ends at a null frame pointer
/// (the outermost frame: `_start` clears it), or `out` full while frames
/// remain (`TRUNCATED`), or a frame misaligned, unreadable or not above
/// the one before it (`BROKEN`: code without frame pointers, or a frame
/// pointer used as a general register). Since every frame is above the
/// last, the walk ends, at `out.len()` frames at most.
pub fn walk_frames(
    mut fp: u64,
    out: &mut [u64],
    mut read: impl FnMut(u64) -> Option<[u64; 2]>,
) -> (usize, u16) {
    let mut n = 0;
    loop {
        if fp == 0 {
            return (n, 0);
        }
        let Some(slot) = out.get_mut(n) else {
            return (n, abi::PFM_SMPL_CHAIN_TRUNCATED);
        };
        if fp % 8 != 0 {
            return (n, abi::PFM_SMPL_CHAIN_BROKEN);
        }
        let Some([next, ret]) = read(fp) else {
            return (n, abi::PFM_SMPL_CHAIN_BROKEN);
        };
        *slot = ret;
        n += 1;
        if next != 0 && next <= fp {
            return (n, abi::PFM_SMPL_CHAIN_BROKEN);
        }
        fp = next;
    }
}

/// How a buffer's pages are charged as locked memory: `perf_mmap`'s
/// arithmetic (`kernel/events/core.c`, 6.12), so that a user gets from
/// perfmon what perf would give it for a ring of as many pages, and no
/// more (Documentation/perfmon.rst, "Permissions").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockedSplit {
    /// Pages charged to the user (perf's `user->perf_mlock`), within the
    /// user's free allowance (`perf_event_mlock_kb` per online CPU).
    pub user: usize,
    /// Pages beyond the allowance, charged to the caller's `mm->pinned_vm`
    /// (`VmPin`) and held to `RLIMIT_MEMLOCK`.
    pub pinned: usize,
}

/// `perf_event_mlock_kb` as `perf_mmap` turns it into the user's free
/// allowance in pages: `kb >> (PAGE_SHIFT - 10)`, times the online CPUs,
/// in `unsigned long` (a negative setting wraps to an allowance without
/// bound, as in perf).
pub fn mlock_allowance(mlock_kb: i32, online_cpus: u32) -> usize {
    let shift = PAGE.trailing_zeros() - 10;
    ((mlock_kb >> shift) as isize as usize).wrapping_mul(online_cpus as usize)
}

/// The charge of `pages` more pages for a user who has `user_locked`
/// charged within an `allowance` ([`mlock_allowance`]): the user's
/// counter up to the allowance, the rest pinned. A counter above the
/// allowance (the setting was lowered) counts as at it, as in perf.
pub fn locked_split(pages: usize, user_locked: usize, allowance: usize) -> LockedSplit {
    let after = user_locked.min(allowance).saturating_add(pages);
    let pinned = after.saturating_sub(allowance).min(pages);
    LockedSplit {
        user: pages - pinned,
        pinned,
    }
}

/// Whether `perf_mmap` would refuse a charge that pins `split.pinned`
/// more pages in an mm that has `pinned_now` pinned, under an
/// `RLIMIT_MEMLOCK` of `rlimit` bytes, before it asks `perf_event_paranoid`
/// (-1 allows) and `CAP_IPC_LOCK` (which exempts): the pinned pages would
/// exceed the limit.
pub fn over_memlock(split: LockedSplit, pinned_now: u64, rlimit: u64) -> bool {
    let limit = rlimit >> PAGE.trailing_zeros();
    pinned_now.saturating_add(split.pinned as u64) > limit
}

// The word layout above is the ABI's on a little-endian machine.
const _: () = assert!(
    core::mem::offset_of!(abi::PfmSmplEntry, seq) == 16
        && core::mem::offset_of!(abi::PfmSmplEntry, chain_len) == 56
        && core::mem::offset_of!(abi::PfmSmplEntry, values) == 64
        && cfg!(target_endian = "little")
);

#[cfg(test)]
#[path = "host/unit/pfm_smpl.rs"]
mod tests;
