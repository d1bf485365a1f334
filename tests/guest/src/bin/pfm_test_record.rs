//! pfm_test_record: `pfm record` and `pfm report` end to end, on
//! `pmu=soft`, against oracles the tool cannot influence: the workload's
//! own CPU clock and its own getrusage.
//!
//! - Task-clock: `pfm record -e task-clock -c 2000000 -- <this program's
//!   hot-cold mode>`, which spends its CPU time in two out-of-line
//!   functions, `hot_work` (8 ms a round) and `cold_work` (2 ms), measuring
//!   the time of each with `CLOCK_THREAD_CPUTIME_ID` around each call, with
//!   naps between rounds. `pfm report --json` must put each function's
//!   share of the samples within ±5 points of the workload's own measured
//!   share (the binomial deviation of an 80% share over ~1,000 samples is
//!   1.3 points), and the samples (written + lost) within 2% of T/P, T the
//!   workload's own CPU time at its end.
//! - Context switches: `pfm record -e cs -c P --no-inherit -- <ping-pong
//!   mode>`, N exchanges with a partner thread on another CPU; the
//!   workload counts its own switches between the start of its main and
//!   its end (`getrusage(RUSAGE_THREAD)`), N', and does nothing that may
//!   switch after its last reading. When the module counted exactly those
//!   (the report's `counted`, the events pfm computed from the buffer's
//!   entries and the counter's last value, equal to N': nothing switched
//!   between the exec and main; up to three tries), the file holds exactly
//!   ⌊N'/P⌋ samples; in every try it holds exactly ⌊counted/P⌋, and
//!   `counted` lies between N' and the thread's own switches since its
//!   fork (on a busy host the exec may switch before main in every try:
//!   then those bounds are what holds, and the test says so).
//! - The same of the whole program (pfm's default, `PFM_CTXFL_INHERIT`):
//!   the partner thread, which counts its own switches too, samples into
//!   the same buffer. In every try `counted` is at least the two threads'
//!   own sum and the file holds ⌊counted/P⌋ or one less (two threads'
//!   floors), at least ⌊N'main/P⌋ + ⌊N'partner/P⌋; when `counted` is the
//!   sum, exactly that. The partner's exit path can switch after its last
//!   reading (on a lock), which the module counts and no reading sees:
//!   then the bounds are what is checked (each thread's exact entries are
//!   pfm_test_smpl_family's, with readings around a STOP).
//! - `--random 7 --random-seed S` of the same, one thread: every period
//!   P plus the generator's amount; the file holds exactly the period ends
//!   (of the sequence `perfmon::random::periods` predicts for S) within
//!   the count pfm computed from the entries' own reset values, and within
//!   N' when that count is N'; the table says the range and the seed.
//! - `--pprof` and `--flamegraph` of the task-clock file: the pprof,
//!   gunzipped and decoded with prost, has the report's samples and names
//!   `hot_work` the function with the most; the SVG is XML naming it.
//! - `-t TID` and `-p PID` of a running workload for `--duration`: its
//!   samples resolve to its functions.
//! - `-g`: the assembly chain `pfm_chain_a → pfm_chain_b → pfm_chain_c`
//!   (`pfm_guest::frames`), every one of `pfm_chain_c`'s samples in the
//!   pprof profile under `pfm_chain_a;pfm_chain_b`, all three in the flame
//!   graph.
//! - Errors on one line with their exit status: no `-c`, an unknown event,
//!   `-F` with a counting event, an unwritable `-o`, and a file that is not
//!   a record file given to `pfm report`. A recording without samples (a
//!   period longer than the command runs) says so and exits 1, and `pfm
//!   report` of it says so too.
//! - perf's file and argument habits (issue 34): `-o -` piped into
//!   `pfm report -i -`, the command's output kept out of the stream; an
//!   existing file kept as FILE.old; `--call-graph dwarf`, `-a` and a
//!   missing thread one line each; `record --help` without `--json`.
//! - On `pmu=intel_arch_sim` (issue 34: it recorded no sample, the PMD armed
//!   as 2^47 - P, a 64-bit value 2^64 - 2^47 events from its overflow):
//!   `pfm record -e cpu-cycles -c 1000000` of the hot-cold workload. The
//!   simulator counts a cycle per ns the thread runs with its context
//!   installed (pfm_test_hwsim: at least 80% of the thread's running time,
//!   the rest being the switch and PMI paths, and never more than the wall
//!   time it was monitored), so the samples are at least 0.8 T/P - 1, T
//!   the workload's own CPU time, and at most the recording's wall time
//!   / P; the two functions' samples at least half their own measured
//!   time in periods, their shares within 5 points of their own measured
//!   shares, as for task-clock, and hot_work the top row.
//!
//! The tool is found through $PFM_BIN, next to this program, as /bin/pfm,
//! or in PATH. The workloads are this program run by pfm with
//! `--pfm-child MODE`; its symbols (not stripped) are what pfm report
//! resolves.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use pfm_guest::child::{Child, CHILD_FLAG};
use pfm_guest::tap::diag;
use pfm_guest::{edges, ensure, module, raw, work, ResultExt, Tap, TestResult};
use pfm_json::Report;
use prost::Message;

const PLAN: usize = 18;

/// Task-clock's period (ns) and the workload's own CPU time (ms).
const CLOCK_PERIOD: u64 = 2_000_000;
const CLOCK_RUN_MS: u64 = 2_000;

/// `n` iterations of a loop whose code is only here (its samples' IPs are
/// in this function, whatever the optimizer does around it).
#[inline(never)]
fn hot_work(n: u64) {
    // SAFETY: Register-only arithmetic.
    unsafe {
        core::arch::asm!(
            "2:",
            "dec {n}",
            "jnz 2b",
            n = inout(reg) n.max(1) => _,
            options(nostack, nomem),
        );
    }
}

/// [`hot_work`]'s twin, at other addresses.
#[inline(never)]
fn cold_work(n: u64) {
    // SAFETY: As in `hot_work`.
    unsafe {
        core::arch::asm!(
            "2:",
            "dec {n}",
            "jnz 2b",
            "nop",
            n = inout(reg) n.max(1) => _,
            options(nostack, nomem),
        );
    }
}

/// The hot-cold workload: rounds of 8 ms in `hot_work` and 2 ms in
/// `cold_work` (calibrated on the thread's CPU clock), a 300 µs nap after
/// each (the sampling timer is disarmed and armed again ~200 times), until
/// `run_ms` of its own CPU time; then writes to `out` the nanoseconds it
/// measured in each and its CPU time in all.
fn hot_cold(run_ms: u64, out: &str) -> i32 {
    let clock = edges::thread_cpu_ns;
    // Iterations per ms (the loops are the same loop).
    let chunk = {
        let t = clock();
        cold_work(1_000_000);
        (1_000_000u64 * 1_000_000 / (clock() - t).max(1)).max(1000)
    };
    let nap = Duration::from_micros(300);
    let (mut hot_ns, mut cold_ns) = (0u64, 0u64);
    while clock() < run_ms * 1_000_000 {
        let a = clock();
        hot_work(8 * chunk);
        let b = clock();
        cold_work(2 * chunk);
        let c = clock();
        hot_ns += b - a;
        cold_ns += c - b;
        std::thread::sleep(nap);
    }
    let line = format!("{hot_ns} {cold_ns} {}\n", clock());
    if std::fs::write(out, line).is_err() {
        return 3;
    }
    0
}

