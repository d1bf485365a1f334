// SPDX-License-Identifier: GPL-2.0

//! Event sets on a context (Documentation/perfmon.rst, "Event sets and
//! multiplexing"): the register image of each set, and the charging of
//! the thread's running time to the sets as they take turns on the
//! counters; the calls (`CREATE_SETS`, `DELETE_SETS`, `GETINFO_SETS`) are
//! in `calls.rs`. The table's rules
//! and arithmetic are `pfm_sets` (host-tested); this file keeps the images
//! and calls it at the context's folds.
//!
//! The active set's image is the context's `counters`, so every path that
//! knows nothing of sets (reads, switches, the overflow interrupt of a
//! one-set context) works on it unchanged; the other sets' images wait
//! here. A context that never asked for sets has no table at all, and one
//! loaded with one set pays a load and a branch per fold.
//!
//! A switch is a swap of images under the lock. The soft model's counters
//! advance only at folds, which charge the time exactly and switch where a
//! timeout falls. A hardware model's are on a PMU while their thread runs:
//! the PMU layer's per-CPU multiplexing timer (`Pmu::mux_arm_here`) fires
//! at the active set's timeout, its owner folds (the active image leaves
//! the PMU, the time is charged, the sets switch) and puts the next image
//! on with the switch-in sequence; lazy restore still applies within a set
//! (installing another image bumps the PMU's register generation). An
//! overflow switch comes from the PMI's fold, by the same path.

use core::mem::MaybeUninit;

use kernel::prelude::*;

use super::parts::Parts;
use super::CtxInner;
use crate::abi;
use crate::globals;
use crate::pfm_sets::{Boundary, SetDesc, SetError, SetTable, PFM_MAX_SETS};
use crate::pfm_x86::counters::Counters;
use crate::pfm_x86::soft::SOFT_COUNTERS;
use crate::pfm_x86::ThreadDeltas;

mod calls;
mod copy;

/// A context's sets beyond what every context has.
///
/// # Invariants
///
/// `images[i]` is `Some` exactly for the sets of `table` that exist and are
/// not `resident`; the resident set's image is the context's `counters`.
pub(crate) struct CtxSets {
    /// The sets' configuration and bookkeeping.
    table: SetTable,
    /// The images of the sets that are not resident, by set id.
    images: [Option<KBox<Counters>>; PFM_MAX_SETS],
    /// The set whose image is the context's `counters`.
    resident: usize,
    /// Per set, PMDs that overflowed and that the overflow interrupt has
    /// not handled yet (the context's `pending_ovfl` is their union).
    pending: [u64; PFM_MAX_SETS],
    /// A hardware model's 64-bit overflows per PMD of the resident set
    /// since the last charge: they count toward an overflow switch at the
    /// next charge, after the time run before them is the old set's
    /// (`u32`, saturating: the table stays in `kmalloc-2048`).
    hw_overflows: [u32; abi::PFM_MAX_PMDS],
    /// Bit n: set n notified an overflow since the last RESTART, which
    /// resets only such sets' PMDs (perfmon2's rule).
    notified_sets: u16,
}

// The table stays one `kmalloc-2048` object (without lock debugging, as
// the context's own size check).
#[cfg(not(CONFIG_DEBUG_LOCK_ALLOC))]
const _: () = assert!(core::mem::size_of::<CtxSets>() <= 2048);

/// The context's sets, if it has a table (a function of the field, not of
/// the context: its callers borrow `counters` at the same time).
#[inline(always)]
pub(super) fn sets_of(parts: &Option<KBox<Parts>>) -> Option<&CtxSets> {
    parts.as_deref()?.sets.as_deref()
}

/// [`sets_of`], to change.
#[inline(always)]
pub(super) fn sets_of_mut(parts: &mut Option<KBox<Parts>>) -> Option<&mut CtxSets> {
    parts.as_deref_mut()?.sets.as_deref_mut()
}

/// The image of set `set` of a context whose resident image is `counters`
/// and whose table is `sets`: `counters` if resident (or without a table,
/// set 0).
pub(super) fn image_of<'a>(
    sets: Option<&'a CtxSets>,
    counters: &'a Counters,
    set: usize,
) -> Option<&'a Counters> {
    match sets {
        None => (set == 0).then_some(counters),
        Some(s) if s.resident == set => Some(counters),
        Some(s) => s.images.get(set)?.as_deref(),
    }
}

