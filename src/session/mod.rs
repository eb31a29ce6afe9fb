//! The one consumer of records, live or recorded.
//!
//! A source (the live rings through `live::drain`, or a perf.data file or pipe through
//! [`order::FileOrder`]) hands the session raw records in time order. The session parses
//! each record once, keeps the one process table ([`Processes`]), unwinds copied user stacks
//! (memperf's while recording, perf's `--call-graph dwarf` stacks when reading), counts
//! losses per CPU, and passes typed events to a [`Handler`]: the perf.data writer, report's
//! aggregator, script's printer, leak's allocation table.
//!
//! This file is the outline: what a handler receives, the session's state, and the path
//! of a record through [`Session::handle`]. What each step decides is in its own module:
//! whose a record is (`attribution`), which samples are left out (`exclude`), the chain a
//! sample is handed on with (`callchain`), what is counted (`stats`, `unwinds`, `depth`,
//! `delay`), the threads followed (`follow`), records written twice (`twins`), mremap's
//! moves (`remaps`), the process table (`processes`, `reap`) and file order (`order`).

mod attribution;
mod callchain;
mod delay;
mod depth;
mod exclude;
mod follow;
mod keep;
mod names;
pub mod order;
mod processes;
mod reap;
mod remaps;
mod shed;
mod stats;
mod twins;
mod unwinds;

pub use attribution::EventType;
pub use callchain::Chain;
pub use delay::ReadDelay;
pub use depth::StackDepth;
pub use keep::Keep;
pub use stats::{SessionStats, lost_once};
use twins::LastInRing;

use std::io;

use perf_event_open_sys::bindings::{
    PERF_RECORD_COMM, PERF_RECORD_EXIT, PERF_RECORD_FORK, PERF_RECORD_LOST,
    PERF_RECORD_LOST_SAMPLES, PERF_RECORD_MMAP, PERF_RECORD_MMAP2, PERF_RECORD_SAMPLE,
    PERF_RECORD_THROTTLE, PERF_RECORD_UNTHROTTLE,
};
use rustc_hash::FxHashMap;

use crate::maps::ProcessMaps;
use crate::perfdata::PerfDataFile;
use crate::records::{self, ParseInfo, Record, Sample};
use crate::sys::clock::ClockOffset;
use crate::unwind::Unwinders;

pub use names::EXITED_NAMES_MAX;
pub use processes::{EXITED_FILES_MAX, Processes, executable};
pub use reap::Reaper;
pub use remaps::{ENTER as REMAP_ENTER, EXIT as REMAP_EXIT, RemapStats};
pub use twins::SampleData;
pub use unwinds::Unwinds;

/// A sample as a handler receives it: parsed once, with its event and context.
pub struct SampleCtx<'a> {
    /// The event's index (in the order the events were opened or stored).
    pub ev: usize,
    pub misc: u16,
    pub sample: &'a Sample<'a>,
    /// The record as it was read, header included.
    pub bytes: &'a [u8],
    /// When the session unwound the copied user stack: the sample's own callchain (its
    /// kernel part), then `PERF_CONTEXT_USER` and the user frames.
    pub unwound: Option<&'a [u64]>,
    /// When the sample carried another event's id (see [`SessionStats::foreign_ids`]): an
    /// id of the event it was attributed to, for a writer to put in its place.
    pub corrected_id: Option<u64>,
    /// When some user frames were read from the live process after the copied stack ended
    /// (see `unwind::Unwinders::set_live`), or the recording says so of this sample: the
    /// index among the user frames (0 is the sampled instruction) of the first such frame.
    pub recovered: Option<u32>,
    pub procs: &'a Processes,
}

/// Any other record, after the session applied it to the process table.
pub struct SideBand<'a> {
    /// The record as it was read, header included.
    pub bytes: &'a [u8],
    /// The parsed record; `None` for perf's user records (type 64 and up) and for records
    /// of types memperf does not decode.
    pub rec: Option<&'a Record<'a>>,
    pub procs: &'a Processes,
    /// When the record came from an event re-opened during the run (`Session::add_ids`):
    /// the id its event had first, for a writer to put in its place (the file names each
    /// event's first ids only).
    pub canonical_id: Option<u64>,
}

