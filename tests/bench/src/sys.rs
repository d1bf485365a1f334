//! Thin, allocation-free wrappers over the system calls the benchmarks time:
//! perfmon's ioctls, perf_event_open(2) and read(2) of perf fds, pipes,
//! CPU affinity and the clocks. Everything `unsafe` of the crate is here.
//!
//! The benchmarks deliberately bypass the `perfmon` library: what is timed
//! is one system call and nothing around it.

use std::io;

use crate::abi::{
    self, PfmCtxInfo, PfmLoad, PfmPmc, PfmPmd, PfmRegsArg, PfmSetdesc, PfmSetinfo, PfmSetsArg,
};

fn last_err(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

fn check(ret: libc::c_long, what: &str) -> io::Result<libc::c_long> {
    if ret < 0 {
        Err(last_err(what))
    } else {
        Ok(ret)
    }
}

// ---- clocks -------------------------------------------------------------

/// CLOCK_MONOTONIC in ns (vDSO when the clocksource allows it).
#[inline(always)]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The marker of `--profile` windows: getcpu(2) as a real system call
/// (glibc's sched_getcpu() does not enter the kernel), which nothing else
/// in the guest makes. The QEMU plugin snapshots its counts whenever the
/// kernel's `__x64_sys_getcpu` runs.
#[inline(never)]
pub fn profile_marker() {
    // SAFETY: getcpu with NULL pointers writes nothing.
    unsafe {
        libc::syscall(
            libc::SYS_getcpu,
            std::ptr::null_mut::<u32>(),
            std::ptr::null_mut::<u32>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
}

// ---- threads, CPUs ------------------------------------------------------

/// The calling thread's id.
pub fn gettid() -> u32 {
    // SAFETY: no arguments.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// Pins the calling thread to `cpu`.
pub fn pin(cpu: usize) -> io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes within it.
    let ret = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    check(ret as libc::c_long, "sched_setaffinity").map(|_| ())
}

/// SCHED_FIFO at priority 1 for the calling thread (threads it creates
/// afterwards inherit it): nothing of the normal class (a kworker, a
/// reaper's work) runs on its CPU while it is runnable, so deferred work
/// does not land at varying points of a measured loop.
pub fn sched_fifo() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: `param` is a valid sched_param for the call.
    let ret = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    check(ret as libc::c_long, "sched_setscheduler(SCHED_FIFO)").map(|_| ())
}

/// Online CPUs.
pub fn online_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n < 1 {
        1
    } else {
        n as usize
    }
}

// ---- raw fds ------------------------------------------------------------

/// An owned file descriptor, closed on drop.
#[derive(Debug)]
pub struct Fd(pub libc::c_int);

impl Drop for Fd {
    fn drop(&mut self) {
        if self.0 >= 0 {
            // SAFETY: we own the fd.
            unsafe { libc::close(self.0) };
        }
    }
}

impl Fd {
    /// Closes now and reports the error (drop ignores it).
    pub fn close(mut self) -> io::Result<()> {
        let fd = std::mem::replace(&mut self.0, -1);
        // SAFETY: we own the fd; it is not used again.
        check(unsafe { libc::close(fd) } as libc::c_long, "close").map(|_| ())
    }
}

/// A pipe: (read end, write end).
pub fn pipe() -> io::Result<(Fd, Fd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors.
    check(
        unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } as libc::c_long,
        "pipe2",
    )?;
    Ok((Fd(fds[0]), Fd(fds[1])))
}

/// Writes one byte.
#[inline(always)]
pub fn write1(fd: &Fd) -> io::Result<()> {
    let b = 0u8;
    // SAFETY: one readable byte at `&b`.
    let n = unsafe { libc::write(fd.0, &b as *const u8 as *const libc::c_void, 1) };
    if n == 1 {
        Ok(())
    } else {
        Err(last_err("write"))
    }
}

/// Reads one byte; `Ok(false)` at end of file. Restarts on EINTR.
#[inline(always)]
pub fn read1(fd: &Fd) -> io::Result<bool> {
    let mut b = 0u8;
    loop {
        // SAFETY: one writable byte at `&mut b`.
        let n = unsafe { libc::read(fd.0, &mut b as *mut u8 as *mut libc::c_void, 1) };
        match n {
            1 => return Ok(true),
            0 => return Ok(false),
            _ => {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Err(io::Error::new(e.kind(), format!("read: {e}")));
            }
        }
    }
}

