//! pfm_test_inherit: whole programs (issue 14): `PFM_CTXFL_INHERIT`,
//! `PFM_LOAD_PROCESS`, `PFM_IOC_READ_THREADS` and
//! `PFM_CTXFL_START_ON_EXEC` on the soft model (Documentation/perfmon.rst,
//! "Whole programs"). Runs as root; the unprivileged tools drop to uid 1000.
//!
//! Every count is held to an oracle the module cannot influence:
//!
//! - **The threads' own readings.** Each monitored thread reads its own
//!   `CLOCK_THREAD_CPUTIME_ID` and `getrusage(RUSAGE_THREAD)` switch count
//!   (nvcsw + nivcsw: switch-outs, what the soft model counts) and stores
//!   them in a shared file mapping. A thread that reads `t`, tells the tool,
//!   blocks until the tool says go, then reads `u` brackets its counts at
//!   any instant in between: the tool's READ_THREADS and READ_VALUES made
//!   while it waits lie in `[t, u]`, exactly, with no tolerance (the
//!   interval is the CPU time and the switches of one write and one blocking
//!   read). A thread created after LOAD counts from its creation, as its
//!   clock and rusage do; the exec'd root counts from its exec, whose
//!   runtime lies between the clock read just before `execve` and the one
//!   read first thing in the new image.
//! - **perf_event** with `inherit=1` and `enable_on_exec=1` on the same root
//!   (perf stat's way): the context-switch total must equal perf's exactly.
//!   Both windows open at the root's exec (perf in `perf_event_exec`,
//!   perfmon at the `task_rename` tracepoint right after it: nothing between
//!   those two points switches; the rest of the exec, which can, counts for
//!   both) and both
//!   close where the exit starts tearing down the thread's user state
//!   (perf in `perf_event_exit_task`, perfmon's switches as `exit_mm`
//!   begins right after it, whose futex release, mmap lock and unmapping
//!   switch: Documentation, "Accuracy"). task-clock is held to perf's only from below, by the
//!   documented rule (1% + 200 us + 100 us per switch).
//! - **The scheduler's own trace** (tracefs `sched_switch` and
//!   `sched_stat_runtime`), for what no thread can read itself: a thread's
//!   runtime and switches after its last reading, up to its final switch
//!   (its exit path). `sched_stat_runtime` reports every increment of
//!   `se.sum_exec_runtime`, so their sum over a task's life is the runtime
//!   its final switch-out leaves, which an exited row must hold exactly; its
//!   `sched_switch` lines with `prev_pid` the task before its
//!   `sched_process_exit` (which comes after `exit_mm`) bound the
//!   switch-outs the row holds from above (no event marks `exit_mm`;
//!   perf's total pins the sum exactly). The
//!   tolerance this replaces — the time after a thread's last self-reading —
//!   is printed as measured (`exit tails`). A trace that lost events (per-CPU
//!   `overrun`), or a kernel without tracefs, makes those comparisons skip
//!   with a diagnostic; the own-reading bounds still apply (an exited row is
//!   never below the thread's last reading).
//!
//! The cases:
//!
//! 1. A program (a forked child the tool LOADs with `INHERIT` and
//!    `START_ON_EXEC`, released to exec itself) starts 8 threads and 3
//!    processes (the third execs `/proc/self/exe` again as a worker), each
//!    doing 50 pipe ping-pongs with a partner (4 thread pairs, the two
//!    forked processes, the exec'd worker with the root): (a) the
//!    context-switch total equals perf's inherited count exactly, nothing
//!    counted before the exec; (b) the task-clock total lies in the sum of
//!    the threads' own brackets, exactly, while every thread is blocked and
//!    again once all but the root exited (then the upper bound is each
//!    thread's runtime at its final switch, from the trace); the total equals
//!    the rows' sum once everything exited; (c) every row equals what its
//!    thread measured (brackets while alive; after exit, at least its last
//!    reading, task-clock exactly its traced life, switches at most its traced switch-outs before exit), `EXITED` flags, the first row
//!    `LOADED`, `needed` = 12 = GET_STATE `threads`; READ_THREADS errnos
//!    (`E2BIG` with `needed` and nothing written, `EINVAL` for the mask,
//!    flags and reserved fields, `EFAULT`).
//! 2. `PFM_LOAD_PROCESS` on a process creating and ending threads
//!    continuously: every thread still in user mode after LOAD returned
//!    (its own last timestamp later than LOAD's return) has exactly one row,
//!    no tid has two, no row is a stranger; threads created after START count
//!    their whole life (own readings, trace).
//! 3. `START_ON_EXEC`: nothing counted before the exec (read after LOAD and
//!    after a failed exec), `EXEC_ARMED` until the exec, `STARTED` after;
//!    the exec'd two-thread ping-pong's switches equal perf's
//!    `enable_on_exec` count exactly.
//! 4. A fork bomb under inheritance by uid 1000 with
//!    `max_attached_per_user` 8: 21 tasks alive at once give exactly 8
//!    monitored and 13 lost (GET_STATE and READ_THREADS); after 62 more
//!    forks, monitored + lost = 83; everything back to 0 in sysfs.
//! 5. A child's setuid exec under a uid-1000 inheriting tool: its row is
//!    `REVOKED`, frozen, the setuid image's naps and its thread are not
//!    counted, no `REVOKED` message (it is not the loaded thread), the other
//!    thread keeps counting.
//! 6. The tool SIGKILLed while 7 threads of a program are monitored (all
//!    blocked in the kernel): a zombie on every thread (the loaded one's
//!    context and each inherited thread's), 7 attachments, each freed with
//!    its zombie by its own thread when it returns to user mode (one at a
//!    time), then sysfs back to 0.
//! 7. Inheritance and `PFM_LOAD_PROCESS` combine with event sets and the
//!    mapped page (LOAD of a context that has either, mmap of a loaded
//!    one: success; `pfm_test_family_sets` counts them), not with a
//!    sampling buffer that masks when full (`EBUSY`); `EBADFD` for
//!    CREATE_SETS and SET_FLAGS while loaded.
//! 8. Two LOADs with inheritance of one context at once, 1,000 rounds:
//!    one succeeds and one gets `EBUSY`, and a thread the target creates
//!    afterwards joins the winner's family (GET_STATE `threads` 2,
//!    `lost_threads` 0, READ_THREADS `needed` 2).

use std::collections::{BTreeSet, HashMap};
use std::ffi::CString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, IntoRawFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use perfmon::abi::*;
use perfmon::{Context, MessageKind};
use pfm_guest::child::CHILD_FLAG;
use pfm_guest::edges::{thread_cpu_ns, thread_switches};
use pfm_guest::raw::{self, ioctl_bad, ioctl_in, BadAddr, RegsArea};
use pfm_guest::tap::diag;
use pfm_guest::{ensure, module, soft_context, ResultExt, Tap, TestResult};

const PLAN: usize = 16;
/// The setuid-root copy of this program (case 5).
const SUID_COPY: &str = "/tmp/pfm-suid-inherit";
/// Ping-pong round trips per worker pair.
const ROUNDS: u64 = 50;
/// Naps of the setuid image (case 5): each a switch that must not count.
const SUID_NAPS: u64 = 50;
/// `max_attached_per_user` during the fork bomb (case 4).
const BOMB_LIMIT: u64 = 8;
/// Tasks the bomb's target holds alive at once: itself, 10 threads, 10 forks.
const BOMB_HELD: u64 = 21;
/// Forks of the bomb's second phase: a binary tree of depth 5.
const BOMB_TREE: u64 = 2 + 4 + 8 + 16 + 32;
const PARAM_LIMIT: &str = "/sys/module/perfmon/parameters/max_attached_per_user";

// ---------------------------------------------------------------------------
// Shared memory: a file in /tmp (tmpfs) mapped MAP_SHARED by the tool and by
// every process of a program (an exec'd one maps it again by path). Slots of
// 16 u64 words, each accessed atomically.

const SLOT_WORDS: usize = 16;
const W_TID: usize = 0;
const W_PID: usize = 1;
/// 1 once `t` (the reading before blocking) is stored.
const W_READY: usize = 2;
const W_T_CLK: usize = 3;
const W_T_SW: usize = 4;
const W_U_CLK: usize = 5;
const W_U_SW: usize = 6;
/// 1 once `u` (the reading after waking, the thread's last) is stored.
const W_DONE: usize = 7;
/// The exec'd root: its readings first thing in the new image.
const W_X_CLK: usize = 8;
const W_X_SW: usize = 9;
/// CLOCK_MONOTONIC at the thread's first instruction (its start).
const W_START: usize = 10;
/// CLOCK_MONOTONIC at its last reading (its end in user mode).
const W_END: usize = 11;
/// CLOCK_MONOTONIC in the creator, before it created the thread.
const W_CREATE: usize = 12;

#[derive(Debug)]
struct Shm {
    addr: usize,
    len: usize,
}

impl Shm {
    /// Creates (or truncates) `path` with room for `slots` slots, its pages
    /// allocated (written), and maps it.
    fn create(path: &str, slots: usize) -> Result<Shm, String> {
        let len = (slots * SLOT_WORDS * 8).div_ceil(4096) * 4096;
        std::fs::write(path, vec![0u8; len]).ctx("create the shared file")?;
        Self::open(path)
    }

    /// Maps the existing file `path`.
    fn open(path: &str) -> Result<Shm, String> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .ctx("open the shared file")?;
        let len = f.metadata().ctx("stat the shared file")?.len() as usize;
        // SAFETY: a fresh shared mapping of our own file at an address the
        // kernel picks; only accessed through atomics below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(format!("mmap {path}: {}", errname(raw::errno())));
        }
        Ok(Shm {
            addr: p as usize,
            len,
        })
    }

    fn slots(&self) -> usize {
        self.len / (SLOT_WORDS * 8)
    }

    fn cell(&self, slot: usize, word: usize) -> &AtomicU64 {
        assert!(slot < self.slots() && word < SLOT_WORDS);
        // SAFETY: in bounds (asserted), 8-byte aligned (the mapping is page
        // aligned), and only ever accessed atomically, by every process.
        unsafe { &*((self.addr + (slot * SLOT_WORDS + word) * 8) as *const AtomicU64) }
    }

    fn get(&self, slot: usize, word: usize) -> u64 {
        self.cell(slot, word).load(Ordering::SeqCst)
    }

    fn set(&self, slot: usize, word: usize, v: u64) {
        self.cell(slot, word).store(v, Ordering::SeqCst)
    }

    /// A copy of slot `slot`.
    fn slot(&self, slot: usize) -> [u64; SLOT_WORDS] {
        std::array::from_fn(|w| self.get(slot, w))
    }

    /// Leaked for the life of a child process (its threads share it).
    fn leak(self) -> &'static Shm {
        Box::leak(Box::new(self))
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once; no reference into it
        // outlives `self` (cells borrow it).
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

// ---------------------------------------------------------------------------
// Small process helpers (async-signal-safe where a forked child uses them).

/// A progress line with the time since the program began (a hang shows
/// where it hung).
fn step(what: &str) {
    static T0: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let t0 = *T0.get_or_init(Instant::now);
    diag(format!("[{:>8.3} s] {what}", t0.elapsed().as_secs_f64()));
    let _ = std::io::stdout().flush();
}

fn errname(e: i32) -> &'static str {
    perfmon::errno_name(e)
}

fn clock(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is valid for writes.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn mono_ns() -> u64 {
    clock(libc::CLOCK_MONOTONIC)
}

fn gettid() -> u64 {
    u64::from(perfmon::process::gettid())
}

fn getpid() -> u64 {
    u64::from(std::process::id())
}

/// Reads one byte from `fd`, retrying on EINTR; false at EOF or error.
fn read_byte(fd: RawFd) -> bool {
    loop {
        let mut b = [0u8; 1];
        // SAFETY: `b` is valid for one byte of writes.
        let n = unsafe { libc::read(fd, b.as_mut_ptr() as *mut libc::c_void, 1) };
        if n == 1 {
            return true;
        }
        if n < 0 && raw::errno() == libc::EINTR {
            continue;
        }
        return false;
    }
}

/// Writes `n` bytes to `fd`.
fn write_bytes(fd: RawFd, n: usize) -> bool {
    let buf = [b'g'; 64];
    let mut left = n;
    while left > 0 {
        let k = left.min(buf.len());
        // SAFETY: `buf` is valid for `k` bytes of reads.
        let r = unsafe { libc::write(fd, buf.as_ptr() as *const libc::c_void, k) };
        if r < 0 {
            if raw::errno() == libc::EINTR {
                continue;
            }
            return false;
        }
        left -= r as usize;
    }
    true
}

/// Writes the u64s to `fd` in one write (a pipe: atomic below PIPE_BUF).
fn write_u64s(fd: RawFd, v: &[u64; 2]) {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&v[0].to_ne_bytes());
    b[8..].copy_from_slice(&v[1].to_ne_bytes());
    // SAFETY: `b` is valid for 16 bytes of reads.
    unsafe { libc::write(fd, b.as_ptr() as *const libc::c_void, 16) };
}

/// Waits up to `timeout` for `fd` to be readable.
fn readable(fd: RawFd, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        match raw::poll_one(fd, libc::POLLIN, 50) {
            Ok(r) if r != 0 => return Ok(()),
            Ok(_) | Err(libc::EINTR) => {}
            Err(e) => return Err(format!("poll: {}", errname(e))),
        }
        if Instant::now() >= deadline {
            return Err(format!("nothing to read within {timeout:?}"));
        }
    }
}

