//! Draining the per-CPU ring buffers in time order.
//!
//! Each round snapshots every ring and merges their records by timestamp, so
//! that a mapping recorded on one CPU is known before a sample from another CPU
//! needs it. Records newer than the round's limit stay in their ring for the next
//! round: a record can carry a timestamp taken just before the round started and
//! still be committed to its ring after we looked.
//!
//! The limit is the later of two: the sample clock read before the round, less
//! [`HOLD_BACK_NS`]; and the newest record the rings held a moment before the
//! round's snapshot, less [`IN_FLIGHT_NS`]. The second needs no clock and holds
//! back microseconds, not milliseconds, where records flow: a record that depends
//! on another (a block's allocation on its free by another thread, a sample on
//! the mapping it runs in) was stamped after that other was in its ring, so a
//! record stamped before one the rings already held has everything it depends on
//! in this snapshot. What it can reorder is only records of two CPUs that depend
//! on nothing of each other, and only one the kernel took longer than
//! `IN_FLIGHT_NS` to write (counted: [`DrainStats::late`]). Holding 2 ms of
//! sqlite3's 8 KiB stacks kept 7 MiB of every ring full.

use std::collections::VecDeque;
use std::io;

use perf_event_open_sys::bindings::PERF_RECORD_SAMPLE;

use crate::session::{Handler, Session};
use crate::sys::ring::RingBuffer;

/// How long a record may take between its timestamp and its commit to the ring, for a
/// limit by the sample clock (which may read off by a measurement's error).
pub const HOLD_BACK_NS: u64 = 2_000_000;

/// How long the kernel may take to write one record, for the limit by the newest record
/// the rings held: past it, a record is handed on after a newer one of another CPU.
pub const IN_FLIGHT_NS: u64 = 100_000;

/// Counters of the drain itself.
#[derive(Debug, Default, Clone)]
pub struct DrainStats {
    pub records: u64,
    pub rounds: u64,
    /// Rings whose data could not be framed (a header with an impossible size).
    pub corrupt_rings: u64,
    /// Bytes dropped after those broken headers.
    pub corrupt_bytes: u64,
    /// Rounds that drained everything because a ring was more than half full.
    pub pressed_rounds: u64,
    /// Records handed on after a newer one: of another ring, written more than
    /// [`IN_FLIGHT_NS`] after their time (see the module's doc); of their own ring, overtaken
    /// by an interrupt's; or after a round that handed on everything.
    pub late: u64,
    /// The newest time handed on.
    pub newest: u64,
}

/// Drains every ring once; records with a time at or after `limit` stay queued, unless a
/// ring is more than half full: at a high event rate the hold-back window alone can exceed
/// the ring (2 ms of 8 KiB dwarf samples at 300k/s is 5 MiB) and holding it would make the
/// kernel drop events, which costs more than the rare cross-CPU reordering it prevents.
pub fn round(
    rings: &mut [RingBuffer],
    ring_events: &[Option<usize>],
    session: &mut Session,
    sink: &mut dyn Handler,
    limit: Option<u64>,
    stats: &mut DrainStats,
) -> io::Result<()> {
    stats.rounds += 1;
    let sizes: Vec<usize> = rings.iter().map(|r| r.data_size()).collect();
    let before: Vec<u64> = rings.iter().map(|r| r.positions().0).collect();
    let mut readers: Vec<_> = rings.iter_mut().map(|r| r.reader()).collect();
    // Each reader holds its ring's head as it is now: what the round hands on is older.
    session.begin_round();
    let pressed = readers
        .iter()
        .zip(&sizes)
        .any(|(rd, &size)| rd.pending_bytes() > size / 2);
    session.set_behind(still_behind(&readers, &sizes, session.is_behind()));
    let limit = if pressed {
        stats.pressed_rounds += 1;
        None
    } else {
        limit.map(|l| l.max(held_limit(newest_before(&mut readers, &before, session), l)))
    };
    let mut heads: Vec<Option<u64>> = vec![None; readers.len()];
    for (i, rd) in readers.iter_mut().enumerate() {
        heads[i] = head_time(rd, session);
    }
    loop {
        let mut best: Option<(usize, u64)> = None;
        for (i, t) in heads.iter().enumerate() {
            if let Some(t) = *t {
                if limit.is_some_and(|l| t >= l) {
                    continue;
                }
                if best.is_none_or(|(_, bt)| t < bt) {
                    best = Some((i, t));
                }
            }
        }
        let Some((i, t)) = best else { break };
        if t != 0 && t < stats.newest {
            stats.late += 1;
        }
        stats.newest = stats.newest.max(t);
        let rd = &mut readers[i];
        if let Some(rec) = rd.peek() {
            let sole = ring_events.get(i).copied().flatten();
            session.handle_from_ring(i, sole, rec.ty, rec.misc, rec.bytes, sink)?;
        }
        rd.consume();
        stats.records += 1;
        heads[i] = head_time(rd, session);
        if stats.records.is_multiple_of(BEHIND_EVERY) {
            let behind = still_behind(&readers, &sizes, session.is_behind());
            session.set_behind(behind);
        }
    }
    for rd in &mut readers {
        if rd.corrupt() {
            // Without a valid header the rest cannot be framed: drop it (counted) so that
            // the kernel can write again instead of the ring staying full forever.
            stats.corrupt_rings += 1;
            stats.corrupt_bytes += rd.pending_bytes() as u64;
            rd.skip_all();
        }
    }
    Ok(())
}

