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
        mux: None,
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
        mux: None,
        inherit: None,
        lost_threads: None,
        threads: None,
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

/// Five soft events on two counters, three sets at 4 ms, and a fourth set
/// that never ran: each row's set, its set's times, its estimate.
fn multiplexed() -> Report {
    let mut r = sample();
    let ms = |v: u64| v * 1_000_000;
    let mux = |set: u16, value: u64, running: u64| MuxCount::of(set, value, ms(3), running);
    let rows = [
        ("task-clock", 1, 0, 1_200_000, 0, Some(Generic::TaskClock)),
        (
            "context-switches",
            2,
            1,
            4,
            0,
            Some(Generic::ContextSwitches),
        ),
        ("cpu-migrations", 3, 0, 1, 1, Some(Generic::CpuMigrations)),
        ("task-clock", 1, 1, 1_200_000, 1, Some(Generic::TaskClock)),
        (
            "context-switches",
            2,
            0,
            2,
            2,
            Some(Generic::ContextSwitches),
        ),
        ("cpu-migrations", 3, 0, 0, 3, Some(Generic::CpuMigrations)),
    ];
    let running = [1_200_000, 1_200_000, 600_000, 0];
    r.rows = rows
        .iter()
        .map(|&(event, code, pmd, value, set, generic)| Row {
            mux: Some(mux(set, value, running[set as usize])),
            ..row(event, code, pmd, value, generic)
        })
        .collect();
    r.time_running = ms(3);
    r.elapsed = Duration::from_millis(10);
    r.mux = Some(Multiplexing {
        sets: 4,
        counters: 2,
        switch: Switch::Time(4_000_000),
    });
    r
}

#[test]
fn multiplexed_table() {
    let r = multiplexed();
    // The estimates: 1.2 ms x 3 / 1.2 = 3 ms; 4 x 3 / 1.2 = 10; 1 x 3 /
    // 1.2 = 2.5, rounded half up to 3; 2 x 3 / 0.6 = 10. Metrics from the
    // estimates: 3 ms of 10 ms elapsed, 10 switches per 3 ms of task-clock.
    // Sets 0 and 1 ran 1.2 of 3 ms (40.00%), set 2 0.6 (20.00%), set 3
    // never: <not counted>, (0.00%), no metric.
    let m: Vec<Option<u64>> = r.rows.iter().map(Row::shown).collect();
    assert_eq!(
        m,
        [
            Some(3_000_000),
            Some(10),
            Some(3),
            Some(3_000_000),
            Some(10),
            None
        ]
    );
    let t = r.table(BIG);
    let expected = "
 Performance counter stats for 'sleep 1' (perfmon, PMU model soft):

              3.00 msec task-clock                       #    0.300 CPUs utilized  (40.00%)
                10      context-switches                 #    3.333 K/sec          (40.00%)
                 3      cpu-migrations                   #    1.000 K/sec          (40.00%)
              3.00 msec task-clock                       #    0.300 CPUs utilized  (40.00%)
                10      context-switches                 #    3.333 K/sec          (20.00%)
     <not counted>      cpu-migrations                                             (0.00%)

 6 events multiplexed in 4 event sets on 2 counters, switched every 4ms of running time

       0.010000000 seconds time elapsed

       0.000000000 seconds user
       0.001113000 seconds sys

";
    assert_eq!(t, expected, "\n{t}");
}

