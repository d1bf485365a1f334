// SPDX-License-Identifier: GPL-2.0

//! A register-file simulator of Intel architectural performance monitoring
//! v1..v5, as the SDM describes the MSRs (vol. 3B, "Architectural Performance Monitoring"):
//!
//! - IA32_PERFEVTSELn (0x186+n): bits 63:32 reserved (#GP), ANY (bit 21)
//!   reserved before v3 and when v5 deprecates it.
//! - IA32_PMCn (0xc1+n): a write sets bits 31:0 from EAX and sign-extends
//!   bit 31 to the counter's width (EDX ignored). A read returns the
//!   counter's width bits.
//! - IA32_A_PMCn (0x4c1+n): only with PERF_CAPABILITIES.FW_WRITE; writes the
//!   full width; bits above the width #GP.
//! - IA32_FIXED_CTRn (0x309+n), v2+, for each fixed counter CPUID
//!   enumerates (v5: EDX[4:0] > n or ECX[n]): full-width writes; bits above
//!   the width #GP.
//! - IA32_FIXED_CTR_CTRL (0x38d), v2+: 4 bits per existing counter (OS, USR,
//!   ANY from v3, PMI); any other bit #GP.
//! - IA32_PERF_GLOBAL_CTRL (0x38f), v2+: one enable per counter (GP n at n,
//!   fixed n at 32+n); other bits #GP. After RESET the GP bits are set and
//!   the fixed bits clear, so v1-style software works.
//! - IA32_PERF_GLOBAL_STATUS (0x38e), v2+: read-only (a write #GPs); a
//!   counter's bit is set when it wraps, whether or not its PMI is enabled.
//! - IA32_PERF_GLOBAL_OVF_CTRL (0x390), v2+ (STATUS_RESET from v4): writing
//!   a one clears the status bit; bits that are neither a counter's nor 62
//!   (OvfBuf) and 63 (CondChgd) (plus 58/59, the freeze bits, from v4) #GP.
//! - A counter counts when its enable is set (EN, or the fixed field's
//!   OS/USR for the current ring) and, from v2, its GLOBAL_CTRL bit.
//!
//! Pure logic (`core` only): the host tests drive it as the hardware the
//! models are checked against, and the module runs it, one per CPU, as the
//! `intel_arch_sim` model, so that the kernel side of the hardware models
//! (MSR save and restore at context switch, the PMI) runs where no PMU is.

use super::driver::{MsrBus, MsrFault};
use super::model::CpuidRegs;

/// A general-protection fault raised by an MSR access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gp {
    /// The MSR.
    pub msr: u32,
    /// The value written, `None` for a read.
    pub value: Option<u64>,
}

/// The privilege level an event happens at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ring {
    /// CPL > 0: counted when USR is set.
    User,
    /// CPL 0: counted when OS is set.
    Kernel,
}

/// The low `n` bits.
pub fn mask(n: u32) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

/// Adds `n` to a `width`-bit counter; returns the new value and whether it
/// wrapped (crossed 2^width) at least once.
pub fn add_wrapping(counter: u64, n: u64, width: u32) -> (u64, bool) {
    let total = counter as u128 + n as u128;
    let wraps = total >> width;
    ((total as u64) & mask(width), wraps != 0)
}

/// The event a fixed counter counts: fixed 0 instructions, 1 core cycles, 2
/// reference cycles, 3 topdown slots; others a pseudo encoding (0, n+1).
pub fn fixed_event(n: usize) -> (u8, u8) {
    match n {
        0 => (0xc0, 0x00),
        1 => (0x3c, 0x00),
        2 => (0x3c, 0x01),
        3 => (0xa4, 0x01),
        _ => (0x00, n as u8 + 1),
    }
}

