//! `pfm report`: a record file's samples resolved to functions
//! ([`crate::symbols`]) and summed: the table of `perf report --stdio`
//! ([`table`]), its JSON document ([`pfm_json::Report`]), a pprof profile
//! ([`pprof`]) and a flame graph ([`flamegraph`]).
//!
//! The table counts where each sample's instruction pointer was (perf's
//! "self" overhead) and, with `--children`, the samples whose stack holds
//! the row's function anywhere ([`Profile::rows`]); under each row, a call
//! tree of the stacks ([`Node`]). The pprof profile and the flame graph
//! take the whole stack, `[ip] + chain`, which is `[ip]` without `-g`.

use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;

use pfm_json::{ChainNode, Report, ReportRow, SCHEMA_VERSION};

use crate::cli::{FilterArgs, Graph, Order, ReportArgs, Sort, SortKey};
use crate::data_file::{Finish, Header, Recording};
use crate::output::Output;
use crate::symbols::{Frame, Symbolizer};
use crate::Failure;

pub mod annotate;
pub mod flamegraph;
pub mod pprof;
pub mod script;
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
    /// The CPU it was taken on.
    pub cpu: u16,
    /// When (`CLOCK_MONOTONIC`, ns).
    pub time_ns: u64,
    /// The period it ended: its own (`--random`), else the header's.
    pub period: u64,
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

/// A row's key: the values of the `--sort` keys (the others `None`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RowKey {
    /// `comm`: the thread's name.
    pub comm: Option<Rc<str>>,
    /// `pid`: the process.
    pub pid: Option<u32>,
    /// `tid`: the thread.
    pub tid: Option<u32>,
    /// `dso`: the shared object's path or pseudo-name.
    pub dso: Option<Rc<str>>,
    /// `sym`: the function (or the address in hex).
    pub symbol: Option<String>,
}

impl RowKey {
    /// The key of frame `f` of sample `s`.
    pub fn of(sort: &Sort, s: &StackSample, f: &Frame) -> RowKey {
        RowKey {
            comm: sort.has(SortKey::Comm).then(|| s.comm.clone()),
            pid: sort.has(SortKey::Pid).then_some(s.pid),
            tid: sort.has(SortKey::Tid).then_some(s.tid),
            dso: sort.has(SortKey::Dso).then(|| f.dso.clone()),
            symbol: sort.has(SortKey::Sym).then(|| f.symbol_text()),
        }
    }
}

/// One row of the table: the samples of one key.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Its key.
    pub key: RowKey,
    /// Samples taken in it (perf's Self): their instruction pointer's
    /// frame has the key.
    pub samples: u64,
    /// Samples whose stack has a frame of the key anywhere (perf's
    /// Children; the same as `samples` for keys of the thread alone).
    pub children: u64,
    /// The call tree under it, when asked for: the stacks of the samples
    /// it counts (see [`Profile::rows`]).
    pub tree: Vec<Node>,
}

impl Row {
    /// A row of no samples yet.
    fn new(key: RowKey) -> Row {
        Row {
            key,
            samples: 0,
            children: 0,
            tree: Vec::new(),
        }
    }
}

/// A node of a call tree: a function and the samples whose path goes
/// through it, then the next functions of those paths.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Node {
    /// The function (or the address in hex).
    pub name: String,
    /// Samples through it.
    pub samples: u64,
    /// The next functions, most samples first once [`Node::sort`]ed.
    pub next: Vec<Node>,
}

impl Node {
    /// Adds a path of `w` samples to the forest `nodes`.
    pub fn insert<'a>(nodes: &mut Vec<Node>, mut path: impl Iterator<Item = &'a str>, w: u64) {
        let Some(first) = path.next() else {
            return;
        };
        let i = match nodes.iter().position(|n| n.name == first) {
            Some(i) => i,
            None => {
                nodes.push(Node {
                    name: first.to_string(),
                    ..Node::default()
                });
                nodes.len() - 1
            }
        };
        nodes[i].samples += w;
        Node::insert(&mut nodes[i].next, path, w);
    }

    /// Orders a forest: most samples first, ties by name.
    pub fn sort(nodes: &mut [Node]) {
        nodes.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| a.name.cmp(&b.name)));
        for n in nodes.iter_mut() {
            Node::sort(&mut n.next);
        }
    }

    /// The forest without the nodes of fewer than `min` samples.
    pub fn prune(nodes: &[Node], min: f64) -> Vec<Node> {
        nodes
            .iter()
            .filter(|n| n.samples as f64 >= min)
            .map(|n| Node {
                name: n.name.clone(),
                samples: n.samples,
                next: Node::prune(&n.next, min),
            })
            .collect()
    }

    /// The JSON document's tree.
    pub fn json(nodes: &[Node], total: u64) -> Vec<ChainNode> {
        nodes
            .iter()
            .map(|n| ChainNode {
                symbol: n.name.clone(),
                samples: n.samples,
                pct: percent(n.samples, total),
                next: Node::json(&n.next, total),
            })
            .collect()
    }
}

