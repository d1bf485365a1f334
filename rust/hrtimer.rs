// SPDX-License-Identifier: GPL-2.0

//! High-resolution timers pinned to the CPU that starts them, their
//! callbacks in hard-IRQ context (`HRTIMER_MODE_REL_PINNED_HARD`): a
//! periodic one, and a one-shot one that a CPU arms and disarms for itself.

use core::sync::atomic::{AtomicBool, Ordering};

use kernel::bindings;
use kernel::types::Opaque;

/// The timer mode: relative expiry, pinned to the starting CPU, expiring
/// in hard-IRQ context even on PREEMPT_RT.
const MODE: bindings::hrtimer_mode = bindings::hrtimer_mode_HRTIMER_MODE_REL_PINNED_HARD;

/// A timer that calls `tick` every `period_ns` on the CPU that started it
/// (until hotplug moves it), from [`PeriodicTimer::start_here`] until it is
/// cancelled or dropped.
///
/// # Invariants
///
/// While `started` is set, `timer` is initialised with [`expired`] as its
/// function and is owned by this object: `timer` is the first field of a
/// `repr(C)` struct, so the callback finds the object at its address.
#[repr(C)]
pub(crate) struct PeriodicTimer {
    timer: Opaque<bindings::hrtimer>,
    period_ns: i64,
    tick: fn(),
    started: AtomicBool,
}

// SAFETY: The `hrtimer` is only touched through the hrtimer API, which
// locks its base; the other fields are immutable or atomic.
unsafe impl Send for PeriodicTimer {}
// SAFETY: See `Send`.
unsafe impl Sync for PeriodicTimer {}

impl PeriodicTimer {
    /// A timer not started yet.
    pub(crate) const fn new(period_ns: i64, tick: fn()) -> Self {
        Self {
            timer: Opaque::uninit(),
            period_ns,
            tick,
            started: AtomicBool::new(false),
        }
    }

    /// Initialises the timer and starts it on this CPU, unless it already
    /// runs. Call with interrupts off (an IPI callback), so that "this
    /// CPU" holds.
    ///
    /// # Safety
    ///
    /// `self` must not move until it is dropped, and [`PeriodicTimer::cancel`]
    /// must not run concurrently with this call.
    pub(crate) unsafe fn start_here(&self) {
        if self.started.load(Ordering::Acquire) {
            return;
        }
        let t = self.timer.get();
        // SAFETY: `t` is this timer's storage, not in use (not started),
        // which stays put until `drop` cancels the timer (the caller's
        // contract).
        unsafe {
            bindings::hrtimer_init(t, bindings::CLOCK_MONOTONIC as i32, MODE);
            (*t).function = Some(expired);
            bindings::hrtimer_start_range_ns(t, self.period_ns, 0, MODE);
        }
        // INVARIANT: initialised with `expired` just above.
        self.started.store(true, Ordering::Release);
    }

    /// Stops the timer, waiting for a running `tick` to return. Not from
    /// `tick` itself (it would wait for itself).
    pub(crate) fn cancel(&self) {
        if self.started.swap(false, Ordering::AcqRel) {
            // SAFETY: Initialised by `start_here` (type invariant).
            unsafe { bindings::hrtimer_cancel(self.timer.get()) };
        }
    }
}

impl Drop for PeriodicTimer {
    fn drop(&mut self) {
        self.cancel();
    }
}

/// The C entry of every [`PeriodicTimer`]: the tick, then the next expiry
/// one period later.
///
/// # Safety
///
/// `t` is the `timer` of a started [`PeriodicTimer`].
unsafe extern "C" fn expired(t: *mut bindings::hrtimer) -> bindings::hrtimer_restart {
    // SAFETY: `t` is the `timer` field at offset 0 of a started
    // `PeriodicTimer` (type invariant), alive until it is cancelled, which
    // waits for this callback.
    let this = unsafe { &*(t as *const PeriodicTimer) };
    (this.tick)();
    // SAFETY: `t` is the running timer; forwarding it from its own callback
    // is how a periodic hrtimer restarts.
    unsafe { bindings::hrtimer_forward(t, bindings::ktime_get(), this.period_ns) };
    bindings::hrtimer_restart_HRTIMER_RESTART
}