// ---- perfmon --------------------------------------------------------------

/// Where the device is.
pub const DEVICE: &[u8] = b"/dev/perfmon\0";

/// One perfmon context (one open of /dev/perfmon).
#[derive(Debug)]
pub struct Pfm {
    pub fd: Fd,
}

impl Pfm {
    /// Opens a context.
    #[inline(always)]
    pub fn open() -> io::Result<Self> {
        // SAFETY: a NUL-terminated path.
        let fd = unsafe {
            libc::open(
                DEVICE.as_ptr() as *const libc::c_char,
                libc::O_RDWR | libc::O_CLOEXEC,
            )
        };
        check(fd as libc::c_long, "open /dev/perfmon")?;
        Ok(Pfm { fd: Fd(fd) })
    }

    #[inline(always)]
    fn ioctl_none(&self, req: u32, what: &str) -> io::Result<()> {
        // SAFETY: an _IO request reads and writes no user memory.
        check(
            unsafe { libc::ioctl(self.fd.0, req as _, 0usize) } as libc::c_long,
            what,
        )
        .map(|_| ())
    }

    /// PFM_IOC_WRITE_PMCS: PMC i selects `events[i]`.
    #[inline(always)]
    pub fn program(&self, events: &[u64]) -> io::Result<()> {
        let mut pmcs = [PfmPmc::default(); 8];
        let n = events.len().min(pmcs.len());
        for (i, (p, &ev)) in pmcs.iter_mut().zip(events).enumerate() {
            p.reg_num = i as u16;
            p.reg_value = ev;
        }
        let mut arg = PfmRegsArg {
            regs: pmcs.as_mut_ptr() as u64,
            count: n as u32,
            ..Default::default()
        };
        // SAFETY: `arg` is a PfmRegsArg (the size the request encodes) pointing
        // at `n` writable PfmPmc elements that outlive the call.
        let ret = unsafe {
            libc::ioctl(
                self.fd.0,
                abi::PFM_IOC_WRITE_PMCS as _,
                &mut arg as *mut PfmRegsArg,
            )
        };
        check(ret as libc::c_long, "PFM_IOC_WRITE_PMCS").map(|_| ())
    }

    /// PFM_IOC_WRITE_PMDS of `pmds`.
    pub fn write_pmds(&self, pmds: &mut [PfmPmd]) -> io::Result<()> {
        let mut arg = PfmRegsArg {
            regs: pmds.as_mut_ptr() as u64,
            count: pmds.len() as u32,
            ..Default::default()
        };
        // SAFETY: `arg` is a PfmRegsArg pointing at `pmds`, writable PfmPmd
        // elements that outlive the call.
        let ret = unsafe {
            libc::ioctl(
                self.fd.0,
                abi::PFM_IOC_WRITE_PMDS as _,
                &mut arg as *mut PfmRegsArg,
            )
        };
        check(ret as libc::c_long, "PFM_IOC_WRITE_PMDS").map(|_| ())
    }

    /// PFM_IOC_WRITE_PMCS in event set `set`: PMC i selects `events[i]`.
    pub fn program_set(&self, set: u16, events: &[u64]) -> io::Result<()> {
        let mut pmcs = [PfmPmc::default(); 8];
        let n = events.len().min(pmcs.len());
        for (i, (p, &ev)) in pmcs.iter_mut().zip(events).enumerate() {
            p.reg_num = i as u16;
            p.reg_set = set;
            p.reg_value = ev;
        }
        let mut arg = PfmRegsArg {
            regs: pmcs.as_mut_ptr() as u64,
            count: n as u32,
            ..Default::default()
        };
        // SAFETY: `arg` is a PfmRegsArg pointing at `n` writable PfmPmc
        // elements that outlive the call.
        let ret = unsafe {
            libc::ioctl(
                self.fd.0,
                abi::PFM_IOC_WRITE_PMCS as _,
                &mut arg as *mut PfmRegsArg,
            )
        };
        check(ret as libc::c_long, "PFM_IOC_WRITE_PMCS (set)").map(|_| ())
    }

