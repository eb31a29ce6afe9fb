//! `--weight bytes`: what each sample cost, by event: a page per fault, the growth of the
//! break for brk, the length for mmap, the size for kmalloc and page allocations.

use perf_event_open_sys::bindings as b;
use rustc_hash::FxHashMap;

use crate::perfdata::PerfDataFile;
use crate::perfdata::tracing_data::{EventFormat, FieldFormat, parse_event_formats};
use crate::records::Sample;
use crate::stacks::StackId;

use super::{Aggregator, maps_of};
use crate::session::Processes;

/// How a sample of an event is weighed under `--weight bytes`.
#[derive(Debug, Clone)]
pub enum Weigher {
    /// A fixed size per sample (a page per fault).
    Fixed(u64),
    /// The growth of the break since the process's previous brk.
    BrkGrowth(FieldFormat),
    /// A size field of the tracepoint (mmap len, kmalloc bytes_alloc).
    Field(FieldFormat),
    /// PAGE_SIZE << order.
    PageOrder(FieldFormat),
    /// No size known for this event.
    None,
}

/// The default huge page size (`Hugepagesize` in /proc/meminfo), 2 MiB if unreadable.
fn huge_page_size() -> u64 {
    static SIZE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SIZE.get_or_init(|| {
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("Hugepagesize:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
            .map_or(2 << 20, |kb| kb * 1024)
    })
}

/// The tracepoint formats stored in the file (its TRACING_DATA feature).
pub fn event_formats(file: &PerfDataFile) -> Vec<EventFormat> {
    file.features
        .tracing_data
        .as_deref()
        .map(parse_event_formats)
        .unwrap_or_default()
}

/// The weigher of each event, from its name and its tracepoint format; with `weight_field`
/// (`--weight-field`), that field of each event that has it.
pub fn weighers(file: &PerfDataFile, names: &[String], weight_field: Option<&str>) -> Vec<Weigher> {
    let formats = event_formats(file);
    names
        .iter()
        .zip(&file.events)
        .map(|(name, desc)| {
            let tp = desc.attr.type_ == b::PERF_TYPE_TRACEPOINT;
            let format = formats.iter().find(|f| tp && f.id == desc.attr.config);
            weigher(name, format, weight_field)
        })
        .collect()
}

/// How the samples of event `name` (a tracepoint of `format`, if it is one) are weighed:
/// the rule `weighers` applies to a file's events and the agent to the events it opened.
pub fn weigher(name: &str, format: Option<&EventFormat>, weight_field: Option<&str>) -> Weigher {
    let page = crate::sys::page_size() as u64;
    let field = |n: &str| format.and_then(|f| f.field(n)).cloned();
    if let Some(f) = weight_field.and_then(field) {
        return Weigher::Field(f);
    }
    if is_otel_memory_alloc(name) {
        // The OpenTelemetry contract's third argument: the bytes this allocation stands for
        // once the program's own sampling is undone.
        return field("arg3").map_or(Weigher::None, Weigher::Field);
    }
    if is_otel_memory_free(name) {
        // Its columns carry the blocks in use (`aggregate::inuse`), bytes included.
        return Weigher::Fixed(0);
    }
    let short = name.rsplit(':').next().unwrap_or(name);
    match short {
        "page-faults" | "faults" | "minor-faults" | "major-faults" => Weigher::Fixed(page),
        "sys_enter_brk" => field("brk").map_or(Weigher::None, Weigher::BrkGrowth),
        "sys_enter_mmap" | "sys_enter_munmap" | "sys_enter_mremap" => field("len")
            .or_else(|| field("new_len"))
            .map_or(Weigher::None, Weigher::Field),
        "kmalloc" | "kmem_cache_alloc" | "kmalloc_node" | "kmem_cache_alloc_node" => {
            field("bytes_alloc").map_or(Weigher::None, Weigher::Field)
        }
        "mm_page_alloc" => field("order").map_or(Weigher::None, Weigher::PageOrder),
        _ => Weigher::None,
    }
}

/// Whether event `name` is the OpenTelemetry memory-profiling contract's allocation probe,
/// `otel_memory:alloc(ptr, size, weighted_bytes)` (`sdt:PATH:otel_memory:alloc`).
pub fn is_otel_memory_alloc(name: &str) -> bool {
    name == "otel_memory:alloc" || name.ends_with(":otel_memory:alloc")
}

/// Whether event `name` is the contract's free probe, `otel_memory:free(ptr)`.
pub fn is_otel_memory_free(name: &str) -> bool {
    name == "otel_memory:free" || name.ends_with(":otel_memory:free")
}

/// The event whose samples tell the break a brk call left (`syscalls:sys_exit_brk`, whose
/// `ret` is the new break, or the current one for a `brk(0)` query), with its `ret` field.
pub fn exit_brk_event(file: &PerfDataFile, names: &[String]) -> Option<(usize, FieldFormat)> {
    let formats = event_formats(file);
    names
        .iter()
        .zip(&file.events)
        .enumerate()
        .find_map(|(i, (name, desc))| {
            if !name.ends_with("sys_exit_brk") || desc.attr.type_ != b::PERF_TYPE_TRACEPOINT {
                return None;
            }
            let f = formats.iter().find(|f| f.id == desc.attr.config)?;
            Some((i, f.field("ret")?.clone()))
        })
}

/// Where a weight goes that becomes known only after its sample (see [`BrkTracker`]).
#[derive(Debug, Clone)]
pub enum Target {
    /// (event, prefix, stack) in the counts under `--weight bytes`.
    Counts((usize, u32, Option<StackId>)),
    /// (event, prefix, stack) in the pprof bytes.
    Bytes((usize, u32, Option<StackId>)),
    /// (interval, event) in `--timeline`.
    Timeline((u64, usize)),
    /// (event, label, start) in `--by`.
    By((usize, String, u64)),
}

/// A process's first brk growth, waiting for the start of the heap it creates.
#[derive(Debug)]
struct Pending {
    new: u64,
    targets: Vec<Target>,
}

/// The break of each process, to weigh each brk call by the growth it asked for.
///
/// A brk call's growth is its argument minus the break before it. That break is the previous
/// call's argument, or the `ret` of the previous `sys_exit_brk` when the file has those. The
/// one call with no earlier break is a process's first growth after a `brk(0)` query (how
/// libc learns the break): its base is the break `brk(0)` returned, the start of a heap that
/// does not exist yet, which the MMAP2 record of the heap this very call creates tells
/// (`ProcessMaps::heap_start`). Its weight waits for that record; when the process had a heap
/// before the recording started, the base stays unknown and the call weighs 0 (counted).
#[derive(Debug, Default)]
pub struct BrkTracker {
    last: FxHashMap<u32, u64>,
    pending: FxHashMap<u32, Pending>,
    /// Bytes the break shrank by (not in the stacks).
    pub shrunk: u64,
    /// Calls whose starting break stayed unknown (weighed 0).
    pub unknown_base: u64,
}

/// A brk call's weight: known now, or once the heap's start is ([`BrkTracker::resolve`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrkWeight {
    Now(u64),
    Deferred,
}

