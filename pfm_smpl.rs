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
mod tests {
    use super::*;

    fn buffer(pages: usize) -> (HeaderCells, Vec<DataCells>) {
        // SAFETY: atomics of integers: all-zero is valid.
        let hdr: HeaderCells = unsafe { core::mem::zeroed() };
        let data = (0..pages)
            // SAFETY: as above.
            .map(|_| unsafe { core::mem::zeroed::<DataCells>() })
            .collect();
        SmplRing::init(&hdr, (pages * PAGE) as u64, ENTRY as u64);
        (hdr, data)
    }

    /// A ring of `$pages` fresh data pages and 128-byte entries: binds its
    /// header `$hdr`, a writer `$w` and the ring `$ring`.
    macro_rules! fresh_ring {
        ($hdr:ident, $w:ident, $ring:ident, $pages:expr) => {
            let ($hdr, data) = buffer($pages);
            let page = |i: usize| data.get(i);
            let $w = Writer::new();
            let $ring = SmplRing {
                hdr: &$hdr,
                page: &page,
                data_size: ($pages * PAGE) as u64,
                entry_size: ENTRY as u64,
            };
        };
    }

    fn entry(i: u64) -> abi::PfmSmplEntry {
        abi::PfmSmplEntry {
            tid: 7,
            pid: 5,
            cpu: 1,
            ovfl_pmd: 2,
            set: 3,
            nvalues: 1,
            ip: 0x4000 + i,
            tstamp: 1000 + i,
            smpl_pmds: 1,
            values: [i, 0, 0, 0, 0, 0, 0, 0x55],
            ..Default::default()
        }
    }

    #[test]
    fn lost_entries_are_counted_without_writing() {
        fresh_ring!(hdr, w, ring, 1);
        assert!(ring.push(&w, &entry(0), &[], PAGE as u64).written);
        ring.lose(&w, 5);
        assert!(ring.push(&w, &entry(1), &[], PAGE as u64).written);
        assert_eq!(hdr.lost.load(Ordering::Relaxed), 5);
        assert_eq!(hdr.written.load(Ordering::Relaxed), 2);
        let mut seqs = Vec::new();
        assert_eq!(ring.drain(|e, _| seqs.push(e.seq)), 2);
        assert_eq!(seqs, [0, 1]);
    }

