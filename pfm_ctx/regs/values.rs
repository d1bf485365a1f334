// SPDX-License-Identifier: GPL-2.0

//! `READ_VALUES`: the values of a context's PMDs and its times, without an
//! element array to judge; the quick, unfolded read of a soft context
//! (`quick_values`), and the counting helpers the set calls share.

use kernel::prelude::*;
use kernel::uaccess::UserSlice;

use super::super::{state_err, Context, CtxInner};
use crate::abi;
use crate::globals;
use crate::pfm_counter::PmdState;
use crate::pfm_state::Op;
use crate::rust as glue;

impl Context {
    /// `PFM_IOC_READ_VALUES`: the values of the PMDs in `pmd_mask`, in PMD
    /// order, into the user array `values`; returns `[time_enabled,
    /// time_running]`.
    pub(crate) fn read_values(&self, arg: &abi::PfmValues) -> Result<[u64; 2]> {
        let implemented = globals().pmu.impl_mask();
        // Not zeroed: only the first `n` are written and copied out.
        let mut values = [core::mem::MaybeUninit::<u64>::uninit(); abi::PFM_MAX_PMDS];
        // The set fields as one word: set, vflags and pad are its 2 + 2 + 4
        // bytes. The common read tests everything at once, branch-free;
        // the rest (errors, a set's read) is out of line.
        let set_word = u64::from(arg.set) | u64::from(arg.vflags) << 16 | u64::from(arg.pad) << 32;
        let plain = (arg.pmd_mask != 0)
            & (arg.pmd_mask & !implemented == 0)
            & (set_word | arg.reserved == 0);
        let (n, times) = if !plain {
            self.unusual_values(
                set_word,
                arg.reserved,
                arg.pmd_mask,
                implemented,
                &mut values,
            )?
        } else {
            let quick = {
                let mut inner = self.inner.lock();
                inner.life.check(Op::Read).map_err(state_err)?;
                inner.quick_values(arg.pmd_mask, &mut values)
            };
            match quick {
                Some(r) => r,
                None => self.fold_values(arg.pmd_mask, &mut values)?,
            }
        };
        // `n` is at most 32: `n * 8` without an overflow check.
        let mut out = UserSlice::new(arg.values as usize, n << 3).writer();
        if n == 1 {
            // One value, the common read: the copy inline, as for a `u64`.
            // SAFETY: Written above (`n` is 1).
            out.write(&unsafe { values[0].assume_init() })?;
        } else {
            // SAFETY: The first `n` elements were written above; `u64`s are
            // plain bytes: their memory, viewed as bytes.
            let bytes =
                unsafe { core::slice::from_raw_parts(values.as_ptr().cast::<u8>(), n << 3) };
            out.write_slice(bytes)?;
        }
        Ok(times)
    }

    /// [`Context::read_values`] of anything but the common read: a bad
    /// mask or reserved field (`EINVAL`), or `PFM_VALFL_SET`, the values
    /// and times of the set `set_word` names (`set`, `vflags` and `pad`
    /// in one word); how many.
    #[cold]
    #[inline(never)]
    fn unusual_values(
        &self,
        set_word: u64,
        reserved: u64,
        pmd_mask: u64,
        implemented: u64,
        values: &mut [core::mem::MaybeUninit<u64>; abi::PFM_MAX_PMDS],
    ) -> Result<(usize, [u64; 2])> {
        let (set, vflags, pad) = (set_word as u16, (set_word >> 16) as u16, set_word >> 32);
        if pmd_mask == 0
            || pmd_mask & !implemented != 0
            || vflags != abi::PFM_VALFL_SET
            || pad != 0
            || reserved != 0
        {
            return Err(EINVAL);
        }
        self.set_values(set, pmd_mask, values)
    }

    /// [`Context::read_values`] where only a fold will do: the values in
    /// `pmd_mask` into `values`; how many, and the times.
    #[inline(never)]
    fn fold_values(
        &self,
        pmd_mask: u64,
        values: &mut [core::mem::MaybeUninit<u64>; abi::PFM_MAX_PMDS],
    ) -> Result<(usize, [u64; 2])> {
        let mut n = 0;
        // A whole program's other threads (see `read_pmds`).
        let heirs = self.family().map(|f| f.heirs_tally(0));
        let mut times = self.with_live(|inner, now| -> Result<[u64; 2]> {
            inner.transition(Op::Read)?;
            // Set 0's values (the active set's, unless the context has
            // several).
            let image = inner.image(0).ok_or(EINVAL)?;
            n = collect_values(image.pmds(), pmd_mask, values);
            Ok([inner.time_enabled(now), inner.time_running])
        })?;
        if let Some(t) = heirs {
            add_counts(values, n, pmd_mask, &t.counts);
            times[0] = times[0].wrapping_add(t.enabled);
            times[1] = times[1].wrapping_add(t.running);
        }
        Ok((n, times))
    }
}

