//! pfm_test_parts: a context's parts together (issue 33,
//! `pfm_ctx/parts.rs`): event sets that take turns, the sampling buffer,
//! the mapped counter page, and CLONE of a context that has them all; each
//! pair on the soft model (`pmu=soft`: task-clock and context-switches)
//! and on `pmu=intel_arch_sim` (user cycles, which the simulator counts at
//! 1 per ns the thread runs).
//!
//! The monitored thread is the test's own, running rounds of 300 us of CPU
//! and a 200 us nap (it sleeps and wakes every round), or exchanging bytes
//! with a partner on its CPU (it blocks at every exchange). The oracles are
//! the thread's own: its `CLOCK_THREAD_CPUTIME_ID` and its
//! `getrusage(RUSAGE_THREAD)` switch count, read around START and STOP
//! ([`OwnClock`]: task-clock and context-switches must lie in those
//! brackets, exactly), and arithmetic that follows from the rules where
//! they are exact; each bound is derived where it is checked.
//!
//! 1. Sets (2, time-switched every 2 ms) + page: the sets' running times
//!    add up to the context's (exactly), each set's enabled time is it;
//!    soft: each set's task-clock is its running time and their switches
//!    add up to the thread's own (getrusage bracket); sim: each set's
//!    cycles more than half its running time, the sets' together within
//!    the wall-time window ([`cycles_cover_running`],
//!    [`cycles_within_window`]). The page, read by the thread between
//!    rounds, names a set that exists, both sets over the run; its values
//!    are at most READ_VALUES of the set it names read right after
//!    (context-switches by at most the thread's own switches in between);
//!    a reading that includes the clock is never live while the sets take
//!    turns (task-clock marked stale, not extended); after STOP the page
//!    equals READ_VALUES of the set it names, exactly.
//! 2. Sets (time-switched) + buffer: the clock sampled every P in each set;
//!    each entry's `set` is the set that counted: per set, every period of
//!    that set's own clock total is an entry of that set or lost (lost
//!    exactly the shortfall), the k-th entry with the set's clock at least
//!    k × P; soft: each set's total is its running time, and every
//!    activation but the last writes exactly timeout / P entries (each
//!    activation is exactly the timeout of the set's task-clock): s × (timeout
//!    / P) entries for s set switches plus at most timeout / P, each run of
//!    one set a multiple of it (a late fold writes several activations of a
//!    set as one run).
//! 3. Sets (overflow-switched, after 2 overflows) + buffer: soft, on
//!    context switches of period 5 during a ping-pong with naps: entry j is
//!    set ⌊j / 2⌋ mod 2's, its value exactly 5 × (its index in its set +
//!    1), the entries ⌊S / 5⌋ for the S switches the sets counted, which lie
//!    in the thread's getrusage bracket, the set switches ⌊entries / 2⌋;
//!    sim, on cycles of period 1 ms: the periods accounted per set as in 2,
//!    every activation but the last at least 2 entries (a PMI late by a
//!    period may find two).
//! 4. Page + buffer (no sets), both mapped at once: the page's values at
//!    most the next READ_VALUES while counting, equal after STOP, set 0;
//!    the periods accounted as in 2; soft: task-clock is the running time,
//!    context-switches in the getrusage bracket.
//! 5. CLONE of a context with sets, a buffer and a page, after it ran: the
//!    clone is UNLOADED, with the template's flags, sets (flags, timeouts,
//!    registers used) and registers (PMD values and resets, per set), no
//!    buffer (mmap at `PFM_SMPL_OFFSET` ENODEV, SMPL_SETUP accepted) and a
//!    page of its own (LOADED while the template's stays UNLOADED); run, it
//!    takes turns in both sets and writes to its own buffer, none to the
//!    template's.
//! 6. Soft: `Context::read_mapped` (the page when it can serve) returns what
//!    READ_VALUES returns while the sets take turns.
//! 7. Every case's running time (task-clock on the soft model) within the
//!    thread's own CPU time read around START and STOP, exactly
//!    (Documentation/perfmon.rst, "Accuracy"); a context with a mapped page
//!    (1, 4 and the clone of 5) at most the wall time between them above it
//!    ("Never behind a reading": a preempted thread's stretch its page let
//!    readers see is counted). One test point for all the cases, so that a
//!    miss there does not hide the checks of each pair.

use std::os::fd::AsRawFd;
use std::time::Duration;

use perfmon::abi::*;
use perfmon::{errno_name, Context, SampleBuffer};
use pfm_guest::edges::{thread_cpu_ns, thread_switches};
use pfm_guest::raw::{self, ioctl_in, FileMap};
use pfm_guest::tap::diag;
use pfm_guest::{ensure, module, work, OwnClock, ResultExt, Tap, TestResult};

const PLAN: usize = 17;
const US: u64 = 1_000;
const MS: u64 = 1_000_000;
/// Every set's timeout (time-switched sets): 2 ms of the thread's running
/// time, a multiple of the clock period [`CLOCK_P`].
const TS: u64 = 2 * MS;
/// The clock's sampling period: 200 us of task-clock, or 200,000 cycles.
const CLOCK_P: u64 = 200 * US;
/// CPU time the thread spins per round, and the nap that follows.
const SPIN: u64 = 300 * US;
const NAP: Duration = Duration::from_micros(200);
/// The CPU time a measurement runs for.
const RUN: u64 = 200 * MS;
/// The sampling buffer's data pages (drop policy): 2,048 entries of 128
/// bytes, twice the ~1,000 that [`RUN`] / [`CLOCK_P`] writes.
const PAGES: u32 = 64;
/// intel_arch_sim: IA32_PERFEVTSEL core cycles (0x3c) in user mode.
const CYCLES_USR: u64 = 0x3c | 1 << 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Model {
    Soft,
    Sim,
}

impl Model {
    /// The PMC value of the model's clock: task-clock (ns) or user cycles
    /// (1 per simulated ns).
    fn clock(self) -> u64 {
        match self {
            Model::Soft => PFM_SOFT_EV_TASK_CLOCK,
            Model::Sim => CYCLES_USR,
        }
    }

    /// -`p` as the model's PMDs take a period: in the soft counter's width,
    /// or as a 64-bit value (the hardware model's PMDs are virtualised to
    /// 64 bits).
    fn minus(self, ctx: &Context, p: u64) -> Result<u64, String> {
        Ok(match self {
            Model::Soft => pfm_guest::minus_period(p, ctx.info().ctx("GET_INFO")?.counter_width),
            Model::Sim => p.wrapping_neg(),
        })
    }
}

// ---------------------------------------------------------------------------
// Helpers

fn open() -> Result<Context, String> {
    Context::open().ctx("open /dev/perfmon")
}

