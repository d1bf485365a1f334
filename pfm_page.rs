// SPDX-License-Identifier: GPL-2.0

//! The mapped counter page's protocol, one copy for both sides: the
//! kernel's update under the sequence count ([`PageCells::write`]), the
//! reader's retry loop ([`PageCells::read`]) and the TSC-to-ns arithmetic
//! ([`cycles_to_ns`]).
//!
//! The page is shared memory written by one side while the other reads it.
//! Plain (non-atomic) accesses to it would be a data race, undefined
//! behaviour in Rust's memory model, which is the flaw of perf's seqlock
//! transcribed naively (perf-event crate issue #7). So both sides see the
//! page only as [`PageCells`]: every field an atomic, every data access
//! `Relaxed`, ordered by the seqlock fences of Boehm's "Can seqlocks get
//! along with programming language memory models?" (2012): the writer makes
//! the count odd, `fence(Release)`, writes, stores the even count with
//! `Release`; the reader loads the count with `Acquire`, reads,
//! `fence(Acquire)`, loads the count again. On x86 every one of these is a
//! plain `mov` (the fences only keep the compiler from reordering), so the
//! protocol costs what perf's does.
//!
//! Pure logic: `core` only (the module, the `perfmon` library and the host
//! tests compile it).

use core::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use crate::abi;

/// One PMD of the page, as atomics ([`abi::PfmPagePmd`]'s layout).
#[repr(C)]
pub struct PmdCells {
    value: AtomicU64,
    index: AtomicU32,
    flags: AtomicU32,
    offset: AtomicU64,
    reserved: AtomicU64,
}

/// The mapped counter page, as atomics ([`abi::PfmPage`]'s layout).
///
/// `time_shift` and `pmc_width` are one `u32` here: the shift its low
/// half, the width its high half (x86 is little-endian).
#[repr(C)]
pub struct PageCells {
    version: AtomicU32,
    seq: AtomicU32,
    flags: AtomicU32,
    cpu: AtomicU32,
    pmd_mask: AtomicU64,
    time_enabled: AtomicU64,
    time_running: AtomicU64,
    tsc_base: AtomicU64,
    time_mult: AtomicU32,
    shift_width: AtomicU32,
    state: AtomicU32,
    set: AtomicU32,
    time_pmds: AtomicU64,
    slow_pmds: AtomicU64,
    reserved: [AtomicU64; 6],
    pmds: [PmdCells; abi::PFM_MAX_PMDS],
}

#[cfg(not(target_endian = "little"))]
compile_error!("PageCells packs time_shift and pmc_width as a little-endian u32");

const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<PageCells>() == size_of::<abi::PfmPage>());
    assert!(size_of::<PmdCells>() == size_of::<abi::PfmPagePmd>());
    assert!(offset_of!(PageCells, seq) == offset_of!(abi::PfmPage, seq));
    assert!(offset_of!(PageCells, cpu) == offset_of!(abi::PfmPage, cpu));
    assert!(offset_of!(PageCells, tsc_base) == offset_of!(abi::PfmPage, tsc_base));
    assert!(offset_of!(PageCells, time_mult) == offset_of!(abi::PfmPage, time_mult));
    assert!(offset_of!(PageCells, shift_width) == offset_of!(abi::PfmPage, time_shift));
    assert!(offset_of!(abi::PfmPage, pmc_width) == offset_of!(abi::PfmPage, time_shift) + 2);
    assert!(offset_of!(PageCells, state) == offset_of!(abi::PfmPage, state));
    assert!(offset_of!(PageCells, time_pmds) == offset_of!(abi::PfmPage, time_pmds));
    assert!(offset_of!(PageCells, slow_pmds) == offset_of!(abi::PfmPage, slow_pmds));
    assert!(offset_of!(PageCells, pmds) == offset_of!(abi::PfmPage, pmds));
    assert!(offset_of!(PmdCells, offset) == offset_of!(abi::PfmPagePmd, offset));
};

/// ns for `cycles` TSC cycles at `mult`/`shift`: `(cycles * mult) >>
/// shift` in 128 bits, exact for any `cycles` (one `mul` and one `shrd` on
/// x86-64). A reader without 128-bit arithmetic splits `cycles` into the
/// quotient and the remainder by `2^shift`, as perf's `cap_user_time`
/// readers do, and gets at most 1 ns less (host test).
#[inline(always)]
pub const fn cycles_to_ns(cycles: u64, mult: u32, shift: u32) -> u64 {
    // `shift` is at most 32 (the ABI): `& 63` saves the compiler the
    // case of a shift past 64.
    ((cycles as u128 * mult as u128) >> (shift & 63)) as u64
}

