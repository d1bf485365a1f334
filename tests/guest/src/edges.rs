//! The monitored thread as its own oracle: it reads its CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`) at the edges of every window a tool measures,
//! so the tool's counts can be checked against numbers the module cannot
//! influence.
//!
//! A window edge, seen from the target: it reads its clock (`t`), tells the
//! tool, blocks until the tool says go, reads its clock again (`u`) and
//! tells the tool. The tool reads its counters while the target is blocked,
//! so the target's runtime at that read lies in `[t, u]`; over any number
//! of windows, task-clock from edge 0 to edge i must lie in
//! `[t_i - u_0, u_i - t_0]`. No tolerance is involved: a lost or doubled
//! time slice falls outside (the interval is the CPU time of one write and
//! one read system call wide).
//!
//! A self-monitoring thread is its own tool: `t` before its read of the
//! counters, `u` after.
//!
//! The workloads are the ones where counting is hardest: sleeping and
//! waking, ping-pong through a pipe with a partner on the same CPU, and
//! moving between CPUs. A spectator thread on another CPU keeps reading the
//! target's CPU clock meanwhile, as `top` or `ps` would: every such read
//! makes the scheduler account the target's running time at that instant
//! (`task_sched_runtime`), also in the middle of its context switches.

use std::fs::File;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::child::{proc_state, CHILD_FLAG};
use crate::{perf_group, raw, soft_context, work, ResultExt};

/// The workload of the target between two edges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// Four rounds of a 1 ms nanosleep and a 100 us spin.
    Sleep,
    /// Twenty exchanges through a pipe with a partner thread; the target
    /// and its partner share CPU 0.
    PingPong,
    /// Two 1 ms nanosleeps, a sched_yield and a 100 us spin, then a move
    /// to the other CPU.
    Migrate,
}

impl Workload {
    /// Its name on a child's command line.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Sleep => "sleep",
            Workload::PingPong => "pingpong",
            Workload::Migrate => "migrate",
        }
    }

    /// The workload named `s`.
    pub fn from_name(s: &str) -> Option<Self> {
        [Workload::Sleep, Workload::PingPong, Workload::Migrate]
            .into_iter()
            .find(|w| w.name() == s)
    }
}

/// The calling thread's CPU time in ns (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// The calling thread's context switches so far, voluntary and not
/// (`getrusage(RUSAGE_THREAD)`: the scheduler's own count, which moves at
/// every switch-out, as perf's context-switches and the module's do).
pub fn thread_switches() -> u64 {
    // SAFETY: A zeroed rusage is valid; getrusage writes within it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is valid for writes.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    (ru.ru_nvcsw + ru.ru_nivcsw) as u64
}