fn time_set(id: u16) -> PfmSetdesc {
    PfmSetdesc {
        set_id: id,
        set_flags: PFM_SETFL_TIME_SWITCH,
        set_timeout: TS,
        ..Default::default()
    }
}

fn ovfl_set(id: u16, cnt: u32, pmds: u64) -> PfmSetdesc {
    PfmSetdesc {
        set_id: id,
        set_flags: PFM_SETFL_OVFL_SWITCH,
        set_ovfl_switch_cnt: cnt,
        set_switch_pmds: pmds,
        ..Default::default()
    }
}

/// Programs set `set`: PMC n counts `events[n]` into PMD n, whose value
/// and resets are `values[n]` (a period's negative, or 0).
fn program(ctx: &Context, set: u16, events: &[u64], values: &[u64]) -> TestResult {
    let mut pmcs: Vec<PfmPmc> = (0u16..)
        .zip(events)
        .map(|(n, &ev)| PfmPmc {
            reg_num: n,
            reg_set: set,
            reg_value: ev,
            ..Default::default()
        })
        .collect();
    ctx.write_pmcs(&mut pmcs)
        .ctx(&format!("WRITE_PMCS set {set}"))?;
    let mut pmds: Vec<PfmPmd> = (0u16..)
        .zip(values)
        .map(|(n, &v)| PfmPmd {
            reg_num: n,
            reg_set: set,
            reg_value: v,
            reg_short_reset: v,
            reg_long_reset: v,
            ..Default::default()
        })
        .collect();
    ctx.write_pmds(&mut pmds)
        .ctx(&format!("WRITE_PMDS set {set}"))
}

/// READ_PMDS of PMDs `0..n` of set `set`.
fn read_pmds(ctx: &Context, set: u16, n: u16) -> Result<Vec<PfmPmd>, String> {
    let mut regs: Vec<PfmPmd> = (0..n)
        .map(|i| PfmPmd {
            reg_num: i,
            reg_set: set,
            ..Default::default()
        })
        .collect();
    ctx.read_pmds(&mut regs)
        .ctx(&format!("READ_PMDS set {set}"))?;
    Ok(regs)
}

/// A drop-policy buffer of [`PAGES`] pages whose PMD 0 entries record the
/// PMDs of `record`, mapped.
fn buffer(ctx: &Context, record: u64) -> Result<SampleBuffer, String> {
    ctx.setup_sampling(PAGES, &[(0, record)], true, 0)
        .ctx("SMPL_SETUP")?;
    ctx.map_samples(PAGES).ctx("mmap of the buffer")
}

fn ctx_info(ctx: &Context) -> Result<PfmCtxInfo, String> {
    let mut i = PfmCtxInfo::default();
    ioctl_in(ctx.as_raw_fd(), PFM_IOC_GET_STATE, &mut i)
        .map_err(|e| format!("GET_STATE: {}", errno_name(e)))?;
    Ok(i)
}

/// Spins until the calling thread has used `ns` of CPU time.
fn spin_cpu(ns: u64) {
    let c0 = thread_cpu_ns();
    while thread_cpu_ns() - c0 < ns {
        std::hint::spin_loop();
    }
}

/// Rounds of [`SPIN`] of CPU and a [`NAP`] until the thread has used
/// `cpu_ns`, `between` called after each nap; the rounds run.
fn spin_and_nap(cpu_ns: u64, mut between: impl FnMut() -> TestResult) -> Result<u64, String> {
    let c0 = thread_cpu_ns();
    let mut rounds = 0;
    while thread_cpu_ns() - c0 < cpu_ns {
        spin_cpu(SPIN);
        std::thread::sleep(NAP);
        between()?;
        rounds += 1;
    }
    Ok(rounds)
}

/// The simulator's cycles of one set (or context) against its running
/// time `running`: more than half of it. The counters are off the PMU in
/// the switch path and the multiplexing timer's and the PMI's handlers,
/// which the runtime covers, and under TCG a vCPU the host deschedules in
/// one stretches it by the stall: 93-95% measured in pfm_test_hwsim (2 ms
/// turns, no sampling, a quiet host), 69-80% here with a sample every
/// 200 us and another guest on the host's two CPUs. No bound on that cost
/// can be derived in a guest, so this only asks that the set counted in
/// most of its turns (a set never installed counts nothing). Its running
/// time is no upper bound for a thread that sleeps (pfm_test_hwsim's
/// `cycles_within_window`: the switch-out hook runs after the scheduler
/// accounted the slice, past the newidle balance, and each such tail is a
/// user cycle per ns to the simulator; seen 6.5 ms over 200 ms of naps
/// here): the bound above is [`cycles_within_window`].
fn cycles_cover_running(cycles: u64, running: u64) -> bool {
    cycles > running / 2
}

/// The sets' cycles together within the wall time of the monitored window
/// (`window`, `CLOCK_MONOTONIC` read before START and after STOP): the
/// counters count only while one set's image is on the PMU, inside it, and
/// one at a time. A set whose image stayed on through another's turns, or
/// whose count was also another's, would add that time again.
fn cycles_within_window(cycles: &[u64], window: u64) -> TestResult {
    let sum: u64 = cycles.iter().sum();
    ensure!(
        sum <= window,
        "cycles {cycles:?} add up to {sum}, more than the {window} ns window"
    );
    Ok(())
}

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Every period a set's own count crossed (⌊`totals[k]` / `p`⌋) is an
/// entry of that set or lost: per set at most that many entries, the
/// shortfalls adding up to `lost` exactly (a fold that finds more than 64
/// periods, a vCPU stalled that long, writes 64 and counts the rest in
/// `lost`). Checks each set's entries ([`per_set_entries`]).
fn periods_accounted(entries: &[PfmSmplEntry], totals: &[u64], p: u64, lost: u64) -> TestResult {
    let mut short = 0;
    for (set, &total) in (0u16..).zip(totals) {
        let n = per_set_entries(entries, set, p, total)?;
        let periods = total / p;
        ensure!(
            n <= periods,
            "set {set}: {n} entries for its total {total}: only {periods} periods of {p}"
        );
        short += periods - n;
    }
    ensure!(
        short == lost,
        "{short} periods without an entry, {lost} entries lost (totals {totals:?}, period {p})"
    );
    Ok(())
}

/// The cases whose running time fell outside the thread's own CPU-time
/// bracket, and how many were checked (the last test point reports them).
static OWN_CLOCK: std::sync::Mutex<(u64, Vec<String>)> = std::sync::Mutex::new((0, Vec::new()));

