// SPDX-License-Identifier: GPL-2.0

//! The mapped counter page (`mmap` of the context's fd): what the context
//! publishes there and when. The page is updated under its sequence count
//! (`pfm_page`) with the context's lock held, at every switch-in and
//! switch-out of the thread and after every call that folds or changes the
//! counters, so between two updates nothing it shows changes except what a
//! running thread can extend by itself: its time on CPU, from the TSC.
//!
//! A context without a page pays one predictable branch per update point
//! ([`CtxInner::page_update`]); the work is out of line.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use kernel::prelude::*;

use super::parts::spare_parts;
use super::{Context, CtxInner};
use crate::abi;
use crate::globals;
use crate::pfm_page::{cycles_to_ns, sched_clock_scale, PageCells, PmdUpdate, Update};
use crate::rust::{self as glue, clock, mm};

// SAFETY: Atomics only (all-zero is a valid value of each), 1152 bytes
// (pinned in the ABI), every change through the atomics.
unsafe impl mm::PageContents for PageCells {}

/// A context's page.
///
/// Never changed through `&mut` once installed: `mmap` holds a shared
/// reference to `mem` outside the lock while updates run.
pub(super) struct CtxPage {
    /// The page user space maps.
    mem: mm::SharedPage<PageCells>,
    /// The TSC rate the conversion below was computed for, in kHz.
    khz: AtomicU32,
    /// The TSC-to-ns conversion at `khz`: `mult << 32 | shift`, 0 if none.
    conv: AtomicU64,
    /// What the page promises a live reader while its thread runs: the
    /// runtime and the TSC at the last update that let it extend
    /// task-clock (`promise_tsc` 0: none), at `conv`. See
    /// [`CtxInner::page_promise`].
    promise_runtime: AtomicU64,
    promise_tsc: AtomicU64,
}

impl CtxPage {
    /// A page with its constant fields written. May sleep.
    fn new() -> Result<Self> {
        let mem = mm::SharedPage::<PageCells>::new()?;
        mem.get().init(globals().pmu.width as u16);
        Ok(Self {
            mem,
            khz: AtomicU32::new(0),
            conv: AtomicU64::new(0),
            promise_runtime: AtomicU64::new(0),
            promise_tsc: AtomicU64::new(0),
        })
    }

    /// The TSC-to-ns conversion now: recomputed only when the TSC's rate
    /// changed (cpufreq, on CPUs whose TSC rate follows it). Under the
    /// context's lock: the atomics only keep the borrow shared.
    fn conversion(&self) -> Option<(u32, u32)> {
        if !clock::tsc_user_time_ok() {
            return None;
        }
        let khz = clock::tsc_khz();
        if khz != self.khz.load(Ordering::Relaxed) {
            let c = clock::mult_shift(khz).map_or(0, |(m, s)| {
                let (m, s) = sched_clock_scale(m, s);
                u64::from(m) << 32 | u64::from(s)
            });
            self.conv.store(c, Ordering::Relaxed);
            self.khz.store(khz, Ordering::Relaxed);
        }
        let c = self.conv.load(Ordering::Relaxed);
        (c != 0).then_some(((c >> 32) as u32, c as u32))
    }

    /// The runtime a live reader may have computed by now: the promised
    /// runtime extended by the TSC, as the reader extends it; 0 if no
    /// promise stands. Under the context's lock.
    fn promised_now(&self) -> u64 {
        let tsc = self.promise_tsc.load(Ordering::Relaxed);
        if tsc == 0 {
            return 0;
        }
        let c = self.conv.load(Ordering::Relaxed);
        let cycles = clock::rdtsc().saturating_sub(tsc);
        self.promise_runtime.load(Ordering::Relaxed)
            + cycles_to_ns(cycles, (c >> 32) as u32, c as u32)
    }
}

/// The current thread's runtime and a TSC not older than it, read close
/// together: the runtime between two TSC reads at most a microsecond apart
/// (a vCPU that stalls between the two, under QEMU for milliseconds, would
/// otherwise leave the page that far behind), the later TSC returned. A few
/// tries; the last is kept (behind, never ahead).
fn runtime_and_tsc() -> (u64, u64) {
    let max_gap = u64::from(clock::tsc_khz() / 1000).max(1);
    let mut r = (0, 0);
    for _ in 0..4 {
        let t1 = clock::rdtsc();
        let runtime = glue::current_runtime_ns();
        let t2 = clock::rdtsc();
        r = (runtime, t2);
        if t2.wrapping_sub(t1) <= max_gap {
            break;
        }
    }
    r
}

