//! jitdump files (`jit-PID.dump`), read as `perf inject --jit` reads them: a JIT writes one
//! per process, names every function it emits with a `JIT_CODE_LOAD` record (address, size,
//! name, the code bytes), and maps the file executable so that the recording sees an MMAP of
//! it. The records are split by [`crate::jitdump`].
//!
//! Kept per code range: its name, when it was loaded, its `JIT_CODE_DEBUG_INFO` lines (the
//! record that precedes the load of the same address). `JIT_CODE_MOVE` places an earlier
//! load's code (by `code_index`) at a new address. Unwinding info is the unwinder's
//! (`unwind::jitcfi`). A truncated or corrupt file keeps what was read before the damage and
//! says where it stopped.

use std::path::Path;

use rustc_hash::FxHashMap;

use crate::jitdump::{Bytes, Header, MAX_DUMP_BYTES, Next, OVERLAP_SCAN, Record, Records};

/// Debug entries kept per load, at most.
const MAX_LINES_PER_LOAD: usize = 1 << 16;

/// One line-table entry of a `JIT_CODE_DEBUG_INFO` record.
#[derive(Clone, Debug, PartialEq, Eq)]
struct LineEntry {
    addr: u64,
    line: u32,
    file: std::sync::Arc<str>,
}

/// One function's code, valid from `timestamp` on.
#[derive(Clone, Debug, PartialEq, Eq)]
struct JitCode {
    start: u64,
    size: u64,
    timestamp: u64,
    name: std::sync::Arc<str>,
    lines: std::sync::Arc<[LineEntry]>,
}

/// What a lookup finds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct JitName<'a> {
    pub name: &'a str,
    pub offset: u64,
    pub file: Option<&'a str>,
    pub line: Option<u32>,
}

/// The code loads of one jitdump file.
#[derive(Debug, Default)]
pub(crate) struct JitDump {
    /// Sorted by start, then timestamp.
    code: Vec<JitCode>,
    /// Why reading stopped before the end, if it did.
    pub damage: Option<String>,
}

impl JitDump {
    /// Reads the dump at `path`, a path taken from a recording: a regular file only, never
    /// a FIFO or a device, at most [`MAX_DUMP_BYTES`].
    pub(crate) fn read(path: &Path) -> std::io::Result<JitDump> {
        let data = crate::mapped::read_regular_at_most(path, MAX_DUMP_BYTES)?;
        Ok(JitDump::parse(&data))
    }

    /// Parses a whole dump. Never fails: damage stops the parse and is described.
    pub(crate) fn parse(data: &[u8]) -> JitDump {
        let mut dump = JitDump::default();
        if let Err(why) = dump.parse_records(data) {
            dump.damage = Some(why);
        }
        dump.code.sort_by_key(|c| (c.start, c.timestamp));
        dump
    }

    fn parse_records(&mut self, data: &[u8]) -> Result<(), String> {
        let mut records = Records::new(data, Header::parse(data)?);
        let r = records.bytes();
        // code_index → (name, lines) of its load, for moves.
        let mut by_index: FxHashMap<u64, (std::sync::Arc<str>, std::sync::Arc<[LineEntry]>)> =
            FxHashMap::default();
        let mut pending_lines: Option<(u64, std::sync::Arc<[LineEntry]>)> = None;
        loop {
            let at = records.at;
            let record = match records.next_record() {
                Next::Record(record) => record,
                Next::Incomplete if at >= data.len() => return Ok(()),
                Next::Incomplete => return Err(format!("truncated record at offset {at}")),
                Next::Damage(why) => return Err(why),
            };
            match record {
                Record::Load {
                    timestamp,
                    code_addr,
                    code_size,
                    code_index,
                    name,
                } => {
                    let name: std::sync::Arc<str> = name.into();
                    let lines = match pending_lines.take() {
                        Some((addr, lines)) if addr == code_addr => lines,
                        _ => std::sync::Arc::from(Vec::new()),
                    };
                    by_index.insert(code_index, (name.clone(), lines.clone()));
                    self.push(code_addr, code_size, timestamp, name, lines);
                }
                Record::Move {
                    timestamp,
                    new_code_addr,
                    code_size,
                    code_index,
                } => {
                    if let Some((name, lines)) = by_index.get(&code_index).cloned() {
                        self.push(new_code_addr, code_size, timestamp, name, lines);
                    }
                }
                Record::DebugInfo { body, end } => {
                    let bad = || format!("malformed record 2 at offset {at}");
                    pending_lines = Some(parse_debug_info(&r, body, end).ok_or_else(bad)?);
                }
                Record::Close => return Ok(()),
                Record::Unwinding { .. } | Record::Other => {}
            }
        }
    }

    fn push(
        &mut self,
        start: u64,
        size: u64,
        timestamp: u64,
        name: std::sync::Arc<str>,
        lines: std::sync::Arc<[LineEntry]>,
    ) {
        if size == 0 || start.checked_add(size).is_none() {
            return;
        }
        self.code.push(JitCode {
            start,
            size,
            timestamp,
            name,
            lines,
        });
    }

    /// Functions loaded.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.code.len()
    }

    /// The function whose code covers `addr`: of several (the JIT reused the memory), the
    /// one loaded at time `load` (`LoadTimes::load_at` picked it by the sample's time),
    /// else the one loaded last, as a perf map's later line replaces an earlier one.
    pub(crate) fn lookup(&self, addr: u64, load: Option<u64>) -> Option<JitName<'_>> {
        let end = self.code.partition_point(|c| c.start <= addr);
        let code = self.code[..end]
            .iter()
            .rev()
            .take(OVERLAP_SCAN)
            .filter(|c| addr - c.start < c.size)
            .max_by_key(|c| (load == Some(c.timestamp), c.timestamp))?;
        let entry = code
            .lines
            .iter()
            .take_while(|l| l.addr <= addr)
            .last()
            .or_else(|| code.lines.first());
        Some(JitName {
            name: &code.name,
            offset: addr - code.start,
            file: entry.map(|l| &*l.file),
            line: entry.map(|l| l.line),
        })
    }
}

