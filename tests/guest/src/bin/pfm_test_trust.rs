//! pfm_test_trust: the trust boundary of a device every user can open
//! (issue 12). Runs as root; the tools drop to uid 1000.
//!
//! - A uid-1000 thread that monitors itself, with a forked process sharing
//!   the fd, execs a setuid-root copy of this program: REVOKED arrives, the
//!   counts freeze, and the new image's 50 naps are not counted (revoked
//!   before its first instruction).
//! - The exec race: a uid-1000 tool LOADs a child of its own the instant
//!   the child execs the setuid-root copy, 600 times: the monitoring never
//!   survives into the root image (no END, only REVOKED or EACCES), and
//!   task-clock never exceeds the CPU time the image reads at its start
//!   (its code is never counted).
//! - A monitored uid-1000 thread calling access(2) in a loop (which
//!   switches its subjective credentials) is never revoked: remote (a
//!   thread of the tool's process) and self.
//! - The per-user limit (`max_attached_per_user`): uid 1000 gets EDQUOT
//!   past it while another user can still LOAD.
//! - `pfm stat` of a setuid program as uid 1000 ends normally and warns
//!   that the counts stop at the exec.
//! - `kernel.perf_event_paranoid`: 3 refuses an unprivileged open (EACCES),
//!   2 lets an unprivileged user count in user mode only (`intel_arch_sim`).

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use perfmon::abi::*;
use perfmon::{Context, MessageKind};
use pfm_guest::child::{field, num_field, run_self as run_child, CHILD_FLAG};
use pfm_guest::raw;
use pfm_guest::tap::diag;
use pfm_guest::{ensure, module, ResultExt, Tap, TestResult};

const PLAN: usize = 9;
const SUID_COPY: &str = "/tmp/pfm-suid-trust";
/// Naps the setuid image takes: each is a context switch that must not
/// be counted.
const NAPS: u64 = 50;
/// Rounds of the exec race in `make check` (about 0.1 s each on the debug
/// kernel); `PFM_TRUST_RACE_ROUNDS` asks for more.
const RACE_ROUNDS: usize = 600;
/// The setuid image of the race spins this long after reporting its CPU
/// time: monitored, its code would show in task-clock.
const IMAGE_SPIN_MS: u64 = 20;

fn errno_of(r: &perfmon::Result<()>) -> Option<i32> {
    r.as_ref().err().and_then(|e| e.errno())
}

/// A context counting context-switches (PMD0) and task-clock (PMD1).
fn counting_context() -> perfmon::Result<Context> {
    let ctx = Context::open()?;
    ctx.write_pmcs(&mut [
        PfmPmc {
            reg_num: 0,
            reg_value: PFM_SOFT_EV_CONTEXT_SWITCHES,
            ..Default::default()
        },
        PfmPmc {
            reg_num: 1,
            reg_value: PFM_SOFT_EV_TASK_CLOCK,
            ..Default::default()
        },
    ])?;
    Ok(ctx)
}

fn values(ctx: &Context) -> [u64; 2] {
    let mut r = [
        PfmPmd {
            reg_num: 0,
            ..Default::default()
        },
        PfmPmd {
            reg_num: 1,
            ..Default::default()
        },
    ];
    match ctx.read_pmds(&mut r) {
        Ok(_) => [r[0].reg_value, r[1].reg_value],
        Err(_) => [u64::MAX; 2],
    }
}

/// The types of the messages that arrive within `timeout`, up to the first
/// REVOKED or END.
fn messages_until_final(ctx: &Context, timeout: Duration) -> Vec<u32> {
    let deadline = Instant::now() + timeout;
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        match ctx.next_message(Some(Duration::from_millis(50))) {
            Ok(Some(m)) => {
                let t = match m.kind {
                    MessageKind::Overflow => PFM_MSG_OVFL,
                    MessageKind::End => PFM_MSG_END,
                    MessageKind::Revoked => PFM_MSG_REVOKED,
                    MessageKind::SmplFull => PFM_MSG_SMPL_FULL,
                    MessageKind::Unknown(t) => t,
                };
                seen.push(t);
                if t == PFM_MSG_REVOKED || t == PFM_MSG_END {
                    break;
                }
            }
            Ok(None) => {}
            Err(_) => break,
        }
    }
    seen
}

