//! `pfm stat`: count a command from its first instruction, or a running
//! thread for a while.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use perfmon::perf::{PerfGroup, SoftwareEvent};
use perfmon::process::{self, Interrupts, PausedChild};
use perfmon::{Context, Counts, CtxState, Event, MessageKind};

use crate::args::{StatArgs, Target};
use crate::output::Output;
use crate::report::{Exit, Report, Row, Subject};
use crate::Failure;

/// How long a target may take to install the context after LOAD.
const ACTIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs `pfm stat`; returns the exit status.
pub fn stat(args: &StatArgs) -> Result<u8, Failure> {
    // Signals first, in the main thread, before anything else can start.
    let interrupts = match args.target {
        Target::Thread(_) => Some(Interrupts::terminal()?),
        Target::Command(_) => None,
    };
    let mut ctx = Context::open()?;
    let pmu = ctx.info()?.clone();
    let events = pmu.parse_events(&args.events.join(","))?;
    ctx.program(&events)?;
    let mut out = Output::open(args.common.output.as_deref(), Output::Stderr)?;
    match &args.target {
        Target::Command(argv) => stat_command(args, &ctx, &pmu.model, &events, argv, &mut out),
        Target::Thread(tid) => {
            let interrupts = interrupts.ok_or_else(|| Failure::new("signal setup missing"))?;
            stat_thread(args, &ctx, &pmu.model, &events, *tid, &interrupts, &mut out)
        }
    }
}

