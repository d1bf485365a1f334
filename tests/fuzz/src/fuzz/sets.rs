//! Event sets (Documentation/perfmon.rst, "Event sets and multiplexing"):
//! CREATE_SETS, DELETE_SETS and GETINFO_SETS on pool contexts, with valid,
//! boundary and garbage descriptions, ids, counts and pointers, and the
//! sets of the overflowing contexts `arm` sets up (multiplexed contexts
//! that race every teardown: UNLOAD, close, the thread's exit, zombies).
//!
//! The fuzzer does not track which sets a pool context has, nor its state:
//! where the answer depends on them it accepts the documented errnos (a
//! set that may be missing: EINVAL at its index; EBADFD while loaded; a
//! mapped page or a buffer no longer refuses sets, issue 33), and asserts what does not: a description's
//! validity, the header's checks, the order of the checks, the pointers,
//! and what GETINFO reports
//! ([`Actor::check_setinfos`]).

use std::sync::atomic::Ordering;

use super::actor::*;
use super::model::model;
use super::shared::*;
use crate::sys::{self, abi};

const MAX_SETS: usize = abi::PFM_MAX_SETS;

/// One sets call's array and what the module must make of it.
struct SetsCall {
    cmd: u32,
    count: u32,
    /// The array's pointer kind and address.
    ptr: Ptr,
    addr: usize,
    verdicts: Vec<Verdict>,
    /// Errnos the context's state may give before the elements are judged.
    state: &'static [i32],
    /// The array is written back (CREATE's effective timeouts, GETINFO's
    /// answers): after success, so a read-only array fails with EFAULT
    /// then.
    writes_array: bool,
}

/// Whether a description is valid, by the rules of the manual (the same
/// on every model and in every state; `impl_pmds`: the model's PMDs).
fn desc_ok(d: &abi::PfmSetdesc, impl_pmds: u64) -> bool {
    let time = d.set_flags & abi::PFM_SETFL_TIME_SWITCH != 0;
    let ovfl = d.set_flags & abi::PFM_SETFL_OVFL_SWITCH != 0;
    (d.set_id as usize) < MAX_SETS
        && d.set_flags & !abi::PFM_SETFL_MASK == 0
        && d.reserved == 0
        && !(time && ovfl)
        && time == (d.set_timeout != 0)
        && ovfl == (d.set_ovfl_switch_cnt != 0)
        && ovfl == (d.set_switch_pmds != 0)
        && d.set_switch_pmds & !impl_pmds == 0
}

impl Actor {
    /// The `count` of a sets call: mostly 1..16, sometimes 0 (EINVAL), 17
    /// and beyond (E2BIG).
    fn sets_count(&mut self) -> u32 {
        match self.rng.weighted(&[60, 15, 8, 5, 5, 4, 3]) {
            0 => self.rng.range(1, 3) as u32,
            1 => self.rng.range(4, MAX_SETS as u64) as u32,
            2 => MAX_SETS as u32,
            3 => 0,
            4 => MAX_SETS as u32 + 1,
            5 => self.rng.pick(&[u32::MAX, 0x8000_0000, 1 << 16, 65]),
            _ => 1,
        }
    }

    /// A switch flag and its parameters: a timeout of 1 ns to 5 ms (raised
    /// to 100 us), an overflow count of some of `pmds`, or neither.
    fn switch_flags(&mut self, d: &mut abi::PfmSetdesc, pmds: u64) {
        match self.rng.weighted(&[30, 40, 30]) {
            0 => {}
            1 => {
                d.set_flags = abi::PFM_SETFL_TIME_SWITCH;
                d.set_timeout = match self.rng.below(6) {
                    0 => 1,
                    1 => self.rng.range(2, abi::PFM_SET_MIN_TIMEOUT - 1),
                    2 => abi::PFM_SET_MIN_TIMEOUT,
                    3 => abi::PFM_SET_MIN_TIMEOUT + 1,
                    4 => 5_000_000,
                    _ => self.rng.range(abi::PFM_SET_MIN_TIMEOUT, 5_000_000),
                };
            }
            _ => {
                d.set_flags = abi::PFM_SETFL_OVFL_SWITCH;
                d.set_ovfl_switch_cnt = self.rng.pick(&[1, 1, 2, 3, 1000]);
                let some = self.rng.next_u64() & pmds;
                d.set_switch_pmds = if some != 0 {
                    some
                } else {
                    pmds & pmds.wrapping_neg()
                };
            }
        }
    }

