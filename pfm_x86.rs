// SPDX-License-Identifier: GPL-2.0

//! The PMU layer: what the rest of the module knows about the counters is
//! [`Pmu`], the model chosen at load, and its per-CPU state.
//!
//! - `soft.rs`: the model every machine has, software counters (task clock,
//!   context switches, CPU migrations) of a configurable width, virtualized
//!   by the same save/restore path as hardware counters.
//! - `model.rs`, `intel_arch.rs`, `amd64.rs`, `driver.rs`: the hardware
//!   models and the MSR sequences that drive them (pure, host-tested
//!   against the simulators of `intel_sim.rs` and `host/tests/sim`).
//! - `cpuid.rs`: probing. Where CPUID announces no usable PMU (every machine
//!   here, QEMU TCG included) the hardware models are refused with
//!   `ENODEV`, and nothing touches an MSR.
//! - `sim_cpu.rs`: `pmu=intel_arch_sim`, a simulated PMU on every CPU.
//! - `claim.rs`: what a hardware model takes from perf_events, and gives back.
//! - `percpu.rs`: whose counters are on each CPU's PMU, and its register
//!   generation (x86 perf's `cpu_hw_events`).

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use kernel::prelude::*;

use crate::abi;
use crate::rust::IrqWork;

pub mod amd64;
pub mod claim;
pub(crate) mod counters;
mod cpuid;
pub mod driver;
pub mod intel_arch;
pub mod intel_sim;
pub mod model;
mod percpu;
mod sim_cpu;
pub mod soft;
pub mod throttle;

use claim::Claims;
pub(crate) use claim::HwClaim;
pub(crate) use cpuid::cpu_has_pmu;
use driver::{HwModel, MsrBus, MsrFault, Outcome};
use model::{copy_name, HwPmu, PmcError, Policy};
use percpu::CpuPmus;
use sim_cpu::{SimCpu, SimCpus};
pub(crate) use soft::{count_clock_unless_overflow, soft_count, ThreadDeltas};
use soft::{SoftEvent, SOFT_COUNTERS, SOFT_EVENTS, SOFT_PMC_RSVD_MASK};

/// Which model the module runs, chosen once at load.
pub(crate) struct Pmu {
    /// Counter width of the model, in bits (the soft width, or the
    /// narrowest armed width of the hardware model's counters).
    pub(crate) width: u32,
    /// The hardware model, `None` for soft.
    pub(crate) hw: Option<HwModel>,
    /// The implemented PMDs ([`Pmu::impl_mask`]), computed once: every
    /// register call checks its PMD numbers against it.
    impl_pmds: u64,
    /// `intel_arch_sim`: one simulated PMU per possible CPU, which the
    /// hardware model's MSR accesses go to instead of the CPU's.
    sim: Option<SimCpus>,
    /// Each CPU's PMU: its owner and register generation.
    cpus: CpuPmus,
    /// Hybrid Intel: the `PFM_CORE_TYPE_*` of the CPUs' core types
    /// (`PFM_IOC_GET_INFO`).
    core_types: u32,
    /// The hardware claim: live hardware contexts holding it, and whether
    /// the counters are reserved (see [`Pmu::hw_claim`]).
    claims: Pin<KBox<Claims>>,
    /// MSR accesses that faulted (never expected: the models are host-tested).
    pub(crate) msr_faults: AtomicU64,
    /// Prints the first MSR fault (hardware models).
    fault_report: Option<Pin<KBox<FaultReport>>>,
    /// When the "counters held by perf_events" line was last printed.
    busy_warned_at: AtomicU64,
    /// Hardware switch-ins that wrote every register (sysfs).
    pub(crate) full_restores: AtomicU64,
    /// Hardware switch-ins that only restarted counting (sysfs).
    pub(crate) lazy_restores: AtomicU64,
    /// Hardware switch-ins that left the counters off the PMU: the CPU
    /// had no overflow vector, or (coming online after the probe) lacks
    /// counters of the model (sysfs `hw_skipped_installs`).
    pub(crate) skipped_installs: AtomicU64,
}

/// The first MSR fault's report, printed from an irq_work: [`Pmu::note`]
/// runs in the switch-out hook, under the runqueue lock, where a printk can
/// deadlock (the console path may wake a task, which takes that lock).
/// `printk_deferred` would do, but 6.12 exports neither `_printk_deferred`
/// nor `__printk_deferred_enter` to modules.
#[pin_data]
struct FaultReport {
    #[pin]
    work: IrqWork,
    /// The model's name.
    model: &'static str,
    /// The MSR of the first fault.
    msr: AtomicU32,
}

