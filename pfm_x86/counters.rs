// SPDX-License-Identifier: GPL-2.0

//! One context's counters on the PMU model the module runs: the soft
//! model's, advanced by the scheduler's accounting, or a hardware model's,
//! which live on a CPU's PMU while their thread runs there. One value with
//! one small interface (write registers, fold, install, uninstall, PMI), so
//! the context never asks which model it has.
//!
//! Every method runs under the owning context's lock (interrupts off).
//! Methods that can find 64-bit overflows return their mask; the context
//! raises them.

use core::sync::atomic::Ordering;

use kernel::prelude::*;

use super::driver::{HwModel, HwRegs, PmiThrottle};
use super::model::Policy;
use super::soft::{soft_count_each, SOFT_EVENT_CODES, SOFT_FAULT_EVENTS};
use super::{count_clock_unless_overflow, soft_count, Pmu, ThreadDeltas, SOFT_COUNTERS};
use crate::abi;
use crate::pfm_counter::PmdState;
use crate::pfm_random::PeriodRandom;
use crate::rust as glue;

/// The soft model's counters, inline (no allocation of their own).
pub(crate) struct SoftCounters {
    /// PMC values: the event each PMC selects (checked: fits a `u8`).
    pmcs: [u8; SOFT_COUNTERS],
    /// Bit n of `ev_pmds[e]`: PMD n counts soft event e (recomputed from
    /// `pmcs` at every PMC write).
    ev_pmds: [u8; SOFT_EVENT_CODES],
    /// PMD state.
    pmds: [PmdState; SOFT_COUNTERS],
}

/// A hardware model's counters.
///
/// # Invariants
///
/// `cpu` is `Some` exactly while the registers are on that CPU's PMU, and
/// then that CPU's PMU names this context's owner (`Pmu::set_owner_here`).
pub(crate) struct HwCounters {
    /// PMC values as validated, one per PMC number of the model.
    pmcs: KVec<u64>,
    /// PMCs written.
    pmc_used: u64,
    /// PMD state, one per PMD number of the model.
    pmds: KVec<PmdState>,
    /// Each PMD's hardware counter value at the last write or read (as
    /// long as `pmds`).
    raw: KVec<u64>,
    /// The PMDs the written PMCs make count.
    used: u64,
    /// The CPU whose PMU holds the counters now, if any.
    cpu: Option<i32>,
    /// The CPU and PMU register generation at which the counters left the
    /// PMU with every register still in place (nothing wrapped or
    /// overflowed at that stop); a switch-in there, if no other context
    /// wrote the PMU since, only restarts counting. Cleared by any register
    /// write.
    resume: Option<(i32, u64)>,
    /// Keeps the PMI rate bounded (see `PmiThrottle`).
    throttle: PmiThrottle,
    /// Each PMD's 64-bit overflows since [`Counters::take_tally`] (event
    /// sets switch after a number of them; one fold can cross several).
    tally: [u64; abi::PFM_MAX_PMDS],
    /// Each PMD's period generator before the first of them (a
    /// sampling buffer's entries draw each period's reset value again).
    random_before: [u64; abi::PFM_MAX_PMDS],
}

impl SoftCounters {
    /// Whether a PMD counts a fault event.
    #[inline(always)]
    fn counts_faults(&self) -> bool {
        self.ev_pmds[SOFT_FAULT_EVENTS].iter().any(|&m| m != 0)
    }
}

/// A context's counters.
pub(crate) enum Counters {
    /// The soft model.
    Soft(SoftCounters),
    /// A hardware model (its tables are sized by the model, so boxed: the
    /// soft model does not pay for them).
    Hw(KBox<HwCounters>),
}

/// A table of `n` copies of `v`, charged to the caller's memory cgroup.
fn table<T: Clone>(n: usize, v: T) -> Result<KVec<T>> {
    let mut t = KVec::with_capacity(n, GFP_KERNEL_ACCOUNT)?;
    for _ in 0..n {
        t.push(v.clone(), GFP_KERNEL_ACCOUNT)?;
    }
    Ok(t)
}

