//! Errors: every failure says which operation failed, what the errno means
//! for that operation, and, where it helps, what the user can do about it.

use std::fmt;

use crate::abi::{PFM_REG_RETFL_EINVAL, PFM_REG_RETFL_NOSET, PFM_REG_RETFL_NOTAVAIL};

/// The operation that failed: an ioctl of `/dev/perfmon`, or one of the
/// system calls around it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Op {
    /// `open("/dev/perfmon")`.
    Open,
    /// `PFM_IOC_GET_INFO`.
    GetInfo,
    /// `PFM_IOC_WRITE_PMCS`.
    WritePmcs,
    /// `PFM_IOC_WRITE_PMDS`.
    WritePmds,
    /// `PFM_IOC_READ_PMDS`.
    ReadPmds,
    /// `PFM_IOC_READ_VALUES`.
    ReadValues,
    /// `PFM_IOC_LOAD`.
    Load,
    /// `PFM_IOC_UNLOAD`.
    Unload,
    /// `PFM_IOC_START`.
    Start,
    /// `PFM_IOC_STOP`.
    Stop,
    /// `PFM_IOC_RESTART`.
    Restart,
    /// `PFM_IOC_GET_STATE`.
    GetState,
    /// `PFM_IOC_SET_FLAGS`.
    SetFlags,
    /// `PFM_IOC_CREATE_SETS`.
    CreateSets,
    /// `PFM_IOC_DELETE_SETS`.
    DeleteSets,
    /// `PFM_IOC_GETINFO_SETS`.
    GetinfoSets,
    /// `PFM_IOC_READ_THREADS`.
    ReadThreads,
    /// `PFM_IOC_CLONE`.
    Clone,
    /// `PFM_IOC_SMPL_SETUP`.
    SmplSetup,
    /// `read()` of a message from the context.
    ReadMessage,
    /// `poll()` on the context.
    Poll,
    /// `fcntl()` on the context (non-blocking mode).
    Fcntl,
    /// `mmap()` of the context's counter page.
    Mmap,
    /// `perf_event_open()`.
    PerfEventOpen,
    /// A perf_event ioctl (enable, disable, reset).
    PerfIoctl,
    /// `read()` of a perf_event counter.
    PerfRead,
    /// Creating the process of a command (`pipe`, `fork`).
    Spawn,
    /// Executing a command.
    Exec,
    /// Waiting for a command (`wait4`).
    Wait,
    /// `sched_setaffinity()`.
    Affinity,
    /// Sending a signal.
    Kill,
    /// Setting up signal handling (`signalfd`).
    Signal,
}