fn naps(n: u64) {
    for _ in 0..n {
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Child mode `trust-selfexec`: as uid 1000, monitor itself, fork a reader
/// sharing the fd, exec the setuid copy. The reader prints the verdict.
fn selfexec() -> i32 {
    if raw::become_user(1000, 1000).is_err() {
        println!("error=setuid");
        return 3;
    }
    let ctx = match counting_context().and_then(|c| {
        c.load(0)?;
        c.start()?;
        Ok(c)
    }) {
        Ok(c) => c,
        Err(e) => {
            println!("error=self-load {e}");
            return 3;
        }
    };
    naps(5);
    let before = values(&ctx);
    let parent = std::process::id();
    // SAFETY: this child process is single-threaded (no thread was started
    // in it): fork is safe; the child only reads through the shared fd.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let msgs = messages_until_final(&ctx, Duration::from_secs(20));
        let at_final = values(&ctx);
        // Wait for the setuid image to finish its naps and exit.
        let deadline = Instant::now() + Duration::from_secs(30);
        // SAFETY: no preconditions.
        while unsafe { libc::getppid() } as u32 == parent && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let after = values(&ctx);
        println!(
            "msgs={msgs:?} cs_before={} cs_final={} cs_after={} tc_final={} tc_after={}",
            before[0], at_final[0], after[0], at_final[1], after[1]
        );
        // SAFETY: leaves without running the parent's destructors twice.
        unsafe { libc::_exit(0) };
    }
    let err = exec_suid_naps();
    println!("error=exec {err}");
    4
}

/// Replaces this process with the setuid copy taking NAPS naps.
fn exec_suid_naps() -> std::io::Error {
    use std::os::unix::process::CommandExt;
    Command::new(SUID_COPY)
        .arg(CHILD_FLAG)
        .arg("suid-naps")
        .arg(NAPS.to_string())
        .exec()
}

/// Child mode `trust-race N`: as uid 1000, N times: fork a child that
/// execs the setuid copy at once, LOAD it meanwhile. Prints the tally.
fn race(rounds: usize) -> i32 {
    if raw::become_user(1000, 1000).is_err() {
        println!("error=setuid");
        return 3;
    }
    // Dropping from root left the process undumpable, and its children
    // with it: a uid-1000 tool could not monitor them at all. A real
    // uid-1000 tool's children are dumpable.
    // SAFETY: PR_SET_DUMPABLE takes an integer.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1) };
    let (mut loaded, mut refused, mut revoked, mut survived) = (0, 0, 0, 0);
    let mut other = Vec::new();
    let (mut user_counted, mut worst) = (0, 0);
    for round in 0..rounds {
        let ctx = match counting_context() {
            Ok(c) => c,
            Err(e) => {
                println!("error=open {e}");
                return 3;
            }
        };
        let (Ok((go_r, go_w)), Ok((rep_r, rep_w))) = (raw::pipe(), raw::pipe()) else {
            println!("error=pipe");
            return 3;
        };
        // SAFETY: single-threaded process; the child only waits and execs.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // Released by the tool, the child execs after a delay that
            // walks across the LOAD's duration, so LOADs land before,
            // during and after the exec's credential change.
            let _ = raw::read_fd(raw::fd_of(&go_r), 1);
            pfm_guest::work::spin(Duration::from_micros((round % 50) as u64 * 20));
            // The image reports its CPU time at its start on fd 3.
            // SAFETY: duplicates our own pipe end onto fd 3 (without
            // close-on-exec, so the image inherits it).
            unsafe { libc::dup2(raw::fd_of(&rep_w), 3) };
            let _ = exec_suid_short();
            // SAFETY: exec failed: leave at once.
            unsafe { libc::_exit(9) };
        }
        drop(go_r);
        drop(rep_w);
        let _ = raw::write_fd(raw::fd_of(&go_w), b"g");
        let r = ctx.load(pid as u32);
        match errno_of(&r) {
            None => {
                loaded += 1;
                let _ = ctx.start();
            }
            Some(libc::EACCES) => refused += 1,
            Some(e) => other.push(e),
        }
        let mut status = 0;
        // SAFETY: our child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        if r.is_ok() {
            let msgs = messages_until_final(&ctx, Duration::from_millis(500));
            // The image's CPU time at its first lines of code: counting
            // from START must have stopped before, so task-clock cannot
            // exceed it (exact: both are the thread's runtime).
            let image_start = raw::read_fd(raw::fd_of(&rep_r), 8)
                .ok()
                .and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
                .map(u64::from_ne_bytes);
            let clock = values(&ctx)[1];
            if let Some(start) = image_start {
                if clock > start {
                    user_counted += 1;
                    worst = worst.max(clock - start);
                }
            }
            if msgs.contains(&PFM_MSG_END) {
                survived += 1;
            } else if msgs.contains(&PFM_MSG_REVOKED) {
                revoked += 1;
            } else if let Ok(st) = ctx.state() {
                if st.state == perfmon::CtxState::Loaded && st.is_active() {
                    survived += 1;
                }
            }
        }
    }
    println!(
        "rounds={rounds} loaded={loaded} refused={refused} revoked={revoked} survived={survived} user_counted={user_counted} worst_ns={worst} other={} errnos={other:?}",
        other.len()
    );
    0
}

