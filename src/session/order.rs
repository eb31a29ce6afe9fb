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

use crate::perfdata::{PerfDataError, PerfDataFile, RawFileRecord};
use crate::records::PERF_RECORD_FINISHED_ROUND;

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
    /// Whether it ended inside a record (a recording cut off while it was written).
    pub cut_in_a_record: bool,
    /// The file offset after the last complete record.
    pub end: u64,
    /// The newest time of any record (an EXIT after the last sample included).
    pub max_time: u64,
}

/// How long records are held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slack {
    /// Each round is sorted and handed on at its FINISHED_ROUND (tests compare it).
    #[cfg(test)]
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
    // The file offset before which every record has been handed on and let go of.
    let mut released = file.data_start();
    for rec in file.records() {
        let rec = match rec {
            Ok(rec) => rec,
            Err(e) => {
                stats.cut_in_a_record = matches!(e, PerfDataError::Truncated { .. });
                stats.read_error = Some(e.to_string());
                break;
            }
        };
        stats.records += 1;
        stats.end = rec.offset + (rec.bytes.len() + rec.payload.len()) as u64;
        if rec.ty == PERF_RECORD_FINISHED_ROUND {
            match slack {
                #[cfg(test)]
                Slack::None => q.flush(u64::MAX, session, handler)?,
                Slack::OneRound => {
                    q.flush(next_flush, session, handler)?;
                    next_flush = max_time;
                }
            }
            released = q.release_handed_on(file, released, rec.offset);
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
    stats.max_time = max_time;
    Ok(stats)
}

struct Queue<'a> {
    pending: Vec<Pending<'a>>,
    /// The newest time handed on.
    flushed_up_to: u64,
}

/// How much of the file is let go of at a time: few madvise calls, a bounded window.
const RELEASE_STEP: u64 = 8 << 20;

impl Queue<'_> {
    /// Lets go of the file's bytes that hold only records handed on: those before the
    /// oldest pending record (or before `at`, the round's end, when none is pending), so
    /// that reading a file keeps a window of it in memory, not the whole of it. Returns the
    /// offset released up to.
    fn release_handed_on(&self, file: &PerfDataFile, released: u64, at: u64) -> u64 {
        let low = self
            .pending
            .iter()
            .map(|p| p.rec.offset)
            .min()
            .unwrap_or(at);
        if low < released.saturating_add(RELEASE_STEP) {
            return released;
        }
        file.release(released..low);
        low
    }

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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use perf_event_open_sys::bindings::{self as b, perf_event_attr};

    use super::*;
    use crate::perfdata::{ATTR_SIZE_MAX, EventDesc, Features, PerfDataWriter};
    use crate::records::{ParseInfo, Sample, encode_finished_round, encode_sample};
    use crate::session::{Keep, SampleCtx};

    /// Keeps the times of the samples it is handed.
    struct Times(Vec<u64>);

    impl Handler for Times {
        fn sample(&mut self, s: &SampleCtx<'_>) -> io::Result<()> {
            self.0.push(s.sample.time.unwrap_or(0));
            Ok(())
        }
    }

    /// A file whose rounds hold samples with these times (one slice per round).
    fn file_with_rounds(rounds: &[&[u64]]) -> (tempfile::TempDir, PerfDataFile) {
        let mut attr = perf_event_attr {
            type_: b::PERF_TYPE_SOFTWARE,
            size: ATTR_SIZE_MAX as u32,
            config: b::PERF_COUNT_SW_PAGE_FAULTS.into(),
            sample_type: u64::from(
                b::PERF_SAMPLE_IDENTIFIER | b::PERF_SAMPLE_TID | b::PERF_SAMPLE_TIME,
            ),
            ..perf_event_attr::default()
        };
        attr.set_sample_id_all(1);
        let info = ParseInfo::from_attr(&attr);
        let mut buf = Vec::new();
        for round in rounds {
            for &t in *round {
                let s = Sample {
                    identifier: Some(7),
                    pid: Some(1),
                    tid: Some(1),
                    time: Some(t),
                    ..Sample::default()
                };
                encode_sample(&mut buf, 0, &s, &info, None).unwrap();
            }
            encode_finished_round(&mut buf);
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rounds.data");
        let events = vec![EventDesc {
            attr,
            name: "page-faults".into(),
            ids: vec![7],
        }];
        let mut w = PerfDataWriter::create(&path, events).unwrap();
        w.write_record(&buf).unwrap();
        w.finish(&Features::default()).unwrap();
        let file = PerfDataFile::open(&path).unwrap();
        (dir, file)
    }

    fn replayed(file: &PerfDataFile, slack: Slack) -> (Vec<u64>, ReadStats) {
        let mut session = Session::new(
            vec![file.parse_info(0)],
            file.id_map().clone(),
            Keep::default(),
        );
        let mut times = Times(Vec::new());
        let stats = replay(file, &mut session, &mut times, slack, &mut |_| {}).unwrap();
        (times.0, stats)
    }

    #[test]
    fn a_round_waits_for_the_next_as_perf_orders_events() {
        // The second round holds 20, drained from a CPU whose ring was read after the
        // first round's 30 had been taken; the third holds 15, later than anything allows.
        let (_dir, file) = file_with_rounds(&[&[10, 30], &[20, 40], &[15]]);
        let (times, stats) = replayed(&file, Slack::OneRound);
        assert_eq!(times, [10, 20, 30, 15, 40]);
        // Eight records, after the EVENT_UPDATE that names the event.
        assert_eq!((stats.late, stats.records), (1, 9));

        // Sorting within each round alone puts 20 after 30 too.
        let (times, stats) = replayed(&file, Slack::None);
        assert_eq!(times, [10, 30, 20, 40, 15]);
        assert_eq!(stats.late, 2);
    }
}
