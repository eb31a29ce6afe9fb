//! The text report: the recording's header (what it holds, what it lost) and the top stacks
//! of each event, most weight first.

use std::io::Write;

use anyhow::Result;

use super::{Resolved, header, human_bytes, wrap};
use crate::aggregate::{Aggregate, ReadStats};
use crate::config::report::{ReportConfig, Weight};
use crate::perfdata::PerfDataFile;

/// ` (3 stack end)`, or nothing when no reason was counted.
fn reasons(r: &crate::unwind::TruncCounts) -> String {
    if r.total() > 0 {
        format!(" ({r})")
    } else {
        String::new()
    }
}

/// The header's lines, without their `# `: what the recording holds, what it lost, and
/// how its frames were named.
pub(crate) fn header_lines(
    cfg: &ReportConfig,
    file: &PerfDataFile,
    names: &[String],
    agg: &Aggregate,
    res: &Resolved,
) -> Vec<String> {
    let mut h = recording_lines(cfg, file, names, agg);
    h.extend(unwind_lines(&agg.stats));
    h.extend(naming_lines(cfg, agg, res));
    h.extend(skipped_lines(cfg, &agg.stats));
    h
}

/// What the recording is: its file, command, kernel, time, duration and events.
fn recording_lines(
    cfg: &ReportConfig,
    file: &PerfDataFile,
    names: &[String],
    agg: &Aggregate,
) -> Vec<String> {
    let st = &agg.stats;
    let mut h = vec![format!("memperf report of {}", cfg.input)];
    if !file.features.cmdline.is_empty() {
        h.push(format!(
            "recorded with: {}",
            file.features.cmdline.join(" ")
        ));
    }
    let when = header::recorded(&cfg.input, file);
    match &file.features.osrelease {
        Some(rel) if !when.is_empty() => h.push(format!("{when}, Linux {rel}")),
        Some(rel) => h.push(format!("Linux {rel}")),
        None if !when.is_empty() => h.push(when),
        None => {}
    }
    let (first, last) = file
        .features
        .sample_time
        .or(st.first_time.zip(st.last_time))
        .unwrap_or((0, 0));
    h.push(format!(
        "duration: {:.3} s of samples",
        last.saturating_sub(first) as f64 / 1e9
    ));
    for (i, name) in names.iter().enumerate() {
        let kept = st.kept.get(i).copied().unwrap_or(0);
        let all = st.samples.get(i).copied().unwrap_or(0);
        if kept == all {
            h.push(format!("event {name}: {all} samples"));
        } else {
            h.push(format!("event {name}: {all} samples, {kept} after filters"));
        }
    }
    h.push(format!(
        "lost: {} events in {} LOST records, {} lost samples; throttled {} times",
        st.lost, st.lost_records, st.lost_samples, st.throttled
    ));
    h
}

/// The user stacks unwound while recording and here, and how many were truncated, why.
fn unwind_lines(st: &ReadStats) -> Vec<String> {
    let mut h = Vec::new();
    if st.recorded_unwound > 0 {
        h.push(format!(
            "user stacks unwound while recording: {}, truncated: {}{}",
            st.recorded_unwound,
            st.recorded_truncated,
            reasons(&st.recorded_reasons)
        ));
    }
    if st.unwound > 0 {
        h.push(format!(
            "user stacks unwound here: {}, truncated: {}{}",
            st.unwound,
            st.truncated,
            reasons(&st.truncated_reasons)
        ));
    }
    if st.fp_cut > 0 {
        h.push(format!(
            "user stacks walked by frame pointers: {}, cut where the walk read no return \
             address: {} (the walk went through code built without frame pointers; the \
             frames from there on are left out)",
            st.fp_walked, st.fp_cut
        ));
    }
    h
}

/// How the frames were named: unique frames, unnamed ones, debug files (`-v`), problems
/// reading symbols, and kernel frames kallsyms hides.
fn naming_lines(cfg: &ReportConfig, agg: &Aggregate, res: &Resolved) -> Vec<String> {
    let mut h = vec![format!(
        "frames: {} unique, {} without a name",
        agg.book.frames.len(),
        res.unknown_frames
    )];
    // Useful when a name is wrong, long on any system with debug packages: behind -v.
    if cfg.verbose && !res.symbolize.debug_files.is_empty() {
        let files: Vec<String> = res
            .symbolize
            .debug_files
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        h.push(format!("debug files used: {}", files.join(", ")));
    }
    if res.symbolize.failures > 0 {
        h.push(format!(
            "{} problems while reading symbols, first: {}",
            res.symbolize.failures,
            res.symbolize
                .failure_messages
                .first()
                .map_or("", String::as_str)
        ));
    }
    if res.kernel_hidden && agg.book.kernel_frames {
        h.push(
            "kernel frames are unnamed: kernel.kptr_restrict hides /proc/kallsyms addresses (run as root or set it to 0)"
                .to_string(),
        );
    }
    h
}

