//! The fuzzer: several worker processes, each with several threads, doing
//! random operations on /dev/perfmon in the spirit of perf_fuzzer, plus the
//! process and thread churn around them (fork, exec, thread exit, signals,
//! SIGKILL of tools and targets).
//!
//! # Structure
//!
//! - The *master* (the calling process) forks a do-nothing process-group
//!   leader and `procs` *workers* into that group, watches progress, respawns
//!   workers that were killed, and at the end stops everyone, SIGKILLs the
//!   group, reaps it (it is the child subreaper, so orphans come back to it)
//!   and reports. It never touches /dev/perfmon itself.
//! - A *worker* runs `threads` *actors* (threads). An actor loops: pick an
//!   operation by weight, build its arguments, run it, check the result
//!   against the ABI's rules. Actors also spawn short-lived threads (which
//!   exit, often while monitored) and fork children (targets, tools, exec'ers
//!   and small fuzzers), and signal them.
//! - Shared memory (MAP_SHARED, created before the first fork) holds the stop
//!   flag, the operation counters, a board of live thread ids that any actor
//!   may attach to, and each actor's current operation for hang reports.
//!
//! # Determinism
//!
//! Every actor has its own xorshift generator whose seed is derived from the
//! run's seed and the actor's place (worker, generation, thread; a child or
//! short thread from its parent's generator). The same `--seed` replays the
//! same random choices per actor; the interleaving, and therefore results
//! that depend on other actors (which fds exist, which threads live), differ.
//! `--procs 1 --threads 1` runs exactly worker 0 thread 0's sequence, the
//! first step of reducing a failure; `--log FILE` writes every operation
//! (actor, number, operation, arguments, result) to FILE.
//!
//! # Bounded blocking
//!
//! Every thread has a periodic POSIX timer sending it SIGUSR1 (no-op handler,
//! no SA_RESTART): a blocking read returns EINTR and a thread blocked by a
//! notify-block overflow is released (perfmon lets a signal end the wait),
//! so no operation blocks for longer than the timer period.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::rng::{derive, Rng};
use crate::sys::{self, abi, Arena, ThreadTimer, ARENA_HOLE, ARENA_NONE, ARENA_RO, ARENA_RW, ARENA_RW2, KERNEL_ADDR, PAGE};

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// The run's seed.
    pub seed: u64,
    /// Stop after this many operations (0: no limit).
    pub ops: u64,
    /// Stop after this long (None: no limit).
    pub duration: Option<Duration>,
    /// Write every operation to this file.
    pub log: Option<String>,
    /// Worker processes.
    pub procs: usize,
    /// Threads per worker.
    pub threads: usize,
    /// Run every third worker as uid/gid 1000 (permission paths).
    pub unpriv: bool,
    /// Progress lines every this many seconds (0: none).
    pub progress_secs: u64,
    /// Also write progress lines to /dev/kmsg (visible live on the console).
    pub kmsg: bool,
    /// Period of each thread's SIGUSR1 timer.
    pub timer_us: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            seed: 1,
            ops: 100_000,
            duration: None,
            log: None,
            procs: 3,
            threads: 3,
            unpriv: true,
            progress_secs: 30,
            kmsg: false,
            timer_us: 20_000,
        }
    }
}

/// What happened.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Operations executed.
    pub ops: u64,
    /// System calls issued for them.
    pub syscalls: u64,
    /// Wall time of the run (start to everything reaped).
    pub elapsed: Duration,
    /// Workers started (respawns included).
    pub workers: u64,
    /// Children forked by actors.
    pub forks: u64,
    /// Short-lived threads started.
    pub threads: u64,
    /// execs attempted.
    pub execs: u64,
    /// Overflow setups (tiny periods, notify, notify-block).
    pub arms: u64,
    /// Results that break the ABI's rules.
    pub anomalies: Vec<String>,
    /// Their number (the list keeps the first ones).
    pub anomaly_count: u64,
    /// Processes that could not be reaped, with what /proc says about them.
    pub hung: Vec<String>,
    /// Operations per kind.
    pub per_op: Vec<(&'static str, u64)>,
    /// The most frequent (operation, errno) pairs.
    pub errnos: Vec<(&'static str, i32, u64)>,
}

impl Report {
    /// Operations per second.
    pub fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(0.001)
    }

    /// A multi-line summary.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "ops executed: {} in {:.1} s ({:.0} ops/s), {} syscalls",
            self.ops,
            self.elapsed.as_secs_f64(),
            self.rate(),
            self.syscalls
        );
        let _ = writeln!(
            s,
            "workers started: {}, children forked: {}, short threads: {}, execs: {}, overflow setups: {}",
            self.workers, self.forks, self.threads, self.execs, self.arms
        );
        let _ = write!(s, "per operation:");
        for (i, (name, n)) in self.per_op.iter().enumerate() {
            if i % 6 == 0 {
                let _ = write!(s, "\n ");
            }
            let _ = write!(s, " {name}={n}");
        }
        let _ = write!(s, "\nmost frequent errnos:");
        for (i, (name, e, n)) in self.errnos.iter().take(24).enumerate() {
            if i % 4 == 0 {
                let _ = write!(s, "\n ");
            }
            let _ = write!(s, " {name}/{}={n}", perfmon::errno_name(*e));
        }
        let _ = writeln!(s, "\nanomalies: {}", self.anomaly_count);
        for a in &self.anomalies {
            let _ = writeln!(s, "  {a}");
        }
        if !self.hung.is_empty() {
            let _ = writeln!(s, "hung processes: {}", self.hung.len());
            for h in &self.hung {
                let _ = writeln!(s, "  {h}");
            }
        }
        s
    }
}

// ---- operations ----

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
enum Op {
    Open,
    Close,
    Dup,
    GetInfo,
    WritePmcs,
    WritePmds,
    ReadPmds,
    Load,
    Unload,
    Start,
    Stop,
    Restart,
    GetState,
    SetFlags,
    BadIoctl,
    Read,
    Poll,
    Fcntl,
    MiscFd,
    Sched,
    Arm,
    Thread,
    Fork,
    Signal,
    Worker,
    Reap,
}

const NOPS: usize = 26;
const OPS: [Op; NOPS] = [
    Op::Open,
    Op::Close,
    Op::Dup,
    Op::GetInfo,
    Op::WritePmcs,
    Op::WritePmds,
    Op::ReadPmds,
    Op::Load,
    Op::Unload,
    Op::Start,
    Op::Stop,
    Op::Restart,
    Op::GetState,
    Op::SetFlags,
    Op::BadIoctl,
    Op::Read,
    Op::Poll,
    Op::Fcntl,
    Op::MiscFd,
    Op::Sched,
    Op::Arm,
    Op::Thread,
    Op::Fork,
    Op::Signal,
    Op::Worker,
    Op::Reap,
];

/// Weights (per ~10,000) of the worker threads' operations. Process and
/// thread churn is rare: a fork or an exec costs tens of ms on the debug
/// kernel under TCG, an ioctl a fraction of one.
const WEIGHTS: [u32; NOPS] = [
    550,  // Open
    420,  // Close
    120,  // Dup
    200,  // GetInfo
    900,  // WritePmcs
    1000, // WritePmds
    900,  // ReadPmds
    800,  // Load
    450,  // Unload
    700,  // Start
    400,  // Stop
    450,  // Restart
    400,  // GetState
    300,  // SetFlags
    500,  // BadIoctl
    550,  // Read
    300,  // Poll
    180,  // Fcntl
    120,  // MiscFd
    450,  // Sched
    300,  // Arm
    14,   // Thread
    14,   // Fork
    40,   // Signal
    1,    // Worker
    60,   // Reap
];

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Open => "open",
            Op::Close => "close",
            Op::Dup => "dup",
            Op::GetInfo => "get_info",
            Op::WritePmcs => "write_pmcs",
            Op::WritePmds => "write_pmds",
            Op::ReadPmds => "read_pmds",
            Op::Load => "load",
            Op::Unload => "unload",
            Op::Start => "start",
            Op::Stop => "stop",
            Op::Restart => "restart",
            Op::GetState => "get_state",
            Op::SetFlags => "set_flags",
            Op::BadIoctl => "bad_ioctl",
            Op::Read => "read",
            Op::Poll => "poll",
            Op::Fcntl => "fcntl",
            Op::MiscFd => "misc_fd",
            Op::Sched => "sched",
            Op::Arm => "arm",
            Op::Thread => "thread",
            Op::Fork => "fork",
            Op::Signal => "signal",
            Op::Worker => "worker",
            Op::Reap => "reap",
        }
    }
}

// ---- shared memory ----

const BOARD: usize = 256;
const MAX_WORKERS: usize = 32;
const SLOTS: usize = 512;
const MAX_ERRNO: usize = 136;
const ANOMALY_TEXTS: usize = 32;
const ANOMALY_LEN: usize = 240;

/// One actor's place in shared memory, for hang reports.
#[repr(C)]
struct Slot {
    tid: AtomicU32,
    op: AtomicU32,
    n: AtomicU64,
}

#[repr(C)]
struct Shared {
    stop: AtomicU32,
    goal: AtomicU64,
    ops: AtomicU64,
    syscalls: AtomicU64,
    forks: AtomicU64,
    threads: AtomicU64,
    execs: AtomicU64,
    arms: AtomicU64,
    anomalies: AtomicU64,
    next_slot: AtomicU64,
    /// Live thread ids any actor may attach to: `uid << 32 | tid`.
    board: [AtomicU64; BOARD],
    workers: [AtomicU32; MAX_WORKERS],
    per_op: [AtomicU64; NOPS],
    errnos: [AtomicU64; NOPS * MAX_ERRNO],
    slots: [Slot; SLOTS],
    anomaly_text: [[AtomicU64; ANOMALY_LEN / 8]; ANOMALY_TEXTS],
}