    /// A set description for CREATE_SETS, mostly valid; with its verdict.
    fn gen_setdesc(&mut self) -> (abi::PfmSetdesc, Verdict) {
        let m = model();
        let mut d = abi::PfmSetdesc {
            set_id: if self.rng.chance(1, 7) {
                0
            } else {
                self.rng.range(1, MAX_SETS as u64 - 1) as u16
            },
            ..Default::default()
        };
        self.switch_flags(&mut d, m.impl_pmds);
        if self.rng.chance(1, 8) {
            match self.rng.below(10) {
                0 => d.set_id = self.rng.pick(&[16u16, 17, 0x100, 0xffff]),
                1 => {
                    d.set_flags = abi::PFM_SETFL_MASK;
                    d.set_timeout = self.rng.range(1, 5_000_000);
                    d.set_ovfl_switch_cnt = 1;
                    d.set_switch_pmds = 1;
                }
                2 => d.set_flags |= 1 << self.rng.range(2, 15),
                3 => d.reserved = self.rng.interesting_u64() | 1,
                4 => {
                    d.set_flags = abi::PFM_SETFL_TIME_SWITCH;
                    d.set_timeout = 0;
                    d.set_ovfl_switch_cnt = 0;
                    d.set_switch_pmds = 0;
                }
                5 => d.set_timeout = self.rng.range(1, 5_000_000),
                6 => d.set_ovfl_switch_cnt = 0,
                7 => d.set_switch_pmds = 0,
                8 => {
                    let unimpl = !m.impl_pmds;
                    let mut b = self.rng.below(64);
                    while unimpl & (1 << b) == 0 {
                        b = (b + 1) % 64;
                    }
                    d.set_switch_pmds |= 1 << b;
                }
                _ => {
                    if self.rng.chance(1, 2) {
                        d.set_ovfl_switch_cnt = self.rng.range(1, 10) as u32;
                    } else {
                        d.set_switch_pmds = m.impl_pmds & m.impl_pmds.wrapping_neg();
                    }
                }
            }
        }
        let v = if desc_ok(&d, m.impl_pmds) {
            Verdict::Ok
        } else {
            Verdict::Bad
        };
        (d, v)
    }

