//! A monitoring context: one open of `/dev/perfmon`.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::abi::*;
use crate::error::{Error, Op, Result};
use crate::mapped::CounterPage;
use crate::pmu::{Event, PmuInfo};
use crate::sampling::SampleBuffer;
use crate::sys;

/// The default device path.
pub const DEVICE: &str = "/dev/perfmon";

/// The state of a context (`struct pfm_ctx_info.state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CtxState {
    /// Not attached to a thread.
    Unloaded,
    /// Attached to a thread (counting once started).
    Loaded,
    /// Stopped by a notifying overflow until RESTART.
    Masked,
    /// The fd was closed while attached to another thread.
    Zombie,
    /// A value this library does not know.
    Unknown(u32),
}

impl CtxState {
    fn from_raw(v: u32) -> Self {
        match v {
            PFM_STATE_UNLOADED => CtxState::Unloaded,
            PFM_STATE_LOADED => CtxState::Loaded,
            PFM_STATE_MASKED => CtxState::Masked,
            PFM_STATE_ZOMBIE => CtxState::Zombie,
            other => CtxState::Unknown(other),
        }
    }

    /// Lower-case name, as in the documentation.
    pub fn name(self) -> &'static str {
        match self {
            CtxState::Unloaded => "unloaded",
            CtxState::Loaded => "loaded",
            CtxState::Masked => "masked",
            CtxState::Zombie => "zombie",
            CtxState::Unknown(_) => "unknown",
        }
    }
}

/// What `PFM_IOC_GET_STATE` says about a context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct State {
    /// The state machine's state.
    pub state: CtxState,
    /// The monitored thread, 0 if none.
    pub tid: u32,
    /// `PFM_CTXFL_*`.
    pub flags: u32,
    /// `PFM_CTXST_*`.
    pub status: u32,
    /// PMDs written so far (bit n: PMD n).
    pub used_pmds: u64,
    /// Threads monitored since LOAD, alive or exited (1 while loaded
    /// without inheritance, 0 if never loaded).
    pub threads: u32,
    /// Threads that should have been monitored (inherited, or of a whole
    /// process) and could not be: the totals miss their counts.
    pub lost_threads: u32,
}

impl State {
    /// START issued and no STOP since.
    pub fn is_started(&self) -> bool {
        self.status & PFM_CTXST_STARTED != 0
    }

    /// The target thread has installed the context.
    pub fn is_active(&self) -> bool {
        self.status & PFM_CTXST_ACTIVE != 0
    }

    /// The target thread exited.
    pub fn has_exited(&self) -> bool {
        self.status & PFM_CTXST_EXITED != 0
    }

    /// `PFM_CTXFL_START_ON_EXEC` armed by LOAD, the exec not seen yet.
    pub fn is_exec_armed(&self) -> bool {
        self.status & PFM_CTXST_EXEC_ARMED != 0
    }

    /// The context follows the threads and processes its threads create
    /// (`PFM_CTXFL_INHERIT`).
    pub fn inherits(&self) -> bool {
        self.flags & PFM_CTXFL_INHERIT != 0
    }
}

/// One thread a context monitored since LOAD: a row of
/// `PFM_IOC_READ_THREADS` ([`Context::read_threads`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadRow {
    /// Thread id (in the caller's pid namespace; 0 if not visible there).
    pub tid: u32,
    /// Its process id.
    pub pid: u32,
    /// `PFM_THRFL_*`.
    pub flags: u32,
    /// ns it was monitored and started.
    pub time_enabled: u64,
    /// ns it ran while started.
    pub time_running: u64,
    /// The PMDs [`ThreadRow::values`] holds (bit n: PMD n).
    pub pmd_mask: u64,
    /// Its counts of the PMDs of `pmd_mask`, in PMD order.
    pub values: Vec<u64>,
}

impl ThreadRow {
    /// Decodes a raw row read with `pmd_mask`: its first popcount values
    /// (at most [`PFM_THREAD_VALUES`]) are the PMDs of the mask, in order.
    pub fn from_raw(raw: &PfmThread, pmd_mask: u64) -> Self {
        let n = (pmd_mask.count_ones() as usize).min(PFM_THREAD_VALUES);
        ThreadRow {
            tid: raw.tid,
            pid: raw.pid,
            flags: raw.flags,
            time_enabled: raw.time_enabled,
            time_running: raw.time_running,
            pmd_mask,
            values: raw.values[..n].to_vec(),
        }
    }

    /// The count of PMD `pmd`, if the row holds it.
    pub fn value(&self, pmd: u16) -> Option<u64> {
        if pmd >= 64 || self.pmd_mask & (1u64 << pmd) == 0 {
            return None;
        }
        // The values are in PMD order: PMD `pmd`'s index is the number of
        // mask bits below it.
        let index = (self.pmd_mask & ((1u64 << pmd) - 1)).count_ones() as usize;
        self.values.get(index).copied()
    }

    /// The thread exited: its values are final.
    pub fn has_exited(&self) -> bool {
        self.flags & PFM_THRFL_EXITED != 0
    }

    /// Its monitoring ended at an exec its loader may not see.
    pub fn is_revoked(&self) -> bool {
        self.flags & PFM_THRFL_REVOKED != 0
    }

    /// The thread LOAD named (the first row).
    pub fn is_loaded(&self) -> bool {
        self.flags & PFM_THRFL_LOADED != 0
    }
}

/// What [`Context::read_threads`] returns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadsReport {
    /// One row per thread monitored since LOAD, the loaded thread's first.
    pub rows: Vec<ThreadRow>,
    /// Threads that should have been monitored and could not be.
    pub lost_threads: u32,
}

/// Rows [`Context::read_threads`] makes room for at its first call (then
/// what the previous call needed).
const THREAD_ROWS_GUESS: usize = 16;
/// Calls [`Context::read_threads`] makes before it gives up on a context
/// whose threads multiply faster than it can read them.
const READ_THREADS_TRIES: usize = 8;

