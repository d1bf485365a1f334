// SPDX-License-Identifier: GPL-2.0

//! The context state machine: one table, free of kernel code so that the host
//! tests check every state against every operation.
//!
//! States follow perfmon2: UNLOADED, LOADED, MASKED (after a notifying
//! overflow, until RESTART) and ZOMBIE (the tool closed the fd while the
//! context was attached to another thread). `Freed` is the end: the context
//! memory may go.

/// Errors an operation can be refused with, mapped to errnos by the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateError {
    /// The operation is not valid in this state (`EBADFD`).
    BadState,
    /// The context is already attached (`EBUSY`).
    Busy,
}

/// Where a context is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Not attached to any thread.
    Unloaded,
    /// Attached to a thread.
    Loaded,
    /// Attached, stopped by a notifying overflow until RESTART.
    Masked,
    /// Attached to another thread whose tool closed the fd: cleaned up lazily.
    Zombie,
    /// Gone: nothing may touch it any more.
    Freed,
}

/// What can happen to a context.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `PFM_IOC_WRITE_PMCS`, `PFM_IOC_WRITE_PMDS`.
    WriteRegs,
    /// `PFM_IOC_READ_PMDS`, `PFM_IOC_GET_STATE`.
    Read,
    /// `PFM_IOC_SET_FLAGS`.
    SetFlags,
    /// `PFM_IOC_LOAD`.
    Load,
    /// `PFM_IOC_UNLOAD`.
    Unload,
    /// `PFM_IOC_START`.
    Start,
    /// `PFM_IOC_STOP`.
    Stop,
    /// `PFM_IOC_RESTART`.
    Restart,
    /// A counter with the notify-block flag overflowed.
    OverflowBlock,
    /// The fd was closed; `remote` when attached to a thread other than the closer.
    Close {
        /// The context is attached to a thread other than the one closing.
        remote: bool,
    },
    /// The monitored thread exited.
    TargetExit,
    /// The zombie's thread (at return to user or exit) or a new attach cleans it up.
    Reap,
    /// The thread gained privileges its loader lacks (a setuid exec): the
    /// monitoring ends, the counts stay.
    Revoke,
    /// A notifying overflow found the message queue full: the context is
    /// masked until RESTART instead of losing the overflow.
    QueueFull,
    /// A LOAD published the attachment but could not hand it to its thread
    /// (the thread is exiting): back to UNLOADED.
    LoadFailed,
}

/// Every operation, for exhaustive tests.
pub const ALL_OPS: [Op; 16] = [
    Op::WriteRegs,
    Op::Read,
    Op::SetFlags,
    Op::Load,
    Op::Unload,
    Op::Start,
    Op::Stop,
    Op::Restart,
    Op::OverflowBlock,
    Op::Close { remote: false },
    Op::Close { remote: true },
    Op::TargetExit,
    Op::Reap,
    Op::Revoke,
    Op::QueueFull,
    Op::LoadFailed,
];

/// Every state, for exhaustive tests.
pub const ALL_STATES: [State; 5] = [
    State::Unloaded,
    State::Loaded,
    State::Masked,
    State::Zombie,
    State::Freed,
];

impl State {
    /// The state after `op`, or why `op` is refused.
    ///
    /// This is the whole table; the module calls it before acting on any
    /// command and acts only on `Ok`. Inline: every caller names its `op`,
    /// and the table folds to the few states that matter for it.
    #[inline]
    pub const fn next(self, op: Op) -> Result<State, StateError> {
        use State::*;
        match (self, op) {
            // Nothing reaches a freed context; a zombie only through the
            // module's own cleanup.
            (Freed, _) => Err(StateError::BadState),
            (Zombie, Op::Reap) | (Zombie, Op::TargetExit) => Ok(Freed),
            (Zombie, _) => Err(StateError::BadState),

            (_, Op::Reap) => Err(StateError::BadState),

            (s, Op::WriteRegs) | (s, Op::Read) => Ok(s),
            (Unloaded, Op::SetFlags) => Ok(Unloaded),
            (_, Op::SetFlags) => Err(StateError::BadState),

            (Unloaded, Op::Load) => Ok(Loaded),
            (_, Op::Load) => Err(StateError::Busy),

            (Unloaded, Op::Unload) => Err(StateError::BadState),
            (_, Op::Unload) => Ok(Unloaded),

            (Loaded, Op::Start) => Ok(Loaded),
            (_, Op::Start) => Err(StateError::BadState),

            (Unloaded, Op::Stop) => Err(StateError::BadState),
            (s, Op::Stop) => Ok(s),

            (Masked, Op::Restart) => Ok(Loaded),
            (_, Op::Restart) => Err(StateError::BadState),

            (Loaded, Op::OverflowBlock) => Ok(Masked),
            (_, Op::OverflowBlock) => Err(StateError::BadState),

            (Unloaded, Op::Close { .. }) => Ok(Freed),
            (_, Op::Close { remote: false }) => Ok(Freed),
            (_, Op::Close { remote: true }) => Ok(Zombie),

            (Unloaded, Op::TargetExit) => Err(StateError::BadState),
            (_, Op::TargetExit) => Ok(Unloaded),

            (Loaded, Op::Revoke) | (Masked, Op::Revoke) => Ok(Unloaded),
            (_, Op::Revoke) => Err(StateError::BadState),

            (Loaded, Op::QueueFull) | (Masked, Op::QueueFull) => Ok(Masked),
            (_, Op::QueueFull) => Err(StateError::BadState),

            (Loaded, Op::LoadFailed) | (Masked, Op::LoadFailed) => Ok(Unloaded),
            (_, Op::LoadFailed) => Err(StateError::BadState),
        }
    }

