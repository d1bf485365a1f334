// SPDX-License-Identifier: GPL-2.0

//! Driving a hardware PMU model: the canonical sequences of `model.rs`
//! (install, start, stop, overflow interrupt) written once, over an
//! [`MsrBus`]. The kernel's bus is `rdmsr`/`wrmsr` (the `_safe` forms); the
//! host tests' buses are the register-file simulators, so the sequences the
//! module runs are the ones the simulators check.
//!
//! Pure logic: `core` only.

use super::amd64::Amd64;
use super::intel_arch::IntelArch;
use super::model::{CpuidRegs, GlobalMsrs, HwPmu, PmcError, Policy, RegDesc};
use crate::abi;
use crate::pfm_counter::PmdState;

pub use super::throttle::{PmiThrottle, MAX_ARM_EVENTS, PMIS_PER_WINDOW, PMI_WINDOW_NS};

/// An MSR access faulted (#GP): the model named a register or value the
/// CPU refuses. Never expected; the kernel side counts and reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsrFault {
    /// The MSR.
    pub msr: u32,
}

/// The MSRs of the CPU the caller runs on.
pub trait MsrBus {
    /// Reads `msr`.
    fn rdmsr(&mut self, msr: u32) -> Result<u64, MsrFault>;
    /// Writes `value` to `msr`.
    fn wrmsr(&mut self, msr: u32, value: u64) -> Result<(), MsrFault>;
}

/// The hardware models, as one type the module can hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HwModel {
    /// Intel architectural perfmon.
    Intel(IntelArch),
    /// AMD64 core performance counters.
    Amd(Amd64),
}

macro_rules! delegate {
    ($self:ident, $m:ident => $e:expr) => {
        match $self {
            HwModel::Intel($m) => $e,
            HwModel::Amd($m) => $e,
        }
    };
}

impl HwPmu for HwModel {
    fn name(&self) -> &'static str {
        delegate!(self, m => m.name())
    }
    fn impl_pmcs(&self) -> u64 {
        delegate!(self, m => m.impl_pmcs())
    }
    fn impl_pmds(&self) -> u64 {
        delegate!(self, m => m.impl_pmds())
    }
    fn pmc_desc(&self, pmc: usize) -> Option<RegDesc> {
        delegate!(self, m => m.pmc_desc(pmc))
    }
    fn pmd_desc(&self, pmd: usize) -> Option<RegDesc> {
        delegate!(self, m => m.pmd_desc(pmd))
    }
    fn validate_pmc(&self, pmc: usize, value: u64, policy: Policy) -> Result<u64, PmcError> {
        delegate!(self, m => m.validate_pmc(pmc, value, policy))
    }
    fn pmc_pmds(&self, pmc: usize, value: u64) -> u64 {
        delegate!(self, m => m.pmc_pmds(pmc, value))
    }
    fn pmc_hw_value(&self, pmc: usize, value: u64, enable: bool) -> u64 {
        delegate!(self, m => m.pmc_hw_value(pmc, value, enable))
    }
    fn global_msrs(&self) -> Option<GlobalMsrs> {
        delegate!(self, m => m.global_msrs())
    }
    fn global_ctrl_value(&self, pmds: u64) -> u64 {
        delegate!(self, m => m.global_ctrl_value(pmds))
    }
    fn status_pmds(&self, status: u64) -> u64 {
        delegate!(self, m => m.status_pmds(status))
    }
    fn ack_value(&self, pmds: u64) -> u64 {
        delegate!(self, m => m.ack_value(pmds))
    }
    fn event(&self, idx: usize) -> Option<(&'static str, u64)> {
        delegate!(self, m => m.event(idx))
    }
}

