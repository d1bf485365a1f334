//! Becoming another user: the tests run as root and drop to pfmuser (1000)
//! or nobody (65534), usually in a forked child, to check the permission
//! rules.

use crate::raw::errno;

/// Drops to user `uid` and group `gid` (real, effective and saved), with no
/// supplementary groups.
pub fn become_user(uid: u32, gid: u32) -> Result<(), i32> {
    // SAFETY: no pointers beyond NULL with a zero count; the order matters
    // (groups first, while still privileged).
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

/// `capset(2)` of the calling thread: `permitted` and `effective` (bit
/// masks of capabilities below 32), nothing inheritable.
pub fn set_caps(permitted: u32, effective: u32) -> Result<(), i32> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let h = Header {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let mut d = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    d[0].effective = effective;
    d[0].permitted = permitted;
    // SAFETY: a valid header and the two data words version 3 takes.
    if unsafe { libc::syscall(libc::SYS_capset, &h, d.as_ptr()) } == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

/// Root becomes `uid`/`gid` keeping the capabilities `caps` (below 32)
/// permitted and effective, as a KEEPCAPS daemon does: a target that
/// ptrace's rule keeps from a loader of the same user without them. The
/// uid change leaves the process non-dumpable, as any does.
pub fn become_user_keeping(uid: u32, gid: u32, caps: u32) -> Result<(), i32> {
    // SAFETY: no memory is involved.
    if unsafe { libc::prctl(libc::PR_SET_KEEPCAPS, 1 as libc::c_ulong) } != 0 {
        return Err(errno());
    }
    become_user(uid, gid)?;
    set_caps(caps, caps)
}

/// The effective user id.
pub fn geteuid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() }
}

/// Whether the caller runs as root (CAP_PERFMON: kernel-mode counting,
/// other users' threads).
pub fn privileged() -> bool {
    geteuid() == 0
}