    #[test]
    fn entries_round_trip_in_order_across_wraps() {
        fresh_ring!(hdr, w, ring, 1);
        let per_page = (PAGE / ENTRY) as u64;
        let mut seen = Vec::new();
        for i in 0..10 * per_page {
            let p = ring.push(&w, &entry(i), &[], u64::MAX);
            assert!(p.written, "entry {i}");
            // Drain every 5 entries: the ring wraps many times.
            if i % 5 == 4 {
                ring.drain(|e, _| seen.push(*e));
            }
        }
        ring.drain(|e, _| seen.push(*e));
        assert_eq!(seen.len() as u64, 10 * per_page);
        for (i, e) in seen.iter().enumerate() {
            let mut want = entry(i as u64);
            want.seq = i as u64;
            assert_eq!(*e, want);
        }
        assert_eq!(hdr.lost.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn full_buffer_drops_and_counts_or_reports_full() {
        {
            fresh_ring!(hdr, w, ring, 1);
            let m = PAGE / ENTRY;
            for i in 0..m {
                let p = ring.push(&w, &entry(i as u64), &[], u64::MAX);
                assert!(p.written);
                // The m-th entry leaves no room: the mask policy stops there.
                assert_eq!(p.full, i == m - 1, "entry {i}");
            }
            let p = ring.push(&w, &entry(99), &[], u64::MAX);
            assert!(!p.written && p.full);
            assert_eq!(hdr.lost.load(Ordering::Relaxed), 1);
            assert_eq!(hdr.written.load(Ordering::Relaxed), m as u64);
            assert!(!ring.has_room(&w));
            assert_eq!(ring.drain(|_, _| {}), m);
            assert!(ring.has_room(&w));
        }
    }

    #[test]
    fn watermark_is_crossed_once_per_fill() {
        fresh_ring!(hdr, w, ring, 2);
        let wm = 4 * ENTRY as u64;
        let crossed: Vec<bool> = (0..8)
            .map(|i| ring.push(&w, &entry(i), &[], wm).crossed_watermark)
            .collect();
        assert_eq!(
            crossed,
            [false, false, false, true, false, false, false, false]
        );
        assert!(ring.above_watermark(&w, wm));
        ring.drain(|_, _| {});
        assert!(!ring.above_watermark(&w, wm));
        let again: Vec<bool> = (0..4)
            .map(|i| ring.push(&w, &entry(i), &[], wm).crossed_watermark)
            .collect();
        assert_eq!(again, [false, false, false, true]);
    }

    #[test]
    fn a_garbage_tail_reads_as_nothing_consumed() {
        fresh_ring!(hdr, w, ring, 1);
        ring.push(&w, &entry(0), &[], u64::MAX);
        for bad in [u64::MAX, 2 * ENTRY as u64, 1 << 40] {
            hdr.tail.store(bad, Ordering::Relaxed);
            assert!(!ring.has_room(&w), "tail {bad}");
            let p = ring.push(&w, &entry(1), &[], u64::MAX);
            assert!(!p.written, "tail {bad}: wrote over unconsumed entries");
        }
    }

    #[test]
    fn a_hostile_header_changes_nothing_the_kernel_writes() {
        fresh_ring!(hdr, w, ring, 1);
        ring.push(&w, &entry(0), &[], u64::MAX);
        // The tool writes its header's kernel fields: misaligned, huge.
        hdr.head.store(PAGE as u64 - 8, Ordering::Relaxed);
        hdr.written.store(u64::MAX, Ordering::Relaxed);
        hdr.lost.store(u64::MAX, Ordering::Relaxed);
        hdr.tail.store(ENTRY as u64, Ordering::Relaxed);
        let p = ring.push(&w, &entry(1), &[], u64::MAX);
        assert!(p.written);
        assert_eq!(hdr.head.load(Ordering::Relaxed), 2 * ENTRY as u64);
        assert_eq!(hdr.written.load(Ordering::Relaxed), 2);
        let mut seen = Vec::new();
        ring.drain(|e, _| seen.push(e.seq));
        assert_eq!(seen, [1]);
        // A reader whose tail is garbage resynchronises, and never loops.
        for bad in [3, u64::MAX, 1 << 50] {
            hdr.tail.store(bad, Ordering::Relaxed);
            assert!(ring.drain(|_, _| {}) <= PAGE / ENTRY);
        }
        hdr.head.store(7, Ordering::Relaxed);
        hdr.tail.store(0, Ordering::Relaxed);
        assert!(ring.drain(|_, _| {}) <= PAGE / ENTRY);
        // A new mapping gets the kernel's values back.
        ring.publish(&w);
        assert_eq!(hdr.head.load(Ordering::Relaxed), 2 * ENTRY as u64);
        assert_eq!(hdr.written.load(Ordering::Relaxed), 2);
        assert_eq!(hdr.lost.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn setup_is_checked() {
        let ok = abi::PfmSmplSetup {
            data_pages: 4,
            smpl_pmds: {
                let mut m = [0; abi::PFM_MAX_PMDS];
                m[1] = 0b111;
                m
            },
            ..Default::default()
        };
        let g = Geometry::of(&ok, 0b1111).unwrap();
        assert_eq!(g.data_size, 4 * PAGE as u64);
        assert_eq!(g.watermark, 2 * PAGE as u64);
        assert!(!g.drop);
        let bad = |f: &dyn Fn(&mut abi::PfmSmplSetup)| {
            let mut s = ok;
            f(&mut s);
            Geometry::of(&s, 0b1111).unwrap_err()
        };
        assert_eq!(bad(&|s| s.data_pages = 0), SetupError::Pages);
        assert_eq!(bad(&|s| s.data_pages = 3), SetupError::Pages);
        assert_eq!(bad(&|s| s.data_pages = 2048), SetupError::Pages);
        assert_eq!(bad(&|s| s.flags = 2), SetupError::Reserved);
        assert_eq!(bad(&|s| s.pad = 1), SetupError::Reserved);
        assert_eq!(bad(&|s| s.reserved[2] = 1), SetupError::Reserved);
        assert_eq!(bad(&|s| s.pad2 = 1), SetupError::Reserved);
        assert_eq!(
            bad(&|s| s.chain_depth = abi::PFM_SMPL_MAX_CHAIN + 1),
            SetupError::ChainDepth
        );
        let mut deep = ok;
        deep.chain_depth = 16;
        assert_eq!(Geometry::of(&deep, 0b1111).unwrap().entry_size, 256);
        deep.chain_depth = abi::PFM_SMPL_MAX_CHAIN;
        assert_eq!(Geometry::of(&deep, 0b1111).unwrap().entry_size, 1024);
        assert_eq!(g.entry_size, ENTRY as u64);
        assert_eq!(bad(&|s| s.smpl_pmds[1] = 0b10000), SetupError::SmplPmds);
        assert_eq!(bad(&|s| s.smpl_pmds[5] = 1), SetupError::SmplPmds);
        assert_eq!(
            bad(&|s| s.watermark = 4 * PAGE as u32 + 1),
            SetupError::Watermark
        );
        let mut many = ok;
        many.smpl_pmds[0] = 0x1ff;
        assert_eq!(Geometry::of(&many, 0xfff), Err(SetupError::SmplPmds));
    }

    #[test]
    fn chains_round_trip_within_their_slots() {
        for depth in [1u32, 16, 17, abi::PFM_SMPL_MAX_CHAIN] {
            let size = entry_size(depth);
            let (hdr, data) = buffer(2);
            let page = |i: usize| data.get(i);
            let w = Writer::new();
            let ring = SmplRing {
                hdr: &hdr,
                page: &page,
                data_size: 2 * PAGE as u64,
                entry_size: size as u64,
            };
            let per_ring = 2 * PAGE / size;
            let mut seen = Vec::new();
            for i in 0..3 * per_ring as u64 {
                // Chains of every length up to twice the depth: the
                // slot keeps what fits (the depth rounded up to the
                // power of two), and says how much.
                let chain: Vec<u64> = (0..i % (2 * u64::from(depth) + 1))
                    .map(|j| 0x1000 * i + j)
                    .collect();
                let mut e = entry(i);
                e.chain_flags = abi::PFM_SMPL_CHAIN_TRUNCATED;
                assert!(ring.push(&w, &e, &chain, u64::MAX).written);
                ring.drain(|e, c| seen.push((*e, c.to_vec())));
            }
            assert_eq!(seen.len(), 3 * per_ring, "depth {depth}");
            for (i, (e, c)) in seen.iter().enumerate() {
                let i = i as u64;
                let room = ((size - ENTRY) / 8).min(MAX_CHAIN) as u64;
                let want = (i % (2 * u64::from(depth) + 1)).min(room) as usize;
                assert_eq!(usize::from(e.chain_len), want, "depth {depth} entry {i}");
                assert_eq!(e.chain_flags, abi::PFM_SMPL_CHAIN_TRUNCATED);
                assert_eq!(e.ip, 0x4000 + i);
                let expect: Vec<u64> = (0..want as u64).map(|j| 0x1000 * i + j).collect();
                assert_eq!(*c, expect);
            }
            // A chain length the tool wrote is bounded by the slot.
            ring.push(&w, &entry(0), &[1, 2, 3], u64::MAX);
            let first = (hdr.head.load(Ordering::Relaxed) - size as u64) % (2 * PAGE as u64);
            let word = &data[first as usize / PAGE].0[(first as usize % PAGE) / 8 + 7];
            word.store(0xffff, Ordering::Relaxed);
            let mut lens = Vec::new();
            ring.drain(|_, c| lens.push(c.len()));
            assert_eq!(lens, [((size - ENTRY) / 8).min(MAX_CHAIN)]);
        }
    }

    /// A stack of `frames`: frame pointers at 0x7000_0000 + 0x100 * k, the
    /// last one's caller frame pointer `last_next`.
    fn stack(frames: u64, last_next: u64) -> impl Fn(u64) -> Option<[u64; 2]> {
        move |fp| {
            let k = fp.checked_sub(0x7000_0000)? / 0x100;
            if fp % 0x100 != 0 || k >= frames {
                return None;
            }
            let next = if k + 1 == frames {
                last_next
            } else {
                fp + 0x100
            };
            Some([next, 0x40_0000 + k])
        }
    }

    #[test]
    fn frame_walks_end_at_the_outermost_frame_or_say_why_not() {
        let mut out = [0u64; 8];
        let base = 0x7000_0000;
        // A whole chain: ends at the null frame pointer, every return
        // address in order.
        assert_eq!(walk_frames(base, &mut out, stack(5, 0)), (5, 0));
        assert_eq!(
            out[..5],
            [0x40_0000, 0x40_0001, 0x40_0002, 0x40_0003, 0x40_0004]
        );
        // Exactly as deep as the room: not truncated.
        assert_eq!(walk_frames(base, &mut out, stack(8, 0)), (8, 0));
        // Deeper: truncated at the room.
        assert_eq!(
            walk_frames(base, &mut out, stack(20, 0)),
            (8, abi::PFM_SMPL_CHAIN_TRUNCATED)
        );
        // No frame pointer at all (a leaf without one, rbp cleared).
        assert_eq!(walk_frames(0, &mut out, stack(5, 0)), (0, 0));
        // Unreadable: the frame pointer is data, or the page is gone.
        assert_eq!(
            walk_frames(0x1234_5678, &mut out, stack(5, 0)),
            (0, abi::PFM_SMPL_CHAIN_BROKEN)
        );
        assert_eq!(
            walk_frames(base + 4, &mut out, stack(5, 0)),
            (0, abi::PFM_SMPL_CHAIN_BROKEN)
        );
        // A frame that points back down (or at itself): a loop, cut.
        assert_eq!(
            walk_frames(base, &mut out, stack(3, base)),
            (3, abi::PFM_SMPL_CHAIN_BROKEN)
        );
        // Unreadable further up: what was read is kept.
        assert_eq!(
            walk_frames(base, &mut out, stack(3, base + 0x1000_0000)),
            (3, abi::PFM_SMPL_CHAIN_BROKEN)
        );
        // No room at all.
        assert_eq!(
            walk_frames(base, &mut [], stack(3, 0)),
            (0, abi::PFM_SMPL_CHAIN_TRUNCATED)
        );
    }

    #[test]
    fn locked_memory_as_perf_mmap() {
        // perf's default, 516 KiB: 129 pages per online CPU.
        let allowance = mlock_allowance(516, 2);
        assert_eq!(allowance, 258);
        // The largest buffer: the allowance, then 767 pages pinned, over
        // an RLIMIT_MEMLOCK of 64 KiB (16 pages), within 8 MiB.
        let big = locked_split(1025, 0, allowance);
        assert_eq!(
            big,
            LockedSplit {
                user: 258,
                pinned: 767
            }
        );
        assert!(over_memlock(big, 0, 64 << 10));
        assert!(!over_memlock(big, 0, 8 << 20));
        assert!(!over_memlock(big, 0, u64::MAX));
        // 65-page buffers one after the other: three within the
        // allowance, the fourth pins 2 pages, the fifth pins 65 (2 + 65
        // over 16: refused).
        let mut user = 0;
        let mut pinned = 0u64;
        let mut fitted = 0;
        for _ in 0..8 {
            let s = locked_split(65, user, allowance);
            if over_memlock(s, pinned, 64 << 10) {
                break;
            }
            user += s.user;
            pinned += s.pinned as u64;
            fitted += 1;
        }
        assert_eq!((fitted, user, pinned), (4, 258, 2));
        // No allowance (`perf_event_mlock_kb` 0): every page pinned.
        assert_eq!(
            locked_split(5, 0, mlock_allowance(0, 4)),
            LockedSplit { user: 0, pinned: 5 }
        );
        assert!(!over_memlock(
            LockedSplit { user: 0, pinned: 5 },
            10,
            64 << 10
        ));
        assert!(over_memlock(
            LockedSplit { user: 0, pinned: 5 },
            15,
            64 << 10
        ));
        // The setting lowered below what the user holds: as if at it.
        assert_eq!(
            locked_split(10, 300, allowance),
            LockedSplit {
                user: 0,
                pinned: 10
            }
        );
        // A negative setting: an allowance without bound, as in perf.
        assert_eq!(
            locked_split(1025, 1 << 20, mlock_allowance(-1, 2)),
            LockedSplit {
                user: 1025,
                pinned: 0
            }
        );
        // Sizes that are not perf's: still exact.
        assert_eq!(mlock_allowance(7, 1), 1);
        assert_eq!(mlock_allowance(3, 8), 0);
    }
}
