//! pfm_test_ptrace: ptrace's rule in full, for a loader without privileges
//! (issue 32; Documentation/perfmon.rst, "Permissions"). Runs as root; the
//! loaders drop to uid 1000. perf_event_open, by the same observer on the
//! same target, is the oracle for every verdict (`perf_event_paranoid` 1
//! during the cases, so that perf's answer is ptrace's alone).
//!
//! - A uid-1000 target holding a capability its loader lacks (a KEEPCAPS
//!   daemon): LOAD is refused with perf's errno (EACCES), and a sampling
//!   buffer with call chains set up before the LOAD holds no entry. A
//!   target without capabilities is loaded and sampled (the control).
//! - User namespaces: a uid-1000 loader in a user namespace of its own
//!   cannot monitor a uid-1000 process outside it; a uid-1000 loader
//!   outside may monitor a process in a namespace it created.
//! - Revocation without exec: a thread of a uid-1000 process (which holds
//!   CAP_SETUID, as its loader does) sampled by the task-clock timer (and
//!   by PMIs on `intel_arch_sim`) calls
//!   setresuid(2) to another user, without exec: REVOKED, and no entry
//!   from the code it runs after the call returns.
//! - The kernel-mode bit is the loader's right: a context whose PMC counts
//!   in kernel mode, written by root, is refused to a uid-1000 LOAD of it
//!   and of its CLONE (EACCES; `intel_arch_sim`).
//! - `perf_event_paranoid` unreadable at `insmod` (its root's /proc is not
//!   a directory): the strictest reading, never the caller's /proc.
//! - A LOAD refused after the hardware claim gives the claim back before
//!   it returns (`hw_claimed`, `intel_arch_sim`).

use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use perfmon::abi::*;
use perfmon::perf::{PerfCounter, SoftwareEvent};
use perfmon::{Context, MessageKind, SampleBuffer};
use pfm_guest::child::{field, num_field, run_self as run_child, CHILD_FLAG};
use pfm_guest::frames::{code, iterations_per_ms, run_chain};
use pfm_guest::raw;
use pfm_guest::{ensure, module, work, ResultExt, Tap, TestResult};

const PLAN: usize = 12;
const UID: u32 = 1000;
const CAP_NET_RAW: u32 = 13;
const CAP_SETUID: u32 = 7;
/// Where `insmod` runs without /proc.
const NOPROC_ROOT: &str = "/tmp/pfm-noproc-root";

/// Root drops to `UID` keeping the capabilities `caps` (permitted and
/// effective), and stays dumpable (a uid change makes a process
/// non-dumpable, which ptrace refuses for its own reason).
fn become_user_with(caps: u32) -> Result<(), String> {
    pfm_test_support::user::become_user_keeping(UID, UID, caps)
        .map_err(|e| format!("keepcaps, setresuid, capset: errno {e}"))?;
    // SAFETY: a plain prctl.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) } != 0 {
        return Err(format!("PR_SET_DUMPABLE: errno {}", raw::errno()));
    }
    Ok(())
}

/// A new user namespace for the caller (its uid unmapped inside: its kuid
/// is what the module compares).
fn new_user_ns() -> Result<(), String> {
    // SAFETY: no pointers.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER) } != 0 {
        return Err(format!("unshare(CLONE_NEWUSER): errno {}", raw::errno()));
    }
    Ok(())
}

fn errno_name_of<T>(r: &perfmon::Result<T>) -> &'static str {
    match r {
        Ok(_) => "ok",
        Err(e) => perfmon::errno_name(e.errno().unwrap_or(0)),
    }
}

/// `intel_arch_sim`'s unhalted cycles in user mode (EN | USR, event
/// 0x3c): one per nanosecond the thread runs.
const SIM_CYCLES_USR: u64 = 0x41_003c;

