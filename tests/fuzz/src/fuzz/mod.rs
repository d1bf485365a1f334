//! The fuzzer: several worker processes, each with several threads, doing
//! random operations on /dev/perfmon in the spirit of perf_fuzzer, plus the
//! process and thread churn around them (fork, exec, thread exit, signals,
//! SIGKILL of tools and targets).
//!
//! # Structure
//!
//! - The *master* (the calling process) forks a do-nothing process-group
//!   leader and `procs` *workers* into that group, watches progress, respawns
//!   workers that were killed, and at the end stops everyone, SIGKILLs the
//!   group, reaps it (it is the child subreaper, so orphans come back to it)
//!   and reports. It never touches /dev/perfmon itself.
//! - A *worker* runs `threads` *actors* (threads). An actor loops: pick an
//!   operation by weight, build its arguments, run it, check the result
//!   against the ABI's rules. Actors also spawn short-lived threads (which
//!   exit, often while monitored) and fork children (targets, tools, exec'ers
//!   and small fuzzers), and signal them.
//! - Shared memory (MAP_SHARED, created before the first fork) holds the stop
//!   flag, the operation counters, a board of live thread ids that any actor
//!   may attach to, and each actor's current operation for hang reports.
//!
//! # Determinism
//!
//! Every actor has its own xorshift generator whose seed is derived from the
//! run's seed and the actor's place (worker, generation, thread; a child or
//! short thread from its parent's generator). The same `--seed` replays the
//! same random choices per actor; the interleaving, and therefore results
//! that depend on other actors (which fds exist, which threads live), differ.
//! `--procs 1 --threads 1` runs exactly worker 0 thread 0's sequence, the
//! first step of reducing a failure; `--log FILE` writes every operation
//! (actor, number, operation, arguments, result) to FILE.
//!
//! # Bounded blocking
//!
//! Every thread has a periodic POSIX timer sending it SIGUSR1 (no-op handler,
//! no SA_RESTART): a blocking read returns EINTR and a thread blocked by a
//! notify-block overflow is released (perfmon lets a signal end the wait),
//! so no operation blocks for longer than the timer period.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::rng::{derive, Rng};
use crate::sys::{self, PAGE};

mod actor;
mod churn;
mod clone;
mod model;
mod ops;
mod probe;
mod sets;
mod shared;
mod smpl;
mod whole;

use actor::{Actor, Kind};
use shared::*;

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// The run's seed.
    pub seed: u64,
    /// Stop after this many operations (0: no limit).
    pub ops: u64,
    /// Stop after this long (None: no limit).
    pub duration: Option<Duration>,
    /// Write every operation to this file.
    pub log: Option<String>,
    /// Worker processes.
    pub procs: usize,
    /// Threads per worker.
    pub threads: usize,
    /// Run every third worker as uid/gid 1000 (permission paths).
    pub unpriv: bool,
    /// Progress lines every this many seconds (0: none).
    pub progress_secs: u64,
    /// Also write progress lines to /dev/kmsg (visible live on the console).
    pub kmsg: bool,
    /// Period of each thread's SIGUSR1 timer.
    pub timer_us: u64,
    /// Also write garbage into the sampling buffers' `head`, `written`
    /// and `lost`, which the kernel must not read back (on by default:
    /// see the README).
    pub smpl_hostile: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            seed: 1,
            ops: 100_000,
            duration: None,
            log: None,
            procs: 3,
            threads: 3,
            unpriv: true,
            progress_secs: 30,
            kmsg: false,
            timer_us: 20_000,
            smpl_hostile: true,
        }
    }
}