impl BrkTracker {
    /// `sys_exit_brk` returned `ret` in `pid`: the break is now there.
    pub fn exited(&mut self, pid: u32, ret: u64) {
        if ret != 0 && ret < 1 << 63 {
            self.last.insert(pid, ret);
        }
    }

    /// A `brk(new)` call of `pid`; `heap_known` says whether the process's heap is known to
    /// exist already.
    pub fn entered(&mut self, pid: u32, new: u64, heap_known: bool) -> BrkWeight {
        if new == 0 {
            // brk(0) asks for the current break and changes nothing.
            return BrkWeight::Now(0);
        }
        if let Some(p) = self.pending.remove(&pid) {
            // The first growth created no heap (it failed): its base is lost.
            self.unknown_base += 1;
            drop(p);
        }
        match self.last.insert(pid, new) {
            Some(prev) if new >= prev => BrkWeight::Now(new - prev),
            Some(prev) => {
                self.shrunk += prev - new;
                BrkWeight::Now(0)
            }
            None if heap_known => {
                self.unknown_base += 1;
                BrkWeight::Now(0)
            }
            None => {
                self.pending.insert(
                    pid,
                    Pending {
                        new,
                        targets: Vec::new(),
                    },
                );
                BrkWeight::Deferred
            }
        }
    }

    /// Where the deferred weight of `pid`'s pending call goes.
    pub fn defer(&mut self, pid: u32, target: Target) {
        if let Some(p) = self.pending.get_mut(&pid) {
            p.targets.push(target);
        }
    }

    pub fn is_pending(&self, pid: u32) -> bool {
        self.pending.contains_key(&pid)
    }

    /// The heap of `pid` starts at `heap_start`: the pending call's weight and its targets.
    pub fn resolve(&mut self, pid: u32, heap_start: u64) -> Option<(u64, Vec<Target>)> {
        let p = self.pending.remove(&pid)?;
        match p.new.checked_sub(heap_start) {
            Some(w) => Some((w, p.targets)),
            None => {
                self.unknown_base += 1;
                None
            }
        }
    }

    /// The process is gone (exit or exec): what it had pending stays unknown.
    pub fn forget(&mut self, pid: u32) {
        self.last.remove(&pid);
        if self.pending.remove(&pid).is_some() {
            self.unknown_base += 1;
        }
    }

    /// The end of the file: calls still pending weigh 0.
    pub fn finish(&mut self) {
        self.unknown_base += self.pending.len() as u64;
        self.pending.clear();
    }
}

