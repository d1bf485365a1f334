// SPDX-License-Identifier: GPL-2.0

//! The only place that touches C: declarations of `rust/shim.c` and of the
//! exported kernel functions 6.12's `bindings` does not reach, and small safe
//! wrappers over them, shaped like the upstream abstractions (`miscdevice`,
//! `irq_work`, `task_work`, IRQ-safe spinlocks) so they can be swapped for
//! those when the module moves to a newer kernel.

use kernel::bindings;
use kernel::ffi::{c_char, c_int, c_uint, c_ulong, c_void};
use kernel::prelude::*;
use kernel::sync::lock::{Backend, Lock};
use kernel::types::Opaque;

pub(crate) mod cpu;
pub(crate) mod hrtimer;
pub(crate) mod irq;

pub(crate) use cpu::on_each_cpu;
pub(crate) use hrtimer::PeriodicTimer;
pub(crate) use irq::{apic_read_lvtpc, apic_write_lvtpc, send_ipi_self};

mod ffi {
    use super::*;

    // Kernel structures with zero-sized members (bindgen's empty structs) are
    // only passed by pointer here, as `bindings` itself does.
    #[allow(improper_ctypes)]
    extern "C" {
        pub(crate) fn pfm_param_pmu() -> *const c_char;
        pub(crate) fn pfm_param_soft_width() -> c_uint;
        pub(crate) fn pfm_param_max_attached_per_user() -> c_uint;
        pub(crate) fn pfm_misc_register(fops: *const bindings::file_operations) -> c_int;
        pub(crate) fn pfm_misc_deregister();
        pub(crate) fn pfm_sysfs_register() -> c_int;
        pub(crate) fn pfm_sysfs_unregister();
        pub(crate) fn pfm_spin_lock_irqsave(lock: *mut bindings::spinlock_t) -> c_ulong;
        pub(crate) fn pfm_spin_unlock_irqrestore(lock: *mut bindings::spinlock_t, flags: c_ulong);
        pub(crate) fn pfm_init_irq_work(
            work: *mut IrqWorkRaw,
            func: unsafe extern "C" fn(*mut IrqWorkRaw),
        );
        pub(crate) fn pfm_poll_wait(
            file: *mut bindings::file,
            queue: *mut bindings::wait_queue_head,
            table: *mut bindings::poll_table_struct,
        );
        pub(crate) fn pfm_this_cpu() -> c_int;
        pub(crate) fn pfm_put_cred(cred: *const bindings::cred);
        pub(crate) fn pfm_init_waitqueue_head(q: *mut bindings::wait_queue_head);
        pub(crate) fn pfm_user_ip(task: *mut bindings::task_struct) -> c_ulong;
        pub(crate) fn pfm_task_real_cred(task: *mut bindings::task_struct)
            -> *const bindings::cred;
        pub(crate) fn pfm_get_cred(cred: *const bindings::cred) -> *const bindings::cred;
        pub(crate) fn pfm_exec_update_lock_read(task: *mut bindings::task_struct) -> c_int;
        pub(crate) fn pfm_exec_update_unlock_read(task: *mut bindings::task_struct);
        pub(crate) fn pfm_rcu_read_lock();
        pub(crate) fn pfm_rcu_read_unlock();
        pub(crate) fn pfm_task_group_leader(
            task: *mut bindings::task_struct,
        ) -> *mut bindings::task_struct;
        pub(crate) fn pfm_task_real_parent(
            task: *mut bindings::task_struct,
        ) -> *mut bindings::task_struct;
        pub(crate) fn pfm_task_pid(task: *mut bindings::task_struct) -> c_int;
        pub(crate) fn pfm_task_on_cpu(task: *mut bindings::task_struct) -> bool;
        pub(crate) fn pfm_cpu_relax();
        pub(crate) fn pfm_exec_watch_register();
        pub(crate) fn pfm_exec_watch_unregister();
        pub(crate) fn pfm_current_tid() -> c_int;
        pub(crate) fn pfm_same_thread_group_as_current(task: *mut bindings::task_struct) -> bool;
        pub(crate) fn pfm_cred_ids(cred: *const bindings::cred, ids: *mut u32);
        pub(crate) fn pfm_task_dumpable(task: *mut bindings::task_struct) -> c_int;
        pub(crate) fn pfm_mm_dumpable(mm: *mut bindings::mm_struct) -> c_int;
        pub(crate) fn pfm_task_sum_exec_runtime(task: *mut bindings::task_struct) -> u64;
        pub(crate) fn pfm_task_exec_start(task: *mut bindings::task_struct) -> u64;
        pub(crate) static pfm_c_layout: [core::ffi::c_ulong; 0];
        pub(crate) static pfm_c_layout_len: core::ffi::c_ulong;
        pub(crate) fn pfm_rdmsr_safe(msr: u32, value: *mut u64) -> c_int;
        pub(crate) fn pfm_wrmsr_safe(msr: u32, value: u64) -> c_int;
        pub(crate) fn pfm_perfmon_capable() -> bool;
        pub(crate) fn pfm_irqs_disabled() -> bool;
        pub(crate) fn pfm_local_irq_save() -> c_ulong;
        pub(crate) fn pfm_local_irq_restore(flags: c_ulong);
        pub(crate) fn pfm_have_tasks_rcu() -> bool;
        pub(crate) fn pfm_synchronize_rcu_tasks();
        pub(crate) fn pfm_cpu_online(cpu: c_uint) -> bool;
        pub(crate) fn pfm_work_on_cpu(
            cpu: c_int,
            func: unsafe extern "C" fn(*mut c_void) -> core::ffi::c_long,
            arg: *mut c_void,
        ) -> core::ffi::c_long;

        // Exported by the kernel, declared in headers 6.12's bindings do not include.
        pub(crate) fn task_work_add(
            task: *mut bindings::task_struct,
            work: *mut bindings::callback_head,
            mode: c_int,
        ) -> c_int;
        pub(crate) fn irq_work_queue(work: *mut IrqWorkRaw) -> bool;
        pub(crate) fn irq_work_sync(work: *mut IrqWorkRaw);
        pub(crate) fn local_clock() -> u64;
        pub(crate) fn reserve_perfctr_nmi(msr: c_uint) -> c_int;
        pub(crate) fn release_perfctr_nmi(msr: c_uint);
        pub(crate) fn reserve_evntsel_nmi(msr: c_uint) -> c_int;
        pub(crate) fn release_evntsel_nmi(msr: c_uint);
    }