/// The kernel's `clocks_calc_mult_shift(from, to, maxsec)`, transcribed
/// for the host tests and the library's checks: the largest shift (at most
/// 32) whose `mult` still converts `maxsec` seconds of `from` Hz ticks
/// without overflowing 64 bits, and that `mult`, rounded to nearest.
/// The module calls the kernel's own; the TSC's `cyc2ns` uses it with
/// `from` = `tsc_khz`, `to` = `NSEC_PER_MSEC` and `maxsec` = 0.
pub const fn calc_mult_shift(from: u32, to: u32, maxsec: u32) -> (u32, u32) {
    let mut tmp = (maxsec as u64 * from as u64) >> 32;
    let mut sftacc = 32u32;
    while tmp != 0 {
        tmp >>= 1;
        sftacc -= 1;
    }
    let mut sft = 32u32;
    let mut t = 0u64;
    while sft > 0 {
        t = (to as u64) << sft;
        t += from as u64 / 2;
        t /= from as u64;
        if (t >> sftacc) == 0 {
            break;
        }
        sft -= 1;
    }
    (t as u32, sft)
}

/// `sched_clock`'s TSC-to-ns conversion from `clocks_calc_mult_shift`'s
/// `(mult, shift)`: `__set_cyc2ns_scale` turns a shift of 32 into 31 with
/// `mult` halved (truncated), for perf's user page. The page uses the same
/// pair, so its extension runs at exactly the rate of `sched_clock`, the
/// scheduler's runtime: the unhalved pair runs ahead of it where `mult` is
/// odd (up to 0.6 ns a second; host test).
pub const fn sched_clock_scale(mult: u32, shift: u32) -> (u32, u32) {
    if shift == 32 {
        (mult >> 1, 31)
    } else {
        (mult, shift)
    }
}

/// What an update writes besides the PMDs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Update {
    /// `PFM_PAGE_*`.
    pub flags: u32,
    /// The CPU the thread runs on (meaningful with `PFM_PAGE_RUNNING`).
    pub cpu: u32,
    /// PMDs described.
    pub pmd_mask: u64,
    /// ns loaded and started.
    pub time_enabled: u64,
    /// ns the thread ran while started.
    pub time_running: u64,
    /// The TSC at the update (running, time valid).
    pub tsc_base: u64,
    /// TSC to ns (time valid): multiplier.
    pub time_mult: u32,
    /// TSC to ns (time valid): shift, at most 32.
    pub time_shift: u16,
    /// `PFM_STATE_*`.
    pub state: u32,
    /// The PMDs with `PFM_PAGE_PMD_TIME`.
    pub time_pmds: u64,
    /// The PMDs with an `rdpmc` index or `PFM_PAGE_PMD_STALE`.
    pub slow_pmds: u64,
    /// The event set whose values the page shows (0 without sets).
    pub set: u32,
}

/// One PMD as an update writes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PmdUpdate {
    /// The 64-bit value.
    pub value: u64,
    /// `rdpmc` index + 1, or 0.
    pub index: u32,
    /// `PFM_PAGE_PMD_*`.
    pub flags: u32,
    /// The raw counter at the update (`index != 0`).
    pub offset: u64,
}

/// What the reader's CPU gives it: `rdtscp` (the TSC and `TSC_AUX`, read
/// at one instant) and `rdpmc`. The library's is the instructions; the host
/// tests' a simulated CPU.
pub trait UserCpu {
    /// `(TSC, TSC_AUX)`; Linux keeps the CPU number in `TSC_AUX & 0xfff`.
    fn rdtscp(&self) -> (u64, u32);
    /// Reads counter `index` (the page's `index - 1`).
    fn rdpmc(&self, index: u32) -> u64;
}

/// `TSC_AUX`'s CPU number bits (`vdso_encode_cpunode`).
pub const TSC_AUX_CPU_MASK: u32 = 0xfff;

/// What one consistent read of the page says besides the values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    /// ns loaded and started.
    pub time_enabled: u64,
    /// ns the thread ran while started.
    pub time_running: u64,
    /// `PFM_PAGE_*` as the reader saw them.
    pub flags: u32,
    /// `PFM_STATE_*`.
    pub state: u32,
    /// The event set whose values these are (0 without sets).
    pub set: u32,
    /// PMDs the page describes.
    pub pmd_mask: u64,
    /// The reader is the monitored thread, running: the values are as of
    /// now (extended by the time since the update, counters read with
    /// `rdpmc`). Otherwise they are as of the last update.
    pub live: bool,
    /// Times the sequence count changed under the reader.
    pub retries: u32,
}

/// One consistent read of the page, values by PMD number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    /// Values by PMD number (PMDs outside the requested mask: 0).
    pub values: [u64; abi::PFM_MAX_PMDS],
    /// The rest.
    pub meta: Meta,
}

