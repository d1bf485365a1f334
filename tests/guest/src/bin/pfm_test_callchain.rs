//! pfm_test_callchain: user call chains in sampling entries
//! (Documentation/perfmon.rst, "Sampling", call chains).
//!
//! The code sampled is three functions written here in assembly, so that
//! their frames are known whatever the compiler does with the rest:
//! `pfm_chain_a` calls `pfm_chain_b`, which calls `pfm_chain_c`, each with
//! the standard frame (`push rbp; mov rbp, rsp`); `pfm_chain_c` loops, and
//! can nap in the loop (nanosleep) or run it with its frame pointer set to
//! a value of the test's choosing. The oracle is the code itself: an entry
//! whose IP is in `pfm_chain_c`'s loop must carry the return addresses
//! into `pfm_chain_b` and `pfm_chain_a` (the labels after their calls), in
//! that order, as its first two.
//!
//! - Task-clock sampled by the timer while the thread runs the loop (the
//!   walk in the timer's interrupt): every entry in the loop shows b, a;
//!   nearly all entries are in it. The header's `entry_size` is the ABI's
//!   rule for the depth.
//! - Context switches sampled at every switch, the loop napping (the walk
//!   at the switch-out, in the scheduler): exactly one entry per switch
//!   counted, each with the IP after the loop's `syscall` and the chain.
//! - Another thread of the process, monitored by the test's main thread.
//! - A depth of 1: the chain is b alone, `TRUNCATED`.
//! - Frame pointers that are not: misaligned, unmapped, `PROT_NONE`,
//!   a kernel address, a frame that points to itself. Each entry says
//!   `BROKEN` and keeps only what it could read (nothing, or the frame's
//!   own return address for the loop); no fault reaches the thread and the
//!   kernel stays quiet (the harness checks dmesg).
//! - Setup refusals: a depth above `PFM_SMPL_MAX_CHAIN`, non-zero `pad2`
//!   (EINVAL).

use std::time::Duration;

use perfmon::abi::*;
use perfmon::{Context, Sample, SampleBuffer};
use pfm_guest::frames::{code, iterations_per_ms, run_chain, run_chain_for_ms, Code};
use pfm_guest::tap::diag;
use pfm_guest::{ensure, module, work, ResultExt, Tap, TestResult};

const PLAN: usize = 8;

/// PMD 0 sampled (`event` every `period`), PMD 1 counting `total`; a
/// buffer recording chains of `depth`; not loaded.
fn chain_context(
    event: u64,
    period: u64,
    total: u64,
    depth: u32,
) -> Result<(Context, SampleBuffer), String> {
    let ctx = Context::open().ctx("open")?;
    let width = ctx.info().ctx("GET_INFO")?.counter_width;
    let mut pmcs = [
        PfmPmc {
            reg_num: 0,
            reg_value: event,
            ..Default::default()
        },
        PfmPmc {
            reg_num: 1,
            reg_value: total,
            ..Default::default()
        },
    ];
    ctx.write_pmcs(&mut pmcs).ctx("WRITE_PMCS")?;
    let minus_p = pfm_guest::minus_period(period, width);
    let mut pmds = [PfmPmd {
        reg_num: 0,
        reg_value: minus_p,
        reg_short_reset: minus_p,
        reg_long_reset: minus_p,
        ..Default::default()
    }];
    ctx.write_pmds(&mut pmds).ctx("WRITE_PMDS")?;
    let pages = 64;
    let mut setup = PfmSmplSetup {
        data_pages: pages,
        flags: PFM_SMPL_DROP,
        chain_depth: depth,
        ..Default::default()
    };
    setup.smpl_pmds[0] = 1 << 1;
    ctx.setup_sampling_with(&setup).ctx("SMPL_SETUP")?;
    let buf = ctx.map_samples(pages).ctx("mmap of the buffer")?;
    let want = (128 + 8 * depth as usize).next_power_of_two();
    ensure!(
        buf.entry_size() == want,
        "entry_size {} for depth {depth}, the ABI says {want}",
        buf.entry_size()
    );
    Ok((ctx, buf))
}

/// PMD 1's count (the total).
fn total(ctx: &Context) -> Result<u64, String> {
    let mut r = [PfmPmd {
        reg_num: 1,
        ..Default::default()
    }];
    ctx.read_pmds(&mut r).ctx("READ_PMDS")?;
    Ok(r[0].reg_value)
}

