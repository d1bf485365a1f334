// SPDX-License-Identifier: GPL-2.0

//! Integer sysctl files (`/proc/sys/...`) for the settings 6.12 does not
//! export to modules (`perf_event_paranoid`, Yama's `ptrace_scope`), read
//! the way user space would.
//!
//! Each is opened once, at module load, and read at every check: opening it
//! at every `open(/dev/perfmon)` walked the path (`link_path_walk`,
//! `lookup_fast`, `proc_sys_permission`, `do_dentry_open`...), about 2,700
//! of the 18,600 guest instructions of an attach cycle (`make
//! bench-profile`), where perf reads a variable. The settings are global
//! (not per namespace), so one open file sees the value every caller
//! would; a read still asks `sysctl_perm` with the caller's credentials.

use kernel::bindings;
use kernel::prelude::*;
use kernel::str::CStr;

/// The value of an integer sysctl file, opened and read now: `Ok(None)` if
/// it does not exist (`ENOENT`), `Err` if it could not be read or parsed.
/// Process context.
pub(crate) fn read_sysctl_int(path: &CStr) -> Result<Option<i32>> {
    match open(path)? {
        Some(file) => {
            let r = read_int(file);
            // SAFETY: Opened above; no owner (not an fd table's file).
            unsafe { bindings::filp_close(file, core::ptr::null_mut()) };
            r.map(Some)
        }
        None => Ok(None),
    }
}

/// `path` opened read-only: `None` if it does not exist.
fn open(path: &CStr) -> Result<Option<*mut bindings::file>> {
    // SAFETY: `path` is a NUL-terminated string; read-only open.
    let file = unsafe { bindings::filp_open(path.as_char_ptr(), bindings::O_RDONLY as i32, 0) };
    // ERR_PTR values are the top 4095 addresses.
    let addr = file as isize;
    if (-4095..0).contains(&addr) {
        let errno = addr as i32;
        return if errno == -(bindings::ENOENT as i32) {
            Ok(None)
        } else {
            Err(Error::from_errno(errno))
        };
    }
    if file.is_null() {
        return Err(EIO);
    }
    Ok(Some(file))
}

/// The integer an open sysctl file reads, from its start.
fn read_int(file: *mut bindings::file) -> Result<i32> {
    let mut buf = [0u8; 16];
    let mut pos: bindings::loff_t = 0;
    // SAFETY: `file` is open (the callers'); `buf` is valid for its length.
    // The position is ours: concurrent reads of one file do not interfere.
    let n = unsafe { bindings::kernel_read(file, buf.as_mut_ptr().cast(), buf.len(), &mut pos) };
    let n = usize::try_from(n).map_err(|_| EIO)?.min(buf.len());
    let text = core::str::from_utf8(&buf[..n]).map_err(|_| EIO)?;
    text.trim().parse().map_err(|_| EIO)
}

/// A sysctl file as found at module load.
enum Found {
    /// Open: read at each check.
    Open(*mut bindings::file),
    /// It does not exist (no Yama): it will not appear later (sysctl
    /// tables of built-in code are registered at boot).
    Absent,
    /// Not readable at load (say, no /proc in the root of `insmod`):
    /// opened at each check, as the caller's root allows.
    Unavailable,
}

/// An integer sysctl file opened once (see the module's comment).
///
/// # Invariants
///
/// A `Found::Open` file was opened by [`SysctlFile::open`] and is closed
/// only by `drop`.
pub(crate) struct SysctlFile {
    path: &'static CStr,
    found: Found,
}

// SAFETY: An open `struct file` is reference counted and may be read from
// any thread; each read uses its own position.
unsafe impl Send for SysctlFile {}
// SAFETY: See `Send`: reads do not modify the file's own state.
unsafe impl Sync for SysctlFile {}

impl SysctlFile {
    /// `path`, opened now if it can be. Process context (module load).
    pub(crate) fn open(path: &'static CStr) -> Self {
        let found = match open(path) {
            Ok(Some(file)) => Found::Open(file),
            Ok(None) => Found::Absent,
            Err(_) => Found::Unavailable,
        };
        // INVARIANT: an open file comes from `open`.
        Self { path, found }
    }

    /// Its value now, as [`read_sysctl_int`] reads it. Process context.
    pub(crate) fn read(&self) -> Result<Option<i32>> {
        match self.found {
            Found::Open(file) => read_int(file).map(Some),
            Found::Absent => Ok(None),
            Found::Unavailable => read_sysctl_int(self.path),
        }
    }

    /// Its value now if it was opened at load, `Ok(None)` if not: never
    /// opened from the caller's root, whose `/proc` the caller may
    /// control (a mount namespace of its own). For settings whose
    /// absence has a safe reading of the caller's choosing.
    pub(crate) fn read_if_open(&self) -> Result<Option<i32>> {
        match self.found {
            Found::Open(file) => read_int(file).map(Some),
            Found::Absent | Found::Unavailable => Ok(None),
        }
    }
}

impl Drop for SysctlFile {
    fn drop(&mut self) {
        if let Found::Open(file) = self.found {
            // SAFETY: Opened by `open` (type invariant), closed once here;
            // no owner. Module unload: process context.
            unsafe { bindings::filp_close(file, core::ptr::null_mut()) };
        }
    }
}
