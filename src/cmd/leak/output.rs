//! memleak's report layout, and the folded and pprof outputs through the report's printers.

use std::io::Write;

use anyhow::Result;
use rustc_hash::FxHashMap;

use crate::aggregate::{Aggregate, FrameKey, ReadStats, StackBook};
use crate::config::leak::{LeakConfig, LeakSort};
use crate::maps::{ModuleKind, ProcessMaps};
use crate::session::Processes;
use crate::stacks::FrameId;
use crate::symbolize::{Kallsyms, ModuleKey, SymbolizeOptions, Symbolizer};

use crate::allocs::sink::LeakSink;
use crate::allocs::table::AllocStack;

/// A frame as memleak prints it: `0x%016x\tsym+0xoff [module]`.
#[derive(Debug, Clone)]
struct FrameText {
    addr: u64,
    text: String,
}

/// Names frames once each, across reports.
pub struct Names {
    sym: Symbolizer,
    cache: Vec<Option<FrameText>>,
    kallsyms_loaded: bool,
}

impl Default for Names {
    fn default() -> Self {
        Names {
            sym: Symbolizer::new(SymbolizeOptions {
                inline: false,
                lines: false,
                demangle: true,
            }),
            cache: Vec::new(),
            kallsyms_loaded: false,
        }
    }
}

impl Names {
    fn frame(&mut self, sink: &LeakSink, maps: &ProcessMaps, id: FrameId) -> FrameText {
        if let Some(Some(t)) = self.cache.get(id as usize) {
            return t.clone();
        }
        let addr = sink.frame_addrs.get(id as usize).copied().unwrap_or(0);
        let text = match sink.frames.get(id) {
            Some(&FrameKey::Kernel { addr }) => {
                if !self.kallsyms_loaded {
                    self.kallsyms_loaded = true;
                    if let Ok(t) = std::fs::read_to_string("/proc/kallsyms") {
                        self.sym.set_kallsyms(Kallsyms::from_text(&t));
                    }
                }
                let s = self.sym.symbolize_kernel(addr);
                with_offset(s.frames.last(), "[kernel]")
            }
            Some(&FrameKey::User { module, offset }) => {
                let m = maps.module(module);
                let tag = format!("[{}]", m.basename());
                match m.kind() {
                    ModuleKind::File => {
                        let s = self.sym.symbolize(
                            &ModuleKey {
                                path: &m.path,
                                build_id: m.build_id.as_deref(),
                                pid: Some(maps.module_pid(module)),
                            },
                            offset,
                        );
                        with_offset(s.frames.last(), &tag)
                    }
                    _ => format!("{} {tag}", String::from_utf8_lossy(&m.path)),
                }
            }
            Some(&FrameKey::Jit { pid, addr, load }) => {
                match self
                    .sym
                    .symbolize_jit(pid, addr, (maps.jitdump_path(pid), load))
                {
                    Some((f, _)) => with_offset(Some(&f), "[jit]"),
                    None => "[unknown]".to_string(),
                }
            }
            // leak's stacks carry no recovered marks (`StackBook::mark_recovered`).
            Some(&FrameKey::Recovered) | None => "[unknown]".to_string(),
        };
        let t = FrameText { addr, text };
        if self.cache.len() <= id as usize {
            self.cache.resize(id as usize + 1, None);
        }
        self.cache[id as usize] = Some(t.clone());
        t
    }
}

/// `sym+0xoff [module]`, or `[unknown] [module]`.
fn with_offset(f: Option<&crate::symbolize::Frame>, module: &str) -> String {
    match f.and_then(|f| f.name.as_ref().map(|n| (n, f.sym_offset.unwrap_or(0)))) {
        Some((name, off)) => format!("{name}+{off:#x} {module}"),
        None => format!("[unknown] {module}"),
    }
}

/// One stack's outstanding allocations: bytes, count, and with `--faults` the pages they
/// faulted in and how many of them faulted none.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Outstanding {
    pub bytes: u64,
    pub allocs: u64,
    pub pages: u64,
    pub untouched: u64,
}

/// Outstanding allocations per stack, of allocations at least `older_ns` old.
pub fn per_stack(sink: &LeakSink, now: u64, older_ns: u64) -> FxHashMap<AllocStack, Outstanding> {
    let mut out: FxHashMap<AllocStack, Outstanding> = FxHashMap::default();
    let resident = sink.table.resident.as_ref();
    for (space, addr, a) in sink.table.iter() {
        if now.saturating_sub(a.time) < older_ns && a.time <= now {
            continue;
        }
        let e = out.entry(a.stack).or_default();
        e.bytes += a.size;
        e.allocs += 1;
        if let Some(pages) = resident.and_then(|r| r.pages_of(space, addr)) {
            e.pages += u64::from(pages);
            e.untouched += u64::from(pages == 0);
        }
    }
    out
}

/// Counters and losses, printed with every report so that a reader knows how complete it is.
pub struct Completeness {
    pub lost: u64,
    pub sample_rate: u64,
    /// The allocation stacks unwound so far, and those truncated.
    pub stacks: crate::allocs::unwinds::StackCounts,
}