/// What happened.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Operations executed.
    pub ops: u64,
    /// System calls issued for them.
    pub syscalls: u64,
    /// Wall time of the run (start to everything reaped).
    pub elapsed: Duration,
    /// Workers started (respawns included).
    pub workers: u64,
    /// Children forked by actors.
    pub forks: u64,
    /// Short-lived threads started.
    pub threads: u64,
    /// execs attempted.
    pub execs: u64,
    /// Overflow setups (tiny periods, notify, notify-block).
    pub arms: u64,
    /// Probes that completed both exact checks (task-clock against the
    /// thread's own clock, messages kept across a faulting read).
    pub probes: u64,
    /// CPU 1 offline/online cycles.
    pub hotplugs: u64,
    /// CREATE_SETS calls that succeeded.
    pub set_creates: u64,
    /// GETINFO_SETS answers whose invariants were checked, and those whose
    /// running times' sum was checked exactly (all 16 sets).
    pub set_infos: u64,
    pub set_exact: u64,
    /// Whole programs: scenarios checked exactly (inheritance on the
    /// actor, LOAD_PROCESS on a churning child, start on exec) and the
    /// threads seen joining families in them.
    pub whole_checked: u64,
    pub process_checked: u64,
    pub exec_checked: u64,
    pub heirs_seen: u64,
    /// PFM_IOC_CLONE: descriptors returned, and clones compared exactly
    /// with their private template (`arm`); LOADs with PFM_LOAD_START that
    /// succeeded.
    pub clones: u64,
    pub clones_exact: u64,
    pub load_starts: u64,
    /// Sampling buffers: setups that succeeded, mappings made, entries
    /// drained and checked, drains that found a garbage `tail`.
    pub smpl_setups: u64,
    pub smpl_maps: u64,
    pub smpl_entries: u64,
    pub smpl_resyncs: u64,
    /// Of the entries, those with a call chain, and those whose walk
    /// met an unreadable frame.
    pub smpl_chained: u64,
    pub smpl_broken: u64,
    pub smpl_whole: u64,
    /// `arm`'s PMDs written with `PFM_REGFL_RANDOM`, and READ_PMDS
    /// elements returned with it, checked.
    pub random_arms: u64,
    pub random_reads: u64,
    /// Suspected kernel bugs per kind (`shared::FINDINGS`), non-zero ones.
    pub findings: Vec<(&'static str, u64)>,
    /// Anomalies dismissed: the fd was no longer a perfmon file.
    pub reused: u64,
    /// Results that break the ABI's rules.
    pub anomalies: Vec<String>,
    /// Their number (the list keeps the first ones).
    pub anomaly_count: u64,
    /// Processes that could not be reaped, with what /proc says about them.
    pub hung: Vec<String>,
    /// Operations per kind.
    pub per_op: Vec<(&'static str, u64)>,
    /// The most frequent (operation, errno) pairs.
    pub errnos: Vec<(&'static str, i32, u64)>,
}

impl Report {
    /// Operations per second.
    pub fn rate(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(0.001)
    }

    /// A multi-line summary.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "ops executed: {} in {:.1} s ({:.0} ops/s), {} syscalls",
            self.ops,
            self.elapsed.as_secs_f64(),
            self.rate(),
            self.syscalls
        );
        let _ = writeln!(
            s,
            "workers started: {}, children forked: {}, short threads: {}, execs: {}, overflow setups: {}, exact probes: {}, CPU 1 hotplug cycles: {}",
            self.workers, self.forks, self.threads, self.execs, self.arms, self.probes, self.hotplugs
        );
        let _ = writeln!(
            s,
            "event sets: {} created, {} GETINFO answers checked, {} of them summed exactly (all 16 sets)",
            self.set_creates, self.set_infos, self.set_exact
        );
        let _ = writeln!(
            s,
            "whole programs: {} inheritance scenarios, {} LOAD_PROCESS scenarios, {} start-on-exec scenarios checked; {} heir rows seen",
            self.whole_checked, self.process_checked, self.exec_checked, self.heirs_seen
        );
        let _ = writeln!(
            s,
            "clones: {} descriptors, {} compared exactly with their template; LOAD|START: {} succeeded",
            self.clones, self.clones_exact, self.load_starts
        );
        let _ = writeln!(
            s,
            "sampling: {} buffers set up, {} mappings, {} entries drained and checked ({} with a call chain, {} walks BROKEN), {} garbage tails resynced; {} whole programs loaded with one",
            self.smpl_setups,
            self.smpl_maps,
            self.smpl_entries,
            self.smpl_chained,
            self.smpl_broken,
            self.smpl_resyncs,
            self.smpl_whole
        );
        let _ = writeln!(
            s,
            "randomised periods: {} PMDs armed with PFM_REGFL_RANDOM, {} READ_PMDS elements returned with it checked",
            self.random_arms, self.random_reads
        );
        for (what, n) in &self.findings {
            let _ = writeln!(s, "suspected kernel bug, {n} times: {what}");
        }
        let _ = write!(s, "per operation:");
        for (i, (name, n)) in self.per_op.iter().enumerate() {
            if i % 6 == 0 {
                let _ = write!(s, "\n ");
            }
            let _ = write!(s, " {name}={n}");
        }
        let _ = write!(s, "\nmost frequent errnos:");
        for (i, (name, e, n)) in self.errnos.iter().take(24).enumerate() {
            if i % 4 == 0 {
                let _ = write!(s, "\n ");
            }
            let _ = write!(s, " {name}/{}={n}", perfmon::errno_name(*e));
        }
        let _ = writeln!(
            s,
            "\nanomalies: {} (dismissed because the fd had been reused: {})",
            self.anomaly_count, self.reused
        );
        for a in &self.anomalies {
            let _ = writeln!(s, "  {a}");
        }
        if !self.hung.is_empty() {
            let _ = writeln!(s, "hung processes: {}", self.hung.len());
            for h in &self.hung {
                let _ = writeln!(s, "  {h}");
            }
        }
        s
    }
}

