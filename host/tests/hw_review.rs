// SPDX-License-Identifier: GPL-2.0

//! The hardware path's review findings (issue 19), each reproduced against
//! the simulators: the PMI throttle, linked PMD resets, hybrid Intel
//! probing, where counters may be installed, and the claim.

mod sim;

use pfm_host_tests::pfm_counter::{period_to_value, PmdState};
use pfm_host_tests::pfm_x86::driver::{
    core_types, HwModel, HwRegs, PmiThrottle, ProbeCpuid, CORE_TYPE_ATOM, CORE_TYPE_CORE,
    PMIS_PER_WINDOW, PMI_WINDOW_NS,
};
use pfm_host_tests::pfm_x86::intel_arch::IntelArch;
use pfm_host_tests::pfm_x86::model::{CpuidRegs, HwPmu, Policy, MIN_ARM_EVENTS};
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
    raw: Vec<u64>,
}

impl Ctx {
    fn new(model: IntelArch) -> Self {
        let pmc = model
            .validate_pmc(0, EVTSEL_INST_USER_INT, KERNEL_OK)
            .unwrap();
        Ctx {
            model,
            pmcs: vec![pmc],
            pmds: vec![PmdState::default(); 2],
            raw: vec![0; 2],
        }
    }

    fn regs(&mut self) -> HwRegs<'_, IntelArch> {
        HwRegs {
            model: &self.model,
            pmcs: &self.pmcs,
            pmc_used: 1,
            pmds: &mut self.pmds,
            raw: &mut self.raw,
            used: 1,
            tally: None,
            random_before: None,
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
    ctx.pmds[0].write(period_to_value(MIN_ARM_EVENTS));
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
        let out = ctx
            .regs()
            .pmi_throttled(&mut sim, true, &mut throttle, now + 3_000);
        assert_eq!((out.wrapped, out.overflowed, out.fault), (0, 0, None));
        assert_eq!(throttle.min_arm(), MIN_ARM_EVENTS, "after {real} real PMIs");
    }
    assert_eq!(real, 10 * u64::from(PMIS_PER_WINDOW));
}

/// perfmon2's `reg_reset_pmds`: when PMD 0 overflows, PMD 1 (in PMD 0's
/// `reset_pmds`) is reset to its own short reset value too. Soft model:
/// PMD 0 counts context switches with a period of 3, PMD 1 task-clock.
#[test]
fn reset_pmds_applied_on_soft_overflow() {
    use pfm_host_tests::abi;
    use pfm_host_tests::pfm_x86::soft::{soft_count, ThreadDeltas};
    let mut ev = [0u8; pfm_host_tests::pfm_x86::soft::SOFT_EVENT_CODES];
    ev[abi::PFM_SOFT_EV_CONTEXT_SWITCHES as usize] = 1 << 0;
    ev[abi::PFM_SOFT_EV_TASK_CLOCK as usize] = 1 << 1;
    let mut pmds = [PmdState::default(); 2];
    pmds[0].write(period_to_value(3));
    pmds[0].short_reset = period_to_value(3);
    pmds[0].reset_pmds = 1 << 1;
    pmds[1].short_reset = 7;
    let d = ThreadDeltas {
        task_clock: 1000,
        switches: 1,
        ..ThreadDeltas::default()
    };
    assert_eq!(soft_count(&ev, &mut pmds, &d), 0);
    assert_eq!(soft_count(&ev, &mut pmds, &d), 0);
    assert_eq!(pmds[1].value, 2000);
    // The third switch ends PMD 0's period: PMD 1 restarts from 7.
    assert_eq!(soft_count(&ev, &mut pmds, &d), 1 << 0);
    assert_eq!(pmds[0].value, period_to_value(3));
    assert_eq!((pmds[1].value, pmds[1].last_reset()), (7, 7));
    // Not the other way round: PMD 1's list is empty.
    assert_eq!(soft_count(&ev, &mut pmds, &d), 0);
    assert_eq!(pmds[1].value, 1007);
}

