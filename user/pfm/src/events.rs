//! Event names to PMC values: the module's own names and raw codes first
//! (`perfmon::PmuInfo::event`), then, on the hardware models, libpfm4's
//! table of the CPU's core PMU. The soft model's names are only the
//! module's; libpfm4 is not even initialized for it.

use std::cell::OnceCell;

use libpfm4::{Library, Pmu, Vendor};
use perfmon::{Event, PmuInfo};

/// libpfm4 sets the event select's INT bit (20, the same on Intel and AMD)
/// in every encoding; the module owns it (it sets it on every counter it
/// uses, to fold wraps) and refuses it from user space, so pfm clears it.
/// Every other bit goes to the module as libpfm4 encoded it (EN, bit 22, is
/// accepted and ignored).
pub const PMC_INT: u64 = 1 << 20;

/// The event select's privilege bits, the same on Intel and AMD: count in
/// user mode (USR, bit 16), in kernel mode (OS, bit 17).
pub const PMC_USR: u64 = 1 << 16;
pub const PMC_OS: u64 = 1 << 17;

/// Intel's ANY-thread (bit 21) and pin control (bit 19): the module refuses
/// both (ANY would count the sibling hyperthread, another thread).
const PMC_ANY: u64 = 1 << 21;
const PMC_PC: u64 = 1 << 19;

/// An event to program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The name as given and the PMC value.
    pub event: Event,
    /// Named through libpfm4: its fully qualified name.
    pub libpfm: Option<String>,
    /// perf's `:p` modifiers given (0 to 3): precise IPs asked for, which
    /// perfmon's samples do not have (the PMI's instruction pointer).
    pub precise: u8,
}

/// perf's modifiers of an event name (`cycles:u`, `instructions:uk`,
/// `cycles:pp`), as far as pfm applies them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Modifiers {
    /// `u`: count in user mode.
    pub user: bool,
    /// `k`: count in kernel mode.
    pub kernel: bool,
    /// `p`, `pp`, `ppp`: precise IPs asked for.
    pub precise: u8,
}

/// The letters of perf's event modifiers (tools/perf/util/parse-events.l):
/// what a suffix after the last ':' must be made of to be read as them.
const PERF_MODIFIER_LETTERS: &str = "ukhIGHpPSDWeb";

/// Splits `name` at its last ':' when what follows is perf's modifiers:
/// `Some((base, Ok(modifiers)))`, or `Some((base, Err(why)))` for perf
/// modifiers pfm cannot apply; `None` when there is no such suffix (a
/// libpfm4 name such as `INST_RETIRED:ANY_P` keeps its colon).
pub fn split_modifiers(name: &str) -> Option<(&str, Result<Modifiers, String>)> {
    let (base, suffix) = name.rsplit_once(':')?;
    if base.is_empty()
        || suffix.is_empty()
        || !suffix.chars().all(|c| PERF_MODIFIER_LETTERS.contains(c))
    {
        return None;
    }
    let mut m = Modifiers::default();
    for c in suffix.chars() {
        match c {
            'u' => m.user = true,
            'k' => m.kernel = true,
            'p' if m.precise < 3 => m.precise += 1,
            'p' => return Some((base, Err(format!("'{name}': at most :ppp")))),
            // perfmon counts one thread, on whatever CPU, outside any
            // virtualization: host/guest, hypervisor, pinned, exclusive,
            // sample-read and weak-group modifiers have nothing to select.
            other => {
                return Some((
                    base,
                    Err(format!(
                        "modifier '{other}' of '{name}' is not supported: pfm counts one \
                         thread, in user (:u) and kernel (:k) mode"
                    )),
                ))
            }
        }
    }
    Some((base, Ok(m)))
}

/// perf's generic events (`perf list hw sw`) that are not the module's
/// (the ones that are, `cycles` for `cpu-cycles` and so on, are the
/// module's aliases, `perfmon::aliases_of`): each says why, or gives the
/// encoding perf uses on this model.
enum PerfGeneric {
    /// A perf software event the module does not count.
    Software,
    /// A perf hardware event.
    Hardware,
}

