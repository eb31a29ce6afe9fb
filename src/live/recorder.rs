//! The recording run every live tool shares: resolve and open the events, start the target,
//! synthesize the processes that existed before, drain the rings into the session and the
//! tool's handler (and, when asked, into a perf.data file), stop, and count what was lost.
//! `memperf record` is this run with a file and no tool; `oomkill -w FILE` is both.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};

use super::drain::DrainStats;
use super::driver::{
    self, Driver, Finished, Flow, OnSignal, Round, SignalState, StopReason, Until,
};
use super::open::{self, Opened, ResolvedEvent};
use super::priority::{self, Raised};
use super::remap;
use super::synth;
use super::writer::RecordWriter;
use crate::config::record::{CallGraph, Consume, RecordConfig, Target, UnwindWhen};
use crate::maps::ProcessMaps;
use crate::perfdata::{self, ClockData, EventDesc, PerfDataWriter};
use crate::procfs;
use crate::records::{self, ParseInfo, Sample};
use crate::session::{
    EventType, Handler, Keep, Processes, Reaper, SampleCtx, SampleData, Session, SideBand,
};
use crate::sys::child::{ExitStatusInfo, GatedChild};
use crate::sys::diagnose::SystemFacts;
use crate::sys::tracefs::Tracefs;
use crate::unwind::UnwindMode;
use features::build_features;

mod features;

/// One live run.
pub(crate) struct Run<'a> {
    /// The events, target, rings, stack mode and stop condition; `output` is written only
    /// when `write` is set.
    pub cfg: &'a RecordConfig,
    pub write: bool,
    /// Events already resolved (with their own sampling), else `cfg.events` are.
    pub events: Option<(Vec<ResolvedEvent>, Option<Tracefs>)>,
    /// Keep every process's mappings and thread names in the session (tools that name
    /// frames, files or commands).
    pub keep_processes: bool,
    /// Follow mremap moves beside fault events (`live::remap`): `record` and the fault
    /// tools. Not yet the allocation tables (`leak`, `rss`, `heap`), which join faults to
    /// allocations, not to mappings: their uprobes and mremap's events together are untested.
    pub follow_remaps: bool,
    /// How often the handler's `round` is told an interval ended.
    pub tick: Option<Duration>,
    pub on_signal: OnSignal,
}

/// A handler of a live run: told when the events are live and after every drain round.
pub(crate) trait Live: Handler {
    /// The events are enabled and the command (if any) released, at `clock`.
    fn started(
        &mut self,
        _opened: &Opened,
        _child: Option<i32>,
        _clock: Option<ClockData>,
    ) -> Result<()> {
        Ok(())
    }

    /// After each drain round; `Flow::Stop` ends the run (a tool's count was reached).
    fn round(&mut self, _session: &mut Session, _round: Round) -> Result<Flow> {
        Ok(Flow::Continue)
    }
}

/// What a finished run leaves: the session (its process table and counts), how it ended and
/// what it wrote.
pub(crate) struct Recorded {
    pub session: Session,
    pub reason: StopReason,
    pub exit: Option<ExitStatusInfo>,
    pub drain: DrainStats,
    pub notes: Vec<String>,
    /// The events' names, as opened (globs expanded, labels applied).
    pub names: Vec<String>,
    pub elapsed: Duration,
    /// Every loss: the LOST records, and what the kernel counted but had no room to report.
    pub lost: u64,
    /// The file's size and the size of its data section, when one was written.
    pub file_bytes: u64,
    pub data_bytes: u64,
    /// The pages of one ring.
    pub pages: Option<usize>,
    /// What became of the reader's priority (`live::priority`).
    pub priority: Raised,
    /// The sample clock at the end.
    pub now: Option<u64>,
    /// The events, still open (disabled): they close when the caller drops this, after its
    /// report. Closing the last fd of a uprobe takes the kernel about 80 ms, one probe at a
    /// time (1.6 s for leak's 20 probes), which the report need not wait for.
    pub opened: Opened,
}

/// The writer (when the run writes a file) and the tool, fed the same records.
struct Tee<'h, H> {
    writer: Option<RecordWriter>,
    tool: &'h mut H,
}

