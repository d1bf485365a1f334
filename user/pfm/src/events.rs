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

/// An event to program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The name as given and the PMC value.
    pub event: Event,
    /// Named through libpfm4: its fully qualified name.
    pub libpfm: Option<String>,
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

    /// Resolves one name.
    pub fn resolve(&self, name: &str) -> perfmon::Result<Resolved> {
        let err = match self.pmu.event(name) {
            Ok(event) => {
                return Ok(Resolved {
                    event,
                    libpfm: None,
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

    #[test]
    fn vendors() {
        assert_eq!(vendor("intel_arch"), Some(Vendor::Intel));
        assert_eq!(vendor("intel_arch_sim"), Some(Vendor::Intel));
        assert_eq!(vendor("amd64"), Some(Vendor::Amd));
        assert_eq!(vendor("soft"), None);
    }
}
