//! pfm's command line, declared once: clap derives the parser and `--help`
//! from these types, and `pfm-gen` (src/bin/pfm-gen.rs) the man page and
//! the shell completions, so the three cannot disagree.
//!
//! What clap cannot express (an option that goes with one target only, a
//! thread id of 0) is checked by [`StatArgs::check`], whose messages read
//! like clap's.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::sets::{self, Switch};

/// `pfm --version`: the tool's version and the module ABI it speaks (the
/// unit tests hold the number to `PFM_ABI_VERSION`).
pub const LONG_VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (perfmon ABI 1)");

const LONG_ABOUT: &str = "\
Per-thread performance counters through /dev/perfmon, the perfmon module's \
device, in the habits of perf stat: pfm stat counts a command and the \
processes it creates from its first instruction, or running processes or a \
thread for a while; pfm record samples a command (or running threads) into \
a file, and pfm report shows where the samples were: functions, call \
trees, a pprof profile, a flame graph; pfm script prints each sample, pfm \
annotate a function's instructions with their samples; pfm list shows the \
events; pfm info shows the module, its ABI and its PMU model.

Load the module first: insmod perfmon.ko (pmu=soft on machines without a \
usable PMU, such as most virtual machines).";

const AFTER_LONG_HELP: &str = "\
Events:
  The module's own event names (pfm list) and perf's names for them \
(cycles, cpu-clock, cs, migrations, cache-misses, ...), with perf's \
modifiers :u, :k, :p; raw PMC values as perf takes them (r<hex>, e.g. \
r5100c0: INT, which the module owns, is dropped); and, on the hardware \
models (intel_arch, amd64), every event of the CPU's core PMU in libpfm4's \
table: EVENT.UMASK or EVENT:UMASK with modifiers (INST_RETIRED.ANY_P:u, \
BR_MISP_RETIRED.ALL_BRANCHES:c=1). Without :u or :k a hardware event counts \
user mode only; kernel mode (:k) needs CAP_PERFMON.

Environment:
  LIBPFM_FORCE_PMU=NAME   use libpfm4's table of PMU NAME (e.g. skl, icl) \
whatever the CPU says; names are those of libpfm4's showevtinfo -L.

Exit status:
  pfm stat CMD and pfm record CMD exit with CMD's status (128+N if a signal \
N killed it; 127 if CMD cannot be found, 126 if it cannot be run; the last \
run's with -r). \
Otherwise 0 on success, 1 on an error, 2 on a usage error.

Documentation/pfm.rst describes the output, the JSON documents, the \
derived metrics and the record file.";

/// `pfm`: per-thread performance counters through /dev/perfmon.
#[derive(Debug, Parser)]
#[command(
    name = "pfm",
    version,
    long_version = LONG_VERSION,
    about = "Per-thread performance counters through /dev/perfmon",
    long_about = LONG_ABOUT,
    after_long_help = AFTER_LONG_HELP,
    arg_required_else_help = true,
    propagate_version = true
)]
pub struct Cli {
    /// JSON output: one JSON document per line (Documentation/pfm.rst);
    /// also taken after the command's name, by the commands that print
    #[arg(short = 'j', long)]
    pub json: bool,

    /// Write the output to FILE instead of the terminal (pfm record: the
    /// record file, default pfm.data); also taken after the command's name
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// `--json`, before or after the command's name.
    pub fn json(&self) -> bool {
        self.json
            || match &self.command {
                Command::Stat(s) => s.out.json,
                Command::Report(r) => r.out.json,
                Command::Script(r) => r.out.json,
                Command::Annotate(r) => r.out.json,
                Command::List(o) | Command::Info(o) => o.json,
                Command::Record(_) => false,
            }
    }

    /// `-o FILE`, after the command's name, else before it.
    pub fn output(&self) -> Option<&std::path::Path> {
        let own = match &self.command {
            Command::Stat(s) => s.out.output.as_deref(),
            Command::Report(r) => r.out.output.as_deref(),
            Command::Script(r) => r.out.output.as_deref(),
            Command::Annotate(r) => r.out.output.as_deref(),
            Command::List(o) | Command::Info(o) => o.output.as_deref(),
            Command::Record(r) => r.output.as_deref(),
        };
        own.or(self.output.as_deref())
    }
}

/// The output options of the commands that print: each command declares
/// the options it takes, so that its --help lists only those (pfm record
/// writes a record file, and takes -o alone).
#[derive(Debug, Args, Default)]
pub struct OutputArgs {
    /// JSON output: one JSON document per line (Documentation/pfm.rst)
    #[arg(short = 'j', long)]
    pub json: bool,