/// `PFM_IOC_READ_THREADS` through `call` (the ioctl, or a test's fake):
/// room for `guess` rows first, then, on `E2BIG`, for the `needed` the
/// kernel reported plus some slack, since threads may be created between
/// two calls. Returns the rows and the capacity the next call should start
/// with.
fn read_threads_with(
    pmd_mask: u64,
    set: Option<u16>,
    guess: usize,
    mut call: impl FnMut(&mut PfmThreadsArg, &mut [PfmThread]) -> std::result::Result<i32, i32>,
) -> Result<(ThreadsReport, usize)> {
    let mut cap = guess.max(1);
    for _ in 0..READ_THREADS_TRIES {
        let mut rows = vec![PfmThread::default(); cap];
        let mut arg = PfmThreadsArg {
            pmd_mask,
            count: u32::try_from(cap).map_err(|_| Error::os(Op::ReadThreads, libc::E2BIG))?,
            set: set.unwrap_or(0),
            vflags: if set.is_some() { PFM_VALFL_SET } else { 0 },
            ..Default::default()
        };
        match call(&mut arg, &mut rows) {
            Ok(_) => {
                // `needed` is the number of rows written (never more than
                // the room given on success).
                let n = (arg.needed as usize).min(rows.len());
                let report = ThreadsReport {
                    rows: rows[..n]
                        .iter()
                        .map(|r| ThreadRow::from_raw(r, pmd_mask))
                        .collect(),
                    lost_threads: arg.lost_threads,
                };
                return Ok((report, n.max(THREAD_ROWS_GUESS)));
            }
            Err(libc::E2BIG) if arg.needed as usize > cap => {
                let needed = arg.needed as usize;
                cap = needed + needed / 8 + 4;
            }
            Err(e) => return Err(Error::os(Op::ReadThreads, e)),
        }
    }
    Err(Error::os(Op::ReadThreads, libc::E2BIG))
}

/// Counter values read from a context.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// One 64-bit value per programmed event, in programming order.
    pub values: Vec<u64>,
    /// Nanoseconds the context was loaded and started.
    pub time_enabled: u64,
    /// Nanoseconds the thread ran while started.
    pub time_running: u64,
}

/// The kind of a message read from a context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageKind {
    /// A PMD with `PFM_REGFL_OVFL_NOTIFY` overflowed.
    Overflow,
    /// The monitored thread exited.
    End,
    /// Monitoring ended because the thread gained credentials the loader
    /// may not monitor (a setuid exec); the counts are frozen.
    Revoked,
    /// The sampling buffer is full: the context is MASKED until
    /// [`Context::restart`] (drain it first).
    SmplFull,
    /// A type this library does not know.
    Unknown(u32),
}

/// A message (`struct pfm_msg`) read from a context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message {
    /// What happened.
    pub kind: MessageKind,
    /// The monitored thread.
    pub tid: u32,
    /// The CPU where it happened.
    pub cpu: u16,
    /// Overflow: the event set whose PMDs overflowed (0 for a context
    /// without sets).
    pub set: u16,
    /// Overflow: the user instruction pointer when interrupted.
    pub ip: u64,
    /// Overflow: the PMDs that overflowed (bit n: PMD n).
    pub ovfl_pmds: u64,
    /// Timestamp in ns (`local_clock()`).
    pub tstamp: u64,
}

impl Message {
    /// Decodes the 64 bytes of a `struct pfm_msg`.
    pub fn from_bytes(b: &[u8; 64]) -> Self {
        let u32_at = |o: usize| u32::from_ne_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_ne_bytes(a)
        };
        let kind = match u32_at(0) {
            PFM_MSG_OVFL => MessageKind::Overflow,
            PFM_MSG_END => MessageKind::End,
            PFM_MSG_REVOKED => MessageKind::Revoked,
            PFM_MSG_SMPL_FULL => MessageKind::SmplFull,
            other => MessageKind::Unknown(other),
        };
        Message {
            kind,
            tid: u32_at(4),
            cpu: u16::from_ne_bytes([b[8], b[9]]),
            set: u16::from_ne_bytes([b[10], b[11]]),
            ip: u64_at(16),
            ovfl_pmds: u64_at(24),
            tstamp: u64_at(32),
        }
    }
}

/// Readiness of a context's fd, from `poll`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Readiness {
    /// A message can be read.
    pub readable: bool,
    /// The monitored thread exited and every message was read.
    pub hangup: bool,
    /// POLLERR.
    pub error: bool,
}

impl Readiness {
    pub(crate) fn from_revents(r: i16) -> Self {
        Readiness {
            readable: r & libc::POLLIN != 0,
            hangup: r & libc::POLLHUP != 0,
            error: r & libc::POLLERR != 0,
        }
    }
}

/// A monitoring context: an open file of `/dev/perfmon`, closed on drop.
///
/// The usual flow is [`Context::open`], [`Context::program`],
/// [`Context::load`], [`Context::start`], then [`Context::read`],
/// [`Context::stop`], [`Context::unload`].
#[derive(Debug)]
pub struct Context {
    file: File,
    info: OnceLock<PmuInfo>,
    /// PMD numbers programmed by [`Context::program`], in event order.
    pmds: Vec<u16>,
    /// The counter page [`Context::read_mapped`] reads, mapped at its first
    /// call (`None`: the module offers none; the system call it is).
    page: OnceLock<Option<CounterPage>>,
    /// The rows [`Context::read_threads`] makes room for first: what its
    /// last call needed, so a steady context takes one call.
    rows_hint: AtomicUsize,
}

/// How long [`Context::wait_active`] sleeps between two looks.
const ACTIVE_POLL: Duration = Duration::from_millis(1);

impl Context {
    /// Opens a new context on `/dev/perfmon`.
    pub fn open() -> Result<Self> {
        Self::open_path(DEVICE)
    }

    /// Opens a new context on the device at `path`.
    pub fn open_path(path: &str) -> Result<Self> {
        match OpenOptions::new().read(true).write(true).open(path) {
            Ok(file) => Ok(Context {
                file,
                info: OnceLock::new(),
                pmds: Vec::new(),
                page: OnceLock::new(),
                rows_hint: AtomicUsize::new(THREAD_ROWS_GUESS),
            }),
            Err(e) => {
                let errno = e.raw_os_error().unwrap_or(libc::EIO);
                Err(match errno {
                    libc::ENOENT | libc::ENODEV | libc::ENXIO => Error::NotLoaded {
                        path: path.to_string(),
                        errno,
                    },
                    _ => Error::os(Op::Open, errno),
                })
            }
        }
    }

