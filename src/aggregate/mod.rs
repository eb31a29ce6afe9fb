//! Aggregation: the handler that turns the session's samples into interned stacks of frame
//! ids with counts and byte weights (and `--by`, `--timeline` and script rows). Names are
//! looked up later, once per unique frame, by the output stage.

mod by;
mod chain;
mod fpcheck;
pub mod inuse;
mod jit;
pub mod live;
pub mod weigh;

use std::io;

use rustc_hash::FxHashMap;

use crate::config::report::{Prefix, ReportConfig, ReportOutput, StackSpace, Weight};
use crate::maps::{ModuleKind, ProcessMaps};
use crate::perfdata::PerfDataFile;
use crate::perfdata::tracing_data::FieldFormat;
use crate::records::{Record, Sample};
use crate::session::order::{self, Slack};
use crate::session::{Handler, Keep, Processes, SampleCtx, Session, SideBand};
use crate::stacks::{CodeAddr, FrameTable, StackId};

pub use by::{ByRow, NO_MAPPING, no_mapping_note};
pub use chain::{StackBook, remaps};
pub use fpcheck::FpCheck;
pub(crate) use fpcheck::open_module;
pub use jit::{JitTimes, ToMonotonic};
use weigh::{BrkTracker, Target};
pub use weigh::{Weigher, weighers};

/// An unresolved frame: what is needed to name it once, later.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FrameKey {
    Kernel {
        addr: CodeAddr,
    },
    /// In a mapped module, by the file offset of the code address.
    User {
        module: u32,
        offset: CodeAddr,
    },
    /// Anonymous executable memory or no known mapping: a JIT map may name it. `load`: of
    /// several functions a jitdump placed at `addr`, the time of the one in effect when the
    /// sample ran (`JitTimes`); `None` where time does not tell them apart.
    Jit {
        pid: u32,
        addr: u64,
        load: Option<u64>,
    },
    /// Not a frame: where a stack's user frames read from the live process begin (towards
    /// the root), when a report marks them (`StackBook::mark_recovered`). It has no name.
    Recovered,
}

impl FrameKey {
    /// A user address of `pid`: its module and file offset, or, in anonymous executable
    /// memory or outside every known mapping, a JIT frame that a perf map may name.
    pub fn user(maps: &ProcessMaps, pid: u32, addr: u64, ret: bool) -> FrameKey {
        match maps.lookup(pid, addr) {
            Some((module, offset)) if maps.module(module).kind() != ModuleKind::Anon => {
                FrameKey::User {
                    module,
                    offset: CodeAddr::new(offset, ret),
                }
            }
            _ => FrameKey::Jit {
                pid,
                addr,
                load: None,
            },
        }
    }
}

/// Everything counted while reading, for the header.
#[derive(Debug, Default)]
pub struct ReadStats {
    /// Samples per event in the file, and those kept by the filters.
    pub samples: Vec<u64>,
    pub kept: Vec<u64>,
    pub lost: u64,
    pub lost_records: u64,
    pub lost_samples: u64,
    pub throttled: u64,
    /// User stacks unwound here (raw stacks of `--call-graph dwarf` files) and truncated.
    pub unwound: u64,
    pub truncated: u64,
    pub truncated_reasons: crate::unwind::TruncCounts,
    /// Of `truncated`, stacks with no frame unwound past the sampled function's (the
    /// allocation tools' `[no stack]`).
    pub unwound_none: u64,
    /// User stacks the kernel walked by frame pointers, and those cut at a value that
    /// is no return address (`StackBook`'s; the allocation tools', `allocs::unwinds`).
    pub fp_walked: u64,
    pub fp_cut: u64,
    /// User stacks memperf unwound while recording and truncated (its feature section).
    pub recorded_unwound: u64,
    pub recorded_truncated: u64,
    pub recorded_reasons: crate::unwind::TruncCounts,
    /// Per event, user stacks unwound and truncated while recording and here together;
    /// `None` when the recording counted its own for all events together (older files).
    pub event_unwinds: Option<Vec<crate::session::Unwinds>>,
    /// Records that could not be parsed.
    pub malformed: u64,
    /// Records that arrived after newer ones had been handed on (out of time order).
    pub late: u64,
    /// Samples skipped because they carried a sample id of no event (another perf session's,
    /// by a kernel defect) and no other route told their event.
    pub foreign_skipped: u64,
    /// A recording its recorder never finished (killed, or its disk full): the file offset
    /// after the last complete record, up to which it was read.
    pub unfinished_at: Option<u64>,
    /// Why the data section ended early, if it did.
    pub read_error: Option<String>,
    pub first_time: Option<u64>,
    pub last_time: Option<u64>,
    pub records: u64,
    /// `--weight bytes`: bytes the break shrank by (not in the stacks), and brk calls whose
    /// starting break was unknown (weighed 0).
    pub brk_shrunk: u64,
    pub brk_unknown_base: u64,
    /// Samples kept without their stack because the stacks and frames interned had
    /// reached their bound (`live::Windowed`, the agent's bounded memory).
    pub folded: u64,
    /// Samples kept whose user address lies in no mapping recorded for their process, so
    /// that their leaf is named `[unknown]` (`live::Windowed`, said in the agent's window
    /// line).
    pub unmapped: u64,
}

