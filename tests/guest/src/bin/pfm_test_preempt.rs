//! pfm_test_preempt: a thread's counted running time is never more than
//! the scheduler accounts it, when a fold runs between a wake-up that
//! preempts it and its switch-out.
//!
//! A wake-up onto a CPU (`wakeup_preempt`) accounts the running thread
//! (`update_curr`) and, when it sets need_resched, asks `__schedule` to
//! skip its own clock update (`rq_clock_skip_update`): the thread's slice
//! then ends at that wake-up, and the time it runs until the switch is
//! charged to no one. A fold in between — a timer that samples task-clock
//! (soft model), the event-set switch timer (hardware model), a read's IPI
//! — that counted the thread's live runtime (`sum_exec_runtime` plus the
//! time since `exec_start`) counted time the scheduler never accounts, and
//! the switch-out's slice end, below it, could not take it back.
//!
//! Thread A, monitored by another thread of this program, spins on CPU 0
//! while thread B, on the same CPU, naps 50 us at a time (each wake-up
//! preempts A) and the tool, on CPU 1, reads A's context in a loop (each
//! read an IPI fold on CPU 0). After each round A blocks; its
//! `/proc/self/task/TID/schedstat` (the scheduler's `sum_exec_runtime`,
//! read while it is blocked, when nothing moves it) is the oracle: the
//! counted task-clock and time_running since START equal its growth
//! exactly.
//!
//! 1. soft: task-clock sampled every 20 us into a buffer (the soft model's
//!    clock timer) and task-clock counted;
//! 2. intel_arch_sim: two event sets switched every 100 us of running time
//!    (the multiplexing timer), user cycles in each; time_running and the
//!    sets' running times.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use perfmon::abi::*;
use perfmon::Context;
use pfm_guest::edges::thread_cpu_ns;
use pfm_guest::tap::diag;
use pfm_guest::{ensure, module, ResultExt, Tap, TestResult};

const PLAN: usize = 6;
const MS: u64 = 1_000_000;
/// Rounds of A's spin, and its CPU time per round.
const ROUNDS: usize = 6;
const SPIN_NS: u64 = 40 * MS;

/// The scheduler's runtime of thread `tid` of this process (ns).
fn schedstat(tid: u32) -> Result<u64, String> {
    let path = format!("/proc/self/task/{tid}/schedstat");
    let s = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
    s.split_whitespace()
        .next()
        .and_then(|w| w.parse().ok())
        .ok_or_else(|| format!("{path}: {s:?}"))
}

fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is valid for two ints.
    ensure!(unsafe { libc::pipe(fds.as_mut_ptr()) } == 0, "pipe failed");
    // SAFETY: Two new descriptors, ours alone.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn put(fd: &OwnedFd, v: u64) -> TestResult {
    let b = v.to_ne_bytes();
    // SAFETY: 8 valid bytes.
    let n = unsafe { libc::write(fd.as_raw_fd(), b.as_ptr().cast(), 8) };
    ensure!(n == 8, "pipe write: {n}");
    Ok(())
}

fn get(fd: &OwnedFd) -> Option<u64> {
    let mut b = [0u8; 8];
    // SAFETY: 8 valid bytes.
    let n = unsafe { libc::read(fd.as_raw_fd(), b.as_mut_ptr().cast(), 8) };
    (n == 8).then(|| u64::from_ne_bytes(b))
}

/// Thread A: pinned to CPU 0, reports its tid, then per `go` spins
/// [`SPIN_NS`] of its own CPU time and reports; 0 ends it.
fn spinner(go: OwnedFd, report: OwnedFd) {
    let _ = perfmon::process::set_affinity(0, &[0]);
    let _ = put(&report, u64::from(perfmon::process::gettid()));
    while let Some(v) = get(&go) {
        if v == 0 {
            return;
        }
        let end = thread_cpu_ns() + SPIN_NS;
        while thread_cpu_ns() < end {
            for _ in 0..1000 {
                std::hint::spin_loop();
            }
        }
        let _ = put(&report, 1);
    }
}

