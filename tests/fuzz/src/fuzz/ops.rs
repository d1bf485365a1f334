//! The operations of an [`Actor`]: each builds its arguments, runs the
//! system call and checks the result against the ABI's rules.

use std::sync::atomic::Ordering;

use super::actor::*;

use super::model::model;
use super::shared::*;
use super::smpl::Policy;
use crate::rng::Rng;
use crate::sys::{self, abi, PAGE};

/// The fd number is an empty slot (-1) or a garbage number (1000+), not a
/// pool descriptor: the kernel answers EBADF and nothing more is checked.
fn not_pool_fd(fd: i32) -> bool {
    !(0..1000).contains(&fd)
}

impl Actor {
    /// Runs one operation. The actor's generator draws exactly two values
    /// per operation (which one, and the seed of a generator for its
    /// arguments), so the sequence of operations is the same on every run
    /// of a seed even though the choices inside an operation depend on
    /// what other threads did (which fds exist, which children live).
    pub(super) fn step(&mut self, weights: &[u32; NOPS]) {
        let op = OPS[self.rng.weighted(weights)];
        let sub = Rng::new(self.rng.next_u64());
        let main = std::mem::replace(&mut self.rng, sub);
        self.begin(op);
        self.cur_fd = -1;
        match op {
            Op::Open => self.op_open(),
            Op::Close => self.op_close(),
            Op::Dup => self.op_dup(),
            Op::GetInfo | Op::GetState => self.op_get(op),
            Op::WritePmcs | Op::WritePmds | Op::ReadPmds => self.op_regs(op),
            Op::ReadValues => self.op_read_values(),
            Op::Load => self.op_load(),
            Op::Unload | Op::Start | Op::Stop | Op::Restart => self.op_plain(op),
            Op::SetFlags => self.op_set_flags(),
            Op::BadIoctl => self.op_bad_ioctl(),
            Op::Read => self.op_read(),
            Op::Poll => self.op_poll(),
            Op::Fcntl => self.op_fcntl(),
            Op::MiscFd => self.op_misc_fd(),
            Op::Sched => self.op_sched(),
            Op::Arm => self.op_arm(),
            Op::Thread => self.op_thread(),
            Op::Fork => self.op_fork(),
            Op::Signal => self.op_signal(),
            Op::Worker => self.op_worker(),
            Op::Reap => self.op_reap(false),
            Op::Epoll => self.op_epoll(),
            Op::Hotplug => self.op_hotplug(),
            Op::Probe => self.op_probe(),
            Op::CreateSets => self.op_create_sets(),
            Op::DeleteSets => self.op_delete_sets(),
            Op::GetinfoSets => self.op_getinfo_sets(),
            Op::ReadThreads => self.op_read_threads(),
            Op::Whole => self.op_whole(),
            Op::Process => self.op_process(),
            Op::ExecStart => self.op_exec_start(),
            Op::Clone => self.op_clone(),
            Op::SmplSetup => self.op_smpl_setup(),
            Op::SmplMap => self.op_smpl_map(),
            Op::SmplDrain => self.op_smpl_drain(),
            Op::SmplUnmap => self.op_smpl_unmap(),
            Op::SmplRemap => self.op_smpl_remap(),
        }
        self.untouch();
        self.end();
        self.rng = main;
    }

    pub(super) fn op_open(&mut self) {
        let mut flags = match self.rng.below(10) {
            0 => libc::O_RDONLY,
            1 => libc::O_WRONLY,
            _ => libc::O_RDWR,
        };
        if self.rng.chance(1, 4) {
            flags |= libc::O_NONBLOCK;
        }
        if self.rng.chance(1, 2) {
            flags |= libc::O_CLOEXEC;
        }
        self.note(format_args!(" flags={flags:#x}"));
        let r = sys::open(sys::DEV, flags).map(|fd| fd as i64);
        let r = self.res(Op::Open, r);
        match r {
            Ok(fd) => self.store_fd(fd as i32),
            // EMFILE: an unprivileged child at its limit (see hostile tests).
            Err(e) if e == libc::EMFILE || e == libc::ENFILE || e == libc::EINTR => {}
            Err(_) => self.allow(Op::Open, r, &[]),
        }
    }

    pub(super) fn op_close(&mut self) {
        let i = self.rng.below(POOL as u64) as usize;
        let fd = FDS[i].swap(-1, Ordering::AcqRel);
        if fd < 0 {
            return;
        }
        self.note(format_args!(" fd={fd}"));
        let r = super::smpl::close_pool_fd(fd).map(|_| 0);
        let r = self.res(Op::Close, r);
        self.allow(Op::Close, r, &[]);
    }

    pub(super) fn op_dup(&mut self) {
        let (_, fd) = self.pick_fd();
        self.note(format_args!(" fd={fd}"));
        let r = sys::dup(fd).map(|v| v as i64);
        if let Ok(nfd) = self.res(Op::Dup, r) {
            self.store_fd(nfd as i32)
        }
    }