/// Whether `name` is one of perf's generic event names, and its kind.
fn perf_generic(name: &str) -> Option<PerfGeneric> {
    const SOFTWARE: &[&str] = &[
        "task-clock",
        "cpu-clock",
        "context-switches",
        "cs",
        "cpu-migrations",
        "migrations",
        "page-faults",
        "faults",
        "minor-faults",
        "major-faults",
        "alignment-faults",
        "emulation-faults",
        "dummy",
        "bpf-output",
        "cgroup-switches",
    ];
    const HARDWARE: &[&str] = &[
        "cpu-cycles",
        "cycles",
        "instructions",
        "cache-references",
        "cache-misses",
        "branch-instructions",
        "branches",
        "branch-misses",
        "bus-cycles",
        "ref-cycles",
        "stalled-cycles-frontend",
        "idle-cycles-frontend",
        "stalled-cycles-backend",
        "idle-cycles-backend",
    ];
    let lower = name.to_ascii_lowercase();
    if SOFTWARE.contains(&lower.as_str()) {
        Some(PerfGeneric::Software)
    } else if HARDWARE.contains(&lower.as_str()) {
        Some(PerfGeneric::Hardware)
    } else {
        None
    }
}

/// AMD's encodings of perf's generic events by core generation, from
/// Linux's `amd_perfmon_event_map` (before Zen), `amd_zen1_…`,
/// `amd_zen2_…` (Zen 2 and 3) and `amd_zen4_…` (Zen 4 and later) in
/// arch/x86/events/amd/core.c: event select and unit mask (event bits
/// 11:8 at 35:32), without privilege bits. The events all generations
/// share (cycles, instructions, branches, branch-misses) are the module's.
fn amd_generic(pmu_name: &str, name: &str) -> Option<u64> {
    let zen = if pmu_name.contains("zen4")
        || pmu_name.contains("zen5")
        || pmu_name.contains("fam1ah")
    {
        4
    } else if pmu_name.contains("zen2") || pmu_name.contains("zen3") || pmu_name.contains("fam19h")
    {
        2
    } else if pmu_name.contains("fam17h") {
        1
    } else {
        0
    };
    let lower = name.to_ascii_lowercase();
    match (lower.as_str(), zen) {
        ("cache-references", 0) => Some(0x077d),
        ("cache-references", _) => Some(0xff60),
        ("cache-misses", 0) => Some(0x077e),
        ("cache-misses", _) => Some(0x0964),
        ("stalled-cycles-frontend" | "idle-cycles-frontend", 0) => Some(0x00d0),
        ("stalled-cycles-frontend" | "idle-cycles-frontend", 1) => Some(0x0287),
        ("stalled-cycles-frontend" | "idle-cycles-frontend", _) => Some(0x00a9),
        ("stalled-cycles-backend" | "idle-cycles-backend", 0) => Some(0x00d1),
        ("stalled-cycles-backend" | "idle-cycles-backend", 1) => Some(0x0187),
        ("ref-cycles", 4) => Some(0x1_0000_0120),
        _ => None,
    }
}

/// Applies perf's privilege modifiers to a hardware event select: `:u`
/// user mode, `:k` kernel mode, both for both; none given, the value's own
/// USR and OS bits, or user mode if it has neither (as perf counts for a
/// user at the default `perf_event_paranoid`, and the module's own events
/// do). INT is cleared: the module owns it (it sets it on every counter it
/// uses) and refuses it from user space, where perf's raw values may carry
/// it (perf's kernel ignores a raw value's INT, EN, USR and OS bits).
pub fn hardware_code(code: u64, m: Option<Modifiers>) -> u64 {
    let code = code & !PMC_INT;
    match m {
        Some(m) if m.user || m.kernel => {
            (code & !(PMC_USR | PMC_OS))
                | if m.user { PMC_USR } else { 0 }
                | if m.kernel { PMC_OS } else { 0 }
        }
        _ if code & (PMC_USR | PMC_OS) == 0 => code | PMC_USR,
        _ => code,
    }
}

