// SPDX-License-Identifier: GPL-2.0

//! A hash index over a dense array, for the tables that are looked up on
//! every fork and exec under an IRQ-off spinlock (the registry of
//! attachments, by thread; the processes monitored whole, by thread
//! group): so a lookup costs what the looked-up key holds, not what the
//! whole table holds (one user's 4,096 entries cost nobody else).
//!
//! The caller owns the storage: a dense array of up to `u16::MAX - 1`
//! entries, and a bucket array (a power of two, at least twice the dense
//! array's capacity) of dense indexes, [`EMPTY`] where none. Open
//! addressing with linear probing and backward-shift deletion (no
//! tombstones): at most half of the buckets are ever used, so a probe run
//! is short (2.5 buckets for a miss on average). Several entries may share
//! a key (a thread may hold a live attachment and the ones awaiting its
//! cleanup); a lookup walks the run from the key's home bucket to the first
//! empty one and the caller compares keys. Nothing here allocates.
//!
//! Pure: host-tested (`host/`).

/// A bucket that holds no entry.
pub const EMPTY: u16 = u16::MAX;

/// The home bucket of `key` among `n` buckets (a power of two): the high
/// bits of a multiplicative (Fibonacci) hash, so that keys a fixed stride
/// apart (slab objects) spread over every bucket.
pub fn home(key: u64, n: usize) -> usize {
    debug_assert!(n.is_power_of_two() && n >= 2);
    let bits = n.trailing_zeros();
    (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - bits)) as usize
}

/// The dense indexes in `key`'s probe run: every entry whose key is `key`
/// is among them (the caller compares keys).
pub fn run(buckets: &[u16], key: u64) -> impl Iterator<Item = u16> + '_ {
    let n = buckets.len();
    let start = home(key, n);
    (0..n)
        .map(move |i| buckets[(start + i) & (n - 1)])
        .take_while(|&d| d != EMPTY)
}

/// Adds dense index `d` under `key`. `false` if every bucket is taken (the
/// caller keeps the dense array at most half the buckets: never).
pub fn insert(buckets: &mut [u16], key: u64, d: u16) -> bool {
    let n = buckets.len();
    let start = home(key, n);
    for i in 0..n {
        let b = (start + i) & (n - 1);
        if buckets[b] == EMPTY {
            buckets[b] = d;
            return true;
        }
    }
    false
}

/// The bucket that holds dense index `d`, found from `key` (its key).
fn bucket_of(buckets: &[u16], key: u64, d: u16) -> Option<usize> {
    let n = buckets.len();
    let start = home(key, n);
    for i in 0..n {
        let b = (start + i) & (n - 1);
        match buckets[b] {
            EMPTY => return None,
            x if x == d => return Some(b),
            _ => {}
        }
    }
    None
}

/// Removes dense index `d`, whose key is `key`; `key_of` gives the key of
/// any dense index still in the index. The entries after it in its run
/// shift back so that every run stays unbroken. `false` if `d` was not
/// there.
pub fn remove(buckets: &mut [u16], key: u64, d: u16, key_of: impl Fn(u16) -> u64) -> bool {
    let n = buckets.len();
    let Some(mut hole) = bucket_of(buckets, key, d) else {
        return false;
    };
    buckets[hole] = EMPTY;
    let mut b = hole;
    loop {
        b = (b + 1) & (n - 1);
        let x = buckets[b];
        if x == EMPTY {
            return true;
        }
        let h = home(key_of(x), n);
        // `x` may move back to the hole if its home is not cyclically
        // within (hole, b]: its run then still reaches it.
        let within = if hole <= b {
            hole < h && h <= b
        } else {
            hole < h || h <= b
        };
        if !within {
            buckets[hole] = x;
            buckets[b] = EMPTY;
            hole = b;
        }
    }
}

