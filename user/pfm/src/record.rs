//! `pfm record`: samples a command from its first instruction, or running
//! threads, into a record file ([`crate::data_file`]).
//!
//! The event's PMD starts at -PERIOD and is reset to it at each overflow,
//! which writes an entry into the context's sampling buffer
//! (Documentation/perfmon.rst, "Sampling"). pfm drains the mapped buffer
//! while the thread runs (it never stops it): whenever `poll` says the
//! buffer is half full (the module's default watermark), and every
//! [`MAPS_REFRESH`], when it also reads again the maps of every process it
//! has samples of. The maps are what `pfm report` resolves addresses
//! against, and they are gone once a process exits, so pfm reads them
//! while it lives: when a process's first sample arrives, whenever a
//! sample's address is in none of its known mappings (a library mapped
//! since), and every [`MAPS_REFRESH`]; a new snapshot is written only when
//! the text changed. A mapping that appears and goes between two reads
//! without a sample drained in between is missed (a library loaded, run
//! and unloaded within 50 ms): its samples resolve to `[unknown]`.

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::fs::File;
use std::io::BufWriter;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use perfmon::abi::{
    PfmPmd, PfmSmplEntry, PfmSmplSetup, PFM_CTXFL_INHERIT, PFM_CTXFL_START_ON_EXEC,
    PFM_REGFL_RANDOM, PFM_SMPL_DROP,
};
use perfmon::process::{self, ExitStatus, Interrupts, PausedChild};
use perfmon::{Context, Generic, MessageKind, PmuInfo, SampleBuffer};

use crate::cli::RecordArgs;
use crate::data_file::{Finish, Header, Maps, Sample, Thread, Writer};
use crate::events::{Resolved, Resolver};
use crate::maps;
use crate::stat::{comm_of, tasks_of};
use crate::Failure;

/// The file written without `-o`.
pub const DEFAULT_FILE: &str = "pfm.data";

/// How often pfm drains the buffers and reads the maps again.
pub const MAPS_REFRESH: Duration = Duration::from_millis(50);

/// How long a target may take to install the context after LOAD.
const ACTIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Once the sampled threads are gone, how often pfm looks whether the
/// command ended.
const EXITED_POLL: Duration = Duration::from_millis(10);

/// `CLOCK_MONOTONIC` (the entries' clock), or `CLOCK_REALTIME`, in ns.
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; the clocks exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// The sample of a buffer entry and its call chain (empty without `-g`);
/// `period`: its own, written with `--random`.
fn sample_of(e: &PfmSmplEntry, chain: &[u64], period: Option<u64>) -> Sample {
    let n = usize::from(e.nvalues).min(e.values.len());
    Sample {
        tid: e.tid,
        pid: e.pid,
        cpu: e.cpu,
        pmd: e.ovfl_pmd,
        set: e.set,
        seq: e.seq,
        ip: e.ip,
        tstamp: e.tstamp,
        values: e.values[..n].to_vec(),
        // `-g`: the return addresses, the caller of `ip`'s function first.
        chain: chain.to_vec(),
        period,
    }
}

/// This process's vDSO image (`[vdso]` of `/proc/self/maps`, read through
/// `/proc/self/mem`): the kernel maps the same one into every 64-bit
/// process, and no file holds it, so `pfm report` resolves `[vdso]`
/// addresses against this copy. `None` where it cannot be read.
pub(crate) fn own_vdso() -> Option<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let m = maps::parse(&maps)
        .into_iter()
        .find(|m| m.path == "[vdso]")?;
    let mut mem = File::open("/proc/self/mem").ok()?;
    mem.seek(SeekFrom::Start(m.start)).ok()?;
    let mut image = vec![0u8; usize::try_from(m.end - m.start).ok()?];
    mem.read_exact(&mut image).ok()?;
    image.starts_with(b"\x7fELF").then_some(image)
}

/// One sampled thread: its context and the context's buffer.
struct Sampled {
    ctx: Context,
    buf: SampleBuffer,
    tid: u32,
    /// The thread exited (or its monitoring was revoked).
    ended: bool,
    /// The periods its entries ended (randomised ones each their own).
    periods: Periods,
    /// `--random`: its PMD's generator seed.
    seed: Option<u64>,
}

/// The periods a context's drained entries ended, from their reset values
/// (with `--random` each period has its own length: the one its start's
/// reset drew).
struct Periods {
    /// The written period.
    period: u64,
    /// Their sum.
    ended: u64,
    /// Per thread, the reset value of its last entry (which began the
    /// period under way).
    last_reset: HashMap<u32, u64>,
}

