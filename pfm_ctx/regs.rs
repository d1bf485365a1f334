// SPDX-License-Identifier: GPL-2.0

//! The register array calls (`WRITE_PMCS`, `WRITE_PMDS`, `READ_PMDS`) and
//! `READ_VALUES`, as perfmon2 had them: every element read from user
//! memory once and judged; one bad element fails the whole call.

use kernel::prelude::*;
use kernel::uaccess::UserSlice;

use super::family::Tally;
use super::parts::spare_parts;
use super::{Context, CtxInner};
use crate::abi;
use crate::globals;
use crate::pfm_msgq::Ring;
use crate::pfm_random::{self, PeriodRandom};
use crate::pfm_state::Op;
use crate::rust as glue;

/// Whether PMD `reg` exists in the bitmap `implemented`.
fn pmd_exists(implemented: u64, reg: u16) -> bool {
    reg < 64 && implemented & (1u64 << reg) != 0
}

/// Whether a PMD write's randomisation fields agree with its flags: with
/// `PFM_REGFL_RANDOM`, a mask of 2^k - 1 no larger than either reset value
/// (a randomised period stays within 2^64); without it, no mask and no
/// seed.
fn random_ok(p: &abi::PfmPmd) -> bool {
    if p.reg_flags & abi::PFM_REGFL_RANDOM == 0 {
        return p.reg_random_mask == 0 && p.reg_random_seed == 0;
    }
    pfm_random::mask_ok(p.reg_random_mask)
        && p.reg_random_mask <= p.reg_short_reset
        && p.reg_random_mask <= p.reg_long_reset
}

/// What a `WRITE_PMDS` prepares before the lock.
struct PmdsPrep {
    /// The message ring, for the first PMD that asks for notification.
    ring: Option<KBox<Ring>>,
    /// One draw of the kernel's entropy, for the randomised PMDs whose
    /// seed is 0 (`pfm_random::seed_from_entropy`), 0 if none.
    entropy: u64,
}

/// An element of a register array call.
trait RegElem: kernel::types::FromBytes + kernel::types::AsBytes + Default + Copy {
    /// Replaces the `PFM_REG_RETFL_*` output bits of `reg_flags`.
    fn set_retfl(&mut self, retfl: u32);
    /// The event set the element names.
    fn reg_set(&self) -> u16;
}

impl RegElem for abi::PfmPmc {
    fn set_retfl(&mut self, retfl: u32) {
        self.reg_flags = (self.reg_flags & !abi::PFM_REG_RETFL_MASK) | retfl;
    }
    fn reg_set(&self) -> u16 {
        self.reg_set
    }
}

impl RegElem for abi::PfmPmd {
    fn set_retfl(&mut self, retfl: u32) {
        self.reg_flags = (self.reg_flags & !abi::PFM_REG_RETFL_MASK) | retfl;
    }
    fn reg_set(&self) -> u16 {
        self.reg_set
    }
}

/// Elements a call keeps on the stack; longer arrays are copied into a
/// heap buffer (the kernel stack is no place for the 4 KiB of a full call).
const ON_STACK: usize = 8;

/// `T`s as bytes.
fn as_bytes<T: RegElem>(e: &[T]) -> &[u8] {
    // SAFETY: `T: AsBytes`: no padding, every byte initialised.
    unsafe { core::slice::from_raw_parts(e.as_ptr().cast::<u8>(), core::mem::size_of_val(e)) }
}

impl Context {
    /// The sets that exist now, for the elements' first check (a call
    /// applies only if each element's set still exists under the lock).
    fn sets_now(&self) -> u16 {
        self.inner.lock().sets_mask()
    }

