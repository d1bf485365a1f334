//! `pfm annotate [SYMBOL]`: a function's instructions with the share of its
//! samples at each, as `perf annotate --stdio` prints them. The function's
//! bytes are read from its file (the vDSO's from the recording's image),
//! through the ELF segment that holds its virtual address, and
//! disassembled by `iced-x86` (x86-64, Intel syntax). A sample counts at
//! the instruction its instruction pointer is in: the one it points at
//! (the next to execute when the counter overflowed).

use std::collections::HashMap;
use std::fmt::Write;
use std::path::Path;
use std::rc::Rc;

use iced_x86::{Decoder, DecoderOptions, Formatter, Instruction, IntelFormatter};
use pfm_json::{AnnotatedInstruction, Annotation, SCHEMA_VERSION};

use super::{dso_name, load, percent, Profile};
use crate::cli::AnnotateArgs;
use crate::data_file::Recording;
use crate::output::Output;
use crate::symbols::{ElfSymbols, Function};
use crate::Failure;

/// One instruction and the samples at it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Insn {
    /// Its virtual address.
    pub address: u64,
    /// Its offset in the function.
    pub offset: u64,
    /// Its length in bytes.
    pub len: u64,
    /// Intel syntax.
    pub text: String,
    /// Samples whose instruction pointer was in it.
    pub samples: u64,
}

/// The instructions of `code`, a function's bytes from virtual address
/// `start`, each with the samples of `offsets` (the samples' offsets in
/// the function) that fall in it; and the samples in none (past the code,
/// or in bytes that do not decode).
pub fn disassemble(code: &[u8], start: u64, offsets: &[u64]) -> (Vec<Insn>, u64) {
    let mut decoder = Decoder::with_ip(64, code, start, DecoderOptions::NONE);
    let mut formatter = IntelFormatter::new();
    let opts = formatter.options_mut();
    opts.set_hex_prefix("0x");
    opts.set_hex_suffix("");
    opts.set_uppercase_hex(false);
    opts.set_space_after_operand_separator(true);
    opts.set_show_branch_size(false);
    opts.set_branch_leading_zeros(false);
    let mut insns: Vec<Insn> = Vec::new();
    let mut instr = Instruction::default();
    while decoder.can_decode() {
        decoder.decode_out(&mut instr);
        let mut text = String::new();
        if instr.is_invalid() {
            text.push_str("(bad)");
        } else {
            formatter.format(&instr, &mut text);
        }
        insns.push(Insn {
            address: instr.ip(),
            offset: instr.ip() - start,
            len: instr.len() as u64,
            text,
            samples: 0,
        });
    }
    let mut outside = 0;
    for &o in offsets {
        // The instruction that starts at or before `o`, if `o` is in it.
        let i = insns.partition_point(|x| x.offset <= o);
        match i.checked_sub(1).and_then(|i| insns.get_mut(i)) {
            Some(x) if o - x.offset < x.len => x.samples += 1,
            _ => outside += 1,
        }
    }
    (insns, outside)
}

/// A function with samples: where it is and the offsets of its samples.
struct Target {
    dso: Rc<str>,
    function: Function,
    offsets: Vec<u64>,
}

/// The functions of `p`'s sampled instruction pointers, most samples
/// first (ties by name); with `symbol`, those whose name is it, or whose
/// last path segment is (`hot_work` for `crate::hot_work`), or whose
/// symbol as the file has it is.
fn targets(p: &Profile, symbol: Option<&str>) -> Vec<Target> {
    let mut by: HashMap<(Rc<str>, u64), Target> = HashMap::new();
    for s in &p.samples {
        let Some(leaf) = s.stack.first() else {
            continue;
        };
        let (Some(f), Some(offset)) = (&leaf.function, leaf.offset) else {
            continue;
        };
        if let Some(want) = symbol {
            let tail = f.name.rsplit("::").next().unwrap_or(&f.name);
            if *f.name != *want && tail != want && *f.raw != *want {
                continue;
            }
        }
        by.entry((leaf.dso.clone(), f.start))
            .or_insert_with(|| Target {
                dso: leaf.dso.clone(),
                function: f.clone(),
                offsets: Vec::new(),
            })
            .offsets
            .push(offset);
    }
    let mut list: Vec<Target> = by.into_values().collect();
    list.sort_by(|a, b| {
        b.offsets
            .len()
            .cmp(&a.offsets.len())
            .then_with(|| a.function.name.cmp(&b.function.name))
            .then_with(|| a.dso.cmp(&b.dso))
    });
    list
}

