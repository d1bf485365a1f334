//! The file `pfm record` writes and `pfm report` reads (`pfm.data` by
//! default), version 1. Documentation/pfm.rst ("The record file") is its
//! specification; this is its one implementation.
//!
//! ```text
//! file    := magic "PFMDATA\0" (8 bytes), version (u32), flags (u32, 0),
//!            record*
//! record  := kind (u32), length (u32), payload (length bytes)
//! ```
//!
//! Integers are little-endian. Kinds: 1 header (JSON, the first record),
//! 2 sample (binary, below), 3 maps (JSON: a process's `/proc/PID/maps`),
//! 4 thread (JSON: a thread's name), 5 finish (JSON, the last record),
//! 6 vdso (binary: the kernel's vDSO image, which no file holds). A
//! reader skips kinds it does not know and JSON fields it does not know, so
//! a record kind or an optional field can be added without a new version;
//! the version is raised when a record changes meaning.
//!
//! A sample is binary, being most of the file: 48 bytes then `nvalues`
//! values and `chain_len` return addresses, each a u64, then with flag
//! [`SAMPLE_PERIOD`] the sample's own period:
//!
//! ```text
//!  0 tid u32     4 pid u32     8 cpu u16    10 pmd u16    12 set u16
//! 14 nvalues u16 16 chain_len u32          20 flags u32
//! 24 seq u64    32 ip u64     40 tstamp u64 (CLOCK_MONOTONIC, ns)
//! 48 values[nvalues] u64, then chain[chain_len] u64, then period u64
//! ```
//!
//! The flags were a reserved 0 before pfm wrote the period: a sample
//! without [`SAMPLE_PERIOD`] (every sample of those files, and of
//! recordings without `--random`) ended a period of the header's length.
//! With `--random` each period has its own length, and pfm record writes
//! it: the events the thread counted from its previous sample to this one
//! (exact unless entries were lost between them).
//!
//! The stack of a sample is `[ip] + chain`: the chain holds the callers'
//! return addresses, innermost first, not `ip` itself (empty until the
//! module records call chains, `-g`).

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The first 8 bytes of a record file.
pub const MAGIC: [u8; 8] = *b"PFMDATA\0";
/// The format version this code writes and reads.
pub const VERSION: u32 = 1;

/// Record kinds.
pub const KIND_HEADER: u32 = 1;
/// A sample (binary).
pub const KIND_SAMPLE: u32 = 2;
/// A process's memory map.
pub const KIND_MAPS: u32 = 3;
/// A thread's name.
pub const KIND_THREAD: u32 = 4;
/// The end of the recording.
pub const KIND_FINISH: u32 = 5;
/// The vDSO's ELF image.
pub const KIND_VDSO: u32 = 6;

/// Bytes of a sample before its values.
pub const SAMPLE_FIXED: usize = 48;
/// A sample's flag: its own period follows its chain.
pub const SAMPLE_PERIOD: u32 = 1 << 0;
/// A record longer than this is not from pfm (a sample is at most a few KiB;
/// a maps text of a huge process a few MiB).
const MAX_RECORD: u32 = 256 << 20;

/// What was recorded, and how (the first record).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// pfm's version.
    pub pfm_version: String,
    /// The module's PMU model.
    pub model: String,
    /// The event sampled, as named on the command line.
    pub event: String,
    /// Its PMC value.
    pub code: u64,
    /// The PMD that counted it.
    pub pmd: u16,
    /// Its width in bits (the counter wraps at 2^width).
    pub counter_width: u16,
    /// What the event counts in: `ns` (task-clock) or `events`.
    pub unit: String,
    /// The sampling period: one sample every `period` events.
    pub period: u64,
    /// `-F FREQ`: the frequency asked for (task-clock: period = 1e9/FREQ ns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub freq: Option<u64>,
    /// Command mode: the command and its arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Command mode: its process id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// `-p`: the processes attached to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<Vec<u32>>,
    /// `-t`: the thread sampled; `-p`: the processes' threads at the
    /// start (those they create are sampled too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tids: Option<Vec<u32>>,
    /// Whether the threads and processes the command (or `-p`'s
    /// processes) created were sampled too (false: its initial thread
    /// only).
    pub inherit: bool,
    /// Whether samples carry call chains (`-g`).
    pub call_chains: bool,
    /// Pages of the sampling buffer (of each context).
    pub pages: u32,
    /// `--drop`: a full buffer dropped entries (else it paused sampling
    /// until pfm drained it).
    pub drop: bool,
    /// `--random MASK`: each period was the period plus an amount in
    /// [0, MASK] (`PFM_REGFL_RANDOM`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub random_mask: Option<u64>,
    /// With it: the generator's seed (the first context's; `--random-seed`,
    /// or the one the kernel picked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub random_seed: Option<u64>,
    /// When sampling began: ns since the Unix epoch.
    pub start_unix_ns: u64,
    /// The same instant on `CLOCK_MONOTONIC`, the samples' clock.
    pub start_monotonic_ns: u64,
}

