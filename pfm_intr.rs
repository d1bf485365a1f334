// SPDX-License-Identifier: GPL-2.0

//! Overflow interrupts on a dynamically allocated APIC vector.
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
//! self-IPI, so the whole path (interrupt, message, blocking) runs anywhere.

use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use kernel::bindings;
use kernel::ffi::{c_int, c_uint, c_void};
use kernel::prelude::*;
use kernel::sync::Arc;

use crate::globals;
use crate::pfm_ctx::Context;
use crate::pfm_ctxsw::release;

/// The attachment the vectors deliver to.
type Attachment = crate::pfm_ctxsw::Attachment<Context>;
use crate::rust as glue;

/// One CPU's overflow vector.
pub(crate) struct CpuVector {
    /// Linux IRQ number, 0 when the CPU has none (offline or allocation failed).
    irq: AtomicU32,
    /// The vector the IRQ got on this CPU.
    vector: AtomicU32,
    /// LVTPC before we programmed it.
    saved_lvtpc: AtomicU32,
    /// Whether LVTPC points at our vector.
    lvtpc_ours: AtomicBool,
    /// Interrupts taken.
    count: AtomicU64,
    /// The attachment whose overflow is being signalled (one `Arc` reference).
    pending: AtomicPtr<Attachment>,
    /// The attachment whose context is on this CPU's hardware PMU, or null.
    /// Not a counted reference: set and cleared on this CPU with interrupts
    /// off, and cleared before the attachment can go (see `pfm_ctx`).
    hw_owner: AtomicPtr<Attachment>,
    /// Bumped by every context that writes its registers into this CPU's
    /// PMU: a context whose registers are still there may skip the restore.
    hw_generation: AtomicU64,
}

impl CpuVector {
    const fn new() -> Self {
        Self {
            irq: AtomicU32::new(0),
            vector: AtomicU32::new(0),
            saved_lvtpc: AtomicU32::new(0),
            lvtpc_ours: AtomicBool::new(false),
            count: AtomicU64::new(0),
            pending: AtomicPtr::new(core::ptr::null_mut()),
            hw_owner: AtomicPtr::new(core::ptr::null_mut()),
            hw_generation: AtomicU64::new(0),
        }
    }
}

/// The vectors of every possible CPU and the cpuhp state that manages them.
pub(crate) struct Vectors {
    cpus: KVec<CpuVector>,
    cpuhp_state: AtomicU32,
    /// Point every CPU's LVTPC at the vector from load on: the soft model
    /// where the CPU announces no PMU (no other PMU user can exist). A
    /// hardware model takes each CPU's LVTPC only while it holds the
    /// counters ([`Vectors::own_lvtpc_here`]).
    lvtpc_wanted: AtomicBool,
}

/// `APIC_LVT_MASKED`: the LVT entry's mask bit.
const APIC_LVT_MASKED: u32 = 1 << 16;