static SHARED: AtomicUsize = AtomicUsize::new(0);
static LOG_FD: AtomicI32 = AtomicI32::new(-1);
static TIMER_US: AtomicU64 = AtomicU64::new(20_000);

fn shared() -> &'static Shared {
    let p = SHARED.load(Ordering::Relaxed);
    assert!(p != 0);
    // SAFETY: a MAP_SHARED mapping of at least size_of::<Shared>() bytes,
    // zero-initialised (a valid `Shared`: atomics only), never unmapped.
    unsafe { &*(p as *const Shared) }
}

fn stopping() -> bool {
    let s = shared();
    s.stop.load(Ordering::Relaxed) != 0 || s.ops.load(Ordering::Relaxed) >= s.goal.load(Ordering::Relaxed)
}

fn record_anomaly(text: &str) {
    let s = shared();
    let i = s.anomalies.fetch_add(1, Ordering::Relaxed) as usize;
    if i < ANOMALY_TEXTS {
        let mut bytes = [0u8; ANOMALY_LEN];
        let t = text.as_bytes();
        let n = t.len().min(ANOMALY_LEN - 1);
        bytes[..n].copy_from_slice(&t[..n]);
        for (k, w) in s.anomaly_text[i].iter().enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[k * 8..k * 8 + 8]);
            w.store(u64::from_le_bytes(b), Ordering::Relaxed);
        }
    }
    let fd = LOG_FD.load(Ordering::Relaxed);
    if fd >= 0 {
        sys::write_all(fd, format!("ANOMALY {text}\n").as_bytes());
    }
}

fn anomaly_texts() -> Vec<String> {
    let s = shared();
    let n = (s.anomalies.load(Ordering::Relaxed) as usize).min(ANOMALY_TEXTS);
    (0..n)
        .map(|i| {
            let bytes: Vec<u8> = s.anomaly_text[i].iter().flat_map(|w| w.load(Ordering::Relaxed).to_le_bytes()).collect();
            let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
            String::from_utf8_lossy(&bytes[..end]).into_owned()
        })
        .collect()
}

// ---- per-process state (copied into forked children) ----

const POOL: usize = 24;
/// The process's perfmon fds; any thread may use any of them. Only the
/// thread that takes a number out (swap to -1) closes it.
static FDS: [AtomicI32; POOL] = [const { AtomicI32::new(-1) }; POOL];
/// Thread ids of this process's actors (for "attach to a sibling thread").
static PROC_TIDS: [AtomicU32; 16] = [const { AtomicU32::new(0) }; 16];
/// Short-lived threads of this process alive now.
static SHORT_LIVE: AtomicUsize = AtomicUsize::new(0);

fn publish_tid(rng: &mut Rng) {
    let tid = sys::gettid();
    let uid = sys::getuid() as u64;
    shared().board[rng.below(BOARD as u64) as usize].store(uid << 32 | tid as u64, Ordering::Relaxed);
    PROC_TIDS[rng.below(16) as usize].store(tid, Ordering::Relaxed);
}

/// Per-thread signal setup: the no-op handlers and the periodic SIGUSR1.
fn thread_timer() -> Option<ThreadTimer> {
    ThreadTimer::new(libc::SIGUSR1, TIMER_US.load(Ordering::Relaxed))
}

fn process_signals() {
    sys::catch_signal(libc::SIGUSR1);
    sys::catch_signal(libc::SIGUSR2);
    sys::catch_signal(libc::SIGIO);
    sys::ignore_signal(libc::SIGPIPE);
    sys::default_signal(libc::SIGCHLD);
}

/// Pointer kinds for arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ptr {
    Good,
    Null,
    Hole,
    Guard,
    StraddleHole,
    StraddleGuard,
    ReadOnly,
    Kernel,
    Wild,
}

impl Ptr {
    /// The kernel can read all of it.
    fn readable(self) -> bool {
        matches!(self, Ptr::Good | Ptr::ReadOnly)
    }
}

/// Errnos any operation on a pool fd may see because another thread closed it.
const ALWAYS: [i32; 1] = [libc::EBADF];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Worker,
    Short,
    Child,
}

/// One thread doing operations.
struct Actor {
    rng: Rng,
    arena: Arena,
    name: String,
    slot: usize,
    kind: Kind,
    uid: u32,
    n: u64,
    children: Vec<i32>,
    shorts: Vec<std::thread::JoinHandle<()>>,
    _timer: Option<ThreadTimer>,
    /// Text of the operation being run (only built when logging).
    line: String,
    logging: bool,
    /// Syscalls of the current operation.
    calls: u64,
}

impl Actor {
    fn new(seed: u64, name: String, kind: Kind) -> Actor {
        let mut rng = Rng::new(seed);
        let mut fill = Rng::new(seed ^ 0xa5a5);
        let arena = Arena::new(|| fill.next());
        let slot = shared().next_slot.fetch_add(1, Ordering::Relaxed) as usize % SLOTS;
        shared().slots[slot].tid.store(sys::gettid(), Ordering::Relaxed);
        publish_tid(&mut rng);
        Actor {
            rng,
            arena,
            name,
            slot,
            kind,
            uid: sys::getuid(),
            n: 0,
            children: Vec::new(),
            shorts: Vec::new(),
            _timer: thread_timer(),
            line: String::new(),
            logging: LOG_FD.load(Ordering::Relaxed) >= 0,
            calls: 0,
        }
    }

    // ---- logging and results ----

    fn note(&mut self, args: std::fmt::Arguments<'_>) {
        if self.logging {
            let _ = self.line.write_fmt(args);
        }
    }

    fn begin(&mut self, op: Op) {
        self.n += 1;
        self.calls = 0;
        let s = shared();
        s.ops.fetch_add(1, Ordering::Relaxed);
        s.per_op[op as usize].fetch_add(1, Ordering::Relaxed);
        let slot = &s.slots[self.slot];
        slot.op.store(op as u32, Ordering::Relaxed);
        slot.n.store(self.n, Ordering::Relaxed);
        if self.logging {
            self.line.clear();
            let _ = write!(self.line, "{} #{} {}", self.name, self.n, op.name());
        }
    }

    fn end(&mut self) {
        shared().syscalls.fetch_add(self.calls, Ordering::Relaxed);
        if self.logging {
            self.line.push('\n');
            sys::write_all(LOG_FD.load(Ordering::Relaxed), self.line.as_bytes());
        }
    }

    /// Counts a syscall result of `op`, logs it, and returns it.
    fn res(&mut self, op: Op, r: Result<i64, i32>) -> Result<i64, i32> {
        self.calls += 1;
        if let Err(e) = r {
            let e = (e as usize).min(MAX_ERRNO - 1);
            shared().errnos[op as usize * MAX_ERRNO + e].fetch_add(1, Ordering::Relaxed);
        }
        if self.logging {
            match r {
                Ok(v) => {
                    let _ = write!(self.line, " ={v}");
                }
                Err(e) => {
                    let _ = write!(self.line, " ={}", perfmon::errno_name(e));
                }
            }
        }
        r
    }

    /// Records an anomaly about the current operation.
    fn anomaly(&mut self, op: Op, what: String) {
        let text = format!("{} #{} {}: {what}", self.name, self.n, op.name());
        record_anomaly(&text);
    }

    /// Checks that `r` is `Ok` or one of `allowed` (plus EBADF).
    fn allow(&mut self, op: Op, r: Result<i64, i32>, allowed: &[i32]) {
        if let Err(e) = r {
            if !allowed.contains(&e) && !ALWAYS.contains(&e) {
                self.anomaly(op, format!("unexpected errno {} (allowed: ok {})", perfmon::errno_name(e), names(allowed)));
            }
        }
    }

    /// Checks that `r` failed with one of `expected` (plus EBADF).
    fn expect_err(&mut self, op: Op, r: Result<i64, i32>, expected: &[i32], why: &str) {
        match r {
            Ok(v) => self.anomaly(op, format!("succeeded ({v}) but {why}: expected {}", names(expected))),
            Err(e) if expected.contains(&e) || ALWAYS.contains(&e) => {}
            Err(e) => self.anomaly(op, format!("{} but {why}: expected {}", perfmon::errno_name(e), names(expected))),
        }
    }

    // ---- fds ----

    fn pick_fd(&mut self) -> (usize, i32) {
        // Mostly a live fd; sometimes an empty slot (-1) or a garbage number.
        for _ in 0..4 {
            let i = self.rng.below(POOL as u64) as usize;
            let fd = FDS[i].load(Ordering::Relaxed);
            if fd >= 0 {
                return (i, fd);
            }
        }
        match self.rng.below(8) {
            0 => (POOL, -1),
            1 => (POOL, 1000 + self.rng.below(24) as i32),
            _ => {
                let i = self.rng.below(POOL as u64) as usize;
                (i, FDS[i].load(Ordering::Relaxed))
            }
        }
    }

