//! perf.data (PERFILE2) writer and reader, per the kernel's
//! `tools/perf/Documentation/perf.data-file-format.txt`.
//!
//! Layout written: 104-byte header, the id arrays, the attrs section (`attr` + ids section per
//! event), the data section (raw records), then the feature section table and the features.

use perf_event_open_sys::bindings::{__BindgenBitfieldUnit, perf_event_attr};

mod features;
mod marks;
mod pipe;
mod reader;
#[cfg(test)]
mod tests;
pub(crate) mod tracing_data;
mod writer;

pub use features::{
    BuildIdEntry, ClockData, EventUnwinds, Features, MemperfStats, ReadFeatures, RecoveredMark,
};
pub use marks::MarkLog;
pub use reader::{PerfDataFile, RawFileRecord, RecordIter, StreamError};
pub use tracing_data::{TracepointFormat, tracing_data};
pub use writer::{PerfDataWriter, create_output, unsafe_to_replace};

/// `"PERFILE2"` as perf writes it on a little-endian host.
pub const PERF_MAGIC: [u8; 8] = *b"PERFILE2";
/// Size of `struct perf_file_header`.
pub const FILE_HEADER_SIZE: u64 = 104;
/// Size of `struct perf_pipe_file_header` (magic and size): what `perf record -o -` writes
/// before its records.
pub const PIPE_HEADER_SIZE: u64 = 16;
/// Size of `perf_event_attr` version 0, the smallest a file may hold.
pub const ATTR_SIZE_VER0: usize = 64;
/// The attr size that perf 6.1 reads (`PERF_ATTR_SIZE_VER7`); larger attrs are refused by it.
pub const ATTR_SIZE_VER7: usize = 128;
/// Size of the `perf_event_attr` this crate knows (`PERF_ATTR_SIZE_VER9`).
pub const ATTR_SIZE_MAX: usize = 144;

pub use crate::abi::{
    PERF_RECORD_AUXTRACE, PERF_RECORD_COMPRESSED, PERF_RECORD_COMPRESSED2,
    PERF_RECORD_EVENT_UPDATE, PERF_RECORD_HEADER_ATTR, PERF_RECORD_HEADER_BUILD_ID,
    PERF_RECORD_HEADER_EVENT_TYPE, PERF_RECORD_HEADER_FEATURE, PERF_RECORD_HEADER_TRACING_DATA,
};

/// `PERF_EVENT_UPDATE__NAME` (tools/lib/perf/include/perf/event.h): UNIT is 0, SCALE 1,
/// NAME 2, CPUS 3.
pub(crate) const PERF_EVENT_UPDATE__NAME: u64 = 2;

/// One event of a recording: its attr, its name and the sample ids its fds were given.
#[derive(Clone)]
pub struct EventDesc {
    pub attr: perf_event_attr,
    pub name: String,
    pub ids: Vec<u64>,
}

impl std::fmt::Debug for EventDesc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventDesc")
            .field("type", &self.attr.type_)
            .field("config", &self.attr.config)
            .field("sample_type", &self.attr.sample_type)
            .field("name", &self.name)
            .field("ids", &self.ids)
            .finish()
    }
}

/// Errors reading a perf.data file. Messages name the file offset where it applies.
#[derive(Debug, thiserror::Error)]
pub enum PerfDataError {
    /// The cause is part of the message, not a `source`: anyhow would print it twice.
    #[error("failed to read `{path}`: {cause}")]
    Io { path: String, cause: std::io::Error },
    #[error("file is empty: not a perf.data file")]
    Empty,
    #[error("file is too small ({0} bytes) to hold a perf.data header")]
    TooSmall(u64),
    #[error("not a perf.data file (magic \"{0}\")")]
    BadMagic(String),
    #[error("`{path}` is a {kind}, not a perf.data file")]
    NotAFile { path: String, kind: &'static str },
    #[error("big-endian files are not supported")]
    BigEndian,
    #[error("version 1 perf.data files (magic PERFFILE) are not supported")]
    Version1,
    #[error("header: {0}")]
    Header(String),
    #[error("data size is 0: the recording was not finished")]
    DataSizeZero,
    #[error("attr at offset {offset:#x}: {msg}")]
    Attr { offset: u64, msg: String },
    #[error("record at offset {offset:#x} has size {size} (< 8): file is corrupt")]
    BadRecordSize { offset: u64, size: u16 },
    #[error(
        "data section is truncated at offset {offset:#x}: {skipped} bytes of it could not be read"
    )]
    Truncated { offset: u64, skipped: u64 },
    /// A pipe-mode stream has no declared length: it ends inside a record.
    #[error(
        "pipe-mode stream is truncated at offset {offset:#x}: the record there needs {wanted} bytes, only {present} are left (skipped)"
    )]
    StreamTruncated {
        offset: u64,
        wanted: u64,
        present: u64,
    },
    #[error("pipe-mode stream describes no event: {0}")]
    NoEvents(String),
    #[error(
        "records are zstd-compressed (`perf record -z`{}), which memperf cannot read: record without -z",
        at_offset(*.offset)
    )]
    Compressed { offset: Option<u64> },
}

fn at_offset(offset: Option<u64>) -> String {
    offset.map_or_else(String::new, |o| format!(", first at offset {o:#x}"))
}

