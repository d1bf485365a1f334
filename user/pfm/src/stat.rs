//! `pfm stat`: count a command from its first instruction (`-r N` times),
//! or a running thread for a while; optionally print each interval. More
//! events than counters are multiplexed in event sets ([`crate::sets`]).

use std::ffi::OsString;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use perfmon::perf::{PerfGroup, SoftwareEvent};
use perfmon::process::{self, ExitStatus, Interrupts, PausedChild};
use perfmon::{Context, CtxState, MessageKind, PmuInfo};
use pfm_json::{StatKind, Stats};

use crate::cli::StatArgs;
use crate::events::{Resolved, Resolver};
use crate::output::Output;
use crate::report::{Exit, Multiplexing, MuxCount, Report, Row, Style, Subject};
use crate::sets::{self, Layout, ProgramError, Reading};
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
    /// More events than counters: the event sets they are counted in.
    layout: Option<Layout>,
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
    // `args.check` refused bad braces and sets already.
    let (groups, explicit) = args.groups().map_err(Failure::new)?;
    let names: Vec<String> = groups.iter().flatten().cloned().collect();
    let events = Resolver::new(&pmu).resolve_names(&names)?;
    let layout = layout(args, &pmu, &groups, explicit, &events)?;
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
    };
    match (args.tid, &interrupts) {
        (Some(tid), Some(interrupts)) => st.thread(ctx, tid, interrupts),
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
        let base = Report {
            mux: self.multiplexing(),
            ..Report::empty_summary(
                Subject::Command(argv_text.to_vec()),
                pid,
                self.pmu.model.clone(),
            )
        };
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
            .map(|i| Ticker::new(i, t0, self.events.len(), self.layout.is_some()));
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
                    let counts = self.read(ctx)?;
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
        let base = Report {
            mux: self.multiplexing(),
            ..Report::empty_summary(Subject::Thread(tid), tid, self.pmu.model.clone())
        };
        self.interval_header(perf.is_some())?;
        let t0 = Instant::now();
        ctx.start()?;
        let deadline = self.args.duration.map(|d| t0 + d);
        let mut ticker = self
            .args
            .interval
            .map(|i| Ticker::new(i, t0, self.events.len(), self.layout.is_some()));
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
                    let counts = self.read(&ctx)?;
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
        let counts = self.read(&ctx)?;
        let perf_vals = perf_values(&perf);
        if let Some(t) = &mut ticker {
            // The last, partial interval: the intervals add up to the totals.
            self.tick(&ctx, &perf, t, &base, t0 + elapsed, counts.clone(), true)?;
        }
        let _ = ctx.unload();
        let report = Report {
            rows: self.rows(&ctx, &counts, perf_vals.as_deref()),
            time_enabled: counts.counts.time_enabled,
            time_running: counts.counts.time_running,
            elapsed,
            interrupted,
            target_exited: exited,
            ..base
        };
        self.emit(&report)?;
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
