// SPDX-License-Identifier: GPL-2.0

//! `pfm_x86/intel_arch.rs` against the Intel simulator: probing, every bit of
//! every PMC, every register write path, every overflow path.

mod sim;

use pfm_host_tests::abi::{PfmInfo, PFM_MAX_PMCS, PFM_MAX_PMDS};
use pfm_host_tests::pfm_counter::period_to_value;
use pfm_host_tests::pfm_x86::intel_arch::*;
use pfm_host_tests::pfm_x86::model::{CpuidRegs, HwPmu, PmcError, Policy, RegKind};
use sim::driver::Driver;
use sim::intel::{fixed_event, IntelCfg, IntelSim};
use sim::{mask, short_of_wrap, MsrBus, Ring};

const KERNEL_OK: Policy = Policy { allow_kernel: true };
const USER_ONLY: Policy = Policy {
    allow_kernel: false,
};

fn model(cfg: &IntelCfg) -> IntelArch {
    IntelArch::probe(cfg.cpuid(), cfg.perf_capabilities()).expect("a PMU")
}

/// Assorted PMUs: every version, with and without full-width writes, fixed
/// counters by count and by bitmap, widths from 32 to 64.
fn configs() -> Vec<IntelCfg> {
    let mut v = vec![
        IntelCfg::v1(2, 40),
        IntelCfg::v1(4, 32),
        IntelCfg {
            fw_write: true,
            ..IntelCfg::v1(2, 48)
        },
        IntelCfg::v(2, 2, 40, 3, 40, false),
        IntelCfg::v(2, 2, 32, 1, 32, false),
        IntelCfg::v(3, 4, 48, 3, 48, false),
        IntelCfg::v(4, 8, 48, 3, 48, true),
        IntelCfg::v(4, 4, 64, 2, 64, true),
    ];
    v.push(IntelCfg {
        fixed_bitmap: 0b1_0000_0000,
        any_deprecated: true,
        ..IntelCfg::v(5, 8, 48, 4, 48, true)
    });
    v.push(IntelCfg {
        fixed_bitmap: 0b1011,
        ..IntelCfg::v(5, 6, 48, 0, 48, false)
    });
    v
}

#[test]
fn probe_assorted_cpuid() {
    assert_eq!(IntelArch::probe(CpuidRegs::default(), 0), None, "zero leaf");
    assert_eq!(
        IntelArch::probe(CpuidRegs::default(), PERF_CAP_FW_WRITE),
        None
    );

    // v1, 2 GP counters of 40 bits: no fixed counters, no global registers.
    let m = model(&IntelCfg::v1(2, 40));
    assert_eq!((m.version(), m.num_gp(), m.fixed_mask()), (1, 2, 0));
    assert_eq!((m.impl_pmcs(), m.impl_pmds()), (0b11, 0b11));
    assert!(m.global_msrs().is_none());
    let d = m.pmd_desc(1).unwrap();
    assert_eq!(
        (d.name, d.msr, d.kind, d.width, d.hw_width),
        ("IA32_PMC1", 0xc2, RegKind::Counter, 31, 40)
    );
    let d = m.pmc_desc(1).unwrap();
    assert_eq!(
        (d.name, d.msr, d.kind),
        ("IA32_PERFEVTSEL1", 0x187, RegKind::EventSel)
    );
    assert!(
        m.pmc_desc(2).is_none() && m.pmc_desc(PMC_FIXED_CTRL).is_none() && m.pmd_desc(16).is_none()
    );
    assert!(!m.has_any_thread());

    // v2 with 3 fixed counters of 40 bits.
    let m = model(&IntelCfg::v(2, 2, 40, 3, 40, false));
    assert_eq!(m.fixed_mask(), 0b111);
    assert_eq!(m.impl_pmcs(), 0b11 | 1 << 16);
    assert_eq!(m.impl_pmds(), 0b11 | 0b111 << 16);
    let d = m.pmc_desc(16).unwrap();
    assert_eq!(
        (d.name, d.msr, d.kind),
        ("IA32_FIXED_CTR_CTRL", 0x38d, RegKind::FixedCtrl)
    );
    let d = m.pmd_desc(18).unwrap();
    assert_eq!(
        (d.name, d.msr, d.kind, d.width, d.hw_width),
        ("IA32_FIXED_CTR2", 0x30b, RegKind::FixedCounter, 31, 40)
    );
    let g = m.global_msrs().unwrap();
    assert_eq!((g.ctrl, g.status, g.ack), (0x38f, 0x38e, 0x390));
    assert!(!m.has_any_thread());

    // v3: any-thread exists (and is refused).
    assert!(model(&IntelCfg::v(3, 4, 48, 3, 48, false)).has_any_thread());

    // v4 with 8 GP counters of 48 bits and full-width writes.
    let m = model(&IntelCfg::v(4, 8, 48, 3, 48, true));
    assert!(m.full_width_writes());
    let d = m.pmd_desc(7).unwrap();
    assert_eq!(
        (d.name, d.msr, d.width, d.hw_width),
        ("IA32_A_PMC7", 0x4c8, 47, 48)
    );
    assert_eq!(m.pmd_desc(16).map(|d| d.width), Some(47));
    assert_eq!(m.counter_width(), 47);
    // Other capability bits do not mean full-width writes.
    let c = IntelCfg::v(4, 8, 48, 3, 48, false);
    let m = IntelArch::probe(c.cpuid(), !PERF_CAP_FW_WRITE).unwrap();
    assert_eq!(m.pmd_desc(0).map(|d| (d.msr, d.width)), Some((0xc1, 31)));

    // v5: fixed counters by bitmap, alone and with a contiguous count.
    let c = IntelCfg {
        fixed_bitmap: 0b1001,
        ..IntelCfg::v(5, 8, 48, 0, 48, true)
    };
    assert_eq!(model(&c).impl_pmds(), 0xff | 1 << 16 | 1 << 19);
    assert_eq!(model(&c).pmd_desc(19).map(|d| d.msr), Some(0x30c));
    let c = IntelCfg {
        fixed_bitmap: 0b1000,
        ..IntelCfg::v(5, 8, 48, 2, 48, true)
    };
    assert_eq!(model(&c).fixed_mask(), 0b1011);
    // Before v5, ECX means nothing.
    let mut leaf = IntelCfg::v(4, 8, 48, 2, 48, true).cpuid();
    leaf.ecx = 0b1000;
    assert_eq!(IntelArch::probe(leaf, 0).unwrap().fixed_mask(), 0b11);
    // v5 may deprecate any-thread.
    assert!(model(&IntelCfg::v(5, 8, 48, 4, 48, true)).has_any_thread());
    assert!(!model(&IntelCfg {
        any_deprecated: true,
        ..IntelCfg::v(5, 8, 48, 4, 48, true)
    })
    .has_any_thread());

    // Unavailable events: EBX bits, and the vector length.
    let c = IntelCfg {
        unavailable: 0b10,
        ..IntelCfg::v(4, 8, 48, 3, 48, true)
    };
    assert_eq!(model(&c).events_available(), 0b111_1101);
    let c = IntelCfg {
        unavailable: 0b10,
        mask_len: 4,
        ..c
    };
    assert_eq!(model(&c).events_available(), 0b1101);

    // More GP counters than the ABI maps: capped, PMC16 stays the fixed control.
    let m = model(&IntelCfg::v(4, 20, 48, 3, 48, true));
    assert_eq!(m.num_gp(), 16);
    assert_eq!(m.pmc_desc(16).map(|d| d.kind), Some(RegKind::FixedCtrl));
    assert!(m.pmc_desc(17).is_none() && m.pmd_desc(15).is_some());

    // Implausible widths are not believed.
    assert_eq!(IntelArch::probe(IntelCfg::v1(2, 0).cpuid(), 0), None);
    assert_eq!(IntelArch::probe(IntelCfg::v1(2, 65).cpuid(), 0), None);
    assert_eq!(model(&IntelCfg::v(2, 2, 48, 3, 0, false)).fixed_mask(), 0);
    // Fixed counters only (no GP counter) is a PMU.
    let m = model(&IntelCfg::v(2, 0, 0, 3, 48, false));
    assert_eq!((m.impl_pmcs(), m.impl_pmds()), (1 << 16, 0b111 << 16));
}

