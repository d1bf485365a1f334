// SPDX-License-Identifier: GPL-2.0

//! Whole programs (`PFM_CTXFL_INHERIT`, `PFM_LOAD_PROCESS`): a context's
//! family. The context the tool loaded (the root) monitors its thread as
//! always; every other thread of the program gets a context of its own, an
//! *heir*, which has no file and is attached to its thread as any context
//! is. So each thread is counted, switched, revoked and cleaned up by the
//! one path every context takes; the family only lists the heirs, and the
//! root's reads, START, STOP, UNLOAD and close reach them through it.
//!
//! An heir is made in its own thread: the fork tracepoint (in the parent,
//! `pfm_ctxsw::inherit`) queues a task_work on the child, which makes and
//! attaches its heir before its first instruction in user mode
//! ([`Family::adopt_current`]).
//!
//! Memory: an heir whose monitoring ended (its thread exited, or an exec
//! revoked it) is folded into the family's totals and a compact row
//! (`rows.rs`, at most `PFM_MAX_ENDED_ROWS` of them; the rest only
//! counted) and let go, when the list has grown to twice what it kept at
//! its last sweep (and at least [`SWEEP_MIN`]), or at the next read: a
//! family holds at most `max(2 × live heirs, SWEEP_MIN)` heir contexts
//! whatever the number of threads that came and went.
//!
//! Locking: `Family::members`, a mutex, serialises the tool's operations on
//! the family with heirs joining. Under it a heir's calls take the
//! registry and the heir's own lock as any context's do, and the root's
//! calls take the root's lock (never the other way round: the mutex is
//! never taken under a context's lock); the list of processes monitored
//! whole (`pfm_ctxsw::watch_process`) is taken under it. Lifetimes: the
//! root holds the family, the family its heirs, each heir the family: the
//! root's close (or its next LOAD) empties the list, which breaks the
//! cycle.

mod calls;
mod heir;
mod rows;
mod tally;
mod template;

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use kernel::prelude::*;
use kernel::sync::{Arc, Mutex};
use kernel::task::Task;
use kernel::types::ARef;

use super::smpl::FamilySmpl;
use super::Context;
use crate::abi::{self, PFM_MAX_PMDS};
use crate::globals;
use crate::pfm_ctxsw::{self, Loader};
use crate::rust::{PidNs, SlabArc};
use rows::{fold_ended, EndedRows};
use tally::tally_from;
pub(in crate::pfm_ctx) use tally::{Snapshot, Tally};
pub(super) use template::Template;

/// A thread of the family other than the loaded one.
struct Heir {
    /// Its context.
    ctx: SlabArc<Context>,
    /// Its thread id and process id in the loader's pid namespace.
    tid: u32,
    pid: u32,
    /// Its place in the order heirs joined (the rows' order).
    seq: u64,
}

/// Rows of ended threads a family keeps (`PFM_MAX_ENDED_ROWS`): an heir
/// whose monitoring ended is folded into the family's totals and its
/// context freed; its row stays while there are fewer than this many,
/// else it is only counted (`spilled_threads`). At most 1024 × (64 + 8 ×
/// counting PMDs, per set) bytes a family: 96 KiB with 4 PMDs and no sets,
/// against 2.6 KB a context.
const MAX_ENDED_ROWS: usize = abi::PFM_MAX_ENDED_ROWS;

/// The list of heirs is swept of ended ones (their contexts freed, their
/// rows folded) when it reaches twice the heirs it kept at the last sweep,
/// and at least this many: amortised O(1) per joining thread, and at most
/// `max(2 × live, SWEEP_MIN)` heir contexts held by a family, whatever
/// its number of forks and exits.
pub(crate) const SWEEP_MIN: usize = 32;

