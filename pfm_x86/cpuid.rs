// SPDX-License-Identifier: GPL-2.0

//! CPUID probing: what [`HwModel::probe`] decodes, read from this CPU. The
//! only place the module executes CPUID.

use super::driver::{self, HwModel, ProbeCpuid};
use super::intel_arch;
use super::model::CpuidRegs;

/// CPUID `leaf` (subleaf 0), as the register models take it.
fn cpuid(leaf: u32) -> CpuidRegs {
    let r = core::arch::x86_64::__cpuid(leaf);
    CpuidRegs {
        eax: r.eax,
        ebx: r.ebx,
        ecx: r.ecx,
        edx: r.edx,
    }
}

/// CPUID `leaf`, subleaf `sub`.
fn cpuid_count(leaf: u32, sub: u32) -> CpuidRegs {
    let r = core::arch::x86_64::__cpuid_count(leaf, sub);
    CpuidRegs {
        eax: r.eax,
        ebx: r.ebx,
        ecx: r.ecx,
        edx: r.edx,
    }
}

/// CPUID.07H.0:EDX[15]: a hybrid part (leaf 0x1A reports core types).
const CPUID_7_EDX_HYBRID: u32 = 1 << 15;

/// CPUID.01H:ECX.PDCM: IA32_PERF_CAPABILITIES exists.
const CPUID_1_ECX_PDCM: u32 = 1 << 15;
/// CPUID.01H:ECX[31]: running under a hypervisor.
const CPUID_1_ECX_HYPERVISOR: u32 = 1 << 31;

/// Reads what [`HwModel::probe`] decodes: CPUID only, and
/// IA32_PERF_CAPABILITIES where CPUID announces it (PDCM).
pub(crate) fn read_probe_cpuid() -> ProbeCpuid {
    let vendor = cpuid(0);
    let leaf1_ecx = if vendor.eax >= 1 { cpuid(1).ecx } else { 0 };
    let mut p = ProbeCpuid {
        vendor,
        hypervisor: leaf1_ecx & CPUID_1_ECX_HYPERVISOR != 0,
        ..ProbeCpuid::default()
    };
    if driver::vendor_is(&vendor, b"GenuineIntel") && vendor.eax >= 0xa {
        p.leaf_0xa = cpuid(0xa);
        if vendor.eax >= 0x1a && cpuid_count(7, 0).edx & CPUID_7_EDX_HYBRID != 0 {
            p.core_type = (cpuid_count(0x1a, 0).eax >> 24) as u8;
        }
        if leaf1_ecx & CPUID_1_ECX_PDCM != 0 {
            let msr = intel_arch::MSR_IA32_PERF_CAPABILITIES;
            // SAFETY: CPUID.01H:ECX.PDCM announces IA32_PERF_CAPABILITIES,
            // a read-only MSR.
            let caps = unsafe { crate::rust::rdmsr_safe(msr) };
            p.perf_capabilities = caps.unwrap_or(0);
        }
    }
    if driver::vendor_is(&vendor, b"AuthenticAMD") {
        let max_ext = cpuid(0x8000_0000).eax;
        if max_ext >= 0x8000_0001 {
            p.amd_ext1_ecx = cpuid(0x8000_0001).ecx;
        }
        if max_ext >= 0x8000_0022 {
            p.amd_leaf_0x80000022 = cpuid(0x8000_0022);
        }
    }
    p
}

/// What every online CPU announces: the model all of them can run
/// ([`HwModel::probe_cpus`]: hybrid Intel parts differ per core type) and
/// the `PFM_CORE_TYPE_*` bits of their core types. Process context (module
/// load): each CPU reads its own CPUID, through an IPI. A CPU that cannot
/// be reached makes the hardware models unavailable (`None`).
pub(crate) fn probe_all_cpus() -> (Option<HwModel>, u32) {
    let mut model: Option<Option<HwModel>> = None;
    let mut types = 0;
    for cpu in 0..crate::rust::cpu::nr_cpu_ids() {
        if !crate::rust::cpu::is_online(cpu) {
            continue;
        }
        let mut p = None;
        let mut read = || p = Some(read_probe_cpuid());
        let reached = i32::try_from(cpu)
            .ok()
            .is_some_and(|c| crate::rust::call_on_cpu(c, &mut read).is_ok());
        let Some(p) = p.filter(|_| reached) else {
            return (None, 0);
        };
        types |= driver::core_types([&p]);
        let here = HwModel::probe_cpus([&p]);
        model = Some(match model {
            None => here,
            Some(m) => m.zip(here).and_then(|(a, b)| a.common(&b)),
        });
    }
    (model.flatten(), types)
}

/// Whether this CPU (coming online after the probe) can run `model`.
pub(crate) fn cpu_fits(model: &HwModel) -> bool {
    HwModel::probe(&read_probe_cpuid()).is_some_and(|m| model.fits(&m))
}

/// Whether CPUID announces a hardware PMU of a supported kind.
pub(crate) fn cpu_has_pmu() -> bool {
    HwModel::probe(&read_probe_cpuid()).is_some()
}
