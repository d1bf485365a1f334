//! Fault injection through `/proc/thread-self/fail-nth`
//! (Documentation/fault-injection/fault-injection.rst): writing N to it
//! makes the N-th fault-injection site the thread reaches fail (a slab or
//! page allocation, or a user copy); reading 0 back means the fault was
//! injected, a positive number that it was not reached.
//!
//! The per-type debugfs knobs still filter what counts as a site: by
//! default failslab and fail_page_alloc ignore every allocation that may
//! sleep (`ignore-gfp-wait`), i.e. every GFP_KERNEL one, and each injected
//! fault prints a stack trace (`verbose`). [`Knobs::set_for_sweep`] turns
//! both off and [`Knobs::restore`] puts the old values back.

use std::collections::BTreeMap;

use crate::sys;

/// The debugfs knobs a sweep needs, with the values found at start.
pub struct Knobs {
    saved: Vec<(String, String)>,
}

/// (file, value for the sweep). `min-order` of fail_page_alloc stays at
/// its default (1): order-0 pages (page faults, page tables) would
/// otherwise fail in the test's own user-space code between arming and
/// the system call. `rcu_expedited` is not fault injection: it makes the
/// many RCU grace periods of a failed module load (the loader's cleanup,
/// lockdep's key freeing) take microseconds instead of jiffies.
const SWEEP_KNOBS: &[(&str, &str)] = &[
    ("/sys/kernel/debug/failslab/ignore-gfp-wait", "N"),
    ("/sys/kernel/debug/failslab/verbose", "0"),
    ("/sys/kernel/debug/fail_page_alloc/ignore-gfp-wait", "N"),
    ("/sys/kernel/debug/fail_page_alloc/ignore-gfp-highmem", "N"),
    ("/sys/kernel/debug/fail_page_alloc/verbose", "0"),
    ("/sys/kernel/debug/fail_usercopy/verbose", "0"),
    ("/sys/kernel/rcu_expedited", "1"),
];

/// The slab caches' sysfs directories (their `failslab` flags).
const SLAB: &str = "/sys/kernel/slab";

impl Knobs {
    /// Sets the knobs of [`SWEEP_KNOBS`]; an absent knob (a kernel without
    /// that fault type) is skipped, a knob that cannot be written fails.
    /// `keep_verbose`: leave `verbose` as it is (2 by default: a stack
    /// trace of every injected fault in the kernel log, to see where each
    /// one is; slow on a serial console).
    pub fn set_for_sweep(keep_verbose: bool) -> Result<Knobs, String> {
        let mut saved = Vec::new();
        for (path, value) in SWEEP_KNOBS {
            if keep_verbose && path.ends_with("/verbose") {
                continue;
            }
            let path = path.to_string();
            let Ok(old) = std::fs::read_to_string(&path) else {
                continue;
            };
            write_str(&path, value)?;
            saved.push((path, old.trim().to_string()));
        }
        // failslab on every slab cache but kmemleak's own: kmemleak
        // tolerates a failed allocation of its metadata, but 6.12 then
        // logs it with a kmemleak object's lock held (add_scan_area's
        // pr_warn_once), which gives lockdep an object lock -> console ->
        // runqueue lock chain that it later reports as a circular locking
        // dependency against CPU hotplug (runqueue lock -> kfree_rcu's
        // lock -> kmemleak object lock), in whichever test offlines a CPU
        // next.
        if let Ok(dir) = std::fs::read_dir(SLAB) {
            let mut caches: Vec<String> = dir
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|c| !c.starts_with("kmemleak"))
                .collect();
            caches.sort();
            for c in caches {
                let path = format!("{SLAB}/{c}/failslab");
                let Ok(old) = std::fs::read_to_string(&path) else {
                    continue;
                };
                // A merged cache refuses (EINVAL): it stays out of the sweep.
                if write_str(&path, "1").is_ok() {
                    saved.push((path, old.trim().to_string()));
                }
            }
            let path = "/sys/kernel/debug/failslab/cache-filter".to_string();
            if let Ok(old) = std::fs::read_to_string(&path) {
                write_str(&path, "Y")?;
                saved.push((path, old.trim().to_string()));
            }
        }
        if keep_verbose {
            // Every injected fault's trace, not 10 per 5 s.
            for t in ["failslab", "fail_page_alloc", "fail_usercopy"] {
                let path = format!("/sys/kernel/debug/{t}/verbose_ratelimit_interval_ms");
                if let Ok(old) = std::fs::read_to_string(&path) {
                    write_str(&path, "0")?;
                    saved.push((path, old.trim().to_string()));
                }
            }
        }
        if !saved.iter().any(|(p, _)| p.contains("failslab")) {
            Knobs { saved }.restore();
            return Err(
                "no /sys/kernel/debug/failslab (FAILSLAB or FAULT_INJECTION_DEBUG_FS off?)".into(),
            );
        }
        Ok(Knobs { saved })
    }

    /// The knobs and the values found at start (the slab caches' flags
    /// as a count).
    pub fn describe(&self) -> String {
        let caches = self
            .saved
            .iter()
            .filter(|(p, _)| p.starts_with(SLAB))
            .count();
        let mut knobs: Vec<String> = self
            .saved
            .iter()
            .filter(|(p, _)| !p.starts_with(SLAB))
            .map(|(p, v)| {
                format!(
                    "{} (was {v})",
                    p.trim_start_matches("/sys/kernel/debug/")
                        .trim_start_matches("/sys/kernel/")
                )
            })
            .collect();
        knobs.push(format!(
            "failslab set on {caches} slab caches (all but kmemleak's)"
        ));
        knobs.join(", ")
    }

    /// Puts the values found at start back (in reverse order: the cache
    /// filter goes off before the caches' flags).
    pub fn restore(&self) {
        for (path, old) in self.saved.iter().rev() {
            let _ = write_str(path, old);
        }
    }
}