impl Counters {
    /// Cleared counters for `pmu`'s model.
    pub(crate) fn new(pmu: &Pmu) -> Result<Self> {
        let Some(model) = &pmu.hw else {
            return Ok(Self::Soft(SoftCounters {
                pmcs: [0; SOFT_COUNTERS],
                ev_pmds: [0; SOFT_EVENT_CODES],
                pmds: Default::default(),
            }));
        };
        let hw = HwCounters {
            pmcs: table(model.pmc_slots(), 0u64)?,
            pmc_used: 0,
            pmds: table(model.pmd_slots(), PmdState::default())?,
            raw: table(model.pmd_slots(), 0u64)?,
            used: 0,
            cpu: None,
            resume: None,
            throttle: PmiThrottle::new(),
            tally: [0; abi::PFM_MAX_PMDS],
            random_before: [0; abi::PFM_MAX_PMDS],
        };
        Ok(Self::Hw(KBox::new(hw, GFP_KERNEL_ACCOUNT)?))
    }

    /// Whether the values can only be read on the CPU their thread runs
    /// on while it runs (a hardware model's: they are on that CPU's PMU).
    /// The soft model's are exact as of the thread's last switch anywhere.
    pub(crate) fn read_only_where_running(&self) -> bool {
        matches!(self, Self::Hw(_))
    }

    /// The PMDs' state.
    pub(crate) fn pmds(&self) -> &[PmdState] {
        match self {
            Self::Soft(s) => &s.pmds,
            Self::Hw(h) => &h.pmds,
        }
    }

    /// The PMDs that count the thread's time on CPU (the soft model's
    /// task-clock), which a reader of the mapped page may extend itself.
    pub(crate) fn clock_pmds(&self) -> u64 {
        match self {
            Self::Soft(s) => u64::from(s.ev_pmds[abi::PFM_SOFT_EV_TASK_CLOCK as usize]),
            Self::Hw(_) => 0,
        }
    }

    /// The PMDs' state, to change: a hardware model's next switch-in
    /// writes every register again.
    pub(crate) fn pmds_mut(&mut self) -> &mut [PmdState] {
        match self {
            Self::Soft(s) => &mut s.pmds,
            Self::Hw(h) => {
                h.resume = None;
                &mut h.pmds
            }
        }
    }

    /// Writes PMCs `(reg, value)`, values as `Pmu::validate_pmc` returned
    /// them; registers outside the table are ignored.
    pub(crate) fn write_pmcs(&mut self, pmu: &Pmu, pmcs: impl Iterator<Item = (usize, u64)>) {
        match self {
            Self::Soft(s) => {
                for (reg, v) in pmcs {
                    if let (Some(slot), Ok(v)) = (s.pmcs.get_mut(reg), u8::try_from(v)) {
                        *slot = v;
                    }
                }
                let mut ev = [0u8; SOFT_EVENT_CODES];
                for (i, &pmc) in s.pmcs.iter().enumerate() {
                    if let Some(e) = ev.get_mut(usize::from(pmc)) {
                        *e |= 1 << i;
                    }
                }
                // Event 0 counts nothing (an unwritten PMC selects it).
                ev[0] = 0;
                s.ev_pmds = ev;
            }
            Self::Hw(h) => {
                h.resume = None;
                for (reg, v) in pmcs {
                    if let Some(slot) = h.pmcs.get_mut(reg) {
                        *slot = v;
                        h.pmc_used |= 1 << reg;
                    }
                }
                let mut used = 0;
                for (i, &v) in h.pmcs.iter().enumerate() {
                    if h.pmc_used & (1 << i) != 0 {
                        used |= pmu.pmc_pmds(i, v);
                    }
                }
                h.used = used;
            }
        }
    }