    /// Runs a sets call on `fd` and checks what does not depend on the
    /// elements (the header, the pointers, the checks' order); then the
    /// elements' verdicts. Returns the result and the header written back
    /// when the call got to its elements with a good array.
    fn sets_call(
        &mut self,
        op: Op,
        fd: i32,
        c: &SetsCall,
    ) -> Option<(Result<i64, i32>, abi::PfmSetsArg)> {
        let mut hdr = abi::PfmSetsArg {
            sets: c.addr as u64,
            count: c.count,
            done: self.rng.next_u64() as u32,
            reserved: [0; 2],
        };
        let bad_reserved = self.rng.chance(1, 30);
        if bad_reserved {
            hdr.reserved[self.rng.below(2) as usize] = self.rng.interesting_u64() | 1;
        }
        let hp = self.pick_ptr(94);
        let haddr = self.place(hp, std::mem::size_of::<abi::PfmSetsArg>());
        self.arena.put(haddr, hdr);
        let bad = c.verdicts.iter().filter(|v| **v == Verdict::Bad).count();
        let maybe = c
            .verdicts
            .iter()
            .filter(|v| **v == Verdict::MaybeSet)
            .count();
        self.note(format_args!(
            " fd={fd} hdr={hp:?} array={:?} count={} bad={bad} maybe={maybe} rsvd={bad_reserved}",
            c.ptr, c.count
        ));
        let r = sys::ioctl(fd, c.cmd, haddr);
        let r = self.res(op, r);
        if !(0..1000).contains(&fd) {
            // Not a pool descriptor (see ops.rs): EBADF, nothing to check.
            return None;
        }
        // The header is read, then written back (`done`) before anything
        // else: one that is not readable and writable is EFAULT.
        if hp != Ptr::Good {
            self.expect_err(
                op,
                r,
                &[libc::EFAULT],
                "the argument is not readable and writable",
            );
            return None;
        }
        if bad_reserved || c.count == 0 {
            self.expect_err(op, r, &[libc::EINVAL], "count 0 or reserved bits set");
            return None;
        }
        if c.count as usize > MAX_SETS {
            self.expect_err(op, r, &[libc::E2BIG], "count > PFM_MAX_SETS");
            return None;
        }
        if !c.ptr.readable() {
            self.expect_err(op, r, &[libc::EFAULT], "the array is not readable");
            return None;
        }
        if c.ptr == Ptr::ReadOnly {
            // The read-only page holds its own random bytes, not the
            // elements built: judged as anything; an array to write back
            // fails then.
            if c.writes_array {
                if let Ok(v) = r {
                    self.anomaly(
                        op,
                        format!("succeeded ({v}) with a read-only array to write back"),
                    );
                }
            }
            let mut errs = vec![libc::EFAULT, libc::EINVAL];
            errs.extend_from_slice(c.state);
            self.allow(op, r, &errs);
            return None;
        }
        let out: abi::PfmSetsArg = self.arena.get(haddr);
        self.check_verdicts(op, r, out.done, &c.verdicts, c.state);
        (c.ptr == Ptr::Good).then_some((r, out))
    }

    /// `PFM_IOC_CREATE_SETS` on a pool context.
    pub(super) fn op_create_sets(&mut self) {
        let (_, fd) = self.pick_fd();
        // Sometimes every set (1..15): the contexts GETINFO can check whole.
        let every = self.rng.chance(1, 10);
        let count = if every {
            MAX_SETS as u32 - 1
        } else {
            self.sets_count()
        };
        let n = (count as usize).min(MAX_SETS);
        let ptr = self.pick_ptr(88);
        let addr = self.place_in(ptr, n * std::mem::size_of::<abi::PfmSetdesc>(), true);
        let mut descs = Vec::with_capacity(n);
        let mut verdicts = Vec::with_capacity(n);
        for i in 0..n {
            let (mut d, mut v) = self.gen_setdesc();
            if every {
                d = abi::PfmSetdesc {
                    set_id: i as u16 + 1,
                    ..Default::default()
                };
                self.switch_flags(&mut d, model().impl_pmds);
                v = Verdict::Ok;
            }
            self.arena
                .put(addr + i * std::mem::size_of::<abi::PfmSetdesc>(), d);
            descs.push(d);
            verdicts.push(v);
        }
        let c = SetsCall {
            cmd: abi::PFM_IOC_CREATE_SETS,
            count,
            ptr,
            addr,
            verdicts,
            // Loaded. (A mapped page shows the active set's image and a
            // buffer's entries name their set: neither refuses sets.)
            state: &[libc::EBADFD],
            writes_array: true,
        };
        let Some((r, _)) = self.sets_call(Op::CreateSets, fd, &c) else {
            return;
        };
        if r.is_err() {
            return;
        }
        shared().set_creates.fetch_add(1, Ordering::Relaxed);
        // Written back: the effective timeouts, the rest as given.
        for (i, d) in descs.iter().enumerate() {
            let got: abi::PfmSetdesc = self
                .arena
                .get(addr + i * std::mem::size_of::<abi::PfmSetdesc>());
            let timeout = if d.set_flags & abi::PFM_SETFL_TIME_SWITCH != 0 {
                d.set_timeout.max(abi::PFM_SET_MIN_TIMEOUT)
            } else {
                0
            };
            let want = abi::PfmSetdesc {
                set_timeout: timeout,
                ..*d
            };
            if got != want {
                self.anomaly(
                    Op::CreateSets,
                    format!("element {i} written back as {got:?}, expected {want:?}"),
                );
                return;
            }
        }
    }

