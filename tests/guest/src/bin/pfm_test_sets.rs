//! pfm_test_sets: event sets and multiplexing (issue 15,
//! Documentation/sets-design.md) on the soft model with two counters
//! (`pmu=soft soft_counters=2`: PMCs and PMDs 0 and 1 only), so that three
//! sets of two events count six events on two counters.
//!
//! - The errnos: set ids of 16 and more, both switch flags, a timeout or an
//!   overflow count that does not match the flags, reserved bits and fields
//!   (EINVAL, `done` the bad element's index, nothing half-applied); a
//!   timeout below 100 us raised to it and returned; `pfm_sets_arg`'s count
//!   0 and its reserved fields (EINVAL), a count above 16 (E2BIG); bad
//!   pointers (EFAULT);
//!   DELETE of set 0 or of a missing set (EINVAL); CREATE and DELETE while
//!   loaded (EBADFD); register elements and LOADs naming a missing set
//!   (EINVAL, `PFM_REG_RETFL_NOSET`); READ_VALUES' `set` and `vflags`;
//!   the counter page and sets together (issue 33): a context with sets
//!   is mapped and a mapped one creates sets, the page naming the set it
//!   shows (the resident one) with that set's values.
//! - Conservation: three sets switched every 1 ms of the thread's running
//!   time, each counting context-switches and task-clock, while the thread
//!   ping-pongs with a partner on its CPU: the three sets' switches add up
//!   to perf's count and to the thread's own (getrusage) exactly, the sets'
//!   running times to their common enabled time, which is the context's
//!   `time_running` and lies within the thread's own CPU clock read around
//!   START and STOP; each set's task-clock is its running time.
//! - Time switching: 200 ms of CPU-bound running, two sets at 10 ms: the
//!   number of switches, each set's runs and running time and the time
//!   left of the active set are what the round robin gives for the
//!   context's `time_running`, exactly.
//! - Overflow switching: two sets each switching after 2 overflows of a
//!   context-switches PMD of period 5: switches = floor(S / 10) for the
//!   thread's S switches (perf's and getrusage's count), each set's counts
//!   and PMD values as derived below, exactly.
//! - Scaling: two sets at 1 ms, task-clock in each, read while counting
//!   with `PFM_VALFL_SET`: count × enabled / running equals the enabled
//!   time, which lies within the thread's own CPU clock read around START
//!   and around the read, exactly; and context-switches on a steady
//!   ping-pong of 1 s: each set's estimate within 2% of perf's
//!   unmultiplexed count (derived in `scaling_vs_perf`).
//! - GETINFO after UNLOAD (unchanged), DELETE then, a re-created set
//!   empty, LOAD in set 1 (the rotation starts there, the bookkeeping from
//!   zero); a one-set context's set 0 has the context's running time.
//! - Overflow messages name the set whose PMD overflowed.
//!
//! Oracles the module cannot influence: perf_event's context-switches, the
//! thread's `getrusage(RUSAGE_THREAD)` switch count and its
//! `CLOCK_THREAD_CPUTIME_ID`, read around START and STOP
//! ([`pfm_guest::OwnClock`]); and arithmetic on the module's own totals
//! where the rule is exact (the soft model charges running time to the
//! sets split exactly at each timeout). No tolerance anywhere: each bound
//! is derived where it is checked.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::time::Duration;

use perfmon::abi::*;
use perfmon::perf::{PerfCounter, SoftwareEvent};
use perfmon::{errno_name, Context, CtxState, Error, MessageKind};
use pfm_guest::edges::thread_cpu_ns;
use pfm_guest::raw::{self, ioctl_bad, ioctl_in, BadAddr, RegsArea};
use pfm_guest::tap::diag;
use pfm_guest::{ensure, module, OwnClock, ResultExt, Tap, TestResult};

const PLAN: usize = 33;
/// The soft events, as PMC values.
const TC: u64 = PFM_SOFT_EV_TASK_CLOCK;
const CS: u64 = PFM_SOFT_EV_CONTEXT_SWITCHES;
const MS: u64 = 1_000_000;
/// Measurements whose START or STOP was cut by a context switch (the
/// switch counts of perf and perfmon may then differ by it) are retried.
const ATTEMPTS: usize = 3;
/// A ping-pong that makes no progress in CPU time stops here.
const MAX_ROUNDS: usize = 1_000_000;

// ---------------------------------------------------------------------------
// Small helpers

fn open() -> Result<Context, String> {
    Context::open().ctx("open /dev/perfmon")
}

fn fd(ctx: &Context) -> i32 {
    ctx.as_raw_fd()
}

fn name(r: Result<i32, i32>) -> String {
    match r {
        Ok(v) => format!("success ({v})"),
        Err(e) => errno_name(e).to_string(),
    }
}

/// A raw call must fail with `errno`.
fn expect(r: Result<i32, i32>, errno: i32, what: &str) -> TestResult {
    ensure!(
        r == Err(errno),
        "{what}: got {}, expected {}",
        name(r),
        errno_name(errno)
    );
    Ok(())
}

/// A library call must fail with `errno`.
fn expect_errno<T>(r: perfmon::Result<T>, errno: i32, what: &str) -> TestResult {
    match r {
        Ok(_) => Err(format!("{what}: succeeded, expected {}", errno_name(errno))),
        Err(e) if e.errno() == Some(errno) => Ok(()),
        Err(e) => Err(format!("{what}: {e}, expected {}", errno_name(errno))),
    }
}

/// A sets call must fail with EINVAL naming element `index` (`done`).
fn expect_bad_set<T>(r: perfmon::Result<T>, index: usize, what: &str) -> TestResult {
    match r {
        Err(Error::BadSet { index: i, .. }) if i == index => Ok(()),
        Ok(_) => Err(format!(
            "{what}: succeeded, expected EINVAL at element {index}"
        )),
        Err(e) => Err(format!("{what}: {e}, expected EINVAL at element {index}")),
    }
}

/// A register call must fail with EINVAL naming element `index` with
/// `flag` among its `PFM_REG_RETFL_*`.
fn expect_bad_reg<T>(r: perfmon::Result<T>, index: usize, flag: u32, what: &str) -> TestResult {
    match r {
        Err(Error::BadRegister {
            index: i, flags, ..
        }) if i == index && flags & flag != 0 => Ok(()),
        Ok(_) => Err(format!(
            "{what}: succeeded, expected EINVAL at element {index}"
        )),
        Err(e) => Err(format!(
            "{what}: {e}, expected EINVAL with {flag:#x} at element {index}"
        )),
    }
}

