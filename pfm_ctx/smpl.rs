// SPDX-License-Identifier: GPL-2.0

//! A context's sampling buffer (Documentation/perfmon.rst, "Sampling"):
//! `PFM_IOC_SMPL_SETUP`, its `mmap`, and the entry every overflow writes.
//! The ring's protocol is `pfm_smpl` (host-tested, shared with the
//! library); this file keeps the pages and calls it.
//!
//! A whole program's threads (the root's and its heirs', `family.rs`)
//! share the root's buffer ([`SmplBuffer`]); each context keeps its own
//! part ([`CtxSmpl`]).
//!
//! An entry is written where the overflow is found, under the context's
//! lock and the buffer's, in the monitored thread (its IP, its CPU, the
//! PMD values of that moment, and, if the buffer asks, its user call
//! chain): at a switch for the soft model's switch and migration counts
//! and its task-clock folds, in the task-clock timer's interrupt, in the
//! PMI for the hardware models. What needs more than memory writes
//! (masking a full buffer, its message, waking a reader past the
//! watermark) is left to the overflow interrupt that the overflow raises
//! anyway ([`CtxInner::take_smpl_events`]).

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use kernel::prelude::*;
use kernel::sync::Arc;

use super::parts::spare_parts;
use super::{Context, CtxInner};
use crate::abi;
use crate::globals;
use crate::pfm_msgq::Ring;
use crate::pfm_random::PeriodRandom;
use crate::pfm_smpl::{self, DataCells, Geometry, HeaderCells, SmplRing, Writer, MAX_CHAIN, PAGE};
use crate::pfm_state::State;
use crate::rust::{self as glue, mlock, mm, new_irq_raw_spinlock, IrqRawSpinLock, PidNs, SlabArc};

// SAFETY: Atomics only (all-zero is a valid value of each), 128 bytes.
unsafe impl mm::PageContents for HeaderCells {}
// SAFETY: Atomics only, one page.
unsafe impl mm::PageContents for DataCells {}

/// A sampling buffer: its pages and the writer's positions. A whole
/// program's contexts (the root, which `PFM_IOC_SMPL_SETUP` gave it, and
/// its heirs) share it: their threads write entries on several CPUs at
/// once, each under its own context's lock, so the writes are serialised
/// by `producer` (perf forbids the `mmap` of an inherited per-thread event
/// for this; its `perf record` opens one event per CPU instead).
///
/// Never borrowed mutably (`mmap` maps its pages outside any lock while
/// overflows write entries): what changes is atomic.
#[pin_data]
pub(crate) struct SmplBuffer {
    hdr: mm::SharedPage<HeaderCells>,
    data: KVec<mm::SharedPage<DataCells>>,
    geo: Geometry,
    /// Per PMD, the PMDs whose values its entries record.
    smpl_pmds: [u64; abi::PFM_MAX_PMDS],
    /// Where the next entry goes and the counts, the kernel's own (the
    /// header page, which the tool can write, only gets copies).
    writer: Writer,
    /// The VMAs that map the buffer: one `mmap` at a time, but an
    /// `mremap` move or a fork (`MADV_DOFORK`) adds one for a while.
    mappings: AtomicUsize,
    /// Held by whoever writes the data, `writer` or the header's copies
    /// (innermost: taken under a context's lock, nothing under it).
    #[pin]
    producer: IrqRawSpinLock<()>,
    /// The pages, charged as locked memory to the user and the mm that
    /// set the buffer up ([`charge_locked`]), for as long as they exist:
    /// the buffer goes after its last mapping (each holds the file, which
    /// holds the context) and after its last context (the root's and its
    /// heirs'), and gives the charge back once, whatever closed, cloned
    /// or mapped it before.
    _locked: mlock::LockedCharge,
}