impl Periods {
    /// None ended yet, of `plan`'s period.
    fn new(plan: &Plan) -> Self {
        Self {
            period: plan.period,
            ended: 0,
            last_reset: HashMap::new(),
        }
    }

    /// An entry of thread `tid` whose overflow reset the PMD to `reset`:
    /// it ended the period its previous entry's reset began (the first,
    /// the written one). Returns that period: the sample's own.
    fn note(&mut self, tid: u32, reset: u64) -> u64 {
        let period = match self.last_reset.insert(tid, reset) {
            Some(prev) => prev.wrapping_neg(),
            None => self.period,
        };
        self.ended = self.ended.saturating_add(period);
        period
    }
}

/// What pfm knows of a process it has samples of.
#[derive(Default)]
struct Process {
    /// The last maps text written for it.
    maps: String,
    /// Its mappings in that text.
    mappings: Vec<maps::Mapping>,
    /// Its maps could not be read any more: it exited.
    gone: bool,
}

/// The file being written and what it already holds.
struct Recorder {
    writer: Writer<BufWriter<File>>,
    path: String,
    processes: HashMap<u32, Process>,
    threads: HashSet<u32>,
    /// The first write error: the recording goes on, pfm fails at the end.
    error: Option<String>,
}

impl Recorder {
    fn io<T>(&mut self, r: std::io::Result<T>) {
        if let Err(e) = r {
            if self.error.is_none() {
                self.error = Some(format!(
                    "cannot write {}: {}",
                    self.path,
                    perfmon::errno_text(e.raw_os_error().unwrap_or(libc::EIO))
                ));
            }
        }
    }

    /// Reads `/proc/PID/maps` and writes it if it changed. Returns whether
    /// it could be read.
    fn capture_maps(&mut self, pid: u32) -> bool {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
            self.processes.entry(pid).or_default().gone = true;
            return false;
        };
        // A process between exit and reaping has no memory left: keep the
        // last snapshot rather than an empty one.
        if text.is_empty() {
            self.processes.entry(pid).or_default().gone = true;
            return false;
        }
        let p = self.processes.entry(pid).or_default();
        if p.maps != text {
            p.mappings = maps::parse(&text);
            p.maps = text.clone();
            let r = self.writer.maps(&Maps {
                pid,
                time_ns: monotonic_ns(),
                maps: text,
            });
            self.io(r);
        }
        true
    }

    /// The header, then what every recording carries: the vDSO image.
    fn begin(&mut self, header: &Header) {
        let r = self.writer.header(header);
        self.io(r);
        if let Some(image) = own_vdso() {
            let r = self.writer.vdso(&image);
            self.io(r);
        }
    }

    /// Notes a thread: its name, and its process's maps, the first time.
    fn note(&mut self, tid: u32, pid: u32) {
        if self.threads.insert(tid) {
            if let Some(comm) = comm_of(tid).or_else(|| comm_of(pid)) {
                let r = self.writer.thread(&Thread {
                    tid,
                    pid,
                    comm,
                    time_ns: monotonic_ns(),
                });
                self.io(r);
            }
        }
        if !self.processes.contains_key(&pid) {
            self.capture_maps(pid);
        }
    }

    /// Writes every entry of `s`'s buffer not yet consumed.
    fn drain(&mut self, s: &mut Sampled) {
        let mut entries = Vec::new();
        s.buf
            .drain_chains(|e, chain| entries.push((*e, chain.to_vec())));
        // Processes whose maps were read again in this drain.
        let mut refreshed = HashSet::new();
        for (e, chain) in &entries {
            let period = s.periods.note(e.tid, e.last_reset_val);
            self.note(e.tid, e.pid);
            let known = self
                .processes
                .get(&e.pid)
                .is_some_and(|p| p.mappings.iter().any(|m| m.contains(e.ip)));
            if !known && e.ip != 0 && refreshed.insert(e.pid) {
                self.capture_maps(e.pid);
            }
            // Randomised, each period has its own length, which the file
            // keeps (pprof's weights, pfm script's period); fixed, the
            // header's says it.
            let own = s.seed.map(|_| period);
            let r = self.writer.sample(&sample_of(e, chain, own));
            self.io(r);
        }
    }

    /// Reads the maps of every live process again.
    fn refresh(&mut self) {
        let live: Vec<u32> = self
            .processes
            .iter()
            .filter(|(_, p)| !p.gone)
            .map(|(&pid, _)| pid)
            .collect();
        for pid in live {
            self.capture_maps(pid);
        }
        let r = self.writer.flush();
        self.io(r);
    }
}

