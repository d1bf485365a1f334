//! `pfm stat`: count a command from its first instruction (`-r N` times),
//! or a running thread for a while; optionally print each interval.

use std::ffi::OsString;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use perfmon::perf::{PerfGroup, SoftwareEvent};
use perfmon::process::{self, ExitStatus, Interrupts, PausedChild};
use perfmon::{Context, Counts, CtxState, MessageKind, PmuInfo};
use pfm_json::{StatKind, Stats};

use crate::cli::StatArgs;
use crate::events::{Resolved, Resolver};
use crate::output::Output;
use crate::report::{Exit, Report, Row, Style, Subject};
use crate::Failure;

/// How long a target may take to install the context after LOAD.
const ACTIVE_TIMEOUT: Duration = Duration::from_secs(5);

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

/// What one `pfm stat` needs throughout.
struct Stat<'a> {
    args: &'a StatArgs,
    pmu: PmuInfo,
    events: Vec<Resolved>,
    format: Format,
    out: Output,
}

/// Runs `pfm stat`; returns the exit status.
pub fn stat(args: &StatArgs, json: bool, output: Option<&std::path::Path>) -> Result<u8, Failure> {
    // Signals first, in the main thread, before anything else can start.
    let interrupts = match args.tid {
        Some(_) => Some(Interrupts::terminal()?),
        None => None,
    };
    let ctx = Context::open()?;
    let pmu = ctx.info()?.clone();
    let events = Resolver::new(&pmu).resolve_list(&args.events)?;
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
        format,
        out,
    };
    match (args.tid, &interrupts) {
        (Some(tid), Some(interrupts)) => st.thread(ctx, tid, interrupts),
        _ => st.command(ctx, &args.command),
    }
}

/// Counts of `now` minus `prev`, per value (wrapping: the values are 64-bit
/// virtual counters).
fn delta(now: &Counts, prev: &Counts) -> Counts {
    Counts {
        values: now
            .values
            .iter()
            .zip(&prev.values)
            .map(|(a, b)| a.wrapping_sub(*b))
            .collect(),
        time_enabled: now.time_enabled.wrapping_sub(prev.time_enabled),
        time_running: now.time_running.wrapping_sub(prev.time_running),
    }
}

/// perf_event counters of the same events, with `--perf`, and for each
/// event its index among them (None where perf has no such event).
type PerfSide = Option<(PerfGroup, Vec<Option<usize>>)>;