    /// A sets call (`cmd`) on the array `elems`.
    fn sets_call<T>(&self, cmd: u32, elems: &mut [T], what: &str) -> io::Result<()> {
        let mut arg = PfmSetsArg {
            sets: elems.as_mut_ptr() as u64,
            count: elems.len() as u32,
            ..Default::default()
        };
        // SAFETY: `arg` is a PfmSetsArg pointing at `elems`, the element
        // type `cmd` takes, writable, outliving the call.
        let ret = unsafe { libc::ioctl(self.fd.0, cmd as _, &mut arg as *mut PfmSetsArg) };
        check(ret as libc::c_long, what).map(|_| ())
    }

    /// PFM_IOC_CREATE_SETS.
    pub fn create_sets(&self, descs: &mut [PfmSetdesc]) -> io::Result<()> {
        self.sets_call(abi::PFM_IOC_CREATE_SETS, descs, "PFM_IOC_CREATE_SETS")
    }

    /// PFM_IOC_DELETE_SETS.
    pub fn delete_sets(&self, ids: &[u16]) -> io::Result<()> {
        let mut ids = ids.to_vec();
        self.sets_call(abi::PFM_IOC_DELETE_SETS, &mut ids, "PFM_IOC_DELETE_SETS")
    }

    /// PFM_IOC_GETINFO_SETS of sets `ids`.
    pub fn sets_info(&self, ids: &[u16]) -> io::Result<Vec<PfmSetinfo>> {
        let mut infos: Vec<PfmSetinfo> = ids
            .iter()
            .map(|&set_id| PfmSetinfo {
                set_id,
                ..Default::default()
            })
            .collect();
        self.sets_call(
            abi::PFM_IOC_GETINFO_SETS,
            &mut infos,
            "PFM_IOC_GETINFO_SETS",
        )?;
        Ok(infos)
    }

    /// PFM_IOC_READ_VALUES of set `set` (PFM_VALFL_SET): its values of the
    /// PMDs in `mask` into `vals`.
    pub fn read_set_values(&self, set: u16, mask: u64, vals: &mut [u64]) -> io::Result<()> {
        let mut arg = abi::PfmValues {
            pmd_mask: mask,
            values: vals.as_mut_ptr() as u64,
            set,
            vflags: abi::PFM_VALFL_SET,
            ..Default::default()
        };
        // SAFETY: as for `read_values`.
        let ret = unsafe {
            libc::ioctl(
                self.fd.0,
                abi::PFM_IOC_READ_VALUES as _,
                &mut arg as *mut abi::PfmValues,
            )
        };
        check(ret as libc::c_long, "PFM_IOC_READ_VALUES (set)").map(|_| ())
    }

    /// PFM_IOC_LOAD on `tid` (0: the caller).
    #[inline(always)]
    pub fn load(&self, tid: u32) -> io::Result<()> {
        self.load_flags(tid, 0)
    }

    /// PFM_IOC_CLONE: a new context programmed as this one (close-on-exec).
    #[inline(always)]
    pub fn clone_programmed(&self) -> io::Result<Self> {
        let mut c = abi::PfmClone {
            flags: abi::PFM_CLONE_CLOEXEC,
            ..Default::default()
        };
        // SAFETY: `c` is a PfmClone, the size the request encodes.
        let fd = unsafe {
            libc::ioctl(
                self.fd.0,
                abi::PFM_IOC_CLONE as _,
                &mut c as *mut abi::PfmClone,
            )
        };
        check(fd as libc::c_long, "PFM_IOC_CLONE")?;
        Ok(Pfm { fd: Fd(fd) })
    }

    /// PFM_IOC_SET_FLAGS (`PFM_CTXFL_*`).
    pub fn set_flags(&self, flags: u32) -> io::Result<()> {
        let mut f = abi::PfmCtxFlags {
            flags,
            ..Default::default()
        };
        // SAFETY: `f` is a PfmCtxFlags, the size the request encodes.
        let ret = unsafe {
            libc::ioctl(
                self.fd.0,
                abi::PFM_IOC_SET_FLAGS as _,
                &mut f as *mut abi::PfmCtxFlags,
            )
        };
        check(ret as libc::c_long, "PFM_IOC_SET_FLAGS").map(|_| ())
    }

