//! Usage errors on one line, as tools print them: clap's message, its tip,
//! and where to read more (`pfm: unexpected argument '--bogus' found; to
//! pass '--bogus' as a value, use '-- --bogus' (see 'pfm stat --help')`).

/// One line from clap's rendered error: the message after `error: `, each
/// `tip: ` (a similar name becomes "did you mean ..."), and the help to
/// read, taken from the usage line.
/// `command` names the help to point at when clap's message has no usage
/// line (e.g. `pfm stat` for a bad value of one of its options).
pub fn one_line(rendered: &str, command: &str) -> String {
    let mut message = String::new();
    let mut tips = Vec::new();
    let mut command = command.to_string();
    // A message ending in ':' lists what it means on the lines after it
    // ("the following required arguments were not provided:" and the
    // arguments), up to an empty line.
    let mut items: Option<Vec<String>> = None;
    for line in rendered.lines().map(str::trim) {
        if let Some(list) = &mut items {
            if !line.is_empty() {
                list.push(line.to_string());
                continue;
            }
            message = format!("{message} {}", list.join(", "));
            items = None;
        }
        if let Some(m) = line.strip_prefix("error: ") {
            message = m.trim_end_matches('.').to_string();
            if message.ends_with(':') {
                items = Some(Vec::new());
            }
        } else if let Some(t) = line.strip_prefix("tip: ") {
            tips.push(tip(t));
        } else if let Some(u) = line.strip_prefix("Usage: ") {
            // "pfm stat [OPTIONS] ..." -> "pfm stat".
            command = u
                .split_whitespace()
                .take_while(|w| !w.starts_with(['[', '<', '-']))
                .collect::<Vec<_>>()
                .join(" ");
        }
    }
    if let Some(list) = items {
        message = format!("{message} {}", list.join(", "));
    }
    if message.is_empty() {
        message = rendered
            .lines()
            .next()
            .unwrap_or("invalid usage")
            .to_string();
    }
    let mut out = message;
    for t in tips {
        out.push_str("; ");
        out.push_str(&t);
    }
    out.push_str(&format!(" (see '{command} --help')"));
    out
}

/// clap's "a similar subcommand exists: 'stat'" as "did you mean 'stat'?".
fn tip(t: &str) -> String {
    for prefix in [
        "a similar subcommand exists: ",
        "a similar argument exists: ",
        "a similar value exists: ",
        "some similar subcommands exist: ",
        "some similar arguments exist: ",
        "some similar values exist: ",
    ] {
        if let Some(names) = t.strip_prefix(prefix) {
            return format!("did you mean {}?", names.replace(", ", " or "));
        }
    }
    t.trim_end_matches('.').to_string()
}

/// The command whose help fits a usage error in `args` (the program's
/// arguments, without its name): `pfm stat` if they name `stat`, etc.
pub fn command_in(args: &[String]) -> String {
    let known = [
        "stat", "record", "report", "script", "annotate", "list", "info",
    ];
    match args.iter().find(|a| !a.starts_with('-')) {
        Some(a) if known.contains(&a.as_str()) => format!("pfm {a}"),
        _ => "pfm".to_string(),
    }
}

/// A usage error of pfm's own checks, in the same form.
pub fn own(message: &str, command: &str) -> String {
    format!("{message} (see '{command} --help')")
}
