// SPDX-License-Identifier: GPL-2.0

//! The TSC as user space may read it: whether it is usable to extend times
//! (`rdtscp`, constant rate, not marked unstable), its conversion to ns as
//! the scheduler's clock does it, and reading it.

use kernel::bindings;

mod ffi {
    extern "C" {
        pub(crate) fn pfm_tsc_user_time_ok() -> bool;
        pub(crate) fn clocks_calc_mult_shift(
            mult: *mut u32,
            shift: *mut u32,
            from: u32,
            to: u32,
            maxsec: u32,
        );
    }
}

/// ns in a ms: `tsc_khz` is in kHz.
const NSEC_PER_MSEC: u32 = 1_000_000;

/// The TSC rate now, in kHz (`tsc_khz`: refined at boot; changed by
/// cpufreq only on CPUs without a constant-rate TSC).
pub(crate) fn tsc_khz() -> u32 {
    // SAFETY: A racy read of a `u32` the kernel updates with plain stores,
    // as its own readers do.
    unsafe { core::ptr::read_volatile(core::ptr::addr_of!(bindings::tsc_khz)) }
}

/// The TSC-to-ns conversion `(mult, shift)` at `khz`: computed by
/// `clocks_calc_mult_shift` with the arguments `set_cyc2ns_scale` gives it
/// (maxsec 0); `pfm_page::sched_clock_scale` then makes it the pair
/// `sched_clock` (and so the scheduler's runtime) uses. `None` for a rate
/// of 0 or one it cannot express with a shift of at most 32.
pub(crate) fn mult_shift(khz: u32) -> Option<(u32, u32)> {
    if khz == 0 {
        return None;
    }
    let (mut mult, mut shift) = (0u32, 0u32);
    // SAFETY: Two valid out-pointers; `khz` is not 0.
    unsafe { ffi::clocks_calc_mult_shift(&mut mult, &mut shift, khz, NSEC_PER_MSEC, 0) };
    (mult != 0 && shift <= 32).then_some((mult, shift))
}

/// Whether user space may extend times with the TSC now: `rdtscp`, and a
/// TSC not marked unstable (the clocksource watchdog may mark it at any
/// time), which is what makes `sched_clock` the scaled TSC.
pub(crate) fn tsc_user_time_ok() -> bool {
    // SAFETY: Reads CPU feature bits and the TSC's state; no precondition.
    unsafe { ffi::pfm_tsc_user_time_ok() }
}

/// This CPU's TSC, read after every earlier instruction completed
/// (`rdtsc_ordered`: `lfence; rdtsc`), so it is not older than what the
/// caller computed before.
#[inline]
pub(crate) fn rdtsc() -> u64 {
    // SAFETY: `lfence` and `rdtsc` only order and read; every x86-64 CPU
    // has both, and the kernel never disables `rdtsc` for itself (CR4.TSD
    // affects user mode only).
    unsafe {
        core::arch::x86_64::_mm_lfence();
        core::arch::x86_64::_rdtsc()
    }
}