/// The same on the Intel simulator: PMD 0 (PMC0, instructions) overflows
/// in a PMI; PMD 1 (PMC1, cycles) is reset to its short reset value and
/// counts from there, on the hardware counter too.
#[test]
fn reset_pmds_applied_on_hw_pmi() {
    let cfg = IntelCfg::v(4, 4, 48, 3, 48, true);
    let model = IntelArch::probe(cfg.cpuid(), cfg.perf_capabilities()).unwrap();
    let mut sim = IntelSim::new(cfg);
    let mut ctx = Ctx::new(model);
    let cycles = model
        .validate_pmc(1, 0x3c | 1 << 16 | 1 << 22, KERNEL_OK)
        .unwrap();
    ctx.pmcs.push(cycles);
    let period = MIN_ARM_EVENTS;
    ctx.pmds[0].write(period_to_value(period));
    ctx.pmds[0].short_reset = period_to_value(period);
    ctx.pmds[0].reset_pmds = 1 << 1;
    ctx.pmds[1].short_reset = 5;
    fn regs(c: &mut Ctx) -> HwRegs<'_, IntelArch> {
        HwRegs {
            pmc_used: 0b11,
            used: 0b11,
            ..c.regs()
        }
    }
    assert_eq!(regs(&mut ctx).install(&mut sim, true).fault, None);
    sim.count((0x3c, 0), Ring::User, 1000);
    sim.count((0xc0, 0), Ring::User, period);
    assert_eq!(MsrBus::take_pmis(&mut sim), 1);
    let out = regs(&mut ctx).pmi(&mut sim, true);
    assert_eq!((out.overflowed, out.fault), (1 << 0, None));
    assert_eq!(ctx.pmds[1].value, 5, "PMD 1 reset with PMD 0's overflow");
    sim.count((0x3c, 0), Ring::User, 10);
    let out = regs(&mut ctx).stop(&mut sim, false);
    assert_eq!(out.fault, None);
    assert_eq!(
        ctx.pmds[1].value, 15,
        "the hardware counter restarted from the reset"
    );
    assert_eq!(ctx.pmds[0].value, period_to_value(period));
}

/// This thread's CPU time (user + system), in clock ticks.
fn thread_cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    // After the command name's closing parenthesis: state is field 3,
    // utime and stime fields 14 and 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

/// A LOAD that finds another one reserving the counters waits without
/// burning its CPU: the winner may sleep while it reserves or gives back
/// (IPIs, `cpus_read_lock`), and a spinning loser on a non-preemptible
/// kernel with both on one CPU would never let it finish. The claim's
/// state is kept under a sleeping lock (a mutex, as the kernel half does);
/// the reservation here takes 300 ms; the contender may use a few
/// scheduler ticks, not the 300 ms (30 ticks at USER_HZ 100) a spin costs.
/// (Against the spinning `ClaimWord` it replaced, the contender used 18.)
#[test]
fn claim_contender_sleeps() {
    use pfm_host_tests::pfm_x86::claim::ClaimState;
    use std::sync::{Arc, Barrier, Mutex};
    use std::time::Duration;
    let w = Arc::new(Mutex::new(ClaimState::new()));
    let started = Arc::new(Barrier::new(2));
    let winner = {
        let (w, started) = (w.clone(), started.clone());
        std::thread::spawn(move || {
            let mut st = w.lock().unwrap();
            assert!(st.take(|| {
                started.wait();
                std::thread::sleep(Duration::from_millis(300));
                true
            }));
        })
    };
    started.wait();
    let t0 = thread_cpu_ticks();
    assert!(w.lock().unwrap().take(|| panic!("reserved twice")));
    let used = thread_cpu_ticks() - t0;
    winner.join().unwrap();
    assert_eq!(w.lock().unwrap().holders(), 2);
    assert!(used <= 5, "the contender used {used} ticks of CPU waiting");
}

/// A hybrid Intel pair as Alder Lake announces it: P-cores with 8 GP
/// counters and fixed counters 0-3 (3: TOPDOWN.SLOTS, by ECX bitmap),
/// E-cores with 6 GP counters and fixed counters 0-2; both 48 bits.
fn hybrid_pair() -> (IntelCfg, IntelCfg) {
    let p = IntelCfg {
        fixed_bitmap: 0b1111,
        ..IntelCfg::v(5, 8, 48, 3, 48, true)
    };
    let e = IntelCfg::v(5, 6, 48, 3, 48, true);
    (p, e)
}

fn probe_of(cfg: &IntelCfg, core_type: u8) -> ProbeCpuid {
    ProbeCpuid {
        vendor: CpuidRegs {
            eax: 0x20,
            ebx: u32::from_le_bytes(*b"Genu"),
            edx: u32::from_le_bytes(*b"ineI"),
            ecx: u32::from_le_bytes(*b"ntel"),
        },
        leaf_0xa: cfg.cpuid(),
        perf_capabilities: cfg.perf_capabilities(),
        core_type,
        ..ProbeCpuid::default()
    }
}

