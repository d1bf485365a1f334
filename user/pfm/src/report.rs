//! What `pfm stat` prints: one [`Report`] rendered either as a table in the
//! habits of `perf stat`, or as JSON with the same numbers.

use std::time::Duration;

use perfmon::json::Value;

/// One counted event.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Event name.
    pub event: String,
    /// The PMC code that selected it.
    pub code: u64,
    /// The PMD that counted it.
    pub pmd: u16,
    /// The count (ns for task-clock).
    pub value: u64,
    /// perf_event's count of the same event, with `--perf`.
    pub perf: Option<u64>,
}

/// What was monitored.
#[derive(Clone, Debug, PartialEq)]
pub enum Subject {
    /// A command run by pfm.
    Command(Vec<String>),
    /// A thread attached to.
    Thread(u32),
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
    /// Wall-clock time of the measurement (or of this interval).
    pub elapsed: Duration,
    /// For an interval line: seconds since the start.
    pub interval_end: Option<Duration>,
    /// For a command: how it ended.
    pub exit: Option<Exit>,
    /// Thread mode: stopped by Ctrl-C (or SIGTERM).
    pub interrupted: bool,
    /// Thread mode: the thread exited during the measurement.
    pub target_exited: bool,
}

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

/// A non-negative float with `decimals` decimals and grouped thousands in
/// the integer part: `1234.5` → `1,234.50`.
pub fn group_float(v: f64, decimals: usize) -> String {
    let text = format!("{:.*}", decimals, v.max(0.0));
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

/// Events whose counts are nanoseconds, printed as msec.
fn is_time(event: &str) -> bool {
    matches!(event, "task-clock" | "cpu-clock")
}

/// A raw event (`r<hex>`): a count without a known meaning.
fn is_raw(event: &str) -> bool {
    event
        .strip_prefix('r')
        .is_some_and(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()))
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

/// The derived metric of a row: (value, unit) — CPUs utilized for
/// task-clock, a rate per second of task-clock for counts (as perf does;
/// per second of wall time when task-clock was not counted).
pub fn metric(row: &Row, report: &Report) -> Option<(f64, &'static str)> {
    let elapsed_ns = report.elapsed.as_nanos() as f64;
    if is_time(&row.event) {
        return (elapsed_ns > 0.0).then(|| (row.value as f64 / elapsed_ns, "CPUs utilized"));
    }
    if is_raw(&row.event) {
        return None;
    }
    let task_ns = report
        .rows
        .iter()
        .find(|r| r.event == "task-clock")
        .map(|r| r.value as f64);
    let base_ns = match task_ns {
        Some(t) if t > 0.0 => t,
        _ => elapsed_ns,
    };
    (base_ns > 0.0).then(|| (row.value as f64 * 1e9 / base_ns, "/sec"))
}

fn value_text(event: &str, value: u64) -> (String, &'static str) {
    if is_time(event) {
        (group_float(value as f64 / 1e6, 2), "msec")
    } else {
        (group_thousands(value), "")
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn quote_command(argv: &[String]) -> String {
    argv.join(" ")
}

impl Report {
    fn has_perf(&self) -> bool {
        self.rows.iter().any(|r| r.perf.is_some())
    }

    /// One event line of the table (also used for interval lines).
    fn row_line(&self, row: &Row) -> String {
        let (v, unit) = value_text(&row.event, row.value);
        let mut line = format!("{v:>18} {unit:<4} ");
        if self.has_perf() {
            match row.perf {
                Some(p) => {
                    let (pv, punit) = value_text(&row.event, p);
                    line.push_str(&format!("{pv:>18} {punit:<4} "));
                }
                None => line.push_str(&format!("{:>18} {:<4} ", "-", "")),
            }
        }
        line.push_str(&format!("{:<32}", row.event));
        if let Some((m, munit)) = metric(row, self) {
            if munit == "/sec" {
                let (r, runit) = rate_text(m);
                line.push_str(&format!(" # {r:>8.3} {runit}"));
            } else {
                line.push_str(&format!(" # {m:>8.3} {munit}"));
            }
        }
        line.trim_end().to_string()
    }

    /// The perf-stat-like table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let what = match &self.subject {
            Subject::Command(argv) => format!("'{}'", quote_command(argv)),
            Subject::Thread(t) => format!("thread {t}"),
        };
        out.push_str(&format!(
            "\n Performance counter stats for {what} (perfmon, PMU model {}):\n\n",
            self.model
        ));
        if self.has_perf() {
            out.push_str(&format!(
                "{:>18} {:<4} {:>18} {:<4} event\n",
                "perfmon", "", "perf_event", ""
            ));
        }
        for row in &self.rows {
            out.push_str(&self.row_line(row));
            out.push('\n');
        }
        out.push_str(&format!(
            "\n{:>18.9} seconds time elapsed\n",
            secs(self.elapsed)
        ));
        if let Some(exit) = &self.exit {
            out.push_str(&format!("\n{:>18.9} seconds user\n", secs(exit.user)));
            out.push_str(&format!("{:>18.9} seconds sys\n", secs(exit.system)));
            if let Some(sig) = exit.signal {
                out.push_str(&format!("\n {} was killed by signal {sig}\n", what));
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
    pub fn interval_header(has_perf: bool) -> String {
        if has_perf {
            format!(
                "#{:>15} {:>18} {:<4} {:>18} {:<4} events\n",
                "time", "counts", "unit", "perf", "unit"
            )
        } else {
            format!("#{:>15} {:>18} {:<4} events\n", "time", "counts", "unit")
        }
    }

    /// The lines of one interval.
    pub fn interval_lines(&self) -> String {
        let t = self.interval_end.map_or(0.0, secs);
        self.rows
            .iter()
            .map(|row| format!("{t:>16.9} {}\n", self.row_line(row)))
            .collect()
    }

    /// The same numbers as JSON.
    pub fn json(&self) -> Value {
        let counters = self
            .rows
            .iter()
            .map(|row| {
                let mut o = Value::object([
                    ("event", Value::from(row.event.as_str())),
                    ("code", Value::from(row.code)),
                    ("pmd", Value::from(row.pmd)),
                    ("value", Value::from(row.value)),
                ]);
                if is_time(&row.event) {
                    o.set("unit", Value::from("ns"));
                    o.set("msec", Value::from(row.value as f64 / 1e6));
                }
                if let Some((m, unit)) = metric(row, self) {
                    o.set("metric_value", Value::from(m));
                    o.set("metric_unit", Value::from(unit));
                }
                if let Some(p) = row.perf {
                    o.set("perf_value", Value::from(p));
                }
                o
            })
            .collect::<Vec<_>>();
        let mut v = Value::object([
            (
                "type",
                Value::from(if self.interval_end.is_some() {
                    "interval"
                } else {
                    "summary"
                }),
            ),
            ("model", Value::from(self.model.as_str())),
        ]);
        match &self.subject {
            Subject::Command(argv) => {
                v.set(
                    "command",
                    Value::from(
                        argv.iter()
                            .map(|a| Value::from(a.as_str()))
                            .collect::<Vec<_>>(),
                    ),
                );
                v.set("pid", Value::from(self.tid));
            }
            Subject::Thread(t) => v.set("tid", Value::from(*t)),
        }
        if let Some(t) = self.interval_end {
            v.set("interval_s", Value::from(secs(t)));
        }
        v.set("counters", Value::from(counters));
        v.set("time_enabled_ns", Value::from(self.time_enabled));
        v.set("time_running_ns", Value::from(self.time_running));
        v.set("elapsed_ns", Value::from(self.elapsed.as_nanos() as u64));
        v.set("elapsed_s", Value::from(secs(self.elapsed)));
        if let Some(exit) = &self.exit {
            v.set("user_s", Value::from(secs(exit.user)));
            v.set("sys_s", Value::from(secs(exit.system)));
            v.set("exit_code", Value::from(exit.code));
            v.set("exit_signal", Value::from(exit.signal));
        }
        if self.interval_end.is_none() && matches!(self.subject, Subject::Thread(_)) {
            v.set("interrupted", Value::from(self.interrupted));
            v.set("target_exited", Value::from(self.target_exited));
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Report {
        Report {
            subject: Subject::Command(vec!["sleep".into(), "1".into()]),
            tid: 1234,
            model: "soft".into(),
            rows: vec![
                Row {
                    event: "task-clock".into(),
                    code: 1,
                    pmd: 0,
                    value: 620_000,
                    perf: None,
                },
                Row {
                    event: "context-switches".into(),
                    code: 2,
                    pmd: 1,
                    value: 1,
                    perf: None,
                },
                Row {
                    event: "cpu-migrations".into(),
                    code: 3,
                    pmd: 2,
                    value: 0,
                    perf: None,
                },
            ],
            time_enabled: 1_001_000_000,
            time_running: 1_001_000_000,
            elapsed: Duration::from_nanos(1_001_439_226),
            interval_end: None,
            exit: Some(Exit {
                code: Some(0),
                signal: None,
                user: Duration::ZERO,
                system: Duration::from_micros(1113),
            }),
            interrupted: false,
            target_exited: false,
        }
    }

    #[test]
    fn thousands() {
        assert_eq!(group_thousands(0), "0");
        assert_eq!(group_thousands(999), "999");
        assert_eq!(group_thousands(1000), "1,000");
        assert_eq!(group_thousands(1234567), "1,234,567");
        assert_eq!(group_thousands(u64::MAX), "18,446,744,073,709,551,615");
        assert_eq!(group_float(1234.5, 2), "1,234.50");
        assert_eq!(group_float(0.62, 2), "0.62");
        assert_eq!(group_float(1_000_000.0, 0), "1,000,000");
    }

    #[test]
    fn table_looks_like_perf_stat() {
        let t = sample().table();
        let expected = "
 Performance counter stats for 'sleep 1' (perfmon, PMU model soft):

              0.62 msec task-clock                       #    0.001 CPUs utilized
                 1      context-switches                 #    1.613 K/sec
                 0      cpu-migrations                   #    0.000 /sec

       1.001439226 seconds time elapsed

       0.000000000 seconds user
       0.001113000 seconds sys

";
        assert_eq!(t, expected, "\n{t}");
    }

    #[test]
    fn json_matches_the_table() {
        let r = sample();
        let text = r.json().to_json();
        let v = perfmon::json::parse(&text).unwrap();
        assert_eq!(v.get("type").and_then(|t| t.as_str()), Some("summary"));
        assert_eq!(v.get("pid").and_then(|t| t.as_u64()), Some(1234));
        assert_eq!(v.get("exit_code").and_then(|t| t.as_i64()), Some(0));
        let counters = v.get("counters").and_then(|c| c.as_array()).unwrap();
        let table = r.table();
        for (c, row) in counters.iter().zip(&r.rows) {
            assert_eq!(
                c.get("event").and_then(|e| e.as_str()),
                Some(row.event.as_str())
            );
            assert_eq!(c.get("value").and_then(|e| e.as_u64()), Some(row.value));
            // The table line of that event shows the same value.
            let (text, _) = value_text(&row.event, row.value);
            let line = table
                .lines()
                .find(|l| l.contains(row.event.as_str()))
                .unwrap();
            assert!(line.trim_start().starts_with(&text), "{line}");
        }
        let tc = &counters[0];
        assert_eq!(tc.get("msec").and_then(|m| m.as_f64()), Some(0.62));
        assert_eq!(
            tc.get("metric_unit").and_then(|m| m.as_str()),
            Some("CPUs utilized")
        );
        let cs = &counters[1];
        let rate = cs.get("metric_value").and_then(|m| m.as_f64()).unwrap();
        assert!((rate - 1612.9).abs() < 0.1, "{rate}");
    }

    #[test]
    fn perf_column_and_intervals() {
        let mut r = sample();
        r.rows[1].perf = Some(1);
        r.rows[0].perf = Some(630_000);
        let t = r.table();
        assert!(t.contains("perf_event"), "{t}");
        assert!(
            t.contains("              0.62 msec               0.63 msec task-clock"),
            "{t}"
        );
        r.interval_end = Some(Duration::from_millis(200));
        r.subject = Subject::Thread(77);
        r.exit = None;
        let lines = r.interval_lines();
        assert_eq!(lines.lines().count(), 3);
        assert!(lines.starts_with("     0.200000000 "), "{lines}");
        let v = r.json();
        assert_eq!(v.get("type").and_then(|t| t.as_str()), Some("interval"));
        assert_eq!(v.get("tid").and_then(|t| t.as_u64()), Some(77));
        assert_eq!(v.get("interval_s").and_then(|t| t.as_f64()), Some(0.2));
    }

    #[test]
    fn raw_events_have_no_metric() {
        let mut r = sample();
        r.rows.push(Row {
            event: "r1f".into(),
            code: 0x1f,
            pmd: 3,
            value: 5,
            perf: None,
        });
        assert_eq!(metric(&r.rows[3], &r), None);
    }
}
