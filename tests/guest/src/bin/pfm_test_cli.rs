//! pfm_test_cli: the `pfm` tool end to end, as a user runs it.
//!
//! `pfm info` / `pfm list` (table and --json, agreeing with GET_INFO),
//! `pfm stat --json -- sh -c 'sleep 0.1'` (parses; events, elapsed,
//! exit status sane), a workload of exactly 50 sleeps counted from the
//! first instruction (context-switches in 50..=60), the command's exit
//! status and signal passed through, a missing command (127), a typo in an
//! event name (closest name suggested), `pfm stat -t TID --interval 100
//! --duration 0.5 --json` (interval lines + summary), Ctrl-C on
//! `pfm stat -t` printing the totals, and, without the module, the
//! "module not loaded" message.
//!
//! The tool is found through $PFM_BIN, next to this program, as /bin/pfm,
//! or in PATH.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use perfmon::json::{self, Value};
use pfm_guest::child::Child;
use pfm_guest::tap::diag;
use pfm_guest::{ensure, module, ResultExt, Tap, TestResult};

const PLAN: usize = 15;

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

struct Pfm {
    path: PathBuf,
}

impl Pfm {
    /// Runs pfm with `args`, stdin from /dev/null, killed after 30 s.
    fn run(&self, args: &[&str]) -> Result<Output, String> {
        let mut child = Command::new(&self.path)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("run {}: {e}", self.path.display()))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if child.try_wait().ctx("wait")?.is_some() {
                break;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("pfm {} still running after 30 s", args.join(" ")));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let out = child.wait_with_output().ctx("collect output")?;
        diag(format!("$ pfm {}  -> {}", args.join(" "), out.status));
        Ok(out)
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn show(label: &str, s: &str) {
    for line in s.lines().filter(|l| !l.trim().is_empty()).take(30) {
        diag(format!("{label}| {line}"));
    }
}

fn parse_json(s: &str) -> Result<Value, String> {
    json::parse(s.trim()).map_err(|e| format!("{e} in {:?}", s.trim()))
}

fn counter<'a>(v: &'a Value, event: &str) -> Option<&'a Value> {
    v.get("counters")?
        .as_array()?
        .iter()
        .find(|c| c.get("event").and_then(Value::as_str) == Some(event))
}

fn counter_value(v: &Value, event: &str) -> Result<u64, String> {
    counter(v, event)
        .and_then(|c| c.get("value"))
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("no value for {event} in {}", v.to_json()))
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
    let v = parse_json(&text(&j.stdout))?;
    let raw = perfmon::Context::open()
        .ctx("open")?
        .raw_info()
        .ctx("GET_INFO")?;
    ensure!(
        v.get("abi_version").and_then(Value::as_u64) == Some(u64::from(raw.abi_version)),
        "abi_version"
    );
    ensure!(
        v.get("model").and_then(Value::as_str) == Some("soft"),
        "model"
    );
    ensure!(
        v.get("counter_width").and_then(Value::as_u64) == Some(u64::from(raw.counter_width)),
        "counter_width"
    );
    ensure!(
        v.get("vector").and_then(Value::as_u64) == Some(u64::from(raw.vector)),
        "vector"
    );
    let counters = v.get("counters").and_then(Value::as_u64).unwrap_or(0);
    ensure!(counters >= 4, "counters {counters}");
    ensure!(
        table.contains(&format!("{} bits", raw.counter_width)),
        "table lacks the width"
    );
    let live = v
        .get("sysfs")
        .and_then(|s| s.get("live_contexts"))
        .and_then(Value::as_u64);
    ensure!(live.is_some(), "no live_contexts in JSON");
    Ok(())
}