impl CtxInner {
    /// The mapped page, if there is one.
    #[inline(always)]
    pub(super) fn page(&self) -> Option<&CtxPage> {
        self.parts()?.page.as_deref()
    }

    /// The least runtime the thread's task-clock may be folded to now (0:
    /// any): what a live reader of the page may already have seen.
    ///
    /// The scheduler closes a time slice at its runqueue clock, and a
    /// wake-up that preempts the thread stamps that clock early
    /// (`wakeup_preempt` asks `__schedule` to skip its clock update,
    /// `RQCF_REQ_SKIP`): the thread runs on in user mode until the
    /// rescheduling IPI arrives, yet its slice ends at the wake-up, and
    /// the rest goes to the next thread. A reader that extended task-clock
    /// meanwhile saw more than the scheduler then accounts (`pfm_test_mmap`:
    /// a STOP froze task-clock below a live reading made before it, in
    /// every run once a sleeper on the reader's CPU was woken from the
    /// other). So a fold on the thread's CPU, and the switch-out of a
    /// preempted thread, take task-clock to at least what the page promised
    /// by then. Not a thread's switch-out as it blocks: a blocking thread
    /// left user mode before it called into the scheduler, which updates
    /// its clock then (the switch path after it, with an idle CPU's
    /// balancing, is tens of microseconds under QEMU, the scheduler gives
    /// it to the idle task, and so does this).
    #[inline(always)]
    pub(super) fn page_promise(&self) -> u64 {
        match self.page() {
            Some(page) => page.promised_now(),
            None => 0,
        }
    }

    /// [`CtxInner::page_promise`] at the thread's switch-out: only for a
    /// preempted thread (still runnable); 0 for one that blocks, or without
    /// a page (one test on the switch path).
    #[inline(always)]
    pub(super) fn switch_out_promise(&self) -> u64 {
        match self.page() {
            Some(page) if glue::current_is_runnable() => page.promised_now(),
            _ => 0,
        }
    }

    /// Publishes the context's state to its page, if it has one. Lock held.
    #[inline(always)]
    pub(super) fn page_update(&self) {
        if let Some(page) = self.page() {
            self.page_write(page);
        }
    }

