// SPDX-License-Identifier: GPL-2.0

//! The device: `/dev/perfmon`'s file operations, the ioctl decoding and
//! `/sys/kernel/perfmon`. Each file operation finds the file's context and
//! calls one of its methods; nothing here keeps state of its own.

use core::sync::atomic::Ordering;

use kernel::bindings;
use kernel::c_str;
use kernel::ffi::{c_char, c_int, c_long, c_uint, c_ulong};
use kernel::ioctl::{_IOC_NR, _IOC_SIZE, _IOC_TYPE};
use kernel::prelude::*;
use kernel::str::CStr;
use kernel::uaccess::UserSlice;

use crate::pfm_ctx::Context;
use crate::rust::{SlabArc, SlabArcBorrow};
use crate::{abi, globals, pfm_ctxsw, Globals};

mod bytes;

/// `/dev/perfmon`'s file operations, handed to the miscdevice.
pub(crate) struct FileOps(bindings::file_operations);

// SAFETY: A table of function pointers and the module pointer, never
// written after `new`.
unsafe impl Send for FileOps {}
// SAFETY: See `Send`.
unsafe impl Sync for FileOps {}

impl FileOps {
    /// The table: every entry is a function of this file.
    pub(crate) fn new() -> Self {
        let mut fops = bindings::file_operations::default();
        fops.owner = crate::this_module();
        fops.open = Some(fop_open);
        fops.release = Some(fop_release);
        fops.unlocked_ioctl = Some(fop_ioctl);
        fops.compat_ioctl = Some(fop_compat_ioctl);
        fops.read = Some(fop_read);
        fops.poll = Some(fop_poll);
        fops.fasync = Some(fop_fasync);
        fops.mmap = Some(fop_mmap);
        fops.llseek = Some(bindings::noop_llseek);
        Self(fops)
    }

    /// The C table, for the miscdevice registration.
    pub(crate) fn table(&self) -> &bindings::file_operations {
        &self.0
    }
}

/// The context of an open file.
///
/// # Safety
///
/// `file` must be an open `/dev/perfmon` file (its `private_data` set by
/// `fop_open`) or a clone's (set by `clone_file`).
unsafe fn file_context<'a>(file: *mut bindings::file) -> SlabArcBorrow<'a, Context> {
    // SAFETY: `private_data` holds `SlabArc::into_raw` from `fop_open` or
    // `clone_file`, reclaimed only in `fop_release`, after every other
    // file operation.
    unsafe { SlabArc::borrow_raw((*file).private_data.cast_const().cast()) }
}

/// `open`: a new context for the file.
///
/// # Safety
///
/// Called by the VFS with a `/dev/perfmon` file being opened.
unsafe extern "C" fn fop_open(_inode: *mut bindings::inode, file: *mut bindings::file) -> c_int {
    // The module is still loading (see `PerfmonModule::init`).
    if !globals().ready.load(Ordering::Acquire) {
        return ENODEV.to_errno();
    }
    if let Err(e) = pfm_ctxsw::may_open() {
        return e.to_errno();
    }
    match Context::new() {
        Ok(ctx) => {
            // SAFETY: `file` is being opened; we own `private_data`.
            unsafe { (*file).private_data = ctx.into_raw().cast_mut().cast() };
            0
        }
        Err(e) => e.to_errno(),
    }
}

/// `release`.
///
/// # Safety
///
/// Called by the VFS with an open `/dev/perfmon` file (`file_context`).
unsafe extern "C" fn fop_release(_inode: *mut bindings::inode, file: *mut bindings::file) -> c_int {
    // SAFETY: The last file operation: take back the reference from `fop_open`.
    let ctx = unsafe { SlabArc::<Context>::from_raw((*file).private_data.cast_const().cast()) };
    ctx.close();
    0
}

