//! Groups, `--sets`, `--switch`, the assignment to sets, the registers of
//! each set, and the estimates' arithmetic.

use super::*;
use perfmon::abi::PFM_SETFL_MASK;

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

fn g(v: &[&[&str]]) -> Vec<Vec<String>> {
    v.iter().map(|x| s(x)).collect()
}

const TIME: Switch = Switch::Time(DEFAULT_SWITCH_NS);

#[test]
fn groups_of_e() {
    // clap splits -e at commas; the braces put a group back together.
    assert_eq!(
        parse_groups(&s(&["{cs", "migrations}", "task-clock"])).unwrap(),
        g(&[&["cs", "migrations"], &["task-clock"]])
    );
    assert_eq!(
        parse_groups(&s(&["a", "{b}", "{c", "d", "e}", " f "])).unwrap(),
        g(&[&["a"], &["b"], &["c", "d", "e"], &["f"]])
    );
    // Empty tokens (a trailing comma) are dropped, as before.
    assert_eq!(
        parse_groups(&s(&["a", "", "b"])).unwrap(),
        g(&[&["a"], &["b"]])
    );
    // libpfm4 names keep their colons and dots inside a group.
    assert_eq!(
        parse_groups(&s(&[
            "{INST_RETIRED.ANY_P:u",
            "CPU_CLK_UNHALTED:THREAD_P:u}"
        ]))
        .unwrap(),
        g(&[&["INST_RETIRED.ANY_P:u", "CPU_CLK_UNHALTED:THREAD_P:u"]])
    );
    for bad in [
        &["{a", "b"][..],
        &["a}"],
        &["{a", "{b}", "c}"],
        &["{}"],
        &["{", "}"],
        &["{a}:u"],
        &["a{b}"],
        &["{a", "b}c"],
    ] {
        assert!(parse_groups(&s(bad)).is_err(), "accepted {bad:?}");
    }
    let e = parse_groups(&s(&["{a", "b"])).unwrap_err();
    assert!(e.contains("'{a,b' is not closed"), "{e}");
}

#[test]
fn sets_option() {
    assert_eq!(
        parse_sets(&s(&["cs,task-clock:migrations,task-clock"])).unwrap(),
        g(&[&["cs", "task-clock"], &["migrations", "task-clock"]])
    );
    // Repeated: the sets of each occurrence, in order.
    assert_eq!(
        parse_sets(&s(&["a:b", "c,d"])).unwrap(),
        g(&[&["a"], &["b"], &["c", "d"]])
    );
    for bad in ["a,,b", "a::b", ":a", "a:", "{a,b}:c", ""] {
        assert!(parse_sets(&s(&[bad])).is_err(), "accepted {bad:?}");
    }
    let sixteen = vec!["cs"; 16].join(":");
    assert_eq!(
        parse_sets(std::slice::from_ref(&sixteen)).unwrap().len(),
        16
    );
    let e = parse_sets(&[format!("{sixteen}:cs")]).unwrap_err();
    assert!(e.contains("17 sets") && e.contains("at most 16"), "{e}");
}

#[test]
fn switch_times() {
    assert_eq!(parse_switch_time("10ms"), Ok(10_000_000));
    assert_eq!(parse_switch_time("100us"), Ok(100_000));
    assert_eq!(parse_switch_time("100000ns"), Ok(100_000));
    assert_eq!(parse_switch_time("2s"), Ok(2_000_000_000));
    assert_eq!(parse_switch_time(" 4 ms "), Ok(4_000_000));
    // The module's minimum, 100 us: below it pfm refuses rather than let
    // the module raise it.
    let e = parse_switch_time("99999ns").unwrap_err();
    assert!(e.contains("shorter") && e.contains("100us"), "{e}");
    assert!(parse_switch_time("10")
        .unwrap_err()
        .contains("needs a unit"));
    for bad in ["", "ms", "1.5ms", "-1ms", "10m", "10 sec", "1e3us"] {
        assert!(parse_switch_time(bad).is_err(), "accepted {bad:?}");
    }
    // u64 ns holds 18446744073 s.
    assert_eq!(
        parse_switch_time("18446744073s"),
        Ok(18_446_744_073_000_000_000)
    );
    assert!(parse_switch_time("18446744074s")
        .unwrap_err()
        .contains("too long"));
    assert_eq!(duration_text(4_000_000), "4ms");
    assert_eq!(duration_text(1_500_000), "1500us");
    assert_eq!(duration_text(100_000), "100us");
    assert_eq!(duration_text(2_000_000_000), "2s");
    assert_eq!(duration_text(7), "7ns");
}

