//! 7. `inherit` and 8. `process-attach`: whole programs
//! (Documentation/perfmon.rst, "Whole programs") against perf_event.
//!
//! - `inherit`: a thread monitoring itself forks a child that exits at
//!   once and waits for it, `--inherit-iters` times per run, each cycle
//!   timed: unmonitored, perfmon with `PFM_CTXFL_INHERIT` (task-clock and
//!   context-switches; every child gets its own heir context, from the
//!   fork tracepoint, and keeps its row after its exit), perf_event with
//!   `inherit=1` on the same two events (every child gets its own
//!   inherited events, folded into the parent's at its exit).
//! - `process-attach`: a process of `--process-threads` threads asleep in
//!   read(2) on the other CPU; one cycle attaches to all of them and
//!   detaches: perfmon `open` + `WRITE_PMCS` + `LOAD(PFM_LOAD_PROCESS)` +
//!   `START` + (until `GET_STATE` counts every thread) + `UNLOAD` +
//!   `close`, against what a perf tool does for `perf stat -p`: read
//!   /proc/PID/task, open a group of the two events on every thread,
//!   enable each group, close everything.

use std::io;
use std::time::Duration;

use super::report::{f, median_f, pct, sorted, Table, J};
use super::sys::{self, PerfGroup, Pfm};
use super::{abi, settle, Opts, CS, PCS, PTC, TC};

const PFM2: &[u64] = &[TC, CS];
const PERF2: &[u64] = &[PTC, PCS];

#[derive(Clone, Copy)]
enum ForkMon {
    None,
    Pfm,
    Perf,
}

/// What a run of fork cycles saw besides the times.
struct ForkRun {
    samples: Vec<u64>,
    /// perfmon: threads monitored (GET_STATE) and lost; perf: the
    /// parent's context switches, children's included.
    threads: u32,
    lost: u32,
    switches: u64,
    /// perfmon: the children's rows (READ_THREADS) by their context
    /// switches: 0, 1, 2, more; the loaded thread's row's switches.
    child_switches: [u64; 4],
    root_switches: u64,
    /// The loaded thread's own context switches over the cycles
    /// (`getrusage(RUSAGE_THREAD)`: voluntary + involuntary), the oracle
    /// of its row, which neither implementation influences.
    own_switches: u64,
}

/// The calling thread's context switches (`RUSAGE_THREAD`).
fn own_switches() -> u64 {
    // SAFETY: an all-zero `rusage` is valid; `getrusage` fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid out-parameter.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    (ru.ru_nvcsw + ru.ru_nivcsw) as u64
}

/// The module's counters that a fork's cost depends on, as text.
fn module_counts() -> String {
    let rd = |n: &str| sys::read_line(&format!("/sys/kernel/perfmon/{n}")).unwrap_or_default();
    format!(
        "inheriting_contexts {} live_contexts {} attached_threads {} zombie_contexts {}",
        rd("inheriting_contexts"),
        rd("live_contexts"),
        rd("attached_threads"),
        rd("zombie_contexts")
    )
}

/// One fork+exit+wait cycle: the child exits at once.
#[inline(always)]
fn fork_exit_wait() -> io::Result<()> {
    // SAFETY: the child calls only `_exit`.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: terminates the child.
        unsafe { libc::_exit(0) }
    }
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid out-parameter.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// `n` fork+exit+wait cycles, each timed into `run`, and the thread's own
/// context switches over them.
fn timed_cycles(n: usize, run: &mut ForkRun) -> io::Result<()> {
    let sw0 = own_switches();
    for _ in 0..n {
        let t0 = sys::now_ns();
        fork_exit_wait()?;
        run.samples.push(sys::now_ns() - t0);
    }
    run.own_switches = own_switches() - sw0;
    Ok(())
}