/// The aggregated stacks of one file.
pub struct Aggregate {
    /// The frames and stacks of the samples kept.
    pub book: StackBook,
    pub prefixes: FrameTable<String>,
    /// (event, prefix, stack) → samples.
    pub counts: FxHashMap<(usize, u32, Option<StackId>), u64>,
    pub maps: ProcessMaps,
    pub stats: ReadStats,
    /// `--by`: (event, label, mapping start) → samples and bytes.
    pub by: FxHashMap<(usize, String, u64), ByRow>,
    /// `--timeline`: (interval index, event) → (samples, bytes).
    pub timeline: std::collections::BTreeMap<(u64, usize), (u64, u64)>,
    /// Which events have a byte weight (`--timeline`, `--by`).
    pub sized: Vec<bool>,
    /// `--pprof`: bytes beside the counts, for events with a size.
    pub bytes: FxHashMap<(usize, u32, Option<StackId>), u64>,
}

impl Aggregate {
    fn new(events: usize, space: StackSpace) -> Aggregate {
        Aggregate {
            book: StackBook::new(space),
            prefixes: FrameTable::default(),
            counts: FxHashMap::default(),
            maps: ProcessMaps::default(),
            stats: ReadStats {
                samples: vec![0; events],
                kept: vec![0; events],
                ..ReadStats::default()
            },
            by: FxHashMap::default(),
            timeline: std::collections::BTreeMap::new(),
            sized: Vec::new(),
            bytes: FxHashMap::default(),
        }
    }

    /// Marks where each stack's frames read from the live process begin (text and script).
    fn marking_recovered(mut self, on: bool) -> Aggregate {
        self.book.mark_recovered = on;
        self
    }
}

/// One kept sample, handed to a streaming output (`memperf script`) as it is read.
#[derive(Debug, Clone)]
pub struct ScriptRow<'a> {
    pub ev: usize,
    pub comm: u32,
    pub pid: u32,
    pub tid: u32,
    pub cpu: Option<u32>,
    pub time: Option<u64>,
    pub period: Option<u64>,
    pub addr: Option<u64>,
    /// PERF_SAMPLE_WEIGHT or WEIGHT_STRUCT, and PERF_SAMPLE_DATA_SRC (`memperf script -F
    /// weight,data_src`).
    pub weight: Option<u64>,
    pub data_src: Option<u64>,
    /// Tracepoint payload.
    pub raw: &'a [u8],
    pub stack: Option<StackId>,
}

/// Where a streaming output takes each kept sample, with the aggregate its stack and
/// command were interned in and the process table of the moment.
pub trait RowSink {
    fn row(&mut self, row: &ScriptRow<'_>, agg: &Aggregate, procs: &Processes) -> io::Result<()>;
}

/// The report's handler.
struct Aggregator<'c> {
    cfg: &'c ReportConfig,
    /// A streaming output's sink: kept samples go there instead of into the counts.
    rows: Option<&'c mut dyn RowSink>,
    agg: Aggregate,
    event_filter: Option<usize>,
    weighers: Vec<Weigher>,
    brk: BrkTracker,
    /// `syscalls:sys_exit_brk`, when the file has it: the break each brk call left.
    exit_brk: Option<(usize, FieldFormat)>,
    /// Each event's fixed sample period (not a frequency): the period of samples that do
    /// not carry PERF_SAMPLE_PERIOD, as perf script prints it.
    fixed_periods: Vec<Option<u64>>,
    /// (pid, tid) → the interned prefix of its samples, until a thread is named, forks or
    /// exits: not a `String` built and hashed for every sample.
    prefix_of: FxHashMap<(u32, u32), u32>,
    /// At most this many stack nodes and frames are interned; past it a sample is kept
    /// without its stack and counted (`ReadStats::folded`).
    stack_limit: Option<usize>,
    /// The (event, prefix, stack) the last sample counted went to (`inuse` pairs a block
    /// with its allocation's).
    pub(super) last_key: Option<(usize, u32, Option<StackId>)>,
    /// The event each event's samples are counted under, where it is not the event itself
    /// (`live::Windowed`: a probe's later sites count in its first site's columns); empty,
    /// each event is its own.
    pub(super) columns: Vec<usize>,
}

