// SPDX-License-Identifier: GPL-2.0

//! What the x86 hardware PMU models share: register descriptions, the errors a
//! PMC value is refused with, the counting policy, counter arming arithmetic,
//! and [`HwPmu`], the interface the kernel side drives them through.
//!
//! Pure logic: `core` only, no MSR access. The kernel side (`pfm_x86.rs`)
//! reads CPUID and MSRs, hands the raw values to a model's `probe`, and from
//! then on asks the model which MSR to access with which value. The host
//! tests drive the same interface against register-file simulators.
//!
//! # Numbering
//!
//! perfmon2's: PMCs are configuration registers (event selects, the fixed
//! counter control), PMDs are the counters. Each model documents its map.
//!
//! # The canonical sequences
//!
//! Models with global control ([`HwPmu::global_msrs`] is `Some`: Intel v2+,
//! AMD PerfMonV2) keep every used PMC written with its enable bit set and
//! start and stop with one write of the global control register:
//!
//! - load: `GLOBAL_CTRL = 0`; each used PMC gets
//!   `pmc_hw_value(pmc, v, true)`; each used PMD gets [`HwPmu::pmd_write`].
//! - start: `GLOBAL_CTRL = global_ctrl_value(used_pmds)`.
//! - stop: `GLOBAL_CTRL = 0`, then read the PMDs and fold
//!   ([`HwPmu::pmd_delta`]); re-arm them (`pmd_write`) before counting
//!   again, since one that wrapped is no longer armed, and ack any status.
//! - overflow interrupt: `GLOBAL_CTRL = 0`; read `GLOBAL_STATUS`;
//!   `status_pmds(status)` are the wrapped PMDs; fold every used PMD, re-arm
//!   the wrapped ones with `pmd_write(new value)`; write
//!   `ack_value(wrapped)` to the ack MSR; restore `GLOBAL_CTRL` if started.
//!
//! Models without (Intel v1, AMD without PerfMonV2) start and stop each PMC:
//! `pmc_hw_value(pmc, v, false)` at load and stop, `true` at start (with the
//! same fold and re-arm at stop). On an
//! overflow interrupt they stop every used PMC, read every used PMD, and a
//! PMD whose [`HwPmu::pmd_raw_overflowed`] is true wrapped; fold, re-arm,
//! restart. Stopping first is what makes the counts exact: events counted
//! between reading a counter and re-arming it would otherwise be lost.
//!
//! Where perf_events shares the PMU, note that perf rewrites GLOBAL_CTRL with
//! all its bits set whenever it enables: a PMC left with its enable bit set
//! counts then. The kernel side must clear the PMCs' enable bits on
//! switch-out (`pmc_hw_value(.., false)`) unless it owns GLOBAL_CTRL.
//!
//! # Arming a counter
//!
//! A PMD holds a 64-bit virtual value `v`; the hardware counter is `W` bits
//! (`RegDesc::hw_width`) and the model arms it to wrap when the low `U` bits
//! of `v` wrap (`RegDesc::width`): it writes `(2^W - 2^U) + (v mod 2^U)`.
//! Since `2^U` divides `2^64`, the hardware wraps exactly when the 64-bit
//! value crosses 2^64, which is the overflow perfmon2 reports; intermediate
//! wraps are folded and re-armed.
//!
//! `U` is always below `W` (Linux's `max_period` is half the counter for
//! the same reason): a counter armed at most `2^(W-1)` events from its wrap
//! and read soon after the wrap has advanced by less than `2^W`, so the
//! difference of two reads is unambiguous (armed at `U = W` with `v mod 2^W =
//! 0`, a full wrap would read as no progress at all). It also keeps the top
//! bit set while armed, so a clear top bit shows a wrap where there is no
//! global status. Where 32-bit writes sign-extend bit 31 (Intel IA32_PMCx
//! without full-width writes) `U` is 31 and the bits above are all ones,
//! which is what sign extension produces.

use crate::abi;
use crate::pfm_counter::hw_delta;

/// What a register is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegKind {
    /// An event select register (a PMC): Intel PERFEVTSELx, AMD PERF_CTLx.
    EventSel,
    /// Intel's IA32_FIXED_CTR_CTRL (a PMC controlling every fixed counter).
    FixedCtrl,
    /// A general-purpose counter (a PMD).
    Counter,
    /// A fixed-function counter (a PMD).
    FixedCounter,
}

impl RegKind {
    /// Whether the register is a counter (a PMD).
    pub const fn is_counter(self) -> bool {
        matches!(self, RegKind::Counter | RegKind::FixedCounter)
    }
}

