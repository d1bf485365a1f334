//! `pfm stat`: count a command from its first instruction (`-r N` times),
//! with the threads and processes it creates unless `--no-inherit`; or
//! running processes (`-p`) or a running thread (`-t`) for a while;
//! optionally print each interval, and each thread (`--per-thread`). More
//! events than counters are multiplexed in event sets ([`crate::sets`]).

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use perfmon::abi::{PFM_CTXFL_INHERIT, PFM_CTXFL_START_ON_EXEC};
use perfmon::perf::{PerfGroup, PerfOptions, SoftwareEvent};
use perfmon::process::{self, ExitStatus, Interrupts, PausedChild};
use perfmon::{Context, CtxState, MessageKind, PmuInfo};
use pfm_json::{StatKind, Stats, ThreadCounts};

use crate::cli::StatArgs;
use crate::events::{Resolved, Resolver};
use crate::output::Output;
use crate::report::{Exit, Multiplexing, MuxCount, Report, Row, Style, Subject};
use crate::sets::{self, Layout, ProgramError, Reading};
use crate::Failure;

/// How long a target may take to install the context after LOAD.
const ACTIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// `--per-thread`: how often the threads are looked at while they run, to
/// learn their names (`/proc/TID/comm`) before they exit. A thread that
/// lives less than this may exit unseen: its name is `-`.
const THREAD_LOOK: Duration = Duration::from_millis(20);

/// Once the command's initial thread exited and its context's fd stays
/// readable (hung up), how often pfm looks whether the command ended.
const EXITED_POLL: Duration = Duration::from_millis(10);

/// Once the program ended, how long pfm waits for its other threads'
/// last switch-outs before the final read (see `Stat::settle`).
const SETTLE_LIMIT: Duration = Duration::from_secs(1);

/// How the output is written.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Format {
    /// perf stat's table.
    Table(Style),
    /// `--json`: one document per line.
    Json,
    /// `-x SEP`.
    Csv(String),
}

/// What `-p` or `-t` attaches to.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Target {
    /// One thread (`-t`).
    Thread(u32),
    /// Whole processes (`-p`), one context each.
    Processes(Vec<u32>),
}

impl Target {
    /// The ids of the contexts' LOADs.
    fn ids(&self) -> Vec<u32> {
        match self {
            Target::Thread(t) => vec![*t],
            Target::Processes(p) => p.clone(),
        }
    }

    fn subject(&self) -> Subject {
        match self {
            Target::Thread(t) => Subject::Thread(*t),
            Target::Processes(p) => Subject::Processes(p.clone()),
        }
    }

    /// `thread 42` / `process 42`, for messages.
    fn words(&self, id: u32) -> String {
        match self {
            Target::Thread(_) => format!("thread {id}"),
            Target::Processes(_) => format!("process {id}"),
        }
    }
}

/// What one `pfm stat` needs throughout.
struct Stat<'a> {
    args: &'a StatArgs,
    pmu: PmuInfo,
    events: Vec<Resolved>,
    /// More events than counters: the event sets they are counted in.
    layout: Option<Layout>,
    format: Format,
    out: Output,
    /// Command mode: count the threads and processes the command creates
    /// (false with `--no-inherit`, multiplexed, or on a module that
    /// cannot).
    inherit: bool,
    /// `--per-thread`: the name of each thread seen alive, by tid.
    comms: HashMap<u32, String>,
}

/// Runs `pfm stat`; returns the exit status.
pub fn stat(args: &StatArgs, json: bool, output: Option<&std::path::Path>) -> Result<u8, Failure> {
    let target = match (args.tid, args.pids.is_empty()) {
        (Some(tid), _) => Some(Target::Thread(tid)),
        (None, false) => Some(Target::Processes(args.pids.clone())),
        (None, true) => None,
    };
    // Signals first, in the main thread, before anything else can start.
    let interrupts = match target {
        Some(_) => Some(Interrupts::terminal()?),
        None => None,
    };
    let ctx = Context::open()?;
    let pmu = ctx.info()?.clone();
    // `args.check` refused bad braces and sets already.
    let (groups, explicit) = args.groups().map_err(Failure::new)?;
    let names: Vec<String> = groups.iter().flatten().cloned().collect();
    let events = Resolver::new(&pmu).resolve_names(&names)?;
    let layout = layout(args, &pmu, &groups, explicit, &events)?;
    // Event sets follow every thread of a whole program (each thread
    // multiplexes them on its own running time): nothing narrows.
    let inherit = args.inherit();
    let format = match (&args.separator, json) {
        (Some(sep), _) => Format::Csv(sep.clone()),
        (None, true) => Format::Json,
        (None, false) => Format::Table(Style {
            big_num: !args.no_big_num,
        }),
    };
    let out = Output::open(output, Output::Stderr)?;
    let mut st = Stat {
        args,
        pmu,
        events,
        layout,
        format,
        out,
        inherit,
        comms: HashMap::new(),
    };
    match (target, &interrupts) {
        (Some(target), Some(interrupts)) => st.attached(ctx, target, interrupts),
        _ => st.command(ctx, &args.command),
    }
}

