//! `pfm report`'s table, in the habits of `perf report --stdio`: a few
//! comment lines saying what was recorded, then one row per key of the
//! `--sort` keys with its share of the samples (and its Children share),
//! then under each row its call tree, drawn as perf's graph style draws it.

use std::fmt::Write;

use super::{dso_name, percent, Node, Profile, Row, View};
use crate::cli::{Sort, SortKey};

/// A column of the keys: its heading and its cell of a row.
fn heading(k: SortKey) -> &'static str {
    match k {
        SortKey::Comm => "Command",
        SortKey::Pid => "Pid",
        SortKey::Tid => "Tid",
        SortKey::Dso => "Shared Object",
        SortKey::Sym => "Symbol",
    }
}

fn cell(k: SortKey, r: &Row) -> String {
    let key = &r.key;
    match k {
        SortKey::Comm => key.comm.as_deref().unwrap_or("").to_string(),
        SortKey::Pid => key.pid.map_or(String::new(), |p| p.to_string()),
        SortKey::Tid => key.tid.map_or(String::new(), |t| t.to_string()),
        SortKey::Dso => key.dso.as_deref().map_or("", dso_name).to_string(),
        SortKey::Sym => match &key.symbol {
            Some(s) => format!("[.] {s}"),
            None => String::new(),
        },
    }
}

/// The tree of a row as perf's graph style draws it, each line after
/// `indent`: a single path as a column of names under `---`, each branch as
/// `|--PCT%--name` (the last ` --PCT%--name`), percent of all samples.
pub fn tree_lines(nodes: &[Node], total: u64, indent: &str) -> Vec<String> {
    let mut out = Vec::new();
    if nodes.is_empty() {
        return out;
    }
    out.push(format!("{indent}|"));
    match nodes {
        [only] => {
            out.push(format!("{indent}---{}", only.name));
            chain(only, total, &format!("{indent}   "), &mut out);
        }
        _ => branches(nodes, total, indent, &mut out),
    }
    out
}

/// After `n`'s own line: its single full-weight successors as a column,
/// then its branches.
fn chain(n: &Node, total: u64, prefix: &str, out: &mut Vec<String>) {
    let mut n = n;
    while let [next] = n.next.as_slice() {
        if next.samples != n.samples {
            break;
        }
        out.push(format!("{prefix}{}", next.name));
        n = next;
    }
    if !n.next.is_empty() {
        branches(&n.next, total, prefix, out);
    }
}

fn branches(nodes: &[Node], total: u64, prefix: &str, out: &mut Vec<String>) {
    for (i, n) in nodes.iter().enumerate() {
        let last = i + 1 == nodes.len();
        let pct = format!("--{:.2}%--", percent(n.samples, total));
        out.push(format!("{prefix}|"));
        let lead = if last { " " } else { "|" };
        out.push(format!("{prefix}{lead}{pct}{}", n.name));
        let next_prefix = format!("{prefix}{lead}{}", " ".repeat(pct.chars().count()));
        chain(n, total, &next_prefix, out);
    }
}

/// The whole table. `file`: the record file's name.
pub fn render(p: &Profile, file: &str, sort: &Sort, view: View) -> String {
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
    if let Some((order, threshold)) = view.tree {
        let _ = writeln!(
            out,
            "# call trees in {} order, branches of {threshold}% of the samples or more",
            order.name()
        );
    }
    let rows = p.rows(sort, view);
    // Each key's column as wide as its widest cell (the last unpadded).
    let widths: Vec<usize> = sort
        .0
        .iter()
        .map(|&k| {
            rows.iter()
                .map(|r| cell(k, r).chars().count())
                .chain([heading(k).len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let samples_w = total.to_string().len().max(7);
    let _ = writeln!(out, "#");
    let (mut head, mut dots) = if view.children {
        (
            format!("# Children      Self  {:>samples_w$}", "Samples"),
            format!("# ........  ........  {}", ".".repeat(samples_w)),
        )
    } else {
        (
            format!("# Overhead  {:>samples_w$}", "Samples"),
            format!("# ........  {}", ".".repeat(samples_w)),
        )
    };
    let keys = sort.0.len();
    for (i, (&k, &w)) in sort.0.iter().zip(&widths).enumerate() {
        let _ = write!(head, "  {:<w$}", heading(k));
        // The last column's cells run as long as they are: its dots are
        // its heading's.
        let dots_w = if i + 1 == keys { heading(k).len() } else { w };
        let _ = write!(dots, "  {}", ".".repeat(dots_w));
    }
    let _ = writeln!(out, "{}", head.trim_end());
    let _ = writeln!(out, "{dots}");
    let _ = writeln!(out, "#");
    for r in &rows {
        let mut line = if view.children {
            format!(
                "  {:>7.2}%  {:>7.2}%  {:>samples_w$}",
                percent(r.children, total),
                percent(r.samples, total),
                r.samples
            )
        } else {
            format!(
                "  {:>7.2}%  {:>samples_w$}",
                percent(r.samples, total),
                r.samples
            )
        };
        for (&k, &w) in sort.0.iter().zip(&widths) {
            let _ = write!(line, "  {:<w$}", cell(k, r));
        }
        let _ = writeln!(out, "{}", line.trim_end());
        // A tree of the row's function alone says nothing: left out.
        let bare = matches!(r.tree.as_slice(), [only] if only.next.is_empty());
        if view.tree.is_some() && !r.tree.is_empty() && !bare {
            for l in tree_lines(&r.tree, total, "            ") {
                let _ = writeln!(out, "{}", l.trim_end());
            }
            let _ = writeln!(out);
        }
    }
    out
}
