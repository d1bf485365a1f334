//! pfm_test_memlock: sampling buffers are locked memory, charged as perf
//! charges its ring buffers (issue 32, item 3; Documentation/perfmon.rst,
//! "Permissions"), with perf itself as the oracle in the same guest: the
//! user's share of `kernel.perf_event_mlock_kb` (per online CPU), then the
//! process's pinned memory (`VmPin` in `/proc/self/status`) held to
//! `RLIMIT_MEMLOCK`, `EPERM` past it, `CAP_IPC_LOCK` exempt. Runs as root;
//! the tools are forked children that drop to uid 1000 (pfmuser) and set
//! `RLIMIT_MEMLOCK` to 64 KiB (16 pages).
//!
//! 1. The largest buffer (1024 data pages and the header: 1025 pages,
//!    beyond the default allowance plus 16 pages) is refused with `EPERM`,
//!    as perf refuses a ring of 1024 data pages; the refused context has
//!    no buffer (`mmap`: `ENODEV`) and nothing stays pinned.
//! 2. 64-page buffers (65 pages), one after the other: as many fit as
//!    perf's 64-page rings, the number perf's arithmetic gives, with the
//!    same `VmPin`; all closed, `VmPin` is 0 and as many fit again.
//! 3. `perf_event_mlock_kb` 0 (no allowance: every page pinned): three
//!    buffers of 4 data pages (5 pages with the header: 15 of the 16) fit,
//!    the fourth is refused, as perf's 4-page rings; `VmPin` 60 kB, 0 after.
//! 4. The charge lives with the pages, once: setup charges 20 kB, an
//!    `mmap`, an `munmap` and a second `mmap` charge nothing more, nor does
//!    a clone (which has no buffer); the context closed while mapped keeps
//!    the charge until the `munmap`, which gives it back.
//! 5. A whole program's heirs share the root's one charge: a self-LOADed
//!    `INHERIT` context whose thread starts 4 threads stays at 20 kB; after
//!    the close, once every heir is gone, `VmPin` is 0.
//! 6. Root (`CAP_IPC_LOCK`) is exempt: with `RLIMIT_MEMLOCK` 64 KiB and no
//!    allowance, the 1025-page buffer is set up, as perf's 1024-page ring
//!    is mapped, each pinning 4,100 kB as perf does; 0 after.
//!
//! Before the charge existed, the buffers were refused nowhere and `VmPin`
//! stayed 0: cases 1 to 6 failed.

use std::time::{Duration, Instant};

use perfmon::abi::*;
use perfmon::perf::{PerfSampler, SoftwareEvent};
use perfmon::{Context, SampleBuffer};
use pfm_guest::child::{run_self, CHILD_FLAG};
use pfm_guest::tap::diag;
use pfm_guest::{ensure, module, raw, ResultExt, Tap, TestResult};

const PLAN: usize = 9;
/// The tools' `RLIMIT_MEMLOCK`, KiB.
const LIMIT_KB: u64 = 64;
const MLOCK_KB: &str = "/proc/sys/kernel/perf_event_mlock_kb";
const PARANOID: &str = "/proc/sys/kernel/perf_event_paranoid";
const EPERM: i32 = libc::EPERM;
const ENODEV: i32 = libc::ENODEV;

/// `VmPin` of this process, kB (-1: unreadable).
fn vmpin_kb() -> i64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmPin:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(-1)
}

fn err_of<T>(r: &perfmon::Result<T>) -> i32 {
    match r {
        Ok(_) => 0,
        Err(e) => e.errno().unwrap_or(-1),
    }
}

/// Drops to `uid` (root stays root) with `RLIMIT_MEMLOCK` at `limit_kb`.
fn become_limited(uid: u32, limit_kb: u64) -> Result<(), String> {
    let lim = libc::rlimit {
        rlim_cur: limit_kb << 10,
        rlim_max: limit_kb << 10,
    };
    // SAFETY: a valid rlimit structure.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) } != 0 {
        return Err(format!("setrlimit: errno {}", raw::errno()));
    }
    if uid != 0 {
        raw::become_user(uid, uid).map_err(|e| format!("setuid {uid}: errno {e}"))?;
        // Dropping from root left the process undumpable, which a uid-1000
        // tool may not monitor; a real one is dumpable.
        // SAFETY: PR_SET_DUMPABLE takes an integer.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1) };
    }
    Ok(())
}

