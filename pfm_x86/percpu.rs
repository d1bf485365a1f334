// SPDX-License-Identifier: GPL-2.0

//! Each CPU's PMU as the module holds it, as x86 perf keeps it in
//! `cpu_hw_events`: whose counters are on it, and the generation of its
//! registers. Every method acts on the CPU it runs on, with interrupts
//! off, so each CPU's entry has one writer at a time.

use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

use kernel::prelude::*;

use super::Pmu;
use crate::rust as glue;
use crate::rust::hrtimer::OneShotTimer;

/// One CPU's PMU.
struct CpuPmu {
    /// Who has its counters on this PMU (an attachment), or null. Not a
    /// counted reference: its holder clears it, on this CPU with interrupts
    /// off, before it can go away.
    owner: AtomicPtr<()>,
    /// Bumped by every context that writes its registers into this PMU,
    /// and when the CPU comes online (it may have lost them): a context
    /// whose registers are still here, at the generation it left, may skip
    /// the restore.
    generation: AtomicU64,
    /// The CPU has every counter of the model. Set at load for every CPU
    /// (the model is what all online CPUs have in common); a CPU that
    /// comes online later is checked then.
    fits: AtomicBool,
    /// Fires when the owner's active event set has run its timeout (a
    /// multiplexed context on a hardware model; perf's mux timer is per
    /// CPU too).
    mux: OneShotTimer,
    /// Whose task-clock the `clock` timer is armed for (an attachment), or
    /// null: as `owner`, cleared by its holder on this CPU with
    /// interrupts off before it can go away.
    clock_owner: AtomicPtr<()>,
    /// Fires when the running thread's task-clock reaches its next
    /// overflow (the soft model's counters have no interrupt of their
    /// own; perf's task-clock samples from an hrtimer too).
    clock: OneShotTimer,
}

/// Every possible CPU's [`CpuPmu`].
pub(crate) struct CpuPmus(KVec<CpuPmu>);

impl CpuPmus {
    /// One entry per possible CPU: no owner, generation 0; `mux_fired`
    /// is what a CPU's multiplexing timer calls, `clock_fired` its
    /// task-clock timer.
    pub(crate) fn new(mux_fired: fn(), clock_fired: fn()) -> Result<Self> {
        let cpus = glue::cpu::per_cpu_vec(|| CpuPmu {
            owner: AtomicPtr::new(core::ptr::null_mut()),
            generation: AtomicU64::new(0),
            fits: AtomicBool::new(true),
            mux: OneShotTimer::new(mux_fired),
            clock_owner: AtomicPtr::new(core::ptr::null_mut()),
            clock: OneShotTimer::new(clock_fired),
        })?;
        Ok(Self(cpus))
    }

    /// This CPU's entry (interrupts off).
    fn here(&self) -> Option<&CpuPmu> {
        self.0.get(glue::this_cpu() as usize)
    }
}

impl Pmu {
    /// Arms this CPU's multiplexing timer to fire in `ns` (re-arming it).
    /// Interrupts off.
    pub(crate) fn mux_arm_here(&self, ns: u64) {
        if let Some(c) = self.cpus.here() {
            // SAFETY: The entries of `cpus` never move (allocated once, at
            // load); this CPU's timer is armed and disarmed only here and
            // in `mux_disarm_here`, by this CPU with interrupts off.
            unsafe { c.mux.arm_here(ns) };
        }
    }

    /// Disarms this CPU's multiplexing timer. Interrupts off.
    pub(crate) fn mux_disarm_here(&self) {
        if let Some(c) = self.cpus.here() {
            c.mux.disarm();
        }
    }

    /// Cancels every CPU's multiplexing timer, waiting for running
    /// callbacks (module exit, once no context is left to arm one: a timer
    /// a context left armed must not fire once the globals are gone).
    pub(crate) fn mux_cancel_all(&self) {
        for c in self.cpus.0.iter() {
            c.mux.cancel();
        }
    }

