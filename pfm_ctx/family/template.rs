// SPDX-License-Identifier: GPL-2.0

//! Whole programs, the template: what every heir of a LOAD starts from,
//! the root's programming at that LOAD (its registers, and its event sets
//! with each set's image), and what an heir's counts are measured from.

use kernel::prelude::*;

use crate::abi::PFM_MAX_PMDS;
use crate::globals;
use crate::pfm_ctx::sets::{image_of, CtxSets};
use crate::pfm_ctx::Programming;
use crate::pfm_x86::counters::Counters;

/// The root's programming at LOAD, which does not change until the next.
///
/// # Invariants
///
/// No PMD of any image asks for a notification: heirs send no messages
/// (their overflows only reset; the root's tool reads the root's).
pub(in crate::pfm_ctx) struct Template {
    /// The image of the set resident at the copy (set 0 without sets).
    counters: Counters,
    /// The event sets, with the other sets' images.
    sets: Option<KBox<CtxSets>>,
    used_pmds: u32,
    /// The set the LOAD starts in, where every heir starts.
    load_set: u16,
}

impl Template {
    /// The template of a LOAD in set `load_set` of a context programmed as
    /// `p` says.
    pub(in crate::pfm_ctx) fn new(p: Programming, load_set: u16) -> Self {
        let Programming {
            used_pmds,
            mut counters,
            parts,
            ..
        } = p;
        let mut sets = parts.and_then(|mut parts| parts.sets.take());
        let quiet = |c: &mut Counters| {
            for pmd in c.pmds_mut() {
                pmd.clear_notify();
            }
        };
        // INVARIANT: every image's notifications cleared.
        quiet(&mut counters);
        if let Some(s) = sets.as_deref_mut() {
            s.for_each_image_mut(quiet);
        }
        Self {
            counters,
            sets,
            used_pmds,
            load_set,
        }
    }

    /// Bit n: set n exists (set 0 alone without sets).
    pub(super) fn sets_mask(&self) -> u16 {
        self.sets.as_deref().map_or(1, CtxSets::exists_mask)
    }

    /// The set every heir starts in.
    pub(super) fn load_set(&self) -> u16 {
        self.load_set
    }

    pub(super) fn used_pmds(&self) -> u32 {
        self.used_pmds
    }

    /// Set `set`'s PMD values at LOAD: an heir's count in that set is its
    /// value less these (zeros for a set the template does not have).
    pub(super) fn base(&self, set: usize) -> [u64; PFM_MAX_PMDS] {
        let mut base = [0; PFM_MAX_PMDS];
        if let Some(image) = image_of(self.sets.as_deref(), &self.counters, set) {
            for (b, p) in base.iter_mut().zip(image.pmds().iter()) {
                *b = p.value;
            }
        }
        base
    }

    /// A new heir's registers and event sets, copies of the template's.
    /// May sleep.
    pub(super) fn copy_for_heir(&self) -> Result<(Counters, Option<KBox<CtxSets>>)> {
        let mut counters = Counters::new(&globals().pmu)?;
        counters.copy_registers(&self.counters);
        let sets = match self.sets.as_deref() {
            Some(s) => Some(s.copy_boxed()?),
            None => None,
        };
        Ok((counters, sets))
    }
}
