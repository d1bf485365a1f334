// SPDX-License-Identifier: GPL-2.0

//! The module's lock backends: IRQ-safe spinlocks, a `spinlock_t` one and a
//! raw one for what nests under the scheduler's runqueue lock.

use kernel::bindings;
use kernel::ffi::{c_char, c_ulong};
use kernel::sync::lock::{Backend, Lock};

use super::ffi;

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

/// A raw spinlock that disables interrupts while held
/// (`raw_spin_lock_irqsave`): for data taken under the scheduler's raw
/// runqueue lock (the preempt notifiers' `sched_out`). A `spinlock_t` there
/// is a sleeping lock on PREEMPT_RT, which `PROVE_RAW_LOCK_NESTING` reports;
/// a raw one stays a spinning lock. Nothing under it may take a
/// `spinlock_t` (wake-ups, printk, allocations).
pub(crate) struct IrqRawSpinLockBackend;

/// A [`Lock`] on a raw spinlock whose critical sections run with local
/// interrupts disabled.
pub(crate) type IrqRawSpinLock<T> = Lock<T, IrqRawSpinLockBackend>;

/// Creates an [`IrqRawSpinLock`] initialiser with a lock class of its own.
macro_rules! new_irq_raw_spinlock {
    ($inner:expr, $name:literal) => {
        $crate::rust::IrqRawSpinLock::new(
            $inner,
            kernel::c_str!($name),
            kernel::static_lock_class!(),
        )
    };
}
pub(crate) use new_irq_raw_spinlock;

// SAFETY: `raw_spin_lock_irqsave`/`raw_spin_unlock_irqrestore` give mutual
// exclusion between `lock` and `unlock`; `relock` uses the default, which
// calls `lock`.
unsafe impl Backend for IrqRawSpinLockBackend {
    type State = bindings::raw_spinlock_t;
    type GuardState = c_ulong;

    unsafe fn init(ptr: *mut Self::State, name: *const c_char, key: *mut bindings::lock_class_key) {
        // SAFETY: The caller guarantees `ptr` is valid for writes and `name`
        // and `key` live forever.
        unsafe { ffi::pfm_raw_spin_lock_init(ptr, name, key) }
    }

    // `raw_spin_lock_irqsave`/`raw_spin_unlock_irqrestore` are macros over
    // these two functions, which x86 never inlines (it selects no
    // `ARCH_INLINE_SPIN_*`): called directly, without a C wrapper's extra
    // call on the switch path.
    unsafe fn lock(ptr: *mut Self::State) -> Self::GuardState {
        // SAFETY: The caller guarantees the lock was initialised.
        unsafe { bindings::_raw_spin_lock_irqsave(ptr) }
    }

    unsafe fn unlock(ptr: *mut Self::State, flags: &Self::GuardState) {
        // SAFETY: The caller owns the lock; `flags` came from `lock`.
        unsafe { bindings::_raw_spin_unlock_irqrestore(ptr, *flags) }
    }
}
