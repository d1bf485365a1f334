// SPDX-License-Identifier: GPL-2.0

//! The soft model's page-fault events, a part: where the thread's own
//! fault counters stood at the context's last fold.
//!
//! The scheduler accounts a thread's time, switches and migrations, which
//! the soft model reads at every fold; it does not account faults. A
//! thread counts its own (`min_flt`, `maj_flt`, in `mm_account_fault`,
//! what `getrusage(RUSAGE_THREAD)` reports), so a context that counts them
//! reads them at its folds while it counts (each in the thread: its
//! switches, a call that reaches its CPU) and counts the difference, and
//! takes them afresh where counting resumes (an install, START, RESTART, a
//! start on exec, a PMC write that selects a fault event): exactly the
//! thread's own figure over the counting windows, at no cost to a context
//! that counts none (its folds never look). The part is added by the first
//! PMC write that selects a fault event and, like every part, kept.
//!
//! An overflow of a fault counter is found at the fold that counts it: the
//! thread's next switch-out, or a read or write of the context, as for
//! context switches and migrations; a sample's IP is the thread's there.

use crate::pfm_x86::ThreadDeltas;
use crate::rust as glue;

use super::CtxInner;

/// The thread's fault counters at the context's last fold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FaultBase {
    /// No PMC has selected a fault event: nothing read.
    Off,
    /// Minor and major faults at the last fold (or rebase).
    At([u64; 2]),
}

impl CtxInner {
    /// Whether a PMC write ever selected a fault event here (or in the
    /// context this one copies).
    pub(super) fn counts_faults_anywhere(&self) -> bool {
        self.parts
            .as_deref()
            .is_some_and(|p| p.faults != FaultBase::Off)
    }

    /// Counting (re)starts: the base is the thread's counters now, read in
    /// the thread if it is current here, else from the task. Exact where
    /// the task is off every CPU (a remote install holds it there; a
    /// thread switched out cannot run on before its switch-in takes the
    /// context's lock, which the caller holds); where it runs elsewhere
    /// (`with_live`'s fallback for a thread that keeps migrating), a read
    /// racing with its faults, where counting starts anyway. Nothing for a
    /// context that counts no faults.
    pub(super) fn rebase_faults(&mut self) {
        if !self.counts_faults_anywhere() {
            return;
        }
        let now = match (self.on_cpu, &self.attach) {
            (Some(cpu), _) if cpu == glue::this_cpu() => glue::current_faults(),
            (_, Some(att)) => glue::task_faults(att.task()),
            (_, None) => return,
        };
        self.set_fault_base(now);
    }

    /// [`CtxInner::rebase_faults`] in the thread itself (current), which
    /// the context may not yet see on this CPU (an install).
    pub(super) fn rebase_faults_here(&mut self) {
        if self.counts_faults_anywhere() {
            self.set_fault_base(glue::current_faults());
        }
    }

    /// Counts faults from `base` on, if the context counts them.
    fn set_fault_base(&mut self, base: [u64; 2]) {
        if let Some(p) = self.parts.as_deref_mut() {
            if p.faults != FaultBase::Off {
                p.faults = FaultBase::At(base);
            }
        }
    }

    /// A PMC write selected a fault event (`parts` holds the part): the
    /// counting of faults starts now.
    pub(super) fn start_fault_counting(&mut self) {
        if let Some(p) = self.parts.as_deref_mut() {
            if p.faults == FaultBase::Off {
                p.faults = FaultBase::At([0; 2]);
                self.rebase_faults();
            }
        }
    }

    /// Counts faults if a PMD of any set selects a fault event (a copy of
    /// another context's registers: an heir's) and the context has parts
    /// to hold the base (taken at its install).
    pub(super) fn count_faults_if_selected(&mut self) {
        let mut selected = false;
        self.for_each_image(|c| selected |= c.counts_faults());
        if let Some(p) = self.parts.as_deref_mut() {
            if selected {
                p.faults = FaultBase::At([0; 2]);
            }
        }
    }

    /// An heir born started counts faults from its thread's creation
    /// (`copy_mm` zeroed the counters: a fork's `CLONE_CHILD_SETTID`
    /// write in `schedule_tail` is its first), as its task-clock does.
    pub(super) fn count_faults_from_creation(&mut self) {
        self.set_fault_base([0; 2]);
    }
}

/// At a fold in the thread (current) of a context that counts: the faults
/// it took since `base` into `d`, and `base` moved to now.
#[inline(never)]
pub(super) fn fold_faults(base: &mut [u64; 2], d: &mut ThreadDeltas) {
    let now = glue::current_faults();
    // The thread's own monotonic counters (`unsigned long`).
    d.minor_faults = now[0].wrapping_sub(base[0]);
    d.major_faults = now[1].wrapping_sub(base[1]);
    *base = now;
}
