//! A tool on a recording (`-i`): the recording's events mapped to the tool's, its records
//! replayed in time order through the session into the same `Drive` a live run uses, its
//! intervals bounded by the span its header states.

use std::io::{self, Write};

use anyhow::{Context, Result, anyhow};
use rustc_hash::FxHashMap;

use super::{Cx, Drive, Seen, Tool, ToolConfig, Want};
use crate::config::report::Input;
use crate::perfdata::PerfDataFile;
use crate::perfdata::tracing_data::{EventFormat, parse_event_formats};
use crate::session::order::{self, Slack};
use crate::session::{Keep, Session};

/// The times a recording's samples lie between, as its header states them (perf's
/// HEADER_SAMPLE_TIME, memperf's run start and end); either end may be unknown.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Span {
    pub(super) start: Option<u64>,
    pub(super) end: Option<u64>,
}

impl Span {
    /// What `file`'s header says. A live run has no span: its times are the kernel's.
    fn of(file: &PerfDataFile) -> Span {
        let f = &file.features;
        let run_end = f.memperf_stats.as_ref().and_then(|s| s.get("end_time"));
        let starts = [f.sample_time.map(|t| t.0), f.clock_data.map(|c| c.clock_ns)];
        let ends = [f.sample_time.map(|t| t.1), run_end];
        Span {
            start: starts.into_iter().flatten().min(),
            end: ends.into_iter().flatten().max(),
        }
    }

    pub(super) fn holds(&self, t: u64) -> bool {
        self.start.is_none_or(|s| t >= s) && self.end.is_none_or(|e| t <= e)
    }
}

pub(super) fn replay<T: Tool>(
    name: &str,
    cfg: &ToolConfig,
    wants: &[Want],
    tool: &mut T,
    out: Box<dyn Write>,
    banner: &dyn Fn(&mut Cx) -> io::Result<()>,
    path: &std::path::Path,
) -> Result<Seen> {
    let input = if path == std::path::Path::new("-") {
        Input::Stdin
    } else {
        Input::File(path.to_path_buf())
    };
    let file = crate::input::open(&input)?;
    let Mapped {
        map,
        formats,
        present,
    } = map_events(name, &file, wants, path)?;
    if let Some(note) = file.cut_note(&path.display().to_string()) {
        eprintln!("memperf {name}: warning: {note}");
    }
    let mut cx = Cx::new(out, formats, cfg.stacks);
    cx.present = present;
    cx.book.fp_events = fp_events(&file, &map, wants.len());
    cx.replay = true;
    cx.clock = file.features.clock_data;
    banner(&mut cx)?;
    let mut session = Session::for_file(&file, Keep::replaying(&file, cfg.stacks));
    let mut drive = Drive::new(tool, banner, cx, map, cfg);
    drive.span = Span::of(&file);
    if let Some(c) = file.features.clock_data {
        drive.set_origin(c.clock_ns);
    }
    let read = order::replay(
        &file,
        &mut session,
        &mut drive,
        Slack::OneRound,
        &mut |_| {},
    )
    .context("failed to read the records")?;
    if let Some(e) = &read.read_error {
        eprintln!("memperf {name}: warning: {e}");
    }
    finish_replay(name, &file, &session, &mut drive)?;
    let st = session.stats();
    let recorded = file.features.memperf_stats.as_ref();
    let seen = Seen {
        samples: drive.samples,
        lost: crate::session::lost_once(st.lost, st.lost_samples),
        unwound: st.unwound + recorded.and_then(|s| s.get("unwound")).unwrap_or(0),
        truncated: st.truncated + recorded.and_then(|s| s.get("truncated")).unwrap_or(0),
        fp_walked: drive.cx.book.fp_walked,
        fp_cut: drive.cx.book.fp_cut,
    };
    drive.tool.finish(&mut drive.cx, session.procs(), &seen)?;
    drive.cx.out.flush()?;
    Ok(seen)
}

/// The recording's events as the tool's: source index → the tool's, and for each of the
/// tool's events its tracepoint format and whether the recording has it.
struct Mapped {
    map: Vec<Option<usize>>,
    formats: Vec<Option<EventFormat>>,
    present: Vec<bool>,
}