/// Why the module refuses the event select `code` on this model, as far as
/// the PMU's description (GET_INFO's reserved masks) and the caller's
/// capabilities tell: the first cause that applies, in words, or `None`
/// when none is known here (then the module's reason is not visible to
/// user space).
pub fn refusal_cause(pmu: &PmuInfo, code: u64) -> Option<String> {
    if !pmu.is_hardware() {
        return None;
    }
    let counter = usize::from(*pmu.event_counters().first()?);
    let reserved = code & pmu.pmc_rsvd_mask.get(counter).copied().unwrap_or(0);
    if code & PMC_INT != 0 {
        return Some("the interrupt bit (INT, bit 20) is the module's".into());
    }
    if pmu.model.starts_with("intel_arch") && code & PMC_ANY != 0 {
        return Some(
            "ANY-thread (bit 21) would count the sibling hyperthread, another thread".into(),
        );
    }
    if pmu.model.starts_with("intel_arch") && code & PMC_PC != 0 {
        return Some("pin control (PC, bit 19) is the module's".into());
    }
    if reserved != 0 {
        return Some(format!(
            "bits {reserved:#x} are reserved on PMU model {}",
            pmu.model
        ));
    }
    if code & PMC_OS != 0 && !may_count_kernel() {
        return Some(
            "kernel-mode counting (:k, the OS bit 17) needs CAP_PERFMON or CAP_SYS_ADMIN \
             (count user mode only with :u)"
                .into(),
        );
    }
    None
}

/// The one line of an event the module refused (EINVAL): its name, its
/// PMC value and the cause, where [`refusal_cause`] knows it.
pub fn refused(pmu: &PmuInfo, name: &str, code: u64) -> String {
    match refusal_cause(pmu, code) {
        Some(why) => format!("event '{name}' (PMC value {code:#x}) refused by the module: {why}"),
        None => format!("event '{name}' (PMC value {code:#x}) refused by the module (EINVAL)"),
    }
}

/// Whether this process has CAP_PERFMON (38) or CAP_SYS_ADMIN (21) in its
/// effective set (`CapEff:` of /proc/self/status), which the module asks of
/// kernel-mode counting, as perf_events does at `perf_event_paranoid` 2.
fn may_count_kernel() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return true;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .map_or(true, |caps| caps & (1 << 38 | 1 << 21) != 0)
}

/// libpfm4's core PMU for the module's model, or why there is none.
pub enum Table {
    /// The PMU whose table names the events.
    Pmu(&'static Library, &'static Pmu),
    /// No table: a sentence saying why, and what to do.
    None(String),
}

/// Resolves event names for one PMU model.
pub struct Resolver<'a> {
    pmu: &'a PmuInfo,
    table: OnceCell<Table>,
}

/// The CPU vendor of a hardware model.
fn vendor(model: &str) -> Option<Vendor> {
    if model.starts_with("intel_arch") {
        Some(Vendor::Intel)
    } else if model.starts_with("amd64") {
        Some(Vendor::Amd)
    } else {
        None
    }
}

/// Opens libpfm4 and finds the core PMU matching the module's model.
fn open_table(model: &str) -> Table {
    let Some(v) = vendor(model) else {
        return Table::None(format!("the {model} model has no libpfm4 table"));
    };
    let lib = match Library::open() {
        Ok(l) => l,
        Err(e) => return Table::None(e.to_string()),
    };
    match lib.core_pmu(v) {
        Some(p) => Table::Pmu(lib, p),
        None => {
            let who = match v {
                Vendor::Intel => "Intel",
                Vendor::Amd => "AMD",
            };
            let forced = std::env::var("LIBPFM_FORCE_PMU").ok();
            Table::None(match forced {
                Some(f) => format!(
                    "LIBPFM_FORCE_PMU={f} is not an {who} core PMU of libpfm4 \
                     (e.g. skl, icl for Intel; amd64_fam17h_zen2 for AMD)"
                ),
                None => format!(
                    "libpfm4 knows no {who} core PMU of this CPU \
                     (set LIBPFM_FORCE_PMU to one, e.g. skl)"
                ),
            })
        }
    }
}

/// The part of a libpfm4 name that names the event and unit mask, as
/// `EVENT.UMASK` (modifiers and a `pmu::` prefix dropped), for suggestions.
fn base_name(name: &str) -> String {
    let name = name.rsplit("::").next().unwrap_or(name);
    let mut parts = name.split(':');
    let first = parts.next().unwrap_or("");
    if first.contains('.') {
        return first.to_string();
    }
    match parts.next() {
        // `EVENT:UMASK:mod`: the second part is a unit mask if it is not a
        // modifier (which are short and lower case: u, k, c=1, ...).
        Some(second) if second.chars().any(|c| c.is_ascii_uppercase()) => {
            format!("{first}.{second}")
        }
        _ => first.to_string(),
    }
}

impl<'a> Resolver<'a> {
    /// A resolver for `pmu`; libpfm4 is opened on first need.
    pub fn new(pmu: &'a PmuInfo) -> Self {
        Resolver {
            pmu,
            table: OnceCell::new(),
        }
    }

