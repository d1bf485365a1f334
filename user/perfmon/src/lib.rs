//! Safe user-space access to perfmon: per-thread performance counters
//! through `/dev/perfmon`.
//!
//! One [`Context`] is one open of the device. Program events of the loaded
//! PMU model, attach the context to a thread, start, read:
//!
//! ```no_run
//! use perfmon::{Context, Result};
//!
//! fn count_self() -> Result<()> {
//!     let mut ctx = Context::open()?;
//!     let events = ctx.info()?.parse_events("task-clock,context-switches")?;
//!     ctx.program(&events)?;
//!     ctx.load(0)?; // 0: the calling thread
//!     ctx.start()?;
//!     std::thread::sleep(std::time::Duration::from_millis(10));
//!     ctx.stop()?;
//!     let counts = ctx.read()?;
//!     for (e, v) in events.iter().zip(&counts.values) {
//!         println!("{:>12} {}", v, e.name);
//!     }
//!     ctx.unload()
//! }
//! ```
//!
//! Failures are [`Error`] values that name the ioctl that failed and say
//! what the errno means for it. Everything `unsafe` lives in one private
//! module (`sys`); the rest of the crate is safe code. The ABI itself is
//! re-exported as [`abi`] (shared with the kernel module, `core` only).

#![warn(missing_docs)]

#[path = "../../../include/uapi/linux/perfmon.rs"]
pub mod abi;

mod context;
mod error;
mod mapped;
pub mod perf;
#[path = "../../../pfm_page.rs"]
#[allow(dead_code)]
mod pfm_page;
// The module's own set arithmetic (exact, 128-bit, host-tested in
// host/tests/sets.rs): a tool scales with the same code the kernel's
// documentation describes. Only the scaling functions are used here.
#[path = "../../../pfm_sets.rs"]
#[allow(dead_code)]
mod pfm_sets;
// The sampling buffer's ring protocol, the module's own (host-tested).
#[path = "../../../pfm_smpl.rs"]
#[allow(dead_code)]
mod pfm_smpl;
mod pmu;
pub mod process;
// The module's period randomisation (`PFM_REGFL_RANDOM`; host-tested): the
// kernel's own generator, so a tool predicts the periods of a PMD it
// seeded ([`random::periods`]) or picks masks the module accepts
// ([`random::mask_ok`]).
#[path = "../../../pfm_random.rs"]
pub mod random;
mod sampling;
mod sys;
pub mod sysfs;

pub use context::{
    Context, Counts, CtxState, Message, MessageKind, Messages, Readiness, State, ThreadRow,
    ThreadsReport, DEVICE,
};
pub use error::{errno_name, errno_text, Error, ErrorKind, Op, Result};
pub use mapped::{CounterPage, MappedReading, MappedStatus};
pub use pfm_sets::{running_share, scale, scale_u64};
pub use pmu::{aliases_of, describe, edit_distance, suggest, Event, Generic, PmuInfo};
pub use sampling::{Sample, SampleBuffer, SampleStats};

#[cfg(test)]
mod abi_tests {
    //! The Rust mirror against the C header, with the numbers worked out by
    //! hand from `include/uapi/linux/perfmon.h` and x86's `_IOC` encoding
    //! (dir << 30 | size << 16 | type << 8 | nr; dir: none 0, write 1, read 2).
    use super::abi::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn ioctl_numbers() {
        // _IOR(0xB6, 0x00, struct pfm_info): 2<<30 | 872<<16 | 0xB6<<8 | 0.
        assert_eq!(PFM_IOC_GET_INFO, 0x8368_B600);
        // _IOWR(0xB6, n, struct pfm_regs_arg): 3<<30 | 48<<16 | 0xB600 | n.
        assert_eq!(PFM_IOC_WRITE_PMCS, 0xC030_B601);
        assert_eq!(PFM_IOC_WRITE_PMDS, 0xC030_B602);
        assert_eq!(PFM_IOC_READ_PMDS, 0xC030_B603);
        // _IOW(0xB6, 0x04, struct pfm_load): 1<<30 | 32<<16 | 0xB604.
        assert_eq!(PFM_IOC_LOAD, 0x4020_B604);
        // _IO(0xB6, n).
        assert_eq!(PFM_IOC_UNLOAD, 0x0000_B605);
        assert_eq!(PFM_IOC_START, 0x0000_B606);
        assert_eq!(PFM_IOC_STOP, 0x0000_B607);
        assert_eq!(PFM_IOC_RESTART, 0x0000_B608);
        // _IOR(0xB6, 0x09, struct pfm_ctx_info): 2<<30 | 48<<16 | 0xB609.
        assert_eq!(PFM_IOC_GET_STATE, 0x8030_B609);
        // _IOW(0xB6, 0x0a, struct pfm_ctx_flags): 1<<30 | 32<<16 | 0xB60A.
        assert_eq!(PFM_IOC_SET_FLAGS, 0x4020_B60A);
        // _IOWR(0xB6, n, struct pfm_sets_arg): 3<<30 | 32<<16 | 0xB600 | n.
        assert_eq!(PFM_IOC_CREATE_SETS, 0xC020_B60C);
        assert_eq!(PFM_IOC_DELETE_SETS, 0xC020_B60D);
        assert_eq!(PFM_IOC_GETINFO_SETS, 0xC020_B60E);
        // _IOWR(0xB6, 0x0f, struct pfm_threads_arg): 3<<30 | 56<<16 | 0xB60F.
        assert_eq!(PFM_IOC_READ_THREADS, 0xC038_B60F);
    }

