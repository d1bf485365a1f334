//! `pfm`: per-thread performance counters from the command line, in the
//! habits of `perf stat`, through `/dev/perfmon`.
//!
//! See `pfm --help` and [`args::USAGE`].

mod args;
mod info;
mod output;
mod report;
mod stat;

use std::process::ExitCode;

use args::Command;

/// A failure of pfm: the message to print and the exit status.
#[derive(Debug)]
pub struct Failure {
    /// What went wrong, in a tool's words.
    pub message: String,
    /// The exit status.
    pub code: u8,
}

impl Failure {
    /// A failure with exit status 1.
    pub fn new(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            code: 1,
        }
    }
}

impl From<perfmon::Error> for Failure {
    fn from(e: perfmon::Error) -> Self {
        Failure {
            code: e.shell_code().unwrap_or(1),
            message: e.to_string(),
        }
    }
}

fn run(cmd: Command) -> Result<u8, Failure> {
    match cmd {
        Command::Help(_) => {
            println!("{}", args::USAGE);
            Ok(0)
        }
        Command::Version => {
            println!(
                "pfm {} (perfmon ABI {})",
                env!("CARGO_PKG_VERSION"),
                perfmon::abi::PFM_ABI_VERSION
            );
            Ok(0)
        }
        Command::List(common) => info::list(&common).map(|_| 0),
        Command::Info(common) => info::info(&common).map(|_| 0),
        Command::Stat(s) => stat::stat(&s),
    }
}

fn main() -> ExitCode {
    let argv: Vec<_> = std::env::args_os().skip(1).collect();
    let cmd = match args::parse(argv) {
        Ok(c) => c,
        Err(args::UsageError(msg)) => {
            eprintln!("pfm: {msg}\n(see 'pfm --help')");
            return ExitCode::from(2);
        }
    };
    match run(cmd) {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            eprintln!("pfm: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}
