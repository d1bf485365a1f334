//! pfm_test_cli: the `pfm` tool end to end, as a user runs it.
//!
//! On `pmu=soft`: `pfm info` / `pfm list` (table and --json); every JSON
//! document deserialized into the documented types of `pfm_json`, which
//! reject unknown fields (and a document with an added field is shown to
//! be rejected); `pfm stat` from the first instruction (50 sleeps → 50..=60
//! switches), its table, `--no-big-num` and column alignment, CSV (`-x`:
//! field counts with and without `-r` and `-I`), `-r 3` statistics against
//! runs of 10, 20 and 30 sleeps, `-I` deltas adding up exactly to the
//! totals (command and thread mode), exit statuses and signals, one-line
//! usage errors and event typos, Ctrl-C totals. Whole programs: a shell
//! whose 3 children make 100 sleeps each, counted whole by default (at
//! least their 300 switches, perf inherit=1 within 5%), each child's row
//! in --per-thread (its tid, its name, the rows adding up to the total),
//! the shell alone with --no-inherit; -p PID of a process with 3 sleeping
//! threads and threads it creates while counted: every thread a row, one
//! total, perf alike.
//!
//! On `pmu=soft soft_counters=2`, multiplexing: more events than counters
//! in event sets, against oracles derived where they are checked (no
//! tolerance): the module's exact charge (every set's task-clock estimate
//! is the thread's whole running time), the command's own CPU clock and
//! rusage around it, the conservation of context switches over the sets
//! (at least the command's sleeps, at most its own getrusage count + 1);
//! first-fit sets, groups kept whole, the (xx.xx%) shares adding up to
//! 100 within their rounding, `<not counted>`, one-line errors, overflow
//! switching's exact split of the switches, intervals adding up.
//!
//! On `pmu=intel_arch_sim` with LIBPFM_FORCE_PMU=skl (libpfm4's Skylake
//! table): `pfm list` shows libpfm4's events; `pfm stat -e
//! INST_RETIRED.ANY_P:u,...` programs exactly the PMC values libpfm4
//! encodes (INT cleared), read back twice: from pfm's PFM_IOC_WRITE_PMCS
//! as the kernel received it (pfm runs under ptrace; the ABI has no call
//! that reads a PMC back), the call succeeding, and through what the
//! simulated PMU counts, which depends on each PMC's event select, unit
//! mask and ring bits (core and reference cycles at 1 per ns, instructions
//! at 1 per 2 ns: IPC 0.5; nothing in kernel mode). An unknown name gets
//! one line naming the closest names. perf's spellings (issue 34): on
//! soft `task-clock:u`, `cpu-clock`, `cs:k`, `faults`, `minor-faults:u`,
//! `major-faults`; on intel_arch_sim `cycles`,
//! `instructions:u`, `r5100c0`, `cache-misses` written as the PMC values
//! perf's kernel programs for them (Linux's `intel_perfmon_event_map`, INT
//! dropped, user mode), read back through ptrace; what the model cannot
//! count (`alignment-faults`, `cycles` on soft; `task-clock`,
//! `stalled-cycles-frontend`, `:G` on Intel) one line saying why. Last,
//! without the module, "module not loaded".
//!
//! The tool is found through $PFM_BIN, next to this program, as /bin/pfm,
//! or in PATH.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use pfm_guest::child::{Child, CHILD_FLAG};
use pfm_guest::tap::diag;
use pfm_guest::{ensure, module, raw, ResultExt, Tap, TestResult};
use pfm_json::{Info, List, Stat, StatKind, Stats, SCHEMA_VERSION};

const PLAN: usize = 44;

/// libpfm4's PMU table the hardware cases force.
const FORCED_PMU: &str = "skl";

/// IA32_PERFEVTSEL values of the SDM: INST_RETIRED.ANY_P (event C0H, umask
/// 00H) and CPU_CLK_UNHALTED.THREAD_P (3CH/00H), USR (bit 16) and EN (bit
/// 22) set as libpfm4 encodes them, INT (bit 20) cleared as pfm must.
const INST_RETIRED_ANY_P_U: u64 = 0x4100c0;
const CPU_CLK_THREAD_P_U: u64 = 0x41003c;

fn find_pfm() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("PFM_BIN") {
        return Some(PathBuf::from(p));
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("pfm")));
    let candidates = beside
        .into_iter()
        .chain(["/bin/pfm".into(), "/usr/bin/pfm".into()]);
    for c in candidates {
        if c.is_file() {
            return Some(c);
        }
    }
    perfmon::process::find_program("pfm".as_ref())
}

fn me() -> Result<String, String> {
    Ok(std::env::current_exe()
        .ctx("current_exe")?
        .to_string_lossy()
        .into_owned())
}

struct Pfm {
    path: PathBuf,
}

impl Pfm {
    /// Runs pfm with `args`, stdin from /dev/null, without
    /// LIBPFM_FORCE_PMU, killed after 60 s.
    fn run(&self, args: &[&str]) -> Result<Output, String> {
        self.run_env(args, &[])
    }

    /// The same with extra environment variables. The output is read while
    /// pfm runs (a listing can be larger than a pipe holds).
    fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Result<Output, String> {
        // This program set LIBPFM_FORCE_PMU for its own libpfm4; pfm gets it
        // only where a case says so.
        let child = Command::new(&self.path)
            .args(args)
            .env_remove("LIBPFM_FORCE_PMU")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("run {}: {e}", self.path.display()))?;
        let pid = child.id();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        let out = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(out) => out.ctx("collect output")?,
            Err(_) => {
                let _ = perfmon::process::send_signal(pid, libc::SIGKILL);
                return Err(format!("pfm {} still running after 60 s", args.join(" ")));
            }
        };
        diag(format!("$ pfm {}  -> {}", args.join(" "), out.status));
        Ok(out)
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn show(label: &str, s: &str) {
    for line in s.lines().filter(|l| !l.trim().is_empty()).take(40) {
        diag(format!("{label}| {line}"));
    }
}

/// Every JSON line of `s` (lines starting with `{`) as a `T`: the documented
/// types reject unknown fields, so any undocumented field fails here.
fn docs<T: serde::de::DeserializeOwned>(s: &str) -> Result<Vec<T>, String> {
    s.lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .map(|l| serde_json::from_str::<T>(l).map_err(|e| format!("{e} in {l}")))
        .collect()
}

/// The one JSON document of `s`.
fn doc<T: serde::de::DeserializeOwned>(s: &str) -> Result<T, String> {
    let mut all = docs::<T>(s)?;
    ensure!(all.len() == 1, "{} JSON documents in {s:?}", all.len());
    all.pop().ok_or_else(|| "no JSON".to_string())
}

fn value_of(s: &Stat, event: &str) -> Result<u64, String> {
    s.counters
        .iter()
        .find(|c| c.event == event)
        .map(|c| c.value)
        .ok_or_else(|| format!("no {event} in {s:?}"))
}

fn check_version(v: u32) -> TestResult {
    ensure!(
        v == SCHEMA_VERSION,
        "schema_version {v}, documented {SCHEMA_VERSION}"
    );
    Ok(())
}

fn info(pfm: &Pfm) -> TestResult {
    let t = pfm.run(&["info"])?;
    show("info", &text(&t.stdout));
    ensure!(t.status.success(), "pfm info failed: {}", text(&t.stderr));
    let table = text(&t.stdout);
    ensure!(table.contains("soft"), "no model in:\n{table}");
    let j = pfm.run(&["info", "--json"])?;
    ensure!(
        j.status.success(),
        "pfm info --json failed: {}",
        text(&j.stderr)
    );
    let v: Info = doc(&text(&j.stdout))?;
    check_version(v.schema_version)?;
    let raw = perfmon::Context::open()
        .ctx("open")?
        .raw_info()
        .ctx("GET_INFO")?;
    ensure!(v.abi_version == raw.abi_version, "abi_version");
    ensure!(v.model == "soft", "model {}", v.model);
    ensure!(v.counter_width == raw.counter_width, "counter_width");
    ensure!(v.vector == raw.vector, "vector");
    ensure!(v.impl_pmcs == raw.impl_pmcs, "impl_pmcs");
    ensure!(v.counters >= 4, "counters {}", v.counters);
    ensure!(v.libpfm_pmu.is_none(), "libpfm4 PMU on the soft model");
    ensure!(
        table.contains(&format!("{} bits", raw.counter_width)),
        "table lacks the width"
    );
    ensure!(v.sysfs.live_contexts.is_some(), "no live_contexts in JSON");
    Ok(())
}

fn list(pfm: &Pfm) -> TestResult {
    let t = pfm.run(&["list"])?;
    show("list", &text(&t.stdout));
    ensure!(t.status.success(), "pfm list failed");
    let table = text(&t.stdout);
    let j = pfm.run(&["list", "--json"])?;
    ensure!(j.status.success(), "pfm list --json failed");
    let v: List = doc(&text(&j.stdout))?;
    check_version(v.schema_version)?;
    ensure!(
        v.libpfm.is_none() && v.libpfm_note.is_none(),
        "soft: libpfm4 shown"
    );
    for e in &v.events {
        ensure!(table.contains(&e.name), "table lacks {}", e.name);
        ensure!(
            table.contains(&format!("{:#x}", e.code)),
            "table lacks code {:#x} of {}",
            e.code,
            e.name
        );
    }
    for want in pfm_guest::SOFT_EVENTS {
        ensure!(
            v.events.iter().any(|e| e.name == want),
            "{want} not listed: {:?}",
            v.events
        );
    }
    Ok(())
}

/// The schema check can fail: a real document with one added field, at
/// the top and in a counter, is rejected.
fn schema_rejects_unknown(pfm: &Pfm) -> TestResult {
    let out = pfm.run(&["stat", "--json", "--", "true"])?;
    ensure!(out.status.success(), "exit {:?}", out.status);
    let err = text(&out.stderr);
    let line = err
        .lines()
        .find(|l| l.starts_with('{'))
        .ok_or("no JSON on stderr")?;
    let s: Stat = serde_json::from_str(line).ctx("the document itself")?;
    check_version(s.schema_version)?;
    let mut v: serde_json::Value = serde_json::from_str(line).ctx("as a value")?;
    v["undocumented"] = serde_json::json!(1);
    ensure!(
        serde_json::from_value::<Stat>(v).is_err(),
        "an added top-level field was accepted"
    );
    let mut v: serde_json::Value = serde_json::from_str(line).ctx("as a value")?;
    v["counters"][0]["undocumented"] = serde_json::json!(1);
    ensure!(
        serde_json::from_value::<Stat>(v).is_err(),
        "an added counter field was accepted"
    );
    Ok(())
}

fn stat_json_sleep(pfm: &Pfm, dir: &Path) -> TestResult {
    let file = dir.join("stat.json");
    let f = file.to_string_lossy().into_owned();
    let out = pfm.run(&["stat", "--json", "-o", &f, "--", "sh", "-c", "sleep 0.1"])?;
    ensure!(
        out.status.code() == Some(0),
        "exit {:?}: {}",
        out.status,
        text(&out.stderr)
    );
    let s = std::fs::read_to_string(&file).ctx("read -o file")?;
    show("json", &s);
    let v: Stat = doc(&s)?;
    check_version(v.schema_version)?;
    ensure!(v.kind == StatKind::Summary, "type {:?}", v.kind);
    ensure!(v.model == "soft", "model");
    ensure!(v.exit_code == Some(0), "exit_code {:?}", v.exit_code);
    ensure!(
        v.command.as_deref() == Some(&["sh".to_string(), "-c".into(), "sleep 0.1".into()][..]),
        "command {:?}",
        v.command
    );
    ensure!(
        (0.1..5.0).contains(&v.elapsed_s),
        "elapsed {} s",
        v.elapsed_s
    );
    let tc = value_of(&v, "task-clock")?;
    let cs = value_of(&v, "context-switches")?;
    value_of(&v, "cpu-migrations")?;
    ensure!(
        tc > 0 && (tc as f64) < v.elapsed_s * 1e9 * 2.0,
        "task-clock {tc} ns for {} s",
        v.elapsed_s
    );
    ensure!(cs >= 1, "no context switch for a command that sleeps");
    let c = &v.counters[0];
    ensure!(
        c.msec.is_some_and(|m| (m - tc as f64 / 1e6).abs() < 1e-6),
        "msec {:?} != value/1e6",
        c.msec
    );
    ensure!(
        c.metric.as_ref().is_some_and(|m| m.unit == "CPUs utilized"),
        "task-clock metric {:?}",
        c.metric
    );
    Ok(())
}

fn exact_sleeps(pfm: &Pfm) -> TestResult {
    let me = me()?;
    let out = pfm.run(&[
        "stat",
        "--json",
        "-e",
        "context-switches,task-clock",
        "--",
        &me,
        CHILD_FLAG,
        "sleeps",
        "50",
    ])?;
    ensure!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        text(&out.stderr)
    );
    let v: Stat = doc(&text(&out.stderr))?;
    let events: Vec<&str> = v.counters.iter().map(|c| c.event.as_str()).collect();
    ensure!(
        events == ["context-switches", "task-clock"],
        "events {events:?} (-e order expected)"
    );
    let cs = value_of(&v, "context-switches")?;
    ensure!(
        (50..=60).contains(&cs),
        "{cs} context switches for exactly 50 sleeps"
    );
    Ok(())
}

