//! Reads perf.data files (PERFILE2, native endian) written by memperf or perf: file mode, and
//! pipe mode (`perf record -o -`), whose header arrives as records ([`super::pipe`]).

use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use rustc_hash::FxHashMap;

use super::features::HEADER_COMPRESSED;
use super::{
    ATTR_SIZE_VER0, EventDesc, FILE_HEADER_SIZE, PERF_MAGIC, PERF_RECORD_AUXTRACE,
    PERF_RECORD_COMPRESSED, PERF_RECORD_COMPRESSED2, PERF_RECORD_HEADER_TRACING_DATA,
    PIPE_HEADER_SIZE, PerfDataError, ReadFeatures, attr_from_bytes, le_u32, le_u64,
};
use crate::records::{ParseInfo, record_identifier};

/// A whole perf.data file in memory.
#[derive(Debug)]
pub struct PerfDataFile {
    pub events: Vec<EventDesc>,
    pub features: ReadFeatures,
    /// Bytes of the data section that lie beyond the end of the file.
    pub missing_data_bytes: u64,
    bytes: Bytes,
    data_offset: u64,
    data_end: u64,
    ids: FxHashMap<u64, usize>,
    pipe: bool,
    unfinished: bool,
}

/// One record of the data section, borrowed from the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawFileRecord<'a> {
    pub ty: u32,
    pub misc: u16,
    /// The record without its 8-byte header.
    pub body: &'a [u8],
    /// The whole record, header included.
    pub bytes: &'a [u8],
    /// What follows the record and belongs to it: the tracing data after
    /// PERF_RECORD_HEADER_TRACING_DATA, the trace after PERF_RECORD_AUXTRACE; else empty.
    pub payload: &'a [u8],
    /// File offset of the record header.
    pub offset: u64,
}

/// Iterates over the data section; stops after the first error.
#[derive(Debug)]
pub struct RecordIter<'a> {
    bytes: &'a [u8],
    pos: u64,
    end: u64,
    missing: u64,
    done: bool,
    /// Pipe mode: the stream has no declared length, so a cut is reported as such.
    pipe: bool,
}

impl<'a> Iterator for RecordIter<'a> {
    type Item = Result<RawFileRecord<'a>, PerfDataError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let remaining = self.end - self.pos;
        if remaining == 0 {
            self.done = true;
            return (self.missing > 0).then_some(Err(PerfDataError::Truncated {
                offset: self.pos,
                skipped: self.missing,
            }));
        }
        let start = self.pos as usize;
        let head = match self.bytes.get(start..start + 8) {
            Some(h) if remaining >= 8 => h,
            _ => return self.truncated(8),
        };
        let ty = le_u32(head, 0);
        let misc = u16::from_ne_bytes([head[4], head[5]]);
        let size = u16::from_ne_bytes([head[6], head[7]]);
        if size < 8 {
            self.done = true;
            return Some(Err(PerfDataError::BadRecordSize {
                offset: self.pos,
                size,
            }));
        }
        if u64::from(size) > remaining {
            return self.truncated(u64::from(size));
        }
        let body = &self.bytes[start + 8..start + usize::from(size)];
        let whole = u64::from(size).saturating_add(payload_size(ty, body));
        if whole > remaining {
            return self.truncated(whole);
        }
        if matches!(ty, PERF_RECORD_COMPRESSED | PERF_RECORD_COMPRESSED2) {
            self.done = true;
            return Some(Err(PerfDataError::Compressed {
                offset: Some(self.pos),
            }));
        }
        // `whole <= remaining`, and the bytes reach `end`: the payload is within them.
        let payload = &self.bytes[start + usize::from(size)..start + whole as usize];
        let offset = self.pos;
        self.pos += whole;
        Some(Ok(RawFileRecord {
            ty,
            misc,
            body,
            bytes: &self.bytes[start..start + usize::from(size)],
            payload,
            offset,
        }))
    }
}

/// The size of what follows a record of type `ty` and belongs to it (perf's reader skips it
/// after handling the record, in both modes).
fn payload_size(ty: u32, body: &[u8]) -> u64 {
    match ty {
        PERF_RECORD_HEADER_TRACING_DATA if body.len() >= 4 => u64::from(le_u32(body, 0)),
        PERF_RECORD_AUXTRACE if body.len() >= 8 => le_u64(body, 0),
        _ => 0,
    }
}

