//! Where page faults land: `ffaults` (faults per file, the book's ffaults.bt), `fmapfault`
//! (faults in file mappings per command and file, the book's fmapfault) and `hfaults`
//! (faults in hugetlb mappings per process, hfaults.bt). Each page-fault sample carries
//! the faulting address (`PERF_SAMPLE_ADDR`), which the session's process table resolves
//! to the mapping that holds it: what BPF reads from `vma->vm_file` with a kprobe.
//!
//! `hfaults` also tells transparent huge page faults apart, which no tracepoint or sample
//! field reports: the page-fault event fires before the kernel handles the fault, and a
//! THP fault then allocates its huge folio in the same thread (`kmem:mm_page_alloc` of the
//! PMD order, movable; mTHP of a smaller order). A fault in anonymous memory followed, in
//! its thread, by such an allocation is a THP fault; a failed one (pfn -1) a fallback.

use std::collections::BTreeMap;
use std::io::{self, Write};

use anyhow::Result;
use rustc_hash::FxHashMap;

use crate::maps::ProcessMaps;
use crate::records::Record;
use crate::session::{Processes, SampleCtx, SideBand};
use crate::tool::place::{Landed, landed};
use crate::tool::{self, Cx, Seen, Tool, ToolConfig, Want};

const WANTS: &[Want] = &[Want {
    name: "page-faults",
    since: "2.6.31",
    optional: false,
    filter: None,
}];

/// `hfaults`: page faults, and the allocations that can be a THP fault's folio. The kernel
/// keeps only the large movable ones (`__GFP_MOVABLE` is bit 3 on every kernel: a zone
/// modifier), so the order-0 allocations of every other fault cost nothing.
const HUGE_WANTS: &[Want] = &[
    WANTS[0],
    Want {
        name: "kmem:mm_page_alloc",
        since: "2.6.32",
        optional: true,
        filter: Some("order >= 2 && gfp_flags & 8"),
    },
];

/// `fmapfault` where the kernel has `filemap:mm_filemap_fault`: every call of
/// filemap_fault, what fmapfault.bt counts with its kprobe (a fault in a file mapping that
/// fault-around already served, or a write to a page already there, is not one).
const FILEMAP: Want = Want {
    name: "filemap:mm_filemap_fault",
    since: "6.14",
    optional: true,
    filter: None,
};

/// The events each of the three tools reads where it can, for `memperf list`: fmapfault
/// prefers filemap_fault calls and falls back to page faults by address.
pub(crate) fn listed(place: Place) -> Vec<Want> {
    match place {
        Place::Files => WANTS.to_vec(),
        Place::Huge => HUGE_WANTS.to_vec(),
        Place::CommFiles => vec![
            FILEMAP,
            Want {
                optional: true,
                ..WANTS[0]
            },
        ],
    }
}

/// What each of a tool's events is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// `page-faults`, with the fault's address.
    Fault,
    /// `kmem:mm_page_alloc`, filtered to large movable folios.
    Alloc,
    /// `filemap:mm_filemap_fault`: the file's device and inode.
    Filemap,
}

/// `pfn` of a failed allocation (`-1UL`).
const NO_PFN: u64 = u64::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// `@[file]`: every fault, by the file (or `//anon`, `[heap]`, `[stack]`) it lands in.
    Files,
    /// `@[comm, file]`: faults in file mappings.
    CommFiles,
    /// `@[pid, comm]`: faults in hugetlb mappings.
    Huge,
}

struct Places {
    place: Place,
    /// What the events at each index of the tool's `Want` list are.
    sources: Vec<Source>,
    /// Paths of mapped files by (major, minor, inode), from MMAP2 records: what a
    /// `mm_filemap_fault` names.
    inodes: FxHashMap<(u32, u32, u64), Vec<u8>>,
    counts: BTreeMap<(String, String), u64>,
    /// hugetlb mappings by pid: (start, end), from MMAP2's MAP_HUGETLB flag or the
    /// `/anon_hugepage` file the kernel backs them with.
    huge: FxHashMap<u32, Vec<(u64, u64)>>,
    /// The last fault of each thread in anonymous memory, while its handling may still
    /// allocate a THP: (pid, whether an allocation for it failed).
    pending: FxHashMap<u32, (u32, bool)>,
    /// THP faults by (pid, comm, folio order); fallbacks by (pid, comm).
    thp: BTreeMap<(u32, String, u32), u64>,
    fallback: BTreeMap<(u32, String), u64>,
    /// The PMD order: a THP of this order is `@thp`, smaller ones `@mthp`.
    pmd_order: u32,
    /// Faults whose address no known mapping holds.
    unresolved: u64,
    /// Samples without an address (a recording made without PERF_SAMPLE_ADDR).
    no_addr: u64,
}

