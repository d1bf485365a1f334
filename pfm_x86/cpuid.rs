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

/// Whether CPUID announces a hardware PMU of a supported kind.
pub(crate) fn cpu_has_pmu() -> bool {
    HwModel::probe(&read_probe_cpuid()).is_some()
}
