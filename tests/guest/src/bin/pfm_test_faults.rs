//! pfm_test_faults: the soft model's page-fault events (`page-faults`,
//! `minor-faults`, `major-faults`) against what the monitored thread
//! counts itself, `getrusage(RUSAGE_THREAD)`'s `ru_minflt` and
//! `ru_majflt` (the same `min_flt`/`maj_flt` the module reads, but read by
//! the thread through another system call), and perf's
//! `PERF_COUNT_SW_PAGE_FAULTS_MIN/MAJ` in the same guest:
//!
//! 1. self-monitoring, a thread that touches fresh pages and naps every
//!    16 pages (it sleeps and wakes): the counts over START..STOP lie
//!    between the thread's own counts read just inside the window and just
//!    outside it (the calls between are warm: equal in practice, and the
//!    test says when they were); perf's minor faults, enabled around the
//!    window, within the outer bracket and not below perfmon's;
//! 2. another thread, monitored while it blocks at each report: at every
//!    blocked edge the counts equal its own exactly (it reports its own
//!    counts, then blocks on a pipe, having taken no fault between: every
//!    call on that path is warmed by a first round before the LOAD);
//!    a STOPped window adds nothing, START resumes;
//! 3. a page-faults PMD sampled every 64 faults into a buffer: entries +
//!    lost = the periods crossed by the faults a second PMD counted;
//! 4. the counter page marks the fault PMDs stale (a reader must take the
//!    system call: the page cannot extend them), and the user library's
//!    `read_mapped` agrees with `READ_VALUES`;
//! 5. a whole program (`PFM_CTXFL_INHERIT`): a thread created while the
//!    context counts is counted from its creation, as it counts itself:
//!    its READ_THREADS row, read while it blocks after reporting its own
//!    counts, equals them exactly; the same for a forked process (glibc's
//!    `fork` asks for `CLONE_CHILD_SETTID`, whose write in the child's
//!    `schedule_tail` is a copy-on-write fault before its first
//!    instruction: counted, as the child counts it).
//!
//! Major faults need I/O, which an initramfs guest without swap has none
//! of: both sides read 0 here, and the test checks that they agree.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use perfmon::abi::*;
use perfmon::perf::{PerfCounter, SoftwareEvent};
use perfmon::Context;
use pfm_guest::tap::diag;
use pfm_guest::{ensure, module, ResultExt, Tap, TestResult};

const PLAN: usize = 9;
const PAGE: usize = 4096;
/// Fresh pages a thread touches between naps.
const PER_NAP: usize = 16;
/// The sampling period, in faults.
const PERIOD: u64 = 64;

/// The calling thread's (minor, major) faults, as it counts them.
fn own_faults() -> [u64; 2] {
    // SAFETY: A zeroed rusage is valid; getrusage writes within it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is valid for writes.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    [ru.ru_minflt as u64, ru.ru_majflt as u64]
}

/// Touches `pages` fresh anonymous pages (one write fault each), napping
/// 200 us every [`PER_NAP`] pages; unmaps them.
fn touch_fresh(pages: usize) -> TestResult {
    let len = pages.max(1) * PAGE;
    // SAFETY: An anonymous private mapping of `len` bytes, ours alone.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    ensure!(p != libc::MAP_FAILED, "mmap of {pages} pages failed");
    let nap = libc::timespec {
        tv_sec: 0,
        tv_nsec: 200_000,
    };
    for i in 0..pages {
        // SAFETY: Within the mapping, writable.
        unsafe { std::ptr::write_volatile(p.cast::<u8>().add(i * PAGE), 1) };
        if i % PER_NAP == PER_NAP - 1 {
            // SAFETY: `nap` is valid.
            unsafe { libc::nanosleep(&nap, std::ptr::null_mut()) };
        }
    }
    // SAFETY: The mapping made above.
    unsafe { libc::munmap(p, len) };
    Ok(())
}