/// One sample: an entry of the module's buffer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    /// The thread.
    pub tid: u32,
    /// Its process.
    pub pid: u32,
    /// The CPU.
    pub cpu: u16,
    /// The PMD that overflowed.
    pub pmd: u16,
    /// Its event set.
    pub set: u16,
    /// The entry's rank in its context's buffer.
    pub seq: u64,
    /// The user instruction pointer (0: not visible, e.g. during an exec).
    pub ip: u64,
    /// `CLOCK_MONOTONIC`, ns.
    pub tstamp: u64,
    /// The values of the PMDs the entry recorded.
    pub values: Vec<u64>,
    /// The callers' return addresses, innermost first (not `ip`).
    pub chain: Vec<u64>,
    /// Its own period, when it is not the header's (`--random`).
    pub period: Option<u64>,
}

impl Sample {
    /// The sampled stack: `ip`, then the chain.
    pub fn stack(&self) -> impl Iterator<Item = u64> + '_ {
        std::iter::once(self.ip).chain(self.chain.iter().copied())
    }

    /// The record's payload.
    pub fn encode(&self) -> Vec<u8> {
        let words = self.values.len() + self.chain.len() + usize::from(self.period.is_some());
        let mut b = Vec::with_capacity(SAMPLE_FIXED + 8 * words);
        let flags = if self.period.is_some() {
            SAMPLE_PERIOD
        } else {
            0
        };
        b.extend_from_slice(&self.tid.to_le_bytes());
        b.extend_from_slice(&self.pid.to_le_bytes());
        b.extend_from_slice(&self.cpu.to_le_bytes());
        b.extend_from_slice(&self.pmd.to_le_bytes());
        b.extend_from_slice(&self.set.to_le_bytes());
        b.extend_from_slice(&(self.values.len() as u16).to_le_bytes());
        b.extend_from_slice(&(self.chain.len() as u32).to_le_bytes());
        b.extend_from_slice(&flags.to_le_bytes());
        b.extend_from_slice(&self.seq.to_le_bytes());
        b.extend_from_slice(&self.ip.to_le_bytes());
        b.extend_from_slice(&self.tstamp.to_le_bytes());
        for v in self.values.iter().chain(&self.chain).chain(&self.period) {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b
    }

    /// A sample from its payload; `None` if the lengths disagree.
    pub fn decode(b: &[u8]) -> Option<Sample> {
        let u16_at = |o: usize| Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?));
        let u32_at = |o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
        let u64_at = |o: usize| Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?));
        let nvalues = usize::from(u16_at(14)?);
        let chain_len = usize::try_from(u32_at(16)?).ok()?;
        let has_period = u32_at(20)? & SAMPLE_PERIOD != 0;
        let words = nvalues.checked_add(chain_len)?;
        let all = words.checked_add(usize::from(has_period))?;
        if b.len() != SAMPLE_FIXED.checked_add(all.checked_mul(8)?)? {
            return None;
        }
        let word = |i: usize| u64_at(SAMPLE_FIXED + 8 * i);
        Some(Sample {
            tid: u32_at(0)?,
            pid: u32_at(4)?,
            cpu: u16_at(8)?,
            pmd: u16_at(10)?,
            set: u16_at(12)?,
            seq: u64_at(24)?,
            ip: u64_at(32)?,
            tstamp: u64_at(40)?,
            values: (0..nvalues).map(word).collect::<Option<_>>()?,
            chain: (nvalues..words).map(word).collect::<Option<_>>()?,
            period: if has_period { Some(word(words)?) } else { None },
        })
    }
}