impl HwModel {
    /// The model CPUID describes, from the raw CPUID leaves and MSR the
    /// kernel side read: `vendor` is leaf 0, `leaf_0xa` Intel's leaf 0xA,
    /// `perf_capabilities` IA32_PERF_CAPABILITIES (0 where CPUID.01H:ECX.PDCM
    /// is clear), `amd_ext1_ecx`/`amd_leaf_0x80000022` AMD's leaves (zero
    /// where the maximum extended leaf is lower), `hypervisor` CPUID.01H:ECX[31].
    pub fn probe(cpuid: &ProbeCpuid) -> Option<HwModel> {
        let v = &cpuid.vendor;
        if vendor_is(v, b"GenuineIntel") && v.eax >= 0xa {
            return IntelArch::probe(cpuid.leaf_0xa, cpuid.perf_capabilities).map(HwModel::Intel);
        }
        if vendor_is(v, b"AuthenticAMD") {
            // The legacy counters have no CPUID bit; under a hypervisor they
            // are often absent: trust them only on bare metal.
            return Amd64::probe(
                cpuid.amd_ext1_ecx,
                cpuid.amd_leaf_0x80000022,
                !cpuid.hypervisor,
            )
            .map(HwModel::Amd);
        }
        None
    }

    /// The model every CPU of `cpus` (each CPU's own probe) can run, as a
    /// thread migrates between them: `None` if one CPU has no PMU the
    /// module drives, or if they cannot share one. Hybrid Intel parts
    /// announce different counters per core type: the model keeps the
    /// counters common to all ([`IntelArch::common`]), so no PMC value,
    /// GLOBAL_CTRL or FIXED_CTR_CTRL it writes names a counter one type
    /// lacks (such a write faults as a whole). AMD CPUs must agree.
    pub fn probe_cpus<'a>(cpus: impl IntoIterator<Item = &'a ProbeCpuid>) -> Option<HwModel> {
        let mut cpus = cpus.into_iter();
        let first = HwModel::probe(cpus.next()?)?;
        cpus.try_fold(first, |m, c| m.common(&HwModel::probe(c)?))
    }

    /// What this model and `other`'s have in common (see
    /// [`HwModel::probe_cpus`]).
    pub fn common(&self, other: &HwModel) -> Option<HwModel> {
        match (self, other) {
            (HwModel::Intel(a), HwModel::Intel(b)) => a.common(b).map(HwModel::Intel),
            (HwModel::Amd(a), HwModel::Amd(b)) if a == b => Some(*self),
            _ => None,
        }
    }

    /// Whether a CPU whose own model is `cpu` has everything this model
    /// uses (a CPU that comes online after the probe).
    pub fn fits(&self, cpu: &HwModel) -> bool {
        self.common(cpu) == Some(*self)
    }

    /// The MSRs the module programs for the general-purpose counters, as
    /// `(counter, event select)` pairs for the NMI reservation allocator
    /// that perf_events also uses (`reserve_perfctr_nmi`/`reserve_evntsel_nmi`).
    /// The allocator maps Intel's IA32_PMCn (not the full-width alias) and
    /// AMD's PERF_CTR/PERF_CTL registers to counter n.
    pub fn reservations(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        (0..abi::PFM_MAX_PMCS).filter_map(move |i| {
            let d = self.pmc_desc(i)?;
            if d.kind != super::model::RegKind::EventSel {
                return None;
            }
            let ctr = match self {
                HwModel::Intel(_) => super::intel_arch::MSR_IA32_PMC0 + i as u32,
                HwModel::Amd(_) => self.pmd_desc(i)?.msr,
            };
            Some((ctr, d.msr))
        })
    }

    /// One more than the highest PMC number (the size of a PMC table).
    pub fn pmc_slots(&self) -> usize {
        64 - self.impl_pmcs().leading_zeros() as usize
    }

    /// One more than the highest PMD number (the size of a PMD table).
    pub fn pmd_slots(&self) -> usize {
        64 - self.impl_pmds().leading_zeros() as usize
    }
}

