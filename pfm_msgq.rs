// SPDX-License-Identifier: GPL-2.0

//! The context's message ring, and the rule that a message leaves it only
//! once it has reached the tool.
//!
//! A `read(2)` cannot copy to user memory under the context's spinlock (the
//! copy may fault and sleep), so it works in two steps: [`MsgQueue::peek`]
//! copies the oldest messages out under the lock and notes their sequence
//! numbers; the copy to user space runs unlocked; [`MsgQueue::commit`]
//! removes exactly the messages that reached the tool. A read that faults
//! commits nothing and every message stays queued, END included.
//!
//! Between the two steps the ring can only lose messages from its front,
//! and only by [`MsgQueue::push_forced`] (END or REVOKED on a full ring), so
//! sequence numbers say exactly which of the peeked messages are still
//! queued, and which of the forced drops were in fact delivered (they are
//! then not counted as lost). Readers are serialized by the caller (one
//! peek/commit pair at a time), so no message reaches two readers.
//!
//! No kernel code: the host tests check it.

use crate::abi::PfmMsg;

/// Messages a context queues before it masks (perfmon2's depth).
pub const MSG_QUEUE_DEPTH: usize = 8;

/// Where a [`MsgQueue::peek`] found its messages.
#[derive(Clone, Copy, Debug)]
pub struct PeekMark {
    /// Sequence number of the first message peeked.
    first: u64,
    /// Forced drops before the peek.
    forced: u64,
}

/// A fixed ring of messages for the tool.
///
/// # Invariants
///
/// `head < MSG_QUEUE_DEPTH`, `len <= MSG_QUEUE_DEPTH`; the message with
/// sequence number `removed + i` is at `(head + i) % MSG_QUEUE_DEPTH` for
/// `i < len`.
pub struct MsgQueue {
    msgs: [PfmMsg; MSG_QUEUE_DEPTH],
    head: usize,
    len: usize,
    /// Messages ever removed from the front: the sequence number of the
    /// oldest queued message.
    removed: u64,
    /// Messages ever dropped by [`MsgQueue::push_forced`].
    forced: u64,
    /// Messages (or overflows) that never reached the tool: not queued
    /// because the ring was full, or dropped to make room for END/REVOKED.
    pub lost: u64,
}

impl Default for MsgQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl MsgQueue {
    /// An empty ring.
    pub const fn new() -> Self {
        const EMPTY: PfmMsg = PfmMsg {
            msg_type: 0,
            tid: 0,
            cpu: 0,
            pad: 0,
            reserved0: 0,
            ip: 0,
            ovfl_pmds: 0,
            tstamp: 0,
            reserved: [0; 3],
        };
        // INVARIANT: empty, head at 0.
        Self {
            msgs: [EMPTY; MSG_QUEUE_DEPTH],
            head: 0,
            len: 0,
            removed: 0,
            forced: 0,
            lost: 0,
        }
    }

    /// Appends `msg`; returns `false` when full.
    pub fn push(&mut self, msg: PfmMsg) -> bool {
        if self.len == MSG_QUEUE_DEPTH {
            return false;
        }
        self.msgs[(self.head + self.len) % MSG_QUEUE_DEPTH] = msg;
        self.len += 1;
        true
    }

    /// Appends `msg`, which must not be lost (END, REVOKED): on a full
    /// ring the oldest message makes room and is counted as lost.
    pub fn push_forced(&mut self, msg: PfmMsg) {
        if !self.push(msg) {
            self.pop_front();
            self.forced += 1;
            self.lost += 1;
            self.push(msg);
        }
    }

    /// Adds overflowed PMDs to the newest message (the queue is full).
    pub fn merge_into_newest(&mut self, ovfl: u64) {
        if self.len != 0 {
            self.msgs[(self.head + self.len - 1) % MSG_QUEUE_DEPTH].ovfl_pmds |= ovfl;
        }
    }

    fn pop_front(&mut self) {
        if self.len != 0 {
            self.head = (self.head + 1) % MSG_QUEUE_DEPTH;
            self.len -= 1;
            self.removed += 1;
        }
    }

