//! mremap(2) moves and grows mappings without a PERF_RECORD_MMAP2: the kernel writes one for
//! mmap and brk only. A page fault in memory `realloc` moved (glibc moves a large block with
//! mremap) would lie in no mapping the records told of. The recorder opens the syscall's
//! tracepoints beside fault events that carry addresses (`live::remap`); the session pairs
//! each thread's `sys_enter_mremap` with its `sys_exit_mremap` and, for a call that
//! succeeded, makes the MMAP2 record the kernel did not: the mapping that held the old
//! address, at its new range, with its file, file offset, protection and flags, stamped
//! with the exit's thread, time and CPU. That record goes through the session as any other
//! (the process table, the handler, the writer: perf's own tools read it in the file, and a
//! replay needs no tracepoint). The recorder's own tracepoint samples (named
//! [`ENTER`]/[`EXIT`]) go no further: they are not in the file (perf could not read a killed
//! recording that held tracepoints, whose formats are written at the end). A recording's own
//! `syscalls:sys_*_mremap` events are followed the same way and stay samples.

use rustc_hash::FxHashMap;

use std::io;

use perf_event_open_sys::bindings::PERF_RECORD_MMAP2;

use crate::records::{self, Mmap2Fields, Sample, SampleId};

use super::{Handler, Session};

/// The names the recorder gives the mremap tracepoints it adds.
pub const ENTER: &str = "memperf:mremap_enter";
pub const EXIT: &str = "memperf:mremap_exit";
const TRACE_ENTER: &str = "syscalls:sys_enter_mremap";
const TRACE_EXIT: &str = "syscalls:sys_exit_mremap";

/// The payload offsets of the syscall tracepoints on 64-bit kernels: the 8-byte common
/// header, `__syscall_nr` and its padding, then each argument (or `ret`) as 8 bytes.
const ARG0: usize = 16;

/// The mremap events of a session, and the calls under way.
#[derive(Debug, Default)]
pub(super) struct Remaps {
    enter: usize,
    exit: usize,
    /// The recorder's own events: consumed here.
    own: bool,
    /// (old address, new length) by thread.
    pending: FxHashMap<u32, (u64, u64)>,
    pub(super) stats: RemapStats,
    buf: Vec<u8>,
}

/// What the mremap events did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RemapStats {
    /// Calls that moved or resized a known mapping: an MMAP2 record each.
    pub applied: u64,
    /// Calls that returned an error (nothing moved).
    pub failed: u64,
    /// Calls whose enter or exit was not seen, or whose old address lay in no mapping known.
    pub unfollowed: u64,
}

impl Remaps {
    /// The mremap events among `names` (an event's index is its place), if both are there.
    pub(super) fn among(names: &[String]) -> Option<Remaps> {
        let at = |n: &str| names.iter().position(|x| x == n);
        let (enter, exit, own) = match (at(ENTER), at(EXIT)) {
            (Some(e), Some(x)) => (e, x, true),
            _ => (at(TRACE_ENTER)?, at(TRACE_EXIT)?, false),
        };
        Some(Remaps {
            enter,
            exit,
            own,
            ..Remaps::default()
        })
    }

    /// A call's enter (`Some` when it is under way) or exit. Returns the call that
    /// returned at a new place: (old address, new address, new length).
    fn pair(&mut self, ev: usize, tid: u32, raw: &[u8]) -> Option<(u64, u64, u64)> {
        if ev == self.enter {
            let args = (arg(raw, 0), arg(raw, 2));
            if let (Some(old), Some(new_len)) = args
                && self.pending.insert(tid, (old, new_len)).is_none()
            {
                return None;
            }
            // An enter without its exit before it, or a payload too short.
            self.stats.unfollowed += 1;
            return None;
        }
        let Some((old, new_len)) = self.pending.remove(&tid) else {
            self.stats.unfollowed += 1;
            return None;
        };
        let ret = arg(raw, 0).unwrap_or(u64::MAX) as i64;
        if (-4095..0).contains(&ret) {
            self.stats.failed += 1;
            return None;
        }
        Some((old, ret as u64, new_len))
    }
}

/// The `i`th 8-byte argument of a syscall tracepoint's payload.
fn arg(raw: &[u8], i: usize) -> Option<u64> {
    let at = ARG0 + 8 * i;
    let b = raw.get(at..at + 8)?;
    Some(u64::from_ne_bytes(b.try_into().ok()?))
}

impl Session {
    /// Follows mremap moves through the events named `names` (see the module's comment).
    pub fn with_remaps(mut self, names: &[String]) -> Self {
        self.remaps = Remaps::among(names);
        self
    }

