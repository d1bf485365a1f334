//! Child processes of the tests: the test binary itself, run again with
//! `--pfm-child MODE ARGS`, so the workloads need nothing from the guest.
//! Every test program calls [`dispatch`] first.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::raw;

/// Sleeps 1 ms, again until the thread has been switched out at least
/// once: a 1 ms nanosleep whose timer expires before the sleeper reaches
/// `schedule()` (a slow guest) returns without a switch, and the tests
/// that count "N sleeps" count switches.
fn switching_sleep() {
    switching_sleep_ms(1);
}

/// [`switching_sleep`] of `ms` ms.
fn switching_sleep_ms(ms: u64) {
    let before = crate::edges::thread_switches();
    loop {
        std::thread::sleep(Duration::from_millis(ms));
        if crate::edges::thread_switches() != before {
            return;
        }
    }
}

/// The first argument that selects child mode.
pub const CHILD_FLAG: &str = "--pfm-child";

/// If this process was started as a child, runs the mode and exits.
pub fn dispatch() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) != Some(CHILD_FLAG) {
        return;
    }
    raw::die_with_parent();
    let mode = args.get(2).map(String::as_str).unwrap_or("");
    let num = |i: usize| args.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    let code = match mode {
        // Spin forever.
        "busy" => loop {
            std::hint::spin_loop();
        },
        // ARG threads besides the main one, all sleeping ARG2 ms at a time
        // (each sleep a switch), forever.
        "sleepers" => {
            for _ in 0..num(3) {
                let ms = num(4).max(1);
                std::thread::spawn(move || loop {
                    switching_sleep_ms(ms);
                });
            }
            loop {
                switching_sleep_ms(num(4).max(1));
            }
        }
        // Sleep ARG ms at a time, forever.
        "sleep" => loop {
            std::thread::sleep(Duration::from_millis(num(3).max(1)));
        },
        // Do ARG sleeps of 1 ms, each with a switch, then exit 0; with
        // ARG2 `stopped`, stop (SIGSTOP) first, until continued.
        "sleeps" => {
            if args.get(4).is_some_and(|a| a == "stopped") {
                // Stopped until the test has attached (SIGCONT): a loaded
                // host may otherwise run every sleep before the LOAD.
                // SAFETY: raise(3) of a standard signal.
                unsafe { libc::raise(libc::SIGSTOP) };
            }
            for _ in 0..num(3) {
                switching_sleep();
            }
            0
        }
        // Sleep 5 ms at a time for ARG ms in total, then exit 0.
        "exit-after" => {
            let end = Instant::now() + Duration::from_millis(num(3));
            while Instant::now() < end {
                std::thread::sleep(Duration::from_millis(5));
            }
            0
        }
        // The target of an edges measurement (`edges::run_target`): edges
        // on stdout, go bytes on stdin, workload ARG, ARG2 rounds.
        "edges" => {
            use std::os::fd::FromRawFd;
            // SAFETY: fds 0 and 1 are this process's, used by nothing else here.
            let (go, report) =
                unsafe { (std::fs::File::from_raw_fd(0), std::fs::File::from_raw_fd(1)) };
            match args
                .get(3)
                .and_then(|w| crate::edges::Workload::from_name(w))
            {
                Some(w) => crate::edges::run_target(report, go, w, num(4) as usize),
                None => 2,
            }
        }
        // Spin for ARG ms, then exit 0.
        "spin" => {
            let end = Instant::now() + Duration::from_millis(num(3));
            while Instant::now() < end {
                std::hint::spin_loop();
            }
            0
        }
        // Count the runs in file ARG (its number, plus one, written back)
        // and do 10 x run sleeps of 1 ms: `pfm stat -r N` of this does 10,
        // 20, 30, ... sleeps, a known number of context switches per run.
        "sleeps-by-run" => {
            let path = args.get(3).cloned().unwrap_or_default();
            let run = std::fs::read_to_string(&path)
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .unwrap_or(0)
                + 1;
            if std::fs::write(&path, run.to_string()).is_err() {
                3
            } else {
                for _ in 0..10 * run {
                    switching_sleep();
                }
                // The run's own switch count since the fork (getrusage),
                // the oracle the test holds pfm's count to.
                let own = crate::edges::thread_switches();
                if std::fs::write(format!("{path}.{run}.own"), own.to_string()).is_err() {
                    3
                } else {
                    0
                }
            }
        }
        // Measure itself for FILE: ARG2 rounds of ARG3 us of CPU (its own
        // clock) then a 1 ms sleep; then FILE gets its thread CPU time and
        // its switch count since the fork (getrusage) at the start of this
        // mode and at the end, the oracles `pfm stat`'s multiplexed counts
        // are held to.
        "own" => {
            let switches_start = crate::edges::thread_switches();
            let cpu_start = crate::edges::thread_cpu_ns();
            let spin_ns = num(5) * 1000;
            for _ in 0..num(4) {
                let until = crate::edges::thread_cpu_ns() + spin_ns;
                while crate::edges::thread_cpu_ns() < until {
                    std::hint::spin_loop();
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            let cpu_end = crate::edges::thread_cpu_ns();
            let switches = crate::edges::thread_switches();
            let path = args.get(3).cloned().unwrap_or_default();
            let line = format!("{cpu_start} {cpu_end} {switches_start} {switches}\n");
            match std::fs::write(&path, line) {
                Ok(()) => 0,
                Err(_) => 3,
            }
        }
        // A whole program measuring itself for FILE: this process and
        // ARG4 more (each the test binary in mode `own-part`, forked from
        // this one); this one has ARG5 threads besides its main one, each
        // of the others ARG6 (ARG5 if not given); every
        // thread does ARG2 rounds of ARG3 us of CPU then a 1 ms sleep, and
        // appends its own line to FILE (see `own_part`). Waits for the
        // processes, so that their CPU time is in this one's rusage.
        "own-family" => {
            let me = std::env::current_exe().unwrap_or_default();
            let rest: Vec<String> = args.iter().skip(3).take(3).cloned().collect();
            let threads = args.get(8).or(args.get(7)).cloned().unwrap_or_default();
            let children: Vec<_> = (0..num(6))
                .filter_map(|_| {
                    Command::new(&me)
                        .arg(CHILD_FLAG)
                        .arg("own-part")
                        .args(&rest)
                        .arg(&threads)
                        .spawn()
                        .ok()
                })
                .collect();
            let spawned = children.len() as u64;
            let mut code = own_part(&rest, num(7));
            for mut c in children {
                if !c.wait().is_ok_and(|s| s.success()) {
                    code = 4;
                }
            }
            if spawned != num(6) {
                code = 5;
            }
            code
        }
        // One process of `own-family`: FILE ROUNDS SPIN_US THREADS.
        "own-part" => {
            let rest: Vec<String> = args.iter().skip(3).take(3).cloned().collect();
            own_part(&rest, num(6))
        }
        // Become user ARG (uid = gid), then report on stdout what opening
        // /dev/perfmon, attaching to thread ARG2, and attaching to itself do.
        "attach-as-user" => attach_as_user(num(3) as u32, num(4) as u32),
        _ => {
            eprintln!("unknown child mode '{mode}'");
            2
        }
    };
    std::process::exit(code);
}

/// A process of `own-family`: its main thread and `threads` more each
/// spin `rounds` × `spin_us` of CPU with a 1 ms sleep after each, then
/// append `tid pid cpu_start cpu_end switches_start switches_end` (its own
/// clock and getrusage count, at its start and at its end) to FILE in one
/// write (`O_APPEND`: lines never interleave). `rest`: FILE ROUNDS SPIN_US.
fn own_part(rest: &[String], threads: u64) -> i32 {
    let path = rest.first().cloned().unwrap_or_default();
    let num = |i: usize| rest.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    let (rounds, spin_ns) = (num(1), num(2) * 1000);
    let work = move |path: String| -> bool {
        let switches_start = crate::edges::thread_switches();
        let cpu_start = crate::edges::thread_cpu_ns();
        for _ in 0..rounds {
            let until = crate::edges::thread_cpu_ns() + spin_ns;
            while crate::edges::thread_cpu_ns() < until {
                std::hint::spin_loop();
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let cpu_end = crate::edges::thread_cpu_ns();
        let switches = crate::edges::thread_switches();
        let line = format!(
            "{} {} {cpu_start} {cpu_end} {switches_start} {switches}\n",
            // SAFETY: No arguments.
            unsafe { libc::syscall(libc::SYS_gettid) },
            std::process::id()
        );
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, line.as_bytes()))
            .is_ok()
    };
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let p = path.clone();
            std::thread::spawn(move || work(p))
        })
        .collect();
    let mut ok = work(path);
    for h in handles {
        ok &= h.join().unwrap_or(false);
    }
    if ok {
        0
    } else {
        3
    }
}