#[test]
fn first_fit_keeps_groups_whole() {
    // Two counters: [1, 2, 1] packs into 2 sets, the last single filling
    // the first set's hole, not 3 in order.
    assert_eq!(assign(&[1, 2, 1], 2), Ok(vec![vec![0, 2], vec![1]]));
    assert_eq!(
        assign(&[1, 1, 1, 1, 1], 2),
        Ok(vec![vec![0, 1], vec![2, 3], vec![4]])
    );
    assert_eq!(assign(&[2, 2], 4), Ok(vec![vec![0, 1]]));
    assert_eq!(assign(&[3, 2, 1, 2], 4), Ok(vec![vec![0, 2], vec![1, 3]]));
    // A group larger than a set: its index.
    assert_eq!(assign(&[1, 3], 2), Err(1));
    assert_eq!(assign(&[], 2), Ok(vec![]));
}

#[test]
fn plans() {
    // Fits: one set, whatever the switch.
    let five = g(&[&["a"], &["b"], &["c"], &["d"]]);
    assert_eq!(plan(&five, false, 4, TIME), Ok(vec![vec![0, 1, 2, 3]]));
    let ovfl = Switch::Overflow {
        count: 2,
        period: 5,
    };
    assert_eq!(plan(&five, false, 4, ovfl), Ok(vec![vec![0, 1, 2, 3]]));
    // Five events, two counters: 2 + 2 + 1, in -e order.
    let e5 = g(&[&["tc"], &["cs"], &["mg"], &["tc"], &["cs"]]);
    assert_eq!(
        plan(&e5, false, 2, TIME),
        Ok(vec![vec![0, 1], vec![2, 3], vec![4]])
    );
    // With a trigger per set, a set holds one event.
    assert_eq!(
        plan(&e5, false, 2, ovfl),
        Ok(vec![vec![0], vec![1], vec![2], vec![3], vec![4]])
    );
    // Groups stay together; event indices follow the flattened list.
    let grouped = g(&[&["cs", "mg"], &["tc"], &["tc", "cs"]]);
    assert_eq!(
        plan(&grouped, false, 2, TIME),
        Ok(vec![vec![0, 1], vec![2], vec![3, 4]])
    );
    let grouped = g(&[&["a"], &["b", "c"], &["d"]]);
    assert_eq!(
        plan(&grouped, false, 2, TIME),
        Ok(vec![vec![0, 3], vec![1, 2]])
    );
    // A group larger than the counters: a clear error.
    let big = g(&[&["cs", "mg", "tc"], &["x"]]);
    let e = plan(&big, false, 2, TIME).unwrap_err();
    assert!(
        e.starts_with("the group {cs,mg,tc} has 3 events and a set holds 2"),
        "{e}"
    );
    let e = plan(&g(&[&["a", "b"], &["c"], &["d"]]), false, 2, ovfl).unwrap_err();
    assert!(
        e.contains("holds 1 (one counter per set is the switch trigger)"),
        "{e}"
    );
    // One counter and overflow switching: no room for events.
    let e = plan(&e5, false, 1, ovfl).unwrap_err();
    assert!(e.contains("needs a counter for each set's trigger"), "{e}");
    // More than 16 sets.
    let many: Vec<Vec<String>> = (0..33).map(|i| vec![format!("e{i}")]).collect();
    let e = plan(&many, false, 2, TIME).unwrap_err();
    assert!(
        e.contains("33 events need 17 sets") && e.contains("at most 16"),
        "{e}"
    );
    assert_eq!(plan(&many[..32], false, 2, TIME).map(|p| p.len()), Ok(16));
}