/// `read`.
///
/// # Safety
///
/// Called by the VFS with an open `/dev/perfmon` file (`file_context`).
unsafe extern "C" fn fop_read(
    file: *mut bindings::file,
    buf: *mut c_char,
    len: usize,
    _ppos: *mut bindings::loff_t,
) -> isize {
    // SAFETY: `file` is an open /dev/perfmon file.
    let ctx = unsafe { file_context(file) };
    // SAFETY: `file` is open.
    let nonblock = unsafe { (*file).f_flags } & bindings::O_NONBLOCK != 0;
    match ctx.read(UserSlice::new(buf as usize, len).writer(), nonblock) {
        Ok(n) => n as isize,
        Err(e) => e.to_errno() as isize,
    }
}

/// `poll`.
///
/// # Safety
///
/// Called by the VFS with an open `/dev/perfmon` file (`file_context`).
unsafe extern "C" fn fop_poll(
    file: *mut bindings::file,
    table: *mut bindings::poll_table_struct,
) -> c_uint {
    // SAFETY: `file` is an open /dev/perfmon file.
    let ctx = unsafe { file_context(file) };
    // SAFETY: Forwarded from the VFS.
    unsafe { ctx.poll(file, table) }
}

/// `fasync`.
///
/// # Safety
///
/// Called by the VFS with an open `/dev/perfmon` file (`file_context`).
unsafe extern "C" fn fop_fasync(fd: c_int, file: *mut bindings::file, on: c_int) -> c_int {
    // SAFETY: `file` is an open /dev/perfmon file.
    let ctx = unsafe { file_context(file) };
    ctx.fasync(fd, file, on)
}