    /// Storage for a `struct irq_work`; `shim.c` asserts that it fits.
    #[repr(C, align(8))]
    pub(crate) struct IrqWorkRaw(pub(crate) [u8; 64]);
}

/// `/dev/perfmon`, registered (`misc_register`) until dropped.
pub(crate) struct MiscRegistration(());

impl MiscRegistration {
    /// Registers `/dev/perfmon` with the file operations `fops`.
    ///
    /// # Safety
    ///
    /// `fops` must stay valid and unchanged until the registration is dropped.
    pub(crate) unsafe fn register(fops: &bindings::file_operations) -> Result<Self> {
        // SAFETY: The caller keeps `fops` alive for the registration; a
        // failed `misc_register` leaves nothing registered.
        let err = unsafe { ffi::pfm_misc_register(fops) };
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

/// `POLLIN` (uapi `asm-generic/poll.h`).
pub(crate) const POLLIN: u32 = 0x0001;
/// `POLLRDNORM`.
pub(crate) const POLLRDNORM: u32 = 0x0040;
/// `POLLHUP`.
pub(crate) const POLLHUP: u32 = 0x0010;

/// `TWA_RESUME` of `enum task_work_notify_mode`: run at the next return to user mode.
pub(crate) const TWA_RESUME: c_int = 1;
/// `TWA_SIGNAL`: like `TWA_RESUME`, and kick the task out of an interruptible sleep.
pub(crate) const TWA_SIGNAL: c_int = 2;

/// The `pmu=` module parameter.
pub(crate) fn param_pmu() -> &'static CStr {
    // SAFETY: `pmu` is a `charp` module parameter with read-only sysfs
    // permissions: a valid NUL-terminated string that does not change while
    // the module is loaded.
    unsafe { CStr::from_char_ptr(ffi::pfm_param_pmu()) }
}

/// The `soft_width=` module parameter.
pub(crate) fn param_soft_width() -> u32 {
    // SAFETY: Reads a module parameter that is read-only after load.
    unsafe { ffi::pfm_param_soft_width() }
}

/// The `max_attached_per_user` module parameter (root may change it at
/// run time through /sys/module/perfmon/parameters).
pub(crate) fn param_max_attached_per_user() -> u32 {
    // SAFETY: A `READ_ONCE` of an unsigned int.
    unsafe { ffi::pfm_param_max_attached_per_user() }
}

/// The CPU this code runs on; stable only while preemption or IRQs are off.
pub(crate) fn this_cpu() -> i32 {
    // SAFETY: `raw_smp_processor_id` has no preconditions.
    unsafe { ffi::pfm_this_cpu() }
}

/// `local_clock()`: nanoseconds, monotonic on this CPU.
pub(crate) fn now_ns() -> u64 {
    // SAFETY: `local_clock` has no preconditions.
    unsafe { ffi::local_clock() }
}

/// The current thread's scheduler runtime in ns, live: its
/// `se.sum_exec_runtime` plus what it ran since the scheduler last updated
/// it (`exec_start` is on the `local_clock` time base, as `rq->clock` is).
/// Call with IRQs off (the fields are updated by this CPU's scheduler).
pub(crate) fn current_runtime_ns() -> u64 {
    // SAFETY: `current` is a valid task; its `se` is written only by this
    // CPU's scheduler, which IRQs-off callers exclude.
    let (sum, start) = unsafe {
        let t = bindings::get_current();
        (
            ffi::pfm_task_sum_exec_runtime(t),
            ffi::pfm_task_exec_start(t),
        )
    };
    sum + now_ns().saturating_sub(start)
}

/// The current thread's `se.sum_exec_runtime`: exact at a switch-in (the
/// start of its time slice) and at a switch-out (the scheduler has just
/// accounted the slice); stale by up to a tick in between.
pub(crate) fn current_sum_exec_runtime() -> u64 {
    // SAFETY: As for `current_runtime_ns`.
    unsafe { ffi::pfm_task_sum_exec_runtime(bindings::get_current()) }
}

/// A thread's credential ids: real, effective and saved uid, then gid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CredIds {
    /// uid, euid, suid.
    pub(crate) uids: [u32; 3],
    /// gid, egid, sgid.
    pub(crate) gids: [u32; 3],
}

