// SPDX-License-Identifier: GPL-2.0

//! perfmon: per-thread access to the CPU's performance counters through
//! `/dev/perfmon`, reviving Stephane Eranian's perfmon2 on a modern kernel.
//!
//! This is the crate root: the module, `/dev/perfmon`'s file operations, the
//! ioctl dispatch and `/sys/kernel/perfmon`. The context lives in `pfm_ctx`,
//! the thread side (attach, context switch, cleanup) in `pfm_ctxsw`, the PMU
//! models in `pfm_x86`. `Documentation/perfmon.rst` is the user's manual.

// `pin_init!` of the attachment (many fields) expands deeper than the default.
#![recursion_limit = "256"]

use core::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use kernel::ffi::{c_char, c_int, c_long, c_uint, c_ulong, c_void};

use kernel::bindings;
use kernel::prelude::*;
use kernel::sync::Arc;
use kernel::types::ForeignOwnable;
use kernel::types::{AsBytes, FromBytes};
use kernel::uaccess::UserSlice;

// The ABI and the pure logic are shared with user space and the host tests
// (`host/`): their items are `pub` there, so they are public modules here,
// and the host tests use what the module does not.
#[path = "include/uapi/linux/perfmon.rs"]
pub mod abi;
#[allow(dead_code)]
pub mod pfm_counter;
mod pfm_ctx;
mod pfm_ctxsw;
mod pfm_intr;
#[allow(dead_code)]
pub mod pfm_msgq;
#[allow(dead_code)]
pub mod pfm_state;
pub mod pfm_x86;
#[path = "rust/mod.rs"]
mod rust;

use pfm_ctx::Context;
use pfm_ctxsw::{Attachment, ReapQueue};
use rust::{new_irq_spinlock, IrqSpinLock};

module! {
    type: PerfmonModule,
    name: "perfmon",
    author: "The perfmon developers",
    description: "Per-thread performance counters through /dev/perfmon (perfmon2 revived)",
    license: "GPL",
}

/// `EBADFD`: the context is in the wrong state for the operation (6.12's
/// `kernel::error::code` does not list it).
pub(crate) fn ebadfd() -> Error {
    Error::from_errno(-(bindings::EBADFD as i32))
}

/// `EDQUOT`: the per-user limit of attached threads is reached (not in
/// 6.12's `kernel::error::code`).
pub(crate) fn edquot() -> Error {
    Error::from_errno(-(bindings::EDQUOT as i32))
}

// SAFETY: The ABI structures are `repr(C)` integers and integer arrays with
// explicit padding fields: every bit pattern is valid and none has padding.
unsafe impl FromBytes for abi::PfmPmc {}
// SAFETY: See above.
unsafe impl AsBytes for abi::PfmPmc {}
// SAFETY: See above.
unsafe impl FromBytes for abi::PfmPmd {}
// SAFETY: See above.
unsafe impl AsBytes for abi::PfmPmd {}
// SAFETY: See above.
unsafe impl FromBytes for abi::PfmRegsArg {}
// SAFETY: See above.
unsafe impl AsBytes for abi::PfmRegsArg {}
// SAFETY: See above.
unsafe impl FromBytes for abi::PfmLoad {}
// SAFETY: See above.
unsafe impl FromBytes for abi::PfmCtxFlags {}
// SAFETY: See above.
unsafe impl AsBytes for abi::PfmCtxInfo {}
// SAFETY: See above.
unsafe impl AsBytes for abi::PfmInfo {}
// SAFETY: See above.
unsafe impl AsBytes for abi::PfmMsg {}
// SAFETY: See above.
unsafe impl FromBytes for abi::PfmValues {}
// SAFETY: See above.
unsafe impl AsBytes for abi::PfmValues {}

/// Most threads attached at once, system-wide (the registry's slots). A
/// LOAD beyond it fails with `ENOSPC`.
pub(crate) const MAX_ATTACHED: usize = 4096;