/// What a tool does with the records the session hands it.
pub trait Handler {
    fn sample(&mut self, s: &SampleCtx<'_>) -> io::Result<()>;

    /// Whether the session should unwind this sample's copied user stack (a handler that
    /// will not use the stack, such as a filtered-out sample's, saves the work).
    fn wants_unwind(&mut self, _ev: usize, _s: &Sample<'_>, _procs: &Processes) -> bool {
        true
    }

    fn side_band(&mut self, _r: &SideBand<'_>) -> io::Result<()> {
        Ok(())
    }

    /// The return addresses a uretprobe took over on thread `tid`'s stack, as (slot
    /// address, return address), added to `out`: the unwind puts them back where the
    /// copy holds the trampoline's (see `allocs::hijacked`).
    fn hijacked_returns(&self, _tid: u32, _out: &mut Vec<(u64, u64)>) {}
}

/// The consumer of records.
pub struct Session {
    /// How each event's records are laid out, by event index.
    infos: Vec<ParseInfo>,
    /// What each event is, when known (live recording, or a file's attrs).
    types: Vec<EventType>,
    /// Each event's `max-stack=` term, by index.
    max_stack: Vec<Option<u16>>,
    /// A process whose samples are left out (memperf itself, recording system-wide).
    exclude_pid: Option<u32>,
    /// memperf's child, whose samples are left out too until it execs the command (see
    /// [`Session::with_exclude_until_exec`]).
    exclude_until_exec: Option<u32>,
    /// The one event whose samples the ring of the record being handled holds, if one.
    ring_event: Option<usize>,
    /// An id of each event, by index.
    event_ids: Vec<Option<u64>>,
    ids: FxHashMap<u64, usize>,
    procs: Processes,
    stats: SessionStats,
    frames: Vec<u64>,
    chain: Vec<u64>,
    /// The return addresses the handler says a uretprobe took over on the thread of the
    /// sample being unwound (`Handler::hijacked_returns`), and the copy they were put back
    /// into.
    hijacked: Vec<(u64, u64)>,
    patched: Vec<u8>,
    /// A recording's samples whose stacks were finished from the live process: (time,
    /// tid) → the index of the first recovered user frame.
    recovered_marks: FxHashMap<(u64, u32), u32>,
    /// How much stack copy each event's unwinds needed since `take_depth` last asked.
    depths: Vec<StackDepth>,
    /// The ids of events re-opened during the run, by the opening they came from (1 and
    /// up; the first opening's ids are not here).
    generation: FxHashMap<u64, u32>,
    /// The ring of the record being handled, and the last record of each ring, while
    /// events are re-opened: see [`Session::twin`].
    ring: Option<usize>,
    last_in_ring: Vec<LastInRing>,
    /// How this kernel writes the samples of an event on several fds (see `twins`).
    sample_data: SampleData,
    /// Drain rounds left in which twins are looked for (see [`Session::arm_twins`]).
    twin_rounds: u32,
    /// The threads the events follow, from the targets and the FORK and EXIT records (see
    /// [`Session::follow_tasks`]).
    followed: Option<rustc_hash::FxHashSet<u32>>,
    /// The sample clock, while recording: times the unwinds of stacks past their copy.
    clock: Option<ClockOffset>,
    /// The mremap events, when there are (see `remaps`).
    remaps: Option<remaps::Remaps>,
    /// Whether stacks are left out while the reader is behind (see `shed`).
    shed: shed::Shed,
}

impl Session {
    /// A session for events laid out as `infos`, told apart by the sample ids in `ids`.
    pub fn new(infos: Vec<ParseInfo>, ids: FxHashMap<u64, usize>, keep: Keep) -> Self {
        let n = infos.len();
        let infos = if infos.is_empty() {
            vec![ParseInfo::default()]
        } else {
            infos
        };
        Session {
            infos,
            types: Vec::new(),
            max_stack: Vec::new(),
            exclude_pid: None,
            exclude_until_exec: None,
            ring_event: None,
            event_ids: (0..n)
                .map(|ev| {
                    ids.iter()
                        .filter(|&(_, &e)| e == ev)
                        .map(|(&id, _)| id)
                        .min()
                })
                .collect(),
            ids,
            procs: Processes::new(
                keep.maps,
                keep.unwind.map(Unwinders::new),
                keep.comms,
                keep.dsos,
            ),
            stats: SessionStats {
                samples: vec![0; n],
                ..SessionStats::default()
            },
            frames: Vec::with_capacity(128),
            chain: Vec::with_capacity(256),
            hijacked: Vec::new(),
            patched: Vec::new(),
            recovered_marks: FxHashMap::default(),
            depths: vec![StackDepth::default(); n],
            generation: FxHashMap::default(),
            ring: None,
            last_in_ring: Vec::new(),
            sample_data: SampleData::default(),
            twin_rounds: 0,
            followed: None,
            clock: None,
            remaps: None,
            shed: shed::Shed::default(),
        }
    }

