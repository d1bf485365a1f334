//! Sampling buffers (Documentation/perfmon.rst, "Sampling"): a context's
//! buffer set up with `PFM_IOC_SMPL_SETUP`, mapped at `PFM_SMPL_OFFSET`,
//! drained through perf's ring protocol while the monitored thread writes
//! entries, unmapped, split, moved and resized.
//!
//! - `smpl_setup` on pool fds, whatever their state: valid setups (1..=8
//!   data pages mostly, up to 1024 sometimes; random `smpl_pmds` within
//!   the model's PMDs; both policies; watermarks) and an eighth garbage
//!   (each way a setup can be invalid: EINVAL exactly, whatever the
//!   state); every pointer kind (EFAULT). The pool keeps no state: EBADFD
//!   (loaded) and EBUSY (a buffer already) are allowed (a page, sets or a
//!   family beside the buffer are parts of their own, issue 33),
//!   except that a buffer this process set up on the fd (below) makes a
//!   second setup EBUSY or EBADFD, never a success.
//! - `smpl_map`: `mmap` of a pool fd with the right length, protection,
//!   flags and offset mostly, a wrong one sometimes, judged by class (see
//!   [`map_verdict`]): exact where the fuzzer knows the fd's buffer,
//!   lenient (ENODEV, EBUSY, any length) where it does not. A buffer
//!   mapped goes to the actor's list (at most [`MAX_MAPS`]; the oldest is
//!   unmapped), its header checked.
//! - `smpl_drain`: one of the actor's mappings drained with atomics, as
//!   the protocol asks (`head` acquire, entries, `tail` release), each
//!   entry checked (its `seq` is its byte position / 128, an implemented
//!   PMD, a set id below `PFM_MAX_SETS` (the set that counted: a pool
//!   context may have sets beside its buffer), `nvalues` the popcount of
//!   `smpl_pmds`, which is what the setup said when this actor made it, unused values and reserved 0,
//!   timestamps in order and not in the future); an eighth of the time
//!   `tail` is left with garbage instead (the kernel must not trust it:
//!   the next drain of that mapping only resyncs); a third of the time
//!   the context is RESTARTed (a full buffer masks it).
//! - `smpl_unmap`: munmap of a whole mapping (then sometimes mmap again:
//!   allowed, or EBUSY), or of a part, which must fail (EINVAL: the
//!   mapping cannot be split) and leave the mapping.
//! - `smpl_remap`: partial mprotect (EINVAL), mprotect of the whole to
//!   read-only and back, executable (EACCES); mremap growing (EFAULT),
//!   shrinking (EINVAL), with `MREMAP_DONTUNMAP` (EINVAL), duplicating
//!   (old length 0: EFAULT), in place; a move of the whole mapping, and
//!   `MADV_DOFORK` then a fork, each followed by a second mmap through
//!   the same fd that must fail with EBUSY (the first mapping still
//!   exists): a success is the finding "one mapping at a time" broken.
//! - `arm` (ops.rs) gives a third of its contexts a buffer (with or
//!   without event sets), mapped, before LOAD: their overflows write entries while other
//!   actors close the fd (the mapping keeps the context), the thread
//!   exits, the tool dies (zombies; the munmap releases the file then)
//!   and the buffer fills and masks the context. A LOAD with inheritance
//!   or of a whole process of such a context must not succeed (EBUSY).
//!
//! What the fuzzer knows of a pool fd's buffer: each process keeps, per fd
//! number, the buffer it set up (or mapped) on it and a generation that
//! moves when a pool fd is closed ([`close_pool_fd`]): a record is believed
//! only with the generation it was made in, and a result is dismissed
//! (counted as a reused fd) if the generation moved during the call.
//! Mappings are kept by the actor that made them and unmapped when it
//! ends (a short thread's exit), or by the process's exit.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::actor::*;
use super::model::model;
use super::shared::*;
use crate::sys::{self, abi, FileMap, PAGE};

/// Mappings an actor keeps.
pub(super) const MAX_MAPS: usize = 4;
/// Bytes per entry without a call chain.
const ENTRY: usize = std::mem::size_of::<abi::PfmSmplEntry>();

/// Bytes per entry with `depth` return addresses: the ABI's rule, the
/// smallest power of two holding both.
fn entry_size_for(depth: u32) -> u64 {
    (ENTRY as u64 + 8 * u64::from(depth)).next_power_of_two()
}
/// The buffer's mmap offset.
const OFF: i64 = abi::PFM_SMPL_OFFSET as i64;
const RW: i32 = libc::PROT_READ | libc::PROT_WRITE;
/// Header fields (byte offsets in the first page).
const H_DATA_SIZE: usize = std::mem::offset_of!(abi::PfmSmplHdr, data_size);
const H_HEAD: usize = std::mem::offset_of!(abi::PfmSmplHdr, head);
const H_TAIL: usize = std::mem::offset_of!(abi::PfmSmplHdr, tail);
const H_WRITTEN: usize = std::mem::offset_of!(abi::PfmSmplHdr, written);
const H_LOST: usize = std::mem::offset_of!(abi::PfmSmplHdr, lost);
/// Slack for the entries' timestamps (`ktime_get_mono_fast_ns` in the
/// kernel, `clock_gettime` here).
const CLOCK_SLACK_NS: u64 = 10_000_000;

/// Hostile header writes (`Config::smpl_hostile`): `smpl_drain` sometimes
/// writes garbage into `head`, `written` or `lost`, which the kernel reads
/// back; every check of the buffers is lenient then.
pub(super) static HOSTILE: AtomicBool = AtomicBool::new(false);

// ---- what the process knows of its fds' buffers ----

/// Fd numbers tracked (pool numbers are below 1000).
const FD_SLOTS: usize = 1024;
/// Per fd number: the buffer set up (or mapped) on it, `gen << 32 | 1 <<
/// 31 | (chain_depth + 1, 0 if not known) << 16 | data_pages`, believed
/// while [`sys::fd_gen`] is still `gen`.
static SMPL_REC: [AtomicU64; FD_SLOTS] = [const { AtomicU64::new(0) }; FD_SLOTS];

pub(super) use crate::sys::fd_gen;

/// Closes pool fd `fd` (taken out of the pool): [`sys::close`] moves the
/// number's generation, so what the process knew of its buffer no longer
/// holds for the number.
pub(super) fn close_pool_fd(fd: i32) -> Result<(), i32> {
    sys::close(fd)
}

/// The data pages of the buffer of `fd` (generation `gen`), if known.
fn record(fd: i32, gen: Option<u32>) -> Option<u32> {
    let gen = gen?;
    let i = usize::try_from(fd).ok()?;
    let r = SMPL_REC.get(i)?.load(Ordering::Acquire);
    let valid = r & 1 << 31 != 0 && (r >> 32) as u32 == gen && fd_gen(fd) == Some(gen);
    valid.then_some((r & 0xffff) as u32)
}

/// The call-chain depth of the buffer of `fd` (generation `gen`), if
/// known (set up by this process, not only mapped).
fn record_depth(fd: i32, gen: Option<u32>) -> Option<u32> {
    record(fd, gen)?;
    let r = SMPL_REC
        .get(usize::try_from(fd).ok()?)?
        .load(Ordering::Acquire);
    ((r >> 16) as u8 as u32).checked_sub(1)
}

fn set_record(fd: i32, gen: Option<u32>, pages: u32, depth: Option<u32>) {
    if let (Some(gen), Some(rec)) = (gen, usize::try_from(fd).ok().and_then(|i| SMPL_REC.get(i))) {
        let depth = depth.map_or(0, |d| u64::from(d.min(254) + 1));
        rec.store(
            u64::from(gen) << 32 | 1 << 31 | depth << 16 | u64::from(pages & 0xffff),
            Ordering::Release,
        );
    }
}

/// Whether `size` is an entry size the kernel may publish.
fn legal_entry_size(size: u64) -> bool {
    size.is_power_of_two()
        && (ENTRY as u64..=entry_size_for(abi::PFM_SMPL_MAX_CHAIN)).contains(&size)
}

/// What a buffer does when full (`PFM_SMPL_DROP`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Policy {
    /// Masks the context until RESTART.
    Mask,
    /// Drops the entry and counts it.
    Drop,
}

/// One of an actor's mappings of a buffer.
pub(super) struct Sampled {
    map: FileMap,
    /// The fd it was mapped through, and that number's generation then.
    fd: i32,
    gen: Option<u32>,
    pages: u32,
    /// Bytes per entry, as the header said when it was mapped.
    entry_size: u64,
    /// Per PMD, what its entries record, when this actor set the buffer up.
    pmds: Option<Box<[u64; abi::PFM_MAX_PMDS]>>,
    /// `tail` was left with garbage: the next drain only resyncs.
    garbage: bool,
    /// The header's kernel fields (`head`, `written`, `lost`) were
    /// overwritten with garbage: the page shows it until the kernel
    /// publishes its own values again, so this mapping's drains stay
    /// lenient.
    hostile: bool,
    /// What the last drain left in `tail` (None: not this mapping's
    /// drain, or garbage since).
    last_tail: Option<u64>,
}

/// A setup this actor made, for the entries of a later mapping of it.
pub(super) struct Setup {
    fd: i32,
    gen: Option<u32>,
    pmds: Box<[u64; abi::PFM_MAX_PMDS]>,
}