    /// Write the output to FILE instead of the terminal (- is standard
    /// output)
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// perf's options for whole CPUs and delayed starts, which a per-thread
/// tool has no use for: parsed (and hidden from --help) only to say so in
/// one line, rather than to suggest '-- -a' as for any unknown option.
#[derive(Debug, Args, Default)]
pub struct PerfOnlyArgs {
    /// perf's system-wide counting: not supported
    #[arg(short = 'a', long = "all-cpus", hide = true)]
    pub all_cpus: bool,

    /// perf's counting on given CPUs: not supported
    #[arg(short = 'C', long = "cpu", value_name = "CPUS", hide = true)]
    pub cpu: Option<String>,

    /// perf's delayed start: not supported
    #[arg(
        short = 'D',
        long = "delay",
        value_name = "MS",
        hide = true,
        allow_hyphen_values = true
    )]
    pub delay: Option<String>,
}

impl PerfOnlyArgs {
    /// The one line that says which perf option is not pfm's, and why.
    pub fn check(&self) -> Result<(), String> {
        let per_thread = "pfm is a per-thread tool: it counts a command (with the \
                          threads and processes it creates), -p PID or -t TID, never \
                          a whole CPU";
        if self.all_cpus {
            return Err(format!("-a (--all-cpus) is not supported: {per_thread}"));
        }
        if self.cpu.is_some() {
            return Err(format!("-C (--cpu) is not supported: {per_thread}"));
        }
        if self.delay.is_some() {
            return Err(
                "-D (--delay) is not supported: pfm is a per-thread tool that \
                        counts a command from its first instruction"
                    .into(),
            );
        }
        Ok(())
    }
}

/// pfm's commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Count events of a command (its whole tree), of running processes, or
    /// of a thread
    #[command(
        long_about = STAT_ABOUT,
        after_long_help = AFTER_LONG_HELP
    )]
    Stat(Box<StatArgs>),
    /// Sample a command (or running threads) into a file: the instruction
    /// pointer every PERIOD events
    #[command(long_about = RECORD_ABOUT, after_long_help = AFTER_LONG_HELP)]
    Record(Box<RecordArgs>),
    /// Where a record file's samples were: functions, shared objects,
    /// threads, call trees, a pprof profile, a flame graph
    #[command(long_about = REPORT_ABOUT, after_long_help = AFTER_LONG_HELP)]
    Report(ReportArgs),
    /// A record file's samples, one line (or JSON object) each
    #[command(long_about = SCRIPT_ABOUT, after_long_help = AFTER_LONG_HELP)]
    Script(ScriptArgs),
    /// A function's instructions with their share of its samples
    #[command(long_about = ANNOTATE_ABOUT, after_long_help = AFTER_LONG_HELP)]
    Annotate(AnnotateArgs),
    /// Events of the loaded PMU model (and libpfm4's, on hardware models)
    List(OutputArgs),
    /// The module: ABI version, PMU model, counters, vector, live contexts
    Info(OutputArgs),
}

const STAT_ABOUT: &str = "\
Count events of a command from its first instruction (pfm stat CMD), of \
running processes (pfm stat -p PID,...) or of a running thread (pfm stat -t \
TID) until Ctrl-C, --duration, or its exit.

As perf stat, pfm stat counts a command's whole tree: the threads and \
processes it creates, and theirs, from the command's exec on (not pfm's own \
fork before it); --no-inherit counts its initial thread only. -p counts \
every thread of each process, those it creates from then on too, and prints \
one total; -t one thread. --per-thread adds a row per thread: its name, its \
id and its counts (a thread that exited before pfm saw it is named -). If \
some threads could not be monitored (the module's limits), pfm says how many: \
the totals miss them.

The table goes to standard error, as perf stat's does, so the command's \
own output stays clean; -o FILE writes it to FILE instead. --json prints \
one JSON document per line, -x SEP one CSV line per event in perf stat -x's \
field order.

More events than counters are multiplexed, as perf stat does it: pfm puts \
them into event sets that take turns on the counters (perfmon2's event \
sets; --switch, every 4 ms of the thread's running time by default) and \
prints each count scaled to the whole time, count x time enabled / time \
running, followed by the share of the time it was counted, (66.67%); an \
event never counted prints <not counted>. Events in braces, -e '{a,b},c', \
are counted together, in one set. --sets gives the sets instead. Every \
thread of a command or process multiplexes the sets on its own running \
time; the totals add each set's counts and times over the threads, and \
--per-thread scales each thread's counts by its own.";

