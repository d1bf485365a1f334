//! What `pfm stat` prints: one [`Report`] rendered as a table in the
//! habits of `perf stat`, as CSV lines in the field order of `perf stat -x`,
//! or as a JSON document ([`pfm_json::Stat`]) with the same numbers.
//!
//! Multiplexed events (more than counters, [`crate::sets`]) show their
//! estimate, `count × time_enabled / time_running`, and the share of the
//! time they were counted, `(66.67%)`, as perf stat does; derived metrics
//! use the estimates; an event never counted shows `<not counted>`.

use std::time::Duration;

use perfmon::Generic;
use pfm_json::{Counter, Metric, Multiplex, Stat, StatKind, Stats, ThreadCounts, SCHEMA_VERSION};

use crate::sets::{self, Switch};

/// One counted event.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The event as named on the command line.
    pub event: String,
    /// The PMC value that selected it.
    pub code: u64,
    /// The PMD that counted it.
    pub pmd: u16,
    /// The count (ns for task-clock; the rounded mean with `-r`).
    pub value: u64,
    /// perf_event's count of the same event, with `--perf`.
    pub perf: Option<u64>,
    /// What it counts, where a derived metric needs to know.
    pub generic: Option<Generic>,
    /// libpfm4's qualified name, for an event named through libpfm4.
    pub libpfm: Option<String>,
    /// `-r N` summary: the statistics of the runs.
    pub stats: Option<Stats>,
    /// Multiplexed: its set, its set's times and the estimate.
    pub mux: Option<MuxCount>,
}

/// A multiplexed event's set, times and estimate.
#[derive(Clone, Debug, PartialEq)]
pub struct MuxCount {
    /// The event set that counted it.
    pub set: u16,
    /// Its set's time enabled, ns (the thread's running time while the
    /// context counted).
    pub time_enabled: u64,
    /// The part of it its set was on the counters, ns.
    pub time_running: u64,
    /// `count × time_enabled / time_running`, rounded to nearest; `None`:
    /// never counted. With `-r`, the rounded mean of the runs' estimates.
    pub estimate: Option<u64>,
    /// `-r N` summary: the statistics of the runs' estimates.
    pub estimate_stats: Option<Stats>,
}

impl MuxCount {
    /// `count` counted by set `set` with these times, and its estimate
    /// (the module's exact arithmetic, [`perfmon::scale_u64`]).
    pub fn of(set: u16, count: u64, time_enabled: u64, time_running: u64) -> Self {
        MuxCount {
            set,
            time_enabled,
            time_running,
            estimate: perfmon::scale_u64(count, time_enabled, time_running),
            estimate_stats: None,
        }
    }

    /// The share of its time the event was counted, `66.67`, when it was
    /// not all of it (perf prints nothing then); `None` also when nothing
    /// was enabled.
    pub fn share_text(&self) -> Option<String> {
        if self.time_running == self.time_enabled {
            return None;
        }
        sets::percent_text(self.time_running, self.time_enabled)
    }
}

impl Row {
    /// What the table shows: the count, or for a multiplexed event its
    /// estimate (`None`: never counted).
    pub fn shown(&self) -> Option<u64> {
        match &self.mux {
            None => Some(self.value),
            Some(m) => m.estimate,
        }
    }

    /// `-r N`: the variation the table shows after ±, of the shown values.
    fn noise_pct(&self) -> Option<f64> {
        match &self.mux {
            None => self.stats.as_ref().map(|s| s.noise_pct),
            Some(m) => self
                .stats
                .as_ref()
                .map(|_| m.estimate_stats.as_ref().map_or(0.0, |s| s.noise_pct)),
        }
    }
}

/// How a multiplexed report's events shared the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Multiplexing {
    /// Event sets.
    pub sets: u16,
    /// The counters they took turns on.
    pub counters: u16,
    /// How they switched.
    pub switch: Switch,
}

/// What was monitored.
#[derive(Clone, Debug, PartialEq)]
pub enum Subject {
    /// A command run by pfm.
    Command(Vec<String>),
    /// A thread attached to.
    Thread(u32),
    /// Whole processes attached to (`-p`).
    Processes(Vec<u32>),
}

/// How a command ended.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Exit {
    /// Exit code, if it exited.
    pub code: Option<i32>,
    /// Killing signal, if one did.
    pub signal: Option<i32>,
    /// User CPU time.
    pub user: Duration,
    /// System CPU time.
    pub system: Duration,
}

