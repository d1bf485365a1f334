//! Command-line parsing (by hand: the grammar is small and a parser crate
//! would be most of the build).

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// Options every command takes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Common {
    /// `--json`: machine-readable output.
    pub json: bool,
    /// `-o FILE`: write the output there instead of the terminal.
    pub output: Option<PathBuf>,
}

/// What `pfm stat` monitors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Run this command and count it from its first instruction.
    Command(Vec<OsString>),
    /// Attach to this running thread.
    Thread(u32),
}

/// `pfm stat` arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatArgs {
    /// Output options.
    pub common: Common,
    /// `-e` lists, as given (comma-separated names).
    pub events: Vec<String>,
    /// The command or thread.
    pub target: Target,
    /// `--interval MS` (thread mode): print counts every interval.
    pub interval: Option<Duration>,
    /// `--duration S` (thread mode): stop after this long.
    pub duration: Option<Duration>,
    /// `--perf`: also count with perf_event and print its counts beside.
    pub perf: bool,
}

/// A parsed command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// `pfm stat`.
    Stat(StatArgs),
    /// `pfm list`.
    List(Common),
    /// `pfm info`.
    Info(Common),
    /// `pfm help [COMMAND]`, `--help`.
    Help(Option<String>),
    /// `pfm --version`.
    Version,
}

/// The usage text.
pub const USAGE: &str = "\
usage: pfm [--json] [-o FILE] COMMAND [ARGS]

Per-thread performance counters through /dev/perfmon (the perfmon module).

Commands:
  stat [-e EVENT,...] [--perf] [--] CMD [ARGS...]
                 run CMD and count it from its first instruction; prints a
                 table like perf stat on stderr and exits with CMD's status;
                 perfmon counts one thread: CMD's initial thread, not the
                 processes or threads it creates
  stat [-e EVENT,...] -t TID [--interval MS] [--duration S]
                 attach to a running thread; Ctrl-C prints the totals so far
  list           events of the loaded PMU model
  info           ABI version, PMU model, counters, vector, live contexts
  help [COMMAND] this text

Options:
  -e, --event EVENT,...   events to count (default: all events of the model);
                          perf aliases (cs, migrations) and raw codes (r<hex>)
  -t, --tid TID           thread to attach to (-p, --pid PID: the same, for a
                          process's main thread)
  -I, --interval MS       with -t: print counts every MS milliseconds
  --duration S            with -t: stop after S seconds (fractions allowed)
  --perf                  also count with perf_event_open and show its counts
  -j, --json              JSON output: one JSON document per line
  -o, --output FILE       write the output to FILE
  -h, --help              help
  -V, --version           version

Exit status: pfm stat CMD exits with CMD's status (128+N if killed by signal
N; 127 if CMD cannot be found, 126 if it cannot be run); otherwise 0 on
success, 1 on error, 2 on a usage error.";

/// A usage error: the message to print before the usage hint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageError(pub String);

fn err<T>(msg: impl Into<String>) -> Result<T, UsageError> {
    Err(UsageError(msg.into()))
}

/// Splits `--opt=value` into (`--opt`, Some(value)).
fn split_long(arg: &str) -> (&str, Option<&str>) {
    match arg.split_once('=') {
        Some((o, v)) if o.starts_with("--") => (o, Some(v)),
        _ => (arg, None),
    }
}

struct Args {
    items: Vec<OsString>,
    pos: usize,
}

impl Args {
    fn next_os(&mut self) -> Option<OsString> {
        let a = self.items.get(self.pos).cloned();
        self.pos += usize::from(a.is_some());
        a
    }

    fn peek_str(&self) -> Option<Result<&str, UsageError>> {
        self.items.get(self.pos).map(|a| {
            a.to_str()
                .ok_or_else(|| UsageError(format!("invalid UTF-8 in option {a:?}")))
        })
    }

    /// The value of option `opt`: the attached one or the next argument.
    fn value(&mut self, opt: &str, attached: Option<&str>) -> Result<String, UsageError> {
        if let Some(v) = attached {
            return Ok(v.to_string());
        }
        match self.next_os() {
            Some(v) => v
                .into_string()
                .map_err(|v| UsageError(format!("invalid UTF-8 in the value of {opt}: {v:?}"))),
            None => err(format!("option {opt} needs a value")),
        }
    }
}

