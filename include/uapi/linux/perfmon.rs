// SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note

//! The perfmon ABI, mirrored once from `include/uapi/linux/perfmon.h`.
//!
//! This file is shared, through `#[path]`, by the kernel module and by the
//! user-space crates, so it uses nothing but `core`. The sizes of the
//! structures are pinned by the `const` assertions at the bottom; the C header
//! pins nothing by itself, so `tests/abi` checks the two against each other.

#![allow(dead_code)]

/// Version of the ABI described here.
pub const PFM_ABI_VERSION: u32 = 1;

/// PMC register numbers are `0..PFM_MAX_PMCS`.
pub const PFM_MAX_PMCS: usize = 32;
/// PMD register numbers are `0..PFM_MAX_PMDS`.
pub const PFM_MAX_PMDS: usize = 32;
/// Entries of [`PfmInfo::events`].
pub const PFM_MAX_EVENTS: usize = 16;
/// Most elements one register array call accepts.
pub const PFM_MAX_REGS_PER_CALL: usize = 64;
/// Length of a model name, NUL included.
pub const PFM_NAME_LEN: usize = 32;

/// [`PfmInfo::core_types`]: hybrid Intel Core (P-) cores.
pub const PFM_CORE_TYPE_CORE: u32 = 1 << 0;
/// [`PfmInfo::core_types`]: hybrid Intel Atom (E-) cores.
pub const PFM_CORE_TYPE_ATOM: u32 = 1 << 1;
/// [`PfmInfo::core_types`]: a core type this ABI does not name.
pub const PFM_CORE_TYPE_OTHER: u32 = 1 << 31;

/// Not attached to a thread.
pub const PFM_STATE_UNLOADED: u32 = 1;
/// Attached to a thread (counting once started).
pub const PFM_STATE_LOADED: u32 = 2;
/// Stopped by a notifying overflow until RESTART.
pub const PFM_STATE_MASKED: u32 = 3;
/// The fd was closed while attached to another thread.
pub const PFM_STATE_ZOMBIE: u32 = 4;

/// PMD flag: queue a message when this PMD overflows.
pub const PFM_REGFL_OVFL_NOTIFY: u32 = 1 << 0;
/// The input part of `reg_flags` (bits a later ABI may define as inputs).
pub const PFM_REGFL_IN_MASK: u32 = 0x0000_ffff;
/// PMD flag: randomise the period (perfmon2's). Every reset (short, long
/// or linked) subtracts an amount drawn uniformly in
/// `[0, reg_random_mask]` from the reset value, so a period P (a reset
/// value of 2^64 - P) lasts P + r events; each PMD has its own generator,
/// seeded by `reg_random_seed` (`pfm_random.rs`).
pub const PFM_REGFL_RANDOM: u32 = 1 << 1;
/// The input flags a PMD accepts today; every other bit outside
/// `PFM_REG_RETFL_MASK` (bits 16-23 included) is refused with `EINVAL`.
pub const PFM_REGFL_PMD_MASK: u32 = PFM_REGFL_OVFL_NOTIFY | PFM_REGFL_RANDOM;
/// Output flag: the register does not exist.
pub const PFM_REG_RETFL_NOTAVAIL: u32 = 1 << 31;
/// Output flag: the value or the flags are invalid.
pub const PFM_REG_RETFL_EINVAL: u32 = 1 << 30;
/// Output flag: the event set does not exist.
pub const PFM_REG_RETFL_NOSET: u32 = 1 << 29;
/// The output part of `reg_flags`, ignored on input.
pub const PFM_REG_RETFL_MASK: u32 = 0xff00_0000;

/// Context flag: block the monitored thread on overflow until RESTART.
pub const PFM_CTXFL_NOTIFY_BLOCK: u32 = 1 << 0;
/// Context flag: count overflows but queue no messages.
pub const PFM_CTXFL_NO_MSG: u32 = 1 << 1;
/// Context flag: monitor the threads and processes the monitored threads
/// create after LOAD, transitively.
pub const PFM_CTXFL_INHERIT: u32 = 1 << 2;
/// Context flag: start counting at the target's next successful exec (LOAD
/// arms it; START starts at once).
pub const PFM_CTXFL_START_ON_EXEC: u32 = 1 << 3;
/// Every defined context flag.
pub const PFM_CTXFL_MASK: u32 = 0xf;

/// Context status: START issued, no STOP since.
pub const PFM_CTXST_STARTED: u32 = 1 << 0;
/// Context status: the target thread has installed the context.
pub const PFM_CTXST_ACTIVE: u32 = 1 << 1;
/// Context status: the target thread exited.
pub const PFM_CTXST_EXITED: u32 = 1 << 2;
/// Context status: `PFM_CTXFL_START_ON_EXEC`, waiting for the exec.
pub const PFM_CTXST_EXEC_ARMED: u32 = 1 << 3;

