// SPDX-License-Identifier: GPL-2.0

//! The soft model's page-fault events, a part: where the thread's own
//! fault counters stood at the context's last fold.
//!
//! The scheduler accounts a thread's time, switches and migrations, which
//! the soft model reads at every fold; it does not account faults. A
//! thread counts its own (`min_flt`, `maj_flt`, in `mm_account_fault`,
//! what `getrusage(RUSAGE_THREAD)` reports), so a context that counts them
//! reads them at its folds, in the thread (its switch-out, a read or write
//! that reaches its CPU), and counts the difference: exactly the thread's
//! own figure over the window, at no cost to a context that does not. The
//! part is added by the first PMC write that selects a fault event and,
//! like every part, kept: a context that stopped counting faults still
//! reads them, harmlessly.
//!
//! An overflow of a fault counter is seen at the fold that counts it: the
//! thread's next switch-out, or a read or write of the context, as for
//! context switches and migrations; a sample's IP is the thread's there.

use crate::pfm_x86::ThreadDeltas;
use crate::rust as glue;

use super::CtxInner;

/// The thread's fault counters at the context's last fold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FaultBase {
    /// No PMD has counted faults: nothing read.
    Off,
    /// To be read in the thread at its next switch-in or fold (a new
    /// attachment, a copy, a PMC write while the thread was elsewhere):
    /// it takes no fault while off a CPU, so none is missed.
    Pending,
    /// Minor and major faults at the last fold.
    At([u64; 2]),
}

impl FaultBase {
    /// What a new attachment starts from: the thread's counters read at
    /// its first switch-in or fold, if faults are counted.
    pub(super) fn for_new_thread(self) -> Self {
        match self {
            Self::Off => Self::Off,
            _ => Self::Pending,
        }
    }
}

impl CtxInner {
    /// The fault part's state (`Off` for a context without parts).
    #[inline(always)]
    fn fault_base(&self) -> FaultBase {
        self.parts.as_deref().map_or(FaultBase::Off, |p| p.faults)
    }

    /// Whether a PMC write ever selected a fault event here (or in the
    /// context this one copies).
    pub(super) fn counts_faults_anywhere(&self) -> bool {
        self.fault_base() != FaultBase::Off
    }

    /// Sets the fault part's state, if the context has parts.
    fn set_fault_base(&mut self, base: FaultBase) {
        if let Some(p) = self.parts.as_deref_mut() {
            p.faults = base;
        }
    }

    /// At a fold in the thread (current): the faults it took since the
    /// last one into `d`, and the base moved to now. Nothing for a context
    /// that counts no faults (one pointer test on a plain context's path).
    #[inline(always)]
    pub(super) fn fold_faults_here(&mut self, d: &mut ThreadDeltas) {
        if let Some(p) = self.parts.as_deref_mut() {
            if p.faults != FaultBase::Off {
                fold_faults(&mut p.faults, d);
            }
        }
    }

    /// Takes the base now if it is pending and the thread is current
    /// here (`cpu`, this CPU): a switch-in, or a PMC write that started
    /// the counting.
    #[inline(always)]
    pub(super) fn take_pending_faults_here(&mut self, cpu: i32) {
        let on_cpu = self.on_cpu;
        if let Some(p) = self.parts.as_deref_mut() {
            if p.faults == FaultBase::Pending && on_cpu == Some(cpu) {
                p.faults = FaultBase::At(glue::current_faults());
            }
        }
    }

    /// A PMC write selected a fault event (`parts` holds the part): the
    /// counting starts now where the thread is current here, else at its
    /// next switch-in.
    pub(super) fn start_fault_counting(&mut self) {
        if self.fault_base() == FaultBase::Off {
            self.set_fault_base(FaultBase::Pending);
            self.take_pending_faults_here(glue::this_cpu());
        }
    }

    /// Counts faults if a PMD of any set selects a fault event (a copy of
    /// another context's registers: an heir's, a clone's) and the context
    /// has parts to hold the base.
    pub(super) fn count_faults_if_selected(&mut self) {
        let mut selected = false;
        self.for_each_image(|c| selected |= c.counts_faults());
        if selected && self.fault_base() == FaultBase::Off {
            self.set_fault_base(FaultBase::Pending);
        }
    }

    /// A new attachment: the thread's counters are read afresh.
    pub(super) fn faults_for_new_thread(&mut self) {
        let base = self.fault_base().for_new_thread();
        self.set_fault_base(base);
    }

    /// An heir starts counting from its thread's creation (`copy_mm`
    /// zeroed the counters), as its task-clock does.
    pub(super) fn faults_from_creation(&mut self) {
        if self.fault_base() != FaultBase::Off {
            self.set_fault_base(FaultBase::At([0; 2]));
        }
    }
}

/// Reads the current thread's fault counters: the deltas since `base`
/// into `d`, `base` moved to them (taken now if it was pending).
#[inline(never)]
fn fold_faults(base: &mut FaultBase, d: &mut ThreadDeltas) {
    let now = glue::current_faults();
    if let FaultBase::At(b) = *base {
        // The thread's own monotonic counters (`unsigned long`).
        d.minor_faults = now[0].wrapping_sub(b[0]);
        d.major_faults = now[1].wrapping_sub(b[1]);
    }
    *base = FaultBase::At(now);
}