/// A context with a sampling buffer of `pages` data pages (drop policy),
/// set up; the setup's errno if refused (the context kept for a look).
fn smpl_context(pages: u32) -> (Option<Context>, i32) {
    let ctx = match Context::open() {
        Ok(c) => c,
        Err(e) => return (None, e.errno().unwrap_or(-1)),
    };
    let r = ctx.setup_sampling(pages, &[], true, 0);
    (Some(ctx), err_of(&r))
}

/// perfmon's buffers of `pages` pages, set up and mapped, one after the
/// other until one is refused or `max` are held; then perf's rings of
/// as many pages; then perfmon's again. Prints what each got.
fn seq(prefix: &str, pages: u32, max: usize) -> String {
    let mut out = String::new();
    // perfmon
    let mut held: Vec<(Context, SampleBuffer)> = Vec::new();
    let mut err = 0;
    let mut refused_mmap = 0;
    while held.len() < max {
        match smpl_context(pages) {
            (Some(ctx), 0) => match ctx.map_samples(pages) {
                Ok(b) => held.push((ctx, b)),
                Err(e) => {
                    err = 1000 + e.errno().unwrap_or(-1);
                    break;
                }
            },
            (ctx, e) => {
                err = e;
                // The refused context has no buffer.
                refused_mmap = ctx.map_or(-1, |c| err_of(&c.map_samples(pages)));
                break;
            }
        }
    }
    out += &format!(
        "{prefix}_n={} {prefix}_err={err} {prefix}_refused_mmap={refused_mmap} {prefix}_vmpin={} ",
        held.len(),
        vmpin_kb()
    );
    drop(held);
    out += &format!("{prefix}_vmpin_after={} ", vmpin_kb());
    out
}

fn perf_seq(pages: u32, max: usize) -> String {
    let mut held = Vec::new();
    let mut err = 0;
    while held.len() < max {
        match PerfSampler::open(SoftwareEvent::TaskClock, 0, 1_000_000, pages as usize) {
            Ok(s) => held.push(s),
            Err(e) => {
                err = e.errno().unwrap_or(-1);
                break;
            }
        }
    }
    let mut out = format!(
        "perf_n={} perf_err={err} perf_vmpin={} ",
        held.len(),
        vmpin_kb()
    );
    drop(held);
    out += &format!("perf_vmpin_after={} ", vmpin_kb());
    out
}

/// Child mode `memlock-seq UID LIMIT_KB PAGES MAX`.
fn seq_child(uid: u32, limit_kb: u64, pages: u32, max: usize) -> i32 {
    if let Err(e) = become_limited(uid, limit_kb) {
        println!("error={e}");
        return 3;
    }
    let mut out = seq("pfm", pages, max);
    out += &perf_seq(pages, max);
    out += &seq("pfm2", pages, max);
    println!("{}", out.trim());
    0
}

/// Child mode `memlock-life`: uid 1000, no allowance (the parent set
/// `perf_event_mlock_kb` 0), a 4-page buffer's charge through its life.
fn life_child() -> i32 {
    if let Err(e) = become_limited(1000, LIMIT_KB) {
        println!("error={e}");
        return 3;
    }
    let r = (|| -> Result<String, String> {
        let mut out = String::new();
        let (ctx, e) = smpl_context(4);
        let ctx = ctx.ok_or("open")?;
        ensure!(e == 0, "setup: errno {e}");
        out += &format!("setup={} ", vmpin_kb());
        let buf = ctx.map_samples(4).ctx("mmap")?;
        out += &format!("mapped={} ", vmpin_kb());
        drop(buf);
        out += &format!("unmapped={} ", vmpin_kb());
        let buf = ctx.map_samples(4).ctx("second mmap")?;
        out += &format!("remapped={} ", vmpin_kb());
        let clone = ctx.clone_programmed().ctx("CLONE")?;
        out += &format!("cloned={} ", vmpin_kb());
        drop(clone);
        drop(ctx);
        out += &format!("closed_mapped={} ", vmpin_kb());
        drop(buf);
        out += &format!("closed_unmapped={} ", vmpin_kb());
        Ok(out)
    })();
    match r {
        Ok(out) => println!("{}", out.trim()),
        Err(e) => println!("error={e}"),
    }
    0
}

