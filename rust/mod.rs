// SPDX-License-Identifier: GPL-2.0

//! The only place that touches C: declarations of `rust/shim.c` and of the
//! exported kernel functions 6.12's `bindings` does not reach, and small safe
//! wrappers over them, shaped like the upstream abstractions (`miscdevice`,
//! `irq_work`, `task_work`, IRQ-safe spinlocks) so they can be swapped for
//! those when the module moves to a newer kernel.

use kernel::bindings;
use kernel::ffi::{c_char, c_int, c_uint, c_ulong, c_void};
use kernel::prelude::*;
use kernel::types::Opaque;

mod cred;
mod layout;
mod lock;
mod module;
mod msr;
mod sched;
mod slab;
mod sysctl;
mod task;
mod tracepoint;
mod wait;
mod worklist;

pub(crate) use cred::*;
pub(crate) use layout::*;
pub(crate) use lock::*;
pub(crate) use module::*;
pub(crate) use msr::*;
pub(crate) use sched::*;
pub(crate) use slab::*;
pub(crate) use sysctl::*;
pub(crate) use task::*;
pub(crate) use tracepoint::*;
pub(crate) use wait::*;
pub(crate) use worklist::*;

pub(crate) mod clock;
pub(crate) mod cpu;
pub(crate) mod hrtimer;
pub(crate) mod irq;
pub(crate) mod mlock;
pub(crate) mod mm;