    /// `PFM_IOC_DELETE_SETS` on a pool context.
    pub(super) fn op_delete_sets(&mut self) {
        let (_, fd) = self.pick_fd();
        let count = self.sets_count();
        let n = (count as usize).min(MAX_SETS);
        let ptr = self.pick_ptr(88);
        let addr = self.place_in(ptr, n * 2, true);
        let mut verdicts = Vec::with_capacity(n);
        for i in 0..n {
            let id = match self.rng.weighted(&[80, 10, 10]) {
                0 => self.rng.range(1, MAX_SETS as u64 - 1) as u16,
                // Set 0 cannot go.
                1 => 0,
                _ => self.rng.pick(&[16u16, 17, 0x8000, 0xffff]),
            };
            self.arena.put(addr + i * 2, id);
            verdicts.push(if id == 0 {
                Verdict::Bad
            } else {
                set_verdict(id)
            });
        }
        let c = SetsCall {
            cmd: abi::PFM_IOC_DELETE_SETS,
            count,
            ptr,
            addr,
            verdicts,
            state: &[libc::EBADFD],
            writes_array: false,
        };
        self.sets_call(Op::DeleteSets, fd, &c);
    }

    /// `PFM_IOC_GETINFO_SETS` on a pool context; checks what it reports.
    pub(super) fn op_getinfo_sets(&mut self) {
        let (_, fd) = self.pick_fd();
        let size = std::mem::size_of::<abi::PfmSetinfo>();
        // A quarter of the time every set, in some order: where all exist,
        // the running times' sum is checked exactly.
        let every = self.rng.chance(1, 4);
        let count = if every {
            MAX_SETS as u32
        } else {
            self.sets_count()
        };
        let n = (count as usize).min(MAX_SETS);
        let ptr = self.pick_ptr(88);
        let addr = self.place_in(ptr, n * size, true);
        let mut ids: Vec<u16> = (0..MAX_SETS as u16).collect();
        if every {
            for i in (1..ids.len()).rev() {
                let j = self.rng.below(i as u64 + 1) as usize;
                ids.swap(i, j);
            }
        } else {
            ids.clear();
            for _ in 0..n {
                ids.push(match self.rng.weighted(&[30, 60, 10]) {
                    0 => 0,
                    1 => self.rng.range(1, MAX_SETS as u64 - 1) as u16,
                    _ => self.rng.pick(&[16u16, 17, 0x8000, 0xffff]),
                });
            }
        }
        for (i, &id) in ids.iter().enumerate() {
            let mut info = abi::PfmSetinfo {
                set_id: id,
                ..Default::default()
            };
            if self.rng.chance(1, 5) {
                // The other fields are outputs.
                info.set_flags = self.rng.next_u64() as u16;
                info.set_runs = self.rng.next_u64();
                info.set_time_running = self.rng.next_u64();
            }
            self.arena.put(addr + i * size, info);
        }
        let c = SetsCall {
            cmd: abi::PFM_IOC_GETINFO_SETS,
            count,
            ptr,
            addr,
            verdicts: ids.iter().map(|&id| set_verdict(id)).collect(),
            state: &[],
            writes_array: true,
        };
        let Some((r, _)) = self.sets_call(Op::GetinfoSets, fd, &c) else {
            return;
        };
        if r.is_ok() {
            let infos: Vec<abi::PfmSetinfo> =
                (0..n).map(|i| self.arena.get(addr + i * size)).collect();
            self.check_setinfos(&ids, &infos);
        }
    }