/// A context's part in a sampling buffer: the buffer, the ids its entries
/// carry, and what a count hands the entries of its overflow.
pub(crate) struct CtxSmpl {
    buf: Arc<SmplBuffer>,
    /// An heir's root, whose file's readers and `SIGIO` owners its entries
    /// wake (`None`: the context's own). The root lives as long as its
    /// heirs: an heir holds it, and the root's family lets the heirs go
    /// when the root is closed, which breaks the cycle.
    root: Option<SlabArc<Context>>,
    /// The thread's process id in the loader's pid namespace (set at LOAD,
    /// or when an heir joins).
    pid: AtomicU32,
    /// PMDs whose entry filled the buffer (mask policy), since the
    /// overflow interrupt last looked.
    full_pmds: AtomicU64,
    /// The unread entries reached the watermark since then.
    crossed: AtomicBool,
    /// Per PMD, the periods it crossed in the count that overflowed it
    /// (set by the count, taken by the entries written right after).
    crossed_periods: [AtomicU64; abi::PFM_MAX_PMDS],
    /// Per PMD, its period generator's state before that count
    /// (`PFM_REGFL_RANDOM`; 0: not randomised, or not said), from which
    /// the entries replay each crossing's reset value.
    random_before: [AtomicU64; abi::PFM_MAX_PMDS],
}

/// What a family's new heirs sample into: the root's buffer, and the root.
#[derive(Clone)]
pub(super) struct FamilySmpl {
    buf: Arc<SmplBuffer>,
    root: SlabArc<Context>,
}

/// Entries written for one PMD's overflow at most: a count that crossed
/// more periods (a task-clock fold after a long stall of the timer)
/// writes these and counts the rest as lost, so that the work under the
/// lock stays bounded and `written + lost` is still every period crossed.
const MAX_ENTRIES_PER_OVERFLOW: u64 = 64;

// A randomised count draws a reset for each of the periods it crosses up
// to this many (`pfm_counter`): every entry written has its own.
const _: () = assert!(MAX_ENTRIES_PER_OVERFLOW <= crate::pfm_counter::MAX_RANDOM_RESETS);

/// What a count noted of a PMD's overflow, for its entries.
struct Crossed {
    /// Periods crossed: at least one (a model that does not say how many
    /// crossed one).
    periods: u64,
    /// The PMD's generator before the count, if it is randomised and the
    /// count said so: replayed, it gives each period's reset value.
    random: Option<PeriodRandom>,
}

impl CtxSmpl {
    /// A context's part in `buf`: `pid` for its entries, `root` the
    /// context whose readers they wake if not its own.
    fn new(buf: Arc<SmplBuffer>, root: Option<SlabArc<Context>>, pid: u32) -> Self {
        Self {
            buf,
            root,
            pid: AtomicU32::new(pid),
            full_pmds: AtomicU64::new(0),
            crossed: AtomicBool::new(false),
            crossed_periods: [const { AtomicU64::new(0) }; abi::PFM_MAX_PMDS],
            random_before: [const { AtomicU64::new(0) }; abi::PFM_MAX_PMDS],
        }
    }

    /// PMD `pmd` overflowed `n` times in the count under way, its period
    /// generator being `random` before it (lock held).
    pub(super) fn note_overflows(&self, pmd: usize, n: u64, random: PeriodRandom) {
        if let (Some(c), Some(r)) = (self.crossed_periods.get(pmd), self.random_before.get(pmd)) {
            c.store(n, Ordering::Relaxed);
            r.store(random.state(), Ordering::Relaxed);
        }
    }

    /// What the count noted of PMD `pmd`'s last overflow, taken; `mask`:
    /// the PMD's randomisation mask (the count does not change it).
    fn take_crossed(&self, pmd: usize, mask: u64) -> Crossed {
        let (Some(c), Some(r)) = (self.crossed_periods.get(pmd), self.random_before.get(pmd))
        else {
            return Crossed {
                periods: 1,
                random: None,
            };
        };
        let state = r.swap(0, Ordering::Relaxed);
        Crossed {
            periods: c.swap(0, Ordering::Relaxed).max(1),
            // A generator's state is never 0.
            random: match state {
                0 => None,
                s => PeriodRandom::new(s, mask),
            },
        }
    }
}