/// Message: a PMD with `PFM_REGFL_OVFL_NOTIFY` overflowed.
pub const PFM_MSG_OVFL: u32 = 1;
/// Message: the monitored thread exited.
pub const PFM_MSG_END: u32 = 2;
/// Message: the thread gained privileges the tool lacks (a setuid exec):
/// monitoring ended and the context is UNLOADED.
pub const PFM_MSG_REVOKED: u32 = 3;
/// The sampling buffer is full: MASKED until RESTART (`ovfl_pmds`: the
/// PMDs whose entry filled it).
pub const PFM_MSG_SMPL_FULL: u32 = 4;

/// Soft PMU event: none (the counter is off).
pub const PFM_SOFT_EV_NONE: u64 = 0;
/// Soft PMU event: nanoseconds on a CPU.
pub const PFM_SOFT_EV_TASK_CLOCK: u64 = 1;
/// Soft PMU event: context switches (switch-outs) of the thread.
pub const PFM_SOFT_EV_CONTEXT_SWITCHES: u64 = 2;
/// Soft PMU event: the thread resumed on another CPU than the last one.
pub const PFM_SOFT_EV_CPU_MIGRATIONS: u64 = 3;
/// Soft PMU event: page faults the thread took, minor and major (what
/// `getrusage(RUSAGE_THREAD)` reports as `ru_minflt + ru_majflt`).
pub const PFM_SOFT_EV_PAGE_FAULTS: u64 = 4;
/// Soft PMU event: minor page faults (`ru_minflt`: served without I/O).
pub const PFM_SOFT_EV_MINOR_FAULTS: u64 = 5;
/// Soft PMU event: major page faults (`ru_majflt`: served with I/O).
pub const PFM_SOFT_EV_MAJOR_FAULTS: u64 = 6;

/// A PMC (configuration register) to write.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct PfmPmc {
    /// PMC number.
    pub reg_num: u16,
    /// Event set (`PFM_REG_RETFL_NOSET` if it does not exist).
    pub reg_set: u16,
    /// In: 0. Out: `PFM_REG_RETFL_*`.
    pub reg_flags: u32,
    /// The value, checked against the model's reserved mask.
    pub reg_value: u64,
    /// Must be 0.
    pub reserved: [u64; 2],
}

/// A PMD (data register: a counter) to write or read.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct PfmPmd {
    /// PMD number.
    pub reg_num: u16,
    /// Event set (`PFM_REG_RETFL_NOSET` if it does not exist).
    pub reg_set: u16,
    /// In: `PFM_REGFL_*`. Out: `PFM_REG_RETFL_*`.
    pub reg_flags: u32,
    /// The 64-bit virtualized value.
    pub reg_value: u64,
    /// Reload value on RESTART after a notification.
    pub reg_long_reset: u64,
    /// Reload value after an overflow that was not notified.
    pub reg_short_reset: u64,
    /// Out (read): the value of the last reset (randomised with
    /// [`PFM_REGFL_RANDOM`], and then 0 until the first reset after the
    /// write).
    pub reg_last_reset_val: u64,
    /// PMDs also reset when this one overflows.
    pub reg_reset_pmds: u64,
    /// [`PFM_REGFL_RANDOM`]: each reset subtracts an amount in
    /// `[0, mask]`; the mask is 2^k - 1 (0 included), at most
    /// `reg_short_reset` and `reg_long_reset` (a period stays within 2^64).
    /// Without the flag, 0. READ_PMDS: out (ignored on input), 0 without
    /// the flag.
    pub reg_random_mask: u64,
    /// [`PFM_REGFL_RANDOM`]: the generator's seed; 0: the kernel picks
    /// one. Without the flag, 0. READ_PMDS: out (ignored on input), the
    /// generator's state, never 0 with the flag: a seed that, written back,
    /// continues the sequence; 0 without the flag.
    pub reg_random_seed: u64,
}

/// Argument of the register array ioctls.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct PfmRegsArg {
    /// User pointer to the array.
    pub regs: u64,
    /// Number of elements, `1..=PFM_MAX_REGS_PER_CALL`.
    pub count: u32,
    /// Out: elements processed, or the index of the first bad one.
    pub done: u32,
    /// Out (READ_PMDS): ns loaded and started.
    pub time_enabled: u64,
    /// Out (READ_PMDS): ns the thread ran while started.
    pub time_running: u64,
    /// Must be 0.
    pub reserved: [u64; 2],
}

/// Argument of `PFM_IOC_READ_VALUES`: the cheap read of counting values.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct PfmValues {
    /// In: PMDs to read, implemented ones only, not 0.
    pub pmd_mask: u64,
    /// In: user pointer to `u64[popcount(pmd_mask)]`, filled in PMD order.
    pub values: u64,
    /// Out: ns loaded and started.
    pub time_enabled: u64,
    /// Out: ns the thread ran while started.
    pub time_running: u64,
    /// With [`PFM_VALFL_SET`]: the event set read; else 0.
    pub set: u16,
    /// `PFM_VALFL_*`.
    pub vflags: u16,
    /// Must be 0.
    pub pad: u32,
    /// Must be 0.
    pub reserved: u64,
}

