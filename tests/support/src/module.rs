//! perfmon.ko in the guest: loading and unloading it with busybox
//! `insmod`/`rmmod`, waiting for conditions, and the module's counters in
//! /sys/kernel/perfmon.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Where the guest image puts the module; `PFM_MODULE` overrides it.
pub const DEFAULT_MODULE: &str = "/lib/perfmon.ko";

/// The module's sysfs directory.
const SYSFS: &str = "/sys/kernel/perfmon";

/// The module file to load.
pub fn module_path() -> String {
    std::env::var("PFM_MODULE").unwrap_or_else(|_| DEFAULT_MODULE.to_string())
}

/// Whether perfmon is loaded (listed in /proc/modules).
pub fn is_loaded() -> bool {
    std::fs::read_to_string("/proc/modules")
        .map(|m| m.lines().any(|l| l.starts_with("perfmon ")))
        .unwrap_or(false)
}

/// Runs `cmd args`; its output in the error if it fails.
fn run(cmd: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {cmd}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let mut msg = format!("{cmd} {} failed ({})", args.join(" "), out.status);
    for s in [&out.stdout, &out.stderr] {
        let t = String::from_utf8_lossy(s);
        if !t.trim().is_empty() {
            msg.push_str(": ");
            msg.push_str(t.trim());
        }
    }
    Err(msg)
}

/// Waits up to `timeout` for `cond`, looking every 10 ms; whether it held.
pub fn wait_for(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `insmod perfmon.ko PARAMS`, after unloading a copy a previous program
/// left behind; then waits (2 s) for /dev/perfmon to appear.
pub fn insmod(params: &[&str]) -> Result<(), String> {
    let path = module_path();
    if !Path::new(&path).exists() {
        return Err(format!("no module at {path} (set PFM_MODULE to its path)"));
    }
    if is_loaded() {
        crate::diag("perfmon was already loaded: unloading it first");
        rmmod()?;
    }
    let mut args = vec![path.as_str()];
    args.extend_from_slice(params);
    run("insmod", &args)?;
    if !wait_for(Duration::from_secs(2), || {
        Path::new(perfmon::DEVICE).exists()
    }) {
        return Err(format!(
            "insmod succeeded but {} did not appear",
            perfmon::DEVICE
        ));
    }
    Ok(())
}

/// One `rmmod perfmon`, no retry.
pub fn rmmod_once() -> Result<(), String> {
    run("rmmod", &["perfmon"])
}

/// `rmmod perfmon`, retried for up to 3 s (contexts are released lazily);
/// see [`rmmod_within`].
pub fn rmmod() -> Result<(), String> {
    rmmod_within(Duration::from_secs(3))
}

/// `rmmod perfmon`, retried for up to `patience`; then checks that
/// /dev/perfmon and /sys/kernel/perfmon are gone.
pub fn rmmod_within(patience: Duration) -> Result<(), String> {
    let deadline = Instant::now() + patience;
    let mut tries = 0;
    loop {
        tries += 1;
        match rmmod_once() {
            Ok(()) => break,
            Err(e) if Instant::now() >= deadline => {
                return Err(format!("{e} (after {tries} tries; {})", Counters::read()))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    if tries > 1 {
        crate::diag(format!("rmmod succeeded after {tries} tries"));
    }
    if is_loaded() {
        return Err("rmmod succeeded but perfmon is still in /proc/modules".into());
    }
    if !wait_for(Duration::from_secs(2), || {
        !Path::new(perfmon::DEVICE).exists()
    }) {
        return Err(format!("{} still exists after rmmod", perfmon::DEVICE));
    }
    if Path::new(SYSFS).exists() {
        return Err(format!("{SYSFS} still exists after rmmod"));
    }
    Ok(())
}

/// Reads `/sys/kernel/perfmon/NAME` as a number.
pub fn sysfs_num(name: &str) -> Option<u64> {
    std::fs::read_to_string(format!("{SYSFS}/{name}"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The number of live contexts per sysfs.
pub fn live_contexts() -> Option<u64> {
    sysfs_num("live_contexts")
}

/// The module's lifetime counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Contexts alive (open fds and zombies).
    pub live: Option<u64>,
    /// Zombies.
    pub zombies: Option<u64>,
    /// Attached threads.
    pub attached: Option<u64>,
    /// Overflow interrupts taken.
    pub interrupts: Option<u64>,
    /// Contexts whose threads' new threads join them (the fork probe's
    /// count; absent before whole programs).
    pub inheriting: Option<u64>,
    /// Contexts waiting for an exec (the exec probe's count).
    pub exec_armed: Option<u64>,
}

impl Counters {
    /// Reads them from sysfs.
    pub fn read() -> Counters {
        Counters {
            live: sysfs_num("live_contexts"),
            zombies: sysfs_num("zombie_contexts"),
            attached: sysfs_num("attached_threads"),
            interrupts: sysfs_num("overflow_interrupts"),
            inheriting: sysfs_num("inheriting_contexts"),
            exec_armed: sysfs_num("exec_armed_contexts"),
        }
    }

    /// No context, no zombie, no attachment (and so nothing the fork and
    /// exec probes look for).
    pub fn idle(&self) -> bool {
        self.live == Some(0)
            && self.zombies == Some(0)
            && self.attached == Some(0)
            && self.inheriting.unwrap_or(0) == 0
            && self.exec_armed.unwrap_or(0) == 0
    }
}

impl std::fmt::Display for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = |v: Option<u64>| v.map_or("?".to_string(), |v| v.to_string());
        write!(
            f,
            "live_contexts={} zombie_contexts={} attached_threads={} overflow_interrupts={} inheriting_contexts={} exec_armed_contexts={}",
            s(self.live),
            s(self.zombies),
            s(self.attached),
            s(self.interrupts),
            s(self.inheriting),
            s(self.exec_armed)
        )
    }
}

/// Waits up to `timeout` until no context, zombie or attachment is left;
/// how long it took.
pub fn wait_idle(timeout: Duration) -> Result<Duration, String> {
    let t = Instant::now();
    let mut last = Counters::default();
    if wait_for(timeout, || {
        last = Counters::read();
        last.idle()
    }) {
        Ok(t.elapsed())
    } else {
        Err(format!("not idle after {} ms: {last}", timeout.as_millis()))
    }
}

/// Waits up to `timeout` until sysfs shows `live` live contexts and no
/// zombie; the last values seen on failure.
pub fn wait_contexts(live: u64, timeout: Duration) -> Result<(), String> {
    let mut last = Counters::default();
    let ok = wait_for(timeout, || {
        last = Counters::read();
        last.live == Some(live) && last.zombies.unwrap_or(0) == 0
    });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "expected live_contexts={live} zombie_contexts=0 within {} ms, have live={:?} zombie={:?}",
            timeout.as_millis(),
            last.live,
            last.zombies
        ))
    }
}
