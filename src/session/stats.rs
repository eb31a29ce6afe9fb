//! What the session counts: samples per event, losses and throttling (per CPU too), records
//! it could not parse or attribute, the span of sample times; every output's header and the
//! recorder's summary print them (`output::header`).

use std::collections::BTreeMap;

use crate::records::Record;

use super::{ReadDelay, Unwinds};

/// Counters printed in the end-of-run summary and the report header.
#[derive(Debug, Default, Clone)]
pub struct SessionStats {
    /// Samples of memperf itself left out of a system-wide recording.
    pub excluded_self: u64,
    /// Records written twice while an event's old and new fds were both enabled (the
    /// stack copy size changed during the run), handed on once.
    pub twins: u64,
    pub samples: Vec<u64>,
    /// Events the kernel dropped because a ring buffer was full (PERF_RECORD_LOST).
    pub lost: u64,
    pub lost_records: u64,
    /// Samples dropped by the kernel for other reasons (PERF_RECORD_LOST_SAMPLES).
    pub lost_samples: u64,
    pub throttled: u64,
    pub unthrottled: u64,
    /// Records that could not be parsed (not handed on, counted here).
    pub malformed: u64,
    /// Samples carrying a sample id none of the events has: the kernel gives software
    /// events and tracepoints that fire together one sample's data, and every event after
    /// the first (another perf session's, often) writes the first one's id and time. Those
    /// attributed by another route (a tracepoint's type in its payload, the only software
    /// event) are in `foreign_attributed`; the others are skipped and counted here.
    pub foreign_ids: u64,
    pub foreign_attributed: u64,
    /// User stacks unwound by this session, and those truncated.
    pub unwound: u64,
    pub truncated: u64,
    /// The same per event.
    pub unwinds: Vec<Unwinds>,
    /// Of the truncated, the user stacks left out (not unwound at all) because the reader
    /// was behind (see `shed`).
    pub shed: u64,
    pub first_time: Option<u64>,
    pub last_time: Option<u64>,
    /// Whether any sample carried a kernel callchain.
    pub kernel_stacks: bool,
    /// Losses and throttling per CPU (from the records' sample_id trailers).
    pub per_cpu: BTreeMap<u32, CpuLosses>,
    /// While recording: how long after its time each stack that went past its copy was
    /// unwound (and so read from the live process).
    pub read_delay: ReadDelay,
}

/// What one CPU's ring lost or had throttled.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CpuLosses {
    pub lost: u64,
    pub lost_samples: u64,
    pub throttled: u64,
}

impl SessionStats {
    /// A sample's time (0: none), which widens the span of the samples handed on.
    pub(super) fn note_time(&mut self, t: Option<u64>) {
        if let Some(t) = t.filter(|&t| t != 0) {
            self.first_time.get_or_insert(t);
            self.last_time = Some(t);
        }
    }

    /// Counts what a LOST, LOST_SAMPLES or THROTTLE record says was lost or throttled, in
    /// all and on its CPU.
    pub(super) fn count_losses(&mut self, rec: &Record<'_>) {
        match *rec {
            Record::Lost { lost, ref sid, .. } => {
                self.lost += lost;
                self.lost_records += 1;
                self.cpu_losses(sid.cpu).lost += lost;
            }
            Record::LostSamples { lost, ref sid } => {
                self.lost_samples += lost;
                self.cpu_losses(sid.cpu).lost_samples += lost;
            }
            Record::Throttle {
                unthrottle,
                ref sid,
                ..
            } => {
                if unthrottle {
                    self.unthrottled += 1;
                } else {
                    self.throttled += 1;
                    self.cpu_losses(sid.cpu).throttled += 1;
                }
            }
            _ => {}
        }
    }

    fn cpu_losses(&mut self, cpu: Option<u32>) -> &mut CpuLosses {
        self.per_cpu.entry(cpu.unwrap_or(u32::MAX)).or_default()
    }
}

/// Events lost in a recording, counted once. perf (6.x) ends a recording with
/// LOST_SAMPLES records holding each event's PERF_FORMAT_LOST count: the very samples its
/// LOST records already counted. Summing the two doubles perf's losses; the larger is the
/// count (memperf writes LOST records only).
pub fn lost_once(lost: u64, lost_samples: u64) -> u64 {
    lost.max(lost_samples)
}