/// Drains `s`, then reads its messages: restarts a context masked by a
/// full buffer (after the drain, so it has room), notes an exit.
fn service(rec: &mut Recorder, s: &mut Sampled) -> Result<(), Failure> {
    rec.drain(s);
    if s.ended {
        return Ok(());
    }
    let mut full = false;
    for msg in s.ctx.messages() {
        match msg?.kind {
            MessageKind::SmplFull => full = true,
            MessageKind::End | MessageKind::Revoked => s.ended = true,
            _ => {}
        }
    }
    if full {
        rec.drain(s);
        match s.ctx.restart() {
            Ok(()) => {}
            // The thread exited meanwhile: nothing to resume.
            Err(e) if e.errno() == Some(libc::EBADFD) => {}
            Err(e) => return Err(e.into()),
        }
    }
    if !s.ended && s.ctx.state()?.has_exited() {
        s.ended = true;
    }
    Ok(())
}

/// The event, its period, and how it is programmed.
///
/// Every PMD the module gives user space is a 64-bit value, whatever the
/// width of the counter behind it (`counter_width`: 47 bits on
/// `intel_arch_sim`, 48 on most Intel parts, `soft_width` on soft): the
/// module virtualizes the hardware counters to 64 bits and overflows a PMD
/// when its 64-bit value wraps (Documentation/perfmon.rst, "Counters are
/// virtualized to 64 bits"). So the period is armed as -PERIOD in 64 bits.
/// `2^width - PERIOD` (what pfm record wrote until issue 34) is a small
/// positive 64-bit value, 2^64 - 2^width events away from its overflow:
/// no sample ever, on every model narrower than 64 bits.
struct Plan {
    event: Resolved,
    period: u64,
    unit: &'static str,
}

impl Plan {
    /// -PERIOD in 64 bits: the PMD value that overflows at the PERIOD-th
    /// event.
    fn minus_period(&self) -> u64 {
        self.period.wrapping_neg()
    }

    /// Events a context counted: a period per entry written or lost, and
    /// what it counted since its last overflow (`value`: its PMD now).
    fn counted(&self, entries: u64, value: u64) -> u64 {
        let since = value.wrapping_sub(self.minus_period());
        entries.saturating_mul(self.period).saturating_add(since)
    }

    /// [`Plan::counted`] of randomised periods, none lost: the periods the
    /// entries ended, and what each thread counted since its last reset
    /// (`value`: the PMD now, a whole program's total: each thread's value
    /// less the written one, summed).
    fn counted_random(&self, periods: &Periods, value: u64) -> u64 {
        let since_resets = periods
            .last_reset
            .values()
            .fold(value.wrapping_sub(self.minus_period()), |acc, &r| {
                acc.wrapping_sub(r.wrapping_sub(self.minus_period()))
            });
        periods.ended.saturating_add(since_resets)
    }
}

/// Resolves `-e` and the period (`-c`, or `-F` for task-clock).
fn plan(args: &RecordArgs, pmu: &PmuInfo) -> Result<Plan, Failure> {
    let resolver = Resolver::new(pmu);
    let event = match &args.event {
        Some(name) if name.contains(',') || name.contains('{') => {
            return Err(Failure {
                message: crate::usage::own(
                    &format!("pfm record samples one event, not '{name}'"),
                    "pfm record",
                ),
                code: 2,
            })
        }
        Some(name) => resolver.resolve(name)?,
        None => resolver
            .resolve_names(&[])?
            .into_iter()
            .next()
            .ok_or_else(|| Failure::new(format!("the {} model has no event", pmu.model)))?,
    };
    if event.precise > 0 {
        eprintln!(
            "pfm: warning: '{}': perfmon has no precise sampling (PEBS, IBS): each \
             sample's address is where the overflow interrupt found the thread, a few \
             instructions past the event (perf's :p asks for less skid)",
            event.event.name
        );
    }
    let time = pmu.generic(event.event.code) == Some(Generic::TaskClock);
    let period = match (args.period, args.freq) {
        (Some(p), _) => p,
        (None, Some(f)) if time => (1_000_000_000 / f).max(1),
        (None, Some(_)) => {
            return Err(Failure {
                message: crate::usage::own(
                    &format!(
                        "-F FREQ is for task-clock (a period of 1e9/FREQ ns); \
                         give '{}' a period with -c PERIOD",
                        event.event.name
                    ),
                    "pfm record",
                ),
                code: 2,
            })
        }
        // `RecordArgs::check` requires one of them.
        (None, None) => return Err(Failure::new("no sampling period (-c PERIOD)")),
    };
    let plan = Plan {
        event,
        period,
        unit: if time { "ns" } else { "events" },
    };
    // The longest period, PERIOD + MASK, must fit the counter too (the
    // module refuses a mask above the reset value, EINVAL).
    if let Some(mask) = args.random.filter(|&m| m > plan.minus_period()) {
        return Err(Failure::new(format!(
            "--random {mask:#x} with period {period}: the longest period does not fit \
             a 64-bit counter"
        )));
    }
    Ok(plan)
}