/// Reads every record of `file` through the session into an aggregate of stacks;
/// `progress` is told the file offset reached after each round.
pub fn read<'c>(
    cfg: &'c ReportConfig,
    file: &PerfDataFile,
    names: &[String],
    event_filter: Option<usize>,
    rows: Option<&'c mut dyn RowSink>,
    progress: &mut dyn FnMut(u64),
) -> io::Result<Aggregate> {
    let keep = Keep::replaying(file, cfg.space != StackSpace::Kernel);
    let mut session = Session::for_file(file, keep);
    let weighers = weighers(file, names, cfg.weight_field.as_deref());
    let mut a = Aggregator {
        cfg,
        rows,
        agg: Aggregate::new(file.events.len(), cfg.space).marking_recovered(
            cfg.mark_recovered
                || matches!(cfg.output, ReportOutput::Text | ReportOutput::Script(_)),
        ),
        event_filter,
        fixed_periods: file
            .events
            .iter()
            .map(|e| (e.attr.freq() == 0).then_some(e.attr.sample_period))
            .collect(),
        exit_brk: weigh::exit_brk_event(file, names),
        brk: BrkTracker::default(),
        weighers,
        prefix_of: FxHashMap::default(),
        stack_limit: None,
        last_key: None,
        columns: Vec::new(),
    };
    a.agg.book.jit = ToMonotonic::of(file).map(JitTimes::new);
    a.agg.book.fp_events = (0..file.events.len())
        .map(|ev| file.walked_by_fp(ev))
        .collect();
    a.agg.sized = a
        .weighers
        .iter()
        .map(|w| !matches!(w, Weigher::None))
        .collect();
    let read = order::replay(file, &mut session, &mut a, Slack::OneRound, progress)?;
    a.brk.finish();
    let mut agg = a.agg;
    let st = &mut agg.stats;
    st.brk_shrunk = a.brk.shrunk;
    st.brk_unknown_base = a.brk.unknown_base;
    st.records = read.records;
    st.late = read.late;
    if file.is_unfinished() {
        st.unfinished_at = Some(read.end.max(file.data_start()));
    }
    // The record cut off at the end of an unfinished recording is expected: the note says
    // where the records end.
    if !(file.is_unfinished() && read.cut_in_a_record) {
        st.read_error = read.read_error;
    }
    let ss = session.stats();
    (st.lost, st.lost_records, st.lost_samples) = (ss.lost, ss.lost_records, ss.lost_samples);
    st.throttled = ss.throttled;
    st.malformed = ss.malformed;
    // Skipped while recording (memperf's own files say) and while reading (perf's files).
    let recorded_skipped = file
        .features
        .memperf_stats
        .as_ref()
        .and_then(|m| m.get("foreign_skipped"))
        .unwrap_or(0);
    st.foreign_skipped = recorded_skipped + (ss.foreign_ids - ss.foreign_attributed);
    if let Some(u) = session.unwinders() {
        let s = u.stats();
        st.unwound = s.samples;
        st.truncated = s.truncated.total();
        st.truncated_reasons = s.truncated;
    }
    if let Some(m) = &file.features.memperf_stats {
        st.recorded_unwound = m.get("unwound").unwrap_or(0);
        st.recorded_truncated = m.get("truncated").unwrap_or(0);
        st.recorded_reasons =
            crate::unwind::TruncCounts::from_named(|n| m.get(&format!("truncated.{n}")));
    }
    st.event_unwinds = event_unwinds(file, &ss.unwinds, st.samples.len());
    (st.fp_walked, st.fp_cut) = (agg.book.fp_walked, agg.book.fp_cut);
    agg.maps = session.take_maps().unwrap_or_default();
    Ok(agg)
}

/// The session's unwinds per event, with the recorder's where its file counted them per
/// event; `None` when it counted some for all events together.
fn event_unwinds(
    file: &PerfDataFile,
    here: &[crate::session::Unwinds],
    events: usize,
) -> Option<Vec<crate::session::Unwinds>> {
    let mut per = vec![crate::session::Unwinds::default(); events.max(here.len())];
    for (p, h) in per.iter_mut().zip(here) {
        *p = *h;
    }
    let Some(m) = &file.features.memperf_stats else {
        return Some(per);
    };
    let mut split = 0;
    for (ev, p) in per.iter_mut().enumerate() {
        let recorded = m.event_unwinds(ev);
        p.unwound += recorded.unwound;
        p.truncated += recorded.truncated;
        split += recorded.unwound;
    }
    (split == m.get("unwound").unwrap_or(0)).then_some(per)
}

