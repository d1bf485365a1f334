//! `PFM_IOC_CLONE`: a new UNLOADED context with a context's flags,
//! registers and event sets, on a descriptor the ioctl returns (a file of
//! the anonymous inode, as perf's are).
//!
//! - `clone` on pool fds, whatever their state: valid and garbage flags,
//!   `pad` and `reserved`, every pointer kind. The pool keeps no state, so
//!   EBADFD (the context is loaded or masked) and EBUSY (another actor
//!   creating or deleting its sets all the while) are allowed; the rest is
//!   exact: EFAULT, EINVAL, EACCES exactly when the caller may not open
//!   /dev/perfmon (`perf_event_paranoid` above 2, no CAP_SYS_ADMIN), the
//!   fd limits.
//! - `arm`'s clones: a quarter of `arm`'s private templates, just
//!   programmed (in every set they have), are cloned and the clone is what
//!   gets loaded and started, so clones meet exits, zombies and UNLOADs.
//!   The template is private and unloaded: the clone must succeed, and
//!   show exactly what the template shows (GET_STATE, every PMD's fields
//!   as READ_PMDS returns them in every set, GETINFO_SETS of every set).
//!
//! Every descriptor a clone returns is checked (close-on-exec and
//! non-blocking exactly as asked, read-write, a context never loaded) and
//! then goes to the pool, where the other operations load, start, race and
//! close it, or (an eighth of the pool's clones) is closed at once: none
//! is leaked.

use std::sync::atomic::Ordering;

use super::actor::*;
use super::model::model;
use super::shared::*;
use crate::sys::{self, abi};

/// `arm`'s clone argument, and where each of the two contexts' programming
/// is read into (see [`Actor::programming`]), in the arena's read-write
/// pages (`arm`'s own header and registers are done with by then).
const ARG_OFF: usize = 256;
const TEMPLATE_OFF: usize = 1024;
const CLONE_OFF: usize = TEMPLATE_OFF + PROG_LEN;
/// One context's programming: GET_STATE (128 bytes), a header (128), 64
/// PMDs (4096), 16 set infos (2048).
const PROG_LEN: usize = 256 + 64 * 64 + 16 * 128;

/// Whether the kernel refuses this caller a new context (EACCES), as it
/// refuses it an open of /dev/perfmon: (certainly, possibly). Possibly
/// only when the setting could not be read.
fn refused_new() -> (bool, bool) {
    if sys::privileged() {
        return (false, false);
    }
    match PARANOID.load(Ordering::Relaxed) {
        p if p > 2 => (true, true),
        p if p < 0 => (false, true),
        _ => (false, false),
    }
}

/// What a context shows of its programming (see [`Actor::programming`]).
#[derive(Debug, PartialEq, Eq)]
struct Programming {
    state: abi::PfmCtxInfo,
    pmds: Vec<abi::PfmPmd>,
    sets: Vec<abi::PfmSetinfo>,
}