    /// [`CtxInner::page_update`]'s work.
    #[cold]
    #[inline(never)]
    fn page_write(&self, page: &CtxPage) {
        let cpu = glue::this_cpu();
        let counting = self.counting();
        // The thread is current here: its sched_in ran and its sched_out
        // has not (that one clears `on_cpu` before it updates the page).
        let running = counting && self.on_cpu == Some(cpu);
        let mut u = Update {
            flags: 0,
            cpu: cpu as u32,
            pmd_mask: globals().pmu.impl_mask(),
            time_enabled: self.time_enabled(glue::now_ns()),
            time_running: self.time_running,
            tsc_base: 0,
            time_mult: 0,
            time_shift: 0,
            state: self.state().abi_value(),
            time_pmds: 0,
            slow_pmds: 0,
            set: 0,
        };
        if counting {
            u.flags |= abi::PFM_PAGE_COUNTING;
        }
        // Running: the thread's clock started before this update (at its
        // switch-in, the scheduler started it before the notifier ran; at
        // a fold, a few instructions ago). The page's base is the runtime
        // now, and the TSC base is read after it: the reader's extension
        // may start a little late (the page a few ns behind the runtime),
        // never early (which would put it ahead of the next fold).
        let mut pending = 0;
        let mut promise = None;
        if running {
            u.flags |= abi::PFM_PAGE_RUNNING;
            if let Some((mult, shift)) = page.conversion() {
                let (runtime, tsc) = runtime_and_tsc();
                pending = runtime.saturating_sub(self.run_base);
                u.flags |= abi::PFM_PAGE_TIME_VALID;
                (u.time_mult, u.time_shift) = (mult, shift as u16);
                u.tsc_base = tsc;
                promise = Some((runtime, tsc));
            }
        }
        // A promise stands until the thread leaves its CPU: an update made
        // elsewhere meanwhile (`with_live`'s fallback) does not take back
        // what its readers may have seen.
        match promise {
            Some((runtime, tsc)) => {
                page.promise_runtime.store(runtime, Ordering::Relaxed);
                page.promise_tsc.store(tsc.max(1), Ordering::Relaxed);
            }
            None if self.on_cpu.is_none() => page.promise_tsc.store(0, Ordering::Relaxed),
            None => {}
        }
        u.time_running += pending;
        // With event sets that take turns, the active set's share of the
        // time ahead ends where its timeout falls, which a reader cannot
        // see: its task-clock PMDs are not extended but marked stale.
        let (clock_pmds, held_clock) = match self.multiplexed() {
            false => (self.counters.clock_pmds(), 0),
            true => (0, self.counters.clock_pmds()),
        };
        // Page faults move while the thread runs, with nothing a reader
        // can extend them by: stale too, read by the system call.
        let moving = held_clock | self.counters.fault_pmds();
        u.time_pmds = clock_pmds;
        u.set = self.resident_set() as u32;
        u.slow_pmds = moving;
        // `index` stays 0: a hardware counter is not offered to `rdpmc`
        // (Documentation/perfmon.rst, "Reading without a system call"), so
        // while it counts on the PMU the page's value is stale.
        let stale = if globals().pmu.hw.is_some() {
            u.slow_pmds = u.pmd_mask & !clock_pmds;
            abi::PFM_PAGE_PMD_STALE
        } else {
            0
        };
        let pmds = self
            .counters
            .pmds()
            .iter()
            .enumerate()
            .map(|(i, p)| PmdUpdate {
                value: if i < 64 && clock_pmds & (1 << i) != 0 {
                    p.value.wrapping_add(pending)
                } else {
                    p.value
                },
                index: 0,
                flags: if i < 64 && clock_pmds & (1 << i) != 0 {
                    abi::PFM_PAGE_PMD_TIME
                } else if i < 64 && moving & (1 << i) != 0 {
                    abi::PFM_PAGE_PMD_STALE
                } else {
                    stale
                },
                offset: 0,
            });
        page.mem.get().write(&u, pmds);
    }
}

impl Context {
    /// `mmap`: maps the context's page read-only (made at the first call),
    /// one page at offset 0, not writable nor executable; or at
    /// `PFM_SMPL_OFFSET`, its sampling buffer (`smpl.rs`).
    pub(crate) fn mmap(&self, vma: &mm::Vma<'_>) -> Result {
        if vma.pgoff() == abi::PFM_SMPL_OFFSET as usize / abi::PFM_PAGE_SIZE {
            return self.mmap_smpl(vma);
        }
        if vma.len() != abi::PFM_PAGE_SIZE || vma.pgoff() != 0 {
            return Err(EINVAL);
        }
        if vma.writable_or_exec() {
            return Err(EPERM);
        }
        // Made outside the lock (it may sleep); a racing mmap's may win.
        let (has_parts, has_page) = {
            let inner = self.inner.lock();
            (inner.has_parts(), inner.page().is_some())
        };
        let mut spare = spare_parts(has_parts)?;
        let mut fresh = match has_page {
            true => None,
            false => Some(KBox::new(CtxPage::new()?, GFP_KERNEL_ACCOUNT)?),
        };
        let mem: Result<*const mm::SharedPage<PageCells>> = {
            let mut inner = self.inner.lock();
            // The page shows the loaded thread's counters, whatever else
            // the context has (Documentation/perfmon.rst, "How the parts
            // combine"): with event sets, the active set's, which it names.
            let parts = inner.parts_for_adding(&mut spare)?;
            if parts.page.is_none() {
                parts.page = fresh.take();
                inner.page_update();
            }
            inner.page().map(|p| &p.mem as *const _).ok_or(ENOMEM)
        };
        // What was not installed is freed after the raw lock.
        drop((spare, fresh));
        let mem = mem?;
        // The page stays until the context is dropped (`parts.rs`).
        // Outside the lock: `insert_ro_page` may sleep.
        // SAFETY: The page is never freed nor borrowed mutably before the
        // context is dropped (above, `CtxPage`); the caller's file holds it.
        let page = unsafe { &*mem };
        vma.insert_ro_page(page)
    }
}