    pub(super) fn op_get(&mut self, op: Op) {
        let (_, fd) = self.pick_fd();
        let (cmd, len) = if op == Op::GetInfo {
            (abi::PFM_IOC_GET_INFO, std::mem::size_of::<abi::PfmInfo>())
        } else {
            (
                abi::PFM_IOC_GET_STATE,
                std::mem::size_of::<abi::PfmCtxInfo>(),
            )
        };
        let p = self.pick_ptr(80);
        let addr = self.place(p, len);
        self.note(format_args!(" fd={fd} ptr={p:?}@{addr:#x}"));
        let r = sys::ioctl(fd, cmd, addr);
        let r = self.res(op, r);
        if not_pool_fd(fd) {
            return;
        }
        if p != Ptr::Good {
            self.expect_err(op, r, &[libc::EFAULT], "the output is not writable");
            return;
        }
        self.allow(op, r, &[]);
        if r.is_err() {
            return;
        }
        if op == Op::GetInfo {
            let info: abi::PfmInfo = self.arena.get(addr);
            let m = model();
            if info.abi_version != abi::PFM_ABI_VERSION
                || info.size as usize != len
                || info.num_pmcs as usize != m.pmcs.len()
                || info.num_pmds as usize != m.pmds.len()
                || info.impl_pmcs != m.impl_pmcs
                || info.impl_pmds != m.impl_pmds
                || !(16..=64).contains(&info.counter_width)
            {
                self.anomaly(
                    op,
                    format!(
                        "bad info: version {} size {} pmcs {} pmds {} impl {:#x}/{:#x} width {}",
                        info.abi_version,
                        info.size,
                        info.num_pmcs,
                        info.num_pmds,
                        info.impl_pmcs,
                        info.impl_pmds,
                        info.counter_width
                    ),
                );
            }
        } else {
            let st: abi::PfmCtxInfo = self.arena.get(addr);
            let ok_state = matches!(
                st.state,
                abi::PFM_STATE_UNLOADED | abi::PFM_STATE_LOADED | abi::PFM_STATE_MASKED
            );
            if !ok_state
                || st.flags & !abi::PFM_CTXFL_MASK != 0
                || st.status & !0xf != 0
                || st.used_pmds & !model().impl_pmds != 0
                || st.reserved != [0; 2]
            {
                self.anomaly(
                    op,
                    format!("bad state through an open fd: state {} tid {} flags {:#x} status {:#x} used {:#x}", st.state, st.tid, st.flags, st.status, st.used_pmds),
                );
            }
            // STARTED may stay set after the target exited (no STOP since).
            if st.state == abi::PFM_STATE_UNLOADED && st.status & abi::PFM_CTXST_ACTIVE != 0 {
                self.anomaly(
                    op,
                    format!("UNLOADED context reports status {:#x}", st.status),
                );
            }
            // Whole programs: a loaded context monitors at least its own
            // thread; threads are lost only by a context that was loaded.
            let attached = matches!(st.state, abi::PFM_STATE_LOADED | abi::PFM_STATE_MASKED);
            if (attached || st.lost_threads > 0) && st.threads == 0 {
                self.anomaly(
                    op,
                    format!(
                        "state {} with {} threads, {} lost",
                        st.state, st.threads, st.lost_threads
                    ),
                );
            }
            // An exec can only start an attached context: LOAD arms,
            // START, STOP and UNLOAD disarm.
            if st.state == abi::PFM_STATE_UNLOADED
                && st.status & abi::PFM_CTXST_EXEC_ARMED != 0
                && is_perfmon_fd(fd)
            {
                super::shared::record_finding(
                    0,
                    &format!(
                        "{} #{} get_state: pool fd {fd}: state UNLOADED, status {:#x}, flags {:#x}, tid {}",
                        self.name, self.n, st.status, st.flags, st.tid
                    ),
                );
            }
        }
    }

