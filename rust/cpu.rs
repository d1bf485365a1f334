// SPDX-License-Identifier: GPL-2.0

//! CPUs: which one we run on and its current task (`pcpu_hot`), running a
//! closure on one CPU or on every CPU (IPIs), and a CPU hotplug state whose
//! callbacks run as CPUs come and go.

use core::marker::PhantomData;

use kernel::bindings;
use kernel::ffi::{c_int, c_uint, c_void};
use kernel::prelude::*;

mod ffi {
    use super::*;

    extern "C" {
        pub(super) fn pfm_on_each_cpu(func: unsafe extern "C" fn(*mut c_void), info: *mut c_void);
    }
}

/// Offsets in `struct pcpu_hot` (its fields are in an anonymous struct in
/// an anonymous union, both at offset 0; checked against C at load,
/// `layout_mismatch`).
pub(super) const HOT_CURRENT_TASK: usize =
    core::mem::offset_of!(bindings::pcpu_hot__bindgen_ty_1__bindgen_ty_1, current_task);
pub(super) const HOT_CPU_NUMBER: usize =
    core::mem::offset_of!(bindings::pcpu_hot__bindgen_ty_1__bindgen_ty_1, cpu_number);

/// The CPU we run on (`raw_smp_processor_id()`), stable only while
/// preemption or interrupts are off: one `%gs`-relative load of
/// `pcpu_hot.cpu_number`, as the C macro compiles to, instead of a call
/// (the switch path and the cheap read use it).
#[inline(always)]
pub(crate) fn this_cpu() -> i32 {
    let cpu: i32;
    // SAFETY: `%gs` holds this CPU's per-CPU base and `pcpu_hot` is an
    // exported per-CPU variable: the load is `this_cpu_read(
    // pcpu_hot.cpu_number)`. It reads memory only, and no stack.
    unsafe {
        core::arch::asm!(
            "movl %gs:{hot}+{off}, {cpu:e}",
            hot = sym bindings::pcpu_hot,
            off = const HOT_CPU_NUMBER,
            cpu = out(reg) cpu,
            options(att_syntax, nostack, preserves_flags, readonly),
        );
    }
    cpu
}

/// The current task (`get_current()`): one `%gs`-relative load of
/// `pcpu_hot.current_task`, instead of a call to the kernel crate's helper.
#[inline(always)]
pub(crate) fn current_ptr() -> *mut bindings::task_struct {
    let task: *mut bindings::task_struct;
    // SAFETY: As for `this_cpu`: `this_cpu_read(pcpu_hot.current_task)`.
    unsafe {
        core::arch::asm!(
            "movq %gs:{hot}+{off}, {task}",
            hot = sym bindings::pcpu_hot,
            off = const HOT_CURRENT_TASK,
            task = out(reg) task,
            options(att_syntax, nostack, preserves_flags, readonly),
        );
    }
    task
}

/// Runs `f` on CPU `cpu` (an IPI, or a direct call if that is this CPU)
/// and returns once it has returned; `f` runs in hard-IRQ context, with
/// interrupts off. `Err(ENXIO)` if `cpu` is offline (then `f` did not run).
///
/// Call from process context without spinlocks held, or with interrupts
/// on: the caller waits for the other CPU, which must be able to take the
/// IPI (two CPUs calling each other with interrupts off would deadlock).
/// `f` must not sleep. `Send`: `f` runs on another CPU while the caller
/// waits, as a scoped thread would.
pub(crate) fn call_on_cpu<F: FnMut() + Send>(cpu: i32, f: &mut F) -> Result {
    /// # Safety
    ///
    /// `info` is a `&mut F` that nothing else uses during the call.
    unsafe extern "C" fn trampoline<F: FnMut() + Send>(info: *mut c_void) {
        // SAFETY: `info` is the `&mut F` of `call_on_cpu`, which waits for
        // this call to return (`wait = 1`) and has no other use of it meanwhile.
        let f = unsafe { &mut *(info as *mut F) };
        f();
    }
    // SAFETY: `trampoline::<F>` reads `info` as the `&mut F` passed here,
    // which outlives the call: `wait = 1` returns only after it ran.
    let ret = unsafe {
        bindings::smp_call_function_single(
            cpu,
            Some(trampoline::<F>),
            f as *mut F as *mut c_void,
            1,
        )
    };
    if ret != 0 {
        return Err(Error::from_errno(ret));
    }
    Ok(())
}

