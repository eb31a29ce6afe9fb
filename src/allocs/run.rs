//! One allocation-tracing run, for the commands that report on the live-allocation table
//! (`leak`, `rss`): place the probes, then the one recorder (`live::recorder`) opens the
//! events, starts or attaches to the target and feeds every record to the session and the
//! handler (and to a file with `-w`) until the target exits, the duration ends, a signal
//! comes or the command's tick says stop; then remove the probes and say what was lost.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;

use crate::config::leak::LeakConfig;
use crate::live::driver::{self, Flow, OnSignal, Round, StopReason};
use crate::live::open::Opened;
use crate::live::recorder::{self, Live, Run};
use crate::perfdata::ClockData;
use crate::records::Sample;
use crate::session::{Handler, Processes, SampleCtx, Session, SideBand};

use super::plan::{self, Planned, ProbeHold};
use super::sink::LeakSink;
use super::unwinds::StackCounts;

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
    /// The run ended because the traced program (the command, or every -p target) exited:
    /// what it still holds is all it will ever leave.
    pub exited: bool,
    /// The events and probes, removed when this is dropped, after the report.
    pub _teardown: Teardown,
}

/// What a live run leaves in place until its report is out: the events (closing a uprobe's
/// last fd takes the kernel about 80 ms, a probe at a time), then the probes, which can be
/// removed only once no fd holds them.
#[derive(Default)]
pub(crate) struct Teardown {
    opened: Option<Opened>,
    hold: ProbeHold,
}

impl Drop for Teardown {
    fn drop(&mut self) {
        drop(self.opened.take());
        if let Some(Err(e)) = self.hold.group.as_mut().map(|g| g.remove_all()) {
            eprintln!("memperf: warning: {e}");
        }
    }
}

/// When the run ends and what it does on the way.
pub(crate) struct Schedule {
    /// Stop after this long (else at the target's exit or a signal).
    pub duration: Option<Duration>,
    /// How often `on_tick` is called.
    pub tick: Option<Duration>,
}

/// The recorder's handler: the leak handler, told the opened events when they are live,
/// and the command's announce and tick.
struct Tracer<'a> {
    sink: LeakSink,
    planned: &'a [Planned],
    announce: &'a mut dyn FnMut(Option<i32>) -> Result<()>,
    on_tick: &'a mut dyn FnMut(&Session, &LeakSink, u64) -> Result<Flow>,
}

impl Handler for Tracer<'_> {
    fn sample(&mut self, c: &SampleCtx<'_>) -> std::io::Result<()> {
        self.sink.sample(c)
    }

    fn wants_unwind(&mut self, ev: usize, s: &Sample<'_>, procs: &Processes) -> bool {
        self.sink.wants_unwind(ev, s, procs)
    }

    fn side_band(&mut self, r: &SideBand<'_>) -> std::io::Result<()> {
        self.sink.side_band(r)
    }

    fn hijacked_returns(&self, tid: u32, out: &mut Vec<(u64, u64)>) {
        self.sink.hijacked_returns(tid, out);
    }
}

impl Live for Tracer<'_> {
    fn started(
        &mut self,
        opened: &Opened,
        child: Option<i32>,
        clock: Option<ClockData>,
    ) -> Result<()> {
        self.sink
            .set_events(plan::leak_events(opened, self.planned)?);
        if let (Some(heap), Some(c)) = (self.sink.table.heap.as_mut(), clock) {
            heap.begin_at(c.clock_ns);
        }
        (self.announce)(child)
    }

    fn round(&mut self, session: &mut Session, round: Round) -> Result<Flow> {
        if !round.tick {
            return Ok(Flow::Continue);
        }
        (self.on_tick)(session, &self.sink, now_ns(round.now, session))
    }
}

