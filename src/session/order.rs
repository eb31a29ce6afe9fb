//! The recorded source: the records of a perf.data file or pipe, put in time order and
//! handed to the session.
//!
//! A recorder writes what it drained from every CPU's ring and then a FINISHED_ROUND. A
//! record drained in one round may still be older than one drained in the previous round
//! (its CPU's ring was read first), so, as perf does, the records of a round are held until
//! the next round ends and only those up to the newest time of the previous round are
//! handed on. A record older than what was already handed on is late: it is handed on at
//! the next flush, out of order, and counted.

use std::io;

use crate::perfdata::{PerfDataFile, RawFileRecord};
use crate::record::PERF_RECORD_FINISHED_ROUND;

use super::{Handler, Session};

/// What reading the file's records found.
#[derive(Debug, Default, Clone)]
pub struct ReadStats {
    /// Records in the data section (FINISHED_ROUND included).
    pub records: u64,
    /// Records older than records already handed on.
    pub late: u64,
    /// Why the data section ended early, if it did.
    pub read_error: Option<String>,
}

/// How long records are held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slack {
    /// Each round is sorted and handed on at its FINISHED_ROUND.
    None,
    /// A round's records newer than the previous round's newest wait one more round (perf's
    /// ordered events).
    OneRound,
}

struct Pending<'a> {
    time: u64,
    seq: u64,
    rec: RawFileRecord<'a>,
}

/// Feeds `file`'s records to `session` and `handler` in time order; `progress` is called
/// with the file offset after each round.
pub fn replay(
    file: &PerfDataFile,
    session: &mut Session,
    handler: &mut dyn Handler,
    slack: Slack,
    progress: &mut dyn FnMut(u64),
) -> io::Result<ReadStats> {
    let mut stats = ReadStats::default();
    let mut q = Queue {
        pending: Vec::new(),
        flushed_up_to: 0,
    };
    let (mut last_time, mut max_time, mut next_flush, mut seq) = (0u64, 0u64, 0u64, 0u64);
    for rec in file.records() {
        let rec = match rec {
            Ok(rec) => rec,
            Err(e) => {
                stats.read_error = Some(e.to_string());
                break;
            }
        };
        stats.records += 1;
        if rec.ty == PERF_RECORD_FINISHED_ROUND {
            match slack {
                Slack::None => q.flush(u64::MAX, session, handler)?,
                Slack::OneRound => {
                    q.flush(next_flush, session, handler)?;
                    next_flush = max_time;
                }
            }
            progress(rec.offset);
            continue;
        }
        // Records without a time keep their place after the previous one.
        let time = session.record_time(rec.ty, rec.body).unwrap_or(last_time);
        last_time = time;
        max_time = max_time.max(time);
        if time < q.flushed_up_to {
            stats.late += 1;
        }
        q.pending.push(Pending { time, seq, rec });
        seq += 1;
    }
    q.flush(u64::MAX, session, handler)?;
    Ok(stats)
}

struct Queue<'a> {
    pending: Vec<Pending<'a>>,
    /// The newest time handed on.
    flushed_up_to: u64,
}

impl Queue<'_> {
    /// Hands on, in time order, every pending record up to `limit`.
    fn flush(
        &mut self,
        limit: u64,
        session: &mut Session,
        handler: &mut dyn Handler,
    ) -> io::Result<()> {
        // Mostly sorted already: the stable sort's runs make this close to linear.
        self.pending.sort_by_key(|p| (p.time, p.seq));
        let n = self.pending.partition_point(|p| p.time <= limit);
        for p in self.pending.drain(..n) {
            self.flushed_up_to = self.flushed_up_to.max(p.time);
            session.handle(p.rec.ty, p.rec.misc, p.rec.bytes, handler)?;
        }
        Ok(())
    }
}
