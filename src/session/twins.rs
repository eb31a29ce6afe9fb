//! Events opened again during a run (`live::resize`, `--call-graph dwarf,auto`): the new
//! fds' ids map to the event, their records go to the file with the event's first id, and
//! a record both openings wrote while both were enabled is handed on once.
//!
//! What tells the two records of one event (twins) from two events, from the kernel's
//! source (kernel/events/core.c):
//! - A software event (`do_perf_sw_event`: page faults) calls every fd on it with one
//!   `perf_sample_data`. Since 6.3 (`perf/core: Set data->sample_flags in
//!   perf_prepare_sample()`, which also sets `PERF_SAMPLE_ID_ALL`'s bits in
//!   `data->sample_flags`), `perf_prepare_sample` skips what `data->sample_flags` already
//!   holds, so `__perf_event_header__init_id` runs for the first fd only: both samples carry
//!   the first fd's time and id. Two events of one thread never share a time: there, a twin
//!   has the same time, and nothing else makes one.
//! - A tracepoint or a tracefs uprobe (`perf_tp_event`) starts each fd over with
//!   `perf_sample_data_init` since 6.4 (and 6.3.y: `perf/core: Fix perf_sample_data not
//!   properly initialized for different swevents in perf_tp_event()`), and before 6.3 every
//!   fd's sample was prepared whole: each twin has its own time and id. They have the same
//!   payload and user registers (one `pt_regs`) and the same user stack bytes (copied from
//!   the same memory while the thread is in the kernel; the shorter copy is the start of
//!   the longer). The kernel adds an enabled event at the head of its list
//!   (`perf_swevent_add`, `perf_trace_add`: `hlist_add_head_rcu`), so the newer opening's
//!   record comes first; the last record of the old fds and the first of the new (two
//!   events) come in the other order.
//! - A hardware event's fds count and overflow each on their own: no twins.

use perf_event_open_sys::bindings::{PERF_RECORD_LOST, PERF_TYPE_SOFTWARE, PERF_TYPE_TRACEPOINT};

use super::{Session, is_kernel_side_band};
use crate::records::{self, ParseInfo, Sample};

/// How the running kernel prepares the sample of an event that fires for several fds:
/// decided once, from its release ([`SampleData::of_release`]), and given to the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SampleData {
    /// Before 6.3: each fd's sample is prepared on its own, with its own time and id.
    #[default]
    PerFd,
    /// 6.3 and later: the fds of a software event share the first one's time and id.
    SharedBySoftwareEvents,
}

impl SampleData {
    /// For a kernel whose `uname -r` is `release` ("6.18.4-arch1"); an unreadable release
    /// is taken for an old kernel (whose rule also finds the twins of a newer one).
    pub fn of_release(release: &str) -> SampleData {
        let mut parts = release
            .trim()
            .split(|c: char| !c.is_ascii_digit())
            .map(|p| p.parse::<u32>().unwrap_or(0));
        let version = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        if version >= (6, 3) {
            SampleData::SharedBySoftwareEvents
        } else {
            SampleData::PerFd
        }
    }
}

/// What makes a record the twin of the one before it in its ring (see the module's text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// Both were prepared from one `perf_sample_data`: the same time.
    SameTime,
    /// Each was prepared on its own: the same time (a kernel that shared it after all), or
    /// the newer opening's record first and the same user stack bytes.
    SameTimeOrStack,
    /// Side-band records (their fixed part holds no time): from another opening.
    OtherOpening,
    /// Each fd samples on its own.
    Never,
}

/// A record as its twin from the other opening of the same event would be: while an event
/// is re-opened, the old and the new fds are both enabled for a moment, and each event
/// they both see is written twice, one record after the other in the same ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Twin {
    key: u64,
    generation: u32,
    /// A sample's time (side-band records: `None`).
    time: Option<u64>,
    /// Already matched: a third record is not a twin of this pair.
    paired: bool,
}

/// The last record of one ring while twins are looked for, and its user stack bytes when
/// its rule compares them.
#[derive(Debug, Clone, Default)]
pub(super) struct LastInRing {
    twin: Option<Twin>,
    stack: Vec<u8>,
}

/// A record to check against the one before it: its key (a hash of what twins share:
/// [`twin_key`]), opening, time, user stack bytes and rule.
struct Candidate<'a> {
    key: u64,
    generation: u32,
    time: Option<u64>,
    stack: &'a [u8],
    rule: Rule,
}

