//! The types against serde_json and against their documentation.

use super::*;

/// A summary with every optional field set, so every field name is seen.
fn full_stat() -> Stat {
    let stats = Stats::of(&[10, 20, 30]);
    Stat {
        schema_version: SCHEMA_VERSION,
        kind: StatKind::Summary,
        model: "intel_arch_sim".into(),
        command: Some(vec!["sleep".into(), "1".into()]),
        pid: Some(42),
        inherit: Some(true),
        pids: Some(vec![42, 43]),
        tid: Some(42),
        run: Some(1),
        runs: Some(3),
        interval_s: Some(0.2),
        counters: vec![Counter {
            event: "INST_RETIRED.ANY_P:u".into(),
            code: 0x4100c0,
            pmd: 0,
            value: 20,
            unit: Some("ns".into()),
            msec: Some(0.00002),
            metric: Some(Metric {
                value: 0.5,
                unit: "insn per cycle".into(),
            }),
            perf_value: Some(19),
            stats: stats.clone(),
            libpfm: Some("skl::INST_RETIRED:ANY_P:k=0:u=1".into()),
            set: Some(1),
            time_enabled_ns: Some(3),
            time_running_ns: Some(2),
            running_pct: Some(66.67),
            estimate: Some(30),
            estimate_stats: stats.clone(),
        }],
        time_enabled_ns: 1,
        time_running_ns: 1,
        elapsed_ns: 1,
        elapsed_s: 1e-9,
        elapsed_stats: stats,
        user_s: Some(0.0),
        sys_s: Some(0.0),
        exit_code: Some(0),
        exit_signal: Some(9),
        interrupted: Some(false),
        target_exited: Some(false),
        multiplex: Some(Multiplex {
            sets: 3,
            counters: 2,
            switch_ns: Some(4_000_000),
            switch_on_overflow: Some(2),
            period: Some(5),
        }),
        lost_threads: Some(1),
        threads: Some(vec![ThreadCounts {
            tid: 43,
            pid: 42,
            comm: Some("sleep".into()),
            exited: true,
            revoked: false,
            values: vec![7],
            time_enabled_ns: 5,
            time_running_ns: 4,
        }]),
    }
}

fn full_list() -> List {
    let attr = LibpfmAttr {
        name: "ANY_P".into(),
        description: "d".into(),
        default: true,
    };
    List {
        schema_version: SCHEMA_VERSION,
        model: "intel_arch_sim".into(),
        counters: 4,
        counter_width: 48,
        events: vec![ListEvent {
            name: "instructions".into(),
            code: 0x100c0,
            aliases: vec![],
            description: String::new(),
        }],
        libpfm: Some(LibpfmTable {
            pmu: "skl".into(),
            description: "Intel Skylake".into(),
            forced: true,
            events: vec![LibpfmEvent {
                name: "INST_RETIRED".into(),
                description: "d".into(),
                umasks: vec![attr.clone()],
                modifiers: vec![attr],
            }],
        }),
        libpfm_note: Some("n".into()),
    }
}

fn full_info() -> Info {
    Info {
        schema_version: SCHEMA_VERSION,
        abi_version: 1,
        tool_abi_version: 1,
        model: "soft".into(),
        num_pmcs: 4,
        num_pmds: 4,
        impl_pmcs: 15,
        impl_pmds: 15,
        counters: 4,
        counter_width: 64,
        vector: 236,
        events: 3,
        sysfs: Sysfs {
            abi_version: Some(1),
            pmu_model: Some("soft".into()),
            live_contexts: Some(1),
            zombie_contexts: Some(0),
            vector: Some(236),
        },
        params: Params {
            pmu: Some("soft".into()),
            soft_width: Some(64),
        },
        libpfm_pmu: Some("skl".into()),
        core_types: vec!["P-core".into(), "E-core".into()],
    }
}

