// SPDX-License-Identifier: GPL-2.0

//! What a context may have beyond counting, each part independent of the
//! others (Documentation/perfmon.rst, "How the parts combine"): the
//! mapped counter page (`page.rs`), the event sets (`sets.rs`), the
//! sampling buffer (`smpl.rs`), a place in a whole program (`family/`) and
//! the base of the soft model's fault events (`faults.rs`).
//! Each is allocated when first asked for and kept until the context goes;
//! a context that only counts has none, and pays one pointer for all.
//!
//! Every part is boxed on its own: an heir, which has a family role and
//! perhaps its root's buffer, allocates neither a set table (2 KB) nor a
//! page, and a page's or a buffer's address stays what `mmap` saw.
//!
//! # Invariants
//!
//! Once a context has its parts, and once a part is in them, neither is
//! removed nor replaced before the context is dropped: `mmap` maps a page
//! and a buffer outside the lock.

use kernel::prelude::*;
use kernel::sync::Arc;

use super::family::Family;
use super::faults::FaultBase;
use super::page::CtxPage;
use super::sets::CtxSets;
use super::smpl::CtxSmpl;
use super::CtxInner;

/// A context's optional parts.
pub(super) struct Parts {
    pub(super) page: Option<KBox<CtxPage>>,
    pub(super) sets: Option<KBox<CtxSets>>,
    pub(super) smpl: Option<KBox<CtxSmpl>>,
    pub(super) role: Role,
    /// The thread's fault counters at the last fold (`faults.rs`).
    pub(super) faults: FaultBase,
}

/// Where a context stands in a whole program.
pub(super) enum Role {
    /// It monitors one thread.
    Alone,
    /// It is the root of this family: the context the tool loaded.
    Root(Arc<Family>),
    /// It is an heir of this family: it monitors one of the program's
    /// other threads.
    Heir(Arc<Family>),
}

// An heir's parts: one small object (the set table and the page are
// boxed apart), within perfmon's memory per inherited thread.
const _: () = assert!(core::mem::size_of::<Parts>() <= 64);

impl Parts {
    /// A context's parts, before any is added. May sleep.
    pub(super) fn new_boxed() -> Result<KBox<Self>> {
        Ok(KBox::new(
            Self {
                page: None,
                sets: None,
                smpl: None,
                role: Role::Alone,
                faults: FaultBase::Off,
            },
            GFP_KERNEL_ACCOUNT,
        )?)
    }

    /// The family this context is the root of, if any.
    pub(super) fn root_of(&self) -> Option<&Arc<Family>> {
        match &self.role {
            Role::Root(f) => Some(f),
            _ => None,
        }
    }

    /// The family this context belongs to, as its root or an heir.
    pub(super) fn family(&self) -> Option<&Arc<Family>> {
        match &self.role {
            Role::Root(f) | Role::Heir(f) => Some(f),
            Role::Alone => None,
        }
    }
}

/// For a call that adds a part: the parts to install if the context has
/// none yet, allocated before the context's lock is taken (nothing is
/// allocated under it). `None` if the context had them at the look (they
/// are never removed).
pub(super) fn spare_parts(has: bool) -> Result<Option<KBox<Parts>>> {
    match has {
        true => Ok(None),
        false => Parts::new_boxed().map(Some),
    }
}

impl CtxInner {
    /// The context's parts, if it has any.
    #[inline(always)]
    pub(super) fn parts(&self) -> Option<&Parts> {
        self.parts.as_deref()
    }

    /// Whether the context has parts (any feature beyond counting).
    #[inline(always)]
    pub(super) fn has_parts(&self) -> bool {
        self.parts.is_some()
    }

    /// The context's parts, to add one: `spare` installed if it has none
    /// (the caller allocated it, having seen none, outside the lock).
    /// `ENOMEM` if it has none and `spare` is empty, which the invariant
    /// rules out.
    pub(super) fn parts_for_adding(
        &mut self,
        spare: &mut Option<KBox<Parts>>,
    ) -> Result<&mut Parts> {
        if self.parts.is_none() {
            self.parts = spare.take();
        }
        self.parts.as_deref_mut().ok_or(ENOMEM)
    }
}

impl CtxInner {
    /// Hands a hardware model's 64-bit overflow counts since the last
    /// hand-out (its folds tally them) to the parts that use them, once:
    /// the sampling buffer (an entry per period crossed) and the event sets
    /// (overflow switches). The soft model's counts say theirs as they
    /// advance.
    #[cold]
    pub(super) fn hand_out_hw_tally(&mut self) {
        let Some(parts) = self.parts.as_deref_mut() else {
            return;
        };
        let smpl = parts.smpl.as_deref();
        let mut sets = parts.sets.as_deref_mut();
        self.counters.drain_tally(|pmd, n, random| {
            if let Some(s) = smpl {
                s.note_overflows(pmd, n, random);
            }
            if let Some(t) = sets.as_deref_mut() {
                t.note_hw_overflows(pmd, n);
            }
        });
    }
}
