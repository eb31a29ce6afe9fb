//! heap's outputs: the text report, folded stacks and flame graphs of one metric, and pprof
//! with the sample types Go's heap profiles and Pyroscope know.

use std::io::Write;
use std::path::Path;

use anyhow::Result;
use rustc_hash::FxHashMap;

use crate::aggregate::{Aggregate, Weigher};
use crate::allocs::heap::{HeapTracker, StackHeap, bucket};
use crate::allocs::profile::{Columns, comms_of, write_stack_of};
use crate::allocs::sink::LeakSink;
use crate::allocs::table::{AllocStack, Space};
use crate::config::heap::{HeapConfig, HeapMetric};
use crate::config::leak::LeakTarget;
use crate::config::report::{Input, ReportConfig, ReportOutput};
use crate::maps::ProcessMaps;
use crate::output::{self, NameOptions, Resolved, Resolver, human_bytes, wrap};
use crate::session::Processes;
use crate::stacks::StackTable;

use super::retained::Retained;

/// The width of the summary's labels (`  temporary  `): a long line goes on under its text.
const LABEL: usize = 13;

/// The aggregate's events: each a count column and a bytes column.
const ALLOC: usize = 0;
const INUSE: usize = 1;
const PEAK: usize = 2;
const TEMPORARY: usize = 3;
const EVENTS: [&str; 4] = ["alloc", "inuse", "peak", "temporary"];

/// What the run left, for the report.
pub(super) struct Data<'a> {
    pub heap: &'a mut HeapTracker,
    pub sink: &'a mut LeakSink,
    pub procs: &'a Processes,
    pub maps: ProcessMaps,
    pub lost: u64,
}

/// One allocation stack of one process.
struct Row {
    space: Space,
    stack: AllocStack,
    h: StackHeap,
}

/// The report, built once.
pub(super) struct Built {
    rows: Vec<Row>,
    agg: Aggregate,
    res: Resolved,
    rcfg: ReportConfig,
    comms: FxHashMap<Space, String>,
}

/// What the text report reads: each stack's figures, the stacks' frames and their names,
/// and each process's command.
pub(super) struct View<'a> {
    rows: &'a [Row],
    stacks: &'a StackTable,
    res: &'a Resolved,
    comms: &'a FxHashMap<Space, String>,
}

impl Built {
    pub(super) fn view(&self) -> View<'_> {
        View {
            rows: &self.rows,
            stacks: &self.agg.book.stacks,
            res: &self.res,
            comms: &self.comms,
        }
    }
}

/// The report configuration the shared printers take.
fn report_config() -> ReportConfig {
    ReportConfig {
        output: ReportOutput::Folded,
        weight: crate::config::report::Weight::Bytes,
        ..ReportConfig::plain(Input::File("memperf heap".into()))
    }
}

/// Names the frames of reports made while tracing goes on: each frame once, as the sink
/// interns it, so a report every few seconds names only the frames new since the last.
pub(super) struct Namer(Resolver);

impl Default for Namer {
    fn default() -> Self {
        Namer(Resolver::new(NameOptions::of(&report_config()), None))
    }
}

/// The text report of the analyses so far, while tracing goes on: read from the tracker
/// and the sink's own tables, which keep growing (nothing is taken from them).
pub(super) fn write_interval(
    w: &mut dyn Write,
    cfg: &HeapConfig,
    s: &Summary<'_>,
    sink: &LeakSink,
    procs: &Processes,
    namer: &mut Namer,
) -> Result<()> {
    let rows: Vec<Row> = s
        .heap
        .stacks_now()
        .map(|(space, stack, h)| Row { space, stack, h })
        .collect();
    let comms = comms_of(procs, rows.iter().map(|w| w.space));
    let maps = procs.maps().unwrap_or(ProcessMaps::empty());
    let res = namer.0.catch_up(&sink.frames, maps);
    let view = View {
        rows: &rows,
        stacks: &sink.stacks,
        res,
        comms: &comms,
    };
    write_text(w, cfg, s, &view)
}

pub(super) fn build(d: Data<'_>) -> Built {
    let rows: Vec<Row> = d
        .heap
        .stacks()
        .map(|(space, stack, h)| Row {
            space,
            stack,
            h: *h,
        })
        .collect();
    let comms = comms_of(d.procs, rows.iter().map(|w| w.space));
    let agg = aggregate(&rows, &comms, d.sink, d.maps, d.lost);
    let rcfg = report_config();
    let res = output::resolve(&rcfg, &agg, None);
    Built {
        rows,
        agg,
        res,
        rcfg,
        comms,
    }
}