/// The calling thread's voluntary context switches so far (`ru_nvcsw`
/// of `getrusage(RUSAGE_THREAD)`): its blocking system calls that did
/// switch (a nap whose timer expired before `schedule()` did not).
pub fn thread_voluntary_switches() -> u64 {
    // SAFETY: A zeroed rusage is valid; getrusage writes within it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is valid for writes.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    ru.ru_nvcsw as u64
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is valid for writes.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The CPU-time clock of thread `tid` of this process (glibc's
/// `pthread_getcpuclockid` encoding: `MAKE_THREAD_CPUCLOCK(tid, SCHED)`).
fn thread_clock_id(tid: u32) -> libc::clockid_t {
    ((!(tid as i32)) << 3) | 4 | 2
}

/// The target's helpers: the spectator (and the ping-pong partner), stopped
/// and joined on drop.
struct Helpers {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// The target's end of the ping-pong pipes: (to partner, from partner).
    pingpong: Option<(File, File)>,
}

impl Helpers {
    fn start(target_tid: u32, workload: Workload) -> Result<Self, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let two_cpus = perfmon::process::online_cpus() >= 2;
        let mut threads = Vec::new();
        let s = stop.clone();
        threads.push(std::thread::spawn(move || {
            if two_cpus {
                let _ = perfmon::process::set_affinity(0, &[1]);
            }
            let clock = thread_clock_id(target_tid);
            while !s.load(Ordering::Relaxed) {
                let _ = clock_ns(clock);
            }
        }));
        let mut pingpong = None;
        if workload == Workload::PingPong {
            let (to_partner_r, to_partner_w) = raw::pipe().map_err(|e| format!("pipe: {e}"))?;
            let (from_partner_r, from_partner_w) = raw::pipe().map_err(|e| format!("pipe: {e}"))?;
            let s = stop.clone();
            threads.push(std::thread::spawn(move || {
                let _ = perfmon::process::set_affinity(0, &[0]);
                let (mut rx, mut tx) = (to_partner_r, from_partner_w);
                let mut b = [0u8; 1];
                while !s.load(Ordering::Relaxed) {
                    if rx.read(&mut b).unwrap_or(0) == 0 || tx.write_all(&b).is_err() {
                        break;
                    }
                }
            }));
            pingpong = Some((to_partner_w, from_partner_r));
        }
        Ok(Self {
            stop,
            threads,
            pingpong,
        })
    }

    fn run(&mut self, workload: Workload, round: usize) {
        match workload {
            Workload::Sleep => {
                for _ in 0..4 {
                    std::thread::sleep(Duration::from_millis(1));
                    work::spin(Duration::from_micros(100));
                }
            }
            Workload::PingPong => {
                if let Some((tx, rx)) = &mut self.pingpong {
                    let mut b = [0u8; 1];
                    for _ in 0..20 {
                        if tx.write_all(&b).is_err() || rx.read(&mut b).unwrap_or(0) == 0 {
                            break;
                        }
                    }
                }
            }
            Workload::Migrate => {
                std::thread::sleep(Duration::from_millis(1));
                raw::sched_yield();
                std::thread::sleep(Duration::from_millis(1));
                work::spin(Duration::from_micros(100));
                if perfmon::process::online_cpus() >= 2 {
                    let _ = perfmon::process::set_affinity(0, &[round % 2]);
                }
            }
        }
    }
}

impl Drop for Helpers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Closing our ends releases a partner blocked in read.
        self.pingpong = None;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// The target's side of `rounds` windows: at each edge writes `t` (8
/// bytes, native endian) to `report`, blocks reading one byte from `go`,
/// writes `u`; between edges runs `workload`. Pinned to CPU 0 (the
/// ping-pong partner's CPU) except while `Migrate` moves it.
pub fn run_target(mut report: File, mut go: File, workload: Workload, rounds: usize) -> i32 {
    let tid = perfmon::process::gettid();
    if workload != Workload::Migrate {
        let _ = perfmon::process::set_affinity(0, &[0]);
    }
    let mut helpers = match Helpers::start(tid, workload) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("edges target: {e}");
            return 3;
        }
    };
    let mut b = [0u8; 1];
    for round in 0..=rounds {
        if round > 0 {
            helpers.run(workload, round);
        }
        let t = thread_cpu_ns();
        if report.write_all(&t.to_ne_bytes()).is_err() {
            return 4;
        }
        if go.read(&mut b).unwrap_or(0) == 0 {
            return 5;
        }
        let u = thread_cpu_ns();
        if report.write_all(&u.to_ne_bytes()).is_err() {
            return 6;
        }
    }
    // Live until the tool has UNLOADed and closed the go pipe: an exit
    // before that would end the monitoring first (UNLOAD: EBADFD).
    while go.read(&mut b).unwrap_or(0) != 0 {}
    0
}

/// A self-monitoring thread's `rounds` windows: at each edge `read` takes
/// the counters (perfmon's, perf's) between two readings of the thread's
/// own clock; between edges runs `workload`, with the same helpers as
/// [`run_target`].
pub fn run_self(
    workload: Workload,
    rounds: usize,
    mut read: impl FnMut() -> Result<([u64; 3], [u64; 3]), String>,
) -> Result<Vec<Edge>, String> {
    let mut helpers = Helpers::start(perfmon::process::gettid(), workload)?;
    let mut edges = Vec::with_capacity(rounds + 1);
    for round in 0..=rounds {
        if round > 0 {
            helpers.run(workload, round);
        }
        let t = thread_cpu_ns();
        let (pfm, perf) = read()?;
        let u = thread_cpu_ns();
        edges.push(Edge { t, u, pfm, perf });
    }
    drop(helpers);
    if perfmon::process::online_cpus() >= 2 {
        let all: Vec<usize> = (0..perfmon::process::online_cpus()).collect();
        let _ = perfmon::process::set_affinity(0, &all);
    }
    Ok(edges)
}

