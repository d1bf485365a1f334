// SPDX-License-Identifier: GPL-2.0

//! ptrace's read rule, as perf_event_open applies it to an observer
//! without CAP_PERFMON: `__ptrace_may_access(task,
//! PTRACE_MODE_READ_REALCREDS)` (kernel/ptrace.c) and the capability half
//! every kernel runs after it, `cap_ptrace_access_check`
//! (security/commoncap.c), decided on credentials as plain facts.
//!
//! The module cannot call either function (neither is exported), and it
//! must decide again, for a loader that may be gone, each time the
//! monitored thread's credentials change: at a context switch, in an
//! overflow interrupt, after an exec, for every thread inheritance adds.
//! So the rule is written once here over values, with the loader's
//! credentials as kept since LOAD, and no kernel import: the host tests
//! run it on namespace trees of their own.
//!
//! The LSM hooks (`security_ptrace_access_check` beyond commoncap) are not
//! reachable from a module; Yama's setting is applied by the caller.

/// `CAP_SYS_PTRACE` (include/uapi/linux/capability.h).
pub(crate) const CAP_SYS_PTRACE: u32 = 19;

/// `SUID_DUMP_USER` (include/linux/sched/coredump.h): the mm may be dumped
/// by its owner.
pub(crate) const SUID_DUMP_USER: u32 = 1;

/// A user namespace, as `cap_capable` walks them.
pub(crate) trait UserNs: Copy + PartialEq {
    /// Its depth: 0 for the initial namespace.
    fn level(self) -> u32;
    /// The namespace it was created in (`None` for the initial one).
    fn parent(self) -> Option<Self>;
    /// The kuid of its creator (`owner`).
    fn owner(self) -> u32;
}

/// What the rule reads of a `struct cred`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Creds<N> {
    /// uid, euid, suid (kuids: the same in every namespace).
    pub(crate) uids: [u32; 3],
    /// gid, egid, sgid.
    pub(crate) gids: [u32; 3],
    /// `cap_permitted`.
    pub(crate) permitted: u64,
    /// `cap_effective`.
    pub(crate) effective: u64,
    /// `user_ns`.
    pub(crate) user_ns: N,
}

/// What the rule reads of the target's mm: `get_dumpable(mm)` and
/// `mm->user_ns`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MmFacts<N> {
    pub(crate) dumpable: u32,
    pub(crate) user_ns: N,
}

/// Why the rule refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The target's uids and gids are not all the observer's real ones,
    /// and the observer lacks CAP_SYS_PTRACE in the target's namespace.
    Ids,
    /// The target is not dumpable (a setuid image, or one that changed
    /// credentials), or has no mm, and the observer lacks CAP_SYS_PTRACE
    /// in the mm's namespace.
    Dumpable,
    /// commoncap: the target's permitted capabilities are not a subset of
    /// the observer's, or it lives in another user namespace, and the
    /// observer lacks CAP_SYS_PTRACE in the target's namespace.
    Capabilities,
}

/// `cap_capable(cred, target, cap)`: whether `cred` has `cap` in the
/// namespace `target`: raised in its effective set if `target` is its
/// own namespace; every capability if it created `target` or one of
/// `target`'s ancestors below its own; nothing in namespaces at or above
/// its own level otherwise.
pub(crate) fn ns_capable<N: UserNs>(cred: &Creds<N>, target: N, cap: u32) -> bool {
    let mut ns = target;
    loop {
        if ns == cred.user_ns {
            return cap < 64 && cred.effective & (1 << cap) != 0;
        }
        if ns.level() <= cred.user_ns.level() {
            return false;
        }
        let Some(parent) = ns.parent() else {
            return false;
        };
        if parent == cred.user_ns && ns.owner() == cred.uids[1] {
            return true;
        }
        ns = parent;
    }
}

