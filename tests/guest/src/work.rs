//! Workloads for the counting tests.

use std::time::{Duration, Instant};

use crate::raw;

/// Busy-loops for `d`.
pub fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// The calling thread's workload for the self-monitoring comparisons:
/// `n` rounds of a 1 ms nanosleep, a sched_yield and a short spin, flipping
/// the thread's affinity between CPU 0 and CPU 1 every `flip_every` rounds
/// when there are two CPUs (to cause migrations). Restores the affinity to
/// all CPUs at the end. Returns the number of flips.
pub fn sleepy_migrating(n: usize, flip_every: usize, spin_each: Duration) -> usize {
    let cpus = perfmon::process::online_cpus();
    let mut flips = 0;
    for i in 0..n {
        std::thread::sleep(Duration::from_millis(1));
        raw::sched_yield();
        spin(spin_each);
        if cpus >= 2 && flip_every > 0 && i % flip_every == flip_every - 1 {
            let cpu = (i / flip_every) % 2;
            if perfmon::process::set_affinity(0, &[cpu]).is_ok() {
                flips += 1;
            }
        }
    }
    if cpus >= 2 {
        let all: Vec<usize> = (0..cpus).collect();
        let _ = perfmon::process::set_affinity(0, &all);
    }
    flips
}
