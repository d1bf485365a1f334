//! pfm_test_teardown: the teardown matrix of issue 4, each order at least
//! 100 times, then the module's counters back to 0 and rmmod.
//!
//! 1. The tool closes first (the context becomes a zombie that its thread
//!    reaps at its next return to user mode; every 25 rounds the target is
//!    killed with a zombie possibly pending).
//! 2. The target exits first (END message, UNLOADED + EXITED, counts
//!    readable, then close).
//! 3. Both at once (tool and target processes SIGKILLed together).
//! 4. Close racing a context switch (target: two threads ping-ponging).
//! 5. Close racing an overflow interrupt (period 1 on context switches;
//!    notify, no-msg and notify-block in turn: a blocked target is
//!    released by the close).
//! 6. SIGKILL of the tool while the target is blocked in notify-block: the
//!    target must be released.
//! 7. After the matrix, the counters are back to 0. Then rmmod while a
//!    context or a zombie exists fails and the system stays healthy; after
//!    close (and the zombie's reaping) it succeeds; then ten load/unload
//!    cycles with an overflowing context each, each ending in rmmod.
//!
//! The rounds' counts: PFM_TEARDOWN_ROUNDS (default 100).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pfm_fuzz::ensure;
use pfm_fuzz::guest::wait_for;
use pfm_fuzz::guest::{self, Counters};
use pfm_fuzz::pfm::{msg_name, state_name, Ctx};
use pfm_fuzz::proc::{Pipe, Proc};
use pfm_fuzz::rng::Rng;
use pfm_fuzz::sys::{self, abi};
use pfm_fuzz::tap::{diag, Tap, TestResult};

/// Progress counters and thread ids of the targets, shared with them.
#[repr(C)]
struct Shm {
    progress: [AtomicU64; 8],
    tids: [AtomicU32; 8],
}

fn shm() -> &'static Shm {
    static ADDR: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let a = *ADDR.get_or_init(|| sys::shared_mapping(4096));
    // SAFETY: a zeroed MAP_SHARED page (atomics only), never unmapped.
    unsafe { &*(a as *const Shm) }
}

const SPIN: usize = 0;
const PING: usize = 1;
const PONG: usize = 2;

/// A target that loops: counts progress in `slot`, sleeps `sleep_us`
/// (0: sched_yield), forever.
fn spinner(slot: usize, sleep_us: u64) -> Proc {
    shm().progress[slot].store(0, Ordering::Relaxed);
    shm().tids[slot].store(0, Ordering::Relaxed);
    let p = Proc::spawn(move || {
        shm().tids[slot].store(sys::gettid(), Ordering::Relaxed);
        loop {
            shm().progress[slot].fetch_add(1, Ordering::Relaxed);
            if sleep_us == 0 {
                sys::sched_yield();
            } else {
                sys::usleep(sleep_us);
            }
        }
    });
    wait_for(Duration::from_secs(5), || {
        shm().tids[slot].load(Ordering::Relaxed) != 0
    });
    p
}

/// A target of two threads that ping-pong a byte through two pipes: both
/// switch out and in all the time.
fn pingpong() -> Proc {
    for s in [PING, PONG] {
        shm().progress[s].store(0, Ordering::Relaxed);
        shm().tids[s].store(0, Ordering::Relaxed);
    }
    let p = Proc::spawn(|| {
        let a = Pipe::new();
        let b = Pipe::new();
        std::thread::scope(|sc| {
            sc.spawn(|| {
                shm().tids[PONG].store(sys::gettid(), Ordering::Relaxed);
                loop {
                    a.recv_blocking();
                    shm().progress[PONG].fetch_add(1, Ordering::Relaxed);
                    b.send("");
                }
            });
            shm().tids[PING].store(sys::gettid(), Ordering::Relaxed);
            loop {
                a.send("");
                b.recv_blocking();
                shm().progress[PING].fetch_add(1, Ordering::Relaxed);
            }
        });
        0
    });
    wait_for(Duration::from_secs(5), || {
        shm().tids[PING].load(Ordering::Relaxed) != 0
            && shm().tids[PONG].load(Ordering::Relaxed) != 0
    });
    p
}

/// Whether `slot`'s progress moves within `within`.
fn moving(slot: usize, within: Duration) -> bool {
    let p0 = shm().progress[slot].load(Ordering::Relaxed);
    wait_for(within, || {
        shm().progress[slot].load(Ordering::Relaxed) > p0 + 2
    })
}

