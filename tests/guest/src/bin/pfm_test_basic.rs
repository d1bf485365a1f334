//! pfm_test_basic: the module loads, /dev/perfmon and sysfs appear,
//! GET_INFO is sane, a context goes through its whole life on the calling
//! thread, module parameters work, rmmod is refused while a context is open
//! and works once it is closed.

use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::time::Duration;

use perfmon::abi::*;
use perfmon::sysfs::{self, SysInfo};
use perfmon::{Context, CtxState};
use pfm_guest::{ensure, module, soft_context, work, ResultExt, Tap, TestResult};

const PLAN: usize = 16;

fn dev_node() -> TestResult {
    let meta = std::fs::metadata(perfmon::DEVICE).ctx(perfmon::DEVICE)?;
    ensure!(
        meta.file_type().is_char_device(),
        "{} is not a character device",
        perfmon::DEVICE
    );
    Ok(())
}

fn sysfs_sane() -> TestResult {
    let s = SysInfo::read();
    pfm_guest::tap::diag(format!("sysfs: {s:?}"));
    ensure!(
        s.abi_version == Some(PFM_ABI_VERSION),
        "abi_version {:?}",
        s.abi_version
    );
    ensure!(
        s.pmu_model.as_deref() == Some("soft"),
        "pmu_model {:?} (no PMU here: soft expected)",
        s.pmu_model
    );
    ensure!(
        s.live_contexts == Some(0),
        "live_contexts {:?} before any open",
        s.live_contexts
    );
    ensure!(
        s.zombie_contexts == Some(0),
        "zombie_contexts {:?}",
        s.zombie_contexts
    );
    ensure!(s.vector.is_some(), "no {}/vector", sysfs::SYSFS_DIR);
    Ok(())
}

fn info_sane() -> TestResult {
    let ctx = Context::open().ctx("open")?;
    let raw = ctx.raw_info().ctx("GET_INFO")?;
    let pmu = perfmon::PmuInfo::from_raw(&raw);
    pfm_guest::tap::diag(format!(
        "model={} pmcs={} pmds={} width={} vector={:#x} impl_pmcs={:#x} impl_pmds={:#x} events={:?}",
        pmu.model, pmu.num_pmcs, pmu.num_pmds, pmu.counter_width, pmu.vector, pmu.impl_pmcs,
        pmu.impl_pmds, pmu.events
    ));
    ensure!(
        raw.abi_version == PFM_ABI_VERSION,
        "abi_version {}",
        raw.abi_version
    );
    ensure!(
        raw.size as usize == std::mem::size_of::<PfmInfo>(),
        "size {}",
        raw.size
    );
    ensure!(pmu.model == "soft", "model '{}'", pmu.model);
    ensure!(
        raw.num_pmcs >= 4 && raw.num_pmds >= 4,
        "{} PMCs, {} PMDs: 4 expected",
        raw.num_pmcs,
        raw.num_pmds
    );
    ensure!(
        raw.impl_pmcs & 0xf == 0xf && raw.impl_pmds & 0xf == 0xf,
        "PMC/PMD 0-3 not all implemented"
    );
    ensure!(
        raw.impl_pmcs.count_ones() == u32::from(raw.num_pmcs),
        "impl_pmcs disagrees with num_pmcs"
    );
    ensure!(
        raw.impl_pmds.count_ones() == u32::from(raw.num_pmds),
        "impl_pmds disagrees with num_pmds"
    );
    ensure!(
        (16..=64).contains(&raw.counter_width),
        "counter_width {}",
        raw.counter_width
    );
    ensure!(
        usize::from(raw.num_events) <= PFM_MAX_EVENTS,
        "num_events {}",
        raw.num_events
    );
    for (name, code) in [
        ("task-clock", PFM_SOFT_EV_TASK_CLOCK),
        ("context-switches", PFM_SOFT_EV_CONTEXT_SWITCHES),
        ("cpu-migrations", PFM_SOFT_EV_CPU_MIGRATIONS),
        ("page-faults", PFM_SOFT_EV_PAGE_FAULTS),
        ("minor-faults", PFM_SOFT_EV_MINOR_FAULTS),
        ("major-faults", PFM_SOFT_EV_MAJOR_FAULTS),
    ] {
        let e = pmu.event(name).ctx("event")?;
        ensure!(
            e.code == code,
            "{name} has code {} (header says {code})",
            e.code
        );
    }
    for (i, e) in raw
        .events
        .iter()
        .enumerate()
        .take(usize::from(raw.num_events))
    {
        ensure!(e.name.contains(&0), "event {i} name not NUL-terminated");
    }
    for n in 0..4 {
        ensure!(
            raw.pmc_rsvd_mask[n] & 7 == 0,
            "PMC{n} reserved mask {:#x} covers event codes",
            raw.pmc_rsvd_mask[n]
        );
        ensure!(
            raw.pmc_rsvd_mask[n] & !7 != 0,
            "PMC{n} reserved mask {:#x} reserves nothing",
            raw.pmc_rsvd_mask[n]
        );
    }
    ensure!(
        raw.reserved0 == 0 && raw.reserved == [0; 3],
        "reserved fields not zero: {} {:?}",
        raw.reserved0,
        raw.reserved
    );
    ensure!(
        raw.core_types == 0,
        "core_types {:#x} on a machine without hybrid cores",
        raw.core_types
    );
    let s = SysInfo::read();
    ensure!(
        s.pmu_model.as_deref() == Some(pmu.model.as_str()),
        "sysfs pmu_model {:?} != {}",
        s.pmu_model,
        pmu.model
    );
    ensure!(
        s.vector == Some(raw.vector),
        "sysfs vector {:?} != GET_INFO vector {}",
        s.vector,
        raw.vector
    );
    Ok(())
}