/// Maps a set table refusal to its errno.
fn set_err(e: SetError) -> Error {
    match e {
        SetError::Invalid | SetError::NoSet => EINVAL,
        SetError::Loaded => crate::ebadfd(),
    }
}

/// Segments of one charge: a set and its share of the running time.
/// Whole rounds are charged in one step, so a charge has at most twice
/// as many segments as sets (`SetTable::charge`), plus one. Not zeroed
/// first: a charge has one or two, on every fold of a multiplexed context.
///
/// # Invariants
///
/// The first `n` entries of `seg` are initialised.
struct Segments {
    seg: [MaybeUninit<(u8, u64)>; SEGMENTS],
    n: usize,
}

/// The most segments of one charge.
const SEGMENTS: usize = 2 * PFM_MAX_SETS + 1;

impl Segments {
    fn new() -> Self {
        // INVARIANT: no entry is initialised, and `n` is 0.
        Self {
            seg: [const { MaybeUninit::uninit() }; SEGMENTS],
            n: 0,
        }
    }

    fn push(&mut self, set: usize, ns: u64) {
        if let Some(slot) = self.seg.get_mut(self.n) {
            slot.write((set as u8, ns));
            // INVARIANT: entry `n` was just initialised.
            self.n += 1;
        } else if let Some(last) = self.seg.last_mut() {
            // Cannot happen (bounded above); never drop time.
            // SAFETY: `n` is `SEGMENTS`: every entry is initialised.
            let last = unsafe { last.assume_init_mut() };
            last.1 = last.1.saturating_add(ns);
        }
    }

    /// Segment `k`, if there is one.
    fn get(&self, k: usize) -> Option<(u8, u64)> {
        let slot = self.seg.get(k).filter(|_| k < self.n)?;
        // SAFETY: Entries below `n` are initialised (type invariant).
        Some(unsafe { slot.assume_init() })
    }
}

impl CtxSets {
    /// Whether the sets take turns (more than one at LOAD): the table's
    /// O(1) flag.
    #[inline(always)]
    pub(super) fn multiplexed(&self) -> bool {
        self.table.multiplexed()
    }

    /// The table of a context whose registers so far are all set 0's.
    pub(super) fn new_boxed() -> Result<KBox<Self>> {
        Ok(KBox::new(Self::new(), GFP_KERNEL_ACCOUNT)?)
    }

    fn new() -> Self {
        Self {
            table: SetTable::new(globals().pmu.impl_mask()),
            images: [const { None }; PFM_MAX_SETS],
            resident: 0,
            pending: [0; PFM_MAX_SETS],
            hw_overflows: [0; abi::PFM_MAX_PMDS],
            notified_sets: 0,
        }
    }

    /// Records set 0's registers written before the table existed.
    fn seed_set0(&mut self, pmcs: u64, pmds: u64) {
        for (mask, pmd) in [(pmcs, false), (pmds, true)] {
            let mut m = mask;
            while m != 0 {
                let reg = m.trailing_zeros() as usize;
                m &= m - 1;
                let _ = self.table.use_reg(0, pmd, reg);
            }
        }
    }

    /// `CREATE_SETS` on this table, all or nothing; each new set that is
    /// not resident takes an image of `fresh`.
    fn create(
        &mut self,
        descs: &mut [SetDesc],
        fresh: &mut [Option<KBox<Counters>>; PFM_MAX_SETS],
    ) -> Result<(), (usize, SetError)> {
        self.table.create(descs)?;
        for (d, image) in descs.iter().zip(fresh.iter_mut()) {
            let id = d.id as usize;
            if id != self.resident {
                if let Some(slot) = self.images.get_mut(id) {
                    if slot.is_none() {
                        *slot = image.take();
                    }
                }
            }
        }
        Ok(())
    }

    /// A hardware model's `n` 64-bit overflows of PMD `pmd` of the
    /// resident set, found by a fold: they count toward an overflow switch
    /// at the next charge (the soft model's count in `advance_set`).
    pub(super) fn note_hw_overflows(&mut self, pmd: usize, n: u64) {
        if !self.table.multiplexed() {
            return;
        }
        if let Some(acc) = self.hw_overflows.get_mut(pmd) {
            *acc = acc.saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
        }
    }
}

