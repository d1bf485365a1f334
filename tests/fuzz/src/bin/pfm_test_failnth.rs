//! pfm_test_failnth: every failure path of the module is clean (issue 12,
//! item 8), swept the way syzkaller does with `/proc/thread-self/fail-nth`:
//! for n = 1, 2, ... the n-th fault-injection site the calling thread
//! reaches (a slab or page allocation, or a user copy) fails, until the
//! call succeeds with no fault injected. Each failure must be a clean
//! errno that leaves nothing behind, and no kernel splat may appear.
//!
//! 1. Loading the module (`finit_module` of /lib/perfmon.ko) with
//!    `pmu=intel_arch_sim` (whose init has two more steps: the simulators'
//!    memory and ticks), then with `pmu=soft`: after each failed load the
//!    module, /dev/perfmon and /sys/kernel/perfmon are gone; the
//!    `intel_arch_sim` module is unloaded again, the soft one stays for:
//! 2. `open("/dev/perfmon")`: after a failure, live_contexts is back.
//! 3. `PFM_IOC_WRITE_PMCS` and 4. `PFM_IOC_WRITE_PMDS`.
//! 5. `PFM_IOC_LOAD` of the calling thread and 6. of another thread: after
//!    a failure the context is UNLOADED and nothing is attached; after the
//!    success it is UNLOADed again.
//! 7. A whole program's LOAD, from the open on (each round opens its own
//!    context, so that the family it leaves goes with its close):
//!    `PFM_CTXFL_INHERIT` on another thread, and `PFM_LOAD_PROCESS` of this
//!    process (its family, template, namespace reference, the process
//!    list and the walk of its threads); and `PFM_IOC_READ_THREADS` of the
//!    latter. After a failure, and after the success is closed, the
//!    counters are back.
//! 8. The module still works: a context on the calling thread and one on
//!    another thread count.
//! 9. The counters are back to 0 and `rmmod` succeeds.
//! 10. No kernel splat in the log during the sweeps (the harness also
//!    checks kmemleak afterwards; it counts, and does not fail on, the
//!    kernel's own leak when `kmem_cache_create` fails in
//!    `sysfs_slab_add`: Documentation/perfmon.rst, loading).
//!
//! Each path's number of fault-injection points is printed as a
//! diagnostic. `PFM_FAILNTH_VERBOSE=1` leaves the kernel's `verbose`
//! knobs alone, so that each injected fault logs its stack trace (where
//! in the kernel or the module each point is). Needs FAULT_INJECTION, FAILSLAB, FAIL_PAGE_ALLOC,
//! FAULT_INJECTION_DEBUG_FS and FAULT_INJECTION_USERCOPY (the debug
//! kernel); skipped elsewhere.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pfm_fuzz::ensure;
use pfm_fuzz::failnth::{sweep, FailNth, Kmsg, Knobs};
use pfm_fuzz::guest::{self, Counters};
use pfm_fuzz::pfm::{state_name, Ctx};
use pfm_fuzz::sys::{self, abi};
use pfm_fuzz::tap::{diag, Tap, TestResult};

/// Rounds per sweep at most (module loading reaches a few hundred sites).
const LIMIT: u32 = 5000;

/// The errnos an injected allocation or user-copy failure may give.
const CLEAN: &[i32] = &[libc::ENOMEM, libc::EFAULT];

const PLAN: usize = 13;

fn errno(e: i32) -> String {
    perfmon::errno_name(e).to_string()
}

/// The module is gone: not listed, no device, no sysfs directory.
fn module_gone() -> TestResult {
    ensure!(!guest::is_loaded(), "perfmon is still in /proc/modules");
    ensure!(
        !std::path::Path::new("/dev/perfmon").exists(),
        "/dev/perfmon exists"
    );
    ensure!(
        !std::path::Path::new("/sys/kernel/perfmon").exists(),
        "/sys/kernel/perfmon exists"
    );
    Ok(())
}