/// A process's memory map at one instant: what resolves its samples'
/// addresses to files.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Maps {
    /// The process.
    pub pid: u32,
    /// When it was read (`CLOCK_MONOTONIC`, ns).
    pub time_ns: u64,
    /// `/proc/PID/maps` as read.
    pub maps: String,
}

/// A thread's name (`/proc/TID/comm`) when pfm first saw it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Thread {
    /// The thread.
    pub tid: u32,
    /// Its process.
    pub pid: u32,
    /// Its name.
    pub comm: String,
    /// When it was read (`CLOCK_MONOTONIC`, ns).
    pub time_ns: u64,
}

/// The end of a recording (the last record; missing if pfm was killed).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finish {
    /// When sampling ended (`CLOCK_MONOTONIC`, ns).
    pub end_monotonic_ns: u64,
    /// Samples in the file.
    pub samples: u64,
    /// Entries the module wrote (every buffer).
    pub written: u64,
    /// Entries the module lost: the buffer was full.
    pub lost: u64,
    /// Events the sampled counter counted in all: `(written + lost) ×
    /// period` plus what it counted since its last overflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counted: Option<u64>,
    /// Command mode: its exit code, if it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Command mode: the signal that killed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_signal: Option<i32>,
    /// `-p`, `-t`: ended by SIGINT or SIGTERM.
    #[serde(default)]
    pub interrupted: bool,
}

/// A record file, read whole.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Recording {
    /// Its header.
    pub header: Header,
    /// Its samples, in file order.
    pub samples: Vec<Sample>,
    /// Its maps snapshots, in file order.
    pub maps: Vec<Maps>,
    /// Its thread names.
    pub threads: Vec<Thread>,
    /// Its end, if the file has one.
    pub finish: Option<Finish>,
    /// The vDSO's ELF image, if the file has it.
    pub vdso: Option<Vec<u8>>,
    /// The file ended inside a record (pfm was killed while writing):
    /// everything before it was read.
    pub truncated: bool,
}

/// Writes a record file.
pub struct Writer<W: Write> {
    out: W,
    /// Samples written.
    pub samples: u64,
    /// Bytes written.
    pub bytes: u64,
}

impl Writer<BufWriter<File>> {
    /// Creates `path` (truncating it) and writes the file's magic.
    pub fn create(path: &Path) -> io::Result<Self> {
        Writer::to_file(File::create(path)?)
    }

    /// Writes the file to `file` (`-o -`: a copy of standard output).
    pub fn to_file(file: File) -> io::Result<Self> {
        Writer::new(BufWriter::with_capacity(1 << 16, file))
    }
}

impl<W: Write> Writer<W> {
    /// Writes the magic and version to `out`.
    pub fn new(mut out: W) -> io::Result<Self> {
        out.write_all(&MAGIC)?;
        out.write_all(&VERSION.to_le_bytes())?;
        out.write_all(&0u32.to_le_bytes())?;
        Ok(Writer {
            out,
            samples: 0,
            bytes: 16,
        })
    }

