// SPDX-License-Identifier: GPL-2.0

//! The hardware claim: what a hardware model takes from the system while
//! contexts use it (the general-purpose counters, reserved from
//! perf_events, and the LVTPCs), and gives back when the last one ends.
//!
//! Its bookkeeping is [`ClaimWord`]: how many live hardware contexts
//! hold the claim, whether the counters are reserved for the module, and
//! who reserves or releases them. One atomic word, no kernel imports:
//! host-tested, threads included. The kernel half (`Pmu::hw_claim` and
//! the rest, built only into the module: `cfg(MODULE)`) drives it.
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

#[cfg(MODULE)]
pub(crate) use kernel_half::HwClaim;

/// The claim in the kernel: `Pmu`'s methods over the [`ClaimWord`] it owns.
#[cfg(MODULE)]
mod kernel_half {
    use core::sync::atomic::{AtomicBool, Ordering};

    use kernel::prelude::*;

    use super::super::model::HwPmu;
    use super::super::{driver, Pmu};
    use crate::rust as glue;

    /// One hardware context's claim on the hardware (in its attachment):
    /// taken by [`Pmu::hw_claim`] when LOAD publishes the attachment, given
    /// back by [`Pmu::hw_unclaim`] when the attachment ends.
    pub(crate) struct HwClaim(AtomicBool);

    impl HwClaim {
        /// No claim held yet.
        pub(crate) const fn new() -> Self {
            Self(AtomicBool::new(false))
        }
    }

    /// At most one "counters busy" line per this many ns: any user can
    /// retry LOAD in a loop.
    const BUSY_WARN_INTERVAL_NS: u64 = 10_000_000_000;

    impl Pmu {
        /// Takes one claim on the hardware for a hardware context's
        /// attachment (`token`), at the point where LOAD publishes it:
        /// after the permission check and every validity check passed, so a
        /// refused LOAD takes nothing. No-op for the soft model.
        ///
        /// The first claim reserves every general-purpose counter through
        /// the NMI reservation allocator that perf_events also uses. perf's
        /// x86 core reserves all of them whenever any hardware event of its
        /// own exists (a perf user, the NMI watchdog — a perf cycles event —
        /// KVM's vPMU, BTS), so success proves that none does, and none can
        /// be created while the module holds them (`EBUSY` for perf). Later
        /// claims only count. LVTPC is not touched here: a CPU's LVTPC is
        /// pointed at the overflow vector when a context first puts its
        /// counters on that CPU's PMU (`Vectors::own_lvtpc_here`), and given
        /// back with the counters when the last claim goes
        /// ([`Pmu::hw_unclaim`]).
        ///
        /// `EBUSY`, with a message at most every 10 s, when perf holds the
        /// counters. Any context (called under the registry and context
        /// locks): only atomic operations, with interrupts off around them.
        pub(crate) fn hw_claim(&self, token: &HwClaim) -> Result {
            let Some(m) = &self.hw else {
                return Ok(());
            };
            if token.0.load(Ordering::Relaxed) {
                return Ok(());
            }
            let reserve = || {
                let mut taken = 0usize;
                for (ctr, evtsel) in m.reservations() {
                    if !glue::reserve_counter(ctr, evtsel) {
                        for (ctr, evtsel) in m.reservations().take(taken) {
                            glue::release_counter(ctr, evtsel);
                        }
                        return false;
                    }
                    taken += 1;
                }
                true
            };
            // Interrupts off: a reservation runs alone while others spin.
            let flags = glue::local_irq_save();
            let ok = self.claims.take(reserve);
            glue::local_irq_restore(flags);
            if !ok {
                self.warn_busy(m.name());
                return Err(EBUSY);
            }
            token.0.store(true, Ordering::Relaxed);
            Ok(())
        }