impl<H: Handler> Handler for Tee<'_, H> {
    fn sample(&mut self, s: &SampleCtx<'_>) -> std::io::Result<()> {
        if let Some(w) = &mut self.writer {
            w.sample(s)?;
        }
        self.tool.sample(s)
    }

    fn wants_unwind(&mut self, ev: usize, s: &Sample<'_>, procs: &Processes) -> bool {
        // The file keeps every stack it was asked for (as a callchain).
        let tool = self.tool.wants_unwind(ev, s, procs);
        self.writer.as_ref().is_some_and(|w| w.wants_unwind(ev)) || tool
    }

    fn side_band(&mut self, r: &SideBand<'_>) -> std::io::Result<()> {
        if let Some(w) = &mut self.writer {
            w.side_band(r)?;
        }
        self.tool.side_band(r)
    }

    fn hijacked_returns(&self, tid: u32, out: &mut Vec<(u64, u64)>) {
        self.tool.hijacked_returns(tid, out);
    }
}

/// Runs `run`, handing every record to `tool` (and to the file when `run.write`).
pub(crate) fn record<H: Live>(mut run: Run<'_>, tool: &mut H) -> Result<Recorded> {
    let cfg = run.cfg;
    let Prepared {
        opened,
        signals,
        gated,
        out_file,
    } = prepare(&mut run)?;
    let child_pid = gated.as_ref().map(|g| g.pid());
    let online = unwinds_online(cfg);
    // After the command was forked: it keeps the nice value it had.
    let priority = priority::raise_for(cfg, online);
    let (layouts, descs) = describe_events(&opened, online)?;
    let writer = out_file
        .map(|f| open_writer(f, &cfg.output, descs, layouts.out))
        .transpose()?;
    let mut tee = Tee { writer, tool };
    let keep = session_keep(&run, &opened, online, tee.writer.is_some());
    let mut session = new_session(cfg, &opened, layouts.ring.clone(), keep, child_pid);
    let sizer = online
        .then(|| super::resize::StackSizer::new(cfg, &opened, child_pid, &mut session))
        .flatten();
    let mut driver = Driver::new(opened, signals, gated, &cfg.target)
        .with_sizer(sizer)
        .prompt(online.then(driver::prompt_every).flatten())
        .discard(cfg.consume == Consume::None)
        .sink_context(write_failed(cfg));
    enable(cfg, &mut driver, &mut session, &mut tee, &layouts.ring[0])?;
    let clock = RunClock::now(&mut driver);
    let started = Instant::now();
    // The handler speaks first (a tool's banner, record's line), then the command runs:
    // their outputs often share a terminal or a pipe.
    tee.tool
        .started(driver.opened(), driver.child_pid(), clock.start)?;
    driver.release()?;
    let until = Until {
        duration: cfg.duration,
        tick: run.tick,
        on_signal: run.on_signal,
    };
    let reason = drive(cfg, &mut driver, &mut session, &mut tee, &until)?;
    // The run's length ends with its stop condition (the command's exit), not with the
    // last drain and the file's sections.
    let elapsed = started.elapsed();
    if reason == StopReason::Requested {
        driver.signal_child(libc::SIGTERM);
    }
    let done = driver.finish(&mut session, &mut tee)?;
    if let Some(counted) = done.kernel_lost {
        report_unflushed_losses(counted, &done.opened, &mut session, &mut tee)
            .with_context(|| write_failed(cfg))?;
    }
    let sizes = match tee.writer.take() {
        Some(w) => finish_file(w, cfg, &done.opened, &session, &clock.ended(done.now))?,
        None => FileSizes::default(),
    };
    Ok(recorded(session, done, elapsed, priority, sizes))
}

/// What is ready before the events are enabled: the events resolved and opened
/// (disabled), the signals caught, the command forked and held before its exec, the
/// output file created.
struct Prepared {
    opened: Opened,
    signals: SignalState,
    gated: Option<GatedChild>,
    out_file: Option<std::fs::File>,
}

