//! The probe: exact oracles amid the fuzzing (soft model only).
//!
//! On a private context (not in the fd pool, so no other actor touches it)
//! the actor monitors itself while everything else goes on around it (CPU
//! hotplug, SIGSTOP of its worker, affinity changes, other contexts):
//!
//! 1. task-clock over a window of naps, yields and a move to another CPU
//!    lies within what the thread's own `CLOCK_THREAD_CPUTIME_ID` says
//!    over the same window (read before and after each READ_PMDS, so the
//!    interval is exact; see tests/guest/src/edges.rs);
//! 2. period-1 notifying overflows of context-switches fill the message
//!    queue (the context masks when it is full: 8 messages), a `read(2)`
//!    into a bad buffer fails with EFAULT, and all 8 messages are still
//!    there to read afterwards.

use std::sync::atomic::Ordering;

use super::actor::*;
use super::model::model;
use super::shared::*;
use crate::sys::{self, abi};

/// Where the probe's register array and header go in the arena.
const REGS_OFF: usize = 0;
const HDR_OFF: usize = 2048;

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is valid for writes.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Actor {
    pub(super) fn op_probe(&mut self) {
        if !model().soft {
            return;
        }
        let fd = match sys::open(sys::DEV, libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC) {
            Ok(fd) => fd,
            Err(_) => return,
        };
        self.calls += 1;
        self.cur_fd = fd;
        self.probe_on(fd);
        let _ = sys::close(fd);
        self.calls += 1;
    }

    /// A register array call on the private fd; the elements as returned.
    fn probe_regs<T: Copy + Default>(&mut self, fd: i32, cmd: u32, elems: &[T]) -> Option<Vec<T>> {
        let size = std::mem::size_of::<T>();
        let base = self.arena.at(REGS_OFF);
        for (i, e) in elems.iter().enumerate() {
            self.arena.put(base + i * size, *e);
        }
        let hdr = self.arena.at(HDR_OFF);
        self.arena.put(
            hdr,
            abi::PfmRegsArg {
                regs: base as u64,
                count: elems.len() as u32,
                ..Default::default()
            },
        );
        let r = sys::ioctl(fd, cmd, hdr);
        let r = self.res(Op::Probe, r);
        r.ok()?;
        Some(
            (0..elems.len())
                .map(|i| self.arena.get(base + i * size))
                .collect(),
        )
    }

    fn probe_plain(&mut self, fd: i32, cmd: u32) -> bool {
        let r = sys::ioctl(fd, cmd, 0);
        self.res(Op::Probe, r).is_ok()
    }

    fn probe_state(&mut self, fd: i32) -> Option<u32> {
        let a = self.arena.at(HDR_OFF);
        let r = sys::ioctl(fd, abi::PFM_IOC_GET_STATE, a);
        self.res(Op::Probe, r).ok()?;
        Some(self.arena.get::<abi::PfmCtxInfo>(a).state)
    }

    /// task-clock (PMD0) between two readings of the thread's own clock.
    fn probe_edge(&mut self, fd: i32) -> Option<(u64, u64, u64)> {
        let t = thread_cpu_ns();
        let pmd = abi::PfmPmd {
            reg_num: 0,
            ..Default::default()
        };
        let v = self.probe_regs(fd, abi::PFM_IOC_READ_PMDS, &[pmd])?[0].reg_value;
        let u = thread_cpu_ns();
        Some((t, v, u))
    }

    fn probe_on(&mut self, fd: i32) {
        let pmcs = [
            abi::PfmPmc {
                reg_num: 0,
                reg_value: abi::PFM_SOFT_EV_TASK_CLOCK,
                ..Default::default()
            },
            abi::PfmPmc {
                reg_num: 1,
                reg_value: abi::PFM_SOFT_EV_CONTEXT_SWITCHES,
                ..Default::default()
            },
        ];
        let plain = [
            abi::PfmPmd {
                reg_num: 0,
                ..Default::default()
            },
            abi::PfmPmd {
                reg_num: 1,
                ..Default::default()
            },
        ];
        if self
            .probe_regs(fd, abi::PFM_IOC_WRITE_PMCS, &pmcs)
            .is_none()
            || self
                .probe_regs(fd, abi::PFM_IOC_WRITE_PMDS, &plain)
                .is_none()
        {
            return;
        }
        // LOAD and START in one call half the time (PFM_LOAD_START): the
        // windows below are exact either way.
        let load_start = self.rng.chance(1, 2);
        let load = self.arena.at(HDR_OFF);
        self.arena.put(
            load,
            abi::PfmLoad {
                flags: if load_start { abi::PFM_LOAD_START } else { 0 },
                ..Default::default()
            },
        );
        let r = sys::ioctl(fd, abi::PFM_IOC_LOAD, load);
        // EBUSY: this thread is monitored by a pool context already.
        if self.res(Op::Probe, r).is_err()
            || (!load_start && !self.probe_plain(fd, abi::PFM_IOC_START))
        {
            return;
        }
        if load_start {
            shared().load_starts.fetch_add(1, Ordering::Relaxed);
        }
        self.note(format_args!(" fd={fd} (private)"));

        // 1. task-clock against the thread's own clock.
        let Some(first) = self.probe_edge(fd) else {
            return;
        };
        let cpus = sys::online_cpus().max(1);
        for i in 0..self.rng.range(2, 6) {
            sys::usleep(self.rng.range(200, 1500));
            if self.rng.chance(1, 2) {
                sys::sched_yield();
            }
            if cpus > 1 && self.rng.chance(1, 3) {
                let _ = sys::set_affinity(0, 1 << ((i as usize) % cpus.min(64)));
            }
        }
        let _ = sys::set_affinity(0, u64::MAX);
        let Some(last) = self.probe_edge(fd) else {
            return;
        };
        let clock = last.1.wrapping_sub(first.1);
        let (lo, hi) = (
            last.0.saturating_sub(first.2),
            last.2.saturating_sub(first.0),
        );
        if clock < lo || clock > hi {
            self.anomaly(
                Op::Probe,
                format!("task-clock {clock} ns outside the thread's own [{lo}, {hi}]"),
            );
            return;
        }

        // 2. A full queue survives a faulting read.
        let notify = abi::PfmPmd {
            reg_num: 1,
            reg_flags: abi::PFM_REGFL_OVFL_NOTIFY,
            reg_value: u64::MAX,
            reg_short_reset: u64::MAX,
            reg_long_reset: u64::MAX,
            ..Default::default()
        };
        if self
            .probe_regs(fd, abi::PFM_IOC_WRITE_PMDS, &[notify])
            .is_none()
        {
            return;
        }
        let mut masked = false;
        for _ in 0..50 {
            sys::usleep(500);
            match self.probe_state(fd) {
                Some(abi::PFM_STATE_MASKED) => {
                    masked = true;
                    break;
                }
                Some(_) => {}
                None => return,
            }
        }
        if !masked {
            // A worker stopped for long: nothing to conclude.
            return;
        }
        let bad = match self.rng.below(4) {
            0 => 0,
            1 => self.arena.at(sys::ARENA_NONE),
            2 => self.arena.at(sys::ARENA_RO),
            _ => self.arena.at(sys::ARENA_HOLE),
        };
        let r = sys::read_raw(fd, bad, 64 * self.rng.range(1, 9) as usize);
        let r = self.res(Op::Probe, r);
        if r != Err(libc::EFAULT) {
            self.anomaly(
                Op::Probe,
                format!("read() into {bad:#x}: {r:?}, expected EFAULT"),
            );
            return;
        }
        let buf = self.arena.at(REGS_OFF);
        let mut got = 0;
        loop {
            let r = sys::read_raw(fd, buf, 64);
            match self.res(Op::Probe, r) {
                Ok(64) => got += 1,
                _ => break,
            }
        }
        if got != 8 {
            self.anomaly(
                Op::Probe,
                format!("{got} messages after a faulting read, 8 were queued"),
            );
            return;
        }
        shared().probes.fetch_add(1, Ordering::Relaxed);
    }
}
