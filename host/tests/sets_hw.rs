// SPDX-License-Identifier: GPL-2.0

//! Event sets on the hardware models (Documentation/sets-design.md): each
//! set is a register image of its own (PMC values, 64-bit PMD values) that
//! takes turns on one PMU. A set switch takes the active image off the PMU
//! (`HwRegs::stop`: counting stopped, every counter folded into its 64-bit
//! value) and puts the next one on with the full switch-in sequence
//! (`HwRegs::install`), as the kernel's timer callback and PMI will. Two and
//! three images, and another thread's context, take turns on the Intel
//! (v1-v5) and AMD (legacy, core extension, PerfMonV2) simulators, driven by
//! the module's own driver (`pfm_x86/driver.rs`) with the lazy-restore
//! keying of `pfm_x86/counters.rs` (a per-CPU register generation bumped
//! by every full restore, each image's (CPU, generation) at its last stop)
//! and, for the schedules, `pfm_sets::SetTable` with `Boundary::WholeDelta`.
//!
//! Exact checks, no tolerance:
//! - Attribution: after every MSR sequence and every batch of events, each
//!   event the simulator counted (its own per-counter total, never
//!   overwritten) is charged to the image on the PMU at that moment, and
//!   must be on a counter of that image: a counter of another image, or
//!   any counter while no image is installed, that counts panics. The
//!   simulator's enable state is checked at the same points: only the
//!   installed image's counters count (enable bit and global control).
//! - Values: every PMD's 64-bit value and its overflow tally are the
//!   closed form of its start value, reset value and the events attributed
//!   to it ([`expect`]; for a randomised PMD, the walk of its generator's
//!   periods, `sim::random_truth`); with no events injected inside MSR sequences, the
//!   events attributed are also exactly the events delivered while its
//!   image was installed and selected by its PMC (an oracle independent of
//!   the simulator's bookkeeping).
//! - Restores: a set switch is always a full restore that writes every
//!   register of the new image; the old image's lazy key can no longer
//!   match, so its next install is full too; a lazy restore happens only
//!   when the same image comes back to a PMU nobody else wrote.
//! - Time (WholeDelta): each set's cycles are exactly 3 × its
//!   `time_running` (the simulated CPU runs 3 cycles per ns): the whole
//!   delta goes to the set whose registers counted it. The sets' running
//!   times add up to the thread's running time; every completed time
//!   activation lasted at least its timeout and at most one timer latency
//!   more (the bound the guest test's switch count rests on).
//! - Overflow switching: the per-PMD tallies the folds report (PMI, read,
//!   switch-out) switch an `OVFL_SWITCH` set at the first fold that brings
//!   its count to `ovfl_switch_cnt`.
//!
//! The schedules (random, seeded) switch hundreds of times per PMU, many
//! of them with a PMI pending. Deterministic sequences pin the cases down:
//! a switch right after the old image's counter wrapped (its PMI raised,
//! not yet taken: the timer's callback runs with interrupts off), then
//! taken with the new image installed; the lazy restore's one-PMC read-back
//! accepting another image whose first PMC holds the same value (so the
//! generation bump is what refuses it); what the old image leaves in the
//! event selects. Two negative controls show what the checks catch: the
//! read-back alone resuming over another image, and an overflow switch at
//! a PMI that does not charge the running time up to it first.

mod sim;

use pfm_host_tests::abi::PFM_MAX_PMDS;
use pfm_host_tests::pfm_counter::period_to_value;
use pfm_host_tests::pfm_sets::{
    Boundary, SetDesc, SetTable, SwitchCause, PFM_SETFL_OVFL_SWITCH, PFM_SETFL_TIME_SWITCH,
};
use pfm_host_tests::pfm_x86::amd64::{Amd64, CTL_EN, CTL_USR};
use pfm_host_tests::pfm_x86::intel_arch::{IntelArch, EVTSEL_EN, EVTSEL_USR, PMC_FIXED_CTRL};
use pfm_host_tests::pfm_x86::model::{HwPmu, Policy};
use sim::amd::{AmdCfg, AmdSim};
use sim::driver::Driver;
use sim::intel::{fixed_event, IntelCfg, IntelSim};
use sim::{short_of_wrap, Gp, MsrBus, Ring};

const USER_ONLY: Policy = Policy {
    allow_kernel: false,
};

/// The latest a timer fires after its expiry, in the schedules.
const LAT_MAX: u64 = 50_000;

/// Cycles the simulated CPU runs per ns.
const CYCLES_PER_NS: u64 = 3;

// ---------------------------------------------------------------------------
// Events and counters

/// The events the simulated CPU produces while the thread runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ev {
    Cycles,
    RefCycles,
    Instructions,
    Branches,
    BranchMisses,
    LlcMisses,
}

const EVS: [Ev; 6] = [
    Ev::Cycles,
    Ev::RefCycles,
    Ev::Instructions,
    Ev::Branches,
    Ev::BranchMisses,
    Ev::LlcMisses,
];

impl Ev {
    /// Occurrences in `ns` of running (each batch rounds down on its own:
    /// the oracle adds up the same numbers).
    fn per(self, ns: u64) -> u64 {
        match self {
            Ev::Cycles => CYCLES_PER_NS * ns,
            Ev::RefCycles => 2 * ns,
            Ev::Instructions => 4 * ns,
            Ev::Branches => ns,
            Ev::BranchMisses => ns / 7,
            Ev::LlcMisses => ns / 13,
        }
    }

    /// Intel's event select and unit mask (fixed counters 0, 1 and 2 count
    /// instructions, cycles and reference cycles).
    fn intel(self) -> (u8, u8) {
        match self {
            Ev::Cycles => (0x3c, 0x00),
            Ev::RefCycles => (0x3c, 0x01),
            Ev::Instructions => (0xc0, 0x00),
            Ev::Branches => (0xc4, 0x00),
            Ev::BranchMisses => (0xc5, 0x00),
            Ev::LlcMisses => (0x2e, 0x41),
        }
    }

    /// AMD's 12-bit event select (bits 7:0 and 35:32 of PERF_CTL) and unit
    /// mask; the simulator counts any code it is given.
    fn amd(self) -> (u16, u8) {
        match self {
            Ev::Cycles => (0x76, 0),
            Ev::RefCycles => (0x12e, 0),
            Ev::Instructions => (0xc0, 0),
            Ev::Branches => (0xc2, 0),
            Ev::BranchMisses => (0xc3, 0),
            Ev::LlcMisses => (0x43, 0x02),
        }
    }
}

/// One PMD of an image: the event its PMC selects, its start value and its
/// short reset value, and its period randomisation (mask, seed), if any.
#[derive(Clone, Copy, Debug)]
struct Counter {
    pmd: usize,
    ev: Ev,
    start: u64,
    reset: u64,
    random: Option<(u64, u64)>,
}