fn aggregate(
    rows: &[Row],
    comms: &FxHashMap<Space, String>,
    sink: &mut LeakSink,
    maps: ProcessMaps,
    lost: u64,
) -> Aggregate {
    let mut columns = Columns::default();
    for w in rows {
        let h = &w.h;
        let cols = [
            (ALLOC, h.allocs, h.alloc_bytes),
            (INUSE, h.leaked_allocs(), h.leaked_bytes()),
            (PEAK, h.peak_allocs, h.peak_bytes),
            (TEMPORARY, h.temporary, h.temporary),
        ];
        let nonzero = cols.into_iter().filter(|&(_, n, b)| n > 0 || b > 0);
        columns.add(comms, w.space, w.stack, nonzero);
    }
    columns.into_aggregate(EVENTS.len(), sink, maps, lost)
}

fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// The run's figures, for the text report.
pub(super) struct Summary<'a> {
    pub heap: &'a HeapTracker,
    pub retained: Option<Retained>,
    /// Allocations the table could not keep (`--max-entries`), and events lost.
    pub dropped: u64,
    pub lost: u64,
    /// The sample clock of a report while tracing goes on (None: the final report).
    pub now: Option<u64>,
    /// The allocation stacks unwound so far, and those truncated.
    pub stacks: crate::allocs::unwinds::StackCounts,
}

/// The text report.
pub(super) fn write_text(
    w: &mut dyn Write,
    cfg: &HeapConfig,
    s: &Summary<'_>,
    b: &View<'_>,
) -> Result<()> {
    let h = s.heap;
    let t0 = h.first_time.unwrap_or(0);
    let secs = |t: u64| t.saturating_sub(t0) as f64 / 1e9;
    let (end, when) = match s.now {
        Some(now) => (now.max(h.last_time), "now"),
        None => (h.last_time, "at the end"),
    };
    writeln!(
        w,
        "HEAP: {} allocations ({}) and {} frees in {:.3} s",
        h.allocs,
        human_bytes(h.alloc_bytes),
        h.frees,
        secs(end)
    )?;
    writeln!(
        w,
        "  peak       {} ({} B) live at {:.3} s",
        human_bytes(h.peak_bytes),
        h.peak_bytes,
        secs(h.peak_time)
    )?;
    writeln!(
        w,
        "  leaked     {} ({} B) in {} allocations live {when}",
        human_bytes(h.leaked_bytes()),
        h.leaked_bytes(),
        h.leaked_allocs()
    )?;
    let temporary = format!(
        "  temporary  {} of {} allocations ({:.1}%) freed with no other allocator call \
         between (heaptrack); {} freed with at most {} other allocations of their thread \
         between (memray)",
        h.temporary,
        h.allocs,
        percent(h.temporary, h.allocs),
        h.temporary_within,
        cfg.temporary_threshold,
    );
    wrap::write_hanging(w, &temporary, LABEL)?;
    let attached = matches!(cfg.leak.target, LeakTarget::Pid(_));
    write_retained(w, s.retained, t0, attached)?;
    if s.lost > 0 || s.dropped > 0 {
        let incomplete = format!(
            "  INCOMPLETE {} events lost, {} allocations not kept (--max-entries): the figures \
             above may be over- or understated",
            s.lost, s.dropped
        );
        wrap::write_hanging(w, &incomplete, LABEL)?;
    }
    if s.stacks.unwound > 0 {
        wrap::write_hanging(w, &format!("  stacks     {}", s.stacks.clause()), LABEL)?;
    }
    if let Some(fp) = s.stacks.fp_clause() {
        wrap::write_hanging(w, &format!("  stacks     {fp}"), LABEL)?;
    }
    let tables: [(&str, HeapMetric); 4] = [
        ("PEAK CONSUMERS (live bytes at the peak)", HeapMetric::Peak),
        ("MOST TEMPORARY ALLOCATIONS", HeapMetric::Temporary),
        ("MOST ALLOCATIONS (churn)", HeapMetric::Allocations),
        ("LEAKED (live at the end)", HeapMetric::Leaked),
    ];
    let mut ids = Vec::new();
    for (title, metric) in tables {
        let mut rows: Vec<&Row> = b.rows.iter().filter(|r| weight(&r.h, metric) > 0).collect();
        rows.sort_by_key(|r| (std::cmp::Reverse(weight(&r.h, metric)), r.space, r.stack));
        if rows.is_empty() {
            continue;
        }
        writeln!(w, "\n{title}:")?;
        for r in rows.iter().take(cfg.top) {
            writeln!(w, "  {}{}", row_line(&r.h, metric, h), who(b, r.space))?;
            write_stack_of(w, b.stacks, b.res, r.stack, "      ", &mut ids)?;
        }
        if rows.len() > cfg.top {
            writeln!(w, "  ({} more stacks; raise -T)", rows.len() - cfg.top)?;
        }
    }
    write_histogram(w, h)
}