    /// The PMU model (`PFM_IOC_GET_INFO`, asked once and remembered).
    /// Fails with [`Error::AbiMismatch`] if the module speaks another ABI.
    pub fn info(&self) -> Result<&PmuInfo> {
        if let Some(info) = self.info.get() {
            return Ok(info);
        }
        let raw = self.raw_info()?;
        if raw.abi_version != PFM_ABI_VERSION {
            return Err(Error::AbiMismatch {
                kernel: raw.abi_version,
                library: PFM_ABI_VERSION,
            });
        }
        Ok(self.info.get_or_init(|| PmuInfo::from_raw(&raw)))
    }

    /// The raw `struct pfm_info`, without any check.
    pub fn raw_info(&self) -> Result<PfmInfo> {
        let mut raw = PfmInfo::default();
        sys::ioctl_arg(self.fd(), PFM_IOC_GET_INFO, &mut raw)
            .map_err(|e| Error::os(Op::GetInfo, e))?;
        Ok(raw)
    }

    /// Writes PMCs (`PFM_IOC_WRITE_PMCS`). All or nothing: on a bad element
    /// the error is [`Error::BadRegister`] and each element's `reg_flags`
    /// holds its `PFM_REG_RETFL_*` bits.
    pub fn write_pmcs(&self, regs: &mut [PfmPmc]) -> Result<()> {
        let mut arg = PfmRegsArg::default();
        let res = sys::ioctl_regs(self.fd(), PFM_IOC_WRITE_PMCS, regs, &mut arg);
        regs_result(Op::WritePmcs, res, &arg, |i| {
            regs.get(i).map(|r| (r.reg_num, r.reg_flags))
        })
    }

    /// Writes PMDs (`PFM_IOC_WRITE_PMDS`), all or nothing. A sampling
    /// PMD may randomise its period (`PFM_REGFL_RANDOM` in `reg_flags`,
    /// `reg_random_mask` 2^k - 1 and `reg_random_seed`, 0 for a seed of
    /// the kernel's): each reset then starts a period of P + r, r in
    /// `[0, mask]`, which [`crate::random::periods`] predicts for a seed.
    pub fn write_pmds(&self, regs: &mut [PfmPmd]) -> Result<()> {
        let mut arg = PfmRegsArg::default();
        let res = sys::ioctl_regs(self.fd(), PFM_IOC_WRITE_PMDS, regs, &mut arg);
        regs_result(Op::WritePmds, res, &arg, |i| {
            regs.get(i).map(|r| (r.reg_num, r.reg_flags))
        })
    }

    /// Reads PMDs (`PFM_IOC_READ_PMDS`) into `regs` (their `reg_num` say
    /// which); returns (time_enabled, time_running) in ns. A randomised
    /// PMD's `reg_random_seed` is its generator's state: written back, it
    /// continues the sequence.
    pub fn read_pmds(&self, regs: &mut [PfmPmd]) -> Result<(u64, u64)> {
        let mut arg = PfmRegsArg::default();
        let res = sys::ioctl_regs(self.fd(), PFM_IOC_READ_PMDS, regs, &mut arg);
        regs_result(Op::ReadPmds, res, &arg, |i| {
            regs.get(i).map(|r| (r.reg_num, r.reg_flags))
        })?;
        Ok((arg.time_enabled, arg.time_running))
    }

    /// Programs `events` on the first counters of the model that take an
    /// event code (event i on the i-th of [`PmuInfo::event_counters`]: PMC
    /// n selects it, PMD n starts at 0) and remembers them for
    /// [`Context::read`].
    pub fn program(&mut self, events: &[Event]) -> Result<()> {
        let counters = self.info()?.event_counters();
        if events.is_empty() {
            return Err(Error::Usage("no event to program".to_string()));
        }
        if events.len() > counters.len() {
            return Err(Error::TooManyEvents {
                requested: events.len(),
                counters: counters.len(),
            });
        }
        let nums = &counters[..events.len()];
        let mut pmcs: Vec<PfmPmc> = nums
            .iter()
            .zip(events)
            .map(|(&n, e)| PfmPmc {
                reg_num: n,
                reg_value: e.code,
                ..Default::default()
            })
            .collect();
        self.write_pmcs(&mut pmcs)?;
        let mut pmds: Vec<PfmPmd> = nums
            .iter()
            .map(|&n| PfmPmd {
                reg_num: n,
                ..Default::default()
            })
            .collect();
        self.write_pmds(&mut pmds)?;
        self.pmds = nums.to_vec();
        Ok(())
    }

    /// The PMD numbers programmed by [`Context::program`], in event order.
    pub fn programmed(&self) -> &[u16] {
        &self.pmds
    }

    /// Reads the programmed counters (see [`Context::program`]).
    pub fn read(&self) -> Result<Counts> {
        if self.pmds.is_empty() {
            return Err(Error::Usage("no counter programmed".to_string()));
        }
        let mut regs: Vec<PfmPmd> = self
            .pmds
            .iter()
            .map(|&n| PfmPmd {
                reg_num: n,
                ..Default::default()
            })
            .collect();
        let (time_enabled, time_running) = self.read_pmds(&mut regs)?;
        Ok(Counts {
            values: regs.iter().map(|r| r.reg_value).collect(),
            time_enabled,
            time_running,
        })
    }

    /// Attaches the context to thread `tid` (`PFM_IOC_LOAD`; 0 = the calling
    /// thread). Another thread that is blocked (asleep, stopped) is
    /// attached in place; one that runs installs the context when it next
    /// returns to user mode (see [`Context::wait_active`]).
    pub fn load(&self, tid: u32) -> Result<()> {
        self.load_in_set(tid, 0)
    }

    /// [`Context::load`], then [`Context::start`], in one call
    /// (`PFM_LOAD_START`). [`Context::unload`] stops.
    pub fn load_and_start(&self, tid: u32) -> Result<()> {
        self.load_raw(tid, PFM_LOAD_START, 0)
    }

