// SPDX-License-Identifier: GPL-2.0

//! The soft model, the PMU every machine has: software counters (task
//! clock, context switches, CPU migrations), 64 bits wide whatever width
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
            _ => None,
        }
    }
}

/// The soft model's events, as `PFM_IOC_GET_INFO` lists them.
pub const SOFT_EVENTS: [(&str, u64); 3] = [
    ("task-clock", abi::PFM_SOFT_EV_TASK_CLOCK),
    ("context-switches", abi::PFM_SOFT_EV_CONTEXT_SWITCHES),
    ("cpu-migrations", abi::PFM_SOFT_EV_CPU_MIGRATIONS),
];

/// Bits a soft PMC value must leave zero: everything above the event code.
pub const SOFT_PMC_RSVD_MASK: u64 = !0x3;

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
}

/// Advances every counter by what its PMC selects (`ev_pmds[event]`: the
/// PMDs counting that event); returns the mask of PMDs that overflowed.
pub fn soft_count(ev_pmds: &[u8; 4], pmds: &mut [PmdState], d: &ThreadDeltas) -> u64 {
    soft_count_each(ev_pmds, pmds, d, |_, _, _| {})
}

/// [`soft_count`], telling `overflows(pmd, n, random)` how many times each
/// PMD that overflowed did (event sets switch after a number of overflows;
/// a sampling buffer writes an entry per period) and its period
/// randomisation as it was before the count (`PFM_REGFL_RANDOM`: replayed,
/// it gives each crossing's reset value).
#[inline(always)]
pub fn soft_count_each(
    ev_pmds: &[u8; 4],
    pmds: &mut [PmdState],
    d: &ThreadDeltas,
    mut overflows: impl FnMut(usize, u64, PeriodRandom),
) -> u64 {
    let mut ovfl = 0u64;
    let deltas = [
        (abi::PFM_SOFT_EV_TASK_CLOCK as usize, d.task_clock),
        (abi::PFM_SOFT_EV_CONTEXT_SWITCHES as usize, d.switches),
        (abi::PFM_SOFT_EV_CPU_MIGRATIONS as usize, d.migrations),
    ];
    for (ev, delta) in deltas {
        if delta == 0 {
            continue;
        }
        let mut m = ev_pmds[ev];
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            if let Some(pmd) = pmds.get_mut(i) {
                // The generator before the count: only an overflow
                // draws, and only its entries replay it.
                let random = match pmd.value.checked_add(delta) {
                    Some(_) => PeriodRandom::OFF,
                    None => pmd.random(),
                };
                let n = pmd.count(delta);
                if n != 0 {
                    ovfl |= 1 << i;
                    overflows(i, n, random);
                }
            }
        }
    }
    crate::pfm_counter::reset_linked(pmds, ovfl, false);
    ovfl
}

/// Advances the PMDs that count task-clock (`ev_pmds`) by `ran` ns, as
/// [`soft_count`] would, if none of them crosses 2^64 doing so; otherwise
/// changes nothing and returns `false`, for the caller to take
/// `soft_count`'s path, which raises the overflow and applies its resets.
#[inline(always)]
pub fn count_clock_unless_overflow(ev_pmds: &[u8; 4], pmds: &mut [PmdState], ran: u64) -> bool {
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
            assert_eq!(SoftEvent::from_pmc(code | 4), None);
        }
    }

    #[test]
    fn task_clock_alone_counts_as_soft_count_or_not_at_all() {
        let mut ev_pmds = [0u8; 4];
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
        let mut ev_pmds = [0u8; 4];
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
            let ovfl = soft_count_each(&ev_pmds, &mut pmds, &d, |i, n, r| noted = Some((i, n, r)));
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
        let mut ev_pmds = [0u8; 4];
        ev_pmds[abi::PFM_SOFT_EV_TASK_CLOCK as usize] = 0b0011;
        ev_pmds[abi::PFM_SOFT_EV_CPU_MIGRATIONS as usize] = 0b1000;
        pmds[1].write(u64::MAX - 5);
        let d = ThreadDeltas {
            task_clock: 10,
            switches: 3,
            migrations: 1,
        };
        let ovfl = soft_count(&ev_pmds, &mut pmds, &d);
        assert_eq!(ovfl, 0b0010, "only PMD 1 crossed 2^64");
        assert_eq!((pmds[0].value, pmds[2].value, pmds[3].value), (10, 0, 1));
    }
}