/// [`PfmValues::vflags`]: the values and times of set [`PfmValues::set`]
/// (without it: set 0's values, the context's times).
pub const PFM_VALFL_SET: u16 = 1 << 0;
/// Every defined `PFM_VALFL_*` bit.
pub const PFM_VALFL_MASK: u16 = 0x1;

/// Argument of `PFM_IOC_LOAD`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct PfmLoad {
    /// Thread to monitor; 0 is the calling thread. `PFM_LOAD_PROCESS`: a
    /// process id (tgid).
    pub tid: u32,
    /// `PFM_LOAD_*`.
    pub flags: u32,
    /// The event set monitoring starts in (it must exist).
    pub load_set: u16,
    /// Must be 0.
    pub pad0: u16,
    /// Must be 0.
    pub pad1: u32,
    /// Must be 0.
    pub reserved: [u64; 2],
}

/// [`PfmLoad::flags`]: every thread of process `tid`, and (as with
/// `PFM_CTXFL_INHERIT`) every thread and process they create from then on.
pub const PFM_LOAD_PROCESS: u32 = 1 << 0;
/// [`PfmLoad::flags`]: then START, as `PFM_IOC_START` would (one call
/// instead of two; UNLOAD stops).
pub const PFM_LOAD_START: u32 = 1 << 1;
/// Every defined LOAD flag.
pub const PFM_LOAD_MASK: u32 = 0x3;

/// Argument of `PFM_IOC_CLONE`: a new context, UNLOADED, with this one's
/// flags, registers and event sets as they are now (as if the same calls
/// had been made to it), and nothing else (no messages, mapping or
/// threads). The context cloned must be UNLOADED. The ioctl returns the new
/// context's file descriptor.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct PfmClone {
    /// `PFM_CLONE_*`.
    pub flags: u32,
    /// Must be 0.
    pub pad: u32,
    /// Must be 0.
    pub reserved: [u64; 3],
}

/// [`PfmClone::flags`]: the new descriptor is close-on-exec.
pub const PFM_CLONE_CLOEXEC: u32 = 1 << 0;
/// [`PfmClone::flags`]: and `O_NONBLOCK` (its reads).
pub const PFM_CLONE_NONBLOCK: u32 = 1 << 1;
/// Every defined CLONE flag.
pub const PFM_CLONE_MASK: u32 = 0x3;

/// Event set ids are `0..PFM_MAX_SETS`; set 0 always exists.
pub const PFM_MAX_SETS: usize = 16;
/// [`PfmSetdesc::set_flags`]: switch after `set_ovfl_switch_cnt` overflows
/// of the PMDs in `set_switch_pmds`.
pub const PFM_SETFL_OVFL_SWITCH: u16 = 1 << 0;
/// [`PfmSetdesc::set_flags`]: switch after `set_timeout` ns of the
/// monitored thread's running time.
pub const PFM_SETFL_TIME_SWITCH: u16 = 1 << 1;
/// Every defined `PFM_SETFL_*` bit.
pub const PFM_SETFL_MASK: u16 = 0x3;
/// The shortest set timeout, ns: shorter ones are raised to it.
pub const PFM_SET_MIN_TIMEOUT: u64 = 100_000;
/// [`PfmSetinfo::set_last_cause`]: never switched away from.
pub const PFM_SET_CAUSE_NONE: u32 = 0;
/// [`PfmSetinfo::set_last_cause`]: its timeout.
pub const PFM_SET_CAUSE_TIME: u32 = 1;
/// [`PfmSetinfo::set_last_cause`]: its `set_ovfl_switch_cnt`-th overflow.
pub const PFM_SET_CAUSE_OVFL: u32 = 2;

/// An event set's description (`PFM_IOC_CREATE_SETS`).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct PfmSetdesc {
    /// `0..PFM_MAX_SETS`.
    pub set_id: u16,
    /// `PFM_SETFL_*`: at most one.
    pub set_flags: u16,
    /// `OVFL_SWITCH`: at least 1; else 0.
    pub set_ovfl_switch_cnt: u32,
    /// `TIME_SWITCH`: ns (out: the effective value); else 0.
    pub set_timeout: u64,
    /// `OVFL_SWITCH`: the PMDs whose overflows count; else 0.
    pub set_switch_pmds: u64,
    /// Must be 0.
    pub reserved: u64,
}

