// SPDX-License-Identifier: GPL-2.0

//! perfmon: per-thread access to the CPU's performance counters through
//! `/dev/perfmon`, reviving Stephane Eranian's perfmon2 on a modern kernel.
//!
//! This is the crate root: the module, its globals, init and exit, and the
//! wiring of the overflow vectors (`pfm_intr`) to what they serve. The
//! device (file operations, ioctl decoding, sysfs) lives in `pfm_dev`, the
//! context in `pfm_ctx`, the thread side (attach, context switch, cleanup)
//! in `pfm_ctxsw`, the PMU layer in `pfm_x86`, and every call into C in
//! `rust`. `Documentation/perfmon.rst` is the user's manual.

// `pin_init!` of the attachment (many fields) expands deeper than the default.
#![recursion_limit = "256"]

use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

use kernel::bindings;
use kernel::prelude::*;

// The ABI and the pure logic are shared with user space and the host tests
// (`host/`): their items are `pub` there, so they are public modules here,
// and the host tests use what the module does not.
#[path = "include/uapi/linux/perfmon.rs"]
pub mod abi;
#[allow(dead_code)]
pub mod pfm_counter;
mod pfm_ctx;
mod pfm_ctxsw;
mod pfm_dev;
/// Hash indexes of the registry and the processes monitored whole: pure,
/// host-tested.
pub mod pfm_index;
mod pfm_intr;
#[allow(dead_code)]
pub mod pfm_msgq;
#[allow(dead_code)]
pub mod pfm_page;
pub mod pfm_random;
/// Event sets (issue 15): pure, host-tested; not wired into the context yet.
pub mod pfm_sets;
pub mod pfm_smpl;
#[allow(dead_code)]
pub mod pfm_state;
pub mod pfm_x86;
#[path = "rust/mod.rs"]
mod rust;

use pfm_ctx::Context;

/// The thread side, attaching contexts.
type Attachment = pfm_ctxsw::Attachment<Context>;
use pfm_dev::FileOps;
use rust::{new_irq_spinlock, IrqSpinLock};

module! {
    type: PerfmonModule,
    name: "perfmon",
    author: "The perfmon developers",
    description: "Per-thread performance counters through /dev/perfmon (perfmon2 revived)",
    license: "GPL",
    // Autoload on the first open of /dev/perfmon: kmod's static-nodes makes
    // the node at boot from `devname:`, and the kernel asks modprobe for
    // `char-major-10-MINOR` when it is opened (`rust::MISC_MINOR`).
    alias: ["devname:perfmon", "char-major-10-249"],
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

/// Most threads attached at once, system-wide (the registry's slots). A
/// LOAD beyond it fails with `ENOSPC`.
pub(crate) const MAX_ATTACHED: usize = 4096;

/// State shared by every context, alive from `init` to `drop` of the module.
#[pin_data]
pub(crate) struct Globals {
    /// The PMU model chosen at load.
    pub(crate) pmu: pfm_x86::Pmu,
    /// Init is complete: `open` creates contexts (refused with `ENODEV`
    /// until then, while the device exists but the exec watch does not).
    pub(crate) ready: AtomicBool,
    /// Contexts alive (open fds and zombies).
    pub(crate) live_contexts: AtomicUsize,
    /// Contexts in ZOMBIE state.
    pub(crate) zombies: AtomicUsize,
    /// Attachments alive (threads with a notifier or one pending).
    pub(crate) attached: AtomicUsize,
    /// Families whose monitored threads' new threads join them: while 0,
    /// the fork probe returns at once.
    pub(crate) inheriting: AtomicUsize,
    /// Contexts waiting for their thread's exec (`PFM_CTXFL_START_ON_EXEC`):
    /// while 0, the exec probe returns at once.
    pub(crate) exec_armed: AtomicUsize,
    /// Every attachment, by thread.
    #[pin]
    pub(crate) registry: IrqSpinLock<pfm_ctxsw::Registry<Context>>,
    /// The processes monitored whole (`PFM_LOAD_PROCESS`), by process;
    /// taken under a family's mutex at most, nothing taken under it.
    #[pin]
    pub(crate) processes: IrqSpinLock<pfm_ctxsw::Processes<Context>>,
    /// Where attachments finish in process context: their final drop, a
    /// dead thread's unregistering (its workqueue set by
    /// [`ReapQueueInstalled`]).
    #[pin]
    pub(crate) reaper: rust::WorkList<Attachment>,
    /// Woken when an attachment leaves the registry: a LOAD waiting for a
    /// thread to run the cleanups of its earlier contexts retries then.
    #[pin]
    pub(crate) retired: rust::WaitQueue,
    /// `kernel.perf_event_paranoid` and Yama's `ptrace_scope`, opened at
    /// load (`pfm_ctxsw/access.rs`).
    pub(crate) paranoid: rust::SysctlFile,
    pub(crate) ptrace_scope: rust::SysctlFile,
    /// `kernel.perf_event_mlock_kb`, opened at load: the free allowance
    /// of locked memory sampling buffers share with perf's rings
    /// (`pfm_ctx/smpl.rs`).
    pub(crate) mlock_kb: rust::SysctlFile,
    /// The overflow vectors.
    pub(crate) intr: pfm_intr::Vectors<Attachment>,
    /// Where contexts are allocated: a cache of their exact size (see
    /// `rust/slab.rs`). Destroyed with the globals, after every context
    /// (each holds a module reference, through its file or attachment).
    pub(crate) contexts: rust::SlabCache<Context>,
}

static GLOBALS: AtomicPtr<Globals> = AtomicPtr::new(core::ptr::null_mut());

/// The module's shared state.
pub(crate) fn globals() -> &'static Globals {
    // Set in `init` (`Published`) before anything that can call here
    // exists, and cleared at exit after all of it is gone: the device,
    // sysfs, the vectors, the ticks and the multiplexing timers, the
    // reaper, and every attachment and context (each holds a module
    // reference, directly or through its file).
    // SAFETY: So every caller sees a pointer to the live `Globals`.
    unsafe { &*GLOBALS.load(Ordering::Acquire) }
}

