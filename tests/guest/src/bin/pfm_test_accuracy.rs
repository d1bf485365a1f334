//! pfm_test_accuracy: task-clock against what the monitored thread measures
//! itself, on the workloads where counting is hardest.
//!
//! The monitored thread reads its own `CLOCK_THREAD_CPUTIME_ID` at the edges
//! of every window (`pfm_guest::edges`); the tool reads perfmon and perf
//! while the thread is blocked at the edge (or, self-monitoring, between
//! the thread's two clock readings). Checked at every one of 41 edges (40 for
//! another thread or process: the LOAD happens at the first):
//!
//! - task-clock from edge 0 lies within the interval the thread's own clock
//!   gives (no tolerance: the interval's width is one write and one read
//!   system call, or one READ ioctl and one perf read);
//! - context-switches and cpu-migrations equal perf's over the same window
//!   (both are frozen while the thread is blocked);
//! - task-clock is not below perf's (perf's window is narrower:
//!   Documentation/perfmon.rst, Accuracy), over the windows where perf's
//!   own count is within the thread's own clock (a vCPU stalled by a busy
//!   host between the scheduler's accounting and perf's switch-out hook
//!   gives perf time the thread never ran: those windows are counted and
//!   left out); above it, the thread's own clock is the judge.
//!
//! Workloads: sleep/wake (1 ms naps), ping-pong through a pipe with a
//! partner on the same CPU, and moves between CPUs; for the thread itself,
//! another thread of this process, and another process. A spectator thread
//! reads the target's CPU clock from the other CPU all along, which makes
//! the scheduler account the target's runtime at arbitrary instants, also
//! inside its context switches (how `ps`, `top` or a profiler's sampling
//! of /proc would), the case that made task-clock lose time before.

use std::time::Duration;

use pfm_guest::edges::{self, Edge, Verdict, Workload};
use pfm_guest::tap::diag;
use pfm_guest::{module, perf_group, soft_context, ResultExt, Tap, TestResult, PER_SWITCH_NS};

const ROUNDS: usize = 40;
const WORKLOADS: [Workload; 3] = [Workload::Sleep, Workload::PingPong, Workload::Migrate];
/// Checks per measurement.
const CHECKS: usize = 4;
/// Measurements: self (sleep, migrate), another thread and another process
/// (each workload).
const MEASUREMENTS: usize = 2 + 2 * WORKLOADS.len();
const PLAN: usize = 1 + MEASUREMENTS * CHECKS + 2;

fn check_names(label: &str) -> [String; CHECKS] {
    [
        format!("{label}: task-clock within the thread's own CPU time at every edge"),
        format!("{label}: context-switches equal perf's"),
        format!("{label}: cpu-migrations equal perf's"),
        format!("{label}: task-clock not below perf's where perf is aligned with the thread's clock (1% + 200 us + 100 us per switch)"),
    ]
}

/// The four verdicts on a series of edges.
fn judge(label: &str, edges: &[Edge]) -> [TestResult; CHECKS] {
    let v = Verdict::of(edges);
    diag(format!("{label}: {}", v.describe()));
    let (first, last) = (&edges[0], &edges[edges.len() - 1]);
    let d = |i: usize| {
        (
            last.pfm[i].wrapping_sub(first.pfm[i]),
            last.perf[i].wrapping_sub(first.perf[i]),
        )
    };
    let (clock, perf_clock) = d(0);
    let (cs, perf_cs) = d(1);
    let (mig, perf_mig) = d(2);
    diag(format!(
        "{label}: pfm task-clock {clock} cs {cs} mig {mig} | perf task-clock {perf_clock} cs {perf_cs} mig {perf_mig}"
    ));
    let own = if v.outside == 0 {
        Ok(())
    } else {
        Err(format!(
            "{} of {} edges outside; worst {} ns at edge {} (negative: time lost)",
            v.outside,
            edges.len() - 1,
            v.worst_ns,
            v.worst_edge
        ))
    };
    let eq = |what: &str, a: u64, b: u64| -> TestResult {
        if a == b {
            Ok(())
        } else {
            Err(format!("{what} {a} vs perf {b}"))
        }
    };
    // perf's task-clock covers a narrower window than the thread's
    // runtime (Documentation/perfmon.rst, Accuracy): perfmon's may not be
    // below it by more than 1% + 200 us + 100 us per switch. Above it, the
    // thread's own clock is the judge (the first check).
    //
    // perf is a lower bound only where its own window is aligned with the
    // thread's runtime: perf counts from its switch-in hook
    // (`finish_task_switch`) to its switch-out hook (`prepare_task_switch`),
    // the scheduler from `pick_next_task` to its accounting in the dequeue,
    // which comes before perf's switch-out. A vCPU the host deschedules in
    // that stretch (a busy host: QEMU's vCPU thread preempted) gives the
    // whole stall to perf and none of it to the thread's runtime (seen:
    // perf 1,253.4 ms where the thread's own clock said at most 1,200.6).
    // Such a window is visible: perf's delta over it exceeds the thread's
    // own clock for it by more than the per-switch hook gap. Those windows
    // are left out of the comparison (and counted); over the others the
    // bound holds as derived.
    let aligned = perf_aligned(edges);
    let per_switch = PER_SWITCH_NS * aligned.cs;
    let slack = aligned.perf / 100 + pfm_guest::TASK_CLOCK_SLACK_NS;
    diag(format!(
        "{label}: perf aligned with the thread's own clock in {} of {} windows ({} above it by {} ns in all)",
        aligned.windows,
        edges.len() - 1,
        edges.len() - 1 - aligned.windows,
        aligned.excess_ns
    ));
    let agrees = if aligned.pfm + slack + per_switch >= aligned.perf {
        Ok(())
    } else {
        Err(format!(
            "task-clock {} below perf's {} over {} switches in the {} windows where perf was aligned",
            aligned.pfm, aligned.perf, aligned.cs, aligned.windows
        ))
    };
    [
        own,
        eq("context-switches", cs, perf_cs),
        eq("cpu-migrations", mig, perf_mig),
        agrees,
    ]
}

