// SPDX-License-Identifier: GPL-2.0

//! Defining a context's sets while it is UNLOADED: creating and deleting
//! them from user descriptions (`PFM_IOC_CREATE_SETS`, `DELETE_SETS`), and
//! which registers each set's image uses. The switching machine that runs
//! them once loaded is the parent, `pfm_sets.rs`.

use super::*;

impl SetTable {
    /// The set `reg_set` names, if it exists (else `PFM_REG_RETFL_NOSET`).
    pub fn set_index(&self, reg_set: u16) -> Result<usize, SetError> {
        let i = reg_set as usize;
        if i < PFM_MAX_SETS && self.exists & (1 << i) != 0 {
            Ok(i)
        } else {
            Err(SetError::NoSet)
        }
    }

    /// Checks one description; returns the effective timeout.
    pub fn check(&self, d: &SetDesc) -> Result<u64, SetError> {
        let time = d.flags & PFM_SETFL_TIME_SWITCH != 0;
        let ovfl = d.flags & PFM_SETFL_OVFL_SWITCH != 0;
        let bad = d.id as usize >= PFM_MAX_SETS
            || d.flags & !PFM_SETFL_MASK != 0
            || d.reserved != 0
            || (time && ovfl)
            || time != (d.timeout != 0)
            || ovfl != (d.ovfl_switch_cnt != 0)
            || ovfl != (d.switch_pmds != 0)
            || d.switch_pmds & !self.impl_pmds != 0;
        if bad {
            return Err(SetError::Invalid);
        }
        Ok(if time {
            d.timeout.max(PFM_SET_MIN_TIMEOUT_NS)
        } else {
            0
        })
    }

    /// `PFM_IOC_CREATE_SETS`: creates the sets, or changes the flags of
    /// those that exist (set 0's included), all or none: on an error,
    /// nothing changed and the index of the first bad element says which.
    /// On success each `timeout` is the effective one.
    pub fn create(&mut self, descs: &mut [SetDesc]) -> Result<(), (usize, SetError)> {
        if self.loaded {
            return Err((0, SetError::Loaded));
        }
        for (i, d) in descs.iter().enumerate() {
            self.check(d).map_err(|e| (i, e))?;
        }
        for d in descs.iter_mut() {
            // Checked above; a second check cannot fail.
            let timeout = self.check(d).unwrap_or(0);
            d.timeout = timeout;
            let s = &mut self.sets[d.id as usize];
            if self.exists & (1 << d.id) == 0 {
                *s = Set::default();
                self.exists |= 1 << d.id;
            }
            s.desc = *d;
            // The set where the last monitoring stopped shows its time
            // left until the next LOAD: that of its new timeout now.
            if d.id as usize == self.active as usize {
                self.left = timeout;
            }
        }
        Ok(())
    }

    /// `PFM_IOC_DELETE_SETS`: deletes the sets, all or none. Their register
    /// images go with them: the caller frees those of the returned sets.
    pub fn delete(&mut self, ids: &[u16]) -> Result<u16, (usize, SetError)> {
        if self.loaded {
            return Err((0, SetError::Loaded));
        }
        let mut gone = 0u16;
        for (i, &id) in ids.iter().enumerate() {
            if id == 0 || id as usize >= PFM_MAX_SETS {
                return Err((i, SetError::Invalid));
            }
            if self.exists & (1 << id) == 0 {
                return Err((i, SetError::NoSet));
            }
            gone |= 1 << id;
        }
        self.exists &= !gone;
        self.at_load &= !gone;
        for i in 0..PFM_MAX_SETS {
            if gone & (1 << i) != 0 {
                self.sets[i] = Set::default();
            }
        }
        if gone & (1 << self.active) != 0 {
            self.active = 0;
        }
        Ok(gone)
    }

    /// A PMC (`pmd` false) or PMD write of `reg` in set `reg_set` (the
    /// caller checked `reg` against the model): returns the set's index.
    pub fn use_reg(&mut self, reg_set: u16, pmd: bool, reg: usize) -> Result<usize, SetError> {
        let i = self.set_index(reg_set)?;
        if reg >= 32 {
            return Err(SetError::Invalid);
        }
        let s = &mut self.sets[i];
        let used = if pmd {
            &mut s.used_pmds
        } else {
            &mut s.used_pmcs
        };
        *used |= 1 << reg;
        Ok(i)
    }

    /// The PMDs written in set `i` (0 if it does not exist).
    pub fn used_pmds(&self, i: usize) -> u64 {
        self.sets.get(i).map_or(0, |s| s.used_pmds)
    }
}
