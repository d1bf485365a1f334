//! A seeded pseudo-random generator (xorshift64*, seeded through
//! splitmix64): no crates, the same sequence for the same seed everywhere.

/// splitmix64: spreads a seed (or a seed combined with indices).
pub const fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The seed of a sub-generator: `seed` combined with a path of indices
/// (process, generation, thread, ...), so that every thread's sequence is
/// a function of the run's seed and its place only.
pub fn derive(seed: u64, path: &[u64]) -> u64 {
    path.iter().fold(splitmix(seed), |acc, &i| {
        splitmix(acc ^ splitmix(i.wrapping_add(0x5851_f42d_4c95_7f2d)))
    })
}

/// xorshift64*.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (any value, 0 included).
    pub fn new(seed: u64) -> Rng {
        let s = splitmix(seed);
        Rng(if s == 0 { 0x2545_f491_4f6c_dd1d } else { s })
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `num / den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }

    /// One element of `items`.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }

    /// An index drawn with the given weights.
    pub fn weighted(&mut self, weights: &[u32]) -> usize {
        let total: u64 = weights.iter().map(|&w| w as u64).sum();
        let mut r = self.below(total);
        for (i, &w) in weights.iter().enumerate() {
            if r < w as u64 {
                return i;
            }
            r -= w as u64;
        }
        weights.len() - 1
    }

    /// A "boundary or garbage" 64-bit value: small numbers, powers of two
    /// and their neighbours, all-ones, sign bits, random bits.
    pub fn interesting_u64(&mut self) -> u64 {
        match self.below(10) {
            0 => 0,
            1 => self.below(8),
            2 => u64::MAX - self.below(4),
            3 => 1u64 << self.below(64),
            4 => (1u64 << self.below(64)).wrapping_sub(1),
            5 => (1u64 << self.below(64)).wrapping_add(1),
            6 => 0x8000_0000_0000_0000 | self.below(4),
            7 => self.below(0x1_0000),
            8 => 0u64.wrapping_sub(self.range(1, 1000)),
            _ => self.next_u64(),
        }
    }

    /// Like [`Rng::interesting_u64`], for 32 bits.
    pub fn interesting_u32(&mut self) -> u32 {
        match self.below(8) {
            0 => 0,
            1 => self.below(8) as u32,
            2 => u32::MAX - self.below(4) as u32,
            3 => 1u32 << self.below(32),
            4 => 0x8000_0000,
            5 => 0x7fff_ffff,
            6 => self.below(0x1_0000) as u32,
            _ => self.next_u64() as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence() {
        let mut a = Rng::new(42);
        let mut b = Rng::new(42);
        for _ in 0..1000 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
        assert_ne!(Rng::new(0).next_u64(), 0);
    }

    #[test]
    fn derive_depends_on_every_index() {
        assert_ne!(derive(7, &[0, 1]), derive(7, &[1, 0]));
        assert_ne!(derive(7, &[0]), derive(8, &[0]));
        assert_eq!(derive(7, &[3, 4]), derive(7, &[3, 4]));
    }

    #[test]
    fn weighted_respects_zero_weights() {
        let mut r = Rng::new(5);
        for _ in 0..1000 {
            let i = r.weighted(&[0, 3, 0, 1]);
            assert!(i == 1 || i == 3);
        }
    }

    #[test]
    fn below_and_range_stay_in_bounds() {
        let mut r = Rng::new(9);
        for _ in 0..1000 {
            assert!(r.below(7) < 7);
            let v = r.range(3, 5);
            assert!((3..=5).contains(&v));
        }
    }
}
