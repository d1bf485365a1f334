//! `pfm script`: every sample of a record file, in the file's order, as
//! `perf script` prints them, or one JSON object each
//! ([`pfm_json::ScriptSample`]).
//!
//! ```text
//!  pfm_test_record  412/413   [001]    12.345678:    2000000 task-clock:  55d0c0a01234 hot_work+0x14 (/tests/pfm_test_record)
//! ```
//!
//! A sample of a recording with call chains (`-g`) ends its first line
//! after the event, then takes a line per frame, the sampled instruction
//! first, each a tab and the frame, and an empty line: perf script's
//! layout.

use std::fmt::Write;
use std::path::Path;

use pfm_json::{ScriptFrame, ScriptSample, SCHEMA_VERSION};

use super::{load, Profile, StackSample};
use crate::cli::ScriptArgs;
use crate::output::Output;
use crate::symbols::Frame;
use crate::Failure;

/// The JSON object of sample `s` of a recording of `event`.
pub fn sample_json(s: &StackSample, event: &str) -> ScriptSample {
    ScriptSample {
        schema_version: SCHEMA_VERSION,
        time_ns: s.time_ns,
        tid: s.tid,
        pid: s.pid,
        comm: s.comm.to_string(),
        cpu: s.cpu,
        event: event.to_string(),
        period: s.period,
        stack: s.stack.iter().map(frame_json).collect(),
    }
}

fn frame_json(f: &Frame) -> ScriptFrame {
    ScriptFrame {
        ip: f.address,
        symbol: f.function.as_ref().map(|func| func.name.to_string()),
        offset: f.function.as_ref().and(f.offset),
        dso: f.dso.to_string(),
    }
}

/// A frame as perf script prints it: `55d0c0a01234 hot_work+0x14
/// (/path/of/dso)`, `[unknown]` without a symbol.
pub fn frame_text(f: &ScriptFrame) -> String {
    let sym = match (&f.symbol, f.offset) {
        (Some(s), Some(o)) => format!("{s}+{o:#x}"),
        (Some(s), None) => s.clone(),
        (None, _) => "[unknown]".to_string(),
    };
    format!("{:>16x} {sym} ({})", f.ip, f.dso)
}

/// The text of one sample: its line (and with `chains`, its stack's lines
/// and an empty one), each ending in a newline.
pub fn sample_text(s: &ScriptSample, chains: bool) -> String {
    let mut out = format!(
        "{:>16} {:>7}/{:<7} [{:03}] {:>5}.{:06}: {:>10} {}:",
        s.comm,
        s.pid,
        s.tid,
        s.cpu,
        s.time_ns / 1_000_000_000,
        s.time_ns % 1_000_000_000 / 1_000,
        s.period,
        s.event
    );
    if chains {
        out.push('\n');
        for f in &s.stack {
            let _ = writeln!(out, "\t{}", frame_text(f));
        }
        out.push('\n');
    } else {
        match s.stack.first() {
            Some(f) => {
                let _ = writeln!(out, "  {}", frame_text(f));
            }
            None => out.push('\n'),
        }
    }
    out
}

/// Every sample of `p`, as text or one JSON object a line.
pub fn render(p: &Profile, json: bool) -> Result<String, Failure> {
    let chains = p.header.call_chains;
    let mut out = String::new();
    for s in &p.samples {
        let doc = sample_json(s, &p.header.event);
        if json {
            let line =
                serde_json::to_string(&doc).map_err(|e| Failure::new(format!("JSON: {e}")))?;
            out.push_str(&line);
            out.push('\n');
        } else {
            out.push_str(&sample_text(&doc, chains));
        }
    }
    Ok(out)
}

/// Runs `pfm script`; returns the exit status.
pub fn script(args: &ScriptArgs, json: bool, output: Option<&Path>) -> Result<u8, Failure> {
    let (profile, _, _) = load(&args.input, &args.filter)?;
    let text = render(&profile, json)?;
    Output::open(output, Output::Stdout)?.write(&text)?;
    Ok(0)
}