    /// PFM_IOC_READ_THREADS of the PMDs in `mask` into `rows`: (rows
    /// written, lost threads).
    pub fn read_threads(&self, mask: u64, rows: &mut [abi::PfmThread]) -> io::Result<(u32, u32)> {
        let mut a = abi::PfmThreadsArg {
            threads: rows.as_mut_ptr() as u64,
            pmd_mask: mask,
            count: rows.len() as u32,
            ..Default::default()
        };
        // SAFETY: `a` points at `rows.len()` writable rows that outlive the call.
        let ret = unsafe {
            libc::ioctl(
                self.fd.0,
                abi::PFM_IOC_READ_THREADS as _,
                &mut a as *mut abi::PfmThreadsArg,
            )
        };
        check(ret as libc::c_long, "PFM_IOC_READ_THREADS")?;
        Ok((a.needed, a.lost_threads))
    }

    /// PFM_IOC_LOAD on `tid` with `PFM_LOAD_*` `flags`.
    #[inline(always)]
    pub fn load_flags(&self, tid: u32, flags: u32) -> io::Result<()> {
        let mut l = PfmLoad {
            tid,
            flags,
            ..Default::default()
        };
        // SAFETY: `l` is a PfmLoad, the size the request encodes.
        let ret = unsafe { libc::ioctl(self.fd.0, abi::PFM_IOC_LOAD as _, &mut l as *mut PfmLoad) };
        check(ret as libc::c_long, "PFM_IOC_LOAD").map(|_| ())
    }

    #[inline(always)]
    pub fn unload(&self) -> io::Result<()> {
        self.ioctl_none(abi::PFM_IOC_UNLOAD, "PFM_IOC_UNLOAD")
    }

    #[inline(always)]
    pub fn start(&self) -> io::Result<()> {
        self.ioctl_none(abi::PFM_IOC_START, "PFM_IOC_START")
    }

    #[inline(always)]
    pub fn stop(&self) -> io::Result<()> {
        self.ioctl_none(abi::PFM_IOC_STOP, "PFM_IOC_STOP")
    }

    /// PFM_IOC_READ_PMDS of `regs` (reg_num set by the caller); returns
    /// (time_enabled, time_running).
    #[inline(always)]
    pub fn read_pmds(&self, regs: &mut [PfmPmd], arg: &mut PfmRegsArg) -> io::Result<(u64, u64)> {
        arg.regs = regs.as_mut_ptr() as u64;
        arg.count = regs.len() as u32;
        // SAFETY: `arg` is a PfmRegsArg pointing at `regs.len()` writable
        // PfmPmd elements that outlive the call.
        let ret = unsafe {
            libc::ioctl(
                self.fd.0,
                abi::PFM_IOC_READ_PMDS as _,
                arg as *mut PfmRegsArg,
            )
        };
        check(ret as libc::c_long, "PFM_IOC_READ_PMDS")?;
        Ok((arg.time_enabled, arg.time_running))
    }

    /// PFM_IOC_READ_VALUES of the PMDs in `mask` into `vals`; returns
    /// (time_enabled, time_running).
    #[inline(always)]
    pub fn read_values(&self, mask: u64, vals: &mut [u64]) -> io::Result<(u64, u64)> {
        let mut arg = abi::PfmValues {
            pmd_mask: mask,
            values: vals.as_mut_ptr() as u64,
            ..Default::default()
        };
        // SAFETY: `arg` is a PfmValues pointing at `vals`, which has room for
        // one u64 per bit of `mask` (the caller sizes it) and outlives the call.
        let ret = unsafe {
            libc::ioctl(
                self.fd.0,
                abi::PFM_IOC_READ_VALUES as _,
                &mut arg as *mut abi::PfmValues,
            )
        };
        check(ret as libc::c_long, "PFM_IOC_READ_VALUES")?;
        Ok((arg.time_enabled, arg.time_running))
    }

    /// PFM_IOC_GET_STATE.
    pub fn state(&self) -> io::Result<PfmCtxInfo> {
        let mut s = PfmCtxInfo::default();
        // SAFETY: `s` is a PfmCtxInfo, the size the request encodes.
        let ret = unsafe {
            libc::ioctl(
                self.fd.0,
                abi::PFM_IOC_GET_STATE as _,
                &mut s as *mut PfmCtxInfo,
            )
        };
        check(ret as libc::c_long, "PFM_IOC_GET_STATE")?;
        Ok(s)
    }
}