fn table_matches(pfm: &Pfm) -> TestResult {
    let out = pfm.run(&[
        "stat",
        "-e",
        "cs,task-clock",
        "--",
        "sh",
        "-c",
        "sleep 0.05",
    ])?;
    let t = text(&out.stderr);
    show("table", &t);
    ensure!(out.status.success(), "exit {:?}", out.status);
    ensure!(
        t.contains("Performance counter stats for 'sh -c sleep 0.05'"),
        "no header"
    );
    ensure!(
        t.contains("msec task-clock") && t.contains("CPUs utilized"),
        "no task-clock line"
    );
    ensure!(
        t.contains("context-switches") && t.contains("/sec"),
        "no context-switches rate"
    );
    ensure!(t.contains("seconds time elapsed"), "no elapsed time");
    ensure!(!t.contains("cpu-migrations"), "-e not honoured");
    Ok(())
}

/// The byte column where `needle` starts on the line containing it.
fn column(text: &str, needle: &str) -> Result<usize, String> {
    text.lines()
        .find_map(|l| l.find(needle))
        .ok_or_else(|| format!("no {needle} in\n{text}"))
}

fn big_num_and_alignment(pfm: &Pfm) -> TestResult {
    let me = me()?;
    // Over a thousand switches: the grouped count has a comma, the plain
    // one none, and the columns line up with the short counts either way.
    let args = |plain: bool| {
        let mut a = vec!["stat"];
        if plain {
            a.push("--no-big-num");
        }
        a.extend([
            "-e",
            "cs,migrations,r0",
            "--",
            me.as_str(),
            CHILD_FLAG,
            "sleeps",
            "1100",
        ]);
        a
    };
    for plain in [false, true] {
        let out = pfm.run(&args(plain))?;
        let t = text(&out.stderr);
        show("table", &t);
        ensure!(out.status.success(), "exit {:?}", out.status);
        let line = t
            .lines()
            .find(|l| l.contains("context-switches"))
            .ok_or("no context-switches line")?;
        let count = line.split_whitespace().next().unwrap_or("");
        ensure!(
            count.contains(',') != plain,
            "count '{count}' with --no-big-num={plain}"
        );
        let n: u64 = count.replace(',', "").parse().ctx("the count")?;
        // A nap whose timer fires before the thread blocks switches no
        // context: nearly one switch per nap, and over a thousand.
        ensure!(n >= 1000, "{n} switches for 1100 sleeps");
        let cols = [
            column(&t, "context-switches")?,
            column(&t, "cpu-migrations")?,
            column(&t, "r0")?,
        ];
        ensure!(
            cols.windows(2).all(|w| w[0] == w[1]),
            "event columns {cols:?}"
        );
    }
    Ok(())
}

/// CSV lines of `s` (the non-empty ones), split at `sep`.
fn csv(s: &str, sep: &str) -> Vec<Vec<String>> {
    s.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split(sep).map(str::to_string).collect())
        .collect()
}

fn csv_fields(pfm: &Pfm) -> TestResult {
    // value, unit, event, run time, percentage, metric value, metric unit.
    let out = pfm.run(&[
        "stat",
        "-x,",
        "-e",
        "task-clock,cs,migrations",
        "--",
        "sh",
        "-c",
        "sleep 0.05",
    ])?;
    ensure!(out.status.success(), "exit {:?}", out.status);
    let lines = csv(&text(&out.stderr), ",");
    show("csv", &text(&out.stderr));
    ensure!(lines.len() == 3, "{} lines", lines.len());
    for l in &lines {
        ensure!(l.len() == 7, "{} fields: {l:?}", l.len());
        ensure!(l[3].parse::<u64>().is_ok(), "run time {:?}", l[3]);
        ensure!(l[4] == "100.00", "percentage {:?}", l[4]);
    }
    ensure!(
        lines[0][1] == "msec" && lines[0][2] == "task-clock" && lines[0][6] == "CPUs utilized",
        "{:?}",
        lines[0]
    );
    ensure!(
        lines[0][0].parse::<f64>().is_ok(),
        "msec value {:?}",
        lines[0][0]
    );
    ensure!(
        lines[1][2] == "context-switches" && lines[1][0].parse::<u64>().is_ok(),
        "{:?}",
        lines[1]
    );
    ensure!(lines[1][6].ends_with("/sec"), "{:?}", lines[1]);
    // -r: the variation after the event.
    let out = pfm.run(&[
        "stat",
        "-x;",
        "-r",
        "2",
        "-e",
        "cs",
        "--",
        "sh",
        "-c",
        "sleep 0.02",
    ])?;
    ensure!(out.status.success(), "exit {:?}", out.status);
    let lines = csv(&text(&out.stderr), ";");
    show("csv -r", &text(&out.stderr));
    ensure!(lines.len() == 1, "{} lines", lines.len());
    ensure!(
        lines[0].len() == 8,
        "{} fields: {:?}",
        lines[0].len(),
        lines[0]
    );
    ensure!(
        lines[0][3].ends_with('%') && lines[0][3].trim_end_matches('%').parse::<f64>().is_ok(),
        "variation {:?}",
        lines[0][3]
    );
    // -I: the interval's end first, on every line; no total line.
    let me = me()?;
    let out = pfm.run(&[
        "stat",
        "-x,",
        "-I",
        "50",
        "-e",
        "task-clock,cs",
        "--",
        &me,
        CHILD_FLAG,
        "spin",
        "300",
    ])?;
    ensure!(out.status.success(), "exit {:?}", out.status);
    let lines = csv(&text(&out.stderr), ",");
    show("csv -I", &text(&out.stderr));
    ensure!(
        lines.len() >= 4 && lines.len() % 2 == 0,
        "{} lines",
        lines.len()
    );
    let mut last = 0.0;
    for l in &lines {
        ensure!(l.len() == 8, "{} fields: {l:?}", l.len());
        let t: f64 = l[0].parse().ctx("interval time")?;
        ensure!(t >= last, "times go back: {t} after {last}");
        last = t;
    }
    Ok(())
}

/// The same statistics: counts exactly, the floats within what a trip
/// through JSON's decimal text may change (serde_json's default parser
/// can miss the last bit).
fn same_stats(a: &Stats, b: &Stats) -> bool {
    let close = |x: f64, y: f64| (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1.0);
    a.runs == b.runs
        && a.min == b.min
        && a.max == b.max
        && close(a.mean, b.mean)
        && close(a.stddev, b.stddev)
        && close(a.noise_pct, b.noise_pct)
}

fn repeat_statistics(pfm: &Pfm, dir: &Path) -> TestResult {
    let me = me()?;
    let counter = dir.join("runs");
    let _ = std::fs::remove_file(&counter);
    let c = counter.to_string_lossy().into_owned();
    // Runs 1, 2, 3 do 10, 20, 30 sleeps of 1 ms, each with at least one
    // switch (a sleep whose timer expires before `schedule()` is made
    // again: `child::switching_sleep`); a loaded guest preempts them a few
    // times more, which each run counts itself (getrusage, written at its
    // end: `runs.N.own`).
    let out = pfm.run(&[
        "stat",
        "--json",
        "-r",
        "3",
        "-e",
        "cs,r0",
        "--",
        &me,
        CHILD_FLAG,
        "sleeps-by-run",
        &c,
    ])?;
    ensure!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        text(&out.stderr)
    );
    let all: Vec<Stat> = docs(&text(&out.stderr))?;
    show("json -r", &text(&out.stderr));
    ensure!(all.len() == 4, "{} documents (3 runs + summary)", all.len());
    let (runs, summary) = all.split_at(3);
    let summary = &summary[0];
    let mut values = Vec::new();
    for (i, r) in runs.iter().enumerate() {
        ensure!(r.kind == StatKind::Run, "document {i} is {:?}", r.kind);
        ensure!(r.run == Some(i as u32 + 1), "run {:?}", r.run);
        let cs = value_of(r, "context-switches")?;
        let want = 10 * (i as u64 + 1);
        let own_file = format!("{c}.{}.own", i + 1);
        let own: u64 = std::fs::read_to_string(&own_file)
            .map_err(|e| format!("{own_file}: {e}"))?
            .trim()
            .parse()
            .map_err(|e| format!("{own_file}: {e}"))?;
        // pfm counts from the exec, the run's own count from the fork, so
        // no more than it, plus one preemption in the few instructions
        // between the run reading its count and its exit (whose final
        // switch is not counted).
        ensure!(
            want <= cs && cs <= own + 1,
            "run {}: {cs} switches for {want} sleeps (its own count {own})",
            i + 1
        );
        ensure!(value_of(r, "r0")? == 0, "r0 (counter off) counted");
        values.push(cs);
    }
    ensure!(
        summary.kind == StatKind::Summary && summary.runs == Some(3),
        "summary {summary:?}"
    );
    let want = Stats::of(&values).ok_or("no statistics")?;
    let cs = summary
        .counters
        .iter()
        .find(|c| c.event == "context-switches")
        .ok_or("no context-switches")?;
    let got = cs.stats.as_ref().ok_or("no stats in the summary")?;
    ensure!(
        same_stats(got, &want),
        "stats {got:?}, recomputed from the runs {want:?}"
    );
    ensure!(
        cs.value == want.mean.round() as u64,
        "value {} for mean {}",
        cs.value,
        want.mean
    );
    // The runs differ by 10 sleeps, so the stddev is about 10 when nothing
    // else preempts them; a loaded guest adds switches to some runs (each
    // within its own count, checked above), so it is held to the runs'
    // values (recomputed above), not to 10.
    ensure!(got.stddev > 0.0, "stddev {} of 10/20/30 sleeps", got.stddev);
    let zero = summary
        .counters
        .iter()
        .find(|c| c.event == "r0")
        .ok_or("no r0")?;
    ensure!(
        zero.value == 0 && zero.stats.as_ref().is_some_and(|s| s.noise_pct == 0.0),
        "r0 {zero:?}"
    );
    let el = summary.elapsed_stats.as_ref().ok_or("no elapsed_stats")?;
    let run_ns: Vec<u64> = runs.iter().map(|r| r.elapsed_ns).collect();
    ensure!(
        Stats::of(&run_ns).is_some_and(|w| same_stats(el, &w)),
        "elapsed stats {el:?} from {run_ns:?}"
    );
    // The table says the same: ± on the counts' lines and the time's.
    let _ = std::fs::remove_file(&counter);
    let out = pfm.run(&[
        "stat",
        "-r",
        "3",
        "-e",
        "cs,r0",
        "--",
        &me,
        CHILD_FLAG,
        "sleeps-by-run",
        &c,
    ])?;
    let t = text(&out.stderr);
    show("table -r", &t);
    ensure!(t.contains("3 runs)"), "no run count in the header");
    let line = t
        .lines()
        .find(|l| l.contains("context-switches"))
        .ok_or("no cs line")?;
    let pct: f64 = line
        .rsplit("( ± ")
        .next()
        .and_then(|p| p.split('%').next())
        .and_then(|p| p.trim().parse().ok())
        .ok_or_else(|| format!("no ± in {line}"))?;
    ensure!(
        (15.0..40.0).contains(&pct),
        "± {pct}% for 10/20/30 switches"
    );
    let zero = t.lines().find(|l| l.contains(" r0")).ok_or("no r0 line")?;
    ensure!(zero.ends_with("( ±  0.00% )"), "{zero}");
    ensure!(
        t.lines()
            .any(|l| l.contains("seconds time elapsed") && l.contains('±')),
        "no ± on the elapsed time"
    );
    Ok(())
}

/// Interval documents add up exactly to the summary after them.
fn intervals_add_up(all: &[Stat]) -> TestResult {
    let (summary, intervals) = all.split_last().ok_or("no JSON")?;
    ensure!(
        summary.kind == StatKind::Summary,
        "last document is {:?}",
        summary.kind
    );
    ensure!(intervals.len() >= 2, "{} intervals", intervals.len());
    ensure!(
        intervals.iter().all(|d| d.kind == StatKind::Interval),
        "not all intervals"
    );
    for (i, c) in summary.counters.iter().enumerate() {
        let sum: u64 = intervals
            .iter()
            .map(|d| d.counters.get(i).map_or(0, |x| x.value))
            .sum();
        ensure!(
            sum == c.value,
            "{}: the intervals add up to {sum}, the total is {}",
            c.event,
            c.value
        );
    }
    let te: u64 = intervals.iter().map(|d| d.time_enabled_ns).sum();
    let tr: u64 = intervals.iter().map(|d| d.time_running_ns).sum();
    ensure!(
        te == summary.time_enabled_ns,
        "time_enabled {te} vs {}",
        summary.time_enabled_ns
    );
    ensure!(
        tr == summary.time_running_ns,
        "time_running {tr} vs {}",
        summary.time_running_ns
    );
    Ok(())
}