/// The family's list and what a new heir starts from.
struct Members {
    heirs: KVec<Heir>,
    /// The root's programming at LOAD (every heir starts from a copy).
    template: Option<Template>,
    /// The root's sampling buffer, which the heirs write to too.
    smpl: Option<FamilySmpl>,
    loader: Option<Loader>,
    /// The loader's pid namespace (the ids the rows show).
    ns: Option<PidNs>,
    /// The loaded thread's ids.
    root_tid: u32,
    root_pid: u32,
    /// Heirs are started (the root's START and STOP, or its exec).
    started: bool,
    /// From LOAD to UNLOAD or close: heirs may join.
    open: bool,
    /// A LOAD is under way (from [`Family::begin`] to [`Family::settle`]).
    loading: bool,
    /// Heirs whose monitoring ended, folded: their rows (the first
    /// `MAX_ENDED_ROWS`), how many more there were (no row), and what they
    /// all counted.
    ended: EndedRows,
    spilled_threads: usize,
    /// Per event set, what the ended heirs counted in it (set 0's alone
    /// without sets).
    ended_total: KVec<Tally>,
    /// The list's length at which it is swept of ended heirs next.
    sweep_at: usize,
    /// The next heir's place in the join order.
    next_seq: u64,
}

impl Members {
    /// No rows, no template: a family never loaded.
    fn empty() -> Self {
        Self {
            heirs: KVec::new(),
            template: None,
            smpl: None,
            loader: None,
            ns: None,
            root_tid: 0,
            root_pid: 0,
            started: false,
            open: false,
            loading: false,
            ended: EndedRows::new(),
            spilled_threads: 0,
            ended_total: KVec::new(),
            sweep_at: SWEEP_MIN,
            next_seq: 0,
        }
    }
}

/// The last LOAD's rows and heirs, which a LOAD under way puts aside until
/// it is known to succeed: a refused LOAD leaves them as they were (the
/// total, the rows and `PFM_IOC_GET_STATE`'s counts read the same).
pub(super) struct Replaced {
    members: KBox<Members>,
    lost: u32,
}

impl Replaced {
    /// Room for what a LOAD will put aside, and for the totals of the
    /// family it opens, which counts in `sets` (bit n: set n) (allocated
    /// before any lock).
    pub(super) fn new(sets: u16) -> Result<Self> {
        let mut members = KBox::new(Members::empty(), GFP_KERNEL)?;
        // Indexed by set id: up to the highest set.
        let n = (u16::BITS - sets.leading_zeros()) as usize;
        members.ended_total = KVec::from_elem(Tally::ZERO, n.max(1), GFP_KERNEL)?;
        Ok(Self { members, lost: 0 })
    }
}

/// A context's family.
#[pin_data]
pub(crate) struct Family {
    #[pin]
    members: Mutex<Members>,
    /// New threads of the monitored ones join (from LOAD until UNLOAD or
    /// close); read by the fork probe without the mutex.
    inheriting: AtomicBool,
    /// Threads that should have joined and could not, since LOAD.
    lost: AtomicU32,
    /// In the list of processes monitored whole (`PFM_LOAD_PROCESS`),
    /// under the key `watched_key` (`pfm_ctxsw::watch_process`).
    whole_process: AtomicBool,
    watched_key: AtomicU64,
}

/// Rows a family keeps, the root's included.
const MAX_ROWS: usize = abi::PFM_MAX_THREAD_ROWS;

