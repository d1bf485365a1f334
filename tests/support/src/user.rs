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