fn command_intervals(pfm: &Pfm) -> TestResult {
    let me = me()?;
    let out = pfm.run(&[
        "stat",
        "--json",
        "-I",
        "40",
        "-e",
        "task-clock,cs",
        "--",
        &me,
        CHILD_FLAG,
        "exit-after",
        "300",
    ])?;
    ensure!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        text(&out.stderr)
    );
    let all: Vec<Stat> = docs(&text(&out.stderr))?;
    diag(format!("{} documents", all.len()));
    intervals_add_up(&all)?;
    let total = value_of(all.last().ok_or("none")?, "context-switches")?;
    ensure!(total >= 20, "{total} switches in 300 ms of 5 ms naps");
    // The table form: a header, then lines starting with the time.
    let out = pfm.run(&[
        "stat",
        "-I",
        "100",
        "-e",
        "cs",
        "--",
        &me,
        CHILD_FLAG,
        "exit-after",
        "250",
    ])?;
    let t = text(&out.stderr);
    show("table -I", &t);
    ensure!(
        t.lines().any(|l| l.starts_with("#") && l.contains("time")),
        "no header"
    );
    let ticks = t
        .lines()
        .filter(|l| l.contains("context-switches") && l.trim_start().starts_with("0."))
        .count();
    ensure!(ticks >= 2, "{ticks} interval lines");
    Ok(())
}

fn exit_statuses(pfm: &Pfm) -> TestResult {
    let out = pfm.run(&["stat", "--", "sh", "-c", "exit 3"])?;
    ensure!(out.status.code() == Some(3), "exit 3 gave {:?}", out.status);
    let out = pfm.run(&["stat", "--", "sh", "-c", "kill -9 $$"])?;
    ensure!(
        out.status.code() == Some(137),
        "SIGKILL gave {:?}",
        out.status
    );
    ensure!(
        text(&out.stderr).contains("killed by signal 9"),
        "no signal note"
    );
    let out = pfm.run(&["stat", "--", "/nonexistent/cmd"])?;
    let err = text(&out.stderr);
    show("stderr", &err);
    ensure!(
        out.status.code() == Some(127),
        "missing command gave {:?}",
        out.status
    );
    ensure!(
        err.contains("cannot run '/nonexistent/cmd'"),
        "message: {err}"
    );
    Ok(())
}

/// `err` is one line starting with `pfm: ` and containing `want`.
fn one_line(err: &str, want: &str) -> TestResult {
    ensure!(err.lines().count() == 1, "not one line:\n{err}");
    ensure!(err.starts_with("pfm: "), "{err}");
    ensure!(err.contains(want), "'{want}' not in: {err}");
    ensure!(!err.contains("panicked"), "pfm panicked: {err}");
    Ok(())
}

fn bad_event(pfm: &Pfm) -> TestResult {
    let out = pfm.run(&["stat", "-e", "context-switchs", "--", "true"])?;
    let err = text(&out.stderr);
    show("stderr", &err);
    ensure!(out.status.code() == Some(1), "exit {:?}", out.status);
    one_line(&err, "unknown event 'context-switchs'")?;
    one_line(&err, "did you mean 'context-switches'")
}

fn usage(pfm: &Pfm) -> TestResult {
    let h = pfm.run(&["--help"])?;
    let help = text(&h.stdout);
    ensure!(h.status.success() && help.contains("Usage: pfm"), "help");
    let h = pfm.run(&["stat", "--help"])?;
    let help = text(&h.stdout);
    for opt in [
        "--repeat",
        "--field-separator",
        "--interval",
        "--no-big-num",
        "LIBPFM_FORCE_PMU",
    ] {
        ensure!(help.contains(opt), "pfm stat --help lacks {opt}");
    }
    for (args, want) in [
        (&["stats"][..], "did you mean 'stat'"),
        (&["stat", "--bogus", "true"], "'--bogus'"),
        (&["stat", "-t", "0"], "0 would be pfm itself"),
        (
            &["stat", "--duration", "1", "true"],
            "--duration goes with -t",
        ),
        (&["stat"], "nothing to count"),
    ] {
        let u = pfm.run(args)?;
        let err = text(&u.stderr);
        ensure!(u.status.code() == Some(2), "{args:?}: exit {:?}", u.status);
        one_line(&err, want)?;
        one_line(&err, "--help')")?;
    }
    Ok(())
}

fn thread_interval(pfm: &Pfm) -> TestResult {
    let child = Child::spawn("sleep", &["5"])?;
    let tid = child.pid().to_string();
    let out = pfm.run(&[
        "stat",
        "-t",
        &tid,
        "--interval",
        "100",
        "--duration",
        "0.5",
        "--json",
    ])?;
    let err = text(&out.stderr);
    show("stderr", &err);
    ensure!(out.status.success(), "exit {:?}", out.status);
    let all: Vec<Stat> = docs(&err)?;
    let intervals = all.iter().filter(|d| d.kind == StatKind::Interval).count();
    // 5 ticks (or 4 if one slipped past the deadline), plus the last one.
    ensure!(
        (3..=7).contains(&intervals),
        "{intervals} interval records for 0.5 s at 100 ms"
    );
    let last = all.last().ok_or("no JSON")?;
    ensure!(last.tid == Some(child.pid()), "tid");
    ensure!(
        last.interrupted == Some(false),
        "interrupted {:?}",
        last.interrupted
    );
    let cs = value_of(last, "context-switches")?;
    ensure!(cs >= 20, "{cs} switches in 0.5 s of 5 ms naps");
    intervals_add_up(&all)
}