/// Sweeps loading the module with `params`; leaves it loaded.
fn sweep_load(fnth: &FailNth, ko: i32, params: &str) -> TestResult {
    let p = std::ffi::CString::new(params).map_err(|e| e.to_string())?;
    module_gone().map_err(|e| format!("before the sweep: {e}"))?;
    let t = std::time::Instant::now();
    let s = sweep(
        fnth,
        LIMIT,
        CLEAN,
        || sys::finit_module(ko, &p).map(|_| ()),
        |n, e| module_gone().map_err(|w| format!("n={n}: after {}: {w}", errno(e))),
        |n, injected| {
            ensure!(
                guest::wait_for(Duration::from_secs(2), || {
                    std::path::Path::new("/dev/perfmon").exists()
                }),
                "n={n}: loaded, but no /dev/perfmon"
            );
            if injected {
                // Loaded despite the fault (a fallback took it): unload
                // for the next round.
                sys::delete_module(c"perfmon")
                    .map_err(|e| format!("n={n}: delete_module: {}", errno(e)))?;
                module_gone().map_err(|e| format!("n={n}: after rmmod: {e}"))?;
            }
            Ok(())
        },
    )?;
    diag(format!("load {params}: {s} ({} s)", t.elapsed().as_secs()));
    ensure!(
        Counters::read().idle(),
        "fresh module not idle: {}",
        Counters::read()
    );
    Ok(())
}

/// Unloads the module with delete_module(2).
fn unload() -> TestResult {
    guest::rmmod_within(Duration::from_secs(3))
}

/// The state of `ctx`, or a failure.
fn state(ctx: &Ctx) -> Result<u32, String> {
    ctx.state()
        .map(|s| s.state)
        .map_err(|e| format!("GET_STATE: {}", errno(e)))
}

/// One WRITE_PMCS of PMC0 = context switches.
fn write_pmcs(ctx: &Ctx) -> Result<(), i32> {
    let mut pmc = [abi::PfmPmc {
        reg_num: 0,
        reg_value: abi::PFM_SOFT_EV_CONTEXT_SWITCHES,
        ..Default::default()
    }];
    let mut a = abi::PfmRegsArg {
        regs: pmc.as_mut_ptr() as u64,
        count: 1,
        ..Default::default()
    };
    sys::ioctl_ref(ctx.fd(), abi::PFM_IOC_WRITE_PMCS, &mut a).map(|_| ())
}

/// One WRITE_PMDS of PMD0 = 5.
fn write_pmds(ctx: &Ctx) -> Result<(), i32> {
    let mut pmd = [abi::PfmPmd {
        reg_num: 0,
        reg_value: 5,
        ..Default::default()
    }];
    let mut a = abi::PfmRegsArg {
        regs: pmd.as_mut_ptr() as u64,
        count: 1,
        ..Default::default()
    };
    sys::ioctl_ref(ctx.fd(), abi::PFM_IOC_WRITE_PMDS, &mut a).map(|_| ())
}

/// One LOAD of `tid`.
fn load(ctx: &Ctx, tid: u32) -> Result<(), i32> {
    let mut l = abi::PfmLoad {
        tid,
        ..Default::default()
    };
    sys::ioctl_ref(ctx.fd(), abi::PFM_IOC_LOAD, &mut l).map(|_| ())
}

/// The counters are `base` (within 2 s: attachments go lazily).
fn counters_back(base: Counters, what: &str) -> TestResult {
    let mut last = Counters::read();
    if guest::wait_for(Duration::from_secs(2), || {
        last = Counters::read();
        last == base
    }) {
        Ok(())
    } else {
        Err(format!("{what}: counters {last}, expected {base}"))
    }
}

/// Sweeps a register write on an UNLOADED context.
fn sweep_regs(fnth: &FailNth, name: &str, op: fn(&Ctx) -> Result<(), i32>) -> TestResult {
    let ctx = Ctx::open().map_err(|e| format!("open: {}", errno(e)))?;
    let base = Counters::read();
    let s = sweep(
        fnth,
        LIMIT,
        CLEAN,
        || op(&ctx),
        |n, e| {
            let st = state(&ctx)?;
            ensure!(
                st == abi::PFM_STATE_UNLOADED,
                "n={n}: after {}: state {}",
                errno(e),
                state_name(st)
            );
            counters_back(base, &format!("n={n}: after {}", errno(e)))
        },
        |_, _| Ok(()),
    )?;
    diag(format!("{name}: {s}"));
    drop(ctx);
    Ok(())
}