/// Parses a common option at the current position; returns whether it was
/// one.
fn common_option(
    args: &mut Args,
    opt: &str,
    attached: Option<&str>,
    c: &mut Common,
) -> Result<bool, UsageError> {
    match opt {
        "-j" | "--json" => c.json = true,
        "-o" | "--output" => c.output = Some(PathBuf::from(args.value(opt, attached)?)),
        _ => {
            if let Some(v) = opt
                .strip_prefix("-o")
                .filter(|v| !v.is_empty() && !opt.starts_with("--"))
            {
                c.output = Some(PathBuf::from(v));
            } else {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

fn parse_tid(opt: &str, v: &str) -> Result<u32, UsageError> {
    match v.trim().parse::<u32>() {
        Ok(0) => err(format!("{opt} 0: give a thread id (0 would be pfm itself)")),
        Ok(t) if t <= i32::MAX as u32 => Ok(t),
        _ => err(format!("{opt}: not a thread id: '{v}'")),
    }
}

fn parse_ms(opt: &str, v: &str) -> Result<Duration, UsageError> {
    match v.trim().parse::<u64>() {
        Ok(ms) if ms >= 10 => Ok(Duration::from_millis(ms)),
        Ok(_) => err(format!("{opt}: the interval must be at least 10 ms")),
        Err(_) => err(format!("{opt}: not a number of milliseconds: '{v}'")),
    }
}

fn parse_secs(opt: &str, v: &str) -> Result<Duration, UsageError> {
    match v.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s < 1e9 => Ok(Duration::from_secs_f64(s)),
        _ => err(format!("{opt}: not a positive number of seconds: '{v}'")),
    }
}

fn parse_stat(args: &mut Args, mut common: Common) -> Result<Command, UsageError> {
    let mut events = Vec::new();
    let mut tid = None;
    let mut interval = None;
    let mut duration = None;
    let mut perf = false;
    let mut command = Vec::new();
    while let Some(arg) = args.peek_str() {
        let arg = match arg {
            Ok(a) => a.to_string(),
            // A non-UTF-8 word can only be the command.
            Err(_) => break,
        };
        if arg == "--" {
            args.pos += 1;
            break;
        }
        if !arg.starts_with('-') || arg == "-" {
            break;
        }
        args.pos += 1;
        let (opt, attached) = split_long(&arg);
        if common_option(args, opt, attached, &mut common)? {
            continue;
        }
        match opt {
            "-e" | "--event" | "--events" => events.push(args.value(opt, attached)?),
            "-t" | "--tid" | "-p" | "--pid" => {
                tid = Some(parse_tid(opt, &args.value(opt, attached)?)?)
            }
            "-I" | "--interval" | "--interval-ms" => {
                interval = Some(parse_ms(opt, &args.value(opt, attached)?)?)
            }
            "--duration" => duration = Some(parse_secs(opt, &args.value(opt, attached)?)?),
            "--perf" => perf = true,
            "-h" | "--help" => return Ok(Command::Help(Some("stat".into()))),
            _ if opt.starts_with("-e") && !opt.starts_with("--") => {
                events.push(opt[2..].to_string())
            }
            _ if opt.starts_with("-t") && !opt.starts_with("--") => {
                tid = Some(parse_tid("-t", &opt[2..])?)
            }
            _ if opt.starts_with("-I") && !opt.starts_with("--") => {
                interval = Some(parse_ms("-I", &opt[2..])?)
            }
            _ => return err(format!("pfm stat: unknown option '{arg}'")),
        }
    }
    while let Some(a) = args.next_os() {
        command.push(a);
    }
    let target = match (tid, command.is_empty()) {
        (Some(_), false) => return err("pfm stat: give either -t TID or a command, not both"),
        (Some(t), true) => Target::Thread(t),
        (None, false) => Target::Command(command),
        (None, true) => {
            return err(
                "pfm stat: nothing to count: give a command (pfm stat -- CMD ARGS) or -t TID",
            )
        }
    };
    if matches!(target, Target::Command(_)) && (interval.is_some() || duration.is_some()) {
        return err("pfm stat: --interval and --duration go with -t TID");
    }
    Ok(Command::Stat(StatArgs {
        common,
        events,
        target,
        interval,
        duration,
        perf,
    }))
}

/// Parses the arguments after the program name.
pub fn parse(argv: Vec<OsString>) -> Result<Command, UsageError> {
    let mut args = Args {
        items: argv,
        pos: 0,
    };
    let mut common = Common::default();
    // Options before the command.
    let name = loop {
        let Some(arg) = args.peek_str() else {
            return Ok(Command::Help(None));
        };
        let arg = arg?.to_string();
        args.pos += 1;
        let (opt, attached) = split_long(&arg);
        if common_option(&mut args, opt, attached, &mut common)? {
            continue;
        }
        match opt {
            "-h" | "--help" => return Ok(Command::Help(None)),
            "-V" | "--version" => return Ok(Command::Version),
            _ if opt.starts_with('-') => return err(format!("unknown option '{arg}'")),
            _ => break arg,
        }
    };
    match name.as_str() {
        "stat" => parse_stat(&mut args, common),
        "list" | "info" => {
            while let Some(arg) = args.peek_str() {
                let arg = arg?.to_string();
                args.pos += 1;
                let (opt, attached) = split_long(&arg);
                if common_option(&mut args, opt, attached, &mut common)? {
                    continue;
                }
                if opt == "-h" || opt == "--help" {
                    return Ok(Command::Help(Some(name)));
                }
                return err(format!("pfm {name}: unexpected argument '{arg}'"));
            }
            Ok(if name == "list" {
                Command::List(common)
            } else {
                Command::Info(common)
            })
        }
        "help" => Ok(Command::Help(
            args.peek_str().and_then(Result::ok).map(str::to_string),
        )),
        other => {
            let known = ["stat", "list", "info", "help"];
            let close = perfmon::suggest(other, &known);
            match close.first() {
                Some(c) => err(format!("unknown command '{other}'; did you mean '{c}'?")),
                None => err(format!(
                    "unknown command '{other}' (commands: stat, list, info)"
                )),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Command, UsageError> {
        parse(args.iter().map(OsString::from).collect())
    }

    fn stat(args: &[&str]) -> StatArgs {
        match p(args) {
            Ok(Command::Stat(s)) => s,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn stat_command() {
        let s = stat(&[
            "stat",
            "-e",
            "cs,task-clock",
            "--json",
            "-o",
            "out.json",
            "--",
            "sh",
            "-c",
            "x",
        ]);
        assert_eq!(s.events, vec!["cs,task-clock"]);
        assert!(s.common.json);
        assert_eq!(s.common.output, Some(PathBuf::from("out.json")));
        assert_eq!(
            s.target,
            Target::Command(vec!["sh".into(), "-c".into(), "x".into()])
        );
        // Without "--", the first word ends the options; the command's own
        // options stay its own.
        let s = stat(&["stat", "-ecs", "ls", "-l", "--json"]);
        assert_eq!(s.events, vec!["cs"]);
        assert!(!s.common.json);
        assert_eq!(
            s.target,
            Target::Command(vec!["ls".into(), "-l".into(), "--json".into()])
        );
        // Global options before the command name.
        let s = stat(&[
            "--json",
            "-ox",
            "stat",
            "--event=task-clock",
            "-e",
            "cs",
            "true",
        ]);
        assert!(s.common.json);
        assert_eq!(s.events, vec!["task-clock", "cs"]);
    }

    #[test]
    fn stat_thread() {
        let s = stat(&["stat", "-t", "42", "--interval", "200", "--duration", "1.5"]);
        assert_eq!(s.target, Target::Thread(42));
        assert_eq!(s.interval, Some(Duration::from_millis(200)));
        assert_eq!(s.duration, Some(Duration::from_millis(1500)));
        let s = stat(&["stat", "--tid=7", "-I100", "--perf"]);
        assert_eq!(s.target, Target::Thread(7));
        assert!(s.perf);
        assert_eq!(stat(&["stat", "-p", "9"]).target, Target::Thread(9));
    }

    #[test]
    fn usage_errors() {
        for bad in [
            &["stat"][..],
            &["stat", "-t", "0"],
            &["stat", "-t", "x"],
            &["stat", "-t", "5", "true"],
            &["stat", "-e"],
            &["stat", "--interval", "100", "--", "true"],
            &["stat", "-t", "5", "--interval", "1"],
            &["stat", "-t", "5", "--duration", "-1"],
            &["stat", "--bogus", "true"],
            &["list", "extra"],
            &["frobnicate"],
            &["--bogus"],
        ] {
            assert!(p(bad).is_err(), "accepted {bad:?}");
        }
        assert_eq!(
            p(&["stats"]).unwrap_err(),
            UsageError("unknown command 'stats'; did you mean 'stat'?".into())
        );
    }

    #[test]
    fn other_commands() {
        assert_eq!(p(&[]), Ok(Command::Help(None)));
        assert_eq!(p(&["--help"]), Ok(Command::Help(None)));
        assert_eq!(p(&["help", "stat"]), Ok(Command::Help(Some("stat".into()))));
        assert_eq!(p(&["-V"]), Ok(Command::Version));
        assert_eq!(p(&["list"]), Ok(Command::List(Common::default())));
        assert_eq!(
            p(&["info", "--json"]),
            Ok(Command::Info(Common {
                json: true,
                output: None
            }))
        );
        assert_eq!(
            p(&["list", "-o", "f"]),
            Ok(Command::List(Common {
                json: false,
                output: Some("f".into())
            }))
        );
    }
}
