//! `pfm report` against this test program itself: its own functions'
//! addresses, resolved through its own `/proc/self/maps` and its own ELF
//! symbols, then the table, the JSON document, the pprof profile decoded
//! back with prost and the SVG parsed as XML.

use std::io::Read;
use std::path::PathBuf;

use prost::Message;

use super::*;
use crate::cli::{parse_graph, parse_sort, Graph, Order};
use crate::data_file::{Finish, Header, Maps, Recording, Sample, Thread, Writer};
use crate::symbols::{ElfSymbols, Function};

/// Two functions of this program, kept out of line and apart.
#[inline(never)]
fn report_test_hot_function(n: u64) -> u64 {
    (0..std::hint::black_box(n)).fold(1u64, |a, i| a.wrapping_mul(31).wrapping_add(i))
}

#[inline(never)]
fn report_test_cold_function(n: u64) -> u64 {
    (0..std::hint::black_box(n)).fold(7u64, |a, i| a.rotate_left(3) ^ i)
}

fn addr_of(f: fn(u64) -> u64) -> u64 {
    // Keep both alive in the binary whatever the optimizer thinks.
    std::hint::black_box(f(3));
    f as usize as u64
}

/// The table of perf report without -g: Self only, no trees.
const FLAT: View = View {
    children: false,
    tree: None,
};

fn me() -> PathBuf {
    std::env::current_exe().unwrap()
}

fn header() -> Header {
    Header {
        pfm_version: "test".into(),
        model: "soft".into(),
        event: "task-clock".into(),
        code: 1,
        unit: "ns".into(),
        period: 2_000_000,
        command: Some(vec!["pfm-test".into()]),
        pid: Some(std::process::id()),
        pages: 1,
        start_unix_ns: 1_700_000_000_000_000_000,
        start_monotonic_ns: 1_000,
        counter_width: 64,
        ..Header::default()
    }
}

/// A recording of this process: `hot` samples in the hot function,
/// `cold` in the cold one, `other` at an address no map holds.
fn recording(hot: u64, cold: u64, other: u64) -> Recording {
    let pid = std::process::id();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let (h, c) = (
        addr_of(report_test_hot_function),
        addr_of(report_test_cold_function),
    );
    let mut samples = Vec::new();
    let mut push = |ip: u64, n: u64| {
        for _ in 0..n {
            let seq = samples.len() as u64;
            samples.push(Sample {
                tid: pid,
                pid,
                seq,
                ip,
                tstamp: 2_000 + seq,
                ..Sample::default()
            });
        }
    };
    // Inside each function, past its first instruction.
    push(h + 1, hot);
    push(c + 1, cold);
    push(8, other);
    Recording {
        header: header(),
        samples,
        maps: vec![Maps {
            pid,
            time_ns: 1_500,
            maps,
        }],
        threads: vec![Thread {
            tid: pid,
            pid,
            comm: "pfm-test".into(),
            time_ns: 1_500,
        }],
        finish: Some(Finish {
            end_monotonic_ns: 1_000 + 30_000_000,
            samples: hot + cold + other,
            written: hot + cold + other,
            lost: 2,
            counted: Some((hot + cold + other + 2) * 2_000_000 + 5),
            ..Finish::default()
        }),
        vdso: None,
        truncated: false,
    }
}

#[test]
fn this_programs_elf_resolves_its_functions() {
    let elf = ElfSymbols::load(&me()).unwrap();
    assert!(elf.functions() > 100, "{} functions", elf.functions());
    let maps = crate::maps::parse(&std::fs::read_to_string("/proc/self/maps").unwrap());
    let h = addr_of(report_test_hot_function);
    let m = maps.iter().find(|m| m.contains(h)).unwrap();
    assert!(m.is_exec() && m.is_file(), "{m:?}");
    let vaddr = elf.vaddr_of(m.file_offset(h)).unwrap();
    let f = elf.function_at(vaddr).unwrap();
    assert!(
        f.name.ends_with("report_test_hot_function"),
        "{} ({})",
        f.name,
        f.raw
    );
    assert!(f.size > 0);
    // The address after the function's end is not in it as an
    // instruction pointer, and is as a return address (a call at its end).
    let end = h + (f.start + f.size - vaddr);
    let mut sym = Symbolizer::new(&recording(0, 0, 0).maps, None);
    let pid = std::process::id();
    let as_ip = sym.resolve(pid, 2_000, end, false);
    let as_return = sym.resolve(pid, 2_000, end, true);
    assert!(
        as_return
            .function
            .as_ref()
            .is_some_and(|f| f.name.ends_with("report_test_hot_function")),
        "{as_return:?}"
    );
    assert_ne!(as_ip.function, as_return.function);
    // No map holds address 8; another pid has no maps at all.
    assert_eq!(&*sym.resolve(pid, 2_000, 8, false).dso, "[unknown]");
    assert_eq!(&*sym.resolve(pid + 1, 2_000, h, false).dso, "[unknown]");
    assert!(sym.warnings.is_empty(), "{:?}", sym.warnings);
}