fn write_str(path: &str, value: &str) -> Result<(), String> {
    let c = std::ffi::CString::new(path).map_err(|e| e.to_string())?;
    sys::write_file(&c, value)
        .map(|_| ())
        .map_err(|e| format!("write {value} to {path}: {}", perfmon::errno_name(e)))
}

/// The calling thread's `fail-nth` file.
pub struct FailNth {
    fd: i32,
    tid: u32,
}

impl FailNth {
    /// Opens `/proc/thread-self/fail-nth` of the calling thread.
    pub fn open() -> Result<FailNth, String> {
        let fd = sys::open(
            c"/proc/thread-self/fail-nth",
            libc::O_RDWR | libc::O_CLOEXEC,
        )
        .map_err(|e| {
            format!(
                "open /proc/thread-self/fail-nth: {} (FAULT_INJECTION off?)",
                perfmon::errno_name(e)
            )
        })?;
        Ok(FailNth {
            fd,
            tid: sys::gettid(),
        })
    }

    fn arm(&self, n: u32) -> Result<(), String> {
        sys::write_once(self.fd, n.to_string().as_bytes())
            .map(|_| ())
            .map_err(|e| format!("write {n} to fail-nth: {}", perfmon::errno_name(e)))
    }

    /// Reads the counter back: `Some(0)` once the fault was injected.
    /// The read's own user copy is a site: if the counter was at 1 it
    /// fails that copy (EFAULT) and the fault was not injected earlier.
    fn remaining(&self) -> Option<u32> {
        let mut buf = [0u8; 24];
        let n = sys::pread_buf(self.fd, &mut buf, 0).ok()?;
        std::str::from_utf8(&buf[..n]).ok()?.trim().parse().ok()
    }

    /// Runs `op` (one system call, ideally) with the `n`-th site of this
    /// thread failing; returns its result and whether the fault was
    /// injected while it ran. Disarms afterwards.
    pub fn run<T>(&self, n: u32, op: impl FnOnce() -> T) -> Result<(T, bool), String> {
        if sys::gettid() != self.tid {
            return Err("fail-nth used from another thread than its own".into());
        }
        self.arm(n)?;
        let r = op();
        let injected = self.remaining() == Some(0);
        // Disarm (the write's own user copy may consume what is left).
        let _ = sys::write_once(self.fd, b"0");
        Ok((r, injected))
    }
}

impl Drop for FailNth {
    fn drop(&mut self) {
        let _ = sys::write_once(self.fd, b"0");
        let _ = sys::close(self.fd);
    }
}

/// What one sweep found.
#[derive(Debug, Default)]
pub struct Sweep {
    /// Sites reached before the call succeeded with no fault injected.
    pub points: u32,
    /// Injected faults that failed the call, by errno.
    pub failed: BTreeMap<i32, u32>,
    /// Injected faults the call survived (a fallback: kmemleak's and
    /// debugobjects' own pools, a retry).
    pub tolerated: u32,
}