/// State shared by every context, alive from `init` to `drop` of the module.
#[pin_data]
pub(crate) struct Globals {
    /// The PMU model chosen at load.
    pub(crate) pmu: pfm_x86::Pmu,
    /// Contexts alive (open fds and zombies).
    pub(crate) live_contexts: AtomicUsize,
    /// Contexts in ZOMBIE state.
    pub(crate) zombies: AtomicUsize,
    /// Attachments alive (threads with a notifier or one pending).
    pub(crate) attached: AtomicUsize,
    /// Every attachment, by thread.
    #[pin]
    pub(crate) registry: IrqSpinLock<pfm_ctxsw::Registry>,
    /// Where attachments are finally freed (set by [`ReapQueueInstalled`]).
    reap_queue: AtomicPtr<bindings::workqueue_struct>,
    /// The overflow vectors.
    pub(crate) intr: pfm_intr::Vectors<Attachment>,
}

// SAFETY: `reap_queue` is a workqueue, usable from any thread; the rest is
// atomics and locks.
unsafe impl Sync for Globals {}
// SAFETY: See `Sync`.
unsafe impl Send for Globals {}

impl Globals {
    /// The reap workqueue.
    pub(crate) fn reap_queue(&self) -> &ReapQueue {
        // SAFETY: Set by `init` before `/dev/perfmon` exists, so before any
        // attachment; cleared only at exit after `destroy_workqueue` drained
        // it, when no attachment is left (each holds a module reference)
        // and the reaper has returned: every caller sees the live queue.
        unsafe { kernel::workqueue::Queue::from_raw(self.reap_queue.load(Ordering::Acquire)) }
    }
}

static GLOBALS: AtomicPtr<Globals> = AtomicPtr::new(core::ptr::null_mut());

/// The module's shared state.
pub(crate) fn globals() -> &'static Globals {
    // Set in `init` (`Published`) before anything that can call here
    // exists, and cleared at exit after all of it is gone: the device,
    // sysfs, the vectors and ticks, the reaper, and every attachment and
    // context (each holds a module reference, directly or through its file).
    // SAFETY: So every caller sees a pointer to the live `Globals`.
    unsafe { &*GLOBALS.load(Ordering::Acquire) }
}

/// `THIS_MODULE`.
pub(crate) fn this_module() -> *mut bindings::module {
    // Only the address of the module's own `struct module` is taken.
    core::ptr::addr_of_mut!(bindings::__this_module)
}

/// `/dev/perfmon`'s file operations, handed to the miscdevice.
struct FileOps(bindings::file_operations);

// SAFETY: A table of function pointers and the module pointer, never
// written after `init`.
unsafe impl Send for FileOps {}
// SAFETY: See `Send`.
unsafe impl Sync for FileOps {}

/// `GLOBALS` points at the module's `Globals` until this is dropped.
struct Published(());

impl Published {
    /// Publishes `g`, which must outlive the returned guard (the module
    /// drops its `Globals` after it).
    fn new(g: &Pin<KBox<Globals>>) -> Self {
        GLOBALS.store(&**g as *const Globals as *mut Globals, Ordering::Release);
        Self(())
    }
}

impl Drop for Published {
    fn drop(&mut self) {
        GLOBALS.store(core::ptr::null_mut(), Ordering::Release);
    }
}

/// The reap workqueue, installed in `Globals` until dropped.
struct ReapQueueInstalled(Option<rust::Workqueue>);

impl ReapQueueInstalled {
    fn new() -> Result<Self> {
        let wq = rust::Workqueue::new(kernel::c_str!("perfmon_reap"))?;
        globals().reap_queue.store(wq.as_ptr(), Ordering::Release);
        Ok(Self(Some(wq)))
    }
}

impl Drop for ReapQueueInstalled {
    fn drop(&mut self) {
        // Every attachment has been released (each held a module
        // reference), but the reaper may still be in the last one's drop,
        // past its `module_put`, and may queue more of its own: destroying
        // drains it. Only then is the pointer cleared.
        drop(self.0.take());
        globals()
            .reap_queue
            .store(core::ptr::null_mut(), Ordering::Release);
    }
}

/// The overflow vectors on every CPU (cpuhp state) until dropped.
struct VectorsStarted(Option<pfm_intr::VectorsOnline<Attachment>>);

impl VectorsStarted {
    fn new() -> Result<Self> {
        Ok(Self(Some(globals().intr.start()?)))
    }
}

impl Drop for VectorsStarted {
    fn drop(&mut self) {
        // A hardware model's PMCs off, LVTPC back, then the counters back
        // to perf_events: nothing of ours can interrupt perf's NMI handler.
        // (The claim is taken by the first LOAD, through the vectors.)
        let g = globals();
        g.pmu.quiesce_all();
        drop(self.0.take());
        g.pmu.unclaim();
    }
}

