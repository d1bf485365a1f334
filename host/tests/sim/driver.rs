// SPDX-License-Identifier: GPL-2.0

//! The module's own driver (`pfm_x86/driver.rs`: install, start, stop, the
//! overflow interrupt) run against a simulator, with the bookkeeping a
//! context keeps around it. Any #GP from the simulator is a bug in the model
//! or the driver (a wrong MSR or value) and panics the test.

use super::MsrBus;
use pfm_host_tests::abi::{PFM_MAX_PMCS, PFM_MAX_PMDS};
use pfm_host_tests::pfm_counter::PmdState;
use pfm_host_tests::pfm_x86::driver::{self, HwRegs, MsrFault, Outcome};
use pfm_host_tests::pfm_x86::model::{HwPmu, PmcError, Policy};

/// A PMD as the tests see it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Pmd {
    /// The 64-bit virtual value.
    pub value: u64,
    /// 64-bit overflows seen.
    pub overflows: u64,
}

/// One context on one PMU.
pub struct Driver<'a, M: HwPmu> {
    /// The model.
    pub model: &'a M,
    /// Validated PMC values.
    pub pmcs: [u64; PFM_MAX_PMCS],
    /// PMCs written.
    pub pmc_used: u64,
    /// The module's PMD state.
    pub state: [PmdState; PFM_MAX_PMDS],
    /// The raw counter values the driver keeps beside `state`.
    pub raw: [u64; PFM_MAX_PMDS],
    /// What the tests read: values and overflow counts.
    pub pmds: [Pmd; PFM_MAX_PMDS],
    /// The PMDs the written PMCs make count.
    pub used: u64,
    /// Started.
    pub started: bool,
    /// 64-bit overflows per PMD, as the driver tallied them.
    pub tally: [u64; PFM_MAX_PMDS],
}

/// The simulator as the module's bus: a #GP panics.
struct Strict<'b, B: MsrBus>(&'b mut B);

impl<B: MsrBus> driver::MsrBus for Strict<'_, B> {
    fn rdmsr(&mut self, msr: u32) -> Result<u64, MsrFault> {
        match self.0.rdmsr(msr) {
            Ok(v) => Ok(v),
            Err(gp) => panic!("#GP: {gp:x?}"),
        }
    }
    fn wrmsr(&mut self, msr: u32, value: u64) -> Result<(), MsrFault> {
        match self.0.wrmsr(msr, value) {
            Ok(()) => Ok(()),
            Err(gp) => panic!("#GP: {gp:x?}"),
        }
    }
}

impl<'a, M: HwPmu> Driver<'a, M> {
    /// A fresh context.
    pub fn new(model: &'a M) -> Self {
        Driver {
            model,
            pmcs: [0; PFM_MAX_PMCS],
            pmc_used: 0,
            state: [PmdState::default(); PFM_MAX_PMDS],
            raw: [0; PFM_MAX_PMDS],
            pmds: [Pmd::default(); PFM_MAX_PMDS],
            used: 0,
            started: false,
            tally: [0; PFM_MAX_PMDS],
        }
    }

    /// `PFM_IOC_WRITE_PMCS` for one element.
    pub fn write_pmc(&mut self, pmc: usize, value: u64, policy: Policy) -> Result<(), PmcError> {
        let v = self.model.validate_pmc(pmc, value, policy)?;
        self.pmcs[pmc] = v;
        self.pmc_used |= 1 << pmc;
        self.used = 0;
        for i in 0..PFM_MAX_PMCS {
            if self.pmc_used & (1 << i) != 0 {
                self.used |= self.model.pmc_pmds(i, self.pmcs[i]);
            }
        }
        Ok(())
    }

    /// `PFM_IOC_WRITE_PMDS` for one element: value and short reset.
    pub fn write_pmd(&mut self, pmd: usize, value: u64, reset: u64) -> Result<(), PmcError> {
        self.model.pmd_desc(pmd).ok_or(PmcError::NotAvailable)?;
        self.state[pmd] = PmdState::default();
        self.state[pmd].write(value);
        self.state[pmd].short_reset = reset;
        self.pmds[pmd] = Pmd {
            value,
            overflows: 0,
        };
        self.tally[pmd] = 0;
        Ok(())
    }

