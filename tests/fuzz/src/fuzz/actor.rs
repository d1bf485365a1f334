//! One thread doing operations: its generator, argument arena, fd pool
//! access, result checks and value generators (the operations are in
//! `ops.rs`).

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use super::model::model;
use super::shared::*;
use crate::rng::Rng;
use crate::sys::{
    self, abi, Arena, ThreadTimer, ARENA_HOLE, ARENA_NONE, ARENA_RO, ARENA_RW, ARENA_RW2,
    KERNEL_ADDR, PAGE,
};

/// Pointer kinds for arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ptr {
    Good,
    Null,
    Hole,
    Guard,
    StraddleHole,
    StraddleGuard,
    ReadOnly,
    Kernel,
    Wild,
}

impl Ptr {
    /// The kernel can read all of it.
    pub(super) fn readable(self) -> bool {
        matches!(self, Ptr::Good | Ptr::ReadOnly)
    }
}

/// Errnos any operation on a pool fd may see because another thread closed it.
pub(super) const ALWAYS: [i32; 1] = [libc::EBADF];

/// What the module must make of one element of an all-or-nothing call
/// (a register, a set description, a set id).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Valid whatever the context holds.
    Ok,
    /// Invalid whatever the context holds.
    Bad,
    /// Valid if event set `n` (1..15) exists: the fuzzer does not track
    /// which sets a pool context has, so either answer is right.
    MaybeSet,
}

/// Whether a PMD write's period randomisation fields are what the ABI
/// accepts (Documentation/perfmon.rst, "PMD flags"), written from the
/// documentation rather than the module's code: with `PFM_REGFL_RANDOM`, a
/// mask one below a power of two (or all ones) and no larger than either
/// reset value, any seed; without it, mask and seed 0.
pub(super) fn random_fields_ok(p: &abi::PfmPmd) -> bool {
    let m = p.reg_random_mask;
    if p.reg_flags & abi::PFM_REGFL_RANDOM == 0 {
        return m == 0 && p.reg_random_seed == 0;
    }
    (m == u64::MAX || (m + 1).is_power_of_two()) && m <= p.reg_short_reset && m <= p.reg_long_reset
}

/// What READ_PMDS must return of a PMD's randomisation, whatever was
/// written: with the flag, an accepted mask and a state that is never 0;
/// without it, 0 and 0. `None` if so, else what is wrong.
pub(super) fn random_output_wrong(p: &abi::PfmPmd) -> Option<String> {
    let random = p.reg_flags & abi::PFM_REGFL_RANDOM != 0;
    let ok = match random {
        true => p.reg_random_seed != 0 && random_fields_ok(p),
        false => p.reg_random_mask == 0 && p.reg_random_seed == 0,
    };
    (!ok).then(|| {
        format!(
            "PMD {} flags {:#x}: random mask {:#x} seed {:#x} (resets {:#x}, {:#x})",
            p.reg_num,
            p.reg_flags,
            p.reg_random_mask,
            p.reg_random_seed,
            p.reg_short_reset,
            p.reg_long_reset
        )
    })
}

/// A `PFM_REGFL_RANDOM` mask: 2^k - 1, small mostly (k up to 20), any k
/// (64 included) an eighth of the time.
pub(super) fn random_mask(rng: &mut Rng) -> u64 {
    let k = if rng.chance(7, 8) {
        rng.below(21)
    } else {
        rng.below(65)
    };
    (1u64 << k.min(63)).wrapping_sub(1) | if k == 64 { u64::MAX } else { 0 }
}

