//! `memperf report`: reads a perf.data file (memperf's or perf's), puts each round of records
//! in time order, replays the processes' mappings, unwinds raw user stacks offline with the
//! same framehop code as the recorder, and aggregates stacks of frame ids. Names are looked up
//! once per unique frame at the end, then stacks are printed folded or as a text report.

mod by;
mod header;
mod input;
pub(crate) mod maps;
pub(crate) mod output;
pub(crate) mod pprof;
pub(crate) mod printfmt;
mod script;
mod weigh;

use std::io::IsTerminal;

use anyhow::{Context, Result, bail};
use perf_event_open_sys::bindings as b;
use rustc_hash::FxHashMap;

use crate::cli::{Prefix, ReportConfig, ScriptField, StackSpace, Weight};
use crate::perfdata::tracing_data::FieldFormat;
use crate::perfdata::{PerfDataFile, RawFileRecord};
use crate::record::{self, ParseInfo, Record, Sample};
use crate::stacks::{FrameId, FrameTable, StackId, StackTable};
use crate::unwind::{MappingEvent, UnwindMode, Unwinders};

pub use by::ByRow;
use maps::ProcessMaps;
use weigh::{BrkTracker, Target};
pub use weigh::{Weigher, weighers};

const SAMPLE_STACK_USER: u64 = b::PERF_SAMPLE_STACK_USER as u64;
const SAMPLE_REGS_USER: u64 = b::PERF_SAMPLE_REGS_USER as u64;

// Callchain context markers (include/uapi/linux/perf_event.h, enum perf_callchain_context).
const CONTEXT_HV: u64 = -32i64 as u64;
pub(crate) const CONTEXT_KERNEL: u64 = -128i64 as u64;
pub(crate) const CONTEXT_USER: u64 = -512i64 as u64;
const CONTEXT_GUEST: u64 = -2048i64 as u64;
const CONTEXT_GUEST_KERNEL: u64 = -2176i64 as u64;
const CONTEXT_GUEST_USER: u64 = -2560i64 as u64;
pub(crate) const CONTEXT_MAX: u64 = -4095i64 as u64;

/// An unresolved frame: what is needed to name it once, later.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FrameKey {
    Kernel {
        addr: u64,
        ret: bool,
    },
    /// In a mapped module, by file offset.
    User {
        module: u32,
        offset: u64,
        ret: bool,
    },
    /// Anonymous executable memory or no known mapping: a JIT map may name it.
    Jit {
        pid: u32,
        addr: u64,
    },
}

impl FrameKey {
    /// A user address of `pid`: its module and file offset, or, in anonymous executable
    /// memory or outside every known mapping, a JIT frame that a perf map may name.
    pub fn user(maps: &ProcessMaps, pid: u32, addr: u64, ret: bool) -> FrameKey {
        match maps.lookup(pid, addr) {
            Some((module, offset)) if maps.module(module).kind() != maps::ModuleKind::Anon => {
                FrameKey::User {
                    module,
                    offset,
                    ret,
                }
            }
            _ => FrameKey::Jit { pid, addr },
        }
    }
}

/// What stays "no stack frames" for an empty stack in the aggregation key.
pub(crate) const EMPTY_STACK: StackId = u32::MAX;

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
    /// User stacks memperf unwound while recording and truncated (its feature section).
    pub recorded_unwound: u64,
    pub recorded_truncated: u64,
    pub recorded_reasons: crate::unwind::TruncCounts,
    /// Records that could not be parsed.
    pub malformed: u64,
    /// Why the data section ended early, if it did.
    pub read_error: Option<String>,
    pub first_time: Option<u64>,
    pub last_time: Option<u64>,
    pub records: u64,
    /// `--weight bytes`: bytes the break shrank by (not in the stacks), and brk calls whose
    /// starting break was unknown (weighed 0).
    pub brk_shrunk: u64,
    pub brk_unknown_base: u64,
}

