//! The PMU model the module drives, as `PFM_IOC_GET_INFO` describes it, and
//! events by name.

use crate::abi::{
    PfmInfo, PFM_CORE_TYPE_ATOM, PFM_CORE_TYPE_CORE, PFM_CORE_TYPE_OTHER, PFM_MAX_EVENTS,
    PFM_MAX_PMCS,
};
use crate::error::{Error, Result};

/// An event of the PMU model: what to write into a counter's PMC.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Event {
    /// The name, e.g. `context-switches` (`r<hex>` for a raw code).
    pub name: String,
    /// The PMC value that selects it.
    pub code: u64,
}

/// What an event counts, as far as derived metrics need to know.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Generic {
    /// Nanoseconds the thread ran (soft).
    TaskClock,
    /// Switch-outs of the thread (soft).
    ContextSwitches,
    /// Switch-ins on another CPU (soft).
    CpuMigrations,
    /// Core cycles (hardware).
    Cycles,
    /// Instructions retired (hardware).
    Instructions,
    /// Branch instructions retired (hardware).
    Branches,
    /// Mispredicted branches retired (hardware).
    BranchMisses,
}

/// Aliases that perf users type, and the event names they stand for: the
/// names of perf's generic events whose encoding is the module's event
/// (Linux's `intel_perfmon_event_map`: cache-references 4F2EH and
/// cache-misses 412EH are the architectural LLC events, bus-cycles 013CH
/// the architectural reference cycles; `cpu-clock` of one thread counts
/// its running time, as task-clock does). An alias is used only where the
/// model has the event it stands for.
const ALIASES: &[(&str, &str)] = &[
    ("cs", "context-switches"),
    ("migrations", "cpu-migrations"),
    ("cpu-clock", "task-clock"),
    ("faults", "page-faults"),
    ("cycles", "cpu-cycles"),
    ("branch-instructions", "branches"),
    ("cache-references", "llc-references"),
    ("cache-misses", "llc-misses"),
    ("bus-cycles", "ref-cycles"),
];

/// One-line descriptions of the events the module's models are known to
/// have (shown by `pfm list`).
pub fn describe(event: &str) -> &'static str {
    match event {
        "task-clock" => "nanoseconds the thread ran on a CPU",
        "context-switches" => "times the thread was switched out",
        "cpu-migrations" => "times the thread resumed on another CPU than the last one",
        "page-faults" => "page faults the thread took, minor and major (getrusage's)",
        "minor-faults" => "page faults served without I/O (ru_minflt)",
        "major-faults" => "page faults that waited for I/O (ru_majflt)",
        _ => "",
    }
}

/// The aliases of an event name (e.g. `cs` for `context-switches`).
pub fn aliases_of(event: &str) -> Vec<&'static str> {
    ALIASES
        .iter()
        .filter(|(_, target)| *target == event)
        .map(|(a, _)| *a)
        .collect()
}

/// The PMU model the module drives, from `PFM_IOC_GET_INFO`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PmuInfo {
    /// ABI version the module speaks.
    pub abi_version: u32,
    /// Model name: `soft`, `intel_arch`, `amd64`.
    pub model: String,
    /// PMCs implemented.
    pub num_pmcs: u16,
    /// PMDs implemented.
    pub num_pmds: u16,
    /// Bits of the (hardware or soft) counters.
    pub counter_width: u16,
    /// Overflow interrupt vector on CPU 0, 0 if none.
    pub vector: u32,
    /// Bit n: PMC n exists.
    pub impl_pmcs: u64,
    /// Bit n: PMD n exists.
    pub impl_pmds: u64,
    /// Hybrid Intel: the `PFM_CORE_TYPE_*` bits of the CPUs' core types
    /// (the model is what every type has); 0 if not hybrid.
    pub core_types: u32,
    /// For each PMC, the bits its value must leave zero.
    pub pmc_rsvd_mask: [u64; PFM_MAX_PMCS],
    /// The model's events.
    pub events: Vec<Event>,
}

/// A NUL-terminated byte array as a string (lossy, up to the first NUL).
pub(crate) fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

