//! pfm_test_attach: attaching a context to another thread.
//!
//! - A running (busy-looping) child and a sleeping child (5 ms naps): LOAD
//!   returns at once and the context is ACTIVE within 5 s; task-clock
//!   within the child's runtime over the window (/proc/PID/schedstat, read
//!   as a lower bound before START and an upper bound after STOP) and not
//!   below perf's by more than 15% + 5 ms, switches at most 2 below perf's.
//! - A child in one long nanosleep: LOAD installs the context without
//!   waking it (ACTIVE when LOAD returns), and UNLOAD removes it the same
//!   way (`attached_threads` back to 0 while it sleeps on): over 50
//!   LOAD/START/STOP/UNLOAD cycles its context switches
//!   (/proc/PID/status) do not move, and it is still asleep.
//! - A stopped (SIGSTOP) child: LOAD succeeds and the context is ACTIVE
//!   while it is stopped; counting works after SIGCONT.
//! - Another thread of this process, sleeping and waking: task-clock
//!   within the thread's own CPU time, switches and migrations equal to
//!   perf's, read while it is blocked (exact oracles, see
//!   `pfm_guest::edges`; pfm_test_accuracy does this for every workload).
//! - Refusals: a second context on the same thread (EBUSY, and allowed
//!   again after UNLOAD), a second self-attach (EBUSY), another user's
//!   thread (EACCES or EPERM, from a child that dropped to uid 1000, which
//!   can still monitor itself), kthreadd (EPERM), a thread that does not
//!   exist (ESRCH).

use std::time::Duration;

use perfmon::{Context, Error};
use pfm_guest::child::Child;
use pfm_guest::edges::{self, Verdict, Workload};
use pfm_guest::tap::diag;
use pfm_guest::{ensure, module, perf_group, raw, soft_context, ResultExt, Tap, TestResult};

const PLAN: usize = 14;
const ACTIVE: Duration = Duration::from_secs(5);

fn errno_of(r: perfmon::Result<()>) -> Option<i32> {
    r.err().and_then(|e: Error| e.errno())
}

fn name(e: Option<i32>) -> &'static str {
    e.map_or("success", perfmon::errno_name)
}

/// The scheduler's runtime of thread `tid` as `/proc/TID/schedstat` shows
/// it: `se.sum_exec_runtime`, an oracle the module cannot influence. For a
/// thread that is running it is the runtime as of the scheduler's last
/// update of it (its last tick, switch or wake-up), so it may lag the true
/// runtime by up to one tick (4 ms at the test kernel's HZ=250); for a
/// blocked thread it is exact. A reading is therefore a lower bound of the
/// runtime at the moment it was taken.
fn sched_runtime(tid: u32) -> Result<u64, String> {
    let text = std::fs::read_to_string(format!("/proc/{tid}/schedstat"))
        .map_err(|e| format!("/proc/{tid}/schedstat: {e}"))?;
    text.split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("/proc/{tid}/schedstat: {text:?}"))
}

/// An upper bound of thread `tid`'s runtime at the moment of the call: the
/// first `/proc/TID/schedstat` value that differs from the one read now.
/// It comes from an update the scheduler made after the call began, so it
/// holds all the runtime up to the call, and at most one tick more on a
/// running thread. A thread that does not update for 2 s was blocked all
/// along, and a blocked thread's reading is exact.
fn sched_runtime_since(tid: u32) -> Result<u64, String> {
    let first = sched_runtime(tid)?;
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(200));
        let now = sched_runtime(tid)?;
        if now != first {
            return Ok(now);
        }
    }
    Ok(first)
}