/// The ping-pong workload: `n` exchanges of a byte with a partner thread,
/// the main one on CPU 0, the partner on CPU 1 (if there is one), so each
/// blocks once an exchange; then the main thread
/// ends the partner and joins it, and writes to `out` its own switches
/// from the start of main to then (getrusage), and since its creation,
/// and the partner's own, since its creation to its end.
/// Nothing after that reading may switch: `out` is opened before the first
/// reading, no thread is left for the exit to wake, and `_exit` skips the
/// runtime's exit. The module counts the exit's switches up to `exit_mm`
/// (Documentation/perfmon.rst), which then has none to count.
fn ping_pong(n: u64, out: &str) -> i32 {
    use std::io::Write;
    let Ok(mut file) = std::fs::File::create(out) else {
        return 3;
    };
    let start = edges::thread_switches();
    if work::pin_to(0).is_err() {
        return 3;
    }
    let (Ok((a_r, a_w)), Ok((b_r, b_w))) = (raw::pipe(), raw::pipe()) else {
        return 3;
    };
    // The partner on another CPU: its exit wakes the main thread, blocked
    // in the join, where it cannot preempt the partner (a switch in
    // `exit_mm`, which the module counts, after the partner's last reading).
    let other = match std::thread::available_parallelism() {
        Ok(n) if n.get() >= 2 => 1,
        _ => 0,
    };
    let partner = std::thread::spawn(move || {
        let _ = work::pin_to(other);
        while let Ok(b) = raw::read_fd(a_r.as_raw_fd(), 1) {
            if b.is_empty() || raw::write_fd(b_w.as_raw_fd(), &b).is_err() {
                break;
            }
        }
        // Its own switches since its creation; its exit switches no more
        // (it wakes the joiner).
        edges::thread_switches()
    });
    for _ in 0..n {
        if raw::write_fd(a_w.as_raw_fd(), b"x").is_err()
            || raw::read_fd(b_r.as_raw_fd(), 1).is_err()
        {
            return 3;
        }
    }
    // End of file for the partner, which ends; the join's switches are
    // counted on both sides.
    drop(a_w);
    let Ok(partner_own) = partner.join() else {
        return 3;
    };
    let end = edges::thread_switches();
    let ok = file
        .write_all(format!("{} {end} {partner_own}\n", end - start).as_bytes())
        .is_ok();
    // SAFETY: Ends the process at once; nothing of it is needed any more.
    unsafe { libc::_exit(if ok { 0 } else { 3 }) }
}

/// This program's own workloads, before `pfm_guest`'s.
fn own_child_modes() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) != Some(CHILD_FLAG) {
        return;
    }
    let num = |i: usize| args.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    let out = args.get(4).cloned().unwrap_or_default();
    let code = match args.get(2).map(String::as_str) {
        Some("hot-cold") => hot_cold(num(3), &out),
        Some("ping-pong") => ping_pong(num(3), &out),
        Some("chain") => {
            // `num(3)` ms of the thread's CPU time in `pfm_chain_c`,
            // called through `pfm_chain_a` and `pfm_chain_b`: by its own
            // clock, in 10 ms chunks, not by a calibration (on a busy
            // host a calibration that a stalled vCPU slowed ran the chain
            // for half its time: 159 samples for "300 ms").
            let per_ms = pfm_guest::frames::iterations_per_ms();
            pfm_guest::frames::run_chain_for_ms(num(3), 0, per_ms);
            0
        }
        _ => return,
    };
    std::process::exit(code);
}

fn find_pfm() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("PFM_BIN") {
        return Some(PathBuf::from(p));
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("pfm")));
    beside
        .into_iter()
        .chain(["/bin/pfm".into(), "/usr/bin/pfm".into()])
        .find(|c| c.is_file())
        .or_else(|| perfmon::process::find_program("pfm".as_ref()))
}

fn me() -> Result<String, String> {
    Ok(std::env::current_exe()
        .ctx("current_exe")?
        .to_string_lossy()
        .into_owned())
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs pfm with `args`, killed after 120 s.
fn pfm(args: &[&str]) -> Result<Output, String> {
    let path = find_pfm().ok_or("no pfm binary (PFM_BIN, /bin/pfm, PATH)")?;
    let child = Command::new(&path)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("run {}: {e}", path.display()))?;
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(out) => out.ctx("collect output")?,
        Err(_) => {
            let _ = perfmon::process::send_signal(pid, libc::SIGKILL);
            return Err(format!("pfm {} still running after 120 s", args.join(" ")));
        }
    };
    diag(format!("$ pfm {}  -> {}", args.join(" "), out.status));
    for line in text(&out.stderr).lines().take(10) {
        diag(format!("stderr| {line}"));
    }
    Ok(out)
}

/// `pfm report -i FILE --json`, deserialized into the documented type.
fn report(file: &str) -> Result<Report, String> {
    let out = pfm(&["report", "-i", file, "--json"])?;
    ensure!(
        out.status.success(),
        "pfm report failed: {}",
        text(&out.stderr)
    );
    serde_json::from_str(text(&out.stdout).trim())
        .map_err(|e| format!("{e}: {}", text(&out.stdout)))
}

/// Samples of the rows whose symbol ends with `::name`.
fn samples_in(r: &Report, name: &str) -> u64 {
    let suffix = format!("::{name}");
    r.rows
        .iter()
        .filter(|row| row.symbol.as_deref().is_some_and(|s| s.ends_with(&suffix)))
        .map(|row| row.samples)
        .sum()
}

fn show_rows(r: &Report) {
    for row in r.rows.iter().take(6) {
        diag(format!(
            "  {:6.2}% {:6} {} {} {}",
            row.overhead_pct,
            row.samples,
            row.comm.as_deref().unwrap_or("-"),
            row.dso.as_deref().unwrap_or("-"),
            row.symbol.as_deref().unwrap_or("")
        ));
    }
}

/// The workload's own numbers, from its file.
fn numbers(path: &str, n: usize) -> Result<Vec<u64>, String> {
    let s = std::fs::read_to_string(path).ctx(path)?;
    let v: Vec<u64> = s
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    ensure!(v.len() == n, "{path}: {s:?}");
    Ok(v)
}

const CLOCK_FILE: &str = "/tmp/pfm-record-clock.data";

/// The hardware model's sampled cycles: the period (cycles, ns on the
/// simulator) and the workload's own CPU time (ms).
const CYCLES_PERIOD: u64 = 1_000_000;
const CYCLES_RUN_MS: u64 = 1_000;

