// SPDX-License-Identifier: GPL-2.0

//! Whole programs, an heir: the context of a thread the family gained
//! (by inheritance or `PFM_LOAD_PROCESS`'s walk), made from the template.

use kernel::prelude::*;
use kernel::sync::Arc;

use super::{Family, Template};
use crate::abi;
use crate::pfm_ctx::parts::{Parts, Role};
use crate::pfm_ctx::smpl::FamilySmpl;
use crate::pfm_ctx::Context;
use crate::rust::{self as glue, SlabArc};

impl Context {
    /// Whether this context is `family`'s root or one of its heirs.
    pub(super) fn in_family(&self, family: &Family) -> bool {
        self.inner
            .lock()
            .parts()
            .and_then(Parts::family)
            .is_some_and(|f| core::ptr::eq(&**f, family))
    }

    /// An heir of `family` for a new thread of process `pid`: the
    /// template's registers and event sets, no messages (the loaded
    /// thread's tool reads the root's), entries in the root's buffer
    /// `smpl` if it samples, not attached.
    pub(super) fn new_heir(
        family: &Arc<Family>,
        template: &Template,
        smpl: Option<&FamilySmpl>,
        pid: u32,
    ) -> Result<SlabArc<Self>> {
        let (counters, sets) = template.copy_for_heir()?;
        let mut parts = Parts::new_boxed()?;
        parts.role = Role::Heir(family.clone());
        parts.sets = sets;
        if let Some(s) = smpl {
            parts.smpl = Some(KBox::new(s.heir(pid), GFP_KERNEL_ACCOUNT)?);
        }
        let ctx = Context::new()?;
        let blank = {
            let mut inner = ctx.inner.lock();
            inner.used_pmds = template.used_pmds();
            inner.flags = abi::PFM_CTXFL_NO_MSG;
            inner.parts = Some(parts);
            let blank = core::mem::replace(&mut inner.counters, counters);
            inner.count_faults_if_selected();
            blank
        };
        // The new context's own counters (a hardware model's are boxed),
        // freed after the raw lock: no kfree under it (see `CtxInner`).
        drop(blank);
        Ok(ctx)
    }

    /// The heir (attached to the current thread) starts as its family is,
    /// from its thread's creation: what the thread ran, switched and
    /// migrated before this install is counted as a thread counts itself
    /// (`CLOCK_THREAD_CPUTIME_ID`, `getrusage(RUSAGE_THREAD)`).
    pub(super) fn begin_as_heir(&self, started: bool, tid: u32) {
        let mut inner = self.inner.lock();
        inner.tid = tid;
        if !started || inner.transition(crate::pfm_state::Op::Start).is_err() {
            return;
        }
        let now = glue::now_ns();
        inner.started = true;
        inner.enabled_start = now;
        let cpu = glue::this_cpu();
        if inner.on_cpu == Some(cpu) {
            // Its whole runtime since it was created, and its faults.
            inner.run_base = 0;
            inner.count_faults_from_creation();
        }
        // With the switches it made before this install (the scheduler
        // may switch a new thread out on its way to user mode), in one
        // count (`pfm_test_smpl_family`, threads born beside a preempting
        // real-time thread).
        let (switches, migrations) = glue::current_switches_and_migrations();
        inner.count_since_creation(
            cpu,
            crate::pfm_x86::ThreadDeltas {
                switches,
                migrations,
                ..Default::default()
            },
        );
        // A hardware model's counters go on this CPU's PMU now, as START's
        // do: not at the thread's next switch-in, which a thread that runs
        // alone on its CPU may not have for a long time.
        inner.sync_hw();
        inner.page_update();
    }
}
