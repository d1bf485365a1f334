//! pfm_test_mmap: reads without a system call, from the context's mapped
//! counter page (Documentation/perfmon.rst, "Reading without a system
//! call"), on the soft model.
//!
//! - mmap's errnos: a length other than one page or an offset other than 0
//!   EINVAL, writable or executable EPERM; read-only for good (mprotect
//!   EACCES, mremap growth EFAULT).
//! - Mapped before LOAD: the page says UNLOADED, then LOADED and counting.
//! - Sandwich: a thread reading its own task-clock, context-switches and
//!   cpu-migrations, `READ_VALUES` ≤ page ≤ the next `READ_VALUES`, every
//!   time, over `PFM_MMAP_READS` (default 1,000,000) reads interleaved with
//!   sleeps, yields and moves between CPU 0 and 1.
//! - Agreement: where the page was not updated since the ioctl before it
//!   (the thread was not switched), context-switches and cpu-migrations
//!   from the page equal the ioctl's; task-clock from the page lies within
//!   the thread's own `CLOCK_THREAD_CPUTIME_ID` read around it, below by at
//!   most 1 us + one switch's cost (`PER_SWITCH_NS`; each update takes the
//!   runtime and the TSC at most 1 us apart, so 0 is what runs show), above
//!   by at most 1 us more than `READ_VALUES` itself is above the clock read
//!   right after it (the scheduler's runtime, which both read, has been
//!   seen 0.3 ms ahead of the thread's clock under host load).
//! - Another thread, and a forked child, read values as of the last
//!   update, flagged not live.
//! - Torture: a second thread hammering STOP/START, then WRITE_PMDS, while
//!   the owner reads: nothing goes backwards while counting, no torn
//!   update.
//! - close while mapped: the mapping holds the file, so the context lives
//!   and counts on until munmap, as with any mapped file, and rmmod is
//!   refused meanwhile; rmmod.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use perfmon::abi::{self, PfmPmd};
use perfmon::{Context, CounterPage, MappedReading};
use pfm_guest::edges::thread_cpu_ns;
use pfm_guest::raw::{self, FileMap, PAGE};
use pfm_guest::tap::diag;
use pfm_guest::{ensure, module, soft_context, ResultExt, Tap, TestResult, PER_SWITCH_NS};

const PLAN: usize = 12;
/// PMDs 0..2: task-clock, context-switches, cpu-migrations.
const MASK: u64 = 0b111;

