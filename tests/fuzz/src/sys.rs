//! The raw system calls of the fuzzer and of the reliability tests. Every
//! `unsafe` of the crate is here.
//!
//! Memory the kernel reads or writes on our behalf is never memory Rust
//! owns: arguments live in an [`Arena`], a private mapping at a fixed
//! address far below where the kernel places mappings by itself, laid out
//! with read-write, PROT_NONE, read-only and unmapped pages so that the
//! fuzzer can hand the kernel every kind of bad pointer without ever
//! pointing it at the fuzzer's own data.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub use pfm_test_support::raw::{abi, check, errno, ioctl_ref};
pub use pfm_test_support::user::{become_user, become_user_keeping, privileged};

/// Page size (x86-64).
pub const PAGE: usize = 4096;

/// `gettid()`.
pub fn gettid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// `getpid()`.
pub fn getpid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::getpid() as u32 }
}

/// `getuid()`.
pub fn getuid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::getuid() }
}

/// `open(path, flags)`.
pub fn open(path: &std::ffi::CStr, flags: i32) -> Result<i32, i32> {
    // SAFETY: `path` is NUL-terminated.
    check(unsafe { libc::open(path.as_ptr(), flags, 0o600) } as i64).map(|r| r as i32)
}

/// `/dev/perfmon` as a C string.
pub const DEV: &std::ffi::CStr = c"/dev/perfmon";

/// Opens `/dev/perfmon` read-write.
pub fn open_pfm() -> Result<i32, i32> {
    open(DEV, libc::O_RDWR | libc::O_CLOEXEC)
}

/// Fd numbers whose generation is tracked (the fuzzer's pool numbers are
/// below 1000).
const FD_SLOTS: usize = 1024;
/// Per fd number: moves before and after each [`close`] of it.
static FD_GEN: [AtomicU32; FD_SLOTS] = [const { AtomicU32::new(0) }; FD_SLOTS];

/// Per fd number: moves as an operation on a pool number begins and as it
/// ends. `arm` works on numbers it opened itself; if another thread held
/// one of them in its pool (closed and reused since), its operations
/// reach `arm`'s context, and this moves.
static FD_TOUCH: [AtomicU32; FD_SLOTS] = [const { AtomicU32::new(0) }; FD_SLOTS];

/// An operation on pool number `fd` begins or ends.
pub fn touch_fd(fd: i32) {
    if let Some(t) = usize::try_from(fd).ok().and_then(|i| FD_TOUCH.get(i)) {
        t.fetch_add(1, Ordering::AcqRel);
    }
}

/// How often pool operations reached fd number `fd` (None: not tracked).
pub fn fd_touches(fd: i32) -> Option<u32> {
    FD_TOUCH
        .get(usize::try_from(fd).ok()?)
        .map(|t| t.load(Ordering::Acquire))
}

/// The generation of fd number `fd` (None: not tracked). A number whose
/// generation did not move between two reads held one file throughout, if
/// every close of the process goes through [`close`]: a number is reused
/// only after a close of it.
pub fn fd_gen(fd: i32) -> Option<u32> {
    FD_GEN
        .get(usize::try_from(fd).ok()?)
        .map(|g| g.load(Ordering::Acquire))
}

fn bump_gen(fd: i32) {
    if let Some(g) = usize::try_from(fd).ok().and_then(|i| FD_GEN.get(i)) {
        g.fetch_add(1, Ordering::AcqRel);
    }
}

/// `close(fd)`. The number's generation moves before the close (a call
/// that read the old one sees it move) and after it (what a call on the
/// old file recorded between the first move and the close is not believed
/// of the number's next file).
pub fn close(fd: i32) -> Result<(), i32> {
    bump_gen(fd);
    // SAFETY: closing a descriptor number; the callers only close numbers
    // they own (see the fd pool of the fuzzer).
    let r = check(unsafe { libc::close(fd) } as i64).map(|_| ());
    bump_gen(fd);
    r
}

/// `dup(fd)`.
pub fn dup(fd: i32) -> Result<i32, i32> {
    // SAFETY: no memory is involved.
    check(unsafe { libc::dup(fd) } as i64).map(|r| r as i32)
}

/// `ioctl(fd, req, arg)` with `arg` passed as a plain number (an address in
/// an [`Arena`], a bad address, or a garbage value).
pub fn ioctl(fd: i32, req: u32, arg: usize) -> Result<i64, i32> {
    // SAFETY: `arg` never points into Rust-owned memory (arena, bad address
    // or a number); the kernel may write only to arena pages.
    check(unsafe { libc::ioctl(fd, req as _, arg) } as i64)
}

/// `read(fd, addr, len)` into arena memory or a bad address.
pub fn read_raw(fd: i32, addr: usize, len: usize) -> Result<i64, i32> {
    // SAFETY: as for `ioctl`: `addr` is arena memory or a bad address.
    check(unsafe { libc::read(fd, addr as *mut libc::c_void, len) } as i64)
}