/// Runs `f` on every online CPU (IPIs, and a direct call on this one),
/// each in hard-IRQ context with interrupts off, and returns once every
/// call has returned. Process context without spinlocks held (it waits for
/// the other CPUs). `Sync`: the CPUs run `f` at the same time.
pub(crate) fn on_each_cpu<F: Fn() + Sync>(f: &F) {
    /// # Safety
    ///
    /// `info` is a `&F`, alive for the call.
    unsafe extern "C" fn trampoline<F: Fn() + Sync>(info: *mut c_void) {
        // SAFETY: `info` is the `&F` of `on_each_cpu`, which waits for
        // every call to return; `F: Sync` allows the concurrent calls.
        let f = unsafe { &*(info as *const F) };
        f();
    }
    // SAFETY: `trampoline::<F>` reads `info` as the `&F` passed here,
    // alive until `pfm_on_each_cpu` (`on_each_cpu(.., wait = 1)`) returns.
    unsafe { ffi::pfm_on_each_cpu(trampoline::<F>, f as *const F as *mut c_void) }
}

/// The callbacks of a [`CpuhpState`]. They run in the CPU's hotplug
/// thread, on that CPU, in process context (they may sleep), one at a
/// time: the hotplug core serialises every callback of a state.
pub(crate) trait Hotplug {
    /// `cpu` came online (and, at setup, every CPU already online).
    fn online(cpu: u32);
    /// `cpu` is going offline (and, at removal, every CPU still online).
    fn offline(cpu: u32);
}

/// A dynamic CPU hotplug state in the `CPUHP_AP_ONLINE_DYN` range whose
/// callbacks are `H`'s; removed (with `H::offline` on every online CPU)
/// when dropped.
///
/// # Invariants
///
/// `state` is the state `__cpuhp_setup_state` allocated for `H`.
pub(crate) struct CpuhpState<H: Hotplug> {
    state: bindings::cpuhp_state,
    _callbacks: PhantomData<fn() -> H>,
}

impl<H: Hotplug> CpuhpState<H> {
    /// Allocates the state, named `name`, and calls `H::online` on every
    /// online CPU. Process context.
    pub(crate) fn setup(name: &'static CStr) -> Result<Self> {
        // SAFETY: The callbacks are functions of this module: the module
        // cannot be unloaded while `self` lives (its exit drops it), and
        // `drop` removes the state; the name is static.
        let ret = unsafe {
            bindings::__cpuhp_setup_state(
                bindings::cpuhp_state_CPUHP_AP_ONLINE_DYN,
                name.as_char_ptr(),
                true,
                Some(online::<H>),
                Some(offline::<H>),
                false,
            )
        };
        if ret < 0 {
            return Err(Error::from_errno(ret));
        }
        // INVARIANT: a DYN setup returns the state it allocated.
        Ok(Self {
            state: ret as bindings::cpuhp_state,
            _callbacks: PhantomData,
        })
    }
}

impl<H: Hotplug> Drop for CpuhpState<H> {
    fn drop(&mut self) {
        // SAFETY: `state` was set up by `setup` (type invariant) and is
        // removed once; the teardown callback runs on every online CPU.
        unsafe { bindings::__cpuhp_remove_state(self.state, true) };
    }
}

/// The C entry of [`Hotplug::online`].
extern "C" fn online<H: Hotplug>(cpu: c_uint) -> c_int {
    H::online(cpu);
    0
}

/// The C entry of [`Hotplug::offline`].
extern "C" fn offline<H: Hotplug>(cpu: c_uint) -> c_int {
    H::offline(cpu);
    0
}

/// Whether `cpu` is online now (a snapshot: hotplug is not held off).
pub(crate) fn is_online(cpu: usize) -> bool {
    match c_uint::try_from(cpu) {
        // SAFETY: `cpu_online` reads a bit of a global mask; out-of-range
        // numbers are refused above or read as offline by the shim.
        Ok(c) if cpu < nr_cpu_ids() => unsafe { super::ffi::pfm_cpu_online(c) },
        _ => false,
    }
}

/// `nr_cpu_ids`: one more than the highest possible CPU number.
pub(crate) fn nr_cpu_ids() -> usize {
    // SAFETY: `nr_cpu_ids` is set at boot and constant afterwards.
    unsafe { bindings::nr_cpu_ids as usize }
}

/// One `make()` per possible CPU, indexed by CPU number: the module's
/// per-CPU tables (allocated once at load, never resized, so their entries
/// do not move).
pub(crate) fn per_cpu_vec<T>(mut make: impl FnMut() -> T) -> Result<KVec<T>> {
    let n = nr_cpu_ids();
    let mut v = KVec::with_capacity(n, GFP_KERNEL)?;
    for _ in 0..n {
        v.push(make(), GFP_KERNEL)?;
    }
    Ok(v)
}