fn full_report() -> Report {
    Report {
        schema_version: SCHEMA_VERSION,
        file: "pfm.data".into(),
        model: "soft".into(),
        event: "task-clock".into(),
        period: 2_000_000,
        command: Some(vec!["prog".into()]),
        pid: Some(42),
        pids: Some(vec![42]),
        tids: Some(vec![42, 43]),
        inherit: false,
        samples: 10,
        lost: 1,
        counted: Some(20_000_001),
        duration_ns: Some(30_000_000),
        complete: true,
        sort: "comm,dso,sym".into(),
        children: true,
        call_graph: Some("caller".into()),
        rows: vec![ReportRow {
            overhead_pct: 80.0,
            samples: 8,
            children: Some(9),
            children_pct: Some(90.0),
            comm: Some("prog".into()),
            pid: None,
            tid: None,
            dso: Some("prog".into()),
            dso_path: Some("/bin/prog".into()),
            symbol: Some("prog::hot".into()),
            callchain: Some(vec![ChainNode {
                symbol: "prog::hot".into(),
                samples: 9,
                pct: 90.0,
                next: vec![ChainNode {
                    symbol: "main".into(),
                    samples: 9,
                    pct: 90.0,
                    next: vec![],
                }],
            }]),
        }],
    }
}

/// A report of schema 1 as pfm wrote it before the Children column and
/// the sort keys: still read.
#[test]
fn an_earlier_report_still_reads() {
    let text = r#"{"schema_version":1,"file":"pfm.data","model":"soft","event":"task-clock","period":2000000,"inherit":true,"samples":10,"lost":0,"complete":true,"sort":"sym","rows":[{"overhead_pct":80.0,"samples":8,"comm":"prog","dso":"prog","dso_path":"/bin/prog","symbol":"prog::hot"}]}"#;
    let r: Report = serde_json::from_str(text).unwrap();
    assert!(!r.children && r.call_graph.is_none());
    assert_eq!(r.rows[0].comm.as_deref(), Some("prog"));
    assert_eq!(r.rows[0].callchain, None);
}

fn script_sample() -> ScriptSample {
    ScriptSample {
        schema_version: SCHEMA_VERSION,
        time_ns: 12_345_678_901,
        tid: 43,
        pid: 42,
        comm: "prog".into(),
        cpu: 1,
        event: "task-clock".into(),
        period: 2_000_003,
        stack: vec![
            ScriptFrame {
                ip: 0x5555_0000_1234,
                symbol: Some("prog::hot".into()),
                offset: Some(0x14),
                dso: "/bin/prog".into(),
            },
            ScriptFrame {
                ip: 0x7fff_0000_0000,
                symbol: None,
                offset: None,
                dso: "[unknown]".into(),
            },
        ],
    }
}

fn annotation() -> Annotation {
    Annotation {
        schema_version: SCHEMA_VERSION,
        symbol: "prog::hot".into(),
        dso: "prog".into(),
        dso_path: "/bin/prog".into(),
        address: 0x1000,
        size: 8,
        event: "cycles".into(),
        samples: 4,
        instructions: vec![AnnotatedInstruction {
            address: 0x1000,
            offset: 0,
            text: "dec rdi".into(),
            samples: 4,
            pct: 100.0,
        }],
    }
}

#[test]
fn script_and_annotate_documents_round_trip() {
    let s = script_sample();
    let text = serde_json::to_string(&s).unwrap();
    assert!(!text.contains("null"), "{text}");
    assert_eq!(serde_json::from_str::<ScriptSample>(&text).unwrap(), s);
    assert!(serde_json::from_str::<ScriptSample>(&text.replace("\"cpu\"", "\"cpux\"")).is_err());
    let a = annotation();
    let text = serde_json::to_string(&a).unwrap();
    assert_eq!(serde_json::from_str::<Annotation>(&text).unwrap(), a);
}