fn thread_ctrl_c(pfm: &Pfm) -> TestResult {
    let target = Child::spawn("sleep", &["5"])?;
    let tid = target.pid().to_string();
    let mut p = Command::new(&pfm.path)
        .args(["stat", "-t", &tid])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ctx("spawn pfm")?;
    // Ready when pfm takes SIGINT (blocked for its signalfd) and its
    // context is attached: a fixed wait was too short for a loaded host
    // (pfm was killed by the signal).
    let ready = module::wait_for(Duration::from_secs(60), || {
        catches_sigint(p.id()) && module::Counters::read().attached.unwrap_or(0) >= 1
    });
    if !ready {
        let _ = p.kill();
        let _ = p.wait();
        return Err(
            "pfm stat -t: SIGINT not blocked or caught, or no thread attached, within 60 s".into(),
        );
    }
    std::thread::sleep(Duration::from_millis(100));
    perfmon::process::send_signal(p.id(), libc::SIGINT).ctx("SIGINT")?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while p.try_wait().ctx("wait")?.is_none() {
        if Instant::now() >= deadline {
            let _ = p.kill();
            let _ = p.wait();
            return Err("pfm stat -t did not end within 10 s of SIGINT".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = p.wait_with_output().ctx("output")?;
    let err = text(&out.stderr);
    show("stderr", &err);
    ensure!(out.status.success(), "exit {:?}", out.status);
    ensure!(err.contains("interrupted: totals so far"), "no totals note");
    ensure!(err.contains("context-switches"), "no counts");
    Ok(())
}

/// Whether process `pid` takes SIGINT itself rather than dying of it:
/// its main thread blocks it (pfm reads it from a signalfd) or has a
/// handler (`SigBlk`, `SigCgt` of its `/proc` status, bit 1).
fn catches_sigint(pid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    let has = |field: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .is_some_and(|mask| mask & (1 << (libc::SIGINT - 1)) != 0)
    };
    has("SigBlk:") || has("SigCgt:")
}

fn missing_thread(pfm: &Pfm) -> TestResult {
    let out = pfm.run(&["stat", "-t", "4194305", "--duration", "0.1"])?;
    let err = text(&out.stderr);
    show("stderr", &err);
    ensure!(out.status.code() == Some(1), "exit {:?}", out.status);
    ensure!(!err.contains("PFM_IOC"), "an ioctl's name in: {err}");
    one_line(&err, "no such thread: 4194305")
}

fn not_loaded(pfm: &Pfm) -> TestResult {
    for args in [&["info"][..], &["stat", "--", "true"], &["list", "--json"]] {
        let out = pfm.run(args)?;
        let err = text(&out.stderr);
        show("stderr", &err);
        ensure!(out.status.code() == Some(1), "exit {:?}", out.status);
        one_line(&err, "perfmon module not loaded (modprobe perfmon)")?;
    }
    Ok(())
}

const FORCE: [(&str, &str); 1] = [("LIBPFM_FORCE_PMU", FORCED_PMU)];

fn libpfm_list(pfm: &Pfm) -> TestResult {
    let t = pfm.run_env(&["list"], &FORCE)?;
    let table = text(&t.stdout);
    show("list", &table);
    ensure!(t.status.success(), "pfm list: {}", text(&t.stderr));
    ensure!(
        table.contains(&format!("libpfm4 events of PMU '{FORCED_PMU}'")),
        "no libpfm4 section"
    );
    ensure!(
        table
            .lines()
            .any(|l| l.trim_start().starts_with("INST_RETIRED "))
            && table.lines().any(|l| l.trim_start().starts_with(".ANY_P ")),
        "INST_RETIRED.ANY_P not listed"
    );
    let j = pfm.run_env(&["list", "--json"], &FORCE)?;
    let v: List = doc(&text(&j.stdout))?;
    ensure!(v.model == "intel_arch_sim", "model {}", v.model);
    let lib = v.libpfm.as_ref().ok_or("no libpfm table in JSON")?;
    ensure!(
        lib.pmu == FORCED_PMU && lib.forced,
        "{} forced={}",
        lib.pmu,
        lib.forced
    );
    ensure!(lib.description.starts_with("Intel"), "{}", lib.description);
    ensure!(
        lib.events.len() >= 50,
        "{} libpfm4 events",
        lib.events.len()
    );
    let inst = lib
        .events
        .iter()
        .find(|e| e.name == "INST_RETIRED")
        .ok_or("no INST_RETIRED")?;
    ensure!(
        inst.umasks.iter().any(|u| u.name == "ANY_P"),
        "no ANY_P umask"
    );
    // Without the variable, whatever the CPU: the module's events still
    // list, and libpfm4's absence is explained rather than an error.
    let plain = pfm.run(&["list", "--json"])?;
    ensure!(
        plain.status.success(),
        "pfm list without LIBPFM_FORCE_PMU failed"
    );
    let v: List = doc(&text(&plain.stdout))?;
    diag(format!(
        "without LIBPFM_FORCE_PMU: libpfm {:?}, note {:?}",
        v.libpfm.map(|l| l.pmu),
        v.libpfm_note
    ));
    ensure!(!v.events.is_empty(), "no module events");
    Ok(())
}

/// Reads `len` bytes of process `pid` at `addr` (it is stopped under our
/// ptrace).
fn peek(pid: u32, addr: u64, len: usize) -> Result<Vec<u8>, String> {
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).ctx("open /proc/PID/mem")?;
    let mut buf = vec![0u8; len];
    mem.read_exact_at(&mut buf, addr)
        .ctx("read /proc/PID/mem")?;
    Ok(buf)
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_ne_bytes(a)
}

/// PFM_IOC_WRITE_PMCS calls of pfm as the kernel received them, read
/// from its memory at each call's return (ptrace): (result, [(PMC,
/// value)]).
type PmcWrites = Vec<(i64, Vec<(u16, u64)>)>;

fn traced_pmc_writes(pfm: &Pfm, args: &[&str]) -> Result<(PmcWrites, raw::Traced), String> {
    let mut writes: PmcWrites = Vec::new();
    let mut read_err = None;
    let path = pfm.path.to_string_lossy().into_owned();
    let traced = raw::trace_ioctls(
        &path,
        args,
        &FORCE,
        perfmon::abi::PFM_IOC_WRITE_PMCS,
        |call| {
            // struct pfm_regs_arg: regs (u64) at 0, count (u32) at 8; each
            // struct pfm_pmc (32 bytes): reg_num (u16) at 0, reg_value at 8.
            let regs = peek(call.pid, call.arg, 48).and_then(|arg| {
                let base = u64_at(&arg, 0);
                let count = u32::from_ne_bytes([arg[8], arg[9], arg[10], arg[11]]) as usize;
                let pmcs = peek(call.pid, base, 32 * count)?;
                Ok((0..count)
                    .map(|i| {
                        let e = &pmcs[32 * i..32 * (i + 1)];
                        (u16::from_ne_bytes([e[0], e[1]]), u64_at(e, 8))
                    })
                    .collect::<Vec<_>>())
            });
            match regs {
                Ok(r) => writes.push((call.ret, r)),
                Err(e) => read_err = Some(e),
            }
        },
    )?;
    if let Some(e) = read_err {
        return Err(e);
    }
    Ok((writes, traced))
}

fn libpfm_encoding(pfm: &Pfm) -> TestResult {
    // What libpfm4 itself encodes, asked here through the same library
    // (this program set LIBPFM_FORCE_PMU before it initialized).
    let lib = libpfm4::Library::open().ctx("libpfm4")?;
    let skl = lib
        .core_pmu(libpfm4::Vendor::Intel)
        .ok_or("libpfm4 has no Intel core PMU with LIBPFM_FORCE_PMU=skl")?;
    // Instructions and core cycles (user mode), reference cycles (another
    // unit mask), instructions in kernel mode only (another ring bit): the
    // simulated PMU counts each by its PMC's event select, unit mask and
    // ring bits, so its counts show what the PMCs hold.
    let names = [
        "INST_RETIRED.ANY_P:u",
        "CPU_CLK_UNHALTED.THREAD_P:u",
        "CPU_CLK_THREAD_UNHALTED.REF_XCLK:u",
        "INST_RETIRED.ANY_P:k",
    ];
    let mut want = Vec::new();
    for n in names {
        let enc = lib.encode(skl, n).ctx(n)?;
        let code = enc.codes.first().copied().ok_or("no code")?;
        diag(format!("libpfm4: {n} = {code:#x} ({})", enc.qualified));
        want.push(code & !(1 << 20));
    }
    ensure!(
        want[..2] == [INST_RETIRED_ANY_P_U, CPU_CLK_THREAD_P_U],
        "libpfm4 encodes {want:x?}, the SDM says {INST_RETIRED_ANY_P_U:#x}, {CPU_CLK_THREAD_P_U:#x}"
    );

    let me = me()?;
    let list = names.join(",");
    let args = [
        "stat", "--json", "-e", &list, "--", &me, CHILD_FLAG, "spin", "200",
    ];
    // Every PFM_IOC_WRITE_PMCS as the kernel received it (pfm under
    // ptrace): libpfm4's values, accepted.
    let (writes, traced) = traced_pmc_writes(pfm, &args)?;
    let err = text(&traced.stderr);
    ensure!(
        libc::WIFEXITED(traced.status) && libc::WEXITSTATUS(traced.status) == 0,
        "pfm exit status {:#x}: {err}",
        traced.status
    );
    diag(format!("PFM_IOC_WRITE_PMCS calls: {writes:x?}"));
    ensure!(writes.len() == 1, "{} WRITE_PMCS calls", writes.len());
    let (ret, regs) = &writes[0];
    ensure!(*ret == 0, "WRITE_PMCS returned {ret}");
    let expect: Vec<(u16, u64)> = (0u16..).zip(want.iter().copied()).collect();
    ensure!(
        *regs == expect,
        "PMCs written {regs:x?}, libpfm4 encodes {want:x?}"
    );
    show("stderr", &err);
    let v: Stat = doc(&err)?;
    ensure!(v.model == "intel_arch_sim", "model {}", v.model);
    for (c, code) in v.counters.iter().zip(&want) {
        ensure!(
            c.code == *code,
            "{}: code {:#x}, libpfm4 {code:#x}",
            c.event,
            c.code
        );
        ensure!(
            c.libpfm.as_deref().is_some_and(|q| q.starts_with("skl::")),
            "{}: libpfm {:?}",
            c.event,
            c.libpfm
        );
    }
    let inst = value_of(&v, names[0])?;
    let cycles = value_of(&v, names[1])?;
    let refc = value_of(&v, names[2])?;
    let kernel = value_of(&v, names[3])?;
    // The simulator: 1 core and 1 reference cycle per ns the thread runs,
    // 1 instruction per 2 ns, user mode only.
    ensure!(cycles > 10_000_000, "{cycles} cycles in 200 ms of spinning");
    let ipc = inst as f64 / cycles as f64;
    ensure!(
        (0.49..=0.51).contains(&ipc),
        "{inst} instructions / {cycles} cycles = {ipc}"
    );
    ensure!(
        refc.abs_diff(cycles) <= cycles / 100,
        "{refc} reference cycles for {cycles} cycles"
    );
    ensure!(
        kernel == 0,
        "{kernel} kernel-mode instructions counted (user-mode simulator)"
    );
    let metric = v.counters[0].metric.as_ref().ok_or("no IPC metric")?;
    ensure!(
        metric.unit == "insn per cycle" && (metric.value - ipc).abs() < 1e-9,
        "metric {metric:?}"
    );
    Ok(())
}

/// `pfm stat -r 3` of a command whose second run is killed by SIGINT
/// (Ctrl-C's signal; the shell signals itself): pfm stops repeating, says
/// the killed run is not in the mean, and the summary is the first run's
/// alone (runs 1, the same count), with the command's status (130).
fn repeat_ctrl_c(pfm: &Pfm, dir: &Path) -> TestResult {
    let flag = dir.join("ran-once");
    let _ = std::fs::remove_file(&flag);
    let script = format!(
        "if [ -e {f} ]; then kill -INT $$; fi; touch {f}; sleep 0.05",
        f = flag.display()
    );
    let out = pfm.run(&[
        "stat", "--json", "-r", "3", "-e", "cs", "--", "sh", "-c", &script,
    ])?;
    let err = text(&out.stderr);
    show("stderr", &err);
    ensure!(out.status.code() == Some(130), "exit {:?}", out.status);
    ensure!(
        err.contains("pfm: run 2 of 3 interrupted (SIGINT): the mean is of the 1 runs before it"),
        "no note of the interrupted run"
    );
    let all: Vec<Stat> = docs(&err)?;
    ensure!(all.len() == 3, "{} documents (2 runs + summary)", all.len());
    let (first, summary) = (&all[0], &all[2]);
    ensure!(
        summary.kind == StatKind::Summary && summary.runs == Some(1),
        "summary {summary:?}"
    );
    ensure!(
        value_of(summary, "context-switches")? == value_of(first, "context-switches")?,
        "the summary is not the first run's"
    );
    Ok(())
}

/// perf's spellings on intel_arch_sim, each to the PMC value perf's
/// kernel programs for it (Linux's `intel_perfmon_event_map`: cycles 003CH,
/// instructions 00C0H, cache-misses 412EH, branch-instructions 00C4H;
/// `r5100c0` perf's raw value, whose INT (bit 20) the module owns: pfm
/// drops it, perf's kernel ignores it), user mode (USR, bit 16) as perf
/// counts for a user at perf_event_paranoid 2, or as the modifier says:
/// read back from pfm's PFM_IOC_WRITE_PMCS (ptrace), which must succeed.
/// `r5100c0` and `instructions:u` are one event on two counters: their
/// counts are equal. Then what cannot be counted here is one line: a
/// software event, perf's stalled-cycles (no encoding on Intel), an
/// unsupported modifier.
fn perf_spellings_hw(pfm: &Pfm) -> TestResult {
    let me = me()?;
    let list = "cycles,instructions:u,r5100c0,cache-misses";
    let args = [
        "stat", "--json", "-e", list, "--", &me, CHILD_FLAG, "spin", "100",
    ];
    let (writes, traced) = traced_pmc_writes(pfm, &args)?;
    let err = text(&traced.stderr);
    ensure!(
        libc::WIFEXITED(traced.status) && libc::WEXITSTATUS(traced.status) == 0,
        "pfm exit status {:#x}: {err}",
        traced.status
    );
    diag(format!("PFM_IOC_WRITE_PMCS calls: {writes:x?}"));
    ensure!(writes.len() == 1, "{} WRITE_PMCS calls", writes.len());
    let (ret, regs) = &writes[0];
    ensure!(*ret == 0, "WRITE_PMCS returned {ret}");
    let want = [(0u16, 0x1003c), (1, 0x100c0), (2, 0x4100c0), (3, 0x1412e)];
    ensure!(*regs == want, "PMCs written {regs:x?}, perf's {want:x?}");
    show("stderr", &err);
    let v: Stat = doc(&err)?;
    let (inst, raw) = (value_of(&v, "instructions:u")?, value_of(&v, "r5100c0")?);
    ensure!(
        inst == raw && inst > 1_000_000,
        "instructions:u {inst}, r5100c0 {raw}: one event, two counters"
    );
    value_of(&v, "cpu-cycles")?;
    for (e, what) in [
        ("task-clock", "is a perf software event"),
        ("stalled-cycles-frontend", "has no encoding on PMU model"),
        ("cycles:G", "modifier 'G'"),
    ] {
        let out = pfm.run(&["stat", "-e", e, "--", "true"])?;
        let err = text(&out.stderr);
        show("stderr", &err);
        ensure!(out.status.code() == Some(1), "{e}: exit {:?}", out.status);
        one_line(&err, what)?;
    }
    Ok(())
}

/// perf's spellings on soft: task-clock:u (a software count has no
/// privilege levels: the same count), cpu-clock (one thread's cpu-clock is
/// its running time: task-clock), cs:k; and the perf events the module
/// does not count are one line naming the module's.
fn perf_spellings_soft(pfm: &Pfm) -> TestResult {
    let out = pfm.run(&[
        "stat",
        "--json",
        "-e",
        "task-clock:u,cpu-clock,cs:k,faults",
        "--",
        "true",
    ])?;
    let err = text(&out.stderr);
    show("stderr", &err);
    ensure!(out.status.code() == Some(0), "exit {:?}", out.status);
    let v: Stat = doc(&err)?;
    let codes: Vec<(String, u64)> = v
        .counters
        .iter()
        .map(|c| (c.event.clone(), c.code))
        .collect();
    ensure!(
        codes
            == [
                ("task-clock:u".to_string(), 1),
                ("task-clock".to_string(), 1),
                ("cs:k".to_string(), 2),
                ("page-faults".to_string(), 4)
            ],
        "{codes:?}"
    );
    // A command's faults: exec and its start fault at least once.
    let faults = value_of(&v, "page-faults")?;
    ensure!(faults > 0, "no page fault counted for a command");
    let out = pfm.run(&[
        "stat",
        "--json",
        "-e",
        "minor-faults:u,major-faults",
        "--",
        "true",
    ])?;
    let err = text(&out.stderr);
    ensure!(out.status.code() == Some(0), "exit {:?}: {err}", out.status);
    let v: Stat = doc(&err)?;
    let codes: Vec<(String, u64)> = v
        .counters
        .iter()
        .map(|c| (c.event.clone(), c.code))
        .collect();
    ensure!(
        codes
            == [
                ("minor-faults:u".to_string(), 5),
                ("major-faults".to_string(), 6)
            ],
        "{codes:?}"
    );
    for (e, what) in [
        ("alignment-faults", "is a perf software event"),
        ("cycles:u", "is a hardware event"),
    ] {
        let out = pfm.run(&["stat", "-e", e, "--", "true"])?;
        let err = text(&out.stderr);
        show("stderr", &err);
        ensure!(out.status.code() == Some(1), "{e}: exit {:?}", out.status);
        one_line(&err, what)?;
    }
    Ok(())
}

fn libpfm_unknown(pfm: &Pfm) -> TestResult {
    let out = pfm.run_env(&["stat", "-e", "INST_RETIRD.ANY_P:u", "--", "true"], &FORCE)?;
    let err = text(&out.stderr);
    show("stderr", &err);
    ensure!(out.status.code() == Some(1), "exit {:?}", out.status);
    one_line(&err, "unknown event 'INST_RETIRD.ANY_P:u'")?;
    one_line(&err, &format!("libpfm4 PMU '{FORCED_PMU}'"))?;
    one_line(&err, "did you mean 'INST_RETIRED.ANY_P'")
}

// ---------------------------------------------------------------------------
// Multiplexing: pmu=soft soft_counters=2, so that a few events exceed the
// counters.

/// What the `own` child mode wrote: its thread CPU time and its switches
/// since the fork (getrusage), at the start of its work and at its end.
struct Own {
    cpu_start: u64,
    cpu_end: u64,
    switches_start: u64,
    switches: u64,
}

fn own(path: &Path) -> Result<Own, String> {
    let s = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let n: Vec<u64> = s
        .split_whitespace()
        .map(|w| w.parse().map_err(|e| format!("{}: {e}", path.display())))
        .collect::<Result<_, String>>()?;
    ensure!(n.len() == 4, "{}: {s:?}", path.display());
    Ok(Own {
        cpu_start: n[0],
        cpu_end: n[1],
        switches_start: n[2],
        switches: n[3],
    })
}

/// The bounds of the switch-outs a context counted from before the
/// command's exec to its exit, from the command's own getrusage counts
/// (`Own`): at least those between its two reads, which lie inside that
/// window; at most its count since the fork at its end, plus one
/// preemption between that read and its exit (the exit's own switch-out
/// is not counted). Not the number of its sleeps: a 1 ms nanosleep whose
/// timer has expired by the time the thread would block (a slow guest)
/// returns without switching (seen: 45 switch-outs by getrusage's own
/// count for 47 sleeps).
fn switch_bounds(o: &Own) -> (u64, u64) {
    (o.switches - o.switches_start, o.switches + 1)
}

/// `count × enabled / running` rounded to nearest, halves up, in 128 bits
/// (this test's own arithmetic, not the library's); `None` if it never ran.
fn estimate(count: u64, enabled: u64, running: u64) -> Option<u64> {
    if running == 0 {
        return None;
    }
    if enabled <= running {
        return Some(count);
    }
    let v = (count as u128 * enabled as u128 + running as u128 / 2) / running as u128;
    Some(v as u64)
}

/// `running / enabled` in percent, rounded to the nearest hundredth
/// (halves up), as pfm's JSON carries it.
fn share(running: u64, enabled: u64) -> Option<f64> {
    if enabled == 0 {
        return None;
    }
    let h = ((running as u128 * 10_000 + enabled as u128 / 2) / enabled as u128).min(10_000);
    Some(h as f64 / 100.0)
}

/// A multiplexed counter's set, times and estimate, checked against this
/// test's arithmetic; returns (set, time_running).
fn mux_counter(c: &pfm_json::Counter, enabled: u64) -> Result<(u16, u64), String> {
    let set = c.set.ok_or_else(|| format!("{}: no set", c.event))?;
    let running = c
        .time_running_ns
        .ok_or_else(|| format!("{}: no time_running_ns", c.event))?;
    ensure!(
        c.time_enabled_ns == Some(enabled),
        "{} (set {set}): time_enabled_ns {:?}, the context's time_running {enabled}",
        c.event,
        c.time_enabled_ns
    );
    ensure!(
        c.estimate == estimate(c.value, enabled, running),
        "{} (set {set}): estimate {:?} for {} x {enabled} / {running}",
        c.event,
        c.estimate,
        c.value
    );
    ensure!(
        c.running_pct == share(running, enabled),
        "{} (set {set}): running_pct {:?} for {running} / {enabled}",
        c.event,
        c.running_pct
    );
    Ok((set, running))
}

/// Three sets of {task-clock,cs} on two counters at 1 ms, over a command
/// that spins 1 ms of CPU and sleeps 1 ms, 60 times. Oracles:
///
/// - The module's exact charge: every set's time_enabled is the context's
///   time_running; the sets' time_running add up to it exactly; each
///   set's task-clock is its time_running, so its estimate (this test's
///   arithmetic) is time_enabled exactly, with no tolerance.
/// - The command's own CPU clock: it read CLOCK_THREAD_CPUTIME_ID at the
///   start of its work and at its end, both inside the counted window
///   (START precedes its exec, the count runs to its exit), so
///   `cpu_end - cpu_start <= time_enabled`. And `time_enabled <= user_s +
///   sys_s + 2 us`: wait4's rusage sums to at least the process's
///   sum_exec_runtime (cputime_adjust splits that runtime, never less),
///   each of the two truncated to whole microseconds, and the count is a
///   part of that runtime.
/// - Conservation of switches: context-switches is in every set, so the
///   sets' raw counts add up to every switch-out of the counted window,
///   within the command's own getrusage counts ([`switch_bounds`]).
fn mux_conservation(pfm: &Pfm, dir: &Path) -> TestResult {
    const ROUNDS: u64 = 60;
    let me = me()?;
    let file = dir.join("own-conservation");
    let f = file.to_string_lossy().into_owned();
    let rounds = ROUNDS.to_string();
    let out = pfm.run(&[
        "stat",
        "--json",
        "--switch",
        "1ms",
        "-e",
        "{task-clock,cs},{task-clock,cs},{task-clock,cs}",
        "--",
        &me,
        CHILD_FLAG,
        "own",
        &f,
        &rounds,
        "1000",
    ])?;
    let err = text(&out.stderr);
    show("json", &err);
    ensure!(out.status.success(), "exit {:?}: {err}", out.status);
    let v: Stat = doc(&err)?;
    let m = v.multiplex.as_ref().ok_or("no multiplex object")?;
    ensure!(
        m.sets == 3
            && m.counters == 2
            && m.switch_ns == Some(1_000_000)
            && m.switch_on_overflow.is_none()
            && m.period.is_none(),
        "multiplex {m:?}"
    );
    let enabled = v.time_running_ns;
    let mut running = [None::<u64>; 3];
    let mut switches = 0;
    for (i, c) in v.counters.iter().enumerate() {
        let (set, run) = mux_counter(c, enabled)?;
        ensure!(
            usize::from(set) == i / 2,
            "{} (event {i}) in set {set}: groups of 2 on 2 counters fill sets 0, 1, 2",
            c.event
        );
        let want = if i % 2 == 0 {
            "task-clock"
        } else {
            "context-switches"
        };
        ensure!(c.event == want, "event {i} is {}, -e gave {want}", c.event);
        match running[usize::from(set)] {
            Some(r) => ensure!(r == run, "set {set}: time_running {r} and {run}"),
            None => running[usize::from(set)] = Some(run),
        }
        if i % 2 == 0 {
            ensure!(
                c.value == run && c.estimate == Some(enabled),
                "set {set}: task-clock {} (its set ran {run} ns), estimate {:?}, time_enabled {enabled}",
                c.value,
                c.estimate
            );
        } else {
            switches += c.value;
        }
    }
    let runs: Vec<u64> = running.iter().map(|r| r.unwrap_or(0)).collect();
    ensure!(
        runs.iter().sum::<u64>() == enabled && runs.iter().all(|&r| r > 0),
        "the sets ran {runs:?} ns, time_enabled {enabled}"
    );
    let o = own(&file)?;
    let us = |s: Option<f64>| (s.unwrap_or(0.0) * 1e6).round() as u64;
    let rusage_ns = (us(v.user_s) + us(v.sys_s)) * 1000;
    diag(format!(
        "time_enabled {enabled} ns, sets {runs:?}; own CPU {} ns, rusage {rusage_ns} ns; switches {switches}, own {} (at its start {})",
        o.cpu_end - o.cpu_start,
        o.switches,
        o.switches_start
    ));
    ensure!(
        o.cpu_end - o.cpu_start <= enabled && enabled <= rusage_ns + 2000,
        "time_enabled {enabled} ns: the command's own CPU time says at least {} ns, its rusage at most {rusage_ns} + 2000 ns",
        o.cpu_end - o.cpu_start
    );
    let (lo, hi) = switch_bounds(&o);
    ensure!(
        (lo..=hi).contains(&switches),
        "the sets counted {switches} switches; the command's own counts say [{lo}, {hi}]"
    );
    Ok(())
}

/// One thread's line of the `own-family` program: its ids, its own CPU
/// clock and switch count at its start and at its end.
struct OwnThread {
    tid: u32,
    pid: u32,
    cpu_start: u64,
    cpu_end: u64,
}

fn own_family(path: &Path) -> Result<Vec<OwnThread>, String> {
    let s = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    s.lines()
        .map(|l| {
            let n: Vec<u64> = l
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            ensure!(n.len() == 6, "{}: line {l:?}", path.display());
            Ok(OwnThread {
                tid: n[0] as u32,
                pid: n[1] as u32,
                cpu_start: n[2],
                cpu_end: n[3],
            })
        })
        .collect()
}

/// Six events on two counters (three sets of task-clock and
/// context-switches, 1 ms each) over a whole program: 4 processes of 5, 3,
/// 3 and 3 threads (14), each thread 20 × 2 ms of CPU and a 1 ms sleep.
/// Nothing narrows: `inherit` is true, no warning. Each set's task-clock
/// is its running time, so its estimate is the program's `time_enabled`,
/// which is at least the threads' own CPU times added up (each measured
/// inside its monitored life) and at most the test's wall time around
/// `pfm stat` times the online CPUs. Not the command's rusage: a thread
/// other than a process's first is released (its runtime added to the
/// process's rusage) in `exit_notify`, before its final switch, while the
/// module counts task-clock to that switch (perfmon.rst, "Accuracy"); the
/// CPU time in between is measured by nothing here (in a run the program's
/// count was 1.67 ms above its rusage, 10 such threads). `--per-thread`: a
/// row for each of the 14 threads, in 4 processes, each thread's
/// task-clock estimate at least its own CPU time.
fn mux_whole_program(pfm: &Pfm, dir: &Path) -> TestResult {
    let me = me()?;
    let file = dir.join("own-family");
    let _ = std::fs::remove_file(&file);
    let f = file.to_string_lossy().into_owned();
    let wall_start = Instant::now();
    let out = pfm.run(&[
        "stat",
        "--json",
        "--per-thread",
        "--switch",
        "1ms",
        "-e",
        "{task-clock,cs},{task-clock,cs},{task-clock,cs}",
        "--",
        &me,
        CHILD_FLAG,
        "own-family",
        &f,
        "20",
        "2000",
        "3",
        "4",
        "2",
    ])?;
    let wall_ns = u64::try_from(wall_start.elapsed().as_nanos()).unwrap_or(u64::MAX);
    let err = text(&out.stderr);
    show("json", &err);
    ensure!(out.status.success(), "exit {:?}: {err}", out.status);
    ensure!(!err.contains("warning"), "a warning: {err}");
    let v: Stat = doc(&err)?;
    ensure!(v.inherit == Some(true), "inherit {:?}", v.inherit);
    let m = v.multiplex.as_ref().ok_or("no multiplex object")?;
    ensure!(m.sets == 3 && m.counters == 2, "multiplex {m:?}");
    let enabled = v.time_running_ns;
    let mut runs = [0u64; 3];
    for (i, c) in v.counters.iter().enumerate() {
        let (set, run) = mux_counter(c, enabled)?;
        if i % 2 == 0 {
            ensure!(
                c.value == run && c.estimate == Some(enabled),
                "set {set}: task-clock {} (its set ran {run} ns), estimate {:?}, time_enabled {enabled}",
                c.value,
                c.estimate
            );
            runs[usize::from(set)] = run;
        }
    }
    ensure!(
        runs.iter().sum::<u64>() == enabled && runs.iter().all(|&r| r > 0),
        "the sets ran {runs:?} ns over the threads, time_enabled {enabled}"
    );
    let own = own_family(&file)?;
    let pids: std::collections::BTreeSet<u32> = own.iter().map(|t| t.pid).collect();
    ensure!(
        own.len() == 14 && pids.len() == 4,
        "the program reported {} threads in {} processes, 14 in 4 expected",
        own.len(),
        pids.len()
    );
    let lo: u64 = own.iter().map(|t| t.cpu_end - t.cpu_start).sum();
    let us = |s: Option<f64>| (s.unwrap_or(0.0) * 1e6).round() as u64;
    let rusage = (us(v.user_s) + us(v.sys_s)) * 1000;
    // SAFETY: No arguments.
    let cpus = u64::try_from(unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }).unwrap_or(1);
    let hi = wall_ns.saturating_mul(cpus.max(1));
    diag(format!(
        "whole program: time_enabled {enabled} ns, sets {runs:?}; threads' own CPU {lo} ns, rusage {rusage} ns (not a bound), wall {wall_ns} ns x {cpus} CPUs"
    ));
    ensure!(
        (lo..=hi).contains(&enabled),
        "time_enabled {enabled} ns outside [{lo}, {hi}]: the threads' own CPU times added up, the wall time x CPUs"
    );
    let rows = v.threads.as_ref().ok_or("no per-thread rows")?;
    for t in &own {
        let row = rows
            .iter()
            .find(|r| r.tid == t.tid)
            .ok_or_else(|| format!("no row for thread {} of process {}", t.tid, t.pid))?;
        // Values in counter order: task-clock is every even one.
        let tc = row.values.first().copied().unwrap_or(0);
        ensure!(
            row.pid == t.pid && tc >= t.cpu_end - t.cpu_start,
            "thread {} (process {}): row pid {}, task-clock estimate {tc} below its own CPU time {}",
            t.tid,
            t.pid,
            row.pid,
            t.cpu_end - t.cpu_start
        );
    }
    Ok(())
}