/// A context programmed to sample, with its buffer mapped, not loaded.
fn sampling_context(
    ctx: Option<Context>,
    plan: &Plan,
    args: &RecordArgs,
) -> Result<Sampled, Failure> {
    let mut ctx = match ctx {
        Some(c) => c,
        None => Context::open()?,
    };
    match ctx.program(std::slice::from_ref(&plan.event.event)) {
        Ok(()) => {}
        Err(perfmon::Error::BadRegister {
            op: perfmon::Op::WritePmcs,
            ..
        }) => {
            return Err(Failure::new(crate::events::refused(
                ctx.info()?,
                &plan.event.event.name,
                plan.event.event.code,
            )))
        }
        Err(e) => return Err(e.into()),
    }
    let pmd = ctx.programmed()[0];
    let minus_p = plan.minus_period();
    let mut regs = [PfmPmd {
        reg_num: pmd,
        reg_value: minus_p,
        reg_short_reset: minus_p,
        reg_long_reset: minus_p,
        reg_flags: if args.random.is_some() {
            PFM_REGFL_RANDOM
        } else {
            0
        },
        reg_random_mask: args.random.unwrap_or(0),
        // 0: the kernel's pick (READ_PMDS shows it).
        reg_random_seed: args.random.and(args.random_seed).unwrap_or(0),
        ..Default::default()
    }];
    ctx.write_pmds(&mut regs)?;
    // The generator's state, before any draw: the seed (the kernel's pick
    // if none was given).
    let seed = match args.random {
        Some(_) => {
            let mut r = [PfmPmd {
                reg_num: pmd,
                ..Default::default()
            }];
            ctx.read_pmds(&mut r)?;
            Some(r[0].reg_random_seed)
        }
        None => None,
    };
    ctx.setup_sampling_with(&PfmSmplSetup {
        data_pages: args.pages,
        // A whole program's buffer drops when full: its threads cannot all
        // wait for pfm's RESTART (the module refuses, EBUSY).
        flags: if args.drop || whole_program(args) {
            PFM_SMPL_DROP
        } else {
            0
        },
        chain_depth: if args.call_graph() {
            args.chain_depth()
        } else {
            0
        },
        ..Default::default()
    })?;
    let buf = ctx.map_samples(args.pages)?;
    Ok(Sampled {
        ctx,
        buf,
        tid: 0,
        ended: false,
        periods: Periods::new(plan),
        seed,
    })
}

/// Whether pfm samples whole programs: a command with the threads and
/// processes it creates, or `-p`'s processes.
fn whole_program(args: &RecordArgs) -> bool {
    match args.tid {
        Some(_) => false,
        None => !args.pids.is_empty() || !args.no_inherit,
    }
}

