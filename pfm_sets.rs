// SPDX-License-Identifier: GPL-2.0

//! Event sets and multiplexing, as perfmon2 had them: the set table of a
//! context, the round-robin switching machine and its exact time
//! bookkeeping; the scaling arithmetic a tool applies to a set's counts is
//! in `pfm_sets/scale.rs`.
//!
//! A context always has set 0. More sets (ids `1..PFM_MAX_SETS`) are
//! created and deleted while it is UNLOADED. Each set is its own register
//! image: PMD 0 of set 1 and PMD 0 of set 2 are two 64-bit values that take
//! turns on the same counter, which is what lets 8 events share 4 counters.
//! A register instance, the pair (`reg_set`, `reg_num`), belongs to exactly
//! one set.
//!
//! While the context counts, one set is active; its flags say when it
//! gives way to the next existing set by id, wrapping (perfmon2 v2.8's
//! round robin). Time is what the thread ran while the context counted,
//! fed by the caller ([`SetTable::charge`]): nothing expires while the
//! thread is off its CPU, and every nanosecond goes to exactly one set. A
//! context with one set pays nothing ([`SetTable::multiplexed`]).
//! Documentation/sets-design.md has the ABI and the kernel's hooks.
//!
//! No kernel code, no floats, no panics on user input, no 128-bit division
//! (the kernel's `__udivti3` panics): the host tests check it all.

use crate::abi::PFM_MAX_PMDS;

#[path = "pfm_sets/scale.rs"]
mod scale;
pub use scale::{running_share, scale, scale_u64};
#[path = "pfm_sets/define.rs"]
mod define;

/// Set ids are `0..PFM_MAX_SETS`.
///
/// 16: the existence mask is one `u16` (the next set is found in O(1), not
/// by perfmon2's list walk), a table is 1,584 bytes, and 16 sets of 4
/// counters (64 events, each counted 1/16 of the time) is past what
/// multiplexing estimates well. The ABI's `u16` ids leave room to grow.
pub const PFM_MAX_SETS: usize = 16;
/// Switch after `ovfl_switch_cnt` overflows of the PMDs in `switch_pmds`.
pub const PFM_SETFL_OVFL_SWITCH: u16 = 1 << 0;
/// Switch after `timeout` ns of the monitored thread's running time.
pub const PFM_SETFL_TIME_SWITCH: u16 = 1 << 1;
/// Every defined set flag.
pub const PFM_SETFL_MASK: u16 = PFM_SETFL_OVFL_SWITCH | PFM_SETFL_TIME_SWITCH;
/// The shortest timeout: shorter ones are raised to it (and the effective
/// value is returned, as perfmon2 returned its tick-rounded one). It bounds
/// the set-switch rate of a hardware context at 10,000 per second of
/// running, each an hrtimer expiry and a PMU reprogramming.
pub const PFM_SET_MIN_TIMEOUT_NS: u64 = 100_000;

/// Why a set operation is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetError {
    /// `EINVAL`: a set id at or above [`PFM_MAX_SETS`], a reserved flag bit
    /// or field, both switch flags (a set switches on one trigger, as in
    /// perfmon2), a timeout without `TIME_SWITCH` or `TIME_SWITCH`
    /// without one, an `OVFL_SWITCH` without a count or without implemented
    /// PMDs in `switch_pmds` (or a count or PMDs without the flag), the
    /// deletion of set 0 (every context has it: it is where a context
    /// without sets keeps its registers), or, at LOAD, an `OVFL_SWITCH` set
    /// none of whose `switch_pmds` was written in it (it could never
    /// switch).
    Invalid,
    /// `EINVAL` for the call; `PFM_REG_RETFL_NOSET` on a register element:
    /// the set does not exist.
    NoSet,
    /// `EBADFD`: sets are created and deleted only while UNLOADED, the
    /// state table's answer for every UNLOADED-only call (`SET_FLAGS`).
    /// While loaded every set is in the rotation, the active one included,
    /// so none may go; while UNLOADED no set is active.
    Loaded,
}