    fn record(&mut self, kind: u32, payload: &[u8]) -> io::Result<()> {
        let len = u32::try_from(payload.len())
            .ok()
            .filter(|&l| l <= MAX_RECORD)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "record too large"))?;
        self.out.write_all(&kind.to_le_bytes())?;
        self.out.write_all(&len.to_le_bytes())?;
        self.out.write_all(payload)?;
        self.bytes += 8 + u64::from(len);
        Ok(())
    }

    fn json<T: Serialize>(&mut self, kind: u32, value: &T) -> io::Result<()> {
        let text = serde_json::to_vec(value).map_err(io::Error::other)?;
        self.record(kind, &text)
    }

    /// The header (first).
    pub fn header(&mut self, h: &Header) -> io::Result<()> {
        self.json(KIND_HEADER, h)
    }

    /// A sample.
    pub fn sample(&mut self, s: &Sample) -> io::Result<()> {
        self.record(KIND_SAMPLE, &s.encode())?;
        self.samples += 1;
        Ok(())
    }

    /// A process's maps.
    pub fn maps(&mut self, m: &Maps) -> io::Result<()> {
        self.json(KIND_MAPS, m)
    }

    /// A thread's name.
    pub fn thread(&mut self, t: &Thread) -> io::Result<()> {
        self.json(KIND_THREAD, t)
    }

    /// The end (last).
    pub fn finish(&mut self, f: &Finish) -> io::Result<()> {
        self.json(KIND_FINISH, f)
    }

    /// The vDSO's image.
    pub fn vdso(&mut self, image: &[u8]) -> io::Result<()> {
        self.record(KIND_VDSO, image)
    }

    /// Flushes what is buffered.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The writer, flushed.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Why a file could not be read.
#[derive(Debug, PartialEq, Eq)]
pub enum ReadError {
    /// Not a record file (no magic).
    NotRecord,
    /// A version this pfm does not read.
    Version(u32),
    /// A record that is not what its kind says.
    Corrupt(String),
    /// The file has no header record.
    NoHeader,
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::NotRecord => write!(f, "not a pfm record file (no PFMDATA magic)"),
            ReadError::Version(v) => write!(
                f,
                "record file version {v}, this pfm reads version {VERSION}: use the pfm that wrote it"
            ),
            ReadError::Corrupt(what) => write!(f, "corrupt record file: {what}"),
            ReadError::NoHeader => write!(f, "corrupt record file: no header record"),
        }
    }
}

impl Recording {
    /// The period sample `s` ended: its own (`--random`), else the
    /// header's.
    pub fn period_of(&self, s: &Sample) -> u64 {
        s.period.unwrap_or(self.header.period)
    }