    fn store_fd(&mut self, fd: i32) {
        for _ in 0..POOL {
            let i = self.rng.below(POOL as u64) as usize;
            if FDS[i].compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                return;
            }
        }
        // Pool full: close the oldest idea of a slot and take it.
        let i = self.rng.below(POOL as u64) as usize;
        let old = FDS[i].swap(fd, Ordering::AcqRel);
        if old >= 0 {
            let r = sys::close(old).map(|_| 0);
            self.res(Op::Close, r).ok();
        }
    }

    // ---- argument memory ----

    fn pick_ptr(&mut self, good: u32) -> Ptr {
        let w = [good, 3, 3, 2, 3, 2, 3, 1, 1];
        [
            Ptr::Good,
            Ptr::Null,
            Ptr::Hole,
            Ptr::Guard,
            Ptr::StraddleHole,
            Ptr::StraddleGuard,
            Ptr::ReadOnly,
            Ptr::Kernel,
            Ptr::Wild,
        ][self.rng.weighted(&w)]
    }

    /// An address of kind `p` for `len` bytes.
    fn place(&mut self, p: Ptr, len: usize) -> usize {
        self.place_in(p, len, false)
    }

    /// Like [`Actor::place`]; `array`: a register array or a read buffer,
    /// placed (when good) in the first read-write pages, where headers (the
    /// second read-write page) never overlap it.
    fn place_in(&mut self, p: Ptr, len: usize, array: bool) -> usize {
        let len = len.max(1);
        match p {
            Ptr::Good => {
                let (base, size) = if !array && len <= PAGE { (ARENA_RW2, PAGE) } else { (0, ARENA_RW) };
                let room = size.saturating_sub(len);
                let mut off = (self.rng.below(room as u64 / 8 + 1) * 8) as usize;
                if self.rng.chance(1, 10) && off + len + 8 <= size {
                    off += self.rng.range(1, 7) as usize;
                }
                self.arena.at(base + off)
            }
            Ptr::Null => {
                if self.rng.chance(1, 4) {
                    self.rng.range(1, 4095) as usize
                } else {
                    0
                }
            }
            Ptr::Hole => self.arena.at(ARENA_HOLE + (self.rng.below(PAGE as u64 / 8) * 8) as usize),
            Ptr::Guard => self.arena.at(ARENA_NONE + (self.rng.below(PAGE as u64 / 8) * 8) as usize),
            Ptr::StraddleHole | Ptr::StraddleGuard => {
                let end = if p == Ptr::StraddleHole { ARENA_HOLE } else { ARENA_NONE };
                let k = if len > 1 { self.rng.range(1, (len - 1) as u64) as usize } else { 0 };
                self.arena.at(end - k.min(PAGE))
            }
            Ptr::ReadOnly => {
                let room = PAGE.saturating_sub(len);
                self.arena.at(ARENA_RO + (self.rng.below(room as u64 / 8 + 1) * 8) as usize)
            }
            Ptr::Kernel => KERNEL_ADDR + (self.rng.below(1 << 20) * 8) as usize,
            Ptr::Wild => match self.rng.below(3) {
                // Never mapped by anyone in this process: below the arenas.
                0 => (0x1000_0000_0000 + self.rng.below(0x3000_0000_0000)) as usize,
                // Non-canonical.
                1 => (0x0000_8000_0000_0000u64 + self.rng.below(0x7fff_0000_0000_0000)) as usize,
                _ => (0xffff_ffff_ffff_f000u64 + self.rng.below(0x1000)) as usize,
            },
        }
    }

    // ---- value generators ----

    /// A thread id to attach to, and whether a refusal is certain (with
    /// the errnos it must be one of).
    fn pick_tid(&mut self) -> (u32, Option<(&'static [i32], &'static str)>) {
        const KTHREAD: &[i32] = &[libc::EPERM];
        const NOSUCH: &[i32] = &[libc::ESRCH];
        match self.rng.weighted(&[30, 10, 20, 30, 8, 4, 3, 4]) {
            0 => (0, None),
            1 => (sys::gettid(), None),
            2 => (PROC_TIDS[self.rng.below(16) as usize].load(Ordering::Relaxed), None),
            3 => {
                let e = shared().board[self.rng.below(BOARD as u64) as usize].load(Ordering::Relaxed);
                (e as u32, None)
            }
            4 => {
                if self.children.is_empty() {
                    (0, None)
                } else {
                    (self.rng.pick(&self.children) as u32, None)
                }
            }
            5 => (2, Some((KTHREAD, "tid 2 is kthreadd"))),
            6 => {
                if self.uid != 0 {
                    (1, Some((&[libc::EACCES], "pid 1 belongs to root")))
                } else {
                    // Root may attach to init, but init sleeps in wait()
                    // for the whole run, so the attachment would outlive
                    // the fuzzer: kthreadd instead.
                    (2, Some((KTHREAD, "tid 2 is kthreadd")))
                }
            }
            _ => {
                let t = self.rng.pick(&[0x7fff_ffffu32, 0x8000_0000, u32::MAX, 4_194_305, 0xffff_fffe]);
                (t, Some((NOSUCH, "no such thread")))
            }
        }
    }

    /// A PMD value: tiny periods (-1, -2), small ones, boundaries, garbage.
    fn pmd_value(&mut self) -> u64 {
        match self.rng.below(8) {
            0 => u64::MAX,
            1 => u64::MAX - 1,
            2 => 0u64.wrapping_sub(self.rng.range(1, 64)),
            3 => 0u64.wrapping_sub(self.rng.range(1, 100_000)),
            4 => 0,
            _ => self.rng.interesting_u64(),
        }
    }

    /// A PMC element; `valid` says whether the module must accept it.
    fn gen_pmc(&mut self) -> (abi::PfmPmc, bool) {
        let mut p = abi::PfmPmc {
            reg_num: self.rng.below(4) as u16,
            reg_set: 0,
            reg_flags: 0,
            reg_value: self.rng.below(4),
            reserved: [0; 2],
        };
        if self.rng.chance(1, 4) {
            // Output bits are ignored on input.
            p.reg_flags = (self.rng.next() as u32) & abi::PFM_REG_RETFL_MASK;
        }
        if self.rng.chance(1, 8) {
            match self.rng.below(5) {
                0 => p.reg_num = self.rng.pick(&[4u16, 5, 15, 31, 32, 63, 64, 0xffff]),
                1 => p.reg_set = self.rng.range(1, 0xffff) as u16,
                2 => p.reg_flags |= 1 << self.rng.below(16),
                3 => p.reg_value = self.rng.pick(&[4u64, 5, 0x100, u64::MAX, 1 << 63]) | self.rng.below(4),
                _ => p.reserved[self.rng.below(2) as usize] = self.rng.interesting_u64() | 1,
            }
            return (p, false);
        }
        (p, true)
    }

    /// A PMD element to write; `valid` says whether the module must accept it.
    fn gen_pmd(&mut self) -> (abi::PfmPmd, bool) {
        let mut p = abi::PfmPmd {
            reg_num: self.rng.below(4) as u16,
            reg_flags: if self.rng.chance(1, 2) { abi::PFM_REGFL_OVFL_NOTIFY } else { 0 },
            reg_value: self.pmd_value(),
            reg_long_reset: self.pmd_value(),
            reg_short_reset: self.pmd_value(),
            reg_last_reset_val: self.rng.interesting_u64(),
            reg_reset_pmds: self.rng.below(16),
            ..Default::default()
        };
        if self.rng.chance(1, 4) {
            p.reg_flags |= (self.rng.next() as u32) & abi::PFM_REG_RETFL_MASK;
        }
        if self.rng.chance(1, 8) {
            match self.rng.below(5) {
                0 => p.reg_num = self.rng.pick(&[4u16, 5, 15, 31, 32, 63, 64, 0xffff]),
                1 => p.reg_set = self.rng.range(1, 0xffff) as u16,
                2 => p.reg_flags |= 1 << self.rng.range(1, 15),
                3 => p.reg_reset_pmds |= 1 << self.rng.range(4, 63),
                _ => p.reserved[self.rng.below(2) as usize] = self.rng.interesting_u64() | 1,
            }
            return (p, false);
        }
        (p, true)
    }

    /// A PMD element to read.
    fn gen_pmd_read(&mut self) -> (abi::PfmPmd, bool) {
        let mut p = abi::PfmPmd { reg_num: self.rng.below(4) as u16, ..Default::default() };
        if self.rng.chance(1, 3) {
            // Everything but the number and the set is ignored on input.
            p.reg_value = self.rng.next();
            p.reg_flags = self.rng.next() as u32;
            p.reserved = [self.rng.next(), self.rng.next()];
        }
        if self.rng.chance(1, 10) {
            if self.rng.chance(1, 2) {
                p.reg_num = self.rng.pick(&[4u16, 5, 31, 63, 64, 0xffff]);
            } else {
                p.reg_set = self.rng.range(1, 0xffff) as u16;
            }
            return (p, false);
        }
        (p, true)
    }

    // ---- the operations ----

    fn step(&mut self, weights: &[u32; NOPS]) {
        let op = OPS[self.rng.weighted(weights)];
        self.begin(op);
        match op {
            Op::Open => self.op_open(),
            Op::Close => self.op_close(),
            Op::Dup => self.op_dup(),
            Op::GetInfo | Op::GetState => self.op_get(op),
            Op::WritePmcs | Op::WritePmds | Op::ReadPmds => self.op_regs(op),
            Op::Load => self.op_load(),
            Op::Unload | Op::Start | Op::Stop | Op::Restart => self.op_plain(op),
            Op::SetFlags => self.op_set_flags(),
            Op::BadIoctl => self.op_bad_ioctl(),
            Op::Read => self.op_read(),
            Op::Poll => self.op_poll(),
            Op::Fcntl => self.op_fcntl(),
            Op::MiscFd => self.op_misc_fd(),
            Op::Sched => self.op_sched(),
            Op::Arm => self.op_arm(),
            Op::Thread => self.op_thread(),
            Op::Fork => self.op_fork(),
            Op::Signal => self.op_signal(),
            Op::Worker => self.op_worker(),
            Op::Reap => self.op_reap(false),
        }
        self.end();
    }

    fn op_open(&mut self) {
        let mut flags = match self.rng.below(10) {
            0 => libc::O_RDONLY,
            1 => libc::O_WRONLY,
            _ => libc::O_RDWR,
        };
        if self.rng.chance(1, 4) {
            flags |= libc::O_NONBLOCK;
        }
        if self.rng.chance(1, 2) {
            flags |= libc::O_CLOEXEC;
        }
        self.note(format_args!(" flags={flags:#x}"));
        let r = sys::open(sys::DEV, flags).map(|fd| fd as i64);
        let r = self.res(Op::Open, r);
        match r {
            Ok(fd) => self.store_fd(fd as i32),
            // EMFILE: an unprivileged child at its limit (see hostile tests).
            Err(e) if e == libc::EMFILE || e == libc::ENFILE || e == libc::EINTR => {}
            Err(_) => self.allow(Op::Open, r, &[]),
        }
    }

    fn op_close(&mut self) {
        let i = self.rng.below(POOL as u64) as usize;
        let fd = FDS[i].swap(-1, Ordering::AcqRel);
        if fd < 0 {
            return;
        }
        self.note(format_args!(" fd={fd}"));
        let r = sys::close(fd).map(|_| 0);
        let r = self.res(Op::Close, r);
        self.allow(Op::Close, r, &[]);
    }

    fn op_dup(&mut self) {
        let (_, fd) = self.pick_fd();
        self.note(format_args!(" fd={fd}"));
        let r = sys::dup(fd).map(|v| v as i64);
        match self.res(Op::Dup, r) {
            Ok(nfd) => self.store_fd(nfd as i32),
            Err(_) => {}
        }
    }

    fn op_get(&mut self, op: Op) {
        let (_, fd) = self.pick_fd();
        let (cmd, len) = if op == Op::GetInfo {
            (abi::PFM_IOC_GET_INFO, std::mem::size_of::<abi::PfmInfo>())
        } else {
            (abi::PFM_IOC_GET_STATE, std::mem::size_of::<abi::PfmCtxInfo>())
        };
        let p = self.pick_ptr(80);
        let addr = self.place(p, len);
        self.note(format_args!(" fd={fd} ptr={p:?}@{addr:#x}"));
        let r = sys::ioctl(fd, cmd, addr);
        let r = self.res(op, r);
        if fd < 0 || fd >= 1000 {
            return;
        }
        if p != Ptr::Good {
            self.expect_err(op, r, &[libc::EFAULT], "the output is not writable");
            return;
        }
        self.allow(op, r, &[]);
        if r.is_err() {
            return;
        }
        if op == Op::GetInfo {
            let info: abi::PfmInfo = self.arena.get(addr);
            if info.abi_version != abi::PFM_ABI_VERSION
                || info.size as usize != len
                || info.num_pmcs != 4
                || info.num_pmds != 4
                || info.impl_pmcs != 0xf
                || info.impl_pmds != 0xf
                || !(16..=64).contains(&info.counter_width)
            {
                self.anomaly(op, format!("bad info: version {} size {} pmcs {} pmds {} impl {:#x}/{:#x} width {}", info.abi_version, info.size, info.num_pmcs, info.num_pmds, info.impl_pmcs, info.impl_pmds, info.counter_width));
            }
        } else {
            let st: abi::PfmCtxInfo = self.arena.get(addr);
            let ok_state = matches!(st.state, abi::PFM_STATE_UNLOADED | abi::PFM_STATE_LOADED | abi::PFM_STATE_MASKED);
            if !ok_state || st.flags & !abi::PFM_CTXFL_MASK != 0 || st.status & !7 != 0 || st.used_pmds & !0xf != 0 || st.reserved != [0; 3] {
                self.anomaly(
                    op,
                    format!("bad state through an open fd: state {} tid {} flags {:#x} status {:#x} used {:#x}", st.state, st.tid, st.flags, st.status, st.used_pmds),
                );
            }
            // STARTED may stay set after the target exited (no STOP since).
            if st.state == abi::PFM_STATE_UNLOADED && st.status & abi::PFM_CTXST_ACTIVE != 0 {
                self.anomaly(op, format!("UNLOADED context reports status {:#x}", st.status));
            }
        }
    }

    fn op_regs(&mut self, op: Op) {
        let (_, fd) = self.pick_fd();
        let (cmd, elem) = match op {
            Op::WritePmcs => (abi::PFM_IOC_WRITE_PMCS, 32usize),
            Op::WritePmds => (abi::PFM_IOC_WRITE_PMDS, 64),
            _ => (abi::PFM_IOC_READ_PMDS, 64),
        };
        let count: u32 = match self.rng.weighted(&[55, 12, 4, 12, 4, 4, 4, 5]) {
            0 => self.rng.range(1, 4) as u32,
            1 => self.rng.range(5, 16) as u32,
            2 => self.rng.range(17, 64) as u32,
            3 => 1,
            4 => 0,
            5 => 65,
            6 => self.rng.pick(&[u32::MAX, 0x8000_0000, 0x1000_0000, 0x0400_0001, 1 << 26]),
            _ => 64,
        };
        let n = (count as usize).min(64);
        let mut all_valid = true;
        let mut first_bad = None;
        let rp = self.pick_ptr(88);
        let raddr = self.place_in(rp, n * elem, true);
        for i in 0..n {
            let a = raddr + i * elem;
            let valid = match op {
                Op::WritePmcs => {
                    let (p, v) = self.gen_pmc();
                    self.arena.put(a, p);
                    v
                }
                Op::WritePmds => {
                    let (p, v) = self.gen_pmd();
                    self.arena.put(a, p);
                    v
                }
                _ => {
                    let (p, v) = self.gen_pmd_read();
                    self.arena.put(a, p);
                    v
                }
            };
            if !valid && first_bad.is_none() {
                first_bad = Some(i as u32);
            }
            all_valid &= valid;
        }
        let mut hdr = abi::PfmRegsArg {
            regs: raddr as u64,
            count,
            done: self.rng.next() as u32,
            time_enabled: self.rng.next(),
            time_running: self.rng.next(),
            reserved: [0; 2],
        };
        let bad_reserved = self.rng.chance(1, 30);
        if bad_reserved {
            hdr.reserved[self.rng.below(2) as usize] = self.rng.interesting_u64() | 1;
        }
        let hp = self.pick_ptr(94);
        let haddr = self.place(hp, std::mem::size_of::<abi::PfmRegsArg>());
        self.arena.put(haddr, hdr);
        self.note(format_args!(" fd={fd} hdr={hp:?} regs={rp:?} count={count} valid={all_valid} rsvd={bad_reserved}"));
        let r = sys::ioctl(fd, cmd, haddr);
        let r = self.res(op, r);
        if fd < 0 || fd >= 1000 {
            return;
        }
        // What the module must answer, in the order it checks.
        if !hp.readable() {
            return self.expect_err(op, r, &[libc::EFAULT], "the header is not readable");
        }
        if hp == Ptr::ReadOnly {
            // The header read from the RO page is its random content.
            return self.allow(op, r, &[libc::EFAULT, libc::EINVAL, libc::E2BIG]);
        }
        if bad_reserved || count == 0 {
            return self.expect_err(op, r, &[libc::EINVAL], "count 0 or reserved bits set");
        }
        if count > 64 {
            return self.expect_err(op, r, &[libc::E2BIG], "count > PFM_MAX_REGS_PER_CALL");
        }
        if !rp.readable() {
            return self.expect_err(op, r, &[libc::EFAULT], "the register array is not readable");
        }
        if rp == Ptr::ReadOnly {
            return self.allow(op, r, &[libc::EFAULT, libc::EINVAL]);
        }
        let done: abi::PfmRegsArg = self.arena.get(haddr);
        if all_valid {
            match r {
                Ok(_) if done.done != count => self.anomaly(op, format!("succeeded with done={} for count {count}", done.done)),
                Ok(_) => {}
                Err(e) if e == libc::EBADF => {}
                Err(e) => self.anomaly(op, format!("valid registers refused: {}", perfmon::errno_name(e))),
            }
        } else {
            self.expect_err(op, r, &[libc::EINVAL], "an element is invalid");
            if r == Err(libc::EINVAL) && Some(done.done) != first_bad {
                self.anomaly(op, format!("EINVAL with done={} but the first bad element is {:?}", done.done, first_bad));
            }
        }
    }

    fn op_load(&mut self) {
        let (_, fd) = self.pick_fd();
        let (tid, refusal) = self.pick_tid();
        let mut l = abi::PfmLoad { tid, flags: 0, reserved: [0; 3] };
        let garbage = self.rng.chance(1, 25);
        if garbage {
            if self.rng.chance(1, 2) {
                l.flags = self.rng.interesting_u32() | 1;
            } else {
                l.reserved[self.rng.below(3) as usize] = self.rng.interesting_u64() | 1;
            }
        }
        let p = self.pick_ptr(94);
        let addr = self.place(p, std::mem::size_of::<abi::PfmLoad>());
        self.arena.put(addr, l);
        self.note(format_args!(" fd={fd} tid={tid} ptr={p:?} garbage={garbage}"));
        let r = sys::ioctl(fd, abi::PFM_IOC_LOAD, addr);
        let r = self.res(Op::Load, r);
        if fd < 0 || fd >= 1000 {
            return;
        }
        if !p.readable() {
            return self.expect_err(Op::Load, r, &[libc::EFAULT], "the argument is not readable");
        }
        if p == Ptr::ReadOnly {
            return self.allow(Op::Load, r, &[libc::EINVAL, libc::EBUSY, libc::EBADFD, libc::ESRCH, libc::EPERM, libc::EACCES, libc::ENOSPC]);
        }
        if garbage {
            return self.expect_err(Op::Load, r, &[libc::EINVAL], "flags or reserved bits set");
        }
        if let Some((errs, why)) = refusal {
            let mut allowed: Vec<i32> = errs.to_vec();
            allowed.extend_from_slice(&[libc::EBUSY, libc::EBADFD]);
            return self.expect_err(Op::Load, r, &allowed, why);
        }
        self.allow(Op::Load, r, &[libc::EBUSY, libc::EBADFD, libc::ESRCH, libc::EPERM, libc::EACCES, libc::ENOSPC]);
        if r.is_ok() && self.uid != 0 && tid != 0 && tid != sys::gettid() {
            // An unprivileged tool may only monitor threads of its own user.
            if let Some(owner) = proc_uid(tid) {
                if owner != self.uid {
                    self.anomaly(Op::Load, format!("uid {} attached to tid {tid} of uid {owner}", self.uid));
                }
            }
        }
    }

    fn op_plain(&mut self, op: Op) {
        let (_, fd) = self.pick_fd();
        let cmd = match op {
            Op::Unload => abi::PFM_IOC_UNLOAD,
            Op::Start => abi::PFM_IOC_START,
            Op::Stop => abi::PFM_IOC_STOP,
            _ => abi::PFM_IOC_RESTART,
        };
        // The argument is ignored: anything goes.
        let arg = if self.rng.chance(1, 2) { 0 } else { self.rng.next() as usize };
        self.note(format_args!(" fd={fd}"));
        let r = sys::ioctl(fd, cmd, arg);
        let r = self.res(op, r);
        if fd >= 0 && fd < 1000 {
            self.allow(op, r, &[libc::EBADFD]);
        }
    }

    fn op_set_flags(&mut self) {
        let (_, fd) = self.pick_fd();
        let mut f = abi::PfmCtxFlags { flags: self.rng.below(4) as u32, pad: 0, reserved: [0; 3] };
        let garbage = self.rng.chance(1, 6);
        if garbage {
            match self.rng.below(3) {
                0 => f.flags |= 1 << self.rng.range(2, 31),
                1 => f.pad = self.rng.interesting_u32() | 1,
                _ => f.reserved[self.rng.below(3) as usize] = self.rng.interesting_u64() | 1,
            }
        }
        let p = self.pick_ptr(94);
        let addr = self.place(p, std::mem::size_of::<abi::PfmCtxFlags>());
        self.arena.put(addr, f);
        self.note(format_args!(" fd={fd} flags={:#x} ptr={p:?} garbage={garbage}", f.flags));
        let r = sys::ioctl(fd, abi::PFM_IOC_SET_FLAGS, addr);
        let r = self.res(Op::SetFlags, r);
        if fd < 0 || fd >= 1000 {
            return;
        }
        if !p.readable() {
            return self.expect_err(Op::SetFlags, r, &[libc::EFAULT], "the argument is not readable");
        }
        if p == Ptr::ReadOnly {
            return self.allow(Op::SetFlags, r, &[libc::EINVAL, libc::EBADFD]);
        }
        if garbage {
            return self.expect_err(Op::SetFlags, r, &[libc::EINVAL], "unknown flags or reserved bits");
        }
        self.allow(Op::SetFlags, r, &[libc::EBADFD]);
    }

    fn op_bad_ioctl(&mut self) {
        let (_, fd) = self.pick_fd();
        let known = [
            abi::PFM_IOC_GET_INFO,
            abi::PFM_IOC_WRITE_PMCS,
            abi::PFM_IOC_WRITE_PMDS,
            abi::PFM_IOC_READ_PMDS,
            abi::PFM_IOC_LOAD,
            abi::PFM_IOC_UNLOAD,
            abi::PFM_IOC_START,
            abi::PFM_IOC_STOP,
            abi::PFM_IOC_RESTART,
            abi::PFM_IOC_GET_STATE,
            abi::PFM_IOC_SET_FLAGS,
        ];
        let base = self.rng.pick(&known);
        let kind = self.rng.below(8);
        let (cmd, expect): (u32, &[i32]) = match kind {
            // The size field forged (never the true size).
            0 => {
                let size = (base >> 16) & 0x3fff;
                let mut s = self.rng.pick(&[0u32, 1, 7, 8, 31, 33, 47, 49, 63, 65, 871, 873, 4096, 0x3fff]);
                if s == size {
                    s ^= 1;
                }
                ((base & !(0x3fff << 16)) | (s << 16), &[libc::EINVAL])
            }
            // The direction bits changed.
            1 => {
                let dir = base >> 30;
                let mut d = self.rng.below(4) as u32;
                if d == dir {
                    d = (d + 1) % 4;
                }
                ((base & 0x3fff_ffff) | (d << 30), &[libc::EINVAL])
            }
            // Another type byte.
            2 => {
                let mut t = self.rng.below(256) as u32;
                if t == abi::PFM_IOC_MAGIC {
                    t = 0;
                }
                if [b'T' as u32, b'f' as u32, 0x58, 0x94, 0x12, 0x15, 0x00].contains(&t) {
                    t = 0xB7;
                }
                ((base & !(0xff << 8)) | (t << 8), &[libc::ENOTTY])
            }
            // Our type, a number that does not exist.
            3 => {
                let nr = self.rng.range(0x0b, 0xff) as u32;
                let dir = self.rng.below(4) as u32;
                let size = self.rng.below(0x4000) as u32;
                ((dir << 30) | (size << 16) | (abi::PFM_IOC_MAGIC << 8) | nr, &[libc::ENOTTY])
            }
            // Generic VFS ioctls that reach the file (FIOASYNC calls ->fasync).
            4 => {
                let c = self.rng.pick(&[libc::FIOASYNC as u32, libc::FIONBIO as u32, libc::FIONREAD as u32, libc::FIOCLEX as u32, libc::FIONCLEX as u32]);
                (c, &[libc::EFAULT, libc::ENOTTY, libc::EINVAL])
            }
            // A fully random number.
            _ => {
                let mut c = self.rng.next() as u32;
                if (c >> 8) & 0xff != abi::PFM_IOC_MAGIC {
                    // Keep clear of the VFS's own ('T', 'f', 0x94, 0x12, 'X').
                    c = (c & !(0xff << 8)) | (0xB7 << 8);
                }
                (c, &[libc::ENOTTY, libc::EINVAL])
            }
        };
        let p = self.pick_ptr(70);
        let addr = self.place(p, 8);
        if p == Ptr::Good {
            self.arena.put(addr, self.rng.below(2) as i32);
        }
        self.note(format_args!(" fd={fd} cmd={cmd:#010x} kind={kind} ptr={p:?}"));
        let r = sys::ioctl(fd, cmd, addr);
        let r = self.res(Op::BadIoctl, r);
        if fd < 0 || fd >= 1000 {
            return;
        }
        if kind == 4 {
            // FIONREAD and friends may succeed; only odd errnos are wrong.
            return self.allow(Op::BadIoctl, r, expect);
        }
        if kind == 5 && (cmd >> 8) & 0xff == abi::PFM_IOC_MAGIC && (cmd & 0xff) <= 0x0a && known.contains(&cmd) {
            // A random number that happens to be a real command.
            return;
        }
        self.expect_err(Op::BadIoctl, r, expect, "not a valid perfmon command");
    }

    fn op_read(&mut self) {
        let (_, fd) = self.pick_fd();
        let len = match self.rng.below(12) {
            0 => 0,
            1 => self.rng.range(1, 63) as usize,
            2..=5 => 64,
            6 => 65,
            7 => 128,
            8 => 512,
            9 => 4096,
            10 => self.rng.range(64, 16000) as usize,
            _ => 64 * self.rng.range(1, 12) as usize,
        };
        let p = self.pick_ptr(85);
        let addr = self.place_in(p, len, true);
        // Do not sit in a blocking read for the timer period every time.
        if self.rng.chance(4, 5) {
            match sys::poll(&[(fd, libc::POLLIN)], 0) {
                Ok(rev) if rev[0] & (libc::POLLIN | libc::POLLHUP) == 0 => {
                    // Nothing to read: make it non-blocking by other means.
                    if self.rng.chance(1, 2) {
                        return;
                    }
                }
                _ => {}
            }
        }
        self.note(format_args!(" fd={fd} len={len} ptr={p:?}"));
        let r = sys::read_raw(fd, addr, len);
        let r = self.res(Op::Read, r);
        if fd < 0 || fd >= 1000 {
            return;
        }
        if len < 64 {
            // access_ok() comes first: a kernel or non-canonical buffer is EFAULT.
            return self.expect_err(Op::Read, r, &[libc::EINVAL, libc::EFAULT], "buffer shorter than one message");
        }
        self.allow(Op::Read, r, &[libc::EAGAIN, libc::EINTR, libc::EFAULT, libc::EBADF]);
        match r {
            Ok(n) if n as usize % 64 != 0 || n as usize > len => self.anomaly(Op::Read, format!("read {n} bytes of {len}")),
            Ok(n) if p == Ptr::Good => {
                for i in 0..n as usize / 64 {
                    let m: abi::PfmMsg = self.arena.get(addr + i * 64);
                    let ok = match m.msg_type {
                        abi::PFM_MSG_OVFL => m.ovfl_pmds != 0 && m.ovfl_pmds & !0xf == 0,
                        abi::PFM_MSG_END | abi::PFM_MSG_REVOKED => true,
                        _ => false,
                    };
                    if !ok || m.pad != 0 || m.reserved0 != 0 || m.reserved != [0; 3] {
                        self.anomaly(Op::Read, format!("bad message: type {} tid {} ovfl {:#x}", m.msg_type, m.tid, m.ovfl_pmds));
                    }
                }
            }
            Ok(n) if n > 0 && p != Ptr::Good => {
                if !self.arena.writable(addr, n as usize) {
                    self.anomaly(Op::Read, format!("read {n} bytes into a {p:?} buffer"));
                }
            }
            _ => {}
        }
    }

    fn op_poll(&mut self) {
        let k = self.rng.range(1, 4) as usize;
        let mut fds = Vec::with_capacity(k);
        for _ in 0..k {
            let (_, fd) = self.pick_fd();
            let ev = match self.rng.below(4) {
                0 => libc::POLLIN,
                1 => libc::POLLIN | libc::POLLOUT,
                2 => libc::POLLPRI | libc::POLLRDNORM,
                _ => self.rng.next() as i16,
            };
            fds.push((fd, ev));
        }
        let timeout = if self.rng.chance(4, 5) { 0 } else { self.rng.range(1, 10) as i32 };
        self.note(format_args!(" n={k} timeout={timeout}"));
        let r = sys::poll(&fds, timeout).map(|rev| rev.iter().fold(0i64, |a, &b| a << 8 | (b as i64 & 0xff)));
        let r = self.res(Op::Poll, r);
        self.allow(Op::Poll, r, &[libc::EINTR]);
    }

    fn op_fcntl(&mut self) {
        let (_, fd) = self.pick_fd();
        let which = self.rng.below(6);
        let r = match which {
            // fasync on / off.
            0 | 1 => sys::fcntl(fd, libc::F_GETFL, 0).and_then(|fl| {
                let fl = if which == 0 { fl | libc::O_ASYNC as i64 } else { fl & !(libc::O_ASYNC as i64) };
                sys::fcntl(fd, libc::F_SETFL, fl)
            }),
            2 => sys::fcntl(fd, libc::F_GETFL, 0).and_then(|fl| sys::fcntl(fd, libc::F_SETFL, fl ^ libc::O_NONBLOCK as i64)),
            3 => sys::fcntl(fd, libc::F_SETOWN, if self.rng.chance(1, 2) { sys::getpid() as i64 } else { 0 }),
            4 => sys::set_owner_ex(fd, true, sys::gettid()),
            _ => sys::fcntl(fd, sys::F_SETSIG, self.rng.pick(&[0, libc::SIGIO, libc::SIGUSR1, libc::SIGUSR2]) as i64),
        };
        self.note(format_args!(" fd={fd} kind={which}"));
        self.res(Op::Fcntl, r).ok();
    }

    fn op_misc_fd(&mut self) {
        let (_, fd) = self.pick_fd();
        let which = self.rng.below(4);
        self.note(format_args!(" fd={fd} kind={which}"));
        let addr = self.arena.at(0);
        let r = match which {
            0 => sys::write_raw(fd, addr, self.rng.pick(&[0usize, 1, 64, 4096])),
            1 => sys::lseek(fd, self.rng.interesting_u64() as i64, self.rng.below(3) as i32),
            2 => sys::mmap_fd(fd, PAGE * self.rng.range(1, 4) as usize, self.rng.pick(&[libc::PROT_READ, libc::PROT_READ | libc::PROT_WRITE])),
            _ => sys::fstat_ok(fd),
        };
        let r = self.res(Op::MiscFd, r);
        if fd < 0 || fd >= 1000 {
            return;
        }
        match which {
            0 => {
                if let Ok(n) = r {
                    if n > 0 {
                        self.anomaly(Op::MiscFd, format!("write of {n} bytes accepted"));
                    }
                }
            }
            2 => self.expect_err(Op::MiscFd, r, &[libc::ENODEV, libc::EACCES], "perfmon has no mmap"),
            _ => {}
        }
    }

    fn op_sched(&mut self) {
        let which = self.rng.below(10);
        self.note(format_args!(" kind={which}"));
        match which {
            0..=3 => sys::sched_yield(),
            4..=6 => sys::usleep(self.rng.below(1500)),
            7 | 8 => {
                let n = sys::online_cpus().min(63);
                let mask = if n > 1 { self.rng.range(1, (1u64 << n) - 1) } else { 1 };
                let r = sys::set_affinity(0, mask);
                self.res(Op::Sched, r).ok();
            }
            _ => {
                // Spin a little: the task clock runs, the tick may preempt.
                let t = Instant::now();
                while t.elapsed() < Duration::from_micros(200) {
                    std::hint::spin_loop();
                }
            }
        }
    }

    /// Sets up a context that overflows all the time: a tiny period on
    /// context switches or the task clock, notify or notify-block, loaded on
    /// a thread (self, a sibling, a child, anyone on the board) and started.
    /// The fd goes to the pool, so the other operations (RESTART, read,
    /// close, unload) meet it.
    fn op_arm(&mut self) {
        shared().arms.fetch_add(1, Ordering::Relaxed);
        let fd = match sys::open_pfm() {
            Ok(fd) => fd,
            Err(e) => {
                self.res(Op::Arm, Err(e)).ok();
                return;
            }
        };
        self.calls += 1;
        let flags = match self.rng.below(10) {
            0..=2 => abi::PFM_CTXFL_NOTIFY_BLOCK,
            3 | 4 => abi::PFM_CTXFL_NO_MSG,
            5 => abi::PFM_CTXFL_NOTIFY_BLOCK | abi::PFM_CTXFL_NO_MSG,
            _ => 0,
        };
        if flags != 0 {
            let a = self.arena.at(0);
            self.arena.put(a, abi::PfmCtxFlags { flags, ..Default::default() });
            let r = sys::ioctl(fd, abi::PFM_IOC_SET_FLAGS, a);
            let r = self.res(Op::Arm, r);
            self.allow(Op::Arm, r, &[]);
        }
        let ncnt = self.rng.range(1, 4) as usize;
        let mut pmcs = Vec::new();
        let mut pmds = Vec::new();
        for i in 0..ncnt {
            let reg = if ncnt == 4 { i as u16 } else { self.rng.below(4) as u16 };
            let ev = self.rng.pick(&[1u64, 2, 2, 2, 3]);
            pmcs.push(abi::PfmPmc { reg_num: reg, reg_value: ev, ..Default::default() });
            let period = |r: &mut Rng| match r.below(6) {
                0 | 1 => 1u64,
                2 => 2,
                3 => r.range(3, 10),
                4 => r.range(10, 100_000),
                _ => 0,
            };
            let (pv, ps, pl) = (period(&mut self.rng), period(&mut self.rng), period(&mut self.rng));
            pmds.push(abi::PfmPmd {
                reg_num: reg,
                reg_flags: if self.rng.chance(4, 5) { abi::PFM_REGFL_OVFL_NOTIFY } else { 0 },
                reg_value: 0u64.wrapping_sub(pv),
                reg_short_reset: 0u64.wrapping_sub(ps),
                reg_long_reset: 0u64.wrapping_sub(pl),
                reg_reset_pmds: self.rng.below(16),
                ..Default::default()
            });
        }
        let regs = self.arena.at(1024);
        let hdr = self.arena.at(0);
        for (i, p) in pmcs.iter().enumerate() {
            self.arena.put(regs + i * 32, *p);
        }
        self.arena.put(hdr, abi::PfmRegsArg { regs: regs as u64, count: pmcs.len() as u32, ..Default::default() });
        let r = sys::ioctl(fd, abi::PFM_IOC_WRITE_PMCS, hdr);
        let r = self.res(Op::Arm, r);
        self.allow(Op::Arm, r, &[]);
        for (i, p) in pmds.iter().enumerate() {
            self.arena.put(regs + i * 64, *p);
        }
        self.arena.put(hdr, abi::PfmRegsArg { regs: regs as u64, count: pmds.len() as u32, ..Default::default() });
        let r = sys::ioctl(fd, abi::PFM_IOC_WRITE_PMDS, hdr);
        let r = self.res(Op::Arm, r);
        self.allow(Op::Arm, r, &[]);
        let tid = match self.rng.weighted(&[40, 20, 15, 25]) {
            0 => 0,
            1 => PROC_TIDS[self.rng.below(16) as usize].load(Ordering::Relaxed),
            2 if !self.children.is_empty() => self.rng.pick(&self.children) as u32,
            _ => shared().board[self.rng.below(BOARD as u64) as usize].load(Ordering::Relaxed) as u32,
        };
        if self.rng.chance(1, 4) {
            let _ = sys::fcntl(fd, libc::F_SETOWN, sys::getpid() as i64);
            let _ = sys::fcntl(fd, libc::F_SETFL, (libc::O_ASYNC | libc::O_NONBLOCK) as i64);
            self.calls += 2;
        }
        self.note(format_args!(" fd={fd} flags={flags} counters={ncnt} tid={tid}"));
        self.arena.put(hdr, abi::PfmLoad { tid, ..Default::default() });
        let r = sys::ioctl(fd, abi::PFM_IOC_LOAD, hdr);
        let r = self.res(Op::Arm, r);
        self.allow(Op::Arm, r, &[libc::ESRCH, libc::EBUSY, libc::EACCES, libc::EPERM, libc::ENOSPC]);
        if r.is_ok() {
            let r = sys::ioctl(fd, abi::PFM_IOC_START, 0);
            let r = self.res(Op::Arm, r);
            // The target may have exited already (context UNLOADED again).
            self.allow(Op::Arm, r, &[libc::EBADFD]);
        }
        self.store_fd(fd);
    }

    fn op_thread(&mut self) {
        if self.kind != Kind::Worker || SHORT_LIVE.load(Ordering::Relaxed) >= 3 {
            return;
        }
        let seed = self.rng.next();
        let name = format!("{}s{}", self.name, self.n);
        let ops = self.rng.range(5, 80);
        self.note(format_args!(" seed={seed:#x} ops={ops}"));
        SHORT_LIVE.fetch_add(1, Ordering::Relaxed);
        shared().threads.fetch_add(1, Ordering::Relaxed);
        let b = std::thread::Builder::new().stack_size(256 * 1024);
        match b.spawn(move || short_thread(seed, name, ops)) {
            Ok(h) => self.shorts.push(h),
            Err(_) => {
                SHORT_LIVE.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.calls += 1;
    }

    fn op_fork(&mut self) {
        if self.kind == Kind::Child || self.children.len() >= 3 {
            return;
        }
        let seed = self.rng.next();
        let mode = self.rng.weighted(&[25, 25, 20, 30]);
        let parent_tid = sys::gettid();
        let name = format!("{}c{}", self.name, self.n);
        self.note(format_args!(" mode={mode} seed={seed:#x}"));
        shared().forks.fetch_add(1, Ordering::Relaxed);
        let r = sys::fork().map(|p| p as i64);
        match self.res(Op::Fork, r) {
            Ok(0) => child_main(seed, name, mode as u32, parent_tid),
            Ok(pid) => {
                self.children.push(pid as i32);
                // Attach to it at once sometimes: races with its start and exec.
                if self.rng.chance(1, 3) {
                    let fd = match sys::open_pfm() {
                        Ok(fd) => fd,
                        Err(_) => return,
                    };
                    let hdr = self.arena.at(0);
                    self.arena.put(hdr, abi::PfmLoad { tid: pid as u32, ..Default::default() });
                    let r = sys::ioctl(fd, abi::PFM_IOC_LOAD, hdr);
                    let r = self.res(Op::Fork, r);
                    self.allow(Op::Fork, r, &[libc::ESRCH, libc::EBUSY, libc::EACCES]);
                    let _ = sys::ioctl(fd, abi::PFM_IOC_START, 0);
                    self.calls += 2;
                    self.store_fd(fd);
                }
            }
            Err(_) => {}
        }
    }

    fn op_signal(&mut self) {
        if self.rng.chance(1, 4) {
            // Release or disturb a sibling thread (a blocked one included).
            let tid = PROC_TIDS[self.rng.below(16) as usize].load(Ordering::Relaxed);
            if tid != 0 {
                self.note(format_args!(" tgkill tid={tid}"));
                let r = sys::tgkill(sys::getpid(), tid, libc::SIGUSR1);
                self.res(Op::Signal, r).ok();
            }
            return;
        }
        if self.children.is_empty() {
            return;
        }
        let pid = self.rng.pick(&self.children);
        let sig = self.rng.pick(&[libc::SIGKILL, libc::SIGKILL, libc::SIGSTOP, libc::SIGCONT, libc::SIGCONT, libc::SIGUSR1, libc::SIGTERM]);
        self.note(format_args!(" pid={pid} sig={sig}"));
        let r = sys::kill(pid, sig);
        self.res(Op::Signal, r).ok();
    }

    /// SIGKILLs or SIGSTOPs a whole other worker (the master respawns it
    /// and SIGCONTs everyone every second).
    fn op_worker(&mut self) {
        let i = self.rng.below(MAX_WORKERS as u64) as usize;
        let pid = shared().workers[i].load(Ordering::Relaxed);
        if pid == 0 || pid == sys::getpid() {
            return;
        }
        let sig = if self.rng.chance(1, 2) { libc::SIGKILL } else { libc::SIGSTOP };
        self.note(format_args!(" pid={pid} sig={sig}"));
        let r = sys::kill(pid as i32, sig);
        self.res(Op::Worker, r).ok();
    }

    /// Reaps exited children and joins finished short threads; with `all`,
    /// kills and reaps every child and joins every thread.
    fn op_reap(&mut self, all: bool) {
        if all {
            for &pid in &self.children {
                let _ = sys::kill(pid, libc::SIGKILL);
                let _ = sys::kill(pid, libc::SIGCONT);
            }
        }
        let mut kept = Vec::new();
        for &pid in &self.children {
            match sys::waitpid(pid, !all) {
                Ok(Some(_)) | Err(_) => {}
                Ok(None) => kept.push(pid),
            }
        }
        self.calls += self.children.len() as u64;
        self.children = kept;
        let mut i = 0;
        while i < self.shorts.len() {
            if all || self.shorts[i].is_finished() {
                let h = self.shorts.swap_remove(i);
                let _ = h.join();
            } else {
                i += 1;
            }
        }
    }
}

fn names(errs: &[i32]) -> String {
    errs.iter().map(|&e| perfmon::errno_name(e)).collect::<Vec<_>>().join("|")
}

/// The real uid of thread `tid`, from /proc.
fn proc_uid(tid: u32) -> Option<u32> {
    let s = sys::read_text(&format!("/proc/{tid}/status"))?;
    let line = s.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Weights for short threads and children: no new threads or worker kills.
fn restricted_weights() -> [u32; NOPS] {
    let mut w = WEIGHTS;
    w[Op::Thread as usize] = 0;
    w[Op::Worker as usize] = 0;
    w[Op::Fork as usize] = 0;
    w
}

fn short_thread(seed: u64, name: String, ops: u64) {
    let mut a = Actor::new(seed, name, Kind::Short);
    let w = restricted_weights();
    // Often monitor itself first, so that the thread exits while monitored.
    if a.rng.chance(1, 2) {
        a.begin(Op::Arm);
        a.op_arm();
        a.end();
    }
    for _ in 0..ops {
        if stopping() {
            break;
        }
        a.step(&w);
    }
    a.op_reap(true);
    SHORT_LIVE.fetch_sub(1, Ordering::Relaxed);
    // Exit with whatever is attached, open or blocked: that is the point.
}

/// The children an actor forks. Mode 0: a target that sleeps, yields and
/// spins for a while; 1: a tool that arms a context on its parent's thread
/// or anyone's, does some operations and dies (exit or SIGKILL by itself)
/// with its fds open; 2: exec of /bin/true or a short sleep, often while
/// monitoring itself; 3: a small fuzzer.
fn child_main(seed: u64, name: String, mode: u32, parent_tid: u32) -> ! {
    sys::die_with_parent(libc::SIGKILL);
    SHORT_LIVE.store(0, Ordering::Relaxed);
    for t in PROC_TIDS.iter() {
        t.store(0, Ordering::Relaxed);
    }
    let mut a = Actor::new(seed, name, Kind::Child);
    let w = restricted_weights();
    let code = match mode {
        0 => {
            let n = a.rng.range(20, 400);
            for i in 0..n {
                if stopping() {
                    break;
                }
                match i % 4 {
                    0 => sys::usleep(1000),
                    1 => sys::sched_yield(),
                    2 => {
                        let t = Instant::now();
                        while t.elapsed() < Duration::from_micros(300) {
                            std::hint::spin_loop();
                        }
                    }
                    _ => sys::usleep(a.rng.below(3000)),
                }
            }
            0
        }
        1 => {
            PROC_TIDS[0].store(parent_tid, Ordering::Relaxed);
            a.begin(Op::Arm);
            a.op_arm();
            a.end();
            let n = a.rng.range(5, 60);
            for _ in 0..n {
                if stopping() {
                    break;
                }
                a.step(&w);
            }
            if a.rng.chance(1, 3) {
                let _ = sys::kill(sys::getpid() as i32, libc::SIGKILL);
            }
            0
        }
        2 => {
            shared().execs.fetch_add(1, Ordering::Relaxed);
            if a.rng.chance(3, 5) {
                a.begin(Op::Arm);
                a.op_arm();
                a.end();
            }
            let e = if a.rng.chance(1, 2) {
                sys::execv(c"/bin/true", &[c"true"])
            } else {
                sys::execv(c"/bin/sleep", &[c"sleep", c"0.02"])
            };
            e
        }
        _ => {
            let n = a.rng.range(10, 150);
            for _ in 0..n {
                if stopping() {
                    break;
                }
                a.step(&w);
            }
            0
        }
    };
    sys::exit_now(code)
}

fn actor_loop(seed: u64, name: String) {
    let mut a = Actor::new(seed, name, Kind::Worker);
    while !stopping() {
        a.step(&WEIGHTS);
    }
    a.op_reap(true);
}

/// A worker process: `threads` actors, then cleanup.
fn worker_main(cfg: &Config, index: usize, generation: u64, pgid: i32) -> ! {
    sys::die_with_parent(libc::SIGKILL);
    let _ = sys::setpgid(0, pgid);
    process_signals();
    if cfg.unpriv && index % 3 == 2 {
        if sys::become_user(1000, 1000).is_ok() {
            sys::set_dumpable();
        }
    }
    let mut handles = Vec::new();
    for t in 1..cfg.threads {
        let seed = derive(cfg.seed, &[index as u64, generation, t as u64]);
        let name = format!("w{index}g{generation}t{t}");
        let b = std::thread::Builder::new().stack_size(512 * 1024);
        if let Ok(h) = b.spawn(move || actor_loop(seed, name)) {
            handles.push(h);
        }
    }
    actor_loop(derive(cfg.seed, &[index as u64, generation, 0]), format!("w{index}g{generation}t0"));
    for h in handles {
        let _ = h.join();
    }
    for fd in FDS.iter() {
        let f = fd.swap(-1, Ordering::AcqRel);
        if f >= 0 {
            let _ = sys::close(f);
        }
    }
    sys::exit_now(0)
}

fn spawn_worker(cfg: &Config, index: usize, generation: u64, pgid: i32) -> i32 {
    match sys::fork() {
        Ok(0) => worker_main(cfg, index, generation, pgid),
        Ok(pid) => {
            let _ = sys::setpgid(pid, pgid);
            shared().workers[index].store(pid as u32, Ordering::Relaxed);
            pid
        }
        Err(e) => panic!("fork of a worker failed: {}", perfmon::errno_name(e)),
    }
}

fn kmsg(line: &str) {
    if let Ok(fd) = sys::open(c"/dev/kmsg", libc::O_WRONLY | libc::O_CLOEXEC) {
        sys::write_all(fd, format!("pfm_fuzz: {line}\n").as_bytes());
        let _ = sys::close(fd);
    }
}

/// What /proc says about a process that would not die.
fn describe_stuck(pid: i32) -> String {
    let mut s = format!("pid {pid}");
    if let Some(stat) = sys::read_text(&format!("/proc/{pid}/stat")) {
        let comm_end = stat.rfind(')').unwrap_or(0);
        let _ = write!(s, " {}", &stat[..comm_end + 1]);
    }
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            let tid = t.file_name().to_string_lossy().to_string();
            let st = sys::proc_state(tid.parse().unwrap_or(0)).unwrap_or('?');
            let wchan = sys::read_text(&format!("/proc/{pid}/task/{tid}/wchan")).unwrap_or_default();
            let _ = write!(s, "\n    task {tid} state {st} wchan {wchan}");
            if let Some(stack) = sys::read_text(&format!("/proc/{pid}/task/{tid}/stack")) {
                for l in stack.lines().take(24) {
                    let _ = write!(s, "\n      {l}");
                }
            }
            let tidn: u32 = tid.parse().unwrap_or(0);
            for slot in shared().slots.iter() {
                if slot.tid.load(Ordering::Relaxed) == tidn {
                    let op = slot.op.load(Ordering::Relaxed) as usize;
                    let _ = write!(
                        s,
                        "\n      actor op #{} {}",
                        slot.n.load(Ordering::Relaxed),
                        OPS.get(op).map_or("?", |o| o.name())
                    );
                }
            }
        }
    }
    s
}