/// Appends at most `n` more bytes of `r` to `buf`; returns how many came.
fn read_up_to(r: &mut dyn std::io::Read, buf: &mut Vec<u8>, n: u64) -> std::io::Result<u64> {
    std::io::Read::read_to_end(&mut std::io::Read::take(&mut *r, n), buf).map(|n| n as u64)
}

/// Reads a pipe-mode stream's records one at a time, each by the size its header gives,
/// and stops at the first header that cannot be a record (size under 8): a stream of
/// something else after a valid header (zeros, say) is not read to its end, which may
/// never come. The parser then reports the damage where it is.
fn read_pipe_records(r: &mut dyn std::io::Read, buf: &mut Vec<u8>) -> std::io::Result<()> {
    loop {
        let start = buf.len();
        if read_up_to(r, buf, 8)? < 8 {
            return Ok(());
        }
        let ty = le_u32(buf, start);
        let size = u64::from(u16::from_le_bytes([buf[start + 6], buf[start + 7]]));
        if size < 8 {
            return Ok(());
        }
        let body = buf.len();
        if read_up_to(r, buf, size - 8)? < size - 8 {
            return Ok(());
        }
        let payload = payload_size(ty, &buf[body..]);
        if payload > 0 && read_up_to(r, buf, payload)? < payload {
            return Ok(());
        }
    }
}

impl<'a> RecordIter<'a> {
    /// The records of a pipe-mode stream: everything after its 16-byte header.
    pub(super) fn pipe(bytes: &'a [u8]) -> RecordIter<'a> {
        RecordIter {
            bytes,
            pos: PIPE_HEADER_SIZE.min(bytes.len() as u64),
            end: bytes.len() as u64,
            missing: 0,
            done: false,
            pipe: true,
        }
    }

    /// Ends the iteration at a record of `wanted` bytes that is not all there.
    fn truncated(&mut self, wanted: u64) -> Option<Result<RawFileRecord<'static>, PerfDataError>> {
        self.done = true;
        let present = self.end - self.pos;
        Some(Err(if self.pipe {
            PerfDataError::StreamTruncated {
                offset: self.pos,
                wanted,
                present,
            }
        } else {
            PerfDataError::Truncated {
                offset: self.pos,
                skipped: present + self.missing,
            }
        }))
    }
}

fn section(b: &[u8], off: usize) -> (u64, u64) {
    (le_u64(b, off), le_u64(b, off + 8))
}

/// Whether the file's records are zstd-compressed: feature bit 27 set and its section, the
/// bit's entry in the table after the data, saying so (`struct perf_env::comp_*`: version,
/// then type 1 for zstd). A damaged header's random bits are not taken for it.
fn says_zstd(bytes: &[u8], table: u64) -> bool {
    let bitmap: Vec<u64> = (0..4).map(|i| le_u64(bytes, 72 + 8 * i)).collect();
    if bitmap[0] & (1 << HEADER_COMPRESSED) == 0 {
        return false;
    }
    // Sections come in the order of the bits set.
    let index = (bitmap[0] & ((1 << HEADER_COMPRESSED) - 1)).count_ones() as u64;
    let Some(entry) = table
        .checked_add(index * 16)
        .and_then(|at| slice(bytes, at, 16))
    else {
        return false;
    };
    let (off, size) = section(entry, 0);
    let Some(body) = slice(bytes, off, size.min(8)) else {
        return false;
    };
    body.len() == 8 && le_u32(body, 4) == 1
}

/// `bytes[offset..offset+size]` if it lies within the file.
fn slice(bytes: &[u8], offset: u64, size: u64) -> Option<&[u8]> {
    let start = usize::try_from(offset).ok()?;
    let end = start.checked_add(usize::try_from(size).ok()?)?;
    bytes.get(start..end)
}

fn check_magic(bytes: &[u8]) -> Result<(), PerfDataError> {
    let magic = bytes.get(..8).unwrap_or(bytes);
    if magic == PERF_MAGIC {
        return Ok(());
    }
    let mut swapped = PERF_MAGIC;
    swapped.reverse();
    Err(match magic {
        m if m == swapped => PerfDataError::BigEndian,
        b"PERFFILE" => PerfDataError::Version1,
        m => PerfDataError::BadMagic(m.escape_ascii().to_string()),
    })
}

