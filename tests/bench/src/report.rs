//! Statistics, a minimal JSON writer and the table printer.

use std::fmt::Write as _;

/// Sorts `v` and returns it.
pub fn sorted(mut v: Vec<u64>) -> Vec<u64> {
    v.sort_unstable();
    v
}

/// The `p`-th percentile (0..=100) of sorted data, nearest rank.
pub fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Median of floats (mean of the two middle ones for an even count).
pub fn median_f(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// (max - min) / median of `v`, in percent: the spread between rounds.
pub fn spread_pct(v: &[f64]) -> f64 {
    let m = median_f(v);
    if v.is_empty() || m == 0.0 {
        return f64::NAN;
    }
    let max = v.iter().cloned().fold(f64::MIN, f64::max);
    let min = v.iter().cloned().fold(f64::MAX, f64::min);
    (max - min) / m * 100.0
}

/// A JSON value.
#[derive(Clone, Debug)]
pub enum J {
    Null,
    Bool(bool),
    Int(i64),
    Num(f64),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

impl J {
    pub fn obj() -> J {
        J::Obj(Vec::new())
    }

    /// Adds `key: value` to an object (builder style).
    pub fn with(mut self, key: &str, value: impl Into<J>) -> J {
        self.set(key, value);
        self
    }

    pub fn set(&mut self, key: &str, value: impl Into<J>) {
        if let J::Obj(v) = self {
            v.push((key.to_string(), value.into()));
        }
    }

    pub fn push(&mut self, value: impl Into<J>) {
        if let J::Arr(v) = self {
            v.push(value.into());
        }
    }

    fn write(&self, out: &mut String, indent: usize) {
        let pad = |out: &mut String, n: usize| {
            for _ in 0..n {
                out.push_str("  ");
            }
        };
        match self {
            J::Null => out.push_str("null"),
            J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            J::Int(i) => {
                let _ = write!(out, "{i}");
            }
            J::Num(f) => {
                if f.is_finite() {
                    // Three decimals are plenty for ns figures and ratios.
                    let _ = write!(out, "{}", (f * 1000.0).round() / 1000.0);
                } else {
                    out.push_str("null");
                }
            }
            J::Str(s) => {
                out.push('"');
                for c in s.chars() {
                    match c {
                        '"' => out.push_str("\\\""),
                        '\\' => out.push_str("\\\\"),
                        '\n' => out.push_str("\\n"),
                        c if (c as u32) < 0x20 => {
                            let _ = write!(out, "\\u{:04x}", c as u32);
                        }
                        c => out.push(c),
                    }
                }
                out.push('"');
            }
            J::Arr(v) => {
                if v.iter().all(|x| !matches!(x, J::Obj(_) | J::Arr(_))) {
                    out.push('[');
                    for (i, x) in v.iter().enumerate() {
                        if i > 0 {
                            out.push_str(", ");
                        }
                        x.write(out, indent);
                    }
                    out.push(']');
                } else {
                    out.push_str("[\n");
                    for (i, x) in v.iter().enumerate() {
                        pad(out, indent + 1);
                        x.write(out, indent + 1);
                        out.push_str(if i + 1 < v.len() { ",\n" } else { "\n" });
                    }
                    pad(out, indent);
                    out.push(']');
                }
            }
            J::Obj(v) => {
                if v.is_empty() {
                    out.push_str("{}");
                    return;
                }
                out.push_str("{\n");
                for (i, (k, x)) in v.iter().enumerate() {
                    pad(out, indent + 1);
                    J::Str(k.clone()).write(out, indent + 1);
                    out.push_str(": ");
                    x.write(out, indent + 1);
                    out.push_str(if i + 1 < v.len() { ",\n" } else { "\n" });
                }
                pad(out, indent);
                out.push('}');
            }
        }
    }

    pub fn pretty(&self) -> String {
        let mut s = String::new();
        self.write(&mut s, 0);
        s
    }
}

impl From<bool> for J {
    fn from(b: bool) -> J {
        J::Bool(b)
    }
}
impl From<u64> for J {
    fn from(i: u64) -> J {
        J::Int(i as i64)
    }
}
impl From<i64> for J {
    fn from(i: i64) -> J {
        J::Int(i)
    }
}
impl From<usize> for J {
    fn from(i: usize) -> J {
        J::Int(i as i64)
    }
}
impl From<u32> for J {
    fn from(i: u32) -> J {
        J::Int(i as i64)
    }
}
impl From<f64> for J {
    fn from(f: f64) -> J {
        J::Num(f)
    }
}
impl From<&str> for J {
    fn from(s: &str) -> J {
        J::Str(s.to_string())
    }
}
impl From<String> for J {
    fn from(s: String) -> J {
        J::Str(s)
    }
}
impl<T: Into<J>> From<Vec<T>> for J {
    fn from(v: Vec<T>) -> J {
        J::Arr(v.into_iter().map(Into::into).collect())
    }
}
impl<T: Into<J>> From<Option<T>> for J {
    fn from(v: Option<T>) -> J {
        v.map(Into::into).unwrap_or(J::Null)
    }
}

/// A plain text table with right-aligned columns after the first.
pub struct Table {
    head: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(head: &[&str]) -> Self {
        Table {
            head: head.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn print(&self) {
        let n = self.head.len();
        let mut w = vec![0usize; n];
        for r in std::iter::once(&self.head).chain(self.rows.iter()) {
            for (i, c) in r.iter().enumerate().take(n) {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let line = |r: &Vec<String>| {
            let mut s = String::new();
            for (i, c) in r.iter().enumerate().take(n) {
                if i == 0 {
                    let _ = write!(s, "{:<width$}", c, width = w[i]);
                } else {
                    let _ = write!(s, "  {:>width$}", c, width = w[i]);
                }
            }
            println!("{}", s.trim_end());
        };
        line(&self.head);
        let total: usize = w.iter().sum::<usize>() + 2 * (n - 1);
        println!("{}", "-".repeat(total));
        for r in &self.rows {
            line(r);
        }
    }
}

/// Formats a float with `d` decimals, or "-" when not finite.
pub fn f(x: f64, d: usize) -> String {
    if x.is_finite() {
        format!("{x:.d$}")
    } else {
        "-".to_string()
    }
}