/// Pids of our descendants still around (by process group or parent).
fn leftovers(pgid: i32) -> Vec<i32> {
    let me = sys::getpid() as i32;
    let mut v = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
            let Some(stat) = sys::read_text(&format!("/proc/{pid}/stat")) else { continue };
            let Some(close) = stat.rfind(')') else { continue };
            let f: Vec<&str> = stat[close + 1..].split_whitespace().collect();
            let ppid: i32 = f.get(1).and_then(|x| x.parse().ok()).unwrap_or(0);
            let pg: i32 = f.get(2).and_then(|x| x.parse().ok()).unwrap_or(0);
            if pid != me && (pg == pgid || ppid == me) {
                v.push(pid);
            }
        }
    }
    v
}

/// Runs the fuzzer; returns when everything it started is gone (or
/// reported as hung).
pub fn run(cfg: &Config) -> Report {
    let start = Instant::now();
    let len = (std::mem::size_of::<Shared>() + PAGE - 1) / PAGE * PAGE;
    SHARED.store(sys::shared_mapping(len), Ordering::Relaxed);
    TIMER_US.store(cfg.timer_us, Ordering::Relaxed);
    let s = shared();
    s.goal.store(if cfg.ops == 0 { u64::MAX } else { cfg.ops }, Ordering::Relaxed);
    if let Some(path) = &cfg.log {
        let c = std::ffi::CString::new(path.as_str()).unwrap();
        match sys::open(&c, libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_TRUNC) {
            Ok(fd) => LOG_FD.store(fd, Ordering::Relaxed),
            Err(e) => eprintln!("pfm_fuzz: cannot open log {path}: {}", perfmon::errno_name(e)),
        }
    }
    sys::set_child_subreaper();
    process_signals();
    // The process group leader: does nothing, wakes up often (it is also
    // a thread anyone may attach to, and cleanup runs when it wakes).
    let pgid = match sys::fork() {
        Ok(0) => {
            sys::die_with_parent(libc::SIGKILL);
            let _ = sys::setpgid(0, 0);
            let mut r = Rng::new(cfg.seed);
            loop {
                publish_tid(&mut r);
                sys::usleep(50_000);
            }
        }
        Ok(pid) => pid,
        Err(e) => panic!("fork failed: {}", perfmon::errno_name(e)),
    };
    let _ = sys::setpgid(pgid, pgid);
    let procs = cfg.procs.clamp(1, MAX_WORKERS);
    let mut gens = vec![0u64; procs];
    let mut pids = vec![0i32; procs];
    let mut workers = 0u64;
    for i in 0..procs {
        pids[i] = spawn_worker(cfg, i, 0, pgid);
        workers += 1;
    }
    let deadline = cfg.duration.map(|d| start + d);
    let mut last_cont = Instant::now();
    let mut last_progress = Instant::now();
    let mut last_ops = 0u64;
    let mut last_change = Instant::now();
    let mut stall_reported = false;
    loop {
        // Reap whatever died: workers are respawned, others just reaped.
        while let Ok(Some((pid, _status))) = sys::waitpid(-1, true) {
            if let Some(i) = pids.iter().position(|&p| p == pid) {
                s.workers[i].store(0, Ordering::Relaxed);
                if !stopping() {
                    gens[i] += 1;
                    pids[i] = spawn_worker(cfg, i, gens[i], pgid);
                    workers += 1;
                } else {
                    pids[i] = 0;
                }
            }
        }
        let ops = s.ops.load(Ordering::Relaxed);
        if ops != last_ops {
            last_ops = ops;
            last_change = Instant::now();
        } else if last_change.elapsed() > Duration::from_secs(60) && !stall_reported {
            stall_reported = true;
            record_anomaly(&format!("no operation completed for 60 s (at {ops} ops)"));
        }
        if stopping() || deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        if last_cont.elapsed() >= Duration::from_secs(1) {
            let _ = sys::kill(-pgid, libc::SIGCONT);
            last_cont = Instant::now();
        }
        if cfg.progress_secs > 0 && last_progress.elapsed() >= Duration::from_secs(cfg.progress_secs) {
            last_progress = Instant::now();
            let c = crate::guest::Counters::read();
            let line = format!(
                "t={:.0}s ops={} ({:.0}/s) forks={} threads={} workers={} anomalies={} {}",
                start.elapsed().as_secs_f64(),
                ops,
                ops as f64 / start.elapsed().as_secs_f64(),
                s.forks.load(Ordering::Relaxed),
                s.threads.load(Ordering::Relaxed),
                workers,
                s.anomalies.load(Ordering::Relaxed),
                c
            );
            println!("# {line}");
            let _ = std::io::Write::flush(&mut std::io::stdout());
            if cfg.kmsg {
                kmsg(&line);
            }
        }
        sys::usleep(20_000);
    }
    // Stop: let the workers finish their operation and clean up.
    s.stop.store(1, Ordering::Relaxed);
    let _ = sys::kill(-pgid, libc::SIGCONT);
    let graceful = Instant::now() + Duration::from_secs(15);
    while pids.iter().any(|&p| p != 0) && Instant::now() < graceful {
        match sys::waitpid(-1, true) {
            Ok(Some((pid, _))) => {
                if let Some(i) = pids.iter().position(|&p| p == pid) {
                    pids[i] = 0;
                }
            }
            _ => sys::usleep(20_000),
        }
    }
    // Then everything else, by force.
    let _ = sys::kill(-pgid, libc::SIGKILL);
    for pid in leftovers(pgid) {
        let _ = sys::kill(pid, libc::SIGKILL);
    }
    let hard = Instant::now() + Duration::from_secs(20);
    let mut hung = Vec::new();
    loop {
        while let Ok(Some(_)) = sys::waitpid(-1, true) {}
        let left = leftovers(pgid);
        if left.is_empty() {
            break;
        }
        if Instant::now() >= hard {
            for pid in left {
                hung.push(describe_stuck(pid));
            }
            break;
        }
        for &pid in &left {
            let _ = sys::kill(pid, libc::SIGKILL);
        }
        sys::usleep(50_000);
    }
    let mut per_op: Vec<(&'static str, u64)> = OPS.iter().map(|o| (o.name(), s.per_op[*o as usize].load(Ordering::Relaxed))).collect();
    per_op.retain(|(_, n)| *n > 0);
    let mut errnos = Vec::new();
    for o in OPS {
        for e in 1..MAX_ERRNO {
            let n = s.errnos[o as usize * MAX_ERRNO + e].load(Ordering::Relaxed);
            if n > 0 {
                errnos.push((o.name(), e as i32, n));
            }
        }
    }
    errnos.sort_by(|a, b| b.2.cmp(&a.2));
    let fd = LOG_FD.swap(-1, Ordering::Relaxed);
    if fd >= 0 {
        let _ = sys::close(fd);
    }
    Report {
        ops: s.ops.load(Ordering::Relaxed),
        syscalls: s.syscalls.load(Ordering::Relaxed),
        elapsed: start.elapsed(),
        workers,
        forks: s.forks.load(Ordering::Relaxed),
        threads: s.threads.load(Ordering::Relaxed),
        execs: s.execs.load(Ordering::Relaxed),
        arms: s.arms.load(Ordering::Relaxed),
        anomalies: anomaly_texts(),
        anomaly_count: s.anomalies.load(Ordering::Relaxed),
        hung,
        per_op,
        errnos,
    }
}
