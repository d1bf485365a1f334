//! pfm_test_reads: `PFM_IOC_READ_VALUES` on a context without a mapped page
//! reads the soft counters without folding them (the stored values plus
//! the runtime not yet folded); it must give what a fold gives. Checked
//! against `READ_PMDS`, which folds, and against what the thread measures
//! itself (`CLOCK_THREAD_CPUTIME_ID`), which the module cannot influence:
//!
//! - self-monitoring, counting: READ_VALUES <= READ_PMDS <= the next
//!   READ_VALUES for every PMD, and task-clock since START within the
//!   thread's own clock read around START and around the read, exactly
//!   (both are the scheduler's runtime); 20,000 rounds with naps, yields
//!   and moves between CPUs;
//! - stopped, and a remote thread that sleeps: READ_VALUES equals
//!   READ_PMDS (nothing pending) or, while the remote thread runs, stays
//!   between the two reads around it;
//! - a task-clock PMD crossing 2^64: the read that would cross folds
//!   instead, and returns the value the overflow reset it to plus the
//!   excess, as READ_PMDS does;
//! - preempting wake-ups from another CPU (which end the thread's
//!   scheduler slice at the wake-up while the thread runs on until the
//!   rescheduling IPI): no READ_VALUES below the one before it.

use std::time::Duration;

use perfmon::abi::PfmPmd;
use perfmon::Context;
use pfm_guest::edges::thread_cpu_ns;
use pfm_guest::tap::diag;
use pfm_guest::{ensure, module, raw, soft_context, work, ResultExt, Tap, TestResult};

const PLAN: usize = 8;
/// PMDs 0, 1, 2: task-clock, context-switches, cpu-migrations.
const MASK: u64 = 0b111;
const ROUNDS: usize = 20_000;

/// READ_PMDS of PMDs 0..3: the values (this call folds).
fn read_pmds(ctx: &Context) -> Result<[u64; 3], String> {
    let mut regs: Vec<PfmPmd> = (0..3)
        .map(|i| PfmPmd {
            reg_num: i,
            ..Default::default()
        })
        .collect();
    ctx.read_pmds(&mut regs).ctx("READ_PMDS")?;
    Ok([regs[0].reg_value, regs[1].reg_value, regs[2].reg_value])
}

/// READ_VALUES of PMDs 0..3, and its times.
fn read_values(ctx: &Context) -> Result<([u64; 3], u64, u64), String> {
    let c = ctx.read_values(MASK).ctx("READ_VALUES")?;
    ensure!(c.values.len() == 3, "{} values for 3 PMDs", c.values.len());
    Ok((
        [c.values[0], c.values[1], c.values[2]],
        c.time_enabled,
        c.time_running,
    ))
}

/// Between two rounds, sometimes: a 50 us nap, a yield, a move to the
/// other CPU.
fn perturb(i: usize, cpus: usize) -> TestResult {
    if i % 97 == 0 {
        std::thread::sleep(Duration::from_micros(50));
    }
    if i % 31 == 0 {
        raw::sched_yield();
    }
    if cpus > 1 && i % 1009 == 0 {
        perfmon::process::set_affinity(0, &[(i / 1009) % 2]).ctx("sched_setaffinity")?;
    }
    Ok(())
}

fn self_counting() -> TestResult {
    let cpus = perfmon::process::online_cpus();
    let (ctx, _) = soft_context()?;
    ctx.load(0).ctx("LOAD")?;
    let s0 = thread_cpu_ns();
    ctx.start().ctx("START")?;
    let s1 = thread_cpu_ns();
    let mut last = ([0u64; 3], 0u64);
    let (mut below, mut above) = (0u64, 0u64);
    for i in 0..ROUNDS {
        let t0 = thread_cpu_ns();
        let (a, enabled, running) = read_values(&ctx)?;
        let t1 = thread_cpu_ns();
        let p = read_pmds(&ctx)?;
        let (c, _, _) = read_values(&ctx)?;
        for k in 0..3 {
            ensure!(
                last.0[k] <= a[k] && a[k] <= p[k] && p[k] <= c[k],
                "round {i}, PMD {k}: previous READ_VALUES {}, READ_VALUES {}, READ_PMDS {}, READ_VALUES {}",
                last.0[k],
                a[k],
                p[k],
                c[k]
            );
        }
        // task-clock ran from START (between s0 and s1) to the read
        // (between t0 and t1), on the clock CLOCK_THREAD_CPUTIME_ID reads.
        ensure!(
            t0.saturating_sub(s1) <= a[0] && a[0] <= t1 - s0,
            "round {i}: task-clock {} outside the thread's own [{}, {}]",
            a[0],
            t0.saturating_sub(s1),
            t1 - s0
        );
        below = below.max(a[0] - t0.saturating_sub(s1));
        above = above.max((t1 - s0) - a[0]);
        ensure!(
            running == a[0] && enabled >= running && running >= last.1,
            "round {i}: time_running {running} (task-clock {}, before {}), time_enabled {enabled}",
            a[0],
            last.1
        );
        last = (c, running);
        perturb(i, cpus)?;
    }
    ctx.stop().ctx("STOP")?;
    diag(format!(
        "{ROUNDS} rounds: {} switches, {} migrations; task-clock at most {below} ns above its lower bound, {above} ns below its upper",
        last.0[1], last.0[2]
    ));
    ensure!(
        last.0[1] > 0,
        "no context switch counted in {ROUNDS} rounds"
    );
    Ok(())
}