/// The aggregated stacks of one file.
pub struct Aggregate {
    pub frames: FrameTable<FrameKey>,
    pub stacks: StackTable,
    pub prefixes: FrameTable<String>,
    /// (event, prefix, stack) → samples.
    pub counts: FxHashMap<(usize, u32, StackId), u64>,
    pub maps: ProcessMaps,
    pub stats: ReadStats,
    /// `--by`: (event, label, mapping start) → samples and bytes.
    pub by: FxHashMap<(usize, String, u64), ByRow>,
    /// `--timeline`: (interval index, event) → (samples, bytes).
    pub timeline: std::collections::BTreeMap<(u64, usize), (u64, u64)>,
    /// Which events have a byte weight (`--timeline`, `--by`).
    pub sized: Vec<bool>,
    pub kernel_frames: bool,
    /// `memperf script`: every kept sample, in time order.
    pub rows: Vec<ScriptRow>,
    /// `--pprof`: bytes beside the counts, for events with a size.
    pub bytes: FxHashMap<(usize, u32, StackId), u64>,
}

/// One sample kept for `memperf script`.
#[derive(Debug, Clone)]
pub struct ScriptRow {
    pub ev: usize,
    pub comm: u32,
    pub pid: u32,
    pub tid: u32,
    pub cpu: Option<u32>,
    pub time: Option<u64>,
    pub period: Option<u64>,
    pub addr: Option<u64>,
    /// Tracepoint payload.
    pub raw: Vec<u8>,
    pub stack: StackId,
}

struct Reader<'c> {
    cfg: &'c ReportConfig,
    infos: Vec<ParseInfo>,
    unwinders: Option<Unwinders>,
    comms: FxHashMap<u32, String>,
    agg: Aggregate,
    leaf_first: Vec<FrameId>,
    user_frames: Vec<u64>,
    event_filter: Option<usize>,
    weighers: Vec<Weigher>,
    brk: BrkTracker,
    /// `syscalls:sys_exit_brk`, when the file has it: the break each brk call left.
    exit_brk: Option<(usize, FieldFormat)>,
    /// (pid, address, is return address) → frame, valid until a mapping changes.
    frame_memo: FxHashMap<(u32, u64, bool), FrameId>,
    /// Each event's fixed sample period (not a frequency): the period of samples that do
    /// not carry PERF_SAMPLE_PERIOD, as perf script prints it.
    fixed_periods: Vec<Option<u64>>,
}

