// SPDX-License-Identifier: GPL-2.0

//! Overflow interrupts on a dynamically allocated APIC vector: the vectors,
//! LVTPC and the interrupt entry, and nothing else.
//!
//! perfmon2 hard-coded `LOCAL_PERFMON_VECTOR 0xee`; the seed review asked for
//! the vector allocator instead. At load, every online CPU (and every CPU that
//! comes online later, through a dynamic cpuhp state) gets one IRQ of the x86
//! vector domain bound to it, with an edge flow handler and our handler
//! (`/proc/interrupts` shows them as `perfmon`). Under the soft model, where
//! no other PMU user can exist (the CPU announces no PMU), each CPU's LVTPC
//! is pointed at its vector, and restored at unload. A hardware model points
//! a CPU's LVTPC there when a context first puts its counters on that CPU's
//! PMU, so the PMI arrives on the vector, and gives it back when the last
//! hardware context ends (`Pmu::hw_claim`).
//!
//! The soft PMU raises its overflows through the same vector with a
//! self-IPI ([`raise`]), so the whole path (interrupt, message, blocking)
//! runs anywhere.
//!
//! The vectors know neither the context nor the PMU layer: they deliver to
//! an [`OverflowSink`] (the attachment), and the crate root wires them to
//! the PMU layer's per-CPU owner ([`Wiring`]).

use core::cell::UnsafeCell;
use core::marker::PhantomData;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use kernel::prelude::*;
use kernel::sync::Arc;

use crate::rust::cpu::{CpuhpState, Hotplug};
use crate::rust::irq::{CpuIrq, Handler, APIC_LVT_MASKED};
use crate::rust::{self as glue};

/// What the overflow vectors deliver to.
pub(crate) trait OverflowSink: Send + Sync + Sized + 'static {
    /// A PMI on the CPU whose PMU holds `owner`'s counters (hard IRQ).
    ///
    /// # Safety
    ///
    /// `owner` is the PMU layer's owner of this CPU, read with interrupts
    /// off: its holder clears it, on this CPU with interrupts off, before
    /// it can go away, so it is alive for the call.
    unsafe fn hw_pmi(owner: *const Self);

    /// An overflow [`raise`]d on this CPU (hard IRQ, or the CPU-offline
    /// callback for one raised just before the CPU went away).
    fn overflow_interrupt(this: &Arc<Self>);

    /// Drops the reference [`raise`] took, after `overflow_interrupt`.
    fn release(this: Arc<Self>);

    /// This CPU's LVTPC is about to be given back (the CPU goes offline)
    /// while `owner`'s counters are on its PMU: take them off first, or
    /// their PMIs would reach perf's NMI handler (interrupts off).
    ///
    /// # Safety
    ///
    /// As for [`OverflowSink::hw_pmi`].
    unsafe fn evict_hw(owner: *const Self);
}

/// How the vectors' entries (the interrupt, the hotplug callbacks,
/// [`raise`]) reach what they serve: implemented by the crate root, the one
/// place that knows the vectors, the PMU layer and the sink together.
pub(crate) trait Wiring: OverflowSink {
    /// The vectors that deliver to `Self`.
    fn vectors() -> &'static Vectors<Self>;

    /// Whose counters are on this CPU's PMU, or null (interrupts off).
    fn pmu_owner_here() -> *const Self;

    /// `cpu` came online: the PMU layer's hook (its registers may be lost).
    fn cpu_online(cpu: u32);

    /// Whether `cpu` is to get no vector (a test hook of the simulated
    /// PMU: its allocation failing).
    fn vector_withheld(cpu: u32) -> bool;
}

