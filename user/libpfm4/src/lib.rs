//! Event names of the CPU's PMU from libpfm4, the event library of every
//! perfmon2 tool: its tables know every event and unit mask of every Intel
//! and AMD core, and turn a name such as `INST_RETIRED.ANY_P:u` into the
//! value of the event select register (`pfm_get_os_event_encoding` with
//! `PFM_OS_NONE`: the PMU's own encoding, no perf_event layer).
//!
//! Debian's `libpfm4-dev` is linked statically (build.rs), so a static
//! `pfm` carries the tables with it. Built without it, [`Library::open`]
//! fails with [`Error::NotBuiltIn`] and callers go on without libpfm4.
//!
//! libpfm4 picks the PMU from the CPU (CPUID); `LIBPFM_FORCE_PMU=skl` (a
//! PMU name of `pfm list`) makes it use that PMU's table on any CPU, which
//! is how a machine without a PMU drives the module's simulated one with
//! real names.
//!
//! All unsafe code is in the private `sys` module: the hand-declared
//! bindings and one safe function per C call.

#![deny(unsafe_code)]
#![warn(missing_docs)]

#[allow(unsafe_code)]
mod sys;

use std::fmt;
use std::sync::OnceLock;

/// CPU vendors whose core PMUs the module drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vendor {
    /// Intel: IA32_PERFEVTSELn.
    Intel,
    /// AMD: PERF_CTLn.
    Amd,
}

impl Vendor {
    /// The word libpfm4's PMU descriptions start with.
    fn prefix(self) -> &'static str {
        match self {
            Vendor::Intel => "Intel",
            Vendor::Amd => "AMD",
        }
    }
}

/// A PMU libpfm4 has a table for and found (or was forced to use).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pmu {
    /// libpfm4's id (`pfm_pmu_t`).
    pub id: i32,
    /// Short name, the prefix of qualified event names (`skl`).
    pub name: String,
    /// Description (`Intel Skylake`).
    pub desc: String,
    /// A core PMU (as opposed to uncore or OS-provided).
    pub core: bool,
    /// Number of events in its table.
    pub nevents: usize,
    /// General-purpose counters.
    pub counters: usize,
    /// Fixed counters.
    pub fixed_counters: usize,
    /// libpfm4's default PMU for this CPU.
    pub default: bool,
    first_event: i32,
}

/// A unit mask or a modifier of an event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr {
    /// Name (`ANY_P`, `u`, `c`).
    pub name: String,
    /// Description.
    pub desc: String,
    /// Chosen when the name gives no unit mask.
    pub default: bool,
}

/// An event of a PMU's table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventInfo {
    /// Name (`INST_RETIRED`).
    pub name: String,
    /// Description.
    pub desc: String,
    /// The name this one is an alias of, if any.
    pub equiv: String,
    /// Unit masks (`EVENT.UMASK` or `EVENT:UMASK`).
    pub umasks: Vec<Attr>,
    /// Modifiers (`:u`, `:k`, `:c=N`, ...).
    pub modifiers: Vec<Attr>,
}

impl EventInfo {
    /// The names a user can type for this event: `EVENT` and `EVENT.UMASK`
    /// for each unit mask.
    pub fn names(&self) -> Vec<String> {
        std::iter::once(self.name.clone())
            .chain(
                self.umasks
                    .iter()
                    .map(|u| format!("{}.{}", self.name, u.name)),
            )
            .collect()
    }
}

/// An event name turned into register values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoding {
    /// The event select value first; a second value is an extra register
    /// (offcore response, load latency).
    pub codes: Vec<u64>,
    /// libpfm4's fully qualified name, every modifier spelled out
    /// (`skl::INST_RETIRED:ANY_P:k=0:u=1:e=0:i=0:c=0:t=0:intx=0:intxcp=0`).
    pub qualified: String,
}

/// What can go wrong with libpfm4.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// This build has no libpfm4 (no libpfm.a when it was compiled).
    NotBuiltIn,
    /// `pfm_initialize` failed.
    Init(String),
    /// The PMU's table has no such event (or unit mask).
    UnknownEvent {
        /// The name given.
        name: String,
        /// The PMU searched.
        pmu: String,
    },
    /// The name is known but cannot be encoded as given (a bad modifier,
    /// a missing unit mask, ...).
    Encode {
        /// The name given.
        name: String,
        /// libpfm4's reason.
        reason: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotBuiltIn => {
                f.write_str("this pfm was built without libpfm4 (install libpfm4-dev and rebuild)")
            }
            Error::Init(why) => write!(f, "libpfm4 failed to initialize: {why}"),
            Error::UnknownEvent { name, pmu } => {
                write!(f, "libpfm4 PMU '{pmu}' has no event '{name}'")
            }
            Error::Encode { name, reason } => write!(f, "libpfm4 cannot encode '{name}': {reason}"),
        }
    }
}

impl std::error::Error for Error {}

/// libpfm4, initialized.
#[derive(Debug)]
pub struct Library {
    pmus: Vec<Pmu>,
}

static LIBRARY: OnceLock<Result<Library, Error>> = OnceLock::new();

