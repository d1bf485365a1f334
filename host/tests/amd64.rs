// SPDX-License-Identifier: GPL-2.0

//! `pfm_x86/amd64.rs` against the AMD simulator: probing, every bit of
//! PERF_CTL, every register write path, every overflow path, for the legacy
//! PMU, the core extension and PerfMonV2.

mod sim;

use pfm_host_tests::abi::{PfmInfo, PFM_MAX_PMCS, PFM_MAX_PMDS};
use pfm_host_tests::pfm_counter::period_to_value;
use pfm_host_tests::pfm_x86::amd64::*;
use pfm_host_tests::pfm_x86::model::{CpuidRegs, HwPmu, PmcError, Policy, RegKind};
use sim::amd::{AmdCfg, AmdSim};
use sim::driver::Driver;
use sim::{mask, short_of_wrap, MsrBus, Ring};

const KERNEL_OK: Policy = Policy { allow_kernel: true };
const USER_ONLY: Policy = Policy {
    allow_kernel: false,
};

const LEGACY: AmdCfg = AmdCfg {
    core_ext: false,
    v2: false,
    v2_counters: 0,
};
const CORE: AmdCfg = AmdCfg {
    core_ext: true,
    v2: false,
    v2_counters: 0,
};
const V2: AmdCfg = AmdCfg {
    core_ext: true,
    v2: true,
    v2_counters: 6,
};
const V2_3: AmdCfg = AmdCfg {
    core_ext: true,
    v2: true,
    v2_counters: 3,
};

fn model(cfg: &AmdCfg) -> Amd64 {
    Amd64::probe(cfg.ext1_ecx(), cfg.leaf_0x80000022(), true).expect("a PMU")
}

fn configs() -> [AmdCfg; 4] {
    [LEGACY, CORE, V2, V2_3]
}

#[test]
fn probe_legacy_core_ext_and_v2() {
    // Legacy: nothing in CPUID says so; the caller decides.
    assert_eq!(Amd64::probe(0, CpuidRegs::default(), false), None);
    let m = model(&LEGACY);
    assert_eq!(
        (m.core_ext(), m.perfmon_v2(), m.num_counters()),
        (false, false, 4)
    );
    assert_eq!((m.impl_pmcs(), m.impl_pmds()), (0xf, 0xf));
    assert!(m.global_msrs().is_none());
    for i in 0..4 {
        let c = m.pmc_desc(i).unwrap();
        let d = m.pmd_desc(i).unwrap();
        assert_eq!((c.msr, c.kind), (0xc001_0000 + i as u32, RegKind::EventSel));
        assert_eq!(
            (d.msr, d.kind, d.width, d.hw_width),
            (0xc001_0004 + i as u32, RegKind::Counter, 47, 48)
        );
    }
    assert!(m.pmc_desc(4).is_none() && m.pmd_desc(4).is_none());
    assert_eq!(m.pmc_desc(2).unwrap().name, "PERF_CTL2");

    // Core extension: 6 counters, interleaved CTL/CTR, whatever legacy_ok says.
    let m = Amd64::probe(CORE.ext1_ecx(), CORE.leaf_0x80000022(), false).unwrap();
    assert_eq!(
        (m.core_ext(), m.perfmon_v2(), m.num_counters()),
        (true, false, 6)
    );
    for i in 0..6 {
        assert_eq!(m.pmc_desc(i).unwrap().msr, 0xc001_0200 + 2 * i as u32);
        assert_eq!(m.pmd_desc(i).unwrap().msr, 0xc001_0201 + 2 * i as u32);
        assert_eq!(
            m.pmd_desc(i).unwrap().name,
            [
                "PERF_CTR0",
                "PERF_CTR1",
                "PERF_CTR2",
                "PERF_CTR3",
                "PERF_CTR4",
                "PERF_CTR5"
            ][i]
        );
    }
    assert!(m.global_msrs().is_none());
    assert_eq!(m.counter_width(), 47);

    // PerfMonV2: the counter count from EBX, and the global registers.
    let m = model(&V2_3);
    assert_eq!(
        (m.perfmon_v2(), m.num_counters(), m.impl_pmds()),
        (true, 3, 0b111)
    );
    let g = m.global_msrs().unwrap();
    assert_eq!(
        (g.ctrl, g.status, g.ack),
        (0xc000_0301, 0xc000_0300, 0xc000_0302)
    );
    // PerfMonV2 without the core extension is not believed (Linux neither).
    let v2_leaf = V2.leaf_0x80000022();
    assert_eq!(Amd64::probe(0, v2_leaf, false), None);
    assert_eq!(Amd64::probe(0, v2_leaf, true), Some(model(&LEGACY)));
    // No counter under PerfMonV2: no PMU; too many: capped to the ABI.
    assert_eq!(
        Amd64::probe(
            CPUID_PERFCTR_CORE,
            CpuidRegs {
                eax: 1,
                ..Default::default()
            },
            true
        ),
        None
    );
    let m = Amd64::probe(
        CPUID_PERFCTR_CORE,
        CpuidRegs {
            eax: 1,
            ebx: 0xf,
            ..Default::default()
        },
        true,
    )
    .unwrap();
    assert_eq!(m.num_counters(), 15);
    // Other bits of 0x80000022 EBX (LBR, DF, UMC counts) are not counters.
    let m = Amd64::probe(
        CPUID_PERFCTR_CORE,
        CpuidRegs {
            eax: 1,
            ebx: 0x3f_ffc6,
            ..Default::default()
        },
        true,
    )
    .unwrap();
    assert_eq!(m.num_counters(), 6);
}

