// SPDX-License-Identifier: GPL-2.0

//! The context's messages, and the rule that a message leaves them only
//! once it has reached the tool.
//!
//! Overflow messages go to a fixed ring of [`MSG_QUEUE_DEPTH`], which a
//! context gets only when one of its PMDs asks for notification (the
//! storage is the caller's: most contexts only count and never need it).
//! The message that ends a monitoring (END, REVOKED) has a slot of its own,
//! read after every ring message: it is never lost behind overflows and
//! never pushes one out.
//!
//! A `read(2)` cannot copy to user memory under the context's spinlock (the
//! copy may fault and sleep), so it works in two steps: [`MsgQueue::peek`]
//! copies the oldest messages out under the lock and notes where they were;
//! the copy to user space runs unlocked; [`MsgQueue::commit`] removes
//! exactly the messages that reached the tool. A read that faults commits
//! nothing and every message stays queued, END included. Between the two
//! steps the ring can only lose messages from its front by a new LOAD's
//! [`MsgQueue::clear`], so sequence numbers say exactly which of the peeked
//! messages are still queued. Readers are serialized by the caller (one
//! peek/commit pair at a time), so no message reaches two readers.
//!
//! No kernel code: the host tests check it.

use core::ops::DerefMut;

use crate::abi::PfmMsg;

/// Messages a context queues before it masks (perfmon2's depth).
pub const MSG_QUEUE_DEPTH: usize = 8;

/// Where a [`MsgQueue::peek`] found its messages.
#[derive(Clone, Copy, Debug)]
pub struct PeekMark {
    /// Sequence number of the first ring message peeked.
    first: u64,
    /// Ring messages peeked.
    ring: usize,
    /// The final message's sequence number, if it was peeked (after them).
    last: Option<u32>,
}

/// A message slot not in use.
const EMPTY: PfmMsg = PfmMsg {
    msg_type: 0,
    tid: 0,
    cpu: 0,
    set: 0,
    reserved0: 0,
    ip: 0,
    ovfl_pmds: 0,
    tstamp: 0,
    reserved: [0; 3],
};

/// The message that ends a monitoring (END, REVOKED), in the fields such a
/// message carries: its slot is in every context, which is sized to a slab
/// class, and a whole [`PfmMsg`] is 64 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FinalMsg {
    /// ns, `local_clock()`.
    pub tstamp: u64,
    /// Monitored thread.
    pub tid: u32,
    /// CPU where the thread last ran.
    pub cpu: u16,
    /// `PFM_MSG_END` or `PFM_MSG_REVOKED` (both fit 16 bits); 0: none.
    pub msg_type: u16,
}

/// [`FinalMsg::msg_type`] of END.
pub const FINAL_END: u16 = crate::abi::PFM_MSG_END as u16;
/// [`FinalMsg::msg_type`] of REVOKED.
pub const FINAL_REVOKED: u16 = crate::abi::PFM_MSG_REVOKED as u16;
const _: () = assert!(FINAL_END as u32 == crate::abi::PFM_MSG_END);
const _: () = assert!(FINAL_REVOKED as u32 == crate::abi::PFM_MSG_REVOKED);

impl FinalMsg {
    /// The message as the tool reads it.
    fn to_msg(self) -> PfmMsg {
        PfmMsg {
            msg_type: self.msg_type.into(),
            tid: self.tid,
            cpu: self.cpu,
            tstamp: self.tstamp,
            ..EMPTY
        }
    }
}

/// Storage for the overflow messages.
pub struct Ring {
    msgs: [PfmMsg; MSG_QUEUE_DEPTH],
}

impl Ring {
    /// Empty storage.
    pub const fn new() -> Self {
        Self {
            msgs: [EMPTY; MSG_QUEUE_DEPTH],
        }
    }
}

impl Default for Ring {
    fn default() -> Self {
        Self::new()
    }
}