/// `write(fd, addr, len)` from arena memory or a bad address.
pub fn write_raw(fd: i32, addr: usize, len: usize) -> Result<i64, i32> {
    // SAFETY: the kernel only reads from `addr`.
    check(unsafe { libc::write(fd, addr as *const libc::c_void, len) } as i64)
}

/// `write(fd, data)` of a byte slice (logs, pipes).
pub fn write_all(fd: i32, data: &[u8]) {
    let mut off = 0;
    while off < data.len() {
        // SAFETY: `data[off..]` is valid for reads.
        let n = unsafe {
            libc::write(
                fd,
                data[off..].as_ptr() as *const libc::c_void,
                data.len() - off,
            )
        };
        if n <= 0 {
            if n == -1 && errno() == libc::EINTR {
                continue;
            }
            return;
        }
        off += n as usize;
    }
}

/// `read(fd, buf)` into a Rust buffer (pipes, /proc).
pub fn read_buf(fd: i32, buf: &mut [u8]) -> Result<usize, i32> {
    // SAFETY: `buf` is valid for writes of its length.
    check(unsafe { libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) } as i64)
        .map(|n| n as usize)
}

/// `poll` on `fds` (fd, events) for `timeout_ms`; the revents of each.
pub fn poll(fds: &[(i32, i16)], timeout_ms: i32) -> Result<Vec<i16>, i32> {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&(fd, events)| libc::pollfd {
            fd,
            events,
            revents: 0,
        })
        .collect();
    // SAFETY: `p` holds `p.len()` pollfds.
    let r = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, timeout_ms) };
    check(r as i64)?;
    Ok(p.iter().map(|x| x.revents).collect())
}

/// `fcntl(fd, cmd, arg)` with an integer argument.
pub fn fcntl(fd: i32, cmd: i32, arg: i64) -> Result<i64, i32> {
    // SAFETY: only integer-argument commands are used.
    check(unsafe { libc::fcntl(fd, cmd, arg) } as i64)
}

/// `F_SETOWN_EX` with `F_OWNER_TID` or `F_OWNER_PID`.
pub fn set_owner_ex(fd: i32, tid: bool, id: u32) -> Result<i64, i32> {
    #[repr(C)]
    struct FOwnerEx {
        kind: i32,
        pid: i32,
    }
    const F_SETOWN_EX: i32 = 15;
    let owner = FOwnerEx {
        kind: if tid { 0 } else { 1 },
        pid: id as i32,
    };
    // SAFETY: `owner` is a valid struct f_owner_ex for the call's duration.
    check(unsafe { libc::fcntl(fd, F_SETOWN_EX, &owner as *const FOwnerEx) } as i64)
}

/// `F_SETSIG` (Linux).
pub const F_SETSIG: i32 = 10;

/// `lseek(fd, off, whence)`.
pub fn lseek(fd: i32, off: i64, whence: i32) -> Result<i64, i32> {
    // SAFETY: no memory is involved.
    check(unsafe { libc::lseek(fd, off, whence) })
}

/// `mmap` of `fd` (perfmon's counter page: one page, read-only); if it
/// succeeds, the page's version word is read (a volatile read: the kernel
/// writes the page) and returned, and the mapping unmapped again.
pub fn mmap_fd(fd: i32, len: usize, prot: i32) -> Result<i64, i32> {
    // SAFETY: a new shared mapping of the file; nothing existing is replaced.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, 0) };
    if p == libc::MAP_FAILED {
        return Err(errno());
    }
    // SAFETY: the first word of the readable mapping we just made.
    let version = unsafe { std::ptr::read_volatile(p as *const u32) };
    // SAFETY: the mapping we just made.
    unsafe { libc::munmap(p, len) };
    Ok(i64::from(version))
}

/// `fstat(fd)`: whether it succeeded.
pub fn fstat_ok(fd: i32) -> Result<i64, i32> {
    // SAFETY: `st` is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    check(unsafe { libc::fstat(fd, &mut st) } as i64)
}

/// The device number of `fd` if it is a character device.
pub fn fstat_rdev(fd: i32) -> Option<u64> {
    // SAFETY: `st` is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_mode & libc::S_IFMT != libc::S_IFCHR {
        return None;
    }
    Some(st.st_rdev)
}

/// What `/proc/thread-self/fd/FD` links to (`anon_inode:[perfmon]` for a
/// `PFM_IOC_CLONE`'s descriptor, whose file is no character device). A
/// readlink: no descriptor is taken (see [`online_cpus`] for why that
/// matters).
pub fn fd_link(fd: i32) -> Option<String> {
    let path = std::ffi::CString::new(format!("/proc/thread-self/fd/{fd}")).ok()?;
    let mut buf = [0u8; 256];
    // SAFETY: `path` is NUL-terminated; `buf` is valid for writes of its
    // length, which is passed.
    let n = unsafe {
        libc::readlink(
            path.as_ptr(),
            buf.as_mut_ptr() as *mut libc::c_char,
            buf.len(),
        )
    };
    if n < 0 {
        return None;
    }
    Some(String::from_utf8_lossy(&buf[..n as usize]).into_owned())
}

