// SPDX-License-Identifier: GPL-2.0

//! What the thread side asks of a context: the one interface between the
//! two (see `pfm_ctxsw`).

use kernel::prelude::*;
use kernel::sync::Arc;

use super::{Attachment, Installed, Processes, Registry, Verdict};
use crate::rust::{InSlab, IrqSpinLock, WorkList};

/// What the thread side asks of the context it attaches. Every method
/// takes the context's lock itself, once; those given an attachment act
/// only if it is still the context's own.
pub(crate) trait Monitor: InSlab + Send + Sync + Sized + 'static {
    /// The registry of this kind's attachments.
    fn registry() -> &'static IrqSpinLock<Registry<Self>>;
    /// Where attachments finish in process context (the reap workqueue).
    fn reaper() -> &'static WorkList<Attachment<Self>>;
    /// The thread was switched in on `cpu` (scheduler callback).
    fn switched_in(&self, cpu: i32);
    /// The thread is switched out (scheduler callback); `dead`: for the
    /// last time. `att` was still wanted when the switch began.
    fn switched_out(&self, att: &Attachment<Self>, dead: bool, wanted: bool);
    /// Takes the counters off this CPU's PMU if `owner` put them there.
    fn drop_hw_here(&self, owner: *const ());
    /// A PMI of this CPU's PMU, which holds the context's counters.
    fn hw_pmi(&self);
    /// The multiplexing timer of this CPU, whose PMU holds the context's
    /// counters: the active event set's time may be up.
    fn hw_mux(&self);
    /// The task-clock timer of this CPU, armed for `owner` (the
    /// context's attachment) while its thread runs here: its next
    /// task-clock overflow is due (hard IRQ, the thread interrupted).
    fn clock_due(&self, owner: *const ());
    /// The overflow interrupt; whether the thread must block until RESTART.
    fn overflow_interrupt(&self) -> bool;
    /// Wakes readers, pollers, SIGIO owners and a blocked thread.
    fn wake(&self);
    /// In the thread, on its way to user mode: starts following it
    /// (`register` runs under the lock) unless `verdict` ends it.
    fn install(
        &self,
        att: &Attachment<Self>,
        verdict: Verdict,
        register: impl FnOnce(),
    ) -> Installed;
    /// The thread lost the loader's access in a scheduler callback.
    fn revoke(&self, att: &Attachment<Self>);
    /// The thread entered an exec its loader may not be allowed to see.
    fn exec_begin(&self, att: &Attachment<Self>);
    /// The exec's credentials are checked (`lost`: the loader lost access):
    /// whether overflows held back during it are pending.
    fn exec_end(&self, att: &Attachment<Self>, lost: bool) -> bool;
    /// An exec's credentials are not checked yet.
    fn exec_unchecked(&self) -> bool;
    /// Blocks the calling (monitored) thread while masked.
    fn block_until_restart(&self, still_wanted: impl Fn() -> bool);
    /// Frees the context if it is a zombie.
    fn reap_zombie(&self);
    /// Gives up `att` if it is the context's: the context's reference.
    fn forget(&self, att: &Attachment<Self>) -> Option<Arc<Attachment<Self>>>;
    /// LOAD's last step, registry locked: the context takes `att` for
    /// thread `tid` if its state allows and `claim` succeeds, monitoring
    /// starting in event set `load_set`; `install` runs under the lock for
    /// a thread monitoring itself. Returns the attachment it replaces.
    fn publish(
        &self,
        att: &Arc<Attachment<Self>>,
        tid: u32,
        load_set: u16,
        claim: impl FnOnce() -> Result,
        install: Option<&dyn Fn()>,
    ) -> Result<Option<Arc<Attachment<Self>>>>;
    /// A published LOAD could not reach its thread: back to UNLOADED.
    fn load_failed(&self, att: &Attachment<Self>);
    /// A whole program's family: what a new thread of a monitored one
    /// joins.
    type Lineage: Send + Sync + 'static;
    /// The family a new thread of this context's thread joins, if the
    /// context inherits.
    fn lineage(&self) -> Option<Arc<Self::Lineage>>;
    /// The processes monitored whole (`PFM_LOAD_PROCESS`).
    fn processes() -> &'static IrqSpinLock<Processes<Self>>;
    /// In a new thread (current), before its first instruction in user
    /// mode: it joins `lineage`.
    fn adopt_current(lineage: &Arc<Self::Lineage>);
    /// A new thread could not be handed to `lineage`.
    fn lost_one(lineage: &Arc<Self::Lineage>);
    /// Whether the context waits for its thread's exec to start.
    fn exec_armed(&self) -> bool;
    /// Its thread completed an exec (in the thread, before the new
    /// image's first instruction): start if it waits for it.
    fn start_on_exec(&self);
    /// Its thread's exec passed the point where perf enables
    /// `enable_on_exec` events (in the thread, preemption disabled, under
    /// its `alloc_lock`): start counting it there if the context waits for
    /// the exec; [`Monitor::start_on_exec`] follows.
    fn exec_committed(&self);
}