/// Completed updates a reader sees under it before it gives up (the caller
/// then uses the system call): a reader that keeps losing is being
/// preempted in its loop. An odd count (an update in progress) is waited
/// out and not counted: the writer holds it for a few hundred instructions
/// with interrupts off, but in a VM its vCPU can be descheduled by the host
/// meanwhile for milliseconds (`pfm_test_mmap` saw a reader give up on an
/// odd count alone under the debug kernel).
pub const MAX_TRIES: u32 = 1000;

impl PageCells {
    /// The constant fields, written once when the page is created (before
    /// any reader can map it): the version and the counter width.
    pub fn init(&self, width: u16) {
        self.version.store(abi::PFM_PAGE_VERSION, Ordering::Relaxed);
        self.shift_width
            .store(u32::from(width) << 16, Ordering::Relaxed);
    }

    /// Writes `u` and the PMDs (`pmds` by PMD number; every PMD not given
    /// keeps its entry) under the sequence count. One writer at a time:
    /// the caller holds the context's lock.
    pub fn write(&self, u: &Update, pmds: impl Iterator<Item = PmdUpdate>) {
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        // Orders the odd count before the data: a reader that sees any of
        // the new data sees the odd count (or a later one) at its re-check.
        fence(Ordering::Release);
        self.flags.store(u.flags, Ordering::Relaxed);
        self.cpu.store(u.cpu, Ordering::Relaxed);
        self.pmd_mask.store(u.pmd_mask, Ordering::Relaxed);
        self.time_enabled.store(u.time_enabled, Ordering::Relaxed);
        self.time_running.store(u.time_running, Ordering::Relaxed);
        self.tsc_base.store(u.tsc_base, Ordering::Relaxed);
        self.time_mult.store(u.time_mult, Ordering::Relaxed);
        let width = self.shift_width.load(Ordering::Relaxed) & 0xffff_0000;
        self.shift_width
            .store(width | u32::from(u.time_shift), Ordering::Relaxed);
        self.state.store(u.state, Ordering::Relaxed);
        self.set.store(u.set, Ordering::Relaxed);
        self.time_pmds.store(u.time_pmds, Ordering::Relaxed);
        self.slow_pmds.store(u.slow_pmds, Ordering::Relaxed);
        for (cell, p) in self.pmds.iter().zip(pmds) {
            cell.value.store(p.value, Ordering::Relaxed);
            cell.index.store(p.index, Ordering::Relaxed);
            cell.flags.store(p.flags, Ordering::Relaxed);
            cell.offset.store(p.offset, Ordering::Relaxed);
        }
        // Publishes the data with the even count.
        self.seq.store(s.wrapping_add(2), Ordering::Release);
    }

    /// The sequence count (tests, and readers that want to know whether
    /// anything changed).
    pub fn seq(&self) -> u32 {
        self.seq.load(Ordering::Acquire)
    }

    /// The page version.
    pub fn version(&self) -> u32 {
        self.version.load(Ordering::Relaxed)
    }

    /// Reads the PMDs of `mask` consistently, by PMD number; `None` after
    /// [`MAX_TRIES`] changes under the reader. See [`PageCells::read_into`].
    pub fn read(&self, mask: u64, cpu: &impl UserCpu) -> Option<Reading> {
        let mut packed = [0u64; abi::PFM_MAX_PMDS];
        let meta = self.read_into(mask, cpu, &mut packed)?;
        let mut values = [0u64; abi::PFM_MAX_PMDS];
        let wanted = mask & meta.pmd_mask;
        let slots = values.iter_mut().enumerate();
        let chosen = slots.filter(|(i, _)| wanted & (1 << i) != 0);
        for ((_, v), x) in chosen.zip(packed) {
            *v = x;
        }
        Some(Reading { values, meta })
    }

    /// Reads the PMDs of `mask` that the page describes consistently into
    /// `out`, in PMD order (as `PFM_IOC_READ_VALUES` does; a short `out`
    /// gets the first ones); `None` after [`MAX_TRIES`] changes under the
    /// reader.
    ///
    /// The reader is the monitored thread exactly when the page says the
    /// thread runs on CPU `c` and `rdtscp`, inside the sequence window,
    /// says the reader runs on `c`: while the count did not change the
    /// thread was the one running on `c` (its switch-out changes the
    /// count), and no other thread can run there then. Only that reader
    /// extends task-clock by the TSC since the update and reads `rdpmc`;
    /// any other sees the values of the last update, `live` false.
    #[inline(always)]
    pub fn read_into(&self, mask: u64, cpu: &impl UserCpu, out: &mut [u64]) -> Option<Meta> {
        let mut retries = 0;
        while retries < MAX_TRIES {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & 1 != 0 {
                // The writer always finishes: it runs with interrupts off.
                core::hint::spin_loop();
                continue;
            }
            let mut meta = self.read_fields(mask, cpu, out);
            // Orders the data reads before the re-check of the count.
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == s1 {
                meta.retries = retries;
                return Some(meta);
            }
            retries += 1;
        }
        None
    }