/// Resolves the run's events (unless it has them) and opens them, with mremap's beside
/// fault events when the run follows moves; creates the output file and forks the command.
fn prepare(run: &mut Run<'_>) -> Result<Prepared> {
    let cfg = run.cfg;
    open::check_period(cfg)?;
    let facts = SystemFacts::read();
    let (mut events, tracefs) = match run.events.take() {
        Some(e) => e,
        None => open::resolve_events_in(&cfg.events, &cfg.target)?,
    };
    let remap_note = (cfg.side_band && run.follow_remaps)
        .then(|| remap::add_events(&mut events, &cfg.target))
        .flatten();
    driver::check_attach(&cfg.target)?;
    let out_file = run.write.then(|| prepare_output(&cfg.output)).transpose()?;
    let signals = SignalState::install()?;
    let gated = driver::spawn_gated(cfg.command.as_deref(), cfg.command_stdout)?;
    let child_pid = gated.as_ref().map(|g| g.pid());
    let mut opened = open::open_all(cfg, events, tracefs, child_pid, &facts)?;
    opened.notes.extend(remap_note);
    Ok(Prepared {
        opened,
        signals,
        gated,
        out_file,
    })
}

/// Whether the session unwinds DWARF stacks while recording (with the live process at
/// hand) rather than leaving the copies to the file.
fn unwinds_online(cfg: &RecordConfig) -> bool {
    matches!(cfg.widest_call_graph(), CallGraph::Dwarf { .. }) && cfg.unwind == UnwindWhen::Online
}

/// The error context of every write to the recording.
fn write_failed(cfg: &RecordConfig) -> String {
    format!("failed to write `{}`", cfg.output.display())
}

/// The perf.data writer of the run, on the file `prepare_output` created at `path`.
fn open_writer(
    f: std::fs::File,
    path: &Path,
    descs: Vec<EventDesc>,
    out_layouts: Vec<ParseInfo>,
) -> Result<RecordWriter> {
    // The recovered marks' temporary file goes beside a recording on disk (not in /dev
    // for `-o /dev/null`).
    let regular = f.metadata().is_ok_and(|m| m.is_file());
    let dir = path.parent().filter(|_| regular).map(|d| {
        if d.as_os_str().is_empty() {
            Path::new(".")
        } else {
            d
        }
    });
    let file = PerfDataWriter::new(f, descs)
        .with_context(|| format!("failed to write `{}`", path.display()))?;
    Ok(RecordWriter::new(file, out_layouts, dir))
}

/// What the session keeps of the processes: what the handler asked for, the mappings
/// when mremap's moves are followed, the sampled files when a file is written.
fn session_keep(run: &Run<'_>, opened: &Opened, online: bool, writing: bool) -> Keep {
    Keep {
        unwind: online.then_some(UnwindMode::Dwarf),
        // A move mremap made is told by the mapping that held its old address.
        maps: (run.keep_processes || opened.events.iter().any(|e| remap::is_added(&e.spec.name)))
            .then(ProcessMaps::default),
        comms: run.keep_processes,
        dsos: writing,
    }
}

/// The session of a live run: the opened events' layouts (`ring`), kinds and stack
/// limits, mremap's events, the samples left out, and this kernel's way with twins.
fn new_session(
    cfg: &RecordConfig,
    opened: &Opened,
    ring: Vec<ParseInfo>,
    keep: Keep,
    child_pid: Option<i32>,
) -> Session {
    let online = keep.unwind.is_some();
    let types = opened
        .events
        .iter()
        .map(|e| EventType {
            type_: e.type_,
            config: e.config,
        })
        .collect();
    let max_stack = opened
        .events
        .iter()
        .map(|e| e.spec.terms.max_stack)
        .collect();
    let names: Vec<String> = opened.events.iter().map(|e| e.spec.name.clone()).collect();
    // A system-wide run leaves out memperf's samples, and its child's until the exec (told
    // by the exec's COMM record: without side band, as `stat` records, none comes, and the
    // child's few samples before its exec stay in).
    let exclude_self = cfg.target == Target::SystemWide && !cfg.include_self;
    let session = Session::new(ring, opened.ids.clone(), keep)
        .with_types(types)
        .with_max_stack(max_stack)
        .with_shedding(cfg.shed_stacks.clone())
        .with_remaps(&names)
        .with_exclude_pid(exclude_self.then(std::process::id))
        .with_exclude_until_exec(
            child_pid
                .filter(|_| exclude_self && cfg.side_band)
                .and_then(|p| u32::try_from(p).ok()),
        )
        .with_sample_data(SampleData::of_release(
            &std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default(),
        ));
    if online {
        session.with_live_stacks()
    } else {
        session
    }
}