fn list(pfm: &Pfm) -> TestResult {
    let t = pfm.run(&["list"])?;
    show("list", &text(&t.stdout));
    ensure!(t.status.success(), "pfm list failed");
    let table = text(&t.stdout);
    let j = pfm.run(&["list", "--json"])?;
    ensure!(j.status.success(), "pfm list --json failed");
    let v = parse_json(&text(&j.stdout))?;
    let events = v
        .get("events")
        .and_then(Value::as_array)
        .ok_or("no events array")?;
    let mut names = Vec::new();
    for e in events {
        let name = e
            .get("name")
            .and_then(Value::as_str)
            .ok_or("event without name")?;
        let code = e
            .get("code")
            .and_then(Value::as_u64)
            .ok_or("event without code")?;
        ensure!(table.contains(name), "table lacks {name}");
        ensure!(
            table.contains(&format!("{code:#x}")),
            "table lacks code {code:#x} of {name}"
        );
        names.push(name.to_string());
    }
    for want in pfm_guest::SOFT_EVENTS {
        ensure!(
            names.iter().any(|n| n == want),
            "{want} not listed: {names:?}"
        );
    }
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
    let v = parse_json(&s)?;
    ensure!(
        v.get("type").and_then(Value::as_str) == Some("summary"),
        "type"
    );
    ensure!(
        v.get("model").and_then(Value::as_str) == Some("soft"),
        "model"
    );
    ensure!(
        v.get("exit_code").and_then(Value::as_i64) == Some(0),
        "exit_code"
    );
    let elapsed = v
        .get("elapsed_s")
        .and_then(Value::as_f64)
        .ok_or("no elapsed_s")?;
    ensure!(
        (0.1..5.0).contains(&elapsed),
        "elapsed {elapsed} s for sleep 0.1"
    );
    let tc = counter_value(&v, "task-clock")?;
    let cs = counter_value(&v, "context-switches")?;
    let _ = counter_value(&v, "cpu-migrations")?;
    ensure!(
        tc > 0 && (tc as f64) < elapsed * 1e9 * 2.0,
        "task-clock {tc} ns for {elapsed} s"
    );
    ensure!(cs >= 1, "no context switch for a command that sleeps");
    let msec = counter(&v, "task-clock")
        .and_then(|c| c.get("msec"))
        .and_then(Value::as_f64);
    ensure!(
        msec.is_some_and(|m| (m - tc as f64 / 1e6).abs() < 1e-6),
        "msec {msec:?} != value/1e6"
    );
    // The same run on stderr (pfm stat's default output) parses too.
    let out = pfm.run(&["stat", "--json", "--", "sh", "-c", "sleep 0.1"])?;
    let err = text(&out.stderr);
    let last = err
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .ok_or("no JSON on stderr")?;
    parse_json(last).map(|_| ())
}

fn exact_sleeps(pfm: &Pfm) -> TestResult {
    let me = std::env::current_exe().ctx("current_exe")?;
    let me = me.to_string_lossy().into_owned();
    let out = pfm.run(&[
        "stat",
        "--json",
        "-e",
        "context-switches,task-clock",
        "--",
        &me,
        pfm_guest::child::CHILD_FLAG,
        "sleeps",
        "50",
    ])?;
    ensure!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        text(&out.stderr)
    );
    let err = text(&out.stderr);
    let v = parse_json(
        err.lines()
            .rev()
            .find(|l| l.starts_with('{'))
            .ok_or("no JSON")?,
    )?;
    let events: Vec<&str> = v
        .get("counters")
        .and_then(Value::as_array)
        .ok_or("no counters")?
        .iter()
        .filter_map(|c| c.get("event").and_then(Value::as_str))
        .collect();
    ensure!(
        events == ["context-switches", "task-clock"],
        "events {events:?} (-e order expected)"
    );
    let cs = counter_value(&v, "context-switches")?;
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