fn ctr(pmd: usize, ev: Ev, start: u64, reset: u64) -> Counter {
    Counter {
        pmd,
        ev,
        start,
        reset,
        random: None,
    }
}

/// A PMD with overflow period `p` (value and reset `2^64 - p`).
fn periodic(pmd: usize, ev: Ev, p: u64) -> Counter {
    ctr(pmd, ev, period_to_value(p), period_to_value(p))
}

/// [`periodic`], randomised (`PFM_REGFL_RANDOM`): each reset starts a
/// period of `p` plus a draw in `[0, mask]` of the generator seeded with
/// `seed`, which the image keeps across its turns on the PMU.
fn randomised(pmd: usize, ev: Ev, p: u64, mask: u64, seed: u64) -> Counter {
    Counter {
        random: Some((mask, seed)),
        ..periodic(pmd, ev, p)
    }
}

/// The value and number of 64-bit overflows of a PMD written `start`, with
/// short reset `reset`, after `n` events, in closed form: the first
/// overflow after `2^64 - start` events, then one every `2^64 - reset`
/// (2^64 for a reset of 0), the value restarting from `reset` plus what
/// was counted past the overflow.
fn expect(start: u64, reset: u64, n: u128) -> (u64, u64) {
    let two64 = 1u128 << 64;
    let first = two64 - start as u128;
    if n < first {
        return ((start as u128 + n) as u64, 0);
    }
    let period = two64 - reset as u128;
    let past = n - first;
    (
        (reset as u128 + past % period) as u64,
        (1 + past / period) as u64,
    )
}

/// An image: its PMDs and the PMC values that make them count.
#[derive(Clone)]
struct Image {
    counters: Vec<Counter>,
    pmcs: Vec<(usize, u64)>,
}

/// Intel: PMC n selects PMD n's event (user mode); the fixed counters'
/// PMDs are enabled in user mode in PMC16.
fn intel_image(counters: Vec<Counter>) -> Image {
    let mut pmcs = Vec::new();
    let mut fixed_ctrl = 0u64;
    for c in &counters {
        let (ev, um) = c.ev.intel();
        if c.pmd < 16 {
            pmcs.push((c.pmd, ev as u64 | (um as u64) << 8 | EVTSEL_USR));
        } else {
            let f = c.pmd - 16;
            assert_eq!(
                fixed_event(f),
                (ev, um),
                "fixed counter {f} counts {:?}",
                c.ev
            );
            fixed_ctrl |= 0x2 << (4 * f);
        }
    }
    if fixed_ctrl != 0 {
        pmcs.push((PMC_FIXED_CTRL, fixed_ctrl));
    }
    Image { counters, pmcs }
}

/// AMD: PERF_CTLn selects PMD n's event, user mode.
fn amd_image(counters: Vec<Counter>) -> Image {
    let pmcs = counters
        .iter()
        .map(|c| {
            let (ev, um) = c.ev.amd();
            let ev = ev as u64;
            (
                c.pmd,
                (ev & 0xff) | (ev >> 8) << 32 | (um as u64) << 8 | CTL_USR,
            )
        })
        .collect();
    Image { counters, pmcs }
}

/// The bits set in `mask`, lowest first.
fn bits(mask: u64) -> impl Iterator<Item = usize> {
    (0..64).filter(move |i| mask & (1 << i) != 0)
}

// ---------------------------------------------------------------------------
// The simulators, as the tests look at them

trait Pmu: MsrBus {
    /// Delivers `n` occurrences of `ev` at `ring`.
    fn deliver(&mut self, ev: Ev, ring: Ring, n: u64);
    /// Events the counter behind each PMD number has counted since RESET.
    fn truth(&self) -> [u128; PFM_MAX_PMDS];
    /// Whether the counter behind `pmd` counts now (its enable and, where
    /// there is one, its global control bit).
    fn counting(&self, pmd: usize) -> bool;
    /// The PMDs whose own enable (event select EN, or the fixed counter's
    /// field) is set, whatever the global control says.
    fn selects_enabled(&self) -> u64;
    /// PMIs raised and not yet taken.
    fn pending_pmis(&self) -> u64;
    /// The global status register, where there is one.
    fn status(&self) -> Option<u64>;
    /// Events delivered after every MSR access.
    fn set_inject(&mut self, what: Option<(Ev, u64)>);
}

impl Pmu for IntelSim {
    fn deliver(&mut self, ev: Ev, ring: Ring, n: u64) {
        self.count(ev.intel(), ring, n);
    }

    fn truth(&self) -> [u128; PFM_MAX_PMDS] {
        let mut t = [0; PFM_MAX_PMDS];
        t[..16].copy_from_slice(&self.counted_gp[..16]);
        t[16..].copy_from_slice(&self.counted_fixed);
        t
    }

    fn counting(&self, pmd: usize) -> bool {
        let v2 = self.cfg.version >= 2;
        if pmd < 16 {
            pmd < self.cfg.num_gp as usize
                && self.evtsel[pmd] & EVTSEL_EN != 0
                && (!v2 || self.global_ctrl & (1 << pmd) != 0)
        } else {
            let f = pmd - 16;
            self.cfg.fixed_exists(f)
                && (self.fixed_ctrl >> (4 * f)) & 0x3 != 0
                && self.global_ctrl & (1 << (32 + f)) != 0
        }
    }

    fn selects_enabled(&self) -> u64 {
        let mut m = 0;
        for i in 0..self.cfg.num_gp as usize {
            if self.evtsel[i] & EVTSEL_EN != 0 {
                m |= 1 << i;
            }
        }
        for f in 0..16 {
            if self.cfg.fixed_exists(f) && (self.fixed_ctrl >> (4 * f)) & 0x3 != 0 {
                m |= 1 << (16 + f);
            }
        }
        m
    }

    fn pending_pmis(&self) -> u64 {
        self.pmis
    }

    fn status(&self) -> Option<u64> {
        (self.cfg.version >= 2).then_some(self.global_status)
    }

    fn set_inject(&mut self, what: Option<(Ev, u64)>) {
        self.inject = what.map(|(ev, n)| (ev.intel(), Ring::User, n));
    }
}

impl Pmu for AmdSim {
    fn deliver(&mut self, ev: Ev, ring: Ring, n: u64) {
        let (ev, um) = ev.amd();
        self.count(ev, um, ring, n);
    }

    fn truth(&self) -> [u128; PFM_MAX_PMDS] {
        let mut t = [0; PFM_MAX_PMDS];
        t[..16].copy_from_slice(&self.counted);
        t
    }

    fn counting(&self, pmd: usize) -> bool {
        pmd < self.cfg.num()
            && self.ctl[pmd] & CTL_EN != 0
            && (!self.cfg.v2 || self.global_ctl & (1 << pmd) != 0)
    }

    fn selects_enabled(&self) -> u64 {
        (0..self.cfg.num())
            .filter(|&i| self.ctl[i] & CTL_EN != 0)
            .fold(0, |m, i| m | 1 << i)
    }