/// Set `set` as an element's set: 0 always exists; 1..15 may exist; 16 and
/// above never.
pub(super) fn set_verdict(set: u16) -> Verdict {
    match set {
        0 => Verdict::Ok,
        s if (s as usize) < abi::PFM_MAX_SETS => Verdict::MaybeSet,
        _ => Verdict::Bad,
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Worker,
    Short,
    Child,
}

/// One thread doing operations.
pub(super) struct Actor {
    pub(super) rng: Rng,
    pub(super) arena: Arena,
    pub(super) name: String,
    pub(super) slot: usize,
    pub(super) kind: Kind,
    pub(super) uid: u32,
    pub(super) n: u64,
    pub(super) children: Vec<i32>,
    pub(super) shorts: Vec<std::thread::JoinHandle<()>>,
    pub(super) _timer: Option<ThreadTimer>,
    /// Text of the operation being run (only built when logging).
    pub(super) line: String,
    pub(super) logging: bool,
    /// Syscalls of the current operation.
    pub(super) calls: u64,
    /// This actor's epoll descriptor (numbered 900+, clear of the pool), or -1.
    pub(super) epfd: i32,
    /// The pool fd the current operation works on (-1: none).
    pub(super) cur_fd: i32,
    /// The pool number this operation picked (-1: none), touched again as
    /// the operation ends ([`sys::touch_fd`]).
    picked_fd: i32,
    /// Sampling buffers this actor mapped (`smpl.rs`), unmapped when it
    /// ends; and the setups it made, for their entries' checks.
    pub(super) maps: Vec<super::smpl::Sampled>,
    pub(super) setups: Vec<super::smpl::Setup>,
}

impl Actor {
    pub(super) fn new(seed: u64, name: String, kind: Kind) -> Actor {
        let mut rng = Rng::new(seed);
        let mut fill = Rng::new(seed ^ 0xa5a5);
        let arena = Arena::new(|| fill.next_u64());
        let slot = shared().next_slot.fetch_add(1, Ordering::Relaxed) as usize % SLOTS;
        shared().slots[slot]
            .tid
            .store(sys::gettid(), Ordering::Relaxed);
        publish_tid(&mut rng);
        Actor {
            rng,
            arena,
            name,
            slot,
            kind,
            uid: sys::getuid(),
            n: 0,
            children: Vec::new(),
            shorts: Vec::new(),
            _timer: thread_timer(),
            line: String::new(),
            logging: LOG_FD.load(Ordering::Relaxed) >= 0,
            calls: 0,
            epfd: -1,
            cur_fd: -1,
            picked_fd: -1,
            maps: Vec::new(),
            setups: Vec::new(),
        }
    }

    // ---- logging and results ----

    pub(super) fn note(&mut self, args: std::fmt::Arguments<'_>) {
        if self.logging {
            let _ = self.line.write_fmt(args);
        }
    }

    pub(super) fn begin(&mut self, op: Op) {
        self.n += 1;
        self.calls = 0;
        let s = shared();
        s.ops.fetch_add(1, Ordering::Relaxed);
        s.per_op[op as usize].fetch_add(1, Ordering::Relaxed);
        let slot = &s.slots[self.slot];
        slot.op.store(op as u32, Ordering::Relaxed);
        slot.n.store(self.n, Ordering::Relaxed);
        if self.logging {
            self.line.clear();
            let _ = write!(self.line, "{} #{} {}", self.name, self.n, op.name());
        }
    }

    pub(super) fn end(&mut self) {
        shared().syscalls.fetch_add(self.calls, Ordering::Relaxed);
        if self.logging {
            self.line.push('\n');
            sys::write_all(LOG_FD.load(Ordering::Relaxed), self.line.as_bytes());
        }
    }

    /// Counts a syscall result of `op`, logs it, and returns it.
    pub(super) fn res(&mut self, op: Op, r: Result<i64, i32>) -> Result<i64, i32> {
        self.calls += 1;
        if let Err(e) = r {
            let e = (e as usize).min(MAX_ERRNO - 1);
            shared().errnos[op as usize * MAX_ERRNO + e].fetch_add(1, Ordering::Relaxed);
        }
        if self.logging {
            match r {
                Ok(v) => {
                    let _ = write!(self.line, " ={v}");
                }
                Err(e) => {
                    let _ = write!(self.line, " ={}", perfmon::errno_name(e));
                }
            }
        }
        r
    }

    /// Records an anomaly about the current operation.
    pub(super) fn anomaly(&mut self, op: Op, what: String) {
        // Another thread may have closed the pool fd and something else
        // (a /proc or /sys file read by glibc or by us) got its number
        // during the call: then the kernel was right.
        if self.cur_fd >= 0 && !is_perfmon_fd(self.cur_fd) {
            shared().reused.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // The module answers ENOTTY only to ioctl numbers it does not know
        // (Documentation/perfmon.rst), and those ops allow it: ENOTTY to a
        // well-formed command means the call reached another file holding
        // the number, which may have gone back to a perfmon fd since (the
        // check above then misses the reuse).
        if self.cur_fd >= 0 && what.contains("ENOTTY") {
            shared().reused.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let text = format!("{} #{} {}: {what}", self.name, self.n, op.name());
        record_anomaly(&text);
    }

    /// Checks that `r` is `Ok` or one of `allowed` (plus EBADF).
    pub(super) fn allow(&mut self, op: Op, r: Result<i64, i32>, allowed: &[i32]) {
        if let Err(e) = r {
            if !allowed.contains(&e) && !ALWAYS.contains(&e) {
                self.anomaly(
                    op,
                    format!(
                        "unexpected errno {} (allowed: ok {})",
                        perfmon::errno_name(e),
                        names(allowed)
                    ),
                );
            }
        }
    }

    /// Checks that `r` failed with one of `expected` (plus EBADF).
    pub(super) fn expect_err(&mut self, op: Op, r: Result<i64, i32>, expected: &[i32], why: &str) {
        match r {
            Ok(v) => self.anomaly(
                op,
                format!("succeeded ({v}) but {why}: expected {}", names(expected)),
            ),
            Err(e) if expected.contains(&e) || ALWAYS.contains(&e) => {}
            Err(e) => self.anomaly(
                op,
                format!(
                    "{} but {why}: expected {}",
                    perfmon::errno_name(e),
                    names(expected)
                ),
            ),
        }
    }

    /// Checks an all-or-nothing array call (`n` elements judged as
    /// `verdicts`; `done` as the call returned it) against the ABI: success
    /// only if no element is certainly bad, with `done == n`; `EINVAL` with
    /// `done` the first bad element, which is the first certainly bad one or
    /// an earlier one whose set may be missing; `state`: errnos the
    /// context's state may give first, whatever the elements.
    pub(super) fn check_verdicts(
        &mut self,
        op: Op,
        r: Result<i64, i32>,
        done: u32,
        verdicts: &[Verdict],
        state: &[i32],
    ) {
        let first_bad = verdicts.iter().position(|v| *v == Verdict::Bad);
        let limit = first_bad.unwrap_or(verdicts.len());
        let maybe = verdicts[..limit].contains(&Verdict::MaybeSet);
        match r {
            Ok(_) => {
                if let Some(i) = first_bad {
                    self.anomaly(op, format!("succeeded but element {i} is invalid"));
                } else if done as usize != verdicts.len() {
                    self.anomaly(
                        op,
                        format!("succeeded with done={done} for count {}", verdicts.len()),
                    );
                }
            }
            Err(libc::EINVAL) if first_bad.is_none() && !maybe => {
                if !state.contains(&libc::EINVAL) {
                    self.anomaly(op, "valid elements refused: EINVAL".to_string());
                }
            }
            Err(libc::EINVAL) => {
                let d = done as usize;
                let right = d == limit && first_bad.is_some()
                    || d < limit && verdicts[d] == Verdict::MaybeSet;
                if !right {
                    self.anomaly(
                        op,
                        format!(
                            "EINVAL with done={done} but the first bad element is {first_bad:?} (sets that may be missing before it: {:?})",
                            (0..limit)
                                .filter(|&i| verdicts[i] == Verdict::MaybeSet)
                                .collect::<Vec<_>>()
                        ),
                    );
                }
            }
            Err(e) if state.contains(&e) || ALWAYS.contains(&e) => {}
            Err(e) => self.anomaly(
                op,
                format!(
                    "unexpected errno {} (elements {}; allowed: {})",
                    perfmon::errno_name(e),
                    match (first_bad, maybe) {
                        (Some(_), _) => "invalid",
                        (None, true) => "valid if their sets exist",
                        (None, false) => "valid",
                    },
                    names(state)
                ),
            ),
        }
    }

    // ---- fds ----

    pub(super) fn pick_fd(&mut self) -> (usize, i32) {
        let r = self.pick_fd_inner();
        self.cur_fd = r.1;
        sys::touch_fd(r.1);
        self.picked_fd = r.1;
        r
    }

    /// The operation on the number it picked, if any, is over.
    pub(super) fn untouch(&mut self) {
        sys::touch_fd(std::mem::replace(&mut self.picked_fd, -1));
    }

    fn pick_fd_inner(&mut self) -> (usize, i32) {
        // Mostly a live fd; sometimes an empty slot (-1) or a garbage number.
        for _ in 0..4 {
            let i = self.rng.below(POOL as u64) as usize;
            let fd = FDS[i].load(Ordering::Relaxed);
            if fd >= 0 {
                return (i, fd);
            }
        }
        match self.rng.below(8) {
            0 => (POOL, -1),
            1 => (POOL, 1000 + self.rng.below(24) as i32),
            _ => {
                let i = self.rng.below(POOL as u64) as usize;
                (i, FDS[i].load(Ordering::Relaxed))
            }
        }
    }

    pub(super) fn store_fd(&mut self, fd: i32) {
        for _ in 0..POOL {
            let i = self.rng.below(POOL as u64) as usize;
            if FDS[i]
                .compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
        // Pool full: close the oldest idea of a slot and take it.
        let i = self.rng.below(POOL as u64) as usize;
        let old = FDS[i].swap(fd, Ordering::AcqRel);
        if old >= 0 {
            let r = super::smpl::close_pool_fd(old).map(|_| 0);
            self.res(Op::Close, r).ok();
        }
    }

    // ---- argument memory ----

    pub(super) fn pick_ptr(&mut self, good: u32) -> Ptr {
        let w = [good, 3, 3, 2, 3, 2, 3, 1, 1];
        [
            Ptr::Good,
            Ptr::Null,
            Ptr::Hole,
            Ptr::Guard,
            Ptr::StraddleHole,
            Ptr::StraddleGuard,
            Ptr::ReadOnly,
            Ptr::Kernel,
            Ptr::Wild,
        ][self.rng.weighted(&w)]
    }

    /// An address of kind `p` for `len` bytes.
    pub(super) fn place(&mut self, p: Ptr, len: usize) -> usize {
        self.place_in(p, len, false)
    }

    /// Like [`Actor::place`]; `array`: a register array or a read buffer,
    /// placed (when good) in the first read-write pages, where headers (the
    /// second read-write page) never overlap it.
    pub(super) fn place_in(&mut self, p: Ptr, len: usize, array: bool) -> usize {
        let len = len.max(1);
        match p {
            Ptr::Good => {
                let (base, size) = if !array && len <= PAGE {
                    (ARENA_RW2, PAGE)
                } else {
                    (0, ARENA_RW)
                };
                let room = size.saturating_sub(len);
                let mut off = (self.rng.below(room as u64 / 8 + 1) * 8) as usize;
                if self.rng.chance(1, 10) && off + len + 8 <= size {
                    off += self.rng.range(1, 7) as usize;
                }
                self.arena.at(base + off)
            }
            Ptr::Null => {
                if self.rng.chance(1, 4) {
                    self.rng.range(1, 4095) as usize
                } else {
                    0
                }
            }
            Ptr::Hole => self
                .arena
                .at(ARENA_HOLE + (self.rng.below(PAGE as u64 / 8) * 8) as usize),
            Ptr::Guard => self
                .arena
                .at(ARENA_NONE + (self.rng.below(PAGE as u64 / 8) * 8) as usize),
            Ptr::StraddleHole | Ptr::StraddleGuard => {
                let end = if p == Ptr::StraddleHole {
                    ARENA_HOLE
                } else {
                    ARENA_NONE
                };
                let k = if len > 1 {
                    self.rng.range(1, (len - 1) as u64) as usize
                } else {
                    0
                };
                self.arena.at(end - k.min(PAGE))
            }
            Ptr::ReadOnly => {
                let room = PAGE.saturating_sub(len);
                self.arena
                    .at(ARENA_RO + (self.rng.below(room as u64 / 8 + 1) * 8) as usize)
            }
            Ptr::Kernel => KERNEL_ADDR + (self.rng.below(1 << 20) * 8) as usize,
            Ptr::Wild => match self.rng.below(3) {
                // Never mapped by anyone in this process: below the arenas.
                0 => (0x1000_0000_0000 + self.rng.below(0x3000_0000_0000)) as usize,
                // Non-canonical.
                1 => (0x0000_8000_0000_0000u64 + self.rng.below(0x7fff_0000_0000_0000)) as usize,
                _ => (0xffff_ffff_ffff_f000u64 + self.rng.below(0x1000)) as usize,
            },
        }
    }

    // ---- value generators ----

    /// A thread id to attach to, and whether a refusal is certain (with
    /// the errnos it must be one of).
    pub(super) fn pick_tid(&mut self) -> (u32, Option<(&'static [i32], &'static str)>) {
        const KTHREAD: &[i32] = &[libc::EPERM];
        const NOSUCH: &[i32] = &[libc::ESRCH];
        match self.rng.weighted(&[30, 10, 20, 30, 8, 4, 3, 4]) {
            0 => (0, None),
            1 => (sys::gettid(), None),
            2 => (
                PROC_TIDS[self.rng.below(16) as usize].load(Ordering::Relaxed),
                None,
            ),
            3 => {
                let e =
                    shared().board[self.rng.below(BOARD as u64) as usize].load(Ordering::Relaxed);
                (e as u32, None)
            }
            4 => {
                if self.children.is_empty() {
                    (0, None)
                } else {
                    (self.rng.pick(&self.children) as u32, None)
                }
            }
            5 => (2, Some((KTHREAD, "tid 2 is kthreadd"))),
            6 => {
                if self.uid != 0 {
                    (1, Some((&[libc::EACCES], "pid 1 belongs to root")))
                } else {
                    // Root may attach to init, but init sleeps in wait()
                    // for the whole run, so the attachment would outlive
                    // the fuzzer: kthreadd instead.
                    (2, Some((KTHREAD, "tid 2 is kthreadd")))
                }
            }
            _ => {
                let t = self.rng.pick(&[
                    0x7fff_ffffu32,
                    0x8000_0000,
                    u32::MAX,
                    4_194_305,
                    0xffff_fffe,
                ]);
                (t, Some((NOSUCH, "no such thread")))
            }
        }
    }

    /// A flag bit outside `mask` (see [`unknown_bit`]).
    pub(super) fn unknown_bit(&mut self, mask: u32) -> u32 {
        unknown_bit(&mut self.rng, mask)
    }

    /// A PMD value: tiny periods (-1, -2), small ones, boundaries, garbage.
    pub(super) fn pmd_value(&mut self) -> u64 {
        match self.rng.below(8) {
            0 => u64::MAX,
            1 => u64::MAX - 1,
            2 => 0u64.wrapping_sub(self.rng.range(1, 64)),
            3 => 0u64.wrapping_sub(self.rng.range(1, 100_000)),
            4 => 0,
            _ => self.rng.interesting_u64(),
        }
    }

    /// A PMC number of the model (soft: the draw it always was).
    fn pick_reg(&mut self, regs: &[u16]) -> u16 {
        let n = regs.len().max(1) as u64;
        let i = self.rng.below(n) as usize;
        regs.get(i).copied().unwrap_or(0)
    }

    /// A PMC value for `reg` of a hardware model: any of the user's bits,
    /// the kernel-mode ones half the time.
    fn hw_pmc_value(&mut self, reg: u16) -> u64 {
        let m = model();
        let i = (reg as usize).min(abi::PFM_MAX_PMCS - 1);
        let mut v = self.rng.next_u64() & !m.rsvd[i];
        if self.rng.chance(1, 2) {
            v &= !m.os_bits[i];
        }
        v
    }

    /// A register's set: 0, or with `in_sets` half the time one of 1..15
    /// (which a pool context may or may not have).
    fn pick_reg_set(&mut self, in_sets: bool) -> u16 {
        if in_sets && self.rng.chance(1, 2) {
            self.rng.range(1, abi::PFM_MAX_SETS as u64 - 1) as u16
        } else {
            0
        }
    }

    /// A PMC element, and what the module must make of it; `in_sets`: the
    /// call's elements name sets 1..15 too.
    pub(super) fn gen_pmc(&mut self, in_sets: bool) -> (abi::PfmPmc, Verdict) {
        let m = model();
        let reg_num = self.pick_reg(&m.pmcs);
        let reg_value = if m.soft {
            // Every soft event, the page faults too.
            self.rng.below(7)
        } else {
            self.hw_pmc_value(reg_num)
        };
        let privileged = sys::privileged();
        let mut p = abi::PfmPmc {
            reg_num,
            reg_set: self.pick_reg_set(in_sets),
            reg_flags: 0,
            reg_value,
            reserved: [0; 2],
        };
        if self.rng.chance(1, 4) {
            // Output bits are ignored on input.
            p.reg_flags = (self.rng.next_u64() as u32) & abi::PFM_REG_RETFL_MASK;
        }
        if self.rng.chance(1, 8) {
            match self.rng.below(5) {
                0 => p.reg_num = self.rng.pick(&[4u16, 5, 15, 31, 32, 63, 64, 0xffff]),
                1 => p.reg_set = self.rng.range(1, 0xffff) as u16,
                2 => p.reg_flags |= 1 << self.rng.below(16),
                3 => {
                    p.reg_value =
                        self.rng.pick(&[4u64, 5, 0x100, u64::MAX, 1 << 63]) | self.rng.below(4)
                }
                _ => p.reserved[self.rng.below(2) as usize] = self.rng.interesting_u64() | 1,
            }
        }
        // A register or value that is wrong for soft may be right for
        // another model: the model's own rules decide.
        let fields_ok = p.reserved == [0; 2]
            && p.reg_flags & !abi::PFM_REG_RETFL_MASK == 0
            && m.pmc_ok(p.reg_num, p.reg_value, privileged);
        (p, element_verdict(fields_ok, p.reg_set))
    }

    /// A PMD element to write, and what the module must make of it.
    pub(super) fn gen_pmd(&mut self, in_sets: bool) -> (abi::PfmPmd, Verdict) {
        let m = model();
        let reg_num = self.pick_reg(&m.pmds);
        let mut p = abi::PfmPmd {
            reg_num,
            reg_flags: if self.rng.chance(1, 2) {
                abi::PFM_REGFL_OVFL_NOTIFY
            } else {
                0
            },
            reg_value: self.pmd_value(),
            reg_long_reset: self.pmd_value(),
            reg_short_reset: self.pmd_value(),
            reg_last_reset_val: self.rng.interesting_u64(),
            reg_reset_pmds: if m.soft {
                self.rng.below(16) & m.impl_pmds
            } else {
                self.rng.next_u64() & m.impl_pmds
            },
            ..Default::default()
        };
        p.reg_set = self.pick_reg_set(in_sets);
        if self.rng.chance(1, 4) {
            p.reg_flags |= (self.rng.next_u64() as u32) & abi::PFM_REG_RETFL_MASK;
        }
        // A quarter randomise their period: a mask (too large for the
        // reset values sometimes: EINVAL), a seed of the kernel's (0) or
        // the fuzzer's.
        if self.rng.chance(1, 4) {
            p.reg_flags |= abi::PFM_REGFL_RANDOM;
            p.reg_random_mask = random_mask(&mut self.rng);
            p.reg_random_seed = match self.rng.chance(1, 4) {
                true => 0,
                false => self.rng.interesting_u64(),
            };
        }
        if self.rng.chance(1, 8) {
            match self.rng.below(6) {
                0 => p.reg_num = self.rng.pick(&[4u16, 5, 15, 31, 32, 63, 64, 0xffff]),
                1 => p.reg_set = self.rng.range(1, 0xffff) as u16,
                2 => p.reg_flags |= 1 << self.rng.range(1, 23),
                3 => p.reg_reset_pmds |= 1 << self.rng.range(4, 63),
                // A mask that is not 2^k - 1.
                4 => {
                    p.reg_random_mask = self.rng.pick(&[2u64, 5, 6, 0x10, 0xfe, 1 << 63])
                        | self.rng.interesting_u64() << 1
                }
                // A mask or a seed without the flag (with it: valid).
                _ => {
                    let v = self.rng.interesting_u64() | 1;
                    match self.rng.chance(1, 2) {
                        true => p.reg_random_mask = v,
                        false => p.reg_random_seed = v,
                    }
                }
            }
        }
        let fields_ok = random_fields_ok(&p)
            && p.reg_flags & !(abi::PFM_REGFL_PMD_MASK | abi::PFM_REG_RETFL_MASK) == 0
            && p.reg_num < 64
            && m.impl_pmds & (1 << p.reg_num) != 0
            && p.reg_reset_pmds & !m.impl_pmds == 0;
        (p, element_verdict(fields_ok, p.reg_set))
    }

    /// A PMD element to read, and what the module must make of it.
    pub(super) fn gen_pmd_read(&mut self, in_sets: bool) -> (abi::PfmPmd, Verdict) {
        let m = model();
        let mut p = abi::PfmPmd {
            reg_num: self.pick_reg(&m.pmds),
            ..Default::default()
        };
        p.reg_set = self.pick_reg_set(in_sets);
        if self.rng.chance(1, 3) {
            // The values, flags and randomisation fields are outputs:
            // ignored on input.
            p.reg_value = self.rng.next_u64();
            p.reg_flags = self.rng.next_u64() as u32;
            p.reg_random_mask = self.rng.interesting_u64();
            p.reg_random_seed = self.rng.interesting_u64();
        }
        if self.rng.chance(1, 10) {
            if self.rng.chance(1, 2) {
                p.reg_num = self.rng.pick(&[4u16, 5, 31, 63, 64, 0xffff]);
            } else {
                p.reg_set = self.rng.range(1, 0xffff) as u16;
            }
        }
        let fields_ok = p.reg_num < 64 && m.impl_pmds & (1 << p.reg_num) != 0;
        (p, element_verdict(fields_ok, p.reg_set))
    }

    // ---- the operations ----
}

/// A register element's verdict: its fields, then its set (the module
/// checks the set first, but an element with bad fields is bad whatever
/// its set).
fn element_verdict(fields_ok: bool, set: u16) -> Verdict {
    if fields_ok {
        set_verdict(set)
    } else {
        Verdict::Bad
    }
}

/// A flag bit outside `mask`, whose defined bits are the low ones
/// (`PFM_*_MASK`): drawn above the mask's highest bit, so that a flag the
/// ABI gains is never sent as garbage.
pub(super) fn unknown_bit(rng: &mut Rng, mask: u32) -> u32 {
    1 << rng.range(u64::from(32 - mask.leading_zeros()), 31)
}

/// What `/proc/thread-self/fd/N` links to for a `PFM_IOC_CLONE`'s
/// descriptor: its file is the anonymous inode's (as perf's are), not
/// /dev/perfmon's.
pub(super) const CLONE_LINK: &str = "anon_inode:[perfmon]";

/// Whether `fd` refers to a perfmon context now: /dev/perfmon, or a
/// clone's file (which fstat cannot tell from an eventfd's or an
/// epoll's: the link's name can).
pub(super) fn is_perfmon_fd(fd: i32) -> bool {
    match sys::fstat_rdev(fd) {
        Some(d) => d == shared().rdev.load(Ordering::Relaxed),
        None => sys::fd_link(fd).is_some_and(|l| l == CLONE_LINK),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_bits_are_outside_the_masks() {
        let mut rng = Rng::new(8);
        for mask in [
            abi::PFM_LOAD_MASK,
            abi::PFM_CLONE_MASK,
            abi::PFM_CTXFL_MASK,
            0,
            1,
        ] {
            let mut seen = 0u32;
            for _ in 0..4000 {
                let b = unknown_bit(&mut rng, mask);
                assert_eq!(b.count_ones(), 1);
                assert_eq!(b & mask, 0, "bit {b:#x} of mask {mask:#x}");
                seen |= b;
            }
            // Every bit above the mask is drawn.
            assert_eq!(seen, !mask, "mask {mask:#x}");
        }
    }
}