/// What the overflow interrupt must do for the buffer.
pub(super) struct SmplEvents {
    /// The buffer filled: mask, with a message naming these PMDs.
    pub(super) full_pmds: u64,
    /// Wake `poll`ers: the watermark was reached.
    pub(super) wake: bool,
    /// Whose: an heir's root (`None`: the context's own).
    pub(super) root: Option<SlabArc<Context>>,
}

impl SmplEvents {
    /// Wakes the buffer's readers if the watermark was reached: `ctx`'s,
    /// or its root's. Not under a context's lock.
    pub(super) fn wake_readers(&self, ctx: &Context) {
        if self.wake {
            self.root.as_deref().unwrap_or(ctx).wake();
        }
    }
}

impl SmplBuffer {
    /// The buffer as the ring protocol sees it, for `f`.
    fn with_ring<R>(&self, f: impl FnOnce(&SmplRing<'_>) -> R) -> R {
        let page = |i: usize| self.data.get(i).map(|p| p.get());
        let ring = SmplRing {
            hdr: self.hdr.get(),
            page: &page,
            data_size: self.geo.data_size,
            entry_size: self.geo.entry_size,
        };
        f(&ring)
    }
}

impl CtxInner {
    /// The sampling buffer, if there is one.
    #[inline(always)]
    pub(super) fn smpl(&self) -> Option<&CtxSmpl> {
        self.parts()?.smpl.as_deref()
    }

    /// Writes one entry per PMD of `ovfl` (overflowed now, in the monitored
    /// thread, lock held). Returns the overflows the overflow interrupt
    /// must still see: those of PMDs that ask for a message, or all of
    /// them when the buffer filled or reached its watermark (the
    /// interrupt masks or wakes); a sample alone raises no interrupt
    /// (perfmon2's `OVFL_NO_MSG`). Outside LOADED (a zombie's lazy stop),
    /// no entry, and every overflow goes on.
    pub(super) fn smpl_overflowed(&self, ovfl: u64) -> u64 {
        let Some(smpl) = self.smpl() else {
            return ovfl;
        };
        if self.state() != State::Loaded {
            // What the count noted is not for a later overflow.
            let mut bits = ovfl;
            while bits != 0 {
                smpl.take_crossed(bits.trailing_zeros() as usize, 0);
                bits &= bits - 1;
            }
            return ovfl;
        }
        // During an exec not yet checked, the user registers may be the
        // new image's, which its loader may not be allowed to see.
        let visible = !self.exec_check;
        let ip = if visible { glue::current_user_ip() } else { 0 };
        let depth = (smpl.buf.geo.chain_depth as usize).min(MAX_CHAIN);
        if depth == 0 {
            self.smpl_write(smpl, ovfl, ip, &[], 0)
        } else {
            self.smpl_write_chained(smpl, ovfl, ip, visible, depth)
        }
    }

    /// [`Self::smpl_overflowed`] for a buffer that records call chains:
    /// one walk of the thread's user stack for every entry of this
    /// overflow. Apart, so that its 512 bytes of stack are taken only by
    /// such buffers.
    #[inline(never)]
    fn smpl_write_chained(
        &self,
        smpl: &CtxSmpl,
        ovfl: u64,
        ip: u64,
        visible: bool,
        depth: usize,
    ) -> u64 {
        let mut chain = [0u64; MAX_CHAIN];
        let room = chain.get_mut(..depth).unwrap_or_default();
        let (len, flags) = match glue::current_user_frame_pointer() {
            Some(fp) if visible => pfm_smpl::walk_frames(fp, room, glue::read_user_frame),
            _ => (0, abi::PFM_SMPL_CHAIN_NONE),
        };
        self.smpl_write(smpl, ovfl, ip, chain.get(..len).unwrap_or_default(), flags)
    }