/// How many records are read between two looks at how far behind the reader is.
const BEHIND_EVERY: u64 = 256;

/// Whether the reader is behind: a ring more than three quarters full, or, once behind,
/// more than half (so that it does not go back to unwinding every stack at the edge).
/// Below that the ring still holds what comes while the reader catches up, and every stack
/// is unwound. `MEMPERF_BEHIND_BYTES=N` puts the mark at N unread bytes instead (for tests:
/// 0 leaves out every stack the session would unwind).
fn still_behind(readers: &[crate::sys::ring::RingReader<'_>], sizes: &[usize], was: bool) -> bool {
    let fixed = behind_bytes();
    readers.iter().zip(sizes).any(|(rd, &size)| {
        let mark = fixed.unwrap_or(if was { size / 2 } else { size / 4 * 3 });
        rd.unread_now() > mark
    })
}

fn behind_bytes() -> Option<usize> {
    static AT: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *AT.get_or_init(|| {
        std::env::var("MEMPERF_BEHIND_BYTES")
            .ok()
            .and_then(|v| v.parse().ok())
    })
}

/// The newest time of the last records the rings held at `heads`, read before `readers`
/// took their snapshots (so that each such record was in its ring before the snapshots
/// began). A ring's last record is about its newest (the kernel writes a CPU's records in
/// the order it stamps them, but for one interrupting another), and any record that was in
/// a ring serves: only its headers are read up to there.
fn newest_before(
    readers: &mut [crate::sys::ring::RingReader<'_>],
    heads: &[u64],
    session: &Session,
) -> Option<u64> {
    readers
        .iter_mut()
        .zip(heads)
        .filter_map(|(rd, &head)| {
            rd.with_last_before(head, |rec| stamp(rec, session))
                .flatten()
        })
        .max()
}

/// The limit a record that was in its ring before the snapshot sets (`newest`), given the
/// sample clock's (`by_clock`, the clock less [`HOLD_BACK_NS`]): never past the clock, so
/// that a time from elsewhere (a sample another session's event stamped on its own clock,
/// into this ring too) cannot hand on everything.
fn held_limit(newest: Option<u64>, by_clock: u64) -> u64 {
    newest.map_or(0, |t| {
        t.min(by_clock.saturating_add(HOLD_BACK_NS))
            .saturating_sub(IN_FLIGHT_NS)
    })
}

/// A record's time, when it carries one.
fn stamp(rec: &crate::sys::ring::RawRecord<'_>, session: &Session) -> Option<u64> {
    let body = rec.bytes.get(8..).unwrap_or(&[]);
    if rec.ty == PERF_RECORD_SAMPLE || rec.ty < 64 {
        session.record_time(rec.ty, body)
    } else {
        None
    }
}

/// The time of the next record of a ring (0 when it has none: process it now).
fn head_time(rd: &mut crate::sys::ring::RingReader<'_>, session: &Session) -> Option<u64> {
    let rec = rd.peek()?;
    Some(stamp(&rec, session).unwrap_or(0))
}

/// Which drain rounds have handed on every record the rings held when they began. A record
/// the kernel committed before a round began lies below that round's reading of its ring's
/// `data_head`, and has been handed on once the ring's `data_tail` is past it: exact,
/// whatever the sample clock says and whatever the drain held back. The reaper
/// (`session::reap`) drops a process `/proc` showed gone once the round after the look is
/// passed.
#[derive(Debug, Default)]
pub struct Passed {
    began: u64,
    /// The rounds not passed yet, oldest first, with each ring's head when they began. At
    /// most [`MAX_WAITING`]: past it a round is not noted, and a later noted round, passed,
    /// says it is passed too (heads only grow).
    waiting: VecDeque<(u64, Vec<u64>)>,
    through: u64,
}

/// Rounds noted while the oldest is not passed (a ring whose records the drain holds back
/// for long; each is a few words per ring).
const MAX_WAITING: usize = 64;

impl Passed {
    /// A round begins, its rings written up to `heads`: its number (1 and up).
    pub fn begin(&mut self, heads: Vec<u64>) -> u64 {
        self.began += 1;
        if self.waiting.len() < MAX_WAITING {
            self.waiting.push_back((self.began, heads));
        }
        self.began
    }

    /// A round's drain ended, the rings read up to `tails`: the last round whose records
    /// are all handed on (0: none yet).
    pub fn end(&mut self, tails: &[u64]) -> u64 {
        while let Some((n, heads)) = self.waiting.front() {
            if !heads.iter().zip(tails).all(|(h, t)| t >= h) {
                break;
            }
            self.through = *n;
            self.waiting.pop_front();
        }
        self.through
    }

    /// [`Passed::begin`] on the rings as they are now.
    pub fn begin_rings(&mut self, rings: &[RingBuffer]) -> u64 {
        self.begin(rings.iter().map(|r| r.positions().0).collect())
    }

    /// [`Passed::end`] on the rings as they are now.
    pub fn end_rings(&mut self, rings: &[RingBuffer]) -> u64 {
        let tails: Vec<u64> = rings.iter().map(|r| r.positions().1).collect();
        self.end(&tails)
    }
}

/// Benchmark aid: advances every ring's tail without looking at the records.
pub fn discard_round(rings: &mut [RingBuffer], stats: &mut DrainStats) {
    stats.rounds += 1;
    for ring in rings.iter_mut() {
        let mut rd = ring.reader();
        while rd.peek().is_some() {
            rd.consume();
            stats.records += 1;
        }
    }
}

/// Used by the summary: bytes per sample in the file.
pub fn bytes_per_sample(bytes: u64, samples: u64) -> Option<u64> {
    (samples > 0).then(|| bytes / samples)
}

#[cfg(test)]
mod tests {
    use super::{HOLD_BACK_NS, IN_FLIGHT_NS, Passed, held_limit};

    /// The newest record held sets the limit a little before its own time, but a time past
    /// the sample clock's now (another clock's) sets no more than the clock does.
    #[test]
    fn the_newest_record_held_sets_the_limit_but_never_past_the_clock() {
        let now = 50 * HOLD_BACK_NS;
        let by_clock = now - HOLD_BACK_NS;
        let recent = now - 3 * IN_FLIGHT_NS;
        assert_eq!(held_limit(Some(recent), by_clock), recent - IN_FLIGHT_NS);
        assert_eq!(held_limit(Some(u64::MAX / 2), by_clock), now - IN_FLIGHT_NS);
        assert_eq!(held_limit(None, by_clock), 0);
    }

    /// A round is passed once every ring is read past where the kernel had written when it
    /// began, and not before, however many rounds later.
    #[test]
    fn a_round_is_passed_once_every_ring_is_read_past_its_start() {
        let mut p = Passed::default();
        assert_eq!(p.begin(vec![100, 40]), 1);
        // The second ring's last records are held back (stamped too recently).
        assert_eq!(p.end(&[100, 32]), 0);
        assert_eq!(p.begin(vec![180, 40]), 2);
        assert_eq!(p.end(&[180, 32]), 0);
        assert_eq!(p.begin(vec![180, 96]), 3);
        assert_eq!(p.end(&[180, 40]), 2);
        assert_eq!(p.begin(vec![200, 96]), 4);
        assert_eq!(p.end(&[200, 96]), 4);
    }

    /// Past the rounds it notes, a later round stands for those not noted.
    #[test]
    fn rounds_past_the_bound_are_passed_with_a_later_one() {
        let mut p = Passed::default();
        let stuck = p.begin(vec![10]);
        for _ in 0..super::MAX_WAITING * 2 {
            p.begin(vec![10]);
            assert_eq!(p.end(&[0]), 0);
        }
        assert_eq!(p.end(&[10]), stuck + super::MAX_WAITING as u64 - 1);
        let next = p.begin(vec![12]);
        assert_eq!(p.end(&[12]), next);
    }
}