/// Runs `pfm record`; returns the exit status (the command's, in command
/// mode).
pub fn record(args: &RecordArgs, output: Option<&Path>) -> Result<u8, Failure> {
    let attach = args.tid.is_some() || !args.pids.is_empty();
    // Signals first, in the main thread, before anything else can start.
    let interrupts = if attach {
        Some(Interrupts::terminal()?)
    } else {
        None
    };
    let ctx = Context::open()?;
    let pmu = ctx.info()?.clone();
    let plan = plan(args, &pmu)?;
    let path = output.unwrap_or(Path::new(DEFAULT_FILE));
    let (writer, name) = if crate::output::is_stdio(path) {
        (stdout_writer()?, "standard output".to_string())
    } else {
        keep_old(path)?;
        let w = Writer::create(path).map_err(|e| {
            Failure::new(format!(
                "cannot create {}: {}",
                path.display(),
                perfmon::errno_text(e.raw_os_error().unwrap_or(0))
            ))
        })?;
        (w, path.display().to_string())
    };
    let mut rec = Recorder {
        writer,
        path: name,
        processes: HashMap::new(),
        threads: HashSet::new(),
        error: None,
    };
    let header = Header {
        pfm_version: env!("CARGO_PKG_VERSION").to_string(),
        model: pmu.model.clone(),
        event: plan.event.event.name.clone(),
        code: plan.event.event.code,
        pmd: 0,
        counter_width: pmu.counter_width,
        unit: plan.unit.to_string(),
        period: plan.period,
        freq: args.freq.filter(|_| args.period.is_none()),
        pages: args.pages,
        drop: args.drop,
        call_chains: args.call_graph(),
        ..Header::default()
    };
    let first = sampling_context(Some(ctx), &plan, args)?;
    let header = Header {
        pmd: first.ctx.programmed().first().copied().unwrap_or(0),
        random_mask: args.random,
        random_seed: first.seed,
        ..header
    };
    let (status, interrupted, sampled) = match &interrupts {
        Some(i) => {
            let (interrupted, sampled) = attached(args, &plan, &mut rec, header, first, i)?;
            (None, interrupted, sampled)
        }
        None => {
            let (status, sampled) = command(args, &mut rec, header, first)?;
            (Some(status), false, sampled)
        }
    };
    // Every context is unloaded: its buffer holds all it will.
    let (mut written, mut lost, mut counted) = (0u64, 0u64, Some(0u64));
    for s in &sampled {
        let st = s.buf.stats();
        written += st.written;
        lost += st.lost;
        let value = s.ctx.read().map(|c| c.values[0]).unwrap_or(0);
        let events = match args.random {
            None => Some(plan.counted(st.written + st.lost, value)),
            // A lost entry's period is not known: nor is the count.
            Some(_) if st.lost > 0 => None,
            Some(_) => Some(plan.counted_random(&s.periods, value)),
        };
        counted = counted.zip(events).map(|(a, b)| a.saturating_add(b));
    }
    let finish = Finish {
        end_monotonic_ns: monotonic_ns(),
        samples: rec.writer.samples,
        written,
        lost,
        counted,
        exit_code: status.and_then(|s| s.code),
        exit_signal: status.and_then(|s| s.signal),
        interrupted,
    };
    let r = rec.writer.finish(&finish);
    rec.io(r);
    let r = rec.writer.flush();
    rec.io(r);
    if let Some(e) = rec.error {
        return Err(Failure::new(e));
    }
    eprintln!(
        "[ pfm record: {} samples of {} (period {}) written to {} ({:.3} MB); {} lost ]",
        rec.writer.samples,
        plan.event.event.name,
        plan.period,
        rec.path,
        rec.writer.bytes as f64 / 1e6,
        lost
    );
    let code = status.map_or(0, |s| u8::try_from(s.shell_code()).unwrap_or(1));
    if rec.writer.samples == 0 {
        // A profile without samples is a failure to say, not an empty
        // table for pfm report to print: the command's status if it
        // failed, else 1.
        return Err(Failure {
            message: no_samples(&plan, lost, counted),
            code: if code == 0 { 1 } else { code },
        });
    }
    if lost > 0 {
        eprintln!(
            "pfm: warning: {lost} samples lost: the buffer was full; a larger --pages keeps them"
        );
    }
    Ok(code)
}

/// Why a recording holds no sample, in one line: the event counted less
/// than one period, every entry was lost, or the counter crossed periods
/// and the module wrote no entry for them (which is a fault to report).
fn no_samples(plan: &Plan, lost: u64, counted: Option<u64>) -> String {
    let event = &plan.event.event.name;
    let period = plan.period;
    if lost > 0 {
        return format!(
            "no samples in the file: all {lost} were lost (the buffer was full); \
             a larger --pages keeps them"
        );
    }
    match counted {
        Some(n) if n < period => format!(
            "no samples: {event} counted {n} {unit}, less than one period ({period}); \
             a smaller -c PERIOD samples it",
            unit = plan.unit
        ),
        Some(n) => format!(
            "no samples, although {event} counted {n} {unit}, {} periods of {period}: \
             the module wrote no sampling entry (see dmesg, and \
             /sys/kernel/perfmon/overflow_interrupts)",
            n / period,
            unit = plan.unit
        ),
        None => format!("no samples of {event} (period {period})"),
    }
}

