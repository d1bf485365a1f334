// SPDX-License-Identifier: GPL-2.0

//! Every attachment, by thread.

use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::task::Task;

use super::{Attachment, Monitor};
use crate::MAX_ATTACHED;

/// Every attachment: a dense array allocated once for the documented limit
/// of `MAX_ATTACHED` (nothing allocates under its lock), so lookups cost
/// what is attached, not the limit.
///
/// # Invariants
///
/// `slots.len() <= MAX_ATTACHED <= slots.capacity()`.
pub(crate) struct Registry<M: Monitor> {
    slots: KVec<Arc<Attachment<M>>>,
}

impl<M: Monitor> Registry<M> {
    /// An empty registry with room for `MAX_ATTACHED` attachments.
    pub(crate) fn new() -> Result<Self> {
        // INVARIANT: empty, with the capacity of the limit.
        Ok(Self {
            slots: KVec::with_capacity(MAX_ATTACHED, GFP_KERNEL)?,
        })
    }

    /// Every attachment.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<Attachment<M>>> {
        self.slots.iter()
    }

    /// The attachments of thread `task`.
    pub(crate) fn of_task<'a>(
        &'a self,
        task: &'a Task,
    ) -> impl Iterator<Item = &'a Arc<Attachment<M>>> + 'a {
        self.slots
            .iter()
            .filter(move |a| core::ptr::eq(&*a.task, task))
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
        // Within the capacity (type invariant): `push` does not allocate.
        self.slots.push(att.clone(), GFP_ATOMIC).is_ok()
    }

    /// Removes `att` and returns the registry's reference to it.
    pub(crate) fn remove(&mut self, att: &Arc<Attachment<M>>) -> Option<Arc<Attachment<M>>> {
        let i = self.slots.iter().position(|a| Arc::ptr_eq(a, att))?;
        let last = self.slots.len() - 1;
        self.slots.as_mut_slice().swap(i, last);
        // SAFETY: `last` is within the initialised length; reading the
        // element out and then shortening the length by one moves it out
        // exactly once (nothing is dropped twice or leaked).
        let removed = unsafe { core::ptr::read(self.slots.as_ptr().add(last)) };
        // SAFETY: `last < len <= capacity`; the element at `last` was moved out.
        unsafe { self.slots.set_len(last) };
        Some(removed)
    }
}
