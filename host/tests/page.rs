// SPDX-License-Identifier: GPL-2.0

//! `pfm_page.rs`, the mapped counter page's protocol: the TSC-to-ns
//! arithmetic, the seqlock between one writer and many readers (real
//! threads), who may extend the values (only the thread running on the CPU
//! the page names), and the `rdpmc` path against the Intel simulator.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pfm_host_tests::abi::*;
use pfm_host_tests::pfm_page::*;
use pfm_host_tests::pfm_x86::intel_sim::{IntelCfg, IntelSim, Ring};

/// A zeroed page, as the kernel allocates it.
fn page() -> Box<PageCells> {
    // SAFETY: `PageCells` is atomics only: all-zero is a valid value.
    unsafe { Box::new(std::mem::zeroed()) }
}

/// A CPU that says it is `cpu` with TSC `tsc`; `rdpmc` must not be called.
struct FixedCpu {
    cpu: u32,
    tsc: u64,
    rdtscp_calls: Cell<u32>,
}

impl UserCpu for FixedCpu {
    fn rdtscp(&self) -> (u64, u32) {
        self.rdtscp_calls.set(self.rdtscp_calls.get() + 1);
        // Node 1 in the high bits, as Linux encodes TSC_AUX.
        (self.tsc, (1 << 12) | self.cpu)
    }
    fn rdpmc(&self, _: u32) -> u64 {
        panic!("rdpmc without an index");
    }
}

fn at(cpu: u32, tsc: u64) -> FixedCpu {
    FixedCpu {
        cpu,
        tsc,
        rdtscp_calls: Cell::new(0),
    }
}

#[test]
fn cycles_to_ns_is_the_exact_product_and_the_split_within_a_ns() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for khz in [1_000_000u32, 2_112_000, 2_496_000, 3_600_123, 5_000_000] {
        let (mult, shift) = calc_mult_shift(khz, 1_000_000, 0);
        assert!(shift <= 32 && mult != 0);
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Up to 2^50 cycles: days of uninterrupted running.
            let c = x >> 14;
            let exact = ((c as u128 * mult as u128) >> shift) as u64;
            let ours = cycles_to_ns(c, mult, shift);
            // The split drops at most one ns of the remainder's rounding.
            assert!(
                exact - ours <= 1,
                "{c} cycles at {khz} kHz: {ours} vs {exact}"
            );
        }
    }
}

#[test]
fn mult_shift_converts_within_a_part_per_billion() {
    for khz in (1_000_000u32..5_000_000).step_by(7_919) {
        let (mult, shift) = calc_mult_shift(khz, 1_000_000, 0);
        // One second of cycles, against the exact 10^9 ns.
        let cycles = khz as u64 * 1000;
        let ns = cycles_to_ns(cycles, mult, shift);
        assert!(
            ns.abs_diff(1_000_000_000) <= 1,
            "{khz} kHz: {ns} ns in a second"
        );
    }
    // The kernel's values for a 2.5 GHz TSC (clocks_calc_mult_shift, maxsec 0).
    assert_eq!(
        calc_mult_shift(2_500_000, 1_000_000, 0),
        (1_717_986_918, 32)
    );
}

/// The page converts as `sched_clock` does (`__set_cyc2ns_scale`: a shift
/// of 32 becomes 31 with `mult` halved), not as `clocks_calc_mult_shift`
/// alone would: where that `mult` is odd, the unhalved pair runs ahead of
/// the scheduler's runtime (2,500,001 kHz: 582 ns in 1,000 s).
#[test]
fn the_page_converts_at_sched_clocks_rate() {
    let mut odd = 0;
    for khz in (1_000_000u32..5_000_000).step_by(997) {
        let (m, s) = calc_mult_shift(khz, 1_000_000, 0);
        let (km, ks) = sched_clock_scale(m, s);
        assert!(ks <= 31, "{khz} kHz: shift {ks}");
        // 1,000 s of cycles, as sched_clock converts them.
        let cycles = u64::from(khz) * 1_000_000;
        let kernel = (u128::from(cycles) * u128::from(m >> (s - ks)) >> ks) as u64;
        assert_eq!(cycles_to_ns(cycles, km, ks), kernel, "{khz} kHz");
        if m % 2 == 1 && s == 32 {
            odd += 1;
            assert!(cycles_to_ns(cycles, m, s) > kernel, "{khz} kHz");
        }
    }
    assert!(odd > 0);
    let (m, s) = calc_mult_shift(2_500_001, 1_000_000, 0);
    assert_eq!((m % 2, s), (1, 32));
    let (km, ks) = sched_clock_scale(m, s);
    let cycles = 2_500_001_000 * 1000;
    assert_eq!(
        cycles_to_ns(cycles, m, s) - cycles_to_ns(cycles, km, ks),
        582
    );
    assert_eq!(sched_clock_scale(7, 30), (7, 30));
}