impl CtxInner {
    /// Whether the context's time is charged to several sets.
    #[inline(always)]
    pub(super) fn multiplexed(&self) -> bool {
        matches!(sets_of(&self.parts), Some(s) if s.multiplexed())
    }

    /// The set whose image is `counters` (0 without a table).
    #[inline]
    pub(super) fn resident_set(&self) -> usize {
        sets_of(&self.parts).map_or(0, |s| s.resident)
    }

    /// Whether the context has a set table (once `CREATE_SETS` made one).
    pub(super) fn has_table(&self) -> bool {
        sets_of(&self.parts).is_some()
    }

    /// The image of set `set` (which exists): `counters` if resident.
    pub(super) fn image(&self, set: usize) -> Option<&Counters> {
        image_of(sets_of(&self.parts), &self.counters, set)
    }

    /// [`CtxInner::image`], to change.
    pub(super) fn image_mut(&mut self, set: usize) -> Option<&mut Counters> {
        match sets_of_mut(&mut self.parts) {
            None => (set == 0).then_some(&mut self.counters),
            Some(s) if s.resident == set => Some(&mut self.counters),
            Some(s) => s.images.get_mut(set)?.as_deref_mut(),
        }
    }

    /// Bit n: set n exists (set 0 alone without a table).
    pub(super) fn sets_mask(&self) -> u16 {
        sets_of(&self.parts).map_or(1, |s| s.table.exists_mask())
    }

    /// Whether set `reg_set` exists.
    pub(super) fn set_exists(&self, reg_set: u16) -> bool {
        match sets_of(&self.parts) {
            None => reg_set == 0,
            Some(s) => s.table.set_index(reg_set).is_ok(),
        }
    }

    /// Records a register write in set `reg_set` (which exists).
    pub(super) fn note_reg(&mut self, reg_set: u16, pmd: bool, reg: usize) {
        if let Some(s) = sets_of_mut(&mut self.parts) {
            let _ = s.table.use_reg(reg_set, pmd, reg);
        }
    }

    /// Makes set `set`'s image the context's `counters` (a hardware
    /// model's leave the PMU first, if they are on it).
    fn make_resident(&mut self, set: usize) {
        if sets_of(&self.parts).map_or(true, |s| s.resident == set) {
            return;
        }
        let ovfl = self.counters.uninstall_here(&globals().pmu);
        self.overflowed(ovfl);
        let Some(s) = sets_of_mut(&mut self.parts) else {
            return;
        };
        let Some(mut image) = s.images.get_mut(set).and_then(Option::take) else {
            return;
        };
        core::mem::swap(&mut *image, &mut self.counters);
        // The PMI throttle is the context's, not the set's.
        self.counters.carry_throttle(&image);
        let old = core::mem::replace(&mut s.resident, set);
        if let Some(slot) = s.images.get_mut(old) {
            *slot = Some(image);
        }
    }

    /// Whether a LOAD may start in set `load_set`; changes nothing.
    pub(super) fn check_load_sets(&self, load_set: u16) -> Result {
        match sets_of(&self.parts) {
            None if load_set == 0 => Ok(()),
            None => Err(EINVAL),
            Some(s) => s.table.check_load(load_set).map_err(set_err),
        }
    }

    /// LOAD, once [`CtxInner::check_load_sets`] allowed it: monitoring
    /// starts in set `load_set`, with nothing of an earlier monitoring
    /// pending (overflows not yet delivered, hardware overflow tallies).
    pub(super) fn load_sets(&mut self, load_set: u16) {
        self.for_each_image(|c| {
            c.take_tally();
        });
        let Some(s) = sets_of_mut(&mut self.parts) else {
            return;
        };
        // Checked by the caller: cannot fail.
        let _ = s.table.load(load_set);
        s.pending = [0; PFM_MAX_SETS];
        s.hw_overflows = [0; abi::PFM_MAX_PMDS];
        s.notified_sets = 0;
        self.make_resident(load_set as usize);
    }