/// What `PFM_IOC_GETINFO_SETS` reports of one set (`set_id` in).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct PfmSetinfo {
    /// In: the set.
    pub set_id: u16,
    /// As created.
    pub set_flags: u16,
    /// As created.
    pub set_ovfl_switch_cnt: u32,
    /// The effective timeout.
    pub set_timeout: u64,
    /// As created.
    pub set_switch_pmds: u64,
    /// Activations since LOAD.
    pub set_runs: u64,
    /// Active with `TIME_SWITCH`: ns left; else the timeout.
    pub set_timeout_left: u64,
    /// ns the thread ran while the context counted, since LOAD.
    pub set_time_enabled: u64,
    /// The part of `set_time_enabled` with this set active.
    pub set_time_running: u64,
    /// The PMDs whose overflows caused the last switch away.
    pub set_ovfl_pmds: u64,
    /// `PFM_SET_CAUSE_*`.
    pub set_last_cause: u32,
    /// 0.
    pub pad: u32,
    /// PMCs written in this set.
    pub set_used_pmcs: u64,
    /// PMDs written in this set.
    pub set_used_pmds: u64,
    /// 0.
    pub reserved: [u64; 5],
}

/// Argument of `PFM_IOC_CREATE_SETS` (`PfmSetdesc[]`), `PFM_IOC_DELETE_SETS`
/// (`u16[]` ids) and `PFM_IOC_GETINFO_SETS` (`PfmSetinfo[]`): all or
/// nothing; on `EINVAL`, `done` is the first bad element's index.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct PfmSetsArg {
    /// User pointer to the array.
    pub sets: u64,
    /// Elements, `1..=PFM_MAX_SETS`.
    pub count: u32,
    /// Out: elements processed, or the first bad index.
    pub done: u32,
    /// Must be 0.
    pub reserved: [u64; 2],
}

/// Argument of `PFM_IOC_SET_FLAGS`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct PfmCtxFlags {
    /// `PFM_CTXFL_*`.
    pub flags: u32,
    /// Must be 0.
    pub pad: u32,
    /// Must be 0.
    pub reserved: [u64; 3],
}

/// Output of `PFM_IOC_GET_STATE`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct PfmCtxInfo {
    /// `PFM_STATE_*`.
    pub state: u32,
    /// Monitored thread; after its exit, the thread that exited; 0 if none
    /// (never loaded, or UNLOADed).
    pub tid: u32,
    /// `PFM_CTXFL_*`.
    pub flags: u32,
    /// `PFM_CTXST_*`.
    pub status: u32,
    /// PMDs written so far.
    pub used_pmds: u64,
    /// Threads monitored since LOAD, alive or exited (1 while loaded
    /// without inheritance).
    pub threads: u32,
    /// Threads that should have been monitored and could not be.
    pub lost_threads: u32,
    /// Zero.
    pub reserved: [u64; 2],
}

/// Values per row of `PFM_IOC_READ_THREADS`.
pub const PFM_THREAD_VALUES: usize = 16;
/// Most rows `PFM_IOC_READ_THREADS` returns (a buffer of this many always
/// suffices): the loaded thread's, the live threads' (at most the 4096
/// threads attached system-wide) and at most [`PFM_MAX_ENDED_ROWS`] of
/// ended threads.
pub const PFM_MAX_THREAD_ROWS: usize = 65536;
/// Rows of ended threads (exited, or revoked at an exec) a context keeps;
/// more ended threads are summed into the totals and counted, not listed.
pub const PFM_MAX_ENDED_ROWS: usize = 1024;
/// [`PfmThread::flags`]: the thread exited; its values are final.
pub const PFM_THRFL_EXITED: u32 = 1 << 0;
/// [`PfmThread::flags`]: its monitoring ended at an exec it may not see.
pub const PFM_THRFL_REVOKED: u32 = 1 << 1;
/// [`PfmThread::flags`]: the thread LOAD named (the first row).
pub const PFM_THRFL_LOADED: u32 = 1 << 2;

/// One row of `PFM_IOC_READ_THREADS`: a thread the context monitored.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct PfmThread {
    /// Thread id (the caller's pid namespace; 0 if not visible there).
    pub tid: u32,
    /// Its process id (tgid).
    pub pid: u32,
    /// `PFM_THRFL_*`.
    pub flags: u32,
    /// Zero.
    pub pad: u32,
    /// ns monitored and started.
    pub time_enabled: u64,
    /// ns it ran while started.
    pub time_running: u64,
    /// The values of the PMDs of `pmd_mask`, in PMD order.
    pub values: [u64; PFM_THREAD_VALUES],
}

