//! pfm_test_smpl_family: sampling a whole program (Documentation/
//! perfmon.rst, "Sampling", "Whole programs"): every thread of the family
//! writes its entries to the root's one buffer, on several CPUs at once.
//!
//! As in pfm_test_smpl, the sampled event is context switches (PMD 1,
//! period P), counted too by PMD 3 (no period: the total), with task-clock
//! on PMD 0, and each entry records PMDs 0 and 3. Every heir starts from
//! the root's registers at LOAD, so in each thread's entries, in order, the
//! k-th holds PMD 3 = k × P exactly (but for those of a new thread's
//! install, which counts the switches it made before: `check_thread`).
//!
//! 1. `PFM_CTXFL_INHERIT`: the test's thread (the root) starts 3 pairs of
//!    threads exchanging bytes through pipes, the pairs on CPUs 0 and 1,
//!    so that two CPUs write into the buffer at once. Each thread reads its
//!    own switch count (`getrusage(RUSAGE_THREAD)`, the oracle the module
//!    cannot influence) at the end of its exchanges, tells the tool, blocks
//!    until the tool has STOPped the family, and reads it again: its row's
//!    count S lies in those two readings, exactly. Every thread's entries
//!    are then exactly ⌊S/P⌋ (none lost), the k-th with PMD 3 = k × P,
//!    their task-clock and timestamps increasing, their IPs in the
//!    program's text, their pid the test's; the buffer's `seq` runs
//!    without a gap over all threads' entries, and two CPUs wrote.
//! 2. The watermark reached by an heir's entries wakes the root's `poll`:
//!    the root thread polls (its own few switches stay below the
//!    watermark) while an inherited pair exchanges; it is woken well
//!    before the 10 s timeout. (An heir used to wake only its own file-less
//!    context: the poll timed out.)
//! 3. `PFM_LOAD_PROCESS` of a running process of 4 sleeping threads: every
//!    thread's entries are ⌊S/P⌋ of its row, the k-th at k × P; their pid
//!    is the process's and their tids its threads'.
//! 4. Threads born while a real-time thread keeps preempting their CPU
//!    (`born_preempted`): a new thread may be switched out before it
//!    joins the family (its install runs at its first return to user
//!    mode), and those switches are counted then, from its creation. With
//!    P = 1 each of them is an entry: every heir's entries still carry its
//!    task-clock, above 0 and increasing but for those its install writes
//!    (`check_thread` says why). They carried 0: the switches were counted
//!    before the thread's runtime since its creation (seen once in a
//!    `make check` of case 1, whose P is 3; here in every run).
//! 5. A buffer that masks when full cannot be a whole program's: LOAD
//!    with `INHERIT` or `PFM_LOAD_PROCESS` says EBUSY and leaves the
//!    context UNLOADED; the same context loads alone.

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use perfmon::abi::*;
use perfmon::process::gettid;
use perfmon::{Context, CtxState, SampleBuffer, SampleStats, ThreadsReport};
use pfm_guest::child::Child;
use pfm_guest::tap::diag;
use pfm_guest::{edges, ensure, module, raw, work, ResultExt, Tap, TestResult};

const PLAN: usize = 7;

/// PMD 0: task-clock; 1: context switches, sampled; 3: context switches.
const CLOCK: u16 = 0;
const SAMPLED: u16 = 1;
const TOTAL: u16 = 3;

/// A context on switches with period `period`, its buffer of `pages` pages
/// (`watermark` bytes; 0: half) set up and mapped, flags `flags`, not
/// loaded.
fn family_context(
    period: u64,
    pages: u32,
    drop: bool,
    watermark: u32,
    flags: u32,
) -> Result<(Context, SampleBuffer), String> {
    let ctx = Context::open().ctx("open")?;
    let width = ctx.info().ctx("GET_INFO")?.counter_width;
    let mut pmcs = [
        (CLOCK, PFM_SOFT_EV_TASK_CLOCK),
        (SAMPLED, PFM_SOFT_EV_CONTEXT_SWITCHES),
        (TOTAL, PFM_SOFT_EV_CONTEXT_SWITCHES),
    ]
    .map(|(reg_num, ev)| PfmPmc {
        reg_num,
        reg_value: ev as u64,
        ..Default::default()
    });
    ctx.write_pmcs(&mut pmcs).ctx("WRITE_PMCS")?;
    let minus_p = pfm_guest::minus_period(period, width);
    let mut pmds = [PfmPmd {
        reg_num: SAMPLED,
        reg_value: minus_p,
        reg_short_reset: minus_p,
        reg_long_reset: minus_p,
        ..Default::default()
    }];
    ctx.write_pmds(&mut pmds).ctx("WRITE_PMDS")?;
    ctx.setup_sampling(
        pages,
        &[(SAMPLED, 1 << CLOCK | 1 << TOTAL)],
        drop,
        watermark,
    )
    .ctx("SMPL_SETUP")?;
    let buf = ctx.map_samples(pages).ctx("mmap of the buffer")?;
    if flags != 0 {
        ctx.set_flags(flags).ctx("SET_FLAGS")?;
    }
    Ok((ctx, buf))
}

