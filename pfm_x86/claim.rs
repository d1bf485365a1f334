// SPDX-License-Identifier: GPL-2.0

//! The bookkeeping of the hardware claim: how many live hardware contexts
//! hold it, whether the general-purpose counters are reserved for the
//! module, and who reserves or releases them. One atomic word, no kernel
//! imports: host-tested, threads included.
//!
//! The first holder reserves the counters; later holders only count. The
//! last holder to go does not release at once: it first gives back what
//! only exists while a holder might need it (the kernel side: every CPU's
//! LVTPC, each CPU checking that there is still no holder), then calls
//! [`ClaimWord::release_if_unused`], which releases only if no holder came
//! in the meantime (a newcomer found the counters still reserved and kept
//! them). A reservation or a release runs alone: `BUSY` is set around it
//! and others spin, so the caller must make those few atomic operations
//! short and not preemptible (interrupts off, in the kernel).

use core::sync::atomic::{AtomicU32, Ordering};

/// Set while a reservation or a release runs.
const BUSY: u32 = 1 << 31;
/// The counters are reserved for the module.
const RESERVED: u32 = 1 << 30;
/// The number of holders (far more than the module's 4,096 attachments).
const HOLDERS: u32 = RESERVED - 1;

/// The claim's state word.
pub struct ClaimWord(AtomicU32);

impl Default for ClaimWord {
    fn default() -> Self {
        Self::new()
    }
}

impl ClaimWord {
    /// No holder, nothing reserved.
    pub const fn new() -> Self {
        Self(AtomicU32::new(0))
    }

    /// Adds a holder. With no counters reserved, `reserve` runs first (alone)
    /// and the holder is added only if it returns `true`. `false`: `reserve`
    /// failed (it undid its own partial work), or the count is full.
    pub fn take(&self, reserve: impl FnOnce() -> bool) -> bool {
        loop {
            let s = self.0.load(Ordering::Acquire);
            if s & BUSY != 0 {
                core::hint::spin_loop();
                continue;
            }
            if s & RESERVED != 0 {
                if s & HOLDERS == HOLDERS {
                    return false;
                }
                if self
                    .0
                    .compare_exchange(s, s + 1, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return true;
                }
                continue;
            }
            // Nothing reserved, so no holder: reserve, alone.
            if self
                .0
                .compare_exchange(s, BUSY, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                continue;
            }
            let ok = reserve();
            self.0
                .store(if ok { RESERVED | 1 } else { 0 }, Ordering::Release);
            return ok;
        }
    }

    /// Removes a holder (one that [`ClaimWord::take`] added); `true` if it
    /// was the last: the caller gives back what the holders used, then calls
    /// [`ClaimWord::release_if_unused`].
    pub fn put(&self) -> bool {
        let mut s = self.0.load(Ordering::Acquire);
        loop {
            if s & HOLDERS == 0 {
                // Unbalanced: nothing to remove (never expected).
                return false;
            }
            match self
                .0
                .compare_exchange(s, s - 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return s & HOLDERS == 1,
                Err(now) => s = now,
            }
        }
    }

    /// Runs `release` (alone) and clears the reservation if the counters are
    /// reserved and nobody holds them; `true` if it did.
    pub fn release_if_unused(&self, release: impl FnOnce()) -> bool {
        if self
            .0
            .compare_exchange(RESERVED, BUSY, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        release();
        self.0.store(0, Ordering::Release);
        true
    }

    /// The number of holders now.
    pub fn holders(&self) -> u32 {
        self.0.load(Ordering::Acquire) & HOLDERS
    }

    /// Whether the counters are reserved now (a reservation or release in
    /// progress counts as reserved).
    pub fn reserved(&self) -> bool {
        self.0.load(Ordering::Acquire) & (RESERVED | BUSY) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicI32;
    use std::sync::Arc;

    #[test]
    fn first_reserves_last_releases() {
        let w = ClaimWord::new();
        let reserves = core::cell::Cell::new(0);
        assert!(!w.reserved() && w.holders() == 0);
        assert!(w.take(|| {
            reserves.set(reserves.get() + 1);
            true
        }));
        assert!(w.take(|| panic!("reserved twice")));
        assert_eq!((w.holders(), w.reserved(), reserves.get()), (2, true, 1));
        assert!(!w.put());
        assert!(w.put());
        // The last holder went; the counters stay until released.
        assert_eq!((w.holders(), w.reserved()), (0, true));
        let mut released = 0;
        assert!(w.release_if_unused(|| released += 1));
        assert!(!w.release_if_unused(|| released += 1));
        assert_eq!((released, w.reserved()), (1, false));
    }

    #[test]
    fn failed_reservation_holds_nothing() {
        let w = ClaimWord::new();
        assert!(!w.take(|| false));
        assert_eq!((w.holders(), w.reserved()), (0, false));
        assert!(!w.put(), "a put without a holder");
        assert!(!w.release_if_unused(|| panic!("nothing to release")));
        assert!(w.take(|| true));
        assert_eq!(w.holders(), 1);
    }

    #[test]
    fn a_newcomer_before_the_release_keeps_the_counters() {
        let w = ClaimWord::new();
        assert!(w.take(|| true));
        assert!(w.put());
        // Someone comes while the last one gives back its LVTPCs.
        assert!(w.take(|| panic!("still reserved: no second reservation")));
        assert!(!w.release_if_unused(|| panic!("released under a holder")));
        assert_eq!((w.holders(), w.reserved()), (1, true));
        assert!(w.put());
        assert!(w.release_if_unused(|| {}));
    }

    #[test]
    fn full_count_refused() {
        let w = ClaimWord(AtomicU32::new(RESERVED | HOLDERS));
        assert!(!w.take(|| true));
        assert_eq!(w.holders(), HOLDERS);
    }

    /// Threads take, put and release at random: the counters are reserved
    /// at most once at a time, exactly while someone holds them (or a
    /// release is pending), and everything is free at the end.
    #[test]
    fn threads_never_double_reserve_or_release_under_a_holder() {
        let w = Arc::new(ClaimWord::new());
        // The "hardware": +1 while reserved; holders seen by the hardware.
        let hw = Arc::new(AtomicI32::new(0));
        let inside = Arc::new(AtomicI32::new(0));
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let (w, hw, inside) = (w.clone(), hw.clone(), inside.clone());
                std::thread::spawn(move || {
                    let mut x = t.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                    for _ in 0..20_000 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let fail = x % 17 == 0;
                        let took = w.take(|| {
                            if fail {
                                return false;
                            }
                            assert_eq!(hw.fetch_add(1, Ordering::SeqCst), 0, "reserved twice");
                            true
                        });
                        if !took {
                            continue;
                        }
                        inside.fetch_add(1, Ordering::SeqCst);
                        assert_eq!(hw.load(Ordering::SeqCst), 1, "a holder without counters");
                        inside.fetch_sub(1, Ordering::SeqCst);
                        if w.put() {
                            w.release_if_unused(|| {
                                assert_eq!(
                                    inside.load(Ordering::SeqCst),
                                    0,
                                    "released under a holder"
                                );
                                assert_eq!(hw.fetch_sub(1, Ordering::SeqCst), 1, "released twice");
                            });
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // Whoever put last also released (or someone after it did).
        assert_eq!(w.holders(), 0);
        assert!(!w.reserved(), "counters left reserved");
        assert_eq!(hw.load(Ordering::SeqCst), 0);
    }
}
