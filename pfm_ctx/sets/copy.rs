// SPDX-License-Identifier: GPL-2.0

//! Copies of a set table: a `CLONE`'s, and a whole program's heirs' from
//! its template. Every image is allocated before the copy (which runs
//! under the source's lock), one per set the source keeps an image of.

use kernel::prelude::*;

use super::CtxSets;
use crate::abi;
use crate::globals;
use crate::pfm_sets::PFM_MAX_SETS;
use crate::pfm_x86::counters::Counters;

impl CtxSets {
    /// The sets whose images are kept here (every set but the resident
    /// one), as a bit mask by set id: what a copy must allocate.
    pub(in crate::pfm_ctx) fn image_mask(&self) -> u16 {
        self.images
            .iter()
            .enumerate()
            .filter(|(_, image)| image.is_some())
            .fold(0, |mask, (id, _)| mask | 1 << id)
    }

    /// A copy of this table (which does not change meanwhile: a whole
    /// program's template), its images allocated. May sleep.
    pub(in crate::pfm_ctx) fn copy_boxed(&self) -> Result<KBox<CtxSets>> {
        let mut fresh: [Option<KBox<Counters>>; PFM_MAX_SETS] = [const { None }; PFM_MAX_SETS];
        let mask = self.image_mask();
        for (id, slot) in fresh.iter_mut().enumerate() {
            if mask & (1 << id) != 0 {
                *slot = Some(KBox::new(
                    Counters::new(&globals().pmu)?,
                    GFP_KERNEL_ACCOUNT,
                )?);
            }
        }
        let mut to = Self::new_boxed()?;
        self.copy_into(&mut to, &mut fresh);
        Ok(to)
    }

    /// Applies `f` to every image kept here (every set's but the resident
    /// one's).
    pub(in crate::pfm_ctx) fn for_each_image_mut(&mut self, mut f: impl FnMut(&mut Counters)) {
        for image in self.images.iter_mut().flatten() {
            f(image);
        }
    }

    /// Makes `to` (a new table) a copy of this one, for a context that is
    /// not loaded: the same sets, bookkeeping and resident set, each image
    /// copied into the box `fresh` holds for its set (one for each bit of
    /// [`CtxSets::image_mask`]). Nothing is pending on either.
    pub(in crate::pfm_ctx) fn copy_into(
        &self,
        to: &mut CtxSets,
        fresh: &mut [Option<KBox<Counters>>; PFM_MAX_SETS],
    ) {
        to.table = self.table.clone();
        to.resident = self.resident;
        to.pending = [0; PFM_MAX_SETS];
        to.hw_overflows = [0; abi::PFM_MAX_PMDS];
        to.notified_sets = 0;
        for ((slot, image), new) in to
            .images
            .iter_mut()
            .zip(self.images.iter())
            .zip(fresh.iter_mut())
        {
            // INVARIANT: `to` gets an image exactly where this table has
            // one (the caller allocated one per set of `image_mask`).
            *slot = match (image, new.take()) {
                (Some(from), Some(mut copy)) => {
                    copy.copy_registers(from);
                    Some(copy)
                }
                _ => None,
            };
        }
    }
}