#[test]
fn explicit_sets() {
    // As given, even when they would fit one set: the user asked.
    let two = g(&[&["cs"], &["cs"]]);
    assert_eq!(plan(&two, true, 4, TIME), Ok(vec![vec![0], vec![1]]));
    let sets = g(&[&["cs", "tc"], &["mg", "tc"], &["cs"]]);
    assert_eq!(
        plan(&sets, true, 2, TIME),
        Ok(vec![vec![0, 1], vec![2, 3], vec![4]])
    );
    // One set: plain counting (no sets), if it fits.
    assert_eq!(
        plan(&g(&[&["a", "b"]]), true, 2, TIME),
        Ok(vec![vec![0, 1]])
    );
    let e = plan(&g(&[&["a", "b", "c"]]), true, 2, TIME).unwrap_err();
    assert!(
        e.contains("'a,b,c' has 3 events and the model 2 counters"),
        "{e}"
    );
    let e = plan(&g(&[&["a"], &["b", "c", "d"]]), true, 2, TIME).unwrap_err();
    assert!(e.contains("'b,c,d' has 3 events and a set holds 2"), "{e}");
    let ovfl = Switch::Overflow {
        count: 1,
        period: 1,
    };
    let e = plan(&sets, true, 2, ovfl).unwrap_err();
    assert!(e.contains("'cs,tc' has 2 events and a set holds 1"), "{e}");
}

#[test]
fn layout_registers() {
    // Soft model, two counters, three sets at 4 ms.
    let l = Layout::new(&[vec![0, 1], vec![2, 3], vec![4]], &[0, 1], TIME);
    assert_eq!(
        l.slots,
        vec![
            Slot { set: 0, pmd: 0 },
            Slot { set: 0, pmd: 1 },
            Slot { set: 1, pmd: 0 },
            Slot { set: 1, pmd: 1 },
            Slot { set: 2, pmd: 0 },
        ]
    );
    let d = l.descs();
    assert_eq!(d.len(), 3);
    for (i, x) in d.iter().enumerate() {
        assert_eq!(
            (
                x.set_id,
                x.set_flags,
                x.set_timeout,
                x.set_ovfl_switch_cnt,
                x.set_switch_pmds
            ),
            (i as u16, PFM_SETFL_TIME_SWITCH, 4_000_000, 0, 0)
        );
        assert_eq!(x.set_flags & !PFM_SETFL_MASK, 0);
    }
    let (pmcs, owners) = l.pmcs(&[1, 2, 3, 1, 2]);
    let got: Vec<(u16, u16, u64)> = pmcs
        .iter()
        .map(|r| (r.reg_set, r.reg_num, r.reg_value))
        .collect();
    assert_eq!(
        got,
        vec![(0, 0, 1), (0, 1, 2), (1, 0, 3), (1, 1, 1), (2, 0, 2)]
    );
    assert_eq!(owners, vec![0, 1, 2, 3, 4]);
    assert!(l
        .pmds()
        .iter()
        .all(|p| p.reg_value == 0 && p.reg_short_reset == 0));
    assert_eq!(l.sets[0].mask(), 0b11);
    assert_eq!(l.sets[2].mask(), 0b1);
    // Intel's counters skip none below 16, but the layout takes them as
    // given: PMD numbers are the model's, not positions.
    let l = Layout::new(&[vec![1], vec![0]], &[3, 7], TIME);
    assert_eq!(
        l.slots,
        vec![Slot { set: 1, pmd: 3 }, Slot { set: 0, pmd: 3 }]
    );
}

#[test]
fn layout_overflow_trigger() {
    let sw = Switch::Overflow {
        count: 2,
        period: 5,
    };
    let l = Layout::new(&[vec![0, 2], vec![1]], &[0, 1, 2], sw);
    assert_eq!(l.sets[0].trigger, Some(2));
    assert_eq!(l.sets[1].trigger, Some(1));
    let d = l.descs();
    assert_eq!(
        (
            d[0].set_flags,
            d[0].set_ovfl_switch_cnt,
            d[0].set_switch_pmds,
            d[0].set_timeout
        ),
        (PFM_SETFL_OVFL_SWITCH, 2, 1 << 2, 0)
    );
    assert_eq!(d[1].set_switch_pmds, 1 << 1);
    // The trigger selects the set's first event, after the events.
    let (pmcs, owners) = l.pmcs(&[10, 11, 12]);
    let got: Vec<(u16, u16, u64)> = pmcs
        .iter()
        .map(|r| (r.reg_set, r.reg_num, r.reg_value))
        .collect();
    assert_eq!(
        got,
        vec![(0, 0, 10), (0, 1, 12), (0, 2, 10), (1, 0, 11), (1, 1, 11)]
    );
    assert_eq!(owners, vec![0, 2, 0, 1, 1]);
    // Events from 0; the trigger from -5, reloaded to -5 after each
    // overflow: it overflows at every 5th event.
    let pmds: Vec<(u16, u16, u64, u64)> = l
        .pmds()
        .iter()
        .map(|r| (r.reg_set, r.reg_num, r.reg_value, r.reg_short_reset))
        .collect();
    let m5 = u64::MAX - 4;
    assert_eq!(
        pmds,
        vec![
            (0, 0, 0, 0),
            (0, 1, 0, 0),
            (0, 2, m5, m5),
            (1, 0, 0, 0),
            (1, 1, m5, m5)
        ]
    );
    // The trigger is not read: masks are the events'.
    assert_eq!(l.sets[0].mask(), 0b11);
    assert_eq!(l.sets[1].mask(), 0b1);
}

