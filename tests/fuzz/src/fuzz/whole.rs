//! Whole programs (Documentation/perfmon.rst, "Whole programs"):
//! `PFM_IOC_READ_THREADS` on pool contexts with valid, boundary and
//! garbage arguments, and three scenarios on private contexts with exact
//! oracles:
//!
//! - `whole`: the actor monitors itself with `PFM_CTXFL_INHERIT` (and
//!   NOTIFY_BLOCK, NO_MSG or START_ON_EXEC), creates threads and children
//!   (which exit at once, spin, create a thread of their own, or exec),
//!   sometimes closes the fd in the middle (zombies on every heir still
//!   running); then every thread created is monitored or lost, the rows
//!   are the threads it created, and after STOP the rows add up to
//!   READ_VALUES' totals exactly;
//! - `process`: `PFM_LOAD_PROCESS` on a child that creates and ends
//!   threads all the time; no thread twice, every row of the process, and
//!   once the child is quiet every live thread has a row and the rows add
//!   up; or the fd closed, the child killed, the context unloaded in the
//!   middle of the churn;
//! - `exec_start`: `PFM_CTXFL_START_ON_EXEC` on a child: armed by LOAD,
//!   not started by a failed exec, started by a successful one, disarmed
//!   by START; and what an exit without exec leaves.
//!
//! Suspected kernel bugs are recorded per kind (`FINDINGS`): the first of
//! each kind as an anomaly with its evidence, the rest counted.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::actor::*;
use super::model::model;
use super::shared::*;
use crate::sys::{self, abi};

/// Rows asked for by the scenarios.
const ROWS: usize = 512;

fn ioc<T>(fd: i32, cmd: u32, arg: &mut T) -> Result<i64, i32> {
    sys::ioctl(fd, cmd, arg as *mut T as usize)
}

fn set_flags(fd: i32, flags: u32) -> Result<i64, i32> {
    let mut f = abi::PfmCtxFlags {
        flags,
        ..Default::default()
    };
    ioc(fd, abi::PFM_IOC_SET_FLAGS, &mut f)
}

fn load(fd: i32, tid: u32, flags: u32) -> Result<i64, i32> {
    let mut l = abi::PfmLoad {
        tid,
        flags,
        ..Default::default()
    };
    ioc(fd, abi::PFM_IOC_LOAD, &mut l)
}

fn plain(fd: i32, cmd: u32) -> Result<i64, i32> {
    sys::ioctl(fd, cmd, 0)
}

fn state(fd: i32) -> Result<abi::PfmCtxInfo, i32> {
    let mut st = abi::PfmCtxInfo::default();
    ioc(fd, abi::PFM_IOC_GET_STATE, &mut st).map(|_| st)
}

/// READ_VALUES of `mask`: the values in PMD order and the two times.
fn read_values(fd: i32, mask: u64) -> Result<(Vec<u64>, u64, u64), i32> {
    let mut vals = vec![0u64; mask.count_ones() as usize];
    let mut v = abi::PfmValues {
        pmd_mask: mask,
        values: vals.as_mut_ptr() as u64,
        ..Default::default()
    };
    ioc(fd, abi::PFM_IOC_READ_VALUES, &mut v)?;
    Ok((vals, v.time_enabled, v.time_running))
}

/// READ_THREADS of `mask` into `ROWS` rows: the rows, `needed` and
/// `lost_threads`.
fn read_threads(fd: i32, mask: u64) -> Result<(Vec<abi::PfmThread>, u32, u32), i32> {
    let mut rows = vec![abi::PfmThread::default(); ROWS];
    let mut a = abi::PfmThreadsArg {
        threads: rows.as_mut_ptr() as u64,
        pmd_mask: mask,
        count: ROWS as u32,
        ..Default::default()
    };
    ioc(fd, abi::PFM_IOC_READ_THREADS, &mut a)?;
    rows.truncate((a.needed as usize).min(ROWS));
    Ok((rows, a.needed, a.lost_threads))
}

/// The events the scenarios count, as (PMC, value, PMD): task-clock and
/// context switches on the soft model (task-clock alone with one
/// counter), two counting registers of a hardware model.
fn events() -> Vec<(u16, u64, u16)> {
    let m = model();
    if m.soft {
        if m.pmcs.len() >= 2 {
            vec![
                (0, abi::PFM_SOFT_EV_TASK_CLOCK, 0),
                (1, abi::PFM_SOFT_EV_CONTEXT_SWITCHES, 1),
            ]
        } else {
            vec![(0, abi::PFM_SOFT_EV_TASK_CLOCK, 0)]
        }
    } else {
        let mut v: Vec<(u16, u64, u16)> = Vec::new();
        for &c in &m.counting {
            if v.len() < 2 && !v.iter().any(|e| e.0 == c.0 || e.2 == c.2) {
                v.push(c);
            }
        }
        v
    }
}

fn mask_of(evs: &[(u16, u64, u16)]) -> u64 {
    evs.iter().fold(0, |m, e| m | 1 << e.2)
}

/// Writes the PMCs and PMDs of `evs` (values 0, no notification).
fn program(fd: i32, evs: &[(u16, u64, u16)]) -> Result<i64, i32> {
    let mut pmcs: Vec<abi::PfmPmc> = evs
        .iter()
        .map(|e| abi::PfmPmc {
            reg_num: e.0,
            reg_value: e.1,
            ..Default::default()
        })
        .collect();
    let mut a = abi::PfmRegsArg {
        regs: pmcs.as_mut_ptr() as u64,
        count: pmcs.len() as u32,
        ..Default::default()
    };
    ioc(fd, abi::PFM_IOC_WRITE_PMCS, &mut a)?;
    let mut pmds: Vec<abi::PfmPmd> = evs
        .iter()
        .map(|e| abi::PfmPmd {
            reg_num: e.2,
            ..Default::default()
        })
        .collect();
    let mut a = abi::PfmRegsArg {
        regs: pmds.as_mut_ptr() as u64,
        count: pmds.len() as u32,
        ..Default::default()
    };
    ioc(fd, abi::PFM_IOC_WRITE_PMDS, &mut a)
}