/// What the APM says of PERF_CTL bit `b` for a user value.
fn ctl_bit_verdict(b: u32, policy: Policy) -> Result<u64, PmcError> {
    match b {
        17 if !policy.allow_kernel => Err(PmcError::NotAllowed),
        0..=18 | 23..=35 | 40 | 41 => Ok(1 << b),
        20 => Err(PmcError::NotAllowed),
        22 => Ok(0),
        _ => Err(PmcError::ReservedBits),
    }
}

#[test]
fn every_ctl_bit_individually() {
    for cfg in configs() {
        let m = model(&cfg);
        for pmc in 0..m.num_counters() as usize {
            let d = m.pmc_desc(pmc).unwrap();
            for b in 0..64 {
                let v = 1u64 << b;
                for policy in [KERNEL_OK, USER_ONLY] {
                    assert_eq!(
                        m.validate_pmc(pmc, v, policy),
                        ctl_bit_verdict(b, policy),
                        "{cfg:?} bit {b}"
                    );
                }
                assert_eq!(
                    d.rsvd_mask & v != 0,
                    m.validate_pmc(pmc, v, KERNEL_OK).is_err(),
                    "bit {b}"
                );
                let mut sim = AmdSim::new(cfg);
                if sim.wrmsr(d.msr, v).is_err() {
                    assert!(
                        m.validate_pmc(pmc, v, KERNEL_OK).is_err(),
                        "{cfg:?} bit {b} #GPs"
                    );
                }
                if let Ok(ok) = m.validate_pmc(pmc, v, KERNEL_OK) {
                    for en in [false, true] {
                        let hw = m.pmc_hw_value(pmc, ok, en);
                        assert_eq!(
                            hw & (CTL_INT | CTL_EN),
                            CTL_INT | if en { CTL_EN } else { 0 }
                        );
                        assert_eq!(hw & !(CTL_INT | CTL_EN), ok);
                        assert_eq!(sim.wrmsr(d.msr, hw), Ok(()), "{cfg:?} bit {b}");
                    }
                }
            }
        }
        assert_eq!(
            m.validate_pmc(m.num_counters() as usize, 0, KERNEL_OK),
            Err(PmcError::NotAvailable)
        );
    }
}

