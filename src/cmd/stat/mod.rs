//! `memperf stat`: count events without sampling them, as perf stat, and sum the bytes of the
//! memory tracepoints that have a size.
//!
//! The counts are the kernel's (one counting fd per CPU or thread, read with the time it
//! ran: `counters`). A sized tracepoint (`sizes`) is also opened as a sampled event with its
//! raw payload only, through the live recorder every tool shares, and this module's handler
//! sums its bytes; the recorder also runs the command, stops on `--duration` or a signal
//! and ticks the `-I` intervals. `print` lays the lines out as perf does.

mod counters;
mod print;
mod sizes;

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};

use crate::config::record::Target;
use crate::config::stat::StatConfig;
use crate::events::{self, EventKind, EventSpec, Period};
use crate::live::driver::{Flow, OnSignal, Round};
use crate::live::open::{self, Opened, ResolvedEvent, Sampling};
use crate::live::recorder::{self, Live, Run};
use crate::perfdata::ClockData;
use crate::perfdata::tracing_data::EventFormat;
use crate::session::{Handler, SampleCtx, Session};
use crate::sys::diagnose::SystemFacts;
use crate::sys::tracefs::Tracefs;

use counters::{Counters, Reading};
use print::{Count, Layout, Line, Metric};
use sizes::{Breaks, Reader, SizeRule};

/// Runs `memperf stat`; the exit status is the command's, as perf stat's.
pub fn run(cfg: StatConfig) -> Result<i32> {
    let mut out: Box<dyn Write> = match &cfg.output {
        Some(p) => Box::new(std::io::BufWriter::new(
            crate::output::create_output_file(p)
                .with_context(|| format!("failed to create `{}`", p.display()))?,
        )),
        None => Box::new(std::io::stderr()),
    };
    let layout = Layout {
        separator: cfg.separator.clone(),
        per_cpu: cfg.per_cpu,
    };
    let mut runs: Vec<RunResult> = Vec::new();
    let mut code = 0;
    for _ in 0..cfg.repeat {
        let r = run_once(&cfg, &layout, &mut out)?;
        code = r.exit;
        let interrupted = r.interrupted;
        runs.push(r);
        if interrupted {
            break;
        }
    }
    if cfg.interval.is_none() {
        print_table(&cfg, &layout, &runs, &mut out)?;
    }
    let notes: Vec<String> = runs.last().map(|r| r.notes.clone()).unwrap_or_default();
    // In CSV, as comments: a script reading perf's fields skips them.
    let lead = if cfg.separator.is_some() { "# " } else { "" };
    for n in notes {
        writeln!(out, "{lead}memperf stat: note: {n}")?;
    }
    out.flush()?;
    Ok(code)
}

/// Per event, per CPU slot (one unless -A): the counters' readings.
type Readings = Vec<Vec<Reading>>;
/// Per event, per CPU slot: the bytes summed and the samples they came from.
type Bytes = Vec<Vec<(u64, u64)>>;

/// What one run counted.
struct RunResult {
    readings: Readings,
    bytes: Bytes,
    unsupported: Vec<bool>,
    events: Vec<EventInfo>,
    elapsed: Duration,
    rusage: Option<(f64, f64)>,
    exit: i32,
    interrupted: bool,
    notes: Vec<String>,
}

/// One counted event as printed: its name, whether it is a clock, and the label of its
/// summed bytes when it is sized.
struct EventInfo {
    name: String,
    clock: bool,
    label: Option<&'static str>,
}

/// The sampled side: which of the recorder's events feeds which counted event, and how.
struct SampledPlan {
    specs: Vec<EventSpec>,
    /// Per sampled event: the counted event it sums for, and its reader.
    feeds: Vec<Option<(usize, Feed)>>,
}

enum Feed {
    Bytes(Reader),
    BrkEnter(Reader),
    BrkExit(Reader),
}