/// The file's bytes: mapped from disk, or owned.
#[derive(Debug)]
enum Bytes {
    Owned(Vec<u8>),
    Mapped(memmap2::Mmap),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Owned(v) => v,
            Bytes::Mapped(m) => m,
        }
    }
}

/// Why a stream could not be read as a recording.
#[derive(Debug)]
pub enum StreamError {
    Io(std::io::Error),
    Data(PerfDataError),
}

impl PerfDataFile {
    /// Event names from the file's EVENT_DESC, else generic ones.
    pub fn event_names(&self) -> Vec<String> {
        (0..self.events.len())
            .map(|i| {
                self.features
                    .event_names
                    .get(i)
                    .filter(|n| !n.is_empty())
                    .cloned()
                    .or_else(|| Some(self.events[i].name.clone()).filter(|n| !n.is_empty()))
                    .unwrap_or_else(|| format!("event{i}"))
            })
            .collect()
    }

    /// Whether the user frames in event `ev`'s callchains are the kernel's frame-pointer
    /// walk: the event recorded callchains, and memperf did not unwind its stacks while
    /// recording (an online unwind writes its DWARF frames into the callchain and takes the
    /// stack copy out of the attr, leaving its size: `sample_stack_user` without
    /// PERF_SAMPLE_STACK_USER, which no kernel walk has). A file that counts its unwinds
    /// per event lists them up to its last event with any (a missing one had none) and the
    /// stacks it left truncated or shed; where it counted them for all events together
    /// (older files), any unwind says no for every event.
    pub fn walked_by_fp(&self, ev: usize) -> bool {
        let Some(e) = self.events.get(ev) else {
            return false;
        };
        if e.attr.sample_type & crate::abi::PERF_SAMPLE_CALLCHAIN == 0 {
            return false;
        }
        if e.attr.sample_type & crate::abi::PERF_SAMPLE_STACK_USER == 0
            && e.attr.sample_stack_user != 0
        {
            return false;
        }
        let Some(m) = &self.features.memperf_stats else {
            return true;
        };
        if !m.has_event_unwinds() {
            return m.get("unwound").unwrap_or(0) == 0;
        }
        // A stack the recorder left truncated or shed was its to unwind too.
        m.event_unwinds(ev) == crate::perfdata::EventUnwinds::default()
    }

    /// Opens a file; regular files are memory-mapped, anything else is read.
    pub fn open(path: &Path) -> Result<PerfDataFile, PerfDataError> {
        let io_err = |cause| PerfDataError::Io {
            path: path.display().to_string(),
            cause,
        };
        // A device is refused before it is opened: /dev/zero would be read until memory
        // runs out, and opening some devices has effects.
        let meta = std::fs::metadata(path).map_err(io_err)?;
        let ft = meta.file_type();
        if ft.is_char_device() || ft.is_block_device() || ft.is_socket() {
            return Err(PerfDataError::NotAFile {
                path: path.display().to_string(),
                kind: if ft.is_socket() { "socket" } else { "device" },
            });
        }
        let file = std::fs::File::open(path).map_err(io_err)?;
        if meta.is_file() && meta.len() > 0 {
            let map = crate::sys::map_file(&file).map_err(io_err)?;
            return Self::parse(Bytes::Mapped(map));
        }
        Self::read_stream(&mut &file).map_err(|e| match e {
            StreamError::Io(cause) => io_err(cause),
            StreamError::Data(e) => e,
        })
    }

