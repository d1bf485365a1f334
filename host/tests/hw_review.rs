// SPDX-License-Identifier: GPL-2.0

//! The hardware path's review findings (issue 19), each reproduced against
//! the simulators: the PMI throttle, linked PMD resets, hybrid Intel
//! probing, where counters may be installed, and the claim.

mod sim;

use pfm_host_tests::pfm_counter::{period_to_value, PmdState};
use pfm_host_tests::pfm_x86::driver::{HwRegs, PmiThrottle, PMIS_PER_WINDOW, PMI_WINDOW_NS};
use pfm_host_tests::pfm_x86::intel_arch::IntelArch;
use pfm_host_tests::pfm_x86::model::{HwPmu, Policy, MIN_ARM_EVENTS};
use sim::intel::{IntelCfg, IntelSim};
use sim::{MsrBus, Ring};

const KERNEL_OK: Policy = Policy { allow_kernel: true };

/// `INST_RETIRED.ANY_P` in user mode, enabled, PMI on overflow.
const EVTSEL_INST_USER_INT: u64 = 0xc0 | 1 << 16 | 1 << 22;

/// One context on one simulated Intel PMU: PMC0 counting instructions
/// into PMD0.
struct Ctx {
    model: IntelArch,
    pmcs: Vec<u64>,
    pmds: Vec<PmdState>,
}

impl Ctx {
    fn new(model: IntelArch) -> Self {
        let pmc = model.validate_pmc(0, EVTSEL_INST_USER_INT, KERNEL_OK).unwrap();
        Ctx {
            model,
            pmcs: vec![pmc],
            pmds: vec![PmdState::default(); 2],
        }
    }

    fn regs(&mut self) -> HwRegs<'_, IntelArch> {
        HwRegs {
            model: &self.model,
            pmcs: &self.pmcs,
            pmc_used: 1,
            pmds: &mut self.pmds,
            used: 1,
            tally: None,
            min_arm: MIN_ARM_EVENTS,
        }
    }
}

/// Real PMIs at exactly the documented limit, each followed (as in the
/// module) by the self-IPI that delivers its overflow on the same vector:
/// the throttle must not engage. It counted the self-IPIs too, halving the
/// limit, and armed the counters four times farther.
#[test]
fn throttle_counts_only_real_pmis() {
    let cfg = IntelCfg::v(4, 4, 48, 3, 48, true);
    let model = IntelArch::probe(cfg.cpuid(), cfg.perf_capabilities()).unwrap();
    let mut sim = IntelSim::new(cfg);
    let mut ctx = Ctx::new(model);
    // A period of exactly the arming floor: one PMI per period.
    ctx.pmds[0].write(period_to_value(MIN_ARM_EVENTS), 64);
    ctx.pmds[0].short_reset = period_to_value(MIN_ARM_EVENTS);
    let mut throttle = PmiThrottle::new();
    let out = ctx.regs().install(&mut sim, true);
    assert_eq!(out.fault, None);
    let step = PMI_WINDOW_NS / u64::from(PMIS_PER_WINDOW);
    let mut now = 0;
    let mut real = 0;
    for _ in 0..10 * PMIS_PER_WINDOW {
        sim.count((0xc0, 0), Ring::User, MIN_ARM_EVENTS);
        assert_eq!(MsrBus::take_pmis(&mut sim), 1, "the period ends in a PMI");
        now += step;
        let mut regs = ctx.regs();
        let out = regs.pmi_throttled(&mut sim, true, &mut throttle, now);
        assert_eq!(out.fault, None);
        real += u64::from(out.wrapped != 0);
        // The self-IPI for the overflow, a few microseconds later.
        let out = ctx.regs().pmi_throttled(&mut sim, true, &mut throttle, now + 3_000);
        assert_eq!((out.wrapped, out.overflowed, out.fault), (0, 0, None));
        assert_eq!(throttle.min_arm(), MIN_ARM_EVENTS, "after {real} real PMIs");
    }
    assert_eq!(real, 10 * u64::from(PMIS_PER_WINDOW));
}
