//! pfm_test_clone: `PFM_IOC_CLONE` and `PFM_LOAD_START`, the four-call
//! attach (clone, LOAD|START, UNLOAD, close) that `make bench` compares
//! with perf's (open, ENABLE, DISABLE, close).
//!
//! - A clone has its template's flags, registers (every field READ_PMDS
//!   returns) and event sets, and the template is unchanged.
//! - A clone counts as its template would: LOAD|START on another thread
//!   sleeping and waking, or exchanging through a pipe, its counts read
//!   while the thread is blocked at each window's edge: task-clock within
//!   the thread's own CPU time, switches and migrations equal to perf's
//!   (exact oracles, `pfm_guest::edges`).
//! - LOAD|START on the calling thread: LOADED, started and ACTIVE when it
//!   returns; UNLOAD alone stops. The counts lie within what the thread
//!   measured itself around the two calls (CPU time and context switches
//!   before LOAD|START and after it, before UNLOAD and after it: no
//!   tolerance).
//! - The new descriptor: close-on-exec and non-blocking exactly as asked,
//!   its own counter page, a context of its own (the template closed
//!   first), and `live_contexts` back where it was after both closes.
//! - Who may clone: a caller that may not open `/dev/perfmon` may not clone
//!   a descriptor it was given either (uid 1000 at perf_event_paranoid 3:
//!   EACCES; at 2: a new descriptor).

use std::os::fd::AsRawFd;
use std::time::Duration;

use perfmon::abi::*;
use perfmon::{Context, CtxState};
use pfm_guest::edges::{self, Attach, Verdict, Workload};
use pfm_guest::tap::diag;
use pfm_guest::{ensure, module, raw, soft_context, work, ResultExt, Tap, TestResult};

const PLAN: usize = 8;

/// The template of the copy test: flags, PMD values and resets, and a
/// second event set with a register of its own.
fn programmed_template() -> Result<Context, String> {
    let (ctx, _) = soft_context()?;
    ctx.set_flags(PFM_CTXFL_NO_MSG).ctx("SET_FLAGS")?;
    let mut pmds = [PfmPmd {
        reg_num: 1,
        reg_value: 123,
        reg_long_reset: 1000,
        reg_short_reset: 500,
        ..Default::default()
    }];
    ctx.write_pmds(&mut pmds).ctx("WRITE_PMDS")?;
    let mut sets = [PfmSetdesc {
        set_id: 1,
        set_flags: PFM_SETFL_TIME_SWITCH as u16,
        set_timeout: 2_000_000,
        ..Default::default()
    }];
    ctx.create_sets(&mut sets).ctx("CREATE_SETS")?;
    let mut pmcs = [PfmPmc {
        reg_num: 3,
        reg_set: 1,
        reg_value: PFM_SOFT_EV_CONTEXT_SWITCHES as u64,
        ..Default::default()
    }];
    ctx.write_pmcs(&mut pmcs).ctx("WRITE_PMCS set 1")?;
    let mut pmds = [PfmPmd {
        reg_num: 3,
        reg_set: 1,
        reg_value: 77,
        ..Default::default()
    }];
    ctx.write_pmds(&mut pmds).ctx("WRITE_PMDS set 1")?;
    Ok(ctx)
}

/// Everything a context shows of its programming: state and flags,
/// PMDs 0-3 of sets 0 and 1 as READ_PMDS returns them, the sets' info
/// (their configuration: the counts since LOAD are 0 on both).
fn programming(ctx: &Context) -> Result<String, String> {
    let st = ctx.state().ctx("GET_STATE")?;
    let mut out = format!(
        "state {:?} flags {:#x} used_pmds {:#x}\n",
        st.state, st.flags, st.used_pmds
    );
    for set in [0u16, 1] {
        let mut pmds: Vec<PfmPmd> = (0..4)
            .map(|n| PfmPmd {
                reg_num: n,
                reg_set: set,
                ..Default::default()
            })
            .collect();
        ctx.read_pmds(&mut pmds).ctx("READ_PMDS")?;
        for p in pmds {
            out += &format!(
                "set {set} pmd {}: value {} long {} short {} flags {:#x} reset_pmds {:#x}\n",
                p.reg_num,
                p.reg_value,
                p.reg_long_reset,
                p.reg_short_reset,
                p.reg_flags,
                p.reg_reset_pmds
            );
        }
    }
    for i in ctx.sets_info(&[0, 1]).ctx("GETINFO_SETS")? {
        out += &format!(
            "set {}: flags {:#x} timeout {} used_pmcs {:#x} used_pmds {:#x}\n",
            i.set_id, i.set_flags, i.set_timeout, i.set_used_pmcs, i.set_used_pmds
        );
    }
    Ok(out)
}

