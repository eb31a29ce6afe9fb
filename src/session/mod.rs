//! The one consumer of records, live or recorded.
//!
//! A source (the live rings through `live::drain`, or a perf.data file or pipe through
//! [`order::FileOrder`]) hands the session raw records in time order. The session parses
//! each record once, keeps the one process table ([`Processes`]), unwinds copied user stacks
//! (memperf's while recording, perf's `--call-graph dwarf` stacks when reading), counts
//! losses per CPU, and passes typed events to a [`Handler`]: the perf.data writer, report's
//! aggregator, script's printer, leak's allocation table.

mod delay;
pub mod order;
mod processes;
mod reap;
mod remaps;
mod twins;
mod unwinds;

pub use delay::ReadDelay;
use twins::{Candidate, LastInRing, Rule, twin_key};

use std::io;

use perf_event_open_sys::bindings::{
    PERF_CONTEXT_MAX, PERF_CONTEXT_USER, PERF_RECORD_COMM, PERF_RECORD_EXIT, PERF_RECORD_FORK,
    PERF_RECORD_LOST, PERF_RECORD_LOST_SAMPLES, PERF_RECORD_MMAP, PERF_RECORD_MMAP2,
    PERF_RECORD_SAMPLE, PERF_RECORD_THROTTLE, PERF_RECORD_UNTHROTTLE,
};
use rustc_hash::FxHashMap;

use crate::maps::ProcessMaps;
use crate::perfdata::PerfDataFile;
use crate::records::{self, ParseInfo, Record, Sample, U64Iter};
use crate::sys::clock::ClockOffset;
use crate::unwind::{UnwindMode, UnwindOutcome, Unwinders, UserRegs};

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

impl SampleCtx<'_> {
    /// The callchain to use: the one with the unwound user frames, else the sample's own.
    pub fn callchain(&self) -> Option<Chain<'_>> {
        match (self.unwound, &self.sample.callchain) {
            (Some(c), _) => Some(Chain::Built(c.iter())),
            (None, Some(c)) => Some(Chain::Recorded(c.iter())),
            (None, None) => None,
        }
    }
}

/// The addresses of a callchain, recorded or built by the session.
pub enum Chain<'a> {
    Recorded(U64Iter<'a>),
    Built(std::slice::Iter<'a, u64>),
}

impl Iterator for Chain<'_> {
    type Item = u64;
    fn next(&mut self) -> Option<u64> {
        match self {
            Chain::Recorded(it) => it.next(),
            Chain::Built(it) => it.next().copied(),
        }
    }
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
}

/// The longest callchain handed on for one sample (perf's own default limit is 127 frames;
/// this keeps deep recursion while fitting any re-encoded record in 64 KiB).
pub const MAX_CHAIN_FRAMES: usize = 4096;

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
    pub first_time: Option<u64>,
    pub last_time: Option<u64>,
    /// Whether any sample carried a kernel callchain.
    pub kernel_stacks: bool,
    /// Losses and throttling per CPU (from the records' sample_id trailers).
    pub per_cpu: std::collections::BTreeMap<u32, CpuLosses>,
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

/// What the session keeps besides the per-event layouts.
#[derive(Default)]
pub struct Keep {
    /// Unwind copied user stacks in this mode.
    pub unwind: Option<UnwindMode>,
    /// Every process's mappings, for naming user frames (given with the file's build-ids).
    pub maps: Option<ProcessMaps>,
    /// Thread names.
    pub comms: bool,
    /// The executable files of processes that had samples (for the recorder's build-ids).
    pub dsos: bool,
}