impl std::fmt::Display for Sweep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let failed: u32 = self.failed.values().sum();
        write!(
            f,
            "{} fault-injection points: {failed} failed the call (",
            self.points
        )?;
        let mut first = true;
        for (e, n) in &self.failed {
            if !first {
                write!(f, ", ")?;
            }
            first = false;
            write!(f, "{} x{n}", perfmon::errno_name(*e))?;
        }
        write!(f, "), {} tolerated", self.tolerated)
    }
}

/// Sweeps `op` with the n-th site failing for n = 1, 2, ... until it
/// succeeds with no fault injected (at most `limit` rounds). A failure
/// must be injected and have an errno of `clean`; `after_fail(n, errno)`
/// and `after_ok(n, injected)` check the state after each round and reset
/// it for the next (a success despite an injected fault is not the last
/// round).
pub fn sweep(
    fnth: &FailNth,
    limit: u32,
    clean: &[i32],
    mut op: impl FnMut() -> Result<(), i32>,
    mut after_fail: impl FnMut(u32, i32) -> Result<(), String>,
    mut after_ok: impl FnMut(u32, bool) -> Result<(), String>,
) -> Result<Sweep, String> {
    let mut s = Sweep::default();
    for n in 1..=limit {
        let (r, injected) = fnth.run(n, &mut op)?;
        match r {
            Ok(()) => {
                after_ok(n, injected)?;
                if !injected {
                    s.points = n - 1;
                    return Ok(s);
                }
                s.tolerated += 1;
            }
            Err(e) => {
                if !injected {
                    return Err(format!(
                        "n={n}: failed with {} but no fault was injected",
                        perfmon::errno_name(e)
                    ));
                }
                if !clean.contains(&e) {
                    return Err(format!(
                        "n={n}: the injected fault gave {} (expected one of {})",
                        perfmon::errno_name(e),
                        clean
                            .iter()
                            .map(|&c| perfmon::errno_name(c))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
                *s.failed.entry(e).or_default() += 1;
                after_fail(n, e)?;
            }
        }
    }
    Err(format!("still failing after {limit} rounds ({s})"))
}

/// New kernel log records since [`Kmsg::open`], through `/dev/kmsg`.
pub struct Kmsg {
    fd: i32,
}

/// Kernel log lines that mean a bug (the harness's list, scripts/check-log.sh).
pub const SPLAT: &[&str] = &[
    "BUG:",
    "WARNING:",
    "Oops",
    "general protection fault",
    "KASAN",
    "UBSAN",
    "possible circular locking",
    "possible recursive locking",
    "inconsistent lock state",
    "suspicious RCU usage",
    "rust_kernel: panicked",
    "Kernel panic",
    "kernel BUG",
    "list_del corruption",
    "list_add corruption",
    "ODEBUG",
];

impl Kmsg {
    /// Opens /dev/kmsg positioned at its end.
    pub fn open() -> Result<Kmsg, String> {
        let fd = sys::open(
            c"/dev/kmsg",
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
        .map_err(|e| format!("open /dev/kmsg: {}", perfmon::errno_name(e)))?;
        let _ = sys::lseek(fd, 0, libc::SEEK_END);
        Ok(Kmsg { fd })
    }

    /// The records logged since the last call (EPIPE, records lost to the
    /// ring buffer, is skipped over).
    pub fn new_lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 8192];
        loop {
            match sys::read_buf(self.fd, &mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    let rec = String::from_utf8_lossy(&buf[..n]);
                    // "prio,seq,usec,flags;text\n" plus continuation lines.
                    let text = rec.split_once(';').map_or(&*rec, |(_, t)| t);
                    out.push(text.trim_end().to_string());
                }
                Err(e) if e == libc::EPIPE => continue,
                Err(_) => break,
            }
        }
        out
    }

    /// The splat lines among the records since the last call.
    pub fn splats(&self) -> Vec<String> {
        self.new_lines()
            .into_iter()
            .filter(|l| SPLAT.iter().any(|s| l.contains(s)))
            .collect()
    }
}

impl Drop for Kmsg {
    fn drop(&mut self) {
        let _ = sys::close(self.fd);
    }
}