/// `pfm record -e cpu-cycles` of the hot-cold workload on `intel_arch_sim`:
/// samples (at least 80% of T/P, at most the recording's wall time / P),
/// in hot_work and cold_work as their own measured time.
fn hw_cycles() -> TestResult {
    let file = "/tmp/pfm-record-cycles.data";
    let own = "/tmp/pfm-record-cycles.own";
    let me = me()?;
    let period = CYCLES_PERIOD.to_string();
    let run = CYCLES_RUN_MS.to_string();
    let out = pfm(&[
        "record",
        "-e",
        "cpu-cycles",
        "-c",
        &period,
        "-o",
        file,
        "--",
        &me,
        CHILD_FLAG,
        "hot-cold",
        &run,
        own,
    ])?;
    ensure!(
        out.status.code() == Some(0),
        "pfm record: {} {}",
        out.status,
        text(&out.stderr)
    );
    let v = numbers(own, 3)?;
    let (hot_ns, cold_ns, t) = (v[0], v[1], v[2]);
    let r = report(file)?;
    show_rows(&r);
    let (hot, cold) = (samples_in(&r, "hot_work"), samples_in(&r, "cold_work"));
    let n = r.samples + r.lost;
    let wall = r.duration_ns.ok_or("no duration in the report")?;
    let (low, high) = (
        (t / CYCLES_PERIOD * 8 / 10).saturating_sub(1),
        wall / CYCLES_PERIOD,
    );
    let share_own = hot_ns * 1000 / (hot_ns + cold_ns).max(1);
    let share_smpl = hot * 1000 / (hot + cold).max(1);
    diag(format!(
        "T = {t} ns (the workload's own CPU clock), wall {wall} ns; samples {} + lost {} \
         (counted {:?} cycles), expected {low}..={high}; hot_work {hot}, cold_work {cold}; \
         hot share {share_smpl}‰ of the two functions' samples, {share_own}‰ of their own time",
        r.samples, r.lost, r.counted,
    ));
    ensure!(
        r.complete
            && r.event == "cpu-cycles"
            && r.period == CYCLES_PERIOD
            && r.model == "intel_arch_sim",
        "{r:?}"
    );
    ensure!(
        (low..=high).contains(&n),
        "{n} samples, expected {low}..={high}"
    );
    // The two functions' own time is a smaller part of T than on soft:
    // the debug kernel's exec and the program's start (page faults of the
    // static binary) took 40-60% of T under the simulator (seen: hot_work
    // 285 ms, cold_work 132 ms of T = 1014 ms). Their samples must be at
    // least half their own time in periods (cycles at least 80% of the
    // running time, and the sampling's spread).
    let own_periods = (hot_ns + cold_ns) / CYCLES_PERIOD;
    ensure!(
        (hot + cold) * 2 >= own_periods,
        "only {} samples in hot_work and cold_work, for {own_periods} periods of their own time",
        hot + cold
    );
    ensure!(
        share_smpl.abs_diff(share_own) <= 50,
        "hot_work: {share_smpl}‰ of the samples, {share_own}‰ of the workload's own time"
    );
    let top = r.rows.first().ok_or("no rows")?;
    ensure!(
        top.symbol
            .as_deref()
            .is_some_and(|s| s.ends_with("::hot_work")),
        "top row {top:?}, expected hot_work"
    );
    Ok(())
}