#[test]
fn absent_registers_are_not_available() {
    for cfg in configs() {
        let m = model(&cfg);
        for r in 0..PFM_MAX_PMCS + 8 {
            let exists = m.impl_pmcs() & (1u64 << r.min(63)) != 0 && r < 64;
            assert_eq!(m.pmc_desc(r).is_some(), exists, "{cfg:?} pmc {r}");
            if !exists {
                assert_eq!(m.validate_pmc(r, 0, KERNEL_OK), Err(PmcError::NotAvailable));
                assert_eq!(m.pmc_hw_value(r, 0, true), 0);
                assert_eq!(m.pmc_pmds(r, !0), 0);
            }
        }
        for r in 0..PFM_MAX_PMDS + 8 {
            let exists = r < 64 && m.impl_pmds() & (1u64 << r.min(63)) != 0;
            assert_eq!(m.pmd_desc(r).is_some(), exists, "{cfg:?} pmd {r}");
            assert_eq!(m.pmd_write(r, 5).is_some(), exists);
        }
    }
}

/// What the SDM says of PERFEVTSEL bit `b` for a user value, given the PMU.
fn evtsel_bit_verdict(cfg: &IntelCfg, b: u32, policy: Policy) -> Result<u64, PmcError> {
    match b {
        17 if !policy.allow_kernel => Err(PmcError::NotAllowed),
        0..=18 | 23..=31 => Ok(1 << b),
        19 | 20 => Err(PmcError::NotAllowed),
        21 if cfg.any_ok() => Err(PmcError::NotAllowed),
        21 => Err(PmcError::ReservedBits),
        22 => Ok(0),
        _ => Err(PmcError::ReservedBits),
    }
}

#[test]
fn every_evtsel_bit_individually() {
    for cfg in configs().into_iter().filter(|c| c.num_gp > 0) {
        let m = model(&cfg);
        for pmc in 0..m.num_gp() as usize {
            let d = m.pmc_desc(pmc).unwrap();
            for b in 0..64 {
                let v = 1u64 << b;
                for policy in [KERNEL_OK, USER_ONLY] {
                    assert_eq!(
                        m.validate_pmc(pmc, v, policy),
                        evtsel_bit_verdict(&cfg, b, policy),
                        "{cfg:?} bit {b}"
                    );
                }
                // The published reserved mask is what is refused whatever the policy.
                assert_eq!(
                    d.rsvd_mask & v != 0,
                    m.validate_pmc(pmc, v, KERNEL_OK).is_err(),
                    "bit {b}"
                );
                // A bit the hardware reserves is always refused.
                let mut sim = IntelSim::new(cfg);
                if sim.wrmsr(d.msr, v).is_err() {
                    assert!(
                        m.validate_pmc(pmc, v, KERNEL_OK).is_err(),
                        "{cfg:?} bit {b} #GPs"
                    );
                }
                // What is accepted programs without a #GP, stopped or running.
                if let Ok(ok) = m.validate_pmc(pmc, v, KERNEL_OK) {
                    for en in [false, true] {
                        let hw = m.pmc_hw_value(pmc, ok, en);
                        assert_eq!(
                            hw & (EVTSEL_INT | EVTSEL_EN),
                            EVTSEL_INT | if en { EVTSEL_EN } else { 0 }
                        );
                        assert_eq!(sim.wrmsr(d.msr, hw), Ok(()), "{cfg:?} bit {b}");
                    }
                }
            }
        }
    }
}

