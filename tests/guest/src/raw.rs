//! Deliberate misuse of the ABI, and the few process calls the tests need
//! that neither the library nor `pfm_test_support` offers. All `unsafe` of
//! the test crate is here.
//!
//! Raw ioctls never hand the kernel a pointer into Rust-owned memory: an
//! argument structure is copied into [`ArgBuf`] (16 KiB, so any size an
//! ioctl number can encode fits), register arrays live in a [`RegsArea`]
//! (mmap'd memory only accessed by copy), and bad addresses are described
//! by [`BadAddr`], which can only name memory the kernel cannot write.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};

pub use pfm_test_support::raw::{abi, errno, ioc, ioctl_none, Plain};
pub use pfm_test_support::user::{become_user, geteuid};

/// Page size assumed for the mappings below (x86-64).
pub const PAGE: usize = 4096;

/// The same ioctl number with another size field.
pub const fn with_size(req: u32, size: u32) -> u32 {
    (req & !(0x3fff << 16)) | ((size & 0x3fff) << 16)
}

/// An anonymous private mapping, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    addr: usize,
    len: usize,
}

impl Mapping {
    /// Maps `pages` zeroed pages with protection `prot` (PROT_*).
    pub fn new(pages: usize, prot: i32) -> Result<Self, i32> {
        let len = pages * PAGE;
        // SAFETY: a fresh anonymous mapping; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(errno());
        }
        Ok(Mapping {
            addr: p as usize,
            len,
        })
    }

    /// Start address.
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never, in practice).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Changes the protection of pages `first..first + count`.
    pub fn protect(&self, first: usize, count: usize, prot: i32) -> Result<(), i32> {
        assert!((first + count) * PAGE <= self.len);
        // SAFETY: the range lies inside our own mapping, which no Rust
        // reference points into.
        let r = unsafe {
            libc::mprotect(
                (self.addr + first * PAGE) as *mut libc::c_void,
                count * PAGE,
                prot,
            )
        };
        if r == -1 {
            Err(errno())
        } else {
            Ok(())
        }
    }

    /// Copies `v` to byte offset `off` (the page must be writable).
    pub fn write<T: Plain>(&self, off: usize, v: &T) {
        assert!(off + std::mem::size_of::<T>() <= self.len);
        // SAFETY: in bounds (checked); unaligned write of plain data into
        // our own mapping, which no Rust reference points into.
        unsafe { std::ptr::write_unaligned((self.addr + off) as *mut T, *v) }
    }

    /// Copies a `T` out of byte offset `off` (the page must be readable).
    pub fn read<T: Plain>(&self, off: usize) -> T {
        assert!(off + std::mem::size_of::<T>() <= self.len);
        // SAFETY: in bounds; any bit pattern is a valid `T`.
        unsafe { std::ptr::read_unaligned((self.addr + off) as *const T) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping; nothing refers into it.
        unsafe {
            libc::munmap(self.addr as *mut libc::c_void, self.len);
        }
    }
}

/// An address of memory that cannot be read from or written to by the
/// kernel on our behalf, or only read.
#[derive(Debug)]
pub enum BadAddr<'a> {
    /// NULL.
    Null,
    /// The start of a PROT_NONE mapping.
    NoAccess(&'a Mapping),
    /// The start of a read-only mapping.
    ReadOnly(&'a Mapping),
    /// An address that was unmapped (see [`Hole`]).
    Unmapped(usize),
    /// A kernel address (the direct map on x86-64).
    Kernel,
}

impl BadAddr<'_> {
    /// The address.
    pub fn addr(&self) -> usize {
        match self {
            BadAddr::Null => 0,
            BadAddr::NoAccess(m) | BadAddr::ReadOnly(m) => m.addr(),
            BadAddr::Unmapped(a) => *a,
            BadAddr::Kernel => 0xffff_8880_0000_0000,
        }
    }
}

/// A one-page hole in the middle of a three-page mapping: its address was
/// mapped and is now unmapped, and stays so while the `Hole` lives (new
/// mappings of more than one page cannot land in it, and the tests make no
/// one-page mapping meanwhile).
#[derive(Debug)]
pub struct Hole {
    map: Mapping,
}

impl Hole {
    /// Maps three pages and unmaps the middle one.
    pub fn new() -> Result<Self, i32> {
        let map = Mapping::new(3, libc::PROT_READ | libc::PROT_WRITE)?;
        // SAFETY: unmaps a page of our own mapping that nothing refers to;
        // `Drop` of `Mapping` later unmaps the whole range, which is fine
        // for a partly unmapped range.
        if unsafe { libc::munmap((map.addr() + PAGE) as *mut libc::c_void, PAGE) } == -1 {
            return Err(errno());
        }
        Ok(Hole { map })
    }

