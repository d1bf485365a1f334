// SPDX-License-Identifier: GPL-2.0

//! 64-bit counter virtualization: the arithmetic that turns narrow hardware
//! (or soft) counters into the exact 64-bit values user space reads, and
//! overflow periods into overflow counts. No kernel code, so the host tests
//! check it at every width.

use crate::pfm_random::PeriodRandom;

/// Mask of a counter `width` bits wide; `width` is clamped to `1..=64`.
pub const fn width_mask(width: u32) -> u64 {
    match width {
        0 | 1 => 1,
        w if w >= 64 => u64::MAX,
        w => (1u64 << w) - 1,
    }
}

/// How far a `width`-bit counter advanced from `prev` to `now`, counting one
/// wrap at most (perf's `x86_perf_event_update`): the caller must read the
/// counter at least once per wrap, which the overflow interrupt guarantees.
pub const fn hw_delta(prev: u64, now: u64, width: u32) -> u64 {
    now.wrapping_sub(prev) & width_mask(width)
}

/// The result of advancing a 64-bit virtual counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Advance {
    /// The new 64-bit value.
    pub value: u64,
    /// How many times the value crossed 2^64 (overflow events).
    pub overflows: u64,
}

/// Advances a 64-bit virtual counter by `delta`.
///
/// A counter programmed with a period P holds `2^64 - P`; it overflows when
/// the value crosses 2^64 and then restarts from `reset` (the short or long
/// reset value) plus what was counted past the crossing, so no event is lost
/// and several periods elapsed within one `delta` count as several overflows.
///
/// Only 64-bit division is used: the kernel has no 128-bit division helpers.
pub const fn advance(value: u64, delta: u64, reset: u64) -> Advance {
    let (sum, crossed) = value.overflowing_add(delta);
    if !crossed {
        return Advance {
            value: sum,
            overflows: 0,
        };
    }
    // What was counted past 2^64.
    let excess = sum;
    // The period is 2^64 - reset; a reset of 0 means a period of 2^64,
    // longer than any excess.
    if reset == 0 {
        return Advance {
            value: excess,
            overflows: 1,
        };
    }
    let period = reset.wrapping_neg();
    Advance {
        value: reset + excess % period,
        overflows: 1 + excess / period,
    }
}

/// The value that makes a counter overflow after `period` events.
pub const fn period_to_value(period: u64) -> u64 {
    0u64.wrapping_sub(period)
}

/// Randomised resets one count draws at most (`PFM_REGFL_RANDOM`): a
/// count that crosses more periods (a short period behind a long fold)
/// gives the rest the length of the last one drawn, so that the work under
/// the context's lock stays bounded. As many as the sampling buffer writes
/// entries for one overflow, so each entry written has its own draw.
pub const MAX_RANDOM_RESETS: u64 = 64;

/// What a randomised PMD's last reset was drawn from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum LastBase {
    /// No reset since the PMD was written.
    #[default]
    None,
    /// The short reset value.
    Short,
    /// The long reset value.
    Long,
}

/// A PMD's software state: the 64-bit value and its reset values. A
/// narrow register behind it (a hardware counter) is its model's to keep:
/// the soft model's would only repeat the value's low bits.
///
/// Every reset (an overflow's short reset, RESTART's long one, a linked
/// reset of either kind) goes through [`PmdState::reset`], which applies
/// the period randomisation of `PFM_REGFL_RANDOM`. Its generator lives
/// here, with the reset values, so it is the image's: each event set has
/// its own, a set switch keeps it, and a copy of the registers (a clone,
/// an inherited thread's template) copies it. It costs no byte: a
/// randomised PMD keeps the generator's state where another keeps its last
/// reset value, which the state's last draw gives back (the soft model's
/// four PMDs are inline in every context, which is sized to a slab class).
///
/// # Invariants
///
/// `random_bits` is 0, or k + 1 for a mask of 2^k - 1 (k at most 64), and
/// then `flags` has `PFM_REGFL_RANDOM` and `last` is a generator state,
/// never 0.
#[derive(Clone, Copy, Debug, Default)]
pub struct PmdState {
    /// The 64-bit virtualized value.
    pub value: u64,
    /// Reload value after a non-notified overflow.
    pub short_reset: u64,
    /// Reload value on RESTART after a notification.
    pub long_reset: u64,
    /// Not randomised: the last reset value applied. Randomised: the
    /// generator's state ([`PmdState::last_reset`]).
    last: u64,
    /// `PFM_REGFL_*` input flags (`PFM_REGFL_IN_MASK`: 16 bits).
    flags: u16,
    /// `PFM_REGFL_RANDOM`: k + 1 for a mask of 2^k - 1; 0 without.
    random_bits: u8,
    /// A randomised PMD's last reset: drawn from which reset value.
    last_base: LastBase,
    /// PMDs reset with this one (PMD numbers are below `PFM_MAX_PMDS`,
    /// 32).
    pub reset_pmds: u32,
}