/// The raw CPUID (and PERF_CAPABILITIES) values [`HwModel::probe`] decodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeCpuid {
    /// Leaf 0 (vendor, maximum leaf).
    pub vendor: CpuidRegs,
    /// Intel leaf 0xA.
    pub leaf_0xa: CpuidRegs,
    /// IA32_PERF_CAPABILITIES, or 0.
    pub perf_capabilities: u64,
    /// AMD leaf 0x80000001 ECX.
    pub amd_ext1_ecx: u32,
    /// AMD leaf 0x80000022.
    pub amd_leaf_0x80000022: CpuidRegs,
    /// CPUID.01H:ECX[31]: running under a hypervisor.
    pub hypervisor: bool,
    /// Intel leaf 0x1A EAX[31:24]: the core type of a hybrid part
    /// ([`CORE_TYPE_ATOM`], [`CORE_TYPE_CORE`]), 0 where the CPU is not
    /// hybrid (CPUID.07H:EDX[15] clear).
    pub core_type: u8,
}

/// Leaf 0x1A's core type of an Intel Atom (E-) core.
pub const CORE_TYPE_ATOM: u8 = 0x20;
/// Leaf 0x1A's core type of an Intel Core (P-) core.
pub const CORE_TYPE_CORE: u8 = 0x40;

/// The `PFM_CORE_TYPE_*` bits of the core types among `cpus` (0 where no
/// CPU reports one: not a hybrid part).
pub fn core_types<'a>(cpus: impl IntoIterator<Item = &'a ProbeCpuid>) -> u32 {
    cpus.into_iter().fold(0, |acc, c| {
        acc | match c.core_type {
            CORE_TYPE_CORE => abi::PFM_CORE_TYPE_CORE,
            CORE_TYPE_ATOM => abi::PFM_CORE_TYPE_ATOM,
            0 => 0,
            _ => abi::PFM_CORE_TYPE_OTHER,
        }
    })
}

/// Whether leaf 0's EBX, EDX, ECX spell `name`.
pub fn vendor_is(v: &CpuidRegs, name: &[u8; 12]) -> bool {
    let word = |i: usize| u32::from_le_bytes([name[i], name[i + 1], name[i + 2], name[i + 3]]);
    v.ebx == word(0) && v.edx == word(4) && v.ecx == word(8)
}

/// The bits set in `mask`, lowest first.
fn bits(mask: u64) -> impl Iterator<Item = usize> {
    let mut m = mask;
    core::iter::from_fn(move || {
        if m == 0 {
            return None;
        }
        let i = m.trailing_zeros() as usize;
        m &= m - 1;
        Some(i)
    })
}

/// One context's registers on a hardware model, borrowed for one sequence.
///
/// `pmcs[i]` is PMC i's validated value (meaningful where bit i of
/// `pmc_used` is set); `pmds[i]` is PMD i's state, and `raw[i]` its
/// hardware counter's value at the last write or read; `used` the PMDs the written
/// PMCs make count. Registers out of the tables' range are ignored, never
/// indexed.
pub struct HwRegs<'a, M: HwPmu> {
    /// The model.
    pub model: &'a M,
    /// PMC values.
    pub pmcs: &'a [u64],
    /// PMCs written.
    pub pmc_used: u64,
    /// PMD state.
    pub pmds: &'a mut [PmdState],
    /// Each PMD's raw counter value at the last write or read (as long as
    /// `pmds`: a PMD beyond either table is not used).
    pub raw: &'a mut [u64],
    /// PMDs counting.
    pub used: u64,
    /// Where to add each PMD's number of 64-bit overflows (one fold can
    /// cross several periods), if the caller wants them.
    pub tally: Option<&'a mut [u64]>,
    /// Where to keep, as a PMD's tally leaves 0, its period generator's
    /// state before that fold (`PFM_REGFL_RANDOM`: each period's reset
    /// value can be drawn again from it), if the caller wants it.
    pub random_before: Option<&'a mut [u64]>,
    /// The fewest events a counter is armed for (at least
    /// [`super::model::MIN_ARM_EVENTS`]; raised while PMIs come too fast).
    pub min_arm: u64,
}

/// What an access sequence found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// PMDs whose 64-bit value overflowed (crossed 2^64): the overflows
    /// perfmon reports.
    pub overflowed: u64,
    /// PMDs whose hardware counter wrapped.
    pub wrapped: u64,
    /// MSR accesses that faulted (the first one's MSR).
    pub fault: Option<MsrFault>,
}

