//! Shared pieces of the guest test programs (`src/bin/pfm_test_*.rs`):
//! a TAP printer, child processes, raw ABI misuse, workloads, and the
//! comparisons against perf_event. Module loading, waits, becoming another
//! user and the raw ioctl layer come from `pfm_test_support`
//! (tests/support), which tests/fuzz shares.
//!
//! Every program: calls [`child::dispatch`] first, starts a [`watchdog`],
//! loads perfmon.ko itself with the parameters it needs (bailing out with a
//! clear reason when it cannot: no module, insmod failure), runs its cases,
//! and unloads the module as its last case (rmmod must succeed).

pub mod child;
pub mod edges;
pub mod frames;
pub mod raw;
pub mod tap;
pub mod work;

use std::time::Duration;

use perfmon::perf::{PerfGroup, SoftwareEvent};
use perfmon::{Context, Event};

pub use pfm_test_support::module;
pub use tap::{ResultExt, Tap, TestResult};

/// The soft model's events, in the order the tests program them.
pub const SOFT_EVENTS: [&str; 3] = ["task-clock", "context-switches", "cpu-migrations"];

/// perf's events for [`SOFT_EVENTS`], same order.
pub const PERF_EVENTS: [SoftwareEvent; 3] = [
    SoftwareEvent::TaskClock,
    SoftwareEvent::ContextSwitches,
    SoftwareEvent::CpuMigrations,
];

/// -`period` in a counter of `width` bits: the value a sampling PMD is
/// written (and reset) to, so that it overflows at the period's last event.
pub fn minus_period(period: u64, width: u16) -> u64 {
    if width >= 64 {
        period.wrapping_neg()
    } else {
        (1u64 << width) - period
    }
}

/// How much slower than an idle machine this guest runs, as a factor of
/// at least 1: `PFM_SLOWDOWN` (percent, exported by the guest's init from
/// the kernel command line's `pfm.slowdown=`, which scripts/vm.sh measures
/// on the host before it boots the guest: the share of a CPU a thread gets
/// there, which is what a TCG vCPU's speed follows). 1 when absent.
pub fn slowdown() -> f64 {
    let from_env = std::env::var("PFM_SLOWDOWN").ok();
    let from_cmdline = || {
        std::fs::read_to_string("/proc/cmdline")
            .ok()?
            .split_whitespace()
            .find_map(|w| w.strip_prefix("pfm.slowdown=").map(str::to_string))
    };
    from_env
        .or_else(from_cmdline)
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(1.0, |pct| (pct as f64 / 100.0).max(1.0))
}

/// `d` scaled by [`slowdown`]: a limit set for an idle machine, on this one.
pub fn scaled(d: Duration) -> Duration {
    d.mul_f64(slowdown())
}

/// Ends the program with `Bail out!` if it runs longer than `limit` on an
/// idle machine, scaled by the guest's measured [`slowdown`] (something
/// waits forever); the guest's own timeout is the last resort. The line
/// names the program and the case it was in (what it was waiting for:
/// [`tap::current_case`]).
pub fn watchdog(limit: Duration) {
    let scaled_limit = scaled(limit);
    std::thread::spawn(move || {
        std::thread::sleep(scaled_limit);
        let prog = std::env::args()
            .next()
            .map(|a| a.rsplit('/').next().unwrap_or(&a).to_string())
            .unwrap_or_default();
        println!(
            "Bail out! watchdog: {prog} still running after {} s ({} s on an idle machine x slowdown {:.2}), in case {}",
            scaled_limit.as_secs(),
            limit.as_secs(),
            slowdown(),
            tap::current_case()
        );
        std::process::exit(tap::KSFT_FAIL);
    });
}

/// Opens a context and programs [`SOFT_EVENTS`] on counters 0, 1, 2.
pub fn soft_context() -> Result<(Context, Vec<Event>), String> {
    let mut ctx = Context::open().map_err(|e| e.to_string())?;
    let events = {
        let pmu = ctx.info().map_err(|e| e.to_string())?;
        SOFT_EVENTS
            .iter()
            .map(|n| pmu.event(n))
            .collect::<perfmon::Result<Vec<_>>>()
    }
    .map_err(|e| e.to_string())?;
    ctx.program(&events).map_err(|e| e.to_string())?;
    Ok((ctx, events))
}

