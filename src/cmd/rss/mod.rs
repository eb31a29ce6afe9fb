//! `memperf rss`: resident memory by allocation stack.
//!
//! The allocation tracing of `leak` (the `allocs` stage: uprobes on the allocator, the
//! outstanding table) with the page-fault event beside it, every fault joined to the live
//! allocation that held its address at that moment (`allocs::resident`), else to its
//! mapping. The report, per allocation stack: bytes allocated, bytes still live, pages
//! faulted in, allocations that faulted in none; then the faults outside every allocation.

mod report;

use std::io::Write;

use anyhow::{Result, anyhow};

use crate::allocs::run::{self, Schedule};
use crate::allocs::sink::LeakSink;
use crate::config::leak::LeakTarget;
use crate::config::rss::{RssConfig, RssOutput};
use crate::live::driver::Flow;
use crate::session::Session;

/// Runs `memperf rss`.
pub fn run(cfg: RssConfig) -> Result<i32> {
    let mut announce = |child: Option<i32>| -> Result<()> {
        let pid = match (&cfg.leak.target, child) {
            (_, Some(c)) => c as u32,
            (LeakTarget::Pid(p), None) => *p,
            _ => 0,
        };
        let until = match cfg.duration {
            Some(d) => format!("for {} s", d.as_secs()),
            None => "until it exits".to_string(),
        };
        crate::output::wrap::eprint(&format!(
            "Tracing allocations and page faults of pid {pid} {until}, Ctrl+C to end early."
        ));
        Ok(())
    };
    let mut on_tick = |_: &Session, _: &LeakSink, _: u64| Ok(Flow::Continue);
    let schedule = Schedule {
        duration: cfg.duration,
        tick: None,
    };
    let mut traced = match &cfg.input {
        Some(path) => {
            let input = crate::config::report::Input::from_arg(path.clone());
            let file = crate::input::open(&input)?;
            crate::allocs::replay::trace_file(&file, &input.to_string())?
        }
        None => run::trace(
            &cfg.leak,
            &schedule,
            cfg.write.as_deref(),
            &mut announce,
            &mut on_tick,
        )?,
    };
    let resident = traced
        .sink
        .table
        .resident
        .take()
        .ok_or_else(|| anyhow!("the run kept no resident join"))?;
    let started = std::time::Instant::now();
    summary(&resident, &traced.sink);
    let maps = traced.session.take_maps().unwrap_or_default();
    let data = report::Data {
        resident: &resident,
        sink: &mut traced.sink,
        procs: traced.session.procs(),
        maps,
        lost: traced.lost,
    };
    let mut built = report::build(data);
    if let Some(path) = &cfg.pprof {
        report::write_pprof(&built, path)?;
    }
    match &cfg.output {
        // `--pprof -`: standard output carries the profile alone.
        RssOutput::Text if cfg.leak.data_on_stdout() => {}
        RssOutput::Text => {
            let mut out = std::io::stdout().lock();
            report::write_text(&mut out, &cfg, &resident, &mut built)?;
            out.flush()?;
        }
        RssOutput::Folded => {
            let mut out = std::io::stdout().lock();
            report::write_folded(&mut out, &mut built)?;
            out.flush()?;
        }
        RssOutput::Flamegraph(path) => report::write_flamegraph(path, &cfg, &mut built)?,
    }
    eprintln!(
        "memperf: report built and written in {} ms",
        started.elapsed().as_millis()
    );
    Ok(0)
}

/// What the join counted, on stderr: how complete the attribution is.
fn summary(r: &crate::allocs::resident::Resident, sink: &LeakSink) {
    let s = &r.stats;
    crate::output::wrap::eprint(&format!(
        "memperf: {} page faults: {} new pages of live allocations, {} repeated on a page \
         already counted, {} outside every allocation ({} in no known mapping), {} without an \
         address; the join held at most {} live allocations ({} at the end, about {} KiB)",
        s.faults,
        s.in_allocs,
        s.repeats,
        s.in_mappings,
        s.unattributed,
        s.no_addr,
        s.peak_live,
        r.live_len(),
        r.memory_bytes() / 1024,
    ));
    if sink.table.stats.dropped_full > 0 {
        eprintln!(
            "memperf: {} allocations were not tracked (--max-entries): their faults were \
             filed under their mappings",
            sink.table.stats.dropped_full
        );
    }
}
