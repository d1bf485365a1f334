// SPDX-License-Identifier: GPL-2.0

//! PMU models behind one interface: what the rest of the module knows about
//! the counters is [`Pmu`].
//!
//! `soft` is the model every machine has: software counters (task clock,
//! context switches, CPU migrations) of a configurable width, virtualized by
//! the same save/restore path as hardware counters. The hardware models
//! (`intel_arch`, `amd64`) are probed from CPUID; where CPUID announces no
//! usable PMU (every machine here, QEMU TCG included) they are refused with
//! `ENODEV`, and nothing touches an MSR.

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use kernel::bindings;
use kernel::prelude::*;
use kernel::types::Opaque;

use crate::abi;
pub(crate) use crate::pfm_counter::PmdState;
use crate::rust::IrqWork;

/// Counters of the soft model.
pub(crate) const SOFT_COUNTERS: usize = 4;

/// A soft PMU event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SoftEvent {
    /// The counter is off.
    None,
    /// Nanoseconds the thread ran.
    TaskClock,
    /// Switch-outs of the thread.
    ContextSwitches,
    /// Switch-ins on another CPU than the previous one.
    CpuMigrations,
}

impl SoftEvent {
    /// Decodes a PMC value; `None` if any bit outside the event code is set
    /// or the code is unknown.
    pub(crate) const fn from_pmc(value: u64) -> Option<Self> {
        match value {
            abi::PFM_SOFT_EV_NONE => Some(Self::None),
            abi::PFM_SOFT_EV_TASK_CLOCK => Some(Self::TaskClock),
            abi::PFM_SOFT_EV_CONTEXT_SWITCHES => Some(Self::ContextSwitches),
            abi::PFM_SOFT_EV_CPU_MIGRATIONS => Some(Self::CpuMigrations),
            _ => None,
        }
    }
}

/// The soft model's events, as `PFM_IOC_GET_INFO` lists them.
pub(crate) const SOFT_EVENTS: [(&str, u64); 3] = [
    ("task-clock", abi::PFM_SOFT_EV_TASK_CLOCK),
    ("context-switches", abi::PFM_SOFT_EV_CONTEXT_SWITCHES),
    ("cpu-migrations", abi::PFM_SOFT_EV_CPU_MIGRATIONS),
];

/// Bits a soft PMC value must leave zero: everything above the event code.
pub(crate) const SOFT_PMC_RSVD_MASK: u64 = !0x3;

/// What happened to a thread since its soft counters were last advanced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SoftDeltas {
    /// Nanoseconds on a CPU.
    pub(crate) task_clock: u64,
    /// Switch-outs.
    pub(crate) switches: u64,
    /// Migrations.
    pub(crate) migrations: u64,
}

/// Which model the module runs, chosen once at load.
pub(crate) struct Pmu {
    /// Counter width of the model, in bits (the soft width, or the
    /// narrowest armed width of the hardware model's counters).
    pub(crate) width: u32,
    /// The hardware model, `None` for soft.
    pub(crate) hw: Option<HwModel>,
    /// `intel_arch_sim`: one simulated PMU per possible CPU, which the
    /// hardware model's MSR accesses go to instead of the CPU's.
    sim: Option<KVec<SimCpu>>,
    /// The hardware claim: live hardware contexts holding it, and whether
    /// the counters are reserved (see [`Pmu::hw_claim`]).
    claims: ClaimWord,
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
}

/// One hardware context's claim on the hardware (in its attachment): taken
/// by [`Pmu::hw_claim`] when LOAD publishes the attachment, given back by
/// [`Pmu::hw_unclaim`] when the attachment ends.
pub(crate) struct HwClaim(AtomicBool);

