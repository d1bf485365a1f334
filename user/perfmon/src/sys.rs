//! The only place in this crate that calls into C: raw ioctls on
//! `/dev/perfmon`, `perf_event_open`, and the few process and signal calls
//! that `std` does not offer. Every function here is safe to call; each
//! `unsafe` block says why it is sound.
//!
//! Functions return `Err(errno)` on failure; the callers turn errnos into
//! [`crate::Error`] values, which know which operation failed.

use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::abi::{
    PfmClone, PfmCtxFlags, PfmCtxInfo, PfmInfo, PfmLoad, PfmPmc, PfmPmd, PfmRegsArg, PfmSetdesc,
    PfmSetinfo, PfmSetsArg, PfmSmplSetup, PfmThread, PfmThreadsArg, PfmValues,
    PFM_IOC_READ_THREADS, PFM_IOC_READ_VALUES,
};

/// The calling thread's errno.
fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Turns the `-1`-and-errno convention into a `Result`.
fn check(ret: libc::c_int) -> Result<libc::c_int, i32> {
    if ret == -1 {
        Err(errno())
    } else {
        Ok(ret)
    }
}

/// Types whose address may be handed to a perfmon ioctl: plain `repr(C)`
/// structures of the ABI without pointers or padding that the kernel cares
/// about. Sealed: only the ABI structures implement it.
pub(crate) trait IoctlArg: Copy + private::Sealed {}

mod private {
    pub trait Sealed {}
}

macro_rules! ioctl_arg {
    ($($t:ty),*) => {$(
        impl private::Sealed for $t {}
        impl IoctlArg for $t {}
    )*};
}
ioctl_arg!(
    PfmInfo,
    PfmLoad,
    PfmCtxFlags,
    PfmCtxInfo,
    PfmClone,
    PfmSmplSetup
);

/// An ioctl without argument (`_IO`).
pub(crate) fn ioctl_none(fd: BorrowedFd<'_>, request: u32) -> Result<i32, i32> {
    // SAFETY: an `_IO` request carries no argument: the kernel reads and
    // writes no user memory; the fd is valid for the borrow.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), request as _, 0usize) })
}

/// An ioctl whose argument is one ABI structure the kernel may read and
/// write (`_IOR`, `_IOW`, `_IOWR` with the structure's size encoded in
/// `request`).
pub(crate) fn ioctl_arg<T: IoctlArg>(
    fd: BorrowedFd<'_>,
    request: u32,
    arg: &mut T,
) -> Result<i32, i32> {
    debug_assert_eq!(
        ((request >> 16) & 0x3fff) as usize,
        std::mem::size_of::<T>()
    );
    // SAFETY: `arg` is a valid, exclusively borrowed `repr(C)` structure of
    // exactly the size encoded in `request` (checked above in debug builds
    // and by construction of the request constants), so the kernel reads and
    // writes only memory we own; any bit pattern is valid for its fields.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), request as _, arg as *mut T) })
}

/// `PFM_IOC_READ_VALUES`: points `arg.values` at `out`, which must have one
/// slot per bit of `arg.pmd_mask` (`EINVAL` otherwise, before any call).
pub(crate) fn ioctl_values(
    fd: BorrowedFd<'_>,
    arg: &mut PfmValues,
    out: &mut [u64],
) -> Result<i32, i32> {
    if out.len() < arg.pmd_mask.count_ones() as usize {
        return Err(libc::EINVAL);
    }
    arg.values = out.as_mut_ptr() as u64;
    // SAFETY: `arg` is a `repr(C)` PfmValues of the size the request
    // encodes; `arg.values` points at `out`, exclusively borrowed, with room
    // for every value the kernel writes (one per mask bit, checked above).
    check(unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            PFM_IOC_READ_VALUES as _,
            arg as *mut PfmValues,
        )
    })
}

/// `PFM_IOC_READ_THREADS`: points `arg.threads` at `rows` and sets
/// `arg.count` to its length; the kernel writes at most that many rows
/// (`E2BIG` and none if more are needed, `arg.needed` saying how many).
pub(crate) fn ioctl_threads(
    fd: BorrowedFd<'_>,
    arg: &mut PfmThreadsArg,
    rows: &mut [PfmThread],
) -> Result<i32, i32> {
    arg.threads = rows.as_mut_ptr() as u64;
    arg.count = u32::try_from(rows.len()).map_err(|_| libc::E2BIG)?;
    // SAFETY: `arg` is a `repr(C)` PfmThreadsArg of the size the request
    // encodes; `arg.threads` points at `rows`, exclusively borrowed, with
    // room for `arg.count` rows, the most the kernel writes; any bit
    // pattern is a valid PfmThread.
    check(unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            PFM_IOC_READ_THREADS as _,
            arg as *mut PfmThreadsArg,
        )
    })
}

