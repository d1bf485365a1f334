// SPDX-License-Identifier: GPL-2.0

//! PMU models behind one interface: what the rest of the module knows about
//! the counters is [`Pmu`].
//!
//! `soft` is the model every machine has: software counters (task clock,
//! context switches, CPU migrations) of a configurable width, virtualized by
//! the same save/restore path as hardware counters. The hardware models
//! (`intel_arch`, `amd64`) are probed from CPUID; where CPUID announces no
//! usable PMU (every machine here, QEMU TCG included) they are refused with
//! `ENODEV`, and nothing touches an MSR.

use crate::abi;
pub(crate) use crate::pfm_counter::PmdState;

/// Counters of the soft model.
pub(crate) const SOFT_COUNTERS: usize = 4;

/// The largest number of counters any model exposes to a context.
pub(crate) const MAX_COUNTERS: usize = SOFT_COUNTERS;

/// A soft PMU event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SoftEvent {
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
    pub(crate) const fn from_pmc(value: u64) -> Option<Self> {
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
pub(crate) const SOFT_EVENTS: [(&str, u64); 3] = [
    ("task-clock", abi::PFM_SOFT_EV_TASK_CLOCK),
    ("context-switches", abi::PFM_SOFT_EV_CONTEXT_SWITCHES),
    ("cpu-migrations", abi::PFM_SOFT_EV_CPU_MIGRATIONS),
];

/// Bits a soft PMC value must leave zero: everything above the event code.
pub(crate) const SOFT_PMC_RSVD_MASK: u64 = !0x3;

/// What happened to a thread since its soft counters were last advanced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SoftDeltas {
    /// Nanoseconds on a CPU.
    pub(crate) task_clock: u64,
    /// Switch-outs.
    pub(crate) switches: u64,
    /// Migrations.
    pub(crate) migrations: u64,
}

/// Which model the module runs, chosen once at load.
pub(crate) struct Pmu {
    /// Counter width of the model, in bits.
    pub(crate) width: u32,
}

/// Why a model could not be selected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProbeError {
    /// The requested model's hardware is absent (`ENODEV`).
    NoHardware(&'static str),
    /// The parameters are invalid (`EINVAL`).
    BadParam,
}

pub mod amd64;
pub mod intel_arch;
pub mod model;

use model::{CpuidRegs, HwPmu};

/// CPUID `leaf`, as the register models take it.
fn cpuid(leaf: u32) -> CpuidRegs {
    let r = core::arch::x86_64::__cpuid(leaf);
    CpuidRegs {
        eax: r.eax,
        ebx: r.ebx,
        ecx: r.ecx,
        edx: r.edx,
    }
}

/// The CPU's vendor string registers (EBX, EDX, ECX of leaf 0).
fn vendor_is(v: &CpuidRegs, name: &[u8; 12]) -> bool {
    let word = |i: usize| u32::from_le_bytes([name[i], name[i + 1], name[i + 2], name[i + 3]]);
    v.ebx == word(0) && v.edx == word(4) && v.ecx == word(8)
}

/// The hardware PMU CPUID announces, decoded by the host-tested register
/// models: its model name, number of counters and counter width. Only CPUID
/// is read; no MSR (PERF_CAPABILITIES is taken as 0, which only affects the
/// full-width-write flag).
pub(crate) fn probe_hardware() -> Option<(&'static str, u32, u32)> {
    let v = cpuid(0);
    if vendor_is(&v, b"GenuineIntel") && v.eax >= 0xa {
        let pmu = intel_arch::IntelArch::probe(cpuid(0xa), 0)?;
        return Some((
            pmu.name(),
            pmu.impl_pmds().count_ones(),
            pmu.counter_width(),
        ));
    }
    if vendor_is(&v, b"AuthenticAMD") {
        let max_ext = cpuid(0x8000_0000).eax;
        if max_ext < 0x8000_0001 {
            return None;
        }
        let ext1 = cpuid(0x8000_0001).ecx;
        let leaf22 = if max_ext >= 0x8000_0022 {
            cpuid(0x8000_0022)
        } else {
            CpuidRegs {
                eax: 0,
                ebx: 0,
                ecx: 0,
                edx: 0,
            }
        };
        // The legacy counters have no CPUID bit; under a hypervisor (CPUID.1
        // ECX bit 31) they are often absent: trust them only on bare metal.
        let bare_metal = cpuid(1).ecx & (1 << 31) == 0;
        let pmu = amd64::Amd64::probe(ext1, leaf22, bare_metal)?;
        return Some((
            pmu.name(),
            pmu.impl_pmds().count_ones(),
            pmu.counter_width(),
        ));
    }
    None
}

