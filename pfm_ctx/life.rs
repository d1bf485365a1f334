// SPDX-License-Identifier: GPL-2.0

//! The context's life verbs: `PFM_IOC_LOAD`, `PFM_IOC_START`,
//! `PFM_IOC_STOP`, `PFM_IOC_UNLOAD` and the tool's `close`, each for the
//! context's thread and, through its family, every thread of a whole
//! program.

use kernel::prelude::*;
use kernel::sync::Arc;

use super::{state_err, Context};
use crate::abi;
use crate::pfm_ctxsw::{self, Attachment};
use crate::pfm_state::{Op, State};
use crate::rust::{self as glue, SlabArc};

impl Context {
    /// `PFM_IOC_START`: the context's thread, and its family's.
    pub(crate) fn start(&self) -> Result {
        match self.family() {
            Some(f) => f.switch_all(self, true),
            None => self.start_one(),
        }
    }

    /// `PFM_IOC_STOP`: the context's thread, and its family's.
    pub(crate) fn stop(&self) -> Result {
        match self.family() {
            Some(f) => f.switch_all(self, false),
            None => self.stop_one(),
        }
    }

    /// START of this context's thread.
    pub(super) fn start_one(&self) -> Result {
        self.with_live(|inner, now| -> Result {
            inner.transition(Op::Start)?;
            inner.arm_exec(false);
            if !inner.started {
                inner.started = true;
                inner.enabled_start = now;
                // The thread's time on CPU counts from now, not from its switch-in.
                if inner.on_cpu == Some(glue::this_cpu()) {
                    inner.run_base = glue::current_runtime_ns();
                }
                inner.rebase_faults();
            }
            Ok(())
        })
    }

    /// STOP of this context's thread.
    pub(super) fn stop_one(&self) -> Result {
        self.with_live(|inner, now| -> Result {
            inner.transition(Op::Stop)?;
            inner.arm_exec(false);
            inner.stop_clock(now);
            inner.started = false;
            Ok(())
        })
    }

    /// `PFM_IOC_LOAD` on context `this` (then START, if asked).
    pub(crate) fn load(this: &SlabArc<Self>, arg: &abi::PfmLoad) -> Result {
        if arg.flags & !abi::PFM_LOAD_MASK != 0
            || arg.pad0 != 0
            || arg.pad1 != 0
            || arg.reserved != [0; 2]
        {
            return Err(EINVAL);
        }
        // Refused early, before the thread is looked up; `publish` asks
        // the table again under the lock.
        let (whole, sampling) = {
            let mut inner = this.inner.lock();
            inner.life.check(Op::Load).map_err(state_err)?;
            inner.check_load_sets(arg.load_set)?;
            // Kernel-mode counting is the loader's right, not only the
            // writer's (perf's EACCES without CAP_PERFMON).
            if !crate::pfm_x86::Pmu::caller_policy().allow_kernel && inner.counts_kernel() {
                return Err(EACCES);
            }
            (
                arg.flags & abi::PFM_LOAD_PROCESS != 0 || inner.flags & abi::PFM_CTXFL_INHERIT != 0,
                inner.smpl().is_some(),
            )
        };
        // A family is open before its root is attached: the thread may
        // create threads as soon as it is.
        let process = arg.flags & abi::PFM_LOAD_PROCESS != 0;
        let prepared = if whole {
            Some(Context::prepare_family(
                this,
                arg.tid,
                arg.load_set,
                process,
            )?)
        } else {
            None
        };
        let mut r = pfm_ctxsw::attach(this, arg.tid, arg.load_set);
        match prepared {
            Some((family, replaced)) => {
                if r.is_ok() && process {
                    r = Context::attach_process(this, &family, arg.tid);
                }
                family.settle(replaced, r.is_ok());
            }
            // A LOAD without a family: the last LOAD's family, if any,
            // ends and its rows go (not before: a refused LOAD keeps them).
            None if r.is_ok() => {
                if let Some(f) = this.family() {
                    f.forget();
                }
            }
            None => {}
        }
        r?;
        if sampling {
            this.smpl_note_pid();
        }
        if arg.flags & abi::PFM_LOAD_START != 0 {
            // As a START right after, all or nothing: a START refused
            // (the context unloaded in between, by another call or its
            // thread's exit; EAGAIN from a hardware model's thread that
            // kept migrating) undoes the LOAD, so the caller never has to
            // tell a loaded context from one that is not.
            if let Err(e) = this.start() {
                let _ = this.unload();
                return Err(e);
            }
        }
        Ok(())
    }

    /// `PFM_IOC_UNLOAD`: the context's thread, and its family's (whose
    /// heirs are still monitored if the loaded thread exited).
    pub(crate) fn unload(&self) -> Result {
        let r = self.unload_one();
        match self.family() {
            Some(f) if f.end(true) => Ok(()),
            _ => r,
        }
    }

    /// UNLOAD of this context's thread.
    fn unload_one(&self) -> Result {
        let att = self.with_live(|inner, now| -> Result<Option<Arc<Attachment<Context>>>> {
            inner.transition(Op::Unload)?;
            inner.arm_exec(false);
            inner.stop_clock(now);
            inner.unload_sets();
            inner.started = false;
            inner.active = false;
            inner.on_cpu = None;
            inner.tid = 0;
            Ok(inner.attach.take())
        })?;
        if let Some(att) = att {
            pfm_ctxsw::let_go(att, true);
        }
        Ok(())
    }

    /// Tool side of `release`: free now, or leave a zombie for the target;
    /// the same for every thread of its family.
    pub(crate) fn close(&self) {
        if let Some(f) = self.family() {
            f.end(false);
        }
        self.close_one();
    }

    /// [`Context::close`] of this context's thread.
    fn close_one(&self) {
        let att = {
            let mut inner = self.inner.lock();
            let remote = inner
                .attach
                .as_ref()
                .is_some_and(|a| !glue::is_current(a.task()));
            match inner.transition(Op::Close { remote }) {
                // The attachment keeps the context alive; the context's
                // reference to it stays until the thread reaps it.
                Ok(State::Zombie) => inner.attach.clone(),
                _ => inner.attach.take(),
            }
        };
        if let Some(att) = att {
            pfm_ctxsw::let_go(att, false);
        }
    }
}
