// SPDX-License-Identifier: GPL-2.0

//! Register-file simulators of the x86 PMUs, written from the Intel SDM
//! (vol. 3B, architectural performance monitoring) and the AMD APM (vol. 2,
//! performance monitoring counters), and a reference driver that programs
//! them the way the kernel side must, through `HwPmu` only.
//!
//! A simulator answers RDMSR/WRMSR like the CPU: an access to an MSR the PMU
//! does not have, or a write of reserved bits, is a #GP ([`Gp`]). Events are
//! delivered with `count`; every enabled counter whose event, unit mask and
//! privilege filter match advances, wraps at its width, sets its status bit
//! (where there is a global status) and raises a PMI if its interrupt bit is
//! set. CMASK, INV and EDGE are stored but not modelled: the simulators count
//! raw events.

#![allow(dead_code)]

pub mod amd;
pub mod driver;
pub mod intel;

pub use pfm_host_tests::pfm_x86::intel_sim::{add_wrapping, mask, Gp, Ring};

/// RDMSR and WRMSR, as the kernel side's `rdmsr_safe`/`wrmsr_safe`.
pub trait MsrBus {
    /// Reads an MSR.
    fn rdmsr(&mut self, msr: u32) -> Result<u64, Gp>;
    /// Writes an MSR.
    fn wrmsr(&mut self, msr: u32, value: u64) -> Result<(), Gp>;
    /// PMIs raised since the last call, and clears the count.
    fn take_pmis(&mut self) -> u64;
}

/// Events a counter armed for the 64-bit value `v` (armed width `width`)
/// counts before its wrap, minus one: up to the wrap of `v`'s low `width`
/// bits, or the module's minimum (`model::MIN_ARM_EVENTS`) if that is
/// closer.
pub fn short_of_wrap(v: u64, width: u32) -> u64 {
    use pfm_host_tests::pfm_x86::model::MIN_ARM_EVENTS;
    let to_wrap = mask(width) - (v & mask(width));
    let floor = (MIN_ARM_EVENTS - 1).min(mask(width));
    to_wrap.max(floor)
}

/// What a PMD programmed with period `p` (written and reset to -`p`) and
/// randomised with `mask` and `seed` must hold after `truth` events, from
/// the generator's periods alone (`pfm_random::periods`: the write's
/// period `p`, then one drawn period per reset): its 64-bit overflows and
/// its value.
pub fn random_truth(p: u64, mask: u64, seed: u64, truth: u64) -> (u64, u64) {
    let mut periods = pfm_host_tests::pfm_random::periods(p, mask, seed).expect("a 2^k - 1 mask");
    let (mut end, mut n) = (p, 0);
    while end <= truth {
        end += periods.next().unwrap_or(u64::MAX);
        n += 1;
    }
    (n, (end - truth).wrapping_neg())
}