/// `-o -`: the record file on standard output, as perf writes a pipe.
/// The records go to a copy of it, and pfm's own standard output (which
/// the command inherits) becomes standard error, so that nothing the
/// command prints gets into the stream. A terminal is refused: the file is
/// binary.
fn stdout_writer() -> Result<Writer<BufWriter<File>>, Failure> {
    use std::io::IsTerminal;
    if std::io::stdout().is_terminal() {
        return Err(Failure {
            message: crate::usage::own(
                "-o - writes the binary record file to standard output, which is a \
                 terminal: pipe it (pfm record -o - -- CMD | pfm report -i -)",
                "pfm record",
            ),
            code: 2,
        });
    }
    let failed = |e: std::io::Error| {
        Failure::new(format!(
            "cannot write to standard output: {}",
            perfmon::errno_text(e.raw_os_error().unwrap_or(libc::EIO))
        ))
    };
    // Close-on-exec (F_DUPFD_CLOEXEC): the command does not get the stream.
    let stream = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .map_err(failed)?;
    // SAFETY: dup2 of two descriptors this process has open (0-2); it
    // changes which file descriptor 1 names, nothing Rust owns.
    if unsafe { libc::dup2(libc::STDERR_FILENO, libc::STDOUT_FILENO) } < 0 {
        return Err(failed(std::io::Error::last_os_error()));
    }
    Writer::to_file(File::from(stream)).map_err(failed)
}

/// An existing record file is kept as `FILE.old` (replacing an older
/// one), as perf keeps perf.data.old: a new recording never destroys the
/// last one. Only a regular file: a pipe or a device given as `-o` is
/// written to as it is.
fn keep_old(path: &Path) -> Result<(), Failure> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => {
            let mut old = path.as_os_str().to_owned();
            old.push(".old");
            std::fs::rename(path, &old).map_err(|e| {
                Failure::new(format!(
                    "cannot keep {} as {}: {}",
                    path.display(),
                    Path::new(&old).display(),
                    perfmon::errno_text(e.raw_os_error().unwrap_or(libc::EIO))
                ))
            })
        }
        _ => Ok(()),
    }
}

/// Command mode: fork the command paused, attach, arm the start at its
/// exec, let it go, drain until it ends. Returns its status and the
/// (unloaded) context.
fn command(
    args: &RecordArgs,
    rec: &mut Recorder,
    mut header: Header,
    mut s: Sampled,
) -> Result<(ExitStatus, Vec<Sampled>), Failure> {
    let argv: &[OsString] = &args.command;
    // Dropping `child` on any error below kills the paused command.
    let mut child = PausedChild::spawn(argv)?;
    let pid = child.pid();
    // Until its exec the child is a copy of pfm: its maps are pfm's. The
    // samples taken in the exec's last part carry the old image's
    // instruction pointer (pfm's execve), which this snapshot resolves.
    let forked = (monotonic_ns(), std::fs::read_to_string("/proc/self/maps"));
    let (on_exec, inherit) = arm_and_load(&s.ctx, pid, !args.no_inherit)?;
    s.tid = pid;
    s.ctx.wait_active(ACTIVE_TIMEOUT)?;
    s.ctx.set_nonblocking(true)?;
    header.command = Some(
        argv.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
    );
    header.pid = Some(pid);
    header.inherit = inherit;
    header.start_unix_ns = clock_ns(libc::CLOCK_REALTIME);
    header.start_monotonic_ns = monotonic_ns();
    rec.begin(&header);
    if let (time_ns, Ok(maps)) = forked {
        let r = rec.writer.maps(&Maps { pid, time_ns, maps });
        rec.io(r);
    }
    if !on_exec {
        s.ctx.start()?;
    }
    // From here Ctrl-C is for the command; pfm stays to write the samples.
    process::ignore_interrupts();
    if let Err(e) = child.release() {
        let _ = child.wait();
        return Err(e.into());
    }
    // The new image may not be mapped whole yet (the loader maps it after
    // the exec's point of no return): the refreshes and the first samples
    // read the maps again.
    rec.note(pid, pid);
    let mut next_refresh = Instant::now() + MAPS_REFRESH;
    let status = loop {
        let timeout = next_refresh.saturating_duration_since(Instant::now());
        if s.ended {
            std::thread::sleep(timeout.min(EXITED_POLL));
        } else {
            // Readable at the watermark, a full buffer, or the exit.
            process::wait_readable(&[s.ctx.as_fd()], Some(timeout))?;
        }
        service(rec, &mut s)?;
        if Instant::now() >= next_refresh {
            rec.refresh();
            next_refresh = Instant::now() + MAPS_REFRESH;
        }
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if s.ended && !inherit {
            // The sampled thread is gone; the process may live on in
            // other threads, which are not sampled: wait for it.
            break child.wait()?;
        }
    };
    let _ = s.ctx.unload();
    rec.drain(&mut s);
    Ok((status, vec![s]))
}

