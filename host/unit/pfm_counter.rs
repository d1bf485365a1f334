// SPDX-License-Identifier: GPL-2.0

//! Host unit tests of `pfm_counter.rs` (its `tests` module, kept apart so
//! that the kernel file holds only what the kernel builds).

use super::*;

const WIDTHS: [u32; 7] = [1, 16, 31, 32, 40, 48, 64];

#[test]
fn masks() {
    assert_eq!(width_mask(16), 0xffff);
    assert_eq!(width_mask(48), 0xffff_ffff_ffff);
    assert_eq!(width_mask(64), u64::MAX);
    assert_eq!(width_mask(0), 1);
    assert_eq!(width_mask(99), u64::MAX);
}

#[test]
fn hw_delta_wraps_once_at_every_width() {
    for w in WIDTHS {
        let m = width_mask(w);
        assert_eq!(hw_delta(m, 0, w), 1, "width {w}");
        assert_eq!(hw_delta(m - 1, 1, w), 3 & m, "width {w}");
        assert_eq!(hw_delta(5 & m, 5 & m, w), 0);
    }
}

#[test]
fn advance_without_overflow() {
    assert_eq!(
        advance(10, 5, 0),
        Advance {
            value: 15,
            overflows: 0
        }
    );
    assert_eq!(
        advance(u64::MAX - 1, 1, 7),
        Advance {
            value: u64::MAX,
            overflows: 0
        }
    );
}

#[test]
fn advance_counts_every_period() {
    for p in [1u64, 2, 3, 10, 1000, 1 << 20] {
        let reset = period_to_value(p);
        let mut v = reset;
        let mut overflows = 0;
        // One event at a time: exactly floor(N / P) overflows.
        let n = 5000u64;
        for _ in 0..n {
            let a = advance(v, 1, reset);
            v = a.value;
            overflows += a.overflows;
        }
        assert_eq!(overflows, n / p, "period {p}");
        assert_eq!(v.wrapping_sub(reset), n % p, "period {p}");
        // All at once: the same answer.
        let a = advance(reset, n, reset);
        assert_eq!(a.overflows, n / p);
        assert_eq!(a.value, v);
    }
}

#[test]
fn pack_counts_takes_the_mask_in_pmd_order_less_the_base() {
    let values = [10, 20, 30, 40, 5];
    let base = [1, 2, 3, 4, 10];
    let mut out = [0u64; 4];
    assert_eq!(pack_counts(&values, &base, 0b1_0101, &mut out), 3);
    // PMD 4 went past 2^64 from its base: the wrapped difference.
    assert_eq!(out[..3], [9, 27, 5u64.wrapping_sub(10)]);
    // More PMDs than room: the first ones only.
    let mut two = [0u64; 2];
    assert_eq!(pack_counts(&values, &base, 0b1_1111, &mut two), 2);
    assert_eq!(two, [9, 18]);
    // PMDs the values do not have end the packing.
    assert_eq!(pack_counts(&values, &base, 1 << 40 | 1, &mut out), 1);
    assert_eq!(pack_counts(&values, &base, 0, &mut out), 0);
}

/// A PMD programmed with period `p`, randomised with `mask` and
/// `seed`.
fn random_pmd(p: u64, mask: u64, seed: u64) -> PmdState {
    let reset = period_to_value(p);
    let mut pmd = PmdState::default();
    let random = PeriodRandom::new(seed, mask).unwrap();
    pmd.program(reset, reset, reset, 0, 0, random);
    assert_eq!(pmd.random(), random);
    assert_eq!(pmd.flags(), crate::abi::PFM_REGFL_RANDOM);
    assert_eq!(pmd.last_reset(), 0, "no reset yet");
    pmd
}

#[test]
fn random_resets_give_each_period_its_own_length() {
    let (p, mask, seed) = (10u64, 7u64, 0x5eed);
    let mut pmd = random_pmd(p, mask, seed);
    // One event at a time: the k-th overflow comes P + r_(k-1) events
    // after the one before (the first after P: the written value is
    // not randomised), and resets to -(P + r_k).
    let mut predicted = crate::pfm_random::periods(p, mask, seed).unwrap();
    let mut next = p;
    let mut since = 0;
    let mut overflows = 0;
    for _ in 0..100_000 {
        since += 1;
        let n = pmd.count(1);
        if n == 0 {
            continue;
        }
        assert_eq!((n, since), (1, next), "overflow {overflows}");
        next = predicted.next().unwrap();
        assert!((p..=p + mask).contains(&next));
        assert_eq!(pmd.last_reset(), period_to_value(next));
        assert_eq!(pmd.value, pmd.last_reset());
        since = 0;
        overflows += 1;
    }
    // The mean period is P + mask/2: about 100,000 / 13.5 overflows.
    assert!((7000..7800).contains(&overflows), "{overflows}");
}

