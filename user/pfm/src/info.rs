//! `pfm list` and `pfm info`.

use std::path::Path;

use perfmon::sysfs::SysInfo;
use perfmon::{Context, PmuInfo};
use pfm_json::{
    Info, LibpfmAttr, LibpfmEvent, LibpfmTable, List, ListEvent, Params, Sysfs, SCHEMA_VERSION,
};

use crate::events::{Resolver, Table};
use crate::output::Output;
use crate::report::json_line;
use crate::Failure;

/// Registers as a compact range list: `0-3`, `0-3,16-18`.
fn ranges(mask: u64) -> String {
    let mut parts = Vec::new();
    let mut n = 0u32;
    while n < 64 {
        if mask >> n & 1 == 1 {
            let start = n;
            while n + 1 < 64 && mask >> (n + 1) & 1 == 1 {
                n += 1;
            }
            parts.push(if start == n {
                format!("{start}")
            } else {
                format!("{start}-{n}")
            });
        }
        n += 1;
    }
    if parts.is_empty() {
        "none".to_string()
    } else {
        parts.join(",")
    }
}

/// `pfm list`: the events of the loaded PMU model, and on hardware models
/// libpfm4's table of the CPU's core PMU.
pub fn list(json: bool, output: Option<&Path>) -> Result<(), Failure> {
    let ctx = Context::open()?;
    let pmu = ctx.info()?;
    let doc = list_doc(pmu, &Resolver::new(pmu));
    let text = if json {
        json_line(&doc)?
    } else {
        list_table(&doc)
    };
    Output::open(output, Output::Stdout)?.write(&text)
}

/// What `pfm list` shows, as its JSON document.
fn list_doc(pmu: &PmuInfo, resolver: &Resolver<'_>) -> List {
    let events = pmu
        .events
        .iter()
        .map(|e| ListEvent {
            name: e.name.clone(),
            code: e.code,
            aliases: perfmon::aliases_of(&e.name)
                .into_iter()
                .map(str::to_string)
                .collect(),
            description: perfmon::describe(&e.name).to_string(),
        })
        .collect();
    let (libpfm, libpfm_note) = if pmu.is_hardware() {
        match resolver.table() {
            Table::Pmu(lib, p) => (Some(libpfm_table(lib, p)), None),
            Table::None(why) => (None, Some(why.clone())),
        }
    } else {
        (None, None)
    };
    List {
        schema_version: SCHEMA_VERSION,
        model: pmu.model.clone(),
        counters: pmu.event_counters().len(),
        counter_width: pmu.counter_width,
        events,
        libpfm,
        libpfm_note,
    }
}

fn libpfm_table(lib: &libpfm4::Library, p: &libpfm4::Pmu) -> LibpfmTable {
    let attr = |a: &libpfm4::Attr| LibpfmAttr {
        name: a.name.clone(),
        description: a.desc.clone(),
        default: a.default,
    };
    LibpfmTable {
        pmu: p.name.clone(),
        description: p.desc.clone(),
        forced: std::env::var_os("LIBPFM_FORCE_PMU").is_some(),
        events: lib
            .events(p)
            .iter()
            .map(|e| LibpfmEvent {
                name: e.name.clone(),
                description: e.desc.clone(),
                umasks: e.umasks.iter().map(attr).collect(),
                modifiers: e.modifiers.iter().map(attr).collect(),
            })
            .collect(),
    }
}

/// The first sentence of a libpfm4 description, for one line of a table.
fn first_sentence(s: &str) -> &str {
    let s = s.trim();
    match s.find(". ") {
        Some(i) => &s[..i],
        None => s.trim_end_matches('.'),
    }
}

