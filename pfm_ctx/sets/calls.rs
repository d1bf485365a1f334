// SPDX-License-Identifier: GPL-2.0

//! The event-set calls of a context: `CREATE_SETS`, `DELETE_SETS`,
//! `GETINFO_SETS`, and `READ_VALUES` of one set. Each reads its array from
//! user memory once, allocates what it may need before taking the lock,
//! and is all or nothing.

use kernel::prelude::*;
use kernel::uaccess::UserSlice;

use super::{set_err, sets_of, sets_of_mut, CtxSets};
use crate::abi;
use crate::globals;
use crate::pfm_ctx::parts::spare_parts;
use crate::pfm_ctx::{state_err, Context, CtxInner};
use crate::pfm_sets::{SetDesc, SetError, SetTable, SwitchCause, PFM_MAX_SETS};
use crate::pfm_state::Op;
use crate::pfm_x86::counters::Counters;

/// GETINFO of set 0 of a context without a table: its one set, active
/// all along, its times the context's.
fn one_set_info(running: u64) -> Result<crate::pfm_sets::SetInfo, SetError> {
    let mut t = SetTable::new(0);
    t.load(0)?;
    t.info(0, running)
}

/// `struct pfm_setdesc` as the table takes it.
fn desc_of(d: &abi::PfmSetdesc) -> SetDesc {
    SetDesc {
        id: d.set_id,
        flags: d.set_flags,
        ovfl_switch_cnt: d.set_ovfl_switch_cnt,
        timeout: d.set_timeout,
        switch_pmds: d.set_switch_pmds,
        reserved: d.reserved,
    }
}

/// Reads the `count` elements of a sets call into a vector.
fn read_array<T: kernel::types::FromBytes + Default + Copy>(
    arg: &abi::PfmSetsArg,
) -> Result<(KVec<T>, kernel::uaccess::UserSliceWriter)> {
    let n = arg.count as usize;
    if n == 0 || arg.reserved != [0; 2] {
        return Err(EINVAL);
    }
    if n > PFM_MAX_SETS {
        return Err(E2BIG);
    }
    let len = n * core::mem::size_of::<T>();
    let (mut reader, writer) = UserSlice::new(arg.sets as usize, len).reader_writer();
    let mut v = KVec::with_capacity(n, GFP_KERNEL)?;
    for _ in 0..n {
        v.push(reader.read::<T>()?, GFP_KERNEL)?;
    }
    Ok((v, writer))
}

impl Context {
    /// `PFM_IOC_CREATE_SETS`: creates the sets described (or changes the
    /// flags of those that exist), all or none; each gets an empty image.
    pub(crate) fn create_sets(&self, arg: &mut abi::PfmSetsArg) -> Result {
        let (mut descs, mut writer) = read_array::<abi::PfmSetdesc>(arg)?;
        // The array is written back (the effective timeouts): a buffer
        // that cannot be written fails now, before anything is applied.
        for d in descs.iter() {
            writer.write(d)?;
        }
        // What may sleep first: the table, and an image per new set.
        let (has_parts, has_table) = {
            let inner = self.inner.lock();
            (inner.has_parts(), inner.has_table())
        };
        let mut spare = spare_parts(has_parts)?;
        let mut table = match has_table {
            true => None,
            false => Some(CtxSets::new_boxed()?),
        };
        let mut fresh: [Option<KBox<Counters>>; PFM_MAX_SETS] = [const { None }; PFM_MAX_SETS];
        for slot in fresh.iter_mut().take(descs.len()) {
            *slot = Some(KBox::new(
                Counters::new(&globals().pmu)?,
                GFP_KERNEL_ACCOUNT,
            )?);
        }
        let mut table_descs: KVec<SetDesc> = KVec::with_capacity(descs.len(), GFP_KERNEL)?;
        for d in descs.iter() {
            table_descs.push(desc_of(d), GFP_KERNEL)?;
        }
        {
            let mut inner = self.inner.lock();
            inner.life.check(Op::SetFlags).map_err(state_err)?;
            let pmcs = inner.counters.written_pmcs();
            let pmds = u64::from(inner.used_pmds);
            let parts = inner.parts_for_adding(&mut spare)?;
            let created = match (parts.sets.as_deref_mut(), table.as_deref_mut()) {
                (Some(s), _) => s.create(&mut table_descs, &mut fresh),
                // The first sets: the table goes in only if they are
                // valid; set 0 holds what was written so far.
                (None, Some(s)) => {
                    s.seed_set0(pmcs, pmds);
                    s.create(&mut table_descs, &mut fresh)
                }
                // A table installed since the look, by another call.
                (None, None) => return Err(EAGAIN),
            };
            if let Err((i, e)) = created {
                arg.done = i as u32;
                return Err(set_err(e));
            }
            if parts.sets.is_none() {
                parts.sets = table.take();
            }
        }
        // What was not installed is freed after the raw lock.
        drop((spare, table));
        for (out, d) in descs.iter_mut().zip(table_descs.iter()) {
            out.set_timeout = d.timeout;
        }
        let mut again =
            UserSlice::new(arg.sets as usize, core::mem::size_of_val(&descs[..])).writer();
        for d in descs.iter() {
            again.write(d)?;
        }
        arg.done = arg.count;
        Ok(())
    }