/// The windows (consecutive edges) where perf's task-clock is within the
/// thread's own CPU time for the window plus the per-switch hook gap
/// ([`PER_SWITCH_NS`] per switch perf counted in it), added up.
#[derive(Debug, Default)]
struct Aligned {
    windows: usize,
    pfm: u64,
    perf: u64,
    cs: u64,
    /// How far perf was above the thread's own clock in the others.
    excess_ns: u64,
}

fn perf_aligned(edges: &[Edge]) -> Aligned {
    let mut a = Aligned::default();
    for w in edges.windows(2) {
        let (e0, e1) = (&w[0], &w[1]);
        let pfm = e1.pfm[0].wrapping_sub(e0.pfm[0]);
        let perf = e1.perf[0].wrapping_sub(e0.perf[0]);
        let cs = e1.perf[1].wrapping_sub(e0.perf[1]);
        // The most the thread ran between the two edges, by its own clock.
        let own_hi = e1.u.saturating_sub(e0.t);
        if perf > own_hi + PER_SWITCH_NS * cs {
            a.excess_ns += perf - own_hi;
            continue;
        }
        a.windows += 1;
        a.pfm += pfm;
        a.perf += perf;
        a.cs += cs;
    }
    a
}

fn report(t: &mut Tap, label: &str, res: Result<Vec<Edge>, String>) {
    let names = check_names(label);
    match res {
        Ok(edges) => {
            for (name, r) in names.iter().zip(judge(label, &edges)) {
                t.result(name, r);
            }
        }
        Err(e) => {
            for name in &names {
                t.fail(name, &e);
            }
        }
    }
}

fn values3(v: &[u64]) -> [u64; 3] {
    [v[0], v[1], v[2]]
}

fn self_edges(workload: Workload) -> Result<Vec<Edge>, String> {
    let (ctx, _) = soft_context()?;
    let group = perf_group(0)?;
    ctx.load(0).ctx("LOAD self")?;
    group.enable().ctx("perf enable")?;
    ctx.start().ctx("START")?;
    // perf is read before and after perfmon: a switch or a migration
    // between the reads (the thread is running) would make the edge
    // inexact for those counts, so such an edge is read again.
    let edges = edges::run_self(workload, ROUNDS, || {
        for _ in 0..100 {
            let before = group.read().ctx("perf read")?;
            let c = ctx.read().ctx("READ")?;
            let p = group.read().ctx("perf read")?;
            if (1..3).all(|i| before[i].value == p[i].value) {
                return Ok((values3(&c.values), [p[0].value, p[1].value, p[2].value]));
            }
        }
        Err("a switch between every perf and perfmon read of an edge".into())
    })?;
    ctx.unload().ctx("UNLOAD")?;
    Ok(edges)
}

fn main() {
    pfm_guest::child::dispatch();
    let mut t = Tap::new(PLAN);
    pfm_guest::watchdog(Duration::from_secs(500));
    t.require("insmod perfmon.ko", module::insmod(&[]));
    for w in [Workload::Sleep, Workload::Migrate] {
        let label = format!("self, {}", w.name());
        report(&mut t, &label, self_edges(w));
    }
    for w in WORKLOADS {
        let label = format!("another thread, {}", w.name());
        report(&mut t, &label, edges::thread_edges(w, ROUNDS));
    }
    for w in WORKLOADS {
        let label = format!("another process, {}", w.name());
        report(&mut t, &label, edges::process_edges(w, ROUNDS));
    }
    t.run("no context left behind", || {
        module::wait_contexts(0, Duration::from_secs(5))
    });
    t.run("rmmod perfmon", module::rmmod);
    t.finish();
}