impl Op {
    /// The name a user would look up: the ioctl's macro name or the call.
    pub fn name(self) -> &'static str {
        match self {
            Op::Open => "open",
            Op::GetInfo => "PFM_IOC_GET_INFO",
            Op::WritePmcs => "PFM_IOC_WRITE_PMCS",
            Op::WritePmds => "PFM_IOC_WRITE_PMDS",
            Op::ReadPmds => "PFM_IOC_READ_PMDS",
            Op::ReadValues => "PFM_IOC_READ_VALUES",
            Op::Load => "PFM_IOC_LOAD",
            Op::Unload => "PFM_IOC_UNLOAD",
            Op::Start => "PFM_IOC_START",
            Op::Stop => "PFM_IOC_STOP",
            Op::Restart => "PFM_IOC_RESTART",
            Op::GetState => "PFM_IOC_GET_STATE",
            Op::SetFlags => "PFM_IOC_SET_FLAGS",
            Op::CreateSets => "PFM_IOC_CREATE_SETS",
            Op::DeleteSets => "PFM_IOC_DELETE_SETS",
            Op::GetinfoSets => "PFM_IOC_GETINFO_SETS",
            Op::ReadThreads => "PFM_IOC_READ_THREADS",
            Op::Clone => "PFM_IOC_CLONE",
            Op::SmplSetup => "PFM_IOC_SMPL_SETUP",
            Op::ReadMessage => "read",
            Op::Poll => "poll",
            Op::Fcntl => "fcntl",
            Op::Mmap => "mmap",
            Op::PerfEventOpen => "perf_event_open",
            Op::PerfIoctl => "perf_event ioctl",
            Op::PerfRead => "perf_event read",
            Op::Spawn => "fork",
            Op::Exec => "execve",
            Op::Wait => "wait4",
            Op::Affinity => "sched_setaffinity",
            Op::Kill => "kill",
            Op::Signal => "signalfd",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What an errno means, in the terms of this ABI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// EACCES: not allowed to monitor that thread (or to open the device).
    PermissionDenied,
    /// EPERM: the thread cannot be monitored (kernel thread, or the caller
    /// lacks a capability).
    NotPermitted,
    /// ESRCH: no such thread.
    NoSuchThread,
    /// EBUSY: the thread already has a context (or the resource is in use).
    Busy,
    /// EBADFD: the context is in the wrong state for the operation.
    WrongState,
    /// EINVAL: an argument, register number, value or flag is invalid.
    InvalidArgument,
    /// E2BIG: too many elements in one call.
    TooBig,
    /// EFAULT: a bad user pointer.
    BadAddress,
    /// ENOTTY: the device does not know this ioctl.
    NotSupported,
    /// EAGAIN: nothing to read without blocking.
    WouldBlock,
    /// EINTR: interrupted by a signal.
    Interrupted,
    /// ENOENT, ENODEV, ENXIO on open: no perfmon device.
    NoDevice,
    /// Anything else.
    Other,
}

impl ErrorKind {
    /// Classifies an errno.
    pub fn from_errno(errno: i32) -> Self {
        match errno {
            libc::EACCES => ErrorKind::PermissionDenied,
            libc::EPERM => ErrorKind::NotPermitted,
            libc::ESRCH => ErrorKind::NoSuchThread,
            libc::EBUSY => ErrorKind::Busy,
            libc::EBADFD => ErrorKind::WrongState,
            libc::EINVAL => ErrorKind::InvalidArgument,
            libc::E2BIG => ErrorKind::TooBig,
            libc::EFAULT => ErrorKind::BadAddress,
            libc::ENOTTY => ErrorKind::NotSupported,
            libc::EAGAIN => ErrorKind::WouldBlock,
            libc::EINTR => ErrorKind::Interrupted,
            libc::ENOENT | libc::ENODEV | libc::ENXIO => ErrorKind::NoDevice,
            _ => ErrorKind::Other,
        }
    }
}

/// An error of this library. `Display` reads like a tool's message.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// `/dev/perfmon` does not exist or has no driver behind it.
    NotLoaded {
        /// The device path tried.
        path: String,
        /// The errno of `open`.
        errno: i32,
    },
    /// A system call failed.
    Os {
        /// What failed.
        op: Op,
        /// What the errno means here.
        kind: ErrorKind,
        /// The errno.
        errno: i32,
        /// The thread concerned, for `PFM_IOC_LOAD` and perf_event_open.
        tid: Option<u32>,
    },
    /// A register array call rejected an element (EINVAL).
    BadRegister {
        /// `PFM_IOC_WRITE_PMCS`, `PFM_IOC_WRITE_PMDS` or `PFM_IOC_READ_PMDS`.
        op: Op,
        /// Index of the first bad element (the `done` field).
        index: usize,
        /// Its register number.
        reg_num: u16,
        /// Its `reg_flags` as returned (`PFM_REG_RETFL_*` bits).
        flags: u32,
    },
    /// An event set call rejected an element (EINVAL).
    BadSet {
        /// `PFM_IOC_CREATE_SETS`, `PFM_IOC_DELETE_SETS` or
        /// `PFM_IOC_GETINFO_SETS`.
        op: Op,
        /// Index of the first bad element (the `done` field).
        index: usize,
        /// Its set id.
        set_id: u16,
    },
    /// An event name the PMU model does not have.
    UnknownEvent {
        /// The name given.
        name: String,
        /// The loaded PMU model.
        model: String,
        /// Close names, best first.
        suggestions: Vec<String>,
        /// Every event of the model.
        available: Vec<String>,
        /// Another table that was searched too (libpfm4's PMU, e.g. `skl`),
        /// too large to list.
        table: Option<String>,
    },
    /// More events were asked for than the model has counters.
    TooManyEvents {
        /// Events asked for.
        requested: usize,
        /// Counters available.
        counters: usize,
    },
    /// The module speaks another ABI version.
    AbiMismatch {
        /// Version reported by the module.
        kernel: u32,
        /// Version this library was built for.
        library: u32,
    },
    /// Something did not happen in time.
    Timeout {
        /// The operation waited for.
        op: Op,
        /// What was waited for, in words.
        what: String,
    },
    /// A message read from the context was shorter than `struct pfm_msg`.
    ShortMessage {
        /// Bytes read.
        len: usize,
    },
    /// The command to run was not found in `PATH`.
    CommandNotFound {
        /// The command.
        program: String,
    },
    /// The command could not be executed.
    Exec {
        /// The command.
        program: String,
        /// The errno of `execve`.
        errno: i32,
    },
    /// An invalid request that never reached the kernel.
    Usage(String),
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A failed system call.
    pub fn os(op: Op, errno: i32) -> Self {
        Error::Os {
            op,
            kind: ErrorKind::from_errno(errno),
            errno,
            tid: None,
        }
    }

