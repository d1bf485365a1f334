// SPDX-License-Identifier: GPL-2.0

//! The soft model, the PMU every machine has: software counters (task
//! clock, context switches, CPU migrations, page faults), 64 bits wide whatever width
//! the model reports (`soft_width`), virtualized by the same save/restore path as hardware counters. Nothing
//! here is x86: the events are the scheduler's.
//!
//! Pure logic: `core` only (host-tested).

use crate::abi;
use crate::pfm_counter::PmdState;
use crate::pfm_random::PeriodRandom;

/// Counters of the soft model.
pub const SOFT_COUNTERS: usize = 4;

/// A soft PMU event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SoftEvent {
    /// The counter is off.
    None,
    /// Nanoseconds the thread ran.
    TaskClock,
    /// Switch-outs of the thread.
    ContextSwitches,
    /// Switch-ins on another CPU than the previous one.
    CpuMigrations,
    /// Page faults, minor and major.
    PageFaults,
    /// Minor page faults.
    MinorFaults,
    /// Major page faults.
    MajorFaults,
}

impl SoftEvent {
    /// Decodes a PMC value; `None` if any bit outside the event code is set
    /// or the code is unknown.
    pub const fn from_pmc(value: u64) -> Option<Self> {
        match value {
            abi::PFM_SOFT_EV_NONE => Some(Self::None),
            abi::PFM_SOFT_EV_TASK_CLOCK => Some(Self::TaskClock),
            abi::PFM_SOFT_EV_CONTEXT_SWITCHES => Some(Self::ContextSwitches),
            abi::PFM_SOFT_EV_CPU_MIGRATIONS => Some(Self::CpuMigrations),
            abi::PFM_SOFT_EV_PAGE_FAULTS => Some(Self::PageFaults),
            abi::PFM_SOFT_EV_MINOR_FAULTS => Some(Self::MinorFaults),
            abi::PFM_SOFT_EV_MAJOR_FAULTS => Some(Self::MajorFaults),
            _ => None,
        }
    }
}

/// The soft model's events, as `PFM_IOC_GET_INFO` lists them.
pub const SOFT_EVENTS: [(&str, u64); 6] = [
    ("task-clock", abi::PFM_SOFT_EV_TASK_CLOCK),
    ("context-switches", abi::PFM_SOFT_EV_CONTEXT_SWITCHES),
    ("cpu-migrations", abi::PFM_SOFT_EV_CPU_MIGRATIONS),
    ("page-faults", abi::PFM_SOFT_EV_PAGE_FAULTS),
    ("minor-faults", abi::PFM_SOFT_EV_MINOR_FAULTS),
    ("major-faults", abi::PFM_SOFT_EV_MAJOR_FAULTS),
];

/// Bits a soft PMC value must leave zero: everything above the event code
/// (code 7 is not an event: refused as unknown).
pub const SOFT_PMC_RSVD_MASK: u64 = !0x7;

/// Event codes a PMC can select: `ev_pmds` has one mask per code.
pub const SOFT_EVENT_CODES: usize = 8;

/// The event codes of the fault events, which the scheduler does not
/// account: their counts come from the thread's own fault counters, read
/// at a fold only by a context that counts them.
pub const SOFT_FAULT_EVENTS: core::ops::Range<usize> =
    abi::PFM_SOFT_EV_PAGE_FAULTS as usize..abi::PFM_SOFT_EV_MAJOR_FAULTS as usize + 1;

/// What a thread did since its counters were last advanced, as the
/// scheduler accounts it (the soft model counts these; a hardware PMU
/// counts by itself).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadDeltas {
    /// Nanoseconds on a CPU.
    pub task_clock: u64,
    /// Switch-outs.
    pub switches: u64,
    /// Migrations.
    pub migrations: u64,
    /// Minor page faults (read only where a PMD counts faults).
    pub minor_faults: u64,
    /// Major page faults (likewise).
    pub major_faults: u64,
}

/// Advances every counter by what its PMC selects (`ev_pmds[event]`: the
/// PMDs counting that event); returns the mask of PMDs that overflowed.
/// The scheduler's events only: a context that counts faults has parts,
/// and its folds take [`soft_count_each`] (a plain switch tests nothing
/// for faults).
pub fn soft_count(
    ev_pmds: &[u8; SOFT_EVENT_CODES],
    pmds: &mut [PmdState],
    d: &ThreadDeltas,
) -> u64 {
    let ovfl = count_events(ev_pmds, pmds, scheduler_deltas(d), |_, _, _| {});
    crate::pfm_counter::reset_linked(pmds, ovfl, false);
    ovfl
}