impl FaultReport {
    fn new(model: &'static str) -> impl PinInit<Self> {
        pin_init!(Self {
            work <- IrqWork::new(report_fault),
            model,
            msr: AtomicU32::new(0),
        })
    }
}

/// The irq_work of [`FaultReport`]: no lock of the scheduler is held here.
///
/// # Safety
///
/// `work` is the `work` field of a live [`FaultReport`].
unsafe extern "C" fn report_fault(work: *mut IrqWork) {
    // SAFETY: `work` is the `work` field of a `FaultReport`, alive until
    // the `Pmu` that owns it is dropped, which waits for this callback.
    let r = unsafe { &*kernel::container_of!(work, FaultReport, work) };
    pr_err!(
        "{}: MSR {:#x} faulted; counts may be wrong (please report)\n",
        r.model,
        r.msr.load(Ordering::Relaxed)
    );
}

/// Why a model could not be selected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProbeError {
    /// The requested model's hardware is absent (`ENODEV`).
    NoHardware(&'static str),
    /// The parameters are invalid (`EINVAL`).
    BadParam,
    /// No memory for the simulated PMUs (`ENOMEM`).
    NoMemory,
}

/// This CPU's MSRs, through the `_safe` accessors.
pub(crate) struct CpuMsrs;

/// The MSR bus of the PMU the module runs: the CPU's MSRs, or this CPU's
/// simulated PMU under `intel_arch_sim`.
pub(crate) struct PmuBus<'a> {
    /// `Some` under `intel_arch_sim`: this CPU's simulator, if it has one.
    sim: Option<Option<&'a SimCpu>>,
}

impl MsrBus for PmuBus<'_> {
    fn rdmsr(&mut self, msr: u32) -> Result<u64, MsrFault> {
        match self.sim {
            None => CpuMsrs.rdmsr(msr),
            Some(Some(cpu)) => cpu.rdmsr(msr),
            Some(None) => Err(MsrFault { msr }),
        }
    }
    fn wrmsr(&mut self, msr: u32, value: u64) -> Result<(), MsrFault> {
        match self.sim {
            None => CpuMsrs.wrmsr(msr, value),
            Some(Some(cpu)) => cpu.wrmsr(msr, value),
            Some(None) => Err(MsrFault { msr }),
        }
    }
}

impl MsrBus for CpuMsrs {
    fn rdmsr(&mut self, msr: u32) -> Result<u64, MsrFault> {
        // SAFETY: The driver only names registers of the selected model,
        // which CPUID announced (`HwModel::probe`), all free of read effects.
        unsafe { crate::rust::rdmsr_safe(msr) }.ok_or(MsrFault { msr })
    }
    fn wrmsr(&mut self, msr: u32, value: u64) -> Result<(), MsrFault> {
        // SAFETY: As above; the values come from the model (reserved bits
        // clear, host-tested against the simulators), and the driver runs
        // only on a context installed after `Pmu::hw_claim` took the counters.
        if unsafe { crate::rust::wrmsr_safe(msr, value) } {
            Ok(())
        } else {
            Err(MsrFault { msr })
        }
    }
}

/// The model `pmu=` names, before anything is allocated for it.
struct Choice {
    /// The hardware model, `None` for soft.
    hw: Option<HwModel>,
    /// `intel_arch_sim`: `hw` runs on simulated PMUs.
    sim: bool,
    /// Why it was chosen, for the load message.
    why: &'static str,
    /// Hybrid Intel: the `PFM_CORE_TYPE_*` of the CPUs' core types.
    core_types: u32,
}