// The soft model's four PMDs are inline in every context (see above).
const _: () = assert!(core::mem::size_of::<PmdState>() == 40);

impl PmdState {
    /// Sets the value, as a PMD write does.
    pub fn write(&mut self, value: u64) {
        self.value = value;
    }

    /// A PMD write: the value, the reset values, the `PFM_REGFL_*` input
    /// flags, the linked PMDs and the period randomisation (on exactly
    /// when `random` is, `PFM_REGFL_RANDOM` in the flags following it).
    /// The last reset value stays what it was; a randomised PMD's is 0
    /// until its first reset.
    pub fn program(
        &mut self,
        value: u64,
        short_reset: u64,
        long_reset: u64,
        flags: u32,
        reset_pmds: u32,
        random: PeriodRandom,
    ) {
        // Before the reset values change: a randomised PMD's is drawn
        // from them.
        let last = self.last_reset();
        self.value = value;
        self.short_reset = short_reset;
        self.long_reset = long_reset;
        self.reset_pmds = reset_pmds;
        self.flags = (flags & crate::abi::PFM_REGFL_IN_MASK & !crate::abi::PFM_REGFL_RANDOM) as u16;
        self.last = last;
        self.random_bits = 0;
        self.last_base = LastBase::None;
        self.set_random(random);
    }

    /// Makes the PMD randomised with `random` (its mask and state), or not
    /// if it is off.
    pub fn set_random(&mut self, random: PeriodRandom) {
        let random_flag = crate::abi::PFM_REGFL_RANDOM as u16;
        if !random.is_on() {
            self.last = self.last_reset();
            self.flags &= !random_flag;
            self.random_bits = 0;
            self.last_base = LastBase::None;
            return;
        }
        // INVARIANT: k + 1 with k at most 64; the flag; a state, never 0.
        self.flags |= random_flag;
        self.random_bits = random.mask_bits() as u8 + 1;
        self.last = random.state();
        self.last_base = LastBase::None;
    }

    /// The `PFM_REGFL_*` input flags.
    pub fn flags(&self) -> u32 {
        u32::from(self.flags)
    }

    /// Drops `PFM_REGFL_OVFL_NOTIFY` (a whole program's other threads
    /// queue no message).
    pub fn clear_notify(&mut self) {
        self.flags &= !(crate::abi::PFM_REGFL_OVFL_NOTIFY as u16);
    }

    /// The period randomisation: the generator as it stands (its state is
    /// the seed that continues the sequence), or [`PeriodRandom::OFF`].
    pub fn random(&self) -> PeriodRandom {
        match self.random_bits {
            0 => PeriodRandom::OFF,
            b => PeriodRandom::new(self.last, PeriodRandom::mask_of_bits(u32::from(b) - 1))
                .unwrap_or(PeriodRandom::OFF),
        }
    }

    /// The last reset value applied (randomised, for a randomised PMD: its
    /// reset value less the last amount drawn; 0 before its first reset).
    pub fn last_reset(&self) -> u64 {
        if self.random_bits == 0 {
            return self.last;
        }
        let base = match self.last_base {
            LastBase::None => return 0,
            LastBase::Short => self.short_reset,
            LastBase::Long => self.long_reset,
        };
        base.saturating_sub(self.random().last_amount())
    }

    /// A reset: the long reset value if `long` (RESTART after a
    /// notification), else the short one, less the generator's next
    /// amount for a randomised PMD; recorded as the last reset, and
    /// returned. The value is the caller's to set.
    #[inline]
    fn reset(&mut self, long: bool) -> u64 {
        let base = if long {
            self.long_reset
        } else {
            self.short_reset
        };
        if self.random_bits == 0 {
            self.last = base;
            return base;
        }
        let mut g = self.random();
        let v = g.reset_value(base);
        self.last = g.state();
        self.last_base = if long {
            LastBase::Long
        } else {
            LastBase::Short
        };
        v
    }