/// Child mode `memlock-heirs`: uid 1000, no allowance; a self-LOADed
/// `INHERIT` context with a 4-page buffer; 4 threads.
fn heirs_child() -> i32 {
    if let Err(e) = become_limited(1000, LIMIT_KB) {
        println!("error={e}");
        return 3;
    }
    let r = (|| -> Result<String, String> {
        let mut out = String::new();
        let ctx = Context::open().ctx("open")?;
        ctx.write_pmcs(&mut [PfmPmc {
            reg_num: 0,
            reg_value: PFM_SOFT_EV_CONTEXT_SWITCHES,
            ..Default::default()
        }])
        .ctx("WRITE_PMCS")?;
        ctx.setup_sampling(4, &[], true, 0).ctx("SMPL_SETUP")?;
        let buf = ctx.map_samples(4).ctx("mmap")?;
        ctx.set_flags(PFM_CTXFL_INHERIT).ctx("SET_FLAGS")?;
        ctx.load_and_start(0).ctx("LOAD|START")?;
        out += &format!("root={} ", vmpin_kb());
        // Each thread reports, then lives on until the tool has looked.
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let tx = tx.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(2));
                    let _ = tx.send(());
                    std::thread::sleep(Duration::from_millis(300));
                })
            })
            .collect();
        for _ in 0..4 {
            rx.recv_timeout(Duration::from_secs(10))
                .map_err(|e| format!("thread: {e}"))?;
        }
        let (rows, lost) = ctx
            .read_threads(1)
            .map_or((0, 0), |r| (r.rows.len(), r.lost_threads));
        out += &format!("rows={rows} lost={lost} heirs={} ", vmpin_kb());
        for t in threads {
            let _ = t.join();
        }
        out += &format!("joined={} ", vmpin_kb());
        let _ = ctx.unload();
        drop(buf);
        drop(ctx);
        // The heirs go with their threads' cleanups: wait for them.
        let deadline = Instant::now() + Duration::from_secs(10);
        while vmpin_kb() != 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        out += &format!("closed={} ", vmpin_kb());
        Ok(out)
    })();
    match r {
        Ok(out) => println!("{}", out.trim()),
        Err(e) => println!("error={e}"),
    }
    0
}

fn own_dispatch() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) != Some(CHILD_FLAG) {
        return;
    }
    let num = |i: usize| args.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    let code = match args.get(2).map(String::as_str) {
        Some("memlock-seq") => seq_child(num(3) as u32, num(4), num(5) as u32, num(6) as usize),
        Some("memlock-life") => life_child(),
        Some("memlock-heirs") => heirs_child(),
        _ => return,
    };
    std::process::exit(code);
}

fn num(text: &str, key: &str) -> Result<i64, String> {
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("no {key}= in {text:?}"))
}

fn write_sysctl(path: &str, v: &str) -> TestResult {
    std::fs::write(path, v).ctx(path)
}

/// Runs `f` with `perf_event_mlock_kb` at `kb`, then puts it back.
fn with_mlock_kb(kb: i64, f: impl FnOnce() -> TestResult) -> TestResult {
    let before = std::fs::read_to_string(MLOCK_KB).ctx("read perf_event_mlock_kb")?;
    write_sysctl(MLOCK_KB, &kb.to_string())?;
    let r = f();
    write_sysctl(MLOCK_KB, before.trim())?;
    r
}

fn online_cpus() -> i64 {
    // SAFETY: no preconditions.
    unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as i64
}

/// How many buffers of `pages` pages (with the header) perf's arithmetic
/// gives a user with `allowance` pages and `limit` pinned pages, and what
/// they pin.
fn perf_fits(pages: i64, allowance: i64, limit: i64, max: i64) -> (i64, i64) {
    let (mut user, mut pinned, mut n) = (0, 0, 0);
    while n < max {
        let after = user.min(allowance) + pages;
        let extra = (after - allowance).max(0);
        if pinned + extra > limit {
            break;
        }
        user += pages - extra;
        pinned += extra;
        n += 1;
    }
    (n, pinned)
}