        /// Says, at most every 10 s, that perf_events holds the counters.
        fn warn_busy(&self, model: &str) {
            let now = glue::now_ns();
            let last = self.busy_warned_at.load(Ordering::Relaxed);
            if last != 0 && now.saturating_sub(last) <= BUSY_WARN_INTERVAL_NS {
                return;
            }
            self.busy_warned_at.store(now.max(1), Ordering::Relaxed);
            pr_warn!(
                "the {} counters are held by perf_events (the NMI watchdog or a perf user): echo 0 > /proc/sys/kernel/nmi_watchdog and end perf sessions, or load perfmon with pmu=soft\n",
                model
            );
        }

        /// Gives back the claim `token` holds, if it holds one: when a
        /// hardware context's attachment ends (its drop, after its counters
        /// left every PMU). The last claim to go leaves every PMC disabled
        /// on each CPU whose LVTPC the module took, gives those LVTPCs back,
        /// then releases the counters to perf_events — each step only if no
        /// new claim came meanwhile. Process context (IPIs every CPU and
        /// waits).
        pub(crate) fn hw_unclaim(&self, token: &HwClaim) {
            if self.hw.is_none() || !token.0.swap(false, Ordering::Relaxed) {
                return;
            }
            if self.claims.put() {
                self.give_back();
            }
        }

        /// After the last claim went: every CPU's PMCs off and LVTPC back
        /// (each CPU checks, interrupts off, that still no claim exists),
        /// then the counters back to perf_events if still unclaimed.
        /// Process context.
        fn give_back(&self) {
            // Through `globals()`: the IPI reaches the `Pmu` the same way the
            // interrupt entries do (the closure must be `Sync`).
            glue::on_each_cpu(&|| crate::globals().pmu.give_back_here());
            self.unclaim();
        }

        /// [`Pmu::give_back`] on this CPU (an IPI: interrupts off).
        fn give_back_here(&self) {
            if self.claims.holders() != 0 {
                return;
            }
            let intr = &crate::globals().intr;
            // No claim, so no context's counters are on this PMU: only
            // stale enable bits could be, where a context counted (where
            // LVTPC is ours); they would count, and interrupt perf's NMI
            // handler, once perf enables its global control again.
            if let Some(m) = &self.hw {
                if intr.lvtpc_ours_here() {
                    self.note(&driver::quiesce(m, &mut self.bus()));
                }
            }
            intr.give_back_lvtpc_here();
        }

        /// Module unload, after every context is gone (each attachment gave
        /// its claim back): a no-op unless a claim was leaked, in which case
        /// the PMCs are left disabled and LVTPC and the counters given back
        /// anyway.
        pub(crate) fn quiesce_all(&self) {
            if self.hw.is_none() || !self.claims.reserved() {
                return;
            }
            pr_err!(
                "{} hardware claim(s) left at unload (a bug): giving the counters back\n",
                self.claims.holders()
            );
            while self.claims.holders() != 0 {
                self.claims.put();
            }
            self.give_back();
        }

        /// Releases the counters to perf_events if they are reserved and no
        /// claim holds them (after the last claim's give-back; and at module
        /// unload, after [`Pmu::quiesce_all`] and the vectors' teardown).
        pub(crate) fn unclaim(&self) {
            let Some(m) = &self.hw else {
                return;
            };
            let flags = glue::local_irq_save();
            self.claims.release_if_unused(|| {
                for (ctr, evtsel) in m.reservations() {
                    glue::release_counter(ctr, evtsel);
                }
            });
            glue::local_irq_restore(flags);
        }

        /// Live hardware contexts holding the claim (sysfs `hw_claimed`).
        pub(crate) fn hw_claimed(&self) -> u32 {
            self.claims.holders()
        }

        /// General-purpose counters the module holds reserved (sysfs
        /// `hw_reserved_counters`).
        pub(crate) fn reserved_counters(&self) -> u32 {
            match &self.hw {
                Some(m) if self.claims.reserved() => m.reservations().count() as u32,
                _ => 0,
            }
        }
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