impl Handler for Aggregator<'_> {
    fn sample(&mut self, c: &SampleCtx<'_>) -> io::Result<()> {
        self.sample(c)
    }

    fn wants_unwind(&mut self, ev: usize, s: &Sample<'_>, procs: &Processes) -> bool {
        !matches!(
            self.cfg.output,
            ReportOutput::Timeline(_) | ReportOutput::By(_)
        ) && self.keep(ev, s, procs)
    }

    fn side_band(&mut self, r: &SideBand<'_>) -> io::Result<()> {
        if matches!(
            r.rec,
            Some(Record::Comm { .. } | Record::Fork { .. } | Record::Exit { .. })
        ) {
            self.prefix_of.clear();
        }
        if let Some(rec) = r.rec {
            self.agg.book.side_band(rec);
        }
        match r.rec {
            Some(&Record::Mmap { pid, .. } | &Record::Mmap2 { pid, .. }) if pid != u32::MAX => {
                if self.brk.is_pending(pid)
                    && let Some(start) = r.procs.maps().and_then(|m| m.heap_start(pid))
                    && let Some((bytes, targets)) = self.brk.resolve(pid, start)
                {
                    self.add_deferred(bytes, targets);
                }
            }
            Some(&Record::Comm {
                pid, exec: true, ..
            }) => self.brk.forget(pid),
            Some(&Record::Exit { pid, tid, .. }) if pid == tid => self.brk.forget(pid),
            _ => {}
        }
        Ok(())
    }
}

/// The maps of `procs` (the report's session always keeps them).
fn maps_of(procs: &Processes) -> &ProcessMaps {
    procs.maps().unwrap_or(ProcessMaps::empty())
}

