// SPDX-License-Identifier: GPL-2.0

//! `pfm_sets.rs`, event sets and multiplexing: the table's validation and
//! its errnos, round-robin order over ids with holes, the exact split of a
//! delta at a timeout (against a closed-form timeline), overflow-count
//! switching with the module's own counter arithmetic, GETINFO's fields,
//! the one-set fast path and the scaling arithmetic.

use pfm_host_tests::pfm_counter::{period_to_value, PmdState};
use pfm_host_tests::pfm_sets::*;

/// Four implemented PMDs, as the soft model has.
const IMPL: u64 = 0xf;

fn time_set(id: u16, timeout: u64) -> SetDesc {
    SetDesc {
        id,
        flags: PFM_SETFL_TIME_SWITCH,
        timeout,
        ..SetDesc::default()
    }
}

fn ovfl_set(id: u16, cnt: u32, pmds: u64) -> SetDesc {
    SetDesc {
        id,
        flags: PFM_SETFL_OVFL_SWITCH,
        ovfl_switch_cnt: cnt,
        switch_pmds: pmds,
        ..SetDesc::default()
    }
}

/// A table with the given sets (set 0 among them or not).
fn table(descs: &[SetDesc]) -> SetTable {
    let mut t = SetTable::new(IMPL);
    let mut d = descs.to_vec();
    t.create(&mut d).expect("valid sets");
    t
}

/// xorshift64*: deterministic pseudo-random deltas.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn every_bad_field_is_einval_and_changes_nothing() {
    let t = SetTable::new(IMPL);
    let bad = [
        SetDesc {
            id: PFM_MAX_SETS as u16,
            ..SetDesc::default()
        },
        SetDesc {
            id: 1,
            flags: 1 << 2,
            ..SetDesc::default()
        },
        SetDesc {
            id: 1,
            reserved: 1,
            ..SetDesc::default()
        },
        SetDesc {
            flags: PFM_SETFL_TIME_SWITCH | PFM_SETFL_OVFL_SWITCH,
            timeout: 1_000_000,
            ovfl_switch_cnt: 1,
            switch_pmds: 1,
            ..SetDesc::default()
        },
        time_set(1, 0),
        SetDesc {
            id: 1,
            timeout: 1_000_000,
            ..SetDesc::default()
        },
        ovfl_set(1, 0, 1),
        ovfl_set(1, 1, 0),
        ovfl_set(1, 1, 1 << 4),
        ovfl_set(1, 1, 1 << 40),
        SetDesc {
            id: 1,
            ovfl_switch_cnt: 1,
            ..SetDesc::default()
        },
        SetDesc {
            id: 1,
            switch_pmds: 1,
            ..SetDesc::default()
        },
    ];
    for (i, d) in bad.iter().enumerate() {
        assert_eq!(t.check(d), Err(SetError::Invalid), "case {i}: {d:?}");
        assert_eq!(SetError::Invalid.errno(), 22);
        // All or nothing: a good element before it is not applied either.
        let mut t2 = SetTable::new(IMPL);
        let mut call = [time_set(2, 1_000_000), *d];
        assert_eq!(t2.create(&mut call), Err((1, SetError::Invalid)), "{i}");
        assert_eq!(t2.exists_mask(), 1, "case {i}");
        assert_eq!(call[0].timeout, 1_000_000);
    }
    // The good ones, and the effective timeout written back.
    let mut t = SetTable::new(IMPL);
    let mut good = [
        time_set(0, 1),
        time_set(5, 2_000_000),
        ovfl_set(15, 7, 0b1010),
        SetDesc {
            id: 9,
            ..SetDesc::default()
        },
    ];
    t.create(&mut good).unwrap();
    assert_eq!(good[0].timeout, PFM_SET_MIN_TIMEOUT_NS);
    assert_eq!(good[1].timeout, 2_000_000);
    assert_eq!(good[2].timeout, 0);
    assert_eq!(t.exists_mask(), (1 << 15) | (1 << 9) | (1 << 5) | 1);
}