fn plan_sampled(
    cfg: &StatConfig,
    counted: &[ResolvedEvent],
    tracefs: &mut Option<Tracefs>,
    info: &mut [EventInfo],
) -> Result<SampledPlan> {
    let mut specs = Vec::new();
    let mut feeds = Vec::new();
    for (i, ev) in counted.iter().enumerate() {
        let EventKind::Tracepoint { system, name } = &ev.spec.kind else {
            continue;
        };
        let Some(size) = sizes::sized(system, name).filter(|_| cfg.bytes) else {
            continue;
        };
        if tracefs.is_none() {
            *tracefs = Some(Tracefs::locate_or_mount()?);
        }
        let tfs = tracefs
            .as_ref()
            .ok_or_else(|| anyhow!("tracefs unavailable"))?;
        // brk's growth needs each call's argument and result: its enter and exit,
        // unfiltered; the others, the counted tracepoint itself with its filter.
        let sources: Vec<(&str, &str, SizeRule)> = match size.rule {
            SizeRule::BrkGrowth => vec![
                ("syscalls", "sys_enter_brk", SizeRule::BrkArg),
                ("syscalls", "sys_exit_brk", SizeRule::BrkGrowth),
            ],
            rule => vec![(system.as_str(), name.as_str(), rule)],
        };
        let mut readers = Vec::new();
        for (sys_name, tp_name, rule) in &sources {
            let reader = tfs
                .format(sys_name, tp_name)
                .ok()
                .and_then(|t| EventFormat::parse(&String::from_utf8_lossy(&t)))
                .and_then(|f| Reader::new(*rule, &f));
            readers.push(reader);
        }
        if readers.iter().any(Option::is_none) {
            // This kernel's format lacks the field: the event is counted only.
            continue;
        }
        info[i].label = Some(size.label);
        for ((sys_name, tp_name, rule), reader) in
            sources.into_iter().zip(readers.into_iter().flatten())
        {
            let mut spec = events::parse_event_list(&format!("{sys_name}:{tp_name}"))?
                .pop()
                .ok_or_else(|| anyhow!("no event"))?;
            spec.modifiers = ev.spec.modifiers;
            if size.rule != SizeRule::BrkGrowth {
                // The same hits as the counter: its filter too.
                // (The user's: open_all adds the self-exclusion itself.)
                spec.filter = ev.spec.filter.clone();
            }
            let feed = match rule {
                SizeRule::BrkGrowth => Feed::BrkExit(reader),
                SizeRule::BrkArg => Feed::BrkEnter(reader),
                _ => Feed::Bytes(reader),
            };
            feeds.push(Some((i, feed)));
            specs.push(spec);
        }
    }
    if specs.is_empty() {
        // The recorder runs the command and ticks the intervals around a ring: a dummy
        // event's stays empty.
        let dummy = events::parse_event_list("dummy")?;
        feeds.push(None);
        specs.extend(dummy);
    }
    Ok(SampledPlan { specs, feeds })
}

/// The handler of one run: opens the counters when the recorder has started the target,
/// sums the sampled bytes, prints intervals.
struct StatSink<'a> {
    cfg: &'a StatConfig,
    layout: &'a Layout,
    out: &'a mut Box<dyn Write>,
    counted: &'a [ResolvedEvent],
    facts: SystemFacts,
    counters: Option<Counters>,
    feeds: Vec<Option<(usize, Feed)>>,
    /// Per counted event, per CPU slot: bytes and samples.
    bytes: Vec<Vec<(u64, u64)>>,
    breaks: Breaks,
    started: Option<Instant>,
    /// The readings and bytes at the last interval's end.
    last: Option<(Readings, Bytes)>,
    last_at: Duration,
    intervals: u64,
    info: Vec<EventInfo>,
    prune_at: Instant,
}

impl StatSink<'_> {
    fn read(&self) -> Result<Vec<Vec<Reading>>> {
        let c = self
            .counters
            .as_ref()
            .ok_or_else(|| anyhow!("the counters were not opened"))?;
        c.read_all(&self.cfg.cpus, self.cfg.per_cpu)
    }

    /// Prints the interval that ends now.
    fn interval(&mut self, now: Duration) -> Result<()> {
        let readings = self.read()?;
        let bytes = self.bytes.clone();
        let (dr, db) = match &self.last {
            Some((r0, b0)) => (
                diff_readings(&readings, r0),
                bytes
                    .iter()
                    .zip(b0)
                    .map(|(a, b)| {
                        a.iter()
                            .zip(b)
                            .map(|(x, y)| (x.0 - y.0, x.1 - y.1))
                            .collect()
                    })
                    .collect(),
            ),
            None => (readings.clone(), bytes.clone()),
        };
        let span = now.saturating_sub(self.last_at);
        let unsupported = self.unsupported();
        let lines = lines(&self.info, &dr, &db, &unsupported, span, None, self.cfg);
        if self.intervals.is_multiple_of(25)
            && let Some(h) = print::interval_header(self.layout)
        {
            self.out.write_all(h.as_bytes())?;
        }
        self.intervals += 1;
        let t = now.as_nanos() as u64;
        for l in &lines {
            self.out
                .write_all(print::line(self.layout, Some(t), l).as_bytes())?;
        }
        self.out.flush()?;
        self.last = Some((readings, bytes));
        self.last_at = now;
        Ok(())
    }

    fn unsupported(&self) -> Vec<bool> {
        self.counters.as_ref().map_or_else(Vec::new, |c| {
            c.events.iter().map(|e| e.unsupported.is_some()).collect()
        })
    }
}

