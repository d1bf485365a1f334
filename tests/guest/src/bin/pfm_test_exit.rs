//! pfm_test_exit: what a tool sees when the monitored thread ends.
//!
//! A monitored child that exits: a PFM_MSG_END message with its tid
//! becomes readable (poll POLLIN), GET_STATE says EXITED, poll then says
//! POLLHUP once the message is drained and read() gives end of file, the
//! final counts stay readable and no longer change. The same for a thread
//! of this process that monitored itself, and for a child killed with
//! SIGKILL. Closing the fd while attached to a running child leaves a
//! zombie that is gone (sysfs) once the child exits; UNLOAD after exit is
//! consistent with the state; rmmod works at the end.

use std::os::fd::AsRawFd;
use std::time::Duration;

use perfmon::{Context, CtxState, MessageKind};
use pfm_guest::child::Child;
use pfm_guest::tap::diag;
use pfm_guest::{ensure, module, raw, soft_context, work, ResultExt, Tap, TestResult};

const PLAN: usize = 12;
const WAIT: Duration = Duration::from_secs(5);

/// A child monitored from its start that exits after `ms`: the context,
/// loaded, ACTIVE and started.
fn monitored_child(mode: &str, args: &[&str]) -> Result<(Child, Context), String> {
    let child = Child::spawn(mode, args)?;
    let (ctx, _) = soft_context()?;
    ctx.load(child.pid()).ctx("LOAD")?;
    ctx.wait_active(WAIT).ctx("ACTIVE")?;
    ctx.start().ctx("START")?;
    Ok((child, ctx))
}

fn end_message(ctx: &Context, tid: u32) -> TestResult {
    let msg = ctx.next_message(Some(WAIT)).ctx("waiting for a message")?;
    let msg = msg.ok_or_else(|| format!("no message within {} s", WAIT.as_secs()))?;
    diag(format!("message: {msg:?}"));
    ensure!(
        msg.kind == MessageKind::End,
        "message kind {:?}, END expected",
        msg.kind
    );
    ensure!(msg.tid == tid, "END for tid {}, expected {tid}", msg.tid);
    Ok(())
}

fn exit_sequence() -> Vec<(&'static str, TestResult)> {
    let mut out = Vec::new();
    let (mut child, ctx) = match monitored_child("exit-after", &["300"]) {
        Ok(x) => x,
        Err(e) => {
            for name in NAMES_EXIT {
                out.push((name, Err(e.clone())));
            }
            return out;
        }
    };
    let pid = child.pid();
    out.push((NAMES_EXIT[0], end_message(&ctx, pid)));
    let _ = child.wait_timeout(WAIT);
    out.push((
        NAMES_EXIT[1],
        (|| {
            let st = ctx.state().ctx("GET_STATE")?;
            diag(format!("state after exit: {st:?}"));
            ensure!(st.has_exited(), "status {:#x} lacks EXITED", st.status);
            Ok(())
        })(),
    ));
    out.push((
        NAMES_EXIT[2],
        (|| {
            let fd = ctx.as_raw_fd();
            let rev = raw::poll_one(fd, libc::POLLIN, 2000).map_err(perfmon::errno_name)?;
            ensure!(
                rev & libc::POLLHUP != 0,
                "poll revents {rev:#x} after draining: POLLHUP expected"
            );
            ctx.set_nonblocking(true).ctx("O_NONBLOCK")?;
            match raw::read_fd(fd, 64) {
                Ok(b) if b.is_empty() => Ok(()),
                Ok(b) => Err(format!("read after draining returned {} bytes", b.len())),
                Err(libc::EAGAIN) => {
                    diag("read after exit and drain: EAGAIN (EOF expected)");
                    Err("read after drain: EAGAIN, not end of file".into())
                }
                Err(e) => Err(format!("read after drain: {}", perfmon::errno_name(e))),
            }
        })(),
    ));
    out.push((
        NAMES_EXIT[3],
        (|| {
            let a = ctx.read().ctx("READ_PMDS after exit")?;
            std::thread::sleep(Duration::from_millis(50));
            let b = ctx.read().ctx("READ_PMDS again")?;
            diag(format!("final counts: {a:?}"));
            ensure!(a == b, "final counts changed: {a:?} -> {b:?}");
            ensure!(a.values[0] > 0, "task-clock 0");
            ensure!(
                a.values[1] >= 20,
                "{} context switches for 300 ms of 5 ms naps",
                a.values[1]
            );
            Ok(())
        })(),
    ));
    out.push((
        NAMES_EXIT[4],
        (|| {
            let st = ctx.state().ctx("GET_STATE")?;
            let r = ctx.unload();
            diag(format!(
                "UNLOAD after exit in state {}: {:?}",
                st.state.name(),
                r.as_ref().err().map(|e| e.to_string())
            ));
            match (st.state, r) {
                (CtxState::Loaded, Ok(())) => {
                    let s2 = ctx.state().ctx("GET_STATE")?;
                    ensure!(s2.state == CtxState::Unloaded, "after UNLOAD: {s2:?}");
                    Ok(())
                }
                (CtxState::Unloaded, Err(e)) if e.errno() == Some(libc::EBADFD) => Ok(()),
                (s, r) => Err(format!("UNLOAD in state {}: {r:?}", s.name())),
            }
        })(),
    ));
    out
}