/// Setups an actor remembers.
const MAX_SETUPS: usize = 8;

/// What a mmap may answer ([`map_verdict`]).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct MapVerdict {
    /// The errnos it may fail with.
    pub(super) errs: Vec<i32>,
    /// Whether it may succeed.
    pub(super) ok: bool,
}

/// What `mmap(NULL, len, prot, flags, fd, off)` may answer for a perfmon
/// fd of access mode `acc` (`O_ACCMODE` bits; None: unknown) whose buffer
/// has `pages` data pages (None: unknown, or no buffer), in the order the
/// kernel checks: the offset's alignment and the length (EINVAL), the
/// memory lock (MAP_LOCKED: EPERM, EAGAIN), the file's access mode
/// (EACCES), a noexec mount (EPERM), then perfmon: at `PFM_SMPL_OFFSET`
/// no buffer (ENODEV), another length (EINVAL), executable (EPERM),
/// private or not writable (EINVAL), mapped already (EBUSY); at 0 the
/// counter page (another length EINVAL, writable or executable EPERM; a
/// context with a buffer has its page too, issue 33); any other offset
/// EINVAL. ENOMEM always.
pub(super) fn map_verdict(
    len: usize,
    prot: i32,
    flags: i32,
    off: i64,
    acc: Option<i32>,
    pages: Option<u32>,
) -> MapVerdict {
    let fail = |errs: Vec<i32>| MapVerdict { errs, ok: false };
    if off % PAGE as i64 != 0 || len == 0 {
        return fail(vec![libc::EINVAL]);
    }
    let mut errs = vec![libc::ENOMEM];
    if flags & libc::MAP_LOCKED != 0 {
        errs.extend_from_slice(&[libc::EPERM, libc::EAGAIN]);
    }
    let Some(acc) = acc else {
        // The fd is gone (EBADF) or its mode unknown: anything perfmon
        // or the VFS may say.
        errs.extend_from_slice(&[
            libc::EACCES,
            libc::EINVAL,
            libc::ENODEV,
            libc::EPERM,
            libc::EBUSY,
        ]);
        return MapVerdict { errs, ok: true };
    };
    let readable = acc == libc::O_RDONLY || acc == libc::O_RDWR;
    let writable = acc == libc::O_WRONLY || acc == libc::O_RDWR;
    let kind = flags & 0xf;
    let shared = kind == libc::MAP_SHARED || kind == libc::MAP_SHARED_VALIDATE;
    let write = prot & libc::PROT_WRITE != 0;
    let exec = prot & libc::PROT_EXEC != 0;
    if (shared && write && !writable) || !readable {
        errs.push(libc::EACCES);
        return fail(errs);
    }
    if exec {
        // A noexec mount refuses it before perfmon does.
        errs.push(libc::EPERM);
    }
    let npages = sys::page_round(len) / PAGE;
    let mut ok = false;
    if off == OFF {
        // The data pages this length would fit.
        let fits = npages
            .checked_sub(1)
            .filter(|&p| p.is_power_of_two() && p <= abi::PFM_SMPL_MAX_PAGES as usize);
        let len_ok = match pages {
            Some(p) => fits == Some(p as usize),
            None => {
                // No buffer, or one of another size.
                errs.extend_from_slice(&[libc::ENODEV, libc::EINVAL]);
                fits.is_some()
            }
        };
        if !len_ok {
            errs.push(libc::EINVAL);
        } else if exec {
            errs.push(libc::EPERM);
        } else if !(shared && write) {
            errs.push(libc::EINVAL);
        } else {
            errs.push(libc::EBUSY);
            ok = true;
        }
    } else if off == 0 {
        if npages != 1 {
            errs.push(libc::EINVAL);
        } else if write || exec {
            errs.push(libc::EPERM);
        } else {
            // The page and a buffer are parts of their own (issue 33):
            // nothing of the buffer refuses it.
            ok = true;
        }
    } else {
        errs.push(libc::EINVAL);
    }
    errs.sort_unstable();
    errs.dedup();
    MapVerdict { errs, ok }
}

/// An entry read from the ring: the ABI's layout as 64-bit words.
fn entry_of(w: &[u64; ENTRY / 8]) -> abi::PfmSmplEntry {
    let mut values = [0u64; abi::PFM_SMPL_MAX_VALUES];
    values.copy_from_slice(&w[8..]);
    abi::PfmSmplEntry {
        tid: w[0] as u32,
        pid: (w[0] >> 32) as u32,
        cpu: w[1] as u16,
        ovfl_pmd: (w[1] >> 16) as u16,
        set: (w[1] >> 32) as u16,
        nvalues: (w[1] >> 48) as u16,
        seq: w[2],
        last_reset_val: w[3],
        ip: w[4],
        tstamp: w[5],
        smpl_pmds: w[6],
        chain_len: w[7] as u16,
        chain_flags: (w[7] >> 16) as u16,
        pad: (w[7] >> 32) as u32,
        values,
    }
}

/// What is wrong with entry `e` found at byte position `pos` of a buffer
/// of `entry_size`-byte entries (None: it is sane). `pmds`: what the setup
/// asked each PMD's entries to record, if known; `prev`: the previous
/// entry's timestamp in this drain; `now`: `CLOCK_MONOTONIC` after `head`
/// was read.
fn entry_fault(
    e: &abi::PfmSmplEntry,
    pos: u64,
    entry_size: u64,
    impl_pmds: u64,
    pmds: Option<&[u64; abi::PFM_MAX_PMDS]>,
    prev: u64,
    now: u64,
) -> Option<String> {
    let n = e.nvalues as usize;
    let pmd = e.ovfl_pmd as usize;
    if e.seq != pos / entry_size {
        return Some(format!("seq {} at byte {pos}", e.seq));
    }
    if pmd >= 64 || impl_pmds & 1 << pmd == 0 {
        return Some(format!("ovfl_pmd {pmd} is not implemented"));
    }
    // A chain fits its slot (none without room), with defined flags.
    let room = ((entry_size as usize - ENTRY) / 8).min(abi::PFM_SMPL_MAX_CHAIN as usize);
    let flags =
        abi::PFM_SMPL_CHAIN_TRUNCATED | abi::PFM_SMPL_CHAIN_BROKEN | abi::PFM_SMPL_CHAIN_NONE;
    if usize::from(e.set) >= abi::PFM_MAX_SETS
        || usize::from(e.chain_len) > room
        || e.chain_flags & !flags != 0
        || (room == 0 && e.chain_flags != 0)
        || e.pad != 0
    {
        return Some(format!(
            "set {} chain_len {} (room {room}) chain_flags {:#x} pad {:#x}",
            e.set, e.chain_len, e.chain_flags, e.pad
        ));
    }
    if e.smpl_pmds & !impl_pmds != 0
        || n != e.smpl_pmds.count_ones() as usize
        || n > abi::PFM_SMPL_MAX_VALUES
    {
        return Some(format!("nvalues {n} smpl_pmds {:#x}", e.smpl_pmds));
    }
    if let Some(p) = pmds {
        if e.smpl_pmds != p[pmd] {
            return Some(format!(
                "PMD {pmd}'s entry records {:#x}, the setup asked {:#x}",
                e.smpl_pmds, p[pmd]
            ));
        }
    }
    if e.values[n..].iter().any(|&v| v != 0) {
        return Some(format!("values past nvalues {n}: {:x?}", e.values));
    }
    if e.tstamp == 0
        || e.tstamp.saturating_add(CLOCK_SLACK_NS) < prev
        || e.tstamp > now.saturating_add(CLOCK_SLACK_NS)
    {
        return Some(format!(
            "tstamp {} (previous entry's {prev}, now {now})",
            e.tstamp
        ));
    }
    None
}

/// A random valid `smpl_pmds` mask: at most 8 of the model's PMDs.
fn pmd_subset(rng: &mut crate::rng::Rng) -> u64 {
    let m = model();
    let k = rng.below(m.pmds.len().min(abi::PFM_SMPL_MAX_VALUES) as u64 + 1);
    (0..k).fold(0u64, |mask, _| mask | 1 << rng.pick(&m.pmds))
}

/// Data pages: 1..=8 mostly, up to 1024 sometimes.
fn pick_pages(rng: &mut crate::rng::Rng) -> u32 {
    match rng.weighted(&[40, 25, 15, 10, 7, 3]) {
        0 => 1,
        1 => 2,
        2 => 4,
        3 => 8,
        4 => 1 << rng.range(4, 7),
        _ => 1 << rng.range(8, 10),
    }
}

/// What a drain found ([`drain_ring`]).
#[derive(Debug, Default)]
struct Drained {
    /// Entries read (and consumed).
    n: u64,
    /// Of them, entries with a call chain read (`chain_len` > 0), and
    /// entries whose walk met a frame it could not read (`BROKEN`).
    chained: u64,
    broken: u64,
    /// The first thing wrong (header or entry).
    fault: Option<String>,
    /// `tail` was garbage (or the drain lenient): set to `head`, nothing
    /// read.
    resynced: bool,
    tail: u64,
    head: u64,
    written: u64,
    lost: u64,
    /// What the drain left in `tail`.
    stored: u64,
}