/// The share a table line ends with, `(40.00%)`.
fn line_share(line: &str) -> Option<f64> {
    let p = line.strip_suffix("%)")?.rsplit('(').next()?;
    p.parse().ok()
}

/// Five events on two counters, packed by pfm: [task-clock, cs],
/// [migrations, task-clock], [cs], switched every 4 ms (the default) over
/// 30 ms of CPU, so every set runs and none all the time. The table: each
/// line ends with its set's share; the three sets' shares, each rounded
/// to a hundredth (off by at most 0.005), add up to 100 within 0.015; the
/// two task-clock lines show the same estimate (each is time_enabled); the
/// note says 5 events, 3 sets, 2 counters, 4ms. The JSON of the same
/// command: the sets in that order.
fn mux_table(pfm: &Pfm, dir: &Path) -> TestResult {
    let me = me()?;
    let f = dir.join("own-table").to_string_lossy().into_owned();
    let args = |json: bool| {
        let mut a = vec!["stat"];
        if json {
            a.push("--json");
        }
        a.extend([
            "-e",
            "task-clock,cs,migrations,task-clock,cs",
            "--",
            me.as_str(),
            CHILD_FLAG,
            "own",
            f.as_str(),
            "30",
            "1000",
        ]);
        a
    };
    let out = pfm.run(&args(false))?;
    let t = text(&out.stderr);
    show("table", &t);
    ensure!(out.status.success(), "exit {:?}", out.status);
    ensure!(
        t.contains(
            "\n 5 events multiplexed in 3 event sets on 2 counters, switched every 4ms of running time\n"
        ),
        "no multiplexing note"
    );
    let lines: Vec<&str> = t
        .lines()
        .filter(|l| {
            ["task-clock", "context-switches", "cpu-migrations"]
                .iter()
                .any(|e| l.contains(e))
        })
        .collect();
    ensure!(lines.len() == 5, "{} event lines", lines.len());
    let shares: Vec<f64> = lines
        .iter()
        .map(|l| line_share(l).ok_or_else(|| format!("no (xx.xx%) at the end of: {l}")))
        .collect::<Result<_, String>>()?;
    // Lines 0 and 1 are set 0, 2 and 3 set 1, 4 set 2.
    ensure!(
        shares[0] == shares[1] && shares[2] == shares[3],
        "shares {shares:?}: one per set"
    );
    let sum = shares[0] + shares[2] + shares[4];
    ensure!(
        (sum - 100.0).abs() <= 0.015 + 1e-9,
        "the sets' shares {shares:?} add up to {sum}"
    );
    let tc: Vec<&str> = lines
        .iter()
        .filter(|l| l.contains("task-clock"))
        .map(|l| l.split_whitespace().next().unwrap_or(""))
        .collect();
    ensure!(
        tc.len() == 2 && tc[0] == tc[1],
        "task-clock estimates {tc:?}"
    );
    let out = pfm.run(&args(true))?;
    ensure!(out.status.success(), "exit {:?}", out.status);
    let v: Stat = doc(&text(&out.stderr))?;
    let sets: Vec<Option<u16>> = v.counters.iter().map(|c| c.set).collect();
    ensure!(
        sets == [Some(0), Some(0), Some(1), Some(1), Some(2)],
        "sets {sets:?}: first fit of 5 events on 2 counters"
    );
    for c in &v.counters {
        mux_counter(c, v.time_running_ns)?;
    }
    Ok(())
}