    /// A new context programmed as this one is: its flags, registers and
    /// event sets, as they are now, and nothing else (`PFM_IOC_CLONE`;
    /// this context must be UNLOADED: `EBADFD`). A tool that attaches to
    /// thread after thread keeps one programmed context and clones it, with
    /// no `open` of the device and no register writes.
    pub fn clone_programmed(&self) -> Result<Self> {
        let mut arg = PfmClone {
            flags: PFM_CLONE_CLOEXEC,
            ..Default::default()
        };
        let fd = sys::ioctl_arg(self.fd(), PFM_IOC_CLONE, &mut arg)
            .map_err(|e| Error::os(Op::Clone, e))?;
        // SAFETY: PFM_IOC_CLONE returned a new descriptor, owned by no one else.
        let file = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        let info = OnceLock::new();
        if let Some(i) = self.info.get() {
            let _ = info.set(i.clone());
        }
        Ok(Context {
            file,
            info,
            pmds: self.pmds.clone(),
            page: OnceLock::new(),
            rows_hint: AtomicUsize::new(THREAD_ROWS_GUESS),
        })
    }

    /// [`Context::load`], monitoring starting in event set `set` (which
    /// must exist: `EINVAL` otherwise; see [`Context::create_sets`]).
    pub fn load_in_set(&self, tid: u32, set: u16) -> Result<()> {
        self.load_raw(tid, 0, set)
    }

    /// Attaches the context to every thread of process `pid`
    /// (`PFM_IOC_LOAD` with `PFM_LOAD_PROCESS`), and, as with
    /// `PFM_CTXFL_INHERIT`, which it implies, to every thread and process
    /// they create from then on. Reads return the totals;
    /// [`Context::read_threads`] each thread's counts; with event sets,
    /// every thread multiplexes them on its own running time (reads add
    /// each set's counts and times over the threads); a mapped page shows the loaded
    /// thread only.
    pub fn load_process(&self, pid: u32) -> Result<()> {
        self.load_raw(pid, PFM_LOAD_PROCESS, 0)
    }

    fn load_raw(&self, tid: u32, flags: u32, set: u16) -> Result<()> {
        let mut arg = PfmLoad {
            tid,
            flags,
            load_set: set,
            ..Default::default()
        };
        sys::ioctl_arg(self.fd(), PFM_IOC_LOAD, &mut arg)
            .map_err(|e| Error::os_tid(Op::Load, e, tid))?;
        Ok(())
    }

    /// Each thread's counts of the PMDs of `pmd_mask` (at most
    /// [`PFM_THREAD_VALUES`] PMDs), one row per thread monitored since LOAD,
    /// alive (read live) or exited, the loaded thread's first, and the
    /// number of threads that could not be monitored
    /// (`PFM_IOC_READ_THREADS`). Without inheritance there is one row; a
    /// context never loaded has none. Makes room for as many rows as the
    /// previous call needed and calls again, with room for what the kernel
    /// says is needed, if threads were created meanwhile.
    pub fn read_threads(&self, pmd_mask: u64) -> Result<ThreadsReport> {
        self.read_threads_raw(pmd_mask, None)
    }

    /// [`Context::read_threads`] of event set `set`: each row holds the
    /// set's values and the set's `time_enabled` and `time_running` in its
    /// thread (as [`Context::read_set_values`] reads them), from which a
    /// multiplexed count is estimated thread by thread.
    pub fn read_threads_in_set(&self, set: u16, pmd_mask: u64) -> Result<ThreadsReport> {
        self.read_threads_raw(pmd_mask, Some(set))
    }

    fn read_threads_raw(&self, pmd_mask: u64, set: Option<u16>) -> Result<ThreadsReport> {
        let guess = self.rows_hint.load(Ordering::Relaxed);
        let (report, next) = read_threads_with(pmd_mask, set, guess, |arg, rows| {
            sys::ioctl_threads(self.fd(), arg, rows)
        })?;
        self.rows_hint.store(next, Ordering::Relaxed);
        Ok(report)
    }

    /// [`Context::read_threads`] of the counters [`Context::program`]
    /// programmed: each row's [`ThreadRow::value`] of a PMD of
    /// [`Context::programmed`].
    pub fn read_threads_programmed(&self) -> Result<ThreadsReport> {
        if self.pmds.is_empty() {
            return Err(Error::Usage("no counter programmed".to_string()));
        }
        let mask = self
            .pmds
            .iter()
            .filter(|&&n| n < 64)
            .fold(0u64, |m, &n| m | (1u64 << n));
        self.read_threads(mask)
    }

    /// Detaches the context (`PFM_IOC_UNLOAD`).
    pub fn unload(&self) -> Result<()> {
        self.simple(PFM_IOC_UNLOAD, Op::Unload)
    }

    /// Starts counting (`PFM_IOC_START`).
    pub fn start(&self) -> Result<()> {
        self.simple(PFM_IOC_START, Op::Start)
    }

    /// Stops counting (`PFM_IOC_STOP`).
    pub fn stop(&self) -> Result<()> {
        self.simple(PFM_IOC_STOP, Op::Stop)
    }

    /// Resumes after a notifying overflow (`PFM_IOC_RESTART`).
    pub fn restart(&self) -> Result<()> {
        self.simple(PFM_IOC_RESTART, Op::Restart)
    }

    fn simple(&self, request: u32, op: Op) -> Result<()> {
        sys::ioctl_none(self.fd(), request).map_err(|e| Error::os(op, e))?;
        Ok(())
    }

    /// Sets the context flags (`PFM_IOC_SET_FLAGS`, `PFM_CTXFL_*`) while
    /// UNLOADED: `PFM_CTXFL_NOTIFY_BLOCK`, `PFM_CTXFL_NO_MSG`,
    /// `PFM_CTXFL_INHERIT` (follow the threads and processes the monitored
    /// threads create after LOAD; reads return the totals, see
    /// [`Context::read_threads`]) and `PFM_CTXFL_START_ON_EXEC` (LOAD arms
    /// it, the target's next successful exec starts counting, as START
    /// would). A module that predates a flag refuses it with `EINVAL`.
    pub fn set_flags(&self, flags: u32) -> Result<()> {
        let mut arg = PfmCtxFlags {
            flags,
            ..Default::default()
        };
        sys::ioctl_arg(self.fd(), PFM_IOC_SET_FLAGS, &mut arg)
            .map_err(|e| Error::os(Op::SetFlags, e))?;
        Ok(())
    }

