//! Loading and unloading perfmon.ko in the guest (busybox `insmod`/`rmmod`).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use perfmon::sysfs::{self, SysInfo};

/// Where the guest image puts the module; `PFM_MODULE` overrides it.
pub const DEFAULT_MODULE: &str = "/lib/perfmon.ko";

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

fn run(cmd: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {cmd}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
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
}

/// Waits up to `timeout` for `cond`.
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
        crate::tap::diag("perfmon was already loaded: unloading it first");
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

/// `rmmod perfmon`, retried for up to 3 s (contexts are released lazily);
/// then checks that /dev/perfmon and /sys/kernel/perfmon are gone.
pub fn rmmod() -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut tries = 0;
    loop {
        tries += 1;
        match run("rmmod", &["perfmon"]) {
            Ok(()) => break,
            Err(e) if Instant::now() >= deadline => {
                let s = SysInfo::read();
                return Err(format!(
                    "{e} (after {tries} tries; live_contexts={:?} zombie_contexts={:?})",
                    s.live_contexts, s.zombie_contexts
                ));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    if tries > 1 {
        crate::tap::diag(format!("rmmod succeeded after {tries} tries"));
    }
    if is_loaded() {
        return Err("rmmod succeeded but perfmon is still in /proc/modules".into());
    }
    if !wait_for(Duration::from_secs(2), || {
        !Path::new(perfmon::DEVICE).exists()
    }) {
        return Err(format!("{} still exists after rmmod", perfmon::DEVICE));
    }
    if Path::new(sysfs::SYSFS_DIR).exists() {
        return Err(format!("{} still exists after rmmod", sysfs::SYSFS_DIR));
    }
    Ok(())
}

/// The number of live contexts per sysfs.
pub fn live_contexts() -> Option<u64> {
    SysInfo::read().live_contexts
}

/// Waits up to `timeout` until sysfs shows `live` live contexts and no
/// zombie; returns the last values seen on failure.
pub fn wait_contexts(live: u64, timeout: Duration) -> Result<(), String> {
    let mut last = SysInfo::default();
    let ok = wait_for(timeout, || {
        last = SysInfo::read();
        last.live_contexts == Some(live) && last.zombie_contexts.unwrap_or(0) == 0
    });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "expected live_contexts={live} zombie_contexts=0 within {} ms, have live={:?} zombie={:?}",
            timeout.as_millis(),
            last.live_contexts,
            last.zombie_contexts
        ))
    }
}
