//! Encoders that append complete records (header included) in the kernel layout.
//!
//! Used to rewrite samples after online unwinding and to synthesize records from /proc.
//! Each encoder is the inverse of [`super::parse_record`] for the same [`ParseInfo`].

use crate::abi;
use perf_event_open_sys::bindings as b;

use super::{
    ParseInfo, SAMPLE_CPU, SAMPLE_ID, SAMPLE_IDENTIFIER, SAMPLE_STREAM_ID, SAMPLE_TID, SAMPLE_TIME,
    Sample, SampleId,
};

/// The fields of a `PERF_RECORD_MMAP2`, as in [`super::Record::Mmap2`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Mmap2Fields<'a> {
    pub pid: u32,
    pub tid: u32,
    pub addr: u64,
    pub len: u64,
    pub pgoff: u64,
    pub maj: u32,
    pub min: u32,
    pub ino: u64,
    pub ino_generation: u64,
    /// When set, written with `PERF_RECORD_MISC_MMAP_BUILD_ID` instead of maj..ino_generation.
    pub build_id: Option<&'a [u8]>,
    pub prot: u32,
    pub flags: u32,
    pub filename: &'a [u8],
}

/// A record that cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("record of {0} bytes does not fit the 16-bit perf_event_header size")]
    TooLarge(usize),
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_ne_bytes());
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_ne_bytes());
}

fn pad_to_8(out: &mut Vec<u8>, start: usize) {
    while !(out.len() - start).is_multiple_of(8) {
        out.push(0);
    }
}

/// Writes a header with a placeholder size; returns the record start for [`finish_record`].
fn begin_record(out: &mut Vec<u8>, ty: u32, misc: u16) -> usize {
    let start = out.len();
    put_u32(out, ty);
    out.extend_from_slice(&misc.to_ne_bytes());
    out.extend_from_slice(&0u16.to_ne_bytes());
    start
}

fn finish_record(out: &mut Vec<u8>, start: usize) -> Result<(), EncodeError> {
    let len = out.len() - start;
    match u16::try_from(len) {
        Ok(size) => {
            out[start + 6..start + 8].copy_from_slice(&size.to_ne_bytes());
            Ok(())
        }
        Err(_) => {
            out.truncate(start);
            Err(EncodeError::TooLarge(len))
        }
    }
}

/// Finishes a record that is small by construction (bounded fixed fields plus a string).
fn finish_small(out: &mut Vec<u8>, start: usize) {
    // Only a name longer than 64 KiB can fail; the record is then removed from `out`.
    let _ = finish_record(out, start);
}

/// A NUL-terminated string padded with NULs to a multiple of 8 bytes.
fn put_c_str(out: &mut Vec<u8>, s: &[u8]) {
    let start = out.len();
    out.extend_from_slice(s);
    out.push(0);
    pad_to_8(out, start);
}

/// Appends the `sample_id` trailer selected by `info` (nothing without `sample_id_all`).
pub fn encode_sample_id(out: &mut Vec<u8>, sid: &SampleId, info: &ParseInfo) {
    if !info.sample_id_all {
        return;
    }
    if info.has(SAMPLE_TID) {
        put_u32(out, sid.pid.unwrap_or(0));
        put_u32(out, sid.tid.unwrap_or(0));
    }
    if info.has(SAMPLE_TIME) {
        put_u64(out, sid.time.unwrap_or(0));
    }
    if info.has(SAMPLE_ID) {
        put_u64(out, sid.id.unwrap_or(0));
    }
    if info.has(SAMPLE_STREAM_ID) {
        put_u64(out, sid.stream_id.unwrap_or(0));
    }
    if info.has(SAMPLE_CPU) {
        put_u32(out, sid.cpu.unwrap_or(0));
        put_u32(out, 0);
    }
    if info.has(SAMPLE_IDENTIFIER) {
        put_u64(out, sid.identifier.unwrap_or(0));
    }
}

