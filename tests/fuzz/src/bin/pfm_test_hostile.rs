//! pfm_test_hostile: what an unprivileged user can and cannot do with
//! /dev/perfmon (issue 8). Runs as root; every hostile action runs in a
//! forked child that dropped to uid/gid 1000 (pfmuser) or 65534 (nobody).
//!
//! - Attaching to another user's thread: EACCES (root's, nobody's).
//! - Attaching to a setuid program started by the same user (a copy of
//!   busybox, root-owned, mode 4755, running `sleep`): EACCES, because the
//!   process is not dumpable (busybox drops to the caller's ids) or keeps
//!   euid 0.
//! - Attaching to a kernel thread (kthreadd, pid 2): EPERM, as root too.
//! - Attaching to pid 1 as non-root: EACCES.
//! - Opening contexts in a loop: bounded by RLIMIT_NOFILE (EMFILE), every
//!   one counted in live_contexts and freed on close. What bounds memory:
//!   an unattached context exists only while an fd refers to it, so a user
//!   holds at most RLIMIT_NPROC x RLIMIT_NOFILE of them; attachments (and so
//!   zombies, which are attachments whose fd is gone) are bounded by the
//!   global limit of 4096 attached threads (ENOSPC beyond).
//! - The global limit of 4096 attachments (see [`attach_limit`]): reached
//!   by an unprivileged user with one stopped process of 1024 threads
//!   (each holds 4 zombies awaiting its lazy cleanup); ENOSPC for everyone,
//!   root included, whose target has nothing to reclaim. A LOAD on a thread
//!   that holds them reclaims them in place (it is stopped) and attaches.
//! - A monitored thread execs a setuid program: a same-user tool loses it
//!   (PFM_MSG_REVOKED, context UNLOADED); a root tool keeps monitoring.
//! - The tool closes the fd after REVOKED while the setuid program still
//!   sleeps in the kernel, then the program wakes and exits normally.
//!
//! Ends with the module's counters back to 0 and rmmod.

use std::time::{Duration, Instant};

use pfm_fuzz::guest::wait_for;
use pfm_fuzz::guest::{self, Counters};
use pfm_fuzz::pfm::{msg_name, outcome, state_name, Ctx};
use pfm_fuzz::proc::{comm, uid_line, Pipe, Proc};
use pfm_fuzz::sys::{self, abi};
use pfm_fuzz::tap::{diag, Tap, TestResult};

const USER: u32 = 1000;
const NOBODY: u32 = 65534;
const SUID_BIN: &str = "/tmp/pfm-hostile-suid";

/// Runs `f` as `uid` in a child; returns the line it reports.
fn as_user(uid: u32, f: impl FnOnce() -> String) -> String {
    let pipe = Pipe::new();
    let mut p = Proc::spawn(|| {
        if let Err(e) = sys::become_user(uid, uid) {
            pipe.send(&format!("setuid failed: {}", perfmon::errno_name(e)));
            return 1;
        }
        let line = f();
        pipe.send(&line);
        0
    });
    let line = pipe
        .recv(Duration::from_secs(60))
        .unwrap_or_else(|| "no answer from the child".into());
    p.wait(Duration::from_secs(10));
    line
}

/// A child that sleeps as `uid` (dumpable unless `undumpable`); tells when ready.
fn sleeper(uid: u32) -> Proc {
    let pipe = Pipe::new();
    let p = Proc::spawn(|| {
        if uid != 0 {
            if sys::become_user(uid, uid).is_err() {
                return 1;
            }
            sys::set_dumpable();
        }
        pipe.send("ready");
        loop {
            sys::usleep(20_000);
        }
    });
    pipe.recv(Duration::from_secs(10));
    p
}

/// An attach from `uid` to `tid`; the errno name or "ok".
fn attach_as(uid: u32, tid: u32) -> String {
    as_user(uid, || match Ctx::open() {
        Err(e) => format!("open {}", perfmon::errno_name(e)),
        Ok(c) => {
            let r = c.load(tid);
            if r.is_ok() {
                let _ = c.unload();
            }
            outcome(&r).to_string()
        }
    })
}