/// Drains the buffer mapped at `map` (`pages` data pages) as the protocol
/// asks: `head` (acquire), the entries from `tail` to it, `tail`
/// (release). Checks the header (version, entry size, data size; `head` an
/// entry's position, `written` at least the entries before it) and every
/// entry ([`entry_fault`]). A `tail` that is not an entry's position
/// between `head - data_size` and `head` (garbage, this actor's or a
/// previous mapper's), or a `lenient` drain (after the actor wrote
/// garbage there), is set to `head` instead, nothing read: the kernel must
/// not have trusted it, and nothing in particular is expected of the
/// entries then. `last_tail`: what this mapping's previous drain left in
/// `tail`, if it was this one's: then `tail` must still be that (only the
/// tool writes it) and `head` at most the data past it (the kernel never
/// writes over unread entries). Every access to the mapping is atomic.
fn drain_ring(
    map: &FileMap,
    pages: u32,
    entry_size: u64,
    pmds: Option<&[u64; abi::PFM_MAX_PMDS]>,
    impl_pmds: u64,
    lenient: bool,
    last_tail: Option<u64>,
) -> Drained {
    let data_size = u64::from(pages) * PAGE as u64;
    let w0 = map.load(0, Ordering::Relaxed);
    let ds = map.load(H_DATA_SIZE, Ordering::Relaxed);
    let head = map.load(H_HEAD, Ordering::Acquire);
    let now = sys::monotonic_ns();
    let written = map.load(H_WRITTEN, Ordering::Relaxed);
    let tail = map.load(H_TAIL, Ordering::Relaxed);
    let lost = map.load(H_LOST, Ordering::Relaxed);
    let mut d = Drained {
        tail,
        head,
        written,
        lost,
        ..Drained::default()
    };
    let es = entry_size;
    if w0 as u32 != abi::PFM_SMPL_VERSION || w0 >> 32 != es || ds != data_size {
        d.fault = Some(format!(
            "header: version {} entry_size {} data_size {ds} (mapped {pages} data pages)",
            w0 as u32,
            w0 >> 32
        ));
    } else if head % es != 0 || written < head / es {
        d.fault = Some(format!("header: head {head} written {written}"));
    }
    let valid = tail % es == 0 && tail <= head && head - tail <= data_size;
    match last_tail {
        _ if d.fault.is_some() || lenient => {}
        Some(t) if t != tail => {
            d.fault = Some(format!(
                "tail {tail} changed behind the tool's back (it wrote {t}; head {head})"
            ))
        }
        Some(_) if !valid => {
            d.fault = Some(format!(
                "head {head} is more than the data ({data_size}) past the tool's tail {tail}: unread entries written over"
            ))
        }
        _ => {}
    }
    if lenient || !valid || d.fault.is_some() {
        d.stored = head - head % es;
        map.store(H_TAIL, d.stored, Ordering::Release);
        d.resynced = !valid;
        return d;
    }
    let mut prev = 0u64;
    let mut pos = tail;
    while pos < head {
        let at = PAGE + (pos % data_size) as usize;
        let mut w = [0u64; ENTRY / 8];
        for (k, word) in w.iter_mut().enumerate() {
            *word = map.load(at + 8 * k, Ordering::Relaxed);
        }
        let e = entry_of(&w);
        if d.fault.is_none() {
            d.fault = entry_fault(&e, pos, es, impl_pmds, pmds, prev, now)
                .map(|f| format!("entry at byte {pos} (tail {tail}, head {head}): {f}"));
        }
        prev = prev.max(e.tstamp);
        pos += es;
        d.n += 1;
        d.chained += u64::from(e.chain_len > 0);
        d.broken += u64::from(e.chain_flags & abi::PFM_SMPL_CHAIN_BROKEN != 0);
    }
    // After the reads: the kernel may write over them now.
    map.store(H_TAIL, head, Ordering::Release);
    d.stored = head;
    d
}

impl Actor {
    /// A valid setup: its argument (`smpl_pmds` filled for the PMDs
    /// `favour` names, and randomly for the others).
    fn valid_setup(&mut self, pages: u32, favour: u64) -> abi::PfmSmplSetup {
        let m = model();
        let mut s = abi::PfmSmplSetup {
            data_pages: pages,
            flags: if self.rng.chance(1, 3) {
                abi::PFM_SMPL_DROP
            } else {
                0
            },
            ..Default::default()
        };
        // Call chains now and then: the walk of a fuzzing thread's stack,
        // whose frame pointer is whatever its code left in rbp.
        if self.rng.chance(1, 3) {
            s.chain_depth = self.rng.below(u64::from(abi::PFM_SMPL_MAX_CHAIN) + 1) as u32;
        }
        let data_size = u64::from(pages) * PAGE as u64;
        s.watermark = match self.rng.below(5) {
            0 | 1 => 0,
            2 => data_size as u32,
            3 => (ENTRY as u64 * self.rng.range(1, data_size / ENTRY as u64)) as u32,
            _ => self.rng.range(1, data_size) as u32,
        };
        for &p in &m.pmds {
            if favour & 1 << p != 0 || self.rng.chance(1, 3) {
                s.smpl_pmds[p as usize] = pmd_subset(&mut self.rng);
            }
        }
        s
    }

    /// Remembers setup `s`, just made on `fd`: the process's record, and
    /// this actor's copy of what its entries record.
    fn remember_setup(&mut self, fd: i32, gen: Option<u32>, s: &abi::PfmSmplSetup) {
        shared().smpl_setups.fetch_add(1, Ordering::Relaxed);
        set_record(fd, gen, s.data_pages, Some(s.chain_depth));
        if self.setups.len() >= MAX_SETUPS {
            self.setups.remove(0);
        }
        self.setups.push(Setup {
            fd,
            gen,
            pmds: Box::new(s.smpl_pmds),
        });
    }

