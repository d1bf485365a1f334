//! Thread and process churn: the operations that spawn short-lived
//! threads, fork children, signal them and reap them, the scheduler
//! operations, and what the threads and children run.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::actor::{Actor, Kind};
use super::shared::*;
use crate::sys::{self, abi};

pub(super) fn short_thread(seed: u64, name: String, ops: u64) {
    let mut a = Actor::new(seed, name, Kind::Short);
    let w = restricted_weights();
    // Often monitor itself first, so that the thread exits while monitored.
    if a.rng.chance(1, 2) {
        a.begin(Op::Arm);
        a.op_arm();
        a.end();
    }
    for _ in 0..ops {
        if stopping() {
            break;
        }
        a.step(&w);
    }
    a.op_reap(true);
    SHORT_LIVE.fetch_sub(1, Ordering::Relaxed);
    // Exit with whatever is attached, open or blocked: that is the point.
}

/// The children an actor forks. Mode 0: a target that sleeps, yields and
/// spins for a while; 1: a tool that arms a context on its parent's thread
/// or anyone's, does some operations and dies (exit or SIGKILL by itself)
/// with its fds open; 2: exec of /bin/true or a short sleep, often while
/// monitoring itself; 3: a small fuzzer.
pub(super) fn child_main(seed: u64, name: String, mode: u32, parent_tid: u32) -> ! {
    sys::die_with_parent(libc::SIGKILL);
    SHORT_LIVE.store(0, Ordering::Relaxed);
    for t in PROC_TIDS.iter() {
        t.store(0, Ordering::Relaxed);
    }
    let mut a = Actor::new(seed, name, Kind::Child);
    let w = restricted_weights();
    let code = match mode {
        0 => {
            let n = a.rng.range(20, 400);
            for i in 0..n {
                if stopping() {
                    break;
                }
                match i % 4 {
                    0 => sys::usleep(1000),
                    1 => sys::sched_yield(),
                    2 => {
                        let t = Instant::now();
                        while t.elapsed() < Duration::from_micros(300) {
                            std::hint::spin_loop();
                        }
                    }
                    _ => sys::usleep(a.rng.below(3000)),
                }
            }
            0
        }
        1 => {
            PROC_TIDS[0].store(parent_tid, Ordering::Relaxed);
            a.begin(Op::Arm);
            a.op_arm();
            a.end();
            let n = a.rng.range(5, 60);
            for _ in 0..n {
                if stopping() {
                    break;
                }
                a.step(&w);
            }
            if a.rng.chance(1, 3) {
                let _ = sys::kill(sys::getpid() as i32, libc::SIGKILL);
            }
            0
        }
        2 => {
            shared().execs.fetch_add(1, Ordering::Relaxed);
            if a.rng.chance(3, 5) {
                a.begin(Op::Arm);
                a.op_arm();
                a.end();
            }

            if a.rng.chance(1, 2) {
                sys::execv(c"/bin/true", &[c"true"])
            } else {
                sys::execv(c"/bin/sleep", &[c"sleep", c"0.02"])
            }
        }
        4 => {
            // exec from a non-leader thread of a monitored multi-threaded
            // process: de_thread() kills the other threads (monitored ones
            // included) and the exec'ing thread takes over the leader's pid.
            shared().execs.fetch_add(1, Ordering::Relaxed);
            let leader = sys::gettid();
            let seed1 = a.rng.next_u64();
            let remote = a.rng.chance(1, 2);
            let _ = std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn(move || {
                    let mut b = Actor::new(seed1, format!("x{leader}"), Kind::Child);
                    b.begin(Op::Arm);
                    b.arm(Some(if remote { leader } else { 0 }));
                    b.end();
                    while !stopping() {
                        b.step(&w);
                    }
                });
            let delay = a.rng.below(3000);
            let _ = std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    sys::usleep(delay);
                    let e = if delay % 2 == 0 {
                        sys::execv(c"/bin/true", &[c"true"])
                    } else {
                        sys::execv(c"/bin/sleep", &[c"sleep", c"0.01"])
                    };
                    sys::exit_now(e)
                });
            if !remote {
                a.begin(Op::Arm);
                a.arm(Some(0));
                a.end();
            }
            while !stopping() {
                a.step(&w);
            }
            0
        }
        _ => {
            let n = a.rng.range(10, 150);
            for _ in 0..n {
                if stopping() {
                    break;
                }
                a.step(&w);
            }
            0
        }
    };
    sys::exit_now(code)
}

