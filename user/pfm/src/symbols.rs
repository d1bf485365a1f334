//! Addresses to functions: a sampled address of a process, through the
//! process's maps as pfm record captured them, to the mapped file and the
//! offset in it, to the ELF virtual address (the `PT_LOAD` segment that
//! holds that offset), to the function symbol that covers it (`.symtab`,
//! else `.dynsym`). The ELF is read with the `object` crate; Rust names are
//! demangled with `rustc-demangle`.
//!
//! The files are read when `pfm report` runs, where they are then: a
//! program rebuilt or removed since it was recorded resolves wrong or not
//! at all, as with perf without its build-id cache.

use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

use crate::data_file::Maps;
use crate::maps::{self, Mapping};

/// A function symbol: `[start, start + size)` (size 0: up to the next
/// symbol), in the file's virtual addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    /// Its first address.
    pub start: u64,
    /// Its size (0: unknown).
    pub size: u64,
    /// The symbol as the file has it (mangled).
    pub raw: Rc<str>,
    /// Its name as people read it (demangled).
    pub name: Rc<str>,
}

/// The most bytes taken of a function without a size.
pub const UNSIZED_MAX: u64 = 4096;

/// A loadable segment: file bytes `[offset, offset + filesz)` at virtual
/// address `vaddr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Segment {
    offset: u64,
    filesz: u64,
    vaddr: u64,
}

/// What pfm needs of one ELF file.
#[derive(Debug, Default)]
pub struct ElfSymbols {
    segments: Vec<Segment>,
    /// Sorted by start, one per start.
    functions: Vec<Function>,
}

/// A Rust symbol's readable name (without its hash); any other as is.
pub fn demangle(raw: &str) -> String {
    match rustc_demangle::try_demangle(raw) {
        Ok(d) => format!("{d:#}"),
        Err(_) => raw.to_string(),
    }
}

impl ElfSymbols {
    /// The segments and function symbols of the ELF file `data`.
    pub fn parse(data: &[u8]) -> Result<ElfSymbols, String> {
        let file = object::File::parse(data).map_err(|e| e.to_string())?;
        if file.format() != object::BinaryFormat::Elf {
            return Err("not an ELF file".into());
        }
        let segments = file
            .segments()
            .map(|s| {
                let (offset, filesz) = s.file_range();
                Segment {
                    offset,
                    filesz,
                    vaddr: s.address(),
                }
            })
            .collect();
        let mut functions: Vec<Function> = Vec::new();
        // .symtab first: where both have a symbol at one address, the full
        // table's (local functions are only there) wins.
        for sym in file.symbols().chain(file.dynamic_symbols()) {
            if sym.kind() != SymbolKind::Text || !sym.is_definition() || sym.address() == 0 {
                continue;
            }
            let Ok(raw) = sym.name() else { continue };
            if raw.is_empty() {
                continue;
            }
            functions.push(Function {
                start: sym.address(),
                size: sym.size(),
                raw: raw.into(),
                name: demangle(raw).into(),
            });
        }
        // Stable: for one start, the first pushed with a size wins.
        functions.sort_by_key(|f| (f.start, f.size == 0));
        functions.dedup_by_key(|f| f.start);
        Ok(ElfSymbols {
            segments,
            functions,
        })
    }

    /// Reads and parses the file at `path`.
    pub fn load(path: &Path) -> Result<ElfSymbols, String> {
        let data = std::fs::read(path)
            .map_err(|e| perfmon::errno_text(e.raw_os_error().unwrap_or(0)).to_string())?;
        ElfSymbols::parse(&data)
    }

    /// The virtual address of file offset `offset`, if a loadable segment
    /// holds it.
    pub fn vaddr_of(&self, offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| offset >= s.offset && offset - s.offset < s.filesz)
            .map(|s| offset - s.offset + s.vaddr)
    }

    /// The function covering virtual address `vaddr`.
    pub fn function_at(&self, vaddr: u64) -> Option<&Function> {
        let i = self.functions.partition_point(|f| f.start <= vaddr);
        let f = self.functions.get(i.checked_sub(1)?)?;
        (f.size == 0 || vaddr - f.start < f.size).then_some(f)
    }

    /// Where `len` bytes from virtual address `vaddr` are in the file: its
    /// offset and the bytes the segment holds of them (fewer at its end);
    /// `None` if no loadable segment has `vaddr` in the file.
    pub fn file_range(&self, vaddr: u64, len: u64) -> Option<(u64, u64)> {
        let s = self
            .segments
            .iter()
            .find(|s| vaddr >= s.vaddr && vaddr - s.vaddr < s.filesz)?;
        let at = vaddr - s.vaddr;
        Some((s.offset + at, len.min(s.filesz - at)))
    }

    /// The end of function `f`: by its size, else the next function's
    /// start (at most [`UNSIZED_MAX`] on).
    pub fn end_of(&self, f: &Function) -> u64 {
        if f.size > 0 {
            return f.start.saturating_add(f.size);
        }
        let cap = f.start.saturating_add(UNSIZED_MAX);
        let i = self.functions.partition_point(|g| g.start <= f.start);
        self.functions.get(i).map_or(cap, |g| g.start.min(cap))
    }

    /// The number of function symbols.
    pub fn functions(&self) -> usize {
        self.functions.len()
    }
}