/// A context's messages, its ring storage held through `S`.
///
/// # Invariants
///
/// `head < MSG_QUEUE_DEPTH`, `len <= MSG_QUEUE_DEPTH`, `len == 0` without
/// a ring; the ring message with sequence number `removed + i` is at
/// `(head + i) % MSG_QUEUE_DEPTH` for `i < len`.
pub struct MsgQueue<S> {
    ring: Option<S>,
    /// Ring messages ever removed from the front: the sequence number of
    /// the oldest queued one.
    removed: u64,
    /// Overflow messages that never reached the tool (the ring was full,
    /// or missing), and final messages replaced unread.
    pub lost: u64,
    /// END or REVOKED, read after the ring's messages; none while its
    /// `msg_type` is 0 (not an `Option`: the context is sized to a slab
    /// class).
    last: FinalMsg,
    /// Final messages ever set (or cleared): `last`'s sequence number
    /// (compared for equality only, across one read).
    last_seq: u32,
    head: u8,
    len: u8,
}

impl<S: DerefMut<Target = Ring>> Default for MsgQueue<S> {
    fn default() -> Self {
        Self::new()
    }
}

impl<S: DerefMut<Target = Ring>> MsgQueue<S> {
    /// No messages, and no ring yet.
    pub const fn new() -> Self {
        // INVARIANT: empty, head at 0.
        Self {
            ring: None,
            removed: 0,
            lost: 0,
            last: FinalMsg {
                tstamp: 0,
                tid: 0,
                cpu: 0,
                msg_type: 0,
            },
            last_seq: 0,
            head: 0,
            len: 0,
        }
    }

    /// Whether overflow messages have storage.
    pub fn has_ring(&self) -> bool {
        self.ring.is_some()
    }

    /// Gives the queue its ring storage, if it has none yet; otherwise
    /// hands `ring` back.
    pub fn set_ring(&mut self, ring: S) -> Option<S> {
        if self.ring.is_some() {
            return Some(ring);
        }
        self.ring = Some(ring);
        None
    }

    /// Appends an overflow message; `false` when full (or without a ring).
    pub fn push(&mut self, msg: PfmMsg) -> bool {
        let Some(ring) = self.ring.as_mut() else {
            return false;
        };
        let (head, len) = (usize::from(self.head), usize::from(self.len));
        if len == MSG_QUEUE_DEPTH {
            return false;
        }
        ring.msgs[(head + len) % MSG_QUEUE_DEPTH] = msg;
        self.len += 1;
        true
    }

    /// The type of the final message (END, REVOKED), 0 if there is none.
    pub fn final_type(&self) -> u16 {
        self.last.msg_type
    }

    /// Sets the final message (END, REVOKED: its `msg_type` is not 0),
    /// read after every overflow message. One per attachment; one still
    /// unread is replaced and counted as lost.
    pub fn push_last(&mut self, msg: FinalMsg) {
        if self.last.msg_type != 0 {
            self.lost += 1;
        }
        self.last = msg;
        self.last_seq = self.last_seq.wrapping_add(1);
    }

    /// Adds overflowed PMDs of event set `set` to the newest overflow
    /// message (the ring is full) if it is that set's; whether it was.
    pub fn merge_into_newest(&mut self, set: u16, ovfl: u64) -> bool {
        let (head, len) = (usize::from(self.head), usize::from(self.len));
        match (self.ring.as_mut(), len != 0) {
            (Some(ring), true) => {
                let newest = &mut ring.msgs[(head + len - 1) % MSG_QUEUE_DEPTH];
                if newest.set != set {
                    return false;
                }
                newest.ovfl_pmds |= ovfl;
                true
            }
            _ => false,
        }
    }

    fn pop_front(&mut self) {
        if self.len != 0 {
            // `head < MSG_QUEUE_DEPTH`, which fits a `u8`.
            self.head = ((usize::from(self.head) + 1) % MSG_QUEUE_DEPTH) as u8;
            self.len -= 1;
            self.removed += 1;
        }
    }

