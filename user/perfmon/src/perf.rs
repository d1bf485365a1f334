//! A tiny perf_event_open(2) wrapper for the kernel's software events, per
//! thread. perfmon's soft PMU model counts the same things, so perf is the
//! oracle the guest tests and `pfm stat --perf` compare against.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd};

use crate::error::{Error, Op, Result};
use crate::sys::{self, PerfEventAttr};

const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_FORMAT_TOTAL_TIME_ENABLED: u64 = 1 << 0;
const PERF_FORMAT_TOTAL_TIME_RUNNING: u64 = 1 << 1;
const ATTR_DISABLED: u64 = 1 << 0;
const ATTR_INHERIT: u64 = 1 << 1;
const ATTR_ENABLE_ON_EXEC: u64 = 1 << 12;
/// `_IO('$', 0)`, `_IO('$', 1)`, `_IO('$', 3)`.
const PERF_EVENT_IOC_ENABLE: u64 = 0x2400;
const PERF_EVENT_IOC_DISABLE: u64 = 0x2401;
const PERF_EVENT_IOC_RESET: u64 = 0x2403;
const PERF_IOC_FLAG_GROUP: u64 = 1;

/// A software event of perf_events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SoftwareEvent {
    /// `PERF_COUNT_SW_CPU_CLOCK` (ns).
    CpuClock,
    /// `PERF_COUNT_SW_TASK_CLOCK` (ns).
    TaskClock,
    /// `PERF_COUNT_SW_PAGE_FAULTS`.
    PageFaults,
    /// `PERF_COUNT_SW_CONTEXT_SWITCHES`.
    ContextSwitches,
    /// `PERF_COUNT_SW_CPU_MIGRATIONS`.
    CpuMigrations,
    /// `PERF_COUNT_SW_PAGE_FAULTS_MIN`.
    MinorFaults,
    /// `PERF_COUNT_SW_PAGE_FAULTS_MAJ`.
    MajorFaults,
}

impl SoftwareEvent {
    fn config(self) -> u64 {
        match self {
            SoftwareEvent::CpuClock => 0,
            SoftwareEvent::TaskClock => 1,
            SoftwareEvent::PageFaults => 2,
            SoftwareEvent::ContextSwitches => 3,
            SoftwareEvent::CpuMigrations => 4,
            SoftwareEvent::MinorFaults => 5,
            SoftwareEvent::MajorFaults => 6,
        }
    }

    /// perf's name for the event.
    pub fn name(self) -> &'static str {
        match self {
            SoftwareEvent::CpuClock => "cpu-clock",
            SoftwareEvent::TaskClock => "task-clock",
            SoftwareEvent::PageFaults => "page-faults",
            SoftwareEvent::ContextSwitches => "context-switches",
            SoftwareEvent::CpuMigrations => "cpu-migrations",
            SoftwareEvent::MinorFaults => "minor-faults",
            SoftwareEvent::MajorFaults => "major-faults",
        }
    }

    /// The event called `name` by perf (the same names as perfmon's soft
    /// model), if any.
    pub fn from_name(name: &str) -> Option<Self> {
        [
            SoftwareEvent::CpuClock,
            SoftwareEvent::TaskClock,
            SoftwareEvent::PageFaults,
            SoftwareEvent::ContextSwitches,
            SoftwareEvent::CpuMigrations,
            SoftwareEvent::MinorFaults,
            SoftwareEvent::MajorFaults,
        ]
        .into_iter()
        .find(|e| e.name() == name)
    }
}

/// A value read from a perf counter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PerfValue {
    /// The count.
    pub value: u64,
    /// ns the event was enabled.
    pub time_enabled: u64,
    /// ns the event was counting.
    pub time_running: u64,
}

/// One perf software counter for one thread, created disabled.
#[derive(Debug)]
pub struct PerfCounter {
    file: File,
    event: SoftwareEvent,
    tid: u32,
}

/// How perf counters follow their thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PerfOptions {
    /// `inherit`: also count the threads and processes the thread creates
    /// after the open, transitively (perf stat's default); a read returns
    /// the total, children's counts included (an exited child's are added
    /// at its exit).
    pub inherit: bool,
    /// `enable_on_exec`: the group starts counting at the thread's next
    /// exec instead of at [`PerfGroup::enable`] (perf stat's way of
    /// counting a command and none of its own fork).
    pub enable_on_exec: bool,
}

