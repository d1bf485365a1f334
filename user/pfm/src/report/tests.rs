//! The table, interval lines, CSV and JSON of one report.

use super::*;

fn row(event: &str, code: u64, pmd: u16, value: u64, generic: Option<Generic>) -> Row {
    Row {
        event: event.into(),
        code,
        pmd,
        value,
        perf: None,
        generic,
        libpfm: None,
        stats: None,
    }
}

fn sample() -> Report {
    Report {
        kind: StatKind::Summary,
        subject: Subject::Command(vec!["sleep".into(), "1".into()]),
        tid: 1234,
        model: "soft".into(),
        rows: vec![
            row("task-clock", 1, 0, 620_000, Some(Generic::TaskClock)),
            row("context-switches", 2, 1, 1, Some(Generic::ContextSwitches)),
            row("cpu-migrations", 3, 2, 0, Some(Generic::CpuMigrations)),
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
        run: None,
        runs: None,
    }
}

const BIG: Style = Style { big_num: true };
const PLAIN: Style = Style { big_num: false };

#[test]
fn thousands() {
    assert_eq!(group_thousands(0), "0");
    assert_eq!(group_thousands(999), "999");
    assert_eq!(group_thousands(1000), "1,000");
    assert_eq!(group_thousands(1234567), "1,234,567");
    assert_eq!(group_thousands(u64::MAX), "18,446,744,073,709,551,615");
    assert_eq!(float_text(1234.5, 2, true), "1,234.50");
    assert_eq!(float_text(1234.5, 2, false), "1234.50");
    assert_eq!(float_text(0.62, 2, true), "0.62");
    assert_eq!(float_text(1_000_000.0, 0, true), "1,000,000");
}

#[test]
fn table_looks_like_perf_stat() {
    let t = sample().table(BIG);
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

/// The byte column where `needle` starts on each line containing it.
fn columns(text: &str, needle: &str) -> Vec<usize> {
    text.lines().filter_map(|l| l.find(needle)).collect()
}

#[test]
fn columns_stay_aligned_for_any_magnitude() {
    for style in [BIG, PLAIN] {
        let mut r = sample();
        r.rows[1].value = u64::MAX;
        r.rows[2].value = 7;
        r.rows[0].event = "an-event-name-longer-than-the-column-width".into();
        let t = r.table(style);
        // Units and event names start at the same column on every line.
        let events: Vec<usize> = ["an-event", "context-switches", "cpu-migrations"]
            .iter()
            .map(|e| columns(&t, e)[0])
            .collect();
        assert!(events.windows(2).all(|w| w[0] == w[1]), "{events:?}\n{t}");
        let metrics = columns(&t, " # ");
        assert!(metrics.windows(2).all(|w| w[0] == w[1]), "{metrics:?}\n{t}");
        assert!(t.contains(&value_text(None, u64::MAX, style).0));
        // Interval lines: the same column whatever the values, line to line.
        r.interval_end = Some(Duration::from_millis(100));
        let mut lines = r.interval_lines(style);
        r.rows[1].value = 3;
        lines.push_str(&r.interval_lines(style));
        let cs = columns(&lines, "context-switches");
        assert_eq!(cs.len(), 2);
        assert_eq!(cs[0], cs[1], "\n{lines}");
        let header = Report::interval_header(false, style);
        assert_eq!(
            header.find("unit").map(|c| c + 5),
            Some(cs[0]),
            "\n{header}{lines}"
        );
    }
}

#[test]
fn no_big_num() {
    let mut r = sample();
    r.rows[1].value = 1_234_567;
    r.rows[0].value = 1_234_567_890;
    let t = r.table(PLAIN);
    assert!(t.contains(" 1234567      context-switches"), "{t}");
    assert!(t.contains(" 1234.57 msec task-clock"), "{t}");
    assert!(!t.contains("1,234"), "{t}");
    assert!(r.table(BIG).contains("1,234,567"));
}

#[test]
fn json_matches_the_table() {
    let r = sample();
    let doc = r.json();
    let text = r.json_line().unwrap();
    let back: pfm_json::Stat = serde_json::from_str(&text).unwrap();
    assert_eq!(back, doc);
    assert_eq!(back.schema_version, SCHEMA_VERSION);
    assert_eq!(back.kind, StatKind::Summary);
    assert_eq!(back.pid, Some(1234));
    assert_eq!(back.tid, None);
    assert_eq!(back.exit_code, Some(0));
    assert_eq!(back.interrupted, None, "thread mode only");
    let table = r.table(BIG);
    for (c, row) in back.counters.iter().zip(&r.rows) {
        assert_eq!(c.event, row.event);
        assert_eq!(c.value, row.value);
        // The table line of that event shows the same value.
        let (text, _) = value_text(row.generic, row.value, BIG);
        let line = table
            .lines()
            .find(|l| l.contains(row.event.as_str()))
            .unwrap();
        assert!(line.trim_start().starts_with(&text), "{line}");
    }
    let tc = &back.counters[0];
    assert_eq!(tc.msec, Some(0.62));
    assert_eq!(tc.unit.as_deref(), Some("ns"));
    assert_eq!(
        tc.metric.as_ref().map(|m| m.unit.as_str()),
        Some("CPUs utilized")
    );
    let rate = back.counters[1].metric.as_ref().unwrap().value;
    assert!((rate - 1612.9).abs() < 0.1, "{rate}");
}

#[test]
fn perf_column_and_intervals() {
    let mut r = sample();
    r.rows[1].perf = Some(1);
    r.rows[0].perf = Some(630_000);
    let t = r.table(BIG);
    assert!(t.contains("perf_event"), "{t}");
    assert!(
        t.contains("              0.62 msec               0.63 msec task-clock"),
        "{t}"
    );
    r.kind = StatKind::Interval;
    r.interval_end = Some(Duration::from_millis(200));
    r.subject = Subject::Thread(77);
    r.exit = None;
    let lines = r.interval_lines(BIG);
    assert_eq!(lines.lines().count(), 3);
    assert!(lines.starts_with("     0.200000000 "), "{lines}");
    let v = r.json();
    assert_eq!(v.kind, StatKind::Interval);
    assert_eq!(v.tid, Some(77));
    assert_eq!(v.interval_s, Some(0.2));
}

fn hardware() -> Report {
    let mut r = sample();
    r.model = "intel_arch_sim".into();
    r.rows = vec![
        row("cpu-cycles", 0x1003c, 0, 2_000_000, Some(Generic::Cycles)),
        row(
            "INST_RETIRED.ANY_P:u",
            0x4100c0,
            1,
            1_000_000,
            Some(Generic::Instructions),
        ),
        row("branches", 0x100c4, 2, 50_000, Some(Generic::Branches)),
        row(
            "branch-misses",
            0x100c5,
            3,
            1_000,
            Some(Generic::BranchMisses),
        ),
        row("r1013c", 0x1013c, 4, 5, None),
    ];
    r
}

#[test]
fn hardware_metrics() {
    let r = hardware();
    let m = |i: usize| r.metric(&r.rows[i]);
    assert_eq!(m(0), None);
    let ipc = m(1).unwrap();
    assert_eq!((ipc.value, ipc.unit.as_str()), (0.5, "insn per cycle"));
    assert_eq!(m(2), None);
    let miss = m(3).unwrap();
    assert_eq!((miss.value, miss.unit.as_str()), (2.0, "% of all branches"));
    assert_eq!(m(4), None, "raw codes have no metric");
    let t = r.table(BIG);
    assert!(t.contains("#     0.50 insn per cycle"), "{t}");
    assert!(t.contains("#    2.00% of all branches"), "{t}");
    // No cycles counted: no IPC; no branches: no rate.
    let mut r = hardware();
    r.rows
        .retain(|row| row.generic == Some(Generic::Instructions));
    assert_eq!(r.metric(&r.rows[0]), None);
    let mut r = hardware();
    r.rows[0].value = 0;
    assert_eq!(r.metric(&r.rows[1]), None, "0 cycles: no IPC");
}

#[test]
fn csv_fields_in_perf_order() {
    let r = sample();
    let csv = r.csv_lines(",");
    let lines: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    assert_eq!(lines.len(), 3);
    for l in &lines {
        assert_eq!(l.len(), 7, "{l:?}");
    }
    // value, unit, event, run time, percentage, metric value, metric unit.
    assert_eq!(
        lines[0],
        [
            "0.62",
            "msec",
            "task-clock",
            "1001000000",
            "100.00",
            "0.001",
            "CPUs utilized"
        ]
    );
    assert_eq!(lines[1][..3], ["1", "", "context-switches"]);
    assert_eq!(lines[1][6], "K/sec");
    // Counts are never grouped, and a count without metric ends in two
    // empty fields.
    let mut h = hardware();
    h.rows[0].value = 1_234_567;
    let csv = h.csv_lines(";");
    let first: Vec<&str> = csv.lines().next().unwrap().split(';').collect();
    assert_eq!(
        first,
        ["1234567", "", "cpu-cycles", "1001000000", "100.00", "", ""]
    );
    // -I adds the interval's end first; -r the variation after the event.
    let mut i = sample();
    i.interval_end = Some(Duration::from_millis(100));
    assert!(i.csv_lines(",").lines().all(|l| l.split(',').count() == 8));
    assert!(i.csv_lines(",").starts_with("0.100000000,"));
    let mut s = sample();
    s.runs = Stats::of(&[1, 2, 3]).map(|st| (3, st));
    s.rows[1].stats = Stats::of(&[1, 2, 3]);
    let csv = s.csv_lines(",");
    let l: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    assert!(l.iter().all(|f| f.len() == 8), "{csv}");
    assert_eq!(l[1][3], "28.87%", "{csv}");
}

#[test]
fn repeat_summary() {
    let mut r = sample();
    let st = Stats::of(&[10, 20, 30]).unwrap();
    r.runs = Some((
        3,
        Stats::of(&[1_000_000_000, 1_000_000_000, 1_000_000_000]).unwrap(),
    ));
    r.rows[1].value = 20;
    r.rows[1].stats = Some(st.clone());
    let t = r.table(BIG);
    assert!(t.contains("(perfmon, PMU model soft, 3 runs)"), "{t}");
    let line = t.lines().find(|l| l.contains("context-switches")).unwrap();
    assert!(
        line.ends_with(&format!("( ± {:>5.2}% )", st.noise_pct)),
        "{line}"
    );
    assert!(line.ends_with("( ± 28.87% )"), "{line}");
    assert!(
        t.contains("1.000000000 ± 0.000000000 seconds time elapsed  ( ±  0.00% )"),
        "{t}"
    );
    assert!(!t.contains("seconds user"), "{t}");
    let doc = r.json();
    assert_eq!(doc.runs, Some(3));
    assert_eq!(doc.counters[1].stats.as_ref(), Some(&st));
}
