// SPDX-License-Identifier: GPL-2.0

//! What the module registers with the kernel and gives back when dropped:
//! `/dev/perfmon` (its misc device and the anonymous-inode files of
//! clones), the sysfs directory, the preempt-notifier key, the reaper's
//! workqueue, and the barrier that waits out every CPU still running the
//! module's text before it unloads.

use super::ffi;
use kernel::bindings;
use kernel::ffi::{c_int, c_void};
use kernel::prelude::*;

/// `/dev/perfmon`'s misc minor: fixed, from the range devices.txt reserves
/// for local use (243-254), so that the module's `char-major-10-249` and
/// `devname:perfmon` aliases (`pfm_core.rs`, `module!`) let kmod create the
/// node at boot and the kernel load the module on its first open.
pub(crate) const MISC_MINOR: i32 = 249;

/// `MISC_DYNAMIC_MINOR`.
const MISC_DYNAMIC_MINOR: i32 = 255;

/// `/dev/perfmon`, registered (`misc_register`) until dropped.
pub(crate) struct MiscRegistration(());

impl MiscRegistration {
    /// Registers `/dev/perfmon` with the file operations `fops`, at
    /// [`MISC_MINOR`], or at a dynamic minor if another driver holds that
    /// one (then only autoload on open is lost: udev still makes the node).
    ///
    /// # Safety
    ///
    /// `fops` must stay valid and unchanged until the registration is dropped.
    pub(crate) unsafe fn register(fops: &bindings::file_operations) -> Result<Self> {
        // SAFETY: The caller keeps `fops` alive for the registration; a
        // failed `misc_register` leaves nothing registered.
        let mut err = unsafe { ffi::pfm_misc_register(fops, MISC_MINOR) };
        if err == -(bindings::EBUSY as c_int) {
            pr_warn!(
                "misc minor {MISC_MINOR} is taken: /dev/perfmon gets a dynamic minor (no autoload on open)\n"
            );
            // SAFETY: As above; the failed registration left nothing behind.
            err = unsafe { ffi::pfm_misc_register(fops, MISC_DYNAMIC_MINOR) };
        }
        if err != 0 {
            return Err(Error::from_errno(err));
        }
        Ok(Self(()))
    }
}

impl Drop for MiscRegistration {
    fn drop(&mut self) {
        // SAFETY: Registered by `register` (the only way to get `self`); no
        // file of the device is open (each holds a module reference).
        unsafe { ffi::pfm_misc_deregister() };
    }
}

/// A new file descriptor, of a new file on the anonymous inode with the
/// operations `fops` and the `private_data` `data` (`anon_inode_getfd`,
/// as `perf_event_open` makes its files). `flags`: `O_RDWR`, and
/// `O_CLOEXEC` and `O_NONBLOCK` as wanted. The file holds a reference to
/// `fops`' module.
///
/// # Safety
///
/// `fops` must stay valid while a file using it is open. On success the
/// file owns what `data` stands for, until `fops`' `release`; on failure
/// the caller still does.
pub(crate) unsafe fn anon_inode_fd(
    name: &CStr,
    fops: *const bindings::file_operations,
    data: *mut c_void,
    flags: u32,
) -> Result<i32> {
    // SAFETY: `name` is a C string, `fops` valid (the caller's promise);
    // `data` is only stored in the new file.
    let fd = unsafe { ffi::anon_inode_getfd(name.as_char_ptr(), fops, data, flags as c_int) };
    if fd < 0 {
        return Err(Error::from_errno(fd));
    }
    Ok(fd)
}

/// `/sys/kernel/perfmon`, registered until dropped.
pub(crate) struct SysfsRegistration(());

impl SysfsRegistration {
    /// Creates `/sys/kernel/perfmon` and its attributes.
    ///
    /// # Safety
    ///
    /// The attributes' `show` callbacks (`pfm_sysfs_show`) read
    /// `globals()`: it must stay valid until the registration is dropped.
    pub(crate) unsafe fn register() -> Result<Self> {
        // SAFETY: The caller keeps `globals()` valid; a failed registration
        // leaves nothing behind (shim.c puts the kobject).
        let err = unsafe { ffi::pfm_sysfs_register() };
        if err != 0 {
            return Err(Error::from_errno(err));
        }
        Ok(Self(()))
    }
}

impl Drop for SysfsRegistration {
    fn drop(&mut self) {
        // SAFETY: Registered by `register`; removing the kobject waits for
        // the `show` calls in progress (kernfs drains its active references).
        unsafe { ffi::pfm_sysfs_unregister() };
    }
}

/// One count on the preempt notifiers' static key (`preempt_notifier_inc`),
/// given back when dropped. Patching the key sleeps: module init and exit.
pub(crate) struct PreemptNotifierKey(());

impl PreemptNotifierKey {
    /// Enables the preempt notifiers.
    pub(crate) fn inc() -> Self {
        // SAFETY: No preconditions; balanced by `drop`.
        unsafe { bindings::preempt_notifier_inc() };
        Self(())
    }
}

impl Drop for PreemptNotifierKey {
    fn drop(&mut self) {
        // SAFETY: Balances the `preempt_notifier_inc` of `inc`.
        unsafe { bindings::preempt_notifier_dec() };
    }
}

/// A workqueue of the module's own, destroyed (drained first) when dropped.
pub(crate) struct Workqueue(core::ptr::NonNull<bindings::workqueue_struct>);

