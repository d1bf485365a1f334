// SPDX-License-Identifier: GPL-2.0

//! The Intel simulator lives with the module (`pfm_x86/intel_sim.rs`: the
//! module also runs it as its `intel_arch_sim` model); here it is driven
//! through the tests' bus, which reports each #GP.

use super::{Gp, MsrBus};
#[allow(unused_imports)]
pub use pfm_host_tests::pfm_x86::intel_sim::{fixed_event, IntelCfg, IntelSim};

impl MsrBus for IntelSim {
    fn rdmsr(&mut self, msr: u32) -> Result<u64, Gp> {
        let r = self.read(msr);
        self.inject();
        r
    }

    fn wrmsr(&mut self, msr: u32, value: u64) -> Result<(), Gp> {
        self.write(msr, value)?;
        self.inject();
        Ok(())
    }

    fn take_pmis(&mut self) -> u64 {
        IntelSim::take_pmis(self)
    }
}