/// perfmon2's `pmu_desc` entry: one implemented register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegDesc {
    /// The manual's name of the register.
    pub name: &'static str,
    /// MSR through which the module reads and writes it.
    pub msr: u32,
    /// What it is.
    pub kind: RegKind,
    /// Counters: the width the virtualization arms (`U` in the module doc);
    /// configuration registers: 64.
    pub width: u32,
    /// Counters: the physical width `W`; configuration registers: 64.
    pub hw_width: u32,
    /// Bits a user value must leave zero whatever the policy: reserved bits
    /// and the bits the module owns or refuses (interrupt, any-thread, pin
    /// control). The kernel-mode bit is refused per policy and not included.
    pub rsvd_mask: u64,
    /// The value the register gets when user space wrote none.
    pub dfl_val: u64,
}

/// Which counting a user may ask for, decided by the module (a
/// perf_event_paranoid-like setting and the caller's capabilities).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// Counting in kernel mode (CPL 0: the OS bits) is allowed.
    pub allow_kernel: bool,
}

/// Why a PMC value was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PmcError {
    /// The register does not exist on this PMU (`PFM_REG_RETFL_NOTAVAIL`).
    NotAvailable,
    /// A reserved bit is set (`PFM_REG_RETFL_EINVAL`).
    ReservedBits,
    /// A bit the user may not set: the module's own (interrupt, any-thread,
    /// pin control) or kernel-mode counting the policy refuses
    /// (`PFM_REG_RETFL_EINVAL`).
    NotAllowed,
    /// An architectural event CPUID marks unavailable (`PFM_REG_RETFL_EINVAL`).
    EventUnavailable,
}

impl PmcError {
    /// The `PFM_REG_RETFL_*` flag reported in the element's `reg_flags`; the
    /// call itself fails with `EINVAL`.
    pub const fn retfl(self) -> u32 {
        match self {
            PmcError::NotAvailable => abi::PFM_REG_RETFL_NOTAVAIL,
            _ => abi::PFM_REG_RETFL_EINVAL,
        }
    }
}

/// The four registers a CPUID leaf returns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuidRegs {
    /// EAX.
    pub eax: u32,
    /// EBX.
    pub ebx: u32,
    /// ECX.
    pub ecx: u32,
    /// EDX.
    pub edx: u32,
}

/// How to load a counter with a 64-bit virtual value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CounterWrite {
    /// MSR to write.
    pub msr: u32,
    /// Value to write.
    pub value: u64,
    /// What the counter holds (and a read returns) right after the write:
    /// the `prev` of the next [`HwPmu::pmd_delta`].
    pub raw: u64,
}

/// The global control registers of a model that has them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GlobalMsrs {
    /// Enable bits, one per counter (Intel GLOBAL_CTRL, AMD GLOBAL_CTL).
    pub ctrl: u32,
    /// Overflow bits, read-only (GLOBAL_STATUS).
    pub status: u32,
    /// Writing ones clears status bits (Intel GLOBAL_OVF_CTRL, a.k.a.
    /// STATUS_RESET from v4; AMD GLOBAL_STATUS_CLR).
    pub ack: u32,
}

/// `1 << n`, or 0 when `n >= 64`: never panics.
pub const fn bit(n: u32) -> u64 {
    if n < 64 {
        1u64 << n
    } else {
        0
    }
}

/// The low `n` bits set (`n = 0` gives 0, `n >= 64` all): never panics.
pub const fn low_mask(n: u32) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

/// The fewest events a counter is armed for: a PMD whose value is closer to
/// its next overflow (a tiny sampling period) is armed to wrap this many
/// events later, so PMIs come at most once per `MIN_ARM_EVENTS` events of a
/// counter instead of in a storm. Nothing is lost: the fold at that PMI
/// counts every 64-bit overflow the events crossed (`pfm_counter::advance`).
pub const MIN_ARM_EVENTS: u64 = 1 << 17;

/// The counter value that makes a `hw`-bit counter wrap when the low `usable`
/// bits of `virt` wrap: `2^hw - d`, where `d = 2^usable - (virt mod
/// 2^usable)` is the number of events to that wrap — or, if fewer,
/// [`MIN_ARM_EVENTS`] (at most `2^usable`).
pub const fn arm_value(virt: u64, usable: u32, hw: u32) -> u64 {
    arm_value_min(virt, usable, hw, MIN_ARM_EVENTS)
}

/// [`arm_value`] with `min_events` (at least 1) instead of
/// [`MIN_ARM_EVENTS`]: the kernel side raises it for a context whose PMIs
/// come too fast.
pub const fn arm_value_min(virt: u64, usable: u32, hw: u32, min_events: u64) -> u64 {
    let u = if usable > hw { hw } else { usable };
    let min1 = if min_events == 0 { 0 } else { min_events - 1 };
    // Events to the wrap, minus one (fits in 64 bits even for u = 64).
    let mut d1 = low_mask(u) - (virt & low_mask(u));
    let floor = if min1 < low_mask(u) {
        min1
    } else {
        low_mask(u)
    };
    if d1 < floor {
        d1 = floor;
    }
    low_mask(hw) - d1
}