impl Choice {
    /// Picks the model named by `pmu=`: `auto`, `soft`, `intel_arch`,
    /// `amd64` or `intel_arch_sim`.
    fn pick(name: &[u8]) -> Result<Self, ProbeError> {
        if name == b"intel_arch_sim" {
            return Ok(Self {
                hw: Some(sim_cpu::sim_model().ok_or(ProbeError::BadParam)?),
                sim: true,
                why: "requested with pmu=intel_arch_sim: Intel arch perfmon v4 simulated in software on every CPU (a test model)",
                core_types: 0,
            });
        }
        // Every CPU: a hybrid part's core types announce different counters.
        let (hw, core_types) = cpuid::probe_all_cpus();
        let choice = |hw, why| Self {
            hw,
            sim: false,
            why,
            core_types,
        };
        match (name, hw) {
            (b"soft", _) => Ok(choice(None, "requested with pmu=soft")),
            (b"auto", None) => Ok(choice(None, "the CPU announces no usable PMU (CPUID)")),
            (b"auto", Some(m)) => Ok(choice(Some(m), "announced by CPUID")),
            (b"intel_arch", Some(m @ HwModel::Intel(_))) => {
                Ok(choice(Some(m), "requested with pmu=intel_arch"))
            }
            (b"amd64", Some(m @ HwModel::Amd(_))) => {
                Ok(choice(Some(m), "requested with pmu=amd64"))
            }
            (b"intel_arch", _) => Err(ProbeError::NoHardware(
                "intel_arch: CPUID leaf 0xA announces no architectural perfmon",
            )),
            (b"amd64", _) => Err(ProbeError::NoHardware(
                "amd64: CPUID announces no AMD64 core performance counters",
            )),
            _ => Err(ProbeError::BadParam),
        }
    }
}

/// The soft model's parameters.
pub(crate) struct SoftParams {
    /// Counter width in bits, 16..=64 (`soft_width=`).
    pub(crate) width: u32,
    /// Counters implemented, 1..=4 (`soft_counters=`): fewer than the
    /// events a tool asks for make event sets multiplex on machines
    /// without a PMU, as they would on a real one.
    pub(crate) counters: u32,
}

impl Pmu {
    /// Picks the model named by `pmu=` (`auto`, `soft`, `intel_arch`,
    /// `amd64`, `intel_arch_sim`) with the soft model's parameters `soft`,
    /// `mux_fired` being what a CPU's multiplexing timer calls (the event
    /// sets of the context whose counters are on its PMU) and
    /// `clock_fired` its task-clock timer (the running thread's next
    /// task-clock overflow); returns the model and why it was picked.
    pub(crate) fn select(
        name: &[u8],
        soft: SoftParams,
        mux_fired: fn(),
        clock_fired: fn(),
    ) -> Result<(Pmu, &'static str), ProbeError> {
        if !(16..=64).contains(&soft.width) || !(1..=SOFT_COUNTERS as u32).contains(&soft.counters)
        {
            return Err(ProbeError::BadParam);
        }
        let Choice {
            hw,
            sim,
            why,
            core_types,
        } = Choice::pick(name)?;
        let nomem = |_| ProbeError::NoMemory;
        let sim = if sim {
            Some(SimCpus::new().map_err(nomem)?)
        } else {
            None
        };
        let mut pmu = Pmu {
            width: hw.map_or(soft.width, |m| m.counter_width()),
            impl_pmds: hw.map_or((1u64 << soft.counters) - 1, |m| m.impl_pmds()),
            hw,
            sim,
            cpus: CpuPmus::new(mux_fired, clock_fired).map_err(nomem)?,
            core_types,
            claims: Claims::new().map_err(nomem)?,
            msr_faults: AtomicU64::new(0),
            fault_report: None,
            busy_warned_at: AtomicU64::new(0),
            full_restores: AtomicU64::new(0),
            lazy_restores: AtomicU64::new(0),
            skipped_installs: AtomicU64::new(0),
        };
        if pmu.hw.is_some() {
            let report = KBox::pin_init(FaultReport::new(pmu.name()), GFP_KERNEL);
            pmu.fault_report = Some(report.map_err(nomem)?);
        }
        Ok((pmu, why))
    }

    /// Whether the model runs on simulated PMUs (`intel_arch_sim`).
    pub(crate) fn is_sim(&self) -> bool {
        self.sim.is_some()
    }

