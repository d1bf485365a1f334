// SPDX-License-Identifier: GPL-2.0

//! Host unit tests of `pfm_smpl.rs` (its `tests` module, kept apart so
//! that the kernel file holds only what the kernel builds).

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