#[test]
fn deletion_errnos_and_register_membership() {
    let mut t = table(&[
        time_set(0, 1_000_000),
        time_set(1, 1_000_000),
        time_set(4, 1_000_000),
    ]);
    assert_eq!(t.delete(&[0]), Err((0, SetError::Invalid)));
    assert_eq!(t.delete(&[1, 16]), Err((1, SetError::Invalid)));
    assert_eq!(t.delete(&[4, 2]), Err((1, SetError::NoSet)));
    assert_eq!(SetError::NoSet.errno(), 22);
    assert_eq!(t.exists_mask(), 0b10011, "refused calls delete nothing");

    // Registers belong to one set each; a set that does not exist is NOSET.
    assert_eq!(t.use_reg(4, true, 0), Ok(4));
    assert_eq!(t.use_reg(4, true, 3), Ok(4));
    assert_eq!(t.use_reg(1, true, 0), Ok(1));
    assert_eq!(t.use_reg(1, false, 0), Ok(1));
    assert_eq!(t.use_reg(2, true, 0), Err(SetError::NoSet));
    assert_eq!(t.use_reg(16, true, 0), Err(SetError::NoSet));
    assert_eq!(t.use_reg(0, true, 32), Err(SetError::Invalid));
    assert_eq!(t.use_reg(0, false, usize::MAX), Err(SetError::Invalid));
    assert_eq!(t.used_pmds(4), 0b1001);
    assert_eq!(t.used_pmds(1), 0b1);
    assert_eq!(t.used_pmds(0), 0);

    // Loaded: nothing changes, EBADFD as for SET_FLAGS.
    t.load(0).unwrap();
    assert_eq!(t.delete(&[4]), Err((0, SetError::Loaded)));
    assert_eq!(t.create(&mut [time_set(2, 1)]), Err((0, SetError::Loaded)));
    assert_eq!(t.load(0), Err(SetError::Loaded));
    assert_eq!(SetError::Loaded.errno(), 77);
    t.charge(1_500_000, Boundary::Split, |_, _| {});
    assert_eq!(t.active(), 1);
    t.unload();

    // Unloaded, the set where monitoring stopped may go; its registers go
    // with it, and a set of the same id comes back empty.
    assert_eq!(t.delete(&[1, 1]), Ok(1 << 1));
    assert_eq!(t.active(), 0);
    assert_eq!(t.exists_mask(), 0b10001);
    assert_eq!(t.use_reg(1, true, 0), Err(SetError::NoSet));
    t.create(&mut [time_set(1, 1_000_000)]).unwrap();
    assert_eq!(t.used_pmds(1), 0);
    assert_eq!(t.used_pmds(4), 0b1001, "other sets keep theirs");
}

#[test]
fn load_checks_the_start_set_and_overflow_sets() {
    let mut t = table(&[ovfl_set(2, 1, 0b10)]);
    assert_eq!(t.load(3), Err(SetError::NoSet));
    // Set 2 switches on PMD 1, which was not written in set 2.
    t.use_reg(0, true, 1).unwrap();
    t.use_reg(2, true, 0).unwrap();
    assert_eq!(t.load(0), Err(SetError::Invalid));
    t.use_reg(2, true, 1).unwrap();
    assert_eq!(t.load(2), Ok(()));
    assert_eq!(t.active(), 2);
}

/// The order in which sets become active, from a start, one charge per
/// timeout.
fn rotation(t: &mut SetTable, start: u16, n: usize) -> Vec<usize> {
    t.load(start).unwrap();
    let mut order = vec![t.active()];
    for _ in 0..n {
        let left = t.timer_ns().expect("time-switched set");
        let sw = t.charge(left, Boundary::Split, |_, _| {});
        assert_eq!(sw.switches, 1);
        order.push(sw.to);
    }
    t.unload();
    order
}

