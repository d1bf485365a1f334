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
        let pmc = model
            .validate_pmc(0, EVTSEL_INST_USER_INT, KERNEL_OK)
            .unwrap();
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
    let mut ev = [0u8; 4];
    ev[abi::PFM_SOFT_EV_CONTEXT_SWITCHES as usize] = 1 << 0;
    ev[abi::PFM_SOFT_EV_TASK_CLOCK as usize] = 1 << 1;
    let mut pmds = [PmdState::default(); 2];
    pmds[0].write(period_to_value(3), 64);
    pmds[0].short_reset = period_to_value(3);
    pmds[0].reset_pmds = 1 << 1;
    pmds[1].short_reset = 7;
    let d = ThreadDeltas {
        task_clock: 1000,
        switches: 1,
        ..ThreadDeltas::default()
    };
    assert_eq!(soft_count(&ev, &mut pmds, &d, 64), 0);
    assert_eq!(soft_count(&ev, &mut pmds, &d, 64), 0);
    assert_eq!(pmds[1].value, 2000);
    // The third switch ends PMD 0's period: PMD 1 restarts from 7.
    assert_eq!(soft_count(&ev, &mut pmds, &d, 64), 1 << 0);
    assert_eq!(pmds[0].value, period_to_value(3));
    assert_eq!((pmds[1].value, pmds[1].last_reset), (7, 7));
    // Not the other way round: PMD 1's list is empty.
    assert_eq!(soft_count(&ev, &mut pmds, &d, 64), 0);
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
    ctx.pmds[0].write(period_to_value(period), 64);
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