/// Runs the allocation tracing of `cfg` through the recorder (and, with `write`, into that
/// perf.data file as well: the probes keep their argument and result registers there, so
/// that `allocs::replay` rebuilds the table from it). `announce` is called with the traced
/// child's pid once the events are enabled and before the command is released; `on_tick`
/// at each tick with the session, the handler and the sample clock.
pub(crate) fn trace(
    cfg: &LeakConfig,
    schedule: &Schedule,
    write: Option<&Path>,
    announce: &mut dyn FnMut(Option<i32>) -> Result<()>,
    on_tick: &mut dyn FnMut(&Session, &LeakSink, u64) -> Result<Flow>,
) -> Result<Traced> {
    let (target, command) = plan::leak_target(cfg);
    driver::check_attach(&target)?;
    // Probes are created before the events are opened and removed after they are closed:
    // `hold` is declared first so that it is dropped last, on every path out of here.
    let mut hold = ProbeHold::default();
    let (planned, tracefs, allocator) = plan::plan(cfg, &mut hold)?;
    let mut rcfg = plan::record_config(cfg, &planned, &target, command)?;
    rcfg.duration = schedule.duration;
    if let Some(path) = write {
        rcfg.output = path.to_path_buf();
    }
    let events = plan::resolve(&rcfg, &planned, tracefs)?;
    let mut sink = LeakSink::new(Vec::new(), plan::table(cfg), crate::sys::read_process_u64);
    sink.set_allocator(allocator);
    sink.sample_rate = cfg.sample_rate;
    if cfg.trace {
        // Beside folded stacks or a profile on standard output, the trace goes to stderr.
        sink.trace = Some(if cfg.data_on_stdout() {
            Box::new(std::io::stderr())
        } else {
            Box::new(std::io::stdout())
        });
    }
    let mut tracer = Tracer {
        sink,
        planned: &planned,
        announce,
        on_tick,
    };
    let run = Run {
        cfg: &rcfg,
        write: write.is_some(),
        events: Some(events),
        keep_processes: true,
        follow_remaps: false,
        tick: schedule.tick,
        on_signal: OnSignal::ForwardAndStop,
    };
    let rec = recorder::record(run, &mut tracer)?;
    let mut sink = tracer.sink;
    sink.stack_counts = StackCounts::of(&sink, &rec.session.stats().unwinds);
    summary(&sink, rec.lost, rec.drain.corrupt_bytes);
    // What the kernel lacked, and the copy sizes `dwarf,auto` gave the allocation stacks.
    for note in &rec.notes {
        crate::output::wrap::eprint(&format!("memperf: note: {note}"));
    }
    if write.is_some() {
        eprintln!(
            "memperf: wrote `{}` ({} bytes)",
            rcfg.output.display(),
            rec.file_bytes
        );
    }
    Ok(Traced {
        now: now_ns(rec.now, &rec.session),
        lost: rec.lost,
        requested: rec.reason == StopReason::Requested,
        exited: matches!(
            rec.reason,
            StopReason::CommandExited | StopReason::TargetsExited
        ),
        session: rec.session,
        sink,
        _teardown: Teardown {
            opened: Some(rec.opened),
            hold,
        },
    })
}

/// The time reports measure allocation age against: the sample clock now, or the newest
/// sample's time when the clock cannot be read.
pub(crate) fn now_ns(now: Option<u64>, session: &Session) -> u64 {
    now.or(session.stats().last_time).unwrap_or(0)
}

/// What the run lost, and what to do about it, or nothing when it lost nothing. Both ways
/// a loss can bend the figures are named: a lost free makes a leak, a lost allocation a
/// hole. `-s N` (leak, rss, heap) copies one stack in N, which is what fills the rings.
fn loss_line(lost: u64, corrupt_bytes: u64, malformed: u64) -> Option<String> {
    (lost > 0 || corrupt_bytes > 0 || malformed > 0).then(|| {
        format!(
            "memperf: lost {lost} events ({corrupt_bytes} bytes of unreadable ring data, \
             {malformed} malformed records): outstanding figures may be overstated (a lost free \
             looks like a leak) or understated (a lost allocation is not counted); use a \
             larger -m, or -s N to copy one stack in N"
        )
    })
}

/// The end-of-run summary on stderr: what was traced, what the table held, what was lost.
pub(crate) fn summary(sink: &LeakSink, lost: u64, corrupt_bytes: u64) {
    let s = &sink.table.stats;
    crate::output::wrap::eprint(&format!(
        "memperf: traced {} allocations and {} frees ({} frees of blocks allocated before \
         tracing began); {} outstanding at the end; the table held at most {} entries (about \
         {} KiB now)",
        s.allocs,
        s.frees,
        s.unknown_frees,
        sink.table.len(),
        s.peak_entries,
        sink.table.memory_bytes() / 1024,
    ));
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
    if let Some(line) = sink.stack_counts.sentence() {
        crate::output::wrap::eprint(&line);
    }
    if let Some(line) = sink.stack_counts.fp_sentence() {
        crate::output::wrap::eprint(&line);
    }
    if let Some(line) = loss_line(lost, corrupt_bytes, sink.malformed) {
        eprintln!("{line}");
    }
    if s.dropped_full > 0 {
        eprintln!(
            "memperf: {} allocations not tracked: the table was full (raise --max-entries)",
            s.dropped_full
        );
    }
}

#[cfg(test)]
mod tests {
    use super::loss_line;

    #[test]
    fn the_loss_line_names_both_ways_and_an_option_every_tracing_command_has() {
        assert_eq!(loss_line(0, 0, 0), None);
        let line = loss_line(764_603, 0, 0).unwrap_or_default();
        assert!(line.contains("lost 764603 events"), "{line}");
        assert!(
            line.contains("overstated") && line.contains("understated"),
            "{line}"
        );
        // rss and heap take -s too now: the advice is not leak's alone.
        assert!(line.contains("-s N to copy one stack in N"), "{line}");
        assert!(!line.contains("with leak"), "{line}");
    }
}