    /// Whether the context is attached to a thread in this state.
    pub const fn is_attached(self) -> bool {
        matches!(self, State::Loaded | State::Masked | State::Zombie)
    }

    /// The `PFM_STATE_*` value user space sees.
    pub const fn abi_value(self) -> u32 {
        match self {
            State::Unloaded | State::Freed => 1,
            State::Loaded => 2,
            State::Masked => 3,
            State::Zombie => 4,
        }
    }
}

/// A context's state, changed only through the table.
///
/// # Invariants
///
/// Every value `state` takes after `new` is one [`State::next`] returned
/// for the state before it.
#[derive(Debug)]
pub struct Lifecycle {
    state: State,
}

impl Lifecycle {
    /// A new context: UNLOADED.
    pub const fn new() -> Self {
        Self {
            state: State::Unloaded,
        }
    }

    /// The present state.
    pub const fn get(&self) -> State {
        self.state
    }

    /// The state `op` would lead to, without going there.
    pub const fn check(&self, op: Op) -> Result<State, StateError> {
        self.state.next(op)
    }

    /// Goes where the table says `op` leads, or stays and says why not.
    pub fn apply(&mut self, op: Op) -> Result<State, StateError> {
        let next = self.state.next(op)?;
        // INVARIANT: `next` is what the table returned for `self.state`.
        self.state = next;
        Ok(next)
    }
}

impl Default for Lifecycle {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_by_every_op() {
        use State::*;
        use StateError::*;
        // The expected table, written out row by row so that a change to
        // `next` must be a change here too.
        let expect = |s: State, op: Op| -> Result<State, StateError> {
            match s {
                Unloaded => match op {
                    Op::WriteRegs | Op::Read | Op::SetFlags => Ok(Unloaded),
                    Op::Load => Ok(Loaded),
                    Op::Close { .. } => Ok(Freed),
                    _ => Err(BadState),
                },
                Loaded => match op {
                    Op::WriteRegs | Op::Read | Op::Start | Op::Stop => Ok(Loaded),
                    Op::SetFlags | Op::Restart | Op::Reap => Err(BadState),
                    Op::Load => Err(Busy),
                    Op::Unload | Op::TargetExit | Op::Revoke | Op::LoadFailed => Ok(Unloaded),
                    Op::OverflowBlock | Op::QueueFull => Ok(Masked),
                    Op::Close { remote: false } => Ok(Freed),
                    Op::Close { remote: true } => Ok(Zombie),
                },
                Masked => match op {
                    Op::WriteRegs | Op::Read | Op::Stop | Op::QueueFull => Ok(Masked),
                    Op::SetFlags | Op::Start | Op::OverflowBlock | Op::Reap => Err(BadState),
                    Op::Load => Err(Busy),
                    Op::Restart => Ok(Loaded),
                    Op::Unload | Op::TargetExit | Op::Revoke | Op::LoadFailed => Ok(Unloaded),
                    Op::Close { remote: false } => Ok(Freed),
                    Op::Close { remote: true } => Ok(Zombie),
                },
                Zombie => match op {
                    Op::Reap | Op::TargetExit => Ok(Freed),
                    _ => Err(BadState),
                },
                Freed => Err(BadState),
            }
        };
        let mut checked = 0;
        for s in ALL_STATES {
            for op in ALL_OPS {
                assert_eq!(s.next(op), expect(s, op), "{s:?} x {op:?}");
                checked += 1;
            }
        }
        assert_eq!(checked, ALL_STATES.len() * ALL_OPS.len());
    }

    #[test]
    fn nothing_leaves_freed_and_zombies_only_die() {
        for op in ALL_OPS {
            assert!(State::Freed.next(op).is_err());
            if let Ok(s) = State::Zombie.next(op) {
                assert_eq!(s, State::Freed);
            }
        }
    }

    #[test]
    fn lifecycle_moves_only_where_the_table_says() {
        for start in [State::Unloaded, State::Loaded, State::Masked, State::Zombie] {
            for op in ALL_OPS {
                let mut l = Lifecycle::new();
                // Reach `start` through the table itself.
                let path: &[Op] = match start {
                    State::Unloaded => &[],
                    State::Loaded => &[Op::Load],
                    State::Masked => &[Op::Load, Op::OverflowBlock],
                    _ => &[Op::Load, Op::Close { remote: true }],
                };
                for &p in path {
                    assert!(l.apply(p).is_ok());
                }
                assert_eq!(l.get(), start);
                let expect = start.next(op);
                assert_eq!(l.check(op), expect);
                assert_eq!(l.apply(op), expect, "{start:?} x {op:?}");
                // A refused operation leaves the state where it was.
                assert_eq!(l.get(), expect.unwrap_or(start));
            }
        }
    }

    #[test]
    fn abi_values_match_header() {
        assert_eq!(State::Unloaded.abi_value(), 1);
        assert_eq!(State::Loaded.abi_value(), 2);
        assert_eq!(State::Masked.abi_value(), 3);
        assert_eq!(State::Zombie.abi_value(), 4);
    }
}