/// One edge as the tool saw it: the target's clock before (`t`) and after
/// (`u`) blocking, and what the counters read while it was blocked.
#[derive(Clone, Debug, Default)]
pub struct Edge {
    /// The target's CPU time before it blocked.
    pub t: u64,
    /// The target's CPU time after it woke.
    pub u: u64,
    /// perfmon: task-clock, context-switches, cpu-migrations.
    pub pfm: [u64; 3],
    /// perf: the same.
    pub perf: [u64; 3],
}

/// The verdict on a series of edges.
#[derive(Clone, Debug, Default)]
pub struct Verdict {
    /// Edges whose task-clock fell outside the target's own interval.
    pub outside: usize,
    /// The largest distance outside it, ns (negative: task-clock low).
    pub worst_ns: i64,
    /// The edge of `worst_ns`.
    pub worst_edge: usize,
    /// task-clock over the whole series, and the target's interval for it.
    pub total: (u64, u64, u64),
}

impl Verdict {
    /// Checks every edge against edge 0 (see the module's documentation).
    pub fn of(edges: &[Edge]) -> Self {
        let mut v = Verdict::default();
        let Some(first) = edges.first() else {
            return v;
        };
        for (i, e) in edges.iter().enumerate().skip(1) {
            let d = e.pfm[0].wrapping_sub(first.pfm[0]);
            let lo = e.t.saturating_sub(first.u);
            let hi = e.u.saturating_sub(first.t);
            let off = if d < lo {
                -((lo - d) as i64)
            } else if d > hi {
                (d - hi) as i64
            } else {
                0
            };
            if off != 0 {
                v.outside += 1;
                if off.abs() > v.worst_ns.abs() {
                    v.worst_ns = off;
                    v.worst_edge = i;
                }
            }
            v.total = (d, lo, hi);
        }
        v
    }

    /// Diagnostic text.
    pub fn describe(&self) -> String {
        format!(
            "task-clock {} ns, target's own clock says [{}, {}]; {} edges outside, worst {} ns at edge {}",
            self.total.0, self.total.1, self.total.2, self.outside, self.worst_ns, self.worst_edge
        )
    }
}

/// How the tool attaches at the target's edge 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attach {
    /// A context opened and programmed: LOAD, ACTIVE, then START.
    LoadThenStart,
    /// A clone of a programmed template (closed before the LOAD), attached
    /// and started by one LOAD with `PFM_LOAD_START`.
    CloneLoadStart,
}

/// The tool's side: LOAD on `tid`, then at each edge read the target's `t`,
/// wait until it blocks, read both counters, let it go, read its `u`.
/// The tool's side of [`run_target`]'s protocol; returns `rounds` edges
/// (the LOAD happens at the target's edge 0, which is not returned).
pub fn remote_edges(
    tid: u32,
    rounds: usize,
    attach: Attach,
    report: &mut impl Read,
    go: &mut impl Write,
) -> Result<Vec<Edge>, String> {
    let read_ns = |r: &mut dyn Read| -> Result<u64, String> {
        let mut b = [0u8; 8];
        r.read_exact(&mut b)
            .map_err(|e| format!("target report: {e}"))?;
        Ok(u64::from_ne_bytes(b))
    };
    let ctx = match attach {
        Attach::LoadThenStart => soft_context()?.0,
        Attach::CloneLoadStart => soft_context()?.0.clone_programmed().ctx("CLONE")?,
    };
    let mut edges = Vec::with_capacity(rounds + 1);
    let mut group = None;
    for i in 0..=rounds {
        let t = read_ns(report)?;
        if i == 0 {
            let g = perf_group(tid)?;
            match attach {
                Attach::LoadThenStart => {
                    ctx.load(tid).ctx("LOAD")?;
                    ctx.wait_active(crate::scaled(Duration::from_secs(5)))
                        .ctx("ACTIVE")?;
                    g.enable().ctx("perf enable")?;
                    ctx.start().ctx("START")?;
                }
                Attach::CloneLoadStart => {
                    g.enable().ctx("perf enable")?;
                    ctx.load_and_start(tid).ctx("LOAD|START")?;
                    ctx.wait_active(crate::scaled(Duration::from_secs(5)))
                        .ctx("ACTIVE")?;
                }
            }
            group = Some(g);
        }
        // Blocked on the go byte: nothing it does after `t` can block
        // elsewhere before it.
        let deadline = Instant::now() + crate::scaled(Duration::from_secs(5));
        while proc_state(tid) != Some('S') {
            if Instant::now() > deadline {
                return Err(format!("target {tid} not blocked at edge {i}"));
            }
            std::thread::yield_now();
        }
        let c = ctx.read().ctx("READ")?;
        let p = group
            .as_ref()
            .map(|g| g.read())
            .transpose()
            .ctx("perf read")?;
        let perf = p.map_or([0; 3], |p| [p[0].value, p[1].value, p[2].value]);
        go.write_all(b"g").map_err(|e| format!("go: {e}"))?;
        go.flush().map_err(|e| format!("go: {e}"))?;
        let u = read_ns(report)?;
        if i == 0 {
            // The LOAD ran inside this edge (the install kicked the target
            // out of its read): a wide interval; edge 1 is the reference.
            continue;
        }
        edges.push(Edge {
            t,
            u,
            pfm: [c.values[0], c.values[1], c.values[2]],
            perf,
        });
    }
    ctx.unload().ctx("UNLOAD")?;
    Ok(edges)
}

