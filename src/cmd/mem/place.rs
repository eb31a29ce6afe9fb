//! Where a sampled data address lies, for `mem report --by`: the seam between the memory
//! samples and what owns the memory. `ByMapping` uses the session's process table;
//! `ByAllocation` the live allocation holding `(pid, addr)` at the sample's time, from the
//! recording's allocator calls replayed beside the samples (`allocs::replay`), else the
//! mapping (`allocs::resident::region`, the rule `memperf rss` files faults by).

use std::io::Write;

use anyhow::{Result, bail};
use rustc_hash::FxHashMap;

use crate::allocs::replay::{Allocations, Faults, StackNames};
use crate::allocs::resident::{Region, region, region_name};
use crate::allocs::table::AllocStack;
use crate::maps::ProcessMaps;
use crate::perfdata::PerfDataFile;
use crate::session::{Processes, SampleCtx, SideBand};
use crate::stacks::FrameId;
use crate::tool::place::{Landed, landed};

/// Files each sample's data address under a label and prints the labels' totals.
pub trait Place {
    /// Takes a sample that is not an access (an allocator call the grouping replays);
    /// whether it did.
    fn take(&mut self, _c: &SampleCtx<'_>) -> bool {
        false
    }
    /// A process event (exec, exit), in time order with the samples.
    fn side_band(&mut self, _r: &SideBand<'_>) {}
    /// One sample of event `ev` by `pid` touching `addr`, with its access latency.
    fn sample(&mut self, ev: usize, pid: u32, addr: u64, weight: u64, procs: &Processes);
    /// The replay is over; `maps` is the process table it ended with.
    fn finish(&mut self, _maps: &ProcessMaps) {}
    fn write(&self, names: &[String], out: &mut dyn Write) -> Result<()>;
}

/// The weight and samples of one label.
#[derive(Debug, Default, Clone, Copy)]
struct Sum {
    samples: u64,
    weight: u64,
}

/// By the mapping holding the data address: its file, or `[heap]`, `[stack]`, `//anon`.
#[derive(Default)]
pub struct ByMapping {
    sums: FxHashMap<(usize, String), Sum>,
}

impl Place for ByMapping {
    fn sample(&mut self, ev: usize, pid: u32, addr: u64, weight: u64, procs: &Processes) {
        let Some(maps) = procs.maps() else { return };
        let label = match landed(maps, pid, addr) {
            Landed::File(p) | Landed::Special(p) => String::from_utf8_lossy(&p).into_owned(),
            Landed::Anon(name) => name.to_string(),
            Landed::Unknown => "[unknown]".to_string(),
        };
        let s = self.sums.entry((ev, label)).or_default();
        s.samples += 1;
        s.weight += weight;
    }

    fn write(&self, names: &[String], out: &mut dyn Write) -> Result<()> {
        for (ev, name) in names.iter().enumerate() {
            let mut rows: Vec<(&str, Sum)> = self
                .sums
                .iter()
                .filter(|((e, _), _)| *e == ev)
                .map(|((_, l), s)| (l.as_str(), *s))
                .collect();
            if rows.is_empty() {
                continue;
            }
            rows.sort_by(|a, b| {
                (b.1.weight, b.1.samples, a.0).cmp(&(a.1.weight, a.1.samples, b.0))
            });
            // Samples without a weight (page faults) share by their count instead.
            let weighed: u64 = rows.iter().map(|r| r.1.weight).sum();
            let (share, total) = match weighed {
                0 => ("Samples%", rows.iter().map(|r| r.1.samples).sum()),
                w => ("Weight%", w),
            };
            writeln!(out, "# {name}: data addresses by mapping")?;
            writeln!(
                out,
                "# {:>8}  {:>10}  {:>14}  {:>12}  Mapping",
                share, "Samples", "Weight", "Avg weight"
            )?;
            for (label, s) in rows {
                let part = if weighed == 0 { s.samples } else { s.weight };
                let pct = if total == 0 {
                    0.0
                } else {
                    100.0 * part as f64 / total as f64
                };
                let avg = s.weight as f64 / s.samples.max(1) as f64;
                writeln!(
                    out,
                    "  {:>7.2}%  {:>10}  {:>14}  {:>12.1}  {label}",
                    pct, s.samples, s.weight, avg
                )?;
            }
        }
        Ok(())
    }
}

/// Where a data address lay: in a live allocation (by its allocation stack), else in a
/// mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Held {
    Alloc(AllocStack),
    Outside(Region),
}

/// By the live allocation holding the data address at the sample's time (its allocation
/// stack), else by mapping: the recording's allocator calls replayed in time order with
/// its samples (`allocs::replay`). Any sample with a data address is placed: hardware
/// memory samples, and page faults (whose address is the faulting one).
pub struct ByAllocation {
    allocs: Allocations,
    /// (event, process, where) → weight and samples.
    sums: FxHashMap<(usize, u32, Held), Sum>,
    /// Named once the replay is over (the process table it ended with).
    stacks: Option<StackNames>,
    regions: FxHashMap<(u32, Region), String>,
}

impl ByAllocation {
    /// The allocator calls of `file`; an error when it has none.
    pub fn of_file(file: &PerfDataFile, input: &str) -> Result<ByAllocation> {
        let Some(allocs) = Allocations::of_file(file, Faults::Accesses) else {
            bail!(
                "--by allocation: `{input}` holds no allocator calls (the uprobes on malloc, \
                 free, mmap, ... with their argument and result registers, that `memperf mem \
                 record -- CMD` and `memperf rss -w FILE` record); use --by mapping"
            );
        };
        Ok(ByAllocation {
            allocs,
            sums: FxHashMap::default(),
            stacks: None,
            regions: FxHashMap::default(),
        })
    }