/// A context sampling PMC 0's `event` every `period` (PMD 0; task-clock
/// ns on the soft model) with call chains of depth 4, the buffer mapped;
/// not loaded.
fn sampling_context(event: u64, period: u64) -> Result<(Context, SampleBuffer), String> {
    let ctx = Context::open().ctx("open")?;
    let width = ctx.info().ctx("GET_INFO")?.counter_width;
    ctx.write_pmcs(&mut [PfmPmc {
        reg_num: 0,
        reg_value: event,
        ..Default::default()
    }])
    .ctx("WRITE_PMCS")?;
    // The soft model's PMDs are `width` bits wide; a hardware model's
    // are virtualised to 64 bits whatever its counters' width.
    let minus_p = if event == SIM_CYCLES_USR {
        period.wrapping_neg()
    } else {
        pfm_guest::minus_period(period, width)
    };
    ctx.write_pmds(&mut [PfmPmd {
        reg_num: 0,
        reg_value: minus_p,
        reg_short_reset: minus_p,
        reg_long_reset: minus_p,
        ..Default::default()
    }])
    .ctx("WRITE_PMDS")?;
    let pages = 64;
    let setup = PfmSmplSetup {
        data_pages: pages,
        flags: PFM_SMPL_DROP,
        chain_depth: 4,
        ..Default::default()
    };
    ctx.setup_sampling_with(&setup).ctx("SMPL_SETUP")?;
    let buf = ctx.map_samples(pages).ctx("mmap of the buffer")?;
    Ok((ctx, buf))
}

/// Child mode `ptrace-target KIND`: a uid-1000 process that spins, as
/// KIND: `plain`, `netraw` (CAP_NET_RAW kept) or `userns` (in a user
/// namespace it created). Prints `ready` once set up; ends with its parent.
fn target(kind: &str) -> i32 {
    let r = match kind {
        "netraw" => become_user_with(1 << CAP_NET_RAW),
        "userns" => raw::become_user(UID, UID)
            .map_err(|e| format!("setresuid: errno {e}"))
            .and_then(|()| new_user_ns()),
        _ => raw::become_user(UID, UID).map_err(|e| format!("setresuid: errno {e}")),
    };
    if let Err(e) = r {
        println!("error={e}");
        return 3;
    }
    // A uid change made the process non-dumpable, which ptrace refuses
    // for a reason of its own: a user's processes started normally are
    // dumpable.
    // SAFETY: a plain prctl.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) };
    // After the credential change, which clears the parent-death signal.
    raw::die_with_parent();
    println!("ready");
    let end = Instant::now() + Duration::from_secs(60);
    while Instant::now() < end {
        work::spin(Duration::from_millis(5));
    }
    0
}

/// Child mode `ptrace-observe PID KIND`: as uid 1000 without capabilities
/// (in a new user namespace if KIND is `userns`), opens a perf counter on
/// PID, and LOADs a sampling context on it; prints both answers and the
/// entries the buffer holds 200 ms later.
fn observe(pid: u32, kind: &str) -> i32 {
    if let Err(e) = raw::become_user(UID, UID) {
        println!("error=setuid {e}");
        return 3;
    }
    if kind == "userns" {
        if let Err(e) = new_user_ns() {
            println!("error={e}");
            return 3;
        }
    }
    let perf = PerfCounter::open(SoftwareEvent::TaskClock, pid);
    let (ctx, mut buf) = match sampling_context(PFM_SOFT_EV_TASK_CLOCK, 1_000_000) {
        Ok(c) => c,
        Err(e) => {
            println!("error={}", e.replace(' ', "_"));
            return 3;
        }
    };
    let load = ctx.load_and_start(pid);
    std::thread::sleep(Duration::from_millis(200));
    let entries = buf.take_samples().len();
    println!(
        "perf={} pfm={} entries={entries}",
        errno_name_of(&perf),
        errno_name_of(&load)
    );
    0
}

/// Child mode `ptrace-setuid EVENT`: a uid-1000 process holding CAP_SETUID
/// samples (EVENT every 1 ms of it: task-clock through the timer on the
/// soft model, simulated cycles through PMIs) one of its threads, which
/// spins, then
/// calls setresuid(2) to uid 1001 for itself alone (the raw system call:
/// no exec, and not glibc's all-threads broadcast), then runs the chain
/// loop for 300 ms. Prints the entries before and in the loop, and the
/// messages.
fn setuid_case_child(event: u64) -> i32 {
    if let Err(e) = become_user_with(1 << CAP_SETUID) {
        println!("error={}", e.replace(' ', "_"));
        return 3;
    }
    let (ctx, mut buf) = match sampling_context(event, 1_000_000) {
        Ok(c) => c,
        Err(e) => {
            println!("error={}", e.replace(' ', "_"));
            return 3;
        }
    };
    let per_ms = iterations_per_ms();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let worker = std::thread::spawn(move || {
        // SAFETY: no preconditions.
        let _ = tid_tx.send(unsafe { libc::gettid() } as u32);
        let _ = go_rx.recv();
        work::spin(Duration::from_millis(100));
        // SAFETY: the raw system call changes this thread's ids only.
        let r = unsafe { libc::syscall(libc::SYS_setresuid, 1001, 1001, 1001) };
        let e = if r == 0 { 0 } else { raw::errno() };
        run_chain(per_ms * 300, 0, None);
        e
    });
    let Ok(tid) = tid_rx.recv() else {
        println!("error=no_tid");
        return 3;
    };
    if let Err(e) = ctx.load_and_start(tid) {
        println!("error=LOAD_{}", perfmon::errno_name(e.errno().unwrap_or(0)));
        return 3;
    }
    let _ = go_tx.send(());
    let setuid_errno = worker.join().unwrap_or(-1);
    let samples = buf.take_samples();
    let c = code();
    let in_loop = samples.iter().filter(|s| c.in_loop(s.entry.ip)).count();
    let _ = ctx.set_nonblocking(true);
    let revoked = ctx
        .messages()
        .filter_map(|m| m.ok())
        .filter(|m| m.kind == MessageKind::Revoked)
        .count();
    println!(
        "setuid={setuid_errno} entries={} in_loop={in_loop} revoked={revoked}",
        samples.len()
    );
    0
}