/// What the report left out or could not read: brk shrinks, another session's samples,
/// unparsable or late records, an unfinished recording, a read error.
fn skipped_lines(cfg: &ReportConfig, st: &ReadStats) -> Vec<String> {
    let mut h = Vec::new();
    if cfg.weight == crate::config::report::Weight::Bytes
        && (st.brk_shrunk > 0 || st.brk_unknown_base > 0)
    {
        h.push(format!(
            "brk: the break shrank by {} bytes (not in the stacks); {} brk calls with no earlier break weigh 0",
            st.brk_shrunk, st.brk_unknown_base
        ));
    }
    if st.foreign_skipped > 0 {
        h.push(format!(
            "{} samples skipped: they carried the sample id of another perf session's event",
            st.foreign_skipped
        ));
    }
    if st.malformed > 0 {
        h.push(format!(
            "{} records could not be parsed and were skipped",
            st.malformed
        ));
    }
    if st.late > 0 {
        h.push(format!(
            "{} records came after newer ones and were taken out of time order",
            st.late
        ));
    }
    if let Some(at) = st.unfinished_at {
        let samples: u64 = st.samples.iter().sum();
        h.push(format!(
            "the recording was not finished: read {samples} samples up to byte {at}"
        ));
    }
    if let Some(e) = &st.read_error {
        h.push(format!(
            "warning: {e}; the report covers the records before it"
        ));
    }
    h
}

/// The header, each line wrapped to 80 columns.
pub(crate) fn write_header(out: &mut dyn Write, lines: &[String]) -> std::io::Result<()> {
    for line in lines {
        for l in wrap::comment(line, wrap::COLUMNS) {
            writeln!(out, "{l}")?;
        }
    }
    Ok(())
}

/// The header and the top stacks of each event, most weight first.
pub fn write_text(
    cfg: &ReportConfig,
    file: &PerfDataFile,
    names: &[String],
    agg: &Aggregate,
    res: &mut Resolved,
    out: &mut dyn Write,
) -> Result<()> {
    write_header(out, &header_lines(cfg, file, names, agg, res))?;
    let st = &agg.stats;
    for (i, name) in names.iter().enumerate() {
        if cfg.event.as_ref().is_some_and(|e| e != name) {
            continue;
        }
        if st.kept.get(i).copied().unwrap_or(0) == 0 {
            continue;
        }
        // Merged as interned names: only the top stacks become strings.
        let stacks = super::named::named_stacks(cfg, agg, res, Some(i));
        // Samples, or bytes under --weight bytes.
        let kept: u64 = stacks.total().max(1);
        let sized = agg.sized.get(i).copied().unwrap_or(false);
        let bytes = cfg.weight == Weight::Bytes && sized;
        writeln!(out)?;
        let line = format!(
            "{name}: top {} of {} stacks, most {} first",
            cfg.top.min(stacks.len()),
            stacks.len(),
            match cfg.weight {
                Weight::Bytes if sized => "bytes",
                Weight::Bytes => "samples (no size is known for this event)",
                Weight::Count => "samples",
            }
        );
        write_header(out, &[line])?;
        for (frames, count) in stacks.top(cfg.top) {
            writeln!(out)?;
            let (comm, rest) = frames.split_first().map_or(("", &[][..]), |(c, r)| (*c, r));
            // Leaf first, as BCC's stackcount prints them (unless --reverse asked for root first).
            let ordered: Vec<&&str> = if cfg.reverse {
                rest.iter().collect()
            } else {
                rest.iter().rev().collect()
            };
            for f in ordered {
                writeln!(out, "    {f}")?;
            }
            writeln!(out, "    -                {comm}")?;
            let weight = if bytes {
                human_bytes(count)
            } else {
                count.to_string()
            };
            writeln!(
                out,
                "        {weight} ({:.2}%)",
                100.0 * count as f64 / kept as f64
            )?;
        }
    }
    Ok(())
}