    /// Reads the PMDs of `pmd_mask` with the cheap `PFM_IOC_READ_VALUES`
    /// (values and times only, in PMD order).
    pub fn read_values(&self, pmd_mask: u64) -> Result<Counts> {
        let mut values = vec![0u64; pmd_mask.count_ones() as usize];
        let mut arg = PfmValues {
            pmd_mask,
            ..Default::default()
        };
        sys::ioctl_values(self.fd(), &mut arg, &mut values)
            .map_err(|e| Error::os(Op::ReadValues, e))?;
        Ok(Counts {
            values,
            time_enabled: arg.time_enabled,
            time_running: arg.time_running,
        })
    }

    /// Reads the PMDs of `pmd_mask` of event set `set` with
    /// `PFM_IOC_READ_VALUES` (`PFM_VALFL_SET`): the set's values in PMD
    /// order, and the set's times: `time_enabled` is the thread's running
    /// time while the context counted since LOAD, `time_running` the part
    /// of it the set was active, so `count × time_enabled / time_running`
    /// estimates what the set's events would have counted alone.
    pub fn read_set_values(&self, set: u16, pmd_mask: u64) -> Result<Counts> {
        let mut values = vec![0u64; pmd_mask.count_ones() as usize];
        let mut arg = PfmValues {
            pmd_mask,
            set,
            vflags: PFM_VALFL_SET,
            ..Default::default()
        };
        sys::ioctl_values(self.fd(), &mut arg, &mut values)
            .map_err(|e| Error::os(Op::ReadValues, e))?;
        Ok(Counts {
            values,
            time_enabled: arg.time_enabled,
            time_running: arg.time_running,
        })
    }

    /// Creates event sets, or changes the flags of existing ones (set 0's
    /// included), while the context is UNLOADED (`PFM_IOC_CREATE_SETS`).
    /// All or nothing: on a bad element the error is [`Error::BadSet`].
    /// On success each `set_timeout` holds the effective timeout (at least
    /// [`PFM_SET_MIN_TIMEOUT`]). Registers go into a set by their
    /// `reg_set`.
    pub fn create_sets(&self, descs: &mut [PfmSetdesc]) -> Result<()> {
        let mut arg = PfmSetsArg::default();
        let res = sys::ioctl_sets(self.fd(), PFM_IOC_CREATE_SETS, descs, &mut arg);
        sets_result(Op::CreateSets, res, &arg, |i| {
            descs.get(i).map(|d| d.set_id)
        })
    }

    /// Deletes event sets and their registers while the context is
    /// UNLOADED (`PFM_IOC_DELETE_SETS`), all or nothing; set 0 cannot go.
    pub fn delete_sets(&self, ids: &[u16]) -> Result<()> {
        let mut ids = ids.to_vec();
        let mut arg = PfmSetsArg::default();
        let res = sys::ioctl_sets(self.fd(), PFM_IOC_DELETE_SETS, &mut ids, &mut arg);
        sets_result(Op::DeleteSets, res, &arg, |i| ids.get(i).copied())
    }

    /// What `PFM_IOC_GETINFO_SETS` says of the sets `ids`, in that order:
    /// flags, effective timeout, activations, times and the cause of the
    /// last switch away (readable after UNLOAD too).
    pub fn sets_info(&self, ids: &[u16]) -> Result<Vec<PfmSetinfo>> {
        let mut infos: Vec<PfmSetinfo> = ids
            .iter()
            .map(|&set_id| PfmSetinfo {
                set_id,
                ..Default::default()
            })
            .collect();
        let mut arg = PfmSetsArg::default();
        let res = sys::ioctl_sets(self.fd(), PFM_IOC_GETINFO_SETS, &mut infos, &mut arg);
        sets_result(Op::GetinfoSets, res, &arg, |i| ids.get(i).copied())?;
        Ok(infos)
    }

    /// Maps the context's counter page (`mmap` of the fd): reads without a
    /// system call ([`CounterPage::read`]).
    pub fn map_counter_page(&self) -> Result<CounterPage> {
        CounterPage::map(self.fd()).map_err(|e| Error::os(Op::Mmap, e))
    }

    /// Gives the context a sampling buffer of `data_pages` pages (a power
    /// of two) in which every PMD overflow writes an entry
    /// (`PFM_IOC_SMPL_SETUP`, while UNLOADED, once): `smpl_pmds[n]`, the
    /// PMDs whose values PMD n's entries record; `drop`, count the entries
    /// that do not fit instead of masking the context until RESTART;
    /// `watermark`, the unread bytes that make [`Context::poll`] readable
    /// (0: half the buffer). Map it with [`Context::map_samples`].
    pub fn setup_sampling(
        &self,
        data_pages: u32,
        smpl_pmds: &[(u16, u64)],
        drop: bool,
        watermark: u32,
    ) -> Result<()> {
        let mut s = PfmSmplSetup {
            data_pages,
            flags: if drop { PFM_SMPL_DROP } else { 0 },
            watermark,
            ..Default::default()
        };
        for &(pmd, mask) in smpl_pmds {
            let slot = s
                .smpl_pmds
                .get_mut(pmd as usize)
                .ok_or(Error::os(Op::SmplSetup, libc::EINVAL))?;
            *slot = mask;
        }
        self.setup_sampling_with(&s)
    }

    /// Sets up the sampling buffer from the ABI's whole argument: for
    /// what [`Context::setup_sampling`] does not say, such as call chains
    /// (`chain_depth`).
    pub fn setup_sampling_with(&self, setup: &PfmSmplSetup) -> Result<()> {
        let mut s = *setup;
        sys::ioctl_arg(self.fd(), PFM_IOC_SMPL_SETUP, &mut s)
            .map_err(|e| Error::os(Op::SmplSetup, e))?;
        Ok(())
    }

