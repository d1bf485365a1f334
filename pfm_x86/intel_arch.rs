// SPDX-License-Identifier: GPL-2.0

//! Intel architectural performance monitoring, versions 1 to 5 (SDM vol. 3B,
//! "Performance Monitoring", architectural performance monitoring).
//!
//! Register map (perfmon2's `intel_arch`):
//!
//! | perfmon | MSR | what |
//! |---|---|---|
//! | PMC0..15 | 0x186 + n | IA32_PERFEVTSELn |
//! | PMC16 | 0x38d | IA32_FIXED_CTR_CTRL (v2+, when a fixed counter exists) |
//! | PMD0..15 | 0xc1 + n, or 0x4c1 + n with full-width writes | IA32_PMCn / IA32_A_PMCn |
//! | PMD16 + n | 0x309 + n | IA32_FIXED_CTRn (v2+) |
//!
//! Version 1 has event selects and counters only; version 2 adds the fixed
//! counters and IA32_PERF_GLOBAL_CTRL / STATUS / OVF_CTRL; version 3 the
//! any-thread bits; version 4 renames OVF_CTRL to STATUS_RESET (same MSR);
//! version 5 enumerates fixed counters by a bitmap (CPUID.0AH:ECX) and may
//! deprecate any-thread (CPUID.0AH:EDX[15]). Later versions are driven as
//! version 5 through the same MSRs; their new event select bits stay
//! reserved here.
//!
//! What user space may set in IA32_PERFEVTSELn: the event select, unit mask,
//! USR, OS (if the policy allows kernel counting), EDGE, INV and CMASK. EN is
//! accepted and ignored: the module sets it at start, and tools built for
//! perfmon2 (libpfm) encode it. INT, ANY and PC are refused: INT is the
//! module's (it sets it on every counter it uses, to fold wraps), ANY would
//! count the sibling hyperthread's events (another thread's), PC drives
//! external pins (reserved since Sandy Bridge). Bits 63:32 are reserved.
//! In IA32_FIXED_CTR_CTRL, per counter: the OS/USR enable field as above,
//! ANY and PMI refused, the fields of absent counters reserved.

use super::model::{
    bit, low_mask, name_at, CpuidRegs, GlobalMsrs, HwPmu, PmcError, Policy, RegDesc, RegKind,
};

/// IA32_PMC0; IA32_PMCn is at `+ n`. Writes set bits 31:0 and sign-extend.
pub const MSR_IA32_PMC0: u32 = 0xc1;
/// IA32_PERFEVTSEL0; IA32_PERFEVTSELn is at `+ n`.
pub const MSR_IA32_PERFEVTSEL0: u32 = 0x186;
/// IA32_PERF_CAPABILITIES (present when CPUID.01H:ECX.PDCM[15] = 1).
pub const MSR_IA32_PERF_CAPABILITIES: u32 = 0x345;
/// IA32_FIXED_CTR0; IA32_FIXED_CTRn is at `+ n`.
pub const MSR_IA32_FIXED_CTR0: u32 = 0x309;
/// IA32_FIXED_CTR_CTRL.
pub const MSR_IA32_FIXED_CTR_CTRL: u32 = 0x38d;
/// IA32_PERF_GLOBAL_STATUS (read-only).
pub const MSR_IA32_PERF_GLOBAL_STATUS: u32 = 0x38e;
/// IA32_PERF_GLOBAL_CTRL.
pub const MSR_IA32_PERF_GLOBAL_CTRL: u32 = 0x38f;
/// IA32_PERF_GLOBAL_OVF_CTRL; IA32_PERF_GLOBAL_STATUS_RESET from v4.
pub const MSR_IA32_PERF_GLOBAL_OVF_CTRL: u32 = 0x390;
/// IA32_A_PMC0, the full-width write alias of IA32_PMC0.
pub const MSR_IA32_A_PMC0: u32 = 0x4c1;