/// A context counting page-faults (PMD 0), minor-faults (1) and
/// major-faults (2); PMD 0 from `pmd0`.
fn fault_context(pmd0: u64) -> Result<Context, String> {
    let ctx = Context::open().ctx("open")?;
    let events = [
        PFM_SOFT_EV_PAGE_FAULTS,
        PFM_SOFT_EV_MINOR_FAULTS,
        PFM_SOFT_EV_MAJOR_FAULTS,
        PFM_SOFT_EV_PAGE_FAULTS,
    ];
    let mut pmcs: Vec<PfmPmc> = (0u16..)
        .zip(events)
        .map(|(n, ev)| PfmPmc {
            reg_num: n,
            reg_value: ev,
            ..Default::default()
        })
        .collect();
    ctx.write_pmcs(&mut pmcs).ctx("WRITE_PMCS")?;
    let mut pmds: Vec<PfmPmd> = (0u16..4)
        .map(|n| PfmPmd {
            reg_num: n,
            reg_value: if n == 0 { pmd0 } else { 0 },
            reg_short_reset: if n == 0 { pmd0 } else { 0 },
            reg_long_reset: if n == 0 { pmd0 } else { 0 },
            ..Default::default()
        })
        .collect();
    ctx.write_pmds(&mut pmds).ctx("WRITE_PMDS")?;
    Ok(ctx)
}

/// READ_PMDS of PMDs 0..4.
fn read4(ctx: &Context) -> Result<[u64; 4], String> {
    let mut regs: Vec<PfmPmd> = (0..4)
        .map(|i| PfmPmd {
            reg_num: i,
            ..Default::default()
        })
        .collect();
    ctx.read_pmds(&mut regs).ctx("READ_PMDS")?;
    Ok([
        regs[0].reg_value,
        regs[1].reg_value,
        regs[2].reg_value,
        regs[3].reg_value,
    ])
}

fn sub(a: [u64; 2], b: [u64; 2]) -> [u64; 2] {
    [a[0] - b[0], a[1] - b[1]]
}

/// Case 1.
fn self_window() -> TestResult {
    let ctx = fault_context(0)?;
    let perf = PerfCounter::open(SoftwareEvent::MinorFaults, 0).ctx("perf minor-faults")?;
    ctx.load(0).ctx("LOAD")?;
    // Warm every call of the window's edges (their code and data pages).
    for _ in 0..2 {
        let _ = own_faults();
        perf.enable().ctx("perf enable")?;
        ctx.start().ctx("START")?;
        let _ = own_faults();
        touch_fresh(1)?;
        let _ = own_faults();
        ctx.stop().ctx("STOP")?;
        perf.disable().ctx("perf disable")?;
        let _ = own_faults();
        perf.reset().ctx("perf reset")?;
        let mut zero: Vec<PfmPmd> = (0..4)
            .map(|n| PfmPmd {
                reg_num: n,
                ..Default::default()
            })
            .collect();
        ctx.write_pmds(&mut zero).ctx("WRITE_PMDS")?;
    }
    let outer0 = own_faults();
    perf.enable().ctx("perf enable")?;
    ctx.start().ctx("START")?;
    let inner0 = own_faults();
    touch_fresh(1000)?;
    let inner1 = own_faults();
    ctx.stop().ctx("STOP")?;
    perf.disable().ctx("perf disable")?;
    let outer1 = own_faults();
    let v = read4(&ctx)?;
    let p = perf.read().ctx("perf read")?.value;
    ctx.unload().ctx("UNLOAD")?;
    let (inner, outer) = (sub(inner1, inner0), sub(outer1, outer0));
    diag(format!(
        "perfmon page/minor/major {:?}; own inside {inner:?}, outside {outer:?}; perf minor {p}",
        &v[..3]
    ));
    ensure!(
        inner[0] >= 1000,
        "the thread counts {} minor faults for 1000 fresh pages",
        inner[0]
    );
    ensure!(
        v[0] == v[1] + v[2],
        "page-faults {} != minor {} + major {}",
        v[0],
        v[1],
        v[2]
    );
    ensure!(
        v[3] == v[0],
        "two page-faults PMDs differ: {} and {}",
        v[0],
        v[3]
    );
    for (k, name) in [(0, "minor"), (1, "major")] {
        let ours = v[k + 1];
        ensure!(
            (inner[k]..=outer[k]).contains(&ours),
            "{name} faults {ours} outside the thread's own [{}, {}]",
            inner[k],
            outer[k]
        );
    }
    if inner != outer {
        diag("the edges' calls faulted: the bracket, not equality, held");
    }
    ensure!(
        (v[1]..=outer[0]).contains(&p),
        "perf's minor faults {p} outside [perfmon's {}, the thread's own outer {}]",
        v[1],
        outer[0]
    );
    Ok(())
}