/// One CPU's overflow vector.
///
/// # Invariants
///
/// `irq` is only accessed by the hotplug callbacks of the slot's CPU
/// ([`Vectors::cpu_online`], [`Vectors::cpu_offline`]), which the hotplug
/// core runs one at a time.
pub(crate) struct CpuVector<S: OverflowSink> {
    /// The IRQ while the CPU is online (freed when taken out and dropped).
    irq: UnsafeCell<Option<CpuIrq<'static, CpuVector<S>>>>,
    /// The vector the IRQ got on this CPU, 0 when the CPU has none
    /// (offline, or the allocation failed).
    vector: AtomicU32,
    /// LVTPC before we programmed it.
    saved_lvtpc: AtomicU32,
    /// Whether LVTPC points at our vector.
    lvtpc_ours: AtomicBool,
    /// Interrupts taken.
    count: AtomicU64,
    /// The sink whose overflow is being signalled (one `Arc` reference).
    pending: AtomicPtr<S>,
}

// SAFETY: `irq` is accessed by one thread at a time (type invariant); the
// rest is atomics, and `pending` holds an `Arc<S>` with `S: Send + Sync`.
unsafe impl<S: OverflowSink> Sync for CpuVector<S> {}
// SAFETY: See `Sync`.
unsafe impl<S: OverflowSink> Send for CpuVector<S> {}

impl<S: OverflowSink> CpuVector<S> {
    const fn new() -> Self {
        Self {
            irq: UnsafeCell::new(None),
            vector: AtomicU32::new(0),
            saved_lvtpc: AtomicU32::new(0),
            lvtpc_ours: AtomicBool::new(false),
            count: AtomicU64::new(0),
            pending: AtomicPtr::new(core::ptr::null_mut()),
        }
    }

    /// Delivers the overflow [`raise`] left here, if any.
    fn deliver_pending(&self) {
        let pending = self.pending.swap(core::ptr::null_mut(), Ordering::AcqRel);
        if pending.is_null() {
            return;
        }
        // SAFETY: `raise` stored an `Arc::into_raw` reference, which the
        // swap above made ours.
        let sink = unsafe { Arc::from_raw(pending) };
        S::overflow_interrupt(&sink);
        S::release(sink);
    }

    /// Points this CPU's LVTPC at the vector, once (interrupts off: an IPI
    /// callback, or the hotplug callback with interrupts disabled around it).
    /// Whether LVTPC is ours afterwards: not where the CPU has no vector.
    fn take_lvtpc(&self) -> bool {
        if self.lvtpc_ours.load(Ordering::Relaxed) {
            return true;
        }
        let vector = self.vector.load(Ordering::Relaxed);
        if vector == 0 {
            return false;
        }
        self.saved_lvtpc
            .store(glue::apic_read_lvtpc(), Ordering::Relaxed);
        glue::apic_write_lvtpc(vector);
        self.lvtpc_ours.store(true, Ordering::Relaxed);
        true
    }

    /// Restores this CPU's LVTPC if it points at our vector (interrupts
    /// off, or the CPU going offline).
    fn give_back_lvtpc(&self) {
        if self.lvtpc_ours.swap(false, Ordering::Relaxed) {
            glue::apic_write_lvtpc(self.saved_lvtpc.load(Ordering::Relaxed));
        }
    }
}

/// The interrupt entry: the vector's IRQ on its CPU.
impl<S: Wiring> Handler for CpuVector<S> {
    fn handle(&self) {
        self.count.fetch_add(1, Ordering::Relaxed);
        if self.lvtpc_ours.load(Ordering::Relaxed) {
            // Hardware masks LVTPC when it delivers a PMI: unmask, as perf does.
            glue::apic_write_lvtpc(self.vector.load(Ordering::Relaxed) & !APIC_LVT_MASKED);
        }
        let owner = S::pmu_owner_here();
        if !owner.is_null() {
            // A hardware PMI: the owner's counters are on this CPU's PMU.
            // SAFETY: The PMU layer's owner of this CPU, read in hard IRQ
            // (interrupts off): alive (the contract of `hw_pmi`).
            unsafe { S::hw_pmi(owner) };
        }
        self.deliver_pending();
    }
}

/// The vectors' hotplug callbacks, for the sink `S`.
pub(crate) struct VectorHotplug<S>(PhantomData<S>);

impl<S: Wiring> Hotplug for VectorHotplug<S> {
    fn online(cpu: u32) {
        S::vectors().cpu_online(cpu);
    }
    fn offline(cpu: u32) {
        S::vectors().cpu_offline(cpu);
    }
}

