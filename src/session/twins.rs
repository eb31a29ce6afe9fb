//! Events opened again during a run (`live::resize`, `--call-graph dwarf,auto`): the new
//! fds' ids map to the event, their records go to the file with the event's first id, and
//! a record both openings wrote while both were enabled is handed on once.

use super::Session;
use crate::records;

/// A record as its twin from the other opening of the same event would be: while an event
/// is re-opened, the old and the new fds are both enabled for a moment, and each event
/// they both see is written twice, one record after the other in the same ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Twin {
    key: u64,
    generation: u32,
    /// A sample's time (side-band records: `None`).
    time: Option<u64>,
    /// Already matched: a third record is not a twin of this pair.
    paired: bool,
}

impl Session {
    /// Event `ev` was opened again (its new fds have `ids`), as opening number
    /// `generation` (1 and up). Its records are handed on with the event's first id (see
    /// `SampleCtx::corrected_id`, `SideBand::canonical_id`); a record written twice while
    /// both openings were enabled is handed on once (see [`Session::twin`]).
    pub fn add_ids(&mut self, ev: usize, ids: &[u64], generation: u32) {
        for &id in ids {
            self.ids.insert(id, ev);
            self.generation.insert(id, generation);
        }
    }
    /// Looks for twins in the next `rounds` drain rounds (an event was opened again: records
    /// both openings wrote are in the rings until they are drained); [`Session::end_round`]
    /// counts them down. Outside them no record is taken for a twin.
    pub fn arm_twins(&mut self, rounds: u32) {
        self.twin_rounds = rounds;
        self.last_in_ring.clear();
    }
    /// One drain round ended.
    pub fn end_round(&mut self) {
        self.twin_rounds = self.twin_rounds.saturating_sub(1);
    }
    /// The opening a record's id came from (0: the first, or an id not re-opened).
    pub(super) fn generation_of(&self, ty: u32, body: &[u8]) -> u32 {
        if self.generation.is_empty() {
            return 0;
        }
        records::record_identifier(ty, body, self.side_info())
            .and_then(|id| self.generation.get(&id).copied())
            .unwrap_or(0)
    }
    /// Whether the record keyed `key`, of opening `generation`, is the second of a twin
    /// pair: the record before it in its ring has the same key and came from another
    /// opening of the same event, or is a sample stamped with the same time. The kernel
    /// writes both of a pair at once (the event's fds, old and new, are called one after
    /// the other for the same fault, tracepoint hit or mmap), so the pair is adjacent in
    /// the ring. Since 6.2 the two samples of one fault also share what the kernel computed
    /// for the first (`perf_prepare_sample` skips what `data->sample_flags` already holds):
    /// the same time and the first fd's id, so only the time tells them from two faults. A
    /// record of the same opening with the same key and another time (a read then a write
    /// fault at one address) is never matched.
    pub(super) fn twin(&mut self, key: u64, generation: u32, time: Option<u64>) -> bool {
        let Some(ring) = self.ring else {
            return false;
        };
        if self.last_in_ring.len() <= ring {
            self.last_in_ring.resize(ring + 1, None);
        }
        let last = &mut self.last_in_ring[ring];
        if let Some(prev) = last
            && !prev.paired
            && prev.key == key
            && (prev.generation != generation || (time.is_some() && prev.time == time))
        {
            prev.paired = true;
            self.stats.twins += 1;
            return true;
        }
        *last = Some(Twin {
            key,
            generation,
            time,
            paired: false,
        });
        false
    }
    /// The id of event `ev`'s first opening, for a record whose id came from a later one.
    pub(super) fn canonical_id(&self, ty: u32, body: &[u8]) -> Option<u64> {
        if self.generation.is_empty() {
            return None;
        }
        let id = records::record_identifier(ty, body, self.side_info())?;
        self.generation.get(&id)?;
        let ev = *self.ids.get(&id)?;
        self.event_ids.get(ev).copied().flatten()
    }
}

