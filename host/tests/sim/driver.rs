// SPDX-License-Identifier: GPL-2.0

//! A reference of the kernel side: programs a PMU through `HwPmu` only, in
//! the order `pfm_x86/model.rs` documents, and virtualizes the counters to
//! 64 bits with `pfm_counter::advance`. Any #GP from the simulator is a bug
//! in the model (a wrong MSR or value) and panics the test.

use super::MsrBus;
use pfm_host_tests::abi::{PFM_MAX_PMCS, PFM_MAX_PMDS};
use pfm_host_tests::pfm_counter::advance;
use pfm_host_tests::pfm_x86::model::{HwPmu, PmcError, Policy};

/// A PMD's software state.
#[derive(Clone, Copy, Debug, Default)]
pub struct Pmd {
    /// The 64-bit virtual value.
    pub value: u64,
    /// The counter's raw value at the last write or read.
    pub prev: u64,
    /// Reload value after an overflow.
    pub reset: u64,
    /// 64-bit overflows seen.
    pub overflows: u64,
}

/// One context on one PMU.
pub struct Driver<'a, M: HwPmu> {
    /// The model.
    pub model: &'a M,
    /// Validated PMC values.
    pub pmcs: [Option<u64>; PFM_MAX_PMCS],
    /// PMD state.
    pub pmds: [Pmd; PFM_MAX_PMDS],
    /// The PMDs the written PMCs make count.
    pub used: u64,
    /// Started.
    pub started: bool,
}

fn wr<B: MsrBus>(bus: &mut B, msr: u32, v: u64) {
    if let Err(gp) = bus.wrmsr(msr, v) {
        panic!("#GP: {gp:x?}");
    }
}

fn rd<B: MsrBus>(bus: &mut B, msr: u32) -> u64 {
    match bus.rdmsr(msr) {
        Ok(v) => v,
        Err(gp) => panic!("#GP: {gp:x?}"),
    }
}

fn bits(mask: u64) -> impl Iterator<Item = usize> {
    (0..64).filter(move |i| mask & (1 << i) != 0)
}

impl<'a, M: HwPmu> Driver<'a, M> {
    /// A fresh context.
    pub fn new(model: &'a M) -> Self {
        Driver {
            model,
            pmcs: [None; PFM_MAX_PMCS],
            pmds: [Pmd::default(); PFM_MAX_PMDS],
            used: 0,
            started: false,
        }
    }

    /// `PFM_IOC_WRITE_PMCS` for one element.
    pub fn write_pmc(&mut self, pmc: usize, value: u64, policy: Policy) -> Result<(), PmcError> {
        let v = self.model.validate_pmc(pmc, value, policy)?;
        self.pmcs[pmc] = Some(v);
        self.used = 0;
        for (i, p) in self.pmcs.iter().enumerate() {
            if let Some(v) = p {
                self.used |= self.model.pmc_pmds(i, *v);
            }
        }
        Ok(())
    }

    /// `PFM_IOC_WRITE_PMDS` for one element.
    pub fn write_pmd(&mut self, pmd: usize, value: u64, reset: u64) -> Result<(), PmcError> {
        self.model.pmd_desc(pmd).ok_or(PmcError::NotAvailable)?;
        self.pmds[pmd] = Pmd {
            value,
            prev: 0,
            reset,
            overflows: 0,
        };
        Ok(())
    }

    fn arm<B: MsrBus>(&mut self, bus: &mut B, pmd: usize) {
        let w = self
            .model
            .pmd_write(pmd, self.pmds[pmd].value)
            .expect("PMD exists");
        wr(bus, w.msr, w.value);
        self.pmds[pmd].prev = w.raw;
    }

    fn write_pmcs<B: MsrBus>(&mut self, bus: &mut B, enable: bool) {
        for (i, p) in self.pmcs.iter().enumerate() {
            if let Some(v) = p {
                let d = self.model.pmc_desc(i).expect("PMC exists");
                wr(bus, d.msr, self.model.pmc_hw_value(i, *v, enable));
            }
        }
    }

    /// Reads PMD `pmd` and folds it into its 64-bit value; returns the raw read.
    fn fold<B: MsrBus>(&mut self, bus: &mut B, pmd: usize) -> u64 {
        let d = self.model.pmd_desc(pmd).expect("PMD exists");
        let raw = rd(bus, d.msr);
        let p = &mut self.pmds[pmd];
        let a = advance(p.value, self.model.pmd_delta(pmd, p.prev, raw), p.reset);
        p.value = a.value;
        p.overflows += a.overflows;
        p.prev = raw;
        raw
    }

    /// Installs the context on the PMU, stopped.
    pub fn load<B: MsrBus>(&mut self, bus: &mut B) {
        if let Some(g) = self.model.global_msrs() {
            wr(bus, g.ctrl, 0);
            self.write_pmcs(bus, true);
        } else {
            self.write_pmcs(bus, false);
        }
        for pmd in bits(self.used) {
            self.arm(bus, pmd);
        }
    }

    /// Starts counting.
    pub fn start<B: MsrBus>(&mut self, bus: &mut B) {
        self.started = true;
        match self.model.global_msrs() {
            Some(g) => wr(bus, g.ctrl, self.model.global_ctrl_value(self.used)),
            None => self.write_pmcs(bus, true),
        }
    }

    /// Stops counting and folds every counter; re-arms them (stopped) so a
    /// later start counts from armed values.
    pub fn stop<B: MsrBus>(&mut self, bus: &mut B) {
        self.started = false;
        match self.model.global_msrs() {
            Some(g) => wr(bus, g.ctrl, 0),
            None => self.write_pmcs(bus, false),
        }
        for pmd in bits(self.used) {
            self.fold(bus, pmd);
            self.arm(bus, pmd);
        }
        if let Some(g) = self.model.global_msrs() {
            let wrapped = self.model.status_pmds(rd(bus, g.status)) & self.used;
            if wrapped != 0 {
                wr(bus, g.ack, self.model.ack_value(wrapped));
            }
        }
    }

    /// The overflow interrupt: returns the PMDs whose hardware counter
    /// wrapped.
    pub fn pmi<B: MsrBus>(&mut self, bus: &mut B) -> u64 {
        let mut wrapped = 0;
        match self.model.global_msrs() {
            Some(g) => {
                wr(bus, g.ctrl, 0);
                let status = rd(bus, g.status);
                wrapped = self.model.status_pmds(status) & self.used;
                for pmd in bits(self.used) {
                    self.fold(bus, pmd);
                }
                for pmd in bits(wrapped) {
                    self.arm(bus, pmd);
                }
                if wrapped != 0 {
                    wr(bus, g.ack, self.model.ack_value(wrapped));
                }
                if self.started {
                    wr(bus, g.ctrl, self.model.global_ctrl_value(self.used));
                }
            }
            None => {
                self.write_pmcs(bus, false);
                for pmd in bits(self.used) {
                    let raw = self.fold(bus, pmd);
                    if self.model.pmd_raw_overflowed(pmd, raw) {
                        wrapped |= 1 << pmd;
                        self.arm(bus, pmd);
                    }
                }
                if self.started {
                    self.write_pmcs(bus, true);
                }
            }
        }
        wrapped
    }

    /// Handles every PMI the bus raised; returns how many there were.
    pub fn service<B: MsrBus>(&mut self, bus: &mut B) -> u64 {
        let n = bus.take_pmis();
        if n > 0 {
            self.pmi(bus);
        }
        n
    }
}