/// Register array elements: [`PfmPmc`] or [`PfmPmd`].
pub(crate) trait Reg: Copy + private::Sealed {}
ioctl_arg!(PfmRegsArg);
impl private::Sealed for PfmPmc {}
impl private::Sealed for PfmPmd {}
impl Reg for PfmPmc {}
impl Reg for PfmPmd {}

/// A register array ioctl (WRITE_PMCS, WRITE_PMDS, READ_PMDS): points
/// `arg.regs` at `regs`, sets the count, and issues `request`. The caller
/// pairs `request` with the element type (PMCs for WRITE_PMCS).
pub(crate) fn ioctl_regs<R: Reg>(
    fd: BorrowedFd<'_>,
    request: u32,
    regs: &mut [R],
    arg: &mut PfmRegsArg,
) -> Result<i32, i32> {
    arg.regs = regs.as_mut_ptr() as u64;
    arg.count = u32::try_from(regs.len()).map_err(|_| libc::E2BIG)?;
    // SAFETY: `arg` is exclusively borrowed and of the size encoded in
    // `request`; `arg.regs` points at `regs.len()` exclusively borrowed
    // elements of the ABI type the request expects, all of which stay alive
    // and unaliased for the duration of the call, and any bit pattern the
    // kernel writes into them is a valid value.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), request as _, arg as *mut PfmRegsArg) })
}

/// Event set array elements: [`PfmSetdesc`] (CREATE_SETS), [`PfmSetinfo`]
/// (GETINFO_SETS) or a `u16` set id (DELETE_SETS).
pub(crate) trait SetElem: Copy + private::Sealed {}
ioctl_arg!(PfmSetsArg);
impl private::Sealed for PfmSetdesc {}
impl private::Sealed for PfmSetinfo {}
impl private::Sealed for u16 {}
impl SetElem for PfmSetdesc {}
impl SetElem for PfmSetinfo {}
impl SetElem for u16 {}

/// An event set array ioctl (CREATE_SETS, DELETE_SETS, GETINFO_SETS):
/// points `arg.sets` at `elems`, sets the count, and issues `request`. The
/// caller pairs `request` with the element type (set ids for DELETE_SETS).
pub(crate) fn ioctl_sets<E: SetElem>(
    fd: BorrowedFd<'_>,
    request: u32,
    elems: &mut [E],
    arg: &mut PfmSetsArg,
) -> Result<i32, i32> {
    arg.sets = elems.as_mut_ptr() as u64;
    arg.count = u32::try_from(elems.len()).map_err(|_| libc::E2BIG)?;
    // SAFETY: `arg` is exclusively borrowed and of the size encoded in
    // `request`; `arg.sets` points at `elems.len()` exclusively borrowed
    // elements of the ABI type the request expects, which stay alive and
    // unaliased for the duration of the call, and any bit pattern the
    // kernel writes into them is a valid value.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), request as _, arg as *mut PfmSetsArg) })
}

/// Sets or clears `O_NONBLOCK` on `fd`.
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>, on: bool) -> Result<(), i32> {
    // SAFETY: F_GETFL/F_SETFL take no pointer; the fd is valid.
    let flags = check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    let new = if on {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    if new != flags {
        // SAFETY: as above.
        check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, new) })?;
    }
    Ok(())
}

/// Whether `O_NONBLOCK` is set on `fd`.
pub(crate) fn is_nonblocking(fd: BorrowedFd<'_>) -> Result<bool, i32> {
    // SAFETY: F_GETFL takes no pointer; the fd is valid.
    let flags = check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    Ok(flags & libc::O_NONBLOCK != 0)
}

/// Converts a timeout into poll(2)'s milliseconds (rounded up, saturated;
/// `None` waits forever).
pub(crate) fn poll_timeout_ms(timeout: Option<Duration>) -> libc::c_int {
    match timeout {
        None => -1,
        Some(d) => {
            let ms = d.as_nanos().div_ceil(1_000_000);
            libc::c_int::try_from(ms).unwrap_or(libc::c_int::MAX)
        }
    }
}

/// poll(2) on a set of fds. Returns each fd's `revents`; all zero on timeout.
/// EINTR is returned as an error so that callers can notice signals.
pub(crate) fn poll(
    fds: &[(BorrowedFd<'_>, i16)],
    timeout: Option<Duration>,
) -> Result<Vec<i16>, i32> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|(fd, events)| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: *events,
            revents: 0,
        })
        .collect();
    // SAFETY: `pfds` is a valid array of `pfds.len()` pollfd structures that
    // the kernel may write (revents) for the duration of the call.
    check(unsafe {
        libc::poll(
            pfds.as_mut_ptr(),
            pfds.len() as libc::nfds_t,
            poll_timeout_ms(timeout),
        )
    })?;
    Ok(pfds.iter().map(|p| p.revents).collect())
}

