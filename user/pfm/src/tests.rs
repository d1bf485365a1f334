//! The command line, as clap parses it with pfm's declarations.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::cli::{Cli, Command, StatArgs, LONG_VERSION};
use crate::sets::{Switch, DEFAULT_SWITCH_NS};
use crate::usage;

fn p(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("pfm").chain(args.iter().copied()))
}

fn stat(args: &[&str]) -> (Cli, StatArgs) {
    let cli = p(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    let (json, output) = (cli.json(), cli.output().map(PathBuf::from));
    match cli.command {
        Command::Stat(s) => {
            // The merged output options, the command taken out.
            let cli = Cli {
                json,
                output,
                command: Command::List(Default::default()),
            };
            (cli, *s)
        }
        other => panic!("{other:?}"),
    }
}

fn os(v: &[&str]) -> Vec<OsString> {
    v.iter().map(OsString::from).collect()
}

#[test]
fn declarations_are_consistent() {
    crate::command().debug_assert();
}

#[test]
fn stat_command() {
    let (cli, s) = stat(&[
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
    assert_eq!(s.events, vec!["cs", "task-clock"]);
    assert!(cli.json());
    assert_eq!(cli.output(), Some(std::path::Path::new("out.json")));
    assert_eq!(s.command, os(&["sh", "-c", "x"]));
    // Without "--", the first word ends the options; the command's own
    // options stay its own.
    let (cli, s) = stat(&["stat", "-ecs", "ls", "-l", "--json"]);
    assert_eq!(s.events, vec!["cs"]);
    assert!(!cli.json());
    assert_eq!(s.command, os(&["ls", "-l", "--json"]));
    // Global options before the command name; -e repeated.
    let (cli, s) = stat(&[
        "--json",
        "-ox",
        "stat",
        "--event=task-clock",
        "-e",
        "cs",
        "true",
    ]);
    assert!(cli.json());
    assert_eq!(cli.output(), Some(std::path::Path::new("x")));
    assert_eq!(s.events, vec!["task-clock", "cs"]);
    // libpfm4 names keep their dots, colons and modifiers.
    let (_, s) = stat(&[
        "stat",
        "-e",
        "INST_RETIRED.ANY_P:u,BR_MISP_RETIRED:c=1",
        "true",
    ]);
    assert_eq!(
        s.events,
        vec!["INST_RETIRED.ANY_P:u", "BR_MISP_RETIRED:c=1"]
    );
}

#[test]
fn stat_options() {
    let (_, s) = stat(&["stat", "-t", "42", "--interval", "200", "--duration", "1.5"]);
    assert_eq!(s.tid, Some(42));
    assert_eq!(s.interval, Some(Duration::from_millis(200)));
    assert_eq!(s.duration, Some(Duration::from_millis(1500)));
    let (_, s) = stat(&["stat", "--tid=7", "-I100", "--perf"]);
    assert_eq!(s.tid, Some(7));
    assert!(s.perf);
    // -p is a process (whole), -t a thread: no longer aliases.
    let (_, s) = stat(&["stat", "-p", "9"]);
    assert_eq!((s.pids.clone(), s.tid), (vec![9], None));
    assert!(s.check(false).is_ok());
    assert_eq!(stat(&["stat", "--pid", "9"]).1.pids, vec![9]);
    let (_, s) = stat(&["stat", "-r", "5", "-x", ";", "--no-big-num", "true"]);
    assert_eq!(s.repeat, Some(5));
    assert_eq!(s.separator.as_deref(), Some(";"));
    assert!(s.no_big_num);
    // -I in command mode too.
    let (_, s) = stat(&["stat", "-I", "50", "--", "sleep", "1"]);
    assert_eq!(s.interval, Some(Duration::from_millis(50)));
    assert!(s.check(false).is_ok());
}

#[test]
fn whole_program_options() {
    // A command counts its whole tree by default; --no-inherit its initial
    // thread.
    let (_, s) = stat(&["stat", "--", "sh", "-c", "x"]);
    assert!(s.inherit() && !s.no_inherit && !s.per_thread);
    let (_, s) = stat(&["stat", "--no-inherit", "--per-thread", "true"]);
    assert!(!s.inherit() && s.no_inherit && s.per_thread);
    assert!(s.check(false).is_ok());
    // -p takes several processes, comma-separated or repeated.
    let (_, s) = stat(&[
        "stat",
        "-p",
        "1,2",
        "-p",
        "3",
        "--per-thread",
        "--duration",
        "1",
    ]);
    assert_eq!(s.pids, vec![1, 2, 3]);
    assert!(s.per_thread && !s.inherit(), "inherit() is a command's");
    assert!(s.check(false).is_ok());
    let (_, s) = stat(&["stat", "--pid=4,5", "-I", "100", "--perf"]);
    assert_eq!(s.pids, vec![4, 5]);
    assert!(s.check(true).is_ok());
    // --tid stays the thread; -t too, with --per-thread (one row).
    let (_, s) = stat(&["stat", "--tid", "6", "--per-thread"]);
    assert_eq!((s.tid, s.pids.is_empty()), (Some(6), true));
    // What clap refuses: a target too many, --no-inherit without a
    // command, --per-thread with -r, bad ids.
    for bad in [
        &["stat", "-p", "1", "-t", "2"][..],
        &["stat", "-p", "1", "true"],
        &["stat", "-p", "0"],
        &["stat", "-p", "1,x"],
        &["stat", "-p", "1,,2"],
        &["stat", "-p", "4294967295"],
        &["stat", "--no-inherit", "-p", "1"],
        &["stat", "--no-inherit", "-t", "1"],
        &["stat", "-r", "2", "--per-thread", "true"],
        &["stat", "-r", "2", "-p", "1"],
    ] {
        assert!(p(bad).is_err(), "accepted {bad:?}");
    }
    // What pfm's check refuses: a process twice.
    let (_, s) = stat(&["stat", "-p", "7,7"]);
    let e = s.check(false).unwrap_err();
    assert!(e.contains("process 7 twice"), "{e}");
    // --duration goes with -p as with -t.
    let (_, s) = stat(&["stat", "--duration", "1", "-p", "7"]);
    assert!(s.check(false).is_ok());
}

#[test]
fn multiplexing_options() {
    // Groups in -e: clap splits at commas, pfm puts the braces back.
    let (_, s) = stat(&["stat", "-e", "{cs,migrations},task-clock", "true"]);
    assert_eq!(s.events, vec!["{cs", "migrations}", "task-clock"]);
    let (groups, explicit) = s.groups().unwrap();
    assert!(!explicit);
    assert_eq!(groups, vec![vec!["cs", "migrations"], vec!["task-clock"]]);
    assert_eq!(s.switch(), Switch::Time(DEFAULT_SWITCH_NS));
    assert!(!s.switch_given());
    // --sets, repeatable, with --switch.
    let (_, s) = stat(&[
        "stat",
        "--sets",
        "cs,task-clock:migrations",
        "--sets=cs",
        "--switch",
        "10ms",
        "--",
        "true",
    ]);
    let (sets, explicit) = s.groups().unwrap();
    assert!(explicit);
    assert_eq!(
        sets,
        vec![vec!["cs", "task-clock"], vec!["migrations"], vec!["cs"]]
    );
    assert_eq!(s.switch(), Switch::Time(10_000_000));
    assert!(s.switch_given() && s.check(false).is_ok());
    // --switch-on-overflow N with -c PERIOD.
    let (_, s) = stat(&[
        "stat",
        "--switch-on-overflow",
        "2",
        "-c",
        "5",
        "-e",
        "cs",
        "true",
    ]);
    assert_eq!(
        s.switch(),
        Switch::Overflow {
            count: 2,
            period: 5
        }
    );
    let (_, s) = stat(&["stat", "--switch-on-overflow=3", "--period=1000000", "true"]);
    assert_eq!(
        s.switch(),
        Switch::Overflow {
            count: 3,
            period: 1_000_000
        }
    );
    for bad in [
        // Units, and the module's 100 us minimum.
        &["stat", "--switch", "10", "true"][..],
        &["stat", "--switch", "50us", "true"],
        &["stat", "--switch", "1.5ms", "true"],
        // One trigger: time or overflows.
        &[
            "stat",
            "--switch",
            "10ms",
            "--switch-on-overflow",
            "2",
            "-c",
            "5",
            "true",
        ],
        // Overflows need a period, a period needs overflows.
        &["stat", "--switch-on-overflow", "2", "true"],
        &["stat", "-c", "5", "true"],
        &["stat", "--switch-on-overflow", "0", "-c", "5", "true"],
        &["stat", "--switch-on-overflow", "2", "-c", "0", "true"],
        // -e and --sets are two ways to give the events.
        &["stat", "-e", "cs", "--sets", "cs:cs", "true"],
    ] {
        assert!(p(bad).is_err(), "accepted {bad:?}");
    }
    // What clap accepts and pfm's check refuses: the braces and sets.
    for bad in [
        &["stat", "-e", "{cs,migrations", "true"][..],
        &["stat", "-e", "cs}", "true"],
        &["stat", "-e", "{cs,{migrations}}", "true"],
        &["stat", "--sets", "cs::migrations", "true"],
        &["stat", "--sets", "{cs,migrations}", "true"],
    ] {
        let (_, s) = stat(bad);
        assert!(s.check(false).is_err(), "accepted {bad:?}");
    }
}

#[test]
fn usage_errors() {
    for bad in [
        &["stat", "-t", "0"][..],
        &["stat", "-t", "x"],
        &["stat", "-t", "5", "true"],
        &["stat", "-e"],
        &["stat", "-t", "5", "--interval", "1"],
        &["stat", "-t", "5", "--duration", "-1"],
        &["stat", "--bogus", "true"],
        &["stat", "-r", "0", "true"],
        &["stat", "-r", "2", "-t", "5"],
        &["stat", "-r", "2", "-I", "100", "true"],
        &["list", "extra"],
        &["frobnicate"],
        &["--bogus"],
    ] {
        assert!(p(bad).is_err(), "accepted {bad:?}");
    }
    // What clap accepts and pfm's own checks refuse.
    for (bad, json) in [
        (&["stat"][..], false),
        (&["stat", "--duration", "1", "true"], false),
        (&["stat", "-x", ",", "true"], true),
        (&["stat", "-x", "", "true"], false),
    ] {
        let (_, s) = stat(bad);
        assert!(s.check(json).is_err(), "accepted {bad:?}");
    }
}

#[test]
fn usage_errors_are_one_line() {
    let e = p(&["stats"]).unwrap_err();
    let line = usage::one_line(&e.render().to_string(), "pfm");
    assert_eq!(
        line,
        "unrecognized subcommand 'stats'; did you mean 'stat'? (see 'pfm --help')"
    );
    // A message that lists what is missing keeps the list.
    let bad = ["stat", "--switch-on-overflow", "2", "true"];
    let e = p(&bad).unwrap_err();
    let args: Vec<String> = bad.iter().map(|s| s.to_string()).collect();
    let line = usage::one_line(&e.render().to_string(), &usage::command_in(&args));
    assert_eq!(
        line,
        "the following required arguments were not provided: --period <PERIOD> \
         (see 'pfm stat --help')"
    );
    for bad in [
        &["stat", "--bogus", "true"][..],
        &["stat", "-t", "0"],
        &["stat", "-t", "5", "true"],
        &["--bogus"],
        &["list", "extra"],
    ] {
        let e = p(bad).unwrap_err();
        let args: Vec<String> = bad.iter().map(|s| s.to_string()).collect();
        let line = usage::one_line(&e.render().to_string(), &usage::command_in(&args));
        assert!(!line.contains('\n'), "{line}");
        assert!(line.ends_with("--help')"), "{line}");
        if bad[0] == "stat" {
            assert!(line.contains("'pfm stat --help'"), "{line}");
        }
    }
}

#[test]
fn help_and_version() {
    let e = p(&["--help"]).unwrap_err();
    assert_eq!(e.kind(), clap::error::ErrorKind::DisplayHelp);
    let help = e.render().to_string();
    assert!(help.contains("Usage: pfm"), "{help}");
    assert!(help.contains("LIBPFM_FORCE_PMU"), "{help}");
    let e = p(&["stat", "--help"]).unwrap_err();
    let help = e.render().to_string();
    for opt in [
        "--event",
        "--tid",
        "--pid",
        "--no-inherit",
        "--per-thread",
        "--interval",
        "--repeat",
        "--field-separator",
        "--no-big-num",
        "--sets",
        "--switch",
        "--switch-on-overflow",
        "--period",
    ] {
        assert!(help.contains(opt), "{opt} missing from:\n{help}");
    }
    // The whole tree is the default, and the help says so.
    assert!(help.contains("whole tree"), "{help}");
    assert!(help.contains("-p, --pid <PID,...>"), "{help}");
    assert!(help.contains("-t, --tid <TID>"), "{help}");
    assert!(LONG_VERSION.ends_with(&format!("(perfmon ABI {})", perfmon::abi::PFM_ABI_VERSION)));
}

fn record(args: &[&str]) -> (Cli, crate::cli::RecordArgs) {
    let cli = p(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    let (json, output) = (cli.json(), cli.output().map(PathBuf::from));
    match cli.command {
        Command::Record(r) => {
            // The merged output options, the command taken out.
            let cli = Cli {
                json,
                output,
                command: Command::List(Default::default()),
            };
            (cli, *r)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn record_command() {
    let (cli, r) = record(&[
        "record",
        "-e",
        "task-clock",
        "-c",
        "2000000",
        "-o",
        "f.data",
        "--",
        "prog",
        "-x",
    ]);
    assert_eq!(r.event.as_deref(), Some("task-clock"));
    assert_eq!(r.period, Some(2_000_000));
    assert_eq!(cli.output(), Some(std::path::Path::new("f.data")));
    assert_eq!(r.command, os(&["prog", "-x"]));
    assert_eq!((r.pages, r.drop, r.no_inherit), (128, false, false));
    assert!(r.check(false).is_ok());
    // The command's own options stay its own.
    let (_, r) = record(&[
        "record", "-F", "1000", "--pages", "8", "--drop", "ls", "-c", "5",
    ]);
    assert_eq!(
        (r.freq, r.period, r.pages, r.drop),
        (Some(1000), None, 8, true)
    );
    assert_eq!(r.command, os(&["ls", "-c", "5"]));
    let (_, r) = record(&["record", "-c", "3", "-p", "4,5", "--duration", "0.5"]);
    assert_eq!(r.pids, vec![4, 5]);
    assert!(r.check(false).is_ok());
    let (_, r) = record(&["record", "-c", "3", "-t", "9"]);
    assert_eq!(r.tid, Some(9));
    assert!(r.check(false).is_ok());
    // A randomisation mask is 2^k - 1, in decimal or hex; a seed needs it.
    let (_, r) = record(&["record", "-c", "9", "--random", "0xff", "true"]);
    assert_eq!((r.random, r.random_seed), (Some(0xff), None));
    let (_, r) = record(&[
        "record",
        "-c",
        "9",
        "--random",
        "7",
        "--random-seed",
        "42",
        "true",
    ]);
    assert_eq!((r.random, r.random_seed), (Some(7), Some(42)));
    // What clap refuses.
    for bad in [
        &["record", "-c", "0", "true"][..],
        &["record", "-c", "1", "-F", "1", "true"],
        &["record", "-c", "1", "--pages", "3", "true"],
        &["record", "-c", "1", "--pages", "2048", "true"],
        &["record", "-c", "1", "-p", "1", "true"],
        &["record", "-c", "1", "-t", "1", "-p", "2"],
        &["record", "-c", "1", "--no-inherit", "-t", "1"],
        &["record", "-c", "9", "--random", "6", "true"],
        &["record", "-c", "9", "--random", "0", "true"],
        &["record", "-c", "9", "--random-seed", "5", "true"],
    ] {
        assert!(p(bad).is_err(), "{bad:?}");
    }
    // What check refuses: no period, no target, --json, --duration with a
    // command, a process twice.
    let (_, r) = record(&["record", "true"]);
    assert!(r.check(false).unwrap_err().contains("-c PERIOD"));
    let (_, r) = record(&["record", "-c", "1"]);
    assert!(r.check(false).unwrap_err().contains("nothing to sample"));
    let (_, r) = record(&["record", "-c", "1", "true"]);
    assert!(r.check(true).unwrap_err().contains("--json"));
    let (_, r) = record(&["record", "-c", "1", "--duration", "1", "true"]);
    assert!(r.check(false).is_err());
    let (_, r) = record(&["record", "-c", "1", "-p", "3,3"]);
    assert!(r.check(false).is_err());
    // perf's call-graph spellings: -g, --call-graph fp; dwarf and lbr
    // refused by the parser with the reason.
    let (_, r) = record(&["record", "-c", "1", "-g", "true"]);
    assert!(r.call_graph() && r.chain_depth() == 32);
    let (_, r) = record(&[
        "record",
        "-c",
        "1",
        "--call-graph",
        "fp",
        "--max-stack",
        "8",
        "true",
    ]);
    assert!(r.call_graph() && r.chain_depth() == 8 && r.check(false).is_ok());
    for mode in ["dwarf", "dwarf,8192", "lbr"] {
        let e = p(&["record", "-c", "1", "--call-graph", mode, "true"]).unwrap_err();
        assert!(e.to_string().contains("not supported"), "{mode}: {e}");
    }
    let (_, r) = record(&["record", "-c", "1", "--max-stack", "8", "true"]);
    assert!(r
        .check(false)
        .unwrap_err()
        .contains("--max-stack goes with -g"));
    // perf's whole-CPU options: one line saying why, not clap's '-- -a'.
    for (opt, what) in [
        (
            &["-a"][..],
            "-a (--all-cpus) is not supported: pfm is a per-thread tool",
        ),
        (&["-C", "0"], "-C (--cpu) is not supported"),
        (&["-D", "100"], "-D (--delay) is not supported"),
    ] {
        let mut args = vec!["record", "-c", "1"];
        args.extend_from_slice(opt);
        args.push("true");
        let (_, r) = record(&args);
        assert!(r.check(false).unwrap_err().contains(what), "{args:?}");
        let mut args = vec!["stat"];
        args.extend_from_slice(opt);
        args.push("true");
        let (_, st) = stat(&args);
        assert!(st.check(false).unwrap_err().contains(what), "{args:?}");
    }
    // record --help lists what record takes: -o (its file), not --json,
    // nor the hidden perf options.
    let mut cmd = crate::command();
    let help = cmd
        .find_subcommand_mut("record")
        .unwrap()
        .render_long_help()
        .to_string();
    assert!(help.contains("--output <FILE>"), "{help}");
    assert!(!help.contains("--json"), "{help}");
    assert!(!help.contains("--all-cpus"), "{help}");
    assert!(help.contains("--call-graph <MODE>"), "{help}");
    // -o - and -i - parse as paths named '-'.
    let (cli, _) = record(&["record", "-c", "1", "-o", "-", "true"]);
    assert!(crate::output::is_stdio(cli.output().unwrap()));
}

#[test]
fn report_command() {
    let cli = p(&["report"]).unwrap();
    let Command::Report(r) = cli.command else {
        panic!("{:?}", cli.command)
    };
    assert_eq!(r.input, PathBuf::from("pfm.data"));
    assert_eq!(r.sort.name(), "comm,dso,sym");
    assert_eq!(r.graph, None);
    assert!(!r.children && !r.no_children);
    let cli = p(&[
        "report",
        "-i",
        "x.data",
        "--json",
        "--sort",
        "dso",
        "--pprof",
        "p.pb.gz",
        "--flamegraph",
        "f.svg",
    ])
    .unwrap();
    assert!(cli.json());
    let Command::Report(r) = cli.command else {
        panic!("{:?}", cli.command)
    };
    assert_eq!(r.input, PathBuf::from("x.data"));
    assert_eq!(r.sort.name(), "dso");
    assert_eq!(r.pprof, Some(PathBuf::from("p.pb.gz")));
    assert_eq!(r.flamegraph, Some(PathBuf::from("f.svg")));
    assert!(p(&["report", "--sort", "cpu"]).is_err());
    // perf's report options: --sort combinations, --children, -g ORDER,
    // and -g alone (caller), before another option.
    let cli = p(&[
        "report",
        "--sort",
        "comm,tid,sym",
        "--children",
        "-g",
        "callee,1",
        "--tid",
        "5,6",
    ])
    .unwrap();
    let Command::Report(r) = cli.command else {
        panic!("{:?}", cli.command)
    };
    assert_eq!(r.sort.name(), "comm,tid,sym");
    assert!(r.children);
    assert_eq!(
        r.graph,
        Some(crate::cli::Graph::Tree {
            order: crate::cli::Order::Callee,
            threshold: 1.0
        })
    );
    assert_eq!(r.filter.tids, vec![5, 6]);
    let cli = p(&["report", "-g", "-i", "x.data", "--no-children"]).unwrap();
    let Command::Report(r) = cli.command else {
        panic!("{:?}", cli.command)
    };
    assert_eq!(r.input, PathBuf::from("x.data"));
    assert!(r.no_children);
    assert!(matches!(
        r.graph,
        Some(crate::cli::Graph::Tree {
            order: crate::cli::Order::Caller,
            ..
        })
    ));
    // The last of --children and --no-children wins.
    let cli = p(&["report", "--no-children", "--children"]).unwrap();
    let Command::Report(r) = cli.command else {
        panic!("{:?}", cli.command)
    };
    assert!(r.children && !r.no_children);
    // pfm script and pfm annotate.
    let cli = p(&["script", "-i", "x.data", "--json", "--comm", "prog"]).unwrap();
    assert!(cli.json());
    let Command::Script(s) = cli.command else {
        panic!("{:?}", cli.command)
    };
    assert_eq!(s.input, PathBuf::from("x.data"));
    assert_eq!(s.filter.comms, vec!["prog".to_string()]);
    let cli = p(&["annotate", "hot_work", "-o", "a.txt"]).unwrap();
    assert_eq!(cli.output(), Some(std::path::Path::new("a.txt")));
    let Command::Annotate(a) = cli.command else {
        panic!("{:?}", cli.command)
    };
    assert_eq!(a.symbol.as_deref(), Some("hot_work"));
    assert_eq!(a.input, PathBuf::from("pfm.data"));
    assert_eq!(usage::command_in(&["script".into()]), "pfm script");
    assert_eq!(usage::command_in(&["annotate".into()]), "pfm annotate");
    assert_eq!(usage::command_in(&["record".into()]), "pfm record");
    assert_eq!(usage::command_in(&["report".into()]), "pfm report");
}
