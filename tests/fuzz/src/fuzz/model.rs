//! The PMU model the module runs, as the fuzzer's oracle needs it: which
//! registers exist, which PMC bits are the user's, which PMC values count.
//! Read from `PFM_IOC_GET_INFO` at the start of each run, before any
//! worker is forked; the `soft`
//! profile makes exactly the random draws the fuzzer made before it knew
//! other models. `soft_counters=N` (fewer counters) is the soft profile
//! with the implemented registers GET_INFO reports.

use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::OnceLock;

use perfmon::abi;

/// The model, as far as the oracle is concerned.
#[derive(Clone, Debug)]
pub(crate) struct Model {
    /// The soft model (PMCs and PMDs 0..N, N 4 or `soft_counters=`, event
    /// codes 0..3).
    pub(crate) soft: bool,
    /// Implemented PMC and PMD numbers, in order.
    pub(crate) pmcs: Vec<u16>,
    pub(crate) pmds: Vec<u16>,
    /// The same as bit masks.
    pub(crate) impl_pmcs: u64,
    pub(crate) impl_pmds: u64,
    /// Per PMC, the bits a user value must leave zero (GET_INFO).
    pub(crate) rsvd: [u64; abi::PFM_MAX_PMCS],
    /// Per PMC, the kernel-mode bits (refused without CAP_PERFMON).
    pub(crate) os_bits: [u64; abi::PFM_MAX_PMCS],
    /// (PMC, value, PMD) triples that make a PMD count (hardware models).
    pub(crate) counting: Vec<(u16, u64, u16)>,
    /// Event select and unit mask pairs (`event | umask << 8`) an event
    /// select register refuses: Intel's architectural events that CPUID
    /// marks unavailable (those missing from GET_INFO's event list).
    pub(crate) unavailable: Vec<u16>,
}

/// The SDM's architectural events (event select, unit mask), in CPUID.0AH
/// bit order.
const INTEL_ARCH_EVENTS: [(u8, u8); 8] = [
    (0x3c, 0x00),
    (0xc0, 0x00),
    (0x3c, 0x01),
    (0x2e, 0x4f),
    (0x2e, 0x41),
    (0xc4, 0x00),
    (0xc5, 0x00),
    (0xa4, 0x01),
];

/// The model of the last [`load`] (leaked: one per run), null for soft
/// with its four counters.
static MODEL: AtomicPtr<Model> = AtomicPtr::new(std::ptr::null_mut());
static SOFT: OnceLock<Model> = OnceLock::new();

/// The model read by the last [`load`], or soft's.
pub(crate) fn model() -> &'static Model {
    let p = MODEL.load(Ordering::Acquire);
    if p.is_null() {
        return SOFT.get_or_init(soft);
    }
    // SAFETY: `load` stores only leaked boxes, never freed.
    unsafe { &*p }
}

fn soft() -> Model {
    let mut rsvd = [u64::MAX; abi::PFM_MAX_PMCS];
    // Codes 0 to 6 (page faults 4 to 6); 7 is in no reserved bit but
    // no event: refused as unavailable.
    for r in rsvd.iter_mut().take(4) {
        *r = !7;
    }
    Model {
        soft: true,
        pmcs: vec![0, 1, 2, 3],
        pmds: vec![0, 1, 2, 3],
        impl_pmcs: 0xf,
        impl_pmds: 0xf,
        rsvd,
        os_bits: [0; abi::PFM_MAX_PMCS],
        counting: Vec::new(),
        unavailable: vec![7],
    }
}

fn bits(mask: u64) -> Vec<u16> {
    (0..64).filter(|i| mask & (1 << i) != 0).collect()
}

/// Reads the loaded module's model (call before forking workers).
pub(crate) fn load() -> &'static Model {
    let info = perfmon::Context::open().and_then(|c| c.raw_info());
    let Ok(info) = info else {
        return model();
    };
    let name = String::from_utf8_lossy(&info.model);
    let name = name.trim_end_matches('\0');
    if name == "soft" {
        let full = soft();
        if info.impl_pmcs == full.impl_pmcs && info.impl_pmds == full.impl_pmds {
            MODEL.store(std::ptr::null_mut(), Ordering::Release);
            return model();
        }
        // `soft_counters=N`: PMCs and PMDs 0..N, the same events.
        let m = Model {
            pmcs: bits(info.impl_pmcs),
            pmds: bits(info.impl_pmds),
            impl_pmcs: info.impl_pmcs,
            impl_pmds: info.impl_pmds,
            rsvd: info.pmc_rsvd_mask,
            ..full
        };
        MODEL.store(Box::into_raw(Box::new(m)), Ordering::Release);
        return model();
    }
    let mut os_bits = [0u64; abi::PFM_MAX_PMCS];
    let mut counting = Vec::new();
    let events: Vec<u64> = info.events[..info.num_events as usize]
        .iter()
        .map(|e| e.code)
        .collect();
    for pmc in bits(info.impl_pmcs) {
        let i = pmc as usize;
        if name.starts_with("intel_arch") && pmc == 16 {
            // IA32_FIXED_CTR_CTRL: OS is bit 0 of each counter's field.
            for pmd in bits(info.impl_pmds).into_iter().filter(|&d| d >= 16) {
                os_bits[i] |= 1 << (4 * (pmd - 16));
                counting.push((pmc, 2 << (4 * (pmd - 16)), pmd));
            }
        } else {
            // PERFEVTSELn / PERF_CTLn: OS is bit 17; PMC n counts into PMD n.
            os_bits[i] = 1 << 17;
            for &code in &events {
                counting.push((pmc, code, pmc));
            }
        }
    }
    let listed: Vec<u16> = events.iter().map(|&c| c as u16).collect();
    let unavailable = if name.starts_with("intel_arch") {
        INTEL_ARCH_EVENTS
            .iter()
            .map(|&(e, u)| e as u16 | (u as u16) << 8)
            .filter(|c| !listed.contains(c))
            .collect()
    } else {
        Vec::new()
    };
    let m = Model {
        soft: false,
        pmcs: bits(info.impl_pmcs),
        pmds: bits(info.impl_pmds),
        impl_pmcs: info.impl_pmcs,
        impl_pmds: info.impl_pmds,
        rsvd: info.pmc_rsvd_mask,
        os_bits,
        counting,
        unavailable,
    };
    MODEL.store(Box::into_raw(Box::new(m)), Ordering::Release);
    model()
}

impl Model {
    /// Whether `value` is a valid value for PMC `reg` for a caller with
    /// (`privileged`) or without CAP_PERFMON.
    pub(crate) fn pmc_ok(&self, reg: u16, value: u64, privileged: bool) -> bool {
        let i = reg as usize;
        i < abi::PFM_MAX_PMCS
            && self.impl_pmcs & (1 << i) != 0
            && value & self.rsvd[i] == 0
            && (privileged || value & self.os_bits[i] == 0)
            && !(i < 16 && self.unavailable.contains(&(value as u16)))
    }
}