fn attr(event: SoftwareEvent, disabled: bool, opts: PerfOptions) -> PerfEventAttr {
    let mut flags = 0;
    if disabled {
        flags |= ATTR_DISABLED;
        // Only a disabled event is enabled by the exec: the group leader.
        if opts.enable_on_exec {
            flags |= ATTR_ENABLE_ON_EXEC;
        }
    }
    if opts.inherit {
        flags |= ATTR_INHERIT;
    }
    PerfEventAttr {
        type_: PERF_TYPE_SOFTWARE,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        config: event.config(),
        read_format: PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING,
        flags,
        ..Default::default()
    }
}

impl PerfCounter {
    /// Opens a disabled counter of `event` for thread `tid` (0 = the caller)
    /// on any CPU, user and kernel (context switches happen in the kernel).
    pub fn open(event: SoftwareEvent, tid: u32) -> Result<Self> {
        Self::open_in(event, tid, None, true, PerfOptions::default())
    }

    fn open_in(
        event: SoftwareEvent,
        tid: u32,
        group: Option<BorrowedFd<'_>>,
        disabled: bool,
        opts: PerfOptions,
    ) -> Result<Self> {
        let pid =
            i32::try_from(tid).map_err(|_| Error::os_tid(Op::PerfEventOpen, libc::ESRCH, tid))?;
        let fd = sys::perf_event_open(&attr(event, disabled, opts), pid, group)
            .map_err(|e| Error::os_tid(Op::PerfEventOpen, e, tid))?;
        Ok(PerfCounter {
            file: File::from(fd),
            event,
            tid,
        })
    }

    /// The event counted.
    pub fn event(&self) -> SoftwareEvent {
        self.event
    }

    /// The thread counted (0 = the thread that opened it).
    pub fn tid(&self) -> u32 {
        self.tid
    }

    /// Starts counting.
    pub fn enable(&self) -> Result<()> {
        self.ioctl(PERF_EVENT_IOC_ENABLE, 0)
    }

    /// Stops counting.
    pub fn disable(&self) -> Result<()> {
        self.ioctl(PERF_EVENT_IOC_DISABLE, 0)
    }

    /// Sets the count to zero.
    pub fn reset(&self) -> Result<()> {
        self.ioctl(PERF_EVENT_IOC_RESET, 0)
    }

    fn ioctl(&self, request: u64, flag: u64) -> Result<()> {
        sys::perf_ioctl(self.file.as_fd(), request, flag).map_err(|e| Error::os(Op::PerfIoctl, e))
    }

    /// Reads the count and its enabled/running times.
    pub fn read(&self) -> Result<PerfValue> {
        let mut buf = [0u8; 24];
        let n = loop {
            match (&self.file).read(&mut buf) {
                Ok(n) => break n,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => {
                    return Err(Error::os(
                        Op::PerfRead,
                        e.raw_os_error().unwrap_or(libc::EIO),
                    ))
                }
            }
        };
        if n != buf.len() {
            return Err(Error::os(Op::PerfRead, libc::EIO));
        }
        let word = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&buf[i * 8..i * 8 + 8]);
            u64::from_ne_bytes(a)
        };
        Ok(PerfValue {
            value: word(0),
            time_enabled: word(1),
            time_running: word(2),
        })
    }
}

/// Several software counters of one thread in one perf group, so that they
/// are enabled and disabled by a single ioctl, at the same instant.
#[derive(Debug)]
pub struct PerfGroup {
    counters: Vec<PerfCounter>,
}

impl PerfGroup {
    /// Opens `events` for thread `tid` (0 = the caller), disabled.
    pub fn open(events: &[SoftwareEvent], tid: u32) -> Result<Self> {
        Self::open_with(events, tid, PerfOptions::default())
    }

    /// [`PerfGroup::open`] with `opts`: inherited by the thread's children,
    /// enabled by its next exec.
    pub fn open_with(events: &[SoftwareEvent], tid: u32, opts: PerfOptions) -> Result<Self> {
        let mut counters: Vec<PerfCounter> = Vec::with_capacity(events.len());
        for (i, &ev) in events.iter().enumerate() {
            let c = match counters.first() {
                // The leader is created disabled; members follow it.
                None => PerfCounter::open_in(ev, tid, None, true, opts)?,
                Some(leader) => {
                    PerfCounter::open_in(ev, tid, Some(leader.file.as_fd()), false, opts)?
                }
            };
            debug_assert_eq!(counters.len(), i);
            counters.push(c);
        }
        if counters.is_empty() {
            return Err(Error::Usage("empty perf group".to_string()));
        }
        Ok(PerfGroup { counters })
    }