    /// libpfm4's table for this model (opened now if not yet).
    pub fn table(&self) -> &Table {
        self.table.get_or_init(|| open_table(&self.pmu.model))
    }

    /// Resolves `names` (as given to `-e`, already split at commas) for
    /// one set of counters: more events than counters is an error. None:
    /// the model's first events, one per counter.
    pub fn resolve_list(&self, names: &[String]) -> perfmon::Result<Vec<Resolved>> {
        let events = self.resolve_names(names)?;
        let counters = self.pmu.event_counters().len();
        if events.len() > counters {
            return Err(perfmon::Error::TooManyEvents {
                requested: events.len(),
                counters,
            });
        }
        Ok(events)
    }

    /// Resolves `names`, however many (more than the counters are
    /// multiplexed); none: the model's first events, one per counter.
    pub fn resolve_names(&self, names: &[String]) -> perfmon::Result<Vec<Resolved>> {
        let names: Vec<&str> = names
            .iter()
            .map(|n| n.trim())
            .filter(|n| !n.is_empty())
            .collect();
        let events = if names.is_empty() {
            self.pmu
                .parse_events("")?
                .into_iter()
                .map(|event| Resolved {
                    event,
                    libpfm: None,
                    precise: 0,
                })
                .collect()
        } else {
            names
                .iter()
                .map(|n| self.resolve(n))
                .collect::<perfmon::Result<Vec<_>>>()?
        };
        Ok(events)
    }

    /// Resolves one name: the module's (with perf's aliases, and raw
    /// codes), with perf's modifiers; perf's generic events the module
    /// does not name; then libpfm4's.
    pub fn resolve(&self, name: &str) -> perfmon::Result<Resolved> {
        let name = name.trim();
        if let Some((base, modifiers)) = split_modifiers(name) {
            if let Some(r) = self.resolve_perf(base, name, Some(modifiers))? {
                return Ok(r);
            }
        } else if let Some(r) = self.resolve_perf(name, name, None)? {
            return Ok(r);
        }
        self.resolve_libpfm(name)
    }

    /// `base` (`name` without its modifiers `m`) as the module's event, an
    /// alias, a raw code, or one of perf's generic events; `None` if it is
    /// none of them (libpfm4's turn).
    fn resolve_perf(
        &self,
        base: &str,
        name: &str,
        m: Option<Result<Modifiers, String>>,
    ) -> perfmon::Result<Option<Resolved>> {
        let generic = perf_generic(base);
        let event = match self.pmu.event(base) {
            Ok(e) => Some(e),
            Err(_) => match (&generic, self.pmu.is_hardware()) {
                (Some(PerfGeneric::Hardware), true) => self.hardware_generic(base)?,
                (Some(PerfGeneric::Hardware), false) => {
                    return Err(perfmon::Error::Usage(format!(
                        "'{base}' is a hardware event and PMU model '{}' counts software \
                         events only ({}): load perfmon with pmu=intel_arch or amd64 on a \
                         CPU with a PMU",
                        self.pmu.model,
                        self.model_names()
                    )))
                }
                (Some(PerfGeneric::Software), hw) => {
                    let why = if hw {
                        format!(
                            "PMU model '{}' counts hardware events only ({}; pmu=soft has \
                             task-clock, context-switches, cpu-migrations and page faults)",
                            self.pmu.model,
                            self.model_names()
                        )
                    } else {
                        format!(
                            "the perfmon module counts {} (perf's other software events \
                             are not among them)",
                            self.model_names()
                        )
                    };
                    return Err(perfmon::Error::Usage(format!(
                        "'{base}' is a perf software event: {why}"
                    )));
                }
                (None, _) => None,
            },
        };
        let Some(event) = event else {
            return Ok(None);
        };
        let modifiers = match m {
            Some(Ok(m)) => Some(m),
            Some(Err(why)) => return Err(perfmon::Error::Usage(why)),
            None => None,
        };
        let raw = base.to_ascii_lowercase().starts_with('r')
            && generic.is_none()
            && !self
                .pmu
                .events
                .iter()
                .any(|e| e.name.eq_ignore_ascii_case(base));
        let code = if self.pmu.is_hardware() {
            hardware_code(event.code, modifiers)
        } else {
            // The soft model's events have no privilege levels: `:u` and
            // `:k` count the same, as perf's software counts do.
            event.code
        };
        // A modified or raw name is shown as given (`instructions:u`,
        // `r5100c0`); an alias by the module's name.
        let shown = if modifiers.is_some() || raw {
            name.to_string()
        } else {
            event.name
        };
        Ok(Some(Resolved {
            event: Event { name: shown, code },
            libpfm: None,
            precise: modifiers.map_or(0, |m| m.precise),
        }))
    }