/// The monitored thread of case 2: reads a page count from `go`, touches
/// that many fresh pages (0: returns), reports its own counts and tid on
/// `report`, then blocks on `go` again.
fn remote_worker(go: OwnedFd, report: OwnedFd) {
    loop {
        let mut n = [0u8; 8];
        // SAFETY: `n` is valid for 8 bytes.
        let r = unsafe { libc::read(go.as_raw_fd(), n.as_mut_ptr().cast(), 8) };
        let pages = u64::from_ne_bytes(n);
        if r != 8 || pages == 0 {
            return;
        }
        if touch_fresh(pages as usize).is_err() {
            return;
        }
        let f = own_faults();
        let msg = [f[0], f[1], perfmon::process::gettid() as u64];
        // SAFETY: `msg` is 24 valid bytes.
        unsafe { libc::write(report.as_raw_fd(), msg.as_ptr().cast(), 24) };
    }
}

fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is valid for two ints.
    ensure!(unsafe { libc::pipe(fds.as_mut_ptr()) } == 0, "pipe failed");
    // SAFETY: Two new descriptors, ours alone.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// One round of the worker: `pages` pages; its report.
fn round(go: &OwnedFd, report: &OwnedFd, pages: u64) -> Result<[u64; 3], String> {
    let n = pages.to_ne_bytes();
    // SAFETY: `n` is 8 valid bytes.
    ensure!(
        unsafe { libc::write(go.as_raw_fd(), n.as_ptr().cast(), 8) } == 8,
        "write to the worker failed"
    );
    let mut msg = [0u64; 3];
    // SAFETY: `msg` is valid for 24 bytes.
    let r = unsafe { libc::read(report.as_raw_fd(), msg.as_mut_ptr().cast(), 24) };
    ensure!(r == 24, "the worker's report: {r} bytes");
    Ok(msg)
}