/// Opens perf counters of [`PERF_EVENTS`] for `tid` (0 = the caller) as one
/// group.
pub fn perf_group(tid: u32) -> Result<PerfGroup, String> {
    PerfGroup::open(&PERF_EVENTS, tid).map_err(|e| e.to_string())
}

/// Whether `ours` is within `rel` (fraction) plus `abs` of `theirs`.
pub fn close(ours: u64, theirs: u64, rel: f64, abs: u64) -> bool {
    let diff = ours.abs_diff(theirs) as f64;
    diff <= theirs as f64 * rel + abs as f64
}

/// One measurement of the three soft events by perfmon and by perf.
#[derive(Clone, Copy, Debug, Default)]
pub struct Pair {
    /// perfmon: task-clock, context-switches, cpu-migrations.
    pub pfm: [u64; 3],
    /// perf: the same.
    pub perf: [u64; 3],
    /// perfmon's time_enabled and time_running.
    pub times: (u64, u64),
    /// What the thread's own `CLOCK_THREAD_CPUTIME_ID` says task-clock
    /// must be: read before and after START, and before and after STOP,
    /// it bounds the runtime between the two (see [`OwnClock`]).
    pub own: (u64, u64),
    /// The same for context-switches, from the thread's own switch count.
    pub own_switches: (u64, u64),
}

/// The monitored thread's own CPU time around START and STOP, which bounds
/// what task-clock may count between them, exactly (Documentation/perfmon.rst,
/// Accuracy).
/// The same readings of the thread's own switch count (`getrusage`) bound
/// context-switches exactly, whatever happens at the window's edges.
#[derive(Clone, Copy, Debug, Default)]
pub struct OwnClock {
    start: (u64, u64),
    stop: (u64, u64),
    start_switches: (u64, u64),
    stop_switches: (u64, u64),
}

impl OwnClock {
    /// Runs `start` between two readings of the thread's clock.
    pub fn around_start<R>(&mut self, start: impl FnOnce() -> R) -> R {
        let s = edges::thread_switches();
        let t = edges::thread_cpu_ns();
        let r = start();
        self.start = (t, edges::thread_cpu_ns());
        self.start_switches = (s, edges::thread_switches());
        r
    }

    /// Runs `stop` between two readings of the thread's clock.
    pub fn around_stop<R>(&mut self, stop: impl FnOnce() -> R) -> R {
        let s = edges::thread_switches();
        let t = edges::thread_cpu_ns();
        let r = stop();
        self.stop = (t, edges::thread_cpu_ns());
        self.stop_switches = (s, edges::thread_switches());
        r
    }

    /// The interval context-switches must lie in: the switches between
    /// the end of START and the start of STOP at least, those between the
    /// start of START and the end of STOP at most.
    pub fn switch_bounds(&self) -> (u64, u64) {
        (
            self.stop_switches.0.saturating_sub(self.start_switches.1),
            self.stop_switches.1.saturating_sub(self.start_switches.0),
        )
    }

    /// The interval task-clock must lie in.
    pub fn bounds(&self) -> (u64, u64) {
        (
            self.stop.0.saturating_sub(self.start.1),
            self.stop.1.saturating_sub(self.start.0),
        )
    }
}

impl Pair {
    /// Diagnostic text.
    pub fn describe(&self) -> String {
        format!(
            "task-clock pfm={} perf={} (gap {} ns/switch) own clock [{}, {}] | context-switches pfm={} perf={} own [{}, {}] | cpu-migrations pfm={} perf={} | time_enabled={} time_running={}",
            self.pfm[0], self.perf[0], self.per_switch_gap_ns(), self.own.0, self.own.1,
            self.pfm[1], self.perf[1], self.own_switches.0, self.own_switches.1,
            self.pfm[2], self.perf[2], self.times.0, self.times.1
        )
    }

    /// context-switches equal.
    pub fn cs_equal(&self) -> bool {
        self.pfm[1] == self.perf[1]
    }

    /// context-switches within the thread's own count over the window, and
    /// not above perf's, whose window (enabled before START, disabled after
    /// STOP) holds perfmon's.
    pub fn cs_within_own(&self) -> bool {
        (self.own_switches.0..=self.own_switches.1).contains(&self.pfm[1])
            && self.pfm[1] <= self.perf[1]
    }

