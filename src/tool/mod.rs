//! The memory tools' shared stage: a tool is the events it wants, a [`Tool`] that receives
//! their samples (typed, with their process and, with `--stack`, their unwound stack) and a
//! printer. This module runs it live (through `live::recorder`, writing the same records to
//! a perf.data file with `-w`) or on a recording (`-i`, through `session::order`), with the
//! same output: intervals are cut on the samples' clock, from the run's start, in both.

use std::io::{self, Write};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};

use crate::aggregate::{FrameKey, StackBook};
use crate::config::record::{CallGraph, RecordConfig};
use crate::config::report::StackSpace;
pub use crate::config::tool::ToolConfig;
use crate::events;
use crate::live::driver::{Flow, OnSignal, Round};
use crate::live::open::Opened;
use crate::live::recorder::{self, Live, Run};
use crate::maps::ProcessMaps;
use crate::output::{NameOptions, Resolver};
use crate::perfdata::ClockData;
use crate::perfdata::tracing_data::EventFormat;
use crate::records::Sample;
use crate::session::{Handler, Processes, SampleCtx, Session, SideBand};
use crate::stacks::{FrameId, StackId};
use crate::sys::tracefs::Tracefs;

pub(crate) mod calls;
pub(crate) mod hist;
pub(crate) mod place;
mod replay;
pub(crate) mod stacks;

use replay::{Span, replay};

/// An event a tool reads.
#[derive(Debug, Clone, Copy)]
pub struct Want {
    /// As `memperf record -e` takes it: `oom:mark_victim`, `page-faults`.
    pub name: &'static str,
    /// The Linux version that added it, for the message when this kernel lacks it.
    pub since: &'static str,
    /// The tool goes on without it (and says so).
    pub optional: bool,
    /// A tracepoint filter the kernel applies before sampling (`PERF_EVENT_IOC_SET_FILTER`):
    /// what it rejects costs no sample and no ring space.
    pub filter: Option<&'static str>,
}

/// What a tool does with the samples of its events.
pub trait Tool {
    /// One sample of event `s.ev` (an index into the tool's own `Want` list).
    fn sample(&mut self, cx: &mut Cx, s: &SampleCtx<'_>) -> io::Result<()>;

    /// A record other than a sample, after the session applied it.
    fn side_band(&mut self, _cx: &mut Cx, _r: &SideBand<'_>) -> io::Result<()> {
        Ok(())
    }

    /// The interval ending at sample time `end` is complete.
    fn interval(&mut self, _cx: &mut Cx, _end: u64, _procs: &Processes) -> io::Result<()> {
        Ok(())
    }

    /// The run is over; `seen` is what it saw and lost.
    fn finish(&mut self, _cx: &mut Cx, _procs: &Processes, _seen: &Seen) -> Result<()> {
        Ok(())
    }
}

/// What a tool prints with: the output, its events' tracepoint formats, stacks and names,
/// and the clock.
pub struct Cx {
    pub out: Box<dyn Write>,
    formats: Vec<Option<EventFormat>>,
    /// Which of the tool's events this source has.
    pub present: Vec<bool>,
    pub stacks: bool,
    /// Whether the records come from a recording (`-i`) rather than the live system.
    pub replay: bool,
    book: StackBook,
    resolver: Resolver,
    ids: Vec<FrameId>,
    /// The run's start on the sample clock and the wall clock, when known.
    pub clock: Option<ClockData>,
    /// The first interval's start on the sample clock.
    pub origin: Option<u64>,
}

impl Cx {
    fn new(out: Box<dyn Write>, formats: Vec<Option<EventFormat>>, stacks: bool) -> Cx {
        let kallsyms = stacks
            .then(|| std::fs::read_to_string("/proc/kallsyms").ok())
            .flatten()
            .map(|t| std::sync::Arc::new(crate::symbolize::Kallsyms::from_text(&t)));
        Cx {
            out,
            present: formats.iter().map(|_| true).collect(),
            formats,
            stacks,
            replay: false,
            book: StackBook::new(StackSpace::All),
            resolver: Resolver::new(NameOptions::plain(), kallsyms),
            ids: Vec::new(),
            clock: None,
            origin: None,
        }
    }

