// SPDX-License-Identifier: GPL-2.0

//! Period randomisation (`PFM_REGFL_RANDOM`, perfmon2's): every reset of a
//! PMD that asks for it subtracts a pseudo-random amount `r`, uniform in
//! `[0, mask]`, from the reset value, so that a period P (a reset value of
//! 2^64 - P) lasts P + r events and a sampled loop cannot stay in lockstep
//! with it.
//!
//! Each PMD has its own generator, seeded by the tool
//! (`reg_random_seed`), so a run can be replayed and predicted: xorshift64*
//! (S. Vigna, "An experimental exploration of Marsaglia's xorshift
//! generators, scrambled", ACM TOMS 42(4), 2016): 64 bits of state that
//! run through every non-zero value (period 2^64 - 1), three shifts and a
//! multiplication per draw, no division. Its high bits are its best
//! (the low ones of a multiplicative scrambler are the weakest), so `r` is
//! the top `k` bits of an output for a mask of 2^k - 1: no modulo, so no
//! modulo bias. Over a whole period the outputs are every 64-bit value but
//! 0 (the multiplier is odd: a bijection of the non-zero states), so each
//! `r` comes from exactly 2^(64-k) outputs, `r = 0` from one fewer.
//!
//! Masks must be 2^k - 1 (0 included: no randomisation, a draw still
//! advances the state). A state is never 0 (xorshift's fixed point): seed
//! 0 means "the kernel picks one" ([`seed_from_entropy`]), and any other
//! seed is the first state. The state after the last draw is a seed too:
//! writing it back continues the sequence.
//!
//! Pure: `core` only, integers only. The module, its host tests and the
//! library (which predicts a run's periods) compile this one file.

/// xorshift64*'s multiplier (Vigna's M_32).
const MULTIPLIER: u64 = 0x2545_f491_4f6c_dd1d;

/// splitmix64's increment (2^64 / φ, odd): spreads seeds derived from one
/// draw of entropy.
const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// Whether `mask` is accepted: 2^k - 1 for k in 0..=64.
pub const fn mask_ok(mask: u64) -> bool {
    mask & mask.wrapping_add(1) == 0
}

/// splitmix64's output function (Steele, Lea, Flood, "Fast splittable
/// pseudorandom number generators", OOPSLA 2014): a bijection of `u64`
/// that spreads nearby inputs over the whole range.
const fn mix64(x: u64) -> u64 {
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The seed the kernel gives element `index` of a register write whose
/// seed is 0, from one draw of `entropy` for the whole call: distinct for
/// distinct indexes (`mix64` is a bijection), never 0.
pub const fn seed_from_entropy(entropy: u64, index: u64) -> u64 {
    let s = mix64(entropy.wrapping_add(index.wrapping_add(1).wrapping_mul(GOLDEN_GAMMA)));
    if s == 0 {
        GOLDEN_GAMMA
    } else {
        s
    }
}

/// A PMD's period randomisation: its generator and the mask of the
/// amounts it draws.
///
/// # Invariants
///
/// `state` is 0 exactly when the randomisation is off (and then `mask` is
/// 0 too); `mask` is 2^k - 1.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeriodRandom {
    state: u64,
    mask: u64,
}

impl PeriodRandom {
    /// No randomisation: every reset uses its reset value as it is.
    pub const OFF: Self = Self { state: 0, mask: 0 };

    /// A generator seeded with `seed` drawing amounts in `[0, mask]`;
    /// `None` if `mask` is not 2^k - 1. A seed of 0, which is no state,
    /// is replaced by a fixed one: the kernel replaces it before, with
    /// [`seed_from_entropy`].
    pub const fn new(seed: u64, mask: u64) -> Option<Self> {
        if !mask_ok(mask) {
            return None;
        }
        let state = if seed == 0 { GOLDEN_GAMMA } else { seed };
        // INVARIANT: a non-zero state, a mask of 2^k - 1.
        Some(Self { state, mask })
    }

    /// Whether resets are randomised.
    pub const fn is_on(&self) -> bool {
        self.state != 0
    }

    /// The mask of the amounts (0 when off).
    pub const fn mask(&self) -> u64 {
        self.mask
    }

    /// The state: the seed that makes the next draws those this generator
    /// would make (0 when off).
    pub const fn state(&self) -> u64 {
        self.state
    }

    /// The next amount, uniform in `[0, mask]`; 0, without a draw, when
    /// off.
    pub fn draw(&mut self) -> u64 {
        if self.state == 0 {
            return 0;
        }
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        // A non-zero state stays non-zero: the three steps are a
        // bijection of `u64` that fixes 0.
        self.state = x;
        self.last_amount()
    }

    /// The amount of the draw that left the generator in its state (an
    /// output is the state times the multiplier): a PMD keeps the state
    /// alone, and its last reset value follows from it. For a generator
    /// that never drew, a value in `[0, mask]` that no draw gave.
    pub const fn last_amount(&self) -> u64 {
        let out = self.state.wrapping_mul(MULTIPLIER);
        match self.mask {
            0 => 0,
            // The top k bits, for a mask of 2^k - 1 (k leading ones of
            // `!mask`, 64 - k leading zeros of `mask`).
            m => out >> m.leading_zeros(),
        }
    }

