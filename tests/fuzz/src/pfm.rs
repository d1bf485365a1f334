//! Plain, well-formed perfmon calls for the scenario tests (the fuzzer
//! builds its own, malformed ones in an arena). Errors are errnos.

use crate::sys::{self, abi};
use pfm_test_support::raw::{ioctl_ref, Plain};

/// An open context; closed on drop (unless [`Ctx::into_raw`]).
pub struct Ctx {
    fd: i32,
}

/// A well-formed call: the ABI structure of the request (shared raw
/// layer; an oversized request would be EOVERFLOW before any call).
fn ioctl_ptr<T: Plain>(fd: i32, cmd: u32, arg: &mut T) -> Result<(), i32> {
    ioctl_ref(fd, cmd, arg).map(|_| ())
}

impl Ctx {
    /// Opens /dev/perfmon.
    pub fn open() -> Result<Ctx, i32> {
        sys::open_pfm().map(|fd| Ctx { fd })
    }

    /// Takes ownership of an open fd.
    pub fn from_raw(fd: i32) -> Ctx {
        Ctx { fd }
    }

    /// The fd.
    pub fn fd(&self) -> i32 {
        self.fd
    }

    /// Gives the fd up without closing it.
    pub fn into_raw(self) -> i32 {
        let fd = self.fd;
        std::mem::forget(self);
        fd
    }

    /// `PFM_IOC_SET_FLAGS`.
    pub fn set_flags(&self, flags: u32) -> Result<(), i32> {
        let mut f = abi::PfmCtxFlags {
            flags,
            ..Default::default()
        };
        ioctl_ptr(self.fd, abi::PFM_IOC_SET_FLAGS, &mut f)
    }

    /// Programs counter `n` with soft event `ev`, starting at `value`;
    /// `notify` sets OVFL_NOTIFY, and both resets are `reset`.
    pub fn program(
        &self,
        n: u16,
        ev: u64,
        value: u64,
        notify: bool,
        reset: u64,
    ) -> Result<(), i32> {
        let mut pmc = [abi::PfmPmc {
            reg_num: n,
            reg_value: ev,
            ..Default::default()
        }];
        let mut a = abi::PfmRegsArg {
            regs: pmc.as_mut_ptr() as u64,
            count: 1,
            ..Default::default()
        };
        ioctl_ptr(self.fd, abi::PFM_IOC_WRITE_PMCS, &mut a)?;
        let mut pmd = [abi::PfmPmd {
            reg_num: n,
            reg_flags: if notify {
                abi::PFM_REGFL_OVFL_NOTIFY
            } else {
                0
            },
            reg_value: value,
            reg_short_reset: reset,
            reg_long_reset: reset,
            ..Default::default()
        }];
        let mut a = abi::PfmRegsArg {
            regs: pmd.as_mut_ptr() as u64,
            count: 1,
            ..Default::default()
        };
        ioctl_ptr(self.fd, abi::PFM_IOC_WRITE_PMDS, &mut a)
    }

    /// The value of PMD `n`.
    pub fn read_pmd(&self, n: u16) -> Result<u64, i32> {
        let mut pmd = [abi::PfmPmd {
            reg_num: n,
            ..Default::default()
        }];
        let mut a = abi::PfmRegsArg {
            regs: pmd.as_mut_ptr() as u64,
            count: 1,
            ..Default::default()
        };
        ioctl_ptr(self.fd, abi::PFM_IOC_READ_PMDS, &mut a)?;
        Ok(pmd[0].reg_value)
    }

    /// `PFM_IOC_LOAD` on `tid` (0: the caller).
    pub fn load(&self, tid: u32) -> Result<(), i32> {
        let mut l = abi::PfmLoad {
            tid,
            ..Default::default()
        };
        ioctl_ptr(self.fd, abi::PFM_IOC_LOAD, &mut l)
    }

    fn plain(&self, cmd: u32) -> Result<(), i32> {
        // SAFETY: argument-less command.
        let r = unsafe { libc::ioctl(self.fd, cmd as _, 0usize) };
        if r == -1 {
            Err(sys::errno())
        } else {
            Ok(())
        }
    }

    /// `PFM_IOC_UNLOAD`.
    pub fn unload(&self) -> Result<(), i32> {
        self.plain(abi::PFM_IOC_UNLOAD)
    }

    /// `PFM_IOC_START`.
    pub fn start(&self) -> Result<(), i32> {
        self.plain(abi::PFM_IOC_START)
    }

    /// `PFM_IOC_STOP`.
    pub fn stop(&self) -> Result<(), i32> {
        self.plain(abi::PFM_IOC_STOP)
    }

    /// `PFM_IOC_RESTART`.
    pub fn restart(&self) -> Result<(), i32> {
        self.plain(abi::PFM_IOC_RESTART)
    }

    /// `PFM_IOC_GET_STATE`.
    pub fn state(&self) -> Result<abi::PfmCtxInfo, i32> {
        let mut st = abi::PfmCtxInfo::default();
        ioctl_ptr(self.fd, abi::PFM_IOC_GET_STATE, &mut st)?;
        Ok(st)
    }

    /// Waits up to `timeout_ms` for a message and reads one.
    pub fn next_msg(&self, timeout_ms: i32) -> Result<Option<abi::PfmMsg>, i32> {
        let rev = sys::poll(&[(self.fd, libc::POLLIN)], timeout_ms)?;
        if rev[0] & libc::POLLIN == 0 {
            return Ok(None);
        }
        let mut m = abi::PfmMsg::default();
        // SAFETY: `m` is 64 bytes, the length passed.
        let n = unsafe { libc::read(self.fd, &mut m as *mut abi::PfmMsg as *mut libc::c_void, 64) };
        if n < 0 {
            return Err(sys::errno());
        }
        Ok(if n == 64 { Some(m) } else { None })
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        let _ = sys::close(self.fd);
    }
}

/// `PFM_STATE_*` as text.
pub fn state_name(s: u32) -> &'static str {
    match s {
        abi::PFM_STATE_UNLOADED => "UNLOADED",
        abi::PFM_STATE_LOADED => "LOADED",
        abi::PFM_STATE_MASKED => "MASKED",
        abi::PFM_STATE_ZOMBIE => "ZOMBIE",
        _ => "?",
    }
}

/// `PFM_MSG_*` as text.
pub fn msg_name(t: u32) -> &'static str {
    match t {
        abi::PFM_MSG_OVFL => "OVFL",
        abi::PFM_MSG_END => "END",
        abi::PFM_MSG_REVOKED => "REVOKED",
        abi::PFM_MSG_SMPL_FULL => "SMPL_FULL",
        _ => "?",
    }
}

/// An errno result as text ("ok", "EACCES").
pub fn outcome<T>(r: &Result<T, i32>) -> &'static str {
    match r {
        Ok(_) => "ok",
        Err(e) => perfmon::errno_name(*e),
    }
}
