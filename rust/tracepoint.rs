// SPDX-License-Identifier: GPL-2.0

//! The scheduler's task tracepoints, reached by name: 6.12 exports
//! `for_each_kernel_tracepoint` and `tracepoint_probe_register` to modules,
//! not the `__tracepoint_sched_process_*` symbols themselves. Inheritance
//! learns of new tasks from `sched_process_fork` (in the parent, after the
//! child is complete and before it first runs), and start-on-exec of a
//! successful exec from `sched_process_exec` (in the execing task, once the
//! new image is loaded).

use core::ffi::CStr;

use kernel::bindings;
use kernel::ffi::{c_int, c_void};
use kernel::prelude::*;

use super::ffi;

/// `sched_process_fork`'s probe: `(data, parent, child)`. Runs with
/// preemption disabled.
pub(crate) type ForkProbe =
    unsafe extern "C" fn(*mut c_void, *mut bindings::task_struct, *mut bindings::task_struct);

/// `sched_process_exec`'s probe: `(data, task, old_pid, bprm)`. Runs with
/// preemption disabled.
pub(crate) type ExecProbe = unsafe extern "C" fn(
    *mut c_void,
    *mut bindings::task_struct,
    c_int,
    *mut bindings::linux_binprm,
);

/// The two tracepoints, as found in the kernel's table.
struct Found {
    fork: *mut bindings::tracepoint,
    exec: *mut bindings::tracepoint,
}

/// `for_each_kernel_tracepoint`'s callback: remembers the two we want.
///
/// # Safety
///
/// `tp` is a kernel tracepoint and `data` a `Found`, as `find` passes it.
unsafe extern "C" fn match_tracepoint(tp: *mut bindings::tracepoint, data: *mut c_void) {
    // SAFETY: The caller's guarantee: `data` is `find`'s `Found`.
    let found = unsafe { &mut *data.cast::<Found>() };
    // SAFETY: A kernel tracepoint's name is a static NUL-terminated string.
    let name = unsafe { CStr::from_ptr((*tp).name.cast()) }.to_bytes();
    match name {
        b"sched_process_fork" => found.fork = tp,
        b"sched_process_exec" => found.exec = tp,
        _ => {}
    }
}

/// Our probes on `sched_process_fork` and `sched_process_exec` while this
/// lives; dropping it unregisters them and waits until no probe runs.
///
/// # Invariants
///
/// Both probes are registered, on the kernel's (static) tracepoints.
pub(crate) struct TaskProbes {
    found: Found,
    fork: ForkProbe,
    exec: ExecProbe,
}

// SAFETY: The tracepoints are static kernel objects; the pointers are only
// passed back to the kernel.
unsafe impl Send for TaskProbes {}
// SAFETY: See `Send`.
unsafe impl Sync for TaskProbes {}

impl TaskProbes {
    /// Registers `fork` and `exec`. `ENOENT` if the kernel has neither
    /// tracepoint (it is built without `CONFIG_TRACEPOINTS`, or they were
    /// renamed).
    pub(crate) fn register(fork: ForkProbe, exec: ExecProbe) -> Result<Self> {
        let mut found = Found {
            fork: core::ptr::null_mut(),
            exec: core::ptr::null_mut(),
        };
        // SAFETY: The callback only reads each tracepoint's name and
        // writes `found`, which outlives the call.
        unsafe {
            ffi::for_each_kernel_tracepoint(match_tracepoint, (&mut found as *mut Found).cast())
        };
        if found.fork.is_null() || found.exec.is_null() {
            return Err(ENOENT);
        }
        // SAFETY: A kernel tracepoint, and a probe of its prototype
        // (`ForkProbe`) that lives as long as the module.
        let r = unsafe { ffi::tracepoint_probe_register(found.fork, fork as *mut c_void, null()) };
        if r != 0 {
            return Err(Error::from_errno(r));
        }
        // SAFETY: As above, with `ExecProbe`.
        let r = unsafe { ffi::tracepoint_probe_register(found.exec, exec as *mut c_void, null()) };
        if r != 0 {
            // SAFETY: Registered just above, with the same arguments.
            unsafe { ffi::tracepoint_probe_unregister(found.fork, fork as *mut c_void, null()) };
            // SAFETY: No preconditions; waits out a probe already running.
            unsafe { ffi::pfm_tracepoint_synchronize_unregister() };
            return Err(Error::from_errno(r));
        }
        // INVARIANT: both registered.
        Ok(Self { found, fork, exec })
    }
}

/// The probes' `data`: unused.
fn null() -> *mut c_void {
    core::ptr::null_mut()
}

impl Drop for TaskProbes {
    fn drop(&mut self) {
        // SAFETY: Registered (type invariant), with these arguments.
        unsafe {
            ffi::tracepoint_probe_unregister(self.found.exec, self.exec as *mut c_void, null());
            ffi::tracepoint_probe_unregister(self.found.fork, self.fork as *mut c_void, null());
        }
        // A probe that started before the unregistering has returned when
        // this does (it runs under the tracepoint's RCU).
        // SAFETY: No preconditions.
        unsafe { ffi::pfm_tracepoint_synchronize_unregister() };
    }
}
