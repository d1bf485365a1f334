//! pfm_test_family_sets: event sets on a whole program (issue 33): a
//! context with two event sets switched every millisecond of running time,
//! loaded with `PFM_CTXFL_INHERIT` (the test's own threads) or with
//! `PFM_LOAD_PROCESS` (a forked process's threads, some walked at LOAD,
//! some created after it), every thread multiplexing the sets on its own
//! running time.
//!
//! Each worker thread reads its own clocks (`s`: switches, then
//! `CLOCK_THREAD_CPUTIME_ID`), spins a few milliseconds of CPU, naps (a
//! sleep that switches it out), and again, then reads them again (`t`),
//! says it is ready and blocks on a pipe; once released it reads them
//! again (`u`). A thread that existed before LOAD also read them before it
//! (`w`); one created after LOAD is counted from its birth (`w` = 0).
//! While it is blocked its counts lie in `[t - s, u - w]` exactly (the
//! edges of `pfm_guest::edges`), and that is when the tool reads:
//!
//! - `PFM_IOC_READ_THREADS` of each set (`PFM_VALFL_SET`): per thread, the
//!   sets' task-clock counts add up to the thread's own CPU time and their
//!   context-switch counts to its own switches, within `[t, u]`; each
//!   set's task-clock equals the set's running time in that thread (the
//!   soft model charges a set exactly the time it was active), the sets'
//!   running times add up to the thread's `time_running`, and every thread
//!   that ran more than two timeouts ran in both sets.
//! - `PFM_IOC_READ_VALUES` with `PFM_VALFL_SET`: the program's count of
//!   each set is the sum of its threads' rows, and its task-clock the
//!   set's running time (so the estimate count × enabled / running is the
//!   program's enabled time, exactly); summed over the sets, within the
//!   threads' own clocks added up.
//! - After the threads exit, their rows (folded into the family's ended
//!   rows, one block per set) keep each set's counts: never below what was
//!   read while they were blocked, task-clock still each set's running
//!   time.
//!
//! - On `pmu=intel_arch_sim`, the `PFM_LOAD_PROCESS` case again with user
//!   cycles in both sets: each thread's copy of each set ran (the
//!   per-CPU multiplexing timer) and counted, the sets' running times add
//!   up to the thread's, within its own clock, and the program's values
//!   and set times are its rows' sums.
//!
//! Oracles the module cannot influence: each thread's own
//! `CLOCK_THREAD_CPUTIME_ID` and `getrusage(RUSAGE_THREAD)` switch count,
//! read at its edges. No tolerance: every bound is an edge.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use perfmon::abi::*;
use perfmon::{Context, ThreadRow};
use pfm_guest::edges::{thread_cpu_ns, thread_switches};
use pfm_guest::{ensure, module, ResultExt, Tap, TestResult};

const PLAN: usize = 8;
const TC: u64 = PFM_SOFT_EV_TASK_CLOCK;
const CS: u64 = PFM_SOFT_EV_CONTEXT_SWITCHES;
/// intel_arch_sim: IA32_PERFEVTSEL core cycles (0x3c) in user mode, which
/// the simulator counts while the thread runs in user mode.
const CYCLES_USR: u64 = 0x3c | 1 << 16;

/// The PMU model a case runs on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Model {
    /// `pmu=soft`: task-clock on PMD 0, context-switches on PMD 1.
    Soft,
    /// `pmu=intel_arch_sim`: user cycles on PMDs 0 and 1.
    Sim,
}
const MS: u64 = 1_000_000;
/// The sets' timeout: 1 ms of the thread's running time.
const TIMEOUT: u64 = MS;
/// PMD 0 task-clock, PMD 1 context-switches, in both sets.
const MASK: u64 = 0b11;
/// Worker threads of a program.
const WORKERS: usize = 6;
/// CPU time each worker spins per round, and its rounds: 4 × 3 ms, well
/// over two timeouts, so that every worker runs in both sets.
const SPIN_NS: u64 = 3 * MS;
const ROUNDS: usize = 4;
/// How long the tool waits for the workers to be ready.
const READY_WAIT: Duration = Duration::from_secs(120);

