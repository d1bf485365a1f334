// SPDX-License-Identifier: GPL-2.0

//! The PMI throttle: a hardware counter can overflow at any instruction,
//! so a context's PMI rate is bounded by arming its counters farther from
//! their wraps while PMIs come too fast. Pure, host-tested.

use super::driver::{HwRegs, MsrBus, Outcome};
use super::model::HwPmu;

/// PMIs a context may take per [`PMI_WINDOW_NS`] before its counters are
/// armed further from their wraps: 4 per millisecond, perf record's default
/// sampling frequency.
pub const PMIS_PER_WINDOW: u32 = 4;
/// The window of [`PMIS_PER_WINDOW`].
pub const PMI_WINDOW_NS: u64 = 1_000_000;
/// The farthest a counter is ever armed for (no armed width exceeds 63).
pub const MAX_ARM_EVENTS: u64 = 1 << 62;

/// Keeps a context's PMI rate bounded: past [`PMIS_PER_WINDOW`] PMIs in a
/// window, the arming distance ([`HwRegs::min_arm`]) grows fourfold; each
/// calm window (half the limit or fewer) halves it back toward
/// [`MIN_ARM_EVENTS`](super::model::MIN_ARM_EVENTS). Only when PMIs come
/// (and the hardware wraps): the values stay exact, several overflows just
/// share a PMI (and a message).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PmiThrottle {
    window_start: u64,
    count: u32,
    min_arm: u64,
}

impl Default for PmiThrottle {
    fn default() -> Self {
        Self::new()
    }
}

impl PmiThrottle {
    /// No PMI seen: the minimum distance.
    pub const fn new() -> Self {
        PmiThrottle {
            window_start: 0,
            count: 0,
            min_arm: super::model::MIN_ARM_EVENTS,
        }
    }

    /// The arming distance to use now.
    pub const fn min_arm(&self) -> u64 {
        self.min_arm
    }

    /// Records a PMI at `now` (ns); returns the arming distance for the
    /// counters it re-arms.
    pub fn pmi(&mut self, now: u64) -> u64 {
        if now.wrapping_sub(self.window_start) >= PMI_WINDOW_NS {
            if self.count <= PMIS_PER_WINDOW / 2 {
                self.min_arm = (self.min_arm / 2).max(super::model::MIN_ARM_EVENTS);
            }
            self.window_start = now;
            self.count = 0;
        }
        self.count += 1;
        if self.count > PMIS_PER_WINDOW {
            self.min_arm = self.min_arm.saturating_mul(4).min(MAX_ARM_EVENTS);
        }
        self.min_arm
    }
}

impl<M: HwPmu> HwRegs<'_, M> {
    /// The overflow interrupt under `throttle`, at `now` (ns): what the
    /// module runs for every interrupt on the vector while the context is
    /// installed. The counters are re-armed at the throttle's distance.
    ///
    /// Only a real PMI (a counter of the context wrapped) counts toward the
    /// rate: the module's own self-IPI that delivers each overflow arrives
    /// on the same vector right after, and counting it too would halve the
    /// documented [`PMIS_PER_WINDOW`]. The distance a PMI sets applies from
    /// the next re-arm (this one's counters are armed before it is known
    /// to be real).
    pub fn pmi_throttled<B: MsrBus>(
        &mut self,
        bus: &mut B,
        started: bool,
        throttle: &mut PmiThrottle,
        now: u64,
    ) -> Outcome {
        self.min_arm = throttle.min_arm();
        let out = self.pmi(bus, started);
        if out.wrapped != 0 {
            throttle.pmi(now);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_bounds_the_pmi_rate_and_recovers() {
        use super::super::model::MIN_ARM_EVENTS;
        let mut t = PmiThrottle::new();
        // 4 per ms: allowed, the distance stays.
        for i in 0..40u64 {
            assert_eq!(t.pmi(i * 250_000), MIN_ARM_EVENTS);
        }
        // A storm (one every 10 us): the distance grows at the 5th of a window.
        let base = 10_000_000;
        for i in 0..5u64 {
            t.pmi(base + i * 10_000);
        }
        assert_eq!(t.min_arm(), MIN_ARM_EVENTS * 4);
        for i in 5..100u64 {
            t.pmi(base + i * 10_000);
        }
        assert!(t.min_arm() > MIN_ARM_EVENTS << 20);
        let high = t.min_arm();
        assert!(high <= MAX_ARM_EVENTS);
        // Calm again (one per 10 ms): halves per window back to the minimum.
        let mut now = base + 100 * 10_000;
        let mut last = high;
        for _ in 0..200 {
            now += 10_000_000;
            let d = t.pmi(now);
            assert!(d <= last);
            last = d;
        }
        assert_eq!(last, MIN_ARM_EVENTS);
    }
}