fn list_table(doc: &List) -> String {
    let mut s = format!(
        "\nEvents of PMU model '{}' ({} counters, {}-bit):\n\n",
        doc.model, doc.counters, doc.counter_width
    );
    for e in &doc.events {
        let name = if e.aliases.is_empty() {
            e.name.clone()
        } else {
            format!("{} OR {}", e.name, e.aliases.join(" OR "))
        };
        s.push_str(&format!(
            "  {:<34} [code {:#x}]  {}\n",
            name, e.code, e.description
        ));
    }
    s.push_str("\n  r<hex>                             [raw PMC value]\n");
    if let Some(t) = &doc.libpfm {
        let how = if t.forced { ", LIBPFM_FORCE_PMU" } else { "" };
        s.push_str(&format!(
            "\nlibpfm4 events of PMU '{}' ({}{how}): -e EVENT.UMASK[:MODIFIER...]\n\n",
            t.pmu, t.description
        ));
        for e in &t.events {
            s.push_str(&format!(
                "  {:<34} {}\n",
                e.name,
                first_sentence(&e.description)
            ));
            for u in &e.umasks {
                let dfl = if u.default { " (default)" } else { "" };
                s.push_str(&format!(
                    "    .{:<32} {}{dfl}\n",
                    u.name,
                    first_sentence(&u.description)
                ));
            }
        }
        let mods: Vec<&str> = t
            .events
            .first()
            .map(|e| e.modifiers.iter().map(|m| m.name.as_str()).collect())
            .unwrap_or_default();
        if !mods.is_empty() {
            s.push_str(&format!(
                "\n  modifiers: {} (e.g. :u user mode, :k kernel mode)\n",
                mods.join(" ")
            ));
        }
    } else if let Some(note) = &doc.libpfm_note {
        s.push_str(&format!("\n  no libpfm4 events: {note}\n"));
    }
    s.push('\n');
    s
}

/// `pfm info`: the module, its ABI and PMU model, from GET_INFO and sysfs.
pub fn info(json: bool, output: Option<&Path>) -> Result<(), Failure> {
    // Read sysfs first, so that the context opened below is not counted
    // among the live ones.
    let sys = SysInfo::read();
    let ctx = Context::open()?;
    let raw = ctx.raw_info()?;
    let pmu = PmuInfo::from_raw(&raw);
    let libpfm_pmu = if pmu.is_hardware() {
        match Resolver::new(&pmu).table() {
            Table::Pmu(_, p) => Some(p.name.clone()),
            Table::None(_) => None,
        }
    } else {
        None
    };
    let doc = info_doc(&pmu, &sys, libpfm_pmu);
    let text = if json {
        json_line(&doc)?
    } else {
        info_table(&doc)
    };
    Output::open(output, Output::Stdout)?.write(&text)?;
    if pmu.abi_version != perfmon::abi::PFM_ABI_VERSION {
        return Err(perfmon::Error::AbiMismatch {
            kernel: pmu.abi_version,
            library: perfmon::abi::PFM_ABI_VERSION,
        }
        .into());
    }
    Ok(())
}

fn info_doc(pmu: &PmuInfo, sys: &SysInfo, libpfm_pmu: Option<String>) -> Info {
    Info {
        schema_version: SCHEMA_VERSION,
        abi_version: pmu.abi_version,
        tool_abi_version: perfmon::abi::PFM_ABI_VERSION,
        model: pmu.model.clone(),
        num_pmcs: pmu.num_pmcs,
        num_pmds: pmu.num_pmds,
        impl_pmcs: pmu.impl_pmcs,
        impl_pmds: pmu.impl_pmds,
        counters: pmu.event_counters().len(),
        counter_width: pmu.counter_width,
        vector: pmu.vector,
        events: pmu.events.len(),
        sysfs: Sysfs {
            abi_version: sys.abi_version,
            pmu_model: sys.pmu_model.clone(),
            live_contexts: sys.live_contexts,
            zombie_contexts: sys.zombie_contexts,
            vector: sys.vector,
        },
        params: Params {
            pmu: sys.param_pmu.clone(),
            soft_width: sys.param_soft_width,
        },
        libpfm_pmu,
        core_types: pmu
            .core_type_names()
            .iter()
            .map(|n| n.to_string())
            .collect(),
    }
}

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref()
        .map_or_else(|| "-".to_string(), ToString::to_string)
}