    /// k, for a mask of 2^k - 1 (0..=64).
    pub const fn mask_bits(&self) -> u32 {
        64 - self.mask.leading_zeros()
    }

    /// The mask of `k` bits, 2^k - 1 (`k` at most 64).
    pub const fn mask_of_bits(k: u32) -> u64 {
        match k {
            0 => 0,
            k if k >= 64 => u64::MAX,
            k => (1 << k) - 1,
        }
    }

    /// The value of a reset to `reset` (a short or long reset value):
    /// `reset` less the next amount (never below 0: the module accepts a
    /// mask only up to the reset values, so the period 2^64 - `reset` + r
    /// is at most 2^64).
    pub fn reset_value(&mut self, reset: u64) -> u64 {
        reset.saturating_sub(self.draw())
    }
}

/// The periods of a PMD written with period `period` (its reset value
/// 2^64 - `period`), `mask` and `seed` (not 0): the k-th item is the
/// period that starts at its k-th reset, `period` + the k-th amount. The
/// first period, from the written value, is not randomised. `None` for a
/// mask that is not 2^k - 1.
pub fn periods(period: u64, mask: u64, seed: u64) -> Option<impl Iterator<Item = u64>> {
    let mut g = PeriodRandom::new(seed, mask)?;
    Some(core::iter::repeat_with(move || {
        period.saturating_add(g.draw())
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_are_two_to_the_k_minus_one() {
        for k in 0..64 {
            assert!(mask_ok((1u64 << k) - 1), "k = {k}");
        }
        assert!(mask_ok(u64::MAX));
        for bad in [2u64, 5, 6, 0x10, 0xfe, 1 << 63, u64::MAX - 1] {
            assert!(!mask_ok(bad), "{bad:#x}");
            assert_eq!(PeriodRandom::new(1, bad), None);
        }
    }

    /// xorshift64* as published, one step at a time in 128-bit arithmetic
    /// (a second writing of the algorithm), for the first outputs.
    fn reference(seed: u64, n: usize) -> Vec<u64> {
        let mut x = seed as u128;
        let m = u64::MAX as u128;
        (0..n)
            .map(|_| {
                x ^= x >> 12;
                x = (x ^ (x << 25)) & m;
                x ^= x >> 27;
                ((x * MULTIPLIER as u128) & m) as u64
            })
            .collect()
    }

    #[test]
    fn a_seed_gives_one_sequence() {
        let seed = 0x0123_4567_89ab_cdef;
        // The first outputs, as a Python transcription of Vigna's C
        // printed them (full mask: the whole output).
        let want = [
            0x7c94_8247_2cb6_708c,
            0xd570_5692_bf1f_28de,
            0x88b7_1e3b_a5e0_05c0,
            0x5e5d_8a88_f0c0_cbe6,
            0xbbc5_6f3e_6b39_d569,
        ];
        let mut g = PeriodRandom::new(seed, u64::MAX).unwrap();
        let got: Vec<u64> = (0..5).map(|_| g.draw()).collect();
        assert_eq!(got, want);
        assert_eq!(reference(seed, 5), want);
        // Twice the same seed, the same draws; another seed, others.
        let run = |seed: u64| {
            let mut g = PeriodRandom::new(seed, 0xffff).unwrap();
            (0..1000).map(|_| g.draw()).collect::<Vec<_>>()
        };
        assert_eq!(run(42), run(42));
        assert_ne!(run(42), run(43));
        // The state is a seed: written back, it continues the sequence.
        let mut a = PeriodRandom::new(7, 0xff).unwrap();
        for _ in 0..10 {
            a.draw();
        }
        let mut b = PeriodRandom::new(a.state(), 0xff).unwrap();
        for _ in 0..100 {
            assert_eq!(a.draw(), b.draw());
        }
    }

    #[test]
    fn an_amount_is_the_top_bits_of_the_output() {
        for k in [1u32, 4, 8, 17, 63] {
            let mask = (1u64 << k) - 1;
            let mut g = PeriodRandom::new(99, mask).unwrap();
            for out in reference(99, 50) {
                assert_eq!(g.draw(), out >> (64 - k), "k = {k}");
            }
        }
    }

    #[test]
    fn every_amount_is_within_the_mask() {
        let mut seen = [false; 16];
        for k in 0..=64u32 {
            let mask = if k == 64 { u64::MAX } else { (1u64 << k) - 1 };
            let mut g = PeriodRandom::new(0x5eed + u64::from(k), mask).unwrap();
            for _ in 0..10_000 {
                let r = g.draw();
                assert!(r <= mask, "k = {k}: {r:#x} > {mask:#x}");
                if k == 4 {
                    seen[r as usize] = true;
                }
            }
            assert_ne!(g.state(), 0);
        }
        // And every value of a small mask comes up.
        assert!(seen.iter().all(|&s| s));
        // Mask 0: no amount, the state still advances.
        let mut g = PeriodRandom::new(5, 0).unwrap();
        assert_eq!(g.draw(), 0);
        assert_ne!(g.state(), 5);
        // Off: nothing drawn, nothing advanced.
        let mut off = PeriodRandom::OFF;
        assert_eq!((off.draw(), off.state(), off.is_on()), (0, 0, false));
    }

    /// Pearson's χ² statistic of `draws` amounts of `seed` in `bins`
    /// (mask `bins - 1`), times 1000, in integers: with O_i the count of
    /// bin i, N the draws and E = N / B the expected count,
    /// χ² = Σ (O_i - E)² / E = Σ (B·O_i - N)² / (N·B).
    fn chi2_milli(seed: u64, bins: u64, draws: u64) -> u64 {
        let mut g = PeriodRandom::new(seed, bins - 1).unwrap();
        let mut count = vec![0u64; bins as usize];
        for _ in 0..draws {
            count[g.draw() as usize] += 1;
        }
        let sum: u128 = count
            .iter()
            .map(|&o| {
                let d = (bins * o).abs_diff(draws) as u128;
                d * d
            })
            .sum();
        (sum * 1000 / (draws as u128 * bins as u128)) as u64
    }

    /// 10,000 draws in 16 bins (mask 15, 625 expected per bin), χ² with
    /// 15 degrees of freedom. Its upper 0.001 quantile is 37.697 (the χ²
    /// table of Abramowitz & Stegun 26.8, or NIST/SEMATECH's 1.3.6.7.4);
    /// the Wilson-Hilferty approximation, 15 · (1 - 2/135 + 3.0902 ·
    /// √(2/135))³ with 3.0902 the normal 0.999 quantile, gives 37.84 as a
    /// check. A uniform generator exceeds 37.697 once in 1,000 seeds; the
    /// test does not reject at p = 0.001 for any of these seeds (checked
    /// on several, so that one lucky seed proves nothing), and a
    /// generator that favoured one bin by 2.5% of the draws would.
    #[test]
    fn chi_squared_does_not_reject_uniformity() {
        const CRITICAL_15_DF_P001_MILLI: u64 = 37_697;
        for seed in [1u64, 0x5eed, 0x0123_4567_89ab_cdef, u64::MAX, 1 << 63] {
            let chi2 = chi2_milli(seed, 16, 10_000);
            eprintln!("seed {seed:#x}: chi2 = {}.{:03}", chi2 / 1000, chi2 % 1000);
            assert!(
                chi2 <= CRITICAL_15_DF_P001_MILLI,
                "seed {seed:#x}: chi2 {chi2}/1000 > 37.697"
            );
        }
        // The test can reject: 250 of the 10,000 draws moved into bin 0
        // from bin 15 gives Σ(O - E)²/E ≥ 2·250²/625 = 200.
        let mut count = [625u64; 16];
        count[0] += 250;
        count[15] -= 250;
        let sum: u64 = count
            .iter()
            .map(|&o| (16 * o).abs_diff(10_000).pow(2))
            .sum();
        assert!(sum * 1000 / (10_000 * 16) > CRITICAL_15_DF_P001_MILLI);
        // Two bins (mask 1, the top bit), 1 degree of freedom: 10.828.
        assert!(chi2_milli(0x5eed, 2, 10_000) <= 10_828);
    }

    #[test]
    fn the_state_gives_the_last_amount_and_the_mask_its_bits() {
        for k in 0..=64u32 {
            let mask = PeriodRandom::mask_of_bits(k);
            assert!(mask_ok(mask));
            let mut g = PeriodRandom::new(0x5eed, mask).unwrap();
            assert_eq!(g.mask_bits(), k);
            for _ in 0..100 {
                let r = g.draw();
                assert_eq!(g.last_amount(), r, "k = {k}");
            }
        }
    }

    #[test]
    fn seeds_from_entropy_are_distinct_and_never_zero() {
        let mut seen = std::collections::HashSet::new();
        for e in [0u64, 1, u64::MAX] {
            for i in 0..64 {
                let s = seed_from_entropy(e, i);
                assert_ne!(s, 0);
                assert!(seen.insert(s), "entropy {e:#x}, index {i}");
            }
        }
        assert_eq!(PeriodRandom::new(0, 1).unwrap().state(), GOLDEN_GAMMA);
    }

    #[test]
    fn resets_and_periods_follow_the_draws() {
        let p = 1000u64;
        let mut g = PeriodRandom::new(3, 63).unwrap();
        let mut h = g;
        let predicted: Vec<u64> = periods(p, 63, 3).unwrap().take(100).collect();
        for want in predicted {
            let reset = g.reset_value(p.wrapping_neg());
            assert_eq!(reset.wrapping_neg(), want);
            assert!((p..=p + 63).contains(&want));
            assert_eq!(want, p + h.draw());
        }
        // Never below 0 (a period of at most 2^64).
        let mut g = PeriodRandom::new(3, u64::MAX).unwrap();
        assert!((0..100).all(|_| g.reset_value(5) <= 5));
        assert!(periods(1, 6, 1).is_none());
    }
}
