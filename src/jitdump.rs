//! The jitdump file format (`jit-PID.dump`), version 1 as perf's `tools/perf/util/jitdump.h`
//! lays it out and `perf inject --jit` reads it: a header, then records that each start with
//! `(id: u32, total_size: u32, timestamp: u64)`, all in the writer's byte order (the header's
//! magic tells which). This module only splits a dump into typed records, borrowed from the
//! bytes; `symbolize::jitdump` keeps the names and `unwind::jitcfi` the unwind info. A dump
//! grows while its JIT runs: a record cut at the end of the bytes read is
//! [`Next::Incomplete`], to be read again later, not damage.

/// The most of a dump that is read: code bytes make dumps large, names come first.
pub(crate) const MAX_DUMP_BYTES: u64 = 1 << 30;
/// `JiTD` as the writer's u32.
const MAGIC: u32 = 0x4A69_5444;
const HEADER_MIN: usize = 40;
const PREFIX: usize = 16;
const JIT_CODE_LOAD: u32 = 0;
const JIT_CODE_MOVE: u32 = 1;
const JIT_CODE_DEBUG_INFO: u32 = 2;
const JIT_CODE_CLOSE: u32 = 3;
const JIT_CODE_UNWINDING_INFO: u32 = 4;
/// `unwinding_size`, `eh_frame_hdr_size`, `mapped_size` after the prefix.
const UNWINDING_FIXED: usize = PREFIX + 24;

/// Whether `path` names the jitdump of process `pid`: a file `jit-PID.dump` (in any
/// directory), which a JIT maps executable so that a recording sees it.
pub(crate) fn is_dump_of(path: &[u8], pid: u32) -> bool {
    dump_pid(path) == Some(pid)
}

/// The process whose jitdump `path` names, if it names one (see [`is_dump_of`]).
pub(crate) fn dump_pid(path: &[u8]) -> Option<u32> {
    let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
    let digits = name
        .strip_prefix(b"jit-")
        .and_then(|n| n.strip_suffix(b".dump"));
    digits
        .and_then(|d| std::str::from_utf8(d).ok())
        .and_then(|d| d.parse::<u32>().ok())
}

/// A little reader over the writer's byte order.
#[derive(Clone, Copy)]
pub(crate) struct Bytes<'a> {
    pub data: &'a [u8],
    big: bool,
}

impl<'a> Bytes<'a> {
    pub(crate) fn u32(&self, at: usize) -> Option<u32> {
        let b: [u8; 4] = self.data.get(at..at.checked_add(4)?)?.try_into().ok()?;
        Some(if self.big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }

    pub(crate) fn u64(&self, at: usize) -> Option<u64> {
        let b: [u8; 8] = self.data.get(at..at.checked_add(8)?)?.try_into().ok()?;
        Some(if self.big {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        })
    }

    /// A NUL-terminated string at `at` within `end`: the text and the offset after the NUL.
    pub(crate) fn cstr(&self, at: usize, end: usize) -> Option<(&'a str, usize)> {
        let bytes = self.data.get(at..end)?;
        let len = bytes.iter().position(|&b| b == 0)?;
        let text = std::str::from_utf8(&bytes[..len]).unwrap_or("[invalid UTF-8]");
        Some((text, at + len + 1))
    }
}

/// What the header says: the byte order and where the records start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub big_endian: bool,
    pub size: usize,
    /// `JITDUMP_FLAGS_ARCH_TIMESTAMP`: the records' times are the CPU's timestamp counter,
    /// not CLOCK_MONOTONIC.
    pub arch_timestamp: bool,
}

impl Header {
    /// Parses the header at the start of `data`.
    pub(crate) fn parse(data: &[u8]) -> Result<Header, String> {
        let magic = |big| Bytes { data, big }.u32(0);
        let big = match (magic(false), magic(true)) {
            (Some(MAGIC), _) => false,
            (_, Some(MAGIC)) => true,
            (None, _) => return Err("shorter than a jitdump header".into()),
            _ => return Err("not a jitdump file (bad magic)".into()),
        };
        let r = Bytes { data, big };
        let version = r.u32(4).unwrap_or(0);
        if version != 1 {
            return Err(format!("jitdump version {version}, not 1"));
        }
        let size = r.u32(8).map_or(0, |n| n as usize);
        if size < HEADER_MIN || size > data.len() {
            return Err(format!("bad header size {size}"));
        }
        Ok(Header {
            big_endian: big,
            size,
            arch_timestamp: r.u64(32).is_some_and(|f| f & 1 != 0),
        })
    }
}