/// The retained pages' line. Attached to a running process (`-p`), the blocks it allocated
/// before are unknown, and the pages they hold look free: the line says so instead of
/// calling them the allocator's.
fn write_retained(w: &mut dyn Write, r: Option<Retained>, t0: u64, attached: bool) -> Result<()> {
    let Some(r) = r else {
        writeln!(
            w,
            "  retained   not measured (the process's page table is read only while it lives)"
        )?;
        return Ok(());
    };
    let bytes = |p: u64| human_bytes(p * r.page_size);
    let (live, what) = if attached {
        (
            "allocations made since memperf attached",
            "none of those: free memory the allocator keeps, or blocks allocated before \
             memperf attached, which it never saw and cannot tell apart (`memperf heap -- \
             CMD` traces a program from its start)",
        )
    } else {
        (
            "live allocations",
            "none: free memory the allocator keeps (malloc_trim would return most of it), \
             not a leak",
        )
    };
    let retained = format!(
        "  retained   of the heap's {} resident pages ({}) at {:.3} s, {} ({}) hold {live} \
         and {} ({}, {:.1}%) hold {what}",
        r.resident_pages,
        bytes(r.resident_pages),
        r.time.saturating_sub(t0) as f64 / 1e9,
        r.held_pages,
        bytes(r.held_pages),
        r.retained_pages,
        bytes(r.retained_pages),
        percent(r.retained_pages, r.resident_pages),
    );
    wrap::write_hanging(w, &retained, LABEL)?;
    Ok(())
}

fn who(b: &View<'_>, space: Space) -> String {
    if b.comms.len() > 1 {
        format!(" [pid {space} {}]", b.comms[&space])
    } else {
        String::new()
    }
}

fn row_line(s: &StackHeap, metric: HeapMetric, h: &HeapTracker) -> String {
    match metric {
        HeapMetric::Peak => format!(
            "{} in {} allocations ({:.1}% of the peak)",
            human_bytes(s.peak_bytes),
            s.peak_allocs,
            percent(s.peak_bytes, h.peak_bytes)
        ),
        HeapMetric::Temporary => format!(
            "{} temporary of {} allocations ({:.1}%)",
            s.temporary,
            s.allocs,
            percent(s.temporary, s.allocs)
        ),
        HeapMetric::Allocations | HeapMetric::AllocatedBytes => format!(
            "{} allocations of {} ({} frees)",
            s.allocs,
            human_bytes(s.alloc_bytes),
            s.frees
        ),
        HeapMetric::Leaked => format!(
            "{} in {} allocations",
            human_bytes(s.leaked_bytes()),
            s.leaked_allocs()
        ),
    }
}

/// What a stack weighs under `metric` (folded, flame graph, text tables).
fn weight(s: &StackHeap, metric: HeapMetric) -> u64 {
    match metric {
        HeapMetric::Peak => s.peak_bytes,
        HeapMetric::Temporary => s.temporary,
        HeapMetric::Leaked => s.leaked_bytes(),
        HeapMetric::Allocations => s.allocs,
        HeapMetric::AllocatedBytes => s.alloc_bytes,
    }
}

fn write_histogram(w: &mut dyn Write, h: &HeapTracker) -> Result<()> {
    let top = h.histogram.iter().map(|b| b.0).max().unwrap_or(0);
    if top == 0 {
        return Ok(());
    }
    writeln!(w, "\nALLOCATION SIZES:")?;
    let label = |i: usize| match i {
        0 => "0".to_string(),
        _ => human_bytes(1u64 << (i - 1)),
    };
    for (i, &(n, bytes)) in h.histogram.iter().enumerate() {
        if n == 0 {
            continue;
        }
        let bar = "#".repeat(((n as f64 / top as f64) * 40.0).ceil() as usize);
        let range = if i == 0 {
            "0".to_string()
        } else {
            format!("[{}, {})", label(i), label(i + 1))
        };
        writeln!(w, "  {range:>22} {n:>10} {:>10} {bar}", human_bytes(bytes))?;
    }
    debug_assert_eq!(bucket(0), 0);
    Ok(())
}