/// [`soft_count`], with the fault events too if `FAULTS` (a context that
/// counts none does not look), telling `overflows(pmd, n,
/// random)` how many times each PMD that overflowed did (event sets switch
/// after a number of overflows; a sampling buffer writes an entry per
/// period) and its period randomisation as it was before the count
/// (`PFM_REGFL_RANDOM`: replayed, it gives each crossing's reset value).
#[inline(always)]
pub fn soft_count_each<const FAULTS: bool>(
    ev_pmds: &[u8; SOFT_EVENT_CODES],
    pmds: &mut [PmdState],
    d: &ThreadDeltas,
    mut overflows: impl FnMut(usize, u64, PeriodRandom),
) -> u64 {
    let mut ovfl = count_events(ev_pmds, pmds, scheduler_deltas(d), &mut overflows);
    if FAULTS && d.minor_faults | d.major_faults != 0 {
        let faults = [
            (
                abi::PFM_SOFT_EV_PAGE_FAULTS as usize,
                d.minor_faults.wrapping_add(d.major_faults),
            ),
            (abi::PFM_SOFT_EV_MINOR_FAULTS as usize, d.minor_faults),
            (abi::PFM_SOFT_EV_MAJOR_FAULTS as usize, d.major_faults),
        ];
        ovfl |= count_events(ev_pmds, pmds, faults, &mut overflows);
    }
    crate::pfm_counter::reset_linked(pmds, ovfl, false);
    ovfl
}

/// The scheduler's events of `d`, by event code.
#[inline(always)]
fn scheduler_deltas(d: &ThreadDeltas) -> [(usize, u64); 3] {
    [
        (abi::PFM_SOFT_EV_TASK_CLOCK as usize, d.task_clock),
        (abi::PFM_SOFT_EV_CONTEXT_SWITCHES as usize, d.switches),
        (abi::PFM_SOFT_EV_CPU_MIGRATIONS as usize, d.migrations),
    ]
}

/// Advances the PMDs of each event code by its delta; the PMDs that
/// overflowed, each told to `overflows` (see [`soft_count_each`]).
#[inline(always)]
fn count_events<const N: usize>(
    ev_pmds: &[u8; SOFT_EVENT_CODES],
    pmds: &mut [PmdState],
    deltas: [(usize, u64); N],
    mut overflows: impl FnMut(usize, u64, PeriodRandom),
) -> u64 {
    let mut ovfl = 0u64;
    for (ev, delta) in deltas {
        if delta == 0 {
            continue;
        }
        let mut m = ev_pmds[ev];
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            if let Some(pmd) = pmds.get_mut(i) {
                // No overflow, the common case (what `count` does first).
                if let Some(v) = pmd.value.checked_add(delta) {
                    pmd.value = v;
                    continue;
                }
                // The generator before the count: only an overflow
                // draws, and only its entries replay it.
                let random = pmd.random();
                let n = pmd.count(delta);
                if n != 0 {
                    ovfl |= 1 << i;
                    overflows(i, n, random);
                }
            }
        }
    }
    ovfl
}

/// Advances the PMDs that count task-clock (`ev_pmds`) by `ran` ns, as
/// [`soft_count`] would, if none of them crosses 2^64 doing so; otherwise
/// changes nothing and returns `false`, for the caller to take
/// `soft_count`'s path, which raises the overflow and applies its resets.
#[inline(always)]
pub fn count_clock_unless_overflow(
    ev_pmds: &[u8; SOFT_EVENT_CODES],
    pmds: &mut [PmdState],
    ran: u64,
) -> bool {
    let clock = ev_pmds[abi::PFM_SOFT_EV_TASK_CLOCK as usize];
    let mut m = clock;
    while m != 0 {
        let i = m.trailing_zeros() as usize;
        m &= m - 1;
        if let Some(p) = pmds.get_mut(i) {
            match p.value.checked_add(ran) {
                Some(v) => p.value = v,
                None => {
                    // Rare: take back what the PMDs below this one got
                    // (each added without overflow, so exactly).
                    let mut done = u32::from(clock) & ((1u32 << i) - 1);
                    while done != 0 {
                        let j = done.trailing_zeros() as usize;
                        done &= done - 1;
                        if let Some(q) = pmds.get_mut(j) {
                            q.value = q.value.wrapping_sub(ran);
                        }
                    }
                    return false;
                }
            }
        }
    }
    true
}

