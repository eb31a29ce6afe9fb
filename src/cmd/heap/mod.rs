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
use std::time::Duration;

use anyhow::{Result, anyhow};

use crate::allocs::run::{self, Schedule};
use crate::allocs::sink::LeakSink;
use crate::cli::heap::{HeapConfig, HeapOutput};
use crate::cli::leak::LeakTarget;
use crate::live::driver::Flow;
use crate::session::Session;

use retained::Retained;
use timeline::Memory;

/// How often the process's memory and heap pages are read.
const TICK: Duration = Duration::from_millis(250);

/// Runs `memperf heap`.
pub fn run(cfg: HeapConfig) -> Result<i32> {
    let pid = Cell::new(match cfg.leak.target {
        LeakTarget::Pid(p) => p,
        _ => 0,
    });
    let memory: RefCell<Vec<Memory>> = RefCell::new(Vec::new());
    let last_retained: Cell<Option<Retained>> = Cell::new(None);
    let mut announce = |child: Option<i32>| -> Result<()> {
        if let Some(c) = child {
            pid.set(c as u32);
        }
        let until = match cfg.duration {
            Some(d) => format!("for {:.1} s", d.as_secs_f64()),
            None => "until it exits".to_string(),
        };
        eprintln!(
            "Tracing the heap of pid {} {until}, Ctrl+C to end early.",
            pid.get()
        );
        Ok(())
    };
    let mut on_tick = |_: &Session, sink: &LeakSink, now: u64| -> Result<Flow> {
        let p = pid.get();
        if p != 0 {
            if let Some(m) = timeline::read_memory(p, now) {
                memory.borrow_mut().push(m);
            }
            // A process tearing down its memory (exiting) has no heap left to read: the last
            // reading that found one stands.
            if let Some(h) = sink.table.heap.as_ref()
                && let Ok(r) = retained::measure(p, &sink.table, h, now)
                && r.resident_pages > 0
            {
                last_retained.set(Some(r));
            }
        }
        Ok(Flow::Continue)
    };
    let schedule = Schedule {
        duration: cfg.duration,
        tick: Some(TICK),
    };
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
        None => run::trace(
            &cfg.leak,
            &schedule,
            cfg.write.as_deref(),
            &mut announce,
            &mut on_tick,
        )?,
    };
    let mut heap = traced
        .sink
        .table
        .heap
        .take()
        .ok_or_else(|| anyhow!("the run kept no heap analyses"))?;
    let memory = memory.into_inner();
    heap.last_time = heap.last_time.max(traced.now);
    report(&cfg, &mut heap, &mut traced, &memory, last_retained.get())?;
    Ok(0)
}

fn report(
    cfg: &HeapConfig,
    heap: &mut crate::allocs::heap::HeapTracker,
    traced: &mut run::Traced,
    memory: &[Memory],
    retained: Option<Retained>,
) -> Result<()> {
    let dropped = traced.sink.table.stats.dropped_full;
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
        HeapOutput::Text => {
            let summary = output::Summary {
                heap,
                retained,
                dropped,
                lost: traced.lost,
            };
            output::write_text(&mut out, cfg, &summary, &built)?;
        }
        HeapOutput::Folded => output::write_folded(&mut out, &mut built, cfg.metric)?,
        HeapOutput::Flamegraph(path) => output::write_flamegraph(path, cfg, heap, &mut built)?,
    }
    out.flush()?;
    Ok(())
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