fn running_update(cpu: u32, tsc: u64) -> Update {
    // 1 GHz: one ns per cycle.
    let (mult, shift) = calc_mult_shift(1_000_000, 1_000_000, 0);
    Update {
        time_mult: mult,
        time_shift: shift as u16,
        flags: PFM_PAGE_COUNTING | PFM_PAGE_RUNNING | PFM_PAGE_TIME_VALID,
        cpu,
        pmd_mask: 0xf,
        time_enabled: 500,
        time_running: 400,
        tsc_base: tsc,
        state: PFM_STATE_LOADED,
        time_pmds: 1,
        slow_pmds: 0,
        set: 0,
    }
}

fn soft_pmds() -> impl Iterator<Item = PmdUpdate> {
    // PMD 0 task-clock, 1 context-switches, 2 cpu-migrations, 3 unused.
    [(1000, PFM_PAGE_PMD_TIME), (7, 0), (2, 0), (0, 0)]
        .into_iter()
        .map(|(value, flags)| PmdUpdate {
            value,
            flags,
            ..PmdUpdate::default()
        })
}

#[test]
fn only_the_thread_on_the_pages_cpu_extends_task_clock() {
    let p = page();
    p.init(64);
    p.write(&running_update(3, 10_000), soft_pmds());

    let me = at(3, 14_000);
    let r = p.read(0xf, &me).expect("a reading");
    assert!(r.meta.live);
    assert_eq!(&r.values[..4], &[5000, 7, 2, 0]);
    assert_eq!((r.meta.time_enabled, r.meta.time_running), (4500, 4400));

    let other = at(2, 14_000);
    let r = p.read(0xf, &other).expect("a reading");
    assert!(!r.meta.live, "another CPU: values as of the update");
    assert_eq!(&r.values[..4], &[1000, 7, 2, 0]);
    assert_eq!((r.meta.time_enabled, r.meta.time_running), (500, 400));

    // Switched out: nobody extends, and nobody needs rdtscp.
    let mut u = running_update(3, 0);
    u.flags = PFM_PAGE_COUNTING;
    p.write(&u, soft_pmds());
    let me = at(3, 20_000);
    let r = p.read(0xf, &me).expect("a reading");
    assert!(!r.meta.live);
    assert_eq!(r.values[0], 1000);
    assert_eq!(me.rdtscp_calls.get(), 0);

    // Running, but the TSC is not valid: no rdtscp either.
    let mut u = running_update(3, 0);
    u.flags &= !PFM_PAGE_TIME_VALID;
    p.write(&u, soft_pmds());
    let r = p.read(0xf, &me).expect("a reading");
    assert!(!r.meta.live);
    assert_eq!(me.rdtscp_calls.get(), 0);
}

#[test]
fn a_stale_pmd_without_index_makes_the_reading_not_live() {
    let p = page();
    p.init(48);
    let pmds = [PmdUpdate {
        value: 77,
        flags: PFM_PAGE_PMD_STALE,
        ..PmdUpdate::default()
    }];
    let mut u = running_update(0, 0);
    u.slow_pmds = 1;
    p.write(&u, pmds.into_iter());
    let r = p.read(1, &at(0, 10)).expect("a reading");
    assert!(!r.meta.live);
    assert_eq!(r.values[0], 77);
    // Asking only for PMDs that are not stale keeps it live.
    let r = p.read(2, &at(0, 10)).expect("a reading");
    assert!(r.meta.live);
}

/// The reader's CPU on the Intel simulator: `rdpmc` reads its counters.
struct SimCpu {
    sim: RefCell<IntelSim>,
    cpu: u32,
}

impl UserCpu for SimCpu {
    fn rdtscp(&self) -> (u64, u32) {
        (0, self.cpu)
    }
    fn rdpmc(&self, index: u32) -> u64 {
        // rdpmc: GP counter n is index n, fixed counter n is 2^30 + n.
        let msr = if index & (1 << 30) != 0 {
            0x309 + (index & 0xff)
        } else {
            0xc1 + index
        };
        self.sim.borrow().read(msr).expect("a counter")
    }
}