/// Enables the events and writes the processes that existed before (the side band's
/// MMAP2 and COMM records from /proc), in the order the target needs.
fn enable(
    cfg: &RecordConfig,
    driver: &mut Driver,
    session: &mut Session,
    sink: &mut dyn Handler,
    layout: &ParseInfo,
) -> Result<()> {
    // Processes attached to (-p, -t) are enabled before they are described: describing
    // them reads /proc, and nothing they do meanwhile is missed (their samples wait in the
    // rings, and the files their stacks need are read when the first of those samples is
    // unwound). A system-wide recording describes every process first: its rings would
    // fill with the whole machine's samples while nothing drains them.
    let attach = matches!(cfg.target, Target::Pids(_) | Target::Tids(_));
    if attach {
        driver.enable()?;
    }
    if cfg.side_band {
        let first_id = driver.opened().events[0].ids.first().copied().unwrap_or(0);
        synth::synthesize(&synth_pids(&cfg.target), first_id, layout, session, sink)
            .with_context(|| write_failed(cfg))?;
    }
    if !attach {
        driver.enable()?;
    }
    Ok(())
}

/// The sample clock when the events were enabled, CLOCK_MONOTONIC beside it, and where
/// the run ended on it.
struct RunClock {
    start: Option<ClockData>,
    /// (sample clock, CLOCK_MONOTONIC) at the start: a report places samples among a
    /// jitdump's loads, stamped on that clock, by them.
    sync_start: Option<(u64, u64)>,
    end: Option<u64>,
}

impl RunClock {
    fn now(driver: &mut Driver) -> RunClock {
        let clockid = if driver.opened().clock_monotonic {
            libc::CLOCK_MONOTONIC as u32
        } else {
            ClockData::KERNEL_DEFAULT
        };
        let start = driver.clock_now().map(|now| ClockData::now(clockid, now));
        let sync_start = start.and_then(|c| {
            let monotonic = driver.opened().clock.monotonic_at(c.clock_ns)?;
            Some((c.clock_ns, monotonic))
        });
        RunClock {
            start,
            sync_start,
            end: None,
        }
    }

    /// The same, with the sample clock at the run's end.
    fn ended(&self, end: Option<u64>) -> RunClock {
        RunClock { end, ..*self }
    }
}

/// Drains the rings until the run's stop condition, handing the records to the session;
/// after each round the file gets its FINISHED_ROUND and checkpoint, the processes whose
/// EXIT record was lost are dropped, and the tool says whether to go on.
fn drive<H: Live>(
    cfg: &RecordConfig,
    driver: &mut Driver,
    session: &mut Session,
    tee: &mut Tee<'_, H>,
    until: &Until,
) -> Result<StopReason> {
    let mut round_buf = Vec::with_capacity(16);
    // The processes whose EXIT record was lost go too (see `session::reap`).
    let mut reaper = cfg.side_band.then(Reaper::new);
    let mut checkpoint = Instant::now();
    driver.run_until(session, tee, until, |session, tee, round| {
        if let Some(w) = &mut tee.writer {
            // Each round that took records ends with a FINISHED_ROUND, as perf's do.
            if cfg.consume != Consume::None && round.drained > 0 {
                round_buf.clear();
                records::encode_finished_round(&mut round_buf);
                w.writer
                    .write_record(&round_buf)
                    .with_context(|| write_failed(cfg))?;
            }
            // Whatever kills the recorder, the file reads up to the last second.
            if checkpoint.elapsed() >= CHECKPOINT_EVERY {
                checkpoint = Instant::now();
                w.writer.checkpoint().with_context(|| write_failed(cfg))?;
            }
        }
        if let Some(r) = &mut reaper {
            r.round(session, round.number, round.passed);
        }
        tee.tool.round(session, round)
    })
}