/// Sets the context's flags for a command (start at its exec; follow what
/// it creates if `inherit`) and loads it on `pid`. Returns (the exec
/// starts it, it inherits).
fn arm_and_load(ctx: &Context, pid: u32, inherit: bool) -> Result<(bool, bool), Failure> {
    let flags = if inherit { PFM_CTXFL_INHERIT } else { 0 } | PFM_CTXFL_START_ON_EXEC;
    let on_exec = match ctx.set_flags(flags) {
        Ok(()) => true,
        // A module from before whole programs: pfm starts the context
        // just before releasing the command, one thread.
        Err(e) if e.errno() == Some(libc::EINVAL) => false,
        Err(e) => return Err(e.into()),
    };
    if !on_exec {
        if inherit {
            eprintln!(
                "pfm: warning: this perfmon module cannot follow the processes a command \
                 creates (EINVAL): sampling its initial thread only"
            );
        }
        ctx.load(pid)?;
        return Ok((false, false));
    }
    match ctx.load(pid) {
        Ok(()) => Ok((true, inherit)),
        Err(e) if inherit && e.errno() == Some(libc::EBUSY) => {
            eprintln!(
                "pfm: warning: this perfmon module does not follow a command's threads and \
                 processes with a sampling buffer (EBUSY): sampling its initial thread only \
                 (--no-inherit: the same, quietly)"
            );
            ctx.set_flags(PFM_CTXFL_START_ON_EXEC)?;
            ctx.load(pid)?;
            Ok((true, false))
        }
        Err(e) => Err(e.into()),
    }
}

/// Thread mode (`-t`) and process mode (`-p`: each process whole, a
/// context each, `PFM_LOAD_PROCESS`: the threads it has and creates):
/// until Ctrl-C, `--duration` or the end of every thread (of every
/// process's main thread). Returns whether a signal ended it, and the
/// contexts.
fn attached(
    args: &RecordArgs,
    plan: &Plan,
    rec: &mut Recorder,
    mut header: Header,
    first: Sampled,
    interrupts: &Interrupts,
) -> Result<(bool, Vec<Sampled>), Failure> {
    // (thread, its process): the thread, or the process's main thread.
    let targets: Vec<(u32, u32)> = match args.tid {
        Some(tid) => vec![(tid, tgid_of(tid).unwrap_or(tid))],
        None => args.pids.iter().map(|&pid| (pid, pid)).collect(),
    };
    let mut sampled: Vec<Sampled> = Vec::with_capacity(targets.len());
    let mut first = Some(first);
    for &(tid, pid) in &targets {
        let mut s = match first.take() {
            Some(s) => s,
            None => sampling_context(None, plan, args)?,
        };
        let loaded = match args.tid {
            Some(_) => s.ctx.load(tid),
            None => s.ctx.load_process(pid),
        };
        match (loaded, args.tid) {
            (Ok(()), _) => {}
            (Err(e), Some(_)) => return Err(crate::attach_failure(e, "thread", tid)),
            (Err(e), None) => return Err(crate::attach_failure(e, "process", pid)),
        }
        s.tid = tid;
        sampled.push(s);
    }
    if sampled.is_empty() {
        return Err(Failure::new("no thread to sample: every one has exited"));
    }
    for s in &sampled {
        match s.ctx.wait_active(ACTIVE_TIMEOUT) {
            Ok(_) => {}
            Err(perfmon::Error::Timeout { .. }) => eprintln!(
                "pfm: warning: thread {} has not picked up the context after {} s \
                 (stopped?); sampling starts when it next runs",
                s.tid,
                ACTIVE_TIMEOUT.as_secs()
            ),
            Err(e) => return Err(e.into()),
        }
        s.ctx.set_nonblocking(true)?;
    }
    if args.pids.is_empty() {
        header.tids = Some(sampled.iter().map(|s| s.tid).collect());
    } else {
        // The threads the processes had at the start; the ones they
        // create are sampled too.
        header.pids = Some(args.pids.clone());
        header.tids = Some(args.pids.iter().flat_map(|&p| tasks_of(p)).collect());
        header.inherit = true;
    }
    header.start_unix_ns = clock_ns(libc::CLOCK_REALTIME);
    header.start_monotonic_ns = monotonic_ns();
    rec.begin(&header);
    for &(tid, pid) in &targets {
        if sampled.iter().any(|s| s.tid == tid) {
            rec.note(tid, pid);
        }
    }
    let t0 = Instant::now();
    for s in &sampled {
        s.ctx.start()?;
    }
    let deadline = args.duration.map(|d| t0 + d);
    let mut next_refresh = t0 + MAPS_REFRESH;
    let mut interrupted = false;
    loop {
        let wake = deadline.map_or(next_refresh, |d| d.min(next_refresh));
        let timeout = wake.saturating_duration_since(Instant::now());
        let live: Vec<usize> = (0..sampled.len()).filter(|&i| !sampled[i].ended).collect();
        let mut fds: Vec<BorrowedFd<'_>> = live.iter().map(|&i| sampled[i].ctx.as_fd()).collect();
        fds.push(interrupts.as_fd());
        let ready = process::wait_readable(&fds, Some(timeout))?;
        if ready.last().copied().unwrap_or(false) && interrupts.pending()?.is_some() {
            interrupted = true;
            break;
        }
        for s in &mut sampled {
            service(rec, s)?;
        }
        if sampled.iter().all(|s| s.ended) {
            break;
        }
        let now = Instant::now();
        if now >= next_refresh {
            rec.refresh();
            next_refresh = now + MAPS_REFRESH;
        }
        if deadline.is_some_and(|d| now >= d) {
            break;
        }
    }
    for s in &mut sampled {
        let _ = s.ctx.unload();
        rec.drain(s);
    }
    Ok((interrupted, sampled))
}