impl Places {
    /// A fault of thread `tid` in progress ends: a failed THP allocation without a
    /// successful one after it was a fallback to small pages.
    fn settle(&mut self, tid: u32, comm: impl FnOnce(u32) -> String) {
        if let Some((pid, true)) = self.pending.remove(&tid) {
            *self.fallback.entry((pid, comm(pid))).or_default() += 1;
        }
    }

    /// An allocation of a large movable folio by thread `tid` (`kmem:mm_page_alloc`).
    fn page_alloc(&mut self, cx: &Cx, s: &SampleCtx<'_>) {
        let tid = s.sample.tid.unwrap_or(0);
        let Some(&(pid, _)) = self.pending.get(&tid) else {
            return;
        };
        let (Some(order), Some(pfn)) = (cx.field(s, "order"), cx.field(s, "pfn")) else {
            return;
        };
        if pfn == NO_PFN {
            self.pending.insert(tid, (pid, true));
            return;
        }
        self.pending.remove(&tid);
        let comm = s.procs.comm(pid, tid).unwrap_or("[unknown]").to_string();
        *self.thp.entry((pid, comm, order as u32)).or_default() += 1;
    }

    /// Whether the source of `what` is among this run's events.
    fn has(&self, cx: &Cx, what: Source) -> bool {
        self.sources
            .iter()
            .zip(&cx.present)
            .any(|(&s, &p)| s == what && p)
    }

    /// `fmapfault` counts filemap_fault calls when it has them (fault addresses otherwise).
    fn by_filemap(&self, cx: &Cx) -> bool {
        self.place == Place::CommFiles && self.has(cx, Source::Filemap)
    }

    /// A call of filemap_fault: the file by its device and inode.
    fn filemap_fault(&mut self, cx: &Cx, s: &SampleCtx<'_>) {
        let (pid, tid) = (s.sample.pid.unwrap_or(0), s.sample.tid.unwrap_or(0));
        let (Some(dev), Some(ino)) = (cx.field(s, "s_dev"), cx.field(s, "i_ino")) else {
            self.unresolved += 1;
            return;
        };
        // The kernel's dev_t: 12 bits of major above 20 of minor.
        let (maj, min) = ((dev >> 20) as u32, (dev & 0xf_ffff) as u32);
        let file = match self.inodes.get(&(maj, min, ino)) {
            Some(path) => String::from_utf8_lossy(path).into_owned(),
            None => format!("[dev {maj}:{min} inode {ino}]"),
        };
        let comm = s.procs.comm(pid, tid).unwrap_or("[unknown]").to_string();
        *self.counts.entry((comm, file)).or_default() += 1;
    }

    fn is_huge(&self, pid: u32, addr: u64) -> bool {
        self.huge
            .get(&pid)
            .is_some_and(|r| r.iter().any(|&(s, e)| addr >= s && addr < e))
    }
}

