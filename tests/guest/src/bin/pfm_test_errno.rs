//! pfm_test_errno: every ioctl with every class of bad input returns its
//! documented errno, the per-element error reporting of register array
//! calls (done, reg_flags) is right, and nothing is half-applied.
//!
//! Classes: unknown ioctl (ENOTTY); known number with a wrong size
//! (EINVAL); reserved bits in a PMC value, bad register numbers, non-zero
//! reserved fields and unknown flags (EINVAL, with PFM_REG_RETFL_* on the
//! bad element and `done` its index); count 0 (EINVAL) and count too big
//! (E2BIG); NULL, PROT_NONE, unmapped, read-only and kernel pointers
//! (EFAULT, state and values unchanged); operations in the wrong state
//! (EBADFD; LOAD of a loaded context EBUSY, as documented); LOAD targets
//! (ESRCH, EPERM); read() misuse, and read() into bad memory, which must
//! leave every message queued (overflows and END); READ_PMDS elements'
//! output fields (the period randomisation's, ignored on input);
//! PFM_REGFL_RANDOM's mask and seed (a mask that is not 2^k - 1 or is
//! above a reset value, a mask or a seed without the flag: EINVAL; seed 0:
//! the kernel's); reg_flags bits 16-23; live_contexts right after the
//! close of a self-monitoring context.

use std::os::fd::AsRawFd;
use std::time::Duration;

use perfmon::abi::*;
use perfmon::{errno_name, Context, CtxState};
use pfm_guest::raw::{
    self, ioctl_bad, ioctl_in, ioctl_none, with_size, BadAddr, Mapping, RegsArea,
};
use pfm_guest::tap::diag;
use pfm_guest::{ensure, module, work, ResultExt, Tap, TestResult};

type Case = (&'static str, Box<dyn Fn() -> TestResult>);

/// A register array call's result, its `done`, and the elements as returned.
type RegsOutcome<T> = (Result<i32, i32>, u32, Vec<T>);

fn name(r: Result<i32, i32>) -> String {
    match r {
        Ok(v) => format!("success ({v})"),
        Err(e) => errno_name(e).to_string(),
    }
}

fn expect(r: Result<i32, i32>, errno: i32) -> TestResult {
    ensure!(
        r == Err(errno),
        "got {}, expected {}",
        name(r),
        errno_name(errno)
    );
    Ok(())
}

fn open() -> Result<Context, String> {
    Context::open().ctx("open /dev/perfmon")
}

fn fd(ctx: &Context) -> i32 {
    ctx.as_raw_fd()
}

fn state(ctx: &Context) -> Result<CtxState, String> {
    Ok(ctx.state().ctx("GET_STATE")?.state)
}

/// A register array call with `elems` placed at the start of a fresh
/// area; returns the result, `done`, and the elements as returned.
fn regs_call<T: raw::Plain>(
    ctx: &Context,
    req: u32,
    elems: &[T],
    count: Option<u32>,
    tweak: impl FnOnce(&mut PfmRegsArg),
) -> Result<RegsOutcome<T>, String> {
    let area = RegsArea::new(16).map_err(|e| format!("mmap: {}", errno_name(e)))?;
    area.put(0, elems);
    let mut arg = PfmRegsArg {
        regs: area.addr(0),
        count: count.unwrap_or(elems.len() as u32),
        ..Default::default()
    };
    tweak(&mut arg);
    let r = ioctl_in(fd(ctx), req, &mut arg);
    Ok((r, arg.done, area.get(0, elems.len())))
}

/// A WRITE_PMCS of `pmcs` must fail with EINVAL, `done` = `bad`, the RETFL
/// bits `want` (any of them) set on element `bad` and no RETFL bit on the
/// elements before it.
fn pmcs_rejected(pmcs: &[PfmPmc], bad: usize, want: u32) -> TestResult {
    let ctx = open()?;
    let (r, done, back) = regs_call(&ctx, PFM_IOC_WRITE_PMCS, pmcs, None, |_| {})?;
    expect(r, libc::EINVAL)?;
    element_flags(
        done,
        bad,
        want,
        &back.iter().map(|p| p.reg_flags).collect::<Vec<_>>(),
    )
}

fn pmds_rejected(req: u32, pmds: &[PfmPmd], bad: usize, want: u32) -> TestResult {
    let ctx = open()?;
    let (r, done, back) = regs_call(&ctx, req, pmds, None, |_| {})?;
    expect(r, libc::EINVAL)?;
    element_flags(
        done,
        bad,
        want,
        &back.iter().map(|p| p.reg_flags).collect::<Vec<_>>(),
    )
}

fn element_flags(done: u32, bad: usize, want: u32, flags: &[u32]) -> TestResult {
    ensure!(
        done as usize == bad,
        "done = {done}, expected {bad} (index of the first bad element)"
    );
    for (i, f) in flags.iter().enumerate().take(bad) {
        ensure!(
            f & PFM_REG_RETFL_MASK == 0,
            "good element {i} has reg_flags {f:#x}"
        );
    }
    let f = flags[bad];
    ensure!(
        f & want != 0,
        "bad element {bad} has reg_flags {f:#x}, expected one of {want:#x}"
    );
    Ok(())
}

fn pmc(n: u16, v: u64) -> PfmPmc {
    PfmPmc {
        reg_num: n,
        reg_value: v,
        ..Default::default()
    }
}

fn pmd(n: u16, v: u64) -> PfmPmd {
    PfmPmd {
        reg_num: n,
        reg_value: v,
        ..Default::default()
    }
}

fn read_pmd(ctx: &Context, n: u16) -> Result<u64, String> {
    let mut r = [pmd(n, 0)];
    ctx.read_pmds(&mut r).ctx("READ_PMDS")?;
    Ok(r[0].reg_value)
}

/// Whether PMC0 selects an event: load self, count a few sleeps on PMD0
/// (reset to 0 first), see if it moved.
fn pmc0_counts(ctx: &Context) -> Result<u64, String> {
    let mut z = [pmd(0, 0)];
    ctx.write_pmds(&mut z).ctx("WRITE_PMDS")?;
    ctx.load(0).ctx("LOAD")?;
    ctx.start().ctx("START")?;
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(1));
    }
    work::spin(Duration::from_millis(1));
    ctx.stop().ctx("STOP")?;
    let v = read_pmd(ctx, 0)?;
    ctx.unload().ctx("UNLOAD")?;
    Ok(v)
}