/// One record, borrowed from the dump's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Record<'a> {
    /// `JIT_CODE_LOAD`: a function's code at `code_addr`.
    Load {
        timestamp: u64,
        code_addr: u64,
        code_size: u64,
        code_index: u64,
        name: &'a str,
    },
    /// `JIT_CODE_MOVE`: the code of load `code_index` now at `new_code_addr`.
    Move {
        timestamp: u64,
        new_code_addr: u64,
        code_size: u64,
        code_index: u64,
    },
    /// `JIT_CODE_DEBUG_INFO`: the record's body (`code_addr`, `nr_entry`, entries), parsed by
    /// whoever wants the lines; `end` is the offset after the record in the reader's bytes.
    DebugInfo {
        body: usize,
        end: usize,
    },
    /// `JIT_CODE_UNWINDING_INFO`: the `.eh_frame` and `.eh_frame_hdr` of the code the next
    /// `JIT_CODE_LOAD` loads. perf (`genelf.c`) takes the first `unwinding_size -
    /// eh_frame_hdr_size` bytes as the `.eh_frame` and the rest as the `.eh_frame_hdr`, and
    /// places them in memory right after the code rounded up to 8 bytes (V8 writes them so:
    /// its code objects keep them there), so their PC-relative addresses hold there.
    /// `mapped_size` 0 means the JIT did not map them: only a header, no CFI.
    Unwinding {
        eh_frame: &'a [u8],
        eh_frame_hdr: &'a [u8],
        mapped_size: u64,
    },
    Close,
    /// An id of a later version: skipped, as perf does.
    Other,
}

/// What the reader found at its offset.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next<'a> {
    Record(Record<'a>),
    /// The bytes end at the offset, or inside the record there (a JIT still writing it).
    Incomplete,
    /// The record there cannot be read: why.
    Damage(String),
}

/// Walks the records of a dump's bytes from an offset.
pub(crate) struct Records<'a> {
    r: Bytes<'a>,
    /// The offset of the next record.
    pub at: usize,
    /// The file offset of the bytes' start, for the messages.
    base: u64,
}

impl<'a> Records<'a> {
    /// The records of `data` (a whole dump, or the part of one read so far) after its
    /// header.
    pub(crate) fn new(data: &'a [u8], header: Header) -> Records<'a> {
        Records::at(data, header.big_endian, header.size)
    }

    /// The records of `data` from offset `at`, in the given byte order: the tail of a dump
    /// read from the offset of its first unread record (pass 0 and the bytes read).
    pub(crate) fn at(data: &'a [u8], big_endian: bool, at: usize) -> Records<'a> {
        Records {
            r: Bytes {
                data,
                big: big_endian,
            },
            at,
            base: 0,
        }
    }

    /// Says file offsets in its messages for bytes read from file offset `base`.
    pub(crate) fn with_file_offset(self, base: u64) -> Records<'a> {
        Records { base, ..self }
    }

    pub(crate) fn bytes(&self) -> Bytes<'a> {
        self.r
    }

    /// The record at the offset; moves past it when it was read whole.
    pub(crate) fn next_record(&mut self) -> Next<'a> {
        let (r, at) = (self.r, self.at);
        let offset = self.base.saturating_add(at as u64);
        let (Some(id), Some(size), Some(timestamp)) = (r.u32(at), r.u32(at + 4), r.u64(at + 8))
        else {
            return Next::Incomplete;
        };
        let size = size as usize;
        if size < PREFIX {
            return Next::Damage(format!("bad record size {size} at offset {offset}"));
        }
        let Some(end) = at.checked_add(size).filter(|&e| e <= r.data.len()) else {
            return Next::Incomplete;
        };
        let body = at + PREFIX;
        let record = match id {
            // pid, tid, vma, code_addr, code_size, code_index, name, code.
            JIT_CODE_LOAD => (|| {
                let (code_addr, code_size, code_index) =
                    (r.u64(body + 16)?, r.u64(body + 24)?, r.u64(body + 32)?);
                let (name, _) = r.cstr(body + 40, end)?;
                Some(Record::Load {
                    timestamp,
                    code_addr,
                    code_size,
                    code_index,
                    name,
                })
            })(),
            // pid, tid, vma, old_code_addr, new_code_addr, code_size, code_index.
            JIT_CODE_MOVE => (|| {
                Some(Record::Move {
                    timestamp,
                    new_code_addr: r.u64(body + 24)?,
                    code_size: r.u64(body + 32)?,
                    code_index: r.u64(body + 40)?,
                })
            })(),
            JIT_CODE_DEBUG_INFO => Some(Record::DebugInfo { body, end }),
            JIT_CODE_UNWINDING_INFO => unwinding(r, body, end),
            JIT_CODE_CLOSE => Some(Record::Close),
            _ => Some(Record::Other),
        };
        match record {
            Some(rec) => {
                self.at = end;
                Next::Record(rec)
            }
            None => Next::Damage(format!("malformed record {id} at offset {offset}")),
        }
    }
}