impl Actor {
    pub(super) fn op_sched(&mut self) {
        let which = self.rng.below(10);
        self.note(format_args!(" kind={which}"));
        match which {
            0..=3 => sys::sched_yield(),
            4..=6 => sys::usleep(self.rng.below(1500)),
            7 | 8 => {
                let n = sys::online_cpus().min(63);
                let mask = if n > 1 {
                    self.rng.range(1, (1u64 << n) - 1)
                } else {
                    1
                };
                let r = sys::set_affinity(0, mask);
                self.res(Op::Sched, r).ok();
            }
            _ => {
                // Spin a little: the task clock runs, the tick may preempt.
                let t = Instant::now();
                while t.elapsed() < Duration::from_micros(200) {
                    std::hint::spin_loop();
                }
            }
        }
    }

    pub(super) fn op_thread(&mut self) {
        if self.kind != Kind::Worker || SHORT_LIVE.load(Ordering::Relaxed) >= 3 {
            return;
        }
        let seed = self.rng.next_u64();
        let name = format!("{}s{}", self.name, self.n);
        let ops = self.rng.range(5, 80);
        self.note(format_args!(" seed={seed:#x} ops={ops}"));
        SHORT_LIVE.fetch_add(1, Ordering::Relaxed);
        shared().threads.fetch_add(1, Ordering::Relaxed);
        let b = std::thread::Builder::new().stack_size(256 * 1024);
        match b.spawn(move || short_thread(seed, name, ops)) {
            Ok(h) => self.shorts.push(h),
            Err(_) => {
                SHORT_LIVE.fetch_sub(1, Ordering::Relaxed);
            }
        }
        self.calls += 1;
    }

    pub(super) fn op_fork(&mut self) {
        if self.kind == Kind::Child || self.children.len() >= 3 {
            return;
        }
        let seed = self.rng.next_u64();
        let mode = self.rng.weighted(&[25, 25, 20, 30, 15]);
        let parent_tid = sys::gettid();
        let name = format!("{}c{}", self.name, self.n);
        self.note(format_args!(" mode={mode} seed={seed:#x}"));
        shared().forks.fetch_add(1, Ordering::Relaxed);
        let r = sys::fork().map(|p| p as i64);
        match self.res(Op::Fork, r) {
            Ok(0) => child_main(seed, name, mode as u32, parent_tid),
            Ok(pid) => {
                self.children.push(pid as i32);
                // Attach to it at once sometimes: races with its start and exec.
                if self.rng.chance(1, 3) {
                    let fd = match sys::open_pfm() {
                        Ok(fd) => fd,
                        Err(_) => return,
                    };
                    // LOAD and START in one call half the time
                    // (PFM_LOAD_START).
                    let load_start = self.rng.chance(1, 2);
                    let hdr = self.arena.at(0);
                    self.arena.put(
                        hdr,
                        abi::PfmLoad {
                            tid: pid as u32,
                            flags: if load_start { abi::PFM_LOAD_START } else { 0 },
                            ..Default::default()
                        },
                    );
                    let r = sys::ioctl(fd, abi::PFM_IOC_LOAD, hdr);
                    let r = self.res(Op::Fork, r);
                    // EINTR: a signal while the child's exec holds it.
                    let mut allowed = vec![
                        libc::ESRCH,
                        libc::EBUSY,
                        libc::EACCES,
                        libc::EAGAIN,
                        libc::EDQUOT,
                        libc::EINTR,
                    ];
                    if load_start {
                        // Its START: the child exited right after LOAD.
                        allowed.push(libc::EBADFD);
                    } else {
                        let _ = sys::ioctl(fd, abi::PFM_IOC_START, 0);
                        self.calls += 1;
                    }
                    self.allow(Op::Fork, r, &allowed);
                    self.calls += 1;
                    self.store_fd(fd);
                }
            }
            Err(_) => {}
        }
    }

