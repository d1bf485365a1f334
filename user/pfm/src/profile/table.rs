//! `pfm report`'s table, in the habits of `perf report --stdio`: a few
//! comment lines saying what was recorded, then one row per function (or
//! shared object) with its share of the samples.

use std::fmt::Write;

use super::{dso_name, percent, Profile};
use crate::cli::SortKey;

/// The whole table. `file`: the record file's name.
pub fn render(p: &Profile, file: &str, sort: SortKey) -> String {
    let h = &p.header;
    let total = p.samples.len() as u64;
    let mut out = String::new();
    let _ = writeln!(out, "# pfm report of {file}");
    let _ = writeln!(
        out,
        "# {total} samples of {}, one every {} (PMU model {}); {} lost",
        h.event,
        super::period_text(h),
        h.model,
        p.lost()
    );
    if let Some(mask) = h.random_mask {
        let seed = h
            .random_seed
            .map_or(String::new(), |s| format!(", seed {s:#x}"));
        let _ = writeln!(
            out,
            "# periods randomised: {} to {} events{seed}",
            h.period,
            h.period.saturating_add(mask)
        );
    }
    if let Some(cmd) = &h.command {
        let scope = if h.inherit {
            "with the processes it created"
        } else {
            "its initial thread"
        };
        let _ = writeln!(out, "# command: {} ({scope})", cmd.join(" "));
    }
    if let Some(tids) = &h.tids {
        let list: Vec<String> = tids.iter().map(u32::to_string).collect();
        let _ = writeln!(out, "# threads: {}", list.join(","));
    }
    if p.finish.is_none() {
        let _ = writeln!(out, "# the file has no end record: pfm record was stopped");
    }
    let rows = p.rows(sort);
    let comm_w = rows
        .iter()
        .map(|r| r.comm.chars().count())
        .chain([7])
        .max()
        .unwrap_or(7);
    let dso_w = rows
        .iter()
        .map(|r| dso_name(&r.dso).chars().count())
        .chain([13])
        .max()
        .unwrap_or(13);
    let samples_w = total.to_string().len().max(7);
    let _ = writeln!(out, "#");
    let mut head = format!(
        "# Overhead  {:>samples_w$}  {:<comm_w$}  {:<dso_w$}",
        "Samples", "Command", "Shared Object"
    );
    let mut dots = format!(
        "# ........  {}  {}  {}",
        ".".repeat(samples_w),
        ".".repeat(comm_w),
        ".".repeat(dso_w)
    );
    if sort == SortKey::Sym {
        head.push_str("  Symbol");
        dots.push_str("  ......");
    }
    let _ = writeln!(out, "{}", head.trim_end());
    let _ = writeln!(out, "{dots}");
    let _ = writeln!(out, "#");
    for r in &rows {
        let mut line = format!(
            "  {:>7.2}%  {:>samples_w$}  {:<comm_w$}  {:<dso_w$}",
            percent(r.samples, total),
            r.samples,
            r.comm,
            dso_name(&r.dso)
        );
        if let Some(s) = &r.symbol {
            line.push_str("  [.] ");
            line.push_str(s);
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}
