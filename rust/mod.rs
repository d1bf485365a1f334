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
mod registration;
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
pub(crate) use registration::*;
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
        pub(crate) fn pfm_current_min_flt() -> c_ulong;
        pub(crate) fn pfm_current_maj_flt() -> c_ulong;
        pub(crate) fn pfm_task_min_flt(t: *mut bindings::task_struct) -> c_ulong;
        pub(crate) fn pfm_task_maj_flt(t: *mut bindings::task_struct) -> c_ulong;
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