/// Opens perf_event counters of the same events for `tid`, when asked and
/// possible; says why not otherwise.
fn perf_for(
    args: &StatArgs,
    events: &[Event],
    tid: u32,
) -> Option<(PerfGroup, Vec<Option<usize>>)> {
    if !args.perf {
        return None;
    }
    let mut kinds = Vec::new();
    let mut index = Vec::new();
    for e in events {
        match SoftwareEvent::from_name(&e.name) {
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

fn rows(events: &[Event], pmds: &[u16], counts: &Counts, perf: Option<&[Option<u64>]>) -> Vec<Row> {
    events
        .iter()
        .zip(pmds)
        .zip(&counts.values)
        .enumerate()
        .map(|(i, ((e, &pmd), &value))| Row {
            event: e.name.clone(),
            code: e.code,
            pmd,
            value,
            perf: perf.and_then(|p| p.get(i).copied().flatten()),
        })
        .collect()
}

/// perf values aligned with the events (None where perf has no such event).
fn perf_values(perf: &Option<(PerfGroup, Vec<Option<usize>>)>) -> Option<Vec<Option<u64>>> {
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

fn render(report: &Report, json: bool) -> String {
    if json {
        format!("{}\n", report.json().to_json())
    } else {
        report.table()
    }
}

fn stat_command(
    args: &StatArgs,
    ctx: &Context,
    model: &str,
    events: &[Event],
    argv: &[std::ffi::OsString],
    out: &mut Output,
) -> Result<u8, Failure> {
    // Dropping `child` on any error below kills the paused command.
    let mut child = PausedChild::spawn(argv)?;
    let pid = child.pid();
    ctx.load(pid)?;
    ctx.wait_active(ACTIVE_TIMEOUT)?;
    let perf = perf_for(args, events, pid);
    if let Some((g, _)) = &perf {
        g.enable()?;
    }
    let t0 = Instant::now();
    ctx.start()?;
    // From here Ctrl-C is for the command; pfm stays to print the counts.
    process::ignore_interrupts();
    let released = child.release();
    let status = child.wait()?;
    let elapsed = t0.elapsed();
    if let Err(e) = released {
        return Err(e.into());
    }
    warn_if_revoked(ctx)?;
    // The thread has exited: its final counts stay readable.
    let counts = ctx.read()?;
    let perf_vals = perf_values(&perf);
    let _ = ctx.unload();
    let report = Report {
        subject: Subject::Command(
            argv.iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
        ),
        tid: pid,
        model: model.to_string(),
        rows: rows(events, ctx.programmed(), &counts, perf_vals.as_deref()),
        time_enabled: counts.time_enabled,
        time_running: counts.time_running,
        elapsed,
        interval_end: None,
        exit: Some(Exit {
            code: status.code,
            signal: status.signal,
            user: status.user,
            system: status.system,
        }),
        interrupted: false,
        target_exited: false,
    };
    out.write(&render(&report, args.common.json))?;
    Ok(u8::try_from(status.shell_code()).unwrap_or(1))
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

/// Why the thread-mode loop ended.
#[derive(Default)]
struct Ending {
    interrupted: bool,
    exited: bool,
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

fn stat_thread(
    args: &StatArgs,
    ctx: &Context,
    model: &str,
    events: &[Event],
    tid: u32,
    interrupts: &Interrupts,
    out: &mut Output,
) -> Result<u8, Failure> {
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
    let perf = perf_for(args, events, tid);
    if let Some((g, _)) = &perf {
        g.enable()?;
    }
    let t0 = Instant::now();
    ctx.start()?;

    let base = Report {
        subject: Subject::Thread(tid),
        tid,
        model: model.to_string(),
        rows: Vec::new(),
        time_enabled: 0,
        time_running: 0,
        elapsed: Duration::ZERO,
        interval_end: None,
        exit: None,
        interrupted: false,
        target_exited: false,
    };
    if args.interval.is_some() && !args.common.json {
        out.write(&Report::interval_header(perf.is_some()))?;
    }
    let deadline = args.duration.map(|d| t0 + d);
    let mut next_tick = args.interval.map(|i| t0 + i);
    let mut prev = Counts {
        values: vec![0; events.len()],
        ..Default::default()
    };
    let mut prev_perf: Option<Vec<Option<u64>>> = None;
    let mut prev_time = t0;
    let mut ending = Ending::default();
    loop {
        let now = Instant::now();
        let wake = match (next_tick, deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let timeout = wake.map(|w| w.saturating_duration_since(now));
        let ready = process::wait_readable(&[ctx.as_fd(), interrupts.as_fd()], timeout)?;
        if ready.get(1).copied().unwrap_or(false) && interrupts.pending()?.is_some() {
            ending.interrupted = true;
            break;
        }
        if ready.first().copied().unwrap_or(false) {
            let mut revoked = false;
            for msg in ctx.messages() {
                match msg?.kind {
                    MessageKind::End => ending.exited = true,
                    MessageKind::Revoked => revoked = true,
                    _ => {}
                }
            }
            if ending.exited || ctx.state()?.has_exited() {
                ending.exited = true;
                break;
            }
            if revoked {
                warn_if_revoked(ctx)?;
                break;
            }
            // Readable without a message or an exit: do not spin.
            std::thread::sleep(Duration::from_millis(10));
        }
        let now = Instant::now();
        if let (Some(tick), Some(interval)) = (next_tick, args.interval) {
            if now >= tick {
                let counts = ctx.read()?;
                let d = delta(&counts, &prev);
                let pv = perf_values(&perf);
                let pd = match (&pv, &prev_perf) {
                    (Some(a), Some(b)) => Some(
                        a.iter()
                            .zip(b)
                            .map(|(x, y)| x.zip(*y).map(|(x, y)| x.wrapping_sub(y)))
                            .collect::<Vec<_>>(),
                    ),
                    (Some(a), None) => Some(a.clone()),
                    _ => None,
                };
                let line = Report {
                    rows: rows(events, ctx.programmed(), &d, pd.as_deref()),
                    time_enabled: d.time_enabled,
                    time_running: d.time_running,
                    elapsed: now - prev_time,
                    interval_end: Some(now - t0),
                    ..base.clone()
                };
                out.write(&if args.common.json {
                    format!("{}\n", line.json().to_json())
                } else {
                    line.interval_lines()
                })?;
                prev = counts;
                prev_perf = pv;
                prev_time = now;
                // Skip ticks missed while busy rather than bursting.
                let mut t = tick + interval;
                while t <= now {
                    t += interval;
                }
                next_tick = Some(t);
            }
        }
        if deadline.is_some_and(|d| now >= d) {
            break;
        }
    }
    if !ending.exited {
        // Stop first so the totals are one instant's values.
        let _ = ctx.stop();
    }
    if let Some((g, _)) = &perf {
        let _ = g.disable();
    }
    let elapsed = t0.elapsed();
    let counts = ctx.read()?;
    let perf_vals = perf_values(&perf);
    let _ = ctx.unload();
    let report = Report {
        rows: rows(events, ctx.programmed(), &counts, perf_vals.as_deref()),
        time_enabled: counts.time_enabled,
        time_running: counts.time_running,
        elapsed,
        interrupted: ending.interrupted,
        target_exited: ending.exited,
        ..base
    };
    out.write(&render(&report, args.common.json))?;
    Ok(0)
}