impl Keep {
    /// What a reader of a recording that names frames keeps: every process's mappings
    /// (with the file's build-ids) and thread names, and, when `stacks` and the file holds
    /// raw user stacks (perf's `--call-graph dwarf`), DWARF unwinding.
    pub fn replaying(file: &PerfDataFile, stacks: bool) -> Keep {
        use crate::abi::{PERF_SAMPLE_REGS_USER, PERF_SAMPLE_STACK_USER};
        let raw = PERF_SAMPLE_STACK_USER | PERF_SAMPLE_REGS_USER;
        let raw_stacks =
            (0..file.events.len()).any(|i| file.parse_info(i).sample_type & raw == raw);
        let build_ids: FxHashMap<Vec<u8>, Vec<u8>> = file
            .features
            .build_ids
            .iter()
            .filter(|e| !e.kernel)
            .map(|e| (e.filename.as_bytes().to_vec(), e.build_id.clone()))
            .collect();
        Keep {
            unwind: (raw_stacks && stacks).then_some(UnwindMode::Dwarf),
            maps: Some(ProcessMaps::new(build_ids)),
            comms: true,
            dsos: false,
        }
    }
}

/// What an event is, for attributing samples whose id the kernel got wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventType {
    pub type_: u32,
    pub config: u64,
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
}

/// The stack copy each event's unwinds needed: what `--call-graph dwarf,auto` sizes the
/// copy from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StackDepth {
    /// The copy size the stacks were asked with (a window starts over when it changes:
    /// stacks of a former size may still be in the rings after an event is re-opened).
    pub size: u64,
    /// Stacks unwound from a copy.
    pub samples: u64,
    /// The largest copy one of them needed (see `unwind::StackNeed`).
    pub need_max: u64,
    /// Stacks that went past the end of a copy as long as asked, and the largest need
    /// among them (exact when the live process finished the stack, else a lower bound).
    pub cut: u64,
    pub cut_need_max: u64,
    /// How many stacks needed each size, in steps of [`NEED_STEP`] bytes (the last holds
    /// every need beyond): `needs[k]` counts needs in `((k-1)*STEP, k*STEP]`.
    pub needs: [u32; NEED_STEPS],
    /// Stacks measured with another copy size since the counts were last taken (left out
    /// of the counts above, which started over when the size changed).
    pub other_sizes: u64,
}

/// The step of [`StackDepth::needs`], and its length (steps up to 64 KiB, the kernel's
/// largest copy).
pub const NEED_STEP: u64 = 256;
pub const NEED_STEPS: usize = 257;

impl Default for StackDepth {
    fn default() -> Self {
        StackDepth {
            size: 0,
            samples: 0,
            need_max: 0,
            cut: 0,
            cut_need_max: 0,
            needs: [0; NEED_STEPS],
            other_sizes: 0,
        }
    }
}

impl StackDepth {
    /// Counts one stack that needed `bytes` of the copy (`cut`: it went past its end).
    pub fn add(&mut self, bytes: u64, cut: bool) {
        self.samples += 1;
        self.need_max = self.need_max.max(bytes);
        if cut {
            self.cut += 1;
            self.cut_need_max = self.cut_need_max.max(bytes);
        }
        let step = usize::try_from(bytes.div_ceil(NEED_STEP)).unwrap_or(usize::MAX);
        if let Some(n) = self.needs.get_mut(step.min(NEED_STEPS - 1)) {
            *n = n.saturating_add(1);
        }
    }

    /// Adds another window's counts (of the same copy size).
    pub fn merge(&mut self, o: &StackDepth) {
        self.size = o.size;
        self.samples += o.samples;
        self.need_max = self.need_max.max(o.need_max);
        self.cut += o.cut;
        self.cut_need_max = self.cut_need_max.max(o.cut_need_max);
        for (a, b) in self.needs.iter_mut().zip(o.needs.iter()) {
            *a = a.saturating_add(*b);
        }
    }