impl CredIds {
    /// Whether every uid is `uid` and every gid is `gid`.
    pub(crate) fn all_are(&self, uid: u32, gid: u32) -> bool {
        self.uids.iter().all(|&u| u == uid) && self.gids.iter().all(|&g| g == gid)
    }
}

/// The ids of `cred`.
///
/// # Safety
///
/// `cred` must be a live cred (referenced, or the current thread's own).
pub(crate) unsafe fn cred_ids(cred: *const bindings::cred) -> CredIds {
    let mut ids = [0u32; 6];
    // SAFETY: `cred` is live (caller); `ids` has the 6 slots the shim fills.
    unsafe { ffi::pfm_cred_ids(cred, ids.as_mut_ptr()) };
    CredIds {
        uids: [ids[0], ids[1], ids[2]],
        gids: [ids[3], ids[4], ids[5]],
    }
}

/// The calling thread's id in its own pid namespace (`task_pid_vnr`).
pub(crate) fn current_tid() -> u32 {
    // SAFETY: No preconditions.
    unsafe { ffi::pfm_current_tid() as u32 }
}

/// Whether `task` is a thread of the calling process.
///
/// # Safety
///
/// `task` must be referenced.
pub(crate) unsafe fn same_thread_group_as_current(task: *mut bindings::task_struct) -> bool {
    // SAFETY: Forwarded.
    unsafe { ffi::pfm_same_thread_group_as_current(task) }
}

/// `task->real_cred`: the objective credentials, the ones others act on
/// (`__task_cred`; `override_creds` swaps only `task->cred`). Compare it,
/// or dereference it where it cannot change (in the task itself).
///
/// # Safety
///
/// `task` must be a live task.
pub(crate) unsafe fn task_real_cred_ptr(task: *mut bindings::task_struct) -> *const bindings::cred {
    // SAFETY: Forwarded.
    unsafe { ffi::pfm_task_real_cred(task) }
}

/// Takes a reference on `cred` (`get_cred`) and returns it.
///
/// # Safety
///
/// `cred` must be live for the duration of the call (referenced, or the
/// current task's own).
pub(crate) unsafe fn get_cred(cred: *const bindings::cred) -> *const bindings::cred {
    // SAFETY: Forwarded.
    unsafe { ffi::pfm_get_cred(cred) }
}

