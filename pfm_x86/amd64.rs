// SPDX-License-Identifier: GPL-2.0

//! AMD64 performance counters (APM vol. 2, "Performance Monitoring
//! Counters"), legacy and core extension, with PerfMonV2 global control.
//!
//! Register map:
//!
//! | perfmon | legacy (4 counters) | core extension (6, or CPUID 0x80000022) |
//! |---|---|---|
//! | PMCn | PERF_CTLn at 0xc0010000 + n | PERF_CTLn at 0xc0010200 + 2n |
//! | PMDn | PERF_CTRn at 0xc0010004 + n | PERF_CTRn at 0xc0010201 + 2n |
//!
//! The core extension is CPUID 0x80000001:ECX[23] (PerfCtrExtCore); the
//! legacy MSRs then alias the first four counters, and the module uses the
//! new ones only, as Linux does. Counters are 48 bits wide and written at
//! full width.
//!
//! Overflow: the legacy PMU has no global status. As Linux does
//! (`amd_pmu_test_overflow_topbit`), counters are armed with bit 47 set
//! (47 usable bits) and a clear bit 47 means the counter wrapped. PerfMonV2
//! (CPUID 0x80000022:EAX[0]) adds PerfCntrGlobalCtl / Status / StatusClr at
//! 0xc0000301 / 0xc0000300 / 0xc0000302 and the number of core counters
//! (EBX[3:0]); the model then offers them through [`HwPmu::global_msrs`].
//! Counters keep 47 armed bits there too (Linux's max period), so the same
//! arming serves both.
//!
//! What user space may set in PERF_CTLn: the event select (bits 7:0 and
//! 35:32), unit mask, USR, OS (if the policy allows kernel counting), EDGE,
//! INV, CMASK, GuestOnly and HostOnly (they only narrow counting). EN is
//! accepted and ignored: the module sets it at start. INT is refused: the
//! module sets it on every counter it uses. Event 0xfff, the family 17h
//! "Merge" event that chains a counter pair into one wider counter, is
//! refused: it would change the width of another counter under the module.
//! Bits 19, 21, 39:36 and 63:42 are reserved.

use super::model::{
    bit, low_mask, name_at, CpuidRegs, GlobalMsrs, HwPmu, PmcError, Policy, RegDesc, RegKind,
};

/// PERF_CTL0 of the legacy PMU; PERF_CTLn is at `+ n`.
pub const MSR_K7_PERF_CTL0: u32 = 0xc001_0000;
/// PERF_CTR0 of the legacy PMU; PERF_CTRn is at `+ n`.
pub const MSR_K7_PERF_CTR0: u32 = 0xc001_0004;
/// PERF_CTL0 of the core extension; PERF_CTLn is at `+ 2n`.
pub const MSR_F15H_PERF_CTL0: u32 = 0xc001_0200;
/// PERF_CTR0 of the core extension; PERF_CTRn is at `+ 2n`.
pub const MSR_F15H_PERF_CTR0: u32 = 0xc001_0201;
/// PerfMonV2 PerfCntrGlobalStatus (read-only).
pub const MSR_AMD64_PERF_CNTR_GLOBAL_STATUS: u32 = 0xc000_0300;
/// PerfMonV2 PerfCntrGlobalCtl.
pub const MSR_AMD64_PERF_CNTR_GLOBAL_CTL: u32 = 0xc000_0301;
/// PerfMonV2 PerfCntrGlobalStatusClr: writing ones clears status bits.
pub const MSR_AMD64_PERF_CNTR_GLOBAL_STATUS_CLR: u32 = 0xc000_0302;

/// PERF_CTL: event select bits 7:0.
pub const CTL_EVENT_LO: u64 = 0xff;
/// PERF_CTL: unit mask.
pub const CTL_UMASK: u64 = 0xff << 8;
/// PERF_CTL: count at CPL > 0.
pub const CTL_USR: u64 = 1 << 16;
/// PERF_CTL: count at CPL 0.
pub const CTL_OS: u64 = 1 << 17;
/// PERF_CTL: count edges.
pub const CTL_EDGE: u64 = 1 << 18;
/// PERF_CTL: interrupt on overflow.
pub const CTL_INT: u64 = 1 << 20;
/// PERF_CTL: enable.
pub const CTL_EN: u64 = 1 << 22;
/// PERF_CTL: invert the counter mask comparison.
pub const CTL_INV: u64 = 1 << 23;
/// PERF_CTL: counter mask.
pub const CTL_CMASK: u64 = 0xff << 24;
/// PERF_CTL: event select bits 11:8.
pub const CTL_EVENT_HI: u64 = 0xf << 32;
/// PERF_CTL: count only in guest mode (when SVM is enabled).
pub const CTL_GUESTONLY: u64 = 1 << 40;
/// PERF_CTL: count only in host mode (when SVM is enabled).
pub const CTL_HOSTONLY: u64 = 1 << 41;
/// PERF_CTL: the reserved bits (19, 21, 39:36, 63:42).
pub const CTL_RESERVED: u64 = 1 << 19 | 1 << 21 | 0xf << 36 | !((1u64 << 42) - 1);