#[test]
fn ctl_values() {
    let m = model(&CORE);
    // Event select bits 11:8 are the user's, except the Merge event 0xfff.
    assert_eq!(
        m.validate_pmc(0, 0x3_0001_00c0, USER_ONLY),
        Ok(0x3_0001_00c0)
    );
    assert_eq!(
        m.validate_pmc(0, 0xf_0001_00ff, USER_ONLY),
        Err(PmcError::NotAllowed)
    );
    assert_eq!(
        m.validate_pmc(1, 0xf_0001_00fe, USER_ONLY),
        Ok(0xf_0001_00fe)
    );
    // HostOnly / GuestOnly narrow counting: allowed.
    assert_eq!(
        m.validate_pmc(0, CTL_HOSTONLY | 0x10076, USER_ONLY),
        Ok(CTL_HOSTONLY | 0x10076)
    );
    assert_eq!(
        m.validate_pmc(0, CTL_GUESTONLY | CTL_HOSTONLY | 0x10076, USER_ONLY),
        Ok(0x300_0001_0076)
    );
    // EN dropped, INT refused, CMASK/INV/EDGE kept.
    assert_eq!(m.validate_pmc(0, 0x4100c0, USER_ONLY), Ok(0x100c0));
    assert_eq!(
        m.validate_pmc(0, 0x5300c0, KERNEL_OK),
        Err(PmcError::NotAllowed)
    );
    assert_eq!(m.validate_pmc(0, 0x2385_00c0, USER_ONLY), Ok(0x2385_00c0));
    assert_eq!(m.pmc_hw_value(0, 0x100c0, true), 0x5100c0);
    assert_eq!(m.pmc_hw_value(0, 0x100c0, false), 0x1100c0);
    // The event list validates.
    let events: Vec<_> = (0..8).filter_map(|i| m.event(i)).collect();
    assert_eq!(
        events,
        [
            ("cpu-cycles", 0x10076),
            ("instructions", 0x100c0),
            ("branches", 0x100c2),
            ("branch-misses", 0x100c3)
        ]
    );
    for (_, code) in events {
        assert_eq!(m.validate_pmc(3, code, USER_ONLY), Ok(code));
    }
}

#[test]
fn every_register_write_path_is_accepted_by_the_hardware() {
    for cfg in configs() {
        let m = model(&cfg);
        let mut sim = AmdSim::new(cfg);
        for pmc in 0..PFM_MAX_PMCS {
            if let Some(d) = m.pmc_desc(pmc) {
                assert_eq!(
                    sim.wrmsr(d.msr, m.pmc_hw_value(pmc, d.dfl_val, true)),
                    Ok(())
                );
                assert_eq!(sim.rdmsr(d.msr), Ok(CTL_INT | CTL_EN));
            } else {
                assert_eq!(m.pmc_hw_value(pmc, 0x100c0, true), 0);
            }
        }
        for pmd in 0..PFM_MAX_PMDS {
            let Some(d) = m.pmd_desc(pmd) else {
                assert!(m.pmd_write(pmd, 0).is_none());
                continue;
            };
            for v in [
                0,
                1,
                u64::MAX,
                1 << 47,
                0x7fff_ffff_ffff,
                0xdead_beef_cafe_f00d,
            ] {
                let w = m.pmd_write(pmd, v).unwrap();
                assert_eq!(w.msr, d.msr);
                assert_eq!(w.raw, mask(48) - short_of_wrap(v, 47), "armed");
                assert_ne!(w.raw & 1 << 47, 0, "top bit set when armed");
                assert_eq!(sim.wrmsr(w.msr, w.value), Ok(()));
                assert_eq!(sim.rdmsr(w.msr), Ok(w.raw));
                if cfg.core_ext && pmd < 4 {
                    // The legacy MSRs alias the first four counters.
                    assert_eq!(sim.rdmsr(0xc001_0004 + pmd as u32), Ok(w.raw));
                }
            }
        }
        match m.global_msrs() {
            Some(g) => {
                let all = m.impl_pmds();
                for sub in [all, 0, all & 0b101, !0] {
                    assert_eq!(sim.wrmsr(g.ctrl, m.global_ctrl_value(sub)), Ok(()));
                    assert_eq!(sim.rdmsr(g.ctrl), Ok(sub & all));
                    assert_eq!(sim.wrmsr(g.ack, m.ack_value(sub)), Ok(()));
                }
            }
            None => {
                assert!(sim.rdmsr(MSR_AMD64_PERF_CNTR_GLOBAL_CTL).is_err());
                assert_eq!(m.global_ctrl_value(!0), 0);
                if !cfg.core_ext {
                    assert!(sim.wrmsr(MSR_F15H_PERF_CTL0, 0).is_err());
                }
            }
        }
    }
}

