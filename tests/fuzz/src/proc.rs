//! Child processes and pipes for the scenario tests (single-threaded test
//! programs: a forked child may run any code).

use std::time::{Duration, Instant};

use crate::sys;

/// A forked child; SIGKILLed and reaped on drop.
pub struct Proc {
    pid: i32,
    status: Option<i32>,
}

impl Proc {
    /// Forks; the child runs `f` and exits with its return value (it is
    /// SIGKILLed if the parent dies).
    pub fn spawn(f: impl FnOnce() -> i32) -> Proc {
        match sys::fork() {
            Ok(0) => {
                sys::die_with_parent(libc::SIGKILL);
                let code = f();
                sys::exit_now(code)
            }
            Ok(pid) => Proc { pid, status: None },
            Err(e) => panic!("fork: {}", perfmon::errno_name(e)),
        }
    }

    /// Its pid (= the tid of its only thread).
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Waits up to `timeout` for it to end; its wait status.
    pub fn wait(&mut self, timeout: Duration) -> Option<i32> {
        if self.status.is_some() {
            return self.status;
        }
        let deadline = Instant::now() + timeout;
        loop {
            match sys::waitpid(self.pid, true) {
                Ok(Some((_, st))) => {
                    self.status = Some(st);
                    return self.status;
                }
                Ok(None) => {}
                Err(_) => {
                    self.status = Some(-1);
                    return self.status;
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            sys::usleep(2_000);
        }
    }

    /// Sends `sig`.
    pub fn signal(&self, sig: i32) {
        if self.status.is_none() {
            let _ = sys::kill(self.pid, sig);
        }
    }

    /// SIGKILL and reap (bounded: a task stuck in the kernel is left).
    pub fn kill(&mut self) -> Option<i32> {
        self.signal(libc::SIGKILL);
        self.wait(Duration::from_secs(10))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A pipe carrying short text lines between a test and its children.
pub struct Pipe {
    r: i32,
    w: i32,
}

impl Pipe {
    /// A new pipe (not close-on-exec: children keep it across exec only
    /// if they want, they close it first).
    pub fn new() -> Pipe {
        let mut fds = [0i32; 2];
        // SAFETY: `fds` has room for two descriptors.
        let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
        assert!(r == 0, "pipe2: errno {}", sys::errno());
        Pipe {
            r: fds[0],
            w: fds[1],
        }
    }

    /// The read end (for threads that block on it until the pipe is dropped).
    pub fn read_fd(&self) -> i32 {
        self.r
    }

    /// Writes `line` and a newline.
    pub fn send(&self, line: &str) {
        sys::write_all(self.w, format!("{line}\n").as_bytes());
    }

    /// Reads one line, waiting up to `timeout`; `None` on timeout or EOF.
    pub fn recv(&self, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        let mut line = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match sys::poll(&[(self.r, libc::POLLIN)], left.as_millis() as i32) {
                Ok(rev) if rev[0] & (libc::POLLIN | libc::POLLHUP) != 0 => {}
                Ok(_) => return None,
                Err(libc::EINTR) => continue,
                Err(_) => return None,
            }
            let mut b = [0u8; 1];
            match sys::read_buf(self.r, &mut b) {
                Ok(1) if b[0] == b'\n' => return Some(String::from_utf8_lossy(&line).into_owned()),
                Ok(1) => line.push(b[0]),
                Ok(_) => return None,
                Err(libc::EINTR) => {}
                Err(_) => return None,
            }
        }
    }

    /// Blocks until a line arrives (no timeout; for children).
    pub fn recv_blocking(&self) -> Option<String> {
        self.recv(Duration::from_secs(3600))
    }
}

impl Default for Pipe {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        let _ = sys::close(self.r);
        let _ = sys::close(self.w);
    }
}

/// The `Uid:` line of /proc/PID/status (real, effective, saved, fs).
pub fn uid_line(pid: u32) -> String {
    sys::read_text(&format!("/proc/{pid}/status"))
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "))
        })
        .unwrap_or_default()
}

/// The command name of PID.
pub fn comm(pid: u32) -> String {
    sys::read_text(&format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}