    /// Makes these counters' registers (PMC values, PMD state) those of
    /// `from`, of the same model: a new thread's copy of a context's
    /// registers. Where the registers were left is not copied.
    pub(crate) fn copy_registers(&mut self, from: &Counters) {
        match (self, from) {
            (Self::Soft(s), Self::Soft(f)) => {
                s.pmcs = f.pmcs;
                s.ev_pmds = f.ev_pmds;
                s.pmds = f.pmds;
            }
            (Self::Hw(h), Self::Hw(f)) => {
                h.resume = None;
                for (a, b) in h.pmcs.iter_mut().zip(f.pmcs.iter()) {
                    *a = *b;
                }
                for (a, b) in h.pmds.iter_mut().zip(f.pmds.iter()) {
                    *a = *b;
                }
                h.pmc_used = f.pmc_used;
                h.used = f.used;
            }
            // One model per module load: never mixed.
            _ => {}
        }
    }

    /// Takes over `from`'s PMI throttle: the context's PMI rate is one,
    /// whichever set's registers are on the PMU (an event set's image
    /// becoming resident continues the throttle of the one it replaces,
    /// not the state it had when it last left).
    pub(crate) fn carry_throttle(&mut self, from: &Counters) {
        if let (Self::Hw(h), Self::Hw(f)) = (self, from) {
            h.throttle = f.throttle;
        }
    }

    /// Forgets where the registers were left: the next install writes
    /// them all (a new attachment).
    pub(crate) fn forget_placement(&mut self) {
        if let Self::Hw(h) = self {
            h.resume = None;
        }
    }

    /// Whether a PMD counts page faults (the soft model's fault events):
    /// only then are the thread's fault counters read at a fold.
    #[inline(always)]
    pub(crate) fn counts_faults(&self) -> bool {
        match self {
            Self::Soft(s) => s.counts_faults(),
            Self::Hw(_) => false,
        }
    }

    /// The PMDs that count page faults (the soft model's fault events).
    pub(crate) fn fault_pmds(&self) -> u64 {
        match self {
            Self::Soft(s) => s.ev_pmds[SOFT_FAULT_EVENTS]
                .iter()
                .fold(0, |m, &e| m | u64::from(e)),
            Self::Hw(_) => 0,
        }
    }

    /// Advances the soft counters by what the thread did (`d`); a hardware
    /// model counts by itself. Returns the PMDs that overflowed.
    #[inline]
    pub(crate) fn advance(&mut self, d: &ThreadDeltas) -> u64 {
        match self {
            Self::Soft(s) => soft_count(&s.ev_pmds, &mut s.pmds, d),
            Self::Hw(_) => 0,
        }
    }

    /// [`Counters::advance`], telling `overflows(pmd, n, random)` how many
    /// times each PMD that overflowed did, and its period randomisation
    /// before the count (see `soft_count_each`).
    pub(crate) fn advance_each<const FAULTS: bool>(
        &mut self,
        d: &ThreadDeltas,
        overflows: impl FnMut(usize, u64, PeriodRandom),
    ) -> u64 {
        match self {
            Self::Soft(s) => soft_count_each::<FAULTS>(&s.ev_pmds, &mut s.pmds, d, overflows),
            Self::Hw(_) => 0,
        }
    }

    /// Calls `overflows(pmd, n, random)` for each PMD a hardware model's
    /// folds found `n` 64-bit overflows of since the last take, `random`
    /// its period generator before the first (as `advance_each` says),
    /// and forgets them; nothing for the soft model (its counts say
    /// theirs to `advance_each`). No array is copied: a sampling context
    /// asks at every overflow.
    pub(crate) fn drain_tally(&mut self, mut overflows: impl FnMut(usize, u64, PeriodRandom)) {
        if let Self::Hw(h) = self {
            // The fields apart, not through the box.
            let h = &mut **h;
            for (pmd, (n, r)) in h.tally.iter_mut().zip(h.random_before.iter()).enumerate() {
                if *n != 0 {
                    // A state of 0: not randomised.
                    let mask = h.pmds.get(pmd).map_or(0, |p| p.random().mask());
                    let random = match *r {
                        0 => PeriodRandom::OFF,
                        r => PeriodRandom::new(r, mask).unwrap_or(PeriodRandom::OFF),
                    };
                    overflows(pmd, core::mem::take(n), random);
                }
            }
        }
    }

