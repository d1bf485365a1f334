// SPDX-License-Identifier: GPL-2.0

//! Whole programs, the rows of ended threads: what `PFM_IOC_READ_THREADS`
//! shows of an heir whose monitoring ended (its thread exited, or an exec
//! revoked it) once its context is freed. Compact: the thread's ids, its
//! flags, its times and, per event set, the set's times and the counts
//! that are not zero, packed in one array of words (about 64 bytes plus 8
//! per counting PMD a row without sets, against 2.6 KB for the context it
//! replaces).

use kernel::prelude::*;

use super::tally::tally_from;
use super::{Context, Members, Snapshot, Tally, Template, MAX_ENDED_ROWS};
use crate::abi::PFM_MAX_PMDS;
use crate::pfm_sets::PFM_MAX_SETS;

/// Words of a row before its sets' blocks: join order, ids, flags and
/// number of blocks, `time_enabled`, `time_running`.
const HEAD: usize = 5;

/// Words of a set's block before its counts: the set and its count mask,
/// the set's `time_enabled` and `time_running`.
const BLOCK_HEAD: usize = 3;

const EXITED: u64 = 1 << 0;
const REVOKED: u64 = 1 << 1;

/// One ended thread, as read back.
pub(super) struct Ended<'a> {
    /// Its place in the order heirs joined.
    pub(super) seq: u64,
    pub(super) tid: u32,
    pub(super) pid: u32,
    exited: bool,
    revoked: bool,
    enabled: u64,
    running: u64,
    /// Its sets' blocks.
    blocks: &'a [u64],
}

impl Ended<'_> {
    /// What it counted in set `set`, and its times (nothing if it had no
    /// such set).
    pub(super) fn tally(&self, set: usize) -> Tally {
        let mut t = Tally::ZERO;
        t.enabled = self.enabled;
        t.running = self.running;
        let mut at = 0;
        while let Some(head) = self.blocks.get(at..at + BLOCK_HEAD) {
            let mask = (head[0] >> 32) as u32;
            let n = mask.count_ones() as usize;
            if head[0] as u16 as usize == set {
                let counts = self.blocks.get(at + BLOCK_HEAD..at + BLOCK_HEAD + n);
                let mut next = counts.unwrap_or_default().iter();
                for (i, c) in t.counts.iter_mut().enumerate() {
                    if mask & (1 << i) != 0 {
                        *c = next.next().copied().unwrap_or(0);
                    }
                }
                t.set_enabled = head[1];
                t.set_running = head[2];
                break;
            }
            at += BLOCK_HEAD + n;
        }
        t
    }

    /// The row of set `set` as a snapshot whose values, less `base`, are
    /// its counts.
    pub(super) fn snapshot(&self, set: usize, base: &[u64; PFM_MAX_PMDS]) -> Snapshot {
        let t = self.tally(set);
        let mut values = [0u64; PFM_MAX_PMDS];
        for ((v, c), b) in values.iter_mut().zip(t.counts.iter()).zip(base.iter()) {
            *v = b.wrapping_add(*c);
        }
        Snapshot {
            values,
            enabled: t.enabled,
            running: t.running,
            set_enabled: t.set_enabled,
            set_running: t.set_running,
            exited: self.exited,
            revoked: self.revoked,
        }
    }
}

