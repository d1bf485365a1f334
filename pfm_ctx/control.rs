// SPDX-License-Identifier: GPL-2.0

//! The context's small verbs: `PFM_IOC_GET_STATE`, `PFM_IOC_SET_FLAGS` and
//! `PFM_IOC_RESTART`.

use kernel::prelude::*;

use super::Context;
use crate::abi;
use crate::pfm_state::Op;
use crate::rust as glue;

impl Context {
    /// `PFM_IOC_GET_STATE`.
    pub(crate) fn get_state(&self) -> abi::PfmCtxInfo {
        let inner = self.inner.lock();
        let mut status = 0;
        if inner.started {
            status |= abi::PFM_CTXST_STARTED;
        }
        if inner.active {
            status |= abi::PFM_CTXST_ACTIVE;
        }
        if inner.exited {
            status |= abi::PFM_CTXST_EXITED;
        }
        // Started by the exec already: armed only until the exec completes
        // and starts the rest of the family (`exec_committed`).
        if inner.exec_armed && !inner.started {
            status |= abi::PFM_CTXST_EXEC_ARMED;
        }
        let mut info = abi::PfmCtxInfo {
            state: inner.state().abi_value(),
            tid: inner.tid,
            flags: inner.flags,
            status,
            used_pmds: inner.used_pmds.into(),
            threads: u32::from(inner.tid != 0 || inner.exited),
            lost_threads: 0,
            reserved: [0; 2],
        };
        drop(inner);
        if let Some(f) = self.family().filter(|f| f.root_ids().is_some()) {
            (info.threads, info.lost_threads) = f.counts();
        }
        info
    }

    /// `PFM_IOC_SET_FLAGS`.
    pub(crate) fn set_flags(&self, arg: &abi::PfmCtxFlags) -> Result {
        if arg.flags & !abi::PFM_CTXFL_MASK != 0 || arg.pad != 0 || arg.reserved != [0; 3] {
            return Err(EINVAL);
        }
        let mut inner = self.inner.lock();
        inner.transition(Op::SetFlags)?;
        inner.flags = arg.flags;
        Ok(())
    }

    /// `PFM_IOC_RESTART`: leave MASKED, apply the long reset to the
    /// notifying PMDs of the sets that notified.
    pub(crate) fn restart(&self) -> Result {
        self.with_live(|inner, _| -> Result {
            inner.transition(Op::Restart)?;
            // The sets that notified: a set's notification masks the
            // whole context, and RESTART resumes it resetting those sets
            // only (perfmon2's rule; the others' periods run on).
            inner.reset_notified_sets(|counters| {
                let pmds = counters.pmds_mut();
                let mut notified = 0u64;
                for (i, pmd) in pmds.iter_mut().enumerate() {
                    if pmd.flags() & abi::PFM_REGFL_OVFL_NOTIFY != 0 {
                        // Randomised, if the PMD is (`PFM_REGFL_RANDOM`).
                        pmd.reset_to(true);
                        notified |= 1 << i;
                    }
                }
                // perfmon2: the PMDs linked to a notifying one get their
                // long reset too.
                crate::pfm_counter::reset_linked(pmds, notified, true);
            });
            if inner.on_cpu == Some(glue::this_cpu()) {
                inner.run_base = glue::current_runtime_ns();
            }
            // Faults taken while masked are not counted either.
            inner.rebase_faults();
            Ok(())
        })?;
        // A thread blocked on the overflow resumes.
        self.wake();
        Ok(())
    }
}