    pub(super) fn op_regs(&mut self, op: Op) {
        let (_, fd) = self.pick_fd();
        let (cmd, elem) = match op {
            Op::WritePmcs => (abi::PFM_IOC_WRITE_PMCS, 32usize),
            Op::WritePmds => (abi::PFM_IOC_WRITE_PMDS, 64),
            _ => (abi::PFM_IOC_READ_PMDS, 64),
        };
        let count: u32 = match self.rng.weighted(&[55, 12, 4, 12, 4, 4, 4, 5]) {
            0 => self.rng.range(1, 4) as u32,
            1 => self.rng.range(5, 16) as u32,
            2 => self.rng.range(17, 64) as u32,
            3 => 1,
            4 => 0,
            5 => 65,
            6 => self
                .rng
                .pick(&[u32::MAX, 0x8000_0000, 0x1000_0000, 0x0400_0001, 1 << 26]),
            _ => 64,
        };
        let n = (count as usize).min(64);
        // A quarter of the calls name event sets 1..15 in half their
        // elements (the others only set 0, which every context has).
        let in_sets = self.rng.chance(1, 4);
        let mut verdicts = Vec::with_capacity(n);
        let rp = self.pick_ptr(88);
        let raddr = self.place_in(rp, n * elem, true);
        for i in 0..n {
            let a = raddr + i * elem;
            let verdict = match op {
                Op::WritePmcs => {
                    let (p, v) = self.gen_pmc(in_sets);
                    self.arena.put(a, p);
                    v
                }
                Op::WritePmds => {
                    let (p, v) = self.gen_pmd(in_sets);
                    self.arena.put(a, p);
                    v
                }
                _ => {
                    let (p, v) = self.gen_pmd_read(in_sets);
                    self.arena.put(a, p);
                    v
                }
            };
            verdicts.push(verdict);
        }
        let all_valid = !verdicts.contains(&Verdict::Bad);
        let sets = verdicts.iter().filter(|v| **v == Verdict::MaybeSet).count();
        let mut hdr = abi::PfmRegsArg {
            regs: raddr as u64,
            count,
            done: self.rng.next_u64() as u32,
            time_enabled: self.rng.next_u64(),
            time_running: self.rng.next_u64(),
            reserved: [0; 2],
        };
        let bad_reserved = self.rng.chance(1, 30);
        if bad_reserved {
            hdr.reserved[self.rng.below(2) as usize] = self.rng.interesting_u64() | 1;
        }
        let hp = self.pick_ptr(94);
        let haddr = self.place(hp, std::mem::size_of::<abi::PfmRegsArg>());
        self.arena.put(haddr, hdr);
        self.note(format_args!(
            " fd={fd} hdr={hp:?} regs={rp:?} count={count} valid={all_valid} sets={sets} rsvd={bad_reserved}"
        ));
        let r = sys::ioctl(fd, cmd, haddr);
        let r = self.res(op, r);
        if not_pool_fd(fd) {
            return;
        }
        // What the module must answer, in the order it checks.
        if !hp.readable() {
            return self.expect_err(op, r, &[libc::EFAULT], "the header is not readable");
        }
        if hp == Ptr::ReadOnly {
            // The header read from the RO page is its random content.
            return self.allow(op, r, &[libc::EFAULT, libc::EINVAL, libc::E2BIG]);
        }
        if bad_reserved || count == 0 {
            return self.expect_err(op, r, &[libc::EINVAL], "count 0 or reserved bits set");
        }
        if count > 64 {
            return self.expect_err(op, r, &[libc::E2BIG], "count > PFM_MAX_REGS_PER_CALL");
        }
        if !rp.readable() {
            return self.expect_err(op, r, &[libc::EFAULT], "the register array is not readable");
        }
        if rp == Ptr::ReadOnly {
            return self.allow(op, r, &[libc::EFAULT, libc::EINVAL]);
        }
        // Valid registers are applied whatever the context's state; an
        // element whose set may be missing may be refused (EINVAL, `done`
        // at it).
        let done: abi::PfmRegsArg = self.arena.get(haddr);
        self.check_verdicts(op, r, done.done, &verdicts, &[]);
        // What a read returns of each PMD's period randomisation agrees
        // with its flag and reset values, whatever a writer asked.
        if op == Op::ReadPmds && r.is_ok() {
            for i in 0..n {
                let p: abi::PfmPmd = self.arena.get(raddr + i * elem);
                if let Some(wrong) = random_output_wrong(&p) {
                    self.anomaly(op, format!("element {i}: {wrong}"));
                    break;
                }
                if p.reg_flags & abi::PFM_REGFL_RANDOM != 0 {
                    shared().random_reads.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    pub(super) fn op_load(&mut self) {
        let (_, fd) = self.pick_fd();
        let (tid, refusal) = self.pick_tid();
        let mut l = abi::PfmLoad {
            tid,
            ..Default::default()
        };
        // The set monitoring starts in: mostly 0, sometimes one the context
        // may have, sometimes one no context can have.
        l.load_set = match self.rng.weighted(&[80, 15, 5]) {
            0 => 0,
            1 => self.rng.range(1, abi::PFM_MAX_SETS as u64 - 1) as u16,
            _ => self.rng.pick(&[16u16, 17, 0x100, 0xffff]),
        };
        let set = set_verdict(l.load_set);
        // A whole process (PFM_LOAD_PROCESS) a fifth of the time.
        if self.rng.chance(1, 5) {
            l.flags = abi::PFM_LOAD_PROCESS;
        }
        // LOAD and START in one call (PFM_LOAD_START) a quarter of the
        // time. The pool keeps no state, so what its START may answer
        // (EBADFD: the thread gone or another actor's UNLOAD in between;
        // EAGAIN: live counters out of reach) is allowed whatever the flags.
        if self.rng.chance(1, 4) {
            l.flags |= abi::PFM_LOAD_START;
        }
        let garbage = self.rng.chance(1, 25);
        if garbage {
            if self.rng.chance(1, 2) {
                // At least one bit outside PFM_LOAD_MASK, with or without
                // the defined ones.
                l.flags |= (self.rng.interesting_u32() & !abi::PFM_LOAD_MASK)
                    | self.unknown_bit(abi::PFM_LOAD_MASK);
            } else {
                match self.rng.below(3) {
                    0 => l.pad0 = 1,
                    1 => l.pad1 = self.rng.interesting_u32() | 1,
                    _ => l.reserved[self.rng.below(2) as usize] = self.rng.interesting_u64() | 1,
                }
            }
        }
        let p = self.pick_ptr(94);
        let addr = self.place(p, std::mem::size_of::<abi::PfmLoad>());
        self.arena.put(addr, l);
        self.note(format_args!(
            " fd={fd} tid={tid} flags={:#x} set={} ptr={p:?} garbage={garbage}",
            l.flags, l.load_set
        ));
        let r = sys::ioctl(fd, abi::PFM_IOC_LOAD, addr);
        let r = self.res(Op::Load, r);
        if not_pool_fd(fd) {
            return;
        }
        if !p.readable() {
            return self.expect_err(Op::Load, r, &[libc::EFAULT], "the argument is not readable");
        }
        if p == Ptr::ReadOnly {
            return self.allow(
                Op::Load,
                r,
                &[
                    libc::EINVAL,
                    libc::EBUSY,
                    libc::EBADFD,
                    libc::ESRCH,
                    libc::EPERM,
                    libc::EACCES,
                    libc::ENOSPC,
                    libc::EAGAIN,
                    libc::EDQUOT,
                    libc::EINTR,
                ],
            );
        }
        if garbage {
            return self.expect_err(Op::Load, r, &[libc::EINVAL], "flags or reserved bits set");
        }
        if set == Verdict::Bad {
            // Checked before the thread is looked up; a loaded context
            // answers EBUSY first.
            return self.expect_err(
                Op::Load,
                r,
                &[libc::EINVAL, libc::EBUSY, libc::EBADFD],
                "load_set names no set",
            );
        }
        if let Some((errs, why)) = refusal {
            let mut allowed: Vec<i32> = errs.to_vec();
            if l.flags & abi::PFM_LOAD_PROCESS != 0 {
                // PFM_LOAD_PROCESS asks whether the loader may see the
                // process before the thread is judged (a kernel thread
                // is EACCES then, not EPERM, for an unprivileged loader).
                allowed.push(libc::EACCES);
            }
            // EINTR: a signal while waiting for the target's exec.
            allowed.extend_from_slice(&[libc::EBUSY, libc::EBADFD, libc::EINTR]);
            // The sets, which the fuzzer does not track, are judged before
            // the thread is looked up: a missing load_set, or an
            // OVFL_SWITCH set none of whose switch PMDs is written (load_set
            // 0 included).
            allowed.push(libc::EINVAL);
            return self.expect_err(Op::Load, r, &allowed, why);
        }
        let mut allowed = vec![
            libc::EBUSY,
            libc::EBADFD,
            libc::ESRCH,
            libc::EPERM,
            libc::EACCES,
            libc::ENOSPC,
            libc::EAGAIN,
            // The per-user limit; a signal while waiting for an exec.
            libc::EDQUOT,
            libc::EINTR,
        ];
        // Sets the fuzzer does not track: load_set missing, or an
        // OVFL_SWITCH set none of whose switch PMDs is written in it.
        allowed.push(libc::EINVAL);
        self.allow(Op::Load, r, &allowed);
        if r.is_ok() && l.flags & abi::PFM_LOAD_START != 0 {
            shared().load_starts.fetch_add(1, Ordering::Relaxed);
        }
        if r.is_ok() && self.uid != 0 && tid != 0 && tid != sys::gettid() {
            // An unprivileged tool may only monitor threads of its own user.
            // /proc/TID belongs to root when the task is not dumpable or has
            // lost its mm (exiting): then look at its status (which costs an
            // fd, in this rare case only); a zombie is not a finding.
            let owner = match proc_uid(tid) {
                Some(o) if o != self.uid => proc_status_uid(tid),
                other => other,
            };
            if let Some(owner) = owner {
                if owner != self.uid {
                    self.anomaly(
                        Op::Load,
                        format!("uid {} attached to tid {tid} of uid {owner}", self.uid),
                    );
                }
            }
            self.check_ptrace_rule(tid);
        }
    }

    /// After an unprivileged LOAD of another process's thread: ptrace's
    /// capability and namespace rule held (commoncap). The target's
    /// permitted capabilities are within ours if it is in our user
    /// namespace; a loader in a namespace of its own sees no thread
    /// outside it. Unreadable facts (the thread gone, its ns link not
    /// ours to read) are no finding.
    fn check_ptrace_rule(&mut self, tid: u32) {
        let me = sys::gettid();
        let (Some(mine), Some(theirs)) = (sys::user_ns_of(me), sys::user_ns_of(tid)) else {
            return;
        };
        if mine == theirs {
            if let (Some(own), Some(target)) = (sys::cap_permitted(me), sys::cap_permitted(tid)) {
                if target & !own != 0 {
                    self.anomaly(
                        Op::Load,
                        format!("attached to tid {tid} holding capabilities {target:#x} beyond ours {own:#x}"),
                    );
                }
            }
        } else if sys::in_own_user_ns() {
            self.anomaly(
                Op::Load,
                format!("attached from user namespace {mine} to tid {tid} in {theirs}"),
            );
        }
    }

    pub(super) fn op_plain(&mut self, op: Op) {
        let (_, fd) = self.pick_fd();
        let cmd = match op {
            Op::Unload => abi::PFM_IOC_UNLOAD,
            Op::Start => abi::PFM_IOC_START,
            Op::Stop => abi::PFM_IOC_STOP,
            _ => abi::PFM_IOC_RESTART,
        };
        // The argument is ignored: anything goes.
        let arg = if self.rng.chance(1, 2) {
            0
        } else {
            self.rng.next_u64() as usize
        };
        self.note(format_args!(" fd={fd}"));
        let r = sys::ioctl(fd, cmd, arg);
        let r = self.res(op, r);
        if !not_pool_fd(fd) {
            // A hardware model's live operations may find the thread's
            // counters out of reach, on a CPU it keeps leaving (EAGAIN,
            // perfmon.rst, "live operations"): seen once in 40,000
            // operations on intel_arch_sim.
            let errs: &[i32] = if model().soft {
                &[libc::EBADFD]
            } else {
                &[libc::EBADFD, libc::EAGAIN]
            };
            self.allow(op, r, errs);
        }
    }

    pub(super) fn op_set_flags(&mut self) {
        let (_, fd) = self.pick_fd();
        // Every combination of the four flags: NOTIFY_BLOCK, NO_MSG,
        // INHERIT, START_ON_EXEC.
        let mut f = abi::PfmCtxFlags {
            flags: self.rng.below(u64::from(abi::PFM_CTXFL_MASK) + 1) as u32,
            pad: 0,
            reserved: [0; 3],
        };
        let garbage = self.rng.chance(1, 6);
        if garbage {
            match self.rng.below(3) {
                0 => f.flags |= self.unknown_bit(abi::PFM_CTXFL_MASK),
                1 => f.pad = self.rng.interesting_u32() | 1,
                _ => f.reserved[self.rng.below(3) as usize] = self.rng.interesting_u64() | 1,
            }
        }
        let p = self.pick_ptr(94);
        let addr = self.place(p, std::mem::size_of::<abi::PfmCtxFlags>());
        self.arena.put(addr, f);
        self.note(format_args!(
            " fd={fd} flags={:#x} ptr={p:?} garbage={garbage}",
            f.flags
        ));
        let r = sys::ioctl(fd, abi::PFM_IOC_SET_FLAGS, addr);
        let r = self.res(Op::SetFlags, r);
        if not_pool_fd(fd) {
            return;
        }
        if !p.readable() {
            return self.expect_err(
                Op::SetFlags,
                r,
                &[libc::EFAULT],
                "the argument is not readable",
            );
        }
        if p == Ptr::ReadOnly {
            return self.allow(Op::SetFlags, r, &[libc::EINVAL, libc::EBADFD]);
        }
        if garbage {
            return self.expect_err(
                Op::SetFlags,
                r,
                &[libc::EINVAL],
                "unknown flags or reserved bits",
            );
        }
        self.allow(Op::SetFlags, r, &[libc::EBADFD]);
    }

    pub(super) fn op_bad_ioctl(&mut self) {
        let (_, fd) = self.pick_fd();
        let known = KNOWN_IOCTLS;
        let base = self.rng.pick(&known);
        let kind = self.rng.below(8);
        let (cmd, expect): (u32, &[i32]) = match kind {
            // The size field forged (never the true size).
            0 => {
                let size = (base >> 16) & 0x3fff;
                let mut s = self.rng.pick(&[
                    0u32, 1, 7, 8, 31, 33, 47, 49, 63, 65, 871, 873, 4096, 0x3fff,
                ]);
                if s == size {
                    s ^= 1;
                }
                ((base & !(0x3fff << 16)) | (s << 16), &[libc::EINVAL])
            }
            // The direction bits changed.
            1 => {
                let dir = base >> 30;
                let mut d = self.rng.below(4) as u32;
                if d == dir {
                    d = (d + 1) % 4;
                }
                ((base & 0x3fff_ffff) | (d << 30), &[libc::EINVAL])
            }
            // Another type byte.
            2 => {
                let mut t = self.rng.below(256) as u32;
                if t == abi::PFM_IOC_MAGIC {
                    t = 0;
                }
                if [b'T' as u32, b'f' as u32, 0x58, 0x94, 0x12, 0x15, 0x00].contains(&t) {
                    t = 0xB7;
                }
                ((base & !(0xff << 8)) | (t << 8), &[libc::ENOTTY])
            }
            // Our type, a number that does not exist.
            3 => {
                let nr = self.rng.range(KNOWN_IOCTLS.len() as u64, 0xff) as u32;
                let dir = self.rng.below(4) as u32;
                let size = self.rng.below(0x4000) as u32;
                (
                    (dir << 30) | (size << 16) | (abi::PFM_IOC_MAGIC << 8) | nr,
                    &[libc::ENOTTY],
                )
            }
            // Generic VFS ioctls that reach the file (FIOASYNC calls ->fasync).
            4 => {
                let c = self.rng.pick(&[
                    libc::FIOASYNC as u32,
                    libc::FIONBIO as u32,
                    libc::FIONREAD as u32,
                    libc::FIOCLEX as u32,
                    libc::FIONCLEX as u32,
                ]);
                (c, &[libc::EFAULT, libc::ENOTTY, libc::EINVAL])
            }
            // A fully random number.
            _ => {
                let mut c = self.rng.next_u64() as u32;
                if (c >> 8) & 0xff != abi::PFM_IOC_MAGIC {
                    // Keep clear of the VFS's own ('T', 'f', 0x94, 0x12, 'X').
                    c = (c & !(0xff << 8)) | (0xB7 << 8);
                }
                (c, &[libc::ENOTTY, libc::EINVAL])
            }
        };
        let p = self.pick_ptr(70);
        let addr = self.place(p, 8);
        if p == Ptr::Good {
            self.arena.put(addr, self.rng.below(2) as i32);
        }
        self.note(format_args!(
            " fd={fd} cmd={cmd:#010x} kind={kind} ptr={p:?}"
        ));
        let r = sys::ioctl(fd, cmd, addr);
        let r = self.res(Op::BadIoctl, r);
        if cmd == abi::PFM_IOC_CLONE {
            // A random number that is PFM_IOC_CLONE, on an argument that
            // happens to be valid, returns a descriptor: not to be leaked.
            if let Ok(nfd) = r {
                self.store_fd(nfd as i32);
            }
        }
        if not_pool_fd(fd) {
            return;
        }
        if kind == 4 {
            // FIONREAD and friends may succeed; only odd errnos are wrong.
            return self.allow(Op::BadIoctl, r, expect);
        }
        if kind == 5
            && (cmd >> 8) & 0xff == abi::PFM_IOC_MAGIC
            && ((cmd & 0xff) as usize) < KNOWN_IOCTLS.len()
            && known.contains(&cmd)
        {
            // A random number that happens to be a real command.
            return;
        }
        self.expect_err(Op::BadIoctl, r, expect, "not a valid perfmon command");
    }

    pub(super) fn op_read(&mut self) {
        let (_, fd) = self.pick_fd();
        let len = match self.rng.below(12) {
            0 => 0,
            1 => self.rng.range(1, 63) as usize,
            2..=5 => 64,
            6 => 65,
            7 => 128,
            8 => 512,
            9 => 4096,
            10 => self.rng.range(64, 16000) as usize,
            _ => 64 * self.rng.range(1, 12) as usize,
        };
        let p = self.pick_ptr(85);
        let addr = self.place_in(p, len, true);
        // Do not sit in a blocking read for the timer period every time.
        if self.rng.chance(4, 5) {
            match sys::poll(&[(fd, libc::POLLIN)], 0) {
                Ok(rev)
                    if rev[0] & (libc::POLLIN | libc::POLLHUP) == 0
                    // Nothing to read: make it non-blocking by other means.
                    && self.rng.chance(1, 2) =>
                {
                    return;
                }
                _ => {}
            }
        }
        self.note(format_args!(" fd={fd} len={len} ptr={p:?}"));
        let r = sys::read_raw(fd, addr, len);
        let r = self.res(Op::Read, r);
        if not_pool_fd(fd) {
            return;
        }
        if len < 64 {
            // access_ok() comes first: a kernel or non-canonical buffer is EFAULT.
            return self.expect_err(
                Op::Read,
                r,
                &[libc::EINVAL, libc::EFAULT],
                "buffer shorter than one message",
            );
        }
        self.allow(
            Op::Read,
            r,
            &[libc::EAGAIN, libc::EINTR, libc::EFAULT, libc::EBADF],
        );
        match r {
            Ok(n) if n as usize % 64 != 0 || n as usize > len => {
                self.anomaly(Op::Read, format!("read {n} bytes of {len}"))
            }
            Ok(n) if p == Ptr::Good => {
                for i in 0..n as usize / 64 {
                    let m: abi::PfmMsg = self.arena.get(addr + i * 64);
                    // An overflow names the set of its PMDs (0 without
                    // sets, and on the hardware models, which have none).
                    let ok = match m.msg_type {
                        abi::PFM_MSG_OVFL => {
                            m.ovfl_pmds != 0
                                && m.ovfl_pmds & !model().impl_pmds == 0
                                && set_verdict(m.set) != Verdict::Bad
                        }
                        abi::PFM_MSG_END | abi::PFM_MSG_REVOKED => m.set == 0,
                        // A sampling buffer filled: names the PMDs whose
                        // entry filled it.
                        abi::PFM_MSG_SMPL_FULL => {
                            m.ovfl_pmds != 0 && m.ovfl_pmds & !model().impl_pmds == 0 && m.set == 0
                        }
                        _ => false,
                    };
                    if !ok || m.reserved0 != 0 || m.reserved != [0; 3] {
                        self.anomaly(
                            Op::Read,
                            format!(
                                "bad message: type {} tid {} set {} ovfl {:#x}",
                                m.msg_type, m.tid, m.set, m.ovfl_pmds
                            ),
                        );
                    }
                }
            }
            Ok(n) if n > 0 && p != Ptr::Good && !self.arena.writable(addr, n as usize) => {
                self.anomaly(Op::Read, format!("read {n} bytes into a {p:?} buffer"));
            }
            _ => {}
        }
    }

    pub(super) fn op_poll(&mut self) {
        let k = self.rng.range(1, 4) as usize;
        let mut fds = Vec::with_capacity(k);
        for _ in 0..k {
            let (_, fd) = self.pick_fd();
            let ev = match self.rng.below(4) {
                0 => libc::POLLIN,
                1 => libc::POLLIN | libc::POLLOUT,
                2 => libc::POLLPRI | libc::POLLRDNORM,
                _ => self.rng.next_u64() as i16,
            };
            fds.push((fd, ev));
        }
        let timeout = if self.rng.chance(4, 5) {
            0
        } else {
            self.rng.range(1, 10) as i32
        };
        self.note(format_args!(" n={k} timeout={timeout}"));
        let r = sys::poll(&fds, timeout)
            .map(|rev| rev.iter().fold(0i64, |a, &b| a << 8 | (b as i64 & 0xff)));
        let r = self.res(Op::Poll, r);
        self.allow(Op::Poll, r, &[libc::EINTR]);
    }

    pub(super) fn op_fcntl(&mut self) {
        let (_, fd) = self.pick_fd();
        let which = self.rng.below(6);
        let r = match which {
            // fasync on / off.
            0 | 1 => sys::fcntl(fd, libc::F_GETFL, 0).and_then(|fl| {
                let fl = if which == 0 {
                    fl | libc::O_ASYNC as i64
                } else {
                    fl & !(libc::O_ASYNC as i64)
                };
                sys::fcntl(fd, libc::F_SETFL, fl)
            }),
            2 => sys::fcntl(fd, libc::F_GETFL, 0)
                .and_then(|fl| sys::fcntl(fd, libc::F_SETFL, fl ^ libc::O_NONBLOCK as i64)),
            3 => sys::fcntl(
                fd,
                libc::F_SETOWN,
                if self.rng.chance(1, 2) {
                    sys::getpid() as i64
                } else {
                    0
                },
            ),
            4 => sys::set_owner_ex(fd, true, sys::gettid()),
            _ => sys::fcntl(
                fd,
                sys::F_SETSIG,
                self.rng
                    .pick(&[0, libc::SIGIO, libc::SIGUSR1, libc::SIGUSR2]) as i64,
            ),
        };
        self.note(format_args!(" fd={fd} kind={which}"));
        self.res(Op::Fcntl, r).ok();
    }

    pub(super) fn op_misc_fd(&mut self) {
        let (_, fd) = self.pick_fd();
        let which = self.rng.below(4);
        self.note(format_args!(" fd={fd} kind={which}"));
        let addr = self.arena.at(0);
        let mut page_ok = false;
        let r = match which {
            0 => sys::write_raw(fd, addr, self.rng.pick(&[0usize, 1, 64, 4096])),
            1 => sys::lseek(
                fd,
                self.rng.interesting_u64() as i64,
                self.rng.below(3) as i32,
            ),
            2 => {
                let len = PAGE * self.rng.range(1, 4) as usize;
                let prot = self
                    .rng
                    .pick(&[libc::PROT_READ, libc::PROT_READ | libc::PROT_WRITE]);
                page_ok = len == PAGE && prot == libc::PROT_READ;
                sys::mmap_fd(fd, len, prot)
            }
            _ => sys::fstat_ok(fd),
        };
        let r = self.res(Op::MiscFd, r);
        if not_pool_fd(fd) {
            return;
        }
        match which {
            0 => {
                if let Ok(n) = r {
                    if n > 0 {
                        self.anomaly(Op::MiscFd, format!("write of {n} bytes accepted"));
                    }
                }
            }
            // The counter page: one page, read-only, at offset 0 (EACCES:
            // PROT_WRITE on a read-only fd, refused before perfmon sees it).
            2 => match r {
                Ok(_) if !page_ok => self.anomaly(
                    Op::MiscFd,
                    "mmap of more than a page or writable accepted".to_string(),
                ),
                Ok(v) if v != i64::from(abi::PFM_PAGE_VERSION) => {
                    self.anomaly(Op::MiscFd, format!("page version {v}"))
                }
                Ok(_) => {}
                // No EBUSY: the page shows the active set of a context
                // with sets, beside a buffer if it has one (issue 33).
                Err(_) => self.allow(
                    Op::MiscFd,
                    r,
                    &[libc::EINVAL, libc::EPERM, libc::EACCES, libc::ENOMEM],
                ),
            },
            _ => {}
        }
    }

    /// Sets up a context that overflows all the time: a tiny period on
    /// context switches or the task clock, notify or notify-block, loaded on
    /// a thread (self, a sibling, a child, anyone on the board) and started.
    /// The fd goes to the pool, so the other operations (RESTART, read,
    /// close, unload) meet it.
    pub(super) fn op_arm(&mut self) {
        self.arm(None)
    }

    /// Sets up an overflowing context on `target` (None: a random thread).
    pub(super) fn arm(&mut self, target: Option<u32>) {
        shared().arms.fetch_add(1, Ordering::Relaxed);
        let fd = match sys::open_pfm() {
            Ok(fd) => fd,
            Err(e) => {
                self.res(Op::Arm, Err(e)).ok();
                return;
            }
        };
        // Whether another thread reaches this number through its pool
        // from now on (`arm_clone` judges its copy only if not).
        let touches = sys::fd_touches(fd);
        self.calls += 1;
        let flags = match self.rng.below(10) {
            0..=2 => abi::PFM_CTXFL_NOTIFY_BLOCK,
            3 | 4 => abi::PFM_CTXFL_NO_MSG,
            5 => abi::PFM_CTXFL_NOTIFY_BLOCK | abi::PFM_CTXFL_NO_MSG,
            _ => 0,
        };
        if flags != 0 {
            let a = self.arena.at(0);
            self.arena.put(
                a,
                abi::PfmCtxFlags {
                    flags,
                    ..Default::default()
                },
            );
            let r = sys::ioctl(fd, abi::PFM_IOC_SET_FLAGS, a);
            let r = self.res(Op::Arm, r);
            self.allow(Op::Arm, r, &[]);
        }
        let ncnt = self.rng.range(1, 4) as usize;
        let mut pmcs = Vec::new();
        let mut pmds = Vec::new();
        let model = model();
        for i in 0..ncnt {
            let (pmc, ev, reg) = if model.soft {
                // PMC/PMD 0..n (4, or soft_counters=).
                let n = model.pmcs.len().max(1);
                let reg = if ncnt == n {
                    i as u16
                } else {
                    self.rng.below(n as u64) as u16
                };
                (reg, self.rng.pick(&[1u64, 2, 2, 2, 3]), reg)
            } else {
                let k = self.rng.below(model.counting.len().max(1) as u64) as usize;
                model.counting.get(k).copied().unwrap_or((0, 0, 0))
            };
            pmcs.push(abi::PfmPmc {
                reg_num: pmc,
                reg_value: ev,
                ..Default::default()
            });
            let period = |r: &mut Rng| match r.below(6) {
                0 | 1 => 1u64,
                2 => 2,
                3 => r.range(3, 10),
                4 => r.range(10, 100_000),
                _ => 0,
            };
            let (pv, ps, pl) = (
                period(&mut self.rng),
                period(&mut self.rng),
                period(&mut self.rng),
            );
            // A quarter randomise their periods (every reset: short,
            // long, linked; a sampling buffer's entries): a mask within
            // both reset values (a period 0, a reset value 0, takes none).
            let random = self.rng.chance(1, 4);
            if random {
                shared().random_arms.fetch_add(1, Ordering::Relaxed);
            }
            let (reg_random_mask, reg_random_seed) = match random {
                true => {
                    let seed = self.rng.next_u64();
                    let mask = (1u64 << self.rng.below(12)) - 1;
                    let mask = if ps != 0 && pl != 0 { mask } else { 0 };
                    (mask, self.rng.pick(&[0u64, 1, seed]))
                }
                false => (0, 0),
            };
            pmds.push(abi::PfmPmd {
                reg_num: reg,
                reg_flags: if self.rng.chance(4, 5) {
                    abi::PFM_REGFL_OVFL_NOTIFY
                } else {
                    0
                } | if random { abi::PFM_REGFL_RANDOM } else { 0 },
                reg_value: 0u64.wrapping_sub(pv),
                reg_short_reset: 0u64.wrapping_sub(ps),
                reg_long_reset: 0u64.wrapping_sub(pl),
                reg_reset_pmds: self.rng.below(16) & model.impl_pmds,
                reg_random_mask,
                reg_random_seed,
                ..Default::default()
            });
        }
        let regs = self.arena.at(1024);
        let hdr = self.arena.at(0);
        let (sets, load_set) = self.arm_sets(fd, &mut pmcs, &mut pmds);
        // A third of the contexts sample into a buffer (`smpl.rs`), set up
        // and mapped before LOAD; with sets, each entry names the set that
        // counted (issue 33).
        let smpl = self.rng.chance(1, 3);
        // Whole programs, a quarter of the contexts without sets (LOAD
        // refuses a family with sets, EBUSY): inheritance, start on exec,
        // a third of those the target's whole process. An eighth of those
        // with a buffer, whose heirs write to it (LOAD refuses one that
        // masks when full, EBUSY).
        let mut load_flags = 0;
        let mut flags = flags;
        if sets == 1 && self.rng.chance(1, if smpl { 8 } else { 4 }) {
            flags |= abi::PFM_CTXFL_INHERIT;
            if self.rng.chance(1, 3) {
                flags |= abi::PFM_CTXFL_START_ON_EXEC;
            }
            if self.rng.chance(1, 3) {
                load_flags = abi::PFM_LOAD_PROCESS;
            }
            let a = self.arena.at(0);
            self.arena.put(
                a,
                abi::PfmCtxFlags {
                    flags,
                    ..Default::default()
                },
            );
            let r = sys::ioctl(fd, abi::PFM_IOC_SET_FLAGS, a);
            let r = self.res(Op::Arm, r);
            self.allow(Op::Arm, r, &[]);
        }
        for (i, p) in pmcs.iter().enumerate() {
            self.arena.put(regs + i * 32, *p);
        }
        self.arena.put(
            hdr,
            abi::PfmRegsArg {
                regs: regs as u64,
                count: pmcs.len() as u32,
                ..Default::default()
            },
        );
        let r = sys::ioctl(fd, abi::PFM_IOC_WRITE_PMCS, hdr);
        let r = self.res(Op::Arm, r);
        self.allow(Op::Arm, r, &[]);
        for (i, p) in pmds.iter().enumerate() {
            self.arena.put(regs + i * 64, *p);
        }
        self.arena.put(
            hdr,
            abi::PfmRegsArg {
                regs: regs as u64,
                count: pmds.len() as u32,
                ..Default::default()
            },
        );
        let r = sys::ioctl(fd, abi::PFM_IOC_WRITE_PMDS, hdr);
        let r = self.res(Op::Arm, r);
        self.allow(Op::Arm, r, &[]);
        // A quarter of the contexts loaded are clones of the one just
        // programmed (`clone.rs`): so clones meet their thread's exit,
        // zombies, UNLOADs and RESTARTs as other contexts do.
        let cloned = self.rng.chance(1, 4);
        let fd = if cloned {
            self.arm_clone(fd, &pmds, sets, touches)
        } else {
            fd
        };
        // The buffer goes on the context that is loaded (a clone has none
        // of its template's).
        let written = pmds.iter().fold(0u64, |m, p| m | 1 << (p.reg_num & 63));
        let sampled = if smpl {
            self.arm_smpl(fd, written)
        } else {
            None
        };
        let tid = match target {
            Some(t) => t,
            None => match self.rng.weighted(&[40, 20, 15, 25]) {
                0 => 0,
                1 => PROC_TIDS[self.rng.below(16) as usize].load(Ordering::Relaxed),
                2 if !self.children.is_empty() => self.rng.pick(&self.children) as u32,
                _ => shared().board[self.rng.below(BOARD as u64) as usize].load(Ordering::Relaxed)
                    as u32,
            },
        };
        if self.rng.chance(1, 4) {
            let _ = sys::fcntl(fd, libc::F_SETOWN, sys::getpid() as i64);
            let _ = sys::fcntl(fd, libc::F_SETFL, (libc::O_ASYNC | libc::O_NONBLOCK) as i64);
            self.calls += 2;
        }
        // LOAD and START in one call a quarter of the time (PFM_LOAD_START).
        let load_start = self.rng.chance(1, 4);
        if load_start {
            load_flags |= abi::PFM_LOAD_START;
        }
        self.note(format_args!(
            " fd={fd} flags={flags} counters={ncnt} sets={sets:#x} load_set={load_set} tid={tid} load_flags={load_flags:#x} cloned={cloned} sampled={sampled:?}"
        ));
        self.arena.put(
            hdr,
            abi::PfmLoad {
                tid,
                flags: load_flags,
                load_set,
                ..Default::default()
            },
        );
        let r = sys::ioctl(fd, abi::PFM_IOC_LOAD, hdr);
        let r = self.res(Op::Arm, r);
        let mut allowed = vec![
            libc::ESRCH,
            libc::EBUSY,
            libc::EACCES,
            libc::EPERM,
            libc::ENOSPC,
            libc::EAGAIN,
            libc::EDQUOT,
            libc::EINTR,
        ];
        if load_start {
            // Its START: the target may have exited between the two
            // (loaded, then UNLOADED again).
            allowed.push(libc::EBADFD);
        }
        if r == Err(libc::EINVAL) && sets == 1 && self.foreign_sets(fd) {
            // Event sets arm did not create (it made none): another
            // thread of this process, holding a pool number that was
            // closed and reused for this context, created them, and LOAD
            // judges them first (set 0 deleted, or switching on overflows
            // of no PMD written: EINVAL, Documentation/perfmon.rst). As
            // for the setup's EBUSY in `arm_smpl`.
            allowed.push(libc::EINVAL);
        }
        self.allow(Op::Arm, r, &allowed);
        let whole = load_flags & abi::PFM_LOAD_PROCESS != 0 || flags & abi::PFM_CTXFL_INHERIT != 0;
        if r.is_ok() && sampled == Some(Policy::Drop) && whole {
            shared().smpl_whole.fetch_add(1, Ordering::Relaxed);
        }
        if r.is_ok() && sampled == Some(Policy::Mask) && whole {
            self.anomaly(
                Op::Arm,
                format!(
                    "LOAD (flags {load_flags:#x}) of a context with a masking buffer and flags {flags:#x} succeeded: EBUSY expected"
                ),
            );
        }
        if r.is_ok() && load_start {
            shared().load_starts.fetch_add(1, Ordering::Relaxed);
        }
        if r.is_ok() && !load_start {
            let r = sys::ioctl(fd, abi::PFM_IOC_START, 0);
            let r = self.res(Op::Arm, r);
            // The target may have exited already (context UNLOADED again).
            self.allow(Op::Arm, r, &[libc::EBADFD]);
        }
        if r.is_ok() && sampled.is_some() {
            // Its entries: drained (and RESTART, a full buffer masks it)
            // now and then, here and by `smpl_drain`.
            self.arm_smpl_run(fd);
        }
        self.store_fd(fd);
    }

    /// epoll on pool fds: create (numbered 900+), add, delete, wait, close.
    /// An epoll entry keeps a reference on the context's wait queue until the
    /// file is released, so this walks the wait queue's lifetime rules.
    pub(super) fn op_epoll(&mut self) {
        if self.epfd < 0 {
            // SAFETY: no memory is involved.
            let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
            self.calls += 1;
            if fd < 0 {
                return;
            }
            let hi = sys::fcntl(fd, libc::F_DUPFD_CLOEXEC, 900 + self.rng.below(90) as i64);
            let _ = sys::close(fd);
            self.calls += 2;
            match hi {
                Ok(h) => self.epfd = h as i32,
                Err(_) => return,
            }
        }
        let which = self.rng.below(10);
        let epfd = self.epfd;
        self.note(format_args!(" epfd={epfd} kind={which}"));
        let r = match which {
            0..=3 => {
                let (_, fd) = self.pick_fd();
                let mut ev = libc::epoll_event {
                    events: (libc::EPOLLIN | libc::EPOLLHUP) as u32
                        | if self.rng.chance(1, 3) {
                            libc::EPOLLET as u32
                        } else {
                            0
                        }
                        | if self.rng.chance(1, 5) {
                            libc::EPOLLONESHOT as u32
                        } else {
                            0
                        },
                    u64: fd as u64,
                };
                // SAFETY: `ev` is a valid epoll_event for the call.
                sys::check(
                    unsafe { libc::epoll_ctl(self.epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) } as i64,
                )
            }
            4 => {
                let (_, fd) = self.pick_fd();
                // SAFETY: DEL ignores the event argument.
                sys::check(unsafe {
                    libc::epoll_ctl(self.epfd, libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut())
                } as i64)
            }
            5..=8 => {
                let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 8];
                let t = if self.rng.chance(4, 5) { 0 } else { 2 };
                // SAFETY: `evs` has room for 8 events.
                sys::check(unsafe { libc::epoll_wait(self.epfd, evs.as_mut_ptr(), 8, t) } as i64)
            }
            _ => {
                let fd = std::mem::replace(&mut self.epfd, -1);
                sys::close(fd).map(|_| 0)
            }
        };
        let r = self.res(Op::Epoll, r);
        self.cur_fd = -1;
        self.allow(
            Op::Epoll,
            r,
            &[
                libc::EEXIST,
                libc::ENOENT,
                libc::EINTR,
                libc::EPERM,
                libc::EINVAL,
            ],
        );
    }

    /// `PFM_IOC_READ_VALUES`: a PMD mask and a values array.
    pub(super) fn op_read_values(&mut self) {
        let (_, fd) = self.pick_fd();
        let implemented = model().impl_pmds;
        let mut mask = if model().soft {
            // range(1, 15) with the soft model's four counters.
            self.rng.range(1, implemented)
        } else {
            (self.rng.next_u64() & implemented).max(implemented & implemented.wrapping_neg())
        };
        let bad_mask = self.rng.chance(1, 10);
        if bad_mask {
            mask = if self.rng.chance(1, 3) {
                0
            } else {
                // An unimplemented PMD.
                let unimpl = !implemented & !0xf;
                let mut b = self.rng.range(4, 63);
                while unimpl & (1 << b) == 0 {
                    b = (b + 1) % 64;
                }
                mask | 1 << b
            };
        }
        let n = (mask & implemented).count_ones() as usize;
        let vp = self.pick_ptr(88);
        let vaddr = self.place_in(vp, n.max(1) * 8, true);
        let mut v = abi::PfmValues {
            pmd_mask: mask,
            values: vaddr as u64,
            time_enabled: self.rng.next_u64(),
            time_running: self.rng.next_u64(),
            ..Default::default()
        };
        let bad_reserved = self.rng.chance(1, 30);
        if bad_reserved {
            if self.rng.chance(1, 2) {
                v.pad = self.rng.interesting_u32() | 1;
            } else {
                v.reserved = self.rng.interesting_u64() | 1;
            }
        }
        // A set's values and times (PFM_VALFL_SET): set 0, one the context
        // may have, one none can have; or flags and set wrong (an unknown
        // flag, a set without the flag).
        let mut bad_flags = false;
        match self.rng.weighted(&[70, 10, 12, 3, 3, 2]) {
            0 => {}
            1 => v.vflags = abi::PFM_VALFL_SET,
            2 => {
                v.vflags = abi::PFM_VALFL_SET;
                v.set = self.rng.range(1, abi::PFM_MAX_SETS as u64 - 1) as u16;
            }
            3 => {
                v.vflags = abi::PFM_VALFL_SET;
                v.set = self.rng.pick(&[16u16, 17, 0x8000, 0xffff]);
            }
            4 => {
                v.vflags = (1 << self.rng.range(1, 15)) | self.rng.below(2) as u16;
                bad_flags = true;
            }
            _ => {
                v.set = self.rng.range(1, 0xffff) as u16;
                bad_flags = true;
            }
        }
        let set = set_verdict(v.set);
        let hp = self.pick_ptr(94);
        let haddr = self.place(hp, std::mem::size_of::<abi::PfmValues>());
        self.arena.put(haddr, v);
        self.note(format_args!(
            " fd={fd} mask={mask:#x} vflags={:#x} set={} hdr={hp:?} values={vp:?} rsvd={bad_reserved}",
            v.vflags, v.set
        ));
        let r = sys::ioctl(fd, abi::PFM_IOC_READ_VALUES, haddr);
        let r = self.res(Op::ReadValues, r);
        if not_pool_fd(fd) {
            return;
        }
        if !hp.readable() {
            return self.expect_err(
                Op::ReadValues,
                r,
                &[libc::EFAULT],
                "the argument is not readable",
            );
        }
        if hp == Ptr::ReadOnly {
            return self.allow(Op::ReadValues, r, &[libc::EFAULT, libc::EINVAL]);
        }
        if bad_mask || bad_reserved || bad_flags || set == Verdict::Bad {
            return self.expect_err(
                Op::ReadValues,
                r,
                &[libc::EINVAL],
                "empty or unimplemented PMD mask, reserved bits, unknown flags or no such set",
            );
        }
        // A set that may be missing is refused before the values are written.
        let maybe: &[i32] = if set == Verdict::MaybeSet {
            &[libc::EINVAL]
        } else {
            &[]
        };
        if vp != Ptr::Good {
            let mut errs = vec![libc::EFAULT];
            errs.extend_from_slice(maybe);
            return self.expect_err(Op::ReadValues, r, &errs, "the values array is not writable");
        }
        self.allow(Op::ReadValues, r, maybe);
        if r.is_ok() && v.vflags == abi::PFM_VALFL_SET {
            // A set's running time is the part of its enabled time with it
            // active (the two are equal, the context's, without sets).
            let out: abi::PfmValues = self.arena.get(haddr);
            if out.time_running > out.time_enabled {
                self.anomaly(
                    Op::ReadValues,
                    format!(
                        "set {}: time_running {} above time_enabled {}",
                        v.set, out.time_running, out.time_enabled
                    ),
                );
            }
        }
    }
}

impl Actor {
    /// Whether context `fd`, which `arm` gave no event sets, has some that
    /// make its LOAD in set 0 invalid: set 0 missing (GETINFO_SETS says
    /// EINVAL) or switching on overflows (`PFM_SETFL_OVFL_SWITCH`).
    fn foreign_sets(&mut self, fd: i32) -> bool {
        let (hdr, info) = (self.arena.at(2048), self.arena.at(2304));
        self.arena.put(
            info,
            abi::PfmSetinfo {
                set_id: 0,
                ..Default::default()
            },
        );
        self.arena.put(
            hdr,
            abi::PfmSetsArg {
                sets: info as u64,
                count: 1,
                ..Default::default()
            },
        );
        let r = sys::ioctl(fd, abi::PFM_IOC_GETINFO_SETS, hdr);
        match self.res(Op::Arm, r) {
            Err(e) => e == libc::EINVAL,
            Ok(_) => {
                let i: abi::PfmSetinfo = self.arena.get(info);
                i.set_flags & abi::PFM_SETFL_OVFL_SWITCH != 0
            }
        }
    }
}