#[test]
fn round_robin_by_id_over_holes() {
    let mut t = table(&[
        time_set(0, 100_000),
        time_set(12, 300_000),
        time_set(3, 200_000),
        time_set(7, 400_000),
    ]);
    assert_eq!(rotation(&mut t, 0, 9), [0, 3, 7, 12, 0, 3, 7, 12, 0, 3]);
    assert_eq!(rotation(&mut t, 7, 5), [7, 12, 0, 3, 7, 12]);
    assert_eq!(rotation(&mut t, 12, 2), [12, 0, 3]);
    t.delete(&[3]).unwrap();
    t.create(&mut [time_set(15, 100_000)]).unwrap();
    assert_eq!(rotation(&mut t, 0, 5), [0, 7, 12, 15, 0, 7]);

    // A set without a switch flag, once reached, stays.
    let mut t = table(&[
        time_set(0, 100_000),
        SetDesc {
            id: 2,
            ..SetDesc::default()
        },
    ]);
    t.load(0).unwrap();
    let sw = t.charge(10_000_000, Boundary::Split, |_, _| {});
    assert_eq!((sw.from, sw.to, sw.switches), (0, 2, 1));
    assert_eq!(t.timer_ns(), None);
    let sw = t.charge(10_000_000, Boundary::Split, |_, _| {});
    assert_eq!((sw.from, sw.to, sw.switches), (2, 2, 0));
}

/// The closed form of a time rotation through `sets` (id, timeout), all
/// `TIME_SWITCH`, started at the first, after `total` ns: per set its
/// running time and runs, the set active at the end and its time left.
fn timeline(sets: &[(usize, u64)], total: u64) -> (Vec<(u64, u64)>, usize, u64) {
    let round: u64 = sets.iter().map(|s| s.1).sum();
    let (k, r) = (total / round, total % round);
    let mut offset = 0;
    let mut per = Vec::new();
    let (mut end_set, mut end_left) = (sets[0].0, 0);
    for &(id, t) in sets {
        let running = k * t + r.saturating_sub(offset).min(t);
        // Activations at offset + j * round <= total; one starting exactly
        // at `total` counts (the timeout was reached).
        let runs = if total >= offset {
            (total - offset) / round + 1
        } else {
            0
        };
        if r >= offset && r < offset + t {
            end_set = id;
            end_left = offset + t - r;
        }
        per.push((running, runs));
        offset += t;
    }
    (per, end_set, end_left)
}

#[test]
fn a_split_charges_every_ns_to_exactly_one_set() {
    let sets = [(0, 100_000), (2, 350_000), (5, 123_457), (9, 1_000_000)];
    let descs: Vec<_> = sets.iter().map(|&(id, t)| time_set(id as u16, t)).collect();
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for case in 0..300 {
        let mut t = table(&descs);
        t.load(0).unwrap();
        let mut seg = [0u64; PFM_MAX_SETS];
        let mut total = 0u64;
        let mut switches = 0u64;
        // Deltas from 0 to a few rounds, some landing exactly on a timeout.
        for _ in 0..(1 + case % 40) {
            let d = match rng.below(4) {
                0 => t.timer_ns().unwrap(),
                1 => rng.below(5_000_000),
                2 => rng.below(200_000),
                _ => rng.below(3),
            };
            let sw = t.charge(d, Boundary::Split, |s, ns| seg[s] += ns);
            total += d;
            switches += sw.switches;
            assert_eq!(sw.to, t.active());
        }
        let (per, end_set, end_left) = timeline(&sets, total);
        let mut sum = 0;
        let mut runs = 0;
        for (&(id, _), &(running, r)) in sets.iter().zip(&per) {
            let info = t.info(id as u16, 0).unwrap();
            assert_eq!(info.time_running, running, "case {case} set {id}");
            assert_eq!(seg[id], running, "case {case} set {id}: the caller's share");
            assert_eq!(info.runs, r, "case {case} set {id}");
            assert_eq!(info.time_enabled, total, "case {case} set {id}");
            sum += info.time_running;
            runs += info.runs;
        }
        assert_eq!(sum, total, "case {case}: conservation");
        assert_eq!(switches, runs - 1, "case {case}");
        assert_eq!(t.switches(), switches);
        assert_eq!(t.active(), end_set, "case {case}");
        assert_eq!(t.timer_ns(), Some(end_left), "case {case}");
        assert_eq!(t.info(end_set as u16, 0).unwrap().time_left, end_left);
    }
}