/// `rows`: READ_THREADS' buffer for perfmon's rows, allocated and touched
/// before the first run, so that the process forked has the same memory in
/// every run (a buffer allocated afterwards grows the heap, and every later
/// fork copies its page tables: +45 us per fork seen).
fn fork_run(mon: ForkMon, n: usize, rows: &mut [abi::PfmThread]) -> io::Result<ForkRun> {
    let mut run = ForkRun {
        samples: Vec::with_capacity(n),
        threads: 0,
        lost: 0,
        switches: 0,
        child_switches: [0; 4],
        root_switches: 0,
        own_switches: 0,
    };
    match mon {
        ForkMon::None => {
            timed_cycles(n, &mut run)?;
        }
        ForkMon::Pfm => {
            let p = Pfm::open()?;
            p.set_flags(abi::PFM_CTXFL_INHERIT)?;
            p.program(PFM2)?;
            p.load(0)?;
            p.start()?;
            timed_cycles(n, &mut run)?;
            p.stop()?;
            let st = p.state()?;
            run.threads = st.threads;
            run.lost = st.lost_threads;
            let mut v = [0u64; 2];
            p.read_values(0b11, &mut v)?;
            run.switches = v[1];
            let (needed, _) = p.read_threads(0b11, rows)?;
            run.root_switches = rows[0].values[1];
            for r in rows.iter().take(needed as usize).skip(1) {
                run.child_switches[(r.values[1] as usize).min(3)] += 1;
            }
            p.unload()?;
            p.fd.close()?;
        }
        ForkMon::Perf => {
            let g = PerfGroup::open_with(PERF2, 0, true)?;
            g.enable()?;
            timed_cycles(n, &mut run)?;
            g.disable()?;
            // The member's count (context switches), children's included.
            let mut buf = [0u64; 3];
            // SAFETY: `buf` has room for the 24 bytes one event's read returns.
            let r = unsafe {
                libc::read(
                    g.fds[1].0,
                    buf.as_mut_ptr() as *mut libc::c_void,
                    std::mem::size_of_val(&buf),
                )
            };
            if r == 24 {
                run.switches = buf[0];
            }
            g.close()?;
        }
    }
    Ok(run)
}

/// `pfm_bench --profile fork:...` (scripts/cost-gate.sh): `n` fork + exit +
/// wait cycles between two profile markers, the caller unmonitored or
/// monitoring itself with `PFM_CTXFL_INHERIT` (task-clock and
/// context-switches, as [`bench_inherit`]), after one cycle outside them
/// (first-use work); `flush` runs last inside them.
pub(super) fn profile_forks(pfm: bool, n: usize, flush: &dyn Fn()) -> io::Result<()> {
    let ctx = if pfm {
        let p = Pfm::open()?;
        p.set_flags(abi::PFM_CTXFL_INHERIT)?;
        p.program(PFM2)?;
        p.load(0)?;
        p.start()?;
        Some(p)
    } else {
        None
    };
    fork_exit_wait()?;
    sys::profile_marker();
    for _ in 0..n {
        fork_exit_wait()?;
    }
    flush();
    sys::profile_marker();
    if let Some(p) = ctx {
        p.stop()?;
        p.unload()?;
        p.fd.close()?;
    }
    Ok(())
}

