//! What the fuzzer's processes share: the operations and their weights,
//! the MAP_SHARED block (stop flag, counters, the board of thread ids,
//! anomalies, each actor's current operation) and per-process state.

use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::rng::Rng;
use crate::sys::{self, abi, ThreadTimer};

// ---- operations ----

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(super) enum Op {
    Open,
    Close,
    Dup,
    GetInfo,
    WritePmcs,
    WritePmds,
    ReadPmds,
    ReadValues,
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
    Epoll,
    Hotplug,
    Probe,
    CreateSets,
    DeleteSets,
    GetinfoSets,
    ReadThreads,
    Whole,
    Process,
    ExecStart,
    Clone,
    SmplSetup,
    SmplMap,
    SmplDrain,
    SmplUnmap,
    SmplRemap,
}

/// Every ioctl of the ABI, in number order (nr 0, 1, ...).
pub(super) const KNOWN_IOCTLS: [u32; 18] = [
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
    abi::PFM_IOC_READ_VALUES,
    abi::PFM_IOC_CREATE_SETS,
    abi::PFM_IOC_DELETE_SETS,
    abi::PFM_IOC_GETINFO_SETS,
    abi::PFM_IOC_READ_THREADS,
    abi::PFM_IOC_CLONE,
    abi::PFM_IOC_SMPL_SETUP,
];

pub(super) const NOPS: usize = 43;
pub(super) const OPS: [Op; NOPS] = [
    Op::Open,
    Op::Close,
    Op::Dup,
    Op::GetInfo,
    Op::WritePmcs,
    Op::WritePmds,
    Op::ReadPmds,
    Op::ReadValues,
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
    Op::Epoll,
    Op::Hotplug,
    Op::Probe,
    Op::CreateSets,
    Op::DeleteSets,
    Op::GetinfoSets,
    Op::ReadThreads,
    Op::Whole,
    Op::Process,
    Op::ExecStart,
    Op::Clone,
    Op::SmplSetup,
    Op::SmplMap,
    Op::SmplDrain,
    Op::SmplUnmap,
    Op::SmplRemap,
];

/// Weights (per ~10,000) of the worker threads' operations. Process and
/// thread churn is rare: a fork or an exec costs tens of ms on the debug
/// kernel under TCG, an ioctl a fraction of one.
pub(super) const WEIGHTS: [u32; NOPS] = [
    550,  // Open
    420,  // Close
    120,  // Dup
    200,  // GetInfo
    900,  // WritePmcs
    1000, // WritePmds
    700,  // ReadPmds
    500,  // ReadValues
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
    150,  // Epoll
    2,    // Hotplug (root workers only)
    30,   // Probe (exact oracles on a private context; soft only)
    300,  // CreateSets
    150,  // DeleteSets
    250,  // GetinfoSets
    400,  // ReadThreads
    20,   // Whole (inheritance on the actor with fork/thread/exec churn)
    10,   // Process (PFM_LOAD_PROCESS on a child creating threads)
    10,   // ExecStart (PFM_CTXFL_START_ON_EXEC on a child)
    250,  // Clone (PFM_IOC_CLONE of a pool context; its fd joins the pool)
    250,  // SmplSetup (PFM_IOC_SMPL_SETUP of a pool context)
    250,  // SmplMap (mmap of a pool context's buffer, right or wrong)
    250,  // SmplDrain (the actor's mappings read through the ring protocol)
    100,  // SmplUnmap (munmap, whole or a part)
    80,   // SmplRemap (mprotect, mremap, a move, MADV_DOFORK and fork)
];

