//! rss's outputs: the text report, folded stacks and flame graph weighted by resident bytes,
//! and pprof with alloc, inuse and resident sample types, through the report's printers.

use std::io::Write;
use std::path::Path;

use anyhow::Result;
use rustc_hash::FxHashMap;

use crate::aggregate::{Aggregate, Weigher};
use crate::allocs::profile::{Columns, comms_of, write_stack};
use crate::allocs::resident::{self, Resident, StackTotals};
use crate::allocs::sink::LeakSink;
use crate::allocs::table::{AllocStack, Space};
use crate::config::report::{Input, ReportConfig, ReportOutput};
use crate::config::rss::RssConfig;
use crate::maps::ProcessMaps;
use crate::output::{self, Resolved};
use crate::session::Processes;
use crate::stacks::FrameId;

/// The sample types, one event each (a count column and a bytes column).
const ALLOC: usize = 0;
const INUSE: usize = 1;
const RESIDENT: usize = 2;
const EVENTS: [&str; 3] = ["alloc_space", "inuse_space", "resident_space"];
const COUNT_NAMES: [&str; 3] = ["alloc_objects", "inuse_objects", "resident_pages"];

/// What the run left, for the report.
pub(super) struct Data<'a> {
    pub resident: &'a Resident,
    pub sink: &'a mut LeakSink,
    pub procs: &'a Processes,
    pub maps: ProcessMaps,
    pub lost: u64,
}

/// One allocation stack of one process.
struct Row {
    space: Space,
    stack: AllocStack,
    t: StackTotals,
}

/// The report, built once: rows in report order, the aggregate the printers take, names.
pub(super) struct Built {
    rows: Vec<Row>,
    /// Faults outside allocations: (process, region name, faults), most first.
    regions: Vec<(Space, String, u64)>,
    /// Pages per toucher under each (process, allocation stack), most first.
    touchers: FxHashMap<(Space, AllocStack), Vec<(AllocStack, u64)>>,
    page_size: u64,
    agg: Aggregate,
    res: Resolved,
    rcfg: ReportConfig,
    comms: FxHashMap<Space, String>,
}

pub(super) fn build(d: Data<'_>) -> Built {
    let r = d.resident;
    let page_size = r.page_size();
    let mut rows: Vec<Row> = r
        .stacks()
        .map(|(space, stack, t)| Row {
            space,
            stack,
            t: *t,
        })
        .collect();
    // The most resident first; then the most live, the most allocated.
    rows.sort_unstable_by_key(|w| {
        (
            std::cmp::Reverse(w.t.live_pages),
            std::cmp::Reverse(w.t.pages()),
            std::cmp::Reverse(w.t.live_bytes),
            std::cmp::Reverse(w.t.alloc_bytes),
            w.space,
            w.stack,
        )
    });
    // One row per name: a file can be two modules of the table (a mapping described from
    // /proc by device and inode, another recorded with its build-id).
    let mut by_name: FxHashMap<(Space, String), u64> = FxHashMap::default();
    for (s, reg, n) in r.regions() {
        *by_name
            .entry((s, resident::region_name(&d.maps, reg)))
            .or_insert(0) += n;
    }
    let mut regions: Vec<(Space, String, u64)> = by_name
        .into_iter()
        .map(|((s, name), n)| (s, name, n))
        .collect();
    regions.sort_unstable_by(|a, b| b.2.cmp(&a.2).then_with(|| a.1.cmp(&b.1)));
    let mut touchers: FxHashMap<(Space, AllocStack), Vec<(AllocStack, u64)>> = FxHashMap::default();
    for (s, a, t, n) in r.touchers() {
        touchers.entry((s, a)).or_default().push((t, n));
    }
    for v in touchers.values_mut() {
        v.sort_unstable_by_key(|&(t, n)| (std::cmp::Reverse(n), t));
    }
    let spaces = rows.iter().map(|w| w.space);
    let comms = comms_of(d.procs, spaces.chain(regions.iter().map(|r| r.0)));
    let agg = aggregate(&rows, &comms, d.sink, d.maps, d.lost, page_size);
    let rcfg = ReportConfig {
        output: ReportOutput::Folded,
        weight: crate::config::report::Weight::Bytes,
        ..ReportConfig::plain(Input::File("memperf rss".into()))
    };
    let res = output::resolve(&rcfg, &agg, None);
    Built {
        rows,
        regions,
        touchers,
        page_size,
        agg,
        res,
        rcfg,
        comms,
    }
}

/// The three sample types per (process, stack) as a report aggregate.
fn aggregate(
    rows: &[Row],
    comms: &FxHashMap<Space, String>,
    sink: &mut LeakSink,
    maps: ProcessMaps,
    lost: u64,
    page_size: u64,
) -> Aggregate {
    let mut columns = Columns::default();
    for w in rows {
        let cols = [
            (ALLOC, w.t.allocs, w.t.alloc_bytes),
            (INUSE, w.t.live_allocs, w.t.live_bytes),
            (RESIDENT, w.t.live_pages, w.t.live_pages * page_size),
        ];
        columns.add(comms, w.space, w.stack, cols);
    }
    columns.into_aggregate(EVENTS.len(), sink, maps, lost)
}