    /// What mremap's tracepoints did to the process table.
    pub fn remap_stats(&self) -> Option<RemapStats> {
        self.remaps.as_ref().map(|r| r.stats)
    }

    /// Follows `sample` when it is one of the mremap events: true when it goes no further
    /// (the recorder's own).
    pub(super) fn remap(
        &mut self,
        ev: usize,
        sample: &Sample<'_>,
        handler: &mut dyn Handler,
    ) -> io::Result<bool> {
        let Some(r) = &mut self.remaps else {
            return Ok(false);
        };
        if ev != r.enter && ev != r.exit {
            return Ok(false);
        }
        let own = r.own;
        let (Some(pid), Some(tid), Some(raw)) = (sample.pid, sample.tid, sample.raw) else {
            r.stats.unfollowed += 1;
            return Ok(own);
        };
        let Some((old, new, new_len)) = r.pair(ev, tid, raw) else {
            return Ok(own);
        };
        let mut buf = std::mem::take(&mut r.buf);
        let made = self.moved_mapping(&mut buf, (pid, tid), (old, new, new_len), sample);
        let handled = if made {
            // Not a record of the ring the sample came from: no twin of anything there.
            let ring = self.ring.take();
            let handled = self.handle(PERF_RECORD_MMAP2, 0, &buf, handler);
            self.ring = ring;
            handled
        } else {
            Ok(())
        };
        if let Some(r) = &mut self.remaps {
            r.buf = buf;
            if made {
                r.stats.applied += 1;
            } else {
                r.stats.unfollowed += 1;
            }
        }
        handled.map(|()| own)
    }

    /// Encodes into `out` the MMAP2 record of the mapping of `pid` that held `old`, now at
    /// `[new, new + len)`, stamped as `exit` (the call's return): false when no mapping
    /// was known at `old`.
    fn moved_mapping(
        &self,
        out: &mut Vec<u8>,
        (pid, tid): (u32, u32),
        (old, new, len): (u64, u64, u64),
        exit: &Sample<'_>,
    ) -> bool {
        let Some(at) = self.procs.maps().and_then(|m| m.mapping_at(pid, old)) else {
            return false;
        };
        if len == 0 {
            return false;
        }
        let a = at.attrs;
        // A mapping a build-id MMAP2 described (no device or inode) is told the same way.
        let build_id = at
            .module
            .build_id
            .as_deref()
            .filter(|_| a.maj == 0 && a.min == 0 && a.ino == 0);
        let fields = Mmap2Fields {
            pid,
            tid,
            addr: new,
            len,
            pgoff: at.pgoff,
            maj: a.maj,
            min: a.min,
            ino: a.ino,
            ino_generation: a.ino_generation,
            build_id,
            prot: a.prot,
            flags: a.flags,
            filename: &at.module.path,
        };
        // The file's side-band records name its first event, whose ids the file holds.
        let id = self
            .ids
            .iter()
            .filter(|&(_, &ev)| ev == 0)
            .map(|(&id, _)| id)
            .min();
        let sid = SampleId {
            pid: Some(pid),
            tid: Some(tid),
            time: exit.time,
            id,
            stream_id: id,
            cpu: exit.cpu,
            identifier: id,
        };
        out.clear();
        records::encode_mmap2(out, &fields, &sid, self.side_info());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(args: &[u64]) -> Vec<u8> {
        let mut raw = vec![0u8; ARG0];
        for a in args {
            raw.extend_from_slice(&a.to_ne_bytes());
        }
        raw
    }

    #[test]
    fn a_call_is_followed_from_its_enter_to_its_exit_on_one_thread() {
        let names = [ENTER.to_string(), EXIT.to_string()];
        let mut r = Remaps::among(&names).unwrap();
        let enter = payload(&[0x1000, 0x1000, 0x8000, 1, 0]);
        assert_eq!(r.pair(0, 7, &enter), None);
        // Another thread's exit pairs with nothing.
        assert_eq!(r.pair(1, 8, &payload(&[0x9000])), None);
        assert_eq!(
            r.pair(1, 7, &payload(&[0x20000])),
            Some((0x1000, 0x20000, 0x8000))
        );
        // A failed call moves nothing.
        assert_eq!(r.pair(0, 7, &enter), None);
        assert_eq!(r.pair(1, 7, &payload(&[(-12i64) as u64])), None);
        assert_eq!(
            r.stats,
            RemapStats {
                applied: 0,
                failed: 1,
                unfollowed: 1
            }
        );
    }
}