/// read() into NULL, a PROT_NONE page and a read-only page: each EFAULT.
fn faulting_reads(fd: i32) -> TestResult {
    let none = Mapping::new(1, libc::PROT_NONE).map_err(errno_name)?;
    let ro = Mapping::new(1, libc::PROT_READ).map_err(errno_name)?;
    for (what, addr) in [
        ("NULL", 0),
        ("PROT_NONE", none.addr()),
        ("read-only", ro.addr()),
    ] {
        // SAFETY: the kernel writes nowhere the program uses: the address
        // is invalid or not writable, which is the point.
        let r = unsafe { libc::read(fd, addr as *mut libc::c_void, 64) };
        let e = std::io::Error::last_os_error().raw_os_error();
        ensure!(
            r == -1 && e == Some(libc::EFAULT),
            "read() into {what}: {r} ({e:?}), expected EFAULT"
        );
    }
    Ok(())
}

/// Messages read with a good buffer until EAGAIN (non-blocking fd).
fn drain(fd: i32) -> Result<Vec<PfmMsg>, String> {
    let mut out = Vec::new();
    loop {
        match raw::read_fd(fd, 64) {
            Ok(b) if b.len() == 64 => {
                let mut m = PfmMsg::default();
                // SAFETY: `PfmMsg` is 64 bytes of plain integers.
                unsafe {
                    std::ptr::copy_nonoverlapping(b.as_ptr(), &mut m as *mut PfmMsg as *mut u8, 64)
                };
                out.push(m);
            }
            Ok(b) if b.is_empty() => return Ok(out),
            Ok(b) => return Err(format!("read() returned {} bytes", b.len())),
            Err(libc::EAGAIN) => return Ok(out),
            Err(e) => return Err(format!("read(): {}", errno_name(e))),
        }
    }
}

/// A context whose PMD 0 counts context switches with a period of 1 and
/// asks for a message at each overflow (not loaded).
fn notify_every_switch() -> Result<Context, String> {
    let ctx = open()?;
    ctx.write_pmcs(&mut [pmc(0, PFM_SOFT_EV_CONTEXT_SWITCHES)])
        .ctx("WRITE_PMCS")?;
    let p = PfmPmd {
        reg_flags: PFM_REGFL_OVFL_NOTIFY,
        reg_short_reset: u64::MAX,
        reg_long_reset: u64::MAX,
        ..pmd(0, u64::MAX)
    };
    ctx.write_pmds(&mut [p]).ctx("WRITE_PMDS")?;
    Ok(ctx)
}

/// Period-1 notifying overflows of context-switches fill the queue (8)
/// and mask the context; faulting reads must leave all 8 queued.
fn faulting_reads_keep_overflow_messages() -> TestResult {
    let ctx = notify_every_switch()?;
    ctx.set_nonblocking(true).ctx("O_NONBLOCK")?;
    ctx.load(0).ctx("LOAD")?;
    ctx.start().ctx("START")?;
    let full = module::wait_for(Duration::from_secs(5), || {
        std::thread::sleep(Duration::from_millis(1));
        state(&ctx).ok() == Some(CtxState::Masked)
    });
    ensure!(full, "the queue never filled (state {:?})", state(&ctx)?);
    faulting_reads(fd(&ctx))?;
    let msgs = drain(fd(&ctx))?;
    ctx.unload().ctx("UNLOAD")?;
    let ovfl = msgs.iter().filter(|m| m.msg_type == PFM_MSG_OVFL).count();
    ensure!(
        ovfl == 8 && msgs.len() == 8,
        "{} messages ({ovfl} OVFL) after the faulting reads, expected the 8 queued",
        msgs.len()
    );
    Ok(())
}

/// A child that exits while attached leaves END; faulting reads must not
/// take it: poll says POLLIN (not POLLHUP), read gets END, then EOF.
fn faulting_reads_keep_end() -> TestResult {
    let mut child = pfm_guest::child::Child::spawn("sleeps", &["20"])?;
    let ctx = open()?;
    ctx.load(child.pid()).ctx("LOAD")?;
    ctx.wait_active(Duration::from_secs(5)).ctx("ACTIVE")?;
    child.wait_timeout(Duration::from_secs(10))?;
    ctx.set_nonblocking(true).ctx("O_NONBLOCK")?;
    let ended = module::wait_for(Duration::from_secs(5), || {
        raw::poll_one(fd(&ctx), libc::POLLIN, 0).unwrap_or(0) != 0
    });
    ensure!(ended, "no END message after the child exited");
    faulting_reads(fd(&ctx))?;
    let ev = raw::poll_one(fd(&ctx), libc::POLLIN, 0).map_err(errno_name)?;
    ensure!(
        ev & libc::POLLIN != 0 && ev & libc::POLLHUP == 0,
        "poll after the faulting reads: {ev:#x}, expected POLLIN without POLLHUP"
    );
    let msgs = drain(fd(&ctx))?;
    ensure!(
        msgs.len() == 1 && msgs[0].msg_type == PFM_MSG_END,
        "messages after the faulting reads: {:?}",
        msgs.iter().map(|m| m.msg_type).collect::<Vec<_>>()
    );
    let r = raw::read_fd(fd(&ctx), 64).map(|b| b.len());
    ensure!(r == Ok(0), "read() after END: {r:?}, expected EOF (0)");
    Ok(())
}