/// The vectors of every online CPU, until dropped (see [`Vectors::start`]).
pub(crate) type VectorsOnline<S> = CpuhpState<VectorHotplug<S>>;

/// The vectors of every possible CPU.
pub(crate) struct Vectors<S: OverflowSink> {
    cpus: KVec<CpuVector<S>>,
    /// Point every CPU's LVTPC at the vector from load on: the soft model
    /// where the CPU announces no PMU (no other PMU user can exist). A
    /// hardware model takes each CPU's LVTPC only while it holds the
    /// counters ([`Vectors::own_lvtpc_here`]).
    lvtpc_wanted: bool,
}

impl<S: OverflowSink> Vectors<S> {
    /// One slot per possible CPU; no IRQ yet (see [`Vectors::start`]).
    pub(crate) fn new(program_lvtpc: bool) -> Result<Self> {
        Ok(Self {
            cpus: glue::cpu::per_cpu_vec(CpuVector::new)?,
            lvtpc_wanted: program_lvtpc,
        })
    }

    /// CPU 0's vector, for `PFM_IOC_GET_INFO` and sysfs (0: none).
    pub(crate) fn vector_of_cpu0(&self) -> u32 {
        self.cpus
            .first()
            .map_or(0, |c| c.vector.load(Ordering::Relaxed))
    }

    /// Interrupts taken on every CPU.
    pub(crate) fn interrupts(&self) -> u64 {
        self.cpus
            .iter()
            .map(|c| c.count.load(Ordering::Relaxed))
            .sum()
    }

    /// CPUs whose LVTPC points at their vector (sysfs `hw_lvtpc_cpus`).
    pub(crate) fn lvtpc_cpus(&self) -> u64 {
        self.cpus
            .iter()
            .filter(|c| c.lvtpc_ours.load(Ordering::Relaxed))
            .count() as u64
    }

    fn slot(&self, cpu: usize) -> Option<&CpuVector<S>> {
        self.cpus.get(cpu)
    }

    /// This CPU's slot (interrupts off).
    fn here(&self) -> Option<&CpuVector<S>> {
        self.slot(glue::this_cpu() as usize)
    }

    /// Points this CPU's LVTPC at its vector, if it does not already: a
    /// hardware model's context is about to put its counters on this CPU's
    /// PMU (so it holds a claim: see `Pmu::hw_claim`). Interrupts off.
    ///
    /// `false` where the CPU has no vector (its allocation failed, or the
    /// CPU is going offline): LVTPC still points at perf's NMI, where the
    /// counters' PMIs would be unknown NMIs or lost, so the caller must not
    /// put counters on this PMU.
    pub(crate) fn own_lvtpc_here(&self) -> bool {
        self.here().is_some_and(|slot| slot.take_lvtpc())
    }

    /// CPUs with no overflow vector now (sysfs `hw_no_vector_cpus`: their
    /// allocation failed; offline CPUs have none either and are not
    /// counted).
    pub(crate) fn cpus_without_vector(&self) -> u64 {
        self.cpus
            .iter()
            .enumerate()
            .filter(|(i, c)| glue::cpu::is_online(*i) && c.vector.load(Ordering::Relaxed) == 0)
            .count() as u64
    }

    /// Whether this CPU's LVTPC points at its vector. Interrupts off.
    pub(crate) fn lvtpc_ours_here(&self) -> bool {
        self.here()
            .is_some_and(|s| s.lvtpc_ours.load(Ordering::Relaxed))
    }

    /// Restores this CPU's LVTPC to what it was before the module took it,
    /// if the module holds it (the last hardware claim went). Interrupts off.
    pub(crate) fn give_back_lvtpc_here(&self) {
        if let Some(slot) = self.here() {
            slot.give_back_lvtpc();
        }
    }
}

impl<S: Wiring> Vectors<S> {
    /// Sets up every online CPU now and every CPU that comes online later,
    /// until the returned state is dropped (which tears every CPU's vector
    /// down and restores LVTPC). `S::vectors()` must already be `self`.
    pub(crate) fn start(&self) -> Result<VectorsOnline<S>> {
        CpuhpState::setup(kernel::c_str!("perfmon:online"))
    }