    /// Tracepoint field `name` of the sample, as an unsigned integer.
    pub fn field(&self, s: &SampleCtx<'_>, name: &str) -> Option<u64> {
        let f = self.formats.get(s.ev)?.as_ref()?.field(name)?;
        f.read(s.sample.raw?)
    }

    /// Tracepoint field `name`, sign-extended from its size.
    pub fn field_signed(&self, s: &SampleCtx<'_>, name: &str) -> Option<i64> {
        let f = self.formats.get(s.ev)?.as_ref()?.field(name)?;
        let v = f.read(s.sample.raw?)?;
        let shift = 64 - 8 * f.size.min(8) as u32;
        Some(((v << shift) as i64) >> shift)
    }

    /// Whether the sample's event has field `name` (tracepoints gain fields over versions).
    pub fn has_field(&self, ev: usize, name: &str) -> bool {
        self.formats
            .get(ev)
            .and_then(Option::as_ref)
            .is_some_and(|f| f.field(name).is_some())
    }

    /// A string field: `__data_loc char[]` or a fixed `char[N]`.
    pub fn field_str(&self, s: &SampleCtx<'_>, name: &str) -> Option<String> {
        let f = self.formats.get(s.ev)?.as_ref()?.field(name)?;
        let raw = s.sample.raw?;
        let bytes = match f.array_len {
            Some(n) if n > 0 => raw.get(f.offset..f.offset + f.size)?,
            _ if f.size == 4 => {
                let loc = f.read(raw)?;
                let (off, len) = ((loc & 0xffff) as usize, ((loc >> 16) & 0xffff) as usize);
                raw.get(off..off + len)?
            }
            _ => return None,
        };
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        Some(String::from_utf8_lossy(&bytes[..end]).into_owned())
    }

    /// The sample's stack (kernel frames, then the user frames the session unwound), when
    /// the tool keeps stacks.
    pub fn stack(&mut self, s: &SampleCtx<'_>) -> Option<StackId> {
        if !self.stacks {
            return None;
        }
        let pid = s.sample.pid?;
        let maps = s.procs.maps().unwrap_or(ProcessMaps::empty());
        self.book.stack_of(s, maps, pid)
    }

    /// The names of a stack's frames, leaf first (an inlined function before its caller),
    /// each marked kernel or not.
    pub fn frame_names(&mut self, id: StackId, procs: &Processes) -> Vec<(String, bool)> {
        self.ids.clear();
        self.book.stacks.frames(id, &mut self.ids);
        let maps = procs.maps().unwrap_or(ProcessMaps::empty());
        let res = self.resolver.catch_up(&self.book.frames, maps);
        let mut out = Vec::new();
        for &f in self.ids.iter().rev() {
            let kernel = matches!(self.book.frames.get(f), Some(FrameKey::Kernel { .. }));
            if let Some(names) = res.names.get(f as usize) {
                out.extend(names.iter().rev().map(|n| (n.clone(), kernel)));
            }
        }
        out
    }

    /// Writes a stack under a line, one frame a line, leaf first, as BCC's tools do.
    pub fn write_stack(&mut self, id: Option<StackId>, procs: &Processes) -> io::Result<()> {
        let Some(id) = id else {
            return writeln!(self.out, "        [no stack]");
        };
        for (name, _) in self.frame_names(id, procs) {
            writeln!(self.out, "        {name}")?;
        }
        Ok(())
    }

    /// Wall-clock `HH:MM:SS` of sample time `t` (the run's clock data), else seconds since
    /// the first interval's start.
    pub fn time_of_day(&self, t: u64) -> String {
        match self.clock {
            Some(c) => {
                let wall = c.wall_of(t);
                let mut tm = zeroed_tm();
                crate::sys::localtime((wall / 1_000_000_000) as i64, &mut tm);
                format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec)
            }
            None => format!("{:.6}", self.seconds(t)),
        }
    }