#[test]
fn evtsel_values() {
    let m = model(&IntelCfg::v(4, 8, 48, 3, 48, true));
    // libpfm-style encodings carry INT: refused; EN alone is dropped.
    assert_eq!(
        m.validate_pmc(0, 0x5300c0, KERNEL_OK),
        Err(PmcError::NotAllowed)
    );
    assert_eq!(m.validate_pmc(0, 0x4100c0, USER_ONLY), Ok(0x0100c0));
    assert_eq!(
        m.validate_pmc(0, 0x4300c0, USER_ONLY),
        Err(PmcError::NotAllowed)
    );
    // CMASK, INV and EDGE are the user's.
    assert_eq!(m.validate_pmc(3, 0xff85_01a2, USER_ONLY), Ok(0xff85_01a2));
    assert_eq!(
        m.validate_pmc(3, 0x0105_00a3 | EVTSEL_ANY, KERNEL_OK),
        Err(PmcError::NotAllowed)
    );
    // Neither USR nor OS is allowed: it counts nothing.
    assert_eq!(m.validate_pmc(0, 0xc0, USER_ONLY), Ok(0xc0));
    assert_eq!(m.pmc_hw_value(0, 0x0100c0, true), 0x5100c0);
    assert_eq!(m.pmc_hw_value(0, 0x0100c0, false), 0x1100c0);
}

#[test]
fn unavailable_architectural_events_are_refused() {
    let base = IntelCfg::v(4, 4, 48, 3, 48, true);
    let m = model(&IntelCfg {
        unavailable: 0b10,
        ..base
    });
    assert_eq!(
        m.validate_pmc(0, 0x100c0, USER_ONLY),
        Err(PmcError::EventUnavailable)
    );
    assert_eq!(
        PmcError::EventUnavailable.retfl(),
        pfm_host_tests::abi::PFM_REG_RETFL_EINVAL
    );
    // Same event select, another unit mask: a model-specific event.
    assert_eq!(m.validate_pmc(0, 0x101c0, USER_ONLY), Ok(0x101c0));
    assert_eq!(m.validate_pmc(0, 0x1003c, USER_ONLY), Ok(0x1003c));
    // Past the vector length: unavailable.
    let m = model(&IntelCfg {
        mask_len: 5,
        ..base
    });
    assert_eq!(
        m.validate_pmc(0, 0x100c4, USER_ONLY),
        Err(PmcError::EventUnavailable)
    );
    assert_eq!(m.validate_pmc(0, 0x1412e, USER_ONLY), Ok(0x1412e));
    let m = model(&IntelCfg {
        mask_len: 7,
        ..base
    });
    assert_eq!(
        m.validate_pmc(0, 0x101a4, USER_ONLY),
        Err(PmcError::EventUnavailable)
    );
    let m = model(&IntelCfg {
        mask_len: 8,
        ..base
    });
    assert_eq!(m.validate_pmc(0, 0x101a4, USER_ONLY), Ok(0x101a4));
    // Every available event validates; the list skips the others.
    let m = model(&IntelCfg {
        unavailable: 0b100_0010,
        ..base
    });
    let names: Vec<_> = (0..16).filter_map(|i| m.event(i)).collect();
    assert_eq!(names.len(), 5);
    assert_eq!(names[0], ("cpu-cycles", 0x1003c));
    assert_eq!(names[1], ("ref-cycles", 0x1013c));
    for (_, code) in names {
        assert_eq!(m.validate_pmc(0, code, USER_ONLY), Ok(code));
    }
}

/// What the SDM says of FIXED_CTR_CTRL bit `b` for a user value.
fn fixed_bit_verdict(cfg: &IntelCfg, b: u32, policy: Policy) -> Result<u64, PmcError> {
    let n = (b / 4) as usize;
    if !cfg.fixed_exists(n) || n >= 16 {
        return Err(PmcError::ReservedBits);
    }
    match b % 4 {
        0 if !policy.allow_kernel => Err(PmcError::NotAllowed),
        0 | 1 => Ok(1 << b),
        2 if cfg.any_ok() => Err(PmcError::NotAllowed),
        2 => Err(PmcError::ReservedBits),
        _ => Err(PmcError::NotAllowed),
    }
}

#[test]
fn every_fixed_ctrl_bit_individually() {
    for cfg in configs().into_iter().filter(|c| c.version >= 2) {
        let m = model(&cfg);
        let d = m.pmc_desc(PMC_FIXED_CTRL).unwrap();
        for b in 0..64 {
            let v = 1u64 << b;
            for policy in [KERNEL_OK, USER_ONLY] {
                assert_eq!(
                    m.validate_pmc(PMC_FIXED_CTRL, v, policy),
                    fixed_bit_verdict(&cfg, b, policy),
                    "{cfg:?} bit {b}"
                );
            }
            assert_eq!(
                d.rsvd_mask & v != 0,
                m.validate_pmc(PMC_FIXED_CTRL, v, KERNEL_OK).is_err()
            );
            let mut sim = IntelSim::new(cfg);
            if sim.wrmsr(d.msr, v).is_err() {
                assert!(
                    m.validate_pmc(PMC_FIXED_CTRL, v, KERNEL_OK).is_err(),
                    "{cfg:?} bit {b} #GPs"
                );
            }
            if let Ok(ok) = m.validate_pmc(PMC_FIXED_CTRL, v, KERNEL_OK) {
                let hw = m.pmc_hw_value(PMC_FIXED_CTRL, ok, true);
                // The module adds PMI to the enabled counter, nothing else.
                assert_eq!(hw, v | 8 << (b / 4 * 4));
                assert_eq!(m.pmc_pmds(PMC_FIXED_CTRL, ok), 1 << (16 + b / 4));
                assert_eq!(sim.wrmsr(d.msr, hw), Ok(()));
                assert_eq!(m.pmc_hw_value(PMC_FIXED_CTRL, ok, false), 0);
            }
        }
        // All present counters, user and kernel at once.
        let all = (0..16)
            .filter(|&n| cfg.fixed_exists(n))
            .fold(0u64, |a, n| a | 3 << (4 * n));
        assert_eq!(m.validate_pmc(PMC_FIXED_CTRL, all, KERNEL_OK), Ok(all));
        assert_eq!(m.pmc_pmds(PMC_FIXED_CTRL, all), m.impl_pmds() & !0xffff);
        assert_eq!(
            IntelSim::new(cfg).wrmsr(d.msr, m.pmc_hw_value(PMC_FIXED_CTRL, all, true)),
            Ok(())
        );
    }
}