#[test]
fn documents_round_trip() {
    let r = full_report();
    assert_eq!(
        serde_json::from_str::<Report>(&serde_json::to_string(&r).unwrap()).unwrap(),
        r
    );
    let s = full_stat();
    let text = serde_json::to_string(&s).unwrap();
    assert!(text.contains(r#""type":"summary""#), "{text}");
    assert_eq!(serde_json::from_str::<Stat>(&text).unwrap(), s);
    let l = full_list();
    assert_eq!(
        serde_json::from_str::<List>(&serde_json::to_string(&l).unwrap()).unwrap(),
        l
    );
    let i = full_info();
    assert_eq!(
        serde_json::from_str::<Info>(&serde_json::to_string(&i).unwrap()).unwrap(),
        i
    );
}

#[test]
fn optional_fields_are_left_out() {
    let mut s = full_stat();
    s.command = None;
    s.run = None;
    s.counters[0].stats = None;
    let text = serde_json::to_string(&s).unwrap();
    assert!(!text.contains("\"command\""), "{text}");
    assert!(!text.contains("\"run\""), "{text}");
    assert!(!text.contains("\"stats\""), "{text}");
    assert_eq!(serde_json::from_str::<Stat>(&text).unwrap(), s);
}

#[test]
fn unknown_fields_are_rejected() {
    let mut v = serde_json::to_value(full_stat()).unwrap();
    v["surprise"] = serde_json::json!(1);
    assert!(serde_json::from_value::<Stat>(v).is_err());
    let mut v = serde_json::to_value(full_stat()).unwrap();
    v["counters"][0]["surprise"] = serde_json::json!(1);
    assert!(serde_json::from_value::<Stat>(v).is_err());
    let mut v = serde_json::to_value(full_list()).unwrap();
    v["libpfm"]["events"][0]["umasks"][0]["x"] = serde_json::json!(1);
    assert!(serde_json::from_value::<List>(v).is_err());
    let mut v = serde_json::to_value(full_info()).unwrap();
    v["sysfs"]["x"] = serde_json::json!(1);
    assert!(serde_json::from_value::<Info>(v).is_err());
    let mut v = serde_json::to_value(full_report()).unwrap();
    v["rows"][0]["x"] = serde_json::json!(1);
    assert!(serde_json::from_value::<Report>(v).is_err());
    // A missing required field is an error too.
    let mut v = serde_json::to_value(full_stat()).unwrap();
    v.as_object_mut().unwrap().remove("counters");
    assert!(serde_json::from_value::<Stat>(v).is_err());
}

#[test]
fn statistics() {
    let s = Stats::of(&[10, 20, 30]).unwrap();
    assert_eq!((s.runs, s.min, s.max), (3, 10, 30));
    assert_eq!(s.mean, 20.0);
    // Sample variance: (100 + 0 + 100) / 2 = 100.
    assert_eq!(s.stddev, 10.0);
    // perf's noise: stddev / sqrt(3) / mean.
    assert!((s.noise_pct - 100.0 * 10.0 / 3f64.sqrt() / 20.0).abs() < 1e-12);
    let one = Stats::of(&[7]).unwrap();
    assert_eq!((one.mean, one.stddev, one.noise_pct), (7.0, 0.0, 0.0));
    let zeros = Stats::of(&[0, 0]).unwrap();
    assert_eq!(zeros.noise_pct, 0.0);
    assert!(Stats::of(&[]).is_none());
}

/// Every key of `v`, recursively.
fn keys(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                out.push(k.clone());
                keys(v, out);
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| keys(v, out)),
        _ => {}
    }
}

#[test]
fn every_field_is_documented() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../Documentation/pfm.rst");
    let doc = std::fs::read_to_string(path).expect("Documentation/pfm.rst");
    let mut all = Vec::new();
    keys(&serde_json::to_value(full_stat()).unwrap(), &mut all);
    keys(&serde_json::to_value(full_list()).unwrap(), &mut all);
    keys(&serde_json::to_value(full_info()).unwrap(), &mut all);
    keys(&serde_json::to_value(full_report()).unwrap(), &mut all);
    keys(&serde_json::to_value(script_sample()).unwrap(), &mut all);
    keys(&serde_json::to_value(annotation()).unwrap(), &mut all);
    all.sort();
    all.dedup();
    let missing: Vec<&String> = all
        .iter()
        .filter(|k| !doc.contains(&format!("``{k}``")))
        .collect();
    assert!(
        missing.is_empty(),
        "fields not in Documentation/pfm.rst: {missing:?}"
    );
    assert!(doc.contains(&format!("``schema_version`` is {SCHEMA_VERSION}")));
}

#[test]
fn pprof_function_name_of_a_location() {
    use pprof::{Function, Line, Location, Profile};
    let p = Profile {
        string_table: vec!["".into(), "leaf".into()],
        function: vec![Function {
            id: 7,
            name: 1,
            ..Default::default()
        }],
        location: vec![
            Location {
                id: 3,
                line: vec![Line {
                    function_id: 7,
                    ..Default::default()
                }],
                ..Default::default()
            },
            Location {
                id: 4,
                address: 0x1234,
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    assert_eq!(p.function_name(3), "leaf");
    // No line (an address without a symbol), no such location.
    assert_eq!(p.function_name(4), "");
    assert_eq!(p.function_name(5), "");
}