    /// Copies up to `out.len()` of the oldest messages into `out`, leaving
    /// them queued; returns how many, and where they were, for
    /// [`MsgQueue::commit`].
    pub fn peek(&self, out: &mut [PfmMsg]) -> (usize, PeekMark) {
        let (head, len) = (usize::from(self.head), usize::from(self.len));
        let n = out.len().min(len);
        if let Some(ring) = self.ring.as_ref() {
            for (i, slot) in out.iter_mut().take(n).enumerate() {
                *slot = ring.msgs[(head + i) % MSG_QUEUE_DEPTH];
            }
        }
        let mut mark = PeekMark {
            first: self.removed,
            ring: n,
            last: None,
        };
        match out.get_mut(n) {
            Some(slot) if n == len && self.last.msg_type != 0 => {
                *slot = self.last.to_msg();
                mark.last = Some(self.last_seq);
                (n + 1, mark)
            }
            _ => (n, mark),
        }
    }

    /// The first `delivered` messages of the [`MsgQueue::peek`] that
    /// returned `mark` reached the tool: removes those still queued.
    pub fn commit(&mut self, mark: PeekMark, delivered: usize) {
        let end = mark.first.saturating_add(delivered.min(mark.ring) as u64);
        // Readers are serialized: since the peek, messages left the front
        // only through a new LOAD's `clear`, from `first` on.
        while self.removed < end && self.len != 0 {
            self.pop_front();
        }
        if delivered > mark.ring && mark.last == Some(self.last_seq) {
            self.last.msg_type = 0;
        }
    }

    /// Empties the queue (a new LOAD); the ring storage stays.
    pub fn clear(&mut self) {
        while self.len != 0 {
            self.pop_front();
        }
        self.last.msg_type = 0;
        self.last_seq = self.last_seq.wrapping_add(1);
    }