#[test]
fn vdso_addresses_resolve_against_the_recorded_image() {
    let image = crate::record::own_vdso().expect("this process's vDSO");
    let maps_text = std::fs::read_to_string("/proc/self/maps").unwrap();
    let vdso = crate::maps::parse(&maps_text)
        .into_iter()
        .find(|m| m.path == "[vdso]")
        .unwrap();
    let snapshot = [Maps {
        pid: 1,
        time_ns: 0,
        maps: maps_text,
    }];
    let names = |sym: &mut Symbolizer| -> Vec<String> {
        (vdso.start..vdso.end)
            .step_by(4)
            .filter_map(|a| {
                sym.resolve(1, 0, a, false)
                    .function
                    .map(|f| f.name.to_string())
            })
            .collect()
    };
    let mut with = Symbolizer::new(&snapshot, Some(&image));
    let found = names(&mut with);
    assert!(
        found.iter().any(|n| n.contains("clock_gettime")),
        "{found:?}"
    );
    assert_eq!(&*with.resolve(1, 0, vdso.start, false).dso, "[vdso]");
    // Without the image: the mapping, no function.
    let mut without = Symbolizer::new(&snapshot, None);
    assert!(names(&mut without).is_empty());
}

#[test]
fn a_sample_before_the_first_maps_uses_the_earliest_later_one() {
    let mut r = recording(1, 0, 0);
    r.samples[0].tstamp = 10;
    let p = Profile::build(&r);
    let f = &p.samples[0].stack[0];
    assert!(f.function.is_some(), "{f:?}");
    assert_eq!(PathBuf::from(&*f.dso), me());
}

#[test]
fn table_shares_and_order() {
    let p = Profile::build(&recording(8, 2, 0));
    let rows = p.rows(&Sort::default(), FLAT);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0].samples, 8);
    assert!(rows[0]
        .key
        .symbol
        .as_deref()
        .unwrap()
        .ends_with("report_test_hot_function"));
    assert!(rows[1]
        .key
        .symbol
        .as_deref()
        .unwrap()
        .ends_with("report_test_cold_function"));
    let file = "pfm.data";
    let table = table::render(&p, file, &Sort::default(), FLAT);
    let exe = me().file_name().unwrap().to_string_lossy().into_owned();
    let lines: Vec<&str> = table.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(lines.len(), 2, "{table}");
    assert!(
        lines[0].starts_with("    80.00%        8  pfm-test  "),
        "{table}"
    );
    assert!(lines[0].contains(&format!("  {exe}  ")), "{table}");
    assert!(lines[0].ends_with("report_test_hot_function"), "{table}");
    assert!(
        lines[1].starts_with("    20.00%        2  pfm-test  "),
        "{table}"
    );
    assert!(
        table.contains("# 10 samples of task-clock, one every 2000000 ns (PMU model soft); 2 lost"),
        "{table}"
    );
    assert!(table.contains("# Overhead  Samples  Command"), "{table}");
    // By shared object (perf's --sort dso: that column alone): one row,
    // all of it.
    let dso = table::render(&p, file, &parse_sort("dso").unwrap(), FLAT);
    let lines: Vec<&str> = dso.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(lines.len(), 1, "{dso}");
    assert_eq!(lines[0], format!("   100.00%       10  {exe}"), "{dso}");
    assert!(!dso.contains("Symbol") && !dso.contains("Command"), "{dso}");
    assert!(dso.contains("# Overhead  Samples  Shared Object"), "{dso}");
}

