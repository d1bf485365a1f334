// SPDX-License-Identifier: GPL-2.0

//! The hardware claim: what a hardware model takes from the system while
//! contexts use it (the general-purpose counters, reserved from
//! perf_events, and the LVTPCs), and gives back when the last one ends.
//!
//! Its bookkeeping is [`ClaimState`]: how many live hardware contexts
//! hold the claim and whether the counters are reserved for the module.
//! No kernel imports: host-tested, threads included (under a `std` mutex).
//! The kernel half (`Pmu::hw_claim` and the rest, built only into the
//! module: `cfg(MODULE)`) keeps it under a sleeping lock, a `Mutex`: the
//! first holder reserves the counters, the last one gives back every CPU's
//! LVTPC (IPIs, waiting) and releases them, each alone under the lock, and
//! whoever comes meanwhile sleeps instead of spinning. (A spinning
//! contender could livelock a non-preemptible kernel: with both LOADs on
//! one CPU, the holder that sleeps inside never gets the CPU back.)

/// The claim's bookkeeping, kept under the kernel half's mutex.
#[derive(Debug, Default)]
pub struct ClaimState {
    /// Live hardware contexts holding the claim.
    holders: u32,
    /// The counters are reserved for the module.
    reserved: bool,
}

/// The most holders (far more than the module's 4,096 attachments).
const MAX_HOLDERS: u32 = 1 << 30;

impl ClaimState {
    /// No holder, nothing reserved.
    pub const fn new() -> Self {
        Self {
            holders: 0,
            reserved: false,
        }
    }

    /// Adds a holder. With no counters reserved, `reserve` runs first and
    /// the holder is added only if it returns `true`. `false`: `reserve`
    /// failed (it undid its own partial work), or the count is full.
    pub fn take(&mut self, reserve: impl FnOnce() -> bool) -> bool {
        if self.holders >= MAX_HOLDERS {
            return false;
        }
        if !self.reserved {
            if !reserve() {
                return false;
            }
            self.reserved = true;
        }
        self.holders += 1;
        true
    }

    /// Removes a holder (one that [`ClaimState::take`] added); `true` if it
    /// was the last: the caller gives back what the holders used, then
    /// calls [`ClaimState::release_if_unused`], under the same lock.
    pub fn put(&mut self) -> bool {
        if self.holders == 0 {
            // Unbalanced: nothing to remove (never expected).
            return false;
        }
        self.holders -= 1;
        self.holders == 0
    }

    /// Runs `release` and clears the reservation if the counters are
    /// reserved and nobody holds them; `true` if it did.
    pub fn release_if_unused(&mut self, release: impl FnOnce()) -> bool {
        if !self.reserved || self.holders != 0 {
            return false;
        }
        release();
        self.reserved = false;
        true
    }

    /// The number of holders.
    pub fn holders(&self) -> u32 {
        self.holders
    }

    /// Whether the counters are reserved.
    pub fn reserved(&self) -> bool {
        self.reserved
    }
}

#[cfg(MODULE)]
pub(crate) use kernel_half::{Claims, HwClaim};

/// The claim in the kernel: `Pmu`'s methods over the [`ClaimState`] it
/// keeps under a mutex.
#[cfg(MODULE)]
mod kernel_half {
    use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

    use kernel::prelude::*;
    use kernel::sync::Mutex;

    use super::super::model::HwPmu;
    use super::super::{driver, Pmu};
    use super::ClaimState;
    use crate::rust as glue;

    /// One hardware context's claim on the hardware (in its attachment):
    /// taken by [`Pmu::hw_claim`] before LOAD publishes the attachment,
    /// given back by [`Pmu::hw_unclaim`] when the attachment ends.
    pub(crate) struct HwClaim(AtomicBool);

    impl HwClaim {
        /// No claim held yet.
        pub(crate) const fn new() -> Self {
            Self(AtomicBool::new(false))
        }
    }

    /// The claim: its state under a sleeping lock, and copies of the two
    /// numbers for readers that cannot sleep (sysfs, the give-back IPIs),
    /// written under the lock.
    #[pin_data]
    pub(crate) struct Claims {
        #[pin]
        state: Mutex<ClaimState>,
        holders: AtomicU32,
        reserved: AtomicBool,
    }

    impl Claims {
        /// No holder, nothing reserved.
        pub(crate) fn new() -> Result<Pin<KBox<Self>>> {
            KBox::pin_init(
                pin_init!(Self {
                    state <- kernel::new_mutex!(ClaimState::new(), "perfmon_claim"),
                    holders: AtomicU32::new(0),
                    reserved: AtomicBool::new(false),
                }),
                GFP_KERNEL,
            )
        }

        /// Runs `f` on the state under the lock, then publishes its numbers.
        fn with<R>(&self, f: impl FnOnce(&mut ClaimState) -> R) -> R {
            let mut st = self.state.lock();
            let r = f(&mut st);
            self.holders.store(st.holders(), Ordering::Relaxed);
            self.reserved.store(st.reserved(), Ordering::Relaxed);
            r
        }
    }

    /// At most one "counters busy" line per this many ns: any user can
    /// retry LOAD in a loop.
    const BUSY_WARN_INTERVAL_NS: u64 = 10_000_000_000;

