//! Naming the unique frames once, then printing stacks folded or as a text report.

mod file;
pub mod header;
mod named;
pub mod pprof;
pub mod script;

pub use file::{check_output_path, create_output_file};
use named::named_stacks;

use std::io::Write;
use std::sync::Arc;

use anyhow::{Context, Result};

use crate::cli::{ByKey, FlameConfig, ReportConfig};
use crate::perfdata::PerfDataFile;
use crate::stacks::{FrameId, FrameTable};
use crate::symbolize::{
    Frame, JitSource, Kallsyms, ModuleKey, SymbolizeOptions, SymbolizeStats, Symbolized, Symbolizer,
};

use crate::aggregate::{Aggregate, ByRow, FrameKey};
use crate::maps::{ModuleKind, ProcessMaps};

/// The names of every unique frame (outermost first; inline frames make several).
pub struct Resolved {
    pub names: Vec<Vec<String>>,
    /// Unique frames without a name.
    pub unknown_frames: u64,
    pub symbolize: SymbolizeStats,
    pub kernel_hidden: bool,
    /// Names of kernel frames, drawn apart in flame graphs.
    pub kernel_names: rustc_hash::FxHashSet<String>,
    /// What `memperf script` prints for each frame.
    pub info: Vec<FrameInfo>,
    /// Source file and line of each name in `names` (with `--lines`).
    pub lines: Vec<Vec<(Option<String>, Option<u32>)>>,
    /// The [`FrameKey::Recovered`] mark's id, once met.
    pub recovered_mark: Option<FrameId>,
}

/// What the text report and `memperf script` put after a frame read from the live process
/// because the copied stack ended before it.
pub const RECOVERED: &str = "[recovered]";

/// A frame as perf script prints it: `addr sym+off (dso)`.
pub struct FrameInfo {
    pub addr: u64,
    pub sym: Option<String>,
    pub off: Option<u64>,
    pub dso: String,
}

/// How frames are named: what report's options say, or a tool's defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NameOptions {
    /// Inlined functions as frames of their own.
    pub inline: bool,
    /// `(file:line)` after each name.
    pub lines: bool,
    pub demangle: bool,
    /// Frames without a symbol named by module and offset instead of `[module]`.
    pub addrs: bool,
    /// Kernel frames suffixed `_[k]`.
    pub kernel_annotate: bool,
}

impl NameOptions {
    /// What a report's configuration asks for.
    pub fn of(cfg: &ReportConfig) -> NameOptions {
        NameOptions {
            inline: cfg.inline,
            lines: cfg.lines,
            demangle: cfg.demangle,
            addrs: cfg.addrs,
            kernel_annotate: cfg.kernel_annotate,
        }
    }

    /// A tool's: demangled function names, nothing else.
    pub fn plain() -> NameOptions {
        NameOptions {
            demangle: true,
            ..NameOptions::default()
        }
    }
}

fn frame_text(cfg: &NameOptions, f: &Frame, fallback: &str) -> String {
    let mut s = f.name.clone().unwrap_or_else(|| fallback.to_string());
    if cfg.lines
        && let Some(file) = &f.file
    {
        let base = file.rsplit('/').next().unwrap_or(file);
        match f.line {
            Some(l) => s.push_str(&format!(" ({base}:{l})")),
            None => s.push_str(&format!(" ({base})")),
        }
    }
    s
}

/// Names frames once each, as they are met: all of an aggregate's at the end, or a
/// streaming output's as its samples go by.
pub struct Resolver {
    cfg: NameOptions,
    sym: Symbolizer,
    res: Resolved,
}

impl Resolver {
    pub fn new(cfg: NameOptions, kallsyms: Option<Arc<Kallsyms>>) -> Resolver {
        let mut sym = Symbolizer::new(SymbolizeOptions {
            inline: cfg.inline,
            lines: cfg.lines,
            demangle: cfg.demangle,
        });
        if let Some(k) = kallsyms.filter(|k| k.malformed_lines() == 0) {
            sym.set_kallsyms(k);
        }
        Resolver {
            cfg,
            sym,
            res: Resolved {
                names: Vec::new(),
                unknown_frames: 0,
                symbolize: SymbolizeStats::default(),
                kernel_hidden: false,
                kernel_names: rustc_hash::FxHashSet::default(),
                info: Vec::new(),
                lines: Vec::new(),
                recovered_mark: None,
            },
        }
    }