/// How the samples in the loop look: (in the loop, with the chain b, a
/// first, all).
fn tally(samples: &[Sample], c: &Code) -> (usize, usize, usize) {
    let in_loop: Vec<&Sample> = samples.iter().filter(|s| c.in_loop(s.entry.ip)).collect();
    let chained = in_loop
        .iter()
        .filter(|s| s.chain.get(..2) == Some(&[c.b_ret, c.a_ret][..]))
        .count();
    (in_loop.len(), chained, samples.len())
}

/// Every entry's chain length agrees with its entry and the depth.
fn check_lengths(samples: &[Sample], depth: u32) -> TestResult {
    for s in samples {
        ensure!(
            usize::from(s.entry.chain_len) == s.chain.len() && s.chain.len() <= depth as usize,
            "chain_len {} with {} addresses, depth {depth}: {s:?}",
            s.entry.chain_len,
            s.chain.len()
        );
        ensure!(
            s.entry.chain_flags & PFM_SMPL_CHAIN_NONE == 0,
            "no chain taken: {s:?}"
        );
    }
    Ok(())
}

const CLOCK_PERIOD: u64 = 1_000_000;
const DEPTH: u32 = 16;

/// Case 2: task-clock, the walk in the timer's interrupt.
fn timer_chains() -> TestResult {
    work::pin_to(0)?;
    let c = code();
    let per_ms = iterations_per_ms();
    let (ctx, mut buf) = chain_context(
        PFM_SOFT_EV_TASK_CLOCK,
        CLOCK_PERIOD,
        PFM_SOFT_EV_CONTEXT_SWITCHES,
        DEPTH,
    )?;
    ctx.load_and_start(0).ctx("LOAD|START")?;
    // 300 ms of its own CPU time: at least 300 periods of 1 ms.
    run_chain_for_ms(300, 0, per_ms);
    ctx.stop().ctx("STOP")?;
    let samples = buf.take_samples();
    ctx.unload().ctx("UNLOAD")?;
    let (in_loop, chained, all) = tally(&samples, &c);
    diag(format!(
        "{all} entries, {in_loop} in c's loop, {chained} of them with b, a; code {c:x?}; first {:x?}",
        samples.first()
    ));
    check_lengths(&samples, DEPTH)?;
    ensure!(all >= 200, "{all} entries for ~300 ms at 1 ms");
    ensure!(in_loop * 10 >= all * 9, "{in_loop} of {all} in the loop");
    ensure!(
        chained == in_loop,
        "{} entries in the loop without b, a first",
        in_loop - chained
    );
    Ok(())
}

/// Case 3: context switches, every one sampled: the walk at switch-out.
fn switch_chains() -> TestResult {
    work::pin_to(0)?;
    let c = code();
    let (ctx, mut buf) = chain_context(
        PFM_SOFT_EV_CONTEXT_SWITCHES,
        1,
        PFM_SOFT_EV_CONTEXT_SWITCHES,
        DEPTH,
    )?;
    let nap = libc::timespec {
        tv_sec: 0,
        tv_nsec: 200_000,
    };
    ctx.load_and_start(0).ctx("LOAD|START")?;
    // The thread's own counts at the loop's edges (inside the LOAD-STOP
    // window): a nap whose timer expires before `schedule()` does not
    // switch, so the naps bound nothing; the scheduler's own count does.
    let (own0, voluntary0) = (
        pfm_guest::edges::thread_switches(),
        pfm_guest::edges::thread_voluntary_switches(),
    );
    run_chain(200, 0, Some(&nap));
    let (own, voluntary) = (
        pfm_guest::edges::thread_switches() - own0,
        pfm_guest::edges::thread_voluntary_switches() - voluntary0,
    );
    ctx.stop().ctx("STOP")?;
    let switches = total(&ctx)?;
    let samples = buf.take_samples();
    let lost = buf.stats().lost;
    ctx.unload().ctx("UNLOAD")?;
    let (in_loop, chained, all) = tally(&samples, &c);
    diag(format!(
        "{switches} switches, {all} entries ({lost} lost), {in_loop} in c's loop, {chained} with b, a; the thread's own: {own} switches in the loop, {voluntary} of its 200 naps switched"
    ));
    check_lengths(&samples, DEPTH)?;
    ensure!(
        all as u64 == switches && lost == 0,
        "{all} entries + {lost} lost for {switches} switches"
    );
    ensure!(
        voluntary > 0,
        "none of the 200 naps switched: nothing was sampled at switch-out"
    );
    // The window holds the loop: at least every switch the thread saw in it.
    ensure!(
        switches >= own,
        "{switches} switches counted, the thread saw {own} in the loop alone"
    );
    // Every voluntary switch in the loop is a nap's (c's loop has no other
    // system call), taken at the IP after its syscall: in the loop. The
    // others (STOP's own ioctl, a preemption) are not judged.
    ensure!(
        in_loop as u64 >= voluntary,
        "{in_loop} entries in the loop for {voluntary} naps that switched"
    );
    ensure!(
        chained == in_loop,
        "{} entries in the loop without b, a first",
        in_loop - chained
    );
    Ok(())
}