const RECORD_ABOUT: &str = "\
Sample a command from its first instruction (pfm record -e EVENT -c PERIOD \
-- CMD), running processes (-p PID,...) or a running thread (-t TID) until \
Ctrl-C, --duration or its exit: every PERIOD events of EVENT, the module's \
sampling buffer takes the thread's instruction pointer, and pfm writes the \
samples to a file (-o FILE, default pfm.data) while the program runs, with \
the memory maps of its processes, which pfm report resolves them against. \
The events are named as for pfm stat.

-c PERIOD is required, or -F FREQ for task-clock (a period of 1e9/FREQ ns). \
A command is sampled whole: the threads and processes it creates write \
their samples into the same buffer (PFM_CTXFL_INHERIT); --no-inherit \
samples its initial thread only. -p samples each process whole, the \
threads it has and those it creates (PFM_LOAD_PROCESS); -t one thread.

A whole program's full buffer drops samples and counts them as lost, as \
--drop asks; one thread's (-t, --no-inherit) pauses sampling until pfm \
drains it (perfmon2's policy: nothing is lost, the events while paused \
are not counted). pfm \
drains whenever the buffer is half full (the module's watermark) and every \
50 ms, so the buffer fills only if the program outruns pfm. At the end pfm \
prints one line to standard error: the samples written and lost.";

/// A key of `pfm report --sort`: what the samples are grouped by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SortKey {
    /// The thread's name.
    Comm,
    /// The process.
    Pid,
    /// The thread.
    Tid,
    /// The shared object.
    Dso,
    /// The function.
    Sym,
}

impl SortKey {
    /// The name as `--sort` takes it.
    pub fn name(self) -> &'static str {
        match self {
            SortKey::Comm => "comm",
            SortKey::Pid => "pid",
            SortKey::Tid => "tid",
            SortKey::Dso => "dso",
            SortKey::Sym => "sym",
        }
    }
}

/// `--sort KEY,...`: the keys of a row, in the table's column order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sort(pub Vec<SortKey>);

impl Default for Sort {
    /// perf report's: `comm,dso,sym`.
    fn default() -> Self {
        Sort(vec![SortKey::Comm, SortKey::Dso, SortKey::Sym])
    }
}

impl Sort {
    /// Whether `key` is one of the keys.
    pub fn has(&self, key: SortKey) -> bool {
        self.0.contains(&key)
    }

    /// The keys as `--sort` takes them: `comm,dso,sym`.
    pub fn name(&self) -> String {
        let names: Vec<&str> = self.0.iter().map(|k| k.name()).collect();
        names.join(",")
    }
}

/// `--sort`'s value: keys of comm, pid, tid, dso, sym (perf's names; perf's
/// `symbol` too), comma-separated, each once.
pub fn parse_sort(v: &str) -> Result<Sort, String> {
    let mut keys = Vec::new();
    for word in v.split(',').map(str::trim) {
        let key = match word {
            "comm" => SortKey::Comm,
            "pid" => SortKey::Pid,
            "tid" => SortKey::Tid,
            "dso" => SortKey::Dso,
            "sym" | "symbol" => SortKey::Sym,
            "" => return Err("an empty key: the keys are comm, pid, tid, dso, sym".into()),
            _ => {
                return Err(format!(
                    "'{word}' is not a key: the keys are comm, pid, tid, dso, sym"
                ))
            }
        };
        if keys.contains(&key) {
            return Err(format!("'{word}' given twice"));
        }
        keys.push(key);
    }
    Ok(Sort(keys))
}

/// The order of `pfm report -g`'s call trees, as perf's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// From the callers down: under a function its callees (with
    /// `--children`), or the stacks from the outermost caller down to it.
    Caller,
    /// From the function up: its callers, their callers, ...
    Callee,
}

impl Order {
    /// The name as `-g` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Order::Caller => "caller",
            Order::Callee => "callee",
        }
    }
}

/// `pfm report -g`: whether and how call trees are shown.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Graph {
    /// `-g none`: no trees.
    None,
    /// Trees in this order, without the branches below `threshold` percent
    /// of all the samples.
    Tree {
        /// Caller or callee.
        order: Order,
        /// Percent of all samples below which a branch is left out.
        threshold: f64,
    },
}

/// The call trees' default branch threshold, perf's: 0.5%.
pub const GRAPH_THRESHOLD: f64 = 0.5;