    /// The body of [`PageCells::read_into`]'s window.
    #[inline(always)]
    fn read_fields(&self, mask: u64, cpu: &impl UserCpu, out: &mut [u64]) -> Meta {
        let flags = self.flags.load(Ordering::Relaxed);
        let pmd_mask = self.pmd_mask.load(Ordering::Relaxed);
        let wanted = mask & pmd_mask & ((1u64 << abi::PFM_MAX_PMDS) - 1);
        let mut live = false;
        let mut delta = 0;
        // `rdtscp` only where the kernel saw it work (TIME_VALID).
        let both = abi::PFM_PAGE_RUNNING | abi::PFM_PAGE_TIME_VALID;
        if flags & both == both {
            let (tsc, aux) = cpu.rdtscp();
            live = aux & TSC_AUX_CPU_MASK == self.cpu.load(Ordering::Relaxed);
            if live {
                let base = self.tsc_base.load(Ordering::Relaxed);
                let shift = self.shift_width.load(Ordering::Relaxed) & 0xffff;
                let mult = self.time_mult.load(Ordering::Relaxed);
                // Same CPU, same TSC: never behind the base; clamped anyway.
                delta = cycles_to_ns(tsc.saturating_sub(base), mult, shift);
            }
        }
        let slow = self.slow_pmds.load(Ordering::Relaxed) & wanted;
        if live && slow != 0 {
            live = self.read_slow(wanted, delta, cpu, out);
        } else {
            // Every PMD asked for is a plain value, or task-clock.
            let time = if live {
                self.time_pmds.load(Ordering::Relaxed)
            } else {
                0
            };
            // `wanted` has no bit at or above PFM_MAX_PMDS (32): `& 31`
            // keeps the index in the table without a bounds check.
            let mut w = wanted;
            for slot in out.iter_mut() {
                if w == 0 {
                    break;
                }
                let i = (w.trailing_zeros() & 31) as usize;
                w &= w - 1;
                let add = if time & (1 << i) != 0 { delta } else { 0 };
                *slot = self.pmds[i].value.load(Ordering::Relaxed).wrapping_add(add);
            }
        }
        let delta = if live { delta } else { 0 };
        Meta {
            time_enabled: self
                .time_enabled
                .load(Ordering::Relaxed)
                .wrapping_add(delta),
            time_running: self
                .time_running
                .load(Ordering::Relaxed)
                .wrapping_add(delta),
            flags,
            state: self.state.load(Ordering::Relaxed),
            set: self.set.load(Ordering::Relaxed),
            pmd_mask,
            live,
            retries: 0,
        }
    }

    /// [`PageCells::read_fields`] for a live reader that asked for a PMD
    /// with an `rdpmc` index or marked stale: per-PMD flags. Whether the
    /// values are live (a stale PMD without index makes them all the
    /// update's).
    #[cold]
    fn read_slow(&self, wanted: u64, delta: u64, cpu: &impl UserCpu, out: &mut [u64]) -> bool {
        let cells = || {
            let mut w = wanted;
            core::iter::from_fn(move || {
                let i = w.trailing_zeros() as usize;
                w &= w.wrapping_sub(1);
                self.pmds.get(i)
            })
        };
        let stale = cells().any(|c| {
            c.flags.load(Ordering::Relaxed) & abi::PFM_PAGE_PMD_STALE != 0
                && c.index.load(Ordering::Relaxed) == 0
        });
        for (slot, cell) in out.iter_mut().zip(cells()) {
            let mut x = cell.value.load(Ordering::Relaxed);
            let index = cell.index.load(Ordering::Relaxed);
            if !stale {
                if cell.flags.load(Ordering::Relaxed) & abi::PFM_PAGE_PMD_TIME != 0 {
                    x = x.wrapping_add(delta);
                } else if index != 0 {
                    x = x.wrapping_add(self.pmc_since(cell, index, cpu));
                }
            }
            *slot = x;
        }
        !stale
    }

    /// What counter `index` (the page's, + 1) counted since the update.
    fn pmc_since(&self, cell: &PmdCells, index: u32, cpu: &impl UserCpu) -> u64 {
        let width = (self.shift_width.load(Ordering::Relaxed) >> 16).min(64);
        if width == 0 {
            return 0;
        }
        let raw = cpu.rdpmc(index - 1);
        let off = cell.offset.load(Ordering::Relaxed);
        let m = if width >= 64 {
            u64::MAX
        } else {
            (1u64 << width) - 1
        };
        raw.wrapping_sub(off) & m
    }
}