impl Handler for StatSink<'_> {
    fn sample(&mut self, s: &SampleCtx<'_>) -> std::io::Result<()> {
        let Some(Some((target, feed))) = self.feeds.get(s.ev) else {
            return Ok(());
        };
        let Some(raw) = s.sample.raw else {
            return Ok(());
        };
        let target = *target;
        let (pid, tid) = (s.sample.pid.unwrap_or(0), s.sample.tid.unwrap_or(0));
        let bytes = match feed {
            Feed::Bytes(r) => r.bytes(raw),
            Feed::BrkEnter(r) => {
                if let Some(arg) = r.value(raw) {
                    self.breaks.enter(tid, arg);
                }
                // The exit says what the call did.
                return Ok(());
            }
            Feed::BrkExit(r) => r.value(raw).map(|new| self.breaks.exit(pid, tid, new)),
        };
        let slot = counters::slot(&self.cfg.cpus, self.cfg.per_cpu, s.sample.cpu);
        if let Some(b) = bytes
            && let Some(cell) = self.bytes.get_mut(target).and_then(|v| v.get_mut(slot))
        {
            cell.0 += b;
            cell.1 += 1;
        }
        Ok(())
    }

    fn wants_unwind(
        &mut self,
        _ev: usize,
        _s: &crate::records::Sample<'_>,
        _procs: &crate::session::Processes,
    ) -> bool {
        false
    }
}

impl Live for StatSink<'_> {
    fn started(
        &mut self,
        _opened: &Opened,
        child: Option<i32>,
        _clock: Option<ClockData>,
    ) -> Result<()> {
        let counters = counters::open(
            self.counted,
            &self.cfg.target,
            &self.cfg.cpus,
            child,
            &self.facts,
        )?;
        self.counters = Some(counters);
        self.started = Some(Instant::now());
        Ok(())
    }

    fn round(&mut self, _session: &mut Session, round: Round) -> Result<Flow> {
        if round.tick
            && let Some(t0) = self.started
        {
            self.interval(t0.elapsed())?;
        }
        if self.prune_at.elapsed() >= PRUNE_EVERY {
            self.prune_at = Instant::now();
            self.breaks.prune(crate::procfs::exists);
        }
        Ok(Flow::Continue)
    }
}

/// How often the break table forgets processes that exited (it has no EXIT records).
const PRUNE_EVERY: Duration = Duration::from_secs(10);

fn diff_readings(now: &[Vec<Reading>], before: &[Vec<Reading>]) -> Vec<Vec<Reading>> {
    now.iter()
        .zip(before)
        .map(|(a, b)| a.iter().zip(b).map(|(x, y)| x.since(*y)).collect())
        .collect()
}