impl Outcome {
    fn note<T>(&mut self, r: Result<T, MsrFault>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(f) => {
                if self.fault.is_none() {
                    self.fault = Some(f);
                }
                None
            }
        }
    }
}

impl<M: HwPmu> HwRegs<'_, M> {
    /// The PMDs this context counts with, limited to its table.
    fn used_pmds(&self) -> u64 {
        let n = self.pmds.len().min(self.raw.len()).min(64);
        let table = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
        self.used & table & self.model.impl_pmds()
    }

    /// Writes every used PMC, counting if `enable`.
    fn write_pmcs<B: MsrBus>(&self, bus: &mut B, enable: bool, out: &mut Outcome) {
        for i in bits(self.pmc_used) {
            let (Some(v), Some(d)) = (self.pmcs.get(i), self.model.pmc_desc(i)) else {
                continue;
            };
            out.note(bus.wrmsr(d.msr, self.model.pmc_hw_value(i, *v, enable)));
        }
    }

    /// Loads PMD `pmd`'s hardware counter from its 64-bit value.
    fn arm<B: MsrBus>(&mut self, bus: &mut B, pmd: usize, out: &mut Outcome) {
        let (Some(p), Some(r)) = (self.pmds.get(pmd), self.raw.get_mut(pmd)) else {
            return;
        };
        if let Some(w) = self.model.pmd_write_min(pmd, p.value, self.min_arm) {
            if out.note(bus.wrmsr(w.msr, w.value)).is_some() {
                *r = w.raw;
            }
        }
    }

    /// Reads PMD `pmd` and folds what it counted into its 64-bit value
    /// (short reset on overflow); returns the raw read.
    fn fold<B: MsrBus>(&mut self, bus: &mut B, pmd: usize, out: &mut Outcome) -> Option<u64> {
        let d = self.model.pmd_desc(pmd)?;
        let raw = out.note(bus.rdmsr(d.msr))?;
        let (p, r) = (self.pmds.get_mut(pmd)?, self.raw.get_mut(pmd)?);
        let delta = self.model.pmd_delta(pmd, *r, raw);
        let random = p.random();
        let n = p.count(delta);
        if n != 0 {
            out.overflowed |= 1 << pmd;
            if let Some(t) = self.tally.as_mut().and_then(|t| t.get_mut(pmd)) {
                if *t == 0 {
                    if let Some(b) = self.random_before.as_mut().and_then(|b| b.get_mut(pmd)) {
                        *b = random.state();
                    }
                }
                *t = t.saturating_add(n);
            }
        }
        *r = raw;
        Some(raw)
    }

    /// Applies the linked resets of the PMDs in `ovfl` (short: an
    /// overflow); returns the PMDs reset, which the caller arms again. The
    /// 64-bit values only: `raw` is set when they are armed.
    fn reset_linked(&mut self, ovfl: u64) -> u64 {
        if ovfl == 0 {
            return 0;
        }
        crate::pfm_counter::reset_linked(self.pmds, ovfl, false)
    }

    /// Puts the context on this CPU's PMU: PMCs written, counters armed,
    /// counting if `start`.
    pub fn install<B: MsrBus>(&mut self, bus: &mut B, start: bool) -> Outcome {
        let mut out = Outcome::default();
        match self.model.global_msrs() {
            Some(g) => {
                out.note(bus.wrmsr(g.ctrl, 0));
                self.write_pmcs(bus, true, &mut out);
            }
            None => self.write_pmcs(bus, false, &mut out),
        }
        for pmd in bits(self.used_pmds()) {
            self.arm(bus, pmd, &mut out);
        }
        if start {
            self.start(bus, &mut out);
        }
        out
    }

    /// Puts the context back on a PMU that still holds its registers as
    /// [`HwRegs::stop`] (without re-arming) left them — the same CPU, no
    /// other context installed since, no register written and no value
    /// reset in between — and starts counting: one GLOBAL_CTRL write where
    /// the model has one, instead of every PMC and counter. perfmon2's lazy
    /// restore.
    ///
    /// One PMC is read back first: a PMU that lost its state (a CPU reset
    /// by suspend, firmware) no longer holds it, and `None` tells the
    /// caller to [`HwRegs::install`] instead.
    pub fn resume<B: MsrBus>(&mut self, bus: &mut B) -> Option<Outcome> {
        let mut out = Outcome::default();
        let enabled = self.model.global_msrs().is_some();
        let pmc = bits(self.pmc_used).next()?;
        let (v, d) = (self.pmcs.get(pmc)?, self.model.pmc_desc(pmc)?);
        let held = out.note(bus.rdmsr(d.msr))?;
        if held != self.model.pmc_hw_value(pmc, *v, enabled) {
            return None;
        }
        self.start(bus, &mut out);
        Some(out)
    }

    /// Starts counting (the context is installed): one GLOBAL_CTRL write
    /// where the model has one.
    pub fn start<B: MsrBus>(&self, bus: &mut B, out: &mut Outcome) {
        match self.model.global_msrs() {
            Some(g) => {
                out.note(bus.wrmsr(g.ctrl, self.model.global_ctrl_value(self.used_pmds())));
            }
            None => self.write_pmcs(bus, true, out),
        }
    }

    /// Stops counting and folds every counter into its 64-bit value. With
    /// `rearm` the counters are loaded again from their values (the context
    /// stays installed, ready to start); without, they are left as they
    /// are, for a context leaving the PMU (the next install arms them).
    pub fn stop<B: MsrBus>(&mut self, bus: &mut B, rearm: bool) -> Outcome {
        let mut out = Outcome::default();
        let global = self.model.global_msrs();
        match global {
            Some(g) => {
                out.note(bus.wrmsr(g.ctrl, 0));
            }
            None => self.write_pmcs(bus, false, &mut out),
        }
        let used = self.used_pmds();
        for pmd in bits(used) {
            if let Some(raw) = self.fold(bus, pmd, &mut out) {
                if global.is_none() && self.model.pmd_raw_overflowed(pmd, raw) {
                    out.wrapped |= 1 << pmd;
                }
            }
        }
        // Before any re-arm: a linked reset changes another PMD's value.
        self.reset_linked(out.overflowed);
        if rearm {
            for pmd in bits(used) {
                self.arm(bus, pmd, &mut out);
            }
        }
        if let Some(g) = global {
            if let Some(status) = out.note(bus.rdmsr(g.status)) {
                let wrapped = self.model.status_pmds(status) & used;
                out.wrapped |= wrapped;
                if wrapped != 0 {
                    out.note(bus.wrmsr(g.ack, self.model.ack_value(wrapped)));
                }
            }
        }
        out
    }

    /// The overflow interrupt (the context is installed on this CPU):
    /// if a counter of the context wrapped (GLOBAL_STATUS, or a counter's
    /// clear top bit where there is none), stops counting, folds every
    /// counter, re-arms the wrapped ones, acknowledges their status and
    /// counts again if `started`. Stopping first keeps the counts exact:
    /// nothing counts between a read and its re-arm. An interrupt without a
    /// wrap (the module's own self-IPI on the same vector, or a spurious
    /// one) touches nothing but the status or counter reads.
    pub fn pmi<B: MsrBus>(&mut self, bus: &mut B, started: bool) -> Outcome {
        let mut out = Outcome::default();
        let used = self.used_pmds();
        match self.model.global_msrs() {
            Some(g) => {
                let pending = out.note(bus.rdmsr(g.status)).unwrap_or(0);
                if self.model.status_pmds(pending) & used == 0 {
                    return out;
                }
                out.note(bus.wrmsr(g.ctrl, 0));
                // Counters may have wrapped since the first read.
                let status = out.note(bus.rdmsr(g.status)).unwrap_or(pending);
                let wrapped = self.model.status_pmds(status) & used;
                for pmd in bits(used) {
                    self.fold(bus, pmd, &mut out);
                }
                let linked = self.reset_linked(out.overflowed);
                for pmd in bits(wrapped | out.overflowed | (linked & used)) {
                    self.arm(bus, pmd, &mut out);
                }
                if wrapped != 0 {
                    out.note(bus.wrmsr(g.ack, self.model.ack_value(wrapped)));
                }
                out.wrapped = wrapped;
                if started {
                    self.start(bus, &mut out);
                }
            }
            None => {
                let mut any = false;
                for pmd in bits(used) {
                    if let Some(d) = self.model.pmd_desc(pmd) {
                        if let Some(raw) = out.note(bus.rdmsr(d.msr)) {
                            any |= self.model.pmd_raw_overflowed(pmd, raw);
                        }
                    }
                }
                if !any {
                    return out;
                }
                self.write_pmcs(bus, false, &mut out);
                for pmd in bits(used) {
                    let Some(raw) = self.fold(bus, pmd, &mut out) else {
                        continue;
                    };
                    if self.model.pmd_raw_overflowed(pmd, raw) {
                        out.wrapped |= 1 << pmd;
                    }
                }
                let linked = self.reset_linked(out.overflowed);
                for pmd in bits(out.wrapped | out.overflowed | (linked & used)) {
                    self.arm(bus, pmd, &mut out);
                }
                if started {
                    self.write_pmcs(bus, true, &mut out);
                }
            }
        }
        out
    }
}