/// Reads two u64s written by [`write_u64s`], waiting up to `timeout`.
fn read_u64s(fd: RawFd, timeout: Duration) -> Result<[u64; 2], String> {
    readable(fd, timeout)?;
    let b = raw::read_fd(fd, 16).map_err(|e| format!("read: {}", errname(e)))?;
    ensure!(b.len() == 16, "short read of {} bytes", b.len());
    let w = |i: usize| u64::from_ne_bytes(b[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
    Ok([w(0), w(1)])
}

/// In a forked child: each `(from, to)` pair's `from` becomes fd `to`.
/// Every source is first copied above the targets, so that placing one
/// cannot close another still to be placed (a pipe end the test got as
/// fd 3, say, when fd 3 is the target of another). Async-signal-safe.
fn place_fds<const N: usize>(pairs: [(RawFd, RawFd); N]) {
    let mut high = [-1; N];
    for (h, (from, _)) in high.iter_mut().zip(pairs.iter()) {
        // SAFETY: duplicates an fd of ours to the lowest free one >= 64.
        *h = unsafe { libc::fcntl(*from, libc::F_DUPFD, 64) };
    }
    for (h, (_, to)) in high.iter().zip(pairs.iter()) {
        // SAFETY: duplicates an fd of ours; `to` is closed first if open.
        unsafe { libc::dup2(*h, *to) };
    }
    for h in high {
        // SAFETY: the copy made above, now placed (no write end stays
        // open twice: a reader still sees EOF).
        unsafe { libc::close(h) };
    }
}

/// A pipe whose ends are plain fds kept for the life of the process (the
/// workers of a program share them).
fn pipe_fds() -> Result<(RawFd, RawFd), String> {
    let (r, w) = raw::pipe().map_err(|e| format!("pipe: {}", errname(e)))?;
    Ok((r.into_raw_fd(), w.into_raw_fd()))
}

/// An argument vector for `execv`, built before a fork (the child of a
/// threaded process may not allocate).
struct Argv {
    path: CString,
    strs: Vec<CString>,
    ptrs: Vec<*const libc::c_char>,
}

impl Argv {
    fn new(path: &str, args: &[&str]) -> Argv {
        let path = CString::new(path).unwrap_or_default();
        let strs: Vec<CString> = args
            .iter()
            .map(|a| CString::new(*a).unwrap_or_default())
            .collect();
        let mut ptrs: Vec<*const libc::c_char> = strs.iter().map(|s| s.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        Argv { path, strs, ptrs }
    }

    /// This program again, in child mode `args`.
    fn me(args: &[&str]) -> Argv {
        let mut all = vec!["pfm_test_inherit", CHILD_FLAG];
        all.extend_from_slice(args);
        Argv::new("/proc/self/exe", &all)
    }

    /// `execv`; returns only if it failed.
    fn exec(&self) {
        debug_assert!(!self.strs.is_empty());
        // SAFETY: NUL-terminated strings and a NULL-terminated array of
        // pointers into them, all alive here.
        unsafe { libc::execv(self.path.as_ptr(), self.ptrs.as_ptr()) };
    }
}

/// Forks; the child runs `f` (only async-signal-safe calls where the parent
/// has other threads) and `_exit`s with its result, 101 if it panicked.
fn fork_child(f: impl FnOnce() -> i32) -> Result<i32, String> {
    // SAFETY: the child runs only `f` and leaves with `_exit`, never
    // returning into the parent's frames.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", errname(raw::errno())));
    }
    if pid == 0 {
        raw::die_with_parent();
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(101);
        // SAFETY: ends the child without running the parent's exit work.
        unsafe { libc::_exit(code) };
    }
    Ok(pid)
}

/// Waits up to `timeout` for child `pid`; its exit code (128 + signal).
fn wait_pid(pid: i32, timeout: Duration) -> Result<i32, String> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut st = 0;
        // SAFETY: our own child; `st` is valid for writes.
        let r = unsafe { libc::waitpid(pid, &mut st, libc::WNOHANG) };
        if r == pid {
            return Ok(if libc::WIFEXITED(st) {
                libc::WEXITSTATUS(st)
            } else {
                128 + libc::WTERMSIG(st)
            });
        }
        if r < 0 {
            return Err(format!("waitpid {pid}: {}", errname(raw::errno())));
        }
        if Instant::now() >= deadline {
            return Err(format!("child {pid} still running after {timeout:?}"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Kills and reaps a forked child unless it was reaped.
struct Reaper(i32, bool);

impl Reaper {
    fn wait(&mut self, timeout: Duration) -> Result<i32, String> {
        let r = wait_pid(self.0, timeout);
        if r.is_ok() {
            self.1 = true;
        }
        r
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        if !self.1 {
            // SAFETY: our own unreaped child.
            unsafe {
                libc::kill(self.0, libc::SIGKILL);
                libc::waitpid(self.0, std::ptr::null_mut(), 0);
            }
        }
    }
}

fn wait_state(pid: u32, state: char, timeout: Duration) -> Result<(), String> {
    ensure!(
        module::wait_for(timeout, || pfm_guest::child::proc_state(pid) == Some(state)),
        "task {pid} not in state {state} within {timeout:?} (state {:?})",
        pfm_guest::child::proc_state(pid)
    );
    Ok(())
}

/// A 1 ms nap, again until the thread was switched out.
fn nap() {
    let before = thread_switches();
    loop {
        std::thread::sleep(Duration::from_millis(1));
        if thread_switches() != before {
            return;
        }
    }
}

fn set_dumpable() {
    // SAFETY: PR_SET_DUMPABLE takes an integer.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1) };
}

// ---------------------------------------------------------------------------
// The context: the three soft events, and the new calls through the raw layer.

#[derive(Clone, Copy, Debug)]
struct Pmds {
    tc: u16,
    cs: u16,
    mig: u16,
    mask: u64,
}

impl Pmds {
    /// Index of `pmd` among the values of a read of `mask` (PMD order).
    fn pos(&self, pmd: u16) -> usize {
        (self.mask & ((1u64 << pmd) - 1)).count_ones() as usize
    }
    fn tc(&self, v: &[u64]) -> u64 {
        v[self.pos(self.tc)]
    }
    fn cs(&self, v: &[u64]) -> u64 {
        v[self.pos(self.cs)]
    }
    fn mig(&self, v: &[u64]) -> u64 {
        v[self.pos(self.mig)]
    }
}

/// A context counting task-clock, context-switches and cpu-migrations.
fn counting_context() -> Result<(Context, Pmds), String> {
    let (ctx, _) = soft_context()?;
    let p = ctx.programmed().to_vec();
    ensure!(p.len() == 3, "programmed {p:?}");
    let mask = p.iter().fold(0u64, |m, &n| m | 1 << n);
    Ok((
        ctx,
        Pmds {
            tc: p[0],
            cs: p[1],
            mig: p[2],
            mask,
        },
    ))
}

fn ctx_info(ctx: &Context) -> Result<PfmCtxInfo, String> {
    let mut i = PfmCtxInfo::default();
    ioctl_in(ctx.as_raw_fd(), PFM_IOC_GET_STATE, &mut i)
        .map_err(|e| format!("GET_STATE: {}", errname(e)))?;
    Ok(i)
}

fn load_flags(ctx: &Context, tid: u32, flags: u32) -> Result<(), i32> {
    let mut l = PfmLoad {
        tid,
        flags,
        ..Default::default()
    };
    ioctl_in(ctx.as_raw_fd(), PFM_IOC_LOAD, &mut l).map(|_| ())
}

fn set_flags(ctx: &Context, flags: u32) -> Result<(), i32> {
    let mut f = PfmCtxFlags {
        flags,
        ..Default::default()
    };
    ioctl_in(ctx.as_raw_fd(), PFM_IOC_SET_FLAGS, &mut f).map(|_| ())
}

fn values(ctx: &Context, p: &Pmds) -> Result<perfmon::Counts, String> {
    ctx.read_values(p.mask).ctx("READ_VALUES")
}

/// What READ_THREADS returned.
#[derive(Clone, Debug, Default)]
struct Rows {
    rows: Vec<PfmThread>,
    needed: u32,
    lost: u32,
}

impl Rows {
    fn of(&self, tid: u64) -> Vec<&PfmThread> {
        self.rows
            .iter()
            .filter(|r| u64::from(r.tid) == tid)
            .collect()
    }

    fn one(&self, tid: u64) -> Result<&PfmThread, String> {
        let v = self.of(tid);
        ensure!(v.len() == 1, "tid {tid} has {} rows (1 expected)", v.len());
        Ok(v[0])
    }
}

/// One READ_THREADS with `count` rows of room at byte `off` of `area`.
fn read_threads_raw(
    fd: RawFd,
    area: &RegsArea,
    off: usize,
    count: u32,
    mask: u64,
) -> (Result<i32, i32>, PfmThreadsArg) {
    let mut arg = PfmThreadsArg {
        threads: area.addr(off),
        pmd_mask: mask,
        count,
        ..Default::default()
    };
    let r = ioctl_in(fd, PFM_IOC_READ_THREADS, &mut arg);
    (r, arg)
}

/// Every row, sized by `needed` (retried if threads appear meanwhile).
fn read_threads(ctx: &Context, p: &Pmds) -> Result<Rows, String> {
    let mut count = 64u32;
    for _ in 0..8 {
        let pages = (count as usize * std::mem::size_of::<PfmThread>()).div_ceil(raw::PAGE);
        let area = RegsArea::new(pages).map_err(|e| format!("map: {}", errname(e)))?;
        let (r, arg) = read_threads_raw(ctx.as_raw_fd(), &area, 0, count, p.mask);
        match r {
            Ok(_) => {
                ensure!(
                    arg.needed <= count,
                    "READ_THREADS succeeded with needed {} > count {count}",
                    arg.needed
                );
                return Ok(Rows {
                    rows: area.get::<PfmThread>(0, arg.needed as usize),
                    needed: arg.needed,
                    lost: arg.lost_threads,
                });
            }
            Err(libc::E2BIG) => count = arg.needed + 64,
            Err(e) => return Err(format!("READ_THREADS: {}", errname(e))),
        }
    }
    Err("READ_THREADS: E2BIG 8 times".into())
}

/// Polls READ_THREADS until `cond` holds (up to `timeout`).
fn rows_until(
    ctx: &Context,
    p: &Pmds,
    timeout: Duration,
    what: &str,
    cond: impl Fn(&Rows) -> bool,
) -> Result<Rows, String> {
    let deadline = Instant::now() + timeout;
    loop {
        let rows = read_threads(ctx, p)?;
        if cond(&rows) {
            return Ok(rows);
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "{what}: not within {timeout:?}; rows {}",
                describe_rows(&rows, p)
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn describe_rows(rows: &Rows, p: &Pmds) -> String {
    let mut s = format!("needed={} lost={}:", rows.needed, rows.lost);
    for r in &rows.rows {
        s.push_str(&format!(
            " [tid {} pid {} flags {:#x} tc {} cs {} mig {}]",
            r.tid,
            r.pid,
            r.flags,
            p.tc(&r.values),
            p.cs(&r.values),
            p.mig(&r.values)
        ));
    }
    s
}

// ---------------------------------------------------------------------------
// perf_event with inherit=1 (and enable_on_exec), as perf stat opens it.

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PerfAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    /// bit 0 disabled, 1 inherit, 12 enable_on_exec.
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
const PERF_COUNT_SW_CONTEXT_SWITCHES: u64 = 3;
const PERF_COUNT_SW_CPU_MIGRATIONS: u64 = 4;

struct Perf(std::fs::File);

impl Perf {
    /// A software counter of `pid` and every task it creates, enabled at
    /// its next exec.
    fn inherit_on_exec(pid: i32, config: u64) -> Result<Perf, String> {
        let mut a = PerfAttr {
            type_: 1,
            size: std::mem::size_of::<PerfAttr>() as u32,
            config,
            read_format: 3,
            flags: 1 | 2 | 1 << 12,
            ..Default::default()
        };
        // SAFETY: a valid attribute structure of the size it says; the
        // kernel may write `size` back into our own copy.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &mut a as *mut PerfAttr,
                pid as libc::c_long,
                -1 as libc::c_long,
                -1 as libc::c_long,
                8 as libc::c_ulong,
            )
        };
        if fd < 0 {
            return Err(format!(
                "perf_event_open(inherit, enable_on_exec, config {config}): {}",
                errname(raw::errno())
            ));
        }
        // SAFETY: a new fd that nothing else owns.
        Ok(Perf(unsafe {
            <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd as RawFd)
        }))
    }

    /// The count (its inherited children's included once they exited).
    fn read(&self) -> Result<u64, String> {
        let mut b = [0u8; 24];
        (&self.0).read_exact(&mut b).ctx("perf read")?;
        Ok(u64::from_ne_bytes(b[..8].try_into().unwrap_or([0; 8])))
    }
}

// ---------------------------------------------------------------------------
// The scheduler's trace: per task, the runtime (sum of sched_stat_runtime)
// and the switch-outs other than the final one.

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Life {
    runtime: u64,
    switches: u64,
    died: bool,
    /// Switch-outs after its sched_process_exit (its exit path), final
    /// excluded, and their prev_state.
    exit_switches: u64,
    exit_states: [u8; 4],
    exiting: bool,
}

struct Trace {
    dir: String,
}

type Lives = HashMap<u64, Life>;

impl Trace {
    /// Starts tracing sched_switch and sched_stat_runtime, or says why not.
    fn start() -> Result<Trace, String> {
        let mut dir = "/sys/kernel/tracing".to_string();
        if !std::path::Path::new(&format!("{dir}/trace")).exists() {
            let (src, target, fs) = (c"nodev", c"/sys/kernel/tracing", c"tracefs");
            // SAFETY: NUL-terminated strings; no data argument.
            unsafe {
                libc::mount(
                    src.as_ptr(),
                    target.as_ptr(),
                    fs.as_ptr(),
                    0,
                    std::ptr::null(),
                )
            };
        }
        if !std::path::Path::new(&format!("{dir}/trace")).exists() {
            dir = "/sys/kernel/debug/tracing".to_string();
        }
        let w = |f: &str, v: &str| {
            std::fs::write(format!("{dir}/{f}"), v).map_err(|e| format!("{dir}/{f}: {e}"))
        };
        w("tracing_on", "0")?;
        w("buffer_size_kb", "16384")?;
        w("trace", "")?;
        w("events/sched/sched_switch/enable", "1")?;
        w("events/sched/sched_stat_runtime/enable", "1")?;
        w("events/sched/sched_process_exit/enable", "1")?;
        let _ = w("trace_clock", "global");
        w("tracing_on", "1")?;
        Ok(Trace { dir })
    }

    /// Stops, parses, and switches the events off again.
    fn stop(self) -> Result<Lives, String> {
        let d = &self.dir;
        let _ = std::fs::write(format!("{d}/tracing_on"), "0");
        let mut lost = 0u64;
        for cpu in 0..perfmon::process::online_cpus() {
            let stats =
                std::fs::read_to_string(format!("{d}/per_cpu/cpu{cpu}/stats")).unwrap_or_default();
            for l in stats.lines() {
                for key in ["overrun:", "dropped events:"] {
                    if let Some(v) = l.strip_prefix(key) {
                        lost += v.trim().parse::<u64>().unwrap_or(0);
                    }
                }
            }
        }
        let text = std::fs::read_to_string(format!("{d}/trace")).ctx("read the trace");
        let _ = std::fs::write(format!("{d}/events/sched/sched_switch/enable"), "0");
        let _ = std::fs::write(format!("{d}/events/sched/sched_stat_runtime/enable"), "0");
        let _ = std::fs::write(format!("{d}/events/sched/sched_process_exit/enable"), "0");
        let _ = std::fs::write(format!("{d}/trace"), "");
        let _ = std::fs::write(format!("{d}/buffer_size_kb"), "1024");
        ensure!(lost == 0, "the trace lost {lost} events");
        let mut lives: Lives = HashMap::new();
        let mut runtime_events = 0u64;
        for line in text?.lines() {
            if let Some(i) = line.find(": sched_switch: ") {
                let rest = &line[i..];
                let pid = field_num(rest, "prev_pid=");
                let state = rest
                    .split_whitespace()
                    .find_map(|t| t.strip_prefix("prev_state="))
                    .unwrap_or("");
                if let Some(pid) = pid {
                    let l = lives.entry(pid).or_default();
                    if state.starts_with('X') || state.starts_with('Z') {
                        l.died = true;
                    } else {
                        l.switches += 1;
                        if l.exiting {
                            let i = (l.exit_switches as usize).min(3);
                            l.exit_states[i] = state.bytes().next().unwrap_or(b'?');
                            l.exit_switches += 1;
                        }
                    }
                }
            } else if let Some(i) = line.find(": sched_process_exit: ") {
                if let Some(pid) = field_num(&line[i..], "pid=") {
                    lives.entry(pid).or_default().exiting = true;
                }
            } else if let Some(i) = line.find(": sched_stat_runtime: ") {
                let rest = &line[i..];
                if let (Some(pid), Some(rt)) =
                    (field_num(rest, "pid="), field_num(rest, "runtime="))
                {
                    lives.entry(pid).or_default().runtime += rt;
                    runtime_events += 1;
                }
            }
        }
        ensure!(
            runtime_events > 0,
            "no sched_stat_runtime event in the trace"
        );
        Ok(lives)
    }
}

fn field_num(text: &str, key: &str) -> Option<u64> {
    text.split_whitespace()
        .find_map(|t| t.strip_prefix(key))
        .and_then(|v| v.parse().ok())
}

/// The trace's record of `tid`'s whole life, if the trace is usable and saw
/// it die.
fn life_of(lives: &Result<Lives, String>, tid: u64) -> Option<Life> {
    lives
        .as_ref()
        .ok()
        .and_then(|l| l.get(&tid).copied())
        .filter(|l| l.died)
}

// ---------------------------------------------------------------------------
// The workers of case 1: ping-pong, then an edge (see the module comment).

/// Stores who the calling thread is in `slot`, and when it started.
fn identify(shm: &Shm, slot: usize) {
    shm.set(slot, W_TID, gettid());
    shm.set(slot, W_PID, getpid());
    shm.set(slot, W_START, mono_ns());
}

/// `rounds` round trips through a pair of pipes.
fn pingpong(first: bool, rx: RawFd, tx: RawFd, rounds: u64) {
    for _ in 0..rounds {
        if first {
            write_bytes(tx, 1);
            read_byte(rx);
        } else {
            read_byte(rx);
            write_bytes(tx, 1);
        }
    }
}

/// Reads `t` (switches, then clock), says READY, blocks on `release`, reads
/// `u` (clock, then switches), says DONE: the thread's counts at any
/// instant between READY and its wake-up lie in `[t, u]`.
fn edge(shm: &Shm, slot: usize, release: RawFd) {
    let sw = thread_switches();
    let clk = thread_cpu_ns();
    shm.set(slot, W_T_SW, sw);
    shm.set(slot, W_T_CLK, clk);
    shm.set(slot, W_READY, 1);
    read_byte(release);
    let clk = thread_cpu_ns();
    let sw = thread_switches();
    shm.set(slot, W_U_CLK, clk);
    shm.set(slot, W_U_SW, sw);
    shm.set(slot, W_END, mono_ns());
    shm.set(slot, W_DONE, 1);
}

/// The release fd every worker of case 1 blocks on (set up by the tool's
/// fork, inherited by the whole program).
const REL_FD: RawFd = 11;
/// Slots of case 1: 0 the root, 1..=8 its threads, 9 and 10 its forked
/// processes, 11 the exec'd one, 12 the root's second edge (after it
/// reaped everything).
const ROOT: usize = 0;
const P3: usize = 11;
const ROOT_FINAL: usize = 12;
const WORKERS: usize = 12;

/// Child mode `inh-root PATH ROUNDS`: the program of case 1, after its exec.
fn root_role(xclk: u64, xsw: u64, path: &str, rounds: u64) -> i32 {
    let shm = match Shm::open(path) {
        Ok(s) => s.leak(),
        Err(_) => return 3,
    };
    shm.set(ROOT, W_X_CLK, xclk);
    shm.set(ROOT, W_X_SW, xsw);
    identify(shm, ROOT);
    // Two forked workers ping-pong with each other (forked while this
    // process has one thread: they may run Rust code).
    let (Ok((a_r, a_w)), Ok((b_r, b_w))) = (pipe_fds(), pipe_fds()) else {
        return 3;
    };
    let mut pids = Vec::new();
    for (slot, first, rx, tx) in [(9, true, b_r, a_w), (10, false, a_r, b_w)] {
        shm.set(slot, W_CREATE, mono_ns());
        match fork_child(|| {
            identify(shm, slot);
            pingpong(first, rx, tx, rounds);
            edge(shm, slot, REL_FD);
            0
        }) {
            Ok(p) => pids.push(p),
            Err(_) => return 3,
        }
    }
    // The third execs this program as a worker; it ping-pongs with the root.
    let (Ok((c_r, c_w)), Ok((d_r, d_w))) = (pipe_fds(), pipe_fds()) else {
        return 3;
    };
    let rounds_s = rounds.to_string();
    let p3 = P3.to_string();
    let argv = Argv::me(&["inh-worker", path, &p3, &rounds_s, "0", "3", "4"]);
    shm.set(P3, W_CREATE, mono_ns());
    match fork_child(|| {
        place_fds([(c_r, 3), (d_w, 4)]);
        argv.exec();
        127
    }) {
        Ok(p) => pids.push(p),
        Err(_) => return 3,
    }
    // 4 pairs of threads.
    let mut threads = Vec::new();
    for pair in 0..4 {
        let (Ok((x_r, x_w)), Ok((y_r, y_w))) = (pipe_fds(), pipe_fds()) else {
            return 3;
        };
        for (slot, first, rx, tx) in [
            (1 + 2 * pair, true, y_r, x_w),
            (2 + 2 * pair, false, x_r, y_w),
        ] {
            shm.set(slot, W_CREATE, mono_ns());
            threads.push(std::thread::spawn(move || {
                identify(shm, slot);
                pingpong(first, rx, tx, rounds);
                edge(shm, slot, REL_FD);
            }));
        }
    }
    pingpong(true, d_r, c_w, rounds);
    edge(shm, ROOT, REL_FD);
    let mut code = 0;
    for t in threads {
        if t.join().is_err() {
            code = 4;
        }
    }
    for p in pids {
        if wait_pid(p, Duration::from_secs(60)) != Ok(0) {
            code = 5;
        }
    }
    edge(shm, ROOT_FINAL, REL_FD);
    code
}

/// Child mode `inh-worker PATH SLOT ROUNDS FIRST RX TX`: the exec'd worker.
fn worker_role(path: &str, slot: usize, rounds: u64, first: bool, rx: RawFd, tx: RawFd) -> i32 {
    let Ok(shm) = Shm::open(path) else {
        return 3;
    };
    identify(&shm, slot);
    pingpong(first, rx, tx, rounds);
    edge(&shm, slot, REL_FD);
    0
}

/// Closes a raw fd on drop.
struct Fd(RawFd);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: our own fd, closed once.
        unsafe { libc::close(self.0) };
    }
}

/// Waits until every slot of `slots` has `word` set.
fn wait_slots(
    shm: &Shm,
    slots: impl Iterator<Item = usize> + Clone,
    word: usize,
    timeout: Duration,
) -> Result<(), String> {
    let ok = module::wait_for(timeout, || slots.clone().all(|s| shm.get(s, word) != 0));
    ensure!(
        ok,
        "slots {:?} not all set within {timeout:?}",
        slots
            .clone()
            .filter(|&s| shm.get(s, word) == 0)
            .collect::<Vec<_>>()
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Case 1: a whole program.

struct Whole {
    p: Pmds,
    root: u64,
    /// The root's CPU clock and switch count just before its execve.
    e: [u64; 2],
    slots: Vec<[u64; SLOT_WORDS]>,
    pre: perfmon::Counts,
    pre_info: PfmCtxInfo,
    pre_perf: u64,
    /// Every worker at its edge.
    edge: Rows,
    edge_total: perfmon::Counts,
    edge_info: PfmCtxInfo,
    /// The root at its second edge, every other task exited.
    fin: Rows,
    fin_total: perfmon::Counts,
    /// Everything exited.
    end: Rows,
    end_total: perfmon::Counts,
    end_info: PfmCtxInfo,
    end_msg: Option<MessageKind>,
    /// perf: task-clock, context-switches, cpu-migrations.
    perf: [u64; 3],
    lives: Result<Lives, String>,
    errnos: TestResult,
}

fn whole_program() -> Result<Whole, String> {
    let path = "/tmp/pfm-inherit-case1";
    let shm = Shm::create(path, ROOT_FINAL + 1)?;
    let (go_r, go_w) = pipe_fds()?;
    let (rel_r, rel_w) = pipe_fds()?;
    let (rep_r, rep_w) = pipe_fds()?;
    let _fds = [go_r, go_w, rel_r, rel_w, rep_r, rep_w].map(Fd);
    let rounds = ROUNDS.to_string();
    let argv = Argv::me(&["inh-root", path, &rounds]);
    step("case 1: fork the root");
    let trace = Trace::start();
    // The root: waits for go, reads its clock and switches, reports them,
    // execs this program as the root of the whole program.
    let pid = fork_child(|| {
        place_fds([(go_r, 10), (rel_r, REL_FD), (rep_w, 12)]);
        if !read_byte(10) {
            return 126;
        }
        let sw = thread_switches();
        let clk = thread_cpu_ns();
        write_u64s(12, &[clk, sw]);
        argv.exec();
        127
    })?;
    let mut reaper = Reaper(pid, false);
    let root = pid as u32;
    wait_state(root, 'S', Duration::from_secs(5))?;
    let (ctx, p) = counting_context()?;
    set_flags(&ctx, PFM_CTXFL_INHERIT | PFM_CTXFL_START_ON_EXEC)
        .map_err(|e| format!("SET_FLAGS INHERIT|START_ON_EXEC: {}", errname(e)))?;
    ctx.load(root).ctx("LOAD")?;
    ctx.wait_active(Duration::from_secs(5)).ctx("ACTIVE")?;
    step("case 1: loaded");
    let pre_info = ctx_info(&ctx)?;
    let pre = values(&ctx, &p)?;
    let perf = [
        Perf::inherit_on_exec(pid, PERF_COUNT_SW_TASK_CLOCK)?,
        Perf::inherit_on_exec(pid, PERF_COUNT_SW_CONTEXT_SWITCHES)?,
        Perf::inherit_on_exec(pid, PERF_COUNT_SW_CPU_MIGRATIONS)?,
    ];
    let pre_perf = perf[1].read()?;
    ensure!(write_bytes(go_w, 1), "write go");
    step("case 1: released, exec'ing");
    let e = read_u64s(rep_r, Duration::from_secs(10)).ctx("the root's pre-exec readings")?;
    wait_slots(&shm, 0..WORKERS, W_READY, Duration::from_secs(120)).ctx("edge")?;
    step("case 1: every worker at its edge");
    let edge = read_threads(&ctx, &p)?;
    let edge_total = values(&ctx, &p)?;
    let edge_info = ctx_info(&ctx)?;
    let errnos = threads_errnos(&ctx, &p, edge.needed);
    ensure!(write_bytes(rel_w, WORKERS), "write release");
    wait_slots(
        &shm,
        ROOT_FINAL..ROOT_FINAL + 1,
        W_READY,
        Duration::from_secs(60),
    )
    .ctx("the root's second edge")?;
    let fin = rows_until(
        &ctx,
        &p,
        Duration::from_secs(10),
        "every row but the root's EXITED",
        |r| {
            r.rows.len() >= WORKERS
                && r.rows
                    .iter()
                    .filter(|x| x.tid != root)
                    .all(|x| x.flags & PFM_THRFL_EXITED != 0)
        },
    )?;
    step("case 1: every task but the root exited");
    let fin_total = values(&ctx, &p)?;
    ensure!(write_bytes(rel_w, 1), "write release");
    let code = reaper.wait(Duration::from_secs(60))?;
    ensure!(code == 0, "the program exited with {code}");
    let end = rows_until(&ctx, &p, Duration::from_secs(10), "every row EXITED", |r| {
        r.rows.iter().all(|x| x.flags & PFM_THRFL_EXITED != 0)
    })?;
    step("case 1: the root exited");
    let end_total = values(&ctx, &p)?;
    let end_info = ctx_info(&ctx)?;
    let end_msg = ctx
        .next_message(Some(Duration::from_secs(2)))
        .ok()
        .flatten()
        .map(|m| m.kind);
    let perf = [perf[0].read()?, perf[1].read()?, perf[2].read()?];
    step("case 1: reading the trace");
    let lives = trace.and_then(Trace::stop);
    step("case 1: done");
    let slots = (0..=ROOT_FINAL).map(|s| shm.slot(s)).collect();
    let _ = std::fs::remove_file(path);
    Ok(Whole {
        p,
        root: u64::from(root),
        e,
        slots,
        pre,
        pre_info,
        pre_perf,
        edge,
        edge_total,
        edge_info,
        fin,
        fin_total,
        end,
        end_total,
        end_info,
        end_msg,
        perf,
        lives,
        errnos,
    })
}

impl Whole {
    fn s(&self, slot: usize, word: usize) -> u64 {
        self.slots[slot][word]
    }

    /// The root's counts at an edge of slot `slot` lie in `[t - x, u - e]`:
    /// counting began at its exec, when its runtime was between the reading
    /// before execve (`e`) and the first one in the new image (`x`).
    fn root_bounds(&self, slot: usize) -> ((u64, u64), (u64, u64)) {
        let clk = (
            self.s(slot, W_T_CLK).saturating_sub(self.s(ROOT, W_X_CLK)),
            self.s(slot, W_U_CLK).saturating_sub(self.e[0]),
        );
        let sw = (
            self.s(slot, W_T_SW).saturating_sub(self.s(ROOT, W_X_SW)),
            self.s(slot, W_U_SW).saturating_sub(self.e[1]),
        );
        (clk, sw)
    }

    fn describe(&self) -> String {
        let p = &self.p;
        let mut s = format!(
            "root {} pre-exec clock {} switches {}; first in the image clock {} switches {}\n",
            self.root,
            self.e[0],
            self.e[1],
            self.s(ROOT, W_X_CLK),
            self.s(ROOT, W_X_SW)
        );
        for slot in 0..=ROOT_FINAL {
            s.push_str(&format!(
                "slot {slot}: tid {} pid {} t=({} ns, {} sw) u=({} ns, {} sw)\n",
                self.s(slot, W_TID),
                self.s(slot, W_PID),
                self.s(slot, W_T_CLK),
                self.s(slot, W_T_SW),
                self.s(slot, W_U_CLK),
                self.s(slot, W_U_SW)
            ));
        }
        for (what, rows, total) in [
            ("edge", &self.edge, &self.edge_total),
            ("final", &self.fin, &self.fin_total),
            ("end", &self.end, &self.end_total),
        ] {
            s.push_str(&format!(
                "{what}: total tc {} cs {} mig {} enabled {} running {}; rows {}\n",
                p.tc(&total.values),
                p.cs(&total.values),
                p.mig(&total.values),
                total.time_enabled,
                total.time_running,
                describe_rows(rows, p)
            ));
        }
        s.push_str(&format!(
            "perf inherit: task-clock {} context-switches {} cpu-migrations {}",
            self.perf[0], self.perf[1], self.perf[2]
        ));
        s
    }
}

/// (a) context-switches: the total equals perf's inherited count; nothing
/// before the exec.
fn check_switch_total(w: &Whole) -> TestResult {
    let p = &w.p;
    ensure!(
        w.pre.values.iter().all(|&v| v == 0) && w.pre.time_enabled == 0 && w.pre_perf == 0,
        "counted before the exec: {:?} enabled {} perf {}",
        w.pre.values,
        w.pre.time_enabled,
        w.pre_perf
    );
    ensure!(
        w.pre_info.status & PFM_CTXST_EXEC_ARMED != 0 && w.pre_info.status & PFM_CTXST_STARTED == 0,
        "before the exec: status {:#x} (EXEC_ARMED, not STARTED expected)",
        w.pre_info.status
    );
    let cs = p.cs(&w.end_total.values);
    diag(format!(
        "context-switches: perfmon {cs}, perf {}; cpu-migrations: perfmon {}, perf {} (not compared)",
        w.perf[1],
        p.mig(&w.end_total.values),
        w.perf[2]
    ));
    ensure!(
        cs == w.perf[1],
        "context-switch total {cs} != perf's inherited {}",
        w.perf[1]
    );
    let sum: u64 = w.end.rows.iter().map(|r| p.cs(&r.values)).sum();
    ensure!(
        sum == cs,
        "the rows' switches add up to {sum}, the total is {cs}"
    );
    ensure!(
        w.end_msg == Some(MessageKind::End),
        "message after the root's exit: {:?} (END expected)",
        w.end_msg
    );
    Ok(())
}

/// (b) task-clock (and context-switch) totals within the threads' own
/// readings.
fn check_clock_total(w: &Whole) -> TestResult {
    let p = &w.p;
    let others = 1..WORKERS;
    // At the edge: every worker between t and u.
    let ((rc_lo, rc_hi), (rs_lo, rs_hi)) = w.root_bounds(ROOT);
    let lo: u64 = others.clone().map(|s| w.s(s, W_T_CLK)).sum::<u64>() + rc_lo;
    let hi: u64 = others.clone().map(|s| w.s(s, W_U_CLK)).sum::<u64>() + rc_hi;
    let tc = p.tc(&w.edge_total.values);
    diag(format!(
        "edge: task-clock total {tc} in [{lo}, {hi}] (width {} ns)",
        hi - lo
    ));
    ensure!(
        (lo..=hi).contains(&tc),
        "edge: task-clock total {tc} outside the threads' own [{lo}, {hi}]"
    );
    let slo: u64 = others.clone().map(|s| w.s(s, W_T_SW)).sum::<u64>() + rs_lo;
    let shi: u64 = others.clone().map(|s| w.s(s, W_U_SW)).sum::<u64>() + rs_hi;
    let cs = p.cs(&w.edge_total.values);
    ensure!(
        (slo..=shi).contains(&cs),
        "edge: switch total {cs} outside the threads' own [{slo}, {shi}]"
    );
    // The root at its second edge, the others exited: at least their last
    // readings; at most their traced runtime at their final switch.
    let ((rc_lo, rc_hi), (rs_lo, rs_hi)) = w.root_bounds(ROOT_FINAL);
    let last: u64 = others.clone().map(|s| w.s(s, W_U_CLK)).sum();
    let last_sw: u64 = others.clone().map(|s| w.s(s, W_U_SW)).sum();
    let tc = p.tc(&w.fin_total.values);
    let cs = p.cs(&w.fin_total.values);
    ensure!(
        tc >= last + rc_lo,
        "final: task-clock total {tc} below the threads' last readings {}",
        last + rc_lo
    );
    ensure!(
        cs >= last_sw + rs_lo,
        "final: switch total {cs} below the threads' last readings {}",
        last_sw + rs_lo
    );
    let lives: Option<Vec<Life>> = others
        .clone()
        .map(|s| life_of(&w.lives, w.s(s, W_TID)))
        .collect();
    match (&w.lives, lives) {
        (Ok(_), Some(lives)) => {
            let rt: u64 = lives.iter().map(|l| l.runtime).sum();
            let sw: u64 = lives.iter().map(|l| l.switches).sum();
            diag(format!(
                "final: task-clock total {tc} in [{}, {}]; exit tails (runtime after the last own reading, from the trace): {} ns over {} tasks; switches {cs} in [{}, {}]",
                last + rc_lo,
                rt + rc_hi,
                rt.saturating_sub(last),
                WORKERS - 1,
                last_sw + rs_lo,
                sw + rs_hi
            ));
            ensure!(
                tc <= rt + rc_hi,
                "final: task-clock total {tc} above the tasks' traced runtime {} + the root's {rc_hi}",
                rt
            );
            ensure!(
                cs <= sw + rs_hi,
                "final: switch total {cs} above the tasks' traced switch-outs {sw} + the root's {rs_hi}"
            );
        }
        (Err(e), _) => diag(format!("final: upper bounds not checked: {e}")),
        (Ok(_), None) => {
            diag("final: upper bounds not checked: a task's death is not in the trace")
        }
    }
    // Everything exited: the total is the rows' sum, times included.
    let sum = |f: &dyn Fn(&PfmThread) -> u64| w.end.rows.iter().map(f).sum::<u64>();
    let tc = p.tc(&w.end_total.values);
    ensure!(
        sum(&|r| p.tc(&r.values)) == tc,
        "end: rows' task-clock sum {} != total {tc}",
        sum(&|r| p.tc(&r.values))
    );
    ensure!(
        sum(&|r| r.time_enabled) == w.end_total.time_enabled
            && sum(&|r| r.time_running) == w.end_total.time_running,
        "end: rows' times ({}, {}) != total's ({}, {})",
        sum(&|r| r.time_enabled),
        sum(&|r| r.time_running),
        w.end_total.time_enabled,
        w.end_total.time_running
    );
    ensure!(
        tc >= p.tc(&w.fin_total.values),
        "end: task-clock total {tc} below the one read before the root's exit"
    );
    // perf's task-clock is narrower (Documentation, Accuracy): perfmon's
    // may not be below it by more than 1% + 200 us + 100 us per switch.
    let slack = w.perf[0] / 100 + 200_000 + 100_000 * w.perf[1];
    diag(format!(
        "task-clock: perfmon {tc}, perf {} (perfmon - perf = {} ns)",
        w.perf[0],
        tc as i64 - w.perf[0] as i64
    ));
    ensure!(
        tc + slack >= w.perf[0],
        "task-clock {tc} below perf's {} by more than 1% + 200 us + 100 us per switch",
        w.perf[0]
    );
    Ok(())
}

/// (c) every row is its thread's own count.
fn check_rows(w: &Whole) -> TestResult {
    let p = &w.p;
    let root = w.root;
    let tids: BTreeSet<u64> = (0..WORKERS).map(|s| w.s(s, W_TID)).collect();
    ensure!(
        w.s(ROOT, W_TID) == root && tids.len() == WORKERS,
        "the workers' tids {tids:?} (root {root})"
    );
    for (what, rows) in [("edge", &w.edge), ("final", &w.fin), ("end", &w.end)] {
        let got: BTreeSet<u64> = rows.rows.iter().map(|r| u64::from(r.tid)).collect();
        ensure!(
            rows.rows.len() == WORKERS && rows.needed as usize == WORKERS && got == tids,
            "{what}: rows of {got:?} (needed {}), expected one for each of {tids:?}",
            rows.needed
        );
        ensure!(rows.lost == 0, "{what}: lost_threads {}", rows.lost);
        let first = &rows.rows[0];
        ensure!(
            u64::from(first.tid) == root && first.flags & PFM_THRFL_LOADED != 0,
            "{what}: the first row is tid {} flags {:#x} (the root {root}, LOADED expected)",
            first.tid,
            first.flags
        );
        ensure!(
            rows.rows[1..]
                .iter()
                .all(|r| r.flags & (PFM_THRFL_LOADED | PFM_THRFL_REVOKED) == 0),
            "{what}: another row LOADED or REVOKED"
        );
    }
    for (what, info) in [("edge", &w.edge_info), ("end", &w.end_info)] {
        ensure!(
            info.threads as usize == WORKERS && info.lost_threads == 0,
            "{what}: GET_STATE threads {} lost {} ({WORKERS}, 0 expected)",
            info.threads,
            info.lost_threads
        );
    }
    // Who is where: the threads in the root's process, the processes their own.
    for slot in 0..WORKERS {
        let tid = w.s(slot, W_TID);
        let r = w.edge.one(tid)?;
        let pid = if (1..=8).contains(&slot) { root } else { tid };
        ensure!(
            u64::from(r.pid) == pid && w.s(slot, W_PID) == pid,
            "slot {slot}: row pid {} own pid {} ({pid} expected)",
            r.pid,
            w.s(slot, W_PID)
        );
        ensure!(
            r.flags & PFM_THRFL_EXITED == 0,
            "edge: tid {tid} EXITED while it waits"
        );
    }
    // At the edge: each row within its thread's own bracket, exactly.
    for slot in 0..WORKERS {
        let tid = w.s(slot, W_TID);
        let r = w.edge.one(tid)?;
        let ((clo, chi), (slo, shi)) = if slot == ROOT {
            w.root_bounds(ROOT)
        } else {
            (
                (w.s(slot, W_T_CLK), w.s(slot, W_U_CLK)),
                (w.s(slot, W_T_SW), w.s(slot, W_U_SW)),
            )
        };
        let (tc, cs) = (p.tc(&r.values), p.cs(&r.values));
        ensure!(
            (clo..=chi).contains(&tc),
            "edge: tid {tid} (slot {slot}) task-clock {tc} outside its own clock [{clo}, {chi}]"
        );
        ensure!(
            (slo..=shi).contains(&cs),
            "edge: tid {tid} (slot {slot}) context-switches {cs} outside its own rusage [{slo}, {shi}]"
        );
    }
    // Exited: at least the last reading, task-clock exactly the traced
    // life, switches at most its switch-outs before exit; frozen.
    let mut traced = 0;
    let mut own_equal = 0;
    for slot in 1..WORKERS {
        let tid = w.s(slot, W_TID);
        let r = w.fin.one(tid)?;
        let (tc, cs) = (p.tc(&r.values), p.cs(&r.values));
        ensure!(
            r.flags & PFM_THRFL_EXITED != 0,
            "final: tid {tid} not EXITED"
        );
        ensure!(
            tc >= w.s(slot, W_U_CLK) && cs >= w.s(slot, W_U_SW),
            "final: tid {tid} (slot {slot}) tc {tc} cs {cs} below its last own reading ({} ns, {} switches)",
            w.s(slot, W_U_CLK),
            w.s(slot, W_U_SW)
        );
        if let Some(l) = life_of(&w.lives, tid) {
            traced += 1;
            // task-clock: the whole traced life. Switches stop where
            // perf's do, as exit_mm begins, which no trace event marks: at
            // most the switch-outs before its sched_process_exit (after
            // exit_mm); perf's total pins the sum.
            ensure!(
                tc == l.runtime && cs <= l.switches - l.exit_switches,
                "final: tid {tid} (slot {slot}) tc {tc} cs {cs}, its traced life: runtime {} switch-outs {} before sched_process_exit (exit tail {} ns after its last own reading)",
                l.runtime,
                l.switches - l.exit_switches,
                l.runtime.saturating_sub(w.s(slot, W_U_CLK))
            );
            if cs == w.s(slot, W_U_SW) {
                own_equal += 1;
            }
        }
        let e = w.end.one(tid)?;
        ensure!(
            e.values == r.values,
            "tid {tid}: an exited row changed: {:?} then {:?}",
            r.values,
            e.values
        );
    }
    if let Ok(l) = &w.lives {
        let exits: Vec<String> = (1..WORKERS)
            .filter_map(|s| l.get(&w.s(s, W_TID)).map(|x| (s, x)))
            .map(|(s, x)| {
                format!(
                    "slot {s}: {} ({})",
                    x.exit_switches,
                    String::from_utf8_lossy(&x.exit_states[..(x.exit_switches as usize).min(4)])
                )
            })
            .collect();
        diag(format!(
            "switch-outs in the exit path (after sched_process_exit, final excluded; prev_state): {}",
            exits.join(", ")
        ));
    }
    match &w.lives {
        Ok(_) => diag(format!(
            "exited rows within their traced lives: {traced} of {}; switches equal to the thread's last own reading: {own_equal}",
            WORKERS - 1
        )),
        Err(e) => diag(format!("exited rows not compared with the trace: {e}")),
    }
    ensure!(
        w.lives.is_err() || traced == WORKERS - 1,
        "only {traced} of {} exited tasks found dead in the trace",
        WORKERS - 1
    );
    // The root at its second edge.
    let r = w.fin.one(root)?;
    let ((clo, chi), (slo, shi)) = w.root_bounds(ROOT_FINAL);
    let (tc, cs) = (p.tc(&r.values), p.cs(&r.values));
    ensure!(
        r.flags & PFM_THRFL_EXITED == 0 && (clo..=chi).contains(&tc) && (slo..=shi).contains(&cs),
        "final: the root's row flags {:#x} tc {tc} cs {cs}, its own [{clo}, {chi}] [{slo}, {shi}]",
        r.flags
    );
    ensure!(
        w.end.one(root)?.flags & PFM_THRFL_EXITED != 0,
        "end: the root's row not EXITED"
    );
    Ok(())
}

/// READ_THREADS errnos, on the loaded context with `needed` rows.
fn threads_errnos(ctx: &Context, p: &Pmds, needed: u32) -> TestResult {
    ensure!(needed >= 2, "needed {needed}");
    let fd = ctx.as_raw_fd();
    let area = RegsArea::new(4).map_err(|e| format!("map: {}", errname(e)))?;
    let room = area.rw_len() / std::mem::size_of::<PfmThread>();
    let pattern = PfmThread {
        tid: 0xdead,
        pid: 0xbeef,
        flags: 0x5a5a,
        ..Default::default()
    };
    area.put(0, &vec![pattern; room]);
    for count in [0, needed - 1] {
        let (r, arg) = read_threads_raw(fd, &area, 0, count, p.mask);
        ensure!(
            r == Err(libc::E2BIG) && arg.needed == needed,
            "count {count} < {needed} rows: {:?} needed {} (E2BIG, needed {needed} expected)",
            r.map_err(errname),
            arg.needed
        );
        ensure!(
            area.get::<PfmThread>(0, room).iter().all(|t| *t == pattern),
            "E2BIG with count {count} wrote rows"
        );
    }
    let (r, arg) = read_threads_raw(fd, &area, 0, needed, p.mask);
    ensure!(
        r.is_ok() && arg.needed == needed,
        "count == needed: {:?} needed {}",
        r.map_err(errname),
        arg.needed
    );
    let info = ctx.raw_info().ctx("GET_INFO")?;
    let absent = (0..64).find(|b| info.impl_pmds & 1 << b == 0).unwrap_or(63);
    // (what, pmd_mask, flags, set, vflags, pad, reserved)
    type Case = (&'static str, u64, u32, u16, u16, u32, [u64; 2]);
    let cases: [Case; 9] = [
        ("pmd_mask 0", 0, 0, 0, 0, 0, [0; 2]),
        (
            "an unimplemented PMD in pmd_mask",
            p.mask | 1 << absent,
            0,
            0,
            0,
            0,
            [0; 2],
        ),
        ("flags 1", p.mask, 1, 0, 0, 0, [0; 2]),
        ("set 1 without PFM_VALFL_SET", p.mask, 0, 1, 0, 0, [0; 2]),
        ("vflags 2", p.mask, 0, 0, 2, 0, [0; 2]),
        (
            "set 1, which does not exist",
            p.mask,
            0,
            1,
            PFM_VALFL_SET,
            0,
            [0; 2],
        ),
        ("pad 1", p.mask, 0, 0, 0, 1, [0; 2]),
        ("reserved[0] 1", p.mask, 0, 0, 0, 0, [1, 0]),
        ("reserved[1] 1", p.mask, 0, 0, 0, 0, [0, 1]),
    ];
    for (what, mask, flags, set, vflags, pad, reserved) in cases {
        let mut arg = PfmThreadsArg {
            threads: area.addr(0),
            pmd_mask: mask,
            count: room as u32,
            flags,
            set,
            vflags,
            pad,
            reserved,
            ..Default::default()
        };
        let r = ioctl_in(fd, PFM_IOC_READ_THREADS, &mut arg);
        ensure!(
            r == Err(libc::EINVAL),
            "{what}: {:?} (EINVAL expected)",
            r.map_err(errname)
        );
    }
    let straddle = area.rw_len() - std::mem::size_of::<PfmThread>();
    for (what, addr) in [
        ("NULL rows", 0u64),
        ("rows in a PROT_NONE page", area.guard()),
        ("rows running into a PROT_NONE page", area.addr(straddle)),
    ] {
        let mut arg = PfmThreadsArg {
            threads: addr,
            pmd_mask: p.mask,
            count: room as u32,
            ..Default::default()
        };
        let r = ioctl_in(fd, PFM_IOC_READ_THREADS, &mut arg);
        ensure!(
            r == Err(libc::EFAULT),
            "{what}: {:?} (EFAULT expected)",
            r.map_err(errname)
        );
    }
    let r = ioctl_bad(fd, PFM_IOC_READ_THREADS, &BadAddr::Null);
    ensure!(
        r == Err(libc::EFAULT),
        "argument NULL: {:?} (EFAULT expected)",
        r.map_err(errname)
    );
    let (fresh, fp) = counting_context()?;
    let (r, arg) = read_threads_raw(fresh.as_raw_fd(), &area, 0, 4, fp.mask);
    ensure!(
        r.is_ok() && arg.needed == 0,
        "a context never loaded: {:?} needed {} (no row expected)",
        r.map_err(errname),
        arg.needed
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Case 2: PFM_LOAD_PROCESS on a process that creates and ends threads
// continuously. Slot 0 is the control block: word 0 stop (set by the tool),
// 1 the next free slot, 2 done (set by the target).

const CHURN_SLOTS: usize = 8192;
const SLEEPERS: usize = 4;

fn churn_alloc(shm: &Shm) -> Option<usize> {
    let s = shm.cell(0, 1).fetch_add(1, Ordering::SeqCst) as usize + 1;
    (s < shm.slots()).then_some(s)
}

/// A churn thread's or sleeper's last reading.
fn churn_last(shm: &Shm, slot: usize) {
    let clk = thread_cpu_ns();
    let sw = thread_switches();
    shm.set(slot, W_U_CLK, clk);
    shm.set(slot, W_U_SW, sw);
    shm.set(slot, W_END, mono_ns());
    shm.set(slot, W_DONE, 1);
}

/// Child mode `inh-churn PATH`: 4 long-lived sleepers, and short-lived
/// threads (a 1 ms nap each), up to 6 at a time, created back to back until
/// told to stop; then waits on stdin.
fn churn_role(path: &str) -> i32 {
    let Ok(shm) = Shm::open(path) else {
        return 3;
    };
    let shm = shm.leak();
    let stop = || shm.get(0, 0) != 0;
    let mut sleepers = Vec::new();
    for _ in 0..SLEEPERS {
        let Some(slot) = churn_alloc(shm) else {
            return 3;
        };
        shm.set(slot, W_CREATE, mono_ns());
        sleepers.push(std::thread::spawn(move || {
            identify(shm, slot);
            while shm.get(0, 0) == 0 {
                nap();
            }
            churn_last(shm, slot);
        }));
    }
    let mut live = std::collections::VecDeque::new();
    while !stop() {
        let Some(slot) = churn_alloc(shm) else {
            break;
        };
        shm.set(slot, W_CREATE, mono_ns());
        live.push_back(std::thread::spawn(move || {
            identify(shm, slot);
            nap();
            churn_last(shm, slot);
        }));
        if live.len() > 6 {
            let _ = live.pop_front().map(|h| h.join());
        }
        std::thread::sleep(Duration::from_micros(300));
    }
    for h in live.into_iter().chain(sleepers) {
        let _ = h.join();
    }
    shm.set(0, 2, 1);
    read_byte(0);
    0
}

fn churn_case() -> TestResult {
    let path = "/tmp/pfm-inherit-case2";
    let shm = Shm::create(path, CHURN_SLOTS)?;
    let trace = Trace::start();
    let mut child = Command::new("/proc/self/exe")
        .args([CHILD_FLAG, "inh-churn", path])
        .stdin(Stdio::piped())
        .spawn()
        .ctx("spawn the target")?;
    let pid = child.id();
    let res = (|| {
        ensure!(
            module::wait_for(Duration::from_secs(10), || shm.get(0, 1) >= 40),
            "the target created only {} threads in 10 s",
            shm.get(0, 1)
        );
        step("case 2: churning");
        let (ctx, p) = counting_context()?;
        let load_begin = mono_ns();
        load_flags(&ctx, pid, PFM_LOAD_PROCESS)
            .map_err(|e| format!("LOAD PFM_LOAD_PROCESS: {}", errname(e)))?;
        let load_end = mono_ns();
        ctx.wait_active(Duration::from_secs(5)).ctx("ACTIVE")?;
        ctx.start().ctx("START")?;
        let started = mono_ns();
        std::thread::sleep(Duration::from_millis(400));
        shm.set(0, 0, 1);
        ensure!(
            module::wait_for(Duration::from_secs(30), || shm.get(0, 2) != 0),
            "the target did not finish"
        );
        step("case 2: the target finished");
        let rows = read_threads(&ctx, &p)?;
        let info = ctx_info(&ctx)?;
        Ok((rows, info, p, load_begin, load_end, started))
    })();
    // Whatever happened, the target stops churning and ends.
    shm.set(0, 0, 1);
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(b"x");
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        match child.try_wait().ctx("wait the target")? {
            Some(st) => break Ok(st),
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break Err(format!(
                    "the target did not end within 60 s (killed); {}",
                    res.as_ref().err().map_or("", |e| e.as_str())
                ));
            }
            None => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    step("case 2: the target ended; reading the trace");
    let lives = trace.and_then(Trace::stop);
    let status = status?;
    let (rows, info, p, load_begin, load_end, started) = res?;
    ensure!(status.success(), "the target ended with {status}");
    let n = (shm.get(0, 1) as usize).min(CHURN_SLOTS - 1);
    let slots: Vec<[u64; SLOT_WORDS]> = (1..=n).map(|s| shm.slot(s)).collect();
    let _ = std::fs::remove_file(path);
    // Who is who.
    let mut known: HashMap<u64, usize> = HashMap::new();
    for (i, s) in slots.iter().enumerate() {
        ensure!(s[W_DONE] == 1, "slot {} never finished", i + 1);
        known.insert(s[W_TID], i);
    }
    let mut seen: HashMap<u64, usize> = HashMap::new();
    for r in &rows.rows {
        *seen.entry(u64::from(r.tid)).or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, &c)| c > 1).collect();
    ensure!(twice.is_empty(), "tids with more than one row: {twice:?}");
    let strangers: Vec<_> = seen
        .keys()
        .filter(|t| **t != u64::from(pid) && !known.contains_key(t))
        .collect();
    ensure!(
        strangers.is_empty(),
        "rows of tasks that are not the target's threads: {strangers:?}"
    );
    let first = rows.rows.first().ok_or("no row")?;
    ensure!(
        first.tid == pid && first.flags & PFM_THRFL_LOADED != 0,
        "first row tid {} flags {:#x} (the target {pid}, LOADED expected)",
        first.tid,
        first.flags
    );
    ensure!(
        rows.needed as usize == rows.rows.len()
            && info.threads == rows.needed
            && info.lost_threads == 0
            && rows.lost == 0,
        "needed {} rows {} GET_STATE threads {} lost {} / {}",
        rows.needed,
        rows.rows.len(),
        info.threads,
        info.lost_threads,
        rows.lost
    );
    // Every thread still in user mode after LOAD returned was alive at that
    // point (or created later): it must have its row.
    let (mut before, mut during, mut after, mut ended_before) = (0, 0, 0, 0);
    let mut exact = 0;
    for s in &slots {
        let tid = s[W_TID];
        if s[W_END] <= load_end {
            ended_before += 1;
            continue;
        }
        if s[W_START] < load_begin {
            before += 1;
        } else if s[W_CREATE] > load_end {
            after += 1;
        } else {
            during += 1;
        }
        let r = rows
            .of(tid)
            .first()
            .copied()
            .ok_or_else(|| {
                format!(
                    "tid {tid} (created {} ns after LOAD began, ended {} ns after LOAD returned) has no row",
                    s[W_CREATE] as i64 - load_begin as i64,
                    s[W_END] - load_end
                )
            })?;
        let (tc, cs) = (p.tc(&r.values), p.cs(&r.values));
        let life = life_of(&lives, tid);
        if let Some(l) = life {
            ensure!(
                tc <= l.runtime && cs <= l.switches,
                "tid {tid}: tc {tc} cs {cs} above its traced life ({}, {})",
                l.runtime,
                l.switches
            );
        }
        // Created after START: its whole life is counted.
        if s[W_CREATE] > started {
            ensure!(
                r.flags & PFM_THRFL_EXITED != 0 && tc >= s[W_U_CLK] && cs >= s[W_U_SW],
                "tid {tid} created after START: flags {:#x} tc {tc} cs {cs}, its last own reading ({}, {})",
                r.flags,
                s[W_U_CLK],
                s[W_U_SW]
            );
            if let Some(l) = life {
                // Switches stop as exit_mm begins (see case 1).
                ensure!(
                    tc == l.runtime && cs <= l.switches - l.exit_switches,
                    "tid {tid} created after START: tc {tc} cs {cs}, its traced life ({}, {} switch-outs before exit)",
                    l.runtime,
                    l.switches - l.exit_switches
                );
                exact += 1;
            }
        }
    }
    diag(format!(
        "{} threads: {ended_before} ended before LOAD returned ({} of them have a row), {before} alive at LOAD, {during} created during it, {after} after; {} rows; {exact} rows equal to their traced runtime, switches within{}",
        slots.len(),
        slots
            .iter()
            .filter(|s| s[W_END] <= load_end && !rows.of(s[W_TID]).is_empty())
            .count(),
        rows.rows.len(),
        match &lives {
            Ok(_) => String::new(),
            Err(e) => format!(" (trace: {e})"),
        }
    ));
    ensure!(
        before >= SLEEPERS && after > 0,
        "the churn did not straddle the LOAD ({before} before, {after} after)"
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Case 3: START_ON_EXEC against perf's enable_on_exec.

/// Child mode `inh-exec-pp ROUNDS`: waits on fd 10, then ping-pongs ROUNDS
/// round trips with a partner thread.
fn exec_pp_role(rounds: u64) -> i32 {
    read_byte(10);
    let (Ok((a_r, a_w)), Ok((b_r, b_w))) = (pipe_fds(), pipe_fds()) else {
        return 3;
    };
    let partner = std::thread::spawn(move || pingpong(false, a_r, b_w, rounds));
    pingpong(true, b_r, a_w, rounds);
    if partner.join().is_err() {
        return 4;
    }
    0
}

fn start_on_exec_case() -> TestResult {
    let (go_r, go_w) = pipe_fds()?;
    let (rep_r, rep_w) = pipe_fds()?;
    let _fds = [go_r, go_w, rep_r, rep_w].map(Fd);
    let rounds = ROUNDS.to_string();
    let argv = Argv::me(&["inh-exec-pp", &rounds]);
    let bad = Argv::new("/nonexistent/pfm-inherit", &["pfm-inherit"]);
    let pid = fork_child(|| {
        place_fds([(go_r, 10), (rep_w, 12)]);
        read_byte(10);
        bad.exec();
        write_bytes(12, 1);
        read_byte(10);
        argv.exec();
        127
    })?;
    let mut reaper = Reaper(pid, false);
    let tid = pid as u32;
    wait_state(tid, 'S', Duration::from_secs(5))?;
    let (ctx, p) = counting_context()?;
    set_flags(&ctx, PFM_CTXFL_INHERIT | PFM_CTXFL_START_ON_EXEC)
        .map_err(|e| format!("SET_FLAGS: {}", errname(e)))?;
    ctx.load(tid).ctx("LOAD")?;
    ctx.wait_active(Duration::from_secs(5)).ctx("ACTIVE")?;
    let perf = [
        Perf::inherit_on_exec(pid, PERF_COUNT_SW_TASK_CLOCK)?,
        Perf::inherit_on_exec(pid, PERF_COUNT_SW_CONTEXT_SWITCHES)?,
    ];
    let nothing_yet = |when: &str| -> TestResult {
        let info = ctx_info(&ctx)?;
        let v = values(&ctx, &p)?;
        ensure!(
            info.status & PFM_CTXST_EXEC_ARMED != 0 && info.status & PFM_CTXST_STARTED == 0,
            "{when}: status {:#x} (EXEC_ARMED, not STARTED expected)",
            info.status
        );
        ensure!(
            v.values.iter().all(|&x| x == 0) && v.time_enabled == 0 && v.time_running == 0,
            "{when}: counted {:?} enabled {} running {}",
            v.values,
            v.time_enabled,
            v.time_running
        );
        ensure!(perf[1].read()? == 0, "{when}: perf counted already");
        Ok(())
    };
    step("case 3: loaded");
    nothing_yet("after LOAD")?;
    ensure!(write_bytes(go_w, 1), "write go");
    readable(rep_r, Duration::from_secs(10)).ctx("the failed exec")?;
    wait_state(tid, 'S', Duration::from_secs(5))?;
    nothing_yet("after a failed exec")?;
    ensure!(write_bytes(go_w, 1), "write go");
    let started = module::wait_for(Duration::from_secs(10), || {
        ctx_info(&ctx).is_ok_and(|i| i.status & PFM_CTXST_STARTED != 0)
    });
    let info = ctx_info(&ctx)?;
    ensure!(
        started && info.status & PFM_CTXST_EXEC_ARMED == 0,
        "after the exec: status {:#x} (STARTED, not EXEC_ARMED expected)",
        info.status
    );
    ensure!(write_bytes(go_w, 1), "write go");
    step("case 3: started");
    let code = reaper.wait(Duration::from_secs(60))?;
    ensure!(code == 0, "the program exited with {code}");
    let end = rows_until(&ctx, &p, Duration::from_secs(10), "every row EXITED", |r| {
        r.rows.iter().all(|x| x.flags & PFM_THRFL_EXITED != 0)
    })?;
    let total = values(&ctx, &p)?;
    let (ptc, pcs) = (perf[0].read()?, perf[1].read()?);
    let (tc, cs) = (p.tc(&total.values), p.cs(&total.values));
    diag(format!(
        "the exec'd ping-pong ({ROUNDS} round trips, 2 threads): context-switches perfmon {cs} perf {pcs}; task-clock perfmon {tc} perf {ptc}; {} rows",
        end.rows.len()
    ));
    ensure!(
        end.rows.len() == 2,
        "{} rows (the program and its partner thread expected)",
        end.rows.len()
    );
    ensure!(
        cs == pcs,
        "context-switches {cs} != perf's enable_on_exec {pcs}"
    );
    ensure!(
        cs >= ROUNDS,
        "{cs} switches for {ROUNDS} round trips of two threads"
    );
    ensure!(
        tc + ptc / 100 + 200_000 + 100_000 * pcs >= ptc,
        "task-clock {tc} below perf's {ptc} by more than 1% + 200 us + 100 us per switch"
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Case 4: a fork bomb under inheritance, by uid 1000, against
// max_attached_per_user.

/// The bomb's target: held tasks first (10 forks, 10 threads, all blocked
/// on `hold` once they said so on `up`: each ran user code, so its heir was
/// made or counted lost), then a burst of BOMB_TREE forks of its own that
/// exit at once, then a binary tree of forks of depth 5.
fn bomb_target(go: RawFd, ready: RawFd, hold: RawFd, up: (RawFd, RawFd)) -> i32 {
    read_byte(go);
    let mut kids = Vec::new();
    for _ in 0..10 {
        match fork_child(|| {
            write_bytes(up.1, 1);
            read_byte(hold);
            0
        }) {
            Ok(p) => kids.push(p),
            Err(_) => return 3,
        }
    }
    let threads: Vec<_> = (0..10)
        .map(|_| {
            std::thread::spawn(move || {
                write_bytes(up.1, 1);
                read_byte(hold);
            })
        })
        .collect();
    for _ in 0..20 {
        read_byte(up.0);
    }
    write_bytes(ready, 1);
    for t in threads {
        let _ = t.join();
    }
    for k in kids {
        let _ = wait_pid(k, Duration::from_secs(60));
    }
    // The burst: every fork is the monitored root's.
    let burst: Vec<i32> = (0..BOMB_TREE)
        .filter_map(|_| fork_child(|| 0).ok())
        .collect();
    let forked = burst.len();
    for k in burst {
        let _ = wait_pid(k, Duration::from_secs(60));
    }
    if forked as u64 != BOMB_TREE {
        return 4;
    }
    write_bytes(ready, 1);
    read_byte(go);
    bomb(5);
    write_bytes(ready, 1);
    read_byte(go);
    0
}

fn bomb(depth: u32) {
    if depth == 0 {
        return;
    }
    let kids: Vec<i32> = (0..2)
        .filter_map(|_| {
            fork_child(|| {
                bomb(depth - 1);
                0
            })
            .ok()
        })
        .collect();
    for k in kids {
        let _ = wait_pid(k, Duration::from_secs(60));
    }
}

/// Child mode `inh-bomb`: as uid 1000, the tool of the bomb; prints what it
/// saw as key=value.
fn bomb_tool() -> i32 {
    if raw::become_user(1000, 1000).is_err() {
        println!("error=setuid");
        return 3;
    }
    // Dropping from root left the process undumpable; a uid-1000 tool's
    // children are dumpable.
    set_dumpable();
    let res = (|| -> Result<String, String> {
        let (go_r, go_w) = pipe_fds()?;
        let (rd_r, rd_w) = pipe_fds()?;
        let (hold_r, hold_w) = pipe_fds()?;
        let up = pipe_fds()?;
        let target = fork_child(|| bomb_target(go_r, rd_w, hold_r, up))?;
        let mut reaper = Reaper(target, false);
        let (ctx, p) = counting_context()?;
        set_flags(&ctx, PFM_CTXFL_INHERIT).map_err(|e| format!("SET_FLAGS: {}", errname(e)))?;
        ctx.load(target as u32).ctx("LOAD")?;
        ctx.wait_active(Duration::from_secs(5)).ctx("ACTIVE")?;
        ctx.start().ctx("START")?;
        ensure!(write_bytes(go_w, 1), "write go");
        readable(rd_r, Duration::from_secs(60)).ctx("the held tasks")?;
        read_byte(rd_r);
        let a = ctx_info(&ctx)?;
        let ar = read_threads(&ctx, &p)?;
        let attached = module::sysfs_num("attached_threads").unwrap_or(u64::MAX);
        ensure!(write_bytes(hold_w, 20), "write hold");
        readable(rd_r, Duration::from_secs(120)).ctx("the burst of forks")?;
        read_byte(rd_r);
        let b = ctx_info(&ctx)?;
        let br = read_threads(&ctx, &p)?;
        ensure!(write_bytes(go_w, 1), "write go");
        readable(rd_r, Duration::from_secs(120)).ctx("the tree of forks")?;
        read_byte(rd_r);
        let c = ctx_info(&ctx)?;
        let cr = read_threads(&ctx, &p)?;
        ensure!(write_bytes(go_w, 1), "write go");
        let code = reaper.wait(Duration::from_secs(60))?;
        Ok(format!(
            "a_threads={} a_lost={} a_rows={} a_needed={} a_rows_lost={} a_attached={attached} b_threads={} b_lost={} b_rows={} b_needed={} b_rows_lost={} c_threads={} c_lost={} c_rows={} c_needed={} c_rows_lost={} code={code}",
            a.threads,
            a.lost_threads,
            ar.rows.len(),
            ar.needed,
            ar.lost,
            b.threads,
            b.lost_threads,
            br.rows.len(),
            br.needed,
            br.lost,
            c.threads,
            c.lost_threads,
            cr.rows.len(),
            cr.needed,
            cr.lost
        ))
    })();
    match res {
        Ok(s) => println!("{s}"),
        Err(e) => println!("error={}", e.replace(' ', "_")),
    }
    0
}

/// Runs this program in child mode `args`; all of its stdout (its
/// children's too) once every holder of the pipe is gone.
fn run_child(args: &[&str], timeout: Duration) -> Result<String, String> {
    let mut child = Command::new("/proc/self/exe")
        .arg(CHILD_FLAG)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .ctx("spawn")?;
    let mut out = child.stdout.take().ok_or("no stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        let _ = tx.send(s);
    });
    let text = rx.recv_timeout(timeout);
    let _ = child.kill();
    let _ = child.wait();
    let text = text.map_err(|_| format!("{args:?}: no end of output within {timeout:?}"))?;
    diag(format!("{}: {}", args[0], text.trim().replace('\n', " | ")));
    Ok(text)
}

fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

fn num(text: &str, key: &str) -> Result<u64, String> {
    field(text, key)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("no {key}= in {text:?}"))
}

fn set_limit(n: u64) -> TestResult {
    std::fs::write(PARAM_LIMIT, n.to_string()).ctx("write max_attached_per_user")
}

fn bomb_case() -> TestResult {
    module::wait_idle(Duration::from_secs(10))?;
    step("case 4");
    set_limit(BOMB_LIMIT)?;
    let out = run_child(&["inh-bomb"], Duration::from_secs(300));
    set_limit(1024)?;
    let out = out?;
    ensure!(field(&out, "error").is_none(), "{out}");
    let n = |k: &str| num(&out, k);
    ensure!(n("code")? == 0, "the target ended with {}", n("code")?);
    // 21 tasks alive at once, 8 allowed: exactly 8 monitored, 13 lost.
    let lost = BOMB_HELD - BOMB_LIMIT;
    ensure!(
        n("a_threads")? == BOMB_LIMIT
            && n("a_lost")? == lost
            && n("a_rows")? == BOMB_LIMIT
            && n("a_needed")? == BOMB_LIMIT
            && n("a_rows_lost")? == lost,
        "{BOMB_HELD} tasks held with a limit of {BOMB_LIMIT}: {BOMB_LIMIT} monitored and {lost} lost expected: {out}"
    );
    ensure!(
        n("a_attached")? == BOMB_LIMIT,
        "sysfs attached_threads {} while {BOMB_LIMIT} held",
        n("a_attached")?
    );
    // Then a burst of forks by the root: each one is monitored or lost,
    // none forgotten, whatever the lazy release of the exited ones' quota.
    let all = BOMB_HELD + BOMB_TREE;
    ensure!(
        n("b_threads")? + n("b_lost")? == all
            && n("b_lost")? >= lost
            && n("b_rows_lost")? == n("b_lost")?
            && n("b_rows")? == n("b_threads")?
            && n("b_needed")? == n("b_threads")?,
        "after a burst of {BOMB_TREE} forks: monitored + lost = {all} expected: {out}"
    );
    // Then the tree: a lost process's children are nobody's (only a
    // monitored task's children inherit), so the sum only grows, by the
    // root's own 2 children at least and by all 62 at most.
    let c = n("c_threads")? + n("c_lost")?;
    ensure!(
        (all + 2..=all + BOMB_TREE).contains(&c)
            && n("c_rows_lost")? == n("c_lost")?
            && n("c_rows")? == n("c_threads")?
            && n("c_needed")? == n("c_threads")?,
        "after a tree of {BOMB_TREE} forks: monitored + lost = {c}, in [{}, {}] expected: {out}",
        all + 2,
        all + BOMB_TREE
    );
    module::wait_idle(Duration::from_secs(10)).ctx("after the bomb")?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Case 5: a child's setuid exec under a uid-1000 inheriting tool.

/// The target of case 5: forks K (which execs the setuid copy when told),
/// starts W (naps until stopped), reports both tids.
fn suid_target(go: RawFd, kgo: RawFd, rep: RawFd, stop: RawFd) -> i32 {
    read_byte(go);
    let argv = Argv::new(
        SUID_COPY,
        &["pfm-suid-inherit", CHILD_FLAG, "inh-suid-image"],
    );
    let Ok(k) = fork_child(|| {
        read_byte(kgo);
        argv.exec();
        9
    }) else {
        return 3;
    };
    let flag = std::sync::Arc::new(AtomicU64::new(0));
    let f2 = flag.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let w = std::thread::spawn(move || {
        let _ = tx.send(gettid());
        while f2.load(Ordering::SeqCst) == 0 {
            nap();
        }
    });
    let wtid = rx.recv().unwrap_or(0);
    write_u64s(rep, &[k as u64, wtid]);
    read_byte(stop);
    flag.store(1, Ordering::SeqCst);
    let _ = w.join();
    let _ = wait_pid(k, Duration::from_secs(60));
    0
}

/// Child mode `inh-suid-image`: the setuid image: a thread taking 10 naps,
/// and SUID_NAPS naps.
fn suid_image() -> i32 {
    let t = std::thread::spawn(|| {
        for _ in 0..10 {
            nap();
        }
    });
    for _ in 0..SUID_NAPS {
        nap();
    }
    let _ = t.join();
    0
}

/// Child mode `inh-suid`: as uid 1000, the tool of case 5.
fn suid_tool() -> i32 {
    if raw::become_user(1000, 1000).is_err() {
        println!("error=setuid");
        return 3;
    }
    set_dumpable();
    let res = (|| -> Result<String, String> {
        let (go_r, go_w) = pipe_fds()?;
        let (kgo_r, kgo_w) = pipe_fds()?;
        let (rep_r, rep_w) = pipe_fds()?;
        let (stop_r, stop_w) = pipe_fds()?;
        let target = fork_child(|| suid_target(go_r, kgo_r, rep_w, stop_r))?;
        let mut reaper = Reaper(target, false);
        let (ctx, p) = counting_context()?;
        set_flags(&ctx, PFM_CTXFL_INHERIT).map_err(|e| format!("SET_FLAGS: {}", errname(e)))?;
        ctx.load(target as u32).ctx("LOAD")?;
        ctx.wait_active(Duration::from_secs(5)).ctx("ACTIVE")?;
        ctx.start().ctx("START")?;
        ensure!(write_bytes(go_w, 1), "write go");
        let [k, w] = read_u64s(rep_r, Duration::from_secs(10))?;
        let rows = rows_until(&ctx, &p, Duration::from_secs(5), "3 rows", |r| {
            r.rows.len() == 3
        })?;
        let pre = *rows.one(k)?;
        ensure!(write_bytes(kgo_w, 1), "write kgo");
        let rows = rows_until(&ctx, &p, Duration::from_secs(10), "K REVOKED", |r| {
            r.of(k)
                .first()
                .is_some_and(|x| x.flags & PFM_THRFL_REVOKED != 0)
        })?;
        let k1 = *rows.one(k)?;
        ensure!(
            module::wait_for(Duration::from_secs(30), || {
                matches!(pfm_guest::child::proc_state(k as u32), Some('Z') | None)
            }),
            "the setuid image did not end"
        );
        let rows = read_threads(&ctx, &p)?;
        let k2 = *rows.one(k)?;
        let w1 = *rows.one(w)?;
        std::thread::sleep(Duration::from_millis(200));
        let rows = read_threads(&ctx, &p)?;
        let w2 = *rows.one(w)?;
        let info = ctx_info(&ctx)?;
        let msg = ctx
            .next_message(Some(Duration::from_millis(200)))
            .ok()
            .flatten()
            .map(|m| format!("{:?}", m.kind))
            .unwrap_or_else(|| "none".into());
        ensure!(write_bytes(stop_w, 1), "write stop");
        let code = reaper.wait(Duration::from_secs(60))?;
        let end = ctx
            .next_message(Some(Duration::from_secs(5)))
            .ok()
            .flatten()
            .map(|m| format!("{:?}", m.kind))
            .unwrap_or_else(|| "none".into());
        Ok(format!(
            "k_flags={} k_cs_pre={} k_cs_1={} k_cs_2={} k_tc_1={} k_tc_2={} w_cs_1={} w_cs_2={} w_flags={} rows={} needed={} threads={} lost={} state={} msg_before={msg} msg_end={end} code={code}",
            k2.flags,
            p.cs(&pre.values),
            p.cs(&k1.values),
            p.cs(&k2.values),
            p.tc(&k1.values),
            p.tc(&k2.values),
            p.cs(&w1.values),
            p.cs(&w2.values),
            w2.flags,
            rows.rows.len(),
            rows.needed,
            info.threads,
            info.lost_threads,
            info.state,
        ))
    })();
    match res {
        Ok(s) => println!("{s}"),
        Err(e) => println!("error={}", e.replace(' ', "_")),
    }
    0
}

fn suid_case() -> TestResult {
    module::wait_idle(Duration::from_secs(10))?;
    step("case 5");
    let out = run_child(&["inh-suid"], Duration::from_secs(120))?;
    ensure!(field(&out, "error").is_none(), "{out}");
    let n = |k: &str| num(&out, k);
    ensure!(n("code")? == 0, "the target ended with {}", n("code")?);
    ensure!(
        n("k_flags")? & u64::from(PFM_THRFL_REVOKED) != 0,
        "the exec'ing child's row is not REVOKED: {out}"
    );
    ensure!(
        n("k_cs_1")? == n("k_cs_2")? && n("k_tc_1")? == n("k_tc_2")?,
        "the REVOKED row moved: {out}"
    );
    ensure!(
        n("k_cs_2")? < n("k_cs_pre")? + SUID_NAPS,
        "the setuid image's {SUID_NAPS} naps were counted: {out}"
    );
    ensure!(
        n("rows")? == 3 && n("needed")? == 3 && n("threads")? == 3 && n("lost")? == 0,
        "the setuid image's thread was inherited (3 rows, no loss expected): {out}"
    );
    ensure!(
        n("w_cs_2")? > n("w_cs_1")? && n("w_flags")? & u64::from(PFM_THRFL_REVOKED) == 0,
        "the other thread stopped counting: {out}"
    );
    ensure!(
        n("state")? == u64::from(PFM_STATE_LOADED) && field(&out, "msg_before") == Some("none"),
        "the context left LOADED or got a message for another thread's exec: {out}"
    );
    ensure!(
        field(&out, "msg_end") == Some("End"),
        "no END for the loaded thread: {out}"
    );
    module::wait_idle(Duration::from_secs(10)).ctx("after the setuid case")?;
    Ok(())
}

fn make_suid_copy() -> TestResult {
    let exe = std::env::current_exe().ctx("current_exe")?;
    std::fs::copy(&exe, SUID_COPY).ctx("copy")?;
    std::os::unix::fs::chown(SUID_COPY, Some(0), Some(0)).ctx("chown")?;
    std::fs::set_permissions(SUID_COPY, std::fs::Permissions::from_mode(0o4755)).ctx("chmod")?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Case 6: the tool SIGKILLed while a whole program is monitored.

/// Child mode `inh-zombie-target`: on a byte on fd 3, forks 2 processes and
/// starts 4 threads, each blocked reading fd 4; the main thread then blocks
/// on fd 5.
fn zombie_target() -> i32 {
    read_byte(3);
    let mut kids = Vec::new();
    for _ in 0..2 {
        match fork_child(|| {
            read_byte(4);
            0
        }) {
            Ok(p) => kids.push(p),
            Err(_) => return 3,
        }
    }
    let threads: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(|| {
                read_byte(4);
            })
        })
        .collect();
    read_byte(5);
    for t in threads {
        let _ = t.join();
    }
    for k in kids {
        let _ = wait_pid(k, Duration::from_secs(60));
    }
    0
}

/// Waits until `pid` runs the exec'd zombie target, blocked on its fd 3.
fn wait_exec(pid: u32) -> TestResult {
    let exec_done = module::wait_for(Duration::from_secs(10), || {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains("inh-zombie-target"))
            && pfm_guest::child::proc_state(pid) == Some('S')
    });
    ensure!(exec_done, "{pid} did not exec the target");
    Ok(())
}

/// LOAD with INHERIT and START before the target's exec: the threads and
/// processes it creates after the exec are inherited all the same
/// (monitoring continues across an exec the loader may see).
fn inherit_across_exec_case() -> TestResult {
    module::wait_idle(Duration::from_secs(10))?;
    let (pre_r, pre_w) = pipe_fds()?;
    let (go_r, go_w) = pipe_fds()?;
    let (hold_r, hold_w) = pipe_fds()?;
    let (last_r, last_w) = pipe_fds()?;
    let _fds = [pre_r, pre_w, go_r, go_w, hold_r, hold_w, last_r, last_w].map(Fd);
    let argv = Argv::me(&["inh-zombie-target"]);
    let pid = fork_child(|| {
        place_fds([(pre_r, 10), (go_r, 3), (hold_r, 4), (last_r, 5)]);
        read_byte(10);
        argv.exec();
        127
    })?;
    let mut target = Reaper(pid, false);
    let res = (|| -> TestResult {
        let pid = pid as u32;
        wait_state(pid, 'S', Duration::from_secs(5))?;
        let (ctx, p) = counting_context()?;
        set_flags(&ctx, PFM_CTXFL_INHERIT).map_err(|e| format!("SET_FLAGS: {}", errname(e)))?;
        ctx.load(pid).ctx("LOAD")?;
        ctx.wait_active(Duration::from_secs(5)).ctx("ACTIVE")?;
        ctx.start().ctx("START")?;
        ensure!(write_bytes(pre_w, 1), "write pre");
        wait_exec(pid)?;
        ensure!(write_bytes(go_w, 1), "write go");
        let rows = rows_until(&ctx, &p, Duration::from_secs(5), "7 rows", |r| {
            r.rows.len() == 7
        });
        let info = ctx_info(&ctx)?;
        let attached = module::sysfs_num("attached_threads");
        ensure!(
            rows.is_ok() && attached == Some(7),
            "after the exec, the program's 6 new tasks: attached_threads {attached:?}, GET_STATE threads {} lost {}, {}; {}",
            info.threads,
            info.lost_threads,
            rows.map_or_else(|e| e, |r| describe_rows(&r, &p)),
            tasks_of(pid)
        );
        Ok(())
    })();
    let _ = write_bytes(pre_w, 1);
    let _ = write_bytes(go_w, 1);
    let _ = write_bytes(hold_w, 6);
    let _ = write_bytes(last_w, 1);
    let status = target.wait(Duration::from_secs(60));
    res?;
    ensure!(status? == 0, "the target failed");
    module::wait_idle(Duration::from_secs(10)).ctx("after the exec case")?;
    Ok(())
}

/// A spawned process, killed and reaped on drop.
struct KillChild(std::process::Child);

impl KillChild {
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for KillChild {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The tasks of process `pid` and of its children, as (pid, tid).
fn tree_tasks(pid: u32) -> Vec<(u32, u32)> {
    let mut pids = vec![pid];
    if let Ok(d) = std::fs::read_dir("/proc") {
        for e in d.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            let ppid = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().nth(1))
                .and_then(|v| v.parse::<u32>().ok());
            if ppid == Some(pid) {
                pids.push(p);
            }
        }
    }
    let mut out = Vec::new();
    for p in pids {
        let Ok(d) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for e in d.flatten() {
            if let Ok(t) = e.file_name().to_string_lossy().parse() {
                out.push((p, t));
            }
        }
    }
    out
}

/// The tasks of process `pid` and of its children: tid, state, wchan.
fn tasks_of(pid: u32) -> String {
    let mut out = String::from("tasks:");
    for (p, t) in tree_tasks(pid) {
        let wchan =
            std::fs::read_to_string(format!("/proc/{p}/task/{t}/wchan")).unwrap_or_default();
        let state = pfm_guest::child::proc_state(t).unwrap_or('?');
        out.push_str(&format!(" {p}/{t} {state} {wchan};"));
    }
    out
}

/// Child mode `inh-holder PID`: loads an inheriting context on PID, starts
/// it, says so, and sleeps until killed.
fn holder(pid: u32) -> i32 {
    let r = (|| -> TestResult {
        let (ctx, _) = counting_context()?;
        set_flags(&ctx, PFM_CTXFL_INHERIT).map_err(|e| format!("SET_FLAGS: {}", errname(e)))?;
        ctx.load(pid).ctx("LOAD")?;
        ctx.wait_active(Duration::from_secs(5)).ctx("ACTIVE")?;
        ctx.start().ctx("START")?;
        println!("loaded");
        let _ = std::io::stdout().flush();
        loop {
            std::thread::sleep(Duration::from_secs(1000));
        }
    })();
    println!("error {r:?}");
    3
}

fn zombie_case() -> TestResult {
    module::wait_idle(Duration::from_secs(10))?;
    let (go_r, go_w) = pipe_fds()?;
    let (hold_r, hold_w) = pipe_fds()?;
    let (last_r, last_w) = pipe_fds()?;
    let _fds = [go_r, go_w, hold_r, hold_w, last_r, last_w].map(Fd);
    let argv = Argv::me(&["inh-zombie-target"]);
    step("case 6");
    let pid = fork_child(|| {
        place_fds([(go_r, 3), (hold_r, 4), (last_r, 5)]);
        argv.exec();
        127
    })?;
    let mut target = Reaper(pid, false);
    let res = (|| -> TestResult {
        let pid = pid as u32;
        wait_exec(pid)?;
        let tool = Command::new("/proc/self/exe")
            .args([CHILD_FLAG, "inh-holder", &pid.to_string()])
            .stdout(Stdio::piped())
            .spawn()
            .ctx("spawn the tool")?;
        // Killed and reaped on every path (its fd holds the contexts).
        let mut tool = KillChild(tool);
        let mut line = String::new();
        let out = tool.0.stdout.take().ok_or("no stdout")?;
        BufReader::new(out)
            .read_line(&mut line)
            .ctx("the tool's line")?;
        ensure!(line.trim() == "loaded", "the tool said {line:?}");
        ensure!(write_bytes(go_w, 1), "write go");
        let attached = |n: u64| {
            module::wait_for(Duration::from_secs(5), || {
                module::sysfs_num("attached_threads") == Some(n)
            })
        };
        ensure!(
            attached(7),
            "attached_threads {:?}, 7 expected (the program and its 6 tasks); {}",
            module::sysfs_num("attached_threads"),
            tasks_of(pid)
        );
        // Each task attached itself on its way to user mode, before its
        // read: only once all 7 sleep in it does none still run to user
        // mode, which would free its zombie at once.
        let asleep = module::wait_for(Duration::from_secs(5), || {
            let tasks = tree_tasks(pid);
            tasks.len() == 7
                && tasks
                    .iter()
                    .all(|&(_, t)| pfm_guest::child::proc_state(t) == Some('S'))
        });
        ensure!(
            asleep,
            "the program's 7 tasks not all asleep: {}",
            tasks_of(pid)
        );
        tool.kill();
        // Every thread's context is a zombie now: the loaded one's and
        // each heir's (the manual, "Inheritance").
        let zombies = |n: u64| {
            module::wait_for(Duration::from_secs(5), || {
                let c = module::Counters::read();
                c.zombies == Some(n) && c.live == Some(n) && c.attached == Some(n)
            })
        };
        ensure!(
            zombies(7),
            "after SIGKILL of the tool: {} (7 zombie contexts, 7 attachments expected)",
            module::Counters::read()
        );
        std::thread::sleep(Duration::from_millis(300));
        let c = module::Counters::read();
        diag(format!(
            "300 ms after the tool's death, every thread blocked in the kernel: {c}"
        ));
        ensure!(
            c.attached == Some(7) && c.zombies == Some(7),
            "zombies went before their threads ran: {c}"
        );
        // One thread runs: it frees its own attachment, and only it.
        ensure!(write_bytes(hold_w, 1), "write hold");
        ensure!(
            attached(6),
            "one thread woke, attached_threads {:?} (6 expected)",
            module::sysfs_num("attached_threads")
        );
        std::thread::sleep(Duration::from_millis(100));
        let c = module::Counters::read();
        ensure!(
            c.attached == Some(6) && c.zombies == Some(6),
            "one thread ran, one zombie freed expected: {c}"
        );
        ensure!(write_bytes(hold_w, 5), "write hold");
        ensure!(
            zombies(1),
            "6 threads woke: {} (1 zombie, 1 attachment expected)",
            module::Counters::read()
        );
        ensure!(write_bytes(last_w, 1), "write last");
        module::wait_idle(Duration::from_secs(10)).ctx("after every thread ran")?;
        Ok(())
    })();
    // Whatever happened, the target goes on and ends.
    let _ = write_bytes(go_w, 1);
    let _ = write_bytes(hold_w, 6);
    let _ = write_bytes(last_w, 1);
    let status = target.wait(Duration::from_secs(60));
    res?;
    let status = status?;
    ensure!(status == 0, "the target ended with {status}");
    Ok(())
}

// ---------------------------------------------------------------------------
// Case 7: what inheritance is not combined with.

fn errno_of<T>(r: perfmon::Result<T>) -> Option<i32> {
    r.err().and_then(|e| e.errno())
}

fn expect(errs: &mut Vec<String>, what: &str, got: Option<i32>, want: i32) {
    if got != Some(want) {
        errs.push(format!(
            "{what}: {} ({} expected)",
            got.map_or("success", errname),
            errname(want)
        ));
    }
}

fn one_set(ctx: &Context) -> perfmon::Result<()> {
    ctx.create_sets(&mut [PfmSetdesc {
        set_id: 1,
        ..Default::default()
    }])
}

fn map_page(ctx: &Context) -> Result<raw::FileMap, i32> {
    raw::FileMap::new(
        ctx.as_raw_fd(),
        PFM_PAGE_SIZE,
        libc::PROT_READ,
        libc::MAP_SHARED,
        0,
    )
}

/// Rounds of case 8, and the time they may take at most.
const RACE_ROUNDS: u32 = 1000;
const RACE_BUDGET: Duration = Duration::from_secs(40);

/// Case 8: two LOADs with inheritance of one context at once, as the
/// fuzzer's `whole` scenario races them (its finding 3). Each round one
/// wins and the other gets EBUSY; then the target creates a thread, which
/// must join the winner's family: GET_STATE `threads` 2 (the target and
/// its new thread), `lost_threads` 0, READ_THREADS `needed` 2. The loser
/// used to end the winner's family (its heirs closed, inheritance off)
/// before its own attach was refused, when it passed LOAD's state check
/// before the winner's attach and began its family after the winner's
/// settled: the new thread was then neither monitored nor lost.
fn racing_loads_case() -> TestResult {
    step("case 8");
    use std::sync::{mpsc, Arc, Barrier};
    // The target: creates one thread per request (which exits at once).
    let (req_tx, req_rx) = mpsc::channel::<()>();
    let (ack_tx, ack_rx) = mpsc::channel::<u64>();
    let target = std::thread::spawn(move || {
        let _ = ack_tx.send(gettid());
        while req_rx.recv().is_ok() {
            let ok = std::thread::spawn(|| ()).join().is_ok();
            let _ = ack_tx.send(u64::from(ok));
        }
    });
    let tid = ack_rx
        .recv_timeout(Duration::from_secs(5))
        .map_err(|e| format!("target: {e}"))? as u32;
    let (template, p) = counting_context()?;
    set_flags(&template, PFM_CTXFL_INHERIT).map_err(|e| format!("SET_FLAGS: {}", errname(e)))?;
    let barrier = Arc::new(Barrier::new(2));
    let started = Instant::now();
    let mut rounds = 0u32;
    let mut bad: Vec<String> = Vec::new();
    while rounds < RACE_ROUNDS && started.elapsed() < RACE_BUDGET && bad.len() < 5 {
        rounds += 1;
        let ctx = Arc::new(
            template
                .clone_programmed()
                .map_err(|e| format!("CLONE: {e}"))?,
        );
        // The second loader: released with this thread by the barrier.
        let other = {
            let (ctx, barrier) = (ctx.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                load_flags(&ctx, tid, 0)
            })
        };
        barrier.wait();
        let mine = load_flags(&ctx, tid, 0);
        let theirs = other.join().map_err(|_| "loader panicked".to_string())?;
        let outcome = match (mine, theirs) {
            (Ok(()), Err(libc::EBUSY)) | (Err(libc::EBUSY), Ok(())) => Ok(()),
            (a, b) => Err(format!(
                "LOADs answered {:?} and {:?} (one success and one EBUSY expected)",
                a.map_err(errname),
                b.map_err(errname)
            )),
        };
        if let Err(e) = outcome {
            bad.push(format!("round {rounds}: {e}"));
            continue;
        }
        req_tx.send(()).map_err(|e| format!("target: {e}"))?;
        match ack_rx.recv_timeout(Duration::from_secs(5)) {
            Ok(1) => {}
            r => return Err(format!("round {rounds}: the target's thread: {r:?}")),
        }
        let i = ctx_info(&ctx)?;
        let rows = read_threads(&ctx, &p)?;
        if i.threads != 2 || i.lost_threads != 0 || rows.needed != 2 {
            bad.push(format!(
                "round {rounds}: after one new thread GET_STATE threads {} lost {}, READ_THREADS needed {} (2, 0, 2 expected)",
                i.threads, i.lost_threads, rows.needed
            ));
        }
        ctx.unload().map_err(|e| format!("UNLOAD: {e}"))?;
    }
    drop(req_tx);
    let _ = target.join();
    diag(format!(
        "case 8: {rounds} rounds of two racing LOADs in {:?}, {} wrong",
        started.elapsed(),
        bad.len()
    ));
    ensure!(bad.is_empty(), "{}", bad.join("; "));
    ensure!(rounds >= 100, "only {rounds} rounds in {RACE_BUDGET:?}");
    Ok(())
}

fn exclusions_case() -> TestResult {
    // Every refusal is checked, the failures reported together.
    let mut errs: Vec<String> = Vec::new();
    step("case 7");
    let child = pfm_guest::child::Child::spawn("sleep", &["5"])?;
    let tid = child.pid();
    // Event sets, a mapped page, then LOAD with inheritance or of the
    // whole process: both combine; a buffer that masks when full does not.
    for (what, flags, load) in [
        ("INHERIT", PFM_CTXFL_INHERIT, 0),
        ("PFM_LOAD_PROCESS", 0, PFM_LOAD_PROCESS),
    ] {
        let (ctx, _) = counting_context()?;
        set_flags(&ctx, flags).map_err(|e| format!("SET_FLAGS: {}", errname(e)))?;
        one_set(&ctx).ctx("CREATE_SETS while UNLOADED")?;
        // Each LOAD unloaded after: the thread takes one context at a time.
        match load_flags(&ctx, tid, load) {
            Ok(()) => ctx.unload().ctx("UNLOAD")?,
            Err(e) => errs.push(format!(
                "LOAD ({what}) of a context with event sets: {}",
                errname(e)
            )),
        }
        let (ctx, _) = counting_context()?;
        set_flags(&ctx, flags).map_err(|e| format!("SET_FLAGS: {}", errname(e)))?;
        // The page shows the loaded thread (LOADED).
        let page = ctx.map_counter_page().map_err(|e| format!("mmap: {e}"))?;
        match load_flags(&ctx, tid, load) {
            Err(e) => errs.push(format!(
                "LOAD ({what}) of a mapped context: {} (success expected)",
                errname(e)
            )),
            Ok(()) => {
                let state = page.read(0).map(|r| r.state());
                if state != Some(PFM_STATE_LOADED) {
                    errs.push(format!(
                        "the page of a context loaded with {what}: state {state:?} (LOADED expected)"
                    ));
                }
                ctx.unload().ctx("UNLOAD")?;
            }
        }
        let (ctx, _) = counting_context()?;
        set_flags(&ctx, flags).map_err(|e| format!("SET_FLAGS: {}", errname(e)))?;
        ctx.setup_sampling(1, &[], false, 0)
            .ctx("SMPL_SETUP, mask when full")?;
        expect(
            &mut errs,
            &format!("LOAD ({what}) of a context whose buffer masks when full"),
            load_flags(&ctx, tid, load).err(),
            libc::EBUSY,
        );
    }
    // Loaded with it: mmap allowed; CREATE_SETS and SET_FLAGS wrong state.
    for (what, flags, load) in [
        ("INHERIT", PFM_CTXFL_INHERIT | PFM_CTXFL_START_ON_EXEC, 0),
        ("PFM_LOAD_PROCESS", 0, PFM_LOAD_PROCESS),
    ] {
        let (ctx, _) = counting_context()?;
        set_flags(&ctx, flags).map_err(|e| format!("SET_FLAGS: {}", errname(e)))?;
        let info = ctx_info(&ctx)?;
        ensure!(
            info.flags == flags,
            "GET_STATE flags {:#x} after SET_FLAGS {flags:#x}",
            info.flags
        );
        load_flags(&ctx, tid, load).map_err(|e| format!("LOAD ({what}): {}", errname(e)))?;
        ctx.wait_active(Duration::from_secs(5)).ctx("ACTIVE")?;
        if let Err(e) = map_page(&ctx) {
            errs.push(format!(
                "mmap of a context loaded with {what}: {} (success expected)",
                errname(e)
            ));
        }
        // CREATE_SETS of any loaded context is a wrong state (the
        // manual's table), inheritance or not.
        expect(
            &mut errs,
            &format!("CREATE_SETS on a context loaded with {what}"),
            errno_of(one_set(&ctx)),
            libc::EBADFD,
        );
        for f in [
            PFM_CTXFL_INHERIT,
            PFM_CTXFL_START_ON_EXEC,
            PFM_CTXFL_INHERIT | PFM_CTXFL_START_ON_EXEC,
            0,
        ] {
            expect(
                &mut errs,
                &format!("SET_FLAGS {f:#x} while loaded with {what}"),
                set_flags(&ctx, f).err(),
                libc::EBADFD,
            );
        }
        ctx.unload().ctx("UNLOAD")?;
    }
    let (ctx, _) = counting_context()?;
    expect(
        &mut errs,
        "LOAD with an undefined flag (bit 2)",
        load_flags(&ctx, tid, PFM_LOAD_MASK + 1).err(),
        libc::EINVAL,
    );
    ensure!(errs.is_empty(), "{}", errs.join("\n"));
    Ok(())
}

/// Kernel messages since this program began that a test kernel must never
/// print.
fn splats(marker: &str) -> Result<Vec<String>, String> {
    let out = Command::new("dmesg").output().ctx("dmesg")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let since = text.rfind(marker).map_or(&text[..], |i| &text[i..]);
    let bad = [
        "BUG:",
        "WARNING:",
        "Oops",
        "KASAN",
        "circular locking",
        "inconsistent lock state",
        "lock held when returning",
        "stall",
        "panic",
        "UBSAN",
        "kmemleak",
    ];
    Ok(since
        .lines()
        .filter(|l| bad.iter().any(|b| l.contains(b)))
        .map(str::to_string)
        .collect())
}

// ---------------------------------------------------------------------------

fn own_dispatch() {
    // The exec'd root's first readings: taken before anything else runs.
    let xsw = thread_switches();
    let xclk = thread_cpu_ns();
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) != Some(CHILD_FLAG) {
        return;
    }
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    let n = |i: usize| arg(i).parse::<u64>().unwrap_or(0);
    let code = match arg(2) {
        "inh-root" => {
            raw::die_with_parent();
            root_role(xclk, xsw, arg(3), n(4))
        }
        "inh-worker" => {
            raw::die_with_parent();
            worker_role(
                arg(3),
                n(4) as usize,
                n(5),
                n(6) != 0,
                n(7) as RawFd,
                n(8) as RawFd,
            )
        }
        "inh-churn" => {
            raw::die_with_parent();
            churn_role(arg(3))
        }
        "inh-exec-pp" => {
            raw::die_with_parent();
            exec_pp_role(n(3))
        }
        "inh-bomb" => {
            raw::die_with_parent();
            bomb_tool()
        }
        "inh-suid" => {
            raw::die_with_parent();
            suid_tool()
        }
        "inh-suid-image" => suid_image(),
        "inh-zombie-target" => {
            raw::die_with_parent();
            zombie_target()
        }
        "inh-holder" => holder(n(3) as u32),
        _ => return,
    };
    std::process::exit(code);
}

fn main() {
    own_dispatch();
    pfm_guest::child::dispatch();
    let mut t = Tap::new(PLAN);
    pfm_guest::watchdog(Duration::from_secs(900));
    if raw::geteuid() != 0 {
        t.bail_out("must run as root (a setuid-root copy, other users, tracefs, sysfs)");
    }
    let marker = format!("pfm_test_inherit: start {}", mono_ns());
    let _ = std::fs::write("/dev/kmsg", format!("{marker}\n"));
    t.require("insmod perfmon.ko", module::insmod(&[]));
    t.require("setuid-root copy of this program in /tmp", make_suid_copy());
    let names = [
        "whole program (8 threads, 3 processes, an exec): context-switch total == perf inherit=1 exactly; nothing before the exec",
        "whole program: task-clock total within the threads' own clocks (exact brackets; exited: last reading .. traced life)",
        "whole program: READ_THREADS rows == each thread's own counts, EXITED, LOADED first, needed == 12 == GET_STATE threads",
        "READ_THREADS errnos: E2BIG with needed and nothing written, EINVAL mask/flags/reserved, EFAULT",
    ];
    match std::panic::catch_unwind(whole_program) {
        Ok(Ok(w)) => {
            diag(w.describe());
            t.result(names[0], check_switch_total(&w));
            t.result(names[1], check_clock_total(&w));
            t.result(names[2], check_rows(&w));
            t.result(names[3], w.errnos.clone());
        }
        Ok(Err(e)) => {
            for n in names {
                t.fail(n, &e);
            }
        }
        Err(_) => {
            for n in names {
                t.fail(n, "panicked");
            }
        }
    }
    t.run(
        "PFM_LOAD_PROCESS on a process churning threads: none missed, none twice, no stranger; later ones count their whole life",
        churn_case,
    );
    t.run(
        "START_ON_EXEC: nothing before the exec (nor after a failed one), then switches == perf enable_on_exec exactly",
        || {
            module::wait_idle(Duration::from_secs(10))?;
            start_on_exec_case()
        },
    );
    t.run(
        "fork bomb by uid 1000 under inheritance: max_attached_per_user hit, lost_threads exact, sysfs back to 0",
        bomb_case,
    );
    t.run(
        "a child's setuid exec: its row REVOKED and frozen, its image not counted, the other threads count on",
        suid_case,
    );
    t.run(
        "INHERIT loaded and started before the target's exec: the tasks it creates after the exec are inherited",
        inherit_across_exec_case,
    );
    t.run(
        "tool SIGKILLed: a zombie on every thread, each freed by its own thread when it runs, sysfs back to 0",
        zombie_case,
    );
    t.run(
        "INHERIT / PFM_LOAD_PROCESS with event sets or a mapped page: loaded; with a masking buffer: EBUSY; CREATE_SETS and SET_FLAGS while loaded: EBADFD",
        || {
            module::wait_idle(Duration::from_secs(10))?;
            exclusions_case()
        },
    );
    t.run(
        "two racing LOADs with INHERIT: one wins, one EBUSY, and the winner's family counts a new thread",
        || {
            module::wait_idle(Duration::from_secs(10))?;
            racing_loads_case()
        },
    );
    t.run("no context left behind, no kernel splat", || {
        module::wait_idle(Duration::from_secs(10))?;
        // The probes' own counts (sysfs, where the module has them).
        for name in ["inheriting_contexts", "exec_armed_contexts"] {
            let zero = module::wait_for(Duration::from_secs(5), || {
                module::sysfs_num(name).unwrap_or(0) == 0
            });
            ensure!(zero, "{name} {:?}", module::sysfs_num(name));
        }
        let s = splats(&marker)?;
        ensure!(s.is_empty(), "kernel messages:\n{}", s.join("\n"));
        Ok(())
    });
    t.run("rmmod perfmon", module::rmmod);
    let _ = std::fs::remove_file(SUID_COPY);
    t.finish();
}