/// Replaces the forked child with the setuid copy spinning
/// [`IMAGE_SPIN_MS`] and taking 3 naps.
fn exec_suid_short() -> std::io::Error {
    use std::os::unix::process::CommandExt;
    Command::new(SUID_COPY)
        .arg(CHILD_FLAG)
        .arg("suid-spin-naps")
        .arg(IMAGE_SPIN_MS.to_string())
        .arg("3")
        .exec()
}

/// Child mode `trust-access`: as uid 1000, a thread calls access(2) in a
/// loop while this thread monitors it; then the thread monitors itself
/// doing the same. Prints whether either was revoked.
fn access_loop() -> i32 {
    if raw::become_user(1000, 1000).is_err() {
        println!("error=setuid");
        return 3;
    }
    let spin_access = |n: usize| {
        let path = c"/tmp";
        for i in 0..n {
            // SAFETY: a valid C string.
            unsafe { libc::access(path.as_ptr(), libc::R_OK) };
            if i % 64 == 0 {
                raw::sched_yield();
            }
        }
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let h = std::thread::spawn(move || {
        let _ = tx.send(perfmon::process::gettid());
        let _ = go_rx.recv();
        spin_access(20_000);
    });
    let Ok(tid) = rx.recv() else {
        return 3;
    };
    let remote = counting_context().and_then(|c| {
        c.load(tid)?;
        c.wait_active(Duration::from_secs(5))?;
        c.start()?;
        Ok(c)
    });
    let _ = go_tx.send(());
    let _ = h.join();
    let remote_ok = match &remote {
        Ok(c) => {
            let msgs = messages_until_final(c, Duration::from_millis(100));
            let st = c.state().map(|s| s.state);
            println!(
                "remote_msgs={msgs:?} remote_state={st:?} remote_cs={}",
                values(c)[0]
            );
            !msgs.contains(&PFM_MSG_REVOKED)
        }
        Err(e) => {
            println!("remote_error={e}");
            false
        }
    };
    let own = counting_context().and_then(|c| {
        c.load(0)?;
        c.start()?;
        Ok(c)
    });
    spin_access(20_000);
    let self_ok = match &own {
        Ok(c) => {
            let msgs = messages_until_final(c, Duration::from_millis(100));
            let st = c.state().map(|s| s.state);
            println!(
                "self_msgs={msgs:?} self_state={st:?} self_cs={}",
                values(c)[0]
            );
            !msgs.contains(&PFM_MSG_REVOKED) && st.ok() == Some(perfmon::CtxState::Loaded)
        }
        Err(e) => {
            println!("self_error={e}");
            false
        }
    };
    println!(
        "verdict={}",
        if remote_ok && self_ok {
            "ok"
        } else {
            "revoked"
        }
    );
    0
}

/// Child mode `trust-limit UID N`: as UID, N threads each LOAD themselves
/// and hold it until told; prints how many LOADs succeeded and the errnos.
fn limit(uid: u32, n: usize, hold: Duration) -> i32 {
    if raw::become_user(uid, uid).is_err() {
        println!("error=setuid");
        return 3;
    }
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(n + 1));
    let mut handles = Vec::new();
    for _ in 0..n {
        let b = barrier.clone();
        handles.push(std::thread::spawn(move || {
            let r = Context::open().and_then(|c| {
                c.load(0)?;
                Ok(c)
            });
            let e = match &r {
                Ok(_) => 0,
                Err(e) => e.errno().unwrap_or(-1),
            };
            b.wait();
            std::thread::sleep(hold);
            drop(r);
            e
        }));
    }
    barrier.wait();
    let results: Vec<i32> = handles
        .into_iter()
        .map(|h| h.join().unwrap_or(-2))
        .collect();
    let ok = results.iter().filter(|&&e| e == 0).count();
    let quota = results.iter().filter(|&&e| e == libc::EDQUOT).count();
    println!("loaded={ok} edquot={quota} all={results:?}");
    0
}