fn reads() -> usize {
    std::env::var("PFM_MMAP_READS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

/// A context counting the calling thread, and its page.
fn self_counting() -> Result<(Context, CounterPage), String> {
    let (ctx, _) = soft_context()?;
    let page = ctx.map_counter_page().ctx("mmap")?;
    ctx.load(0).ctx("LOAD")?;
    ctx.start().ctx("START")?;
    Ok((ctx, page))
}

fn read_page(page: &CounterPage) -> Result<MappedReading, String> {
    page.read(u64::MAX)
        .ok_or_else(|| "no consistent read of the page".to_string())
}

fn errnos() -> TestResult {
    let ctx = Context::open().ctx("open")?;
    let fd = raw::fd_of(&ctx);
    let (ro, sh, pr) = (libc::PROT_READ, libc::MAP_SHARED, libc::MAP_PRIVATE);
    let cases: [(&str, usize, i32, i32, i64, i32); 5] = [
        ("two pages", 2 * PAGE, ro, sh, 0, libc::EINVAL),
        ("offset one page", PAGE, ro, sh, PAGE as i64, libc::EINVAL),
        (
            "PROT_WRITE shared",
            PAGE,
            ro | libc::PROT_WRITE,
            sh,
            0,
            libc::EPERM,
        ),
        (
            "PROT_WRITE private",
            PAGE,
            ro | libc::PROT_WRITE,
            pr,
            0,
            libc::EPERM,
        ),
        ("PROT_EXEC", PAGE, ro | libc::PROT_EXEC, sh, 0, libc::EPERM),
    ];
    for (name, len, prot, flags, off, want) in cases {
        match FileMap::new(fd, len, prot, flags, off) {
            Err(e) if e == want => {}
            Err(e) => return Err(format!("{name}: errno {e}, expected {want}")),
            Ok(_) => return Err(format!("{name}: mapped, expected errno {want}")),
        }
    }
    let m = FileMap::new(fd, PAGE, ro, sh, 0).map_err(|e| format!("one page: errno {e}"))?;
    ensure!(
        m.read_u32(0) == abi::PFM_PAGE_VERSION,
        "version {}",
        m.read_u32(0)
    );
    let e = m.protect(ro | libc::PROT_WRITE);
    ensure!(
        e == Err(libc::EACCES),
        "mprotect(PROT_WRITE): {e:?}, expected EACCES"
    );
    let e = m.try_grow();
    ensure!(
        e == Err(libc::EFAULT),
        "mremap growth: {e:?}, expected EFAULT"
    );
    let p = FileMap::new(fd, PAGE, ro, pr, 0).map_err(|e| format!("MAP_PRIVATE: errno {e}"))?;
    ensure!(p.read_u32(4) == m.read_u32(4), "two mappings, two pages");
    Ok(())
}

fn before_and_after_load() -> TestResult {
    let (ctx, _) = soft_context()?;
    let page = ctx.map_counter_page().ctx("mmap before LOAD")?;
    let r = read_page(&page)?;
    ensure!(
        r.state() == abi::PFM_STATE_UNLOADED && !r.counting() && !r.live(),
        "before LOAD: {r:?}"
    );
    ctx.load(0).ctx("LOAD")?;
    let r = read_page(&page)?;
    ensure!(
        r.state() == abi::PFM_STATE_LOADED && !r.counting(),
        "after LOAD: {r:?}"
    );
    ctx.start().ctx("START")?;
    let r = read_page(&page)?;
    ensure!(r.counting() && r.thread_running(), "after START: {r:?}");
    ensure!(
        r.live(),
        "the monitored thread's own read is not live: {r:?}"
    );
    let late = ctx.map_counter_page().ctx("mmap after LOAD")?;
    ensure!(late.seq() == page.seq(), "two mappings disagree");
    ctx.unload().ctx("UNLOAD")?;
    let r = read_page(&page)?;
    ensure!(
        r.state() == abi::PFM_STATE_UNLOADED && !r.counting(),
        "after UNLOAD: {r:?}"
    );
    Ok(())
}

/// What the sandwich loop saw.
#[derive(Default, Debug)]
struct Sandwich {
    reads: usize,
    live: usize,
    /// Reads with no page update since the ioctl before them.
    quiet: usize,
    /// The largest amount by which the page's task-clock fell below the
    /// thread's own clock (ns), and by which it exceeded it.
    max_below: u64,
    max_above: u64,
    switches: u64,
    migrations: u64,
    reports: usize,
    /// The largest amount by which READ_VALUES' task-clock exceeded the
    /// thread's own clock read right after it (ns).
    ioctl_above: u64,
    /// The largest excess of the page over the thread's clock beyond
    /// READ_VALUES' in the same round (ns).
    max_extra: i64,
}

/// Between two reads, sometimes: a 50 us nap, a yield, a move to the
/// other CPU.
fn perturb(i: usize, cpus: usize) -> Result<(), String> {
    if i % 97 == 0 {
        std::thread::sleep(Duration::from_micros(50));
    }
    if i % 31 == 0 {
        raw::sched_yield();
    }
    if cpus > 1 && i % 1009 == 0 {
        let cpu = (i / 1009) % 2;
        perfmon::process::set_affinity(0, &[cpu]).ctx("sched_setaffinity")?;
    }
    Ok(())
}

/// One sandwich: ioctl, page between two reads of the thread's own clock,
/// ioctl; checked and tallied into `s`.
fn one_read(ctx: &Context, page: &CounterPage, own0: (u64, u64), s: &mut Sandwich) -> TestResult {
    let seq = page.seq();
    let a = ctx.read_values(MASK).ctx("READ_VALUES")?;
    let t1 = thread_cpu_ns();
    let b = read_page(page)?;
    let t2 = thread_cpu_ns();
    // The ioctl updates the page once; a switch anywhere adds two more.
    let quiet = page.seq().wrapping_sub(seq) == 2;
    let c = ctx.read_values(MASK).ctx("READ_VALUES")?;
    let t3 = thread_cpu_ns();
    // How far READ_VALUES itself is above the thread's clock read after it.
    let ioctl_above = c.values[0].saturating_sub(t3.saturating_sub(own0.0));
    s.ioctl_above = s.ioctl_above.max(ioctl_above);
    let bv = [b.value(0), b.value(1), b.value(2)];
    for i in 0..3 {
        ensure!(
            a.values[i] <= bv[i] && bv[i] <= c.values[i],
            "read {}: PMD {i}: ioctl {} page {} ioctl {} ({b:?})",
            s.reads,
            a.values[i],
            bv[i],
            c.values[i]
        );
    }
    s.reads += 1;
    s.live += usize::from(b.live());
    if quiet {
        s.quiet += 1;
        ensure!(
            bv[1] == a.values[1] && bv[2] == a.values[2],
            "no switch, yet the page's switches/migrations {:?} differ from the ioctl's {:?}",
            &bv[1..],
            &a.values[1..]
        );
    }
    if b.live() {
        // own clock at START lies in [own0.0, own0.1].
        let (lo, hi) = (t1.saturating_sub(own0.1), t2.saturating_sub(own0.0));
        if lo.saturating_sub(bv[0]) > 100_000 && s.reports < 5 {
            s.reports += 1;
            diag(format!(
                "deficit: read {} a {:?} b {bv:?} c {:?} own [{lo}, {hi}] seq+{} {b:?}",
                s.reads,
                a.values,
                c.values,
                page.seq().wrapping_sub(seq)
            ));
        }
        s.max_below = s.max_below.max(lo.saturating_sub(bv[0]));
        s.max_above = s.max_above.max(bv[0].saturating_sub(hi));
        // The page's excess beyond what READ_VALUES shows in the same
        // round (whose window ends later, at t3).
        let extra = bv[0].saturating_sub(hi) as i64 - ioctl_above as i64 - (t3 - t2) as i64;
        s.max_extra = s.max_extra.max(extra);
    }
    (s.switches, s.migrations) = (c.values[1], c.values[2]);
    Ok(())
}

fn sandwich() -> Result<Sandwich, String> {
    let (ctx, _) = soft_context()?;
    let page = ctx.map_counter_page().ctx("mmap")?;
    ctx.load(0).ctx("LOAD")?;
    let s0 = thread_cpu_ns();
    ctx.start().ctx("START")?;
    let own0 = (s0, thread_cpu_ns());
    let cpus = perfmon::process::online_cpus();
    let mut s = Sandwich::default();
    let started = Instant::now();
    for i in 0..reads() {
        perturb(i, cpus)?;
        one_read(&ctx, &page, own0, &mut s)?;
    }
    let _ = perfmon::process::set_affinity(0, &(0..cpus).collect::<Vec<_>>());
    diag(format!("sandwich: {s:?} in {:?}", started.elapsed()));
    Ok(s)
}

fn sandwich_checks(t: &mut Tap) {
    let names = [
        "sandwich: READ_VALUES <= page <= next READ_VALUES, every read",
        "agreement: switches and migrations from the page equal the ioctl's between switches",
        "task-clock from the page within the thread's own CPU time (below by <= 1 us + one switch, above by <= READ_VALUES' own excess + 1 us)",
    ];
    match sandwich() {
        Err(e) => {
            for n in names {
                t.fail(n, &e);
            }
        }
        Ok(s) => {
            let live_enough = s.live * 2 > s.reads;
            t.result(
                names[0],
                if live_enough {
                    Ok(())
                } else {
                    Err(format!("only {} of {} reads live", s.live, s.reads))
                },
            );
            t.result(
                names[1],
                if s.quiet > 0 && s.switches > 0 && s.migrations > 0 {
                    Ok(())
                } else {
                    Err(format!("nothing to judge: {s:?}"))
                },
            );
            // Below: the page's own error. Above: the scheduler's runtime
            // (what READ_VALUES reads too) can run ahead of the thread's
            // CPU clock read around it under load; the page may not add to
            // that by more than 1 us.
            let tol = 1_000 + PER_SWITCH_NS;
            t.result(
                names[2],
                if s.max_below <= tol && s.max_extra <= 1_000 {
                    Ok(())
                } else {
                    Err(format!(
                        "below by {} ns, above by {} ns, beyond READ_VALUES by {} ns (READ_VALUES above by {} ns)",
                        s.max_below, s.max_above, s.max_extra, s.ioctl_above
                    ))
                },
            );
        }
    }
}

/// Another thread of the process reads while the owner spins: never live,
/// never ahead of the owner's next ioctl.
fn other_thread_not_live() -> TestResult {
    let (ctx, page) = self_counting()?;
    let page = Arc::new(page);
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (page, stop) = (page.clone(), stop.clone());
        std::thread::spawn(move || -> Result<(usize, u64), String> {
            let (mut n, mut max) = (0, 0u64);
            while !stop.load(Ordering::Relaxed) {
                let r = read_page(&page)?;
                ensure!(!r.live(), "another thread's read is live: {r:?}");
                max = max.max(r.value(0));
                n += 1;
            }
            Ok((n, max))
        })
    };
    pfm_guest::work::spin(Duration::from_millis(30));
    stop.store(true, Ordering::Relaxed);
    let (n, max) = reader.join().map_err(|_| "reader panicked")??;
    let after = ctx.read_values(MASK).ctx("READ_VALUES")?;
    diag(format!(
        "other thread: {n} reads, task-clock up to {max}, owner's {}",
        after.values[0]
    ));
    ensure!(
        n > 0 && max <= after.values[0],
        "reader saw {max} > {}",
        after.values[0]
    );
    Ok(())
}

fn forked_child_not_live() -> TestResult {
    let (_ctx, page) = self_counting()?;
    let code = raw::in_forked_child(|| match page.read(MASK) {
        Some(r) if !r.live() => 0,
        Some(_) => 1,
        None => 2,
    })
    .map_err(|e| format!("fork: errno {e}"))?;
    ensure!(code == 0, "child: {code} (1: live, 2: no read)");
    Ok(())
}

/// A second thread runs `hammer(ctx, k)` for k = 1, 2, ... while the owner
/// reads its page and hands each reading to `check`.
fn torture(
    hammer: impl Fn(&Context, u64) -> TestResult + Send + Sync + 'static,
    mut check: impl FnMut(&MappedReading) -> TestResult,
) -> Result<usize, String> {
    let (ctx, page) = self_counting()?;
    let ctx = Arc::new(ctx);
    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let (ctx, stop) = (ctx.clone(), stop.clone());
        std::thread::spawn(move || -> TestResult {
            let mut k = 1;
            while !stop.load(Ordering::Relaxed) {
                hammer(&ctx, k)?;
                k += 1;
            }
            Ok(())
        })
    };
    let end = Instant::now() + Duration::from_secs(2);
    let mut n = 0;
    let mut res = Ok(());
    while Instant::now() < end && res.is_ok() {
        res = read_page(&page).and_then(|r| check(&r));
        n += 1;
    }
    stop.store(true, Ordering::Relaxed);
    worker.join().map_err(|_| "hammer panicked")??;
    res.map(|()| n)
}