#[test]
fn a_huge_delta_costs_a_bounded_number_of_steps() {
    let sets = [(0, 100_000), (1, 100_001), (3, 999_999)];
    let descs: Vec<_> = sets.iter().map(|&(id, t)| time_set(id as u16, t)).collect();
    for total in [u64::MAX / 3, u64::MAX - 1, 1_200_000 * 1_000 + 7] {
        let mut t = table(&descs);
        t.load(0).unwrap();
        let mut calls = 0;
        let mut sum = 0u64;
        let sw = t.charge(total, Boundary::Split, |_, ns| {
            calls += 1;
            sum += ns;
        });
        assert!(calls <= 2 * sets.len() + 2, "{calls} steps");
        assert_eq!(sum, total);
        let (per, end_set, end_left) = timeline(&sets, total);
        for (&(id, _), &(running, runs)) in sets.iter().zip(&per) {
            let info = t.info(id as u16, 0).unwrap();
            assert_eq!((info.time_running, info.runs), (running, runs), "set {id}");
        }
        assert_eq!(sw.switches, per.iter().map(|p| p.1).sum::<u64>() - 1);
        assert_eq!((t.active(), t.timer_ns()), (end_set, Some(end_left)));
    }
}

#[test]
fn a_whole_delta_stays_with_the_set_that_counted_it() {
    let mut t = table(&[time_set(0, 1_000_000), time_set(1, 2_000_000)]);
    t.load(0).unwrap();
    // The timer fired 30 us late: all of it was counted under set 0.
    let mut seg = vec![];
    let sw = t.charge(1_030_000, Boundary::WholeDelta, |s, ns| seg.push((s, ns)));
    assert_eq!(seg, [(0, 1_030_000)]);
    assert_eq!((sw.from, sw.to, sw.switches), (0, 1, 1));
    assert_eq!(t.timer_ns(), Some(2_000_000), "a full timeout for set 1");
    // Many timeouts' worth in one delta: still one switch.
    let sw = t.charge(50_000_000, Boundary::WholeDelta, |_, _| {});
    assert_eq!((sw.to, sw.switches), (0, 1));
    let mut rng = Rng(99);
    let mut total = 51_030_000;
    for _ in 0..10_000 {
        let d = rng.below(3_000_000);
        total += d;
        t.charge(d, Boundary::WholeDelta, |_, _| {});
    }
    let a = t.info(0, 0).unwrap();
    let b = t.info(1, 0).unwrap();
    assert_eq!(a.time_running + b.time_running, total);
    assert_eq!(a.time_enabled, total);
    assert_eq!(a.runs + b.runs, t.switches() + 1);
    assert!(a.runs.abs_diff(b.runs) <= 1);
}

#[test]
fn overflow_switching_takes_exactly_k_overflows_per_activation() {
    // Every set counts one event on PMD 0 with period P and switches after
    // k of its overflows; N events, one per fold (context-switches):
    // floor(N / (k P)) switches, with the module's counter arithmetic.
    for (p, k, n) in [
        (1u64, 1u32, 100u64),
        (1, 3, 100),
        (7, 2, 1000),
        (10, 5, 999),
    ] {
        let ids = [0u16, 4, 9];
        let descs: Vec<_> = ids.iter().map(|&id| ovfl_set(id, k, 0b1)).collect();
        let mut t = table(&descs);
        let mut pmds = [PmdState::default(); PFM_MAX_SETS];
        for &id in &ids {
            t.use_reg(id, true, 0).unwrap();
            let pmd = &mut pmds[id as usize];
            pmd.short_reset = period_to_value(p);
            pmd.write(period_to_value(p));
        }
        t.load(0).unwrap();
        let mut switches = 0;
        for _ in 0..n {
            let a = t.active();
            let c = pmds[a].count(1);
            if let Some(sw) = t.overflowed(a, &[c]) {
                assert_eq!(sw.from, a);
                switches += 1;
            }
        }
        assert_eq!(switches, n / (k as u64 * p), "P {p} k {k} N {n}");
        assert_eq!(t.switches(), switches);
        let i = t.info(0, 0).unwrap();
        assert_eq!(i.last_cause, SwitchCause::Overflow);
        assert_eq!(i.last_switch_pmds, 0b1);
        assert_eq!(i.time_left, 0);
    }
}