fn bad_event(pfm: &Pfm) -> TestResult {
    let out = pfm.run(&["stat", "-e", "context-switchs", "--", "true"])?;
    let err = text(&out.stderr);
    show("stderr", &err);
    ensure!(!out.status.success(), "typo accepted");
    ensure!(
        err.contains("unknown event 'context-switchs'")
            && err.contains("did you mean 'context-switches'"),
        "message: {err}"
    );
    ensure!(!err.contains("panicked"), "pfm panicked");
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
    let docs: Vec<Value> = err
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(parse_json)
        .collect::<Result<_, _>>()?;
    let intervals = docs
        .iter()
        .filter(|d| d.get("type").and_then(Value::as_str) == Some("interval"))
        .count();
    ensure!(
        (3..=6).contains(&intervals),
        "{intervals} interval records for 0.5 s at 100 ms"
    );
    let last = docs.last().ok_or("no JSON")?;
    ensure!(
        last.get("type").and_then(Value::as_str) == Some("summary"),
        "last record is not the summary"
    );
    ensure!(
        last.get("tid").and_then(Value::as_u64) == Some(u64::from(child.pid())),
        "tid"
    );
    let cs = counter_value(last, "context-switches")?;
    ensure!(cs >= 20, "{cs} switches in 0.5 s of 5 ms naps");
    let sum: u64 = docs[..docs.len() - 1]
        .iter()
        .map(|d| counter_value(d, "context-switches").unwrap_or(0))
        .sum();
    ensure!(sum <= cs, "interval deltas sum {sum} > total {cs}");
    Ok(())
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
    std::thread::sleep(Duration::from_millis(500));
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

fn not_loaded(pfm: &Pfm) -> TestResult {
    for args in [&["info"][..], &["stat", "--", "true"]] {
        let out = pfm.run(args)?;
        let err = text(&out.stderr);
        show("stderr", &err);
        ensure!(out.status.code() == Some(1), "exit {:?}", out.status);
        ensure!(
            err.starts_with("pfm: perfmon module not loaded (insmod perfmon.ko)"),
            "message: {err}"
        );
    }
    Ok(())
}

fn main() {
    pfm_guest::child::dispatch();
    let mut t = Tap::new(PLAN);
    pfm_guest::watchdog(Duration::from_secs(300));
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
    t.run("pfm info and --json agree with GET_INFO", || info(&pfm));
    t.run(
        "pfm list and --json list the soft events with their codes",
        || list(&pfm),
    );
    t.run(
        "pfm stat --json -o FILE -- sh -c 'sleep 0.1' parses and is sane",
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
        "pfm stat passes exit status, signal (128+N), missing command (127)",
        || exit_statuses(&pfm),
    );
    t.run("pfm stat -e with a typo suggests the closest event", || {
        bad_event(&pfm)
    });
    t.run(
        "pfm stat -t TID --interval 100 --duration 0.5 --json",
        || thread_interval(&pfm),
    );
    t.run("pfm stat -t TID: SIGINT prints the totals so far", || {
        thread_ctrl_c(&pfm)
    });
    t.run("pfm --help and unknown commands", || {
        let h = pfm.run(&["--help"])?;
        ensure!(
            h.status.success() && text(&h.stdout).contains("usage: pfm"),
            "help"
        );
        let u = pfm.run(&["stats"])?;
        ensure!(
            u.status.code() == Some(2) && text(&u.stderr).contains("did you mean 'stat'"),
            "usage error"
        );
        Ok(())
    });
    t.run("pfm stat -t of a missing thread: tool-like error", || {
        let out = pfm.run(&["stat", "-t", "4194305", "--duration", "0.1"])?;
        let err = text(&out.stderr);
        show("stderr", &err);
        ensure!(out.status.code() == Some(1), "exit {:?}", out.status);
        ensure!(err.contains("no such thread"), "message: {err}");
        Ok(())
    });
    t.run("no live context left by pfm", || {
        module::wait_contexts(0, Duration::from_secs(5))
    });
    t.run("rmmod perfmon", module::rmmod);
    t.run(
        "without the module: 'perfmon module not loaded (insmod perfmon.ko)'",
        || not_loaded(&pfm),
    );
    let _ = std::fs::remove_dir_all(&dir);
    t.finish();
}
