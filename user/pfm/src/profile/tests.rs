//! `pfm report` against this test program itself: its own functions'
//! addresses, resolved through its own `/proc/self/maps` and its own ELF
//! symbols, then the table, the JSON document, the pprof profile decoded
//! back with prost and the SVG parsed as XML.

use std::io::Read;
use std::path::PathBuf;

use prost::Message;

use super::*;
use crate::data_file::{Finish, Header, Maps, Recording, Sample, Thread, Writer};
use crate::symbols::ElfSymbols;

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
    let rows = p.rows(SortKey::Sym);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(rows[0].samples, 8);
    assert!(rows[0]
        .symbol
        .as_deref()
        .unwrap()
        .ends_with("report_test_hot_function"));
    assert!(rows[1]
        .symbol
        .as_deref()
        .unwrap()
        .ends_with("report_test_cold_function"));
    let file = "pfm.data";
    let table = table::render(&p, file, SortKey::Sym);
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
    // By shared object: one row, all of it.
    let dso = table::render(&p, file, SortKey::Dso);
    let lines: Vec<&str> = dso.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(lines.len(), 1, "{dso}");
    assert!(
        lines[0].starts_with("   100.00%       10  pfm-test  "),
        "{dso}"
    );
    assert!(!dso.contains("Symbol"), "{dso}");
}

#[test]
fn shares_are_exact_percentages() {
    // 1/3 and 2/3 of the samples, and an unresolved address.
    let p = Profile::build(&recording(2, 1, 3));
    let doc = p.json("f", SortKey::Sym);
    let total: u64 = doc.rows.iter().map(|r| r.samples).sum();
    assert_eq!(total, 6);
    let pct: f64 = doc.rows.iter().map(|r| r.overhead_pct).sum();
    assert!((pct - 100.0).abs() < 1e-9, "{pct}");
    let unknown = doc.rows.iter().find(|r| r.dso == "[unknown]").unwrap();
    assert_eq!((unknown.samples, unknown.overhead_pct), (3, 50.0));
    assert_eq!(unknown.symbol.as_deref(), Some("0x0000000000000008"));
    let table = table::render(&p, "f", SortKey::Sym);
    assert!(table.contains("    33.33%        2"), "{table}");
    assert!(table.contains("    16.67%        1"), "{table}");
}

#[test]
fn json_document_is_the_documented_type() {
    let p = Profile::build(&recording(8, 2, 0));
    let doc = p.json("pfm.data", SortKey::Sym);
    let text = serde_json::to_string(&doc).unwrap();
    let back: pfm_json::Report = serde_json::from_str(&text).unwrap();
    assert_eq!(back, doc);
    assert_eq!(
        (doc.samples, doc.lost, doc.counted, doc.duration_ns),
        (10, 2, Some(12 * 2_000_000 + 5), Some(30_000_000))
    );
    assert!(doc.complete && doc.sort == "sym");
    assert_eq!(doc.rows[0].overhead_pct, 80.0);
    assert_eq!(doc.rows[0].dso_path, me().display().to_string());
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
        sort: SortKey::Sym,
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
            sort: SortKey::Sym,
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
            sort: SortKey::Sym,
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
