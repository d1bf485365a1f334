//! Event sets for `pfm stat`: perfmon2's multiplexing, as `perf stat` does
//! it when asked for more events than counters.
//!
//! What the command line says (`-e` with `{a,b}` groups, `--sets`,
//! `--switch`, `--switch-on-overflow` with `-c`), how the events go into
//! sets ([`plan`]: each set filled up to the counters, a group never
//! split), where each event is counted ([`Layout`]: its set and PMD), the
//! calls that program and read a context with sets, and what the table
//! shows of a multiplexed count: the estimate `count × time_enabled /
//! time_running` and the share of the time the event was counted, both
//! with the module's own exact integer arithmetic
//! ([`perfmon::scale_u64`], [`perfmon::running_share`]).

use perfmon::abi::{
    PfmPmc, PfmPmd, PfmSetdesc, PFM_MAX_SETS, PFM_SETFL_OVFL_SWITCH, PFM_SETFL_TIME_SWITCH,
    PFM_SET_MIN_TIMEOUT,
};
use perfmon::{Context, Counts};

/// The default time switch: 4 ms of the thread's running time.
///
/// perf rotates multiplexed events every `perf_event_mux_interval_ms`,
/// whose default is one scheduler tick (`PERF_CPU_HRTIMER`, `1000 / HZ`
/// ms in kernel/events/core.c): 4 ms with `HZ=250`, the x86 default of
/// Debian's kernels and of the guest's. 4 ms is the same rotation rate;
/// perfmon's timeout counts the thread's running time, perf's the wall
/// clock of the CPU, so a thread that sleeps rotates less often here, and
/// every set's share of the time it ran stays fair.
pub const DEFAULT_SWITCH_NS: u64 = 4_000_000;

/// How the sets give way to each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Switch {
    /// After this many ns of the thread's running time (`--switch`).
    Time(u64),
    /// After `count` overflows of period `period` of each set's first
    /// event (`--switch-on-overflow COUNT -c PERIOD`), i.e. after the
    /// first event occurred `count × period` times in the set. The
    /// trigger is a copy of that event on a counter of its own, so every
    /// count reported stays exact.
    Overflow {
        /// Overflows before the switch.
        count: u32,
        /// The trigger's period: it overflows every `period` events.
        period: u64,
    },
}

impl Switch {
    /// Counters a set gives to its events: all of them, or all but the
    /// trigger's.
    pub fn capacity(self, counters: usize) -> usize {
        match self {
            Switch::Time(_) => counters,
            Switch::Overflow { .. } => counters.saturating_sub(1),
        }
    }

    /// As the table's note says it: `every 4 ms`, `after 2 overflows of
    /// period 5`.
    pub fn text(self) -> String {
        match self {
            Switch::Time(ns) => format!("every {} of running time", duration_text(ns)),
            Switch::Overflow { count, period } => {
                let s = if count == 1 { "" } else { "s" };
                format!("after {count} overflow{s} of period {period} of each set's first event")
            }
        }
    }
}

/// ns as the shortest exact unit: `4ms`, `100us`, `1500us`, `7ns`.
pub fn duration_text(ns: u64) -> String {
    for (unit, scale) in [("s", 1_000_000_000), ("ms", 1_000_000), ("us", 1_000)] {
        if ns >= scale && ns % scale == 0 {
            return format!("{}{unit}", ns / scale);
        }
    }
    format!("{ns}ns")
}

/// `--switch TIME`: a whole number with a unit, `ns`, `us`, `ms` or `s`
/// (`10ms`), at least the module's minimum, 100 us (shorter timeouts would
/// be raised to it: pfm says so instead).
pub fn parse_switch_time(v: &str) -> Result<u64, String> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let scale: u64 = match unit.trim() {
        "ns" => 1,
        "us" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "" if !num.is_empty() => {
            return Err(format!("'{v}' needs a unit: ns, us, ms or s (e.g. {v}ms)"))
        }
        _ => {
            return Err(format!(
                "'{v}' is not a time: a whole number and ns, us, ms or s (e.g. 10ms)"
            ))
        }
    };
    let n: u64 = num.parse().map_err(|_| {
        format!("'{v}' is not a time: a whole number and ns, us, ms or s (e.g. 10ms)")
    })?;
    let ns = n
        .checked_mul(scale)
        .ok_or_else(|| format!("'{v}' is too long (at most {} s)", u64::MAX / 1_000_000_000))?;
    if ns < PFM_SET_MIN_TIMEOUT {
        return Err(format!(
            "'{v}' is shorter than the module's shortest set switch, {}",
            duration_text(PFM_SET_MIN_TIMEOUT)
        ));
    }
    Ok(ns)
}