/// Runs `memperf report`.
pub fn run(cfg: ReportConfig) -> Result<i32> {
    // /proc/kallsyms takes ~80 ms to read: read it while the records are. Script payloads
    // name call sites with it even in user space only.
    let trace_syms = cfg
        .script
        .as_ref()
        .is_some_and(|f| f.contains(&ScriptField::Trace));
    let kallsyms = (cfg.space != StackSpace::User || trace_syms).then(|| {
        std::thread::spawn(|| {
            std::fs::read_to_string("/proc/kallsyms")
                .ok()
                .map(|t| std::sync::Arc::new(crate::symbolize::Kallsyms::from_text(&t)))
        })
    });
    let file = input::open(&cfg.input)?;
    let names = event_names(&file);
    let event_filter = match &cfg.event {
        Some(want) => Some(names.iter().position(|n| n == want).with_context(|| {
            format!(
                "no event `{want}` in `{}`; it has: {}",
                cfg.input,
                names.join(", ")
            )
        })?),
        None => None,
    };
    if cfg.weight == Weight::Bytes {
        let w = weighers(&file, &names);
        let no_size: Vec<&str> = (0..names.len())
            .filter(|&i| event_filter.is_none_or(|e| e == i))
            .filter(|&i| matches!(w[i], Weigher::None))
            .map(|i| names[i].as_str())
            .collect();
        if !no_size.is_empty() {
            bail!(
                "--weight bytes: no size is known for {}; sizes exist for fault events, \
                 syscalls:sys_enter_brk/mmap/munmap, kmem:kmalloc, kmem:kmem_cache_alloc and \
                 kmem:mm_page_alloc (choose one with --event)",
                no_size.join(", ")
            );
        }
    }
    let agg = read(&cfg, &file, event_filter)?;
    if !cfg.is_text_report() {
        header::warn_read_error(&agg.stats);
    }
    let with_samples: Vec<usize> = (0..names.len())
        .filter(|&i| agg.stats.kept.get(i).copied().unwrap_or(0) > 0)
        .collect();
    if (cfg.folded || cfg.flamegraph.is_some()) && event_filter.is_none() && with_samples.len() > 1
    {
        let list: Vec<&str> = with_samples.iter().map(|&i| names[i].as_str()).collect();
        bail!(
            "`{}` has samples of {} events ({}); folded stacks and flame graphs mix no events: choose one with --event",
            cfg.input,
            list.len(),
            list.join(", ")
        );
    }
    let kallsyms = kallsyms.and_then(|h| h.join().ok().flatten());
    // One table, shared with the symbolizer.
    let payload_syms = kallsyms.as_ref().filter(|_| trace_syms).cloned();
    let mut resolved = output::resolve(&cfg, &agg, kallsyms);
    if let Some(path) = &cfg.pprof {
        let mut profile = pprof::build(
            &cfg,
            file.features.sample_time,
            &names,
            &weighers(&file, &names),
            &agg,
            &resolved,
        );
        // When and where the file was recorded, beside what it lost.
        let when = header::recorded(&cfg.input, &file);
        if !when.is_empty() {
            pprof::add_comment(&mut profile, &when);
        }
        pprof::write(&profile, path)?;
        return Ok(0);
    }
    if let Some(fields) = &cfg.script {
        let input = script::ScriptInput {
            fields,
            file: &file,
            names: &names,
            kallsyms: payload_syms.as_deref(),
        };
        script::print(&input, &agg, &resolved)?;
        header::note_losses(&agg.stats);
        return Ok(0);
    }
    if cfg.by.is_some() || cfg.timeline.is_some() {
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::new(stdout.lock());
        if let Some(by) = cfg.by {
            output::write_by(&cfg, by, &names, &agg, &mut out)?;
        } else if let Some(interval) = cfg.timeline {
            output::write_timeline(&cfg, interval, &names, &agg, &mut out)?;
        }
        std::io::Write::flush(&mut out)?;
        return Ok(0);
    }
    if let Some(fg) = &cfg.flamegraph {
        let event = event_filter.or(with_samples.first().copied());
        output::write_flamegraph(&cfg, fg, &file, &names, event, &agg, &resolved)?;
        return Ok(0);
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if cfg.folded {
        output::write_folded(&cfg, &agg, &mut resolved, &mut out)?;
    } else {
        output::write_text(&cfg, &file, &names, &agg, &mut resolved, &mut out)?;
    }
    std::io::Write::flush(&mut out)?;
    if cfg.folded {
        header::note_losses(&agg.stats);
    }
    Ok(0)
}

/// Event names from the file's EVENT_DESC, else generic ones.
pub fn event_names(file: &PerfDataFile) -> Vec<String> {
    (0..file.events.len())
        .map(|i| {
            file.features
                .event_names
                .get(i)
                .filter(|n| !n.is_empty())
                .cloned()
                .or_else(|| Some(file.events[i].name.clone()).filter(|n| !n.is_empty()))
                .unwrap_or_else(|| format!("event{i}"))
        })
        .collect()
}

/// Reads every record of `file` into an aggregate of stacks.
pub fn read(
    cfg: &ReportConfig,
    file: &PerfDataFile,
    event_filter: Option<usize>,
) -> Result<Aggregate> {
    let infos: Vec<ParseInfo> = (0..file.events.len().max(1))
        .map(|i| file.parse_info(i))
        .collect();
    let raw_stacks = infos
        .iter()
        .any(|i| i.sample_type & SAMPLE_STACK_USER != 0 && i.sample_type & SAMPLE_REGS_USER != 0);
    let build_ids: FxHashMap<Vec<u8>, Vec<u8>> = file
        .features
        .build_ids
        .iter()
        .filter(|e| !e.kernel)
        .map(|e| (e.filename.as_bytes().to_vec(), e.build_id.clone()))
        .collect();
    let n = file.events.len();
    let names = event_names(file);
    let mut r = Reader {
        cfg,
        infos,
        unwinders: raw_stacks.then(|| Unwinders::new(UnwindMode::Dwarf)),
        comms: FxHashMap::default(),
        agg: Aggregate {
            frames: FrameTable::default(),
            stacks: StackTable::default(),
            prefixes: FrameTable::default(),
            counts: FxHashMap::default(),
            maps: ProcessMaps::new(build_ids),
            stats: ReadStats {
                samples: vec![0; n],
                kept: vec![0; n],
                ..ReadStats::default()
            },
            kernel_frames: false,
            by: FxHashMap::default(),
            timeline: std::collections::BTreeMap::new(),
            sized: Vec::new(),
            rows: Vec::new(),
            bytes: FxHashMap::default(),
        },
        leaf_first: Vec::new(),
        user_frames: Vec::new(),
        event_filter,
        frame_memo: FxHashMap::default(),
        fixed_periods: file
            .events
            .iter()
            .map(|e| (e.attr.freq() == 0).then_some(e.attr.sample_period))
            .collect(),
        weighers: weighers(file, &names),
        brk: BrkTracker::default(),
        exit_brk: weigh::exit_brk_event(file, &names),
    };
    r.agg.sized = r
        .weighers
        .iter()
        .map(|w| !matches!(w, Weigher::None))
        .collect();
    let progress = progress_bar(cfg, file);
    let mut round: Vec<Parsed<'_>> = Vec::new();
    let mut last_time = 0u64;
    for rec in file.records() {
        let rec = match rec {
            Ok(rec) => rec,
            Err(e) => {
                r.agg.stats.read_error = Some(e.to_string());
                break;
            }
        };
        r.agg.stats.records += 1;
        if rec.ty == record::PERF_RECORD_FINISHED_ROUND {
            r.flush_round(&mut round);
            if let Some(p) = &progress {
                p.set_position(rec.offset);
            }
            continue;
        }
        // Parsed once; records without a time keep their place after the previous one.
        let (ev, info) = r.info_for(file, &rec);
        let parsed = record::parse_record(rec.ty, rec.misc, rec.body, &info).ok();
        let time = parsed.as_ref().and_then(record_time).unwrap_or(last_time);
        last_time = time;
        round.push(Parsed {
            time,
            seq: round.len(),
            ev,
            ty: rec.ty,
            misc: rec.misc,
            rec: parsed,
        });
    }
    r.flush_round(&mut round);
    r.brk.finish();
    r.agg.stats.brk_shrunk = r.brk.shrunk;
    r.agg.stats.brk_unknown_base = r.brk.unknown_base;
    if let Some(p) = progress {
        p.finish_and_clear();
    }
    if let Some(u) = &r.unwinders {
        let s = u.stats();
        r.agg.stats.unwound = s.samples;
        r.agg.stats.truncated = s.truncated.total();
        r.agg.stats.truncated_reasons = s.truncated;
    }
    if let Some(m) = &file.features.memperf_stats {
        let st = &mut r.agg.stats;
        st.recorded_unwound = m.get("unwound").unwrap_or(0);
        st.recorded_truncated = m.get("truncated").unwrap_or(0);
        st.recorded_reasons =
            crate::unwind::TruncCounts::from_named(|n| m.get(&format!("truncated.{n}")));
    }
    Ok(r.agg)
}

/// One record of a round, parsed once, with its sort key.
struct Parsed<'a> {
    time: u64,
    seq: usize,
    ev: Option<usize>,
    ty: u32,
    misc: u16,
    rec: Option<Record<'a>>,
}