    /// An anomaly about pool fd `fd`, unless the number was closed (and
    /// perhaps reused) since generation `gen` was read.
    fn smpl_anomaly(&mut self, op: Op, fd: i32, gen: Option<u32>, what: String) {
        if gen.is_some() && fd_gen(fd) != gen {
            shared().reused.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.anomaly(op, what);
    }

    /// `PFM_IOC_SMPL_SETUP` on a pool fd.
    pub(super) fn op_smpl_setup(&mut self) {
        let (_, fd) = self.pick_fd();
        let gen = fd_gen(fd);
        let known = record(fd, gen);
        let m = model();
        let pages = pick_pages(&mut self.rng);
        let mut s = self.valid_setup(pages, 0);
        let garbage = self.rng.chance(1, 8).then(|| self.rng.below(8));
        // A PMD number below `below` (64, or `PFM_MAX_PMDS` where it
        // indexes `smpl_pmds`) that the model does not implement; `None`
        // if it implements them all.
        let unimpl = |rng: &mut crate::rng::Rng, below: u64| {
            let all = if below >= 64 {
                u64::MAX
            } else {
                (1 << below) - 1
            };
            if m.impl_pmds & all == all {
                return None;
            }
            let mut b = rng.below(below);
            while m.impl_pmds & 1 << b != 0 {
                b = (b + 1) % below;
            }
            Some(b)
        };
        match garbage {
            Some(0) => {
                s.data_pages = self.rng.pick(&[
                    0u32,
                    3,
                    5,
                    6,
                    7,
                    12,
                    100,
                    1000,
                    1023,
                    1025,
                    2048,
                    4096,
                    1 << 31,
                    u32::MAX,
                ])
            }
            Some(1) => s.flags |= self.unknown_bit(abi::PFM_SMPL_MASK),
            Some(2) => s.pad = self.rng.interesting_u32() | 1,
            Some(3) => match self.rng.below(3) {
                0 => s.pad2 = self.rng.interesting_u32() | 1,
                1 => s.chain_depth = abi::PFM_SMPL_MAX_CHAIN + 1 + self.rng.below(1 << 20) as u32,
                _ => s.reserved[self.rng.below(3) as usize] = self.rng.interesting_u64() | 1,
            },
            Some(4) => {
                // An implemented PMD's entries would record one that is not.
                let n = self.rng.pick(&m.pmds) as usize;
                match unimpl(&mut self.rng, 64) {
                    Some(b) => s.smpl_pmds[n] |= 1 << b,
                    None => s.pad = 1,
                }
            }
            Some(5) => {
                // More than PFM_SMPL_MAX_VALUES (or unimplemented ones).
                let n = self.rng.pick(&m.pmds) as usize;
                s.smpl_pmds[n] = u64::MAX >> self.rng.below(55);
            }
            Some(6) => {
                // An unimplemented PMD's entries (`smpl_pmds` has a slot
                // per PMD number below `PFM_MAX_PMDS`).
                match unimpl(&mut self.rng, abi::PFM_MAX_PMDS as u64) {
                    Some(n) => s.smpl_pmds[n as usize] = 1 << self.rng.pick(&m.pmds),
                    None => s.pad = 1,
                }
            }
            Some(_) => {
                let data_size = u64::from(s.data_pages) * PAGE as u64;
                s.watermark = self.rng.range(data_size + 1, u64::from(u32::MAX)) as u32;
            }
            None => {}
        }
        let p = self.pick_ptr(90);
        let addr = self.place(p, std::mem::size_of::<abi::PfmSmplSetup>());
        self.arena.put(addr, s);
        self.note(format_args!(
            " fd={fd} pages={} flags={:#x} wm={} ptr={p:?} garbage={garbage:?} known={known:?}",
            s.data_pages, s.flags, s.watermark
        ));
        let r = sys::ioctl(fd, abi::PFM_IOC_SMPL_SETUP, addr);
        let r = self.res(Op::SmplSetup, r);
        if r.is_ok() && p == Ptr::Good && garbage.is_none() {
            self.remember_setup(fd, gen, &s);
        }
        if !(0..1000).contains(&fd) {
            return;
        }
        if !p.readable() {
            return self.expect_err(
                Op::SmplSetup,
                r,
                &[libc::EFAULT],
                "the argument is not readable",
            );
        }
        // An unprivileged worker's buffers are locked memory, refused
        // past its share and RLIMIT_MEMLOCK as perf refuses a ring
        // (EPERM); root has CAP_IPC_LOCK.
        let memlock: &[i32] = if self.uid != 0 { &[libc::EPERM] } else { &[] };
        if p == Ptr::ReadOnly {
            // The read-only page's random bytes: almost always garbage.
            let errs = [libc::EINVAL, libc::EBADFD, libc::EBUSY, libc::ENOMEM];
            return self.allow(Op::SmplSetup, r, &[&errs[..], memlock].concat());
        }
        if garbage.is_some() {
            return self.expect_err(
                Op::SmplSetup,
                r,
                &[libc::EINVAL],
                "bad pages, flags, pad, reserved, smpl_pmds or watermark",
            );
        }
        let errs = [&[libc::EBADFD, libc::EBUSY, libc::ENOMEM][..], memlock].concat();
        match (r, known) {
            (Ok(_), Some(pages)) => self.smpl_anomaly(
                Op::SmplSetup,
                fd,
                gen,
                format!("a second setup succeeded (fd {fd} has a buffer of {pages} pages)"),
            ),
            (Err(e), _) if !errs.contains(&e) && !ALWAYS.contains(&e) => self.smpl_anomaly(
                Op::SmplSetup,
                fd,
                gen,
                format!(
                    "unexpected errno {} for a valid setup (allowed: ok {})",
                    perfmon::errno_name(e),
                    names(&errs)
                ),
            ),
            _ => {}
        }
    }

    /// Keeps mapping `map` of `fd`'s buffer of `pages` data pages (the
    /// oldest is unmapped if the list is full), after checking its header.
    fn keep_map(
        &mut self,
        op: Op,
        map: FileMap,
        fd: i32,
        gen: Option<u32>,
        pages: u32,
        pmds: Option<Box<[u64; abi::PFM_MAX_PMDS]>>,
    ) {
        shared().smpl_maps.fetch_add(1, Ordering::Relaxed);
        let w0 = map.load(0, Ordering::Relaxed);
        let data_size = map.load(H_DATA_SIZE, Ordering::Relaxed);
        let hostile = HOSTILE.load(Ordering::Relaxed);
        // The entry size: the setup's rule for its depth, when this process
        // made the setup, and one the kernel may publish in any case.
        let entry_size = w0 >> 32;
        let want = record_depth(fd, gen).map(entry_size_for);
        if !hostile
            && (w0 as u32 != abi::PFM_SMPL_VERSION
                || !legal_entry_size(entry_size)
                || want.is_some_and(|w| w != entry_size)
                || data_size != u64::from(pages) * PAGE as u64)
        {
            self.anomaly(
                op,
                format!(
                    "new mapping of {pages} data pages: version {} entry_size {} data_size {data_size}",
                    w0 as u32,
                    w0 >> 32
                ),
            );
        }
        if self.maps.len() >= MAX_MAPS {
            let old = self.maps.remove(0);
            let r = old.map.unmap();
            self.res(op, r).ok();
        }
        let entry_size = if legal_entry_size(entry_size) {
            entry_size
        } else {
            want.unwrap_or(ENTRY as u64)
        };
        self.maps.push(Sampled {
            map,
            fd,
            gen,
            pages,
            entry_size,
            pmds,
            garbage: false,
            hostile: false,
            last_tail: None,
        });
    }

    /// Whether this actor holds a mapping made through `fd` in generation
    /// `gen` (then a new mapping of it must be refused, EBUSY).
    fn holds(&self, fd: i32, gen: Option<u32>) -> bool {
        gen.is_some() && self.maps.iter().any(|s| s.fd == fd && s.gen == gen)
    }

    /// `mmap` of a pool fd's buffer, right or wrong.
    pub(super) fn op_smpl_map(&mut self) {
        let fd = if !self.setups.is_empty() && self.rng.chance(1, 3) {
            // One this actor set up: its size is known.
            let s = &self.setups[self.rng.below(self.setups.len() as u64) as usize];
            self.cur_fd = s.fd;
            s.fd
        } else {
            self.pick_fd().1
        };
        let gen = fd_gen(fd);
        let known = record(fd, gen);
        let held = self.holds(fd, gen);
        let acc = sys::fcntl(fd, libc::F_GETFL, 0)
            .ok()
            .map(|f| f as i32 & libc::O_ACCMODE);
        // The number may be a stale pool slot's that another file (a pipe
        // of a scenario, a /proc file) holds now: `mmap` of it says ENODEV
        // (no mmap) or EACCES (its mode), whatever file holds the number
        // when `anomaly` looks again afterwards.
        let perfmon_before = is_perfmon_fd(fd);
        self.calls += 1;
        let guess = known.unwrap_or_else(|| self.rng.pick(&[1u32, 1, 2, 4, 8, 16]));
        let right = (1 + guess as usize) * PAGE;
        let len = match self.rng.weighted(&[70, 6, 6, 6, 4, 3, 5]) {
            0 => right,
            // Rounded up to the right length.
            1 => right - self.rng.range(1, PAGE as u64 - 1) as usize,
            2 => right - PAGE,
            3 => right + PAGE,
            4 => PAGE,
            5 => 0,
            _ => (1 + 2 * guess as usize) * PAGE,
        };
        let prot = [
            RW,
            libc::PROT_READ,
            libc::PROT_WRITE,
            libc::PROT_NONE,
            RW | libc::PROT_EXEC,
            libc::PROT_READ | libc::PROT_EXEC,
        ][self.rng.weighted(&[80, 5, 4, 3, 4, 4])];
        let flags = [
            libc::MAP_SHARED,
            libc::MAP_PRIVATE,
            libc::MAP_SHARED_VALIDATE,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            libc::MAP_SHARED | libc::MAP_LOCKED,
            libc::MAP_SHARED | libc::MAP_NORESERVE,
        ][self.rng.weighted(&[75, 8, 5, 5, 3, 4])];
        let off = [
            OFF,
            0,
            OFF + PAGE as i64,
            OFF - PAGE as i64,
            OFF + 1,
            2 * OFF,
        ][self.rng.weighted(&[85, 5, 3, 3, 2, 2])];
        let mut v = map_verdict(len, prot, flags, off, acc, known);
        // The actor's own mapping of the buffer still exists: a second one
        // of the buffer is EBUSY. The counter page (offset 0) is a part of
        // its own, mapped beside the buffer's mapping (this was finding 6:
        // a read-only one-page map at offset 0 while a buffer mapping was
        // held, about 1 in 5,000 held-fd mmaps).
        let busy = held && off == OFF && v.ok;
        v.ok &= !(held && off == OFF);
        self.note(format_args!(
            " fd={fd} len={len} prot={prot:#x} flags={flags:#x} off={off:#x} known={known:?} held={held}"
        ));
        let r = FileMap::map(fd, len, prot, flags, off);
        let rr = r.as_ref().map(|m| m.addr() as i64).map_err(|e| *e);
        self.res(Op::SmplMap, rr).ok();
        if !(0..1000).contains(&fd) {
            return;
        }
        let map = match r {
            Err(e) => {
                if !perfmon_before {
                    shared().reused.fetch_add(1, Ordering::Relaxed);
                } else if !v.errs.contains(&e) && !ALWAYS.contains(&e) {
                    self.smpl_anomaly(
                        Op::SmplMap,
                        fd,
                        gen,
                        format!(
                            "unexpected errno {} (buffer {known:?}, access mode {acc:?}; allowed: {}{})",
                            perfmon::errno_name(e),
                            if v.ok { "ok " } else { "" },
                            names(&v.errs)
                        ),
                    );
                }
                return;
            }
            Ok(m) => m,
        };
        if !v.ok {
            if busy && fd_gen(fd) == gen {
                record_finding(
                    6,
                    &format!(
                        "{} #{} smpl_map: fd {fd}: a second mapping while the actor's still exists",
                        self.name, self.n
                    ),
                );
            } else {
                self.smpl_anomaly(
                    Op::SmplMap,
                    fd,
                    gen,
                    format!("succeeded but must fail (buffer {known:?}, access mode {acc:?}; allowed: {})", names(&v.errs)),
                );
            }
            let r = map.unmap();
            self.res(Op::SmplMap, r).ok();
            return;
        }
        let pages = (map.len() / PAGE).saturating_sub(1) as u32;
        if off != OFF
            || map.prot() != RW
            || flags & 0xf == libc::MAP_PRIVATE
            || !sys::clear_of_arenas(map.addr(), map.len())
        {
            // The counter page, or a buffer this actor does not read.
            let r = map.unmap();
            self.res(Op::SmplMap, r).ok();
            return;
        }
        if known.is_none() && fd_gen(fd) == gen {
            set_record(fd, gen, pages, None);
        }
        let pmds = self
            .setups
            .iter()
            .find(|s| s.fd == fd && s.gen == gen && gen.is_some())
            .map(|s| s.pmds.clone());
        self.keep_map(Op::SmplMap, map, fd, gen, pages, pmds);
    }

    /// Drains mapping `i` ([`drain_ring`]), counts and reports what it
    /// found. Returns the entries read.
    fn drain(&mut self, op: Op, i: usize) -> u64 {
        let s = &self.maps[i];
        let hostile = s.hostile;
        let d = drain_ring(
            &s.map,
            s.pages,
            s.entry_size,
            s.pmds.as_deref(),
            model().impl_pmds,
            s.garbage || hostile,
            s.last_tail,
        );
        let fd = s.fd;
        self.maps[i].garbage = false;
        self.maps[i].last_tail = (!hostile).then_some(d.stored);
        self.note(format_args!(
            " drained {} (tail {} head {} written {} lost {}{})",
            d.n,
            d.tail,
            d.head,
            d.written,
            d.lost,
            if d.resynced { ", resynced" } else { "" }
        ));
        if d.resynced {
            shared().smpl_resyncs.fetch_add(1, Ordering::Relaxed);
        }
        shared().smpl_entries.fetch_add(d.n, Ordering::Relaxed);
        shared()
            .smpl_chained
            .fetch_add(d.chained, Ordering::Relaxed);
        shared().smpl_broken.fetch_add(d.broken, Ordering::Relaxed);
        if let (Some(f), false) = (d.fault, hostile) {
            self.anomaly(op, format!("mapping of fd {fd}: {f}"));
        }
        d.n
    }

    /// Drains one of the actor's mappings; sometimes leaves garbage in
    /// `tail`, sometimes RESTARTs the context.
    pub(super) fn op_smpl_drain(&mut self) {
        if self.maps.is_empty() {
            return;
        }
        let i = self.rng.below(self.maps.len() as u64) as usize;
        self.drain(Op::SmplDrain, i);
        let s = &self.maps[i];
        let (fd, gen) = (s.fd, s.gen);
        if self.rng.chance(1, 8) {
            // The kernel must not trust it (a tail ahead of head, too far
            // behind it, or not an entry's position).
            let head = s.map.load(H_HEAD, Ordering::Acquire);
            let data_size = u64::from(s.pages) * PAGE as u64;
            let es = s.entry_size;
            let bad = match self.rng.below(6) {
                0 => u64::MAX,
                1 => head.wrapping_add(es),
                2 => head.wrapping_sub(data_size + es),
                3 => head.wrapping_sub(es / 2),
                4 => 1 << self.rng.range(20, 63),
                _ => self.rng.next_u64(),
            };
            s.map.store(H_TAIL, bad, Ordering::Release);
            self.maps[i].garbage = true;
            self.maps[i].last_tail = None;
            self.note(format_args!(" tail={bad:#x}"));
        }
        if HOSTILE.load(Ordering::Relaxed) && self.rng.chance(1, 16) {
            let s = &self.maps[i];
            let (field, v) = match self.rng.below(4) {
                0 => (H_HEAD, PAGE as u64 - 8),
                1 => (H_HEAD, self.rng.next_u64()),
                2 => (H_WRITTEN, u64::MAX),
                _ => (H_LOST, u64::MAX),
            };
            s.map.store(field, v, Ordering::Release);
            self.maps[i].garbage = true;
            self.maps[i].hostile = true;
            self.maps[i].last_tail = None;
            self.note(format_args!(" hostile {field}={v:#x}"));
        }
        if self.rng.chance(1, 3) && fd_gen(fd) == gen && gen.is_some() {
            self.cur_fd = fd;
            let r = sys::ioctl(fd, abi::PFM_IOC_RESTART, 0);
            let r = self.res(Op::SmplDrain, r);
            // Not MASKED (EBADFD), or the number closed since (EBADF).
            if let Err(e) = r {
                if e != libc::EBADFD && !ALWAYS.contains(&e) {
                    self.smpl_anomaly(
                        Op::SmplDrain,
                        fd,
                        gen,
                        format!("RESTART: unexpected errno {}", perfmon::errno_name(e)),
                    );
                }
            }
        }
    }

    /// munmap of one of the actor's mappings, whole or a part.
    pub(super) fn op_smpl_unmap(&mut self) {
        if self.maps.is_empty() {
            return;
        }
        let i = self.rng.below(self.maps.len() as u64) as usize;
        let kind = self.rng.weighted(&[55, 30, 15]);
        let s = self.maps.swap_remove(i);
        let total = s.map.len() / PAGE;
        self.note(format_args!(" fd={} pages={} kind={kind}", s.fd, s.pages));
        if kind == 1 {
            // A part: the mapping cannot be split.
            let (start, n) = match self.rng.below(5) {
                0 => (0, 1),
                1 => (total - 1, 1),
                2 => (1, total - 1),
                3 => (0, total - 1),
                _ => {
                    let a = self.rng.below(total as u64) as usize;
                    let b = self.rng.range(a as u64 + 1, total as u64) as usize;
                    if (a, b) == (0, total) {
                        (0, 1)
                    } else {
                        (a, b - a)
                    }
                }
            };
            let Sampled {
                map,
                fd,
                gen,
                pages,
                entry_size,
                pmds,
                garbage,
                hostile,
                last_tail,
            } = s;
            let (r, back) = map.munmap_part(start * PAGE, n * PAGE);
            let r = self.res(Op::SmplUnmap, r);
            match back {
                Some(map) => {
                    if r != Err(libc::EINVAL) {
                        self.anomaly(
                            Op::SmplUnmap,
                            format!(
                                "munmap of pages {start}..{} of {total}: {} (EINVAL expected)",
                                start + n,
                                crate::pfm::outcome(&r)
                            ),
                        );
                    }
                    self.maps.push(Sampled {
                        map,
                        fd,
                        gen,
                        pages,
                        entry_size,
                        pmds,
                        garbage,
                        hostile,
                        last_tail,
                    });
                    // Still whole and readable.
                    let last = self.maps.len() - 1;
                    self.drain(Op::SmplUnmap, last);
                }
                None => self.anomaly(
                    Op::SmplUnmap,
                    format!(
                        "munmap of pages {start}..{} of {total} of a sampling mapping succeeded (it cannot be split)",
                        start + n
                    ),
                ),
            }
            return;
        }
        let (fd, gen, pages, pmds) = (s.fd, s.gen, s.pages, s.pmds);
        let r = s.map.unmap();
        let r = self.res(Op::SmplUnmap, r);
        self.allow(Op::SmplUnmap, r, &[]);
        if kind == 2 && gen.is_some() && fd_gen(fd) == gen {
            // Unmapped: a new mapping is allowed (or another actor's won).
            self.cur_fd = fd;
            let len = (1 + pages as usize) * PAGE;
            let r = FileMap::map(fd, len, RW, libc::MAP_SHARED, OFF);
            let rr = r.as_ref().map(|m| m.addr() as i64).map_err(|e| *e);
            self.res(Op::SmplUnmap, rr).ok();
            match r {
                Ok(map) if sys::clear_of_arenas(map.addr(), map.len()) => {
                    self.keep_map(Op::SmplUnmap, map, fd, gen, pages, pmds)
                }
                Ok(_) => {}
                Err(e) if [libc::EBUSY, libc::ENOMEM].contains(&e) || ALWAYS.contains(&e) => {}
                Err(e) => self.smpl_anomaly(
                    Op::SmplUnmap,
                    fd,
                    gen,
                    format!(
                        "mmap after munmap: unexpected errno {}",
                        perfmon::errno_name(e)
                    ),
                ),
            }
        }
    }

    /// mprotect, mremap and fork advice on one of the actor's mappings.
    pub(super) fn op_smpl_remap(&mut self) {
        if self.maps.is_empty() {
            return;
        }
        let i = self.rng.below(self.maps.len() as u64) as usize;
        let kind = self.rng.weighted(&[15, 15, 10, 12, 12, 8, 8, 8, 8, 4]);
        let len = self.maps[i].map.len();
        let total = len / PAGE;
        let fd = self.maps[i].fd;
        self.note(format_args!(" fd={fd} pages={total} kind={kind}"));
        let expect = |a: &mut Actor, r: Result<i64, i32>, want: i32, what: &str| {
            let r = a.res(Op::SmplRemap, r);
            if r != Err(want) {
                a.anomaly(
                    Op::SmplRemap,
                    format!(
                        "{what} of a sampling mapping of {total} pages: {} ({} expected)",
                        crate::pfm::outcome(&r),
                        perfmon::errno_name(want)
                    ),
                );
            }
            r
        };
        match kind {
            0 => {
                // A part: cannot be split.
                let start = self.rng.below(total as u64) as usize;
                let n = if start == 0 {
                    self.rng.range(1, total as u64 - 1) as usize
                } else {
                    self.rng.range(1, (total - start) as u64) as usize
                };
                // Another protection (the same one is no change: no split).
                let prot = self.rng.pick(&[libc::PROT_READ, libc::PROT_NONE]);
                let r = self.maps[i].map.mprotect(start * PAGE, n * PAGE, prot);
                let _ = expect(self, r, libc::EINVAL, "partial mprotect");
            }
            1 => {
                let r = self.maps[i].map.mprotect(0, len, libc::PROT_READ);
                let r = self.res(Op::SmplRemap, r);
                self.allow(Op::SmplRemap, r, &[]);
                let r = self.maps[i].map.mprotect(0, len, RW);
                let r = self.res(Op::SmplRemap, r);
                self.allow(Op::SmplRemap, r, &[]);
                if r.is_err() {
                    // Not readable and writable any more: given up.
                    let s = self.maps.swap_remove(i);
                    let _ = s.map.unmap();
                    return;
                }
            }
            2 => {
                let r = self.maps[i].map.mprotect(0, len, RW | libc::PROT_EXEC);
                if expect(self, r, libc::EACCES, "mprotect(PROT_EXEC)").is_ok() {
                    let r = self.maps[i].map.mprotect(0, len, RW);
                    if r.is_err() {
                        let s = self.maps.swap_remove(i);
                        let _ = s.map.unmap();
                        return;
                    }
                }
            }
            3 | 4 | 6 => {
                let (new_len, flags, want, what) = match kind {
                    3 => (
                        len + PAGE * self.rng.range(1, 4) as usize,
                        self.rng.pick(&[0, libc::MREMAP_MAYMOVE]),
                        libc::EFAULT,
                        "mremap growing",
                    ),
                    4 => (
                        len - PAGE * self.rng.range(1, total as u64 - 1) as usize,
                        self.rng.pick(&[0, libc::MREMAP_MAYMOVE]),
                        libc::EINVAL,
                        "mremap shrinking",
                    ),
                    _ => (
                        len,
                        libc::MREMAP_MAYMOVE | libc::MREMAP_DONTUNMAP,
                        libc::EINVAL,
                        "mremap(MREMAP_DONTUNMAP)",
                    ),
                };
                let r = self.maps[i].map.mremap(new_len, flags, 0);
                if expect(self, r, want, what).is_ok() {
                    // Changed behind the ring's back: given up.
                    let s = self.maps.swap_remove(i);
                    let _ = s.map.unmap();
                    return;
                }
            }
            5 => {
                // In place: nothing moves.
                let before = self.maps[i].map.addr();
                let r = self.maps[i].map.mremap(len, libc::MREMAP_MAYMOVE, 0);
                let r = self.res(Op::SmplRemap, r);
                if r != Ok(before as i64) {
                    self.anomaly(
                        Op::SmplRemap,
                        format!(
                            "mremap to the same length: {} (the same address {before:#x} expected)",
                            crate::pfm::outcome(&r)
                        ),
                    );
                    let s = self.maps.swap_remove(i);
                    let _ = s.map.unmap();
                    return;
                }
            }
            7 => {
                let r = self.maps[i].map.mremap_dup(len);
                let _ = expect(
                    self,
                    r,
                    libc::EFAULT,
                    "mremap of old length 0 (a second mapping)",
                );
            }
            8 => return self.smpl_move(i),
            _ => return self.smpl_fork(i),
        }
        self.drain(Op::SmplRemap, i);
    }

    /// Moves mapping `i` (mremap with MREMAP_FIXED onto a reservation):
    /// the kernel may refuse; moved, the buffer is still mapped once, so a
    /// second mmap must fail with EBUSY. Then the mapping is unmapped
    /// (see [`Actor::second_map`]).
    fn smpl_move(&mut self, i: usize) {
        let len = self.maps[i].map.len();
        let Some(target) = sys::reserve(len) else {
            return;
        };
        let r = self.maps[i]
            .map
            .mremap(len, libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED, target);
        let r = self.res(Op::SmplRemap, r);
        self.allow(
            Op::SmplRemap,
            r,
            &[libc::EINVAL, libc::EFAULT, libc::ENOMEM, libc::EPERM],
        );
        if r.is_ok() {
            // Readable where it moved (not drained: with the buffer's
            // "mapped" flag wrongly cleared, another actor may be mapping
            // and draining it now).
            let v = self.maps[i].map.load(0, Ordering::Relaxed) as u32;
            if v != abi::PFM_SMPL_VERSION && !HOSTILE.load(Ordering::Relaxed) {
                self.anomaly(Op::SmplRemap, format!("moved mapping: header version {v}"));
            }
            self.second_map(i, "after an mremap move");
        }
    }

    /// MADV_DOFORK on mapping `i`, a fork whose child exits at once, then
    /// a second mmap, which must fail with EBUSY (see
    /// [`Actor::second_map`]). Workers only (a fork is costly).
    fn smpl_fork(&mut self, i: usize) {
        if self.kind != Kind::Worker {
            return;
        }
        let r = self.maps[i].map.madvise(libc::MADV_DOFORK);
        let r = self.res(Op::SmplRemap, r);
        // ENOSYS: a kernel without madvise (CONFIG_ADVISE_SYSCALLS).
        self.allow(Op::SmplRemap, r, &[libc::EINVAL, libc::ENOSYS]);
        if r.is_err() {
            return;
        }
        shared().forks.fetch_add(1, Ordering::Relaxed);
        let f = sys::fork();
        if f == Ok(0) {
            sys::exit_now(0);
        }
        let r = self.maps[i].map.madvise(libc::MADV_DONTFORK);
        self.res(Op::SmplRemap, r).ok();
        if let Ok(pid) = f {
            for _ in 0..1000 {
                match sys::waitpid(pid, false) {
                    Err(libc::EINTR) => continue,
                    _ => break,
                }
            }
        }
        self.second_map(i, "after MADV_DOFORK and a fork whose child exited");
    }

    /// After mapping `i` was moved or inherited: a second mmap through
    /// its fd must fail with EBUSY (the mapping still exists); a success
    /// is the finding that the buffer no longer knows it is mapped. Then
    /// mapping `i` is unmapped, so that the buffer never has two
    /// consumers.
    fn second_map(&mut self, i: usize, why: &str) {
        let s = self.maps.swap_remove(i);
        let (fd, gen, pages) = (s.fd, s.gen, s.pages);
        if gen.is_some() && fd_gen(fd) == gen {
            self.cur_fd = fd;
            let r = FileMap::map(fd, (1 + pages as usize) * PAGE, RW, libc::MAP_SHARED, OFF);
            let rr = r.as_ref().map(|m| m.addr() as i64).map_err(|e| *e);
            self.res(Op::SmplRemap, rr).ok();
            match r {
                Ok(second) => {
                    if fd_gen(fd) == gen {
                        record_finding(
                            6,
                            &format!(
                                "{} #{} smpl_remap: fd {fd}: a second mapping {why}",
                                self.name, self.n
                            ),
                        );
                    }
                    let _ = second.unmap();
                }
                Err(e) if [libc::EBUSY, libc::ENOMEM].contains(&e) || ALWAYS.contains(&e) => {}
                Err(e) => self.smpl_anomaly(
                    Op::SmplRemap,
                    fd,
                    gen,
                    format!(
                        "second mmap {why}: {} (EBUSY expected)",
                        perfmon::errno_name(e)
                    ),
                ),
            }
        }
        let r = s.map.unmap();
        self.res(Op::SmplRemap, r).ok();
    }

    /// `arm`'s buffer: a valid setup of `fd` (private, UNLOADED, without
    /// sets), 1 to 4 data pages mostly so that it fills, entries recording
    /// PMDs for every PMD in `written`; then its mapping. Returns whether
    /// the setup succeeded.
    pub(super) fn arm_smpl(&mut self, fd: i32, written: u64) -> Option<Policy> {
        let pages = match self.rng.below(8) {
            0..=3 => 1,
            4 | 5 => 2,
            6 => 4,
            _ => pick_pages(&mut self.rng),
        };
        let s = self.valid_setup(pages, written);
        let a = self.arena.at(0);
        self.arena.put(a, s);
        let r = sys::ioctl(fd, abi::PFM_IOC_SMPL_SETUP, a);
        let r = self.res(Op::Arm, r);
        // Private, unloaded, nothing else set up on it: EBUSY only if
        // another thread of this process, holding a pool fd number that
        // was closed and reused for this context, set something up on
        // it (a counter page, sets, a buffer) in between.
        // EPERM: an unprivileged worker past its locked memory (see
        // `op_smpl_setup`).
        let memlock: &[i32] = if self.uid != 0 { &[libc::EPERM] } else { &[] };
        self.allow(
            Op::Arm,
            r,
            &[&[libc::ENOMEM, libc::EBUSY][..], memlock].concat(),
        );
        if r.is_err() {
            return None;
        }
        let gen = fd_gen(fd);
        self.remember_setup(fd, gen, &s);
        let m = FileMap::map(fd, (1 + pages as usize) * PAGE, RW, libc::MAP_SHARED, OFF);
        let rr = m.as_ref().map(|m| m.addr() as i64).map_err(|e| *e);
        let rr = self.res(Op::Arm, rr);
        // EBUSY: as for the setup, another thread mapped it through a
        // reused fd number.
        self.allow(Op::Arm, rr, &[libc::ENOMEM, libc::EBUSY]);
        if let Ok(map) = m {
            if sys::clear_of_arenas(map.addr(), map.len()) {
                self.keep_map(Op::Arm, map, fd, gen, pages, Some(Box::new(s.smpl_pmds)));
            }
        }
        Some(if s.flags & abi::PFM_SMPL_DROP != 0 {
            Policy::Drop
        } else {
            Policy::Mask
        })
    }

    /// After `arm` loaded and started a context with a buffer: sometimes
    /// let it run a little, drain it and RESTART it (a full buffer masks
    /// it).
    pub(super) fn arm_smpl_run(&mut self, fd: i32) {
        if !self.rng.chance(1, 3) {
            return;
        }
        for _ in 0..4 {
            sys::sched_yield();
        }
        let gen = fd_gen(fd);
        if let Some(i) = self.maps.iter().position(|s| s.fd == fd && s.gen == gen) {
            self.drain(Op::Arm, i);
        }
        let r = sys::ioctl(fd, abi::PFM_IOC_RESTART, 0);
        let r = self.res(Op::Arm, r);
        self.allow(Op::Arm, r, &[libc::EBADFD]);
    }
}

// The module's own ring protocol, as the kernel runs it: the host tests
// drain what it writes.
#[cfg(test)]
#[path = "../../../../pfm_smpl.rs"]
#[allow(dead_code)]
mod pfm_smpl;

#[cfg(test)]
mod tests {
    use super::*;