/// Dense index `from`, whose key is `key`, is now at `to` (the dense
/// array moved its last entry into a removed one's place). `false` if
/// `from` was not there.
pub fn renumber(buckets: &mut [u16], key: u64, from: u16, to: u16) -> bool {
    match bucket_of(buckets, key, from) {
        Some(b) => {
            buckets[b] = to;
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dense array of keys with its index, kept as the kernel tables
    /// keep theirs (swap-remove, then renumber the moved entry).
    struct Table {
        keys: Vec<u64>,
        buckets: Vec<u16>,
    }

    impl Table {
        fn new(n: usize) -> Self {
            Self {
                keys: Vec::new(),
                buckets: vec![EMPTY; n],
            }
        }

        fn add(&mut self, key: u64) {
            let d = self.keys.len() as u16;
            self.keys.push(key);
            assert!(insert(&mut self.buckets, key, d));
        }

        fn count(&self, key: u64) -> usize {
            run(&self.buckets, key)
                .filter(|&d| self.keys[d as usize] == key)
                .count()
        }

        fn del(&mut self, key: u64) -> bool {
            let Some(d) = run(&self.buckets, key).find(|&d| self.keys[d as usize] == key) else {
                return false;
            };
            let keys = self.keys.clone();
            assert!(remove(&mut self.buckets, key, d, |x| keys[x as usize]));
            let last = (self.keys.len() - 1) as u16;
            self.keys.swap_remove(d as usize);
            if d != last {
                let moved = self.keys[d as usize];
                assert!(renumber(&mut self.buckets, moved, last, d));
            }
            true
        }

        /// Every entry is reachable from its home, and nothing else is indexed.
        fn check(&self) {
            let used = self.buckets.iter().filter(|&&b| b != EMPTY).count();
            assert_eq!(used, self.keys.len());
            for (d, &k) in self.keys.iter().enumerate() {
                assert!(
                    run(&self.buckets, k).any(|x| x as usize == d),
                    "key {k} lost"
                );
            }
        }
    }

    /// A small deterministic generator (xorshift).
    fn next(s: &mut u64) -> u64 {
        *s ^= *s << 13;
        *s ^= *s >> 7;
        *s ^= *s << 17;
        *s
    }

    #[test]
    fn random_inserts_and_removes_keep_every_run() {
        let mut t = Table::new(64);
        let mut s = 0x1234_5678_9abc_def0u64;
        let mut model: Vec<u64> = Vec::new();
        for _ in 0..20_000 {
            let r = next(&mut s);
            // Few distinct keys, so that runs hold duplicates and collide.
            let key = (r >> 8) % 23 * 0x2a40;
            if r & 1 == 0 && model.len() < 32 {
                t.add(key);
                model.push(key);
            } else if let Some(i) = model.iter().position(|&k| k == key) {
                model.swap_remove(i);
                assert!(t.del(key));
            } else {
                assert!(!t.del(key));
            }
            t.check();
            assert_eq!(t.count(key), model.iter().filter(|&&k| k == key).count());
        }
    }

    #[test]
    fn full_half_and_wraparound() {
        let mut t = Table::new(8);
        // Keys whose homes are the last bucket: the run wraps to bucket 0.
        let last: Vec<u64> = (0..10_000u64)
            .filter(|&k| home(k, 8) == 7)
            .take(4)
            .collect();
        for &k in &last {
            t.add(k);
        }
        t.check();
        assert!(t.del(last[0]));
        t.check();
        for &k in &last[1..] {
            assert_eq!(t.count(k), 1);
        }
    }

    #[test]
    fn strided_keys_spread() {
        // Task structs a slab stride apart: no bucket holds more than a few.
        let n = 8192;
        let mut homes = vec![0u32; n];
        for i in 0..4096u64 {
            homes[home(0xffff_8880_0100_0000 + i * 0x2a40, n)] += 1;
        }
        assert!(homes.iter().all(|&c| c <= 4), "{:?}", homes.iter().max());
    }
}
