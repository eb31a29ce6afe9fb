//! What the reports on the allocation table share (`rss`, `heap`): per (process, stack)
//! columns gathered into the aggregate that `output`'s printers take, the folded prefix of
//! an allocation stack, and an allocation stack printed one frame a line.

use std::io::Write;

use anyhow::Result;
use rustc_hash::FxHashMap;

use super::sink::LeakSink;
use super::table::{AllocStack, Space};
use crate::aggregate::{Aggregate, ReadStats, StackBook};
use crate::maps::ProcessMaps;
use crate::output::Resolved;
use crate::session::Processes;
use crate::stacks::{FrameId, FrameTable, StackTable};

/// The command name of each process in `spaces` (`[kernel]` for kernel memory), looked up
/// once a process: the folded prefixes and the text reports' `[pid N comm]`.
pub(crate) fn comms_of(
    procs: &Processes,
    spaces: impl IntoIterator<Item = Space>,
) -> FxHashMap<Space, String> {
    let mut comms = FxHashMap::default();
    for s in spaces {
        comms
            .entry(s)
            .or_insert_with(|| LeakSink::comm_of(procs, s));
    }
    comms
}

/// The (event, count, bytes) columns of each (process, stack), as the report's aggregate
/// keeps them: one event per column.
#[derive(Default)]
pub(crate) struct Columns {
    prefixes: FrameTable<String>,
    counts: FxHashMap<(usize, u32, Option<u32>), u64>,
    bytes: FxHashMap<(usize, u32, Option<u32>), u64>,
    /// The columns of allocations whose stack was not copied (`-s N`), apart: with
    /// sampling, the sampled ones stand for them.
    unsampled: Vec<(usize, u32, u64, u64)>,
}

/// Scales a column by the sampling interval: a sampled allocation stands for `weight`.
fn weigh(map: &mut FxHashMap<(usize, u32, Option<u32>), u64>, weight: u64) {
    for v in map.values_mut() {
        *v = v.saturating_mul(weight);
    }
}

impl Columns {
    /// Adds `cols` (event, count, bytes) of `stack` in process `space`.
    pub fn add(
        &mut self,
        comms: &FxHashMap<Space, String>,
        space: Space,
        stack: AllocStack,
        cols: impl IntoIterator<Item = (usize, u64, u64)>,
    ) {
        let unsampled = stack == AllocStack::Unsampled;
        let (prefix, stack) = prefix_of(comms, space, stack);
        let p = self.prefixes.intern(&prefix);
        for (ev, n, b) in cols {
            if unsampled {
                self.unsampled.push((ev, p, n, b));
                continue;
            }
            *self.counts.entry((ev, p, stack)).or_insert(0) += n;
            *self.bytes.entry((ev, p, stack)).or_insert(0) += b;
        }
    }

    /// The aggregate of `events` events, with the sink's frames and stacks. Where one
    /// stack in N was copied (`sink.sample_rate`), each sampled allocation's columns are
    /// weighted by N and the unsampled ones left out, as a sampling heap profiler's are;
    /// else the allocations without a stack keep their `[stack not sampled]` line.
    pub fn into_aggregate(
        mut self,
        events: usize,
        sink: &mut LeakSink,
        maps: ProcessMaps,
        lost: u64,
    ) -> Aggregate {
        if sink.sample_rate > 1 {
            weigh(&mut self.counts, sink.sample_rate);
            weigh(&mut self.bytes, sink.sample_rate);
        } else {
            for (ev, p, n, b) in std::mem::take(&mut self.unsampled) {
                *self.counts.entry((ev, p, None)).or_insert(0) += n;
                *self.bytes.entry((ev, p, None)).or_insert(0) += b;
            }
        }
        let mut book = StackBook::new(crate::config::report::StackSpace::All);
        book.frames = std::mem::take(&mut sink.frames);
        book.stacks = std::mem::take(&mut sink.stacks);
        let mut stats = ReadStats {
            samples: vec![0; events],
            kept: vec![1; events],
            lost,
            ..ReadStats::default()
        };
        sink.stack_counts.add_to(&mut stats);
        Aggregate {
            book,
            prefixes: self.prefixes,
            counts: self.counts,
            maps,
            stats,
            by: FxHashMap::default(),
            timeline: std::collections::BTreeMap::new(),
            sized: vec![true; events],
            bytes: self.bytes,
        }
    }
}

/// The folded prefix of an allocation stack (the command, and why there is no stack).
fn prefix_of(
    comms: &FxHashMap<Space, String>,
    space: Space,
    stack: AllocStack,
) -> (String, Option<u32>) {
    let mut prefix = comms.get(&space).cloned().unwrap_or_default();
    match stack {
        AllocStack::Id(s) => (prefix, Some(s)),
        AllocStack::Unsampled => {
            prefix.push_str(";[stack not sampled]");
            (prefix, None)
        }
        AllocStack::Missing => {
            prefix.push_str(";[no stack]");
            (prefix, None)
        }
    }
}

/// An allocation stack, leaf first, one frame a line.
pub(crate) fn write_stack(
    w: &mut dyn Write,
    agg: &Aggregate,
    res: &Resolved,
    stack: AllocStack,
    indent: &str,
    ids: &mut Vec<FrameId>,
) -> Result<()> {
    write_stack_of(w, &agg.book.stacks, res, stack, indent, ids)
}

/// An allocation stack of `stacks`, leaf first, one frame a line (a report while tracing
/// goes on reads the sink's own table).
pub(crate) fn write_stack_of(
    w: &mut dyn Write,
    stacks: &StackTable,
    res: &Resolved,
    stack: AllocStack,
    indent: &str,
    ids: &mut Vec<FrameId>,
) -> Result<()> {
    match stack {
        AllocStack::Id(s) => {
            ids.clear();
            stacks.frames(s, ids);
            for &id in ids.iter().rev() {
                for name in res.names.get(id as usize).into_iter().flatten().rev() {
                    writeln!(w, "{indent}{name}")?;
                }
            }
        }
        AllocStack::Unsampled => writeln!(w, "{indent}[stack not sampled]")?,
        AllocStack::Missing => writeln!(w, "{indent}[no stack]")?,
    }
    Ok(())
}