    /// The shape of the three register array calls: `check` gives each
    /// element its `PFM_REG_RETFL_*` verdict; one bad element fails the
    /// whole call with `EINVAL`, every element's `reg_flags` telling its
    /// verdict and `done` the first bad index; otherwise `apply` runs on
    /// the live context.
    ///
    /// `writes_state`: the call changes the context, so the array is written
    /// back (`reg_flags` output bits cleared) before `apply`: a buffer that
    /// cannot be written fails with `EFAULT` before anything is applied.
    fn reg_array_call<T: RegElem + Send, P: Send, R: Send>(
        &self,
        arg: &mut abi::PfmRegsArg,
        regs: UserSlice,
        writes_state: bool,
        check: impl Fn(&T, u16) -> u32,
        prepare: impl FnOnce(&[T]) -> Result<P>,
        apply: impl FnMut(&mut CtxInner, u64, &mut [T], &mut P) -> Result<R> + Send,
    ) -> Result<R> {
        let n = arg.count as usize;
        let (mut reader, mut writer) = regs.reader_writer();
        // Not initialised first: one copy_from_user fills what is used (a
        // memset per call would cost more than the call's own work).
        let mut stack = [const { core::mem::MaybeUninit::<T>::uninit() }; ON_STACK];
        let mut heap: Option<KVec<T>> = None;
        let slots: &mut [core::mem::MaybeUninit<T>] = if n <= ON_STACK {
            &mut stack[..n]
        } else {
            let v = heap.insert(KVec::with_capacity(n, GFP_KERNEL)?);
            &mut v.spare_capacity_mut()[..n]
        };
        // SAFETY: `slots` is `n` elements of `T`'s storage, viewed as bytes.
        let raw = unsafe {
            core::slice::from_raw_parts_mut(
                slots.as_mut_ptr().cast::<core::mem::MaybeUninit<u8>>(),
                core::mem::size_of_val(slots),
            )
        };
        reader.read_raw(raw)?;
        // SAFETY: `read_raw` wrote all `n` elements; `T: FromBytes` accepts
        // any bytes.
        let elems: &mut [T] =
            unsafe { core::slice::from_raw_parts_mut(slots.as_mut_ptr().cast::<T>(), n) };
        self.judge_and_apply(arg, elems, &mut writer, writes_state, check, prepare, apply)
    }

    /// The rest of [`Context::reg_array_call`], on elements read: judged,
    /// then `prepare`d outside the lock (what may sleep: allocations),
    /// then applied.
    fn judge_and_apply<T: RegElem + Send, P: Send, R: Send>(
        &self,
        arg: &mut abi::PfmRegsArg,
        elems: &mut [T],
        writer: &mut kernel::uaccess::UserSliceWriter,
        writes_state: bool,
        check: impl Fn(&T, u16) -> u32,
        prepare: impl FnOnce(&[T]) -> Result<P>,
        mut apply: impl FnMut(&mut CtxInner, u64, &mut [T], &mut P) -> Result<R> + Send,
    ) -> Result<R> {
        // The sets that exist, asked of the context only if an element
        // names another than set 0, which every context has.
        let sets = match elems.iter().any(|e| e.reg_set() != 0) {
            true => self.sets_now(),
            false => 1,
        };
        if let Some(bad) = elems.iter().position(|e| check(e, sets) != 0) {
            arg.done = bad as u32;
            for e in elems.iter_mut() {
                let v = check(e, sets);
                e.set_retfl(v);
            }
            writer.write_slice(as_bytes(elems))?;
            return Err(EINVAL);
        }
        for e in elems.iter_mut() {
            e.set_retfl(0);
        }
        if writes_state {
            writer.write_slice(as_bytes(elems))?;
        }
        let mut prepared = prepare(elems)?;
        let out = self.with_live(|inner, now| apply(inner, now, &mut *elems, &mut prepared))?;
        if !writes_state {
            writer.write_slice(as_bytes(elems))?;
        }
        arg.done = elems.len() as u32;
        Ok(out)
    }

