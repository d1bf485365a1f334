//! Running and watching the workloads that contexts monitor: a command
//! started paused (so it can be attached before its first instruction),
//! thread ids and CPU affinity, and signal handling for tools.

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Error, Op, Result};
use crate::sys;

/// The calling thread's id (what `PFM_IOC_LOAD` and perf take).
pub fn gettid() -> u32 {
    sys::gettid()
}

/// The CPU the caller is running on right now.
pub fn current_cpu() -> Result<u32> {
    sys::current_cpu().map_err(|e| Error::os(Op::Affinity, e))
}

/// The number of online CPUs.
pub fn online_cpus() -> usize {
    sys::online_cpus()
}

/// Binds thread `tid` (0 = the caller) to `cpus`.
pub fn set_affinity(tid: u32, cpus: &[usize]) -> Result<()> {
    sys::set_affinity(tid, cpus).map_err(|e| Error::os_tid(Op::Affinity, e, tid))
}

/// Sends `signal` to process (or thread group) `pid`.
pub fn send_signal(pid: u32, signal: i32) -> Result<()> {
    let p = i32::try_from(pid).map_err(|_| Error::os_tid(Op::Kill, libc::ESRCH, pid))?;
    sys::kill(p, signal).map_err(|e| Error::os_tid(Op::Kill, e, pid))
}

/// Ignores SIGINT and SIGQUIT in this process from now on, as `perf stat`
/// does while its workload runs: Ctrl-C stops the workload, and the tool
/// lives on to print what it counted. Call it after starting the workload
/// (children started later would inherit the ignored dispositions).
pub fn ignore_interrupts() {
    sys::ignore_interrupts();
}

/// How a command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExitStatus {
    /// Its exit code, if it exited.
    pub code: Option<i32>,
    /// The signal that killed it, if one did.
    pub signal: Option<i32>,
    /// User CPU time of the command and its waited-for children.
    pub user: Duration,
    /// System CPU time of the command and its waited-for children.
    pub system: Duration,
}

impl ExitStatus {
    /// The status a shell would report: the exit code, or 128 + signal.
    pub fn shell_code(&self) -> i32 {
        match (self.code, self.signal) {
            (Some(c), _) => c,
            (None, Some(s)) => 128 + s,
            (None, None) => 1,
        }
    }
}