/// `-g`'s value as perf takes it, comma-separated: `caller` or `callee`,
/// `none`, perf's `graph` (the only style), and a threshold in percent.
pub fn parse_graph(v: &str) -> Result<Graph, String> {
    let mut order = Order::Caller;
    let mut threshold = GRAPH_THRESHOLD;
    for word in v.split(',').map(str::trim) {
        match word {
            "caller" => order = Order::Caller,
            "callee" => order = Order::Callee,
            "graph" | "" => {}
            "none" => return Ok(Graph::None),
            "flat" | "fractal" | "folded" => {
                return Err(format!(
                    "'{word}' is not supported: pfm draws perf's graph style (caller, callee, none, a threshold in percent)"
                ))
            }
            _ => match word.parse::<f64>() {
                Ok(t) if t.is_finite() && (0.0..=100.0).contains(&t) => threshold = t,
                _ => {
                    return Err(format!(
                        "'{word}' is neither caller, callee, none nor a threshold in percent"
                    ))
                }
            },
        }
    }
    Ok(Graph::Tree { order, threshold })
}

/// `--call-graph`'s modes, as perf's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallGraph {
    /// A walk of the frame pointers (the module's).
    Fp,
}

/// `--call-graph MODE[,SIZE]` as perf takes it: `fp` is what the module
/// records; `dwarf` and `lbr` say in one line that they are not.
fn parse_call_graph(v: &str) -> Result<CallGraph, String> {
    let mode = v.split(',').next().unwrap_or("").trim();
    match mode {
        "fp" => Ok(CallGraph::Fp),
        "dwarf" => Err(
            "not supported: perfmon records frame-pointer chains in the kernel, \
                        not stack copies to unwind (build with frame pointers and use \
                        --call-graph fp, or -g)"
                .into(),
        ),
        "lbr" => Err(
            "not supported: perfmon does not program the last branch record; \
                      use --call-graph fp (or -g)"
                .into(),
        ),
        _ => Err(
            "the modes are fp (and perf's dwarf and lbr, which pfm does not \
                  support)"
                .into(),
        ),
    }
}

/// `pfm record` arguments.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// The record file (default pfm.data; an existing one is kept as
    /// FILE.old; - is standard output, the command's own output then going
    /// to standard error)
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// The event to sample (default: the model's first event: task-clock on
    /// soft); named as for pfm stat
    #[arg(short = 'e', long = "event", value_name = "EVENT")]
    pub event: Option<String>,

    /// Sample every PERIOD events (task-clock: ns)
    #[arg(
        short = 'c',
        long = "count",
        value_name = "PERIOD",
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub period: Option<u64>,

    /// task-clock: sample FREQ times per second of the thread's running
    /// time (a period of 1e9/FREQ ns)
    #[arg(
        short = 'F',
        long = "freq",
        value_name = "FREQ",
        value_parser = clap::value_parser!(u64).range(1..=1_000_000_000),
        conflicts_with = "period"
    )]
    pub freq: Option<u64>,

    /// Sample these running processes whole, instead of running a
    /// command: every thread they have and create (one buffer each; full,
    /// it drops)
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID,...",
        value_delimiter = ',',
        value_parser = parse_pid,
        conflicts_with_all = ["command", "tid"]
    )]
    pub pids: Vec<u32>,

    /// Sample this running thread instead of running a command
    #[arg(
        short = 't',
        long = "tid",
        value_name = "TID",
        value_parser = parse_tid,
        conflicts_with = "command"
    )]
    pub tid: Option<u32>,

    /// With -t or -p: stop after S seconds (fractions allowed)
    #[arg(long, value_name = "S", value_parser = parse_secs)]
    pub duration: Option<Duration>,

    /// Randomise the period: each reset adds a pseudo-random amount in
    /// [0, MASK] to it (PFM_REGFL_RANDOM; MASK is 2^k - 1), so that
    /// sampling cannot fall in step with a loop
    #[arg(long = "random", value_name = "MASK", value_parser = parse_random_mask)]
    pub random: Option<u64>,

    /// With --random: the generator's seed, for a run that draws the same
    /// periods again (default: one the kernel picks, written in the file)
    #[arg(long = "random-seed", value_name = "SEED", requires = "random")]
    pub random_seed: Option<u64>,

    /// Pages of the sampling buffer (4 KiB each, 32 samples a page): a
    /// power of two, at most 1024
    #[arg(long, value_name = "N", default_value_t = 128, value_parser = parse_pages)]
    pub pages: u32,

    /// A full buffer drops samples (counted as lost) instead of pausing
    /// sampling until pfm drains it (always so for a whole program: a
    /// command's threads and processes, or -p)
    #[arg(long)]
    pub drop: bool,

    /// Record each sample's user call chain (a walk of the frame pointers:
    /// whole for code built with them, -fno-omit-frame-pointer or Rust's
    /// -C force-frame-pointers=yes)
    #[arg(short = 'g')]
    pub g: bool,

    /// Record call chains, as perf's --call-graph: fp (frame pointers, as
    /// -g); dwarf and lbr are not supported
    #[arg(long = "call-graph", value_name = "MODE", value_parser = parse_call_graph)]
    pub call_graph_mode: Option<CallGraph>,

    /// With -g: return addresses a sample records at most (1 to 64, default
    /// 32; the buffer's entries grow with it: 512 bytes at 32)
    #[arg(
        long = "max-stack",
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..=64)
    )]
    pub max_stack: Option<u32>,

    #[command(flatten)]
    pub perf_only: PerfOnlyArgs,

    /// Sample the command's initial thread only, not the threads and
    /// processes it creates (then a full buffer pauses sampling until pfm
    /// drains it, unless --drop)
    #[arg(long = "no-inherit", conflicts_with_all = ["tid", "pids"])]
    pub no_inherit: bool,

    /// The command to run and its arguments (options after its name are its
    /// own; `--` ends pfm's options)
    #[arg(
        value_name = "COMMAND",
        trailing_var_arg = true,
        value_parser = clap::value_parser!(OsString)
    )]
    pub command: Vec<OsString>,
}