    /// Maps the sampling buffer set up with `data_pages` pages (one
    /// mapping at a time: `EBUSY`).
    pub fn map_samples(&self, data_pages: u32) -> Result<SampleBuffer> {
        SampleBuffer::map(self.fd(), data_pages as usize).map_err(|e| Error::os(Op::Mmap, e))
    }

    /// Reads the PMDs of `pmd_mask` as [`Context::read_values`] does, from
    /// the counter page when the page can give the same answer (the caller
    /// is the monitored thread, running, or the context is loaded and not
    /// counting), with `PFM_IOC_READ_VALUES` otherwise. The page is mapped
    /// at the first call.
    pub fn read_mapped(&self, pmd_mask: u64) -> Result<Counts> {
        let page = self.page.get_or_init(|| CounterPage::map(self.fd()).ok());
        if let Some(page) = page {
            let mut values = vec![0u64; pmd_mask.count_ones() as usize];
            if let Some(r) = page.read_into(pmd_mask, &mut values) {
                let all = r.pmd_mask() & pmd_mask == pmd_mask;
                // READ_VALUES reads set 0; the page shows the resident
                // set, another one while event sets take turns.
                if r.exact() && r.state() == PFM_STATE_LOADED && all && r.set() == 0 {
                    return Ok(Counts {
                        values,
                        time_enabled: r.time_enabled(),
                        time_running: r.time_running(),
                    });
                }
            }
        }
        self.read_values(pmd_mask)
    }

    /// The context's state (`PFM_IOC_GET_STATE`).
    pub fn state(&self) -> Result<State> {
        let mut raw = PfmCtxInfo::default();
        sys::ioctl_arg(self.fd(), PFM_IOC_GET_STATE, &mut raw)
            .map_err(|e| Error::os(Op::GetState, e))?;
        Ok(State {
            state: CtxState::from_raw(raw.state),
            tid: raw.tid,
            flags: raw.flags,
            status: raw.status,
            used_pmds: raw.used_pmds,
            threads: raw.threads,
            lost_threads: raw.lost_threads,
        })
    }

    /// Waits until the target thread has installed the context (or has
    /// exited), looking every millisecond, for at most `timeout`.
    pub fn wait_active(&self, timeout: Duration) -> Result<State> {
        let deadline = Instant::now() + timeout;
        loop {
            let st = self.state()?;
            if st.is_active() || st.has_exited() {
                return Ok(st);
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout {
                    op: Op::Load,
                    what: format!(
                        "thread {} to install the context ({} ms)",
                        st.tid,
                        timeout.as_millis()
                    ),
                });
            }
            std::thread::sleep(ACTIVE_POLL);
        }
    }

    /// Sets or clears `O_NONBLOCK`, which [`Context::messages`] honours.
    pub fn set_nonblocking(&self, on: bool) -> Result<()> {
        sys::set_nonblocking(self.fd(), on).map_err(|e| Error::os(Op::Fcntl, e))
    }

    /// Waits up to `timeout` (`None`: forever) for a message or a hangup.
    /// EINTR is reported as an error of kind `Interrupted`.
    pub fn poll(&self, timeout: Option<Duration>) -> Result<Readiness> {
        let revents =
            sys::poll(&[(self.fd(), libc::POLLIN)], timeout).map_err(|e| Error::os(Op::Poll, e))?;
        Ok(Readiness::from_revents(
            revents.first().copied().unwrap_or(0),
        ))
    }

    /// Reads one message. `Ok(None)` at end of file (the thread exited and
    /// every message was read) or, on a non-blocking context, when none is
    /// queued. On a blocking context it waits for one.
    pub fn read_message(&self) -> Result<Option<Message>> {
        let mut buf = [0u8; 64];
        loop {
            match (&self.file).read(&mut buf) {
                Ok(0) => return Ok(None),
                Ok(64) => return Ok(Some(Message::from_bytes(&buf))),
                Ok(n) => return Err(Error::ShortMessage { len: n }),
                Err(e) => match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EAGAIN) => return Ok(None),
                    Some(errno) => return Err(Error::os(Op::ReadMessage, errno)),
                    None => return Err(Error::os(Op::ReadMessage, libc::EIO)),
                },
            }
        }
    }

    /// Waits up to `timeout` for a message and reads it; `Ok(None)` on
    /// timeout or end of file.
    pub fn next_message(&self, timeout: Option<Duration>) -> Result<Option<Message>> {
        let ready = self.poll(timeout)?;
        if !ready.readable {
            return Ok(None);
        }
        let was_nonblocking =
            sys::is_nonblocking(self.fd()).map_err(|e| Error::os(Op::Fcntl, e))?;
        self.set_nonblocking(true)?;
        let msg = self.read_message();
        self.set_nonblocking(was_nonblocking)?;
        msg
    }

    /// An iterator over the messages of this context. On a blocking context
    /// each step waits for the next message and the iteration ends at end of
    /// file; on a non-blocking one it ends when the queue is empty.
    pub fn messages(&self) -> Messages<'_> {
        Messages {
            ctx: self,
            done: false,
        }
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

/// Maps the result of a register array call to this crate's errors.
fn regs_result(
    op: Op,
    res: std::result::Result<i32, i32>,
    arg: &PfmRegsArg,
    elem: impl Fn(usize) -> Option<(u16, u32)>,
) -> Result<()> {
    match res {
        Ok(_) => Ok(()),
        Err(libc::EINVAL) => {
            let index = arg.done as usize;
            match elem(index) {
                Some((reg_num, flags)) if flags & PFM_REG_RETFL_MASK != 0 => {
                    Err(Error::BadRegister {
                        op,
                        index,
                        reg_num,
                        flags,
                    })
                }
                _ => Err(Error::os(op, libc::EINVAL)),
            }
        }
        Err(e) => Err(Error::os(op, e)),
    }
}