/// `down_read_interruptible(&task->signal->exec_update_lock)`: held, an
/// exec of `task` cannot change its credentials or mm (perf_event_open's
/// guard between its permission check and the event's installation).
/// Released when the guard drops.
pub(crate) struct ExecUpdateGuard {
    task: *mut bindings::task_struct,
}

impl ExecUpdateGuard {
    /// Takes the lock for reading; `ERESTARTSYS` if a signal interrupts
    /// the wait (the call restarts under `SA_RESTART`, else `EINTR`).
    ///
    /// # Safety
    ///
    /// `task` must stay referenced until the guard drops.
    pub(crate) unsafe fn lock(task: *mut bindings::task_struct) -> Result<Self> {
        // SAFETY: `task` is referenced (caller), so is its signal_struct.
        if unsafe { ffi::pfm_exec_update_lock_read(task) } != 0 {
            return Err(ERESTARTSYS);
        }
        Ok(Self { task })
    }
}

impl Drop for ExecUpdateGuard {
    fn drop(&mut self) {
        // SAFETY: Taken in `lock`; the task is still referenced (its contract).
        unsafe { ffi::pfm_exec_update_unlock_read(self.task) };
    }
}

/// The value of an integer sysctl file (`/proc/sys/...`), read the way
/// user space would: `Ok(None)` if it does not exist (`ENOENT`), `Err` if
/// it could not be read or parsed. For the settings 6.12 does not export to
/// modules (`perf_event_paranoid`, Yama's `ptrace_scope`). Process context.
pub(crate) fn read_sysctl_int(path: &kernel::str::CStr) -> Result<Option<i32>> {
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
    let mut buf = [0u8; 16];
    let mut pos: bindings::loff_t = 0;
    // SAFETY: `file` is open; `buf` is valid for its length.
    let n = unsafe { bindings::kernel_read(file, buf.as_mut_ptr().cast(), buf.len(), &mut pos) };
    // SAFETY: Opened above; no owner (not an fd table's file).
    unsafe { bindings::filp_close(file, core::ptr::null_mut()) };
    let n = usize::try_from(n).map_err(|_| EIO)?.min(buf.len());
    let text = core::str::from_utf8(&buf[..n]).map_err(|_| EIO)?;
    text.trim().parse().map(Some).map_err(|_| EIO)
}

/// Whether `task` is a descendant of the current process (Yama's
/// `task_is_descendant`: its ancestry, by process, reaches the caller's).
///
/// # Safety
///
/// `task` must be referenced by the caller.
pub(crate) unsafe fn is_descendant_of_current(task: *mut bindings::task_struct) -> bool {
    // SAFETY: An RCU read-side section around the walk: the parents seen
    // stay valid until it ends.
    unsafe { ffi::pfm_rcu_read_lock() };
    // SAFETY: `current` is valid; its group leader too (RCU).
    let me = unsafe { ffi::pfm_task_group_leader(bindings::get_current()) };
    let mut walker = task;
    let mut found = false;
    // SAFETY: `task` is referenced; every parent reached is RCU-protected.
    while !walker.is_null() && unsafe { ffi::pfm_task_pid(walker) } > 0 {
        // SAFETY: As above.
        walker = unsafe { ffi::pfm_task_group_leader(walker) };
        if walker == me {
            found = true;
            break;
        }
        // SAFETY: As above.
        walker = unsafe { ffi::pfm_task_real_parent(walker) };
    }
    // SAFETY: Ends the section begun above.
    unsafe { ffi::pfm_rcu_read_unlock() };
    found
}

/// Whether `task` is still on a CPU, its last switch not complete
/// (`smp_load_acquire(&task->on_cpu)`).
///
/// # Safety
///
/// `task` must be referenced by the caller.
pub(crate) unsafe fn task_on_cpu(task: *mut bindings::task_struct) -> bool {
    // SAFETY: Reads one field of a referenced task (the caller's contract).
    unsafe { ffi::pfm_task_on_cpu(task) }
}

/// `cpu_relax()`: a busy-wait's pause.
pub(crate) fn cpu_relax() {
    // SAFETY: No preconditions.
    unsafe { ffi::pfm_cpu_relax() }
}