    /// Reads a recording from a stream (a pipe, standard input): the magic first, so that
    /// a stream of something else fails at once instead of being read whole.
    pub fn read_stream(r: &mut dyn std::io::Read) -> Result<PerfDataFile, StreamError> {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(&mut *r, 8), &mut bytes)
            .map_err(StreamError::Io)?;
        if bytes.is_empty() {
            return Err(StreamError::Data(PerfDataError::Empty));
        }
        check_magic(&bytes).map_err(StreamError::Data)?;
        read_up_to(r, &mut bytes, 8).map_err(StreamError::Io)?;
        if bytes.len() == 16 && le_u64(&bytes, 8) == PIPE_HEADER_SIZE {
            read_pipe_records(r, &mut bytes).map_err(StreamError::Io)?;
        } else {
            r.read_to_end(&mut bytes).map_err(StreamError::Io)?;
        }
        Self::parse(Bytes::Owned(bytes)).map_err(StreamError::Data)
    }

    /// Parses a file already in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<PerfDataFile, PerfDataError> {
        Self::parse(Bytes::Owned(bytes))
    }

    fn parse(bytes: Bytes) -> Result<PerfDataFile, PerfDataError> {
        if bytes.is_empty() {
            return Err(PerfDataError::Empty);
        }
        check_magic(&bytes)?;
        let header_size = le_u64(&bytes, 8);
        if header_size == PIPE_HEADER_SIZE {
            return Self::parse_pipe(bytes);
        }
        if bytes.len() < FILE_HEADER_SIZE as usize {
            return Err(PerfDataError::TooSmall(bytes.len() as u64));
        }
        if header_size < FILE_HEADER_SIZE {
            return Err(PerfDataError::Header(format!(
                "header size {header_size} is smaller than {FILE_HEADER_SIZE}"
            )));
        }
        let attr_size = le_u64(&bytes, 16);
        let (attrs_off, attrs_size) = section(&bytes, 24);
        let (data_offset, data_size) = section(&bytes, 40);
        let file_len = bytes.len() as u64;
        // A recorder writes the feature sections when it finishes; a header without any
        // whose data stops short of the file (or was never sized) is a recording that was
        // killed: its records are read to the last complete one.
        let no_features = (0..4).all(|i| le_u64(&bytes, 72 + 8 * i) == 0);
        let unfinished = (data_size == 0 && file_len > data_offset)
            || (no_features && data_offset.saturating_add(data_size) < file_len);
        if data_size == 0 && !unfinished {
            return Err(PerfDataError::DataSizeZero);
        }
        if says_zstd(&bytes, data_offset.saturating_add(data_size)) {
            return Err(PerfDataError::Compressed { offset: None });
        }
        let events = read_attrs(&bytes, attr_size, attrs_off, attrs_size)?;
        if events.is_empty() {
            // Every sample would belong to no event: the session and its handlers keep
            // counts per event.
            return Err(PerfDataError::Header(format!(
                "attrs section ({attrs_size} bytes) holds no event: one entry is {attr_size} bytes"
            )));
        }
        if data_offset > file_len {
            return Err(PerfDataError::Header(format!(
                "data section starts at {data_offset:#x}, beyond the end of the file ({file_len:#x})"
            )));
        }
        let wanted_end = if unfinished {
            file_len
        } else {
            data_offset.saturating_add(data_size)
        };
        let data_end = wanted_end.min(file_len);
        let features = read_features(&bytes, wanted_end);
        let mut events = events;
        for (e, name) in events.iter_mut().zip(&features.event_names) {
            e.name.clone_from(name);
        }
        let mut file = PerfDataFile {
            ids: id_index(&events),
            events,
            features,
            missing_data_bytes: wanted_end - data_end,
            bytes,
            data_offset,
            data_end,
            pipe: false,
            unfinished,
        };
        file.name_events_by_updates();
        Ok(file)
    }

    /// A file without the feature section that names its events (its recorder killed, or
    /// the file cut short) names them by the EVENT_UPDATE records memperf writes first in
    /// its data section.
    fn name_events_by_updates(&mut self) {
        if self.features.event_names.iter().any(|n| !n.is_empty()) {
            return;
        }
        let mut names = Vec::new();
        for rec in self.records() {
            let Ok(rec) = rec else { break };
            if rec.ty != super::PERF_RECORD_EVENT_UPDATE {
                break;
            }
            names.extend(super::pipe::event_update_name(rec.body));
        }
        for (id, name) in names {
            if let Some(&ev) = self.ids.get(&id) {
                self.events[ev].name = name;
            }
        }
    }

    /// A pipe-mode stream: its attrs, names and features are read from its records first.
    fn parse_pipe(bytes: Bytes) -> Result<PerfDataFile, PerfDataError> {
        let (events, features) = super::pipe::read_header_records(&bytes)?;
        Ok(PerfDataFile {
            ids: id_index(&events),
            events,
            features,
            missing_data_bytes: 0,
            data_offset: PIPE_HEADER_SIZE,
            data_end: bytes.len() as u64,
            bytes,
            pipe: true,
            unfinished: false,
        })
    }

    /// Whether the recorder was killed before it finished the file (no feature sections,
    /// data past the size its header gives): the records are read to the last complete one.
    pub fn is_unfinished(&self) -> bool {
        self.unfinished
    }

    /// What a file shorter than its header says has lost (a copy cut short, a full disk):
    /// the end of its data section and its feature sections, the events' names among
    /// them. `None` when it holds what its header says.
    pub fn cut_note(&self, name: &str) -> Option<String> {
        if self.missing_data_bytes > 0 {
            return Some(format!(
                "`{name}` is cut short: the last {} bytes of its data section and its feature \
                 sections (the events' names among them) are missing; what is left is read",
                self.missing_data_bytes
            ));
        }
        let (past, all) = self.features_past_end();
        (past > 0).then(|| {
            format!(
                "`{name}` is cut short: {past} of its {all} feature sections end beyond the end \
                 of the file; its records are read"
            )
        })
    }

    /// How many of the feature sections the header lists lie, wholly or in part, beyond
    /// the end of the file (a copy cut short after the data section), and how many it lists.
    fn features_past_end(&self) -> (usize, usize) {
        if self.pipe || self.unfinished {
            return (0, 0);
        }
        let all = (0..4)
            .map(|w| le_u64(&self.bytes, 72 + 8 * w).count_ones() as usize)
            .sum();
        let len = self.bytes.len() as u64;
        let past = (0..all)
            .filter(|&i| {
                let entry = self.data_end.saturating_add(16 * i as u64);
                match slice(&self.bytes, entry, 16).map(|e| section(e, 0)) {
                    Some((off, size)) => off.saturating_add(size) > len,
                    None => true,
                }
            })
            .count();
        (past, all)
    }

    /// Whether the file is a pipe-mode stream (`perf record -o -`).
    pub fn is_pipe(&self) -> bool {
        self.pipe
    }

    /// File offset of the start of the data section.
    pub fn data_start(&self) -> u64 {
        self.data_offset
    }

    /// File offset of the end of the data section (for progress).
    pub fn data_end(&self) -> u64 {
        self.data_end
    }

    /// Lets go of the memory that holds the file's bytes in `range` (file offsets), which no
    /// record still to be handed on lies in: a mapped file's pages there are dropped from
    /// this process (read again from the page cache if they are looked at). Only the data
    /// section's pages are; a file read into memory keeps its bytes.
    pub fn release(&self, range: std::ops::Range<u64>) {
        let Bytes::Mapped(map) = &self.bytes else {
            return;
        };
        let start = range.start.max(self.data_offset);
        let end = range.end.min(self.data_end);
        if end > start {
            // A failed madvise leaves the pages resident: memory, never correctness.
            let _ = crate::sys::release_mapped(map, start as usize..end as usize);
        }
    }

    /// The records of the data section, in file order.
    pub fn records(&self) -> RecordIter<'_> {
        if self.pipe {
            return RecordIter::pipe(&self.bytes);
        }
        RecordIter {
            bytes: &self.bytes,
            pos: self.data_offset,
            end: self.data_end,
            missing: self.missing_data_bytes,
            done: false,
            pipe: false,
        }
    }

    /// The index in `events` of the event a record belongs to (by its sample id; the only
    /// event when there is one). `None` for perf's user records and unknown ids.
    pub fn event_for(&self, ty: u32, body: &[u8]) -> Option<usize> {
        if ty >= crate::records::PERF_RECORD_USER_TYPE_START || self.events.is_empty() {
            return None;
        }
        if self.events.len() == 1 {
            return Some(0);
        }
        let id = record_identifier(ty, body, &self.parse_info(0))?;
        self.ids.get(&id).copied()
    }

    /// Sample id → event index, from the attrs' id lists.
    pub fn id_map(&self) -> &FxHashMap<u64, usize> {
        &self.ids
    }

    /// How records of event `idx` are laid out (the first event's if `idx` is out of range).
    pub fn parse_info(&self, idx: usize) -> ParseInfo {
        self.events
            .get(idx)
            .or(self.events.first())
            .map(|e| ParseInfo::from_attr(&e.attr))
            .unwrap_or_default()
    }
}

