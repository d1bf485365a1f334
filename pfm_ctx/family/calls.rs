// SPDX-License-Identifier: GPL-2.0

//! Whole programs, the context's calls: LOAD's family (`PFM_CTXFL_INHERIT`,
//! `PFM_LOAD_PROCESS`), `PFM_IOC_READ_THREADS`, start-on-exec, and what the
//! thread side asks of a context about its family.

use core::sync::atomic::Ordering;

use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::uaccess::UserSlice;

use super::{Family, Replaced, Snapshot, Template};
use crate::abi::{self, PFM_MAX_PMDS};
use crate::globals;
use crate::pfm_ctx::parts::{spare_parts, Parts, Role};
use crate::pfm_ctx::{state_err, Context, CtxInner};
use crate::pfm_ctxsw;
use crate::pfm_msgq::FINAL_REVOKED;
use crate::pfm_state::{Op, State};
use crate::rust::{self as glue, PidNs, SlabArc};

impl CtxInner {
    /// Arms or disarms start-on-exec, keeping the exec probe's count.
    pub(in crate::pfm_ctx) fn arm_exec(&mut self, on: bool) {
        if self.exec_armed != on {
            self.exec_armed = on;
            if on {
                globals().exec_armed.fetch_add(1, Ordering::Relaxed);
            } else {
                globals().exec_armed.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

impl CtxInner {
    /// Whether a whole program may be loaded on this context: `EBUSY` for
    /// a sampling buffer that masks when full
    /// ([`super::super::smpl::CtxSmpl::drops_when_full`]).
    fn may_have_family(&self) -> Result {
        if self.smpl().is_some_and(|s| !s.drops_when_full()) {
            return Err(EBUSY);
        }
        Ok(())
    }
}

impl Context {
    /// The family this context is the root of, if it has one.
    pub(in crate::pfm_ctx) fn family(&self) -> Option<Arc<Family>> {
        self.inner.lock().parts().and_then(Parts::root_of).cloned()
    }

    /// The family a new thread of this context's thread joins: its own
    /// (root or heir) while it inherits and the thread is monitored.
    pub(crate) fn joinable_family(&self) -> Option<Arc<Family>> {
        let inner = self.inner.lock();
        if !matches!(inner.state(), State::Loaded | State::Masked) {
            return None;
        }
        inner
            .parts()
            .and_then(Parts::family)
            .filter(|f| f.inheriting())
            .cloned()
    }

    /// LOAD's family, for a `whole` LOAD (inheritance or a process): the
    /// family opened with the registers as they are now, and the last
    /// LOAD's rows it put aside, for [`Family::settle`] once the LOAD's
    /// outcome is known. `EBUSY` as [`CtxInner::may_have_family`] says.
    pub(in crate::pfm_ctx) fn prepare_family(
        this: &SlabArc<Self>,
        tid: u32,
        load_set: u16,
        process: bool,
    ) -> Result<(Arc<Family>, Replaced)> {
        // Everything that may sleep, before the lock: the template first
        // (`EBADFD` unless UNLOADED, as LOAD).
        // A LOAD that raced ours is refused by the state table's errno.
        let programming =
            this.copy_programming()
                .map_err(|e| match this.inner.lock().life.check(Op::Load) {
                    Err(refused) => state_err(refused),
                    Ok(_) => e,
                })?;
        let template = Template::new(programming, load_set);
        let loader = pfm_ctxsw::loader()?;
        let ns = PidNs::of_current().ok_or(ESRCH)?;
        let target = if tid == 0 {
            kernel::types::ARef::from(&*kernel::current!())
        } else {
            glue::find_task(tid)?
        };
        let root = ns.ids_of(&target);
        let room = Replaced::new(template.sets_mask())?;
        let mut fresh = match this.family() {
            Some(_) => None,
            None => Some(Family::new()?),
        };
        // The look under the lock, the allocation after it (a temporary
        // guard would live to the end of the statement).
        let has_parts = this.inner.lock().has_parts();
        let mut spare = spare_parts(has_parts)?;
        let (family, smpl) = {
            let mut inner = this.inner.lock();
            // A concurrent LOAD may have finished since `load`'s first
            // look: no family is installed on a loaded context. `begin`
            // asks again, where it decides.
            inner.life.check(Op::Load).map_err(state_err)?;
            inner.may_have_family()?;
            // The family installed, ours or a concurrent LOAD's (whose
            // `begin` then refuses ours): a context has one. A sampling
            // context's heirs write to its buffer.
            let parts = inner.parts_for_adding(&mut spare)?;
            let family = match &parts.role {
                Role::Root(f) => f.clone(),
                Role::Heir(_) => return Err(EBUSY),
                Role::Alone => {
                    let f = fresh.take().ok_or(EBUSY)?;
                    parts.role = Role::Root(f.clone());
                    f
                }
            };
            let smpl = inner.smpl().map(|s| s.for_heirs(this));
            (family, smpl)
        };
        let replaced = family.begin(room, template, smpl, loader, ns, root, || {
            this.inner
                .lock()
                .life
                .check(Op::Load)
                .map(|_| ())
                .map_err(state_err)
        })?;
        if process {
            // Before the root is attached and the threads walked: a thread
            // created from now on joins at its birth. Not before the loader
            // is known to be allowed (LOAD checks again, as for any thread).
            if let Err(e) = pfm_ctxsw::may_load(&target).and_then(|()| family.watch_process(target))
            {
                family.settle(replaced, false);
                return Err(e);
            }
        }
        Ok((family, replaced))
    }

    /// This context's thread as one row in event set `set`: its values
    /// and times there, and whether its monitoring ended.
    pub(in crate::pfm_ctx) fn snapshot(&self, set: usize) -> Result<Snapshot> {
        self.with_live(|inner, now| -> Result<Snapshot> {
            inner.transition(Op::Read)?;
            let [set_enabled, set_running] = inner.set_times(set as u16)?;
            let image = inner.image(set).ok_or(EINVAL)?;
            let mut values = [0u64; PFM_MAX_PMDS];
            for (v, p) in values.iter_mut().zip(image.pmds().iter()) {
                *v = p.value;
            }
            Ok(Snapshot {
                values,
                enabled: inner.time_enabled(now),
                running: inner.time_running,
                set_enabled,
                set_running,
                exited: inner.exited,
                revoked: inner.msgs.final_type() == FINAL_REVOKED,
            })
        })
    }

    /// Whether this context's monitoring ended for good: its thread exited,
    /// or an exec revoked it (cheap: no live read).
    pub(in crate::pfm_ctx) fn monitoring_ended(&self) -> bool {
        let inner = self.inner.lock();
        inner.exited || inner.msgs.final_type() == FINAL_REVOKED
    }

    /// Whether the context waits for its thread's exec to start.
    pub(crate) fn waits_for_exec(&self) -> bool {
        self.inner.lock().exec_armed
    }

    /// The thread completed its exec (in the thread, before the new
    /// image's first instruction): START, as the tool would, if the
    /// context still waits for it.
    pub(crate) fn exec_done(&self) {
        let armed = {
            let mut inner = self.inner.lock();
            let armed = inner.exec_armed;
            inner.arm_exec(false);
            armed
        };
        if armed {
            // Unloaded or closed meanwhile: nothing to start.
            let _ = self.start();
        }
    }

    /// `PFM_IOC_READ_THREADS` into `arg` (its `needed` and `lost_threads`
    /// are set whatever the outcome).
    pub(crate) fn read_threads(&self, arg: &mut abi::PfmThreadsArg) -> Result {
        let implemented = globals().pmu.impl_mask();
        if arg.flags != 0
            || arg.reserved != [0; 2]
            || arg.pad != 0
            || !matches!(arg.vflags, 0 | abi::PFM_VALFL_SET)
            || (arg.vflags == 0 && arg.set != 0)
            || arg.pmd_mask == 0
            || arg.pmd_mask & !implemented != 0
            || arg.pmd_mask.count_ones() as usize > abi::PFM_THREAD_VALUES
        {
            return Err(EINVAL);
        }
        // A set that does not exist is `EINVAL` from the first snapshot.
        let set = usize::from(arg.set);
        let set_times = arg.vflags == abi::PFM_VALFL_SET;
        let mask = arg.pmd_mask;
        let family = self.family();
        let mut rows = KVec::new();
        // The loaded thread's row, if there ever was one.
        let root_ids = match family.as_ref().and_then(|f| f.root_ids()) {
            Some(ids) => Some(ids),
            None => self.plain_ids(),
        };
        if let Some((tid, pid)) = root_ids {
            let s = self.snapshot(set)?;
            let mut flags = abi::PFM_THRFL_LOADED;
            flags |= thread_flags(&s);
            rows.push(
                row(tid, pid, flags, &s, &[0; PFM_MAX_PMDS], mask, set_times),
                GFP_KERNEL,
            )?;
        } else if family.is_some() || arg.vflags != 0 {
            // No loaded thread's row to refuse a set that does not exist.
            self.inner.lock().set_times(arg.set)?;
        }
        let mut failed = Ok(());
        // The family gives ended threads' rows first: they are written in
        // the order the threads joined, as documented (`order`: each heir
        // row's place in that order, and in `rows`).
        let mut order = KVec::new();
        if let Some(f) = &family {
            f.heir_rows(set, |seq, tid, pid, s, base| {
                if failed.is_ok() {
                    let at = rows.len();
                    failed = rows
                        .push(
                            row(tid, pid, thread_flags(s), s, base, mask, set_times),
                            GFP_KERNEL,
                        )
                        .and_then(|()| order.push((seq, at), GFP_KERNEL))
                        .map_err(Error::from);
                }
            });
            arg.lost_threads = f.counts().1;
        }
        failed?;
        order.sort_unstable_by_key(|(seq, _)| *seq);
        arg.needed = u32::try_from(rows.len()).unwrap_or(u32::MAX);
        if (arg.count as usize) < rows.len() {
            return Err(E2BIG);
        }
        let size = rows.len() * core::mem::size_of::<abi::PfmThread>();
        let mut out = UserSlice::new(arg.threads as usize, size).writer();
        // The loaded thread's row, if any, then the others.
        let loaded = rows.len() - order.len();
        for r in rows.iter().take(loaded) {
            out.write(r)?;
        }
        for (_, at) in order.iter() {
            if let Some(r) = rows.get(*at) {
                out.write(r)?;
            }
        }
        Ok(())
    }

    /// The ids of a context without a family, if it is loaded (its tid as
    /// LOAD named it; its process id while the thread is attached).
    fn plain_ids(&self) -> Option<(u32, u32)> {
        let inner = self.inner.lock();
        if inner.tid == 0 {
            return None;
        }
        let pid = match (&inner.attach, PidNs::of_current()) {
            (Some(att), Some(ns)) => ns.ids_of(att.task()).1,
            _ => 0,
        };
        Some((inner.tid, pid))
    }

    /// `PFM_LOAD_PROCESS`'s walk: every other thread of process `tid` (the
    /// root is attached to the thread `tid` names) joins `family`.
    pub(in crate::pfm_ctx) fn attach_process(
        this: &SlabArc<Self>,
        family: &Arc<Family>,
        tid: u32,
    ) -> Result {
        let target = if tid == 0 {
            kernel::types::ARef::from(&*kernel::current!())
        } else {
            glue::find_task(tid)?
        };
        let threads = match glue::process_threads(&target) {
            Ok(t) => t,
            Err(e) => {
                // All or nothing: the root leaves with the family.
                let _ = this.unload();
                return Err(e);
            }
        };
        Family::adopt_walked(family, threads);
        Ok(())
    }
}

/// `PFM_THRFL_*` of a thread's snapshot.
fn thread_flags(s: &Snapshot) -> u32 {
    let mut flags = 0;
    if s.exited {
        flags |= abi::PFM_THRFL_EXITED;
    }
    if s.revoked {
        flags |= abi::PFM_THRFL_REVOKED;
    }
    flags
}

/// A row: the values of the PMDs of `mask` less `base`, in PMD order, and
/// the thread's times (with `set_times`, the set's).
fn row(
    tid: u32,
    pid: u32,
    flags: u32,
    s: &Snapshot,
    base: &[u64; PFM_MAX_PMDS],
    mask: u64,
    set_times: bool,
) -> abi::PfmThread {
    // A set's row (`PFM_VALFL_SET`) has the set's times, as READ_VALUES
    // reads them; any other, the thread's.
    let (time_enabled, time_running) = match set_times {
        true => (s.set_enabled, s.set_running),
        false => (s.enabled, s.running),
    };
    let mut r = abi::PfmThread {
        tid,
        pid,
        flags,
        time_enabled,
        time_running,
        ..Default::default()
    };
    crate::pfm_counter::pack_counts(&s.values, base, mask, &mut r.values);
    r
}