/// Child mode `trust-open UID`: as UID, open /dev/perfmon and write PMC0
/// with an Intel event counting in user mode, then also in kernel mode.
fn open_as(uid: u32) -> i32 {
    if raw::become_user(uid, uid).is_err() {
        println!("error=setuid");
        return 3;
    }
    let ctx = match Context::open() {
        Ok(c) => c,
        Err(e) => {
            println!("open={}", perfmon::errno_name(e.errno().unwrap_or(0)));
            return 0;
        }
    };
    println!("open=ok");
    for (name, value) in [("pmc_usr", 0x41_003c_u64), ("pmc_os", 0x43_003c)] {
        let r = ctx.write_pmcs(&mut [PfmPmc {
            reg_num: 0,
            reg_value: value,
            ..Default::default()
        }]);
        let v = match r {
            Ok(()) => "ok",
            Err(e) => perfmon::errno_name(e.errno().unwrap_or(0)),
        };
        println!("{name}={v}");
    }
    0
}

/// Child mode `trust-pfm-stat`: as uid 1000, `pfm stat` of the setuid
/// copy; prints pfm's exit status and its warning line, if any.
fn pfm_stat_suid() -> i32 {
    if raw::become_user(1000, 1000).is_err() {
        println!("error=setuid");
        return 3;
    }
    let out = Command::new("/bin/pfm")
        .args(["stat", "--", SUID_COPY, CHILD_FLAG, "suid-naps", "5"])
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let warned = err.contains("monitoring ended");
            println!("status={} warned={warned}", o.status.code().unwrap_or(-1));
        }
        Err(e) => println!("error=spawn {e}"),
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
        // The setuid image: ARG naps, then exit.
        Some("suid-naps") => {
            naps(num(3));
            0
        }
        // The setuid image of the race: ARG ms of user code first, then ARG2 naps.
        Some("suid-spin-naps") => {
            let start = pfm_guest::edges::thread_cpu_ns();
            let _ = raw::write_fd(3, &start.to_ne_bytes());
            pfm_guest::work::spin(Duration::from_millis(num(3)));
            naps(num(4));
            0
        }
        Some("trust-selfexec") => selfexec(),
        Some("trust-race") => race(num(3) as usize),
        Some("trust-access") => access_loop(),
        Some("trust-open") => open_as(num(3) as u32),
        Some("trust-pfm-stat") => pfm_stat_suid(),
        Some("trust-limit") => limit(
            num(3) as u32,
            num(4) as usize,
            Duration::from_millis(num(5)),
        ),
        _ => return,
    };
    std::process::exit(code);
}