impl RecordArgs {
    /// Whether call chains are recorded (-g, --call-graph fp).
    pub fn call_graph(&self) -> bool {
        self.g || self.call_graph_mode.is_some()
    }

    /// The return addresses a sample records with call chains.
    pub fn chain_depth(&self) -> u32 {
        self.max_stack.unwrap_or(32)
    }

    /// What clap's declarations cannot say.
    pub fn check(&self, json: bool) -> Result<(), String> {
        self.perf_only.check()?;
        if self.max_stack.is_some() && !self.call_graph() {
            return Err("--max-stack goes with -g (or --call-graph fp)".into());
        }
        if json {
            return Err("pfm record writes a record file; --json goes with pfm report".into());
        }
        if self.tid.is_none() && self.pids.is_empty() && self.command.is_empty() {
            return Err(
                "nothing to sample: give a command (pfm record -c PERIOD -- CMD ARGS), \
                 processes (-p PID) or a thread (-t TID)"
                    .into(),
            );
        }
        if self.period.is_none() && self.freq.is_none() {
            return Err(
                "pfm record needs a sampling period: -c PERIOD (or -F FREQ for task-clock)".into(),
            );
        }
        if self.duration.is_some() && self.tid.is_none() && self.pids.is_empty() {
            return Err(
                "--duration goes with -t TID or -p PID (a command is sampled until it ends)".into(),
            );
        }
        let mut seen = std::collections::BTreeSet::new();
        if let Some(dup) = self.pids.iter().find(|p| !seen.insert(**p)) {
            return Err(format!("-p names process {dup} twice"));
        }
        Ok(())
    }
}

const REPORT_ABOUT: &str = "\
Where the samples of a record file (pfm record; -i FILE, default pfm.data) \
were: a table as perf report --stdio shows it, a row per distinct value of \
the --sort keys (default comm,dso,sym: a function of a shared object of a \
command; comm,tid,sym per thread, pid,sym per process), most samples first: \
overhead %, samples, then the keys' columns. Addresses are resolved through \
the memory maps pfm record captured, to the mapped file and offset, to the \
ELF's virtual address, to the symbol of its .symtab (else .dynsym) that \
covers it; Rust names are demangled. The files are read as they are now: a \
program rebuilt since the recording resolves wrong.

A -g recording's stacks give perf's children view (--children, its \
default there; --no-children turns it off): a Children column, the share \
of the samples whose stack holds the row's function anywhere, beside Self, \
the share taken in it, and the rows ordered by Children. Under each row a \
call tree (-g caller, the default, or -g callee; -g none hides them): in \
callee order the function's callers, their callers, ...; in caller order \
the functions it called down to the sampled ones (with --children), or the \
stacks from the outermost caller down to it (--no-children). Branches under \
0.5% of all the samples are left out (-g caller,0.1 sets the threshold).

--pid, --tid and --comm keep the samples of some processes, threads or \
thread names. --json prints one JSON document instead of the table; --pprof \
FILE writes a gzipped pprof profile (profile.proto: go tool pprof, pprof \
-http), whose event values are each sample's own period (--random's too); \
--flamegraph FILE writes an SVG flame graph. The table goes to standard \
output, or -o FILE.";

/// Which samples `pfm report`, `pfm script` and `pfm annotate` take:
/// perf report's `--pid`, `--tid` and `--comm`.
#[derive(Debug, Args, Default, Clone)]
pub struct FilterArgs {
    /// Only the samples of these processes
    #[arg(long = "pid", value_name = "PID,...", value_delimiter = ',', value_parser = parse_pid)]
    pub pids: Vec<u32>,