impl Family {
    /// An empty family, not inheriting.
    pub(super) fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                members <- kernel::new_mutex!(Members::empty(), "perfmon_family"),
                inheriting: AtomicBool::new(false),
                lost: AtomicU32::new(0),
                whole_process: AtomicBool::new(false),
                watched_key: AtomicU64::new(0),
            }),
            GFP_KERNEL,
        )
    }

    /// Whether new threads join now.
    pub(super) fn inheriting(&self) -> bool {
        self.inheriting.load(Ordering::Acquire)
    }

    /// Turns inheritance on or off, keeping the probes' count.
    fn set_inheriting(&self, on: bool) {
        if self.inheriting.swap(on, Ordering::AcqRel) != on {
            if on {
                globals().inheriting.fetch_add(1, Ordering::Relaxed);
            } else {
                globals().inheriting.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    /// A LOAD with inheritance, before the root is attached (its thread
    /// may create threads as soon as it is): puts the last LOAD's heirs
    /// and rows aside in `room` (their monitoring ended, as UNLOAD ends
    /// it, if the root's thread exited and they still ran) and opens the
    /// family with the root's registers as the template and its buffer,
    /// if it samples, as the heirs'. `root`: the loaded thread's ids.
    /// `EBUSY` while another LOAD of the context is under way; whatever
    /// `may_load` answers (the root's state) if a LOAD ended meanwhile.
    /// [`Family::settle`] ends what this begins.
    pub(super) fn begin(
        &self,
        mut room: Replaced,
        template: Template,
        smpl: Option<FamilySmpl>,
        loader: Loader,
        ns: PidNs,
        root: (u32, u32),
        may_load: impl FnOnce() -> Result,
    ) -> Result<Replaced> {
        {
            let mut m = self.members.lock();
            if m.loading {
                return Err(EBUSY);
            }
            // Under the mutex a concurrent LOAD's `settle` takes after its
            // attach: either that LOAD is still under way (`loading`, above)
            // or its root is LOADED now and `may_load` refuses. Asked any
            // earlier, a LOAD that succeeded in between would have its live
            // family ended below (heirs closed, inheritance off) by this
            // one, which its attach then refuses (the fuzzer's finding 3).
            may_load()?;
            m.loading = true;
        }
        self.end(true);
        let mut m = self.members.lock();
        core::mem::swap(&mut *m, &mut *room.members);
        room.members.loading = false;
        room.lost = self.lost.swap(0, Ordering::Relaxed);
        m.loading = true;
        m.template = Some(template);
        m.smpl = smpl;
        m.loader = Some(loader);
        m.ns = Some(ns);
        (m.root_tid, m.root_pid) = root;
        m.open = true;
        self.set_inheriting(true);
        Ok(room)
    }

    /// The LOAD that [`Family::begin`] began is over: if it `loaded`, the
    /// last LOAD's heirs are let go (closed: zombies where their threads
    /// still run); if it was refused, the family ends (its new heirs let
    /// go) and the last LOAD's rows are back.
    pub(super) fn settle(&self, mut replaced: Replaced, loaded: bool) {
        if loaded {
            self.members.lock().loading = false;
        } else {
            self.end(false);
            let mut m = self.members.lock();
            core::mem::swap(&mut *m, &mut *replaced.members);
            self.lost.store(replaced.lost, Ordering::Relaxed);
        }
        // The other generation: outside the lock, as any close.
        close_heirs(&mut replaced.members);
    }

    /// The monitoring of the family ends (UNLOAD, `close`: the tool is
    /// gone, or a LOAD without inheritance): no thread joins any more,
    /// every heir's monitoring ends. On UNLOAD the heirs keep their counts
    /// for reading; otherwise they are let go (closed: zombies where their
    /// threads still run). Whether the family was open.
    pub(super) fn end(&self, keep: bool) -> bool {
        self.set_inheriting(false);
        self.unwatch_process();
        let mut m = self.members.lock();
        let was_open = core::mem::replace(&mut m.open, false);
        // The root, which it holds, holds the family: no heir joins now.
        m.smpl = None;
        if keep {
            for h in m.heirs.iter() {
                // An heir whose thread exited or was revoked is unloaded already.
                let _ = h.ctx.unload();
            }
        } else {
            close_heirs(&mut m);
        }
        was_open
    }

    /// START (`on`) or STOP of the root, then of every heir: one step as
    /// seen by threads joining (they start as the family is). If the
    /// root's thread exited, its own START or STOP fails (`EBADFD`) but
    /// the heirs' still apply while the family is open.
    pub(super) fn switch_all(&self, root: &Context, on: bool) -> Result {
        let mut m = self.members.lock();
        let r = if on {
            root.start_one()
        } else {
            root.stop_one()
        };
        if r.is_err() && !m.open {
            return r;
        }
        m.started = on;
        for h in m.heirs.iter() {
            // An heir whose thread exited refuses: nothing to switch.
            let _ = if on {
                h.ctx.start_one()
            } else {
                h.ctx.stop_one()
            };
        }
        if m.open {
            Ok(())
        } else {
            r
        }
    }

    /// What every heir counted in set `set`, live ones read live, ended
    /// ones as they ended (folded first: their contexts freed).
    pub(super) fn heirs_tally(&self, set: usize) -> Tally {
        let mut m = self.members.lock();
        fold_ended(&mut m);
        let mut total = m.ended_total.get(set).copied().unwrap_or(Tally::ZERO);
        let base = m
            .template
            .as_ref()
            .map_or([0; PFM_MAX_PMDS], |t| t.base(set));
        for h in m.heirs.iter() {
            if let Ok(s) = h.ctx.snapshot(set) {
                total.add(&tally_from(&s, &base));
            }
        }
        total
    }

    /// Threads monitored since LOAD (the root's included) and threads lost.
    pub(super) fn counts(&self) -> (u32, u32) {
        let m = self.members.lock();
        let threads = 1 + m.heirs.len() + m.ended.len() + m.spilled_threads;
        (
            u32::try_from(threads).unwrap_or(u32::MAX),
            self.lost.load(Ordering::Relaxed),
        )
    }

    /// `PFM_IOC_READ_THREADS`'s rows after the root's, in set `set`: each
    /// heir's (ended ones folded first), with its place in the order they
    /// joined, through `row` (its values less the base are its counts).
    pub(super) fn heir_rows(
        &self,
        set: usize,
        mut row: impl FnMut(u64, u32, u32, &Snapshot, &[u64; PFM_MAX_PMDS]),
    ) {
        let mut m = self.members.lock();
        fold_ended(&mut m);
        let base = m
            .template
            .as_ref()
            .map_or([0; PFM_MAX_PMDS], |t| t.base(set));
        for e in m.ended.iter() {
            row(e.seq, e.tid, e.pid, &e.snapshot(set, &base), &base);
        }
        for h in m.heirs.iter() {
            if let Ok(s) = h.ctx.snapshot(set) {
                row(h.seq, h.tid, h.pid, &s, &base);
            }
        }
    }

    /// The loaded thread's ids, as the rows show them, if the family was
    /// loaded last (see [`Family::forget`]).
    pub(super) fn root_ids(&self) -> Option<(u32, u32)> {
        let m = self.members.lock();
        (m.root_tid != 0).then_some((m.root_tid, m.root_pid))
    }

    /// A LOAD without inheritance: the family ends and its rows go (the
    /// context reads as one thread again).
    pub(super) fn forget(&self) {
        self.end(false);
        let mut m = self.members.lock();
        (m.root_tid, m.root_pid) = (0, 0);
        m.ended = EndedRows::new();
        m.spilled_threads = 0;
        for t in m.ended_total.iter_mut() {
            *t = Tally::ZERO;
        }
    }

    /// Lists the process of `task` as monitored whole by this family, for
    /// its loader, from now until the family ends or the process is gone
    /// (`pfm_ctxsw::watch_process`: `ENOSPC`, `EDQUOT`).
    pub(super) fn watch_process(self: &Arc<Self>, task: ARef<Task>) -> Result {
        let key = {
            let m = self.members.lock();
            let loader = m.loader.as_ref().ok_or(EINVAL)?;
            pfm_ctxsw::watch_process::<Context>(task, self, loader)?
        };
        self.watched_key.store(key, Ordering::Relaxed);
        self.whole_process.store(true, Ordering::Release);
        Ok(())
    }

    /// Takes this family's process off the list, if it is on it.
    fn unwatch_process(&self) {
        if !self.whole_process.swap(false, Ordering::AcqRel) {
            return;
        }
        // Gone already if the process exited.
        pfm_ctxsw::unwatch_process::<Context>(self.watched_key.load(Ordering::Relaxed), self);
    }

    /// `PFM_LOAD_PROCESS`'s walk: every thread of `threads` that no
    /// context of this family monitors yet joins it (a thread created
    /// during the walk may have joined already, at its birth). Threads
    /// that exit meanwhile are skipped; those that cannot join are lost.
    pub(super) fn adopt_walked(this: &Arc<Self>, threads: KVec<ARef<Task>>) {
        let mut m = this.members.lock();
        for task in threads {
            if !m.open {
                return;
            }
            if pfm_ctxsw::monitored_by::<Context>(&task, |c| c.in_family(this)) {
                continue;
            }
            match Self::adopt_one(this, &mut m, task) {
                Ok(()) | Err(ESRCH) => {}
                Err(_) => this.lost_one(),
            }
        }
    }

    /// One walked thread joins (`adopt_walked`).
    fn adopt_one(this: &Arc<Self>, m: &mut Members, task: ARef<Task>) -> Result {
        let (Some(template), Some(loader), Some(ns)) = (&m.template, m.loader.clone(), &m.ns)
        else {
            return Err(EINVAL);
        };
        let (tid, pid) = ns.ids_of(&task);
        let heir = Context::new_heir(this, template, m.smpl.as_ref(), pid)?;
        let load_set = template.load_set();
        make_room(m)?;
        pfm_ctxsw::attach_heir_remote(&heir, task, tid, loader, load_set)?;
        if m.started {
            // Counting from its install, which the thread does at once.
            let _ = heir.start_one();
        }
        let seq = m.next_seq;
        m.next_seq += 1;
        // Within the capacity `make_room` reserved: no allocation.
        m.heirs.push(
            Heir {
                ctx: heir,
                tid,
                pid,
                seq,
            },
            GFP_ATOMIC,
        )?;
        Ok(())
    }

    /// A new thread could not join.
    pub(crate) fn lost_one(&self) {
        self.lost.fetch_add(1, Ordering::Relaxed);
    }

    /// In a new thread (current) of a monitored one, before its first
    /// instruction in user mode: it joins the family, counted from its
    /// creation if the family is started. A thread that cannot join (the
    /// per-user limit, the registry, memory, or the loader may not see it)
    /// runs unmonitored and is counted lost.
    pub(crate) fn adopt_current(this: &Arc<Self>) {
        let mut m = this.members.lock();
        if !m.open {
            // UNLOADed or closed since the fork.
            return;
        }
        // Born during a `PFM_LOAD_PROCESS` walk that found it already.
        if pfm_ctxsw::monitored_by::<Context>(kernel::current!(), |c| c.in_family(this)) {
            return;
        }
        if Self::adopt(this, &mut m).is_err() {
            this.lost_one();
        }
    }

    fn adopt(this: &Arc<Self>, m: &mut Members) -> Result {
        let (Some(template), Some(loader), Some(ns)) = (&m.template, m.loader.clone(), &m.ns)
        else {
            return Err(EINVAL);
        };
        let (tid, pid) = ns.ids_of(kernel::current!());
        let heir = Context::new_heir(this, template, m.smpl.as_ref(), pid)?;
        let load_set = template.load_set();
        make_room(m)?;
        pfm_ctxsw::attach_heir(&heir, loader, load_set)?;
        heir.begin_as_heir(m.started, tid);
        let seq = m.next_seq;
        m.next_seq += 1;
        // Within the capacity reserved above: no allocation, no failure.
        m.heirs.push(
            Heir {
                ctx: heir,
                tid,
                pid,
                seq,
            },
            GFP_ATOMIC,
        )?;
        Ok(())
    }
}

/// Room in the list for one more heir, reserved: once attached, an heir
/// must be listed (START, STOP and UNLOAD reach it only through the list).
/// The list is swept of ended heirs first when it has grown enough
/// ([`SWEEP_MIN`]). Live heirs are bounded by the registry, far below
/// the row limit, which is only a last guard.
fn make_room(m: &mut Members) -> Result {
    if m.heirs.len() >= m.sweep_at {
        fold_ended(m);
        m.sweep_at = (2 * m.heirs.len()).max(SWEEP_MIN);
    }
    if m.heirs.len() + 1 >= MAX_ROWS {
        return Err(ENOSPC);
    }
    m.heirs.reserve(1, GFP_KERNEL)?;
    Ok(())
}

/// Lets every heir go (closed: a zombie where its thread still runs) and
/// empties the list.
fn close_heirs(m: &mut Members) {
    for h in m.heirs.iter() {
        h.ctx.close();
    }
    m.heirs = KVec::new();
}
