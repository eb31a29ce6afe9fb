//! `memperf report --call-tree`: each event's stacks as a call tree, as `perf report
//! --stdio -g caller` (or `callee`) prints one: from each root down to the functions that
//! sampled (or from those up to their callers), each node with its share of the event and
//! its weight, children heaviest first, a chain of single calls on one indent.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::Result;

use super::shape::shaped_stacks;
use super::text::{header_lines, write_header};
use super::{Resolved, human_bytes};
use crate::aggregate::Aggregate;
use crate::config::report::{ReportConfig, ReportOutput, TreeOrder, Weight};
use crate::perfdata::PerfDataFile;

/// One node: a frame under its parent's path, and the weight of every stack through it.
#[derive(Default)]
struct Node {
    weight: u64,
    children: BTreeMap<String, Node>,
}

impl Node {
    fn add(&mut self, frames: &[String], weight: u64) {
        self.weight += weight;
        if let Some((first, rest)) = frames.split_first() {
            self.children
                .entry(first.clone())
                .or_default()
                .add(rest, weight);
        }
    }

    /// The children, heaviest first (then by name, so that the order is stable).
    fn ranked(&self) -> Vec<(&String, &Node)> {
        let mut v: Vec<(&String, &Node)> = self.children.iter().collect();
        v.sort_by(|a, b| b.1.weight.cmp(&a.1.weight).then_with(|| a.0.cmp(b.0)));
        v
    }
}

/// How a tree prints.
struct Printing<'a> {
    total: u64,
    bytes: bool,
    /// Nodes under this weight are left out; their weight is counted here.
    min_weight: u64,
    left_out: u64,
    out: &'a mut dyn Write,
}

impl Printing<'_> {
    fn weight(&self, w: u64) -> String {
        if self.bytes {
            human_bytes(w)
        } else {
            w.to_string()
        }
    }

    fn pct(&self, w: u64) -> f64 {
        100.0 * w as f64 / self.total.max(1) as f64
    }

    /// `name` and its subtree, at `indent` levels: a node that is its parent's only
    /// child with all its weight continues the parent's line of calls (`chain`) and prints
    /// no numbers of its own.
    fn node(&mut self, name: &str, node: &Node, indent: usize, chain: bool) -> Result<()> {
        let pad = "  ".repeat(indent);
        if chain {
            writeln!(self.out, "{:>8}  {:>10}  {pad}{name}", "", "")?;
        } else {
            let (pct, weight) = (self.pct(node.weight), self.weight(node.weight));
            writeln!(self.out, "{pct:>7.2}%  {weight:>10}  {pad}{name}")?;
        }
        let ranked = node.ranked();
        let only = ranked.len() == 1 && ranked[0].1.weight == node.weight;
        for (child, sub) in ranked {
            if sub.weight < self.min_weight {
                self.left_out += sub.weight;
                continue;
            }
            if only {
                self.node(child, sub, indent, true)?;
            } else {
                self.node(child, sub, indent + 1, false)?;
            }
        }
        Ok(())
    }
}

/// The header, then each event's call tree.
pub fn write_call_tree(
    cfg: &ReportConfig,
    file: &PerfDataFile,
    names: &[String],
    agg: &Aggregate,
    res: &Resolved,
    out: &mut dyn Write,
) -> Result<()> {
    let (order, min_pct) = match cfg.output {
        ReportOutput::CallTree(order, min) => (order, min),
        _ => (TreeOrder::Caller, 0.0),
    };
    write_header(out, &header_lines(cfg, file, names, agg, res))?;
    for (ev, name) in names.iter().enumerate() {
        if agg.stats.kept.get(ev).copied().unwrap_or(0) == 0 {
            continue;
        }
        let shaped = shaped_stacks(cfg, agg, res, names, Some(ev));
        let mut root = Node::default();
        for (frames, &w) in &shaped.stacks {
            // frames[0] is the command, the root of every tree.
            let mut frames = frames.clone();
            if order == TreeOrder::Callee
                && let Some(calls) = frames.get_mut(1..)
            {
                calls.reverse();
            }
            root.add(&frames, w);
        }
        let bytes = cfg.weight == Weight::Bytes && agg.sized.get(ev).copied().unwrap_or(false);
        let total = root.weight;
        let mut p = Printing {
            total,
            bytes,
            min_weight: (min_pct / 100.0 * total as f64).ceil() as u64,
            left_out: 0,
            out,
        };
        let mut head = vec![format!(
            "{name}: call tree {}, {} {} (as perf report --stdio -g {})",
            match order {
                TreeOrder::Caller => "from the callers down",
                TreeOrder::Callee => "from the callees up",
            },
            p.weight(total),
            if bytes { "in all" } else { "samples" },
            match order {
                TreeOrder::Caller => "caller",
                TreeOrder::Callee => "callee",
            },
        )];
        if let Some(max) = cfg.max_depth
            && shaped.cut_stacks > 0
        {
            head.push(format!(
                "{} stacks cut below depth {max}: their deeper frames are one `{}` frame",
                shaped.cut_stacks,
                super::shape::CUT_FRAME
            ));
        }
        writeln!(p.out)?;
        write_header(p.out, &head)?;
        writeln!(p.out)?;
        for (comm, node) in root.ranked() {
            if node.weight < p.min_weight {
                p.left_out += node.weight;
                continue;
            }
            p.node(comm, node, 0, false)?;
        }
        if p.left_out > 0 {
            let line = format!(
                "nodes under {min_pct}% left out: {} ({:.2}%); --tree-min 0 shows them",
                p.weight(p.left_out),
                p.pct(p.left_out)
            );
            writeln!(p.out)?;
            write_header(p.out, &[line])?;
        }
    }
    Ok(())
}