impl Tool for Places {
    fn sample(&mut self, cx: &mut Cx, s: &SampleCtx<'_>) -> io::Result<()> {
        match self.sources.get(s.ev) {
            Some(Source::Alloc) => {
                self.page_alloc(cx, s);
                return Ok(());
            }
            Some(Source::Filemap) => {
                self.filemap_fault(cx, s);
                return Ok(());
            }
            Some(Source::Fault) if self.by_filemap(cx) => return Ok(()),
            _ => {}
        }
        let (pid, tid) = (s.sample.pid.unwrap_or(0), s.sample.tid.unwrap_or(0));
        if self.place == Place::Huge {
            self.settle(tid, |p| {
                s.procs.comm(p, tid).unwrap_or("[unknown]").to_string()
            });
        }
        let Some(addr) = s.sample.addr else {
            self.no_addr += 1;
            return Ok(());
        };
        let comm = || s.procs.comm(pid, tid).unwrap_or("[unknown]").to_string();
        let key = match self.place {
            Place::Huge if !self.is_huge(pid, addr) => {
                let maps = s.procs.maps().unwrap_or(ProcessMaps::empty());
                if self.has(cx, Source::Alloc) && matches!(landed(maps, pid, addr), Landed::Anon(_))
                {
                    self.pending.insert(tid, (pid, false));
                }
                return Ok(());
            }
            Place::Huge => (pid.to_string(), comm()),
            _ => {
                let maps = s.procs.maps().unwrap_or(ProcessMaps::empty());
                match (landed(maps, pid, addr), self.place) {
                    (Landed::File(path) | Landed::Special(path), Place::Files) => {
                        (String::from_utf8_lossy(&path).into_owned(), String::new())
                    }
                    (Landed::File(path), _) => {
                        (comm(), String::from_utf8_lossy(&path).into_owned())
                    }
                    (Landed::Anon(name), Place::Files) => (name.to_string(), String::new()),
                    (Landed::Anon(_) | Landed::Special(_), _) => return Ok(()),
                    (Landed::Unknown, _) => {
                        self.unresolved += 1;
                        return Ok(());
                    }
                }
            }
        };
        *self.counts.entry(key).or_default() += 1;
        Ok(())
    }