pub(crate) use cpu::{call_on_cpu, current_ptr, on_each_cpu, this_cpu};
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
        pub(crate) fn pfm_param_soft_counters() -> c_uint;
        pub(crate) fn pfm_param_max_attached_per_user() -> c_uint;
        pub(crate) fn pfm_param_sim_no_vector_cpu() -> c_int;
        pub(crate) fn pfm_misc_register(
            fops: *const bindings::file_operations,
            minor: c_int,
        ) -> c_int;
        pub(crate) fn pfm_misc_deregister();
        // <linux/anon_inodes.h>, which the kernel's bindings leave out.
        pub(crate) fn anon_inode_getfd(
            name: *const c_char,
            fops: *const bindings::file_operations,
            private_data: *mut c_void,
            flags: c_int,
        ) -> c_int;
        pub(crate) fn pfm_sysfs_register() -> c_int;
        pub(crate) fn pfm_sysfs_unregister();
        pub(crate) fn pfm_spin_lock_irqsave(lock: *mut bindings::spinlock_t) -> c_ulong;
        pub(crate) fn pfm_spin_unlock_irqrestore(lock: *mut bindings::spinlock_t, flags: c_ulong);
        pub(crate) fn pfm_raw_spin_lock_init(
            lock: *mut bindings::raw_spinlock_t,
            name: *const c_char,
            key: *mut bindings::lock_class_key,
        );
        pub(crate) fn pfm_init_irq_work(
            work: *mut IrqWorkRaw,
            func: unsafe extern "C" fn(*mut IrqWorkRaw),
        );
        pub(crate) fn pfm_poll_wait(
            file: *mut bindings::file,
            queue: *mut bindings::wait_queue_head,
            table: *mut bindings::poll_table_struct,
        );
        pub(crate) fn pfm_put_cred(cred: *const bindings::cred);
        pub(crate) fn pfm_init_waitqueue_head(q: *mut bindings::wait_queue_head);
        pub(crate) fn pfm_user_ip(task: *mut bindings::task_struct) -> c_ulong;
        pub(crate) fn pfm_user_bp(task: *mut bindings::task_struct) -> c_ulong;
        pub(crate) fn pfm_user_64bit(task: *mut bindings::task_struct) -> bool;
        pub(crate) fn copy_from_user_nofault(
            dst: *mut c_void,
            src: *const c_void,
            size: usize,
        ) -> core::ffi::c_long;
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
        pub(crate) fn pfm_task_pi_lock(task: *mut bindings::task_struct) -> c_ulong;
        pub(crate) fn pfm_task_pi_unlock(task: *mut bindings::task_struct, flags: c_ulong);
        pub(crate) fn pfm_smp_rmb();
        pub(crate) fn pfm_task_cpu(task: *mut bindings::task_struct) -> c_uint;
        pub(crate) fn pfm_task_in_execve(task: *mut bindings::task_struct) -> bool;
        pub(crate) fn pfm_preempt_notifier_add(
            task: *mut bindings::task_struct,
            notifier: *mut bindings::preempt_notifier,
        );
        pub(crate) fn pfm_cpu_relax();
        pub(crate) fn pfm_exec_watch_register();
        pub(crate) fn pfm_exec_watch_unregister();
        pub(crate) fn pfm_tracepoint_synchronize_unregister();
        pub(crate) fn pfm_get_pid_ns(
            ns: *mut bindings::pid_namespace,
        ) -> *mut bindings::pid_namespace;
        pub(crate) fn pfm_put_pid_ns(ns: *mut bindings::pid_namespace);
        pub(crate) fn pfm_current_switches() -> c_ulong;
        pub(crate) fn pfm_process_threads(
            task: *mut bindings::task_struct,
            out: *mut *mut bindings::task_struct,
            max: c_int,
        ) -> c_int;
        pub(crate) fn pfm_current_tid() -> c_int;
        pub(crate) fn pfm_same_thread_group_as_current(task: *mut bindings::task_struct) -> bool;
        pub(crate) fn pfm_thread_group_key(task: *mut bindings::task_struct) -> c_ulong;
        pub(crate) fn pfm_current_group_dead() -> bool;
        pub(crate) fn pfm_cred_ids(cred: *const bindings::cred, ids: *mut u32);
        pub(crate) fn pfm_task_dumpable(task: *mut bindings::task_struct) -> c_int;
        pub(crate) fn pfm_mm_dumpable(mm: *mut bindings::mm_struct) -> c_int;
        pub(crate) fn pfm_cred_cap_permitted(cred: *const bindings::cred) -> u64;
        pub(crate) fn pfm_cred_cap_effective(cred: *const bindings::cred) -> u64;
        pub(crate) fn pfm_cred_user_ns(
            cred: *const bindings::cred,
        ) -> *mut bindings::user_namespace;
        pub(crate) fn pfm_mm_user_ns(mm: *mut bindings::mm_struct)
            -> *mut bindings::user_namespace;
        pub(crate) fn pfm_task_mm_user_ns(
            task: *mut bindings::task_struct,
        ) -> *mut bindings::user_namespace;
        pub(crate) fn pfm_user_ns_level(ns: *const bindings::user_namespace) -> c_int;
        pub(crate) fn pfm_user_ns_parent(
            ns: *const bindings::user_namespace,
        ) -> *mut bindings::user_namespace;
        pub(crate) fn pfm_user_ns_owner(ns: *const bindings::user_namespace) -> u32;
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
        pub(crate) fn pfm_init_delayed_work(
            work: *mut bindings::delayed_work,
            func: unsafe extern "C" fn(*mut bindings::work_struct),
        );
        pub(crate) fn pfm_kmem_cache_alloc(
            cache: *mut bindings::kmem_cache,
            flags: bindings::gfp_t,
        ) -> *mut c_void;
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
        pub(crate) fn get_random_u64() -> u64;
        pub(crate) fn reserve_perfctr_nmi(msr: c_uint) -> c_int;
        pub(crate) fn release_perfctr_nmi(msr: c_uint);
        pub(crate) fn reserve_evntsel_nmi(msr: c_uint) -> c_int;
        pub(crate) fn release_evntsel_nmi(msr: c_uint);
        pub(crate) fn task_active_pid_ns(
            task: *mut bindings::task_struct,
        ) -> *mut bindings::pid_namespace;
        pub(crate) fn for_each_kernel_tracepoint(
            func: unsafe extern "C" fn(*mut bindings::tracepoint, *mut c_void),
            data: *mut c_void,
        );
        pub(crate) fn tracepoint_probe_register(
            tp: *mut bindings::tracepoint,
            probe: *mut c_void,
            data: *mut c_void,
        ) -> c_int;
        pub(crate) fn tracepoint_probe_unregister(
            tp: *mut bindings::tracepoint,
            probe: *mut c_void,
            data: *mut c_void,
        ) -> c_int;
    }

    /// Storage for a `struct irq_work`; `shim.c` asserts that it fits.
    #[repr(C, align(8))]
    pub(crate) struct IrqWorkRaw(pub(crate) [u8; 32]);
}

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

/// `TWA_RESUME` of `enum task_work_notify_mode`: run at the next return to user mode.
pub(crate) const TWA_RESUME: c_int = 1;
/// `TWA_SIGNAL`: like `TWA_RESUME`, and kick the task out of an interruptible sleep.
pub(crate) const TWA_SIGNAL: c_int = 2;
/// `TWAF_NO_ALLOC`: `task_work_add` records its KASAN stack without
/// allocating. Without it a KASAN kernel may take the page allocator's
/// `zone->lock` (a sleeping lock on PREEMPT_RT) to grow its stack depot,
/// which lockdep rightly refuses under a raw spinlock; perf_events queues
/// its task_works with it for the same reason.
pub(crate) const TWAF_NO_ALLOC: c_int = 0x0100;

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