// ---------------------------------------------------------------------------
// perf_event_open

/// `struct perf_event_attr` up to `PERF_ATTR_SIZE_VER0` (64 bytes), which
/// every kernel with perf events accepts.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct PerfEventAttr {
    pub(crate) type_: u32,
    pub(crate) size: u32,
    pub(crate) config: u64,
    pub(crate) sample_period: u64,
    pub(crate) sample_type: u64,
    pub(crate) read_format: u64,
    /// The bitfield word: bit 0 disabled, 1 inherit, 4 exclude_user,
    /// 5 exclude_kernel, 6 exclude_hv, 12 enable_on_exec.
    pub(crate) flags: u64,
    pub(crate) wakeup_events: u32,
    pub(crate) bp_type: u32,
    pub(crate) config1: u64,
}
const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == 64);

/// perf_event_open(2) for one thread (`tid` 0 = the caller) on any CPU.
pub(crate) fn perf_event_open(
    attr: &PerfEventAttr,
    tid: i32,
    group: Option<BorrowedFd<'_>>,
) -> Result<OwnedFd, i32> {
    let group_fd: RawFd = group.map_or(-1, |g| g.as_raw_fd());
    /// PERF_FLAG_FD_CLOEXEC.
    const FD_CLOEXEC: libc::c_ulong = 1 << 3;
    let flags = FD_CLOEXEC;
    // SAFETY: `attr` points to a valid attribute structure whose `size`
    // field the caller set to its size; the kernel only reads it (it may
    // write `size` back on E2BIG, which `attr` being a shared reference
    // does not allow: we pass a copy).
    let mut copy = *attr;
    let ret = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &mut copy as *mut PerfEventAttr,
            tid as libc::c_long,
            -1 as libc::c_long,
            group_fd as libc::c_long,
            flags,
        )
    };
    if ret < 0 {
        return Err(errno());
    }
    // SAFETY: the syscall returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(ret as RawFd) })
}

/// An argument-less perf ioctl (ENABLE, DISABLE, RESET) with its flag word.
pub(crate) fn perf_ioctl(fd: BorrowedFd<'_>, request: u64, flag: u64) -> Result<(), i32> {
    // SAFETY: these perf ioctls take an integer flag, no pointer.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), request as _, flag as libc::c_ulong) })?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Threads, CPUs, processes, signals

/// The caller's thread id.
pub(crate) fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// The CPU the caller runs on (may change right after).
pub(crate) fn current_cpu() -> Result<u32, i32> {
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() };
    if cpu < 0 {
        Err(errno())
    } else {
        Ok(cpu as u32)
    }
}

/// Number of online CPUs.
pub(crate) fn online_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).unwrap_or(1).max(1)
}

/// Binds thread `tid` (0 = the caller) to the CPUs in `cpus`.
pub(crate) fn set_affinity(tid: u32, cpus: &[usize]) -> Result<(), i32> {
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(libc::EINVAL);
        }
        // SAFETY: `cpu` is below CPU_SETSIZE (checked above).
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    check(unsafe {
        libc::sched_setaffinity(
            tid as libc::pid_t,
            std::mem::size_of::<libc::cpu_set_t>(),
            &set,
        )
    })?;
    Ok(())
}

/// Sends signal `sig` to process `pid`.
pub(crate) fn kill(pid: i32, sig: i32) -> Result<(), i32> {
    // SAFETY: kill takes no pointers.
    check(unsafe { libc::kill(pid, sig) })?;
    Ok(())
}

/// How a waited-for child ended, and what it used.
pub(crate) struct WaitResult {
    pub(crate) status: libc::c_int,
    pub(crate) user: Duration,
    pub(crate) system: Duration,
}

fn timeval(tv: libc::timeval) -> Duration {
    Duration::new(
        tv.tv_sec.max(0) as u64,
        (tv.tv_usec.clamp(0, 999_999) as u32) * 1000,
    )
}

