// SPDX-License-Identifier: GPL-2.0

//! Who may monitor whom: perf_event_open's rules, on what a module can
//! reach (`ptrace_may_access`, the LSM hooks and `perf_event_paranoid`
//! are not exported to modules in 6.12).

use kernel::bindings;
use kernel::prelude::*;
use kernel::task::Task;

use super::ptrace_rule::{self, Creds, MmFacts, UserNs};
use crate::globals;
use crate::rust::{self as glue, CredFacts, CredRef, MmRef, UserNsRef};

/// What a LOAD was allowed, as checked: handed to the attachment.
pub(super) struct Access {
    /// Who loads.
    pub(super) loader: Loader,
    /// The target's real credentials as checked (`None` if the loader is
    /// privileged, or nothing was checked yet: the first check then
    /// compares everything).
    pub(super) cred: Option<CredRef>,
}

/// Who loads: what every attachment a LOAD makes is charged to and
/// decided for, the LOAD's own and those of the threads inheritance adds,
/// for as long as they last (the loader itself may be gone by then).
#[derive(Clone)]
pub(crate) struct Loader {
    /// The loader's credentials at LOAD, referenced, if it is not
    /// privileged: ptrace's rule is decided again against these whenever
    /// a monitored thread's credentials change.
    pub(super) cred: Option<CredRef>,
    /// The loader's real uid (the per-user limit's account).
    pub(super) owner_uid: u32,
}

/// The calling thread as a loader.
pub(crate) fn loader() -> Result<Loader> {
    let me = kernel::current!();
    let cred = CredRef::of_task(&me)?;
    let owner_uid = cred.ids().uids[0];
    let privileged = glue::capable(bindings::CAP_PERFMON)
        || glue::capable(bindings::CAP_SYS_ADMIN)
        || glue::capable(bindings::CAP_SYS_PTRACE);
    Ok(Loader {
        cred: (!privileged).then_some(cred),
        owner_uid,
    })
}

impl UserNs for UserNsRef<'_> {
    fn level(self) -> u32 {
        UserNsRef::level(self)
    }
    fn parent(self) -> Option<Self> {
        UserNsRef::parent(self)
    }
    fn owner(self) -> u32 {
        UserNsRef::owner(self)
    }
}

/// A cred's facts as the rule takes them.
fn creds(f: CredFacts<'_>) -> Creds<UserNsRef<'_>> {
    Creds {
        uids: f.ids.uids,
        gids: f.ids.gids,
        permitted: f.permitted,
        effective: f.effective,
        user_ns: f.user_ns,
    }
}

/// Whether `loader` may monitor a thread whose real credentials are
/// `target` and whose mm is `mm` (`get_dumpable` and its user namespace):
/// ptrace's read rule in full ([`ptrace_rule::may_read`]): ids, dumpable,
/// and commoncap's capability and user namespace test.
pub(super) fn allows(
    loader: &CredRef,
    target: CredFacts<'_>,
    mm: Option<(u32, UserNsRef<'_>)>,
) -> bool {
    let mm = mm.map(|(dumpable, user_ns)| MmFacts { dumpable, user_ns });
    ptrace_rule::may_read(&creds(loader.facts()), &creds(target), mm).is_ok()
}

/// Whether the caller may monitor `task` (itself included): perf_events'
/// rule (`ptrace_may_access(task, PTRACE_MODE_READ_REALCREDS)`, or
/// CAP_PERFMON / CAP_SYS_ADMIN). `ptrace_may_access` is not exported to
/// modules, so its rule is applied here ([`allows`]): the same thread
/// group, or the caller's real uid/gid equal to all of the target's
/// uids/gids, the target dumpable, its permitted capabilities a subset of
/// the caller's and its user namespace the caller's (else CAP_SYS_PTRACE
/// in the target's namespace, as commoncap requires); CAP_SYS_PTRACE in
/// the initial user namespace allows everything.
///
/// The caller holds the target's `exec_update_lock` (or is the target), so
/// what is checked is what an exec would have to change afterwards, and
/// the attachment then watches for exactly that. `Err(EACCES)`: refused
/// (perf_event_open's errno for the same observer and target).
pub(super) fn may_monitor(task: &Task) -> Result<Access> {
    let loader = loader()?;
    let Some(mine) = &loader.cred else {
        return Ok(Access { loader, cred: None });
    };
    // SAFETY: `task` is referenced (we hold a reference to it).
    let same_process = unsafe { glue::same_thread_group_as_current(glue::task_ptr(task)) };
    let tcred = CredRef::of_task(task)?;
    if !same_process {
        yama_allows(task)?;
        let mm = MmRef::of_task(task);
        if !allows(mine, tcred.facts(), mm.as_ref().map(MmRef::facts)) {
            return Err(EACCES);
        }
    }
    Ok(Access {
        loader,
        cred: Some(tcred),
    })
}

/// Whether the caller may monitor `task`, checked ahead of a LOAD (which
/// checks again): `PFM_LOAD_PROCESS` lists the process, so that its new
/// threads join, only once the loader may see it.
pub(crate) fn may_load(task: &Task) -> Result {
    may_monitor(task).map(drop)
}

/// `kernel.perf_event_paranoid` as perf applies it when a context is
/// created (`open`): above 2 (Debian's default 3), only CAP_SYS_ADMIN may
/// (`EACCES`, as perf_event_open). Levels 2 and below need nothing more
/// here: kernel-mode counting is refused to callers without CAP_PERFMON
/// at every level (`Pmu::caller_policy`), as perf does from level 2 on.
/// Unreadable (no /proc in the root of `insmod`, then none in the
/// caller's): treated as 3.
pub(crate) fn may_open() -> Result {
    // A privileged caller may at every level: the setting is not read
    // (a sysctl read formats and parses the number, about 1,000 of the
    // 12,100 instructions of a remote attach cycle, `make bench-profile`).
    // Unaudited: a refusal here is not the verdict.
    if glue::sys_admin_capable_noaudit() {
        return Ok(());
    }
    let paranoid = read_paranoid().ok().flatten().unwrap_or(3);
    if paranoid > 2 && !glue::sys_admin_capable() {
        return Err(EACCES);
    }
    Ok(())
}

/// `kernel.perf_event_paranoid` (see [`glue::SysctlFile`]).
fn read_paranoid() -> Result<Option<i32>> {
    globals().paranoid.read()
}

/// Yama's `ptrace_scope` for an unprivileged LOAD of another process's
/// thread, since the ptrace access check perf calls (LSM hooks included)
/// is not exported to modules: 1 allows descendants only, 2 and 3 nobody
/// without privileges (`EPERM`, as ptrace). Without Yama, nothing more;
/// with Yama but its setting unreadable (no /proc in the caller's root),
/// as 3. Stricter than Yama: its `PR_SET_PTRACER` exceptions are not
/// honoured.
fn yama_allows(task: &Task) -> Result {
    match globals().ptrace_scope.read() {
        Ok(Some(0)) => Ok(()),
        // No Yama, if /proc/sys answers at all (perf's own setting is
        // always there); no /proc in the caller's root tells nothing.
        Ok(None) if matches!(read_paranoid(), Ok(Some(_))) => Ok(()),
        // SAFETY: `task` is referenced by the caller.
        Ok(Some(1)) if unsafe { glue::is_descendant_of_current(glue::task_ptr(task)) } => Ok(()),
        // Yama is there but unreadable from here: the strictest reading.
        Ok(_) | Err(_) => Err(EPERM),
    }
}