/// Attaches to `tid`, waits for ACTIVE, counts `dur` with perfmon and perf
/// (perf enabled around START..STOP); returns (pfm, perf) for the three
/// soft events, and the thread's runtime from before START to after STOP.
fn count_remote(tid: u32, dur: Duration) -> Result<([u64; 3], [u64; 3], u64), String> {
    let (ctx, _) = soft_context()?;
    ctx.load(tid).ctx("LOAD")?;
    let st = ctx.wait_active(ACTIVE).ctx("waiting for ACTIVE")?;
    ensure!(st.tid == tid, "GET_STATE tid {} != {tid}", st.tid);
    let group = perf_group(tid)?;
    group.enable().ctx("perf enable")?;
    let before = sched_runtime(tid)?;
    // perf's window is its two reads, one ioctl either side of perfmon's.
    let p0 = group.read().ctx("perf read")?;
    ctx.start().ctx("START")?;
    std::thread::sleep(dur);
    ctx.stop().ctx("STOP")?;
    let p1 = group.read().ctx("perf read")?;
    let own = sched_runtime_since(tid)?.saturating_sub(before);
    group.disable().ctx("perf disable")?;
    let c = ctx.read().ctx("READ_PMDS")?;
    ctx.unload().ctx("UNLOAD")?;
    let pfm = [c.values[0], c.values[1], c.values[2]];
    let perf: [u64; 3] = std::array::from_fn(|i| p1[i].value.wrapping_sub(p0[i].value));
    diag(format!(
        "tid {tid}: pfm {pfm:?} perf {perf:?} times {}/{} runtime around START..STOP {own}",
        c.time_enabled, c.time_running
    ));
    Ok((pfm, perf, own))
}

/// task-clock may not exceed the thread's runtime from just before START
/// to just after STOP (`/proc/TID/schedstat` read as a lower bound before
/// START and as an upper bound after STOP: see [`sched_runtime_since`]).
/// perf's window is its reads just before START and just after STOP, so it
/// holds perfmon's with one ioctl more at each edge. On a thread running on
/// another CPU that ioctl and perfmon's each take an IPI: milliseconds on
/// the KASAN kernel under QEMU TCG, during which the thread runs on. Hence
/// task-clock may be below perf's by 15% + 5 ms. An ioctl is shorter than
/// the sleeping child's 5 ms nap, so each edge adds at most one of its
/// switches (or migrations) to perf's count: perf's counts may exceed
/// perfmon's by 2. pfm_test_accuracy measures where no such gap exists.
fn matches_perf(pfm: [u64; 3], perf: [u64; 3], own: u64) -> TestResult {
    ensure!(
        pfm[0] <= own,
        "task-clock {} above the thread's runtime over the window, {own}",
        pfm[0]
    );
    ensure!(
        pfm[0] as f64 >= perf[0] as f64 * 0.85 - 5_000_000.0,
        "task-clock {} below perf's {} by more than 15% + 5 ms",
        pfm[0],
        perf[0]
    );
    ensure!(
        pfm[1] <= perf[1] && perf[1] <= pfm[1] + 2,
        "context-switches {} vs perf {} (perf's window holds ours, +2 at most)",
        pfm[1],
        perf[1]
    );
    ensure!(
        pfm[2] <= perf[2] && perf[2] <= pfm[2] + 2,
        "cpu-migrations {} vs perf {} (perf's window holds ours, +2 at most)",
        pfm[2],
        perf[2]
    );
    Ok(())
}

fn running_child() -> TestResult {
    let child = Child::spawn("busy", &[])?;
    std::thread::sleep(Duration::from_millis(20));
    let (pfm, perf, own) = count_remote(child.pid(), Duration::from_millis(300))?;
    ensure!(
        pfm[0] >= 30_000_000,
        "busy child ran only {} ns of 300 ms",
        pfm[0]
    );
    matches_perf(pfm, perf, own)
}

fn sleeping_child() -> TestResult {
    let child = Child::spawn("sleep", &["5"])?;
    child.wait_state('S', Duration::from_secs(2))?;
    let (pfm, perf, own) = count_remote(child.pid(), Duration::from_millis(300))?;
    ensure!(
        pfm[1] >= 10,
        "{} context switches for 300 ms of 5 ms naps",
        pfm[1]
    );
    matches_perf(pfm, perf, own)
}

/// A thread's context switches so far, voluntary and not
/// (/proc/PID/status).
fn ctxt_switches(pid: u32) -> Result<u64, String> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).ctx(&path)?;
    let mut total = 0;
    for key in ["voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:"] {
        let v = text
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or_else(|| format!("{path}: no {key}"))?;
        total += v;
    }
    Ok(total)
}