/// The event sets of `events` when they do not fit the counters (or
/// `--sets` gives several), `None` when they are counted as one set: then
/// a `--switch` or `--switch-on-overflow` has nothing to switch, and pfm
/// says so.
fn layout(
    args: &StatArgs,
    pmu: &PmuInfo,
    groups: &[Vec<String>],
    explicit: bool,
    events: &[Resolved],
) -> Result<Option<Layout>, Failure> {
    // No -e: the model's first events, each its own group.
    let defaults: Vec<Vec<String>>;
    let groups = if groups.is_empty() {
        defaults = events.iter().map(|e| vec![e.event.name.clone()]).collect();
        &defaults
    } else {
        groups
    };
    let counters = pmu.event_counters();
    let switch = args.switch();
    let plan = sets::plan(groups, explicit, counters.len(), switch).map_err(Failure::new)?;
    if plan.len() > 1 {
        return Ok(Some(Layout::new(&plan, &counters, switch)));
    }
    if args.switch_given() {
        eprintln!(
            "pfm: warning: the {} events fit the model's {} counters: nothing is multiplexed, \
             the set switch is not used",
            events.len(),
            counters.len()
        );
    }
    Ok(None)
}

/// perf_event counters of the same events, with `--perf` (one group per
/// thread attached to, their counts summed), and for each event its index
/// among them (None where perf has no such event).
type PerfSide = Option<(Vec<PerfGroup>, Vec<Option<usize>>)>;

/// perf values aligned with the events, summed over the groups.
fn perf_values(perf: &PerfSide) -> Option<Vec<Option<u64>>> {
    let (groups, index) = perf.as_ref()?;
    let mut sums: Vec<u64> = Vec::new();
    for g in groups {
        match g.read() {
            Ok(values) => {
                sums.resize(sums.len().max(values.len()), 0);
                for (s, v) in sums.iter_mut().zip(&values) {
                    *s = s.wrapping_add(v.value);
                }
            }
            Err(e) => {
                eprintln!("pfm: warning: --perf: {e}");
                return None;
            }
        }
    }
    Some(
        index
            .iter()
            .map(|i| i.and_then(|i| sums.get(i).copied()))
            .collect(),
    )
}

/// Enables (or disables) every perf group.
fn perf_switch(perf: &PerfSide, on: bool) -> Result<(), Failure> {
    for g in perf.iter().flat_map(|(groups, _)| groups) {
        if on {
            g.enable()?;
        } else {
            g.disable()?;
        }
    }
    Ok(())
}

/// `a - b` per event, where both exist.
fn perf_delta(
    now: &Option<Vec<Option<u64>>>,
    prev: &Option<Vec<Option<u64>>>,
) -> Option<Vec<Option<u64>>> {
    match (now, prev) {
        (Some(a), Some(b)) => Some(
            a.iter()
                .zip(b)
                .map(|(x, y)| x.zip(*y).map(|(x, y)| x.wrapping_sub(y)))
                .collect(),
        ),
        (Some(a), None) => Some(a.clone()),
        _ => None,
    }
}

/// The threads of process `pid` now (`/proc/PID/task`); just `pid` if
/// they cannot be listed (perf then counts what it can).
pub(crate) fn tasks_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return vec![pid];
    };
    let mut tids: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    if tids.is_empty() {
        tids.push(pid);
    }
    tids
}

/// Whether thread `tid` still runs (not gone, not a zombie): its
/// `/proc/TID/stat` state.
fn thread_lives(tid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{tid}/stat")) else {
        return false;
    };
    // "pid (comm) S ...": the state follows the last ')'.
    match stat.rsplit_once(')') {
        Some((_, rest)) => !matches!(rest.trim_start().chars().next(), Some('Z' | 'X' | 'x')),
        None => false,
    }
}

/// A thread's name, `/proc/TID/comm` without its newline.
pub(crate) fn comm_of(tid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{tid}/comm")).ok()?;
    Some(text.trim_end_matches('\n').to_string())
}

/// The elementwise sum of the readings of several contexts (whole
/// processes: one context each, programmed alike): the counts, the times,
/// and with sets each event's set times.
fn sum_readings(readings: Vec<Reading>) -> Reading {
    let mut it = readings.into_iter();
    let Some(mut total) = it.next() else {
        return Reading::zero(0, false);
    };
    for r in it {
        for (a, b) in total.counts.values.iter_mut().zip(&r.counts.values) {
            *a = a.wrapping_add(*b);
        }
        total.counts.time_enabled = total
            .counts
            .time_enabled
            .wrapping_add(r.counts.time_enabled);
        total.counts.time_running = total
            .counts
            .time_running
            .wrapping_add(r.counts.time_running);
        for (a, b) in total.times.iter_mut().zip(&r.times) {
            *a = (a.0.wrapping_add(b.0), a.1.wrapping_add(b.1));
        }
    }
    total
}

/// Says so if the module ended the monitoring at an exec into credentials
/// this user may not monitor (a setuid program): the counts stop there.
fn warn_if_revoked(ctx: &Context) -> Result<(), Failure> {
    let st = ctx.state()?;
    if st.state == CtxState::Unloaded && !st.has_exited() {
        eprintln!(
            "pfm: warning: monitoring ended when the thread exec'd a program you may not monitor (setuid or setgid); the counts stop there"
        );
    }
    Ok(())
}

/// Says how many threads the totals miss, if any.
fn warn_if_lost(lost: Option<u32>) {
    match lost {
        Some(1) => eprintln!(
            "pfm: warning: 1 thread could not be monitored (the module's limits): \
             the totals miss its counts"
        ),
        Some(n) if n > 1 => eprintln!(
            "pfm: warning: {n} threads could not be monitored (the module's limits): \
             the totals miss their counts"
        ),
        _ => {}
    }
}

/// The totals and the last interval boundary of an interval loop.
struct Ticker {
    interval: Duration,
    t0: Instant,
    next: Instant,
    prev: Reading,
    prev_perf: Option<Vec<Option<u64>>>,
    prev_time: Instant,
}