/// Sweeps LOAD of `tid` (0: the caller); each success is UNLOADed.
fn sweep_load_ctx(fnth: &FailNth, name: &str, tid: u32) -> TestResult {
    let ctx = Ctx::open().map_err(|e| format!("open: {}", errno(e)))?;
    write_pmcs(&ctx).map_err(|e| format!("WRITE_PMCS: {}", errno(e)))?;
    let base = Counters::read();
    let s = sweep(
        fnth,
        LIMIT,
        CLEAN,
        || load(&ctx, tid),
        |n, e| {
            let st = state(&ctx)?;
            ensure!(
                st == abi::PFM_STATE_UNLOADED,
                "n={n}: after {}: state {}",
                errno(e),
                state_name(st)
            );
            counters_back(base, &format!("n={n}: after {}", errno(e)))
        },
        |n, _| {
            let st = state(&ctx)?;
            ensure!(
                st == abi::PFM_STATE_LOADED,
                "n={n}: LOAD succeeded, state {}",
                state_name(st)
            );
            ctx.unload()
                .map_err(|e| format!("n={n}: UNLOAD: {}", errno(e)))?;
            counters_back(base, &format!("n={n}: after UNLOAD"))
        },
    )?;
    diag(format!("{name}: {s}"));
    drop(ctx);
    Ok(())
}

/// A context opened, with `ctx_flags` and PMC0 written, and loaded with
/// `load_flags` on `tid`: every step that allocates, in one call.
fn whole_load(ctx_flags: u32, load_flags: u32, tid: u32) -> Result<Ctx, i32> {
    let ctx = Ctx::open()?;
    ctx.set_flags(ctx_flags)?;
    write_pmcs(&ctx)?;
    let mut l = abi::PfmLoad {
        tid,
        flags: load_flags,
        ..Default::default()
    };
    sys::ioctl_ref(ctx.fd(), abi::PFM_IOC_LOAD, &mut l)?;
    Ok(ctx)
}

/// Sweeps [`whole_load`]; each success is closed. The counters are back
/// after every round.
fn sweep_whole(
    fnth: &FailNth,
    name: &str,
    ctx_flags: u32,
    load_flags: u32,
    tid: u32,
) -> TestResult {
    let base = Counters::read();
    let held = std::cell::RefCell::new(None);
    let s = sweep(
        fnth,
        LIMIT,
        CLEAN,
        || whole_load(ctx_flags, load_flags, tid).map(|c| *held.borrow_mut() = Some(c)),
        |n, e| counters_back(base, &format!("n={n}: after {}", errno(e))),
        |n, _| {
            let ctx = held.borrow_mut().take().ok_or("no context")?;
            let st = state(&ctx)?;
            ensure!(
                st == abi::PFM_STATE_LOADED,
                "n={n}: LOAD succeeded, state {}",
                state_name(st)
            );
            drop(ctx);
            counters_back(base, &format!("n={n}: after close"))
        },
    )?;
    diag(format!("{name}: {s}"));
    Ok(())
}

/// Sweeps READ_THREADS of a context loaded on this whole process.
fn sweep_read_threads(fnth: &FailNth) -> TestResult {
    let pid = std::process::id();
    let ctx = whole_load(0, abi::PFM_LOAD_PROCESS, pid)
        .map_err(|e| format!("LOAD_PROCESS: {}", errno(e)))?;
    let mut rows = vec![abi::PfmThread::default(); 64];
    let s = sweep(
        fnth,
        LIMIT,
        CLEAN,
        || {
            let mut a = abi::PfmThreadsArg {
                threads: rows.as_mut_ptr() as u64,
                pmd_mask: 1,
                count: rows.len() as u32,
                ..Default::default()
            };
            sys::ioctl_ref(ctx.fd(), abi::PFM_IOC_READ_THREADS, &mut a).map(|_| ())
        },
        |n, e| {
            let st = state(&ctx)?;
            ensure!(
                st == abi::PFM_STATE_LOADED,
                "n={n}: after {}: state {}",
                errno(e),
                state_name(st)
            );
            Ok(())
        },
        |_, _| Ok(()),
    )?;
    diag(format!("READ_THREADS: {s}"));
    Ok(())
}