impl Actor {
    /// `PFM_IOC_CLONE` of a pool fd.
    pub(super) fn op_clone(&mut self) {
        let (_, fd) = self.pick_fd();
        let mut c = abi::PfmClone {
            flags: self.rng.below(u64::from(abi::PFM_CLONE_MASK) + 1) as u32,
            ..Default::default()
        };
        let garbage = self.rng.chance(1, 8);
        if garbage {
            match self.rng.below(3) {
                // At least one bit outside PFM_CLONE_MASK, with or without
                // the defined ones.
                0 => c.flags |= self.unknown_bit(abi::PFM_CLONE_MASK),
                1 => c.pad = self.rng.interesting_u32() | 1,
                _ => c.reserved[self.rng.below(3) as usize] = self.rng.interesting_u64() | 1,
            }
        }
        let p = self.pick_ptr(90);
        let addr = self.place(p, std::mem::size_of::<abi::PfmClone>());
        self.arena.put(addr, c);
        self.note(format_args!(
            " fd={fd} flags={:#x} ptr={p:?} garbage={garbage}",
            c.flags
        ));
        // The clone gets the access mode of the descriptor cloned: known
        // if the number had the same mode before and after the call (else
        // another thread closed it and the number was reused meanwhile).
        let (before, gen0) = (access_mode(fd), super::smpl::fd_gen(fd));
        let r = sys::ioctl(fd, abi::PFM_IOC_CLONE, addr);
        let mode =
            before.filter(|&m| access_mode(fd) == Some(m) && super::smpl::fd_gen(fd) == gen0);
        let r = self.res(Op::Clone, r);
        if let Ok(nfd) = r {
            // First the descriptor, whatever the oracle makes of the
            // call: what the kernel read (the read-only page's bytes for
            // a read-only argument) says how it must be.
            let sent = if p.readable() {
                Some(self.arena.get::<abi::PfmClone>(addr).flags)
            } else {
                None
            };
            self.note(format_args!(" new={nfd}"));
            self.take_clone(Op::Clone, nfd as i32, sent.map(|f| (f, mode)));
        }
        if !(0..1000).contains(&fd) {
            // An empty slot or a garbage number: EBADF, nothing to judge.
            return;
        }
        if !p.readable() {
            return self.expect_err(
                Op::Clone,
                r,
                &[libc::EFAULT],
                "the argument is not readable",
            );
        }
        if p == Ptr::ReadOnly {
            // The read-only page's random bytes: almost always garbage.
            return self.allow(
                Op::Clone,
                r,
                &[
                    libc::EINVAL,
                    libc::EACCES,
                    libc::EBADFD,
                    libc::EBUSY,
                    libc::EMFILE,
                    libc::ENFILE,
                ],
            );
        }
        if garbage {
            return self.expect_err(
                Op::Clone,
                r,
                &[libc::EINVAL],
                "unknown flags, pad or reserved bits set",
            );
        }
        // EBADFD: the context is not UNLOADED (the pool keeps no state);
        // EBUSY: another actor kept changing its sets while it was copied.
        self.check_clone_result(Op::Clone, r, &[libc::EBADFD, libc::EBUSY]);
    }

    /// Checks a well-formed CLONE's refusal: EACCES exactly when the
    /// caller may not open /dev/perfmon (checked before the context's
    /// state); else success, one of `allowed`, or the fd limits (EMFILE:
    /// an unprivileged child at its limit, as for `open`).
    fn check_clone_result(&mut self, op: Op, r: Result<i64, i32>, allowed: &[i32]) {
        let (must, may) = refused_new();
        if must {
            return self.expect_err(
                op,
                r,
                &[libc::EACCES],
                "perf_event_paranoid is above 2 and the caller has no CAP_SYS_ADMIN",
            );
        }
        let mut errs = allowed.to_vec();
        errs.extend_from_slice(&[libc::EMFILE, libc::ENFILE]);
        if may {
            errs.push(libc::EACCES);
        }
        self.allow(op, r, &errs);
    }

    /// A descriptor CLONE returned on a pool fd: checked (if `flags`, the
    /// flags the kernel read, are known), then into the pool, or an eighth
    /// of the time closed at once (a clone never used).
    fn take_clone(&mut self, op: Op, nfd: i32, flags: Option<(u32, Option<i64>)>) {
        if let Some((flags, mode)) = flags {
            self.check_clone_fd(op, nfd, flags, mode);
        }
        if self.rng.chance(1, 8) {
            let r = sys::close(nfd).map(|_| 0);
            self.res(Op::Close, r).ok();
        } else {
            self.store_fd(nfd);
        }
    }