    const E: i32 = libc::EINVAL;

    fn v(len: usize, prot: i32, flags: i32, off: i64, pages: Option<u32>) -> MapVerdict {
        map_verdict(len, prot, flags, off, Some(libc::O_RDWR), pages)
    }

    #[test]
    fn the_right_mapping_may_succeed() {
        for pages in [Some(4), None] {
            let r = v(5 * PAGE, RW, libc::MAP_SHARED, OFF, pages);
            assert!(r.ok);
            assert!(r.errs.contains(&libc::EBUSY));
            assert_eq!(r.errs.contains(&libc::ENODEV), pages.is_none());
        }
        // A length rounded up to the right one.
        assert!(v(5 * PAGE - 100, RW, libc::MAP_SHARED, OFF, Some(4)).ok);
    }

    #[test]
    fn wrong_mappings_of_a_known_buffer_are_exact() {
        let only = |r: MapVerdict, e: i32| {
            assert!(!r.ok, "{r:?}");
            assert_eq!(r.errs, {
                let mut x = vec![libc::ENOMEM, e];
                x.sort_unstable();
                x
            });
        };
        only(v(4 * PAGE, RW, libc::MAP_SHARED, OFF, Some(4)), E);
        only(v(6 * PAGE, RW, libc::MAP_SHARED, OFF, Some(4)), E);
        only(v(5 * PAGE, RW, libc::MAP_PRIVATE, OFF, Some(4)), E);
        only(
            v(5 * PAGE, libc::PROT_READ, libc::MAP_SHARED, OFF, Some(4)),
            E,
        );
        // The counter page of a context with a buffer: allowed.
        let page = v(PAGE, libc::PROT_READ, libc::MAP_SHARED, 0, Some(4));
        assert!(page.ok && !page.errs.contains(&libc::EBUSY), "{page:?}");
        only(v(PAGE, RW, libc::MAP_SHARED, 0, Some(4)), libc::EPERM);
        only(
            v(5 * PAGE, RW, libc::MAP_SHARED, OFF + PAGE as i64, Some(4)),
            E,
        );
        // Executable: perfmon's EPERM, or a noexec mount's.
        only(
            v(
                5 * PAGE,
                RW | libc::PROT_EXEC,
                libc::MAP_SHARED,
                OFF,
                Some(4),
            ),
            libc::EPERM,
        );
        // Refused before the file is looked at.
        assert_eq!(v(0, RW, libc::MAP_SHARED, OFF, Some(4)).errs, vec![E]);
        assert_eq!(
            v(5 * PAGE, RW, libc::MAP_SHARED, OFF + 1, None).errs,
            vec![E]
        );
    }