fn stopped_equal() -> TestResult {
    let (ctx, _) = soft_context()?;
    ctx.load(0).ctx("LOAD")?;
    ctx.start().ctx("START")?;
    work::spin(Duration::from_millis(2));
    std::thread::sleep(Duration::from_millis(1));
    ctx.stop().ctx("STOP")?;
    for i in 0..1000 {
        let (a, enabled, running) = read_values(&ctx)?;
        let p = read_pmds(&ctx)?;
        ensure!(
            a == p,
            "read {i} after STOP: READ_VALUES {a:?}, READ_PMDS {p:?}"
        );
        ensure!(
            running == a[0] && enabled >= running,
            "read {i}: times {enabled}/{running}, task-clock {}",
            a[0]
        );
        if i % 100 == 0 {
            raw::sched_yield();
        }
    }
    Ok(())
}

fn remote_sleeper() -> TestResult {
    let child = pfm_guest::child::Child::spawn("sleep", &["1"])?;
    let (ctx, _) = soft_context()?;
    ctx.load(child.pid()).ctx("LOAD")?;
    ctx.wait_active(Duration::from_secs(5)).ctx("ACTIVE")?;
    ctx.start().ctx("START")?;
    let mut equal = 0;
    let mut last = [0u64; 3];
    for i in 0..5000 {
        let (a, _, _) = read_values(&ctx)?;
        let p = read_pmds(&ctx)?;
        let (c, _, _) = read_values(&ctx)?;
        for k in 0..3 {
            ensure!(
                last[k] <= a[k] && a[k] <= p[k] && p[k] <= c[k],
                "read {i}, PMD {k}: previous {}, READ_VALUES {}, READ_PMDS {}, READ_VALUES {}",
                last[k],
                a[k],
                p[k],
                c[k]
            );
        }
        equal += usize::from(a == p && p == c);
        last = c;
        if i % 50 == 0 {
            std::thread::sleep(Duration::from_micros(300));
        }
    }
    ctx.unload().ctx("UNLOAD")?;
    diag(format!(
        "5000 reads of a sleeping thread: {equal} with all three equal; {} switches",
        last[1]
    ));
    ensure!(equal > 0, "the thread never seemed asleep across a read");
    ensure!(last[1] > 0, "no switch of the sleeping thread counted");
    Ok(())
}

fn crossing_2_64() -> TestResult {
    const PERIOD: u64 = 10_000_000;
    let mut ctx = Context::open().ctx("open")?;
    let ev = ctx
        .info()
        .and_then(|pmu| pmu.event("task-clock"))
        .ctx("task-clock")?;
    ctx.program(&[ev]).ctx("program")?;
    let reset = 0u64.wrapping_sub(PERIOD);
    let mut p = [PfmPmd {
        reg_num: 0,
        reg_value: 0u64.wrapping_sub(1_000_000),
        reg_short_reset: reset,
        reg_long_reset: reset,
        ..Default::default()
    }];
    ctx.write_pmds(&mut p).ctx("WRITE_PMDS")?;
    ctx.load(0).ctx("LOAD")?;
    ctx.start().ctx("START")?;
    // 1 ms of the thread's CPU time to the crossing; run 3 ms past it (by
    // its own clock: a wall-clock spin on a loaded host may run less).
    let t0 = thread_cpu_ns();
    while thread_cpu_ns() - t0 < 4_000_000 {
        work::spin(Duration::from_millis(1));
    }
    let c = ctx.read_values(1).ctx("READ_VALUES")?;
    let mut r = [PfmPmd {
        reg_num: 0,
        ..Default::default()
    }];
    ctx.read_pmds(&mut r).ctx("READ_PMDS")?;
    ctx.stop().ctx("STOP")?;
    let (v, after) = (c.values[0], r[0].reg_value);
    diag(format!(
        "after the crossing: READ_VALUES {v:#x}, READ_PMDS {after:#x}, reset {reset:#x}, last reset {:#x}",
        r[0].reg_last_reset_val
    ));
    ensure!(
        v >= reset && v <= after && r[0].reg_last_reset_val == reset,
        "READ_VALUES {v:#x} is not the reset value {reset:#x} plus the excess (READ_PMDS {after:#x})"
    );
    Ok(())
}