/// `rounds` windows of `workload` on a new thread of this process.
pub fn thread_edges(workload: Workload, rounds: usize) -> Result<Vec<Edge>, String> {
    thread_edges_by(workload, rounds, Attach::LoadThenStart)
}

/// [`thread_edges`], the tool attaching as `attach` says.
pub fn thread_edges_by(
    workload: Workload,
    rounds: usize,
    attach: Attach,
) -> Result<Vec<Edge>, String> {
    let (mut report_r, report_w) = raw::pipe().map_err(|e| format!("pipe: {e}"))?;
    let (go_r, mut go_w) = raw::pipe().map_err(|e| format!("pipe: {e}"))?;
    let (tx, rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        let _ = tx.send(perfmon::process::gettid());
        run_target(report_w, go_r, workload, rounds)
    });
    let tid = rx
        .recv_timeout(crate::scaled(Duration::from_secs(2)))
        .ctx("thread id")?;
    let res = remote_edges(tid, rounds, attach, &mut report_r, &mut go_w);
    // A failed measurement: closing the go pipe ends the target.
    drop(go_w);
    let code = h.join().map_err(|_| "target thread panicked".to_string())?;
    let edges = res?;
    if code != 0 {
        return Err(format!("target thread ended with {code}"));
    }
    Ok(edges)
}

/// `rounds` windows of `workload` on a child process (its main thread).
pub fn process_edges(workload: Workload, rounds: usize) -> Result<Vec<Edge>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut child = Command::new(exe)
        .arg(CHILD_FLAG)
        .arg("edges")
        .arg(workload.name())
        .arg(rounds.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn: {e}"))?;
    let (Some(mut go), Some(mut report)) = (child.stdin.take(), child.stdout.take()) else {
        let _ = child.kill();
        let _ = child.wait();
        return Err("child pipes".into());
    };
    let res = remote_edges(
        child.id(),
        rounds,
        Attach::LoadThenStart,
        &mut report,
        &mut go,
    );
    drop(go);
    if res.is_err() {
        let _ = child.kill();
    }
    let status = child.wait().map_err(|e| format!("wait: {e}"))?;
    let edges = res?;
    if !status.success() {
        return Err(format!("target process: {status}"));
    }
    Ok(edges)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge(t: u64, u: u64, clock: u64) -> Edge {
        Edge {
            t,
            u,
            pfm: [clock, 0, 0],
            ..Edge::default()
        }
    }

    #[test]
    fn inside_and_outside() {
        let ok = [edge(100, 110, 5000), edge(300, 310, 5205)];
        assert_eq!(Verdict::of(&ok).outside, 0);
        let low = [edge(100, 110, 5000), edge(300, 310, 5150)];
        let v = Verdict::of(&low);
        assert_eq!((v.outside, v.worst_ns), (1, -40));
        let high = [edge(100, 110, 5000), edge(300, 310, 5215)];
        assert_eq!(Verdict::of(&high).worst_ns, 5);
    }

    #[test]
    fn thread_clock_encoding_matches_glibc() {
        // glibc: ((~(clockid_t) tid) << 3) | CPUCLOCK_PERTHREAD_MASK | CPUCLOCK_SCHED
        assert_eq!(thread_clock_id(1), -10);
    }
}