fn long_sleeper() -> TestResult {
    let child = Child::spawn("sleep", &["1000000"])?;
    child.wait_state('S', Duration::from_secs(2))?;
    let (ctx, _) = soft_context()?;
    let before = ctxt_switches(child.pid())?;
    for i in 0..50 {
        ctx.load(child.pid()).ctx("LOAD")?;
        let st = ctx.state().ctx("GET_STATE")?;
        ensure!(
            st.is_active(),
            "cycle {i}: not ACTIVE when LOAD returned: {st:?}"
        );
        ctx.start().ctx("START")?;
        ctx.stop().ctx("STOP")?;
        ctx.unload().ctx("UNLOAD")?;
        // Freed on the module's reap workqueue, moments after.
        let freed = module::wait_for(Duration::from_secs(2), || {
            module::sysfs_num("attached_threads") == Some(0)
        });
        ensure!(freed, "cycle {i}: still attached 2 s after UNLOAD");
    }
    let after = ctxt_switches(child.pid())?;
    diag(format!(
        "50 cycles on a sleeping child: its context switches {before} -> {after}"
    ));
    ensure!(
        after == before,
        "the sleeper was woken: {} switches over 50 cycles",
        after - before
    );
    child
        .wait_state('S', Duration::from_secs(2))
        .map_err(|e| format!("after the cycles: {e}"))
}

fn stopped_child() -> TestResult {
    let child = Child::spawn("sleep", &["5"])?;
    child.wait_state('S', Duration::from_secs(2))?;
    child.signal(libc::SIGSTOP)?;
    child.wait_state('T', Duration::from_secs(2))?;
    let (ctx, _) = soft_context()?;
    match ctx.load(child.pid()) {
        Ok(()) => diag("LOAD on a stopped thread: succeeded"),
        Err(e) => {
            let _ = child.signal(libc::SIGCONT);
            return Err(format!(
                "LOAD on a stopped thread failed: {e} (documented errnos allow only success here)"
            ));
        }
    }
    let st = ctx.state().ctx("GET_STATE")?;
    if !st.is_active() {
        let _ = child.signal(libc::SIGCONT);
        return Err(format!("stopped, not ACTIVE when LOAD returned: {st:?}"));
    }
    child.signal(libc::SIGCONT)?;
    ctx.start().ctx("START")?;
    std::thread::sleep(Duration::from_millis(100));
    ctx.stop().ctx("STOP")?;
    let c = ctx.read().ctx("READ")?;
    diag(format!("after SIGCONT: {:?}", c.values));
    ensure!(c.values[1] > 0, "no context switch counted after SIGCONT");
    ctx.unload().ctx("UNLOAD")
}

/// Another thread of this process, sleeping and waking (four 1 ms naps
/// and 100 us spins per window): the counts are read while the thread is
/// blocked at each window's edge, so perf's counts and the thread's own
/// CPU clock are exact oracles (`pfm_guest::edges`). The old version
/// compared START..STOP with perf's enable..disable, two ioctls apart on a
/// running thread, with 15% + 5 ms of tolerance: too loose to see
/// task-clock losing time, and too tight for switch counts on a slow
/// kernel, where it failed now and then (issue 20).
fn other_thread() -> TestResult {
    let edges = edges::thread_edges(Workload::Sleep, 10)?;
    let v = Verdict::of(&edges);
    diag(format!("another thread: {}", v.describe()));
    ensure!(
        v.outside == 0,
        "task-clock outside the thread's own CPU time: {}",
        v.describe()
    );
    let (a, b) = (&edges[0], &edges[edges.len() - 1]);
    let d = |x: &[u64; 3], y: &[u64; 3], i: usize| y[i].wrapping_sub(x[i]);
    ensure!(
        d(&a.pfm, &b.pfm, 0) > 0 && d(&a.pfm, &b.pfm, 1) > 0,
        "no counts"
    );
    for (i, what) in [(1, "context-switches"), (2, "cpu-migrations")] {
        let (ours, perf) = (d(&a.pfm, &b.pfm, i), d(&a.perf, &b.perf, i));
        ensure!(ours == perf, "{what} {ours} vs perf {perf}");
    }
    Ok(())
}

fn double_attach() -> TestResult {
    let child = Child::spawn("sleep", &["5"])?;
    let a = Context::open().ctx("open A")?;
    let b = Context::open().ctx("open B")?;
    a.load(child.pid()).ctx("LOAD A")?;
    let e = errno_of(b.load(child.pid()));
    ensure!(
        e == Some(libc::EBUSY),
        "second LOAD on the same thread: {} (EBUSY expected)",
        name(e)
    );
    a.wait_active(ACTIVE).ctx("A ACTIVE")?;
    a.unload().ctx("UNLOAD A")?;
    // The thread is free again once A is unloaded (possibly lazily).
    let mut last = None;
    let ok = module::wait_for(Duration::from_secs(2), || {
        last = errno_of(b.load(child.pid()));
        last.is_none()
    });
    ensure!(ok, "LOAD B after UNLOAD A: {}", name(last));
    b.wait_active(ACTIVE).ctx("B ACTIVE")?;
    b.unload().ctx("UNLOAD B")
}