    /// Each PMD's 64-bit overflows found by a hardware model's folds since
    /// the last call (the soft model's are counted by `advance_each`).
    pub(crate) fn take_tally(&mut self) -> [u64; abi::PFM_MAX_PMDS] {
        match self {
            Self::Soft(_) => [0; abi::PFM_MAX_PMDS],
            Self::Hw(h) => core::mem::take(&mut h.tally),
        }
    }

    /// Whether a written PMC counts in kernel mode (a hardware model's OS
    /// bits), which only a loader with CAP_PERFMON may have counted: LOAD
    /// asks again, since the writer (checked at WRITE_PMCS) may not be the
    /// loader (another holder of the file, or a CLONE's source).
    pub(crate) fn counts_kernel(&self, pmu: &Pmu) -> bool {
        let Self::Hw(h) = self else {
            return false;
        };
        let user_only = Policy {
            allow_kernel: false,
        };
        let any = Policy { allow_kernel: true };
        h.pmcs.iter().enumerate().any(|(reg, &v)| {
            reg < 64
                && h.pmc_used & (1u64 << reg) != 0
                && pmu.validate_pmc(reg, v, user_only).is_err()
                && pmu.validate_pmc(reg, v, any).is_ok()
        })
    }

    /// The PMCs written (the soft model's: those selecting an event).
    pub(crate) fn written_pmcs(&self) -> u64 {
        match self {
            Self::Soft(s) => s
                .pmcs
                .iter()
                .enumerate()
                .filter(|(_, &e)| e != 0)
                .fold(0, |m, (i, _)| m | 1 << i),
            Self::Hw(h) => h.pmc_used,
        }
    }

    /// Whether a hardware model's counters are on this CPU's PMU.
    pub(crate) fn on_pmu_here(&self) -> bool {
        matches!(self, Self::Hw(h) if h.cpu == Some(glue::this_cpu()))
    }

    /// Advances the soft model's task-clock PMDs by `ran` ns if none of
    /// them crosses 2^64 doing so (see `count_clock_unless_overflow`);
    /// `false`, with nothing changed, otherwise and for a hardware model.
    #[inline]
    pub(crate) fn advance_clock_unless_overflow(&mut self, ran: u64) -> bool {
        match self {
            Self::Soft(s) => count_clock_unless_overflow(&s.ev_pmds, &mut s.pmds, ran),
            Self::Hw(_) => false,
        }
    }

    /// Keeps a hardware model's counters on this CPU's PMU exactly while
    /// the context counts and its thread runs here (`on_cpu`): installs or
    /// removes them, `owner` naming the context on the PMU. No-op for the
    /// soft model. Returns the PMDs that overflowed.
    #[inline(always)]
    pub(crate) fn sync_here(
        &mut self,
        pmu: &Pmu,
        counting: bool,
        on_cpu: Option<i32>,
        owner: *const (),
    ) -> u64 {
        match self {
            Self::Soft(_) => 0,
            Self::Hw(h) => h.sync_here(pmu, counting, on_cpu, owner),
        }
    }

    /// Takes a hardware model's counters off this CPU's PMU (stopped,
    /// folded into the 64-bit values) if they are there. Returns the PMDs
    /// that overflowed.
    #[inline]
    pub(crate) fn uninstall_here(&mut self, pmu: &Pmu) -> u64 {
        match self {
            Self::Hw(h) if h.cpu == Some(glue::this_cpu()) => h.uninstall(pmu),
            _ => 0,
        }
    }