    /// Checks a descriptor CLONE just returned, asked with `flags`: a
    /// clone's file, with the access mode `mode` of the descriptor cloned
    /// (read just before the call; `None`: not known, any mode), and a
    /// context never loaded (UNLOADED, no thread, no status). No pool op
    /// has the number yet (only numbers taken out of the pool are
    /// closed), so an anomaly here is not a reused fd.
    fn check_clone_fd(&mut self, op: Op, nfd: i32, flags: u32, mode: Option<i64>) {
        shared().clones.fetch_add(1, Ordering::Relaxed);
        let saved = std::mem::replace(&mut self.cur_fd, -1);
        let link = sys::fd_link(nfd);
        let fl = sys::fcntl(nfd, libc::F_GETFL, 0);
        let mut st = abi::PfmCtxInfo::default();
        let r = sys::ioctl_ref(nfd, abi::PFM_IOC_GET_STATE, &mut st);
        self.calls += 3;
        // Close-on-exec and O_NONBLOCK are not compared here: another
        // thread's bad ioctl (FIOCLEX, FIONCLEX, FIONBIO) on a number it
        // picked at random, an empty slot a moment before, may have
        // changed them since the call; pfm_test_clone checks them. The
        // access mode no call can change.
        let fl_ok = fl.is_ok_and(|f| {
            let m = f & i64::from(libc::O_ACCMODE);
            mode.map_or(m != i64::from(libc::O_ACCMODE), |want| m == want)
        });
        if link.as_deref() != Some(CLONE_LINK) || !fl_ok {
            self.anomaly(
                op,
                format!(
                    "clone fd {nfd} asked with flags {flags:#x}: link {link:?}, F_GETFL {fl:?} (access mode {mode:?} expected)"
                ),
            );
        }
        let fresh = st.state == abi::PFM_STATE_UNLOADED
            && st.tid == 0
            && st.status == 0
            && st.threads == 0
            && st.lost_threads == 0
            && st.flags & !abi::PFM_CTXFL_MASK == 0
            && st.used_pmds & !model().impl_pmds == 0
            && st.reserved == [0; 2];
        if r.is_err() || !fresh {
            self.anomaly(
                op,
                format!(
                    "new clone fd {nfd}: GET_STATE {}: state {} tid {} flags {:#x} status {:#x} used {:#x} threads {} lost {}",
                    crate::pfm::outcome(&r),
                    st.state,
                    st.tid,
                    st.flags,
                    st.status,
                    st.used_pmds,
                    st.threads,
                    st.lost_threads
                ),
            );
        }
        self.cur_fd = saved;
    }

    /// `arm`'s template `fd` (private, programmed, never loaded) cloned;
    /// `pmds`: the PMDs written (in every set), `sets`: its sets (a mask);
    /// `touches`: the pool's operations on `fd`'s number when `arm`
    /// opened it ([`sys::fd_touches`]).
    /// Returns what `arm` goes on with: the clone, and then the template
    /// goes to the pool (unloaded: the pool's CLONE finds programmed
    /// sources) or is closed (the clone outlives it); or, if the clone was
    /// refused, the template.
    pub(super) fn arm_clone(
        &mut self,
        fd: i32,
        pmds: &[abi::PfmPmd],
        sets: u16,
        touches: Option<u32>,
    ) -> i32 {
        let flags = self.rng.below(u64::from(abi::PFM_CLONE_MASK) + 1) as u32;
        let a = self.arena.at(ARG_OFF);
        self.arena.put(
            a,
            abi::PfmClone {
                flags,
                ..Default::default()
            },
        );
        let mode = access_mode(fd);
        let r = sys::ioctl(fd, abi::PFM_IOC_CLONE, a);
        let r = self.res(Op::Arm, r);
        // Unloaded and private: nothing but the caller's rights and the fd
        // limits may refuse it.
        self.check_clone_result(Op::Arm, r, &[]);
        let Ok(nfd) = r else {
            return fd;
        };
        let nfd = nfd as i32;
        let clone_touches = sys::fd_touches(nfd);
        self.check_clone_fd(Op::Arm, nfd, flags, mode);
        let regs: Vec<(u16, u16)> = pmds.iter().map(|p| (p.reg_num, p.reg_set)).collect();
        let ids: Vec<u16> = (0..abi::PFM_MAX_SETS as u16)
            .filter(|id| sets & (1 << id) != 0)
            .collect();
        let want = self.programming(fd, &regs, &ids, TEMPLATE_OFF);
        let got = self.programming(nfd, &regs, &ids, CLONE_OFF);
        match (want, got) {
            (Ok(want), Ok(got)) if want == got => {
                shared().clones_exact.fetch_add(1, Ordering::Relaxed);
            }
            // Another thread held one of the two numbers in its pool
            // (closed and reused since) and operated on it: the copy may
            // differ by what it did (a WRITE_PMDS, a CREATE_SETS).
            (Ok(_), Ok(_))
                if sys::fd_touches(fd) != touches || sys::fd_touches(nfd) != clone_touches =>
            {
                shared().reused.fetch_add(1, Ordering::Relaxed);
            }
            (Ok(want), Ok(got)) => {
                let what = if want.state != got.state {
                    format!("GET_STATE {:?}, template's {:?}", got.state, want.state)
                } else if let Some(i) = (0..want.pmds.len()).find(|&i| want.pmds[i] != got.pmds[i])
                {
                    format!("PMD {:?}, template's {:?}", got.pmds[i], want.pmds[i])
                } else {
                    let i = (0..want.sets.len())
                        .find(|&i| want.sets[i] != got.sets[i])
                        .unwrap_or(0);
                    format!(
                        "set {:?}, template's {:?}",
                        got.sets.get(i),
                        want.sets.get(i)
                    )
                };
                self.anomaly(
                    Op::Arm,
                    format!("clone fd {nfd} of template fd {fd} (sets {sets:#x}) differs: {what}"),
                );
            }
            (Err(e), _) => self.anomaly(
                Op::Arm,
                format!("template fd {fd} (private, unloaded): {e}"),
            ),
            (_, Err(e)) => self.anomaly(
                Op::Arm,
                format!("clone fd {nfd} of a private template: {e}"),
            ),
        }
        if self.rng.chance(1, 2) {
            self.store_fd(fd);
        } else {
            let _ = sys::close(fd);
            self.calls += 1;
        }
        nfd
    }