fn run_once(cfg: &StatConfig, layout: &Layout, out: &mut Box<dyn Write>) -> Result<RunResult> {
    let (mut counted, mut tracefs) = open::resolve_events_in(&cfg.events, &cfg.target)?;
    if cfg.target == Target::SystemWide && !cfg.include_self {
        open::exclude_self(&mut counted)?;
    }
    let mut info: Vec<EventInfo> = counted
        .iter()
        .map(|e| EventInfo {
            name: e.spec.full_name(),
            clock: is_clock(&e.spec),
            label: None,
        })
        .collect();
    let plan = plan_sampled(cfg, &counted, &mut tracefs, &mut info)?;
    let rcfg = cfg.record_config(plan.specs.clone());
    let (mut sampled, _) = open::resolve_events(&plan.specs)?;
    for ev in &mut sampled {
        ev.sampling = Some(Sampling {
            call_graph: crate::config::record::CallGraph::None,
            regs: 0,
            kernel_chain: false,
            raw: ev.spec.is_tracepoint(),
            period: Period::Count(1),
            keep_stack: false,
        });
    }
    let slots = if cfg.per_cpu { cfg.cpus.len() } else { 1 };
    let mut sink = StatSink {
        cfg,
        layout,
        out,
        counted: &counted,
        facts: SystemFacts::read(),
        counters: None,
        feeds: plan.feeds,
        bytes: vec![vec![(0, 0); slots]; counted.len()],
        breaks: Breaks::default(),
        started: None,
        last: None,
        last_at: Duration::ZERO,
        intervals: 0,
        info,
        prune_at: Instant::now(),
    };
    let before = crate::sys::children_rusage();
    let run = Run {
        cfg: &rcfg,
        write: false,
        events: Some((sampled, tracefs)),
        keep_processes: false,
        follow_remaps: false,
        tick: cfg.interval,
        on_signal: OnSignal::Forward,
    };
    let done = recorder::record(run, &mut sink)?;
    let elapsed = done.elapsed;
    if let Some(t0) = sink.started
        && cfg.interval.is_some()
        && t0.elapsed() > sink.last_at + Duration::from_millis(1)
    {
        // The last, partial interval, as perf prints it.
        sink.interval(t0.elapsed())?;
    }
    let readings = sink.read()?;
    let unsupported = sink.unsupported();
    let mut notes: Vec<String> = done.notes.clone();
    if let Some(c) = &sink.counters {
        notes.extend(c.notes.iter().cloned());
    }
    if done.lost > 0 {
        notes.push(format!(
            "the rings of the summed events overflowed: {} samples lost, so their bytes cover fewer hits than counted (use a bigger -m)",
            done.lost
        ));
    }
    let after = crate::sys::children_rusage();
    let rusage = (cfg.target == Target::Command && cfg.repeat == 1)
        .then_some((after.0 - before.0, after.1 - before.1));
    let interrupted = matches!(done.reason, crate::live::driver::StopReason::Signal(_));
    Ok(RunResult {
        readings,
        bytes: sink.bytes,
        unsupported,
        events: sink.info,
        elapsed,
        rusage,
        exit: done.exit.map_or(0, |e| e.shell_code()),
        interrupted,
        notes,
    })
}

fn is_clock(spec: &EventSpec) -> bool {
    use perf_event_open_sys::bindings::{PERF_COUNT_SW_CPU_CLOCK, PERF_COUNT_SW_TASK_CLOCK};
    matches!(spec.kind, EventKind::Software { config }
        if config == PERF_COUNT_SW_TASK_CLOCK as u64 || config == PERF_COUNT_SW_CPU_CLOCK as u64)
}

/// The lines of one table or interval: counts, scaled; the clock's CPUs utilized; rates
/// per second of task clock where one was counted; the summed bytes.
fn lines(
    info: &[EventInfo],
    readings: &[Vec<Reading>],
    bytes: &[Vec<(u64, u64)>],
    unsupported: &[bool],
    wall: Duration,
    noise: Option<&[f64]>,
    cfg: &StatConfig,
) -> Vec<Line> {
    let slots = readings.first().map_or(1, Vec::len);
    let clock_of = |slot: usize| -> Option<f64> {
        info.iter()
            .zip(readings)
            .find(|(i, _)| i.clock)
            .and_then(|(_, r)| r.get(slot)?.scaled())
    };
    let mut out = Vec::new();
    for (e, ev) in info.iter().enumerate() {
        for slot in 0..slots {
            let r = readings[e].get(slot).copied().unwrap_or_default();
            let count = if unsupported.get(e).copied().unwrap_or(false) {
                Count::NotSupported
            } else {
                match r.scaled() {
                    Some(v) => Count::Value(v),
                    None => Count::NotCounted,
                }
            };
            let mut metrics = Vec::new();
            if let Count::Value(v) = count {
                if let Some(label) = ev.label {
                    let (b, _) = bytes[e].get(slot).copied().unwrap_or_default();
                    metrics.push(Metric::bytes(b as f64, label));
                }
                if ev.clock {
                    if !wall.is_zero() {
                        metrics.push(Metric::cpus_utilized(v / wall.as_nanos() as f64));
                    }
                } else if let Some(ns) = clock_of(slot).filter(|ns| *ns > 0.0) {
                    metrics.push(Metric::rate(v / (ns / 1e9)));
                }
            }
            out.push(Line {
                event: ev.name.clone(),
                clock: ev.clock,
                count,
                enabled: r.enabled,
                running: r.running,
                noise: noise.map(|n| n[e]),
                metrics,
                cpu: cfg.per_cpu.then(|| cfg.cpus[slot]),
            });
        }
    }
    out
}