/// One thread's edges, shared with another process. A thread counted
/// from its birth has `w` 0; one that existed before LOAD (walked) reads
/// `w` before the LOAD and `s` after it, so that its count, which starts
/// at LOAD, lies in `[t - s, u - w]`.
#[repr(C)]
struct Slot {
    tid: AtomicU64,
    w_sw: AtomicU64,
    w_clk: AtomicU64,
    parked: AtomicU64,
    s_sw: AtomicU64,
    s_clk: AtomicU64,
    t_sw: AtomicU64,
    t_clk: AtomicU64,
    ready: AtomicU64,
    u_clk: AtomicU64,
    u_sw: AtomicU64,
    done: AtomicU64,
}

/// Slots for a root and its workers, and the forked program's signals.
#[repr(C)]
struct Shm {
    slots: [Slot; WORKERS + 1],
    /// The forked program's threads exist (the first half of them).
    walked: AtomicU64,
    /// The tool loaded the process: the program may go on.
    go: AtomicU64,
}

/// A memfd (kept open across exec) holding a [`Shm`], zeroed.
fn shm_file() -> Result<RawFd, String> {
    // SAFETY: A NUL-terminated name, no flags: the fd survives an exec.
    let fd = unsafe { libc::memfd_create(c"pfm_test_family_sets".as_ptr(), 0) };
    // SAFETY: Sizes our own memfd.
    if fd < 0 || unsafe { libc::ftruncate(fd, std::mem::size_of::<Shm>() as libc::off_t) } != 0 {
        return Err(format!("memfd: {}", std::io::Error::last_os_error()));
    }
    Ok(fd)
}

/// The [`Shm`] of memfd `fd`, mapped shared.
fn map_shm(fd: RawFd) -> Result<&'static Shm, String> {
    // SAFETY: A fresh shared mapping of the memfd, checked below; never
    // unmapped (the test's few mappings live as long as the process).
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            std::mem::size_of::<Shm>(),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(format!("mmap: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: Memory of the right size and alignment (a page), zero-filled
    // by the memfd or written only through atomics; all zero is a valid
    // `Shm` (atomics only).
    Ok(unsafe { &*p.cast::<Shm>() })
}

/// Shared memory for a [`Shm`] in this process.
fn shared() -> Result<&'static Shm, String> {
    map_shm(shm_file()?)
}

fn gettid() -> u64 {
    // SAFETY: No arguments.
    unsafe { libc::syscall(libc::SYS_gettid) as u64 }
}

/// Spins until the thread's own CPU clock advanced by `ns`.
fn spin(ns: u64) {
    let end = thread_cpu_ns() + ns;
    while thread_cpu_ns() < end {
        std::hint::spin_loop();
    }
}

/// A 1 ms sleep: the thread blocks and wakes.
fn nap() {
    std::thread::sleep(Duration::from_millis(1));
}

