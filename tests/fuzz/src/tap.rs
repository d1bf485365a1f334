//! A small TAP 13 printer (kselftest dialect): `ok N - name`,
//! `not ok N - name`, `ok N - name # SKIP why`, `# TODO` for known gaps
//! (reported, not counted as failures), `# ` diagnostics, `Bail out!`.
//! Exit 0 (pass), 1 (fail), 4 (all skipped).

use std::fmt::Display;
use std::io::Write;

/// kselftest exit codes.
pub const KSFT_PASS: i32 = 0;
/// A test failed.
pub const KSFT_FAIL: i32 = 1;
/// Everything was skipped.
pub const KSFT_SKIP: i32 = 4;

/// The outcome of one test case.
pub type TestResult = Result<(), String>;

/// Fails the enclosing test case (returns `Err(format!(...))`) unless `cond`.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

/// One program's TAP stream.
pub struct Tap {
    plan: usize,
    n: usize,
    failed: usize,
    skipped: usize,
    todo: usize,
}

fn flush() {
    let _ = std::io::stdout().flush();
}

/// Prints `msg` as diagnostics (`# ` before each line).
pub fn diag(msg: impl Display) {
    for line in msg.to_string().lines() {
        println!("# {line}");
    }
    flush();
}

impl Tap {
    /// Header and plan.
    pub fn new(plan: usize) -> Tap {
        println!("TAP version 13");
        println!("1..{plan}");
        flush();
        Tap {
            plan,
            n: 0,
            failed: 0,
            skipped: 0,
            todo: 0,
        }
    }

    /// Reports `r` as case `name`; returns whether it passed.
    pub fn result(&mut self, name: &str, r: TestResult) -> bool {
        self.n += 1;
        let ok = match r {
            Ok(()) => {
                println!("ok {} - {name}", self.n);
                true
            }
            Err(why) => {
                diag(&why);
                self.failed += 1;
                println!("not ok {} - {name}", self.n);
                false
            }
        };
        flush();
        ok
    }

    /// Reports a known gap: a failing `r` prints `not ok ... # TODO why`,
    /// which TAP consumers do not count as a failure.
    pub fn todo(&mut self, name: &str, why: &str, r: TestResult) {
        self.n += 1;
        match r {
            Ok(()) => {
                diag(format!("{name}: passes now, the TODO mark ({why}) can go"));
                println!("ok {} - {name}", self.n);
            }
            Err(e) => {
                diag(&e);
                self.todo += 1;
                println!("not ok {} - {name} # TODO {why}", self.n);
            }
        }
        flush();
    }

    /// Reports a skipped case.
    pub fn skip(&mut self, name: &str, why: &str) {
        self.n += 1;
        self.skipped += 1;
        println!("ok {} - {name} # SKIP {why}", self.n);
        flush();
    }

    /// Runs `f` as case `name` (a panic fails it).
    pub fn run(&mut self, name: &str, f: impl FnOnce() -> TestResult) -> bool {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
            Err(format!(
                "panicked: {}",
                p.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            ))
        });
        self.result(name, r)
    }

    /// `Bail out!` and exit 1.
    pub fn bail_out(&self, why: impl Display) -> ! {
        println!("Bail out! {why}");
        flush();
        std::process::exit(KSFT_FAIL);
    }

    /// Totals and exit.
    pub fn finish(self) -> ! {
        println!(
            "# Totals: pass:{} fail:{} xfail:{} xpass:0 skip:{} error:0",
            self.n - self.failed - self.skipped - self.todo,
            self.failed,
            self.todo,
            self.skipped
        );
        let code = if self.n != self.plan {
            diag(format!("planned {} tests but ran {}", self.plan, self.n));
            KSFT_FAIL
        } else if self.failed > 0 {
            KSFT_FAIL
        } else if self.n > 0 && self.skipped == self.n {
            KSFT_SKIP
        } else {
            KSFT_PASS
        };
        flush();
        std::process::exit(code);
    }
}
