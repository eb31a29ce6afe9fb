//! The reader's place in the scheduler.
//!
//! Events the kernel cannot throttle, copying DWARF stacks at every hit
//! (`open::dwarf_at_every_hit`: a uprobe on malloc, a tracepoint, faults at period 1), fill
//! the rings as fast as the traced threads run, and the kernel never waits for the reader:
//! a full ring drops what comes next. Beside busy threads that outnumber the CPUs, the
//! reader is one runnable thread among many and gets its fair share (1/7 of 2 CPUs beside 6
//! threads), while taking a record out costs about as much as the kernel's writing it (the
//! unwind reads the copy where the kernel wrote it: 24 KiB a hit). 6 threads calling malloc
//! from 22 KiB stacks lost 41,014 of 48,000 hits. A lower nice value makes the scheduler run
//! the reader whenever it has records: the traced threads then go at the pace the reader
//! takes their records, the only back-pressure there is. It changes only the reader's
//! thread, after the command was forked (which keeps its own nice value); the reader never
//! spins, so it takes a CPU from the others only while it has records to take.

use crate::config::record::{RecordConfig, Target};

/// The reader's nice value while it drains such events (weight 29154 against 1024: ~30
/// times a default thread's share of a CPU).
pub(crate) const READER_NICE: i32 = -15;

/// What happened to the reader's priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Raised {
    /// The events do not need it, or the reader already runs at that nice value or lower.
    Unchanged,
    /// From the first nice value to the second.
    To(i32, i32),
    /// The kernel refused (no `CAP_SYS_NICE`): the reader keeps the default share.
    Refused,
}

/// Lowers the calling thread's nice value to [`READER_NICE`] (or `MEMPERF_READER_NICE`,
/// for benchmarks: `0` leaves it as it is) when `cfg` records DWARF stacks at every hit of
/// a command or of given processes and they are unwound while recording (`online`).
///
/// Never for a system-wide recording (`-a`, `-C`): there the reader would take precedence
/// over every process of the machine, and it lost more, not less (a page-fault recording
/// with `-a` beside other compile jobs lost 8,000 to 33,000 faults in 4 runs of 6 at nice
/// -15, in 1 of 10 at the default; tests/twins.rs, `memperfs_child_before_its_exec_...`).
pub(crate) fn raise_for(cfg: &RecordConfig, online: bool) -> Raised {
    if !online || cfg.target == Target::SystemWide || !super::open::dwarf_at_every_hit(cfg) {
        return Raised::Unchanged;
    }
    let wanted = std::env::var("MEMPERF_READER_NICE")
        .ok()
        .and_then(|v| v.trim().parse::<i32>().ok())
        .map_or(READER_NICE, |n| n.clamp(-20, 19));
    let Ok(now) = crate::sys::thread_nice() else {
        return Raised::Refused;
    };
    if now <= wanted {
        return Raised::Unchanged;
    }
    match crate::sys::set_thread_nice(wanted) {
        Ok(()) => Raised::To(now, wanted),
        Err(_) => Raised::Refused,
    }
}