#[test]
fn readings_in_event_order() {
    let l = Layout::new(&[vec![0, 3], vec![1, 2]], &[0, 1], TIME);
    let per_set = [
        Counts {
            values: vec![10, 13],
            time_enabled: 100,
            time_running: 60,
        },
        Counts {
            values: vec![11, 12],
            time_enabled: 100,
            time_running: 40,
        },
    ];
    let r = l.assemble(&per_set, (500, 100));
    assert_eq!(r.counts.values, vec![10, 11, 12, 13]);
    assert_eq!(r.counts.time_enabled, 500);
    assert_eq!(r.counts.time_running, 100);
    assert_eq!(r.times, vec![(100, 60), (100, 40), (100, 40), (100, 60)]);
    let prev = Reading {
        counts: Counts {
            values: vec![1, 1, 2, 3],
            time_enabled: 200,
            time_running: 50,
        },
        times: vec![(50, 30), (50, 20), (50, 20), (50, 30)],
    };
    let d = r.delta(&prev);
    assert_eq!(d.counts.values, vec![9, 10, 10, 10]);
    assert_eq!((d.counts.time_enabled, d.counts.time_running), (300, 50));
    assert_eq!(d.times, vec![(50, 30), (50, 20), (50, 20), (50, 30)]);
    // Without sets a reading has no per-event times, and its delta none.
    let z = Reading::zero(2, false);
    assert!(z.times.is_empty() && z.delta(&z).times.is_empty());
    assert_eq!(Reading::zero(2, true).times, vec![(0, 0); 2]);
}

#[test]
fn estimates_and_shares() {
    // perf's (66.67%): 2 of 3, rounded to nearest hundredth.
    assert_eq!(percent_text(2, 3).as_deref(), Some("66.67"));
    assert_eq!(percent_text(1, 3).as_deref(), Some("33.33"));
    assert_eq!(percent_text(1, 8).as_deref(), Some("12.50"));
    // Halves up, exactly: 1/800 is 0.125%, 1/1600 is 0.0625%.
    assert_eq!(percent_text(1, 800).as_deref(), Some("0.13"));
    assert_eq!(percent_text(1, 1600).as_deref(), Some("0.06"));
    assert_eq!(percent_text(0, 5).as_deref(), Some("0.00"));
    assert_eq!(percent_text(5, 5).as_deref(), Some("100.00"));
    // Just under all of it still rounds to 100.00.
    assert_eq!(percent_text(999_999, 1_000_000).as_deref(), Some("100.00"));
    assert_eq!(percent_text(0, 0), None);
    // The estimate: count x enabled / running, rounded to nearest (halves
    // up), in 128 bits; none when it never ran.
    assert_eq!(perfmon::scale_u64(1000, 3, 2), Some(1500));
    assert_eq!(perfmon::scale_u64(1, 3, 2), Some(2));
    assert_eq!(perfmon::scale_u64(1, 5, 4), Some(1));
    assert_eq!(perfmon::scale_u64(0, 3, 2), Some(0));
    assert_eq!(perfmon::scale_u64(7, 3, 0), None);
    // Beyond 64 bits in the product, exact.
    assert_eq!(
        perfmon::scale_u64(u64::MAX / 3, 3_000_000_000, 1_000_000_000),
        Some(u64::MAX / 3 * 3)
    );
    assert_eq!(perfmon::scale_u64(u64::MAX, 2, 1), Some(u64::MAX));
}