/// Whether `observer` may read `target` (another process's thread; a
/// thread of the observer's own process always may), whose mm is `mm`
/// (`None`: no mm, which only a privileged observer may see, as
/// `task_still_dumpable` decides for a thread that is not
/// `user_dumpable`).
pub(crate) fn may_read<N: UserNs>(
    observer: &Creds<N>,
    target: &Creds<N>,
    mm: Option<MmFacts<N>>,
) -> Result<(), Refusal> {
    let ptrace_cap_in = |ns: N| ns_capable(observer, ns, CAP_SYS_PTRACE);
    // PTRACE_MODE_REALCREDS: the observer's real uid and gid against all
    // three of the target's.
    let (uid, gid) = (observer.uids[0], observer.gids[0]);
    let same_ids = target.uids.iter().all(|&u| u == uid) && target.gids.iter().all(|&g| g == gid);
    if !same_ids && !ptrace_cap_in(target.user_ns) {
        return Err(Refusal::Ids);
    }
    let dumpable = match mm {
        Some(mm) => mm.dumpable == SUID_DUMP_USER || ptrace_cap_in(mm.user_ns),
        None => false,
    };
    if !dumpable {
        return Err(Refusal::Dumpable);
    }
    // cap_ptrace_access_check, PTRACE_MODE_READ: the caller's permitted set.
    let subset = target.permitted & !observer.permitted == 0;
    if !(observer.user_ns == target.user_ns && subset) && !ptrace_cap_in(target.user_ns) {
        return Err(Refusal::Capabilities);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A namespace tree: index 0 is the initial namespace; each entry is
    /// (parent, owner).
    #[derive(Clone, Copy, Debug, PartialEq)]
    struct Ns(&'static [(usize, u32)], usize);

    impl UserNs for Ns {
        fn level(self) -> u32 {
            let mut l = 0;
            let mut i = self.1;
            while i != 0 {
                i = self.0[i].0;
                l += 1;
            }
            l
        }
        fn parent(self) -> Option<Self> {
            (self.1 != 0).then_some(Ns(self.0, self.0[self.1].0))
        }
        fn owner(self) -> u32 {
            self.0[self.1].1
        }
    }

    /// init (0); 1 and 2 created by uid 1000 in init; 3 by uid 1000 in 1.
    const TREE: &[(usize, u32)] = &[(0, 0), (0, 1000), (0, 1000), (1, 1000)];
    const INIT: Ns = Ns(TREE, 0);

    fn user(uid: u32, ns: Ns) -> Creds<Ns> {
        Creds {
            uids: [uid; 3],
            gids: [uid; 3],
            permitted: 0,
            effective: 0,
            user_ns: ns,
        }
    }

    fn dumpable(ns: Ns) -> Option<MmFacts<Ns>> {
        Some(MmFacts {
            dumpable: SUID_DUMP_USER,
            user_ns: ns,
        })
    }

    const NET_RAW: u64 = 1 << 13;
    const PTRACE: u64 = 1 << CAP_SYS_PTRACE;

    #[test]
    fn same_user_without_capabilities_may_read() {
        let u = user(1000, INIT);
        assert_eq!(may_read(&u, &u, dumpable(INIT)), Ok(()));
    }

    #[test]
    fn another_user_needs_sys_ptrace() {
        let me = user(1000, INIT);
        let other = user(1001, INIT);
        assert_eq!(may_read(&me, &other, dumpable(INIT)), Err(Refusal::Ids));
        let tracer = Creds {
            permitted: PTRACE,
            effective: PTRACE,
            ..me
        };
        assert_eq!(may_read(&tracer, &other, dumpable(INIT)), Ok(()));
        // Permitted but not effective: ns_capable reads the effective set.
        let dormant = Creds {
            permitted: PTRACE,
            ..me
        };
        assert_eq!(
            may_read(&dormant, &other, dumpable(INIT)),
            Err(Refusal::Ids)
        );
    }

    #[test]
    fn one_differing_id_refuses() {
        let me = user(1000, INIT);
        let mut t = user(1000, INIT);
        t.uids[2] = 0; // a saved uid of root
        assert_eq!(may_read(&me, &t, dumpable(INIT)), Err(Refusal::Ids));
        let mut t = user(1000, INIT);
        t.gids[1] = 5;
        assert_eq!(may_read(&me, &t, dumpable(INIT)), Err(Refusal::Ids));
    }

    #[test]
    fn target_holding_a_capability_the_observer_lacks() {
        let me = user(1000, INIT);
        let daemon = Creds {
            permitted: NET_RAW,
            effective: NET_RAW,
            ..me
        };
        assert_eq!(
            may_read(&me, &daemon, dumpable(INIT)),
            Err(Refusal::Capabilities)
        );
        // The observer holding it too (permitted is enough, in READ mode).
        let peer = Creds {
            permitted: NET_RAW,
            ..me
        };
        assert_eq!(may_read(&peer, &daemon, dumpable(INIT)), Ok(()));
        // A superset of the observer's: still refused.
        let more = Creds {
            permitted: NET_RAW | 1,
            ..me
        };
        assert_eq!(
            may_read(&peer, &more, dumpable(INIT)),
            Err(Refusal::Capabilities)
        );
    }

    #[test]
    fn not_dumpable_or_no_mm() {
        let me = user(1000, INIT);
        let mm = Some(MmFacts {
            dumpable: 0,
            user_ns: INIT,
        });
        assert_eq!(may_read(&me, &me, mm), Err(Refusal::Dumpable));
        assert_eq!(may_read(&me, &me, None), Err(Refusal::Dumpable));
    }

    #[test]
    fn observer_in_a_child_namespace_cannot_read_outside() {
        // Same kuid, full capabilities inside its own new namespace.
        let inside = Creds {
            permitted: u64::MAX >> 23,
            effective: u64::MAX >> 23,
            ..user(1000, Ns(TREE, 1))
        };
        let outside = user(1000, INIT);
        assert_eq!(
            may_read(&inside, &outside, dumpable(INIT)),
            Err(Refusal::Capabilities)
        );
        // Nor in a sibling namespace of the same owner.
        let sibling = user(1000, Ns(TREE, 2));
        assert_eq!(
            may_read(&inside, &sibling, dumpable(Ns(TREE, 2))),
            Err(Refusal::Capabilities)
        );
        // But in its own namespace, and in one it created.
        let own = user(1000, Ns(TREE, 1));
        assert_eq!(may_read(&inside, &own, dumpable(Ns(TREE, 1))), Ok(()));
        let grandchild = Creds {
            permitted: NET_RAW,
            ..user(1000, Ns(TREE, 3))
        };
        assert_eq!(
            may_read(&inside, &grandchild, dumpable(Ns(TREE, 3))),
            Ok(())
        );
    }

    #[test]
    fn creator_outside_may_read_into_its_namespace() {
        // The namespace's owner in the parent has every capability in it,
        // as ptrace allows.
        let creator = user(1000, INIT);
        let inside = Creds {
            permitted: u64::MAX >> 23,
            ..user(1000, Ns(TREE, 1))
        };
        assert_eq!(may_read(&creator, &inside, dumpable(Ns(TREE, 1))), Ok(()));
        // Another user of the parent is not its owner.
        let stranger = user(1001, INIT);
        assert_eq!(
            may_read(&stranger, &inside, dumpable(Ns(TREE, 1))),
            Err(Refusal::Ids)
        );
    }

    #[test]
    fn ns_capable_walk() {
        let root = Creds {
            effective: PTRACE,
            ..user(0, INIT)
        };
        for i in 0..TREE.len() {
            assert!(ns_capable(&root, Ns(TREE, i), CAP_SYS_PTRACE));
        }
        let owner = user(1000, INIT);
        assert!(!ns_capable(&owner, INIT, CAP_SYS_PTRACE));
        assert!(ns_capable(&owner, Ns(TREE, 1), CAP_SYS_PTRACE));
        assert!(ns_capable(&owner, Ns(TREE, 3), CAP_SYS_PTRACE));
        let deep = user(1000, Ns(TREE, 3));
        assert!(!ns_capable(&deep, Ns(TREE, 1), CAP_SYS_PTRACE));
        assert!(!ns_capable(&root, INIT, 64));
    }
}