#[test]
fn every_register_write_path_is_accepted_by_the_hardware() {
    for cfg in configs() {
        let m = model(&cfg);
        let mut sim = IntelSim::new(cfg);
        for pmc in 0..PFM_MAX_PMCS {
            if let Some(d) = m.pmc_desc(pmc) {
                assert_eq!(
                    sim.wrmsr(d.msr, m.pmc_hw_value(pmc, d.dfl_val, true)),
                    Ok(())
                );
                assert_eq!(sim.wrmsr(d.msr, d.dfl_val), Ok(()));
            }
        }
        for pmd in 0..PFM_MAX_PMDS {
            if let Some(d) = m.pmd_desc(pmd) {
                for v in [0, 1, u64::MAX, 1 << 31, 0x7fff_ffff, 0xdead_beef_cafe_f00d] {
                    let w = m.pmd_write(pmd, v).unwrap();
                    assert_eq!(w.msr, d.msr);
                    assert_eq!(
                        sim.wrmsr(w.msr, w.value),
                        Ok(()),
                        "{cfg:?} pmd {pmd} v {v:#x}"
                    );
                    assert_eq!(sim.rdmsr(w.msr), Ok(w.raw), "{cfg:?} pmd {pmd} v {v:#x}");
                    if d.kind == RegKind::Counter {
                        // The legacy address reads the same counter.
                        assert_eq!(sim.rdmsr(MSR_IA32_PMC0 + pmd as u32), Ok(w.raw));
                    }
                }
            }
        }
        match m.global_msrs() {
            Some(g) => {
                // Every subset of counters can be enabled and acknowledged.
                let all = m.impl_pmds();
                for sub in [all, 0, all & 0x5555_5555, all & !1, all >> 16 << 16] {
                    assert_eq!(sim.wrmsr(g.ctrl, m.global_ctrl_value(sub)), Ok(()));
                    assert_eq!(sim.wrmsr(g.ack, m.ack_value(sub)), Ok(()));
                }
                assert_eq!(m.global_ctrl_value(all).count_ones(), all.count_ones());
                assert!(
                    sim.wrmsr(g.status, 0).is_err(),
                    "GLOBAL_STATUS is read-only"
                );
            }
            None => {
                assert_eq!(cfg.version, 1);
                assert!(sim.rdmsr(MSR_IA32_PERF_GLOBAL_CTRL).is_err());
                assert!(sim.wrmsr(MSR_IA32_FIXED_CTR_CTRL, 0).is_err());
                assert_eq!(m.global_ctrl_value(m.impl_pmds()), 0);
            }
        }
    }
}

#[test]
fn sign_extended_writes() {
    let mut sim = IntelSim::new(IntelCfg::v(2, 2, 40, 3, 40, false));
    // IA32_PMCx: EAX[31:0], bit 31 copied to the counter's top, EDX ignored.
    sim.wrmsr(0xc1, 0x8000_0000).unwrap();
    assert_eq!(sim.rdmsr(0xc1), Ok(0xff_8000_0000));
    sim.wrmsr(0xc1, 0xabcd_7fff_ffff).unwrap();
    assert_eq!(sim.rdmsr(0xc1), Ok(0x7fff_ffff));
    assert!(sim.wrmsr(0x4c1, 1).is_err(), "no A_PMC without FW_WRITE");
    // So without full-width writes the model arms 31 bits: the bits above are
    // all ones, which sign extension reproduces.
    let m = model(&sim.cfg);
    for v in [0u64, 0x7fff_ffff, 0x8000_0000, 0x1_2345_6789, u64::MAX] {
        let w = m.pmd_write(0, v).unwrap();
        // Bits 39:31 all ones, the low 31 bits the events to the wrap (or
        // the minimum arming distance).
        assert_eq!(w.raw, mask(40) - short_of_wrap(v, 31));
        assert_eq!(w.raw >> 31, 0x1ff);
        sim.wrmsr(w.msr, w.value).unwrap();
        assert_eq!(sim.rdmsr(w.msr), Ok(w.raw));
        // Only EAX matters: the same register from the low 32 bits alone.
        sim.wrmsr(w.msr, w.value & 0xffff_ffff).unwrap();
        assert_eq!(sim.rdmsr(w.msr), Ok(w.raw));
    }
    // With FW_WRITE: A_PMCx take the full width, and no more.
    let mut sim = IntelSim::new(IntelCfg::v(4, 2, 48, 3, 48, true));
    sim.wrmsr(0x4c1, 0x7fff_0000_0001).unwrap();
    assert_eq!(sim.rdmsr(0xc1), Ok(0x7fff_0000_0001));
    assert!(sim.wrmsr(0x4c1, 1 << 48).is_err());
    assert!(sim.wrmsr(0x309, 1 << 48).is_err());
    let m = model(&sim.cfg);
    assert_eq!(
        m.pmd_write(0, 0x1234_8000_0000).unwrap().raw,
        0x9234_8000_0000
    );
    // One event from the overflow: armed the minimum distance away.
    assert_eq!(
        m.pmd_write(0, u64::MAX).unwrap().raw,
        mask(48) - short_of_wrap(u64::MAX, 47)
    );
}