/// STOP and START by another thread, which also wakes a sleeper on the
/// reader's CPU after each call: a wake-up from another CPU that preempts
/// the reader closes its scheduler slice at the wake-up, while the reader
/// runs on until the rescheduling IPI (the case that once let a live
/// reading exceed the value a STOP then froze).
fn torture_stop_start() -> TestResult {
    let cpus = perfmon::process::online_cpus();
    let (wake, woken) = std::sync::mpsc::channel::<()>();
    let sleeper = (cpus > 1).then(|| {
        std::thread::spawn(move || -> TestResult {
            perfmon::process::set_affinity(0, &[0]).ctx("sched_setaffinity")?;
            while woken.recv().is_ok() {}
            Ok(())
        })
    });
    if cpus > 1 {
        perfmon::process::set_affinity(0, &[0]).ctx("sched_setaffinity")?;
    }
    let wake = std::sync::Mutex::new(wake);
    let mut last = [0u64; 3];
    let mut prev: Option<MappedReading> = None;
    let n = torture(
        move |ctx, k| {
            if k == 1 && cpus > 1 {
                perfmon::process::set_affinity(0, &[1]).ctx("sched_setaffinity")?;
            }
            let r = if k % 2 == 1 { ctx.stop() } else { ctx.start() };
            if let Ok(w) = wake.lock() {
                let _ = w.send(());
            }
            r.ctx("STOP/START")
        },
        |r| {
            for (i, l) in last.iter_mut().enumerate() {
                let v = r.value(i as u16);
                // Exact: a STOP or a switch-out folds task-clock to at
                // least what the page let this thread see (a preempting
                // wake-up closes the scheduler's slice early; see
                // `page_promise` in the module), switch counts change only
                // at switches.
                ensure!(
                    v >= *l,
                    "PMD {i} went back: {v} after {l} ({r:?} after {prev:?})"
                );
                *l = v;
            }
            prev = Some(*r);
            Ok(())
        },
    )?;
    let _ = perfmon::process::set_affinity(0, &(0..cpus).collect::<Vec<_>>());
    if let Some(s) = sleeper {
        s.join().map_err(|_| "sleeper panicked")??;
    }
    diag(format!("STOP/START torture: {n} reads, last {last:?}"));
    Ok(())
}