    /// Seconds from the run's start to sample time `t`.
    pub fn seconds(&self, t: u64) -> f64 {
        t.saturating_sub(self.origin.unwrap_or(t)) as f64 / 1e9
    }
}

fn zeroed_tm() -> libc::tm {
    libc::tm {
        tm_sec: 0,
        tm_min: 0,
        tm_hour: 0,
        tm_mday: 0,
        tm_mon: 0,
        tm_year: 0,
        tm_wday: 0,
        tm_yday: 0,
        tm_isdst: 0,
        tm_gmtoff: 0,
        tm_zone: std::ptr::null(),
    }
}

/// What a run saw, for the closing line.
#[derive(Debug, Default, Clone, Copy)]
pub struct Seen {
    pub samples: u64,
    pub lost: u64,
    pub unwound: u64,
    pub truncated: u64,
    /// User stacks the kernel walked by frame pointers, and those cut at a value that
    /// is no return address (`StackBook`'s).
    pub fp_walked: u64,
    pub fp_cut: u64,
}

/// Feeds the session's records to the tool: maps the source's events to the tool's, cuts
/// intervals on the sample clock and stops after `count` of them.
struct Drive<'t, T: Tool> {
    tool: &'t mut T,
    /// Printed once the events are live.
    banner: &'t dyn Fn(&mut Cx) -> io::Result<()>,
    cx: Cx,
    /// Source event index → the tool's.
    map: Vec<Option<usize>>,
    every: Option<u64>,
    next_end: Option<u64>,
    intervals: u64,
    count: Option<u64>,
    done: bool,
    samples: u64,
    /// A recording's span on the sample clock, from its header, when it says so.
    span: Span,
    /// Samples timed outside `span`, left out.
    out_of_span: u64,
    /// Empty intervals not printed across a gap longer than `MAX_REPLAY_GAP_NS`.
    skipped_intervals: u64,
    /// The latest sample time handed to the tool.
    last_time: Option<u64>,
}

/// The longest run of empty intervals a replay prints at once: past it, the intervals up to
/// the next sample are skipped and counted (a corrupted time once made slabratetop print
/// millions of empty intervals). This holds within the span a header states too: a
/// corrupted header states any span.
const MAX_REPLAY_GAP_NS: u64 = 3_600_000_000_000;

impl<'t, T: Tool> Drive<'t, T> {
    fn new(
        tool: &'t mut T,
        banner: &'t dyn Fn(&mut Cx) -> io::Result<()>,
        cx: Cx,
        map: Vec<Option<usize>>,
        cfg: &ToolConfig,
    ) -> Drive<'t, T> {
        Drive {
            tool,
            banner,
            cx,
            map,
            every: cfg.interval.map(|d| d.as_nanos() as u64),
            next_end: None,
            intervals: 0,
            count: cfg.count,
            done: false,
            samples: 0,
            span: Span::default(),
            out_of_span: 0,
            skipped_intervals: 0,
            last_time: None,
        }
    }

    fn set_origin(&mut self, origin: u64) {
        if self.cx.origin.is_none() {
            self.cx.origin = Some(origin);
            // None when the first interval would end past the clock's last value.
            self.next_end = self.every.and_then(|e| origin.checked_add(e));
        }
    }

    /// Ends every interval that ended by sample time `t`.
    fn catch_up(&mut self, t: u64, procs: &Processes) -> io::Result<()> {
        while let (Some(end), Some(every)) = (self.next_end, self.every) {
            if end > t || self.done {
                break;
            }
            if self.cx.replay && t - end > MAX_REPLAY_GAP_NS {
                // The intervals between are empty; their count is said at the end.
                let skip = (t - end) / every;
                self.skipped_intervals += skip;
                self.next_end = Some(end + skip * every);
                continue;
            }
            self.tool.interval(&mut self.cx, end, procs)?;
            self.cx.out.flush()?;
            self.intervals += 1;
            // No interval ends past the clock's last value (a corrupted time near it).
            self.next_end = end.checked_add(every);
            if self.count.is_some_and(|c| self.intervals >= c) {
                self.done = true;
            }
        }
        Ok(())
    }
}