    /// The need that all but `1/per` of the stacks stay within (a step's upper end).
    pub fn need_within(&self, per: u64) -> u64 {
        let allowed = self.samples / per;
        let mut above = self.samples;
        for (k, &n) in self.needs.iter().enumerate() {
            above = above.saturating_sub(u64::from(n));
            if above <= allowed {
                return (k as u64 * NEED_STEP).min(self.need_max);
            }
        }
        self.need_max
    }
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
        }
    }

    /// Keeps the set of threads the events follow: `tids` now, then every thread a FORK
    /// record starts and none an EXIT record ends (what an inherited event follows, even a
    /// process its parent left to init).
    pub fn follow_tasks(&mut self, tids: &[u32]) {
        self.followed = Some(tids.iter().copied().collect());
    }

    /// The threads the events follow, when [`Session::follow_tasks`] asked for them.
    pub fn followed_tasks(&self) -> Option<&rustc_hash::FxHashSet<u32>> {
        self.followed.as_ref()
    }

    /// How much stack copy event `ev`'s unwinds needed since the last call; starts over.
    pub fn take_depth(&mut self, ev: usize) -> StackDepth {
        self.depths
            .get_mut(ev)
            .map(std::mem::take)
            .unwrap_or_default()
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

    /// The sample clock as measured now (the recorder tells it each drain round), by which
    /// the delay of each unwind past the copy is counted (`SessionStats::read_delay`).
    pub fn set_clock(&mut self, clock: Option<ClockOffset>) {
        self.clock = clock;
    }

    /// The recording's marks of samples whose stacks were finished from the live process
    /// (its memperf feature section), handed on with each such sample.
    fn with_recovered_marks(mut self, marks: &[crate::perfdata::RecoveredMark]) -> Self {
        self.recovered_marks = marks.iter().map(|m| ((m.time, m.tid), m.first)).collect();
        self
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

    /// Leaves out (and counts) the samples of process `pid`.
    pub fn with_exclude_pid(mut self, pid: Option<u32>) -> Self {
        self.exclude_pid = pid;
        self
    }

    /// Leaves out (and counts with memperf's own) the samples of process `pid` until a COMM
    /// record says it exec'd: memperf's child between its fork and the exec of the command
    /// (`sys::child::GatedChild`), which runs memperf's code under memperf's name.
    pub fn with_exclude_until_exec(mut self, pid: Option<u32>) -> Self {
        self.exclude_until_exec = pid;
        self
    }

    /// How the running kernel writes the sample of an event that fires for several fds,
    /// which decides what makes two records twins (see `twins`).
    pub fn with_sample_data(mut self, d: SampleData) -> Self {
        self.sample_data = d;
        self
    }

    /// The deepest stack each event keeps (its `max-stack=` term): user frames unwound
    /// beyond it are cut, as perf's unwinder stops there.
    pub fn with_max_stack(mut self, max: Vec<Option<u16>>) -> Self {
        self.max_stack = max;
        self
    }

    /// What each event is (attr type and config), so that a sample carrying another
    /// event's id can still be attributed (see [`SessionStats::foreign_ids`]).
    pub fn with_types(mut self, types: Vec<EventType>) -> Self {
        self.types = types;
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
        if self.twin_rounds > 0 && self.ring.is_some() && ty == PERF_RECORD_LOST {
            self.forget_last_in_ring();
        } else if self.twin_rounds > 0 && self.ring.is_some() && is_kernel_side_band(ty) {
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
            if self.twin(&c) {
                return Ok(());
            }
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

    fn note_time(&mut self, t: Option<u64>) {
        if let Some(t) = t.filter(|&t| t != 0) {
            self.stats.first_time.get_or_insert(t);
            self.stats.last_time = Some(t);
        }
    }

    fn handle_side_band(&mut self, misc: u16, rec: &Record<'_>) {
        self.procs.apply(misc, rec);
        if let Record::Comm {
            pid, exec: true, ..
        } = *rec
            && self.exclude_until_exec == Some(pid)
        {
            self.exclude_until_exec = None;
        }
        if let Some(f) = &mut self.followed {
            match *rec {
                Record::Fork { tid, .. } => {
                    f.insert(tid);
                }
                Record::Exit { tid, .. } => {
                    f.remove(&tid);
                }
                _ => {}
            }
        }
        match *rec {
            Record::Lost { lost, ref sid, .. } => {
                self.stats.lost += lost;
                self.stats.lost_records += 1;
                self.cpu_losses(sid.cpu).lost += lost;
            }
            Record::LostSamples { lost, ref sid } => {
                self.stats.lost_samples += lost;
                self.cpu_losses(sid.cpu).lost_samples += lost;
            }
            Record::Throttle {
                unthrottle,
                ref sid,
                ..
            } => {
                if unthrottle {
                    self.stats.unthrottled += 1;
                } else {
                    self.stats.throttled += 1;
                    self.cpu_losses(sid.cpu).throttled += 1;
                }
            }
            _ => {}
        }
    }

    fn cpu_losses(&mut self, cpu: Option<u32>) -> &mut CpuLosses {
        self.stats
            .per_cpu
            .entry(cpu.unwrap_or(u32::MAX))
            .or_default()
    }

    /// The event of a sample whose id is none of ours, by another route: the tracepoint
    /// whose type its payload starts with, or the only software event. `None` when no route
    /// tells (or the layouts differ, so that the payload cannot be found).
    fn attribute_foreign(&self, misc: u16, body: &[u8]) -> Option<usize> {
        const TRACEPOINT: u32 = perf_event_open_sys::bindings::PERF_TYPE_TRACEPOINT;
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
            if t.type_ == TRACEPOINT
                && let Some(s) = parse(i)
                && let Some(raw) = s.raw
                && let Some(b) = raw.get(..2)
                && u64::from(u16::from_ne_bytes([b[0], b[1]])) == t.config
            {
                return Some(i);
            }
        }
        let mut others = self
            .types
            .iter()
            .enumerate()
            .filter(|(_, t)| t.type_ != TRACEPOINT);
        match (others.next(), others.next()) {
            (Some((i, _)), None) if parse(i).is_some_and(|s| s.raw.is_none()) => Some(i),
            _ => None,
        }
    }

    fn handle_sample(
        &mut self,
        misc: u16,
        bytes: &[u8],
        body: &[u8],
        handler: &mut dyn Handler,
    ) -> io::Result<()> {
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
                let Some(ev) = self.attribute_foreign(misc, body) else {
                    return Ok(());
                };
                self.stats.foreign_attributed += 1;
                ev
            }
            None => {
                self.stats.malformed += 1;
                return Ok(());
            }
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
        if sample.pid.is_some()
            && (sample.pid == self.exclude_pid || sample.pid == self.exclude_until_exec)
        {
            self.stats.excluded_self += 1;
            return Ok(());
        }
        let generation = self.generation_of(PERF_RECORD_SAMPLE, body);
        if self.twin_rounds > 0 && self.ring.is_some() && self.sample_twin(ev, generation, &sample)
        {
            return Ok(());
        }
        if self.remap(ev, &sample, handler)? {
            return Ok(());
        }
        if let Some(n) = self.stats.samples.get_mut(ev) {
            *n += 1;
        }
        self.note_time(sample.time);
        if let Some(pid) = sample.pid {
            self.procs.sampled(pid);
        }
        if sample.callchain.as_ref().is_some_and(|c| !c.is_empty()) {
            self.stats.kernel_stacks = true;
        }
        let unwound = self.procs.unwinders.is_some()
            && sample.stack_user.is_some()
            && handler.wants_unwind(ev, &sample, &self.procs);
        let mut recovered = None;
        if unwound {
            recovered = self.unwind_sample(ev, &sample);
            if let Some(&Some(max)) = self.max_stack.get(ev) {
                cut_chain(&mut self.chain, usize::from(max));
            }
        } else if !self.recovered_marks.is_empty()
            && let (Some(time), Some(tid)) = (sample.time, sample.tid)
        {
            recovered = self.recovered_marks.get(&(time, tid)).copied();
        }
        let corrected_id = (by_id != Some(ev) || generation != 0)
            .then(|| self.event_ids.get(ev).copied().flatten())
            .flatten();
        handler.sample(&SampleCtx {
            ev,
            misc,
            sample: &sample,
            bytes,
            unwound: unwound.then_some(self.chain.as_slice()),
            corrected_id,
            recovered,
            procs: &self.procs,
        })
    }

    /// Whether `sample` (of event `ev`, opening `generation`) is the second of a twin pair
    /// (see `twins`): its key is what twins share, the event, thread, addresses, payload and
    /// user registers.
    fn sample_twin(&mut self, ev: usize, generation: u32, sample: &Sample<'_>) -> bool {
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

    /// Builds `self.chain`: the kernel part of the sample's callchain, then the user frames
    /// unwound from the copied stack. Returns the index among the user frames of the first
    /// one read from the live process, if any was.
    fn unwind_sample(&mut self, ev: usize, sample: &Sample<'_>) -> Option<u32> {
        self.chain.clear();
        if let Some(cc) = &sample.callchain {
            self.chain.extend(cc.iter());
        }
        self.frames.clear();
        let (Some(regs), Some(stack), Some(pid), Some(unwinders)) = (
            sample.regs_user.as_ref(),
            sample.stack_user.as_ref(),
            sample.pid,
            self.procs.unwinders.as_mut(),
        ) else {
            return None;
        };
        if regs.abi == 0 {
            // A kernel thread, or a sample taken without user context.
            return None;
        }
        let Some(user) = user_regs(regs) else {
            self.stats.count_truncated(ev);
            return None;
        };
        unwinders.set_thread(sample.tid.unwrap_or(pid));
        let outcome = unwinders.unwind_copy(pid, user, stack.data, stack.size, &mut self.frames);
        let recovered = unwinders
            .last_recovered()
            .and_then(|i| u32::try_from(i).ok());
        if unwinders.last_past_copy()
            && let (Some(clock), Some(time)) = (self.clock, sample.time)
        {
            self.stats.read_delay.add(clock.now().saturating_sub(time));
        }
        if let (Some(need), Some(d)) = (unwinders.last_need(), self.depths.get_mut(ev)) {
            if d.size != stack.size {
                *d = StackDepth {
                    size: stack.size,
                    other_sizes: d.other_sizes + d.samples,
                    ..StackDepth::default()
                };
            }
            d.add(need.bytes, need.cut);
        }
        self.stats.count_unwound(ev);
        if matches!(outcome, UnwindOutcome::Truncated(_)) {
            self.stats.count_truncated(ev);
        }
        if !self.frames.is_empty() {
            self.chain.push(PERF_CONTEXT_USER);
            self.chain.extend_from_slice(&self.frames);
        }
        if self.chain.len() > MAX_CHAIN_FRAMES {
            // Only thousands of kernel frames get here: keep those nearest the leaf.
            self.chain.truncate(MAX_CHAIN_FRAMES);
            self.stats.count_truncated(ev);
        }
        recovered
    }
}

/// Keeps at most `max` frames of a kernel-then-user chain (context markers not counted).
fn cut_chain(chain: &mut Vec<u64>, max: usize) {
    let mut frames = 0;
    let keep = chain
        .iter()
        .position(|&ip| {
            if ip < PERF_CONTEXT_MAX {
                frames += 1;
            }
            frames > max
        })
        .unwrap_or(chain.len());
    chain.truncate(keep);
    if chain.last().is_some_and(|&ip| ip >= PERF_CONTEXT_MAX) {
        chain.pop();
    }
}

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

#[cfg(target_arch = "x86_64")]
pub(crate) fn user_regs(regs: &records::Regs<'_>) -> Option<UserRegs> {
    use perf_event_open_sys::bindings::{PERF_REG_X86_BP, PERF_REG_X86_IP, PERF_REG_X86_SP};
    Some(UserRegs {
        ip: regs.get(PERF_REG_X86_IP)?,
        sp: regs.get(PERF_REG_X86_SP)?,
        bp: regs.get(PERF_REG_X86_BP)?,
    })
}

/// Events lost in a recording, counted once. perf (6.x) ends a recording with
/// LOST_SAMPLES records holding each event's PERF_FORMAT_LOST count: the very samples its
/// LOST records already counted. Summing the two doubles perf's losses; the larger is the
/// count (memperf writes LOST records only).
pub fn lost_once(lost: u64, lost_samples: u64) -> u64 {
    lost.max(lost_samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts the samples it is handed.
    struct Count(usize);

    impl Handler for Count {
        fn sample(&mut self, _: &SampleCtx<'_>) -> io::Result<()> {
            self.0 += 1;
            Ok(())
        }
    }

    #[test]
    fn memperfs_child_is_left_out_until_it_execs_the_command() {
        #![allow(clippy::unwrap_used)]
        use perf_event_open_sys::bindings as b;
        let mut attr = b::perf_event_attr {
            sample_type: u64::from(b::PERF_SAMPLE_TID | b::PERF_SAMPLE_TIME),
            ..b::perf_event_attr::default()
        };
        attr.set_sample_id_all(1);
        let info = ParseInfo::from_attr(&attr);
        let mut session = Session::new(vec![info], FxHashMap::default(), Keep::default())
            .with_exclude_pid(Some(41))
            .with_exclude_until_exec(Some(42));
        let mut count = Count(0);
        let sample = |session: &mut Session, count: &mut Count, pid: u32| {
            let s = Sample {
                pid: Some(pid),
                tid: Some(pid),
                time: Some(1),
                ..Sample::default()
            };
            let mut buf = Vec::new();
            records::encode_sample(&mut buf, 0, &s, &info, None).unwrap();
            session.handle(PERF_RECORD_SAMPLE, 0, &buf, count).unwrap();
        };
        let comm = |session: &mut Session, count: &mut Count, exec: bool| {
            let sid = records::SampleId {
                pid: Some(42),
                tid: Some(42),
                time: Some(2),
                ..records::SampleId::default()
            };
            let mut buf = Vec::new();
            records::encode_comm(&mut buf, 42, 42, b"memperf", exec, &sid, &info);
            let misc = u16::from_ne_bytes([buf[4], buf[5]]);
            session.handle(PERF_RECORD_COMM, misc, &buf, count).unwrap();
        };
        // Between fork and exec: memperf's code, left out with memperf's own.
        sample(&mut session, &mut count, 42);
        sample(&mut session, &mut count, 41);
        sample(&mut session, &mut count, 7);
        // A thread renamed is no exec.
        comm(&mut session, &mut count, false);
        sample(&mut session, &mut count, 42);
        assert_eq!((count.0, session.stats().excluded_self), (1, 3));
        // The command's samples, once it exec'd, are kept.
        comm(&mut session, &mut count, true);
        sample(&mut session, &mut count, 42);
        sample(&mut session, &mut count, 41);
        assert_eq!((count.0, session.stats().excluded_self), (2, 4));
    }

    #[test]
    fn max_stack_cuts_frames_not_markers() {
        let k = perf_event_open_sys::bindings::PERF_CONTEXT_KERNEL;
        let full = vec![k, 1, 2, PERF_CONTEXT_USER, 3, 4, 5];
        let mut c = full.clone();
        cut_chain(&mut c, 4);
        assert_eq!(c, [k, 1, 2, PERF_CONTEXT_USER, 3, 4]);
        let mut c = full.clone();
        cut_chain(&mut c, 2);
        assert_eq!(c, [k, 1, 2]);
        let mut c = full.clone();
        cut_chain(&mut c, 9);
        assert_eq!(c, full);
    }
}