fn info_table(doc: &Info) -> String {
    let mut s = String::from("\n");
    let mut line = |k: &str, v: String| s.push_str(&format!("  {k:<22} {v}\n"));
    let abi = if doc.abi_version == doc.tool_abi_version {
        format!("{}", doc.abi_version)
    } else {
        format!(
            "{} (pfm speaks {}: mismatch)",
            doc.abi_version, doc.tool_abi_version
        )
    };
    line("perfmon ABI version", abi);
    line("PMU model", doc.model.clone());
    line(
        "counters",
        format!(
            "{} (PMC {}, PMD {})",
            doc.counters,
            ranges(doc.impl_pmcs),
            ranges(doc.impl_pmds)
        ),
    );
    line("counter width", format!("{} bits", doc.counter_width));
    line(
        "overflow vector",
        if doc.vector == 0 {
            "none".to_string()
        } else {
            format!("{:#x} ({})", doc.vector, doc.vector)
        },
    );
    line("events", format!("{} (see 'pfm list')", doc.events));
    if !doc.core_types.is_empty() {
        line(
            "core types",
            format!(
                "{} (hybrid: only the counters all types have)",
                doc.core_types.join(" + ")
            ),
        );
    }
    if let Some(p) = &doc.libpfm_pmu {
        line("libpfm4 PMU", format!("{p} (its events: 'pfm list')"));
    }
    line("live contexts", opt(&doc.sysfs.live_contexts));
    line("zombie contexts", opt(&doc.sysfs.zombie_contexts));
    if doc.params.pmu.is_some() || doc.params.soft_width.is_some() {
        line(
            "module parameters",
            format!(
                "pmu={} soft_width={}",
                opt(&doc.params.pmu),
                opt(&doc.params.soft_width)
            ),
        );
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn soft() -> PmuInfo {
        PmuInfo {
            abi_version: 1,
            model: "soft".into(),
            num_pmcs: 4,
            num_pmds: 4,
            counter_width: 64,
            vector: 0xec,
            impl_pmcs: 0xf,
            impl_pmds: 0xf,
            core_types: 0,
            pmc_rsvd_mask: [0; 32],
            events: vec![
                perfmon::Event {
                    name: "task-clock".into(),
                    code: 1,
                },
                perfmon::Event {
                    name: "context-switches".into(),
                    code: 2,
                },
                perfmon::Event {
                    name: "cpu-migrations".into(),
                    code: 3,
                },
            ],
        }
    }

    #[test]
    fn register_ranges() {
        assert_eq!(ranges(0), "none");
        assert_eq!(ranges(0xf), "0-3");
        assert_eq!(ranges(0b1011), "0-1,3");
        assert_eq!(ranges(1 << 63), "63");
        assert_eq!(ranges(u64::MAX), "0-63");
    }

    #[test]
    fn list_outputs_agree() {
        let pmu = soft();
        let doc = list_doc(&pmu, &Resolver::new(&pmu));
        assert!(
            doc.libpfm.is_none() && doc.libpfm_note.is_none(),
            "soft: no libpfm4"
        );
        let table = list_table(&doc);
        assert!(table.contains("context-switches OR cs"), "{table}");
        let text = json_line(&doc).unwrap();
        let back: List = serde_json::from_str(&text).unwrap();
        assert_eq!(back, doc);
        assert_eq!(back.events.len(), 3);
        for e in &back.events {
            assert!(
                table.contains(&format!("[code {:#x}]", e.code)),
                "{}",
                e.name
            );
            assert!(table.contains(&e.name));
        }
    }

    #[test]
    fn info_outputs_agree() {
        let pmu = soft();
        let sys = SysInfo {
            live_contexts: Some(2),
            zombie_contexts: Some(0),
            ..Default::default()
        };
        let doc = info_doc(&pmu, &sys, None);
        let table = info_table(&doc);
        assert!(table.contains("PMU model              soft"), "{table}");
        assert!(table.contains("4 (PMC 0-3, PMD 0-3)"), "{table}");
        assert!(table.contains("0xec (236)"), "{table}");
        assert!(table.contains("live contexts          2"), "{table}");
        let back: Info = serde_json::from_str(&json_line(&doc).unwrap()).unwrap();
        assert_eq!(back, doc);
        assert_eq!(back.sysfs.live_contexts, Some(2));
        assert!(!table.contains("core types"), "{table}");
    }

    #[test]
    fn hybrid_core_types_are_shown() {
        let mut pmu = soft();
        pmu.core_types = perfmon::abi::PFM_CORE_TYPE_CORE | perfmon::abi::PFM_CORE_TYPE_ATOM;
        let doc = info_doc(&pmu, &SysInfo::default(), None);
        assert_eq!(doc.core_types, ["P-core", "E-core"]);
        let table = info_table(&doc);
        assert!(
            table.contains("core types             P-core + E-core (hybrid"),
            "{table}"
        );
        let back: Info = serde_json::from_str(&json_line(&doc).unwrap()).unwrap();
        assert_eq!(back, doc);
    }

    #[test]
    fn sentences() {
        assert_eq!(first_sentence("Counts cycles. More text."), "Counts cycles");
        assert_eq!(first_sentence("Counts cycles."), "Counts cycles");
    }
}
