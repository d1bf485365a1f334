//! `pfm list` and `pfm info`.

use perfmon::json::Value;
use perfmon::sysfs::SysInfo;
use perfmon::{Context, PmuInfo};

use crate::args::Common;
use crate::output::Output;
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

/// `pfm list`: the events of the loaded PMU model.
pub fn list(common: &Common) -> Result<(), Failure> {
    let ctx = Context::open()?;
    let pmu = ctx.info()?;
    let mut out = Output::open(common.output.as_deref(), Output::Stdout)?;
    let text = if common.json {
        format!("{}\n", list_json(pmu).to_json())
    } else {
        list_table(pmu)
    };
    out.write(&text)
}

fn list_json(pmu: &PmuInfo) -> Value {
    let events = pmu
        .events
        .iter()
        .map(|e| {
            Value::object([
                ("name", Value::from(e.name.as_str())),
                ("code", Value::from(e.code)),
                (
                    "aliases",
                    Value::from(
                        perfmon::aliases_of(&e.name)
                            .into_iter()
                            .map(Value::from)
                            .collect::<Vec<_>>(),
                    ),
                ),
                ("description", Value::from(perfmon::describe(&e.name))),
            ])
        })
        .collect::<Vec<_>>();
    Value::object([
        ("model", Value::from(pmu.model.as_str())),
        ("counters", Value::from(pmu.counters().len())),
        ("counter_width", Value::from(pmu.counter_width)),
        ("events", Value::from(events)),
    ])
}

fn list_table(pmu: &PmuInfo) -> String {
    let mut s = format!(
        "\nEvents of PMU model '{}' ({} counters, {}-bit):\n\n",
        pmu.model,
        pmu.counters().len(),
        pmu.counter_width
    );
    for e in &pmu.events {
        let aliases = perfmon::aliases_of(&e.name);
        let name = if aliases.is_empty() {
            e.name.clone()
        } else {
            format!("{} OR {}", e.name, aliases.join(" OR "))
        };
        s.push_str(&format!(
            "  {:<34} [code {:#x}]  {}\n",
            name,
            e.code,
            perfmon::describe(&e.name)
        ));
    }
    s.push_str("\n  r<hex>                             [raw PMC value]\n\n");
    s
}

/// `pfm info`: the module, its ABI and PMU model, from GET_INFO and sysfs.
pub fn info(common: &Common) -> Result<(), Failure> {
    // Read sysfs first, so that the context opened below is not counted
    // among the live ones.
    let sys = SysInfo::read();
    let ctx = Context::open()?;
    let raw = ctx.raw_info()?;
    let pmu = PmuInfo::from_raw(&raw);
    let mut out = Output::open(common.output.as_deref(), Output::Stdout)?;
    let text = if common.json {
        format!("{}\n", info_json(&pmu, &sys).to_json())
    } else {
        info_table(&pmu, &sys)
    };
    out.write(&text)?;
    if pmu.abi_version != perfmon::abi::PFM_ABI_VERSION {
        return Err(perfmon::Error::AbiMismatch {
            kernel: pmu.abi_version,
            library: perfmon::abi::PFM_ABI_VERSION,
        }
        .into());
    }
    Ok(())
}

fn info_json(pmu: &PmuInfo, sys: &SysInfo) -> Value {
    Value::object([
        ("abi_version", Value::from(pmu.abi_version)),
        (
            "tool_abi_version",
            Value::from(perfmon::abi::PFM_ABI_VERSION),
        ),
        ("model", Value::from(pmu.model.as_str())),
        ("num_pmcs", Value::from(pmu.num_pmcs)),
        ("num_pmds", Value::from(pmu.num_pmds)),
        ("impl_pmcs", Value::from(pmu.impl_pmcs)),
        ("impl_pmds", Value::from(pmu.impl_pmds)),
        ("counters", Value::from(pmu.counters().len())),
        ("counter_width", Value::from(pmu.counter_width)),
        ("vector", Value::from(pmu.vector)),
        ("events", Value::from(pmu.events.len())),
        (
            "sysfs",
            Value::object([
                ("abi_version", Value::from(sys.abi_version)),
                ("pmu_model", Value::from(sys.pmu_model.clone())),
                ("live_contexts", Value::from(sys.live_contexts)),
                ("zombie_contexts", Value::from(sys.zombie_contexts)),
                ("vector", Value::from(sys.vector)),
            ]),
        ),
        (
            "params",
            Value::object([
                ("pmu", Value::from(sys.param_pmu.clone())),
                ("soft_width", Value::from(sys.param_soft_width)),
            ]),
        ),
    ])
}

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref()
        .map_or_else(|| "-".to_string(), ToString::to_string)
}

fn info_table(pmu: &PmuInfo, sys: &SysInfo) -> String {
    let mut s = String::from("\n");
    let mut line = |k: &str, v: String| s.push_str(&format!("  {k:<22} {v}\n"));
    let abi = if pmu.abi_version == perfmon::abi::PFM_ABI_VERSION {
        format!("{}", pmu.abi_version)
    } else {
        format!(
            "{} (pfm speaks {}: mismatch)",
            pmu.abi_version,
            perfmon::abi::PFM_ABI_VERSION
        )
    };
    line("perfmon ABI version", abi);
    line("PMU model", pmu.model.clone());
    line(
        "counters",
        format!(
            "{} (PMC {}, PMD {})",
            pmu.counters().len(),
            ranges(pmu.impl_pmcs),
            ranges(pmu.impl_pmds)
        ),
    );
    line("counter width", format!("{} bits", pmu.counter_width));
    line(
        "overflow vector",
        if pmu.vector == 0 {
            "none".to_string()
        } else {
            format!("{:#x} ({})", pmu.vector, pmu.vector)
        },
    );
    line("events", format!("{} (see 'pfm list')", pmu.events.len()));
    line("live contexts", opt(&sys.live_contexts));
    line("zombie contexts", opt(&sys.zombie_contexts));
    if sys.param_pmu.is_some() || sys.param_soft_width.is_some() {
        line(
            "module parameters",
            format!(
                "pmu={} soft_width={}",
                opt(&sys.param_pmu),
                opt(&sys.param_soft_width)
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
        let table = list_table(&pmu);
        assert!(table.contains("context-switches OR cs"), "{table}");
        let v = perfmon::json::parse(&list_json(&pmu).to_json()).unwrap();
        let events = v.get("events").and_then(|e| e.as_array()).unwrap();
        assert_eq!(events.len(), 3);
        for e in events {
            let name = e.get("name").and_then(|n| n.as_str()).unwrap();
            let code = e.get("code").and_then(|c| c.as_u64()).unwrap();
            assert!(table.contains(&format!("[code {code:#x}]")), "{name}");
            assert!(table.contains(name));
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
        let table = info_table(&pmu, &sys);
        assert!(table.contains("PMU model              soft"), "{table}");
        assert!(table.contains("4 (PMC 0-3, PMD 0-3)"), "{table}");
        assert!(table.contains("0xec (236)"), "{table}");
        assert!(table.contains("live contexts          2"), "{table}");
        let v = perfmon::json::parse(&info_json(&pmu, &sys).to_json()).unwrap();
        assert_eq!(v.get("model").and_then(|m| m.as_str()), Some("soft"));
        assert_eq!(v.get("vector").and_then(|m| m.as_u64()), Some(0xec));
        let live = v
            .get("sysfs")
            .and_then(|s| s.get("live_contexts"))
            .and_then(|l| l.as_u64());
        assert_eq!(live, Some(2));
    }
}