/// perf's file and argument habits: `-o -` piped into `pfm report -i -`
/// (the stream starts with the file's magic; the command's own output went
/// to standard error, not into it; the report finds hot_work), an existing
/// file kept as FILE.old (the same bytes), `--call-graph dwarf` and `-a`
/// one line each, a missing thread worded without an ioctl's name, and
/// `record --help` without `--json`.
fn perf_habits() -> TestResult {
    let me = me()?;
    let path = find_pfm().ok_or("no pfm binary")?;
    let own = "/tmp/pfm-record-pipe.own";
    // 1000 ms of its own CPU time: the exec and the start of the static
    // program take 300 ms and more of it on a loaded host (the debug
    // kernel under TCG), which a shorter run spends before hot_work.
    let script = format!("echo from-the-command; exec {me} {CHILD_FLAG} hot-cold 1000 {own}");
    let rec = Command::new(&path)
        .args([
            "record",
            "-e",
            "task-clock",
            "-c",
            "1000000",
            "-o",
            "-",
            "--",
        ])
        .args(["sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ctx("pfm record -o -")?;
    let out = rec.wait_with_output().ctx("pfm record -o -")?;
    let err = text(&out.stderr);
    diag(format!(
        "pfm record -o -: {} bytes on stdout, {}",
        out.stdout.len(),
        out.status
    ));
    ensure!(
        out.status.code() == Some(0),
        "pfm record -o -: {} {err}",
        out.status
    );
    ensure!(
        out.stdout.starts_with(b"PFMDATA\0"),
        "stdout is not a record file"
    );
    ensure!(
        err.contains("from-the-command") && err.contains("written to standard output"),
        "the command's output is not on stderr: {err}"
    );
    let mut report = Command::new(&path)
        .args(["report", "-i", "-", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ctx("pfm report -i -")?;
    {
        use std::io::Write;
        let mut stdin = report.stdin.take().ok_or("no stdin")?;
        stdin.write_all(&out.stdout).ctx("write to pfm report")?;
    }
    let rep = report.wait_with_output().ctx("pfm report -i -")?;
    ensure!(
        rep.status.success(),
        "pfm report -i -: {}",
        text(&rep.stderr)
    );
    let r: Report = serde_json::from_str(text(&rep.stdout).trim())
        .map_err(|e| format!("{e}: {}", text(&rep.stdout)))?;
    show_rows(&r);
    ensure!(
        samples_in(&r, "hot_work") > 0,
        "no hot_work in the piped report"
    );

    // An existing file is kept as FILE.old.
    let file = "/tmp/pfm-record-old.data";
    let old = "/tmp/pfm-record-old.data.old";
    let _ = std::fs::remove_file(old);
    let _ = std::fs::remove_file(file);
    let record_to_file = || -> TestResult {
        let out = pfm(&[
            "record",
            "-e",
            "task-clock",
            "-c",
            "1000000",
            "-o",
            file,
            "--",
            &me,
            CHILD_FLAG,
            "hot-cold",
            "50",
            own,
        ])?;
        ensure!(out.status.success(), "pfm record: {}", text(&out.stderr));
        Ok(())
    };
    record_to_file()?;
    ensure!(
        !std::path::Path::new(old).exists(),
        "{old} after the first recording"
    );
    std::fs::copy(file, "/tmp/pfm-record-first.data").ctx("copy")?;
    record_to_file()?;
    let first = std::fs::read("/tmp/pfm-record-first.data").ctx("first")?;
    ensure!(
        std::fs::read(old).ctx(old)? == first,
        "{old} is not the first recording"
    );
    one_line_error(
        &["record", "-c", "5", "--call-graph", "dwarf", "--", "true"],
        2,
        "not supported",
    )?;
    one_line_error(
        &["record", "-a", "-c", "5", "--", "true"],
        2,
        "-a (--all-cpus) is not supported: pfm is a per-thread tool",
    )?;
    one_line_error(
        &["record", "-c", "5", "-t", "4194305", "--duration", "0.1"],
        1,
        "no such thread: 4194305",
    )?;
    let help = pfm(&["record", "--help"])?;
    let h = text(&help.stdout);
    ensure!(
        help.status.success() && h.contains("--call-graph") && !h.contains("--json"),
        "record --help: {h}"
    );
    Ok(())
}

/// A recording without samples (the period is longer than `true` runs):
/// pfm record says so, after its summary line, and exits 1; pfm report
/// of the file says so in one line and exits 1.
fn no_samples() -> TestResult {
    let file = "/tmp/pfm-record-empty.data";
    let out = pfm(&[
        "record",
        "-e",
        "task-clock",
        "-c",
        "100000000000",
        "-o",
        file,
        "--",
        "true",
    ])?;
    let err = text(&out.stderr);
    ensure!(
        out.status.code() == Some(1),
        "pfm record of no samples: {} (expected exit 1): {err}",
        out.status
    );
    ensure!(
        err.lines()
            .any(|l| l.starts_with("pfm: no samples: task-clock counted ")
                && l.contains("less than one period")),
        "no 'pfm: no samples' line: {err:?}"
    );
    one_line_error(&["report", "-i", file], 1, "has no samples")
}

fn task_clock() -> TestResult {
    let own = "/tmp/pfm-record-clock.own";
    let me = me()?;
    let period = CLOCK_PERIOD.to_string();
    let run = CLOCK_RUN_MS.to_string();
    let out = pfm(&[
        "record",
        "-e",
        "task-clock",
        "-c",
        &period,
        "-o",
        CLOCK_FILE,
        "--",
        &me,
        CHILD_FLAG,
        "hot-cold",
        &run,
        own,
    ])?;
    ensure!(
        out.status.code() == Some(0),
        "pfm record: {} {}",
        out.status,
        text(&out.stderr)
    );
    let summary = text(&out.stderr);
    ensure!(
        summary.contains("[ pfm record: ") && summary.contains(CLOCK_FILE),
        "no summary line: {summary}"
    );
    let v = numbers(own, 3)?;
    let (hot_ns, cold_ns, t) = (v[0], v[1], v[2]);
    let r = report(CLOCK_FILE)?;
    show_rows(&r);
    let (hot, cold) = (samples_in(&r, "hot_work"), samples_in(&r, "cold_work"));
    let n = r.samples + r.lost;
    let expect = t / CLOCK_PERIOD;
    let share_own = hot_ns * 1000 / (hot_ns + cold_ns).max(1);
    let share_smpl = hot * 1000 / (hot + cold).max(1);
    diag(format!(
        "T = {t} ns (the workload's own CPU clock), T/P = {expect}; samples {} + lost {} \
         (counted {:?} ns); hot_work {hot}, cold_work {cold}, elsewhere {}; hot share {}.{}% \
         of the two functions' samples, {}.{}% of their own measured time",
        r.samples,
        r.lost,
        r.counted,
        r.samples - hot - cold,
        share_smpl / 10,
        share_smpl % 10,
        share_own / 10,
        share_own % 10
    ));
    ensure!(
        r.complete && r.event == "task-clock" && r.period == CLOCK_PERIOD,
        "{r:?}"
    );
    ensure!(
        n.abs_diff(expect) * 50 <= expect,
        "{n} samples, not within 2% of T/P = {expect}"
    );
    // The rest is the naps' system calls (the switches' cost on the debug
    // kernel is charged there: 2% to 27% of the samples, by the host's
    // load), the clock reads and the exec: at least half must resolve to
    // the two functions.
    ensure!(
        (hot + cold) * 2 >= r.samples,
        "only {} of {} samples in hot_work and cold_work",
        hot + cold,
        r.samples
    );
    ensure!(
        share_smpl.abs_diff(share_own) <= 50,
        "hot_work: {share_smpl}‰ of the samples, {share_own}‰ of the workload's own time"
    );
    let cold_own = 1000 - share_own;
    let cold_smpl = 1000 - share_smpl;
    ensure!(
        cold_smpl.abs_diff(cold_own) <= 50,
        "cold_work: {cold_smpl}‰ of the samples, {cold_own}‰ of the workload's own time"
    );
    let exe = std::path::Path::new(&me)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let top = r.rows.first().ok_or("no rows")?;
    ensure!(
        top.dso.as_deref() == Some(exe.as_str())
            && top.comm.as_deref() == Some(exe.as_str())
            && top
                .symbol
                .as_deref()
                .is_some_and(|s| s.ends_with("::hot_work")),
        "top row {top:?}, expected {exe}'s hot_work"
    );
    Ok(())
}

fn context_switches() -> TestResult {
    record_switches(false)
}

fn context_switches_whole() -> TestResult {
    record_switches(true)
}

/// `pfm record -e cs -c P` of the ping-pong workload: its main thread only
/// (`--no-inherit`), or the whole program (`whole`: the partner thread's
/// samples too, in the same buffer).
fn record_switches(whole: bool) -> TestResult {
    const PERIOD: u64 = 7;
    const EXCHANGES: u64 = 300;
    let file = "/tmp/pfm-record-cs.data";
    let own = "/tmp/pfm-record-cs.own";
    let me = me()?;
    let (period, n) = (PERIOD.to_string(), EXCHANGES.to_string());
    let mut args = vec!["record", "-e", "cs", "-c", &period, "-o", file];
    if !whole {
        args.push("--no-inherit");
    }
    args.extend(["--", &me, CHILD_FLAG, "ping-pong", &n, own]);
    let mut last = String::new();
    for attempt in 0..3 {
        let out = pfm(&args)?;
        ensure!(
            out.status.code() == Some(0),
            "pfm record: {} {}",
            out.status,
            text(&out.stderr)
        );
        let v = numbers(own, 3)?;
        let (own_main, since_fork, own_partner) = (v[0], v[1], v[2]);
        // What the module should have counted, and sampled: each thread's
        // own switches, floor(S/P) samples each.
        let (own_n, expected) = match whole {
            true => (
                own_main + own_partner,
                own_main / PERIOD + own_partner / PERIOD,
            ),
            false => (own_main, own_main / PERIOD),
        };
        let r = report(file)?;
        let counted = r.counted.ok_or("no counted in the report")?;
        last = format!(
            "attempt {attempt}: the workload's own switches: main {own_main} (main to end; \
             {since_fork} since its fork), partner {own_partner}; counted {counted}, \
             samples {} (lost {}), expected {expected} for N' = {own_n}",
            r.samples, r.lost
        );
        diag(&last);
        ensure!(
            own_main >= EXCHANGES && own_partner >= EXCHANGES,
            "{last}: fewer switches than exchanges"
        );
        ensure!(r.lost == 0, "{last}: lost samples");
        ensure!(r.inherit == whole, "{last}: the header's inherit");
        // The threads' floors sum to floor(counted/P) at most, and to one
        // less per thread beyond the first at least.
        let floor = counted / PERIOD;
        let threads = if whole { 2 } else { 1 };
        ensure!(
            r.samples <= floor && r.samples + (threads - 1) >= floor,
            "{last}: not within {threads} threads' floors of floor(counted/P) = {floor}"
        );
        // What the threads saw of themselves the module counted too.
        ensure!(
            counted >= own_n && r.samples >= expected,
            "{last}: below the threads' own readings"
        );
        // And no more than the main thread's switches since its fork
        // (the count starts at the exec, after the fork) when it alone
        // is counted.
        ensure!(
            whole || counted <= since_fork,
            "{last}: above the main thread's own switches since its fork"
        );
        if counted == own_n {
            ensure!(
                r.samples == expected,
                "{last}: not the threads' floor(N'/P)"
            );
            return Ok(());
        }
    }
    if !whole {
        // The count starts at the exec; `own_main` at main(): a switch
        // between the two (the exec's and the start's page faults, a
        // preemption on a busy host) is counted and seen by no reading
        // of the thread's own but the one since its fork, which bounded
        // the count above in every try, as floor(counted/P) bounded the
        // samples.
        diag(format!(
            "the exec or the start switched before main() in every try: {last}"
        ));
    } else {
        // The partner's exit path, after its last reading, can switch
        // (blocked on a lock: the mmap lock, which pfm's reads of
        // /proc/PID/maps take, is the likely one; not traced) up to
        // `exit_mm`, where the module stops counting it: no reading of
        // its own sees that
        // (pfm_test_inherit pins such tails with the scheduler's trace;
        // pfm_test_smpl_family holds each thread's entries to readings
        // taken around a STOP, with no exit). The bounds above held.
        diag(format!(
            "the partner's exit path switched after its last reading in every try: {last}"
        ));
    }
    Ok(())
}

/// `pfm record -e cs -c P --random M --random-seed S --no-inherit` of the
/// ping-pong: each period P plus the generator's amount, the sequence
/// `perfmon::random::periods` predicts for S. The samples are exactly the
/// period ends within the count pfm computed from the entries' own reset
/// values (`counted`), in every try; and within the workload's own N' when
/// the module counted exactly those. The table names the range and seed.
fn context_switches_random() -> TestResult {
    const PERIOD: u64 = 7;
    const MASK: u64 = 7;
    const SEED: u64 = 0x51ed;
    const EXCHANGES: u64 = 300;
    let file = "/tmp/pfm-record-cs-random.data";
    let own = "/tmp/pfm-record-cs-random.own";
    let me = me()?;
    let (period, mask, seed, n) = (
        PERIOD.to_string(),
        MASK.to_string(),
        SEED.to_string(),
        EXCHANGES.to_string(),
    );
    let predicted: Vec<u64> = perfmon::random::periods(PERIOD, MASK, SEED)
        .ok_or("mask refused by the library")?
        .take(1000)
        .collect();
    // Period ends at or below `x`: P, then the drawn periods.
    let ends = |x: u64| {
        let (mut n, mut at) = (0u64, PERIOD);
        while at <= x {
            at += predicted.get(n as usize).copied().unwrap_or(u64::MAX / 2);
            n += 1;
        }
        n
    };
    let mut last = String::new();
    let mut exact = false;
    for attempt in 0..3 {
        let out = pfm(&[
            "record",
            "-e",
            "cs",
            "-c",
            &period,
            "--random",
            &mask,
            "--random-seed",
            &seed,
            "--no-inherit",
            "-o",
            file,
            "--",
            &me,
            CHILD_FLAG,
            "ping-pong",
            &n,
            own,
        ])?;
        ensure!(
            out.status.code() == Some(0),
            "pfm record: {} {}",
            out.status,
            text(&out.stderr)
        );
        let v = numbers(own, 3)?;
        let (own_n, since_fork) = (v[0], v[1]);
        let r = report(file)?;
        let counted = r.counted.ok_or("no counted in the report")?;
        last = format!(
            "attempt {attempt}: N' = {own_n}, counted {counted}, samples {} (lost {}); \
             period ends within counted {}, within N' {}",
            r.samples,
            r.lost,
            ends(counted),
            ends(own_n)
        );
        diag(&last);
        ensure!(r.lost == 0, "{last}: lost samples");
        ensure!(
            r.samples == ends(counted),
            "{last}: not the period ends within counted"
        );
        // The periods average P + M/2: fewer samples than P alone gives.
        ensure!(
            r.samples < counted / PERIOD,
            "{last}: as many as fixed periods of {PERIOD} would give"
        );
        // The count starts at the exec: between the thread's own
        // switches from main and since its fork (see `record_switches`).
        ensure!(
            (own_n..=since_fork).contains(&counted),
            "{last}: outside the thread's own switches from main and since its fork ({since_fork})"
        );
        if counted == own_n {
            ensure!(
                r.samples == ends(own_n),
                "{last}: not the period ends within N'"
            );
            exact = true;
            break;
        }
    }
    if !exact {
        diag(format!(
            "the exec or the start switched before main() in every try: {last}"
        ));
    }
    let table = pfm(&["report", "-i", file])?;
    let t = text(&table.stdout);
    let want = format!("# periods randomised: 7 to 14 events, seed {SEED:#x}");
    ensure!(t.contains(&want), "the table lacks '{want}': {t}");
    Ok(())
}

fn pprof_and_flamegraph() -> TestResult {
    let (pb, svg) = ("/tmp/pfm-record.pb.gz", "/tmp/pfm-record.svg");
    let out = pfm(&[
        "report",
        "-i",
        CLOCK_FILE,
        "--pprof",
        pb,
        "--flamegraph",
        svg,
        "-o",
        "/tmp/pfm-record.txt",
    ])?;
    ensure!(out.status.success(), "pfm report: {}", text(&out.stderr));
    let table = std::fs::read_to_string("/tmp/pfm-record.txt").ctx("the table")?;
    for line in table.lines().take(12) {
        diag(format!("table| {line}"));
    }
    ensure!(table.contains("::hot_work"), "the table names no hot_work");
    let r = report(CLOCK_FILE)?;
    // pprof: gunzip, decode, the samples per leaf function.
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(pb).ctx(pb)?)
        .read_to_end(&mut raw)
        .ctx("gunzip the pprof file")?;
    let prof = pfm_json::pprof::Profile::decode(raw.as_slice()).ctx("decode profile.proto")?;
    let mut by_function: std::collections::HashMap<String, i64> = Default::default();
    for s in &prof.sample {
        let leaf = s.location_id.first().copied().unwrap_or(0);
        let name = prof.function_name(leaf).to_string();
        *by_function.entry(name).or_default() += s.value.first().copied().unwrap_or(0);
    }
    let total: i64 = by_function.values().sum();
    let top = by_function
        .iter()
        .max_by_key(|(_, v)| **v)
        .map(|(n, v)| (n.clone(), *v))
        .unwrap_or_default();
    diag(format!(
        "pprof: {} samples ({} in {}), {} functions, {} locations, {} mappings",
        total,
        top.1,
        top.0,
        prof.function.len(),
        prof.location.len(),
        prof.mapping.len()
    ));
    ensure!(
        total as u64 == r.samples,
        "pprof has {total} samples, the report {}",
        r.samples
    );
    ensure!(
        top.0.ends_with("::hot_work"),
        "pprof's top function {}",
        top.0
    );
    ensure!(
        top.1 as u64 == samples_in(&r, "hot_work"),
        "pprof's hot_work {} samples, the report's {}",
        top.1,
        samples_in(&r, "hot_work")
    );
    // The SVG: well-formed XML naming hot_work.
    let bytes = std::fs::read(svg).ctx(svg)?;
    let mut reader = quick_xml::Reader::from_reader(bytes.as_slice());
    reader.config_mut().check_end_names = true;
    let mut buf = Vec::new();
    let mut titles = String::new();
    loop {
        match reader.read_event_into(&mut buf) {
            Ok(quick_xml::events::Event::Eof) => break,
            Ok(quick_xml::events::Event::Text(t)) => {
                titles.push_str(&String::from_utf8_lossy(&t));
            }
            Ok(_) => {}
            Err(e) => {
                return Err(format!(
                    "{svg} is not XML at {}: {e}",
                    reader.buffer_position()
                ))
            }
        }
        buf.clear();
    }
    diag(format!("flame graph: {} bytes", bytes.len()));
    ensure!(
        titles.contains("hot_work"),
        "the flame graph names no hot_work"
    );
    Ok(())
}

/// `pfm record -g`: the assembly chain `pfm_chain_a → pfm_chain_b →
/// pfm_chain_c` (`pfm_guest::frames`, each with a frame) sampled with call
/// chains; in the pprof profile every sample whose leaf is `pfm_chain_c`
/// has `pfm_chain_b` and `pfm_chain_a` as its next two frames (the stack
/// a;b;c), and the flame graph names all three.
fn call_graph() -> TestResult {
    let (data, pb, svg) = (
        "/tmp/pfm-record-chain.data",
        "/tmp/pfm-record-chain.pb.gz",
        "/tmp/pfm-record-chain.svg",
    );
    let me = me()?;
    let out = pfm(&[
        "record",
        "-g",
        "-e",
        "task-clock",
        "-c",
        "1000000",
        "-o",
        data,
        "--",
        &me,
        CHILD_FLAG,
        "chain",
        "300",
    ])?;
    ensure!(out.status.success(), "pfm record -g: {}", text(&out.stderr));
    let out = pfm(&["report", "-i", data, "--pprof", pb, "--flamegraph", svg])?;
    ensure!(out.status.success(), "pfm report: {}", text(&out.stderr));
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(pb).ctx(pb)?)
        .read_to_end(&mut raw)
        .ctx("gunzip the pprof file")?;
    let prof = pfm_json::pprof::Profile::decode(raw.as_slice()).ctx("decode profile.proto")?;
    let (mut in_c, mut abc, mut all) = (0i64, 0i64, 0i64);
    let mut odd = None;
    for s in &prof.sample {
        let n = s.value.first().copied().unwrap_or(0);
        all += n;
        let names: Vec<String> = s
            .location_id
            .iter()
            .take(3)
            .map(|&l| prof.function_name(l).to_string())
            .collect();
        if names.first().map(String::as_str) != Some("pfm_chain_c") {
            continue;
        }
        in_c += n;
        if names[1..] == ["pfm_chain_b", "pfm_chain_a"] {
            abc += n;
        } else {
            odd.get_or_insert(names);
        }
    }
    let svg_text = std::fs::read_to_string(svg).ctx(svg)?;
    diag(format!(
        "{all} samples, {in_c} in pfm_chain_c, {abc} of them under pfm_chain_a;pfm_chain_b; first other stack {odd:?}"
    ));
    // The rest is the workload's start and end (the exec, the runtime's
    // set-up, page faults of a static binary under TCG: ~50 ms here), not
    // judged: what is judged is every sample in pfm_chain_c. The chain ran
    // at least 300 ms of the thread's own CPU time (its clock, the
    // sampled task-clock's own), so at least 299 periods of 1 ms ended in
    // it; of those, only the ones that ended in the ~30 clock reads
    // between its 10 ms chunks (a few µs each) are not in pfm_chain_c:
    // 200 leaves a margin of 69 for them.
    ensure!(
        in_c >= 200,
        "{in_c} of {all} samples in pfm_chain_c for 300 ms"
    );
    ensure!(
        abc == in_c,
        "{} samples in pfm_chain_c without a;b above",
        in_c - abc
    );
    for f in ["pfm_chain_a", "pfm_chain_b", "pfm_chain_c"] {
        ensure!(svg_text.contains(f), "the flame graph does not name {f}");
    }
    Ok(())
}

fn attach() -> TestResult {
    let mut child = Child::spawn("hot-cold", &["60000", "/tmp/pfm-record-tid.own"])?;
    std::thread::sleep(Duration::from_millis(100));
    let r = attach_runs(child.pid());
    child.kill();
    r
}

/// `-t` then `-p` of `pid`, a running hot-cold workload.
fn attach_runs(pid: u32) -> TestResult {
    let id = pid.to_string();
    for (flag, file) in [
        ("-t", "/tmp/pfm-record-tid.data"),
        ("-p", "/tmp/pfm-record-pid.data"),
    ] {
        let out = pfm(&[
            "record",
            "-c",
            "1000000",
            flag,
            &id,
            "--duration",
            "0.5",
            "-o",
            file,
        ])?;
        ensure!(
            out.status.success(),
            "pfm record {flag}: {}",
            text(&out.stderr)
        );
        let r = report(file)?;
        show_rows(&r);
        let hot = samples_in(&r, "hot_work");
        ensure!(r.tids == Some(vec![pid]), "{flag}: tids {:?}", r.tids);
        let pids = (flag == "-p").then(|| vec![pid]);
        ensure!(r.pids == pids, "{flag}: pids {:?}", r.pids);
        ensure!(
            r.samples >= 100,
            "{flag}: {} samples in 0.5 s of a busy thread",
            r.samples
        );
        ensure!(
            hot * 2 >= r.samples,
            "{flag}: {hot} of {} samples in hot_work",
            r.samples
        );
    }
    Ok(())
}

/// `pfm ARGS` fails with `code` and one line on standard error that
/// contains `what`.
fn one_line_error(args: &[&str], code: i32, what: &str) -> TestResult {
    let out = pfm(args)?;
    let err = text(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    ensure!(
        out.status.code() == Some(code),
        "pfm {}: {} (expected exit {code}): {err}",
        args.join(" "),
        out.status
    );
    ensure!(
        lines.len() == 1 && lines[0].starts_with("pfm: ") && lines[0].contains(what),
        "pfm {}: not one line with '{what}': {err:?}",
        args.join(" ")
    );
    Ok(())
}

fn errors() -> TestResult {
    let me = me()?;
    one_line_error(
        &["record", "-e", "task-clock", "--", "true"],
        2,
        "-c PERIOD",
    )?;
    one_line_error(
        &["record", "-e", "task-clok", "-c", "5", "--", "true"],
        1,
        "unknown event 'task-clok'",
    )?;
    one_line_error(
        &["record", "-e", "cs", "-F", "100", "--", "true"],
        2,
        "-F FREQ is for task-clock",
    )?;
    one_line_error(
        &[
            "record",
            "-c",
            "5",
            "-o",
            "/proc/no-such-dir/pfm.data",
            "--",
            "true",
        ],
        1,
        "cannot create /proc/no-such-dir/pfm.data",
    )?;
    one_line_error(&["report", "-i", &me], 1, "not a pfm record file")?;
    one_line_error(
        &["report", "-i", "/tmp/no-such-file.data"],
        1,
        "cannot read /tmp/no-such-file.data",
    )?;
    Ok(())
}

/// `pfm ARGS` succeeds; its standard output.
fn pfm_ok(args: &[&str]) -> Result<String, String> {
    let out = pfm(args)?;
    ensure!(
        out.status.success(),
        "pfm {}: {} {}",
        args.join(" "),
        out.status,
        text(&out.stderr)
    );
    Ok(text(&out.stdout))
}

/// `pfm report ARGS --json`, deserialized.
fn report_with(args: &[&str]) -> Result<Report, String> {
    let mut all = vec!["report"];
    all.extend_from_slice(args);
    all.push("--json");
    let out = pfm_ok(&all)?;
    serde_json::from_str(out.trim()).map_err(|e| format!("{e}: {out}"))
}

/// The row of function `name` (a `sym` key).
fn row_of<'a>(r: &'a Report, name: &str) -> Result<&'a pfm_json::ReportRow, String> {
    r.rows
        .iter()
        .find(|row| row.symbol.as_deref() == Some(name))
        .ok_or_else(|| format!("no row of {name}"))
}

/// The samples of the paths of `nodes` that go through `path` in that
/// order from one of its roots' descendants (`path[0]` anywhere, the rest
/// right below each other), up to the end of `path`.
fn path_samples(nodes: &[pfm_json::ChainNode], path: &[&str]) -> u64 {
    fn from(n: &pfm_json::ChainNode, path: &[&str]) -> u64 {
        match path {
            [] => 0,
            [last] => u64::from(n.symbol == *last) * n.samples,
            [first, rest @ ..] if n.symbol == *first => n.next.iter().map(|m| from(m, rest)).sum(),
            _ => 0,
        }
    }
    nodes
        .iter()
        .map(|n| from(n, path) + path_samples(&n.next, path))
        .sum()
}

/// `pfm script --json` of `file`: every line the documented type.
fn script_json(file: &str) -> Result<Vec<pfm_json::ScriptSample>, String> {
    let out = pfm_ok(&["script", "-i", file, "--json"])?;
    out.lines()
        .map(|l| serde_json::from_str(l).map_err(|e| format!("{e}: {l}")))
        .collect()
}

/// `pfm annotate SYMBOL --json` of `file`: one function's document.
fn annotate_json(file: &str, symbol: &str) -> Result<pfm_json::Annotation, String> {
    let out = pfm_ok(&["annotate", "-i", file, symbol, "--json"])?;
    let lines: Vec<&str> = out.lines().collect();
    ensure!(
        lines.len() == 1,
        "annotate {symbol}: {} documents",
        lines.len()
    );
    serde_json::from_str(lines[0]).map_err(|e| format!("{e}: {out}"))
}

/// A `-g` recording of the chain workload (`pfm_chain_a → pfm_chain_b →
/// pfm_chain_c`, whose loop takes the samples) read back through every
/// view: the children counts, `--sort comm,sym`, caller and callee
/// trees, `pfm script` (text and JSON) and `pfm annotate`, each against
/// what the workload is: its hot function's samples all under b and a,
/// and in its loop's instructions. `event`/`period`: the recording's.
fn chain_views(data: &str, event: &str, period: u64) -> TestResult {
    let exe = std::path::Path::new(&me()?)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (a, b, c) = ("pfm_chain_a", "pfm_chain_b", "pfm_chain_c");
    // Children: the default of a -g recording, and --children.
    let r = report_with(&["-i", data, "--children"])?;
    let (ra, rb, rc) = (row_of(&r, a)?, row_of(&r, b)?, row_of(&r, c)?);
    let children = |row: &pfm_json::ReportRow| row.children.unwrap_or(0);
    diag(format!(
        "{} samples; children/self: a {}/{}, b {}/{}, c {}/{}",
        r.samples,
        children(ra),
        ra.samples,
        children(rb),
        rb.samples,
        children(rc),
        rc.samples
    ));
    ensure!(r.children, "--children: the document says no children");
    ensure!(rc.samples >= 100, "{} samples in {c}", rc.samples);
    ensure!(
        children(rc) == rc.samples,
        "{c} calls nothing: children {} != self {}",
        children(rc),
        rc.samples
    );
    ensure!(
        children(rb) >= rc.samples && children(ra) >= children(rb),
        "a's and b's children must hold c's samples"
    );
    ensure!(
        ra.samples * 20 <= rc.samples && rb.samples * 20 <= rc.samples,
        "a and b have a frame and a call each: their self samples must be few"
    );
    let dflt = report_with(&["-i", data])?;
    ensure!(
        dflt.children && dflt.call_graph.as_deref() == Some("caller"),
        "a -g recording's default: children and caller trees ({:?})",
        dflt.call_graph
    );
    let table = pfm_ok(&["report", "-i", data, "--children"])?;
    for line in table.lines().take(16) {
        diag(format!("table| {line}"));
    }
    ensure!(
        table.contains("# Children      Self")
            && table.lines().any(|l| l.contains("[.] pfm_chain_a")),
        "the --children table"
    );
    // --sort comm,sym: those two keys, every sample once.
    let s = report_with(&["-i", data, "--sort", "comm,sym", "--no-children"])?;
    let sum: u64 = s.rows.iter().map(|row| row.samples).sum();
    ensure!(
        s.sort == "comm,sym" && sum == s.samples,
        "--sort comm,sym: {} over {sum} samples of {}",
        s.sort,
        s.samples
    );
    ensure!(
        s.rows
            .iter()
            .all(|row| row.comm.is_some() && row.symbol.is_some() && row.dso.is_none()),
        "--sort comm,sym: rows with other keys"
    );
    let sc = row_of(&s, c)?;
    ensure!(
        sc.comm.as_deref() == Some(exe.as_str()) && sc.samples == rc.samples,
        "--sort comm,sym: {c}'s row {sc:?}"
    );
    // -g caller (children): a's tree goes a → b → c for all of c's samples.
    let g = report_with(&["-i", data, "-g", "caller"])?;
    let tree = row_of(&g, a)?
        .callchain
        .clone()
        .ok_or("no call tree under a")?;
    let abc = path_samples(&tree, &[a, b, c]);
    diag(format!(
        "-g caller: a → b → c {abc} of {c}'s {}",
        rc.samples
    ));
    ensure!(
        abc == rc.samples,
        "-g caller: a → b → c has {abc} samples, c has {}",
        rc.samples
    );
    // --no-children -g caller: c's stacks from the outermost caller down,
    // through a and b.
    let g = report_with(&["-i", data, "--no-children", "-g", "caller,0"])?;
    let tree = row_of(&g, c)?.callchain.clone().ok_or("no tree under c")?;
    ensure!(
        path_samples(&tree, &[a, b, c]) == rc.samples,
        "--no-children -g caller: c's stacks without a → b above"
    );
    // -g callee: from c up to its callers.
    let g = report_with(&["-i", data, "--no-children", "-g", "callee"])?;
    let tree = row_of(&g, c)?.callchain.clone().ok_or("no tree under c")?;
    ensure!(
        tree.len() == 1 && path_samples(&tree, &[c, b, a]) == rc.samples,
        "-g callee: c's tree {:?}",
        tree.first().map(|n| (&n.symbol, n.samples))
    );
    // pfm script: a line per sample, then its frames, c's under b and a.
    let script = pfm_ok(&["script", "-i", data])?;
    let blocks: Vec<&str> = script
        .split("\n\n")
        .filter(|b| !b.trim().is_empty())
        .collect();
    for line in script.lines().take(5) {
        diag(format!("script| {line}"));
    }
    ensure!(
        blocks.len() as u64 == r.samples,
        "script: {} samples, the report {}",
        blocks.len(),
        r.samples
    );
    let mut in_c = 0u64;
    for blk in &blocks {
        let lines: Vec<&str> = blk.lines().collect();
        ensure!(
            lines[0].contains(&format!(" {event}:"))
                && lines[0].contains(&format!(" {period} "))
                && lines[1..].iter().all(|l| l.starts_with('\t')),
            "script block: {blk}"
        );
        if lines.get(1).is_some_and(|l| l.contains(" pfm_chain_c+0x")) {
            in_c += 1;
            ensure!(
                lines.get(2).is_some_and(|l| l.contains(" pfm_chain_b+0x"))
                    && lines.get(3).is_some_and(|l| l.contains(" pfm_chain_a+0x")),
                "script: c's sample without b and a above: {blk}"
            );
        }
    }
    ensure!(
        in_c == rc.samples,
        "script: {in_c} samples in c, report {}",
        rc.samples
    );
    // pfm script --json: the same samples, typed.
    let samples = script_json(data)?;
    ensure!(
        samples.len() as u64 == r.samples,
        "script --json: {} samples",
        samples.len()
    );
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut last_time: std::collections::HashMap<u32, u64> = Default::default();
    let mut in_c = 0u64;
    for s in &samples {
        ensure!(
            s.event == event && s.period == period && usize::from(s.cpu) < cpus,
            "script --json: {s:?}"
        );
        let prev = last_time.insert(s.tid, s.time_ns).unwrap_or(0);
        ensure!(
            s.time_ns >= prev,
            "script --json: time goes back in thread {}",
            s.tid
        );
        let names: Vec<Option<&str>> = s
            .stack
            .iter()
            .take(3)
            .map(|f| f.symbol.as_deref())
            .collect();
        if names.first() == Some(&Some(c)) {
            in_c += 1;
            ensure!(
                names[1..] == [Some(b), Some(a)] && s.stack[0].offset.is_some(),
                "script --json: c's sample {s:?}"
            );
            ensure!(
                s.comm == exe && s.stack[0].dso.ends_with(&exe),
                "script --json: c's comm and dso {s:?}"
            );
        }
    }
    ensure!(in_c == rc.samples, "script --json: {in_c} samples in c");
    // pfm annotate: c's samples on its instructions, the loop's.
    let ann = annotate_json(data, c)?;
    let at: u64 = ann.instructions.iter().map(|i| i.samples).sum();
    let in_loop: u64 = ann
        .instructions
        .iter()
        .filter(|i| {
            ["test r9", "je ", "dec r8", "jne "]
                .iter()
                .any(|p| i.text.starts_with(p))
        })
        .map(|i| i.samples)
        .sum();
    for i in ann.instructions.iter().filter(|i| i.samples > 0) {
        diag(format!(
            "annotate| {:6.2}% {:#x} {}",
            i.pct, i.address, i.text
        ));
    }
    ensure!(
        ann.symbol == c && ann.samples == rc.samples && at == ann.samples,
        "annotate {c}: {} samples ({at} at instructions), report {}",
        ann.samples,
        rc.samples
    );
    ensure!(
        in_loop * 100 >= ann.samples * 95,
        "annotate {c}: only {in_loop} of {} samples in the loop",
        ann.samples
    );
    let text_out = pfm_ok(&["annotate", "-i", data, c])?;
    ensure!(
        text_out.contains("Percent |") && text_out.contains("<pfm_chain_c>:"),
        "annotate's text: {text_out}"
    );
    Ok(())
}

/// The `-g` file of [`call_graph`], through report's views, script and
/// annotate.
fn report_views() -> TestResult {
    chain_views("/tmp/pfm-record-chain.data", "task-clock", 1_000_000)
}

/// `--random`'s file of [`context_switches_random`]: each sample's own
/// period, in `pfm script --json`, is the generator's sequence for the
/// seed (the written P, then the draws), and the pprof profile's event
/// values are their sum.
fn random_periods() -> TestResult {
    const PERIOD: u64 = 7;
    const MASK: u64 = 7;
    const SEED: u64 = 0x51ed;
    let file = "/tmp/pfm-record-cs-random.data";
    let pb = "/tmp/pfm-record-cs-random.pb.gz";
    let samples = script_json(file)?;
    let periods: Vec<u64> = samples.iter().map(|s| s.period).collect();
    let mut want = vec![PERIOD];
    want.extend(
        perfmon::random::periods(PERIOD, MASK, SEED)
            .ok_or("mask refused by the library")?
            .take(periods.len().saturating_sub(1)),
    );
    diag(format!(
        "{} samples, periods {:?}...",
        periods.len(),
        &periods[..periods.len().min(8)]
    ));
    ensure!(!periods.is_empty(), "no samples");
    ensure!(
        periods == want,
        "the samples' periods are not the seed's sequence: {periods:?} vs {want:?}"
    );
    pfm_ok(&["report", "-i", file, "--pprof", pb])?;
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(pb).ctx(pb)?)
        .read_to_end(&mut raw)
        .ctx("gunzip the pprof file")?;
    let prof = pfm_json::pprof::Profile::decode(raw.as_slice()).ctx("decode profile.proto")?;
    let events: i64 = prof
        .sample
        .iter()
        .map(|s| s.value.get(1).copied().unwrap_or(0))
        .sum();
    let sum: u64 = periods.iter().sum();
    ensure!(
        events as u64 == sum,
        "pprof's events {events}, the samples' periods {sum}"
    );
    ensure!(
        sum != PERIOD * periods.len() as u64,
        "the periods are all {PERIOD}: not randomised"
    );
    Ok(())
}