/// The bytes of `f`, from the file `dso` (the vDSO: `vdso`, the
/// recording's image); errors in one line.
fn code_of(dso: &str, f: &Function, vdso: Option<&[u8]>) -> Result<(Vec<u8>, u64), String> {
    let data = if dso == "[vdso]" {
        vdso.map(<[u8]>::to_vec)
            .ok_or("the recording has no vDSO image")?
    } else if dso.starts_with('/') {
        std::fs::read(dso).map_err(|e| {
            format!(
                "cannot read {dso}: {}",
                perfmon::errno_text(e.raw_os_error().unwrap_or(0))
            )
        })?
    } else {
        return Err(format!("{dso} is no file"));
    };
    let elf = ElfSymbols::parse(&data).map_err(|e| format!("{dso}: {e}"))?;
    let end = elf.end_of(f);
    let (at, len) = elf
        .file_range(f.start, end - f.start)
        .ok_or_else(|| format!("{dso}: no loadable segment holds {:#x}", f.start))?;
    let bytes = usize::try_from(at)
        .ok()
        .zip(usize::try_from(len).ok())
        .and_then(|(a, l)| data.get(a..a.checked_add(l)?))
        .ok_or_else(|| format!("{dso}: {:#x} is past the file's end", f.start))?;
    Ok((bytes.to_vec(), len))
}

/// The annotation of one target.
fn annotation(t: &Target, event: &str, vdso: Option<&[u8]>) -> Result<Annotation, String> {
    let (code, size) = code_of(&t.dso, &t.function, vdso)?;
    let (insns, _) = disassemble(&code, t.function.start, &t.offsets);
    let total = t.offsets.len() as u64;
    Ok(Annotation {
        schema_version: SCHEMA_VERSION,
        symbol: t.function.name.to_string(),
        dso: dso_name(&t.dso).to_string(),
        dso_path: t.dso.to_string(),
        address: t.function.start,
        size,
        event: event.to_string(),
        samples: total,
        instructions: insns
            .into_iter()
            .map(|i| AnnotatedInstruction {
                address: i.address,
                offset: i.offset,
                text: i.text,
                samples: i.samples,
                pct: percent(i.samples, total),
            })
            .collect(),
    })
}

/// An annotation as perf annotate --stdio prints it.
pub fn text(a: &Annotation) -> String {
    let mut out = String::new();
    let head = format!(
        " Percent |      Source code & Disassembly of {} for {} ({} samples)",
        a.dso, a.event, a.samples
    );
    let _ = writeln!(out, "{head}");
    let _ = writeln!(out, "{}", "-".repeat(head.chars().count()));
    let _ = writeln!(out, "         :      {:016x} <{}>:", a.address, a.symbol);
    for i in &a.instructions {
        let _ = writeln!(
            out,
            "{:>8.2} :   {:>8x}:       {}",
            i.pct, i.address, i.text
        );
    }
    out
}

/// The annotations `args` asks for, of a recording and its profile:
/// warnings for functions that cannot be read among several, one line of
/// failure when none can.
pub(crate) fn annotations(
    p: &Profile,
    rec: &Recording,
    file: &str,
    symbol: Option<&str>,
) -> Result<Vec<Annotation>, Failure> {
    let list = targets(p, symbol);
    if list.is_empty() {
        return Err(Failure::new(match symbol {
            Some(s) => format!(
                "no sample of {file} is in a function named {s} (pfm report names the \
                 functions with samples)"
            ),
            None => format!("no sample of {file} is in a function with a symbol"),
        }));
    }
    let mut docs = Vec::new();
    let mut first_error = None;
    for t in &list {
        match annotation(t, &p.header.event, rec.vdso.as_deref()) {
            Ok(a) => docs.push(a),
            Err(e) => {
                if list.len() > 1 {
                    eprintln!("pfm: warning: {}: {e}", t.function.name);
                }
                first_error.get_or_insert(e);
            }
        }
    }
    match (docs.is_empty(), first_error) {
        (true, Some(e)) => Err(Failure::new(format!("cannot annotate: {e}"))),
        _ => Ok(docs),
    }
}

/// Runs `pfm annotate`; returns the exit status.
pub fn annotate(args: &AnnotateArgs, json: bool, output: Option<&Path>) -> Result<u8, Failure> {
    let (profile, file, rec) = load(&args.input, &args.filter)?;
    let docs = annotations(&profile, &rec, &file, args.symbol.as_deref())?;
    let mut out = String::new();
    for (i, a) in docs.iter().enumerate() {
        if json {
            let line = serde_json::to_string(a).map_err(|e| Failure::new(format!("JSON: {e}")))?;
            out.push_str(&line);
            out.push('\n');
        } else {
            if i > 0 {
                out.push('\n');
            }
            out.push_str(&text(a));
        }
    }
    Output::open(output, Output::Stdout)?.write(&out)?;
    Ok(0)
}