#[test]
fn multiplexed_csv_json_and_intervals() {
    let r = multiplexed();
    let csv = r.csv_lines(",");
    let l: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    // The estimate, the set's running time, the share of the set's time.
    assert_eq!(
        l[0],
        [
            "3.00",
            "msec",
            "task-clock",
            "1200000",
            "40.00",
            "0.300",
            "CPUs utilized"
        ]
    );
    assert_eq!(l[2][..5], ["3", "", "cpu-migrations", "1200000", "40.00"]);
    assert_eq!(l[4][..5], ["10", "", "context-switches", "600000", "20.00"]);
    assert_eq!(
        l[5],
        ["<not counted>", "", "cpu-migrations", "0", "0.00", "", ""]
    );
    // JSON: the raw value, the set, its times, the share, the estimate.
    let doc = r.json();
    let c = &doc.counters;
    assert_eq!((c[2].value, c[2].set, c[2].estimate), (1, Some(1), Some(3)));
    assert_eq!(
        (c[2].time_enabled_ns, c[2].time_running_ns, c[2].running_pct),
        (Some(3_000_000), Some(1_200_000), Some(40.0))
    );
    assert_eq!(c[0].msec, Some(1.2), "msec is the raw value's");
    assert_eq!(
        (c[5].value, c[5].set, c[5].estimate, c[5].time_running_ns),
        (0, Some(3), None, Some(0))
    );
    assert!(c[5].metric.is_none());
    let m = doc.multiplex.as_ref().unwrap();
    assert_eq!(
        (
            m.sets,
            m.counters,
            m.switch_ns,
            m.switch_on_overflow,
            m.period
        ),
        (4, 2, Some(4_000_000), None, None)
    );
    let back: pfm_json::Stat = serde_json::from_str(&r.json_line().unwrap()).unwrap();
    assert_eq!(back, doc);
    // Not multiplexed: none of it (the documents stay as they were).
    let plain = sample().json_line().unwrap();
    for key in [
        "\"set\"",
        "estimate",
        "time_enabled_ns\":3",
        "running_pct",
        "multiplex",
    ] {
        assert!(!plain.contains(key), "{key} in {plain}");
    }
    // Interval lines carry the share too; a share of 100% is not shown.
    let mut i = multiplexed();
    i.kind = StatKind::Interval;
    i.interval_end = Some(Duration::from_millis(200));
    i.rows[0].mux = Some(MuxCount::of(0, 5, 5, 5));
    let lines = i.interval_lines(BIG);
    let first = lines.lines().next().unwrap();
    assert!(first.ends_with("CPUs utilized"), "{first}");
    assert!(
        lines.lines().nth(1).unwrap().ends_with("(40.00%)"),
        "{lines}"
    );
    // Overflow switching in the note and the JSON.
    let mut o = multiplexed();
    o.mux = Some(Multiplexing {
        sets: 2,
        counters: 3,
        switch: Switch::Overflow {
            count: 2,
            period: 5,
        },
    });
    assert!(o.table(BIG).contains(
        "6 events multiplexed in 2 event sets on 3 counters, switched after 2 overflows \
         of period 5 of each set's first event"
    ));
    let m = o.json().multiplex.unwrap();
    assert_eq!(
        (m.switch_ns, m.switch_on_overflow, m.period),
        (None, Some(2), Some(5))
    );
}

#[test]
fn multiplexed_repeat_shows_the_estimates_noise() {
    let mut r = multiplexed();
    r.runs = Stats::of(&[1, 1]).map(|s| (2, s));
    let est = Stats::of(&[8, 12]).unwrap();
    r.rows[1].stats = Stats::of(&[3, 5]);
    if let Some(m) = &mut r.rows[1].mux {
        m.estimate = Some(10);
        m.estimate_stats = Some(est.clone());
    }
    let t = r.table(BIG);
    let line = t.lines().find(|l| l.contains("context-switches")).unwrap();
    assert!(
        line.ends_with(&format!("( ± {:>5.2}% )  (40.00%)", est.noise_pct)),
        "{line}"
    );
    let csv = r.csv_lines(",");
    let f: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
    assert_eq!(f[3], format!("{:.2}%", est.noise_pct));
    assert_eq!(r.json().counters[1].estimate_stats, Some(est));
}