#[test]
fn shares_are_exact_percentages() {
    // 1/3 and 2/3 of the samples, and an unresolved address.
    let p = Profile::build(&recording(2, 1, 3));
    let doc = p.json("f", &Sort::default(), FLAT);
    let total: u64 = doc.rows.iter().map(|r| r.samples).sum();
    assert_eq!(total, 6);
    let pct: f64 = doc.rows.iter().map(|r| r.overhead_pct).sum();
    assert!((pct - 100.0).abs() < 1e-9, "{pct}");
    let unknown = doc
        .rows
        .iter()
        .find(|r| r.dso.as_deref() == Some("[unknown]"))
        .unwrap();
    assert_eq!((unknown.samples, unknown.overhead_pct), (3, 50.0));
    assert_eq!(unknown.symbol.as_deref(), Some("0x0000000000000008"));
    let table = table::render(&p, "f", &Sort::default(), FLAT);
    assert!(table.contains("    33.33%        2"), "{table}");
    assert!(table.contains("    16.67%        1"), "{table}");
}

#[test]
fn json_document_is_the_documented_type() {
    let p = Profile::build(&recording(8, 2, 0));
    let doc = p.json("pfm.data", &Sort::default(), FLAT);
    let text = serde_json::to_string(&doc).unwrap();
    let back: pfm_json::Report = serde_json::from_str(&text).unwrap();
    assert_eq!(back, doc);
    assert_eq!(
        (doc.samples, doc.lost, doc.counted, doc.duration_ns),
        (10, 2, Some(12 * 2_000_000 + 5), Some(30_000_000))
    );
    assert!(doc.complete && doc.sort == "comm,dso,sym" && !doc.children);
    assert_eq!(doc.call_graph, None);
    assert_eq!(doc.rows[0].overhead_pct, 80.0);
    assert_eq!(doc.rows[0].dso_path, Some(me().display().to_string()));
    assert_eq!(doc.rows[0].comm.as_deref(), Some("pfm-test"));
    assert_eq!((doc.rows[0].pid, doc.rows[0].tid), (None, None));
    assert_eq!(doc.rows[0].children, None);
}

/// The pprof file, gunzipped and decoded.
fn decode_pprof(bytes: &[u8]) -> pfm_json::pprof::Profile {
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut raw)
        .expect("gzip");
    pfm_json::pprof::Profile::decode(raw.as_slice()).expect("profile.proto")
}