/// Case 4: another thread of the process, monitored from this one.
fn other_thread_chains() -> TestResult {
    let c = code();
    let per_ms = iterations_per_ms();
    let (ctx, mut buf) = chain_context(
        PFM_SOFT_EV_TASK_CLOCK,
        CLOCK_PERIOD,
        PFM_SOFT_EV_CONTEXT_SWITCHES,
        DEPTH,
    )?;
    let (tx, rx) = std::sync::mpsc::channel::<u32>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let worker = std::thread::spawn(move || {
        let _ = tx.send(perfmon::process::gettid());
        let _ = go_rx.recv();
        run_chain_for_ms(200, 0, per_ms);
    });
    let tid = rx
        .recv_timeout(Duration::from_secs(5))
        .ctx("the worker's tid")?;
    ctx.load_and_start(tid).ctx("LOAD|START of the worker")?;
    let _ = go_tx.send(());
    worker
        .join()
        .map_err(|_| "the worker panicked".to_string())?;
    let samples = buf.take_samples();
    let _ = ctx.unload();
    let (in_loop, chained, all) = tally(&samples, &c);
    diag(format!(
        "worker {tid}: {all} entries, {in_loop} in c's loop, {chained} with b, a"
    ));
    check_lengths(&samples, DEPTH)?;
    ensure!(
        samples.iter().all(|s| s.entry.tid == tid),
        "an entry of another thread"
    );
    ensure!(in_loop >= 100, "{in_loop} entries in the loop of ~200 ms");
    ensure!(
        chained == in_loop,
        "{} entries in the loop without b, a first",
        in_loop - chained
    );
    Ok(())
}

/// Case 5: depth 1, the chain cut after b.
fn truncated_chains() -> TestResult {
    work::pin_to(0)?;
    let c = code();
    let per_ms = iterations_per_ms();
    let (ctx, mut buf) = chain_context(
        PFM_SOFT_EV_TASK_CLOCK,
        CLOCK_PERIOD,
        PFM_SOFT_EV_CONTEXT_SWITCHES,
        1,
    )?;
    ctx.load_and_start(0).ctx("LOAD|START")?;
    run_chain_for_ms(100, 0, per_ms);
    ctx.stop().ctx("STOP")?;
    let samples = buf.take_samples();
    ctx.unload().ctx("UNLOAD")?;
    check_lengths(&samples, 1)?;
    let in_loop: Vec<&Sample> = samples.iter().filter(|s| c.in_loop(s.entry.ip)).collect();
    diag(format!(
        "{} entries, {} in the loop",
        samples.len(),
        in_loop.len()
    ));
    ensure!(in_loop.len() >= 50, "{} entries in the loop", in_loop.len());
    for s in in_loop {
        ensure!(
            s.chain == [c.b_ret] && s.entry.chain_flags == PFM_SMPL_CHAIN_TRUNCATED,
            "depth 1: {s:?}"
        );
    }
    Ok(())
}