    /// The unmapped address.
    pub fn addr(&self) -> usize {
        self.map.addr() + PAGE
    }
}

/// An ioctl whose argument points at a bad address (see [`BadAddr`]).
pub fn ioctl_bad(fd: RawFd, req: u32, addr: &BadAddr<'_>) -> Result<i32, i32> {
    // SAFETY: the address cannot be written by the kernel (NULL, PROT_NONE,
    // read-only, unmapped, or a kernel address that copy_to_user refuses).
    let r = unsafe { libc::ioctl(fd, req as _, addr.addr()) };
    if r == -1 {
        Err(errno())
    } else {
        Ok(r)
    }
}

/// A 16 KiB zeroed buffer: any size an ioctl number encodes fits.
struct ArgBuf {
    map: Mapping,
}

/// An ioctl with `val` as its argument, whatever size `req` encodes: `val`
/// is copied into a 16 KiB buffer, the ioctl gets the buffer, and `val`
/// gets the first `size_of::<T>()` bytes back.
pub fn ioctl_in<T: Plain>(fd: RawFd, req: u32, val: &mut T) -> Result<i32, i32> {
    let buf = ArgBuf {
        map: Mapping::new(4, libc::PROT_READ | libc::PROT_WRITE)?,
    };
    buf.map.write(0, val);
    // SAFETY: the argument is our own 16 KiB mapping, larger than any size
    // encodable in `req`; user pointers inside `val` (register arrays)
    // point into `RegsArea` mappings or at bad addresses, never into memory
    // Rust references.
    let r = unsafe { libc::ioctl(fd, req as _, buf.map.addr()) };
    *val = buf.map.read(0);
    if r == -1 {
        Err(errno())
    } else {
        Ok(r)
    }
}

/// Room for register arrays: `pages` read-write pages followed by one
/// PROT_NONE guard page, so that an array can be made to run into memory
/// the kernel cannot read.
#[derive(Debug)]
pub struct RegsArea {
    map: Mapping,
    rw: usize,
}

impl RegsArea {
    /// An area of `pages` read-write pages and a guard page.
    pub fn new(pages: usize) -> Result<Self, i32> {
        let map = Mapping::new(pages + 1, libc::PROT_READ | libc::PROT_WRITE)?;
        map.protect(pages, 1, libc::PROT_NONE)?;
        Ok(RegsArea {
            map,
            rw: pages * PAGE,
        })
    }

    /// Bytes of the read-write part.
    pub fn rw_len(&self) -> usize {
        self.rw
    }

    /// User address of byte offset `off` (as the ABI's `regs` field).
    pub fn addr(&self, off: usize) -> u64 {
        (self.map.addr() + off) as u64
    }

    /// Address of the guard page.
    pub fn guard(&self) -> u64 {
        self.addr(self.rw)
    }

    /// Stores `elems` from byte offset `off`; elements past the read-write
    /// part are not stored (they lie in the guard page).
    pub fn put<T: Plain>(&self, off: usize, elems: &[T]) {
        let sz = std::mem::size_of::<T>();
        for (i, e) in elems.iter().enumerate() {
            if off + (i + 1) * sz <= self.rw {
                self.map.write(off + i * sz, e);
            }
        }
    }

    /// Loads `n` elements from byte offset `off`.
    pub fn get<T: Plain>(&self, off: usize, n: usize) -> Vec<T> {
        let sz = std::mem::size_of::<T>();
        (0..n).map(|i| self.map.read(off + i * sz)).collect()
    }

    /// Makes the read-write part read-only (true) or read-write again.
    pub fn set_read_only(&self, ro: bool) -> Result<(), i32> {
        let prot = if ro {
            libc::PROT_READ
        } else {
            libc::PROT_READ | libc::PROT_WRITE
        };
        self.map.protect(0, self.rw / PAGE, prot)
    }
}

/// `read(2)` of up to `len` bytes into a fresh buffer.
pub fn read_fd(fd: RawFd, len: usize) -> Result<Vec<u8>, i32> {
    let mut buf = vec![0u8; len];
    // SAFETY: `buf` is valid for `len` bytes of writes.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, len) };
    if n < 0 {
        return Err(errno());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// `write(2)` of `data`.
pub fn write_fd(fd: RawFd, data: &[u8]) -> Result<usize, i32> {
    // SAFETY: `data` is valid for `data.len()` bytes of reads.
    let n = unsafe { libc::write(fd, data.as_ptr() as *const libc::c_void, data.len()) };
    if n < 0 {
        Err(errno())
    } else {
        Ok(n as usize)
    }
}

/// A pipe: (read end, write end), close-on-exec.
pub fn pipe() -> Result<(File, File), i32> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for two fds.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == -1 {
        return Err(errno());
    }
    // SAFETY: two new fds owned by nobody else.
    Ok(unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) })
}