fn expect_line(got: &str, want: &str, what: &str) -> TestResult {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: got {got}, expected {want}"))
    }
}

fn make_suid_binary() -> Result<(), String> {
    std::fs::copy("/bin/busybox", SUID_BIN).map_err(|e| format!("copy /bin/busybox: {e}"))?;
    let c = std::ffi::CString::new(SUID_BIN).unwrap();
    // SAFETY: a NUL-terminated path.
    let r = unsafe { libc::chown(c.as_ptr(), 0, 0) | libc::chmod(c.as_ptr(), 0o4755) };
    if r != 0 {
        return Err(format!("chown/chmod {SUID_BIN}: errno {}", sys::errno()));
    }
    Ok(())
}

/// Starts `SUID_BIN sleep SECS` as uid 1000 (made dumpable before the
/// exec, as a login shell's process is) after a "go" line on `go`, or at
/// once if `go` is None. Returns the child.
fn suid_sleeper(secs: &'static str, go: Option<&Pipe>) -> Proc {
    let ready = Pipe::new();
    let p = Proc::spawn(|| {
        if sys::become_user(USER, USER).is_err() {
            return 1;
        }
        sys::set_dumpable();
        ready.send("ready");
        if let Some(g) = go {
            g.recv_blocking();
        }
        let path = std::ffi::CString::new(SUID_BIN).unwrap();
        let arg1 = std::ffi::CString::new(secs).unwrap();
        sys::execv(&path, &[c"sleep", &arg1])
    });
    ready.recv(Duration::from_secs(10));
    p
}

fn other_users(tap: &mut Tap) {
    let root = sleeper(0);
    let nobody = sleeper(NOBODY);
    let own = sleeper(USER);
    tap.result(
        "uid 1000 attaching to root's thread: EACCES",
        expect_line(&attach_as(USER, root.pid()), "EACCES", "load"),
    );
    tap.result(
        "uid 1000 attaching to nobody's (65534) thread: EACCES",
        expect_line(&attach_as(USER, nobody.pid()), "EACCES", "load"),
    );
    tap.result(
        "uid 65534 attaching to uid 1000's thread: EACCES",
        expect_line(&attach_as(NOBODY, own.pid()), "EACCES", "load"),
    );
    tap.result(
        "uid 1000 attaching to its own other process: allowed (the refusals are not blanket)",
        expect_line(&attach_as(USER, own.pid()), "ok", "load"),
    );
}

fn setuid_program(tap: &mut Tap) {
    let mut p = suid_sleeper("5", None);
    let pid = p.pid();
    // Wait until the exec happened (the comm changes from the test's name).
    let started = wait_for(Duration::from_secs(5), || {
        comm(pid) != comm(sys::getpid()) && !comm(pid).is_empty()
    });
    diag(format!(
        "setuid program pid {pid} comm {:?} Uid: {}",
        comm(pid),
        uid_line(pid)
    ));
    let r = if started {
        expect_line(&attach_as(USER, pid), "EACCES", "load")
    } else {
        Err("the setuid program did not start".into())
    };
    tap.result(
        "uid 1000 attaching to a setuid program it started: EACCES (not dumpable)",
        r,
    );
    p.kill();
}

fn kernel_thread_and_init(tap: &mut Tap) {
    tap.result(
        "uid 1000 attaching to kthreadd (pid 2): EPERM",
        expect_line(&attach_as(USER, 2), "EPERM", "load"),
    );
    let root = Ctx::open()
        .map_err(|e| perfmon::errno_name(e).to_string())
        .map(|c| outcome(&c.load(2)).to_string());
    tap.result(
        "root attaching to kthreadd (pid 2): EPERM",
        expect_line(
            &root.unwrap_or_else(|e| format!("open {e}")),
            "EPERM",
            "load",
        ),
    );
    tap.result(
        "uid 1000 attaching to init (pid 1): EACCES",
        expect_line(&attach_as(USER, 1), "EACCES", "load"),
    );
}