/// Wrong-size variant of `req` for an ioctl with argument `T`.
/// Readers that take turns: a child's 8 queued overflow messages and its
/// END, read by 4 threads at once, one message per `read()`, each thread
/// also reading into a PROT_NONE page between its reads (EFAULT: it held
/// the messages, then gave them all back). Every message reaches exactly
/// one reader, END last; every reader then gets EOF. A reader that waited
/// for another's copy is woken by its end: one left asleep never returns
/// and the round times out. 10 rounds.
fn concurrent_readers_take_turns() -> TestResult {
    const READERS: usize = 4;
    for round in 0..10 {
        // Stopped before its sleeps until attached and started: on a
        // loaded host it could otherwise exit before the LOAD (ESRCH).
        let mut child = pfm_guest::child::Child::spawn("sleeps", &["30", "stopped"])?;
        child.wait_state('T', Duration::from_secs(30))?;
        let ctx = notify_every_switch()?;
        ctx.load(child.pid()).ctx("LOAD")?;
        ctx.start().ctx("START")?;
        child.signal(libc::SIGCONT)?;
        ensure!(
            child.wait_timeout(Duration::from_secs(10))? == Some(0),
            "round {round}: the child failed"
        );
        // The ring is full (8, masked) and END is queued after it.
        let ended = module::wait_for(Duration::from_secs(5), || {
            state(&ctx).ok() == Some(CtxState::Unloaded)
        });
        ensure!(
            ended,
            "round {round}: state {:?} after the child's exit",
            state(&ctx)?
        );
        let fd = fd(&ctx);
        let (tx, rx) = std::sync::mpsc::channel();
        for _ in 0..READERS {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let got = (|| -> Result<Vec<PfmMsg>, String> {
                    let none = Mapping::new(1, libc::PROT_NONE).map_err(errno_name)?;
                    let mut got = Vec::new();
                    loop {
                        // SAFETY: the kernel cannot write a PROT_NONE page.
                        let r = unsafe { libc::read(fd, none.addr() as *mut libc::c_void, 64) };
                        let e = std::io::Error::last_os_error().raw_os_error();
                        if r == 0 {
                            // END was read (by any reader): EOF.
                            return Ok(got);
                        }
                        if r != -1 || e != Some(libc::EFAULT) {
                            return Err(format!("read() into PROT_NONE: {r} ({e:?})"));
                        }
                        match raw::read_fd(fd, 64) {
                            Ok(b) if b.is_empty() => return Ok(got),
                            Ok(b) if b.len() == 64 => {
                                let mut m = PfmMsg::default();
                                // SAFETY: `PfmMsg` is 64 bytes of plain integers.
                                unsafe {
                                    std::ptr::copy_nonoverlapping(
                                        b.as_ptr(),
                                        &mut m as *mut PfmMsg as *mut u8,
                                        64,
                                    )
                                };
                                got.push(m);
                            }
                            Ok(b) => return Err(format!("read() returned {} bytes", b.len())),
                            Err(e) => return Err(format!("read(): {}", errno_name(e))),
                        }
                    }
                })();
                let _ = tx.send(got);
            });
        }
        drop(tx);
        let mut all = Vec::new();
        for _ in 0..READERS {
            let got = rx
                .recv_timeout(Duration::from_secs(10))
                .map_err(|_| format!("round {round}: a reader never returned"))?;
            all.extend(got.map_err(|e| format!("round {round}: {e}"))?);
        }
        let ovfl = all.iter().filter(|m| m.msg_type == PFM_MSG_OVFL).count();
        let end = all.iter().filter(|m| m.msg_type == PFM_MSG_END).count();
        let mut stamps: Vec<_> = all.iter().map(|m| (m.msg_type, m.tstamp)).collect();
        stamps.sort_unstable();
        stamps.dedup();
        ensure!(
            ovfl == 8 && end == 1 && all.len() == 9 && stamps.len() == 9,
            "round {round}: {} messages ({ovfl} OVFL, {end} END, {} distinct), expected 8 OVFL and END once each",
            all.len(),
            stamps.len()
        );
    }
    Ok(())
}

fn wrong_size<T: raw::Plain>(req: u32, size: u32) -> TestResult {
    let ctx = open()?;
    let mut v = T::default();
    expect(
        ioctl_in(fd(&ctx), with_size(req, size), &mut v),
        libc::EINVAL,
    )?;
    ensure!(state(&ctx)? == CtxState::Unloaded, "state changed");
    Ok(())
}