/// Child mode `ptrace-kernel-bit FD`: as uid 1000, LOADs itself with the
/// context FD (inherited, programmed by root to count in kernel mode),
/// and with a CLONE of it.
fn kernel_bit_child(fd: i32) -> i32 {
    if let Err(e) = raw::become_user(UID, UID) {
        println!("error=setuid {e}");
        return 3;
    }
    let load = |fd: i32| {
        let mut arg = PfmLoad::default();
        match raw::ioctl_in(fd, PFM_IOC_LOAD, &mut arg) {
            Ok(_) => "ok",
            Err(e) => perfmon::errno_name(e),
        }
    };
    let mut c = PfmClone {
        flags: PFM_CLONE_CLOEXEC,
        ..Default::default()
    };
    let cloned = match raw::ioctl_in(fd, PFM_IOC_CLONE, &mut c) {
        Ok(new_fd) => load(new_fd),
        Err(_) => "clone_failed",
    };
    println!("direct={} clone={cloned}", load(fd));
    0
}

fn own_dispatch() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) != Some(CHILD_FLAG) {
        return;
    }
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    let code = match arg(2) {
        "ptrace-target" => target(arg(3)),
        "ptrace-observe" => observe(arg(3).parse().unwrap_or(0), arg(4)),
        "ptrace-setuid" => setuid_case_child(arg(3).parse().unwrap_or(0)),
        "ptrace-kernel-bit" => kernel_bit_child(arg(3).parse().unwrap_or(-1)),
        _ => return,
    };
    std::process::exit(code);
}

/// A spinning target of `kind`, once it says it is ready.
struct Target(Child);