/// CPUID 0x80000001:ECX PerfCtrExtCore.
pub const CPUID_PERFCTR_CORE: u32 = 1 << 23;
/// CPUID 0x80000022:EAX PerfMonV2.
pub const CPUID_PERFMON_V2: u32 = 1 << 0;
/// The "Merge" event select (family 17h+ counter pairing).
pub const EVENT_MERGE: u64 = 0xfff;
/// Width of every counter.
pub const COUNTER_WIDTH: u32 = 48;
/// Armed width: bit 47 stays free to show a wrap.
pub const ARMED_WIDTH: u32 = 47;
/// Counters the ABI can map.
pub const MAX_COUNTERS: u32 = 16;

/// Common events (the same codes on every family Linux supports): name and
/// event select.
pub const EVENTS: [(&str, u64); 4] = [
    ("cpu-cycles", 0x76),
    ("instructions", 0xc0),
    ("branches", 0xc2),
    ("branch-misses", 0xc3),
];

#[rustfmt::skip]
const CTL_NAMES: [&str; 16] = [
    "PERF_CTL0", "PERF_CTL1", "PERF_CTL2", "PERF_CTL3", "PERF_CTL4", "PERF_CTL5", "PERF_CTL6",
    "PERF_CTL7", "PERF_CTL8", "PERF_CTL9", "PERF_CTL10", "PERF_CTL11", "PERF_CTL12",
    "PERF_CTL13", "PERF_CTL14", "PERF_CTL15",
];
#[rustfmt::skip]
const CTR_NAMES: [&str; 16] = [
    "PERF_CTR0", "PERF_CTR1", "PERF_CTR2", "PERF_CTR3", "PERF_CTR4", "PERF_CTR5", "PERF_CTR6",
    "PERF_CTR7", "PERF_CTR8", "PERF_CTR9", "PERF_CTR10", "PERF_CTR11", "PERF_CTR12",
    "PERF_CTR13", "PERF_CTR14", "PERF_CTR15",
];

/// An AMD64 core PMU, as CPUID describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Amd64 {
    core_ext: bool,
    perfmon_v2: bool,
    num: u32,
}

impl Amd64 {
    /// Decodes CPUID 0x80000001:ECX and leaf 0x80000022 (pass zeros where
    /// the maximum extended leaf is below it) of an AMD CPU.
    ///
    /// No CPUID bit announces the legacy four counters: they exist on every
    /// AMD64 CPU, but hypervisors often leave them out. `legacy_ok` is the
    /// caller's judgement (e.g. family >= 0x10 and not under a hypervisor);
    /// without it and without the core extension, `None`.
    pub const fn probe(
        ext1_ecx: u32,
        leaf_0x80000022: CpuidRegs,
        legacy_ok: bool,
    ) -> Option<Amd64> {
        let core_ext = ext1_ecx & CPUID_PERFCTR_CORE != 0;
        if !core_ext {
            if legacy_ok {
                return Some(Amd64 {
                    core_ext: false,
                    perfmon_v2: false,
                    num: 4,
                });
            }
            return None;
        }
        // Linux reads PerfMonV2 only with the core extension, and so do we.
        let v2 = leaf_0x80000022.eax & CPUID_PERFMON_V2 != 0;
        let mut num = 6;
        if v2 {
            num = leaf_0x80000022.ebx & 0xf;
            if num == 0 {
                // A PerfMonV2 CPU with no core counter is not usable.
                return None;
            }
        }
        if num > MAX_COUNTERS {
            num = MAX_COUNTERS;
        }
        Some(Amd64 {
            core_ext,
            perfmon_v2: v2,
            num,
        })
    }

    /// Whether the core extension MSRs are used.
    pub const fn core_ext(&self) -> bool {
        self.core_ext
    }

    /// Whether PerfMonV2 global control is used.
    pub const fn perfmon_v2(&self) -> bool {
        self.perfmon_v2
    }

    /// Number of counters.
    pub const fn num_counters(&self) -> u32 {
        self.num
    }

    const fn exists(&self, i: usize) -> bool {
        i < self.num as usize
    }

    // `i` is below `MAX_COUNTERS`: the wrapping forms never wrap, they only
    // spare the kernel build an overflow check that cannot fire.
    const fn ctl_msr(&self, i: u32) -> u32 {
        if self.core_ext {
            MSR_F15H_PERF_CTL0.wrapping_add(i.wrapping_mul(2))
        } else {
            MSR_K7_PERF_CTL0.wrapping_add(i)
        }
    }

    const fn ctr_msr(&self, i: u32) -> u32 {
        if self.core_ext {
            MSR_F15H_PERF_CTR0.wrapping_add(i.wrapping_mul(2))
        } else {
            MSR_K7_PERF_CTR0.wrapping_add(i)
        }
    }

