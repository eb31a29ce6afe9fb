//! `memperf record`: open events, drain the rings, unwind, write perf.data.

mod summary;

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, anyhow};
use rustc_hash::FxHashMap;

use crate::cli::{CallGraph, Consume, RecordConfig, Target, UnwindWhen};
use crate::live::driver::{self, Driver, Flow, OnSignal, SignalState, Until};
use crate::live::writer::RecordWriter;
use crate::live::{open, synth};
use crate::perfdata::{
    self, BuildIdEntry, EventDesc, Features, MemperfStats, PerfDataWriter, TracepointFormat,
    tracing_data,
};
use crate::procfs;
use crate::records::{self, ParseInfo};
use crate::session::{EventType, Keep, Session};
use crate::sys::diagnose::SystemFacts;
use crate::unwind::UnwindMode;

pub use crate::live::open::default_mmap_pages;

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
    crate::buildid::keep_in_cache(&via)
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

/// Runs `memperf record`; returns the exit code (the command's, when there is one).
pub fn run(cfg: RecordConfig) -> Result<i32> {
    open::check_period(&cfg)?;
    let facts = SystemFacts::read();
    let (events, tracefs) = open::resolve_events(&cfg.events)?;
    driver::check_attach(&cfg.target)?;
    let out_file = prepare_output(&cfg.output)?;
    let write_failed = format!("failed to write `{}`", cfg.output.display());
    let signals = SignalState::install()?;
    let gated = driver::spawn_gated(cfg.command.as_deref())?;
    let child_pid = gated.as_ref().map(|g| g.pid());
    let opened = open::open_all(&cfg, events, tracefs, child_pid, &facts)?;

    let online =
        matches!(cfg.call_graph, CallGraph::Dwarf { .. }) && cfg.unwind == UnwindWhen::Online;
    let (layouts, descs) = describe_events(&opened, online)?;
    let file = PerfDataWriter::new(out_file, descs).with_context(|| write_failed.clone())?;
    let mut writer = RecordWriter::new(file, layouts.out);
    let ids: FxHashMap<u64, usize> = opened.ids.clone();
    let keep = Keep {
        unwind: online.then_some(UnwindMode::Dwarf),
        dsos: true,
        ..Keep::default()
    };
    let types = opened
        .events
        .iter()
        .map(|e| EventType {
            type_: e.type_,
            config: e.config,
        })
        .collect();
    let mut session = Session::new(layouts.ring.clone(), ids, keep).with_types(types);

    let first_id = opened.events[0].ids.first().copied().unwrap_or(0);
    synth::synthesize(
        &synth_pids(&cfg.target),
        first_id,
        &layouts.ring[0],
        &mut session,
        &mut writer,
    )
    .with_context(|| write_failed.clone())?;

    let mut driver = Driver::new(opened, signals, gated, &cfg.target)
        .discard(cfg.consume == Consume::None)
        .sink_context(write_failed.clone());
    driver.start()?;
    let started = Instant::now();
    if !cfg.quiet {
        summary::print_start(&cfg, driver.opened(), driver.child_pid());
    }
    let until = Until {
        duration: cfg.duration,
        tick: None,
        on_signal: OnSignal::Forward,
    };
    let mut round_buf = Vec::with_capacity(16);
    let mut checkpoint = Instant::now();
    driver.run_until(&mut session, &mut writer, &until, |_, writer, round| {
        // Each round that took records ends with a FINISHED_ROUND, as perf's do.
        if cfg.consume != Consume::None && round.drained > 0 {
            round_buf.clear();
            records::encode_finished_round(&mut round_buf);
            writer
                .writer
                .write_record(&round_buf)
                .with_context(|| write_failed.clone())?;
        }
        // Whatever kills the recorder, the file reads up to the last second.
        if checkpoint.elapsed() >= CHECKPOINT_EVERY {
            checkpoint = Instant::now();
            writer
                .writer
                .checkpoint()
                .with_context(|| write_failed.clone())?;
        }
        Ok(Flow::Continue)
    })?;
    let done = driver.finish(&mut session, &mut writer)?;
    let opened = done.opened;
    if let Some(counted) = done.kernel_lost {
        report_unflushed_losses(counted, &opened, &mut session, &mut writer)
            .with_context(|| write_failed.clone())?;
    }
    let elapsed = started.elapsed();

    let features = build_features(&cfg, &opened, &session);
    let data_bytes = writer.writer.data_bytes();
    let total = writer
        .writer
        .finish(&features)
        .with_context(|| format!("failed to finish `{}`", cfg.output.display()))?;
    drop(opened.fds);
    if !cfg.quiet {
        summary::print_end(&summary::EndInfo {
            cfg: &cfg,
            session: &session,
            drain: &done.drain,
            notes: &opened.notes,
            elapsed,
            file_bytes: total,
            data_bytes,
            reason: done.reason.to_string(),
            pages: opened
                .rings
                .first()
                .map(|r| r.data_size() / crate::sys::page_size()),
        });
    }
    Ok(done.exit.map_or(0, |e| e.shell_code()))
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
fn describe_events(opened: &open::Opened, online: bool) -> Result<(Layouts, Vec<EventDesc>)> {
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
    opened: &open::Opened,
    session: &mut Session,
    writer: &mut RecordWriter,
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
        writer,
    )?;
    Ok(())
}

/// The feature sections: system facts, tracepoint formats, build-ids of what was hit.
fn build_features(cfg: &RecordConfig, opened: &open::Opened, session: &Session) -> Features {
    let mut f = Features::from_system(cfg.cmdline.clone());
    if let Some(tfs) = &opened.tracefs {
        let mut formats = Vec::new();
        for ev in &opened.events {
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
    let mut seen = rustc_hash::FxHashSet::default();
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
    f.memperf_stats = Some(memperf_stats(session));
    f
}

/// What only memperf knows about its recording: the user stacks it unwound while recording
/// (their raw bytes are not in the file, so no reader can count these again) and how many
/// were truncated, by reason.
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
    if let Some(u) = session.unwinders() {
        for (name, n) in u.stats().truncated.named() {
            counts.push((format!("truncated.{name}"), n));
        }
    }
    MemperfStats { counts }
}