/// Argument of `PFM_IOC_READ_THREADS`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct PfmThreadsArg {
    /// In: user pointer to `PfmThread[count]`.
    pub threads: u64,
    /// In: PMDs whose values the rows hold (implemented ones, at most
    /// `PFM_THREAD_VALUES`).
    pub pmd_mask: u64,
    /// In: rows the array holds.
    pub count: u32,
    /// Out: rows there are (`E2BIG`, nothing written, if above `count`).
    pub needed: u32,
    /// Out: as [`PfmCtxInfo::lost_threads`].
    pub lost_threads: u32,
    /// Must be 0.
    pub flags: u32,
    /// With [`PFM_VALFL_SET`] in `vflags`: the event set whose values and
    /// times the rows hold; else 0 (set 0).
    pub set: u16,
    /// 0 or [`PFM_VALFL_SET`].
    pub vflags: u16,
    /// Must be 0.
    pub pad: u32,
    /// Must be 0.
    pub reserved: [u64; 2],
}

/// An event of the PMU model.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct PfmEventInfo {
    /// NUL-terminated name.
    pub name: [u8; 24],
    /// Value to write into a counter's PMC.
    pub code: u64,
}

/// Output of `PFM_IOC_GET_INFO`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PfmInfo {
    /// `PFM_ABI_VERSION`.
    pub abi_version: u32,
    /// The size of this structure.
    pub size: u32,
    /// NUL-terminated model name.
    pub model: [u8; PFM_NAME_LEN],
    /// PMCs implemented.
    pub num_pmcs: u16,
    /// PMDs implemented.
    pub num_pmds: u16,
    /// Valid entries in `events`.
    pub num_events: u16,
    /// Width of the counters in bits.
    pub counter_width: u16,
    /// Overflow vector on CPU 0, 0 if none.
    pub vector: u32,
    /// To be ignored.
    pub flags: u32,
    /// Bit n: PMC n exists.
    pub impl_pmcs: u64,
    /// Bit n: PMD n exists.
    pub impl_pmds: u64,
    /// Hybrid Intel: the `PFM_CORE_TYPE_*` of the CPUs' core types (the
    /// model is what every type has); 0 on a part that is not hybrid.
    pub core_types: u32,
    /// Zero.
    pub reserved0: u32,
    /// Zero.
    pub reserved: [u64; 3],
    /// Bits a PMC value must leave zero.
    pub pmc_rsvd_mask: [u64; PFM_MAX_PMCS],
    /// The model's events.
    pub events: [PfmEventInfo; PFM_MAX_EVENTS],
}

impl Default for PfmInfo {
    fn default() -> Self {
        Self {
            abi_version: 0,
            size: 0,
            model: [0; PFM_NAME_LEN],
            num_pmcs: 0,
            num_pmds: 0,
            num_events: 0,
            counter_width: 0,
            vector: 0,
            flags: 0,
            impl_pmcs: 0,
            impl_pmds: 0,
            core_types: 0,
            reserved0: 0,
            reserved: [0; 3],
            pmc_rsvd_mask: [0; PFM_MAX_PMCS],
            events: [PfmEventInfo::default(); PFM_MAX_EVENTS],
        }
    }
}

/// A message read from the fd.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct PfmMsg {
    /// `PFM_MSG_*`.
    pub msg_type: u32,
    /// Monitored thread.
    pub tid: u32,
    /// CPU where it happened.
    pub cpu: u16,
    /// OVFL: the event set of `ovfl_pmds` (0 without sets).
    pub set: u16,
    /// Zero.
    pub reserved0: u32,
    /// OVFL: user instruction pointer when interrupted.
    pub ip: u64,
    /// OVFL: overflowed PMDs.
    pub ovfl_pmds: u64,
    /// ns, `local_clock()`.
    pub tstamp: u64,
    /// Zero.
    pub reserved: [u64; 3],
}

/// Version of the mapped counter page ([`PfmPage::version`]).
pub const PFM_PAGE_VERSION: u32 = 1;
/// The length to `mmap` (offset 0): one page.
pub const PFM_PAGE_SIZE: usize = 4096;
/// Page flag: loaded, started, not masked.
pub const PFM_PAGE_COUNTING: u32 = 1 << 0;
/// Page flag: counting, and the thread was on [`PfmPage::cpu`] at the
/// update and has not been switched out since.
pub const PFM_PAGE_RUNNING: u32 = 1 << 1;
/// Page flag: `tsc_base`, `time_mult` and `time_shift` are valid.
pub const PFM_PAGE_TIME_VALID: u32 = 1 << 2;
/// PMD flag: the PMD counts the thread's time on CPU (task-clock).
pub const PFM_PAGE_PMD_TIME: u32 = 1 << 0;
/// PMD flag: the value moves while the thread runs and `index` is 0: only
/// the system call reads it live.
pub const PFM_PAGE_PMD_STALE: u32 = 1 << 1;

/// One PMD in the mapped counter page.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct PfmPagePmd {
    /// The 64-bit value at the last update.
    pub value: u64,
    /// `rdpmc` index + 1 while the counter is readable in user mode; 0: not.
    pub index: u32,
    /// `PFM_PAGE_PMD_*`.
    pub flags: u32,
    /// `index != 0`: the raw counter at the last update.
    pub offset: u64,
    /// Zero.
    pub reserved: u64,
}