fn largest_refused() -> TestResult {
    let out = run_child(
        &["memlock-seq", "1000", "64", "1024", "1"],
        Duration::from_secs(60),
    )?;
    ensure!(
        num(&out, "perf_n")? == 0 && num(&out, "perf_err")? == EPERM as i64,
        "perf's oracle did not refuse its 1024-page ring with EPERM: {out}"
    );
    ensure!(
        num(&out, "pfm_n")? == 0 && num(&out, "pfm_err")? == EPERM as i64,
        "a 1025-page buffer over RLIMIT_MEMLOCK 64 KiB: expected EPERM as perf, got n={} errno {}",
        num(&out, "pfm_n")?,
        num(&out, "pfm_err")?
    );
    ensure!(
        num(&out, "pfm_refused_mmap")? == ENODEV as i64,
        "the refused context has a buffer (mmap errno {}, expected ENODEV)",
        num(&out, "pfm_refused_mmap")?
    );
    ensure!(
        num(&out, "pfm_vmpin")? == 0 && num(&out, "pfm_vmpin_after")? == 0,
        "pinned memory left after the refusal: {out}"
    );
    Ok(())
}

fn allowance_as_perf() -> TestResult {
    let kb: i64 = std::fs::read_to_string(MLOCK_KB)
        .ctx("read perf_event_mlock_kb")?
        .trim()
        .parse()
        .ctx("parse perf_event_mlock_kb")?;
    let allowance = (kb >> 2) * online_cpus();
    let max = 64;
    let (n, pinned) = perf_fits(65, allowance, (LIMIT_KB as i64) >> 2, max);
    diag(format!(
        "perf_event_mlock_kb {kb}, {} CPUs: allowance {allowance} pages; perf's arithmetic: {n} buffers of 65 pages, {} kB pinned",
        online_cpus(),
        pinned * 4
    ));
    let out = run_child(
        &["memlock-seq", "1000", "64", "64", "64"],
        Duration::from_secs(120),
    )?;
    ensure!(
        num(&out, "perf_n")? == n && num(&out, "perf_vmpin")? == pinned * 4,
        "perf's rings do not follow perf's arithmetic ({n}, {} kB): {out}",
        pinned * 4
    );
    ensure!(
        num(&out, "pfm_n")? == n
            && num(&out, "pfm_err")? == EPERM as i64
            && num(&out, "pfm_vmpin")? == num(&out, "perf_vmpin")?,
        "perfmon: {} buffers (errno {}, VmPin {} kB) where perf maps {n} rings (VmPin {} kB)",
        num(&out, "pfm_n")?,
        num(&out, "pfm_err")?,
        num(&out, "pfm_vmpin")?,
        num(&out, "perf_vmpin")?
    );
    ensure!(
        num(&out, "pfm_vmpin_after")? == 0
            && num(&out, "perf_vmpin_after")? == 0
            && num(&out, "pfm2_n")? == n
            && num(&out, "pfm2_vmpin_after")? == 0,
        "the charge was not given back at close: {out}"
    );
    Ok(())
}

fn no_allowance() -> TestResult {
    with_mlock_kb(0, || {
        let out = run_child(
            &["memlock-seq", "1000", "64", "4", "8"],
            Duration::from_secs(60),
        )?;
        ensure!(
            num(&out, "perf_n")? == 3 && num(&out, "perf_vmpin")? == 60,
            "perf's oracle: {out}"
        );
        ensure!(
            num(&out, "pfm_n")? == 3
                && num(&out, "pfm_err")? == EPERM as i64
                && num(&out, "pfm_vmpin")? == 60,
            "perfmon: {} buffers of 5 pages (errno {}, VmPin {} kB), expected 3 (EPERM, 60 kB) as perf",
            num(&out, "pfm_n")?,
            num(&out, "pfm_err")?,
            num(&out, "pfm_vmpin")?
        );
        ensure!(
            num(&out, "pfm_vmpin_after")? == 0
                && num(&out, "pfm2_n")? == 3
                && num(&out, "pfm2_vmpin_after")? == 0,
            "the charge was not given back at close: {out}"
        );
        Ok(())
    })
}