    /// [`Self::smpl_overflowed`]'s entries: one per period each PMD of
    /// `ovfl` crossed, with the user `ip` and `chain`.
    fn smpl_write(
        &self,
        smpl: &CtxSmpl,
        ovfl: u64,
        ip: u64,
        chain: &[u64],
        chain_flags: u16,
    ) -> u64 {
        let pmds = self.counters.pmds();
        let mut notify = 0;
        let mut bits = ovfl;
        while bits != 0 {
            let i = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let (Some(pmd), Some(&mask)) = (pmds.get(i), smpl.buf.smpl_pmds.get(i)) else {
                continue;
            };
            if pmd.flags() & abi::PFM_REGFL_OVFL_NOTIFY != 0 {
                notify |= 1 << i;
            }
            let mut e = abi::PfmSmplEntry {
                tid: self.tid,
                pid: smpl.pid.load(Ordering::Relaxed),
                cpu: glue::this_cpu() as u16,
                ovfl_pmd: i as u16,
                set: self.resident_set() as u16,
                nvalues: mask.count_ones() as u16,
                last_reset_val: pmd.last_reset(),
                ip,
                tstamp: glue::monotonic_ns(),
                smpl_pmds: mask,
                chain_flags,
                ..Default::default()
            };
            let mut m = mask;
            for v in e.values.iter_mut() {
                if m == 0 {
                    break;
                }
                let j = m.trailing_zeros() as usize;
                m &= m - 1;
                *v = pmds.get(j).map_or(0, |p| p.value);
            }
            // One entry per period crossed, as perf writes one sample per
            // period (`perf_swevent_overflow`): the count of entries is
            // the count of periods, whatever the folds' lengths. A
            // randomised PMD's entries each carry their own reset value,
            // replayed from the generator as it was before the count (the
            // count drew them in this order, from the short reset value);
            // the last one is `last_reset()`.
            let Crossed {
                periods,
                mut random,
            } = smpl.take_crossed(i, pmd.random().mask());
            let buf = &*smpl.buf;
            let _producer = buf.producer.lock();
            let mut left = periods;
            while left > 0 && periods - left < MAX_ENTRIES_PER_OVERFLOW {
                left -= 1;
                if let Some(g) = random.as_mut() {
                    e.last_reset_val = g.reset_value(pmd.short_reset);
                }
                let pushed = buf.with_ring(|r| r.push(&buf.writer, &e, chain, buf.geo.watermark));
                if pushed.crossed_watermark {
                    smpl.crossed.store(true, Ordering::Relaxed);
                }
                if pushed.full && !buf.geo.drop {
                    smpl.full_pmds.fetch_or(1 << i, Ordering::Relaxed);
                    break;
                }
            }
            if left > 0 {
                buf.with_ring(|r| r.lose(&buf.writer, left));
            }
        }
        if smpl.full_pmds.load(Ordering::Relaxed) != 0 || smpl.crossed.load(Ordering::Relaxed) {
            ovfl
        } else {
            notify
        }
    }

    /// What the buffer asks of the overflow interrupt, taken (lock held).
    pub(super) fn take_smpl_events(&self) -> SmplEvents {
        match self.smpl() {
            Some(s) => {
                let wake = s.crossed.swap(false, Ordering::Relaxed);
                SmplEvents {
                    full_pmds: s.full_pmds.swap(0, Ordering::Relaxed),
                    wake,
                    // A reference more, not the last: this heir holds one
                    // until it is freed.
                    root: match wake {
                        true => s.root.clone(),
                        false => None,
                    },
                }
            }
            None => SmplEvents {
                full_pmds: 0,
                wake: false,
                root: None,
            },
        }
    }