/// One memleak report: `[HH:MM:SS] Top N stacks with outstanding allocations:`, then the
/// stacks in ascending order of size (the largest last, nearest the prompt), as BCC prints.
pub fn write_report(
    w: &mut dyn Write,
    cfg: &LeakConfig,
    sink: &LeakSink,
    maps: &ProcessMaps,
    names: &mut Names,
    now: u64,
    done: &Completeness,
) -> Result<()> {
    let older_ns = if cfg.combined_only {
        0
    } else {
        cfg.older_ms.saturating_mul(1_000_000)
    };
    if cfg.show_allocs {
        let mut allocs: Vec<(u64, u64)> = sink
            .table
            .iter()
            .filter(|(_, _, a)| now.saturating_sub(a.time) >= older_ns || a.time > now)
            .map(|(_, addr, a)| (addr, a.size))
            .collect();
        allocs.sort_unstable();
        for (addr, size) in allocs {
            writeln!(w, "\taddr = {addr:x} size = {size}")?;
        }
    }
    let mut stacks: Vec<(AllocStack, Outstanding)> =
        per_stack(sink, now, older_ns).into_iter().collect();
    match cfg.sort {
        LeakSort::Size => stacks.sort_unstable_by_key(|&(s, o)| (o.bytes, o.allocs, s)),
        LeakSort::Count => stacks.sort_unstable_by_key(|&(s, o)| (o.allocs, o.bytes, s)),
    }
    let top = stacks.len().saturating_sub(cfg.top);
    let left_out = LeftOut::of(sink, &stacks, top, now);
    writeln!(
        w,
        "[{}] Top {} stacks with outstanding allocations:",
        wall_clock(),
        cfg.top
    )?;
    let mut ids = Vec::new();
    let pages_kib = crate::sys::page_size() as u64 / 1024;
    for &(stack, o) in &stacks[top..] {
        if sink.table.resident.is_some() {
            // `--faults`: memleak's line, with the pages the allocations faulted in.
            writeln!(
                w,
                "\t{} bytes in {} allocations from stack, {} pages resident ({} KiB), {} \
                 allocations faulted in no page",
                o.bytes,
                o.allocs,
                o.pages,
                o.pages * pages_kib,
                o.untouched
            )?;
        } else {
            writeln!(
                w,
                "\t{} bytes in {} allocations from stack",
                o.bytes, o.allocs
            )?;
        }
        match stack {
            AllocStack::Unsampled => writeln!(
                w,
                "\t\t[stack not sampled: -s {} copies one stack in {}]",
                done.sample_rate, done.sample_rate
            )?,
            AllocStack::Missing => writeln!(w, "\t\t[no stack]")?,
            AllocStack::Id(stack) => {
                ids.clear();
                sink.stacks.frames(stack, &mut ids);
                // Leaf first, as memleak prints.
                for &id in ids.iter().rev() {
                    let f = names.frame(sink, maps, id);
                    writeln!(w, "\t\t{:#018x}\t{}", f.addr, f.text)?;
                }
            }
        }
    }
    left_out.write(w, cfg)?;
    write_completeness(w, sink, done)?;
    w.flush()?;
    Ok(())
}

/// What a report's table leaves out of the outstanding allocations, so that its stacks and
/// these lines add up to every allocation outstanding (the figure the run's summary gives).
struct LeftOut {
    /// Every outstanding allocation, in how many stacks.
    all: Outstanding,
    all_stacks: usize,
    /// The stacks below the top N (`-T`), and what they hold.
    cut: Outstanding,
    cut_stacks: usize,
    /// Allocations younger than `-o`.
    young: Outstanding,
    /// Allocations never tracked: outside `-z`/`-Z`.
    filtered: u64,
}

impl LeftOut {
    /// `stacks` are the report's (past the age filter), sorted, those before `top` not
    /// shown; what the age filter kept out is every outstanding allocation less those.
    fn of(sink: &LeakSink, stacks: &[(AllocStack, Outstanding)], top: usize, now: u64) -> LeftOut {
        let sum = |o: &mut Outstanding, s: &Outstanding| {
            o.bytes += s.bytes;
            o.allocs += s.allocs;
        };
        let mut cut = Outstanding::default();
        stacks[..top].iter().for_each(|(_, o)| sum(&mut cut, o));
        let mut shown = cut;
        stacks[top..].iter().for_each(|(_, o)| sum(&mut shown, o));
        let every = per_stack(sink, now, 0);
        let mut all = Outstanding::default();
        every.values().for_each(|o| sum(&mut all, o));
        LeftOut {
            all,
            all_stacks: every.len(),
            cut,
            cut_stacks: top,
            young: Outstanding {
                bytes: all.bytes.saturating_sub(shown.bytes),
                allocs: all.allocs.saturating_sub(shown.allocs),
                ..Outstanding::default()
            },
            filtered: sink.table.stats.filtered,
        }
    }