/// Records whether the context's running time `t` (its task-clock, on the
/// soft model) lies in the thread's own CPU time read around START and
/// STOP (`own`): exactly, as Documentation/perfmon.rst ("Accuracy") says of
/// task-clock. Collected for one test point of its own, so that a failure
/// there does not hide the checks of each pair.
fn within_own_clock(case: &str, t: u64, own: &OwnClock) {
    let (lo, hi) = own.bounds();
    let mut o = OWN_CLOCK.lock().unwrap_or_else(|e| e.into_inner());
    o.0 += 1;
    if !(lo..=hi).contains(&t) {
        let off = if t > hi {
            format!("{} ns above", t - hi)
        } else {
            format!("{} ns below", lo - t)
        };
        o.1.push(format!(
            "{case}: running time {t}, own CPU time [{lo}, {hi}]: {off}"
        ));
    }
}

/// [`within_own_clock`] for a context with a mapped page, whose running
/// time may exceed the thread's own CPU time by design
/// (Documentation/perfmon.rst, "Never behind a reading"): a preempted
/// thread runs on in user mode after the wake-up that ends its slice, the
/// page lets readers extend its time meanwhile, and the module counts what
/// they may have seen, a stretch the scheduler charges to no one (seen on
/// a host under `make check STRESS=1`: 1.62 ms over 9 cases). The thread
/// did run then, so its running time is bounded above by the wall time
/// between START and STOP (`window`), below by its own CPU time; above its
/// own, the excess is reported, not failed.
fn within_own_clock_mapped(case: &str, t: u64, own: &OwnClock, window: u64) {
    let (_, hi) = own.bounds();
    if t > hi && t <= window {
        diag(format!(
            "{case}: running time {t}, {} ns above the thread's own CPU time (a mapped page's preemption stretches), within the window {window}",
            t - hi
        ));
        let mut o = OWN_CLOCK.lock().unwrap_or_else(|e| e.into_inner());
        o.0 += 1;
        return;
    }
    within_own_clock(case, t, own);
}

/// The runs of equal `set` in `entries`, in order: (set, length).
fn runs_of(entries: &[PfmSmplEntry]) -> Vec<(u16, usize)> {
    let mut runs: Vec<(u16, usize)> = Vec::new();
    for e in entries {
        match runs.last_mut() {
            Some((s, n)) if *s == e.set => *n += 1,
            _ => runs.push((e.set, 1)),
        }
    }
    runs
}

/// Entries of set `set` of `entries` whose PMD 0 recorded a running total
/// (their `values[0]`): the k-th (from 1) at least k × `p` (the total
/// crossed k periods of the set's own count), at most `total` (the set's
/// total after STOP), never decreasing. Returns their number.
fn per_set_entries(entries: &[PfmSmplEntry], set: u16, p: u64, total: u64) -> Result<u64, String> {
    let mut k = 0u64;
    let mut last = 0;
    for e in entries.iter().filter(|e| e.set == set) {
        k += 1;
        let v = e.values[0];
        ensure!(
            v >= k * p && v <= total && v >= last,
            "set {set}'s entry {k} (seq {}): recorded {v}, after {last}; at least {} and at most the set's total {total} expected",
            e.seq,
            k * p
        );
        last = v;
    }
    Ok(k)
}

/// Every entry is the thread's, of PMD 0, recording one value, in a set
/// below `sets`.
fn entries_sane(entries: &[PfmSmplEntry], sets: u16) -> TestResult {
    let tid = perfmon::process::gettid();
    for e in entries {
        ensure!(
            e.tid == tid && e.ovfl_pmd == 0 && e.nvalues == 1 && e.set < sets,
            "entry {e:?}: tid {tid}, PMD 0, one value, set below {sets} expected"
        );
    }
    Ok(())
}

/// The calling thread pinned to CPU `cpu` until drop (then all CPUs).
struct Pin;

impl Pin {
    fn to(cpu: usize) -> Result<Pin, String> {
        work::pin_to(cpu)?;
        Ok(Pin)
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        let all: Vec<usize> = (0..perfmon::process::online_cpus()).collect();
        let _ = perfmon::process::set_affinity(0, &all);
    }
}

/// A thread on CPU 0 that answers every byte written to it; the caller,
/// pinned to CPU 0 too, blocks once per exchange.
struct Partner {
    to: Option<std::fs::File>,
    from: std::fs::File,
    join: Option<std::thread::JoinHandle<()>>,
    _pin: Pin,
}

impl Partner {
    fn start() -> Result<Self, String> {
        let pin = Pin::to(0)?;
        let (a_r, a_w) = raw::pipe().map_err(|e| format!("pipe: {}", errno_name(e)))?;
        let (b_r, b_w) = raw::pipe().map_err(|e| format!("pipe: {}", errno_name(e)))?;
        let join = std::thread::spawn(move || {
            let _ = work::pin_to(0);
            let (r, w) = (a_r.as_raw_fd(), b_w.as_raw_fd());
            while let Ok(b) = raw::read_fd(r, 1) {
                if b.is_empty() || raw::write_fd(w, &b).is_err() {
                    break;
                }
            }
        });
        Ok(Partner {
            to: Some(a_w),
            from: b_r,
            join: Some(join),
            _pin: pin,
        })
    }

    fn exchange(&self) -> TestResult {
        let to = self.to.as_ref().map_or(-1, |f| f.as_raw_fd());
        raw::write_fd(to, b"x").map_err(|e| format!("write: {}", errno_name(e)))?;
        raw::read_fd(self.from.as_raw_fd(), 1).map_err(|e| format!("read: {}", errno_name(e)))?;
        Ok(())
    }
}