fn fresh_state_and_counting() -> TestResult {
    let (ctx, _) = soft_context()?;
    ensure!(
        module::live_contexts() == Some(1),
        "live_contexts {:?} with one context open",
        module::live_contexts()
    );
    let st = ctx.state().ctx("GET_STATE")?;
    ensure!(
        st.state == CtxState::Unloaded && st.tid == 0 && st.status == 0,
        "fresh context: {st:?}"
    );
    ensure!(
        st.used_pmds & 7 == 7,
        "used_pmds {:#x} after writing PMD 0-2",
        st.used_pmds
    );
    ctx.load(0).ctx("LOAD self")?;
    let st = ctx.state().ctx("GET_STATE")?;
    let tid = perfmon::process::gettid();
    ensure!(
        st.state == CtxState::Loaded && st.tid == tid,
        "after LOAD: {st:?}, tid {tid}"
    );
    ensure!(st.is_active(), "self LOAD not ACTIVE at once: {st:?}");
    ensure!(!st.is_started(), "STARTED before START: {st:?}");
    ctx.start().ctx("START")?;
    ensure!(
        ctx.state().ctx("GET_STATE")?.is_started(),
        "START did not set STARTED"
    );
    work::spin(Duration::from_millis(20));
    std::thread::sleep(Duration::from_millis(5));
    ctx.stop().ctx("STOP")?;
    ensure!(
        !ctx.state().ctx("GET_STATE")?.is_started(),
        "STOP left STARTED"
    );
    let a = ctx.read().ctx("READ_PMDS")?;
    work::spin(Duration::from_millis(5));
    let b = ctx.read().ctx("READ_PMDS")?;
    pfm_guest::tap::diag(format!("counts: {a:?}"));
    ensure!(a == b, "counters moved while stopped: {a:?} then {b:?}");
    ensure!(
        a.values[0] >= 15_000_000,
        "task-clock {} ns after a 20 ms spin",
        a.values[0]
    );
    ensure!(a.values[1] >= 1, "no context switch across a 5 ms sleep");
    ensure!(
        a.time_enabled >= a.time_running && a.time_running > 0,
        "times {a:?}"
    );
    ensure!(
        a.time_running >= a.values[0] / 2,
        "time_running {} far below task-clock {}",
        a.time_running,
        a.values[0]
    );
    ctx.unload().ctx("UNLOAD")?;
    let st = ctx.state().ctx("GET_STATE")?;
    ensure!(
        st.state == CtxState::Unloaded && st.tid == 0,
        "after UNLOAD: {st:?}"
    );
    let c = ctx.read().ctx("READ_PMDS after UNLOAD")?;
    ensure!(
        c.values == a.values,
        "values changed by UNLOAD: {:?} -> {:?}",
        a.values,
        c.values
    );
    Ok(())
}

