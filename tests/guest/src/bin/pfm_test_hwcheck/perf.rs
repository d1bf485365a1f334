//! perf_events' hardware counters, the oracle on a machine with a PMU:
//! `perf_event_open` of generalized hardware events on the calling
//! thread, user mode only, and the fixed loop both sides count.

use std::io;

/// `PERF_TYPE_HARDWARE` and its generalized events.
const PERF_TYPE_HARDWARE: u32 = 0;
pub const HW_CPU_CYCLES: u64 = 0;
pub const HW_INSTRUCTIONS: u64 = 1;
pub const HW_BRANCH_INSTRUCTIONS: u64 = 4;

/// `perf_event_attr` flag bits (the bitfield after `read_format`).
const DISABLED: u64 = 1 << 0;
const EXCLUDE_KERNEL: u64 = 1 << 5;
const EXCLUDE_HV: u64 = 1 << 6;

/// `PERF_EVENT_IOC_*` (`_IO('$', n)`).
const IOC_ENABLE: libc::c_ulong = 0x2400;
const IOC_DISABLE: libc::c_ulong = 0x2401;
const IOC_REFRESH: libc::c_ulong = 0x2402;
const IOC_RESET: libc::c_ulong = 0x2403;

/// `struct perf_event_attr` up to `PERF_ATTR_SIZE_VER0`.
#[repr(C)]
#[derive(Default)]
struct Attr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

/// One hardware event of perf_events on the calling thread, user mode.
pub struct HwEvent(libc::c_int);

impl HwEvent {
    /// Opens generalized hardware event `config`, disabled; with a
    /// `period`, a sampling event (its overflows need the PMI).
    pub fn open(config: u64, period: u64) -> io::Result<Self> {
        let attr = Attr {
            type_: PERF_TYPE_HARDWARE,
            size: std::mem::size_of::<Attr>() as u32,
            config,
            sample_period: period,
            flags: DISABLED | EXCLUDE_KERNEL | EXCLUDE_HV,
            ..Attr::default()
        };
        // SAFETY: `attr` is a valid perf_event_attr of the size it states;
        // pid 0 / cpu -1: the calling thread on any CPU.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &attr as *const Attr,
                0,
                -1,
                -1,
                0,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(HwEvent(fd as libc::c_int))
    }

    fn ioctl(&self, req: libc::c_ulong, arg: libc::c_ulong) -> io::Result<()> {
        // SAFETY: A perf event fd and one of its argument-less (or integer
        // argument) requests.
        if unsafe { libc::ioctl(self.0, req, arg) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    pub fn reset_enable(&self) -> io::Result<()> {
        self.ioctl(IOC_RESET, 0)?;
        self.ioctl(IOC_ENABLE, 0)
    }

    pub fn disable(&self) -> io::Result<()> {
        self.ioctl(IOC_DISABLE, 0)
    }

    /// Enables the event for `n` more overflows, after which perf's
    /// overflow handler (the PMI) disables it.
    pub fn refresh(&self, n: u64) -> io::Result<()> {
        self.ioctl(IOC_REFRESH, n as libc::c_ulong)
    }

    pub fn read(&self) -> io::Result<u64> {
        let mut v = 0u64;
        // SAFETY: Reads 8 bytes (the default read_format) into `v`.
        let n = unsafe { libc::read(self.0, &mut v as *mut u64 as *mut libc::c_void, 8) };
        if n != 8 {
            return Err(io::Error::last_os_error());
        }
        Ok(v)
    }
}

impl Drop for HwEvent {
    fn drop(&mut self) {
        // SAFETY: Our fd, closed once.
        unsafe { libc::close(self.0) };
    }
}

/// Whether perf_events has a hardware PMU here: `Err` says why not.
pub fn has_pmu() -> Result<(), String> {
    HwEvent::open(HW_CPU_CYCLES, 0)
        .map(drop)
        .map_err(|e| format!("perf_event_open(cycles): {e}"))
}

/// The fixed loop: `n` iterations of `dec; jnz`, so exactly 2n
/// instructions and n branches retire inside it, in user mode.
#[inline(never)]
pub fn fixed_loop(n: u64) {
    if n == 0 {
        return;
    }
    // SAFETY: Register arithmetic and a local branch only.
    unsafe {
        core::arch::asm!(
            "2:",
            "dec {n}",
            "jnz 2b",
            n = inout(reg) n => _,
            options(nomem, nostack)
        );
    }
}