    pub(super) fn op_signal(&mut self) {
        if self.rng.chance(1, 4) {
            // Release or disturb a sibling thread (a blocked one included).
            let tid = PROC_TIDS[self.rng.below(16) as usize].load(Ordering::Relaxed);
            if tid != 0 {
                self.note(format_args!(" tgkill tid={tid}"));
                let r = sys::tgkill(sys::getpid(), tid, libc::SIGUSR1);
                self.res(Op::Signal, r).ok();
            }
            return;
        }
        if self.children.is_empty() {
            return;
        }
        let pid = self.rng.pick(&self.children);
        let sig = self.rng.pick(&[
            libc::SIGKILL,
            libc::SIGKILL,
            libc::SIGSTOP,
            libc::SIGCONT,
            libc::SIGCONT,
            libc::SIGUSR1,
            libc::SIGTERM,
        ]);
        self.note(format_args!(" pid={pid} sig={sig}"));
        let r = sys::kill(pid, sig);
        self.res(Op::Signal, r).ok();
    }

    /// SIGKILLs or SIGSTOPs a whole other worker (the master respawns it
    /// and SIGCONTs everyone every second).
    pub(super) fn op_worker(&mut self) {
        let i = self.rng.below(MAX_WORKERS as u64) as usize;
        let pid = shared().workers[i].load(Ordering::Relaxed);
        if pid == 0 || pid == sys::getpid() {
            return;
        }
        let sig = if self.rng.chance(1, 2) {
            libc::SIGKILL
        } else {
            libc::SIGSTOP
        };
        self.note(format_args!(" pid={pid} sig={sig}"));
        let r = sys::kill(pid as i32, sig);
        self.res(Op::Worker, r).ok();
    }

    /// Reaps exited children and joins finished short threads; with `all`,
    /// kills and reaps every child and joins every thread.
    pub(super) fn op_reap(&mut self, all: bool) {
        if all {
            for &pid in &self.children {
                let _ = sys::kill(pid, libc::SIGKILL);
                let _ = sys::kill(pid, libc::SIGCONT);
            }
        }
        let mut kept = Vec::new();
        for &pid in &self.children {
            match sys::waitpid(pid, !all) {
                Ok(Some(_)) | Err(_) => {}
                Ok(None) => kept.push(pid),
            }
        }
        self.calls += self.children.len() as u64;
        self.children = kept;
        let mut i = 0;
        while i < self.shorts.len() {
            if all || self.shorts[i].is_finished() {
                let h = self.shorts.swap_remove(i);
                let _ = h.join();
            } else {
                i += 1;
            }
        }
    }

    /// Takes CPU 1 offline and back (root workers, one actor at a time):
    /// the module's per-CPU vectors are torn down and set up again under
    /// load, with overflows and monitored threads on that CPU.
    pub(super) fn op_hotplug(&mut self) {
        if self.uid != 0 || self.kind != Kind::Worker {
            return;
        }
        if shared()
            .hotplug
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let off_us = self.rng.below(20_000);
        self.note(format_args!(" cpu1 off for {off_us} us"));
        let r = sys::write_file(CPU1_ONLINE, "0");
        let r = self.res(Op::Hotplug, r);
        if r.is_ok() {
            sys::usleep(off_us);
            for _ in 0..50 {
                let r = sys::write_file(CPU1_ONLINE, "1");
                self.calls += 1;
                if r.is_ok() {
                    break;
                }
                sys::usleep(10_000);
            }
            shared().hotplugs.fetch_add(1, Ordering::Relaxed);
        }
        shared().hotplug.store(0, Ordering::Release);
    }
}

/// CPU 1's hotplug switch.
pub(super) const CPU1_ONLINE: &std::ffi::CStr = c"/sys/devices/system/cpu/cpu1/online";