    #[test]
    fn struct_sizes_match_the_c_header() {
        // Sums of the C fields (all naturally aligned, no implicit padding).
        assert_eq!(size_of::<PfmPmc>(), 2 + 2 + 4 + 8 + 2 * 8);
        assert_eq!(size_of::<PfmPmd>(), 2 + 2 + 4 + 5 * 8 + 2 * 8);
        assert_eq!(size_of::<PfmRegsArg>(), 8 + 4 + 4 + 8 + 8 + 2 * 8);
        assert_eq!(size_of::<PfmLoad>(), 4 + 4 + 3 * 8);
        assert_eq!(size_of::<PfmCtxFlags>(), 4 + 4 + 3 * 8);
        assert_eq!(size_of::<PfmCtxInfo>(), 4 * 4 + 8 + 2 * 4 + 2 * 8);
        assert_eq!(size_of::<PfmThread>(), 4 * 4 + 2 * 8 + 16 * 8);
        assert_eq!(
            size_of::<PfmThreadsArg>(),
            8 + 8 + 4 * 4 + 2 + 2 + 4 + 2 * 8
        );
        assert_eq!(size_of::<PfmEventInfo>(), 24 + 8);
        assert_eq!(
            size_of::<PfmInfo>(),
            4 + 4 + 32 + 4 * 2 + 4 + 4 + 8 + 8 + 4 * 8 + 32 * 8 + 16 * 32
        );
        assert_eq!(size_of::<PfmMsg>(), 4 + 4 + 2 + 2 + 4 + 8 + 8 + 8 + 3 * 8);
        assert_eq!(size_of::<PfmValues>(), 8 + 8 + 8 + 8 + 2 + 2 + 4 + 8);
        assert_eq!(size_of::<PfmSetdesc>(), 2 + 2 + 4 + 3 * 8);
        assert_eq!(
            size_of::<PfmSetinfo>(),
            2 + 2 + 4 + 7 * 8 + 4 + 4 + 2 * 8 + 5 * 8
        );
        assert_eq!(size_of::<PfmSetsArg>(), 8 + 4 + 4 + 2 * 8);
    }

    #[test]
    fn field_offsets_match_the_c_header() {
        assert_eq!(offset_of!(PfmPmc, reg_value), 8);
        assert_eq!(offset_of!(PfmPmc, reserved), 16);
        assert_eq!(offset_of!(PfmPmd, reg_value), 8);
        assert_eq!(offset_of!(PfmPmd, reg_long_reset), 16);
        assert_eq!(offset_of!(PfmPmd, reg_short_reset), 24);
        assert_eq!(offset_of!(PfmPmd, reg_last_reset_val), 32);
        assert_eq!(offset_of!(PfmPmd, reg_reset_pmds), 40);
        assert_eq!(offset_of!(PfmPmd, reg_random_mask), 48);
        assert_eq!(offset_of!(PfmPmd, reg_random_seed), 56);
        assert_eq!(offset_of!(PfmRegsArg, count), 8);
        assert_eq!(offset_of!(PfmRegsArg, done), 12);
        assert_eq!(offset_of!(PfmRegsArg, time_enabled), 16);
        assert_eq!(offset_of!(PfmRegsArg, time_running), 24);
        assert_eq!(offset_of!(PfmRegsArg, reserved), 32);
        assert_eq!(offset_of!(PfmLoad, flags), 4);
        assert_eq!(offset_of!(PfmLoad, load_set), 8);
        assert_eq!(offset_of!(PfmLoad, reserved), 16);
        assert_eq!(offset_of!(PfmValues, set), 32);
        assert_eq!(offset_of!(PfmValues, vflags), 34);
        assert_eq!(offset_of!(PfmSetinfo, set_runs), 24);
        assert_eq!(offset_of!(PfmSetinfo, set_ovfl_pmds), 56);
        assert_eq!(offset_of!(PfmSetinfo, set_last_cause), 64);
        assert_eq!(offset_of!(PfmSetinfo, set_used_pmcs), 72);
        assert_eq!(offset_of!(PfmSetsArg, count), 8);
        assert_eq!(offset_of!(PfmSetsArg, done), 12);
        assert_eq!(offset_of!(PfmCtxInfo, status), 12);
        assert_eq!(offset_of!(PfmCtxInfo, used_pmds), 16);
        assert_eq!(offset_of!(PfmCtxInfo, threads), 24);
        assert_eq!(offset_of!(PfmCtxInfo, lost_threads), 28);
        assert_eq!(offset_of!(PfmThread, time_enabled), 16);
        assert_eq!(offset_of!(PfmThread, values), 32);
        assert_eq!(offset_of!(PfmThreadsArg, count), 16);
        assert_eq!(offset_of!(PfmThreadsArg, needed), 20);
        assert_eq!(offset_of!(PfmThreadsArg, lost_threads), 24);
        assert_eq!(offset_of!(PfmThreadsArg, set), 32);
        assert_eq!(offset_of!(PfmThreadsArg, vflags), 34);
        assert_eq!(offset_of!(PfmThreadsArg, pad), 36);
        assert_eq!(offset_of!(PfmThreadsArg, reserved), 40);
        assert_eq!(offset_of!(PfmInfo, model), 8);
        assert_eq!(offset_of!(PfmInfo, num_pmcs), 40);
        assert_eq!(offset_of!(PfmInfo, counter_width), 46);
        assert_eq!(offset_of!(PfmInfo, vector), 48);
        assert_eq!(offset_of!(PfmInfo, impl_pmcs), 56);
        assert_eq!(offset_of!(PfmInfo, impl_pmds), 64);
        assert_eq!(offset_of!(PfmInfo, pmc_rsvd_mask), 104);
        assert_eq!(offset_of!(PfmInfo, events), 360);
        assert_eq!(offset_of!(PfmMsg, tstamp), 32);
        assert_eq!(offset_of!(PfmMsg, reserved), 40);
    }