/// Everything one `pfm stat` output shows.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// A summary, an interval or one run of `-r`.
    pub kind: StatKind,
    /// What was counted.
    pub subject: Subject,
    /// Its thread id.
    pub tid: u32,
    /// PMU model name.
    pub model: String,
    /// The counts, in `-e` order.
    pub rows: Vec<Row>,
    /// ns loaded and started (from READ_PMDS).
    pub time_enabled: u64,
    /// ns the thread ran while started.
    pub time_running: u64,
    /// Wall-clock time of the measurement (of this interval; the mean of
    /// the runs with `-r`).
    pub elapsed: Duration,
    /// For an interval: its end, since the start.
    pub interval_end: Option<Duration>,
    /// For a command: how it ended (the last run, with `-r`).
    pub exit: Option<Exit>,
    /// Thread mode: stopped by Ctrl-C (or SIGTERM).
    pub interrupted: bool,
    /// Thread mode: the thread exited during the measurement.
    pub target_exited: bool,
    /// A run of `-r`: which, from 1.
    pub run: Option<u32>,
    /// `-r N` summary: N, and the statistics of the elapsed times (ns).
    pub runs: Option<(u32, Stats)>,
    /// More events than counters: how they were multiplexed.
    pub mux: Option<Multiplexing>,
    /// Command mode: whether the command's children were counted too.
    pub inherit: Option<bool>,
    /// Inherited or process counting: threads the module could not
    /// monitor.
    pub lost_threads: Option<u32>,
    /// `--per-thread` summary: each thread's counts, values in `rows`
    /// order.
    pub threads: Option<Vec<ThreadCounts>>,
}

/// How numbers are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Style {
    /// Thousands separators (`--no-big-num` turns them off).
    pub big_num: bool,
}

/// The narrowest value column, as perf stat's.
const VALUE_WIDTH: usize = 18;
/// The narrowest event column.
const EVENT_WIDTH: usize = 32;