fn torture_write_pmds() -> TestResult {
    const STEP: u64 = 1_000_000;
    let mut last = 0;
    let n = torture(
        |ctx, k| {
            let pmd = |reg_num| PfmPmd {
                reg_num,
                reg_value: k * STEP,
                ..Default::default()
            };
            ctx.write_pmds(&mut [pmd(1), pmd(3)]).ctx("WRITE_PMDS")
        },
        |r| {
            let (v1, v3) = (r.value(1), r.value(3));
            // PMD 3 counts nothing; PMD 1 counts switches from the same write.
            ensure!(v3 % STEP == 0, "PMD 3 = {v3}");
            ensure!(v1 >= v3 && v1 - v3 < STEP, "torn: PMD 1 {v1}, PMD 3 {v3}");
            ensure!(v3 >= last, "PMD 3 went back: {v3} after {last}");
            last = v3;
            Ok(())
        },
    )?;
    diag(format!(
        "WRITE_PMDS torture: {n} reads, last write {}",
        last / STEP
    ));
    ensure!(last > 0, "no write seen");
    Ok(())
}

fn close_while_mapped() -> TestResult {
    let before = module::live_contexts().ok_or("live_contexts unreadable")?;
    let (ctx, page) = self_counting()?;
    drop(ctx);
    let r1 = read_page(&page)?;
    pfm_guest::work::spin(Duration::from_millis(5));
    std::thread::sleep(Duration::from_millis(5));
    let r2 = read_page(&page)?;
    ensure!(
        r2.counting() && r2.value(0) > r1.value(0) && r2.value(1) > r1.value(1),
        "the context stopped at close: {r1:?} then {r2:?}"
    );
    let during = module::live_contexts().ok_or("live_contexts unreadable")?;
    ensure!(
        during == before + 1,
        "while mapped: {during} contexts, expected {}",
        before + 1
    );
    // The mapping holds the file, the file the module.
    ensure!(
        module::rmmod_once().is_err(),
        "rmmod succeeded with a page mapped"
    );
    drop(page);
    module::wait_contexts(before, Duration::from_secs(5))
}

fn main() {
    pfm_guest::child::dispatch();
    let mut t = Tap::new(PLAN);
    pfm_guest::watchdog(Duration::from_secs(480));
    t.require("insmod perfmon.ko", module::insmod(&[]));
    t.run("mmap errnos; read-only for good", errnos);
    t.run(
        "mapped before LOAD: UNLOADED, then LOADED, counting, live",
        before_and_after_load,
    );
    sandwich_checks(&mut t);
    t.run(
        "another thread reads values as of the last update, not live",
        other_thread_not_live,
    );
    t.run(
        "a forked child reads the inherited page, not live",
        forked_child_not_live,
    );
    t.run("STOP/START hammered: nothing goes back", torture_stop_start);
    t.run("WRITE_PMDS hammered: no torn update", torture_write_pmds);
    t.run(
        "close while mapped: the context counts on until munmap; rmmod refused meanwhile",
        close_while_mapped,
    );
    t.run("rmmod", || module::rmmod().ctx("rmmod"));
    t.finish();
}