/// A hash of a record's parts, for [`Session::twin`].
pub(super) fn twin_key(parts: &[&[u8]]) -> u64 {
    use std::hash::Hasher;
    let mut h = rustc_hash::FxHasher::default();
    for p in parts {
        h.write_usize(p.len());
        h.write(p);
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::io;

    use perf_event_open_sys::bindings::{self as b, PERF_RECORD_SAMPLE, perf_event_attr};
    use rustc_hash::FxHashMap;

    use super::super::{Handler, Keep, SampleCtx};
    use super::*;
    use crate::records::{ParseInfo, Sample, encode_sample};

    /// The ids and addresses of the samples it is handed, with the id the file gets.
    #[derive(Default)]
    struct Seen(Vec<(u64, u64, Option<u64>)>);

    impl Handler for Seen {
        fn sample(&mut self, s: &SampleCtx<'_>) -> io::Result<()> {
            let id = s.sample.identifier.unwrap_or(0);
            self.0
                .push((id, s.sample.addr.unwrap_or(0), s.corrected_id));
            Ok(())
        }
    }

    #[test]
    fn a_record_both_openings_wrote_is_handed_on_once_with_the_first_id() {
        let mut attr = perf_event_attr {
            type_: b::PERF_TYPE_SOFTWARE,
            config: b::PERF_COUNT_SW_PAGE_FAULTS.into(),
            sample_type: u64::from(
                b::PERF_SAMPLE_IDENTIFIER
                    | b::PERF_SAMPLE_TID
                    | b::PERF_SAMPLE_TIME
                    | b::PERF_SAMPLE_ADDR,
            ),
            ..perf_event_attr::default()
        };
        attr.set_sample_id_all(1);
        let info = ParseInfo::from_attr(&attr);
        let ids: FxHashMap<u64, usize> = [(7, 0)].into_iter().collect();
        let mut session = Session::new(vec![info], ids, Keep::default());
        // Event 0 opened again (a new stack copy size): its new fd has id 9.
        session.add_ids(0, &[9], 1);
        session.arm_twins(1);
        let mut seen = Seen::default();
        let feed = |session: &mut Session,
                    seen: &mut Seen,
                    (ring, id): (usize, u64),
                    addr: u64,
                    time: u64| {
            let s = Sample {
                identifier: Some(id),
                pid: Some(1),
                tid: Some(1),
                time: Some(time),
                addr: Some(addr),
                ..Sample::default()
            };
            let mut buf = Vec::new();
            encode_sample(&mut buf, 0, &s, &info, None).unwrap();
            session
                .handle_from_ring(ring, None, PERF_RECORD_SAMPLE, 0, &buf, seen)
                .unwrap();
        };
        // One fault seen by both fds, the new one first (the kernel adds an event at the
        // head of its list): one sample.
        feed(&mut session, &mut seen, (0, 9), 0x1000, 10);
        feed(&mut session, &mut seen, (0, 7), 0x1000, 11);
        // The same address again, by the new fd only (the old one is disabled): a fault of
        // its own, not a twin.
        feed(&mut session, &mut seen, (0, 9), 0x1000, 20);
        // Different addresses are never twins.
        feed(&mut session, &mut seen, (0, 7), 0x2000, 30);
        feed(&mut session, &mut seen, (0, 9), 0x3000, 31);
        // Nor are records of two rings.
        feed(&mut session, &mut seen, (0, 7), 0x4000, 40);
        feed(&mut session, &mut seen, (1, 9), 0x4000, 41);
        // Nor two records of one opening at two times.
        feed(&mut session, &mut seen, (1, 9), 0x5000, 50);
        feed(&mut session, &mut seen, (1, 9), 0x5000, 51);
        // Since 6.2 both samples of one fault carry the first fd's id and its time.
        feed(&mut session, &mut seen, (1, 9), 0x6000, 60);
        feed(&mut session, &mut seen, (1, 9), 0x6000, 60);
        assert_eq!(
            seen.0,
            [
                (9, 0x1000, Some(7)),
                (9, 0x1000, Some(7)),
                (7, 0x2000, None),
                (9, 0x3000, Some(7)),
                (7, 0x4000, None),
                (9, 0x4000, Some(7)),
                (9, 0x5000, Some(7)),
                (9, 0x5000, Some(7)),
                (9, 0x6000, Some(7)),
            ]
        );
        assert_eq!(session.stats().twins, 2);
        assert_eq!(session.stats().samples, [9]);
        // Once the rings held nothing written before the switch, nothing is a twin.
        session.end_round();
        seen.0.clear();
        feed(&mut session, &mut seen, (1, 9), 0x7000, 70);
        feed(&mut session, &mut seen, (1, 9), 0x7000, 70);
        assert_eq!(seen.0, [(9, 0x7000, Some(7)), (9, 0x7000, Some(7))]);
    }
}
