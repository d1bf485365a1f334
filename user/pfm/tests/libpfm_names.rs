//! Event names through libpfm4 with `LIBPFM_FORCE_PMU=skl`, as `pfm stat`
//! resolves them for the `intel_arch_sim` model. One test per binary: the
//! variable must be set before libpfm4 initializes, once per process.

use perfmon::{Error, Event, PmuInfo};
use pfm_cli::events::{Resolver, Table, PMC_INT};

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

#[test]
fn names_through_libpfm4() {
    std::env::set_var("LIBPFM_FORCE_PMU", "skl");
    let intel = model(
        "intel_arch_sim",
        &[("cpu-cycles", 0x1003c), ("instructions", 0x100c0)],
    );
    let r = Resolver::new(&intel);
    match r.table() {
        Table::Pmu(_, p) => assert_eq!(p.name, "skl"),
        Table::None(why) => {
            // Only a build without libpfm.a on purpose may get here.
            assert_eq!(
                option_env!("LIBPFM_A"),
                Some("none"),
                "no libpfm4 table: {why}"
            );
            return;
        }
    }
    // The module's own names win; raw codes as perf takes them, INT dropped.
    let m = r.resolve("instructions").unwrap();
    assert_eq!((m.event.code, m.libpfm), (0x100c0, None));
    assert_eq!(r.resolve("r5100c0").unwrap().event.code, 0x4100c0);
    // libpfm4's: its encoding (EN, USR, event, umask) without INT.
    let l = r.resolve("INST_RETIRED.ANY_P:u").unwrap();
    assert_eq!(l.event.name, "INST_RETIRED.ANY_P:u");
    assert_eq!(l.event.code, 0x4100c0);
    assert_eq!(l.event.code & PMC_INT, 0);
    assert!(l
        .libpfm
        .as_deref()
        .is_some_and(|q| q.starts_with("skl::INST_RETIRED:ANY_P")));
    assert_eq!(
        intel.generic(l.event.code),
        Some(perfmon::Generic::Instructions)
    );
    let c = r.resolve("CPU_CLK_UNHALTED.THREAD_P").unwrap();
    assert_eq!(c.event.code, 0x41003c, "user mode by default");
    // An unknown name: one line, naming libpfm4's closest names.
    let err = r.resolve("INST_RETIRD.ANY_P:u").unwrap_err();
    match &err {
        Error::UnknownEvent {
            suggestions, table, ..
        } => {
            assert_eq!(table.as_deref(), Some("skl"));
            assert_eq!(
                suggestions.first().map(String::as_str),
                Some("INST_RETIRED.ANY_P")
            );
        }
        other => panic!("{other:?}"),
    }
    let msg = err.to_string();
    eprintln!("{msg}");
    assert!(!msg.contains('\n'), "{msg}");
    assert!(
        msg.starts_with(
            "unknown event 'INST_RETIRD.ANY_P:u' for PMU model 'intel_arch_sim' or libpfm4 PMU \
             'skl'; did you mean 'INST_RETIRED.ANY_P'"
        ),
        "{msg}"
    );
    // A bad modifier is libpfm4's reason, on one line.
    let err = r
        .resolve("INST_RETIRED.ANY_P:bogus=1")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("libpfm4 cannot encode") && !err.contains('\n'),
        "{err}"
    );
    // A list: more events than general-purpose counters is refused.
    let five: Vec<String> = ["r1", "r2", "r3", "r4", "INST_RETIRED.ANY_P"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert!(matches!(
        r.resolve_list(&five),
        Err(Error::TooManyEvents { counters: 4, .. })
    ));
    // An AMD model finds no AMD PMU in a forced Intel table.
    let amd = model("amd64", &[("cpu-cycles", 0x10076)]);
    let ra = Resolver::new(&amd);
    assert!(matches!(ra.table(), Table::None(why) if why.contains("LIBPFM_FORCE_PMU=skl")));
    let err = ra.resolve("INST_RETIRED.ANY_P").unwrap_err().to_string();
    assert!(err.contains("no libpfm4 table"), "{err}");
    // The soft model's names stay the module's: libpfm4 is not asked.
    let soft = model("soft", &[("task-clock", 1)]);
    let rs = Resolver::new(&soft);
    match rs.resolve("INST_RETIRED.ANY_P").unwrap_err() {
        Error::UnknownEvent { table, .. } => assert_eq!(table, None),
        other => panic!("{other:?}"),
    }
}