/// Programs counter `pmd` to count event 0xc0 in user mode from `v`, running.
fn program(m: &Amd64, sim: &mut AmdSim, pmd: usize, v: u64) {
    let ok = m.validate_pmc(pmd, 0x100c0, USER_ONLY).unwrap();
    if let Some(g) = m.global_msrs() {
        sim.wrmsr(g.ctrl, 0).unwrap();
    }
    sim.wrmsr(m.pmc_desc(pmd).unwrap().msr, m.pmc_hw_value(pmd, ok, true))
        .unwrap();
    let w = m.pmd_write(pmd, v).unwrap();
    sim.wrmsr(w.msr, w.value).unwrap();
    if let Some(g) = m.global_msrs() {
        sim.wrmsr(g.ctrl, m.global_ctrl_value(1 << pmd)).unwrap();
    }
}

#[test]
fn counter_wrap_at_48_bits() {
    for cfg in configs() {
        let m = model(&cfg);
        for pmd in 0..m.num_counters() as usize {
            let d = m.pmd_desc(pmd).unwrap();
            for v in [
                0u64,
                1,
                u64::MAX,
                period_to_value(1000),
                0x5555_5555_5555_5555,
            ] {
                let mut sim = AmdSim::new(cfg);
                program(&m, &mut sim, pmd, v);
                let short = short_of_wrap(v, 47);
                sim.count(0xc0, 0, Ring::User, short);
                let raw = sim.rdmsr(d.msr).unwrap();
                assert_eq!(raw, mask(48));
                assert_eq!((sim.pmis, sim.global_status), (0, 0));
                assert!(!m.pmd_raw_overflowed(pmd, raw));
                sim.count(0xc0, 0, Ring::User, 1);
                let raw = sim.rdmsr(d.msr).unwrap();
                assert_eq!(raw, 0);
                assert_eq!(sim.pmis, 1);
                assert!(
                    m.pmd_raw_overflowed(pmd, raw),
                    "bit 47 clear after the wrap"
                );
                if let Some(g) = m.global_msrs() {
                    assert_eq!(m.status_pmds(sim.rdmsr(g.status).unwrap()), 1 << pmd);
                }
                let w = m.pmd_write(pmd, v).unwrap();
                assert_eq!(m.pmd_delta(pmd, w.raw, raw), short + 1);
                // Still readable as a wrap well after it.
                sim.count(0xc0, 0, Ring::User, (1 << 47) - 1);
                assert!(m.pmd_raw_overflowed(pmd, sim.rdmsr(d.msr).unwrap()));
                // Kernel-mode events are not counted in a user-only counter.
                sim.count(0xc0, 0, Ring::Kernel, 5);
                assert_eq!(sim.rdmsr(d.msr), Ok(mask(47)));
            }
        }
    }
}

#[test]
fn v2_status_acknowledgement() {
    let m = model(&V2);
    let g = m.global_msrs().unwrap();
    let mut sim = AmdSim::new(V2);
    assert_eq!(sim.rdmsr(g.ctrl), Ok(0x3f), "GP counters enabled at RESET");
    for pmd in [1usize, 4] {
        // One event before the wrap as armed (the minimum arming distance).
        program(&m, &mut sim, pmd, u64::MAX);
        sim.count(0xc0, 0, Ring::User, short_of_wrap(u64::MAX, 47) + 1);
    }
    let status = sim.rdmsr(g.status).unwrap();
    assert_eq!(m.status_pmds(status), 0b10010);
    // GlobalStatus is read-only: a write changes nothing.
    sim.wrmsr(g.status, 0).unwrap();
    assert_eq!(sim.rdmsr(g.status), Ok(status));
    sim.wrmsr(g.ack, m.ack_value(1 << 4)).unwrap();
    assert_eq!(m.status_pmds(sim.rdmsr(g.status).unwrap()), 0b10);
    sim.wrmsr(g.ack, m.ack_value(!0)).unwrap();
    assert_eq!(sim.rdmsr(g.status), Ok(0));
    // GlobalCtl gates counting.
    program(&m, &mut sim, 2, 0);
    sim.wrmsr(g.ctrl, m.global_ctrl_value(1)).unwrap();
    sim.count(0xc0, 0, Ring::User, 9);
    assert_eq!(sim.rdmsr(m.pmd_desc(2).unwrap().msr), Ok(1 << 47));
}