/// The events of `-e`, split at commas by clap, as groups: `{a,b}` is one
/// group (counted together, so in one set), every other event a group of
/// its own. `{` and `}` may only start and end a group; groups do not
/// nest and take no modifiers.
pub fn parse_groups(tokens: &[String]) -> Result<Vec<Vec<String>>, String> {
    let mut groups: Vec<Vec<String>> = Vec::new();
    let mut open: Option<Vec<String>> = None;
    for tok in tokens.iter().map(|t| t.trim()).filter(|t| !t.is_empty()) {
        let starts = tok.starts_with('{');
        let name = tok.strip_prefix('{').unwrap_or(tok);
        let ends = name.ends_with('}');
        let name = name.strip_suffix('}').unwrap_or(name).trim();
        if name.contains(['{', '}']) {
            return Err(format!(
                "'{tok}': braces only open and close a group, as in -e '{{a,b}},c' \
                 (groups do not nest and take no modifiers)"
            ));
        }
        match (&mut open, starts) {
            (Some(_), true) => {
                return Err(format!(
                    "'{tok}': groups do not nest (a '}}' is missing before it)"
                ))
            }
            (Some(g), false) => {
                if !name.is_empty() {
                    g.push(name.to_string());
                }
                if ends {
                    let g = open.take().unwrap_or_default();
                    if g.is_empty() {
                        return Err("an empty group '{}'".into());
                    }
                    groups.push(g);
                }
            }
            (None, true) => {
                let g: Vec<String> = if name.is_empty() {
                    Vec::new()
                } else {
                    vec![name.to_string()]
                };
                if ends {
                    if g.is_empty() {
                        return Err("an empty group '{}'".into());
                    }
                    groups.push(g);
                } else {
                    open = Some(g);
                }
            }
            (None, false) if ends => {
                return Err(format!("'{tok}': a '}}' without its '{{'"));
            }
            (None, false) => groups.push(vec![name.to_string()]),
        }
    }
    if let Some(g) = open {
        return Err(format!(
            "the group '{{{}' is not closed (a '}}' is missing)",
            g.join(",")
        ));
    }
    Ok(groups)
}

/// `--sets SETS` (repeatable): sets separated by `:`, events in a set by
/// `,` (`cs,task-clock:migrations,task-clock`). Each occurrence adds its
/// sets after the previous ones'.
pub fn parse_sets(values: &[String]) -> Result<Vec<Vec<String>>, String> {
    let mut sets = Vec::new();
    for v in values {
        for set in v.split(':') {
            if set.contains(['{', '}']) {
                return Err(format!(
                    "--sets '{v}': a set is counted together already; braces group events of -e"
                ));
            }
            let names: Vec<String> = set.split(',').map(|n| n.trim().to_string()).collect();
            if names.iter().any(String::is_empty) {
                return Err(format!(
                    "--sets '{v}': an empty set or event name (sets are separated by ':', \
                     events by ',')"
                ));
            }
            sets.push(names);
        }
    }
    if sets.len() > PFM_MAX_SETS {
        return Err(format!(
            "--sets gives {} sets; the module has at most {PFM_MAX_SETS}",
            sets.len()
        ));
    }
    Ok(sets)
}

/// Puts groups of `sizes` events into sets of `capacity` counters: each
/// group goes into the first set with room for all of it (a new set if
/// none has), so no group is split, the sets are as few as first fit
/// makes them, and events keep their order within a set. Returns each
/// set's groups, or the index of a group larger than a set.
pub fn assign(sizes: &[usize], capacity: usize) -> Result<Vec<Vec<usize>>, usize> {
    let mut sets: Vec<(usize, Vec<usize>)> = Vec::new();
    for (g, &n) in sizes.iter().enumerate() {
        if n > capacity {
            return Err(g);
        }
        match sets.iter_mut().find(|(used, _)| used + n <= capacity) {
            Some((used, members)) => {
                *used += n;
                members.push(g);
            }
            None => sets.push((n, vec![g])),
        }
    }
    Ok(sets.into_iter().map(|(_, m)| m).collect())
}