fn outcome(r: perfmon::Result<()>) -> String {
    match r {
        Ok(()) => "ok".to_string(),
        Err(e) => perfmon::errno_name(e.errno().unwrap_or(0)).to_string(),
    }
}

fn attach_as_user(uid: u32, target: u32) -> i32 {
    if let Err(e) = raw::become_user(uid, uid) {
        println!("setuid={}", perfmon::errno_name(e));
        return 3;
    }
    println!("uid={}", raw::geteuid());
    let ctx = match perfmon::Context::open() {
        Ok(c) => c,
        Err(e) => {
            println!("open={}", perfmon::errno_name(e.errno().unwrap_or(0)));
            return 0;
        }
    };
    println!("open=ok");
    println!("load_other={}", outcome(ctx.load(target)));
    let own = perfmon::Context::open().and_then(|c| {
        c.load(0)?;
        c.unload()
    });
    println!("load_self={}", outcome(own));
    0
}

/// A child process of a test; killed and reaped on drop.
#[derive(Debug)]
pub struct Child {
    inner: std::process::Child,
}

impl Child {
    /// Starts `MODE ARGS` in a child.
    pub fn spawn(mode: &str, args: &[&str]) -> Result<Self, String> {
        Self::spawn_with(mode, args, false)
    }

    /// Starts `MODE ARGS`, with its stdout captured if `capture`.
    pub fn spawn_with(mode: &str, args: &[&str], capture: bool) -> Result<Self, String> {
        let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
        let inner = Command::new(exe)
            .arg(CHILD_FLAG)
            .arg(mode)
            .args(args)
            .stdin(Stdio::null())
            .stdout(if capture {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .spawn()
            .map_err(|e| format!("spawn child {mode}: {e}"))?;
        Ok(Child { inner })
    }

    /// Its pid (= tid of its main thread).
    pub fn pid(&self) -> u32 {
        self.inner.id()
    }

    /// Sends `sig`.
    pub fn signal(&self, sig: i32) -> Result<(), String> {
        perfmon::process::send_signal(self.pid(), sig).map_err(|e| e.to_string())
    }

    /// Waits up to `timeout` for it to exit; its exit code (None: killed).
    pub fn wait_timeout(&mut self, timeout: Duration) -> Result<Option<i32>, String> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.inner.try_wait() {
                Ok(Some(st)) => return Ok(st.code()),
                Ok(None) if Instant::now() >= deadline => {
                    return Err(format!(
                        "child {} still running after {:?}",
                        self.pid(),
                        timeout
                    ))
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => return Err(format!("wait: {e}")),
            }
        }
    }

    /// Waits for it and returns its captured stdout.
    pub fn output(self, timeout: Duration) -> Result<String, String> {
        let mut me = self;
        me.wait_timeout(timeout)?;
        let mut s = String::new();
        if let Some(mut out) = me.inner.stdout.take() {
            use std::io::Read;
            out.read_to_string(&mut s)
                .map_err(|e| format!("read child output: {e}"))?;
        }
        Ok(s)
    }

    /// Kills it (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.inner.kill();
        let _ = self.inner.wait();
    }

