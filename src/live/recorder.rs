//! The recording run every live tool shares: resolve and open the events, start the target,
//! synthesize the processes that existed before, drain the rings into the session and the
//! tool's handler (and, when asked, into a perf.data file), stop, and count what was lost.
//! `memperf record` is this run with a file and no tool; `oomkill -w FILE` is both.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};

use super::drain::DrainStats;
use super::driver::{self, Driver, Flow, OnSignal, Round, SignalState, StopReason, Until};
use super::keep::KeptBinaries;
use super::open::{self, Opened, ResolvedEvent};
use super::priority::{self, Raised};
use super::remap;
use super::synth;
use super::writer::RecordWriter;
use crate::config::record::{CallGraph, Consume, RecordConfig, Target, UnwindWhen};
use crate::maps::ProcessMaps;
use crate::perfdata::{
    self, BuildIdEntry, ClockData, EventDesc, Features, MemperfStats, PerfDataWriter,
    TracepointFormat, tracing_data,
};
use crate::procfs;
use crate::records::{self, ParseInfo, Sample};
use crate::session::{
    EventType, Handler, Keep, Processes, Reaper, SampleCtx, SampleData, Session, SideBand,
};
use crate::sys::child::ExitStatusInfo;
use crate::sys::diagnose::SystemFacts;
use crate::sys::tracefs::Tracefs;
use crate::unwind::UnwindMode;

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
    fn round(&mut self, _session: &Session, _round: Round) -> Result<Flow> {
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
        // The file keeps every stack it was asked for.
        let tool = self.tool.wants_unwind(ev, s, procs);
        self.writer.is_some() || tool
    }

    fn side_band(&mut self, r: &SideBand<'_>) -> std::io::Result<()> {
        if let Some(w) = &mut self.writer {
            w.side_band(r)?;
        }
        self.tool.side_band(r)
    }
}