    const fn validate_ctl(value: u64, policy: Policy) -> Result<u64, PmcError> {
        if value & CTL_RESERVED != 0 {
            return Err(PmcError::ReservedBits);
        }
        if value & CTL_INT != 0 {
            return Err(PmcError::NotAllowed);
        }
        if value & CTL_OS != 0 && !policy.allow_kernel {
            return Err(PmcError::NotAllowed);
        }
        let event = (value & CTL_EVENT_LO) | ((value & CTL_EVENT_HI) >> 24);
        if event == EVENT_MERGE {
            return Err(PmcError::NotAllowed);
        }
        Ok(value & !CTL_EN)
    }
}

impl HwPmu for Amd64 {
    fn name(&self) -> &'static str {
        "amd64"
    }

    fn impl_pmcs(&self) -> u64 {
        low_mask(self.num)
    }

    fn impl_pmds(&self) -> u64 {
        low_mask(self.num)
    }

    fn pmc_desc(&self, pmc: usize) -> Option<RegDesc> {
        if !self.exists(pmc) {
            return None;
        }
        Some(RegDesc {
            name: name_at(&CTL_NAMES, pmc),
            msr: self.ctl_msr(pmc as u32),
            kind: RegKind::EventSel,
            width: 64,
            hw_width: 64,
            rsvd_mask: CTL_RESERVED | CTL_INT,
            dfl_val: 0,
        })
    }

    fn pmd_desc(&self, pmd: usize) -> Option<RegDesc> {
        if !self.exists(pmd) {
            return None;
        }
        Some(RegDesc {
            name: name_at(&CTR_NAMES, pmd),
            msr: self.ctr_msr(pmd as u32),
            kind: RegKind::Counter,
            width: ARMED_WIDTH,
            hw_width: COUNTER_WIDTH,
            rsvd_mask: 0,
            dfl_val: 0,
        })
    }

    fn validate_pmc(&self, pmc: usize, value: u64, policy: Policy) -> Result<u64, PmcError> {
        if !self.exists(pmc) {
            return Err(PmcError::NotAvailable);
        }
        Self::validate_ctl(value, policy)
    }

    fn pmc_pmds(&self, pmc: usize, _value: u64) -> u64 {
        if self.exists(pmc) {
            bit(pmc as u32)
        } else {
            0
        }
    }

    fn pmc_hw_value(&self, pmc: usize, value: u64, enable: bool) -> u64 {
        if !self.exists(pmc) {
            return 0;
        }
        let v = (value & !CTL_EN) | CTL_INT;
        if enable {
            v | CTL_EN
        } else {
            v
        }
    }

    fn global_msrs(&self) -> Option<GlobalMsrs> {
        if self.perfmon_v2 {
            Some(GlobalMsrs {
                ctrl: MSR_AMD64_PERF_CNTR_GLOBAL_CTL,
                status: MSR_AMD64_PERF_CNTR_GLOBAL_STATUS,
                ack: MSR_AMD64_PERF_CNTR_GLOBAL_STATUS_CLR,
            })
        } else {
            None
        }
    }

    fn global_ctrl_value(&self, pmds: u64) -> u64 {
        if self.perfmon_v2 {
            pmds & low_mask(self.num)
        } else {
            0
        }
    }

    fn status_pmds(&self, status: u64) -> u64 {
        status & low_mask(self.num)
    }

    fn ack_value(&self, pmds: u64) -> u64 {
        self.global_ctrl_value(pmds)
    }

    fn event(&self, idx: usize) -> Option<(&'static str, u64)> {
        match EVENTS.get(idx) {
            Some((name, ev)) => Some((name, *ev | CTL_USR)),
            None => None,
        }
    }

    /// Overrides the provided method only to state the AMD rule: with
    /// [`ARMED_WIDTH`] < [`COUNTER_WIDTH`], bit 47 clear means a wrap.
    fn pmd_raw_overflowed(&self, pmd: usize, raw: u64) -> bool {
        self.exists(pmd) && raw & bit(COUNTER_WIDTH - 1) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_needs_consent() {
        assert_eq!(Amd64::probe(0, CpuidRegs::default(), false), None);
        let l = Amd64::probe(0, CpuidRegs::default(), true).unwrap();
        assert_eq!((l.num_counters(), l.core_ext()), (4, false));
        assert_eq!(l.pmd_desc(3).map(|d| d.msr), Some(0xc001_0007));
    }

    #[test]
    fn core_ext_and_v2() {
        let c = Amd64::probe(CPUID_PERFCTR_CORE, CpuidRegs::default(), false).unwrap();
        assert_eq!(c.num_counters(), 6);
        assert_eq!(c.pmc_desc(5).map(|d| d.msr), Some(0xc001_020a));
        assert!(c.global_msrs().is_none());
        let v2 = CpuidRegs {
            eax: 1,
            ebx: 6,
            ..Default::default()
        };
        let c = Amd64::probe(CPUID_PERFCTR_CORE, v2, false).unwrap();
        assert!(c.global_msrs().is_some());
    }

    #[test]
    fn merge_event_refused() {
        let p = Policy { allow_kernel: true };
        assert_eq!(
            Amd64::validate_ctl(0xf_0000_00ff, p),
            Err(PmcError::NotAllowed)
        );
        assert_eq!(
            Amd64::validate_ctl(0xf_0000_00fe | CTL_EN, p),
            Ok(0xf_0000_00fe)
        );
    }
}