impl SetError {
    /// The errno the ioctl returns, as Linux numbers it.
    pub const fn errno(self) -> i32 {
        match self {
            SetError::Invalid | SetError::NoSet => 22, // EINVAL
            SetError::Loaded => 77,                    // EBADFD
        }
    }
}

/// A set's description, as `PFM_IOC_CREATE_SETS` takes it
/// (`struct pfm_setdesc`, Documentation/sets-design.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetDesc {
    /// `0..PFM_MAX_SETS`.
    pub id: u16,
    /// `PFM_SETFL_*`: at most one of the two.
    pub flags: u16,
    /// `OVFL_SWITCH`: overflows before the switch, at least 1; else 0.
    pub ovfl_switch_cnt: u32,
    /// `TIME_SWITCH`: ns of running time, at least 1 (out: the effective
    /// value, at least [`PFM_SET_MIN_TIMEOUT_NS`]); else 0.
    pub timeout: u64,
    /// `OVFL_SWITCH`: the PMDs whose overflows count; else 0.
    pub switch_pmds: u64,
    /// Must be 0.
    pub reserved: u64,
}

/// What ended a set's last activation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SwitchCause {
    /// It never ended (or only a LOAD or UNLOAD ended it).
    #[default]
    None,
    /// Its timeout.
    Time,
    /// Its `ovfl_switch_cnt`-th overflow.
    Overflow,
}

/// One set's configuration and bookkeeping.
#[derive(Clone, Copy, Debug, Default)]
struct Set {
    /// Its description, with the effective timeout.
    desc: SetDesc,
    used_pmcs: u64,
    used_pmds: u64,
    /// Activations since LOAD.
    runs: u64,
    /// ns the thread ran, the context counting, with this set active.
    running: u64,
    /// Overflows counted toward the switch in the current activation.
    ovfl_seen: u64,
    /// The `switch_pmds` that overflowed in the current activation.
    ovfl_pmds: u64,
    /// What ended the last activation, and the PMDs that caused it.
    last_cause: SwitchCause,
    last_pmds: u64,
}

impl Set {
    /// `TIME_SWITCH`.
    fn time(&self) -> bool {
        self.desc.flags & PFM_SETFL_TIME_SWITCH != 0
    }

    /// `OVFL_SWITCH`.
    fn ovfl(&self) -> bool {
        self.desc.flags & PFM_SETFL_OVFL_SWITCH != 0
    }
}

/// What GETINFO reports of one set (`struct pfm_setinfo`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetInfo {
    /// The set's description, with its effective timeout.
    pub desc: SetDesc,
    /// PMCs written in this set.
    pub used_pmcs: u64,
    /// PMDs written in this set.
    pub used_pmds: u64,
    /// Activations since LOAD (the set LOAD starts in counts 1).
    pub runs: u64,
    /// `TIME_SWITCH`: ns of running time before the set switches if it is
    /// the active one, its whole timeout (what its next activation gets)
    /// if not; 0 without `TIME_SWITCH`.
    pub time_left: u64,
    /// ns the thread ran while the context counted, since LOAD: the time
    /// the set's events could have been counted. The same for every set
    /// that existed at LOAD, active or not; 0 for a set created since.
    pub time_enabled: u64,
    /// ns of `time_enabled` during which this set was active, its events
    /// on the counters: perfmon2's time active (`set_act_duration`).
    pub time_running: u64,
    /// The PMDs whose overflows caused the switch away from this set
    /// (0 for a time switch).
    pub last_switch_pmds: u64,
    /// What caused that switch.
    pub last_cause: SwitchCause,
}