/// The mapped counter page (`mmap` of [`PFM_PAGE_SIZE`] at offset 0).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PfmPage {
    /// [`PFM_PAGE_VERSION`].
    pub version: u32,
    /// Sequence count: odd while the kernel writes.
    pub seq: u32,
    /// `PFM_PAGE_*`.
    pub flags: u32,
    /// Running: the CPU the thread runs on.
    pub cpu: u32,
    /// PMDs described.
    pub pmd_mask: u64,
    /// ns loaded and started, at the last update.
    pub time_enabled: u64,
    /// ns the thread ran while started, at the last update.
    pub time_running: u64,
    /// Running and time valid: the TSC of `cpu` at the update.
    pub tsc_base: u64,
    /// TSC to ns: multiplier.
    pub time_mult: u32,
    /// TSC to ns: shift.
    pub time_shift: u16,
    /// Bits of the counters `rdpmc` reads.
    pub pmc_width: u16,
    /// `PFM_STATE_*`.
    pub state: u32,
    /// The event set whose values `pmds` shows (0 without sets).
    pub set: u32,
    /// The PMDs with `PFM_PAGE_PMD_TIME`.
    pub time_pmds: u64,
    /// The PMDs with `index != 0` or `PFM_PAGE_PMD_STALE`.
    pub slow_pmds: u64,
    /// Zero.
    pub reserved: [u64; 6],
    /// Indexed by PMD number.
    pub pmds: [PfmPagePmd; PFM_MAX_PMDS],
}

impl Default for PfmPage {
    fn default() -> Self {
        Self {
            version: 0,
            seq: 0,
            flags: 0,
            cpu: 0,
            pmd_mask: 0,
            time_enabled: 0,
            time_running: 0,
            tsc_base: 0,
            time_mult: 0,
            time_shift: 0,
            pmc_width: 0,
            state: 0,
            set: 0,
            time_pmds: 0,
            slow_pmds: 0,
            reserved: [0; 6],
            pmds: [PfmPagePmd::default(); PFM_MAX_PMDS],
        }
    }
}

/// The ioctl type byte.
pub const PFM_IOC_MAGIC: u32 = 0xB6;

const IOC_NONE: u32 = 0;
const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;

/// Encodes an ioctl number as `_IOC` does on x86.
pub const fn ioc(dir: u32, nr: u32, size: usize) -> u32 {
    (dir << 30) | ((size as u32) << 16) | (PFM_IOC_MAGIC << 8) | nr
}

/// `_IOR(PFM_IOC_MAGIC, 0x00, struct pfm_info)`.
pub const PFM_IOC_GET_INFO: u32 = ioc(IOC_READ, 0x00, core::mem::size_of::<PfmInfo>());
/// `_IOWR(PFM_IOC_MAGIC, 0x01, struct pfm_regs_arg)`.
pub const PFM_IOC_WRITE_PMCS: u32 = ioc(
    IOC_READ | IOC_WRITE,
    0x01,
    core::mem::size_of::<PfmRegsArg>(),
);
/// `_IOWR(PFM_IOC_MAGIC, 0x02, struct pfm_regs_arg)`.
pub const PFM_IOC_WRITE_PMDS: u32 = ioc(
    IOC_READ | IOC_WRITE,
    0x02,
    core::mem::size_of::<PfmRegsArg>(),
);
/// `_IOWR(PFM_IOC_MAGIC, 0x03, struct pfm_regs_arg)`.
pub const PFM_IOC_READ_PMDS: u32 = ioc(
    IOC_READ | IOC_WRITE,
    0x03,
    core::mem::size_of::<PfmRegsArg>(),
);
/// `_IOW(PFM_IOC_MAGIC, 0x04, struct pfm_load)`.
pub const PFM_IOC_LOAD: u32 = ioc(IOC_WRITE, 0x04, core::mem::size_of::<PfmLoad>());
/// `_IO(PFM_IOC_MAGIC, 0x05)`.
pub const PFM_IOC_UNLOAD: u32 = ioc(IOC_NONE, 0x05, 0);
/// `_IO(PFM_IOC_MAGIC, 0x06)`.
pub const PFM_IOC_START: u32 = ioc(IOC_NONE, 0x06, 0);
/// `_IO(PFM_IOC_MAGIC, 0x07)`.
pub const PFM_IOC_STOP: u32 = ioc(IOC_NONE, 0x07, 0);
/// `_IO(PFM_IOC_MAGIC, 0x08)`.
pub const PFM_IOC_RESTART: u32 = ioc(IOC_NONE, 0x08, 0);
/// `_IOR(PFM_IOC_MAGIC, 0x09, struct pfm_ctx_info)`.
pub const PFM_IOC_GET_STATE: u32 = ioc(IOC_READ, 0x09, core::mem::size_of::<PfmCtxInfo>());
/// `_IOW(PFM_IOC_MAGIC, 0x0a, struct pfm_ctx_flags)`.
pub const PFM_IOC_SET_FLAGS: u32 = ioc(IOC_WRITE, 0x0a, core::mem::size_of::<PfmCtxFlags>());
/// `_IOWR(PFM_IOC_MAGIC, 0x0b, struct pfm_values)`.
pub const PFM_IOC_READ_VALUES: u32 = ioc(
    IOC_READ | IOC_WRITE,
    0x0b,
    core::mem::size_of::<PfmValues>(),
);

