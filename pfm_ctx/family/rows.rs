// SPDX-License-Identifier: GPL-2.0

//! Whole programs, the rows of ended threads: what `PFM_IOC_READ_THREADS`
//! shows of an heir whose monitoring ended (its thread exited, or an exec
//! revoked it) once its context is freed. Compact: the thread's ids, its
//! flags, its times and the counts that are not zero, packed in one array
//! of words (about 40 bytes plus 8 per counting PMD a row, against 2.6 KB
//! for the context it replaces).

use kernel::prelude::*;

use super::{Snapshot, Tally};
use crate::abi::PFM_MAX_PMDS;

/// Words of a row before its counts: join order, ids, flags and count
/// mask, `time_enabled`, `time_running`.
const HEAD: usize = 5;

const EXITED: u64 = 1 << 0;
const REVOKED: u64 = 1 << 1;

/// One ended thread, as read back.
pub(super) struct Ended {
    /// Its place in the order heirs joined.
    pub(super) seq: u64,
    pub(super) tid: u32,
    pub(super) pid: u32,
    /// What it counted, and its times.
    pub(super) tally: Tally,
    pub(super) exited: bool,
    pub(super) revoked: bool,
}

impl Ended {
    /// The row as a snapshot whose values, less `base`, are its counts.
    pub(super) fn snapshot(&self, base: &[u64; PFM_MAX_PMDS]) -> Snapshot {
        let mut values = [0u64; PFM_MAX_PMDS];
        for ((v, c), b) in values
            .iter_mut()
            .zip(self.tally.counts.iter())
            .zip(base.iter())
        {
            *v = b.wrapping_add(*c);
        }
        Snapshot {
            values,
            enabled: self.tally.enabled,
            running: self.tally.running,
            exited: self.exited,
            revoked: self.revoked,
        }
    }
}

/// The rows of ended threads, in the order they ended.
///
/// # Invariants
///
/// `words` holds `rows` rows back to back, each `HEAD` words then one
/// word per bit of its count mask.
pub(super) struct EndedRows {
    words: KVec<u64>,
    rows: usize,
}

impl EndedRows {
    /// No row.
    pub(super) const fn new() -> Self {
        Self {
            words: KVec::new(),
            rows: 0,
        }
    }

    /// How many rows.
    pub(super) fn len(&self) -> usize {
        self.rows
    }

    /// Adds the row of heir `seq`, thread `tid` of process `pid`, which
    /// ended as `s` says after counting `t`. All or nothing (`ENOMEM`).
    pub(super) fn push(&mut self, seq: u64, ids: (u32, u32), s: &Snapshot, t: &Tally) -> Result {
        let mut mask = 0u32;
        for (i, c) in t.counts.iter().enumerate() {
            if *c != 0 {
                mask |= 1 << i;
            }
        }
        let flags = if s.exited { EXITED } else { 0 } | if s.revoked { REVOKED } else { 0 };
        let n = HEAD + mask.count_ones() as usize;
        self.words.reserve(n, GFP_KERNEL_ACCOUNT)?;
        let head = [
            seq,
            u64::from(ids.0) | u64::from(ids.1) << 32,
            flags | u64::from(mask) << 32,
            t.enabled,
            t.running,
        ];
        // Within the room reserved: no allocation, no failure.
        for w in Iterator::chain(head.iter(), t.counts.iter().filter(|c| **c != 0)) {
            self.words.push(*w, GFP_ATOMIC)?;
        }
        // INVARIANT: one more row, of `HEAD` words and one per mask bit.
        self.rows += 1;
        Ok(())
    }

    /// Every row, in the order they were added.
    pub(super) fn iter(&self) -> impl Iterator<Item = Ended> + '_ {
        let mut at = 0;
        (0..self.rows).map_while(move |_| {
            let head = self.words.get(at..at + HEAD)?;
            let mask = (head[2] >> 32) as u32;
            let n = mask.count_ones() as usize;
            let counts = self.words.get(at + HEAD..at + HEAD + n)?;
            let mut tally = Tally::ZERO;
            let mut next = counts.iter();
            for (i, c) in tally.counts.iter_mut().enumerate() {
                if mask & (1 << i) != 0 {
                    *c = next.next().copied().unwrap_or(0);
                }
            }
            tally.enabled = head[3];
            tally.running = head[4];
            at += HEAD + n;
            Some(Ended {
                seq: head[0],
                tid: head[1] as u32,
                pid: (head[1] >> 32) as u32,
                tally,
                exited: head[2] & EXITED != 0,
                revoked: head[2] & REVOKED != 0,
            })
        })
    }
}