/// Per tool event, whether the user frames of its recorded callchains are the kernel's
/// frame-pointer walk (any of the file's events it maps, `PerfDataFile::walked_by_fp`).
fn fp_events(file: &PerfDataFile, map: &[Option<usize>], wants: usize) -> Vec<bool> {
    let mut fp = vec![false; wants];
    for (ev, want) in map.iter().enumerate() {
        if let Some(w) = want.and_then(|w| fp.get_mut(w)) {
            *w |= file.walked_by_fp(ev);
        }
    }
    fp
}

/// Finds the tool's `wants` among `file`'s events by name. A want the file lacks is an
/// error, worded as the file being cut short when it is (its events' names are then gone).
fn map_events(
    name: &str,
    file: &PerfDataFile,
    wants: &[Want],
    path: &std::path::Path,
) -> Result<Mapped> {
    let names = file.event_names();
    let by_config: FxHashMap<u64, EventFormat> = file
        .features
        .tracing_data
        .as_deref()
        .map(parse_event_formats)
        .unwrap_or_default()
        .into_iter()
        .map(|f| (f.id, f))
        .collect();
    let mut map = vec![None; names.len()];
    let mut formats = Vec::new();
    let mut present = Vec::new();
    for (i, w) in wants.iter().enumerate() {
        let at = names.iter().position(|n| n == w.name);
        match at {
            Some(src) => {
                map[src] = Some(i);
                let attr = &file.events[src].attr;
                let tp = attr.type_ == perf_event_open_sys::bindings::PERF_TYPE_TRACEPOINT;
                formats.push(tp.then(|| by_config.get(&attr.config).cloned()).flatten());
            }
            None if w.optional => formats.push(None),
            None => return Err(missing_event(name, file, wants, w.name, path)),
        }
        present.push(at.is_some());
    }
    Ok(Mapped {
        map,
        formats,
        present,
    })
}

/// Why `file` lacks the tool's event `want`: cut short (its events' names are then gone),
/// else recorded without it.
fn missing_event(
    name: &str,
    file: &PerfDataFile,
    wants: &[Want],
    want: &str,
    path: &std::path::Path,
) -> anyhow::Error {
    if let Some(note) = file.cut_note(&path.display().to_string()) {
        return anyhow!(
            "{note}, but {name} cannot find its `{want}` events without the names its feature \
             sections give"
        );
    }
    let needed: Vec<&str> = wants
        .iter()
        .filter(|w| !w.optional)
        .map(|w| w.name)
        .collect();
    anyhow!(
        "`{}` has no `{want}` events, which {name} reads; it has: {}. Record them with \
         `memperf {name} -w FILE` or `memperf record -e {}`",
        path.display(),
        file.event_names().join(", "),
        needed.join(",")
    )
}

/// Ends a replay's last intervals where the run ended (else at its last sample time) and
/// says what was left out of them.
fn finish_replay<T: Tool>(
    name: &str,
    file: &PerfDataFile,
    session: &Session,
    drive: &mut Drive<'_, T>,
) -> io::Result<()> {
    let run_end = file.features.memperf_stats.as_ref();
    let last = session.stats().last_time;
    // A record timed outside the span (a corrupted time) does not end the last interval.
    let last = last.filter(|&t| drive.span.holds(t)).or(drive.last_time);
    if let Some(end) = run_end.and_then(|s| s.get("end_time")).or(last) {
        drive.catch_up(end, session.procs())?;
    }
    if drive.out_of_span > 0 {
        let (a, b) = (drive.span.start, drive.span.end);
        let (a, b) = (a.map(|t| t.to_string()), b.map(|t| t.to_string()));
        eprintln!(
            "memperf {name}: warning: left out {} samples timed outside the recording's span \
             ({}..{} ns on the sample clock, as its header states)",
            drive.out_of_span,
            a.as_deref().unwrap_or("?"),
            b.as_deref().unwrap_or("?"),
        );
    }
    if drive.skipped_intervals > 0 {
        eprintln!(
            "memperf {name}: warning: skipped {} empty intervals in gaps of over an hour \
             without samples (a corrupted time or span?)",
            drive.skipped_intervals
        );
    }
    Ok(())
}