/// Asks for SIGKILL when the parent dies (children of the tests must not
/// outlive them and keep the module busy).
pub fn die_with_parent() {
    // SAFETY: PR_SET_PDEATHSIG takes a signal number.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
    }
}

/// `sched_yield()`.
pub fn sched_yield() {
    // SAFETY: no preconditions.
    unsafe {
        libc::sched_yield();
    }
}

/// poll(2) on one fd for `events`; returns revents (0 on timeout).
pub fn poll_one(fd: RawFd, events: i16, timeout_ms: i32) -> Result<i16, i32> {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    if r == -1 {
        Err(errno())
    } else {
        Ok(p.revents)
    }
}

/// Closes a descriptor a raw call returned (a `PFM_IOC_CLONE`'s).
pub fn close(fd: RawFd) {
    // SAFETY: the caller owns `fd` and uses it no more.
    unsafe { libc::close(fd) };
}

/// The raw fd of anything that has one.
pub fn fd_of(f: &impl AsRawFd) -> RawFd {
    f.as_raw_fd()
}

/// One `ioctl(fd, request, arg)` a traced program made, as seen at its
/// return: the argument (an address in the program) and the result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TracedIoctl {
    /// The traced process.
    pub pid: u32,
    /// The third argument.
    pub arg: u64,
    /// The return value (-errno on failure).
    pub ret: i64,
}

/// Whether this kernel has ptrace(2) (tinyconfig kernels may not: ENOSYS).
pub fn ptrace_available() -> bool {
    // SAFETY: a request about pid 0, which is nobody's tracee: ESRCH where
    // ptrace exists, ENOSYS where it does not; no memory is passed.
    let r = unsafe { libc::ptrace(libc::PTRACE_GETREGS, 0, 0usize, 0usize) };
    !(r == -1 && errno() == libc::ENOSYS)
}

/// What a traced program left: its wait status and its output.
#[derive(Debug)]
pub struct Traced {
    /// The wait status (`WIFEXITED` ...).
    pub status: i32,
    /// Its standard output.
    pub stdout: Vec<u8>,
    /// Its standard error.
    pub stderr: Vec<u8>,
}