/// A pipe (close-on-exec both ends).
fn pipe() -> Option<(i32, i32)> {
    let mut p = [0i32; 2];
    // SAFETY: `p` has room for the two descriptors.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return None;
    }
    Some((p[0], p[1]))
}

/// Waits up to `ms` for a byte on `fd`.
fn wait_byte(fd: i32, ms: u64) -> Option<u8> {
    let end = Instant::now() + Duration::from_millis(ms);
    while Instant::now() < end {
        if let Ok(rev) = sys::poll(&[(fd, libc::POLLIN)], 10) {
            if rev[0] & (libc::POLLIN | libc::POLLHUP) != 0 {
                let mut b = [0u8; 1];
                return match sys::read_buf(fd, &mut b) {
                    Ok(1) => Some(b[0]),
                    _ => None,
                };
            }
        }
    }
    None
}

/// Reaps `pid` (SIGKILLed first if `kill`), waiting up to 5 s.
fn reap(pid: i32, kill: bool) -> bool {
    if kill {
        let _ = sys::kill(pid, libc::SIGKILL);
        let _ = sys::kill(pid, libc::SIGCONT);
    }
    let end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < end {
        match sys::waitpid(pid, true) {
            Ok(Some(_)) => return true,
            Ok(None) => sys::usleep(500),
            Err(libc::EINTR) => {}
            Err(_) => return false,
        }
    }
    let _ = sys::kill(pid, libc::SIGKILL);
    false
}

/// Spins for `us` microseconds.
fn spin(us: u64) {
    let t = Instant::now();
    while t.elapsed() < Duration::from_micros(us) {
        std::hint::spin_loop();
    }
}

/// The thread ids of process `pid` (/proc/PID/task).
fn tasks_of(pid: i32) -> Vec<u32> {
    let mut v = Vec::new();
    if let Ok(d) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for e in d.flatten() {
            if let Ok(t) = e.file_name().to_string_lossy().parse::<u32>() {
                v.push(t);
            }
        }
    }
    v
}

/// Rows that name one tid twice, as text (empty: none).
fn duplicates(rows: &[abi::PfmThread]) -> String {
    let mut s = String::new();
    for (i, a) in rows.iter().enumerate() {
        for b in rows.iter().skip(i + 1) {
            if a.tid == b.tid && a.tid != 0 {
                s.push_str(&format!(
                    " tid {} (pid {} flags {:#x} / pid {} flags {:#x})",
                    a.tid, a.pid, a.flags, b.pid, b.flags
                ));
            }
        }
    }
    s
}

/// The rows' sum (values, enabled, running), wrapping as the kernel sums.
fn sum_rows(rows: &[abi::PfmThread], n: usize) -> (Vec<u64>, u64, u64) {
    let mut v = vec![0u64; n];
    let (mut te, mut tr) = (0u64, 0u64);
    for r in rows {
        for (k, x) in v.iter_mut().enumerate() {
            *x = x.wrapping_add(r.values[k]);
        }
        te = te.wrapping_add(r.time_enabled);
        tr = tr.wrapping_add(r.time_running);
    }
    (v, te, tr)
}

/// What a forked churn child of `whole` does.
#[derive(Clone, Copy, Debug)]
enum Kid {
    /// Exits at once.
    Exit,
    /// Spins, then exits.
    Spin,
    /// Creates a thread, joins it, exits (two tasks).
    Thread,
    /// Execs /bin/true.
    Exec,
}