/// The device number of the character device at `path`.
pub fn stat_rdev(path: &std::ffi::CStr) -> Option<u64> {
    // SAFETY: `st` is a valid out-parameter; `path` is NUL-terminated.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::stat(path.as_ptr(), &mut st) } != 0
        || st.st_mode & libc::S_IFMT != libc::S_IFCHR
    {
        return None;
    }
    Some(st.st_rdev)
}

/// Writes `value` to a sysfs or proc file (one write(2)).
pub fn write_file(path: &std::ffi::CStr, value: &str) -> Result<i64, i32> {
    let fd = open(path, libc::O_WRONLY | libc::O_CLOEXEC)?;
    // SAFETY: `value` is valid for reads of its length.
    let r = check(
        unsafe { libc::write(fd, value.as_ptr() as *const libc::c_void, value.len()) } as i64,
    );
    let _ = close(fd);
    r
}

/// `CLOCK_MONOTONIC` in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-parameter.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `sched_yield()`.
pub fn sched_yield() {
    // SAFETY: no preconditions.
    unsafe { libc::sched_yield() };
}

/// Sleeps `us` microseconds (returns early on a signal).
pub fn usleep(us: u64) {
    let ts = libc::timespec {
        tv_sec: (us / 1_000_000) as i64,
        tv_nsec: ((us % 1_000_000) * 1000) as i64,
    };
    // SAFETY: `ts` is valid; the remainder is not wanted.
    unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
}

/// Pins thread `tid` (0: the caller) to the CPUs in `mask` (bit n: CPU n).
pub fn set_affinity(tid: u32, mask: u64) -> Result<i64, i32> {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET only writes inside it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for cpu in 0..64 {
        if mask & (1 << cpu) != 0 {
            // SAFETY: `cpu` < 64 fits in the set.
            unsafe { libc::CPU_SET(cpu, &mut set) };
        }
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    check(unsafe {
        libc::sched_setaffinity(tid as i32, std::mem::size_of::<libc::cpu_set_t>(), &set)
    } as i64)
}

/// Number of CPUs the system was started with (glibc reads a sysfs file
/// for it: asked once, so that the fuzzer's threads do not open files
/// that could take a just-closed pool fd's number).
pub fn online_cpus() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        // SAFETY: no preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        n.max(1) as usize
    })
}

/// The owner of /proc/PID: the task's effective uid if it is dumpable,
/// root otherwise. A stat: no file descriptor is taken.
pub fn proc_owner(pid: u32) -> Option<u32> {
    let path = std::ffi::CString::new(format!("/proc/{pid}")).ok()?;
    // SAFETY: `st` is a valid out-parameter; `path` is NUL-terminated.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::stat(path.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.st_uid)
}

/// `kill(pid, sig)`.
pub fn kill(pid: i32, sig: i32) -> Result<i64, i32> {
    // SAFETY: no memory is involved.
    check(unsafe { libc::kill(pid, sig) } as i64)
}

/// `tgkill(tgid, tid, sig)`.
pub fn tgkill(tgid: u32, tid: u32, sig: i32) -> Result<i64, i32> {
    // SAFETY: no memory is involved.
    check(unsafe { libc::syscall(libc::SYS_tgkill, tgid as i64, tid as i64, sig as i64) })
}

/// `waitpid(pid, WNOHANG or 0)`: `Ok(Some((pid, status)))` when one was reaped.
pub fn waitpid(pid: i32, nohang: bool) -> Result<Option<(i32, i32)>, i32> {
    let mut status = 0;
    // SAFETY: `status` is a valid out-parameter.
    let r = unsafe {
        libc::waitpid(
            pid,
            &mut status,
            if nohang { libc::WNOHANG } else { 0 } | libc::__WALL,
        )
    };
    match r {
        -1 => Err(errno()),
        0 => Ok(None),
        p => Ok(Some((p, status))),
    }
}

