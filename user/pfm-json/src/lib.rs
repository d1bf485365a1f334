//! The JSON documents `pfm --json` prints, as types: `pfm` serializes
//! these, and a reader may deserialize into them. Every struct rejects
//! fields it does not know (`deny_unknown_fields`), so a reader built from
//! this crate notices when the output grows; every document carries
//! [`SCHEMA_VERSION`], raised whenever a field changes meaning or goes
//! away (adding an optional field does not raise it).
//!
//! Documentation/pfm.rst ("JSON output") documents each field; a test of
//! this crate checks that every field serialized here is named there.
//!
//! Optional fields are left out of the output when they do not apply, and
//! read as absent (`None`) when missing.

#![warn(missing_docs)]

use serde::{Deserialize, Serialize};

/// The version of the documents below.
pub const SCHEMA_VERSION: u32 = 1;

/// What one `pfm stat --json` line is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StatKind {
    /// `-I MS`: the counts of one interval (deltas since the previous line).
    Interval,
    /// `-r N`: the counts of one run of the command.
    Run,
    /// The totals (with `-r N`: the mean of the runs, and their statistics).
    Summary,
}

/// One line of `pfm stat --json`: a summary, an interval or a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stat {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// What this line is.
    #[serde(rename = "type")]
    pub kind: StatKind,
    /// The module's PMU model (`soft`, `intel_arch`, `amd64`, ...).
    pub model: String,
    /// Command mode: the command and its arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Command mode: its process id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Command mode: whether the threads and processes the command created
    /// were counted too (false: `--no-inherit`, or a module without
    /// inheritance).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inherit: Option<bool>,
    /// Process mode (`-p PID,...`): the processes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<Vec<u32>>,
    /// Thread mode (`-t TID`): the thread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
    /// `run` lines: which run, from 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<u32>,
    /// `-r N` summary: N.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<u32>,
    /// `interval` lines: the end of the interval, in seconds since counting
    /// started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_s: Option<f64>,
    /// The counts, in `-e` order.
    pub counters: Vec<Counter>,
    /// Nanoseconds the context was loaded and started (of this interval).
    pub time_enabled_ns: u64,
    /// Nanoseconds the thread ran while started (of this interval).
    pub time_running_ns: u64,
    /// Wall-clock nanoseconds of the measurement (or of this interval; the
    /// mean with `-r`).
    pub elapsed_ns: u64,
    /// The same, in seconds.
    pub elapsed_s: f64,
    /// `-r N` summary: statistics of the elapsed time over the runs, in ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elapsed_stats: Option<Stats>,
    /// Command mode: user CPU time of the command and its children, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_s: Option<f64>,
    /// Command mode: system CPU time, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sys_s: Option<f64>,
    /// Command mode: its exit code, if it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Command mode: the signal that killed it, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_signal: Option<i32>,
    /// Thread mode summary: stopped by SIGINT or SIGTERM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<bool>,
    /// Thread mode summary: the thread exited during the measurement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_exited: Option<bool>,
    /// More events than counters: how they were multiplexed (absent when
    /// every event had a counter all the time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multiplex: Option<Multiplex>,
    /// Inherited or process counting: threads that should have been
    /// counted and could not be (the module's limits); the totals miss
    /// them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_threads: Option<u32>,
    /// `--per-thread` summary: each thread counted, the initial (or
    /// attached) thread first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<Vec<ThreadCounts>>,
}

/// One thread of `--per-thread`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThreadCounts {
    /// Its thread id (0: not visible in pfm's pid namespace).
    pub tid: u32,
    /// Its process id.
    pub pid: u32,
    /// Its name (`/proc/TID/comm` when pfm last saw it alive); absent for a
    /// thread that exited before pfm saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    /// It exited: its counts are final.
    pub exited: bool,
    /// Its monitoring ended at an exec into a program the user may not
    /// monitor (setuid); its counts stop there.
    pub revoked: bool,
    /// Its counts, one per counter of the document, in the same order;
    /// multiplexed, its estimates (each set's count scaled by the set's
    /// share of this thread's time).
    pub values: Vec<u64>,
    /// ns it was counted.
    pub time_enabled_ns: u64,
    /// ns it ran while counted.
    pub time_running_ns: u64,
}

