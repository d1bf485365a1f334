// SPDX-License-Identifier: GPL-2.0

//! `pmu=intel_arch_sim`: a simulated Intel PMU (`intel_sim.rs`) on every
//! possible CPU, which the hardware model's MSR accesses go to instead of
//! the CPU's. Each CPU's PMU advances by the time the CPU ran, at every
//! access and on a 1 ms tick, and raises its PMIs where the CPU's LVTPC
//! points, as hardware does: the whole hardware path runs under QEMU TCG.

use core::cell::UnsafeCell;

use kernel::prelude::*;

use super::driver::{HwModel, MsrBus, MsrFault};
use super::intel_arch::IntelArch;
use super::intel_sim::{IntelCfg, IntelSim, Ring};
use crate::rust::{self as glue, PeriodicTimer};

/// The PMU `intel_arch_sim` simulates: Intel architectural perfmon v4 with
/// four 48-bit general-purpose counters, three 48-bit fixed counters and
/// full-width writes.
const SIM_CFG: IntelCfg = IntelCfg {
    version: 4,
    num_gp: 4,
    gp_width: 48,
    mask_len: 7,
    unavailable: 0,
    nfixed: 3,
    fixed_bitmap: 0,
    fixed_width: 48,
    any_deprecated: false,
    fw_write: true,
};

/// What the simulated CPU executes: events and the right shift that turns
/// nanoseconds run into their count (core and reference cycles at 1 GHz,
/// one instruction every other cycle).
const SIM_EVENTS: [((u8, u8), u32); 3] = [((0x3c, 0x00), 0), ((0x3c, 0x01), 0), ((0xc0, 0x00), 1)];

/// How often each CPU's simulated PMU advances on its own (1 ms).
const SIM_TICK_NS: i64 = 1_000_000;

/// The model the simulated CPUs announce, as the hardware probe would
/// decode it from their CPUID.
pub(crate) fn sim_model() -> Option<HwModel> {
    IntelArch::probe(SIM_CFG.cpuid(), SIM_CFG.perf_capabilities()).map(HwModel::Intel)
}

/// One CPU's simulated PMU and the time it was last advanced to.
struct SimState {
    sim: IntelSim,
    last_ns: u64,
}

/// One CPU's simulated PMU.
///
/// # Invariants
///
/// `state` is only accessed on its own CPU with interrupts off (every MSR
/// access of the module is: under a context's lock, or in an IPI), so
/// accesses never overlap.
pub(crate) struct SimCpu {
    state: UnsafeCell<SimState>,
    /// The CPU's clock tick: advances the simulated PMU every
    /// [`SIM_TICK_NS`], so its PMIs also arrive while a thread runs, as a
    /// hardware PMI would (started on its CPU by [`SimCpus::start_ticks`]).
    tick: PeriodicTimer,
}

// SAFETY: See the type invariant: one CPU, interrupts off, at a time.
unsafe impl Sync for SimCpu {}
// SAFETY: As above.
unsafe impl Send for SimCpu {}

impl SimCpu {
    /// Runs `access` on this CPU's simulated PMU after advancing it to now
    /// (the CPU ran: every enabled counter counts, whoever runs, as on
    /// hardware), then delivers the PMIs it raised. `None` if interrupts
    /// are on (a caller bug, reported as a fault rather than a data race).
    fn access<R>(&self, access: impl FnOnce(&mut IntelSim) -> R) -> Option<R> {
        if !glue::irqs_disabled() {
            return None;
        }
        // SAFETY: This CPU's state with interrupts off (type invariant): no
        // other access can run until we return.
        let st = unsafe { &mut *self.state.get() };
        let now = glue::now_ns();
        let ran = now.saturating_sub(st.last_ns);
        st.last_ns = now;
        for (event, shift) in SIM_EVENTS {
            st.sim.count(event, Ring::User, ran >> shift);
        }
        let r = access(&mut st.sim);
        if st.sim.take_pmis() != 0 {
            raise_pmi();
        }
        Some(r)
    }

    /// Reads a register of this CPU's simulated PMU (interrupts off).
    pub(crate) fn rdmsr(&self, msr: u32) -> Result<u64, MsrFault> {
        self.access(|s| s.rdmsr(msr))
            .unwrap_or(Err(MsrFault { msr }))
    }

    /// Writes a register of this CPU's simulated PMU (interrupts off).
    pub(crate) fn wrmsr(&self, msr: u32, value: u64) -> Result<(), MsrFault> {
        self.access(|s| s.wrmsr(msr, value))
            .unwrap_or(Err(MsrFault { msr }))
    }
}

/// Delivers a PMI of this CPU's simulated PMU where the CPU's LVTPC points,
/// as hardware would: to its vector if it names one in fixed delivery mode
/// and is unmasked (the module's overflow vector while the module holds
/// LVTPC); nowhere otherwise (an NMI entry, or masked). Interrupts off.
fn raise_pmi() {
    if let Some(vector) = glue::irq::lvt_fixed_vector(glue::apic_read_lvtpc()) {
        glue::send_ipi_self(vector);
    }
}

/// A simulator tick (hard IRQ): the CPU ran; its PMU advances and raises
/// the PMIs of the counters that wrapped. The PMU of the CPU this runs on
/// (a timer that hotplug moved to another CPU advances that one's).
fn sim_tick() {
    if let Some(sims) = &crate::globals().pmu.sim {
        if let Some(c) = sims.here() {
            c.access(|_| ());
        }
    }
}

/// Every possible CPU's simulated PMU.
pub(crate) struct SimCpus(KVec<SimCpu>);

impl SimCpus {
    /// One simulated PMU per possible CPU, ticks not started.
    pub(crate) fn new() -> Result<Self> {
        let cpus = glue::cpu::per_cpu_vec(|| SimCpu {
            state: UnsafeCell::new(SimState {
                sim: IntelSim::new(SIM_CFG),
                last_ns: 0,
            }),
            tick: PeriodicTimer::new(SIM_TICK_NS, sim_tick),
        })?;
        Ok(Self(cpus))
    }

    /// This CPU's simulated PMU.
    pub(crate) fn here(&self) -> Option<&SimCpu> {
        self.0.get(glue::this_cpu() as usize)
    }

    /// Starts each online CPU's tick, on that CPU (module init, once
    /// `globals()` is set: the tick reads it).
    pub(crate) fn start_ticks(&self) {
        glue::on_each_cpu(&|| {
            if let Some(c) = self.here() {
                // SAFETY: The vector's storage never moves once `new`
                // returned (nothing is pushed after), and is dropped only
                // with the module's `Pmu`; `stop_ticks` runs at exit, after
                // this returned.
                unsafe { c.tick.start_here() };
            }
        });
    }

    /// Stops every tick (module exit, process context).
    pub(crate) fn stop_ticks(&self) {
        for c in self.0.iter() {
            c.tick.cancel();
        }
    }
}