    /// `PFM_IOC_DELETE_SETS`: deletes the sets, all or none, with their
    /// images.
    pub(crate) fn delete_sets(&self, arg: &mut abi::PfmSetsArg) -> Result {
        let (ids, _) = read_array::<u16>(arg)?;
        let mut gone_images: KVec<KBox<Counters>> = KVec::with_capacity(ids.len(), GFP_KERNEL)?;
        let mut inner = self.inner.lock();
        inner.life.check(Op::SetFlags).map_err(state_err)?;
        let Some(s) = sets_of_mut(&mut inner.parts) else {
            // Only set 0 exists, which cannot go.
            arg.done = 0;
            return Err(EINVAL);
        };
        let gone = match s.table.delete(&ids) {
            Ok(g) => g,
            Err((i, e)) => {
                arg.done = i as u32;
                return Err(set_err(e));
            }
        };
        // The resident set may go (it is where the last monitoring
        // stopped): set 0 becomes resident first.
        if gone & (1 << s.resident) != 0 {
            inner.make_resident(0);
        }
        if let Some(s) = sets_of_mut(&mut inner.parts) {
            for (i, slot) in s.images.iter_mut().enumerate() {
                if gone & (1 << i) != 0 {
                    if let Some(img) = slot.take() {
                        // Capacity reserved above: cannot fail.
                        let _ = gone_images.push(img, GFP_ATOMIC);
                    }
                }
            }
        }
        drop(inner);
        drop(gone_images);
        arg.done = arg.count;
        Ok(())
    }

    /// `PFM_IOC_GETINFO_SETS`: each set's description and bookkeeping, the
    /// running time folded to now.
    pub(crate) fn sets_info(&self, arg: &mut abi::PfmSetsArg) -> Result {
        let (mut infos, mut writer) = read_array::<abi::PfmSetinfo>(arg)?;
        let mut bad = None;
        self.with_live(|inner, _| -> Result {
            inner.transition(Op::Read)?;
            let running = inner.time_running;
            for (i, out) in infos.iter_mut().enumerate() {
                let info = match sets_of(&inner.parts) {
                    Some(s) => s.table.info(out.set_id, running),
                    None if out.set_id == 0 => one_set_info(running),
                    None => Err(SetError::NoSet),
                };
                let Ok(info) = info else {
                    bad = Some(i);
                    return Err(EINVAL);
                };
                *out = abi::PfmSetinfo {
                    set_id: out.set_id,
                    set_flags: info.desc.flags,
                    set_ovfl_switch_cnt: info.desc.ovfl_switch_cnt,
                    set_timeout: info.desc.timeout,
                    set_switch_pmds: info.desc.switch_pmds,
                    set_runs: info.runs,
                    set_timeout_left: info.time_left,
                    set_time_enabled: info.time_enabled,
                    set_time_running: info.time_running,
                    set_ovfl_pmds: info.last_switch_pmds,
                    set_last_cause: match info.last_cause {
                        SwitchCause::None => abi::PFM_SET_CAUSE_NONE,
                        SwitchCause::Time => abi::PFM_SET_CAUSE_TIME,
                        SwitchCause::Overflow => abi::PFM_SET_CAUSE_OVFL,
                    },
                    set_used_pmcs: info.used_pmcs,
                    set_used_pmds: info.used_pmds,
                    ..abi::PfmSetinfo::default()
                };
            }
            Ok(())
        })
        .inspect_err(|_| {
            if let Some(i) = bad {
                arg.done = i as u32;
            }
        })?;
        for info in infos.iter() {
            writer.write(info)?;
        }
        arg.done = arg.count;
        Ok(())
    }

    /// `PFM_IOC_READ_VALUES` with `PFM_VALFL_SET`: set `set`'s values and
    /// its enabled and running times; a whole program's are every thread's
    /// added (each thread's share of the set's time with its counts).
    pub(in crate::pfm_ctx) fn set_values(
        &self,
        set: u16,
        pmd_mask: u64,
        values: &mut [core::mem::MaybeUninit<u64>; abi::PFM_MAX_PMDS],
    ) -> Result<(usize, [u64; 2])> {
        let mut n = 0;
        // A whole program's other threads, read first (outside this
        // context's lock).
        let heirs = self.family().map(|f| f.heirs_tally(set.into()));
        let mut times = self.with_live(|inner, _| -> Result<[u64; 2]> {
            inner.transition(Op::Read)?;
            let times = inner.set_times(set)?;
            let image = inner.image(set as usize).ok_or(EINVAL)?;
            n = crate::pfm_ctx::regs::collect_values(image.pmds(), pmd_mask, values);
            Ok(times)
        })?;
        if let Some(t) = heirs {
            crate::pfm_ctx::regs::add_counts(values, n, pmd_mask, &t.counts);
            times[0] = times[0].wrapping_add(t.set_enabled);
            times[1] = times[1].wrapping_add(t.set_running);
        }
        Ok((n, times))
    }
}

impl CtxInner {
    /// Set `set`'s enabled and running times (`PFM_VALFL_SET`'s): of the
    /// context's running time, what the set was loaded for and what it
    /// was active for. `EINVAL` if there is no such set.
    pub(in crate::pfm_ctx) fn set_times(&self, set: u16) -> Result<[u64; 2]> {
        let running = self.time_running;
        let info = match sets_of(&self.parts) {
            Some(s) => s.table.info(set, running),
            None if set == 0 => one_set_info(running),
            None => Err(SetError::NoSet),
        }
        .map_err(set_err)?;
        Ok([info.time_enabled, info.time_running])
    }
}