    /// The hotplug callback of a CPU coming online (on that CPU).
    fn cpu_online(&'static self, cpu: u32) {
        // First, whatever happens to the vector: the PMU may have lost its
        // registers while the CPU was away.
        S::cpu_online(cpu);
        let Some(slot) = self.slot(cpu as usize) else {
            return;
        };
        let irq = if S::vector_withheld(cpu) {
            Err(ENOSPC)
        } else {
            // SAFETY: `slot` is in `S::vectors()`, alive until the module's
            // exit, after the hotplug state is removed, which runs
            // `cpu_offline` (dropping the registration) on every online CPU.
            unsafe { CpuIrq::request(cpu, kernel::c_str!("perfmon"), slot) }
        };
        let irq = match irq {
            Ok(irq) => irq,
            Err(e) => {
                pr_warn!(
                    "CPU {cpu}: no overflow vector ({}); overflows use the fallback path, hardware counters never count there\n",
                    e.to_errno()
                );
                return;
            }
        };
        slot.vector.store(irq.vector(), Ordering::Relaxed);
        // SAFETY: A hotplug callback of `cpu` (type invariant of `CpuVector`).
        unsafe { *slot.irq.get() = Some(irq) };
        if self.lvtpc_wanted {
            // The cpuhp callback of a DYN state runs on `cpu` itself;
            // interrupts off against a concurrent `own_lvtpc_here` IPI.
            let flags = glue::local_irq_save();
            slot.take_lvtpc();
            glue::local_irq_restore(flags);
        }
    }

    /// The hotplug callback of a CPU going offline (on that CPU).
    fn cpu_offline(&self, cpu: u32) {
        let Some(slot) = self.slot(cpu as usize) else {
            return;
        };
        // Monitored threads may still run here until the scheduler's own
        // teardown migrates them: from now on their counters stay off this
        // PMU (no vector: `own_lvtpc_here` refuses), and those on it now
        // leave it before LVTPC goes back to perf's NMI.
        let flags = glue::local_irq_save();
        slot.vector.store(0, Ordering::Relaxed);
        let owner = S::pmu_owner_here();
        if !owner.is_null() {
            // SAFETY: The PMU layer's owner of this CPU, read with
            // interrupts off: alive (the contract of `evict_hw`).
            unsafe { S::evict_hw(owner) };
        }
        slot.give_back_lvtpc();
        glue::local_irq_restore(flags);
        // SAFETY: A hotplug callback of `cpu` (type invariant of `CpuVector`).
        let irq = unsafe { (*slot.irq.get()).take() };
        // Frees the IRQ, waiting for a running handler.
        drop(irq);
        // An overflow raised just before the CPU went away: handle it here.
        slot.deliver_pending();
    }
}

/// Signals an overflow of `sink` on this CPU: a self-IPI on the overflow
/// vector, handled as soon as interrupts are enabled again.
/// Called with the context lock held (IRQs off). Returns `false` if the
/// vector path is unavailable (no vector, or another overflow still pending
/// on this CPU); the caller then uses the attachment's irq_work.
pub(crate) fn raise<S: Wiring>(sink: &Arc<S>) -> bool {
    let Some(slot) = S::vectors().here() else {
        return false;
    };
    let vector = slot.vector.load(Ordering::Relaxed);
    if vector == 0 {
        return false;
    }
    let raw = Arc::into_raw(sink.clone()).cast_mut();
    match slot.pending.compare_exchange(
        core::ptr::null_mut(),
        raw,
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        Ok(_) => {
            glue::send_ipi_self(vector);
            true
        }
        Err(current) => {
            // SAFETY: Not stored: take the reference back. It is not the
            // last one (the caller holds `sink`), so nothing is freed here.
            drop(unsafe { Arc::from_raw(raw) });
            // The same sink already pending: its handler will see this
            // overflow too.
            current == raw
        }
    }
}