/// How a multiplexed `pfm stat` put its events into event sets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Multiplex {
    /// The number of event sets (each counter's [`Counter::set`] is one
    /// of `0..sets`).
    pub sets: u16,
    /// The counters the sets took turns on.
    pub counters: u16,
    /// Time switching: the sets' timeout, ns of the thread's running time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch_ns: Option<u64>,
    /// Overflow switching: the overflows of a set's trigger that switch it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switch_on_overflow: Option<u32>,
    /// Overflow switching: the trigger's period, in events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<u64>,
}

/// One counted event of a [`Stat`] line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Counter {
    /// The event as named on the command line (module name, libpfm4 name,
    /// or `r<hex>`).
    pub event: String,
    /// The PMC value that selected it (what the module validated).
    pub code: u64,
    /// The PMD that counted it.
    pub pmd: u16,
    /// The count (with `-r`: the mean, rounded to an integer).
    pub value: u64,
    /// The unit of `value` when it is not a plain count (`ns`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// Time events: `value` in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub msec: Option<f64>,
    /// The derived metric the table shows after `#`, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<Metric>,
    /// `--perf`: perf_event's count of the same event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perf_value: Option<u64>,
    /// `-r N` summary: the statistics of the runs' counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<Stats>,
    /// Events named through libpfm4: its fully qualified name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub libpfm: Option<String>,
    /// Multiplexed: the event set that counted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set: Option<u16>,
    /// Multiplexed: its set's time enabled, ns (the thread's running time
    /// while the context counted: the same for every set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_enabled_ns: Option<u64>,
    /// Multiplexed: its set's time running, ns (the part of
    /// `time_enabled_ns` its set was on the counters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_running_ns: Option<u64>,
    /// Multiplexed: `time_running_ns` in percent of `time_enabled_ns`,
    /// rounded to 2 decimals (the table's `(66.67%)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_pct: Option<f64>,
    /// Multiplexed: the estimate of the whole time's count, `value ×
    /// time_enabled_ns / time_running_ns` rounded to nearest (with `-r`:
    /// the rounded mean of the runs' estimates); absent when the event was
    /// never counted (`time_running_ns` 0: the table's `<not counted>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<u64>,
    /// Multiplexed `-r N` summary: the statistics of the runs' estimates
    /// (of the runs that counted it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate_stats: Option<Stats>,
}

/// A derived metric: `1.23 insn per cycle`, `0.98 CPUs utilized`, ...
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metric {
    /// The value, in `unit`.
    pub value: f64,
    /// `CPUs utilized`, `/sec` (per second of task-clock, or of wall time
    /// without task-clock), `insn per cycle`, `% of all branches`.
    pub unit: String,
}

/// Statistics of N repeated measurements (`-r N`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stats {
    /// N.
    pub runs: u32,
    /// The mean.
    pub mean: f64,
    /// The sample standard deviation (N - 1 in the denominator; 0 for one
    /// run).
    pub stddev: f64,
    /// What the table prints as `± x.xx%`, as `perf stat -r` does: the
    /// standard deviation of the mean (`stddev / sqrt(N)`), in percent of
    /// the mean (0 when the mean is 0).
    pub noise_pct: f64,
    /// The smallest value.
    pub min: u64,
    /// The largest value.
    pub max: u64,
}

impl Stats {
    /// The statistics of `values` (`None` for no value).
    pub fn of(values: &[u64]) -> Option<Stats> {
        let n = values.len();
        let runs = u32::try_from(n).ok()?;
        let min = *values.iter().min()?;
        let max = *values.iter().max()?;
        let nf = n as f64;
        let mean = values.iter().map(|&v| v as f64).sum::<f64>() / nf;
        let stddev = if n > 1 {
            let ss: f64 = values.iter().map(|&v| (v as f64 - mean).powi(2)).sum();
            (ss / (nf - 1.0)).sqrt()
        } else {
            0.0
        };
        let noise_pct = if mean > 0.0 {
            100.0 * stddev / nf.sqrt() / mean
        } else {
            0.0
        };
        Some(Stats {
            runs,
            mean,
            stddev,
            noise_pct,
            min,
            max,
        })
    }
}

/// `pfm list --json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct List {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The module's PMU model.
    pub model: String,
    /// Counters that `pfm stat` can program.
    pub counters: usize,
    /// Their width in bits.
    pub counter_width: u16,
    /// The module's own events (`PFM_IOC_GET_INFO`).
    pub events: Vec<ListEvent>,
    /// Hardware models: libpfm4's table of the CPU's core PMU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub libpfm: Option<LibpfmTable>,
    /// Hardware models without a libpfm4 table: why not, and what to do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub libpfm_note: Option<String>,
}