/// wait4(2) for `pid`, retried on EINTR. With `nohang`, `Ok(None)` means it
/// is still running.
pub(crate) fn wait4(pid: i32, nohang: bool) -> Result<Option<WaitResult>, i32> {
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is plain data.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let options = if nohang { libc::WNOHANG } else { 0 };
    loop {
        // SAFETY: `status` and `usage` are valid for writes.
        let ret = unsafe { libc::wait4(pid, &mut status, options, &mut usage) };
        match ret {
            -1 if errno() == libc::EINTR => continue,
            -1 => return Err(errno()),
            0 => return Ok(None),
            _ => {
                return Ok(Some(WaitResult {
                    status,
                    user: timeval(usage.ru_utime),
                    system: timeval(usage.ru_stime),
                }))
            }
        }
    }
}

/// Decodes a wait status: `(Some(code), None)` for an exit,
/// `(None, Some(signal))` for a death by signal.
pub(crate) fn decode_status(status: libc::c_int) -> (Option<i32>, Option<i32>) {
    if libc::WIFEXITED(status) {
        (Some(libc::WEXITSTATUS(status)), None)
    } else if libc::WIFSIGNALED(status) {
        (None, Some(libc::WTERMSIG(status)))
    } else {
        (None, None)
    }
}

/// A close-on-exec pipe: (read end, write end).
pub(crate) fn pipe() -> Result<(OwnedFd, OwnedFd), i32> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two fds pipe2 writes.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: pipe2 returned two new fds that nothing else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Forks a child that waits for one byte on `go` before it executes `path`
/// with `argv` and `envp`. If the exec fails, the child writes its errno
/// (4 bytes, native endian) to `report` and exits with 127. If the go pipe
/// reaches end of file without a byte (the parent gave up), it exits with
/// 125 without executing anything.
///
/// `go` and `report` are (read end, write end) pairs of close-on-exec pipes;
/// the parent keeps `go.1` and `report.0`. Everything the child needs is
/// prepared before the fork, so the child only makes async-signal-safe
/// calls (close, read, write, execve, _exit), as POSIX requires after a
/// fork in a possibly multithreaded process.
pub(crate) fn fork_exec_paused(
    path: &CString,
    argv: &[CString],
    envp: &[CString],
    go: (&OwnedFd, &OwnedFd),
    report: (&OwnedFd, &OwnedFd),
) -> Result<i32, i32> {
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut envp_ptrs: Vec<*const libc::c_char> = envp.iter().map(|e| e.as_ptr()).collect();
    envp_ptrs.push(std::ptr::null());
    let (go_rd, go_wr) = (go.0.as_raw_fd(), go.1.as_raw_fd());
    let (rep_rd, rep_wr) = (report.0.as_raw_fd(), report.1.as_raw_fd());

    // SAFETY: fork has no memory-safety preconditions by itself; the child
    // branch below only makes async-signal-safe calls on data prepared
    // before the fork and never returns.
    let pid = unsafe { libc::fork() };
    if pid == -1 {
        return Err(errno());
    }
    if pid == 0 {
        // SAFETY: child side: only async-signal-safe calls, on fds and
        // pointers that were valid at the fork; the argv and envp arrays
        // are NULL-terminated arrays of NUL-terminated strings.
        unsafe {
            libc::close(go_wr);
            libc::close(rep_rd);
            let mut byte = 0u8;
            loop {
                let n = libc::read(go_rd, &mut byte as *mut u8 as *mut libc::c_void, 1);
                if n == 1 {
                    break;
                }
                if n == -1 && *libc::__errno_location() == libc::EINTR {
                    continue;
                }
                libc::_exit(125);
            }
            libc::close(go_rd);
            // The command gets the dispositions pfm had before it chose to
            // ignore Ctrl-C for itself (a later run of `-r` would otherwise
            // inherit SIG_IGN and not stop at Ctrl-C).
            for (sig, prev) in saved_interrupts() {
                libc::signal(sig, prev);
            }
            libc::execve(path.as_ptr(), argv_ptrs.as_ptr(), envp_ptrs.as_ptr());
            let err: i32 = *libc::__errno_location();
            let bytes = err.to_ne_bytes();
            libc::write(rep_wr, bytes.as_ptr() as *const libc::c_void, bytes.len());
            libc::_exit(127);
        }
    }
    Ok(pid)
}

/// Sets SIGINT and SIGQUIT to be ignored in this process (as perf stat
/// does while its workload runs: the terminal's Ctrl-C reaches the workload,
/// and the tool survives to print the counts).
pub(crate) fn ignore_interrupts() {
    for (sig, slot) in [libc::SIGINT, libc::SIGQUIT]
        .into_iter()
        .zip(&SAVED_INTERRUPTS)
    {
        // SAFETY: SIG_IGN is a valid disposition for these signals.
        let prev = unsafe { libc::signal(sig, libc::SIG_IGN) };
        // Only the first call sees the original disposition: the slot keeps
        // it (plus one: SIG_DFL is 0) and later calls leave it alone.
        if prev != libc::SIG_ERR {
            let _ = slot.compare_exchange(0, prev + 1, Ordering::Relaxed, Ordering::Relaxed);
        }
    }
}