/// Sample id → index in `events`.
fn id_index(events: &[EventDesc]) -> FxHashMap<u64, usize> {
    let mut ids = FxHashMap::default();
    for (i, e) in events.iter().enumerate() {
        ids.extend(e.ids.iter().map(|&id| (id, i)));
    }
    ids
}

fn read_attrs(
    bytes: &[u8],
    attr_size: u64,
    offset: u64,
    size: u64,
) -> Result<Vec<EventDesc>, PerfDataError> {
    let entry = usize::try_from(attr_size).unwrap_or(usize::MAX);
    if !(ATTR_SIZE_VER0 + 16..=4096).contains(&entry) {
        return Err(PerfDataError::Header(format!(
            "attr entry size {attr_size} is not a perf_event_attr plus a section"
        )));
    }
    let Some(section_bytes) = slice(bytes, offset, size) else {
        return Err(PerfDataError::Header(format!(
            "attrs section ({offset:#x}, {size} bytes) lies beyond the end of the file"
        )));
    };
    let mut events = Vec::new();
    for (i, chunk) in section_bytes.chunks_exact(entry).enumerate() {
        let at = offset + (i * entry) as u64;
        let attr_bytes = &chunk[..entry - 16];
        let attr = attr_from_bytes(attr_bytes).map_err(|e| PerfDataError::Attr {
            offset: at,
            msg: e.to_string(),
        })?;
        let (ids_off, ids_size) = section(chunk, entry - 16);
        let ids = slice(bytes, ids_off, ids_size)
            .ok_or_else(|| PerfDataError::Attr {
                offset: at,
                msg: format!("ids section ({ids_off:#x}, {ids_size} bytes) is out of the file"),
            })?
            .chunks_exact(8)
            .map(|c| le_u64(c, 0))
            .collect();
        events.push(EventDesc {
            name: default_event_name(attr.type_, attr.config),
            attr,
            ids,
        });
    }
    Ok(events)
}