/// Finds `program` like `execvp` does: as given if it contains a '/',
/// otherwise the first executable file of that name in `PATH`.
pub fn find_program(program: &OsStr) -> Option<PathBuf> {
    if program.as_bytes().contains(&b'/') {
        return Some(PathBuf::from(program));
    }
    if program.is_empty() {
        return None;
    }
    let path = std::env::var_os("PATH")
        .unwrap_or_else(|| OsString::from("/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"));
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn cstring(s: &OsStr) -> Result<CString> {
    CString::new(s.as_bytes())
        .map_err(|_| Error::Usage(format!("argument contains a NUL byte: {s:?}")))
}

/// A command forked and held just before `execve`, so that a context can be
/// attached to it and started before it runs its first instruction.
///
/// Dropping a `PausedChild` that was not waited for kills it (SIGKILL) and
/// reaps it.
#[derive(Debug)]
pub struct PausedChild {
    pid: u32,
    program: String,
    go: Option<OwnedFd>,
    report: Option<OwnedFd>,
    reaped: bool,
}

impl PausedChild {
    /// Forks `argv[0]` (looked up in `PATH`) with arguments `argv[1..]` and
    /// the current environment; the child waits for [`PausedChild::release`].
    pub fn spawn<S: AsRef<OsStr>>(argv: &[S]) -> Result<Self> {
        let first = argv
            .first()
            .ok_or_else(|| Error::Usage("no command given".to_string()))?;
        let program = first.as_ref().to_string_lossy().into_owned();
        let path = find_program(first.as_ref()).ok_or_else(|| Error::CommandNotFound {
            program: program.clone(),
        })?;
        let c_path = cstring(path.as_os_str())?;
        let c_argv = argv
            .iter()
            .map(|a| cstring(a.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        let c_envp = std::env::vars_os()
            .map(|(k, v)| {
                let mut kv = k;
                kv.push("=");
                kv.push(v);
                cstring(&kv)
            })
            .collect::<Result<Vec<_>>>()?;
        let go = sys::pipe().map_err(|e| Error::os(Op::Spawn, e))?;
        let report = sys::pipe().map_err(|e| Error::os(Op::Spawn, e))?;
        let pid = sys::fork_exec_paused(
            &c_path,
            &c_argv,
            &c_envp,
            (&go.0, &go.1),
            (&report.0, &report.1),
        )
        .map_err(|e| Error::os(Op::Spawn, e))?;
        // The child's ends close here, in the parent.
        drop(go.0);
        drop(report.1);
        Ok(PausedChild {
            pid: pid as u32,
            program,
            go: Some(go.1),
            report: Some(report.0),
            reaped: false,
        })
    }

    /// The child's process id (= the id of its only thread).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Lets the child execute the command, and returns once it did: with
    /// [`Error::Exec`] if `execve` failed (the child then exits with 127).
    pub fn release(&mut self) -> Result<()> {
        if let Some(go) = self.go.take() {
            let mut f = File::from(go);
            f.write_all(&[1])
                .map_err(|e| Error::os(Op::Spawn, e.raw_os_error().unwrap_or(libc::EIO)))?;
        }
        let Some(report) = self.report.take() else {
            return Ok(());
        };
        // End of file: the exec succeeded (the write end was close-on-exec).
        let mut buf = Vec::new();
        let mut f = File::from(report);
        loop {
            match f.read_to_end(&mut buf) {
                Ok(_) => break,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(Error::os(Op::Exec, e.raw_os_error().unwrap_or(libc::EIO))),
            }
        }
        if buf.len() >= 4 {
            let errno = i32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]);
            return Err(Error::Exec {
                program: self.program.clone(),
                errno,
            });
        }
        Ok(())
    }

    /// Waits for the child to end.
    pub fn wait(&mut self) -> Result<ExitStatus> {
        let r = sys::wait4(self.pid as i32, false)
            .map_err(|e| Error::os(Op::Wait, e))?
            .ok_or_else(|| Error::os(Op::Wait, libc::ECHILD))?;
        self.reaped = true;
        let (code, signal) = sys::decode_status(r.status);
        Ok(ExitStatus {
            code,
            signal,
            user: r.user,
            system: r.system,
        })
    }

    /// Reaps the child if it has ended, without waiting.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        if self.reaped {
            return Err(Error::os(Op::Wait, libc::ECHILD));
        }
        let Some(r) = sys::wait4(self.pid as i32, true).map_err(|e| Error::os(Op::Wait, e))? else {
            return Ok(None);
        };
        self.reaped = true;
        let (code, signal) = sys::decode_status(r.status);
        Ok(Some(ExitStatus {
            code,
            signal,
            user: r.user,
            system: r.system,
        }))
    }

    /// Kills the child (SIGKILL) if it has not been reaped.
    pub fn kill(&mut self) -> Result<()> {
        if self.reaped {
            return Ok(());
        }
        sys::kill(self.pid as i32, libc::SIGKILL).map_err(|e| Error::os(Op::Kill, e))
    }
}

impl Drop for PausedChild {
    fn drop(&mut self) {
        if !self.reaped {
            // Closing the go pipe alone would make a still-paused child exit
            // without running anything; SIGKILL also covers a running one.
            let _ = sys::kill(self.pid as i32, libc::SIGKILL);
            let _ = sys::wait4(self.pid as i32, false);
        }
    }
}

/// SIGINT and SIGTERM (or other signals) turned into a readable fd: the
/// signals are blocked in the calling thread and queued for [`Interrupts`]
/// to report, so a tool can wait for a signal and other fds in one poll.
///
/// Create it in the main thread before starting other threads, so that
/// every thread inherits the blocked mask.
#[derive(Debug)]
pub struct Interrupts {
    fd: OwnedFd,
}

impl Interrupts {
    /// Blocks `signals` and routes them to the returned object.
    pub fn new(signals: &[i32]) -> Result<Self> {
        let fd = sys::signalfd(signals).map_err(|e| Error::os(Op::Signal, e))?;
        Ok(Interrupts { fd })
    }

    /// SIGINT and SIGTERM.
    pub fn terminal() -> Result<Self> {
        Self::new(&[libc::SIGINT, libc::SIGTERM])
    }

    /// A pending signal, if any (does not wait).
    pub fn pending(&self) -> Result<Option<i32>> {
        sys::read_signalfd(self.fd.as_fd()).map_err(|e| Error::os(Op::Signal, e))
    }
}