/// `capable(CAP_SYS_ADMIN)`.
pub(crate) fn sys_admin_capable() -> bool {
    // SAFETY: No preconditions.
    unsafe { bindings::capable(bindings::CAP_SYS_ADMIN as i32) }
}

/// Every `execve()` calls `pfm_exec_hook` first while this lives (a binary
/// format that recognises nothing, at the head of the list); dropping it
/// unregisters the format, and no hook runs after that (an exec inside the
/// hook holds a module reference, so module exit cannot be under way).
pub(crate) struct ExecWatch(());

impl ExecWatch {
    /// Registers the format.
    pub(crate) fn register() -> Self {
        // SAFETY: The format is static; unregistered in `drop`.
        unsafe { ffi::pfm_exec_watch_register() };
        Self(())
    }
}

impl Drop for ExecWatch {
    fn drop(&mut self) {
        // SAFETY: Registered in `register`.
        unsafe { ffi::pfm_exec_watch_unregister() }
    }
}

/// `get_dumpable(task->mm)`, or `None` without an mm.
///
/// # Safety
///
/// `task` must be the current thread, or a thread in a scheduler callback
/// (its mm cannot go away under us).
pub(crate) unsafe fn task_dumpable(task: *mut bindings::task_struct) -> Option<u32> {
    // SAFETY: Forwarded.
    let d = unsafe { ffi::pfm_task_dumpable(task) };
    u32::try_from(d).ok()
}

/// `get_dumpable(mm)`.
///
/// # Safety
///
/// `mm` must be referenced.
pub(crate) unsafe fn mm_dumpable(mm: *mut bindings::mm_struct) -> u32 {
    // SAFETY: Forwarded.
    unsafe { ffi::pfm_mm_dumpable(mm) as u32 }
}

/// Checks that the kernel structures Rust touches have the layout the C
/// compiler gives them. bindgen can lay a structure out differently from
/// the compiler: in 6.12 with `CONFIG_SCHEDSTATS=n`, `task_struct`'s empty
/// but cache-aligned `struct sched_statistics` puts every later field (pid,
/// group_leader, mm, cred, ...) 16 bytes off in the bindings. Rust reads
/// no `task_struct` field past `se` (the shims do), and loading with any
/// other mismatch would read and write the wrong fields.
/// The first layout entry (index into `pfm_c_layout`) where C and Rust
/// differ, with both values.
pub(crate) fn layout_mismatch() -> Option<(usize, usize, usize)> {
    use bindings::{file, file_operations as fops, task_struct as task};
    use core::mem::{offset_of, size_of};
    let rust: [usize; 23] = [
        offset_of!(task, __state),
        offset_of!(task, flags),
        offset_of!(file, private_data),
        offset_of!(file, f_flags),
        size_of::<fops>(),
        offset_of!(fops, owner),
        offset_of!(fops, read),
        offset_of!(fops, poll),
        offset_of!(fops, unlocked_ioctl),
        offset_of!(fops, compat_ioctl),
        offset_of!(fops, open),
        offset_of!(fops, release),
        offset_of!(fops, fasync),
        offset_of!(fops, llseek),
        size_of::<bindings::preempt_notifier>(),
        size_of::<bindings::preempt_ops>(),
        size_of::<bindings::callback_head>(),
        size_of::<bindings::wait_queue_head>(),
        size_of::<bindings::wait_queue_entry>(),
        size_of::<bindings::spinlock_t>(),
        size_of::<bindings::work_struct>(),
        size_of::<bindings::hrtimer>(),
        offset_of!(bindings::hrtimer, function),
    ];
    // SAFETY: `pfm_c_layout` is a constant array of `pfm_c_layout_len` entries.
    let c = unsafe {
        core::slice::from_raw_parts(
            core::ptr::addr_of!(ffi::pfm_c_layout).cast::<core::ffi::c_ulong>(),
            ffi::pfm_c_layout_len as usize,
        )
    };
    if c.len() != rust.len() {
        return Some((usize::MAX, c.len(), rust.len()));
    }
    c.iter()
        .zip(rust.iter())
        .enumerate()
        .find(|(_, (&c, &r))| c as usize != r)
        .map(|(i, (&c, &r))| (i, c as usize, r))
}