/// The `soft_counters=` module parameter.
pub(crate) fn param_soft_counters() -> u32 {
    // SAFETY: Reads a module parameter that is read-only after load.
    unsafe { ffi::pfm_param_soft_counters() }
}

/// The `max_attached_per_user` module parameter (root may change it at
/// run time through /sys/module/perfmon/parameters).
pub(crate) fn param_max_attached_per_user() -> u32 {
    // SAFETY: A `READ_ONCE` of an unsigned int.
    unsafe { ffi::pfm_param_max_attached_per_user() }
}

/// The `sim_no_vector_cpu=` module parameter (an `intel_arch_sim` test
/// hook), -1 for none.
pub(crate) fn param_sim_no_vector_cpu() -> i32 {
    // SAFETY: Reads a module parameter that is read-only after load.
    unsafe { ffi::pfm_param_sim_no_vector_cpu() }
}

/// `CLOCK_MONOTONIC` in nanoseconds, safe in any context (the
/// timekeeper's fast accessor, as `bpf_ktime_get_ns`).
pub(crate) fn monotonic_ns() -> u64 {
    // SAFETY: No preconditions; lockless.
    unsafe { bindings::ktime_get_mono_fast_ns() }
}

/// `local_clock()`: nanoseconds, monotonic on this CPU.
pub(crate) fn now_ns() -> u64 {
    // SAFETY: `local_clock` has no preconditions.
    unsafe { ffi::local_clock() }
}

/// `get_random_u64()`: 64 bits of the kernel's CSPRNG (its per-CPU batch).
/// Its batch's `local_lock` is a sleeping lock on PREEMPT_RT: not under a
/// raw spinlock.
pub(crate) fn random_u64() -> u64 {
    // SAFETY: No preconditions; callable in any context but under a raw
    // spinlock on PREEMPT_RT (the caller's to avoid, as documented).
    unsafe { ffi::get_random_u64() }
}

/// `cpu_relax()`: a busy-wait's pause.
pub(crate) fn cpu_relax() {
    // SAFETY: No preconditions.
    unsafe { ffi::pfm_cpu_relax() }
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

/// The user-mode instruction pointer saved on the current thread's kernel
/// stack (the one it returns to user mode with).
pub(crate) fn current_user_ip() -> u64 {
    // SAFETY: `current` is live and runs on its own stack.
    unsafe { ffi::pfm_user_ip(bindings::get_current()) as u64 }
}

/// The user-mode frame pointer saved on the current thread's kernel
/// stack, where a frame-pointer walk of its user stack starts; `None` for
/// a thread in 32-bit mode, whose frames are not 64-bit words.
pub(crate) fn current_user_frame_pointer() -> Option<u64> {
    // SAFETY: Reads the current task pointer, always valid in process
    // context and in interrupts.
    let task = unsafe { bindings::get_current() };
    // SAFETY: `current` is live and runs on its own stack.
    let long_mode = unsafe { ffi::pfm_user_64bit(task) };
    // SAFETY: As above.
    long_mode.then(|| unsafe { ffi::pfm_user_bp(task) } as u64)
}

/// Reads the two words of the current thread's user stack frame at `fp`
/// (the caller's frame pointer and the return address) without faulting:
/// `None` if the address is not user memory, not mapped or not present,
/// as `perf_callchain_user` reads them. Any context, the thread's own
/// address space loaded (in the thread).
pub(crate) fn read_user_frame(fp: u64) -> Option<[u64; 2]> {
    let mut frame = [0u64; 2];
    // SAFETY: `copy_from_user_nofault` checks that the source is user
    // memory of the loaded address space and reads it with page faults
    // disabled (an error instead of a fault); the destination is 16
    // bytes of ours.
    let r = unsafe {
        ffi::copy_from_user_nofault(
            frame.as_mut_ptr().cast(),
            fp as usize as *const c_void,
            core::mem::size_of_val(&frame),
        )
    };
    (r == 0).then_some(frame)
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

/// `synchronize_rcu()`: waits for every RCU read-side section, and every
/// section with interrupts or preemption off, begun before the call.
/// Process context, no lock held.
pub(crate) fn synchronize_rcu() {
    // SAFETY: The caller's context, as documented.
    unsafe { bindings::synchronize_rcu() };
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

// SAFETY: `irq_work_queue` and `irq_work_sync` may be called on one work
// from any CPU at once: the kernel manages its state atomically.
unsafe impl Send for IrqWork {}
// SAFETY: See `Send`.
unsafe impl Sync for IrqWork {}

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