    fn pending_pmis(&self) -> u64 {
        self.pmis
    }

    fn status(&self) -> Option<u64> {
        self.cfg.v2.then_some(self.global_status)
    }

    fn set_inject(&mut self, what: Option<(Ev, u64)>) {
        self.inject = what.map(|(ev, n)| {
            let (ev, um) = ev.amd();
            (ev, um, Ring::User, n)
        });
    }
}

/// The simulator as the driver's bus, recording which MSRs were written.
struct Rec<S> {
    sim: S,
    writes: Vec<u32>,
}

impl<S: MsrBus> MsrBus for Rec<S> {
    fn rdmsr(&mut self, msr: u32) -> Result<u64, Gp> {
        self.sim.rdmsr(msr)
    }

    fn wrmsr(&mut self, msr: u32, value: u64) -> Result<(), Gp> {
        self.sim.wrmsr(msr, value)?;
        self.writes.push(msr);
        Ok(())
    }

    fn take_pmis(&mut self) -> u64 {
        self.sim.take_pmis()
    }
}

// ---------------------------------------------------------------------------
// Register images taking turns on one PMU

/// Register images on one CPU's PMU, each a context's counters as the
/// module keeps them (`HwCounters`), installed and removed with the
/// module's driver and its lazy-restore keying, with the attribution
/// described in the module doc.
struct Mux<'m, M: HwPmu, S: Pmu> {
    model: &'m M,
    bus: Rec<S>,
    imgs: Vec<Driver<'m, M>>,
    defs: Vec<Vec<Counter>>,
    /// The image whose registers are on the PMU (from the first access of
    /// its install to the last of its stop).
    on_pmu: Option<usize>,
    /// The CPU's register generation, bumped by every full restore.
    gen: u64,
    /// Each image's lazy-restore key: the generation it left the PMU at,
    /// with every register in place (`HwCounters::resume`).
    keys: Vec<Option<u64>>,
    /// Events attributed to each image's PMDs (the simulator's counts).
    got: Vec<[u128; PFM_MAX_PMDS]>,
    /// Events delivered (outside MSR sequences) while each image was
    /// installed, per PMD selecting them: the independent oracle.
    sent: Vec<[u128; PFM_MAX_PMDS]>,
    /// The simulator's counts at the last attribution.
    seen: [u128; PFM_MAX_PMDS],
    /// Each image's overflow tally at the last [`Mux::take_tally`].
    taken: Vec<[u64; PFM_MAX_PMDS]>,
    /// Full and lazy restores, set switches.
    full: u64,
    lazy: u64,
    switches: u64,
    /// Set switches made with a PMI pending (raised, not yet taken).
    switches_with_pmi_pending: u64,
    /// PMIs that found a wrap of the installed image, per image.
    pmis: Vec<u64>,
}

impl<'m, M: HwPmu, S: Pmu> Mux<'m, M, S> {
    fn new(model: &'m M, sim: S, images: Vec<Image>) -> Self {
        let seen = sim.truth();
        let n = images.len();
        let mut imgs = Vec::new();
        let mut defs = Vec::new();
        for img in images {
            let mut d = Driver::new(model);
            for &(pmc, v) in &img.pmcs {
                d.write_pmc(pmc, v, USER_ONLY).expect("a valid PMC value");
            }
            let mut used = 0u64;
            for c in &img.counters {
                d.write_pmd(c.pmd, c.start, c.reset)
                    .expect("an existing PMD");
                if let Some((mask, seed)) = c.random {
                    d.randomise(c.pmd, mask, seed);
                }
                used |= 1 << c.pmd;
            }
            assert_eq!(d.used, used, "the PMCs make exactly the image's PMDs count");
            // Counting whenever installed (the context is started).
            d.started = true;
            imgs.push(d);
            defs.push(img.counters);
        }
        Mux {
            model,
            bus: Rec {
                sim,
                writes: Vec::new(),
            },
            imgs,
            defs,
            on_pmu: None,
            gen: 0,
            keys: vec![None; n],
            got: vec![[0; PFM_MAX_PMDS]; n],
            sent: vec![[0; PFM_MAX_PMDS]; n],
            seen,
            taken: vec![[0; PFM_MAX_PMDS]; n],
            full: 0,
            lazy: 0,
            switches: 0,
            switches_with_pmi_pending: 0,
            pmis: vec![0; n],
        }
    }

    /// Charges what the simulator counted since the last call to the image
    /// on the PMU; a counter outside it that counted is a leak.
    fn account(&mut self) {
        let now = self.bus.sim.truth();
        for (p, (&n, &s)) in now.iter().zip(&self.seen).enumerate() {
            let d = n - s;
            if d == 0 {
                continue;
            }
            match self.on_pmu {
                Some(x) if self.imgs[x].used & (1 << p) != 0 => self.got[x][p] += d,
                _ => panic!(
                    "the counter of PMD {p} counted {d} events while image {:?} was on the PMU",
                    self.on_pmu
                ),
            }
        }
        self.seen = now;
    }

    /// Only the installed image's counters count, and all of them.
    fn check_gated(&self) {
        let used = self.on_pmu.map_or(0, |x| self.imgs[x].used);
        for p in 0..PFM_MAX_PMDS {
            assert_eq!(
                self.bus.sim.counting(p),
                used & (1 << p) != 0,
                "PMD {p}'s counter with image {:?} on the PMU",
                self.on_pmu
            );
        }
    }

    /// The switch-in of image `x` (`HwCounters::install`): a lazy restore
    /// if its key is the CPU's generation, else a full restore, which
    /// bumps the generation and must write every register of the image.
    fn install(&mut self, x: usize) {
        assert_eq!(self.on_pmu, None, "a PMU holds one image");
        let lazy = self.keys[x].take() == Some(self.gen);
        self.on_pmu = Some(x);
        if lazy {
            // The key matched, so nobody wrote the PMU since this image
            // left: the read-back must agree (it panics otherwise).
            self.imgs[x].switch_in_lazy(&mut self.bus);
            self.lazy += 1;
        } else {
            self.gen += 1;
            self.bus.writes.clear();
            self.imgs[x].switch_in(&mut self.bus);
            self.full += 1;
            let d = &self.imgs[x];
            let w = &self.bus.writes;
            for pmc in bits(d.pmc_used) {
                let msr = self.model.pmc_desc(pmc).unwrap().msr;
                assert!(w.contains(&msr), "image {x}'s full install left PMC {pmc}");
            }
            for pmd in bits(d.used) {
                let msr = self.model.pmd_desc(pmd).unwrap().msr;
                assert!(w.contains(&msr), "image {x}'s full install left PMD {pmd}");
            }
            if let Some(g) = self.model.global_msrs() {
                assert!(w.contains(&g.ctrl), "image {x}: no global control write");
            }
        }
        self.account();
        self.check_gated();
    }

