//! A TAP 13 printer in the kselftest dialect: `TAP version 13`, `1..N`,
//! `ok N - name`, `not ok N - name`, `ok N - name # SKIP why`, diagnostics
//! as `# ...`, `Bail out!` on a fatal error; exit 0 (pass), 1 (fail) or
//! 4 (everything skipped).

use std::fmt::Display;
use std::sync::Mutex;

/// The case being run (its number and name), for the watchdog's line.
static CURRENT: Mutex<String> = Mutex::new(String::new());

/// The case the program is in: `N "name"` of the case being run, or the
/// last one reported and what follows it, for a timeout to name.
pub fn current_case() -> String {
    let c = CURRENT.lock().map(|c| c.clone()).unwrap_or_default();
    if c.is_empty() {
        "none yet (before the first case)".to_string()
    } else {
        c
    }
}

fn set_current(what: String) {
    if let Ok(mut c) = CURRENT.lock() {
        *c = what;
    }
}

/// kselftest exit codes.
pub const KSFT_PASS: i32 = 0;
/// A test failed.
pub const KSFT_FAIL: i32 = 1;
/// Everything was skipped.
pub const KSFT_SKIP: i32 = 4;

/// The outcome of one test case: `Err(reason)` fails it.
pub type TestResult = Result<(), String>;

/// Turns any displayable error into a test failure with context.
pub trait ResultExt<T> {
    /// `Err(e)` → `Err("what: e")`.
    fn ctx(self, what: &str) -> Result<T, String>;
}

impl<T, E: Display> ResultExt<T> for Result<T, E> {
    fn ctx(self, what: &str) -> Result<T, String> {
        self.map_err(|e| format!("{what}: {e}"))
    }
}

/// Fails the test case with a formatted message unless the condition holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

/// The TAP stream of one test program.
#[derive(Debug)]
pub struct Tap {
    plan: usize,
    n: usize,
    passed: usize,
    failed: usize,
    skipped: usize,
}

impl Tap {
    /// Prints the header and the plan of `plan` test cases.
    pub fn new(plan: usize) -> Self {
        println!("TAP version 13");
        println!("1..{plan}");
        Tap {
            plan,
            n: 0,
            passed: 0,
            failed: 0,
            skipped: 0,
        }
    }

    /// Notes that case `name` ended, for the watchdog: whatever runs now
    /// (until the next [`Tap::run`]) comes after it.
    fn reported(&self, name: &str) {
        set_current(format!("after {} \"{name}\"", self.n + 1));
    }

    /// Prints a diagnostic line (each line of `msg` prefixed with `# `).
    pub fn diag(&self, msg: impl Display) {
        diag(msg);
    }

    /// Reports a passing test case.
    pub fn pass(&mut self, name: &str) {
        self.reported(name);
        self.n += 1;
        self.passed += 1;
        println!("ok {} - {}", self.n, name);
    }

    /// Reports a failing test case with its reason as a diagnostic.
    pub fn fail(&mut self, name: &str, why: impl Display) {
        diag(why);
        self.reported(name);
        self.n += 1;
        self.failed += 1;
        println!("not ok {} - {}", self.n, name);
    }

    /// Reports a skipped test case.
    pub fn skip(&mut self, name: &str, why: impl Display) {
        self.reported(name);
        self.n += 1;
        self.skipped += 1;
        println!("ok {} - {} # SKIP {}", self.n, name, why);
    }

    /// Reports `result` as test case `name`; returns whether it passed.
    pub fn result(&mut self, name: &str, result: TestResult) -> bool {
        match result {
            Ok(()) => {
                self.pass(name);
                true
            }
            Err(why) => {
                self.fail(name, why);
                false
            }
        }
    }

    /// Runs `f` as test case `name`; a panic in it fails the case.
    pub fn run(&mut self, name: &str, f: impl FnOnce() -> TestResult) -> bool {
        set_current(format!("{} \"{name}\"", self.n + 1));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
            .unwrap_or_else(|p| Err(format!("panicked: {}", panic_text(&p))));
        self.result(name, r)
    }

    /// Like [`Tap::result`], but a failure ends the program with
    /// `Bail out!` (the remaining cases cannot run).
    pub fn require(&mut self, name: &str, result: TestResult) {
        if let Err(why) = result {
            self.fail(name, &why);
            self.bail_out(format!("{name} failed: {why}"));
        }
        self.pass(name);
    }

    /// Prints `Bail out!` and exits with the failure code.
    pub fn bail_out(&self, why: impl Display) -> ! {
        println!("Bail out! {why}");
        std::process::exit(KSFT_FAIL);
    }

    /// Prints the totals and exits: 0 if nothing failed, 4 if everything
    /// was skipped, 1 otherwise (also when the plan was not met).
    pub fn finish(self) -> ! {
        println!(
            "# Totals: pass:{} fail:{} xfail:0 xpass:0 skip:{} error:0",
            self.passed, self.failed, self.skipped
        );
        let code = if self.n != self.plan {
            diag(format!("planned {} tests but ran {}", self.plan, self.n));
            KSFT_FAIL
        } else if self.failed > 0 {
            KSFT_FAIL
        } else if self.skipped == self.n && self.n > 0 {
            KSFT_SKIP
        } else {
            KSFT_PASS
        };
        std::process::exit(code);
    }
}

/// Prints a diagnostic line, each line prefixed with `# `.
pub fn diag(msg: impl Display) {
    for line in msg.to_string().lines() {
        println!("# {line}");
    }
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_adds_what() {
        let r: Result<(), &str> = Err("boom");
        assert_eq!(r.ctx("open"), Err("open: boom".to_string()));
    }

    fn check(v: u32) -> TestResult {
        ensure!(v == 1, "v is {v}");
        Ok(())
    }

    #[test]
    fn ensure_fails_with_message() {
        assert_eq!(check(1), Ok(()));
        assert_eq!(check(2), Err("v is 2".to_string()));
    }
}