    #[test]
    fn access_modes_are_checked_first() {
        let r = map_verdict(
            5 * PAGE,
            RW,
            libc::MAP_SHARED,
            OFF,
            Some(libc::O_RDONLY),
            Some(4),
        );
        assert!(!r.ok && r.errs.contains(&libc::EACCES) && !r.errs.contains(&E));
        let r = map_verdict(
            5 * PAGE,
            libc::PROT_READ,
            libc::MAP_SHARED,
            OFF,
            Some(libc::O_WRONLY),
            Some(4),
        );
        assert!(!r.ok && r.errs.contains(&libc::EACCES));
        // Read-only on a read-only fd: perfmon's EINVAL (not writable).
        let r = map_verdict(
            5 * PAGE,
            libc::PROT_READ,
            libc::MAP_SHARED,
            OFF,
            Some(libc::O_RDONLY),
            Some(4),
        );
        assert!(!r.ok && r.errs.contains(&E) && !r.errs.contains(&libc::EACCES));
    }

    #[test]
    fn an_unknown_buffer_is_judged_by_what_any_size_allows() {
        // 4 pages of data pages is no power of two plus the header: no
        // buffer accepts it.
        let r = v(4 * PAGE, RW, libc::MAP_SHARED, OFF, None);
        assert!(!r.ok);
        assert!(r.errs.contains(&libc::ENODEV) && r.errs.contains(&E));
        assert!(!r.errs.contains(&libc::EBUSY));
        let r = v(3 * PAGE, RW | libc::PROT_EXEC, libc::MAP_SHARED, OFF, None);
        assert!(!r.ok && r.errs.contains(&libc::EPERM));
        // A counter page may be mapped then.
        assert!(v(PAGE, libc::PROT_READ, libc::MAP_SHARED, 0, None).ok);
    }