/// A set that never runs: sets [task-clock, cs] and [migrations] switched
/// after 10 s of running time, over `true`, which runs far less: the
/// second set is never on the counters. Table: `<not counted>` and
/// (0.00%) for migrations, no share on set 0's lines (100%); JSON: no
/// estimate, time_running_ns 0; CSV: perf's `<not counted>` line.
fn mux_not_counted(pfm: &Pfm) -> TestResult {
    let args = |fmt: &'static str| {
        let mut a = vec!["stat"];
        if !fmt.is_empty() {
            a.push(fmt);
        }
        a.extend([
            "--switch",
            "10s",
            "-e",
            "task-clock,cs,migrations",
            "--",
            "true",
        ]);
        a
    };
    let out = pfm.run(&args(""))?;
    let t = text(&out.stderr);
    show("table", &t);
    ensure!(out.status.success(), "exit {:?}", out.status);
    let line = |e: &str| {
        t.lines()
            .find(|l| l.contains(e))
            .ok_or_else(|| format!("no {e} line"))
    };
    let mig = line("cpu-migrations")?;
    ensure!(
        mig.trim_start().starts_with("<not counted>") && mig.ends_with("(0.00%)"),
        "{mig}"
    );
    let tc = line("task-clock")?;
    ensure!(
        !tc.contains("%)"),
        "a share on a set that ran all the time: {tc}"
    );
    let out = pfm.run(&args("--json"))?;
    let v: Stat = doc(&text(&out.stderr))?;
    let c = v
        .counters
        .iter()
        .find(|c| c.event == "cpu-migrations")
        .ok_or("no cpu-migrations")?;
    ensure!(
        c.set == Some(1)
            && c.estimate.is_none()
            && c.time_running_ns == Some(0)
            && c.running_pct == Some(0.0)
            && c.value == 0
            && c.metric.is_none(),
        "{c:?}"
    );
    let tc = &v.counters[0];
    ensure!(
        tc.running_pct == Some(100.0) && tc.estimate == Some(tc.value),
        "{tc:?}"
    );
    let out = pfm.run(&args("-x,"))?;
    let csv = text(&out.stderr);
    show("csv", &csv);
    ensure!(
        csv.lines()
            .any(|l| l == "<not counted>,,cpu-migrations,0,0.00,,"),
        "no <not counted> CSV line"
    );
    Ok(())
}

/// Sets that cannot be: a group or a --sets set larger than the two
/// counters, and events that leave no counter for the overflow trigger:
/// one line each, exit status 1.
fn mux_errors(pfm: &Pfm) -> TestResult {
    for (args, want) in [
        (
            &["stat", "-e", "{task-clock,cs,migrations},cs", "--", "true"][..],
            "the group {task-clock,cs,migrations} has 3 events and a set holds 2",
        ),
        (
            &[
                "stat",
                "--sets",
                "cs:task-clock,cs,migrations",
                "--",
                "true",
            ],
            "the set 'task-clock,cs,migrations' has 3 events and a set holds 2",
        ),
        (
            &[
                "stat",
                "--switch-on-overflow",
                "1",
                "-c",
                "1",
                "--sets",
                "cs:task-clock,cs",
                "--",
                "true",
            ],
            "a set holds 1 (one counter per set is the switch trigger)",
        ),
    ] {
        let out = pfm.run(args)?;
        let err = text(&out.stderr);
        show("stderr", &err);
        ensure!(out.status.code() == Some(1), "exit {:?}", out.status);
        one_line(&err, want)?;
    }
    Ok(())
}

/// Overflow switching: `--switch-on-overflow 2 -c 5 --sets cs:cs`, each
/// set one context-switches event plus its trigger (a copy of it from
/// 2^64 - 5), over 47 sleeps. A set gives way at its trigger's 2nd
/// overflow, i.e. at its 10th switch; the switch-out that reaches it is
/// the old set's, the next the new set's (Documentation/perfmon.rst), so
/// with T switches in all, q = T / 10 switches of set, r = T mod 10: set 0
/// counted 10 ceil(q / 2) (+ r if q is even: it is the active one), set 1
/// 10 floor(q / 2) (+ r if q is odd), exactly. T itself is the command's
/// switch-outs, within its own getrusage counts ([`switch_bounds`]).
fn mux_overflow(pfm: &Pfm, dir: &Path) -> TestResult {
    const SLEEPS: u64 = 47;
    let me = me()?;
    let file = dir.join("own-overflow");
    let f = file.to_string_lossy().into_owned();
    let sleeps = SLEEPS.to_string();
    let out = pfm.run(&[
        "stat",
        "--json",
        "--switch-on-overflow",
        "2",
        "-c",
        "5",
        "--sets",
        "cs:cs",
        "--",
        &me,
        CHILD_FLAG,
        "own",
        &f,
        &sleeps,
        "0",
    ])?;
    let err = text(&out.stderr);
    show("json", &err);
    ensure!(out.status.success(), "exit {:?}: {err}", out.status);
    let v: Stat = doc(&err)?;
    let m = v.multiplex.as_ref().ok_or("no multiplex object")?;
    ensure!(
        m.sets == 2
            && m.counters == 2
            && m.switch_ns.is_none()
            && m.switch_on_overflow == Some(2)
            && m.period == Some(5),
        "multiplex {m:?}"
    );
    ensure!(v.counters.len() == 2, "{} counters", v.counters.len());
    let mut running = 0;
    for (k, c) in v.counters.iter().enumerate() {
        let (set, run) = mux_counter(c, v.time_running_ns)?;
        ensure!(usize::from(set) == k, "counter {k} in set {set}");
        running += run;
    }
    ensure!(
        running == v.time_running_ns,
        "the sets ran {running} ns of {}",
        v.time_running_ns
    );
    let (a, b) = (v.counters[0].value, v.counters[1].value);
    let total = a + b;
    let (q, r) = (total / 10, total % 10);
    let want = (
        10 * q.div_ceil(2) + if q % 2 == 0 { r } else { 0 },
        10 * (q / 2) + if q % 2 == 1 { r } else { 0 },
    );
    let o = own(&file)?;
    diag(format!(
        "sets counted {a} + {b} = {total} switches ({q} set switches); own count {} (at its start {})",
        o.switches, o.switches_start
    ));
    ensure!(
        (a, b) == want,
        "sets counted {a} and {b} of {total} switches; switching at every 10th gives {want:?}"
    );
    let (lo, hi) = switch_bounds(&o);
    ensure!(
        (lo..=hi).contains(&total),
        "{total} switches; the command's own counts say [{lo}, {hi}]"
    );
    // The split is a test of both sets' switching only if each was
    // switched away from: 2 set switches (20 switch-outs) at least.
    ensure!(q >= 2, "only {q} set switches for {total} switches");
    Ok(())
}

/// `-I 20` of three sets at 1 ms over 150 ms of spinning: the intervals'
/// raw counts and context times add up exactly to the totals (as without
/// sets), and so do each counter's set times.
fn mux_intervals(pfm: &Pfm) -> TestResult {
    let me = me()?;
    let out = pfm.run(&[
        "stat",
        "--json",
        "-I",
        "20",
        "--switch",
        "1ms",
        "-e",
        "task-clock,cs,migrations,task-clock,cs",
        "--",
        &me,
        CHILD_FLAG,
        "spin",
        "150",
    ])?;
    ensure!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        text(&out.stderr)
    );
    let all: Vec<Stat> = docs(&text(&out.stderr))?;
    diag(format!("{} documents", all.len()));
    intervals_add_up(&all)?;
    let (summary, intervals) = all.split_last().ok_or("no JSON")?;
    for (i, c) in summary.counters.iter().enumerate() {
        let sum = |f: fn(&pfm_json::Counter) -> Option<u64>| -> u64 {
            intervals
                .iter()
                .filter_map(|d| d.counters.get(i).and_then(f))
                .sum()
        };
        let (te, tr) = (sum(|c| c.time_enabled_ns), sum(|c| c.time_running_ns));
        ensure!(
            Some(te) == c.time_enabled_ns && Some(tr) == c.time_running_ns,
            "{} (set {:?}): the intervals' set times add up to {te} / {tr}, the totals are {:?} / {:?}",
            c.event,
            c.set,
            c.time_enabled_ns,
            c.time_running_ns
        );
        mux_counter(c, summary.time_running_ns)?;
    }
    for d in intervals {
        for c in &d.counters {
            mux_counter(c, c.time_enabled_ns.unwrap_or(0))?;
        }
    }
    Ok(())
}

/// More events than the general-purpose counters on `intel_arch_sim`:
/// `pfm stat` multiplexes them with event sets (the PMU layer's per-CPU
/// timer switches them, every 2 ms of the command's running time), over a
/// command that spins 200 ms. Every event is the same one, instructions in
/// user mode, so each set's raw count is the simulator's rule applied to
/// that set's own running time: 1 instruction per 2 ns the thread runs
/// with the set's registers on the PMU, never more (+1 ms for the clocks'
/// granularity) and at least 80% (the counters stop in the switch and PMI
/// paths, which the runtime includes: pfm_test_hwsim's rule). Then each
/// estimate, count × enabled / running, obeys the same rule against the
/// whole running time.
fn hw_sets(pfm: &Pfm) -> TestResult {
    const MS: u64 = 1_000_000;
    let j = pfm.run(&["list", "--json"])?;
    ensure!(j.status.success(), "pfm list --json failed");
    let l: List = doc(&text(&j.stdout))?;
    let n = l.counters + 1;
    let events = vec!["r4100c0"; n].join(",");
    let me = me()?;
    let out = pfm.run(&[
        "stat", "--json", "--switch", "2ms", "-e", &events, "--", &me, CHILD_FLAG, "spin", "200",
    ])?;
    let err = text(&out.stderr);
    show("stderr", &err);
    ensure!(out.status.success(), "exit {:?}", out.status);
    let v: Stat = doc(&err)?;
    let m = v
        .multiplex
        .as_ref()
        .ok_or("more events than counters, not multiplexed")?;
    ensure!(
        m.sets >= 2 && m.switch_ns == Some(2 * MS),
        "multiplex {m:?}: expected 2 sets or more at 2 ms"
    );
    ensure!(
        v.counters.len() == n,
        "{} counters for {n} events",
        v.counters.len()
    );
    let mut sets = std::collections::BTreeSet::new();
    for c in &v.counters {
        let enabled = c.time_enabled_ns.unwrap_or(0);
        let (set, running) = mux_counter(c, enabled)?;
        sets.insert(set);
        ensure!(running > 0, "{} (set {set}) never ran", c.event);
        ensure!(
            c.value <= (running + MS) / 2 && c.value >= running / 10 * 8 / 2,
            "{} (set {set}): {} instructions in {running} ns of its set's turns",
            c.event,
            c.value
        );
        let est = c
            .estimate
            .ok_or_else(|| format!("{}: no estimate", c.event))?;
        // est = value x enabled / running <= (running + 1 ms) / 2 x
        // enabled / running.
        let most =
            ((running as u128 + MS as u128) * enabled as u128 / (2 * running as u128)) as u64;
        ensure!(
            est <= most + 1 && est >= enabled / 10 * 8 / 2,
            "{} (set {set}): estimate {est} for {enabled} ns of running",
            c.event
        );
    }
    ensure!(
        sets.len() == usize::from(m.sets),
        "counters in sets {sets:?}, {} sets",
        m.sets
    );
    Ok(())
}

/// This program's own child modes (`--cli-child MODE ARGS`), beside
/// `pfm_guest::child`'s.
const CLI_CHILD: &str = "--cli-child";