/// The reader pinned to CPU 0 reads its own task-clock for 2 s; a thread
/// on CPU 1 keeps waking a sleeper pinned to CPU 0. A read between such a
/// wake-up and the switch it causes sees the thread's runtime past the
/// slice's end as the scheduler then accounts it: the read must hold its
/// value (a version that did not store it went back).
fn preempting_wakeups() -> TestResult {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    if perfmon::process::online_cpus() < 2 {
        diag("one CPU: no wake-up from another CPU; the case is vacuous");
        return Ok(());
    }
    let (wake, woken) = std::sync::mpsc::channel::<()>();
    let sleeper = std::thread::spawn(move || -> TestResult {
        perfmon::process::set_affinity(0, &[0]).ctx("sched_setaffinity")?;
        while woken.recv().is_ok() {}
        Ok(())
    });
    let stop = Arc::new(AtomicBool::new(false));
    let waker = {
        let stop = stop.clone();
        std::thread::spawn(move || -> Result<u64, String> {
            perfmon::process::set_affinity(0, &[1]).ctx("sched_setaffinity")?;
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let _ = wake.send(());
                n += 1;
                work::spin(Duration::from_micros(20));
            }
            Ok(n)
        })
    };
    perfmon::process::set_affinity(0, &[0]).ctx("sched_setaffinity")?;
    let res = (|| -> Result<(u64, u64), String> {
        let (ctx, _) = soft_context()?;
        ctx.load(0).ctx("LOAD")?;
        ctx.start().ctx("START")?;
        let end = std::time::Instant::now() + Duration::from_secs(2);
        let (mut last, mut reads) = ([0u64; 3], 0u64);
        while std::time::Instant::now() < end {
            let (v, _, running) = read_values(&ctx)?;
            for k in 0..3 {
                ensure!(
                    v[k] >= last[k],
                    "read {reads}, PMD {k}: {} after {} (time_running {running})",
                    v[k],
                    last[k]
                );
            }
            last = v;
            reads += 1;
        }
        ctx.stop().ctx("STOP")?;
        Ok((reads, last[1]))
    })();
    stop.store(true, Ordering::Relaxed);
    let wakes = waker.join().map_err(|_| "waker panicked")??;
    sleeper.join().map_err(|_| "sleeper panicked")??;
    let _ = perfmon::process::set_affinity(0, &[0, 1]);
    let (reads, switches) = res?;
    diag(format!(
        "{reads} reads, {wakes} wake-ups, {switches} switches of the reader"
    ));
    ensure!(switches > 0, "the wake-ups never switched the reader out");
    Ok(())
}

fn main() {
    pfm_guest::child::dispatch();
    let mut t = Tap::new(PLAN);
    pfm_guest::watchdog(Duration::from_secs(300));
    t.require("insmod perfmon.ko", module::insmod(&[]));
    t.run(
        "self, counting: READ_VALUES <= READ_PMDS <= READ_VALUES, task-clock within the thread's own clock (20,000 rounds)",
        self_counting,
    );
    t.run(
        "stopped: READ_VALUES equals READ_PMDS (1,000 reads)",
        stopped_equal,
    );
    t.run(
        "a sleeping remote thread: READ_VALUES <= READ_PMDS <= READ_VALUES (5,000 reads)",
        remote_sleeper,
    );
    t.run(
        "task-clock crossing 2^64: READ_VALUES folds, the reset value plus the excess",
        crossing_2_64,
    );
    t.run(
        "preempting wake-ups from the other CPU: READ_VALUES never goes back (2 s)",
        preempting_wakeups,
    );
    t.run("no live context left (sysfs)", || {
        module::wait_contexts(0, Duration::from_secs(2))
    });
    t.run("rmmod perfmon", module::rmmod);
    t.finish();
}