/// The program's executable mappings (`/proc/PID/maps`, `r-xp`).
fn text_ranges(pid: u32) -> Result<Vec<(u64, u64)>, String> {
    let path = format!("/proc/{pid}/maps");
    let maps = std::fs::read_to_string(&path).ctx(&path)?;
    Ok(maps
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some("r-xp"))
        .filter_map(|l| {
            let (a, b) = l.split_whitespace().next()?.split_once('-')?;
            Some((
                u64::from_str_radix(a, 16).ok()?,
                u64::from_str_radix(b, 16).ok()?,
            ))
        })
        .collect())
}

/// The entries of each thread, in buffer order, after checking that the
/// buffer's `seq` runs without a gap and every entry is a sample of PMD 1
/// with PMDs 0 and 3.
fn by_thread(entries: &[PfmSmplEntry]) -> Result<BTreeMap<u32, Vec<PfmSmplEntry>>, String> {
    let mut threads: BTreeMap<u32, Vec<PfmSmplEntry>> = BTreeMap::new();
    for (k, e) in entries.iter().enumerate() {
        ensure!(e.seq == k as u64, "entry {k}: {e:?}: seq");
        ensure!(
            e.ovfl_pmd == SAMPLED && e.nvalues == 2 && e.smpl_pmds == (1 << CLOCK | 1 << TOTAL),
            "entry {k}: {e:?}: PMD, values"
        );
        threads.entry(e.tid).or_default().push(*e);
    }
    Ok(threads)
}

/// What an `INHERIT` family of this program sampled, collected once it is
/// STOPped.
struct Sampled {
    /// Each thread's row of PMD 3 (the total).
    rows: ThreadsReport,
    entries: Vec<PfmSmplEntry>,
    stats: SampleStats,
    /// The entries of each thread ([`by_thread`]).
    threads: BTreeMap<u32, Vec<PfmSmplEntry>>,
    /// The program's executable mappings.
    text: Vec<(u64, u64)>,
}

/// The family's rows, read before its UNLOAD, then the buffer's entries.
fn unload_and_collect(ctx: &Context, buf: &mut SampleBuffer) -> Result<Sampled, String> {
    let rows = ctx.read_threads(1 << TOTAL).ctx("READ_THREADS")?;
    ctx.unload().ctx("UNLOAD")?;
    let entries = buf.take();
    let stats = buf.stats();
    let threads = by_thread(&entries)?;
    let text = text_ranges(std::process::id())?;
    Ok(Sampled {
        rows,
        entries,
        stats,
        threads,
        text,
    })
}