/// The vectors deliver to the attachment, and find the owner of a CPU's
/// PMU in the PMU layer: the crate root is the one place that knows all
/// three.
impl pfm_intr::Wiring for Attachment {
    fn vectors() -> &'static pfm_intr::Vectors<Self> {
        &globals().intr
    }
    fn pmu_owner_here() -> *const Self {
        globals().pmu.owner_here().cast()
    }
    fn cpu_online(cpu: u32) {
        globals().pmu.cpu_online(cpu);
    }
}

/// `intel_arch_sim`'s per-CPU ticks, running until dropped.
struct SimTicks(());

impl SimTicks {
    fn new() -> Self {
        globals().pmu.start_sim_ticks();
        Self(())
    }
}

impl Drop for SimTicks {
    fn drop(&mut self) {
        globals().pmu.stop_sim_ticks();
    }
}

/// What `init` set up: one guard per step, each undoing its step when
/// dropped. Fields drop in declaration order, the reverse of the order
/// `init` takes the steps in; until its last step succeeds, `init` holds
/// the guards in locals, which drop in reverse order too. So whichever
/// step fails, every earlier one is undone exactly once, in reverse order,
/// and module exit undoes them all the same way.
struct PerfmonModule {
    /// `/dev/perfmon`: gone first, so no new file (or context) appears.
    _misc: rust::MiscRegistration,
    /// The exec watch: no attachment is left once the device is gone and
    /// every file closed (each attachment holds a module reference).
    _exec_watch: rust::ExecWatch,
    _sysfs: rust::SysfsRegistration,
    _sim_ticks: SimTicks,
    _vectors: VectorsStarted,
    /// The device's file operations, used until `_misc` is gone.
    _fops: Pin<KBox<FileOps>>,
    _notifier_key: rust::PreemptNotifierKey,
    _reap_queue: ReapQueueInstalled,
    /// Exit's last wait, for the code still returning through the module
    /// after dropping the last attachment (see `pfm_ctxsw::release`).
    _text_barrier: rust::ModuleTextBarrier,
    _published: Published,
    _globals: Pin<KBox<Globals>>,
}

impl kernel::Module for PerfmonModule {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        if let Some((entry, c, r)) = rust::layout_mismatch() {
            pr_err!(
                "kernel structure layout differs between C and the Rust bindings (entry {entry}: {c} vs {r}); bindgen's libclang must match the compiler: refusing to load\n"
            );
            return Err(ENOEXEC);
        }
        let name = rust::param_pmu();
        let (pmu, why) = match pfm_x86::Pmu::select(name.as_bytes(), rust::param_soft_width()) {
            Ok(p) => p,
            Err(pfm_x86::ProbeError::NoHardware(msg)) => {
                pr_err!("{msg}: refusing to load (try pmu=soft or pmu=auto)\n");
                return Err(ENODEV);
            }
            Err(pfm_x86::ProbeError::NoMemory) => return Err(ENOMEM),
            Err(pfm_x86::ProbeError::BadParam) => {
                pr_err!("invalid parameters: pmu=auto|soft|intel_arch|amd64|intel_arch_sim, soft_width=16..64\n");
                return Err(EINVAL);
            }
        };

        // Plain memory first: a failure frees what was allocated, nothing else.
        // LVTPC from load on only for the soft model on a CPU without a PMU;
        // a hardware model takes it while it holds the counters.
        let intr = pfm_intr::Vectors::new(pmu.hw.is_none() && !pfm_x86::cpu_has_pmu())?;
        let registry = pfm_ctxsw::Registry::new()?;
        let globals = KBox::pin_init(
            pin_init!(Globals {
                pmu,
                live_contexts: AtomicUsize::new(0),
                zombies: AtomicUsize::new(0),
                attached: AtomicUsize::new(0),
                registry <- new_irq_spinlock!(registry, "perfmon_registry"),
                reap_queue: AtomicPtr::new(core::ptr::null_mut()),
                intr,
            }),
            GFP_KERNEL,
        )?;
        let mut fops = bindings::file_operations::default();
        fops.owner = this_module();
        fops.open = Some(fop_open);
        fops.release = Some(fop_release);
        fops.unlocked_ioctl = Some(fop_ioctl);
        fops.compat_ioctl = Some(fop_ioctl);
        fops.read = Some(fop_read);
        fops.poll = Some(fop_poll);
        fops.fasync = Some(fop_fasync);
        fops.llseek = Some(bindings::noop_llseek);
        let fops = KBox::pin(FileOps(fops), GFP_KERNEL)?;