fn cases() -> Vec<Case> {
    let mut c: Vec<Case> = Vec::new();
    macro_rules! case {
        ($name:expr, $body:expr) => {
            c.push(($name, Box::new($body)))
        };
    }

    // --- unknown ioctls: ENOTTY
    case!("unknown nr _IO(0xB6, 0x3f): ENOTTY", || {
        let ctx = open()?;
        expect(
            ioctl_none(fd(&ctx), raw::ioc(0, 0xB6, 0x3f, 0)),
            libc::ENOTTY,
        )
    });
    case!(
        "unknown nr with a size _IOWR(0xB6, 0x20, 48): ENOTTY",
        || {
            let ctx = open()?;
            let mut a = PfmRegsArg::default();
            expect(
                ioctl_in(fd(&ctx), raw::ioc(3, 0xB6, 0x20, 48), &mut a),
                libc::ENOTTY,
            )
        }
    );
    case!("foreign type _IO('x', 1): ENOTTY", || {
        let ctx = open()?;
        expect(
            ioctl_none(fd(&ctx), raw::ioc(0, b'x' as u32, 1, 0)),
            libc::ENOTTY,
        )
    });
    case!("perf's PERF_EVENT_IOC_ENABLE on perfmon: ENOTTY", || {
        let ctx = open()?;
        expect(ioctl_none(fd(&ctx), 0x2400), libc::ENOTTY)
    });

    // --- known numbers, wrong size: EINVAL
    case!("GET_INFO with size 871: EINVAL", || wrong_size::<PfmInfo>(
        PFM_IOC_GET_INFO,
        871
    ));
    case!("GET_INFO with size 880: EINVAL", || wrong_size::<PfmInfo>(
        PFM_IOC_GET_INFO,
        880
    ));
    case!(
        "WRITE_PMCS with size 40: EINVAL",
        || wrong_size::<PfmRegsArg>(PFM_IOC_WRITE_PMCS, 40)
    );
    case!(
        "READ_PMDS with size 56: EINVAL",
        || wrong_size::<PfmRegsArg>(PFM_IOC_READ_PMDS, 56)
    );
    case!("LOAD with size 16: EINVAL", || wrong_size::<PfmLoad>(
        PFM_IOC_LOAD,
        16
    ));
    case!(
        "GET_STATE with size 8: EINVAL",
        || wrong_size::<PfmCtxInfo>(PFM_IOC_GET_STATE, 8)
    );
    case!(
        "SET_FLAGS with size 64: EINVAL",
        || wrong_size::<PfmCtxFlags>(PFM_IOC_SET_FLAGS, 64)
    );
    case!("CLONE with size 16: EINVAL", || wrong_size::<PfmClone>(
        PFM_IOC_CLONE,
        16
    ));
    case!("READ_THREADS with size 48: EINVAL", || wrong_size::<
        PfmThreadsArg,
    >(
        PFM_IOC_READ_THREADS,
        48
    ));
    case!(
        "WRITE_PMCS with direction _IOW instead of _IOWR: EINVAL",
        || {
            let ctx = open()?;
            let mut a = PfmRegsArg::default();
            expect(
                ioctl_in(fd(&ctx), raw::ioc(1, 0xB6, 0x01, 48), &mut a),
                libc::EINVAL,
            )
        }
    );
    case!(
        "GET_STATE with direction _IOWR instead of _IOR: EINVAL",
        || {
            let ctx = open()?;
            let mut s = PfmCtxInfo::default();
            expect(
                ioctl_in(fd(&ctx), raw::ioc(3, 0xB6, 0x09, 48), &mut s),
                libc::EINVAL,
            )
        }
    );
    case!("START with a size (8): EINVAL", || {
        let ctx = open()?;
        ctx.load(0).ctx("LOAD")?;
        let r = ioctl_none(fd(&ctx), with_size(PFM_IOC_START, 8));
        let started = ctx.state().ctx("GET_STATE")?.is_started();
        expect(r, libc::EINVAL)?;
        ensure!(!started, "context started by a malformed START");
        Ok(())
    });

    // --- PMC values with reserved bits: EINVAL + RETFL_EINVAL
    case!(
        "PMC value with the lowest reserved bit of GET_INFO's mask: EINVAL",
        || {
            let mask = open()?.raw_info().ctx("GET_INFO")?.pmc_rsvd_mask[0];
            ensure!(mask != 0, "PMC0 reserved mask is 0");
            let bit = mask & mask.wrapping_neg();
            pmcs_rejected(&[pmc(0, bit | 1)], 0, PFM_REG_RETFL_EINVAL)
        }
    );
    case!("PMC value with bit 63 set: EINVAL", || pmcs_rejected(
        &[pmc(1, 1 << 63 | 2)],
        0,
        PFM_REG_RETFL_EINVAL
    ));
    case!(
        "PMC value 7 (no such soft event, no reserved bit): EINVAL",
        || pmcs_rejected(&[pmc(0, 7)], 0, PFM_REG_RETFL_EINVAL)
    );

    // --- bad register numbers
    case!("PMC 4 (not implemented): EINVAL + NOTAVAIL", || {
        pmcs_rejected(&[pmc(0, 1), pmc(4, 1)], 1, PFM_REG_RETFL_NOTAVAIL)
    });
    case!("PMC 32 (beyond PFM_MAX_PMCS): EINVAL", || {
        pmcs_rejected(
            &[pmc(32, 1)],
            0,
            PFM_REG_RETFL_NOTAVAIL | PFM_REG_RETFL_EINVAL,
        )
    });
    case!("PMC 0xffff: EINVAL", || pmcs_rejected(
        &[pmc(0xffff, 1)],
        0,
        PFM_REG_RETFL_NOTAVAIL | PFM_REG_RETFL_EINVAL
    ));
    case!(
        "WRITE_PMDS PMD 4 (not implemented): EINVAL + NOTAVAIL",
        || {
            pmds_rejected(
                PFM_IOC_WRITE_PMDS,
                &[pmd(0, 0), pmd(1, 0), pmd(4, 0)],
                2,
                PFM_REG_RETFL_NOTAVAIL,
            )
        }
    );
    case!("READ_PMDS PMD 0xffff: EINVAL", || {
        pmds_rejected(
            PFM_IOC_READ_PMDS,
            &[pmd(0xffff, 0)],
            0,
            PFM_REG_RETFL_NOTAVAIL | PFM_REG_RETFL_EINVAL,
        )
    });

    // --- reserved fields and flags
    case!("PMC reg_set 1: EINVAL", || {
        pmcs_rejected(
            &[PfmPmc {
                reg_set: 1,
                ..pmc(0, 1)
            }],
            0,
            PFM_REG_RETFL_MASK,
        )
    });
    case!("PMC reserved[1] != 0: EINVAL", || {
        pmcs_rejected(
            &[PfmPmc {
                reserved: [0, 1],
                ..pmc(0, 1)
            }],
            0,
            PFM_REG_RETFL_MASK,
        )
    });
    case!("PMC input reg_flags != 0: EINVAL", || {
        pmcs_rejected(
            &[PfmPmc {
                reg_flags: 1,
                ..pmc(0, 1)
            }],
            0,
            PFM_REG_RETFL_MASK,
        )
    });
    case!("PMD undefined input flag (bit 7): EINVAL", || {
        pmds_rejected(
            PFM_IOC_WRITE_PMDS,
            &[PfmPmd {
                reg_flags: 1 << 7,
                ..pmd(0, 0)
            }],
            0,
            PFM_REG_RETFL_MASK,
        )
    });
    case!(
        "PMD reg_flags bits 16-23 (neither input nor output): EINVAL",
        || {
            for bit in 16..24 {
                pmds_rejected(
                    PFM_IOC_WRITE_PMDS,
                    &[PfmPmd {
                        reg_flags: PFM_REGFL_OVFL_NOTIFY | 1 << bit,
                        ..pmd(0, 0)
                    }],
                    0,
                    PFM_REG_RETFL_EINVAL,
                )
                .map_err(|e| format!("bit {bit}: {e}"))?;
                pmcs_rejected(
                    &[PfmPmc {
                        reg_flags: 1 << bit,
                        ..pmc(0, 1)
                    }],
                    0,
                    PFM_REG_RETFL_EINVAL,
                )
                .map_err(|e| format!("PMC bit {bit}: {e}"))?;
            }
            Ok(())
        }
    );
    case!(
        "READ_PMDS: reg_random_mask/seed are outputs (garbage ignored; mask and state out)",
        || {
            let ctx = open()?;
            let minus_p = 1000u64.wrapping_neg();
            let mut w = [
                PfmPmd {
                    reg_flags: PFM_REGFL_RANDOM,
                    reg_short_reset: minus_p,
                    reg_long_reset: minus_p,
                    reg_random_mask: 0xff,
                    reg_random_seed: 12345,
                    ..pmd(0, minus_p)
                },
                pmd(1, 7),
            ];
            ctx.write_pmds(&mut w).ctx("WRITE_PMDS")?;
            let garbage = |n| PfmPmd {
                reg_random_mask: 6,
                reg_random_seed: u64::MAX,
                ..pmd(n, 0)
            };
            let (r, done, back) = regs_call(
                &ctx,
                PFM_IOC_READ_PMDS,
                &[garbage(0), garbage(1)],
                None,
                |_| {},
            )?;
            ensure!(
                r.is_ok() && done == 2,
                "READ_PMDS: {}, done {done}",
                name(r)
            );
            let got = |p: &PfmPmd| (p.reg_flags, p.reg_random_mask, p.reg_random_seed);
            ensure!(
                got(&back[0]) == (PFM_REGFL_RANDOM, 0xff, 12345),
                "randomised PMD 0 read as {:?}",
                back[0]
            );
            ensure!(got(&back[1]) == (0, 0, 0), "PMD 1 read as {:?}", back[1]);
            Ok(())
        }
    );
    case!(
        "PMD reg_random_mask without PFM_REGFL_RANDOM: EINVAL",
        || {
            pmds_rejected(
                PFM_IOC_WRITE_PMDS,
                &[
                    pmd(0, 0),
                    PfmPmd {
                        reg_random_mask: 1,
                        ..pmd(1, 0)
                    },
                ],
                1,
                PFM_REG_RETFL_EINVAL,
            )
        }
    );
    case!(
        "PMD reg_random_seed without PFM_REGFL_RANDOM: EINVAL",
        || {
            pmds_rejected(
                PFM_IOC_WRITE_PMDS,
                &[PfmPmd {
                    reg_random_seed: 1 << 40,
                    ..pmd(0, 0)
                }],
                0,
                PFM_REG_RETFL_EINVAL,
            )
        }
    );
    case!(
        "PMD PFM_REGFL_RANDOM with a mask not 2^k - 1 (6, 2^63): EINVAL",
        || {
            for mask in [6u64, 1 << 63] {
                let minus_p = 1_000_000u64.wrapping_neg();
                pmds_rejected(
                    PFM_IOC_WRITE_PMDS,
                    &[PfmPmd {
                        reg_flags: PFM_REGFL_RANDOM,
                        reg_short_reset: minus_p,
                        reg_long_reset: minus_p,
                        reg_random_mask: mask,
                        ..pmd(0, minus_p)
                    }],
                    0,
                    PFM_REG_RETFL_EINVAL,
                )
                .map_err(|e| format!("mask {mask:#x}: {e}"))?;
            }
            Ok(())
        }
    );
    case!(
        "PMD PFM_REGFL_RANDOM with a mask above a reset value (a period past 2^64): EINVAL",
        || {
            // Short reset -1000 (room for 2^64 - 1000), long reset 0
            // (period 2^64: no room at all).
            for (short, long) in [(1000u64.wrapping_neg(), 0u64), (0, 1000u64.wrapping_neg())] {
                pmds_rejected(
                    PFM_IOC_WRITE_PMDS,
                    &[PfmPmd {
                        reg_flags: PFM_REGFL_RANDOM,
                        reg_short_reset: short,
                        reg_long_reset: long,
                        reg_random_mask: 1,
                        ..pmd(0, 0)
                    }],
                    0,
                    PFM_REG_RETFL_EINVAL,
                )
                .map_err(|e| format!("resets {short:#x}/{long:#x}: {e}"))?;
            }
            Ok(())
        }
    );
    case!(
        "PMD PFM_REGFL_RANDOM, seed 0: a seed of the kernel's, non-zero, one per PMD",
        || {
            let ctx = open()?;
            let minus_p = 100u64.wrapping_neg();
            let w = |n| PfmPmd {
                reg_flags: PFM_REGFL_RANDOM,
                reg_short_reset: minus_p,
                reg_long_reset: minus_p,
                reg_random_mask: 63,
                ..pmd(n, minus_p)
            };
            ctx.write_pmds(&mut [w(0), w(1)]).ctx("WRITE_PMDS")?;
            let mut r = [pmd(0, 0), pmd(1, 0)];
            ctx.read_pmds(&mut r).ctx("READ_PMDS")?;
            let (a, b) = (r[0].reg_random_seed, r[1].reg_random_seed);
            ensure!(
                a != 0 && b != 0 && a != b && r[0].reg_random_mask == 63,
                "seeds {a:#x} and {b:#x}, mask {:#x}",
                r[0].reg_random_mask
            );
            Ok(())
        }
    );
    case!("PMD reg_set 1: EINVAL", || {
        pmds_rejected(
            PFM_IOC_WRITE_PMDS,
            &[PfmPmd {
                reg_set: 1,
                ..pmd(0, 0)
            }],
            0,
            PFM_REG_RETFL_MASK,
        )
    });
    case!("regs_arg reserved[0] != 0: EINVAL", || {
        let ctx = open()?;
        let (r, _, _) = regs_call(&ctx, PFM_IOC_WRITE_PMCS, &[pmc(0, 1)], None, |a| {
            a.reserved[0] = 1
        })?;
        expect(r, libc::EINVAL)
    });
    case!("LOAD unknown flag (bit 2): EINVAL", || {
        let ctx = open()?;
        let mut l = PfmLoad {
            flags: PFM_LOAD_MASK + 1,
            ..Default::default()
        };
        expect(ioctl_in(fd(&ctx), PFM_IOC_LOAD, &mut l), libc::EINVAL)?;
        ensure!(state(&ctx)? == CtxState::Unloaded, "loaded anyway");
        Ok(())
    });
    case!(
        "CLONE unknown flag (bit 2), pad, reserved[2]: EINVAL, no new fd",
        || {
            let ctx = open()?;
            let before = module::sysfs_num("live_contexts");
            for (what, mut c) in [
                (
                    "flag",
                    PfmClone {
                        flags: PFM_CLONE_MASK + 1,
                        ..Default::default()
                    },
                ),
                (
                    "pad",
                    PfmClone {
                        pad: 1,
                        ..Default::default()
                    },
                ),
                (
                    "reserved",
                    PfmClone {
                        reserved: [0, 0, 1],
                        ..Default::default()
                    },
                ),
            ] {
                expect(ioctl_in(fd(&ctx), PFM_IOC_CLONE, &mut c), libc::EINVAL)
                    .map_err(|e| format!("{what}: {e}"))?;
            }
            let after = module::sysfs_num("live_contexts");
            ensure!(before == after, "live_contexts {before:?} -> {after:?}");
            Ok(())
        }
    );
    case!("LOAD reserved[1] != 0: EINVAL", || {
        let ctx = open()?;
        let mut l = PfmLoad {
            reserved: [0, 1],
            ..Default::default()
        };
        expect(ioctl_in(fd(&ctx), PFM_IOC_LOAD, &mut l), libc::EINVAL)?;
        ensure!(state(&ctx)? == CtxState::Unloaded, "loaded anyway");
        Ok(())
    });
    case!("SET_FLAGS unknown flag (bit 4): EINVAL", || {
        let ctx = open()?;
        let mut f = PfmCtxFlags {
            flags: 1 << 4,
            ..Default::default()
        };
        expect(ioctl_in(fd(&ctx), PFM_IOC_SET_FLAGS, &mut f), libc::EINVAL)
    });
    case!("SET_FLAGS pad != 0: EINVAL", || {
        let ctx = open()?;
        let mut f = PfmCtxFlags {
            pad: 1,
            ..Default::default()
        };
        expect(ioctl_in(fd(&ctx), PFM_IOC_SET_FLAGS, &mut f), libc::EINVAL)
    });
    case!("SET_FLAGS reserved[0] != 0: EINVAL", || {
        let ctx = open()?;
        let mut f = PfmCtxFlags {
            reserved: [1, 0, 0],
            ..Default::default()
        };
        expect(ioctl_in(fd(&ctx), PFM_IOC_SET_FLAGS, &mut f), libc::EINVAL)
    });
    case!(
        "RETFL output bits are ignored on input and cleared on success",
        || {
            let ctx = open()?;
            let elems = [PfmPmc {
                reg_flags: PFM_REG_RETFL_EINVAL | PFM_REG_RETFL_NOTAVAIL,
                ..pmc(0, 1)
            }];
            let (r, _, back) = regs_call(&ctx, PFM_IOC_WRITE_PMCS, &elems, None, |_| {})?;
            ensure!(r.is_ok(), "valid PMC with output bits preset: {}", name(r));
            ensure!(
                back[0].reg_flags & PFM_REG_RETFL_MASK == 0,
                "reg_flags {:#x} after success",
                back[0].reg_flags
            );
            Ok(())
        }
    );

    // --- all or nothing
    case!(
        "WRITE_PMDS with a bad 3rd element: EINVAL, done 2, nothing applied",
        || {
            let ctx = open()?;
            ctx.write_pmds(&mut [pmd(0, 111), pmd(1, 0)])
                .ctx("initial WRITE_PMDS")?;
            let (r, done, back) = regs_call(
                &ctx,
                PFM_IOC_WRITE_PMDS,
                &[pmd(0, 222), pmd(1, 333), pmd(9, 0)],
                None,
                |_| {},
            )?;
            expect(r, libc::EINVAL)?;
            element_flags(
                done,
                2,
                PFM_REG_RETFL_NOTAVAIL,
                &back.iter().map(|p| p.reg_flags).collect::<Vec<_>>(),
            )?;
            let (a, b) = (read_pmd(&ctx, 0)?, read_pmd(&ctx, 1)?);
            ensure!(
                a == 111 && b == 0,
                "PMD0={a} PMD1={b} after a rejected call (111, 0 expected)"
            );
            Ok(())
        }
    );
    case!(
        "WRITE_PMCS with a bad 2nd element: EINVAL, done 1, PMC0 not applied",
        || {
            let ctx = open()?;
            let (r, done, back) = regs_call(
                &ctx,
                PFM_IOC_WRITE_PMCS,
                &[pmc(0, 2), pmc(1, 1 << 40)],
                None,
                |_| {},
            )?;
            expect(r, libc::EINVAL)?;
            element_flags(
                done,
                1,
                PFM_REG_RETFL_EINVAL,
                &back.iter().map(|p| p.reg_flags).collect::<Vec<_>>(),
            )?;
            let v = pmc0_counts(&ctx)?;
            ensure!(
                v == 0,
                "PMD0 counted {v}: PMC0 of the rejected call was applied"
            );
            Ok(())
        }
    );

    // --- counts
    for (label, req) in [
        ("WRITE_PMCS", PFM_IOC_WRITE_PMCS),
        ("WRITE_PMDS", PFM_IOC_WRITE_PMDS),
        ("READ_PMDS", PFM_IOC_READ_PMDS),
    ] {
        c.push((
            match label {
                "WRITE_PMCS" => "WRITE_PMCS count 0: EINVAL",
                "WRITE_PMDS" => "WRITE_PMDS count 0: EINVAL",
                _ => "READ_PMDS count 0: EINVAL",
            },
            Box::new(move || {
                let ctx = open()?;
                let (r, _, _) = regs_call(&ctx, req, &[pmd(0, 0)], Some(0), |_| {})?;
                expect(r, libc::EINVAL)
            }),
        ));
    }
    case!(
        "WRITE_PMCS count 65 (> PFM_MAX_REGS_PER_CALL): E2BIG",
        || {
            let ctx = open()?;
            let elems: Vec<PfmPmc> = (0..65).map(|i| pmc(i % 4, 0)).collect();
            let (r, _, _) = regs_call(&ctx, PFM_IOC_WRITE_PMCS, &elems, None, |_| {})?;
            expect(r, libc::E2BIG)
        }
    );
    case!("READ_PMDS count 65: E2BIG", || {
        let ctx = open()?;
        let elems: Vec<PfmPmd> = (0..65).map(|i| pmd(i % 4, 0)).collect();
        let (r, _, _) = regs_call(&ctx, PFM_IOC_READ_PMDS, &elems, None, |_| {})?;
        expect(r, libc::E2BIG)
    });
    case!(
        "WRITE_PMDS count 0xffffffff: E2BIG (no overflow, no huge read)",
        || {
            let ctx = open()?;
            let (r, _, _) = regs_call(
                &ctx,
                PFM_IOC_WRITE_PMDS,
                &[pmd(0, 0)],
                Some(u32::MAX),
                |_| {},
            )?;
            expect(r, libc::E2BIG)
        }
    );
    case!("WRITE_PMCS count 64 of valid elements: accepted", || {
        let ctx = open()?;
        let elems: Vec<PfmPmc> = (0..64).map(|i| pmc(i % 4, u64::from(i % 4))).collect();
        let (r, _, _) = regs_call(&ctx, PFM_IOC_WRITE_PMCS, &elems, None, |_| {})?;
        ensure!(r.is_ok(), "64 valid PMCs: {}", name(r));
        Ok(())
    });

    // --- bad pointers: EFAULT
    case!("GET_INFO to NULL: EFAULT", || {
        let ctx = open()?;
        expect(
            ioctl_bad(fd(&ctx), PFM_IOC_GET_INFO, &BadAddr::Null),
            libc::EFAULT,
        )
    });
    case!("GET_INFO to a read-only page: EFAULT", || {
        let ctx = open()?;
        let m = Mapping::new(1, libc::PROT_READ).map_err(errno_name)?;
        expect(
            ioctl_bad(fd(&ctx), PFM_IOC_GET_INFO, &BadAddr::ReadOnly(&m)),
            libc::EFAULT,
        )
    });
    case!("GET_STATE to NULL: EFAULT", || {
        let ctx = open()?;
        expect(
            ioctl_bad(fd(&ctx), PFM_IOC_GET_STATE, &BadAddr::Null),
            libc::EFAULT,
        )
    });
    case!("GET_STATE to a kernel address: EFAULT", || {
        let ctx = open()?;
        expect(
            ioctl_bad(fd(&ctx), PFM_IOC_GET_STATE, &BadAddr::Kernel),
            libc::EFAULT,
        )
    });
    case!("LOAD from NULL: EFAULT, still UNLOADED", || {
        let ctx = open()?;
        expect(
            ioctl_bad(fd(&ctx), PFM_IOC_LOAD, &BadAddr::Null),
            libc::EFAULT,
        )?;
        ensure!(state(&ctx)? == CtxState::Unloaded, "state changed");
        Ok(())
    });
    case!("CLONE from NULL: EFAULT, no new context", || {
        let ctx = open()?;
        let before = module::sysfs_num("live_contexts");
        expect(
            ioctl_bad(fd(&ctx), PFM_IOC_CLONE, &BadAddr::Null),
            libc::EFAULT,
        )?;
        let after = module::sysfs_num("live_contexts");
        ensure!(before == after, "live_contexts {before:?} -> {after:?}");
        Ok(())
    });
    case!("SET_FLAGS from a PROT_NONE page: EFAULT", || {
        let ctx = open()?;
        let m = Mapping::new(1, libc::PROT_NONE).map_err(errno_name)?;
        expect(
            ioctl_bad(fd(&ctx), PFM_IOC_SET_FLAGS, &BadAddr::NoAccess(&m)),
            libc::EFAULT,
        )
    });
    case!("WRITE_PMCS argument NULL: EFAULT", || {
        let ctx = open()?;
        expect(
            ioctl_bad(fd(&ctx), PFM_IOC_WRITE_PMCS, &BadAddr::Null),
            libc::EFAULT,
        )
    });
    case!("WRITE_PMCS regs NULL: EFAULT", || {
        let ctx = open()?;
        let mut a = PfmRegsArg {
            regs: 0,
            count: 1,
            ..Default::default()
        };
        expect(ioctl_in(fd(&ctx), PFM_IOC_WRITE_PMCS, &mut a), libc::EFAULT)
    });
    case!("WRITE_PMDS regs in a PROT_NONE page: EFAULT", || {
        let ctx = open()?;
        let area = RegsArea::new(1).map_err(errno_name)?;
        let mut a = PfmRegsArg {
            regs: area.guard(),
            count: 1,
            ..Default::default()
        };
        expect(ioctl_in(fd(&ctx), PFM_IOC_WRITE_PMDS, &mut a), libc::EFAULT)
    });
    case!("WRITE_PMDS regs at an unmapped address: EFAULT", || {
        let ctx = open()?;
        let hole = raw::Hole::new().map_err(errno_name)?;
        let mut a = PfmRegsArg {
            regs: hole.addr() as u64,
            count: 1,
            ..Default::default()
        };
        expect(ioctl_in(fd(&ctx), PFM_IOC_WRITE_PMDS, &mut a), libc::EFAULT)
    });
    case!("WRITE_PMDS regs at a kernel address: EFAULT", || {
        let ctx = open()?;
        let mut a = PfmRegsArg {
            regs: BadAddr::Kernel.addr() as u64,
            count: 1,
            ..Default::default()
        };
        expect(ioctl_in(fd(&ctx), PFM_IOC_WRITE_PMDS, &mut a), libc::EFAULT)
    });
    case!(
        "WRITE_PMDS array running into a PROT_NONE page: EFAULT, nothing applied",
        || {
            let ctx = open()?;
            ctx.write_pmds(&mut [pmd(0, 111)])
                .ctx("initial WRITE_PMDS")?;
            let area = RegsArea::new(1).map_err(errno_name)?;
            let off = area.rw_len() - std::mem::size_of::<PfmPmd>();
            area.put(off, &[pmd(0, 222)]);
            let mut a = PfmRegsArg {
                regs: area.addr(off),
                count: 2,
                ..Default::default()
            };
            expect(ioctl_in(fd(&ctx), PFM_IOC_WRITE_PMDS, &mut a), libc::EFAULT)?;
            let v = read_pmd(&ctx, 0)?;
            ensure!(
                v == 111,
                "PMD0 = {v} after the faulting call (111 expected: half-applied)"
            );
            Ok(())
        }
    );
    case!(
        "WRITE_PMCS array running into a PROT_NONE page: EFAULT, PMC0 not applied",
        || {
            let ctx = open()?;
            let area = RegsArea::new(1).map_err(errno_name)?;
            let off = area.rw_len() - std::mem::size_of::<PfmPmc>();
            area.put(off, &[pmc(0, PFM_SOFT_EV_CONTEXT_SWITCHES)]);
            let mut a = PfmRegsArg {
                regs: area.addr(off),
                count: 2,
                ..Default::default()
            };
            expect(ioctl_in(fd(&ctx), PFM_IOC_WRITE_PMCS, &mut a), libc::EFAULT)?;
            let v = pmc0_counts(&ctx)?;
            ensure!(
                v == 0,
                "PMD0 counted {v}: PMC0 of the faulting call was applied"
            );
            Ok(())
        }
    );
    case!("READ_PMDS into a read-only array: EFAULT", || {
        let ctx = open()?;
        let area = RegsArea::new(1).map_err(errno_name)?;
        area.put(0, &[pmd(0, 0)]);
        area.set_read_only(true).map_err(errno_name)?;
        let mut a = PfmRegsArg {
            regs: area.addr(0),
            count: 1,
            ..Default::default()
        };
        expect(ioctl_in(fd(&ctx), PFM_IOC_READ_PMDS, &mut a), libc::EFAULT)
    });

    // --- wrong state: EBADFD
    for (label, req) in [
        ("START while UNLOADED: EBADFD", PFM_IOC_START),
        ("STOP while UNLOADED: EBADFD", PFM_IOC_STOP),
        ("UNLOAD while UNLOADED: EBADFD", PFM_IOC_UNLOAD),
        ("RESTART while UNLOADED: EBADFD", PFM_IOC_RESTART),
    ] {
        c.push((
            label,
            Box::new(move || {
                let ctx = open()?;
                expect(ioctl_none(fd(&ctx), req), libc::EBADFD)?;
                ensure!(state(&ctx)? == CtxState::Unloaded, "state changed");
                Ok(())
            }),
        ));
    }
    case!("RESTART while LOADED (not MASKED): EBADFD", || {
        let ctx = open()?;
        ctx.load(0).ctx("LOAD")?;
        let r = ioctl_none(fd(&ctx), PFM_IOC_RESTART);
        ctx.unload().ctx("UNLOAD")?;
        expect(r, libc::EBADFD)
    });
    case!(
        "LOAD while LOADED: EBUSY (Documentation/perfmon.rst)",
        || {
            let ctx = open()?;
            ctx.load(0).ctx("LOAD")?;
            let mut l = PfmLoad::default();
            let r = ioctl_in(fd(&ctx), PFM_IOC_LOAD, &mut l);
            ctx.unload().ctx("UNLOAD")?;
            expect(r, libc::EBUSY)
        }
    );
    case!("CLONE while LOADED: EBADFD", || {
        let ctx = open()?;
        ctx.load(0).ctx("LOAD")?;
        let mut c = PfmClone::default();
        let r = ioctl_in(fd(&ctx), PFM_IOC_CLONE, &mut c);
        ctx.unload().ctx("UNLOAD")?;
        if let Ok(new) = r {
            raw::close(new);
        }
        expect(r, libc::EBADFD)
    });
    case!(
        "LOAD|START of a thread that does not exist: ESRCH, not started",
        || {
            let ctx = open()?;
            let mut l = PfmLoad {
                tid: 4_194_305,
                flags: PFM_LOAD_START,
                ..Default::default()
            };
            expect(ioctl_in(fd(&ctx), PFM_IOC_LOAD, &mut l), libc::ESRCH)?;
            let st = ctx.state().ctx("GET_STATE")?;
            ensure!(
                st.state == CtxState::Unloaded && !st.is_started(),
                "after a refused LOAD|START: {st:?}"
            );
            Ok(())
        }
    );
    case!("SET_FLAGS while LOADED: EBADFD", || {
        let ctx = open()?;
        ctx.load(0).ctx("LOAD")?;
        let mut f = PfmCtxFlags::default();
        let r = ioctl_in(fd(&ctx), PFM_IOC_SET_FLAGS, &mut f);
        ctx.unload().ctx("UNLOAD")?;
        expect(r, libc::EBADFD)
    });

    // --- LOAD targets
    case!("LOAD of a pid that does not exist: ESRCH", || {
        // pid_max is at most 4194304 (2^22); this one cannot exist.
        let ctx = open()?;
        let mut l = PfmLoad {
            tid: 4_194_305,
            ..Default::default()
        };
        expect(ioctl_in(fd(&ctx), PFM_IOC_LOAD, &mut l), libc::ESRCH)
    });
    case!("LOAD of tid 0x80000000: ESRCH or EINVAL", || {
        let ctx = open()?;
        let mut l = PfmLoad {
            tid: 0x8000_0000,
            ..Default::default()
        };
        let r = ioctl_in(fd(&ctx), PFM_IOC_LOAD, &mut l);
        ensure!(
            r == Err(libc::ESRCH) || r == Err(libc::EINVAL),
            "got {}",
            name(r)
        );
        Ok(())
    });
    case!("LOAD of kthreadd (pid 2): EPERM", || {
        let ctx = open()?;
        let mut l = PfmLoad {
            tid: 2,
            ..Default::default()
        };
        expect(ioctl_in(fd(&ctx), PFM_IOC_LOAD, &mut l), libc::EPERM)
    });

    // --- read()/write() misuse
    case!("read() with a 32-byte buffer: EINVAL", || {
        let ctx = open()?;
        ctx.set_nonblocking(true).ctx("O_NONBLOCK")?;
        let r = raw::read_fd(fd(&ctx), 32).map(|b| b.len() as i32);
        expect(r, libc::EINVAL)
    });
    case!("non-blocking read() with no message: EAGAIN", || {
        let ctx = open()?;
        ctx.load(0).ctx("LOAD")?;
        ctx.set_nonblocking(true).ctx("O_NONBLOCK")?;
        let r = raw::read_fd(fd(&ctx), 64).map(|b| b.len() as i32);
        ctx.unload().ctx("UNLOAD")?;
        expect(r, libc::EAGAIN)
    });
    case!(
        "a faulting read() consumes no message: 8 queued, 3 EFAULTs, 8 read",
        faulting_reads_keep_overflow_messages
    );
    case!(
        "a faulting read() keeps END: POLLIN, then END, then EOF",
        faulting_reads_keep_end
    );
    case!(
        "4 concurrent readers, faulting in turn: 8 OVFL + END each read once, then EOF (10 rounds)",
        concurrent_readers_take_turns
    );
    case!(
        "close() of a self-monitoring context frees it before close returns (100 times)",
        || {
            for round in 0..100 {
                let before = module::live_contexts();
                let ctx = open()?;
                ctx.load(0).ctx("LOAD")?;
                ctx.start().ctx("START")?;
                std::thread::sleep(Duration::from_micros(100));
                let during = module::live_contexts();
                drop(ctx);
                let after = module::live_contexts();
                ensure!(
                    after == before && during == before.map(|b| b + 1),
                    "round {round}: live_contexts {before:?} before, {during:?} while open, {after:?} right after close"
                );
            }
            Ok(())
        }
    );
    case!("write() to the context fails", || {
        let ctx = open()?;
        let r = raw::write_fd(fd(&ctx), &[0u8; 64]);
        diag(format!("write(): {:?}", r.map_err(errno_name)));
        ensure!(r.is_err(), "write() of 64 bytes succeeded");
        Ok(())
    });

    // --- after all that, a context still works
    case!("a context that took every bad input still counts", || {
        let ctx = open()?;
        for req in [
            PFM_IOC_START,
            PFM_IOC_STOP,
            PFM_IOC_UNLOAD,
            raw::ioc(0, 0xB6, 0x3f, 0),
        ] {
            let _ = ioctl_none(fd(&ctx), req);
        }
        let _ = ioctl_bad(fd(&ctx), PFM_IOC_LOAD, &BadAddr::Null);
        let _ = regs_call(&ctx, PFM_IOC_WRITE_PMCS, &[pmc(0, 1 << 40)], None, |_| {})?;
        ctx.write_pmcs(&mut [pmc(0, PFM_SOFT_EV_TASK_CLOCK)])
            .ctx("WRITE_PMCS")?;
        ctx.write_pmds(&mut [pmd(0, 0)]).ctx("WRITE_PMDS")?;
        ctx.load(0).ctx("LOAD")?;
        ctx.start().ctx("START")?;
        work::spin(Duration::from_millis(5));
        ctx.stop().ctx("STOP")?;
        let v = read_pmd(&ctx, 0)?;
        ctx.unload().ctx("UNLOAD")?;
        ensure!(v >= 2_000_000, "task-clock {v} after a 5 ms spin");
        Ok(())
    });
    case!("no live context left (sysfs)", || module::wait_contexts(
        0,
        Duration::from_secs(2)
    ));
    c
}

fn main() {
    pfm_guest::child::dispatch();
    let cases = cases();
    let mut t = Tap::new(cases.len() + 2);
    pfm_guest::watchdog(Duration::from_secs(240));
    t.require("insmod perfmon.ko", module::insmod(&[]));
    for (name, f) in cases {
        t.run(name, f);
    }
    t.run("rmmod perfmon", module::rmmod);
    t.finish();
}