impl PmuInfo {
    /// Decodes the raw `struct pfm_info`.
    pub fn from_raw(raw: &PfmInfo) -> Self {
        let n = usize::from(raw.num_events).min(PFM_MAX_EVENTS);
        let events = raw.events[..n]
            .iter()
            .map(|e| Event {
                name: c_string(&e.name),
                code: e.code,
            })
            .filter(|e| !e.name.is_empty())
            .collect();
        PmuInfo {
            abi_version: raw.abi_version,
            model: c_string(&raw.model),
            num_pmcs: raw.num_pmcs,
            num_pmds: raw.num_pmds,
            counter_width: raw.counter_width,
            vector: raw.vector,
            impl_pmcs: raw.impl_pmcs,
            impl_pmds: raw.impl_pmds,
            core_types: raw.core_types,
            pmc_rsvd_mask: raw.pmc_rsvd_mask,
            events,
        }
    }

    /// The names of the core types in [`PmuInfo::core_types`] (`P-core`,
    /// `E-core`, `other`), empty on a part that is not hybrid.
    pub fn core_type_names(&self) -> Vec<&'static str> {
        [
            (PFM_CORE_TYPE_CORE, "P-core"),
            (PFM_CORE_TYPE_ATOM, "E-core"),
            (PFM_CORE_TYPE_OTHER, "other"),
        ]
        .iter()
        .filter(|(bit, _)| self.core_types & bit != 0)
        .map(|&(_, name)| name)
        .collect()
    }

    /// The counters that can be programmed: n such that PMC n and PMD n
    /// both exist (PMC n selects what PMD n counts), in increasing order.
    pub fn counters(&self) -> Vec<u16> {
        (0..64u16)
            .filter(|&n| (self.impl_pmcs & self.impl_pmds) >> n & 1 == 1)
            .collect()
    }

    /// The counters an event code can be programmed on: every counter of
    /// the soft and AMD models; on Intel (`intel_arch*`) the general-purpose
    /// ones only, since PMC 16 is IA32_FIXED_CTR_CTRL, which takes fixed
    /// counter enables rather than an event select.
    pub fn event_counters(&self) -> Vec<u16> {
        let intel = self.model.starts_with("intel_arch");
        self.counters()
            .into_iter()
            .filter(|&n| !intel || n < 16)
            .collect()
    }

    /// Whether this is a hardware model (its PMCs take the CPU's event
    /// select encoding) rather than the soft one.
    pub fn is_hardware(&self) -> bool {
        self.model.starts_with("intel_arch") || self.model.starts_with("amd64")
    }

    /// What the PMC value `code` counts, where derived metrics need to know
    /// (IPC, branch-miss rate, CPUs utilized, rates): the soft model's
    /// codes; on the hardware models the architectural encodings of core
    /// cycles, instructions retired, branches and mispredicted branches,
    /// with no edge, invert or counter-mask bits (which count something
    /// else). The privilege bits do not matter.
    pub fn generic(&self, code: u64) -> Option<Generic> {
        use Generic::*;
        if self.model == "soft" {
            return match code {
                1 => Some(TaskClock),
                2 => Some(ContextSwitches),
                3 => Some(CpuMigrations),
                _ => None,
            };
        }
        // EDGE (18), INV (23), CMASK (31:24): a different count.
        if code & (1 << 18 | 1 << 23 | 0xff << 24) != 0 {
            return None;
        }
        let umask = (code >> 8) & 0xff;
        if self.model.starts_with("intel_arch") {
            return match (code & 0xff, umask) {
                (0x3c, 0) => Some(Cycles),
                (0xc0, 0) => Some(Instructions),
                (0xc4, 0) => Some(Branches),
                (0xc5, 0) => Some(BranchMisses),
                _ => None,
            };
        }
        if self.model.starts_with("amd64") {
            // AMD's event select is 12 bits: 7:0 and 35:32.
            let event = (code & 0xff) | ((code >> 32) & 0xf) << 8;
            return match (event, umask) {
                (0x76, 0) => Some(Cycles),
                (0xc0, 0) => Some(Instructions),
                (0xc2, 0) => Some(Branches),
                (0xc3, 0) => Some(BranchMisses),
                _ => None,
            };
        }
        None
    }

    /// The event called `name` (an alias such as `cs`, or `r<hex>` for a
    /// raw PMC value, also works). An unknown name gives
    /// [`Error::UnknownEvent`] with the closest names.
    pub fn event(&self, name: &str) -> Result<Event> {
        let name = name.trim();
        if let Some(e) = self.events.iter().find(|e| e.name == name) {
            return Ok(e.clone());
        }
        let lower = name.to_ascii_lowercase();
        if let Some(e) = self
            .events
            .iter()
            .find(|e| e.name.to_ascii_lowercase() == lower)
        {
            return Ok(e.clone());
        }
        if let Some((_, target)) = ALIASES.iter().find(|(alias, _)| *alias == lower) {
            if let Some(e) = self.events.iter().find(|e| e.name == *target) {
                return Ok(e.clone());
            }
        }
        if let Some(hex) = lower.strip_prefix('r') {
            if !hex.is_empty() && hex.len() <= 16 {
                if let Ok(code) = u64::from_str_radix(hex, 16) {
                    return Ok(Event {
                        name: format!("r{hex}"),
                        code,
                    });
                }
            }
        }
        Err(Error::UnknownEvent {
            name: name.to_string(),
            model: self.model.clone(),
            suggestions: self.suggest(name),
            available: self.events.iter().map(|e| e.name.clone()).collect(),
            table: None,
        })
    }

    /// Parses a comma-separated event list (`-e task-clock,cs`). An empty
    /// list means every event of the model, as many as there are counters.
    pub fn parse_events(&self, list: &str) -> Result<Vec<Event>> {
        let names: Vec<&str> = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        let events: Vec<Event> = if names.is_empty() {
            self.events
                .iter()
                .take(self.event_counters().len())
                .cloned()
                .collect()
        } else {
            names.iter().map(|n| self.event(n)).collect::<Result<_>>()?
        };
        let counters = self.event_counters().len();
        if events.len() > counters {
            return Err(Error::TooManyEvents {
                requested: events.len(),
                counters,
            });
        }
        Ok(events)
    }

    /// Event names close to `name` (typos, prefixes), best first.
    pub fn suggest(&self, name: &str) -> Vec<String> {
        // Aliases only of the model's events: `cycles` is no suggestion
        // on soft.
        let candidates = self
            .events
            .iter()
            .map(|e| e.name.as_str())
            .chain(
                ALIASES
                    .iter()
                    .filter(|(_, t)| self.events.iter().any(|e| e.name == *t))
                    .map(|(a, _)| *a),
            )
            .collect::<Vec<_>>();
        suggest(name, &candidates)
            .into_iter()
            .map(|s| {
                // Suggest the real name rather than an alias.
                ALIASES
                    .iter()
                    .find(|(a, _)| *a == s)
                    .map_or(s, |(_, t)| t)
                    .to_string()
            })
            .fold(Vec::new(), |mut acc, s| {
                if !acc.contains(&s) {
                    acc.push(s);
                }
                acc
            })
    }
}