impl<T: Tool> Handler for Drive<'_, T> {
    fn sample(&mut self, s: &SampleCtx<'_>) -> io::Result<()> {
        let Some(ev) = self.map.get(s.ev).copied().flatten() else {
            return Ok(());
        };
        if self.done {
            return Ok(());
        }
        if let Some(t) = s.sample.time {
            if !self.span.holds(t) {
                self.out_of_span += 1;
                return Ok(());
            }
            self.last_time = Some(self.last_time.map_or(t, |l| l.max(t)));
            self.set_origin(t);
            self.catch_up(t, s.procs)?;
            if self.done {
                return Ok(());
            }
        }
        self.samples += 1;
        let mapped = SampleCtx {
            ev,
            misc: s.misc,
            sample: s.sample,
            bytes: s.bytes,
            unwound: s.unwound,
            corrected_id: s.corrected_id,
            recovered: s.recovered,
            procs: s.procs,
        };
        self.tool.sample(&mut self.cx, &mapped)
    }

    fn wants_unwind(&mut self, ev: usize, _s: &Sample<'_>, _procs: &Processes) -> bool {
        self.cx.stacks && self.map.get(ev).copied().flatten().is_some()
    }

    fn side_band(&mut self, r: &SideBand<'_>) -> io::Result<()> {
        if let Some(rec) = r.rec {
            self.cx.book.side_band(rec);
        }
        self.tool.side_band(&mut self.cx, r)
    }
}

impl<T: Tool> Live for Drive<'_, T> {
    fn started(
        &mut self,
        _opened: &Opened,
        _child: Option<i32>,
        clock: Option<ClockData>,
    ) -> Result<()> {
        self.cx.clock = clock;
        if let Some(c) = clock {
            self.set_origin(c.clock_ns);
        }
        (self.banner)(&mut self.cx)?;
        self.cx.out.flush()?;
        Ok(())
    }

    fn round(&mut self, session: &mut Session, round: Round) -> Result<Flow> {
        // Every record stamped before `now` minus the hold-back has been handed on.
        if let Some(now) = round.now {
            let settled = now.saturating_sub(crate::live::drain::HOLD_BACK_NS);
            self.catch_up(settled, session.procs())?;
        }
        self.cx.out.flush()?;
        Ok(if self.done {
            Flow::Stop
        } else {
            Flow::Continue
        })
    }
}

/// Runs `tool` on its events, live or from `cfg.input`; `banner` is printed once events
/// are live (or the recording is open).
pub fn run<T: Tool>(
    name: &str,
    cfg: &ToolConfig,
    wants: &[Want],
    tool: &mut T,
    out: Box<dyn Write>,
    banner: &dyn Fn(&mut Cx) -> io::Result<()>,
) -> Result<Seen> {
    match &cfg.input {
        Some(path) => replay(name, cfg, wants, tool, out, banner, path),
        None => live(name, cfg, wants, tool, out, banner),
    }
}

/// Whether tracepoint `name` (`system:event`) can be opened here; else why not.
pub fn tracepoint_usable(name: &str) -> std::result::Result<(), String> {
    let (system, event) = tracepoint(name).ok_or_else(|| format!("`{name}` is no tracepoint"))?;
    if !crate::sys::diagnose::SystemFacts::read().may_read_tracepoints() {
        return Err(format!(
            "`{name}` needs root, CAP_PERFMON or kernel.perf_event_paranoid=-1"
        ));
    }
    let tfs = Tracefs::locate_or_mount().map_err(|e| format!("`{name}` needs tracefs: {e}"))?;
    tfs.format(system, event)
        .map(|_| ())
        .map_err(|_| format!("this kernel has no tracepoint `{name}`"))
}