    /// Names the frames of `frames` not named yet (ids are dense: those past the last).
    pub fn catch_up(&mut self, frames: &FrameTable<FrameKey>, maps: &ProcessMaps) -> &Resolved {
        let done = self.res.names.len();
        for (_, key) in frames.iter().skip(done) {
            self.name(key, maps);
        }
        &self.res
    }

    pub fn finish(mut self) -> Resolved {
        self.res.kernel_hidden = self.sym.kernel_hidden();
        self.res.symbolize = self.sym.stats();
        self.res
    }

    fn name(&mut self, key: &FrameKey, maps: &ProcessMaps) {
        let (cfg, res) = (&self.cfg, &mut self.res);
        if *key == FrameKey::Recovered {
            // A mark, not a frame: no name, so stacks merged by name do not see it.
            res.lines.push(vec![(None, None)]);
            res.info.push(FrameInfo {
                addr: 0,
                sym: None,
                off: None,
                dso: String::new(),
            });
            res.names.push(Vec::new());
            res.recovered_mark = Some(res.names.len() as u32 - 1);
            return;
        }
        let mut jit_source = None;
        let (symbolized, fallback, suffix) = match *key {
            FrameKey::Kernel { addr } => {
                let fallback = if cfg.addrs {
                    format!("[kernel.kallsyms]+{:#x}", addr.addr())
                } else {
                    "[unknown]".to_string()
                };
                let suffix = if cfg.kernel_annotate { "_[k]" } else { "" };
                (self.sym.symbolize_kernel(addr), fallback, suffix)
            }
            FrameKey::User { module, offset } => {
                let m = maps.module(module);
                // No symbol: the module's name in brackets, as FlameGraph's and inferno's
                // collapsers name such frames, or module+offset under --addrs.
                let fallback = if cfg.addrs {
                    format!("{}+{:#x}", m.basename(), offset.addr())
                } else {
                    format!("[{}]", m.basename())
                };
                let s = match m.kind() {
                    ModuleKind::File => self.sym.symbolize(
                        &ModuleKey {
                            path: &m.path,
                            build_id: m.build_id.as_deref(),
                            pid: Some(maps.module_pid(module)),
                        },
                        offset,
                    ),
                    // [vdso] and friends: the pseudo file's name is the best there is.
                    _ => Symbolized {
                        frames: vec![Frame {
                            name: Some(String::from_utf8_lossy(&m.path).into_owned()),
                            file: None,
                            line: None,
                            inlined: false,
                            sym_offset: None,
                        }],
                        unknown: None,
                    },
                };
                (s, fallback, "")
            }
            // Named above; a mark has no symbol.
            FrameKey::Recovered => (
                Symbolized {
                    frames: Vec::new(),
                    unknown: None,
                },
                RECOVERED.to_string(),
                "",
            ),
            FrameKey::Jit { pid, addr, load } => {
                let fallback = if cfg.addrs {
                    format!("{addr:#x}")
                } else {
                    "[unknown]".to_string()
                };
                let s = match self
                    .sym
                    .symbolize_jit(pid, addr, (maps.jitdump_path(pid), load))
                {
                    Some((f, source)) => {
                        jit_source = Some(source);
                        Symbolized {
                            frames: vec![f],
                            unknown: None,
                        }
                    }
                    None => Symbolized {
                        frames: Vec::new(),
                        unknown: Some(crate::symbolize::Unknown::NoSymbol),
                    },
                };
                (s, fallback, "")
            }
        };
        if symbolized.unknown.is_some() {
            res.unknown_frames += 1;
        }
        let mut list: Vec<String> = symbolized
            .frames
            .iter()
            .rev()
            .map(|f| format!("{}{suffix}", frame_text(cfg, f, &fallback)))
            .collect();
        let mut where_: Vec<(Option<String>, Option<u32>)> = symbolized
            .frames
            .iter()
            .rev()
            .map(|f| (f.file.clone(), f.line))
            .collect();
        if where_.is_empty() {
            where_.push((None, None));
        }
        res.lines.push(where_);
        if list.is_empty() {
            list.push(format!("{fallback}{suffix}"));
        } else if symbolized.unknown.is_some() {
            // A line without a function name: keep the line, name it by its address.
            if let Some(last) = list.last_mut() {
                *last = format!("{fallback}{suffix}");
            }
        }
        if matches!(key, FrameKey::Kernel { .. }) {
            res.kernel_names.extend(list.iter().cloned());
        }
        let outer = symbolized.frames.last();
        let (addr, dso) = match *key {
            FrameKey::Kernel { addr } => (addr.addr(), "[kernel.kallsyms]".to_string()),
            FrameKey::User { module, offset } => (
                offset.addr(),
                String::from_utf8_lossy(&maps.module(module).path).into_owned(),
            ),
            FrameKey::Recovered => (0, String::new()),
            FrameKey::Jit { pid, addr, .. } => (
                addr,
                match jit_source {
                    Some(JitSource::PerfMap) => format!("/tmp/perf-{pid}.map"),
                    Some(JitSource::JitDump) => maps
                        .jitdump_path(pid)
                        .map_or_else(String::new, |p| String::from_utf8_lossy(p).into_owned()),
                    None => "[unknown]".to_string(),
                },
            ),
        };
        res.info.push(FrameInfo {
            addr,
            sym: outer.and_then(|f| f.name.clone()),
            off: outer.and_then(|f| f.sym_offset),
            dso,
        });
        res.names.push(list);
    }
}

