// SPDX-License-Identifier: GPL-2.0

//! The context's messages: the overflow interrupt that queues them, and
//! the file's `read`, `poll` and `fasync`, which deliver them. The ring
//! itself (`pfm_msgq`) lives under the context's lock, where the
//! interrupt pushes; the [`Mailbox`] holds what waits on it.

use kernel::bindings;
use kernel::prelude::*;
use kernel::uaccess::UserSliceWriter;

use super::Context;
use crate::abi;
use crate::pfm_msgq::MSG_QUEUE_DEPTH;
use crate::pfm_state::{Op, State};
use crate::rust::{self as glue, FasyncList, WaitQueue};

/// Whether a `read(2)` is between taking messages and removing them
/// (`pfm_msgq`'s peek and commit): readers go one at a time, so no
/// message reaches two. Kept under the context's lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reader {
    /// No reader holds the messages.
    Idle,
    /// One is copying them to user memory.
    Copying,
    /// One is copying them, and another waits for its commit.
    Awaited,
}

/// Who waits for a context's messages.
///
/// # Invariants
///
/// `waitq` and `fasync` are the wait queue and SIGIO owners of the one
/// file whose context holds this mailbox.
#[pin_data]
pub(super) struct Mailbox {
    #[pin]
    waitq: WaitQueue,
    fasync: FasyncList,
}

// SAFETY: The raw fields are kernel objects with their own locking (the
// wait queue's lock, fasync's RCU list).
unsafe impl Send for Mailbox {}
// SAFETY: See `Send`.
unsafe impl Sync for Mailbox {}

impl Mailbox {
    pub(super) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            waitq <- WaitQueue::new(),
            fasync: FasyncList::new(),
        })
    }
}

impl Context {
    /// Wakes readers, pollers and a thread blocked on an overflow, and
    /// signals SIGIO owners. Must not be called with the runqueue lock held
    /// (use the attachment's irq_work).
    pub(crate) fn wake(&self) {
        self.mailbox.waitq.wake_all();
        self.mailbox.fasync.signal_io();
    }

    /// The overflow interrupt for this context: acts on the overflowed PMDs
    /// (message, masking, blocking). Hard-IRQ context; returns whether the
    /// monitored thread must block until RESTART.
    pub(super) fn take_overflows(&self) -> bool {
        let block;
        {
            let mut inner = self.inner.lock();
            if inner.exec_check {
                // Held until the exec's credentials are checked.
                return false;
            }
            let ovfl = core::mem::take(&mut inner.pending_ovfl);
            if ovfl == 0 {
                return false;
            }
            match inner.state() {
                // Lazy cleanup: stop a zombie's counters, do not re-arm.
                State::Zombie => {
                    inner.drop_pending_sets();
                    inner.started = false;
                    inner.sync_hw();
                    return false;
                }
                State::Loaded | State::Masked => {}
                State::Unloaded | State::Freed => {
                    inner.drop_pending_sets();
                    // A full buffer of a monitoring now ended masks nothing.
                    let _ = inner.take_smpl_events();
                    return false;
                }
            }
            // One message per event set whose PMDs asked (one set, 0,
            // without sets).
            let mut notified = false;
            for (set, &pending) in inner.take_pending(ovfl).iter().enumerate() {
                let Some(image) = inner.image(set).filter(|_| pending != 0) else {
                    continue;
                };
                let mut notify = 0u64;
                for (i, pmd) in image.pmds().iter().enumerate() {
                    if pending & (1 << i) != 0 && pmd.flags() & abi::PFM_REGFL_OVFL_NOTIFY != 0 {
                        notify |= 1 << i;
                    }
                }
                if notify == 0 {
                    continue;
                }
                notified = true;
                inner.note_notified_set(set);
                if inner.flags & abi::PFM_CTXFL_NO_MSG != 0 {
                    continue;
                }
                let msg = abi::PfmMsg {
                    msg_type: abi::PFM_MSG_OVFL,
                    tid: inner.tid,
                    cpu: inner.on_cpu.unwrap_or(inner.last_cpu) as u16,
                    set: set as u16,
                    ip: inner.pending_ip,
                    ovfl_pmds: notify,
                    tstamp: glue::now_ns(),
                    ..abi::PfmMsg::default()
                };
                if !inner.msgs.push(msg) {
                    // A full queue masks the context instead of losing the
                    // overflow: it stays in the newest message until RESTART.
                    // (Another set's overflow has no message to join:
                    // counted lost, the context masked all the same.)
                    let _ = inner.msgs.merge_into_newest(set as u16, notify);
                    inner.msgs.lost += 1;
                    let _ = inner.transition(Op::QueueFull);
                }
            }
            let smpl = inner.take_smpl_events();
            if smpl.full_pmds != 0 {
                // perfmon2's policy: a full buffer masks the context until
                // RESTART, with a message (whatever NO_MSG says: without
                // it the tool would not know to drain).
                let msg = abi::PfmMsg {
                    msg_type: abi::PFM_MSG_SMPL_FULL,
                    tid: inner.tid,
                    cpu: inner.on_cpu.unwrap_or(inner.last_cpu) as u16,
                    ip: inner.pending_ip,
                    ovfl_pmds: smpl.full_pmds,
                    tstamp: glue::now_ns(),
                    ..abi::PfmMsg::default()
                };
                if !inner.msgs.push(msg) {
                    inner.msgs.lost += 1;
                }
                let _ = inner.transition(Op::QueueFull);
                notified = true;
            }
            if !notified {
                drop(inner);
                smpl.wake_readers(self);
                return false;
            }
            block = inner.flags & abi::PFM_CTXFL_NOTIFY_BLOCK != 0
                && inner.transition(Op::OverflowBlock).is_ok();
            // A masked context stops counting (hardware: leaves the PMU).
            inner.sync_hw();
            inner.page_update();
        }
        self.wake();
        block
    }