fn tracepoint(name: &str) -> Option<(&str, &str)> {
    name.split_once(':').filter(|(s, _)| !s.is_empty())
}

fn live<T: Tool>(
    name: &str,
    cfg: &ToolConfig,
    wants: &[Want],
    tool: &mut T,
    out: Box<dyn Write>,
    banner: &dyn Fn(&mut Cx) -> io::Result<()>,
) -> Result<Seen> {
    let mut tracefs = None;
    let mut formats = Vec::new();
    let mut present = Vec::new();
    let mut specs = Vec::new();
    let mut filters = Vec::new();
    let mut map = Vec::new();
    let facts = crate::sys::diagnose::SystemFacts::read();
    for (i, w) in wants.iter().enumerate() {
        let Some(format) = want_format(name, w, &facts, &mut tracefs)? else {
            formats.push(None);
            present.push(false);
            continue;
        };
        let mut spec = events::parse_event_list(w.name)
            .with_context(|| format!("{name}: event `{}`", w.name))?;
        map.push(Some(i));
        let filter = want_filter(cfg, w);
        filters.extend(spec.iter().map(|_| filter.clone()));
        specs.append(&mut spec);
        formats.push(format);
        present.push(true);
    }
    let rcfg = tool_recording(cfg, specs);
    let mut cx = Cx::new(out, formats, cfg.stacks);
    cx.present = present;
    let mut drive = Drive::new(tool, banner, cx, map, cfg);
    let (mut events, tfs) = crate::live::open::resolve_events(&rcfg.events)?;
    for (ev, filter) in events.iter_mut().zip(&filters) {
        if let Some(f) = filter {
            ev.filter =
                Some(std::ffi::CString::new(f.as_str()).context("a filter with a NUL byte")?);
        }
    }
    let run = Run {
        cfg: &rcfg,
        write: cfg.write.is_some(),
        events: Some((events, tfs.or(tracefs))),
        keep_processes: true,
        follow_remaps: true,
        tick: None,
        on_signal: OnSignal::ForwardAndStop,
    };
    let done = recorder::record(run, &mut drive)?;
    if let Some(end) = done.now {
        drive.catch_up(end, done.session.procs())?;
    }
    let st = done.session.stats();
    let seen = Seen {
        samples: drive.samples,
        lost: done.lost,
        unwound: st.unwound,
        truncated: st.truncated,
        fp_walked: drive.cx.book.fp_walked,
        fp_cut: drive.cx.book.fp_cut,
    };
    drive
        .tool
        .finish(&mut drive.cx, done.session.procs(), &seen)?;
    drive.cx.out.flush()?;
    if let Some(path) = &cfg.write {
        eprintln!(
            "memperf {name}: wrote {} samples to {} ({} bytes)",
            st.samples.iter().sum::<u64>(),
            path.display(),
            done.file_bytes
        );
    }
    Ok(seen)
}