/// `mmap`: the context's counter page.
///
/// # Safety
///
/// Called by the VFS with an open `/dev/perfmon` file (`file_context`) and
/// the VMA to fill, the mmap lock held for writing.
unsafe extern "C" fn fop_mmap(
    file: *mut bindings::file,
    vma: *mut bindings::vm_area_struct,
) -> c_int {
    // SAFETY: `file` is an open /dev/perfmon file.
    let ctx = unsafe { file_context(file) };
    // SAFETY: The VMA of this `mmap` call, under the mmap lock.
    let Some(vma) = (unsafe { crate::rust::mm::Vma::from_raw(vma) }) else {
        return EINVAL.to_errno();
    };
    match ctx.mmap(&vma) {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// `unlocked_ioctl`.
///
/// # Safety
///
/// Called by the VFS with an open `/dev/perfmon` file (`file_context`).
unsafe extern "C" fn fop_ioctl(file: *mut bindings::file, cmd: c_uint, arg: c_ulong) -> c_long {
    // SAFETY: `file` is an open /dev/perfmon file.
    let ctx = unsafe { file_context(file) };
    // The cheap read first, one comparison on its way, its path inline
    // here (the others' decode and stack stay in `ioctl`).
    let r = if cmd == abi::PFM_IOC_READ_VALUES {
        read_values(&ctx, arg as usize).map(|()| 0)
    } else {
        ioctl(file, ctx, cmd, arg as usize)
    };
    match r {
        Ok(v) => v,
        Err(e) => e.to_errno() as c_long,
    }
}

/// The compat (32-bit caller) ioctl, as `compat_ptr_ioctl`: the argument
/// is a 32-bit user pointer, converted with [`compat_ptr`], then the native
/// handler runs (the ABI's structures have one layout for both).
///
/// # Safety
///
/// Called by the VFS with an open `/dev/perfmon` file (`file_context`).
unsafe extern "C" fn fop_compat_ioctl(
    file: *mut bindings::file,
    cmd: c_uint,
    arg: c_ulong,
) -> c_long {
    // SAFETY: Forwarded from the VFS: `file` is an open /dev/perfmon file.
    unsafe { fop_ioctl(file, cmd, compat_ptr(arg)) }
}

/// `compat_ptr`: a 32-bit caller's user pointer as a native one. On x86-64
/// the 32-bit address space is the bottom of the 64-bit one: a
/// zero-extension of the low 32 bits.
const fn compat_ptr(arg: c_ulong) -> c_ulong {
    arg as u32 as c_ulong
}

/// Dispatches one ioctl. The command's type and number select the call; a
/// known call with the wrong direction or size is `EINVAL`, an unknown one
/// `ENOTTY`. Every argument is read from user memory exactly once.
///
/// The file's reference to the context is borrowed, not cloned: only LOAD,
/// which hands the context to the thread, takes a reference of its own.
/// Returns the ioctl's value: 0, or `PFM_IOC_CLONE`'s file descriptor.
#[inline(never)]
fn ioctl(
    file: *mut bindings::file,
    ctx: SlabArcBorrow<'_, Context>,
    cmd: u32,
    arg: usize,
) -> Result<c_long> {
    if _IOC_TYPE(cmd) != abi::PFM_IOC_MAGIC {
        return Err(ENOTTY);
    }
    let expected = match _IOC_NR(cmd) {
        0x00 => abi::PFM_IOC_GET_INFO,
        0x01 => abi::PFM_IOC_WRITE_PMCS,
        0x02 => abi::PFM_IOC_WRITE_PMDS,
        0x03 => abi::PFM_IOC_READ_PMDS,
        0x04 => abi::PFM_IOC_LOAD,
        0x05 => abi::PFM_IOC_UNLOAD,
        0x06 => abi::PFM_IOC_START,
        0x07 => abi::PFM_IOC_STOP,
        0x08 => abi::PFM_IOC_RESTART,
        0x09 => abi::PFM_IOC_GET_STATE,
        0x0a => abi::PFM_IOC_SET_FLAGS,
        0x0b => abi::PFM_IOC_READ_VALUES,
        0x0c => abi::PFM_IOC_CREATE_SETS,
        0x0d => abi::PFM_IOC_DELETE_SETS,
        0x0e => abi::PFM_IOC_GETINFO_SETS,
        0x0f => abi::PFM_IOC_READ_THREADS,
        0x10 => abi::PFM_IOC_CLONE,
        0x11 => abi::PFM_IOC_SMPL_SETUP,
        _ => return Err(ENOTTY),
    };
    if cmd != expected {
        return Err(EINVAL);
    }
    let user = UserSlice::new(arg, _IOC_SIZE(cmd));
    if cmd == abi::PFM_IOC_CLONE {
        let c: abi::PfmClone = user.reader().read()?;
        // SAFETY: `file` is the open /dev/perfmon file of this call.
        return unsafe { clone_file(file, &ctx, &c) };
    }
    let r = match cmd {
        abi::PFM_IOC_GET_INFO => {
            let mut info = abi::PfmInfo::default();
            info.abi_version = abi::PFM_ABI_VERSION;
            info.size = core::mem::size_of::<abi::PfmInfo>() as u32;
            globals().pmu.describe(&mut info);
            info.vector = globals().intr.vector_of_cpu0();
            user.writer().write(&info)
        }
        abi::PFM_IOC_WRITE_PMCS | abi::PFM_IOC_WRITE_PMDS | abi::PFM_IOC_READ_PMDS => {
            regs_ioctl(&ctx, cmd, arg)
        }
        abi::PFM_IOC_LOAD => {
            let l: abi::PfmLoad = user.reader().read()?;
            Context::load(&ctx.to_arc(), &l)
        }
        abi::PFM_IOC_UNLOAD => ctx.unload(),
        abi::PFM_IOC_START => ctx.start(),
        abi::PFM_IOC_STOP => ctx.stop(),
        abi::PFM_IOC_RESTART => ctx.restart(),
        abi::PFM_IOC_GET_STATE => user.writer().write(&ctx.get_state()),
        // `fop_ioctl` takes it before this; here for completeness.
        abi::PFM_IOC_READ_VALUES => read_values(&ctx, arg),
        abi::PFM_IOC_SET_FLAGS => {
            let f: abi::PfmCtxFlags = user.reader().read()?;
            ctx.set_flags(&f)
        }
        abi::PFM_IOC_CREATE_SETS | abi::PFM_IOC_DELETE_SETS | abi::PFM_IOC_GETINFO_SETS => {
            sets_ioctl(&ctx, cmd, arg)
        }
        abi::PFM_IOC_READ_THREADS => read_threads(&ctx, arg),
        abi::PFM_IOC_SMPL_SETUP => {
            let s: abi::PfmSmplSetup = user.reader().read()?;
            ctx.smpl_setup(&s)
        }
        _ => Err(ENOTTY),
    };
    r.map(|()| 0)
}

/// `PFM_IOC_CLONE` of `ctx`, the context of `file`: the new context's file
/// descriptor. Its file is an anonymous inode's with `file`'s operations
/// (so the same calls work on it, `mmap` included) and access mode; it
/// holds a module reference as a `/dev/perfmon` file does. Open's permission check
/// applies again: the descriptor cloned from may have been passed to
/// another process.
///
/// # Safety
///
/// `file` must be an open `/dev/perfmon` file (or a clone's) and `ctx` its context.
unsafe fn clone_file(
    file: *mut bindings::file,
    ctx: &Context,
    arg: &abi::PfmClone,
) -> Result<c_long> {
    if arg.flags & !abi::PFM_CLONE_MASK != 0 || arg.pad != 0 || arg.reserved != [0; 3] {
        return Err(EINVAL);
    }
    pfm_ctxsw::may_open()?;
    let new = ctx.clone_unloaded()?;
    // SAFETY: `file` is open: its flags are readable.
    let mut flags = unsafe { (*file).f_flags } & bindings::O_ACCMODE;
    if arg.flags & abi::PFM_CLONE_CLOEXEC != 0 {
        flags |= bindings::O_CLOEXEC;
    }
    if arg.flags & abi::PFM_CLONE_NONBLOCK != 0 {
        flags |= bindings::O_NONBLOCK;
    }
    let raw = new.into_raw();
    // SAFETY: `file` is open, so its `f_op` is this module's table, pinned
    // until the module is gone, which the new file's module reference
    // prevents. On success the new file's `private_data` owns `raw`'s
    // reference, taken back by `fop_release`.
    let fd = unsafe {
        crate::rust::anon_inode_fd(
            c_str!("[perfmon]"),
            (*file).f_op,
            raw.cast_mut().cast(),
            flags,
        )
    };
    let fd = fd.inspect_err(|_| {
        // SAFETY: No file took `raw`: the reference is still ours.
        drop(unsafe { SlabArc::<Context>::from_raw(raw) });
    })?;
    Ok(fd as c_long)
}

/// `PFM_IOC_READ_VALUES`: a [`abi::PfmValues`] at `arg`.
fn read_values(ctx: &Context, arg: usize) -> Result {
    let v: abi::PfmValues = UserSlice::new(arg, core::mem::size_of::<abi::PfmValues>())
        .reader()
        .read()?;
    let times = ctx.read_values(&v)?;
    // The times are the argument's only outputs: 16 bytes back, not 48
    // (the cheap read's cost is mostly its user copies).
    // Inside the argument just read whole at `arg`: no wrap.
    let at = arg.wrapping_add(core::mem::offset_of!(abi::PfmValues, time_enabled));
    UserSlice::new(at, core::mem::size_of_val(&times))
        .writer()
        .write(&times)
}

/// `PFM_IOC_READ_THREADS`: a [`abi::PfmThreadsArg`] at `arg`, written back
/// with `needed` and `lost_threads` whatever the outcome (after a check
/// that it can be, before anything is read).
fn read_threads(ctx: &Context, arg: usize) -> Result {
    let size = core::mem::size_of::<abi::PfmThreadsArg>();
    let (mut reader, mut writer) = UserSlice::new(arg, size).reader_writer();
    let mut a: abi::PfmThreadsArg = reader.read()?;
    a.needed = 0;
    a.lost_threads = 0;
    UserSlice::new(arg, size).writer().write(&a)?;
    let r = ctx.read_threads(&mut a);
    writer.write(&a)?;
    r
}

/// `PFM_IOC_WRITE_PMCS`, `PFM_IOC_WRITE_PMDS` and `PFM_IOC_READ_PMDS`: a
/// [`abi::PfmRegsArg`] at `arg` naming an array of registers.
fn regs_ioctl(ctx: &Context, cmd: u32, arg: usize) -> Result {
    let size = _IOC_SIZE(cmd);
    let (mut reader, mut writer) = UserSlice::new(arg, size).reader_writer();
    let mut a: abi::PfmRegsArg = reader.read()?;
    if a.reserved != [0; 2] {
        return Err(EINVAL);
    }
    if a.count == 0 {
        return Err(EINVAL);
    }
    if a.count as usize > abi::PFM_MAX_REGS_PER_CALL {
        return Err(E2BIG);
    }
    let elem = if cmd == abi::PFM_IOC_WRITE_PMCS {
        core::mem::size_of::<abi::PfmPmc>()
    } else {
        core::mem::size_of::<abi::PfmPmd>()
    };
    let regs = UserSlice::new(a.regs as usize, a.count as usize * elem);
    a.time_enabled = 0;
    a.time_running = 0;
    // `done` and the times are written back: a read-only argument
    // fails with EFAULT now, before anything is applied.
    UserSlice::new(arg, size).writer().write(&a)?;
    let r = match cmd {
        abi::PFM_IOC_WRITE_PMCS => ctx.write_pmcs(&mut a, regs),
        abi::PFM_IOC_WRITE_PMDS => ctx.write_pmds(&mut a, regs),
        _ => ctx.read_pmds(&mut a, regs),
    };
    // `done` tells user space how far the call got, success or not.
    writer.write(&a)?;
    r
}

/// `PFM_IOC_CREATE_SETS`, `PFM_IOC_DELETE_SETS` and `PFM_IOC_GETINFO_SETS`:
/// a [`abi::PfmSetsArg`] at `arg`, written back with `done` whatever the
/// outcome (after a check that it can be, before anything is applied).
fn sets_ioctl(ctx: &Context, cmd: u32, arg: usize) -> Result {
    let size = _IOC_SIZE(cmd);
    let (mut reader, mut writer) = UserSlice::new(arg, size).reader_writer();
    let mut a: abi::PfmSetsArg = reader.read()?;
    a.done = 0;
    UserSlice::new(arg, size).writer().write(&a)?;
    let r = match cmd {
        abi::PFM_IOC_CREATE_SETS => ctx.create_sets(&mut a),
        abi::PFM_IOC_DELETE_SETS => ctx.delete_sets(&mut a),
        _ => ctx.sets_info(&mut a),
    };
    writer.write(&a)?;
    r
}

/// The value of a `/sys/kernel/perfmon` file.
enum SysfsValue {
    Num(u64),
    Text(&'static str),
}

/// `/sys/kernel/perfmon`'s files, the one list of them: name and value.
/// `shim.c` creates one read-only file per entry ([`pfm_sysfs_count`],
/// [`pfm_sysfs_name`]) and asks [`pfm_sysfs_show`] for entry `i`'s value.
const SYSFS_FILES: [(&CStr, fn(&Globals) -> SysfsValue); 20] = {
    use SysfsValue::{Num, Text};
    [
        (c_str!("abi_version"), |_| Num(abi::PFM_ABI_VERSION as u64)),
        (c_str!("pmu_model"), |g| Text(g.pmu.name())),
        (c_str!("live_contexts"), |g| {
            Num(g.live_contexts.load(Ordering::Relaxed) as u64)
        }),
        (c_str!("zombie_contexts"), |g| {
            Num(g.zombies.load(Ordering::Relaxed) as u64)
        }),
        (c_str!("attached_threads"), |g| {
            Num(g.attached.load(Ordering::Relaxed) as u64)
        }),
        (c_str!("inheriting_contexts"), |g| {
            Num(g.inheriting.load(Ordering::Relaxed) as u64)
        }),
        (c_str!("exec_armed_contexts"), |g| {
            Num(g.exec_armed.load(Ordering::Relaxed) as u64)
        }),
        (c_str!("watched_processes"), |_| {
            Num(crate::pfm_ctxsw::watched_processes() as u64)
        }),
        (c_str!("context_bytes"), |g| {
            Num(g.contexts.object_size() as u64)
        }),
        (c_str!("vector"), |g| Num(g.intr.vector_of_cpu0().into())),
        (c_str!("counter_width"), |g| Num(g.pmu.width.into())),
        (c_str!("overflow_interrupts"), |g| Num(g.intr.interrupts())),
        (c_str!("msr_faults"), |g| {
            Num(g.pmu.msr_faults.load(Ordering::Relaxed))
        }),
        (c_str!("hw_full_restores"), |g| {
            Num(g.pmu.full_restores.load(Ordering::Relaxed))
        }),
        (c_str!("hw_lazy_restores"), |g| {
            Num(g.pmu.lazy_restores.load(Ordering::Relaxed))
        }),
        (c_str!("hw_claimed"), |g| Num(g.pmu.hw_claimed().into())),
        (c_str!("hw_reserved_counters"), |g| {
            Num(g.pmu.reserved_counters().into())
        }),
        (c_str!("hw_lvtpc_cpus"), |g| Num(g.intr.lvtpc_cpus())),
        (c_str!("hw_no_vector_cpus"), |g| {
            Num(g.intr.cpus_without_vector())
        }),
        (c_str!("hw_skipped_installs"), |g| {
            Num(g.pmu.skipped_installs.load(Ordering::Relaxed))
        }),
    ]
};

/// The number of `/sys/kernel/perfmon` files (for shim.c).
#[no_mangle]
extern "C" fn pfm_sysfs_count() -> c_uint {
    SYSFS_FILES.len() as c_uint
}

/// The name of `/sys/kernel/perfmon` file `i` (for shim.c): a static
/// string, or NULL past the end.
#[no_mangle]
extern "C" fn pfm_sysfs_name(i: c_uint) -> *const c_char {
    SYSFS_FILES
        .get(i as usize)
        .map_or(core::ptr::null(), |(name, _)| name.as_char_ptr())
}

/// Answers the `show` of `/sys/kernel/perfmon` file `i` (see shim.c).
///
/// # Safety
///
/// `buf` is a sysfs buffer of `PAGE_SIZE` bytes.
#[no_mangle]
unsafe extern "C" fn pfm_sysfs_show(i: c_uint, buf: *mut c_char) -> isize {
    let Some((_, show)) = SYSFS_FILES.get(i as usize) else {
        return EINVAL.to_errno() as isize;
    };
    let mut out = SysfsBuf {
        buf: buf.cast(),
        len: 0,
    };
    match show(globals()) {
        SysfsValue::Num(v) => out.num(v),
        SysfsValue::Text(t) => out.text(t.as_bytes()),
    }
    out.text(b"\n");
    out.len as isize
}

/// Writes into a sysfs page; values are short, far below `PAGE_SIZE`.
struct SysfsBuf {
    buf: *mut u8,
    len: usize,
}

impl SysfsBuf {
    fn text(&mut self, s: &[u8]) {
        for &b in s {
            if self.len + 1 < bindings::PAGE_SIZE as usize {
                // SAFETY: Within the PAGE_SIZE buffer sysfs gave us.
                unsafe { self.buf.add(self.len).write(b) };
                self.len += 1;
            }
        }
    }

    fn num(&mut self, mut v: u64) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        self.text(&digits[i..]);
    }
}