/// One of the module's events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListEvent {
    /// Its name.
    pub name: String,
    /// The PMC value that selects it.
    pub code: u64,
    /// Other names `-e` accepts for it (`cs`).
    pub aliases: Vec<String>,
    /// What it counts ("" when the module's name is all there is).
    pub description: String,
}

/// A libpfm4 PMU and its events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LibpfmTable {
    /// libpfm4's PMU name (`skl`).
    pub pmu: String,
    /// Its description (`Intel Skylake`).
    pub description: String,
    /// Whether `LIBPFM_FORCE_PMU` chose it.
    pub forced: bool,
    /// Its events, in libpfm4's order.
    pub events: Vec<LibpfmEvent>,
}

/// An event of a libpfm4 table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LibpfmEvent {
    /// Its name (`INST_RETIRED`).
    pub name: String,
    /// What it counts.
    pub description: String,
    /// Its unit masks (`-e INST_RETIRED.ANY_P`).
    pub umasks: Vec<LibpfmAttr>,
    /// Its modifiers (`-e INST_RETIRED.ANY_P:u:c=1`).
    pub modifiers: Vec<LibpfmAttr>,
}

/// A unit mask or modifier of a libpfm4 event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LibpfmAttr {
    /// Its name.
    pub name: String,
    /// What it selects.
    pub description: String,
    /// Unit masks: the one used when the name gives none.
    pub default: bool,
}

/// `pfm info --json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Info {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The ABI version the module speaks.
    pub abi_version: u32,
    /// The ABI version pfm speaks.
    pub tool_abi_version: u32,
    /// The PMU model.
    pub model: String,
    /// PMCs implemented.
    pub num_pmcs: u16,
    /// PMDs implemented.
    pub num_pmds: u16,
    /// Bit n: PMC n exists.
    pub impl_pmcs: u64,
    /// Bit n: PMD n exists.
    pub impl_pmds: u64,
    /// Counters `pfm stat` can program.
    pub counters: usize,
    /// Counter width in bits.
    pub counter_width: u16,
    /// CPU 0's overflow vector (0: none).
    pub vector: u32,
    /// The number of the module's events.
    pub events: usize,
    /// What /sys/kernel/perfmon says.
    pub sysfs: Sysfs,
    /// The module's parameters.
    pub params: Params,
    /// Hardware models: libpfm4's PMU for event names, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub libpfm_pmu: Option<String>,
    /// Hybrid CPUs: the core types found ("P-core", "E-core", "other");
    /// the model uses only the counters they all have. Empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub core_types: Vec<String>,
}

/// `/sys/kernel/perfmon` (a field is absent where its file is).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sysfs {
    /// `abi_version`.
    pub abi_version: Option<u32>,
    /// `pmu_model`.
    pub pmu_model: Option<String>,
    /// `live_contexts`.
    pub live_contexts: Option<u64>,
    /// `zombie_contexts`.
    pub zombie_contexts: Option<u64>,
    /// `vector`.
    pub vector: Option<u32>,
}

/// `/sys/module/perfmon/parameters`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// `pmu`.
    pub pmu: Option<String>,
    /// `soft_width`.
    pub soft_width: Option<u32>,
}

/// `pfm report --json`: what a record file's samples were spent in.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Report {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The record file read.
    pub file: String,
    /// The PMU model it was recorded on.
    pub model: String,
    /// The event sampled.
    pub event: String,
    /// The sampling period, in events.
    pub period: u64,
    /// Command mode: the command and its arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Command mode: its process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// `-p`: the processes attached to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<Vec<u32>>,
    /// `-p`, `-t`: the threads sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tids: Option<Vec<u32>>,
    /// Whether the threads and processes the command created were sampled.
    pub inherit: bool,
    /// Samples in the file.
    pub samples: u64,
    /// Samples the module lost (its buffer full), not in the file.
    pub lost: u64,
    /// Events the sampled counter counted in all (absent if the file has
    /// no end record).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counted: Option<u64>,
    /// ns from the start of sampling to its end (absent likewise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ns: Option<u64>,
    /// Whether the file has its end record (false: pfm record was killed;
    /// the samples it wrote are all here).
    pub complete: bool,
    /// What a row is: the `--sort` keys, comma-separated, of comm, pid,
    /// tid, dso, sym (`comm,dso,sym`: a function of a shared object of a
    /// command).
    pub sort: String,
    /// Whether the rows have their Children counts (`--children`, the
    /// default for recordings with call chains), and are ordered by them.
    #[serde(default)]
    pub children: bool,
    /// The call trees' order, `caller` or `callee`, when the rows have
    /// them (`-g`, the default for recordings with call chains).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_graph: Option<String>,
    /// The rows, most samples (with `children`, most Children) first.
    pub rows: Vec<ReportRow>,
}