/// Where a delta that reaches the active set's timeout is cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Boundary {
    /// At the timeout, exactly: the next set gets the rest, and a long
    /// delta may rotate through several sets. For the soft model, whose
    /// task-clock is the time itself (its other events happen at points,
    /// which go to the set active after the charge).
    Split,
    /// At the end of the delta: a hardware PMU counted all of it under the
    /// old set's registers (until the switch, after the timer's latency).
    /// One switch at most; the next set starts a full timeout.
    WholeDelta,
}

/// The result of [`SetTable::charge`] or [`SetTable::overflowed`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Switched {
    /// The active set before.
    pub from: usize,
    /// The active set after: the set whose registers go on the PMU.
    pub to: usize,
    /// Switches made (0: `to == from`, nothing to reprogram).
    pub switches: u64,
}

/// A context's event sets.
#[derive(Clone, Debug, Default)]
pub struct SetTable {
    sets: [Set; PFM_MAX_SETS],
    /// Bit n: set n exists. Bit 0 always.
    exists: u16,
    /// Bit n: set n existed at the last LOAD (its `time_enabled` runs).
    at_load: u16,
    /// The active set (while UNLOADED: where the last monitoring stopped).
    active: u8,
    /// Loaded: the sets are fixed.
    loaded: bool,
    /// More than one set at the last LOAD: the caller charges time.
    tracking: bool,
    /// The active set's running time left before its timeout.
    left: u64,
    /// ns charged since LOAD: every set's `time_enabled`.
    total: u64,
    /// Switches since LOAD.
    switches: u64,
    /// The sum of the timeouts if every set has `TIME_SWITCH`, else 0: a
    /// delta this long rotates through every set, computed in one step.
    round: u64,
    /// The PMDs the model implements.
    impl_pmds: u64,
}

/// The next set after `id` in `exists`, by id, wrapping.
const fn next_in(exists: u16, id: u8) -> u8 {
    let above = (exists as u32) & !((2u32 << (id as u32 & 15)) - 1);
    if above != 0 {
        above.trailing_zeros() as u8
    } else {
        // Set 0 always exists, so the mask is never empty.
        (exists as u32 | 1).trailing_zeros() as u8
    }
}

impl SetTable {
    /// A context's table: set 0 alone, no flags. `impl_pmds` is the
    /// model's implemented PMDs (what `switch_pmds` may name).
    pub fn new(impl_pmds: u64) -> Self {
        Self {
            exists: 1,
            impl_pmds: impl_pmds & ((1u64 << PFM_MAX_PMDS) - 1),
            ..Self::default()
        }
    }

    /// The caller's fast path, O(1): false when the context was loaded
    /// with one set, which then pays nothing (no charge, no timer).
    #[inline(always)]
    pub fn multiplexed(&self) -> bool {
        self.tracking
    }

    /// The active set: whose registers are on the PMU while counting.
    pub fn active(&self) -> usize {
        self.active as usize
    }

    /// Bit n: set n exists.
    pub fn exists_mask(&self) -> u16 {
        self.exists
    }

    /// Switches since LOAD.
    pub fn switches(&self) -> u64 {
        self.switches
    }

    /// Whether [`SetTable::load`] of `start` would succeed; changes
    /// nothing (a LOAD asks before it takes what it cannot give back).
    pub fn check_load(&self, start: u16) -> Result<(), SetError> {
        if self.loaded {
            return Err(SetError::Loaded);
        }
        self.set_index(start)?;
        for i in 0..PFM_MAX_SETS {
            let s = &self.sets[i];
            if self.exists & (1 << i) != 0 && s.ovfl() && s.desc.switch_pmds & s.used_pmds == 0 {
                return Err(SetError::Invalid);
            }
        }
        Ok(())
    }