/// SIGINT's and SIGQUIT's dispositions before [`ignore_interrupts`], plus
/// one (0: not saved), for the children forked later.
static SAVED_INTERRUPTS: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];

/// The dispositions [`ignore_interrupts`] replaced: (signal, handler).
/// Async-signal-safe (atomic loads only): the forked child calls it.
fn saved_interrupts() -> impl Iterator<Item = (i32, libc::sighandler_t)> {
    [libc::SIGINT, libc::SIGQUIT]
        .into_iter()
        .zip(&SAVED_INTERRUPTS)
        .filter_map(|(sig, slot)| match slot.load(Ordering::Relaxed) {
            0 => None,
            v => Some((sig, v - 1)),
        })
}

/// Blocks `signals` in the calling thread and returns a signalfd (close-on-
/// exec, non-blocking) that becomes readable when one of them is pending.
pub(crate) fn signalfd(signals: &[i32]) -> Result<OwnedFd, i32> {
    // SAFETY: sigset_t is plain data, initialized by sigemptyset.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t for these calls.
    unsafe {
        libc::sigemptyset(&mut set);
        for &s in signals {
            if libc::sigaddset(&mut set, s) == -1 {
                return Err(errno());
            }
        }
    }
    // SAFETY: `set` is initialized; the old mask is not wanted (NULL).
    let ret = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if ret != 0 {
        return Err(ret);
    }
    // SAFETY: `set` is initialized; -1 asks for a new fd.
    let fd = check(unsafe { libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK) })?;
    // SAFETY: signalfd returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads one pending signal from a signalfd; `Ok(None)` if none is pending.
pub(crate) fn read_signalfd(fd: BorrowedFd<'_>) -> Result<Option<i32>, i32> {
    // SAFETY: signalfd_siginfo is plain data.
    let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::signalfd_siginfo>();
    // SAFETY: `info` is valid for `size` bytes of writes.
    let n = unsafe {
        libc::read(
            fd.as_raw_fd(),
            &mut info as *mut libc::signalfd_siginfo as *mut libc::c_void,
            size,
        )
    };
    if n == -1 {
        let e = errno();
        return if e == libc::EAGAIN { Ok(None) } else { Err(e) };
    }
    if n as usize != size {
        return Err(libc::EIO);
    }
    Ok(Some(info.ssi_signo as i32))
}

/// Maps a context's counter page read-only (`PFM_PAGE_SIZE` at offset 0).
pub(crate) fn mmap_page(fd: BorrowedFd<'_>) -> Result<std::ptr::NonNull<u8>, i32> {
    // SAFETY: A new mapping chosen by the kernel (address NULL): no existing
    // memory is affected.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            crate::abi::PFM_PAGE_SIZE,
            libc::PROT_READ,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(errno());
    }
    std::ptr::NonNull::new(p.cast::<u8>()).ok_or(libc::EIO)
}

/// Unmaps a page from [`mmap_page`].
///
/// # Safety
///
/// `p` comes from [`mmap_page`], is unmapped once, and no reference into
/// the page outlives this call.
pub(crate) unsafe fn munmap_page(p: std::ptr::NonNull<u8>) {
    // SAFETY: The caller's guarantees: our own mapping, of that length.
    unsafe { libc::munmap(p.as_ptr().cast(), crate::abi::PFM_PAGE_SIZE) };
}

/// The CPU instructions the page reader needs.
pub(crate) struct Instructions;

impl crate::pfm_page::UserCpu for Instructions {
    fn rdtscp(&self) -> (u64, u32) {
        let mut aux = 0u32;
        // SAFETY: `rdtscp` reads the TSC and TSC_AUX. The page reader calls
        // it only when the kernel said the CPU has it (PFM_PAGE_TIME_VALID).
        let tsc = unsafe { core::arch::x86_64::__rdtscp(&mut aux) };
        (tsc, aux)
    }

    fn rdpmc(&self, index: u32) -> u64 {
        let (lo, hi): (u32, u32);
        // SAFETY: `rdpmc` reads a counter; the page reader calls it only for
        // an index the kernel published while the calling thread is the one
        // running with that counter (the kernel then allows `rdpmc`).
        unsafe {
            core::arch::asm!("rdpmc", in("ecx") index, out("eax") lo, out("edx") hi,
                options(nomem, nostack, preserves_flags));
        }
        (u64::from(hi) << 32) | u64::from(lo)
    }
}