    /// `PFM_REGFL_RANDOM` on `pmd` (written already): its resets less a
    /// draw of the generator seeded with `seed`, in `[0, mask]`.
    pub fn randomise(&mut self, pmd: usize, mask: u64, seed: u64) {
        self.state[pmd].set_random(
            pfm_host_tests::pfm_random::PeriodRandom::new(seed, mask).expect("a 2^k - 1 mask"),
        );
    }

    /// Runs one driver sequence and records what it found.
    fn run<B: MsrBus>(
        &mut self,
        bus: &mut B,
        seq: impl FnOnce(&mut HwRegs<'_, M>, &mut Strict<'_, B>) -> Outcome,
    ) -> Outcome {
        let mut regs = HwRegs {
            model: self.model,
            pmcs: &self.pmcs,
            pmc_used: self.pmc_used,
            pmds: &mut self.state,
            raw: &mut self.raw,
            used: self.used,
            tally: Some(&mut self.tally),
            random_before: None,
            min_arm: pfm_host_tests::pfm_x86::model::MIN_ARM_EVENTS,
        };
        let out = seq(&mut regs, &mut Strict(bus));
        assert_eq!(out.fault, None);
        for i in 0..PFM_MAX_PMDS {
            self.pmds[i].value = self.state[i].value;
            self.pmds[i].overflows = self.tally[i];
        }
        out
    }

    /// Installs the context on the PMU, stopped.
    pub fn load<B: MsrBus>(&mut self, bus: &mut B) {
        self.run(bus, |r, b| r.install(b, false));
    }

    /// Starts counting.
    pub fn start<B: MsrBus>(&mut self, bus: &mut B) {
        self.started = true;
        self.run(bus, |r, b| {
            let mut out = Outcome::default();
            r.start(b, &mut out);
            out
        });
    }

    /// Stops counting and folds every counter; re-arms them (stopped) so a
    /// later start counts from armed values.
    pub fn stop<B: MsrBus>(&mut self, bus: &mut B) {
        self.started = false;
        self.run(bus, |r, b| r.stop(b, true));
    }

    /// The overflow interrupt: returns the PMDs whose hardware counter
    /// wrapped.
    pub fn pmi<B: MsrBus>(&mut self, bus: &mut B) -> u64 {
        let started = self.started;
        self.run(bus, |r, b| r.pmi(b, started)).wrapped
    }

    /// Handles every PMI the bus raised; returns how many there were.
    pub fn service<B: MsrBus>(&mut self, bus: &mut B) -> u64 {
        let n = bus.take_pmis();
        if n > 0 {
            self.pmi(bus);
        }
        n
    }

    /// Takes the context off the PMU (a switch-out): stopped and folded,
    /// not re-armed; then leaves every PMC disabled, as another thread
    /// would find the PMU.
    pub fn switch_out<B: MsrBus>(&mut self, bus: &mut B) {
        self.run(bus, |r, b| r.stop(b, false));
        let out = driver::quiesce(self.model, &mut Strict(bus));
        assert_eq!(out.fault, None);
    }

    /// Takes the context off the PMU and leaves its registers there, as
    /// when no other context runs before it comes back; returns whether a
    /// lazy restore may follow (nothing wrapped or overflowed at the stop,
    /// so every counter is still armed where the module put it).
    pub fn switch_out_keep<B: MsrBus>(&mut self, bus: &mut B) -> bool {
        let out = self.run(bus, |r, b| r.stop(b, false));
        out.wrapped == 0 && out.overflowed == 0
    }

    /// Puts the context back on a PMU that kept its registers (lazy
    /// restore): counting again with the start write alone.
    pub fn switch_in_lazy<B: MsrBus>(&mut self, bus: &mut B) {
        assert!(self.started);
        self.run(bus, |r, b| r.resume(b).expect("the PMU kept the registers"));
    }

    /// A lazy restore on a PMU that lost its state: refused.
    pub fn resume_refused<B: MsrBus>(&mut self, bus: &mut B) -> bool {
        let mut refused = false;
        self.run(bus, |r, b| {
            r.resume(b).unwrap_or_else(|| {
                refused = true;
                Outcome::default()
            })
        });
        refused
    }

    /// Puts the context back (a switch-in), counting if started.
    pub fn switch_in<B: MsrBus>(&mut self, bus: &mut B) {
        let started = self.started;
        self.run(bus, |r, b| r.install(b, started));
    }
}