    /// A failed system call concerning thread `tid`.
    pub fn os_tid(op: Op, errno: i32, tid: u32) -> Self {
        Error::Os {
            op,
            kind: ErrorKind::from_errno(errno),
            errno,
            tid: Some(tid),
        }
    }

    /// The errno behind this error, if it came from the kernel.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::NotLoaded { errno, .. }
            | Error::Os { errno, .. }
            | Error::Exec { errno, .. } => Some(*errno),
            Error::BadRegister { .. } | Error::BadSet { .. } => Some(libc::EINVAL),
            Error::ShortMessage { .. } => Some(libc::EIO),
            _ => None,
        }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::NotLoaded { .. } => ErrorKind::NoDevice,
            Error::Os { kind, .. } => *kind,
            Error::BadRegister { .. } | Error::BadSet { .. } => ErrorKind::InvalidArgument,
            _ => ErrorKind::Other,
        }
    }

    /// For a command that could not be run, the status a shell would exit
    /// with: 127 (not found) or 126 (found but not executable).
    pub fn shell_code(&self) -> Option<u8> {
        match self {
            Error::CommandNotFound { .. } => Some(127),
            Error::Exec {
                errno: libc::ENOENT,
                ..
            } => Some(127),
            Error::Exec { .. } => Some(126),
            _ => None,
        }
    }

    /// The operation that failed, where one did.
    pub fn op(&self) -> Option<Op> {
        match self {
            Error::NotLoaded { .. } => Some(Op::Open),
            Error::Os { op, .. }
            | Error::BadRegister { op, .. }
            | Error::BadSet { op, .. }
            | Error::Timeout { op, .. } => Some(*op),
            Error::Exec { .. } => Some(Op::Exec),
            _ => None,
        }
    }
}

/// The symbolic name of an errno, for messages and test diagnostics.
pub fn errno_name(errno: i32) -> &'static str {
    match errno {
        0 => "0",
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ESRCH => "ESRCH",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::ENXIO => "ENXIO",
        libc::E2BIG => "E2BIG",
        libc::ENOEXEC => "ENOEXEC",
        libc::EBADF => "EBADF",
        libc::ECHILD => "ECHILD",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENODEV => "ENODEV",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::EMFILE => "EMFILE",
        libc::ENOTTY => "ENOTTY",
        libc::ENOSPC => "ENOSPC",
        libc::EDQUOT => "EDQUOT",
        libc::ERANGE => "ERANGE",
        libc::ENOSYS => "ENOSYS",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EBADFD => "EBADFD",
        _ => "E?",
    }
}

/// The C library's text for an errno, without Rust's "(os error N)".
pub fn errno_text(errno: i32) -> String {
    let s = std::io::Error::from_raw_os_error(errno).to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// Says which `PFM_REG_RETFL_*` bits are set, in words.
fn retflags_text(flags: u32) -> &'static str {
    if flags & PFM_REG_RETFL_NOTAVAIL != 0 {
        "register does not exist"
    } else if flags & PFM_REG_RETFL_NOSET != 0 {
        "event set does not exist"
    } else if flags & PFM_REG_RETFL_EINVAL != 0 {
        "invalid value or flags"
    } else {
        "rejected"
    }
}