/// A one-shot timer that calls `fire` on the CPU that last armed it, in
/// hard-IRQ context, `ns` after [`OneShotTimer::arm_here`]; armed and
/// disarmed only by that CPU, with interrupts off (a per-CPU timer).
///
/// # Invariants
///
/// While `init` is set, `timer` is initialised with [`fired`] as its
/// function: `timer` is the first field of a `repr(C)` struct, so the
/// callback finds the object at its address.
#[repr(C)]
pub(crate) struct OneShotTimer {
    timer: Opaque<bindings::hrtimer>,
    fire: fn(),
    init: AtomicBool,
}

// SAFETY: The `hrtimer` is only touched through the hrtimer API, which
// locks its base; the other fields are immutable or atomic.
unsafe impl Send for OneShotTimer {}
// SAFETY: See `Send`.
unsafe impl Sync for OneShotTimer {}

impl OneShotTimer {
    /// A timer not armed yet.
    pub(crate) const fn new(fire: fn()) -> Self {
        Self {
            timer: Opaque::uninit(),
            fire,
            init: AtomicBool::new(false),
        }
    }

    /// Arms the timer to fire `ns` from now on this CPU, re-arming it if it
    /// was armed; from its own callback too. Interrupts off.
    ///
    /// # Safety
    ///
    /// `self` must not move from the first call until it is dropped, and
    /// only one CPU at a time may arm or disarm it (its owner's, with
    /// interrupts off).
    pub(crate) unsafe fn arm_here(&self, ns: u64) {
        let t = self.timer.get();
        if !self.init.load(Ordering::Acquire) {
            // SAFETY: `t` is this timer's storage, never initialised (the
            // flag), which stays put until `drop` (the caller's contract).
            unsafe {
                bindings::hrtimer_init(t, bindings::CLOCK_MONOTONIC as i32, MODE);
                (*t).function = Some(fired);
            }
            // INVARIANT: initialised with `fired` just above.
            self.init.store(true, Ordering::Release);
        }
        let ns = i64::try_from(ns).unwrap_or(i64::MAX);
        // SAFETY: Initialised above; a pinned relative start from the CPU
        // that owns the timer.
        unsafe { bindings::hrtimer_start_range_ns(t, ns, 0, MODE) };
    }

    /// Disarms the timer if it is armed, without waiting: from its own
    /// callback, which then does not re-arm it, this does nothing.
    pub(crate) fn disarm(&self) {
        if self.init.load(Ordering::Acquire) {
            // SAFETY: Initialised (type invariant).
            unsafe { bindings::hrtimer_try_to_cancel(self.timer.get()) };
        }
    }

    /// Disarms the timer and waits for a running callback to return.
    /// Process context, and nothing may arm it again afterwards for the
    /// timer to stay quiet.
    pub(crate) fn cancel(&self) {
        if self.init.load(Ordering::Acquire) {
            // SAFETY: Initialised (type invariant).
            unsafe { bindings::hrtimer_cancel(self.timer.get()) };
        }
    }
}

impl Drop for OneShotTimer {
    fn drop(&mut self) {
        // Nothing arms it any more: it is being dropped.
        self.cancel();
    }
}

/// The C entry of every [`OneShotTimer`].
///
/// # Safety
///
/// `t` is the `timer` of an initialised [`OneShotTimer`].
unsafe extern "C" fn fired(t: *mut bindings::hrtimer) -> bindings::hrtimer_restart {
    // SAFETY: `t` is the `timer` field at offset 0 of an initialised
    // `OneShotTimer` (type invariant), alive until dropped, which waits for
    // this callback.
    let this = unsafe { &*(t as *const OneShotTimer) };
    (this.fire)();
    // `fire` may have armed it again (`hrtimer_start` from the callback
    // enqueues it); nothing else restarts it.
    bindings::hrtimer_restart_HRTIMER_NORESTART
}