/// The final table: one run's counts, or the mean of the runs with their spread.
fn print_table(
    cfg: &StatConfig,
    layout: &Layout,
    runs: &[RunResult],
    out: &mut Box<dyn Write>,
) -> Result<()> {
    let Some(last) = runs.last() else {
        return Ok(());
    };
    let csv = layout.separator.is_some();
    let n = runs.len();
    let (readings, bytes, noise) = if n == 1 {
        (last.readings.clone(), last.bytes.clone(), None)
    } else {
        let (r, b, noise) = mean_of_runs(runs);
        // perf shows no spread on per-CPU lines.
        (r, b, noise.filter(|_| !cfg.per_cpu))
    };
    let elapsed: Vec<f64> = runs.iter().map(|r| r.elapsed.as_secs_f64()).collect();
    let wall = Duration::from_secs_f64(print::mean_spread(&elapsed).0);
    let lines = lines(
        &last.events,
        &readings,
        &bytes,
        &last.unsupported,
        wall,
        noise.as_deref(),
        cfg,
    );
    if !csv {
        out.write_all(print::table_header(&target_name(cfg), n as u32).as_bytes())?;
    }
    for l in &lines {
        out.write_all(print::line(layout, None, l).as_bytes())?;
    }
    if !csv {
        out.write_all(print::table_footer(&elapsed, last.rusage).as_bytes())?;
        let summed: Vec<String> = last
            .events
            .iter()
            .filter_map(|e| e.label.map(|l| format!("{} ({l})", e.name)))
            .collect();
        if !summed.is_empty() {
            writeln!(
                out,
                " Counted in the kernel: every event above. Bytes summed from each hit's payload \
                 (sampled with PERF_SAMPLE_RAW): {}\n",
                summed.join(", ")
            )?;
        }
    }
    Ok(())
}

/// The runs' mean readings and bytes, and each event's spread in percent of its mean.
fn mean_of_runs(runs: &[RunResult]) -> (Readings, Bytes, Option<Vec<f64>>) {
    let first = &runs[0];
    let mut readings = first.readings.clone();
    let mut bytes = first.bytes.clone();
    let mut noise = Vec::new();
    let avg = |f: &dyn Fn(&RunResult) -> u64| -> u64 {
        (runs.iter().map(f).sum::<u64>() as f64 / runs.len() as f64).round() as u64
    };
    for e in 0..first.readings.len() {
        for slot in 0..first.readings[e].len() {
            let counts: Vec<f64> = runs
                .iter()
                .filter_map(|r| r.readings[e].get(slot)?.scaled())
                .collect();
            let (mean, spread) = print::mean_spread(&counts);
            if slot == 0 {
                noise.push(if mean > 0.0 {
                    100.0 * spread / mean
                } else {
                    0.0
                });
            }
            let enabled = avg(&|r| r.readings[e][slot].enabled);
            // Means of counts already scaled: shown as they are.
            readings[e][slot] = Reading {
                value: mean.round() as u64,
                enabled,
                running: enabled,
            };
            bytes[e][slot] = (avg(&|r| r.bytes[e][slot].0), avg(&|r| r.bytes[e][slot].1));
        }
    }
    (readings, bytes, Some(noise))
}

/// What the table's heading names: the command, the processes, or the system.
fn target_name(cfg: &StatConfig) -> String {
    match &cfg.target {
        Target::Command => {
            let argv: Vec<String> = cfg
                .command
                .iter()
                .flatten()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            format!("'{}'", argv.join(" "))
        }
        Target::Pids(p) => format!("process id '{}'", join(p)),
        Target::Tids(t) => format!("thread id '{}'", join(t)),
        Target::SystemWide => {
            let online = crate::sys::online_cpus().unwrap_or_default();
            if cfg.cpus == online {
                "'system wide'".to_string()
            } else {
                format!("'CPU(s) {}'", join(&cfg.cpus))
            }
        }
    }
}

fn join(ids: &[u32]) -> String {
    ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}