    fn entry(seq: u64) -> abi::PfmSmplEntry {
        abi::PfmSmplEntry {
            tid: 5,
            pid: 5,
            ovfl_pmd: 1,
            nvalues: 2,
            seq,
            tstamp: 1000 + seq,
            smpl_pmds: 0b1001,
            values: [7, 9, 0, 0, 0, 0, 0, 0],
            ..Default::default()
        }
    }

    #[test]
    fn entries_are_checked() {
        let mut pmds = [0u64; abi::PFM_MAX_PMDS];
        pmds[1] = 0b1001;
        let ok = |e: &abi::PfmSmplEntry, pos: u64| {
            entry_fault(e, pos, ENTRY as u64, 0xf, Some(&pmds), 1000, 10_000_000_000)
        };
        assert_eq!(ok(&entry(3), 3 * ENTRY as u64), None);
        assert!(ok(&entry(3), 4 * ENTRY as u64).is_some());
        let bad = |f: &dyn Fn(&mut abi::PfmSmplEntry)| {
            let mut e = entry(0);
            f(&mut e);
            ok(&e, 0)
        };
        assert!(bad(&|e| e.ovfl_pmd = 4).is_some());
        assert_eq!(bad(&|e| e.set = 1), None);
        assert!(bad(&|e| e.set = abi::PFM_MAX_SETS as u16).is_some());
        assert!(bad(&|e| e.nvalues = 3).is_some());
        assert!(bad(&|e| e.smpl_pmds = 0b11).is_some());
        assert!(bad(&|e| e.values[5] = 1).is_some());
        assert!(bad(&|e| e.chain_len = 1).is_some());
        assert!(bad(&|e| e.chain_flags = abi::PFM_SMPL_CHAIN_BROKEN).is_some());
        // With room for 16 return addresses (256-byte entries).
        let chained = |f: &dyn Fn(&mut abi::PfmSmplEntry)| {
            let mut e = entry(3);
            f(&mut e);
            entry_fault(&e, 3 * 256, 256, 0xf, Some(&pmds), 1000, 10_000_000_000)
        };
        assert_eq!(chained(&|e| e.chain_len = 16), None);
        assert_eq!(
            chained(&|e| e.chain_flags = abi::PFM_SMPL_CHAIN_TRUNCATED),
            None
        );
        assert!(chained(&|e| e.chain_len = 17).is_some());
        assert!(chained(&|e| e.chain_flags = 8).is_some());
        assert_eq!(entry_size_for(16), 256);
        assert!(legal_entry_size(1024) && !legal_entry_size(2048) && !legal_entry_size(192));
        assert!(bad(&|e| e.pad = 1).is_some());
        assert!(bad(&|e| e.tstamp = 0).is_some());
        // Out of order by more than the clocks' slack.
        assert!(entry_fault(
            &entry(0),
            0,
            ENTRY as u64,
            0xf,
            None,
            1000 + 2 * CLOCK_SLACK_NS,
            u64::MAX / 2
        )
        .is_some());
    }

    #[test]
    fn entries_decode_in_abi_order() {
        let mut w = [0u64; ENTRY / 8];
        w[0] = 7 | 9 << 32;
        w[1] = 1 | 2 << 16 | 3 << 32 | 4 << 48;
        w[2] = 5;
        w[8] = 11;
        let e = entry_of(&w);
        assert_eq!(
            (e.tid, e.pid, e.cpu, e.ovfl_pmd, e.set, e.nvalues),
            (7, 9, 1, 2, 3, 4)
        );
        assert_eq!((e.seq, e.values[0]), (5, 11));
        assert_eq!(std::mem::offset_of!(abi::PfmSmplEntry, values), 64);
        assert_eq!(H_TAIL, 24);
        assert_eq!(H_HEAD, 16);
    }