/// The user-mode instruction pointer saved on the current thread's kernel
/// stack (the one it returns to user mode with).
pub(crate) fn current_user_ip() -> u64 {
    // SAFETY: `current` is live and runs on its own stack.
    unsafe { ffi::pfm_user_ip(bindings::get_current()) as u64 }
}

/// `rdmsrl_safe`: reads an MSR of this CPU; `None` if the access faulted.
///
/// # Safety
///
/// `msr` must be a performance-monitoring MSR that CPUID announces on this
/// CPU (as the host-tested models derive them), whose read has no side
/// effect.
pub(crate) unsafe fn rdmsr_safe(msr: u32) -> Option<u64> {
    let mut v = 0u64;
    // SAFETY: The caller's guarantee; the `_safe` accessor turns a #GP into
    // an error; `v` is valid for writes.
    let ret = unsafe { ffi::pfm_rdmsr_safe(msr, &mut v) };
    (ret == 0).then_some(v)
}

/// `wrmsrl_safe`: writes an MSR of this CPU; `false` if the access faulted.
///
/// # Safety
///
/// `msr` must be a performance-monitoring MSR that CPUID announces on this
/// CPU, owned by the module (claimed from perf_events), and `value` one the
/// model produced for it (reserved bits clear).
pub(crate) unsafe fn wrmsr_safe(msr: u32, value: u64) -> bool {
    // SAFETY: The caller's guarantee; the `_safe` accessor turns a #GP into
    // an error.
    unsafe { ffi::pfm_wrmsr_safe(msr, value) == 0 }
}

/// `perfmon_capable()`: the caller has CAP_PERFMON or CAP_SYS_ADMIN.
pub(crate) fn perfmon_capable() -> bool {
    // SAFETY: Reads the current task's credentials.
    unsafe { ffi::pfm_perfmon_capable() }
}

/// `irqs_disabled()`: interrupts are off on this CPU.
pub(crate) fn irqs_disabled() -> bool {
    // SAFETY: No preconditions.
    unsafe { ffi::pfm_irqs_disabled() }
}

/// `local_irq_save()`: disables interrupts on this CPU; returns the flags
/// for [`local_irq_restore`].
pub(crate) fn local_irq_save() -> c_ulong {
    // SAFETY: No preconditions.
    unsafe { ffi::pfm_local_irq_save() }
}

/// `local_irq_restore()`: restores what [`local_irq_save`] saved.
pub(crate) fn local_irq_restore(flags: c_ulong) {
    // SAFETY: `flags` came from `local_irq_save` on this CPU.
    unsafe { ffi::pfm_local_irq_restore(flags) }
}

/// Reserves, for the module, the counter and event select that the NMI
/// reservation allocator (shared with perf_events) maps `ctr`/`evtsel` to;
/// `false` if someone (perf_events, the NMI watchdog) holds either.
pub(crate) fn reserve_counter(ctr: u32, evtsel: u32) -> bool {
    // SAFETY: Atomic bit operations on the allocator's bitmaps.
    if unsafe { ffi::reserve_perfctr_nmi(ctr) } == 0 {
        return false;
    }
    // SAFETY: As above.
    if unsafe { ffi::reserve_evntsel_nmi(evtsel) } == 0 {
        // SAFETY: Reserved just above.
        unsafe { ffi::release_perfctr_nmi(ctr) };
        return false;
    }
    true
}

/// Releases what [`reserve_counter`] reserved.
pub(crate) fn release_counter(ctr: u32, evtsel: u32) {
    // SAFETY: The caller reserved both with `reserve_counter`.
    unsafe {
        ffi::release_evntsel_nmi(evtsel);
        ffi::release_perfctr_nmi(ctr);
    }
}

/// Registers a `poll_table` entry for `queue` (the static inline `poll_wait`).
///
/// # Safety
///
/// `file` and `table` come from the VFS's `poll` call; `queue` outlives the file.
pub(crate) unsafe fn poll_wait(
    file: *mut bindings::file,
    queue: *mut bindings::wait_queue_head,
    table: *mut bindings::poll_table_struct,
) {
    // SAFETY: Forwarded from the caller's guarantees.
    unsafe { ffi::pfm_poll_wait(file, queue, table) }
}

/// A wait queue (`wait_queue_head_t`).
///
/// # Invariants
///
/// `head` is initialised (`init_waitqueue_head`).
#[pin_data]
pub(crate) struct WaitQueue {
    #[pin]
    head: Opaque<bindings::wait_queue_head>,
}

