//! pfm_fuzz: perf_fuzzer-style random testing of /dev/perfmon.
//!
//!   pfm_fuzz [--seed N] [--ops N] [--duration SECS] [--log FILE]
//!            [--procs N] [--threads N] [--no-unpriv] [--progress SECS]
//!            [--kmsg] [--insmod] [--module-params "P=V ..."] [--rmmod]
//!            [--timer-us N] [--no-smpl-hostile]
//!
//! Prints its seed first; `--seed N` with the same --procs/--threads replays
//! the same random choices (see the `fuzz` module of this crate). Without
//! --ops or --duration it runs 100,000 operations. Ends with the operation
//! count, the anomalies (results that break the ABI's rules), processes
//! that could not be killed, and whether the module's counters drained;
//! exit status 1 if any of those went wrong. `--no-smpl-hostile` stops it
//! writing garbage into the sampling buffers' `head`, `written` and `lost`
//! (see tests/fuzz/README.md).

use std::time::Duration;

use pfm_fuzz::fuzz::{self, Config};
use pfm_fuzz::guest;

fn usage() -> ! {
    eprintln!(
        "usage: pfm_fuzz [--seed N] [--ops N] [--duration SECS] [--log FILE] [--procs N] [--threads N]\n\
         \x20               [--no-unpriv] [--progress SECS] [--kmsg] [--insmod] [--module-params \"...\"]\n\
         \x20               [--rmmod] [--timer-us N] [--no-smpl-hostile]"
    );
    std::process::exit(2)
}

fn num(v: Option<String>) -> u64 {
    let v = v.unwrap_or_else(|| usage());
    let r = if let Some(h) = v.strip_prefix("0x") {
        u64::from_str_radix(h, 16)
    } else {
        v.parse()
    };
    r.unwrap_or_else(|_| usage())
}

fn main() {
    let mut cfg = Config {
        progress_secs: 10,
        ..Config::default()
    };
    let mut seed = None;
    let mut ops = None;
    let mut insmod = false;
    let mut rmmod = false;
    let mut params = "pmu=soft soft_width=16".to_string();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seed" => seed = Some(num(args.next())),
            "--ops" => ops = Some(num(args.next())),
            "--duration" => cfg.duration = Some(Duration::from_secs(num(args.next()))),
            "--log" => cfg.log = Some(args.next().unwrap_or_else(|| usage())),
            "--procs" => cfg.procs = num(args.next()) as usize,
            "--threads" => cfg.threads = num(args.next()) as usize,
            "--no-unpriv" => cfg.unpriv = false,
            "--progress" => cfg.progress_secs = num(args.next()),
            "--kmsg" => cfg.kmsg = true,
            "--insmod" => insmod = true,
            "--module-params" => params = args.next().unwrap_or_else(|| usage()),
            "--rmmod" => rmmod = true,
            "--timer-us" => cfg.timer_us = num(args.next()).max(1000),
            "--no-smpl-hostile" => cfg.smpl_hostile = false,
            _ => usage(),
        }
    }
    cfg.seed = seed.unwrap_or_else(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        (t.as_nanos() as u64) ^ (std::process::id() as u64) << 32
    });
    cfg.ops = ops.unwrap_or(if cfg.duration.is_some() { 0 } else { 100_000 });
    cfg.threads = cfg.threads.max(1);
    println!(
        "pfm_fuzz: seed {} (replay: pfm_fuzz --seed {} --procs {} --threads {}{}{}{})",
        cfg.seed,
        cfg.seed,
        cfg.procs,
        cfg.threads,
        if cfg.smpl_hostile {
            ""
        } else {
            " --no-smpl-hostile"
        },
        if cfg.ops > 0 {
            format!(" --ops {}", cfg.ops)
        } else {
            String::new()
        },
        cfg.duration
            .map_or(String::new(), |d| format!(" --duration {}", d.as_secs()))
    );
    if insmod && !std::path::Path::new("/dev/perfmon").exists() {
        let p: Vec<&str> = params.split_whitespace().collect();
        if let Err(e) = guest::insmod(&p) {
            println!("pfm_fuzz: {e}");
            std::process::exit(1);
        }
    }
    if !std::path::Path::new("/dev/perfmon").exists() {
        println!("pfm_fuzz: no /dev/perfmon (load the module, or pass --insmod)");
        std::process::exit(1);
    }
    let report = fuzz::run(&cfg);
    print!("{}", report.summary());
    let mut bad = report.anomaly_count > 0 || !report.hung.is_empty();
    match guest::wait_idle(Duration::from_secs(15)) {
        Ok(t) => println!(
            "module counters drained in {} ms: {}",
            t.as_millis(),
            guest::Counters::read()
        ),
        Err(e) => {
            println!("module counters did not drain: {e}");
            bad = true;
        }
    }
    if rmmod {
        match guest::rmmod_within(Duration::from_secs(5)) {
            Ok(()) => println!("rmmod perfmon: ok"),
            Err(e) => {
                println!("rmmod perfmon: {e}");
                bad = true;
            }
        }
    }
    println!(
        "pfm_fuzz: {} (seed {})",
        if bad { "FAILED" } else { "done" },
        cfg.seed
    );
    std::process::exit(if bad { 1 } else { 0 });
}