/// Runs `run`, handing every record to `tool` (and to the file when `run.write`).
pub(crate) fn record<H: Live>(run: Run<'_>, tool: &mut H) -> Result<Recorded> {
    let cfg = run.cfg;
    open::check_period(cfg)?;
    let facts = SystemFacts::read();
    let (mut events, tracefs) = match run.events {
        Some(e) => e,
        None => open::resolve_events_in(&cfg.events, &cfg.target)?,
    };
    let remap_note = (cfg.side_band && run.follow_remaps)
        .then(|| remap::add_events(&mut events, &cfg.target))
        .flatten();
    driver::check_attach(&cfg.target)?;
    let out_file = run.write.then(|| prepare_output(&cfg.output)).transpose()?;
    let write_failed = format!("failed to write `{}`", cfg.output.display());
    let signals = SignalState::install()?;
    let gated = driver::spawn_gated(cfg.command.as_deref(), cfg.command_stdout)?;
    let child_pid = gated.as_ref().map(|g| g.pid());
    let mut opened = open::open_all(cfg, events, tracefs, child_pid, &facts)?;
    opened.notes.extend(remap_note);

    let online = matches!(cfg.widest_call_graph(), CallGraph::Dwarf { .. })
        && cfg.unwind == UnwindWhen::Online;
    // After the command was forked: it keeps the nice value it had.
    let priority = priority::raise_for(cfg, online);
    let (layouts, descs) = describe_events(&opened, online)?;
    let writer = match out_file {
        Some(f) => {
            // The recovered marks' temporary file goes beside a recording on disk (not in
            // /dev for `-o /dev/null`).
            let regular = f.metadata().is_ok_and(|m| m.is_file());
            let dir = cfg.output.parent().filter(|_| regular).map(|d| {
                if d.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    d
                }
            });
            let file = PerfDataWriter::new(f, descs).with_context(|| write_failed.clone())?;
            Some(RecordWriter::new(file, layouts.out, dir))
        }
        None => None,
    };
    let writing = writer.is_some();
    let mut tee = Tee { writer, tool };
    let keep = Keep {
        unwind: online.then_some(UnwindMode::Dwarf),
        // A move mremap made is told by the mapping that held its old address.
        maps: (run.keep_processes || opened.events.iter().any(|e| remap::is_added(&e.spec.name)))
            .then(ProcessMaps::default),
        comms: run.keep_processes,
        dsos: writing,
    };
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
    // A system-wide run leaves out memperf's samples, and its child's until the exec (told
    // by the exec's COMM record: without side band, as `stat` records, none comes, and the
    // child's few samples before its exec stay in).
    let exclude_self = cfg.target == Target::SystemWide && !cfg.include_self;
    let mut session = Session::new(layouts.ring.clone(), opened.ids.clone(), keep)
        .with_types(types)
        .with_max_stack(max_stack)
        .with_remaps(
            &opened
                .events
                .iter()
                .map(|e| e.spec.name.clone())
                .collect::<Vec<_>>(),
        )
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
        session = session.with_live_stacks();
    }

    let first_id = opened.events[0].ids.first().copied().unwrap_or(0);
    let sizer = online
        .then(|| super::resize::StackSizer::new(cfg, &opened, child_pid, &mut session))
        .flatten();
    let mut driver = Driver::new(opened, signals, gated, &cfg.target)
        .with_sizer(sizer)
        .prompt(online.then(driver::prompt_every).flatten())
        .discard(cfg.consume == Consume::None)
        .sink_context(write_failed.clone());
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
        synth::synthesize(
            &synth_pids(&cfg.target),
            first_id,
            &layouts.ring[0],
            &mut session,
            &mut tee,
        )
        .with_context(|| write_failed.clone())?;
    }
    if !attach {
        driver.enable()?;
    }
    let clock_monotonic = driver.opened().clock_monotonic;
    let clockid = if clock_monotonic {
        libc::CLOCK_MONOTONIC as u32
    } else {
        ClockData::KERNEL_DEFAULT
    };
    let clock = driver.clock_now().map(|now| ClockData::now(clockid, now));
    // CLOCK_MONOTONIC beside it, at the start and the end: a report places samples among a
    // jitdump's loads, stamped on that clock, by them.
    let sync_start = clock.and_then(|c| {
        let monotonic = driver.opened().clock.monotonic_at(c.clock_ns)?;
        Some((c.clock_ns, monotonic))
    });
    let started = Instant::now();
    // The handler speaks first (a tool's banner, record's line), then the command runs:
    // their outputs often share a terminal or a pipe.
    tee.tool
        .started(driver.opened(), driver.child_pid(), clock)?;
    driver.release()?;
    let until = Until {
        duration: cfg.duration,
        tick: run.tick,
        on_signal: run.on_signal,
    };
    let mut round_buf = Vec::with_capacity(16);
    // The processes whose EXIT record was lost go too (see `session::reap`).
    let mut reaper = cfg.side_band.then(Reaper::new);
    let mut checkpoint = Instant::now();
    let reason = driver.run_until(&mut session, &mut tee, &until, |session, tee, round| {
        if let Some(w) = &mut tee.writer {
            // Each round that took records ends with a FINISHED_ROUND, as perf's do.
            if cfg.consume != Consume::None && round.drained > 0 {
                round_buf.clear();
                records::encode_finished_round(&mut round_buf);
                w.writer
                    .write_record(&round_buf)
                    .with_context(|| write_failed.clone())?;
            }
            // Whatever kills the recorder, the file reads up to the last second.
            if checkpoint.elapsed() >= CHECKPOINT_EVERY {
                checkpoint = Instant::now();
                w.writer
                    .checkpoint()
                    .with_context(|| write_failed.clone())?;
            }
        }
        if let Some(r) = &mut reaper {
            r.round(session, round.now, super::drain::HOLD_BACK_NS);
        }
        tee.tool.round(session, round)
    })?;
    // The run's length ends with its stop condition (the command's exit), not with the
    // last drain and the file's sections.
    let elapsed = started.elapsed();
    if reason == StopReason::Requested {
        driver.signal_child(libc::SIGTERM);
    }
    let done = driver.finish(&mut session, &mut tee)?;
    let mut opened = done.opened;
    if let Some(counted) = done.kernel_lost {
        report_unflushed_losses(counted, &opened, &mut session, &mut tee)
            .with_context(|| write_failed.clone())?;
    }
    let (mut file_bytes, mut data_bytes) = (0, 0);
    if let Some(mut w) = tee.writer.take() {
        let mut features = build_features(cfg, &opened, &session, clock, &mut w.kept);
        // Where the run ended on the sample clock: a replay's intervals end there too.
        if let (Some(stats), Some(end)) = (&mut features.memperf_stats, done.now) {
            stats.counts.push(("end_time".to_string(), end));
            let sync_end = opened.clock.monotonic_at(end).map(|m| (end, m));
            stats.set_clock_sync(sync_start, sync_end);
        }
        if let Some(stats) = &mut features.memperf_stats
            && w.recovered.dropped > 0
        {
            stats
                .counts
                .push(("recovered_unmarked".to_string(), w.recovered.dropped));
        }
        data_bytes = w.writer.data_bytes();
        file_bytes = w
            .writer
            .finish_with_marks(&features, Some(&w.recovered))
            .with_context(|| format!("failed to finish `{}`", cfg.output.display()))?;
    }
    let pages = opened
        .rings
        .first()
        .map(|r| r.data_size() / crate::sys::page_size());
    let st = session.stats();
    let lost = (st.lost + st.lost_samples).max(done.kernel_lost.unwrap_or(0));
    Ok(Recorded {
        reason: done.reason,
        exit: done.exit,
        drain: done.drain,
        names: remap::names_shown(&opened.events)
            .into_iter()
            .map(str::to_string)
            .collect(),
        notes: std::mem::take(&mut opened.notes),
        elapsed,
        lost,
        file_bytes,
        data_bytes,
        pages,
        priority,
        now: done.now,
        session,
        opened,
    })
}