fn thread_words(tid: Option<u32>) -> String {
    match tid {
        Some(0) => "the calling thread".to_string(),
        Some(t) => format!("thread {t}"),
        None => "the thread".to_string(),
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotLoaded { path, errno } => write!(
                f,
                "perfmon module not loaded (modprobe perfmon): {path}: {}",
                errno_text(*errno)
            ),
            Error::Os {
                op,
                kind,
                errno,
                tid,
            } => {
                let who = thread_words(*tid);
                let (name, text) = (errno_name(*errno), errno_text(*errno));
                match (op, kind) {
                    (Op::Open, ErrorKind::PermissionDenied) => write!(
                        f,
                        "cannot open /dev/perfmon: permission denied \
                         (kernel.perf_event_paranoid above 2 allows only root: lower it, \
                         or ask an administrator to make the device accessible)"
                    ),
                    (Op::Load, ErrorKind::PermissionDenied) => write!(
                        f,
                        "{op}: not allowed to monitor {who} ({name}): it belongs to another user; \
                         run as that user, as root, or with CAP_PERFMON"
                    ),
                    (Op::Load, ErrorKind::NotPermitted) => write!(
                        f,
                        "{op}: {who} cannot be monitored ({name}): kernel threads and exiting \
                         threads are refused, and another user's thread needs CAP_PERFMON"
                    ),
                    (Op::Load, ErrorKind::NoSuchThread) => {
                        write!(f, "{op}: no such thread: {who} does not exist ({name})")
                    }
                    (Op::Load, _) if *errno == libc::EDQUOT => write!(
                        f,
                        "{op}: you have as many threads attached as one user may ({name}); \
                         see /sys/module/perfmon/parameters/max_attached_per_user"
                    ),
                    (Op::Load, ErrorKind::Busy) => write!(
                        f,
                        "{op}: {who} is already monitored by another perfmon context, or \
                         the context has event sets or a mapped counter page, which \
                         inheritance and whole processes cannot have ({name})"
                    ),
                    (Op::Load, _) if *errno == libc::ENOSPC => write!(
                        f,
                        "{op}: the system has as many threads attached as the module allows \
                         ({name})"
                    ),
                    (Op::PerfEventOpen, ErrorKind::PermissionDenied | ErrorKind::NotPermitted) => {
                        write!(
                            f,
                            "{op}: {text} ({name}): lower /proc/sys/kernel/perf_event_paranoid \
                             or run as root"
                        )
                    }
                    (Op::PerfEventOpen, ErrorKind::NoDevice) => {
                        write!(
                            f,
                            "{op}: {text} ({name}): the kernel has no such perf event"
                        )
                    }
                    (Op::CreateSets, _) if *errno == libc::EOPNOTSUPP => write!(
                        f,
                        "{op}: this PMU model has no event sets ({name}); \
                         the soft model (pmu=soft) has them"
                    ),
                    (Op::CreateSets, ErrorKind::Busy) => write!(
                        f,
                        "{op}: the context's counter page is mapped ({name}); \
                         a page describes one set: unmap it first"
                    ),
                    (Op::Mmap, ErrorKind::Busy) => write!(
                        f,
                        "{op}: the context has event sets ({name}); \
                         a counter page describes one set"
                    ),
                    (Op::CreateSets | Op::DeleteSets, ErrorKind::WrongState) => write!(
                        f,
                        "{op}: event sets change only while the context is unloaded ({name})"
                    ),
                    (_, ErrorKind::WrongState) => write!(
                        f,
                        "{op}: the context is not in a state that allows this ({name})"
                    ),
                    (_, ErrorKind::NotSupported) if *op != Op::Open => write!(
                        f,
                        "{op}: not supported by this /dev/perfmon ({name}): \
                         do the module and the tool come from the same version?"
                    ),
                    (Op::CreateSets | Op::DeleteSets | Op::GetinfoSets, ErrorKind::TooBig) => {
                        write!(f, "{op}: more than 16 event sets in one call ({name})")
                    }
                    (Op::ReadThreads, ErrorKind::TooBig) => write!(
                        f,
                        "{op}: the context kept gaining threads faster than they could be \
                         read ({name})"
                    ),
                    (_, ErrorKind::TooBig) => {
                        write!(f, "{op}: too many registers in one call ({name})")
                    }
                    _ => write!(f, "{op}: {text} ({name})"),
                }
            }
            Error::BadRegister {
                op,
                index,
                reg_num,
                flags,
            } => write!(
                f,
                "{op}: element {index} (register {reg_num}) rejected: {} (EINVAL)",
                retflags_text(*flags)
            ),
            Error::BadSet { op, index, set_id } => {
                let why = match op {
                    Op::CreateSets => {
                        "a set id of 16 or more, reserved bits or fields, both switch flags, \
                         a timeout or overflow count that does not match the flags, or \
                         PMDs the model lacks"
                    }
                    Op::DeleteSets => "set 0 cannot be deleted, or the set does not exist",
                    _ => "the set does not exist",
                };
                write!(
                    f,
                    "{op}: element {index} (set {set_id}) rejected: {why} (EINVAL)"
                )
            }
            Error::UnknownEvent {
                name,
                model,
                suggestions,
                available,
                table,
            } => {
                write!(f, "unknown event '{name}' for PMU model '{model}'")?;
                if let Some(t) = table {
                    write!(f, " or libpfm4 PMU '{t}'")?;
                }
                if suggestions.is_empty() && table.is_some() {
                    write!(f, "; see 'pfm list' for the events")
                } else if suggestions.is_empty() {
                    write!(f, "; available: {} (see 'pfm list')", available.join(", "))
                } else {
                    let quoted: Vec<String> =
                        suggestions.iter().map(|s| format!("'{s}'")).collect();
                    write!(f, "; did you mean {}?", quoted.join(" or "))
                }
            }
            Error::TooManyEvents {
                requested,
                counters,
            } => write!(
                f,
                "{requested} events requested but the PMU model has {counters} counters"
            ),
            Error::AbiMismatch { kernel, library } => write!(
                f,
                "perfmon ABI mismatch: the module speaks version {kernel}, \
                 this tool version {library}"
            ),
            Error::Timeout { op, what } => write!(f, "{op}: timed out waiting for {what}"),
            Error::ShortMessage { len } => {
                write!(f, "read: short perfmon message ({len} bytes, expected 64)")
            }
            Error::CommandNotFound { program } => {
                write!(f, "cannot run '{program}': command not found")
            }
            Error::Exec { program, errno } => {
                write!(
                    f,
                    "cannot run '{program}': {} ({})",
                    errno_text(*errno),
                    errno_name(*errno)
                )
            }
            Error::Usage(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_errno() {
        assert_eq!(ErrorKind::from_errno(libc::EBADFD), ErrorKind::WrongState);
        assert_eq!(ErrorKind::from_errno(libc::EBUSY), ErrorKind::Busy);
        assert_eq!(ErrorKind::from_errno(libc::ENOTTY), ErrorKind::NotSupported);
        assert_eq!(ErrorKind::from_errno(libc::ENOENT), ErrorKind::NoDevice);
        assert_eq!(ErrorKind::from_errno(12345), ErrorKind::Other);
    }

    #[test]
    fn messages_read_like_a_tool() {
        let e = Error::NotLoaded {
            path: "/dev/perfmon".into(),
            errno: libc::ENOENT,
        };
        assert!(e
            .to_string()
            .starts_with("perfmon module not loaded (modprobe perfmon)"));
        let e = Error::os_tid(Op::Load, libc::EACCES, 42);
        let s = e.to_string();
        assert!(
            s.starts_with("PFM_IOC_LOAD: not allowed to monitor thread 42 (EACCES)"),
            "{s}"
        );
        assert!(s.contains("CAP_PERFMON"));
        assert_eq!(e.errno(), Some(libc::EACCES));
        assert_eq!(e.op(), Some(Op::Load));
        let e = Error::os(Op::Start, libc::EBADFD);
        assert_eq!(
            e.to_string(),
            "PFM_IOC_START: the context is not in a state that allows this (EBADFD)"
        );
        let e = Error::os_tid(Op::Load, libc::EBUSY, 7);
        assert!(e.to_string().contains("already monitored"));
        let e = Error::BadRegister {
            op: Op::WritePmcs,
            index: 1,
            reg_num: 9,
            flags: PFM_REG_RETFL_NOTAVAIL,
        };
        assert_eq!(
            e.to_string(),
            "PFM_IOC_WRITE_PMCS: element 1 (register 9) rejected: register does not exist (EINVAL)"
        );
    }

    #[test]
    fn set_errors_say_what_to_do() {
        let e = Error::BadSet {
            op: Op::DeleteSets,
            index: 1,
            set_id: 0,
        };
        assert_eq!(
            e.to_string(),
            "PFM_IOC_DELETE_SETS: element 1 (set 0) rejected: set 0 cannot be deleted, \
             or the set does not exist (EINVAL)"
        );
        assert_eq!(
            (e.errno(), e.op()),
            (Some(libc::EINVAL), Some(Op::DeleteSets))
        );
        let e = Error::os(Op::CreateSets, libc::EOPNOTSUPP);
        assert!(e.to_string().contains("pmu=soft"), "{e}");
        let e = Error::os(Op::CreateSets, libc::EBADFD);
        assert!(
            e.to_string().contains("only while the context is unloaded"),
            "{e}"
        );
        let e = Error::os(Op::GetinfoSets, libc::E2BIG);
        assert!(e.to_string().contains("more than 16 event sets"), "{e}");
        let e = Error::os(Op::Mmap, libc::EBUSY);
        assert!(e.to_string().contains("event sets"), "{e}");
    }

    #[test]
    fn errno_text_has_no_rust_suffix() {
        assert_eq!(errno_text(libc::ENOENT), "No such file or directory");
    }
}