/// Looks up every unique frame once.
pub fn resolve(cfg: &ReportConfig, agg: &Aggregate, kallsyms: Option<Arc<Kallsyms>>) -> Resolved {
    let mut r = Resolver::new(NameOptions::of(cfg), kallsyms);
    r.catch_up(&agg.book.frames, &agg.maps);
    r.finish()
}

/// `comm;root;...;leaf count` lines, sorted.
pub fn write_folded(
    cfg: &ReportConfig,
    agg: &Aggregate,
    res: &mut Resolved,
    out: &mut dyn Write,
) -> Result<()> {
    let stacks = named_stacks(cfg, agg, res, None);
    let mut lines: Vec<(String, u64)> = stacks
        .iter()
        .map(|(frames, n)| (frames.join(";"), n))
        .collect();
    lines.sort();
    for (line, n) in lines {
        writeln!(out, "{line} {n}")?;
    }
    Ok(())
}

/// ` (3 stack end)`, or nothing when no reason was counted.
fn reasons(r: &crate::unwind::TruncCounts) -> String {
    if r.total() > 0 {
        format!(" ({r})")
    } else {
        String::new()
    }
}

/// The header and the top stacks of each event, most samples first.
pub fn write_text(
    cfg: &ReportConfig,
    file: &PerfDataFile,
    names: &[String],
    agg: &Aggregate,
    res: &mut Resolved,
    out: &mut dyn Write,
) -> Result<()> {
    let st = &agg.stats;
    writeln!(out, "# memperf report of {}", cfg.input)?;
    if !file.features.cmdline.is_empty() {
        writeln!(out, "# recorded with: {}", file.features.cmdline.join(" "))?;
    }
    let when = header::recorded(&cfg.input, file);
    match &file.features.osrelease {
        Some(rel) if !when.is_empty() => writeln!(out, "# {when}, Linux {rel}")?,
        Some(rel) => writeln!(out, "# Linux {rel}")?,
        None if !when.is_empty() => writeln!(out, "# {when}")?,
        None => {}
    }
    let (first, last) = file
        .features
        .sample_time
        .or(st.first_time.zip(st.last_time))
        .unwrap_or((0, 0));
    writeln!(
        out,
        "# duration: {:.3} s of samples",
        last.saturating_sub(first) as f64 / 1e9
    )?;
    for (i, name) in names.iter().enumerate() {
        let kept = st.kept.get(i).copied().unwrap_or(0);
        let all = st.samples.get(i).copied().unwrap_or(0);
        if kept == all {
            writeln!(out, "# event {name}: {all} samples")?;
        } else {
            writeln!(out, "# event {name}: {all} samples, {kept} after filters")?;
        }
    }
    writeln!(
        out,
        "# lost: {} events in {} LOST records, {} lost samples; throttled {} times",
        st.lost, st.lost_records, st.lost_samples, st.throttled
    )?;
    if st.recorded_unwound > 0 {
        writeln!(
            out,
            "# user stacks unwound while recording: {}, truncated: {}{}",
            st.recorded_unwound,
            st.recorded_truncated,
            reasons(&st.recorded_reasons)
        )?;
    }
    if st.unwound > 0 {
        writeln!(
            out,
            "# user stacks unwound here: {}, truncated: {}{}",
            st.unwound,
            st.truncated,
            reasons(&st.truncated_reasons)
        )?;
    }
    writeln!(
        out,
        "# frames: {} unique, {} without a name",
        agg.book.frames.len(),
        res.unknown_frames
    )?;
    if !res.symbolize.debug_files.is_empty() {
        let files: Vec<String> = res
            .symbolize
            .debug_files
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        writeln!(out, "# debug files used: {}", files.join(", "))?;
    }
    if res.symbolize.failures > 0 {
        writeln!(
            out,
            "# {} problems while reading symbols, first: {}",
            res.symbolize.failures,
            res.symbolize
                .failure_messages
                .first()
                .map_or("", String::as_str)
        )?;
    }
    if res.kernel_hidden && agg.book.kernel_frames {
        writeln!(
            out,
            "# kernel frames are unnamed: kernel.kptr_restrict hides /proc/kallsyms addresses (run as root or set it to 0)"
        )?;
    }
    if cfg.weight == crate::cli::Weight::Bytes && (st.brk_shrunk > 0 || st.brk_unknown_base > 0) {
        writeln!(
            out,
            "# brk: the break shrank by {} bytes (not in the stacks); {} brk calls with no earlier break weigh 0",
            st.brk_shrunk, st.brk_unknown_base
        )?;
    }
    if st.foreign_skipped > 0 {
        writeln!(
            out,
            "# {} samples skipped: they carried the sample id of another perf session's event",
            st.foreign_skipped
        )?;
    }
    if st.malformed > 0 {
        writeln!(
            out,
            "# {} records could not be parsed and were skipped",
            st.malformed
        )?;
    }
    if st.late > 0 {
        writeln!(
            out,
            "# {} records came after newer ones and were taken out of time order",
            st.late
        )?;
    }
    if let Some(at) = st.unfinished_at {
        let samples: u64 = st.samples.iter().sum();
        writeln!(
            out,
            "# the recording was not finished: read {samples} samples up to byte {at}"
        )?;
    }
    if let Some(e) = &st.read_error {
        writeln!(
            out,
            "# warning: {e}; the report covers the records before it"
        )?;
    }
    for (i, name) in names.iter().enumerate() {
        if cfg.event.as_ref().is_some_and(|e| e != name) {
            continue;
        }
        if st.kept.get(i).copied().unwrap_or(0) == 0 {
            continue;
        }
        let stacks = named_stacks(cfg, agg, res, Some(i));
        // Samples, or bytes under --weight bytes.
        let kept: u64 = stacks.total().max(1);
        writeln!(out)?;
        writeln!(
            out,
            "# {name}: top {} of {} stacks, most {} first",
            cfg.top.min(stacks.len()),
            stacks.len(),
            match cfg.weight {
                crate::cli::Weight::Bytes if agg.sized.get(i).copied().unwrap_or(false) => "bytes",
                crate::cli::Weight::Bytes => "samples (no size is known for this event)",
                crate::cli::Weight::Count => "samples",
            }
        )?;
        for (frames, count) in stacks.top(cfg.top) {
            writeln!(out)?;
            let (comm, rest) = frames.split_first().map_or(("", &[][..]), |(c, r)| (*c, r));
            // Leaf first, as BCC's stackcount prints them (unless --reverse asked for root first).
            let ordered: Vec<&&str> = if cfg.reverse {
                rest.iter().collect()
            } else {
                rest.iter().rev().collect()
            };
            for f in ordered {
                writeln!(out, "    {f}")?;
            }
            writeln!(out, "    -                {comm}")?;
            writeln!(
                out,
                "        {count} ({:.2}%)",
                100.0 * count as f64 / kept as f64
            )?;
        }
    }
    Ok(())
}