    /// Only the samples of these threads
    #[arg(long = "tid", value_name = "TID,...", value_delimiter = ',', value_parser = parse_tid)]
    pub tids: Vec<u32>,

    /// Only the samples of threads of these names
    #[arg(long = "comm", value_name = "COMM,...", value_delimiter = ',')]
    pub comms: Vec<String>,
}

impl FilterArgs {
    /// Whether any filter was given.
    pub fn any(&self) -> bool {
        !(self.pids.is_empty() && self.tids.is_empty() && self.comms.is_empty())
    }

    /// Whether a sample of thread `tid` of process `pid`, named `comm`,
    /// is taken.
    pub fn keeps(&self, pid: u32, tid: u32, comm: &str) -> bool {
        (self.pids.is_empty() || self.pids.contains(&pid))
            && (self.tids.is_empty() || self.tids.contains(&tid))
            && (self.comms.is_empty() || self.comms.iter().any(|c| c == comm))
    }
}

/// `pfm report` arguments.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The record file to read (- is standard input)
    #[arg(
        short = 'i',
        long = "input",
        value_name = "FILE",
        default_value = "pfm.data"
    )]
    pub input: PathBuf,

    #[command(flatten)]
    pub out: OutputArgs,

    /// A row per distinct value of these keys, comma-separated, in this
    /// column order: comm, pid, tid, dso, sym (comm,tid,sym: per thread;
    /// pid,sym: per process)
    #[arg(
        short = 's',
        long,
        value_name = "KEY,...",
        default_value = "comm,dso,sym",
        value_parser = parse_sort
    )]
    pub sort: Sort,

    /// Add a Children column: the samples whose stack holds the row's
    /// function anywhere, itself or in a callee (the default for -g
    /// recordings; rows by it)
    #[arg(long, overrides_with = "no_children")]
    pub children: bool,

    /// The Self column only: the samples taken in the row's function
    #[arg(long = "no-children", overrides_with = "children")]
    pub no_children: bool,

    /// Call trees under the rows (default for -g recordings: caller,0.5):
    /// caller or callee order, none, and a threshold in percent
    #[arg(
        short = 'g',
        long = "call-graph",
        value_name = "ORDER[,PCT]",
        num_args = 0..=1,
        require_equals = false,
        default_missing_value = "caller",
        value_parser = parse_graph
    )]
    pub graph: Option<Graph>,

    #[command(flatten)]
    pub filter: FilterArgs,

    /// Also write a pprof profile (gzipped profile.proto) to FILE
    #[arg(long, value_name = "FILE")]
    pub pprof: Option<PathBuf>,

    /// Also write a flame graph (SVG) to FILE
    #[arg(long, value_name = "FILE")]
    pub flamegraph: Option<PathBuf>,
}

const SCRIPT_ABOUT: &str = "\
Every sample of a record file (pfm record; -i FILE, default pfm.data), one \
line each in the file's order, as perf script prints them: the thread's \
name, pid/tid, [cpu], the time (CLOCK_MONOTONIC, seconds), the period, the \
event, then the instruction pointer, its function+offset and its shared \
object; a -g recording's samples take a line per frame of their stack \
instead, the sampled instruction first, then the callers' return \
addresses, and an empty line. --json prints one JSON object per sample and \
line (Documentation/pfm.rst).";

/// `pfm script` arguments.
#[derive(Debug, Args)]
pub struct ScriptArgs {
    /// The record file to read (- is standard input)
    #[arg(
        short = 'i',
        long = "input",
        value_name = "FILE",
        default_value = "pfm.data"
    )]
    pub input: PathBuf,

    #[command(flatten)]
    pub out: OutputArgs,

    #[command(flatten)]
    pub filter: FilterArgs,
}

const ANNOTATE_ABOUT: &str = "\
The instructions of a function with the share of its samples at each, as \
perf annotate --stdio prints them: the function's code is read from its \
file (as it is now: rebuilt since the recording, it disagrees) and \
disassembled (x86-64, Intel syntax), and each sample whose instruction \
pointer was in the function counts at its instruction. SYMBOL is the \
function's name as pfm report shows it, or its last path segment \
(hot_work for crate::hot_work); without SYMBOL, every function with \
samples, most first. --json prints one JSON object per function.";