impl Actor {
    /// `PFM_IOC_READ_THREADS` on a pool fd: masks valid, empty,
    /// unimplemented; flags and reserved garbage; counts 0, small, large;
    /// every pointer kind for the argument and the rows.
    pub(super) fn op_read_threads(&mut self) {
        let (_, fd) = self.pick_fd();
        let m = model();
        let implemented = m.impl_pmds;
        let mut mask =
            (self.rng.next_u64() & implemented).max(implemented & implemented.wrapping_neg());
        let mut bad = false;
        match self.rng.weighted(&[85, 5, 5, 3, 3]) {
            0 => {}
            1 => {
                mask = 0;
                bad = true;
            }
            2 => {
                let unimpl = !implemented;
                let mut b = self.rng.below(64);
                while unimpl & (1 << b) == 0 {
                    b = (b + 1) % 64;
                }
                mask |= 1 << b;
                bad = true;
            }
            3 => {
                // More than PFM_THREAD_VALUES PMDs (never all implemented).
                mask = u64::MAX;
                bad = true;
            }
            _ => mask = implemented,
        }
        let count: u32 = match self.rng.weighted(&[20, 40, 20, 10, 10]) {
            0 => 0,
            1 => self.rng.range(1, 4) as u32,
            2 => self.rng.range(5, 32) as u32,
            3 => 64,
            _ => self.rng.pick(&[u32::MAX, 0x8000_0000, 65536, 65537]),
        };
        let mut a = abi::PfmThreadsArg {
            pmd_mask: mask,
            count,
            needed: self.rng.next_u64() as u32,
            lost_threads: self.rng.next_u64() as u32,
            ..Default::default()
        };
        // A set's own counts and times: any set id (one that does not
        // exist is EINVAL).
        let in_set = self.rng.chance(1, 4);
        if in_set {
            a.vflags = abi::PFM_VALFL_SET;
            a.set = self.rng.pick(&[0, 0, 1, 2, 7, u16::MAX]);
        }
        let garbage = self.rng.chance(1, 20);
        if garbage {
            match self.rng.below(5) {
                0 => a.flags = self.rng.interesting_u32() | 1 << self.rng.below(32),
                1 => {
                    let i = self.rng.below(a.reserved.len() as u64) as usize;
                    a.reserved[i] = self.rng.interesting_u64() | 1;
                }
                2 => a.pad = self.rng.interesting_u32() | 1,
                // A set without PFM_VALFL_SET.
                3 => {
                    a.vflags = 0;
                    a.set = self.rng.range(1, 0xffff) as u16;
                }
                _ => a.vflags = (self.rng.interesting_u32() as u16) | 2,
            }
        }
        // Room for up to 24 rows (the arena's first pages).
        let room = (count as usize).min(24);
        let row = std::mem::size_of::<abi::PfmThread>();
        let rp = self.pick_ptr(85);
        let raddr = self.place_in(rp, room.max(1) * row, true);
        a.threads = raddr as u64;
        let hp = self.pick_ptr(90);
        let haddr = self.place(hp, std::mem::size_of::<abi::PfmThreadsArg>());
        self.arena.put(haddr, a);
        self.note(format_args!(
            " fd={fd} mask={mask:#x} count={count} set={} vflags={} hdr={hp:?} rows={rp:?} garbage={garbage}",
            a.set, a.vflags
        ));
        let r = sys::ioctl(fd, abi::PFM_IOC_READ_THREADS, haddr);
        let r = self.res(Op::ReadThreads, r);
        if !(0..1000).contains(&fd) {
            return;
        }
        // The argument is read, then written back (needed, lost) before
        // anything else: it must be readable and writable.
        if hp != Ptr::Good {
            return self.expect_err(
                Op::ReadThreads,
                r,
                &[libc::EFAULT],
                "the argument is not readable and writable",
            );
        }
        let out: abi::PfmThreadsArg = self.arena.get(haddr);
        if garbage || bad {
            self.expect_err(
                Op::ReadThreads,
                r,
                &[libc::EINVAL],
                "flags, reserved or an empty, unimplemented or too large PMD mask",
            );
            if r == Err(libc::EINVAL) && (out.needed != 0 || out.lost_threads != 0) {
                self.anomaly(
                    Op::ReadThreads,
                    format!(
                        "EINVAL with needed {} lost {} written back (0 expected)",
                        out.needed, out.lost_threads
                    ),
                );
            }
            return;
        }
        // EAGAIN: a hardware model's live counters out of reach; EINVAL: a
        // set the context does not have.
        if in_set && a.set != 0 && r == Err(libc::EINVAL) {
            return;
        }
        self.allow(
            Op::ReadThreads,
            r,
            &[libc::E2BIG, libc::EFAULT, libc::EAGAIN],
        );
        let needed = out.needed as usize;
        match r {
            Err(libc::E2BIG) if needed <= count as usize => self.anomaly(
                Op::ReadThreads,
                format!("E2BIG with needed {needed} for count {count}"),
            ),
            Err(libc::EFAULT) if rp == Ptr::Good || needed == 0 => self.anomaly(
                Op::ReadThreads,
                format!("EFAULT with {needed} rows into a {rp:?} array of {count}"),
            ),
            Ok(_) if needed > count as usize => self.anomaly(
                Op::ReadThreads,
                format!("succeeded with needed {needed} above count {count}"),
            ),
            Ok(_) if needed > 0 && !self.arena.writable(raddr, needed * row) => self.anomaly(
                Op::ReadThreads,
                format!("{needed} rows written into a {rp:?} array"),
            ),
            Ok(_) if rp == Ptr::Good => {
                let n = mask.count_ones() as usize;
                for i in 0..needed.min(room) {
                    let t: abi::PfmThread = self.arena.get(raddr + i * row);
                    let loaded = t.flags & abi::PFM_THRFL_LOADED != 0;
                    let bad_values = t.values[n.min(abi::PFM_THREAD_VALUES)..]
                        .iter()
                        .any(|&v| v != 0);
                    if t.flags & !7 != 0
                        || loaded != (i == 0)
                        || t.pad != 0
                        || t.tid == 0
                        || t.time_running > t.time_enabled
                        || bad_values
                    {
                        self.anomaly(
                            Op::ReadThreads,
                            format!(
                                "bad row {i} of {needed}: tid {} pid {} flags {:#x} pad {} enabled {} running {} values {:?}",
                                t.tid, t.pid, t.flags, t.pad, t.time_enabled, t.time_running, &t.values[..n.min(4)]
                            ),
                        );
                        break;
                    }
                }
            }
            _ => {}
        }
    }

    /// Records `what` as an anomaly of the scenario if `r` failed with an
    /// errno outside `allowed`; whether it succeeded.
    fn step_ok(&mut self, op: Op, r: Result<i64, i32>, allowed: &[i32]) -> bool {
        let r = self.res(op, r);
        self.allow(op, r, allowed);
        r.is_ok()
    }