/// What CPUID leaf 0xA and PERF_CAPABILITIES report.
#[derive(Clone, Copy, Debug)]
pub struct IntelCfg {
    /// EAX[7:0].
    pub version: u32,
    /// EAX[15:8].
    pub num_gp: u32,
    /// EAX[23:16].
    pub gp_width: u32,
    /// EAX[31:24].
    pub mask_len: u32,
    /// EBX: bit n set, architectural event n unavailable.
    pub unavailable: u32,
    /// EDX[4:0].
    pub nfixed: u32,
    /// ECX (v5): fixed counter bitmap.
    pub fixed_bitmap: u32,
    /// EDX[12:5].
    pub fixed_width: u32,
    /// EDX[15] (v5): AnyThread deprecated.
    pub any_deprecated: bool,
    /// PERF_CAPABILITIES[13].
    pub fw_write: bool,
}

impl IntelCfg {
    /// A v1 PMU: `gp` counters of `width` bits.
    pub fn v1(gp: u32, width: u32) -> Self {
        IntelCfg {
            version: 1,
            num_gp: gp,
            gp_width: width,
            mask_len: 7,
            unavailable: 0,
            nfixed: 0,
            fixed_bitmap: 0,
            fixed_width: 0,
            any_deprecated: false,
            fw_write: false,
        }
    }

    /// A v2+ PMU with `nfixed` fixed counters of `fwidth` bits.
    pub fn v(version: u32, gp: u32, width: u32, nfixed: u32, fwidth: u32, fw_write: bool) -> Self {
        IntelCfg {
            version,
            num_gp: gp,
            gp_width: width,
            mask_len: if version >= 5 { 8 } else { 7 },
            unavailable: 0,
            nfixed,
            fixed_bitmap: 0,
            fixed_width: fwidth,
            any_deprecated: false,
            fw_write,
        }
    }

    /// CPUID leaf 0xA as this PMU reports it.
    pub fn cpuid(&self) -> CpuidRegs {
        CpuidRegs {
            eax: self.version | self.num_gp << 8 | self.gp_width << 16 | self.mask_len << 24,
            ebx: self.unavailable,
            ecx: if self.version >= 5 {
                self.fixed_bitmap
            } else {
                0
            },
            edx: if self.version >= 2 {
                self.nfixed | self.fixed_width << 5 | (self.any_deprecated as u32) << 15
            } else {
                0
            },
        }
    }

    /// IA32_PERF_CAPABILITIES.
    pub fn perf_capabilities(&self) -> u64 {
        if self.fw_write {
            1 << 13
        } else {
            0
        }
    }

    /// Whether fixed counter `n` exists.
    pub fn fixed_exists(&self, n: usize) -> bool {
        self.version >= 2
            && n < 32
            && (n < self.nfixed as usize
                || (self.version >= 5 && self.fixed_bitmap & (1 << n) != 0))
    }

    /// Whether the ANY bits exist.
    pub fn any_ok(&self) -> bool {
        self.version >= 3 && !(self.version >= 5 && self.any_deprecated)
    }

    fn counter_bits(&self) -> u64 {
        let mut m = mask(self.num_gp);
        for n in 0..32 {
            if self.fixed_exists(n) {
                m |= 1 << (32 + n);
            }
        }
        m
    }

    fn fixed_ctrl_valid(&self) -> u64 {
        let per = if self.any_ok() { 0xf } else { 0xb };
        let mut m = 0;
        for n in 0..16 {
            if self.fixed_exists(n) {
                m |= per << (4 * n);
            }
        }
        m
    }
}

/// The simulated PMU.
#[derive(Clone, Debug)]
pub struct IntelSim {
    /// What CPUID says.
    pub cfg: IntelCfg,
    /// IA32_PERFEVTSELn.
    pub evtsel: [u64; 32],
    /// IA32_PMCn.
    pub pmc: [u64; 32],
    /// IA32_FIXED_CTRn.
    pub fixed: [u64; 16],
    /// IA32_FIXED_CTR_CTRL.
    pub fixed_ctrl: u64,
    /// IA32_PERF_GLOBAL_CTRL.
    pub global_ctrl: u64,
    /// IA32_PERF_GLOBAL_STATUS.
    pub global_status: u64,
    /// Events each GP counter counted, never overwritten: the truth.
    pub counted_gp: [u128; 32],
    /// Events each fixed counter counted.
    pub counted_fixed: [u128; 16],
    /// PMIs raised.
    pub pmis: u64,
    /// Events delivered after every MSR access: the CPU runs on between
    /// the kernel's accesses.
    pub inject: Option<((u8, u8), Ring, u64)>,
}