/// How long copying a deleted binary into the build-id cache may take at the end.
const DELETED_COPY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// A binary deleted while its process ran (a package upgrade): copied, through the
/// process's `/proc/PID/map_files`, into the build-id cache, where the report finds it by
/// the build-id this returns once the process is gone.
fn keep_deleted(pid: u32, path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    use std::os::unix::ffi::OsStrExt;
    let maps = procfs::read_maps(pid)?;
    let Some(m) = maps
        .iter()
        .find(|m| m.path.as_slice() == path.as_os_str().as_bytes())
    else {
        return Ok(None);
    };
    let via = crate::mapped::map_files_path(pid, m.start, m.end - m.start);
    crate::buildid::keep_in_cache(&via).or_else(|e| {
        eprintln!(
            "memperf: warning: failed to keep `{}` in the build-id cache: {e}",
            path.display()
        );
        crate::buildid::file_build_id(&via)
    })
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
        let out_attr = open::output_attr(&attr, online);
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
    Ok((layouts, descs))
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

/// The feature sections: system facts, tracepoint formats, build-ids of what was hit.
fn build_features(
    cfg: &RecordConfig,
    opened: &Opened,
    session: &Session,
    clock: Option<ClockData>,
    kept: &mut KeptBinaries,
) -> Features {
    let mut f = Features::from_system(cfg.cmdline.clone());
    if let Some(tfs) = &opened.tracefs {
        let mut formats = Vec::new();
        for ev in opened
            .events
            .iter()
            .filter(|e| !remap::is_added(&e.spec.name))
        {
            if let crate::events::EventKind::Tracepoint { system, name } = &ev.spec.kind
                && let Ok(format) = tfs.format(system, name)
            {
                formats.push(TracepointFormat {
                    system: system.clone(),
                    name: name.clone(),
                    format,
                });
            }
        }
        if let (Ok(hp), Ok(he)) = (tfs.header_page(), tfs.header_event()) {
            let printk = tfs.printk_formats().unwrap_or_else(|e| {
                eprintln!(
                    "memperf: note: {e}; `const char *` tracepoint fields will print as \
                     addresses"
                );
                Vec::new()
            });
            f.tracing_data = Some(tracing_data(&hp, &he, &formats, &printk));
        }
    }
    let hit: rustc_hash::FxHashSet<Vec<u8>> = session
        .procs()
        .hit_dsos()
        .map(|(_, path)| path.to_vec())
        .collect();
    // The files learned at their first mapping, each by its own build-id (two builds at
    // one path apart), the deleted or replaced ones kept in the build-id cache.
    let mut seen = rustc_hash::FxHashSet::default();
    for k in kept.finish(&hit, DELETED_COPY_TIMEOUT) {
        seen.insert(k.path.clone());
        f.build_ids.push(BuildIdEntry {
            pid: k.pid as i32,
            kernel: false,
            build_id: k.build_id,
            filename: String::from_utf8_lossy(&k.path).into_owned(),
        });
    }
    if kept.stats.lost > 0 {
        eprintln!(
            "memperf: warning: {} executable files deleted or replaced during the recording \
             could not be kept in the build-id cache: their frames will be unnamed",
            kept.stats.lost
        );
    }
    let mut hung = false;
    for (pid, path) in session.procs().hit_dsos() {
        if !seen.insert(path.to_vec()) {
            continue;
        }
        let p = Path::new(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(path));
        // Each file read within the read timeout: a hung mount must not hold the end of
        // the recording (one that did is not asked again).
        if hung {
            break;
        }
        let owned = p.to_path_buf();
        let deleted = path.ends_with(b" (deleted)");
        let read = crate::mapped::bounded(DELETED_COPY_TIMEOUT, move || {
            if deleted {
                keep_deleted(pid, &owned)
            } else {
                crate::buildid::file_build_id(&owned)
            }
        });
        hung = read.is_none();
        if let Some(Ok(Some(id))) = read {
            f.build_ids.push(BuildIdEntry {
                pid: pid as i32,
                kernel: false,
                build_id: id,
                filename: String::from_utf8_lossy(path).into_owned(),
            });
        }
    }
    if session.stats().kernel_stacks
        && let Some(id) = crate::buildid::kernel_build_id()
    {
        f.build_ids.push(BuildIdEntry {
            pid: -1,
            kernel: true,
            build_id: id,
            filename: "[kernel.kallsyms]".to_string(),
        });
    }
    if let (Some(a), Some(b)) = (session.stats().first_time, session.stats().last_time) {
        f.sample_time = Some((a, b));
    }
    if opened.clock_monotonic {
        // HEADER_CLOCKID holds the clock resolution in ns: CLOCK_MONOTONIC ticks in ns.
        f.clockid = Some(1);
    }
    f.clock_data = clock;
    let mut stats = memperf_stats(session);
    let k = kept.stats;
    stats.counts.extend([
        ("binaries_learned".to_string(), k.learned),
        ("binaries_unreadable".to_string(), k.unreadable),
        ("binaries_released".to_string(), k.released),
        ("binaries_kept".to_string(), k.kept),
        ("binaries_lost".to_string(), k.lost),
    ]);
    f.memperf_stats = Some(stats);
    f
}

/// What only memperf knows about its recording: the user stacks it unwound while recording
/// (their raw bytes are not in the file, so no reader can count these again) and how many
/// were truncated, by reason, and how soon those past their copy were read.
fn memperf_stats(session: &Session) -> MemperfStats {
    let st = session.stats();
    let mut counts = vec![
        ("unwound".to_string(), st.unwound),
        ("truncated".to_string(), st.truncated),
        ("foreign_ids".to_string(), st.foreign_ids),
        (
            "foreign_skipped".to_string(),
            st.foreign_ids - st.foreign_attributed,
        ),
    ];
    // Per event, so that an output of one event counts its own.
    for (ev, u) in st.unwinds.iter().enumerate() {
        counts.push((format!("unwound.event.{ev}"), u.unwound));
        counts.push((format!("truncated.event.{ev}"), u.truncated));
    }
    if let Some(u) = session.unwinders() {
        let s = u.stats();
        for (name, n) in s.truncated.named() {
            counts.push((format!("truncated.{name}"), n));
        }
        counts.extend([
            ("cut_at_copy_end".to_string(), s.cut_at_copy_end),
            ("recovered".to_string(), s.recovered),
            ("recovered_frames".to_string(), s.recovered_frames),
            ("recovery_rejected".to_string(), s.recovery_rejected),
        ]);
        for (name, n) in s.rejected.named() {
            counts.push((format!("rejected.{name}"), n));
        }
    }
    // What the process table held (README, "Memory").
    let held = session.procs().held();
    counts.extend([
        ("held_processes_peak".to_string(), held.peak as u64),
        ("reaped_processes".to_string(), held.reaped),
    ]);
    // How long after its time each stack past its copy was unwound (read from the live
    // process), when one was.
    let d = &st.read_delay;
    if let (Some(p50), Some(p99)) = (d.quantile(0.5), d.quantile(0.99)) {
        counts.extend([
            ("read_delay_count".to_string(), d.count),
            ("read_delay_p50_ns".to_string(), p50),
            ("read_delay_p99_ns".to_string(), p99),
            ("read_delay_max_ns".to_string(), d.max_ns),
        ]);
    }
    MemperfStats { counts }
}