/// Programs counter `pmd` of `m` on `sim` to count `ev` in user mode,
/// loaded with virtual value `v`, running.
fn program(m: &IntelArch, sim: &mut IntelSim, pmd: usize, v: u64) -> (u8, u8) {
    let (pmc, val, ev) = if pmd < 16 {
        let ev = (0x2e, 0x41);
        (pmd, 0x10000 | 0x412e, ev)
    } else {
        let f = pmd - 16;
        (PMC_FIXED_CTRL, 2u64 << (4 * f), fixed_event(f))
    };
    let ok = m.validate_pmc(pmc, val, USER_ONLY).unwrap();
    if let Some(g) = m.global_msrs() {
        sim.wrmsr(g.ctrl, 0).unwrap();
    }
    sim.wrmsr(m.pmc_desc(pmc).unwrap().msr, m.pmc_hw_value(pmc, ok, true))
        .unwrap();
    let w = m.pmd_write(pmd, v).unwrap();
    sim.wrmsr(w.msr, w.value).unwrap();
    if let Some(g) = m.global_msrs() {
        sim.wrmsr(g.ctrl, m.global_ctrl_value(1 << pmd)).unwrap();
    }
    ev
}

#[test]
fn counter_wrap_at_each_width() {
    for cfg in configs() {
        let m = model(&cfg);
        for pmd in (0..PFM_MAX_PMDS).filter(|&p| m.impl_pmds() & (1 << p) != 0) {
            let d = m.pmd_desc(pmd).unwrap();
            for v in [
                0u64,
                1,
                u64::MAX - 2,
                period_to_value(1000),
                0x5555_5555_5555_5555,
            ] {
                let mut sim = IntelSim::new(cfg);
                let ev = program(&m, &mut sim, pmd, v);
                // Events to the wrap, less one (2^64 - 1 at most).
                let short = short_of_wrap(v, d.width);
                sim.count(ev, Ring::User, short);
                let raw = sim.rdmsr(d.msr).unwrap();
                assert_eq!(raw, mask(d.hw_width), "{cfg:?} pmd {pmd} v {v:#x}");
                assert_eq!((sim.pmis, sim.global_status), (0, 0));
                assert!(!m.pmd_raw_overflowed(pmd, raw));
                // The wrap: PMI, status bit or cleared top bit.
                sim.count(ev, Ring::User, 1);
                let raw = sim.rdmsr(d.msr).unwrap();
                assert_eq!(raw, 0);
                assert_eq!(sim.pmis, 1, "{cfg:?} pmd {pmd}");
                match m.global_msrs() {
                    Some(g) => assert_eq!(m.status_pmds(sim.rdmsr(g.status).unwrap()), 1 << pmd),
                    None => assert!(m.pmd_raw_overflowed(pmd, raw)),
                }
                // The delta across the wrap is exact.
                let w = m.pmd_write(pmd, v).unwrap();
                assert_eq!(
                    m.pmd_delta(pmd, w.raw, raw),
                    short.wrapping_add(1) & mask(d.hw_width)
                );
                // Kernel-mode events are not counted in a user-only counter.
                sim.count(ev, Ring::Kernel, 5);
                assert_eq!(sim.rdmsr(d.msr), Ok(0));
            }
        }
    }
}

#[test]
fn status_acknowledgement() {
    let cfg = IntelCfg {
        fixed_bitmap: 0b1000,
        ..IntelCfg::v(5, 4, 48, 2, 48, true)
    };
    let m = model(&cfg);
    let g = m.global_msrs().unwrap();
    let mut sim = IntelSim::new(cfg);
    // Wrap GP 0, GP 2 and fixed 3 (PMD 19).
    for pmd in [0usize, 2, 19] {
        let ev = program(&m, &mut sim, pmd, u64::MAX);
        sim.count(ev, Ring::User, short_of_wrap(u64::MAX, 47) + 1);
    }
    sim.global_status |= GLOBAL_STATUS_COND_CHGD;
    let status = sim.rdmsr(g.status).unwrap();
    assert_eq!(
        m.status_pmds(status),
        1 | 1 << 2 | 1 << 19,
        "CondChgd is no PMD"
    );
    assert_eq!(m.ack_value(1 << 19), 1 << 35);
    sim.wrmsr(g.ack, m.ack_value(1)).unwrap();
    assert_eq!(
        m.status_pmds(sim.rdmsr(g.status).unwrap()),
        1 << 2 | 1 << 19
    );
    sim.wrmsr(g.ack, m.ack_value(1 << 2 | 1 << 19)).unwrap();
    assert_eq!(sim.rdmsr(g.status), Ok(GLOBAL_STATUS_COND_CHGD));
    // PMDs that do not exist never reach the ack value (that would #GP).
    assert_eq!(m.ack_value(!0), m.global_ctrl_value(m.impl_pmds()));
    assert_eq!(sim.wrmsr(g.ack, m.ack_value(!0)), Ok(()));
    assert!(sim.wrmsr(g.ack, 1 << 4).is_err());
}

#[test]
fn global_ctrl_gates_counting() {
    let cfg = IntelCfg::v(4, 2, 48, 3, 48, true);
    let m = model(&cfg);
    let mut sim = IntelSim::new(cfg);
    // After RESET the GP counters are globally enabled: a v1-style EN starts them.
    assert_eq!(sim.rdmsr(MSR_IA32_PERF_GLOBAL_CTRL), Ok(0b11));
    let ev = program(&m, &mut sim, 1, 0);
    sim.wrmsr(MSR_IA32_PERF_GLOBAL_CTRL, m.global_ctrl_value(1))
        .unwrap();
    sim.count(ev, Ring::User, 10);
    assert_eq!(sim.rdmsr(0xc2), Ok(1 << 47), "PMD1 gated off");
    sim.wrmsr(MSR_IA32_PERF_GLOBAL_CTRL, m.global_ctrl_value(0b10))
        .unwrap();
    sim.count(ev, Ring::User, 10);
    assert_eq!(sim.rdmsr(0xc2), Ok(1 << 47 | 10));
}

/// Runs `n` events through a context with the given PMD values (period
/// `p` each), servicing PMIs every `chunk` events; checks the 64-bit
/// values and overflow counts against `pfm_counter::advance` applied to the
/// simulator's own count.
fn run_periods(cfg: IntelCfg, p: u64, n: u64, chunk: u64, inject: bool) {
    run_periods_switching(cfg, p, n, chunk, inject, false);
}