/// Appends a `PERF_RECORD_SAMPLE` with the fields selected by `info.sample_type`, taken from
/// `s` (absent values are written as 0 / empty) and the callchain from `callchain` when given.
/// On error `out` is left unchanged.
pub fn encode_sample(
    out: &mut Vec<u8>,
    misc: u16,
    s: &Sample<'_>,
    info: &ParseInfo,
    callchain: Option<&[u64]>,
) -> Result<(), EncodeError> {
    let start = begin_record(out, b::PERF_RECORD_SAMPLE, misc);
    let opt = |out: &mut Vec<u8>, bit: u32, v: Option<u64>| {
        if info.has(bit.into()) {
            put_u64(out, v.unwrap_or(0));
        }
    };
    opt(out, b::PERF_SAMPLE_IDENTIFIER, s.identifier);
    opt(out, b::PERF_SAMPLE_IP, s.ip);
    if info.has(SAMPLE_TID) {
        put_u32(out, s.pid.unwrap_or(0));
        put_u32(out, s.tid.unwrap_or(0));
    }
    opt(out, b::PERF_SAMPLE_TIME, s.time);
    opt(out, b::PERF_SAMPLE_ADDR, s.addr);
    opt(out, b::PERF_SAMPLE_ID, s.id);
    opt(out, b::PERF_SAMPLE_STREAM_ID, s.stream_id);
    if info.has(SAMPLE_CPU) {
        put_u32(out, s.cpu.unwrap_or(0));
        put_u32(out, 0);
    }
    opt(out, b::PERF_SAMPLE_PERIOD, s.period);
    if info.has(abi::PERF_SAMPLE_READ) {
        encode_read(out, s.read, info);
    }
    if info.has(abi::PERF_SAMPLE_CALLCHAIN) {
        encode_callchain(out, s, callchain);
    }
    if info.has(abi::PERF_SAMPLE_RAW) {
        let data = s.raw.unwrap_or(&[]);
        let raw_start = out.len();
        let padded = (4 + data.len()).next_multiple_of(8) - 4;
        put_u32(out, u32::try_from(padded).unwrap_or(u32::MAX));
        out.extend_from_slice(data);
        pad_to_8(out, raw_start);
    }
    if info.has(abi::PERF_SAMPLE_BRANCH_STACK) {
        match s.branch_stack {
            Some(bytes) => out.extend_from_slice(bytes),
            None => {
                put_u64(out, 0);
                if info.branch_hw_index {
                    put_u64(out, 0);
                }
            }
        }
    }
    if info.has(abi::PERF_SAMPLE_REGS_USER) {
        encode_regs(out, s.regs_user.as_ref(), info.regs_user);
    }
    if info.has(abi::PERF_SAMPLE_STACK_USER) {
        encode_stack_user(out, s);
    }
    if info.sample_type & (abi::PERF_SAMPLE_WEIGHT | abi::PERF_SAMPLE_WEIGHT_STRUCT) != 0 {
        put_u64(out, s.weight.unwrap_or(0));
    }
    opt(out, b::PERF_SAMPLE_DATA_SRC, s.data_src);
    opt(out, b::PERF_SAMPLE_TRANSACTION, s.transaction);
    if info.has(abi::PERF_SAMPLE_REGS_INTR) {
        encode_regs(out, s.regs_intr.as_ref(), info.regs_intr);
    }
    opt(out, b::PERF_SAMPLE_PHYS_ADDR, s.phys_addr);
    opt(out, b::PERF_SAMPLE_CGROUP, s.cgroup);
    opt(out, b::PERF_SAMPLE_DATA_PAGE_SIZE, s.data_page_size);
    opt(out, b::PERF_SAMPLE_CODE_PAGE_SIZE, s.code_page_size);
    finish_record(out, start)
}

fn encode_read(out: &mut Vec<u8>, read: Option<&[u8]>, info: &ParseInfo) {
    match read {
        Some(bytes) => out.extend_from_slice(bytes),
        None => {
            let size = info.read_size(0).unwrap_or(8);
            out.resize(out.len() + size, 0);
        }
    }
}

fn encode_callchain(out: &mut Vec<u8>, s: &Sample<'_>, callchain: Option<&[u64]>) {
    match (callchain, s.callchain) {
        (Some(ips), _) => {
            put_u64(out, ips.len() as u64);
            for &ip in ips {
                put_u64(out, ip);
            }
        }
        (None, Some(chain)) => {
            put_u64(out, chain.len() as u64);
            out.extend_from_slice(chain.as_bytes());
        }
        (None, None) => put_u64(out, 0),
    }
}

fn encode_regs(out: &mut Vec<u8>, regs: Option<&super::Regs<'_>>, mask: u64) {
    let Some(regs) = regs.filter(|r| r.abi != u64::from(b::PERF_SAMPLE_REGS_ABI_NONE)) else {
        put_u64(out, u64::from(b::PERF_SAMPLE_REGS_ABI_NONE));
        return;
    };
    put_u64(out, regs.abi);
    let values = regs.values();
    for i in 0..mask.count_ones() as usize {
        put_u64(out, values.get(i).unwrap_or(0));
    }
}