    /// The switch-out of the installed image (`HwCounters::uninstall`):
    /// stopped and folded, not re-armed, its registers left in place; its
    /// key set if nothing wrapped. Returns the image.
    fn uninstall(&mut self) -> usize {
        let x = self.on_pmu.expect("an image on the PMU");
        let keep = self.imgs[x].switch_out_keep(&mut self.bus);
        self.account();
        self.on_pmu = None;
        self.keys[x] = keep.then_some(self.gen);
        self.check_gated();
        x
    }

    /// A set switch: the installed image off the PMU, `to` on.
    fn switch_sets(&mut self, to: usize) {
        if self.bus.sim.pending_pmis() != 0 {
            self.switches_with_pmi_pending += 1;
        }
        let full = self.full;
        let from = self.uninstall();
        assert_ne!(from, to);
        self.install(to);
        assert_eq!(self.full, full + 1, "a set switch is a full restore");
        assert_ne!(
            self.keys[from],
            Some(self.gen),
            "image {from} could be resumed lazily over image {to}"
        );
        self.switches += 1;
    }

    /// `n` occurrences of `ev` in user mode.
    fn deliver(&mut self, ev: Ev, n: u64) {
        self.bus.sim.deliver(ev, Ring::User, n);
        if let Some(x) = self.on_pmu {
            for c in &self.defs[x] {
                if c.ev == ev {
                    self.sent[x][c.pmd] += n as u128;
                }
            }
        }
        self.account();
    }

    /// The CPU runs `ns`: every event at its rate in user mode, and kernel
    /// work that no (user-mode) counter may count.
    fn run(&mut self, ns: u64) {
        for ev in EVS {
            self.deliver(ev, ev.per(ns));
        }
        self.bus.sim.deliver(Ev::Instructions, Ring::Kernel, ns);
        self.account();
    }

    /// Takes the pending PMIs: the installed image's PMI sequence, if any
    /// (with none installed the interrupt finds no owner). Returns whether
    /// it found a wrap of that image (and folded).
    fn service(&mut self) -> bool {
        if self.bus.take_pmis() == 0 {
            return false;
        }
        let Some(x) = self.on_pmu else {
            return false;
        };
        let wrapped = self.imgs[x].pmi(&mut self.bus) != 0;
        self.account();
        self.check_gated();
        self.pmis[x] += u64::from(wrapped);
        wrapped
    }

    /// A read of the installed image's live values (the kernel's fold on
    /// the thread's CPU): stopped, folded, re-armed, started again.
    fn fold(&mut self) {
        let x = self.on_pmu.expect("an image on the PMU");
        self.imgs[x].stop(&mut self.bus);
        self.imgs[x].start(&mut self.bus);
        self.account();
        self.check_gated();
    }

    /// Image `x`'s 64-bit overflows per PMD since the last call.
    fn take_tally(&mut self, x: usize) -> [u64; PFM_MAX_PMDS] {
        let t = self.imgs[x].tally;
        let d = core::array::from_fn(|p| t[p] - self.taken[x][p]);
        self.taken[x] = t;
        d
    }

