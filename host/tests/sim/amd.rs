// SPDX-License-Identifier: GPL-2.0

//! AMD64 performance counters, as the APM (vol. 2, "Performance Monitoring
//! Counters") and Linux (arch/x86/events/amd, arch/x86/kvm/svm/pmu.c)
//! describe them:
//!
//! - Legacy: PERF_CTL0..3 at 0xc0010000+n, PERF_CTR0..3 at 0xc0010004+n.
//! - Core extension (CPUID 0x80000001:ECX[23]): PERF_CTLn at 0xc0010200+2n,
//!   PERF_CTRn at 0xc0010201+2n, 6 counters (PerfMonV2: CPUID
//!   0x80000022:EBX[3:0]); the legacy MSRs alias counters 0..3.
//! - Counters are 48 bits, written at full width. This simulator #GPs on a
//!   counter write above bit 47 and on a PERF_CTL write of a reserved bit
//!   (19, 21, 39:36, 63:42); KVM says real AMD parts ignore reserved bits
//!   instead. Being stricter than the hardware shows the module never
//!   depends on either behaviour.
//! - No global registers without PerfMonV2; with it, GlobalCtl (0xc0000301,
//!   reserved bits ignored, GP bits set at RESET), GlobalStatus (0xc0000300,
//!   read-only: writes ignored), GlobalStatusClr (0xc0000302, write ones to
//!   clear; reads 0).
//! - SVM is off (EFER.SVME = 0): a counter with exactly one of HostOnly /
//!   GuestOnly set counts nothing (Linux's amd_pmu_disable_virt comment);
//!   both or neither count everything.

use super::{add_wrapping, Gp, MsrBus, Ring};
use pfm_host_tests::pfm_x86::model::CpuidRegs;

const RESERVED: u64 = 1 << 19 | 1 << 21 | 0xf << 36 | !((1u64 << 42) - 1);
const WIDTH: u32 = 48;

/// What CPUID says.
#[derive(Clone, Copy, Debug)]
pub struct AmdCfg {
    /// PerfCtrExtCore.
    pub core_ext: bool,
    /// PerfMonV2 (only with `core_ext`).
    pub v2: bool,
    /// Counters under PerfMonV2 (EBX[3:0]).
    pub v2_counters: u32,
}

impl AmdCfg {
    /// CPUID 0x80000001:ECX.
    pub fn ext1_ecx(&self) -> u32 {
        if self.core_ext {
            1 << 23
        } else {
            0
        }
    }

    /// CPUID 0x80000022.
    pub fn leaf_0x80000022(&self) -> CpuidRegs {
        if self.v2 {
            CpuidRegs {
                eax: 1,
                ebx: self.v2_counters,
                ecx: 0,
                edx: 0,
            }
        } else {
            CpuidRegs::default()
        }
    }

    /// Number of counters.
    pub fn num(&self) -> usize {
        match (self.core_ext, self.v2) {
            (false, _) => 4,
            (true, false) => 6,
            (true, true) => self.v2_counters as usize,
        }
    }
}

/// The simulated PMU.
#[derive(Clone, Debug)]
pub struct AmdSim {
    /// What CPUID says.
    pub cfg: AmdCfg,
    /// PERF_CTLn.
    pub ctl: [u64; 16],
    /// PERF_CTRn.
    pub ctr: [u64; 16],
    /// PerfMonV2 GlobalCtl.
    pub global_ctl: u64,
    /// PerfMonV2 GlobalStatus.
    pub global_status: u64,
    /// Events each counter counted, never overwritten.
    pub counted: [u128; 16],
    /// PMIs raised.
    pub pmis: u64,
    /// Every successful write, in order.
    pub writes: Vec<(u32, u64)>,
    /// Events delivered after every MSR access.
    pub inject: Option<(u16, u8, Ring, u64)>,
}

impl AmdSim {
    /// A PMU right after RESET.
    pub fn new(cfg: AmdCfg) -> Self {
        AmdSim {
            cfg,
            ctl: [0; 16],
            ctr: [0; 16],
            global_ctl: if cfg.v2 { (1 << cfg.num()) - 1 } else { 0 },
            global_status: 0,
            counted: [0; 16],
            pmis: 0,
            writes: Vec::new(),
            inject: None,
        }
    }