/// One thread's entries against its count `s` of PMD 3 and its process
/// `pid` (whose text its IPs lie in): ⌊s/P⌋ of them, the k-th at k × P,
/// task-clock above 0 and timestamps increasing; task-clock increasing too,
/// but for the entries an heir's install writes. The switches a new thread
/// made before its install (on its way to user mode) are counted there, in
/// one fold with its runtime since creation, and a fold that crosses
/// several periods writes an entry for each with the values after the
/// fold (as perf does, `perf_swevent_overflow`): if the first entry's
/// PMD 3 is some c > P, the first ⌊c/P⌋ entries carry c and one
/// task-clock; the k-th after them k × P. The switch-out right after the
/// install may carry its task-clock too, when a wake-up that preempts the
/// thread ended its time slice before that fold (the scheduler then
/// accounts nothing more of it). So an entry's task-clock (and timestamp:
/// one fold's entries may be written within a nanosecond) may equal the
/// one before only while every entry before it of the thread is equal.
fn check_thread(
    tid: u32,
    entries: &[PfmSmplEntry],
    s: u64,
    period: u64,
    pid: u32,
    text: &[(u64, u64)],
) -> TestResult {
    ensure!(
        entries.len() as u64 == s / period,
        "thread {tid}: {} entries for S = {s}: not floor(S/P) = {}",
        entries.len(),
        s / period
    );
    let (mut last_clock, mut last_ts) = (0, 0);
    let mut leading = true;
    // The install's count, if it crossed more than one period.
    let install = entries.first().map_or(0, |e| e.values[1]).max(period);
    let install_entries = install / period;
    for (k, e) in entries.iter().enumerate() {
        let k = k as u64 + 1;
        let what = format!(
            "thread {tid}, its entry {k}: {e:?} (the one before: task-clock {last_clock}, time {last_ts})"
        );
        ensure!(e.pid == pid, "{what}: pid, expected {pid}");
        let expected = if k <= install_entries {
            install
        } else {
            k * period
        };
        ensure!(
            e.values[1] == expected,
            "{what}: PMD 3 {} at its {k}-th overflow (period {period}; expected {expected})",
            e.values[1]
        );
        leading &= k == 1 || e.values[0] == last_clock;
        ensure!(
            e.values[0] > 0
                && (e.values[0] > last_clock || leading)
                && (e.tstamp > last_ts || leading && e.tstamp == last_ts),
            "{what}: task-clock 0 or not increasing, or the timestamp not increasing"
        );
        ensure!(
            text.iter().any(|&(a, b)| (a..b).contains(&e.ip)),
            "{what}: IP {:#x} outside the executable mappings",
            e.ip
        );
        (last_clock, last_ts) = (e.values[0], e.tstamp);
    }
    Ok(())
}

/// A thread's own switch counts: at the end of its work, and after the
/// tool's STOP released it.
struct Own {
    tid: u32,
    before: u64,
    after: u64,
}

/// Two threads on CPU `cpu` exchanging `n` bytes through pipes; each then
/// reports its switch count on `report`, waits for a byte on its `go` pipe
/// (written once the family is STOPped), and reports again on `after`.
fn exchanging_pair(
    cpu: usize,
    n: usize,
    report: mpsc::Sender<(u32, u64)>,
    after: mpsc::Sender<Own>,
) -> Result<(Vec<std::fs::File>, Vec<std::thread::JoinHandle<TestResult>>), String> {
    let (a_r, a_w) = raw::pipe().map_err(|e| format!("pipe: {e}"))?;
    let (b_r, b_w) = raw::pipe().map_err(|e| format!("pipe: {e}"))?;
    let mut gos = Vec::new();
    let mut joins = Vec::new();
    // The initiator writes on a and reads b; the echo the reverse.
    for (initiator, (r, w)) in [(true, (b_r, a_w)), (false, (a_r, b_w))] {
        let (go_r, go_w) = raw::pipe().map_err(|e| format!("pipe: {e}"))?;
        gos.push(go_w);
        let (report, after) = (report.clone(), after.clone());
        joins.push(std::thread::spawn(move || -> TestResult {
            work::pin_to(cpu)?;
            let (r, w) = (r.as_raw_fd(), w.as_raw_fd());
            for _ in 0..n {
                if initiator {
                    raw::write_fd(w, b"x").map_err(|e| format!("write: {e}"))?;
                    raw::read_fd(r, 1).map_err(|e| format!("read: {e}"))?;
                } else {
                    raw::read_fd(r, 1).map_err(|e| format!("read: {e}"))?;
                    raw::write_fd(w, b"x").map_err(|e| format!("write: {e}"))?;
                }
            }
            let tid = gettid();
            let before = edges::thread_switches();
            report.send((tid, before)).map_err(|e| e.to_string())?;
            raw::read_fd(go_r.as_raw_fd(), 1).map_err(|e| format!("go: {e}"))?;
            let own = Own {
                tid,
                before,
                after: edges::thread_switches(),
            };
            after.send(own).map_err(|e| e.to_string())
        }));
    }
    Ok((gos, joins))
}

