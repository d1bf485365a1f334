//! `pfm report`: a record file's samples resolved to functions
//! ([`crate::symbols`]) and summed: the table of `perf report --stdio`
//! ([`table`]), its JSON document ([`pfm_json::Report`]), a pprof profile
//! ([`pprof`]) and a flame graph ([`flamegraph`]).
//!
//! The table counts where each sample's instruction pointer was (perf's
//! "self" overhead); the pprof profile and the flame graph take the whole
//! stack, `[ip] + chain`, which is `[ip]` until samples carry call chains.

use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;

use pfm_json::{Report, ReportRow, SCHEMA_VERSION};

use crate::cli::{ReportArgs, SortKey};
use crate::data_file::{Finish, Header, Recording};
use crate::output::Output;
use crate::symbols::{Frame, Symbolizer};
use crate::Failure;

pub mod flamegraph;
pub mod pprof;
pub mod table;

/// A sample with its stack resolved.
#[derive(Clone, Debug)]
pub struct StackSample {
    /// The process.
    pub pid: u32,
    /// The thread.
    pub tid: u32,
    /// The thread's name (`:TID` when pfm never saw it).
    pub comm: Rc<str>,
    /// The stack, the sampled instruction first.
    pub stack: Vec<Frame>,
}

/// A recording's samples, resolved.
#[derive(Debug)]
pub struct Profile {
    /// The recording's header.
    pub header: Header,
    /// Its end, if the file has one.
    pub finish: Option<Finish>,
    /// The samples.
    pub samples: Vec<StackSample>,
    /// Files whose symbols could not be read, one line each.
    pub warnings: Vec<String>,
}

/// One row of the table: samples of one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// Samples.
    pub samples: u64,
    /// The thread's name.
    pub comm: Rc<str>,
    /// The shared object's path or pseudo-name.
    pub dso: Rc<str>,
    /// `--sort sym`: the function (or the address in hex).
    pub symbol: Option<String>,
}

/// A row's key: the thread's name, the object, the function (`sym`).
type RowKey = (Rc<str>, Rc<str>, Option<String>);

/// The name the table shows for an object: a file's name, or the
/// pseudo-name as it is.
pub fn dso_name(dso: &str) -> &str {
    if dso.starts_with('/') {
        Path::new(dso)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or(dso)
    } else {
        dso
    }
}

/// The sampling period with its unit, as the table and the flame graph
/// say it: `2000000 ns` (task-clock), `1000000 events` (a counting event),
/// from the header's `unit`.
pub fn period_text(h: &Header) -> String {
    let unit = if h.unit.is_empty() { "events" } else { &h.unit };
    format!("{} {unit}", h.period)
}

/// `part` in percent of `whole` (0 for an empty whole).
pub fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

impl Profile {
    /// Resolves every sample of `rec`.
    pub fn build(rec: &Recording) -> Profile {
        let mut sym = Symbolizer::new(&rec.maps, rec.vdso.as_deref());
        let mut names: HashMap<u32, Rc<str>> = HashMap::new();
        for t in &rec.threads {
            names.entry(t.tid).or_insert_with(|| t.comm.as_str().into());
        }
        let samples = rec
            .samples
            .iter()
            .map(|s| {
                let comm = names
                    .entry(s.tid)
                    .or_insert_with(|| format!(":{}", s.tid).into())
                    .clone();
                let stack = s
                    .stack()
                    .enumerate()
                    .map(|(i, addr)| sym.resolve(s.pid, s.tstamp, addr, i > 0))
                    .collect();
                StackSample {
                    pid: s.pid,
                    tid: s.tid,
                    comm,
                    stack,
                }
            })
            .collect();
        Profile {
            header: rec.header.clone(),
            finish: rec.finish.clone(),
            samples,
            warnings: sym.warnings,
        }
    }

    /// Samples the module lost (its buffer full).
    pub fn lost(&self) -> u64 {
        self.finish.as_ref().map_or(0, |f| f.lost)
    }