/// A thread of this process that sleeps in 1 ms steps until told to stop.
struct Sleeper {
    tid: Arc<AtomicU32>,
    stop: Arc<AtomicBool>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Sleeper {
    fn start() -> Sleeper {
        let tid = Arc::new(AtomicU32::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (t, s) = (tid.clone(), stop.clone());
        let handle = std::thread::spawn(move || {
            t.store(sys::gettid(), Ordering::Release);
            while !s.load(Ordering::Acquire) {
                sys::usleep(1000);
            }
        });
        guest::wait_for(Duration::from_secs(5), || tid.load(Ordering::Acquire) != 0);
        Sleeper {
            tid,
            stop,
            handle: Some(handle),
        }
    }

    fn tid(&self) -> u32 {
        self.tid.load(Ordering::Acquire)
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// A context on `tid` counting task-clock and context switches for a while.
fn counts(tid: u32) -> TestResult {
    let ctx = Ctx::open().map_err(|e| format!("open: {}", errno(e)))?;
    ctx.program(0, abi::PFM_SOFT_EV_TASK_CLOCK, 0, false, 0)
        .map_err(|e| format!("program PMD0: {}", errno(e)))?;
    ctx.program(1, abi::PFM_SOFT_EV_CONTEXT_SWITCHES, 0, false, 0)
        .map_err(|e| format!("program PMD1: {}", errno(e)))?;
    ctx.load(tid)
        .map_err(|e| format!("LOAD {tid}: {}", errno(e)))?;
    ctx.start().map_err(|e| format!("START: {}", errno(e)))?;
    for _ in 0..20 {
        sys::usleep(1000);
    }
    ctx.stop().map_err(|e| format!("STOP: {}", errno(e)))?;
    let clock = ctx
        .read_pmd(0)
        .map_err(|e| format!("read PMD0: {}", errno(e)))?;
    let switches = ctx
        .read_pmd(1)
        .map_err(|e| format!("read PMD1: {}", errno(e)))?;
    ensure!(
        clock > 0 && switches > 0,
        "LOAD {tid}: task-clock {clock} ns, {switches} context switches"
    );
    ctx.unload().map_err(|e| format!("UNLOAD: {}", errno(e)))?;
    Ok(())
}

/// Sweeps `open("/dev/null")`: how many sites the current knobs let
/// fail-nth see on a path that allocates (a struct file, the path name).
fn probe_devnull(fnth: &FailNth) -> String {
    let fd = std::cell::Cell::new(-1);
    let r = sweep(
        fnth,
        100,
        CLEAN,
        || sys::open(c"/dev/null", libc::O_RDONLY).map(|f| fd.set(f)),
        |_, _| Ok(()),
        |_, _| {
            let _ = sys::close(fd.replace(-1));
            Ok(())
        },
    );
    match r {
        Ok(s) => s.to_string(),
        Err(e) => e,
    }
}

fn main() {
    let mut tap = Tap::new(PLAN);
    let fnth = match FailNth::open() {
        Ok(f) => f,
        Err(e) => {
            for _ in 0..PLAN {
                tap.skip("fail-nth sweep", &e);
            }
            tap.finish();
        }
    };
    // Whether fail-nth needs the debugfs knobs on this kernel: by default
    // failslab and fail_page_alloc skip allocations that may sleep.
    diag(format!(
        "open(/dev/null) with the default knobs: {}",
        probe_devnull(&fnth)
    ));
    let verbose = std::env::var_os("PFM_FAILNTH_VERBOSE").is_some();
    let knobs = match Knobs::set_for_sweep(verbose) {
        Ok(k) => k,
        Err(e) => {
            for _ in 0..PLAN {
                tap.skip("fail-nth sweep", &e);
            }
            tap.finish();
        }
    };
    diag(format!("set for the sweeps: {}", knobs.describe()));
    diag(format!(
        "open(/dev/null) with the sweep's knobs: {}",
        probe_devnull(&fnth)
    ));
    let kmsg = Kmsg::open().ok();
    if guest::is_loaded() {
        let _ = unload();
    }
    let ko = match sys::open(
        &std::ffi::CString::new(guest::module_path()).unwrap_or_default(),
        libc::O_RDONLY | libc::O_CLOEXEC,
    ) {
        Ok(fd) => fd,
        Err(e) => tap.bail_out(format!("open {}: {}", guest::module_path(), errno(e))),
    };

    let sim = tap.run(
        "load with the n-th fault failing (pmu=intel_arch_sim)",
        || {
            sweep_load(&fnth, ko, "pmu=intel_arch_sim")?;
            unload()
        },
    );
    let soft = tap.run("load with the n-th fault failing (pmu=soft)", || {
        sweep_load(&fnth, ko, "pmu=soft")
    });
    let _ = sys::close(ko);
    if !soft {
        knobs.restore();
        let lines = kmsg.as_ref().map(|k| k.splats()).unwrap_or_default();
        for l in &lines {
            diag(format!("kernel: {l}"));
        }
        tap.bail_out("the module could not be loaded after the sweep");
    }
    let _ = sim;
    let sleeper = Sleeper::start();
    let base = Counters::read();
    tap.run("open(/dev/perfmon) with the n-th fault failing", || {
        // Only open(2) runs armed: the fd is closed after the round.
        let fd = std::cell::Cell::new(-1);
        let s = sweep(
            &fnth,
            LIMIT,
            CLEAN,
            || sys::open_pfm().map(|f| fd.set(f)),
            |n, e| counters_back(base, &format!("n={n}: after {}", errno(e))),
            |n, _| {
                let _ = sys::close(fd.replace(-1));
                counters_back(base, &format!("n={n}: after close"))
            },
        )?;
        diag(format!("open: {s}"));
        Ok(())
    });
    tap.run("WRITE_PMCS with the n-th fault failing", || {
        sweep_regs(&fnth, "WRITE_PMCS", write_pmcs)
    });
    tap.run("WRITE_PMDS with the n-th fault failing", || {
        sweep_regs(&fnth, "WRITE_PMDS", write_pmds)
    });
    tap.run(
        "LOAD of the calling thread with the n-th fault failing",
        || sweep_load_ctx(&fnth, "LOAD self", 0),
    );
    tap.run("LOAD of another thread with the n-th fault failing", || {
        sweep_load_ctx(&fnth, "LOAD another thread", sleeper.tid())
    });
    tap.run(
        "LOAD with PFM_CTXFL_INHERIT of another thread with the n-th fault failing",
        || {
            sweep_whole(
                &fnth,
                "LOAD inherit",
                abi::PFM_CTXFL_INHERIT,
                0,
                sleeper.tid(),
            )
        },
    );
    tap.run(
        "LOAD with PFM_LOAD_PROCESS of this process with the n-th fault failing",
        || {
            sweep_whole(
                &fnth,
                "LOAD process",
                0,
                abi::PFM_LOAD_PROCESS,
                std::process::id(),
            )
        },
    );
    tap.run("READ_THREADS with the n-th fault failing", || {
        sweep_read_threads(&fnth)
    });
    tap.run("the module still works after the sweeps", || {
        counts(0).map_err(|e| format!("self: {e}"))?;
        counts(sleeper.tid()).map_err(|e| format!("another thread: {e}"))
    });
    drop(sleeper);
    tap.run("counters back to 0, rmmod", || {
        guest::wait_idle(Duration::from_secs(3))?;
        unload()
    });
    knobs.restore();
    tap.run("no kernel splat during the sweeps", || {
        let Some(k) = &kmsg else {
            return Err("/dev/kmsg could not be opened".into());
        };
        let lines = k.splats();
        ensure!(lines.is_empty(), "kernel log:\n{}", lines.join("\n"));
        Ok(())
    });
    tap.finish();
}