    /// Finishes stacks cut at the copy's end from the live process, and reads a process's
    /// files when its first sample is unwound (recording online).
    pub fn with_live_stacks(mut self) -> Self {
        if let Some(u) = self.procs.unwinders.as_mut() {
            u.set_live(Some(Box::new(crate::unwind::ProcessMemory::default())));
            u.set_lazy(true);
        }
        self
    }

    /// A drain round begins: every record it hands on was committed before now (see
    /// `unwind::Unwinders::begin_round`).
    pub fn begin_round(&mut self) {
        if let Some(u) = self.procs.unwinders.as_mut() {
            u.begin_round();
        }
    }

    /// The sample clock as measured now (the recorder tells it each drain round), by which
    /// the delay of each unwind past the copy is counted (`SessionStats::read_delay`).
    pub fn set_clock(&mut self, clock: Option<ClockOffset>) {
        self.clock = clock;
    }

    /// A session replaying `file`: each event's layout, ids and kind from the file, and the
    /// marks of the stacks the recorder finished from the live process.
    pub fn for_file(file: &PerfDataFile, keep: Keep) -> Self {
        let infos = (0..file.events.len().max(1))
            .map(|i| file.parse_info(i))
            .collect();
        let types = file
            .events
            .iter()
            .map(|e| EventType {
                type_: e.attr.type_,
                config: e.attr.config,
            })
            .collect();
        Session::new(infos, file.id_map().clone(), keep)
            .with_types(types)
            .with_recovered_marks(&file.features.recovered_marks)
            .with_remaps(&file.event_names())
    }

    /// How the running kernel writes the sample of an event that fires for several fds,
    /// which decides what makes two records twins (see `twins`).
    pub fn with_sample_data(mut self, d: SampleData) -> Self {
        self.sample_data = d;
        self
    }

    pub fn stats(&self) -> &SessionStats {
        &self.stats
    }

    pub fn procs(&self) -> &Processes {
        &self.procs
    }

    pub fn unwinders(&self) -> Option<&Unwinders> {
        self.procs.unwinders()
    }

    /// Takes the process maps, for naming frames once the records are all read.
    pub fn take_maps(&mut self) -> Option<ProcessMaps> {
        self.procs.take_maps()
    }

    /// The layout shared by every event's sample_id trailer (the first event's: every attr
    /// is opened with the same sample_id fields).
    pub fn side_info(&self) -> &ParseInfo {
        &self.infos[0]
    }

    /// The timestamp used to order a record, without parsing all of it.
    pub fn record_time(&self, ty: u32, body: &[u8]) -> Option<u64> {
        let info = if ty == PERF_RECORD_SAMPLE {
            self.infos.get(self.event_of(ty, body)?)?
        } else {
            self.side_info()
        };
        records::record_time(ty, body, info)
    }

    /// Handles one record of ring number `ring` of a live run, a ring that holds the samples
    /// of `sole_event` only (if any).
    pub fn handle_from_ring(
        &mut self,
        ring: usize,
        sole_event: Option<usize>,
        ty: u32,
        misc: u16,
        bytes: &[u8],
        handler: &mut dyn Handler,
    ) -> io::Result<()> {
        self.ring = Some(ring);
        self.ring_event = sole_event;
        let r = self.handle(ty, misc, bytes, handler);
        self.ring_event = None;
        self.ring = None;
        r
    }