    /// The table's rows, most samples first (ties in key order).
    pub fn rows(&self, sort: SortKey) -> Vec<Row> {
        let mut counts: HashMap<RowKey, u64> = HashMap::new();
        for s in &self.samples {
            let Some(leaf) = s.stack.first() else {
                continue;
            };
            let symbol = match sort {
                SortKey::Sym => Some(leaf.symbol_text()),
                SortKey::Dso => None,
            };
            *counts
                .entry((s.comm.clone(), leaf.dso.clone(), symbol))
                .or_default() += 1;
        }
        let mut rows: Vec<Row> = counts
            .into_iter()
            .map(|((comm, dso, symbol), samples)| Row {
                samples,
                comm,
                dso,
                symbol,
            })
            .collect();
        rows.sort_by(|a, b| {
            b.samples
                .cmp(&a.samples)
                .then_with(|| (&a.comm, &a.dso, &a.symbol).cmp(&(&b.comm, &b.dso, &b.symbol)))
        });
        rows
    }

    /// `pfm report --json`'s document. `file`: the record file's name.
    pub fn json(&self, file: &str, sort: SortKey) -> Report {
        let total = self.samples.len() as u64;
        let h = &self.header;
        Report {
            schema_version: SCHEMA_VERSION,
            file: file.to_string(),
            model: h.model.clone(),
            event: h.event.clone(),
            period: h.period,
            command: h.command.clone(),
            pid: h.pid,
            pids: h.pids.clone(),
            tids: h.tids.clone(),
            inherit: h.inherit,
            samples: total,
            lost: self.lost(),
            counted: self.finish.as_ref().and_then(|f| f.counted),
            duration_ns: self
                .finish
                .as_ref()
                .map(|f| f.end_monotonic_ns.saturating_sub(h.start_monotonic_ns)),
            complete: self.finish.is_some(),
            sort: sort.name().to_string(),
            rows: self
                .rows(sort)
                .into_iter()
                .map(|r| ReportRow {
                    overhead_pct: percent(r.samples, total),
                    samples: r.samples,
                    comm: r.comm.to_string(),
                    dso: dso_name(&r.dso).to_string(),
                    dso_path: r.dso.to_string(),
                    symbol: r.symbol,
                })
                .collect(),
        }
    }
}

/// Writes `bytes` to `path`; errors are one line naming it.
fn write_file(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    std::fs::write(path, bytes).map_err(|e| {
        Failure::new(format!(
            "cannot write {}: {}",
            path.display(),
            perfmon::errno_text(e.raw_os_error().unwrap_or(0))
        ))
    })
}

/// Why `file` has nothing to report, in one line, from what its end
/// record says (as `perf report` refuses a file without samples).
fn empty_recording(file: &str, rec: &Recording) -> String {
    let h = &rec.header;
    let what = match &rec.finish {
        Some(f) if f.lost > 0 => format!("all {} were lost (the buffer was full)", f.lost),
        Some(Finish {
            counted: Some(n), ..
        }) => format!(
            "{} counted {n} {}, {} periods of {}",
            h.event,
            h.unit,
            n / h.period.max(1),
            h.period
        ),
        Some(_) => format!("{} with period {}", h.event, h.period),
        None => "pfm record was stopped before it finished".to_string(),
    };
    format!("{file} has no samples ({what}): nothing to report")
}

/// Runs `pfm report`; returns the exit status.
pub fn report(args: &ReportArgs, json: bool, output: Option<&Path>) -> Result<u8, Failure> {
    let rec = Recording::read(&args.input).map_err(Failure::new)?;
    let file = if crate::output::is_stdio(&args.input) {
        "standard input".to_string()
    } else {
        args.input.display().to_string()
    };
    if rec.finish.is_none() {
        eprintln!(
            "pfm: warning: {file} has no end record (pfm record was stopped before it \
             finished): reporting its {} samples",
            rec.samples.len()
        );
    }
    if rec.samples.is_empty() {
        return Err(Failure::new(empty_recording(&file, &rec)));
    }
    let profile = Profile::build(&rec);
    for w in &profile.warnings {
        eprintln!("pfm: warning: {w}");
    }
    // The files first: an unwritable one fails before any output.
    if let Some(path) = &args.pprof {
        write_file(path, &pprof::encode(&profile))?;
    }
    if let Some(path) = &args.flamegraph {
        let svg =
            flamegraph::svg(&profile).map_err(|e| Failure::new(format!("flame graph: {e}")))?;
        write_file(path, &svg)?;
    }
    let mut out = Output::open(output, Output::Stdout)?;
    let text = if json {
        let doc = profile.json(&file, args.sort);
        let mut line =
            serde_json::to_string(&doc).map_err(|e| Failure::new(format!("JSON: {e}")))?;
        line.push('\n');
        line
    } else {
        table::render(&profile, &file, args.sort)
    };
    out.write(&text)?;
    Ok(0)
}

#[cfg(test)]
mod tests;
