//! `pfm report --flamegraph FILE.svg`: the samples' stacks folded as
//! Brendan Gregg's `stackcollapse` scripts fold them (`comm;outer;...;inner
//! count`, the thread's name at the root), drawn by `inferno`.

use std::collections::BTreeMap;

use inferno::flamegraph::{self, Options};

use super::Profile;

/// The folded stacks, one line each, sorted.
pub fn collapsed(p: &Profile) -> Vec<String> {
    let mut stacks: BTreeMap<String, u64> = BTreeMap::new();
    for s in &p.samples {
        let mut line = s.comm.replace(';', ":");
        for f in s.stack.iter().rev() {
            line.push(';');
            let name = match &f.function {
                Some(func) => func.name.to_string(),
                None => format!("[{}]", super::dso_name(&f.dso).trim_matches(['[', ']'])),
            };
            // ';' separates frames and a space ends the stack in the
            // folded format: neither may stay in a name.
            line.push_str(&name.replace(';', ":").replace(' ', "\u{a0}"));
        }
        *stacks.entry(line).or_default() += 1;
    }
    stacks
        .into_iter()
        .map(|(stack, n)| format!("{stack} {n}"))
        .collect()
}

/// The graph of a recording without samples.
const EMPTY_SVG: &str = r#"<?xml version="1.0" standalone="no"?>
<svg version="1.1" width="1200" height="60" xmlns="http://www.w3.org/2000/svg"><text x="600" y="30" text-anchor="middle">pfm record: no samples</text></svg>
"#;

/// The SVG.
pub fn svg(p: &Profile) -> std::io::Result<Vec<u8>> {
    let mut opt = Options::default();
    let h = &p.header;
    opt.title = match &h.command {
        Some(cmd) => format!("pfm record: {}", cmd.join(" ")),
        None => "pfm record".to_string(),
    };
    opt.subtitle = Some(format!(
        "{} samples of {}, one every {}",
        p.samples.len(),
        h.event,
        super::period_text(h)
    ));
    opt.count_name = "samples".to_string();
    // Colors from the names, not at random: one profile, one picture.
    opt.hash = true;
    opt.deterministic = true;
    let lines = collapsed(p);
    if lines.is_empty() {
        // inferno refuses a profile without samples: a picture that says
        // so, rather than no file.
        return Ok(EMPTY_SVG.as_bytes().to_vec());
    }
    let mut out = Vec::new();
    flamegraph::from_lines(&mut opt, lines.iter().map(String::as_str), &mut out)?;
    Ok(out)
}