fn record_time(rec: &Record<'_>) -> Option<u64> {
    match rec {
        Record::Sample(s) => s.time,
        Record::Mmap { id, .. }
        | Record::Mmap2 { id, .. }
        | Record::Comm { id, .. }
        | Record::Fork { id, .. }
        | Record::Exit { id, .. } => id.time,
        Record::Lost { sid, .. }
        | Record::Throttle { sid, .. }
        | Record::LostSamples { sid, .. } => sid.time,
        _ => None,
    }
}

fn progress_bar(cfg: &ReportConfig, file: &PerfDataFile) -> Option<indicatif::ProgressBar> {
    if cfg.quiet || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(file.data_end());
    bar.set_style(
        indicatif::ProgressStyle::with_template("reading {bar:40} {bytes}/{total_bytes} {eta}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    Some(bar)
}

impl Reader<'_> {
    fn info_for(&self, file: &PerfDataFile, rec: &RawFileRecord<'_>) -> (Option<usize>, ParseInfo) {
        let ev = file.event_for(rec.ty, rec.body);
        let info = self.infos[ev.unwrap_or(0).min(self.infos.len() - 1)];
        (ev, info)
    }

    fn flush_round(&mut self, round: &mut Vec<Parsed<'_>>) {
        round.sort_unstable_by_key(|p| (p.time, p.seq));
        for p in round.drain(..) {
            self.handle(&p);
        }
    }

    fn handle(&mut self, p: &Parsed<'_>) {
        let Some(parsed) = p.rec else {
            if p.ty < record::PERF_RECORD_USER_TYPE_START {
                self.agg.stats.malformed += 1;
            }
            return;
        };
        let (ev, rec) = (p.ev, p);
        match parsed {
            Record::Sample(s) => {
                if let Some(ev) = ev {
                    self.sample(ev, rec.misc, &s);
                } else {
                    self.agg.stats.malformed += 1;
                }
            }
            Record::Mmap {
                pid,
                addr,
                len,
                pgoff,
                filename,
                ..
            } => self.mmap(pid, addr, len, pgoff, true, filename, None, None),
            Record::Mmap2 {
                pid,
                addr,
                len,
                pgoff,
                maj,
                min,
                ino,
                build_id,
                prot,
                filename,
                ..
            } => self.mmap(
                pid,
                addr,
                len,
                pgoff,
                prot & libc::PROT_EXEC as u32 != 0
                    || rec.misc & b::PERF_RECORD_MISC_MMAP_DATA as u16 == 0,
                filename,
                build_id,
                build_id.is_none().then_some((maj, min, ino)),
            ),
            Record::Comm {
                pid,
                tid,
                name,
                exec,
                ..
            } => {
                if exec {
                    self.frame_memo.clear();
                    self.brk.forget(pid);
                    self.agg.maps.exec(pid);
                    if let Some(u) = &mut self.unwinders {
                        u.handle_exec(pid);
                    }
                }
                self.comms
                    .insert(tid, String::from_utf8_lossy(name).into_owned());
            }
            Record::Fork {
                pid,
                ppid,
                tid,
                ptid,
                ..
            } => {
                if pid != ppid {
                    self.frame_memo.clear();
                    self.agg.maps.fork(pid, ppid);
                    if let Some(u) = &mut self.unwinders {
                        u.handle_fork(pid, ppid);
                    }
                }
                // A new thread or process starts with its parent's name.
                if let Some(c) = self.comms.get(&ptid).cloned() {
                    self.comms.insert(tid, c);
                }
            }
            Record::Exit { pid, tid, .. } if pid == tid => {
                self.brk.forget(pid);
                if let Some(u) = &mut self.unwinders {
                    u.handle_exit(pid);
                }
            }
            Record::Lost { lost, .. } => {
                self.agg.stats.lost += lost;
                self.agg.stats.lost_records += 1;
            }
            Record::LostSamples { lost, .. } => self.agg.stats.lost_samples += lost,
            Record::Throttle {
                unthrottle: false, ..
            } => self.agg.stats.throttled += 1,
            _ => {}
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn mmap(
        &mut self,
        pid: u32,
        addr: u64,
        len: u64,
        pgoff: u64,
        exec: bool,
        path: &[u8],
        build_id: Option<&[u8]>,
        dev_ino: Option<(u32, u32, u64)>,
    ) {
        if pid == u32::MAX {
            // The kernel's own mapping ([kernel.kallsyms]_text): kernel frames use kallsyms.
            return;
        }
        self.frame_memo.clear();
        self.agg.maps.map(pid, addr, len, pgoff, path, build_id);
        if self.brk.is_pending(pid)
            && let Some(start) = self.agg.maps.heap_start(pid)
            && let Some((bytes, targets)) = self.brk.resolve(pid, start)
        {
            self.add_deferred(bytes, targets);
        }
        if let Some(u) = &mut self.unwinders {
            u.handle_mmap(&MappingEvent {
                pid,
                start: addr,
                len,
                pgoff,
                exec,
                path,
                dev_ino,
                build_id,
            });
        }
    }

    fn keep(&self, ev: usize, s: &Sample<'_>) -> bool {
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
            let comm = self.comm_of(pid, tid);
            if !comms.contains(&comm) {
                return false;
            }
        }
        true
    }

    fn comm_of(&self, pid: u32, tid: u32) -> String {
        self.comms
            .get(&tid)
            .or_else(|| self.comms.get(&pid))
            .cloned()
            .unwrap_or_else(|| unnamed_comm(tid))
    }

    fn sample(&mut self, ev: usize, misc: u16, s: &Sample<'_>) {
        self.agg.stats.samples[ev] += 1;
        if let Some(t) = s.time.filter(|&t| t != 0) {
            self.agg.stats.first_time.get_or_insert(t);
            self.agg.stats.last_time = Some(t);
        }
        if let Some((exit_ev, ret)) = &self.exit_brk
            && *exit_ev == ev
            && let Some(v) = ret.read(s.raw.unwrap_or(&[]))
        {
            self.brk.exited(s.pid.unwrap_or(0), v);
        }
        if !self.keep(ev, s) {
            return;
        }
        self.agg.stats.kept[ev] += 1;
        let (pid, tid) = (s.pid.unwrap_or(0), s.tid.unwrap_or(0));
        if let Some(interval) = self.cfg.timeline {
            let start = self.agg.stats.first_time.unwrap_or(0);
            let slot = s.time.unwrap_or(start).saturating_sub(start) / interval;
            let bytes = self.weigh_or_defer(ev, pid, s, || Target::Timeline((slot, ev)));
            let e = self.agg.timeline.entry((slot, ev)).or_insert((0, 0));
            e.0 += 1;
            e.1 += bytes;
            return;
        }
        if let Some(by) = self.cfg.by {
            let label = self.by_label(by, pid, tid, s.addr);
            let key = (ev, label.name, label.start);
            let bytes = self.weigh_or_defer(ev, pid, s, || Target::By(key.clone()));
            // A mapping that grows (the heap) keeps one row, with its largest extent.
            let row = self.agg.by.entry(key).or_default();
            row.samples += 1;
            row.bytes += bytes;
            row.end = row.end.max(label.end);
            return;
        }
        self.leaf_first.clear();
        let space = self.cfg.space;
        let mut user_seen = false;
        if let Some(chain) = &s.callchain {
            let mut context = None;
            let mut first_in_context = true;
            for addr in chain.iter() {
                if addr >= CONTEXT_MAX {
                    context = Some(addr);
                    first_in_context = true;
                    continue;
                }
                let ret = !first_in_context;
                first_in_context = false;
                match context {
                    Some(CONTEXT_KERNEL) => self.kernel_frame(addr, ret),
                    Some(CONTEXT_USER) => {
                        user_seen = true;
                        self.user_frame(pid, addr, ret);
                    }
                    Some(
                        CONTEXT_HV | CONTEXT_GUEST | CONTEXT_GUEST_KERNEL | CONTEXT_GUEST_USER,
                    ) => {}
                    _ => {
                        // No marker: decide by address, as perf does for old files.
                        if addr >= 0xffff_8000_0000_0000 {
                            self.kernel_frame(addr, ret);
                        } else {
                            user_seen = true;
                            self.user_frame(pid, addr, ret);
                        }
                    }
                }
            }
        }
        if !user_seen && space != StackSpace::Kernel {
            self.unwind_raw(pid, s);
        }
        if self.leaf_first.is_empty()
            && let Some(ip) = s.ip
        {
            let cpumode = u32::from(misc) & b::PERF_RECORD_MISC_CPUMODE_MASK;
            if cpumode == b::PERF_RECORD_MISC_KERNEL {
                self.kernel_frame(ip, false);
            } else if cpumode == b::PERF_RECORD_MISC_USER {
                self.user_frame(pid, ip, false);
            }
        }
        let stack = self
            .agg
            .stacks
            .intern(self.leaf_first.iter().rev().copied())
            .unwrap_or(EMPTY_STACK);
        let prefix = match self.cfg.prefix {
            Prefix::Comm => self.comm_of(pid, tid),
            Prefix::Pid => format!("{}-{pid}", self.comm_of(pid, tid)),
            Prefix::Tid => format!("{}-{pid}/{tid}", self.comm_of(pid, tid)),
        };
        let prefix = self.agg.prefixes.intern(&prefix);
        if self.cfg.script.is_some() {
            self.agg.rows.push(ScriptRow {
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
                raw: s.raw.map(<[u8]>::to_vec).unwrap_or_default(),
                stack,
            });
            return;
        }
        if self.cfg.pprof.is_some() && !matches!(self.weighers.get(ev), Some(Weigher::None) | None)
        {
            let b = self.weigh_or_defer(ev, pid, s, || Target::Bytes((ev, prefix, stack)));
            *self.agg.bytes.entry((ev, prefix, stack)).or_insert(0) += b;
            *self.agg.counts.entry((ev, prefix, stack)).or_insert(0) += 1;
            return;
        }
        let weight = match self.cfg.weight {
            Weight::Count => 1,
            Weight::Bytes => {
                self.weigh_or_defer(ev, pid, s, || Target::Counts((ev, prefix, stack)))
            }
        };
        *self.agg.counts.entry((ev, prefix, stack)).or_insert(0) += weight;
    }

    fn kernel_frame(&mut self, addr: u64, ret: bool) {
        if self.cfg.space == StackSpace::User {
            return;
        }
        self.agg.kernel_frames = true;
        let id = self.agg.frames.intern(&FrameKey::Kernel { addr, ret });
        self.leaf_first.push(id);
    }

    fn user_frame(&mut self, pid: u32, addr: u64, ret: bool) {
        if self.cfg.space == StackSpace::Kernel {
            return;
        }
        if let Some(&id) = self.frame_memo.get(&(pid, addr, ret)) {
            self.leaf_first.push(id);
            return;
        }
        let key = FrameKey::user(&self.agg.maps, pid, addr, ret);
        let id = self.agg.frames.intern(&key);
        self.frame_memo.insert((pid, addr, ret), id);
        self.leaf_first.push(id);
    }

    /// Unwinds a raw user stack (`--call-graph dwarf` files) into user frames.
    fn unwind_raw(&mut self, pid: u32, s: &Sample<'_>) {
        let (Some(u), Some(regs), Some(stack)) = (&mut self.unwinders, &s.regs_user, &s.stack_user)
        else {
            return;
        };
        if regs.abi == 0 {
            return;
        }
        let Some(user) = crate::session::user_regs(regs) else {
            return;
        };
        self.user_frames.clear();
        // Truncated unwinds keep their partial stack; the unwinder counts them.
        u.unwind(pid, user, stack.data, &mut self.user_frames);
        let frames = std::mem::take(&mut self.user_frames);
        for (i, &addr) in frames.iter().enumerate() {
            self.user_frame(pid, addr, i > 0);
        }
        self.user_frames = frames;
    }
}

/// The name of a thread no COMM named: perf's `swapper` for the idle task (pid 0, whose
/// samples system-wide kernel events have), else `:TID`.
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