/// As [`run_periods`]; with `switch`, the context is switched out and back
/// in after every chunk, and another thread's events arrive while it is out.
fn run_periods_switching(cfg: IntelCfg, p: u64, n: u64, chunk: u64, inject: bool, switch: bool) {
    let m = model(&cfg);
    let mut sim = IntelSim::new(cfg);
    let mut drv = Driver::new(&m);
    let gp_ev = (0x2e, 0x41);
    for pmc in 0..m.num_gp() as usize {
        drv.write_pmc(pmc, 0x1412e, USER_ONLY).unwrap();
    }
    if m.fixed_mask() != 0 {
        let all = (0..16)
            .filter(|&f| m.fixed_mask() & (1 << f) != 0)
            .fold(0, |a, f| a | 2u64 << (4 * f));
        drv.write_pmc(PMC_FIXED_CTRL, all, USER_ONLY).unwrap();
    }
    assert_eq!(drv.used, m.impl_pmds());
    let start = period_to_value(p);
    for pmd in 0..PFM_MAX_PMDS {
        if m.impl_pmds() & (1 << pmd) != 0 {
            drv.write_pmd(pmd, start, start).unwrap();
        }
    }
    drv.load(&mut sim);
    if inject {
        sim.inject = Some((gp_ev, Ring::User, 3));
    }
    drv.start(&mut sim);
    let mut left = n;
    while left > 0 {
        let c = left.min(chunk);
        sim.count(gp_ev, Ring::User, c);
        for f in 0..16 {
            if m.fixed_mask() & (1 << f) != 0 {
                sim.count(fixed_event(f), Ring::User, c);
            }
        }
        drv.service(&mut sim);
        if switch {
            // Every other switch: another monitored thread ran in between
            // (full restore); otherwise nobody did (lazy restore).
            let mut lazy = left / chunk % 2 == 0;
            if lazy {
                lazy = drv.switch_out_keep(&mut sim);
            } else {
                drv.switch_out(&mut sim);
            }
            sim.count(gp_ev, Ring::User, 1000);
            for f in 0..16 {
                if m.fixed_mask() & (1 << f) != 0 {
                    sim.count(fixed_event(f), Ring::User, 1000);
                }
            }
            if lazy {
                drv.switch_in_lazy(&mut sim);
            } else {
                drv.switch_in(&mut sim);
            }
        }
        left -= c;
    }
    drv.stop(&mut sim);
    sim.inject = None;
    for pmd in 0..PFM_MAX_PMDS {
        if m.impl_pmds() & (1 << pmd) == 0 {
            continue;
        }
        let truth = if pmd < 16 {
            sim.counted_gp[pmd]
        } else {
            sim.counted_fixed[pmd - 16]
        } as u64;
        if !inject {
            assert_eq!(truth, n);
        }
        assert_eq!(
            drv.pmds[pmd].overflows,
            truth / p,
            "{cfg:?} pmd {pmd} p {p}"
        );
        assert_eq!(
            drv.pmds[pmd].value,
            start + truth % p,
            "{cfg:?} pmd {pmd} p {p}"
        );
    }
}

#[test]
fn overflow_periods_at_every_width() {
    for cfg in configs() {
        for (p, n, chunk) in [
            (1000, 10_000, 7),
            (1000, 1_000_000, 999),
            (1 << 31, 5 << 31, 1 << 28),
            (3 << 33, 1 << 36, 1 << 30),
        ] {
            run_periods(cfg, p, n, chunk, false);
        }
    }
}

/// `PFM_REGFL_RANDOM` on the PMU: each PMD's resets, at the PMIs and the
/// folds of switches, draw its own generator, and the counts stay exact
/// against the generator's periods (`sim::random_truth`): periods below
/// the arming floor (several crossed per PMI) and above it (one per PMI).
#[test]
fn randomised_periods_stay_exact() {
    for cfg in configs() {
        let m = model(&cfg);
        if m.num_gp() == 0 {
            continue;
        }
        for (p, mask, n, chunk, switch) in [
            (10_000u64, 1023u64, 3_000_000u64, 4_999u64, false),
            (10_000, 1023, 1_000_000, 77_777, true),
            (1 << 20, 0xffff, 40 << 20, 1 << 18, true),
        ] {
            let mut sim = IntelSim::new(cfg);
            let mut drv = Driver::new(&m);
            let start = period_to_value(p);
            for pmd in 0..m.num_gp() as usize {
                drv.write_pmc(pmd, 0x1412e, USER_ONLY).unwrap();
                drv.write_pmd(pmd, start, start).unwrap();
                drv.randomise(pmd, mask, 0x5eed + pmd as u64);
            }
            drv.load(&mut sim);
            drv.start(&mut sim);
            let mut left = n;
            while left > 0 {
                let c = left.min(chunk);
                sim.count((0x2e, 0x41), Ring::User, c);
                drv.service(&mut sim);
                if switch {
                    drv.switch_out(&mut sim);
                    drv.switch_in(&mut sim);
                }
                left -= c;
            }
            drv.stop(&mut sim);
            for pmd in 0..m.num_gp() as usize {
                let truth = sim.counted_gp[pmd] as u64;
                let (overflows, value) = sim::random_truth(p, mask, 0x5eed + pmd as u64, truth);
                let what = format!("{cfg:?} pmd {pmd} p {p} mask {mask}");
                assert_eq!(drv.pmds[pmd].overflows, overflows, "{what}");
                assert_eq!(drv.pmds[pmd].value, value, "{what}");
                assert!(overflows > n / (p + mask), "{what}: {overflows} overflows");
            }
        }
    }
}

#[test]
fn global_enable_ordering_is_exact() {
    // Events keep arriving between every MSR access: a value is exact only
    // if counting is off while counters are written and read.
    for cfg in configs() {
        run_periods(cfg, 1000, 100_000, 333, true);
        run_periods(cfg, 1 << 31, 3 << 31, 1 << 29, true);
    }
}