impl Drop for Partner {
    fn drop(&mut self) {
        drop(self.to.take());
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

/// The sets' (GETINFO) running times add up to the context's `t`, each
/// set's enabled time is `t` (exact: the module charges each fold's time
/// to the sets in turn), and `t` lies in the thread's own CPU-time bracket
/// (`own`, recorded by [`within_own_clock`] under `case`; by
/// [`within_own_clock_mapped`] with the wall-time `window` of a context
/// with a mapped page): the conservation every case with sets checks.
fn conservation(
    case: &str,
    infos: &[PfmSetinfo],
    t: u64,
    own: &OwnClock,
    mapped_window: Option<u64>,
) -> TestResult {
    let sum: u64 = infos.iter().map(|i| i.set_time_running).sum();
    ensure!(
        sum == t,
        "the sets' running times add up to {sum}, the context's is {t}"
    );
    for i in infos {
        ensure!(
            i.set_time_enabled == t,
            "set {}: time_enabled {} != the context's running time {t}",
            i.set_id,
            i.set_time_enabled
        );
    }
    match mapped_window {
        Some(window) => within_own_clock_mapped(case, t, own, window),
        None => within_own_clock(case, t, own),
    }
    Ok(())
}

fn describe(infos: &[PfmSetinfo]) -> String {
    infos
        .iter()
        .map(|i| {
            format!(
                "set {}: runs {} running {} left {} cause {}",
                i.set_id, i.set_runs, i.set_time_running, i.set_timeout_left, i.set_last_cause
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

// ---------------------------------------------------------------------------
// 1. Sets + page

/// Case 1 (see the header). PMD 0: the clock, in each set; soft: PMD 1,
/// context-switches.
fn sets_and_page(model: Model) -> TestResult {
    let (mask, n) = match model {
        Model::Soft => (0b11u64, 2u16),
        Model::Sim => (0b1, 1),
    };
    let events: Vec<u64> = match model {
        Model::Soft => vec![model.clock(), PFM_SOFT_EV_CONTEXT_SWITCHES],
        Model::Sim => vec![model.clock()],
    };
    let zeros = vec![0u64; events.len()];
    let ctx = open()?;
    ctx.create_sets(&mut [time_set(0), time_set(1)])
        .ctx("CREATE_SETS")?;
    for set in 0..2 {
        program(&ctx, set, &events, &zeros)?;
    }
    let page = ctx.map_counter_page().ctx("mmap of the page")?;
    ctx.load(0).ctx("LOAD")?;
    let mut own = OwnClock::default();
    let w0 = monotonic_ns();
    own.around_start(|| ctx.start()).ctx("START")?;
    let mut named = [0u64; 2];
    let mut live_with_clock = 0u64;
    let mut busy = 0u64;
    let mut bad: Vec<String> = Vec::new();
    let rounds = spin_and_nap(RUN, || {
        let sw0 = thread_switches();
        let Some(r) = page.read(mask) else {
            busy += 1;
            return Ok(());
        };
        let set = r.set();
        ensure!(set < 2, "the page names set {set}: only 0 and 1 exist");
        named[usize::from(set)] += 1;
        let v = ctx
            .read_set_values(set, mask)
            .ctx(&format!("READ_VALUES set {set}"))?;
        let sw = thread_switches() - sw0;
        // The clock is marked stale while the sets take turns: a reading
        // of it is the last update's, never live.
        if r.live() {
            live_with_clock += 1;
        }
        // The set's values only grow; its context-switches move only at
        // the thread's switches, of which there were `sw` between the two
        // reads.
        let ok = r.value(0) <= v.values[0]
            && (model == Model::Sim
                || (r.value(1) <= v.values[1] && v.values[1] - r.value(1) <= sw));
        if !ok && bad.len() < 5 {
            bad.push(format!(
                "page set {set} [{}, {}], READ_VALUES {:?}, {sw} switches between",
                r.value(0),
                r.value(1),
                v.values
            ));
        }
        Ok(())
    })?;
    own.around_stop(|| ctx.stop()).ctx("STOP")?;
    let window = monotonic_ns() - w0;
    // Stopped: nothing moves, the page is exact.
    let r = page.read(mask).ok_or("page read: always updating")?;
    let fin = ctx
        .read_set_values(r.set(), mask)
        .ctx("READ_VALUES of the set the page names")?;
    let t = ctx.read_values(mask).ctx("READ_VALUES")?.time_running;
    let per_set = [
        ctx.read_set_values(0, mask).ctx("READ_VALUES set 0")?,
        ctx.read_set_values(1, mask).ctx("READ_VALUES set 1")?,
    ];
    let infos = ctx.sets_info(&[0, 1]).ctx("GETINFO_SETS")?;
    ctx.unload().ctx("UNLOAD")?;
    diag(format!(
        "{model:?}: T {t} ns, {rounds} rounds; {}; the page named set 0 {} times, set 1 {}; {live_with_clock} live readings with the clock, {busy} reads always updating",
        describe(&infos),
        named[0],
        named[1]
    ));
    ensure!(
        bad.is_empty(),
        "page ahead of READ_VALUES: {}",
        bad.join("; ")
    );
    conservation(
        &format!("{model:?} sets + page"),
        &infos,
        t,
        &own,
        Some(window),
    )?;
    for i in &infos {
        ensure!(
            i.set_runs >= 2,
            "set {}: {} runs in {t} ns of {TS} ns turns",
            i.set_id,
            i.set_runs
        );
    }
    // Each set ran at least two turns of 2 ms, and the page was read every
    // 500 us of CPU: it named each set.
    ensure!(
        named[0] > 0 && named[1] > 0,
        "the page named set 0 {} times and set 1 {}: both took turns",
        named[0],
        named[1]
    );
    ensure!(
        live_with_clock == 0,
        "{live_with_clock} live readings of the clock while the sets took turns (stale expected)"
    );
    let (values, status) = (
        (0..n).map(|i| r.value(i)).collect::<Vec<_>>(),
        (r.counting(), r.time_running()),
    );
    ensure!(
        values == fin.values && status == (false, t),
        "after STOP the page (set {}) shows {values:?}, counting {}, running {}; READ_VALUES of that set {:?}, running {t}",
        r.set(),
        status.0,
        status.1,
        fin.values
    );
    match model {
        Model::Soft => {
            // Each set's task-clock is exactly its running time (the soft
            // model charges the time to the sets split exactly at each
            // timeout), and their switches add up to the thread's own.
            for (k, i) in infos.iter().enumerate() {
                ensure!(
                    per_set[k].values[0] == i.set_time_running,
                    "set {k}: task-clock {} != its running time {}",
                    per_set[k].values[0],
                    i.set_time_running
                );
            }
            let switches = per_set[0].values[1] + per_set[1].values[1];
            let (lo, hi) = own.switch_bounds();
            ensure!(
                (lo..=hi).contains(&switches),
                "the sets' context-switches add up to {switches}, the thread's own count is in [{lo}, {hi}]"
            );
        }
        Model::Sim => {
            for (k, i) in infos.iter().enumerate() {
                ensure!(
                    cycles_cover_running(per_set[k].values[0], i.set_time_running),
                    "set {k}: cycles {} vs its running time {}",
                    per_set[k].values[0],
                    i.set_time_running
                );
            }
            cycles_within_window(&[per_set[0].values[0], per_set[1].values[0]], window)?;
        }
    }
    Ok(())
}

/// Case 6: `Context::read_mapped` serves from the page when the page can
/// give READ_VALUES' answer; READ_VALUES without `PFM_VALFL_SET` reads set
/// 0. While the sets take turns, each read_mapped of context-switches is
/// followed by a READ_VALUES: where the thread did not switch between the
/// two (its own count), nothing could change, and they must be equal.
fn read_mapped_with_sets() -> TestResult {
    let events = [PFM_SOFT_EV_TASK_CLOCK, PFM_SOFT_EV_CONTEXT_SWITCHES];
    let ctx = open()?;
    ctx.create_sets(&mut [time_set(0), time_set(1)])
        .ctx("CREATE_SETS")?;
    // Set 1 starts far from set 0, so that one set's count is never the
    // other's.
    program(&ctx, 0, &events, &[0, 0])?;
    program(&ctx, 1, &events, &[0, 1 << 40])?;
    ctx.load(0).ctx("LOAD")?;
    ctx.start().ctx("START")?;
    let (mut compared, mut bad) = (0u64, Vec::new());
    spin_and_nap(RUN / 2, || {
        let sw0 = thread_switches();
        let m = ctx.read_mapped(0b10).ctx("read_mapped")?;
        let v = ctx.read_values(0b10).ctx("READ_VALUES")?;
        if thread_switches() == sw0 {
            compared += 1;
            if m.values != v.values && bad.len() < 5 {
                bad.push(format!(
                    "read_mapped {:?}, READ_VALUES {:?}",
                    m.values, v.values
                ));
            }
        }
        Ok(())
    })?;
    ctx.stop().ctx("STOP")?;
    ctx.unload().ctx("UNLOAD")?;
    diag(format!(
        "{compared} comparisons without a switch between, {} differ",
        bad.len()
    ));
    ensure!(compared > 0, "no pair of reads without a switch between");
    ensure!(bad.is_empty(), "{}", bad.join("; "));
    Ok(())
}

// ---------------------------------------------------------------------------
// 2. Sets (time) + buffer

/// Case 2 (see the header). In each set PMD 0 is the clock sampled every
/// [`CLOCK_P`], PMD 1 the clock, recorded by every entry.
fn time_sets_and_buffer(model: Model) -> TestResult {
    let ctx = open()?;
    ctx.create_sets(&mut [time_set(0), time_set(1)])
        .ctx("CREATE_SETS")?;
    let minus_p = model.minus(&ctx, CLOCK_P)?;
    for set in 0..2 {
        program(&ctx, set, &[model.clock(), model.clock()], &[minus_p, 0])?;
    }
    let mut buf = buffer(&ctx, 1 << 1)?;
    ctx.load(0).ctx("LOAD")?;
    let mut own = OwnClock::default();
    let w0 = monotonic_ns();
    own.around_start(|| ctx.start()).ctx("START")?;
    let rounds = spin_and_nap(RUN, || Ok(()))?;
    own.around_stop(|| ctx.stop()).ctx("STOP")?;
    let window = monotonic_ns() - w0;
    let entries = buf.take();
    let lost = buf.stats().lost;
    let t = ctx.read_values(0b1).ctx("READ_VALUES")?.time_running;
    let totals = [
        read_pmds(&ctx, 0, 2)?[1].reg_value,
        read_pmds(&ctx, 1, 2)?[1].reg_value,
    ];
    let infos = ctx.sets_info(&[0, 1]).ctx("GETINFO_SETS")?;
    ctx.unload().ctx("UNLOAD")?;
    let runs = runs_of(&entries);
    let lens: Vec<usize> = runs.iter().map(|r| r.1).collect();
    diag(format!(
        "{model:?}: T {t} ns, {rounds} rounds; {}; totals {totals:?}; {} entries, {lost} lost, {} runs of one set: {lens:?}",
        describe(&infos),
        entries.len(),
        runs.len()
    ));
    entries_sane(&entries, 2)?;
    conservation(
        &format!("{model:?} time sets + buffer"),
        &infos,
        t,
        &own,
        None,
    )?;
    // One entry per period each set's own clock crossed.
    periods_accounted(&entries, &totals, CLOCK_P, lost)?;
    for set in 0..2u16 {
        let total = totals[usize::from(set)];
        let running = infos[usize::from(set)].set_time_running;
        match model {
            Model::Soft => ensure!(
                total == running,
                "set {set}: task-clock {total} != its running time {running}"
            ),
            Model::Sim => ensure!(
                cycles_cover_running(total, running),
                "set {set}: cycles {total} vs its running time {running}"
            ),
        }
    }
    if model == Model::Sim {
        cycles_within_window(&totals, window)?;
    }
    let s = infos
        .iter()
        .map(|i| i.set_runs)
        .sum::<u64>()
        .saturating_sub(1);
    // The entries change sets at most at every set switch.
    ensure!(
        runs.len() as u64 <= s + 1,
        "{} runs of one set in the entries for {s} set switches",
        runs.len()
    );
    if model == Model::Soft && lost == 0 {
        // Each activation charges exactly TS of task-clock to its set, and
        // the set's PMD 0 resumes where it left: it crosses exactly TS / P
        // periods per activation (TS a multiple of P). Only the last,
        // stopped by STOP, may have fewer. One fold may charge several
        // activations (a late fold: under TCG a host stall of the vCPU is
        // runtime to the thread; whole rounds through both sets are
        // charged in one step, each set's share written as one run), so a
        // run of one set is a whole number of activations, not one: every
        // run but the last a positive multiple of TS / P, and the entries
        // are exactly TS / P for each of the s ended activations plus at
        // most TS / P for the last.
        let per = (TS / CLOCK_P) as usize;
        let (_, full) = lens.split_last().ok_or("no entry")?;
        ensure!(
            full.iter().all(|&l| l > 0 && l % per == 0),
            "runs of one set {lens:?}: each but the last a multiple of {per} expected"
        );
        let ended = usize::try_from(s).map_err(|e| e.to_string())? * per;
        ensure!(
            (ended..=ended + per).contains(&entries.len()),
            "{} entries for {s} set switches: {per} per ended activation and at most {per} for the last expected",
            entries.len()
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// 3. Sets (overflow) + buffer

/// Case 3, soft: PMD 0 counts context switches with period 5, sampled, and
/// each set switches after 2 of its overflows; PMD 1 counts them too,
/// recorded. The thread ping-pongs (3 exchanges) and naps, per round.
fn ovfl_sets_and_buffer_soft() -> TestResult {
    const P: u64 = 5;
    const CS: u64 = PFM_SOFT_EV_CONTEXT_SWITCHES;
    let ctx = open()?;
    ctx.create_sets(&mut [ovfl_set(0, 2, 0b1), ovfl_set(1, 2, 0b1)])
        .ctx("CREATE_SETS")?;
    let minus_p = Model::Soft.minus(&ctx, P)?;
    for set in 0..2 {
        program(&ctx, set, &[CS, CS], &[minus_p, 0])?;
    }
    let mut buf = buffer(&ctx, 1 << 1)?;
    let partner = Partner::start()?;
    ctx.load(0).ctx("LOAD")?;
    let mut own = OwnClock::default();
    own.around_start(|| ctx.start()).ctx("START")?;
    for _ in 0..150 {
        for _ in 0..3 {
            partner.exchange()?;
        }
        std::thread::sleep(NAP);
    }
    own.around_stop(|| ctx.stop()).ctx("STOP")?;
    drop(partner);
    let entries = buf.take();
    let lost = buf.stats().lost;
    let totals = [
        read_pmds(&ctx, 0, 2)?[1].reg_value,
        read_pmds(&ctx, 1, 2)?[1].reg_value,
    ];
    let infos = ctx.sets_info(&[0, 1]).ctx("GETINFO_SETS")?;
    ctx.unload().ctx("UNLOAD")?;
    let s_total = totals[0] + totals[1];
    let switches = infos
        .iter()
        .map(|i| i.set_runs)
        .sum::<u64>()
        .saturating_sub(1);
    diag(format!(
        "soft: {}; switches counted {totals:?} (own [{}, {}]); {} entries, {lost} lost, {switches} set switches",
        describe(&infos),
        own.switch_bounds().0,
        own.switch_bounds().1,
        entries.len()
    ));
    ensure!(lost == 0, "{lost} entries lost");
    entries_sane(&entries, 2)?;
    let (lo, hi) = own.switch_bounds();
    ensure!(
        (lo..=hi).contains(&s_total),
        "the sets' switches add up to {s_total}, the thread's own count is in [{lo}, {hi}]"
    );
    // Every 5th switch overflows, every 2nd overflow switches sets, the
    // next switch counts in the other set: entry j is set (j / 2) mod 2's,
    // the (k + 1)-th of its set with exactly 5 (k + 1) switches counted.
    ensure!(
        entries.len() as u64 == s_total / P,
        "{} entries for {s_total} switches of period {P}",
        entries.len()
    );
    let mut seen = [0u64; 2];
    for (j, e) in entries.iter().enumerate() {
        let want = ((j / 2) % 2) as u16;
        let k = &mut seen[usize::from(e.set.min(1))];
        *k += 1;
        ensure!(
            e.set == want && e.values[0] == P * *k,
            "entry {j}: set {} with {} switches; set {want}, {} expected",
            e.set,
            e.values[0],
            P * *k
        );
    }
    ensure!(
        switches == entries.len() as u64 / 2,
        "{switches} set switches for {} overflows (one per 2)",
        entries.len()
    );
    Ok(())
}

/// Case 3, sim: PMD 0 counts cycles with period 1 ms, sampled, each set
/// switching after 2 of its overflows; PMD 1 the cycles, recorded.
fn ovfl_sets_and_buffer_sim() -> TestResult {
    const P: u64 = MS;
    let ctx = open()?;
    ctx.create_sets(&mut [ovfl_set(0, 2, 0b1), ovfl_set(1, 2, 0b1)])
        .ctx("CREATE_SETS")?;
    for set in 0..2 {
        program(&ctx, set, &[CYCLES_USR, CYCLES_USR], &[P.wrapping_neg(), 0])?;
    }
    let mut buf = buffer(&ctx, 1 << 1)?;
    ctx.load(0).ctx("LOAD")?;
    let mut own = OwnClock::default();
    let w0 = monotonic_ns();
    own.around_start(|| ctx.start()).ctx("START")?;
    spin_and_nap(RUN, || Ok(()))?;
    own.around_stop(|| ctx.stop()).ctx("STOP")?;
    let window = monotonic_ns() - w0;
    let entries = buf.take();
    let lost = buf.stats().lost;
    let t = ctx.read_values(0b1).ctx("READ_VALUES")?.time_running;
    let totals = [
        read_pmds(&ctx, 0, 2)?[1].reg_value,
        read_pmds(&ctx, 1, 2)?[1].reg_value,
    ];
    let infos = ctx.sets_info(&[0, 1]).ctx("GETINFO_SETS")?;
    ctx.unload().ctx("UNLOAD")?;
    let runs = runs_of(&entries);
    let lens: Vec<usize> = runs.iter().map(|r| r.1).collect();
    let s = infos
        .iter()
        .map(|i| i.set_runs)
        .sum::<u64>()
        .saturating_sub(1);
    diag(format!(
        "sim: T {t}; {}; cycles {totals:?}; {} entries, {lost} lost, {s} set switches, runs of one set {lens:?}",
        describe(&infos),
        entries.len()
    ));
    // The first run longer than 2: its entries' cycles (equal values: one
    // PMI found several periods) and timestamps.
    let mut at = 0;
    for &(_, len) in &runs {
        if len > 2 {
            let run: Vec<(u64, u64)> = entries[at..at + len]
                .iter()
                .map(|e| (e.values[0], e.tstamp))
                .collect();
            diag(format!("a run of {len} entries (cycles, tstamp): {run:?}"));
            break;
        }
        at += len;
    }
    entries_sane(&entries, 2)?;
    conservation("Sim overflow sets + buffer", &infos, t, &own, None)?;
    periods_accounted(&entries, &totals, P, lost)?;
    for set in 0..2u16 {
        let total = totals[usize::from(set)];
        let running = infos[usize::from(set)].set_time_running;
        ensure!(
            cycles_cover_running(total, running),
            "set {set}: cycles {total} vs its running time {running}"
        );
    }
    cycles_within_window(&totals, window)?;
    // A set switches at the fold after its second overflow: every
    // activation that ended wrote at least 2 entries (more if a PMI, held
    // off past a period, found two), the last at most what it had.
    ensure!(s >= 10, "{s} set switches in {t} ns of 2 ms activations");
    let (_, ended) = lens.split_last().ok_or("no entry")?;
    ensure!(
        ended.iter().all(|&l| l >= 2),
        "runs of one set {lens:?}: each ended activation at least 2 entries"
    );
    ensure!(
        runs.len() as u64 == s || runs.len() as u64 == s + 1,
        "{} runs of one set for {s} set switches",
        runs.len()
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// 4. Page + buffer

/// Case 4 (see the header). PMD 0: the clock sampled every [`CLOCK_P`];
/// PMD 1: the clock, recorded; soft: PMD 2, context-switches.
fn page_and_buffer(model: Model) -> TestResult {
    let ctx = open()?;
    let minus_p = model.minus(&ctx, CLOCK_P)?;
    let (events, values, mask) = match model {
        Model::Soft => (
            vec![model.clock(), model.clock(), PFM_SOFT_EV_CONTEXT_SWITCHES],
            vec![minus_p, 0, 0],
            0b111u64,
        ),
        Model::Sim => (vec![model.clock(), model.clock()], vec![minus_p, 0], 0b11),
    };
    program(&ctx, 0, &events, &values)?;
    let mut buf = buffer(&ctx, 1 << 1)?;
    let page = ctx.map_counter_page().ctx("mmap of the page")?;
    ctx.load(0).ctx("LOAD")?;
    let mut own = OwnClock::default();
    let w0 = monotonic_ns();
    own.around_start(|| ctx.start()).ctx("START")?;
    let mut bad: Vec<String> = Vec::new();
    let mut live = 0u64;
    spin_and_nap(RUN, || {
        let sw0 = thread_switches();
        let Some(r) = page.read(mask) else {
            return Ok(());
        };
        let v = ctx.read_values(mask).ctx("READ_VALUES")?;
        let sw = thread_switches() - sw0;
        live += u64::from(r.live());
        // The clock total only grows (a live reading extends it to the
        // read, READ_VALUES later); context-switches move only at the
        // thread's `sw` switches between.
        let ok = r.set() == 0
            && r.value(1) <= v.values[1]
            && (model == Model::Sim
                || (r.value(2) <= v.values[2] && v.values[2] - r.value(2) <= sw));
        if !ok && bad.len() < 5 {
            bad.push(format!(
                "page (set {}) [{}, {}, {}], READ_VALUES {:?}, {sw} switches between",
                r.set(),
                r.value(0),
                r.value(1),
                r.value(2),
                v.values
            ));
        }
        Ok(())
    })?;
    own.around_stop(|| ctx.stop()).ctx("STOP")?;
    let window = monotonic_ns() - w0;
    let r = page.read(mask).ok_or("page read: always updating")?;
    let fin = ctx.read_values(mask).ctx("READ_VALUES")?;
    let entries = buf.take();
    let lost = buf.stats().lost;
    ctx.unload().ctx("UNLOAD")?;
    let total = fin.values[1];
    diag(format!(
        "{model:?}: values {:?}, T {}; {} entries, {lost} lost; {live} live page readings",
        fin.values,
        fin.time_running,
        entries.len()
    ));
    ensure!(
        bad.is_empty(),
        "page ahead of READ_VALUES: {}",
        bad.join("; ")
    );
    let page_values: Vec<u64> = (0..fin.values.len() as u16).map(|i| r.value(i)).collect();
    ensure!(
        page_values == fin.values && r.set() == 0 && r.time_running() == fin.time_running,
        "after STOP the page shows {page_values:?} (set {}, running {}), READ_VALUES {:?} (running {})",
        r.set(),
        r.time_running(),
        fin.values,
        fin.time_running
    );
    entries_sane(&entries, 1)?;
    periods_accounted(&entries, &[total], CLOCK_P, lost)?;
    within_own_clock_mapped(
        &format!("{model:?} page + buffer"),
        fin.time_running,
        &own,
        window,
    );
    match model {
        Model::Soft => {
            ensure!(
                total == fin.time_running,
                "task-clock {total} != the running time {}",
                fin.time_running
            );
            let (lo, hi) = own.switch_bounds();
            ensure!(
                (lo..=hi).contains(&fin.values[2]),
                "context-switches {} outside the thread's own [{lo}, {hi}]",
                fin.values[2]
            );
        }
        Model::Sim => {
            ensure!(
                cycles_cover_running(total, fin.time_running),
                "cycles {total} vs the running time {}",
                fin.time_running
            );
            cycles_within_window(&[total], window)?;
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// 5. CLONE of sets + buffer + page

/// Case 5 (see the header). Each set: PMD 0 the clock sampled every
/// [`CLOCK_P`], PMD 1 the clock (set 1's starting at a value of its own).
fn clone_of_parts(model: Model) -> TestResult {
    const SET1_START: u64 = 1 << 32;
    let template = open()?;
    template
        .set_flags(PFM_CTXFL_NO_MSG)
        .ctx("SET_FLAGS NO_MSG")?;
    template
        .create_sets(&mut [time_set(0), time_set(1)])
        .ctx("CREATE_SETS")?;
    let minus_p = model.minus(&template, CLOCK_P)?;
    program(&template, 0, &[model.clock(), model.clock()], &[minus_p, 0])?;
    program(
        &template,
        1,
        &[model.clock(), model.clock()],
        &[minus_p, SET1_START],
    )?;
    let mut tbuf = buffer(&template, 1 << 1)?;
    let tpage = template.map_counter_page().ctx("mmap of the page")?;
    // The template runs once: the clone copies it as it is after a run.
    template.load(0).ctx("LOAD")?;
    template.start().ctx("START")?;
    spin_and_nap(20 * MS, || Ok(()))?;
    template.stop().ctx("STOP")?;
    template.unload().ctx("UNLOAD")?;
    let written = tbuf.take().len();
    let lost_before = tbuf.stats().lost;
    ensure!(written > 0, "the template wrote no entry");

    let clone = template.clone_programmed().ctx("CLONE")?;
    let (ti, ci) = (ctx_info(&template)?, ctx_info(&clone)?);
    ensure!(
        ci.state == PFM_STATE_UNLOADED && ci.flags == ti.flags && ci.flags == PFM_CTXFL_NO_MSG,
        "the clone: state {} flags {:#x}; UNLOADED and the template's {:#x} expected",
        ci.state,
        ci.flags,
        ti.flags
    );
    let (tsets, csets) = (
        template.sets_info(&[0, 1]).ctx("GETINFO_SETS template")?,
        clone.sets_info(&[0, 1]).ctx("GETINFO_SETS clone")?,
    );
    for (t, c) in tsets.iter().zip(&csets) {
        let shape = |i: &PfmSetinfo| {
            (
                i.set_flags,
                i.set_timeout,
                i.set_ovfl_switch_cnt,
                i.set_switch_pmds,
                i.set_used_pmcs,
                i.set_used_pmds,
            )
        };
        ensure!(
            shape(t) == shape(c),
            "set {}: the clone's (flags, timeout, ovfl count, switch PMDs, PMCs, PMDs used) {:?}, the template's {:?}",
            t.set_id,
            shape(c),
            shape(t)
        );
    }
    for set in 0..2 {
        let regs = |p: &[PfmPmd]| -> Vec<(u64, u64, u64, u32)> {
            p.iter()
                .map(|r| {
                    (
                        r.reg_value,
                        r.reg_short_reset,
                        r.reg_long_reset,
                        r.reg_flags,
                    )
                })
                .collect()
        };
        let (t, c) = (
            regs(&read_pmds(&template, set, 2)?),
            regs(&read_pmds(&clone, set, 2)?),
        );
        ensure!(
            t == c,
            "set {set}'s PMDs (value, short reset, long reset, flags): the clone's {c:?}, the template's {t:?}"
        );
    }
    // No buffer: nothing to map, and a setup of its own is accepted (a
    // second one would be EBUSY).
    let len = (1 + PAGES as usize) * PFM_PAGE_SIZE;
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    match FileMap::new(
        clone.as_raw_fd(),
        len,
        rw,
        libc::MAP_SHARED,
        i64::from(PFM_SMPL_OFFSET),
    ) {
        Ok(_) => return Err("the clone's buffer could be mapped: it has none".into()),
        Err(e) => ensure!(
            e == libc::ENODEV,
            "mmap of the clone's buffer: {} (ENODEV: none)",
            errno_name(e)
        ),
    }
    let mut cbuf = buffer(&clone, 1 << 1)?;
    // A page of its own: LOADED while the template's stays UNLOADED.
    let cpage = clone.map_counter_page().ctx("mmap of the clone's page")?;
    clone.load(0).ctx("LOAD of the clone")?;
    let states = (
        cpage.read(0).map(|r| r.state()),
        tpage.read(0).map(|r| r.state()),
    );
    ensure!(
        states == (Some(PFM_STATE_LOADED), Some(PFM_STATE_UNLOADED)),
        "pages' states (clone, template) {states:?}: LOADED and UNLOADED expected"
    );
    let mut own = OwnClock::default();
    let w0 = monotonic_ns();
    own.around_start(|| clone.start())
        .ctx("START of the clone")?;
    spin_and_nap(20 * MS, || Ok(()))?;
    own.around_stop(|| clone.stop()).ctx("STOP of the clone")?;
    let window = monotonic_ns() - w0;
    let t = clone.read_values(0b1).ctx("READ_VALUES")?.time_running;
    let cinfo = clone.sets_info(&[0, 1]).ctx("GETINFO_SETS clone")?;
    let ctotals = [
        read_pmds(&clone, 0, 2)?[1].reg_value,
        read_pmds(&clone, 1, 2)?[1].reg_value,
    ];
    clone.unload().ctx("UNLOAD of the clone")?;
    let centries = cbuf.take();
    let template_more = tbuf.take().len() as u64 + (tbuf.stats().lost - lost_before);
    diag(format!(
        "{model:?}: template {written} entries, {lost_before} lost; clone T {t}, {}; {} entries",
        describe(&cinfo),
        centries.len()
    ));
    ensure!(
        template_more == 0,
        "{template_more} entries in the template's buffer while the clone ran"
    );
    // The clone's bookkeeping is the template's as copied plus its own
    // run: the clone's own time is what its running times grew by.
    let before: u64 = csets.iter().map(|i| i.set_time_running).sum();
    let after: u64 = cinfo.iter().map(|i| i.set_time_running).sum();
    // Its page is mapped: its preemption stretches count (as case 4's).
    within_own_clock_mapped(&format!("{model:?} clone's run"), t, &own, window);
    ensure!(
        after - before == t || after == t,
        "the clone's sets' running times add up to {after} ({before} copied), its running time is {t}"
    );
    entries_sane(&centries, 2)?;
    for set in 0..2u16 {
        let n = centries.iter().filter(|e| e.set == set).count();
        let start = if set == 1 { SET1_START } else { 0 };
        // 20 ms in 2 ms turns: both sets ran and crossed periods.
        ensure!(
            n > 0 && ctotals[usize::from(set)] > start,
            "the clone's set {set}: {n} entries, clock total {}",
            ctotals[usize::from(set)]
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------

fn main() {
    pfm_guest::child::dispatch();
    let mut t = Tap::new(PLAN);
    pfm_guest::watchdog(Duration::from_secs(400));
    t.require("insmod perfmon.ko pmu=soft", module::insmod(&["pmu=soft"]));
    let soft = Model::Soft;
    t.run(
        "soft: sets (2 ms turns) + page: conservation, task-clock per set = running, switches = own; page names the set, <= READ_VALUES, clock not live, exact after STOP",
        || sets_and_page(soft),
    );
    t.run(
        "soft: read_mapped = READ_VALUES while sets take turns",
        read_mapped_with_sets,
    );
    t.run(
        "soft: time-switched sets + buffer: entries' set the one counting, floor(total/P) per set, TS/P per activation",
        || time_sets_and_buffer(soft),
    );
    t.run(
        "soft: overflow-switched sets + buffer (ping-pong, naps): entry j in set (j/2) mod 2, value 5(k+1), floor(S/5) for own S",
        ovfl_sets_and_buffer_soft,
    );
    t.run(
        "soft: page + buffer at once: page <= READ_VALUES, exact after STOP; floor(task-clock/P) entries; own clock",
        || page_and_buffer(soft),
    );
    t.run(
        "soft: CLONE of sets + buffer + page: UNLOADED, flags, sets and registers copied, no buffer, its own page",
        || clone_of_parts(soft),
    );
    t.run("soft: no context left", || {
        module::wait_contexts(0, Duration::from_secs(3))
    });
    t.require(
        "insmod perfmon.ko pmu=intel_arch_sim",
        module::insmod(&["pmu=intel_arch_sim"]),
    );
    let sim = Model::Sim;
    t.run(
        "sim: sets (2 ms turns) + page: conservation, cycles per set = running; page names the set, <= READ_VALUES, stale, exact after STOP",
        || sets_and_page(sim),
    );
    t.run(
        "sim: time-switched sets + buffer: entries' set the one counting, floor(cycles/P) per set",
        || time_sets_and_buffer(sim),
    );
    t.run(
        "sim: overflow-switched sets + buffer: floor(cycles/P) per set, >= 2 entries per ended activation",
        ovfl_sets_and_buffer_sim,
    );
    t.run(
        "sim: page + buffer at once: page <= READ_VALUES, exact after STOP; floor(cycles/P) entries",
        || page_and_buffer(sim),
    );
    t.run(
        "sim: CLONE of sets + buffer + page: UNLOADED, flags, sets and registers copied, no buffer, its own page",
        || clone_of_parts(sim),
    );
    t.run("sim: no MSR access faulted, no context left", || {
        let f = module::sysfs_num("msr_faults").unwrap_or(0);
        ensure!(f == 0, "{f} MSR accesses faulted");
        module::wait_contexts(0, Duration::from_secs(3))
    });
    t.run(
        "every case's running time (task-clock) within the thread's own CPU time around START and STOP",
        || {
            let o = OWN_CLOCK.lock().unwrap_or_else(|e| e.into_inner());
            diag(format!("{} cases checked", o.0));
            ensure!(o.0 >= 8, "only {} cases checked", o.0);
            ensure!(o.1.is_empty(), "{}", o.1.join("; "));
            Ok(())
        },
    );
    t.run("rmmod perfmon", module::rmmod);
    t.finish();
}