    /// The module's event names on this model, for messages.
    fn model_names(&self) -> String {
        let names: Vec<&str> = self.pmu.events.iter().map(|e| e.name.as_str()).collect();
        names.join(", ")
    }

    /// A perf hardware event the module does not name, as perf encodes it
    /// on this model; an error saying why when perf has no encoding here.
    fn hardware_generic(&self, base: &str) -> perfmon::Result<Option<Event>> {
        let lower = base.to_ascii_lowercase();
        let code = match vendor(&self.pmu.model) {
            Some(Vendor::Amd) => match self.table() {
                Table::Pmu(_, pmu) => amd_generic(&pmu.name, &lower),
                Table::None(why) => {
                    return Err(perfmon::Error::Usage(format!(
                        "perf's '{base}' is encoded by AMD core generation, which libpfm4 \
                         cannot tell here ({why})"
                    )))
                }
            },
            // Intel's are the module's architectural events (aliases);
            // the others Linux does not map on Intel's cores either.
            _ => None,
        };
        match code {
            Some(c) => Ok(Some(Event {
                name: lower,
                code: c | PMC_USR,
            })),
            None => Err(perfmon::Error::Usage(format!(
                "perf's '{base}' has no encoding on PMU model '{}' (perf has none for \
                 this CPU either, or the CPU does not announce the architectural event); \
                 its events: {}",
                self.pmu.model,
                self.model_names()
            ))),
        }
    }

    /// `name` through libpfm4's table (hardware models), or the module's
    /// unknown-event error with the closest names.
    fn resolve_libpfm(&self, name: &str) -> perfmon::Result<Resolved> {
        let err = match self.pmu.event(name) {
            Ok(event) => {
                return Ok(Resolved {
                    event,
                    libpfm: None,
                    precise: 0,
                })
            }
            Err(e) => e,
        };
        let perfmon::Error::UnknownEvent {
            name: given,
            model,
            suggestions,
            available,
            ..
        } = err
        else {
            return Err(err);
        };
        if !self.pmu.is_hardware() {
            return Err(perfmon::Error::UnknownEvent {
                name: given,
                model,
                suggestions,
                available,
                table: None,
            });
        }
        let (lib, pmu) = match self.table() {
            Table::Pmu(lib, pmu) => (*lib, *pmu),
            // A typo of one of the module's names: its suggestions say more
            // than libpfm4's absence.
            Table::None(_) if !suggestions.is_empty() => {
                return Err(perfmon::Error::UnknownEvent {
                    name: given,
                    model,
                    suggestions,
                    available,
                    table: None,
                })
            }
            Table::None(why) => {
                return Err(perfmon::Error::Usage(format!(
                    "unknown event '{given}' for PMU model '{model}', and no libpfm4 table: \
                     {why}; see 'pfm list'"
                )))
            }
        };
        match lib.encode(pmu, &given) {
            Ok(enc) => {
                if enc.codes.len() > 1 {
                    return Err(perfmon::Error::Usage(format!(
                        "event '{given}' needs a second register ({}): perfmon programs \
                         only the event select; choose another event",
                        enc.qualified
                    )));
                }
                let code = enc.codes.first().copied().unwrap_or(0) & !PMC_INT;
                Ok(Resolved {
                    event: Event { name: given, code },
                    libpfm: Some(enc.qualified),
                    precise: 0,
                })
            }
            Err(libpfm4::Error::UnknownEvent { .. }) => {
                let mut all = suggestions;
                for s in self.libpfm_suggestions(lib, pmu, &given) {
                    if !all.contains(&s) {
                        all.push(s);
                    }
                }
                all.truncate(4);
                Err(perfmon::Error::UnknownEvent {
                    name: given,
                    model,
                    suggestions: all,
                    available,
                    table: Some(pmu.name.clone()),
                })
            }
            Err(e) => Err(perfmon::Error::Usage(format!("event '{given}': {e}"))),
        }
    }