fn actor_loop(seed: u64, name: String) {
    let mut a = Actor::new(seed, name, Kind::Worker);
    while !stopping() {
        a.step(&WEIGHTS);
    }
    a.op_reap(true);
}

/// `CAP_NET_RAW`: the capability some unprivileged workers keep.
const CAP_NET_RAW: u32 = 13;

/// A worker process: `threads` actors, then cleanup.
fn worker_main(cfg: &Config, index: usize, generation: u64, pgid: i32) -> ! {
    sys::die_with_parent(libc::SIGKILL);
    let _ = sys::setpgid(0, pgid);
    process_signals();
    if cfg.unpriv && index % 3 == 2 {
        // Unprivileged workers of three kinds, which ptrace's rule keeps
        // apart: plain uid 1000, uid 1000 holding CAP_NET_RAW (a KEEPCAPS
        // daemon), and uid 1000 in a user namespace of its own.
        let ok = match (index / 3) % 3 {
            1 => sys::become_user_keeping(1000, 1000, 1 << CAP_NET_RAW).is_ok(),
            2 => sys::become_user(1000, 1000).is_ok() && sys::enter_own_user_ns(1000).is_ok(),
            _ => sys::become_user(1000, 1000).is_ok(),
        };
        if ok {
            sys::set_dumpable();
        }
    }
    let mut handles = Vec::new();
    for t in 1..cfg.threads {
        let seed = derive(cfg.seed, &[index as u64, generation, t as u64]);
        let name = format!("w{index}g{generation}t{t}");
        let b = std::thread::Builder::new().stack_size(512 * 1024);
        if let Ok(h) = b.spawn(move || actor_loop(seed, name)) {
            handles.push(h);
        }
    }
    actor_loop(
        derive(cfg.seed, &[index as u64, generation, 0]),
        format!("w{index}g{generation}t0"),
    );
    for h in handles {
        let _ = h.join();
    }
    for fd in FDS.iter() {
        let f = fd.swap(-1, Ordering::AcqRel);
        if f >= 0 {
            let _ = sys::close(f);
        }
    }
    sys::exit_now(0)
}

fn spawn_worker(cfg: &Config, index: usize, generation: u64, pgid: i32) -> i32 {
    match sys::fork() {
        Ok(0) => worker_main(cfg, index, generation, pgid),
        Ok(pid) => {
            let _ = sys::setpgid(pid, pgid);
            shared().workers[index].store(pid as u32, Ordering::Relaxed);
            pid
        }
        Err(e) => panic!("fork of a worker failed: {}", perfmon::errno_name(e)),
    }
}

fn kmsg(line: &str) {
    if let Ok(fd) = sys::open(c"/dev/kmsg", libc::O_WRONLY | libc::O_CLOEXEC) {
        sys::write_all(fd, format!("pfm_fuzz: {line}\n").as_bytes());
        let _ = sys::close(fd);
    }
}