fn context_flood(tap: &mut Tap) {
    let before = Counters::read().live.unwrap_or(0);
    let line = as_user(USER, || {
        let (soft, hard) = sys::nofile_limit();
        let mut fds = Vec::new();
        let mut last = 0;
        let peak;
        loop {
            match Ctx::open() {
                Ok(c) => fds.push(c.into_raw()),
                Err(e) => {
                    last = e;
                    // Reading sysfs needs a descriptor: give one back first.
                    if let Some(fd) = fds.pop() {
                        let _ = sys::close(fd);
                    }
                    peak = guest::sysfs_num("live_contexts").unwrap_or(0) + 1;
                    break;
                }
            }
            if fds.len() > 100_000 {
                peak = 0;
                break;
            }
        }
        let n = fds.len() + 1;
        // Raising the soft limit to the hard one is allowed; beyond is not.
        let raise = sys::set_nofile_limit(hard, hard).is_ok();
        let beyond = sys::set_nofile_limit(hard + 1, hard + 1);
        for fd in fds {
            let _ = sys::close(fd);
        }
        format!(
            "{n} {} {soft} {hard} {peak} {raise} {}",
            perfmon::errno_name(last),
            outcome(&beyond)
        )
    });
    let f: Vec<&str> = line.split_whitespace().collect();
    let r = (|| -> TestResult {
        if f.len() != 7 {
            return Err(format!("child said: {line}"));
        }
        let n: u64 = f[0].parse().unwrap_or(0);
        let soft: u64 = f[2].parse().unwrap_or(0);
        let peak: u64 = f[4].parse().unwrap_or(0);
        diag(format!(
            "uid 1000 opened {n} contexts before {} (RLIMIT_NOFILE soft {soft} hard {}); live_contexts {before} -> {peak}; raising the soft limit to the hard one: {}, beyond it: {}",
            f[1], f[3], f[5], f[6]
        ));
        pfm_fuzz::ensure!(
            f[1] == "EMFILE",
            "the loop ended with {} instead of EMFILE",
            f[1]
        );
        pfm_fuzz::ensure!(
            n + 8 >= soft && n <= soft,
            "{n} contexts for a limit of {soft}"
        );
        pfm_fuzz::ensure!(
            peak >= before + n,
            "live_contexts {peak} at the peak, expected at least {}",
            before + n
        );
        pfm_fuzz::ensure!(
            f[6] == "EPERM",
            "an unprivileged user raised RLIMIT_NOFILE beyond its hard limit"
        );
        Ok(())
    })();
    tap.result(
        "uid 1000 opening contexts until RLIMIT_NOFILE: EMFILE, all counted",
        r,
    );
    tap.result(
        "the flood's contexts are freed on close",
        guest::wait_idle(Duration::from_secs(10)).map(|_| ()),
    );
}

/// The global limit of 4096 attachments, reached cheaply: a stopped thread
/// runs no task_work, so a context LOADed on it and closed (a zombie, whose
/// cleanup is lazy: the thread's next return to user mode) leaves its
/// attachment in the registry until the thread runs again. The module
/// bounds that at 4 per thread, so an unprivileged user with one stopped
/// process of 1024 threads of its own, 4 zombies on each, fills the
/// registry; then nobody can attach (ENOSPC) to a thread that holds nothing
/// to reclaim, root included, until the process is continued. A LOAD of a
/// thread that holds zombies removes them in place (a stopped thread is
/// held off every CPU as a sleeping one is) and attaches: neither the
/// thread's bound nor the full registry refuses it.
/// The registry's slots (the module's `MAX_ATTACHED`).
const LIMIT: u64 = 4096;
/// Threads of the stopped process that fills them.
const THREADS: usize = 1100;