    /// What context `fd` shows of its programming: GET_STATE, the PMDs
    /// `regs` (number, set) with every field READ_PMDS returns, and the
    /// sets `ids` (GETINFO_SETS), read into the arena at `off`. Of a
    /// context never loaded all of it is its programming (no counts, no
    /// times), which a clone must show exactly. `Err`: the call that
    /// failed.
    fn programming(
        &mut self,
        fd: i32,
        regs: &[(u16, u16)],
        ids: &[u16],
        off: usize,
    ) -> Result<Programming, String> {
        let st_at = self.arena.at(off);
        let hdr = self.arena.at(off + 128);
        let arr = self.arena.at(off + 256);
        let r = sys::ioctl(fd, abi::PFM_IOC_GET_STATE, st_at);
        self.res(Op::Arm, r)
            .map_err(|e| format!("GET_STATE: {}", perfmon::errno_name(e)))?;
        let state: abi::PfmCtxInfo = self.arena.get(st_at);
        let pmd_len = std::mem::size_of::<abi::PfmPmd>();
        let n = regs.len().min(abi::PFM_MAX_REGS_PER_CALL);
        for (i, &(reg_num, reg_set)) in regs.iter().take(n).enumerate() {
            self.arena.put(
                arr + i * pmd_len,
                abi::PfmPmd {
                    reg_num,
                    reg_set,
                    ..Default::default()
                },
            );
        }
        let mut pmds = Vec::new();
        if n > 0 {
            self.arena.put(
                hdr,
                abi::PfmRegsArg {
                    regs: arr as u64,
                    count: n as u32,
                    ..Default::default()
                },
            );
            let r = sys::ioctl(fd, abi::PFM_IOC_READ_PMDS, hdr);
            self.res(Op::Arm, r)
                .map_err(|e| format!("READ_PMDS: {}", perfmon::errno_name(e)))?;
            pmds = (0..n).map(|i| self.arena.get(arr + i * pmd_len)).collect();
        }
        let info_len = std::mem::size_of::<abi::PfmSetinfo>();
        let sets_at = arr + abi::PFM_MAX_REGS_PER_CALL * pmd_len;
        for (i, &set_id) in ids.iter().enumerate() {
            self.arena.put(
                sets_at + i * info_len,
                abi::PfmSetinfo {
                    set_id,
                    ..Default::default()
                },
            );
        }
        let mut sets = Vec::new();
        if !ids.is_empty() {
            self.arena.put(
                hdr,
                abi::PfmSetsArg {
                    sets: sets_at as u64,
                    count: ids.len() as u32,
                    ..Default::default()
                },
            );
            let r = sys::ioctl(fd, abi::PFM_IOC_GETINFO_SETS, hdr);
            self.res(Op::Arm, r)
                .map_err(|e| format!("GETINFO_SETS: {}", perfmon::errno_name(e)))?;
            sets = (0..ids.len())
                .map(|i| self.arena.get(sets_at + i * info_len))
                .collect();
        }
        Ok(Programming { state, pmds, sets })
    }
}

/// The access mode (`O_ACCMODE` bits) of descriptor `fd`, if it is open.
fn access_mode(fd: i32) -> Option<i64> {
    sys::fcntl(fd, libc::F_GETFL, 0)
        .ok()
        .map(|f| f & i64::from(libc::O_ACCMODE))
}