/// One resolved frame of a stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The address as sampled.
    pub address: u64,
    /// The object it is in: the mapped file's path, a pseudo-name
    /// (`[vdso]`, `[heap]`, `[anon]`), or `[unknown]` when no captured map
    /// of its process holds it.
    pub dso: Rc<str>,
    /// Its function, if a symbol covers it.
    pub function: Option<Function>,
    /// The mapping that holds it: start, end, file offset.
    pub mapping: Option<(u64, u64, u64)>,
    /// Its offset in its function (`pfm script`'s `sym+0x1f`): of the
    /// address itself, or for a return address of the call before it.
    pub offset: Option<u64>,
}

impl Frame {
    /// What the table's Symbol column shows: the function, else the
    /// address in hex (perf's way).
    pub fn symbol_text(&self) -> String {
        match &self.function {
            Some(f) => f.name.to_string(),
            None => format!("{:#018x}", self.address),
        }
    }
}

/// The captured maps of one process, oldest first.
#[derive(Debug, Default)]
struct Snapshots {
    list: Vec<(u64, Vec<Mapping>)>,
}

impl Snapshots {
    /// The mapping holding `addr` at time `t`: in the latest snapshot taken
    /// at or before `t` that holds it, else the earliest later one (a
    /// sample taken before pfm's first read of the maps).
    fn mapping_at(&self, t: u64, addr: u64) -> Option<&Mapping> {
        let split = self.list.partition_point(|(time, _)| *time <= t);
        let (before, after) = self.list.split_at(split);
        before
            .iter()
            .rev()
            .chain(after)
            .find_map(|(_, maps)| maps.iter().find(|m| m.contains(addr)))
    }
}

/// Resolves addresses of the processes of one recording.
#[derive(Default)]
pub struct Symbolizer {
    spaces: HashMap<u32, Snapshots>,
    files: HashMap<String, Option<Rc<ElfSymbols>>>,
    /// The vDSO's symbols, from the image the recording holds.
    vdso: Option<Rc<ElfSymbols>>,
    names: HashMap<String, Rc<str>>,
    /// One line per file that could not be read.
    pub warnings: Vec<String>,
}

impl Symbolizer {
    /// A symbolizer over the maps a recording captured, and its vDSO
    /// image if it has one.
    pub fn new(snapshots: &[Maps], vdso: Option<&[u8]>) -> Self {
        let mut s = Symbolizer {
            vdso: vdso.and_then(|v| ElfSymbols::parse(v).ok()).map(Rc::new),
            ..Symbolizer::default()
        };
        for m in snapshots {
            s.spaces
                .entry(m.pid)
                .or_default()
                .list
                .push((m.time_ns, maps::parse(&m.maps)));
        }
        for sp in s.spaces.values_mut() {
            sp.list.sort_by_key(|(t, _)| *t);
        }
        s
    }

    fn name(&mut self, s: &str) -> Rc<str> {
        if let Some(n) = self.names.get(s) {
            return n.clone();
        }
        let n: Rc<str> = s.into();
        self.names.insert(s.to_string(), n.clone());
        n
    }

    fn elf(&mut self, path: &str) -> Option<Rc<ElfSymbols>> {
        if let Some(e) = self.files.get(path) {
            return e.clone();
        }
        let e = match ElfSymbols::load(Path::new(path)) {
            Ok(e) => Some(Rc::new(e)),
            Err(why) => {
                self.warnings
                    .push(format!("cannot read the symbols of {path}: {why}"));
                None
            }
        };
        self.files.insert(path.to_string(), e.clone());
        e
    }

    /// The frame of address `addr` of process `pid` at time `t`. `caller`:
    /// a return address, looked up one byte before (the call instruction,
    /// which a function ending in a call would otherwise lose to the next
    /// function).
    pub fn resolve(&mut self, pid: u32, t: u64, addr: u64, caller: bool) -> Frame {
        let mapping = self
            .spaces
            .get(&pid)
            .and_then(|s| s.mapping_at(t, addr))
            .cloned();
        let Some(m) = mapping else {
            return Frame {
                address: addr,
                dso: self.name("[unknown]"),
                function: None,
                mapping: None,
                offset: None,
            };
        };
        let lookup = if caller { addr.saturating_sub(1) } else { addr };
        let dso = match m.path.as_str() {
            "" => "[anon]".to_string(),
            p => p.strip_suffix(" (deleted)").unwrap_or(p).to_string(),
        };
        let elf = if m.is_file() {
            self.elf(&dso)
        } else if m.path == "[vdso]" {
            self.vdso.clone()
        } else {
            None
        };
        let found = elf.and_then(|elf| {
            let vaddr = elf.vaddr_of(m.file_offset(lookup))?;
            let f = elf.function_at(vaddr).cloned()?;
            let offset = vaddr - f.start;
            Some((f, offset))
        });
        let (function, offset) = match found {
            Some((f, o)) => (Some(f), Some(o)),
            None => (None, None),
        };
        Frame {
            address: addr,
            dso: self.name(&dso),
            function,
            mapping: Some((m.start, m.end, m.offset)),
            offset,
        }
    }
}