    fn side_band(&mut self, _cx: &mut Cx, r: &SideBand<'_>) -> io::Result<()> {
        match r.rec {
            Some(&Record::Mmap2 {
                pid,
                addr,
                len,
                flags,
                filename,
                maj,
                min,
                ino,
                ..
            }) => {
                if ino != 0 && self.sources.contains(&Source::Filemap) {
                    self.inodes.insert((maj, min, ino), filename.to_vec());
                }
                let ranges = self.huge.entry(pid).or_default();
                let end = addr.saturating_add(len);
                // A new mapping replaces what it overlaps.
                ranges.retain(|&(s, e)| e <= addr || s >= end);
                if flags & libc::MAP_HUGETLB as u32 != 0 || filename.starts_with(b"/anon_hugepage")
                {
                    ranges.push((addr, end));
                }
            }
            Some(&Record::Comm {
                pid, exec: true, ..
            }) => {
                self.huge.remove(&pid);
            }
            Some(&Record::Fork { pid, ppid, .. }) if pid != ppid => {
                if let Some(r) = self.huge.get(&ppid).cloned() {
                    self.huge.insert(pid, r);
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn finish(&mut self, cx: &mut Cx, procs: &Processes, _seen: &Seen) -> Result<()> {
        if self.place == Place::CommFiles
            && !self.has(cx, Source::Fault)
            && !self.has(cx, Source::Filemap)
        {
            anyhow::bail!(
                "the recording has neither `filemap:mm_filemap_fault` nor `page-faults` events, which fmapfault reads: record them with `memperf fmapfault -w FILE`"
            );
        }
        let tids: Vec<u32> = self.pending.keys().copied().collect();
        for tid in tids {
            self.settle(tid, |p| {
                procs.comm(p, tid).unwrap_or("[unknown]").to_string()
            });
        }
        // bpftrace's map print: fewest first, each map after a blank line.
        let mut rows: Vec<(String, u64)> = self
            .counts
            .iter()
            .map(|((a, b), &n)| match b.is_empty() {
                true => (format!("@[{a}]"), n),
                false => (format!("@[{a}, {b}]"), n),
            })
            .collect();
        rows.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        let mut maps = vec![rows];
        if self.place == Place::Huge {
            if self.has(cx, Source::Alloc) {
                maps.extend(self.thp_maps());
            } else {
                let why = if cx.replay {
                    "the recording has no kmem:mm_page_alloc events"
                } else {
                    "kmem:mm_page_alloc could not be opened"
                };
                eprintln!("memperf hfaults: transparent huge page faults not told apart: {why}");
            }
        }
        if maps.iter().all(Vec::is_empty) {
            writeln!(cx.out)?;
        }
        for map in maps.iter().filter(|m| !m.is_empty()) {
            writeln!(cx.out)?;
            for (key, n) in map {
                writeln!(cx.out, "{key}: {n}")?;
            }
        }
        cx.out.flush()?;
        Ok(())
    }
}

impl Places {
    /// The THP faults (`@thp`, PMD-sized; `@mthp` with the folio's size) and the
    /// fallbacks, as two more bpftrace maps after the hugetlb one.
    fn thp_maps(&self) -> [Vec<(String, u64)>; 2] {
        let page_kb = crate::sys::page_size() as u64 / 1024;
        let mut rows: Vec<(String, u64)> = self
            .thp
            .iter()
            .map(|((pid, comm, order), &n)| {
                let key = if *order == self.pmd_order {
                    format!("@thp[{pid}, {comm}]")
                } else {
                    format!("@mthp[{pid}, {comm}, {}kB]", page_kb << order)
                };
                (key, n)
            })
            .collect();
        rows.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        let mut falls: Vec<(String, u64)> = self
            .fallback
            .iter()
            .map(|((pid, comm), &n)| (format!("@thp_fallback[{pid}, {comm}]"), n))
            .collect();
        falls.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        [rows, falls]
    }
}

/// The order of a PMD-mapped transparent huge page here: log2 of
/// `/sys/kernel/mm/transparent_hugepage/hpage_pmd_size` in pages (9 with 4 KiB pages on
/// x86-64, when the file is absent: a kernel without THP).
fn pmd_order() -> u32 {
    let page = crate::sys::page_size() as u64;
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size")
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok())
        .filter(|&size| size > page && (size / page).is_power_of_two())
        .map_or(9, |size| (size / page).trailing_zeros())
}

/// Runs `memperf ffaults`, `fmapfault` or `hfaults`.
pub fn run(place: Place, cfg: ToolConfig) -> Result<i32> {
    let name = match place {
        Place::Files => "ffaults",
        Place::CommFiles => "fmapfault",
        Place::Huge => "hfaults",
    };
    let (wants, sources): (Vec<Want>, Vec<Source>) = match place {
        Place::Files => (WANTS.to_vec(), vec![Source::Fault]),
        Place::Huge => (HUGE_WANTS.to_vec(), vec![Source::Fault, Source::Alloc]),
        // A recording: whichever it has, filemap_fault calls first.
        Place::CommFiles if cfg.input.is_some() => {
            let fault = Want {
                optional: true,
                ..WANTS[0]
            };
            (vec![fault, FILEMAP], vec![Source::Fault, Source::Filemap])
        }
        Place::CommFiles => match tool::tracepoint_usable(FILEMAP.name) {
            Ok(()) => (
                vec![Want {
                    optional: false,
                    ..FILEMAP
                }],
                vec![Source::Filemap],
            ),
            Err(why) => {
                eprintln!(
                    "memperf fmapfault: note: {why}: counting every fault in a file mapping by its address instead (faults served by fault-around and write faults included)"
                );
                (WANTS.to_vec(), vec![Source::Fault])
            }
        },
    };
    let mut tool = Places {
        place,
        sources,
        inodes: FxHashMap::default(),
        counts: BTreeMap::new(),
        huge: FxHashMap::default(),
        pending: FxHashMap::default(),
        thp: BTreeMap::new(),
        fallback: BTreeMap::new(),
        pmd_order: pmd_order(),
        unresolved: 0,
        no_addr: 0,
    };
    let out = Box::new(io::BufWriter::new(io::stdout()));
    let banner = |cx: &mut Cx| -> io::Result<()> {
        if cx.replay {
            return Ok(());
        }
        let what = match place {
            Place::Files => "page faults by file",
            Place::CommFiles => "page faults in file mappings by command and file",
            Place::Huge => "Huge Page faults per process",
        };
        writeln!(cx.out, "Tracing {what}... Hit Ctrl-C to end.")
    };
    let seen = tool::run(name, &cfg, &wants, &mut tool, out, &banner)?;
    tool::print_seen(name, &seen);
    if tool.unresolved > 0 {
        crate::output::wrap::eprint(&format!(
            "memperf {name}: {} faults at addresses no recorded mapping holds, not shown (memory \
             mremap moved in a recording without memperf's mremap events, such as perf's, or \
             mapped while records were lost)",
            tool.unresolved
        ));
    }
    if tool.no_addr > 0 {
        eprintln!(
            "memperf {name}: {} samples without a fault address (recorded without PERF_SAMPLE_ADDR: `perf record -d`)",
            tool.no_addr
        );
    }
    Ok(0)
}