    /// The model's name.
    pub(crate) fn name(&self) -> &'static str {
        match (&self.hw, &self.sim) {
            (Some(_), Some(_)) => "intel_arch_sim",
            (Some(m), None) => m.name(),
            (None, _) => "soft",
        }
    }

    /// `intel_arch_sim`: starts each online CPU's tick (module init, after
    /// `globals()` is set; the simulators no longer move).
    pub(crate) fn start_sim_ticks(&self) {
        if let Some(sim) = &self.sim {
            sim.start_ticks();
        }
    }

    /// `intel_arch_sim`: stops every tick (module exit, process context).
    pub(crate) fn stop_sim_ticks(&self) {
        if let Some(sim) = &self.sim {
            sim.stop_ticks();
        }
    }

    /// The MSR bus of this CPU (interrupts off).
    pub(crate) fn bus(&self) -> PmuBus<'_> {
        PmuBus {
            sim: self.sim.as_ref().map(SimCpus::here),
        }
    }

    /// Bit n set: PMD n exists.
    pub(crate) fn impl_mask(&self) -> u64 {
        self.impl_pmds
    }

    /// Fills `PFM_IOC_GET_INFO`'s model part.
    pub(crate) fn describe(&self, info: &mut abi::PfmInfo) {
        match &self.hw {
            Some(m) => m.describe(info),
            None => self.describe_soft(info),
        }
        // Over the hardware model's own name: `intel_arch_sim` says it is
        // the simulated one.
        copy_name(&mut info.model, self.name());
        info.core_types = self.core_types;
    }

    /// [`Pmu::describe`] for the soft model.
    fn describe_soft(&self, info: &mut abi::PfmInfo) {
        let n = self.impl_mask().count_ones() as u16;
        info.num_pmcs = n;
        info.num_pmds = n;
        info.counter_width = self.width as u16;
        info.impl_pmcs = self.impl_mask();
        info.impl_pmds = self.impl_mask();
        for (i, rsvd) in info.pmc_rsvd_mask.iter_mut().enumerate() {
            *rsvd = if self.impl_mask() & (1u64 << i) != 0 {
                SOFT_PMC_RSVD_MASK
            } else {
                u64::MAX
            };
        }
        info.num_events = SOFT_EVENTS.len() as u16;
        for (slot, (name, code)) in info.events.iter_mut().zip(SOFT_EVENTS.iter()) {
            copy_name(&mut slot.name, name);
            slot.code = *code;
        }
    }

    /// The counting policy of the caller: kernel-mode counting (the OS
    /// bits) needs CAP_PERFMON or CAP_SYS_ADMIN, as perf_events requires
    /// at its default `perf_event_paranoid` of 2.
    pub(crate) fn caller_policy() -> Policy {
        Policy {
            allow_kernel: crate::rust::perfmon_capable(),
        }
    }

    /// Checks a PMC value from user space: `Ok` holds the value to keep,
    /// `Err` the `PFM_REG_RETFL_*` bit.
    pub(crate) fn validate_pmc(&self, reg: usize, value: u64, policy: Policy) -> Result<u64, u32> {
        if let Some(m) = &self.hw {
            return m.validate_pmc(reg, value, policy).map_err(PmcError::retfl);
        }
        if reg >= SOFT_COUNTERS || self.impl_mask() & (1 << reg) == 0 {
            return Err(abi::PFM_REG_RETFL_NOTAVAIL);
        }
        match SoftEvent::from_pmc(value) {
            Some(_) => Ok(value),
            None => Err(abi::PFM_REG_RETFL_EINVAL),
        }
    }

    /// Whether one of `values` (PMC values) selects one of the soft
    /// model's page-fault events (the context then reads its thread's
    /// fault counters).
    pub(crate) fn pmcs_count_faults(&self, mut values: impl Iterator<Item = u64>) -> bool {
        self.hw.is_none() && values.any(|v| soft::SOFT_FAULT_EVENTS.contains(&(v as usize)))
    }

    /// The PMDs PMC `reg` with the validated `value` makes count (hardware
    /// models; 0 for soft, whose PMCs select events for their own PMD).
    pub(crate) fn pmc_pmds(&self, reg: usize, value: u64) -> u64 {
        match &self.hw {
            Some(m) => m.pmc_pmds(reg, value),
            None => 0,
        }
    }

    /// Records an MSR access that faulted: counted (sysfs `msr_faults`),
    /// the first one reported in the kernel log from an irq_work (this runs
    /// under the runqueue lock at a switch-out: see [`FaultReport`]).
    pub(crate) fn note(&self, out: &Outcome) {
        if let Some(f) = out.fault {
            if self.msr_faults.fetch_add(1, Ordering::Relaxed) == 0 {
                if let Some(r) = &self.fault_report {
                    r.msr.store(f.msr, Ordering::Relaxed);
                    r.work.queue();
                }
            }
        }
    }
}

impl Drop for Pmu {
    fn drop(&mut self) {
        // A fault report still pending runs before its storage goes.
        if let Some(r) = &self.fault_report {
            r.work.sync();
        }
    }
}