        // Then the steps with effects beyond this module's memory, each
        // held by its guard (see `PerfmonModule`): on an error, the guards
        // taken so far drop in reverse order.
        let published = Published::new(&globals);
        let text_barrier = rust::ModuleTextBarrier::new();
        let reap_queue = ReapQueueInstalled::new()?;
        // The preempt notifier static key: patched here (it sleeps), once.
        let notifier_key = rust::PreemptNotifierKey::inc();
        let vectors = VectorsStarted::new()?;
        let sim_ticks = SimTicks::new();
        // SAFETY: The show callbacks read `globals()`, published above
        // until after `sysfs` is dropped (field order of `PerfmonModule`).
        let sysfs = unsafe { rust::SysfsRegistration::register() }?;
        // Before the device: no attachment exists yet, so no exec misses it.
        let exec_watch = rust::ExecWatch::register();
        // SAFETY: `fops` is pinned in the module object and dropped after
        // the registration (field order of `PerfmonModule`).
        let misc = unsafe { rust::MiscRegistration::register(&fops.0) }?;
        pr_info!(
            "PMU model {} ({} bits): {}\n",
            globals.pmu.name(),
            globals.pmu.width,
            why
        );
        Ok(PerfmonModule {
            _misc: misc,
            _exec_watch: exec_watch,
            _sysfs: sysfs,
            _sim_ticks: sim_ticks,
            _vectors: vectors,
            _fops: fops,
            _notifier_key: notifier_key,
            _reap_queue: reap_queue,
            _text_barrier: text_barrier,
            _published: published,
            _globals: globals,
        })
    }
}

/// The context of an open file.
///
/// # Safety
///
/// `file` must be an open `/dev/perfmon` file (its `private_data` set by `fop_open`).
unsafe fn file_context<'a>(file: *mut bindings::file) -> kernel::sync::ArcBorrow<'a, Context> {
    // SAFETY: `private_data` holds `Arc::into_foreign` from `fop_open`,
    // reclaimed only in `fop_release`, after every other file operation.
    unsafe { <Arc<Context> as ForeignOwnable>::borrow((*file).private_data) }
}

unsafe extern "C" fn fop_open(_inode: *mut bindings::inode, file: *mut bindings::file) -> c_int {
    if let Err(e) = pfm_ctxsw::may_open() {
        return e.to_errno();
    }
    match Context::new() {
        Ok(ctx) => {
            // SAFETY: `file` is being opened; we own `private_data`.
            unsafe { (*file).private_data = ctx.into_foreign() as *mut c_void };
            0
        }
        Err(e) => e.to_errno(),
    }
}

unsafe extern "C" fn fop_release(_inode: *mut bindings::inode, file: *mut bindings::file) -> c_int {
    // SAFETY: The last file operation: take back the reference from `fop_open`.
    let ctx = unsafe { <Arc<Context> as ForeignOwnable>::from_foreign((*file).private_data) };
    ctx.close();
    0
}

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

unsafe extern "C" fn fop_poll(
    file: *mut bindings::file,
    table: *mut bindings::poll_table_struct,
) -> c_uint {
    // SAFETY: `file` is an open /dev/perfmon file.
    let ctx = unsafe { file_context(file) };
    // SAFETY: Forwarded from the VFS.
    unsafe { ctx.poll(file, table) }
}

unsafe extern "C" fn fop_fasync(fd: c_int, file: *mut bindings::file, on: c_int) -> c_int {
    // SAFETY: `file` is an open /dev/perfmon file.
    let ctx = unsafe { file_context(file) };
    ctx.fasync(fd, file, on)
}

unsafe extern "C" fn fop_ioctl(file: *mut bindings::file, cmd: c_uint, arg: c_ulong) -> c_long {
    // SAFETY: `file` is an open /dev/perfmon file.
    let ctx = unsafe { file_context(file) };
    let ctx: Arc<Context> = ctx.into();
    match ioctl(&ctx, cmd, arg as usize) {
        Ok(()) => 0,
        Err(e) => e.to_errno() as c_long,
    }
}