pub(super) fn bench_inherit(o: &Opts, out: &mut J) -> io::Result<()> {
    println!(
        "== 7. inheritance: fork + exit + wait of a child of a monitored thread (CPU {}) ==",
        o.cpu
    );
    println!(
        "   {} cycles per run, {} rounds interleaved; events task-clock, context-switches",
        o.inherit_iters, o.rounds
    );
    sys::pin(o.cpu)?;
    let variants: [(&str, ForkMon, &str); 3] = [
        ("none", ForkMon::None, "unmonitored"),
        (
            "perfmon",
            ForkMon::Pfm,
            "PFM_CTXFL_INHERIT on itself, task-clock + context-switches: one heir per child",
        ),
        (
            "perf",
            ForkMon::Perf,
            "perf_event_open(self, inherit=1) of task-clock + context-switches (one group, each event read on its own after the cycles)",
        ),
    ];
    let mut medians: Vec<Vec<f64>> = variants.iter().map(|_| Vec::new()).collect();
    let mut p99s: Vec<Vec<f64>> = variants.iter().map(|_| Vec::new()).collect();
    let mut extra: Vec<Vec<(u32, u32, u64)>> = variants.iter().map(|_| Vec::new()).collect();
    let mut rows = vec![
        abi::PfmThread {
            tid: 1,
            ..Default::default()
        };
        o.inherit_iters + 16
    ];
    let mut child_sw = [0u64; 4];
    let mut own_sw = [0u64; 3];
    let mut root_sw = 0u64;
    for r in 0..o.rounds {
        for k in 0..variants.len() {
            let idx = (k + r) % variants.len();
            // perf's scheduler hooks stay on for a second after its last event.
            settle(o);
            let run = fork_run(variants[idx].1, o.inherit_iters, &mut rows).map_err(|e| {
                io::Error::new(e.kind(), format!("inherit {}: {e}", variants[idx].0))
            })?;
            let s = sorted(run.samples);
            let (m, p) = (pct(&s, 50.0), pct(&s, 99.0));
            eprintln!(
                "# inherit round {}: {:<8} median {m} p99 {p} ns (threads {}, lost {}, switches {}, the loaded thread's {} (its own getrusage {}), children with 0/1/2/more switches {:?}; after: {})",
                r + 1,
                variants[idx].0,
                run.threads,
                run.lost,
                run.switches,
                run.root_switches,
                run.own_switches,
                run.child_switches,
                module_counts()
            );
            medians[idx].push(m as f64);
            p99s[idx].push(p as f64);
            extra[idx].push((run.threads, run.lost, run.switches));
            own_sw[idx] = run.own_switches;
            if matches!(variants[idx].1, ForkMon::Pfm) {
                child_sw = run.child_switches;
                root_sw = run.root_switches;
            }
        }
    }
    let m: Vec<f64> = medians.iter().map(|v| median_f(v)).collect();
    let mut t = Table::new(&["variant", "ns/cycle", "added ns", "p99 ns"]);
    let mut arr = J::Arr(Vec::new());
    for (i, (name, _, how)) in variants.iter().enumerate() {
        t.row(vec![
            name.to_string(),
            f(m[i], 0),
            if i == 0 {
                "-".into()
            } else {
                f(m[i] - m[0], 0)
            },
            f(median_f(&p99s[i]), 0),
        ]);
        arr.push(
            J::obj()
                .with("name", *name)
                .with("how", *how)
                .with("median_ns", m[i])
                .with("added_ns", m[i] - m[0])
                .with("p99_ns", median_f(&p99s[i]))
                .with("median_ns_rounds", medians[i].clone())
                .with(
                    "threads_rounds",
                    extra[i].iter().map(|x| x.0 as u64).collect::<Vec<_>>(),
                )
                .with(
                    "lost_rounds",
                    extra[i].iter().map(|x| x.1 as u64).collect::<Vec<_>>(),
                )
                .with(
                    "switches_rounds",
                    extra[i].iter().map(|x| x.2).collect::<Vec<_>>(),
                ),
        );
    }
    t.print();
    let ratio = m[1] / m[2];
    let ratio_added = (m[1] - m[0]) / (m[2] - m[0]);
    println!(
        "   ratio perfmon/perf: {} per cycle, {} of the added time (target: at most 1.0: {})",
        f(ratio, 3),
        f(ratio_added, 3),
        if ratio <= 1.0 { "met" } else { "NOT met" }
    );
    let threads = extra[1].iter().map(|x| x.0).max().unwrap_or(0);
    let lost: u32 = extra[1].iter().map(|x| x.1).sum();
    println!(
        "   perfmon's contexts monitored {} threads per run (1 + {} children expected), {} lost",
        threads, o.inherit_iters, lost
    );
    let sw = |i: usize| extra[i].last().map_or(0, |x| x.2);
    println!(
        "   context switches counted in the last run: perfmon {} (the loaded thread's row {}; its own \
         getrusage {}), perf {} (the thread's own getrusage {});\n\
         \x20  perfmon's children by their own count (READ_THREADS) 0/1/2/more: {:?}",
        sw(1),
        root_sw,
        own_sw[1],
        sw(2),
        own_sw[2],
        child_sw
    );
    println!();
    out.set(
        "inherit",
        J::obj()
            .with("method", "fork() of a child that _exit(0)s at once, waitpid() for it; each cycle timed with CLOCK_MONOTONIC in the parent, pinned to one CPU (the child inherits the pinning); the monitoring set up before the cycles, torn down after")
            .with("cpu", o.cpu)
            .with("iterations_per_run", o.inherit_iters)
            .with("rounds", o.rounds)
            .with("variants", arr)
            .with("ratio_perfmon_perf", ratio)
            .with("ratio_added_perfmon_perf", ratio_added)
            .with("target_ratio_max", 1.0)
            .with("target_met", ratio <= 1.0)
            .with("perfmon_lost_threads", lost as u64)
            .with("perfmon_children_by_switches_0_1_2_more", child_sw.to_vec())
            .with("perfmon_loaded_thread_switches", root_sw)
            .with("perf_switches", sw(2)),
    );
    inherit_memory(o, out)
}