/// How wanted event `w` opens: `Some` with its tracepoint's format (`None` for an event
/// that is no tracepoint), or `None` when it is optional and cannot be opened here (said
/// on stderr, with the version that added a tracepoint this kernel lacks); a required one
/// that cannot be opened is an error.
fn want_format(
    name: &str,
    w: &Want,
    facts: &crate::sys::diagnose::SystemFacts,
    tracefs: &mut Option<Tracefs>,
) -> Result<Option<Option<EventFormat>>> {
    let Some((system, event)) = tracepoint(w.name) else {
        return Ok(Some(None));
    };
    // An optional tracepoint this user may not open, or without a tracefs: the tool goes
    // on without it rather than refusing to run.
    let why_not = if !w.optional {
        None
    } else if !facts.may_read_tracepoints() {
        Some("tracepoints need root, CAP_PERFMON or kernel.perf_event_paranoid=-1".to_string())
    } else if tracefs.is_none() {
        Tracefs::locate_or_mount()
            .map(|t| *tracefs = Some(t))
            .err()
            .map(|e| format!("{e:#}"))
    } else {
        None
    };
    if let Some(why) = why_not {
        eprintln!("memperf {name}: note: going on without `{}`: {why}", w.name);
        return Ok(None);
    }
    let tfs = match tracefs {
        Some(t) => t,
        None => tracefs.insert(
            Tracefs::locate_or_mount()
                .with_context(|| format!("{name} needs tracefs for `{}`", w.name))?,
        ),
    };
    match tfs.format(system, event) {
        Ok(text) => Ok(Some(EventFormat::parse(&String::from_utf8_lossy(&text)))),
        Err(_) if w.optional => {
            eprintln!(
                "memperf {name}: note: this kernel has no tracepoint `{}` (Linux {}+); going on without it",
                w.name, w.since
            );
            Ok(None)
        }
        Err(e) => bail!(
            "this kernel has no tracepoint `{}` ({e}); {name} needs it (Linux {}+)",
            w.name,
            w.since
        ),
    }
}

/// The in-kernel filter of wanted event `w`: its own, and-ed with `--comm`'s on a
/// tracepoint (a plain name only: a glob character would change the pattern).
fn want_filter(cfg: &ToolConfig, w: &Want) -> Option<String> {
    let comm = cfg
        .comm
        .as_deref()
        .filter(|n| !n.is_empty() && !n.contains(['*', '?', '[', ']', '"', '\\']))
        .filter(|_| tracepoint(w.name).is_some())
        .map(|n| format!("comm ~ \"*{n}*\""));
    match (w.filter, comm) {
        (Some(f), Some(c)) => Some(format!("({f}) && {c}")),
        (Some(f), None) => Some(f.to_string()),
        (None, c) => c,
    }
}

/// The recording a tool's events are opened as.
fn tool_recording(cfg: &ToolConfig, events: Vec<crate::events::EventSpec>) -> RecordConfig {
    RecordConfig {
        command: cfg.command.clone(),
        command_stdout: cfg.command_stdout,
        period: cfg.period.map(crate::events::Period::Count),
        call_graph: if cfg.stacks {
            CallGraph::Dwarf { stack_bytes: 8192 }
        } else {
            CallGraph::None
        },
        mmap_pages: cfg.mmap_pages,
        output: cfg
            .write
            .clone()
            .unwrap_or_else(|| PathBuf::from("/dev/null")),
        duration: cfg.duration,
        ..RecordConfig::internal(events, cfg.target.clone(), cfg.cpus.clone())
    }
}

/// The name of thread `tid` of `pid`: as the session knows it, else as /proc says now, else
/// `?`.
pub fn comm(procs: &Processes, pid: u32, tid: u32) -> String {
    procs
        .comm(pid, tid)
        .map(str::to_string)
        .or_else(|| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .ok()
                .map(|c| c.trim_end().to_string())
        })
        .unwrap_or_else(|| "?".to_string())
}

/// The closing line every tool prints on standard error: what it saw and what it lost.
pub fn print_seen(name: &str, seen: &Seen) {
    eprintln!("{}", seen_line(name, seen));
}

/// `memperf NAME: N events, lost L[, T of U user stacks truncated][, C of W user stacks
/// walked by frame pointers were cut ...]`.
pub fn seen_line(name: &str, seen: &Seen) -> String {
    let mut line = format!(
        "memperf {name}: {} events, lost {}",
        seen.samples, seen.lost
    );
    if seen.unwound > 0 {
        line.push_str(&format!(
            ", {} of {} user stacks truncated",
            seen.truncated, seen.unwound
        ));
    }
    if let Some(c) = crate::output::header::fp_clause(seen.fp_cut, seen.fp_walked) {
        line.push_str(&format!(", {c}"));
    }
    line
}