    /// What one GETINFO_SETS call reports (taken under the context's lock,
    /// so one instant), without knowing the context's sets or state:
    ///
    /// - each set's description is a valid one, its effective timeout at
    ///   least the minimum, its last switch's cause consistent with its
    ///   PMDs, the registers it names implemented;
    /// - a set's running time is at most its enabled time, and a set that
    ///   ran was activated (`set_runs`);
    /// - the sets that existed at LOAD report the same enabled time (the
    ///   context's counting time), the others 0, and the running times of
    ///   distinct sets add up to at most that;
    /// - exactly to it when the call names all 16 sets and each reports
    ///   that time: then every set existed at LOAD and none was deleted
    ///   since (a set created since reports 0), the context was loaded with
    ///   more than one set, and every nanosecond went to exactly one set.
    pub(super) fn check_setinfos(&mut self, ids: &[u16], infos: &[abi::PfmSetinfo]) {
        let m = model();
        let op = Op::GetinfoSets;
        shared().set_infos.fetch_add(1, Ordering::Relaxed);
        for (&id, s) in ids.iter().zip(infos) {
            let time = s.set_flags & abi::PFM_SETFL_TIME_SWITCH != 0;
            let desc = abi::PfmSetdesc {
                set_id: s.set_id,
                set_flags: s.set_flags,
                set_ovfl_switch_cnt: s.set_ovfl_switch_cnt,
                set_timeout: s.set_timeout,
                set_switch_pmds: s.set_switch_pmds,
                reserved: 0,
            };
            let why = if s.set_id != id {
                "set_id changed"
            } else if !desc_ok(&desc, m.impl_pmds) {
                "not a valid description"
            } else if time && s.set_timeout < abi::PFM_SET_MIN_TIMEOUT {
                "timeout below the minimum"
            } else if !time && s.set_timeout_left != 0 {
                "time left without TIME_SWITCH"
            } else if s.set_last_cause > abi::PFM_SET_CAUSE_OVFL
                || (s.set_last_cause == abi::PFM_SET_CAUSE_OVFL) != (s.set_ovfl_pmds != 0)
                || s.set_ovfl_pmds & !m.impl_pmds != 0
            {
                "last cause and its PMDs disagree"
            } else if s.set_used_pmcs & !m.impl_pmcs != 0 || s.set_used_pmds & !m.impl_pmds != 0 {
                "unimplemented registers used"
            } else if s.set_time_running > s.set_time_enabled {
                "running above enabled"
            } else if s.set_time_running > 0 && s.set_runs == 0 {
                "ran but never activated"
            } else if s.pad != 0 || s.reserved != [0; 5] {
                "reserved fields set"
            } else {
                continue;
            };
            self.anomaly(
                op,
                format!(
                    "set {id}: {why}: flags {:#x} cnt {} timeout {} pmds {:#x} runs {} left {} enabled {} running {} cause {} ovfl {:#x} used {:#x}/{:#x}",
                    s.set_flags,
                    s.set_ovfl_switch_cnt,
                    s.set_timeout,
                    s.set_switch_pmds,
                    s.set_runs,
                    s.set_timeout_left,
                    s.set_time_enabled,
                    s.set_time_running,
                    s.set_last_cause,
                    s.set_ovfl_pmds,
                    s.set_used_pmcs,
                    s.set_used_pmds
                ),
            );
            return;
        }
        let enabled = infos
            .iter()
            .map(|s| s.set_time_enabled)
            .find(|&e| e != 0)
            .unwrap_or(0);
        if let Some(s) = infos
            .iter()
            .find(|s| s.set_time_enabled != 0 && s.set_time_enabled != enabled)
        {
            return self.anomaly(
                op,
                format!(
                    "sets report different enabled times: {enabled} and {} (set {})",
                    s.set_time_enabled, s.set_id
                ),
            );
        }
        let mut seen = 0u32;
        let mut sum = 0u64;
        for s in infos {
            if seen & (1 << s.set_id) == 0 {
                seen |= 1 << s.set_id;
                sum = sum.saturating_add(s.set_time_running);
            }
        }
        if sum > enabled {
            return self.anomaly(
                op,
                format!(
                    "the sets' running times add up to {sum}, above their enabled time {enabled}"
                ),
            );
        }
        let whole = seen == (1 << MAX_SETS) - 1
            && enabled != 0
            && infos.iter().all(|s| s.set_time_enabled == enabled);
        if whole {
            shared().set_exact.fetch_add(1, Ordering::Relaxed);
            if sum != enabled {
                self.anomaly(
                    op,
                    format!("all 16 sets existed at LOAD: running times add up to {sum}, not to their enabled time {enabled}"),
                );
            }
        }
    }