// SAFETY: A wait queue has its own lock; it is used from any thread.
unsafe impl Send for WaitQueue {}
// SAFETY: See `Send`.
unsafe impl Sync for WaitQueue {}

impl WaitQueue {
    /// An empty wait queue.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            // INVARIANT: initialised by `init_waitqueue_head`.
            head <- Opaque::ffi_init(|q: *mut bindings::wait_queue_head| {
                // SAFETY: `q` is valid for writes and not in use yet.
                unsafe { ffi::pfm_init_waitqueue_head(q) }
            }),
        })
    }

    /// The raw head, for `poll_wait`.
    pub(crate) fn as_ptr(&self) -> *mut bindings::wait_queue_head {
        self.head.get()
    }

    /// Wakes every waiter (`wake_up`). Not with the runqueue lock held.
    pub(crate) fn wake_all(&self) {
        // SAFETY: `head` is initialised (type invariant).
        unsafe {
            bindings::__wake_up(
                self.head.get(),
                bindings::TASK_NORMAL,
                0,
                core::ptr::null_mut(),
            )
        };
    }

    /// Sleeps (interruptibly) once, unless `done()` says there is no need:
    /// the caller is queued before `done` runs, so a wake-up between the
    /// check and the sleep is not lost. `exclusive`: one of the exclusive
    /// waiters per wake-up. Returns what `done` returned; the caller loops.
    pub(crate) fn wait_unless(&self, exclusive: bool, done: impl FnOnce() -> bool) -> bool {
        let entry = Opaque::<bindings::wait_queue_entry>::uninit();
        let state = bindings::TASK_INTERRUPTIBLE as i32;
        // SAFETY: `entry` lives until `finish_wait` below; `head` is
        // initialised (type invariant).
        unsafe {
            bindings::init_wait(entry.get());
            if exclusive {
                bindings::prepare_to_wait_exclusive(self.head.get(), entry.get(), state);
            } else {
                bindings::prepare_to_wait(self.head.get(), entry.get(), state);
            }
        }
        let stop = done();
        if !stop {
            // SAFETY: A plain sleep; `wake_all` (or a signal) wakes us.
            unsafe { bindings::schedule() };
        }
        // SAFETY: Pairs with the `prepare_to_wait*` above.
        unsafe { bindings::finish_wait(self.head.get(), entry.get()) };
        stop
    }
}

/// A file's SIGIO owners, the list `fasync_helper` maintains.
///
/// # Invariants
///
/// The list head is NULL or a list `fasync_helper` built.
pub(crate) struct FasyncList(Opaque<*mut bindings::fasync_struct>);

// SAFETY: The list has its own locking (fasync_lock, RCU).
unsafe impl Send for FasyncList {}
// SAFETY: See `Send`.
unsafe impl Sync for FasyncList {}

impl FasyncList {
    /// An empty list.
    pub(crate) const fn new() -> Self {
        // INVARIANT: NULL, the empty list.
        Self(Opaque::new(core::ptr::null_mut()))
    }

    /// The `fasync` file operation: adds or removes `file`'s owner.
    ///
    /// # Safety
    ///
    /// `file` is the open file whose owners this list holds, and the list
    /// lives as long as it.
    pub(crate) unsafe fn helper(&self, fd: c_int, file: *mut bindings::file, on: c_int) -> c_int {
        // SAFETY: The caller's guarantees; the head is valid (type invariant).
        unsafe { bindings::fasync_helper(fd, file, on, self.0.get()) }
    }

    /// Sends SIGIO (`POLL_IN`) to every owner.
    pub(crate) fn signal_io(&self) {
        // SAFETY: The head is valid (type invariant).
        unsafe {
            bindings::kill_fasync(
                self.0.get(),
                bindings::SIGIO as i32,
                bindings::POLL_IN as i32,
            )
        };
    }
}

/// Drops a reference on a `cred` (the static inline `put_cred`).
///
/// # Safety
///
/// `cred` must be a referenced cred whose reference the caller gives up.
pub(crate) unsafe fn put_cred(cred: *const bindings::cred) {
    // SAFETY: Forwarded from the caller's guarantees.
    unsafe { ffi::pfm_put_cred(cred) }
}