    /// Whether no message is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0 && self.last.msg_type == 0
    }

    /// Messages queued.
    pub fn len(&self) -> usize {
        usize::from(self.len) + usize::from(self.last.msg_type != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Queue = MsgQueue<Box<Ring>>;

    fn queue() -> Queue {
        let mut q = Queue::new();
        assert!(q.set_ring(Box::new(Ring::new())).is_none());
        q
    }

    fn msg(tstamp: u64) -> PfmMsg {
        PfmMsg {
            tstamp,
            ..PfmMsg::default()
        }
    }

    /// A final message (END).
    fn fin(tstamp: u64) -> FinalMsg {
        FinalMsg {
            msg_type: FINAL_END,
            tstamp,
            ..FinalMsg::default()
        }
    }

    fn stamps(q: &Queue) -> Vec<u64> {
        let mut out = [PfmMsg::default(); MSG_QUEUE_DEPTH + 1];
        let (n, _) = q.peek(&mut out);
        out[..n].iter().map(|m| m.tstamp).collect()
    }

    #[test]
    fn a_read_that_faults_removes_nothing() {
        let mut q = queue();
        for i in 0..5 {
            assert!(q.push(msg(i)));
        }
        let mut out = [PfmMsg::default(); 3];
        let (n, first) = q.peek(&mut out);
        assert_eq!(n, 3);
        q.commit(first, 0);
        assert_eq!(stamps(&q), [0, 1, 2, 3, 4]);
        // A partial copy: the first two reached the tool.
        let (_, first) = q.peek(&mut out);
        q.commit(first, 2);
        assert_eq!(stamps(&q), [2, 3, 4]);
        assert_eq!(q.lost, 0);
    }

    #[test]
    fn without_a_ring_only_the_final_message_is_kept() {
        let mut q = Queue::new();
        assert!(!q.push(msg(1)));
        assert!(q.is_empty());
        q.push_last(fin(1000));
        assert_eq!(stamps(&q), [1000]);
        let mut out = [PfmMsg::default(); 1];
        let (n, mark) = q.peek(&mut out);
        q.commit(mark, n);
        assert!(q.is_empty());
        // A second ring is handed back.
        assert!(q.set_ring(Box::new(Ring::new())).is_none());
        assert!(q.set_ring(Box::new(Ring::new())).is_some());
    }

    #[test]
    fn the_final_message_comes_after_a_full_ring_and_displaces_nothing() {
        let mut q = queue();
        for i in 0..MSG_QUEUE_DEPTH as u64 {
            assert!(q.push(msg(i)));
        }
        assert!(!q.push(msg(99)));
        let mut out = [PfmMsg::default(); 2];
        let (n, mark) = q.peek(&mut out);
        assert_eq!(n, 2);
        // END arrives on the full ring while the copy runs.
        q.push_last(fin(1000));
        q.commit(mark, 2);
        assert_eq!(q.lost, 0);
        assert_eq!(stamps(&q), [2, 3, 4, 5, 6, 7, 1000]);
    }

    #[test]
    fn the_final_message_leaves_only_once_delivered() {
        let mut q = queue();
        assert!(q.push(msg(1)));
        q.push_last(fin(1000));
        let mut out = [PfmMsg::default(); 4];
        // A fault: nothing delivered, both stay.
        let (n, mark) = q.peek(&mut out);
        assert_eq!(n, 2);
        q.commit(mark, 0);
        assert_eq!(stamps(&q), [1, 1000]);
        // Only the overflow message reached the tool.
        let (_, mark) = q.peek(&mut out);
        q.commit(mark, 1);
        assert_eq!(stamps(&q), [1000]);
        let (n, mark) = q.peek(&mut out);
        q.commit(mark, n);
        assert!(q.is_empty());
        assert_eq!(q.lost, 0);
    }

    #[test]
    fn a_final_message_set_while_reading_is_not_taken_for_the_old_one() {
        let mut q = queue();
        q.push_last(fin(1000));
        let mut out = [PfmMsg::default(); 1];
        let (n, mark) = q.peek(&mut out);
        // A new LOAD, and its END, while the copy of the old END runs.
        q.clear();
        q.push_last(fin(2000));
        q.commit(mark, n);
        assert_eq!(stamps(&q), [2000]);
        // Replaced unread: counted.
        q.push_last(fin(3000));
        assert_eq!(q.lost, 1);
    }

    #[test]
    fn a_load_while_reading_loses_nothing_more() {
        let mut q = queue();
        for i in 0..4 {
            assert!(q.push(msg(i)));
        }
        let mut out = [PfmMsg::default(); 2];
        let (n, mark) = q.peek(&mut out);
        q.clear();
        assert!(q.push(msg(50)));
        q.commit(mark, n);
        assert_eq!(q.lost, 0);
        assert_eq!(stamps(&q), [50]);
    }

    #[test]
    fn the_final_message_reads_back_as_queued() {
        let mut q = Queue::new();
        q.push_last(FinalMsg {
            tstamp: 1 << 40,
            tid: 0x8000_0001,
            cpu: 0xfffe,
            msg_type: FINAL_REVOKED,
        });
        let mut out = [PfmMsg::default(); 1];
        assert_eq!(q.peek(&mut out).0, 1);
        let want = PfmMsg {
            msg_type: crate::abi::PFM_MSG_REVOKED,
            tid: 0x8000_0001,
            cpu: 0xfffe,
            tstamp: 1 << 40,
            ..PfmMsg::default()
        };
        assert_eq!(out[0], want);
    }

    #[test]
    fn wraps_around_the_ring() {
        let mut q = queue();
        let mut out = [PfmMsg::default(); 3];
        for round in 0..10u64 {
            for i in 0..3 {
                assert!(q.push(msg(round * 10 + i)));
            }
            let (n, first) = q.peek(&mut out);
            assert_eq!(n, 3);
            assert_eq!(out[2].tstamp, round * 10 + 2);
            q.commit(first, n);
            assert!(q.is_empty());
        }
    }
}