impl Aggregator<'_> {
    /// A sample's size in bytes (0 for events without one). A brk call whose weight is
    /// known only once the heap it creates is mapped counts 0 now; `target` says where its
    /// weight goes then.
    pub(super) fn weigh_or_defer(
        &mut self,
        ev: usize,
        pid: u32,
        s: &Sample<'_>,
        procs: &Processes,
        target: impl FnOnce() -> Target,
    ) -> u64 {
        if matches!(self.weighers.get(ev), Some(Weigher::None) | None) {
            return 0;
        }
        self.weigh(ev, pid, s, procs).unwrap_or_else(|| {
            self.brk.defer(pid, target());
            0
        })
    }

    /// Adds a brk call's weight, known only now, where its sample went.
    pub(super) fn add_deferred(&mut self, bytes: u64, targets: Vec<Target>) {
        for t in targets {
            match t {
                Target::Counts(k) => *self.agg.counts.entry(k).or_insert(0) += bytes,
                Target::Bytes(k) => *self.agg.bytes.entry(k).or_insert(0) += bytes,
                Target::Timeline(k) => self.agg.timeline.entry(k).or_insert((0, 0)).1 += bytes,
                Target::By(k) => self.agg.by.entry(k).or_default().bytes += bytes,
            }
        }
    }

    /// A sample's size in bytes under `--weight bytes`; `None` for a brk call whose weight
    /// is known only once the heap it creates is mapped ([`Self::weigh_or_defer`] defers it).
    fn weigh(&mut self, ev: usize, pid: u32, s: &Sample<'_>, procs: &Processes) -> Option<u64> {
        let maps = maps_of(procs);
        let raw = s.raw.unwrap_or(&[]);
        let bytes = match self.weighers.get(ev) {
            // A fault in a hugetlbfs mapping maps a huge page; the kernel's data page size,
            // where a file has it, is taken as is; otherwise a base page.
            Some(Weigher::Fixed(n)) => {
                let hugetlb =
                    s.addr
                        .and_then(|a| maps.mapping_of(pid, a))
                        .is_some_and(|(m, _, _)| {
                            let p = &maps.module(m).path;
                            p.starts_with(b"/anon_hugepage") || p.starts_with(b"/dev/hugepages")
                        });
                match s.data_page_size.filter(|&p| p > 0) {
                    Some(p) => p,
                    None if hugetlb => huge_page_size(),
                    None => *n,
                }
            }
            Some(Weigher::Field(f)) => f.read(raw).unwrap_or(0),
            Some(Weigher::PageOrder(f)) => f
                .read(raw)
                .filter(|&o| o < 32)
                .map_or(0, |o| (crate::sys::page_size() as u64) << o),
            Some(Weigher::BrkGrowth(f)) => {
                let new = f.read(raw).unwrap_or(0);
                let heap_known = maps.heap_start(pid).is_some();
                return match self.brk.entered(pid, new, heap_known) {
                    BrkWeight::Now(w) => Some(w),
                    BrkWeight::Deferred => None,
                };
            }
            Some(Weigher::None) | None => 0,
        };
        Some(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_growth_after_a_query_waits_for_the_heap_start() {
        let mut t = BrkTracker::default();
        assert_eq!(t.entered(5, 0, false), BrkWeight::Now(0));
        assert_eq!(t.entered(5, 0x1000_2000, false), BrkWeight::Deferred);
        t.defer(5, Target::Timeline((0, 0)));
        assert!(t.is_pending(5));
        assert_eq!(t.entered(5, 0x1000_4000, true), BrkWeight::Now(0x2000));
        // The second call came first in this (unlikely) order: the first stays unknown.
        assert_eq!(t.unknown_base, 1);
        assert!(t.resolve(5, 0x1000_0000).is_none());

        let mut t = BrkTracker::default();
        assert_eq!(t.entered(6, 0x1000_2000, false), BrkWeight::Deferred);
        t.defer(6, Target::Timeline((3, 1)));
        let (w, targets) = t.resolve(6, 0x1000_0000).unwrap();
        assert_eq!(w, 0x2000);
        assert!(matches!(targets[..], [Target::Timeline((3, 1))]));
        assert_eq!(t.entered(6, 0x1000_1000, true), BrkWeight::Now(0));
        assert_eq!(t.shrunk, 0x1000);
        assert_eq!(t.unknown_base, 0);
    }

    #[test]
    fn exit_records_give_the_break_a_query_returned() {
        let mut t = BrkTracker::default();
        t.entered(7, 0, true);
        t.exited(7, 0x2000_0000);
        assert_eq!(t.entered(7, 0x2000_3000, true), BrkWeight::Now(0x3000));
        // A heap from before the recording and no exit records: unknown.
        assert_eq!(t.entered(8, 0x3000_3000, true), BrkWeight::Now(0));
        assert_eq!(t.unknown_base, 1);
        t.entered(9, 0x4000_3000, false);
        t.forget(9);
        t.finish();
        assert_eq!(t.unknown_base, 2);
    }
}
