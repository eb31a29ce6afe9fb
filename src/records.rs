//! Typed perf records parsed in place from bytes.
//!
//! The same parser serves the mmap ring buffer and perf.data files: it takes the record type,
//! the header's `misc` and the body (the bytes after the 8-byte `perf_event_header`) and
//! returns a [`Record`] that borrows from the body. Every read is bounds-checked; a truncated
//! record yields a [`ParseError`] naming the field that did not fit.
//!
//! Field order follows the kernel ABI (`include/uapi/linux/perf_event.h`, `perf_output_sample`).

use perf_event_open_sys::bindings::{self as b, perf_event_attr};

mod encode;
#[cfg(test)]
mod tests;

pub use encode::{
    EncodeError, Mmap2Fields, TaskFields, encode_comm, encode_exit, encode_finished_round,
    encode_fork, encode_lost, encode_mmap2, encode_sample, encode_sample_id,
};

use crate::abi::{
    self, PERF_SAMPLE_ADDR as SAMPLE_ADDR, PERF_SAMPLE_CPU as SAMPLE_CPU,
    PERF_SAMPLE_ID as SAMPLE_ID, PERF_SAMPLE_IDENTIFIER as SAMPLE_IDENTIFIER,
    PERF_SAMPLE_IP as SAMPLE_IP, PERF_SAMPLE_STREAM_ID as SAMPLE_STREAM_ID,
    PERF_SAMPLE_TID as SAMPLE_TID, PERF_SAMPLE_TIME as SAMPLE_TIME,
};
pub use crate::abi::{PERF_RECORD_FINISHED_ROUND, PERF_RECORD_USER_TYPE_START};

/// What a record's layout depends on, computed once per event attr.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ParseInfo {
    pub sample_type: u64,
    pub read_format: u64,
    /// `sample_regs_user` mask.
    pub regs_user: u64,
    /// `sample_regs_intr` mask.
    pub regs_intr: u64,
    pub sample_id_all: bool,
    /// `branch_sample_type` has `PERF_SAMPLE_BRANCH_HW_INDEX`: a `u64 hw_idx` follows `nr`.
    pub branch_hw_index: bool,
}

impl ParseInfo {
    pub fn from_attr(attr: &perf_event_attr) -> ParseInfo {
        ParseInfo {
            sample_type: attr.sample_type,
            read_format: attr.read_format,
            regs_user: attr.sample_regs_user,
            regs_intr: attr.sample_regs_intr,
            sample_id_all: attr.sample_id_all() != 0,
            branch_hw_index: attr.branch_sample_type & b::PERF_SAMPLE_BRANCH_HW_INDEX as u64 != 0,
        }
    }

    fn has(&self, bit: u64) -> bool {
        self.sample_type & bit != 0
    }

    /// Length of the `sample_id` trailer of non-sample kernel records (0 without `sample_id_all`).
    pub fn id_trailer_len(&self) -> usize {
        if !self.sample_id_all {
            return 0;
        }
        let bits = [
            SAMPLE_TID,
            SAMPLE_TIME,
            SAMPLE_ID,
            SAMPLE_STREAM_ID,
            SAMPLE_CPU,
            SAMPLE_IDENTIFIER,
        ];
        8 * bits.iter().filter(|&&bit| self.has(bit)).count()
    }

    /// Size of the READ area of a sample, given the group member count for `PERF_FORMAT_GROUP`.
    fn read_size(&self, group_nr: u64) -> Option<usize> {
        let f = self.read_format;
        let flag = |bit: u32| usize::from(f & u64::from(bit) != 0);
        let times =
            8 * (flag(b::PERF_FORMAT_TOTAL_TIME_ENABLED) + flag(b::PERF_FORMAT_TOTAL_TIME_RUNNING));
        let per_value = 8 * (1 + flag(b::PERF_FORMAT_ID) + flag(b::PERF_FORMAT_LOST));
        if f & u64::from(b::PERF_FORMAT_GROUP) != 0 {
            let nr = usize::try_from(group_nr).ok()?;
            nr.checked_mul(per_value)?.checked_add(8 + times)
        } else {
            Some(per_value + times)
        }
    }
}