/// What an inherited thread costs in kernel memory: `--threads` threads
/// created by a thread that monitors itself with inheritance (perfmon:
/// `PFM_CTXFL_INHERIT`, 4 soft events; perf: `inherit=1`, a group of the
/// same 4), each asleep in read(2), against the same threads unmonitored:
/// `/proc/meminfo` deltas (the method of item 4), the median of the
/// rounds, per thread.
fn inherit_memory(o: &Opts, out: &mut J) -> io::Result<()> {
    let k = o.threads.max(1);
    println!("== 7b. memory per inherited thread: {k} threads asleep in read(2) ==");
    let variants = ["none", "perfmon", "perf"];
    let mut slab: Vec<Vec<f64>> = variants.iter().map(|_| Vec::new()).collect();
    for r in 0..o.rounds {
        for i in 0..variants.len() {
            let idx = (i + r) % variants.len();
            slab[idx].push(threads_slab(idx, k)?);
        }
    }
    let med: Vec<f64> = slab.iter().map(|v| median_f(v)).collect();
    let added = |i: usize| med[i] - med[0];
    let mut t = Table::new(&["variant", "Slab bytes per thread", "added by monitoring"]);
    for (i, name) in variants.iter().enumerate() {
        t.row(vec![name.to_string(), f(med[i], 0), f(added(i), 0)]);
    }
    t.print();
    let target = 768.0;
    println!(
        "   perfmon adds {} bytes per inherited thread, perf {} (target: at most {target}: {})",
        f(added(1), 0),
        f(added(2), 0),
        if added(1) <= target { "met" } else { "NOT met" }
    );
    println!();
    out.set(
        "inherit_memory",
        J::obj()
            .with("method", "k threads created after a self-LOAD with PFM_CTXFL_INHERIT (4 soft events) or after perf_event_open(self, inherit=1) of a group of 4, each asleep in read(2); /proc/meminfo Slab delta over their creation, per thread, median of the rounds, less the same threads unmonitored")
            .with("threads", k)
            .with("rounds", o.rounds)
            .with("slab_bytes_per_thread_none", med[0])
            .with("slab_bytes_per_thread_perfmon", med[1])
            .with("slab_bytes_per_thread_perf", med[2])
            .with("added_bytes_per_thread_perfmon", added(1))
            .with("added_bytes_per_thread_perf", added(2))
            .with("target_added_bytes_max", target)
            .with("target_met", added(1) <= target),
    );
    Ok(())
}

