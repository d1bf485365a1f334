//! `/proc/PID/maps` lines, parsed: which file (and where in it) an
//! address of a process was mapped from.

/// One mapping of a process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// Its first address.
    pub start: u64,
    /// The address after its last.
    pub end: u64,
    /// `r-xp` and the like.
    pub perms: String,
    /// The file offset mapped at `start`.
    pub offset: u64,
    /// The file's inode (0: anonymous).
    pub inode: u64,
    /// The file's path, a pseudo-name (`[vdso]`, `[heap]`, `[stack]`), or
    /// empty for anonymous memory. ` (deleted)` is kept as the kernel
    /// printed it.
    pub path: String,
}

impl Mapping {
    /// Whether `addr` is in it.
    pub fn contains(&self, addr: u64) -> bool {
        (self.start..self.end).contains(&addr)
    }

    /// Whether it is executable.
    pub fn is_exec(&self) -> bool {
        self.perms.as_bytes().get(2) == Some(&b'x')
    }

    /// Whether it maps a file by path (not a pseudo-name or anonymous).
    pub fn is_file(&self) -> bool {
        self.path.starts_with('/')
    }

    /// The file offset of `addr` (in the mapping).
    pub fn file_offset(&self, addr: u64) -> u64 {
        addr - self.start + self.offset
    }
}

/// One line of a maps file: `start-end perms offset dev inode [path]`,
/// the path running to the end of the line (it may hold spaces).
pub fn parse_line(line: &str) -> Option<Mapping> {
    let mut rest = line.trim_end_matches('\n');
    let mut field = || {
        let s = rest.trim_start_matches(' ');
        let end = s.find(' ').unwrap_or(s.len());
        let (f, r) = s.split_at(end);
        rest = r;
        f
    };
    let range = field();
    let perms = field().to_string();
    let offset = field();
    let _dev = field();
    let inode = field();
    let path = rest.trim_start_matches(' ').to_string();
    let (start, end) = range.split_once('-')?;
    Some(Mapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        perms,
        offset: u64::from_str_radix(offset, 16).ok()?,
        inode: inode.parse().ok()?,
        path,
    })
}

/// Every mapping of a maps text (lines that do not parse are skipped).
pub fn parse(text: &str) -> Vec<Mapping> {
    text.lines().filter_map(parse_line).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_kernels_lines() {
        let text = "\
555555554000-555555556000 r--p 00000000 08:01 1234                       /usr/bin/my prog
555555556000-55555555a000 r-xp 00002000 08:01 1234                       /usr/bin/my prog
7ffff7fc1000-7ffff7fc5000 r--p 00000000 00:00 0                          [vvar]
7ffff7fc5000-7ffff7fc7000 r-xp 00000000 00:00 0                          [vdso]
7ffff7d00000-7ffff7d10000 rw-p 00000000 00:00 0 
bogus line
";
        let m = parse(text);
        assert_eq!(m.len(), 5);
        assert_eq!(
            m[1],
            Mapping {
                start: 0x5555_5555_6000,
                end: 0x5555_5555_a000,
                perms: "r-xp".into(),
                offset: 0x2000,
                inode: 1234,
                path: "/usr/bin/my prog".into(),
            }
        );
        assert!(m[1].is_exec() && m[1].is_file() && !m[0].is_exec());
        assert!(m[1].contains(0x5555_5555_6000) && !m[1].contains(0x5555_5555_a000));
        assert_eq!(m[1].file_offset(0x5555_5555_7010), 0x3010);
        assert_eq!(m[3].path, "[vdso]");
        assert!(!m[3].is_file());
        assert_eq!(m[4].path, "");
    }
}