fn errno(e: i32) -> String {
    perfmon::errno_name(e).to_string()
}

/// A context counting context switches on counter 0 (value `start`,
/// notify when `notify`, resets -1), with `flags`, loaded on `tid` and started.
fn monitor(tid: u32, flags: u32, start: u64, notify: bool) -> Result<Ctx, String> {
    let c = Ctx::open().map_err(|e| format!("open {}", errno(e)))?;
    if flags != 0 {
        c.set_flags(flags)
            .map_err(|e| format!("set_flags {}", errno(e)))?;
    }
    c.program(
        0,
        abi::PFM_SOFT_EV_CONTEXT_SWITCHES,
        start,
        notify,
        u64::MAX,
    )
    .map_err(|e| format!("program {}", errno(e)))?;
    c.program(1, abi::PFM_SOFT_EV_TASK_CLOCK, 0, false, 0)
        .map_err(|e| format!("program {}", errno(e)))?;
    // EAGAIN (documented): the thread still holds earlier contexts it
    // releases only when it next runs; these loops outpace a target that
    // the scheduler has not run yet, so wait for it (bounded).
    let t0 = std::time::Instant::now();
    loop {
        match c.load(tid) {
            Ok(()) => break,
            Err(libc::EAGAIN) if t0.elapsed() < Duration::from_secs(5) => sys::usleep(1000),
            Err(e) => return Err(format!("load {tid}: {}", errno(e))),
        }
    }
    c.start().map_err(|e| format!("start: {}", errno(e)))?;
    Ok(c)
}

fn wait_no_zombie(timeout: Duration) -> TestResult {
    let mut last = Counters::default();
    if wait_for(timeout, || {
        last = Counters::read();
        last.zombies == Some(0)
    }) {
        Ok(())
    } else {
        Err(format!(
            "zombies left after {} ms: {last}",
            timeout.as_millis()
        ))
    }
}

fn tool_closes_first(rounds: usize, rng: &mut Rng) -> TestResult {
    let mut target = spinner(SPIN, 300);
    let mut zombies_seen = 0;
    for i in 0..rounds {
        if i % 25 == 24 {
            // Kill the target with (maybe) a zombie still on it.
            target.kill();
            target = spinner(SPIN, 300);
        }
        let tid = shm().tids[SPIN].load(Ordering::Relaxed);
        let c = monitor(tid, 0, 0, false).map_err(|e| format!("round {i}: {e}"))?;
        if rng.chance(1, 2) {
            sys::usleep(rng.below(2000));
        }
        if rng.chance(1, 3) {
            c.read_pmd(0)
                .map_err(|e| format!("round {i}: read {}", errno(e)))?;
        }
        drop(c);
        if Counters::read().zombies.unwrap_or(0) > 0 {
            zombies_seen += 1;
        }
    }
    diag(format!(
        "tool closes first: a zombie was visible right after {zombies_seen} of {rounds} closes"
    ));
    wait_no_zombie(Duration::from_secs(5))?;
    ensure!(
        moving(SPIN, Duration::from_secs(2)),
        "the target stopped running"
    );
    drop(target);
    Ok(())
}

fn target_exits_first(rounds: usize, rng: &mut Rng) -> TestResult {
    for i in 0..rounds {
        let go = Pipe::new();
        let run_us = rng.below(3000);
        let mut t = Proc::spawn(|| {
            go.recv_blocking();
            let end = Instant::now() + Duration::from_micros(run_us);
            while Instant::now() < end {
                sys::usleep(100);
            }
            0
        });
        let c = monitor(t.pid(), 0, 0, false).map_err(|e| format!("round {i}: {e}"))?;
        go.send("go");
        let m = c
            .next_msg(10_000)
            .map_err(|e| format!("round {i}: read {}", errno(e)))?;
        let m =
            m.ok_or_else(|| format!("round {i}: no message within 10 s after the target's exit"))?;
        ensure!(
            m.msg_type == abi::PFM_MSG_END,
            "round {i}: message {} instead of END",
            msg_name(m.msg_type)
        );
        ensure!(
            m.tid == t.pid(),
            "round {i}: END for tid {} instead of {}",
            m.tid,
            t.pid()
        );
        let st = c
            .state()
            .map_err(|e| format!("round {i}: state {}", errno(e)))?;
        ensure!(
            st.state == abi::PFM_STATE_UNLOADED && st.status & abi::PFM_CTXST_EXITED != 0,
            "round {i}: after END the state is {} status {:#x}",
            state_name(st.state),
            st.status
        );
        c.read_pmd(0)
            .map_err(|e| format!("round {i}: read after exit {}", errno(e)))?;
        let rev = sys::poll(&[(c.fd(), libc::POLLIN)], 0).map_err(errno)?;
        ensure!(
            rev[0] & libc::POLLHUP != 0,
            "round {i}: no POLLHUP after END was read (revents {:#x})",
            rev[0]
        );
        drop(c);
        t.wait(Duration::from_secs(5));
    }
    Ok(())
}