/// `sample()` as a `--per-thread` summary of a shell and two children,
/// one of which exited unseen.
fn per_thread() -> Report {
    let mut r = sample();
    r.subject = Subject::Command(vec!["sh".into(), "-c".into(), "x".into()]);
    r.inherit = Some(true);
    r.lost_threads = Some(0);
    let t = |tid: u32, comm: Option<&str>, values: [u64; 3]| ThreadCounts {
        tid,
        pid: tid,
        comm: comm.map(str::to_string),
        exited: true,
        revoked: false,
        values: values.to_vec(),
        time_enabled_ns: values[0],
        time_running_ns: values[0],
    };
    r.threads = Some(vec![
        t(1234, Some("sh"), [400_000, 1, 0]),
        t(1235, Some("sleep"), [200_000, 1_000_000, 0]),
        t(1236, None, [20_000, 0, 0]),
    ]);
    r
}

#[test]
fn per_thread_table() {
    let t = per_thread().table(BIG);
    let expected = "
             comm      tid  task-clock (msec)  context-switches  cpu-migrations
               sh     1234               0.40                 1               0
            sleep     1235               0.20         1,000,000               0
                -     1236               0.02                 0               0
";
    assert!(t.contains(expected), "\n{t}");
    // Under the counts, before the elapsed time.
    let (counts, threads, elapsed) = (
        t.find("cpu-migrations ").unwrap(),
        t.find("             comm").unwrap(),
        t.find("seconds time elapsed").unwrap(),
    );
    assert!(counts < threads && threads < elapsed, "\n{t}");
    // Without --per-thread nothing of it.
    assert!(!sample().table(BIG).contains(" comm "));
    // Plain numbers with --no-big-num; the columns still hold them.
    let t = per_thread().table(PLAIN);
    assert!(
        t.contains(
            "            sleep     1235               0.20           1000000               0\n"
        ),
        "\n{t}"
    );
}

#[test]
fn per_thread_csv_and_json() {
    let r = per_thread();
    let csv = r.csv_lines(",");
    let lines: Vec<&str> = csv.lines().collect();
    // 3 event lines, then 3 per thread, perf's comm-tid first.
    assert_eq!(lines.len(), 3 + 9, "{csv}");
    assert_eq!(lines[3], "sh-1234,0.40,msec,task-clock,400000,100.00,,");
    assert_eq!(
        lines[7],
        "sleep-1235,1000000,,context-switches,200000,100.00,,"
    );
    assert_eq!(lines[9], "--1236,0.02,msec,task-clock,20000,100.00,,");
    assert!(
        lines[3..].iter().all(|l| l.split(',').count() == 8),
        "{csv}"
    );
    let back: pfm_json::Stat = serde_json::from_str(&r.json_line().unwrap()).unwrap();
    let threads = back.threads.unwrap();
    assert_eq!(threads.len(), 3);
    assert_eq!(threads[1].values, vec![200_000, 1_000_000, 0]);
    assert_eq!(threads[2].comm, None);
    assert_eq!((back.inherit, back.lost_threads), (Some(true), Some(0)));
    assert_eq!(back.pids, None);
    // Without --per-thread and inheritance, none of the fields.
    let text = sample().json_line().unwrap();
    for k in ["threads", "lost_threads", "inherit", "pids"] {
        assert!(!text.contains(&format!("\"{k}\"")), "{k} in {text}");
    }
}

#[test]
fn processes_subject() {
    let mut r = sample();
    r.subject = Subject::Processes(vec![12, 34]);
    r.exit = None;
    r.lost_threads = Some(2);
    let t = r.table(BIG);
    assert!(
        t.contains("Performance counter stats for process id '12,34' (perfmon"),
        "{t}"
    );
    let v = r.json();
    assert_eq!((v.pids, v.pid, v.tid), (Some(vec![12, 34]), None, None));
    assert_eq!((v.interrupted, v.target_exited), (Some(false), Some(false)));
    assert_eq!(v.lost_threads, Some(2));
}
