//! The report's aggregation fed by a live run, one window at a time (`memperf agent`): the
//! same filters, stacks and weights as `report --pprof` of a recording of the same events,
//! with the window's frames, stacks and commands let go of when it is taken, and a bound on
//! how many a window interns (past it samples are kept without their stack and counted), so
//! that a run of days holds one window's worth.

use std::io;

use perf_event_open_sys::bindings as b;
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
    /// The event whose columns its samples count in: its own index, or for a probe's later
    /// site its first site's (one probe is one column however many places fire it).
    pub column: usize,
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
        // A later site is weighed by its probe's rule, from its own arguments' places.
        let weighers: Vec<Weigher> = events
            .iter()
            .map(|e| {
                let name = &events.get(e.column).unwrap_or(e).name;
                weigh::weigher(name, e.format.as_ref(), cfg.weight_field.as_deref())
            })
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
            columns: events.iter().map(|e| e.column).collect(),
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
        (agg.stats.fp_walked, agg.stats.fp_cut) = (agg.book.fp_walked, agg.book.fp_cut);
        agg
    }

    /// The weigher of each event (what its bytes column means).
    pub fn weighers(&self) -> &[Weigher] {
        &self.a.weighers
    }

    /// The column each event's samples count in (see [`LiveEvent::column`]).
    pub fn columns(&self) -> &[usize] {
        &self.a.columns
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
        let kept_before = self.kept_total();
        self.kept_sample(c)?;
        self.count_unmapped(c, kept_before);
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

impl Windowed<'_> {
    /// A sample through the aggregation, or, for the contract's free probe, to the in-use
    /// table alone.
    fn kept_sample(&mut self, c: &SampleCtx<'_>) -> io::Result<()> {
        let Some(u) = &mut self.inuse else {
            return self.a.sample(c);
        };
        let (pid, raw) = (c.sample.pid.unwrap_or(0), c.sample.raw.unwrap_or(&[]));
        if u.is_free(c.ev) {
            // Paired, not counted: its columns are the blocks in use.
            u.freed(c.ev, pid, raw);
            return Ok(());
        }
        self.a.last_key = None;
        self.a.sample(c)?;
        if u.is_alloc(c.ev)
            && let Some((_, prefix, stack)) = self.a.last_key
        {
            u.allocated(c.ev, pid, raw, (prefix, stack), &self.a.agg);
        }
        Ok(())
    }

    /// The samples kept so far, over every column (a probe's later sites count in its first
    /// site's).
    fn kept_total(&self) -> u64 {
        self.a.agg.stats.kept.iter().sum()
    }

    /// Counts a sample kept at a user address that no mapping recorded for its process
    /// holds: its leaf can only be named `[unknown]`, and the window says how many.
    fn count_unmapped(&mut self, c: &SampleCtx<'_>, kept_before: u64) {
        let kept = self.kept_total();
        let user = u32::from(c.misc) & b::PERF_RECORD_MISC_CPUMODE_MASK == b::PERF_RECORD_MISC_USER;
        if kept > kept_before
            && user
            && let (Some(pid), Some(ip), Some(maps)) = (c.sample.pid, c.sample.ip, c.procs.maps())
            && maps.lookup(pid, ip).is_none()
        {
            self.a.agg.stats.unmapped += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use perf_event_open_sys::bindings as b;
    use rustc_hash::FxHashMap;

    use super::{LiveEvent, Windowed};
    use crate::config::report::{Input, Prefix, ReportConfig, ReportOutput};
    use crate::maps::ProcessMaps;
    use crate::records::{self, Mmap2Fields, ParseInfo, Sample, SampleId};
    use crate::session::{Keep, Session};

    /// A window counts the samples at a user address that no mapping recorded for their
    /// process holds (named `[unknown]`), and those alone: a sample of a mapped process, of
    /// a process with no mapping, of the mapped process in the next window (its mapping is
    /// the session's, not the window's), then after its exit.
    #[test]
    fn a_window_counts_the_samples_no_mapping_of_their_process_holds() {
        let mut attr = b::perf_event_attr {
            sample_type: u64::from(b::PERF_SAMPLE_IP | b::PERF_SAMPLE_TID | b::PERF_SAMPLE_TIME),
            ..b::perf_event_attr::default()
        };
        attr.set_sample_id_all(1);
        let info = ParseInfo::from_attr(&attr);
        let keep = Keep {
            maps: Some(ProcessMaps::default()),
            comms: true,
            ..Keep::default()
        };
        let mut session = Session::new(vec![info], FxHashMap::default(), keep);
        let cfg = ReportConfig {
            output: ReportOutput::Pprof("-".into()),
            prefix: Prefix::Pid,
            ..ReportConfig::plain(Input::File("test".into()))
        };
        let events = [LiveEvent {
            name: "page-faults".into(),
            format: None,
            period: None,
            column: 0,
        }];
        let mut win = Windowed::new(&cfg, &events, 1000);
        let (pid, text) = (7u32, 0x40_0000u64);
        let sid = |time| SampleId {
            pid: Some(pid),
            tid: Some(pid),
            time: Some(time),
            ..SampleId::default()
        };
        let mut buf = Vec::new();
        let m = Mmap2Fields {
            pid,
            tid: pid,
            addr: text,
            len: 0x1000,
            prot: (libc::PROT_READ | libc::PROT_EXEC) as u32,
            filename: b"/usr/bin/app",
            ..Mmap2Fields::default()
        };
        records::encode_mmap2(&mut buf, &m, &sid(1), &info);
        let misc = u16::from_ne_bytes([buf[4], buf[5]]);
        session
            .handle(b::PERF_RECORD_MMAP2, misc, &buf, &mut win)
            .unwrap();
        let mut sample = |session: &mut Session, win: &mut Windowed<'_>, pid: u32, time| {
            let s = Sample {
                ip: Some(text + 0x10),
                pid: Some(pid),
                tid: Some(pid),
                time: Some(time),
                ..Sample::default()
            };
            buf.clear();
            let misc = b::PERF_RECORD_MISC_USER as u16;
            records::encode_sample(&mut buf, misc, &s, &info, None).unwrap();
            session
                .handle(b::PERF_RECORD_SAMPLE, misc, &buf, win)
                .unwrap();
        };
        sample(&mut session, &mut win, pid, 2);
        sample(&mut session, &mut win, pid + 1, 3);
        let first = win.take();
        assert_eq!(first.stats.kept, vec![2]);
        assert_eq!(first.stats.unmapped, 1);
        // The mapping recorded in the last window names this window's samples.
        sample(&mut session, &mut win, pid, 3);
        assert_eq!(win.take().stats.unmapped, 0);
        let mut exit = Vec::new();
        let task = records::TaskFields {
            pid,
            ppid: 1,
            tid: pid,
            ptid: 1,
            time: 4,
        };
        records::encode_exit(&mut exit, &task, &sid(4), &info);
        session
            .handle(b::PERF_RECORD_EXIT, 0, &exit, &mut win)
            .unwrap();
        sample(&mut session, &mut win, pid, 5);
        assert_eq!(win.take().stats.unmapped, 1);
    }
}