/// `code_addr: u64, nr_entry: u64`, then entries of `addr: u64, lineno: i32, discrim: i32,
/// name: NUL-terminated` (a name of `"\xff"` repeats the previous entry's file).
fn parse_debug_info(
    r: &Bytes<'_>,
    body: usize,
    end: usize,
) -> Option<(u64, std::sync::Arc<[LineEntry]>)> {
    let code_addr = r.u64(body)?;
    let count = r.u64(body + 8)?;
    let mut at = body + 16;
    let mut lines: Vec<LineEntry> = Vec::new();
    let mut last_file: std::sync::Arc<str> = "".into();
    for _ in 0..count {
        if lines.len() >= MAX_LINES_PER_LOAD {
            break;
        }
        let addr = r.u64(at)?;
        let line = r.u32(at + 8)?;
        let raw = r.data.get(at + 16..end)?;
        let file = if raw.first() == Some(&0xff) && raw.get(1) == Some(&0) {
            at += 18;
            last_file.clone()
        } else {
            let (text, next) = r.cstr(at + 16, end)?;
            at = next;
            last_file = text.into();
            last_file.clone()
        };
        lines.push(LineEntry { addr, line, file });
    }
    lines.sort_by_key(|l| l.addr);
    Some((code_addr, lines.into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jitdump::Writer;

    #[test]
    fn loads_moves_and_lines_name_code() {
        let mut w = Writer::new();
        // A file name of 0xff repeats the previous entry's.
        w.debug(9, 0x1000, &[(0x1000, 10, b"a.js"), (0x1008, 11, b"\xff")]);
        w.load(10, (0x1000, 0x20, 1), "LazyCompile:*fib a.js:10");
        w.load(11, (0x2000, 0x10, 2), "stub");
        // Code reuse: the later load at the same place names it.
        w.load(20, (0x2000, 0x8, 3), "newer");
        w.moved(30, (0x1000, 0x3000, 0x20, 1));
        let d = JitDump::parse(&w.0);
        assert_eq!(d.damage, None);
        assert_eq!(d.len(), 4);
        let fib = d.lookup(0x1010, None).unwrap();
        assert_eq!((fib.name, fib.offset), ("LazyCompile:*fib a.js:10", 0x10));
        assert_eq!((fib.file, fib.line), (Some("a.js"), Some(11)));
        assert_eq!(d.lookup(0x2004, None).map(|n| n.name), Some("newer"));
        // Named by the load in effect when a sample ran there.
        assert_eq!(d.lookup(0x2004, Some(11)).map(|n| n.name), Some("stub"));
        assert_eq!(d.lookup(0x2004, Some(20)).map(|n| n.name), Some("newer"));
        assert_eq!(d.lookup(0x2004, Some(99)).map(|n| n.name), Some("newer"));
        assert_eq!(d.lookup(0x2009, None).map(|n| n.name), Some("stub"));
        let moved = d.lookup(0x3001, None).unwrap();
        assert_eq!((moved.name, moved.offset), ("LazyCompile:*fib a.js:10", 1));
        assert_eq!(d.lookup(0x1020, None), None);
        assert_eq!(d.lookup(0xfff, None), None);
    }

    #[test]
    fn truncated_and_corrupt_dumps_keep_what_came_before() {
        let mut w = Writer::new();
        w.load(10, (0x1000, 0x20, 1), "first");
        let whole = w.0.len();
        w.load(11, (0x2000, 0x20, 2), "second");
        // Cut anywhere inside the second record: the first is kept, the damage said.
        for cut in whole + 1..w.0.len() {
            let d = JitDump::parse(&w.0[..cut]);
            assert_eq!(d.len(), 1, "cut at {cut}");
            assert!(
                d.damage.as_deref().is_some_and(|m| m.contains("offset")),
                "{d:?}"
            );
        }
        // A record size smaller than its prefix, or past the end.
        let mut bad = w.0.clone();
        bad[whole + 4..whole + 8].copy_from_slice(&3u32.to_ne_bytes());
        assert!(JitDump::parse(&bad).damage.is_some());
        bad[whole + 4..whole + 8].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert!(JitDump::parse(&bad).damage.is_some());
        // Every prefix and every single-byte corruption parses without a panic.
        for cut in 0..w.0.len() {
            let _ = JitDump::parse(&w.0[..cut]);
        }
        for i in 0..w.0.len() {
            let mut m = w.0.clone();
            m[i] ^= 0xff;
            let _ = JitDump::parse(&m).lookup(0x1000, None);
        }
        assert!(JitDump::parse(b"").damage.is_some());
        assert!(
            JitDump::parse(b"ELF\x7fnot a dump at all, no no no no no no")
                .damage
                .is_some()
        );
    }

    #[test]
    fn a_big_endian_writer_is_read() {
        let w = Writer::new();
        // Swap every field of the header: the magic reads swapped, the version too.
        let mut be = Vec::new();
        for chunk in w.0[..24].chunks(4) {
            be.extend(chunk.iter().rev());
        }
        for chunk in w.0[24..40].chunks(8) {
            be.extend(chunk.iter().rev());
        }
        let d = JitDump::parse(&be);
        assert_eq!(d.damage, None);
        assert_eq!(d.len(), 0);
    }
}