/// The default count name of a flame graph for an event.
fn default_countname(event: &str) -> &'static str {
    match event {
        "page-faults" | "faults" | "minor-faults" | "major-faults" => "pages",
        e if e.contains(':') => "calls",
        _ => "samples",
    }
}

/// Draws the stacks of `event` as a flame graph with inferno.
pub fn write_flamegraph(
    cfg: &ReportConfig,
    fg: &FlameConfig,
    file: &PerfDataFile,
    names: &[String],
    event: Option<usize>,
    agg: &Aggregate,
    res: &Resolved,
) -> Result<()> {
    let ev_name = event
        .and_then(|e| names.get(e))
        .map_or("samples", String::as_str);
    let stacks = named_stacks(cfg, agg, res, event);
    let mut lines: Vec<String> = stacks
        .iter()
        .map(|(frames, n)| format!("{} {n}", frames.join(";")))
        .collect();
    lines.sort();
    let st = &agg.stats;
    let kept: u64 = stacks.total();
    let command = if file.features.cmdline.is_empty() {
        cfg.input.to_string()
    } else {
        file.features.cmdline.join(" ")
    };
    let title = fg
        .title
        .clone()
        .unwrap_or_else(|| format!("{ev_name}: {command}"));
    let subtitle = fg.subtitle.clone().unwrap_or_else(|| {
        let t = header::truncation(st);
        let truncated = if t.unwound > 0 {
            format!(", {} of {} user stacks truncated", t.truncated, t.unwound)
        } else {
            String::new()
        };
        let mut when = header::recorded(&cfg.input, file);
        if !when.is_empty() {
            when.push_str("; ");
        }
        format!(
            "memperf: {kept} samples of {ev_name}, {} lost, throttled {} times{truncated}; {when}kernel frames in orange",
            crate::session::lost_once(st.lost, st.lost_samples),
            st.throttled,
        )
    });
    let sized = event.is_some_and(|e| agg.sized.get(e).copied().unwrap_or(false));
    let count_name = fg.countname.clone().unwrap_or_else(|| match cfg.weight {
        crate::cli::Weight::Bytes if sized => "bytes".to_string(),
        _ => default_countname(ev_name).to_string(),
    });
    let flame = Flame {
        output: &fg.output,
        title,
        subtitle,
        count_name,
        width: fg.width,
        colors: &fg.colors,
        inverted: cfg.reverse,
        kernel_names: &res.kernel_names,
    };
    draw_flamegraph(&flame, &lines)
}