/// perf values aligned with the events.
fn perf_values(perf: &PerfSide) -> Option<Vec<Option<u64>>> {
    let (group, index) = perf.as_ref()?;
    match group.read() {
        Ok(values) => Some(
            index
                .iter()
                .map(|i| i.and_then(|i| values.get(i)).map(|v| v.value))
                .collect(),
        ),
        Err(e) => {
            eprintln!("pfm: warning: --perf: {e}");
            None
        }
    }
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

/// The totals and the last interval boundary of an interval loop.
struct Ticker {
    interval: Duration,
    t0: Instant,
    next: Instant,
    prev: Counts,
    prev_perf: Option<Vec<Option<u64>>>,
    prev_time: Instant,
}

impl Ticker {
    fn new(interval: Duration, t0: Instant, events: usize) -> Self {
        Ticker {
            interval,
            t0,
            next: t0 + interval,
            prev: Counts {
                values: vec![0; events],
                ..Default::default()
            },
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

impl Stat<'_> {
    /// Opens perf_event counters of the same events for `tid`, when asked
    /// and possible; says why not otherwise.
    fn perf_for(&self, tid: u32) -> PerfSide {
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
        match PerfGroup::open(&kinds, tid) {
            Ok(g) => Some((g, index)),
            Err(e) => {
                eprintln!("pfm: warning: --perf: {e}; showing perfmon's counts only");
                None
            }
        }
    }

    /// Programs the events on `ctx`; a PMC the module refuses is named by
    /// its event.
    fn program(&self, ctx: &mut Context) -> Result<(), Failure> {
        let events: Vec<perfmon::Event> = self.events.iter().map(|r| r.event.clone()).collect();
        match ctx.program(&events) {
            Ok(()) => Ok(()),
            Err(perfmon::Error::BadRegister {
                op: perfmon::Op::WritePmcs,
                index,
                ..
            }) if index < events.len() => {
                let e = &events[index];
                let hint = if self.pmu.is_hardware() {
                    ": kernel-mode counting (:k, the OS bit) needs CAP_PERFMON, \
                     and the INT, ANY and PC bits are the module's"
                } else {
                    ""
                };
                Err(Failure::new(format!(
                    "event '{}' (PMC value {:#x}) refused by the module (EINVAL){hint}",
                    e.name, e.code
                )))
            }
            Err(e) => Err(e.into()),
        }
    }

    fn rows(&self, pmds: &[u16], counts: &Counts, perf: Option<&[Option<u64>]>) -> Vec<Row> {
        self.events
            .iter()
            .zip(pmds)
            .zip(&counts.values)
            .enumerate()
            .map(|(i, ((e, &pmd), &value))| Row {
                event: e.event.name.clone(),
                code: e.event.code,
                pmd,
                value,
                perf: perf.and_then(|p| p.get(i).copied().flatten()),
                generic: self.pmu.generic(e.event.code),
                libpfm: e.libpfm.clone(),
                stats: None,
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
        counts: Counts,
        last: bool,
    ) -> Result<(), Failure> {
        let d = delta(&counts, &ticker.prev);
        if last && matches!(self.format, Format::Table(_)) && d.values.iter().all(|&v| v == 0) {
            return Ok(());
        }
        let pv = perf_values(perf);
        let pd = perf_delta(&pv, &ticker.prev_perf);
        let line = Report {
            kind: StatKind::Interval,
            rows: self.rows(ctx.programmed(), &d, pd.as_deref()),
            time_enabled: d.time_enabled,
            time_running: d.time_running,
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
            // Ctrl-C killed the command: stop repeating, as perf stat does.
            if st.signal == Some(libc::SIGINT) {
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

    /// One run of the command: spawned paused, attached, started, then let
    /// go; with `-I` the counts are printed every interval while it runs.
    fn run_once(
        &mut self,
        ctx: &Context,
        argv: &[OsString],
        argv_text: &[String],
    ) -> Result<(Report, ExitStatus), Failure> {
        // Dropping `child` on any error below kills the paused command.
        let mut child = PausedChild::spawn(argv)?;
        let pid = child.pid();
        ctx.load(pid)?;
        ctx.wait_active(ACTIVE_TIMEOUT)?;
        let perf = self.perf_for(pid);
        if let Some((g, _)) = &perf {
            g.enable()?;
        }
        let base = Report::empty_summary(
            Subject::Command(argv_text.to_vec()),
            pid,
            self.pmu.model.clone(),
        );
        self.interval_header(perf.is_some())?;
        let t0 = Instant::now();
        ctx.start()?;
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
            .map(|i| Ticker::new(i, t0, self.events.len()));
        let status = match &mut ticker {
            None => child.wait()?,
            Some(ticker) => loop {
                // The context's fd turns readable when the thread exits
                // (its END message): no interval is cut short waiting.
                let timeout = ticker.next.saturating_duration_since(Instant::now());
                process::wait_readable(&[ctx.as_fd()], Some(timeout))?;
                if let Some(st) = child.try_wait()? {
                    break st;
                }
                let now = Instant::now();
                if now >= ticker.next {
                    let counts = ctx.read()?;
                    self.tick(ctx, &perf, ticker, &base, now, counts, false)?;
                    ticker.advance(now);
                } else if ctx.state()?.has_exited() {
                    // The initial thread is gone, the process lives on:
                    // its counts are final; wait for the process.
                    break child.wait()?;
                }
            },
        };
        let elapsed = t0.elapsed();
        warn_if_revoked(ctx)?;
        // The thread has exited: its final counts stay readable.
        let counts = ctx.read()?;
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
        let _ = ctx.unload();
        let report = Report {
            rows: self.rows(ctx.programmed(), &counts, perf_vals.as_deref()),
            time_enabled: counts.time_enabled,
            time_running: counts.time_running,
            elapsed,
            exit: Some(Exit {
                code: status.code,
                signal: status.signal,
                user: status.user,
                system: status.system,
            }),
            ..base
        };
        Ok((report, status))
    }

    /// Thread mode: until Ctrl-C, `--duration` or the thread's exit.
    fn thread(
        &mut self,
        mut ctx: Context,
        tid: u32,
        interrupts: &Interrupts,
    ) -> Result<u8, Failure> {
        self.program(&mut ctx)?;
        ctx.load(tid)?;
        match ctx.wait_active(ACTIVE_TIMEOUT) {
            Ok(_) => {}
            Err(perfmon::Error::Timeout { .. }) => eprintln!(
                "pfm: warning: thread {tid} has not picked up the context after {} s \
                 (stopped?); counting starts when it next runs",
                ACTIVE_TIMEOUT.as_secs()
            ),
            Err(e) => return Err(e.into()),
        }
        ctx.set_nonblocking(true)?;
        let perf = self.perf_for(tid);
        if let Some((g, _)) = &perf {
            g.enable()?;
        }
        let base = Report::empty_summary(Subject::Thread(tid), tid, self.pmu.model.clone());
        self.interval_header(perf.is_some())?;
        let t0 = Instant::now();
        ctx.start()?;
        let deadline = self.args.duration.map(|d| t0 + d);
        let mut ticker = self
            .args
            .interval
            .map(|i| Ticker::new(i, t0, self.events.len()));
        let (mut interrupted, mut exited) = (false, false);
        loop {
            let now = Instant::now();
            let wake = match (ticker.as_ref().map(|t| t.next), deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let timeout = wake.map(|w| w.saturating_duration_since(now));
            let ready = process::wait_readable(&[ctx.as_fd(), interrupts.as_fd()], timeout)?;
            if ready.get(1).copied().unwrap_or(false) && interrupts.pending()?.is_some() {
                interrupted = true;
                break;
            }
            if ready.first().copied().unwrap_or(false) {
                let mut revoked = false;
                for msg in ctx.messages() {
                    match msg?.kind {
                        MessageKind::End => exited = true,
                        MessageKind::Revoked => revoked = true,
                        _ => {}
                    }
                }
                if exited || ctx.state()?.has_exited() {
                    exited = true;
                    break;
                }
                if revoked {
                    warn_if_revoked(&ctx)?;
                    break;
                }
                // Readable without a message or an exit: do not spin.
                std::thread::sleep(Duration::from_millis(10));
            }
            let now = Instant::now();
            if let Some(t) = &mut ticker {
                if now >= t.next {
                    let counts = ctx.read()?;
                    self.tick(&ctx, &perf, t, &base, now, counts, false)?;
                    t.advance(now);
                }
            }
            if deadline.is_some_and(|d| now >= d) {
                break;
            }
        }
        if !exited {
            // Stop first so the totals are one instant's values.
            let _ = ctx.stop();
        }
        if let Some((g, _)) = &perf {
            let _ = g.disable();
        }
        let elapsed = t0.elapsed();
        let counts = ctx.read()?;
        let perf_vals = perf_values(&perf);
        if let Some(t) = &mut ticker {
            // The last, partial interval: the intervals add up to the totals.
            self.tick(&ctx, &perf, t, &base, t0 + elapsed, counts.clone(), true)?;
        }
        let _ = ctx.unload();
        let report = Report {
            rows: self.rows(ctx.programmed(), &counts, perf_vals.as_deref()),
            time_enabled: counts.time_enabled,
            time_running: counts.time_running,
            elapsed,
            interrupted,
            target_exited: exited,
            ..base
        };
        self.emit(&report)?;
        Ok(0)
    }
}

/// The summary of `-r` runs: each count's mean (rounded) and statistics,
/// the mean elapsed time and its statistics, the last run's exit.
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
    }
    let elapsed: Vec<u64> = runs
        .iter()
        .map(|r| u64::try_from(r.elapsed.as_nanos()).unwrap_or(u64::MAX))
        .collect();
    let elapsed_stats = Stats::of(&elapsed)?;
    let mean = |f: fn(&Report) -> u64| {
        let v: Vec<u64> = runs.iter().map(f).collect();
        Stats::of(&v).map_or(0, |s| s.mean.round() as u64)
    };
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