/// PERFEVTSEL: event select.
pub const EVTSEL_EVENT: u64 = 0xff;
/// PERFEVTSEL: unit mask.
pub const EVTSEL_UMASK: u64 = 0xff << 8;
/// PERFEVTSEL: count at CPL > 0.
pub const EVTSEL_USR: u64 = 1 << 16;
/// PERFEVTSEL: count at CPL 0.
pub const EVTSEL_OS: u64 = 1 << 17;
/// PERFEVTSEL: count edges.
pub const EVTSEL_EDGE: u64 = 1 << 18;
/// PERFEVTSEL: pin control.
pub const EVTSEL_PC: u64 = 1 << 19;
/// PERFEVTSEL: interrupt (PMI) on overflow.
pub const EVTSEL_INT: u64 = 1 << 20;
/// PERFEVTSEL: count on any thread of the core (v3+).
pub const EVTSEL_ANY: u64 = 1 << 21;
/// PERFEVTSEL: enable.
pub const EVTSEL_EN: u64 = 1 << 22;
/// PERFEVTSEL: invert the counter mask comparison.
pub const EVTSEL_INV: u64 = 1 << 23;
/// PERFEVTSEL: counter mask.
pub const EVTSEL_CMASK: u64 = 0xff << 24;

/// FIXED_CTR_CTRL field bit: count at CPL 0.
pub const FIXED_OS: u64 = 1 << 0;
/// FIXED_CTR_CTRL field bit: count at CPL > 0.
pub const FIXED_USR: u64 = 1 << 1;
/// FIXED_CTR_CTRL field bit: any thread (v3+).
pub const FIXED_ANY: u64 = 1 << 2;
/// FIXED_CTR_CTRL field bit: PMI on overflow.
pub const FIXED_PMI: u64 = 1 << 3;
/// Bits of FIXED_CTR_CTRL per fixed counter.
pub const FIXED_STRIDE: u32 = 4;

/// IA32_PERF_CAPABILITIES.FW_WRITE: IA32_A_PMCn exist.
pub const PERF_CAP_FW_WRITE: u64 = 1 << 13;
/// GLOBAL_STATUS bit of fixed counter 0; fixed counter n is `+ n`.
pub const GLOBAL_FIXED_SHIFT: u32 = 32;
/// GLOBAL_STATUS: the DS buffer is nearly full (PEBS/BTS, not used here).
pub const GLOBAL_STATUS_OVF_BUF: u64 = 1 << 62;
/// GLOBAL_STATUS: a PMU resource was taken by something else (e.g. a
/// hypervisor or an SMM handler): counts may be off.
pub const GLOBAL_STATUS_COND_CHGD: u64 = 1 << 63;

/// General-purpose counters the ABI maps (PMC0..15 / PMD0..15).
pub const MAX_GP: u32 = 16;
/// Fixed counters the ABI maps (PMD16..31), as Linux's INTEL_PMC_MAX_FIXED.
pub const MAX_FIXED: u32 = 16;
/// The PMC number of IA32_FIXED_CTR_CTRL.
pub const PMC_FIXED_CTRL: usize = 16;
/// The PMD number of fixed counter 0.
pub const PMD_FIXED0: usize = 16;

/// The architectural events, indexed by their CPUID.0AH:EBX bit: name, event
/// select, unit mask (SDM table of pre-defined architectural events).
pub const ARCH_EVENTS: [(&str, u8, u8); 8] = [
    ("cpu-cycles", 0x3c, 0x00),
    ("instructions", 0xc0, 0x00),
    ("ref-cycles", 0x3c, 0x01),
    ("llc-references", 0x2e, 0x4f),
    ("llc-misses", 0x2e, 0x41),
    ("branches", 0xc4, 0x00),
    ("branch-misses", 0xc5, 0x00),
    ("topdown-slots", 0xa4, 0x01),
];