/// A hardware PMU model, as the kernel side drives it (see the module doc for
/// the order of the accesses). Every method is pure.
pub trait HwPmu {
    /// The model's name, as `PFM_IOC_GET_INFO` and sysfs report it.
    fn name(&self) -> &'static str;

    /// Bit n set: PMC n exists.
    fn impl_pmcs(&self) -> u64;

    /// Bit n set: PMD n exists.
    fn impl_pmds(&self) -> u64;

    /// Description of PMC `pmc`, `None` if it does not exist.
    fn pmc_desc(&self, pmc: usize) -> Option<RegDesc>;

    /// Description of PMD `pmd`, `None` if it does not exist.
    fn pmd_desc(&self, pmd: usize) -> Option<RegDesc>;

    /// Checks a user value for PMC `pmc` and returns the value to keep for
    /// it (the enable bit stripped: the module owns it).
    fn validate_pmc(&self, pmc: usize, value: u64, policy: Policy) -> Result<u64, PmcError>;

    /// The PMDs a validated PMC value makes count (an event select: its
    /// counter; the fixed counter control: the fixed counters it enables).
    fn pmc_pmds(&self, pmc: usize, value: u64) -> u64;

    /// The value to write into PMC `pmc` for a validated `value`: with the
    /// interrupt bits the module owns, counting if `enable`.
    fn pmc_hw_value(&self, pmc: usize, value: u64, enable: bool) -> u64;

    /// The global control registers, `None` if the model has none.
    fn global_msrs(&self) -> Option<GlobalMsrs>;

    /// The global control value that enables the PMDs in `pmds` (bit n =
    /// PMD n); 0 where the model has no global control.
    fn global_ctrl_value(&self, pmds: u64) -> u64;

    /// The PMDs whose overflow bit is set in a global status value.
    fn status_pmds(&self, status: u64) -> u64;

    /// The value to write into the ack MSR to clear the status of `pmds`.
    fn ack_value(&self, pmds: u64) -> u64;