    /// Forgets the overflows pending in every set (the context's
    /// `pending_ovfl` was taken without delivering them).
    pub(super) fn drop_pending_sets(&mut self) {
        if let Some(s) = sets_of_mut(&mut self.parts) {
            s.pending = [0; PFM_MAX_SETS];
        }
    }

    /// The monitoring ended (UNLOAD, the thread's exit, a revoke): the
    /// sets may change again; their bookkeeping stays readable.
    pub(super) fn unload_sets(&mut self) {
        if let Some(s) = sets_of_mut(&mut self.parts) {
            s.table.unload();
        }
    }

    /// Applies `d` to a multiplexed context: the running time charged to
    /// the sets in turn (each set's image advanced by its exact share), the
    /// events at a point (a switch-out, a migration) to the set active
    /// afterwards, and the overflow switches.
    #[cold]
    pub(super) fn advance_sets(&mut self, d: &ThreadDeltas) {
        let mut segs = Segments::new();
        // The soft model's counters advance by the time charged: a delta
        // that crosses a timeout is cut there. A hardware model's counted
        // the whole delta with the set that was on the PMU (its timer
        // fires a little after the timeout): the switch comes after it.
        let boundary = match self.counters.read_only_where_running() {
            true => Boundary::WholeDelta,
            false => Boundary::Split,
        };
        if let Some(s) = sets_of_mut(&mut self.parts) {
            let from = s.table.active();
            s.table
                .charge(d.task_clock, boundary, |set, ns| segs.push(set, ns));
            // A hardware model's overflows since the last charge, in the
            // set that was on the PMU: after its time.
            let tally = core::mem::take(&mut s.hw_overflows);
            if tally.iter().any(|&c| c != 0) {
                let counts: [u64; abi::PFM_MAX_PMDS] =
                    core::array::from_fn(|i| u64::from(tally[i]));
                let _ = s.table.overflowed(from, &counts);
            }
        }
        for k in 0..segs.n {
            let Some((set, ns)) = segs.get(k) else {
                break;
            };
            self.advance_set(
                usize::from(set),
                &ThreadDeltas {
                    task_clock: ns,
                    ..ThreadDeltas::default()
                },
            );
        }
        let points = ThreadDeltas {
            task_clock: 0,
            ..*d
        };
        if points != ThreadDeltas::default() {
            let active = sets_of(&self.parts).map_or(0, |s| s.table.active());
            self.advance_set(active, &points);
        }
        let active = sets_of(&self.parts).map_or(0, |s| s.table.active());
        self.make_resident(active);
    }

    /// Advances set `set`'s image by `d`, records its overflows and
    /// switches on them if it is the active set and asks to.
    fn advance_set(&mut self, set: usize, d: &ThreadDeltas) {
        self.make_resident(set);
        // The soft model's PMDs only: a hardware model's advance counts
        // nothing (its overflows come through `sets_overflowed`).
        let mut counts = [0u64; SOFT_COUNTERS];
        // A sampling buffer takes an entry per period crossed, in this set.
        let smpl = self.parts.as_deref().and_then(|p| p.smpl.as_deref());
        let ovfl = self.counters.advance_each::<true>(d, |pmd, n, random| {
            if let Some(c) = counts.get_mut(pmd) {
                *c = n;
            }
            if let Some(s) = smpl {
                s.note_overflows(pmd, n, random);
            }
        });
        if ovfl == 0 {
            return;
        }
        if let Some(s) = sets_of_mut(&mut self.parts) {
            let _ = s.table.overflowed(set, &counts);
        }
        // Pending in set `set`, the resident one (`sets_overflowed`).
        self.overflowed(ovfl);
    }

    /// Overflows `ovfl` of the resident set's PMDs of a multiplexed
    /// context (every model's go through `overflowed`): pending in that
    /// set, for the overflow interrupt. A hardware model's numbers of them
    /// came through [`CtxSets::note_hw_overflows`].
    #[cold]
    pub(super) fn sets_overflowed(&mut self, ovfl: u64) {
        if let Some(s) = sets_of_mut(&mut self.parts) {
            if let Some(p) = s.pending.get_mut(s.resident) {
                *p |= ovfl;
            }
        }
    }