#[rustfmt::skip]
const EVTSEL_NAMES: [&str; 16] = [
    "IA32_PERFEVTSEL0", "IA32_PERFEVTSEL1", "IA32_PERFEVTSEL2", "IA32_PERFEVTSEL3",
    "IA32_PERFEVTSEL4", "IA32_PERFEVTSEL5", "IA32_PERFEVTSEL6", "IA32_PERFEVTSEL7",
    "IA32_PERFEVTSEL8", "IA32_PERFEVTSEL9", "IA32_PERFEVTSEL10", "IA32_PERFEVTSEL11",
    "IA32_PERFEVTSEL12", "IA32_PERFEVTSEL13", "IA32_PERFEVTSEL14", "IA32_PERFEVTSEL15",
];
#[rustfmt::skip]
const PMC_NAMES: [&str; 16] = [
    "IA32_PMC0", "IA32_PMC1", "IA32_PMC2", "IA32_PMC3", "IA32_PMC4", "IA32_PMC5", "IA32_PMC6",
    "IA32_PMC7", "IA32_PMC8", "IA32_PMC9", "IA32_PMC10", "IA32_PMC11", "IA32_PMC12",
    "IA32_PMC13", "IA32_PMC14", "IA32_PMC15",
];
#[rustfmt::skip]
const A_PMC_NAMES: [&str; 16] = [
    "IA32_A_PMC0", "IA32_A_PMC1", "IA32_A_PMC2", "IA32_A_PMC3", "IA32_A_PMC4", "IA32_A_PMC5",
    "IA32_A_PMC6", "IA32_A_PMC7", "IA32_A_PMC8", "IA32_A_PMC9", "IA32_A_PMC10", "IA32_A_PMC11",
    "IA32_A_PMC12", "IA32_A_PMC13", "IA32_A_PMC14", "IA32_A_PMC15",
];
#[rustfmt::skip]
const FIXED_NAMES: [&str; 16] = [
    "IA32_FIXED_CTR0", "IA32_FIXED_CTR1", "IA32_FIXED_CTR2", "IA32_FIXED_CTR3",
    "IA32_FIXED_CTR4", "IA32_FIXED_CTR5", "IA32_FIXED_CTR6", "IA32_FIXED_CTR7",
    "IA32_FIXED_CTR8", "IA32_FIXED_CTR9", "IA32_FIXED_CTR10", "IA32_FIXED_CTR11",
    "IA32_FIXED_CTR12", "IA32_FIXED_CTR13", "IA32_FIXED_CTR14", "IA32_FIXED_CTR15",
];

/// Counter widths outside this range are not believed: a hypervisor's
/// made-up CPUID should not make the module write what it cannot check.
const MIN_WIDTH: u32 = 8;

/// An Intel architectural PMU, as CPUID and PERF_CAPABILITIES describe it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntelArch {
    version: u32,
    num_gp: u32,
    gp_width: u32,
    fixed_mask: u64,
    fixed_width: u32,
    fw_write: bool,
    any_thread: bool,
    events_avail: u32,
}

impl IntelArch {
    /// Decodes CPUID leaf 0xA and IA32_PERF_CAPABILITIES (pass 0 when
    /// CPUID.01H:ECX.PDCM is clear: the MSR does not exist then).
    ///
    /// `None` when there is no usable architectural PMU: version 0, no
    /// counter at all, or an implausible GP counter width. Only what CPUID
    /// announces is used: unlike Linux, a v2-v4 CPU reporting no fixed
    /// counters gets none (Linux assumes three on bare metal), so nothing
    /// writes an MSR that CPUID did not announce.
    pub const fn probe(leaf_0xa: CpuidRegs, perf_capabilities: u64) -> Option<IntelArch> {
        let eax = leaf_0xa.eax;
        let version = eax & 0xff;
        if version == 0 {
            return None;
        }
        let mut num_gp = (eax >> 8) & 0xff;
        // PMC16 is the fixed counter control: more GP counters than 16 do
        // not fit perfmon2's map (no CPU has them).
        if num_gp > MAX_GP {
            num_gp = MAX_GP;
        }
        let gp_width = (eax >> 16) & 0xff;
        if num_gp > 0 && (gp_width < MIN_WIDTH || gp_width > 64) {
            return None;
        }
        let mask_len = eax >> 24;
        // EBX bit n set: event n unavailable; events past the vector
        // length are unavailable too.
        let events_avail = !leaf_0xa.ebx & (low_mask(mask_len) as u32);

        let mut fixed_mask = 0u64;
        let mut fixed_width = 0;
        if version >= 2 {
            let edx = leaf_0xa.edx;
            fixed_mask = low_mask(edx & 0x1f);
            if version >= 5 {
                // Fixed counter n exists if ECX[n] or EDX[4:0] > n.
                fixed_mask |= leaf_0xa.ecx as u64;
            }
            fixed_mask &= low_mask(MAX_FIXED);
            fixed_width = (edx >> 5) & 0xff;
            if fixed_width < MIN_WIDTH || fixed_width > 64 {
                fixed_mask = 0;
                fixed_width = 0;
            }
        }
        if num_gp == 0 && fixed_mask == 0 {
            return None;
        }
        let deprecated = version >= 5 && leaf_0xa.edx & (1 << 15) != 0;
        Some(IntelArch {
            version,
            num_gp,
            gp_width: if num_gp > 0 { gp_width } else { 0 },
            fixed_mask,
            fixed_width,
            fw_write: perf_capabilities & PERF_CAP_FW_WRITE != 0,
            any_thread: version >= 3 && !deprecated,
            events_avail,
        })
    }