    /// Whether event `ev`'s samples are accesses (not allocator calls).
    pub fn is_access(&self, ev: usize) -> bool {
        !self.allocs.is_call(ev)
    }

    fn write_notes(&self, out: &mut dyn Write) -> Result<()> {
        let st = self.allocs.stats();
        let t = &st.table;
        writeln!(
            out,
            "# Allocator calls replayed: {} allocations and {} frees ({} frees of blocks \
             allocated before the recording began); {} allocations without a stack",
            t.allocs, t.frees, t.unknown_frees, st.without_stack
        )?;
        let lost = [
            (
                st.unread_results,
                "posix_memalign results unreadable (the process is gone): those blocks are not placed",
            ),
            (t.unmatched_returns, "returns without their call"),
            (t.failed_allocs, "failed allocations"),
            (st.malformed, "allocator samples that could not be read"),
        ];
        for (n, what) in lost {
            if n > 0 {
                writeln!(out, "# {n} {what}")?;
            }
        }
        Ok(())
    }

    fn label(&self, pid: u32, held: Held, out: &mut String, ids: &mut Vec<FrameId>) {
        out.clear();
        match held {
            Held::Alloc(AllocStack::Id(s)) => {
                out.push_str("allocated by:");
                self.allocs.frames(AllocStack::Id(s), ids);
                for &id in ids.iter() {
                    for name in self.stacks.iter().flat_map(|n| n.of(id)) {
                        out.push_str("\n\t\t");
                        out.push_str(name);
                    }
                }
            }
            Held::Alloc(AllocStack::Unsampled) => out.push_str("allocated by: [stack not sampled]"),
            Held::Alloc(AllocStack::Missing) => out.push_str("allocated by: [no stack]"),
            Held::Outside(r) => {
                out.push_str("outside allocations: ");
                match self.regions.get(&(pid, r)) {
                    Some(name) => out.push_str(name),
                    None => out.push_str("[unknown]"),
                }
            }
        }
    }
}

impl Place for ByAllocation {
    fn take(&mut self, c: &SampleCtx<'_>) -> bool {
        self.allocs.sample(c)
    }

    fn side_band(&mut self, r: &SideBand<'_>) {
        self.allocs.side_band(r);
    }

    fn sample(&mut self, ev: usize, pid: u32, addr: u64, weight: u64, procs: &Processes) {
        let held = match self.allocs.owner(pid, addr) {
            Some(o) => Held::Alloc(o.stack),
            None => Held::Outside(
                procs
                    .maps()
                    .map_or(Region::Unknown, |maps| region(maps, pid, addr)),
            ),
        };
        let s = self.sums.entry((ev, pid, held)).or_default();
        s.samples += 1;
        s.weight += weight;
    }

    fn finish(&mut self, maps: &ProcessMaps) {
        self.stacks = Some(self.allocs.names(maps));
        for &(_, pid, held) in self.sums.keys() {
            if let Held::Outside(r) = held {
                self.regions
                    .entry((pid, r))
                    .or_insert_with(|| region_name(maps, r));
            }
        }
    }

    fn write(&self, names: &[String], out: &mut dyn Write) -> Result<()> {
        self.write_notes(out)?;
        let (mut label, mut ids) = (String::new(), Vec::new());
        for (ev, name) in names.iter().enumerate() {
            let mut rows: Vec<(u32, Held, Sum)> = self
                .sums
                .iter()
                .filter(|((e, _, _), _)| *e == ev)
                .map(|(&(_, pid, held), s)| (pid, held, *s))
                .collect();
            if rows.is_empty() {
                continue;
            }
            // The heaviest first, then the most sampled; allocations before mappings.
            rows.sort_by_key(|&(pid, held, s)| {
                let order = match held {
                    Held::Alloc(a) => (0, Some(a), None),
                    Held::Outside(r) => (1, None, Some(r)),
                };
                (
                    std::cmp::Reverse(s.weight),
                    std::cmp::Reverse(s.samples),
                    order,
                    pid,
                )
            });
            let weight: u64 = rows.iter().map(|r| r.2.weight).sum();
            let samples: u64 = rows.iter().map(|r| r.2.samples).sum();
            let inside: u64 = rows
                .iter()
                .filter(|r| matches!(r.1, Held::Alloc(_)))
                .map(|r| r.2.samples)
                .sum();
            let many = rows.iter().any(|r| r.0 != rows[0].0);
            writeln!(
                out,
                "# {name}: data addresses by the live allocation holding them ({samples} \
                 samples: {inside} in allocations, {} outside them)",
                samples - inside
            )?;
            writeln!(
                out,
                "# {:>8}  {:>8}  {:>10}  {:>14}  {:>12}  Where",
                "Weight%", "Samples%", "Samples", "Weight", "Avg weight"
            )?;
            let pct = |n: u64, of: u64| {
                if of == 0 {
                    0.0
                } else {
                    100.0 * n as f64 / of as f64
                }
            };
            for (pid, held, s) in rows {
                self.label(pid, held, &mut label, &mut ids);
                let avg = s.weight as f64 / s.samples.max(1) as f64;
                let who = if many {
                    format!(" [pid {pid}]")
                } else {
                    String::new()
                };
                let (first, rest) = label.split_once('\n').unwrap_or((&label, ""));
                writeln!(
                    out,
                    "  {:>7.2}%  {:>7.2}%  {:>10}  {:>14}  {:>12.1}  {first}{who}",
                    pct(s.weight, weight),
                    pct(s.samples, samples),
                    s.samples,
                    s.weight,
                    avg
                )?;
                if !rest.is_empty() {
                    writeln!(out, "{rest}")?;
                }
            }
        }
        Ok(())
    }
}