    /// Event `idx` of the model's list for `PFM_IOC_GET_INFO`: its name and
    /// the PMC value that counts it in user mode; `None` past the end.
    fn event(&self, idx: usize) -> Option<(&'static str, u64)>;

    /// The smallest armed width of any PMD: what `PfmInfo::counter_width`
    /// reports.
    fn counter_width(&self) -> u32 {
        let mut w = 64;
        let mut i = 0;
        while i < abi::PFM_MAX_PMDS {
            if let Some(d) = self.pmd_desc(i) {
                if d.width < w {
                    w = d.width;
                }
            }
            i += 1;
        }
        w
    }

    /// How to load PMD `pmd` with the 64-bit virtual value `virt`.
    fn pmd_write(&self, pmd: usize, virt: u64) -> Option<CounterWrite> {
        self.pmd_write_min(pmd, virt, MIN_ARM_EVENTS)
    }

    /// [`HwPmu::pmd_write`], armed at least `min_events` events from the
    /// wrap (see [`arm_value_min`]).
    fn pmd_write_min(&self, pmd: usize, virt: u64, min_events: u64) -> Option<CounterWrite> {
        let d = self.pmd_desc(pmd)?;
        let raw = arm_value_min(virt, d.width, d.hw_width, min_events);
        Some(CounterWrite {
            msr: d.msr,
            value: raw,
            raw,
        })
    }

    /// How far PMD `pmd` advanced between two reads (at most one wrap, which
    /// the overflow interrupt guarantees); 0 for a PMD that does not exist.
    fn pmd_delta(&self, pmd: usize, prev: u64, now: u64) -> u64 {
        match self.pmd_desc(pmd) {
            Some(d) => hw_delta(prev, now, d.hw_width),
            None => 0,
        }
    }

    /// Whether an armed PMD wrapped, judged from a raw read: its top bit is
    /// clear. This is how wraps are found where [`HwPmu::global_msrs`] is
    /// `None`; it holds until the counter has counted `2^(W-1)` events past
    /// the wrap, which the overflow interrupt prevents.
    fn pmd_raw_overflowed(&self, pmd: usize, raw: u64) -> bool {
        match self.pmd_desc(pmd) {
            Some(d) => d.width < d.hw_width && raw & bit(d.hw_width - 1) == 0,
            None => false,
        }
    }

    /// Fills the model part of `PFM_IOC_GET_INFO`: name, register counts and
    /// masks, per-PMC reserved masks (all ones for absent PMCs), width and
    /// events.
    fn describe(&self, info: &mut abi::PfmInfo) {
        copy_name(&mut info.model, self.name());
        info.impl_pmcs = self.impl_pmcs();
        info.impl_pmds = self.impl_pmds();
        info.num_pmcs = self.impl_pmcs().count_ones() as u16;
        info.num_pmds = self.impl_pmds().count_ones() as u16;
        info.counter_width = self.counter_width() as u16;
        for (i, m) in info.pmc_rsvd_mask.iter_mut().enumerate() {
            *m = match self.pmc_desc(i) {
                Some(d) => d.rsvd_mask,
                None => u64::MAX,
            };
        }
        let mut n = 0;
        for slot in info.events.iter_mut() {
            *slot = abi::PfmEventInfo::default();
            if let Some((ename, code)) = self.event(n) {
                copy_name(&mut slot.name, ename);
                slot.code = code;
                n += 1;
            }
        }
        info.num_events = n as u16;
    }
}

/// Copies `src` into `dst`, truncated, the rest (and at least the last
/// byte) NUL: a name field of the ABI.
pub(crate) fn copy_name(dst: &mut [u8], src: &str) {
    let keep = dst.len().saturating_sub(1);
    let src = src.as_bytes();
    for (i, b) in dst.iter_mut().enumerate() {
        *b = if i < keep {
            src.get(i).copied().unwrap_or(0)
        } else {
            0
        };
    }
}

/// Fetches `table[i]`, or `""` past its end: names for registers the tables
/// cover, without a panicking index.
pub(crate) fn name_at(table: &[&'static str], i: usize) -> &'static str {
    match table.get(i) {
        Some(s) => s,
        None => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_never_overflow() {
        assert_eq!(bit(0), 1);
        assert_eq!(bit(63), 1 << 63);
        assert_eq!(bit(64), 0);
        assert_eq!(low_mask(0), 0);
        assert_eq!(low_mask(31), 0x7fff_ffff);
        assert_eq!(low_mask(64), u64::MAX);
        assert_eq!(low_mask(200), u64::MAX);
    }

    #[test]
    fn arming_wraps_with_the_low_bits() {
        for (u, w) in [
            (31u32, 40u32),
            (31, 48),
            (47, 48),
            (48, 48),
            (32, 32),
            (64, 64),
        ] {
            for v in [
                0u64,
                1,
                0x7fff_ffff,
                0x8000_0000,
                u64::MAX,
                u64::MAX - 5,
                0x1234_5678_9abc,
            ] {
                let raw = arm_value(v, u, w);
                assert_eq!(raw & !low_mask(w), 0, "fits in {w} bits");
                // Events until the hardware wraps == events until v's low u
                // bits wrap, or the minimum if that is closer.
                let to_hw_wrap = (low_mask(w) - raw) as u128 + 1;
                let to_virt_wrap = (low_mask(u) - (v & low_mask(u))) as u128 + 1;
                let floor = (MIN_ARM_EVENTS as u128).min(low_mask(u) as u128 + 1);
                assert_eq!(to_hw_wrap, to_virt_wrap.max(floor), "u {u} w {w} v {v:#x}");
                if u < w {
                    assert_ne!(raw & bit(w - 1), 0, "top bit set when armed");
                }
            }
        }
    }

    #[test]
    fn tiny_periods_arm_the_minimum() {
        // Period 1: the value is 2^64 - 1, one event from overflowing.
        for (u, w) in [(47u32, 48u32), (31, 40), (31, 48), (63, 64)] {
            let raw = arm_value(u64::MAX, u, w);
            assert_eq!(low_mask(w) - raw + 1, MIN_ARM_EVENTS as u64, "u {u} w {w}");
            assert_ne!(raw & bit(w - 1), 0, "top bit set when armed");
        }
        // A counter too narrow for the minimum arms for its whole period.
        assert_eq!(arm_value(u64::MAX, 15, 16), 0x8000);
        // A raised minimum, capped at the whole period.
        assert_eq!(
            low_mask(48) - arm_value_min(u64::MAX, 47, 48, 1 << 30) + 1,
            1 << 30
        );
        assert_eq!(
            arm_value_min(u64::MAX, 31, 40, 1 << 40),
            low_mask(40) - low_mask(31)
        );
        // Exactly the minimum away: unchanged; one more: the wrap itself.
        let v = 0u64.wrapping_sub(MIN_ARM_EVENTS + 1);
        assert_eq!(low_mask(48) - arm_value(v, 47, 48) + 1, MIN_ARM_EVENTS + 1);
    }

    #[test]
    fn errors_map_to_abi_flags() {
        assert_eq!(PmcError::NotAvailable.retfl(), abi::PFM_REG_RETFL_NOTAVAIL);
        for e in [
            PmcError::ReservedBits,
            PmcError::NotAllowed,
            PmcError::EventUnavailable,
        ] {
            assert_eq!(e.retfl(), abi::PFM_REG_RETFL_EINVAL);
        }
    }
}
