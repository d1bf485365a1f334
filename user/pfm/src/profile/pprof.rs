//! `pfm report --pprof FILE`: the samples as pprof's `profile.proto`
//! (the messages of [`pfm_json::pprof`]), gzipped as pprof writes and
//! reads it. One pprof sample per distinct stack and thread, with two
//! values: the samples, and the events they stand for (the sum of their
//! periods, each sample's own: with `--random` each has its length; in ns
//! for task-clock); labels `pid`, `tid` (numbers) and `comm`.

use std::collections::HashMap;
use std::io::Write;

use flate2::write::GzEncoder;
use flate2::Compression;
use pfm_json::pprof::{self, Label, Line, Location, Mapping, Sample, ValueType};
use prost::Message;

use super::Profile;
use crate::symbols::Frame;

/// The string table: index 0 is "".
#[derive(Default)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        let mut s = Strings::default();
        s.get("");
        s
    }

    fn get(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// The profile, not yet encoded.
pub fn build(p: &Profile) -> pprof::Profile {
    let h = &p.header;
    let mut strings = Strings::new();
    let unit = if h.unit == "ns" {
        "nanoseconds"
    } else {
        "count"
    };
    let samples_type = ValueType {
        r#type: strings.get("samples"),
        unit: strings.get("count"),
    };
    let event_type = ValueType {
        r#type: strings.get(&h.event),
        unit: strings.get(unit),
    };
    let mut mappings: Vec<Mapping> = Vec::new();
    let mut mapping_ids: HashMap<(u64, u64, u64, String), u64> = HashMap::new();
    let mut functions: Vec<pprof::Function> = Vec::new();
    let mut function_ids: HashMap<(String, String), u64> = HashMap::new();
    let mut locations: Vec<Location> = Vec::new();
    let mut location_ids: HashMap<(u64, u64), u64> = HashMap::new();
    let mut location_of = |f: &Frame, strings: &mut Strings| -> u64 {
        let mapping_id = match f.mapping {
            Some((start, end, offset)) => *mapping_ids
                .entry((start, end, offset, f.dso.to_string()))
                .or_insert_with(|| {
                    let id = mappings.len() as u64 + 1;
                    mappings.push(Mapping {
                        id,
                        memory_start: start,
                        memory_limit: end,
                        file_offset: offset,
                        filename: strings.get(&f.dso),
                        has_functions: true,
                        ..Default::default()
                    });
                    id
                }),
            None => 0,
        };
        *location_ids
            .entry((mapping_id, f.address))
            .or_insert_with(|| {
                let line = f.function.as_ref().map(|func| {
                    let function_id = *function_ids
                        .entry((func.raw.to_string(), f.dso.to_string()))
                        .or_insert_with(|| {
                            let id = functions.len() as u64 + 1;
                            functions.push(pprof::Function {
                                id,
                                name: strings.get(&func.name),
                                system_name: strings.get(&func.raw),
                                filename: strings.get(&f.dso),
                                start_line: 0,
                            });
                            id
                        });
                    Line {
                        function_id,
                        line: 0,
                        column: 0,
                    }
                });
                let id = locations.len() as u64 + 1;
                locations.push(Location {
                    id,
                    mapping_id,
                    address: f.address,
                    line: line.into_iter().collect(),
                    is_folded: false,
                });
                id
            })
    };
    // Samples of one stack in one thread are one pprof sample, in the
    // order their first instance came.
    let mut order: Vec<(Vec<u64>, u32, u32, String)> = Vec::new();
    let mut counts: HashMap<(Vec<u64>, u32), (usize, i64, i64)> = HashMap::new();
    for s in &p.samples {
        let ids: Vec<u64> = s
            .stack
            .iter()
            .map(|f| location_of(f, &mut strings))
            .collect();
        let key = (ids.clone(), s.tid);
        let next = order.len();
        let e = counts.entry(key).or_insert((next, 0, 0));
        if e.0 == next {
            order.push((ids, s.pid, s.tid, s.comm.to_string()));
        }
        e.1 += 1;
        e.2 =
            e.2.saturating_add(i64::try_from(s.period).unwrap_or(i64::MAX));
    }
    let period = i64::try_from(h.period).unwrap_or(i64::MAX);
    let (pid_key, tid_key, comm_key) =
        (strings.get("pid"), strings.get("tid"), strings.get("comm"));
    let sample = order
        .into_iter()
        .map(|(ids, pid, tid, comm)| {
            let (n, events) = counts
                .get(&(ids.clone(), tid))
                .map_or((0, 0), |e| (e.1, e.2));
            Sample {
                location_id: ids,
                value: vec![n, events],
                label: vec![
                    Label {
                        key: pid_key,
                        num: i64::from(pid),
                        ..Default::default()
                    },
                    Label {
                        key: tid_key,
                        num: i64::from(tid),
                        ..Default::default()
                    },
                    Label {
                        key: comm_key,
                        str: strings.get(&comm),
                        ..Default::default()
                    },
                ],
            }
        })
        .collect();
    let duration = p.finish.as_ref().map_or(0, |f| {
        f.end_monotonic_ns.saturating_sub(h.start_monotonic_ns)
    });
    let comment = match &h.command {
        Some(cmd) => vec![strings.get(&format!("pfm record -- {}", cmd.join(" ")))],
        None => Vec::new(),
    };
    pprof::Profile {
        sample_type: vec![samples_type, event_type],
        sample,
        mapping: mappings,
        location: locations,
        function: functions,
        string_table: strings.table,
        time_nanos: i64::try_from(h.start_unix_ns).unwrap_or(0),
        duration_nanos: i64::try_from(duration).unwrap_or(0),
        period_type: Some(event_type),
        period,
        comment,
        default_sample_type: samples_type.r#type,
        ..Default::default()
    }
}

/// The profile, encoded and gzipped.
pub fn encode(p: &Profile) -> Vec<u8> {
    let raw = build(p).encode_to_vec();
    let mut gz = GzEncoder::new(Vec::new(), Compression::default());
    // Writing into a Vec cannot fail.
    let _ = gz.write_all(&raw);
    gz.finish().unwrap_or_default()
}
