//! Records synthesized from /proc for processes that existed before recording
//! started, so that the file is self-contained (as `perf record` does).

use std::io;

use perf_event_open_sys::bindings::{PERF_RECORD_MISC_KERNEL, PERF_RECORD_MMAP};

use crate::procfs::{self, MapEntry};
use crate::records::{self, Mmap2Fields, ParseInfo, SampleId};
use crate::session::{Handler, Session};

/// What synthesis produced and skipped.
#[derive(Debug, Default)]
pub struct SynthStats {
    pub processes: u64,
    pub mappings: u64,
    /// Processes that exited while being read.
    pub vanished: u64,
}

/// The sample_id trailer of a synthesized record.
fn sid(pid: u32, tid: u32, id: u64) -> SampleId {
    SampleId {
        pid: Some(pid),
        tid: Some(tid),
        time: Some(0),
        id: Some(id),
        stream_id: Some(id),
        cpu: Some(0),
        identifier: Some(id),
    }
}

/// What tells hugetlb mappings apart in `/proc/PID/maps`, for the MAP_HUGETLB flag the
/// kernel sets in MMAP2 records of new mappings (and `hfaults` reads).
#[derive(Default)]
struct Hugetlb {
    /// The devices of the hugetlbfs mounts.
    devs: Vec<(u32, u32)>,
}

impl Hugetlb {
    /// Whether `m` is hugetlb memory; `smaps` reads the process's huge ranges once, for
    /// the System V segments `maps` alone cannot tell apart.
    fn is_huge(&self, m: &MapEntry, smaps: &mut Option<Vec<(u64, u64)>>, pid: u32) -> bool {
        if m.path.starts_with(b"/anon_hugepage") || self.devs.contains(&(m.dev_major, m.dev_minor))
        {
            return true;
        }
        if !m.path.starts_with(b"/SYSV") {
            return false;
        }
        smaps
            .get_or_insert_with(|| procfs::huge_ranges(pid).unwrap_or_default())
            .iter()
            .any(|&(s, e)| s == m.start && e == m.end)
    }
}

fn prot_flags(m: &MapEntry) -> (u32, u32) {
    let mut prot = 0;
    if m.perms[0] == b'r' {
        prot |= libc::PROT_READ as u32;
    }
    if m.perms[1] == b'w' {
        prot |= libc::PROT_WRITE as u32;
    }
    if m.perms[2] == b'x' {
        prot |= libc::PROT_EXEC as u32;
    }
    let flags = if m.perms[3] == b's' {
        libc::MAP_SHARED
    } else {
        libc::MAP_PRIVATE
    } as u32;
    (prot, flags)
}

/// Writes COMM records for every thread and MMAP2 records for every mapping of `pid`.
fn synthesize_process(
    pid: u32,
    id: u64,
    info: &ParseInfo,
    session: &mut Session,
    sink: &mut dyn Handler,
    out: &mut Vec<u8>,
    hugetlb: &Hugetlb,
) -> io::Result<u64> {
    let comm = procfs::comm(pid)?;
    let threads = procfs::threads(pid).unwrap_or_else(|_| vec![pid]);
    let maps = procfs::read_maps(pid)?;
    for &tid in &threads {
        let name = if tid == pid {
            comm.clone()
        } else {
            procfs::comm(tid).unwrap_or_else(|_| comm.clone())
        };
        out.clear();
        records::encode_comm(out, pid, tid, &name, false, &sid(pid, tid, id), info);
        session.handle(
            perf_event_open_sys::bindings::PERF_RECORD_COMM,
            0,
            out,
            sink,
        )?;
    }
    let mut n = 0;
    let mut smaps = None;
    for m in &maps {
        let (prot, mut flags) = prot_flags(m);
        if hugetlb.is_huge(m, &mut smaps, pid) {
            flags |= libc::MAP_HUGETLB as u32;
        }
        let filename: &[u8] = if m.path.is_empty() {
            b"//anon"
        } else {
            &m.path
        };
        let fields = Mmap2Fields {
            pid,
            tid: pid,
            addr: m.start,
            len: m.end.saturating_sub(m.start),
            pgoff: m.pgoff,
            maj: m.dev_major,
            min: m.dev_minor,
            ino: m.inode,
            ino_generation: 0,
            build_id: None,
            prot,
            flags,
            filename,
        };
        out.clear();
        records::encode_mmap2(out, &fields, &sid(pid, pid, id), info);
        session.handle(
            perf_event_open_sys::bindings::PERF_RECORD_MMAP2,
            0,
            out,
            sink,
        )?;
        n += 1;
    }
    Ok(n)
}

/// Synthesizes the given processes; ones that exit meanwhile are counted, not errors.
pub fn synthesize(
    pids: &[u32],
    id: u64,
    info: &ParseInfo,
    session: &mut Session,
    sink: &mut dyn Handler,
) -> io::Result<SynthStats> {
    let mut stats = SynthStats::default();
    let mut out = Vec::with_capacity(512);
    synthesize_kernel(id, info, session, sink, &mut out)?;
    let hugetlb = Hugetlb {
        devs: procfs::hugetlbfs_devs(),
    };
    for &pid in pids {
        match synthesize_process(pid, id, info, session, sink, &mut out, &hugetlb) {
            Ok(n) => {
                stats.processes += 1;
                stats.mappings += n;
            }
            Err(e)
                if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH) =>
            {
                stats.vanished += 1;
            }
            // Kernel threads and processes we may not read: skip them, as perf does.
            Err(_) => stats.vanished += 1,
        }
    }
    Ok(stats)
}

/// The kernel's text mapping, as perf writes it (`[kernel.kallsyms]_text`), so that
/// readers place kernel callchain entries.
fn synthesize_kernel(
    id: u64,
    info: &ParseInfo,
    session: &mut Session,
    sink: &mut dyn Handler,
    out: &mut Vec<u8>,
) -> io::Result<()> {
    let Some(text) = kernel_text_address() else {
        return Ok(());
    };
    const NAME: &[u8] = b"[kernel.kallsyms]_text";
    out.clear();
    out.extend_from_slice(&PERF_RECORD_MMAP.to_ne_bytes());
    out.extend_from_slice(&(PERF_RECORD_MISC_KERNEL as u16).to_ne_bytes());
    out.extend_from_slice(&0u16.to_ne_bytes()); // size, patched below
    out.extend_from_slice(&u32::MAX.to_ne_bytes()); // pid -1: the kernel
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(&text.to_ne_bytes());
    out.extend_from_slice(&(u64::MAX - text).to_ne_bytes());
    out.extend_from_slice(&text.to_ne_bytes());
    out.extend_from_slice(NAME);
    let padded = (NAME.len() + 1).div_ceil(8) * 8;
    out.resize(out.len() + padded - NAME.len(), 0);
    records::encode_sample_id(out, &sid(u32::MAX, 0, id), info);
    let size = out.len() as u16;
    out[6..8].copy_from_slice(&size.to_ne_bytes());
    session.handle(PERF_RECORD_MMAP, PERF_RECORD_MISC_KERNEL as u16, out, sink)
}

/// The address of `_text` from /proc/kallsyms (None when hidden by kptr_restrict).
pub fn kernel_text_address() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/kallsyms").ok()?;
    for line in text.lines().take(200_000) {
        let mut it = line.split_whitespace();
        let (Some(addr), Some(_), Some(name)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        if name == "_text" || name == "_stext" {
            let a = u64::from_str_radix(addr, 16).ok()?;
            return (a != 0).then_some(a);
        }
    }
    None
}
