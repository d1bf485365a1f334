//! The guest side of the tests: perfmon.ko in and out, waits, and the
//! module's counters in /sys/kernel/perfmon, from `pfm_test_support`
//! (shared with tests/guest).

pub use pfm_test_support::module::*;
