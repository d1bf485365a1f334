// SPDX-License-Identifier: GPL-2.0

//! The processes monitored whole (`PFM_LOAD_PROCESS`): a thread created in
//! one joins its family even if its creator is not monitored yet (LOAD's
//! walk of the threads has not reached it, or it could not join).
//!
//! An entry lasts from LOAD until its family ends (UNLOAD, close, the next
//! LOAD) or its process is gone, whichever comes first: the exit of the
//! process's last thread (`sched_process_exit` with no thread of the group
//! live) queues, on that thread, the entry's own task_work, allocated with
//! the entry, which removes it before the thread's `exit_task_work`
//! returns. So an entry never outlives its process by more than its last
//! thread's exit path, and pins nothing after it.
//!
//! Bounded as attachments are: `MAX_ATTACHED` entries system-wide
//! (`ENOSPC`), of which an unprivileged loader's user may hold
//! `max_attached_per_user` (`EDQUOT`). Looked up by process (its
//! `signal_struct`'s address) through a hash index on every fork of a
//! monitored process and every exit, in O(1): one user's entries cost
//! nobody else.

use core::sync::atomic::{AtomicUsize, Ordering};

use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::task::Task;
use kernel::types::ARef;

use super::inherit::{Deferred, Job};
use super::registry::{empty_buckets, UserCounts};
use super::{Loader, Monitor};
use crate::pfm_index;
use crate::rust::{self as glue, Notify, TaskWork};
use crate::{edquot, MAX_ATTACHED};

/// Entries listed, read by the exit probe without the lock: while 0 it
/// returns at once.
static LISTED: AtomicUsize = AtomicUsize::new(0);

/// Processes listed now (`/sys/kernel/perfmon/watched_processes`).
pub(crate) fn watched_processes() -> usize {
    LISTED.load(Ordering::Relaxed)
}

/// One process monitored whole.
struct Entry<M: Monitor> {
    /// The process's key (`glue::thread_group_key`).
    key: u64,
    /// A thread of the process, referenced: its thread group (the key)
    /// cannot be freed and its address taken by another process while
    /// listed.
    _task: ARef<Task>,
    /// The family its new threads join.
    lineage: Arc<M::Lineage>,
    /// The loader's real uid, and whether the entry counts against its
    /// per-user limit (the loader was unprivileged).
    owner_uid: u32,
    counted: bool,
    /// The task_work that removes this entry when the process is gone
    /// (queued on its last thread by the exit probe).
    gone: Arc<Deferred<M>>,
}

/// The processes monitored whole, under an IRQ-off spinlock
/// (`Monitor::processes`): taken by the fork and exit probes (preemption
/// disabled) and by LOAD under a family's mutex at most; no lock is taken
/// under it (the exit probe's task_work queueing takes none), nothing is
/// allocated or freed under it.
///
/// # Invariants
///
/// `entries.len() <= MAX_ATTACHED <= entries.capacity()` (nothing
/// allocates under the lock); `index` indexes each entry once, under its
/// key; `users` counts the `counted` entries by owner; `LISTED` is
/// `entries.len()` whenever the lock is free.
pub(crate) struct Processes<M: Monitor> {
    entries: KVec<Entry<M>>,
    index: KVec<u16>,
    users: UserCounts,
}

impl<M: Monitor> Processes<M> {
    /// An empty list, with room for one process per attachment.
    pub(crate) fn new() -> Result<Self> {
        // INVARIANT: empty, with the capacity of the limit.
        Ok(Self {
            entries: KVec::with_capacity(MAX_ATTACHED, GFP_KERNEL)?,
            index: empty_buckets()?,
            users: UserCounts::new()?,
        })
    }

    /// Where `lineage`'s entry for process `key` is, if listed.
    fn find(&self, key: u64, lineage: Option<&M::Lineage>) -> Option<u16> {
        pfm_index::run(&self.index, key).find(|&d| {
            let e = &self.entries[d as usize];
            e.key == key && lineage.is_none_or(|l| core::ptr::eq(&*e.lineage, l))
        })
    }