/// The sets to program: each set's events, as indices into the event list
/// (`-e` order flattened, or `--sets` order). One set: no multiplexing.
///
/// `groups` are `-e`'s groups (`explicit` false: packed by [`assign`]
/// when they do not all fit the counters) or `--sets`'s sets (`explicit`
/// true: as given). `counters` is the model's counters that take events.
pub fn plan(
    groups: &[Vec<String>],
    explicit: bool,
    counters: usize,
    switch: Switch,
) -> Result<Vec<Vec<usize>>, String> {
    let total: usize = groups.iter().map(Vec::len).sum();
    let mut first = Vec::with_capacity(groups.len());
    let mut at = 0;
    for g in groups {
        first.push(at);
        at += g.len();
    }
    let indices = |g: usize| (first[g]..first[g] + groups[g].len()).collect::<Vec<usize>>();
    if !explicit && total <= counters {
        return Ok(vec![(0..total).collect()]);
    }
    if explicit && groups.len() == 1 {
        return match groups[0].len() <= counters {
            true => Ok(vec![indices(0)]),
            false => Err(format!(
                "--sets: the set '{}' has {} events and the model {counters} counters",
                groups[0].join(","),
                groups[0].len()
            )),
        };
    }
    let capacity = switch.capacity(counters);
    let trigger = match switch {
        Switch::Overflow { .. } => " (one counter per set is the switch trigger)",
        Switch::Time(_) => "",
    };
    if capacity == 0 {
        return Err(format!(
            "--switch-on-overflow needs a counter for each set's trigger besides its events, \
             and the model has {counters}"
        ));
    }
    let sets: Vec<Vec<usize>> = if explicit {
        for g in groups {
            if g.len() > capacity {
                return Err(format!(
                    "--sets: the set '{}' has {} events and a set holds {capacity}{trigger}",
                    g.join(","),
                    g.len()
                ));
            }
        }
        (0..groups.len()).map(indices).collect()
    } else {
        let sizes: Vec<usize> = groups.iter().map(Vec::len).collect();
        let packed = assign(&sizes, capacity).map_err(|g| {
            format!(
                "the group {{{}}} has {} events and a set holds {capacity}{trigger}: \
                 a group is counted together, on the counters of one set",
                groups[g].join(","),
                groups[g].len()
            )
        })?;
        packed
            .iter()
            .map(|set| set.iter().flat_map(|&g| indices(g)).collect())
            .collect()
    };
    if sets.len() > PFM_MAX_SETS {
        return Err(format!(
            "{total} events need {} sets of {capacity} counters{trigger}; \
             the module has at most {PFM_MAX_SETS} sets",
            sets.len()
        ));
    }
    Ok(sets)
}

/// Where an event is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Its set.
    pub set: u16,
    /// Its PMD (and PMC) in that set.
    pub pmd: u16,
}

/// One set's registers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetLayout {
    /// Its events (indices into the event list), in PMD order.
    pub events: Vec<usize>,
    /// Their PMDs, ascending.
    pub pmds: Vec<u16>,
    /// `--switch-on-overflow`: the PMD of the trigger, a copy of
    /// `events[0]` whose overflows switch the set.
    pub trigger: Option<u16>,
}

impl SetLayout {
    /// The PMDs of its events, as a mask.
    pub fn mask(&self) -> u64 {
        self.pmds.iter().fold(0, |m, &p| m | 1 << p)
    }
}

/// The registers of a multiplexed context: set `i` is event set `i`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The sets, by id.
    pub sets: Vec<SetLayout>,
    /// Each event's set and PMD, in event order.
    pub slots: Vec<Slot>,
    /// How the sets switch.
    pub switch: Switch,
    /// The counters the model has for events.
    pub counters: usize,
}