/// A context counting user-mode LLC misses on PMD0 from `start` (also its
/// reset value), installed on `sim` and started.
fn counting_pmd0<'a>(m: &'a IntelArch, sim: &mut IntelSim, start: u64) -> Driver<'a, IntelArch> {
    let mut drv = Driver::new(m);
    drv.write_pmc(0, 0x1412e, USER_ONLY).unwrap();
    drv.write_pmd(0, start, start).unwrap();
    drv.load(sim);
    drv.start(sim);
    drv
}

#[test]
fn interrupt_without_a_wrap_changes_nothing() {
    // The module's own self-IPIs share the PMI's vector: the PMI sequence
    // must leave the counters alone (and count on) when nothing wrapped,
    // even with a period of 1, or each fold would raise the next IPI.
    for cfg in configs() {
        let m = model(&cfg);
        if m.num_gp() == 0 {
            continue;
        }
        let mut sim = IntelSim::new(cfg);
        let start = period_to_value(1);
        let mut drv = counting_pmd0(&m, &mut sim, start);
        sim.count((0x2e, 0x41), Ring::User, 10);
        let before = (sim.evtsel, sim.pmc, sim.global_ctrl);
        assert_eq!(drv.pmi(&mut sim), 0, "{cfg:?}");
        assert_eq!((sim.evtsel, sim.pmc, sim.global_ctrl), before, "{cfg:?}");
        assert_eq!(drv.pmds[0].overflows, 0, "{cfg:?}: nothing folded");
        drv.stop(&mut sim);
        assert_eq!(drv.pmds[0].overflows, 10, "{cfg:?}");
    }
}

#[test]
fn lazy_restore_refused_after_a_pmu_reset() {
    for cfg in configs() {
        let m = model(&cfg);
        if m.num_gp() == 0 {
            continue;
        }
        let mut sim = IntelSim::new(cfg);
        let mut drv = counting_pmd0(&m, &mut sim, 0);
        sim.count((0x2e, 0x41), Ring::User, 10);
        assert!(drv.switch_out_keep(&mut sim));
        // The CPU was reset (suspend): every register back to RESET.
        sim = IntelSim::new(cfg);
        assert!(drv.resume_refused(&mut sim), "{cfg:?}");
        drv.switch_in(&mut sim);
        sim.count((0x2e, 0x41), Ring::User, 5);
        drv.stop(&mut sim);
        assert_eq!(drv.pmds[0].value, 15, "{cfg:?}");
    }
}

#[test]
fn tiny_periods_do_not_storm() {
    // A period of 1: every event overflows, but the counter is armed at
    // least MIN_ARM_EVENTS away, so PMIs stay rare and every overflow is
    // still counted at the folds.
    use pfm_host_tests::pfm_x86::model::MIN_ARM_EVENTS;
    for cfg in configs() {
        let m = model(&cfg);
        if m.num_gp() == 0 {
            continue;
        }
        let mut sim = IntelSim::new(cfg);
        let start = period_to_value(1);
        let mut drv = counting_pmd0(&m, &mut sim, start);
        let n = 1_000_000u64;
        let mut pmis = 0;
        for _ in 0..n / 100 {
            sim.count((0x2e, 0x41), Ring::User, 100);
            pmis += drv.service(&mut sim);
        }
        drv.stop(&mut sim);
        assert!(pmis <= n / MIN_ARM_EVENTS + 1, "{cfg:?}: {pmis} PMIs");
        assert_eq!(drv.pmds[0].overflows, n, "{cfg:?}");
        assert_eq!(drv.pmds[0].value, start, "{cfg:?}");
    }
}

#[test]
fn context_switches_keep_counts_exact() {
    // Switched out after every chunk, with events of another thread while
    // out: only the context's own events count, overflows stay exact.
    for cfg in configs() {
        run_periods_switching(cfg, 1000, 100_000, 777, false, true);
        run_periods_switching(cfg, 1000, 50_000, 333, true, true);
        run_periods_switching(cfg, 1 << 31, 3 << 31, 1 << 29, false, true);
    }
}

#[test]
fn wrong_order_is_caught() {
    // The negative control of the test above: after RESET GLOBAL_CTRL enables
    // the GP counters, so writing PERFEVTSEL (with EN) before the counter
    // loses what was counted in between.
    let cfg = IntelCfg::v(4, 1, 48, 0, 48, true);
    let m = model(&cfg);
    let mut sim = IntelSim::new(cfg);
    sim.inject = Some(((0x2e, 0x41), Ring::User, 3));
    let ok = m.validate_pmc(0, 0x1412e, USER_ONLY).unwrap();
    sim.wrmsr(0x186, m.pmc_hw_value(0, ok, true)).unwrap();
    let w = m.pmd_write(0, 0).unwrap();
    sim.wrmsr(w.msr, w.value).unwrap();
    let raw = sim.rdmsr(w.msr).unwrap();
    assert_ne!(m.pmd_delta(0, w.raw, raw) as u128, sim.counted_gp[0]);
}

#[test]
fn kernel_counting_follows_the_policy() {
    let cfg = IntelCfg::v(4, 2, 48, 3, 48, true);
    let m = model(&cfg);
    let mut sim = IntelSim::new(cfg);
    let mut drv = Driver::new(&m);
    assert_eq!(
        drv.write_pmc(0, 0x2412e, USER_ONLY),
        Err(PmcError::NotAllowed)
    );
    assert_eq!(
        drv.write_pmc(PMC_FIXED_CTRL, 0x1, USER_ONLY),
        Err(PmcError::NotAllowed)
    );
    drv.write_pmc(0, 0x3412e, KERNEL_OK).unwrap();
    drv.write_pmc(1, 0x1412e, USER_ONLY).unwrap();
    drv.write_pmc(PMC_FIXED_CTRL, 0x1, KERNEL_OK).unwrap();
    drv.load(&mut sim);
    drv.start(&mut sim);
    sim.count((0x2e, 0x41), Ring::User, 5);
    sim.count((0x2e, 0x41), Ring::Kernel, 7);
    sim.count(fixed_event(0), Ring::Kernel, 11);
    sim.count(fixed_event(0), Ring::User, 13);
    drv.stop(&mut sim);
    assert_eq!(
        [drv.pmds[0].value, drv.pmds[1].value, drv.pmds[16].value],
        [12, 5, 11]
    );
}