fn charge_follows_pages() -> TestResult {
    with_mlock_kb(0, || {
        let out = run_child(&["memlock-life"], Duration::from_secs(60))?;
        for key in [
            "setup",
            "mapped",
            "unmapped",
            "remapped",
            "cloned",
            "closed_mapped",
        ] {
            ensure!(
                num(&out, key)? == 20,
                "VmPin {} kB {key}, expected 20 (one 5-page buffer, charged once): {out}",
                num(&out, key)?
            );
        }
        ensure!(
            num(&out, "closed_unmapped")? == 0,
            "VmPin {} kB after the close and the last munmap, expected 0",
            num(&out, "closed_unmapped")?
        );
        Ok(())
    })
}

fn heirs_share() -> TestResult {
    with_mlock_kb(0, || {
        let out = run_child(&["memlock-heirs"], Duration::from_secs(60))?;
        ensure!(
            num(&out, "rows")? >= 5,
            "the threads were not inherited: {out}"
        );
        for key in ["root", "heirs", "joined"] {
            ensure!(
                num(&out, key)? == 20,
                "VmPin {} kB {key}, expected 20 (the root's one buffer): {out}",
                num(&out, key)?
            );
        }
        ensure!(
            num(&out, "closed")? == 0,
            "VmPin {} kB once the family is gone, expected 0",
            num(&out, "closed")?
        );
        Ok(())
    })
}

fn root_exempt() -> TestResult {
    with_mlock_kb(0, || {
        let out = run_child(
            &["memlock-seq", "0", "64", "1024", "1"],
            Duration::from_secs(60),
        )?;
        ensure!(
            num(&out, "perf_n")? == 1 && num(&out, "perf_vmpin")? == 4100,
            "perf's oracle: {out}"
        );
        ensure!(
            num(&out, "pfm_n")? == 1 && num(&out, "pfm_vmpin")? == 4100,
            "root: {} buffers of 1025 pages, VmPin {} kB; expected 1 and 4100 kB as perf",
            num(&out, "pfm_n")?,
            num(&out, "pfm_vmpin")?
        );
        ensure!(
            num(&out, "pfm_vmpin_after")? == 0 && num(&out, "pfm2_vmpin_after")? == 0,
            "the charge was not given back at close: {out}"
        );
        Ok(())
    })
}

/// [`run_self`], failing on a child that reports `error=`.
fn run_child(args: &[&str], timeout: Duration) -> Result<String, String> {
    let text = run_self(args, timeout)?;
    ensure!(!text.contains("error="), "{}", text.trim());
    Ok(text)
}

fn main() {
    own_dispatch();
    pfm_guest::child::dispatch();
    let mut t = Tap::new(PLAN);
    pfm_guest::watchdog(Duration::from_secs(600));
    if raw::geteuid() != 0 {
        t.bail_out("must run as root (the tools become uid 1000)");
    }
    t.require("insmod perfmon.ko", module::insmod(&[]));
    // perf as uid 1000 needs paranoid <= 1 (task-clock counts kernel
    // time); 1 is still "paranoid" for perf's RLIMIT_MEMLOCK check.
    let paranoid = std::fs::read_to_string(PARANOID).unwrap_or_else(|_| "2".into());
    t.require("perf_event_paranoid 1", write_sysctl(PARANOID, "1"));
    t.run(
        "uid 1000, RLIMIT_MEMLOCK 64 KiB: a 1025-page buffer is refused with EPERM as perf's ring; no buffer, nothing pinned",
        largest_refused,
    );
    t.run(
        "uid 1000: 65-page buffers fit as many as perf's rings (perf_event_mlock_kb per CPU, then RLIMIT_MEMLOCK), same VmPin; given back at close",
        allowance_as_perf,
    );
    t.run(
        "perf_event_mlock_kb 0: three 5-page buffers, the fourth EPERM, VmPin 60 kB, as perf; 0 after",
        no_allowance,
    );
    t.run(
        "the charge lives with the pages: mmap, munmap, mmap again, a clone charge nothing more; closed while mapped, given back at the munmap",
        charge_follows_pages,
    );
    t.run(
        "a whole program's heirs share the root's one charge, given back once the family is gone",
        heirs_share,
    );
    t.run(
        "root (CAP_IPC_LOCK) is exempt: a 1025-page buffer over RLIMIT_MEMLOCK 64 KiB, 4100 kB pinned as perf; 0 after",
        root_exempt,
    );
    let _ = write_sysctl(PARANOID, paranoid.trim());
    t.run("rmmod perfmon", module::rmmod);
    t.finish();
}