/// Leaves every PMC of `model` disabled and its global control off: what
/// the module leaves behind when it gives the PMU back.
pub fn quiesce<M: HwPmu, B: MsrBus>(model: &M, bus: &mut B) -> Outcome {
    let mut out = Outcome::default();
    if let Some(g) = model.global_msrs() {
        out.note(bus.wrmsr(g.ctrl, 0));
    }
    for i in bits(model.impl_pmcs()) {
        if let Some(d) = model.pmc_desc(i) {
            out.note(bus.wrmsr(d.msr, model.pmc_hw_value(i, 0, false)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_in_order() {
        let v: [usize; 4] = [0, 3, 16, 63];
        let mut it = bits(1 | 1 << 3 | 1 << 16 | 1 << 63);
        for want in v {
            assert_eq!(it.next(), Some(want));
        }
        assert_eq!(it.next(), None);
    }

    #[test]
    fn reservations_name_the_allocator_registers() {
        // Intel v4, 4 GP counters, 48 bits, full-width writes: IA32_PMCn
        // (not the IA32_A_PMCn alias the module writes) and PERFEVTSELn.
        let leaf = CpuidRegs {
            eax: 4 | 4 << 8 | 48 << 16 | 7 << 24,
            ebx: 0,
            ecx: 0,
            edx: 3 | 48 << 5,
        };
        let intel = HwModel::Intel(IntelArch::probe(leaf, 1 << 13).unwrap());
        let r: [(u32, u32); 4] = core::array::from_fn(|i| (0xc1 + i as u32, 0x186 + i as u32));
        assert!(intel.reservations().eq(r.iter().copied()));
        // AMD core extension: PERF_CTRn/PERF_CTLn interleaved at 0xC0010200.
        let amd = HwModel::Amd(
            Amd64::probe(
                super::super::amd64::CPUID_PERFCTR_CORE,
                CpuidRegs::default(),
                false,
            )
            .unwrap(),
        );
        let r: [(u32, u32); 6] =
            core::array::from_fn(|i| (0xc001_0201 + 2 * i as u32, 0xc001_0200 + 2 * i as u32));
        assert!(amd.reservations().eq(r.iter().copied()));
        // AMD legacy (bare metal): PERF_CTR0..3 at 0xC0010004, PERF_CTL0..3 at 0xC0010000.
        let legacy = HwModel::Amd(Amd64::probe(0, CpuidRegs::default(), true).unwrap());
        let r: [(u32, u32); 4] =
            core::array::from_fn(|i| (0xc001_0004 + i as u32, 0xc001_0000 + i as u32));
        assert!(legacy.reservations().eq(r.iter().copied()));
        assert_eq!((intel.pmc_slots(), intel.pmd_slots()), (17, 19));
        assert_eq!((amd.pmc_slots(), amd.pmd_slots()), (6, 6));
    }

    #[test]
    fn unknown_vendor_is_no_pmu() {
        assert_eq!(HwModel::probe(&ProbeCpuid::default()), None);
    }
}
