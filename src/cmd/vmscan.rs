//! `memperf vmscan`: time spent reclaiming memory, per second, as the book's vmscan.bt
//! prints it (slab shrinking, direct reclaim, memory-cgroup reclaim, kswapd wakeups and
//! page writes), with sub-millisecond sums (vmscan.bt prints whole milliseconds, so a
//! second of many 50 µs reclaims shows 0), and latency histograms at the end.

use std::io::{self, Write};

use anyhow::Result;
use rustc_hash::FxHashMap;

use crate::session::{Processes, SampleCtx};
use crate::tool::hist::Log2Hist;
use crate::tool::{self, Cx, Seen, Tool, ToolConfig, Want};

const fn want(name: &'static str, since: &'static str, optional: bool) -> Want {
    Want {
        name,
        since,
        optional,
        filter: None,
    }
}

pub(crate) const WANTS: [Want; 8] = [
    want("vmscan:mm_shrink_slab_start", "3.1", false),
    want("vmscan:mm_shrink_slab_end", "3.1", false),
    want("vmscan:mm_vmscan_direct_reclaim_begin", "2.6.36", false),
    want("vmscan:mm_vmscan_direct_reclaim_end", "2.6.36", false),
    want("vmscan:mm_vmscan_memcg_reclaim_begin", "2.6.36", true),
    want("vmscan:mm_vmscan_memcg_reclaim_end", "2.6.36", true),
    want("vmscan:mm_vmscan_wakeup_kswapd", "2.6.36", false),
    // mm_vmscan_writepage until reclaim moved to folios (by Linux 6.1): see `run`.
    want(WRITE_FOLIO_NAME, "6.1", true),
];
const WRITE_FOLIO_NAME: &str = "vmscan:mm_vmscan_write_folio";
const WRITEPAGE_NAME: &str = "vmscan:mm_vmscan_writepage";
const KSWAPD: usize = 6;
const WRITES: usize = 7;

/// The three timed kinds: slab shrinking, direct reclaim, memcg reclaim.
const KINDS: usize = 3;
const HIST_NAMES: [&str; KINDS] = ["shrink_slab_ns", "direct_reclaim_ns", "memcg_reclaim_ns"];

#[derive(Default)]
struct Vmscan {
    /// Whether the interval under way has had events (the last one, cut short by the end
    /// of a traced command, is printed too).
    pending: bool,
    last: Option<u64>,
    /// Start times by (kind, tid).
    started: FxHashMap<(usize, u32), u64>,
    /// This interval's sums (ns) and counts.
    sum_ns: [u64; KINDS],
    kswapd: u64,
    writes: u64,
    hists: [Log2Hist; KINDS],
    unmatched: u64,
}

impl Tool for Vmscan {
    fn sample(&mut self, _cx: &mut Cx, s: &SampleCtx<'_>) -> io::Result<()> {
        let (tid, time) = (s.sample.tid.unwrap_or(0), s.sample.time.unwrap_or(0));
        self.pending = true;
        self.last = s.sample.time.or(self.last);
        match s.ev {
            KSWAPD => self.kswapd += 1,
            ev if ev > KSWAPD => self.writes += 1,
            ev if ev.is_multiple_of(2) => {
                self.started.insert((ev / 2, tid), time);
            }
            ev => match self.started.remove(&(ev / 2, tid)) {
                Some(start) => {
                    let ns = time.saturating_sub(start);
                    self.sum_ns[ev / 2] += ns;
                    self.hists[ev / 2].add(ns);
                }
                None => self.unmatched += 1,
            },
        }
        Ok(())
    }

    fn interval(&mut self, cx: &mut Cx, end: u64, _procs: &Processes) -> io::Result<()> {
        self.pending = false;
        let ms = |ns: u64| ns as f64 / 1e6;
        writeln!(
            cx.out,
            "{:<10} {:10.3} {:12.3} {:12.3} {:6} {:9}",
            cx.time_of_day(end),
            ms(self.sum_ns[0]),
            ms(self.sum_ns[1]),
            ms(self.sum_ns[2]),
            self.kswapd,
            self.writes
        )?;
        self.sum_ns = [0; KINDS];
        self.kswapd = 0;
        self.writes = 0;
        Ok(())
    }

    fn finish(&mut self, cx: &mut Cx, procs: &Processes, _seen: &Seen) -> Result<()> {
        if self.pending
            && let Some(t) = self.last
        {
            self.interval(cx, t, procs)?;
        }
        writeln!(cx.out)?;
        for (h, name) in self.hists.iter().zip(HIST_NAMES) {
            h.write(&mut cx.out, name)?;
        }
        cx.out.flush()?;
        if self.unmatched > 0 || !self.started.is_empty() {
            eprintln!(
                "memperf vmscan: {} ends without their start (under way when tracing started) and {} starts without their end are not timed",
                self.unmatched,
                self.started.len()
            );
        }
        Ok(())
    }
}

/// Runs `memperf vmscan`.
pub fn run(cfg: ToolConfig) -> Result<i32> {
    let banner = |cx: &mut Cx| -> io::Result<()> {
        if !cx.replay {
            writeln!(cx.out, "Tracing vmscan... Hit Ctrl-C to end.")?;
            if !cx.present[WRITES] {
                writeln!(cx.out, "(no page-write tracepoint here: WRITEPAGE stays 0)")?;
            }
        }
        writeln!(
            cx.out,
            "{:<10} {:>10} {:>12} {:>12} {:>6} {:>9}",
            "TIME", "S-SLABms", "D-RECLAIMms", "M-RECLAIMms", "KSWAPD", "WRITEPAGE"
        )
    };
    // Page writes under the name this kernel (or the recording) has.
    let mut wants = WANTS;
    let old_name = match &cfg.input {
        None => {
            let tfs = crate::sys::tracefs::Tracefs::locate_or_mount()?;
            tfs.format("vmscan", "mm_vmscan_write_folio").is_err()
                && tfs.format("vmscan", "mm_vmscan_writepage").is_ok()
        }
        // Standard input can be read once: the name stays the new one.
        Some(path) if path.as_os_str() == "-" => false,
        Some(path) => crate::input::open(&crate::config::report::Input::File(path.clone()))?
            .event_names()
            .iter()
            .any(|n| n == WRITEPAGE_NAME),
    };
    if old_name {
        wants[WRITES] = want(WRITEPAGE_NAME, "2.6.36", true);
    }
    let mut tool = Vmscan::default();
    let out = Box::new(io::BufWriter::new(io::stdout()));
    let seen = tool::run("vmscan", &cfg, &wants, &mut tool, out, &banner)?;
    tool::print_seen("vmscan", &seen);
    Ok(0)
}