/// Slab bytes per thread of `k` threads asleep in read(2), created under
/// variant `idx` (0 none, 1 perfmon, 2 perf).
fn threads_slab(idx: usize, k: usize) -> io::Result<f64> {
    const PFM4: &[u64] = &[TC, CS, super::MIG, CS];
    const PERF4: &[u64] = &[PTC, PCS, super::PMIG, PCS];
    let pfm = match idx {
        1 => {
            let p = Pfm::open()?;
            p.set_flags(abi::PFM_CTXFL_INHERIT)?;
            p.program(PFM4)?;
            p.load(0)?;
            p.start()?;
            Some(p)
        }
        _ => None,
    };
    let perf = match idx {
        2 => {
            let g = PerfGroup::open_with(PERF4, 0, true)?;
            g.enable()?;
            Some(g)
        }
        _ => None,
    };
    let (rx, tx) = sys::pipe()?;
    let rx = std::sync::Arc::new(rx);
    let before = super::meminfo();
    let mut handles = Vec::with_capacity(k);
    for _ in 0..k {
        let rx = rx.clone();
        let h = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || sys::read1(&rx).map(|_| ()))?;
        handles.push(h);
    }
    let after = super::meminfo();
    for _ in 0..k {
        sys::write1(&tx)?;
    }
    for h in handles {
        h.join()
            .map_err(|_| io::Error::other("a sleeper panicked"))??;
    }
    if let Some(p) = pfm {
        p.unload()?;
        p.fd.close()?;
    }
    if let Some(g) = perf {
        g.close()?;
    }
    // Slab is the first field.
    Ok(super::per_object(&before, &after, k)[0])
}

/// A process of `n` threads (its main thread included) asleep in read(2)
/// on a pipe, pinned to `cpu`; killed on drop.
struct SleepyProcess {
    pid: i32,
}

impl SleepyProcess {
    fn spawn(n: usize, cpu: usize) -> io::Result<Self> {
        let (r, w) = sys::pipe()?;
        let (ready_r, ready_w) = sys::pipe()?;
        // SAFETY: the child only spawns threads (glibc's allocator is
        // fork-safe), blocks and is killed.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: PR_SET_PDEATHSIG takes a signal number.
            unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
            let _ = sys::pin(cpu);
            let r = std::sync::Arc::new(r);
            for _ in 1..n {
                let r = r.clone();
                let spawned = std::thread::Builder::new()
                    .stack_size(64 << 10)
                    .spawn(move || while let Ok(true) = sys::read1(&r) {});
                if spawned.is_err() {
                    // SAFETY: terminates the child.
                    unsafe { libc::_exit(1) }
                }
            }
            let _ = sys::write1(&ready_w);
            while let Ok(true) = sys::read1(&r) {}
            // SAFETY: terminates the child.
            unsafe { libc::_exit(0) }
        }
        drop(ready_w);
        drop(r);
        let ok = sys::read1(&ready_r)?;
        // The write end stays open in the parent until the child is gone:
        // its threads never see EOF.
        std::mem::forget(w);
        if !ok {
            return Err(io::Error::other("the sleepy process died"));
        }
        // Every thread asleep in read(2).
        std::thread::sleep(Duration::from_millis(200));
        Ok(Self { pid })
    }
}

impl Drop for SleepyProcess {
    fn drop(&mut self) {
        // SAFETY: our child.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            let mut st = 0;
            libc::waitpid(self.pid, &mut st, 0);
        }
    }
}

/// The thread ids of process `pid`, from /proc/PID/task.
#[inline(always)]
fn task_ids(pid: i32) -> io::Result<Vec<u32>> {
    let mut v = Vec::with_capacity(128);
    for e in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        if let Ok(t) = e?.file_name().to_string_lossy().parse::<u32>() {
            v.push(t);
        }
    }
    Ok(v)
}

/// What a run of process attach cycles saw besides the times.
struct ProcRun {
    samples: Vec<u64>,
    /// The cycles whose LOAD attached (perf: all).
    attached: Vec<u64>,
    /// perfmon: threads (GET_STATE) after the last LOAD, lost threads
    /// over the run, LOADs refused; perf: threads opened.
    threads: u32,
    lost: u64,
    refused: u64,
    polls: u64,
    /// perfmon: READ_THREADS' rows after an untimed LOAD at the end.
    rows: u32,
}