/// Describes a wait status ("exit 3", "signal 9").
pub fn describe_status(status: i32) -> String {
    if libc::WIFEXITED(status) {
        format!("exit {}", libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        format!("signal {}", libc::WTERMSIG(status))
    } else {
        format!("status {status:#x}")
    }
}

/// `fork()`: `Ok(0)` in the child, the child's pid in the parent.
///
/// The child of a multi-threaded process must only use what survives a
/// fork: glibc's allocator does (it is fork-aware), the fuzzer's own state
/// is lock-free, and nothing takes the stdout lock there.
pub fn fork() -> Result<i32, i32> {
    // SAFETY: see above.
    check(unsafe { libc::fork() } as i64).map(|r| r as i32)
}

/// `_exit(code)`: leaves without running destructors or atexit handlers
/// (the state of a forked child's copy of the parent is not its own).
pub fn exit_now(code: i32) -> ! {
    // SAFETY: terminates the process.
    unsafe { libc::_exit(code) }
}

/// `execv(path, argv)`; returns the errno if it fails.
pub fn execv(path: &std::ffi::CStr, argv: &[&std::ffi::CStr]) -> i32 {
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    // SAFETY: NUL-terminated strings and a NULL-terminated array.
    unsafe { libc::execv(path.as_ptr(), ptrs.as_ptr()) };
    errno()
}

/// Asks for `sig` when the parent (the thread that forked us) dies.
pub fn die_with_parent(sig: i32) {
    // SAFETY: PR_SET_PDEATHSIG takes a signal number.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong) };
}

/// Makes this process the reaper of its orphaned descendants.
pub fn set_child_subreaper() {
    // SAFETY: no memory is involved.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong) };
}

/// Marks the process dumpable again (a uid change clears it; a user's
/// processes started normally are dumpable).
pub fn set_dumpable() {
    // SAFETY: no memory is involved.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1 as libc::c_ulong) };
}

/// A user namespace of the caller's own, with its uid mapped to itself
/// (so ids read the same inside): a loader there may not monitor the
/// same user's processes outside, and they may monitor it (its creator's
/// rule). The caller must be single-threaded.
pub fn enter_own_user_ns(uid: u32) -> Result<(), i32> {
    // SAFETY: no memory is involved.
    check(unsafe { libc::unshare(libc::CLONE_NEWUSER) } as i64)?;
    IN_OWN_USER_NS.store(true, std::sync::atomic::Ordering::Relaxed);
    std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
}

static IN_OWN_USER_NS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether this process entered a user namespace of its own
/// ([`enter_own_user_ns`]).
pub fn in_own_user_ns() -> bool {
    IN_OWN_USER_NS.load(std::sync::atomic::Ordering::Relaxed)
}

/// A thread's permitted capabilities (`CapPrm` of /proc/TID/status).
pub fn cap_permitted(tid: u32) -> Option<u64> {
    let s = read_text(&format!("/proc/{tid}/status"))?;
    let line = s.lines().find(|l| l.starts_with("CapPrm:"))?;
    u64::from_str_radix(line.split_whitespace().nth(1)?, 16).ok()
}

/// The user namespace a thread is in (the link /proc/TID/ns/user names),
/// if the caller may read it.
pub fn user_ns_of(tid: u32) -> Option<String> {
    std::fs::read_link(format!("/proc/{tid}/ns/user"))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// `setpgid(pid, pgid)`.
pub fn setpgid(pid: i32, pgid: i32) -> Result<i64, i32> {
    // SAFETY: no memory is involved.
    check(unsafe { libc::setpgid(pid, pgid) } as i64)
}

/// `getrlimit(RLIMIT_NOFILE)`: (soft, hard).
pub fn nofile_limit() -> (u64, u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid out-parameter.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) };
    (r.rlim_cur, r.rlim_max)
}

/// `setrlimit(RLIMIT_NOFILE, soft, hard)`.
pub fn set_nofile_limit(soft: u64, hard: u64) -> Result<i64, i32> {
    let r = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: `r` is valid.
    check(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) } as i64)
}

/// A no-op handler: the signal only interrupts what the thread is doing.
extern "C" fn on_signal(_sig: i32) {}

/// Installs the no-op handler for `sig`, without SA_RESTART (so blocking
/// calls return EINTR).
pub fn catch_signal(sig: i32) {
    // SAFETY: a zeroed sigaction with a valid handler; no old action wanted.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as extern "C" fn(i32) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = 0;
        libc::sigaction(sig, &sa, std::ptr::null_mut());
    }
}

/// Ignores `sig`.
pub fn ignore_signal(sig: i32) {
    // SAFETY: SIG_IGN is a valid disposition.
    unsafe { libc::signal(sig, libc::SIG_IGN) };
}

/// Restores the default action of `sig`.
pub fn default_signal(sig: i32) {
    // SAFETY: SIG_DFL is a valid disposition.
    unsafe { libc::signal(sig, libc::SIG_DFL) };
}

/// A POSIX timer that sends `sig` to the calling thread every `period_us`:
/// the fuzzer's guarantee that no thread stays blocked (a blocking read,
/// a notify-block overflow waiting for RESTART) for longer than that.
pub struct ThreadTimer(libc::timer_t);

impl ThreadTimer {
    /// Arms a periodic timer for the calling thread.
    pub fn new(sig: i32, period_us: u64) -> Option<Self> {
        // SAFETY: zeroed sigevent/itimerspec are valid; the timer id is an
        // out-parameter.
        unsafe {
            let mut sev: libc::sigevent = std::mem::zeroed();
            sev.sigev_notify = libc::SIGEV_THREAD_ID;
            sev.sigev_signo = sig;
            sev.sigev_notify_thread_id = libc::gettid();
            let mut id: libc::timer_t = std::mem::zeroed();
            if libc::timer_create(libc::CLOCK_MONOTONIC, &mut sev, &mut id) == -1 {
                return None;
            }
            let ts = libc::timespec {
                tv_sec: (period_us / 1_000_000) as i64,
                tv_nsec: ((period_us % 1_000_000) * 1000) as i64,
            };
            let spec = libc::itimerspec {
                it_interval: ts,
                it_value: ts,
            };
            libc::timer_settime(id, 0, &spec, std::ptr::null_mut());
            Some(ThreadTimer(id))
        }
    }
}

