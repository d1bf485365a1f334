// SPDX-License-Identifier: GPL-2.0

//! Whole programs, what a thread counted: one thread's row in one event
//! set as read from its context ([`Snapshot`]), and its counts from the
//! template's values ([`Tally`]), which the family adds up.

use crate::abi::PFM_MAX_PMDS;

/// What a thread counted in one event set: each PMD's count, its times,
/// and the set's (the thread's, without sets).
#[derive(Clone, Copy)]
pub(in crate::pfm_ctx) struct Tally {
    /// Per PMD, what the thread counted (its value less the template's).
    pub(in crate::pfm_ctx) counts: [u64; PFM_MAX_PMDS],
    pub(in crate::pfm_ctx) enabled: u64,
    pub(in crate::pfm_ctx) running: u64,
    /// The set's times (`PFM_VALFL_SET`'s).
    pub(in crate::pfm_ctx) set_enabled: u64,
    pub(in crate::pfm_ctx) set_running: u64,
}

impl Tally {
    pub(super) const ZERO: Self = Self {
        counts: [0; PFM_MAX_PMDS],
        enabled: 0,
        running: 0,
        set_enabled: 0,
        set_running: 0,
    };

    pub(super) fn add(&mut self, other: &Tally) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a = a.wrapping_add(*b);
        }
        self.enabled = self.enabled.wrapping_add(other.enabled);
        self.running = self.running.wrapping_add(other.running);
        self.set_enabled = self.set_enabled.wrapping_add(other.set_enabled);
        self.set_running = self.set_running.wrapping_add(other.set_running);
    }
}

/// One thread's row in one event set, as the context reads it.
pub(in crate::pfm_ctx) struct Snapshot {
    /// Its PMD values in the set.
    pub(in crate::pfm_ctx) values: [u64; PFM_MAX_PMDS],
    /// The thread's times, and the set's.
    pub(in crate::pfm_ctx) enabled: u64,
    pub(in crate::pfm_ctx) running: u64,
    pub(in crate::pfm_ctx) set_enabled: u64,
    pub(in crate::pfm_ctx) set_running: u64,
    /// Its monitoring ended: the thread exited, or an exec revoked it.
    pub(in crate::pfm_ctx) exited: bool,
    pub(in crate::pfm_ctx) revoked: bool,
}

/// What `s` counted from `base`.
pub(super) fn tally_from(s: &Snapshot, base: &[u64; PFM_MAX_PMDS]) -> Tally {
    let mut t = Tally::ZERO;
    for ((c, v), b) in t.counts.iter_mut().zip(s.values.iter()).zip(base.iter()) {
        *c = v.wrapping_sub(*b);
    }
    t.enabled = s.enabled;
    t.running = s.running;
    t.set_enabled = s.set_enabled;
    t.set_running = s.set_running;
    t
}