#[test]
fn pprof_decodes_to_the_same_samples_and_functions() {
    let p = Profile::build(&recording(8, 2, 1));
    let prof = decode_pprof(&pprof::encode(&p));
    assert_eq!(prof.string_table[0], "");
    let types: Vec<(&str, &str)> = prof
        .sample_type
        .iter()
        .map(|t| (prof.string(t.r#type), prof.string(t.unit)))
        .collect();
    assert_eq!(
        types,
        vec![("samples", "count"), ("task-clock", "nanoseconds")]
    );
    assert_eq!(prof.period, 2_000_000);
    // Samples per leaf function name.
    let mut by_name: HashMap<String, i64> = HashMap::new();
    for s in &prof.sample {
        assert_eq!(s.value[1], s.value[0] * 2_000_000);
        let loc = &prof.location[(s.location_id[0] - 1) as usize];
        assert_eq!(loc.id, s.location_id[0]);
        let name = match loc.line.first() {
            Some(l) => {
                let f = &prof.function[(l.function_id - 1) as usize];
                prof.string(f.name).to_string()
            }
            None => format!("{:#x}", loc.address),
        };
        *by_name.entry(name).or_default() += s.value[0];
        let labels: Vec<&str> = s.label.iter().map(|l| prof.string(l.key)).collect();
        assert_eq!(labels, vec!["pid", "tid", "comm"]);
        assert_eq!(prof.string(s.label[2].str), "pfm-test");
    }
    let count = |suffix: &str| {
        by_name
            .iter()
            .filter(|(n, _)| n.ends_with(suffix))
            .map(|(_, v)| *v)
            .sum::<i64>()
    };
    assert_eq!(count("report_test_hot_function"), 8, "{by_name:?}");
    assert_eq!(count("report_test_cold_function"), 2, "{by_name:?}");
    assert_eq!(by_name.get("0x8"), Some(&1), "{by_name:?}");
    assert_eq!(by_name.values().sum::<i64>(), 11);
    // The resolved locations are in a mapping of this program.
    let exe = me().display().to_string();
    assert!(prof
        .mapping
        .iter()
        .any(|m| prof.string(m.filename) == exe && m.has_functions));
}

/// The same file read by another implementation of profile.proto (the
/// `pprof` crate's, as Parca's and pprof's readers would): the samples,
/// their leaf functions and the period agree with pfm's own decoding.
#[test]
fn pprof_loads_with_the_pprof_crate() {
    use ::pprof::protos::Message as _;
    let p = Profile::build(&recording(8, 2, 1));
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(pprof::encode(&p).as_slice())
        .read_to_end(&mut raw)
        .expect("gzip");
    let other =
        ::pprof::protos::Profile::decode(raw.as_slice()).expect("the pprof crate decodes it");
    let ours = decode_pprof(&pprof::encode(&p));
    assert_eq!(other.sample.len(), ours.sample.len());
    assert_eq!(other.period, 2_000_000);
    let s = |i: i64| other.string_table[i as usize].as_str();
    let mut by_name: HashMap<String, i64> = HashMap::new();
    for sample in &other.sample {
        let loc = other
            .location
            .iter()
            .find(|l| l.id == sample.location_id[0])
            .expect("the leaf's location");
        let name = loc
            .line
            .first()
            .and_then(|l| other.function.iter().find(|f| f.id == l.function_id))
            .map_or(format!("{:#x}", loc.address), |f| s(f.name).to_string());
        *by_name.entry(name).or_default() += sample.value[0];
    }
    let count = |suffix: &str| {
        by_name
            .iter()
            .filter(|(n, _)| n.ends_with(suffix))
            .map(|(_, v)| *v)
            .sum::<i64>()
    };
    assert_eq!(count("report_test_hot_function"), 8, "{by_name:?}");
    assert_eq!(count("report_test_cold_function"), 2, "{by_name:?}");
    assert_eq!(by_name.values().sum::<i64>(), 11);
}

#[test]
fn flamegraph_is_xml_naming_the_functions() {
    let p = Profile::build(&recording(8, 2, 0));
    let folded = flamegraph::collapsed(&p);
    assert_eq!(folded.len(), 2, "{folded:?}");
    assert!(folded
        .iter()
        .any(|l| l.starts_with("pfm-test;") && l.ends_with("report_test_hot_function 8")));
    let svg = flamegraph::svg(&p).unwrap();
    let text = xml_text(&svg);
    assert!(text.contains("report_test_hot_function"), "{text}");
    assert!(text.contains("report_test_cold_function"), "{text}");
    // The subtitle gives the period in its unit (task-clock: ns).
    assert!(text.contains("one every 2000000 ns"), "{text}");
    // Even a profile without samples draws (an empty graph).
    let empty = Profile::build(&recording(0, 0, 0));
    xml_text(&flamegraph::svg(&empty).unwrap());
}

/// The text of an XML document; panics if it is not well formed.
fn xml_text(svg: &[u8]) -> String {
    let mut reader = quick_xml::Reader::from_reader(svg);
    reader.config_mut().check_end_names = true;
    let mut buf = Vec::new();
    let mut text = String::new();
    let mut depth = 0i32;
    loop {
        match reader.read_event_into(&mut buf) {
            Ok(quick_xml::events::Event::Eof) => break,
            Ok(quick_xml::events::Event::Start(_)) => depth += 1,
            Ok(quick_xml::events::Event::End(_)) => depth -= 1,
            Ok(quick_xml::events::Event::Text(t)) => {
                text.push_str(&String::from_utf8_lossy(&t));
                text.push('\n');
            }
            Ok(_) => {}
            Err(e) => panic!("not XML at {}: {e}", reader.buffer_position()),
        }
        buf.clear();
    }
    assert_eq!(depth, 0, "unclosed elements");
    text
}

#[test]
fn report_reads_files_and_refuses_others() {
    let dir = std::env::temp_dir().join(format!("pfm-report-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let data = dir.join("pfm.data");
    let r = recording(8, 2, 0);
    let mut w = Writer::create(&data).unwrap();
    w.header(&r.header).unwrap();
    w.maps(&r.maps[0]).unwrap();
    w.thread(&r.threads[0]).unwrap();
    for s in &r.samples {
        w.sample(s).unwrap();
    }
    w.finish(r.finish.as_ref().unwrap()).unwrap();
    w.into_inner().unwrap();
    let args = ReportArgs {
        input: data.clone(),
        sort: Sort::default(),
        children: false,
        no_children: false,
        graph: None,
        filter: FilterArgs::default(),
        pprof: Some(dir.join("p.pb.gz")),
        flamegraph: Some(dir.join("f.svg")),
        out: Default::default(),
    };
    let out = dir.join("out.json");
    assert_eq!(report(&args, true, Some(&out)).unwrap(), 0);
    let doc: pfm_json::Report =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(doc.samples, 10);
    assert_eq!(
        decode_pprof(&std::fs::read(dir.join("p.pb.gz")).unwrap())
            .sample
            .iter()
            .map(|s| s.value[0])
            .sum::<i64>(),
        10
    );
    xml_text(&std::fs::read(dir.join("f.svg")).unwrap());
    // Not a record file: one line, status 1.
    let not = dir.join("not.data");
    std::fs::write(&not, "hello\n").unwrap();
    let e = report(
        &ReportArgs {
            input: not.clone(),
            sort: Sort::default(),
            children: false,
            no_children: false,
            graph: None,
            filter: FilterArgs::default(),
            pprof: None,
            flamegraph: None,
            out: Default::default(),
        },
        false,
        Some(&out),
    )
    .unwrap_err();
    assert_eq!(e.code, 1);
    assert_eq!(
        e.message,
        format!(
            "{}: not a pfm record file (no PFMDATA magic)",
            not.display()
        )
    );
    // Missing: one line naming it.
    let e = report(
        &ReportArgs {
            input: dir.join("missing.data"),
            sort: Sort::default(),
            children: false,
            no_children: false,
            graph: None,
            filter: FilterArgs::default(),
            pprof: None,
            flamegraph: None,
            out: Default::default(),
        },
        false,
        Some(&out),
    )
    .unwrap_err();
    assert!(e.message.starts_with("cannot read "), "{}", e.message);
    assert!(!e.message.contains('\n'));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A frame in function `name` of `/bin/prog` (functions 0x100 apart, in
/// name order, so their keys differ), without a file to read.
fn frame(name: &str) -> Frame {
    let start = 0x1000 + 0x100 * u64::from(name.bytes().fold(0u8, |a, b| a.wrapping_add(b)));
    Frame {
        address: start + 4,
        dso: "/bin/prog".into(),
        function: Some(Function {
            start,
            size: 0x100,
            raw: name.into(),
            name: name.into(),
        }),
        mapping: Some((0x1000, 0x100000, 0)),
        offset: Some(4),
    }
}

/// A profile of call stacks, each given innermost first, `n` samples of
/// each, of thread `tid` of process 10.
fn stacks(list: &[(u32, &[&str], u64)]) -> Profile {
    let mut samples = Vec::new();
    for &(tid, names, n) in list {
        for _ in 0..n {
            samples.push(StackSample {
                pid: 10,
                tid,
                comm: if tid == 10 { "prog" } else { "worker" }.into(),
                cpu: 0,
                time_ns: 0,
                period: 1000,
                stack: names.iter().map(|n| frame(n)).collect(),
            });
        }
    }
    Profile {
        header: Header {
            call_chains: true,
            ..header()
        },
        finish: None,
        samples,
        warnings: Vec::new(),
    }
}

/// main → a → b → c (6 samples in c), main → a → d (2 in d), 2 in main.
fn abc() -> Profile {
    stacks(&[
        (10, &["c", "b", "a", "main"], 6),
        (10, &["d", "a", "main"], 2),
        (10, &["main"], 2),
    ])
}

fn names(rows: &[Row]) -> Vec<(String, u64, u64)> {
    rows.iter()
        .map(|r| {
            (
                r.key.symbol.clone().unwrap_or_default(),
                r.children,
                r.samples,
            )
        })
        .collect()
}

fn row<'a>(rows: &'a [Row], name: &str) -> &'a Row {
    rows.iter()
        .find(|r| r.key.symbol.as_deref() == Some(name))
        .unwrap()
}

/// A tree as `name(samples)[next...]`.
fn shape(nodes: &[Node]) -> String {
    nodes
        .iter()
        .map(|n| {
            if n.next.is_empty() {
                format!("{}({})", n.name, n.samples)
            } else {
                format!("{}({})[{}]", n.name, n.samples, shape(&n.next))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn children_count_every_function_of_a_stack_once() {
    let p = abc();
    let sym = parse_sort("sym").unwrap();
    let children = View {
        children: true,
        tree: None,
    };
    let rows = p.rows(&sym, children);
    let s = |n: &str, c: u64, s: u64| (n.to_string(), c, s);
    assert_eq!(
        names(&rows),
        vec![
            s("main", 10, 2),
            s("a", 8, 0),
            // Ties of Children by Self.
            s("c", 6, 6),
            s("b", 6, 0),
            s("d", 2, 2),
        ]
    );
    // Self only: the functions sampled, ties in key order.
    let rows = p.rows(&sym, FLAT);
    assert_eq!(
        names(&rows),
        vec![s("c", 6, 6), s("d", 2, 2), s("main", 2, 2)]
    );
    // A recursion counts once in Children.
    let rec = stacks(&[(10, &["f", "f", "f", "main"], 3)]);
    let rows = rec.rows(&sym, children);
    assert_eq!(names(&rows), vec![s("f", 3, 3), s("main", 3, 0)]);
    // Keys of the thread alone: Children is Self.
    let rows = p.rows(&parse_sort("comm,tid").unwrap(), children);
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].children, rows[0].samples), (10, 10));
}

#[test]
fn call_trees_in_caller_and_callee_order() {
    let p = abc();
    let sym = parse_sort("sym").unwrap();
    let view = |children: bool, order: Order| View {
        children,
        tree: Some((order, 0.0)),
    };
    // Callee order: from the function out to the outermost caller.
    let rows = p.rows(&sym, view(true, Order::Callee));
    assert_eq!(shape(&row(&rows, "c").tree), "c(6)[b(6)[a(6)[main(6)]]]");
    assert_eq!(shape(&row(&rows, "a").tree), "a(8)[main(8)]");
    // Caller order, with children: from the function down to where the
    // samples were.
    let rows = p.rows(&sym, view(true, Order::Caller));
    assert_eq!(shape(&row(&rows, "a").tree), "a(8)[b(6)[c(6)] d(2)]");
    assert_eq!(
        shape(&row(&rows, "main").tree),
        "main(10)[a(8)[b(6)[c(6)] d(2)]]"
    );
    assert_eq!(shape(&row(&rows, "c").tree), "c(6)");
    // Caller order, self only: from the outermost caller down to it.
    let rows = p.rows(&sym, view(false, Order::Caller));
    assert_eq!(shape(&row(&rows, "c").tree), "main(6)[a(6)[b(6)[c(6)]]]");
    let rows = p.rows(&sym, view(false, Order::Callee));
    assert_eq!(shape(&row(&rows, "d").tree), "d(2)[a(2)[main(2)]]");
    // The threshold leaves out branches under it (percent of all 10).
    let rows = p.rows(
        &sym,
        View {
            children: true,
            tree: Some((Order::Caller, 25.0)),
        },
    );
    assert_eq!(shape(&row(&rows, "a").tree), "a(8)[b(6)[c(6)]]");
    // The JSON document carries the trees.
    let doc = p.json("f", &sym, view(true, Order::Caller));
    assert!(doc.children);
    assert_eq!(doc.call_graph.as_deref(), Some("caller"));
    let a = doc
        .rows
        .iter()
        .find(|r| r.symbol.as_deref() == Some("a"))
        .unwrap();
    assert_eq!((a.children, a.children_pct), (Some(8), Some(80.0)));
    let tree = a.callchain.as_ref().unwrap();
    assert_eq!(tree[0].symbol, "a");
    assert_eq!(tree[0].next[0].symbol, "b");
    assert_eq!(tree[0].next[0].next[0].symbol, "c");
    assert_eq!(tree[0].next[1].pct, 20.0);
}

#[test]
fn trees_draw_as_perf_graph_style() {
    let p = abc();
    let rows = p.rows(
        &parse_sort("sym").unwrap(),
        View {
            children: true,
            tree: Some((Order::Caller, 0.0)),
        },
    );
    let lines = table::tree_lines(&row(&rows, "a").tree, 10, "  ");
    assert_eq!(
        lines,
        vec![
            "  |",
            "  ---a",
            "     |",
            "     |--60.00%--b",
            "     |          c",
            "     |",
            "      --20.00%--d",
        ],
        "{lines:#?}"
    );
    // The table: Children and Self, the tree under its row.
    let table = table::render(
        &p,
        "f",
        &Sort::default(),
        View {
            children: true,
            tree: Some((Order::Caller, 0.5)),
        },
    );
    assert!(
        table.contains("# Children      Self  Samples  Command  Shared Object  Symbol"),
        "{table}"
    );
    assert!(
        table.contains("\n    80.00%     0.00%        0  prog     prog           [.] a\n"),
        "{table}"
    );
    assert!(table.contains("# call trees in caller order"), "{table}");
    assert!(table.contains("            ---a\n"), "{table}");
}

#[test]
fn sort_keys_and_their_combinations() {
    let p = stacks(&[(10, &["hot", "main"], 3), (11, &["hot", "run"], 5)]);
    let rows = p.rows(&parse_sort("tid").unwrap(), FLAT);
    let by_tid: Vec<(Option<u32>, u64)> = rows.iter().map(|r| (r.key.tid, r.samples)).collect();
    assert_eq!(by_tid, vec![(Some(11), 5), (Some(10), 3)]);
    assert!(rows
        .iter()
        .all(|r| r.key.comm.is_none() && r.key.symbol.is_none()));
    let rows = p.rows(&parse_sort("pid,sym").unwrap(), FLAT);
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].key.pid, rows[0].samples), (Some(10), 8));
    let rows = p.rows(&parse_sort("comm,sym").unwrap(), FLAT);
    let keys: Vec<(String, u64)> = rows
        .iter()
        .map(|r| (r.key.comm.as_deref().unwrap().to_string(), r.samples))
        .collect();
    assert_eq!(keys, vec![("worker".into(), 5), ("prog".into(), 3)]);
    // The columns follow the keys' order.
    let table = table::render(&p, "f", &parse_sort("tid,comm,dso,sym").unwrap(), FLAT);
    assert!(
        table.contains("# Overhead  Samples  Tid  Command  Shared Object  Symbol"),
        "{table}"
    );
    assert!(
        table.contains("    62.50%        5  11   worker   prog           [.] hot"),
        "{table}"
    );
    let doc = p.json("f", &parse_sort("comm,tid").unwrap(), FLAT);
    assert_eq!(doc.sort, "comm,tid");
    assert_eq!(doc.rows[0].tid, Some(11));
    assert_eq!(
        (doc.rows[0].dso.as_ref(), doc.rows[0].symbol.as_ref()),
        (None, None)
    );
    // perf's names; errors in one line.
    assert_eq!(parse_sort("symbol").unwrap(), parse_sort("sym").unwrap());
    assert!(parse_sort("sym,sym").unwrap_err().contains("twice"));
    assert!(parse_sort("cpu").unwrap_err().contains("not a key"));
    assert!(parse_sort("").is_err());
    assert_eq!(
        parse_graph("callee,2").unwrap(),
        Graph::Tree {
            order: Order::Callee,
            threshold: 2.0
        }
    );
    assert_eq!(parse_graph("none").unwrap(), Graph::None);
    assert!(parse_graph("fractal")
        .unwrap_err()
        .contains("not supported"));
    assert!(parse_graph("sideways").is_err());
}

#[test]
fn filters_keep_some_threads() {
    let mut r = recording(8, 2, 0);
    r.samples[0].tid = 4242;
    let only = |f: FilterArgs| Profile::build_filtered(&r, &f).samples.len();
    assert_eq!(only(FilterArgs::default()), 10);
    assert_eq!(
        only(FilterArgs {
            tids: vec![4242],
            ..FilterArgs::default()
        }),
        1
    );
    assert_eq!(
        only(FilterArgs {
            comms: vec!["pfm-test".into()],
            ..FilterArgs::default()
        }),
        9
    );
    assert_eq!(
        only(FilterArgs {
            pids: vec![1],
            ..FilterArgs::default()
        }),
        0
    );
    assert_eq!(
        filter_text(&FilterArgs {
            pids: vec![1, 2],
            comms: vec!["x".into()],
            ..FilterArgs::default()
        }),
        "processes 1, 2 and a thread named x"
    );
}

#[test]
fn pprof_weights_are_each_samples_own_period() {
    let mut r = recording(3, 0, 0);
    r.header.random_mask = Some(7);
    r.samples[1].period = Some(2_000_005);
    r.samples[2].period = Some(2_000_001);
    let p = Profile::build(&r);
    assert_eq!(
        p.samples.iter().map(|s| s.period).collect::<Vec<_>>(),
        vec![2_000_000, 2_000_005, 2_000_001]
    );
    let prof = decode_pprof(&pprof::encode(&p));
    let (n, events) = prof
        .sample
        .iter()
        .fold((0, 0), |(n, e), s| (n + s.value[0], e + s.value[1]));
    assert_eq!((n, events), (3, 6_000_006));
}

#[test]
fn script_lines_as_perf_script() {
    let mut r = recording(1, 0, 1);
    r.samples[0].cpu = 3;
    r.samples[0].tstamp = 12_345_678_901_234;
    r.samples[1].period = Some(2_000_007);
    let p = Profile::build(&r);
    let docs: Vec<pfm_json::ScriptSample> = p
        .samples
        .iter()
        .map(|s| script::sample_json(s, "task-clock"))
        .collect();
    let hot = &docs[0];
    assert_eq!(
        (hot.cpu, hot.time_ns, hot.period),
        (3, 12_345_678_901_234, 2_000_000)
    );
    let f = &hot.stack[0];
    assert!(f
        .symbol
        .as_deref()
        .unwrap()
        .ends_with("report_test_hot_function"));
    assert_eq!(f.offset, Some(1));
    assert_eq!(f.dso, me().display().to_string());
    let line = script::sample_text(hot, false);
    let pid = std::process::id();
    let head = format!(
        "{:>16} {:>7}/{:<7} [003] 12345.678901:    2000000 task-clock:  ",
        "pfm-test", pid, pid
    );
    assert!(line.starts_with(&head), "{line:?}\n{head:?}");
    assert!(
        line.ends_with(&format!(
            "report_test_hot_function+0x1 ({})\n",
            me().display()
        )),
        "{line}"
    );
    assert_eq!(line.lines().count(), 1);
    // Unresolved: [unknown]; its own period.
    let other = script::sample_text(&docs[1], false);
    assert!(other.contains(" 2000007 task-clock:  "), "{other}");
    assert!(
        other.ends_with("               8 [unknown] ([unknown])\n"),
        "{other:?}"
    );
    // With call chains: a line per frame, then an empty one.
    let chained = script::sample_text(hot, true);
    let lines: Vec<&str> = chained.lines().collect();
    assert_eq!(lines.len(), 3, "{chained}");
    assert!(lines[0].ends_with("task-clock:"), "{chained}");
    assert!(lines[1].starts_with('\t') && lines[1].contains("report_test_hot_function+0x1"));
    assert_eq!(lines[2], "");
    // --json: one object a line, each the documented type.
    let text = script::render(&p, true).unwrap();
    let back: Vec<pfm_json::ScriptSample> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(back.len(), 2);
    assert_eq!(back[1].period, 2_000_007);
}

#[test]
fn annotate_shares_per_instruction() {
    // push rbp; mov rbp, rsp; dec r8; jne -5; ret
    let code = [0x55, 0x48, 0x89, 0xe5, 0x49, 0xff, 0xc8, 0x75, 0xfb, 0xc3];
    let (insns, outside) = annotate::disassemble(&code, 0x401000, &[4, 5, 7, 8, 1, 99]);
    let got: Vec<(u64, &str, u64)> = insns
        .iter()
        .map(|i| (i.offset, i.text.as_str(), i.samples))
        .collect();
    assert_eq!(
        got,
        vec![
            (0, "push rbp", 0),
            (1, "mov rbp, rsp", 1),
            (4, "dec r8", 2),
            (7, "jne 0x401004", 2),
            (9, "ret", 0),
        ]
    );
    assert_eq!(outside, 1);
    assert_eq!(insns[2].address, 0x401004);
}

#[test]
fn annotate_this_programs_hot_function() {
    let r = recording(8, 2, 1);
    let p = Profile::build(&r);
    let docs = annotate::annotations(&p, &r, "f", Some("report_test_hot_function")).unwrap();
    assert_eq!(docs.len(), 1);
    let a = &docs[0];
    assert!(
        a.symbol.ends_with("report_test_hot_function"),
        "{}",
        a.symbol
    );
    assert_eq!(a.samples, 8);
    assert!(a.size > 0 && a.instructions.len() > 1);
    let at: u64 = a.instructions.iter().map(|i| i.samples).sum();
    assert_eq!(at, 8);
    // Every sample was at h + 1: in the first instruction, or the second
    // if the first is one byte.
    let hit: Vec<&pfm_json::AnnotatedInstruction> =
        a.instructions.iter().filter(|i| i.samples > 0).collect();
    assert_eq!(hit.len(), 1);
    assert_eq!(hit[0].pct, 100.0);
    assert!(hit[0].offset <= 1);
    let text = annotate::text(a);
    assert!(
        text.starts_with(" Percent |      Source code & Disassembly of "),
        "{text}"
    );
    assert!(text.contains("  100.00 :"), "{text}");
    // Without a symbol: every function with samples, most first.
    let all = annotate::annotations(&p, &r, "f", None).unwrap();
    assert_eq!(all.len(), 2);
    assert!(all[1].symbol.ends_with("report_test_cold_function"));
    // A name with no samples: one line.
    let e = annotate::annotations(&p, &r, "f", Some("nothing_here")).unwrap_err();
    assert!(e
        .message
        .contains("no sample of f is in a function named nothing_here"));
    assert!(!e.message.contains('\n'));
}