/// `pfm record -g -e cpu-cycles` of the chain workload on
/// `intel_arch_sim`, through the same views as on soft.
fn hw_call_graph() -> TestResult {
    let data = "/tmp/pfm-record-hw-chain.data";
    let me = me()?;
    pfm_ok(&[
        "record",
        "-g",
        "-e",
        "cpu-cycles",
        "-c",
        "1000000",
        "-o",
        data,
        "--",
        &me,
        CHILD_FLAG,
        "chain",
        "300",
    ])?;
    chain_views(data, "cpu-cycles", 1_000_000)
}

fn main() {
    own_child_modes();
    pfm_guest::child::dispatch();
    let mut t = Tap::new(PLAN);
    pfm_guest::watchdog(Duration::from_secs(700));
    if find_pfm().is_none() {
        t.bail_out("no pfm binary (PFM_BIN, /bin/pfm, PATH)");
    }
    t.require("insmod perfmon.ko", module::insmod(&[]));
    t.run(
        "task-clock: shares of hot_work and cold_work within 5 points of their own time, T/P samples within 2%",
        task_clock,
    );
    t.run(
        "context switches: exactly floor(N'/P) samples for the workload's own N' switches",
        context_switches,
    );
    t.run(
        "context switches of a whole program: the partner thread's samples too, floor(N'/P) for each thread's own N'",
        context_switches_whole,
    );
    t.run(
        "--random: the seed's periods, the samples exactly the period ends within the count",
        context_switches_random,
    );
    t.run(
        "--pprof decodes to the report's samples, --flamegraph is XML naming hot_work",
        pprof_and_flamegraph,
    );
    t.run(
        "-t TID and -p PID for --duration: samples resolve to the workload's functions",
        attach,
    );
    t.run(
        "-g: call chains, pfm_chain_c's samples under pfm_chain_a;pfm_chain_b in the pprof profile",
        call_graph,
    );
    t.run(
        "-g views: --children, --sort comm,sym, -g caller/callee trees, script (text, --json) and annotate of pfm_chain_c against the workload",
        report_views,
    );
    t.run(
        "--random: each sample's own period in script --json is the seed's sequence; pprof's events their sum",
        random_periods,
    );
    t.run("errors: one line each, with their exit status", errors);
    t.run(
        "no samples: pfm record and pfm report say so and exit 1",
        no_samples,
    );
    t.run(
        "perf's habits: -o - | report -i -, FILE.old, --call-graph dwarf, -a, no such thread, record --help",
        perf_habits,
    );
    t.run("rmmod perfmon", module::rmmod);
    let hw = module::insmod(&["pmu=intel_arch_sim"]);
    let loaded = hw.is_ok();
    t.run("insmod perfmon.ko pmu=intel_arch_sim", || hw);
    if loaded {
        t.run(
            "intel_arch_sim: cpu-cycles samples (0.8 T/P to wall/P) in hot_work and cold_work as their own time",
            hw_cycles,
        );
        t.run(
            "intel_arch_sim: -g cpu-cycles of the chain: children, trees, script and annotate",
            hw_call_graph,
        );
        t.run("rmmod perfmon (intel_arch_sim)", module::rmmod);
    } else {
        t.skip("intel_arch_sim: cpu-cycles samples", "insmod failed");
        t.skip("intel_arch_sim: -g views", "insmod failed");
        t.skip("rmmod perfmon (intel_arch_sim)", "insmod failed");
    }
    t.finish();
}