/// Reads one byte from `fd`, retrying on EINTR.
fn read_byte(fd: RawFd) {
    let mut b = 0u8;
    loop {
        // SAFETY: One byte into `b`.
        let n = unsafe { libc::read(fd, (&mut b as *mut u8).cast(), 1) };
        if n >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

/// A worker's life (counted from before this call): spin and nap, its
/// first edge, blocked until released, its second edge.
fn work(slot: &Slot, release: RawFd) {
    slot.tid.store(gettid(), Ordering::Relaxed);
    slot.s_sw.store(thread_switches(), Ordering::Relaxed);
    slot.s_clk.store(thread_cpu_ns(), Ordering::Relaxed);
    for _ in 0..ROUNDS {
        spin(SPIN_NS);
        nap();
    }
    slot.t_sw.store(thread_switches(), Ordering::Relaxed);
    slot.t_clk.store(thread_cpu_ns(), Ordering::Relaxed);
    slot.ready.store(1, Ordering::Release);
    read_byte(release);
    slot.u_clk.store(thread_cpu_ns(), Ordering::Relaxed);
    slot.u_sw.store(thread_switches(), Ordering::Relaxed);
    slot.done.store(1, Ordering::Release);
}

/// Waits until `cond` holds, up to `limit`.
fn wait(limit: Duration, what: &str, cond: impl Fn() -> bool) -> TestResult {
    let t0 = Instant::now();
    while !cond() {
        ensure!(t0.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

/// A pipe: (read end, write end).
fn pipe() -> Result<(RawFd, RawFd), String> {
    let mut fds = [0; 2];
    // SAFETY: Two fds into `fds`.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    Ok((fds[0], fds[1]))
}

/// Releases `n` blocked workers.
fn release(fd: RawFd, n: usize) {
    let bytes = vec![0u8; n];
    // SAFETY: `n` bytes from `bytes`.
    unsafe { libc::write(fd, bytes.as_ptr().cast(), n) };
}

/// A context with sets 0 and 1 switched every [`TIMEOUT`] of running time,
/// each counting task-clock on PMD 0 and context-switches on PMD 1.
fn two_set_context(model: Model) -> Result<Context, String> {
    let ctx = Context::open().ctx("open")?;
    let mut descs = [0u16, 1].map(|id| PfmSetdesc {
        set_id: id,
        set_flags: PFM_SETFL_TIME_SWITCH,
        set_timeout: TIMEOUT,
        ..Default::default()
    });
    ctx.create_sets(&mut descs).ctx("CREATE_SETS")?;
    for set in [0u16, 1] {
        let events = match model {
            Model::Soft => [TC, CS],
            Model::Sim => [CYCLES_USR, CYCLES_USR],
        };
        let mut pmcs = events.map(|ev| PfmPmc {
            reg_set: set,
            reg_value: ev,
            ..Default::default()
        });
        pmcs[1].reg_num = 1;
        ctx.write_pmcs(&mut pmcs).ctx("WRITE_PMCS")?;
        let mut pmds = [0u16, 1].map(|n| PfmPmd {
            reg_set: set,
            reg_num: n,
            ..Default::default()
        });
        ctx.write_pmds(&mut pmds).ctx("WRITE_PMDS")?;
    }
    Ok(ctx)
}

/// What the tool read while the workers were blocked.
struct Reading {
    /// Per set, every thread's row (`PFM_VALFL_SET`).
    per_set: [Vec<ThreadRow>; 2],
    /// Every thread's row with its own times.
    plain: Vec<ThreadRow>,
    /// Per set, the program's values and the set's times.
    totals: [perfmon::Counts; 2],
}

fn read_all(ctx: &Context) -> Result<Reading, String> {
    let per_set = [
        ctx.read_threads_in_set(0, MASK)
            .ctx("READ_THREADS set 0")?
            .rows,
        ctx.read_threads_in_set(1, MASK)
            .ctx("READ_THREADS set 1")?
            .rows,
    ];
    let plain = ctx.read_threads(MASK).ctx("READ_THREADS")?.rows;
    let totals = [
        ctx.read_set_values(0, MASK).ctx("READ_VALUES set 0")?,
        ctx.read_set_values(1, MASK).ctx("READ_VALUES set 1")?,
    ];
    Ok(Reading {
        per_set,
        plain,
        totals,
    })
}

/// Row `tid` of `rows`.
fn row_of(rows: &[ThreadRow], tid: u64) -> Result<&ThreadRow, String> {
    rows.iter()
        .find(|r| u64::from(r.tid) == tid)
        .ok_or_else(|| format!("no row for thread {tid}"))
}

/// A row's value of PMD `pmd`.
fn value(r: &ThreadRow, pmd: u16) -> u64 {
    r.value(pmd).unwrap_or(u64::MAX)
}

/// A slot's bounds of what its thread counted by the blocked read:
/// `(clock, switches)`, each `[t - s, u - w]`.
fn bounds(s: &Slot) -> ((u64, u64), (u64, u64)) {
    let v = |a: &AtomicU64| a.load(Ordering::Relaxed);
    (
        (v(&s.t_clk) - v(&s.s_clk), v(&s.u_clk) - v(&s.w_clk)),
        (v(&s.t_sw) - v(&s.s_sw), v(&s.u_sw) - v(&s.w_sw)),
    )
}

/// The per-thread checks for the threads of `slots` (blocked at the read):
/// on the soft model, the clocks and switches; on the simulator, the sets'
/// times and cycles counted in each.
fn check_threads(r: &Reading, slots: &[Slot], model: Model) -> TestResult {
    if model == Model::Sim {
        return check_threads_sim(r, slots);
    }
    for s in slots {
        let tid = s.tid.load(Ordering::Relaxed);
        let ((t_clk, u_clk), (t_sw, u_sw)) = bounds(s);
        let rows = [row_of(&r.per_set[0], tid)?, row_of(&r.per_set[1], tid)?];
        let plain = row_of(&r.plain, tid)?;
        let tc: Vec<u64> = rows.iter().map(|r| value(r, 0)).collect();
        let cs: Vec<u64> = rows.iter().map(|r| value(r, 1)).collect();
        let running: Vec<u64> = rows.iter().map(|r| r.time_running).collect();
        let what = format!(
            "thread {tid}: task-clock {tc:?} switches {cs:?} set running {running:?} \
             time_running {}; own clock [{t_clk}, {u_clk}], own switches [{t_sw}, {u_sw}] \
             (since LOAD)",
            plain.time_running
        );
        let tc_sum = tc[0] + tc[1];
        let cs_sum = cs[0] + cs[1];
        ensure!(
            (t_clk..=u_clk).contains(&tc_sum),
            "{what}: the sets' task-clock sum is outside the thread's own clock"
        );
        ensure!(
            (t_sw..=u_sw).contains(&cs_sum),
            "{what}: the sets' switch sum is outside the thread's own switches"
        );
        ensure!(
            tc == running,
            "{what}: a set's task-clock is not its running time"
        );
        ensure!(
            running[0] + running[1] == plain.time_running,
            "{what}: the sets' running times do not add up to the thread's"
        );
        ensure!(
            running.iter().all(|&n| n > 0),
            "{what}: a set never ran ({} ms of CPU, timeouts of {} ms)",
            tc_sum / MS,
            TIMEOUT / MS
        );
    }
    Ok(())
}

/// [`check_threads`] on the simulator: per thread, the sets' running times
/// add up to the thread's `time_running`, which lies within its own clock
/// since LOAD; each set ran and counted cycles on both PMDs. (The
/// simulator's cycles follow the thread's user time as the simulator sees
/// it: `pfm_test_parts` bounds them; here they only show that each heir's
/// copy of each set counted.)
fn check_threads_sim(r: &Reading, slots: &[Slot]) -> TestResult {
    for s in slots {
        let tid = s.tid.load(Ordering::Relaxed);
        let ((t_clk, u_clk), _) = bounds(s);
        let rows = [row_of(&r.per_set[0], tid)?, row_of(&r.per_set[1], tid)?];
        let plain = row_of(&r.plain, tid)?;
        let running: Vec<u64> = rows.iter().map(|r| r.time_running).collect();
        let what = format!(
            "thread {tid}: cycles {:?} / {:?}, set running {running:?}, time_running {}; \
             own clock [{t_clk}, {u_clk}] (since LOAD)",
            rows[0].values, rows[1].values, plain.time_running
        );
        ensure!(
            (t_clk..=u_clk).contains(&plain.time_running),
            "{what}: time_running outside the thread's own clock"
        );
        ensure!(
            running[0] + running[1] == plain.time_running,
            "{what}: the sets' running times do not add up to the thread's"
        );
        ensure!(
            running.iter().all(|&n| n > 0)
                && rows.iter().all(|r| value(r, 0) > 0 && value(r, 1) > 0),
            "{what}: a set never ran or never counted"
        );
    }
    Ok(())
}

/// The program's totals: each set's the sum of its rows, its task-clock
/// its running time; the sets' task-clock within the threads' own clocks
/// added up (`slots` blocked, `root` the tool's own edges if it is in the
/// program, else none).
fn check_totals(r: &Reading, slots: &[Slot], root: Option<(u64, u64)>, model: Model) -> TestResult {
    if model == Model::Sim {
        // Every thread blocked (the process case): each set's values are
        // its rows' sums, its running time theirs.
        for set in 0..2 {
            let (t, rows) = (&r.totals[set], &r.per_set[set]);
            for pmd in 0..2u16 {
                let sum: u64 = rows.iter().map(|r| value(r, pmd)).sum();
                ensure!(
                    t.values[usize::from(pmd)] == sum,
                    "set {set} PMD {pmd}: the program's {} is not its rows' sum {sum}",
                    t.values[usize::from(pmd)]
                );
            }
            let running: u64 = rows.iter().map(|r| r.time_running).sum();
            ensure!(
                t.time_running == running,
                "set {set}: the program's running time {} is not its rows' sum {running}",
                t.time_running
            );
        }
        return Ok(());
    }
    for set in 0..2 {
        let t = &r.totals[set];
        let rows = &r.per_set[set];
        ensure!(
            t.values[0] == t.time_running,
            "set {set}: the program's task-clock {} is not the set's running time {}",
            t.values[0],
            t.time_running
        );
        // The tool's own thread runs between the reads: only the blocked
        // threads' rows must add up exactly.
        if root.is_none() {
            let sum: u64 = rows.iter().map(|r| value(r, 1)).sum();
            ensure!(
                t.values[1] == sum,
                "set {set}: the program's switches {} are not its rows' sum {sum}",
                t.values[1]
            );
        }
    }
    let (lo, hi) = slots.iter().fold(root.unwrap_or((0, 0)), |(lo, hi), s| {
        let ((t, u), _) = bounds(s);
        (lo + t, hi + u)
    });
    let total = r.totals[0].values[0] + r.totals[1].values[0];
    ensure!(
        (lo..=hi).contains(&total),
        "the program's task-clock over both sets {total} is outside its threads' own clocks [{lo}, {hi}]"
    );
    Ok(())
}

/// After the workers exited: their rows (ended, one block per set) keep
/// what was read while they were blocked, at least, and each set's
/// task-clock is still its running time.
fn check_ended(ctx: &Context, before: &Reading, slots: &[Slot]) -> TestResult {
    let after = read_all(ctx)?;
    for s in slots {
        let tid = s.tid.load(Ordering::Relaxed);
        for set in 0..2 {
            let was = row_of(&before.per_set[set], tid)?;
            let now = row_of(&after.per_set[set], tid)?;
            ensure!(
                now.flags & PFM_THRFL_EXITED != 0,
                "thread {tid} exited but its set {set} row says flags {:#x}",
                now.flags
            );
            ensure!(
                value(now, 0) >= value(was, 0) && value(now, 1) >= value(was, 1),
                "thread {tid}, set {set}: ended row {:?} below the blocked read {:?}",
                now.values,
                was.values
            );
            ensure!(
                value(now, 0) == now.time_running,
                "thread {tid}, set {set}: ended row's task-clock {} is not its running time {}",
                value(now, 0),
                now.time_running
            );
        }
    }
    Ok(())
}

/// Case 1: `PFM_CTXFL_INHERIT` on the test's own thread, six threads
/// created after LOAD.
fn inherit_case() -> TestResult {
    let ctx = two_set_context(Model::Soft)?;
    ctx.set_flags(PFM_CTXFL_INHERIT).ctx("SET_FLAGS INHERIT")?;
    ctx.load(gettid() as u32)
        .ctx("LOAD with INHERIT and two sets")?;
    ctx.start().ctx("START")?;
    let shm = shared()?;
    let (rx, tx) = pipe()?;
    let workers: Vec<_> = (1..=WORKERS)
        .map(|i| {
            let slot = &shm.slots[i];
            std::thread::spawn(move || work(slot, rx))
        })
        .collect();
    let slots = &shm.slots[1..=WORKERS];
    wait(READY_WAIT, "the workers", || {
        slots.iter().all(|s| s.ready.load(Ordering::Acquire) == 1)
    })?;
    let r = read_all(&ctx)?;
    let root_after = thread_cpu_ns();
    release(tx, WORKERS);
    for w in workers {
        w.join().map_err(|_| "a worker panicked".to_string())?;
    }
    pfm_guest::tap::diag(format!(
        "inherit: rows {} per set, totals set 0 {:?} ({} / {}), set 1 {:?} ({} / {})",
        r.per_set[0].len(),
        r.totals[0].values,
        r.totals[0].time_enabled,
        r.totals[0].time_running,
        r.totals[1].values,
        r.totals[1].time_enabled,
        r.totals[1].time_running
    ));
    ensure!(
        r.per_set.iter().all(|rows| rows.len() == WORKERS + 1),
        "rows per set {:?}, {} expected (the root and its threads)",
        r.per_set.iter().map(Vec::len).collect::<Vec<_>>(),
        WORKERS + 1
    );
    check_threads(&r, slots, Model::Soft)?;
    // The root counted from its LOAD, and was read before `root_after`: its
    // part of the totals lies in [0, root_after].
    check_totals(&r, slots, Some((0, root_after)), Model::Soft)?;
    check_ended(&ctx, &r, slots)?;
    ctx.unload().ctx("UNLOAD")
}

/// Before a LOAD that will walk the calling thread: its `w` edge.
fn park(slot: &Slot) {
    slot.w_sw.store(thread_switches(), Ordering::Relaxed);
    slot.w_clk.store(thread_cpu_ns(), Ordering::Relaxed);
    slot.parked.store(1, Ordering::Release);
}

/// The program of case 2 (child mode `fs-program SHM_FD RELEASE_FD`): its
/// main thread and three threads exist, each past its `w` edge, when it
/// says so (`walked`); once loaded (`go`) it creates three more; all seven
/// then work.
fn program_role(shm_fd: RawFd, rx: RawFd) -> i32 {
    let Ok(shm) = map_shm(shm_fd) else {
        return 2;
    };
    let early: Vec<_> = (1..=WORKERS / 2)
        .map(|i| {
            let slot = &shm.slots[i];
            std::thread::spawn(move || {
                park(slot);
                while shm.go.load(Ordering::Acquire) == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
                work(slot, rx)
            })
        })
        .collect();
    while !shm.slots[1..=WORKERS / 2]
        .iter()
        .all(|s| s.parked.load(Ordering::Acquire) == 1)
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    park(&shm.slots[0]);
    shm.walked.store(1, Ordering::Release);
    while shm.go.load(Ordering::Acquire) == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let late: Vec<_> = (WORKERS / 2 + 1..=WORKERS)
        .map(|i| {
            let slot = &shm.slots[i];
            std::thread::spawn(move || work(slot, rx))
        })
        .collect();
    work(&shm.slots[0], rx);
    for w in early.into_iter().chain(late) {
        let _ = w.join();
    }
    0
}

/// Case 2: `PFM_LOAD_PROCESS` of another program: its main thread and
/// three threads exist at LOAD (walked), three more are created after it
/// (joining at birth); all seven multiplex the sets.
fn process_case(model: Model) -> TestResult {
    let fd = shm_file()?;
    let shm = map_shm(fd)?;
    let (rx, tx) = pipe()?;
    let mut child = std::process::Command::new("/proc/self/exe")
        .args(["fs-program", &fd.to_string(), &rx.to_string()])
        .spawn()
        .ctx("spawn the program")?;
    let pid = child.id();
    let result = (|| -> TestResult {
        wait(READY_WAIT, "the program's first threads", || {
            shm.walked.load(Ordering::Acquire) == 1
        })?;
        let ctx = two_set_context(model)?;
        ctx.load_process(pid).ctx("LOAD_PROCESS with two sets")?;
        ctx.start().ctx("START")?;
        shm.go.store(1, Ordering::Release);
        let slots = &shm.slots[..=WORKERS];
        wait(READY_WAIT, "the program's threads", || {
            slots.iter().all(|s| s.ready.load(Ordering::Acquire) == 1)
        })?;
        let r = read_all(&ctx)?;
        release(tx, WORKERS + 1);
        wait(READY_WAIT, "the threads' second edges", || {
            slots.iter().all(|s| s.done.load(Ordering::Acquire) == 1)
        })?;
        pfm_guest::tap::diag(format!(
            "process: rows {} per set, totals set 0 {:?}, set 1 {:?}",
            r.per_set[0].len(),
            r.totals[0].values,
            r.totals[1].values
        ));
        ensure!(
            r.per_set.iter().all(|rows| rows.len() == WORKERS + 1),
            "rows per set {:?}, {} expected (the process's threads)",
            r.per_set.iter().map(Vec::len).collect::<Vec<_>>(),
            WORKERS + 1
        );
        check_threads(&r, slots, model)?;
        check_totals(&r, slots, None, model)?;
        let status = child.wait().ctx("wait for the program")?;
        ensure!(status.success(), "the program ended with {status}");
        if model == Model::Soft {
            check_ended(&ctx, &r, &shm.slots[1..=WORKERS])?;
        }
        ctx.unload().ctx("UNLOAD")
    })();
    let _ = child.kill();
    let _ = child.wait();
    // SAFETY: Our own fds, closed once.
    unsafe {
        libc::close(rx);
        libc::close(tx);
        libc::close(fd);
    }
    result
}

/// READ_THREADS' set fields: a set that does not exist, a set without
/// `PFM_VALFL_SET`, an unknown vflag (EINVAL), on a loaded whole program.
fn threads_set_errnos() -> TestResult {
    let ctx = two_set_context(Model::Soft)?;
    ctx.set_flags(PFM_CTXFL_INHERIT).ctx("SET_FLAGS INHERIT")?;
    ctx.load(gettid() as u32).ctx("LOAD")?;
    for (what, r) in [
        ("set 2", ctx.read_threads_in_set(2, MASK).map(|_| ())),
        ("set 16", ctx.read_threads_in_set(16, MASK).map(|_| ())),
    ] {
        ensure!(
            r.as_ref().err().and_then(|e| e.errno()) == Some(libc::EINVAL),
            "{what}: {r:?}, EINVAL expected"
        );
    }
    ctx.read_threads_in_set(1, MASK).ctx("set 1")?;
    ctx.unload().ctx("UNLOAD")
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("fs-program") {
        let fd = |i: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(-1);
        std::process::exit(program_role(fd(2), fd(3)));
    }
    pfm_guest::child::dispatch();
    let mut t = Tap::new(PLAN);
    pfm_guest::watchdog(Duration::from_secs(400));
    t.require("insmod perfmon.ko pmu=soft", module::insmod(&["pmu=soft"]));
    t.run(
        "INHERIT with two sets: each thread's sets add up to its own clock and switches; the program's sets to its threads'",
        inherit_case,
    );
    t.run(
        "LOAD_PROCESS with two sets: walked and newborn threads multiplex, each within its own clock and switches",
        || process_case(Model::Soft),
    );
    t.run(
        "READ_THREADS of a set that does not exist: EINVAL",
        threads_set_errnos,
    );
    t.run("rmmod perfmon", module::rmmod);
    t.run("insmod perfmon.ko pmu=intel_arch_sim", || {
        module::insmod(&["pmu=intel_arch_sim"])
    });
    t.run(
        "intel_arch_sim, LOAD_PROCESS with two sets: every thread's copy of each set ran and counted, its sets' times its own, the program's the rows' sums",
        || process_case(Model::Sim),
    );
    t.run("rmmod perfmon (intel_arch_sim)", module::rmmod);
    t.finish();
}