/// A record that did not fit its body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error(
        "record type {ty} is truncated: field `{field}` needs {need} bytes at offset {offset} but the body has {len}"
    )]
    Truncated {
        ty: u32,
        field: &'static str,
        offset: usize,
        need: usize,
        len: usize,
    },
    #[error("record type {ty}: field `{field}` has an impossible size {value}")]
    BadSize {
        ty: u32,
        field: &'static str,
        value: u64,
    },
}

/// Native-endian `u64`s in a byte slice, without any alignment assumption.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct U64Slice<'a>(&'a [u8]);

impl<'a> U64Slice<'a> {
    /// Views `bytes` as u64s; a trailing partial word is ignored.
    pub fn new(bytes: &'a [u8]) -> U64Slice<'a> {
        U64Slice(&bytes[..bytes.len() / 8 * 8])
    }
    pub fn len(&self) -> usize {
        self.0.len() / 8
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn get(&self, i: usize) -> Option<u64> {
        let start = i.checked_mul(8)?;
        let bytes = self.0.get(start..start.checked_add(8)?)?;
        Some(u64::from_ne_bytes(bytes.try_into().ok()?))
    }
    pub fn iter(&self) -> U64Iter<'a> {
        U64Iter(self.0.chunks_exact(8))
    }
    pub fn as_bytes(&self) -> &'a [u8] {
        self.0
    }
}

/// The words of a [`U64Slice`].
#[derive(Clone, Debug)]
pub struct U64Iter<'a>(std::slice::ChunksExact<'a, u8>);

impl Iterator for U64Iter<'_> {
    type Item = u64;
    #[inline]
    fn next(&mut self) -> Option<u64> {
        Some(u64::from_ne_bytes(*self.0.next()?.first_chunk::<8>()?))
    }
    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

/// Registers sampled with `PERF_SAMPLE_REGS_USER` or `PERF_SAMPLE_REGS_INTR`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Regs<'a> {
    /// `PERF_SAMPLE_REGS_ABI_*`; 0 (`ABI_NONE`) means no registers were copied.
    pub abi: u64,
    /// The attr's register mask; value `i` belongs to the `i`-th set bit.
    pub mask: u64,
    values: U64Slice<'a>,
}

impl<'a> Regs<'a> {
    pub fn new(abi: u64, mask: u64, values: U64Slice<'a>) -> Regs<'a> {
        Regs { abi, mask, values }
    }
    /// The value of perf register number `reg` (e.g. `PERF_REG_X86_SP` = 7), if it was sampled.
    pub fn get(&self, reg: u32) -> Option<u64> {
        if self.abi == u64::from(b::PERF_SAMPLE_REGS_ABI_NONE) || reg >= 64 {
            return None;
        }
        if self.mask & (1u64 << reg) == 0 {
            return None;
        }
        let below = self.mask & ((1u64 << reg) - 1);
        self.values.get(below.count_ones() as usize)
    }
    pub fn values(&self) -> U64Slice<'a> {
        self.values
    }
}

/// The user stack copy of `PERF_SAMPLE_STACK_USER`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct StackUser<'a> {
    /// Bytes reserved in the record (the attr's `sample_stack_user`, or 0).
    pub size: u64,
    /// The valid part of the copy, already cut to `dyn_size`.
    pub data: &'a [u8],
    pub dyn_size: u64,
}