    /// The counter an MSR addresses and whether it is the CTL.
    fn decode(&self, msr: u32) -> Option<(usize, bool)> {
        match msr {
            0xc001_0000..=0xc001_0003 => Some(((msr - 0xc001_0000) as usize, true)),
            0xc001_0004..=0xc001_0007 => Some(((msr - 0xc001_0004) as usize, false)),
            0xc001_0200..=0xc001_022f if self.cfg.core_ext => {
                let off = msr - 0xc001_0200;
                let i = (off / 2) as usize;
                (i < self.cfg.num()).then_some((i, off & 1 == 0))
            }
            _ => None,
        }
    }

    fn read(&self, msr: u32) -> Result<u64, Gp> {
        if let Some((i, is_ctl)) = self.decode(msr) {
            return Ok(if is_ctl { self.ctl[i] } else { self.ctr[i] });
        }
        match msr {
            0xc000_0300 if self.cfg.v2 => Ok(self.global_status),
            0xc000_0301 if self.cfg.v2 => Ok(self.global_ctl),
            0xc000_0302 if self.cfg.v2 => Ok(0),
            _ => Err(Gp { msr, value: None }),
        }
    }

    fn write(&mut self, msr: u32, v: u64) -> Result<(), Gp> {
        let gp = Err(Gp {
            msr,
            value: Some(v),
        });
        let counters = (1u64 << self.cfg.num()) - 1;
        if let Some((i, is_ctl)) = self.decode(msr) {
            if is_ctl {
                if v & RESERVED != 0 {
                    return gp;
                }
                self.ctl[i] = v;
            } else {
                if v >> WIDTH != 0 {
                    return gp;
                }
                self.ctr[i] = v;
            }
            return Ok(());
        }
        match msr {
            0xc000_0300 if self.cfg.v2 => {}
            0xc000_0301 if self.cfg.v2 => self.global_ctl = v & counters,
            0xc000_0302 if self.cfg.v2 => self.global_status &= !v,
            _ => return gp,
        }
        Ok(())
    }

    fn inject(&mut self) {
        if let Some((ev, um, ring, n)) = self.inject {
            self.count(ev, um, ring, n);
        }
    }

    /// Whether counter `i` counts event `ev`/`um` at `ring` now.
    pub fn active(&self, i: usize, ev: u16, um: u8, ring: Ring) -> bool {
        let c = self.ctl[i];
        let ring_bit = match ring {
            Ring::User => 1 << 16,
            Ring::Kernel => 1 << 17,
        };
        let event = (c & 0xff) | ((c >> 24) & 0xf00);
        let ho_go = (c >> 40) & 3;
        c & (1 << 22) != 0
            && (!self.cfg.v2 || self.global_ctl & (1 << i) != 0)
            && c & ring_bit != 0
            && event == ev as u64
            && ((c >> 8) & 0xff) as u8 == um
            && (ho_go == 0 || ho_go == 3)
    }

    /// Delivers `n` occurrences of event `ev` with unit mask `um` at `ring`.
    pub fn count(&mut self, ev: u16, um: u8, ring: Ring, n: u64) {
        for i in 0..self.cfg.num() {
            if self.active(i, ev, um, ring) {
                let (v, wrapped) = add_wrapping(self.ctr[i], n, WIDTH);
                self.ctr[i] = v;
                self.counted[i] += n as u128;
                if wrapped {
                    if self.cfg.v2 {
                        self.global_status |= 1 << i;
                    }
                    if self.ctl[i] & (1 << 20) != 0 {
                        self.pmis += 1;
                    }
                }
            }
        }
    }
}

impl MsrBus for AmdSim {
    fn rdmsr(&mut self, msr: u32) -> Result<u64, Gp> {
        let r = self.read(msr);
        self.inject();
        r
    }

    fn wrmsr(&mut self, msr: u32, value: u64) -> Result<(), Gp> {
        self.write(msr, value)?;
        self.writes.push((msr, value));
        self.inject();
        Ok(())
    }

    fn take_pmis(&mut self) -> u64 {
        std::mem::take(&mut self.pmis)
    }
}