    /// What two CPUs have in common, `None` if their counter widths differ.
    ///
    /// Hybrid parts may report different counters per core type; a thread
    /// migrates between CPUs, so the kernel side probes every CPU and folds
    /// the results with this. Differing widths are refused rather than
    /// narrowed: a counter wider than the armed width would wrap late.
    pub const fn common(&self, other: &IntelArch) -> Option<IntelArch> {
        let num_gp = if self.num_gp < other.num_gp {
            self.num_gp
        } else {
            other.num_gp
        };
        let fixed_mask = self.fixed_mask & other.fixed_mask;
        if (num_gp > 0 && self.gp_width != other.gp_width)
            || (fixed_mask != 0 && self.fixed_width != other.fixed_width)
            || (num_gp == 0 && fixed_mask == 0)
        {
            return None;
        }
        Some(IntelArch {
            version: if self.version < other.version {
                self.version
            } else {
                other.version
            },
            num_gp,
            gp_width: if num_gp > 0 { self.gp_width } else { 0 },
            fixed_mask,
            fixed_width: if fixed_mask != 0 { self.fixed_width } else { 0 },
            fw_write: self.fw_write && other.fw_write,
            any_thread: self.any_thread && other.any_thread,
            events_avail: self.events_avail & other.events_avail,
        })
    }

    /// The architectural perfmon version (CPUID.0AH:EAX[7:0]).
    pub const fn version(&self) -> u32 {
        self.version
    }

    /// General-purpose counters mapped (at most [`MAX_GP`]).
    pub const fn num_gp(&self) -> u32 {
        self.num_gp
    }

    /// Bit n set: fixed counter n exists.
    pub const fn fixed_mask(&self) -> u64 {
        self.fixed_mask
    }

    /// Whether counters are written through IA32_A_PMCn (full width).
    pub const fn full_width_writes(&self) -> bool {
        self.fw_write
    }

    /// Whether the any-thread bits exist (v3+, not deprecated by v5).
    pub const fn has_any_thread(&self) -> bool {
        self.any_thread
    }

    /// Bit n set: architectural event n ([`ARCH_EVENTS`]) is available.
    pub const fn events_available(&self) -> u32 {
        self.events_avail
    }

    const fn has_global(&self) -> bool {
        self.version >= 2
    }

    const fn gp_exists(&self, i: usize) -> bool {
        i < self.num_gp as usize
    }

    const fn fixed_exists(&self, i: usize) -> bool {
        i < MAX_FIXED as usize && self.fixed_mask & bit(i as u32) != 0
    }

    /// The width a counter of physical width `w` is armed with: `w - 1`
    /// (see the model doc: the top bit stays set when armed), and at most 31
    /// where 32-bit writes sign-extend bit 31.
    const fn armed_width(w: u32, full_width: bool) -> u32 {
        if !full_width && w > 32 {
            31
        } else {
            w - 1
        }
    }

    /// Bits of PERFEVTSEL a user value must leave zero because they are
    /// reserved on this PMU (as opposed to refused).
    const fn evtsel_reserved(&self) -> u64 {
        let mut r = !low_mask(32);
        if !self.any_thread {
            r |= EVTSEL_ANY;
        }
        r
    }

    /// Bits of FIXED_CTR_CTRL that are reserved on this PMU.
    const fn fixed_ctrl_reserved(&self) -> u64 {
        let per = if self.any_thread {
            FIXED_OS | FIXED_USR | FIXED_ANY | FIXED_PMI
        } else {
            FIXED_OS | FIXED_USR | FIXED_PMI
        };
        !self.fixed_fields(per)
    }

    /// `per` replicated into the field of every existing fixed counter.
    const fn fixed_fields(&self, per: u64) -> u64 {
        let mut m = 0;
        let mut i = 0;
        while i < MAX_FIXED {
            if self.fixed_mask & bit(i) != 0 {
                m |= per << (i * FIXED_STRIDE);
            }
            i += 1;
        }
        m
    }