    /// Whether `poll` reports the buffer readable: its unread entries are
    /// at the watermark.
    pub(super) fn smpl_readable(&self) -> bool {
        self.smpl().is_some_and(|s| {
            let b = &*s.buf;
            b.with_ring(|r| r.above_watermark(&b.writer, b.geo.watermark))
        })
    }
}

impl Context {
    /// After a LOAD of a context with a buffer: records the loaded
    /// thread's process id, in the loader's pid namespace, for the entries.
    pub(super) fn smpl_note_pid(&self) {
        let ns = PidNs::of_current();
        {
            let inner = self.inner.lock();
            if let (Some(s), Some(att), Some(ns)) = (inner.smpl(), &inner.attach, &ns) {
                s.pid.store(ns.ids_of(att.task()).1, Ordering::Relaxed);
            }
        }
        // The namespace reference goes after the raw lock.
        drop(ns);
    }
}

impl Context {
    /// `PFM_IOC_SMPL_SETUP`: the context's buffer, once, while UNLOADED.
    /// `EINVAL` for a bad setup, `EBADFD` if loaded, `EBUSY` if the context
    /// has a buffer already; `EPERM` if its
    /// pages are more locked memory than the caller may have
    /// ([`charge_locked`]).
    pub(crate) fn smpl_setup(&self, s: &abi::PfmSmplSetup) -> Result {
        let geo = Geometry::of(s, globals().pmu.impl_mask()).map_err(|_| EINVAL)?;
        // Refused early, before up to 4 MiB are allocated; asked again
        // under the lock below.
        {
            let inner = self.inner.lock();
            if inner.state() != State::Unloaded {
                return Err(crate::ebadfd());
            }
            if inner.smpl().is_some() {
                return Err(EBUSY);
            }
        }
        // Charged before anything is allocated: a refusal leaves nothing.
        let locked = charge_locked(1 + geo.data_pages)?;
        // Everything that may sleep, before the lock.
        let hdr = mm::SharedPage::<HeaderCells>::new()?;
        SmplRing::init(hdr.get(), geo.data_size, geo.entry_size);
        let mut data = KVec::with_capacity(geo.data_pages, GFP_KERNEL)?;
        for _ in 0..geo.data_pages {
            data.push(mm::SharedPage::<DataCells>::new()?, GFP_KERNEL)?;
        }
        let buf = Arc::pin_init(
            pin_init!(SmplBuffer {
                hdr,
                data,
                geo,
                smpl_pmds: s.smpl_pmds,
                writer: Writer::new(),
                mappings: AtomicUsize::new(0),
                producer <- new_irq_raw_spinlock!((), "perfmon_smpl_producer"),
                _locked: locked,
            }),
            GFP_KERNEL_ACCOUNT,
        )?;
        // The lock only for the look (a match on it would hold it through
        // the allocation).
        let (has_ring, has_parts) = {
            let inner = self.inner.lock();
            (inner.msgs.has_ring(), inner.has_parts())
        };
        let mut spare = spare_parts(has_parts)?;
        let mut ring = match has_ring {
            true => None,
            false => Some(KBox::new(Ring::new(), GFP_KERNEL_ACCOUNT)?),
        };
        let mut fresh = Some(KBox::new(CtxSmpl::new(buf, None, 0), GFP_KERNEL_ACCOUNT)?);
        let r = (|| {
            let mut inner = self.inner.lock();
            if inner.state() != State::Unloaded {
                return Err(crate::ebadfd());
            }
            if inner.smpl().is_some() {
                return Err(EBUSY);
            }
            inner.parts_for_adding(&mut spare)?.smpl = fresh.take();
            // The ring PFM_MSG_SMPL_FULL goes through; one another call
            // installed first wins, ours is freed below.
            if let Some(r) = ring.take() {
                ring = inner.msgs.set_ring(r);
            }
            Ok(())
        })();
        // Whatever was not installed is freed after the raw lock.
        drop((fresh, ring, spare));
        r
    }