/// `1234567` → `1,234,567`.
pub fn group_thousands(v: u64) -> String {
    let digits = v.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A non-negative float with `decimals` decimals, the integer part grouped
/// when `big_num`: `1234.5` → `1,234.50`.
pub fn float_text(v: f64, decimals: usize, big_num: bool) -> String {
    let text = format!("{:.*}", decimals, v.max(0.0));
    if !big_num {
        return text;
    }
    let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
    let grouped = int
        .parse::<u64>()
        .map(group_thousands)
        .unwrap_or_else(|_| int.to_string());
    if frac.is_empty() {
        grouped
    } else {
        format!("{grouped}.{frac}")
    }
}

/// A rate as perf prints it: `/sec`, `K/sec`, `M/sec`, `G/sec`.
fn rate_text(per_sec: f64) -> (f64, &'static str) {
    if per_sec >= 1e9 {
        (per_sec / 1e9, "G/sec")
    } else if per_sec >= 1e6 {
        (per_sec / 1e6, "M/sec")
    } else if per_sec >= 1e3 {
        (per_sec / 1e3, "K/sec")
    } else {
        (per_sec, "/sec")
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// What the value column shows of an event never counted, as perf.
pub const NOT_COUNTED: &str = "<not counted>";

/// The value column's text and unit of a count: task-clock in msec;
/// `None`, never counted.
fn shown_text(
    generic: Option<Generic>,
    value: Option<u64>,
    style: Style,
) -> (String, &'static str) {
    match value {
        Some(v) => value_text(generic, v, style),
        None => (NOT_COUNTED.to_string(), value_text(generic, 0, style).1),
    }
}

/// The value column's text and unit of a count: task-clock in msec.
fn value_text(generic: Option<Generic>, value: u64, style: Style) -> (String, &'static str) {
    if generic == Some(Generic::TaskClock) {
        (float_text(value as f64 / 1e6, 2, style.big_num), "msec")
    } else if style.big_num {
        (group_thousands(value), "")
    } else {
        (value.to_string(), "")
    }
}

/// The width of the value column of interval lines: the widest u64, so
/// lines printed as they come stay aligned whatever the counts grow to.
fn interval_value_width(style: Style) -> usize {
    value_text(None, u64::MAX, style).0.len()
}

impl Report {
    /// A summary of `subject` (thread `tid`, PMU `model`) with nothing
    /// counted yet: what a measurement fills in.
    pub fn empty_summary(subject: Subject, tid: u32, model: String) -> Self {
        Self {
            kind: StatKind::Summary,
            subject,
            tid,
            model,
            rows: Vec::new(),
            time_enabled: 0,
            time_running: 0,
            elapsed: Duration::ZERO,
            interval_end: None,
            exit: None,
            interrupted: false,
            target_exited: false,
            run: None,
            runs: None,
            mux: None,
            inherit: None,
            lost_threads: None,
            threads: None,
        }
    }

    fn has_perf(&self) -> bool {
        self.rows.iter().any(|r| r.perf.is_some())
    }

    fn row_of(&self, g: Generic) -> Option<&Row> {
        self.rows.iter().find(|r| r.generic == Some(g))
    }

    /// The derived metric of a row, as perf stat shows it after `#`:
    /// CPUs utilized for task-clock; context switches and migrations per
    /// second of task-clock (of wall time without task-clock); instructions
    /// per cycle when cycles are counted too; mispredicted branches in
    /// percent of branches when branches are counted too. Multiplexed,
    /// from the estimates; none for an event never counted.
    pub fn metric(&self, row: &Row) -> Option<Metric> {
        let value = row.shown()?;
        let ratio = |num: u64, den: Option<&Row>| {
            den.and_then(Row::shown)
                .filter(|&d| d > 0)
                .map(|d| num as f64 / d as f64)
        };
        let m = |value: f64, unit: &str| Metric {
            value,
            unit: unit.to_string(),
        };
        let elapsed_ns = self.elapsed.as_nanos() as f64;
        match row.generic? {
            Generic::TaskClock => {
                (elapsed_ns > 0.0).then(|| m(value as f64 / elapsed_ns, "CPUs utilized"))
            }
            Generic::ContextSwitches | Generic::CpuMigrations => {
                let base_ns = match self.row_of(Generic::TaskClock).and_then(Row::shown) {
                    Some(t) if t > 0 => t as f64,
                    _ => elapsed_ns,
                };
                (base_ns > 0.0).then(|| m(value as f64 * 1e9 / base_ns, "/sec"))
            }
            Generic::Instructions => {
                ratio(value, self.row_of(Generic::Cycles)).map(|v| m(v, "insn per cycle"))
            }
            Generic::BranchMisses => ratio(value, self.row_of(Generic::Branches))
                .map(|v| m(100.0 * v, "% of all branches")),
            Generic::Cycles | Generic::Branches => None,
        }
    }

    /// The metric as the table prints it.
    fn metric_text(&self, row: &Row) -> Option<String> {
        let m = self.metric(row)?;
        Some(match m.unit.as_str() {
            "/sec" => {
                let (r, unit) = rate_text(m.value);
                format!("{r:>8.3} {unit}")
            }
            "% of all branches" => format!("{:>7.2}% of all branches", m.value),
            "insn per cycle" => format!("{:>8.2} insn per cycle", m.value),
            _ => format!("{:>8.3} {}", m.value, m.unit),
        })
    }

    /// The widths of the value and event columns that fit every row.
    fn widths(&self, style: Style) -> (usize, usize) {
        let values = self.rows.iter().flat_map(|r| {
            let shown = shown_text(r.generic, r.shown(), style).0.len();
            let perf = r.perf.map(move |v| value_text(r.generic, v, style).0.len());
            std::iter::once(shown).chain(perf)
        });
        let vw = values.max().unwrap_or(0).max(VALUE_WIDTH);
        let ew = self
            .rows
            .iter()
            .map(|r| r.event.chars().count())
            .max()
            .unwrap_or(0)
            .max(EVENT_WIDTH);
        (vw, ew)
    }

    /// One event line: value, unit, (perf value, unit,) event, metric,
    /// with `-r` the variation, and multiplexed the share of the time
    /// counted, each column `vw`/`ew`/`mw` wide.
    fn row_line(&self, row: &Row, style: Style, vw: usize, ew: usize, mw: usize) -> String {
        let (v, unit) = shown_text(row.generic, row.shown(), style);
        let mut line = format!("{v:>vw$} {unit:<4} ");
        if self.has_perf() {
            match row.perf {
                Some(p) => {
                    let (pv, punit) = value_text(row.generic, p, style);
                    line.push_str(&format!("{pv:>vw$} {punit:<4} "));
                }
                None => line.push_str(&format!("{:>vw$} {:<4} ", "-", "")),
            }
        }
        line.push_str(&format!("{:<ew$}", row.event));
        let metric = self.metric_text(row);
        let noise = row.noise_pct();
        let share = row.mux.as_ref().and_then(MuxCount::share_text);
        match (&metric, noise.is_some() || share.is_some()) {
            (Some(m), _) => line.push_str(&format!(" # {m:<mw$}")),
            (None, true) => line.push_str(&format!("   {:<mw$}", "")),
            (None, false) => {}
        }
        if let Some(n) = noise {
            line.push_str(&format!("  ( ± {n:>5.2}% )"));
        }
        if let Some(p) = share {
            line.push_str(&format!("  ({p}%)"));
        }
        line.trim_end().to_string()
    }

    fn metric_width(&self) -> usize {
        self.rows
            .iter()
            .filter_map(|r| self.metric_text(r))
            .map(|m| m.chars().count())
            .max()
            .unwrap_or(0)
    }

    fn what(&self) -> String {
        match &self.subject {
            Subject::Command(argv) => format!("'{}'", argv.join(" ")),
            Subject::Thread(t) => format!("thread {t}"),
            Subject::Processes(pids) => {
                let ids: Vec<String> = pids.iter().map(u32::to_string).collect();
                format!("process id '{}'", ids.join(","))
            }
        }
    }

    /// `--per-thread`'s lines under the counts: a header, then per thread
    /// its name (`-` if pfm never saw it alive), its id and a column per
    /// event (task-clock in msec), each column as wide as its widest cell.
    fn thread_table(&self, threads: &[ThreadCounts], style: Style) -> String {
        let cell = |row: &Row, v: u64| -> String {
            let (text, _) = value_text(row.generic, v, style);
            text
        };
        let heads: Vec<String> = self
            .rows
            .iter()
            .map(|r| {
                if r.generic == Some(Generic::TaskClock) {
                    format!("{} (msec)", r.event)
                } else {
                    r.event.clone()
                }
            })
            .collect();
        let widths: Vec<usize> = heads
            .iter()
            .enumerate()
            .map(|(i, h)| {
                threads
                    .iter()
                    .filter_map(|t| Some(cell(self.rows.get(i)?, *t.values.get(i)?).len()))
                    .chain(std::iter::once(h.chars().count()))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let cw = threads
            .iter()
            .map(|t| t.comm.as_deref().unwrap_or("-").chars().count())
            .max()
            .unwrap_or(0)
            .max(16);
        let mut out = format!("\n {:>cw$} {:>8}", "comm", "tid");
        for (h, w) in heads.iter().zip(&widths) {
            out.push_str(&format!("  {h:>w$}"));
        }
        out.push('\n');
        for t in threads {
            let comm = t.comm.as_deref().unwrap_or("-");
            out.push_str(&format!(" {comm:>cw$} {:>8}", t.tid));
            for (i, w) in widths.iter().enumerate() {
                let v = match (self.rows.get(i), t.values.get(i)) {
                    (Some(r), Some(&v)) => cell(r, v),
                    _ => "-".to_string(),
                };
                out.push_str(&format!("  {v:>w$}"));
            }
            out.push('\n');
        }
        out
    }

    /// The perf-stat-like table.
    pub fn table(&self, style: Style) -> String {
        let (vw, ew) = self.widths(style);
        let mw = self.metric_width();
        let what = self.what();
        let runs = match &self.runs {
            Some((n, _)) => format!(", {n} runs"),
            None => String::new(),
        };
        let mut out = format!(
            "\n Performance counter stats for {what} (perfmon, PMU model {}{runs}):\n\n",
            self.model
        );
        if self.has_perf() {
            out.push_str(&format!(
                "{:>vw$} {:<4} {:>vw$} {:<4} event\n",
                "perfmon", "", "perf_event", ""
            ));
        }
        for row in &self.rows {
            out.push_str(&self.row_line(row, style, vw, ew, mw));
            out.push('\n');
        }
        if let Some(m) = &self.mux {
            out.push_str(&format!("\n {}\n", m.note(self.rows.len())));
        }
        if let Some(threads) = &self.threads {
            out.push_str(&self.thread_table(threads, style));
        }
        match &self.runs {
            Some((n, st)) => {
                let mean_s = st.mean / 1e9;
                let sd_mean_s = st.stddev / f64::from(*n).sqrt() / 1e9;
                out.push_str(&format!(
                    "\n{mean_s:>vw$.9} ± {sd_mean_s:.9} seconds time elapsed  ( ± {:>5.2}% )\n",
                    st.noise_pct
                ));
            }
            None => out.push_str(&format!(
                "\n{:>vw$.9} seconds time elapsed\n",
                secs(self.elapsed)
            )),
        }
        if let Some(exit) = &self.exit {
            if self.runs.is_none() {
                out.push_str(&format!("\n{:>vw$.9} seconds user\n", secs(exit.user)));
                out.push_str(&format!("{:>vw$.9} seconds sys\n", secs(exit.system)));
            }
            if let Some(sig) = exit.signal {
                out.push_str(&format!("\n {what} was killed by signal {sig}\n"));
            }
        }
        if self.target_exited {
            out.push_str(&format!("\n {what} exited; these are its final counts\n"));
        }
        if self.interrupted {
            out.push_str("\n interrupted: totals so far\n");
        }
        out.push('\n');
        out
    }

    /// The header of interval output.
    pub fn interval_header(has_perf: bool, style: Style) -> String {
        let w = interval_value_width(style);
        if has_perf {
            format!(
                "#{:>15} {:>w$} {:<4} {:>w$} {:<4} events\n",
                "time", "counts", "unit", "perf", "unit"
            )
        } else {
            format!("#{:>15} {:>w$} {:<4} events\n", "time", "counts", "unit")
        }
    }

    /// The lines of one interval.
    pub fn interval_lines(&self, style: Style) -> String {
        let t = self.interval_end.map_or(0.0, secs);
        let w = interval_value_width(style);
        let (_, ew) = self.widths(style);
        let mw = self.metric_width();
        self.rows
            .iter()
            .map(|row| format!("{t:>16.9} {}\n", self.row_line(row, style, w, ew, mw)))
            .collect()
    }

    /// CSV lines, one per event, fields in `perf stat -x`'s order: (with
    /// `-I` the interval's end,) the value (multiplexed: the estimate, or
    /// `<not counted>`), its unit, the event, (with `-r` the variation,)
    /// the counter's running time in ns, the percentage of the time it
    /// counted (100.00 unless multiplexed), the metric's value and unit
    /// (empty without one). Never grouped, whatever `--no-big-num` says.
    pub fn csv_lines(&self, sep: &str) -> String {
        let plain = Style { big_num: false };
        let mut out = String::new();
        for row in &self.rows {
            let mut fields: Vec<String> = Vec::with_capacity(9);
            if let Some(t) = self.interval_end {
                fields.push(format!("{:.9}", secs(t)));
            }
            let (v, unit) = shown_text(row.generic, row.shown(), plain);
            fields.push(v);
            fields.push(unit.to_string());
            fields.push(row.event.clone());
            if self.runs.is_some() {
                let noise = row.noise_pct().unwrap_or(0.0);
                fields.push(format!("{noise:.2}%"));
            }
            match &row.mux {
                None => {
                    fields.push(self.time_running.to_string());
                    fields.push("100.00".to_string());
                }
                Some(m) => {
                    fields.push(m.time_running.to_string());
                    let pct = sets::percent_text(m.time_running, m.time_enabled);
                    fields.push(pct.unwrap_or_else(|| "0.00".to_string()));
                }
            }
            match self.metric(row) {
                Some(m) if m.unit == "/sec" => {
                    let (r, unit) = rate_text(m.value);
                    fields.push(format!("{r:.3}"));
                    fields.push(unit.to_string());
                }
                Some(m) => {
                    fields.push(format!("{:.3}", m.value));
                    fields.push(m.unit);
                }
                None => {
                    fields.push(String::new());
                    fields.push(String::new());
                }
            }
            out.push_str(&fields.join(sep));
            out.push('\n');
        }
        // --per-thread, as perf stat --per-thread -x: the thread's
        // comm-tid, then the fields of an event line without the metric.
        for t in self.threads.iter().flatten() {
            let who = format!("{}-{}", t.comm.as_deref().unwrap_or("-"), t.tid);
            for (row, &v) in self.rows.iter().zip(&t.values) {
                let (value, unit) = value_text(row.generic, v, plain);
                let fields = [
                    who.clone(),
                    value,
                    unit.to_string(),
                    row.event.clone(),
                    t.time_running_ns.to_string(),
                    "100.00".to_string(),
                    String::new(),
                    String::new(),
                ];
                out.push_str(&fields.join(sep));
                out.push('\n');
            }
        }
        out
    }

    /// The same numbers as a JSON document.
    pub fn json(&self) -> Stat {
        let counters = self
            .rows
            .iter()
            .map(|row| {
                let time = row.generic == Some(Generic::TaskClock);
                Counter {
                    event: row.event.clone(),
                    code: row.code,
                    pmd: row.pmd,
                    value: row.value,
                    unit: time.then(|| "ns".to_string()),
                    msec: time.then(|| row.value as f64 / 1e6),
                    metric: self.metric(row),
                    perf_value: row.perf,
                    stats: row.stats.clone(),
                    libpfm: row.libpfm.clone(),
                    set: row.mux.as_ref().map(|m| m.set),
                    time_enabled_ns: row.mux.as_ref().map(|m| m.time_enabled),
                    time_running_ns: row.mux.as_ref().map(|m| m.time_running),
                    running_pct: row.mux.as_ref().and_then(|m| {
                        perfmon::running_share(m.time_running, m.time_enabled)
                            .map(|h| f64::from(h) / 100.0)
                    }),
                    estimate: row.mux.as_ref().and_then(|m| m.estimate),
                    estimate_stats: row.mux.as_ref().and_then(|m| m.estimate_stats.clone()),
                }
            })
            .collect();
        let (command, pid, tid, pids) = match &self.subject {
            Subject::Command(argv) => (Some(argv.clone()), Some(self.tid), None, None),
            Subject::Thread(t) => (None, None, Some(*t), None),
            Subject::Processes(p) => (None, None, None, Some(p.clone())),
        };
        let summary_of_thread = self.kind == StatKind::Summary
            && matches!(self.subject, Subject::Thread(_) | Subject::Processes(_));
        Stat {
            schema_version: SCHEMA_VERSION,
            kind: self.kind,
            model: self.model.clone(),
            command,
            pid,
            inherit: self.inherit,
            pids,
            tid,
            run: self.run,
            runs: self.runs.as_ref().map(|(n, _)| *n),
            interval_s: self.interval_end.map(secs),
            counters,
            time_enabled_ns: self.time_enabled,
            time_running_ns: self.time_running,
            elapsed_ns: u64::try_from(self.elapsed.as_nanos()).unwrap_or(u64::MAX),
            elapsed_s: secs(self.elapsed),
            elapsed_stats: self.runs.as_ref().map(|(_, s)| s.clone()),
            user_s: self.exit.map(|e| secs(e.user)),
            sys_s: self.exit.map(|e| secs(e.system)),
            exit_code: self.exit.and_then(|e| e.code),
            exit_signal: self.exit.and_then(|e| e.signal),
            interrupted: summary_of_thread.then_some(self.interrupted),
            target_exited: summary_of_thread.then_some(self.target_exited),
            multiplex: self.mux.map(|m| m.json()),
            lost_threads: self.lost_threads,
            threads: self.threads.clone(),
        }
    }

    /// The JSON document as one line.
    pub fn json_line(&self) -> Result<String, crate::Failure> {
        json_line(&self.json())
    }
}

impl Multiplexing {
    /// The table's note: `5 events multiplexed in 3 event sets on 2
    /// counters, switched every 4ms of running time`.
    pub fn note(&self, events: usize) -> String {
        format!(
            "{events} events multiplexed in {} event sets on {} counters, switched {}",
            self.sets,
            self.counters,
            self.switch.text()
        )
    }

    /// The JSON document's `multiplex`.
    pub fn json(&self) -> Multiplex {
        let (switch_ns, switch_on_overflow, period) = match self.switch {
            Switch::Time(ns) => (Some(ns), None, None),
            Switch::Overflow { count, period } => (None, Some(count), Some(period)),
        };
        Multiplex {
            sets: self.sets,
            counters: self.counters,
            switch_ns,
            switch_on_overflow,
            period,
        }
    }
}

/// `doc` as one line of JSON.
pub fn json_line<T: serde::Serialize>(doc: &T) -> Result<String, crate::Failure> {
    serde_json::to_string(doc)
        .map(|s| s + "\n")
        .map_err(|e| crate::Failure::new(format!("cannot write JSON: {e}")))
}

#[cfg(test)]
mod tests;