#[test]
fn rdpmc_adds_what_the_counter_counted_since_the_update_across_a_wrap() {
    let width = 48u32;
    let mut sim = IntelSim::new(IntelCfg::v(2, 4, width, 0, 0, true));
    // PMC1 counts event 0x3c/0x00 in user mode, enabled.
    sim.write(0x186 + 1, 0x3c | (1 << 16) | (1 << 22))
        .expect("evtsel");
    // Just below the wrap.
    let raw0 = (1u64 << width) - 100;
    sim.write(0x4c1 + 1, raw0).expect("pmc");
    let p = page();
    p.init(width as u16);
    let pmds = [
        PmdUpdate::default(),
        PmdUpdate {
            value: 1_000_000,
            index: 2,
            flags: PFM_PAGE_PMD_STALE,
            offset: raw0,
        },
    ];
    let mut u = running_update(5, 0);
    u.slow_pmds = 0b10;
    p.write(&u, pmds.into_iter());
    let cpu = SimCpu {
        sim: RefCell::new(sim),
        cpu: 5,
    };
    cpu.sim.borrow_mut().count((0x3c, 0), Ring::User, 250);
    let r = p.read(0b10, &cpu).expect("a reading");
    assert!(r.meta.live);
    assert_eq!(r.values[1], 1_000_250, "150 after the wrap, 100 before");
    // Another CPU must not read the PMU at all: the counter there is not ours.
    let elsewhere = SimCpu {
        sim: RefCell::new(IntelSim::new(IntelCfg::v1(1, 40))),
        cpu: 4,
    };
    let r = p.read(0b10, &elsewhere).expect("a reading");
    assert!(!r.meta.live);
    assert_eq!(r.values[1], 1_000_000);
}

/// Not running: no rdtscp, so no CPU is needed.
struct NoCpu;

impl UserCpu for NoCpu {
    fn rdtscp(&self) -> (u64, u32) {
        panic!("rdtscp on a page that says not running");
    }
    fn rdpmc(&self, _: u32) -> u64 {
        panic!("rdpmc on a page that says not running");
    }
}

#[test]
fn readers_never_see_a_torn_update() {
    let p: Arc<PageCells> = Arc::from(page());
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (p, stop) = (p.clone(), stop.clone());
            std::thread::spawn(move || {
                let (mut last, mut reads, mut retried) = (0u64, 0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    let Some(r) = p.read(u64::MAX, &NoCpu) else {
                        continue;
                    };
                    // Every field of one update carries the same n.
                    let n = r.meta.time_enabled;
                    assert!(r.values.iter().all(|&v| v == n), "torn: {r:?}");
                    assert_eq!(r.meta.time_running, n);
                    assert!(n >= last, "went back: {n} after {last}");
                    last = n;
                    reads += 1;
                    retried += u64::from(r.meta.retries != 0);
                }
                (reads, retried)
            })
        })
        .collect();
    for n in 1..=200_000u64 {
        let u = Update {
            flags: PFM_PAGE_COUNTING,
            pmd_mask: u64::from(u32::MAX),
            time_enabled: n,
            time_running: n,
            ..Update::default()
        };
        let pmds = std::iter::repeat(PmdUpdate {
            value: n,
            ..PmdUpdate::default()
        });
        p.write(&u, pmds);
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        let (reads, _retried) = r.join().expect("reader");
        assert!(reads > 0);
    }
    assert_eq!(p.seq() % 2, 0);
    assert_eq!(p.seq(), 400_000);
}

/// A writer stalled inside its update (a vCPU the host deschedules with the
/// count odd) is waited out: the reader gets the update, never gives up.
#[test]
fn a_reader_waits_out_a_writer_stalled_mid_update() {
    let p: Arc<PageCells> = Arc::from(page());
    let in_update = Arc::new(AtomicBool::new(false));
    let writer = {
        let (p, in_update) = (p.clone(), in_update.clone());
        std::thread::spawn(move || {
            let u = Update {
                pmd_mask: 1,
                time_enabled: 7,
                ..Update::default()
            };
            let mut first = true;
            let stalled = std::iter::from_fn(move || {
                if first {
                    first = false;
                    in_update.store(true, Ordering::Release);
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                Some(PmdUpdate {
                    value: 7,
                    ..PmdUpdate::default()
                })
            });
            p.write(&u, stalled);
        })
    };
    while !in_update.load(Ordering::Acquire) {
        std::hint::spin_loop();
    }
    assert_eq!(p.seq() % 2, 1, "the writer is inside its update");
    let r = p
        .read(u64::MAX, &NoCpu)
        .expect("gave up on a stalled writer");
    assert_eq!((r.meta.time_enabled, r.values[0]), (7, 7));
    assert_eq!(r.meta.retries, 0, "an update in progress is not a retry");
    writer.join().expect("writer");
}