impl Vectors {
    /// One slot per possible CPU; no IRQ yet (see [`Vectors::start`]).
    pub(crate) fn new(program_lvtpc: bool) -> Result<Self> {
        // SAFETY: `nr_cpu_ids` is set at boot and constant afterwards.
        let n = unsafe { bindings::nr_cpu_ids } as usize;
        let mut cpus = KVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            cpus.push(CpuVector::new(), GFP_KERNEL)?;
        }
        Ok(Self {
            cpus,
            cpuhp_state: AtomicU32::new(0),
            lvtpc_wanted: AtomicBool::new(program_lvtpc),
        })
    }

    /// Sets up every online CPU now and every CPU that comes online later.
    /// `globals()` must already point at the owner of `self`.
    pub(crate) fn start(&self) -> Result {
        // SAFETY: The callbacks are valid for the module's lifetime (the
        // state is removed in `stop`); the name is static.
        let ret = unsafe {
            bindings::__cpuhp_setup_state(
                bindings::cpuhp_state_CPUHP_AP_ONLINE_DYN,
                kernel::c_str!("perfmon:online").as_char_ptr(),
                true,
                Some(cpu_online),
                Some(cpu_offline),
                false,
            )
        };
        if ret < 0 {
            return Err(Error::from_errno(ret));
        }
        self.cpuhp_state.store(ret as u32, Ordering::Relaxed);
        Ok(())
    }

    /// Tears down every CPU's vector and restores LVTPC.
    pub(crate) fn stop(&self) {
        let state = self.cpuhp_state.swap(0, Ordering::Relaxed);
        if state != 0 {
            // SAFETY: `state` came from `__cpuhp_setup_state`; the teardown
            // callback runs on every online CPU.
            unsafe { bindings::__cpuhp_remove_state(state as bindings::cpuhp_state, true) };
        }
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

    fn slot(&self, cpu: usize) -> Option<&CpuVector> {
        self.cpus.get(cpu)
    }

    /// Points this CPU's LVTPC at its vector, if it does not already: a
    /// hardware model's context is about to put its counters on this CPU's
    /// PMU (so it holds a claim: see `Pmu::hw_claim`). Interrupts off.
    pub(crate) fn own_lvtpc_here(&self) {
        if let Some(slot) = self.slot(glue::this_cpu() as usize) {
            take_lvtpc(slot);
        }
    }

    /// Whether this CPU's LVTPC points at its vector. Interrupts off.
    pub(crate) fn lvtpc_ours_here(&self) -> bool {
        self.slot(glue::this_cpu() as usize)
            .is_some_and(|s| s.lvtpc_ours.load(Ordering::Relaxed))
    }

    /// Restores this CPU's LVTPC to what it was before the module took it,
    /// if the module holds it (the last hardware claim went). Interrupts off.
    pub(crate) fn give_back_lvtpc_here(&self) {
        if let Some(slot) = self.slot(glue::this_cpu() as usize) {
            give_back_lvtpc(slot);
        }
    }

    /// Records that `att`'s context is (non-null) or is no longer (null)
    /// on this CPU's hardware PMU. Interrupts off.
    pub(crate) fn set_hw_owner(&self, att: *const Attachment) {
        if let Some(slot) = self.slot(glue::this_cpu() as usize) {
            slot.hw_owner
                .store(att as *mut Attachment, Ordering::Relaxed);
        }
    }

    /// Delivers a PMI of the simulated PMU on this CPU where LVTPC would:
    /// on the overflow vector, if LVTPC points at it. Interrupts off.
    pub(crate) fn raise_sim_pmi(&self) {
        if let Some(slot) = self.slot(glue::this_cpu() as usize) {
            let vector = slot.vector.load(Ordering::Relaxed);
            if vector != 0 && slot.lvtpc_ours.load(Ordering::Relaxed) {
                glue::send_ipi_self(vector);
            }
        }
    }

    /// This CPU's PMU register generation (see `CpuVector::hw_generation`).
    /// Interrupts off.
    pub(crate) fn hw_generation(&self) -> u64 {
        self.slot(glue::this_cpu() as usize)
            .map_or(0, |s| s.hw_generation.load(Ordering::Relaxed))
    }

    /// A context wrote its registers into this CPU's PMU. Interrupts off.
    pub(crate) fn bump_hw_generation(&self) {
        if let Some(slot) = self.slot(glue::this_cpu() as usize) {
            slot.hw_generation.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether `att`'s context is on this CPU's hardware PMU. Interrupts off.
    pub(crate) fn is_hw_owner(&self, att: *const Attachment) -> bool {
        self.slot(glue::this_cpu() as usize)
            .is_some_and(|s| core::ptr::eq(s.hw_owner.load(Ordering::Relaxed), att))
    }
}

/// Points this CPU's LVTPC at its vector, once (IRQs off: an IPI callback,
/// or the cpuhp callback with interrupts disabled around it).
fn take_lvtpc(slot: &CpuVector) {
    let vector = slot.vector.load(Ordering::Relaxed);
    if vector == 0 || slot.lvtpc_ours.load(Ordering::Relaxed) {
        return;
    }
    slot.saved_lvtpc
        .store(glue::apic_read_lvtpc(), Ordering::Relaxed);
    glue::apic_write_lvtpc(vector);
    slot.lvtpc_ours.store(true, Ordering::Relaxed);
}

/// Restores this CPU's LVTPC if it points at our vector (IRQs off, or the
/// CPU going offline).
fn give_back_lvtpc(slot: &CpuVector) {
    if slot.lvtpc_ours.swap(false, Ordering::Relaxed) {
        glue::apic_write_lvtpc(slot.saved_lvtpc.load(Ordering::Relaxed));
    }
}

unsafe extern "C" fn cpu_online(cpu: c_uint) -> c_int {
    let vecs = &globals().intr;
    let Some(slot) = vecs.slot(cpu as usize) else {
        return 0;
    };
    // SAFETY: Allocates from the exported x86 vector domain for an online CPU.
    let irq = unsafe { glue::irq_alloc_on_cpu(cpu) };
    if irq <= 0 {
        pr_warn!("CPU {cpu}: no overflow vector ({irq}); overflows use the fallback path\n");
        return 0;
    }
    let irq = irq as u32;
    // SAFETY: `irq` was just allocated; the vector domain sets no flow handler.
    unsafe { glue::irq_set_edge_handler(irq) };
    // SAFETY: The handler and `slot` (the cookie) live until `free_irq` in
    // `cpu_offline`; the name is static.
    let ret = unsafe {
        bindings::request_threaded_irq(
            irq,
            Some(overflow_irq),
            None,
            bindings::IRQF_NOBALANCING as _,
            kernel::c_str!("perfmon").as_char_ptr(),
            slot as *const CpuVector as *mut c_void,
        )
    };
    if ret != 0 {
        // SAFETY: Allocated above, not requested.
        unsafe { glue::irq_dispose(irq) };
        pr_warn!("CPU {cpu}: request_irq failed ({ret})\n");
        return 0;
    }
    // SAFETY: `irq` is allocated.
    let vector = unsafe { glue::irq_vector(irq) };
    // A CPU coming (back) online may have lost its PMU registers: no
    // context may skip its restore on the strength of an older generation.
    slot.hw_generation.fetch_add(1, Ordering::Relaxed);
    slot.vector.store(vector, Ordering::Relaxed);
    slot.irq.store(irq, Ordering::Release);
    if vecs.lvtpc_wanted.load(Ordering::Acquire) {
        // The cpuhp callback of a DYN state runs on `cpu` itself; interrupts
        // off against a concurrent `take_lvtpc_here` IPI.
        let flags = glue::local_irq_save();
        take_lvtpc(slot);
        glue::local_irq_restore(flags);
    }
    0
}

unsafe extern "C" fn cpu_offline(cpu: c_uint) -> c_int {
    let Some(slot) = globals().intr.slot(cpu as usize) else {
        return 0;
    };
    give_back_lvtpc(slot);
    let irq = slot.irq.swap(0, Ordering::AcqRel);
    slot.vector.store(0, Ordering::Relaxed);
    if irq != 0 {
        // SAFETY: Requested in `cpu_online` with this cookie.
        unsafe { bindings::free_irq(irq, slot as *const CpuVector as *mut c_void) };
        // SAFETY: No longer requested.
        unsafe { glue::irq_dispose(irq) };
    }
    // An overflow raised just before the CPU went away: handle it here.
    let pending = slot.pending.swap(core::ptr::null_mut(), Ordering::AcqRel);
    if !pending.is_null() {
        // SAFETY: `raise` stored an `Arc::into_raw` reference.
        let att = unsafe { Arc::from_raw(pending) };
        att.overflow_interrupt();
        release(att);
    }
    0
}

unsafe extern "C" fn overflow_irq(_irq: c_int, cookie: *mut c_void) -> bindings::irqreturn {
    // SAFETY: The cookie is this CPU's slot, alive while the IRQ is requested.
    let slot = unsafe { &*(cookie as *const CpuVector) };
    slot.count.fetch_add(1, Ordering::Relaxed);
    if slot.lvtpc_ours.load(Ordering::Relaxed) {
        // Hardware masks LVTPC when it delivers a PMI: unmask, as perf does.
        glue::apic_write_lvtpc(slot.vector.load(Ordering::Relaxed) & !APIC_LVT_MASKED);
    }
    let owner = slot.hw_owner.load(Ordering::Relaxed);
    if !owner.is_null() {
        // A hardware PMI: the owner's context is on this CPU's PMU.
        // SAFETY: The owner is cleared, with interrupts off on this CPU,
        // before its attachment can be released (`pfm_ctx`), so it is alive.
        unsafe { &*owner }.hw_pmi();
    }
    let pending = slot.pending.swap(core::ptr::null_mut(), Ordering::AcqRel);
    if !pending.is_null() {
        // SAFETY: `raise` stored an `Arc::into_raw` reference.
        let att = unsafe { Arc::from_raw(pending) };
        att.overflow_interrupt();
        release(att);
    }
    bindings::irqreturn_IRQ_HANDLED
}

/// Signals an overflow of `att`'s context on this CPU: a self-IPI on the
/// overflow vector, handled as soon as interrupts are enabled again.
/// Called with the context lock held (IRQs off). Returns `false` if the
/// vector path is unavailable (no vector, or another overflow still pending
/// on this CPU); the caller then uses the attachment's irq_work.
pub(crate) fn raise(att: &Arc<Attachment>) -> bool {
    let Some(slot) = globals().intr.slot(glue::this_cpu() as usize) else {
        return false;
    };
    let vector = slot.vector.load(Ordering::Relaxed);
    if vector == 0 {
        return false;
    }
    let raw = Arc::into_raw(att.clone()) as *mut Attachment;
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
            // last one (the caller holds `att`), so nothing is freed here.
            drop(unsafe { Arc::from_raw(raw) });
            // The same attachment already pending: its handler will see
            // this overflow too.
            current == raw
        }
    }
}