impl Library {
    /// Initializes libpfm4 (once per process; later calls return the same
    /// library or the same error).
    pub fn open() -> Result<&'static Library, Error> {
        LIBRARY
            .get_or_init(|| {
                let r = sys::initialize();
                if r == sys::NOT_BUILT_IN {
                    return Err(Error::NotBuiltIn);
                }
                if r != sys::PFM_SUCCESS {
                    return Err(Error::Init(sys::strerror(r)));
                }
                let pmus = (0..sys::PMU_ID_LIMIT)
                    .filter_map(sys::pmu_info)
                    .filter(|p| p.present)
                    .map(|p| Pmu {
                        id: p.id,
                        name: p.name,
                        desc: p.desc,
                        core: p.kind == sys::PFM_PMU_TYPE_CORE,
                        nevents: usize::try_from(p.nevents).unwrap_or(0),
                        counters: usize::try_from(p.num_cntrs).unwrap_or(0),
                        fixed_counters: usize::try_from(p.num_fixed_cntrs).unwrap_or(0),
                        default: p.default,
                        first_event: p.first_event,
                    })
                    .collect();
                Ok(Library { pmus })
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The PMUs libpfm4 found on this CPU (or was forced to use).
    pub fn pmus(&self) -> &[Pmu] {
        &self.pmus
    }

    /// The core PMU of `vendor`: libpfm4's default one if it is of that
    /// vendor, else the first present core PMU of that vendor.
    pub fn core_pmu(&self, vendor: Vendor) -> Option<&Pmu> {
        let mut of_vendor = self
            .pmus
            .iter()
            .filter(|p| p.core && p.desc.starts_with(vendor.prefix()));
        let first = of_vendor.clone().next();
        of_vendor.find(|p| p.default).or(first)
    }

    /// The events of `pmu`'s table, with their unit masks and modifiers,
    /// in libpfm4's order.
    pub fn events(&self, pmu: &Pmu) -> Vec<EventInfo> {
        let mut out = Vec::with_capacity(pmu.nevents);
        let mut idx = pmu.first_event;
        // A bound in case a table loops: no PMU has more events than it says.
        let mut left = pmu.nevents + 1;
        while idx >= 0 && left > 0 {
            left -= 1;
            if let Some(ev) = sys::event_info(idx) {
                let mut umasks = Vec::new();
                let mut modifiers = Vec::new();
                for a in 0..ev.nattrs.max(0) {
                    let Some(attr) = sys::attr_info(idx, a) else {
                        continue;
                    };
                    let entry = Attr {
                        name: attr.name,
                        desc: attr.desc,
                        default: attr.default,
                    };
                    match attr.kind {
                        sys::PFM_ATTR_UMASK => umasks.push(entry),
                        sys::PFM_ATTR_MOD_BOOL | sys::PFM_ATTR_MOD_INTEGER => modifiers.push(entry),
                        _ => {}
                    }
                }
                out.push(EventInfo {
                    name: ev.name,
                    desc: ev.desc,
                    equiv: ev.equiv,
                    umasks,
                    modifiers,
                });
            }
            idx = sys::event_next(idx);
        }
        out
    }

    /// Encodes `name` (`INST_RETIRED.ANY_P:u`, `INST_RETIRED:ANY_P`, or
    /// qualified `skl::INST_RETIRED:ANY_P`) with `pmu`'s table. Without a
    /// `:u`/`:k` modifier the event counts in user mode only.
    pub fn encode(&self, pmu: &Pmu, name: &str) -> Result<Encoding, Error> {
        let qualified = match name.split_once("::") {
            // Another PMU's prefix is refused here rather than encoded for
            // a PMU the module does not drive.
            Some((prefix, _)) if !prefix.eq_ignore_ascii_case(&pmu.name) => {
                return Err(Error::UnknownEvent {
                    name: name.to_string(),
                    pmu: pmu.name.clone(),
                })
            }
            Some(_) => name.to_string(),
            None => format!("{}::{name}", pmu.name),
        };
        match sys::encode(&qualified) {
            Ok(enc) => {
                let of_pmu = sys::event_info(enc.idx).is_some_and(|e| e.pmu == pmu.id);
                if !of_pmu || enc.codes.is_empty() {
                    return Err(Error::UnknownEvent {
                        name: name.to_string(),
                        pmu: pmu.name.clone(),
                    });
                }
                Ok(Encoding {
                    codes: enc.codes,
                    qualified: enc.fstr,
                })
            }
            Err(sys::PFM_ERR_NOTFOUND) => Err(Error::UnknownEvent {
                name: name.to_string(),
                pmu: pmu.name.clone(),
            }),
            Err(sys::NOT_BUILT_IN) => Err(Error::NotBuiltIn),
            Err(code) => Err(Error::Encode {
                name: name.to_string(),
                reason: sys::strerror(code),
            }),
        }
    }
}

/// The user-mode-only default libpfm4 applies when a name has no `:u`/`:k`
/// (`PFM_PLM3`), for documentation and tests.
pub const DEFAULT_PLM: i32 = sys::PFM_PLM3;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_include_unit_masks() {
        let e = EventInfo {
            name: "INST_RETIRED".into(),
            desc: String::new(),
            equiv: String::new(),
            umasks: vec![Attr {
                name: "ANY_P".into(),
                desc: String::new(),
                default: true,
            }],
            modifiers: Vec::new(),
        };
        assert_eq!(e.names(), vec!["INST_RETIRED", "INST_RETIRED.ANY_P"]);
    }

    #[test]
    fn errors_are_one_line() {
        for e in [
            Error::NotBuiltIn,
            Error::Init("x".into()),
            Error::UnknownEvent {
                name: "A".into(),
                pmu: "skl".into(),
            },
            Error::Encode {
                name: "A".into(),
                reason: "invalid or missing unit mask".into(),
            },
        ] {
            assert!(!e.to_string().contains('\n'), "{e}");
        }
    }
}