    /// The hardware PMI on this CPU, whose PMU holds the counters: fold,
    /// re-arm (if `counting`). Returns the PMDs that overflowed.
    #[inline]
    pub(crate) fn pmi_here(&mut self, pmu: &Pmu, counting: bool) -> u64 {
        match self {
            Self::Hw(h) if h.cpu == Some(glue::this_cpu()) => h.pmi(pmu, counting),
            _ => 0,
        }
    }
}

impl HwCounters {
    /// See [`Counters::sync_here`].
    fn sync_here(
        &mut self,
        pmu: &Pmu,
        counting: bool,
        on_cpu: Option<i32>,
        owner: *const (),
    ) -> u64 {
        let cpu = glue::this_cpu();
        let wanted = counting && on_cpu == Some(cpu);
        match self.cpu {
            Some(c) if c == cpu && !wanted => self.uninstall(pmu),
            None if wanted => {
                self.install(pmu, cpu, owner);
                0
            }
            _ => 0,
        }
    }

    /// The registers, as the hardware driver takes them.
    fn regs<'a>(&'a mut self, model: &'a HwModel) -> HwRegs<'a, HwModel> {
        HwRegs {
            model,
            pmcs: &self.pmcs,
            pmc_used: self.pmc_used,
            pmds: &mut self.pmds,
            raw: &mut self.raw,
            used: self.used,
            tally: Some(&mut self.tally),
            random_before: Some(&mut self.random_before),
            min_arm: self.throttle.min_arm(),
        }
    }

    /// Puts the counters on this CPU's PMU, counting.
    fn install(&mut self, pmu: &Pmu, cpu: i32, owner: *const ()) {
        let Some(model) = &pmu.hw else {
            return;
        };
        // The attachment holds a claim: the PMI must reach the vector. Where
        // this CPU has none, LVTPC is perf's NMI; a CPU that came online
        // after the probe may lack counters of the model (their writes
        // would fault). Either way the counters stay off this PMU (the
        // thread is not counted here), and that is counted.
        if !pmu.fits_here() || !crate::globals().intr.own_lvtpc_here() {
            pmu.skipped_installs.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let lazy = self.resume.take() == Some((cpu, pmu.generation_here()));
        let resumed = if lazy {
            self.regs(model).resume(&mut pmu.bus())
        } else {
            None
        };
        let out = match resumed {
            Some(out) => {
                pmu.lazy_restores.fetch_add(1, Ordering::Relaxed);
                out
            }
            None => {
                pmu.full_restores.fetch_add(1, Ordering::Relaxed);
                pmu.bump_generation_here();
                self.regs(model).install(&mut pmu.bus(), true)
            }
        };
        pmu.note(&out);
        // INVARIANT: on this CPU's PMU, which names the owner.
        pmu.set_owner_here(owner);
        self.cpu = Some(cpu);
    }

    /// Takes the counters off this CPU's PMU, where they are.
    fn uninstall(&mut self, pmu: &Pmu) -> u64 {
        let Some(model) = &pmu.hw else {
            return 0;
        };
        let out = self.regs(model).stop(&mut pmu.bus(), false);
        pmu.note(&out);
        // INVARIANT: off the PMU, which names no owner.
        pmu.set_owner_here(core::ptr::null());
        // A counter that wrapped is no longer armed: the next switch-in
        // must write everything again.
        self.resume = (out.wrapped == 0 && out.overflowed == 0 && out.fault.is_none())
            .then(|| (glue::this_cpu(), pmu.generation_here()));
        self.cpu = None;
        out.overflowed
    }

    /// A PMI: fold and re-arm.
    fn pmi(&mut self, pmu: &Pmu, counting: bool) -> u64 {
        let Some(model) = &pmu.hw else {
            return 0;
        };
        let now = glue::now_ns();
        let mut throttle = self.throttle;
        let out = self
            .regs(model)
            .pmi_throttled(&mut pmu.bus(), counting, &mut throttle, now);
        self.throttle = throttle;
        pmu.note(&out);
        out.overflowed
    }
}
