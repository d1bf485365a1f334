//! Where a command's output goes: the terminal (stdout or stderr) or `-o FILE`.

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

use crate::Failure;

/// A destination for text output.
pub enum Output {
    /// Standard output.
    Stdout,
    /// Standard error (pfm stat's default, like perf stat: the command's
    /// own output stays clean).
    Stderr,
    /// `-o FILE`.
    File(File, String),
}

impl Output {
    /// `path` if given (`-`: standard output, as perf takes it), else
    /// `default`.
    pub fn open(path: Option<&Path>, default: Output) -> Result<Output, Failure> {
        match path {
            None => Ok(default),
            Some(p) if is_stdio(p) => Ok(Output::Stdout),
            Some(p) => File::create(p)
                .map(|f| Output::File(f, p.display().to_string()))
                .map_err(|e| {
                    Failure::new(format!(
                        "cannot create {}: {}",
                        p.display(),
                        perfmon::errno_text(e.raw_os_error().unwrap_or(0))
                    ))
                }),
        }
    }

    /// Writes `text` and flushes it.
    pub fn write(&mut self, text: &str) -> Result<(), Failure> {
        let res = match self {
            Output::Stdout => {
                let mut o = io::stdout().lock();
                o.write_all(text.as_bytes()).and_then(|_| o.flush())
            }
            Output::Stderr => {
                let mut o = io::stderr().lock();
                o.write_all(text.as_bytes()).and_then(|_| o.flush())
            }
            Output::File(f, _) => f.write_all(text.as_bytes()).and_then(|_| f.flush()),
        };
        res.map_err(|e| {
            let name = match self {
                Output::Stdout => "standard output".to_string(),
                Output::Stderr => "standard error".to_string(),
                Output::File(_, n) => n.clone(),
            };
            Failure::new(format!("cannot write to {name}: {e}"))
        })
    }
}

/// Whether a file argument is `-`: standard output for `-o`, standard
/// input for `-i`, as perf takes them.
pub fn is_stdio(path: &Path) -> bool {
    path.as_os_str() == "-"
}
