//! `memperf heap`: heaptrack's and memray's analyses on a live process, without LD_PRELOAD
//! or a restart.
//!
//! The allocation tracing of `leak` (the `allocs` stage: uprobes on the allocator, the
//! outstanding table), with `allocs::heap` told of every call in time order: the peak and
//! what it consisted of, temporaries, sizes, churn and the live bytes over time. While the
//! process lives, each tick also reads its VmRSS and VmSize (the timeline) and its heap's
//! page table against the live blocks (`retained`: memory the allocator keeps).

mod output;
mod retained;
mod timeline;

use std::cell::{Cell, RefCell};
use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};

use crate::allocs::run::{self, Schedule};
use crate::allocs::sink::LeakSink;
use crate::config::heap::{HeapConfig, HeapOutput};
use crate::config::leak::LeakTarget;
use crate::live::driver::Flow;
use crate::session::Session;

use retained::Retained;
use timeline::Memory;

/// How often the process's memory and heap pages are read.
const TICK: Duration = Duration::from_millis(250);

/// Runs `memperf heap`.
pub fn run(cfg: HeapConfig) -> Result<i32> {
    let watch = Watch::new(&cfg);
    let mut traced = match &cfg.input {
        Some(path) => {
            let input = crate::config::report::Input::from_arg(path.clone());
            let file = crate::input::open(&input)?;
            crate::allocs::replay::trace_heap_file(
                &file,
                &input.to_string(),
                cfg.temporary_threshold,
            )?
        }
        None => {
            let schedule = Schedule {
                duration: cfg.duration,
                // Reports more often than the memory readings need the ticks at their pace.
                tick: Some(cfg.interval.map_or(TICK, |i| i.min(TICK))),
            };
            run::trace(
                &cfg.leak,
                &schedule,
                cfg.write.as_deref(),
                &mut |child| watch.announce(child),
                &mut |session, sink, now| watch.tick(session, sink, now),
            )?
        }
    };
    let mut heap = traced
        .sink
        .table
        .heap
        .take()
        .ok_or_else(|| anyhow!("the run kept no heap analyses"))?;
    heap.last_time = heap.last_time.max(traced.now);
    if cfg.input.is_none() {
        note_other_processes(watch.pid.get(), &traced.sink.spaces);
    }
    // The count of reports reached: the last of them was the final one, as leak's.
    let text = !traced.requested;
    let retained = watch.retained.get();
    let memory = watch.memory.into_inner();
    report(&cfg, &mut heap, &mut traced, &memory, retained, text)?;
    Ok(0)
}

/// What a live run watches besides the allocator's calls: the process's memory over time,
/// its heap's retained pages, and the interval reports.
struct Watch<'a> {
    cfg: &'a HeapConfig,
    pid: Cell<u32>,
    started: Cell<Instant>,
    memory: RefCell<Vec<Memory>>,
    /// The last reading of the heap's pages that found some resident.
    retained: Cell<Option<Retained>>,
    reports: RefCell<Reports>,
}

