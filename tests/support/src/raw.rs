//! The raw ioctl layer: `/dev/perfmon` calls as the kernel sees them, for
//! the tests that make calls the library would not (wrong sizes, bad
//! states) or that must not go through it. Errors are errnos.
//!
//! The argument of an ioctl here is either nothing ([`ioctl_none`]) or a
//! [`Plain`] structure at least as large as the size the request encodes
//! ([`ioctl_ref`] checks it), so the kernel never writes past Rust memory.
//! Calls with deliberately bad addresses stay with the crates that build
//! such addresses out of memory Rust does not use.

use std::os::fd::RawFd;

pub use perfmon::abi;

/// The calling thread's errno.
pub fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Turns a raw `-1`-and-errno result into `Ok(value)` or `Err(errno)`.
pub fn check(r: i64) -> Result<i64, i32> {
    if r == -1 {
        Err(errno())
    } else {
        Ok(r)
    }
}

/// `_IOC(dir, type, nr, size)` as on x86: dir 0 none, 1 write, 2 read.
pub const fn ioc(dir: u32, ty: u32, nr: u32, size: u32) -> u32 {
    (dir << 30) | ((size & 0x3fff) << 16) | ((ty & 0xff) << 8) | (nr & 0xff)
}

/// The size field of an ioctl request.
pub const fn ioc_size(req: u32) -> usize {
    ((req >> 16) & 0x3fff) as usize
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
unsafe impl Plain for abi::PfmClone {}
// SAFETY: as above.
unsafe impl Plain for abi::PfmCtxFlags {}
// SAFETY: as above.
unsafe impl Plain for abi::PfmCtxInfo {}
// SAFETY: as above.
unsafe impl Plain for abi::PfmInfo {}
// SAFETY: as above.
unsafe impl Plain for abi::PfmMsg {}
// SAFETY: as above.
unsafe impl Plain for abi::PfmValues {}
// SAFETY: as above.
unsafe impl Plain for abi::PfmSetsArg {}
// SAFETY: as above.
unsafe impl Plain for abi::PfmSetdesc {}
// SAFETY: as above.
unsafe impl Plain for abi::PfmSetinfo {}
// SAFETY: as above.
unsafe impl Plain for abi::PfmThread {}
// SAFETY: as above.
unsafe impl Plain for abi::PfmThreadsArg {}
// SAFETY: integers.
unsafe impl Plain for u64 {}

/// An ioctl without argument (0 is passed).
pub fn ioctl_none(fd: RawFd, req: u32) -> Result<i32, i32> {
    // SAFETY: 0 is not an address the kernel can write through; the fd is
    // only a number to the kernel.
    let r = unsafe { libc::ioctl(fd, req as _, 0usize) };
    check(i64::from(r)).map(|r| r as i32)
}

/// An ioctl whose argument is `arg`, for a request whose encoded size is at
/// most `size_of::<T>()`; `Err(EOVERFLOW)`, without a call, for a larger
/// one (the kernel would write past `arg`). Register arrays that `arg`
/// points to are the caller's to keep alive across the call.
pub fn ioctl_ref<T: Plain>(fd: RawFd, req: u32, arg: &mut T) -> Result<i32, i32> {
    if ioc_size(req) > std::mem::size_of::<T>() {
        return Err(libc::EOVERFLOW);
    }
    // SAFETY: `arg` is valid for reads and writes of `size_of::<T>()`
    // bytes, at least the size the request lets the kernel touch; any bit
    // pattern the kernel writes is a valid `T` (`Plain`).
    let r = unsafe { libc::ioctl(fd, req as _, arg as *mut T) };
    check(i64::from(r)).map(|r| r as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers() {
        assert_eq!(ioc(2, 0xB6, 0, 872), abi::PFM_IOC_GET_INFO);
        assert_eq!(ioc_size(abi::PFM_IOC_GET_INFO), 872);
        assert_eq!(ioc_size(abi::PFM_IOC_START), 0);
    }

    #[test]
    fn oversized_requests_are_refused_before_the_call() {
        let mut small = abi::PfmLoad::default();
        // GET_INFO's 872 bytes do not fit a pfm_load: no call is made (fd -1
        // would give EBADF if one were).
        assert_eq!(
            ioctl_ref(-1, abi::PFM_IOC_GET_INFO, &mut small),
            Err(libc::EOVERFLOW)
        );
        assert_eq!(
            ioctl_ref(-1, abi::PFM_IOC_LOAD, &mut small),
            Err(libc::EBADF)
        );
        assert_eq!(ioctl_none(-1, abi::PFM_IOC_START), Err(libc::EBADF));
    }
}
