//! What perfmon's guest test programs share, whichever crate they live in
//! (`tests/guest`: `pfm_guest`, `tests/fuzz`: `pfm_fuzz`):
//!
//! - [`module`]: perfmon.ko in and out (busybox `insmod`/`rmmod`), waiting
//!   for a condition, the module's sysfs counters;
//! - [`user`]: becoming another user, and whether we are root;
//! - [`raw`]: the raw ioctl layer under the library, for calls the library
//!   would not make (and its errno plumbing); all `unsafe` of this crate.

pub mod module;
pub mod raw;
pub mod user;

use std::fmt::Display;

/// Prints a TAP diagnostic (`# ...`), one per line of `msg`, and flushes:
/// a test killed right after still shows it.
pub fn diag(msg: impl Display) {
    use std::io::Write;
    for line in msg.to_string().lines() {
        println!("# {line}");
    }
    let _ = std::io::stdout().flush();
}