#[test]
fn overflow_switching_counts_only_the_active_sets_switch_pmds() {
    let mut t = table(&[ovfl_set(0, 3, 0b0110), ovfl_set(1, 2, 0b1)]);
    for r in [0, 1, 2, 3] {
        t.use_reg(0, true, r).unwrap();
    }
    t.use_reg(1, true, 0).unwrap();
    assert_eq!(t.overflowed(0, &[1, 1, 1, 1]), None, "not loaded");
    t.load(0).unwrap();
    // PMD 0 and 3 are not switch PMDs of set 0; set 1 is not active.
    assert_eq!(t.overflowed(0, &[5, 0, 0, 9]), None);
    assert_eq!(t.overflowed(1, &[5]), None);
    assert_eq!(t.overflowed(0, &[0, 1]), None);
    assert_eq!(t.overflowed(0, &[0, 0]), None);
    // The third overflow, from PMD 2 this time, with four more in the
    // same fold: one switch, nothing carried into set 1.
    let sw = t.overflowed(0, &[0, 0, 5]).unwrap();
    assert_eq!((sw.from, sw.to, sw.switches), (0, 1, 1));
    let i = t.info(0, 0).unwrap();
    assert_eq!(
        (i.last_cause, i.last_switch_pmds),
        (SwitchCause::Overflow, 0b110)
    );
    assert_eq!(t.overflowed(1, &[1]), None);
    assert!(t.overflowed(1, &[1]).is_some());
    assert_eq!(t.active(), 0);
    // A fold with no counts (an empty slice) counts nothing.
    assert_eq!(t.overflowed(0, &[]), None);
    assert_eq!(t.info(1, 0).unwrap().runs, 1);
    assert_eq!(t.info(0, 0).unwrap().runs, 2);
}

#[test]
fn getinfo_reports_every_field() {
    let mut t = table(&[
        time_set(0, 1_000_000),
        ovfl_set(2, 4, 0b100),
        time_set(6, 250_000),
    ]);
    t.use_reg(2, false, 2).unwrap();
    t.use_reg(2, true, 2).unwrap();
    t.use_reg(6, true, 1).unwrap();
    assert_eq!(t.info(3, 0), Err(SetError::NoSet));
    assert_eq!(t.info(99, 0), Err(SetError::NoSet));
    t.load(0).unwrap();
    // 1.4 ms: set 0 runs out at 1 ms, set 2 (overflow-switched) takes 0.4.
    let sw = t.charge(1_400_000, Boundary::Split, |_, _| {});
    assert_eq!((sw.to, sw.switches), (2, 1));
    assert_eq!(t.timer_ns(), None, "no timer for an overflow set");
    t.overflowed(2, &[0, 0, 4]).unwrap();
    // Set 6: 100 us, then the read.
    t.charge(100_000, Boundary::Split, |_, _| {});
    assert_eq!(
        t.info(0, 0).unwrap(),
        SetInfo {
            desc: SetDesc {
                id: 0,
                flags: PFM_SETFL_TIME_SWITCH,
                ovfl_switch_cnt: 0,
                timeout: 1_000_000,
                switch_pmds: 0,
                reserved: 0,
            },
            used_pmcs: 0,
            used_pmds: 0,
            runs: 1,
            time_left: 1_000_000,
            time_enabled: 1_500_000,
            time_running: 1_000_000,
            last_switch_pmds: 0,
            last_cause: SwitchCause::Time,
        }
    );
    assert_eq!(
        t.info(2, 0).unwrap(),
        SetInfo {
            desc: SetDesc {
                id: 2,
                flags: PFM_SETFL_OVFL_SWITCH,
                ovfl_switch_cnt: 4,
                timeout: 0,
                switch_pmds: 0b100,
                reserved: 0,
            },
            used_pmcs: 0b100,
            used_pmds: 0b100,
            runs: 1,
            time_left: 0,
            time_enabled: 1_500_000,
            time_running: 400_000,
            last_switch_pmds: 0b100,
            last_cause: SwitchCause::Overflow,
        }
    );
    assert_eq!(
        t.info(6, 0).unwrap(),
        SetInfo {
            desc: SetDesc {
                id: 6,
                flags: PFM_SETFL_TIME_SWITCH,
                ovfl_switch_cnt: 0,
                timeout: 250_000,
                switch_pmds: 0,
                reserved: 0,
            },
            used_pmcs: 0,
            used_pmds: 0b10,
            runs: 1,
            time_left: 150_000,
            time_enabled: 1_500_000,
            time_running: 100_000,
            last_switch_pmds: 0,
            last_cause: SwitchCause::None,
        }
    );
    // After UNLOAD the figures stay; a set created since has no time.
    t.unload();
    t.create(&mut [time_set(1, 500_000)]).unwrap();
    let i = t.info(1, 0).unwrap();
    assert_eq!((i.runs, i.time_enabled, i.time_running), (0, 0, 0));
    assert_eq!(i.time_left, 500_000);
    assert_eq!(t.info(6, 0).unwrap().time_running, 100_000);
    // A new LOAD starts the bookkeeping over.
    t.load(6).unwrap();
    let i = t.info(6, 0).unwrap();
    assert_eq!((i.runs, i.time_running, i.time_left), (1, 0, 250_000));
    assert_eq!(t.info(0, 0).unwrap().last_cause, SwitchCause::None);
}