/// The process of thread `tid` (`Tgid:` of `/proc/TID/status`).
fn tgid_of(tid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(period: u64) -> Plan {
        Plan {
            event: Resolved {
                event: perfmon::Event {
                    name: "cs".into(),
                    code: 2,
                },
                libpfm: None,
                precise: 0,
            },
            period,
            unit: "events",
        }
    }

    #[test]
    fn counted_from_entries_and_the_counter() {
        // -P in 64 bits, and 2 events since the last of 5 overflows.
        let p = plan(3);
        assert_eq!(p.minus_period(), u64::MAX - 2);
        assert_eq!(p.counted(5, p.minus_period().wrapping_add(2)), 17);
        assert_eq!(p.counted(0, p.minus_period()), 0);
        // Whatever the model's counter width (47 bits on intel_arch_sim):
        // the PMD is a 64-bit value, so -P is armed in 64 bits, not as
        // 2^47 - P, which would overflow only 2^64 - 2^47 events later
        // (issue 34: no samples on intel_arch_sim).
        let p = plan(1_000_000);
        assert_eq!(p.minus_period(), 0u64.wrapping_sub(1_000_000));
        assert_ne!(p.minus_period(), (1u64 << 47) - 1_000_000);
        assert_eq!(p.counted(2, p.minus_period().wrapping_add(999)), 2_000_999);
    }

    #[test]
    fn randomised_periods_counted_from_each_entrys_reset() {
        let p = plan(3);
        let minus = |n: u64| n.wrapping_neg();
        let mut periods = Periods::new(&p);
        // Thread 5: the written period (3), then one of 5 (its first
        // reset, -5), 2 events since its last reset (-4).
        // Each entry's own period: the written one, then its previous
        // entry's reset.
        assert_eq!(periods.note(5, minus(5)), 3);
        assert_eq!(periods.note(5, minus(4)), 5);
        assert_eq!(periods.ended, 3 + 5);
        assert_eq!(p.counted_random(&periods, minus(4) + 2), 10);
        // A whole program: thread 6 counted 1 event and never overflowed,
        // thread 7 ended its written period (reset -6) and counted none
        // since. The total the root reads: its value, plus each other
        // thread's less the written -3.
        assert_eq!(periods.note(7, minus(6)), 3);
        let total = (minus(4) + 2)
            .wrapping_add(minus(2).wrapping_sub(minus(3)))
            .wrapping_add(minus(6).wrapping_sub(minus(3)));
        assert_eq!(p.counted_random(&periods, total), 10 + 1 + 3);
        // Without randomisation the two agree.
        let mut fixed = Periods::new(&p);
        fixed.note(5, minus(3));
        fixed.note(5, minus(3));
        let v = minus(3) + 2;
        assert_eq!(p.counted_random(&fixed, v), p.counted(2, v));
    }

    #[test]
    fn entries_become_samples() {
        let mut e = PfmSmplEntry {
            tid: 5,
            pid: 4,
            cpu: 1,
            ovfl_pmd: 0,
            seq: 9,
            ip: 0x1234,
            tstamp: 77,
            nvalues: 2,
            ..Default::default()
        };
        e.values[0] = 10;
        e.values[1] = 11;
        let s = sample_of(&e, &[], None);
        assert_eq!((s.tid, s.pid, s.seq, s.ip, s.tstamp), (5, 4, 9, 0x1234, 77));
        assert_eq!(s.values, vec![10, 11]);
        assert!(s.chain.is_empty());
        assert_eq!(sample_of(&e, &[7, 8], Some(9)).chain, vec![7, 8]);
    }
}