    /// Whether a hardware model's overflows wait for a charge (that may
    /// switch sets).
    pub(super) fn hw_overflows_waiting(&self) -> bool {
        sets_of(&self.parts).is_some_and(|s| s.hw_overflows.iter().any(|&c| c != 0))
    }

    /// `sync_hw` for a hardware model's context with event sets: the
    /// active set's registers go on the PMU (an overflow or the timer may
    /// have switched sets), and when they go on, this CPU's multiplexing
    /// timer is armed for the active set's time left. That is exact then:
    /// every install follows a fold (the thread's switch-out, a live
    /// operation's, the timer's), which charged the time run before it.
    #[cold]
    pub(super) fn sync_hw_sets(&mut self) {
        let pmu = &globals().pmu;
        if let Some(active) = sets_of(&self.parts).map(|s| s.table.active()) {
            self.make_resident(active);
        }
        let was_on = self.counters.on_pmu_here();
        let (counting, on_cpu, owner) = (self.counting(), self.on_cpu, self.owner_token());
        let ovfl = self.counters.sync_here(pmu, counting, on_cpu, owner);
        self.overflowed(ovfl);
        if was_on || !self.counters.on_pmu_here() {
            return;
        }
        // The timer fires for whoever owns this PMU then, who checks its
        // own time: one left armed for a context gone from it is harmless.
        if let Some(ns) = sets_of(&self.parts).and_then(|s| s.table.timer_ns()) {
            pmu.mux_arm_here(ns);
        }
    }

    /// The thread leaves its CPU: the multiplexing timer armed for it
    /// there is of no use any more.
    #[cold]
    pub(super) fn sets_off_cpu(&mut self) {
        if self.multiplexed() && self.counters.read_only_where_running() {
            globals().pmu.mux_disarm_here();
        }
    }

    /// The overflow interrupt's share-out of `ovfl` (the union of every
    /// set's pending overflows): per set, its pending PMDs; `ovfl` as the
    /// resident set's for a context that counts in one set.
    pub(super) fn take_pending(&mut self, ovfl: u64) -> [u64; PFM_MAX_SETS] {
        let mut per_set = [0u64; PFM_MAX_SETS];
        match sets_of_mut(&mut self.parts) {
            Some(s) if s.table.multiplexed() => per_set = core::mem::take(&mut s.pending),
            // Loaded with one set: the resident one counted.
            Some(s) => {
                if let Some(p) = per_set.get_mut(s.resident) {
                    *p = ovfl;
                }
            }
            None => per_set[0] = ovfl,
        }
        per_set
    }

    /// Set `set` notified an overflow (the overflow interrupt sent, or
    /// would have sent, its message): the next RESTART resets it.
    pub(super) fn note_notified_set(&mut self, set: usize) {
        if let Some(s) = sets_of_mut(&mut self.parts) {
            s.notified_sets |= 1 << (set & (PFM_MAX_SETS - 1));
        }
    }

    /// RESTART's long reset (`reset(image)`) of the sets that notified an
    /// overflow since the last RESTART, as perfmon2 resets only the sets
    /// with pending overflows; set 0 without a table.
    pub(super) fn reset_notified_sets(&mut self, mut reset: impl FnMut(&mut Counters)) {
        let sets = match sets_of_mut(&mut self.parts) {
            Some(s) => core::mem::take(&mut s.notified_sets),
            None => 1,
        };
        for set in (0..PFM_MAX_SETS).filter(|i| sets & (1 << i) != 0) {
            if let Some(image) = self.image_mut(set) {
                reset(image);
            }
        }
    }

    /// Whether a PMC of any set's image counts in kernel mode.
    pub(super) fn counts_kernel(&mut self) -> bool {
        let pmu = &globals().pmu;
        let mut kernel = false;
        self.for_each_image(|c| kernel |= c.counts_kernel(pmu));
        kernel
    }

    /// Applies `f` to every set's image.
    pub(super) fn for_each_image(&mut self, mut f: impl FnMut(&mut Counters)) {
        f(&mut self.counters);
        if let Some(s) = sets_of_mut(&mut self.parts) {
            for image in s.images.iter_mut().flatten() {
                f(image);
            }
        }
    }
}

impl CtxSets {
    /// Bit n: set n exists.
    pub(super) fn exists_mask(&self) -> u16 {
        self.table.exists_mask()
    }
}