/// `_IOWR(PFM_IOC_MAGIC, 0x0c, struct pfm_sets_arg)`.
pub const PFM_IOC_CREATE_SETS: u32 = ioc(
    IOC_READ | IOC_WRITE,
    0x0c,
    core::mem::size_of::<PfmSetsArg>(),
);
/// `_IOWR(PFM_IOC_MAGIC, 0x0d, struct pfm_sets_arg)`.
pub const PFM_IOC_DELETE_SETS: u32 = ioc(
    IOC_READ | IOC_WRITE,
    0x0d,
    core::mem::size_of::<PfmSetsArg>(),
);
/// `_IOWR(PFM_IOC_MAGIC, 0x0e, struct pfm_sets_arg)`.
pub const PFM_IOC_GETINFO_SETS: u32 = ioc(
    IOC_READ | IOC_WRITE,
    0x0e,
    core::mem::size_of::<PfmSetsArg>(),
);

/// `_IOWR(PFM_IOC_MAGIC, 0x0f, struct pfm_threads_arg)`.
pub const PFM_IOC_READ_THREADS: u32 = ioc(
    IOC_READ | IOC_WRITE,
    0x0f,
    core::mem::size_of::<PfmThreadsArg>(),
);
/// Version of the sampling buffer's layout.
pub const PFM_SMPL_VERSION: u32 = 1;
/// `mmap` offset of the sampling buffer (the counter page is at 0).
pub const PFM_SMPL_OFFSET: u32 = 1 << 20;
/// Data pages of a sampling buffer, at most.
pub const PFM_SMPL_MAX_PAGES: u32 = 1024;
/// PMD values a sample records.
pub const PFM_SMPL_MAX_VALUES: usize = 8;
/// Return addresses a sample records, at most.
pub const PFM_SMPL_MAX_CHAIN: u32 = 64;

/// Argument of `PFM_IOC_SMPL_SETUP`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PfmSmplSetup {
    /// Entry pages: a power of two, `1..=PFM_SMPL_MAX_PAGES`.
    pub data_pages: u32,
    /// `PFM_SMPL_*`.
    pub flags: u32,
    /// Bytes of unread entries that make `poll` readable; 0: half the data.
    pub watermark: u32,
    /// Must be 0.
    pub pad: u32,
    /// Per PMD: the PMDs whose values its entries record (implemented
    /// ones, at most `PFM_SMPL_MAX_VALUES`).
    pub smpl_pmds: [u64; PFM_MAX_PMDS],
    /// User call chain: the return addresses an entry records at most,
    /// `0..=PFM_SMPL_MAX_CHAIN` (0: none).
    pub chain_depth: u32,
    /// Must be 0.
    pub pad2: u32,
    /// Must be 0.
    pub reserved: [u64; 3],
}

impl Default for PfmSmplSetup {
    fn default() -> Self {
        Self {
            data_pages: 0,
            flags: 0,
            watermark: 0,
            pad: 0,
            smpl_pmds: [0; PFM_MAX_PMDS],
            chain_depth: 0,
            pad2: 0,
            reserved: [0; 3],
        }
    }
}

/// [`PfmSmplSetup::flags`]: a full buffer drops the entry and counts it
/// (`lost`); without it (perfmon2's policy) the context is masked, a
/// `PFM_MSG_SMPL_FULL` is queued, and RESTART resumes.
pub const PFM_SMPL_DROP: u32 = 1 << 0;
/// Every defined sampling flag.
pub const PFM_SMPL_MASK: u32 = 0x1;

/// The sampling buffer's first page.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct PfmSmplHdr {
    /// `PFM_SMPL_VERSION`.
    pub version: u32,
    /// Bytes per entry (a power of two).
    pub entry_size: u32,
    /// Bytes of entries.
    pub data_size: u64,
    /// Kernel: bytes written since setup; the entry at byte offset `x` is
    /// at `data + x % data_size`.
    pub head: u64,
    /// Tool: bytes consumed.
    pub tail: u64,
    /// Entries written.
    pub written: u64,
    /// Entries dropped: the buffer full (`PFM_SMPL_DROP`; or, masking,
    /// RESTART before the tool drained).
    pub lost: u64,
    /// Reserved.
    pub reserved: [u64; 10],
}