fn le_u64(b: &[u8], off: usize) -> u64 {
    let mut w = [0u8; 8];
    if let Some(s) = b.get(off..off + 8) {
        w.copy_from_slice(s);
    }
    u64::from_ne_bytes(w)
}

fn le_u32(b: &[u8], off: usize) -> u32 {
    let mut w = [0u8; 4];
    if let Some(s) = b.get(off..off + 4) {
        w.copy_from_slice(s);
    }
    u32::from_ne_bytes(w)
}

/// Serializes `attr` field by field into its full in-memory layout ([`ATTR_SIZE_MAX`] bytes),
/// keeping its `size` field as it is.
pub fn attr_to_bytes(attr: &perf_event_attr) -> Vec<u8> {
    let mut v = Vec::with_capacity(ATTR_SIZE_MAX);
    let u32_ = |v: &mut Vec<u8>, x: u32| v.extend_from_slice(&x.to_ne_bytes());
    let u64_ = |v: &mut Vec<u8>, x: u64| v.extend_from_slice(&x.to_ne_bytes());
    u32_(&mut v, attr.type_);
    u32_(&mut v, attr.size);
    u64_(&mut v, attr.config);
    u64_(&mut v, attr.sample_period);
    u64_(&mut v, attr.sample_type);
    u64_(&mut v, attr.read_format);
    u64_(&mut v, attr._bitfield_1.get(0, 64));
    u32_(&mut v, attr.wakeup_events);
    u32_(&mut v, attr.bp_type);
    u64_(&mut v, attr.config1);
    u64_(&mut v, attr.config2);
    u64_(&mut v, attr.branch_sample_type);
    u64_(&mut v, attr.sample_regs_user);
    u32_(&mut v, attr.sample_stack_user);
    u32_(&mut v, attr.clockid as u32);
    u64_(&mut v, attr.sample_regs_intr);
    u32_(&mut v, attr.aux_watermark);
    v.extend_from_slice(&attr.sample_max_stack.to_ne_bytes());
    v.extend_from_slice(&attr.__reserved_2.to_ne_bytes());
    u32_(&mut v, attr.aux_sample_size);
    u32_(&mut v, attr.aux_action);
    u64_(&mut v, attr.sig_data);
    u64_(&mut v, attr.config3);
    u64_(&mut v, attr.config4);
    v
}

/// Reads an attr of any size from [`ATTR_SIZE_VER0`] on; fields beyond `bytes` are zero and
/// bytes beyond the fields this crate knows are ignored.
pub fn attr_from_bytes(bytes: &[u8]) -> Result<perf_event_attr, PerfDataError> {
    if bytes.len() < ATTR_SIZE_VER0 {
        return Err(PerfDataError::Attr {
            offset: 0,
            msg: format!(
                "attr of {} bytes is smaller than version 0 (64)",
                bytes.len()
            ),
        });
    }
    let mut full = [0u8; ATTR_SIZE_MAX];
    let n = bytes.len().min(ATTR_SIZE_MAX);
    full[..n].copy_from_slice(&bytes[..n]);
    let b = &full[..];
    let mut attr = perf_event_attr {
        type_: le_u32(b, 0),
        size: le_u32(b, 4),
        config: le_u64(b, 8),
        sample_type: le_u64(b, 24),
        read_format: le_u64(b, 32),
        _bitfield_1: __BindgenBitfieldUnit::new(le_u64(b, 40).to_ne_bytes()),
        bp_type: le_u32(b, 52),
        branch_sample_type: le_u64(b, 72),
        sample_regs_user: le_u64(b, 80),
        sample_stack_user: le_u32(b, 88),
        clockid: le_u32(b, 92) as i32,
        sample_regs_intr: le_u64(b, 96),
        aux_watermark: le_u32(b, 104),
        sample_max_stack: u16::from_ne_bytes([b[108], b[109]]),
        __reserved_2: u16::from_ne_bytes([b[110], b[111]]),
        aux_sample_size: le_u32(b, 112),
        sig_data: le_u64(b, 120),
        config3: le_u64(b, 128),
        config4: le_u64(b, 136),
        ..perf_event_attr::default()
    };
    attr.sample_period = le_u64(b, 16);
    attr.wakeup_events = le_u32(b, 48);
    attr.config1 = le_u64(b, 56);
    attr.config2 = le_u64(b, 64);
    attr.aux_action = le_u32(b, 116);
    Ok(attr)
}

/// The attr bytes as stored in a file with per-attr size `size`: cut (or zero-extended) to
/// `size`, with the `size` field set to it.
fn attr_file_bytes(attr: &perf_event_attr, size: usize) -> Vec<u8> {
    let mut v = attr_to_bytes(attr);
    v.resize(size, 0);
    v[4..8].copy_from_slice(&(size as u32).to_ne_bytes());
    v
}

/// The smallest attr size (at least [`ATTR_SIZE_VER7`], a multiple of 8) that holds every
/// non-zero byte of `attr`.
fn attr_min_size(attr: &perf_event_attr) -> usize {
    let v = attr_to_bytes(attr);
    let used = v.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    used.next_multiple_of(8).max(ATTR_SIZE_VER7)
}
