//! `memperf faults`: page faults counted by stack (the book's faults.bt), from the
//! page-fault software event with whole DWARF-unwound user stacks and kernel stacks.

use std::io;

use anyhow::Result;

use crate::config::stacks::{FaultKind, FaultsConfig};
use crate::session::{Processes, SampleCtx};
use crate::tool::stacks::{Printer, StackCounts, TextOptions, Weights};
use crate::tool::{self, Cx, Tool, Want};

struct Faults {
    counts: StackCounts,
    /// Faults per sample.
    period: u64,
    printer: Printer,
}

impl Tool for Faults {
    fn sample(&mut self, cx: &mut Cx, s: &SampleCtx<'_>) -> io::Result<()> {
        // A recording made with a period other than ours says so in each sample.
        let n = s.sample.period.filter(|&p| p > 0).unwrap_or(self.period);
        let key = self.counts.key(cx, s);
        self.counts.add(key, Weights { count: n, bytes: 0 });
        Ok(())
    }

    fn finish(&mut self, cx: &mut Cx, procs: &Processes, seen: &tool::Seen) -> Result<()> {
        let summary = tool::seen_line("faults", seen);
        self.printer.print(cx, procs, &self.counts, &summary)
    }
}

/// The one event `faults` reads: `page-faults`, `major-faults` or `minor-faults`.
pub(crate) const fn want(event: &'static str) -> Want {
    Want {
        name: event,
        since: "2.6.31",
        optional: false,
        filter: None,
    }
}

/// Runs `memperf faults`.
pub fn run(cfg: FaultsConfig) -> Result<i32> {
    let (event, what) = match cfg.kind {
        FaultKind::Major => ("major-faults", "major page faults"),
        FaultKind::Minor => ("minor-faults", "minor page faults"),
        FaultKind::All => ("page-faults", "page faults"),
    };
    let wants = [want(event)];
    let st = &cfg.stacks;
    let period = st.tool.period;
    let out = Box::new(io::BufWriter::new(io::stdout()));
    let sampled = match period {
        Some(n) if n > 1 => format!(" (one in {n} sampled)"),
        _ => String::new(),
    };
    let data = st.output.stdout_carries_data();
    let banner = |cx: &mut Cx| -> io::Result<()> {
        let line = format!("Tracing {what} by stack{sampled}... Hit Ctrl-C to end.");
        tool::stacks::banner(cx, data, &line)
    };
    let text = TextOptions {
        delimited: st.delimited,
        bytes_label: None,
    };
    let mut tool = Faults {
        counts: StackCounts::new(st.per_pid, st.space),
        period: period.unwrap_or(1),
        printer: Printer::new(st.output.clone(), text, &format!("{what} by stack"))?,
    };
    let seen = tool::run("faults", &st.tool, &wants, &mut tool, out, &banner)?;
    tool::print_seen("faults", &seen);
    Ok(0)
}