fn make_suid_copy() -> TestResult {
    let exe = std::env::current_exe().ctx("current_exe")?;
    std::fs::copy(&exe, SUID_COPY).ctx("copy")?;
    std::os::unix::fs::chown(SUID_COPY, Some(0), Some(0)).ctx("chown")?;
    std::fs::set_permissions(SUID_COPY, std::fs::Permissions::from_mode(0o4755)).ctx("chmod")?;
    Ok(())
}

fn selfexec_case() -> TestResult {
    let out = run_child(&["trust-selfexec"], Duration::from_secs(60))?;
    ensure!(field(&out, "error").is_none(), "{out}");
    let msgs = field(&out, "msgs").unwrap_or("");
    ensure!(
        msgs.contains(&PFM_MSG_REVOKED.to_string()) && !msgs.contains(&PFM_MSG_END.to_string()),
        "messages {msgs}: expected REVOKED ({PFM_MSG_REVOKED}) and no END"
    );
    let (before, at, after) = (
        num_field(&out, "cs_before")?,
        num_field(&out, "cs_final")?,
        num_field(&out, "cs_after")?,
    );
    ensure!(
        at == after && num_field(&out, "tc_final")? == num_field(&out, "tc_after")?,
        "counts moved after REVOKED: {out}"
    );
    // The exec itself may switch a few times; the image's naps may not count.
    ensure!(
        at < before + NAPS,
        "{} switches counted across the exec: the setuid image's {NAPS} naps were monitored",
        at - before
    );
    Ok(())
}

fn race_case() -> TestResult {
    let rounds = std::env::var("PFM_TRUST_RACE_ROUNDS").unwrap_or_else(|_| RACE_ROUNDS.to_string());
    let out = run_child(&["trust-race", &rounds], Duration::from_secs(400))?;
    ensure!(field(&out, "error").is_none(), "{out}");
    let survived = num_field(&out, "survived")?;
    let loaded = num_field(&out, "loaded")?;
    let other = num_field(&out, "other")?;
    ensure!(
        survived == 0,
        "monitoring survived into the setuid image {survived} times"
    );
    ensure!(other == 0, "LOADs failed with other errnos: {out}");
    ensure!(
        num_field(&out, "user_counted")? == 0,
        "the setuid image's own code was counted before the revocation: {out}"
    );
    ensure!(
        loaded > 0,
        "no LOAD landed before the exec: the race was not run"
    );
    Ok(())
}

fn access_case() -> TestResult {
    let out = run_child(&["trust-access"], Duration::from_secs(120))?;
    ensure!(field(&out, "verdict") == Some("ok"), "{out}");
    Ok(())
}

fn set_paranoid(level: i32) -> TestResult {
    std::fs::write("/proc/sys/kernel/perf_event_paranoid", level.to_string())
        .ctx("write perf_event_paranoid")
}