/// `--cli-child threads N MS FILE`: N threads that each append `w TID` to
/// FILE and then sleep MS ms at a time forever, while the main thread
/// creates a short-lived thread every 50 ms that lives 5 ms: a
/// multi-threaded process that creates threads while pfm counts it. Runs
/// until killed (or its parent dies).
///
/// The created threads say when they ran, on the clock the test reads
/// (`CLOCK_MONOTONIC`), so the test can tell a thread the module missed
/// from one that never ran while pfm counted: the K-th appends
/// `c TID K MONO SWITCHES` at its start and `e TID K MONO SWITCHES` at its
/// end (its own `getrusage(RUSAGE_THREAD)` count); the main thread appends
/// `m K MONO` just before it creates the K-th and `j K MONO` once it has
/// joined it (before it sleeps and creates the next).
fn cli_child() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) != Some(CLI_CHILD) {
        return;
    }
    pfm_guest::raw::die_with_parent();
    let num = |i: usize| args.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(1);
    if args.get(2).map(String::as_str) != Some("threads") {
        std::process::exit(2);
    }
    let (n, ms) = (num(3), num(4).max(1));
    let Some(file) = args.get(5).cloned() else {
        std::process::exit(2);
    };
    let note = move |line: String| {
        use std::io::Write;
        // One write of a short line to an O_APPEND file: lines never mix.
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&file)
            .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
    };
    for _ in 0..n {
        let note = note.clone();
        std::thread::spawn(move || {
            note(format!("w {}", perfmon::process::gettid()));
            loop {
                std::thread::sleep(Duration::from_millis(ms));
            }
        });
    }
    let tid = perfmon::process::gettid;
    let own = pfm_guest::edges::thread_switches;
    for k in 0u64.. {
        std::thread::sleep(Duration::from_millis(50));
        note(format!("m {k} {}", mono_ns()));
        let n2 = note.clone();
        let h = std::thread::spawn(move || {
            n2(format!("c {} {k} {} {}", tid(), mono_ns(), own()));
            std::thread::sleep(Duration::from_millis(5));
            n2(format!("e {} {k} {} {}", tid(), mono_ns(), own()));
        });
        let _ = h.join();
        note(format!("j {k} {}", mono_ns()));
    }
}

/// `CLOCK_MONOTONIC` in ns: the clock the `threads` child's records and the
/// test share.
fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is valid for writes.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Sleeps of each child of [`forking_shell`].
const CHILD_SLEEPS: u64 = 100;

/// `sh -c` running 3 children of this program that each make
/// [`CHILD_SLEEPS`] sleeps with a switch, writing each child's pid to
/// `pids`, then waiting for them.
fn forking_shell(pids: &str) -> Result<String, String> {
    let me = me()?;
    let child = format!("'{me}' {CHILD_FLAG} sleeps {CHILD_SLEEPS}");
    Ok(format!(
        "rm -f '{pids}'; for n in 1 2 3; do {child} & echo $! >> '{pids}'; done; wait"
    ))
}

/// The pids `forking_shell` wrote.
fn pids_in(path: &Path) -> Result<Vec<u32>, String> {
    let text = std::fs::read_to_string(path).ctx("read the children's pids")?;
    text.split_whitespace()
        .map(|w| w.parse::<u32>().map_err(|e| format!("pid '{w}': {e}")))
        .collect()
}

/// The values of `c` in every row of `--per-thread`, and their sum, which
/// must be the total (each row is its thread's own count).
fn rows_add_up(v: &Stat, event: &str) -> Result<Vec<(u32, u64)>, String> {
    let i = v
        .counters
        .iter()
        .position(|c| c.event == event)
        .ok_or_else(|| format!("no {event}"))?;
    let threads = v.threads.as_ref().ok_or("no threads in the JSON")?;
    let rows: Vec<(u32, u64)> = threads
        .iter()
        .map(|t| (t.tid, t.values.get(i).copied().unwrap_or(0)))
        .collect();
    let sum: u64 = rows.iter().map(|r| r.1).sum();
    ensure!(
        sum == v.counters[i].value,
        "the rows' {event} add up to {sum}, the total is {}: {rows:?}",
        v.counters[i].value
    );
    Ok(rows)
}

/// perfmon's count of `event` is not above perf's + 3, perf's window
/// holding perfmon's (see `whole_process`).
fn not_above_perf(v: &Stat, event: &str) -> TestResult {
    let c = v
        .counters
        .iter()
        .find(|c| c.event == event)
        .ok_or_else(|| format!("no {event}"))?;
    let perf = c
        .perf_value
        .ok_or_else(|| format!("no perf_value for {event}"))?;
    diag(format!("{event}: perfmon {}, perf {perf}", c.value));
    ensure!(
        c.value <= perf + 3,
        "{event}: perfmon {} above perf's {perf} (+3), whose window holds perfmon's",
        c.value
    );
    Ok(())
}

/// perfmon's and perf's counts of `event` agree within 5% (plus 3): the
/// same threads from the same instant, read at slightly different ones.
fn agrees_with_perf(v: &Stat, event: &str) -> TestResult {
    let c = v
        .counters
        .iter()
        .find(|c| c.event == event)
        .ok_or_else(|| format!("no {event}"))?;
    let perf = c
        .perf_value
        .ok_or_else(|| format!("no perf_value for {event}"))?;
    diag(format!("{event}: perfmon {}, perf {perf}", c.value));
    ensure!(
        pfm_guest::close(c.value, perf, 0.05, 3),
        "{event}: perfmon {} and perf {perf} differ by more than 5% + 3",
        c.value
    );
    Ok(())
}

fn inherit_children(pfm: &Pfm, dir: &Path) -> TestResult {
    let pids = dir.join("children-a").to_string_lossy().into_owned();
    let script = forking_shell(&pids)?;
    let out = pfm.run(&[
        "stat",
        "--json",
        "--perf",
        "-e",
        "context-switches",
        "--",
        "sh",
        "-c",
        &script,
    ])?;
    let err = text(&out.stderr);
    show("stderr", &err);
    ensure!(out.status.success(), "exit {:?}", out.status);
    let v: Stat = doc(&err)?;
    ensure!(v.inherit == Some(true), "inherit {:?}", v.inherit);
    ensure!(
        v.lost_threads == Some(0),
        "lost_threads {:?}",
        v.lost_threads
    );
    ensure!(v.threads.is_none(), "threads without --per-thread");
    let cs = value_of(&v, "context-switches")?;
    let children = pids_in(Path::new(&pids))?;
    ensure!(children.len() == 3, "children {children:?}");
    ensure!(
        cs >= 3 * CHILD_SLEEPS,
        "{cs} switches: the 3 children alone made {} sleeps",
        3 * CHILD_SLEEPS
    );
    agrees_with_perf(&v, "context-switches")
}

fn per_thread_children(pfm: &Pfm, dir: &Path) -> TestResult {
    let pids = dir.join("children-b").to_string_lossy().into_owned();
    let script = forking_shell(&pids)?;
    let out = pfm.run(&[
        "stat",
        "--json",
        "--per-thread",
        "-e",
        "context-switches,task-clock",
        "--",
        "sh",
        "-c",
        &script,
    ])?;
    let err = text(&out.stderr);
    show("stderr", &err);
    ensure!(out.status.success(), "exit {:?}", out.status);
    let v: Stat = doc(&err)?;
    let threads = v.threads.clone().ok_or("no threads")?;
    let shell = v.pid.ok_or("no pid")?;
    let first = threads.first().ok_or("no row")?;
    ensure!(
        first.tid == shell,
        "first row {first:?}, the shell is {shell}"
    );
    ensure!(
        first.comm.as_deref() == Some("sh"),
        "the shell's name {:?}",
        first.comm
    );
    let children = pids_in(Path::new(&pids))?;
    ensure!(children.len() == 3, "children {children:?}");
    let mut named = 0;
    for c in &children {
        let row = threads
            .iter()
            .find(|t| t.tid == *c)
            .ok_or_else(|| format!("child {c} has no row in {threads:?}"))?;
        ensure!(row.exited && !row.revoked, "child row {row:?}");
        ensure!(row.pid == *c, "child {c}'s pid {}", row.pid);
        ensure!(
            row.values[0] >= CHILD_SLEEPS,
            "child {c}: {} switches for {CHILD_SLEEPS} sleeps",
            row.values[0]
        );
        match row.comm.as_deref() {
            Some("pfm_test_cli") => named += 1,
            None => {}
            Some(other) => return Err(format!("child {c} named {other}")),
        }
    }
    diag(format!("{named} of 3 children seen alive and named"));
    ensure!(
        named >= 1,
        "no child named: each lived 100 sleeps, pfm looks every 20 ms"
    );
    rows_add_up(&v, "context-switches")?;
    rows_add_up(&v, "task-clock")?;
    // The table: a row per thread under the counts.
    let out = pfm.run(&[
        "stat",
        "--per-thread",
        "-e",
        "cs",
        "--",
        "sh",
        "-c",
        &script,
    ])?;
    let t = text(&out.stderr);
    show("table", &t);
    ensure!(out.status.success(), "exit {:?}", out.status);
    ensure!(
        t.contains(" comm      tid  context-switches"),
        "no per-thread header"
    );
    let children = pids_in(Path::new(&pids))?;
    for c in children {
        ensure!(
            t.lines()
                .any(|l| l.split_whitespace().nth(1) == Some(&c.to_string())),
            "no row of child {c}"
        );
    }
    Ok(())
}

fn no_inherit(pfm: &Pfm, dir: &Path) -> TestResult {
    let pids = dir.join("children-c").to_string_lossy().into_owned();
    let script = forking_shell(&pids)?;
    let out = pfm.run(&[
        "stat",
        "--json",
        "--perf",
        "--no-inherit",
        "--per-thread",
        "-e",
        "context-switches",
        "--",
        "sh",
        "-c",
        &script,
    ])?;
    let err = text(&out.stderr);
    show("stderr", &err);
    ensure!(out.status.success(), "exit {:?}", out.status);
    let v: Stat = doc(&err)?;
    ensure!(v.inherit == Some(false), "inherit {:?}", v.inherit);
    ensure!(
        v.lost_threads.is_none(),
        "lost_threads {:?}",
        v.lost_threads
    );
    let cs = value_of(&v, "context-switches")?;
    ensure!(
        (1..CHILD_SLEEPS).contains(&cs),
        "{cs} switches for a shell that forks 3 children and waits (each child alone makes {CHILD_SLEEPS})"
    );
    let threads = v.threads.as_ref().ok_or("no threads")?;
    ensure!(
        threads.len() == 1 && Some(threads[0].tid) == v.pid,
        "one row, the shell's: {threads:?}"
    );
    agrees_with_perf(&v, "context-switches")
}

/// The tids of `kind` (`w` or `c`) lines in a `threads` child's file.
fn noted(path: &Path, kind: &str) -> Vec<u32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            l.strip_prefix(kind)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

/// A created thread of the `threads` child, as its records say.
#[derive(Clone, Copy, Debug, Default)]
struct Life {
    tid: u32,
    /// Its own start and end (`c`, `e`): CLOCK_MONOTONIC and switches.
    start: Option<(u64, u64)>,
    end: Option<(u64, u64)>,
    /// The main thread's record before creating it (`m`) and after joining
    /// it (`j`).
    made: Option<u64>,
    joined: Option<u64>,
}

/// The created threads' records, by their number K.
fn lives(path: &Path) -> std::collections::BTreeMap<u64, Life> {
    let mut map = std::collections::BTreeMap::<u64, Life>::new();
    let text = std::fs::read_to_string(path).unwrap_or_default();
    for l in text.lines() {
        let w: Vec<u64> = l
            .split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        match (l.split_whitespace().next(), w.as_slice()) {
            (Some("c"), &[tid, k, t, sw]) => {
                let e = map.entry(k).or_default();
                e.tid = tid as u32;
                e.start = Some((t, sw));
            }
            (Some("e"), &[_, k, t, sw]) => map.entry(k).or_default().end = Some((t, sw)),
            (Some("m"), &[k, t]) => map.entry(k).or_default().made = Some(t),
            (Some("j"), &[k, t]) => map.entry(k).or_default().joined = Some(t),
            _ => {}
        }
    }
    map
}

/// Tells the created threads pfm missed from those that never ran while
/// it counted, from their own records and the rows: a row counted (time
/// enabled > 0) proves the counting window reached into that thread's
/// life. So the window began before a counted thread's join (`j`: the
/// thread has exited then, but for its last few microseconds of exit path
/// in the kernel, which the next thread's creation follows by the main
/// thread's 50 ms sleep) and ended after a counted thread's creation (its
/// `m` record precedes it). A thread whose whole life (`c` to `e`) lies
/// after such a join and before such a creation ran inside the window: it
/// must have a row, time enabled, and at least the switches it saw
/// between its own two records. Anything else with 0 time enabled was
/// created before START (and gone before it) or after STOP: it never ran
/// in the window. Returns (inside, outside with 0 time) for the diagnostic.
fn created_threads_counted(
    v: &Stat,
    lives: &std::collections::BTreeMap<u64, Life>,
) -> Result<(usize, usize), String> {
    let cs = v
        .counters
        .iter()
        .position(|c| c.event == "context-switches")
        .ok_or("no context-switches")?;
    let rows = v.threads.as_ref().ok_or("no threads in the JSON")?;
    let row = |tid: u32| rows.iter().find(|r| r.tid == tid);
    let counted = |l: &Life| row(l.tid).is_some_and(|r| r.time_enabled_ns > 0);
    // The window began before this and ended after that.
    let began_before = lives
        .values()
        .filter(|l| counted(l))
        .filter_map(|l| l.joined)
        .min();
    let ended_after = lives
        .values()
        .filter(|l| counted(l))
        .filter_map(|l| l.made)
        .max();
    let (mut inside, mut outside_zero) = (0, 0);
    for (k, l) in lives {
        let (Some((s, sw0)), Some((e, sw1))) = (l.start, l.end) else {
            continue;
        };
        let within = began_before.is_some_and(|b| b < s) && ended_after.is_some_and(|a| a > e);
        let r = row(l.tid);
        if !within {
            if r.is_some_and(|r| r.time_enabled_ns == 0) {
                outside_zero += 1;
            }
            continue;
        }
        inside += 1;
        let r = r.ok_or_else(|| {
            format!(
                "created thread {k} (tid {}) ran inside the counting window ([{s}, {e}] within ({}, {})) and has no row: missed",
                l.tid,
                began_before.unwrap_or(0),
                ended_after.unwrap_or(0)
            )
        })?;
        let n = r.values.get(cs).copied().unwrap_or(0);
        ensure!(
            r.time_enabled_ns > 0 && n >= sw1 - sw0,
            "created thread {k} (tid {}) ran inside the counting window ([{s}, {e}] within ({}, {})) and was missed: time enabled {} ns, {n} switches, it saw {} itself",
            l.tid,
            began_before.unwrap_or(0),
            ended_after.unwrap_or(0),
            r.time_enabled_ns,
            sw1 - sw0
        );
    }
    Ok((inside, outside_zero))
}