/// `pfm annotate` arguments.
#[derive(Debug, Args)]
pub struct AnnotateArgs {
    /// The record file to read (- is standard input)
    #[arg(
        short = 'i',
        long = "input",
        value_name = "FILE",
        default_value = "pfm.data"
    )]
    pub input: PathBuf,

    #[command(flatten)]
    pub out: OutputArgs,

    #[command(flatten)]
    pub filter: FilterArgs,

    /// The function to annotate (default: every function with samples)
    #[arg(value_name = "SYMBOL")]
    pub symbol: Option<String>,
}

/// `pfm stat` arguments.
#[derive(Debug, Args)]
pub struct StatArgs {
    /// Events to count, comma-separated or repeated (default: the model's
    /// first events, one per counter); {a,b} counts a and b together.
    /// More than the counters are multiplexed
    #[arg(
        short = 'e',
        long = "event",
        visible_alias = "events",
        value_name = "EVENT,...",
        value_delimiter = ','
    )]
    pub events: Vec<String>,

    /// The event sets, instead of -e: sets separated by ':', events by ','
    /// (cs,task-clock:migrations,task-clock); each set takes its turn on
    /// the counters
    #[arg(long = "sets", value_name = "SETS", conflicts_with = "events")]
    pub sets: Vec<String>,

    /// Multiplexing: switch sets after TIME of the thread's running time,
    /// a whole number with ns, us, ms or s (default 4ms, at least 100us)
    #[arg(long = "switch", value_name = "TIME", value_parser = sets::parse_switch_time)]
    pub switch: Option<u64>,

    /// Multiplexing: switch sets after N overflows of each set's first
    /// event, of period -c (a copy of that event on one more counter)
    #[arg(
        long = "switch-on-overflow",
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..),
        conflicts_with = "switch",
        requires = "period"
    )]
    pub switch_on_overflow: Option<u32>,

    /// With --switch-on-overflow: the period, in events, of each set's
    /// trigger
    #[arg(
        short = 'c',
        long = "period",
        value_name = "PERIOD",
        value_parser = clap::value_parser!(u64).range(1..),
        requires = "switch_on_overflow"
    )]
    pub period: Option<u64>,

    /// Count these running processes, every thread of each and those they
    /// create from then on, instead of running a command (one total)
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID,...",
        value_delimiter = ',',
        value_parser = parse_pid,
        conflicts_with_all = ["command", "tid"]
    )]
    pub pids: Vec<u32>,

    /// Attach to this running thread instead of running a command (that
    /// thread only)
    #[arg(
        short = 't',
        long = "tid",
        value_name = "TID",
        value_parser = parse_tid,
        conflicts_with = "command"
    )]
    pub tid: Option<u32>,

    /// Count the command's initial thread only, not the threads and
    /// processes it creates
    #[arg(long = "no-inherit", conflicts_with_all = ["tid", "pids"])]
    pub no_inherit: bool,

    /// Also print each thread's counts: its name, its id, a value per event
    #[arg(long = "per-thread")]
    pub per_thread: bool,

    /// Print the counts of each interval of MS milliseconds (at least 10),
    /// then the totals
    #[arg(
        short = 'I',
        long = "interval",
        visible_alias = "interval-ms",
        value_name = "MS",
        value_parser = parse_interval
    )]
    pub interval: Option<Duration>,

    /// With -t or -p: stop after S seconds (fractions allowed)
    #[arg(long, value_name = "S", value_parser = parse_secs)]
    pub duration: Option<Duration>,

    /// Run the command N times and print the mean of each count and its
    /// variation (± the standard deviation of the mean, in percent)
    #[arg(
        short = 'r',
        long = "repeat",
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..=1_000_000),
        conflicts_with_all = ["tid", "pids", "interval", "per_thread"]
    )]
    pub repeat: Option<u32>,

    /// CSV output: one line per event, fields separated by SEP, in perf stat
    /// -x's order
    #[arg(short = 'x', long = "field-separator", value_name = "SEP")]
    pub separator: Option<String>,

    /// Print counts without thousands separators
    #[arg(long = "no-big-num")]
    pub no_big_num: bool,

    /// Also count with perf_event_open (software events) and show its
    /// counts beside (inherited as perfmon's are: the same threads)
    #[arg(long)]
    pub perf: bool,

    #[command(flatten)]
    pub out: OutputArgs,

    #[command(flatten)]
    pub perf_only: PerfOnlyArgs,

    /// The command to run and its arguments (options after its name are its
    /// own; `--` ends pfm's options)
    #[arg(
        value_name = "COMMAND",
        trailing_var_arg = true,
        value_parser = clap::value_parser!(OsString)
    )]
    pub command: Vec<OsString>,
}