impl Layout {
    /// The layout of `sets` (from [`plan`]) on the model's event
    /// `counters` (ascending PMD numbers): in each set, its events on the
    /// first counters, the trigger (if any) on the next.
    pub fn new(sets: &[Vec<usize>], counters: &[u16], switch: Switch) -> Layout {
        let events = sets.iter().map(Vec::len).sum();
        let mut slots = vec![Slot { set: 0, pmd: 0 }; events];
        let mut out = Vec::with_capacity(sets.len());
        for (id, set) in sets.iter().enumerate() {
            let pmds: Vec<u16> = counters.iter().copied().take(set.len()).collect();
            for (&e, &pmd) in set.iter().zip(&pmds) {
                slots[e] = Slot {
                    set: id as u16,
                    pmd,
                };
            }
            let trigger = match switch {
                Switch::Overflow { .. } => counters.get(set.len()).copied(),
                Switch::Time(_) => None,
            };
            out.push(SetLayout {
                events: set.clone(),
                pmds,
                trigger,
            });
        }
        Layout {
            sets: out,
            slots,
            switch,
            counters: counters.len(),
        }
    }

    /// The sets' descriptions for `PFM_IOC_CREATE_SETS` (set 0 included:
    /// creating it sets its flags).
    pub fn descs(&self) -> Vec<PfmSetdesc> {
        self.sets
            .iter()
            .enumerate()
            .map(|(id, s)| match self.switch {
                Switch::Time(ns) => PfmSetdesc {
                    set_id: id as u16,
                    set_flags: PFM_SETFL_TIME_SWITCH,
                    set_timeout: ns,
                    ..Default::default()
                },
                Switch::Overflow { count, .. } => PfmSetdesc {
                    set_id: id as u16,
                    set_flags: PFM_SETFL_OVFL_SWITCH,
                    set_ovfl_switch_cnt: count,
                    set_switch_pmds: s.trigger.map_or(0, |p| 1 << p),
                    ..Default::default()
                },
            })
            .collect()
    }

    /// The PMCs of every set, events' then the trigger's, for the events'
    /// PMC values `codes`, and for each element the event it selects.
    pub fn pmcs(&self, codes: &[u64]) -> (Vec<PfmPmc>, Vec<usize>) {
        let mut regs = Vec::new();
        let mut owners = Vec::new();
        for (id, s) in self.sets.iter().enumerate() {
            let trigger = s.trigger.zip(s.events.first().copied());
            for (pmd, e) in s
                .pmds
                .iter()
                .copied()
                .zip(s.events.iter().copied())
                .chain(trigger)
            {
                regs.push(PfmPmc {
                    reg_num: pmd,
                    reg_set: id as u16,
                    reg_value: codes.get(e).copied().unwrap_or(0),
                    ..Default::default()
                });
                owners.push(e);
            }
        }
        (regs, owners)
    }

    /// The PMDs of every set: the events' from 0; the trigger's from
    /// `-period`, reloaded to it after each overflow (its short reset; its
    /// long reset too, though nothing notifies).
    pub fn pmds(&self) -> Vec<PfmPmd> {
        let mut regs = Vec::new();
        for (id, s) in self.sets.iter().enumerate() {
            for &pmd in &s.pmds {
                regs.push(PfmPmd {
                    reg_num: pmd,
                    reg_set: id as u16,
                    ..Default::default()
                });
            }
            if let (Some(pmd), Switch::Overflow { period, .. }) = (s.trigger, self.switch) {
                let start = period.wrapping_neg();
                regs.push(PfmPmd {
                    reg_num: pmd,
                    reg_set: id as u16,
                    reg_value: start,
                    reg_short_reset: start,
                    reg_long_reset: start,
                    ..Default::default()
                });
            }
        }
        regs
    }