/// Waits until thread `tid` sleeps (its report written, it blocks on
/// `go`): its counts are final there.
fn wait_blocked(tid: u32) -> TestResult {
    let deadline = std::time::Instant::now() + pfm_guest::scaled(Duration::from_secs(10));
    while std::time::Instant::now() < deadline {
        if pfm_guest::child::proc_state(tid) == Some('S') {
            return Ok(());
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Err(format!(
        "thread {tid} did not block on its pipe within 10 s"
    ))
}

/// Case 2.
fn remote_blocked_edges() -> TestResult {
    let (go_r, go_w) = pipe()?;
    let (rep_r, rep_w) = pipe()?;
    let worker = std::thread::spawn(move || remote_worker(go_r, rep_w));
    let result = (|| {
        // The warm-up round: every call on the report path has run once.
        let w = round(&go_w, &rep_r, 2)?;
        let tid = w[2] as u32;
        wait_blocked(tid)?;
        let ctx = fault_context(0)?;
        ctx.load(tid).ctx("LOAD")?;
        ctx.start().ctx("START")?;
        let base = [w[0], w[1]];
        let mut expect = [0u64; 2];
        let mut last = base;
        for (pages, counting) in [(300, true), (500, true), (100, false), (50, true)] {
            if !counting {
                ctx.stop().ctx("STOP")?;
            }
            let r = round(&go_w, &rep_r, pages)?;
            wait_blocked(tid)?;
            let own = [r[0], r[1]];
            if counting {
                let d = sub(own, last);
                expect = [expect[0] + d[0], expect[1] + d[1]];
            }
            last = own;
            let v = read4(&ctx)?;
            diag(format!(
                "{pages} pages{}: perfmon {:?}, the thread's own since LOAD {:?}, counted windows {expect:?}",
                if counting { "" } else { " stopped" },
                &v[..3],
                sub(own, base)
            ));
            ensure!(
                [v[1], v[2]] == expect && v[0] == expect[0] + expect[1],
                "at a blocked edge after {pages} pages: perfmon {:?}, the thread's own {expect:?}",
                &v[..3]
            );
            if !counting {
                ctx.start().ctx("START")?;
            }
        }
        ctx.unload().ctx("UNLOAD")?;
        Ok(())
    })();
    let _ = round(&go_w, &rep_r, 0);
    drop(go_w);
    let _ = worker.join();
    result
}

/// Case 3.
fn sampled_faults() -> TestResult {
    let ctx = fault_context(PERIOD.wrapping_neg())?;
    ctx.setup_sampling(4, &[(0, 1 << 3)], true, 0)
        .ctx("SMPL_SETUP")?;
    let mut buf = ctx.map_samples(4).ctx("mmap of the buffer")?;
    ctx.load(0).ctx("LOAD")?;
    ctx.start().ctx("START")?;
    touch_fresh(2000)?;
    ctx.stop().ctx("STOP")?;
    let v = read4(&ctx)?;
    let entries = buf.take();
    let lost = buf.stats().lost;
    ctx.unload().ctx("UNLOAD")?;
    let periods = v[3] / PERIOD;
    diag(format!(
        "{} faults counted, {periods} periods of {PERIOD}: {} entries, {lost} lost",
        v[3],
        entries.len()
    ));
    ensure!(v[3] >= 2000, "{} faults for 2000 fresh pages", v[3]);
    ensure!(
        entries.len() as u64 + lost == periods,
        "{} entries + {lost} lost for {periods} periods",
        entries.len()
    );
    for e in &entries {
        ensure!(
            e.ovfl_pmd == 0 && e.ip != 0,
            "entry of PMD {} at IP {:#x}",
            e.ovfl_pmd,
            e.ip
        );
    }
    Ok(())
}

/// The READ_THREADS row of `tid` (`what`, for the messages): its
/// page-faults, minor and major equal the thread's own `own` (minor,
/// major) since its creation, exactly.
fn row_equals_own(ctx: &Context, what: &str, tid: u32, own: [u64; 2]) -> TestResult {
    let rows = ctx.read_threads(0b111).ctx("READ_THREADS")?;
    let row = rows
        .rows
        .iter()
        .find(|row| row.tid == tid)
        .ok_or_else(|| format!("no row for {what}"))?;
    let v = (row.value(0), row.value(1), row.value(2));
    diag(format!(
        "{what}: perfmon page/minor/major {v:?}; its own since its creation {own:?}"
    ));
    ensure!(
        v == (Some(own[0] + own[1]), Some(own[0]), Some(own[1])),
        "{what}: perfmon {v:?}, its own minor {} major {}",
        own[0],
        own[1]
    );
    Ok(())
}

/// Case 5.
fn inherited_thread() -> TestResult {
    let ctx = fault_context(0)?;
    ctx.set_flags(PFM_CTXFL_INHERIT).ctx("SET_FLAGS INHERIT")?;
    ctx.load(0).ctx("LOAD")?;
    ctx.start().ctx("START")?;
    let (go_r, go_w) = pipe()?;
    let (rep_r, rep_w) = pipe()?;
    // Born counted: its whole life is its own count.
    let worker = std::thread::spawn(move || remote_worker(go_r, rep_w));
    let result = (|| {
        let r = round(&go_w, &rep_r, 400)?;
        let tid = r[2] as u32;
        wait_blocked(tid)?;
        row_equals_own(&ctx, &format!("thread {tid}"), tid, [r[0], r[1]])
    })();
    let _ = round(&go_w, &rep_r, 0);
    drop(go_w);
    let _ = worker.join();
    ctx.stop().ctx("STOP")?;
    ctx.unload().ctx("UNLOAD")?;
    result
}

/// Case 5, a forked process: the child touches 300 pages, reports its
/// own counts and blocks; its row must equal them.
fn forked_process() -> TestResult {
    let ctx = fault_context(0)?;
    ctx.set_flags(PFM_CTXFL_INHERIT).ctx("SET_FLAGS INHERIT")?;
    ctx.load(0).ctx("LOAD")?;
    ctx.start().ctx("START")?;
    let (go_r, go_w) = pipe()?;
    let (rep_r, rep_w) = pipe()?;
    // SAFETY: The child only makes system calls and writes memory of its
    // own (async-signal-safe), then exits with `_exit`.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let ok = touch_fresh(300).is_ok();
        let f = own_faults();
        let msg = [f[0], f[1], u64::from(ok)];
        // SAFETY: 24 valid bytes; then one byte read into `b`.
        unsafe {
            libc::write(rep_w.as_raw_fd(), msg.as_ptr().cast(), 24);
            let mut b = 0u8;
            libc::read(go_r.as_raw_fd(), (&mut b as *mut u8).cast(), 1);
            libc::_exit(0);
        }
    }
    ensure!(pid > 0, "fork failed");
    let result = (|| {
        let mut msg = [0u64; 3];
        // SAFETY: `msg` is valid for 24 bytes.
        let r = unsafe { libc::read(rep_r.as_raw_fd(), msg.as_mut_ptr().cast(), 24) };
        ensure!(
            r == 24 && msg[2] == 1,
            "the child's report: {r} bytes, {msg:?}"
        );
        wait_blocked(pid as u32)?;
        row_equals_own(
            &ctx,
            &format!("process {pid}"),
            pid as u32,
            [msg[0], msg[1]],
        )
    })();
    // SAFETY: One byte from a valid buffer; then the child is reaped.
    unsafe {
        libc::write(go_w.as_raw_fd(), [1u8].as_ptr().cast(), 1);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    ctx.stop().ctx("STOP")?;
    ctx.unload().ctx("UNLOAD")?;
    result
}

/// Case 4.
fn page_marks_faults_stale() -> TestResult {
    let ctx = fault_context(0)?;
    let page = ctx.map_counter_page().ctx("mmap of the counter page")?;
    ctx.load(0).ctx("LOAD")?;
    ctx.start().ctx("START")?;
    // Warm both reads (their code, their result buffers' pages).
    let _ = ctx.read_mapped(0b1111).ctx("read_mapped")?;
    let _ = ctx.read_values(0b1111).ctx("READ_VALUES")?;
    touch_fresh(100)?;
    let reading = page.read(0b1111);
    let mapped = ctx.read_mapped(0b1111).ctx("read_mapped")?;
    let sys = ctx.read_values(0b1111).ctx("READ_VALUES")?;
    ctx.stop().ctx("STOP")?;
    ctx.unload().ctx("UNLOAD")?;
    let reading = reading.ok_or("the page kept changing under its reader")?;
    ensure!(
        reading.counting() && !reading.exact(),
        "a running thread's page with fault PMDs reads as exact (counting {})",
        reading.counting()
    );
    ensure!(
        mapped.values == sys.values && sys.values[1] >= 100,
        "read_mapped {:?} vs READ_VALUES {:?}",
        mapped.values,
        sys.values
    );
    Ok(())
}

fn main() {
    pfm_guest::child::dispatch();
    let mut t = Tap::new(PLAN);
    pfm_guest::watchdog(Duration::from_secs(120));
    t.require("insmod perfmon.ko", module::insmod(&[]));
    t.run(
        "self, 1000 fresh pages with naps: minor/major within the thread's own getrusage at the window's edges, page-faults their sum, perf's minor faults bracketed",
        self_window,
    );
    t.run(
        "another thread at blocked edges: equal to its own getrusage exactly, nothing while STOPped",
        remote_blocked_edges,
    );
    t.run(
        "page-faults sampled every 64: entries + lost = the periods crossed",
        sampled_faults,
    );
    t.run(
        "counter page: fault PMDs stale (the system call reads them), read_mapped agrees",
        page_marks_faults_stale,
    );
    t.run(
        "a thread born into a whole program: its row equals its own getrusage from its creation",
        inherited_thread,
    );
    t.run(
        "a process forked in a whole program: its row equals its own getrusage from the fork (the CLONE_CHILD_SETTID fault too)",
        forked_process,
    );
    t.run("no live context left (sysfs)", || {
        module::wait_contexts(0, Duration::from_secs(2))
    });
    t.run("rmmod perfmon", module::rmmod);
    t.finish();
}