    /// Inheritance on the actor itself, with thread, fork and exec churn.
    pub(super) fn op_whole(&mut self) {
        if self.kind != Kind::Worker {
            return;
        }
        let op = Op::Whole;
        let fd = match sys::open_pfm() {
            Ok(fd) => fd,
            Err(e) => {
                self.res(op, Err(e)).ok();
                return;
            }
        };
        self.calls += 1;
        let mut flags = abi::PFM_CTXFL_INHERIT;
        flags |= match self.rng.below(6) {
            0 => abi::PFM_CTXFL_NOTIFY_BLOCK,
            1 => abi::PFM_CTXFL_NO_MSG,
            2 => abi::PFM_CTXFL_START_ON_EXEC,
            3 => abi::PFM_CTXFL_NOTIFY_BLOCK | abi::PFM_CTXFL_NO_MSG,
            _ => 0,
        };
        let evs = events();
        let mask = mask_of(&evs);
        let n = evs.len();
        // LOAD and START in one call a quarter of the time
        // (PFM_LOAD_START): started, and so disarmed, as LOAD returns.
        let load_start = self.rng.chance(1, 4);
        let load_flags = if load_start { abi::PFM_LOAD_START } else { 0 };
        self.note(format_args!(
            " fd={fd} flags={flags:#x} mask={mask:#x} load_start={load_start}"
        ));
        let ok =
            self.step_ok(op, set_flags(fd, flags), &[]) && self.step_ok(op, program(fd, &evs), &[]);
        if !ok {
            let _ = sys::close(fd);
            return;
        }
        // A quarter of the time another thread LOADs the same context at
        // the same instant (on itself): one LOAD wins, the other fails
        // with EBUSY and must leave the winner's family alone.
        // The helper stays alive until both LOADs returned: a LOAD that
        // won and whose thread exited leaves the context UNLOADED, free
        // for the other.
        let go = std::sync::Arc::new(std::sync::Barrier::new(2));
        let helper = if self.rng.chance(1, 4) {
            let go2 = go.clone();
            let h = std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    go2.wait();
                    let r = load(fd, 0, 0);
                    go2.wait();
                    r
                });
            match h {
                Ok(h) => {
                    go.wait();
                    Some(h)
                }
                Err(_) => None,
            }
        } else {
            None
        };
        let r = self.res(op, load(fd, 0, load_flags));
        let raced = helper.map(|h| {
            go.wait();
            h.join().unwrap_or(Err(0))
        });
        if let Some(hr) = raced {
            self.note(format_args!(" race={}", crate::pfm::outcome(&hr)));
            let limits = [libc::EBUSY, libc::EAGAIN, libc::EDQUOT, libc::ENOSPC];
            if (r.is_ok() && hr.is_ok()) || hr.is_err_and(|e| !limits.contains(&e)) {
                self.anomaly(
                    op,
                    format!(
                        "two LOADs of one context at once: {} and {}",
                        crate::pfm::outcome(&r),
                        crate::pfm::outcome(&hr)
                    ),
                );
            }
        }
        if r.is_err() {
            // The actor is monitored already (by anyone), or holds too
            // many pending attachments, or the limits; or the racing LOAD
            // won (its thread has exited since).
            self.allow(
                op,
                r,
                &[libc::EBUSY, libc::EAGAIN, libc::EDQUOT, libc::ENOSPC],
            );
            let _ = sys::close(fd);
            return;
        }
        if load_start {
            shared().load_starts.fetch_add(1, Ordering::Relaxed);
        }
        let me = sys::gettid();
        let pid = sys::getpid();
        match state(fd) {
            Ok(st) => {
                // LOAD arms START_ON_EXEC; START (PFM_LOAD_START's) disarms.
                let armed = flags & abi::PFM_CTXFL_START_ON_EXEC != 0 && !load_start;
                if st.state != abi::PFM_STATE_LOADED
                    || st.tid != me
                    || st.threads != 1
                    || st.lost_threads != 0
                    || (st.status & abi::PFM_CTXST_EXEC_ARMED != 0) != armed
                    || (st.status & abi::PFM_CTXST_STARTED != 0) != load_start
                {
                    self.anomaly(
                        op,
                        format!(
                            "after LOAD on itself with flags {flags:#x}, load flags {load_flags:#x}: state {} tid {} (me {me}) threads {} lost {} status {:#x}",
                            st.state, st.tid, st.threads, st.lost_threads, st.status
                        ),
                    );
                }
            }
            Err(e) => self.anomaly(op, format!("GET_STATE: {}", perfmon::errno_name(e))),
        }
        if !load_start && !self.step_ok(op, plain(fd, abi::PFM_IOC_START), &[]) {
            let _ = sys::close(fd);
            return;
        }
        if let Ok(st) = state(fd) {
            if st.status & (abi::PFM_CTXST_STARTED | abi::PFM_CTXST_EXEC_ARMED)
                != abi::PFM_CTXST_STARTED
            {
                self.anomaly(
                    op,
                    format!(
                        "after START: status {:#x} (STARTED, not EXEC_ARMED expected)",
                        st.status
                    ),
                );
            }
        }
        // The churn: every task it creates is created by this thread or by
        // one of its children.
        let close_early = self.rng.chance(1, 5);
        let steps = self.rng.range(1, 6);
        let mut created = 0u32;
        let mut threads = Vec::new();
        let mut kids: Vec<(i32, Kid)> = Vec::new();
        let mut toggled = false;
        let mut closed = false;
        for i in 0..steps {
            match self.rng.below(6) {
                0..=1 => {
                    let how = self.rng.below(3);
                    let us = self.rng.range(20, 400);
                    let b = std::thread::Builder::new().stack_size(64 * 1024);
                    if let Ok(h) = b.spawn(move || {
                        match how {
                            0 => spin(us),
                            1 => sys::sched_yield(),
                            _ => sys::usleep(us),
                        }
                        sys::gettid()
                    }) {
                        threads.push(h);
                        created += 1;
                    }
                    self.calls += 1;
                }
                k => {
                    let kid = match k {
                        2 => Kid::Exit,
                        3 => Kid::Spin,
                        4 => Kid::Thread,
                        _ => Kid::Exec,
                    };
                    shared().forks.fetch_add(1, Ordering::Relaxed);
                    self.calls += 1;
                    match sys::fork() {
                        Ok(0) => whole_kid(kid),
                        Ok(p) => {
                            kids.push((p, kid));
                            created += if matches!(kid, Kid::Thread) { 2 } else { 1 };
                            if matches!(kid, Kid::Exec) {
                                shared().execs.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Err(_) => {}
                    }
                }
            }
            if i == steps / 2 {
                if self.rng.chance(1, 4) {
                    toggled = true;
                    self.step_ok(op, plain(fd, abi::PFM_IOC_STOP), &[]);
                    self.step_ok(op, plain(fd, abi::PFM_IOC_START), &[]);
                }
                if close_early {
                    // Every heir whose thread still runs becomes a zombie.
                    closed = true;
                    let _ = sys::close(fd);
                    self.calls += 1;
                }
            }
        }
        let mut tids = vec![me];
        for h in threads {
            if let Ok(t) = h.join() {
                tids.push(t);
            }
        }
        let mut kid_pids = Vec::new();
        let mut all_reaped = true;
        for (p, _) in &kids {
            kid_pids.push(*p as u32);
            all_reaped &= reap(*p, false);
        }
        self.calls += kids.len() as u64;
        self.note(format_args!(
            " created={created} kids={kids:?} toggled={toggled} closed={closed}"
        ));
        if closed {
            return;
        }
        if !all_reaped {
            let _ = sys::close(fd);
            return;
        }
        self.step_ok(op, plain(fd, abi::PFM_IOC_STOP), &[]);
        let st = state(fd);
        let total = read_values(fd, mask);
        let rows = read_threads(fd, mask);
        let (Ok(st), Ok(total), Ok((rows, needed, lost))) = (st, total, rows) else {
            self.anomaly(
                op,
                "GET_STATE, READ_VALUES or READ_THREADS failed after STOP".into(),
            );
            let _ = sys::close(fd);
            return;
        };
        shared()
            .heirs_seen
            .fetch_add(rows.len().saturating_sub(1) as u64, Ordering::Relaxed);
        let ctx = format!(
            "{} #{} whole: flags {flags:#x} load flags {load_flags:#x} created {created} (kids {kids:?}) toggled {toggled} racing LOAD {}",
            self.name,
            self.n,
            raced.map_or("none", |hr| crate::pfm::outcome(&hr))
        );
        if st.threads + st.lost_threads != 1 + created {
            if st.threads + st.lost_threads < 1 + created {
                record_finding(
                    3,
                    &format!(
                        "{ctx}: GET_STATE threads {} + lost {} < 1 + created {created}; rows {:?}",
                        st.threads,
                        st.lost_threads,
                        rows.iter()
                            .map(|r| (r.tid, r.pid, r.flags))
                            .collect::<Vec<_>>()
                    ),
                );
            } else {
                self.anomaly(
                    op,
                    format!(
                        "{ctx}: GET_STATE threads {} + lost {} > 1 + created",
                        st.threads, st.lost_threads
                    ),
                );
            }
        }
        if needed != st.threads || lost != st.lost_threads {
            self.anomaly(
                op,
                format!(
                    "READ_THREADS needed {needed} lost {lost}, GET_STATE threads {} lost {}",
                    st.threads, st.lost_threads
                ),
            );
        }
        let dups = duplicates(&rows);
        if !dups.is_empty() {
            record_finding(4, &format!("{ctx}:{dups}"));
        }
        for (i, r) in rows.iter().enumerate() {
            let loaded = r.flags & abi::PFM_THRFL_LOADED != 0;
            let ours = if r.pid == pid {
                tids.contains(&r.tid)
            } else {
                kid_pids.contains(&r.pid)
            };
            if loaded != (i == 0)
                || (i == 0 && r.tid != me)
                || !ours
                || r.time_running > r.time_enabled
                || (i > 0 && !toggled && r.time_running == 0)
            {
                self.anomaly(
                    op,
                    format!(
                        "{ctx}: row {i}: tid {} pid {} flags {:#x} enabled {} running {} (me {me}, threads {tids:?}, kids {kid_pids:?})",
                        r.tid, r.pid, r.flags, r.time_enabled, r.time_running
                    ),
                );
                break;
            }
        }
        let sum = sum_rows(&rows, n);
        if (sum.0.as_slice(), sum.1, sum.2) != (total.0.as_slice(), total.1, total.2)
            && rows.len() == needed as usize
        {
            record_finding(
                2,
                &format!(
                    "{ctx}: rows sum {:?} te {} tr {}, READ_VALUES {:?} te {} tr {} ({} rows)",
                    sum.0,
                    sum.1,
                    sum.2,
                    total.0,
                    total.1,
                    total.2,
                    rows.len()
                ),
            );
        }
        // A refused LOAD must leave the last LOAD's results alone: UNLOAD
        // keeps the rows and totals "until the next LOAD".
        if self.rng.chance(1, 2) && self.step_ok(op, plain(fd, abi::PFM_IOC_UNLOAD), &[]) {
            let before = (read_values(fd, mask), state(fd).map(|s| s.threads));
            let r = self.res(op, load(fd, 2, 0));
            self.expect_err(op, r, &[libc::EPERM], "tid 2 is kthreadd");
            let after = (read_values(fd, mask), state(fd).map(|s| s.threads));
            if before != after {
                record_finding(
                    1,
                    &format!(
                        "{ctx}: after UNLOAD (values, te, tr) and threads {:?}; after a LOAD of kthreadd refused with {}: {:?}",
                        before,
                        crate::pfm::outcome(&r),
                        after
                    ),
                );
            }
        }
        shared().whole_checked.fetch_add(1, Ordering::Relaxed);
        if self.rng.chance(1, 4) {
            // Into the pool: the other operations meet a family's root.
            self.store_fd(fd);
        } else {
            let _ = sys::close(fd);
        }
    }

    /// `PFM_LOAD_PROCESS` on a child whose threads come and go.
    pub(super) fn op_process(&mut self) {
        if self.kind != Kind::Worker {
            return;
        }
        let op = Op::Process;
        let (Some((cr, cw)), Some((pr, pw))) = (pipe(), pipe()) else {
            return;
        };
        let keep = self.rng.range(1, 5) as usize;
        let life_us = self.rng.range(100, 3000);
        let sleepers = self.rng.below(3) as usize;
        shared().forks.fetch_add(1, Ordering::Relaxed);
        self.calls += 1;
        let child = match sys::fork() {
            Ok(0) => process_kid(cr, pw, keep, life_us, sleepers, self.rng.next_u64()),
            Ok(p) => p,
            Err(_) => {
                for f in [cr, cw, pr, pw] {
                    let _ = sys::close(f);
                }
                return;
            }
        };
        let _ = sys::close(cr);
        let _ = sys::close(pw);
        let cleanup = |fd: Option<i32>| {
            if let Some(fd) = fd {
                let _ = sys::close(fd);
            }
            let _ = sys::close(cw);
            let _ = sys::close(pr);
            reap(child, true);
        };
        sys::usleep(self.rng.below(2000));
        let fd = match sys::open_pfm() {
            Ok(fd) => fd,
            Err(_) => return cleanup(None),
        };
        let flags = self.rng.pick(&[
            0,
            0,
            abi::PFM_CTXFL_INHERIT,
            abi::PFM_CTXFL_NO_MSG,
            abi::PFM_CTXFL_NOTIFY_BLOCK,
        ]);
        let evs = events();
        let mask = mask_of(&evs);
        let n = evs.len();
        let mode = self.rng.below(4);
        // LOAD and START in one call a quarter of the time
        // (PFM_LOAD_START): the whole family started as LOAD returns.
        let load_start = self.rng.chance(1, 4);
        let load_flags = abi::PFM_LOAD_PROCESS | if load_start { abi::PFM_LOAD_START } else { 0 };
        self.note(format_args!(
            " child={child} keep={keep} life={life_us}us sleepers={sleepers} flags={flags:#x} mode={mode} load_flags={load_flags:#x}"
        ));
        if !(self.step_ok(op, set_flags(fd, flags), &[])
            && self.step_ok(op, program(fd, &evs), &[]))
        {
            return cleanup(Some(fd));
        }
        let r = self.res(op, load(fd, child as u32, load_flags));
        if r.is_err() {
            // ESRCH: the child died (a SIGKILL of the worker's children);
            // with PFM_LOAD_START, EBADFD: it died between LOAD and START.
            let mut allowed = vec![
                libc::ESRCH,
                libc::EBUSY,
                libc::EAGAIN,
                libc::EDQUOT,
                libc::ENOSPC,
                libc::EINTR,
            ];
            if load_start {
                allowed.push(libc::EBADFD);
            }
            self.allow(op, r, &allowed);
            return cleanup(Some(fd));
        }
        let ctx = format!(
            "{} #{} process: child {child} keep {keep} life {life_us} us sleepers {sleepers} flags {flags:#x} load flags {load_flags:#x}",
            self.name, self.n
        );
        if load_start {
            shared().load_starts.fetch_add(1, Ordering::Relaxed);
            // STARTED until STOP or UNLOAD, the thread's exit included.
            match state(fd) {
                Ok(st) if st.status & abi::PFM_CTXST_STARTED != 0 => {}
                other => self.anomaly(
                    op,
                    format!("{ctx}: after LOAD|START: {other:?} (started expected)"),
                ),
            }
            self.calls += 1;
        } else {
            self.step_ok(op, plain(fd, abi::PFM_IOC_START), &[libc::EBADFD]);
        }
        let samples = self.rng.range(1, 4);
        for _ in 0..samples {
            sys::usleep(self.rng.below(3000));
            self.sample_process(op, fd, mask, child, &ctx);
        }
        match mode {
            0 => {
                // Quiet: no thread created or ended any more.
                sys::write_all(cw, b"q");
                if wait_byte(pr, 5000) != Some(b'k') {
                    return cleanup(Some(fd));
                }
                let live = tasks_of(child);
                let st = state(fd);
                let rows = read_threads(fd, mask);
                let (Ok(st), Ok((rows, needed, lost))) = (st, rows) else {
                    self.anomaly(op, format!("{ctx}: GET_STATE or READ_THREADS failed"));
                    return cleanup(Some(fd));
                };
                shared()
                    .heirs_seen
                    .fetch_add(rows.len().saturating_sub(1) as u64, Ordering::Relaxed);
                if needed != st.threads || lost != st.lost_threads {
                    self.anomaly(
                        op,
                        format!(
                            "{ctx}: READ_THREADS needed {needed} lost {lost}, GET_STATE threads {} lost {}",
                            st.threads, st.lost_threads
                        ),
                    );
                }
                let missing: Vec<u32> = live
                    .iter()
                    .copied()
                    .filter(|t| !rows.iter().any(|r| r.tid == *t))
                    .collect();
                if !missing.is_empty() && lost == 0 && (needed as usize) < ROWS {
                    record_finding(
                        5,
                        &format!(
                            "{ctx}: live threads {live:?}, no row for {missing:?}; rows {:?}",
                            rows.iter().map(|r| (r.tid, r.flags)).collect::<Vec<_>>()
                        ),
                    );
                }
                self.step_ok(op, plain(fd, abi::PFM_IOC_STOP), &[libc::EBADFD]);
                let total = read_values(fd, mask);
                let rows2 = read_threads(fd, mask);
                if let (Ok(total), Ok((rows2, needed2, _))) = (total, rows2) {
                    let sum = sum_rows(&rows2, n);
                    if (sum.0.as_slice(), sum.1, sum.2) != (total.0.as_slice(), total.1, total.2)
                        && rows2.len() == needed2 as usize
                    {
                        record_finding(
                            2,
                            &format!(
                                "{ctx}: rows sum {:?} te {} tr {}, READ_VALUES {:?} te {} tr {} ({} rows)",
                                sum.0, sum.1, sum.2, total.0, total.1, total.2, rows2.len()
                            ),
                        );
                    }
                }
                self.step_ok(op, plain(fd, abi::PFM_IOC_UNLOAD), &[libc::EBADFD]);
                shared().process_checked.fetch_add(1, Ordering::Relaxed);
                cleanup(Some(fd));
            }
            1 => {
                // The tool goes mid-churn: a zombie on every thread.
                let _ = sys::close(fd);
                sys::usleep(self.rng.below(3000));
                cleanup(None);
            }
            2 => {
                // The process dies mid-churn.
                reap(child, true);
                self.sample_process(op, fd, mask, child, &ctx);
                cleanup(Some(fd));
            }
            _ => {
                // UNLOAD mid-churn: nothing joins afterwards.
                self.step_ok(op, plain(fd, abi::PFM_IOC_UNLOAD), &[libc::EBADFD]);
                let a = state(fd).map(|s| (s.threads, s.lost_threads));
                sys::usleep(self.rng.range(500, 3000));
                let b = state(fd).map(|s| (s.threads, s.lost_threads));
                if a != b {
                    self.anomaly(
                        op,
                        format!("{ctx}: (threads, lost) {a:?} after UNLOAD, {b:?} later"),
                    );
                }
                cleanup(Some(fd));
            }
        }
    }

    /// What holds of a LOAD_PROCESS context at any instant: its rows are
    /// the process's threads, each once, the loaded one first.
    fn sample_process(&mut self, op: Op, fd: i32, mask: u64, child: i32, ctx: &str) {
        let st = state(fd);
        let rows = read_threads(fd, mask);
        self.calls += 2;
        let (Ok(st), Ok((rows, needed, _))) = (st, rows) else {
            self.anomaly(op, format!("{ctx}: GET_STATE or READ_THREADS failed"));
            return;
        };
        if st.threads == 0 || needed == 0 {
            self.anomaly(op, format!("{ctx}: threads {} needed {needed}", st.threads));
            return;
        }
        let dups = duplicates(&rows);
        if !dups.is_empty() {
            record_finding(4, &format!("{ctx}:{dups}"));
        }
        let first = &rows[0];
        if first.flags & abi::PFM_THRFL_LOADED == 0 || first.tid != child as u32 {
            self.anomaly(
                op,
                format!(
                    "{ctx}: first row tid {} flags {:#x}",
                    first.tid, first.flags
                ),
            );
        }
        if let Some(r) = rows
            .iter()
            .skip(1)
            .find(|r| r.pid != child as u32 || r.flags & abi::PFM_THRFL_LOADED != 0)
        {
            self.anomaly(
                op,
                format!(
                    "{ctx}: row tid {} pid {} flags {:#x}: not a thread of the process",
                    r.tid, r.pid, r.flags
                ),
            );
        }
    }

    /// `PFM_CTXFL_START_ON_EXEC` on a child that fails an exec, execs, or
    /// exits without exec.
    pub(super) fn op_exec_start(&mut self) {
        if self.kind != Kind::Worker {
            return;
        }
        let op = Op::ExecStart;
        let (Some((cr, cw)), Some((pr, pw))) = (pipe(), pipe()) else {
            return;
        };
        shared().forks.fetch_add(1, Ordering::Relaxed);
        self.calls += 1;
        let child = match sys::fork() {
            Ok(0) => exec_kid(cr, pw),
            Ok(p) => p,
            Err(_) => {
                for f in [cr, cw, pr, pw] {
                    let _ = sys::close(f);
                }
                return;
            }
        };
        let _ = sys::close(cr);
        let _ = sys::close(pw);
        let cleanup = |fd: i32| {
            if fd >= 0 {
                let _ = sys::close(fd);
            }
            let _ = sys::close(cw);
            let _ = sys::close(pr);
            reap(child, true);
        };
        let fd = match sys::open_pfm() {
            Ok(fd) => fd,
            Err(_) => return cleanup(-1),
        };
        let mut flags = abi::PFM_CTXFL_START_ON_EXEC;
        if self.rng.chance(1, 3) {
            flags |= abi::PFM_CTXFL_INHERIT;
        }
        let evs = events();
        let mask = mask_of(&evs);
        let failed_first = self.rng.chance(1, 3);
        let mode = self.rng.below(4);
        // Mode 2 (START before the exec) LOADs and STARTs in one call half
        // the time (PFM_LOAD_START): started and disarmed as LOAD returns,
        // and a failed exec changes nothing.
        let load_start = mode == 2 && self.rng.chance(1, 2);
        self.note(format_args!(
            " child={child} flags={flags:#x} failed_first={failed_first} mode={mode} load_start={load_start}"
        ));
        if !(self.step_ok(op, set_flags(fd, flags), &[])
            && self.step_ok(op, program(fd, &evs), &[]))
        {
            return cleanup(fd);
        }
        let load_flags = if load_start { abi::PFM_LOAD_START } else { 0 };
        let r = self.res(op, load(fd, child as u32, load_flags));
        if r.is_err() {
            // With PFM_LOAD_START, EBADFD: the child gone between LOAD and
            // START, as ESRCH before LOAD.
            let mut allowed = vec![
                libc::ESRCH,
                libc::EBUSY,
                libc::EAGAIN,
                libc::EDQUOT,
                libc::ENOSPC,
                libc::EINTR,
            ];
            if load_start {
                allowed.push(libc::EBADFD);
            }
            self.allow(op, r, &allowed);
            return cleanup(fd);
        }
        if load_start {
            shared().load_starts.fetch_add(1, Ordering::Relaxed);
        }
        let ctx = format!(
            "{} #{} exec_start: child {child} flags {flags:#x} failed_first {failed_first} mode {mode} load flags {load_flags:#x}",
            self.name, self.n
        );
        // Armed and not started after LOAD; started and disarmed after
        // LOAD|START; a failed exec changes neither.
        let (want, want_text) = if load_start {
            (abi::PFM_CTXST_STARTED, "started, disarmed")
        } else {
            (abi::PFM_CTXST_EXEC_ARMED, "armed, not started")
        };
        let as_loaded = |s: &abi::PfmCtxInfo| {
            s.status & (abi::PFM_CTXST_EXEC_ARMED | abi::PFM_CTXST_STARTED) == want
        };
        match state(fd) {
            Ok(s) if as_loaded(&s) => {}
            other => {
                self.anomaly(
                    op,
                    format!("{ctx}: after LOAD: {other:?} ({want_text} expected)"),
                );
                return cleanup(fd);
            }
        }
        if failed_first {
            sys::write_all(cw, b"f");
            if wait_byte(pr, 3000) != Some(b'a') {
                return cleanup(fd);
            }
            match state(fd) {
                Ok(s) if as_loaded(&s) => {}
                other => self.anomaly(
                    op,
                    format!("{ctx}: after a failed exec: {other:?} (still {want_text} expected)"),
                ),
            }
        }
        if mode == 2 && !load_start {
            self.step_ok(op, plain(fd, abi::PFM_IOC_START), &[]);
            match state(fd) {
                Ok(s)
                    if s.status & (abi::PFM_CTXST_EXEC_ARMED | abi::PFM_CTXST_STARTED)
                        == abi::PFM_CTXST_STARTED => {}
                other => self.anomaly(
                    op,
                    format!("{ctx}: after START: {other:?} (started, disarmed expected)"),
                ),
            }
        }
        sys::write_all(cw, if mode == 3 { b"e" } else { b"x" });
        if !reap(child, false) {
            return cleanup(fd);
        }
        self.calls += 1;
        // The END of the loaded thread (its reap runs from a workqueue).
        let end = Instant::now() + Duration::from_secs(2);
        let mut st = state(fd);
        while Instant::now() < end
            && st
                .as_ref()
                .is_ok_and(|s| s.state != abi::PFM_STATE_UNLOADED)
        {
            sys::usleep(1000);
            st = state(fd);
        }
        let Ok(st) = st else {
            return cleanup(fd);
        };
        if st.state != abi::PFM_STATE_UNLOADED || st.status & abi::PFM_CTXST_EXITED == 0 {
            // Not ended within 2 s: not judged here.
            return cleanup(fd);
        }
        if st.status & abi::PFM_CTXST_EXEC_ARMED != 0 {
            if mode == 3 {
                record_finding(
                    0,
                    &format!(
                        "{ctx}: the child exited without exec: state UNLOADED, status {:#x} (EXITED|EXEC_ARMED), flags {:#x}",
                        st.status, st.flags
                    ),
                );
            } else {
                self.anomaly(
                    op,
                    format!("{ctx}: still armed after the exec: status {:#x}", st.status),
                );
            }
        }
        if mode != 3 && self.uid == 0 {
            // The exec started it (START or LOAD|START did in mode 2): the
            // program ran counted.
            let v = read_values(fd, mask);
            let started = st.status & abi::PFM_CTXST_STARTED != 0;
            if !started || v.as_ref().map_or(true, |v| v.2 == 0) {
                self.anomaly(
                    op,
                    format!(
                        "{ctx}: after the exec and the exit: status {:#x}, values {v:?}",
                        st.status
                    ),
                );
            }
        }
        if mode == 3 && st.status & abi::PFM_CTXST_STARTED != 0 {
            self.anomaly(
                op,
                format!("{ctx}: started without an exec: status {:#x}", st.status),
            );
        }
        shared().exec_checked.fetch_add(1, Ordering::Relaxed);
        cleanup(fd);
    }
}