/// The body of a `JIT_CODE_UNWINDING_INFO` record ending at `end`: its sizes must fit the
/// record (the record may be padded after the data).
fn unwinding(r: Bytes<'_>, body: usize, end: usize) -> Option<Record<'_>> {
    let unwinding_size = usize::try_from(r.u64(body)?).ok()?;
    let hdr_size = usize::try_from(r.u64(body + 8)?).ok()?;
    let mapped_size = r.u64(body + 16)?;
    let data_start = body + (UNWINDING_FIXED - PREFIX);
    let data_end = data_start
        .checked_add(unwinding_size)
        .filter(|&e| e <= end)?;
    let data = r.data.get(data_start..data_end)?;
    let split = unwinding_size.checked_sub(hdr_size)?;
    Some(Record::Unwinding {
        eh_frame: &data[..split],
        eh_frame_hdr: &data[split..],
        mapped_size,
    })
}

/// Where and when a dump placed code (`JIT_CODE_LOAD`, `JIT_CODE_MOVE`), without names: what
/// tells, by a sample's time, which of several functions the JIT placed at one address ran
/// (`perf inject --jit` tells it by an MMAP of each load at its time).
#[derive(Debug, Default)]
pub(crate) struct LoadTimes {
    /// (start, timestamp, size), sorted so: by start, then timestamp, as the symbolizer's
    /// table (`symbolize::jitdump`), so that both scan the same loads at an address.
    code: Vec<(u64, u64, u64)>,
    /// The records' times are the CPU's counter (`JITDUMP_FLAGS_ARCH_TIMESTAMP`), not
    /// CLOCK_MONOTONIC.
    pub arch_timestamp: bool,
}

/// How many loads starting at or below an address a lookup considers.
pub(crate) const OVERLAP_SCAN: usize = 64;

impl LoadTimes {
    /// The loads of a dump's bytes, up to the first damage (the symbolizer says where).
    pub(crate) fn parse(data: &[u8]) -> LoadTimes {
        let Ok(header) = Header::parse(data) else {
            return LoadTimes::default();
        };
        let mut loads = LoadTimes {
            code: Vec::new(),
            arch_timestamp: header.arch_timestamp,
        };
        let mut indexes = rustc_hash::FxHashSet::default();
        let mut records = Records::new(data, header);
        while let Next::Record(record) = records.next_record() {
            let (start, size, timestamp) = match record {
                Record::Load {
                    timestamp,
                    code_addr,
                    code_size,
                    code_index,
                    ..
                } => {
                    indexes.insert(code_index);
                    (code_addr, code_size, timestamp)
                }
                // A move of code never loaded names nothing.
                Record::Move {
                    timestamp,
                    new_code_addr,
                    code_size,
                    code_index,
                } if indexes.contains(&code_index) => (new_code_addr, code_size, timestamp),
                Record::Close => break,
                _ => continue,
            };
            if size > 0 && start.checked_add(size).is_some() {
                loads.code.push((start, timestamp, size));
            }
        }
        loads.code.sort_unstable();
        loads
    }

    /// Of the loads whose code covers `addr`, the time of the one in effect at time `t` (on
    /// the dump's clock): the last loaded at or before `t`, else (a sample a little before
    /// every load, by the clocks' error) the first. `None` when at most one covers it (its
    /// name does not depend on when it ran), or when the [`OVERLAP_SCAN`] loads looked at
    /// hold none at or before `t` and may not be all.
    pub(crate) fn load_at(&self, addr: u64, t: u64) -> Option<u64> {
        let end = self.code.partition_point(|&(start, _, _)| start <= addr);
        let window = &self.code[end.saturating_sub(OVERLAP_SCAN)..end];
        let mut covering = window
            .iter()
            .filter(|&&(start, _, size)| addr - start < size)
            .map(|&(_, time, _)| time);
        let first = covering.next()?;
        let (mut n, mut earliest, mut in_effect) = (1, first, (first <= t).then_some(first));
        for time in covering {
            n += 1;
            earliest = earliest.min(time);
            if time <= t && in_effect.is_none_or(|e| time > e) {
                in_effect = Some(time);
            }
        }
        let whole = window.len() < OVERLAP_SCAN;
        match in_effect {
            Some(load) if n > 1 => Some(load),
            None if n > 1 && whole => Some(earliest),
            _ => None,
        }
    }
}

/// A dump writer for the tests, in the machine's byte order.
#[cfg(test)]
pub(crate) struct Writer(pub Vec<u8>);

#[cfg(test)]
impl Writer {
    pub(crate) fn new() -> Writer {
        let mut w = Writer(Vec::new());
        for v in [MAGIC, 1, 40, 62, 0, 1234] {
            w.0.extend(v.to_ne_bytes());
        }
        w.0.extend(7u64.to_ne_bytes());
        w.0.extend(0u64.to_ne_bytes());
        w
    }

    pub(crate) fn record(&mut self, id: u32, timestamp: u64, body: &[u8]) {
        self.0.extend(id.to_ne_bytes());
        self.0.extend(((PREFIX + body.len()) as u32).to_ne_bytes());
        self.0.extend(timestamp.to_ne_bytes());
        self.0.extend(body);
    }

    pub(crate) fn load(&mut self, t: u64, (addr, size, index): (u64, u64, u64), name: &str) {
        let mut b = Vec::new();
        b.extend(1234u32.to_ne_bytes());
        b.extend(1234u32.to_ne_bytes());
        for v in [addr, addr, size, index] {
            b.extend(v.to_ne_bytes());
        }
        b.extend(name.as_bytes());
        b.push(0);
        b.extend(std::iter::repeat_n(0xc3u8, size as usize));
        self.record(JIT_CODE_LOAD, t, &b);
    }

    pub(crate) fn moved(&mut self, t: u64, (old, new, size, index): (u64, u64, u64, u64)) {
        let mut b = Vec::new();
        b.extend(1234u32.to_ne_bytes());
        b.extend(1234u32.to_ne_bytes());
        for v in [new, old, new, size, index] {
            b.extend(v.to_ne_bytes());
        }
        self.record(JIT_CODE_MOVE, t, &b);
    }

    pub(crate) fn debug(&mut self, t: u64, code_addr: u64, entries: &[(u64, u32, &[u8])]) {
        let mut b = Vec::new();
        b.extend(code_addr.to_ne_bytes());
        b.extend((entries.len() as u64).to_ne_bytes());
        for (addr, line, file) in entries {
            b.extend(addr.to_ne_bytes());
            b.extend(line.to_ne_bytes());
            b.extend(0u32.to_ne_bytes());
            b.extend(*file);
            b.push(0);
        }
        self.record(JIT_CODE_DEBUG_INFO, t, &b);
    }

    /// A `JIT_CODE_UNWINDING_INFO` of `eh_frame` then `hdr`, padded to 8 bytes as V8 pads.
    pub(crate) fn unwinding(&mut self, t: u64, eh_frame: &[u8], hdr: &[u8], mapped: bool) {
        let size = (eh_frame.len() + hdr.len()) as u64;
        let mut b = Vec::new();
        for v in [size, hdr.len() as u64, if mapped { size } else { 0 }] {
            b.extend(v.to_ne_bytes());
        }
        b.extend(eh_frame);
        b.extend(hdr);
        b.resize(b.len().div_ceil(8) * 8, 0);
        self.record(JIT_CODE_UNWINDING_INFO, t, &b);
    }

    pub(crate) fn close(&mut self, t: u64) {
        self.record(JIT_CODE_CLOSE, t, &[]);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn all(data: &[u8]) -> (Vec<Record<'_>>, Next<'_>) {
        let mut recs = Records::new(data, Header::parse(data).unwrap());
        let mut out = Vec::new();
        loop {
            match recs.next_record() {
                Next::Record(r) => out.push(r),
                other => return (out, other),
            }
        }
    }

    #[test]
    fn the_load_in_effect_at_a_time_is_the_last_before_it() {
        let mut w = Writer::new();
        w.load(10, (0x1000, 0x20, 1), "first");
        w.load(20, (0x2000, 0x10, 2), "alone");
        // The JIT reuses the first's memory twice, the second time partly.
        w.load(30, (0x1000, 0x20, 3), "second");
        w.load(40, (0x1010, 0x20, 4), "third");
        w.moved(50, (0x2000, 0x3000, 0x10, 2));
        w.moved(60, (0x9000, 0x1000, 0x20, 99));
        w.close(70);
        w.load(80, (0x1000, 0x20, 5), "after the close");
        let loads = LoadTimes::parse(&w.0);
        assert!(!loads.arch_timestamp);
        assert_eq!(loads.load_at(0x1004, 15), Some(10));
        assert_eq!(loads.load_at(0x1004, 30), Some(30));
        assert_eq!(loads.load_at(0x1004, 1000), Some(30));
        // Before every load (a clock a little off): the first.
        assert_eq!(loads.load_at(0x1004, 5), Some(10));
        assert_eq!(loads.load_at(0x1018, 45), Some(40));
        assert_eq!(loads.load_at(0x1028, 45), None, "one load covers it");
        assert_eq!(loads.load_at(0x2004, 45), None);
        assert_eq!(loads.load_at(0x3004, 55), None, "moved once: one load");
        assert_eq!(loads.load_at(0x5000, 55), None);
        // More loads at one address than a lookup scans: the latest ones are scanned; a
        // time before all of those may belong to one not scanned, and names none.
        let mut many = Writer::new();
        for i in 0..OVERLAP_SCAN as u64 + 6 {
            many.load(100 + i, (0x5000, 0x10, i), "again");
        }
        let loads = LoadTimes::parse(&many.0);
        assert_eq!(loads.load_at(0x5004, 150), Some(150));
        assert_eq!(loads.load_at(0x5004, 1000), Some(169));
        assert_eq!(loads.load_at(0x5004, 50), None);
        // A writer that stamps records with the CPU's counter says so in its header.
        let mut arch = Writer::new();
        arch.0[32..40].copy_from_slice(&1u64.to_ne_bytes());
        assert!(LoadTimes::parse(&arch.0).arch_timestamp);
        assert_eq!(LoadTimes::parse(b"not a dump").load_at(0, 0), None);
    }

    #[test]
    fn unwinding_info_splits_into_eh_frame_then_header() {
        let mut w = Writer::new();
        w.unwinding(5, &[1; 12], &[2; 20], true);
        w.load(6, (0x1000, 0x10, 1), "f");
        w.unwinding(7, &[], &[3; 20], false);
        w.close(8);
        let (recs, end) = all(&w.0);
        assert_eq!(end, Next::Incomplete);
        assert_eq!(
            recs[0],
            Record::Unwinding {
                eh_frame: &[1; 12],
                eh_frame_hdr: &[2; 20],
                mapped_size: 32
            }
        );
        assert!(matches!(
            recs[1],
            Record::Load {
                code_addr: 0x1000,
                name: "f",
                ..
            }
        ));
        assert_eq!(
            recs[2],
            Record::Unwinding {
                eh_frame: &[],
                eh_frame_hdr: &[3; 20],
                mapped_size: 0
            }
        );
        assert_eq!(recs[3], Record::Close);
    }

    #[test]
    fn a_record_cut_at_the_end_is_incomplete_and_bad_sizes_are_damage() {
        let mut w = Writer::new();
        w.unwinding(5, &[1; 12], &[2; 20], true);
        let whole = w.0.len();
        w.load(6, (0x1000, 0x10, 1), "f");
        for cut in whole..w.0.len() {
            let (recs, end) = all(&w.0[..cut]);
            assert_eq!((recs.len(), end), (1, Next::Incomplete), "cut at {cut}");
        }
        // An unwinding size past its record, or a header larger than the data.
        let size_at = 40 + PREFIX;
        let mut bad = w.0.clone();
        bad[size_at..size_at + 8].copy_from_slice(&4096u64.to_ne_bytes());
        assert!(matches!(all(&bad).1, Next::Damage(m) if m.contains("malformed record 4")));
        let mut bad = w.0.clone();
        bad[size_at + 8..size_at + 16].copy_from_slice(&33u64.to_ne_bytes());
        assert!(matches!(all(&bad).1, Next::Damage(_)));
        let mut bad = w.0.clone();
        bad[44..48].copy_from_slice(&8u32.to_ne_bytes());
        assert!(matches!(all(&bad).1, Next::Damage(m) if m.contains("bad record size")));
        // Every single-byte corruption reads without a panic.
        for i in 0..w.0.len() {
            let mut m = w.0.clone();
            m[i] ^= 0xff;
            if let Ok(h) = Header::parse(&m) {
                let mut recs = Records::new(&m, h);
                while let Next::Record(_) = recs.next_record() {}
            }
        }
    }

    #[test]
    fn dump_paths_name_their_process() {
        assert!(is_dump_of(b"/tmp/x/jit-123.dump", 123));
        assert!(is_dump_of(b"jit-123.dump", 123));
        assert!(!is_dump_of(b"/tmp/jit-123.dump", 124));
        assert!(!is_dump_of(b"/tmp/jit-12a.dump", 12));
        assert!(!is_dump_of(b"/tmp/jit-123.dump.bak", 123));
    }
}