/// Case 6: frame pointers that do not lead to frames.
fn broken_chains() -> TestResult {
    work::pin_to(0)?;
    let c = code();
    let per_ms = iterations_per_ms();
    // SAFETY: A new anonymous mapping, never accessed by this program.
    let none = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    ensure!(none != libc::MAP_FAILED, "mmap PROT_NONE");
    // A frame whose caller's frame pointer is itself: one address read,
    // then the walk stops.
    let mut looped = Box::new([0u64; 2]);
    looped[0] = looped.as_ptr() as u64;
    looped[1] = 0x5eed;
    let cases: [(&str, u64, &[u64]); 5] = [
        ("misaligned", 0x1003, &[]),
        ("unmapped", 0x10000, &[]),
        ("PROT_NONE", none as u64, &[]),
        ("kernel address", 0xffff_8880_0000_0000, &[]),
        (
            "a frame pointing at itself",
            looped.as_ptr() as u64,
            &[0x5eed],
        ),
    ];
    let mut r = Ok(());
    for (name, bp, want) in cases {
        let (ctx, mut buf) = chain_context(
            PFM_SOFT_EV_TASK_CLOCK,
            CLOCK_PERIOD,
            PFM_SOFT_EV_CONTEXT_SWITCHES,
            DEPTH,
        )?;
        ctx.load_and_start(0).ctx("LOAD|START")?;
        run_chain_for_ms(50, bp, per_ms);
        ctx.stop().ctx("STOP")?;
        let samples = buf.take_samples();
        ctx.unload().ctx("UNLOAD")?;
        check_lengths(&samples, DEPTH)?;
        let in_loop: Vec<&Sample> = samples.iter().filter(|s| c.in_loop(s.entry.ip)).collect();
        let right = in_loop
            .iter()
            .filter(|s| s.chain == want && s.entry.chain_flags == PFM_SMPL_CHAIN_BROKEN)
            .count();
        diag(format!(
            "{name} ({bp:#x}): {} entries, {} in the loop, {right} BROKEN with {want:x?}; first {:x?}",
            samples.len(),
            in_loop.len(),
            in_loop.first()
        ));
        if in_loop.len() < 25 || right != in_loop.len() {
            r = Err(format!(
                "{name}: {right} of {} entries in the loop as expected",
                in_loop.len()
            ));
        }
    }
    // SAFETY: The mapping made above, unused since.
    unsafe { libc::munmap(none, 4096) };
    r
}

/// Case 7: setup refusals.
fn refusals() -> TestResult {
    let ctx = Context::open().ctx("open")?;
    for (name, f) in [
        (
            "depth PFM_SMPL_MAX_CHAIN + 1",
            (|s: &mut PfmSmplSetup| s.chain_depth = PFM_SMPL_MAX_CHAIN + 1)
                as fn(&mut PfmSmplSetup),
        ),
        ("depth u32::MAX", |s: &mut PfmSmplSetup| {
            s.chain_depth = u32::MAX
        }),
        ("pad2", |s: &mut PfmSmplSetup| s.pad2 = 1),
    ] {
        let mut s = PfmSmplSetup {
            data_pages: 1,
            ..Default::default()
        };
        f(&mut s);
        let e = ctx.setup_sampling_with(&s).err().and_then(|e| e.errno());
        ensure!(e == Some(libc::EINVAL), "{name}: {e:?}, not EINVAL");
    }
    // The deepest is accepted.
    let s = PfmSmplSetup {
        data_pages: 1,
        chain_depth: PFM_SMPL_MAX_CHAIN,
        ..Default::default()
    };
    ctx.setup_sampling_with(&s)
        .ctx("depth PFM_SMPL_MAX_CHAIN")?;
    let buf = ctx.map_samples(1).ctx("mmap")?;
    ensure!(
        buf.entry_size() == 1024,
        "entry_size {} for the deepest chains",
        buf.entry_size()
    );
    Ok(())
}

fn main() {
    pfm_guest::child::dispatch();
    let mut t = Tap::new(PLAN);
    pfm_guest::watchdog(Duration::from_secs(240));
    t.require("insmod perfmon.ko", module::insmod(&[]));
    t.run(
        "task-clock in the timer's interrupt: samples in c show b, a",
        timer_chains,
    );
    t.run(
        "context switches at switch-out: one entry per switch, each in c with b, a",
        switch_chains,
    );
    t.run(
        "another thread of the process, monitored from this one",
        other_thread_chains,
    );
    t.run("depth 1: b alone, TRUNCATED", truncated_chains);
    t.run(
        "frame pointers that are not: BROKEN, nothing read that is not a frame",
        broken_chains,
    );
    t.run("setup refusals: depth, padding", refusals);
    t.run("rmmod perfmon", module::rmmod);
    t.finish();
}
