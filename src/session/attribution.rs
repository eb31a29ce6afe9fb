//! Which event a record belongs to: the only one, the one its sample id names, the one
//! whose samples alone the ring it came from holds, or, for a sample carrying an id none
//! of the events has (see [`SessionStats::foreign_ids`](super::SessionStats)), the event
//! its payload or its kind points to.

use perf_event_open_sys::bindings::{PERF_RECORD_SAMPLE, PERF_TYPE_TRACEPOINT};

use crate::records::{self, Record};

use super::Session;

/// What an event is, for attributing samples whose id the kernel got wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventType {
    pub type_: u32,
    pub config: u64,
}

impl Session {
    /// What each event is (attr type and config), so that a sample carrying another
    /// event's id can still be attributed (see [`SessionStats::foreign_ids`](super::SessionStats)).
    pub fn with_types(mut self, types: Vec<EventType>) -> Self {
        self.types = types;
        self
    }

    /// The event a record belongs to: the only one, or the one its sample id names.
    pub fn event_of(&self, ty: u32, body: &[u8]) -> Option<usize> {
        if ty >= records::PERF_RECORD_USER_TYPE_START {
            return None;
        }
        if self.infos.len() == 1 {
            return Some(0);
        }
        let id = records::record_identifier(ty, body, self.side_info())?;
        self.ids.get(&id).copied()
    }

    /// The event a sample is handed on as, and the event its id names (if one does).
    /// `None`: the sample is skipped (counted as a foreign id no route attributes, or as
    /// malformed when it has no id).
    pub(super) fn attribute_sample(
        &mut self,
        misc: u16,
        body: &[u8],
    ) -> Option<(usize, Option<usize>)> {
        let by_id = self.event_of(PERF_RECORD_SAMPLE, body);
        let ev = match by_id {
            // A ring that holds one event's samples tells whose a sample is, whatever id the
            // kernel wrote in it (another of our events' id is as wrong as a foreign one).
            _ if self.ring_event.is_some_and(|r| by_id != Some(r)) => {
                self.stats.foreign_ids += 1;
                self.stats.foreign_attributed += 1;
                self.ring_event.unwrap_or(0)
            }
            Some(ev) => ev,
            // An id, but none of ours: see SessionStats::foreign_ids.
            None if records::record_identifier(PERF_RECORD_SAMPLE, body, self.side_info())
                .is_some() =>
            {
                self.stats.foreign_ids += 1;
                let ev = self.attribute_foreign(misc, body)?;
                self.stats.foreign_attributed += 1;
                ev
            }
            None => {
                self.stats.malformed += 1;
                return None;
            }
        };
        Some((ev, by_id))
    }

    /// The event of a sample whose id is none of ours, by another route: the tracepoint
    /// whose type its payload starts with, or the only software event. `None` when no route
    /// tells (or the layouts differ, so that the payload cannot be found).
    fn attribute_foreign(&self, misc: u16, body: &[u8]) -> Option<usize> {
        // The ring it came from holds one event's samples only.
        if let Some(ev) = self.ring_event {
            return Some(ev);
        }
        if self.types.len() != self.infos.len() {
            return None;
        }
        let parse = |i: usize| match records::parse_record(
            PERF_RECORD_SAMPLE,
            misc,
            body,
            &self.infos[i],
        ) {
            Ok(Record::Sample(s)) => Some(s),
            _ => None,
        };
        // A tracepoint's payload starts with its type, which is the event's config.
        for (i, t) in self.types.iter().enumerate() {
            if t.type_ == PERF_TYPE_TRACEPOINT
                && let Some(s) = parse(i)
                && let Some(raw) = s.raw
                && let Some(b) = raw.get(..2)
                && u64::from(u16::from_ne_bytes([b[0], b[1]])) == t.config
            {
                return Some(i);
            }
        }
        let mut others = self.types.iter().enumerate().filter(|(_, t)| {
            // The dummy a file of tracepoints lists for perf report never samples.
            let dummy = t.type_ == perf_event_open_sys::bindings::PERF_TYPE_SOFTWARE
                && t.config == u64::from(perf_event_open_sys::bindings::PERF_COUNT_SW_DUMMY);
            t.type_ != PERF_TYPE_TRACEPOINT && !dummy
        });
        match (others.next(), others.next()) {
            (Some((i, _)), None) if parse(i).is_some_and(|s| s.raw.is_none()) => Some(i),
            _ => None,
        }
    }
}