/// A `PERF_RECORD_SAMPLE`; fields are `Some` exactly when selected by the attr's `sample_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Sample<'a> {
    pub identifier: Option<u64>,
    pub ip: Option<u64>,
    pub pid: Option<u32>,
    pub tid: Option<u32>,
    pub time: Option<u64>,
    pub addr: Option<u64>,
    pub id: Option<u64>,
    pub stream_id: Option<u64>,
    pub cpu: Option<u32>,
    pub period: Option<u64>,
    /// The whole READ area, laid out per the attr's `read_format`.
    pub read: Option<&'a [u8]>,
    pub callchain: Option<U64Slice<'a>>,
    /// RAW data, including the kernel's padding (its size makes `4 + size` a multiple of 8).
    pub raw: Option<&'a [u8]>,
    /// The whole BRANCH_STACK area: `u64 nr`, `u64 hw_idx` if `branch_hw_index`, `nr` × 24 bytes.
    pub branch_stack: Option<&'a [u8]>,
    pub regs_user: Option<Regs<'a>>,
    pub stack_user: Option<StackUser<'a>>,
    /// WEIGHT, or the WEIGHT_STRUCT union read as one u64.
    pub weight: Option<u64>,
    pub data_src: Option<u64>,
    pub transaction: Option<u64>,
    pub regs_intr: Option<Regs<'a>>,
    pub phys_addr: Option<u64>,
    pub cgroup: Option<u64>,
    pub data_page_size: Option<u64>,
    pub code_page_size: Option<u64>,
}

/// The `sample_id` trailer of non-sample records (with `sample_id_all`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SampleId {
    pub pid: Option<u32>,
    pub tid: Option<u32>,
    pub time: Option<u64>,
    pub id: Option<u64>,
    pub stream_id: Option<u64>,
    pub cpu: Option<u32>,
    pub identifier: Option<u64>,
}

/// One parsed record; it borrows from the record body.
// Records are short-lived stack values; boxing the sample would allocate once per sample.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record<'a> {
    Sample(Sample<'a>),
    Mmap {
        pid: u32,
        tid: u32,
        addr: u64,
        len: u64,
        pgoff: u64,
        filename: &'a [u8],
        id: SampleId,
    },
    Mmap2 {
        pid: u32,
        tid: u32,
        addr: u64,
        len: u64,
        pgoff: u64,
        maj: u32,
        min: u32,
        ino: u64,
        ino_generation: u64,
        /// Set when the record has `PERF_RECORD_MISC_MMAP_BUILD_ID` (then maj..ino_generation are 0).
        build_id: Option<&'a [u8]>,
        prot: u32,
        flags: u32,
        filename: &'a [u8],
        id: SampleId,
    },
    Comm {
        pid: u32,
        tid: u32,
        name: &'a [u8],
        exec: bool,
        id: SampleId,
    },
    Fork {
        pid: u32,
        ppid: u32,
        tid: u32,
        ptid: u32,
        time: u64,
        id: SampleId,
    },
    Exit {
        pid: u32,
        ppid: u32,
        tid: u32,
        ptid: u32,
        time: u64,
        id: SampleId,
    },
    Lost {
        id: u64,
        lost: u64,
        sid: SampleId,
    },
    Throttle {
        time: u64,
        id: u64,
        stream_id: u64,
        unthrottle: bool,
        sid: SampleId,
    },
    LostSamples {
        lost: u64,
        sid: SampleId,
    },
    /// `PERF_RECORD_CGROUP` (5.7+, `attr.cgroup`): a cgroup made while recording, its id
    /// (as `PERF_SAMPLE_CGROUP` carries it) and its path from the hierarchy's root.
    Cgroup {
        id: u64,
        path: &'a [u8],
        sid: SampleId,
    },
    FinishedRound,
    Other {
        ty: u32,
    },
}

/// A bounds-checked forward reader over a record body.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    ty: u32,
}