impl StatArgs {
    /// What clap's declarations cannot say: the target is required, and
    /// some options go with one target only. `json`: the global `--json`.
    pub fn check(&self, json: bool) -> Result<(), String> {
        self.perf_only.check()?;
        if self.tid.is_none() && self.pids.is_empty() && self.command.is_empty() {
            return Err("nothing to count: give a command (pfm stat -- CMD ARGS), \
                 processes (-p PID) or a thread (-t TID)"
                .into());
        }
        if self.duration.is_some() && self.tid.is_none() && self.pids.is_empty() {
            return Err(
                "--duration goes with -t TID or -p PID (a command is counted until it ends)".into(),
            );
        }
        let mut seen = std::collections::BTreeSet::new();
        if let Some(dup) = self.pids.iter().find(|p| !seen.insert(**p)) {
            return Err(format!("-p names process {dup} twice"));
        }
        if self.separator.is_some() && json {
            return Err("-x and --json are two output formats: give one".into());
        }
        if self.separator.as_deref() == Some("") {
            return Err("-x needs a separator (e.g. -x, or -x ';')".into());
        }
        self.groups()?;
        Ok(())
    }

    /// The events as groups to count together: `-e`'s (`{a,b}` one
    /// group, every other event its own), or `--sets`'s sets; and whether
    /// they are sets (`--sets`, kept as given) rather than groups (packed
    /// into sets when they do not fit the counters).
    pub fn groups(&self) -> Result<(Vec<Vec<String>>, bool), String> {
        if self.sets.is_empty() {
            sets::parse_groups(&self.events).map(|g| (g, false))
        } else {
            sets::parse_sets(&self.sets).map(|s| (s, true))
        }
    }

    /// How multiplexed sets switch: `--switch-on-overflow N -c P`, else
    /// `--switch TIME`, else every [`sets::DEFAULT_SWITCH_NS`].
    pub fn switch(&self) -> Switch {
        match (self.switch_on_overflow, self.period) {
            (Some(count), Some(period)) => Switch::Overflow { count, period },
            _ => Switch::Time(self.switch.unwrap_or(sets::DEFAULT_SWITCH_NS)),
        }
    }

    /// Whether a command is counted with the threads and processes it
    /// creates (not `--no-inherit`), as far as the command line says.
    pub fn inherit(&self) -> bool {
        !self.command.is_empty() && !self.no_inherit
    }

    /// Whether the command line chose how sets switch.
    pub fn switch_given(&self) -> bool {
        self.switch.is_some() || self.switch_on_overflow.is_some()
    }
}

/// A thread id: positive, and one the kernel can have.
fn parse_tid(v: &str) -> Result<u32, String> {
    match v.trim().parse::<u32>() {
        Ok(0) => Err("0 would be pfm itself: give the thread's id".into()),
        Ok(t) if t <= i32::MAX as u32 => Ok(t),
        _ => Err(format!("'{v}' is not a thread id")),
    }
}

/// A process id: positive, and one the kernel can have.
fn parse_pid(v: &str) -> Result<u32, String> {
    match v.trim().parse::<u32>() {
        Ok(0) => Err("0 is not a process: give the process's id".into()),
        Ok(p) if p <= i32::MAX as u32 => Ok(p),
        _ => Err(format!("'{v}' is not a process id")),
    }
}

/// An interval in milliseconds, at least 10 (shorter ones measure pfm).
fn parse_interval(v: &str) -> Result<Duration, String> {
    match v.trim().parse::<u64>() {
        Ok(ms) if ms >= 10 => Ok(Duration::from_millis(ms)),
        Ok(_) => Err("the interval must be at least 10 ms".into()),
        Err(_) => Err(format!("'{v}' is not a number of milliseconds")),
    }
}

/// Sampling buffer pages: a power of two, 1 to 1024 (the module's limit).
fn parse_pages(v: &str) -> Result<u32, String> {
    match v.trim().parse::<u32>() {
        Ok(n) if n.is_power_of_two() && n <= 1024 => Ok(n),
        _ => Err(format!("'{v}' is not a power of two from 1 to 1024")),
    }
}

/// A randomisation mask: 2^k - 1, not 0.
fn parse_random_mask(v: &str) -> Result<u64, String> {
    let t = v.trim();
    let n = match t.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => t.parse::<u64>(),
    };
    match n {
        Ok(m) if m != 0 && perfmon::random::mask_ok(m) => Ok(m),
        _ => Err(format!("'{v}' is not 2^k - 1 (1, 3, 7, ..., 0xffff, ...)")),
    }
}

/// A positive number of seconds.
fn parse_secs(v: &str) -> Result<Duration, String> {
    match v.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s < 1e9 => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!("'{v}' is not a positive number of seconds")),
    }
}