/// PMD array for reading counters 0..n.
pub fn pmd_array(n: usize) -> Vec<PfmPmd> {
    (0..n)
        .map(|i| PfmPmd {
            reg_num: i as u16,
            ..Default::default()
        })
        .collect()
}

// ---- perf_event ---------------------------------------------------------

pub const PERF_TYPE_SOFTWARE: u32 = 1;
pub const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
pub const PERF_COUNT_SW_CONTEXT_SWITCHES: u64 = 3;
pub const PERF_COUNT_SW_CPU_MIGRATIONS: u64 = 4;
pub const PERF_FORMAT_TOTAL_TIME_ENABLED: u64 = 1 << 0;
pub const PERF_FORMAT_TOTAL_TIME_RUNNING: u64 = 1 << 1;
pub const PERF_FORMAT_GROUP: u64 = 1 << 3;
const PERF_EVENT_IOC_ENABLE: u64 = 0x2400;
const PERF_EVENT_IOC_DISABLE: u64 = 0x2401;
const PERF_IOC_FLAG_GROUP: u64 = 1;
const PERF_FLAG_FD_CLOEXEC: u64 = 1 << 3;
const ATTR_DISABLED: u64 = 1 << 0;
const ATTR_INHERIT: u64 = 1 << 1;

/// `struct perf_event_attr`, PERF_ATTR_SIZE_VER8 (136 bytes): only the
/// leading fields are named; the rest is zero.
#[repr(C)]
#[derive(Clone, Copy)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    rest: [u64; 11],
}
const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == 136);

/// One perf fd per event, the first the group leader (created disabled,
/// members follow it). `read_format` of every event: TOTAL_TIME_ENABLED |
/// TOTAL_TIME_RUNNING, plus GROUP when there is more than one event.
#[derive(Debug)]
pub struct PerfGroup {
    pub fds: Vec<Fd>,
    pub group_format: bool,
}

impl PerfGroup {
    /// Opens software events `configs` on thread `tid` (0: the caller), any CPU.
    #[inline(always)]
    pub fn open(configs: &[u64], tid: u32) -> io::Result<Self> {
        Self::open_with(configs, tid, false)
    }

    /// [`PerfGroup::open`]; with `inherit`, every event has `inherit=1`
    /// (as `perf stat`'s) and is read on its own (no `PERF_FORMAT_GROUP`).
    #[inline(always)]
    pub fn open_with(configs: &[u64], tid: u32, inherit: bool) -> io::Result<Self> {
        let group_format = configs.len() > 1 && !inherit;
        let mut fds: Vec<Fd> = Vec::with_capacity(configs.len());
        for &c in configs {
            let mut rf = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
            if group_format {
                rf |= PERF_FORMAT_GROUP;
            }
            let attr = PerfEventAttr {
                type_: PERF_TYPE_SOFTWARE,
                size: std::mem::size_of::<PerfEventAttr>() as u32,
                config: c,
                sample_period: 0,
                sample_type: 0,
                read_format: rf,
                flags: if fds.is_empty() { ATTR_DISABLED } else { 0 }
                    | if inherit { ATTR_INHERIT } else { 0 },
                rest: [0; 11],
            };
            let group_fd = fds.first().map(|f| f.0).unwrap_or(-1);
            // SAFETY: `attr` is a valid perf_event_attr of the size it states.
            let fd = unsafe {
                libc::syscall(
                    libc::SYS_perf_event_open,
                    &attr as *const PerfEventAttr,
                    tid as libc::pid_t,
                    -1 as libc::c_int,
                    group_fd,
                    PERF_FLAG_FD_CLOEXEC,
                )
            };
            check(fd, "perf_event_open")?;
            fds.push(Fd(fd as libc::c_int));
        }
        Ok(PerfGroup { fds, group_format })
    }

    #[inline(always)]
    fn leader_ioctl(&self, req: u64, what: &str) -> io::Result<()> {
        // SAFETY: ENABLE/DISABLE take an integer flag, no pointer.
        check(
            unsafe { libc::ioctl(self.fds[0].0, req as _, PERF_IOC_FLAG_GROUP) } as libc::c_long,
            what,
        )
        .map(|_| ())
    }

    #[inline(always)]
    pub fn enable(&self) -> io::Result<()> {
        self.leader_ioctl(PERF_EVENT_IOC_ENABLE, "PERF_EVENT_IOC_ENABLE")
    }