/// Whether CPUID announces a hardware PMU of a supported kind.
pub(crate) fn cpu_has_pmu() -> bool {
    probe_hardware().is_some()
}

impl Pmu {
    /// Picks the model named by `pmu=` (`auto`, `soft`, `intel_arch`,
    /// `amd64`) with the soft counter width `soft_width`; returns the model
    /// and, for `auto`, why it was picked.
    pub(crate) fn select(name: &[u8], soft_width: u32) -> Result<(Pmu, &'static str), ProbeError> {
        if !(16..=64).contains(&soft_width) {
            return Err(ProbeError::BadParam);
        }
        let soft = Pmu { width: soft_width };
        let hw = probe_hardware();
        match (name, hw) {
            (b"soft", _) => Ok((soft, "requested with pmu=soft")),
            (b"auto", None) => Ok((soft, "the CPU announces no usable PMU (CPUID)")),
            // The register models are host-tested, but the MSR save/restore
            // that would drive them is not in this build: count with soft.
            (b"auto", Some(_)) => Ok((soft, "the hardware PMU is not driven by this build")),
            (b"intel_arch", Some(("intel_arch", ..))) | (b"amd64", Some(("amd64", ..))) => Err(
                ProbeError::NoHardware("the hardware PMU is present but not driven by this build"),
            ),
            (b"intel_arch", _) => Err(ProbeError::NoHardware(
                "intel_arch: CPUID leaf 0xA announces no architectural perfmon",
            )),
            (b"amd64", _) => Err(ProbeError::NoHardware(
                "amd64: CPUID announces no AMD64 core performance counters",
            )),
            _ => Err(ProbeError::BadParam),
        }
    }

    /// The model's name.
    pub(crate) fn name(&self) -> &'static str {
        "soft"
    }

    /// Bit n set: PMC n (and PMD n) exists.
    pub(crate) fn impl_mask(&self) -> u64 {
        (1u64 << SOFT_COUNTERS) - 1
    }

    /// Fills `PFM_IOC_GET_INFO`'s model part.
    pub(crate) fn describe(&self, info: &mut abi::PfmInfo) {
        copy_name(&mut info.model, self.name().as_bytes());
        info.num_pmcs = SOFT_COUNTERS as u16;
        info.num_pmds = SOFT_COUNTERS as u16;
        info.counter_width = self.width as u16;
        info.impl_pmcs = self.impl_mask();
        info.impl_pmds = self.impl_mask();
        for (i, rsvd) in info.pmc_rsvd_mask.iter_mut().enumerate() {
            *rsvd = if i < SOFT_COUNTERS {
                SOFT_PMC_RSVD_MASK
            } else {
                u64::MAX
            };
        }
        info.num_events = SOFT_EVENTS.len() as u16;
        for (slot, (name, code)) in info.events.iter_mut().zip(SOFT_EVENTS.iter()) {
            copy_name(&mut slot.name, name.as_bytes());
            slot.code = *code;
        }
    }

    /// Checks a PMC value from user space: `Err` holds the `PFM_REG_RETFL_*` bit.
    pub(crate) fn validate_pmc(&self, reg: usize, value: u64) -> Result<u64, u32> {
        if reg >= SOFT_COUNTERS {
            return Err(abi::PFM_REG_RETFL_NOTAVAIL);
        }
        match SoftEvent::from_pmc(value) {
            Some(_) => Ok(value),
            None => Err(abi::PFM_REG_RETFL_EINVAL),
        }
    }
}

/// Advances every counter by what its PMC selects; returns the mask of PMDs
/// that overflowed.
pub(crate) fn soft_count(
    ev_pmds: &[u8; 4],
    pmds: &mut [PmdState; MAX_COUNTERS],
    d: &SoftDeltas,
    width: u32,
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
                if pmd.count(delta, width) != 0 {
                    ovfl |= 1 << i;
                }
            }
        }
    }
    ovfl
}

/// Copies `name` into a fixed, NUL-terminated field, truncating.
fn copy_name(dst: &mut [u8], name: &[u8]) {
    let n = name.len().min(dst.len().saturating_sub(1));
    dst[..n].copy_from_slice(&name[..n]);
    for b in dst[n..].iter_mut() {
        *b = 0;
    }
}