fn whole_process(pfm: &Pfm, dir: &Path) -> TestResult {
    let out = pfm.run(&["stat", "-p", "4194305", "--duration", "0.1"])?;
    let err = text(&out.stderr);
    show("stderr", &err);
    ensure!(out.status.code() == Some(1), "exit {:?}", out.status);
    one_line(&err, "no such process: 4194305")?;
    let file = dir.join("threads");
    let _ = std::fs::remove_file(&file);
    let f = file.to_string_lossy().into_owned();
    let mut proc_ = Command::new(me()?)
        .args([CLI_CHILD, "threads", "3", "2", &f])
        .stdin(Stdio::null())
        .spawn()
        .ctx("spawn the threads")?;
    let pid = proc_.id();
    let res = (|| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while noted(&file, "w").len() < 3 {
            ensure!(Instant::now() < deadline, "the 3 threads did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        let workers = noted(&file, "w");
        let before = noted(&file, "c");
        let p = pid.to_string();
        let out = pfm.run(&[
            "stat",
            "-p",
            &p,
            "--duration",
            "1",
            "--per-thread",
            "--perf",
            "--json",
            "-e",
            "context-switches,task-clock",
        ])?;
        let err = text(&out.stderr);
        show("stderr", &err);
        ensure!(out.status.success(), "exit {:?}", out.status);
        let v: Stat = doc(&err)?;
        ensure!(v.pids.as_deref() == Some(&[pid][..]), "pids {:?}", v.pids);
        ensure!(
            v.lost_threads == Some(0),
            "lost_threads {:?}",
            v.lost_threads
        );
        ensure!(v.target_exited == Some(false), "target_exited");
        let threads = v.threads.clone().ok_or("no threads")?;
        let tids: Vec<u32> = threads.iter().map(|t| t.tid).collect();
        ensure!(
            tids.first() == Some(&pid),
            "first row {tids:?}, the process is {pid}"
        );
        for w in &workers {
            ensure!(tids.contains(w), "worker {w} not in the rows {tids:?}");
        }
        let late: Vec<u32> = noted(&file, "c")
            .into_iter()
            .filter(|c| !before.contains(c) && tids.contains(c))
            .collect();
        diag(format!(
            "{} rows, {} threads created while counted",
            tids.len(),
            late.len()
        ));
        ensure!(
            !late.is_empty(),
            "no thread created during the second counted (one every 50 ms): {tids:?}"
        );
        let rows = rows_add_up(&v, "context-switches")?;
        rows_add_up(&v, "task-clock")?;
        // 3 threads sleeping 2 ms at a time for 1 s: hundreds of switches
        // each on any guest.
        for w in &workers {
            let n = rows.iter().find(|r| r.0 == *w).map_or(0, |r| r.1);
            ensure!(n >= 50, "worker {w}: {n} switches in 1 s of 2 ms sleeps");
        }
        let (inside, outside_zero) = created_threads_counted(&v, &lives(&file))?;
        diag(format!(
            "created threads: {inside} ran inside the counting window, each counted; {outside_zero} rows with 0 time enabled never ran in it"
        ));
        ensure!(inside > 0, "no created thread provably inside the window");
        // perf's window is not perfmon's: pfm enables perf before START
        // and disables it after STOP, so perf also counts the switches in
        // between (on a slow guest, tens: 459 against 496 was seen). Only
        // the side where the windows are aligned is checked: perfmon's
        // count is within perf's (+3: a thread created between pfm's
        // listing of /proc/PID/task and its perf open on the creator is
        // not inherited by perf). Undercounting is what the rows above
        // catch, against the threads' own records.
        not_above_perf(&v, "context-switches")
    })();
    let _ = proc_.kill();
    let _ = proc_.wait();
    res
}

fn main() {
    pfm_guest::child::dispatch();
    cli_child();
    // libpfm4 reads it once, at its first use in this process.
    std::env::set_var("LIBPFM_FORCE_PMU", FORCED_PMU);
    let mut t = Tap::new(PLAN);
    pfm_guest::watchdog(Duration::from_secs(400));
    let Some(path) = find_pfm() else {
        t.bail_out("pfm not found ($PFM_BIN, next to this program, /bin/pfm, PATH)");
    };
    diag(format!("pfm: {}", path.display()));
    let pfm = Pfm { path };
    let dir = std::env::temp_dir().join(format!("pfm-cli-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        t.bail_out(format!("cannot create {}: {e}", dir.display()));
    }
    t.require("insmod perfmon.ko", module::insmod(&[]));
    t.run("pfm info: --json is an Info, agrees with GET_INFO", || {
        info(&pfm)
    });
    t.run(
        "pfm list: --json is a List of the soft events with their codes",
        || list(&pfm),
    );
    t.run(
        "pfm_json rejects a document with an undocumented field",
        || schema_rejects_unknown(&pfm),
    );
    t.run(
        "pfm stat --json -o FILE -- sh -c 'sleep 0.1': a Stat, sane",
        || stat_json_sleep(&pfm, &dir),
    );
    t.run(
        "pfm stat counts 50 sleeps from the first instruction (50..=60 switches)",
        || exact_sleeps(&pfm),
    );
    t.run(
        "pfm stat table: header, msec, CPUs utilized, /sec, elapsed; -e honoured",
        || table_matches(&pfm),
    );
    t.run(
        "pfm stat: thousands grouped, not with --no-big-num; columns aligned",
        || big_num_and_alignment(&pfm),
    );
    t.run(
        "pfm stat -x: 7 CSV fields in perf's order, 8 with -r or -I",
        || csv_fields(&pfm),
    );
    t.run(
        "pfm stat -r 3: run documents, mean and stddev of 10/20/30 switches, ± in the table",
        || repeat_statistics(&pfm, &dir),
    );
    t.run(
        "pfm stat -I 40 -- CMD: interval deltas add up exactly to the totals",
        || command_intervals(&pfm),
    );
    t.run(
        "pfm stat passes exit status, signal (128+N), missing command (127)",
        || exit_statuses(&pfm),
    );
    t.run(
        "pfm stat -e with a typo: one line with the closest event",
        || bad_event(&pfm),
    );
    t.run(
        "pfm stat -e task-clock:u,cpu-clock,cs:k,faults,minor-faults:u,major-faults (perf's spellings); alignment-faults, cycles: one line why",
        || perf_spellings_soft(&pfm),
    );
    t.run(
        "pfm --help, stat --help; usage errors on one line, exit 2",
        || usage(&pfm),
    );
    t.run(
        "pfm stat -t TID -I 100 --duration 0.5 --json: intervals add up to the totals",
        || thread_interval(&pfm),
    );
    t.run("pfm stat -t TID: SIGINT prints the totals so far", || {
        thread_ctrl_c(&pfm)
    });
    t.run("pfm stat -t of a missing thread: one-line error", || {
        missing_thread(&pfm)
    });
    t.run(
        "pfm stat -r 3, SIGINT in run 2: the killed run left out of the mean, exit 130",
        || repeat_ctrl_c(&pfm, &dir),
    );
    t.run(
        "pfm stat -- sh -c '3 children & wait': their 3x100 sleeps counted, perf inherit=1 agrees",
        || inherit_children(&pfm, &dir),
    );
    t.run(
        "pfm stat --per-thread: the shell first, each child's row and name, rows add up to the totals",
        || per_thread_children(&pfm, &dir),
    );
    t.run(
        "pfm stat --no-inherit: the shell alone (fewer switches than one child), one row, perf agrees",
        || no_inherit(&pfm, &dir),
    );
    t.run(
        "pfm stat -p PID of a process of 4+ threads: every thread and the new ones, one total, perf agrees",
        || whole_process(&pfm, &dir),
    );
    t.run("no live context left by pfm (soft)", || {
        module::wait_contexts(0, Duration::from_secs(5))
    });
    t.run("rmmod perfmon (soft)", module::rmmod);
    let mux = module::insmod(&["pmu=soft", "soft_counters=2"]);
    let mux_ok = mux.is_ok();
    t.run("insmod perfmon.ko pmu=soft soft_counters=2", || mux);
    let mux_case = |t: &mut Tap, name: &str, f: &dyn Fn() -> TestResult| {
        if mux_ok {
            t.run(name, f);
        } else {
            t.skip(name, "insmod soft_counters=2 failed");
        }
    };
    mux_case(
        &mut t,
        "pfm stat -e '{task-clock,cs}' x3 on 2 counters: 3 sets at 1 ms, task-clock's estimate = time_enabled within the command's own CPU time, switches conserved",
        &|| mux_conservation(&pfm, &dir),
    );
    mux_case(
        &mut t,
        "pfm stat -e 6 events on 2 counters of a 14-thread, 4-process program: every thread counted, task-clock within the threads' own clocks",
        &|| mux_whole_program(&pfm, &dir),
    );
    mux_case(
        &mut t,
        "pfm stat, 5 events on 2 counters: 3 sets first fit, (xx.xx%) per set adding up to 100, the note",
        &|| mux_table(&pfm, &dir),
    );
    mux_case(
        &mut t,
        "pfm stat --switch 10s of 'true': a set never run is <not counted> (0.00%) in table, JSON and CSV",
        &|| mux_not_counted(&pfm),
    );
    mux_case(
        &mut t,
        "pfm stat: a group or --sets set larger than a set, no room for the trigger: one line, exit 1",
        &|| mux_errors(&pfm),
    );
    mux_case(
        &mut t,
        "pfm stat --switch-on-overflow 2 -c 5 --sets cs:cs: the sets switch at every 10th switch, counts exact",
        &|| mux_overflow(&pfm, &dir),
    );
    mux_case(
        &mut t,
        "pfm stat -I 20 multiplexed: counts, context and set times of the intervals add up to the totals",
        &|| mux_intervals(&pfm),
    );
    mux_case(
        &mut t,
        "no live context left by pfm (soft_counters=2)",
        &|| module::wait_contexts(0, Duration::from_secs(5)),
    );
    mux_case(&mut t, "rmmod perfmon (soft_counters=2)", &module::rmmod);
    let hw = module::insmod(&["pmu=intel_arch_sim"]);
    let hw_ok = hw.is_ok();
    t.run("insmod perfmon.ko pmu=intel_arch_sim", || hw);
    let hw_case = |t: &mut Tap, name: &str, f: &dyn Fn() -> TestResult| {
        if hw_ok {
            t.run(name, f);
        } else {
            t.skip(name, "insmod pmu=intel_arch_sim failed");
        }
    };
    hw_case(
        &mut t,
        "LIBPFM_FORCE_PMU=skl pfm list: libpfm4's Skylake events (table and JSON)",
        &|| libpfm_list(&pfm),
    );
    hw_case(
        &mut t,
        "pfm stat -e INST_RETIRED.ANY_P:u,...: PMCs = libpfm4's encodings, counted as such (IPC 0.5)",
        &|| libpfm_encoding(&pfm),
    );
    hw_case(
        &mut t,
        "pfm stat -e cycles,instructions:u,r5100c0,cache-misses: perf's encodings written and accepted; what cannot count, one line",
        &|| perf_spellings_hw(&pfm),
    );
    hw_case(
        &mut t,
        "pfm stat -e INST_RETIRD.ANY_P:u: one line naming libpfm4's closest names",
        &|| libpfm_unknown(&pfm),
    );
    hw_case(
        &mut t,
        "pfm stat with more events than counters on intel_arch_sim: multiplexed by the per-CPU timer, each set's count its own turns",
        &|| hw_sets(&pfm),
    );
    hw_case(
        &mut t,
        "no live context left by pfm (intel_arch_sim)",
        &|| module::wait_contexts(0, Duration::from_secs(5)),
    );
    hw_case(&mut t, "rmmod perfmon (intel_arch_sim)", &module::rmmod);
    t.run(
        "without the module: 'perfmon module not loaded (modprobe perfmon)'",
        || not_loaded(&pfm),
    );
    let _ = std::fs::remove_dir_all(&dir);
    t.finish();
}