// SAFETY: A workqueue is used from any thread; destroying it is allowed
// from any process context.
unsafe impl Send for Workqueue {}
// SAFETY: See `Send`.
unsafe impl Sync for Workqueue {}

impl Workqueue {
    /// `alloc_workqueue(name, 0, 0)`: a per-CPU workqueue.
    /// `name` must not contain `%` (it is a format string).
    pub(crate) fn new(name: &'static CStr) -> Result<Self> {
        // SAFETY: `name` is a NUL-terminated format string without
        // conversions, so no variadic argument is read; flags and limits are valid.
        let wq = unsafe { bindings::alloc_workqueue(name.as_char_ptr(), 0, 0) };
        core::ptr::NonNull::new(wq).map(Self).ok_or(ENOMEM)
    }

    /// The `struct workqueue_struct`, valid until `self` is dropped.
    pub(crate) fn as_ptr(&self) -> *mut bindings::workqueue_struct {
        self.0.as_ptr()
    }
}

impl Drop for Workqueue {
    fn drop(&mut self) {
        // SAFETY: Allocated by `new`, destroyed once. `destroy_workqueue`
        // drains it first: it returns after every work item queued on it,
        // including those queued by its own items meanwhile, has returned
        // from its function.
        unsafe { bindings::destroy_workqueue(self.0.as_ptr()) };
    }
}

/// Module exit's wait for the code that may still run in the module's text
/// after the module's last reference was dropped; see
/// [`wait_for_module_text_users`]. The wait happens when this is dropped.
pub(crate) struct ModuleTextBarrier(());

impl ModuleTextBarrier {
    /// Arms the barrier (module init).
    pub(crate) fn new() -> Self {
        Self(())
    }
}

impl Drop for ModuleTextBarrier {
    fn drop(&mut self) {
        wait_for_module_text_users();
    }
}

/// Does nothing, on the CPU `work_on_cpu` runs it on: that CPU switched to
/// a kworker.
unsafe extern "C" fn nothing_on_cpu(_arg: *mut c_void) -> core::ffi::c_long {
    0
}

/// Returns once no thread is still executing instructions of this module
/// that it was executing when the call started, provided no such thread can
/// sleep voluntarily before it leaves the module's text (process context, no
/// lock held).
///
/// Module exit runs once the module's reference count is zero; a thread that
/// dropped one of the references (an attachment, through [`crate::pfm_ctxsw::release`])
/// still returns through module code afterwards: the rest of `release`, the
/// epilogue of a task_work callback (`install_fn`, `block_fn`,
/// `cleanup_fn`), of the overflow interrupt, of an irq_work or of the
/// CPU-offline callback. None of those tails sleeps. The module's memory is
/// freed when exit returns, so exit first waits them out. (Holding one more
/// module reference across a tail would not help: whoever drops that one
/// returns through module code too. Only code outside the module can end
/// such a wait: the workqueue core for the reaper, the scheduler here.)
///
/// - `synchronize_rcu()`: the tails that run with interrupts or preemption
///   off (the overflow interrupt, the irq_work) are RCU read-side critical
///   sections, and a grace period waits for each one in progress.
/// - the preemptible tails (task_work callbacks, and the CPU-offline
///   callback in its hotplug thread): with Tasks RCU (`CONFIG_TASKS_RCU`,
///   which preemptible kernels with ftrace, kprobes or BPF have),
///   `synchronize_rcu_tasks()` waits until every task has done a
///   voluntary context switch, run in user mode or idled:
///   a task preempted in the middle of a tail is still waited for, which
///   plain RCU does not do (and on a non-preemptible kernel with
///   `CONFIG_PREEMPT_COUNT`, as the debug test kernel is, plain RCU even
///   counts a scheduler tick taken in a tail as a quiescent state). Without
///   Tasks RCU the kernel is not preemptible (`shim.c` refuses to build
///   otherwise): a tail cannot be preempted, so a CPU running one only
///   switches to another task after the tail has returned; making every
///   online CPU run a kworker (`work_on_cpu`) therefore waits for every
///   tail in progress, like `synchronize_rcu_tasks_rude()`.
pub(crate) fn wait_for_module_text_users() {
    // SAFETY: Process context without locks (module exit).
    unsafe { bindings::synchronize_rcu() };
    // SAFETY: Reads a configuration constant.
    if unsafe { ffi::pfm_have_tasks_rcu() } {
        // SAFETY: Process context without locks.
        unsafe { ffi::pfm_synchronize_rcu_tasks() };
        return;
    }
    // SAFETY: Keeps the set of online CPUs stable during the loop (a CPU
    // that goes offline has no task left running on it anyway).
    unsafe { bindings::cpus_read_lock() };
    // SAFETY: `nr_cpu_ids` is set at boot and constant afterwards.
    let n = unsafe { bindings::nr_cpu_ids };
    for cpu in 0..n {
        // SAFETY: `cpu` < `nr_cpu_ids`.
        if unsafe { ffi::pfm_cpu_online(cpu) } {
            // SAFETY: `cpu` is online (hotplug held off above);
            // `nothing_on_cpu` ignores its argument; `work_on_cpu` waits
            // for it to return.
            unsafe { ffi::pfm_work_on_cpu(cpu as c_int, nothing_on_cpu, core::ptr::null_mut()) };
        }
    }
    // SAFETY: Taken above.
    unsafe { bindings::cpus_read_unlock() };
}