    /// `PFM_IOC_WRITE_PMCS`.
    pub(crate) fn write_pmcs(&self, arg: &mut abi::PfmRegsArg, regs: UserSlice) -> Result {
        let pmu = &globals().pmu;
        let policy = crate::pfm_x86::Pmu::caller_policy();
        let check = |p: &abi::PfmPmc, sets: u16| {
            if !set_in(sets, p.reg_set) {
                abi::PFM_REG_RETFL_NOSET
            } else if p.reg_flags & !abi::PFM_REG_RETFL_MASK != 0 || p.reserved != [0; 2] {
                abi::PFM_REG_RETFL_EINVAL
            } else {
                pmu.validate_pmc(p.reg_num as usize, p.reg_value, policy)
                    .err()
                    .unwrap_or(0)
            }
        };
        let selects_faults =
            |pmcs: &[abi::PfmPmc]| pmu.pmcs_count_faults(pmcs.iter().map(|p| p.reg_value));
        // A fault event's base is a part (`faults.rs`): allocated here,
        // outside the lock, if the context has no parts yet.
        // (whether the PMCs select one, the parts to add if needed)
        let prepare = |pmcs: &[abi::PfmPmc]| match selects_faults(pmcs) {
            true => {
                let has = self.inner.lock().has_parts();
                spare_parts(has).map(|spare| (true, spare))
            }
            false => Ok((false, None)),
        };
        let apply = |inner: &mut CtxInner, _, pmcs: &mut [abi::PfmPmc], faults: &mut (bool, _)| {
            inner.transition(Op::WriteRegs)?;
            if pmcs.iter().any(|p| !inner.set_exists(p.reg_set)) {
                // A set deleted since the check.
                return Err(EINVAL);
            }
            if faults.0 {
                inner.parts_for_adding(&mut faults.1)?;
                inner.start_fault_counting();
            }
            // Checked above: every value is valid.
            let value = |p: &abi::PfmPmc| {
                let reg = p.reg_num as usize;
                pmu.validate_pmc(reg, p.reg_value, policy)
                    .ok()
                    .map(|v| (reg, v))
            };
            if !inner.has_table() {
                inner
                    .counters
                    .write_pmcs(pmu, pmcs.iter().filter_map(value));
                return Ok(());
            }
            for p in pmcs.iter() {
                inner.note_reg(p.reg_set, false, p.reg_num.into());
                if let Some(image) = inner.image_mut(p.reg_set.into()) {
                    image.write_pmcs(pmu, value(p).into_iter());
                }
            }
            Ok(())
        };
        self.reg_array_call(arg, regs, true, check, prepare, apply)
    }

    /// `PFM_IOC_WRITE_PMDS`.
    pub(crate) fn write_pmds(&self, arg: &mut abi::PfmRegsArg, regs: UserSlice) -> Result {
        let implemented = globals().pmu.impl_mask();
        let check = |p: &abi::PfmPmd, sets: u16| {
            if !set_in(sets, p.reg_set) {
                abi::PFM_REG_RETFL_NOSET
            } else if !pmd_exists(implemented, p.reg_num) {
                abi::PFM_REG_RETFL_NOTAVAIL
            } else if p.reg_flags & !(abi::PFM_REGFL_PMD_MASK | abi::PFM_REG_RETFL_MASK) != 0
                || !random_ok(p)
                || p.reg_reset_pmds & !implemented != 0
            {
                abi::PFM_REG_RETFL_EINVAL
            } else {
                0
            }
        };
        // The first PMD that asks for notification brings the message
        // ring, allocated before the lock is taken; a seed left to the
        // kernel, its entropy (whose per-CPU batch takes a lock that may
        // sleep on PREEMPT_RT: not under the context's raw one).
        let prepare = |pmds: &[abi::PfmPmd]| -> Result<PmdsPrep> {
            let entropy = match pmds
                .iter()
                .any(|p| p.reg_flags & abi::PFM_REGFL_RANDOM != 0 && p.reg_random_seed == 0)
            {
                true => glue::random_u64(),
                false => 0,
            };
            let asks = pmds
                .iter()
                .any(|p| p.reg_flags & abi::PFM_REGFL_OVFL_NOTIFY != 0);
            let ring = match asks && !self.inner.lock().msgs.has_ring() {
                true => Some(KBox::new(Ring::new(), GFP_KERNEL_ACCOUNT)?),
                false => None,
            };
            Ok(PmdsPrep { ring, entropy })
        };
        let apply = |inner: &mut CtxInner, _, pmds: &mut [abi::PfmPmd], prep: &mut PmdsPrep| {
            let PmdsPrep { ring, entropy } = prep;
            inner.transition(Op::WriteRegs)?;
            if pmds
                .iter()
                .any(|p| p.reg_flags & abi::PFM_REGFL_OVFL_NOTIFY != 0)
            {
                if let Some(r) = ring.take() {
                    // One that another WRITE_PMDS installed first wins;
                    // ours goes back to the caller, freed after the lock
                    // (a raw spinlock: no kfree under it, see
                    // `CtxInner`).
                    *ring = inner.msgs.set_ring(r);
                }
                if !inner.msgs.has_ring() {
                    // Installed and lost in between: cannot happen (the
                    // ring stays), but never count without storage.
                    return Err(ENOMEM);
                }
            }
            if pmds.iter().any(|p| !inner.set_exists(p.reg_set)) {
                // A set deleted since the check.
                return Err(EINVAL);
            }
            for (index, p) in pmds.iter().enumerate() {
                inner.note_reg(p.reg_set, true, p.reg_num.into());
                let Some(image) = inner.image_mut(p.reg_set.into()) else {
                    continue;
                };
                // Checked above: implemented, so within the table.
                let Some(pmd) = image.pmds_mut().get_mut(p.reg_num as usize) else {
                    continue;
                };
                // Checked above: a mask of 2^k - 1 with the flag.
                let random = match p.reg_flags & abi::PFM_REGFL_RANDOM {
                    0 => PeriodRandom::OFF,
                    _ => {
                        let seed = match p.reg_random_seed {
                            0 => pfm_random::seed_from_entropy(*entropy, index as u64),
                            s => s,
                        };
                        PeriodRandom::new(seed, p.reg_random_mask).unwrap_or(PeriodRandom::OFF)
                    }
                };
                pmd.program(
                    p.reg_value,
                    p.reg_short_reset,
                    p.reg_long_reset,
                    p.reg_flags & abi::PFM_REGFL_PMD_MASK,
                    // Checked above: implemented PMDs, all below 32.
                    p.reg_reset_pmds as u32,
                    random,
                );
                inner.used_pmds |= 1u32.checked_shl(p.reg_num.into()).unwrap_or(0);
            }
            Ok(())
        };
        self.reg_array_call(arg, regs, true, check, prepare, apply)
    }