    /// Blocks the calling thread (the monitored one, on its way back to
    /// user mode) while the context is MASKED and still wants it; a signal
    /// releases it early (the counters stay stopped until RESTART).
    pub(super) fn wait_for_restart(&self, still_wanted: impl Fn() -> bool) {
        // RESTART, UNLOAD and close wake us.
        while !self.mailbox.waitq.wait_unless(false, || {
            self.inner.lock().state() != State::Masked
                || !still_wanted()
                || kernel::current!().signal_pending()
        }) {}
    }

    /// `fasync` file operation.
    pub(crate) fn fasync(&self, fd: i32, file: *mut bindings::file, on: i32) -> i32 {
        // SAFETY: `file` is the open file this context belongs to (type
        // invariant of `Mailbox`), which the context outlives.
        unsafe { self.mailbox.fasync.helper(fd, file, on) }
    }

    /// `poll` file operation.
    ///
    /// # Safety
    ///
    /// `file` and `table` come from the VFS's `poll` call on this context's file.
    pub(crate) unsafe fn poll(
        &self,
        file: *mut bindings::file,
        table: *mut bindings::poll_table_struct,
    ) -> u32 {
        // SAFETY: The caller's guarantees; the queue lives as long as the file.
        unsafe { glue::poll_wait(file, self.mailbox.waitq.as_ptr(), table) };
        let inner = self.inner.lock();
        if !inner.msgs.is_empty() || inner.smpl_readable() {
            glue::POLLIN | glue::POLLRDNORM
        } else if inner.exited {
            glue::POLLHUP
        } else {
            0
        }
    }

    /// `read` file operation: one or more whole messages.
    pub(crate) fn read(&self, mut out: UserSliceWriter, nonblock: bool) -> Result<usize> {
        const MSG: usize = core::mem::size_of::<abi::PfmMsg>();
        if out.len() < MSG {
            return Err(EINVAL);
        }
        loop {
            let (mut ready, mut exited, mut interrupted) = (false, false, false);
            // Woken by `wake`, or by a reader that held the messages; one
            // reader per message (exclusive).
            self.mailbox.waitq.wait_unless(true, || {
                let mut inner = self.inner.lock();
                ready = !inner.msgs.is_empty();
                let busy = ready && inner.reader != Reader::Idle;
                if busy {
                    // Another `read(2)` is copying them: its commit
                    // wakes us. Not the end yet, even if the thread exited.
                    inner.reader = Reader::Awaited;
                    ready = false;
                }
                exited = inner.exited && !busy;
                if ready || exited || nonblock {
                    return true;
                }
                interrupted = kernel::current!().signal_pending();
                interrupted
            });
            if interrupted {
                return Err(ERESTARTSYS);
            }
            if ready {
                if let Some(r) = self.deliver(&mut out) {
                    return r;
                }
                // Another reader took them: wait again.
                continue;
            }
            if exited {
                return Ok(0);
            }
            if nonblock {
                return Err(EAGAIN);
            }
        }
    }

    /// Copies the oldest messages that fit to `out` and removes from the
    /// queue exactly those that reached it (`pfm_msgq`): a faulting copy
    /// leaves every message queued. `None` if the queue was empty, or
    /// another reader holds the messages.
    fn deliver(&self, out: &mut UserSliceWriter) -> Option<Result<usize>> {
        const MSG: usize = core::mem::size_of::<abi::PfmMsg>();
        // The ring's messages and the final one.
        let mut batch = [abi::PfmMsg::default(); MSG_QUEUE_DEPTH + 1];
        let room = (out.len() / MSG).min(batch.len());
        let (n, mark) = {
            let mut inner = self.inner.lock();
            // One reader between peek and commit, so no message reaches two.
            if inner.reader != Reader::Idle {
                inner.reader = Reader::Awaited;
                return None;
            }
            let (n, mark) = inner.msgs.peek(&mut batch[..room]);
            if n != 0 {
                inner.reader = Reader::Copying;
            }
            (n, mark)
        };
        if n == 0 {
            return None;
        }
        let mut delivered = 0;
        let mut fault = None;
        for m in &batch[..n] {
            match out.write(m) {
                Ok(()) => delivered += 1,
                Err(e) => {
                    fault = Some(e);
                    break;
                }
            }
        }
        let awaited = {
            let mut inner = self.inner.lock();
            inner.msgs.commit(mark, delivered);
            core::mem::replace(&mut inner.reader, Reader::Idle) == Reader::Awaited
        };
        if awaited {
            self.mailbox.waitq.wake_all();
        }
        match fault {
            Some(e) if delivered == 0 => Some(Err(e)),
            _ => Some(Ok(delivered * MSG)),
        }
    }
}