    /// Resets the value to the long reset value if `long`, else to the
    /// short one, randomised if the PMD is, and records it as the last
    /// reset: RESTART's long reset, a linked reset.
    pub fn reset_to(&mut self, long: bool) {
        self.value = self.reset(long);
    }

    /// Counts `delta` events. A narrow counter's wraps are the caller's
    /// (`hw_delta`): only the value
    /// crossing 2^64 is an overflow. Returns the number of 64-bit
    /// overflows.
    pub fn count(&mut self, delta: u64) -> u64 {
        if let Some(v) = self.value.checked_add(delta) {
            // No overflow, the common case.
            self.value = v;
            return 0;
        }
        if self.random_bits != 0 {
            return self.count_random(delta);
        }
        let a = advance(self.value, delta, self.short_reset);
        if a.overflows != 0 {
            self.last = self.short_reset;
        }
        self.value = a.value;
        a.overflows
    }

    /// [`PmdState::count`] of a randomised PMD whose value crosses 2^64:
    /// each crossing is a short reset with its own amount, so each period
    /// has its own length, and the count stays exact (what was counted
    /// past a crossing goes on from its reset). After
    /// [`MAX_RANDOM_RESETS`] draws, the periods left in `delta` are the
    /// last one's length.
    #[cold]
    fn count_random(&mut self, delta: u64) -> u64 {
        // What was counted past 2^64.
        let mut excess = self.value.wrapping_add(delta);
        let mut n = 0;
        loop {
            n += 1;
            let reset = self.reset(false);
            let Some(v) = reset.checked_add(excess) else {
                if n < MAX_RANDOM_RESETS {
                    // Crossed again: past 2^64 by this much.
                    excess = reset.wrapping_add(excess);
                    continue;
                }
                // A reset of 0 never crosses again: `reset` is not 0.
                let a = advance(reset, excess, reset);
                self.value = a.value;
                return n + a.overflows;
            };
            self.value = v;
            return n;
        }
    }
}

/// perfmon2's linked resets (`reg_reset_pmds`): every PMD named in the
/// `reset_pmds` of a PMD in `ovfl` is reset too, to its own long reset
/// value if `long` (RESTART after a notification) or its short one (an
/// overflow), randomised if it is, and records it as its last reset. PMDs in `ovfl` are left
/// alone: their own overflow (or RESTART) reset them, keeping what they
/// counted past it. Returns the PMDs reset here, which a hardware model
/// must load into its counters again.
pub fn reset_linked(pmds: &mut [PmdState], ovfl: u64, long: bool) -> u64 {
    if ovfl == 0 {
        return 0;
    }
    let mut linked = 0u64;
    let mut m = ovfl;
    while m != 0 {
        let i = m.trailing_zeros() as usize;
        m &= m - 1;
        linked |= pmds.get(i).map_or(0, |p| u64::from(p.reset_pmds));
    }
    linked &= !ovfl;
    let mut reset = 0u64;
    let mut m = linked;
    while m != 0 {
        let j = m.trailing_zeros() as usize;
        m &= m - 1;
        if let Some(p) = pmds.get_mut(j) {
            p.reset_to(long);
            reset |= 1 << j;
        }
    }
    reset
}

/// What a thread counted, for the PMDs of `mask` in PMD order, into
/// `out`: each PMD's value less the value it started from (`base`), in
/// 64-bit wrapping arithmetic (a counter that wrapped past 2^64 counted
/// what the difference says). A whole program's thread starts from the
/// registers of the loaded one at LOAD. PMDs of `mask` beyond `out`'s
/// length, or beyond `values`, are left out; returns how many were packed.
pub fn pack_counts(values: &[u64], base: &[u64], mask: u64, out: &mut [u64]) -> usize {
    let mut m = mask;
    let mut n = 0;
    while m != 0 {
        let i = m.trailing_zeros() as usize;
        m &= m - 1;
        let (Some(&v), Some(slot)) = (values.get(i), out.get_mut(n)) else {
            break;
        };
        *slot = v.wrapping_sub(base.get(i).copied().unwrap_or(0));
        n += 1;
    }
    n
}

#[cfg(test)]
#[path = "host/unit/pfm_counter.rs"]
mod tests;