    /// Copies up to `out.len()` of the oldest messages into `out`, leaving
    /// them queued; returns how many, and where they were, for
    /// [`MsgQueue::commit`].
    pub fn peek(&self, out: &mut [PfmMsg]) -> (usize, PeekMark) {
        let n = out.len().min(self.len);
        for (i, slot) in out.iter_mut().take(n).enumerate() {
            *slot = self.msgs[(self.head + i) % MSG_QUEUE_DEPTH];
        }
        let mark = PeekMark {
            first: self.removed,
            forced: self.forced,
        };
        (n, mark)
    }

    /// The first `delivered` messages of the [`MsgQueue::peek`] that
    /// returned `mark` reached the tool: removes those still queued. Those
    /// a forced push dropped in between were delivered after all, so they
    /// no longer count as lost.
    pub fn commit(&mut self, mark: PeekMark, delivered: usize) {
        let end = mark.first.saturating_add(delivered as u64);
        // Readers are serialized: since the peek, messages left the front
        // only through forced pushes (or a new LOAD's `clear`, which loses
        // nothing), from `first` on.
        let gone_delivered = self.removed.min(end).saturating_sub(mark.first);
        let forced_since = self.forced - mark.forced;
        self.lost = self.lost.saturating_sub(gone_delivered.min(forced_since));
        while self.removed < end && self.len != 0 {
            self.pop_front();
        }
    }

    /// Empties the ring (a new LOAD).
    pub fn clear(&mut self) {
        while self.len != 0 {
            self.pop_front();
        }
    }

    /// Whether no message is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Messages queued.
    pub fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(tstamp: u64) -> PfmMsg {
        PfmMsg {
            tstamp,
            ..PfmMsg::default()
        }
    }

    fn stamps(q: &MsgQueue) -> Vec<u64> {
        let mut out = [PfmMsg::default(); MSG_QUEUE_DEPTH];
        let (n, _) = q.peek(&mut out);
        out[..n].iter().map(|m| m.tstamp).collect()
    }

    #[test]
    fn a_read_that_faults_removes_nothing() {
        let mut q = MsgQueue::new();
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
    fn forced_push_while_reading_is_not_lost_twice() {
        let mut q = MsgQueue::new();
        for i in 0..MSG_QUEUE_DEPTH as u64 {
            assert!(q.push(msg(i)));
        }
        assert!(!q.push(msg(99)));
        let mut out = [PfmMsg::default(); 2];
        let (n, first) = q.peek(&mut out);
        assert_eq!(n, 2);
        // END arrives on the full ring while the copy runs: message 0 goes.
        q.push_forced(msg(1000));
        assert_eq!(q.lost, 1);
        // Both peeked messages reached the tool: 0 was delivered after all.
        q.commit(first, 2);
        assert_eq!(q.lost, 0);
        assert_eq!(stamps(&q), [2, 3, 4, 5, 6, 7, 1000]);
    }

    #[test]
    fn forced_drop_beyond_what_was_delivered_stays_lost() {
        let mut q = MsgQueue::new();
        for i in 0..MSG_QUEUE_DEPTH as u64 {
            assert!(q.push(msg(i)));
        }
        let mut out = [PfmMsg::default(); 1];
        let (_, first) = q.peek(&mut out);
        q.push_forced(msg(1000));
        q.push_forced(msg(1001));
        // Message 0 was delivered, message 1 was not: one lost.
        q.commit(first, 1);
        assert_eq!(q.lost, 1);
        assert_eq!(stamps(&q), [2, 3, 4, 5, 6, 7, 1000, 1001]);
        // A fault after the drops: nothing delivered, the loss stands.
        let (_, first) = q.peek(&mut out);
        q.push_forced(msg(1002));
        q.commit(first, 0);
        assert_eq!(q.lost, 2);
    }

    #[test]
    fn a_load_while_reading_loses_nothing_more() {
        let mut q = MsgQueue::new();
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
    fn wraps_around_the_ring() {
        let mut q = MsgQueue::new();
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