    /// Refuses architectural events that CPUID marks unavailable; other
    /// encodings are model-specific events, which this model cannot judge.
    const fn check_event(&self, value: u64) -> Result<(), PmcError> {
        let ev = (value & EVTSEL_EVENT) as u8;
        let um = ((value & EVTSEL_UMASK) >> 8) as u8;
        let mut i = 0;
        while i < ARCH_EVENTS.len() {
            let (_, e, u) = ARCH_EVENTS[i];
            if e == ev && u == um && self.events_avail & (1 << i) == 0 {
                return Err(PmcError::EventUnavailable);
            }
            i += 1;
        }
        Ok(())
    }

    const fn validate_evtsel(&self, value: u64, policy: Policy) -> Result<u64, PmcError> {
        if value & self.evtsel_reserved() != 0 {
            return Err(PmcError::ReservedBits);
        }
        if value & (EVTSEL_INT | EVTSEL_ANY | EVTSEL_PC) != 0 {
            return Err(PmcError::NotAllowed);
        }
        if value & EVTSEL_OS != 0 && !policy.allow_kernel {
            return Err(PmcError::NotAllowed);
        }
        match self.check_event(value) {
            Ok(()) => Ok(value & !EVTSEL_EN),
            Err(e) => Err(e),
        }
    }

    const fn validate_fixed_ctrl(&self, value: u64, policy: Policy) -> Result<u64, PmcError> {
        if value & self.fixed_ctrl_reserved() != 0 {
            return Err(PmcError::ReservedBits);
        }
        if value & self.fixed_fields(FIXED_ANY | FIXED_PMI) != 0 {
            return Err(PmcError::NotAllowed);
        }
        if value & self.fixed_fields(FIXED_OS) != 0 && !policy.allow_kernel {
            return Err(PmcError::NotAllowed);
        }
        Ok(value)
    }

    /// Fixed counters a FIXED_CTR_CTRL value enables (OS or USR set), as a
    /// bitmap of fixed counter numbers.
    const fn fixed_enabled(&self, value: u64) -> u64 {
        let mut m = 0;
        let mut i = 0;
        while i < MAX_FIXED {
            if self.fixed_mask & bit(i) != 0
                && (value >> (i * FIXED_STRIDE)) & (FIXED_OS | FIXED_USR) != 0
            {
                m |= bit(i);
            }
            i += 1;
        }
        m
    }

    /// Maps PMD bits to GLOBAL_CTRL/STATUS bits: GP n at bit n, fixed n at
    /// bit 32 + n; PMDs that do not exist are dropped.
    const fn pmds_to_global(&self, pmds: u64) -> u64 {
        let gp = pmds & low_mask(self.num_gp);
        let fixed = (pmds >> PMD_FIXED0) & self.fixed_mask;
        gp | (fixed << GLOBAL_FIXED_SHIFT)
    }
}

