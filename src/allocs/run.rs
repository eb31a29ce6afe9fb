//! One allocation-tracing run, for the commands that report on the live-allocation table
//! (`leak`, `rss`): place the probes, open the events, start or attach to the target, feed
//! every record to the session and the handler until the target exits, the duration ends,
//! a signal comes or the command's tick says stop, then remove the probes and say what was
//! lost.

use std::time::Duration;

use anyhow::{Context, Result};

use crate::cli::Target;
use crate::cli::leak::LeakConfig;
use crate::live::driver::{self, Driver, Flow, OnSignal, Round, SignalState, StopReason, Until};
use crate::live::{open, synth};
use crate::session::Session;
use crate::sys::diagnose::SystemFacts;

use super::plan::{self, ProbeHold};
use super::sink::LeakSink;

/// What a finished run leaves for the command's report.
pub(crate) struct Traced {
    pub session: Session,
    pub sink: LeakSink,
    /// The sample clock at the end (what allocation ages are measured against).
    pub now: u64,
    /// Every loss: LOST records, and what the kernel counted but had no room to report.
    pub lost: u64,
    /// The command's tick ended the run (its count of reports was reached).
    pub requested: bool,
}

/// When the run ends and what it does on the way.
pub(crate) struct Schedule {
    /// Stop after this long (else at the target's exit or a signal).
    pub duration: Option<Duration>,
    /// How often `on_tick` is called.
    pub tick: Option<Duration>,
}

/// Runs the allocation tracing of `cfg`. `announce` is called with the traced child's pid
/// once the events are enabled and before the command is released; `on_tick` at each tick
/// with the session, the handler and the sample clock.
pub(crate) fn trace(
    cfg: &LeakConfig,
    schedule: &Schedule,
    announce: &mut dyn FnMut(Option<i32>) -> Result<()>,
    on_tick: &mut dyn FnMut(&Session, &LeakSink, u64) -> Result<Flow>,
) -> Result<Traced> {
    let facts = SystemFacts::read();
    let (target, command) = plan::leak_target(cfg);
    driver::check_attach(&target)?;
    // Probes are created before the events are opened and removed after they are closed:
    // `hold` is declared first so that it is dropped last, on every path out of here.
    let mut hold = ProbeHold::default();
    let (planned, tracefs, allocator) = plan::plan(cfg, &mut hold)?;
    let rcfg = plan::record_config(cfg, &planned, &target, command)?;
    let (mut events, tfs_for_tracepoints) = open::resolve_events(&rcfg.events)?;
    for (ev, p) in events.iter_mut().zip(&planned) {
        ev.sampling = p.sampling.clone();
        ev.filter = p.filter.clone();
    }
    let gated = driver::spawn_gated(rcfg.command.as_deref())?;
    let child_pid = gated.as_ref().map(|g| g.pid());
    let signals = SignalState::install()?;
    let opened = open::open_all(
        &rcfg,
        events,
        tracefs.or(tfs_for_tracepoints),
        child_pid,
        &facts,
    )?;

    let (mut session, mut sink) = plan::handler(cfg, &opened, &planned)?;
    sink.set_allocator(allocator);
    if cfg.trace {
        sink.trace = Some(Box::new(std::io::stdout()));
    }
    if let Target::Pids(pids) = &target {
        let id = opened.events[0].ids.first().copied().unwrap_or(0);
        let side = *session.side_info();
        synth::synthesize(pids, id, &side, &mut session, &mut sink)
            .context("failed to read the target's mappings")?;
    }

    let mut driver = Driver::new(opened, signals, gated, &target);
    driver.enable()?;
    announce(child_pid)?;
    driver.release()?;

    let until = Until {
        duration: schedule.duration,
        tick: schedule.tick,
        on_signal: OnSignal::ForwardAndStop,
    };
    let on_round = |session: &mut Session, sink: &mut LeakSink, round: Round| {
        if !round.tick {
            return Ok(Flow::Continue);
        }
        on_tick(session, sink, now_ns(round.now, session))
    };
    let requested =
        driver.run_until(&mut session, &mut sink, &until, on_round)? == StopReason::Requested;
    if requested {
        driver.signal_child(libc::SIGTERM);
    }
    let done = driver.finish(&mut session, &mut sink)?;
    let mut lost = session.stats().lost + session.stats().lost_samples;
    if let Some(counted) = done.kernel_lost {
        lost = lost.max(counted);
    }
    let now = now_ns(done.now, &session);
    let requested = requested || done.reason == StopReason::Requested;
    drop(done.opened);
    let removed = hold.group.as_mut().map(|g| g.remove_all());
    if let Some(Err(e)) = removed {
        eprintln!("memperf: warning: {e}");
    }
    summary(&sink, lost, done.drain.corrupt_bytes);
    Ok(Traced {
        session,
        sink,
        now,
        lost,
        requested,
    })
}

/// The time reports measure allocation age against: the sample clock now, or the newest
/// sample's time when the clock cannot be read.
pub(crate) fn now_ns(now: Option<u64>, session: &Session) -> u64 {
    now.or(session.stats().last_time).unwrap_or(0)
}

/// The end-of-run summary on stderr: what was traced, what the table held, what was lost.
fn summary(sink: &LeakSink, lost: u64, corrupt_bytes: u64) {
    let s = &sink.table.stats;
    eprintln!(
        "memperf: traced {} allocations and {} frees ({} frees of blocks allocated before \
         tracing began); {} outstanding at the end; the table held at most {} entries (about \
         {} KiB now)",
        s.allocs,
        s.frees,
        s.unknown_frees,
        sink.table.len(),
        s.peak_entries,
        sink.table.memory_bytes() / 1024,
    );
    if sink.results_from_stack > 0 {
        eprintln!(
            "memperf: {} posix_memalign results read from the stack copied at the return",
            sink.results_from_stack
        );
    }
    if s.internal_calls > 0 {
        eprintln!(
            "memperf: {} mmap/munmap/mremap calls made by the allocator itself were left out",
            s.internal_calls
        );
    }
    if lost > 0 || corrupt_bytes > 0 || sink.malformed > 0 {
        eprintln!(
            "memperf: lost {lost} events ({corrupt_bytes} bytes of unreadable ring data, {} \
             malformed records): outstanding figures may be overstated; use a larger -m, or -s",
            sink.malformed
        );
    }
    if s.dropped_full > 0 {
        eprintln!(
            "memperf: {} allocations not tracked: the table was full (raise --max-entries)",
            s.dropped_full
        );
    }
}