impl<'a> Watch<'a> {
    fn new(cfg: &'a HeapConfig) -> Watch<'a> {
        Watch {
            cfg,
            pid: Cell::new(match cfg.leak.target {
                LeakTarget::Pid(p) => p,
                _ => 0,
            }),
            started: Cell::new(Instant::now()),
            memory: RefCell::new(Vec::new()),
            retained: Cell::new(None),
            reports: RefCell::new(Reports::default()),
        }
    }

    /// Tracing begins (on `child`, when the command was started).
    fn announce(&self, child: Option<i32>) -> Result<()> {
        if let Some(c) = child {
            self.pid.set(c as u32);
        }
        self.started.set(Instant::now());
        let until = match self.cfg.duration {
            Some(d) => format!("for {:.1} s", d.as_secs_f64()),
            None => "until it exits".to_string(),
        };
        eprintln!(
            "Tracing the heap of pid {} {until}, Ctrl+C to end early.",
            self.pid.get()
        );
        Ok(())
    }

    /// Each tick: the memory readings, and an interval report when one is due; stops once
    /// the count of reports is made.
    fn tick(&self, session: &Session, sink: &LeakSink, now: u64) -> Result<Flow> {
        self.read_memory(sink, now);
        let Some(interval) = self.cfg.interval else {
            return Ok(Flow::Continue);
        };
        let elapsed = self.started.get().elapsed();
        if !self.reports.borrow_mut().due(elapsed, interval) {
            return Ok(Flow::Continue);
        }
        if !self.cfg.leak.data_on_stdout() {
            self.interval_report(session, sink, now)?;
        }
        if self
            .cfg
            .count
            .is_some_and(|c| self.reports.borrow().made >= c)
        {
            return Ok(Flow::Stop);
        }
        Ok(Flow::Continue)
    }

    /// The process's VmRSS and VmSize, and its heap's pages against the live blocks.
    fn read_memory(&self, sink: &LeakSink, now: u64) {
        let p = self.pid.get();
        if p == 0 {
            return;
        }
        if let Some(m) = timeline::read_memory(p, now) {
            self.memory.borrow_mut().push(m);
        }
        // A process tearing down its memory (exiting) has no heap left to read: the last
        // reading that found one stands.
        if let Some(h) = sink.table.heap.as_ref()
            && let Ok(r) = retained::measure(p, &sink.table, h, now)
            && r.resident_pages > 0
        {
            self.retained.set(Some(r));
        }
    }

    /// `Heap so far:` on standard output.
    fn interval_report(&self, session: &Session, sink: &LeakSink, now: u64) -> Result<()> {
        let lost = session.stats().lost + session.stats().lost_samples;
        let summary = output::Summary {
            heap: sink
                .table
                .heap
                .as_ref()
                .ok_or_else(|| anyhow!("no heap analyses"))?,
            retained: self.retained.get(),
            dropped: sink.table.stats.dropped_full,
            lost,
            now: Some(now),
            stacks: crate::allocs::unwinds::StackCounts::of(sink, &session.stats().unwinds),
        };
        let mut out = std::io::stdout().lock();
        writeln!(out, "[{}] Heap so far:", crate::cmd::leak::wall_clock())?;
        output::write_interval(
            &mut out,
            self.cfg,
            &summary,
            sink,
            session.procs(),
            &mut self.reports.borrow_mut().namer,
        )?;
        writeln!(out)?;
        out.flush()?;
        Ok(())
    }
}

/// The interval reports made so far, and the names of the frames they showed.
#[derive(Default)]
struct Reports {
    made: u64,
    namer: output::Namer,
}

impl Reports {
    /// Whether the next report is due, `elapsed` after tracing began: the n-th at n
    /// intervals, less half a tick, so that a tick a little early does not put it off by a
    /// whole tick.
    fn due(&mut self, elapsed: Duration, interval: Duration) -> bool {
        let next = interval.saturating_mul((self.made + 1).min(u32::MAX as u64) as u32);
        let slack = interval.min(TICK) / 2;
        if elapsed + slack < next {
            return false;
        }
        self.made += 1;
        true
    }
}

fn report(
    cfg: &HeapConfig,
    heap: &mut crate::allocs::heap::HeapTracker,
    traced: &mut run::Traced,
    memory: &[Memory],
    retained: Option<Retained>,
    text: bool,
) -> Result<()> {
    let dropped = traced.sink.table.stats.dropped_full;
    let stacks = traced.sink.stack_counts;
    let maps = traced.session.take_maps().unwrap_or_default();
    let mut built = output::build(output::Data {
        heap,
        sink: &mut traced.sink,
        procs: traced.session.procs(),
        maps,
        lost: traced.lost,
    });
    if let Some(path) = &cfg.pprof {
        output::write_pprof(&mut built, path)?;
    }
    let title = match &cfg.input {
        Some(p) => format!("memperf heap: {}", p.display()),
        None => format!("memperf heap: {}", target_text(&cfg.leak.target)),
    };
    if let Some(path) = &cfg.timeline {
        timeline::write_svg(path, &title, heap, memory)?;
    }
    if let Some(path) = &cfg.timeline_csv {
        timeline::write_csv(path, heap, memory)?;
    }
    let mut out = std::io::stdout().lock();
    match &cfg.output {
        HeapOutput::Text if text => {
            let summary = output::Summary {
                heap,
                retained,
                dropped,
                lost: traced.lost,
                now: None,
                stacks,
            };
            if cfg.interval.is_some() {
                writeln!(out, "[{}] Heap at the end:", crate::cmd::leak::wall_clock())?;
            }
            output::write_text(&mut out, cfg, &summary, &built.view())?;
        }
        HeapOutput::Text => {}
        HeapOutput::Folded => output::write_folded(&mut out, &mut built, cfg.metric)?,
        HeapOutput::Flamegraph(path) => output::write_flamegraph(path, cfg, heap, &mut built)?,
    }
    out.flush()?;
    Ok(())
}

/// The heap figures take in every traced process's allocator calls, but the resident and
/// mapped memory (VmRSS, VmSize) and the retained pages are read from `/proc` for the
/// target's pid alone: when other processes (a command's children) allocated too, say so.
fn note_other_processes(pid: u32, spaces: &rustc_hash::FxHashSet<u32>) {
    let mut others: Vec<u32> = spaces.iter().copied().filter(|&p| p != pid).collect();
    if pid == 0 || others.is_empty() {
        return;
    }
    others.sort_unstable();
    let listed: Vec<String> = others.iter().take(8).map(u32::to_string).collect();
    let more = if others.len() > 8 { ", ..." } else { "" };
    crate::output::wrap::eprint(&format!(
        "memperf: note: {} other process{} allocated too (pids {}{more}): their allocations \
         are in the heap figures, but the resident and mapped memory (VmRSS, VmSize) and the \
         retained pages are pid {pid}'s alone; their resident pages are not measured",
        others.len(),
        if others.len() == 1 { "" } else { "es" },
        listed.join(", ")
    ));
}

fn target_text(t: &LeakTarget) -> String {
    match t {
        LeakTarget::Pid(p) => format!("pid {p}"),
        LeakTarget::Command(argv) => argv
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" "),
        LeakTarget::System => "the system".to_string(),
    }
}