fn copies_programming() -> TestResult {
    let template = programmed_template()?;
    let before = programming(&template)?;
    let clone = template.clone_programmed().ctx("CLONE")?;
    let copy = programming(&clone)?;
    let after = programming(&template)?;
    ensure!(
        copy == before,
        "the clone differs:\ntemplate:\n{before}clone:\n{copy}"
    );
    ensure!(
        after == before,
        "the template changed:\nbefore:\n{before}after:\n{after}"
    );
    ensure!(
        before.contains("value 123 long 1000 short 500")
            && before.contains("set 1 pmd 3: value 77"),
        "the template is not as written:\n{before}"
    );
    Ok(())
}

fn counts_remote(workload: Workload) -> TestResult {
    let edges = edges::thread_edges_by(workload, 10, Attach::CloneLoadStart)?;
    let v = Verdict::of(&edges);
    diag(format!("{workload:?}: {}", v.describe()));
    ensure!(
        v.outside == 0,
        "task-clock outside the thread's own CPU time: {}",
        v.describe()
    );
    let (a, b) = (&edges[0], &edges[edges.len() - 1]);
    let d = |x: &[u64; 3], y: &[u64; 3], i: usize| y[i].wrapping_sub(x[i]);
    ensure!(
        d(&a.pfm, &b.pfm, 0) > 0 && d(&a.pfm, &b.pfm, 1) > 0,
        "no counts"
    );
    for (i, what) in [(1, "context-switches"), (2, "cpu-migrations")] {
        let (ours, perf) = (d(&a.pfm, &b.pfm, i), d(&a.perf, &b.perf, i));
        ensure!(ours == perf, "{what} {ours} vs perf {perf}");
    }
    Ok(())
}

/// The calling thread's CPU time and context switches.
fn own() -> (u64, u64) {
    (edges::thread_cpu_ns(), edges::thread_switches())
}

fn load_start_self() -> TestResult {
    let (template, _) = soft_context()?;
    let ctx = template.clone_programmed().ctx("CLONE")?;
    drop(template);
    let a = own();
    ctx.load_and_start(0).ctx("LOAD|START")?;
    let b = own();
    let st = ctx.state().ctx("GET_STATE")?;
    ensure!(
        st.state == CtxState::Loaded && st.is_started() && st.is_active(),
        "after LOAD|START: {st:?}"
    );
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(1));
        work::spin(Duration::from_micros(200));
    }
    let c = own();
    ctx.unload().ctx("UNLOAD")?;
    let d = own();
    let st = ctx.state().ctx("GET_STATE")?;
    ensure!(
        st.state == CtxState::Unloaded && !st.is_started(),
        "after UNLOAD: {st:?}"
    );
    let v = ctx.read().ctx("READ")?.values;
    diag(format!(
        "task-clock {} in [{}, {}], switches {} in [{}, {}]",
        v[0],
        c.0 - b.0,
        d.0 - a.0,
        v[1],
        c.1 - b.1,
        d.1 - a.1
    ));
    ensure!(
        (c.0 - b.0..=d.0 - a.0).contains(&v[0]),
        "task-clock {} outside [{}, {}]",
        v[0],
        c.0 - b.0,
        d.0 - a.0
    );
    ensure!(
        (c.1 - b.1..=d.1 - a.1).contains(&v[1]),
        "context-switches {} outside [{}, {}]",
        v[1],
        c.1 - b.1,
        d.1 - a.1
    );
    // The bound is the thread's own count above: a nap whose timer
    // expires before `schedule()` does not switch, so the 20 naps bound
    // nothing. That some did is what makes the case one about switches.
    ensure!(c.1 > b.1, "none of the 20 naps switched");
    Ok(())
}

/// `PFM_IOC_CLONE` with `flags`, raw: the new descriptor.
fn raw_clone(ctx: &Context, flags: u32) -> Result<i32, String> {
    let mut c = PfmClone {
        flags,
        ..Default::default()
    };
    raw::ioctl_in(ctx.as_raw_fd(), PFM_IOC_CLONE, &mut c)
        .map_err(|e| format!("CLONE {flags:#x}: {}", perfmon::errno_name(e)))
}

fn fd_flags(fd: i32) -> (bool, i32) {
    // SAFETY: fcntl queries of a descriptor we own.
    let (fd_fl, fl) = unsafe {
        (
            libc::fcntl(fd, libc::F_GETFD),
            libc::fcntl(fd, libc::F_GETFL),
        )
    };
    (fd_fl & libc::FD_CLOEXEC != 0, fl)
}