/// Whether `c` is the twin of `prev` (whose stack bytes are `prev_stack`).
fn is_twin(prev: &Twin, prev_stack: &[u8], c: &Candidate<'_>) -> bool {
    if prev.paired || prev.key != c.key {
        return false;
    }
    let same_time = c.time.is_some() && prev.time == c.time;
    match c.rule {
        Rule::SameTime => same_time,
        Rule::SameTimeOrStack => {
            let n = prev_stack.len().min(c.stack.len());
            same_time || (prev.generation > c.generation && prev_stack[..n] == c.stack[..n])
        }
        Rule::OtherOpening => prev.generation != c.generation,
        Rule::Never => false,
    }
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
    /// The rule that finds event `ev`'s twins on this kernel.
    fn twin_rule(&self, ev: usize) -> Rule {
        match self.types.get(ev).map(|t| t.type_) {
            Some(PERF_TYPE_SOFTWARE) if self.sample_data == SampleData::SharedBySoftwareEvents => {
                Rule::SameTime
            }
            Some(PERF_TYPE_SOFTWARE | PERF_TYPE_TRACEPOINT) | None => Rule::SameTimeOrStack,
            Some(_) => Rule::Never,
        }
    }
    /// Whether record `c` is the second of a twin pair: the record before it in its ring
    /// is its twin by `c.rule` (see the module's text) and was not matched yet. The kernel
    /// writes both of a pair at once, so the pair is adjacent in the ring.
    fn twin(&mut self, c: &Candidate<'_>) -> bool {
        let Some(ring) = self.ring else {
            return false;
        };
        if self.last_in_ring.len() <= ring {
            self.last_in_ring.resize(ring + 1, LastInRing::default());
        }
        let last = &mut self.last_in_ring[ring];
        if let Some(prev) = &mut last.twin
            && is_twin(prev, &last.stack, c)
        {
            prev.paired = true;
            self.stats.twins += 1;
            return true;
        }
        last.twin = Some(Twin {
            key: c.key,
            generation: c.generation,
            time: c.time,
            paired: false,
        });
        last.stack.clear();
        if c.rule == Rule::SameTimeOrStack {
            last.stack.extend_from_slice(c.stack);
        }
        false
    }
    /// A record that is no twin and breaks the adjacency of those around it (a LOST
    /// record: the records between were not written).
    fn forget_last_in_ring(&mut self) {
        if let Some(last) = self.ring.and_then(|r| self.last_in_ring.get_mut(r)) {
            last.twin = None;
        }
    }
    /// Whether `sample` (of event `ev`, opening `generation`) is the second of a twin pair
    /// (see the module's text): its key is what twins share, the event, thread, addresses,
    /// payload and user registers. Only while twins are looked for, in a live run's rings.
    pub(super) fn sample_twin(&mut self, ev: usize, generation: u32, sample: &Sample<'_>) -> bool {
        if self.twin_rounds == 0 || self.ring.is_none() {
            return false;
        }
        let regs = sample.regs_user.as_ref();
        let key = twin_key(&[
            &ev.to_ne_bytes(),
            &sample.tid.unwrap_or(0).to_ne_bytes(),
            &sample.ip.unwrap_or(0).to_ne_bytes(),
            &sample.addr.unwrap_or(0).to_ne_bytes(),
            sample.raw.unwrap_or(&[]),
            &regs.map_or(0, |r| r.abi).to_ne_bytes(),
            regs.map_or(&[][..], |r| r.values().as_bytes()),
        ]);
        let c = Candidate {
            key,
            generation,
            time: sample.time,
            stack: sample.stack_user.as_ref().map_or(&[][..], |s| s.data),
            rule: self.twin_rule(ev),
        };
        self.twin(&c)
    }

    /// Whether a side-band record of the kernel's (type `ty`, laid out as `info`) is the
    /// second of a twin pair: both openings wrote the same record but for the trailer's id
    /// and time. A LOST record is no twin but breaks the adjacency of those around it. Only
    /// while twins are looked for, in a live run's rings.
    pub(super) fn side_band_twin(
        &mut self,
        ty: u32,
        misc: u16,
        body: &[u8],
        info: &ParseInfo,
    ) -> bool {
        if self.twin_rounds == 0 || self.ring.is_none() {
            return false;
        }
        if ty == PERF_RECORD_LOST {
            self.forget_last_in_ring();
            return false;
        }
        if !is_kernel_side_band(ty) {
            return false;
        }
        // The fixed part of the record: its trailer holds the fd's id and time.
        let head = body.len().saturating_sub(info.id_trailer_len());
        let key = twin_key(&[&ty.to_ne_bytes(), &misc.to_ne_bytes(), &body[..head]]);
        let c = Candidate {
            key,
            generation: self.generation_of(ty, body),
            time: None,
            stack: &[],
            rule: Rule::OtherOpening,
        };
        self.twin(&c)
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
fn twin_key(parts: &[&[u8]]) -> u64 {
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

    /// A page-fault or tracepoint event (`type_`) with user registers and stack copies, its
    /// first opening's id 7, opened again as id 9, on a kernel that prepares samples as
    /// `data` says.
    fn reopened(type_: u32, data: SampleData) -> (Session, ParseInfo) {
        let mut attr = perf_event_attr {
            type_,
            sample_type: u64::from(
                b::PERF_SAMPLE_IDENTIFIER
                    | b::PERF_SAMPLE_TID
                    | b::PERF_SAMPLE_TIME
                    | b::PERF_SAMPLE_ADDR
                    | b::PERF_SAMPLE_REGS_USER
                    | b::PERF_SAMPLE_STACK_USER,
            ),
            sample_regs_user: 0b111,
            sample_stack_user: 64,
            ..perf_event_attr::default()
        };
        attr.set_sample_id_all(1);
        let info = ParseInfo::from_attr(&attr);
        let ids: FxHashMap<u64, usize> = [(7, 0)].into_iter().collect();
        let types = vec![super::super::EventType { type_, config: 0 }];
        let mut session = Session::new(vec![info], ids, Keep::default())
            .with_types(types)
            .with_sample_data(data);
        session.add_ids(0, &[9], 1);
        session.arm_twins(1);
        (session, info)
    }

    /// One sample of thread 1 at address 0x1000, from fd `id` at `time`, with user registers
    /// `regs` and the stack bytes `stack`.
    struct Fed<'a> {
        id: u64,
        time: u64,
        regs: [u64; 3],
        stack: &'a [u8],
    }

    fn feed(session: &mut Session, info: &ParseInfo, seen: &mut Seen, f: &Fed<'_>) {
        let regs: Vec<u8> = f.regs.iter().flat_map(|r| r.to_ne_bytes()).collect();
        let s = Sample {
            identifier: Some(f.id),
            pid: Some(1),
            tid: Some(1),
            time: Some(f.time),
            addr: Some(0x1000),
            regs_user: Some(crate::records::Regs::new(
                u64::from(b::PERF_SAMPLE_REGS_ABI_64),
                0b111,
                crate::records::U64Slice::new(&regs),
            )),
            stack_user: Some(crate::records::StackUser {
                size: f.stack.len() as u64,
                data: f.stack,
                dyn_size: f.stack.len() as u64,
            }),
            ..Sample::default()
        };
        let mut buf = Vec::new();
        encode_sample(&mut buf, 0, &s, info, None).unwrap();
        session
            .handle_from_ring(0, None, PERF_RECORD_SAMPLE, 0, &buf, seen)
            .unwrap();
    }

    const STACK: [u8; 64] = [0xab; 64];

    /// Two calls of one function from one loop, the first written by the old fds only and
    /// the second by the new ones only: the same thread, address, registers and stack, and
    /// another opening. Taken for twins, the second call was dropped.
    fn two_calls_across_the_switch(session: &mut Session, info: &ParseInfo) -> usize {
        let mut seen = Seen::default();
        let call = |id, time| Fed {
            id,
            time,
            regs: [1, 2, 3],
            stack: &STACK,
        };
        feed(session, info, &mut seen, &call(7, 10));
        feed(session, info, &mut seen, &call(9, 20));
        seen.0.len()
    }

    #[test]
    fn a_real_event_after_the_switch_is_not_a_twin_when_the_kernel_shares_sample_data() {
        let (mut session, info) =
            reopened(b::PERF_TYPE_SOFTWARE, SampleData::SharedBySoftwareEvents);
        assert_eq!(two_calls_across_the_switch(&mut session, &info), 2);
        // Twins carry the first fd's id and time (6.3+): one sample.
        let mut seen = Seen::default();
        let twin = |time| Fed {
            id: 9,
            time,
            regs: [1, 2, 3],
            stack: &STACK,
        };
        feed(&mut session, &info, &mut seen, &twin(30));
        feed(&mut session, &info, &mut seen, &twin(30));
        // The same call again, later: not a twin, even with all else equal.
        feed(&mut session, &info, &mut seen, &twin(31));
        assert_eq!(seen.0.len(), 2);
        assert_eq!(session.stats().twins, 1);
    }

    #[test]
    fn a_real_event_after_the_switch_is_not_a_twin_on_kernels_before_6_3() {
        let (mut session, info) = reopened(b::PERF_TYPE_SOFTWARE, SampleData::PerFd);
        assert_eq!(two_calls_across_the_switch(&mut session, &info), 2);
        assert_eq!(session.stats().twins, 0);
    }

    /// Where each fd prepares its own sample (kernels before 6.3; tracepoints and uprobes
    /// on every kernel), twins have two times and two ids: the newer opening's first, the
    /// same registers, the same stack bytes as far as the shorter copy goes.
    fn twins_by_registers_and_stack(type_: u32, data: SampleData) {
        let (mut session, info) = reopened(type_, data);
        let mut seen = Seen::default();
        let short = &STACK[..32];
        let mut other = STACK;
        other[40] = 0;
        let pairs: [(Fed<'_>, Fed<'_>, bool); 5] = [
            // The new fd's copy (32 bytes) and the old one's (64): twins.
            (
                Fed {
                    id: 9,
                    time: 10,
                    regs: [1, 2, 3],
                    stack: short,
                },
                Fed {
                    id: 7,
                    time: 11,
                    regs: [1, 2, 3],
                    stack: &STACK,
                },
                true,
            ),
            // The old opening's first: two events.
            (
                Fed {
                    id: 7,
                    time: 20,
                    regs: [1, 2, 3],
                    stack: &STACK,
                },
                Fed {
                    id: 9,
                    time: 21,
                    regs: [1, 2, 3],
                    stack: &STACK,
                },
                false,
            ),
            // Other registers: two events.
            (
                Fed {
                    id: 9,
                    time: 30,
                    regs: [1, 2, 3],
                    stack: &STACK,
                },
                Fed {
                    id: 7,
                    time: 31,
                    regs: [1, 2, 4],
                    stack: &STACK,
                },
                false,
            ),
            // Other stack bytes: two events.
            (
                Fed {
                    id: 9,
                    time: 40,
                    regs: [1, 2, 3],
                    stack: &STACK,
                },
                Fed {
                    id: 7,
                    time: 41,
                    regs: [1, 2, 3],
                    stack: &other,
                },
                false,
            ),
            // One opening: two events.
            (
                Fed {
                    id: 9,
                    time: 50,
                    regs: [1, 2, 3],
                    stack: &STACK,
                },
                Fed {
                    id: 9,
                    time: 51,
                    regs: [1, 2, 3],
                    stack: &STACK,
                },
                false,
            ),
        ];
        for (i, (first, second, twins)) in pairs.iter().enumerate() {
            seen.0.clear();
            session.arm_twins(1);
            feed(&mut session, &info, &mut seen, first);
            feed(&mut session, &info, &mut seen, second);
            assert_eq!(seen.0.len(), if *twins { 1 } else { 2 }, "pair {i}");
        }
        assert_eq!(session.stats().twins, 1);
    }

    #[test]
    fn before_6_3_page_fault_twins_have_the_same_registers_and_stack() {
        twins_by_registers_and_stack(b::PERF_TYPE_SOFTWARE, SampleData::PerFd);
    }

    #[test]
    fn tracepoint_twins_have_the_same_registers_and_stack_on_every_kernel() {
        twins_by_registers_and_stack(b::PERF_TYPE_TRACEPOINT, SampleData::PerFd);
        twins_by_registers_and_stack(b::PERF_TYPE_TRACEPOINT, SampleData::SharedBySoftwareEvents);
    }

    #[test]
    fn sample_data_is_shared_from_6_3() {
        for (release, data) in [
            ("6.18.44-fc-v669", SampleData::SharedBySoftwareEvents),
            ("6.3.0", SampleData::SharedBySoftwareEvents),
            ("7.0", SampleData::SharedBySoftwareEvents),
            ("6.2.16-generic", SampleData::PerFd),
            ("5.15.0-91-generic\n", SampleData::PerFd),
            ("", SampleData::PerFd),
        ] {
            assert_eq!(SampleData::of_release(release), data, "{release}");
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
