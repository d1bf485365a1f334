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

/// Pins the calling thread to `cpu`.
pub fn pin_to(cpu: usize) -> Result<(), String> {
    // SAFETY: A zeroed cpu_set_t is an empty set; CPU_SET writes within it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below CPU_SETSIZE (the guest has a few CPUs).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    if r != 0 {
        return Err(format!(
            "sched_setaffinity(CPU {cpu}): {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}