    /// A total and a line per reason, when anything outstanding is not in the table; a
    /// line for the allocations the size limits kept out of it.
    fn write(&self, w: &mut dyn Write, cfg: &LeakConfig) -> Result<()> {
        if self.cut.allocs > 0 || self.young.allocs > 0 {
            writeln!(
                w,
                "Outstanding: {} allocations ({} bytes) in {} stacks; the table leaves out:",
                self.all.allocs, self.all.bytes, self.all_stacks
            )?;
        }
        if self.cut.allocs > 0 {
            writeln!(
                w,
                "Not shown: {} allocations ({} bytes) in the {} stacks below the top {} (-T)",
                self.cut.allocs, self.cut.bytes, self.cut_stacks, cfg.top
            )?;
        }
        if self.young.allocs > 0 {
            writeln!(
                w,
                "Not shown: {} allocations ({} bytes) younger than {} ms (-o)",
                self.young.allocs, self.young.bytes, cfg.older_ms
            )?;
        }
        if self.filtered > 0 {
            writeln!(
                w,
                "Not tracked: {} allocations outside the size limits (-z/-Z)",
                self.filtered
            )?;
        }
        Ok(())
    }
}

/// The lines that say how complete the table is; nothing when nothing is off.
fn write_completeness(w: &mut dyn Write, sink: &LeakSink, done: &Completeness) -> Result<()> {
    let s = &sink.table.stats;
    if done.lost > 0 {
        writeln!(
            w,
            "WARNING: {} events lost (ring buffer full): outstanding figures may be overstated \
             (a lost free looks like a leak) or understated; use a larger -m or -s",
            done.lost
        )?;
    }
    if s.dropped_full > 0 {
        writeln!(
            w,
            "WARNING: {} allocations not tracked: the table was full ({} entries, about {} KiB; \
             raise --max-entries)",
            s.dropped_full,
            sink.table.len(),
            sink.table.memory_bytes() / 1024
        )?;
    }
    if sink.unread_results > 0 {
        writeln!(
            w,
            "WARNING: {} posix_memalign results could not be read from the process",
            sink.unread_results
        )?;
    }
    if let Some(line) = done.stacks.report_line() {
        crate::output::wrap::write_line(w, &line)?;
    }
    Ok(())
}

/// HH:MM:SS of local time, as memleak's header shows it.
pub(crate) fn wall_clock() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let mut tm: libc::tm = libc_tm_zero();
    crate::sys::localtime(now, &mut tm);
    format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec)
}

fn libc_tm_zero() -> libc::tm {
    libc::tm {
        tm_sec: 0,
        tm_min: 0,
        tm_hour: 0,
        tm_mday: 0,
        tm_mon: 0,
        tm_year: 0,
        tm_wday: 0,
        tm_yday: 0,
        tm_isdst: 0,
        tm_gmtoff: 0,
        tm_zone: std::ptr::null(),
    }
}

/// The outstanding bytes and allocations per (process, stack) as a report aggregate, so that
/// the report's folded and pprof printers serve `memperf leak` too, weighted by `-s N` as
/// `allocs::profile` weighs rss's and heap's. Takes the sink's tables: call it once, at the
/// end.
pub fn to_aggregate(
    sink: &mut LeakSink,
    procs: &Processes,
    maps: ProcessMaps,
    now: u64,
    older_ns: u64,
    lost: u64,
) -> Aggregate {
    use crate::stacks::FrameTable;
    let mut prefixes: FrameTable<String> = FrameTable::default();
    let mut counts = FxHashMap::default();
    let mut bytes = FxHashMap::default();
    let mut per: FxHashMap<(u32, AllocStack), (u64, u64)> = FxHashMap::default();
    for (space, _, a) in sink.table.iter() {
        if now.saturating_sub(a.time) < older_ns && a.time <= now {
            continue;
        }
        let e = per.entry((space, a.stack)).or_default();
        e.0 += a.size;
        e.1 += 1;
    }
    // `-s N`: each sampled allocation stands for N, the unsampled ones are left out.
    let weight = sink.sample_rate.max(1);
    for ((space, stack), (b, n)) in per {
        if weight > 1 && stack == AllocStack::Unsampled {
            continue;
        }
        let (b, n) = (b.saturating_mul(weight), n.saturating_mul(weight));
        let mut prefix = LeakSink::comm_of(procs, space);
        let stack = match stack {
            AllocStack::Unsampled => {
                prefix.push_str(";[stack not sampled]");
                None
            }
            AllocStack::Missing => None,
            AllocStack::Id(s) => Some(s),
        };
        let p = prefixes.intern(&prefix);
        *counts.entry((0, p, stack)).or_insert(0) += n;
        *bytes.entry((0, p, stack)).or_insert(0) += b;
    }
    let mut book = StackBook::new(crate::config::report::StackSpace::All);
    book.frames = std::mem::take(&mut sink.frames);
    book.stacks = std::mem::take(&mut sink.stacks);
    book.kernel_frames = sink.kernel_frames;
    let mut stats = ReadStats {
        samples: vec![0],
        kept: vec![1],
        lost,
        ..ReadStats::default()
    };
    sink.stack_counts.add_to(&mut stats);
    Aggregate {
        book,
        prefixes,
        counts,
        maps,
        stats,
        by: FxHashMap::default(),
        timeline: std::collections::BTreeMap::new(),
        sized: vec![true],
        bytes,
    }
}