#[test]
fn one_set_pays_nothing_and_reads_the_contexts_time() {
    // The table a context with sets carries (PFM_MAX_SETS' reason).
    assert_eq!(std::mem::size_of::<SetTable>(), 1584);
    let mut t = SetTable::new(IMPL);
    t.load(0).unwrap();
    assert!(!t.multiplexed());
    assert_eq!(t.timer_ns(), None);
    let i = t.info(0, 12_345).unwrap();
    assert_eq!(
        (i.runs, i.time_enabled, i.time_running),
        (1, 12_345, 12_345)
    );
    assert_eq!(scale(77, i.time_enabled, i.time_running), Some(77));
    t.unload();
    // Set 0 alone with a timeout has nowhere to switch to: still one set.
    t.create(&mut [time_set(0, 1_000_000)]).unwrap();
    t.load(0).unwrap();
    assert!(!t.multiplexed());
    assert_eq!(t.timer_ns(), None);
    t.unload();
    t.create(&mut [time_set(1, 1_000_000)]).unwrap();
    t.load(0).unwrap();
    assert!(t.multiplexed());
    assert_eq!(t.timer_ns(), Some(1_000_000));
    t.unload();
    t.delete(&[1]).unwrap();
    assert!(t.multiplexed(), "decided at LOAD");
    t.load(0).unwrap();
    assert!(!t.multiplexed());
}