    /// cpu-migrations equal.
    pub fn migrations_equal(&self) -> bool {
        self.pfm[2] == self.perf[2]
    }

    /// task-clock within 1% plus `slack_ns` of perf's, both ways: for a
    /// thread that mostly runs.
    pub fn task_clock_close(&self, slack_ns: u64) -> bool {
        close(self.pfm[0], self.perf[0], 0.01, slack_ns)
    }

    /// task-clock as Documentation/perfmon.rst (Accuracy) promises for any
    /// thread: within the thread's own CPU time over the window, exactly,
    /// and never below perf's by more than 1% + `slack_ns` +
    /// [`PER_SWITCH_NS`] per context switch (perf's window is narrower).
    pub fn task_clock_agrees(&self, slack_ns: u64) -> bool {
        let pfm = self.pfm[0];
        let per_switch = PER_SWITCH_NS * self.perf[1];
        let not_below_perf = pfm + self.perf[0] / 100 + slack_ns + per_switch >= self.perf[0];
        self.task_clock_within_own() && not_below_perf
    }

    /// task-clock within the thread's own CPU time over the window.
    pub fn task_clock_within_own(&self) -> bool {
        (self.own.0..=self.own.1).contains(&self.pfm[0])
    }

    /// perfmon's task-clock minus perf's, per context switch, in ns.
    pub fn per_switch_gap_ns(&self) -> i64 {
        (self.pfm[0] as i64 - self.perf[0] as i64) / (self.perf[1].max(1) as i64)
    }
}

/// How far perfmon's task-clock may be from perf's per context switch:
/// perfmon's is the thread's scheduler runtime, perf's the window between
/// its own switch hooks (Documentation/perfmon.rst, Accuracy); the two
/// differ by a few microseconds per switch, and by tens in either direction
/// under QEMU TCG (its idle wake-ups move the clocks) or with KASAN.
pub const PER_SWITCH_NS: u64 = 100_000;

/// Slack for task-clock comparisons: the start/stop instants of perf and
/// perfmon differ by an ioctl or two.
pub const TASK_CLOCK_SLACK_NS: u64 = 200_000;

/// Counts the calling thread's `work` with perfmon (a fresh context loaded
/// on the thread, PMDs starting at `initial`) and perf at once: perf is
/// enabled just before START and disabled just after STOP, so both see the
/// same interval. Returns perfmon's values minus `initial`.
pub fn measure_self(initial: [u64; 3], work: impl FnOnce()) -> Result<Pair, String> {
    let (ctx, _events) = soft_context()?;
    if initial != [0; 3] {
        let mut pmds: Vec<perfmon::abi::PfmPmd> = ctx
            .programmed()
            .iter()
            .zip(initial)
            .map(|(&n, v)| perfmon::abi::PfmPmd {
                reg_num: n,
                reg_value: v,
                ..Default::default()
            })
            .collect();
        ctx.write_pmds(&mut pmds).ctx("write initial PMDs")?;
    }
    let group = perf_group(0)?;
    ctx.load(0).ctx("load self")?;
    group.enable().ctx("perf enable")?;
    let mut own = OwnClock::default();
    own.around_start(|| ctx.start()).ctx("start")?;
    work();
    own.around_stop(|| ctx.stop()).ctx("stop")?;
    group.disable().ctx("perf disable")?;
    let counts = ctx.read().ctx("read")?;
    let perf = group.read().ctx("perf read")?;
    ctx.unload().ctx("unload")?;
    let mut pair = Pair {
        times: (counts.time_enabled, counts.time_running),
        own: own.bounds(),
        own_switches: own.switch_bounds(),
        ..Default::default()
    };
    for i in 0..3 {
        pair.pfm[i] = counts.values[i].wrapping_sub(initial[i]);
        pair.perf[i] = perf[i].value;
    }
    Ok(pair)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closeness() {
        assert!(close(1010, 1000, 0.01, 0));
        assert!(!close(1011, 1000, 0.01, 0));
        assert!(close(0, 150, 0.0, 200));
        assert!(close(5, 5, 0.0, 0));
    }
}
