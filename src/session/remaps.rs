//! mremap(2) moves and grows mappings without a PERF_RECORD_MMAP2: the kernel writes one for
//! mmap and brk only. A page fault in memory `realloc` moved (glibc moves a large block with
//! mremap) would lie in no mapping the records told of. The recorder opens the syscall's
//! tracepoints beside fault events that carry addresses (`live::remap`), and the session pairs
//! each thread's `sys_enter_mremap` with its `sys_exit_mremap` and moves the mapping in the
//! process table, keeping its name and kind. Those the recorder added (named
//! [`ENTER`]/[`EXIT`]) are side band: handed on as such, not as samples, so that no report
//! lists them; a recording's own `syscalls:sys_*_mremap` events are applied and stay samples.

use rustc_hash::FxHashMap;

use std::io;

use crate::records::Sample;

use super::{Handler, Session, SideBand};

/// The names the recorder gives the mremap tracepoints it adds.
pub const ENTER: &str = "memperf:mremap_enter";
pub const EXIT: &str = "memperf:mremap_exit";
const TRACE_ENTER: &str = "syscalls:sys_enter_mremap";
const TRACE_EXIT: &str = "syscalls:sys_exit_mremap";

/// MREMAP_DONTUNMAP (5.7): the old range stays mapped.
const DONTUNMAP: u64 = 4;

/// The payload offsets of the syscall tracepoints on 64-bit kernels: the 8-byte common
/// header, `__syscall_nr` and its padding, then each argument (or `ret`) as 8 bytes.
const ARG0: usize = 16;

/// The mremap events of a session, and the calls under way.
#[derive(Debug, Default)]
pub(super) struct Remaps {
    enter: usize,
    exit: usize,
    /// The recorder's own events: handed on as side band.
    side_band: bool,
    /// (old address, old length, new length, flags) by thread.
    pending: FxHashMap<u32, [u64; 4]>,
    pub(super) stats: RemapStats,
}

/// What the mremap events did to the process table.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RemapStats {
    /// Calls that moved or resized a known mapping.
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
        let (enter, exit, side_band) = match (at(ENTER), at(EXIT)) {
            (Some(e), Some(x)) => (e, x, true),
            _ => (at(TRACE_ENTER)?, at(TRACE_EXIT)?, false),
        };
        Some(Remaps {
            enter,
            exit,
            side_band,
            ..Remaps::default()
        })
    }
}

/// The `i`th 8-byte argument of a syscall tracepoint's payload.
fn arg(raw: &[u8], i: usize) -> Option<u64> {
    let at = ARG0 + 8 * i;
    let b = raw.get(at..at + 8)?;
    Some(u64::from_ne_bytes(b.try_into().ok()?))
}

/// What the session does with a sample of event `ev`.
pub(super) enum Remap {
    /// Not an mremap event.
    Other,
    /// An mremap event, applied: a sample to hand on.
    Sample,
    /// The recorder's own: side band to hand on.
    SideBand,
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

    /// Applies `sample` when it is one of the mremap events.
    pub(super) fn remap(&mut self, ev: usize, sample: &Sample<'_>) -> Remap {
        let Some(r) = &mut self.remaps else {
            return Remap::Other;
        };
        if ev != r.enter && ev != r.exit {
            return Remap::Other;
        }
        let handed = if r.side_band {
            Remap::SideBand
        } else {
            Remap::Sample
        };
        let (Some(pid), Some(tid), Some(raw)) = (sample.pid, sample.tid, sample.raw) else {
            r.stats.unfollowed += 1;
            return handed;
        };
        if ev == r.enter {
            let args = [arg(raw, 0), arg(raw, 1), arg(raw, 2), arg(raw, 3)];
            if let [Some(a), Some(b), Some(c), Some(d)] = args
                && r.pending.insert(tid, [a, b, c, d]).is_none()
            {
                return handed;
            }
            r.stats.unfollowed += 1;
            return handed;
        }
        let Some([old, old_len, new_len, flags]) = r.pending.remove(&tid) else {
            r.stats.unfollowed += 1;
            return handed;
        };
        let ret = arg(raw, 0).unwrap_or(u64::MAX) as i64;
        if (-4095..0).contains(&ret) {
            r.stats.failed += 1;
            return handed;
        }
        let moved = self.procs.remap(
            pid,
            (old, old_len),
            (ret as u64, new_len),
            flags & DONTUNMAP != 0,
        );
        if let Some(r) = &mut self.remaps {
            if moved {
                r.stats.applied += 1;
            } else {
                r.stats.unfollowed += 1;
            }
        }
        handed
    }

    /// Hands the recorder's mremap sample `bytes` on as side band: a writer keeps it, no
    /// report counts it.
    pub(super) fn remap_side_band(
        &self,
        bytes: &[u8],
        handler: &mut dyn Handler,
    ) -> io::Result<()> {
        handler.side_band(&SideBand {
            bytes,
            rec: None,
            procs: &self.procs,
            canonical_id: None,
        })
    }
}
