// SPDX-License-Identifier: GPL-2.0

//! Model-specific registers: the faulting-safe accessors the hardware
//! models' driver goes through, and the reservation of counters shared
//! with perf_events and the NMI watchdog.

use super::ffi;

/// `rdmsrl_safe`: reads an MSR of this CPU; `None` if the access faulted.
///
/// # Safety
///
/// `msr` must be a performance-monitoring MSR that CPUID announces on this
/// CPU (as the host-tested models derive them), whose read has no side
/// effect.
pub(crate) unsafe fn rdmsr_safe(msr: u32) -> Option<u64> {
    let mut v = 0u64;
    // SAFETY: The caller's guarantee; the `_safe` accessor turns a #GP into
    // an error; `v` is valid for writes.
    let ret = unsafe { ffi::pfm_rdmsr_safe(msr, &mut v) };
    (ret == 0).then_some(v)
}

/// `wrmsrl_safe`: writes an MSR of this CPU; `false` if the access faulted.
///
/// # Safety
///
/// `msr` must be a performance-monitoring MSR that CPUID announces on this
/// CPU, owned by the module (claimed from perf_events), and `value` one the
/// model produced for it (reserved bits clear).
pub(crate) unsafe fn wrmsr_safe(msr: u32, value: u64) -> bool {
    // SAFETY: The caller's guarantee; the `_safe` accessor turns a #GP into
    // an error.
    unsafe { ffi::pfm_wrmsr_safe(msr, value) == 0 }
}

/// Reserves, for the module, the counter and event select that the NMI
/// reservation allocator (shared with perf_events) maps `ctr`/`evtsel` to;
/// `false` if someone (perf_events, the NMI watchdog) holds either.
pub(crate) fn reserve_counter(ctr: u32, evtsel: u32) -> bool {
    // SAFETY: Atomic bit operations on the allocator's bitmaps.
    if unsafe { ffi::reserve_perfctr_nmi(ctr) } == 0 {
        return false;
    }
    // SAFETY: As above.
    if unsafe { ffi::reserve_evntsel_nmi(evtsel) } == 0 {
        // SAFETY: Reserved just above.
        unsafe { ffi::release_perfctr_nmi(ctr) };
        return false;
    }
    true
}

/// Releases what [`reserve_counter`] reserved.
pub(crate) fn release_counter(ctr: u32, evtsel: u32) {
    // SAFETY: The caller reserved both with `reserve_counter`.
    unsafe {
        ffi::release_evntsel_nmi(evtsel);
        ffi::release_perfctr_nmi(ctr);
    }
}