/// The size of the file written, and of its data section.
#[derive(Default)]
struct FileSizes {
    file: u64,
    data: u64,
}

/// Ends the file: its feature sections, with where the run ended on the sample clock and
/// the recovered marks the writer could not keep.
fn finish_file(
    mut w: RecordWriter,
    cfg: &RecordConfig,
    opened: &Opened,
    session: &Session,
    clock: &RunClock,
) -> Result<FileSizes> {
    let mut features = build_features(cfg, opened, session, clock.start, &mut w.kept);
    // Where the run ended on the sample clock: a replay's intervals end there too.
    if let (Some(stats), Some(end)) = (&mut features.memperf_stats, clock.end) {
        stats.counts.push(("end_time".to_string(), end));
        let sync_end = opened.clock.monotonic_at(end).map(|m| (end, m));
        stats.set_clock_sync(clock.sync_start, sync_end);
    }
    if let Some(stats) = &mut features.memperf_stats
        && w.recovered.dropped > 0
    {
        stats
            .counts
            .push(("recovered_unmarked".to_string(), w.recovered.dropped));
    }
    let data = w.writer.data_bytes();
    let file = w
        .writer
        .finish_with_marks(&features, Some(&w.recovered))
        .with_context(|| format!("failed to finish `{}`", cfg.output.display()))?;
    Ok(FileSizes { file, data })
}

/// What the run leaves its caller.
fn recorded(
    session: Session,
    done: Finished,
    elapsed: Duration,
    priority: Raised,
    sizes: FileSizes,
) -> Recorded {
    let Finished {
        reason,
        exit,
        kernel_lost,
        drain,
        now,
        mut opened,
    } = done;
    let pages = opened
        .rings
        .first()
        .map(|r| r.data_size() / crate::sys::page_size());
    let st = session.stats();
    let lost = (st.lost + st.lost_samples).max(kernel_lost.unwrap_or(0));
    Recorded {
        reason,
        exit,
        drain,
        names: remap::names_shown(&opened.events)
            .into_iter()
            .map(str::to_string)
            .collect(),
        notes: std::mem::take(&mut opened.notes),
        elapsed,
        lost,
        file_bytes: sizes.file,
        data_bytes: sizes.data,
        pages,
        priority,
        now,
        session,
        opened,
    }
}

/// How often the file's header is brought up to date with the records flushed.
const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Moves an existing recording aside to `FILE.old`, as perf does, and creates the new one
/// (0600, never through a symbolic link nor over another user's file: see
/// [`perfdata::create_output`]).
fn prepare_output(path: &Path) -> Result<std::fs::File> {
    // Recording into nothing (to measure the recorder alone), as with perf.
    if path == Path::new("/dev/null") {
        return std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .context("failed to open /dev/null");
    }
    let refuse = |why: String| {
        anyhow!(
            "refusing to write the recording to `{}`: {why}",
            path.display()
        )
    };
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => {
            anyhow::bail!(
                "failed to create output file `{}`: it is a directory",
                path.display()
            )
        }
        Ok(meta) => {
            if let Some(why) = perfdata::unsafe_to_replace(&meta) {
                return Err(refuse(why));
            }
            let mut old = path.as_os_str().to_owned();
            old.push(".old");
            let old = std::path::PathBuf::from(old);
            if let Ok(m) = std::fs::symlink_metadata(&old)
                && let Some(why) = perfdata::unsafe_to_replace(&m)
            {
                return Err(refuse(format!("`{}` exists and {why}", old.display())));
            }
            std::fs::rename(path, &old).with_context(|| {
                format!("failed to move the existing `{}` aside", path.display())
            })?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(e).with_context(|| format!("failed to look at `{}`", path.display()));
        }
    }
    perfdata::create_output(path)
        .with_context(|| format!("failed to create output file `{}`", path.display()))
}

/// The processes whose mappings are written before the recording starts (a command's are
/// seen at its exec).
fn synth_pids(target: &Target) -> Vec<u32> {
    match target {
        Target::SystemWide => procfs::all_pids().unwrap_or_default(),
        Target::Pids(p) => p.clone(),
        Target::Tids(t) => {
            let mut v: Vec<u32> = t.iter().filter_map(|&t| procfs::tgid(t).ok()).collect();
            v.sort_unstable();
            v.dedup();
            v
        }
        Target::Command => Vec::new(),
    }
}