    fn leader(&self) -> &PerfCounter {
        &self.counters[0]
    }

    /// Starts every counter of the group at once.
    pub fn enable(&self) -> Result<()> {
        self.leader()
            .ioctl(PERF_EVENT_IOC_ENABLE, PERF_IOC_FLAG_GROUP)
    }

    /// Stops every counter of the group at once.
    pub fn disable(&self) -> Result<()> {
        self.leader()
            .ioctl(PERF_EVENT_IOC_DISABLE, PERF_IOC_FLAG_GROUP)
    }

    /// Resets every counter of the group.
    pub fn reset(&self) -> Result<()> {
        self.leader()
            .ioctl(PERF_EVENT_IOC_RESET, PERF_IOC_FLAG_GROUP)
    }

    /// Reads every counter, in the order of the events given to `open`.
    pub fn read(&self) -> Result<Vec<PerfValue>> {
        self.counters.iter().map(PerfCounter::read).collect()
    }

    /// The counters of the group.
    pub fn counters(&self) -> &[PerfCounter] {
        &self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_ioctl_numbers() {
        // _IO('$', n) = ('$' << 8) | n with no size and no direction.
        assert_eq!(PERF_EVENT_IOC_ENABLE, (b'$' as u64) << 8);
        assert_eq!(PERF_EVENT_IOC_DISABLE, ((b'$' as u64) << 8) | 1);
        assert_eq!(PERF_EVENT_IOC_RESET, ((b'$' as u64) << 8) | 3);
    }

    #[test]
    fn attr_flags() {
        let ev = SoftwareEvent::ContextSwitches;
        assert_eq!(attr(ev, true, PerfOptions::default()).flags, ATTR_DISABLED);
        assert_eq!(attr(ev, false, PerfOptions::default()).flags, 0);
        let both = PerfOptions {
            inherit: true,
            enable_on_exec: true,
        };
        // perf_event_attr's bits: disabled 0, inherit 1, enable_on_exec 12.
        assert_eq!(attr(ev, true, both).flags, 0b1 | 0b10 | (1 << 12));
        // A group member follows its leader: never enabled by the exec.
        assert_eq!(attr(ev, false, both).flags, 0b10);
    }

    #[test]
    fn names_round_trip() {
        for name in [
            "task-clock",
            "context-switches",
            "cpu-migrations",
            "page-faults",
            "minor-faults",
            "major-faults",
        ] {
            assert_eq!(SoftwareEvent::from_name(name).map(|e| e.name()), Some(name));
        }
        assert_eq!(SoftwareEvent::from_name("cycles"), None);
    }

    /// Uses perf on the build machine when it allows it; says so otherwise.
    #[test]
    fn counts_own_task_clock_when_perf_is_available() {
        let group = match PerfGroup::open(&[SoftwareEvent::TaskClock], 0) {
            Ok(g) => g,
            Err(e) => {
                eprintln!("perf_event_open unavailable here, not checked: {e}");
                return;
            }
        };
        group.enable().unwrap();
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_millis(5) {}
        group.disable().unwrap();
        let v = group.read().unwrap();
        assert!(v[0].value > 1_000_000, "{v:?}");
    }
}

/// `PERF_SAMPLE_IP | PERF_SAMPLE_TID`.
const SAMPLE_IP_TID: u64 = 1 | 1 << 1;
/// `PERF_RECORD_LOST` and `PERF_RECORD_SAMPLE`.
const RECORD_LOST: u32 = 2;
const RECORD_SAMPLE: u32 = 9;
/// Offsets of `data_head` and `data_tail` in `struct perf_event_mmap_page`.
const DATA_HEAD: usize = 1024;
const DATA_TAIL: usize = 1032;
const PAGE: usize = 4096;

/// A sampling software counter of one thread: every `period` events perf
/// writes a `PERF_RECORD_SAMPLE` (IP, TID) into its ring buffer, mapped
/// here and drained by [`PerfSampler::drain`]. The oracle of perfmon's
/// sample counts.
///
/// # Invariants
///
/// `ring` is a live shared mapping of `(1 + data_pages) * 4096` bytes of
/// the perf ring buffer of `file`, owned by this value.
#[derive(Debug)]
pub struct PerfSampler {
    file: File,
    ring: std::ptr::NonNull<u8>,
    data_pages: usize,
}

// SAFETY: The mapping is shared memory read and written through atomics.
unsafe impl Send for PerfSampler {}

/// What [`PerfSampler::drain`] found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PerfSamples {
    /// `PERF_RECORD_SAMPLE` records.
    pub samples: u64,
    /// Samples perf reports it dropped (`PERF_RECORD_LOST`'s counts).
    pub lost: u64,
}

