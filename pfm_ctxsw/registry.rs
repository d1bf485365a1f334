// SPDX-License-Identifier: GPL-2.0

//! Every attachment, by thread; and what each user holds.

use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::task::Task;

use super::{Attachment, Monitor};
use crate::pfm_index::{self, EMPTY};
use crate::MAX_ATTACHED;

/// Buckets of the hash indexes: twice the dense arrays' capacity, so that
/// at most half are used and probe runs stay short (`pfm_index`).
pub(super) const BUCKETS: usize = 2 * MAX_ATTACHED;

// Dense indexes fit a bucket, with `EMPTY` to spare.
const _: () = assert!(MAX_ATTACHED < EMPTY as usize && BUCKETS.is_power_of_two());

/// The key a thread is indexed by: its `task_struct`'s address (a listed
/// attachment holds a reference on it, so the address cannot be reused).
fn task_key(task: &Task) -> u64 {
    task as *const Task as usize as u64
}

/// A hash index's buckets, all empty (allocated before any lock).
pub(super) fn empty_buckets() -> Result<KVec<u16>> {
    Ok(KVec::from_elem(EMPTY, BUCKETS, GFP_KERNEL)?)
}

/// How many entries of a table each user holds (those counted against
/// the per-user limit): preallocated for one user per entry, looked up by
/// uid in O(1).
///
/// # Invariants
///
/// `users.len() <= MAX_ATTACHED <= users.capacity()`; every count is
/// above 0; `index` has `BUCKETS` buckets indexing each of `users` once.
pub(super) struct UserCounts {
    users: KVec<(u32, u32)>,
    index: KVec<u16>,
}

impl UserCounts {
    /// No user holds anything.
    pub(super) fn new() -> Result<Self> {
        // INVARIANT: empty, with the capacity of the limit.
        Ok(Self {
            users: KVec::with_capacity(MAX_ATTACHED, GFP_KERNEL)?,
            index: empty_buckets()?,
        })
    }

    /// Where `uid` is in `users`.
    fn find(&self, uid: u32) -> Option<u16> {
        pfm_index::run(&self.index, uid.into()).find(|&d| self.users[d as usize].0 == uid)
    }

    /// What `uid` holds.
    pub(super) fn of(&self, uid: u32) -> usize {
        self.find(uid)
            .map_or(0, |d| self.users[d as usize].1 as usize)
    }

    /// `uid` holds one more. The callers count at most one per entry of a
    /// table of `MAX_ATTACHED` entries, so there is always room.
    pub(super) fn add(&mut self, uid: u32) {
        if let Some(d) = self.find(uid) {
            self.users[d as usize].1 += 1;
            return;
        }
        let d = self.users.len() as u16;
        // Within the capacity (type invariant): no allocation.
        if self.users.push((uid, 1), GFP_ATOMIC).is_ok() {
            pfm_index::insert(&mut self.index, uid.into(), d);
        }
    }

    /// `uid` holds one less.
    pub(super) fn sub(&mut self, uid: u32) {
        let Some(d) = self.find(uid) else {
            return;
        };
        let i = d as usize;
        if self.users[i].1 > 1 {
            self.users[i].1 -= 1;
            return;
        }
        let users = &self.users;
        pfm_index::remove(&mut self.index, uid.into(), d, |x| {
            users[x as usize].0.into()
        });
        let last = self.users.len() - 1;
        self.users.as_mut_slice().swap(i, last);
        // SAFETY: `last < len`; the element there is plain data (nothing
        // to drop): shortening the length by one removes it.
        unsafe { self.users.set_len(last) };
        if i != last {
            let moved = self.users[i].0;
            pfm_index::renumber(&mut self.index, moved.into(), last as u16, d);
        }
    }
}

/// Every attachment: a dense array allocated once for the documented limit
/// of `MAX_ATTACHED` (nothing allocates under its lock), indexed by thread
/// (`pfm_index`): finding a thread's attachments, on every fork and exec of
/// a monitored thread and every LOAD, costs what that thread holds, not
/// what is attached system-wide.
///
/// # Invariants
///
/// `slots.len() <= MAX_ATTACHED <= slots.capacity()`; `index` indexes each
/// slot once, under its thread's key; `users` counts the slots of the
/// attachments counted against the per-user limit
/// ([`Attachment::counted`]), by their owner.
pub(crate) struct Registry<M: Monitor> {
    slots: KVec<Arc<Attachment<M>>>,
    index: KVec<u16>,
    users: UserCounts,
}

impl<M: Monitor> Registry<M> {
    /// An empty registry with room for `MAX_ATTACHED` attachments.
    pub(crate) fn new() -> Result<Self> {
        // INVARIANT: empty, with the capacity of the limit.
        Ok(Self {
            slots: KVec::with_capacity(MAX_ATTACHED, GFP_KERNEL)?,
            index: empty_buckets()?,
            users: UserCounts::new()?,
        })
    }

    /// The attachments of thread `task`.
    pub(crate) fn of_task<'a>(
        &'a self,
        task: &'a Task,
    ) -> impl Iterator<Item = &'a Arc<Attachment<M>>> + 'a {
        pfm_index::run(&self.index, task_key(task))
            .map(move |d| &self.slots[d as usize])
            .filter(move |a| core::ptr::eq(&*a.task, task))
    }

    /// Attachments of user `uid` counted against the per-user limit.
    pub(crate) fn user_count(&self, uid: u32) -> usize {
        self.users.of(uid)
    }

    /// Whether every slot is taken.
    pub(crate) fn is_full(&self) -> bool {
        self.slots.len() >= MAX_ATTACHED
    }

    /// Adds `att`; `false` at the limit.
    pub(crate) fn insert(&mut self, att: &Arc<Attachment<M>>) -> bool {
        if self.is_full() {
            return false;
        }
        let d = self.slots.len() as u16;
        // Within the capacity (type invariant): `push` does not allocate.
        if self.slots.push(att.clone(), GFP_ATOMIC).is_err() {
            return false;
        }
        pfm_index::insert(&mut self.index, task_key(&att.task), d);
        if att.counted() {
            self.users.add(att.owner_uid);
        }
        true
    }

    /// Removes `att` and returns the registry's reference to it.
    pub(crate) fn remove(&mut self, att: &Arc<Attachment<M>>) -> Option<Arc<Attachment<M>>> {
        let key = task_key(&att.task);
        let d = pfm_index::run(&self.index, key)
            .find(|&d| Arc::ptr_eq(&self.slots[d as usize], att))?;
        let slots = &self.slots;
        pfm_index::remove(&mut self.index, key, d, |x| {
            task_key(&slots[x as usize].task)
        });
        let i = d as usize;
        let last = self.slots.len() - 1;
        self.slots.as_mut_slice().swap(i, last);
        // SAFETY: `last` is within the initialised length; reading the
        // element out and then shortening the length by one moves it out
        // exactly once (nothing is dropped twice or leaked).
        let removed = unsafe { core::ptr::read(self.slots.as_ptr().add(last)) };
        // SAFETY: `last < len <= capacity`; the element at `last` was moved out.
        unsafe { self.slots.set_len(last) };
        if i != last {
            let moved = task_key(&self.slots[i].task);
            pfm_index::renumber(&mut self.index, moved, last as u16, d);
        }
        if removed.counted() {
            self.users.sub(removed.owner_uid);
        }
        Some(removed)
    }
}