impl Drop for ThreadTimer {
    fn drop(&mut self) {
        // SAFETY: the timer we created.
        unsafe { libc::timer_delete(self.0) };
    }
}

/// A MAP_SHARED anonymous mapping (shared with forked children), never unmapped.
pub fn shared_mapping(len: usize) -> usize {
    // SAFETY: a fresh anonymous mapping.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert!(p != libc::MAP_FAILED, "mmap shared: errno {}", errno());
    p as usize
}

/// Pages of an [`Arena`]: 0..4 read-write, 4 PROT_NONE, 5 read-only
/// (random bytes), 6 read-write, 7 (and beyond) unmapped.
pub const ARENA_RW: usize = 4 * PAGE;
/// Offset of the PROT_NONE page.
pub const ARENA_NONE: usize = 4 * PAGE;
/// Offset of the read-only page.
pub const ARENA_RO: usize = 5 * PAGE;
/// Offset of the second read-write page.
pub const ARENA_RW2: usize = 6 * PAGE;
/// Offset of the unmapped page (a hole that was mapped and unmapped).
pub const ARENA_HOLE: usize = 7 * PAGE;
const ARENA_PAGES: usize = 8;
/// Where arenas go: far below the kernel's top-down mmap area, so nothing
/// the process maps by itself lands in an arena's hole.
const ARENA_BASE: usize = 0x5000_0000_0000;
const ARENA_STRIDE: usize = 0x10_0000;
static ARENA_NEXT: AtomicU64 = AtomicU64::new(0);

/// A thread's argument memory (see the page constants).
pub struct Arena {
    base: usize,
}