/// Splits an ioctl number into (type, nr, size).
const fn ioc_parts(cmd: u32) -> (u32, u32, usize) {
    (
        (cmd >> 8) & 0xff,
        cmd & 0xff,
        ((cmd >> 16) & 0x3fff) as usize,
    )
}

/// Dispatches one ioctl. The command's type and number select the call; a
/// known call with the wrong direction or size is `EINVAL`, an unknown one
/// `ENOTTY`. Every argument is read from user memory exactly once.
fn ioctl(ctx: &Arc<Context>, cmd: u32, arg: usize) -> Result {
    let (ty, nr, _) = ioc_parts(cmd);
    if ty != abi::PFM_IOC_MAGIC {
        return Err(ENOTTY);
    }
    let expected = match nr {
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
        _ => return Err(ENOTTY),
    };
    if cmd != expected {
        return Err(EINVAL);
    }
    let (_, _, size) = ioc_parts(cmd);
    let user = UserSlice::new(arg, size);
    match cmd {
        abi::PFM_IOC_GET_INFO => {
            let mut info = abi::PfmInfo::default();
            info.abi_version = abi::PFM_ABI_VERSION;
            info.size = core::mem::size_of::<abi::PfmInfo>() as u32;
            globals().pmu.describe(&mut info);
            info.vector = globals().intr.vector_of_cpu0();
            user.writer().write(&info)
        }
        abi::PFM_IOC_WRITE_PMCS | abi::PFM_IOC_WRITE_PMDS | abi::PFM_IOC_READ_PMDS => {
            let (mut reader, mut writer) = user.reader_writer();
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
        abi::PFM_IOC_LOAD => {
            let l: abi::PfmLoad = user.reader().read()?;
            ctx.load(&l)
        }
        abi::PFM_IOC_UNLOAD => ctx.unload(),
        abi::PFM_IOC_START => ctx.start(),
        abi::PFM_IOC_STOP => ctx.stop(),
        abi::PFM_IOC_RESTART => ctx.restart(),
        abi::PFM_IOC_GET_STATE => user.writer().write(&ctx.get_state()),
        abi::PFM_IOC_READ_VALUES => {
            let (mut reader, mut writer) = user.reader_writer();
            let mut v: abi::PfmValues = reader.read()?;
            ctx.read_values(&mut v)?;
            writer.write(&v)
        }
        abi::PFM_IOC_SET_FLAGS => {
            let f: abi::PfmCtxFlags = user.reader().read()?;
            ctx.set_flags(&f)
        }
        _ => Err(ENOTTY),
    }
}

/// Answers the `show` of `/sys/kernel/perfmon/*` attribute `attr` (see shim.c).
///
/// # Safety
///
/// `buf` is a sysfs buffer of `PAGE_SIZE` bytes.
#[no_mangle]
unsafe extern "C" fn pfm_sysfs_show(attr: c_uint, buf: *mut c_char) -> isize {
    let g = globals();
    let mut out = SysfsBuf {
        buf: buf.cast(),
        len: 0,
    };
    match attr {
        0 => out.num(abi::PFM_ABI_VERSION as u64),
        1 => out.text(g.pmu.name().as_bytes()),
        2 => out.num(g.live_contexts.load(Ordering::Relaxed) as u64),
        3 => out.num(g.zombies.load(Ordering::Relaxed) as u64),
        4 => out.num(g.attached.load(Ordering::Relaxed) as u64),
        5 => out.num(g.intr.vector_of_cpu0() as u64),
        6 => out.num(g.pmu.width as u64),
        7 => out.num(g.intr.interrupts()),
        8 => out.num(g.pmu.msr_faults.load(Ordering::Relaxed)),
        9 => out.num(g.pmu.full_restores.load(Ordering::Relaxed)),
        10 => out.num(g.pmu.lazy_restores.load(Ordering::Relaxed)),
        11 => out.num(g.pmu.hw_claimed().into()),
        12 => out.num(g.pmu.reserved_counters().into()),
        13 => out.num(g.intr.lvtpc_cpus()),
        _ => return EINVAL.to_errno() as isize,
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