/// Adds `counts` (by PMD number) to the first `n` of `values`, which
/// [`collect_values`] wrote for the PMDs of `pmd_mask`.
pub(in crate::pfm_ctx) fn add_counts(
    values: &mut [core::mem::MaybeUninit<u64>; abi::PFM_MAX_PMDS],
    n: usize,
    pmd_mask: u64,
    counts: &[u64; abi::PFM_MAX_PMDS],
) {
    let mut m = pmd_mask;
    for slot in values.iter_mut().take(n) {
        let i = m.trailing_zeros() as usize;
        m &= m.wrapping_sub(1);
        let count = counts.get(i).copied().unwrap_or(0);
        // SAFETY: The first `n` were written by `collect_values`.
        let v = unsafe { slot.assume_init() };
        slot.write(v.wrapping_add(count));
    }
}

/// The values of the PMDs in `pmd_mask` into `out`, in PMD order; how
/// many. Only the requested PMDs are visited (the mask names implemented
/// ones only, checked by `read_values`).
#[inline(always)]
pub(in crate::pfm_ctx) fn collect_values(
    pmds: &[PmdState],
    pmd_mask: u64,
    out: &mut [core::mem::MaybeUninit<u64>; abi::PFM_MAX_PMDS],
) -> usize {
    let mut n = 0;
    let mut m = pmd_mask;
    while m != 0 {
        let i = m.trailing_zeros() as usize;
        m &= m - 1;
        if let (Some(p), Some(slot)) = (pmds.get(i), out.get_mut(n)) {
            slot.write(p.value);
            n += 1;
        }
    }
    n
}

impl CtxInner {
    /// `READ_VALUES`'s fold, inline where it is only task-clock's: for a
    /// soft context without a mapped page whose thread is current here or
    /// on no CPU, the soft model's values move only with task-clock while
    /// the thread runs, so the fold is the unfolded runtime added to the
    /// task-clock PMDs and to `time_running`, and `run_base` moved to now,
    /// exactly as `fold_to` does when no PMD crosses 2^64. Then the values
    /// in `pmd_mask` into `out` and the times; how many.
    ///
    /// `None`, with nothing changed, where the general fold must run: a
    /// hardware model (its counters are on a PMU), a thread running on
    /// another CPU, a task-clock PMD that would cross 2^64 (the fold
    /// raises the overflow and applies its resets), a mapped page (the
    /// fold updates it, so that the page's readers extend from the value
    /// this read returned), or event sets (set 0 may not be the active
    /// one, and a fold charges the sets).
    ///
    /// It stores what it read, as the fold does, and reads no further than
    /// the scheduler accounts (`current_runtime_and_clock`: a wake-up that
    /// preempts the thread may end its slice early), so the switch-out's
    /// slice end is not below it, and no later read goes below this one.
    fn quick_values(
        &mut self,
        pmd_mask: u64,
        out: &mut [core::mem::MaybeUninit<u64>; abi::PFM_MAX_PMDS],
    ) -> Option<(usize, [u64; 2])> {
        // One test for every part (the page and the sets take the fold).
        if self.counters.read_only_where_running() || self.has_parts() {
            return None;
        }
        let now = match self.on_cpu {
            None => glue::now_ns(),
            // The thread is current here (see `fold_running`).
            Some(c) if c == glue::this_cpu() => {
                let (runtime, now) = glue::current_runtime_and_clock();
                let ran = runtime.saturating_sub(self.run_base);
                if self.counting() {
                    if !self.counters.advance_clock_unless_overflow(ran) {
                        return None;
                    }
                    // ns: no wrap for 584 years.
                    self.time_running = self.time_running.wrapping_add(ran);
                }
                // Never back (see `fold_to`).
                self.run_base = self.run_base.max(runtime);
                now
            }
            Some(_) => return None,
        };
        let n = collect_values(self.counters.pmds(), pmd_mask, out);
        Some((n, [self.time_enabled(now), self.time_running]))
    }
}