fn initial_values_count_on() -> TestResult {
    let (ctx, _) = soft_context()?;
    let start = 1_000_000_000_000u64;
    let mut pmds = [PfmPmd {
        reg_num: 0,
        reg_value: start,
        ..Default::default()
    }];
    ctx.write_pmds(&mut pmds).ctx("WRITE_PMDS")?;
    ctx.load(0).ctx("LOAD")?;
    ctx.start().ctx("START")?;
    work::spin(Duration::from_millis(5));
    ctx.stop().ctx("STOP")?;
    let v = ctx.read().ctx("READ")?.values[0];
    ensure!(
        v > start + 2_000_000 && v < start + 10_000_000_000,
        "task-clock from {start}: {v}"
    );
    // A second start/stop accumulates.
    ctx.start().ctx("START 2")?;
    work::spin(Duration::from_millis(5));
    ctx.stop().ctx("STOP 2")?;
    let w = ctx.read().ctx("READ 2")?.values[0];
    ensure!(w > v + 2_000_000, "second run did not add: {v} -> {w}");
    Ok(())
}

fn rmmod_refused_while_open() -> TestResult {
    let ctx = Context::open().ctx("open")?;
    let r = std::process::Command::new("rmmod")
        .arg("perfmon")
        .output()
        .ctx("run rmmod")?;
    ensure!(!r.status.success(), "rmmod succeeded with a context open");
    ensure!(module::is_loaded(), "module gone while a context is open");
    drop(ctx);
    module::wait_contexts(0, Duration::from_secs(2))
}

fn params_width_16() -> TestResult {
    module::insmod(&["pmu=soft", "soft_width=16"])?;
    let res = (|| {
        let ctx = Context::open().ctx("open")?;
        let info = ctx.info().ctx("GET_INFO")?;
        ensure!(
            info.counter_width == 16,
            "counter_width {} with soft_width=16",
            info.counter_width
        );
        ensure!(info.model == "soft", "model {}", info.model);
        let s = SysInfo::read();
        ensure!(
            s.param_soft_width.map_or(true, |w| w == 16),
            "parameter soft_width reads {:?}",
            s.param_soft_width
        );
        Ok(())
    })();
    let un = module::rmmod();
    res.and(un)
}

fn bad_params_refused() -> TestResult {
    for params in [&["soft_width=8"][..], &["soft_width=65"], &["pmu=bogus"]] {
        if module::insmod(params).is_ok() {
            let _ = module::rmmod();
            return Err(format!("insmod with {params:?} succeeded"));
        }
        ensure!(
            !module::is_loaded(),
            "module loaded after a failed insmod {params:?}"
        );
    }
    Ok(())
}