    #[test]
    fn constants_match_the_c_header() {
        assert_eq!(PFM_ABI_VERSION, 1);
        assert_eq!(PFM_IOC_MAGIC, 0xB6);
        assert_eq!(PFM_MAX_REGS_PER_CALL, 64);
        assert_eq!(
            (
                PFM_STATE_UNLOADED,
                PFM_STATE_LOADED,
                PFM_STATE_MASKED,
                PFM_STATE_ZOMBIE
            ),
            (1, 2, 3, 4)
        );
        assert_eq!(PFM_REG_RETFL_NOTAVAIL, 0x8000_0000);
        assert_eq!(PFM_REG_RETFL_EINVAL, 0x4000_0000);
        assert_eq!(PFM_REG_RETFL_NOSET, 0x2000_0000);
        assert_eq!(PFM_REG_RETFL_MASK & PFM_REGFL_IN_MASK, 0);
        assert_eq!(
            (PFM_REGFL_OVFL_NOTIFY, PFM_REGFL_RANDOM, PFM_REGFL_PMD_MASK),
            (1, 2, 3)
        );
        assert_eq!(
            (PFM_CTXST_STARTED, PFM_CTXST_ACTIVE, PFM_CTXST_EXITED),
            (1, 2, 4)
        );
        assert_eq!((PFM_MSG_OVFL, PFM_MSG_END), (1, 2));
        assert_eq!(
            (PFM_CTXFL_INHERIT, PFM_CTXFL_START_ON_EXEC, PFM_CTXFL_MASK),
            (4, 8, 0xf)
        );
        assert_eq!(
            (
                PFM_CTXST_EXEC_ARMED,
                PFM_LOAD_PROCESS,
                PFM_LOAD_START,
                PFM_LOAD_MASK
            ),
            (8, 1, 2, 3)
        );
        assert_eq!(
            (PFM_CLONE_CLOEXEC, PFM_CLONE_NONBLOCK, PFM_CLONE_MASK),
            (1, 2, 3)
        );
        assert_eq!(
            (
                PFM_MSG_SMPL_FULL,
                PFM_SMPL_DROP,
                PFM_SMPL_MASK,
                PFM_SMPL_OFFSET,
                PFM_SMPL_MAX_PAGES,
                PFM_SMPL_MAX_VALUES
            ),
            (4, 1, 1, 1 << 20, 1024, 8)
        );
        assert_eq!(
            (PFM_THRFL_EXITED, PFM_THRFL_REVOKED, PFM_THRFL_LOADED),
            (1, 2, 4)
        );
        assert_eq!(
            (PFM_THREAD_VALUES, PFM_MAX_THREAD_ROWS, PFM_MAX_ENDED_ROWS),
            (16, 65536, 1024)
        );
        assert_eq!(
            (
                PFM_SOFT_EV_TASK_CLOCK,
                PFM_SOFT_EV_CONTEXT_SWITCHES,
                PFM_SOFT_EV_CPU_MIGRATIONS,
                PFM_SOFT_EV_PAGE_FAULTS,
                PFM_SOFT_EV_MINOR_FAULTS,
                PFM_SOFT_EV_MAJOR_FAULTS
            ),
            (1, 2, 3, 4, 5, 6)
        );
    }
}