/// Queues a task_work on `task`.
///
/// # Safety
///
/// `work` must stay valid until its callback has run or the call failed; its
/// `func` must be set.
pub(crate) unsafe fn task_work_add(
    task: *mut bindings::task_struct,
    work: *mut bindings::callback_head,
    mode: c_int,
) -> Result {
    // SAFETY: Forwarded from the caller's guarantees; `task` is referenced.
    let ret = unsafe { ffi::task_work_add(task, work, mode) };
    if ret < 0 {
        Err(Error::from_errno(ret))
    } else {
        Ok(())
    }
}

/// A spinlock that disables interrupts while held (`spin_lock_irqsave`),
/// usable from process context, from the scheduler's preempt notifiers (which
/// run with IRQs off) and from hard-IRQ context alike.
pub(crate) struct IrqSpinLockBackend;

/// A [`Lock`] whose critical sections run with local interrupts disabled.
pub(crate) type IrqSpinLock<T> = Lock<T, IrqSpinLockBackend>;

/// Creates an [`IrqSpinLock`] initialiser with a lock class of its own.
macro_rules! new_irq_spinlock {
    ($inner:expr, $name:literal) => {
        $crate::rust::IrqSpinLock::new($inner, kernel::c_str!($name), kernel::static_lock_class!())
    };
}
pub(crate) use new_irq_spinlock;

// SAFETY: `spin_lock_irqsave`/`spin_unlock_irqrestore` give mutual exclusion
// between `lock` and `unlock`; `relock` uses the default, which calls `lock`.
unsafe impl Backend for IrqSpinLockBackend {
    type State = bindings::spinlock_t;
    type GuardState = c_ulong;

    unsafe fn init(ptr: *mut Self::State, name: *const c_char, key: *mut bindings::lock_class_key) {
        // SAFETY: The caller guarantees `ptr` is valid for writes and `name`
        // and `key` live forever.
        unsafe { bindings::__spin_lock_init(ptr, name, key) }
    }

    unsafe fn lock(ptr: *mut Self::State) -> Self::GuardState {
        // SAFETY: The caller guarantees the lock was initialised.
        unsafe { ffi::pfm_spin_lock_irqsave(ptr) }
    }

    unsafe fn unlock(ptr: *mut Self::State, flags: &Self::GuardState) {
        // SAFETY: The caller owns the lock; `flags` came from `lock`.
        unsafe { ffi::pfm_spin_unlock_irqrestore(ptr, *flags) }
    }
}

/// A `struct irq_work`: deferral out of contexts that may not wake tasks
/// (the scheduler's `sched_out`, which holds the runqueue lock).
///
/// # Invariants
///
/// `raw` is initialised by `init_irq_work` with the callback given to
/// [`IrqWork::new`]; it sits at offset 0, so the callback's `irq_work`
/// pointer is a pointer to the `IrqWork`.
#[repr(C)]
#[pin_data]
pub(crate) struct IrqWork {
    #[pin]
    raw: Opaque<ffi::IrqWorkRaw>,
}

impl IrqWork {
    /// An initialiser that sets up the work with `func`.
    pub(crate) fn new(func: unsafe extern "C" fn(*mut IrqWork)) -> impl PinInit<Self> {
        // SAFETY: `IrqWork` is `repr(C)` with the raw storage at offset 0, so
        // the pointer the C side passes is the same pointer for both types.
        let func: unsafe extern "C" fn(*mut ffi::IrqWorkRaw) =
            unsafe { core::mem::transmute(func) };
        pin_init!(Self {
            // INVARIANT: `init_irq_work` initialises the storage with `func`.
            raw <- Opaque::ffi_init(move |slot: *mut ffi::IrqWorkRaw| {
                // SAFETY: `slot` is valid for writes and large enough (asserted in shim.c).
                unsafe { ffi::pfm_init_irq_work(slot, func) }
            }),
        })
    }

    /// Queues the work on this CPU; a no-op if it is already pending.
    pub(crate) fn queue(&self) {
        // SAFETY: The work is initialised (type invariant); its owner keeps
        // it alive until `sync` has returned (see the users).
        unsafe { ffi::irq_work_queue(self.raw.get()) };
    }

    /// Waits until the work is neither pending nor running.
    pub(crate) fn sync(&self) {
        // SAFETY: The work is initialised (type invariant).
        unsafe { ffi::irq_work_sync(self.raw.get()) }
    }
}