#[test]
fn a_random_count_is_the_same_in_one_step_or_many() {
    for (p, mask, delta) in [
        (1u64, 1u64, 50u64),
        (3, 3, 100),
        (100, 63, 3000),
        (5, 0, 200),
    ] {
        let mut one = random_pmd(p, mask, 9);
        let mut many = one;
        let n = one.count(delta);
        let mut m = 0;
        for _ in 0..delta {
            m += many.count(1);
        }
        assert!(n <= MAX_RANDOM_RESETS);
        assert_eq!(
            (n, one.value, one.last_reset()),
            (m, many.value, many.last_reset())
        );
        assert_eq!(one.random(), many.random(), "P {p}: the same draws");
    }
}

#[test]
fn a_random_count_draws_at_most_64_times() {
    let (p, mask) = (1u64, 1u64);
    let mut pmd = random_pmd(p, mask, 11);
    let mut g = pmd.random();
    // 1,000 periods of 1 or 2 events: 64 draws, then the last one's
    // period for the rest.
    let n = pmd.count(1000);
    let mut used = p;
    let mut last = 0;
    for _ in 0..MAX_RANDOM_RESETS {
        last = p + g.draw();
        used += last;
    }
    assert_eq!(pmd.random(), g, "64 draws");
    assert_eq!(pmd.last_reset(), period_to_value(last));
    // `used` events took the first 65 overflows (the write's period and
    // 64 drawn); the rest are periods of `last`.
    let rest = 1000 - (used - last);
    assert_eq!(n, MAX_RANDOM_RESETS + rest / last);
    assert_eq!(pmd.value, period_to_value(last) + rest % last);
}

#[test]
fn linked_and_long_resets_are_randomised_too() {
    let mut pmds = [random_pmd(100, 15, 1), random_pmd(1000, 255, 2)];
    pmds[0].reset_pmds = 0b10;
    pmds[1].long_reset = period_to_value(5000);
    let mut g1 = pmds[1].random();
    assert_eq!(reset_linked(&mut pmds, 0b01, false), 0b10);
    let short = period_to_value(1000) - g1.draw();
    assert_eq!((pmds[1].value, pmds[1].last_reset()), (short, short));
    pmds[1].count(7);
    assert_eq!(reset_linked(&mut pmds, 0b01, true), 0b10);
    let long = period_to_value(5000) - g1.draw();
    assert_eq!((pmds[1].value, pmds[1].last_reset()), (long, long));
    assert_eq!(pmds[1].random(), g1);
    // Without the flag, the reset values as they are.
    let mut plain = PmdState {
        long_reset: 77,
        ..Default::default()
    };
    plain.reset_to(true);
    assert_eq!((plain.value, plain.last_reset()), (77, 77));
}

#[test]
fn a_write_keeps_or_clears_what_randomisation_needs() {
    // The last reset value of a plain PMD survives a write, also one
    // that makes it randomised and then plain again.
    let mut pmd = PmdState::default();
    pmd.program(5, 100, 100, 0, 0, PeriodRandom::OFF);
    pmd.count(u64::MAX);
    assert_eq!(pmd.last_reset(), 100);
    let random = PeriodRandom::new(9, 3).unwrap();
    let notify = crate::abi::PFM_REGFL_OVFL_NOTIFY;
    pmd.program(5, 100, 100, notify, 0, random);
    assert_eq!(pmd.flags(), notify | crate::abi::PFM_REGFL_RANDOM);
    assert_eq!((pmd.last_reset(), pmd.random()), (0, random));
    pmd.reset_to(false);
    let last = pmd.last_reset();
    assert!((97..=100).contains(&last));
    // The flag follows the generator, not the flags given.
    pmd.program(
        5,
        200,
        200,
        crate::abi::PFM_REGFL_RANDOM,
        0,
        PeriodRandom::OFF,
    );
    assert_eq!((pmd.flags(), pmd.last_reset()), (0, last));
    assert_eq!(pmd.random(), PeriodRandom::OFF);
    pmd.clear_notify();
    assert_eq!(pmd.flags(), 0);
}

#[test]
fn advance_with_zero_reset_is_a_plain_wrapping_counter() {
    let a = advance(u64::MAX, 2, 0);
    assert_eq!(
        a,
        Advance {
            value: 1,
            overflows: 1
        }
    );
    let a = advance(u64::MAX, u64::MAX, 0);
    assert_eq!(
        a,
        Advance {
            value: u64::MAX - 1,
            overflows: 1
        }
    );
}