fn inherit_exact() -> TestResult {
    const PERIOD: u64 = 3;
    const PAIRS: usize = 3;
    const EXCHANGES: usize = 150;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    // 64 pages: 2048 entries, for about 2 × 150 / 3 per thread.
    let (ctx, mut buf) = family_context(PERIOD, 64, true, 0, PFM_CTXFL_INHERIT)?;
    let root = gettid();
    ctx.load_and_start(0).ctx("LOAD|START")?;
    let (report_tx, report_rx) = mpsc::channel();
    let (after_tx, after_rx) = mpsc::channel();
    let mut gos = Vec::new();
    let mut joins = Vec::new();
    for i in 0..PAIRS {
        let (g, j) = exchanging_pair(
            i % cpus.min(2),
            EXCHANGES,
            report_tx.clone(),
            after_tx.clone(),
        )?;
        gos.extend(g);
        joins.extend(j);
    }
    drop((report_tx, after_tx));
    // Every thread done and blocked on its go pipe: the family stops.
    let mut reported = 0;
    while reported < 2 * PAIRS {
        report_rx
            .recv_timeout(Duration::from_secs(60))
            .map_err(|e| format!("a thread's report: {e}"))?;
        reported += 1;
    }
    ctx.stop().ctx("STOP")?;
    for g in &gos {
        raw::write_fd(g.as_raw_fd(), b"g").map_err(|e| format!("go: {e}"))?;
    }
    let own: Vec<Own> = after_rx.iter().collect();
    for j in joins {
        j.join().map_err(|_| "a thread panicked".to_string())??;
    }
    let Sampled {
        rows,
        entries,
        stats,
        threads,
        text,
    } = unload_and_collect(&ctx, &mut buf)?;
    let cpus_written: std::collections::BTreeSet<u16> = entries.iter().map(|e| e.cpu).collect();
    diag(format!(
        "{} entries from {} threads on CPUs {cpus_written:?}; {stats:?}; {} rows",
        entries.len(),
        threads.len(),
        rows.rows.len()
    ));
    ensure!(
        stats.lost == 0 && stats.written == entries.len() as u64,
        "{stats:?}: entries lost or unread"
    );
    ensure!(
        rows.rows.len() == 1 + 2 * PAIRS && rows.lost_threads == 0,
        "{} rows, {} lost: expected the root and {} threads",
        rows.rows.len(),
        rows.lost_threads,
        2 * PAIRS
    );
    for row in &rows.rows {
        let s = row.value(TOTAL).ok_or("no PMD 3 in a row")?;
        if row.tid != root {
            let o = own
                .iter()
                .find(|o| o.tid == row.tid)
                .ok_or(format!("row of thread {}: no such thread", row.tid))?;
            diag(format!(
                "thread {}: S {s} in its own [{}, {}], {} entries",
                row.tid,
                o.before,
                o.after,
                threads.get(&row.tid).map_or(0, Vec::len)
            ));
            ensure!(
                (o.before..=o.after).contains(&s),
                "thread {}: S {s} outside its own readings [{}, {}]",
                row.tid,
                o.before,
                o.after
            );
        }
        let mine = threads.get(&row.tid).map_or(&[][..], Vec::as_slice);
        check_thread(row.tid, mine, s, PERIOD, std::process::id(), &text)?;
    }
    ensure!(
        threads
            .keys()
            .all(|t| rows.rows.iter().any(|r| r.tid == *t)),
        "entries of a thread without a row"
    );
    if cpus >= 2 {
        ensure!(
            cpus_written.len() >= 2,
            "all entries written on CPUs {cpus_written:?}"
        );
    }
    Ok(())
}

fn heir_wakes_root() -> TestResult {
    const ENTRY: u32 = std::mem::size_of::<PfmSmplEntry>() as u32;
    const WATERMARK: u32 = 16;
    let (ctx, mut buf) = family_context(1, 4, true, WATERMARK * ENTRY, PFM_CTXFL_INHERIT)?;
    ctx.load_and_start(0).ctx("LOAD|START")?;
    // The pair starts after the root is in poll, and exchanges until told.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (a_r, a_w) = raw::pipe().map_err(|e| format!("pipe: {e}"))?;
    let (b_r, b_w) = raw::pipe().map_err(|e| format!("pipe: {e}"))?;
    let echo = std::thread::spawn(move || {
        while let Ok(b) = raw::read_fd(a_r.as_raw_fd(), 1) {
            if b.is_empty() || raw::write_fd(b_w.as_raw_fd(), &b).is_err() {
                break;
            }
        }
    });
    let initiator = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Acquire) && n < 100_000 {
                if raw::write_fd(a_w.as_raw_fd(), b"x").is_err()
                    || raw::read_fd(b_r.as_raw_fd(), 1).is_err()
                {
                    break;
                }
                n += 1;
            }
            n
        })
    };
    let t0 = Instant::now();
    let ready = ctx.poll(Some(Duration::from_secs(10)));
    let waited = t0.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Release);
    let exchanges = initiator
        .join()
        .map_err(|_| "the initiator panicked".to_string())?;
    let _ = echo.join();
    ctx.unload().ctx("UNLOAD")?;
    let entries = buf.take();
    let root = gettid();
    let own = entries.iter().filter(|e| e.tid == root).count();
    diag(format!(
        "poll: {ready:?} after {waited:?}; {exchanges} exchanges; {} entries, {own} of the root",
        entries.len()
    ));
    let ready = ready.ctx("poll")?;
    ensure!(
        ready.readable && waited < Duration::from_secs(10),
        "the root's poll was not woken by its heirs' entries"
    );
    ensure!(
        (own as u32) < WATERMARK,
        "the root wrote {own} entries itself: the test proves nothing"
    );
    Ok(())
}