/// A churn child of `whole`.
fn whole_kid(kid: Kid) -> ! {
    match kid {
        Kid::Exit => {}
        Kid::Spin => spin(300),
        Kid::Thread => {
            if let Ok(h) = std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(|| spin(100))
            {
                let _ = h.join();
            }
        }
        Kid::Exec => {
            sys::execv(c"/bin/true", &[c"true"]);
            sys::exit_now(127)
        }
    }
    sys::exit_now(0)
}

/// The child of `process`: keeps `keep` short threads alive (each lives up
/// to `life_us`) and `sleepers` long ones, creating and ending threads
/// until told to be quiet ('q' on `cmd`), then joins the short ones,
/// answers 'k' on `ans` and waits to be killed. Quiet by itself after 3 s.
fn process_kid(cmd: i32, ans: i32, keep: usize, life_us: u64, sleepers: usize, seed: u64) -> ! {
    sys::die_with_parent(libc::SIGKILL);
    let mut r = crate::rng::Rng::new(seed);
    for _ in 0..sleepers {
        let _ = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(|| loop {
                sys::usleep(2000);
            });
    }
    let mut live: Vec<std::thread::JoinHandle<()>> = Vec::new();
    let start = Instant::now();
    loop {
        if let Ok(rev) = sys::poll(&[(cmd, libc::POLLIN)], 0) {
            if rev[0] & (libc::POLLIN | libc::POLLHUP) != 0 {
                break;
            }
        }
        if start.elapsed() > Duration::from_secs(3) {
            break;
        }
        live.retain(|h| !h.is_finished());
        while live.len() < keep {
            let us = r.below(life_us);
            let how = r.below(3);
            match std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || match how {
                    0 => spin(us),
                    1 => sys::usleep(us),
                    _ => {
                        spin(us / 2);
                        sys::sched_yield();
                    }
                }) {
                Ok(h) => live.push(h),
                Err(_) => break,
            }
        }
        sys::usleep(r.below(200));
    }
    for h in live {
        let _ = h.join();
    }
    sys::write_all(ans, b"k");
    loop {
        sys::usleep(100_000);
    }
}

/// The child of `exec_start`: 'f' fails an exec and answers 'a'; 'x'
/// execs /bin/true; 'e' (or the pipe's end) exits.
fn exec_kid(cmd: i32, ans: i32) -> ! {
    sys::die_with_parent(libc::SIGKILL);
    loop {
        let mut b = [0u8; 1];
        match sys::read_buf(cmd, &mut b) {
            Ok(1) => match b[0] {
                b'f' => {
                    sys::execv(c"/nonexistent/pfm-fuzz", &[c"nothing"]);
                    sys::write_all(ans, b"a");
                }
                b'x' => {
                    sys::execv(c"/bin/true", &[c"true"]);
                    sys::exit_now(127);
                }
                _ => sys::exit_now(0),
            },
            Err(libc::EINTR) => {}
            _ => sys::exit_now(0),
        }
    }
}