    #[inline(always)]
    pub fn disable(&self) -> io::Result<()> {
        self.leader_ioctl(PERF_EVENT_IOC_DISABLE, "PERF_EVENT_IOC_DISABLE")
    }

    /// Bytes one read of the leader returns.
    pub fn read_size(&self) -> usize {
        if self.group_format {
            8 * (3 + self.fds.len())
        } else {
            24
        }
    }

    /// One read(2) of the leader into `buf` (at least `read_size()` words).
    #[inline(always)]
    pub fn read_into(&self, buf: &mut [u64]) -> io::Result<()> {
        let want = self.read_size();
        debug_assert!(buf.len() * 8 >= want);
        // SAFETY: `buf` has room for `want` bytes.
        let n = unsafe { libc::read(self.fds[0].0, buf.as_mut_ptr() as *mut libc::c_void, want) };
        if n as usize == want {
            Ok(())
        } else {
            Err(last_err("read(perf)"))
        }
    }

    /// The counts, in event order.
    pub fn values(&self) -> io::Result<Vec<u64>> {
        let mut buf = vec![0u64; 3 + self.fds.len()];
        if self.group_format {
            self.read_into(&mut buf)?;
            Ok(buf[3..3 + self.fds.len()].to_vec())
        } else {
            self.read_into(&mut buf)?;
            Ok(vec![buf[0]])
        }
    }

    /// Closes every fd (members first, then the leader), reporting errors.
    #[inline(always)]
    pub fn close(mut self) -> io::Result<()> {
        while let Some(fd) = self.fds.pop() {
            fd.close()?;
        }
        Ok(())
    }
}

// ---- /proc, /sys ----------------------------------------------------------

/// Fields of /proc/meminfo in kB.
pub fn meminfo(fields: &[&str]) -> Vec<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    fields
        .iter()
        .map(|f| {
            text.lines()
                .find_map(|l| {
                    let rest = l.strip_prefix(f)?.strip_prefix(':')?;
                    rest.split_whitespace().next()?.parse().ok()
                })
                .unwrap_or(0)
        })
        .collect()
}