    /// `arm`'s event sets (every model, a third of the time): set 0 and one
    /// to three more (a third of the time all 16), each switching on time (1 ns to
    /// 5 ms, raised to 100 us), on overflows of its PMDs, or never, and
    /// each with the registers of `pmcs` and `pmds`, which become one copy
    /// per set. The context is private (just opened): CREATE_SETS must
    /// succeed. Returns the sets (a mask) and the set LOAD starts in.
    pub(super) fn arm_sets(
        &mut self,
        fd: i32,
        pmcs: &mut Vec<abi::PfmPmc>,
        pmds: &mut Vec<abi::PfmPmd>,
    ) -> (u16, u16) {
        if !self.rng.chance(1, 3) {
            return (1, 0);
        }
        let mut ids = vec![0u16];
        // All 16 a third of the time: the contexts whose GETINFO of every
        // set is summed exactly.
        let more = if self.rng.chance(1, 3) {
            MAX_SETS - 1
        } else {
            self.rng.range(1, 3) as usize
        };
        while ids.len() < more + 1 {
            let id = self.rng.range(1, MAX_SETS as u64 - 1) as u16;
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        let written = pmds.iter().fold(0u64, |m, p| m | 1 << p.reg_num);
        let descs: Vec<abi::PfmSetdesc> = ids
            .iter()
            .map(|&id| {
                let mut d = abi::PfmSetdesc {
                    set_id: id,
                    ..Default::default()
                };
                // OVFL_SWITCH names PMDs written in the set (or LOAD fails).
                self.switch_flags(&mut d, written);
                d
            })
            .collect();
        let arr = self.arena.at(1024);
        let hdr = self.arena.at(0);
        for (i, d) in descs.iter().enumerate() {
            self.arena
                .put(arr + i * std::mem::size_of::<abi::PfmSetdesc>(), *d);
        }
        self.arena.put(
            hdr,
            abi::PfmSetsArg {
                sets: arr as u64,
                count: descs.len() as u32,
                ..Default::default()
            },
        );
        let r = sys::ioctl(fd, abi::PFM_IOC_CREATE_SETS, hdr);
        let r = self.res(Op::Arm, r);
        self.allow(Op::Arm, r, &[]);
        if r.is_err() {
            return (1, 0);
        }
        shared().set_creates.fetch_add(1, Ordering::Relaxed);
        let one_pmcs = std::mem::take(pmcs);
        let one_pmds = std::mem::take(pmds);
        for &id in &ids {
            pmcs.extend(one_pmcs.iter().map(|p| abi::PfmPmc { reg_set: id, ..*p }));
            pmds.extend(one_pmds.iter().map(|p| abi::PfmPmd { reg_set: id, ..*p }));
        }
        let mask = ids.iter().fold(0u16, |m, &id| m | 1 << id);
        (mask, self.rng.pick(&ids))
    }
}