fn process_run(pfm: bool, pid: i32, want: usize, n: usize) -> io::Result<ProcRun> {
    let mut run = ProcRun {
        samples: Vec::with_capacity(n),
        attached: Vec::with_capacity(n),
        threads: 0,
        lost: 0,
        refused: 0,
        polls: 0,
        rows: 0,
    };
    for _ in 0..n {
        if pfm {
            let t0 = sys::now_ns();
            let p = Pfm::open()?;
            p.program(PFM2)?;
            match p.load_flags(pid as u32, abi::PFM_LOAD_PROCESS) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    p.fd.close()?;
                    run.samples.push(sys::now_ns() - t0);
                    run.refused += 1;
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                Err(e) => return Err(e),
            }
            p.start()?;
            // Until every thread is counted (listed at LOAD: one call).
            let mut st = p.state()?;
            let mut polls = 0;
            while (st.threads + st.lost_threads) < want as u32 && polls < 100_000 {
                polls += 1;
                st = p.state()?;
            }
            p.unload()?;
            p.fd.close()?;
            let dt = sys::now_ns() - t0;
            run.samples.push(dt);
            run.attached.push(dt);
            run.threads = st.threads;
            run.lost += u64::from(st.lost_threads);
            run.polls += polls;
        } else {
            let t0 = sys::now_ns();
            let tids = task_ids(pid)?;
            let mut groups = Vec::with_capacity(tids.len());
            for &t in &tids {
                groups.push(PerfGroup::open(PERF2, t)?);
            }
            for g in &groups {
                g.enable()?;
            }
            for g in groups {
                g.close()?;
            }
            let dt = sys::now_ns() - t0;
            run.samples.push(dt);
            run.attached.push(dt);
            run.threads = tids.len() as u32;
        }
    }
    if pfm {
        // Untimed: the rows of one more LOAD, once every thread has
        // installed its context (ACTIVE is the loaded thread's only).
        let p = Pfm::open()?;
        p.program(PFM2)?;
        p.load_flags(pid as u32, abi::PFM_LOAD_PROCESS)?;
        p.start()?;
        std::thread::sleep(Duration::from_millis(20));
        let mut rows = vec![abi::PfmThread::default(); want + 16];
        let (needed, _) = p.read_threads(0b11, &mut rows)?;
        run.rows = needed;
        p.unload()?;
        p.fd.close()?;
    }
    Ok(run)
}