/// `THIS_MODULE`.
pub(crate) fn this_module() -> *mut bindings::module {
    // Only the address of the module's own `struct module` is taken.
    core::ptr::addr_of_mut!(bindings::__this_module)
}

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
        // SAFETY: `wq` lives in `self`; `drop` runs when no attachment is
        // left to push, quiesces the list, destroys `wq`, then sets null.
        unsafe { globals().reaper.set_queue(wq.as_ptr()) };
        Ok(Self(Some(wq)))
    }
}

impl Drop for ReapQueueInstalled {
    fn drop(&mut self) {
        // Every attachment has been released (each held a module
        // reference), but a push may still be on its way to queueing the
        // work, and the reaper may still be in the last one's drop, past
        // its `module_put`: wait for the first, then destroying drains the
        // queue. Only then is the pointer cleared.
        globals().reaper.quiesce();
        globals().reaper.flush();
        drop(self.0.take());
        // SAFETY: Null: nothing is pushed any more (see above).
        unsafe { globals().reaper.set_queue(core::ptr::null_mut()) };
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
        // No context is left to arm a multiplexing or task-clock timer;
        // one left armed would fire after the globals are gone.
        g.pmu.mux_cancel_all();
        g.pmu.clock_cancel_all();
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
    fn vector_withheld(cpu: u32) -> bool {
        globals().pmu.is_sim() && i64::from(rust::param_sim_no_vector_cpu()) == i64::from(cpu)
    }
}

/// This CPU's multiplexing timer fired (hard IRQ): the context whose
/// counters are on its PMU switches event sets if its active set's time
/// is up. The timer is the PMU layer's, per CPU; its owner is found as a
/// PMI finds it.
fn mux_fired() {
    let owner = <Attachment as pfm_intr::Wiring>::pmu_owner_here();
    if !owner.is_null() {
        // SAFETY: The PMU layer's owner of this CPU, read in hard IRQ
        // (interrupts off): its holder clears it, on this CPU with
        // interrupts off, before it can go away.
        unsafe { &*owner }.hw_mux();
    }
}

/// This CPU's task-clock timer fired (hard IRQ): the thread running here
/// reached its next task-clock overflow. Its owner is found as the
/// multiplexing timer's is.
fn clock_fired() {
    let owner = globals().pmu.clock_owner_here().cast::<Attachment>();
    if !owner.is_null() {
        // SAFETY: The PMU layer's task-clock owner of this CPU, read in
        // hard IRQ (interrupts off): its holder clears it, on this CPU
        // with interrupts off, before it can go away.
        unsafe { &*owner }.clock_due();
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
    /// The fork and exec tracepoints' probes (inheritance, start on exec),
    /// gone with the exec watch, for the same reason.
    _task_probes: rust::TaskProbes,
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

/// The PMU model the `pmu=`, `soft_width=` and `soft_counters=` parameters ask for, and why
/// it was picked; the reason for a refusal goes to the kernel log.
fn select_pmu() -> Result<(pfm_x86::Pmu, &'static str)> {
    let name = rust::param_pmu();
    let soft = pfm_x86::SoftParams {
        width: rust::param_soft_width(),
        counters: rust::param_soft_counters(),
    };
    match pfm_x86::Pmu::select(name.as_bytes(), soft, mux_fired, clock_fired) {
        Ok(p) => Ok(p),
        Err(pfm_x86::ProbeError::NoHardware(msg)) => {
            pr_err!("{msg}: refusing to load (try pmu=soft or pmu=auto)\n");
            Err(ENODEV)
        }
        Err(pfm_x86::ProbeError::NoMemory) => Err(ENOMEM),
        Err(pfm_x86::ProbeError::BadParam) => {
            pr_err!("invalid parameters: pmu=auto|soft|intel_arch|amd64|intel_arch_sim, soft_width=16..64, soft_counters=1..4\n");
            Err(EINVAL)
        }
    }
}

impl kernel::Module for PerfmonModule {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        if let Some((entry, c, r)) = rust::layout_mismatch() {
            pr_err!(
                "kernel structure layout differs between C and the Rust bindings (entry {entry}: {c} vs {r}); bindgen's libclang must match the compiler: refusing to load\n"
            );
            return Err(ENOEXEC);
        }
        let (pmu, why) = select_pmu()?;

        // Plain memory first: a failure frees what was allocated, nothing else.
        // LVTPC from load on only for the soft model on a CPU without a PMU;
        // a hardware model takes it while it holds the counters.
        let intr = pfm_intr::Vectors::new(pmu.hw.is_none() && !pfm_x86::cpu_has_pmu())?;
        let registry = pfm_ctxsw::Registry::<Context>::new()?;
        let processes = pfm_ctxsw::Processes::<Context>::new()?;
        let contexts = rust::SlabCache::new(kernel::c_str!("perfmon_context"))?;
        let globals = KBox::pin_init(
            pin_init!(Globals {
                pmu,
                ready: AtomicBool::new(false),
                live_contexts: AtomicUsize::new(0),
                zombies: AtomicUsize::new(0),
                attached: AtomicUsize::new(0),
                inheriting: AtomicUsize::new(0),
                exec_armed: AtomicUsize::new(0),
                registry <- new_irq_spinlock!(registry, "perfmon_registry"),
                processes <- new_irq_spinlock!(processes, "perfmon_processes"),
                reaper <- rust::WorkList::new(),
                retired <- rust::WaitQueue::new(),
                paranoid: rust::SysctlFile::open(kernel::c_str!(
                    "/proc/sys/kernel/perf_event_paranoid"
                )),
                ptrace_scope: rust::SysctlFile::open(kernel::c_str!(
                    "/proc/sys/kernel/yama/ptrace_scope"
                )),
                mlock_kb: rust::SysctlFile::open(kernel::c_str!(
                    "/proc/sys/kernel/perf_event_mlock_kb"
                )),
                intr,
                contexts,
            }),
            GFP_KERNEL,
        )?;
        let fops = KBox::pin(FileOps::new(), GFP_KERNEL)?;

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
        let task_probes = rust::TaskProbes::register(
            pfm_ctxsw::fork_probe::<Context>,
            pfm_ctxsw::exec_probe::<Context>,
            pfm_ctxsw::rename_probe::<Context>,
            pfm_ctxsw::exit_probe::<Context>,
        )
        .inspect_err(|_| {
            pr_err!(
                "no sched_process_fork/exec/exit tracepoints (CONFIG_TRACEPOINTS): refusing to load\n"
            )
        })?;
        // SAFETY: `fops` is pinned in the module object and dropped after
        // the registration (field order of `PerfmonModule`).
        let misc = unsafe { rust::MiscRegistration::register(fops.table()) }?;
        // The exec watch last, once nothing can fail: a failed init frees
        // the module's text, and `unregister_binfmt` does not wait for an
        // exec already in the hook. The device refuses `open` until then
        // (`ready`), so no attachment exists that an exec could miss.
        let exec_watch = rust::ExecWatch::register();
        globals.ready.store(true, Ordering::Release);
        pr_info!(
            "PMU model {} ({} bits): {}\n",
            globals.pmu.name(),
            globals.pmu.width,
            why
        );
        Ok(PerfmonModule {
            _misc: misc,
            _exec_watch: exec_watch,
            _task_probes: task_probes,
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

/// Every `execve()` (`rust/shim.c`'s exec watch), in the execing thread,
/// before the new image is loaded (see `pfm_ctxsw::exec_hook`).
#[no_mangle]
extern "C" fn pfm_exec_hook() {
    pfm_ctxsw::exec_hook::<Context>();
}