    impl Pmu {
        /// Takes one claim on the hardware for a hardware context's
        /// attachment (`token`), before LOAD publishes it: after the
        /// permission check. A LOAD refused after this (the context's state,
        /// the registry) gives the claim back when its attachment is
        /// dropped. No-op for the soft model.
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
        /// counters. Process context, no spinlock held: it may sleep on the
        /// claim's mutex while another LOAD reserves or the last claim's
        /// give-back runs.
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
            if !self.claims.with(|st| st.take(reserve)) {
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
        /// then releases the counters to perf_events, all under the claim's
        /// lock (a new LOAD waits for it). Process context (IPIs every CPU
        /// and waits).
        pub(crate) fn hw_unclaim(&self, token: &HwClaim) {
            if self.hw.is_none() || !token.0.swap(false, Ordering::Relaxed) {
                return;
            }
            self.claims.with(|st| {
                if st.put() {
                    self.give_back(st);
                }
            });
        }

        /// After the last claim went, under the claim's lock: every CPU's
        /// PMCs off and LVTPC back, then the counters back to perf_events.
        fn give_back(&self, st: &mut ClaimState) {
            // The copy the IPIs check: no holder (nobody can add one while
            // we hold the lock).
            self.claims.holders.store(st.holders(), Ordering::Relaxed);
            // Through `globals()`: the IPI reaches the `Pmu` the same way the
            // interrupt entries do (the closure must be `Sync`).
            glue::on_each_cpu(&|| crate::globals().pmu.give_back_here());
            self.release_counters(st);
        }

        /// [`Pmu::give_back`] on this CPU (an IPI: interrupts off).
        fn give_back_here(&self) {
            if self.claims.holders.load(Ordering::Relaxed) != 0 {
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

        /// Releases the counters if they are reserved and no claim holds
        /// them (claim lock held).
        fn release_counters(&self, st: &mut ClaimState) {
            let Some(m) = &self.hw else {
                return;
            };
            st.release_if_unused(|| {
                for (ctr, evtsel) in m.reservations() {
                    glue::release_counter(ctr, evtsel);
                }
            });
        }

        /// Module unload, after every context is gone (each attachment gave
        /// its claim back): a no-op unless a claim was leaked, in which case
        /// the PMCs are left disabled and LVTPC and the counters given back
        /// anyway.
        pub(crate) fn quiesce_all(&self) {
            if self.hw.is_none() || !self.claims.reserved.load(Ordering::Relaxed) {
                return;
            }
            self.claims.with(|st| {
                pr_err!(
                    "{} hardware claim(s) left at unload (a bug): giving the counters back\n",
                    st.holders()
                );
                while st.holders() != 0 {
                    st.put();
                }
                self.give_back(st);
            });
        }

        /// Releases the counters to perf_events if they are reserved and no
        /// claim holds them (module unload, after [`Pmu::quiesce_all`] and
        /// the vectors' teardown).
        pub(crate) fn unclaim(&self) {
            self.claims.with(|st| self.release_counters(st));
        }

        /// Live hardware contexts holding the claim (sysfs `hw_claimed`).
        pub(crate) fn hw_claimed(&self) -> u32 {
            self.claims.holders.load(Ordering::Relaxed)
        }

        /// General-purpose counters the module holds reserved (sysfs
        /// `hw_reserved_counters`).
        pub(crate) fn reserved_counters(&self) -> u32 {
            match &self.hw {
                Some(m) if self.claims.reserved.load(Ordering::Relaxed) => {
                    m.reservations().count() as u32
                }
                _ => 0,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI32, Ordering};
    use std::sync::{Arc, Mutex};

    #[test]
    fn first_reserves_last_releases() {
        let mut w = ClaimState::new();
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
        let mut w = ClaimState::new();
        assert!(!w.take(|| false));
        assert_eq!((w.holders(), w.reserved()), (0, false));
        assert!(!w.put(), "a put without a holder");
        assert!(!w.release_if_unused(|| panic!("nothing to release")));
        assert!(w.take(|| true));
        assert_eq!(w.holders(), 1);
    }

    #[test]
    fn no_release_under_a_holder() {
        let mut w = ClaimState::new();
        assert!(w.take(|| true));
        assert!(!w.release_if_unused(|| panic!("released under a holder")));
        assert!(w.put());
        assert!(w.release_if_unused(|| {}));
    }

    #[test]
    fn full_count_refused() {
        let mut w = ClaimState {
            holders: MAX_HOLDERS,
            reserved: true,
        };
        assert!(!w.take(|| true));
        assert_eq!(w.holders(), MAX_HOLDERS);
    }

    /// Threads take, put and release at random under one mutex, as the
    /// kernel half does: the counters are reserved at most once at a time,
    /// exactly while someone holds them, and everything is free at the end.
    #[test]
    fn threads_never_double_reserve_or_release_under_a_holder() {
        let w = Arc::new(Mutex::new(ClaimState::new()));
        // The "hardware": +1 while reserved.
        let hw = Arc::new(AtomicI32::new(0));
        let threads: Vec<_> = (0..8u64)
            .map(|t| {
                let (w, hw) = (w.clone(), hw.clone());
                std::thread::spawn(move || {
                    let mut x = t.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                    for _ in 0..20_000 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let fail = x % 17 == 0;
                        let took = w.lock().unwrap().take(|| {
                            if fail {
                                return false;
                            }
                            assert_eq!(hw.fetch_add(1, Ordering::SeqCst), 0, "reserved twice");
                            true
                        });
                        if !took {
                            continue;
                        }
                        assert_eq!(hw.load(Ordering::SeqCst), 1, "a holder without counters");
                        let mut g = w.lock().unwrap();
                        if g.put() {
                            g.release_if_unused(|| {
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
        let g = w.lock().unwrap();
        assert_eq!(g.holders(), 0);
        assert!(!g.reserved(), "counters left reserved");
        assert_eq!(hw.load(Ordering::SeqCst), 0);
    }
}