impl Arena {
    /// Maps a new arena at the next free fixed address; the read-only page
    /// is filled with bytes from `fill`.
    pub fn new(mut fill: impl FnMut() -> u64) -> Arena {
        loop {
            let slot = ARENA_NEXT.fetch_add(1, Ordering::Relaxed) as usize % 4096;
            let want = ARENA_BASE + slot * ARENA_STRIDE;
            // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping.
            let p = unsafe {
                libc::mmap(
                    want as *mut libc::c_void,
                    ARENA_PAGES * PAGE,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED || p as usize != want {
                if p != libc::MAP_FAILED {
                    // SAFETY: an old kernel placed it elsewhere: ours to unmap.
                    unsafe { libc::munmap(p, ARENA_PAGES * PAGE) };
                }
                continue;
            }
            let a = Arena { base: want };
            for off in (ARENA_RO..ARENA_RO + PAGE).step_by(8) {
                // SAFETY: still read-write: our fresh mapping, no Rust reference into it.
                unsafe { std::ptr::write((want + off) as *mut u64, fill()) };
            }
            // SAFETY: pages of our own fresh mapping, which no Rust reference points into.
            unsafe {
                libc::mprotect(
                    (want + ARENA_NONE) as *mut libc::c_void,
                    PAGE,
                    libc::PROT_NONE,
                );
                libc::mprotect(
                    (want + ARENA_RO) as *mut libc::c_void,
                    PAGE,
                    libc::PROT_READ,
                );
                libc::munmap((want + ARENA_HOLE) as *mut libc::c_void, PAGE);
            }
            return a;
        }
    }

    /// Address of byte `off` of the arena.
    pub fn at(&self, off: usize) -> usize {
        self.base + off
    }

    /// Whether `[addr, addr+len)` is writable arena memory (read-write pages).
    pub fn writable(&self, addr: usize, len: usize) -> bool {
        let rw1 = self.base..self.base + ARENA_RW;
        let rw2 = self.base + ARENA_RW2..self.base + ARENA_HOLE;
        len == 0
            || (rw1.contains(&addr) && rw1.contains(&(addr + len - 1)))
            || (rw2.contains(&addr) && rw2.contains(&(addr + len - 1)))
    }

    /// Stores `v` at `addr` where the arena is writable; bytes that fall on
    /// other pages are skipped.
    pub fn put<T: Copy>(&self, addr: usize, v: T) {
        let n = std::mem::size_of::<T>();
        if self.writable(addr, n) {
            // SAFETY: inside a read-write page of our mapping (checked);
            // unaligned plain-data store.
            unsafe { std::ptr::write_unaligned(addr as *mut T, v) };
            return;
        }
        // SAFETY: `v` is plain data; viewed as bytes for a partial store.
        let bytes = unsafe { std::slice::from_raw_parts(&v as *const T as *const u8, n) };
        for (i, b) in bytes.iter().enumerate() {
            if self.writable(addr + i, 1) {
                // SAFETY: one writable byte (checked).
                unsafe { std::ptr::write((addr + i) as *mut u8, *b) };
            }
        }
    }

    /// Loads a `T` from `addr`, which must be readable arena memory.
    pub fn get<T: Copy + Default>(&self, addr: usize) -> T {
        let n = std::mem::size_of::<T>();
        let ro = self.base + ARENA_RO..self.base + ARENA_RW2;
        if self.writable(addr, n) || (ro.contains(&addr) && ro.contains(&(addr + n - 1))) {
            // SAFETY: readable arena memory (checked); any bit pattern is a `T`
            // for the plain ABI structures this is used with.
            unsafe { std::ptr::read_unaligned(addr as *const T) }
        } else {
            T::default()
        }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: our mapping (the hole page is already unmapped; munmap of
        // an unmapped range is harmless).
        unsafe { libc::munmap(self.base as *mut libc::c_void, ARENA_PAGES * PAGE) };
    }
}

/// Where `Ptr::Wild` addresses of the fuzzer start (`0x1000_0000_0000`):
/// from there to the end of the arenas nothing may be mapped but arenas.
pub const WILD_LOW: usize = 0x1000_0000_0000;
/// The end of the last arena slot.
const ARENAS_END: usize = ARENA_BASE + 4096 * ARENA_STRIDE;

/// Whether `[addr, addr + len)` stays clear of the arenas and of the
/// addresses the fuzzer hands the kernel as never mapped (`Ptr::Wild`): a
/// mapping the kernel placed there (it never does: it places them top
/// down, far above) must not be kept.
pub fn clear_of_arenas(addr: usize, len: usize) -> bool {
    addr.saturating_add(len) <= WILD_LOW || addr >= ARENAS_END
}

/// A mapping of a file (perfmon's sampling buffer) that the kernel placed
/// (`mmap(NULL, ...)`, never `MAP_FIXED`), owned by the value: unmapped
/// when dropped by the process that made it (a forked child has no copy:
/// the buffer's mapping is not inherited, and whatever the child maps at
/// that address is not ours).
///
/// # Invariants
///
/// `[addr, addr + len)` is mapped by this process (`pid`), with `prot`,
/// and nothing else refers to it: the methods that may change the mapping
/// (a partial munmap or mprotect, mremap) take it back to this state or
/// give it up.
pub struct FileMap {
    addr: usize,
    len: usize,
    prot: i32,
    pid: u32,
}

/// The bytes a mapping of `len` covers (whole pages).
pub fn page_round(len: usize) -> usize {
    len.div_ceil(PAGE) * PAGE
}

impl FileMap {
    /// `mmap(NULL, len, prot, flags, fd, off)`; `flags` must not place the
    /// mapping (`MAP_FIXED` and `MAP_FIXED_NOREPLACE` are masked out).
    pub fn map(fd: i32, len: usize, prot: i32, flags: i32, off: i64) -> Result<FileMap, i32> {
        let flags = flags & !(libc::MAP_FIXED | libc::MAP_FIXED_NOREPLACE);
        // SAFETY: address NULL and no MAP_FIXED: the kernel picks free
        // space, nothing existing is replaced.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, off) };
        if p == libc::MAP_FAILED {
            return Err(errno());
        }
        // INVARIANT: the new mapping, of the pages covering `len`.
        Ok(FileMap {
            addr: p as usize,
            len: page_round(len),
            prot,
            pid: getpid(),
        })
    }

    /// Its address.
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// Its length (whole pages).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty (never: a mapping has a page).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its protection.
    pub fn prot(&self) -> i32 {
        self.prot
    }

    fn cell(&self, off: usize) -> &std::sync::atomic::AtomicU64 {
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        assert!(off % 8 == 0 && off + 8 <= self.len && self.prot & rw == rw);
        // SAFETY: an aligned word of the mapping, readable and writable
        // (checked), mapped as long as `self` lives (type invariant);
        // shared with the kernel, so only ever accessed as an atomic.
        unsafe { &*((self.addr + off) as *const std::sync::atomic::AtomicU64) }
    }

    /// An atomic load of the 64-bit word at byte `off` (a read-write
    /// mapping only).
    pub fn load(&self, off: usize, order: Ordering) -> u64 {
        self.cell(off).load(order)
    }

    /// An atomic store of `v` to the 64-bit word at byte `off` (a
    /// read-write mapping only).
    pub fn store(&self, off: usize, v: u64, order: Ordering) {
        self.cell(off).store(v, order)
    }

    /// `munmap` of `len` bytes at byte `start` of the mapping, a part of
    /// it. Refused, the mapping is intact and given back; done (the
    /// mapping was split), the rest is unmapped too and `None` returned.
    pub fn munmap_part(self, start: usize, len: usize) -> (Result<i64, i32>, Option<FileMap>) {
        assert!(start % PAGE == 0 && start + len <= self.len);
        // SAFETY: a range inside our own mapping, which no reference
        // points into (`cell`'s references do not outlive a call).
        let r =
            check(unsafe { libc::munmap((self.addr + start) as *mut libc::c_void, len) } as i64);
        if r.is_err() {
            return (r, Some(self));
        }
        let end = start + page_round(len);
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: what is left of our mapping: before the hole and after it.
        unsafe {
            if start > 0 {
                libc::munmap(me.addr as *mut libc::c_void, start);
            }
            if end < me.len {
                libc::munmap((me.addr + end) as *mut libc::c_void, me.len - end);
            }
        }
        (r, None)
    }

    /// `mprotect` of `len` bytes at byte `start` with `prot`. If the whole
    /// mapping changed, that is its protection now; if a part did (the
    /// mapping was split), the whole mapping is given `self.prot()` back.
    pub fn mprotect(&mut self, start: usize, len: usize, prot: i32) -> Result<i64, i32> {
        assert!(start % PAGE == 0 && start + len <= self.len);
        // SAFETY: a range of our own mapping; no reference points into it.
        let r = check(
            unsafe { libc::mprotect((self.addr + start) as *mut libc::c_void, len, prot) } as i64,
        );
        if r.is_ok() {
            if start == 0 && page_round(len) == self.len {
                self.prot = prot;
            } else {
                // SAFETY: as above, the whole mapping back as it was.
                unsafe { libc::mprotect(self.addr as *mut libc::c_void, self.len, self.prot) };
            }
        }
        r
    }

    /// `mremap(addr, len, new_len, flags, new_addr)` of the whole mapping.
    /// Done, the value follows the mapping (its new address and length);
    /// with `MREMAP_DONTUNMAP` the old range, left mapped, is unmapped.
    /// `new_addr` (with `MREMAP_FIXED`) must be a reservation of ours of
    /// `new_len` bytes ([`reserve`]), which the move replaces.
    pub fn mremap(&mut self, new_len: usize, flags: i32, new_addr: usize) -> Result<i64, i32> {
        // SAFETY: our own mapping; the target, if any, is the caller's
        // reservation; no reference points into either.
        let r = check(unsafe {
            libc::mremap(
                self.addr as *mut libc::c_void,
                self.len,
                new_len,
                flags,
                new_addr as *mut libc::c_void,
            )
        } as i64);
        if let Ok(p) = r {
            if flags & libc::MREMAP_DONTUNMAP != 0 {
                // SAFETY: the old range, ours, no longer this mapping's.
                unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
            }
            self.addr = p as usize;
            self.len = page_round(new_len);
        }
        r
    }

    /// `mremap(addr, 0, new_len, MREMAP_MAYMOVE)`: a second mapping of
    /// the same pages, which the kernel may refuse; made, it is unmapped
    /// at once.
    pub fn mremap_dup(&self, new_len: usize) -> Result<i64, i32> {
        // SAFETY: an old length of 0 leaves our mapping alone; a new
        // mapping, if any, is placed by the kernel in free space.
        let r = check(unsafe {
            libc::mremap(
                self.addr as *mut libc::c_void,
                0,
                new_len,
                libc::MREMAP_MAYMOVE,
            )
        } as i64);
        if let Ok(p) = r {
            // SAFETY: the mapping just made, ours.
            unsafe { libc::munmap(p as *mut libc::c_void, new_len) };
        }
        r
    }

    /// `madvise` of the whole mapping (`MADV_DOFORK`, `MADV_DONTFORK`).
    pub fn madvise(&self, advice: i32) -> Result<i64, i32> {
        // SAFETY: our own mapping; fork advice changes no contents.
        check(unsafe { libc::madvise(self.addr as *mut libc::c_void, self.len, advice) } as i64)
    }

    /// `munmap` of the whole mapping.
    pub fn unmap(self) -> Result<i64, i32> {
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: our own mapping, given up here.
        check(unsafe { libc::munmap(me.addr as *mut libc::c_void, me.len) } as i64)
    }
}

#[cfg(test)]
impl FileMap {
    /// The mapping at byte `off` as a `T` (host tests: a ring over a
    /// memfd, written by the module's own protocol code).
    ///
    /// # Safety
    ///
    /// `T` must be valid for any bytes, fit in the mapping from `off`,
    /// need at most page alignment, and be accessed through atomics only.
    pub unsafe fn view<T>(&self, off: usize) -> &T {
        assert!(off % PAGE == 0 && off + std::mem::size_of::<T>() <= self.len);
        // SAFETY: the caller's guarantees; mapped while `self` lives.
        unsafe { &*((self.addr + off) as *const T) }
    }
}

/// A memfd of `len` zeroed bytes (host tests).
#[cfg(test)]
pub fn memfd(len: usize) -> i32 {
    // SAFETY: a NUL-terminated name; no memory is shared with the kernel.
    let fd = unsafe { libc::memfd_create(c"pfm_fuzz".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", errno());
    // SAFETY: no memory is involved.
    assert_eq!(unsafe { libc::ftruncate(fd, len as i64) }, 0);
    fd
}

impl Drop for FileMap {
    fn drop(&mut self) {
        if self.pid == getpid() {
            // SAFETY: our own mapping (type invariant).
            unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
        }
    }
}

/// A reservation of `len` bytes of address space (an inaccessible
/// anonymous mapping the kernel placed), for an `mremap` with
/// `MREMAP_FIXED` to move a [`FileMap`] onto: the move replaces it, so no
/// other mapping of the process can be there. `None` if refused, or
/// placed among the arenas (then given back). A move that fails is not
/// followed by an unmap of the target: the kernel may have unmapped it
/// before failing, and another thread mapped something there since (a
/// reservation left behind costs address space only).
pub fn reserve(len: usize) -> Option<usize> {
    // SAFETY: a new anonymous mapping in free space.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    if !clear_of_arenas(p as usize, len) {
        // SAFETY: the mapping just made.
        unsafe { libc::munmap(p, len) };
        return None;
    }
    Some(p as usize)
}

/// A kernel address (the x86-64 direct map): access_ok refuses it.
pub const KERNEL_ADDR: usize = 0xffff_8880_0000_0000;

/// Reads a whole small file (sysfs, /proc) as text.
pub fn read_text(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// The state letter of task `tid` in /proc (R, S, D, T, Z, ...).
pub fn proc_state(pid: u32) -> Option<char> {
    let stat = read_text(&format!("/proc/{pid}/stat"))?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.trim_start().chars().next()
}

/// `finit_module(fd, params, 0)`: loads the module in file `fd`.
pub fn finit_module(fd: i32, params: &std::ffi::CStr) -> Result<i64, i32> {
    // SAFETY: `params` is NUL-terminated; the kernel only reads it.
    check(unsafe { libc::syscall(libc::SYS_finit_module, fd as i64, params.as_ptr(), 0i64) })
}

/// `delete_module(name, O_NONBLOCK)`: unloads module `name` (EBUSY/EWOULDBLOCK
/// while it is in use).
pub fn delete_module(name: &std::ffi::CStr) -> Result<i64, i32> {
    // SAFETY: `name` is NUL-terminated; the kernel only reads it.
    check(unsafe {
        libc::syscall(
            libc::SYS_delete_module,
            name.as_ptr(),
            libc::O_NONBLOCK as i64,
        )
    })
}

/// `pread(fd, buf, off)` into a Rust buffer.
pub fn pread_buf(fd: i32, buf: &mut [u8], off: i64) -> Result<usize, i32> {
    // SAFETY: `buf` is valid for writes of its length.
    check(unsafe { libc::pread(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), off) } as i64)
        .map(|n| n as usize)
}

/// `write(fd, data)`, one call: the number written or the errno.
pub fn write_once(fd: i32, data: &[u8]) -> Result<usize, i32> {
    // SAFETY: `data` is valid for reads of its length.
    check(unsafe { libc::write(fd, data.as_ptr() as *const libc::c_void, data.len()) } as i64)
        .map(|n| n as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of the anonymous inode links to `anon_inode:[name]` (a
    /// perfmon clone's to `anon_inode:[perfmon]`) and is no character
    /// device.
    /// A file mapping's parts and moves (a memfd's, which may be split:
    /// what the fuzzer does when the kernel wrongly lets a sampling
    /// mapping be split must leave nothing of it behind).
    #[test]
    fn file_maps_follow_their_mapping() {
        let fd = memfd(4 * PAGE);
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        let mut m = FileMap::map(fd, 3 * PAGE + 1, rw, libc::MAP_SHARED, 0).unwrap();
        assert_eq!(m.len(), 4 * PAGE);
        m.store(PAGE + 8, 42, Ordering::Relaxed);
        assert_eq!(m.load(PAGE + 8, Ordering::Relaxed), 42);
        // Moved onto a reservation: the value follows, the contents too.
        let target = reserve(4 * PAGE).unwrap();
        let r = m.mremap(4 * PAGE, libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED, target);
        assert_eq!(r, Ok(target as i64));
        assert_eq!(m.addr(), target);
        assert_eq!(m.load(PAGE + 8, Ordering::Relaxed), 42);
        // A partial mprotect of a splittable mapping: put back whole.
        assert!(m.mprotect(PAGE, PAGE, libc::PROT_READ).is_ok());
        m.store(PAGE + 8, 43, Ordering::Relaxed);
        // A part unmapped: the rest goes too, nothing is left mapped.
        let addr = m.addr();
        let (r, back) = m.munmap_part(PAGE, PAGE);
        assert!(r.is_ok() && back.is_none());
        // SAFETY: probing our own former range with a placement that
        // never replaces anything; unmapped again at once.
        let p = unsafe {
            libc::mmap(
                addr as *mut libc::c_void,
                4 * PAGE,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        assert_eq!(p as usize, addr, "something of the mapping was left");
        // SAFETY: the probe just made.
        unsafe { libc::munmap(p, 4 * PAGE) };
        close(fd).unwrap();
    }

    #[test]
    fn fd_link_names_anonymous_files() {
        // SAFETY: no memory is involved.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        assert!(fd >= 0, "epoll_create1: {}", errno());
        assert_eq!(fd_link(fd).as_deref(), Some("anon_inode:[eventpoll]"));
        assert!(fstat_rdev(fd).is_none());
        close(fd).unwrap();
    }
}