    /// `PFM_IOC_READ_PMDS`.
    pub(crate) fn read_pmds(&self, arg: &mut abi::PfmRegsArg, regs: UserSlice) -> Result {
        let implemented = globals().pmu.impl_mask();
        let check = |p: &abi::PfmPmd, sets: u16| {
            if !set_in(sets, p.reg_set) {
                abi::PFM_REG_RETFL_NOSET
            } else if !pmd_exists(implemented, p.reg_num) {
                abi::PFM_REG_RETFL_NOTAVAIL
            } else {
                // Every other field is an output, ignored on input.
                0
            }
        };
        // A whole program's other threads, read first (outside this
        // context's lock) in each set the elements name, added to the
        // loaded thread's values.
        let family = self.family();
        let prepare = |pmds: &[abi::PfmPmd]| -> Result<KVec<(u16, Tally)>> {
            let mut tallies = KVec::new();
            if let Some(f) = &family {
                let sets = pmds.iter().fold(1u16, |m, p| m | 1 << (p.reg_set & 15));
                for set in (0..16u16).filter(|s| sets & (1 << s) != 0) {
                    tallies.push((set, f.heirs_tally(set.into())), GFP_KERNEL)?;
                }
            }
            Ok(tallies)
        };
        let apply = |inner: &mut CtxInner,
                     now,
                     pmds: &mut [abi::PfmPmd],
                     heirs: &mut KVec<(u16, Tally)>| {
            inner.transition(Op::Read)?;
            for p in pmds.iter_mut() {
                let Some(image) = inner.image(p.reg_set.into()) else {
                    // A set deleted since the check.
                    return Err(EINVAL);
                };
                let Some(pmd) = image.pmds().get(p.reg_num as usize) else {
                    continue;
                };
                p.reg_value = pmd.value;
                p.reg_short_reset = pmd.short_reset;
                p.reg_long_reset = pmd.long_reset;
                p.reg_last_reset_val = pmd.last_reset();
                p.reg_reset_pmds = pmd.reset_pmds.into();
                p.reg_flags = pmd.flags();
                // The state continues the sequence if written back as a
                // seed.
                let random = pmd.random();
                p.reg_random_mask = random.mask();
                p.reg_random_seed = random.state();
                if let Some((_, t)) = heirs.iter().find(|(s, _)| *s == p.reg_set) {
                    let count = t.counts.get(p.reg_num as usize).copied().unwrap_or(0);
                    p.reg_value = p.reg_value.wrapping_add(count);
                }
            }
            let (mut enabled, mut running) = (inner.time_enabled(now), inner.time_running);
            // Every tally has the threads' own times: set 0's is always there.
            if let Some((_, t)) = heirs.first() {
                enabled = enabled.wrapping_add(t.enabled);
                running = running.wrapping_add(t.running);
            }
            Ok((enabled, running))
        };
        let (enabled, running) = self.reg_array_call(arg, regs, false, check, prepare, apply)?;
        arg.time_enabled = enabled;
        arg.time_running = running;
        Ok(())
    }
}

/// Whether set `set` is in the mask `sets`.
fn set_in(sets: u16, set: u16) -> bool {
    set < 16 && sets & (1 << set) != 0
}

mod values;
pub(in crate::pfm_ctx) use values::{add_counts, collect_values};