impl Ticker {
    fn new(interval: Duration, t0: Instant, events: usize, sets: bool) -> Self {
        Ticker {
            interval,
            t0,
            next: t0 + interval,
            prev: Reading::zero(events, sets),
            prev_perf: None,
            prev_time: t0,
        }
    }

    /// Moves the next tick past `now`, skipping ticks missed while busy
    /// rather than bursting.
    fn advance(&mut self, now: Instant) {
        let mut t = self.next + self.interval;
        while t <= now {
            t += self.interval;
        }
        self.next = t;
    }
}

/// The earliest of some instants.
fn earliest(times: impl IntoIterator<Item = Option<Instant>>) -> Option<Instant> {
    times.into_iter().flatten().min()
}

impl Stat<'_> {
    /// Opens perf_event counters of the same events for `tids`, when asked
    /// and possible; says why not otherwise. A thread that ended before
    /// its turn is left out.
    fn perf_for(&self, tids: &[u32], opts: PerfOptions) -> PerfSide {
        if !self.args.perf {
            return None;
        }
        let mut kinds = Vec::new();
        let mut index = Vec::new();
        for e in &self.events {
            match SoftwareEvent::from_name(&e.event.name) {
                Some(k) => {
                    index.push(Some(kinds.len()));
                    kinds.push(k);
                }
                None => index.push(None),
            }
        }
        if kinds.is_empty() {
            eprintln!("pfm: warning: --perf: perf_event has none of these events");
            return None;
        }
        let mut groups = Vec::with_capacity(tids.len());
        for &tid in tids {
            match PerfGroup::open_with(&kinds, tid, opts) {
                Ok(g) => groups.push(g),
                // Ended before its turn: ESRCH, or EINVAL for a group
                // member when the thread ended after its leader was opened
                // (the kernel's leader is then in another context).
                Err(e)
                    if !groups.is_empty()
                        && (e.errno() == Some(libc::ESRCH)
                            || (e.errno() == Some(libc::EINVAL) && !thread_lives(tid))) => {}
                Err(e) => {
                    eprintln!("pfm: warning: --perf: {e}; showing perfmon's counts only");
                    return None;
                }
            }
        }
        Some((groups, index))
    }

    /// Sets the context flags of a command's context: inheritance (unless
    /// not wanted) and start at the command's exec. Returns whether the
    /// exec starts the counting; if not (a module from before whole
    /// programs refuses flags it does not know, EINVAL), the caller starts
    /// it before releasing the command, as pfm always did, and counts the
    /// command's initial thread only, which pfm says once.
    fn arm(&mut self, ctx: &Context) -> Result<bool, Failure> {
        let inherit = if self.inherit { PFM_CTXFL_INHERIT } else { 0 };
        match ctx.set_flags(inherit | PFM_CTXFL_START_ON_EXEC) {
            Ok(()) => return Ok(true),
            Err(e) if e.errno() == Some(libc::EINVAL) => {}
            Err(e) => return Err(e.into()),
        }
        if self.inherit {
            match ctx.set_flags(PFM_CTXFL_INHERIT) {
                Ok(()) => return Ok(false),
                Err(e) if e.errno() == Some(libc::EINVAL) => {
                    eprintln!(
                        "pfm: warning: this perfmon module cannot follow the processes a \
                         command creates (PFM_CTXFL_INHERIT refused, EINVAL): counting its \
                         initial thread only"
                    );
                    self.inherit = false;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(false)
    }

    /// Programs the events on `ctx` (in their sets, when multiplexed); a
    /// PMC the module refuses is named by its event.
    fn program(&self, ctx: &mut Context) -> Result<(), Failure> {
        let events: Vec<perfmon::Event> = self.events.iter().map(|r| r.event.clone()).collect();
        let refused = match &self.layout {
            None => match ctx.program(&events) {
                Ok(()) => return Ok(()),
                Err(perfmon::Error::BadRegister {
                    op: perfmon::Op::WritePmcs,
                    index,
                    ..
                }) if index < events.len() => index,
                Err(e) => return Err(e.into()),
            },
            Some(layout) => {
                let codes: Vec<u64> = events.iter().map(|e| e.code).collect();
                match layout.program(ctx, &codes) {
                    Ok(()) => return Ok(()),
                    Err(ProgramError::Event(index)) => index,
                    Err(ProgramError::Sets(e)) => {
                        return Err(Failure {
                            code: e.shell_code().unwrap_or(1),
                            message: format!(
                                "{} events on {} counters need multiplexing: {e}",
                                events.len(),
                                layout.counters
                            ),
                        })
                    }
                    Err(ProgramError::Other(e)) => return Err(e.into()),
                }
            }
        };
        let e = &events[refused];
        Err(Failure::new(crate::events::refused(
            &self.pmu, &e.name, e.code,
        )))
    }

    /// Reads every event: the programmed counters, or every set.
    fn read(&self, ctx: &Context) -> Result<Reading, Failure> {
        Ok(match &self.layout {
            None => Reading {
                counts: ctx.read()?,
                times: Vec::new(),
            },
            Some(layout) => layout.read(ctx)?,
        })
    }

    /// Reads every context and sums them (one context: its reading).
    fn read_all(&self, ctxs: &[Context]) -> Result<Reading, Failure> {
        if let [one] = ctxs {
            return self.read(one);
        }
        let readings = ctxs
            .iter()
            .map(|c| self.read(c))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(sum_readings(readings))
    }

    /// `ctx`'s threads, one row each. Multiplexed, the counters are
    /// programmed set by set: set 0's PMDs name the rows.
    fn rows_of(&self, ctx: &Context) -> Result<perfmon::ThreadsReport, Failure> {
        Ok(match self.layout.as_ref().and_then(|l| l.sets.first()) {
            Some(set0) => ctx.read_threads(set0.mask())?,
            None => ctx.read_threads_programmed()?,
        })
    }

    /// Waits, at most [`SETTLE_LIMIT`], until every thread of `ctxs` has
    /// ended (its row says EXITED), so that the totals read next are one
    /// instant's values: the set values, set times and the context's times
    /// are read by separate calls, between which a thread still ending
    /// would count its last slice. A thread that outlives the program (a
    /// daemon it started) is read as it stands after the limit.
    fn settle(&self, ctxs: &[Context]) -> Result<(), Failure> {
        let until = Instant::now() + SETTLE_LIMIT;
        loop {
            let mut live = false;
            for ctx in ctxs {
                live |= self
                    .rows_of(ctx)?
                    .rows
                    .iter()
                    .any(|r| !r.has_exited() && !r.is_revoked());
            }
            if !live || Instant::now() >= until {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// `--per-thread`: learns the names of the threads of `ctxs` alive now.
    fn look_at_threads(&mut self, ctxs: &[Context]) -> Result<(), Failure> {
        for ctx in ctxs {
            for row in self.rows_of(ctx)?.rows {
                if row.tid != 0 && !row.has_exited() {
                    if let Some(comm) = comm_of(row.tid) {
                        self.comms.insert(row.tid, comm);
                    }
                }
            }
        }
        Ok(())
    }

    /// `--per-thread`: every thread of `ctxs`, its values in event order,
    /// named as last seen alive. Multiplexed, each value is the thread's
    /// own estimate (its set's count scaled by the set's share of that
    /// thread's time), as the totals are the program's.
    fn thread_counts(&mut self, ctxs: &[Context]) -> Result<Vec<ThreadCounts>, Failure> {
        self.look_at_threads(ctxs)?;
        let mut out = Vec::new();
        if let Some(layout) = &self.layout {
            for ctx in ctxs {
                out.extend(self.thread_estimates(layout, ctx)?);
            }
            return Ok(out);
        }
        for ctx in ctxs {
            for row in ctx.read_threads_programmed()?.rows {
                out.push(ThreadCounts {
                    tid: row.tid,
                    pid: row.pid,
                    comm: self.comms.get(&row.tid).cloned(),
                    exited: row.has_exited(),
                    revoked: row.is_revoked(),
                    values: ctx
                        .programmed()
                        .iter()
                        .map(|&pmd| row.value(pmd).unwrap_or(0))
                        .collect(),
                    time_enabled_ns: row.time_enabled,
                    time_running_ns: row.time_running,
                });
            }
        }
        Ok(out)
    }

    /// [`Stat::thread_counts`] of a multiplexed context: one
    /// `PFM_IOC_READ_THREADS` per set, the rows matched by thread (a thread
    /// created between two reads has no row in the first: nothing counted
    /// there).
    fn thread_estimates(
        &self,
        layout: &Layout,
        ctx: &Context,
    ) -> Result<Vec<ThreadCounts>, Failure> {
        let Some(set0) = layout.sets.first() else {
            return Ok(Vec::new());
        };
        // The threads and their own times, then each set's rows.
        let first = ctx.read_threads(set0.mask())?.rows;
        let mut per_set = Vec::with_capacity(layout.sets.len());
        for (id, set) in layout.sets.iter().enumerate() {
            per_set.push(ctx.read_threads_in_set(id as u16, set.mask())?.rows);
        }
        let mut out = Vec::with_capacity(first.len());
        for (k, row) in first.iter().enumerate() {
            // The same thread in every read: its place, or its ids.
            let same = |r: &&perfmon::ThreadRow| r.tid == row.tid && r.pid == row.pid;
            let values = layout
                .slots
                .iter()
                .map(|slot| {
                    let rows = per_set.get(usize::from(slot.set))?;
                    let r = rows
                        .get(k)
                        .filter(same)
                        .or_else(|| rows.iter().find(same))?;
                    let count = r.value(slot.pmd)?;
                    perfmon::scale_u64(count, r.time_enabled, r.time_running)
                })
                .map(|v| v.unwrap_or(0))
                .collect();
            out.push(ThreadCounts {
                tid: row.tid,
                pid: row.pid,
                comm: self.comms.get(&row.tid).cloned(),
                exited: row.has_exited(),
                revoked: row.is_revoked(),
                values,
                time_enabled_ns: row.time_enabled,
                time_running_ns: row.time_running,
            });
        }
        Ok(out)
    }

    /// How the events are multiplexed, for the report.
    fn multiplexing(&self) -> Option<Multiplexing> {
        self.layout.as_ref().map(|l| Multiplexing {
            sets: l.sets.len() as u16,
            counters: l.counters as u16,
            switch: l.switch,
        })
    }

    fn rows(&self, ctx: &Context, r: &Reading, perf: Option<&[Option<u64>]>) -> Vec<Row> {
        self.events
            .iter()
            .zip(&r.counts.values)
            .enumerate()
            .map(|(i, (e, &value))| {
                let (pmd, mux) = match &self.layout {
                    None => (ctx.programmed().get(i).copied().unwrap_or(0), None),
                    Some(l) => {
                        let slot = l.slots[i];
                        let (enabled, running) = r.times.get(i).copied().unwrap_or((0, 0));
                        let mux = MuxCount::of(slot.set, value, enabled, running);
                        (slot.pmd, Some(mux))
                    }
                };
                Row {
                    event: e.event.name.clone(),
                    code: e.event.code,
                    pmd,
                    value,
                    perf: perf.and_then(|p| p.get(i).copied().flatten()),
                    generic: self.pmu.generic(e.event.code),
                    libpfm: e.libpfm.clone(),
                    stats: None,
                    mux,
                }
            })
            .collect()
    }

    /// Writes `report` in the chosen format.
    fn emit(&mut self, report: &Report) -> Result<(), Failure> {
        let text = match (&self.format, report.kind) {
            // As perf stat -I -x: interval lines only, so every line has the
            // same fields (a total has no interval time).
            (Format::Csv(_), StatKind::Summary) if self.args.interval.is_some() => return Ok(()),
            (Format::Json, _) => report.json_line()?,
            (Format::Csv(sep), _) => report.csv_lines(sep),
            (Format::Table(style), StatKind::Interval) => report.interval_lines(*style),
            (Format::Table(style), _) => report.table(*style),
        };
        self.out.write(&text)
    }

    fn interval_header(&mut self, has_perf: bool) -> Result<(), Failure> {
        if let Format::Table(style) = self.format {
            if self.args.interval.is_some() {
                let header = Report::interval_header(has_perf, style);
                self.out.write(&header)?;
            }
        }
        Ok(())
    }

    /// Prints the interval since the last one, ending at `counts`. `last`:
    /// the partial interval before the totals, which the table leaves out
    /// when it counted nothing (JSON and CSV keep it: their intervals add
    /// up to the totals, times included).
    #[expect(clippy::too_many_arguments)]
    fn tick(
        &mut self,
        ctx: &Context,
        perf: &PerfSide,
        ticker: &mut Ticker,
        base: &Report,
        now: Instant,
        counts: Reading,
        last: bool,
    ) -> Result<(), Failure> {
        let d = counts.delta(&ticker.prev);
        let nothing = d.counts.values.iter().all(|&v| v == 0);
        if last && matches!(self.format, Format::Table(_)) && nothing {
            return Ok(());
        }
        let pv = perf_values(perf);
        let pd = perf_delta(&pv, &ticker.prev_perf);
        let line = Report {
            kind: StatKind::Interval,
            rows: self.rows(ctx, &d, pd.as_deref()),
            time_enabled: d.counts.time_enabled,
            time_running: d.counts.time_running,
            elapsed: now - ticker.prev_time,
            interval_end: Some(now - ticker.t0),
            ..base.clone()
        };
        self.emit(&line)?;
        ticker.prev = counts;
        ticker.prev_perf = pv;
        ticker.prev_time = now;
        Ok(())
    }

    /// Command mode: `-r N` runs (1 without), then the summary.
    fn command(&mut self, first: Context, argv: &[OsString]) -> Result<u8, Failure> {
        let runs = self.args.repeat.unwrap_or(1);
        let argv_text: Vec<String> = argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let mut done: Vec<Report> = Vec::new();
        let mut status = None;
        let mut ctx = Some(first);
        for run in 1..=runs {
            // One context per run: each starts from zero on a new thread.
            let mut c = match ctx.take() {
                Some(c) => c,
                None => Context::open()?,
            };
            self.program(&mut c)?;
            let (report, st) = self.run_once(&c, argv, &argv_text)?;
            status = Some(st);
            warn_if_lost(report.lost_threads);
            if runs > 1 {
                let mut r = report.clone();
                r.kind = StatKind::Run;
                r.run = Some(run);
                if self.format == Format::Json {
                    self.emit(&r)?;
                }
                done.push(r);
            } else {
                done.push(report);
            }
            // Ctrl-C killed the command: stop repeating, as perf stat does,
            // and leave the killed run out of the mean when runs before it
            // completed (its counts stop wherever the signal landed).
            if st.signal == Some(libc::SIGINT) {
                if runs > 1 && done.len() > 1 {
                    done.pop();
                    eprintln!(
                        "pfm: run {run} of {runs} interrupted (SIGINT): the mean is of the {} \
                         runs before it",
                        done.len()
                    );
                }
                break;
            }
        }
        let summary = if runs > 1 {
            summarize(&done)
        } else {
            done.pop()
        };
        if let Some(s) = summary {
            self.emit(&s)?;
        }
        let code = status.map_or(1, |s: ExitStatus| s.shell_code());
        Ok(u8::try_from(code).unwrap_or(1))
    }

    /// One run of the command: spawned paused, attached (with inheritance
    /// unless `--no-inherit`), armed to start at its exec, then let go;
    /// with `-I` the counts are printed every interval while it runs.
    fn run_once(
        &mut self,
        ctx: &Context,
        argv: &[OsString],
        argv_text: &[String],
    ) -> Result<(Report, ExitStatus), Failure> {
        // Dropping `child` on any error below kills the paused command.
        let mut child = PausedChild::spawn(argv)?;
        let pid = child.pid();
        // After the spawn: a command that cannot be found is one line.
        let on_exec = self.arm(ctx)?;
        ctx.load(pid)?;
        ctx.wait_active(ACTIVE_TIMEOUT)?;
        // perf counts what perfmon counts: the same threads, from the
        // same instant (the exec, or the START below).
        let opts = PerfOptions {
            inherit: self.inherit,
            enable_on_exec: on_exec,
        };
        let perf = self.perf_for(&[pid], opts);
        if !on_exec {
            perf_switch(&perf, true)?;
        }
        let base = Report {
            mux: self.multiplexing(),
            inherit: Some(self.inherit),
            ..Report::empty_summary(
                Subject::Command(argv_text.to_vec()),
                pid,
                self.pmu.model.clone(),
            )
        };
        self.interval_header(perf.is_some())?;
        let t0 = Instant::now();
        if !on_exec {
            ctx.start()?;
        }
        // From here Ctrl-C is for the command; pfm stays to print the counts.
        process::ignore_interrupts();
        let released = child.release();
        if let Err(e) = released {
            let _ = child.wait();
            return Err(e.into());
        }
        let mut ticker = self
            .args
            .interval
            .map(|i| Ticker::new(i, t0, self.events.len(), self.layout.is_some()));
        let look = self.args.per_thread;
        let status = if ticker.is_none() && !look {
            child.wait()?
        } else {
            let mut next_look = Instant::now();
            // The initial thread exited, or its monitoring was revoked:
            // its fd stays readable from then on.
            let mut gone = false;
            loop {
                let wake = earliest([ticker.as_ref().map(|t| t.next), look.then_some(next_look)]);
                let timeout =
                    wake.map_or(EXITED_POLL, |w| w.saturating_duration_since(Instant::now()));
                if gone {
                    std::thread::sleep(timeout.min(EXITED_POLL));
                } else {
                    // The context's fd turns readable when the thread exits
                    // (its END message): no interval is cut short waiting.
                    process::wait_readable(&[ctx.as_fd()], Some(timeout))?;
                }
                if let Some(st) = child.try_wait()? {
                    break st;
                }
                let now = Instant::now();
                if look && now >= next_look {
                    self.look_at_threads(std::slice::from_ref(ctx))?;
                    next_look = now + THREAD_LOOK;
                }
                if let Some(t) = &mut ticker {
                    if now >= t.next {
                        let counts = self.read(ctx)?;
                        self.tick(ctx, &perf, t, &base, now, counts, false)?;
                        t.advance(now);
                        continue;
                    }
                }
                if !gone {
                    let st = ctx.state()?;
                    if st.has_exited() || st.state == CtxState::Unloaded {
                        if !self.inherit && !look {
                            // The initial thread is gone, the process
                            // lives on: its counts are final; wait for the
                            // process.
                            break child.wait()?;
                        }
                        // Its children may still count: go on until the
                        // command ends.
                        gone = true;
                    }
                }
            }
        };
        let elapsed = t0.elapsed();
        warn_if_revoked(ctx)?;
        // The command has ended: the final counts stay readable.
        let counts = self.read(ctx)?;
        let perf_vals = perf_values(&perf);
        if let Some(ticker) = &mut ticker {
            // The last, partial interval: the intervals add up to the totals.
            self.tick(
                ctx,
                &perf,
                ticker,
                &base,
                t0 + elapsed,
                counts.clone(),
                true,
            )?;
        }
        let threads = if look {
            Some(self.thread_counts(std::slice::from_ref(ctx))?)
        } else {
            None
        };
        let lost_threads = if self.inherit {
            Some(ctx.state()?.lost_threads)
        } else {
            None
        };
        let _ = ctx.unload();
        let report = Report {
            rows: self.rows(ctx, &counts, perf_vals.as_deref()),
            time_enabled: counts.counts.time_enabled,
            time_running: counts.counts.time_running,
            elapsed,
            exit: Some(Exit {
                code: status.code,
                signal: status.signal,
                user: status.user,
                system: status.system,
            }),
            lost_threads,
            threads,
            ..base
        };
        Ok((report, status))
    }

    /// Thread mode (`-t`) and process mode (`-p`, one context per process,
    /// their counts summed): until Ctrl-C, `--duration` or the end of every
    /// target (a process ends for pfm when the thread LOAD named, its main
    /// thread, exits).
    fn attached(
        &mut self,
        first: Context,
        target: Target,
        interrupts: &Interrupts,
    ) -> Result<u8, Failure> {
        let ids = target.ids();
        let Some(&first_id) = ids.first() else {
            return Err(Failure::new("nothing to attach to"));
        };
        let mut ctxs: Vec<Context> = Vec::with_capacity(ids.len());
        let mut first = Some(first);
        for &id in &ids {
            let mut ctx = match first.take() {
                Some(c) => c,
                None => Context::open()?,
            };
            self.program(&mut ctx)?;
            match target {
                Target::Thread(_) => ctx
                    .load(id)
                    .map_err(|e| crate::attach_failure(e, "thread", id))?,
                Target::Processes(_) => match ctx.load_process(id) {
                    Ok(()) => {}
                    // The library speaks of threads; -p names a process.
                    Err(e) if e.errno() == Some(libc::ESRCH) => {
                        return Err(crate::no_such("process", id))
                    }
                    Err(e) if e.errno() == Some(libc::EINVAL) => {
                        return Err(Failure::new(format!(
                            "{e}: a module from before whole processes refuses \
                             PFM_LOAD_PROCESS; -t {id} counts the process's main thread"
                        )))
                    }
                    Err(e) => return Err(e.into()),
                },
            }
            ctxs.push(ctx);
        }
        for (ctx, &id) in ctxs.iter().zip(&ids) {
            match ctx.wait_active(ACTIVE_TIMEOUT) {
                Ok(_) => {}
                Err(perfmon::Error::Timeout { .. }) => eprintln!(
                    "pfm: warning: {} has not picked up the context after {} s \
                     (stopped?); counting starts when it next runs",
                    target.words(id),
                    ACTIVE_TIMEOUT.as_secs()
                ),
                Err(e) => return Err(e.into()),
            }
            ctx.set_nonblocking(true)?;
        }
        // perf as perf stat: one group per thread, inherited by the
        // threads created later, for a process; the thread alone for -t.
        let perf = match &target {
            Target::Thread(tid) => self.perf_for(&[*tid], PerfOptions::default()),
            Target::Processes(pids) => {
                let tids: Vec<u32> = pids.iter().flat_map(|&p| tasks_of(p)).collect();
                let opts = PerfOptions {
                    inherit: true,
                    enable_on_exec: false,
                };
                self.perf_for(&tids, opts)
            }
        };
        perf_switch(&perf, true)?;
        let base = Report {
            mux: self.multiplexing(),
            ..Report::empty_summary(target.subject(), first_id, self.pmu.model.clone())
        };
        self.interval_header(perf.is_some())?;
        let t0 = Instant::now();
        for ctx in &ctxs {
            ctx.start()?;
        }
        let deadline = self.args.duration.map(|d| t0 + d);
        let mut ticker = self
            .args
            .interval
            .map(|i| Ticker::new(i, t0, self.events.len(), self.layout.is_some()));
        let look = self.args.per_thread;
        let mut next_look = t0;
        let mut interrupted = false;
        // Per context: its target ended (exited: true; revoked: false).
        let mut ended: Vec<Option<bool>> = vec![None; ctxs.len()];
        loop {
            let now = Instant::now();
            let wake = earliest([
                ticker.as_ref().map(|t| t.next),
                deadline,
                look.then_some(next_look),
            ]);
            let timeout = wake.map(|w| w.saturating_duration_since(now));
            let live: Vec<usize> = (0..ctxs.len()).filter(|&i| ended[i].is_none()).collect();
            let mut fds: Vec<BorrowedFd<'_>> = live.iter().map(|&i| ctxs[i].as_fd()).collect();
            fds.push(interrupts.as_fd());
            let ready = process::wait_readable(&fds, timeout)?;
            if ready.last().copied().unwrap_or(false) && interrupts.pending()?.is_some() {
                interrupted = true;
                break;
            }
            let mut idle = false;
            for (k, &i) in live.iter().enumerate() {
                if !ready.get(k).copied().unwrap_or(false) {
                    continue;
                }
                let ctx = &ctxs[i];
                let (mut exited, mut revoked) = (false, false);
                for msg in ctx.messages() {
                    match msg?.kind {
                        MessageKind::End => exited = true,
                        MessageKind::Revoked => revoked = true,
                        _ => {}
                    }
                }
                if exited || ctx.state()?.has_exited() {
                    ended[i] = Some(true);
                } else if revoked {
                    warn_if_revoked(ctx)?;
                    ended[i] = Some(false);
                } else {
                    idle = true;
                }
            }
            if ended.iter().all(Option::is_some) {
                break;
            }
            if idle {
                // Readable without a message or an exit: do not spin.
                std::thread::sleep(Duration::from_millis(10));
            }
            let now = Instant::now();
            if look && now >= next_look {
                self.look_at_threads(&ctxs)?;
                next_look = now + THREAD_LOOK;
            }
            if let Some(t) = &mut ticker {
                if now >= t.next {
                    let counts = self.read_all(&ctxs)?;
                    self.tick(&ctxs[0], &perf, t, &base, now, counts, false)?;
                    t.advance(now);
                }
            }
            if deadline.is_some_and(|d| now >= d) {
                break;
            }
        }
        let exited = ended.iter().all(|e| *e == Some(true));
        if !exited {
            // Stop first so the totals are one instant's values.
            for (ctx, e) in ctxs.iter().zip(&ended) {
                if e.is_none() {
                    let _ = ctx.stop();
                }
            }
        } else {
            // The loaded threads ended; the others of the program may
            // still be in their exit (a parent's wait returns before its
            // child's last switch-out, which counts the child's last
            // slice): read once their rows say they ended too.
            self.settle(&ctxs)?;
        }
        if perf.is_some() {
            let _ = perf_switch(&perf, false);
        }
        let elapsed = t0.elapsed();
        let counts = self.read_all(&ctxs)?;
        let perf_vals = perf_values(&perf);
        if let Some(t) = &mut ticker {
            // The last, partial interval: the intervals add up to the totals.
            self.tick(
                &ctxs[0],
                &perf,
                t,
                &base,
                t0 + elapsed,
                counts.clone(),
                true,
            )?;
        }
        let threads = if look {
            Some(self.thread_counts(&ctxs)?)
        } else {
            None
        };
        let lost_threads = match target {
            Target::Thread(_) => None,
            Target::Processes(_) => {
                let mut lost = 0u32;
                for ctx in &ctxs {
                    lost = lost.saturating_add(ctx.state()?.lost_threads);
                }
                Some(lost)
            }
        };
        for ctx in &ctxs {
            let _ = ctx.unload();
        }
        let report = Report {
            rows: self.rows(&ctxs[0], &counts, perf_vals.as_deref()),
            time_enabled: counts.counts.time_enabled,
            time_running: counts.counts.time_running,
            elapsed,
            interrupted,
            target_exited: exited,
            lost_threads,
            threads,
            ..base
        };
        self.emit(&report)?;
        warn_if_lost(lost_threads);
        Ok(0)
    }
}

/// The rounded mean of `values` (0 for none).
fn mean_of(values: &[u64]) -> u64 {
    Stats::of(values).map_or(0, |s| s.mean.round() as u64)
}

/// The summary of `-r` runs: each count's mean (rounded) and statistics,
/// the mean elapsed time and its statistics, the last run's exit.
/// Multiplexed, also each estimate's mean over the runs that counted the
/// event, with its statistics, and the mean times of its set.
fn summarize(runs: &[Report]) -> Option<Report> {
    let last = runs.last()?;
    let n = u32::try_from(runs.len()).ok()?;
    let mut rows = last.rows.clone();
    for (i, row) in rows.iter_mut().enumerate() {
        let values: Vec<u64> = runs
            .iter()
            .filter_map(|r| r.rows.get(i))
            .map(|r| r.value)
            .collect();
        let stats = Stats::of(&values)?;
        row.value = stats.mean.round() as u64;
        let perf: Vec<u64> = runs
            .iter()
            .filter_map(|r| r.rows.get(i).and_then(|r| r.perf))
            .collect();
        row.perf = Stats::of(&perf)
            .filter(|_| perf.len() == runs.len())
            .map(|s| s.mean.round() as u64);
        row.stats = Some(stats);
        if let Some(m) = &mut row.mux {
            let of_runs = |f: fn(&MuxCount) -> Option<u64>| -> Vec<u64> {
                runs.iter()
                    .filter_map(|r| r.rows.get(i)?.mux.as_ref())
                    .filter_map(f)
                    .collect()
            };
            let estimates = Stats::of(&of_runs(|m| m.estimate));
            m.estimate = estimates.as_ref().map(|s| s.mean.round() as u64);
            m.estimate_stats = estimates;
            m.time_enabled = mean_of(&of_runs(|m| Some(m.time_enabled)));
            m.time_running = mean_of(&of_runs(|m| Some(m.time_running)));
        }
    }
    let elapsed: Vec<u64> = runs
        .iter()
        .map(|r| u64::try_from(r.elapsed.as_nanos()).unwrap_or(u64::MAX))
        .collect();
    let elapsed_stats = Stats::of(&elapsed)?;
    let mean = |f: fn(&Report) -> u64| mean_of(&runs.iter().map(f).collect::<Vec<u64>>());
    Some(Report {
        kind: StatKind::Summary,
        rows,
        time_enabled: mean(|r| r.time_enabled),
        time_running: mean(|r| r.time_running),
        elapsed: Duration::from_nanos(elapsed_stats.mean.round() as u64),
        run: None,
        runs: Some((n, elapsed_stats)),
        ..last.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sets::Switch;

    #[test]
    fn a_running_thread_lives_a_zombie_or_unknown_one_does_not() {
        assert!(thread_lives(std::process::id()));
        // Above PID_MAX_LIMIT (2^22): never a thread.
        assert!(!thread_lives(4_194_305));
        let child = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = child.id();
        let mut child = child;
        // Exited but not reaped yet: a zombie, not alive (polled: `true`
        // exits when the host lets it).
        let until = Instant::now() + Duration::from_secs(30);
        while thread_lives(pid) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!thread_lives(pid));
        assert!(
            std::fs::metadata(format!("/proc/{pid}")).is_ok(),
            "reaped early"
        );
        child.wait().expect("wait");
    }

    /// A run of a multiplexed command: one context-switches row in set 1.
    fn run(value: u64, enabled: u64, running: u64) -> Report {
        let mut r = Report::empty_summary(Subject::Command(vec!["x".into()]), 1, "soft".into());
        r.mux = Some(Multiplexing {
            sets: 2,
            counters: 2,
            switch: Switch::Time(sets::DEFAULT_SWITCH_NS),
        });
        r.rows = vec![Row {
            event: "context-switches".into(),
            code: 2,
            pmd: 0,
            value,
            perf: None,
            generic: None,
            libpfm: None,
            stats: None,
            mux: Some(MuxCount::of(1, value, enabled, running)),
        }];
        r.time_enabled = enabled;
        r.time_running = enabled;
        r
    }

    #[test]
    fn processes_sum() {
        let r = |v: [u64; 2], e: u64, run: u64| Reading {
            counts: perfmon::Counts {
                values: v.to_vec(),
                time_enabled: e,
                time_running: run,
            },
            times: Vec::new(),
        };
        let total = sum_readings(vec![r([1, 10], 5, 4), r([2, 20], 7, 6), r([3, 30], 1, 1)]);
        assert_eq!(total.counts.values, vec![6, 60]);
        assert_eq!(
            (total.counts.time_enabled, total.counts.time_running),
            (13, 11)
        );
        assert_eq!(sum_readings(vec![r([4, 5], 1, 1)]), r([4, 5], 1, 1));
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_millis(5);
        assert_eq!(earliest([None, Some(t1), Some(t0)]), Some(t0));
        assert_eq!(earliest([None, None]), None);
        assert_eq!(Target::Processes(vec![3, 4]).ids(), vec![3, 4]);
        assert_eq!(Target::Thread(9).words(9), "thread 9");
    }

    #[test]
    fn repeat_summary_of_estimates() {
        // Estimates 4 x 10 / 5 = 8, none (never counted), 6 x 10 / 5 = 12.
        let runs = [run(4, 10, 5), run(1, 10, 0), run(6, 10, 5)];
        let s = summarize(&runs).unwrap();
        let row = &s.rows[0];
        // The raw counts' mean and statistics, as without sets.
        assert_eq!(row.value, 4, "mean of 4, 1, 6 (11/3), rounded");
        assert_eq!(row.stats.as_ref().map(|s| s.runs), Some(3));
        let m = row.mux.as_ref().unwrap();
        // The estimates' over the runs that counted it.
        assert_eq!(m.estimate, Some(10));
        assert_eq!(m.estimate_stats, Stats::of(&[8, 12]));
        assert_eq!((m.set, m.time_enabled, m.time_running), (1, 10, 3));
        assert_eq!(s.mux, runs[0].mux);
        // Never counted in any run: still not counted.
        let none = summarize(&[run(0, 10, 0), run(0, 10, 0)]).unwrap();
        let m = none.rows[0].mux.as_ref().unwrap();
        assert_eq!((m.estimate, &m.estimate_stats), (None, &None));
    }
}
