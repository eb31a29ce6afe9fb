//! Where a sampled data address lies, for `mem report --by`: the seam between the memory
//! samples and what owns the memory. `ByMapping` uses the session's process table;
//! `ByAllocation` is the place for `memperf rss`'s allocation/fault join (not merged yet):
//! it needs, at each sample's time, the live allocation (site stack, size) holding
//! `(pid, addr)`, which leak's outstanding-allocation table keeps.

use std::io::Write;

use anyhow::{Result, bail};
use rustc_hash::FxHashMap;

use crate::session::Processes;
use crate::tool::place::{Landed, landed};

/// Files each sample's data address under a label and prints the labels' totals.
pub trait Place {
    /// Whether this grouping can run at all.
    fn check(&self) -> Result<()> {
        Ok(())
    }
    /// One sample of event `ev` by `pid` touching `addr`, with its access latency.
    fn sample(&mut self, ev: usize, pid: u32, addr: u64, weight: u64, procs: &Processes);
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
            let total: u64 = rows.iter().map(|r| r.1.weight).sum();
            writeln!(out, "# {name}: data addresses by mapping")?;
            writeln!(
                out,
                "# {:>8}  {:>10}  {:>14}  {:>12}  Mapping",
                "Weight%", "Samples", "Weight", "Avg weight"
            )?;
            for (label, s) in rows {
                let pct = if total == 0 {
                    0.0
                } else {
                    100.0 * s.weight as f64 / total as f64
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

/// By allocation site: waits for `memperf rss`'s allocation table.
pub struct ByAllocation;

impl Place for ByAllocation {
    fn check(&self) -> Result<()> {
        bail!(
            "--by allocation needs the allocation table that `memperf rss` builds (allocations \
             and faults joined by address); it is not in this build yet: use --by mapping"
        )
    }
    fn sample(&mut self, _: usize, _: u32, _: u64, _: u64, _: &Processes) {}
    fn write(&self, _: &[String], _: &mut dyn Write) -> Result<()> {
        Ok(())
    }
}