fn both_at_once(rounds: usize, rng: &mut Rng) -> TestResult {
    for i in 0..rounds {
        let target = Proc::spawn(|| {
            let _ = sys::setpgid(0, 0);
            loop {
                sys::usleep(200);
            }
        });
        let tpid = target.pid();
        let _ = sys::setpgid(tpid as i32, tpid as i32);
        let ready = Pipe::new();
        let mode = rng.below(3);
        let tool = Proc::spawn(|| {
            let flags = [0, abi::PFM_CTXFL_NO_MSG, abi::PFM_CTXFL_NOTIFY_BLOCK][mode as usize];
            match monitor(tpid, flags, if mode == 0 { 0 } else { u64::MAX }, mode != 0) {
                Ok(c) => {
                    let _ = c.into_raw();
                    ready.send("ready");
                }
                Err(e) => ready.send(&e),
            }
            loop {
                sys::usleep(1000);
            }
        });
        let _ = sys::setpgid(tool.pid() as i32, tpid as i32);
        let r = ready
            .recv(Duration::from_secs(10))
            .unwrap_or_else(|| "no answer".into());
        ensure!(r == "ready", "round {i}: tool: {r}");
        if rng.chance(1, 2) {
            sys::usleep(rng.below(1000));
        }
        let _ = sys::kill(-(tpid as i32), libc::SIGKILL);
        let (mut target, mut tool) = (target, tool);
        ensure!(
            target.wait(Duration::from_secs(10)).is_some(),
            "round {i}: the target did not die"
        );
        ensure!(
            tool.wait(Duration::from_secs(10)).is_some(),
            "round {i}: the tool did not die"
        );
    }
    Ok(())
}

fn close_racing_switch(rounds: usize, rng: &mut Rng) -> TestResult {
    let pp = pingpong();
    for i in 0..rounds {
        let tid = shm().tids[if i % 2 == 0 { PING } else { PONG }].load(Ordering::Relaxed);
        let c = monitor(tid, 0, 0, false).map_err(|e| format!("round {i}: {e}"))?;
        sys::usleep(rng.below(2000));
        if rng.chance(1, 4) {
            let _ = c.stop();
        }
        drop(c);
    }
    ensure!(
        moving(PING, Duration::from_secs(2)),
        "the ping-pong stopped"
    );
    wait_no_zombie(Duration::from_secs(5))?;
    drop(pp);
    Ok(())
}

fn close_racing_overflow(rounds: usize, rng: &mut Rng) -> TestResult {
    let pp = pingpong();
    let irq0 = Counters::read().interrupts.unwrap_or(0);
    let mut blocked = 0;
    for i in 0..rounds {
        let tid = shm().tids[if i % 2 == 0 { PING } else { PONG }].load(Ordering::Relaxed);
        let flags = [0, abi::PFM_CTXFL_NO_MSG, abi::PFM_CTXFL_NOTIFY_BLOCK][i % 3];
        let c = monitor(tid, flags, u64::MAX, true).map_err(|e| format!("round {i}: {e}"))?;
        sys::usleep(rng.below(2000));
        if flags == abi::PFM_CTXFL_NOTIFY_BLOCK
            && c.state()
                .map(|s| s.state == abi::PFM_STATE_MASKED)
                .unwrap_or(false)
        {
            blocked += 1;
        }
        if rng.chance(1, 4) {
            let _ = c.next_msg(0);
        }
        drop(c);
    }
    let irqs = Counters::read().interrupts.unwrap_or(0) - irq0;
    diag(format!("close racing overflow: {irqs} overflow interrupts, {blocked} closes of a MASKED notify-block context"));
    ensure!(irqs > 0, "no overflow interrupt happened");
    ensure!(
        moving(PING, Duration::from_secs(2)) && moving(PONG, Duration::from_secs(2)),
        "the ping-pong stopped (a thread left blocked?)"
    );
    wait_no_zombie(Duration::from_secs(5))?;
    drop(pp);
    Ok(())
}

