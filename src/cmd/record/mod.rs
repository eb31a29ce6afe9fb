//! `memperf record`: open events, drain the rings, unwind, write perf.data.

pub(crate) mod drain;
pub(crate) mod open;
mod summary;
pub(crate) mod synth;

use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use rustc_hash::FxHashMap;

use crate::cli::{CallGraph, Consume, RecordConfig, Target, UnwindWhen};
use crate::perfdata::{
    BuildIdEntry, EventDesc, Features, MemperfStats, PerfDataWriter, TracepointFormat, tracing_data,
};
use crate::procfs;
use crate::record::{self, ParseInfo};
use crate::session::{Session, SessionEvent};
use crate::sys::child::{ExitStatusInfo, GatedChild, RunningChild};
use crate::sys::diagnose::SystemFacts;
use crate::sys::open::{ioc_disable, ioc_enable};
use crate::sys::ring::RingBuffer;
use crate::sys::{self, poll};
use crate::unwind::{UnwindMode, Unwinders};

pub use open::default_mmap_pages;

/// Signals that end or shape a recording, set by handlers, read by the loop.
pub(crate) struct SignalState {
    interrupt: Arc<AtomicBool>,
    terminate: Arc<AtomicBool>,
    pub(crate) wake: UnixStream,
    _wake_tx: UnixStream,
}

impl SignalState {
    pub(crate) fn install() -> Result<SignalState> {
        let (rx, tx) = UnixStream::pair().context("failed to create the signal pipe")?;
        rx.set_nonblocking(true)
            .context("failed to set up the signal pipe")?;
        let interrupt = Arc::new(AtomicBool::new(false));
        let terminate = Arc::new(AtomicBool::new(false));
        for (sig, flag) in [
            (signal_hook::consts::SIGINT, &interrupt),
            (signal_hook::consts::SIGTERM, &terminate),
            (signal_hook::consts::SIGHUP, &terminate),
        ] {
            signal_hook::flag::register(sig, Arc::clone(flag))
                .context("failed to install a signal handler")?;
            let tx2 = tx.try_clone().context("failed to set up the signal pipe")?;
            signal_hook::low_level::pipe::register(sig, tx2)
                .context("failed to install a signal handler")?;
        }
        let tx2 = tx.try_clone().context("failed to set up the signal pipe")?;
        signal_hook::low_level::pipe::register(signal_hook::consts::SIGCHLD, tx2)
            .context("failed to install a signal handler")?;
        Ok(SignalState {
            interrupt,
            terminate,
            wake: rx,
            _wake_tx: tx,
        })
    }

    pub(crate) fn drain_wakeups(&mut self) {
        let mut buf = [0u8; 64];
        while matches!(self.wake.read(&mut buf), Ok(n) if n > 0) {}
    }

    /// The signal received since the last call, if any.
    pub(crate) fn take(&self) -> Option<i32> {
        if self.interrupt.swap(false, Ordering::SeqCst) {
            Some(libc::SIGINT)
        } else if self.terminate.swap(false, Ordering::SeqCst) {
            Some(libc::SIGTERM)
        } else {
            None
        }
    }
}

/// Moves an existing output file aside, as perf does, and checks the path is writable.
fn prepare_output(path: &Path) -> Result<()> {
    if path.is_dir() {
        anyhow::bail!(
            "failed to create output file `{}`: it is a directory",
            path.display()
        );
    }
    if path.exists() {
        let mut old = path.as_os_str().to_owned();
        old.push(".old");
        std::fs::rename(path, &old)
            .with_context(|| format!("failed to move the existing `{}` aside", path.display()))?;
    }
    std::fs::File::create(path)
        .with_context(|| format!("failed to create output file `{}`", path.display()))?;
    Ok(())
}

/// Why the recording ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopReason {
    CommandExited,
    TargetsExited,
    Duration,
    Signal(i32),
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopReason::CommandExited => f.write_str("the command exited"),
            StopReason::TargetsExited => f.write_str("every target exited"),
            StopReason::Duration => f.write_str("--duration elapsed"),
            StopReason::Signal(libc::SIGINT) => f.write_str("interrupted (SIGINT)"),
            StopReason::Signal(s) => write!(f, "signal {s}"),
        }
    }
}