const NAMES_EXIT: [&str; 5] = [
    "child exits: END message with its tid (poll, read)",
    "GET_STATE says EXITED",
    "POLLHUP once drained, then read() gives end of file",
    "final counts readable and stable",
    "UNLOAD after exit agrees with the state",
];

fn messages_iterator() -> TestResult {
    // Long enough (~300 ms) to be attached before it exits, even on the
    // KASAN kernel under a loaded QEMU.
    let (mut child, ctx) = monitored_child("sleeps", &["300"])?;
    child.wait_timeout(WAIT)?;
    // Wait for the message to be queued, then drain non-blocking.
    let rev = raw::poll_one(ctx.as_raw_fd(), libc::POLLIN, 5000).map_err(perfmon::errno_name)?;
    ensure!(rev & libc::POLLIN != 0, "no POLLIN after exit: {rev:#x}");
    ctx.set_nonblocking(true).ctx("O_NONBLOCK")?;
    let msgs: Vec<_> = ctx.messages().collect::<Result<_, _>>().ctx("messages")?;
    ensure!(
        msgs.len() == 1 && msgs[0].kind == MessageKind::End,
        "messages: {msgs:?}"
    );
    Ok(())
}

fn self_thread_exit() -> TestResult {
    let h = std::thread::spawn(|| -> Result<(Context, u32), String> {
        let (ctx, _) = soft_context()?;
        ctx.load(0).ctx("LOAD self")?;
        ctx.start().ctx("START")?;
        work::spin(Duration::from_millis(10));
        std::thread::sleep(Duration::from_millis(2));
        Ok((ctx, perfmon::process::gettid()))
    });
    let (ctx, tid) = h.join().map_err(|_| "thread panicked".to_string())??;
    end_message(&ctx, tid)?;
    let c = ctx.read().ctx("READ_PMDS")?;
    diag(format!("thread {tid} final counts {c:?}"));
    ensure!(
        c.values[0] >= 5_000_000,
        "task-clock {} after a 10 ms spin",
        c.values[0]
    );
    Ok(())
}

fn killed_child() -> TestResult {
    let (child, ctx) = monitored_child("busy", &[])?;
    std::thread::sleep(Duration::from_millis(50));
    let pid = child.pid();
    drop(child); // SIGKILL and reap
    end_message(&ctx, pid)
}

fn zombie_cleanup() -> TestResult {
    let mut child = Child::spawn("busy", &[])?;
    {
        let (ctx, _) = soft_context()?;
        ctx.load(child.pid()).ctx("LOAD")?;
        ctx.wait_active(WAIT).ctx("ACTIVE")?;
        ctx.start().ctx("START")?;
        std::thread::sleep(Duration::from_millis(20));
        // Closed here while attached to a running thread.
    }
    std::thread::sleep(Duration::from_millis(50));
    let s = perfmon::sysfs::SysInfo::read();
    diag(format!(
        "after close while attached: live={:?} zombie={:?}",
        s.live_contexts, s.zombie_contexts
    ));
    child.kill();
    module::wait_contexts(0, WAIT)
}

fn main() {
    pfm_guest::child::dispatch();
    let mut t = Tap::new(PLAN);
    pfm_guest::watchdog(Duration::from_secs(240));
    t.require("insmod perfmon.ko", module::insmod(&[]));
    for (name, r) in exit_sequence() {
        t.result(name, r);
    }
    t.run(
        "messages() on a non-blocking fd yields END and stops",
        messages_iterator,
    );
    t.run(
        "thread monitoring itself exits: END, counts readable",
        self_thread_exit,
    );
    t.run("SIGKILLed child: END message", killed_child);
    t.run(
        "fd closed while attached: no zombie left once the child exits",
        zombie_cleanup,
    );
    t.run("no live context after all were closed", || {
        module::wait_contexts(0, WAIT)
    });
    t.run("rmmod perfmon", module::rmmod);
    t.finish();
}