fn kill_tool_while_blocked(rounds: usize) -> TestResult {
    // It sleeps 50 us per loop: a context switch every time.
    let target = spinner(SPIN, 50);
    let tid = shm().tids[SPIN].load(Ordering::Relaxed);
    let mut stalled = 0;
    for i in 0..rounds {
        let out = Pipe::new();
        let mut tool = Proc::spawn(|| {
            let c = match monitor(tid, abi::PFM_CTXFL_NOTIFY_BLOCK, u64::MAX, true) {
                Ok(c) => c,
                Err(e) => {
                    out.send(&e);
                    return 1;
                }
            };
            // The first notification: the target blocks on its way back to user.
            match c.next_msg(5000) {
                Ok(Some(m)) if m.msg_type == abi::PFM_MSG_OVFL => {
                    let st = c.state().map(|s| state_name(s.state)).unwrap_or("?");
                    out.send(&format!("blocked {st}"));
                }
                Ok(Some(m)) => out.send(&format!("message {}", msg_name(m.msg_type))),
                Ok(None) => out.send("no notification within 5 s"),
                Err(e) => out.send(&format!("read {}", errno(e))),
            }
            loop {
                sys::usleep(10_000);
            }
        });
        let r = out
            .recv(Duration::from_secs(10))
            .unwrap_or_else(|| "no answer".into());
        ensure!(r == "blocked MASKED", "round {i}: tool: {r}");
        // The target should not move now (it waits for RESTART).
        let p0 = shm().progress[SPIN].load(Ordering::Relaxed);
        sys::usleep(5_000);
        if shm().progress[SPIN].load(Ordering::Relaxed) <= p0 + 1 {
            stalled += 1;
        }
        tool.kill();
        ensure!(
            moving(SPIN, Duration::from_secs(3)),
            "round {i}: the target was not released after the tool's SIGKILL"
        );
    }
    diag(format!(
        "the target was seen stalled before {stalled} of {rounds} kills"
    ));
    ensure!(
        stalled * 2 >= rounds,
        "the target rarely stalled: notify-block did not block?"
    );
    wait_no_zombie(Duration::from_secs(5))?;
    drop(target);
    Ok(())
}

fn rmmod_refused(what: &str) -> TestResult {
    match guest::rmmod_once() {
        Ok(()) => Err(format!("rmmod succeeded with {what}")),
        Err(_) => {
            ensure!(guest::is_loaded(), "perfmon vanished");
            // Healthy: a new context works.
            let c =
                Ctx::open().map_err(|e| format!("open after the refused rmmod: {}", errno(e)))?;
            c.program(0, abi::PFM_SOFT_EV_TASK_CLOCK, 0, false, 0)
                .map_err(|e| format!("program: {}", errno(e)))?;
            c.load(0).map_err(|e| format!("self load: {}", errno(e)))?;
            c.start().map_err(|e| format!("start: {}", errno(e)))?;
            sys::usleep(1000);
            c.unload().map_err(|e| format!("unload: {}", errno(e)))?;
            Ok(())
        }
    }
}