fn load_process() -> TestResult {
    const PERIOD: u64 = 2;
    const THREADS: usize = 4;
    let child = Child::spawn("sleepers", &[&(THREADS - 1).to_string(), "2"])?;
    let pid = child.pid();
    // Its threads started.
    let task = format!("/proc/{pid}/task");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_dir(&task).map_or(0, |d| d.count()) < THREADS {
        ensure!(
            Instant::now() < deadline,
            "the child's threads never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let text = text_ranges(pid)?;
    let (ctx, mut buf) = family_context(PERIOD, 32, true, 0, 0)?;
    ctx.load_process(pid).ctx("LOAD PFM_LOAD_PROCESS")?;
    ctx.start().ctx("START")?;
    std::thread::sleep(Duration::from_millis(400));
    ctx.stop().ctx("STOP")?;
    let rows = ctx.read_threads(1 << TOTAL).ctx("READ_THREADS")?;
    ctx.unload().ctx("UNLOAD")?;
    let tids: Vec<u32> = std::fs::read_dir(&task)
        .ctx("task dir")?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    drop(child);
    let entries = buf.take();
    let stats = buf.stats();
    let threads = by_thread(&entries)?;
    diag(format!(
        "{} entries from {} threads, {} rows, threads {tids:?}; {stats:?}",
        entries.len(),
        threads.len(),
        rows.rows.len()
    ));
    ensure!(stats.lost == 0, "{stats:?}: entries lost");
    ensure!(
        rows.rows.len() == THREADS && rows.rows.iter().all(|r| tids.contains(&r.tid)),
        "rows {:?}: not the process's {THREADS} threads {tids:?}",
        rows.rows.iter().map(|r| r.tid).collect::<Vec<_>>()
    );
    for row in &rows.rows {
        let s = row.value(TOTAL).ok_or("no PMD 3 in a row")?;
        let mine = threads.get(&row.tid).map_or(&[][..], Vec::as_slice);
        ensure!(s >= 10 * PERIOD, "thread {}: only {s} switches", row.tid);
        check_thread(row.tid, mine, s, PERIOD, pid, &text)?;
    }
    ensure!(
        threads.keys().all(|t| tids.contains(t)),
        "entries of a thread not the process's"
    );
    Ok(())
}

/// Case 4: see the file's header.
fn born_preempted() -> TestResult {
    const THREADS: usize = 80;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The preemptor, born before the family: unmonitored. SCHED_FIFO on
    // CPU 0, 400 us asleep and 20 us busy in turn: it preempts whatever
    // runs there, a new thread on its way to user mode included.
    let hog = {
        let stop = stop.clone();
        std::thread::spawn(move || -> TestResult {
            work::pin_to(0)?;
            let param = libc::sched_param { sched_priority: 1 };
            // SAFETY: The calling thread's policy, a valid parameter.
            if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
                return Err(format!("SCHED_FIFO: {}", std::io::Error::last_os_error()));
            }
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                std::thread::sleep(Duration::from_micros(400));
                work::spin(Duration::from_micros(20));
            }
            Ok(())
        })
    };
    // The root waits on the other CPU, and goes to CPU 0 only to create
    // each thread there (a new thread starts on its creator's CPUs): it
    // is preempted there too, but only that long, which keeps its own
    // entries within the buffer.
    let (home, all): (Vec<usize>, Vec<usize>) = ((1..cpus.max(2)).collect(), (0..cpus).collect());
    let result = (|| -> TestResult {
        let (ctx, mut buf) = family_context(1, 128, true, 0, PFM_CTXFL_INHERIT)?;
        let root = gettid();
        ctx.load_and_start(0).ctx("LOAD|START")?;
        let mut joins = Vec::new();
        for _ in 0..THREADS {
            perfmon::process::set_affinity(0, &[0]).map_err(|e| format!("affinity: {e}"))?;
            joins.push(std::thread::spawn(|| {
                std::thread::sleep(Duration::from_millis(1));
                gettid()
            }));
            if cpus >= 2 {
                perfmon::process::set_affinity(0, &home).map_err(|e| format!("affinity: {e}"))?;
            }
        }
        let mut tids = Vec::new();
        for j in joins {
            tids.push(j.join().map_err(|_| "a thread panicked".to_string())?);
        }
        ctx.stop().ctx("STOP")?;
        let Sampled {
            rows,
            entries,
            stats,
            threads,
            text,
        } = unload_and_collect(&ctx, &mut buf)?;
        diag(format!(
            "{} entries from {} threads; {stats:?}; {} rows, {} lost",
            entries.len(),
            threads.len(),
            rows.rows.len(),
            rows.lost_threads
        ));
        let mut most: Vec<(u64, bool)> = rows
            .rows
            .iter()
            .map(|r| (r.value(TOTAL).unwrap_or(0), r.tid == root))
            .collect();
        most.sort_unstable_by(|a, b| b.cmp(a));
        most.truncate(4);
        diag(format!("the most switches (count, root): {most:?}"));
        // How many threads made switches before their install.
        let born_switched = threads
            .values()
            .filter(|t| t.len() > 1 && t[1].values[0] == t[0].values[0])
            .count();
        diag(format!(
            "threads whose first two entries carry one task-clock: {born_switched}"
        ));
        ensure!(stats.lost == 0, "{stats:?}: entries lost");
        ensure!(
            rows.lost_threads == 0 && tids.iter().all(|t| rows.rows.iter().any(|r| r.tid == *t)),
            "{} rows, {} lost: not every thread born has one",
            rows.rows.len(),
            rows.lost_threads
        );
        for row in rows.rows.iter().filter(|r| r.tid != root) {
            let s = row.value(TOTAL).ok_or("no PMD 3 in a row")?;
            let mine = threads.get(&row.tid).map_or(&[][..], Vec::as_slice);
            check_thread(row.tid, mine, s, 1, std::process::id(), &text)?;
        }
        Ok(())
    })();
    stop.store(true, std::sync::atomic::Ordering::Release);
    let hog = hog.join().map_err(|_| "the preemptor panicked".to_string());
    perfmon::process::set_affinity(0, &all).map_err(|e| format!("affinity: {e}"))?;
    result?;
    hog?
}