/// Decodes the feature sections listed after the data; a missing or broken table or section
/// is recorded in `undecodable` rather than failing the whole file.
fn read_features(bytes: &[u8], table_offset: u64) -> ReadFeatures {
    let mut f = ReadFeatures::default();
    let mut bits = Vec::new();
    for word in 0..4 {
        let w = le_u64(bytes, 72 + 8 * word);
        bits.extend(
            (0..64)
                .filter(|b| w & (1 << b) != 0)
                .map(|b| (word * 64 + b) as u32),
        );
    }
    for (i, &bit) in bits.iter().enumerate() {
        let entry = table_offset.saturating_add(16 * i as u64);
        let decoded = slice(bytes, entry, 16)
            .map(|e| section(e, 0))
            .and_then(|(off, size)| slice(bytes, off, size))
            .and_then(|body| f.decode(bit, body));
        if decoded.is_none() {
            f.undecodable.push(bit);
        }
    }
    f
}

/// A name for an event whose file has no EVENT_DESC feature.
pub(super) fn default_event_name(ty: u32, config: u64) -> String {
    use perf_event_open_sys::bindings as b;
    let known = match (ty, config) {
        (b::PERF_TYPE_SOFTWARE, 0) => "cpu-clock",
        (b::PERF_TYPE_SOFTWARE, 1) => "task-clock",
        (b::PERF_TYPE_SOFTWARE, 2) => "page-faults",
        (b::PERF_TYPE_SOFTWARE, 5) => "minor-faults",
        (b::PERF_TYPE_SOFTWARE, 6) => "major-faults",
        (b::PERF_TYPE_HARDWARE, 0) => "cycles",
        (b::PERF_TYPE_HARDWARE, 1) => "instructions",
        (b::PERF_TYPE_HARDWARE, 3) => "cache-misses",
        _ => return format!("type{ty}:{config:#x}"),
    };
    known.to_string()
}