/// What /proc says about a process that would not die.
fn describe_stuck(pid: i32) -> String {
    let mut s = format!("pid {pid}");
    if let Some(stat) = sys::read_text(&format!("/proc/{pid}/stat")) {
        let comm_end = stat.rfind(')').unwrap_or(0);
        let _ = write!(s, " {}", &stat[..comm_end + 1]);
    }
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            let tid = t.file_name().to_string_lossy().to_string();
            let st = sys::proc_state(tid.parse().unwrap_or(0)).unwrap_or('?');
            let wchan =
                sys::read_text(&format!("/proc/{pid}/task/{tid}/wchan")).unwrap_or_default();
            let _ = write!(s, "\n    task {tid} state {st} wchan {wchan}");
            if let Some(stack) = sys::read_text(&format!("/proc/{pid}/task/{tid}/stack")) {
                for l in stack.lines().take(24) {
                    let _ = write!(s, "\n      {l}");
                }
            }
            let tidn: u32 = tid.parse().unwrap_or(0);
            for slot in shared().slots.iter() {
                if slot.tid.load(Ordering::Relaxed) == tidn {
                    let op = slot.op.load(Ordering::Relaxed) as usize;
                    let _ = write!(
                        s,
                        "\n      actor op #{} {}",
                        slot.n.load(Ordering::Relaxed),
                        OPS.get(op).map_or("?", |o| o.name())
                    );
                }
            }
        }
    }
    s
}

/// Pids of our descendants still around (by process group or parent).
fn leftovers(pgid: i32) -> Vec<i32> {
    let me = sys::getpid() as i32;
    let mut v = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Some(stat) = sys::read_text(&format!("/proc/{pid}/stat")) else {
                continue;
            };
            let Some(close) = stat.rfind(')') else {
                continue;
            };
            let f: Vec<&str> = stat[close + 1..].split_whitespace().collect();
            let ppid: i32 = f.get(1).and_then(|x| x.parse().ok()).unwrap_or(0);
            let pg: i32 = f.get(2).and_then(|x| x.parse().ok()).unwrap_or(0);
            if pid != me && (pg == pgid || ppid == me) {
                v.push(pid);
            }
        }
    }
    v
}