    /// `mmap` of the buffer: the header page and the data pages, shared
    /// and writable (the tool writes `tail`), one mapping at a time.
    /// `ENODEV` without a buffer; `EINVAL` for another length, or a
    /// mapping that is private or not writable; `EPERM` if executable;
    /// `EBUSY` if a mapping exists.
    pub(super) fn mmap_smpl(&self, vma: &mm::Vma<'_>) -> Result {
        // A reference more, not the last: the context holds one.
        let buf = match self.inner.lock().smpl() {
            Some(s) => s.buf.clone(),
            None => return Err(ENODEV),
        };
        {
            // The header as the kernel knows it, whatever an earlier
            // mapping wrote there; under the producers' lock, as entries
            // are written.
            let _producer = buf.producer.lock();
            buf.with_ring(|r| r.publish(&buf.writer));
        }
        if vma.len() != (1 + buf.geo.data_pages) * PAGE {
            return Err(EINVAL);
        }
        if vma.exec() {
            return Err(EPERM);
        }
        if !vma.shared_writable() {
            return Err(EINVAL);
        }
        // SAFETY: `mappings` is in the buffer, which outlives the VMA:
        // the context holds it (its sampling part is never replaced), and
        // the VMA's file holds the context.
        unsafe { vma.insert_shared_pages(&buf.hdr, &buf.data, &buf.mappings) }
    }
}

/// Charges a buffer of `pages` pages (its header and its data) to the
/// caller as locked memory, as `perf_mmap` charges a ring of as many
/// pages, with the same counters (Documentation/perfmon.rst,
/// "Permissions"): the user's share of `kernel.perf_event_mlock_kb` (per
/// online CPU, shared with the user's perf rings), the rest pinned in the
/// caller's mm (`VmPin`) and held to its `RLIMIT_MEMLOCK` unless
/// `perf_event_paranoid` is -1 or the caller has `CAP_IPC_LOCK`; `EPERM`
/// past it, perf's errno. Perf charges at `mmap`, where it allocates; the
/// module allocates here, so it charges here, and the pages stay charged
/// until they are freed (not at `munmap`: the buffer outlives its
/// mappings until its last context goes).
///
/// Both settings are read from the files opened at module load, never
/// from the caller's root (which a mount namespace of the caller's could
/// fake): if `/proc` could not be read at load, no allowance and paranoid
/// (the strictest reading). The module could keep an allowance of its own
/// (a parameter like `max_attached_per_user`), but then a user would get
/// perf's allowance and the module's; reading perf's setting and charging
/// perf's counter gives the user one budget, as perf's own rings share it.
fn charge_locked(pages: usize) -> Result<mlock::LockedCharge> {
    let g = globals();
    mlock::LockedCharge::charge(|now| {
        let kb = g.mlock_kb.read().ok().flatten().unwrap_or(0);
        let allowance = pfm_smpl::mlock_allowance(kb, mlock::online_cpus());
        let split = pfm_smpl::locked_split(pages, now.user_locked, allowance);
        // perf_is_paranoid(): any level but -1.
        let paranoid = || !matches!(g.paranoid.read(), Ok(Some(p)) if p <= -1);
        if pfm_smpl::over_memlock(split, now.pinned, now.rlimit)
            && paranoid()
            && !mlock::ipc_lock_capable()
        {
            return Err(EPERM);
        }
        Ok((split.user, split.pinned))
    })
}

impl CtxSmpl {
    /// Whether the buffer drops entries when full. A whole program may
    /// sample only into such a buffer: one thread's full buffer would
    /// otherwise have to mask every thread of the program, and the
    /// program's RESTART resume them all (perf's full ring drops too).
    pub(super) fn drops_when_full(&self) -> bool {
        self.buf.geo.drop
    }

    /// What the heirs of root `root` (whose part this is) sample into.
    pub(super) fn for_heirs(&self, root: &SlabArc<Context>) -> FamilySmpl {
        FamilySmpl {
            buf: self.buf.clone(),
            root: root.clone(),
        }
    }
}

impl FamilySmpl {
    /// The part of a new heir whose thread's process id is `pid`: the
    /// root's buffer.
    pub(super) fn heir(&self, pid: u32) -> CtxSmpl {
        CtxSmpl::new(self.buf.clone(), Some(self.root.clone()), pid)
    }
}