impl AsFd for Interrupts {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Waits up to `timeout` (`None`: forever) until one of `fds` is readable or
/// hung up, and returns, for each, whether it is. An interrupted wait
/// (EINTR) counts as a timeout.
pub fn wait_readable(fds: &[BorrowedFd<'_>], timeout: Option<Duration>) -> Result<Vec<bool>> {
    let set: Vec<(BorrowedFd<'_>, i16)> = fds.iter().map(|fd| (*fd, libc::POLLIN)).collect();
    match sys::poll(&set, timeout) {
        Ok(revents) => Ok(revents
            .iter()
            .map(|r| r & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0)
            .collect()),
        Err(libc::EINTR) => Ok(vec![false; fds.len()]),
        Err(e) => Err(Error::os(Op::Poll, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_programs() {
        assert_eq!(find_program(OsStr::new("./x")), Some(PathBuf::from("./x")));
        assert!(find_program(OsStr::new("sh")).is_some());
        assert_eq!(find_program(OsStr::new("no-such-program-pfm-test")), None);
        assert_eq!(find_program(OsStr::new("")), None);
    }

    #[test]
    fn runs_a_paused_command() {
        let mut child = PausedChild::spawn(&["sh", "-c", "exit 7"]).unwrap();
        assert!(child.pid() > 0);
        // Still paused: not exited yet.
        assert!(sys::wait4(child.pid() as i32, true).unwrap().is_none());
        child.release().unwrap();
        let st = child.wait().unwrap();
        assert_eq!(st.code, Some(7));
        assert_eq!(st.shell_code(), 7);
    }

    #[test]
    fn try_wait_reaps_once() {
        let mut child = PausedChild::spawn(&["sh", "-c", "exit 3"]).unwrap();
        assert_eq!(child.try_wait().unwrap(), None, "still paused");
        child.release().unwrap();
        let st = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        assert_eq!(st.code, Some(3));
        assert!(child.try_wait().is_err(), "reaped already");
    }

    #[test]
    fn commands_get_the_interrupt_disposition_pfm_had() {
        // pfm ignores Ctrl-C while its command runs; a command started
        // after that (the next run of -r) must still die of SIGINT. A shell
        // started with SIGINT ignored could not undo it: its `kill -INT $$`
        // would be a no-op and it would exit 0.
        //
        // pfm run from a terminal starts with SIGINT's default disposition;
        // the test runner may not have (a background job of a shell
        // without job control starts with SIGINT ignored, and then the
        // command rightly inherits that). Start from the default, as pfm
        // does. No other test of this process touches SIGINT.
        // SAFETY: SIG_DFL is a valid disposition for SIGINT.
        unsafe { libc::signal(libc::SIGINT, libc::SIG_DFL) };
        ignore_interrupts();
        let mut child = PausedChild::spawn(&["sh", "-c", "kill -INT $$; exit 0"]).unwrap();
        child.release().unwrap();
        let st = child.wait().unwrap();
        assert_eq!(st.signal, Some(libc::SIGINT), "{st:?}");
    }

    #[test]
    fn reports_exec_failure() {
        // A directory in PATH-less form: exists, but execve fails (EACCES).
        let mut child = PausedChild::spawn(&["/"]).unwrap();
        let err = child.release().unwrap_err();
        assert!(
            matches!(
                err,
                Error::Exec {
                    errno: libc::EACCES,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(child.wait().unwrap().code, Some(127));
        assert!(matches!(
            PausedChild::spawn(&["no-such-program-pfm-test"]),
            Err(Error::CommandNotFound { .. })
        ));
    }

    #[test]
    fn dropping_kills_a_paused_child() {
        let child = PausedChild::spawn(&["sleep", "100"]).unwrap();
        let pid = child.pid() as i32;
        drop(child);
        // Reaped: no such child any more.
        assert_eq!(sys::wait4(pid, true).err(), Some(libc::ECHILD));
    }

    #[test]
    fn signal_deaths_map_to_shell_codes() {
        let mut child = PausedChild::spawn(&["sh", "-c", "kill -9 $$"]).unwrap();
        child.release().unwrap();
        let st = child.wait().unwrap();
        assert_eq!(st.signal, Some(libc::SIGKILL));
        assert_eq!(st.shell_code(), 137);
    }

    #[test]
    fn affinity_and_tid() {
        assert!(gettid() > 0);
        assert!(online_cpus() >= 1);
        let cpu = current_cpu().unwrap() as usize;
        std::thread::spawn(move || {
            set_affinity(0, &[cpu]).unwrap();
            assert_eq!(current_cpu().unwrap() as usize, cpu);
        })
        .join()
        .unwrap();
    }
}