/// How `pfm report` shows the rows: with a Children column or not, with
/// call trees or not.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct View {
    /// `--children`.
    pub children: bool,
    /// `-g`: the trees' order and threshold (percent of all samples).
    pub tree: Option<(Order, f64)>,
}

impl View {
    /// perf's defaults for a recording with call chains or without:
    /// children and caller trees with, neither without.
    pub fn default_for(call_chains: bool) -> View {
        View {
            children: call_chains,
            tree: call_chains.then_some((Order::Caller, crate::cli::GRAPH_THRESHOLD)),
        }
    }

    /// The view `args` asks for, of a recording with call chains or
    /// without.
    pub fn of(args: &ReportArgs, call_chains: bool) -> View {
        let mut v = View::default_for(call_chains);
        if args.children {
            v.children = true;
        }
        if args.no_children {
            v.children = false;
        }
        match args.graph {
            Some(Graph::None) => v.tree = None,
            Some(Graph::Tree { order, threshold }) => v.tree = Some((order, threshold)),
            None => {}
        }
        v
    }
}

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
        Profile::build_filtered(rec, &FilterArgs::default())
    }

    /// Resolves the samples of `rec` that `filter` keeps.
    pub fn build_filtered(rec: &Recording, filter: &FilterArgs) -> Profile {
        let mut sym = Symbolizer::new(&rec.maps, rec.vdso.as_deref());
        let mut names: HashMap<u32, Rc<str>> = HashMap::new();
        for t in &rec.threads {
            names.entry(t.tid).or_insert_with(|| t.comm.as_str().into());
        }
        let samples = rec
            .samples
            .iter()
            .filter_map(|s| {
                let comm = names
                    .entry(s.tid)
                    .or_insert_with(|| format!(":{}", s.tid).into())
                    .clone();
                if !filter.keeps(s.pid, s.tid, &comm) {
                    return None;
                }
                let stack = s
                    .stack()
                    .enumerate()
                    .map(|(i, addr)| sym.resolve(s.pid, s.tstamp, addr, i > 0))
                    .collect();
                Some(StackSample {
                    pid: s.pid,
                    tid: s.tid,
                    comm,
                    cpu: s.cpu,
                    time_ns: s.tstamp,
                    period: rec.period_of(s),
                    stack,
                })
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

    /// The table's rows: a row per key of a sampled frame (with
    /// `view.children`, of any frame of a stack; else of its instruction
    /// pointer's), by Children (with `view.children`) then Self, most
    /// first, ties in key order. With `view.tree`, each row's call tree:
    /// of the samples the row's first column counts, the path from the
    /// row's frame (its innermost in the stack) to the outermost caller
    /// (callee order); in caller order, from it down to the sampled
    /// frame (children), or from the outermost caller down to it (self).
    pub fn rows(&self, sort: &Sort, view: View) -> Vec<Row> {
        let mut rows: HashMap<RowKey, Row> = HashMap::new();
        for s in &self.samples {
            let keys: Vec<RowKey> = s.stack.iter().map(|f| RowKey::of(sort, s, f)).collect();
            let Some(leaf) = keys.first() else {
                continue;
            };
            rows.entry(leaf.clone())
                .or_insert_with(|| Row::new(leaf.clone()))
                .samples += 1;
            // Each key once per stack (a recursion counts once), at its
            // innermost frame.
            let mut firsts: Vec<usize> = Vec::new();
            for (i, k) in keys.iter().enumerate() {
                if !firsts.iter().any(|&j| keys[j] == *k) {
                    firsts.push(i);
                }
            }
            if !view.children {
                firsts.truncate(1);
            }
            let names: Vec<String> = match view.tree {
                Some(_) => s.stack.iter().map(Frame::symbol_text).collect(),
                None => Vec::new(),
            };
            for &i in &firsts {
                let r = rows
                    .entry(keys[i].clone())
                    .or_insert_with(|| Row::new(keys[i].clone()));
                r.children += 1;
                let Some((order, _)) = view.tree else {
                    continue;
                };
                let path: Vec<&str> = match (order, view.children) {
                    (Order::Callee, _) => names[i..].iter().map(String::as_str).collect(),
                    (Order::Caller, true) => names[..=i].iter().rev().map(String::as_str).collect(),
                    (Order::Caller, false) => names.iter().rev().map(String::as_str).collect(),
                };
                Node::insert(&mut r.tree, path.into_iter(), 1);
            }
        }
        let total = self.samples.len() as f64;
        let mut rows: Vec<Row> = rows
            .into_values()
            .filter(|r| view.children || r.samples > 0)
            .map(|mut r| {
                if let Some((_, threshold)) = view.tree {
                    Node::sort(&mut r.tree);
                    r.tree = Node::prune(&r.tree, total * threshold / 100.0);
                }
                r
            })
            .collect();
        rows.sort_by(|a, b| {
            let first = |r: &Row| if view.children { r.children } else { r.samples };
            first(b)
                .cmp(&first(a))
                .then_with(|| b.samples.cmp(&a.samples))
                .then_with(|| a.key.cmp(&b.key))
        });
        rows
    }

    /// `pfm report --json`'s document. `file`: the record file's name.
    pub fn json(&self, file: &str, sort: &Sort, view: View) -> Report {
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
            sort: sort.name(),
            children: view.children,
            call_graph: view.tree.map(|(o, _)| o.name().to_string()),
            rows: self
                .rows(sort, view)
                .into_iter()
                .map(|r| ReportRow {
                    overhead_pct: percent(r.samples, total),
                    samples: r.samples,
                    children: view.children.then_some(r.children),
                    children_pct: view.children.then(|| percent(r.children, total)),
                    comm: r.key.comm.as_ref().map(|c| c.to_string()),
                    pid: r.key.pid,
                    tid: r.key.tid,
                    dso: r.key.dso.as_ref().map(|d| dso_name(d).to_string()),
                    dso_path: r.key.dso.as_ref().map(|d| d.to_string()),
                    symbol: r.key.symbol,
                    callchain: view.tree.map(|_| Node::json(&r.tree, total)),
                })
                .collect(),
        }
    }
}

/// Reads the record file `input` (`-`: standard input) for `pfm report`,
/// `pfm script` and `pfm annotate`, and resolves the samples `filter`
/// keeps; the file's name as messages give it. Warns (standard error) of a
/// file without its end record and of files whose symbols cannot be read;
/// fails in one line on a file without samples, or none that the filter
/// keeps.
pub fn load(input: &Path, filter: &FilterArgs) -> Result<(Profile, String, Recording), Failure> {
    let rec = Recording::read(input).map_err(Failure::new)?;
    let file = if crate::output::is_stdio(input) {
        "standard input".to_string()
    } else {
        input.display().to_string()
    };
    if rec.finish.is_none() {
        eprintln!(
            "pfm: warning: {file} has no end record (pfm record was stopped before it \
             finished): reading its {} samples",
            rec.samples.len()
        );
    }
    if rec.samples.is_empty() {
        return Err(Failure::new(empty_recording(&file, &rec)));
    }
    let profile = Profile::build_filtered(&rec, filter);
    for w in &profile.warnings {
        eprintln!("pfm: warning: {w}");
    }
    if profile.samples.is_empty() {
        return Err(Failure::new(format!(
            "none of the {} samples of {file} is of {}",
            rec.samples.len(),
            filter_text(filter)
        )));
    }
    Ok((profile, file, rec))
}

/// What the filters ask for, in words: `process 12 and thread names x, y`.
pub(crate) fn filter_text(f: &FilterArgs) -> String {
    let list = |v: &[String]| v.join(", ");
    let ids = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>();
    let mut parts = Vec::new();
    match f.pids.len() {
        0 => {}
        1 => parts.push(format!("process {}", f.pids[0])),
        _ => parts.push(format!("processes {}", list(&ids(&f.pids)))),
    }
    match f.tids.len() {
        0 => {}
        1 => parts.push(format!("thread {}", f.tids[0])),
        _ => parts.push(format!("threads {}", list(&ids(&f.tids)))),
    }
    match f.comms.len() {
        0 => {}
        1 => parts.push(format!("a thread named {}", f.comms[0])),
        _ => parts.push(format!("threads named {}", list(&f.comms))),
    }
    parts.join(" and ")
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
    let (profile, file, rec) = load(&args.input, &args.filter)?;
    let chains = rec.header.call_chains;
    if matches!(args.graph, Some(Graph::Tree { .. })) && !chains {
        eprintln!(
            "pfm: warning: {file} has no call chains (pfm record -g records them): \
             each tree is the sampled function alone"
        );
    }
    let view = View::of(args, chains);
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
        let doc = profile.json(&file, &args.sort, view);
        let mut line =
            serde_json::to_string(&doc).map_err(|e| Failure::new(format!("JSON: {e}")))?;
        line.push('\n');
        line
    } else {
        table::render(&profile, &file, &args.sort, view)
    };
    out.write(&text)?;
    Ok(0)
}

#[cfg(test)]
mod tests;