/// The rows of ended threads, in the order they ended.
///
/// # Invariants
///
/// `words` holds `rows` rows back to back, each `HEAD` words then as many
/// blocks as its head says, each `BLOCK_HEAD` words then one word per bit
/// of its count mask.
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
    /// ended as `s` says after counting `sets` (each set's id and tally).
    /// All or nothing (`ENOMEM`).
    pub(super) fn push(
        &mut self,
        seq: u64,
        ids: (u32, u32),
        s: &Snapshot,
        sets: &[(u16, Tally)],
    ) -> Result {
        let mask_of = |t: &Tally| {
            t.counts
                .iter()
                .enumerate()
                .filter(|(_, c)| **c != 0)
                .fold(0u32, |m, (i, _)| m | 1 << i)
        };
        let n = HEAD
            + sets
                .iter()
                .map(|(_, t)| BLOCK_HEAD + mask_of(t).count_ones() as usize)
                .sum::<usize>();
        self.words.reserve(n, GFP_KERNEL_ACCOUNT)?;
        let flags = if s.exited { EXITED } else { 0 } | if s.revoked { REVOKED } else { 0 };
        let head = [
            seq,
            u64::from(ids.0) | u64::from(ids.1) << 32,
            flags | (sets.len() as u64) << 32,
            s.enabled,
            s.running,
        ];
        // Within the room reserved: no allocation, no failure.
        for w in head {
            self.words.push(w, GFP_ATOMIC)?;
        }
        for (set, t) in sets {
            let block = [
                u64::from(*set) | u64::from(mask_of(t)) << 32,
                t.set_enabled,
                t.set_running,
            ];
            for w in Iterator::chain(block.iter(), t.counts.iter().filter(|c| **c != 0)) {
                self.words.push(*w, GFP_ATOMIC)?;
            }
        }
        // INVARIANT: one more row, its head and its blocks.
        self.rows += 1;
        Ok(())
    }

    /// Every row, in the order they were added.
    pub(super) fn iter(&self) -> impl Iterator<Item = Ended<'_>> + '_ {
        let mut at = 0;
        (0..self.rows).map_while(move |_| {
            let head = self.words.get(at..at + HEAD)?;
            let blocks = (head[2] >> 32) as usize;
            let start = at + HEAD;
            let mut end = start;
            for _ in 0..blocks {
                let mask = (self.words.get(end)? >> 32) as u32;
                end += BLOCK_HEAD + mask.count_ones() as usize;
            }
            let row = Ended {
                seq: head[0],
                tid: head[1] as u32,
                pid: (head[1] >> 32) as u32,
                exited: head[2] & EXITED != 0,
                revoked: head[2] & REVOKED != 0,
                enabled: head[3],
                running: head[4],
                blocks: self.words.get(start..end)?,
            };
            at = end;
            Some(row)
        })
    }
}

/// Folds every heir whose monitoring ended (its thread exited, or an exec
/// revoked it) into the family's totals and its row, if there is room for
/// one ([`MAX_ENDED_ROWS`]), and lets its context go (freed once its
/// attachment is reaped). Heirs still monitored stay, in their order.
pub(super) fn fold_ended(m: &mut Members) {
    if !m.heirs.iter().any(|h| h.ctx.monitoring_ended()) {
        return;
    }
    let Ok(mut kept) = KVec::with_capacity(m.heirs.len(), GFP_KERNEL) else {
        return;
    };
    let sets = m.template.as_ref().map_or(1, Template::sets_mask);
    for h in core::mem::replace(&mut m.heirs, KVec::new()) {
        // Only an ended heir is read (a live one may be on another CPU).
        let ended = match h.ctx.monitoring_ended() {
            true => ended_tallies(&h.ctx, m.template.as_ref(), sets),
            false => None,
        };
        match ended {
            Some((s, tallies)) => {
                for (set, t) in tallies.iter() {
                    if let Some(total) = m.ended_total.get_mut(usize::from(*set)) {
                        total.add(t);
                    }
                }
                let rowed = m.ended.len() < MAX_ENDED_ROWS
                    && m.ended.push(h.seq, (h.tid, h.pid), &s, &tallies).is_ok();
                if !rowed {
                    m.spilled_threads += 1;
                }
                // `h` goes: its context is freed with its last reference.
            }
            // Within the capacity: no allocation, no failure.
            None => {
                let _ = kept.push(h, GFP_ATOMIC);
            }
        }
    }
    m.heirs = kept;
}

/// An ended heir's last snapshot (set 0's) and what it counted in each set
/// of `sets`; `None` if it cannot be read or did not end.
fn ended_tallies(
    ctx: &Context,
    template: Option<&Template>,
    sets: u16,
) -> Option<(Snapshot, KVec<(u16, Tally)>)> {
    let mut tallies = KVec::with_capacity(sets.count_ones() as usize, GFP_KERNEL).ok()?;
    let mut first = None;
    for set in (0..PFM_MAX_SETS).filter(|i| sets & (1 << i) != 0) {
        let s = ctx.snapshot(set).ok()?;
        if !(s.exited || s.revoked) {
            return None;
        }
        let base = template.map_or([0; PFM_MAX_PMDS], |t| t.base(set));
        // Within the capacity: no allocation, no failure.
        tallies
            .push((set as u16, tally_from(&s, &base)), GFP_ATOMIC)
            .ok()?;
        first.get_or_insert(s);
    }
    Some((first?, tallies))
}