fn double_self() -> TestResult {
    let a = Context::open().ctx("open A")?;
    let b = Context::open().ctx("open B")?;
    a.load(0).ctx("LOAD A")?;
    let e = errno_of(b.load(0));
    a.unload().ctx("UNLOAD A")?;
    ensure!(
        e == Some(libc::EBUSY),
        "second self LOAD: {} (EBUSY expected)",
        name(e)
    );
    Ok(())
}

/// Runs the uid-1000 child against a root-owned sleeping child; returns its
/// report lines.
fn as_other_user() -> Result<String, String> {
    let target = Child::spawn("sleep", &["50"])?;
    let target_pid = target.pid().to_string();
    let probe = Child::spawn_with("attach-as-user", &["1000", &target_pid], true)?;
    let out = probe.output(Duration::from_secs(10))?;
    diag(format!(
        "uid 1000 child: {}",
        out.split_whitespace().collect::<Vec<_>>().join(" ")
    ));
    Ok(out)
}

fn field<'a>(out: &'a str, key: &str) -> Option<&'a str> {
    out.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

fn main() {
    pfm_guest::child::dispatch();
    let mut t = Tap::new(PLAN);
    pfm_guest::watchdog(Duration::from_secs(300));
    t.require("insmod perfmon.ko", module::insmod(&[]));
    t.run(
        "running child: attach, ACTIVE, counts match perf",
        running_child,
    );
    t.run(
        "sleeping child: attach, ACTIVE, counts match perf",
        sleeping_child,
    );
    t.run(
        "child in a long nanosleep: LOAD and UNLOAD act at once without waking it (50 cycles)",
        long_sleeper,
    );
    t.run(
        "stopped child: LOAD ok and ACTIVE while stopped, counts after SIGCONT",
        stopped_child,
    );
    t.run(
        "another thread of this process: attach and counts match perf",
        other_thread,
    );
    t.run(
        "second context on the same thread: EBUSY; free again after UNLOAD",
        double_attach,
    );
    t.run("second self-attach: EBUSY", double_self);
    t.run("kernel thread (kthreadd, pid 2): EPERM", || {
        let ctx = Context::open().ctx("open")?;
        let e = errno_of(ctx.load(2));
        ensure!(e == Some(libc::EPERM), "LOAD 2: {}", name(e));
        Ok(())
    });
    t.run("thread that does not exist: ESRCH", || {
        let mut gone = Child::spawn("sleeps", &["0"])?;
        gone.wait_timeout(Duration::from_secs(5))?;
        let ctx = Context::open().ctx("open")?;
        let e = errno_of(ctx.load(gone.pid()));
        ensure!(
            e == Some(libc::ESRCH),
            "LOAD of reaped pid {}: {}",
            gone.pid(),
            name(e)
        );
        Ok(())
    });
    // Last before the cleanup checks: the riskiest path (credentials).
    let other = if raw::geteuid() == 0 {
        Some(as_other_user())
    } else {
        None
    };
    match &other {
        None => {
            t.skip(
                "another user's thread: EACCES or EPERM",
                "not root: cannot create the other user",
            );
            t.skip(
                "unprivileged user can open /dev/perfmon and monitor itself",
                "not root",
            );
        }
        Some(Err(e)) => {
            t.fail("another user's thread: EACCES or EPERM", e);
            t.fail(
                "unprivileged user can open /dev/perfmon and monitor itself",
                e,
            );
        }
        Some(Ok(out)) => {
            let r = field(out, "load_other");
            t.result(
                "another user's thread: EACCES or EPERM",
                if matches!(r, Some("EACCES" | "EPERM")) {
                    Ok(())
                } else {
                    Err(format!("uid 1000 attaching to a root thread: {r:?}"))
                },
            );
            let (o, s) = (field(out, "open"), field(out, "load_self"));
            t.result(
                "unprivileged user can open /dev/perfmon and monitor itself",
                if o == Some("ok") && s == Some("ok") {
                    Ok(())
                } else {
                    Err(format!("open={o:?} load_self={s:?}"))
                },
            );
        }
    }
    t.run("no context left behind", || {
        module::wait_contexts(0, Duration::from_secs(5))
    });
    t.run("rmmod perfmon", module::rmmod);
    t.finish();
}