impl IntelSim {
    /// A PMU right after RESET.
    pub fn new(cfg: IntelCfg) -> Self {
        IntelSim {
            cfg,
            evtsel: [0; 32],
            pmc: [0; 32],
            fixed: [0; 16],
            fixed_ctrl: 0,
            global_ctrl: if cfg.version >= 2 {
                mask(cfg.num_gp)
            } else {
                0
            },
            global_status: 0,
            counted_gp: [0; 32],
            counted_fixed: [0; 16],
            pmis: 0,
            inject: None,
        }
    }

    fn gp_index(&self, msr: u32, base: u32) -> Option<usize> {
        let i = msr.checked_sub(base)? as usize;
        (i < self.cfg.num_gp as usize).then_some(i)
    }

    fn fixed_index(&self, msr: u32) -> Option<usize> {
        let i = msr.checked_sub(0x309)? as usize;
        (i < 16 && self.cfg.fixed_exists(i)).then_some(i)
    }

    fn v2(&self) -> bool {
        self.cfg.version >= 2
    }

    fn ovf_ctrl_valid(&self) -> u64 {
        let mut m = self.cfg.counter_bits() | 1 << 62 | 1 << 63;
        if self.cfg.version >= 4 {
            m |= 1 << 58 | 1 << 59;
        }
        m
    }

    /// RDMSR: the register's value, or #GP.
    pub fn read(&self, msr: u32) -> Result<u64, Gp> {
        let gp = Err(Gp { msr, value: None });
        if let Some(i) = self.gp_index(msr, 0xc1) {
            return Ok(self.pmc[i]);
        }
        if let Some(i) = self.gp_index(msr, 0x4c1) {
            return if self.cfg.fw_write {
                Ok(self.pmc[i])
            } else {
                gp
            };
        }
        if let Some(i) = self.gp_index(msr, 0x186) {
            return Ok(self.evtsel[i]);
        }
        if let Some(i) = self.fixed_index(msr) {
            return Ok(self.fixed[i]);
        }
        match msr {
            0x345 => Ok(self.cfg.perf_capabilities()),
            0x38d if self.v2() => Ok(self.fixed_ctrl),
            0x38e if self.v2() => Ok(self.global_status),
            0x38f if self.v2() => Ok(self.global_ctrl),
            0x390 if self.v2() => Ok(0),
            _ => gp,
        }
    }

    /// WRMSR: stores the value, or #GP (reserved bits, absent register).
    pub fn write(&mut self, msr: u32, v: u64) -> Result<(), Gp> {
        let gp = Err(Gp {
            msr,
            value: Some(v),
        });
        let w = self.cfg.gp_width;
        if let Some(i) = self.gp_index(msr, 0xc1) {
            // EAX sign-extended; EDX ignored.
            self.pmc[i] = (v as u32 as i32 as i64 as u64) & mask(w);
            return Ok(());
        }
        if let Some(i) = self.gp_index(msr, 0x4c1) {
            if !self.cfg.fw_write || v & !mask(w) != 0 {
                return gp;
            }
            self.pmc[i] = v;
            return Ok(());
        }
        if let Some(i) = self.gp_index(msr, 0x186) {
            let mut rsvd = !mask(32);
            if !self.cfg.any_ok() {
                rsvd |= 1 << 21;
            }
            if v & rsvd != 0 {
                return gp;
            }
            self.evtsel[i] = v;
            return Ok(());
        }
        if let Some(i) = self.fixed_index(msr) {
            if v & !mask(self.cfg.fixed_width) != 0 {
                return gp;
            }
            self.fixed[i] = v;
            return Ok(());
        }
        match msr {
            0x38d if self.v2() => {
                if v & !self.cfg.fixed_ctrl_valid() != 0 {
                    return gp;
                }
                self.fixed_ctrl = v;
            }
            0x38f if self.v2() => {
                if v & !self.cfg.counter_bits() != 0 {
                    return gp;
                }
                self.global_ctrl = v;
            }
            0x390 if self.v2() => {
                if v & !self.ovf_ctrl_valid() != 0 {
                    return gp;
                }
                self.global_status &= !v;
            }
            _ => return gp,
        }
        Ok(())
    }