impl<'a> Cursor<'a> {
    fn new(buf: &'a [u8], ty: u32) -> Cursor<'a> {
        Cursor { buf, pos: 0, ty }
    }

    fn bytes(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], ParseError> {
        let end = self.pos.checked_add(n);
        match end.and_then(|end| self.buf.get(self.pos..end)) {
            Some(s) => {
                self.pos += n;
                Ok(s)
            }
            None => Err(ParseError::Truncated {
                ty: self.ty,
                field,
                offset: self.pos,
                need: n,
                len: self.buf.len(),
            }),
        }
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, ParseError> {
        let s = self.bytes(8, field)?;
        Ok(u64::from_ne_bytes([
            s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7],
        ]))
    }

    fn u32(&mut self, field: &'static str) -> Result<u32, ParseError> {
        let s = self.bytes(4, field)?;
        Ok(u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
    }

    /// Two u32s packed in one u64 slot (TID: pid, tid; CPU: cpu, reserved).
    fn u32_pair(&mut self, field: &'static str) -> Result<(u32, u32), ParseError> {
        let s = self.bytes(8, field)?;
        Ok((
            u32::from_ne_bytes([s[0], s[1], s[2], s[3]]),
            u32::from_ne_bytes([s[4], s[5], s[6], s[7]]),
        ))
    }

    fn opt_u64(
        &mut self,
        info: &ParseInfo,
        bit: u64,
        field: &'static str,
    ) -> Result<Option<u64>, ParseError> {
        if info.has(bit) {
            self.u64(field).map(Some)
        } else {
            Ok(None)
        }
    }

    fn len_of(&self, field: &'static str, value: u64) -> Result<usize, ParseError> {
        usize::try_from(value).map_err(|_| ParseError::BadSize {
            ty: self.ty,
            field,
            value,
        })
    }

    fn count_bytes(
        &mut self,
        count: u64,
        elem: usize,
        field: &'static str,
    ) -> Result<&'a [u8], ParseError> {
        let n = self
            .len_of(field, count)?
            .checked_mul(elem)
            .ok_or(ParseError::BadSize {
                ty: self.ty,
                field,
                value: count,
            })?;
        self.bytes(n, field)
    }

    fn rest(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or(&[])
    }
}

/// Parses one record. `body` is the record without its 8-byte header.
pub fn parse_record<'a>(
    ty: u32,
    misc: u16,
    body: &'a [u8],
    info: &ParseInfo,
) -> Result<Record<'a>, ParseError> {
    match ty {
        b::PERF_RECORD_SAMPLE => parse_sample(body, info).map(Record::Sample),
        b::PERF_RECORD_MMAP
        | b::PERF_RECORD_MMAP2
        | b::PERF_RECORD_COMM
        | b::PERF_RECORD_FORK
        | b::PERF_RECORD_EXIT
        | b::PERF_RECORD_LOST
        | b::PERF_RECORD_THROTTLE
        | b::PERF_RECORD_UNTHROTTLE
        | b::PERF_RECORD_LOST_SAMPLES
        | b::PERF_RECORD_CGROUP => parse_with_trailer(ty, misc, body, info),
        PERF_RECORD_FINISHED_ROUND => Ok(Record::FinishedRound),
        _ => Ok(Record::Other { ty }),
    }
}

/// Splits a non-sample kernel record into its fixed part and its `sample_id` trailer.
fn split_trailer<'a>(
    ty: u32,
    body: &'a [u8],
    info: &ParseInfo,
) -> Result<(&'a [u8], SampleId), ParseError> {
    let tlen = info.id_trailer_len();
    let Some(split) = body.len().checked_sub(tlen) else {
        return Err(ParseError::Truncated {
            ty,
            field: "sample_id",
            offset: 0,
            need: tlen,
            len: body.len(),
        });
    };
    let (head, trailer) = body.split_at(split);
    let sid = if info.sample_id_all {
        parse_sample_id(&mut Cursor::new(trailer, ty), info)?
    } else {
        SampleId::default()
    };
    Ok((head, sid))
}

fn parse_sample_id(c: &mut Cursor<'_>, info: &ParseInfo) -> Result<SampleId, ParseError> {
    let mut sid = SampleId::default();
    if info.has(SAMPLE_TID) {
        let (pid, tid) = c.u32_pair("sample_id.tid")?;
        sid.pid = Some(pid);
        sid.tid = Some(tid);
    }
    sid.time = c.opt_u64(info, SAMPLE_TIME, "sample_id.time")?;
    sid.id = c.opt_u64(info, SAMPLE_ID, "sample_id.id")?;
    sid.stream_id = c.opt_u64(info, SAMPLE_STREAM_ID, "sample_id.stream_id")?;
    if info.has(SAMPLE_CPU) {
        sid.cpu = Some(c.u32_pair("sample_id.cpu")?.0);
    }
    sid.identifier = c.opt_u64(info, SAMPLE_IDENTIFIER, "sample_id.identifier")?;
    Ok(sid)
}