/// Runs the fuzzer; returns when everything it started is gone (or
/// reported as hung).
pub fn run(cfg: &Config) -> Report {
    let start = Instant::now();
    let len = std::mem::size_of::<Shared>().div_ceil(PAGE) * PAGE;
    SHARED.store(sys::shared_mapping(len), Ordering::Relaxed);
    TIMER_US.store(cfg.timer_us, Ordering::Relaxed);
    smpl::HOSTILE.store(cfg.smpl_hostile, Ordering::Relaxed);
    let s = shared();
    s.goal.store(
        if cfg.ops == 0 { u64::MAX } else { cfg.ops },
        Ordering::Relaxed,
    );
    if let Some(path) = &cfg.log {
        let c = std::ffi::CString::new(path.as_str()).unwrap();
        match sys::open(
            &c,
            libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_TRUNC,
        ) {
            Ok(fd) => LOG_FD.store(fd, Ordering::Relaxed),
            Err(e) => eprintln!(
                "pfm_fuzz: cannot open log {path}: {}",
                perfmon::errno_name(e)
            ),
        }
    }
    s.rdev
        .store(sys::stat_rdev(sys::DEV).unwrap_or(0), Ordering::Relaxed);
    // Asked once, before any thread exists (see sys::online_cpus).
    let _ = sys::online_cpus();
    // Whether unprivileged workers may clone (the workers inherit it).
    let paranoid = sys::read_text("/proc/sys/kernel/perf_event_paranoid")
        .and_then(|t| t.trim().parse::<i32>().ok())
        .unwrap_or(-1);
    PARANOID.store(paranoid, Ordering::Relaxed);
    // The oracle's model of the PMU, before any worker is forked.
    let _ = model::load();
    // A panic of the fuzzer's own code (in an actor's thread, a worker, a
    // scenario's child) is a bug of the oracle, but it also cuts short the
    // operations it was judging, silently: an anomaly, so it is seen. The
    // hook is inherited by every process forked from here.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        record_anomaly(&format!("the fuzzer itself panicked: {info}"));
        default_hook(info);
    }));
    sys::set_child_subreaper();
    process_signals();
    // The process group leader: does nothing, wakes up often (it is also
    // a thread anyone may attach to, and cleanup runs when it wakes).
    let pgid = match sys::fork() {
        Ok(0) => {
            sys::die_with_parent(libc::SIGKILL);
            let _ = sys::setpgid(0, 0);
            let mut r = Rng::new(cfg.seed);
            loop {
                publish_tid(&mut r);
                sys::usleep(50_000);
            }
        }
        Ok(pid) => pid,
        Err(e) => panic!("fork failed: {}", perfmon::errno_name(e)),
    };
    let _ = sys::setpgid(pgid, pgid);
    let procs = cfg.procs.clamp(1, MAX_WORKERS);
    let mut gens = vec![0u64; procs];
    let mut pids: Vec<i32> = (0..procs).map(|i| spawn_worker(cfg, i, 0, pgid)).collect();
    let mut workers = procs as u64;
    let deadline = cfg.duration.map(|d| start + d);
    let mut last_cont = Instant::now();
    let mut last_progress = Instant::now();
    let mut last_ops = 0u64;
    let mut last_change = Instant::now();
    let mut stall_reported = false;
    let mut cpu1_off_seen = false;
    loop {
        // Reap whatever died: workers are respawned, others just reaped.
        while let Ok(Some((pid, _status))) = sys::waitpid(-1, true) {
            if let Some(i) = pids.iter().position(|&p| p == pid) {
                s.workers[i].store(0, Ordering::Relaxed);
                if !stopping() {
                    gens[i] += 1;
                    pids[i] = spawn_worker(cfg, i, gens[i], pgid);
                    workers += 1;
                } else {
                    pids[i] = 0;
                }
            }
        }
        let ops = s.ops.load(Ordering::Relaxed);
        if ops != last_ops {
            last_ops = ops;
            last_change = Instant::now();
        } else if last_change.elapsed() > Duration::from_secs(60) && !stall_reported {
            stall_reported = true;
            record_anomaly(&format!("no operation completed for 60 s (at {ops} ops)"));
        }
        if stopping() || deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        if last_cont.elapsed() >= Duration::from_secs(1) {
            let _ = sys::kill(-pgid, libc::SIGCONT);
            last_cont = Instant::now();
            // A hotplug actor killed half-way leaves CPU 1 offline.
            if cpu1_offline() {
                if cpu1_off_seen {
                    let _ = sys::write_file(churn::CPU1_ONLINE, "1");
                    s.hotplug.store(0, Ordering::Release);
                }
                cpu1_off_seen = true;
            } else {
                cpu1_off_seen = false;
            }
        }
        if cfg.progress_secs > 0
            && last_progress.elapsed() >= Duration::from_secs(cfg.progress_secs)
        {
            last_progress = Instant::now();
            let c = crate::guest::Counters::read();
            let line = format!(
                "t={:.0}s ops={} ({:.0}/s) forks={} threads={} workers={} anomalies={} {}",
                start.elapsed().as_secs_f64(),
                ops,
                ops as f64 / start.elapsed().as_secs_f64(),
                s.forks.load(Ordering::Relaxed),
                s.threads.load(Ordering::Relaxed),
                workers,
                s.anomalies.load(Ordering::Relaxed),
                c
            );
            println!("# {line}");
            let _ = std::io::Write::flush(&mut std::io::stdout());
            if cfg.kmsg {
                kmsg(&line);
            }
        }
        sys::usleep(20_000);
    }
    // Stop: let the workers finish their operation and clean up.
    s.stop.store(1, Ordering::Relaxed);
    let _ = sys::kill(-pgid, libc::SIGCONT);
    let graceful = Instant::now() + Duration::from_secs(15);
    while pids.iter().any(|&p| p != 0) && Instant::now() < graceful {
        match sys::waitpid(-1, true) {
            Ok(Some((pid, _))) => {
                if let Some(i) = pids.iter().position(|&p| p == pid) {
                    pids[i] = 0;
                }
            }
            _ => sys::usleep(20_000),
        }
    }
    for _ in 0..50 {
        if !cpu1_offline() || sys::write_file(churn::CPU1_ONLINE, "1").is_ok() {
            break;
        }
        sys::usleep(20_000);
    }
    // Then everything else, by force.
    let _ = sys::kill(-pgid, libc::SIGKILL);
    for pid in leftovers(pgid) {
        let _ = sys::kill(pid, libc::SIGKILL);
    }
    let hard = Instant::now() + Duration::from_secs(20);
    let mut hung = Vec::new();
    loop {
        while let Ok(Some(_)) = sys::waitpid(-1, true) {}
        let left = leftovers(pgid);
        if left.is_empty() {
            break;
        }
        if Instant::now() >= hard {
            for pid in left {
                hung.push(describe_stuck(pid));
            }
            break;
        }
        for &pid in &left {
            let _ = sys::kill(pid, libc::SIGKILL);
        }
        sys::usleep(50_000);
    }
    let mut per_op: Vec<(&'static str, u64)> = OPS
        .iter()
        .map(|o| (o.name(), s.per_op[*o as usize].load(Ordering::Relaxed)))
        .collect();
    per_op.retain(|(_, n)| *n > 0);
    let mut errnos = Vec::new();
    for o in OPS {
        for e in 1..MAX_ERRNO {
            let n = s.errnos[o as usize * MAX_ERRNO + e].load(Ordering::Relaxed);
            if n > 0 {
                errnos.push((o.name(), e as i32, n));
            }
        }
    }
    errnos.sort_by_key(|e| std::cmp::Reverse(e.2));
    let fd = LOG_FD.swap(-1, Ordering::Relaxed);
    if fd >= 0 {
        let _ = sys::close(fd);
    }
    Report {
        ops: s.ops.load(Ordering::Relaxed),
        syscalls: s.syscalls.load(Ordering::Relaxed),
        elapsed: start.elapsed(),
        workers,
        forks: s.forks.load(Ordering::Relaxed),
        threads: s.threads.load(Ordering::Relaxed),
        execs: s.execs.load(Ordering::Relaxed),
        arms: s.arms.load(Ordering::Relaxed),
        probes: s.probes.load(Ordering::Relaxed),
        hotplugs: s.hotplugs.load(Ordering::Relaxed),
        set_creates: s.set_creates.load(Ordering::Relaxed),
        set_infos: s.set_infos.load(Ordering::Relaxed),
        set_exact: s.set_exact.load(Ordering::Relaxed),
        whole_checked: s.whole_checked.load(Ordering::Relaxed),
        process_checked: s.process_checked.load(Ordering::Relaxed),
        exec_checked: s.exec_checked.load(Ordering::Relaxed),
        heirs_seen: s.heirs_seen.load(Ordering::Relaxed),
        clones: s.clones.load(Ordering::Relaxed),
        clones_exact: s.clones_exact.load(Ordering::Relaxed),
        load_starts: s.load_starts.load(Ordering::Relaxed),
        smpl_setups: s.smpl_setups.load(Ordering::Relaxed),
        smpl_maps: s.smpl_maps.load(Ordering::Relaxed),
        smpl_entries: s.smpl_entries.load(Ordering::Relaxed),
        smpl_chained: s.smpl_chained.load(Ordering::Relaxed),
        smpl_broken: s.smpl_broken.load(Ordering::Relaxed),
        smpl_whole: s.smpl_whole.load(Ordering::Relaxed),
        smpl_resyncs: s.smpl_resyncs.load(Ordering::Relaxed),
        random_arms: s.random_arms.load(Ordering::Relaxed),
        random_reads: s.random_reads.load(Ordering::Relaxed),
        findings: FINDINGS
            .iter()
            .zip(s.findings.iter())
            .map(|(w, n)| (*w, n.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .collect(),
        reused: s.reused.load(Ordering::Relaxed),
        anomalies: anomaly_texts(),
        anomaly_count: s.anomalies.load(Ordering::Relaxed),
        hung,
        per_op,
        errnos,
    }
}

/// Whether CPU 1 exists and is offline.
fn cpu1_offline() -> bool {
    sys::read_text("/sys/devices/system/cpu/cpu1/online").is_some_and(|s| s.trim() == "0")
}