fn run_periods(cfg: AmdCfg, p: u64, n: u64, chunk: u64, inject: bool) {
    run_periods_switching(cfg, p, n, chunk, inject, false);
}

/// As [`run_periods`]; with `switch`, the context is switched out and back
/// in after every chunk, and another thread's events arrive while it is out.
fn run_periods_switching(cfg: AmdCfg, p: u64, n: u64, chunk: u64, inject: bool, switch: bool) {
    let m = model(&cfg);
    let mut sim = AmdSim::new(cfg);
    let mut drv = Driver::new(&m);
    let start = period_to_value(p);
    for i in 0..m.num_counters() as usize {
        drv.write_pmc(i, 0x100c0, USER_ONLY).unwrap();
        drv.write_pmd(i, start, start).unwrap();
    }
    drv.load(&mut sim);
    if inject {
        sim.inject = Some((0xc0, 0, Ring::User, 5));
    }
    drv.start(&mut sim);
    let mut left = n;
    while left > 0 {
        let c = left.min(chunk);
        sim.count(0xc0, 0, Ring::User, c);
        drv.service(&mut sim);
        if switch {
            // Every other switch: lazy restore (nobody used the PMU).
            let mut lazy = left / chunk % 2 == 0;
            if lazy {
                lazy = drv.switch_out_keep(&mut sim);
            } else {
                drv.switch_out(&mut sim);
            }
            sim.count(0xc0, 0, Ring::User, 1000);
            if lazy {
                drv.switch_in_lazy(&mut sim);
            } else {
                drv.switch_in(&mut sim);
            }
        }
        left -= c;
    }
    drv.stop(&mut sim);
    for i in 0..m.num_counters() as usize {
        let truth = sim.counted[i] as u64;
        if !inject {
            assert_eq!(truth, n);
        }
        assert_eq!(drv.pmds[i].overflows, truth / p, "{cfg:?} pmd {i} p {p}");
        assert_eq!(
            drv.pmds[i].value,
            start + truth % p,
            "{cfg:?} pmd {i} p {p}"
        );
    }
}

#[test]
fn overflow_periods() {
    for cfg in configs() {
        for (p, n, chunk) in [
            (1000, 10_000, 7),
            (1000, 1_000_000, 999),
            (1 << 47, 5 << 47, 1 << 44),
            (3 << 49, 1 << 52, 1 << 46),
        ] {
            run_periods(cfg, p, n, chunk, false);
        }
    }
}

/// `PFM_REGFL_RANDOM` on the PMU, as `intel_arch.rs` checks it.
#[test]
fn randomised_periods_stay_exact() {
    for cfg in configs() {
        let m = model(&cfg);
        for (p, mask, n, chunk, switch) in [
            (10_000u64, 1023u64, 3_000_000u64, 4_999u64, false),
            (1 << 20, 0xffff, 40 << 20, 1 << 18, true),
        ] {
            let mut sim = AmdSim::new(cfg);
            let mut drv = Driver::new(&m);
            let start = period_to_value(p);
            for i in 0..m.num_counters() as usize {
                drv.write_pmc(i, 0x100c0, USER_ONLY).unwrap();
                drv.write_pmd(i, start, start).unwrap();
                drv.randomise(i, mask, 0x5eed + i as u64);
            }
            drv.load(&mut sim);
            drv.start(&mut sim);
            let mut left = n;
            while left > 0 {
                let c = left.min(chunk);
                sim.count(0xc0, 0, Ring::User, c);
                drv.service(&mut sim);
                if switch {
                    drv.switch_out(&mut sim);
                    drv.switch_in(&mut sim);
                }
                left -= c;
            }
            drv.stop(&mut sim);
            for i in 0..m.num_counters() as usize {
                let truth = sim.counted[i] as u64;
                let (overflows, value) = sim::random_truth(p, mask, 0x5eed + i as u64, truth);
                let what = format!("{cfg:?} pmd {i} p {p} mask {mask}");
                assert_eq!(drv.pmds[i].overflows, overflows, "{what}");
                assert_eq!(drv.pmds[i].value, value, "{what}");
            }
        }
    }
}