/// One line of a text file, trimmed.
pub fn read_line(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// A context's counter page, mapped read-only; unmapped on drop.
pub struct Page(std::ptr::NonNull<crate::pfm_page::PageCells>);

impl Page {
    /// mmap of `pfm`'s page.
    pub fn map(pfm: &Pfm) -> io::Result<Self> {
        // SAFETY: a new read-only mapping at an address the kernel picks.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                abi::PFM_PAGE_SIZE,
                libc::PROT_READ,
                libc::MAP_SHARED,
                pfm.fd.0,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        std::ptr::NonNull::new(p.cast())
            .map(Page)
            .ok_or_else(|| io::Error::other("mmap returned NULL"))
    }

    /// The PMDs of `mask` into `vals` (PMD order), without a system call;
    /// `Ok(false)` if the reading was not live (the caller is not the
    /// running monitored thread) or not consistent.
    #[inline(always)]
    pub fn read(&self, mask: u64, vals: &mut [u64]) -> io::Result<bool> {
        // SAFETY: the mapping lives as long as `self`; its cells are atomics.
        let cells = unsafe { self.0.as_ref() };
        Ok(cells.read_into(mask, &Rdtscp, vals).is_some_and(|m| m.live))
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        // SAFETY: our mapping of that length, unmapped once.
        unsafe { libc::munmap(self.0.as_ptr().cast(), abi::PFM_PAGE_SIZE) };
    }
}

/// The reader's CPU: `rdtscp`; no `rdpmc` (the soft model has no index).
struct Rdtscp;

impl crate::pfm_page::UserCpu for Rdtscp {
    #[inline(always)]
    fn rdtscp(&self) -> (u64, u32) {
        let mut aux = 0u32;
        // SAFETY: called only when the kernel said the CPU has rdtscp.
        let t = unsafe { core::arch::x86_64::__rdtscp(&mut aux) };
        (t, aux)
    }
    fn rdpmc(&self, _: u32) -> u64 {
        0
    }
}

// ---- sampling -------------------------------------------------------------

/// A shared mapping of `len` bytes at `offset` of `fd`, unmapped on drop.
pub struct Mapping {
    base: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: Shared memory, read and written only through atomics.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Maps `len` bytes at `offset` of `fd`, shared, readable and writable.
    pub fn new(fd: &Fd, len: usize, offset: libc::off_t, what: &str) -> io::Result<Self> {
        // SAFETY: A new mapping chosen by the kernel: no existing memory
        // is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.0,
                offset,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::new(
                io::Error::last_os_error().kind(),
                format!("mmap {what}: {}", io::Error::last_os_error()),
            ));
        }
        let base = std::ptr::NonNull::new(p.cast::<u8>())
            .ok_or_else(|| io::Error::other(format!("mmap {what}: NULL")))?;
        Ok(Mapping { base, len })
    }

    /// The 64-bit word at byte `off` (8-byte aligned, inside).
    fn word(&self, off: usize) -> &std::sync::atomic::AtomicU64 {
        assert!(off % 8 == 0 && off + 8 <= self.len);
        // SAFETY: Inside the mapping and aligned (checked); the memory is
        // only accessed through atomics.
        unsafe {
            &*self
                .base
                .as_ptr()
                .add(off)
                .cast::<std::sync::atomic::AtomicU64>()
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: Our own mapping, of that length, unmapped once.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// What a drain of a sampling buffer found: samples, the sum of their IPs
/// (read, as a tool would), and what the buffer says it lost.
#[derive(Clone, Copy, Debug, Default)]
pub struct Drained {
    pub samples: u64,
    pub ip_sum: u64,
    pub lost: u64,
}

/// A perfmon context sampling its thread's context switches every
/// `period`, into a buffer of `pages` pages.
pub struct PfmSampler {
    pub pfm: Pfm,
    map: Mapping,
    pages: usize,
}

impl PfmSampler {
    /// PMD 0 counts context switches from -`period`, resets to it, and
    /// writes an entry at each overflow (no values); LOADed on `tid`
    /// (0: the caller) and started.
    pub fn new(tid: u32, period: u64, pages: usize) -> io::Result<Self> {
        Self::on_event(crate::CS, tid, period, pages)
    }

    /// [`PfmSampler::new`] on soft event `event` (task-clock: every
    /// `period` ns of the thread's running time, from the soft model's
    /// per-CPU timer).
    pub fn on_event(event: u64, tid: u32, period: u64, pages: usize) -> io::Result<Self> {
        let pfm = Pfm::open()?;
        pfm.program(&[event])?;
        let minus = period.wrapping_neg();
        let mut pmd = [PfmPmd {
            reg_num: 0,
            reg_value: minus,
            reg_short_reset: minus,
            reg_long_reset: minus,
            ..Default::default()
        }];
        pfm.write_pmds(&mut pmd)?;
        let mut s = abi::PfmSmplSetup {
            data_pages: pages as u32,
            flags: abi::PFM_SMPL_DROP,
            ..Default::default()
        };
        // SAFETY: `s` is a PfmSmplSetup, the size the request encodes.
        let ret = unsafe {
            libc::ioctl(
                pfm.fd.0,
                abi::PFM_IOC_SMPL_SETUP as _,
                &mut s as *mut abi::PfmSmplSetup,
            )
        };
        check(ret as libc::c_long, "PFM_IOC_SMPL_SETUP")?;
        let map = Mapping::new(
            &pfm.fd,
            (1 + pages) * abi::PFM_PAGE_SIZE,
            abi::PFM_SMPL_OFFSET as libc::off_t,
            "the sampling buffer",
        )?;
        pfm.load_flags(tid, abi::PFM_LOAD_START)?;
        Ok(PfmSampler { pfm, map, pages })
    }

    /// Entries written so far (the buffer's `head`, in entries).
    pub fn written(&self) -> u64 {
        const HEAD: usize = 16;
        const ENTRY: u64 = std::mem::size_of::<abi::PfmSmplEntry>() as u64;
        self.map
            .word(HEAD)
            .load(std::sync::atomic::Ordering::Acquire)
            / ENTRY
    }

    /// Reads every entry (its IP) and consumes them (perf's protocol:
    /// `head` acquired, `tail` released).
    pub fn drain(&self) -> Drained {
        use std::sync::atomic::Ordering;
        const HEAD: usize = 16;
        const TAIL: usize = 24;
        const LOST: usize = 40;
        const ENTRY: u64 = std::mem::size_of::<abi::PfmSmplEntry>() as u64;
        let size = (self.pages * abi::PFM_PAGE_SIZE) as u64;
        let head = self.map.word(HEAD).load(Ordering::Acquire);
        let mut tail = self.map.word(TAIL).load(Ordering::Relaxed);
        let mut d = Drained::default();
        while tail < head {
            let ip_off = abi::PFM_PAGE_SIZE
                + (tail % size) as usize
                + std::mem::offset_of!(abi::PfmSmplEntry, ip);
            d.ip_sum = d
                .ip_sum
                .wrapping_add(self.map.word(ip_off).load(Ordering::Relaxed));
            d.samples += 1;
            tail += ENTRY;
        }
        self.map.word(TAIL).store(tail, Ordering::Release);
        d.lost = self.map.word(LOST).load(Ordering::Relaxed);
        d
    }
}

/// perf_event sampling its thread's context switches every `period`:
/// IP, TID, TIME, CPU and PERIOD per sample (what a perfmon entry holds
/// besides PMD values), into a ring of `pages` pages.
pub struct PerfSampler {
    pub fd: Fd,
    map: Mapping,
    pages: usize,
}

impl PerfSampler {
    /// Opened on `tid` (0: the caller) and enabled.
    pub fn new(tid: u32, period: u64, pages: usize) -> io::Result<Self> {
        /// PERF_SAMPLE_IP | TID | TIME | CPU | PERIOD.
        const SAMPLE_TYPE: u64 = 1 | 1 << 1 | 1 << 2 | 1 << 7 | 1 << 8;
        let attr = PerfEventAttr {
            type_: PERF_TYPE_SOFTWARE,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config: PERF_COUNT_SW_CONTEXT_SWITCHES,
            sample_period: period,
            sample_type: SAMPLE_TYPE,
            read_format: 0,
            flags: ATTR_DISABLED,
            rest: [0; 11],
        };
        // SAFETY: `attr` is a valid perf_event_attr of the size it states.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &attr as *const PerfEventAttr,
                tid as libc::pid_t,
                -1 as libc::c_int,
                -1 as libc::c_int,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        check(fd, "perf_event_open (sampling)")?;
        let fd = Fd(fd as libc::c_int);
        let map = Mapping::new(&fd, (1 + pages) * 4096, 0, "perf's ring")?;
        // SAFETY: an _IO request on our perf fd.
        let ret = unsafe { libc::ioctl(fd.0, PERF_EVENT_IOC_ENABLE as _, 0) };
        check(ret as libc::c_long, "PERF_EVENT_IOC_ENABLE")?;
        Ok(PerfSampler { fd, map, pages })
    }

    /// Reads every record (a sample's IP) and consumes them.
    pub fn drain(&self) -> Drained {
        use std::sync::atomic::Ordering;
        const DATA_HEAD: usize = 1024;
        const DATA_TAIL: usize = 1032;
        const RECORD_LOST: u64 = 2;
        const RECORD_SAMPLE: u64 = 9;
        let size = (self.pages * 4096) as u64;
        let head = self.map.word(DATA_HEAD).load(Ordering::Acquire);
        let mut tail = self.map.word(DATA_TAIL).load(Ordering::Relaxed);
        let mut d = Drained::default();
        while tail < head {
            let at = |x: u64| 4096 + ((tail + x) % size) as usize;
            let h = self.map.word(at(0)).load(Ordering::Relaxed);
            let (ty, len) = (h & 0xffff_ffff, h >> 48);
            if len == 0 {
                break;
            }
            match ty {
                RECORD_SAMPLE => {
                    d.samples += 1;
                    d.ip_sum = d
                        .ip_sum
                        .wrapping_add(self.map.word(at(8)).load(Ordering::Relaxed));
                }
                RECORD_LOST => d.lost += self.map.word(at(16)).load(Ordering::Relaxed),
                _ => {}
            }
            tail += len;
        }
        self.map.word(DATA_TAIL).store(tail, Ordering::Release);
        d
    }

    /// Disables it.
    pub fn disable(&self) -> io::Result<()> {
        // SAFETY: an _IO request on our perf fd.
        let ret = unsafe { libc::ioctl(self.fd.0, PERF_EVENT_IOC_DISABLE as _, 0) };
        check(ret as libc::c_long, "PERF_EVENT_IOC_DISABLE").map(|_| ())
    }
}