fn attach_limit(tap: &mut Tap) {
    // One user may hold max_attached_per_user (1024 by default) of the
    // slots: this case is about the global limit, so lift the per-user one
    // (pfm_test_trust checks it).
    let per_user = std::fs::read_to_string(PER_USER_PARAM).unwrap_or_else(|_| "1024".into());
    let _ = std::fs::write(PER_USER_PARAM, LIMIT.to_string());
    attach_limit_run(tap);
    let _ = std::fs::write(PER_USER_PARAM, per_user.trim());
}

/// The per-user limit's module parameter.
const PER_USER_PARAM: &str = "/sys/module/perfmon/parameters/max_attached_per_user";

fn attach_limit_run(tap: &mut Tap) {
    let t0 = Instant::now();
    let report = Pipe::new();
    let root_try = Pipe::new();
    let root_done = Pipe::new();
    let mut tool = Proc::spawn(|| {
        if sys::become_user(USER, USER).is_err() {
            report.send("setuid failed");
            return 1;
        }
        // Dumpable, as a user's processes normally are (the uid change
        // cleared it), so that its own child can be monitored.
        sys::set_dumpable();
        let ready = Pipe::new();
        let hold = Pipe::new();
        let target = Proc::spawn(|| {
            let r = hold.read_fd();
            let mut n = 0;
            for _ in 0..THREADS {
                let ok = std::thread::Builder::new()
                    .stack_size(64 * 1024)
                    .spawn(move || {
                        let mut b = [0u8; 1];
                        let _ = sys::read_buf(r, &mut b);
                    })
                    .is_ok();
                n += ok as usize;
            }
            ready.send(&n.to_string());
            loop {
                sys::usleep(100_000);
            }
        });
        let made = ready.recv(Duration::from_secs(300)).unwrap_or_default();
        target.signal(libc::SIGSTOP);
        wait_for(Duration::from_secs(5), || {
            sys::proc_state(target.pid()) == Some('T')
        });
        let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{}/task", target.pid()))
            .map(|d| {
                d.flatten()
                    .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        tids.retain(|&t| t != target.pid());
        let mut n = 0u64;
        let mut per_thread = std::collections::BTreeMap::new();
        let mut last = "no-limit";
        'threads: for &tid in &tids {
            let mut k = 0;
            while k < 4 {
                let c = match Ctx::open() {
                    Ok(c) => c,
                    Err(e) => {
                        last = perfmon::errno_name(e);
                        break 'threads;
                    }
                };
                match c.load(tid) {
                    Ok(()) => {
                        n += 1;
                        k += 1;
                    }
                    Err(e) => {
                        last = perfmon::errno_name(e);
                        break 'threads;
                    }
                }
                // Closed while LOADed: a zombie on the stopped thread.
                drop(c);
            }
            *per_thread.entry(k).or_insert(0) += 1;
        }
        let attached = guest::sysfs_num("attached_threads").unwrap_or(0);
        // While the registry is full: can root attach to someone else?
        root_try.send("try");
        root_done.recv(Duration::from_secs(60));
        // A fifth LOAD of the first thread, which holds 4 zombies: they are
        // reclaimed in place, and it attaches.
        let fifth = match Ctx::open() {
            Ok(c) => {
                let r = outcome(&c.load(tids.first().copied().unwrap_or(0))).to_string();
                let _ = c.unload();
                r
            }
            Err(e) => format!("open-{}", perfmon::errno_name(e)),
        };
        target.signal(libc::SIGCONT);
        let hist: Vec<String> = per_thread.iter().map(|(k, v)| format!("{v}x{k}")).collect();
        report.send(&format!(
            "{n} {attached} {last} {} {made} {fifth}",
            hist.join(",")
        ));
        // Let the threads run their cleanups before they are killed.
        wait_for(Duration::from_secs(30), || {
            guest::sysfs_num("attached_threads") == Some(0)
        });
        drop(hold);
        0
    });
    let mut root_saw = "no request".to_string();
    if root_try.recv(Duration::from_secs(400)).is_some() {
        let other = sleeper(0);
        root_saw = match Ctx::open() {
            Ok(c) => outcome(&c.load(other.pid())).to_string(),
            Err(e) => format!("open {}", perfmon::errno_name(e)),
        };
        root_done.send("done");
    }
    let line = report
        .recv(Duration::from_secs(120))
        .unwrap_or_else(|| "no answer".into());
    tool.wait(Duration::from_secs(60));
    let took = t0.elapsed();
    let f: Vec<&str> = line.split_whitespace().collect();
    let r = (|| -> TestResult {
        pfm_fuzz::ensure!(f.len() == 6, "tool said: {line}");
        diag(format!(
            "uid 1000, one stopped process of {} threads of its own, contexts LOADed and closed (zombies): {} attachments (attached_threads {}), zombies per thread: {}, then: {}; root's attach to another process meanwhile: {root_saw}; a fifth LOAD of a thread holding 4: {}; {:.1} s",
            f[4], f[0], f[1], f[3], f[2], f[5], took.as_secs_f64()
        ));
        pfm_fuzz::ensure!(
            f[2] == "ENOSPC",
            "the loop ended with {}, expected ENOSPC",
            f[2]
        );
        pfm_fuzz::ensure!(
            f[0] == LIMIT.to_string(),
            "{} attachments before ENOSPC, expected {LIMIT}",
            f[0]
        );
        pfm_fuzz::ensure!(
            root_saw == "ENOSPC",
            "root's attach while the registry was full: {root_saw}"
        );
        Ok(())
    })();
    tap.result(
        "the global limit: attachment 4097 gets ENOSPC, for root too",
        r,
    );
    tap.result(
        "a LOAD of a stopped thread holding 4 zombies reclaims them in place and attaches, registry full or not",
        if f.len() == 6 && f[5] == "ok" {
            Ok(())
        } else {
            Err(format!(
                "the fifth LOAD: {} (zombies per thread: {})",
                f.get(5).unwrap_or(&"?"),
                f.get(3).unwrap_or(&"?")
            ))
        },
    );
    tap.result(
        "once the stopped process runs again, nothing stays attached",
        guest::wait_idle(Duration::from_secs(30))
            .map(|t| diag(format!("drained in {} ms", t.as_millis()))),
    );
}

/// A same-user (or root, `root_tool`) tool monitors a uid 1000 process that
/// then execs the setuid program; returns what the tool saw.
fn setuid_exec(root_tool: bool, close_early: bool) -> Result<String, String> {
    let go = Pipe::new();
    let target = suid_sleeper(if close_early { "2" } else { "1" }, Some(&go));
    let tpid = target.pid();
    let out = Pipe::new();
    let tool_uid = if root_tool { 0 } else { USER };
    let mut tool = Proc::spawn(|| {
        if tool_uid != 0 && sys::become_user(tool_uid, tool_uid).is_err() {
            out.send("setuid failed");
            return 1;
        }
        let c = match Ctx::open() {
            Ok(c) => c,
            Err(e) => {
                out.send(&format!("open {}", perfmon::errno_name(e)));
                return 1;
            }
        };
        let r = c
            .program(0, abi::PFM_SOFT_EV_CONTEXT_SWITCHES, 0, false, 0)
            .and_then(|_| c.load(tpid))
            .and_then(|_| c.start());
        if let Err(e) = r {
            out.send(&format!("setup {}", perfmon::errno_name(e)));
            return 1;
        }
        // Let the target install the context, then exec.
        wait_for(Duration::from_secs(5), || {
            c.state()
                .map(|s| s.status & abi::PFM_CTXST_ACTIVE != 0)
                .unwrap_or(false)
        });
        go.send("go");
        let mut msgs = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(if root_tool { 2 } else { 10 });
        while Instant::now() < deadline {
            match c.next_msg(100) {
                Ok(Some(m)) => {
                    msgs.push(msg_name(m.msg_type));
                    if m.msg_type != abi::PFM_MSG_OVFL {
                        break;
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    msgs.push(perfmon::errno_name(e));
                    break;
                }
            }
        }
        let st = c.state().map(|s| state_name(s.state)).unwrap_or("?");
        let val = c
            .read_pmd(0)
            .map(|v| v.to_string())
            .unwrap_or_else(|e| perfmon::errno_name(e).to_string());
        if close_early {
            // Close while the program still sleeps in the kernel: its
            // cleanup runs when it returns to user mode.
            drop(c);
        }
        out.send(&format!("msgs=[{}] state={st} pmd0={val}", msgs.join(",")));
        0
    });
    let line = out
        .recv(Duration::from_secs(30))
        .ok_or("the tool did not answer")?;
    tool.wait(Duration::from_secs(10));
    let mut target = target;
    let st = target.wait(Duration::from_secs(15));
    let end = match st {
        Some(s) => sys::describe_status(s),
        None => format!(
            "still running (state {:?}, Uid {})",
            sys::proc_state(tpid),
            uid_line(tpid)
        ),
    };
    Ok(format!("{line} target={end}"))
}

fn exec_cases(tap: &mut Tap) {
    // Same-user tool: the exec gains privileges the tool lacks.
    let r = setuid_exec(false, false);
    let res = r.and_then(|s| {
        diag(format!("same-user tool: {s}"));
        if s.contains("msgs=[REVOKED]")
            && s.contains("state=UNLOADED")
            && s.contains("target=exit 0")
        {
            Ok(())
        } else {
            Err(format!("expected REVOKED, UNLOADED and a normal exit: {s}"))
        }
    });
    tap.result(
        "a setuid exec by the monitored thread ends monitoring by a same-user tool (REVOKED)",
        res,
    );
    // Root tool: allowed to monitor anything, monitoring continues.
    let r = setuid_exec(true, false);
    let res = r.and_then(|s| {
        diag(format!("root tool: {s}"));
        if s.contains("state=LOADED") || s.contains("msgs=[END]") {
            Ok(())
        } else {
            Err(format!("expected monitoring to go on: {s}"))
        }
    });
    tap.result("a setuid exec does not end monitoring by root", res);
    // The regression: close after REVOKED while the program sleeps.
    let before = Instant::now();
    let r = setuid_exec(false, true);
    let res = r.and_then(|s| {
        diag(format!(
            "close after REVOKED: {s} ({:.1} s)",
            before.elapsed().as_secs_f64()
        ));
        if s.contains("target=exit 0") {
            Ok(())
        } else {
            Err(format!("the setuid program did not finish normally: {s}"))
        }
    });
    tap.result(
        "closing the fd after REVOKED while the setuid program sleeps: it wakes and exits normally",
        res,
    );
}

fn main() {
    let mut tap = Tap::new(19);
    if sys::getuid() != 0 {
        tap.bail_out("must run as root (it drops privileges in its children)");
    }
    let r = guest::insmod(&["pmu=soft"]);
    let ok = r.is_ok();
    tap.result("insmod perfmon.ko pmu=soft", r);
    if !ok {
        tap.bail_out("no module");
    }
    if let Err(e) = make_suid_binary() {
        tap.bail_out(e);
    }
    other_users(&mut tap);
    setuid_program(&mut tap);
    kernel_thread_and_init(&mut tap);
    context_flood(&mut tap);
    attach_limit(&mut tap);
    exec_cases(&mut tap);
    let _ = std::fs::remove_file(SUID_BIN);
    tap.result(
        "live_contexts, zombie_contexts and attached_threads back to 0",
        guest::wait_idle(Duration::from_secs(15)).map(|_| ()),
    );
    tap.result("rmmod perfmon", guest::rmmod_within(Duration::from_secs(5)));
    tap.finish();
}