/// perf_event_paranoid 3 (Debian's default): an unprivileged open is
/// refused with EACCES, root's is not; at 2, an unprivileged user counts in
/// user mode but not in kernel mode (on `intel_arch_sim`, whose PMCs have
/// the OS bit).
fn paranoid_case() -> TestResult {
    let before = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ctx("read perf_event_paranoid")?;
    let res = (|| {
        set_paranoid(3)?;
        let out = run_child(&["trust-open", "1000"], Duration::from_secs(30))?;
        ensure!(
            field(&out, "open") == Some("EACCES"),
            "paranoid 3, uid 1000: {out}"
        );
        let out = run_child(&["trust-open", "0"], Duration::from_secs(30))?;
        ensure!(field(&out, "open") == Some("ok"), "paranoid 3, root: {out}");
        set_paranoid(2)?;
        module::rmmod()?;
        module::insmod(&["pmu=intel_arch_sim"])?;
        let out = run_child(&["trust-open", "1000"], Duration::from_secs(30));
        let root = run_child(&["trust-open", "0"], Duration::from_secs(30));
        module::rmmod()?;
        module::insmod(&[])?;
        let (out, root) = (out?, root?);
        ensure!(
            field(&out, "open") == Some("ok")
                && field(&out, "pmc_usr") == Some("ok")
                && field(&out, "pmc_os") == Some("EINVAL"),
            "paranoid 2, uid 1000 on intel_arch_sim: {out}"
        );
        ensure!(
            field(&root, "pmc_os") == Some("ok"),
            "paranoid 2, root on intel_arch_sim: {root}"
        );
        Ok(())
    })();
    set_paranoid(before.trim().parse().unwrap_or(2))?;
    res
}

fn set_limit(n: u64) -> TestResult {
    std::fs::write(
        "/sys/module/perfmon/parameters/max_attached_per_user",
        n.to_string(),
    )
    .ctx("write max_attached_per_user")
}

fn limit_case() -> TestResult {
    set_limit(4)?;
    let res = (|| {
        // uid 1000 holds its 4 while uid 65534 LOADs: run both at once.
        let exe = std::env::current_exe().ctx("current_exe")?;
        let mut holder = Command::new(exe)
            .args([CHILD_FLAG, "trust-limit", "1000", "6", "3000"])
            .stdout(Stdio::piped())
            .spawn()
            .ctx("spawn")?;
        std::thread::sleep(Duration::from_millis(1500));
        let other = run_child(
            &["trust-limit", "65534", "2", "10"],
            Duration::from_secs(60),
        )?;
        let mut text = String::new();
        if let Some(mut o) = holder.stdout.take() {
            let _ = o.read_to_string(&mut text);
        }
        let _ = holder.wait();
        diag(format!("uid 1000: {}", text.trim()));
        ensure!(
            num_field(&text, "loaded")? == 4 && num_field(&text, "edquot")? == 2,
            "uid 1000 with a limit of 4: {text}"
        );
        ensure!(
            num_field(&other, "loaded")? == 2,
            "another user could not LOAD while uid 1000 was at its limit: {other}"
        );
        Ok(())
    })();
    set_limit(1024)?;
    res
}

fn main() {
    own_dispatch();
    pfm_guest::child::dispatch();
    let mut t = Tap::new(PLAN);
    pfm_guest::watchdog(Duration::from_secs(900));
    if raw::geteuid() != 0 {
        t.bail_out("must run as root (creates a setuid-root copy and other users)");
    }
    t.require("insmod perfmon.ko", module::insmod(&[]));
    t.require("setuid-root copy of this program in /tmp", make_suid_copy());
    t.run(
        "self-monitoring uid 1000 execs a setuid program: REVOKED, counts frozen, new image not counted",
        selfexec_case,
    );
    t.run(
        "LOAD racing a setuid exec (600 rounds): monitoring never survives into the root image",
        race_case,
    );
    t.run(
        "access(2) in a loop (subjective credentials) never revokes, remote or self",
        access_case,
    );
    t.run(
        "per-user limit: EDQUOT past max_attached_per_user while another user can LOAD",
        limit_case,
    );
    t.run(
        "pfm stat of a setuid program as uid 1000: ends normally and says the counts stop at the exec",
        || {
            let out = run_child(&["trust-pfm-stat"], Duration::from_secs(60))?;
            ensure!(
                field(&out, "status") == Some("0") && field(&out, "warned") == Some("true"),
                "{out}"
            );
            Ok(())
        },
    );
    t.run(
        "perf_event_paranoid: 3 refuses an unprivileged open (EACCES), 2 the kernel-mode bit",
        paranoid_case,
    );
    t.run("rmmod perfmon", module::rmmod);
    let _ = std::fs::remove_file(SUID_COPY);
    t.finish();
}