    /// Its scheduler state letter from /proc/PID/stat (R, S, T, Z, ...).
    pub fn proc_state(&self) -> Option<char> {
        proc_state(self.pid())
    }

    /// Waits up to `timeout` for its state to be `state`.
    pub fn wait_state(&self, state: char, timeout: Duration) -> Result<(), String> {
        if crate::module::wait_for(timeout, || self.proc_state() == Some(state)) {
            Ok(())
        } else {
            Err(format!(
                "child {} not in state {state} within {:?} (state {:?})",
                self.pid(),
                timeout,
                self.proc_state()
            ))
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The state letter of task `tid` in /proc.
pub fn proc_state(tid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{tid}/stat")).ok()?;
    // "pid (comm) S ..." — comm may contain spaces and parentheses.
    let after = &stat[stat.rfind(')')? + 1..];
    after.trim_start().chars().next()
}

/// Runs this program again in its own child mode `args` (a test's own
/// `CHILD_FLAG` modes, beside [`dispatch`]'s shared ones); its stdout, all
/// of it (also from processes it forked), once it has exited, or an error
/// if it has not within `timeout` (it is killed then). The output goes to
/// the TAP log as a diagnostic.
pub fn run_self(args: &[&str], timeout: Duration) -> Result<String, String> {
    use std::io::Read;
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut child = Command::new(exe)
        .arg(CHILD_FLAG)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("spawn: {e}"))?;
    let mut out = child.stdout.take().ok_or("no stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        let _ = tx.send(s);
    });
    let text = rx.recv_timeout(timeout);
    let _ = child.kill();
    let _ = child.wait();
    let text = text.map_err(|_| format!("{args:?}: no end of output within {timeout:?}"))?;
    crate::tap::diag(format!(
        "{}: {}",
        args.first().unwrap_or(&""),
        text.trim().replace('\n', " | ")
    ));
    Ok(text)
}

/// The value of `key=VALUE` in a child's output.
pub fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

/// The number of `key=N` in a child's output.
pub fn num_field(text: &str, key: &str) -> Result<u64, String> {
    field(text, key)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("no {key}= in {text:?}"))
}