pub(super) fn bench_process_attach(o: &Opts, out: &mut J) -> io::Result<()> {
    let n = o.process_threads;
    println!(
        "== 8. attaching to a process of {n} threads asleep in read(2) on CPU {} (caller on CPU {}) ==",
        o.other_cpu, o.cpu
    );
    println!(
        "   {} cycles per run, {} rounds interleaved; events task-clock, context-switches",
        o.process_iters, o.rounds
    );
    super::raise_fd_limit(4 * n as u64 + 1024);
    sys::pin(o.cpu)?;
    let target = SleepyProcess::spawn(n, o.other_cpu)?;
    let have = task_ids(target.pid)?.len();
    if have != n {
        return Err(io::Error::other(format!(
            "the target has {have} threads, not {n}"
        )));
    }
    let variants: [(&str, bool, &str); 2] = [
        (
            "perfmon",
            true,
            "open + WRITE_PMCS + LOAD(pid, PFM_LOAD_PROCESS) + START + GET_STATE until every thread counts + UNLOAD + close",
        ),
        (
            "perf",
            false,
            "readdir /proc/PID/task + per thread perf_event_open x 2 (group: task-clock, context-switches) + ENABLE per group + close of every fd",
        ),
    ];
    let mut medians: Vec<Vec<f64>> = vec![Vec::new(), Vec::new()];
    let mut p99s: Vec<Vec<f64>> = vec![Vec::new(), Vec::new()];
    let mut info: Vec<Vec<(u32, u64, u64, u64)>> = vec![Vec::new(), Vec::new()];
    let mut attached: Vec<Vec<f64>> = vec![Vec::new(), Vec::new()];
    let mut means: Vec<Vec<f64>> = vec![Vec::new(), Vec::new()];
    for r in 0..o.rounds {
        for k in 0..variants.len() {
            let idx = (k + r) % variants.len();
            let run =
                process_run(variants[idx].1, target.pid, n, o.process_iters).map_err(|e| {
                    io::Error::new(e.kind(), format!("process-attach {}: {e}", variants[idx].0))
                })?;
            attached[idx].push(pct(&sorted(run.attached), 50.0) as f64);
            means[idx]
                .push(run.samples.iter().sum::<u64>() as f64 / run.samples.len().max(1) as f64);
            let s = sorted(run.samples);
            let (m, p) = (pct(&s, 50.0), pct(&s, 99.0));
            eprintln!(
                "# process-attach round {}: {:<8} median {m} p99 {p} ns (threads {}, lost {}, refused {}, polls {}, rows {})",
                r + 1,
                variants[idx].0,
                run.threads,
                run.lost,
                run.refused,
                run.polls,
                run.rows
            );
            medians[idx].push(m as f64);
            p99s[idx].push(p as f64);
            info[idx].push((run.threads, run.lost, run.refused, run.polls));
            // The targets run their pending cleanup meanwhile.
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    drop(target);
    let m: Vec<f64> = medians.iter().map(|v| median_f(v)).collect();
    let mut t = Table::new(&[
        "variant",
        "ns/attach",
        "ns/thread",
        "p99 ns",
        "mean ns",
        "ns/attach, attached",
    ]);
    let mut arr = J::Arr(Vec::new());
    for (i, (name, _, how)) in variants.iter().enumerate() {
        t.row(vec![
            name.to_string(),
            f(m[i], 0),
            f(m[i] / n as f64, 0),
            f(median_f(&p99s[i]), 0),
            f(median_f(&means[i]), 0),
            f(median_f(&attached[i]), 0),
        ]);
        arr.push(
            J::obj()
                .with("name", *name)
                .with("calls", *how)
                .with("median_ns", m[i])
                .with("ns_per_thread", m[i] / n as f64)
                .with("p99_ns", median_f(&p99s[i]))
                .with("median_ns_attached", median_f(&attached[i]))
                .with("mean_ns", median_f(&means[i]))
                .with("median_ns_rounds", medians[i].clone())
                .with(
                    "threads_rounds",
                    info[i].iter().map(|x| x.0 as u64).collect::<Vec<_>>(),
                )
                .with(
                    "lost_rounds",
                    info[i].iter().map(|x| x.1).collect::<Vec<_>>(),
                )
                .with(
                    "load_refused_rounds",
                    info[i].iter().map(|x| x.2).collect::<Vec<_>>(),
                ),
        );
    }
    t.print();
    let ratio = m[0] / m[1];
    let lost: u64 = info[0].iter().map(|x| x.1).sum();
    let refused: u64 = info[0].iter().map(|x| x.2).sum();
    println!(
        "   ratio perfmon/perf: {} (target: at most 0.5: {}); perfmon: {} threads lost, {} LOADs refused (EAGAIN) over {} cycles",
        f(ratio, 3),
        if ratio <= 0.5 { "met" } else { "NOT met" },
        lost,
        refused,
        o.process_iters * o.rounds
    );
    println!();
    out.set(
        "process_attach",
        J::obj()
            .with("method", "each cycle timed with CLOCK_MONOTONIC in the caller; the targets' own work (perfmon's install and cleanup task_works, run when each sleeping thread is kicked) runs on the other CPU, asynchronously, and under -icount counts in the caller's time")
            .with("threads", n)
            .with("caller_cpu", o.cpu)
            .with("target_cpu", o.other_cpu)
            .with("iterations_per_run", o.process_iters)
            .with("rounds", o.rounds)
            .with("variants", arr)
            .with("ratio_perfmon_perf", ratio)
            .with("target_ratio_max", 0.5)
            .with("target_met", ratio <= 0.5)
            .with("perfmon_lost_threads", lost)
            .with("perfmon_load_refused_eagain", refused),
    );
    Ok(())
}