impl HwPmu for IntelArch {
    fn name(&self) -> &'static str {
        "intel_arch"
    }

    fn impl_pmcs(&self) -> u64 {
        let ctrl = if self.fixed_mask != 0 {
            bit(PMC_FIXED_CTRL as u32)
        } else {
            0
        };
        low_mask(self.num_gp) | ctrl
    }

    fn impl_pmds(&self) -> u64 {
        low_mask(self.num_gp) | (self.fixed_mask << PMD_FIXED0)
    }

    fn pmc_desc(&self, pmc: usize) -> Option<RegDesc> {
        if self.gp_exists(pmc) {
            return Some(RegDesc {
                name: name_at(&EVTSEL_NAMES, pmc),
                msr: MSR_IA32_PERFEVTSEL0.wrapping_add(pmc as u32),
                kind: RegKind::EventSel,
                width: 64,
                hw_width: 64,
                rsvd_mask: self.evtsel_reserved() | EVTSEL_INT | EVTSEL_ANY | EVTSEL_PC,
                dfl_val: 0,
            });
        }
        if pmc == PMC_FIXED_CTRL && self.fixed_mask != 0 {
            return Some(RegDesc {
                name: "IA32_FIXED_CTR_CTRL",
                msr: MSR_IA32_FIXED_CTR_CTRL,
                kind: RegKind::FixedCtrl,
                width: 64,
                hw_width: 64,
                rsvd_mask: self.fixed_ctrl_reserved() | self.fixed_fields(FIXED_ANY | FIXED_PMI),
                dfl_val: 0,
            });
        }
        None
    }

    fn pmd_desc(&self, pmd: usize) -> Option<RegDesc> {
        if self.gp_exists(pmd) {
            let (name, msr) = if self.fw_write {
                (
                    name_at(&A_PMC_NAMES, pmd),
                    MSR_IA32_A_PMC0.wrapping_add(pmd as u32),
                )
            } else {
                (
                    name_at(&PMC_NAMES, pmd),
                    MSR_IA32_PMC0.wrapping_add(pmd as u32),
                )
            };
            return Some(RegDesc {
                name,
                msr,
                kind: RegKind::Counter,
                width: Self::armed_width(self.gp_width, self.fw_write),
                hw_width: self.gp_width,
                rsvd_mask: 0,
                dfl_val: 0,
            });
        }
        let f = pmd.wrapping_sub(PMD_FIXED0);
        if pmd >= PMD_FIXED0 && self.fixed_exists(f) {
            // Whether fixed counters sign-extend 32-bit writes where full-width
            // writes are not announced is not spelled out; arming at 31 bits
            // writes a value that is the same under either reading.
            return Some(RegDesc {
                name: name_at(&FIXED_NAMES, f),
                msr: MSR_IA32_FIXED_CTR0.wrapping_add(f as u32),
                kind: RegKind::FixedCounter,
                width: Self::armed_width(self.fixed_width, self.fw_write),
                hw_width: self.fixed_width,
                rsvd_mask: 0,
                dfl_val: 0,
            });
        }
        None
    }

    fn validate_pmc(&self, pmc: usize, value: u64, policy: Policy) -> Result<u64, PmcError> {
        if self.gp_exists(pmc) {
            self.validate_evtsel(value, policy)
        } else if pmc == PMC_FIXED_CTRL && self.fixed_mask != 0 {
            self.validate_fixed_ctrl(value, policy)
        } else {
            Err(PmcError::NotAvailable)
        }
    }

    fn pmc_pmds(&self, pmc: usize, value: u64) -> u64 {
        if self.gp_exists(pmc) {
            bit(pmc as u32)
        } else if pmc == PMC_FIXED_CTRL {
            self.fixed_enabled(value) << PMD_FIXED0
        } else {
            0
        }
    }

    fn pmc_hw_value(&self, pmc: usize, value: u64, enable: bool) -> u64 {
        if self.gp_exists(pmc) {
            let v = (value & !EVTSEL_EN) | EVTSEL_INT;
            if enable {
                v | EVTSEL_EN
            } else {
                v
            }
        } else if pmc == PMC_FIXED_CTRL && enable {
            // PMI for each enabled counter; the user value has none.
            let mut v = value & self.fixed_fields(FIXED_OS | FIXED_USR);
            let en = self.fixed_enabled(value);
            let mut i = 0;
            while i < MAX_FIXED {
                if en & bit(i) != 0 {
                    v |= FIXED_PMI << (i * FIXED_STRIDE);
                }
                i += 1;
            }
            v
        } else {
            0
        }
    }

    fn global_msrs(&self) -> Option<GlobalMsrs> {
        if self.has_global() {
            Some(GlobalMsrs {
                ctrl: MSR_IA32_PERF_GLOBAL_CTRL,
                status: MSR_IA32_PERF_GLOBAL_STATUS,
                ack: MSR_IA32_PERF_GLOBAL_OVF_CTRL,
            })
        } else {
            None
        }
    }

    fn global_ctrl_value(&self, pmds: u64) -> u64 {
        if self.has_global() {
            self.pmds_to_global(pmds)
        } else {
            0
        }
    }

    fn status_pmds(&self, status: u64) -> u64 {
        let gp = status & low_mask(self.num_gp);
        let fixed = (status >> GLOBAL_FIXED_SHIFT) & self.fixed_mask;
        gp | (fixed << PMD_FIXED0)
    }

    fn ack_value(&self, pmds: u64) -> u64 {
        self.global_ctrl_value(pmds)
    }

    fn event(&self, idx: usize) -> Option<(&'static str, u64)> {
        let mut n = 0;
        for (i, (name, ev, um)) in ARCH_EVENTS.iter().enumerate() {
            if self.events_avail & (1 << i) != 0 {
                if n == idx {
                    return Some((name, *ev as u64 | (*um as u64) << 8 | EVTSEL_USR));
                }
                n += 1;
            }
        }
        None
    }
}