/// What a flame graph is drawn with, whoever drew the stacks.
pub struct Flame<'a> {
    /// `-` for standard output.
    pub output: &'a std::path::Path,
    pub title: String,
    pub subtitle: String,
    pub count_name: String,
    pub width: Option<usize>,
    /// inferno's palette name (`mem`, `hot`...).
    pub colors: &'a str,
    /// Leaf-first stacks hanging from the top: an icicle graph of callers.
    pub inverted: bool,
    /// Frame names drawn in orange, as kernel code.
    pub kernel_names: &'a rustc_hash::FxHashSet<String>,
}

/// Draws folded `lines` (`a;b;c N`, sorted) as a flame graph with inferno.
pub fn draw_flamegraph(flame: &Flame<'_>, lines: &[String]) -> Result<()> {
    use inferno::flamegraph::{self, Direction, Options, Palette, color::Color, color::PaletteMap};
    use std::str::FromStr;

    let mut palette_map = PaletteMap::default();
    for k in flame.kernel_names {
        palette_map.insert(
            k,
            Color {
                r: 230,
                g: 130,
                b: 40,
            },
        );
    }
    let mut opts = Options::default();
    opts.colors = Palette::from_str(flame.colors).map_err(|e| anyhow::anyhow!(e))?;
    opts.hash = true;
    opts.deterministic = true;
    opts.palette_map = Some(&mut palette_map);
    opts.title = flame.title.clone();
    opts.subtitle = Some(flame.subtitle.clone());
    opts.count_name = flame.count_name.clone();
    opts.image_width = flame.width;
    if flame.inverted {
        opts.direction = Direction::Inverted;
    }
    let lines = lines.iter().map(String::as_str);
    let output = flame.output;
    if output.as_os_str() == "-" {
        let stdout = std::io::stdout();
        flamegraph::from_lines(&mut opts, lines, std::io::BufWriter::new(stdout.lock()))
            .context("failed to draw the flame graph")?;
    } else {
        let f = create_output_file(output)
            .with_context(|| format!("failed to create `{}`", output.display()))?;
        flamegraph::from_lines(&mut opts, lines, std::io::BufWriter::new(f))
            .with_context(|| format!("failed to write `{}`", output.display()))?;
    }
    Ok(())
}

fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// `--by KEY`: samples (and bytes for events with a size) per mapping, file, comm or pid.
pub fn write_by(
    cfg: &ReportConfig,
    by: ByKey,
    names: &[String],
    agg: &Aggregate,
    out: &mut dyn Write,
) -> Result<()> {
    let key = match by {
        ByKey::Mapping => "mapping",
        ByKey::File => "file",
        ByKey::Comm => "comm",
        ByKey::Pid => "pid",
    };
    for (i, name) in names.iter().enumerate() {
        let total = agg.stats.kept.get(i).copied().unwrap_or(0);
        if total == 0 {
            continue;
        }
        let mut rows: Vec<(String, ByRow)> = agg
            .by
            .iter()
            .filter(|((ev, _, _), _)| *ev == i)
            .map(|((_, label, start), row)| {
                let label = match by {
                    ByKey::Mapping if row.end > 0 => format!("{label} {start:#x}-{:#x}", row.end),
                    _ => label.clone(),
                };
                (label, *row)
            })
            .collect();
        rows.sort_by(|a, b| b.1.samples.cmp(&a.1.samples).then_with(|| a.0.cmp(&b.0)));
        let sized = agg.sized.get(i).copied().unwrap_or(false);
        writeln!(out, "# {name} by {key} ({total} samples) in {}", cfg.input)?;
        writeln!(out, "# {}", header::losses(&agg.stats))?;
        writeln!(out, "{:>12} {:>8} {:>12}  {key}", "samples", "%", "bytes")?;
        for (label, row) in rows {
            let n = row.samples;
            let bytes = if sized {
                human_bytes(row.bytes)
            } else {
                "-".to_string()
            };
            writeln!(
                out,
                "{n:>12} {:>7.2}% {bytes:>12}  {label}",
                100.0 * n as f64 / total as f64
            )?;
        }
        writeln!(out)?;
    }
    Ok(())
}

/// `--timeline INTERVAL`: samples, and bytes for events with a size (see `--weight bytes`),
/// per event per interval from the first sample.
pub fn write_timeline(
    cfg: &ReportConfig,
    interval: u64,
    names: &[String],
    agg: &Aggregate,
    out: &mut dyn Write,
) -> Result<()> {
    let shown: Vec<usize> = (0..names.len())
        .filter(|&i| agg.stats.kept.get(i).copied().unwrap_or(0) > 0)
        .collect();
    writeln!(
        out,
        "# samples per {:.3} s from the first sample, in {}",
        interval as f64 / 1e9,
        cfg.input
    )?;
    writeln!(out, "# {}", header::losses(&agg.stats))?;
    let mut header = format!("{:>10}", "start s");
    for &i in &shown {
        header.push_str(&format!(" {:>24}", names[i]));
        if agg.sized.get(i).copied().unwrap_or(false) {
            header.push_str(&format!(" {:>12}", "bytes"));
        }
    }
    writeln!(out, "{header}")?;
    let last = agg
        .timeline
        .keys()
        .map(|&(slot, _)| slot)
        .max()
        .unwrap_or(0);
    if agg.timeline.is_empty() {
        return Ok(());
    }
    for slot in 0..=last {
        let mut line = format!("{:>10.3}", (slot * interval) as f64 / 1e9);
        for &i in &shown {
            let (n, bytes) = agg.timeline.get(&(slot, i)).copied().unwrap_or((0, 0));
            line.push_str(&format!(" {n:>24}"));
            if agg.sized.get(i).copied().unwrap_or(false) {
                line.push_str(&format!(" {:>12}", human_bytes(bytes)));
            }
        }
        writeln!(out, "{line}")?;
    }
    Ok(())
}
