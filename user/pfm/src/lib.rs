//! The `pfm` tool: its command line ([`cli`]), event names ([`events`]:
//! the module's, raw codes, libpfm4's), event sets when there are more
//! events than counters ([`sets`]), what `pfm stat` prints ([`report`]),
//! the record file ([`data_file`]) that `pfm record` writes and `pfm
//! report`, `pfm script` and `pfm annotate` ([`profile`]) read, resolving
//! addresses through the captured maps ([`maps`]) to ELF symbols
//! ([`symbols`]), and the commands themselves.

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};

pub mod cli;
pub mod data_file;
pub mod events;
mod info;
pub mod maps;
mod output;
pub mod profile;
mod record;
pub mod report;
pub mod sets;
mod stat;
pub mod symbols;
pub mod usage;

use cli::{Cli, Command};

/// A failure of pfm: the message to print and the exit status.
#[derive(Debug)]
pub struct Failure {
    /// What went wrong, in a tool's words, on one line.
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

/// A `-t TID` or `-p PID` that names nothing: the one wording of `pfm
/// stat` and `pfm record` (`what`: "thread" or "process"), without the
/// call that found it out.
pub(crate) fn no_such(what: &str, id: u32) -> Failure {
    Failure::new(format!(
        "no such {what}: {id} (it does not exist, or has exited)"
    ))
}

/// `e` of attaching to `what` `id`: [`no_such`] for ESRCH, else as it is.
pub(crate) fn attach_failure(e: perfmon::Error, what: &str, id: u32) -> Failure {
    if e.errno() == Some(libc::ESRCH) {
        no_such(what, id)
    } else {
        e.into()
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

/// Runs a parsed command line; returns the exit status.
pub fn run(cli: Cli) -> Result<u8, Failure> {
    let output = cli.output();
    let json = cli.json();
    match &cli.command {
        Command::List(_) => info::list(json, output).map(|_| 0),
        Command::Info(_) => info::info(json, output).map(|_| 0),
        Command::Stat(s) => {
            if let Err(msg) = s.check(json) {
                return Err(Failure {
                    message: usage::own(&msg, "pfm stat"),
                    code: 2,
                });
            }
            stat::stat(s, json, output)
        }
        Command::Record(r) => {
            if let Err(msg) = r.check(json) {
                return Err(Failure {
                    message: usage::own(&msg, "pfm record"),
                    code: 2,
                });
            }
            record::record(r, output)
        }
        Command::Report(r) => profile::report(r, json, output),
        Command::Script(r) => profile::script::script(r, json, output),
        Command::Annotate(r) => profile::annotate::annotate(r, json, output),
    }
}

/// `pfm` with the process's arguments.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            return match e.kind() {
                // Help and version are what was asked for: clap prints them
                // in full (to stdout; to stderr when help stands in for a
                // missing command).
                ErrorKind::DisplayHelp
                | ErrorKind::DisplayVersion
                | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                    let _ = e.print();
                    ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2))
                }
                _ => {
                    let args: Vec<String> = std::env::args().skip(1).collect();
                    let command = usage::command_in(&args);
                    eprintln!(
                        "pfm: {}",
                        usage::one_line(&e.render().to_string(), &command)
                    );
                    ExitCode::from(2)
                }
            };
        }
    };
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            eprintln!("pfm: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}

/// The clap command, for pfm-gen and the tests.
pub fn command() -> clap::Command {
    Cli::command()
}

#[cfg(test)]
mod tests;