/// How each event's samples are laid out in the rings and in the file.
struct Layouts {
    ring: Vec<ParseInfo>,
    out: Vec<ParseInfo>,
}

/// How the session parses each event's records, and how the file describes them.
fn describe_events(opened: &Opened, online: bool) -> Result<(Layouts, Vec<EventDesc>)> {
    let mut descs = Vec::new();
    let mut layouts = Layouts {
        ring: Vec::new(),
        out: Vec::new(),
    };
    for ev in &opened.events {
        let attr = ev
            .attr
            .ok_or_else(|| anyhow!("event `{}` was never opened", ev.spec.name))?;
        let keep_stack = ev.sampling.as_ref().is_some_and(|s| s.keep_stack);
        let out_attr = open::output_attr(&attr, online, keep_stack);
        layouts.ring.push(ParseInfo::from_attr(&attr));
        layouts.out.push(ParseInfo::from_attr(&out_attr));
        // The session makes MMAP2 records of what these tell: they stay out of the file.
        if remap::is_added(&ev.spec.name) {
            continue;
        }
        descs.push(EventDesc {
            attr: out_attr,
            name: ev.spec.name.clone(),
            ids: ev.ids.clone(),
        });
    }
    descs.extend(dummy_for_perf_report(&descs));
    Ok((layouts, descs))
}

/// perf report sorts a file whose events are all tracepoints by their payload (`--sort
/// trace`), and perf 6.1 crashes on samples without one: memperf's probes keep registers
/// instead (`leak -w`, `heap -w`). One event of another kind, which never samples (a dummy
/// software event, listed after the others, as perf record adds its own), gives such a file
/// perf report's usual sort.
fn dummy_for_perf_report(descs: &[EventDesc]) -> Option<EventDesc> {
    use perf_event_open_sys::bindings as b;
    let all_tracepoints = descs
        .iter()
        .all(|d| d.attr.type_ == b::PERF_TYPE_TRACEPOINT);
    let some_without_payload = descs
        .iter()
        .any(|d| d.attr.sample_type & crate::abi::PERF_SAMPLE_RAW == 0);
    if !(all_tracepoints && some_without_payload) {
        return None;
    }
    // The same sample layout as the others: perf wants every event's records alike.
    let mut attr = descs.first()?.attr;
    attr.type_ = b::PERF_TYPE_SOFTWARE;
    attr.config = u64::from(b::PERF_COUNT_SW_DUMMY);
    attr.set_mmap(0);
    attr.set_mmap2(0);
    attr.set_mmap_data(0);
    attr.set_comm(0);
    attr.set_comm_exec(0);
    attr.set_task(0);
    Some(EventDesc {
        attr,
        name: "dummy:u".to_string(),
        // No fd ever had it: no record names it.
        ids: vec![u64::MAX],
    })
}

/// The kernel reports a ring's losses with a LOST record written when room frees up; losses
/// at the very end of a run (a full ring when the workload exits) are never written. Each
/// event's PERF_FORMAT_LOST count has them all: what exceeds the LOST records seen becomes
/// one more LOST record, so the summary and the file both count every loss.
fn report_unflushed_losses(
    counted: u64,
    opened: &Opened,
    session: &mut Session,
    sink: &mut dyn Handler,
) -> Result<()> {
    let seen = session.stats().lost;
    if counted <= seen {
        return Ok(());
    }
    let id = opened.events[0].ids.first().copied().unwrap_or(0);
    let sid = crate::records::SampleId {
        id: Some(id),
        identifier: Some(id),
        time: session.stats().last_time,
        ..Default::default()
    };
    let mut buf = Vec::new();
    crate::records::encode_lost(&mut buf, id, counted - seen, &sid, session.side_info());
    session.handle(
        perf_event_open_sys::bindings::PERF_RECORD_LOST,
        0,
        &buf,
        sink,
    )?;
    Ok(())
}