#[test]
fn scaling_is_exact_and_never_overflows() {
    assert_eq!(scale(3, 3, 1), Some(9));
    assert_eq!(scale(1, 3, 2), Some(2), "1.5 rounds up");
    assert_eq!(scale(1, 5, 4), Some(1), "1.25 rounds down");
    assert_eq!(scale(2, 5, 3), Some(3), "3.33");
    assert_eq!(scale(5, 7, 0), None);
    assert_eq!(scale(0, 0, 0), None);
    assert_eq!(scale(10, 5, 8), Some(10), "never scaled down");
    assert_eq!(scale(10, 0, 8), Some(10));
    let m = u64::MAX as u128;
    assert_eq!(scale(u64::MAX, u64::MAX, 1), Some(m * m));
    assert_eq!(scale(u64::MAX, u64::MAX, u64::MAX - 1), Some(m + 1));
    assert_eq!(scale(u64::MAX, u64::MAX, 2), Some((m * m).div_ceil(2)));
    assert_eq!(scale_u64(u64::MAX, 3, 1), Some(u64::MAX));
    assert_eq!(scale_u64(1000, 3, 2), Some(1500));
    assert_eq!(scale_u64(1, 1, 0), None);
    let mut rng = Rng(7);
    for _ in 0..100_000 {
        let shift = rng.below(64) as u32;
        let c = rng.next() >> rng.below(64);
        let r = (rng.next() >> shift).max(1);
        let e = r.saturating_add(rng.next() >> rng.below(64));
        let want = (c as u128 * e as u128 + (r / 2) as u128) / r as u128;
        assert_eq!(scale(c, e, r), Some(want), "{c} {e} {r}");
    }
    // The 128-by-64 division at its edges.
    let edges = [
        1u64,
        2,
        3,
        7,
        1 << 32,
        (1 << 63) + 5,
        u64::MAX - 1,
        u64::MAX,
    ];
    for &c in &edges {
        for &e in &edges {
            for &r in edges.iter().filter(|&&r| r < e) {
                let want = (c as u128 * e as u128 + (r / 2) as u128) / r as u128;
                assert_eq!(scale(c, e, r), Some(want), "{c} {e} {r}");
            }
        }
    }
    assert_eq!(running_share(2, 3), Some(6667));
    assert_eq!(running_share(1, 3), Some(3333));
    assert_eq!(running_share(0, 5), Some(0));
    assert_eq!(running_share(5, 5), Some(10_000));
    assert_eq!(running_share(6, 5), Some(10_000));
    assert_eq!(running_share(u64::MAX - 1, u64::MAX), Some(10_000));
    assert_eq!(running_share(5, 0), None);
}

#[test]
fn scaled_task_clock_of_every_set_is_the_enabled_time() {
    // The soft model's task-clock in every set: each set's count is its
    // share of the time, so every estimate is the whole time, exactly.
    let descs = [
        time_set(0, 300_000),
        time_set(1, 700_000),
        time_set(8, 100_000),
    ];
    let mut t = table(&descs);
    t.load(0).unwrap();
    let mut clock = [0u64; PFM_MAX_SETS];
    let mut rng = Rng(3);
    let mut total = 0;
    for _ in 0..5_000 {
        let d = rng.below(2_000_000);
        total += d;
        t.charge(d, Boundary::Split, |s, ns| clock[s] += ns);
    }
    for id in [0u16, 1, 8] {
        let i = t.info(id, 0).unwrap();
        assert_eq!(clock[id as usize], i.time_running);
        let est = scale(clock[id as usize], i.time_enabled, i.time_running);
        assert_eq!(est, Some(total as u128), "set {id}");
    }
    // Shares by timeout: 3/11, 7/11, 1/11 of the time, within one round.
    let share = |id| running_share(t.info(id, 0).unwrap().time_running, total).unwrap();
    assert!(share(0).abs_diff(2727) <= 2, "{}", share(0));
    assert!(share(1).abs_diff(6364) <= 2, "{}", share(1));
    assert!(share(8).abs_diff(909) <= 2, "{}", share(8));
}

/// After UNLOAD the set where monitoring stopped keeps showing its time
/// left; re-created with a shorter timeout, it shows the new one, never
/// more than its timeout (the fuzzer's helper saw 3,689,960 ns left of a
/// 100 us timeout before the fix).
#[test]
fn recreating_the_last_active_set_resets_its_time_left() {
    const MS: u64 = 1_000_000;
    let mut t = table(&[time_set(0, 5 * MS), time_set(1, 5 * MS)]);
    t.load(0).unwrap();
    let _ = t.charge(MS, Boundary::Split, |_, _| {});
    t.unload();
    assert_eq!(
        t.info(0, 0).unwrap().time_left,
        4 * MS,
        "readable after UNLOAD"
    );
    let mut d = [time_set(0, 100_000)];
    t.create(&mut d).unwrap();
    assert_eq!(t.info(0, 0).unwrap().time_left, 100_000);
}