    /// Reads a whole record file from `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Recording, ReadError> {
        if bytes.len() < 16 || bytes[..8] != MAGIC {
            return Err(ReadError::NotRecord);
        }
        let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        if version != VERSION {
            return Err(ReadError::Version(version));
        }
        let mut header = None;
        let mut r = Recording::default();
        let mut at = 16usize;
        let mut index = 0usize;
        while at < bytes.len() {
            let Some(head) = bytes.get(at..at + 8) else {
                r.truncated = true;
                break;
            };
            let kind = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
            let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
            if len > MAX_RECORD {
                return Err(ReadError::Corrupt(format!(
                    "record {index} (at byte {at}) claims {len} bytes"
                )));
            }
            let start = at + 8;
            let Some(payload) = bytes.get(start..start + len as usize) else {
                r.truncated = true;
                break;
            };
            let bad =
                |what: &str| ReadError::Corrupt(format!("record {index} (at byte {at}): {what}"));
            fn json<'a, T: Deserialize<'a>>(p: &'a [u8]) -> Result<T, String> {
                serde_json::from_slice(p).map_err(|e| e.to_string())
            }
            match kind {
                KIND_HEADER if index == 0 => {
                    header = Some(json::<Header>(payload).map_err(|e| bad(&e))?);
                }
                _ if index == 0 => return Err(ReadError::NoHeader),
                KIND_HEADER => return Err(bad("a second header")),
                KIND_SAMPLE => r.samples.push(
                    Sample::decode(payload).ok_or_else(|| bad("a sample of the wrong length"))?,
                ),
                KIND_MAPS => r.maps.push(json(payload).map_err(|e| bad(&e))?),
                KIND_THREAD => r.threads.push(json(payload).map_err(|e| bad(&e))?),
                KIND_FINISH => r.finish = Some(json(payload).map_err(|e| bad(&e))?),
                KIND_VDSO => r.vdso = Some(payload.to_vec()),
                // A kind from a later pfm: skipped.
                _ => {}
            }
            at = start + len as usize;
            index += 1;
        }
        r.header = header.ok_or(ReadError::NoHeader)?;
        Ok(r)
    }

    /// Reads the record file at `path` (`-`: standard input, as `pfm
    /// record -o -` writes it to a pipe); errors are one line naming it.
    pub fn read(path: &Path) -> Result<Recording, String> {
        let mut bytes = Vec::new();
        let stdin = crate::output::is_stdio(path);
        let name = if stdin {
            "standard input".to_string()
        } else {
            path.display().to_string()
        };
        let read = if stdin {
            io::stdin().lock().read_to_end(&mut bytes)
        } else {
            File::open(path).and_then(|mut f| f.read_to_end(&mut bytes))
        };
        read.map_err(|e| {
            format!(
                "cannot read {name}: {}",
                perfmon::errno_text(e.raw_os_error().unwrap_or(0))
            )
        })?;
        Recording::parse(&bytes).map_err(|e| format!("{name}: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(i: u64, chain: Vec<u64>) -> Sample {
        Sample {
            tid: 10 + i as u32,
            pid: 10,
            cpu: 1,
            pmd: 0,
            set: 0,
            seq: i,
            ip: 0x5555_0000 + i,
            tstamp: 1_000 + i,
            values: vec![i, 2 * i],
            chain,
            period: None,
        }
    }

    fn recording() -> Recording {
        Recording {
            header: Header {
                pfm_version: "0.1.0".into(),
                model: "soft".into(),
                event: "task-clock".into(),
                code: 1,
                pmd: 0,
                counter_width: 64,
                unit: "ns".into(),
                period: 2_000_000,
                freq: Some(500),
                command: Some(vec!["sleep".into(), "1".into()]),
                pid: Some(10),
                pids: None,
                tids: None,
                inherit: false,
                call_chains: false,
                pages: 128,
                drop: false,
                random_mask: Some(3),
                random_seed: Some(12345),
                start_unix_ns: 1,
                start_monotonic_ns: 2,
            },
            samples: vec![sample(0, vec![]), sample(1, vec![0x4000_1234, 0x4000_5678])],
            maps: vec![Maps {
                pid: 10,
                time_ns: 3,
                maps: "00400000-00401000 r-xp 00000000 00:01 7 /bin/x\n".into(),
            }],
            threads: vec![Thread {
                tid: 10,
                pid: 10,
                comm: "x".into(),
                time_ns: 3,
            }],
            finish: Some(Finish {
                end_monotonic_ns: 9,
                samples: 2,
                written: 2,
                lost: 0,
                counted: Some(4_100_000),
                exit_code: Some(0),
                exit_signal: None,
                interrupted: false,
            }),
            vdso: Some(b"\x7fELF...".to_vec()),
            truncated: false,
        }
    }

    fn write(r: &Recording) -> Vec<u8> {
        let mut w = Writer::new(Vec::new()).unwrap();
        w.header(&r.header).unwrap();
        for m in &r.maps {
            w.maps(m).unwrap();
        }
        for t in &r.threads {
            w.thread(t).unwrap();
        }
        for s in &r.samples {
            w.sample(s).unwrap();
        }
        if let Some(v) = &r.vdso {
            w.vdso(v).unwrap();
        }
        if let Some(f) = &r.finish {
            w.finish(f).unwrap();
        }
        assert_eq!(w.samples, r.samples.len() as u64);
        let bytes = w.bytes;
        let out = w.into_inner().unwrap();
        assert_eq!(bytes, out.len() as u64);
        out
    }

    #[test]
    fn round_trips() {
        let r = recording();
        let bytes = write(&r);
        assert_eq!(&bytes[..8], b"PFMDATA\0");
        assert_eq!(&bytes[8..12], &1u32.to_le_bytes());
        assert_eq!(Recording::parse(&bytes).unwrap(), r);
    }

    #[test]
    fn sample_layout_is_the_documented_one() {
        let s = sample(3, vec![0xabc]);
        let b = s.encode();
        assert_eq!(b.len(), 48 + 8 * 3);
        assert_eq!(&b[0..4], &13u32.to_le_bytes());
        assert_eq!(&b[14..16], &2u16.to_le_bytes());
        assert_eq!(&b[16..20], &1u32.to_le_bytes());
        assert_eq!(&b[32..40], &s.ip.to_le_bytes());
        assert_eq!(&b[48..56], &3u64.to_le_bytes());
        assert_eq!(&b[64..72], &0xabcu64.to_le_bytes());
        assert_eq!(s.stack().collect::<Vec<_>>(), vec![s.ip, 0xabc]);
        // Lengths that disagree with the counts are refused.
        assert_eq!(Sample::decode(&b[..b.len() - 8]), None);
        assert_eq!(Sample::decode(&b[..20]), None);
    }

    #[test]
    fn a_sample_s_own_period_round_trips_and_old_samples_have_none() {
        let mut s = sample(2, vec![0x77]);
        s.period = Some(1_000_005);
        let b = s.encode();
        assert_eq!(b.len(), 48 + 8 * 4);
        assert_eq!(&b[20..24], &SAMPLE_PERIOD.to_le_bytes());
        assert_eq!(&b[72..80], &1_000_005u64.to_le_bytes());
        assert_eq!(Sample::decode(&b), Some(s.clone()));
        // A sample of a file from before the flag: reserved 0, no period.
        let old = sample(2, vec![0x77]).encode();
        assert_eq!(&old[20..24], &[0, 0, 0, 0]);
        let d = Sample::decode(&old).unwrap();
        assert_eq!(d.period, None);
        let mut r = recording();
        assert_eq!(r.period_of(&d), 2_000_000);
        assert_eq!(r.period_of(&s), 1_000_005);
        // A file with both kinds reads back whole.
        r.samples.push(s);
        assert_eq!(Recording::parse(&write(&r)).unwrap(), r);
        // The flag without the word: refused.
        assert_eq!(Sample::decode(&b[..b.len() - 8]), None);
    }

    #[test]
    fn unknown_kinds_and_fields_are_skipped() {
        let r = recording();
        let mut bytes = write(&r);
        // A record of a kind from a later pfm, at the end.
        bytes.extend_from_slice(&77u32.to_le_bytes());
        bytes.extend_from_slice(&3u32.to_le_bytes());
        bytes.extend_from_slice(b"abc");
        assert_eq!(Recording::parse(&bytes).unwrap(), r);
        // A header with a field from a later pfm.
        let mut w = Writer::new(Vec::new()).unwrap();
        let mut v = serde_json::to_value(&r.header).unwrap();
        v["future"] = serde_json::json!(1);
        w.json(KIND_HEADER, &v).unwrap();
        let parsed = Recording::parse(&w.into_inner().unwrap()).unwrap();
        assert_eq!(parsed.header, r.header);
    }

    #[test]
    fn truncation_keeps_what_is_whole() {
        let r = recording();
        let bytes = write(&r);
        // Cut inside the finish record: the samples stay, no finish.
        let cut = &bytes[..bytes.len() - 5];
        let p = Recording::parse(cut).unwrap();
        assert!(p.truncated);
        assert_eq!(p.samples, r.samples);
        assert_eq!(p.finish, None);
    }

    #[test]
    fn refuses_what_is_not_a_record_file() {
        assert_eq!(
            Recording::parse(b"#!/bin/sh\necho hello\n"),
            Err(ReadError::NotRecord)
        );
        assert_eq!(Recording::parse(b""), Err(ReadError::NotRecord));
        let mut v2 = write(&recording());
        v2[8] = 2;
        assert_eq!(Recording::parse(&v2), Err(ReadError::Version(2)));
        // A sample first: no header.
        let mut w = Writer::new(Vec::new()).unwrap();
        w.sample(&sample(0, vec![])).unwrap();
        assert_eq!(
            Recording::parse(&w.into_inner().unwrap()),
            Err(ReadError::NoHeader)
        );
        // A sample whose length disagrees with its counts.
        let mut w = Writer::new(Vec::new()).unwrap();
        w.header(&recording().header).unwrap();
        let mut bad = sample(0, vec![]).encode();
        bad.pop();
        w.record(KIND_SAMPLE, &bad).unwrap();
        let e = Recording::parse(&w.into_inner().unwrap()).unwrap_err();
        assert!(matches!(e, ReadError::Corrupt(_)), "{e:?}");
        assert!(e.to_string().contains("record 1"), "{e}");
    }
}