impl Aggregator<'_> {
    fn keep(&self, ev: usize, s: &Sample<'_>, procs: &Processes) -> bool {
        let cfg = self.cfg;
        if self.event_filter.is_some_and(|e| e != ev) {
            return false;
        }
        let (pid, tid) = (s.pid.unwrap_or(0), s.tid.unwrap_or(0));
        if cfg.pids.as_ref().is_some_and(|p| !p.contains(&pid))
            || cfg.tids.as_ref().is_some_and(|t| !t.contains(&tid))
            || cfg
                .cpus
                .as_ref()
                .is_some_and(|c| !s.cpu.is_some_and(|cpu| c.contains(&cpu)))
        {
            return false;
        }
        if let Some(t) = s.time {
            if cfg.time.0.is_some_and(|start| t < start) || cfg.time.1.is_some_and(|end| t > end) {
                return false;
            }
        } else if cfg.time != (None, None) {
            return false;
        }
        if let Some(comms) = &cfg.comms {
            let comm = comm_of(procs, pid, tid);
            if !comms.contains(&comm) {
                return false;
            }
        }
        true
    }

    fn sample(&mut self, c: &SampleCtx<'_>) -> io::Result<()> {
        let (opened, s) = (c.ev, c.sample);
        // Counted under its column; weighed, filtered and paired as the event it is.
        let ev = self.columns.get(opened).copied().unwrap_or(opened);
        // The session's event indices are the file's (one at least): `get_mut` only so that
        // no index can panic on a file's word.
        if let Some(n) = self.agg.stats.samples.get_mut(ev) {
            *n += 1;
        }
        if let Some(t) = s.time.filter(|&t| t != 0) {
            self.agg.stats.first_time.get_or_insert(t);
            self.agg.stats.last_time = Some(t);
        }
        if let Some((exit_ev, ret)) = &self.exit_brk
            && *exit_ev == opened
            && let Some(v) = ret.read(s.raw.unwrap_or(&[]))
        {
            self.brk.exited(s.pid.unwrap_or(0), v);
        }
        if !self.keep(opened, s, c.procs) {
            return Ok(());
        }
        if let Some(n) = self.agg.stats.kept.get_mut(ev) {
            *n += 1;
        }
        let (pid, tid) = (s.pid.unwrap_or(0), s.tid.unwrap_or(0));
        if let ReportOutput::Timeline(interval) = self.cfg.output {
            let start = self.agg.stats.first_time.unwrap_or(0);
            let slot = s.time.unwrap_or(start).saturating_sub(start) / interval;
            let bytes =
                self.weigh_or_defer(opened, pid, s, c.procs, || Target::Timeline((slot, ev)));
            let e = self.agg.timeline.entry((slot, ev)).or_insert((0, 0));
            e.0 += 1;
            e.1 += bytes;
            return Ok(());
        }
        if let ReportOutput::By(by) = self.cfg.output {
            let label = by::label(c.procs, by, pid, tid, s.addr);
            let key = (ev, label.name, label.start);
            let bytes = self.weigh_or_defer(opened, pid, s, c.procs, || Target::By(key.clone()));
            // A mapping that grows (the heap) keeps one row, with its largest extent.
            let row = self.agg.by.entry(key).or_default();
            row.samples += 1;
            row.bytes += bytes;
            row.end = row.end.max(label.end);
            return Ok(());
        }
        let stack = self.stack_of(c, pid);
        let prefix = self.prefix(c.procs, pid, tid);
        if let Some(rows) = self.rows.as_mut() {
            let row = ScriptRow {
                ev,
                comm: prefix,
                pid,
                tid,
                cpu: s.cpu,
                time: s.time,
                period: s
                    .period
                    .or_else(|| self.fixed_periods.get(ev).copied().flatten()),
                addr: s.addr,
                weight: s.weight,
                data_src: s.data_src,
                raw: s.raw.unwrap_or(&[]),
                stack,
            };
            return rows.row(&row, &self.agg, c.procs);
        }
        let key = (ev, prefix, stack);
        self.last_key = Some(key);
        if matches!(self.cfg.output, ReportOutput::Pprof(_))
            && !matches!(self.weighers.get(opened), Some(Weigher::None) | None)
        {
            let b = self.weigh_or_defer(opened, pid, s, c.procs, || Target::Bytes(key));
            *self.agg.bytes.entry(key).or_insert(0) += b;
            *self.agg.counts.entry(key).or_insert(0) += 1;
            return Ok(());
        }
        let weight = match self.cfg.weight {
            Weight::Count => 1,
            // An event without a size is counted, as --by counts it.
            Weight::Bytes if !self.agg.sized.get(opened).copied().unwrap_or(false) => 1,
            Weight::Bytes => self.weigh_or_defer(opened, pid, s, c.procs, || Target::Counts(key)),
        };
        *self.agg.counts.entry(key).or_insert(0) += weight;
        Ok(())
    }

    /// The interned prefix (command, pid, tid, as `--per-pid`/`--per-tid` say) of a sample
    /// of thread `tid` of `pid`.
    fn prefix(&mut self, procs: &Processes, pid: u32, tid: u32) -> u32 {
        if let Some(&id) = self.prefix_of.get(&(pid, tid)) {
            return id;
        }
        let comm = comm_of(procs, pid, tid);
        let prefix = match self.cfg.prefix {
            Prefix::Comm => comm,
            Prefix::Pid => format!("{comm}-{pid}"),
            Prefix::Tid => format!("{comm}-{pid}/{tid}"),
        };
        let id = self.agg.prefixes.intern(&prefix);
        self.prefix_of.insert((pid, tid), id);
        id
    }

    /// The sample's stack, interned; `None` (counted) once the bound on stacks is reached.
    fn stack_of(&mut self, c: &SampleCtx<'_>, pid: u32) -> Option<StackId> {
        let book = &self.agg.book;
        if self
            .stack_limit
            .is_some_and(|limit| book.stacks.len().max(book.frames.len()) >= limit)
        {
            self.agg.stats.folded += 1;
            return None;
        }
        self.agg.book.stack_of(c, maps_of(c.procs), pid)
    }
}

/// The name of thread `tid` of `pid`, as perf names threads: its COMM, `swapper` for the idle
/// task (pid 0, whose samples system-wide kernel events have), else `:TID`.
pub(crate) fn comm_of(procs: &Processes, pid: u32, tid: u32) -> String {
    match procs.comm(pid, tid) {
        Some(c) => c.to_string(),
        None => unnamed_comm(tid),
    }
}

fn unnamed_comm(tid: u32) -> String {
    if tid == 0 {
        "swapper".to_string()
    } else {
        format!(":{tid}")
    }
}

#[cfg(test)]
mod tests {
    use super::unnamed_comm;

    #[test]
    fn threads_without_a_comm_are_named_as_perf_names_them() {
        assert_eq!(unnamed_comm(0), "swapper");
        assert_eq!(unnamed_comm(4242), ":4242");
    }
}
