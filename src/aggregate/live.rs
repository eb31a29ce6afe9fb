//! The report's aggregation fed by a live run, one window at a time (`memperf agent`): the
//! same filters, stacks and weights as `report --pprof` of a recording of the same events,
//! with the window's frames, stacks and commands let go of when it is taken, and a bound on
//! how many a window interns (past it samples are kept without their stack and counted), so
//! that a run of days holds one window's worth.

use std::io;

use rustc_hash::FxHashMap;

use super::inuse::{InUse, InUseStats};
use super::weigh::{self, BrkTracker, Weigher};
use super::{Aggregate, Aggregator};
use crate::config::report::{Prefix, ReportConfig, ReportOutput};
use crate::perfdata::tracing_data::EventFormat;
use crate::records::{Record, Sample};
use crate::session::{Handler, Processes, SampleCtx, SideBand};

/// One opened event, as the aggregation needs it.
#[derive(Debug, Clone)]
pub struct LiveEvent {
    /// Its name as opened (`page-faults`, `syscalls:sys_enter_mmap`, a `name=` label).
    pub name: String,
    /// Its tracepoint format, when it is a tracepoint.
    pub format: Option<EventFormat>,
    /// Its fixed sample period, when it has one (not a frequency).
    pub period: Option<u64>,
}

/// The aggregation of a live run, taken a window at a time.
pub struct Windowed<'c> {
    a: Aggregator<'c>,
    /// The OpenTelemetry contract's blocks in use, when both its probes are opened.
    inuse: Option<InUse>,
}

impl<'c> Windowed<'c> {
    /// Aggregates `events` as `cfg` (a pprof report, samples prefixed by command and pid)
    /// says, interning at most `stack_limit` stack nodes and frames a window.
    pub fn new(cfg: &'c ReportConfig, events: &[LiveEvent], stack_limit: usize) -> Windowed<'c> {
        debug_assert!(matches!(cfg.output, ReportOutput::Pprof(_)));
        debug_assert!(cfg.prefix == Prefix::Pid);
        let weighers: Vec<Weigher> = events
            .iter()
            .map(|e| weigh::weigher(&e.name, e.format.as_ref(), cfg.weight_field.as_deref()))
            .collect();
        let exit_brk = events.iter().enumerate().find_map(|(i, e)| {
            let ret = e.format.as_ref()?.field("ret")?;
            e.name.ends_with("sys_exit_brk").then(|| (i, ret.clone()))
        });
        let mut a = Aggregator {
            cfg,
            rows: None,
            agg: Aggregate::new(events.len(), cfg.space),
            event_filter: None,
            weighers,
            brk: BrkTracker::default(),
            exit_brk,
            fixed_periods: events.iter().map(|e| e.period).collect(),
            prefix_of: FxHashMap::default(),
            stack_limit: Some(stack_limit.max(1)),
            last_key: None,
        };
        a.agg.sized = sized(&a.weighers);
        Windowed {
            a,
            inuse: InUse::of(events),
        }
    }

    /// The modules (ids of the session's `ProcessMaps`) the frames it keeps across windows
    /// name: the blocks in use's allocation sites.
    pub fn held_modules(&self) -> Vec<u32> {
        self.inuse.as_ref().map_or_else(Vec::new, InUse::modules)
    }

    /// Lets go of the in-use blocks of the processes `gone` says are (see
    /// [`InUse::forget_gone`]).
    pub fn forget_gone(&mut self, gone: impl Fn(u32) -> bool) {
        if let Some(u) = &mut self.inuse {
            u.forget_gone(gone);
        }
    }

    /// The in-use table's figures, when it is kept.
    pub fn inuse_stats(&self) -> Option<InUseStats> {
        self.inuse.as_ref().map(|u| u.stats)
    }

    /// The window so far (its maps empty: the caller has the session's); the next begins
    /// empty. A brk call still waiting for the heap it creates is counted as of unknown base.
    pub fn take(&mut self) -> Aggregate {
        self.a.brk.finish();
        if let Some(u) = &mut self.inuse {
            u.add_to(&mut self.a.agg);
        }
        let mut fresh = Aggregate::new(self.a.agg.stats.samples.len(), self.a.cfg.space);
        fresh.sized = sized(&self.a.weighers);
        self.a.prefix_of.clear();
        let mut agg = std::mem::replace(&mut self.a.agg, fresh);
        agg.stats.brk_shrunk = std::mem::take(&mut self.a.brk.shrunk);
        agg.stats.brk_unknown_base = std::mem::take(&mut self.a.brk.unknown_base);
        agg
    }

    /// The weigher of each event (what its bytes column means).
    pub fn weighers(&self) -> &[Weigher] {
        &self.a.weighers
    }
}

fn sized(weighers: &[Weigher]) -> Vec<bool> {
    weighers
        .iter()
        .map(|w| !matches!(w, Weigher::None))
        .collect()
}

impl Handler for Windowed<'_> {
    fn sample(&mut self, c: &SampleCtx<'_>) -> io::Result<()> {
        let Some(u) = &mut self.inuse else {
            return self.a.sample(c);
        };
        let (pid, raw) = (c.sample.pid.unwrap_or(0), c.sample.raw.unwrap_or(&[]));
        if u.is_free(c.ev) {
            // Paired, not counted: its columns are the blocks in use.
            u.freed(pid, raw);
            return Ok(());
        }
        self.a.last_key = None;
        self.a.sample(c)?;
        if u.is_alloc(c.ev)
            && let Some((_, prefix, stack)) = self.a.last_key
        {
            u.allocated(pid, raw, (prefix, stack), &self.a.agg);
        }
        Ok(())
    }

    fn wants_unwind(&mut self, ev: usize, s: &Sample<'_>, procs: &Processes) -> bool {
        // A free's stack is never used: its block keeps its allocation's.
        if self.inuse.as_ref().is_some_and(|u| u.is_free(ev)) {
            return false;
        }
        Handler::wants_unwind(&mut self.a, ev, s, procs)
    }

    fn side_band(&mut self, r: &SideBand<'_>) -> io::Result<()> {
        if let (Some(u), Some(Record::Exit { pid, tid, .. })) = (&mut self.inuse, r.rec)
            && pid == tid
        {
            u.exited(*pid);
        }
        Handler::side_band(&mut self.a, r)
    }
}