impl HwClaim {
    /// No claim held yet.
    pub(crate) const fn new() -> Self {
        Self(AtomicBool::new(false))
    }
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

pub mod amd64;
pub mod claim;
pub(crate) mod counters;
pub mod driver;
pub mod intel_arch;
pub mod intel_sim;
pub mod model;

use claim::ClaimWord;
use driver::{HwModel, MsrBus, MsrFault, Outcome, ProbeCpuid};
use intel_arch::IntelArch;
use intel_sim::{IntelCfg, IntelSim, Ring};
use model::{CpuidRegs, HwPmu, PmcError, Policy};

/// CPUID `leaf` (subleaf 0), as the register models take it.
fn cpuid(leaf: u32) -> CpuidRegs {
    let r = core::arch::x86_64::__cpuid(leaf);
    CpuidRegs {
        eax: r.eax,
        ebx: r.ebx,
        ecx: r.ecx,
        edx: r.edx,
    }
}

/// CPUID.01H:ECX.PDCM: IA32_PERF_CAPABILITIES exists.
const CPUID_1_ECX_PDCM: u32 = 1 << 15;
/// CPUID.01H:ECX[31]: running under a hypervisor.
const CPUID_1_ECX_HYPERVISOR: u32 = 1 << 31;

/// Reads what [`HwModel::probe`] decodes: CPUID only, and
/// IA32_PERF_CAPABILITIES where CPUID announces it (PDCM).
fn read_probe_cpuid() -> ProbeCpuid {
    let vendor = cpuid(0);
    let leaf1_ecx = if vendor.eax >= 1 { cpuid(1).ecx } else { 0 };
    let mut p = ProbeCpuid {
        vendor,
        hypervisor: leaf1_ecx & CPUID_1_ECX_HYPERVISOR != 0,
        ..ProbeCpuid::default()
    };
    if driver::vendor_is(&vendor, b"GenuineIntel") && vendor.eax >= 0xa {
        p.leaf_0xa = cpuid(0xa);
        if leaf1_ecx & CPUID_1_ECX_PDCM != 0 {
            // SAFETY: CPUID.01H:ECX.PDCM announces IA32_PERF_CAPABILITIES,
            // a read-only MSR.
            p.perf_capabilities =
                unsafe { crate::rust::rdmsr_safe(intel_arch::MSR_IA32_PERF_CAPABILITIES) }
                    .unwrap_or(0);
        }
    }
    if driver::vendor_is(&vendor, b"AuthenticAMD") {
        let max_ext = cpuid(0x8000_0000).eax;
        if max_ext >= 0x8000_0001 {
            p.amd_ext1_ecx = cpuid(0x8000_0001).ecx;
        }
        if max_ext >= 0x8000_0022 {
            p.amd_leaf_0x80000022 = cpuid(0x8000_0022);
        }
    }
    p
}

/// Whether CPUID announces a hardware PMU of a supported kind.
pub(crate) fn cpu_has_pmu() -> bool {
    HwModel::probe(&read_probe_cpuid()).is_some()
}

/// This CPU's MSRs, through the `_safe` accessors.
pub(crate) struct CpuMsrs;

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

/// One CPU's simulated PMU and the time it was last advanced to.
struct SimState {
    sim: IntelSim,
    last_ns: u64,
}

/// One CPU's simulated PMU (`intel_arch_sim`).
///
/// # Invariants
///
/// `state` is only accessed on its own CPU with interrupts off (every MSR
/// access of the module is: under a context's lock, or in an IPI), so
/// accesses never overlap.
pub(crate) struct SimCpu {
    state: core::cell::UnsafeCell<SimState>,
    /// The CPU's clock tick: advances the simulated PMU every
    /// [`SIM_TICK_NS`], so its PMIs also arrive while a thread runs, as a
    /// hardware PMI would (initialised and started on its CPU by
    /// [`Pmu::start_sim_ticks`]).
    tick: Opaque<bindings::hrtimer>,
    /// `tick` is initialised and must be cancelled.
    tick_started: AtomicBool,
}

/// How often each CPU's simulated PMU advances on its own (1 ms).
const SIM_TICK_NS: i64 = 1_000_000;

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
        if !crate::rust::irqs_disabled() {
            return None;
        }
        // SAFETY: This CPU's state with interrupts off (type invariant): no
        // other access can run until we return.
        let st = unsafe { &mut *self.state.get() };
        let now = crate::rust::now_ns();
        let ran = now.saturating_sub(st.last_ns);
        st.last_ns = now;
        for (event, shift) in SIM_EVENTS {
            st.sim.count(event, Ring::User, ran >> shift);
        }
        let r = access(&mut st.sim);
        if st.sim.take_pmis() != 0 {
            crate::globals().intr.raise_sim_pmi();
        }
        Some(r)
    }
}