fn time_set(id: u16, timeout: u64) -> PfmSetdesc {
    PfmSetdesc {
        set_id: id,
        set_flags: PFM_SETFL_TIME_SWITCH,
        set_timeout: timeout,
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

fn plain_set(id: u16) -> PfmSetdesc {
    PfmSetdesc {
        set_id: id,
        ..Default::default()
    }
}

fn pmc(set: u16, num: u16, ev: u64) -> PfmPmc {
    PfmPmc {
        reg_num: num,
        reg_set: set,
        reg_value: ev,
        ..Default::default()
    }
}

fn pmd(set: u16, num: u16, value: u64) -> PfmPmd {
    PfmPmd {
        reg_num: num,
        reg_set: set,
        reg_value: value,
        ..Default::default()
    }
}

/// Programs `events` on counters 0.. of set `set`, PMDs from 0.
fn program(ctx: &Context, set: u16, events: &[u64]) -> TestResult {
    let mut pmcs: Vec<PfmPmc> = (0..).zip(events).map(|(n, &ev)| pmc(set, n, ev)).collect();
    ctx.write_pmcs(&mut pmcs)
        .ctx(&format!("WRITE_PMCS set {set}"))?;
    let mut pmds: Vec<PfmPmd> = (0..events.len() as u16).map(|n| pmd(set, n, 0)).collect();
    ctx.write_pmds(&mut pmds)
        .ctx(&format!("WRITE_PMDS set {set}"))
}

/// A context with `descs` created.
fn with_sets(descs: &[PfmSetdesc]) -> Result<Context, String> {
    let ctx = open()?;
    let mut d = descs.to_vec();
    ctx.create_sets(&mut d).ctx("CREATE_SETS")?;
    Ok(ctx)
}

/// READ_PMDS of PMDs `0..n` of set `set`: their elements and the
/// context's (time_enabled, time_running).
fn read_set(ctx: &Context, set: u16, n: u16) -> Result<(Vec<PfmPmd>, u64, u64), String> {
    let mut regs: Vec<PfmPmd> = (0..n).map(|i| pmd(set, i, 0)).collect();
    let (e, r) = ctx
        .read_pmds(&mut regs)
        .ctx(&format!("READ_PMDS set {set}"))?;
    Ok((regs, e, r))
}

/// GETINFO_SETS of sets `0..n`.
fn infos(ctx: &Context, n: u16) -> Result<Vec<PfmSetinfo>, String> {
    let ids: Vec<u16> = (0..n).collect();
    ctx.sets_info(&ids).ctx("GETINFO_SETS")
}

fn describe_infos(infos: &[PfmSetinfo]) -> String {
    infos
        .iter()
        .map(|i| {
            format!(
                "set {}: runs {} enabled {} running {} left {} cause {} ovfl_pmds {:#x}",
                i.set_id,
                i.set_runs,
                i.set_time_enabled,
                i.set_time_running,
                i.set_timeout_left,
                i.set_last_cause,
                i.set_ovfl_pmds
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The calling thread pinned to one CPU until drop (then to all again).
struct Pin;

impl Pin {
    fn to(cpu: usize) -> Result<Pin, String> {
        perfmon::process::set_affinity(0, &[cpu]).ctx("sched_setaffinity")?;
        Ok(Pin)
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        let all: Vec<usize> = (0..perfmon::process::online_cpus()).collect();
        let _ = perfmon::process::set_affinity(0, &all);
    }
}

/// A partner thread on CPU 0 that echoes every byte: each round trip
/// blocks the caller in its read, a context switch of the caller.
struct Partner {
    tx: Option<File>,
    rx: File,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Partner {
    fn start() -> Result<Self, String> {
        let (to_r, to_w) = raw::pipe().map_err(|e| format!("pipe: {}", errno_name(e)))?;
        let (from_r, from_w) = raw::pipe().map_err(|e| format!("pipe: {}", errno_name(e)))?;
        let thread = std::thread::spawn(move || {
            let _ = perfmon::process::set_affinity(0, &[0]);
            let (mut rx, mut tx) = (to_r, from_w);
            let mut b = [0u8; 1];
            while rx.read(&mut b).unwrap_or(0) == 1 {
                if tx.write_all(&b).is_err() {
                    break;
                }
            }
        });
        Ok(Partner {
            tx: Some(to_w),
            rx: from_r,
            thread: Some(thread),
        })
    }

    fn round_trip(&mut self) -> TestResult {
        let mut b = [0u8; 1];
        if let Some(tx) = &mut self.tx {
            tx.write_all(&b).ctx("ping")?;
        }
        self.rx.read_exact(&mut b).ctx("pong")
    }
}

impl Drop for Partner {
    fn drop(&mut self) {
        // The partner reads end of file and returns.
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Runs round trips with `partner` until the calling thread has used
/// `cpu_ns` of CPU time (and at least `min_rounds` round trips); returns
/// the round trips made.
fn ping_pong(partner: &mut Partner, min_rounds: usize, cpu_ns: u64) -> Result<usize, String> {
    let c0 = thread_cpu_ns();
    let mut rounds = 0;
    while (rounds < min_rounds || thread_cpu_ns() - c0 < cpu_ns) && rounds < MAX_ROUNDS {
        partner.round_trip()?;
        rounds += 1;
    }
    Ok(rounds)
}

/// Spins until the calling thread has used `ns` of CPU time.
fn spin_cpu(ns: u64) {
    let c0 = thread_cpu_ns();
    while thread_cpu_ns() - c0 < ns {
        std::hint::spin_loop();
    }
}

/// START and STOP of a self-monitoring context, each (with a read of
/// perf's context-switches, if there is a counter) between two readings of
/// the thread's own CPU clock and switch count.
#[derive(Default)]
struct Window {
    own: OwnClock,
    perf: (u64, u64),
}

impl Window {
    fn start(&mut self, ctx: &Context, perf: Option<&PerfCounter>) -> TestResult {
        self.perf.0 = self.own.around_start(|| -> Result<u64, String> {
            let p = perf_value(perf)?;
            ctx.start().ctx("START")?;
            Ok(p)
        })?;
        Ok(())
    }

    fn stop(&mut self, ctx: &Context, perf: Option<&PerfCounter>) -> TestResult {
        self.perf.1 = self.own.around_stop(|| -> Result<u64, String> {
            ctx.stop().ctx("STOP")?;
            perf_value(perf)
        })?;
        Ok(())
    }

    /// The switches the context must have counted, if the window's edges
    /// were clean: no switch of the thread inside the bracket around START
    /// (which holds perf's first read) or around STOP (which holds its
    /// last). Then getrusage's count between the brackets is exact (its
    /// lower and upper bounds meet), and perf's, read inside them, must be
    /// the same number: both are the scheduler's own count of switch-outs,
    /// as the module's is.
    fn exact_switches(&self) -> Option<u64> {
        let (lo, hi) = self.own.switch_bounds();
        (lo == hi).then_some(lo)
    }

    /// perf's count over its window, which holds the context's.
    fn perf_switches(&self) -> u64 {
        self.perf.1 - self.perf.0
    }

    /// The context's switch count must lie within getrusage's bounds and
    /// not above perf's, whatever happened at the edges.
    fn check_bounds(&self, counted: u64) -> TestResult {
        let (lo, hi) = self.own.switch_bounds();
        ensure!(
            lo <= counted && counted <= hi && counted <= self.perf_switches(),
            "{counted} switches counted, the thread's own count says [{lo}, {hi}], perf {}",
            self.perf_switches()
        );
        Ok(())
    }

    /// The context's time_running must lie within the thread's own CPU
    /// time between the brackets (at least) and across them (at most).
    fn check_time(&self, running: u64) -> TestResult {
        let (lo, hi) = self.own.bounds();
        ensure!(
            lo <= running && running <= hi,
            "time_running {running} outside the thread's own CPU time [{lo}, {hi}]"
        );
        Ok(())
    }

    fn describe(&self) -> String {
        let (lo, hi) = self.own.switch_bounds();
        let (tlo, thi) = self.own.bounds();
        format!(
            "perf switches {}, own switches [{lo}, {hi}], own CPU time [{tlo}, {thi}]",
            self.perf_switches()
        )
    }
}

/// perf's count, 0 without a counter.
fn perf_value(perf: Option<&PerfCounter>) -> Result<u64, String> {
    Ok(match perf {
        Some(p) => p.read().ctx("perf read")?.value,
        None => 0,
    })
}

/// What the round robin gives with every set `TIME_SWITCH` at the same
/// timeout `t`, sets `0..n`, starting in `start`, for `total` ns charged:
/// the timeout expires at t, 2t, ... (a charge reaching it exactly
/// switches), so there are `s = floor(total / t)` switches; activation `j`
/// (`0..=s`) belongs to set `(start + j) mod n` and lasts `t`, except the
/// last (`j = s`), which has run `total - s t` so far and has `t` minus
/// that left.
struct Rotation {
    switches: u64,
    runs: Vec<u64>,
    running: Vec<u64>,
    /// Sets that were switched away from at least once.
    left_once: Vec<bool>,
    active: usize,
    time_left: u64,
}

fn rotation(total: u64, t: u64, n: usize, start: usize) -> Rotation {
    let s = total / t;
    let rem = total - s * t;
    let mut r = Rotation {
        switches: s,
        runs: vec![0; n],
        running: vec![0; n],
        left_once: vec![false; n],
        active: (start + (s % n as u64) as usize) % n,
        time_left: t - rem,
    };
    for j in 0..=s {
        let set = (start + (j % n as u64) as usize) % n;
        r.runs[set] += 1;
        r.running[set] += if j < s { t } else { rem };
        r.left_once[set] |= j < s;
    }
    r
}

/// GETINFO of time-switched sets `0..n` against [`rotation`] of the
/// context's `time_running`: runs, running time, the common enabled time,
/// the time left and the last cause, exactly.
fn check_rotation(infos: &[PfmSetinfo], running: u64, t: u64, start: usize) -> TestResult {
    let n = infos.len();
    let rot = rotation(running, t, n, start);
    let runs: u64 = infos.iter().map(|i| i.set_runs).sum();
    ensure!(
        runs == rot.switches + 1,
        "{} switches (runs - 1), floor({running} / {t}) = {} expected",
        runs.wrapping_sub(1),
        rot.switches
    );
    for (k, i) in infos.iter().enumerate() {
        ensure!(
            i.set_time_enabled == running,
            "set {k}: time_enabled {} != the context's time_running {running}",
            i.set_time_enabled
        );
        ensure!(
            i.set_runs == rot.runs[k] && i.set_time_running == rot.running[k],
            "set {k}: runs {} running {}, the round robin gives runs {} running {}",
            i.set_runs,
            i.set_time_running,
            rot.runs[k],
            rot.running[k]
        );
        let left = if k == rot.active { rot.time_left } else { t };
        ensure!(
            i.set_timeout_left == left,
            "set {k}: timeout_left {}, expected {left} (active set {})",
            i.set_timeout_left,
            rot.active
        );
        let cause = if rot.left_once[k] {
            PFM_SET_CAUSE_TIME
        } else {
            PFM_SET_CAUSE_NONE
        };
        ensure!(
            i.set_last_cause == cause && i.set_ovfl_pmds == 0,
            "set {k}: last cause {} ovfl_pmds {:#x}, expected cause {cause}, no PMDs",
            i.set_last_cause,
            i.set_ovfl_pmds
        );
    }
    let sum: u64 = infos.iter().map(|i| i.set_time_running).sum();
    ensure!(
        sum == running,
        "the sets' running times add up to {sum}, not to time_enabled {running}"
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// a. The errnos

fn raw_sets_call(
    ctx: &Context,
    req: u32,
    descs: &[PfmSetdesc],
    count: u32,
    tweak: impl FnOnce(&mut PfmSetsArg),
) -> Result<(Result<i32, i32>, u32), String> {
    let area = RegsArea::new(4).map_err(|e| format!("mmap: {}", errno_name(e)))?;
    area.put(0, descs);
    let mut arg = PfmSetsArg {
        sets: area.addr(0),
        count,
        ..Default::default()
    };
    tweak(&mut arg);
    let r = ioctl_in(fd(ctx), req, &mut arg);
    Ok((r, arg.done))
}

fn soft_counters_2() -> TestResult {
    let ctx = open()?;
    let info = ctx.raw_info().ctx("GET_INFO")?;
    ensure!(
        info.impl_pmcs == 0b11 && info.impl_pmds == 0b11 && info.num_pmds == 2,
        "impl_pmcs {:#x} impl_pmds {:#x} num_pmds {}, expected PMCs and PMDs 0 and 1",
        info.impl_pmcs,
        info.impl_pmds,
        info.num_pmds
    );
    expect_bad_reg(
        ctx.write_pmcs(&mut [pmc(0, 2, CS)]),
        0,
        PFM_REG_RETFL_NOTAVAIL,
        "WRITE_PMCS PMC 2",
    )?;
    expect_bad_set(
        ctx.create_sets(&mut [ovfl_set(1, 1, 0b100)]),
        0,
        "switch_pmds naming PMD 2",
    )
}

fn id_16() -> TestResult {
    let ctx = open()?;
    expect_bad_set(
        ctx.create_sets(&mut [time_set(1, MS), time_set(16, MS)]),
        1,
        "sets 1 and 16",
    )?;
    expect_bad_set(ctx.sets_info(&[1]), 0, "GETINFO of set 1 after the refusal")?;
    expect_bad_set(ctx.create_sets(&mut [plain_set(u16::MAX)]), 0, "set 65535")
}

fn both_flags() -> TestResult {
    let ctx = open()?;
    let both = PfmSetdesc {
        set_flags: PFM_SETFL_TIME_SWITCH | PFM_SETFL_OVFL_SWITCH,
        set_timeout: MS,
        set_ovfl_switch_cnt: 1,
        set_switch_pmds: 1,
        ..plain_set(1)
    };
    expect_bad_set(ctx.create_sets(&mut [both]), 0, "both flags")?;
    let unknown = PfmSetdesc {
        set_flags: 1 << 2,
        ..plain_set(1)
    };
    expect_bad_set(ctx.create_sets(&mut [unknown]), 0, "flag bit 2")
}

fn timeout_vs_flag() -> TestResult {
    let ctx = open()?;
    expect_bad_set(
        ctx.create_sets(&mut [time_set(1, 0)]),
        0,
        "TIME_SWITCH, timeout 0",
    )?;
    let timeout_only = PfmSetdesc {
        set_timeout: MS,
        ..plain_set(1)
    };
    expect_bad_set(
        ctx.create_sets(&mut [timeout_only]),
        0,
        "a timeout without TIME_SWITCH",
    )
}

fn count_vs_flag() -> TestResult {
    let ctx = open()?;
    expect_bad_set(
        ctx.create_sets(&mut [ovfl_set(1, 0, 1)]),
        0,
        "OVFL_SWITCH, count 0",
    )?;
    expect_bad_set(
        ctx.create_sets(&mut [ovfl_set(1, 1, 0)]),
        0,
        "OVFL_SWITCH, no PMD",
    )?;
    let count_only = PfmSetdesc {
        set_ovfl_switch_cnt: 1,
        ..plain_set(1)
    };
    expect_bad_set(
        ctx.create_sets(&mut [count_only]),
        0,
        "a count without OVFL_SWITCH",
    )?;
    let pmds_only = PfmSetdesc {
        set_switch_pmds: 1,
        ..plain_set(1)
    };
    expect_bad_set(
        ctx.create_sets(&mut [pmds_only]),
        0,
        "switch PMDs without OVFL_SWITCH",
    )
}

fn desc_reserved() -> TestResult {
    let ctx = open()?;
    let d = PfmSetdesc {
        reserved: 1,
        ..time_set(1, MS)
    };
    expect_bad_set(ctx.create_sets(&mut [d]), 0, "reserved 1")
}

fn min_timeout() -> TestResult {
    let ctx = open()?;
    let mut d = [
        time_set(1, 1),
        time_set(2, PFM_SET_MIN_TIMEOUT - 1),
        time_set(3, PFM_SET_MIN_TIMEOUT),
        time_set(4, PFM_SET_MIN_TIMEOUT + 1),
        time_set(5, 10_000 * MS),
    ];
    ctx.create_sets(&mut d).ctx("CREATE_SETS")?;
    let want = [
        PFM_SET_MIN_TIMEOUT,
        PFM_SET_MIN_TIMEOUT,
        PFM_SET_MIN_TIMEOUT,
        PFM_SET_MIN_TIMEOUT + 1,
        10_000 * MS,
    ];
    let got: Vec<u64> = d.iter().map(|d| d.set_timeout).collect();
    ensure!(got == want, "effective timeouts {got:?}, expected {want:?}");
    let info = ctx.sets_info(&[1, 2, 3, 4, 5]).ctx("GETINFO_SETS")?;
    for (i, w) in info.iter().zip(want) {
        ensure!(
            i.set_timeout == w && i.set_timeout_left == w && i.set_flags == PFM_SETFL_TIME_SWITCH,
            "GETINFO of set {}: timeout {} left {} flags {}, expected {w}, {w}, TIME_SWITCH",
            i.set_id,
            i.set_timeout,
            i.set_timeout_left,
            i.set_flags
        );
    }
    Ok(())
}

fn arg_count() -> TestResult {
    let ctx = open()?;
    // Sets 0..=16: the count is refused before any element is read.
    let d: Vec<PfmSetdesc> = (0..17).map(|i| time_set(i, MS)).collect();
    let (r, _) = raw_sets_call(&ctx, PFM_IOC_CREATE_SETS, &d, 0, |_| {})?;
    expect(r, libc::EINVAL, "count 0")?;
    // More than PFM_MAX_SETS: E2BIG, as a register array's count above
    // PFM_MAX_REGS_PER_CALL (Documentation/perfmon.rst).
    let (r, _) = raw_sets_call(&ctx, PFM_IOC_CREATE_SETS, &d, 17, |_| {})?;
    expect(r, libc::E2BIG, "count 17")?;
    let (r, _) = raw_sets_call(&ctx, PFM_IOC_GETINFO_SETS, &d, 17, |_| {})?;
    expect(r, libc::E2BIG, "GETINFO count 17")?;
    let (r, _) = raw_sets_call(&ctx, PFM_IOC_CREATE_SETS, &d, u32::MAX, |_| {})?;
    expect(r, libc::E2BIG, "count 2^32 - 1")?;
    expect_errno(
        ctx.delete_sets(&[1; 17]),
        libc::E2BIG,
        "library, DELETE of 17",
    )?;
    // The library passes an empty slice on as count 0.
    expect_errno(ctx.create_sets(&mut []), libc::EINVAL, "library, no set")?;
    let (r, done) = raw_sets_call(&ctx, PFM_IOC_CREATE_SETS, &d, 16, |_| {})?;
    ensure!(
        r.is_ok() && done == 16,
        "count 16 (sets 0..=15): {}, done {done}",
        name(r)
    );
    ctx.sets_info(&[15]).ctx("GETINFO of set 15").map(|_| ())
}

fn arg_reserved() -> TestResult {
    let ctx = open()?;
    let d = [time_set(1, MS)];
    for k in 0..2 {
        let (r, _) = raw_sets_call(&ctx, PFM_IOC_CREATE_SETS, &d, 1, |a| a.reserved[k] = 1)?;
        expect(r, libc::EINVAL, &format!("CREATE reserved[{k}]"))?;
        let (r, _) = raw_sets_call(&ctx, PFM_IOC_GETINFO_SETS, &d, 1, |a| a.reserved[k] = 1)?;
        expect(r, libc::EINVAL, &format!("GETINFO reserved[{k}]"))?;
    }
    expect_bad_set(ctx.sets_info(&[1]), 0, "set 1 after the refusals")
}

fn bad_pointers() -> TestResult {
    let ctx = with_sets(&[time_set(1, MS)])?;
    expect(
        ioctl_bad(fd(&ctx), PFM_IOC_CREATE_SETS, &BadAddr::Null),
        libc::EFAULT,
        "CREATE_SETS argument NULL",
    )?;
    expect(
        ioctl_bad(fd(&ctx), PFM_IOC_GETINFO_SETS, &BadAddr::Kernel),
        libc::EFAULT,
        "GETINFO_SETS argument at a kernel address",
    )?;
    let (r, _) = raw_sets_call(&ctx, PFM_IOC_CREATE_SETS, &[], 1, |a| a.sets = 0)?;
    expect(r, libc::EFAULT, "CREATE_SETS sets NULL")?;
    let area = RegsArea::new(1).map_err(errno_name)?;
    let (r, _) = raw_sets_call(&ctx, PFM_IOC_DELETE_SETS, &[], 1, |a| a.sets = area.guard())?;
    expect(r, libc::EFAULT, "DELETE_SETS ids in a PROT_NONE page")?;
    // Elements that run into the guard page: the first is readable.
    let tail = area.rw_len() - std::mem::size_of::<PfmSetdesc>();
    area.put(tail, &[time_set(2, MS)]);
    let mut a = PfmSetsArg {
        sets: area.addr(tail),
        count: 2,
        ..Default::default()
    };
    expect(
        ioctl_in(fd(&ctx), PFM_IOC_CREATE_SETS, &mut a),
        libc::EFAULT,
        "CREATE_SETS, the second element in a PROT_NONE page",
    )?;
    // GETINFO into a read-only page: read, but not written back.
    let ro = RegsArea::new(1).map_err(errno_name)?;
    ro.put(
        0,
        &[PfmSetinfo {
            set_id: 1,
            ..Default::default()
        }],
    );
    ro.set_read_only(true).map_err(errno_name)?;
    let mut a = PfmSetsArg {
        sets: ro.addr(0),
        count: 1,
        ..Default::default()
    };
    expect(
        ioctl_in(fd(&ctx), PFM_IOC_GETINFO_SETS, &mut a),
        libc::EFAULT,
        "GETINFO_SETS into a read-only page",
    )?;
    // Nothing changed: set 1 is there, set 2 is not.
    ctx.sets_info(&[1]).ctx("GETINFO of set 1")?;
    expect_bad_set(ctx.sets_info(&[2]), 0, "GETINFO of set 2")
}

fn delete_errnos() -> TestResult {
    let ctx = with_sets(&[time_set(1, MS), time_set(2, MS)])?;
    expect_bad_set(ctx.delete_sets(&[1, 0]), 1, "DELETE sets 1 and 0")?;
    expect_bad_set(ctx.delete_sets(&[2, 7]), 1, "DELETE sets 2 and 7 (missing)")?;
    expect_bad_set(ctx.delete_sets(&[16]), 0, "DELETE set 16")?;
    ctx.sets_info(&[0, 1, 2])
        .ctx("all or nothing: sets 0, 1, 2 are still there")?;
    let bare = open()?;
    expect_bad_set(
        bare.delete_sets(&[0]),
        0,
        "DELETE set 0 of a context without sets",
    )?;
    expect_bad_set(
        bare.delete_sets(&[1]),
        0,
        "DELETE set 1 of a context without sets",
    )
}

fn getinfo_missing() -> TestResult {
    let ctx = with_sets(&[time_set(1, MS)])?;
    expect_bad_set(ctx.sets_info(&[0, 1, 5]), 2, "GETINFO sets 0, 1, 5")?;
    expect_bad_set(ctx.sets_info(&[16]), 0, "GETINFO set 16")?;
    let bare = open()?;
    expect_bad_set(bare.sets_info(&[0, 1]), 1, "GETINFO sets 0, 1 without sets")
}

fn while_loaded() -> TestResult {
    let ctx = with_sets(&[plain_set(1)])?;
    program(&ctx, 0, &[TC])?;
    program(&ctx, 1, &[TC])?;
    ctx.load(0).ctx("LOAD")?;
    let r1 = expect_errno(
        ctx.create_sets(&mut [time_set(2, MS)]),
        libc::EBADFD,
        "CREATE while loaded",
    );
    let r2 = expect_errno(ctx.delete_sets(&[1]), libc::EBADFD, "DELETE while loaded");
    let r3 = ctx
        .sets_info(&[0, 1])
        .ctx("GETINFO while loaded")
        .map(|_| ());
    let st = ctx.state().ctx("GET_STATE")?.state;
    ctx.unload().ctx("UNLOAD")?;
    r1?;
    r2?;
    r3?;
    ensure!(st == CtxState::Loaded, "state {st:?} after the refusals");
    ctx.sets_info(&[1]).ctx("set 1 after UNLOAD")?;
    expect_bad_set(ctx.sets_info(&[2]), 0, "set 2 after UNLOAD")
}

fn registers_nosets() -> TestResult {
    let ctx = with_sets(&[plain_set(1)])?;
    expect_bad_reg(
        ctx.write_pmcs(&mut [pmc(1, 0, CS), pmc(3, 1, CS)]),
        1,
        PFM_REG_RETFL_NOSET,
        "WRITE_PMCS in sets 1 and 3",
    )?;
    expect_bad_reg(
        ctx.write_pmds(&mut [pmd(0, 0, 7), pmd(3, 0, 1)]),
        1,
        PFM_REG_RETFL_NOSET,
        "WRITE_PMDS in sets 0 and 3",
    )?;
    expect_bad_reg(
        ctx.write_pmds(&mut [pmd(16, 0, 1)]),
        0,
        PFM_REG_RETFL_NOSET,
        "WRITE_PMDS in set 16",
    )?;
    expect_bad_reg(
        ctx.read_pmds(&mut [pmd(1, 0, 0), pmd(5, 0, 0)]),
        1,
        PFM_REG_RETFL_NOSET,
        "READ_PMDS of sets 1 and 5",
    )?;
    let (v, _, _) = read_set(&ctx, 0, 1)?;
    ensure!(
        v[0].reg_value == 0,
        "set 0's PMD 0 is {} after the refused write (all or nothing)",
        v[0].reg_value
    );
    let bare = open()?;
    expect_bad_reg(
        bare.write_pmds(&mut [pmd(1, 0, 1)]),
        0,
        PFM_REG_RETFL_NOSET,
        "WRITE_PMDS in set 1 of a context without sets",
    )
}

fn load_missing() -> TestResult {
    let bare = open()?;
    expect_errno(
        bare.load_in_set(0, 1),
        libc::EINVAL,
        "LOAD in set 1 without sets",
    )?;
    ensure!(
        bare.state().ctx("GET_STATE")?.state == CtxState::Unloaded,
        "loaded anyway"
    );
    let ctx = with_sets(&[plain_set(1), plain_set(2)])?;
    expect_errno(ctx.load_in_set(0, 3), libc::EINVAL, "LOAD in set 3")?;
    expect_errno(ctx.load_in_set(0, 16), libc::EINVAL, "LOAD in set 16")?;
    ensure!(
        ctx.state().ctx("GET_STATE")?.state == CtxState::Unloaded,
        "loaded anyway"
    );
    // An OVFL_SWITCH set none of whose switch PMDs was written could
    // never switch: refused at LOAD, accepted once one is written.
    let ovfl = with_sets(&[ovfl_set(1, 1, 0b1)])?;
    expect_errno(ovfl.load(0), libc::EINVAL, "LOAD, set 1's PMD 0 unwritten")?;
    ovfl.write_pmds(&mut [pmd(1, 0, 0)])
        .ctx("WRITE_PMDS set 1")?;
    ovfl.load(0).ctx("LOAD once set 1's PMD 0 is written")?;
    ovfl.unload().ctx("UNLOAD")
}

fn read_values_args() -> TestResult {
    let ctx = with_sets(&[plain_set(1)])?;
    let area = RegsArea::new(1).map_err(errno_name)?;
    let call = |tweak: &dyn Fn(&mut PfmValues)| {
        let mut v = PfmValues {
            pmd_mask: 1,
            values: area.addr(0),
            ..Default::default()
        };
        tweak(&mut v);
        ioctl_in(fd(&ctx), PFM_IOC_READ_VALUES, &mut v)
    };
    expect(
        call(&|v| v.set = 1),
        libc::EINVAL,
        "set 1 without PFM_VALFL_SET",
    )?;
    expect(
        call(&|v| {
            v.set = 3;
            v.vflags = PFM_VALFL_SET
        }),
        libc::EINVAL,
        "PFM_VALFL_SET, set 3 (missing)",
    )?;
    expect(call(&|v| v.vflags = 1 << 1), libc::EINVAL, "vflags bit 1")?;
    expect(call(&|v| v.pad = 1), libc::EINVAL, "pad 1")?;
    let ok = call(&|v| {
        v.set = 1;
        v.vflags = PFM_VALFL_SET
    });
    ensure!(ok.is_ok(), "PFM_VALFL_SET, set 1: {}", name(ok));
    expect_errno(
        ctx.read_set_values(2, 1),
        libc::EINVAL,
        "library, set 2 (missing)",
    )
}

/// The counter page and event sets are parts of their own (issue 33): a
/// context with sets is mapped, and a mapped context creates sets. The
/// page names the set whose image it shows (`PfmPage.set`): the resident
/// one, set 0 before LOAD, the LOAD's set after it; its values are that
/// set's (READ_VALUES with `PFM_VALFL_SET`). pfm_test_parts tests the page
/// while the sets take turns.
fn page_with_sets() -> TestResult {
    let ctx = with_sets(&[time_set(1, MS)])?;
    program(&ctx, 0, &[CS])?;
    program(&ctx, 1, &[CS, TC])?;
    let page = ctx.map_counter_page().ctx("mmap of a context with set 1")?;
    let r = page.read(0b11).ok_or("page read: always updating")?;
    ensure!(
        r.set() == 0 && r.state() == PFM_STATE_UNLOADED,
        "page before LOAD: set {} state {} (set 0, UNLOADED expected)",
        r.set(),
        r.state()
    );
    // Loaded in set 1, not started: nothing moves, the page is exact.
    ctx.load_in_set(0, 1).ctx("LOAD in set 1")?;
    let r = page.read(0b11).ok_or("page read: always updating");
    let v = ctx.read_set_values(1, 0b11).ctx("READ_VALUES set 1");
    ctx.unload().ctx("UNLOAD")?;
    let (r, v) = (r?, v?);
    ensure!(
        r.set() == 1 && r.state() == PFM_STATE_LOADED && !r.counting(),
        "page after LOAD in set 1: set {} state {} counting {}",
        r.set(),
        r.state(),
        r.counting()
    );
    ensure!(
        [r.value(0), r.value(1)] == v.values[..],
        "page [{}, {}], READ_VALUES of set 1 {:?}",
        r.value(0),
        r.value(1),
        v.values
    );
    drop(page);
    let mapped = open()?;
    let page = mapped.map_counter_page().ctx("mmap without sets")?;
    let r = mapped
        .create_sets(&mut [plain_set(1)])
        .ctx("CREATE_SETS while mapped");
    drop(page);
    r?;
    ensure!(
        infos(&mapped, 2)?[1].set_id == 1,
        "set 1 missing after CREATE_SETS while mapped"
    );
    Ok(())
}

/// After a refused CREATE_SETS (no table made), set 0 is the context's
/// only set: LOAD, START, 2 ms of CPU, STOP, then READ_VALUES with
/// `PFM_VALFL_SET` of set 0 gives the values and running time of
/// READ_VALUES without it, and, as a set's enabled time is the context's
/// running time while it existed (a set is enabled only while its thread
/// runs: Documentation/sets-design.md), an enabled time equal to that
/// running time; which is not 0. (It was 0 when a refusal left a table
/// behind.)
fn set0_times_are_the_contexts(ctx: &Context, after: &str) -> TestResult {
    program(ctx, 0, &[TC])?;
    ctx.load(0).ctx("LOAD")?;
    ctx.start().ctx("START")?;
    spin_cpu(2 * MS);
    ctx.stop().ctx("STOP")?;
    let set0 = ctx.read_set_values(0, 0b1).ctx("READ_VALUES set 0");
    let plain = ctx.read_values(0b1).ctx("READ_VALUES");
    ctx.unload().ctx("UNLOAD")?;
    let (set0, plain) = (set0?, plain?);
    ensure!(
        set0.time_running != 0
            && (set0.time_enabled, set0.time_running) == (plain.time_running, plain.time_running)
            && set0.values == plain.values,
        "{after}: set 0 reads {set0:?}, the context {plain:?} (set 0 enabled and running for the context's running time expected)"
    );
    Ok(())
}

/// Three findings of a review of the kernel side, each failing on the
/// version it was found in:
/// - a CREATE_SETS refused (EINVAL) left the set table in the context, so
///   the context could no longer be mapped (EBUSY, while the page and sets
///   excluded each other) and read set 0 with zero times: the times are
///   checked ([`set0_times_are_the_contexts`]);
/// - registers of set 0 written before the first CREATE_SETS were not
///   set 0's in the table, so an OVFL_SWITCH set 0 switching on them could
///   not be loaded (EINVAL: "could never switch") and GETINFO showed no
///   registers used;
/// - a CREATE_SETS whose array cannot be written back (read-only) created
///   the sets, then failed with EFAULT.
fn refused_create() -> TestResult {
    let ctx = open()?;
    let mut both = [PfmSetdesc {
        set_id: 1,
        set_flags: PFM_SETFL_TIME_SWITCH | PFM_SETFL_OVFL_SWITCH,
        set_timeout: MS,
        ..Default::default()
    }];
    expect_bad_set(ctx.create_sets(&mut both), 0, "CREATE with both flags")?;
    set0_times_are_the_contexts(&ctx, "after a refused CREATE_SETS")
}

/// See [`refused_create`].
fn set0_before_create() -> TestResult {
    let ctx = open()?;
    program(&ctx, 0, &[CS])?;
    let mut d = [ovfl_set(0, 1, 0b1), time_set(1, MS)];
    ctx.create_sets(&mut d)
        .ctx("CREATE_SETS after set 0's registers")?;
    program(&ctx, 1, &[CS])?;
    let info = infos(&ctx, 1)?;
    ensure!(
        info[0].set_used_pmcs == 0b1 && info[0].set_used_pmds == 0b1,
        "set 0: used PMCs {:#x} PMDs {:#x}, written before CREATE_SETS: 0b1 each",
        info[0].set_used_pmcs,
        info[0].set_used_pmds
    );
    ctx.load(0)
        .ctx("LOAD with OVFL_SWITCH set 0 on a PMD written before CREATE_SETS")?;
    ctx.unload().ctx("UNLOAD")
}

/// See [`refused_create`].
fn read_only_create() -> TestResult {
    let ctx = open()?;
    let ro = RegsArea::new(1).map_err(errno_name)?;
    ro.put(0, &[time_set(1, 1)]);
    ro.set_read_only(true).map_err(errno_name)?;
    let mut a = PfmSetsArg {
        sets: ro.addr(0),
        count: 1,
        ..Default::default()
    };
    expect(
        ioctl_in(fd(&ctx), PFM_IOC_CREATE_SETS, &mut a),
        libc::EFAULT,
        "CREATE_SETS from a read-only array",
    )?;
    expect_bad_set(ctx.sets_info(&[1]), 0, "set 1 after the EFAULT")?;
    set0_times_are_the_contexts(&ctx, "after a CREATE_SETS that failed with EFAULT")
}

fn recreate_changes_flags() -> TestResult {
    let ctx = with_sets(&[time_set(1, MS)])?;
    ctx.write_pmcs(&mut [pmc(1, 0, CS)])
        .ctx("WRITE_PMCS set 1")?;
    ctx.write_pmds(&mut [pmd(1, 0, 42)])
        .ctx("WRITE_PMDS set 1")?;
    ctx.create_sets(&mut [plain_set(1), time_set(0, 2 * MS)])
        .ctx("CREATE_SETS again")?;
    let i = ctx.sets_info(&[0, 1]).ctx("GETINFO_SETS")?;
    ensure!(
        i[0].set_flags == PFM_SETFL_TIME_SWITCH && i[0].set_timeout == 2 * MS,
        "set 0: flags {} timeout {}, expected TIME_SWITCH, 2 ms",
        i[0].set_flags,
        i[0].set_timeout
    );
    ensure!(
        i[1].set_flags == 0 && i[1].set_timeout == 0 && i[1].set_timeout_left == 0,
        "set 1: flags {} timeout {} left {}, expected none",
        i[1].set_flags,
        i[1].set_timeout,
        i[1].set_timeout_left
    );
    ensure!(
        i[1].set_used_pmcs == 1 && i[1].set_used_pmds == 1,
        "set 1: used PMCs {:#x} PMDs {:#x}, expected its registers kept (1, 1)",
        i[1].set_used_pmcs,
        i[1].set_used_pmds
    );
    let (v, _, _) = read_set(&ctx, 1, 1)?;
    ensure!(
        v[0].reg_value == 42,
        "set 1's PMD 0 is {} after CREATE_SETS again, expected 42 (kept)",
        v[0].reg_value
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// b. Conservation

/// Three sets, each switched after 1 ms and counting context-switches
/// (PMD 0) and task-clock (PMD 1), while the thread ping-pongs with a
/// partner on its CPU for at least 30 ms of its CPU time (30 switches of
/// set, each set active 10 times, each time for ~1 ms that holds several
/// round trips, each a switch).
fn conservation() -> TestResult {
    const T: u64 = MS;
    const CPU_NS: u64 = 30 * MS;
    let _pin = Pin::to(0)?;
    let mut last = String::new();
    for attempt in 1..=ATTEMPTS {
        let ctx = open()?;
        let mut d = [time_set(0, T), time_set(1, T), time_set(2, T)];
        ctx.create_sets(&mut d).ctx("CREATE_SETS")?;
        ensure!(
            d.iter().all(|d| d.set_timeout == T),
            "effective timeouts {:?}, expected 1 ms",
            d.iter().map(|d| d.set_timeout).collect::<Vec<_>>()
        );
        for s in 0..3 {
            program(&ctx, s, &[CS, TC])?;
        }
        let perf = PerfCounter::open(SoftwareEvent::ContextSwitches, 0).ctx("perf_event_open")?;
        perf.enable().ctx("perf enable")?;
        let mut partner = Partner::start()?;
        ctx.load(0).ctx("LOAD")?;
        let mut w = Window::default();
        w.start(&ctx, Some(&perf))?;
        let rounds = ping_pong(&mut partner, 0, CPU_NS);
        w.stop(&ctx, Some(&perf))?;
        drop(partner);
        let rounds = rounds?;
        let mut cs = [0u64; 3];
        let mut tc = [0u64; 3];
        let mut times = (0, 0);
        for s in 0..3u16 {
            let (v, e, r) = read_set(&ctx, s, 2)?;
            cs[s as usize] = v[0].reg_value;
            tc[s as usize] = v[1].reg_value;
            times = (e, r);
        }
        let info = infos(&ctx, 3)?;
        let plain = ctx.read_values(0b11).ctx("READ_VALUES")?;
        let mut tool = Vec::new();
        for s in 0..3u16 {
            tool.push(
                ctx.read_set_values(s, 0b11)
                    .ctx(&format!("READ_VALUES set {s}"))?,
            );
        }
        ctx.unload().ctx("UNLOAD")?;
        let running = times.1;
        let sum: u64 = cs.iter().sum();
        last = format!(
            "attempt {attempt}: {rounds} round trips; switches per set {cs:?} (sum {sum}); task-clock per set {tc:?}; time_running {running}; {}; {}",
            w.describe(),
            describe_infos(&info)
        );
        diag(&last);
        // Whatever the edges: within the thread's own bounds.
        w.check_bounds(sum)?;
        w.check_time(running)?;
        // Each set's image counted in its own turns.
        ensure!(cs.iter().all(|&c| c > 0), "a set counted no switch: {cs:?}");
        for (s, i) in info.iter().enumerate() {
            ensure!(
                tc[s] == i.set_time_running,
                "set {s}: task-clock {} != its time_running {}",
                tc[s],
                i.set_time_running
            );
            ensure!(
                i.set_used_pmcs == 0b11 && i.set_used_pmds == 0b11,
                "set {s}: used PMCs {:#x} PMDs {:#x}, expected 0b11 each",
                i.set_used_pmcs,
                i.set_used_pmds
            );
            let c = &tool[s];
            ensure!(
                c.values == [cs[s], tc[s]]
                    && (c.time_enabled, c.time_running) == (i.set_time_enabled, i.set_time_running),
                "set {s}: READ_VALUES {:?} times ({}, {}), READ_PMDS [{}, {}] and GETINFO ({}, {})",
                c.values,
                c.time_enabled,
                c.time_running,
                cs[s],
                tc[s],
                i.set_time_enabled,
                i.set_time_running
            );
        }
        // Without PFM_VALFL_SET: set 0's values, the context's times.
        ensure!(
            plain.values == [cs[0], tc[0]]
                && (plain.time_enabled, plain.time_running) == times,
            "READ_VALUES without PFM_VALFL_SET: {:?} ({}, {}), set 0's [{}, {}], the context's times {times:?}",
            plain.values,
            plain.time_enabled,
            plain.time_running,
            cs[0],
            tc[0]
        );
        // Σ running == enabled == time_running, and the round robin.
        check_rotation(&info, running, T, 0)?;
        if let Some(exact) = w.exact_switches() {
            ensure!(
                sum == exact && w.perf_switches() == exact,
                "the sets' switches add up to {sum}; the thread switched {exact} times, perf counted {}",
                w.perf_switches()
            );
            return Ok(());
        }
        diag("a switch cut START or STOP: no exact count; again");
    }
    Err(format!(
        "no attempt in {ATTEMPTS} with clean edges; last: {last}"
    ))
}

// ---------------------------------------------------------------------------
// c. Time switching

/// Two sets at 10 ms, task-clock in PMD 0 of each, 200 ms of CPU-bound
/// running. Every timeout is cut exactly (the soft model splits a delta
/// at it), so with T the context's time_running there are floor(T / 10 ms)
/// switches and [`rotation`] gives each set's runs and running time: set 0
/// has 1 + floor(s / 2) runs, set 1 ceil(s / 2), and the running times
/// differ by at most 10 ms (stronger than the runs differing by at most 1
/// and each set within 10 ms of T / 2, which they imply).
fn time_switching() -> TestResult {
    const T: u64 = 10 * MS;
    let ctx = with_sets(&[time_set(0, T), time_set(1, T)])?;
    program(&ctx, 0, &[TC])?;
    program(&ctx, 1, &[TC])?;
    ctx.load(0).ctx("LOAD")?;
    let mut w = Window::default();
    w.start(&ctx, None)?;
    spin_cpu(200 * MS);
    w.stop(&ctx, None)?;
    let (v0, _, running) = read_set(&ctx, 0, 1)?;
    let (v1, _, _) = read_set(&ctx, 1, 1)?;
    let info = infos(&ctx, 2)?;
    ctx.unload().ctx("UNLOAD")?;
    let (lo, hi) = w.own.bounds();
    diag(format!(
        "time_running {running}, own CPU time [{lo}, {hi}]; task-clock {} + {}; {}",
        v0[0].reg_value,
        v1[0].reg_value,
        describe_infos(&info)
    ));
    w.check_time(running)?;
    ensure!(
        running >= 200 * MS,
        "time_running {running} below the 200 ms the thread spun"
    );
    check_rotation(&info, running, T, 0)?;
    for (s, v) in [v0, v1].iter().enumerate() {
        ensure!(
            v[0].reg_value == info[s].set_time_running,
            "set {s}: task-clock {} != its time_running {}",
            v[0].reg_value,
            info[s].set_time_running
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// d. Overflow switching

/// Two sets, each `OVFL_SWITCH` after K overflows of PMD 0, which counts
/// context-switches with period P (value and both resets 2^64 - P); PMD 1
/// counts context-switches too, without overflows (the per-set total).
///
/// Derivation. A switch-out is one event, folded on its own (at the
/// switch), so a PMD of value 2^64 - P overflows at exactly its P-th event
/// and is reset to 2^64 - P with nothing in excess. An activation starts
/// with the set's overflow count at 0 and its PMD 0 at 2^64 - P (written
/// so, or reset so by the overflow that ended its previous activation),
/// and ends at its K-th overflow, the event that causes it counted in the
/// old set; the next event is the next set's. So every completed
/// activation, of either set, holds exactly K P events, and the two sets'
/// alternating changes nothing: with S events in all, s = floor(S / (K P))
/// switches, the last activation (set s mod 2) holding r = S - s K P.
/// Per set: PMD 1 = K P × its completed activations (+ r if it is the
/// active one); PMD 0 = 2^64 - P (+ r mod P if active).
fn overflow_switching() -> TestResult {
    const P: u64 = 5;
    const K: u32 = 2;
    const KP: u64 = K as u64 * P;
    const ROUNDS: usize = 400;
    let start_value = 0u64.wrapping_sub(P);
    let _pin = Pin::to(0)?;
    let mut last = String::new();
    for attempt in 1..=ATTEMPTS {
        let ctx = with_sets(&[ovfl_set(0, K, 0b1), ovfl_set(1, K, 0b1)])?;
        for s in 0..2 {
            ctx.write_pmcs(&mut [pmc(s, 0, CS), pmc(s, 1, CS)])
                .ctx("WRITE_PMCS")?;
            ctx.write_pmds(&mut [
                PfmPmd {
                    reg_short_reset: start_value,
                    reg_long_reset: start_value,
                    ..pmd(s, 0, start_value)
                },
                pmd(s, 1, 0),
            ])
            .ctx("WRITE_PMDS")?;
        }
        let perf = PerfCounter::open(SoftwareEvent::ContextSwitches, 0).ctx("perf_event_open")?;
        perf.enable().ctx("perf enable")?;
        let mut partner = Partner::start()?;
        ctx.load(0).ctx("LOAD")?;
        let mut w = Window::default();
        w.start(&ctx, Some(&perf))?;
        let rounds = ping_pong(&mut partner, ROUNDS, 0);
        w.stop(&ctx, Some(&perf))?;
        drop(partner);
        rounds?;
        let (a, _, running) = read_set(&ctx, 0, 2)?;
        let (b, _, _) = read_set(&ctx, 1, 2)?;
        let info = infos(&ctx, 2)?;
        ctx.unload().ctx("UNLOAD")?;
        let pmd0 = [a[0].reg_value, b[0].reg_value];
        let events = [a[1].reg_value, b[1].reg_value];
        let total = events[0] + events[1];
        last = format!(
            "attempt {attempt}: events per set {events:?} (sum {total}), PMD 0 {pmd0:x?}; {}; {}",
            w.describe(),
            describe_infos(&info)
        );
        diag(&last);
        w.check_bounds(total)?;
        let sum_running: u64 = info.iter().map(|i| i.set_time_running).sum();
        ensure!(
            info.iter().all(|i| i.set_time_enabled == running) && sum_running == running,
            "times: enabled {:?}, running adds up to {sum_running}, time_running {running}",
            info.iter().map(|i| i.set_time_enabled).collect::<Vec<_>>()
        );
        // The module's own counts against the derivation, for S = their
        // sum (exact whatever the edges).
        let s = total / KP;
        let r = total % KP;
        let runs: u64 = info.iter().map(|i| i.set_runs).sum();
        ensure!(
            runs == s + 1,
            "{} switches, floor({total} / {KP}) = {s} expected",
            runs.wrapping_sub(1)
        );
        let active = (s % 2) as usize;
        for k in 0..2 {
            let completed = (0..s).filter(|j| (j % 2) as usize == k).count() as u64;
            let is_active = k == active;
            let want_runs = completed + u64::from(is_active);
            let want_events = KP * completed + if is_active { r } else { 0 };
            let want_pmd0 = start_value + if is_active { r % P } else { 0 };
            ensure!(
                info[k].set_runs == want_runs
                    && events[k] == want_events
                    && pmd0[k] == want_pmd0,
                "set {k}: runs {} events {} PMD 0 {:#x}, expected {want_runs}, {want_events}, {want_pmd0:#x}",
                info[k].set_runs,
                events[k],
                pmd0[k]
            );
            let (cause, pmds) = if completed > 0 {
                (PFM_SET_CAUSE_OVFL, 0b1)
            } else {
                (PFM_SET_CAUSE_NONE, 0)
            };
            ensure!(
                info[k].set_last_cause == cause && info[k].set_ovfl_pmds == pmds,
                "set {k}: last cause {} ovfl_pmds {:#x}, expected {cause}, {pmds:#x}",
                info[k].set_last_cause,
                info[k].set_ovfl_pmds
            );
            ensure!(
                info[k].set_ovfl_switch_cnt == K
                    && info[k].set_switch_pmds == 1
                    && info[k].set_timeout_left == 0,
                "set {k}: count {} switch PMDs {:#x} timeout_left {}, expected {K}, 1, 0",
                info[k].set_ovfl_switch_cnt,
                info[k].set_switch_pmds,
                info[k].set_timeout_left
            );
        }
        ensure!(s >= 10, "only {s} switches in {ROUNDS} round trips");
        // And S is the thread's switch count, when the edges tell it.
        if let Some(exact) = w.exact_switches() {
            ensure!(
                total == exact && w.perf_switches() == exact,
                "the sets counted {total} switches; the thread switched {exact} times, perf counted {}",
                w.perf_switches()
            );
            return Ok(());
        }
        diag("a switch cut START or STOP: no exact count; again");
    }
    Err(format!(
        "no attempt in {ATTEMPTS} with clean edges; last: {last}"
    ))
}

// ---------------------------------------------------------------------------
// e. Scaling

/// `count × enabled / running`, rounded to nearest, in 128 bits (what a
/// tool computes; `None` if the set never ran).
fn estimate(count: u64, enabled: u64, running: u64) -> Option<u64> {
    if running == 0 {
        return None;
    }
    let v = (count as u128 * enabled as u128 + running as u128 / 2) / running as u128;
    Some(v as u64)
}

/// The scaling criterion, on an event that is not time itself:
/// two sets at 1 ms, each counting context-switches (PMD 0) and
/// task-clock (PMD 1), on a steady ping-pong of 1 s of the thread's CPU
/// time; perf counts the same thread's switches, read next to START and
/// STOP, unmultiplexed. Each set's estimate, count × enabled / running
/// (the set's times), must be within 2% of perf's count.
///
/// Why 2% holds: the workload is steady (each round trip costs the thread
/// about the same CPU time, ~170 us under TCG, so about 6 switches per
/// 1 ms slice), so a set sees switches at the same rate per ns of its
/// active time as the whole run does. A slice boundary misplaces at most
/// one switch against the set's share of time, and boundaries fall at
/// phases of the round trip that do not repeat (the slice is no multiple
/// of the round trip), so over the m ≈ 500 slices of each set the
/// misplacements add up like a random walk, about sqrt(m) ≈ 22 switches of
/// about 3,000 per set: 0.7%. perf's window holds the context's with one
/// ioctl more at each edge (at most 2 switches: 0.07%). The run is long
/// enough that the 2% sits well above that.
fn scaling_vs_perf() -> TestResult {
    const T: u64 = MS;
    const CPU_NS: u64 = 1_000 * MS;
    let _pin = Pin::to(0)?;
    let ctx = with_sets(&[time_set(0, T), time_set(1, T)])?;
    program(&ctx, 0, &[CS, TC])?;
    program(&ctx, 1, &[CS, TC])?;
    let perf = PerfCounter::open(SoftwareEvent::ContextSwitches, 0).ctx("perf_event_open")?;
    perf.enable().ctx("perf enable")?;
    let mut partner = Partner::start()?;
    ctx.load(0).ctx("LOAD")?;
    let mut w = Window::default();
    w.start(&ctx, Some(&perf))?;
    let rounds = ping_pong(&mut partner, 0, CPU_NS);
    w.stop(&ctx, Some(&perf))?;
    drop(partner);
    let rounds = rounds?;
    let info = infos(&ctx, 2)?;
    let mut counts = [0u64; 2];
    for s in 0..2u16 {
        let (v, _, _) = read_set(&ctx, s, 2)?;
        counts[s as usize] = v[0].reg_value;
    }
    ctx.unload().ctx("UNLOAD")?;
    let truth = w.perf_switches();
    let est: Vec<Option<u64>> = (0..2)
        .map(|s| {
            estimate(
                counts[s],
                info[s].set_time_enabled,
                info[s].set_time_running,
            )
        })
        .collect();
    diag(format!(
        "{rounds} round trips; switches per set {counts:?}, estimates {est:?}, perf {truth}; {}",
        describe_infos(&info)
    ));
    w.check_bounds(counts.iter().sum())?;
    for (s, e) in est.iter().enumerate() {
        let Some(e) = *e else {
            return Err(format!("set {s} never ran"));
        };
        // |e - truth| <= 2% of truth, in integers.
        ensure!(
            e.abs_diff(truth) * 50 <= truth,
            "set {s}: estimate {e} is more than 2% from perf's {truth}"
        );
    }
    Ok(())
}

/// Two sets at 1 ms, task-clock in PMD 0 of each, CPU-bound; every 10 ms
/// of CPU a tool's read of each set with `PFM_VALFL_SET` (which folds: the
/// times are as of the read). The estimate of each set's task-clock,
/// count × enabled / running, must be the thread's CPU time over the
/// window: within its own clock read around START and around the read,
/// both ways, with no tolerance. That holds exactly because the soft
/// model charges each set's task-clock with its share of the time (count
/// == running), so the estimate is `enabled`, which is the thread's
/// running time since START; the 2% a tool allows multiplexed counts of
/// other events is not needed, and would hide a lost or doubled share.
/// Each set's running time at each read is also what the round robin
/// gives for that read's enabled time.
fn scaling() -> TestResult {
    const T: u64 = MS;
    const READS: usize = 10;
    let ctx = with_sets(&[time_set(0, T), time_set(1, T)])?;
    program(&ctx, 0, &[TC])?;
    program(&ctx, 1, &[TC])?;
    ctx.load(0).ctx("LOAD")?;
    let s0 = thread_cpu_ns();
    ctx.start().ctx("START")?;
    let s1 = thread_cpu_ns();
    let mut worst = (0u64, 0u64);
    for k in 0..READS {
        spin_cpu(10 * MS);
        for set in 0..2u16 {
            let t0 = thread_cpu_ns();
            let c = ctx.read_set_values(set, 1).ctx("READ_VALUES")?;
            let t1 = thread_cpu_ns();
            let (count, enabled, running) = (c.values[0], c.time_enabled, c.time_running);
            let (lo, hi) = (t0.saturating_sub(s1), t1 - s0);
            let est = estimate(count, enabled, running);
            ensure!(
                count == running,
                "read {k}, set {set}: task-clock {count} != its time_running {running}"
            );
            ensure!(
                est == Some(enabled) && (lo..=hi).contains(&enabled),
                "read {k}, set {set}: estimate {est:?} (count {count} x enabled {enabled} / running {running}); the thread's own CPU time says [{lo}, {hi}]"
            );
            let rot = rotation(enabled, T, 2, 0);
            ensure!(
                running == rot.running[set as usize],
                "read {k}, set {set}: time_running {running}, the round robin gives {} of {enabled}",
                rot.running[set as usize]
            );
            worst = (worst.0.max(enabled - lo), worst.1.max(hi - enabled));
        }
    }
    ctx.stop().ctx("STOP")?;
    let info = infos(&ctx, 2)?;
    let (_, _, running) = read_set(&ctx, 0, 1)?;
    ctx.unload().ctx("UNLOAD")?;
    diag(format!(
        "{READS} reads per set: the estimate at most {} ns above its lower bound, {} ns below its upper; {}",
        worst.0,
        worst.1,
        describe_infos(&info)
    ));
    check_rotation(&info, running, T, 0)
}

// ---------------------------------------------------------------------------
// f. GETINFO after UNLOAD, DELETE, LOAD in a set; one set

fn after_unload() -> TestResult {
    const T: u64 = MS;
    let ctx = with_sets(&[time_set(0, T), time_set(1, T), time_set(2, T)])?;
    for s in 0..3 {
        program(&ctx, s, &[TC])?;
    }
    ctx.load(0).ctx("LOAD")?;
    ctx.start().ctx("START")?;
    spin_cpu(5 * MS);
    ctx.stop().ctx("STOP")?;
    let before = infos(&ctx, 3)?;
    ctx.unload().ctx("UNLOAD")?;
    let after = infos(&ctx, 3).ctx("after UNLOAD")?;
    ensure!(
        before == after,
        "GETINFO changed at UNLOAD: {} -> {}",
        describe_infos(&before),
        describe_infos(&after)
    );
    let (set0, _, _) = read_set(&ctx, 0, 1)?;
    ctx.delete_sets(&[1, 2]).ctx("DELETE_SETS 1, 2")?;
    expect_bad_set(ctx.sets_info(&[1]), 0, "GETINFO of deleted set 1")?;
    ctx.sets_info(&[0]).ctx("GETINFO of set 0")?;
    // A set created again is a new one: no registers, no history.
    ctx.create_sets(&mut [time_set(1, T)])
        .ctx("CREATE_SETS 1 again")?;
    let i = ctx.sets_info(&[1]).ctx("GETINFO of the new set 1")?;
    ensure!(
        i[0].set_used_pmcs == 0
            && i[0].set_used_pmds == 0
            && i[0].set_runs == 0
            && i[0].set_time_enabled == 0
            && i[0].set_time_running == 0,
        "the new set 1: {} used PMCs {:#x} PMDs {:#x}",
        describe_infos(&i),
        i[0].set_used_pmcs,
        i[0].set_used_pmds
    );
    let (v, _, _) = read_set(&ctx, 1, 1)?;
    ensure!(
        v[0].reg_value == 0,
        "the new set 1's PMD 0 is {}",
        v[0].reg_value
    );
    program(&ctx, 1, &[TC])?;
    // LOAD in set 1: its first run counts, the bookkeeping starts over.
    ctx.load_in_set(0, 1).ctx("LOAD in set 1")?;
    let i = infos(&ctx, 2)?;
    ensure!(
        i[0].set_runs == 0
            && i[1].set_runs == 1
            && i.iter()
                .all(|i| i.set_time_enabled == 0 && i.set_time_running == 0)
            && i[1].set_timeout_left == T,
        "right after LOAD in set 1: {}",
        describe_infos(&i)
    );
    ctx.start().ctx("START")?;
    spin_cpu(5 * MS);
    ctx.stop().ctx("STOP")?;
    let i = infos(&ctx, 2)?;
    let (a, _, running) = read_set(&ctx, 0, 1)?;
    let (b, _, _) = read_set(&ctx, 1, 1)?;
    ctx.unload().ctx("UNLOAD")?;
    diag(format!(
        "LOAD in set 1: time_running {running}; {}",
        describe_infos(&i)
    ));
    check_rotation(&i, running, T, 1)?;
    ensure!(
        a[0].reg_value.wrapping_sub(set0[0].reg_value) == i[0].set_time_running
            && b[0].reg_value == i[1].set_time_running,
        "task-clock: set 0 {} (was {}), set 1 {}; running times {} and {}",
        a[0].reg_value,
        set0[0].reg_value,
        b[0].reg_value,
        i[0].set_time_running,
        i[1].set_time_running
    );
    Ok(())
}

/// A context loaded with set 0 alone: its set has the context's running
/// time as both enabled and running time (Documentation/sets-design.md),
/// and one run, whether it never asked for sets or deleted the ones it
/// had.
fn one_set() -> TestResult {
    let bare = open()?;
    let had = with_sets(&[time_set(1, MS)])?;
    had.delete_sets(&[1]).ctx("DELETE_SETS 1")?;
    for (label, ctx) in [("without sets", &bare), ("sets deleted", &had)] {
        program(ctx, 0, &[TC])?;
        ctx.load(0).ctx("LOAD")?;
        ctx.start().ctx("START")?;
        spin_cpu(3 * MS);
        ctx.stop().ctx("STOP")?;
        let (v, _, running) = read_set(ctx, 0, 1)?;
        let i = ctx.sets_info(&[0]).ctx("GETINFO_SETS")?;
        let plain = ctx.read_values(1).ctx("READ_VALUES")?;
        let set0 = ctx.read_set_values(0, 1).ctx("READ_VALUES set 0")?;
        ctx.unload().ctx("UNLOAD")?;
        ensure!(
            i[0].set_time_enabled == running && i[0].set_time_running == running,
            "{label}: GETINFO of set 0: enabled {} running {}, time_running {running}",
            i[0].set_time_enabled,
            i[0].set_time_running
        );
        ensure!(
            i[0].set_runs == 1,
            "{label}: set 0 has {} runs since LOAD, expected 1",
            i[0].set_runs
        );
        ensure!(
            plain.values == [v[0].reg_value]
                && plain.time_running == running
                && set0.values == plain.values
                && (set0.time_enabled, set0.time_running) == (running, running),
            "{label}: READ_VALUES {:?} ({}, {}), with PFM_VALFL_SET {:?} ({}, {}); READ_PMDS {} time_running {running}",
            plain.values,
            plain.time_enabled,
            plain.time_running,
            set0.values,
            set0.time_enabled,
            set0.time_running,
            v[0].reg_value
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// g. Overflow messages

/// Two sets switching at every overflow of PMD 0 (context-switches,
/// period 3, `PFM_REGFL_OVFL_NOTIFY`): the overflows alternate between
/// the sets, so the messages must name set 0, 1, 0, 1, ... (the set whose
/// PMD overflowed, as `ovfl_pmds` is that set's), one per switch. The
/// queue is drained after every round trip (at most one switch each, one
/// message per three), so it never fills and nothing is masked.
fn messages_name_their_set() -> TestResult {
    const P: u64 = 3;
    const WANT: usize = 6;
    let start_value = 0u64.wrapping_sub(P);
    let ctx = with_sets(&[ovfl_set(0, 1, 0b1), ovfl_set(1, 1, 0b1)])?;
    for s in 0..2 {
        ctx.write_pmcs(&mut [pmc(s, 0, CS)]).ctx("WRITE_PMCS")?;
        ctx.write_pmds(&mut [PfmPmd {
            reg_flags: PFM_REGFL_OVFL_NOTIFY,
            reg_short_reset: start_value,
            reg_long_reset: start_value,
            ..pmd(s, 0, start_value)
        }])
        .ctx("WRITE_PMDS")?;
    }
    ctx.set_nonblocking(true).ctx("O_NONBLOCK")?;
    let _pin = Pin::to(0)?;
    let mut partner = Partner::start()?;
    ctx.load(0).ctx("LOAD")?;
    ctx.start().ctx("START")?;
    let mut msgs = Vec::new();
    let mut rounds = 0;
    let res = (|| -> TestResult {
        while msgs.len() < WANT && rounds < 10_000 {
            partner.round_trip()?;
            rounds += 1;
            while let Some(m) = ctx.read_message().ctx("read")? {
                msgs.push(m);
            }
        }
        Ok(())
    })();
    ctx.stop().ctx("STOP")?;
    drop(partner);
    res?;
    while let Some(m) = ctx.read_message().ctx("read")? {
        msgs.push(m);
    }
    let st = ctx.state().ctx("GET_STATE")?.state;
    let info = infos(&ctx, 2)?;
    ctx.unload().ctx("UNLOAD")?;
    let sets: Vec<u16> = msgs.iter().map(|m| m.set).collect();
    diag(format!(
        "{rounds} round trips, {} messages from sets {sets:?}; {}",
        msgs.len(),
        describe_infos(&info)
    ));
    ensure!(st == CtxState::Loaded, "state {st:?}, expected LOADED");
    ensure!(msgs.len() >= WANT, "only {} messages", msgs.len());
    for (k, m) in msgs.iter().enumerate() {
        ensure!(
            m.kind == MessageKind::Overflow && m.ovfl_pmds == 1,
            "message {k}: {m:?}, expected an overflow of PMD 0"
        );
        ensure!(
            m.set == (k % 2) as u16,
            "message {k} names set {}, expected {} (the sets alternate from set 0)",
            m.set,
            k % 2
        );
    }
    let runs: u64 = info.iter().map(|i| i.set_runs).sum();
    ensure!(
        runs == msgs.len() as u64 + 1,
        "{} switches for {} overflows (one each)",
        runs.wrapping_sub(1),
        msgs.len()
    );
    Ok(())
}

/// RESTART resets only the sets that notified (perfmon2's rule): two sets
/// that never switch, PMD 0 of each counting context-switches with
/// `PFM_REGFL_OVFL_NOTIFY`; set 0's overflows at every switch (period 1)
/// fill the queue (8 messages) and mask the context. Set 1, which never
/// counted, keeps its value 0 through RESTART (its long reset, 2^64 - 5,
/// would be a reset of a set that did not notify); set 0's PMD 0 gets its
/// long reset, 2^64 - 1000, plus at most the switches the thread made
/// since the RESTART (its own getrusage count).
fn restart_resets_notified_sets() -> TestResult {
    let ctx = with_sets(&[plain_set(0), plain_set(1)])?;
    ctx.write_pmcs(&mut [pmc(0, 0, CS), pmc(1, 0, CS)])
        .ctx("WRITE_PMCS")?;
    let long0 = u64::MAX - 999;
    ctx.write_pmds(&mut [
        PfmPmd {
            reg_flags: PFM_REGFL_OVFL_NOTIFY,
            reg_short_reset: u64::MAX,
            reg_long_reset: long0,
            ..pmd(0, 0, u64::MAX)
        },
        PfmPmd {
            reg_flags: PFM_REGFL_OVFL_NOTIFY,
            reg_short_reset: u64::MAX - 4,
            reg_long_reset: u64::MAX - 4,
            ..pmd(1, 0, 0)
        },
    ])
    .ctx("WRITE_PMDS")?;
    ctx.set_nonblocking(true).ctx("O_NONBLOCK")?;
    ctx.load(0).ctx("LOAD")?;
    ctx.start().ctx("START")?;
    let masked = module::wait_for(Duration::from_secs(10), || {
        std::thread::sleep(Duration::from_millis(1));
        ctx.state().is_ok_and(|s| s.state == CtxState::Masked)
    });
    let result = (|| -> TestResult {
        ensure!(masked, "the queue never filled: not MASKED");
        let sw = pfm_guest::edges::thread_switches();
        ctx.restart().ctx("RESTART")?;
        let (s0, _, _) = read_set(&ctx, 0, 1)?;
        let (s1, _, _) = read_set(&ctx, 1, 1)?;
        let since = pfm_guest::edges::thread_switches() - sw;
        diag(format!(
            "after RESTART: set 0 PMD 0 {:#x}, set 1 PMD 0 {:#x}; {since} switches since",
            s0[0].reg_value, s1[0].reg_value
        ));
        ensure!(
            s1[0].reg_value == 0,
            "set 1 never overflowed nor notified, yet RESTART changed its PMD 0 to {:#x}",
            s1[0].reg_value
        );
        ensure!(
            (long0..=long0 + since).contains(&s0[0].reg_value),
            "set 0's PMD 0 {:#x} after RESTART, its long reset {long0:#x} plus at most {since} switches expected",
            s0[0].reg_value
        );
        Ok(())
    })();
    ctx.stop().ctx("STOP")?;
    ctx.unload().ctx("UNLOAD")?;
    result
}

fn main() {
    pfm_guest::child::dispatch();
    let mut t = Tap::new(PLAN);
    pfm_guest::watchdog(Duration::from_secs(300));
    t.require(
        "insmod perfmon.ko pmu=soft soft_counters=2",
        module::insmod(&["pmu=soft", "soft_counters=2"]),
    );
    t.run(
        "soft_counters=2: PMCs and PMDs 0 and 1 only (PMC 2 NOTAVAIL, switch_pmds naming PMD 2 EINVAL)",
        soft_counters_2,
    );
    t.run(
        "CREATE_SETS set id 16 (and 65535): EINVAL at its index, nothing created",
        id_16,
    );
    t.run(
        "CREATE_SETS both switch flags, an unknown flag: EINVAL",
        both_flags,
    );
    t.run(
        "CREATE_SETS TIME_SWITCH without a timeout, a timeout without it: EINVAL",
        timeout_vs_flag,
    );
    t.run(
        "CREATE_SETS OVFL_SWITCH without a count or PMDs, either without it: EINVAL",
        count_vs_flag,
    );
    t.run("CREATE_SETS reserved != 0: EINVAL", desc_reserved);
    t.run(
        "CREATE_SETS timeout 1 ns: 100 us effective, returned and reported",
        min_timeout,
    );
    t.run(
        "pfm_sets_arg count 0: EINVAL; 17, 2^32 - 1: E2BIG; 16 accepted",
        arg_count,
    );
    t.run("pfm_sets_arg reserved != 0: EINVAL", arg_reserved);
    t.run(
        "sets calls with bad pointers: EFAULT, nothing changed",
        bad_pointers,
    );
    t.run(
        "DELETE_SETS of set 0, a missing set, set 16: EINVAL at its index, nothing deleted",
        delete_errnos,
    );
    t.run(
        "GETINFO_SETS of a missing set: EINVAL at its index",
        getinfo_missing,
    );
    t.run(
        "CREATE_SETS and DELETE_SETS while loaded: EBADFD, sets unchanged",
        while_loaded,
    );
    t.run(
        "register elements naming a missing set: EINVAL, PFM_REG_RETFL_NOSET",
        registers_nosets,
    );
    t.run(
        "LOAD in a missing set, or with an OVFL_SWITCH set that cannot switch: EINVAL",
        load_missing,
    );
    t.run(
        "READ_VALUES: a set without PFM_VALFL_SET, a missing set, unknown vflags, pad: EINVAL",
        read_values_args,
    );
    t.run(
        "counter page and sets: mmap with sets and CREATE_SETS while mapped accepted; the page names the resident set, its values",
        page_with_sets,
    );
    t.run(
        "CREATE_SETS of existing sets changes their flags, keeps their registers",
        recreate_changes_flags,
    );
    t.run(
        "conservation: 3 sets at 1 ms, ping-pong: the sets' switches add up to perf's and the thread's own count, running times to time_running",
        conservation,
    );
    t.run(
        "time switching: 200 ms, 2 sets at 10 ms: floor(time_running / 10 ms) switches, runs and times as the round robin gives",
        time_switching,
    );
    t.run(
        "overflow switching: 2 sets after 2 overflows of period 5: floor(S / 10) switches, counts exact",
        overflow_switching,
    );
    t.run(
        "scaling: 2 sets at 1 ms, task-clock: count x enabled / running within the thread's own CPU time, exactly",
        scaling,
    );
    t.run(
        "scaling: 2 sets at 1 ms, context-switches on a steady ping-pong: each estimate within 2% of perf's unmultiplexed count",
        scaling_vs_perf,
    );
    t.run(
        "a refused CREATE_SETS makes no table: the context can still be mapped",
        refused_create,
    );
    t.run(
        "set 0's registers written before CREATE_SETS are set 0's: OVFL_SWITCH on them loads",
        set0_before_create,
    );
    t.run(
        "CREATE_SETS from a read-only array: EFAULT, nothing created",
        read_only_create,
    );
    t.run(
        "GETINFO after UNLOAD unchanged; DELETE; a re-created set is empty; LOAD in set 1 starts the rotation there",
        after_unload,
    );
    t.run(
        "one set: GETINFO and READ_VALUES of set 0 report the context's time_running",
        one_set,
    );
    t.run(
        "overflow messages name the set whose PMD overflowed",
        messages_name_their_set,
    );
    t.run(
        "RESTART resets only the sets that notified: a set that never overflowed keeps its value",
        restart_resets_notified_sets,
    );
    t.run("no live context left (sysfs)", || {
        module::wait_contexts(0, Duration::from_secs(2))
    });
    t.run("rmmod perfmon", module::rmmod);
    t.finish();
}