/// Levenshtein distance between two strings, by characters.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let subst = prev[j] + usize::from(ca != cb);
            cur[j + 1] = subst.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The candidates close to `name`: within an edit distance of a third of
/// the longer length (at least 1), or sharing a prefix of 3+ characters, or
/// containing it; best (smallest distance) first.
pub fn suggest<'a>(name: &str, candidates: &[&'a str]) -> Vec<&'a str> {
    let name = name.to_ascii_lowercase();
    let mut scored: Vec<(usize, &'a str)> = candidates
        .iter()
        .filter_map(|&c| {
            let lc = c.to_ascii_lowercase();
            let d = edit_distance(&name, &lc);
            let limit = (name.chars().count().max(lc.chars().count()) / 3).max(1);
            let prefix = name.len() >= 3 && (lc.starts_with(&name) || name.starts_with(&lc));
            let contains = name.len() >= 4 && lc.contains(&name);
            (d <= limit || prefix || contains).then_some((d, c))
        })
        .collect();
    scored.sort_by_key(|&(d, c)| (d, c));
    scored.into_iter().map(|(_, c)| c).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::abi::PfmEventInfo;

    /// A `struct pfm_info` as the soft model reports it.
    pub(crate) fn soft_info() -> PfmInfo {
        let mut raw = PfmInfo {
            abi_version: 1,
            size: std::mem::size_of::<PfmInfo>() as u32,
            num_pmcs: 4,
            num_pmds: 4,
            counter_width: 64,
            impl_pmcs: 0xf,
            impl_pmds: 0xf,
            ..Default::default()
        };
        raw.model[..4].copy_from_slice(b"soft");
        for (i, name) in ["task-clock", "context-switches", "cpu-migrations"]
            .iter()
            .enumerate()
        {
            let mut e = PfmEventInfo {
                code: i as u64 + 1,
                ..Default::default()
            };
            e.name[..name.len()].copy_from_slice(name.as_bytes());
            raw.events[i] = e;
        }
        raw.num_events = 3;
        for m in raw.pmc_rsvd_mask.iter_mut().take(4) {
            *m = !3;
        }
        raw
    }

    #[test]
    fn core_types_decoded() {
        let mut raw = soft_info();
        assert!(PmuInfo::from_raw(&raw).core_type_names().is_empty());
        raw.core_types = PFM_CORE_TYPE_CORE | PFM_CORE_TYPE_ATOM;
        let info = PmuInfo::from_raw(&raw);
        assert_eq!(info.core_types, raw.core_types);
        assert_eq!(info.core_type_names(), ["P-core", "E-core"]);
    }

    #[test]
    fn decodes_info() {
        let pmu = PmuInfo::from_raw(&soft_info());
        assert_eq!(pmu.model, "soft");
        assert_eq!(pmu.counters(), vec![0, 1, 2, 3]);
        assert_eq!(pmu.events.len(), 3);
        assert_eq!(
            pmu.events[1],
            Event {
                name: "context-switches".into(),
                code: 2
            }
        );
    }

    #[test]
    fn num_events_is_bounded() {
        let mut raw = soft_info();
        raw.num_events = 999;
        let pmu = PmuInfo::from_raw(&raw);
        assert_eq!(
            pmu.events.len(),
            3,
            "empty slots are dropped, no out-of-bounds"
        );
    }

    #[test]
    fn finds_events_and_aliases() {
        let pmu = PmuInfo::from_raw(&soft_info());
        assert_eq!(pmu.event("task-clock").map(|e| e.code), Ok(1));
        assert_eq!(pmu.event("Context-Switches").map(|e| e.code), Ok(2));
        assert_eq!(
            pmu.event("cs").map(|e| e.name),
            Ok("context-switches".to_string())
        );
        assert_eq!(pmu.event("migrations").map(|e| e.code), Ok(3));
        assert_eq!(pmu.event("r3").map(|e| e.code), Ok(3));
        assert_eq!(pmu.event("r1f").map(|e| e.code), Ok(0x1f));
        // perf's names for the module's events.
        assert_eq!(
            pmu.event("cpu-clock").map(|e| e.name),
            Ok("task-clock".to_string())
        );
        let intel = intel_info();
        assert_eq!(intel.event("cycles").map(|e| e.code), Ok(0x1003c));
        // An alias of an event the model lacks is unknown.
        assert!(matches!(
            pmu.event("cycles"),
            Err(Error::UnknownEvent { .. })
        ));
    }

    #[test]
    fn unknown_events_suggest_close_names() {
        let pmu = PmuInfo::from_raw(&soft_info());
        match pmu.event("context-switchs") {
            Err(Error::UnknownEvent { suggestions, .. }) => {
                assert_eq!(suggestions, vec!["context-switches".to_string()])
            }
            other => panic!("{other:?}"),
        }
        match pmu.event("taskclock") {
            Err(Error::UnknownEvent { suggestions, .. }) => {
                assert_eq!(suggestions[0], "task-clock")
            }
            other => panic!("{other:?}"),
        }
        // `cpu` is a prefix of cpu-clock, perf's name of task-clock.
        match pmu.event("cpu") {
            Err(Error::UnknownEvent { suggestions, .. }) => {
                assert_eq!(
                    suggestions,
                    vec!["task-clock".to_string(), "cpu-migrations".to_string()]
                )
            }
            other => panic!("{other:?}"),
        }
        // An alias typo suggests the event, not the alias.
        match pmu.event("migration") {
            Err(Error::UnknownEvent { suggestions, .. }) => {
                assert_eq!(suggestions, vec!["cpu-migrations".to_string()])
            }
            other => panic!("{other:?}"),
        }
        let err = pmu.event("cycles").unwrap_err();
        match &err {
            Error::UnknownEvent { suggestions, .. } => assert!(suggestions.is_empty()),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            err.to_string(),
            "unknown event 'cycles' for PMU model 'soft'; available: task-clock, \
             context-switches, cpu-migrations (see 'pfm list')"
        );
        assert_eq!(
            pmu.event("context-switchs").unwrap_err().to_string(),
            "unknown event 'context-switchs' for PMU model 'soft'; did you mean 'context-switches'?"
        );
    }

    #[test]
    fn parses_event_lists() {
        let pmu = PmuInfo::from_raw(&soft_info());
        let all = pmu.parse_events("").unwrap();
        assert_eq!(all.len(), 3);
        let two = pmu.parse_events(" cs , task-clock,").unwrap();
        assert_eq!(two.iter().map(|e| e.code).collect::<Vec<_>>(), vec![2, 1]);
        assert!(matches!(
            pmu.parse_events("cs,cs,cs,cs,cs"),
            Err(Error::TooManyEvents {
                requested: 5,
                counters: 4
            })
        ));
        assert!(matches!(
            pmu.parse_events("cs,bogus"),
            Err(Error::UnknownEvent { .. })
        ));
    }

    /// A `struct pfm_info` as `intel_arch_sim` reports it: 4 GP counters,
    /// FIXED_CTR_CTRL as PMC 16 and 3 fixed counters as PMD 16-18.
    fn intel_info() -> PmuInfo {
        let mut pmu = PmuInfo::from_raw(&soft_info());
        pmu.model = "intel_arch_sim".into();
        pmu.impl_pmcs = 0xf | 1 << 16;
        pmu.impl_pmds = 0xf | 0x7 << 16;
        pmu.counter_width = 48;
        pmu.events = vec![
            Event {
                name: "cpu-cycles".into(),
                code: 0x1003c,
            },
            Event {
                name: "instructions".into(),
                code: 0x100c0,
            },
        ];
        pmu
    }

    #[test]
    fn events_go_on_counters_that_take_an_event_select() {
        let intel = intel_info();
        assert_eq!(intel.counters(), vec![0, 1, 2, 3, 16]);
        assert_eq!(intel.event_counters(), vec![0, 1, 2, 3]);
        assert!(matches!(
            intel.parse_events("r1,r2,r3,r4,r5"),
            Err(Error::TooManyEvents {
                requested: 5,
                counters: 4
            })
        ));
        let soft = PmuInfo::from_raw(&soft_info());
        assert_eq!(soft.event_counters(), soft.counters());
        assert!(intel.is_hardware() && !soft.is_hardware());
    }

    #[test]
    fn generic_events() {
        let soft = PmuInfo::from_raw(&soft_info());
        assert_eq!(soft.generic(1), Some(Generic::TaskClock));
        assert_eq!(soft.generic(2), Some(Generic::ContextSwitches));
        assert_eq!(soft.generic(3), Some(Generic::CpuMigrations));
        assert_eq!(soft.generic(0x3c), None);
        let intel = intel_info();
        // libpfm4's encodings (EN and INT set) and the module's (USR only).
        assert_eq!(intel.generic(0x5100c0), Some(Generic::Instructions));
        assert_eq!(intel.generic(0x1003c), Some(Generic::Cycles));
        assert_eq!(intel.generic(0x2003c), Some(Generic::Cycles));
        assert_eq!(intel.generic(0x100c4), Some(Generic::Branches));
        assert_eq!(intel.generic(0x100c5), Some(Generic::BranchMisses));
        // Reference cycles (umask 1), a counter mask, edge: not plain counts.
        assert_eq!(intel.generic(0x1013c), None);
        assert_eq!(intel.generic(0x10100c0), None);
        assert_eq!(intel.generic(0x500c0), None);
        assert_eq!(intel.generic(1), None);
        let mut amd = intel_info();
        amd.model = "amd64".into();
        assert_eq!(amd.generic(0x10076), Some(Generic::Cycles));
        assert_eq!(amd.generic(0x100c3), Some(Generic::BranchMisses));
        // Event select bits 35:32 make it another event.
        assert_eq!(amd.generic(0x1_0001_00c0), None);
        assert_eq!(amd.generic(0x1003c), None);
    }

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("context-switches", "context-switchs"), 1);
        assert_eq!(edit_distance("same", "same"), 0);
    }
}