    /// The names of `pmu`'s table closest to `name`, best first.
    fn libpfm_suggestions(&self, lib: &Library, pmu: &Pmu, name: &str) -> Vec<String> {
        let names: Vec<String> = lib.events(pmu).iter().flat_map(|e| e.names()).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        perfmon::suggest(&base_name(name), &refs)
            .into_iter()
            .take(3)
            .map(str::to_string)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_names() {
        assert_eq!(base_name("INST_RETIRED.ANY_P:u"), "INST_RETIRED.ANY_P");
        assert_eq!(base_name("INST_RETIRED:ANY_P:u"), "INST_RETIRED.ANY_P");
        assert_eq!(base_name("skl::INST_RETIRED:ANY_P"), "INST_RETIRED.ANY_P");
        assert_eq!(base_name("INST_RETIRED:u"), "INST_RETIRED");
        assert_eq!(base_name("INST_RETIRED"), "INST_RETIRED");
    }

    fn model(name: &str, events: &[(&str, u64)]) -> PmuInfo {
        PmuInfo {
            abi_version: 1,
            model: name.into(),
            num_pmcs: 5,
            num_pmds: 7,
            counter_width: 48,
            vector: 0xec,
            impl_pmcs: 0xf | 1 << 16,
            impl_pmds: 0xf | 0x7 << 16,
            core_types: 0,
            pmc_rsvd_mask: [0; 32],
            events: events
                .iter()
                .map(|&(n, c)| Event {
                    name: n.into(),
                    code: c,
                })
                .collect(),
        }
    }

    /// The module's events on intel_arch_sim (CPUID's architectural ones).
    fn intel() -> PmuInfo {
        model(
            "intel_arch_sim",
            &[
                ("cpu-cycles", 0x1003c),
                ("instructions", 0x100c0),
                ("ref-cycles", 0x1013c),
                ("llc-references", 0x14f2e),
                ("llc-misses", 0x1412e),
                ("branches", 0x100c4),
                ("branch-misses", 0x100c5),
            ],
        )
    }

    fn soft() -> PmuInfo {
        let mut m = model(
            "soft",
            &[
                ("task-clock", 1),
                ("context-switches", 2),
                ("cpu-migrations", 3),
                ("page-faults", 4),
                ("minor-faults", 5),
                ("major-faults", 6),
            ],
        );
        m.impl_pmcs = 0xf;
        m.impl_pmds = 0xf;
        m
    }

    fn code(pmu: &PmuInfo, name: &str) -> u64 {
        Resolver::new(pmu)
            .resolve(name)
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .event
            .code
    }

    fn refused(pmu: &PmuInfo, name: &str) -> String {
        match Resolver::new(pmu).resolve(name) {
            Ok(r) => panic!("{name} resolved to {r:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn modifiers() {
        let m = |s| split_modifiers(s).map(|(b, m)| (b, m.ok()));
        let mods = |user, kernel, precise| {
            Some(Modifiers {
                user,
                kernel,
                precise,
            })
        };
        assert_eq!(m("cycles:u"), Some(("cycles", mods(true, false, 0))));
        assert_eq!(m("cycles:uk"), Some(("cycles", mods(true, true, 0))));
        assert_eq!(m("cycles:ppp"), Some(("cycles", mods(false, false, 3))));
        assert_eq!(m("cycles:G"), Some(("cycles", None)));
        assert_eq!(m("cycles:pppp"), Some(("cycles", None)));
        // libpfm4's names keep their colons.
        assert_eq!(m("INST_RETIRED:ANY_P"), None);
        assert_eq!(m("BR_MISP_RETIRED.ALL_BRANCHES:c=1"), None);
        assert_eq!(m("cycles"), None);
        assert_eq!(m(":u"), None);
    }

    /// perf's generic names on Intel: the encodings of Linux's
    /// `intel_perfmon_event_map`, user mode unless `:k`.
    #[test]
    fn perf_names_on_intel() {
        let p = intel();
        assert_eq!(code(&p, "cycles"), 0x1003c);
        assert_eq!(code(&p, "cpu-cycles"), 0x1003c);
        assert_eq!(code(&p, "instructions:u"), 0x100c0);
        assert_eq!(code(&p, "instructions:k"), 0x200c0);
        assert_eq!(code(&p, "instructions:uk"), 0x300c0);
        assert_eq!(code(&p, "cache-references"), 0x14f2e);
        assert_eq!(code(&p, "cache-misses"), 0x1412e);
        assert_eq!(code(&p, "branch-instructions"), 0x100c4);
        assert_eq!(code(&p, "branch-misses"), 0x100c5);
        assert_eq!(code(&p, "bus-cycles"), 0x1013c);
        assert_eq!(code(&p, "cycles:p"), 0x1003c);
        assert_eq!(Resolver::new(&p).resolve("cycles:pp").unwrap().precise, 2);
        // The name shown: as given when modified, the module's otherwise.
        let r = Resolver::new(&p);
        assert_eq!(
            r.resolve("instructions:u").unwrap().event.name,
            "instructions:u"
        );
        assert_eq!(r.resolve("cycles").unwrap().event.name, "cpu-cycles");
        // Raw values as perf takes them: INT (bit 20) dropped, the module
        // owning it; user mode when neither USR nor OS is given.
        assert_eq!(code(&p, "r5100c0"), 0x4100c0);
        assert_eq!(code(&p, "r00c0"), 0x100c0);
        assert_eq!(code(&p, "r5100c0:k"), 0x4200c0);
        assert_eq!(r.resolve("r5100c0").unwrap().event.name, "r5100c0");
        // What perf cannot count here either, and software events, say so.
        assert!(refused(&p, "stalled-cycles-frontend").contains("no encoding"));
        assert!(refused(&p, "task-clock").contains("perf software event"));
        assert!(refused(&p, "page-faults:u").contains("hardware events only"));
        assert!(refused(&p, "cycles:H").contains("modifier 'H'"));
    }

    #[test]
    fn perf_names_on_soft() {
        let p = soft();
        assert_eq!(code(&p, "task-clock:u"), 1);
        assert_eq!(code(&p, "cpu-clock"), 1);
        assert_eq!(code(&p, "cs:k"), 2);
        assert_eq!(code(&p, "migrations"), 3);
        // Page faults, as perf spells them (`faults` its alias).
        assert_eq!(code(&p, "page-faults"), 4);
        assert_eq!(code(&p, "faults:u"), 4);
        assert_eq!(code(&p, "minor-faults"), 5);
        assert_eq!(code(&p, "major-faults"), 6);
        let e = refused(&p, "alignment-faults");
        assert!(
            e.contains("perf software event") && e.contains("task-clock"),
            "{e}"
        );
        assert!(refused(&p, "cycles:u").contains("hardware event"));
    }

    #[test]
    fn amd_generations() {
        assert_eq!(amd_generic("amd64_k8_revg", "cache-misses"), Some(0x077e));
        assert_eq!(
            amd_generic("amd64_fam17h_zen1", "cache-misses"),
            Some(0x0964)
        );
        assert_eq!(
            amd_generic("amd64_fam17h_zen1", "stalled-cycles-backend"),
            Some(0x0187)
        );
        assert_eq!(
            amd_generic("amd64_fam19h_zen3", "stalled-cycles-frontend"),
            Some(0x00a9)
        );
        assert_eq!(
            amd_generic("amd64_fam19h_zen3", "stalled-cycles-backend"),
            None
        );
        assert_eq!(
            amd_generic("amd64_fam19h_zen4", "ref-cycles"),
            Some(0x1_0000_0120)
        );
        assert_eq!(amd_generic("amd64_fam19h_zen3", "ref-cycles"), None);
    }

    #[test]
    fn refusal_causes() {
        let mut p = intel();
        assert!(refusal_cause(&p, 0x1003c | PMC_INT)
            .unwrap()
            .contains("INT"));
        assert!(refusal_cause(&p, 0x1003c | PMC_ANY)
            .unwrap()
            .contains("ANY"));
        p.pmc_rsvd_mask[0] = 1 << 32;
        assert!(refusal_cause(&p, 0x1003c | 1 << 32)
            .unwrap()
            .contains("reserved"));
        assert_eq!(refusal_cause(&p, 0x1003c), None);
        assert_eq!(refusal_cause(&soft(), 9), None);
    }

    #[test]
    fn vendors() {
        assert_eq!(vendor("intel_arch"), Some(Vendor::Intel));
        assert_eq!(vendor("intel_arch_sim"), Some(Vendor::Intel));
        assert_eq!(vendor("amd64"), Some(Vendor::Amd));
        assert_eq!(vendor("soft"), None);
    }
}