/// The kernel log, as `dmesg` prints it.
fn kernel_log() -> Result<String, String> {
    let out = std::process::Command::new("dmesg")
        .output()
        .ctx("run dmesg")?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// No machine here has a PMU: asking for a hardware model by name fails the
/// load with ENODEV and a line saying why, and leaves nothing loaded.
fn hardware_models_refused() -> TestResult {
    for (model, why) in [
        (
            "intel_arch",
            "intel_arch: CPUID leaf 0xA announces no architectural perfmon",
        ),
        (
            "amd64",
            "amd64: CPUID announces no AMD64 core performance counters",
        ),
    ] {
        let param = format!("pmu={model}");
        let path = module::module_path();
        let out = std::process::Command::new("insmod")
            .args([path.as_str(), param.as_str()])
            .output()
            .ctx("run insmod")?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(!out.status.success(), "insmod {param} succeeded");
        ensure!(
            stderr.contains("No such device"),
            "insmod {param}: expected ENODEV, got: {}",
            stderr.trim()
        );
        ensure!(!module::is_loaded(), "module loaded after insmod {param}");
        let log = kernel_log()?;
        ensure!(
            log.lines().any(|l| l.contains("perfmon: ")
                && l.contains(why)
                && l.contains("refusing to load")),
            "no kernel line saying why {param} was refused"
        );
    }
    Ok(())
}

/// `pmu=auto` (the default) picks soft here and says why in the log.
fn auto_picks_soft_and_says_why() -> TestResult {
    module::insmod(&[])?;
    let res = (|| {
        let log = kernel_log()?;
        let line = log
            .lines()
            .filter(|l| l.contains("perfmon: PMU model"))
            .last()
            .ok_or("no 'PMU model' line in the kernel log")?;
        ensure!(
            line.contains("PMU model soft") && line.contains("announces no usable PMU (CPUID)"),
            "load line: {line}"
        );
        let ctx = Context::open().ctx("open")?;
        let info = ctx.info().ctx("GET_INFO")?;
        ensure!(info.model == "soft", "model {}", info.model);
        Ok(())
    })();
    let un = module::rmmod();
    res.and(un)
}

fn main() {
    pfm_guest::child::dispatch();
    let mut t = Tap::new(PLAN);
    pfm_guest::watchdog(Duration::from_secs(240));
    t.require("insmod perfmon.ko", module::insmod(&[]));
    t.require("/dev/perfmon exists and is a character device", dev_node());
    t.run(
        "sysfs: abi_version, pmu_model, live/zombie contexts, vector",
        sysfs_sane,
    );
    t.run("GET_INFO is sane and agrees with sysfs", info_sane);
    t.run(
        "context life on the calling thread: state, counts, stop, unload",
        fresh_state_and_counting,
    );
    t.run("live_contexts back to 0 after close", || {
        module::wait_contexts(0, Duration::from_secs(2))
    });
    t.run(
        "initial PMD values are counted on from, runs accumulate",
        initial_values_count_on,
    );
    t.run(
        "rmmod refused while a context is open",
        rmmod_refused_while_open,
    );
    t.run("rmmod perfmon", module::rmmod);
    t.run(
        "/dev/perfmon and /sys/kernel/perfmon gone after rmmod",
        || {
            ensure!(
                !Path::new(perfmon::DEVICE).exists(),
                "/dev/perfmon still there"
            );
            ensure!(!SysInfo::present(), "sysfs directory still there");
            let e = Context::open()
                .err()
                .ok_or("open succeeded without the module")?;
            ensure!(
                e.to_string().starts_with("perfmon module not loaded"),
                "error without the module: {e}"
            );
            Ok(())
        },
    );
    t.run(
        "insmod pmu=soft soft_width=16: counter_width 16, rmmod",
        params_width_16,
    );
    t.run(
        "insmod refuses soft_width=8, soft_width=65, pmu=bogus",
        bad_params_refused,
    );
    t.run(
        "insmod pmu=intel_arch and pmu=amd64 fail with ENODEV and say why (no PMU here)",
        hardware_models_refused,
    );
    t.run(
        "pmu=auto picks soft and says why (CPUID announces no PMU)",
        auto_picks_soft_and_says_why,
    );
    t.run("insmod again after everything", || module::insmod(&[]));
    t.run("rmmod perfmon (final)", module::rmmod);
    t.finish();
}
