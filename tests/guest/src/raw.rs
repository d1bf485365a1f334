//! Deliberate misuse of the ABI, and the few process calls the tests need
//! that the library does not offer. All `unsafe` of the test crate is here.
//!
//! Raw ioctls never hand the kernel a pointer into Rust-owned memory: an
//! argument structure is copied into [`ArgBuf`] (16 KiB, so any size an
//! ioctl number can encode fits), register arrays live in a [`RegsArea`]
//! (mmap'd memory only accessed by copy), and bad addresses are described
//! by [`BadAddr`], which can only name memory the kernel cannot write.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};

pub use perfmon::abi;

/// Page size assumed for the mappings below (x86-64).
pub const PAGE: usize = 4096;

/// `_IOC(dir, type, nr, size)` as on x86: dir 0 none, 1 write, 2 read.
pub const fn ioc(dir: u32, ty: u32, nr: u32, size: u32) -> u32 {
    (dir << 30) | ((size & 0x3fff) << 16) | ((ty & 0xff) << 8) | (nr & 0xff)
}

/// The same ioctl number with another size field.
pub const fn with_size(req: u32, size: u32) -> u32 {
    (req & !(0x3fff << 16)) | ((size & 0x3fff) << 16)
}

/// Plain-data types that may be copied to and from the kernel as bytes.
///
/// # Safety
///
/// Implementors must be `repr(C)`, contain no references, and accept any
/// bit pattern.
pub unsafe trait Plain: Copy + Default {}
// SAFETY: ABI structures: repr(C), integer fields only.
unsafe impl Plain for abi::PfmPmc {}
// SAFETY: as above.
unsafe impl Plain for abi::PfmPmd {}
// SAFETY: as above.
unsafe impl Plain for abi::PfmRegsArg {}
// SAFETY: as above.
unsafe impl Plain for abi::PfmLoad {}
// SAFETY: as above.
unsafe impl Plain for abi::PfmCtxFlags {}
// SAFETY: as above.
unsafe impl Plain for abi::PfmCtxInfo {}
// SAFETY: as above.
unsafe impl Plain for abi::PfmInfo {}
// SAFETY: as above.
unsafe impl Plain for abi::PfmMsg {}
// SAFETY: integers.
unsafe impl Plain for u64 {}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
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

/// An ioctl without argument (0 is passed).
pub fn ioctl_none(fd: RawFd, req: u32) -> Result<i32, i32> {
    // SAFETY: 0 is not a pointer the kernel can write through.
    let r = unsafe { libc::ioctl(fd, req as _, 0usize) };
    if r == -1 {
        Err(errno())
    } else {
        Ok(r)
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

/// Drops to user `uid` and group `gid` (real, effective and saved).
pub fn become_user(uid: u32, gid: u32) -> Result<(), i32> {
    // SAFETY: no pointers; order matters (groups first, while privileged).
    unsafe {
        if libc::setgroups(0, std::ptr::null()) == -1
            || libc::setresgid(gid, gid, gid) == -1
            || libc::setresuid(uid, uid, uid) == -1
        {
            return Err(errno());
        }
    }
    Ok(())
}

/// The effective user id.
pub fn geteuid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() }
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

/// The raw fd of anything that has one.
pub fn fd_of(f: &impl AsRawFd) -> RawFd {
    f.as_raw_fd()
}

#[cfg(test)]
mod tests {
    use super::*;

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