/// The bytes of a NUL-terminated string field, without the terminator and padding.
fn c_str(bytes: &[u8]) -> &[u8] {
    match bytes.iter().position(|&b| b == 0) {
        Some(end) => &bytes[..end],
        None => bytes,
    }
}

fn parse_with_trailer<'a>(
    ty: u32,
    misc: u16,
    body: &'a [u8],
    info: &ParseInfo,
) -> Result<Record<'a>, ParseError> {
    let (head, id) = split_trailer(ty, body, info)?;
    let mut c = Cursor::new(head, ty);
    let misc = u32::from(misc);
    let rec = match ty {
        b::PERF_RECORD_MMAP => Record::Mmap {
            pid: c.u32("pid")?,
            tid: c.u32("tid")?,
            addr: c.u64("addr")?,
            len: c.u64("len")?,
            pgoff: c.u64("pgoff")?,
            filename: c_str(c.rest()),
            id,
        },
        b::PERF_RECORD_MMAP2 => parse_mmap2(&mut c, misc, id)?,
        b::PERF_RECORD_COMM => Record::Comm {
            pid: c.u32("pid")?,
            tid: c.u32("tid")?,
            name: c_str(c.rest()),
            exec: misc & b::PERF_RECORD_MISC_COMM_EXEC != 0,
            id,
        },
        b::PERF_RECORD_FORK | b::PERF_RECORD_EXIT => {
            let (pid, ppid, tid, ptid) =
                (c.u32("pid")?, c.u32("ppid")?, c.u32("tid")?, c.u32("ptid")?);
            let time = c.u64("time")?;
            if ty == b::PERF_RECORD_FORK {
                Record::Fork {
                    pid,
                    ppid,
                    tid,
                    ptid,
                    time,
                    id,
                }
            } else {
                Record::Exit {
                    pid,
                    ppid,
                    tid,
                    ptid,
                    time,
                    id,
                }
            }
        }
        b::PERF_RECORD_LOST => Record::Lost {
            id: c.u64("id")?,
            lost: c.u64("lost")?,
            sid: id,
        },
        b::PERF_RECORD_THROTTLE | b::PERF_RECORD_UNTHROTTLE => Record::Throttle {
            time: c.u64("time")?,
            id: c.u64("id")?,
            stream_id: c.u64("stream_id")?,
            unthrottle: ty == b::PERF_RECORD_UNTHROTTLE,
            sid: id,
        },
        b::PERF_RECORD_LOST_SAMPLES => Record::LostSamples {
            lost: c.u64("lost")?,
            sid: id,
        },
        b::PERF_RECORD_CGROUP => Record::Cgroup {
            id: c.u64("id")?,
            path: c_str(c.rest()),
            sid: id,
        },
        _ => Record::Other { ty },
    };
    Ok(rec)
}

fn parse_mmap2<'a>(c: &mut Cursor<'a>, misc: u32, id: SampleId) -> Result<Record<'a>, ParseError> {
    let (pid, tid) = (c.u32("pid")?, c.u32("tid")?);
    let (addr, len, pgoff) = (c.u64("addr")?, c.u64("len")?, c.u64("pgoff")?);
    let ids = c.bytes(24, "maj/min/ino/ino_generation")?;
    let mut idc = Cursor::new(ids, b::PERF_RECORD_MMAP2);
    let (maj, min, ino, ino_generation, build_id) = if misc & b::PERF_RECORD_MISC_MMAP_BUILD_ID != 0
    {
        let size = usize::from(ids[0]).min(20);
        (0, 0, 0, 0, Some(&ids[4..4 + size]))
    } else {
        let (maj, min) = (idc.u32("maj")?, idc.u32("min")?);
        (maj, min, idc.u64("ino")?, idc.u64("ino_generation")?, None)
    };
    Ok(Record::Mmap2 {
        pid,
        tid,
        addr,
        len,
        pgoff,
        maj,
        min,
        ino,
        ino_generation,
        build_id,
        prot: c.u32("prot")?,
        flags: c.u32("flags")?,
        filename: c_str(c.rest()),
        id,
    })
}