#[test]
fn describe_fills_get_info() {
    let cfg = IntelCfg {
        unavailable: 0b1,
        ..IntelCfg::v(4, 4, 48, 3, 48, false)
    };
    let m = model(&cfg);
    let mut info = PfmInfo::default();
    m.describe(&mut info);
    assert_eq!(&info.model[..11], b"intel_arch\0");
    assert_eq!(
        (info.num_pmcs, info.num_pmds, info.counter_width),
        (5, 7, 31)
    );
    assert_eq!((info.impl_pmcs, info.impl_pmds), (0x1_000f, 0x7_000f));
    assert_eq!(info.pmc_rsvd_mask[0], m.pmc_desc(0).unwrap().rsvd_mask);
    assert_eq!(info.pmc_rsvd_mask[16], !0x333);
    assert_eq!(info.pmc_rsvd_mask[4], u64::MAX);
    assert_eq!(info.num_events, 6);
    assert_eq!(&info.events[0].name[..13], b"instructions\0");
    assert_eq!(info.events[0].code, 0x100c0);
    assert_eq!(info.events[6].code, 0);
}

#[test]
fn hybrid_cpus_fold_to_what_they_share() {
    // A P-core-like and an E-core-like view of the same part.
    let p = model(&IntelCfg {
        fixed_bitmap: 0b1111,
        ..IntelCfg::v(5, 8, 48, 4, 48, true)
    });
    let e = model(&IntelCfg {
        unavailable: 0b1000_0000,
        ..IntelCfg::v(5, 6, 48, 3, 48, true)
    });
    let c = p.common(&e).unwrap();
    assert_eq!(c, e.common(&p).unwrap());
    assert_eq!((c.num_gp(), c.fixed_mask(), c.version()), (6, 0b111, 5));
    assert_eq!(c.events_available(), e.events_available());
    assert_eq!(c.common(&c), Some(c));
    // Full-width writes and any-thread only if both have them.
    let old = model(&IntelCfg::v(3, 4, 48, 3, 48, false));
    let c = p.common(&old).unwrap();
    assert!(!c.full_width_writes() && c.has_any_thread() && c.version() == 3);
    assert_eq!(c.pmd_desc(0).map(|d| (d.msr, d.width)), Some((0xc1, 31)));
    // Different widths: no common model.
    assert_eq!(p.common(&model(&IntelCfg::v(5, 8, 40, 4, 48, true))), None);
    assert_eq!(p.common(&model(&IntelCfg::v(5, 8, 48, 4, 40, true))), None);
    // Nothing shared: none.
    let gp_only = model(&IntelCfg::v(2, 2, 48, 0, 0, false));
    let fixed_only = model(&IntelCfg::v(2, 0, 0, 3, 48, false));
    assert_eq!(gp_only.common(&fixed_only), None);
}

#[test]
fn armed_widths() {
    let w = |c: IntelCfg, pmd| model(&c).pmd_desc(pmd).map(|d| (d.width, d.hw_width));
    assert_eq!(w(IntelCfg::v1(2, 40), 0), Some((31, 40)));
    assert_eq!(
        w(
            IntelCfg {
                fw_write: true,
                ..IntelCfg::v1(2, 40)
            },
            0
        ),
        Some((39, 40))
    );
    assert_eq!(w(IntelCfg::v1(2, 32), 0), Some((31, 32)));
    assert_eq!(w(IntelCfg::v(2, 2, 32, 1, 32, false), 16), Some((31, 32)));
    assert_eq!(w(IntelCfg::v(4, 8, 48, 3, 48, false), 16), Some((31, 48)));
    assert_eq!(w(IntelCfg::v(4, 8, 48, 3, 48, true), 7), Some((47, 48)));
    assert_eq!(w(IntelCfg::v(4, 8, 64, 3, 64, true), 17), Some((63, 64)));
}

/// CPUID leaf 0xA from its fields (EAX's version, counters, width and
/// event-vector length; EBX, ECX, EDX as given).
fn leaf(version: u32, gp: u32, width: u32, len: u32, ebx: u32, ecx: u32, edx: u32) -> CpuidRegs {
    CpuidRegs {
        eax: version | gp << 8 | width << 16 | len << 24,
        ebx,
        ecx,
        edx,
    }
}

#[test]
fn a_leaf_without_version_counters_or_width_is_no_pmu() {
    assert_eq!(IntelArch::probe(CpuidRegs::default(), 0), None);
    assert_eq!(IntelArch::probe(leaf(0, 4, 48, 7, 0, 0, 0), !0), None);
    assert_eq!(IntelArch::probe(leaf(2, 0, 0, 7, 0, 0, 0), 0), None);
    assert_eq!(IntelArch::probe(leaf(2, 4, 0, 7, 0, 0, 0), 0), None);
}

#[test]
fn version_4_event_select_and_fixed_control_masks() {
    let p = IntelArch::probe(leaf(4, 8, 48, 7, 0, 0, 3 | 48 << 5), PERF_CAP_FW_WRITE).unwrap();
    let d = p.pmc_desc(0).unwrap();
    assert_eq!(
        d.rsvd_mask,
        0xffff_ffff_0000_0000 | EVTSEL_INT | EVTSEL_ANY | EVTSEL_PC
    );
    let f = p.pmc_desc(PMC_FIXED_CTRL).unwrap();
    assert_eq!(f.rsvd_mask, !0x333);
    assert_eq!(p.validate_pmc(0, 0x4300c0, KERNEL_OK), Ok(0x0300c0));
}