/// One sample.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct PfmSmplEntry {
    /// The thread (the loader's pid namespace).
    pub tid: u32,
    /// Its process.
    pub pid: u32,
    /// Where it overflowed.
    pub cpu: u16,
    /// The PMD that overflowed.
    pub ovfl_pmd: u16,
    /// Its event set.
    pub set: u16,
    /// `values` used.
    pub nvalues: u16,
    /// `written` before this entry: 0, 1, 2, ...
    pub seq: u64,
    /// The value the PMD was reset to.
    pub last_reset_val: u64,
    /// User instruction pointer (0 if not visible).
    pub ip: u64,
    /// `CLOCK_MONOTONIC`, ns.
    pub tstamp: u64,
    /// The PMDs `values` holds, in PMD order.
    pub smpl_pmds: u64,
    /// Return addresses in the chain that follows the entry (in an entry
    /// of `entry_size` bytes).
    pub chain_len: u16,
    /// `PFM_SMPL_CHAIN_*`.
    pub chain_flags: u16,
    /// 0.
    pub pad: u32,
    /// The values.
    pub values: [u64; PFM_SMPL_MAX_VALUES],
    // C's `chain[]` follows: the user call chain, the caller of `ip`'s
    // function first.
}

/// [`PfmSmplEntry::chain_flags`]: more frames than `chain_depth`.
pub const PFM_SMPL_CHAIN_TRUNCATED: u16 = 1 << 0;
/// [`PfmSmplEntry::chain_flags`]: the walk met a frame it could not read,
/// or one that did not go up the stack, before a null frame pointer.
pub const PFM_SMPL_CHAIN_BROKEN: u16 = 1 << 1;
/// [`PfmSmplEntry::chain_flags`]: no chain could be taken (a 32-bit thread,
/// or its registers not visible to the loader).
pub const PFM_SMPL_CHAIN_NONE: u16 = 1 << 2;

/// `_IOW(PFM_IOC_MAGIC, 0x10, struct pfm_clone)`: returns a file descriptor.
pub const PFM_IOC_CLONE: u32 = ioc(IOC_WRITE, 0x10, core::mem::size_of::<PfmClone>());
/// `_IOW(PFM_IOC_MAGIC, 0x11, struct pfm_smpl_setup)`.
pub const PFM_IOC_SMPL_SETUP: u32 = ioc(IOC_WRITE, 0x11, core::mem::size_of::<PfmSmplSetup>());

// The sizes are part of the ABI: any change here is an ABI break.
const _: () = assert!(core::mem::size_of::<PfmSetdesc>() == 32);
const _: () = assert!(core::mem::size_of::<PfmSetinfo>() == 128);
const _: () = assert!(core::mem::size_of::<PfmSetsArg>() == 32);
const _: () = assert!(core::mem::size_of::<PfmThread>() == 160);
const _: () = assert!(core::mem::size_of::<PfmThreadsArg>() == 56);
const _: () = assert!(core::mem::offset_of!(PfmCtxInfo, lost_threads) == 28);
const _: () = assert!(core::mem::offset_of!(PfmSetinfo, set_last_cause) == 64);
const _: () = assert!(core::mem::size_of::<PfmPmc>() == 32);
const _: () = assert!(core::mem::size_of::<PfmPmd>() == 64);
const _: () = assert!(core::mem::size_of::<PfmRegsArg>() == 48);
const _: () = assert!(core::mem::size_of::<PfmLoad>() == 32);
const _: () = assert!(core::mem::size_of::<PfmClone>() == 32);
const _: () = assert!(core::mem::size_of::<PfmSmplSetup>() == 304);
const _: () = assert!(core::mem::size_of::<PfmSmplHdr>() == 128);
const _: () = assert!(core::mem::size_of::<PfmSmplEntry>() == 128);
const _: () = assert!(core::mem::size_of::<PfmCtxFlags>() == 32);
const _: () = assert!(core::mem::size_of::<PfmCtxInfo>() == 48);
const _: () = assert!(core::mem::size_of::<PfmEventInfo>() == 32);
const _: () = assert!(core::mem::size_of::<PfmInfo>() == 872);
const _: () = assert!(core::mem::size_of::<PfmMsg>() == 64);
const _: () = assert!(core::mem::size_of::<PfmValues>() == 48);
const _: () = assert!(core::mem::size_of::<PfmPagePmd>() == 32);
const _: () = assert!(core::mem::size_of::<PfmPage>() == 1152);
const _: () = assert!(core::mem::offset_of!(PfmPage, tsc_base) == 40);
const _: () = assert!(core::mem::offset_of!(PfmPage, time_pmds) == 64);
const _: () = assert!(core::mem::offset_of!(PfmPage, pmds) == 128);
const _: () = assert!(core::mem::size_of::<PfmPage>() <= PFM_PAGE_SIZE);
