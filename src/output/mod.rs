//! Naming the unique frames once, then printing stacks folded or as a text report.

pub mod diff;
mod file;
mod fit;
mod flame;
pub mod header;
mod named;
pub mod otlp;
pub mod pprof;
pub mod pyroscope;
pub mod script;
mod shape;
mod text;
mod tree;
pub mod wrap;

pub use file::{check_output_path, create_output_file};
pub use flame::{Flame, draw_flamegraph, write_flamegraph};
pub use text::write_text;
pub use tree::write_call_tree;

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;

use anyhow::Result;

use crate::config::report::{ByKey, ReportConfig};
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
        let sym = symbolizer(&cfg, kallsyms);
        Resolver::reusing(cfg, sym)
    }

    /// A resolver naming with `sym` (from [`symbolizer`], or kept from an earlier resolver
    /// with [`Resolver::finish_keeping`]: the files it loaded stay loaded).
    pub fn reusing(cfg: NameOptions, sym: Symbolizer) -> Resolver {
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

    pub fn finish(self) -> Resolved {
        self.finish_keeping().0
    }

    /// The names, and the symbolizer for the next resolver.
    pub fn finish_keeping(mut self) -> (Resolved, Symbolizer) {
        self.res.kernel_hidden = self.sym.kernel_hidden();
        self.res.symbolize = self.sym.stats();
        (self.res, self.sym)
    }

    fn name(&mut self, key: &FrameKey, maps: &ProcessMaps) {
        if *key == FrameKey::Recovered {
            self.push_recovered_mark();
            return;
        }
        let (symbolized, jit_source) = self.symbolize(key, maps);
        let (fallback, suffix) = fallback_name(&self.cfg, key, maps);
        let (cfg, res) = (&self.cfg, &mut self.res);
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
        let (addr, dso) = frame_dso(key, maps, jit_source);
        res.info.push(FrameInfo {
            addr,
            sym: outer.and_then(|f| f.name.clone()),
            off: outer.and_then(|f| f.sym_offset),
            dso,
        });
        res.names.push(list);
    }

    /// The mark where a stack's frames read from the live process begin: not a frame, so
    /// no name, and stacks merged by name do not see it.
    fn push_recovered_mark(&mut self) {
        let res = &mut self.res;
        res.lines.push(vec![(None, None)]);
        res.info.push(FrameInfo {
            addr: 0,
            sym: None,
            off: None,
            dso: String::new(),
        });
        res.names.push(Vec::new());
        res.recovered_mark = Some(res.names.len() as u32 - 1);
    }

    /// The symbolizer's frames for `key` (inlined ones first), and for a JIT frame where
    /// its name came from.
    fn symbolize(&mut self, key: &FrameKey, maps: &ProcessMaps) -> (Symbolized, Option<JitSource>) {
        let none = |unknown| Symbolized {
            frames: Vec::new(),
            unknown,
        };
        match *key {
            FrameKey::Kernel { addr } => (self.sym.symbolize_kernel(addr), None),
            FrameKey::User { module, offset } => {
                let m = maps.module(module);
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
                (s, None)
            }
            // Named by push_recovered_mark; a mark has no symbol.
            FrameKey::Recovered => (none(None), None),
            FrameKey::Jit { pid, addr, load } => {
                match self
                    .sym
                    .symbolize_jit(pid, addr, (maps.jitdump_path(pid), load))
                {
                    Some((f, source)) => (
                        Symbolized {
                            frames: vec![f],
                            unknown: None,
                        },
                        Some(source),
                    ),
                    None => (none(Some(crate::symbolize::Unknown::NoSymbol)), None),
                }
            }
        }
    }
}