/// A row of `pfm report`: where some samples' instruction pointers were.
/// The key fields are those of the `--sort` keys; the others are absent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportRow {
    /// `samples` in percent of the file's samples (perf's Self).
    pub overhead_pct: f64,
    /// Samples whose instruction pointer was here.
    pub samples: u64,
    /// `--children`: samples whose stack was here anywhere (itself or a
    /// callee).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub children: Option<u64>,
    /// `--children`: those in percent of the file's samples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub children_pct: Option<f64>,
    /// `comm`: the thread's name (`/proc/TID/comm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    /// `pid`: the process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// `tid`: the thread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
    /// `dso`: the shared object's file name (the table's), or a
    /// pseudo-name: `[vdso]`, `[heap]`, `[anon]`, `[unknown]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dso: Option<String>,
    /// `dso`: its path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dso_path: Option<String>,
    /// `sym`: the function (demangled), or the address in hex when no
    /// symbol covers it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symbol: Option<String>,
    /// `-g`: the call tree of the samples the row counts (see
    /// Documentation/pfm.rst, "pfm report": its roots and order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callchain: Option<Vec<ChainNode>>,
}

/// A node of a [`ReportRow`]'s call tree.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChainNode {
    /// The function (or the address in hex).
    pub symbol: String,
    /// The samples whose path goes through it.
    pub samples: u64,
    /// Their percent of the file's samples.
    pub pct: f64,
    /// The next functions of those paths (callers in callee order,
    /// callees in caller order), most samples first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub next: Vec<ChainNode>,
}

/// `pfm script --json`: one sample of a record file, one document per
/// line, in the file's order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptSample {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// When it was taken: `CLOCK_MONOTONIC` ns (the module's entries'
    /// clock).
    pub time_ns: u64,
    /// The thread (pfm record's pid namespace).
    pub tid: u32,
    /// Its process.
    pub pid: u32,
    /// The thread's name (`:TID` when pfm never saw it).
    pub comm: String,
    /// The CPU it ran on.
    pub cpu: u16,
    /// The event sampled, as named to pfm record.
    pub event: String,
    /// The period this sample ended: events since the thread's previous
    /// sample (with `--random` its own; else the recording's).
    pub period: u64,
    /// The stack: the sampled instruction first, then the callers' return
    /// addresses (`-g`).
    pub stack: Vec<ScriptFrame>,
}

/// `pfm annotate --json`: one function's instructions with their samples,
/// one document per function and line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Annotation {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The function (demangled).
    pub symbol: String,
    /// The shared object's file name.
    pub dso: String,
    /// Its path (or `[vdso]`).
    pub dso_path: String,
    /// The function's first address, a virtual address of the file.
    pub address: u64,
    /// Its size in bytes (of a symbol without one: up to the next).
    pub size: u64,
    /// The event sampled.
    pub event: String,
    /// The samples whose instruction pointer was in the function.
    pub samples: u64,
    /// Its instructions in address order.
    pub instructions: Vec<AnnotatedInstruction>,
}

/// One instruction of an [`Annotation`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnnotatedInstruction {
    /// Its address (a virtual address of the file).
    pub address: u64,
    /// Its offset in the function.
    pub offset: u64,
    /// Intel syntax, as disassembled.
    pub text: String,
    /// The samples at it.
    pub samples: u64,
    /// Their percent of the function's.
    pub pct: f64,
}

/// One frame of a [`ScriptSample`]'s stack.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptFrame {
    /// The address as sampled.
    pub ip: u64,
    /// The function (demangled), if a symbol covers it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symbol: Option<String>,
    /// The address's offset in that function.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// The mapped file's path, or `[vdso]`, `[heap]`, `[anon]`,
    /// `[unknown]`.
    pub dso: String,
}

pub mod pprof;

#[cfg(test)]
mod tests;