/// Task-clock ns until the first of the PMDs in `clock` (a mask) crosses
/// 2^64, for those whose value is within 2^63 of it (a PMD programmed for
/// overflows: written or reset to -period); `None` if there is none (a
/// PMD counting up from 0 overflows after 584 years).
pub fn next_clock_overflow(pmds: &[PmdState], clock: u64) -> Option<u64> {
    let mut next: Option<u64> = None;
    let mut m = clock;
    while m != 0 {
        let i = m.trailing_zeros() as usize;
        m &= m - 1;
        if let Some(p) = pmds.get(i) {
            let left = p.value.wrapping_neg();
            if p.value != 0 && left <= 1 << 63 {
                next = Some(next.map_or(left, |n| n.min(left)));
            }
        }
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pmc_decoding_refuses_unknown_codes_and_reserved_bits() {
        assert_eq!(
            SoftEvent::from_pmc(abi::PFM_SOFT_EV_NONE),
            Some(SoftEvent::None)
        );
        for (_, code) in SOFT_EVENTS {
            assert!(SoftEvent::from_pmc(code).is_some());
            assert_eq!(code & SOFT_PMC_RSVD_MASK, 0);
            assert_eq!(SoftEvent::from_pmc(code | 8), None);
        }
    }

    #[test]
    fn task_clock_alone_counts_as_soft_count_or_not_at_all() {
        let mut ev_pmds = [0u8; SOFT_EVENT_CODES];
        ev_pmds[abi::PFM_SOFT_EV_TASK_CLOCK as usize] = 0b0101;
        ev_pmds[abi::PFM_SOFT_EV_CONTEXT_SWITCHES as usize] = 0b0010;
        let d = ThreadDeltas {
            task_clock: 1_000,
            ..ThreadDeltas::default()
        };
        let mut a = [PmdState::default(); SOFT_COUNTERS];
        a[2].write(7);
        let mut b = a;
        assert!(count_clock_unless_overflow(&ev_pmds, &mut a, 1_000));
        assert_eq!(soft_count(&ev_pmds, &mut b, &d), 0);
        let values = |p: &[PmdState; SOFT_COUNTERS]| p.map(|p| p.value);
        assert_eq!(values(&a), values(&b));
        assert_eq!(values(&a), [1_000, 0, 1_007, 0]);
        // PMD 2 would cross 2^64: nothing changes, PMD 0 included.
        a[2].write(u64::MAX - 10);
        let before = values(&a);
        assert!(!count_clock_unless_overflow(&ev_pmds, &mut a, 11));
        assert_eq!(values(&a), before);
        assert!(count_clock_unless_overflow(&ev_pmds, &mut a, 10));
        assert_eq!(a[2].value, u64::MAX);
    }

    #[test]
    fn the_next_clock_overflow_is_the_nearest_programmed_pmd() {
        let mut pmds = [PmdState::default(); SOFT_COUNTERS];
        // Counting from 0 (or from a small value): no overflow to time.
        pmds[0].write(0);
        pmds[1].write(12_345);
        assert_eq!(next_clock_overflow(&pmds, 0b0011), None);
        // -period: the period; the nearest of two; only those in the mask.
        pmds[2].write(1_000_000u64.wrapping_neg());
        pmds[3].write(250_000u64.wrapping_neg());
        assert_eq!(next_clock_overflow(&pmds, 0b0111), Some(1_000_000));
        assert_eq!(next_clock_overflow(&pmds, 0b1111), Some(250_000));
        assert_eq!(next_clock_overflow(&pmds, 0b0011), None);
        // One ns left; and the far edge, 2^63 ns, still timed.
        pmds[3].write(u64::MAX);
        assert_eq!(next_clock_overflow(&pmds, 0b1000), Some(1));
        pmds[3].write(1 << 63);
        assert_eq!(next_clock_overflow(&pmds, 0b1000), Some(1 << 63));
        pmds[3].write((1 << 63) - 1);
        assert_eq!(next_clock_overflow(&pmds, 0b1000), None);
        // A PMD index past the slice is ignored.
        assert_eq!(next_clock_overflow(&pmds, 1 << 40), None);
    }

    #[test]
    fn the_clock_timer_sees_each_randomised_period() {
        let (p, mask, seed) = (1_000_000u64, 0xffffu64, 3u64);
        let reset = p.wrapping_neg();
        let mut ev_pmds = [0u8; SOFT_EVENT_CODES];
        ev_pmds[abi::PFM_SOFT_EV_TASK_CLOCK as usize] = 0b0001;
        let mut pmds = [PmdState::default(); SOFT_COUNTERS];
        let random = PeriodRandom::new(seed, mask).unwrap();
        pmds[0].program(reset, reset, reset, abi::PFM_REGFL_RANDOM, 0, random);
        let mut predicted = crate::pfm_random::periods(p, mask, seed).unwrap();
        let mut next = p;
        for k in 0..200 {
            // The timer is armed for the period drawn at the last reset,
            // less what was counted past it (10 ns late, every other time).
            let late = if k % 2 == 1 { 10 } else { 0 };
            assert_eq!(next_clock_overflow(&pmds, 1), Some(next - late), "k = {k}");
            let mut noted = None;
            let d = ThreadDeltas {
                task_clock: next - late + (k % 2 == 0) as u64 * 10,
                ..ThreadDeltas::default()
            };
            let ovfl = soft_count_each::<false>(&ev_pmds, &mut pmds, &d, |i, n, r| {
                noted = Some((i, n, r))
            });
            assert_eq!(ovfl, 1);
            let (i, n, mut before) = noted.unwrap();
            assert_eq!((i, n), (0, 1));
            // The generator before the count, replayed: the reset it drew.
            assert_eq!(before.reset_value(reset), pmds[0].last_reset());
            next = predicted.next().unwrap();
            assert!((p..=p + mask).contains(&next));
            assert_eq!(pmds[0].last_reset(), next.wrapping_neg());
        }
    }

    #[test]
    fn each_event_counts_into_the_pmds_that_select_it() {
        let mut pmds = [PmdState::default(); SOFT_COUNTERS];
        let mut ev_pmds = [0u8; SOFT_EVENT_CODES];
        ev_pmds[abi::PFM_SOFT_EV_TASK_CLOCK as usize] = 0b0011;
        ev_pmds[abi::PFM_SOFT_EV_CPU_MIGRATIONS as usize] = 0b1000;
        pmds[1].write(u64::MAX - 5);
        let d = ThreadDeltas {
            task_clock: 10,
            switches: 3,
            migrations: 1,
            ..ThreadDeltas::default()
        };
        let ovfl = soft_count(&ev_pmds, &mut pmds, &d);
        assert_eq!(ovfl, 0b0010, "only PMD 1 crossed 2^64");
        assert_eq!((pmds[0].value, pmds[2].value, pmds[3].value), (10, 0, 1));
    }

    #[test]
    fn faults_count_minor_major_and_their_sum() {
        let mut pmds = [PmdState::default(); SOFT_COUNTERS];
        let mut ev_pmds = [0u8; SOFT_EVENT_CODES];
        ev_pmds[abi::PFM_SOFT_EV_PAGE_FAULTS as usize] = 0b0001;
        ev_pmds[abi::PFM_SOFT_EV_MINOR_FAULTS as usize] = 0b0010;
        ev_pmds[abi::PFM_SOFT_EV_MAJOR_FAULTS as usize] = 0b0100;
        ev_pmds[abi::PFM_SOFT_EV_TASK_CLOCK as usize] = 0b1000;
        // A period of 5 faults on PMD 0: 7 faults cross it once.
        pmds[0].program(
            5u64.wrapping_neg(),
            5u64.wrapping_neg(),
            0,
            0,
            0,
            PeriodRandom::OFF,
        );
        let d = ThreadDeltas {
            task_clock: 100,
            minor_faults: 6,
            major_faults: 1,
            ..ThreadDeltas::default()
        };
        let mut noted = KVecLike::default();
        let ovfl = soft_count_each::<true>(&ev_pmds, &mut pmds, &d, |i, n, _| noted.push((i, n)));
        assert_eq!(ovfl, 0b0001);
        assert_eq!(noted.items(), &[(0, 1)]);
        assert_eq!(pmds[0].value, 5u64.wrapping_neg() + 2);
        assert_eq!((pmds[1].value, pmds[2].value, pmds[3].value), (6, 1, 100));
        // No fault, no change to the fault PMDs.
        let d = ThreadDeltas {
            task_clock: 1,
            ..ThreadDeltas::default()
        };
        assert_eq!(soft_count(&ev_pmds, &mut pmds, &d), 0);
        assert_eq!((pmds[1].value, pmds[2].value, pmds[3].value), (6, 1, 101));
    }

    /// A tiny list for the callbacks (no allocation in `core`).
    #[derive(Default)]
    struct KVecLike {
        items: [(usize, u64); 8],
        n: usize,
    }

    impl KVecLike {
        fn push(&mut self, v: (usize, u64)) {
            self.items[self.n] = v;
            self.n += 1;
        }
        fn items(&self) -> &[(usize, u64)] {
            &self.items[..self.n]
        }
    }

    #[test]
    fn fault_codes_decode_and_seven_is_refused() {
        assert_eq!(
            SoftEvent::from_pmc(abi::PFM_SOFT_EV_MINOR_FAULTS),
            Some(SoftEvent::MinorFaults)
        );
        assert_eq!(SoftEvent::from_pmc(7), None);
        assert_eq!(
            7 & SOFT_PMC_RSVD_MASK,
            0,
            "7 is refused as unknown, not reserved"
        );
        assert_eq!(SOFT_FAULT_EVENTS, 4..7);
    }
}
