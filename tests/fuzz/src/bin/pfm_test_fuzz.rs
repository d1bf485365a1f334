//! pfm_test_fuzz: the fixed-seed fuzz run of `make check` (issue 8).
//!
//! Loads perfmon.ko itself (soft PMU, 16-bit counters so that the 64-bit
//! folding runs all the time), runs the fuzzer for 100,000 operations with
//! a fixed seed, then checks that no process hung, that no result broke the
//! ABI's rules, that overflow interrupts were exercised, that every context,
//! zombie and attachment is gone (bounded wait) and that rmmod succeeds. The
//! harness adds the kernel splat scan and kmemleak.
//!
//! PFM_FUZZ_OPS and PFM_FUZZ_SEED override the operation count and seed.

use std::time::Duration;

use pfm_fuzz::fuzz::{self, Config};
use pfm_fuzz::guest::{self, Counters};
use pfm_fuzz::tap::{diag, Tap};

const SEED: u64 = 0x5eed_0008;
const OPS: u64 = 100_000;

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let mut tap = Tap::new(6);
    let cfg = Config {
        seed: env_num("PFM_FUZZ_SEED", SEED),
        ops: env_num("PFM_FUZZ_OPS", OPS),
        progress_secs: 30,
        ..Config::default()
    };
    diag(format!(
        "seed {} ops {} procs {} threads {} (replay: pfm_fuzz --seed {} --ops {} --procs {} --threads {})",
        cfg.seed, cfg.ops, cfg.procs, cfg.threads, cfg.seed, cfg.ops, cfg.procs, cfg.threads
    ));
    if let Err(e) = guest::insmod(&["pmu=soft", "soft_width=16"]) {
        tap.result("insmod perfmon.ko pmu=soft soft_width=16", Err(e.clone()));
        tap.bail_out(e);
    }
    tap.result("insmod perfmon.ko pmu=soft soft_width=16", Ok(()));
    let irqs_before = Counters::read().interrupts.unwrap_or(0);
    let report = fuzz::run(&cfg);
    diag(report.summary());
    let hung = report.hung.clone();
    tap.result(
        &format!("{} operations, every process killed and reaped", report.ops),
        if !hung.is_empty() {
            Err(format!(
                "{} processes could not be killed:\n{}",
                hung.len(),
                hung.join("\n")
            ))
        } else if report.ops < cfg.ops {
            Err(format!("only {} of {} operations ran", report.ops, cfg.ops))
        } else {
            Ok(())
        },
    );
    tap.result(
        "every result followed the ABI's rules",
        if report.anomaly_count == 0 {
            Ok(())
        } else {
            Err(format!(
                "{} anomalies, the first ones:\n{}",
                report.anomaly_count,
                report.anomalies.join("\n")
            ))
        },
    );
    let irqs = Counters::read()
        .interrupts
        .unwrap_or(0)
        .saturating_sub(irqs_before);
    tap.result(
        "overflow interrupts were exercised",
        if irqs > 0 {
            Ok(())
        } else {
            Err("overflow_interrupts did not move".into())
        },
    );
    diag(format!("overflow interrupts during the run: {irqs}"));
    tap.result(
        "live_contexts, zombie_contexts and attached_threads back to 0",
        guest::wait_idle(Duration::from_secs(15))
            .map(|t| diag(format!("drained {} ms after the run", t.as_millis()))),
    );
    tap.result("rmmod perfmon", guest::rmmod(Duration::from_secs(5)));
    tap.finish();
}