impl PerfSampler {
    /// Opens a disabled sampling counter of `event` for thread `tid` (0 =
    /// the caller), a sample every `period` events, with a ring of
    /// `data_pages` pages (a power of two).
    pub fn open(event: SoftwareEvent, tid: u32, period: u64, data_pages: usize) -> Result<Self> {
        let pid =
            i32::try_from(tid).map_err(|_| Error::os_tid(Op::PerfEventOpen, libc::ESRCH, tid))?;
        let a = PerfEventAttr {
            type_: PERF_TYPE_SOFTWARE,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config: event.config(),
            sample_period: period,
            sample_type: SAMPLE_IP_TID,
            flags: ATTR_DISABLED,
            ..Default::default()
        };
        let fd = sys::perf_event_open(&a, pid, None)
            .map_err(|e| Error::os_tid(Op::PerfEventOpen, e, tid))?;
        let len = (1 + data_pages) * PAGE;
        // SAFETY: A new shared mapping of the event's ring, address chosen
        // by the kernel: no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&fd),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO);
            return Err(Error::os(Op::Mmap, e));
        }
        let ring = std::ptr::NonNull::new(p.cast::<u8>()).ok_or(Error::os(Op::Mmap, libc::EIO))?;
        // INVARIANT: the mapping just made, of that length.
        Ok(PerfSampler {
            file: File::from(fd),
            ring,
            data_pages,
        })
    }

    /// Starts counting.
    pub fn enable(&self) -> Result<()> {
        sys::perf_ioctl(self.file.as_fd(), PERF_EVENT_IOC_ENABLE, 0)
            .map_err(|e| Error::os(Op::PerfIoctl, e))
    }

    /// Stops counting.
    pub fn disable(&self) -> Result<()> {
        sys::perf_ioctl(self.file.as_fd(), PERF_EVENT_IOC_DISABLE, 0)
            .map_err(|e| Error::os(Op::PerfIoctl, e))
    }

    fn word(&self, off: usize) -> &std::sync::atomic::AtomicU64 {
        // SAFETY: `off` is within the mapping and 8-byte aligned (callers:
        // the control page's fields, record headers at 8-byte offsets of
        // the data); the mapping is only accessed through atomics.
        unsafe {
            &*self
                .ring
                .as_ptr()
                .add(off)
                .cast::<std::sync::atomic::AtomicU64>()
        }
    }

    /// The count since the open (`read(2)`: the value alone).
    pub fn count(&self) -> Result<u64> {
        let mut buf = [0u8; 8];
        match (&self.file).read(&mut buf) {
            Ok(8) => Ok(u64::from_ne_bytes(buf)),
            Ok(_) => Err(Error::os(Op::PerfRead, libc::EIO)),
            Err(e) => Err(Error::os(
                Op::PerfRead,
                e.raw_os_error().unwrap_or(libc::EIO),
            )),
        }
    }

    /// Consumes the records written since the last call and counts them.
    pub fn drain(&mut self) -> PerfSamples {
        use std::sync::atomic::Ordering;
        let size = (self.data_pages * PAGE) as u64;
        let head = self.word(DATA_HEAD).load(Ordering::Acquire);
        let mut tail = self.word(DATA_TAIL).load(Ordering::Relaxed);
        let mut out = PerfSamples::default();
        while tail < head {
            let off = PAGE + (tail % size) as usize;
            let h = self.word(off).load(Ordering::Relaxed);
            let (ty, len) = (h as u32, (h >> 48) as u64);
            if len == 0 {
                break;
            }
            match ty {
                RECORD_SAMPLE => out.samples += 1,
                // { header; u64 id; u64 lost; }
                RECORD_LOST => {
                    let off = PAGE + ((tail + 16) % size) as usize;
                    out.lost += self.word(off).load(Ordering::Relaxed);
                }
                _ => {}
            }
            tail += len;
        }
        self.word(DATA_TAIL).store(tail, Ordering::Release);
        out
    }
}

impl Drop for PerfSampler {
    fn drop(&mut self) {
        // SAFETY: Our own mapping, of that length (type invariant), unmapped
        // once.
        unsafe { libc::munmap(self.ring.as_ptr().cast(), (1 + self.data_pages) * PAGE) };
    }
}