    /// A buffer of `pages` data pages on a memfd, mapped as the fuzzer
    /// maps one, and initialised as the kernel does.
    fn ring_map(pages: usize) -> (i32, FileMap) {
        let len = (1 + pages) * PAGE;
        let fd = sys::memfd(len);
        let map = FileMap::map(fd, len, RW, libc::MAP_SHARED, 0).unwrap();
        // SAFETY: the header page: atomics only, all-zero valid.
        let hdr: &pfm_smpl::HeaderCells = unsafe { map.view(0) };
        pfm_smpl::SmplRing::init(hdr, (pages * PAGE) as u64, ENTRY as u64);
        (fd, map)
    }

    /// Runs `f` with the kernel's view of the buffer mapped at `map`.
    fn with_ring<R>(
        map: &FileMap,
        pages: usize,
        f: impl FnOnce(&pfm_smpl::SmplRing<'_>) -> R,
    ) -> R {
        // SAFETY: the header page and the data pages of the mapping:
        // atomics only.
        let hdr: &pfm_smpl::HeaderCells = unsafe { map.view(0) };
        let page = |i: usize| -> Option<&pfm_smpl::DataCells> {
            // SAFETY: as above, data page `i`.
            (i < pages).then(|| unsafe { map.view((1 + i) * PAGE) })
        };
        f(&pfm_smpl::SmplRing {
            hdr,
            page: &page,
            data_size: (pages * PAGE) as u64,
            entry_size: ENTRY as u64,
        })
    }

    fn kernel_entry(pmds: &[u64; abi::PFM_MAX_PMDS]) -> abi::PfmSmplEntry {
        let n = pmds[2].count_ones() as usize;
        let mut values = [0u64; abi::PFM_SMPL_MAX_VALUES];
        for (i, v) in values.iter_mut().take(n).enumerate() {
            *v = 77 + i as u64;
        }
        abi::PfmSmplEntry {
            tid: 9,
            pid: 9,
            ovfl_pmd: 2,
            nvalues: n as u16,
            tstamp: sys::monotonic_ns(),
            smpl_pmds: pmds[2],
            values,
            ..Default::default()
        }
    }

    /// What the kernel's protocol writes, a writer thread pushing as the
    /// monitored thread does, the fuzzer's drain reads: every entry once,
    /// in order, sane, across many wraps.
    #[test]
    fn drains_what_the_kernels_protocol_writes() {
        // The kernel's own positions and counts, kept across its writes.
        let w = pfm_smpl::Writer::new();
        let pages = 1;
        let (fd, map) = ring_map(pages);
        let mut pmds = [0u64; abi::PFM_MAX_PMDS];
        pmds[2] = 0b1001;
        const N: u64 = 3000;
        let mut read = 0;
        std::thread::scope(|t| {
            t.spawn(|| {
                with_ring(&map, pages, |ring| {
                    let mut done = 0;
                    while done < N {
                        if !ring.has_room(&w) {
                            std::thread::yield_now();
                            continue;
                        }
                        assert!(ring.push(&w, &kernel_entry(&pmds), &[], u64::MAX).written);
                        done += 1;
                    }
                })
            });
            let mut last = None;
            while read < N {
                let d = drain_ring(
                    &map,
                    pages as u32,
                    ENTRY as u64,
                    Some(&pmds),
                    0xf,
                    false,
                    last,
                );
                assert_eq!(d.fault, None, "{d:?}");
                assert!(!d.resynced);
                read += d.n;
                last = Some(d.stored);
            }
        });
        assert_eq!(read, N);
        assert_eq!(map.load(H_LOST, Ordering::Relaxed), 0);
        assert_eq!(map.load(H_TAIL, Ordering::Relaxed), N * ENTRY as u64);
        drop(map);
        sys::close(fd).unwrap();
    }

    /// A garbage tail: resynced to head, nothing read; the kernel wrote
    /// nothing over unread entries meanwhile; then entries again, checked.
    #[test]
    fn garbage_tails_are_resynced() {
        // The kernel's own positions and counts, kept across its writes.
        let w = pfm_smpl::Writer::new();
        let pages = 2;
        let (fd, map) = ring_map(pages);
        let pmds = [0u64; abi::PFM_MAX_PMDS];
        let data_size = (pages * PAGE) as u64;
        for k in 0..4 {
            with_ring(&map, pages, |ring| {
                for _ in 0..3 {
                    ring.push(&w, &kernel_entry(&pmds), &[], u64::MAX);
                }
            });
            let head = map.load(H_HEAD, Ordering::Relaxed);
            // Ahead of head, or more than the data behind it.
            let bad = [
                u64::MAX,
                head + ENTRY as u64,
                head.wrapping_sub(data_size + ENTRY as u64),
                1 << 40,
            ][k];
            map.store(H_TAIL, bad, Ordering::Relaxed);
            // Full for the kernel: dropped, counted.
            with_ring(&map, pages, |ring| {
                assert!(!ring.push(&w, &kernel_entry(&pmds), &[], u64::MAX).written)
            });
            let d = drain_ring(&map, pages as u32, ENTRY as u64, None, 0xf, false, None);
            assert!(d.resynced && d.n == 0 && d.fault.is_none(), "{bad}: {d:?}");
            assert_eq!(map.load(H_TAIL, Ordering::Relaxed), head);
            with_ring(&map, pages, |ring| {
                assert!(ring.push(&w, &kernel_entry(&pmds), &[], u64::MAX).written)
            });
            let d = drain_ring(&map, pages as u32, ENTRY as u64, None, 0xf, false, None);
            assert!(!d.resynced && d.n == 1 && d.fault.is_none(), "{bad}: {d:?}");
        }
        // A tail not at an entry (in range): resynced too.
        let head = map.load(H_HEAD, Ordering::Relaxed);
        map.store(H_TAIL, head - ENTRY as u64 / 2, Ordering::Relaxed);
        assert!(drain_ring(&map, pages as u32, ENTRY as u64, None, 0xf, false, None).resynced);
        // Lenient (after the actor's own garbage): resynced, not counted.
        with_ring(&map, pages, |ring| {
            ring.push(&w, &kernel_entry(&pmds), &[], u64::MAX)
        });
        let d = drain_ring(&map, pages as u32, ENTRY as u64, None, 0xf, true, None);
        assert!(!d.resynced && d.n == 0);
        drop(map);
        sys::close(fd).unwrap();
    }

    /// A corrupt entry or header is reported.
    #[test]
    fn faults_are_found() {
        // The kernel's own positions and counts, kept across its writes.
        let w = pfm_smpl::Writer::new();
        let pages = 1;
        let (fd, map) = ring_map(pages);
        let mut pmds = [0u64; abi::PFM_MAX_PMDS];
        pmds[2] = 0b11;
        with_ring(&map, pages, |ring| {
            for _ in 0..2 {
                ring.push(&w, &kernel_entry(&pmds), &[], u64::MAX);
            }
        });
        // The second entry's seq (word 2).
        map.store(PAGE + ENTRY + 16, 7, Ordering::Relaxed);
        let d = drain_ring(
            &map,
            pages as u32,
            ENTRY as u64,
            Some(&pmds),
            0xf,
            false,
            None,
        );
        assert!(
            d.fault.as_deref().is_some_and(|f| f.contains("seq 7")),
            "{d:?}"
        );
        // The setup said otherwise.
        with_ring(&map, pages, |ring| {
            ring.push(&w, &kernel_entry(&pmds), &[], u64::MAX)
        });
        pmds[2] = 0b111;
        let d = drain_ring(
            &map,
            pages as u32,
            ENTRY as u64,
            Some(&pmds),
            0xf,
            false,
            None,
        );
        assert!(d.fault.is_some(), "{d:?}");
        // `tail` moved by someone else than the tool.
        let d = drain_ring(&map, pages as u32, ENTRY as u64, None, 0xf, false, None);
        assert!(d.fault.is_none(), "{d:?}");
        map.store(H_TAIL, d.stored - ENTRY as u64, Ordering::Relaxed);
        let d2 = drain_ring(
            &map,
            pages as u32,
            ENTRY as u64,
            None,
            0xf,
            false,
            Some(d.stored),
        );
        assert!(
            d2.fault.as_deref().is_some_and(|f| f.contains("behind")),
            "{d2:?}"
        );
        // Unread entries written over: head more than the data past tail.
        let head = map.load(H_HEAD, Ordering::Relaxed) + (pages * PAGE + ENTRY) as u64;
        map.store(H_WRITTEN, head / ENTRY as u64, Ordering::Relaxed);
        map.store(H_HEAD, head, Ordering::Relaxed);
        let d3 = drain_ring(
            &map,
            pages as u32,
            ENTRY as u64,
            None,
            0xf,
            false,
            Some(d2.stored),
        );
        assert!(
            d3.fault
                .as_deref()
                .is_some_and(|f| f.contains("written over")),
            "{d3:?}"
        );
        // Without this mapping's last tail: a resync only.
        map.store(H_TAIL, 0, Ordering::Relaxed);
        let d4 = drain_ring(&map, pages as u32, ENTRY as u64, None, 0xf, false, None);
        assert!(d4.fault.is_none() && d4.resynced, "{d4:?}");
        // The header's data size.
        map.store(H_DATA_SIZE, 3 * PAGE as u64, Ordering::Relaxed);
        let d = drain_ring(&map, pages as u32, ENTRY as u64, None, 0xf, false, None);
        assert!(
            d.fault.as_deref().is_some_and(|f| f.contains("header")),
            "{d:?}"
        );
        drop(map);
        sys::close(fd).unwrap();
    }
}
