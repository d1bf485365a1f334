// SPDX-License-Identifier: GPL-2.0

//! An attachment's life flags: one atomic byte the scheduler's callbacks,
//! task_works, the context and the reaper read and change without a lock.

use core::sync::atomic::{AtomicU8, Ordering};

/// An attachment's life, one atomic byte of flags.
///
/// `WANTED` is cleared, never set again, once the context no longer
/// wants the thread (unload, close, exit, revoke); callbacks do nothing
/// after that. `REGISTERED` then `UNREGISTERED`: the notifier's time on
/// the thread's list. `DEAD`: the thread did its final switch. `REAPING`:
/// the final drop was handed to the reaper. `REVOKED`: a scheduler
/// callback revoked; the irq_work queues the cleanup. `WATCHED`, set at
/// creation only: the loader is unprivileged, and `watch` is in use.
/// `HEIR`, set before publication only: an heir's attachment.
pub(super) struct Life(AtomicU8);

impl Life {
    /// A life with `flags` set.
    pub(super) const fn new(flags: u8) -> Self {
        Self(AtomicU8::new(flags))
    }

    pub(super) const WANTED: u8 = 1 << 0;
    pub(super) const REGISTERED: u8 = 1 << 1;
    pub(super) const UNREGISTERED: u8 = 1 << 2;
    pub(super) const DEAD: u8 = 1 << 3;
    pub(super) const REAPING: u8 = 1 << 4;
    pub(super) const REVOKED: u8 = 1 << 5;
    pub(super) const WATCHED: u8 = 1 << 6;
    /// Set at creation only: an heir's attachment (a thread that
    /// inheritance or `PFM_LOAD_PROCESS`'s walk added), counted against
    /// its loader's per-user limit whoever the loader is.
    pub(super) const HEIR: u8 = 1 << 7;

    pub(super) fn has(&self, flag: u8) -> bool {
        self.0.load(Ordering::Acquire) & flag != 0
    }

    /// Sets `flag`; whether it was set before.
    pub(super) fn set(&self, flag: u8) -> bool {
        self.0.fetch_or(flag, Ordering::AcqRel) & flag != 0
    }

    /// Clears `flag`; whether it was set before.
    pub(super) fn clear(&self, flag: u8) -> bool {
        self.0.fetch_and(!flag, Ordering::AcqRel) & flag != 0
    }

    pub(super) fn wanted(&self) -> bool {
        self.has(Self::WANTED)
    }

    /// The notifier is on the thread's list.
    pub(super) fn on_list(&self) -> bool {
        self.0.load(Ordering::Acquire) & (Self::REGISTERED | Self::UNREGISTERED) == Self::REGISTERED
    }
}