    /// `PFM_IOC_LOAD`: monitoring starts in set `start` with all
    /// bookkeeping at zero and `start`'s first run.
    pub fn load(&mut self, start: u16) -> Result<(), SetError> {
        self.check_load(start)?;
        let start = self.set_index(start)?;
        let mut round = 0u64;
        let mut all_time = true;
        for i in 0..PFM_MAX_SETS {
            if self.exists & (1 << i) == 0 {
                continue;
            }
            let s = &self.sets[i];
            all_time &= s.time();
            round = round.saturating_add(s.desc.timeout);
        }
        for s in self.sets.iter_mut() {
            s.runs = 0;
            s.running = 0;
            s.ovfl_seen = 0;
            s.ovfl_pmds = 0;
            s.last_cause = SwitchCause::None;
            s.last_pmds = 0;
        }
        // A saturated sum is longer than any delta: no bulk rotation.
        self.round = if all_time && round != u64::MAX {
            round
        } else {
            0
        };
        self.tracking = self.exists.count_ones() > 1;
        self.at_load = self.exists;
        self.total = 0;
        self.switches = 0;
        self.active = start as u8;
        self.sets[start].runs = 1;
        self.left = self.sets[start].desc.timeout;
        self.loaded = true;
        Ok(())
    }

    /// `PFM_IOC_UNLOAD` (or the thread's end): the bookkeeping stays
    /// readable, the sets may change again.
    pub fn unload(&mut self) {
        self.loaded = false;
    }

    /// Hardware models: the active set's time left, for the hrtimer armed
    /// at switch-in (and re-armed after a switch); `None`: no timer.
    pub fn timer_ns(&self) -> Option<u64> {
        let s = &self.sets[self.active as usize];
        (self.loaded && self.tracking && s.time()).then_some(self.left)
    }

    /// Charges `ns` to set `i`, telling the caller.
    fn run<F: FnMut(usize, u64)>(&mut self, i: usize, ns: u64, seg: &mut F) {
        if ns != 0 {
            self.sets[i].running = self.sets[i].running.saturating_add(ns);
            seg(i, ns);
        }
    }

    /// Ends the active set's activation and starts the next set's.
    fn switch(&mut self, cause: SwitchCause) {
        let from = self.active as usize;
        let s = &mut self.sets[from];
        s.last_cause = cause;
        s.last_pmds = match cause {
            SwitchCause::Overflow => s.ovfl_pmds,
            _ => 0,
        };
        let to = next_in(self.exists, self.active) as usize;
        let t = &mut self.sets[to];
        t.runs = t.runs.saturating_add(1);
        t.ovfl_seen = 0;
        t.ovfl_pmds = 0;
        self.left = t.desc.timeout;
        self.active = to as u8;
        self.switches = self.switches.saturating_add(1);
    }

    /// The thread ran `ran` ns while the context counted: charges them to
    /// the active set (and to every set's `time_enabled`), switching at
    /// each timeout reached, where `boundary` says. `seg(set, ns)` is
    /// called for each set's share, in order, so the caller advances that
    /// set's time-driven counters by exactly it; events at a point (a
    /// switch-out, a migration) belong to the set active afterwards.
    ///
    /// Whatever `ran`, the work is bounded by twice the number of sets:
    /// whole rounds through every set are charged in one step.
    pub fn charge<F: FnMut(usize, u64)>(
        &mut self,
        ran: u64,
        boundary: Boundary,
        mut seg: F,
    ) -> Switched {
        let from = self.active as usize;
        let before = self.switches;
        self.total = self.total.saturating_add(ran);
        let mut rem = ran;
        let mut rounds_done = false;
        loop {
            let a = self.active as usize;
            if !self.sets[a].time() || rem < self.left {
                if self.sets[a].time() {
                    self.left -= rem;
                }
                self.run(a, rem, &mut seg);
                break;
            }
            // The timeout is reached within this delta.
            let used = match boundary {
                Boundary::Split => self.left,
                Boundary::WholeDelta => rem,
            };
            self.run(a, used, &mut seg);
            rem -= used;
            self.switch(SwitchCause::Time);
            if rem == 0 {
                break;
            }
            if !rounds_done && self.round != 0 && rem >= self.round {
                rounds_done = true;
                rem = self.whole_rounds(rem, &mut seg);
            }
        }
        Switched {
            from,
            to: self.active as usize,
            switches: self.switches.wrapping_sub(before),
        }
    }