/// Runs `path ARGS` (environment: ours plus `env`; stdin /dev/null) under
/// ptrace until it exits, stopping it at every system call return:
/// `on_ioctl` sees each `ioctl(_, request, _)` while the program is
/// stopped, so it can read the program's memory (`/proc/PID/mem`) as the
/// kernel saw it. Only the program's own thread is traced, not the
/// processes it starts. (fork and exec by hand: std's spawn with a
/// `pre_exec` PTRACE_TRACEME fails with ENOSYS in the test guests.)
pub fn trace_ioctls(
    path: &str,
    args: &[&str],
    env: &[(&str, &str)],
    request: u32,
    mut on_ioctl: impl FnMut(TracedIoctl),
) -> Result<Traced, String> {
    use std::ffi::CString;
    use std::io::Read;
    let cstr = |s: &str| CString::new(s).map_err(|_| format!("NUL in {s:?}"));
    let c_path = cstr(path)?;
    let mut c_argv = vec![c_path.clone()];
    for a in args {
        c_argv.push(cstr(a)?);
    }
    let mut vars: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| !env.iter().any(|(e, _)| e == k))
        .collect();
    vars.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let c_env = vars
        .iter()
        .map(|(k, v)| cstr(&format!("{k}={v}")))
        .collect::<Result<Vec<_>, _>>()?;
    let mut argv: Vec<*const libc::c_char> = c_argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = c_env.iter().map(|a| a.as_ptr()).collect();
    envp.push(std::ptr::null());
    let devnull = c"/dev/null";
    let (out_r, out_w) = pipe().map_err(|e| format!("pipe: {e}"))?;
    let (err_r, err_w) = pipe().map_err(|e| format!("pipe: {e}"))?;

    // SAFETY: the child branch makes only async-signal-safe calls on data
    // prepared before the fork (NUL-terminated strings and NULL-terminated
    // arrays that the parent keeps alive) and never returns.
    let pid = unsafe { libc::fork() };
    if pid == -1 {
        return Err(format!("fork: {}", perfmon::errno_name(errno())));
    }
    if pid == 0 {
        // SAFETY: as above: child side of the fork.
        unsafe {
            let null = libc::open(devnull.as_ptr(), libc::O_RDONLY);
            if null == -1
                || libc::dup2(null, 0) == -1
                || libc::dup2(out_w.as_raw_fd(), 1) == -1
                || libc::dup2(err_w.as_raw_fd(), 2) == -1
                || libc::ptrace(libc::PTRACE_TRACEME, 0, 0usize, 0usize) == -1
            {
                libc::_exit(126);
            }
            libc::execve(c_path.as_ptr(), argv.as_ptr(), envp.as_ptr());
            libc::_exit(127);
        }
    }
    drop(out_w);
    drop(err_w);
    // The pipes are drained while the program runs: a program blocked on a
    // full pipe would never reach its next stop.
    let drain = |mut f: File| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = f.read_to_end(&mut buf);
            buf
        })
    };
    let (out_t, err_t) = (drain(out_r), drain(err_r));
    let wait = || -> Result<i32, String> {
        let mut status = 0;
        loop {
            // SAFETY: `status` is a valid out-pointer; `pid` is our child.
            if unsafe { libc::waitpid(pid, &mut status, 0) } != -1 {
                return Ok(status);
            }
            if errno() != libc::EINTR {
                return Err(format!("waitpid: {}", perfmon::errno_name(errno())));
            }
        }
    };
    let kill = || {
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let _ = wait();
    };
    // The exec stops it with SIGTRAP.
    let status = wait()?;
    if !libc::WIFSTOPPED(status) || libc::WSTOPSIG(status) != libc::SIGTRAP {
        return Err(format!(
            "traced child did not stop at its exec (status {status:#x})"
        ));
    }
    // SAFETY: `pid` is our stopped tracee; the options are plain flags.
    if unsafe {
        libc::ptrace(
            libc::PTRACE_SETOPTIONS,
            pid,
            0usize,
            (libc::PTRACE_O_TRACESYSGOOD | libc::PTRACE_O_EXITKILL) as usize,
        )
    } == -1
    {
        let e = perfmon::errno_name(errno());
        kill();
        return Err(format!("PTRACE_SETOPTIONS: {e}"));
    }
    let mut deliver = 0usize;
    let status = loop {
        // SAFETY: resumes our stopped tracee, delivering `deliver` (0 or
        // the signal it stopped with).
        if unsafe { libc::ptrace(libc::PTRACE_SYSCALL, pid, 0usize, deliver) } == -1 {
            let e = perfmon::errno_name(errno());
            kill();
            return Err(format!("PTRACE_SYSCALL: {e}"));
        }
        let status = wait()?;
        if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            break status;
        }
        if !libc::WIFSTOPPED(status) {
            continue;
        }
        let sig = libc::WSTOPSIG(status);
        if sig != (libc::SIGTRAP | 0x80) {
            // A signal for the program (SIGCHLD of its command): pass it on.
            deliver = sig as usize;
            continue;
        }
        deliver = 0;
        // SAFETY: plain data, filled by PTRACE_GETREGS below.
        let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        // SAFETY: `regs` is a valid user_regs_struct for our stopped tracee.
        if unsafe { libc::ptrace(libc::PTRACE_GETREGS, pid, 0usize, &mut regs as *mut _) } == -1 {
            let e = perfmon::errno_name(errno());
            kill();
            return Err(format!("PTRACE_GETREGS: {e}"));
        }
        // Entry stops have rax = -ENOSYS; returns have the result.
        let entry = regs.rax as i64 == -(libc::ENOSYS as i64);
        if regs.orig_rax == libc::SYS_ioctl as u64 && regs.rsi as u32 == request && !entry {
            on_ioctl(TracedIoctl {
                pid: pid as u32,
                arg: regs.rdx,
                ret: regs.rax as i64,
            });
        }
    };
    Ok(Traced {
        status,
        stdout: out_t.join().unwrap_or_default(),
        stderr: err_t.join().unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traces_a_programs_ioctls() {
        assert!(ptrace_available(), "the host has ptrace");
        // stty asks the terminal driver of /dev/null for its settings
        // (TCGETS), which is not a terminal: ENOTTY, seen at the return.
        let stty = perfmon::process::find_program("stty".as_ref()).unwrap();
        let mut seen = Vec::new();
        let t = trace_ioctls(
            &stty.to_string_lossy(),
            &["-F", "/dev/null"],
            &[("LC_ALL", "C")],
            libc::TCGETS as u32,
            |c| seen.push(c),
        )
        .unwrap();
        assert!(libc::WIFEXITED(t.status) && libc::WEXITSTATUS(t.status) != 0);
        assert!(!t.stderr.is_empty(), "stty says why on stderr");
        assert!(!seen.is_empty(), "no TCGETS seen");
        assert!(
            seen.iter().all(|c| c.ret == -(libc::ENOTTY as i64)),
            "{seen:?}"
        );
        assert!(seen.iter().all(|c| c.arg != 0));
    }

    #[test]
    fn ioctl_numbers() {
        assert_eq!(ioc(2, 0xB6, 0, 872), abi::PFM_IOC_GET_INFO);
        assert_eq!(with_size(abi::PFM_IOC_GET_INFO, 871), 0x8367_B600);
        assert_eq!(with_size(abi::PFM_IOC_START, 8), 0x0008_B606);
    }

    #[test]
    fn regs_area_guard_faults_in_the_kernel() {
        let area = RegsArea::new(1).unwrap();
        let pmd = abi::PfmPmd {
            reg_value: 7,
            ..Default::default()
        };
        area.put(area.rw_len() - 64, &[pmd, pmd]);
        assert_eq!(
            area.get::<abi::PfmPmd>(area.rw_len() - 64, 1)[0].reg_value,
            7
        );
        // The kernel cannot read the guard page: write(2) from it fails.
        let (_r, w) = pipe().unwrap();
        // SAFETY: reading from the guard page only; it must fault in the kernel.
        let n = unsafe { libc::write(w.as_raw_fd(), area.guard() as *const libc::c_void, 8) };
        assert_eq!(n, -1);
        assert_eq!(errno(), libc::EFAULT);
    }

    #[test]
    fn arg_buffer_round_trips() {
        // An ioctl the pipe does not know: ENOTTY, and the value comes back.
        let (r, _w) = pipe().unwrap();
        let mut load = abi::PfmLoad {
            tid: 5,
            ..Default::default()
        };
        assert_eq!(
            ioctl_in(r.as_raw_fd(), abi::PFM_IOC_LOAD, &mut load),
            Err(libc::ENOTTY)
        );
        assert_eq!(load.tid, 5);
    }
}

/// A mapping of a file (a perfmon fd's counter page), unmapped on drop
/// unless [`FileMap::leak`]ed.
#[derive(Debug)]
pub struct FileMap {
    addr: usize,
    len: usize,
}

impl FileMap {
    /// `mmap(NULL, len, prot, flags, fd, off)`.
    pub fn new(fd: RawFd, len: usize, prot: i32, flags: i32, off: i64) -> Result<Self, i32> {
        // SAFETY: a fresh mapping at an address the kernel picks; no existing
        // memory is affected.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, off) };
        if p == libc::MAP_FAILED {
            return Err(errno());
        }
        Ok(FileMap {
            addr: p as usize,
            len,
        })
    }

    /// `mprotect` of the whole mapping.
    pub fn protect(&self, prot: i32) -> Result<(), i32> {
        // SAFETY: our own mapping; changing its protection affects only it.
        let r = unsafe { libc::mprotect(self.addr as *mut libc::c_void, self.len, prot) };
        if r != 0 {
            return Err(errno());
        }
        Ok(())
    }

    /// The `u32` at byte `off` (a volatile read: the kernel changes it).
    pub fn read_u32(&self, off: usize) -> u32 {
        assert!(off + 4 <= self.len && off % 4 == 0);
        // SAFETY: inside our readable mapping, aligned.
        unsafe { std::ptr::read_volatile((self.addr + off) as *const u32) }
    }

    /// Whether `mremap` can grow it in place or by moving (`Ok`), or the errno.
    pub fn try_grow(&self) -> Result<(), i32> {
        // SAFETY: growing our own mapping; MREMAP_MAYMOVE moves it only if the
        // kernel allows, and then unmaps nothing else. Undone below.
        let p = unsafe { libc::mremap(self.addr as *mut libc::c_void, self.len, self.len * 2, 0) };
        if p == libc::MAP_FAILED {
            return Err(errno());
        }
        Ok(())
    }
}

impl Drop for FileMap {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

/// Runs `f` in a forked child (the mappings inherited) and returns its exit
/// status. `f` must not allocate or take locks another thread may hold (a
/// forked child of a threaded program has only the forking thread).
pub fn in_forked_child(f: impl FnOnce() -> i32) -> Result<i32, i32> {
    // SAFETY: the child runs only `f`, then `_exit`, without unwinding.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(errno());
    }
    if pid == 0 {
        let code = f();
        // SAFETY: ends the child without running the parent's atexit work.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for our own child; `status` is a valid out-pointer.
    if unsafe { libc::waitpid(pid, &mut status, 0) } != pid {
        return Err(errno());
    }
    Ok(if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    })
}
