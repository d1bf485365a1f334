// SPDX-License-Identifier: GPL-2.0

//! `PFM_IOC_CLONE`: a new context programmed as an UNLOADED one is. A
//! tool keeps one context as a template and clones it for each thread it
//! attaches to, with no `open` of `/dev/perfmon` (a path walk) and no
//! register writes: the clone, LOAD with `PFM_LOAD_START`, UNLOAD and
//! `close` are the four calls of perf's `perf_event_open`, `ENABLE`,
//! `DISABLE` and `close`.

use kernel::prelude::*;

use super::faults::FaultBase;
use super::parts::Parts;
use super::sets::{sets_of, CtxSets};
use super::{Context, CtxInner, Programming};
use crate::globals;
use crate::pfm_sets::PFM_MAX_SETS;
use crate::pfm_state::State;
use crate::pfm_x86::counters::Counters;
use crate::rust::SlabArc;

/// How many times the template may change between the look at it and the
/// copy (another thread of the tool creating or deleting its sets) before
/// the clone gives up with `EBUSY`.
const CLONE_TRIES: usize = 4;

/// What a copy of a context needs allocated: whether it has a set table,
/// and which sets' images the table keeps aside.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Shape {
    table: bool,
    images: u16,
    /// The source counts faults (its fault part is on).
    faults: bool,
}

impl Context {
    /// `PFM_IOC_CLONE`'s new context: UNLOADED, with this context's flags,
    /// registers and event sets as they are now, and nothing else (no
    /// messages, mapped page or threads). This context must be UNLOADED
    /// (`EBADFD`), as for every call that changes its programming.
    pub(crate) fn clone_unloaded(&self) -> Result<SlabArc<Self>> {
        Self::new_programmed(self.copy_programming()?)
    }

    /// A copy of this context's flags, registers and event sets, as they
    /// are now; `EBADFD` unless UNLOADED (a whole program's template is
    /// taken the same way, at its LOAD).
    pub(super) fn copy_programming(&self) -> Result<Programming> {
        for _ in 0..CLONE_TRIES {
            let shape = shape_of(&self.inner.lock())?;
            // Everything that may sleep, before the lock.
            let mut p = Programming::blank()?;
            let mut images: [Option<KBox<Counters>>; PFM_MAX_SETS] = [const { None }; PFM_MAX_SETS];
            for (id, slot) in images.iter_mut().enumerate() {
                if shape.images & (1 << id) != 0 {
                    *slot = Some(KBox::new(
                        Counters::new(&globals().pmu)?,
                        GFP_KERNEL_ACCOUNT,
                    )?);
                }
            }
            if shape.table || shape.faults {
                let mut parts = Parts::new_boxed()?;
                if shape.table {
                    parts.sets = Some(CtxSets::new_boxed()?);
                }
                // The copy counts faults of its own thread, from its LOAD
                // (`rebase_faults`).
                if shape.faults {
                    parts.faults = FaultBase::At([0; 2]);
                }
                p.parts = Some(parts);
            }
            let copied = {
                let inner = self.inner.lock();
                let now = shape_of(&inner)?;
                if now == shape {
                    p.flags = inner.flags;
                    p.used_pmds = inner.used_pmds;
                    p.counters.copy_registers(&inner.counters);
                    if let (Some(from), Some(to)) = (
                        sets_of(&inner.parts),
                        p.parts.as_deref_mut().and_then(|p| p.sets.as_deref_mut()),
                    ) {
                        from.copy_into(to, &mut images);
                    }
                }
                now == shape
            };
            // Images not used (the template changed) are freed here, after
            // the raw lock (see `Context::inner`); so are `p`'s on an error
            // under it, the guard being dropped first.
            drop(images);
            if copied {
                return Ok(p);
            }
        }
        Err(EBUSY)
    }
}

/// What [`Context::clone_unloaded`] must allocate to copy a context, if
/// it may be copied (UNLOADED).
fn shape_of(inner: &CtxInner) -> Result<Shape> {
    if inner.state() != State::Unloaded {
        return Err(crate::ebadfd());
    }
    let sets = sets_of(&inner.parts);
    Ok(Shape {
        table: sets.is_some(),
        images: sets.map_or(0, |s| s.image_mask()),
        faults: inner.counts_faults_anywhere(),
    })
}