/// Thread B: pinned to CPU 0, naps 50 us at a time until `stop`.
fn waker(stop: Arc<AtomicBool>) {
    let _ = perfmon::process::set_affinity(0, &[0]);
    let nap = libc::timespec {
        tv_sec: 0,
        tv_nsec: 50_000,
    };
    while !stop.load(Ordering::Relaxed) {
        // SAFETY: `nap` is valid.
        unsafe { libc::nanosleep(&nap, std::ptr::null_mut()) };
    }
}

/// Waits until thread `tid` sleeps.
fn wait_blocked(tid: u32) -> TestResult {
    let deadline = std::time::Instant::now() + pfm_guest::scaled(Duration::from_secs(20));
    while std::time::Instant::now() < deadline {
        if pfm_guest::child::proc_state(tid) == Some('S') {
            return Ok(());
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Err(format!("thread {tid} did not block within 20 s"))
}

/// What a case reads of A's context at a blocked edge: the counted
/// running time, and the task-clock or per-set times to hold to it.
type Reading = (u64, Vec<u64>);

/// Runs A's rounds under `ctx` (programmed, not loaded), the tool reading
/// it in a loop while A spins; after each round, `read`'s figures since
/// START against A's schedstat growth.
fn rounds(ctx: &Context, read: impl Fn(&Context) -> Result<Reading, String>) -> TestResult {
    let cpus = perfmon::process::online_cpus();
    ensure!(cpus >= 2, "{cpus} CPU: the tool must run beside A's CPU");
    perfmon::process::set_affinity(0, &[1]).ctx("sched_setaffinity")?;
    let (go_r, go_w) = pipe()?;
    let (rep_r, rep_w) = pipe()?;
    let stop = Arc::new(AtomicBool::new(false));
    let a = std::thread::spawn(move || spinner(go_r, rep_w));
    let b = {
        let stop = stop.clone();
        std::thread::spawn(move || waker(stop))
    };
    let result = (|| {
        let tid = get(&rep_r).ok_or("no tid from A")? as u32;
        wait_blocked(tid)?;
        ctx.load(tid).ctx("LOAD")?;
        let s0 = schedstat(tid)?;
        ctx.start().ctx("START")?;
        let mut worst = 0i64;
        for round in 0..ROUNDS {
            put(&go_w, 1)?;
            // IPI folds while A spins, until it reports.
            let mut reads = 0u64;
            loop {
                let mut p = libc::pollfd {
                    fd: rep_r.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: One valid pollfd.
                if unsafe { libc::poll(&mut p, 1, 0) } == 1 {
                    break;
                }
                let _ = ctx.read_values(0b1);
                reads += 1;
            }
            get(&rep_r).ok_or("no report from A")?;
            wait_blocked(tid)?;
            let grown = schedstat(tid)? - s0;
            let (running, others) = read(ctx)?;
            let over = running as i64 - grown as i64;
            worst = worst.max(over);
            diag(format!(
                "round {round}: schedstat grew {grown} ns; counted running {running}, {others:?}; {reads} reads"
            ));
            ensure!(
                running == grown,
                "round {round}: counted {running} ns of running time, the scheduler accounted {grown} ({over:+} ns)"
            );
            ensure!(
                others.iter().sum::<u64>() == grown,
                "round {round}: {others:?} do not add up to the scheduler's {grown} ns"
            );
        }
        ctx.stop().ctx("STOP")?;
        ctx.unload().ctx("UNLOAD")?;
        diag(format!("worst excess {worst} ns"));
        Ok(())
    })();
    stop.store(true, Ordering::Relaxed);
    let _ = put(&go_w, 0);
    let _ = a.join();
    let _ = b.join();
    result
}

fn read_pmd(ctx: &Context, set: u16, pmd: u16) -> Result<u64, String> {
    let mut r = [PfmPmd {
        reg_num: pmd,
        reg_set: set,
        ..Default::default()
    }];
    ctx.read_pmds(&mut r).ctx("READ_PMDS")?;
    Ok(r[0].reg_value)
}

/// Case 1.
fn soft_sampled_clock() -> TestResult {
    let ctx = Context::open().ctx("open")?;
    let period = 20_000u64;
    let mut pmcs = [0u16, 1].map(|n| PfmPmc {
        reg_num: n,
        reg_value: PFM_SOFT_EV_TASK_CLOCK,
        ..Default::default()
    });
    ctx.write_pmcs(&mut pmcs).ctx("WRITE_PMCS")?;
    let mut pmds = [
        PfmPmd {
            reg_num: 0,
            reg_value: period.wrapping_neg(),
            reg_short_reset: period.wrapping_neg(),
            reg_long_reset: period.wrapping_neg(),
            ..Default::default()
        },
        PfmPmd {
            reg_num: 1,
            ..Default::default()
        },
    ];
    ctx.write_pmds(&mut pmds).ctx("WRITE_PMDS")?;
    ctx.setup_sampling(8, &[(0, 0)], true, 0)
        .ctx("SMPL_SETUP")?;
    let _buf = ctx.map_samples(8).ctx("mmap of the buffer")?;
    rounds(&ctx, |ctx| {
        let clock = read_pmd(ctx, 0, 1)?;
        let running = ctx.read_values(0b10).ctx("READ_VALUES")?.time_running;
        Ok((running, vec![clock]))
    })
}

/// Case 2.
fn sim_multiplexed() -> TestResult {
    const CYCLES_USR: u64 = 0x3c | 1 << 16;
    let ctx = Context::open().ctx("open")?;
    let mut sets = [0u16, 1].map(|id| PfmSetdesc {
        set_id: id,
        set_flags: PFM_SETFL_TIME_SWITCH,
        set_timeout: 100_000,
        ..Default::default()
    });
    ctx.create_sets(&mut sets).ctx("CREATE_SETS")?;
    for set in 0..2u16 {
        let mut pmcs = [PfmPmc {
            reg_num: 0,
            reg_set: set,
            reg_value: CYCLES_USR,
            ..Default::default()
        }];
        ctx.write_pmcs(&mut pmcs)
            .ctx(&format!("WRITE_PMCS set {set}"))?;
        let mut pmds = [PfmPmd {
            reg_num: 0,
            reg_set: set,
            ..Default::default()
        }];
        ctx.write_pmds(&mut pmds)
            .ctx(&format!("WRITE_PMDS set {set}"))?;
    }
    rounds(&ctx, |ctx| {
        let running = ctx.read_values(0b1).ctx("READ_VALUES")?.time_running;
        let infos = ctx.sets_info(&[0, 1]).ctx("GETINFO_SETS")?;
        Ok((running, infos.iter().map(|i| i.set_time_running).collect()))
    })
}

fn main() {
    pfm_guest::child::dispatch();
    let mut t = Tap::new(PLAN);
    pfm_guest::watchdog(Duration::from_secs(300));
    t.require("insmod perfmon.ko", module::insmod(&[]));
    t.run(
        "soft, task-clock sampled every 20 us, a waker on the same CPU, reads by IPI: task-clock and time_running equal the scheduler's runtime at each blocked edge",
        soft_sampled_clock,
    );
    t.run("rmmod perfmon", module::rmmod);
    t.require(
        "insmod perfmon.ko pmu=intel_arch_sim",
        module::insmod(&["pmu=intel_arch_sim"]),
    );
    t.run(
        "intel_arch_sim, two sets switched every 100 us, a waker on the same CPU, reads by IPI: time_running and the sets' times equal the scheduler's runtime",
        sim_multiplexed,
    );
    t.run("rmmod perfmon", module::rmmod);
    t.finish();
}
