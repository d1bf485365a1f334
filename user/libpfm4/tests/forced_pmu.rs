//! libpfm4 through this crate with `LIBPFM_FORCE_PMU=skl` (Skylake's table
//! on any CPU): the encodings pfm relies on, checked against the Intel SDM.
//! One test in its own binary: the variable must be set before libpfm4
//! initializes, once per process.

use libpfm4::{Error, Library, Vendor};

/// IA32_PERFEVTSEL bits libpfm4 sets on every encoding: EN (22) and INT (20).
const EN_INT: u64 = 1 << 22 | 1 << 20;
/// USR (16), OS (17).
const USR: u64 = 1 << 16;
const OS: u64 = 1 << 17;

#[test]
fn skylake_table() {
    std::env::set_var("LIBPFM_FORCE_PMU", "skl");
    let lib = match Library::open() {
        // Only a build asked to go without libpfm4 may skip this; a missing
        // libpfm.a otherwise fails here rather than passing unchecked.
        Err(Error::NotBuiltIn) if option_env!("LIBPFM_A") == Some("none") => {
            eprintln!("built with LIBPFM_A=none: nothing to check");
            return;
        }
        other => other.expect("libpfm4 initializes"),
    };
    let pmu = lib.core_pmu(Vendor::Intel).expect("the forced skl PMU");
    assert_eq!(pmu.name, "skl");
    assert!(pmu.desc.starts_with("Intel"), "{}", pmu.desc);
    assert!(lib.core_pmu(Vendor::Amd).is_none());

    // SDM: INST_RETIRED.ANY_P is event C0H, umask 00H; CPU_CLK_UNHALTED.THREAD_P
    // is 3CH/00H; BR_MISP_RETIRED.ALL_BRANCHES C5H/00H.
    for (name, code) in [
        ("INST_RETIRED.ANY_P:u", 0xc0 | USR),
        ("INST_RETIRED:ANY_P:u", 0xc0 | USR),
        ("INST_RETIRED.ANY_P", 0xc0 | USR),
        ("inst_retired.any_p", 0xc0 | USR),
        ("skl::INST_RETIRED:ANY_P:k", 0xc0 | OS),
        ("CPU_CLK_UNHALTED.THREAD_P:u", 0x3c | USR),
        ("BR_MISP_RETIRED.ALL_BRANCHES", 0xc5 | USR),
        ("INST_RETIRED.ANY_P:u:c=1", 0xc0 | USR | 1 << 24),
    ] {
        let enc = lib
            .encode(pmu, name)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(enc.codes[0], code | EN_INT, "{name}: {:#x}", enc.codes[0]);
        assert!(enc.qualified.starts_with("skl::"), "{}", enc.qualified);
    }
    assert!(matches!(
        lib.encode(pmu, "INST_RETIRD.ANY_P"),
        Err(Error::UnknownEvent { .. })
    ));
    assert!(matches!(
        lib.encode(pmu, "hsw::INST_RETIRED.ANY_P"),
        Err(Error::UnknownEvent { .. })
    ));
    // perf's generic names are not the core PMU's.
    assert!(lib.encode(pmu, "PERF_COUNT_HW_CPU_CYCLES").is_err());
    assert!(matches!(
        lib.encode(pmu, "INST_RETIRED.ANY_P:bogus=1"),
        Err(Error::Encode { .. })
    ));

    let events = lib.events(pmu);
    assert!(events.len() >= 50, "{} events", events.len());
    let inst = events
        .iter()
        .find(|e| e.name == "INST_RETIRED")
        .expect("INST_RETIRED listed");
    assert!(inst.umasks.iter().any(|u| u.name == "ANY_P"));
    assert!(inst.modifiers.iter().any(|m| m.name == "u"));
    assert!(inst.names().contains(&"INST_RETIRED.ANY_P".to_string()));
}