    /// Every PMD of every image against [`expect`] of the events
    /// attributed to it, and those against the events delivered (all of
    /// them but `injected`, which MSR sequences also delivered). Every
    /// image must be off the PMU (its values folded).
    fn check_values(&self, injected: Option<Ev>, what: &str) {
        assert_eq!(self.on_pmu, None);
        for (x, cs) in self.defs.iter().enumerate() {
            for c in cs {
                let n = self.got[x][c.pmd];
                let (v, o) = match c.random {
                    // The generator's periods, walked (`sim::random_truth`).
                    Some((mask, seed)) => {
                        let p = c.reset.wrapping_neg();
                        let n = u64::try_from(n).expect("events below 2^64");
                        let (o, v) = sim::random_truth(p, mask, seed, n);
                        (v, o)
                    }
                    None => expect(c.start, c.reset, n),
                };
                let p = &self.imgs[x].pmds[c.pmd];
                assert_eq!(
                    (p.value, p.overflows),
                    (v, o),
                    "{what}: image {x} PMD {} ({:?}) after {n} events",
                    c.pmd,
                    c.ev
                );
                assert_eq!(self.imgs[x].tally[c.pmd], o);
                let sent = self.sent[x][c.pmd];
                if Some(c.ev) == injected {
                    assert!(n >= sent, "{what}: image {x} PMD {}", c.pmd);
                } else {
                    assert_eq!(n, sent, "{what}: image {x} PMD {} ({:?})", c.pmd, c.ev);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The PMUs and their images

fn intel_configs() -> Vec<IntelCfg> {
    vec![
        IntelCfg::v1(2, 40),
        IntelCfg::v(2, 2, 40, 3, 40, false),
        IntelCfg::v(3, 4, 48, 3, 48, false),
        // intel_arch_sim's PMU.
        IntelCfg::v(4, 4, 48, 3, 48, true),
        IntelCfg {
            fixed_bitmap: 0b1011,
            ..IntelCfg::v(5, 6, 48, 0, 48, false)
        },
    ]
}

const AMD_CONFIGS: [AmdCfg; 4] = [
    AmdCfg {
        core_ext: false,
        v2: false,
        v2_counters: 0,
    },
    AmdCfg {
        core_ext: true,
        v2: false,
        v2_counters: 0,
    },
    AmdCfg {
        core_ext: true,
        v2: true,
        v2_counters: 6,
    },
    AmdCfg {
        core_ext: true,
        v2: true,
        v2_counters: 3,
    },
];

fn intel_model(cfg: &IntelCfg) -> IntelArch {
    IntelArch::probe(cfg.cpuid(), cfg.perf_capabilities()).expect("a PMU")
}

fn amd_model(cfg: &AmdCfg) -> Amd64 {
    Amd64::probe(cfg.ext1_ecx(), cfg.leaf_0x80000022(), true).expect("a PMU")
}

/// 100,000 events below a multiple of 2^47 (and so of 2^31): a counter
/// armed for it wraps long before its 64-bit value overflows, at either
/// armed width.
const NEAR_WRAP: u64 = (1 << 47) - 100_000;

/// Three set images and another thread's context: different events and
/// start values on the same counters. Each set counts cycles, on a counter
/// of its own choosing (set 2 with set 0's PERFEVTSEL0 value), and has a counter that wraps within its activations
/// (PMIs while it is installed): periods of 200,000 instructions (50 us),
/// 150,000 branches or 1,000,003 cycles, 400,000 cycles. Set 1's LLC
/// misses have a period below the arming minimum (several overflows per
/// fold, found by the stops and by the PMIs of its other counters); set
/// 2's branch misses a period of one event; the other context starts 6
/// events from an overflow. Set 1's LLC misses and set 2's cycles are
/// randomised (`PFM_REGFL_RANDOM`, masks 2^14 - 1 and 2^16 - 1): their
/// generators live in their images, across every turn on the PMU.
fn intel_images(m: &IntelArch) -> Vec<Image> {
    let fixed = |f: u32| m.fixed_mask() & (1 << f) != 0;
    let mut a = vec![
        ctr(0, Ev::Cycles, NEAR_WRAP, 0),
        periodic(1, Ev::Instructions, 200_000),
    ];
    if fixed(0) {
        a.push(ctr(16, Ev::Instructions, 7, 0));
    }
    let mut b = vec![randomised(0, Ev::LlcMisses, 50_000, 0x3fff, 0x5e75)];
    if fixed(1) {
        b.push(periodic(1, Ev::Branches, 150_000));
        b.push(ctr(17, Ev::Cycles, 0x7777_0000_0000, 0));
    } else {
        b.push(periodic(1, Ev::Cycles, 1_000_003));
    }
    let mut c = vec![
        randomised(0, Ev::Cycles, 400_000, 0xffff, 0x5e76),
        periodic(1, Ev::BranchMisses, 1),
    ];
    if fixed(2) {
        c.push(ctr(18, Ev::RefCycles, (1 << 40) - 77_777, 0));
    }
    let other = vec![
        ctr(0, Ev::Instructions, u64::MAX - 5, 0x100),
        ctr(1, Ev::Cycles, 0, 0),
    ];
    [a, b, c, other].into_iter().map(intel_image).collect()
}

/// The same for AMD (three counters: every configuration has them).
fn amd_images() -> Vec<Image> {
    let a = vec![
        ctr(0, Ev::Cycles, NEAR_WRAP, 0),
        periodic(1, Ev::Instructions, 200_000),
        ctr(2, Ev::RefCycles, 7, 0),
    ];
    let b = vec![
        randomised(0, Ev::LlcMisses, 50_000, 0x3fff, 0x5e75),
        periodic(1, Ev::Branches, 150_000),
        ctr(2, Ev::Cycles, 0x7777_0000_0000, 0),
    ];
    let c = vec![
        randomised(0, Ev::Cycles, 400_000, 0xffff, 0x5e76),
        periodic(1, Ev::BranchMisses, 1),
        ctr(2, Ev::RefCycles, (1 << 40) - 77_777, 0),
    ];
    let other = vec![
        ctr(0, Ev::Instructions, u64::MAX - 5, 0x100),
        ctr(1, Ev::Cycles, 0, 0),
    ];
    [a, b, c, other].into_iter().map(amd_image).collect()
}

/// Keeps the sets' images (the first `n`) and the other context (last).
fn pick(mut images: Vec<Image>, n: usize) -> Vec<Image> {
    let other = images.pop().expect("the other context");
    images.truncate(n);
    images.push(other);
    images
}

// ---------------------------------------------------------------------------
// A schedule: the thread runs, sleeps, shares its CPU; the table decides

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// In `lo..hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }

    fn chance(&mut self, pct: u64) -> bool {
        self.next() % 100 < pct
    }
}

fn time_set(id: u16, timeout: u64) -> SetDesc {
    SetDesc {
        id,
        flags: PFM_SETFL_TIME_SWITCH,
        timeout,
        ..SetDesc::default()
    }
}

fn ovfl_set(id: u16, cnt: u32, pmds: u64) -> SetDesc {
    SetDesc {
        id,
        flags: PFM_SETFL_OVFL_SWITCH,
        ovfl_switch_cnt: cnt,
        switch_pmds: pmds,
        ..SetDesc::default()
    }
}

/// How a schedule runs.
#[derive(Clone, Copy)]
struct Plan {
    seed: u64,
    /// Thread run segments (each followed by a switch-out).
    segments: usize,
    /// Events delivered after every MSR access.
    inject: Option<(Ev, u64)>,
    /// The PMI that finds an overflow charges the running time up to it
    /// before it asks the table (so an overflow switch charges the old
    /// set with what its registers counted).
    charge_at_pmi: bool,
}

/// A monitored thread with a multiplexed context on one CPU: sets
/// `0..n` (images `0..n` of the mux), another thread's context (image n).
struct Sched<'m, M: HwPmu, S: Pmu> {
    mux: Mux<'m, M, S>,
    t: SetTable,
    descs: Vec<SetDesc>,
    plan: Plan,
    rng: Rng,
    /// The thread's running time while the context counts, and at the
    /// last charge.
    now: u64,
    last: u64,
    /// When the set timer fires (running time), if armed.
    deadline: Option<u64>,
    /// The active set's charged time and counted switch overflows in its
    /// current activation.
    cur: u64,
    act_ovf: u64,
    /// Completed activations by cause.
    time_acts: u64,
    /// Time activations charged more than their timeout and one latency.
    long_acts: u64,
    ovfl_acts: u64,
}

impl<'m, M: HwPmu, S: Pmu> Sched<'m, M, S> {
    fn new(model: &'m M, sim: S, images: Vec<Image>, descs: &[SetDesc], plan: Plan) -> Self {
        let n = descs.len();
        assert_eq!(images.len(), n + 1);
        let mut t = SetTable::new(model.impl_pmds());
        let mut d = descs.to_vec();
        t.create(&mut d).expect("valid sets");
        for (i, img) in images.iter().take(n).enumerate() {
            for c in &img.counters {
                t.use_reg(i as u16, true, c.pmd).unwrap();
            }
            for &(pmc, _) in &img.pmcs {
                t.use_reg(i as u16, false, pmc).unwrap();
            }
        }
        let mut mux = Mux::new(model, sim, images);
        mux.bus.sim.set_inject(plan.inject);
        t.load(0).expect("LOAD");
        Sched {
            mux,
            t,
            descs: d,
            plan,
            rng: Rng(plan.seed),
            now: 0,
            last: 0,
            deadline: None,
            cur: 0,
            act_ovf: 0,
            time_acts: 0,
            long_acts: 0,
            ovfl_acts: 0,
        }
    }

    /// The set timer for the active set's time left, after a latency.
    fn arm(&mut self) {
        let lat = self.rng.range(0, LAT_MAX + 1);
        self.deadline = self.t.timer_ns().map(|left| self.now + left + lat);
    }

    /// Charges the running time since the last charge to the active set
    /// (WholeDelta); returns the set to switch to, if it timed out.
    fn charge(&mut self) -> Option<usize> {
        let ran = self.now - self.last;
        self.last = self.now;
        let from = self.t.active();
        let mut cur = self.cur;
        let sw = self.t.charge(ran, Boundary::WholeDelta, |s, ns| {
            assert_eq!(s, from, "the whole delta goes to the set that counted it");
            cur += ns;
        });
        self.cur = cur;
        if sw.switches == 0 {
            return None;
        }
        assert_eq!((sw.from, sw.switches), (from, 1));
        // A completed time activation: at least its timeout (the switch
        // comes at the first charge that reaches it), at most one timer
        // latency more (the timer is a charge point).
        let tmo = self.descs[from].timeout;
        let within = tmo <= self.cur && self.cur <= tmo + LAT_MAX;
        assert!(
            within || !self.plan.charge_at_pmi,
            "set {from}: activation of {} ns, timeout {tmo}",
            self.cur
        );
        self.long_acts += u64::from(!within);
        self.time_acts += 1;
        self.cur = 0;
        self.act_ovf = 0;
        Some(sw.to)
    }

    /// A fold of image `x` found what the tally says: the table counts the
    /// active set's switch overflows; returns the set to switch to.
    fn overflows(&mut self, x: usize) -> Option<usize> {
        let d = self.mux.take_tally(x);
        if x != self.t.active() {
            // The old set's last fold (after its switch): its own overflows,
            // not carried to the next activation.
            return None;
        }
        let desc = self.descs[x];
        let k = desc.ovfl_switch_cnt as u64;
        let n: u64 = bits(desc.switch_pmds).map(|p| d[p]).sum();
        let sw = self.t.overflowed(x, &d);
        if desc.flags & PFM_SETFL_OVFL_SWITCH == 0 {
            assert_eq!(sw, None);
            return None;
        }
        self.act_ovf += n;
        match sw {
            Some(sw) => {
                assert!(
                    self.act_ovf >= k && self.act_ovf - n < k,
                    "set {x}: switched with {} overflows ({n} in the last fold), count {k}",
                    self.act_ovf
                );
                assert_eq!((sw.from, sw.switches), (x, 1));
                self.ovfl_acts += 1;
                self.act_ovf = 0;
                self.cur = 0;
                Some(sw.to)
            }
            None => {
                assert!(
                    self.act_ovf < k,
                    "set {x}: {} overflows, count {k}",
                    self.act_ovf
                );
                None
            }
        }
    }

    /// A switch while the thread runs: the new set's image replaces the
    /// old one on the PMU, whose last fold's overflows stay its own; the
    /// timer is armed for the new set.
    fn switch_to(&mut self, to: usize) {
        let from = self.mux.on_pmu.expect("running");
        self.mux.switch_sets(to);
        self.overflows(from);
        self.arm();
    }

    /// The set timer fired: the timeout is reached (the timer is late by
    /// its latency, all of it counted under the old set's registers).
    fn timer(&mut self) {
        let to = self.charge().expect("the timer fires after the timeout");
        self.switch_to(to);
    }

    /// The PMIs raised so far.
    fn pmi(&mut self) {
        let Some(x) = self.mux.on_pmu else {
            self.mux.service();
            return;
        };
        if !self.mux.service() {
            return;
        }
        if self.plan.charge_at_pmi {
            if let Some(to) = self.charge() {
                return self.switch_to(to);
            }
        }
        if let Some(to) = self.overflows(x) {
            self.switch_to(to);
        }
    }

    /// A read of the values on the thread's CPU: a fold and a charge.
    fn read(&mut self) {
        if let Some(to) = self.charge() {
            return self.switch_to(to);
        }
        self.mux.fold();
        let x = self.mux.on_pmu.expect("running");
        if let Some(to) = self.overflows(x) {
            self.switch_to(to);
        }
    }

    /// The thread leaves its CPU: the charge (which may switch sets: the
    /// next switch-in installs the new one), then the image on the PMU —
    /// the one that counted, whatever the table says now — comes off.
    fn sched_out(&mut self) {
        self.charge();
        let x = self.mux.uninstall();
        self.overflows(x);
        self.deadline = None;
    }

    fn sched_in(&mut self) {
        self.mux.install(self.t.active());
        self.arm();
    }

    /// Runs the plan; returns each set's (cycles, time_running).
    fn run(&mut self, what: &str) -> Vec<(u128, u64)> {
        let n = self.descs.len();
        let other = n;
        self.sched_in();
        for _ in 0..self.plan.segments {
            let mut run = self.rng.range(20_000, 4_000_000);
            while run > 0 {
                let mut step = run.min(self.rng.range(5_000, 400_000));
                let fire = match self.deadline {
                    Some(d) if self.now + step >= d => {
                        step = d - self.now;
                        true
                    }
                    _ => false,
                };
                self.mux.run(step);
                self.now += step;
                run -= step;
                if self.rng.chance(60) {
                    self.pmi();
                }
                if fire && self.deadline.is_some_and(|d| d <= self.now) {
                    self.timer();
                } else if self.rng.chance(5) {
                    self.read();
                }
            }
            self.sched_out();
            if self.rng.chance(30) {
                // Another thread's context uses the PMU meanwhile.
                self.mux.install(other);
                let ns = self.rng.range(10_000, 2_000_000);
                self.mux.run(ns);
                self.mux.service();
                self.mux.uninstall();
            }
            // An unmonitored thread: nothing may count.
            let ns = self.rng.range(0, 100_000);
            self.mux.run(ns);
            if self.rng.chance(50) {
                self.mux.service();
            }
            self.sched_in();
        }
        self.sched_out();
        self.mux
            .check_values(self.plan.inject.map(|(ev, _)| ev), what);

        // The table's bookkeeping against the thread's running time.
        let mut sum = 0;
        let mut runs = 0;
        let mut out = Vec::new();
        for i in 0..n {
            let info = self.t.info(i as u16, 0).unwrap();
            assert_eq!(
                info.time_enabled, self.now,
                "{what}: set {i}'s enabled time"
            );
            sum += info.time_running;
            runs += info.runs;
            assert!(
                info.runs >= 2 && self.mux.pmis[i] >= 1,
                "{what}: set {i} ran {} times, {} PMIs",
                info.runs,
                self.mux.pmis[i]
            );
            let cyc = self.mux.defs[i]
                .iter()
                .find(|c| c.ev == Ev::Cycles)
                .expect("every set counts cycles");
            out.push((self.mux.got[i][cyc.pmd], info.time_running));
            if info.last_cause == SwitchCause::Overflow {
                assert_ne!(info.last_switch_pmds & self.descs[i].switch_pmds, 0);
            }
        }
        assert_eq!(sum, self.now, "{what}: the sets' running times");
        assert_eq!(runs - 1, self.t.switches(), "{what}");
        assert_eq!(self.t.switches(), self.time_acts + self.ovfl_acts, "{what}");
        assert!(self.mux.switches >= 1 && self.mux.lazy >= 1, "{what}");
        assert!(self.mux.switches_with_pmi_pending >= 1, "{what}");
        assert!(self.mux.full >= self.mux.switches, "{what}");
        out
    }
}

/// Runs `plan` for every PMU with `sets` (images `0..sets.len()` of the
/// model's three, and the other context); each set's cycles must be
/// exactly 3 × its running time.
fn schedules(descs: &[SetDesc], plan: Plan, what: &str) {
    let n = descs.len();
    let check = |cycles: Vec<(u128, u64)>, what: &str| {
        for (i, (c, r)) in cycles.into_iter().enumerate() {
            assert_eq!(
                c,
                CYCLES_PER_NS as u128 * r as u128,
                "{what}: set {i}'s cycles against its time_running {r}"
            );
        }
    };
    for cfg in intel_configs() {
        let m = intel_model(&cfg);
        let what = format!("{what}, {cfg:?}");
        let mut s = Sched::new(
            &m,
            IntelSim::new(cfg),
            pick(intel_images(&m), n),
            descs,
            plan,
        );
        check(s.run(&what), &what);
    }
    for cfg in AMD_CONFIGS {
        let m = amd_model(&cfg);
        let what = format!("{what}, {cfg:?}");
        let mut s = Sched::new(&m, AmdSim::new(cfg), pick(amd_images(), n), descs, plan);
        check(s.run(&what), &what);
    }
}

const PLAN: Plan = Plan {
    seed: 0x5e75,
    segments: 300,
    inject: None,
    charge_at_pmi: true,
};

#[test]
fn two_sets_switched_by_time() {
    let descs = [time_set(0, 1_000_000), time_set(1, 2_000_000)];
    schedules(&descs, PLAN, "2 sets, time");
}

#[test]
fn three_sets_switched_by_time() {
    let descs = [
        time_set(0, 1_000_000),
        time_set(1, 2_000_000),
        time_set(2, 500_000),
    ];
    schedules(&descs, PLAN, "3 sets, time");
    // Events between every MSR access of every sequence: exact all the same.
    let inject = Plan {
        seed: 7,
        inject: Some((Ev::Instructions, 3)),
        ..PLAN
    };
    schedules(&descs, inject, "3 sets, time, injected instructions");
}

/// Set 0 switches after 3 overflows of its instructions PMD (period
/// 200,000: an overflow per 50 us of its running, each a PMI), set 1 after
/// 2 of its LLC-miss PMD (period 50,000, an overflow per 650 us, below the
/// arming minimum: folded by the PMIs of its other counters and by its
/// stops, often several at once), set 2 by time.
fn ovfl_descs() -> [SetDesc; 3] {
    [
        ovfl_set(0, 3, 1 << 1),
        ovfl_set(1, 2, 1 << 0),
        time_set(2, 500_000),
    ]
}

#[test]
fn sets_switched_by_overflow_and_time() {
    schedules(&ovfl_descs(), PLAN, "overflow and time sets");
}

/// The negative control of the test above: a PMI that switches sets on an
/// overflow without charging the running time up to it first leaves the
/// old set's last stretch, counted under its registers, to be charged to
/// the next set: the cycles no longer match the running times, and a time
/// set after an overflow set is charged more than its timeout and a timer
/// latency.
#[test]
fn an_overflow_switch_must_charge_the_time_first() {
    let cfg = IntelCfg::v(4, 4, 48, 3, 48, true);
    let m = intel_model(&cfg);
    let plan = Plan {
        charge_at_pmi: false,
        ..PLAN
    };
    let mut s = Sched::new(
        &m,
        IntelSim::new(cfg),
        intel_images(&m),
        &ovfl_descs(),
        plan,
    );
    let cycles = s.run("no charge at the PMI");
    assert_ne!(s.long_acts, 0);
    assert!(
        cycles
            .iter()
            .any(|&(c, r)| c != CYCLES_PER_NS as u128 * r as u128),
        "{cycles:?}"
    );
}

// ---------------------------------------------------------------------------
// Deterministic sequences

/// The events until PMD `pmd`'s counter, armed for `v`, wraps.
fn to_wrap<M: HwPmu>(m: &M, pmd: usize, v: u64) -> u64 {
    short_of_wrap(v, m.pmd_desc(pmd).unwrap().width) + 1
}

/// Image A's counter wraps (its PMI raised, not yet taken: the timer's
/// callback runs with interrupts off) just before a set switch: the stop
/// folds the wrap into A (the 64-bit overflow in A's tally if the wrap is
/// one, nothing if it is an intermediate wrap of a counter armed below 64
/// bits) and acknowledges its status; B is installed; the pending PMI then
/// runs against B and finds nothing of B's: B unchanged. A's next install
/// is full and counts on from its reset value. Every value exact.
fn overflow_pending_at_a_switch<M: HwPmu, S: Pmu>(m: &M, sim: S, images: Vec<Image>, p: u64) {
    let mut mux = Mux::new(m, sim, images);
    let (a, b) = (0, 1);
    let start = mux.defs[a][0].start;
    let pmd = mux.defs[a][0].pmd;
    let ev = mux.defs[a][0].ev;
    mux.install(a);
    mux.run(10_000);
    let n = to_wrap(m, pmd, start) - mux.got[a][pmd] as u64 + 3;
    mux.deliver(ev, n);
    assert_eq!(mux.bus.sim.pending_pmis(), 1, "p {p}: A's counter wrapped");
    if let Some(st) = mux.bus.sim.status() {
        assert_ne!(st, 0);
    }
    mux.switch_sets(b);
    assert_eq!(mux.switches_with_pmi_pending, 1);
    assert_eq!(mux.keys[a], None, "a wrap leaves nothing to resume");
    let ovf = u64::from(p <= 1 << 40);
    assert_eq!(
        mux.take_tally(a)[pmd],
        ovf,
        "p {p}: A's overflows at its stop"
    );
    if let Some(st) = mux.bus.sim.status() {
        assert_eq!(st, 0, "A's status acknowledged at its stop");
    }
    mux.run(20_000);
    let before: Vec<u64> = mux.imgs[b].state.iter().map(|s| s.value).collect();
    let raw = mux.imgs[b].raw;
    assert!(!mux.service(), "the pending PMI finds no wrap of B's");
    let after: Vec<u64> = mux.imgs[b].state.iter().map(|s| s.value).collect();
    assert_eq!((before, raw), (after, mux.imgs[b].raw), "B untouched");
    assert_eq!(mux.take_tally(b), [0; PFM_MAX_PMDS]);
    mux.switch_sets(a);
    mux.run(30_000);
    mux.uninstall();
    mux.check_values(None, &format!("pending overflow, p {p}"));
}

#[test]
fn a_set_switch_with_an_overflow_pending() {
    // A's first counter counts LLC misses with period p (a wrap that is
    // the overflow), or 2^50 (an intermediate wrap of the armed width).
    for p in [1u64 << 20, 1 << 50] {
        for cfg in intel_configs() {
            let m = intel_model(&cfg);
            let imgs = vec![
                intel_image(vec![
                    periodic(0, Ev::LlcMisses, p),
                    ctr(1, Ev::Cycles, 9, 0),
                ]),
                intel_image(vec![
                    ctr(0, Ev::Instructions, 5, 0),
                    ctr(1, Ev::Branches, 0, 0),
                ]),
            ];
            overflow_pending_at_a_switch(&m, IntelSim::new(cfg), imgs, p);
        }
        for cfg in AMD_CONFIGS {
            let m = amd_model(&cfg);
            let imgs = vec![
                amd_image(vec![
                    periodic(0, Ev::LlcMisses, p),
                    ctr(1, Ev::Cycles, 9, 0),
                ]),
                amd_image(vec![
                    ctr(0, Ev::Instructions, 5, 0),
                    ctr(1, Ev::Branches, 0, 0),
                ]),
            ];
            overflow_pending_at_a_switch(&m, AmdSim::new(cfg), imgs, p);
        }
    }
}

/// Why a set switch must bump the CPU's register generation (go through
/// `HwCounters::install`'s full restore): `HwRegs::resume` checks one PMC
/// read back, which cannot tell two images apart whose first PMC holds the
/// same value (two sets counting cycles in PERFEVTSEL0, as the guest test
/// does). A resumed over B's registers is accepted and folds B's counter
/// into A's value; with a different first PMC the read-back refuses. With
/// the generation key (the mux, as the kernel) three images rotate, the
/// thread leaving and coming back in between: each image's restore after
/// another is full, its restore after nobody lazy, every value exact.
fn resume_after_another_image<M: HwPmu, S: Pmu>(
    m: &M,
    new_sim: impl Fn() -> S,
    a: Image,
    same: Image,
    differ: Image,
    what: &str,
) {
    for (b, accepted) in [(same.clone(), true), (differ.clone(), false)] {
        let mut mux = Mux::new(m, new_sim(), vec![a.clone(), b]);
        mux.install(0);
        mux.run(1_000);
        mux.uninstall();
        assert!(
            mux.keys[0].is_some(),
            "{what}: A left its registers in place"
        );
        mux.install(1);
        mux.run(2_000);
        mux.uninstall();
        assert_ne!(mux.keys[0], Some(mux.gen), "{what}: the key says full");
        // What a lazy attempt would do: the driver alone.
        if accepted {
            let want = mux.imgs[0].pmds[0].value + 1_500;
            mux.imgs[0].switch_in_lazy(&mut mux.bus);
            mux.bus.sim.deliver(Ev::Cycles, Ring::User, 1_500);
            mux.imgs[0].switch_out_keep(&mut mux.bus);
            assert_ne!(
                mux.imgs[0].pmds[0].value, want,
                "{what}: the read-back accepted B's registers and A counted right"
            );
        } else {
            assert!(mux.imgs[0].resume_refused(&mut mux.bus), "{what}");
        }
    }
    let mut mux = Mux::new(m, new_sim(), vec![a, same, differ]);
    let mut cur = 0;
    mux.install(cur);
    for round in 0..6 {
        for x in [1, 2, 0] {
            mux.run(10_000 + round * 1_000);
            if round % 2 == 0 {
                // The thread leaves and comes back; nobody used the PMU.
                let lazy = mux.lazy;
                mux.uninstall();
                mux.run(5_000);
                mux.install(cur);
                assert_eq!(mux.lazy, lazy + 1, "{what}: a lone thread's restore");
            }
            mux.switch_sets(x);
            cur = x;
        }
    }
    mux.uninstall();
    assert_eq!(
        mux.full,
        1 + 18,
        "{what}: the first install and every switch"
    );
    mux.check_values(None, what);
}

#[test]
fn a_switched_out_image_is_never_resumed_lazily() {
    for cfg in intel_configs() {
        let m = intel_model(&cfg);
        resume_after_another_image(
            &m,
            || IntelSim::new(cfg),
            intel_image(vec![ctr(0, Ev::Cycles, 1_000, 0)]),
            intel_image(vec![
                ctr(0, Ev::Cycles, 1 << 40, 0),
                ctr(1, Ev::Instructions, 0, 0),
            ]),
            intel_image(vec![ctr(0, Ev::Instructions, 1 << 40, 0)]),
            &format!("{cfg:?}"),
        );
    }
    for cfg in AMD_CONFIGS {
        let m = amd_model(&cfg);
        resume_after_another_image(
            &m,
            || AmdSim::new(cfg),
            amd_image(vec![ctr(0, Ev::Cycles, 1_000, 0)]),
            amd_image(vec![
                ctr(0, Ev::Cycles, 1 << 40, 0),
                ctr(1, Ev::Instructions, 0, 0),
            ]),
            amd_image(vec![ctr(0, Ev::Instructions, 1 << 40, 0)]),
            &format!("{cfg:?}"),
        );
    }
}

/// What a set switch leaves of the old image in the event selects. A
/// counts on counters 0 and 1 (and Intel's fixed counter 0), B on counter
/// 0 only. Where there is global control (Intel v2+, AMD PerfMonV2) the
/// stop writes only GLOBAL_CTRL and the install only B's registers: A's
/// other selects keep their enable bit (and FIXED_CTR_CTRL its field),
/// and only GLOBAL_CTRL, which names B's counters alone, keeps them from
/// counting; without global control the stop clears them. Either way
/// nothing of A's counts while B is installed (checked at every step),
/// and the PMU given back (`quiesce`) has no select enabled.
fn old_selects<M: HwPmu, S: Pmu>(m: &M, sim: S, a: Image, b: Image, what: &str) {
    let mut mux = Mux::new(m, sim, vec![a, b]);
    mux.install(0);
    mux.run(50_000);
    mux.switch_sets(1);
    let a_only = mux.imgs[0].used & !mux.imgs[1].used;
    assert_ne!(a_only, 0);
    let stale = mux.bus.sim.selects_enabled() & a_only;
    let want = if m.global_msrs().is_some() { a_only } else { 0 };
    assert_eq!(stale, want, "{what}: A's selects enabled under B");
    mux.run(50_000);
    mux.imgs[1].switch_out(&mut mux.bus);
    mux.account();
    mux.on_pmu = None;
    mux.check_gated();
    assert_eq!(mux.bus.sim.selects_enabled(), 0, "{what}: after quiesce");
    mux.check_values(None, what);
}

#[test]
fn the_old_images_selects_are_gated_under_the_new_one() {
    for cfg in intel_configs() {
        let m = intel_model(&cfg);
        let mut a = vec![ctr(0, Ev::Cycles, 0, 0), ctr(1, Ev::LlcMisses, 0, 0)];
        if m.fixed_mask() & 1 != 0 {
            a.push(ctr(16, Ev::Instructions, 0, 0));
        }
        let b = vec![ctr(0, Ev::Branches, 0, 0)];
        old_selects(
            &m,
            IntelSim::new(cfg),
            intel_image(a),
            intel_image(b),
            &format!("{cfg:?}"),
        );
    }
    for cfg in AMD_CONFIGS {
        let m = amd_model(&cfg);
        let a = vec![ctr(0, Ev::Cycles, 0, 0), ctr(1, Ev::LlcMisses, 0, 0)];
        let b = vec![ctr(0, Ev::Branches, 0, 0)];
        old_selects(
            &m,
            AmdSim::new(cfg),
            amd_image(a),
            amd_image(b),
            &format!("{cfg:?}"),
        );
    }
}
