// SPDX-License-Identifier: GPL-2.0

//! The kernel module's pure files, compiled on the host so that `cargo test`
//! runs their `#[cfg(test)]` modules and the simulator tests in `tests/`.
//!
//! The module tree mirrors the kernel crate's: `abi`, `pfm_state`,
//! `pfm_counter`, `pfm_random`, `pfm_msgq`, `pfm_page`, `pfm_sets`,
//! `pfm_index` and `ptrace_rule` at the root, the hardware models under
//! `pfm_x86`, so the files' `crate::` and `super::` paths mean the same
//! thing in both.

// `core` only, as in the kernel; the tests link std.
#![cfg_attr(not(test), no_std)]

#[path = "../../include/uapi/linux/perfmon.rs"]
pub mod abi;

#[path = "../../pfm_state.rs"]
pub mod pfm_state;

#[path = "../../pfm_counter.rs"]
pub mod pfm_counter;

#[path = "../../pfm_random.rs"]
pub mod pfm_random;

#[path = "../../pfm_msgq.rs"]
pub mod pfm_msgq;

#[path = "../../pfm_smpl.rs"]
pub mod pfm_smpl;

/// The PMU models: the soft model and the x86 hardware models (the
/// kernel-free part of `pfm_x86.rs`).
#[path = "../../pfm_x86"]
pub mod pfm_x86 {
    pub mod amd64;
    pub mod claim;
    pub mod driver;
    pub mod intel_arch;
    pub mod intel_sim;
    pub mod model;
    pub mod soft;
    pub mod throttle;
}

#[path = "../../pfm_page.rs"]
pub mod pfm_page;

#[path = "../../pfm_sets.rs"]
pub mod pfm_sets;

#[path = "../../pfm_index.rs"]
pub mod pfm_index;

/// ptrace's read rule (the kernel-free part of `pfm_ctxsw/access.rs`).
/// Its items are `pub(crate)` for the module's other files; here only its
/// own tests use them.
#[path = "../../pfm_ctxsw/ptrace_rule.rs"]
#[allow(dead_code)]
pub mod ptrace_rule;