#[test]
fn enable_ordering_is_exact() {
    for cfg in configs() {
        run_periods(cfg, 1000, 100_000, 333, true);
        run_periods(cfg, 1 << 47, 3 << 47, 1 << 45, true);
    }
}

#[test]
fn context_switches_keep_counts_exact() {
    // Switched out after every chunk, with events of another thread while
    // out: only the context's own events count, overflows stay exact.
    for cfg in configs() {
        run_periods_switching(cfg, 1000, 100_000, 777, false, true);
        run_periods_switching(cfg, 1000, 50_000, 333, true, true);
        run_periods_switching(cfg, 1 << 47, 3 << 47, 1 << 45, false, true);
    }
}

#[test]
fn kernel_counting_follows_the_policy() {
    let m = model(&LEGACY);
    let mut sim = AmdSim::new(LEGACY);
    let mut drv = Driver::new(&m);
    assert_eq!(
        drv.write_pmc(0, 0x200c0, USER_ONLY),
        Err(PmcError::NotAllowed)
    );
    drv.write_pmc(0, 0x300c0, KERNEL_OK).unwrap();
    drv.write_pmc(1, 0x100c0, USER_ONLY).unwrap();
    drv.write_pmc(2, 0x200c0, KERNEL_OK).unwrap();
    drv.load(&mut sim);
    sim.count(0xc0, 0, Ring::User, 100);
    assert_eq!(sim.counted, [0; 16], "loaded but not started");
    drv.start(&mut sim);
    sim.count(0xc0, 0, Ring::User, 5);
    sim.count(0xc0, 0, Ring::Kernel, 7);
    drv.stop(&mut sim);
    sim.count(0xc0, 0, Ring::User, 100);
    assert_eq!(
        [drv.pmds[0].value, drv.pmds[1].value, drv.pmds[2].value],
        [12, 5, 7]
    );
}

#[test]
fn host_guest_only_with_svm_off() {
    // Accepted values; with SVM off exactly one of the two counts nothing
    // (Linux masks HostOnly for that reason; the module leaves it to the user).
    let m = model(&CORE);
    let mut sim = AmdSim::new(CORE);
    let mut drv = Driver::new(&m);
    drv.write_pmc(0, 0x100c0 | CTL_HOSTONLY, USER_ONLY).unwrap();
    drv.write_pmc(1, 0x100c0 | CTL_GUESTONLY, USER_ONLY)
        .unwrap();
    drv.write_pmc(2, 0x100c0 | CTL_GUESTONLY | CTL_HOSTONLY, USER_ONLY)
        .unwrap();
    drv.load(&mut sim);
    drv.start(&mut sim);
    sim.count(0xc0, 0, Ring::User, 3);
    drv.stop(&mut sim);
    assert_eq!(
        [drv.pmds[0].value, drv.pmds[1].value, drv.pmds[2].value],
        [0, 0, 3]
    );
}

#[test]
fn describe_fills_get_info() {
    let m = model(&CORE);
    let mut info = PfmInfo::default();
    m.describe(&mut info);
    assert_eq!(&info.model[..6], b"amd64\0");
    assert_eq!(
        (info.num_pmcs, info.num_pmds, info.counter_width),
        (6, 6, 47)
    );
    assert_eq!((info.impl_pmcs, info.impl_pmds), (0x3f, 0x3f));
    assert_eq!(info.pmc_rsvd_mask[5], CTL_RESERVED | CTL_INT);
    assert_eq!(info.pmc_rsvd_mask[6], u64::MAX);
    assert_eq!(info.num_events, 4);
    assert_eq!(&info.events[3].name[..14], b"branch-misses\0");
}
