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

/// A general-protection fault raised by an MSR access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gp {
    /// The MSR.
    pub msr: u32,
    /// The value written, `None` for a read.
    pub value: Option<u64>,
}

/// The privilege level an event happens at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ring {
    /// CPL > 0: counted when USR is set.
    User,
    /// CPL 0: counted when OS is set.
    Kernel,
}

/// RDMSR and WRMSR, as the kernel side's `rdmsr_safe`/`wrmsr_safe`.
pub trait MsrBus {
    /// Reads an MSR.
    fn rdmsr(&mut self, msr: u32) -> Result<u64, Gp>;
    /// Writes an MSR.
    fn wrmsr(&mut self, msr: u32, value: u64) -> Result<(), Gp>;
    /// PMIs raised since the last call, and clears the count.
    fn take_pmis(&mut self) -> u64;
}

/// The low `n` bits.
pub fn mask(n: u32) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

/// Adds `n` to a `width`-bit counter; returns the new value and whether it
/// wrapped (crossed 2^width) at least once.
pub fn add_wrapping(counter: u64, n: u64, width: u32) -> (u64, bool) {
    let total = counter as u128 + n as u128;
    let wraps = total >> width;
    ((total as u64) & mask(width), wraps != 0)
}