fn descriptor() -> TestResult {
    let base = module::sysfs_num("live_contexts");
    {
        let (template, _) = soft_context()?;
        let plain = raw_clone(&template, 0)?;
        let both = raw_clone(&template, PFM_CLONE_CLOEXEC | PFM_CLONE_NONBLOCK)?;
        let (p, b) = (fd_flags(plain), fd_flags(both));
        raw::close(plain);
        ensure!(
            !p.0 && p.1 & libc::O_NONBLOCK == 0 && p.1 & libc::O_ACCMODE == libc::O_RDWR,
            "flags 0: cloexec {} fl {:#o}",
            p.0,
            p.1
        );
        ensure!(
            b.0 && b.1 & libc::O_NONBLOCK != 0,
            "CLOEXEC|NONBLOCK: cloexec {} fl {:#o}",
            b.0,
            b.1
        );
        let e = raw::read_fd(both, 64).err();
        raw::close(both);
        ensure!(
            e == Some(libc::EAGAIN),
            "read of an empty non-blocking clone: {:?} (EAGAIN expected)",
            e.map(perfmon::errno_name)
        );
        let clone = template.clone_programmed().ctx("CLONE")?;
        drop(template);
        // Its own context: the template is gone, the clone attaches,
        // counts and maps its own counter page.
        clone.load_and_start(0).ctx("LOAD|START")?;
        work::spin(Duration::from_millis(5));
        let mapped = clone.read_mapped(0x1).ctx("mapped read")?;
        clone.unload().ctx("UNLOAD")?;
        ensure!(
            mapped.values[0] >= 5_000_000,
            "mapped task-clock {} after a 5 ms spin",
            mapped.values[0]
        );
    }
    let ok = module::wait_for(Duration::from_secs(2), || {
        module::sysfs_num("live_contexts") == base
    });
    ensure!(
        ok,
        "live_contexts {:?} -> {:?}",
        base,
        module::sysfs_num("live_contexts")
    );
    Ok(())
}

const PARANOID: &str = "/proc/sys/kernel/perf_event_paranoid";

/// CLONE from a child that dropped to uid 1000, with `paranoid`: its
/// errno, or 0 for a new descriptor.
fn clone_as_user(ctx: &Context, paranoid: &str) -> Result<i32, String> {
    std::fs::write(PARANOID, paranoid).ctx(PARANOID)?;
    let fd = ctx.as_raw_fd();
    let status = raw::in_forked_child(|| {
        if raw::become_user(1000, 1000).is_err() {
            return 99;
        }
        let mut c = PfmClone::default();
        match raw::ioctl_in(fd, PFM_IOC_CLONE, &mut c) {
            Ok(_) => 0,
            Err(e) => e,
        }
    })
    .map_err(|e| format!("fork: {}", perfmon::errno_name(e)))?;
    ensure!(status != 99, "the child could not become uid 1000");
    Ok(status)
}

fn who_may_clone() -> TestResult {
    let saved = std::fs::read_to_string(PARANOID).ctx(PARANOID)?;
    let (template, _) = soft_context()?;
    let strict = clone_as_user(&template, "3");
    let relaxed = clone_as_user(&template, "2");
    std::fs::write(PARANOID, saved.trim()).ctx(PARANOID)?;
    let (strict, relaxed) = (strict?, relaxed?);
    ensure!(
        strict == libc::EACCES,
        "uid 1000 at paranoid 3: {} (EACCES expected)",
        perfmon::errno_name(strict)
    );
    ensure!(
        relaxed == 0,
        "uid 1000 at paranoid 2: {} (a new descriptor expected)",
        perfmon::errno_name(relaxed)
    );
    Ok(())
}

fn main() {
    pfm_guest::child::dispatch();
    let mut t = Tap::new(PLAN);
    pfm_guest::watchdog(Duration::from_secs(240));
    t.require("insmod perfmon.ko", module::insmod(&[]));
    t.run(
        "CLONE: the template's flags, registers and sets; the template unchanged",
        copies_programming,
    );
    t.run(
        "a clone's LOAD|START on a thread sleeping and waking: task-clock within its own CPU time, switches and migrations equal perf's",
        || counts_remote(Workload::Sleep),
    );
    t.run(
        "a clone's LOAD|START on a thread in pipe ping-pong: task-clock within its own CPU time, switches and migrations equal perf's",
        || counts_remote(Workload::PingPong),
    );
    t.run(
        "LOAD|START on self: started and ACTIVE on return, UNLOAD stops; counts within the thread's own",
        load_start_self,
    );
    t.run(
        "the clone's descriptor: CLOEXEC and NONBLOCK as asked, its own page and context, live_contexts restored",
        descriptor,
    );
    if raw::geteuid() == 0 {
        t.run(
            "CLONE by uid 1000: EACCES at perf_event_paranoid 3, a descriptor at 2",
            who_may_clone,
        );
    } else {
        t.skip(
            "CLONE by uid 1000: EACCES at perf_event_paranoid 3, a descriptor at 2",
            "not root",
        );
    }
    t.run("rmmod perfmon", module::rmmod);
    t.finish();
}