impl Target {
    fn spawn(kind: &str) -> Result<Self, String> {
        let exe = std::env::current_exe().ctx("current_exe")?;
        let mut child = Command::new(exe)
            .args([CHILD_FLAG, "ptrace-target", kind])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .ctx("spawn target")?;
        let out = child.stdout.take().ok_or("no stdout")?;
        let mut line = String::new();
        let _ = BufReader::new(out).read_line(&mut line);
        let t = Target(child);
        ensure!(line.trim() == "ready", "target {kind}: {line:?}");
        Ok(t)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An observer of `kind` against a target of `target_kind`: perf's answer,
/// ours, the entries sampled.
fn observe_case(target_kind: &str, kind: &str) -> Result<(String, String, u64), String> {
    let t = Target::spawn(target_kind)?;
    let pid = t.pid().to_string();
    let out = run_child(&["ptrace-observe", &pid, kind], Duration::from_secs(60))?;
    drop(t);
    ensure!(field(&out, "error").is_none(), "{out}");
    Ok((
        field(&out, "perf").unwrap_or("?").to_string(),
        field(&out, "pfm").unwrap_or("?").to_string(),
        num_field(&out, "entries")?,
    ))
}

fn set_paranoid(level: &str) -> TestResult {
    std::fs::write("/proc/sys/kernel/perf_event_paranoid", level).ctx("write perf_event_paranoid")
}

/// Unprivileged user namespaces allowed (Debian's knob, where present).
fn allow_userns() {
    let _ = std::fs::write("/proc/sys/kernel/unprivileged_userns_clone", "1");
}

fn control_case() -> TestResult {
    let (perf, pfm, entries) = observe_case("plain", "plain")?;
    ensure!(
        perf == "ok" && pfm == "ok" && entries > 0,
        "a uid-1000 target without capabilities: perf {perf}, pfm {pfm}, {entries} entries"
    );
    Ok(())
}

fn capability_case() -> TestResult {
    let (perf, pfm, entries) = observe_case("netraw", "plain")?;
    ensure!(
        perf == "EACCES",
        "perf_event_open said {perf}: the oracle is not ptrace's rule"
    );
    ensure!(
        pfm == perf,
        "LOAD of a target holding CAP_NET_RAW said {pfm}, perf {perf}"
    );
    ensure!(
        entries == 0,
        "{entries} entries sampled from the refused target"
    );
    Ok(())
}

fn userns_observer_case() -> TestResult {
    let (perf, pfm, entries) = observe_case("plain", "userns")?;
    ensure!(perf == "EACCES", "perf_event_open said {perf}");
    ensure!(
        pfm == perf,
        "LOAD from a user namespace of the loader's own said {pfm}, perf {perf}"
    );
    ensure!(entries == 0, "{entries} entries");
    Ok(())
}

fn userns_creator_case() -> TestResult {
    let (perf, pfm, entries) = observe_case("userns", "plain")?;
    ensure!(
        perf == "ok" && pfm == "ok" && entries > 0,
        "the namespace's creator: perf {perf}, pfm {pfm}, {entries} entries"
    );
    Ok(())
}

/// The setresuid case with PMC 0 counting `event`.
fn setuid_case(event: u64) -> TestResult {
    let out = run_child(
        &["ptrace-setuid", &event.to_string()],
        Duration::from_secs(120),
    )?;
    ensure!(field(&out, "error").is_none(), "{out}");
    ensure!(num_field(&out, "setuid")? == 0, "setresuid failed: {out}");
    ensure!(num_field(&out, "revoked")? == 1, "REVOKED messages: {out}");
    ensure!(
        num_field(&out, "entries")? > 0,
        "nothing sampled before the setresuid: the case did not run: {out}"
    );
    ensure!(
        num_field(&out, "in_loop")? == 0,
        "entries from the code run after setresuid returned: {out}"
    );
    Ok(())
}

/// Root programs a context with a PMC counting in kernel mode (on
/// `intel_arch_sim`); a uid-1000 holder of the file may not LOAD it or
/// its CLONE.
fn kernel_bit_case() -> TestResult {
    module::rmmod()?;
    module::insmod(&["pmu=intel_arch_sim"])?;
    let res = (|| {
        let ctx = Context::open().ctx("open")?;
        ctx.write_pmcs(&mut [PfmPmc {
            reg_num: 0,
            reg_value: 0x43_003c, // unhalted cycles, USR | OS | EN
            ..Default::default()
        }])
        .ctx("WRITE_PMCS by root")?;
        let fd = ctx.as_raw_fd();
        // Across the exec of the child: the context's descriptor.
        // SAFETY: clears FD_CLOEXEC on our own descriptor.
        unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
        let out = run_child(
            &["ptrace-kernel-bit", &fd.to_string()],
            Duration::from_secs(60),
        )?;
        ensure!(
            field(&out, "direct") == Some("EACCES") && field(&out, "clone") == Some("EACCES"),
            "uid 1000 loading a context that counts in kernel mode: {out}"
        );
        // Root itself may.
        ctx.load(0).ctx("root's LOAD")?;
        ctx.unload().ctx("UNLOAD")?;
        Ok(())
    })();
    module::rmmod()?;
    module::insmod(&[])?;
    res
}

/// `insmod` where /proc is not a directory (a root whose `proc` is a
/// plain file): the module cannot open `perf_event_paranoid` (ENOTDIR, not
/// ENOENT, which would read as "no such setting") and must take the
/// strictest reading, even though the callers' /proc says 1.
fn noproc_case() -> TestResult {
    module::rmmod()?;
    let _ = std::fs::create_dir_all(NOPROC_ROOT);
    std::fs::write(format!("{NOPROC_ROOT}/proc"), "not a directory\n").ctx("write proc")?;
    let ko = std::fs::File::open(module::module_path()).ctx("open perfmon.ko")?;
    let fd = ko.as_raw_fd();
    let status = raw::in_forked_child(|| {
        let root = c"/tmp/pfm-noproc-root";
        // SAFETY: C strings and the module's descriptor, inherited.
        unsafe {
            if libc::chroot(root.as_ptr()) != 0 || libc::chdir(c"/".as_ptr()) != 0 {
                return 2;
            }
            if libc::syscall(libc::SYS_finit_module, fd, c"".as_ptr(), 0) != 0 {
                return 3;
            }
        }
        0
    })
    .map_err(|e| format!("fork: errno {e}"))?;
    ensure!(
        status == 0,
        "finit_module in the empty root: status {status}"
    );
    ensure!(
        module::wait_for(Duration::from_secs(2), || std::path::Path::new(
            perfmon::DEVICE
        )
        .exists()),
        "no /dev/perfmon after the insmod"
    );
    let res = (|| {
        let user = raw::in_forked_child(|| {
            if raw::become_user(UID, UID).is_err() {
                return 2;
            }
            // SAFETY: a C string; the descriptor is closed with the child.
            let fd = unsafe { libc::open(c"/dev/perfmon".as_ptr(), libc::O_RDWR) };
            match (fd, raw::errno()) {
                (0.., _) => 0,
                (_, libc::EACCES) => 1,
                _ => 3,
            }
        })
        .map_err(|e| format!("fork: errno {e}"))?;
        ensure!(
            user == 1,
            "uid 1000's open with perf_event_paranoid unreadable at insmod: status {user} (1 = EACCES, 0 = opened)"
        );
        Context::open().ctx("root's open")?;
        Ok(())
    })();
    module::rmmod()?;
    module::insmod(&[])?;
    res
}

/// 200 LOADs refused (EBUSY: the thread has a context) on
/// `intel_arch_sim`: right after each, `hw_claimed` is the one holder's.
fn claim_case() -> TestResult {
    module::rmmod()?;
    module::insmod(&["pmu=intel_arch_sim"])?;
    let res = (|| {
        let holder = Context::open().ctx("open")?;
        holder.load(0).ctx("LOAD")?;
        let mut late = 0;
        for _ in 0..200 {
            let other = Context::open().ctx("open")?;
            let r = other.load(0);
            ensure!(
                r.as_ref().err().and_then(|e| e.errno()) == Some(libc::EBUSY),
                "second LOAD of the thread: {}",
                errno_name_of(&r)
            );
            if module::sysfs_num("hw_claimed") != Some(1) {
                late += 1;
            }
        }
        holder.unload().ctx("UNLOAD")?;
        ensure!(
            late == 0,
            "{late} of 200 refused LOADs still held their claim when they returned"
        );
        Ok(())
    })();
    module::rmmod()?;
    module::insmod(&[])?;
    res
}

fn main() {
    own_dispatch();
    pfm_guest::child::dispatch();
    let mut t = Tap::new(PLAN);
    pfm_guest::watchdog(Duration::from_secs(600));
    if raw::geteuid() != 0 {
        t.bail_out("must run as root (targets with capabilities, other users)");
    }
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .unwrap_or_else(|_| "2".into());
    allow_userns();
    t.require("insmod perfmon.ko", module::insmod(&[]));
    t.require("perf_event_paranoid 1", set_paranoid("1"));
    t.run(
        "uid 1000 LOADs a uid-1000 target without capabilities, as perf opens it",
        control_case,
    );
    t.run(
        "a target holding a capability its loader lacks: EACCES as perf, no entry",
        capability_case,
    );
    t.run(
        "a loader in a user namespace of its own: a same-kuid process outside is EACCES, as perf",
        userns_observer_case,
    );
    t.run(
        "a loader outside may monitor a process in a user namespace it created, as perf",
        userns_creator_case,
    );
    t.run(
        "setresuid(2) without exec, task-clock timer: REVOKED, no entry from the code after it returns",
        || setuid_case(PFM_SOFT_EV_TASK_CLOCK),
    );
    t.run(
        "setresuid(2) without exec, PMIs of intel_arch_sim: REVOKED, no entry after it returns",
        || {
            module::rmmod()?;
            module::insmod(&["pmu=intel_arch_sim"])?;
            let r = setuid_case(SIM_CYCLES_USR);
            module::rmmod()?;
            module::insmod(&[])?;
            r
        },
    );
    t.run(
        "a context counting in kernel mode, written by root: uid 1000's LOAD and CLONE's LOAD are EACCES",
        kernel_bit_case,
    );
    t.run(
        "perf_event_paranoid unreadable at insmod (ENOTDIR): the strictest reading, not the caller's /proc",
        noproc_case,
    );
    t.run(
        "a LOAD refused after the hardware claim gives it back before it returns",
        claim_case,
    );
    let _ = set_paranoid(paranoid.trim());
    t.run("rmmod perfmon", module::rmmod);
    t.finish();
}
