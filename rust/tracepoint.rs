// SPDX-License-Identifier: GPL-2.0

//! The scheduler's task tracepoints, reached by name: 6.12 exports
//! `for_each_kernel_tracepoint` and `tracepoint_probe_register` to modules,
//! not the `__tracepoint_sched_process_*` symbols themselves. Inheritance
//! learns of new tasks from `sched_process_fork` (in the parent, after the
//! child is complete and before it first runs), and start-on-exec of a
//! successful exec from `task_rename` (in the execing task, right after
//! `perf_event_exec`, where perf's `enable_on_exec` starts counting) and
//! `sched_process_exec` (once the new image is loaded). A process
//! monitored whole (`PFM_LOAD_PROCESS`) leaves the list of such processes
//! when its last thread reaches `sched_process_exit`.

use core::ffi::CStr;

use kernel::bindings;
use kernel::ffi::{c_char, c_int, c_void};
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

/// `task_rename`'s probe: `(data, task, comm)`. Runs with preemption
/// disabled and the task's `alloc_lock` held.
pub(crate) type RenameProbe =
    unsafe extern "C" fn(*mut c_void, *mut bindings::task_struct, *const c_char);

/// `sched_process_exit`'s probe: `(data, task)`, in `do_exit` of `task`
/// (current) after `exit_mm` and before `exit_task_work`. Runs with
/// preemption disabled.
pub(crate) type ExitProbe = unsafe extern "C" fn(*mut c_void, *mut bindings::task_struct);

/// How many tracepoints we probe.
const PROBES: usize = 4;

/// The tracepoints we probe, by name, in the order of [`TaskProbes`]'s.
const NAMES: [&[u8]; PROBES] = [
    b"sched_process_fork",
    b"sched_process_exec",
    b"task_rename",
    b"sched_process_exit",
];

/// `for_each_kernel_tracepoint`'s callback: remembers the ones we want.
///
/// # Safety
///
/// `tp` is a kernel tracepoint and `data` the `[*mut tracepoint; PROBES]` that
/// `register` passes.
unsafe extern "C" fn match_tracepoint(tp: *mut bindings::tracepoint, data: *mut c_void) {
    // SAFETY: The caller's guarantee: `data` is `register`'s array.
    let found = unsafe { &mut *data.cast::<[*mut bindings::tracepoint; PROBES]>() };
    // SAFETY: A kernel tracepoint's name is a static NUL-terminated string.
    let name = unsafe { CStr::from_ptr((*tp).name.cast()) }.to_bytes();
    if let Some(i) = NAMES.iter().position(|n| *n == name) {
        found[i] = tp;
    }
}

/// Our probes on `sched_process_fork`, `sched_process_exec`,
/// `task_rename` and `sched_process_exit` while this lives; dropping it unregisters them and waits
/// until no probe runs.
///
/// # Invariants
///
/// Each probe is registered on its (static) kernel tracepoint.
pub(crate) struct TaskProbes {
    probes: [(*mut bindings::tracepoint, *mut c_void); PROBES],
}

// SAFETY: The tracepoints are static kernel objects and the probes module
// functions; the pointers are only passed back to the kernel.
unsafe impl Send for TaskProbes {}
// SAFETY: See `Send`.
unsafe impl Sync for TaskProbes {}

impl TaskProbes {
    /// Registers `fork`, `exec`, `rename` and `exit`. `ENOENT` if the
    /// kernel lacks one of the tracepoints (it is built without
    /// `CONFIG_TRACEPOINTS`, or they were renamed).
    pub(crate) fn register(
        fork: ForkProbe,
        exec: ExecProbe,
        rename: RenameProbe,
        exit: ExitProbe,
    ) -> Result<Self> {
        let mut found: [*mut bindings::tracepoint; PROBES] = [core::ptr::null_mut(); PROBES];
        // SAFETY: The callback only reads each tracepoint's name and
        // writes `found`, which outlives the call.
        unsafe {
            ffi::for_each_kernel_tracepoint(
                match_tracepoint,
                (&mut found as *mut [_; PROBES]).cast(),
            )
        };
        if found.iter().any(|tp| tp.is_null()) {
            return Err(ENOENT);
        }
        let probes = [
            (found[0], fork as *mut c_void),
            (found[1], exec as *mut c_void),
            (found[2], rename as *mut c_void),
            (found[3], exit as *mut c_void),
        ];
        for (i, &(tp, probe)) in probes.iter().enumerate() {
            // SAFETY: A kernel tracepoint, and a probe of its prototype
            // (`NAMES[i]`'s) that lives as long as the module.
            let r = unsafe { ffi::tracepoint_probe_register(tp, probe, null()) };
            if r != 0 {
                // The ones before `i` are registered.
                Self::unregister(&probes[..i]);
                return Err(Error::from_errno(r));
            }
        }
        // INVARIANT: all registered.
        Ok(Self { probes })
    }

    /// Unregisters `probes` and waits out any that still runs.
    fn unregister(probes: &[(*mut bindings::tracepoint, *mut c_void)]) {
        for &(tp, probe) in probes.iter().rev() {
            // SAFETY: Registered (the callers' invariant), with these
            // arguments.
            unsafe { ffi::tracepoint_probe_unregister(tp, probe, null()) };
        }
        // A probe that started before the unregistering has returned when
        // this does (it runs under the tracepoint's RCU).
        // SAFETY: No preconditions.
        unsafe { ffi::pfm_tracepoint_synchronize_unregister() };
    }
}

/// The probes' `data`: unused.
fn null() -> *mut c_void {
    core::ptr::null_mut()
}

impl Drop for TaskProbes {
    fn drop(&mut self) {
        Self::unregister(&self.probes);
    }
}