impl Op {
    pub(super) fn name(self) -> &'static str {
        match self {
            Op::Open => "open",
            Op::Close => "close",
            Op::Dup => "dup",
            Op::GetInfo => "get_info",
            Op::WritePmcs => "write_pmcs",
            Op::WritePmds => "write_pmds",
            Op::ReadPmds => "read_pmds",
            Op::ReadValues => "read_values",
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
            Op::Epoll => "epoll",
            Op::Hotplug => "hotplug",
            Op::Probe => "probe",
            Op::CreateSets => "create_sets",
            Op::DeleteSets => "delete_sets",
            Op::GetinfoSets => "getinfo_sets",
            Op::ReadThreads => "read_threads",
            Op::Whole => "whole",
            Op::Process => "process",
            Op::ExecStart => "exec_start",
            Op::Clone => "clone",
            Op::SmplSetup => "smpl_setup",
            Op::SmplMap => "smpl_map",
            Op::SmplDrain => "smpl_drain",
            Op::SmplUnmap => "smpl_unmap",
            Op::SmplRemap => "smpl_remap",
        }
    }
}

// ---- shared memory ----

pub(super) const BOARD: usize = 256;
pub(super) const MAX_WORKERS: usize = 32;
pub(super) const SLOTS: usize = 512;
pub(super) const MAX_ERRNO: usize = 136;
pub(super) const ANOMALY_TEXTS: usize = 32;
pub(super) const ANOMALY_LEN: usize = 512;

/// One actor's place in shared memory, for hang reports.
#[repr(C)]
pub(super) struct Slot {
    pub(super) tid: AtomicU32,
    pub(super) op: AtomicU32,
    pub(super) n: AtomicU64,
}

#[repr(C)]
pub(super) struct Shared {
    pub(super) stop: AtomicU32,
    pub(super) goal: AtomicU64,
    pub(super) ops: AtomicU64,
    pub(super) syscalls: AtomicU64,
    pub(super) forks: AtomicU64,
    pub(super) threads: AtomicU64,
    pub(super) execs: AtomicU64,
    pub(super) arms: AtomicU64,
    /// Probes that completed their exact checks (see `probe.rs`).
    pub(super) probes: AtomicU64,
    /// CREATE_SETS calls that succeeded (pool and armed contexts).
    pub(super) set_creates: AtomicU64,
    /// GETINFO_SETS results whose invariants were checked, and those of
    /// them where the running times' sum was checked exactly (`sets.rs`).
    pub(super) set_infos: AtomicU64,
    pub(super) set_exact: AtomicU64,
    /// Whole programs: scenarios whose exact checks ran (inheritance on
    /// the actor, LOAD_PROCESS on a churning child, start on exec), and
    /// the threads that joined families in them.
    pub(super) whole_checked: AtomicU64,
    pub(super) process_checked: AtomicU64,
    pub(super) exec_checked: AtomicU64,
    pub(super) heirs_seen: AtomicU64,
    /// PFM_IOC_CLONE: descriptors returned (each checked, then adopted by
    /// the pool or closed), and clones of `arm`'s private templates
    /// compared with their template exactly.
    pub(super) clones: AtomicU64,
    pub(super) clones_exact: AtomicU64,
    /// LOADs with PFM_LOAD_START that succeeded (LOAD and START done).
    pub(super) load_starts: AtomicU64,
    /// Sampling buffers (`smpl.rs`): setups that succeeded, mappings
    /// made, entries drained and checked, and drains that found `tail`
    /// out of range (garbage) and resynced it.
    pub(super) smpl_setups: AtomicU64,
    pub(super) smpl_maps: AtomicU64,
    pub(super) smpl_entries: AtomicU64,
    pub(super) smpl_resyncs: AtomicU64,
    /// Of the entries drained, those with a call chain, and those whose
    /// chain walk met an unreadable frame (`PFM_SMPL_CHAIN_BROKEN`).
    pub(super) smpl_chained: AtomicU64,
    pub(super) smpl_broken: AtomicU64,
    /// Whole programs loaded with a buffer (their heirs write to it).
    pub(super) smpl_whole: AtomicU64,
    /// Randomised periods (`PFM_REGFL_RANDOM`): `arm`'s PMDs written with
    /// the flag (each write must succeed), and READ_PMDS elements that
    /// came back with it and were checked.
    pub(super) random_arms: AtomicU64,
    pub(super) random_reads: AtomicU64,
    /// Suspected kernel bugs of whole programs, per kind (`FINDINGS`): each
    /// kind is an anomaly once, then only counted.
    pub(super) findings: [AtomicU64; FINDINGS.len()],
    pub(super) anomalies: AtomicU64,
    pub(super) next_slot: AtomicU64,
    /// An actor is taking CPU 1 offline and back (one at a time).
    pub(super) hotplug: AtomicU32,
    /// Hotplug cycles done.
    pub(super) hotplugs: AtomicU64,
    /// Anomalies dismissed because the fd no longer was a perfmon file.
    pub(super) reused: AtomicU64,
    /// st_rdev of /dev/perfmon.
    pub(super) rdev: AtomicU64,
    /// Live thread ids any actor may attach to: `uid << 32 | tid`.
    pub(super) board: [AtomicU64; BOARD],
    pub(super) workers: [AtomicU32; MAX_WORKERS],
    pub(super) per_op: [AtomicU64; NOPS],
    pub(super) errnos: [AtomicU64; NOPS * MAX_ERRNO],
    pub(super) slots: [Slot; SLOTS],
    pub(super) anomaly_text: [[AtomicU64; ANOMALY_LEN / 8]; ANOMALY_TEXTS],
}