fn rmmod_with_context() -> TestResult {
    // An open, unattached context.
    let c = Ctx::open().map_err(errno)?;
    rmmod_refused("an open context")?;
    drop(c);
    guest::wait_idle(Duration::from_secs(5))?;
    guest::rmmod_within(Duration::from_secs(5))?;
    guest::insmod(&["pmu=soft", "soft_width=16"])?;
    // A zombie: the target sleeps in the kernel (read on a pipe) and does
    // not return to user mode until the pipe has data.
    let wake = Pipe::new();
    let mut t = Proc::spawn(|| {
        wake.recv_blocking();
        loop {
            sys::usleep(1000);
        }
    });
    let c = monitor(t.pid(), 0, 0, false)?;
    // Only once installed is the target back asleep with nothing pending
    // but the zombie's lazy cleanup; a close before that leaves the
    // install's kick pending, which would reap the zombie at once.
    let installed = wait_for(Duration::from_secs(20), || {
        c.state()
            .map(|s| s.status & abi::PFM_CTXST_ACTIVE != 0)
            .unwrap_or(false)
    });
    ensure!(
        installed,
        "the sleeping target did not install the context within 20 s"
    );
    // Let it go back to sleep in poll() after running the install.
    sys::usleep(200_000);
    drop(c);
    let z = Counters::read();
    ensure!(z.zombies == Some(1), "expected one zombie after close: {z}");
    rmmod_refused("a zombie")?;
    wake.send("wake");
    wait_no_zombie(Duration::from_secs(5))?;
    t.kill();
    guest::wait_idle(Duration::from_secs(5))?;
    guest::rmmod_within(Duration::from_secs(5))?;
    Ok(())
}

fn load_unload_cycles(cycles: usize) -> TestResult {
    let target = spinner(SPIN, 100);
    let tid = shm().tids[SPIN].load(Ordering::Relaxed);
    for i in 0..cycles {
        guest::insmod(&["pmu=soft", "soft_width=16"]).map_err(|e| format!("cycle {i}: {e}"))?;
        let c = monitor(
            tid,
            if i % 2 == 0 {
                0
            } else {
                abi::PFM_CTXFL_NOTIFY_BLOCK
            },
            u64::MAX,
            true,
        )
        .map_err(|e| format!("cycle {i}: {e}"))?;
        sys::usleep(20_000);
        drop(c);
        guest::wait_idle(Duration::from_secs(5)).map_err(|e| format!("cycle {i}: {e}"))?;
        guest::rmmod_within(Duration::from_secs(5)).map_err(|e| format!("cycle {i}: {e}"))?;
    }
    ensure!(moving(SPIN, Duration::from_secs(2)), "the target stopped");
    drop(target);
    Ok(())
}

fn timed(tap: &mut Tap, name: &str, f: impl FnOnce() -> TestResult) {
    let t = Instant::now();
    let r = f();
    diag(format!("{name}: {:.1} s", t.elapsed().as_secs_f64()));
    tap.result(name, r);
}

fn main() {
    let rounds: usize = std::env::var("PFM_TEARDOWN_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let mut tap = Tap::new(10);
    sys::ignore_signal(libc::SIGPIPE);
    let r = guest::insmod(&["pmu=soft", "soft_width=16"]);
    let ok = r.is_ok();
    tap.result("insmod perfmon.ko pmu=soft soft_width=16", r);
    if !ok {
        tap.bail_out("no module");
    }
    let mut rng = Rng::new(0x7ea2_d0e4);
    timed(
        &mut tap,
        &format!("tool closes first, {rounds} rounds"),
        || tool_closes_first(rounds, &mut rng),
    );
    timed(
        &mut tap,
        &format!("target exits first, {rounds} rounds"),
        || target_exits_first(rounds, &mut rng),
    );
    timed(
        &mut tap,
        &format!("tool and target killed at once, {rounds} rounds"),
        || both_at_once(rounds, &mut rng),
    );
    timed(
        &mut tap,
        &format!("close racing a context switch, {rounds} rounds"),
        || close_racing_switch(rounds, &mut rng),
    );
    timed(
        &mut tap,
        &format!("close racing an overflow interrupt, {rounds} rounds"),
        || close_racing_overflow(rounds, &mut rng),
    );
    timed(
        &mut tap,
        &format!("SIGKILL of the tool releases a target blocked in notify-block, {rounds} rounds"),
        || kill_tool_while_blocked(rounds),
    );
    tap.result(
        "after the matrix: live_contexts, zombie_contexts and attached_threads back to 0",
        guest::wait_idle(Duration::from_secs(15))
            .map(|t| diag(format!("drained in {} ms", t.as_millis()))),
    );
    // Ends with the module unloaded.
    timed(
        &mut tap,
        "rmmod refused while a context or a zombie exists, succeeds after",
        rmmod_with_context,
    );
    // Each cycle ends with the counters at 0 and a successful rmmod.
    timed(
        &mut tap,
        "10 load/unload cycles with an overflowing context",
        || load_unload_cycles(10),
    );
    tap.finish();
}
