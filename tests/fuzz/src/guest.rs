//! The guest side of the tests: perfmon.ko in and out, and its counters in
//! /sys/kernel/perfmon.

use std::process::Command;
use std::time::{Duration, Instant};

/// Where the guest image puts the module; `PFM_MODULE` overrides it.
pub fn module_path() -> String {
    std::env::var("PFM_MODULE").unwrap_or_else(|_| "/lib/perfmon.ko".to_string())
}

/// Whether perfmon is in /proc/modules.
pub fn is_loaded() -> bool {
    std::fs::read_to_string("/proc/modules")
        .map(|m| m.lines().any(|l| l.starts_with("perfmon ")))
        .unwrap_or(false)
}

fn run(cmd: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {cmd}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Err(format!(
        "{cmd} {} failed ({}): {}",
        args.join(" "),
        out.status,
        text.trim()
    ))
}

/// Waits up to `timeout` for `cond`, polling every 10 ms.
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

/// `insmod perfmon.ko PARAMS` (unloading a copy left loaded first), then
/// waits for /dev/perfmon.
pub fn insmod(params: &[&str]) -> Result<(), String> {
    if is_loaded() {
        rmmod_once()?;
    }
    let path = module_path();
    let mut args = vec![path.as_str()];
    args.extend_from_slice(params);
    run("insmod", &args)?;
    if !wait_for(Duration::from_secs(2), || {
        std::path::Path::new("/dev/perfmon").exists()
    }) {
        return Err("insmod succeeded but /dev/perfmon did not appear".into());
    }
    Ok(())
}

/// One `rmmod perfmon`, no retry.
pub fn rmmod_once() -> Result<(), String> {
    run("rmmod", &["perfmon"])
}

/// `rmmod perfmon`, retried for up to `patience`; checks that the device
/// and sysfs directory are gone.
pub fn rmmod(patience: Duration) -> Result<(), String> {
    let deadline = Instant::now() + patience;
    loop {
        match rmmod_once() {
            Ok(()) => break,
            Err(e) if Instant::now() >= deadline => {
                return Err(format!("{e} ({})", Counters::read()))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    if is_loaded() {
        return Err("rmmod succeeded but perfmon is still in /proc/modules".into());
    }
    if !wait_for(Duration::from_secs(2), || {
        !std::path::Path::new("/dev/perfmon").exists()
    }) {
        return Err("/dev/perfmon still exists after rmmod".into());
    }
    if std::path::Path::new("/sys/kernel/perfmon").exists() {
        return Err("/sys/kernel/perfmon still exists after rmmod".into());
    }
    Ok(())
}

/// Reads `/sys/kernel/perfmon/NAME` as a number.
pub fn sysfs_num(name: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/sys/kernel/perfmon/{name}"))
        .ok()?
        .trim()
        .parse()
        .ok()
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
}

impl Counters {
    /// Reads them from sysfs.
    pub fn read() -> Counters {
        Counters {
            live: sysfs_num("live_contexts"),
            zombies: sysfs_num("zombie_contexts"),
            attached: sysfs_num("attached_threads"),
            interrupts: sysfs_num("overflow_interrupts"),
        }
    }

    /// No context, no zombie, no attachment.
    pub fn idle(&self) -> bool {
        self.live == Some(0) && self.zombies == Some(0) && self.attached == Some(0)
    }
}

impl std::fmt::Display for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = |v: Option<u64>| v.map_or("?".to_string(), |v| v.to_string());
        write!(
            f,
            "live_contexts={} zombie_contexts={} attached_threads={} overflow_interrupts={}",
            s(self.live),
            s(self.zombies),
            s(self.attached),
            s(self.interrupts)
        )
    }
}

/// Waits up to `timeout` until no context, zombie or attachment is left.
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