    /// Takes entry `d` out (it must be there).
    fn take(&mut self, d: u16) -> Entry<M> {
        let i = d as usize;
        let key = self.entries[i].key;
        let entries = &self.entries;
        pfm_index::remove(&mut self.index, key, d, |x| entries[x as usize].key);
        let last = self.entries.len() - 1;
        self.entries.as_mut_slice().swap(i, last);
        // SAFETY: `last` is within the initialised length; reading the
        // element out and then shortening the length by one moves it out
        // exactly once.
        let e = unsafe { core::ptr::read(self.entries.as_ptr().add(last)) };
        // SAFETY: `last < len`; the element at `last` was moved out.
        unsafe { self.entries.set_len(last) };
        if i != last {
            let moved = self.entries[i].key;
            pfm_index::renumber(&mut self.index, moved, last as u16, d);
        }
        if e.counted {
            self.users.sub(e.owner_uid);
        }
        LISTED.fetch_sub(1, Ordering::Relaxed);
        e
    }
}

/// Lists the process of `task` as monitored whole by `lineage`, for
/// `loader`, until [`unwatch`]; returns its key. `ENOSPC` if
/// `MAX_ATTACHED` processes are listed, `EDQUOT` if the loader is
/// unprivileged and its user has `max_attached_per_user` listed.
pub(crate) fn watch<M: Monitor>(
    task: ARef<Task>,
    lineage: &Arc<M::Lineage>,
    loader: &Loader,
) -> Result<u64> {
    let key = glue::thread_group_key(&task);
    // Allocated before the lock: the exit probe only queues it.
    let gone =
        Deferred::<M>::new(Job::ProcessGone(lineage.clone(), key), GFP_KERNEL).ok_or(ENOMEM)?;
    let counted = loader.cred.is_some();
    let entry = Entry {
        key,
        _task: task,
        lineage: lineage.clone(),
        owner_uid: loader.owner_uid,
        counted,
        gone,
    };
    let refused = {
        let mut list = M::processes().lock();
        if list.entries.len() >= MAX_ATTACHED {
            Some((ENOSPC, entry))
        } else if counted
            && list.users.of(loader.owner_uid) >= glue::param_max_attached_per_user() as usize
        {
            Some((edquot(), entry))
        } else {
            let d = list.entries.len() as u16;
            // Within the capacity (type invariant): no allocation.
            match list.entries.push(entry, GFP_ATOMIC) {
                Ok(()) => {
                    pfm_index::insert(&mut list.index, key, d);
                    if counted {
                        list.users.add(loader.owner_uid);
                    }
                    LISTED.fetch_add(1, Ordering::Relaxed);
                    None
                }
                Err(_) => return Err(ENOMEM),
            }
        }
    };
    match refused {
        // The refused entry's references go outside the lock.
        Some((e, entry)) => {
            drop(entry);
            Err(e)
        }
        None => Ok(key),
    }
}

/// Takes `lineage`'s entry for process `key` off the list, if listed.
pub(crate) fn unwatch<M: Monitor>(key: u64, lineage: &M::Lineage) {
    let removed = {
        let mut list = M::processes().lock();
        list.find(key, Some(lineage)).map(|d| list.take(d))
    };
    // The task, family and task_work references go outside the lock.
    drop(removed);
}

/// The family of the process monitored whole that the calling thread
/// belongs to, if any.
pub(crate) fn lineage_of_current<M: Monitor>() -> Option<Arc<M::Lineage>> {
    if LISTED.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let key = glue::thread_group_key(kernel::current!());
    let list = M::processes().lock();
    list.find(key, None)
        .map(|d| list.entries[d as usize].lineage.clone())
}

/// `sched_process_exit`, in the exiting thread: if it was its process's
/// last live thread and the process is listed, each of its entries'
/// task_works is queued on it, to run at its `exit_task_work` (which
/// follows this tracepoint), where the entry is removed. Preemption is
/// disabled: nothing is allocated or freed here.
pub(crate) fn on_exit<M: Monitor>() {
    if LISTED.load(Ordering::Relaxed) == 0 || !glue::current_group_dead() {
        return;
    }
    let me = kernel::current!();
    let key = glue::thread_group_key(&me);
    let list = M::processes().lock();
    for d in pfm_index::run(&list.index, key) {
        let e = &list.entries[d as usize];
        if e.key == key {
            // Refused only if it is queued already (another thread of the
            // group saw the count at 0 too): that run removes it. The
            // list's reference stays until then, so the queue's is not
            // the last.
            let _ = TaskWork::<Deferred<M>, 0>::queue(&e.gone, &me, Notify::Resume);
        }
    }
}