/// The text report.
pub(super) fn write_text(
    w: &mut dyn Write,
    cfg: &RssConfig,
    r: &Resident,
    b: &mut Built,
) -> Result<()> {
    let s = &r.stats;
    let kib = |pages: u64| pages * b.page_size / 1024;
    let title = format!(
        "Resident memory by allocation stack: {} page faults, {} pages ({} KiB) faulted into \
         allocations, {} faults outside them",
        s.faults,
        s.in_allocs,
        kib(s.in_allocs),
        s.in_mappings
    );
    crate::output::wrap::write_line(w, &title)?;
    let mut ids: Vec<FrameId> = Vec::new();
    let many = b.comms.len() > 1;
    for row in b.rows.iter().take(cfg.top) {
        let t = &row.t;
        let untouched = t.live_allocs.saturating_sub(t.touched_live);
        let who = if many {
            format!(" [pid {} {}]", row.space, b.comms[&row.space])
        } else {
            String::new()
        };
        writeln!(
            w,
            "\t{} pages resident ({} KiB) in {} live allocations of {} bytes ({} faulted in \
             no page); {} allocations of {} bytes made, {} pages faulted in all{who}",
            t.live_pages,
            kib(t.live_pages),
            t.live_allocs,
            t.live_bytes,
            untouched,
            t.allocs,
            t.alloc_bytes,
            t.pages(),
        )?;
        write_stack(w, &b.agg, &b.res, row.stack, "\t\t", &mut ids)?;
        if let Some(ts) = b.touchers.get(&(row.space, row.stack)) {
            for &(toucher, n) in ts.iter().take(5) {
                writeln!(w, "\t\ttouched {n} pages from:")?;
                write_stack(w, &b.agg, &b.res, toucher, "\t\t\t", &mut ids)?;
            }
        }
    }
    if b.rows.len() > cfg.top {
        writeln!(w, "\t({} more stacks; raise -T)", b.rows.len() - cfg.top)?;
    }
    if !b.regions.is_empty() {
        writeln!(w, "Page faults outside every allocation, by mapping:")?;
        for (space, name, n) in &b.regions {
            let who = if many {
                format!(" [pid {space}]")
            } else {
                String::new()
            };
            writeln!(w, "\t{n} faults in {name}{who}")?;
        }
    }
    Ok(())
}

/// The pprof profile: alloc_objects/alloc_space, inuse_objects/inuse_space,
/// resident_pages/resident_space (the default).
pub(super) fn write_pprof(b: &Built, path: &Path) -> Result<()> {
    use crate::output::pprof;
    let names: Vec<String> = EVENTS.iter().map(|s| s.to_string()).collect();
    let weighers = [Weigher::Fixed(1), Weigher::Fixed(1), Weigher::Fixed(1)];
    let mut p = pprof::build(&b.rcfg, None, &names, &weighers, &b.agg, &b.res);
    // Each event's columns are named as pprof's heap profiles name theirs: the count, then
    // the bytes under the event's own name.
    for (i, vt) in p.sample_type.iter_mut().enumerate() {
        let names = if i % 2 == 0 { &COUNT_NAMES } else { &EVENTS };
        if let Some(name) = names.get(i / 2) {
            p.string_table.push((*name).to_string());
            vt.r#type = p.string_table.len() as i64 - 1;
        }
    }
    p.default_sample_type = p
        .string_table
        .iter()
        .position(|s| s == EVENTS[RESIDENT])
        .map_or(0, |i| i as i64);
    let outside: u64 = b.regions.iter().map(|r| r.2).sum();
    pprof::add_comment(
        &mut p,
        &format!("{outside} page faults outside every allocation (not in these samples)"),
    );
    pprof::write(&p, path)
}

/// Resident bytes per stack, folded, with the faults outside allocations under
/// `[outside allocations];MAPPING`.
fn folded_lines(b: &mut Built) -> Result<Vec<u8>> {
    let mut agg_counts = FxHashMap::default();
    for (&(ev, p, s), &n) in &b.agg.bytes {
        if ev == RESIDENT && n > 0 {
            agg_counts.insert((0, p, s), n);
        }
    }
    for (space, name, n) in &b.regions {
        let comm = b.comms.get(space).cloned().unwrap_or_default();
        let p = b
            .agg
            .prefixes
            .intern(&format!("{comm};[outside allocations];{name}"));
        *agg_counts.entry((0, p, None)).or_insert(0) += n * b.page_size;
    }
    let saved = std::mem::replace(&mut b.agg.counts, agg_counts);
    let mut out = Vec::new();
    let r = output::write_folded(&b.rcfg, &[], None, &b.agg, &mut b.res, &mut out);
    b.agg.counts = saved;
    r?;
    Ok(out)
}

pub(super) fn write_folded(w: &mut dyn Write, b: &mut Built) -> Result<()> {
    w.write_all(&folded_lines(b)?)?;
    Ok(())
}

pub(super) fn write_flamegraph(path: &Path, cfg: &RssConfig, b: &mut Built) -> Result<()> {
    let text = folded_lines(b)?;
    let lines: Vec<String> = String::from_utf8_lossy(&text)
        .lines()
        .map(str::to_string)
        .collect();
    let total: u64 = b.rows.iter().map(|r| r.t.live_pages).sum();
    let what = match &cfg.leak.target {
        _ if cfg.input.is_some() => cfg
            .input
            .as_ref()
            .map_or(String::new(), |p| p.display().to_string()),
        crate::config::leak::LeakTarget::Pid(p) => format!("pid {p}"),
        crate::config::leak::LeakTarget::Command(argv) => argv
            .iter()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" "),
        crate::config::leak::LeakTarget::System => "the system".to_string(),
    };
    let flame = output::Flame {
        output: path,
        title: format!("Resident memory by allocation stack: {what}"),
        subtitle: format!(
            "memperf rss: {total} pages resident in live allocations{}; faults outside them \
             under [outside allocations]",
            crate::output::header::truncated_part(&b.agg.stats)
        ),
        count_name: "bytes".to_string(),
        width: None,
        colors: "mem",
        inverted: false,
        kernel_names: &b.res.kernel_names,
    };
    output::draw_flamegraph(&flame, &lines)
}
