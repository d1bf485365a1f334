//! perfmon's fuzzer and reliability tests (issue 8, and the teardown
//! matrix of issue 4): the engine of `pfm_fuzz` and `pfm_test_fuzz`, and the
//! helpers of `pfm_test_hostile` and `pfm_test_teardown`.

pub mod failnth;
pub mod fuzz;
pub mod guest;
pub mod pfm;
pub mod proc;
pub mod rng;
pub mod sys;
pub mod tap;

// The module's ring protocol (`pfm_smpl.rs`), included by the host tests
// of the sampling operations, names the ABI `crate::abi`.
#[cfg(test)]
use sys::abi;