/// Maps the result of an event set call to this crate's errors: `EINVAL`
/// with `done` naming an element is [`Error::BadSet`] (a count of 0, which
/// the kernel refuses as a whole, is a plain `EINVAL`; a count above
/// `PFM_MAX_SETS` is `E2BIG`).
fn sets_result(
    op: Op,
    res: std::result::Result<i32, i32>,
    arg: &PfmSetsArg,
    set_id: impl Fn(usize) -> Option<u16>,
) -> Result<()> {
    match res {
        Ok(_) => Ok(()),
        Err(libc::EINVAL) if (1..=PFM_MAX_SETS as u32).contains(&arg.count) => {
            let index = arg.done as usize;
            match set_id(index) {
                Some(set_id) => Err(Error::BadSet { op, index, set_id }),
                None => Err(Error::os(op, libc::EINVAL)),
            }
        }
        Err(e) => Err(Error::os(op, e)),
    }
}

impl AsFd for Context {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl AsRawFd for Context {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

/// Iterator over a context's messages; see [`Context::messages`].
#[derive(Debug)]
pub struct Messages<'a> {
    ctx: &'a Context,
    done: bool,
}

impl Iterator for Messages<'_> {
    type Item = Result<Message>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.ctx.read_message() {
            Ok(Some(m)) => Some(Ok(m)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_messages() {
        let mut b = [0u8; 64];
        b[0..4].copy_from_slice(&PFM_MSG_END.to_ne_bytes());
        b[4..8].copy_from_slice(&1234u32.to_ne_bytes());
        b[8..10].copy_from_slice(&1u16.to_ne_bytes());
        b[10..12].copy_from_slice(&3u16.to_ne_bytes());
        b[16..24].copy_from_slice(&0xdead_beefu64.to_ne_bytes());
        b[24..32].copy_from_slice(&0b101u64.to_ne_bytes());
        b[32..40].copy_from_slice(&99u64.to_ne_bytes());
        let m = Message::from_bytes(&b);
        assert_eq!(
            m,
            Message {
                kind: MessageKind::End,
                tid: 1234,
                cpu: 1,
                set: 3,
                ip: 0xdead_beef,
                ovfl_pmds: 0b101,
                tstamp: 99
            }
        );
        // The offsets used above are those of struct pfm_msg.
        assert_eq!(std::mem::offset_of!(PfmMsg, tid), 4);
        assert_eq!(std::mem::offset_of!(PfmMsg, cpu), 8);
        // The set follows the CPU (`pad` until the field is named `set`).
        assert_eq!(std::mem::offset_of!(PfmMsg, reserved0), 12);
        assert_eq!(std::mem::offset_of!(PfmMsg, ip), 16);
        assert_eq!(std::mem::offset_of!(PfmMsg, ovfl_pmds), 24);
        assert_eq!(std::mem::offset_of!(PfmMsg, tstamp), 32);
    }

    #[test]
    fn bad_set_maps_done() {
        let arg = PfmSetsArg {
            count: 2,
            done: 1,
            ..Default::default()
        };
        let ids = [1u16, 16];
        let err = sets_result(Op::CreateSets, Err(libc::EINVAL), &arg, |i| {
            ids.get(i).copied()
        })
        .unwrap_err();
        assert_eq!(
            err,
            Error::BadSet {
                op: Op::CreateSets,
                index: 1,
                set_id: 16
            }
        );
        assert_eq!(err.errno(), Some(libc::EINVAL));
        // A count the kernel refuses as a whole: a plain EINVAL.
        let whole = PfmSetsArg::default();
        let err = sets_result(Op::DeleteSets, Err(libc::EINVAL), &whole, |_| Some(1)).unwrap_err();
        assert_eq!(err, Error::os(Op::DeleteSets, libc::EINVAL));
        let err = sets_result(Op::CreateSets, Err(libc::EBADFD), &arg, |_| None).unwrap_err();
        assert_eq!(err, Error::os(Op::CreateSets, libc::EBADFD));
    }

    #[test]
    fn states_decode() {
        assert_eq!(CtxState::from_raw(PFM_STATE_LOADED), CtxState::Loaded);
        assert_eq!(CtxState::from_raw(77), CtxState::Unknown(77));
        let st = State {
            state: CtxState::Loaded,
            tid: 1,
            flags: 0,
            status: PFM_CTXST_ACTIVE | PFM_CTXST_STARTED,
            used_pmds: 0,
            threads: 1,
            lost_threads: 0,
        };
        assert!(st.is_active() && st.is_started() && !st.has_exited());
        assert!(!st.is_exec_armed() && !st.inherits());
        let armed = State {
            flags: PFM_CTXFL_INHERIT | PFM_CTXFL_START_ON_EXEC,
            status: PFM_CTXST_EXEC_ARMED,
            ..st
        };
        assert!(armed.is_exec_armed() && armed.inherits() && !armed.is_started());
    }

    #[test]
    fn missing_device_says_module_not_loaded() {
        let err = Context::open_path("/nonexistent/perfmon").unwrap_err();
        assert!(matches!(err, Error::NotLoaded { .. }), "{err:?}");
        assert!(err.to_string().starts_with("perfmon module not loaded"));
    }

    #[test]
    fn bad_register_maps_retflags() {
        let arg = PfmRegsArg {
            done: 1,
            ..Default::default()
        };
        let elems = [(0u16, 0u32), (7, PFM_REG_RETFL_NOTAVAIL)];
        let err = regs_result(Op::WritePmcs, Err(libc::EINVAL), &arg, |i| {
            elems.get(i).copied()
        })
        .unwrap_err();
        assert_eq!(
            err,
            Error::BadRegister {
                op: Op::WritePmcs,
                index: 1,
                reg_num: 7,
                flags: PFM_REG_RETFL_NOTAVAIL
            }
        );
        // EINVAL without per-element flags (e.g. a reserved field of the
        // argument itself) stays a plain EINVAL.
        let err = regs_result(
            Op::WritePmcs,
            Err(libc::EINVAL),
            &PfmRegsArg::default(),
            |i| [(0u16, 0u32)].get(i).copied(),
        )
        .unwrap_err();
        assert_eq!(err, Error::os(Op::WritePmcs, libc::EINVAL));
    }

    /// A raw row of thread `tid` whose values are `tid * 100 + i`.
    fn raw_row(tid: u32, flags: u32) -> PfmThread {
        let mut r = PfmThread {
            tid,
            pid: 7,
            flags,
            time_enabled: 10,
            time_running: 9,
            ..Default::default()
        };
        for (i, v) in r.values.iter_mut().enumerate() {
            *v = u64::from(tid) * 100 + i as u64;
        }
        r
    }

    #[test]
    fn thread_rows_decode_in_pmd_order() {
        // PMDs 1, 3 and 6: the row's first three values, in that order.
        let mask = (1 << 1) | (1 << 3) | (1 << 6);
        let row = ThreadRow::from_raw(&raw_row(42, PFM_THRFL_EXITED), mask);
        assert_eq!(row.values, vec![4200, 4201, 4202]);
        assert_eq!(
            (row.value(1), row.value(3), row.value(6)),
            (Some(4200), Some(4201), Some(4202))
        );
        assert_eq!(
            (row.value(0), row.value(2), row.value(63)),
            (None, None, None)
        );
        assert_eq!(row.value(64), None);
        assert_eq!(
            (row.tid, row.pid, row.time_enabled, row.time_running),
            (42, 7, 10, 9)
        );
        assert!(row.has_exited() && !row.is_revoked() && !row.is_loaded());
        let loaded = ThreadRow::from_raw(&raw_row(1, PFM_THRFL_LOADED | PFM_THRFL_REVOKED), 1);
        assert!(loaded.is_loaded() && loaded.is_revoked() && !loaded.has_exited());
        // A mask of more PMDs than a row holds keeps the row's 16 values.
        let all = ThreadRow::from_raw(&raw_row(1, 0), u64::MAX);
        assert_eq!(all.values.len(), PFM_THREAD_VALUES);
        // PMD 63's index is 63, past the 16 values: none.
        assert_eq!(all.value(63), None);
    }

    /// A fake READ_THREADS over `threads` rows that grow by `growth` at
    /// every call (threads created between two calls), as the kernel
    /// answers: `needed` always, `E2BIG` and nothing written when short.
    fn fake<'a>(
        threads: &'a std::cell::Cell<u32>,
        growth: u32,
        calls: &'a std::cell::Cell<u32>,
    ) -> impl FnMut(&mut PfmThreadsArg, &mut [PfmThread]) -> std::result::Result<i32, i32> + 'a
    {
        move |arg, rows| {
            calls.set(calls.get() + 1);
            assert_eq!(arg.count as usize, rows.len(), "count is the room given");
            assert_eq!((arg.flags, arg.vflags, arg.reserved), (0, 0, [0; 2]));
            let n = threads.get();
            threads.set(n + growth);
            arg.needed = n;
            arg.lost_threads = 3;
            if n > arg.count {
                return Err(libc::E2BIG);
            }
            for (i, r) in rows.iter_mut().take(n as usize).enumerate() {
                *r = raw_row(i as u32 + 1, if i == 0 { PFM_THRFL_LOADED } else { 0 });
            }
            Ok(0)
        }
    }

    #[test]
    fn read_threads_grows_to_needed_on_e2big() {
        use std::cell::Cell;
        // Enough room: one call.
        let (threads, calls) = (Cell::new(5), Cell::new(0));
        let (r, next) = read_threads_with(0b11, None, 16, fake(&threads, 0, &calls)).unwrap();
        assert_eq!((r.rows.len(), r.lost_threads, calls.get()), (5, 3, 1));
        assert!(r.rows[0].is_loaded());
        assert_eq!(r.rows[4].tid, 5);
        assert_eq!(r.rows[4].values, vec![500, 501]);
        assert_eq!(
            next, THREAD_ROWS_GUESS,
            "the guess never shrinks below the default"
        );
        // 100 threads, room for 16: E2BIG, then room for 100 and some.
        let (threads, calls) = (Cell::new(100), Cell::new(0));
        let (r, next) = read_threads_with(1, None, 16, fake(&threads, 0, &calls)).unwrap();
        assert_eq!((r.rows.len(), calls.get(), next), (100, 2, 100));
        // Threads created between the calls: the slack absorbs a few...
        let (threads, calls) = (Cell::new(100), Cell::new(0));
        let (r, _) = read_threads_with(1, None, 16, fake(&threads, 10, &calls)).unwrap();
        assert_eq!((r.rows.len(), calls.get()), (110, 2));
        // ... and more calls follow a faster growth, until it fits.
        let (threads, calls) = (Cell::new(100), Cell::new(0));
        let (r, _) = read_threads_with(1, None, 16, fake(&threads, 30, &calls)).unwrap();
        assert!(
            calls.get() > 2 && r.rows.len() >= 130,
            "{} calls",
            calls.get()
        );
        // A context that outgrows every try: E2BIG, as an error of the call.
        let (threads, calls) = (Cell::new(100), Cell::new(0));
        let err = read_threads_with(1, None, 1, fake(&threads, 100_000, &calls)).unwrap_err();
        assert_eq!(err, Error::os(Op::ReadThreads, libc::E2BIG));
        assert_eq!(calls.get() as usize, READ_THREADS_TRIES);
        assert!(
            err.to_string().starts_with("PFM_IOC_READ_THREADS:"),
            "{err}"
        );
        // A never-loaded context: no row.
        let (threads, calls) = (Cell::new(0), Cell::new(0));
        let (r, _) = read_threads_with(1, None, 16, fake(&threads, 0, &calls)).unwrap();
        assert!(r.rows.is_empty());
        // Other errnos are the call's, at once.
        let err = read_threads_with(0, None, 16, |_, _| Err(libc::EINVAL)).unwrap_err();
        assert_eq!(err, Error::os(Op::ReadThreads, libc::EINVAL));
        // E2BIG without a larger `needed` is not retried (nothing to grow to).
        let mut n = 0;
        let err = read_threads_with(1, None, 16, |arg, _| {
            n += 1;
            arg.needed = 4;
            Err(libc::E2BIG)
        })
        .unwrap_err();
        assert_eq!((err.errno(), n), (Some(libc::E2BIG), 1));
    }
}
