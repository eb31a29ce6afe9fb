//! `memperf leak`: BCC's memleak without BPF.
//!
//! User mode places uprobes on the allocator's functions (tracefs `uprobe_events`, else the
//! uprobe PMU) and opens them as ordinary sampled events through the recorder's own open
//! path; kernel mode opens the kmem tracepoints. Samples go through the one session (online
//! DWARF unwinding of entry-probe stacks, where the return address at the stack pointer keeps
//! the immediate caller) into the `allocs` stage's handler, which keeps the outstanding
//! table in user space; with `--faults`, page faults are joined to it (`allocs::resident`).

mod output;

pub(crate) use output::wall_clock;

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;

use crate::allocs::run::{self, Schedule};
use crate::allocs::sink::LeakSink;
use crate::allocs::unwinds::StackCounts;
use crate::config::leak::{LeakConfig, LeakTarget};
use crate::config::record::Target;
use crate::live::driver::Flow;
use crate::maps::ProcessMaps;
use crate::session::Session;

/// Runs `memperf leak`.
pub fn run(cfg: LeakConfig) -> Result<i32> {
    let (target, _) = crate::allocs::plan::leak_target(&cfg);
    let mut names = output::Names::default();
    let mut announce = |child: Option<i32>| say(&cfg, &header_line(&cfg, &target, child));
    let mut reports = 0u64;
    let mut on_tick = |session: &Session, sink: &LeakSink, now: u64| -> Result<Flow> {
        reports += 1;
        if !cfg.data_on_stdout() {
            let lost = session.stats().lost + session.stats().lost_samples;
            let stacks = StackCounts::of(sink, &session.stats().unwinds);
            let at = Moment { now, lost, stacks };
            print_report(&cfg, sink, session.procs(), &mut names, &at)?;
        }
        if cfg.count.is_some_and(|c| reports >= c) {
            return Ok(Flow::Stop);
        }
        Ok(Flow::Continue)
    };
    let schedule = Schedule {
        duration: None,
        tick: Some(cfg.interval),
    };
    let mut traced = run::trace(&cfg, &schedule, None, &mut announce, &mut on_tick)?;
    // Once the program has exited, what it still holds is what it leaked, however young:
    // the last report and the profiles leave nothing out for its age.
    let cfg = if traced.exited {
        LeakConfig { older_ms: 0, ..cfg }
    } else {
        cfg
    };
    // The final report: when tracing ended otherwise than by reaching the count.
    if !traced.requested && !cfg.data_on_stdout() {
        let mut names = output::Names::default();
        let at = Moment {
            now: traced.now,
            lost: traced.lost,
            stacks: traced.sink.stack_counts,
        };
        print_report(&cfg, &traced.sink, traced.session.procs(), &mut names, &at)?;
    }
    write_profiles(
        &cfg,
        &mut traced.sink,
        traced.session,
        traced.now,
        traced.lost,
    )?;
    Ok(0)
}

/// memleak's first line.
fn header_line(cfg: &LeakConfig, target: &Target, child_pid: Option<i32>) -> String {
    let pid = child_pid.map_or_else(|| target_pid(target), |p| p as u32);
    match (&cfg.target, cfg.kernel) {
        (LeakTarget::System, _) => "Attaching to kernel allocators, Ctrl+C to quit.".to_string(),
        (_, true) => format!("Attaching to kernel allocators of pid {pid}, Ctrl+C to quit."),
        _ => format!("Attaching to pid {pid}, Ctrl+C to quit."),
    }
}

fn target_pid(t: &Target) -> u32 {
    match t {
        Target::Pids(p) => p.first().copied().unwrap_or(0),
        _ => 0,
    }
}

/// Header lines go to standard output, as memleak's do, unless it carries folded stacks
/// or a profile.
fn say(cfg: &LeakConfig, line: &str) -> Result<()> {
    if cfg.data_on_stdout() {
        eprintln!("{line}");
    } else {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}")?;
        out.flush()?;
    }
    Ok(())
}

fn write_profiles(
    cfg: &LeakConfig,
    sink: &mut LeakSink,
    mut session: Session,
    now: u64,
    lost: u64,
) -> Result<()> {
    if !cfg.folded && cfg.pprof.is_none() {
        return Ok(());
    }
    use crate::aggregate::Weigher;
    use crate::output::{self as report_output, pprof};
    let older_ns = if cfg.combined_only {
        0
    } else {
        cfg.older_ms.saturating_mul(1_000_000)
    };
    let maps = session.take_maps().unwrap_or_default();
    let mut agg = output::to_aggregate(sink, session.procs(), maps, now, older_ns, lost);
    let rcfg = report_config(cfg);
    let kallsyms = if agg.book.kernel_frames {
        std::fs::read_to_string("/proc/kallsyms")
            .ok()
            .map(|t| std::sync::Arc::new(crate::symbolize::Kallsyms::from_text(&t)))
    } else {
        None
    };
    let mut res = report_output::resolve(&rcfg, &agg, kallsyms);
    if let Some(path) = &cfg.pprof {
        let names = vec!["outstanding".to_string()];
        let p = pprof::build(&rcfg, None, &names, &[Weigher::Fixed(1)], &agg, &res);
        pprof::write(&p, path)?;
    }
    if cfg.folded {
        // Folded stacks weigh outstanding bytes.
        agg.counts = std::mem::take(&mut agg.bytes);
        let mut out = std::io::stdout().lock();
        report_output::write_folded(&rcfg, &[], None, &agg, &mut res, &mut out)?;
    }
    Ok(())
}

/// The report configuration the shared printers take.
fn report_config(cfg: &LeakConfig) -> crate::config::report::ReportConfig {
    crate::config::report::ReportConfig {
        output: match &cfg.pprof {
            Some(p) => crate::config::report::ReportOutput::Pprof(p.clone()),
            None => crate::config::report::ReportOutput::Folded,
        },
        top: cfg.top,
        weight: crate::config::report::Weight::Bytes,
        ..crate::config::report::ReportConfig::plain(crate::config::report::Input::File(
            PathBuf::from("memperf leak"),
        ))
    }
}

/// When a report is made: the sample clock, the events lost and the stacks truncated so far.
struct Moment {
    now: u64,
    lost: u64,
    stacks: StackCounts,
}

/// One report on standard output.
fn print_report(
    cfg: &LeakConfig,
    sink: &LeakSink,
    procs: &crate::session::Processes,
    names: &mut output::Names,
    at: &Moment,
) -> Result<()> {
    let done = output::Completeness {
        lost: at.lost,
        sample_rate: cfg.sample_rate,
        stacks: at.stacks,
    };
    let mut out = std::io::stdout().lock();
    let maps = procs.maps().unwrap_or(ProcessMaps::empty());
    output::write_report(&mut out, cfg, sink, maps, names, at.now, &done)
}