fn masking_refused() -> TestResult {
    let (ctx, _buf) = family_context(3, 1, false, 0, PFM_CTXFL_INHERIT)?;
    let r = ctx.load(0);
    ensure!(
        r.as_ref().err().and_then(|e| e.errno()) == Some(libc::EBUSY),
        "LOAD with INHERIT of a masking buffer: {r:?}, expected EBUSY"
    );
    ensure!(
        ctx.state().ctx("GET_STATE")?.state == CtxState::Unloaded,
        "not UNLOADED after the refusal"
    );
    let child = Child::spawn("sleep", &["5"])?;
    ctx.set_flags(0).ctx("SET_FLAGS 0")?;
    let r = ctx.load_process(child.pid());
    ensure!(
        r.as_ref().err().and_then(|e| e.errno()) == Some(libc::EBUSY),
        "PFM_LOAD_PROCESS of a masking buffer: {r:?}, expected EBUSY"
    );
    ctx.load(0).ctx("LOAD alone")?;
    ctx.unload().ctx("UNLOAD")?;
    Ok(())
}

fn main() {
    pfm_guest::child::dispatch();
    let mut t = Tap::new(PLAN);
    pfm_guest::watchdog(Duration::from_secs(240));
    t.require("insmod perfmon.ko", module::insmod(&[]));
    t.run(
        "INHERIT: each thread's entries exactly floor(S/P), S within its own readings; one seq over all; two CPUs",
        inherit_exact,
    );
    t.run(
        "an heir's entries reaching the watermark wake the root's poll",
        heir_wakes_root,
    );
    t.run(
        "PFM_LOAD_PROCESS: every thread of the process sampled, floor(S/P) each, its pid and tids",
        load_process,
    );
    t.run(
        "threads born beside a preempting real-time thread: every heir's entries carry its task-clock, above 0, increasing",
        born_preempted,
    );
    t.run(
        "a masking buffer cannot be a whole program's: EBUSY, still UNLOADED, loads alone",
        masking_refused,
    );
    t.run("rmmod perfmon", module::rmmod);
    t.finish();
}