pub(super) static SHARED: AtomicUsize = AtomicUsize::new(0);
pub(super) static LOG_FD: AtomicI32 = AtomicI32::new(-1);
pub(super) static TIMER_US: AtomicU64 = AtomicU64::new(20_000);
/// `kernel.perf_event_paranoid` when the run started (-1: unknown), read
/// by the master before the first fork: above 2, a caller without
/// CAP_SYS_ADMIN may neither open /dev/perfmon nor clone a context
/// (EACCES).
pub(super) static PARANOID: AtomicI32 = AtomicI32::new(-1);

pub(super) fn shared() -> &'static Shared {
    let p = SHARED.load(Ordering::Relaxed);
    assert!(p != 0);
    // SAFETY: a MAP_SHARED mapping of at least size_of::<Shared>() bytes,
    // zero-initialised (a valid `Shared`: atomics only), never unmapped.
    unsafe { &*(p as *const Shared) }
}

pub(super) fn stopping() -> bool {
    let s = shared();
    s.stop.load(Ordering::Relaxed) != 0
        || s.ops.load(Ordering::Relaxed) >= s.goal.load(Ordering::Relaxed)
}

pub(super) fn record_anomaly(text: &str) {
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

/// Kinds of suspected kernel bugs the whole-program scenarios (and the
/// sampling buffers' second-mapping probe, `smpl.rs`) detect: each is
/// recorded as an anomaly the first time, then only counted, so
/// that one bug hit in every scenario does not hide the other anomalies.
pub(super) const FINDINGS: [&str; 7] = [
    "UNLOADED context still EXEC_ARMED after its thread ended",
    "a refused LOAD emptied the previous LOAD's family (rows, totals)",
    "READ_THREADS rows do not add up to READ_VALUES' totals after STOP",
    "thread created after LOAD neither monitored nor lost",
    "a thread monitored twice (two live rows with one tid)",
    "a live thread of a LOAD_PROCESS'd process has no row",
    "a second mmap of a sampling buffer succeeded while a mapping of it exists (moved by mremap or inherited through MADV_DOFORK)",
];

/// Records suspected bug `kind` (an index of `FINDINGS`), with evidence.
pub(super) fn record_finding(kind: usize, text: &str) {
    let n = shared().findings[kind].fetch_add(1, Ordering::Relaxed);
    if n == 0 {
        record_anomaly(&format!("[finding {kind}] {}: {text}", FINDINGS[kind]));
    } else {
        let fd = LOG_FD.load(Ordering::Relaxed);
        if fd >= 0 {
            sys::write_all(fd, format!("FINDING {kind} {text}\n").as_bytes());
        }
    }
}

pub(super) fn anomaly_texts() -> Vec<String> {
    let s = shared();
    let n = (s.anomalies.load(Ordering::Relaxed) as usize).min(ANOMALY_TEXTS);
    (0..n)
        .map(|i| {
            let bytes: Vec<u8> = s.anomaly_text[i]
                .iter()
                .flat_map(|w| w.load(Ordering::Relaxed).to_le_bytes())
                .collect();
            let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
            String::from_utf8_lossy(&bytes[..end]).into_owned()
        })
        .collect()
}

// ---- per-process state (copied into forked children) ----

pub(super) const POOL: usize = 24;
/// The process's perfmon fds; any thread may use any of them. Only the
/// thread that takes a number out (swap to -1) closes it.
pub(super) static FDS: [AtomicI32; POOL] = [const { AtomicI32::new(-1) }; POOL];
/// Thread ids of this process's actors (for "attach to a sibling thread").
pub(super) static PROC_TIDS: [AtomicU32; 16] = [const { AtomicU32::new(0) }; 16];
/// Short-lived threads of this process alive now.
pub(super) static SHORT_LIVE: AtomicUsize = AtomicUsize::new(0);

pub(super) fn publish_tid(rng: &mut Rng) {
    let tid = sys::gettid();
    let uid = sys::getuid() as u64;
    shared().board[rng.below(BOARD as u64) as usize]
        .store(uid << 32 | tid as u64, Ordering::Relaxed);
    PROC_TIDS[rng.below(16) as usize].store(tid, Ordering::Relaxed);
}

/// Per-thread signal setup: the no-op handlers and the periodic SIGUSR1.
pub(super) fn thread_timer() -> Option<ThreadTimer> {
    ThreadTimer::new(libc::SIGUSR1, TIMER_US.load(Ordering::Relaxed))
}

pub(super) fn process_signals() {
    sys::catch_signal(libc::SIGUSR1);
    sys::catch_signal(libc::SIGUSR2);
    sys::catch_signal(libc::SIGIO);
    sys::ignore_signal(libc::SIGPIPE);
    sys::default_signal(libc::SIGCHLD);
}

pub(super) fn names(errs: &[i32]) -> String {
    errs.iter()
        .map(|&e| perfmon::errno_name(e))
        .collect::<Vec<_>>()
        .join("|")
}

/// The owner of /proc/TID: its effective uid if dumpable, else root (a
/// stat, no fd: see sys::online_cpus for why fds matter).
pub(super) fn proc_uid(tid: u32) -> Option<u32> {
    sys::proc_owner(tid)
}

/// The real uid of a live (not zombie) thread, from /proc/TID/status.
pub(super) fn proc_status_uid(tid: u32) -> Option<u32> {
    let s = sys::read_text(&format!("/proc/{tid}/status"))?;
    let state = s.lines().find(|l| l.starts_with("State:"))?;
    if state.contains('Z') || state.contains('X') {
        return None;
    }
    let line = s.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Weights for short threads and children: no new threads or worker kills.
pub(super) fn restricted_weights() -> [u32; NOPS] {
    let mut w = WEIGHTS;
    w[Op::Thread as usize] = 0;
    w[Op::Worker as usize] = 0;
    w[Op::Fork as usize] = 0;
    w[Op::Hotplug as usize] = 0;
    // The scenarios fork and spawn threads of their own.
    w[Op::Whole as usize] = 0;
    w[Op::Process as usize] = 0;
    w[Op::ExecStart as usize] = 0;
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `bad_ioctl` takes the numbers from `KNOWN_IOCTLS.len()` up as
    /// unknown ones: the table must hold every command, in number order.
    #[test]
    fn known_ioctls_in_number_order() {
        for (nr, cmd) in KNOWN_IOCTLS.iter().enumerate() {
            assert_eq!((cmd & 0xff) as usize, nr, "{cmd:#x}");
            assert_eq!((cmd >> 8) & 0xff, abi::PFM_IOC_MAGIC, "{cmd:#x}");
        }
        assert!(KNOWN_IOCTLS.contains(&abi::PFM_IOC_CLONE));
        assert_eq!(OPS.len(), WEIGHTS.len());
        for (i, op) in OPS.iter().enumerate() {
            assert_eq!(*op as usize, i, "{}", op.name());
        }
    }
}