/// Runs `memperf record`; returns the exit code (the command's, when there is one).
pub fn run(cfg: RecordConfig) -> Result<i32> {
    open::check_period(&cfg)?;
    let facts = SystemFacts::read();
    let (events, tracefs) = open::resolve_events(&cfg.events)?;
    if let Target::Pids(pids) = &cfg.target {
        for &pid in pids {
            if !procfs::exists(pid) {
                anyhow::bail!("no such process: {pid} (given to -p)");
            }
        }
    }
    prepare_output(&cfg.output)?;
    let mut signals = SignalState::install()?;
    let gated = match &cfg.command {
        Some(argv) => Some(GatedChild::spawn(argv).context("failed to start the command")?),
        None => None,
    };
    let child_pid = gated.as_ref().map(|g| g.pid());
    let mut opened = open::open_all(&cfg, events, tracefs, child_pid, &facts)?;

    let online =
        matches!(cfg.call_graph, CallGraph::Dwarf { .. }) && cfg.unwind == UnwindWhen::Online;
    let mut descs = Vec::new();
    let mut sevents = Vec::new();
    for ev in &opened.events {
        let attr = ev
            .attr
            .ok_or_else(|| anyhow!("event `{}` was never opened", ev.spec.name))?;
        let out_attr = open::output_attr(&attr, online);
        sevents.push(SessionEvent {
            name: ev.spec.name.clone(),
            ring_info: ParseInfo::from_attr(&attr),
            out_info: ParseInfo::from_attr(&out_attr),
        });
        descs.push(EventDesc {
            attr: out_attr,
            name: ev.spec.name.clone(),
            ids: ev.ids.clone(),
        });
    }
    let mut writer = PerfDataWriter::create(&cfg.output, descs)
        .with_context(|| format!("failed to write `{}`", cfg.output.display()))?;
    let unwinders = online.then(|| Unwinders::new(UnwindMode::Dwarf));
    let ids: FxHashMap<u64, usize> = opened.ids.clone();
    let mut session = Session::new(sevents.clone(), ids, unwinders);

    let synth_pids: Vec<u32> = match &cfg.target {
        Target::SystemWide => procfs::all_pids().unwrap_or_default(),
        Target::Pids(p) => p.clone(),
        Target::Tids(t) => {
            let mut v: Vec<u32> = t.iter().filter_map(|&t| procfs::tgid(t).ok()).collect();
            v.sort_unstable();
            v.dedup();
            v
        }
        Target::Command => Vec::new(),
    };
    let first_id = opened.events[0].ids.first().copied().unwrap_or(0);
    synth::synthesize(
        &synth_pids,
        first_id,
        &sevents[0].ring_info,
        &mut session,
        &mut writer,
    )
    .with_context(|| format!("failed to write `{}`", cfg.output.display()))?;

    // Start: let the command exec (events enable themselves at exec), or enable now.
    let mut child: Option<RunningChild> = None;
    if cfg.target != Target::Command {
        for ring in &opened.rings {
            ioc_enable(ring.fd()).context("failed to enable an event")?;
        }
        for fd in &opened.fds {
            ioc_enable(fd.as_fd()).context("failed to enable an event")?;
        }
    }
    if let Some(g) = gated {
        child = Some(g.release().context("failed to start the command")?);
    }
    let started = Instant::now();
    if !cfg.quiet {
        summary::print_start(&cfg, &opened, child.as_ref().map(|c| c.pid()));
    }

    let mut dstats = drain::DrainStats::default();
    let (reason, exit) = record_loop(
        &cfg,
        &mut opened.rings,
        &mut session,
        &mut writer,
        &mut signals,
        &mut child,
        &mut dstats,
    )?;

    // Stop: disable every event, then take what is left.
    for ring in &opened.rings {
        let _ = ioc_disable(ring.fd());
    }
    for fd in &opened.fds {
        let _ = ioc_disable(fd.as_fd());
    }
    if cfg.consume == Consume::None {
        drain::discard_round(&mut opened.rings, &mut dstats);
    } else {
        drain::round(
            &mut opened.rings,
            &mut session,
            &mut writer,
            None,
            &mut dstats,
        )
        .with_context(|| format!("failed to write `{}`", cfg.output.display()))?;
    }
    if opened.format_lost && cfg.consume != Consume::None {
        report_unflushed_losses(&opened, &mut session, &mut writer)
            .with_context(|| format!("failed to write `{}`", cfg.output.display()))?;
    }
    let elapsed = started.elapsed();

    let features = build_features(&cfg, &opened, &session);
    let data_bytes = writer.data_bytes();
    let total = writer
        .finish(&features)
        .with_context(|| format!("failed to finish `{}`", cfg.output.display()))?;
    drop(opened.fds);
    if !cfg.quiet {
        summary::print_end(&summary::EndInfo {
            cfg: &cfg,
            session: &session,
            drain: &dstats,
            notes: &opened.notes,
            elapsed,
            file_bytes: total,
            data_bytes,
            reason: reason.to_string(),
            pages: cfg.mmap_pages,
        });
    }
    Ok(exit.map_or(0, |e| e.shell_code()))
}