/// The metric by stack, folded.
fn folded_lines(b: &mut Built, metric: HeapMetric) -> Result<Vec<u8>> {
    let (ev, of_bytes) = match metric {
        HeapMetric::Peak => (PEAK, true),
        HeapMetric::Temporary => (TEMPORARY, false),
        HeapMetric::Leaked => (INUSE, true),
        HeapMetric::Allocations => (ALLOC, false),
        HeapMetric::AllocatedBytes => (ALLOC, true),
    };
    let source = if of_bytes {
        &b.agg.bytes
    } else {
        &b.agg.counts
    };
    let picked: FxHashMap<_, _> = source
        .iter()
        .filter(|&(&(e, _, _), &n)| e == ev && n > 0)
        .map(|(&(_, p, s), &n)| ((0, p, s), n))
        .collect();
    let saved = std::mem::replace(&mut b.agg.counts, picked);
    let mut out = Vec::new();
    let r = output::write_folded(&b.rcfg, &[], None, &b.agg, &mut b.res, &mut out);
    b.agg.counts = saved;
    r?;
    Ok(out)
}

pub(super) fn write_folded(w: &mut dyn Write, b: &mut Built, metric: HeapMetric) -> Result<()> {
    w.write_all(&folded_lines(b, metric)?)?;
    Ok(())
}

pub(super) fn write_flamegraph(
    path: &Path,
    cfg: &HeapConfig,
    h: &HeapTracker,
    b: &mut Built,
) -> Result<()> {
    let text = folded_lines(b, cfg.metric)?;
    let lines: Vec<String> = String::from_utf8_lossy(&text)
        .lines()
        .map(str::to_string)
        .collect();
    let (what, count_name, total) = match cfg.metric {
        HeapMetric::Peak => ("live bytes at the peak", "bytes", human_bytes(h.peak_bytes)),
        HeapMetric::Temporary => (
            "temporary allocations",
            "allocations",
            h.temporary.to_string(),
        ),
        HeapMetric::Leaked => (
            "bytes live at the end",
            "bytes",
            human_bytes(h.leaked_bytes()),
        ),
        HeapMetric::Allocations => ("allocations", "allocations", h.allocs.to_string()),
        HeapMetric::AllocatedBytes => ("bytes allocated", "bytes", human_bytes(h.alloc_bytes)),
    };
    let flame = output::Flame {
        output: path,
        title: format!("Heap: {what}"),
        subtitle: format!(
            "memperf heap: {total} {what}{}",
            crate::output::header::truncated_part(&b.agg.stats)
        ),
        count_name: count_name.to_string(),
        width: None,
        colors: "mem",
        inverted: false,
        kernel_names: &b.res.kernel_names,
    };
    output::draw_flamegraph(&flame, &lines)
}

/// The pprof profile: alloc_objects/alloc_space over the run, inuse_objects/inuse_space at
/// the end (the default, as Go's heap profiles).
pub(super) fn write_pprof(b: &mut Built, path: &Path) -> Result<()> {
    use crate::output::pprof;
    const TYPES: [&str; 4] = [
        "alloc_objects",
        "alloc_space",
        "inuse_objects",
        "inuse_space",
    ];
    let names: Vec<String> = EVENTS.iter().map(|s| s.to_string()).collect();
    let weighers = [
        Weigher::Fixed(1),
        Weigher::Fixed(1),
        Weigher::Fixed(1),
        Weigher::Fixed(1),
    ];
    // Only the first two events go in: the peak and temporary columns have no names pprof's
    // readers know.
    let kept = std::mem::replace(&mut b.agg.stats.kept, vec![1, 1, 0, 0]);
    let mut p = pprof::build(&b.rcfg, None, &names, &weighers, &b.agg, &b.res);
    b.agg.stats.kept = kept;
    for (i, vt) in p.sample_type.iter_mut().enumerate() {
        if let Some(name) = TYPES.get(i) {
            p.string_table.push((*name).to_string());
            vt.r#type = p.string_table.len() as i64 - 1;
        }
    }
    p.default_sample_type = p
        .string_table
        .iter()
        .position(|s| s == "inuse_space")
        .map_or(0, |i| i as i64);
    pprof::write(&p, path)
}