/// Hybrid Intel, the boot CPU a P-core: the model the module selects from
/// probing every CPU must run on the E-cores too. A context using every
/// counter the model offers installs, counts and overflows on an E-core
/// simulator without a #GP (a GLOBAL_CTRL or FIXED_CTR_CTRL value naming
/// an absent counter faults as a whole: nothing would count there), and
/// the P-core's extra counters are refused at WRITE_PMCS.
#[test]
fn hybrid_model_runs_on_every_core_type() {
    use pfm_host_tests::abi;
    let (p, e) = hybrid_pair();
    let cpus = [
        probe_of(&p, CORE_TYPE_CORE),
        probe_of(&p, CORE_TYPE_CORE),
        probe_of(&e, CORE_TYPE_ATOM),
        probe_of(&e, CORE_TYPE_ATOM),
    ];
    let model = HwModel::probe_cpus(&cpus).expect("a model for every CPU");
    assert_eq!(
        core_types(&cpus),
        abi::PFM_CORE_TYPE_CORE | abi::PFM_CORE_TYPE_ATOM
    );
    let HwModel::Intel(m) = model else {
        panic!("not Intel")
    };
    // Every counter the model offers, on both core types.
    for cfg in [p, e] {
        let mut sim = IntelSim::new(cfg);
        let mut pmcs = Vec::new();
        let mut used = 0u64;
        let mut pmc_used = 0u64;
        for i in 0..m.num_gp() as usize {
            pmcs.push(m.validate_pmc(i, 0xc0 | 1 << 16, KERNEL_OK).unwrap());
            pmc_used |= 1 << i;
            used |= m.pmc_pmds(i, pmcs[i]);
        }
        pmcs.resize(17, 0);
        // Every fixed counter, user mode.
        let fixed = (0..4).filter(|n| m.fixed_mask() & (1 << n) != 0);
        let ctrl = fixed.fold(0u64, |v, n| v | 0x2 << (4 * n));
        pmcs[16] = m.validate_pmc(16, ctrl, KERNEL_OK).unwrap();
        pmc_used |= 1 << 16;
        used |= m.pmc_pmds(16, pmcs[16]);
        let mut pmds = vec![PmdState::default(); 20];
        let mut raw = vec![0u64; 20];
        let mut regs = HwRegs {
            model: &m,
            pmcs: &pmcs,
            pmc_used,
            pmds: &mut pmds,
            raw: &mut raw,
            used,
            tally: None,
            random_before: None,
            min_arm: MIN_ARM_EVENTS,
        };
        let out = regs.install(&mut sim, true);
        assert_eq!(out.fault, None, "install on the {} counters", cfg.num_gp);
        sim.count((0xc0, 0), Ring::User, 1000);
        let out = regs.stop(&mut sim, false);
        assert_eq!(out.fault, None);
        assert_eq!(
            pmds[0].value, 1000,
            "PMD 0 on the {}-counter core",
            cfg.num_gp
        );
    }
    // What only the P-cores have is refused.
    assert!(m.validate_pmc(6, 0xc0 | 1 << 16, KERNEL_OK).is_err());
    assert!(m.validate_pmc(16, 0x2 << 12, KERNEL_OK).is_err());
    // Counters of different widths cannot be shared: no model.
    let narrow = IntelCfg::v(5, 6, 40, 3, 48, true);
    assert_eq!(
        HwModel::probe_cpus(&[
            probe_of(&p, CORE_TYPE_CORE),
            probe_of(&narrow, CORE_TYPE_ATOM)
        ]),
        None
    );
    // Not hybrid: no core types.
    assert_eq!(core_types(&[probe_of(&e, 0)]), 0);
}

/// A PMI held off past three periods of a randomised PMD finds three
/// 64-bit overflows; the tally keeps the generator as it was before the
/// first, from which a sampling buffer draws each period's reset value
/// again (its entries each carry their own, as on the soft model).
#[test]
fn a_late_pmi_keeps_the_generator_before_its_first_reset() {
    use pfm_host_tests::pfm_random::PeriodRandom;
    const P: u64 = 1_000_000;
    const MASK: u64 = 0xffff;
    let cfg = IntelCfg::v(4, 4, 48, 3, 48, true);
    let model = IntelArch::probe(cfg.cpuid(), cfg.perf_capabilities()).unwrap();
    let mut sim = IntelSim::new(cfg);
    let mut ctx = Ctx::new(model);
    let seed = 0x1234_5678_9abc_def1;
    let random = PeriodRandom::new(seed, MASK).unwrap();
    let minus_p = period_to_value(P);
    ctx.pmds[0].program(minus_p, minus_p, minus_p, 0, 0, random);
    let (mut tally, mut before) = ([0u64; 2], [0u64; 2]);
    {
        let mut r = ctx.regs();
        r.tally = Some(&mut tally);
        r.random_before = Some(&mut before);
        assert_eq!(r.install(&mut sim, true).fault, None);
    }
    // Three periods and a half before the PMI is taken (the first
    // randomised period is at least P, at most P + MASK).
    sim.count((0xc0, 0), Ring::User, 3 * P + 3 * MASK + P / 2);
    let out = {
        let mut r = ctx.regs();
        r.tally = Some(&mut tally);
        r.random_before = Some(&mut before);
        r.pmi(&mut sim, true)
    };
    assert_eq!(out.fault, None);
    assert_eq!(out.overflowed, 1);
    assert_eq!(tally[0], 3, "three periods crossed");
    // The written -P ended the first period; each reset drew one amount.
    assert_eq!(before[0], seed, "the generator before the first reset");
    let mut replay = PeriodRandom::new(before[0], MASK).unwrap();
    let resets: Vec<u64> = (0..3).map(|_| replay.reset_value(minus_p)).collect();
    assert_eq!(ctx.pmds[0].last_reset(), resets[2]);
    assert_eq!(ctx.pmds[0].random().state(), replay.state());
}