/// The kernel reports a ring's losses with a LOST record written when room frees up; losses
/// at the very end of a run (a full ring when the workload exits) are never written. Each
/// event's PERF_FORMAT_LOST count has them all: what exceeds the LOST records seen becomes
/// one more LOST record, so the summary and the file both count every loss.
fn report_unflushed_losses(
    opened: &open::Opened,
    session: &mut Session,
    writer: &mut PerfDataWriter,
) -> Result<()> {
    let mut counted = 0u64;
    let owners = opened.rings.iter().map(|r| r.fd());
    for fd in owners.chain(opened.fds.iter().map(|f| f.as_fd())) {
        counted += sys::open::read_lost(fd).context("failed to read an event's lost count")?;
    }
    let seen = session.stats().lost;
    if counted <= seen {
        return Ok(());
    }
    let id = opened.events[0].ids.first().copied().unwrap_or(0);
    let sid = crate::record::SampleId {
        id: Some(id),
        identifier: Some(id),
        time: session.stats().last_time,
        ..Default::default()
    };
    let mut buf = Vec::new();
    crate::record::encode_lost(&mut buf, id, counted - seen, &sid, session.side_info());
    session.handle(
        perf_event_open_sys::bindings::PERF_RECORD_LOST,
        0,
        &buf,
        writer,
    )?;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn record_loop(
    cfg: &RecordConfig,
    rings: &mut [RingBuffer],
    session: &mut Session,
    writer: &mut PerfDataWriter,
    signals: &mut SignalState,
    child: &mut Option<RunningChild>,
    dstats: &mut drain::DrainStats,
) -> Result<(StopReason, Option<ExitStatusInfo>)> {
    let deadline = cfg.duration.map(|d| Instant::now() + d);
    let mut hung_up = vec![false; rings.len()];
    let mut round_buf = Vec::with_capacity(16);
    let mut last_alive_check = Instant::now();
    loop {
        let timeout = deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
            .unwrap_or(Duration::from_millis(100))
            .min(Duration::from_millis(100));
        let mut fds: Vec<BorrowedFd<'_>> = vec![signals.wake.as_fd()];
        let mut which = Vec::new();
        for (i, ring) in rings.iter().enumerate() {
            if !hung_up[i] {
                fds.push(ring.fd());
                which.push(i);
            }
        }
        let revents = poll::poll(&fds, timeout).context("failed to wait for events")?;
        for (k, &i) in which.iter().enumerate() {
            if revents[k + 1] & (libc::POLLHUP | libc::POLLERR) != 0 {
                hung_up[i] = true;
            }
        }
        drop(fds);
        signals.drain_wakeups();
        if cfg.consume == Consume::None {
            drain::discard_round(rings, dstats);
        } else {
            let limit = sys::clock_monotonic_ns().saturating_sub(drain::HOLD_BACK_NS);
            let before = dstats.records;
            drain::round(rings, session, writer, Some(limit), dstats)
                .with_context(|| format!("failed to write `{}`", cfg.output.display()))?;
            if dstats.records != before {
                round_buf.clear();
                record::encode_finished_round(&mut round_buf);
                writer
                    .write_record(&round_buf)
                    .with_context(|| format!("failed to write `{}`", cfg.output.display()))?;
            }
        }
        if let Some(sig) = signals.take() {
            match child.as_ref() {
                // Forward to the command; we stop when it exits.
                Some(c) => {
                    let _ = c.kill(sig);
                }
                None => return Ok((StopReason::Signal(sig), None)),
            }
        }
        if let Some(c) = child.as_mut()
            && let Some(status) = c.try_wait().context("failed to wait for the command")?
        {
            return Ok((StopReason::CommandExited, Some(status)));
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            if let Some(c) = child.as_mut() {
                let _ = c.kill(libc::SIGTERM);
                let status = wait_blocking(c)?;
                return Ok((StopReason::Duration, Some(status)));
            }
            return Ok((StopReason::Duration, None));
        }
        if last_alive_check.elapsed() >= Duration::from_millis(200) {
            last_alive_check = Instant::now();
            let gone = match &cfg.target {
                Target::Pids(p) => p.iter().all(|&pid| !procfs::exists(pid)),
                Target::Tids(t) => t.iter().all(|&tid| procfs::tgid(tid).is_err()),
                _ => false,
            };
            if gone {
                return Ok((StopReason::TargetsExited, None));
            }
        }
    }
}

fn wait_blocking(c: &mut RunningChild) -> Result<ExitStatusInfo> {
    loop {
        if let Some(s) = c.try_wait().context("failed to wait for the command")? {
            return Ok(s);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
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
    for (pid, path) in session.hit_dsos() {
        if !seen.insert(path.to_vec()) {
            continue;
        }
        let p = Path::new(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(path));
        if let Ok(Some(id)) = crate::buildid::file_build_id(p) {
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
    ];
    if let Some(u) = session.unwinders() {
        for (name, n) in u.stats().truncated.named() {
            counts.push((format!("truncated.{name}"), n));
        }
    }
    MemperfStats { counts }
}