/// Initialises and starts this CPU's simulator tick, once (IPI callback).
unsafe extern "C" fn start_tick_here(_info: *mut kernel::ffi::c_void) {
    let Some(cpus) = &crate::globals().pmu.sim else {
        return;
    };
    let Some(c) = cpus.get(crate::rust::this_cpu() as usize) else {
        return;
    };
    if c.tick_started.load(Ordering::Acquire) {
        return;
    }
    let t = c.tick.get();
    let mode = bindings::hrtimer_mode_HRTIMER_MODE_REL_PINNED_HARD;
    // SAFETY: `t` is this CPU's timer storage, in a vector that no longer
    // moves and outlives the timer (cancelled in `stop_sim_ticks`).
    unsafe {
        bindings::hrtimer_init(t, bindings::CLOCK_MONOTONIC as i32, mode);
        (*t).function = Some(sim_tick);
        bindings::hrtimer_start_range_ns(t, SIM_TICK_NS, 0, mode);
    }
    c.tick_started.store(true, Ordering::Release);
}

/// A simulator tick (hard IRQ): the CPU ran; its PMU advances and raises
/// the PMIs of the counters that wrapped.
unsafe extern "C" fn sim_tick(t: *mut bindings::hrtimer) -> bindings::hrtimer_restart {
    let pmu = &crate::globals().pmu;
    // The PMU of the CPU this runs on (a timer that hotplug moved to
    // another CPU advances that one's).
    if let Some(Some(c)) = pmu.bus().sim {
        c.access(|_| ());
    }
    // SAFETY: `t` is the running timer; restarting it from its callback
    // is how periodic hrtimers work.
    unsafe { bindings::hrtimer_forward(t, bindings::ktime_get(), SIM_TICK_NS) };
    bindings::hrtimer_restart_HRTIMER_RESTART
}

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
            Some(cpu) => cpu
                .and_then(|c| c.access(|s| s.rdmsr(msr)))
                .unwrap_or(Err(MsrFault { msr })),
        }
    }
    fn wrmsr(&mut self, msr: u32, value: u64) -> Result<(), MsrFault> {
        match self.sim {
            None => CpuMsrs.wrmsr(msr, value),
            Some(cpu) => cpu
                .and_then(|c| c.access(|s| s.wrmsr(msr, value)))
                .unwrap_or(Err(MsrFault { msr })),
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

impl Pmu {
    /// Picks the model named by `pmu=` (`auto`, `soft`, `intel_arch`,
    /// `amd64`) with the soft counter width `soft_width`; returns the model
    /// and why it was picked.
    pub(crate) fn select(name: &[u8], soft_width: u32) -> Result<(Pmu, &'static str), ProbeError> {
        let (mut pmu, why) = Self::select_model(name, soft_width)?;
        if pmu.hw.is_some() {
            let report = KBox::pin_init(FaultReport::new(pmu.name()), GFP_KERNEL)
                .map_err(|_| ProbeError::NoMemory)?;
            pmu.fault_report = Some(report);
        }
        Ok((pmu, why))
    }

    /// [`Pmu::select`] without the fault report.
    fn select_model(name: &[u8], soft_width: u32) -> Result<(Pmu, &'static str), ProbeError> {
        if !(16..=64).contains(&soft_width) {
            return Err(ProbeError::BadParam);
        }
        let make = |width, hw| Pmu {
            width,
            hw,
            sim: None,
            claims: ClaimWord::new(),
            msr_faults: AtomicU64::new(0),
            fault_report: None,
            busy_warned_at: AtomicU64::new(0),
            full_restores: AtomicU64::new(0),
            lazy_restores: AtomicU64::new(0),
        };
        if name == b"intel_arch_sim" {
            let model = IntelArch::probe(SIM_CFG.cpuid(), SIM_CFG.perf_capabilities())
                .map(HwModel::Intel)
                .ok_or(ProbeError::BadParam)?;
            // SAFETY: `nr_cpu_ids` is set at boot and constant afterwards.
            let n = unsafe { bindings::nr_cpu_ids } as usize;
            let alloc = || -> Result<KVec<SimCpu>> {
                let mut cpus = KVec::with_capacity(n, GFP_KERNEL)?;
                for _ in 0..n {
                    let state = SimState {
                        sim: IntelSim::new(SIM_CFG),
                        last_ns: 0,
                    };
                    cpus.push(
                        SimCpu {
                            state: core::cell::UnsafeCell::new(state),
                            tick: Opaque::uninit(),
                            tick_started: AtomicBool::new(false),
                        },
                        GFP_KERNEL,
                    )?;
                }
                Ok(cpus)
            };
            let cpus = alloc().map_err(|_| ProbeError::NoMemory)?;
            let mut pmu = make(model.counter_width(), Some(model));
            pmu.sim = Some(cpus);
            return Ok((
                pmu,
                "requested with pmu=intel_arch_sim: Intel arch perfmon v4 simulated in software on every CPU (a test model)",
            ));
        }
        let hw = HwModel::probe(&read_probe_cpuid());
        let hw_pmu = |m: HwModel| make(m.counter_width(), Some(m));
        match (name, hw) {
            (b"soft", _) => Ok((make(soft_width, None), "requested with pmu=soft")),
            (b"auto", None) => Ok((
                make(soft_width, None),
                "the CPU announces no usable PMU (CPUID)",
            )),
            (b"auto", Some(m)) => Ok((hw_pmu(m), "announced by CPUID")),
            (b"intel_arch", Some(m @ HwModel::Intel(_))) => {
                Ok((hw_pmu(m), "requested with pmu=intel_arch"))
            }
            (b"amd64", Some(m @ HwModel::Amd(_))) => Ok((hw_pmu(m), "requested with pmu=amd64")),
            (b"intel_arch", _) => Err(ProbeError::NoHardware(
                "intel_arch: CPUID leaf 0xA announces no architectural perfmon",
            )),
            (b"amd64", _) => Err(ProbeError::NoHardware(
                "amd64: CPUID announces no AMD64 core performance counters",
            )),
            _ => Err(ProbeError::BadParam),
        }
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
        if self.sim.is_none() {
            return;
        }
        // SAFETY: `start_tick_here` only touches this CPU's simulator.
        unsafe { crate::rust::on_each_cpu(start_tick_here, core::ptr::null_mut()) };
    }

    /// `intel_arch_sim`: stops every tick (module exit, process context).
    pub(crate) fn stop_sim_ticks(&self) {
        let Some(cpus) = &self.sim else {
            return;
        };
        for c in cpus.iter() {
            if c.tick_started.swap(false, Ordering::AcqRel) {
                // SAFETY: Initialised by `start_tick_here`; waits for a
                // running callback.
                unsafe { bindings::hrtimer_cancel(c.tick.get()) };
            }
        }
    }

    /// The MSR bus of this CPU (interrupts off).
    pub(crate) fn bus(&self) -> PmuBus<'_> {
        PmuBus {
            sim: self
                .sim
                .as_ref()
                .map(|cpus| cpus.get(crate::rust::this_cpu() as usize)),
        }
    }

    /// Bit n set: PMD n exists.
    pub(crate) fn impl_mask(&self) -> u64 {
        match &self.hw {
            Some(m) => m.impl_pmds(),
            None => (1u64 << SOFT_COUNTERS) - 1,
        }
    }

    /// Fills `PFM_IOC_GET_INFO`'s model part.
    pub(crate) fn describe(&self, info: &mut abi::PfmInfo) {
        if let Some(m) = &self.hw {
            m.describe(info);
            copy_name(&mut info.model, self.name().as_bytes());
            return;
        }
        copy_name(&mut info.model, self.name().as_bytes());
        info.num_pmcs = SOFT_COUNTERS as u16;
        info.num_pmds = SOFT_COUNTERS as u16;
        info.counter_width = self.width as u16;
        info.impl_pmcs = self.impl_mask();
        info.impl_pmds = self.impl_mask();
        for (i, rsvd) in info.pmc_rsvd_mask.iter_mut().enumerate() {
            *rsvd = if i < SOFT_COUNTERS {
                SOFT_PMC_RSVD_MASK
            } else {
                u64::MAX
            };
        }
        info.num_events = SOFT_EVENTS.len() as u16;
        for (slot, (name, code)) in info.events.iter_mut().zip(SOFT_EVENTS.iter()) {
            copy_name(&mut slot.name, name.as_bytes());
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
        if reg >= SOFT_COUNTERS {
            return Err(abi::PFM_REG_RETFL_NOTAVAIL);
        }
        match SoftEvent::from_pmc(value) {
            Some(_) => Ok(value),
            None => Err(abi::PFM_REG_RETFL_EINVAL),
        }
    }

    /// The PMDs PMC `reg` with the validated `value` makes count (hardware
    /// models; 0 for soft, whose PMCs select events for their own PMD).
    pub(crate) fn pmc_pmds(&self, reg: usize, value: u64) -> u64 {
        match &self.hw {
            Some(m) => m.pmc_pmds(reg, value),
            None => 0,
        }
    }

    /// Takes one claim on the hardware for a hardware context's attachment
    /// (`token`), at the point where LOAD publishes it: after the
    /// permission check and every validity check passed, so a refused LOAD
    /// takes nothing. No-op for the soft model.
    ///
    /// The first claim reserves every general-purpose counter through the
    /// NMI reservation allocator that perf_events also uses. perf's x86
    /// core reserves all of them whenever any hardware event of its own
    /// exists (a perf user, the NMI watchdog — a perf cycles event — KVM's
    /// vPMU, BTS), so success proves that none does, and none can be
    /// created while the module holds them (`EBUSY` for perf). Later claims
    /// only count. LVTPC is not touched here: a CPU's LVTPC is pointed at
    /// the overflow vector when a context first puts its counters on that
    /// CPU's PMU (`Vectors::own_lvtpc_here`), and given back with the
    /// counters when the last claim goes ([`Pmu::hw_unclaim`]).
    ///
    /// `EBUSY`, with a message at most every 10 s, when perf holds the
    /// counters. Any context (called under the registry and context
    /// locks): only atomic operations, with interrupts off around them.
    pub(crate) fn hw_claim(&self, token: &HwClaim) -> Result {
        let Some(m) = &self.hw else {
            return Ok(());
        };
        if token.0.load(Ordering::Relaxed) {
            return Ok(());
        }
        let reserve = || {
            let mut taken = 0usize;
            for (ctr, evtsel) in m.reservations() {
                if !crate::rust::reserve_counter(ctr, evtsel) {
                    for (ctr, evtsel) in m.reservations().take(taken) {
                        crate::rust::release_counter(ctr, evtsel);
                    }
                    return false;
                }
                taken += 1;
            }
            true
        };
        // Interrupts off: a reservation runs alone while others spin.
        let flags = crate::rust::local_irq_save();
        let ok = self.claims.take(reserve);
        crate::rust::local_irq_restore(flags);
        if !ok {
            // One line per 10 s at most: any user can retry LOAD in a loop.
            let now = crate::rust::now_ns();
            let last = self.busy_warned_at.load(Ordering::Relaxed);
            if last == 0 || now.saturating_sub(last) > 10_000_000_000 {
                self.busy_warned_at.store(now.max(1), Ordering::Relaxed);
                pr_warn!(
                    "the {} counters are held by perf_events (the NMI watchdog or a perf user): echo 0 > /proc/sys/kernel/nmi_watchdog and end perf sessions, or load perfmon with pmu=soft\n",
                    m.name()
                );
            }
            return Err(EBUSY);
        }
        token.0.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Gives back the claim `token` holds, if it holds one: when a hardware
    /// context's attachment ends (its drop, after its counters left every
    /// PMU). The last claim to go leaves every PMC disabled on each CPU
    /// whose LVTPC the module took, gives those LVTPCs back, then releases
    /// the counters to perf_events — each step only if no new claim came
    /// meanwhile. Process context (IPIs every CPU and waits).
    pub(crate) fn hw_unclaim(&self, token: &HwClaim) {
        if self.hw.is_none() || !token.0.swap(false, Ordering::Relaxed) {
            return;
        }
        if self.claims.put() {
            self.give_back();
        }
    }

    /// After the last claim went: every CPU's PMCs off and LVTPC back (each
    /// CPU checks, interrupts off, that still no claim exists), then the
    /// counters back to perf_events if still unclaimed. Process context.
    fn give_back(&self) {
        unsafe extern "C" fn give_back_here(_info: *mut kernel::ffi::c_void) {
            let g = crate::globals();
            let pmu = &g.pmu;
            if pmu.claims.holders() != 0 {
                return;
            }
            // No claim, so no context's counters are on this PMU: only
            // stale enable bits could be, where a context counted (where
            // LVTPC is ours); they would count, and interrupt perf's NMI
            // handler, once perf enables its global control again.
            if let Some(m) = &pmu.hw {
                if g.intr.lvtpc_ours_here() {
                    pmu.note(&driver::quiesce(m, &mut pmu.bus()));
                }
            }
            g.intr.give_back_lvtpc_here();
        }
        // SAFETY: `give_back_here` touches this CPU's PMU and LVTPC only,
        // with interrupts off (an IPI callback); no `info`.
        unsafe { crate::rust::on_each_cpu(give_back_here, core::ptr::null_mut()) };
        self.unclaim();
    }

    /// Module unload, after every context is gone (each attachment gave its
    /// claim back): a no-op unless a claim was leaked, in which case the
    /// PMCs are left disabled and LVTPC and the counters given back anyway.
    pub(crate) fn quiesce_all(&self) {
        if self.hw.is_none() || !self.claims.reserved() {
            return;
        }
        pr_err!(
            "{} hardware claim(s) left at unload (a bug): giving the counters back\n",
            self.claims.holders()
        );
        while self.claims.holders() != 0 {
            self.claims.put();
        }
        self.give_back();
    }

    /// Releases the counters to perf_events if they are reserved and no
    /// claim holds them (after the last claim's give-back; and at module
    /// unload, after [`Pmu::quiesce_all`] and the vectors' teardown).
    pub(crate) fn unclaim(&self) {
        let Some(m) = &self.hw else {
            return;
        };
        let flags = crate::rust::local_irq_save();
        self.claims.release_if_unused(|| {
            for (ctr, evtsel) in m.reservations() {
                crate::rust::release_counter(ctr, evtsel);
            }
        });
        crate::rust::local_irq_restore(flags);
    }

    /// Live hardware contexts holding the claim (sysfs `hw_claimed`).
    pub(crate) fn hw_claimed(&self) -> u32 {
        self.claims.holders()
    }

    /// General-purpose counters the module holds reserved (sysfs
    /// `hw_reserved_counters`).
    pub(crate) fn reserved_counters(&self) -> u32 {
        match &self.hw {
            Some(m) if self.claims.reserved() => m.reservations().count() as u32,
            _ => 0,
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

/// Advances every counter by what its PMC selects; returns the mask of PMDs
/// that overflowed.
pub(crate) fn soft_count(
    ev_pmds: &[u8; 4],
    pmds: &mut [PmdState],
    d: &SoftDeltas,
    width: u32,
) -> u64 {
    let mut ovfl = 0u64;
    let deltas = [
        (abi::PFM_SOFT_EV_TASK_CLOCK as usize, d.task_clock),
        (abi::PFM_SOFT_EV_CONTEXT_SWITCHES as usize, d.switches),
        (abi::PFM_SOFT_EV_CPU_MIGRATIONS as usize, d.migrations),
    ];
    for (ev, delta) in deltas {
        if delta == 0 {
            continue;
        }
        let mut m = ev_pmds[ev];
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            if let Some(pmd) = pmds.get_mut(i) {
                if pmd.count(delta, width) != 0 {
                    ovfl |= 1 << i;
                }
            }
        }
    }
    ovfl
}

/// Copies `name` into a fixed, NUL-terminated field, truncating.
fn copy_name(dst: &mut [u8], name: &[u8]) {
    let n = name.len().min(dst.len().saturating_sub(1));
    dst[..n].copy_from_slice(&name[..n]);
    for b in dst[n..].iter_mut() {
        *b = 0;
    }
}