fn parse_regs<'a>(
    c: &mut Cursor<'a>,
    mask: u64,
    field: &'static str,
) -> Result<Regs<'a>, ParseError> {
    let abi = c.u64(field)?;
    let values = if abi == u64::from(b::PERF_SAMPLE_REGS_ABI_NONE) {
        &[][..]
    } else {
        c.count_bytes(u64::from(mask.count_ones()), 8, field)?
    };
    Ok(Regs::new(abi, mask, U64Slice(values)))
}

/// Parses the body of a `PERF_RECORD_SAMPLE`.
pub fn parse_sample<'a>(body: &'a [u8], info: &ParseInfo) -> Result<Sample<'a>, ParseError> {
    let mut c = Cursor::new(body, b::PERF_RECORD_SAMPLE);
    let mut s = Sample {
        identifier: c.opt_u64(info, SAMPLE_IDENTIFIER, "identifier")?,
        ip: c.opt_u64(info, SAMPLE_IP, "ip")?,
        ..Sample::default()
    };
    if info.has(SAMPLE_TID) {
        let (pid, tid) = c.u32_pair("tid")?;
        (s.pid, s.tid) = (Some(pid), Some(tid));
    }
    s.time = c.opt_u64(info, SAMPLE_TIME, "time")?;
    s.addr = c.opt_u64(info, SAMPLE_ADDR, "addr")?;
    s.id = c.opt_u64(info, SAMPLE_ID, "id")?;
    s.stream_id = c.opt_u64(info, SAMPLE_STREAM_ID, "stream_id")?;
    if info.has(SAMPLE_CPU) {
        s.cpu = Some(c.u32_pair("cpu")?.0);
    }
    s.period = c.opt_u64(info, abi::PERF_SAMPLE_PERIOD, "period")?;
    if info.has(abi::PERF_SAMPLE_READ) {
        s.read = Some(parse_read(&mut c, info)?);
    }
    if info.has(abi::PERF_SAMPLE_CALLCHAIN) {
        let nr = c.u64("callchain.nr")?;
        s.callchain = Some(U64Slice(c.count_bytes(nr, 8, "callchain")?));
    }
    if info.has(abi::PERF_SAMPLE_RAW) {
        let size = c.u32("raw.size")?;
        s.raw = Some(c.bytes(size as usize, "raw")?);
    }
    if info.has(abi::PERF_SAMPLE_BRANCH_STACK) {
        let start = c.pos;
        let nr = c.u64("branch_stack.nr")?;
        if info.branch_hw_index {
            c.u64("branch_stack.hw_idx")?;
        }
        c.count_bytes(nr, 24, "branch_stack")?;
        s.branch_stack = body.get(start..c.pos);
    }
    if info.has(abi::PERF_SAMPLE_REGS_USER) {
        s.regs_user = Some(parse_regs(&mut c, info.regs_user, "regs_user")?);
    }
    if info.has(abi::PERF_SAMPLE_STACK_USER) {
        s.stack_user = Some(parse_stack_user(&mut c)?);
    }
    parse_sample_tail(&mut c, info, &mut s)?;
    Ok(s)
}

fn parse_read<'a>(c: &mut Cursor<'a>, info: &ParseInfo) -> Result<&'a [u8], ParseError> {
    let group_nr = if info.read_format & u64::from(b::PERF_FORMAT_GROUP) != 0 {
        let mut peek = Cursor::new(c.rest(), c.ty);
        peek.u64("read.nr")?
    } else {
        0
    };
    let size = info.read_size(group_nr).ok_or(ParseError::BadSize {
        ty: c.ty,
        field: "read.nr",
        value: group_nr,
    })?;
    c.bytes(size, "read")
}

fn parse_stack_user<'a>(c: &mut Cursor<'a>) -> Result<StackUser<'a>, ParseError> {
    let size = c.u64("stack_user.size")?;
    if size == 0 {
        return Ok(StackUser::default());
    }
    let data = c.count_bytes(size, 1, "stack_user.data")?;
    let dyn_size = c.u64("stack_user.dyn_size")?;
    let valid = usize::try_from(dyn_size)
        .unwrap_or(usize::MAX)
        .min(data.len());
    Ok(StackUser {
        size,
        data: &data[..valid],
        dyn_size,
    })
}