    /// Delivers the events of `inject`, if any.
    pub fn inject(&mut self) {
        if let Some((ev, ring, n)) = self.inject {
            self.count(ev, ring, n);
        }
    }

    /// Whether GP counter `i` counts `ev` at `ring` now.
    pub fn gp_active(&self, i: usize, ev: (u8, u8), ring: Ring) -> bool {
        let s = self.evtsel[i];
        let ring_bit = match ring {
            Ring::User => 1 << 16,
            Ring::Kernel => 1 << 17,
        };
        s & (1 << 22) != 0
            && (!self.v2() || self.global_ctrl & (1 << i) != 0)
            && s & ring_bit != 0
            && (s & 0xff) as u8 == ev.0
            && ((s >> 8) & 0xff) as u8 == ev.1
    }

    /// Whether fixed counter `n` counts `ev` at `ring` now.
    pub fn fixed_active(&self, n: usize, ev: (u8, u8), ring: Ring) -> bool {
        let field = (self.fixed_ctrl >> (4 * n)) & 0xf;
        let ring_bit = match ring {
            Ring::User => 2,
            Ring::Kernel => 1,
        };
        self.cfg.fixed_exists(n)
            && field & ring_bit != 0
            && self.global_ctrl & (1 << (32 + n)) != 0
            && fixed_event(n) == ev
    }

    /// Delivers `n` occurrences of event `ev` (event select, unit mask) at
    /// `ring`.
    pub fn count(&mut self, ev: (u8, u8), ring: Ring, n: u64) {
        for i in 0..self.cfg.num_gp as usize {
            if self.gp_active(i, ev, ring) {
                let (v, wrapped) = add_wrapping(self.pmc[i], n, self.cfg.gp_width);
                self.pmc[i] = v;
                self.counted_gp[i] += n as u128;
                if wrapped {
                    if self.v2() {
                        self.global_status |= 1 << i;
                    }
                    if self.evtsel[i] & (1 << 20) != 0 {
                        self.pmis += 1;
                    }
                }
            }
        }
        for f in 0..16 {
            if self.fixed_active(f, ev, ring) {
                let (v, wrapped) = add_wrapping(self.fixed[f], n, self.cfg.fixed_width);
                self.fixed[f] = v;
                self.counted_fixed[f] += n as u128;
                if wrapped {
                    self.global_status |= 1 << (32 + f);
                    if (self.fixed_ctrl >> (4 * f)) & 8 != 0 {
                        self.pmis += 1;
                    }
                }
            }
        }
    }
}

impl IntelSim {
    /// PMIs raised since the last call, and clears the count.
    pub fn take_pmis(&mut self) -> u64 {
        core::mem::take(&mut self.pmis)
    }
}

/// The simulator as the module's MSR bus: the CPU runs on (`inject`) after
/// every access.
impl MsrBus for IntelSim {
    fn rdmsr(&mut self, msr: u32) -> Result<u64, MsrFault> {
        let r = self.read(msr).map_err(|g| MsrFault { msr: g.msr });
        self.inject();
        r
    }

    fn wrmsr(&mut self, msr: u32, value: u64) -> Result<(), MsrFault> {
        self.write(msr, value)
            .map_err(|g| MsrFault { msr: g.msr })?;
        self.inject();
        Ok(())
    }
}