    /// Charges as many whole rounds through every set as `rem` holds,
    /// starting with the active set at the start of its activation (every
    /// set has `TIME_SWITCH`); returns what is left. The active set is the
    /// same after whole rounds.
    fn whole_rounds<F: FnMut(usize, u64)>(&mut self, rem: u64, seg: &mut F) -> u64 {
        // `round` is the sum of the sets' timeouts, each at least the
        // minimum, so never 0; `checked_div` keeps the panic path out.
        let k = match rem.checked_div(self.round) {
            Some(k) => k,
            None => return rem,
        };
        let mut i = self.active;
        loop {
            let s = &mut self.sets[i as usize];
            // k * timeout <= k * round <= rem: no overflow.
            let ns = k.saturating_mul(s.desc.timeout);
            s.runs = s.runs.saturating_add(k);
            s.last_cause = SwitchCause::Time;
            s.last_pmds = 0;
            self.run(i as usize, ns, seg);
            i = next_in(self.exists, i);
            if i == self.active {
                break;
            }
        }
        let n = self.exists.count_ones() as u64;
        self.switches = self.switches.saturating_add(k.saturating_mul(n));
        rem - k * self.round
    }

    /// Overflows of set `set`'s PMDs in one fold: `counts[pmd]` 64-bit
    /// overflows each. Those of the active set's `switch_pmds` count
    /// toward its `ovfl_switch_cnt`; the one that reaches it switches to
    /// the next set, whose count starts from 0. Overflows past the count in
    /// the same fold happened in the old set: they stay in its PMDs and do
    /// not carry over. `None`: no switch.
    pub fn overflowed(&mut self, set: usize, counts: &[u64]) -> Option<Switched> {
        let a = self.active as usize;
        if !self.loaded || set != a {
            return None;
        }
        let s = &mut self.sets[a];
        if !s.ovfl() {
            return None;
        }
        let mut n = 0u64;
        let mut m = s.desc.switch_pmds & s.used_pmds;
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            let c = counts.get(i).copied().unwrap_or(0);
            if c != 0 {
                n = n.saturating_add(c);
                s.ovfl_pmds |= 1 << i;
            }
        }
        s.ovfl_seen = s.ovfl_seen.saturating_add(n);
        if n == 0 || s.ovfl_seen < s.desc.ovfl_switch_cnt as u64 {
            return None;
        }
        self.switch(SwitchCause::Overflow);
        Some(Switched {
            from: a,
            to: self.active as usize,
            switches: 1,
        })
    }

    /// `PFM_IOC_GETINFO_SETS` for set `id`. `ctx_running` is the context's
    /// `time_running`: a context loaded with one set charged nothing here,
    /// and its set's time is the context's.
    pub fn info(&self, id: u16, ctx_running: u64) -> Result<SetInfo, SetError> {
        let i = self.set_index(id)?;
        let s = &self.sets[i];
        let total = if self.tracking {
            self.total
        } else {
            ctx_running
        };
        let (enabled, running) = match (self.at_load & (1 << i) != 0, self.tracking) {
            (false, _) => (0, 0),
            (true, true) => (total, s.running),
            (true, false) => (total, total),
        };
        let time_left = match s.time() {
            true if i == self.active as usize && self.tracking => self.left,
            true => s.desc.timeout,
            false => 0,
        };
        Ok(SetInfo {
            desc: s.desc,
            used_pmcs: s.used_pmcs,
            used_pmds: s.used_pmds,
            runs: s.runs,
            time_left,
            time_enabled: enabled,
            time_running: running,
            last_switch_pmds: s.last_pmds,
            last_cause: s.last_cause,
        })
    }
}