    /// A reading in event order from one `PFM_IOC_READ_VALUES` per set
    /// (`per_set[i]`: set i's values in PMD order and its times) and the
    /// context's times (`ctx`).
    pub fn assemble(&self, per_set: &[Counts], ctx: (u64, u64)) -> Reading {
        let n = self.slots.len();
        let mut values = vec![0; n];
        let mut times = vec![(0, 0); n];
        for (s, c) in self.sets.iter().zip(per_set) {
            // `pmds` ascend, so the k-th value is the k-th event's.
            for (&e, &v) in s.events.iter().zip(&c.values) {
                values[e] = v;
                times[e] = (c.time_enabled, c.time_running);
            }
        }
        Reading {
            counts: Counts {
                values,
                time_enabled: ctx.0,
                time_running: ctx.1,
            },
            times,
        }
    }

    /// Programs the sets on `ctx` (UNLOADED): creates them with their
    /// switch, writes every set's PMCs and PMDs. A PMC the module refuses
    /// is returned as the index of its event.
    pub fn program(&self, ctx: &Context, codes: &[u64]) -> Result<(), ProgramError> {
        let mut descs = self.descs();
        ctx.create_sets(&mut descs).map_err(ProgramError::Sets)?;
        let (mut pmcs, owners) = self.pmcs(codes);
        match ctx.write_pmcs(&mut pmcs) {
            Ok(()) => {}
            Err(perfmon::Error::BadRegister { index, .. }) if index < owners.len() => {
                return Err(ProgramError::Event(owners[index]))
            }
            Err(e) => return Err(ProgramError::Other(e)),
        }
        let mut pmds = self.pmds();
        ctx.write_pmds(&mut pmds).map_err(ProgramError::Other)
    }

    /// Reads every set (`PFM_IOC_READ_VALUES` with `PFM_VALFL_SET`) and
    /// the context's times (set 0's values without it).
    pub fn read(&self, ctx: &Context) -> perfmon::Result<Reading> {
        let mut per_set = Vec::with_capacity(self.sets.len());
        for (id, s) in self.sets.iter().enumerate() {
            per_set.push(ctx.read_set_values(id as u16, s.mask())?);
        }
        let c = ctx.read_values(self.sets.first().map_or(1, SetLayout::mask))?;
        Ok(self.assemble(&per_set, (c.time_enabled, c.time_running)))
    }
}

/// Why [`Layout::program`] failed.
#[derive(Debug)]
pub enum ProgramError {
    /// `PFM_IOC_CREATE_SETS` (e.g. `EOPNOTSUPP`: a model without sets).
    Sets(perfmon::Error),
    /// The module refused this event's PMC value.
    Event(usize),
    /// Anything else.
    Other(perfmon::Error),
}

/// One read of every event, in event order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reading {
    /// The values and the context's times.
    pub counts: Counts,
    /// With sets: each event's set's `(time_enabled, time_running)`;
    /// empty without sets.
    pub times: Vec<(u64, u64)>,
}

impl Reading {
    /// A reading of nothing yet, for `events` events (with sets: `sets`).
    pub fn zero(events: usize, sets: bool) -> Self {
        Reading {
            counts: Counts {
                values: vec![0; events],
                ..Default::default()
            },
            times: if sets {
                vec![(0, 0); events]
            } else {
                Vec::new()
            },
        }
    }

    /// `self` minus `prev`, per value and per time (wrapping: 64-bit
    /// virtual counters).
    pub fn delta(&self, prev: &Reading) -> Reading {
        let sub = |a: u64, b: u64| a.wrapping_sub(b);
        Reading {
            counts: Counts {
                values: self
                    .counts
                    .values
                    .iter()
                    .zip(&prev.counts.values)
                    .map(|(a, b)| sub(*a, *b))
                    .collect(),
                time_enabled: sub(self.counts.time_enabled, prev.counts.time_enabled),
                time_running: sub(self.counts.time_running, prev.counts.time_running),
            },
            times: self
                .times
                .iter()
                .zip(&prev.times)
                .map(|(a, b)| (sub(a.0, b.0), sub(a.1, b.1)))
                .collect(),
        }
    }
}

/// The share of the time counted, as the table prints it: hundredths of a
/// percent from [`perfmon::running_share`] (rounded to nearest, halves
/// up), `66.67`. `None` if never enabled.
pub fn percent_text(running: u64, enabled: u64) -> Option<String> {
    perfmon::running_share(running, enabled).map(|h| format!("{}.{:02}", h / 100, h % 100))
}

#[cfg(test)]
mod tests;