    /// Handles one complete record (header included).
    pub fn handle(
        &mut self,
        ty: u32,
        misc: u16,
        bytes: &[u8],
        handler: &mut dyn Handler,
    ) -> io::Result<()> {
        let Some(body) = bytes.get(8..) else {
            self.stats.malformed += 1;
            return Ok(());
        };
        if ty == PERF_RECORD_SAMPLE {
            return self.handle_sample(misc, bytes, body, handler);
        }
        let info = match self.event_of(ty, body).and_then(|ev| self.infos.get(ev)) {
            Some(info) => *info,
            None => *self.side_info(),
        };
        let parsed = if ty < records::PERF_RECORD_USER_TYPE_START {
            records::parse_record(ty, misc, body, &info).ok()
        } else {
            None
        };
        if self.side_band_twin(ty, misc, body, &info) {
            return Ok(());
        }
        if let Some(rec) = &parsed {
            self.handle_side_band(misc, rec);
        } else if is_kernel_side_band(ty) {
            self.stats.malformed += 1;
            return Ok(());
        }
        let canonical_id = self.canonical_id(ty, body);
        handler.side_band(&SideBand {
            bytes,
            rec: parsed.as_ref(),
            procs: &self.procs,
            canonical_id,
        })
    }

    fn handle_side_band(&mut self, misc: u16, rec: &Record<'_>) {
        self.procs.apply(misc, rec);
        self.note_exec(rec);
        self.follow(rec);
        self.stats.count_losses(rec);
    }

    fn handle_sample(
        &mut self,
        misc: u16,
        bytes: &[u8],
        body: &[u8],
        handler: &mut dyn Handler,
    ) -> io::Result<()> {
        let Some((ev, by_id)) = self.attribute_sample(misc, body) else {
            return Ok(());
        };
        let Some(info) = self.infos.get(ev) else {
            self.stats.malformed += 1;
            return Ok(());
        };
        let sample = match records::parse_record(PERF_RECORD_SAMPLE, misc, body, info) {
            Ok(Record::Sample(s)) => s,
            _ => {
                self.stats.malformed += 1;
                return Ok(());
            }
        };
        if self.excluded(&sample) {
            return Ok(());
        }
        let generation = self.generation_of(PERF_RECORD_SAMPLE, body);
        if self.sample_twin(ev, generation, &sample) || self.remap(ev, &sample, handler)? {
            return Ok(());
        }
        self.count_sample(ev, &sample);
        let unwind = self.procs.unwinders.is_some()
            && sample.stack_user.is_some()
            && handler.wants_unwind(ev, &sample, &self.procs);
        self.hijacked.clear();
        if unwind && let Some(tid) = sample.tid {
            handler.hijacked_returns(tid, &mut self.hijacked);
        }
        let recovered = self.build_chain(ev, &sample, unwind);
        let corrected_id = (by_id != Some(ev) || generation != 0)
            .then(|| self.event_ids.get(ev).copied().flatten())
            .flatten();
        handler.sample(&SampleCtx {
            ev,
            misc,
            sample: &sample,
            bytes,
            unwound: unwind.then_some(self.chain.as_slice()),
            corrected_id,
            recovered,
            procs: &self.procs,
        })
    }

    /// Counts a sample handed on: for its event, its time, its process, its kernel stack.
    fn count_sample(&mut self, ev: usize, sample: &Sample<'_>) {
        if let Some(n) = self.stats.samples.get_mut(ev) {
            *n += 1;
        }
        self.stats.note_time(sample.time);
        if let Some(pid) = sample.pid {
            self.procs.sampled(pid);
        }
        if sample.callchain.as_ref().is_some_and(|c| !c.is_empty()) {
            self.stats.kernel_stacks = true;
        }
    }
}

/// The side-band records the kernel writes (perf's user records and the others memperf
/// does not decode are not among them).
fn is_kernel_side_band(ty: u32) -> bool {
    matches!(
        ty,
        PERF_RECORD_MMAP
            | PERF_RECORD_MMAP2
            | PERF_RECORD_COMM
            | PERF_RECORD_FORK
            | PERF_RECORD_EXIT
            | PERF_RECORD_LOST
            | PERF_RECORD_LOST_SAMPLES
            | PERF_RECORD_THROTTLE
            | PERF_RECORD_UNTHROTTLE
    )
}