    /// Arms this CPU's task-clock timer for `owner`, the thread running
    /// here, to fire in `ns` (re-arming it). Interrupts off.
    pub(crate) fn clock_arm_here(&self, owner: *const (), ns: u64) {
        if let Some(c) = self.cpus.here() {
            c.clock_owner.store(owner.cast_mut(), Ordering::Relaxed);
            // SAFETY: The entries of `cpus` never move (allocated once, at
            // load); this CPU's timer is armed and disarmed only here and
            // in `clock_release_here`, by this CPU with interrupts off.
            unsafe { c.clock.arm_here(ns) };
        }
    }

    /// Disarms this CPU's task-clock timer if it is armed for `owner`,
    /// which then no longer names it. Interrupts off.
    #[inline]
    pub(crate) fn clock_release_here(&self, owner: *const ()) {
        if let Some(c) = self.cpus.here() {
            if core::ptr::eq(c.clock_owner.load(Ordering::Relaxed), owner) && !owner.is_null() {
                c.clock_owner
                    .store(core::ptr::null_mut(), Ordering::Relaxed);
                c.clock.disarm();
            }
        }
    }

    /// Whom this CPU's task-clock timer is armed for, or null. Interrupts
    /// off.
    pub(crate) fn clock_owner_here(&self) -> *const () {
        self.cpus
            .here()
            .map_or(core::ptr::null(), |c| c.clock_owner.load(Ordering::Relaxed))
    }

    /// Cancels every CPU's task-clock timer, waiting for running
    /// callbacks (module exit, as [`Pmu::mux_cancel_all`]).
    pub(crate) fn clock_cancel_all(&self) {
        for c in self.cpus.0.iter() {
            c.clock.cancel();
        }
    }

    /// Records that `owner`'s counters are (non-null) or no longer are
    /// (null) on this CPU's PMU. Interrupts off.
    pub(crate) fn set_owner_here(&self, owner: *const ()) {
        if let Some(c) = self.cpus.here() {
            c.owner.store(owner.cast_mut(), Ordering::Relaxed);
        }
    }

    /// Whether `owner`'s counters are on this CPU's PMU. Interrupts off.
    pub(crate) fn is_owner_here(&self, owner: *const ()) -> bool {
        core::ptr::eq(self.owner_here(), owner)
    }

    /// Whose counters are on this CPU's PMU, or null. Interrupts off.
    pub(crate) fn owner_here(&self) -> *const () {
        self.cpus
            .here()
            .map_or(core::ptr::null(), |c| c.owner.load(Ordering::Relaxed))
    }

    /// This CPU's PMU register generation. Interrupts off.
    pub(crate) fn generation_here(&self) -> u64 {
        self.cpus
            .here()
            .map_or(0, |c| c.generation.load(Ordering::Relaxed))
    }

    /// A context wrote its registers into this CPU's PMU. Interrupts off.
    pub(crate) fn bump_generation_here(&self) {
        if let Some(c) = self.cpus.here() {
            c.generation.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `cpu` came (back) online: it may have lost its PMU registers, so no
    /// context may skip its restore on the strength of an older generation.
    /// Called by the vectors' hotplug callback, on `cpu`.
    pub(crate) fn cpu_online(&self, cpu: u32) {
        let Some(c) = self.cpus.0.get(cpu as usize) else {
            return;
        };
        c.generation.fetch_add(1, Ordering::Relaxed);
        // A CPU of another core type than those probed at load (it was
        // offline then) may lack counters of the model.
        if let (Some(m), None) = (&self.hw, &self.sim) {
            let fits = super::cpuid::cpu_fits(m);
            if !fits {
                pr_warn!(
                    "CPU {cpu} lacks counters of the {} model probed at load: hardware counters never count there\n",
                    self.name()
                );
            }
            c.fits.store(fits, Ordering::Relaxed);
        }
    }

    /// Whether this CPU has every counter of the model. Interrupts off.
    pub(crate) fn fits_here(&self) -> bool {
        self.cpus
            .here()
            .is_none_or(|c| c.fits.load(Ordering::Relaxed))
    }
}