/// The name of a frame with no symbol (`[kernel.kallsyms]+0x..`, `module+0x..` under
/// `--addrs`; `[module]` as FlameGraph's and inferno's collapsers name such frames, or
/// `[unknown]`), and the suffix of every name of the frame (`_[k]` on kernel frames under
/// `--kernel-annotate`).
fn fallback_name(cfg: &NameOptions, key: &FrameKey, maps: &ProcessMaps) -> (String, &'static str) {
    match *key {
        FrameKey::Kernel { addr } => {
            let fallback = if cfg.addrs {
                format!("[kernel.kallsyms]+{:#x}", addr.addr())
            } else {
                "[unknown]".to_string()
            };
            let suffix = if cfg.kernel_annotate { "_[k]" } else { "" };
            (fallback, suffix)
        }
        FrameKey::User { module, offset } => {
            let m = maps.module(module);
            let fallback = if cfg.addrs {
                format!("{}+{:#x}", m.basename(), offset.addr())
            } else {
                format!("[{}]", m.basename())
            };
            (fallback, "")
        }
        FrameKey::Recovered => (RECOVERED.to_string(), ""),
        FrameKey::Jit { addr, .. } => {
            let fallback = if cfg.addrs {
                format!("{addr:#x}")
            } else {
                "[unknown]".to_string()
            };
            (fallback, "")
        }
    }
}

/// A frame's address and the file it is in, as perf's `sym`/`dso` fields show them (a JIT
/// frame's: the perf map or jitdump its name came from).
fn frame_dso(key: &FrameKey, maps: &ProcessMaps, jit_source: Option<JitSource>) -> (u64, String) {
    match *key {
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
    }
}

/// A symbolizer with `cfg`'s options, naming kernel frames with `kallsyms` when given.
pub fn symbolizer(cfg: &NameOptions, kallsyms: Option<Arc<Kallsyms>>) -> Symbolizer {
    let mut sym = Symbolizer::new(SymbolizeOptions {
        inline: cfg.inline,
        lines: cfg.lines,
        demangle: cfg.demangle,
    });
    if let Some(k) = kallsyms.filter(|k| k.malformed_lines() == 0) {
        sym.set_kallsyms(k);
    }
    sym
}

/// Looks up every unique frame once.
pub fn resolve(cfg: &ReportConfig, agg: &Aggregate, kallsyms: Option<Arc<Kallsyms>>) -> Resolved {
    let mut r = Resolver::new(NameOptions::of(cfg), kallsyms);
    r.catch_up(&agg.book.frames, &agg.maps);
    r.finish()
}

/// The named stacks of one event (or all), root first, merged by name, as owned names (for
/// `diff`, which keys two recordings' stacks by their names). `named::named_stacks` merges
/// them as interned ids; the text report, folded stacks and flame graphs take them from
/// there without this copy.
pub(crate) fn named_stacks(
    cfg: &ReportConfig,
    agg: &Aggregate,
    res: &Resolved,
    event: Option<usize>,
) -> BTreeMap<Vec<String>, u64> {
    named::named_stacks(cfg, agg, res, event)
        .iter()
        .map(|(frames, n)| (frames.into_iter().map(str::to_string).collect(), n))
        .collect()
}

/// `comm;root;...;leaf count` lines, sorted.
pub fn write_folded(
    cfg: &ReportConfig,
    names: &[String],
    event: Option<usize>,
    agg: &Aggregate,
    res: &mut Resolved,
    out: &mut dyn Write,
) -> Result<()> {
    let shaped = shape::shaped_stacks(cfg, agg, res, names, event);
    flame::note_unsized(&shaped, names);
    for line in shape::folded_lines(&shaped) {
        writeln!(out, "{line}")?;
    }
    if shaped.cut_stacks > 0 {
        eprintln!(
            "memperf: note: {} stacks cut below depth {} (--max-depth): their deeper frames are one `{}` frame",
            shaped.cut_stacks,
            cfg.max_depth.unwrap_or(0),
            shape::CUT_FRAME
        );
    }
    Ok(())
}

/// `59.8 MiB`: bytes in the largest binary unit that keeps the number at or above 1.
pub fn human_bytes(b: u64) -> String {
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
        let title = format!("{name} by {key} ({total} samples) in {}", cfg.input);
        wrap::write_comment(out, &title)?;
        wrap::write_comment(out, &header::losses(&agg.stats))?;
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
            if label == crate::aggregate::NO_MAPPING {
                wrap::write_comment(out, &crate::aggregate::no_mapping_note(n))?;
            }
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
    let title = format!(
        "samples per {:.3} s from the first sample, in {}",
        interval as f64 / 1e9,
        cfg.input
    );
    wrap::write_comment(out, &title)?;
    wrap::write_comment(out, &header::losses(&agg.stats))?;
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