fn parse_sample_tail<'a>(
    c: &mut Cursor<'a>,
    info: &ParseInfo,
    s: &mut Sample<'a>,
) -> Result<(), ParseError> {
    let weight_bits = abi::PERF_SAMPLE_WEIGHT | abi::PERF_SAMPLE_WEIGHT_STRUCT;
    if info.sample_type & weight_bits != 0 {
        s.weight = Some(c.u64("weight")?);
    }
    s.data_src = c.opt_u64(info, abi::PERF_SAMPLE_DATA_SRC, "data_src")?;
    s.transaction = c.opt_u64(info, abi::PERF_SAMPLE_TRANSACTION, "transaction")?;
    if info.has(abi::PERF_SAMPLE_REGS_INTR) {
        s.regs_intr = Some(parse_regs(c, info.regs_intr, "regs_intr")?);
    }
    s.phys_addr = c.opt_u64(info, abi::PERF_SAMPLE_PHYS_ADDR, "phys_addr")?;
    s.cgroup = c.opt_u64(info, abi::PERF_SAMPLE_CGROUP, "cgroup")?;
    s.data_page_size = c.opt_u64(info, abi::PERF_SAMPLE_DATA_PAGE_SIZE, "data_page_size")?;
    s.code_page_size = c.opt_u64(info, abi::PERF_SAMPLE_CODE_PAGE_SIZE, "code_page_size")?;
    Ok(())
}

/// The sample id of a record, for matching it to its event: with `PERF_SAMPLE_IDENTIFIER`, the
/// first u64 of a SAMPLE or the last u64 of another kernel record's trailer; without it, the
/// `PERF_SAMPLE_ID` field at its position. `None` for perf's user records (type >= 64).
pub fn record_identifier(ty: u32, body: &[u8], info: &ParseInfo) -> Option<u64> {
    if ty >= PERF_RECORD_USER_TYPE_START {
        return None;
    }
    if ty == b::PERF_RECORD_SAMPLE {
        if info.has(SAMPLE_IDENTIFIER) {
            return U64Slice::new(body).get(0);
        }
        if !info.has(SAMPLE_ID) {
            return None;
        }
        let before = [SAMPLE_IP, SAMPLE_TID, SAMPLE_TIME, SAMPLE_ADDR];
        let idx = before.iter().filter(|&&bit| info.has(bit)).count();
        return U64Slice::new(body).get(idx);
    }
    if !info.sample_id_all {
        return None;
    }
    let words = U64Slice::new(body);
    let last = words.len().checked_sub(1)?;
    if info.has(SAMPLE_IDENTIFIER) {
        return words.get(last);
    }
    if !info.has(SAMPLE_ID) {
        return None;
    }
    // Trailer order: TID TIME ID STREAM_ID CPU; ID is followed by STREAM_ID and CPU.
    let after = [SAMPLE_STREAM_ID, SAMPLE_CPU];
    let back = after.iter().filter(|&&bit| info.has(bit)).count();
    words.get(last.checked_sub(back)?)
}

/// The TIME of a SAMPLE or of another kernel record's trailer, without parsing the record.
pub fn record_time(ty: u32, body: &[u8], info: &ParseInfo) -> Option<u64> {
    if ty >= PERF_RECORD_USER_TYPE_START || !info.has(SAMPLE_TIME) {
        return None;
    }
    let words = U64Slice::new(body);
    if ty == b::PERF_RECORD_SAMPLE {
        let before = [SAMPLE_IDENTIFIER, SAMPLE_IP, SAMPLE_TID];
        let idx = before.iter().filter(|&&bit| info.has(bit)).count();
        return words.get(idx);
    }
    if !info.sample_id_all {
        return None;
    }
    let start = body.len().checked_sub(info.id_trailer_len())?;
    let trailer = U64Slice::new(body.get(start..)?);
    trailer.get(usize::from(info.has(SAMPLE_TID)))
}