fn encode_stack_user(out: &mut Vec<u8>, s: &Sample<'_>) {
    let Some(stack) = s.stack_user.filter(|st| st.size != 0) else {
        put_u64(out, 0);
        return;
    };
    put_u64(out, stack.size);
    let size = usize::try_from(stack.size).unwrap_or(usize::MAX);
    let data = &stack.data[..stack.data.len().min(size)];
    out.extend_from_slice(data);
    out.resize(out.len() + (size - data.len()), 0);
    put_u64(out, stack.dyn_size);
}

/// Appends a `PERF_RECORD_LOST`: `lost` events of the event `id` were dropped.
pub fn encode_lost(out: &mut Vec<u8>, id: u64, lost: u64, sid: &SampleId, info: &ParseInfo) {
    let start = begin_record(out, b::PERF_RECORD_LOST, 0);
    put_u64(out, id);
    put_u64(out, lost);
    encode_sample_id(out, sid, info);
    finish_small(out, start);
}

/// Appends a `PERF_RECORD_COMM` (misc USER, plus `COMM_EXEC` when `exec`).
pub fn encode_comm(
    out: &mut Vec<u8>,
    pid: u32,
    tid: u32,
    name: &[u8],
    exec: bool,
    sid: &SampleId,
    info: &ParseInfo,
) {
    let mut misc = b::PERF_RECORD_MISC_USER;
    if exec {
        misc |= b::PERF_RECORD_MISC_COMM_EXEC;
    }
    let start = begin_record(out, b::PERF_RECORD_COMM, misc as u16);
    put_u32(out, pid);
    put_u32(out, tid);
    put_c_str(out, name);
    encode_sample_id(out, sid, info);
    finish_small(out, start);
}

/// Appends a `PERF_RECORD_MMAP2` with misc `PERF_RECORD_MISC_USER`, plus
/// `PERF_RECORD_MISC_MMAP_DATA` for a mapping without `PROT_EXEC`, as the kernel marks them.
pub fn encode_mmap2(out: &mut Vec<u8>, m: &Mmap2Fields<'_>, sid: &SampleId, info: &ParseInfo) {
    let mut misc = b::PERF_RECORD_MISC_USER;
    if m.prot & libc::PROT_EXEC as u32 == 0 {
        misc |= b::PERF_RECORD_MISC_MMAP_DATA;
    }
    if m.build_id.is_some() {
        misc |= b::PERF_RECORD_MISC_MMAP_BUILD_ID;
    }
    let start = begin_record(out, b::PERF_RECORD_MMAP2, misc as u16);
    put_u32(out, m.pid);
    put_u32(out, m.tid);
    put_u64(out, m.addr);
    put_u64(out, m.len);
    put_u64(out, m.pgoff);
    match m.build_id {
        Some(id) => {
            let id = &id[..id.len().min(20)];
            let mut area = [0u8; 24];
            area[0] = id.len() as u8;
            area[4..4 + id.len()].copy_from_slice(id);
            out.extend_from_slice(&area);
        }
        None => {
            put_u32(out, m.maj);
            put_u32(out, m.min);
            put_u64(out, m.ino);
            put_u64(out, m.ino_generation);
        }
    }
    put_u32(out, m.prot);
    put_u32(out, m.flags);
    put_c_str(out, m.filename);
    encode_sample_id(out, sid, info);
    finish_small(out, start);
}

/// Fields shared by FORK and EXIT records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TaskFields {
    pub pid: u32,
    pub ppid: u32,
    pub tid: u32,
    pub ptid: u32,
    pub time: u64,
}

fn encode_task(out: &mut Vec<u8>, ty: u32, t: &TaskFields, sid: &SampleId, info: &ParseInfo) {
    let start = begin_record(out, ty, 0);
    put_u32(out, t.pid);
    put_u32(out, t.ppid);
    put_u32(out, t.tid);
    put_u32(out, t.ptid);
    put_u64(out, t.time);
    encode_sample_id(out, sid, info);
    finish_small(out, start);
}

/// Appends a `PERF_RECORD_FORK`.
pub fn encode_fork(out: &mut Vec<u8>, t: &TaskFields, sid: &SampleId, info: &ParseInfo) {
    encode_task(out, b::PERF_RECORD_FORK, t, sid, info);
}

/// Appends a `PERF_RECORD_EXIT`.
pub fn encode_exit(out: &mut Vec<u8>, t: &TaskFields, sid: &SampleId, info: &ParseInfo) {
    encode_task(out, b::PERF_RECORD_EXIT, t, sid, info);
}

/// Appends perf's `PERF_RECORD_FINISHED_ROUND` (a bare header).
pub fn encode_finished_round(out: &mut Vec<u8>) {
    let start = begin_record(out, super::PERF_RECORD_FINISHED_ROUND, 0);
    finish_small(out, start);
}
