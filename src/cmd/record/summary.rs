//! The start line and the end-of-run summary of `memperf record` (stderr).

use std::time::Duration;

use crate::config::record::{CallGraph, RecordConfig, Target};
use crate::session::{ReadDelay, RemapStats, Session, SessionStats};
use crate::unwind::UnwindStats;

use crate::live::drain::{self, DrainStats};
use crate::live::open::Opened;

/// Printed once events are live; tests and scripts wait for it.
pub fn print_start(cfg: &RecordConfig, opened: &Opened, child: Option<i32>) {
    let names = crate::live::remap::names_shown(&opened.events);
    let what = match &cfg.target {
        Target::SystemWide => format!("all processes on {} CPU(s)", cfg.cpus.len()),
        Target::Pids(p) => format!("pid {}", join(p)),
        Target::Tids(t) => format!("tid {}", join(t)),
        Target::Command => format!("command pid {}", child.unwrap_or(0)),
    };
    crate::output::wrap::eprint(&format!(
        "memperf: recording {} on {what} into {} (Ctrl-C to stop)",
        names.join(","),
        cfg.output.display()
    ));
    // Said here, where the user who started the recording sees it, not in the summary.
    for n in crate::sys::cgroup::outermost(&cfg.cgroups).1 {
        crate::output::wrap::eprint(&format!("memperf: note: {n}"));
    }
}

fn join(ids: &[u32]) -> String {
    ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// Everything the end-of-run summary reports.
pub struct EndInfo<'a> {
    pub cfg: &'a RecordConfig,
    pub session: &'a Session,
    pub drain: &'a DrainStats,
    pub notes: &'a [String],
    /// The events' names as opened.
    pub names: &'a [String],
    pub elapsed: Duration,
    pub file_bytes: u64,
    pub data_bytes: u64,
    pub reason: String,
    pub pages: Option<usize>,
    /// The reader could not raise its priority (`live::priority`).
    pub priority_refused: bool,
}

/// Formats the summary lines (kept apart from printing for tests).
pub fn summary_lines(info: &EndInfo<'_>) -> Vec<String> {
    let st = info.session.stats();
    let total: u64 = st.samples.iter().sum();
    let mut lines = vec![format!(
        "memperf: wrote {total} samples in {:.2} s to {} ({} bytes{}); stopped: {}",
        info.elapsed.as_secs_f64(),
        info.cfg.output.display(),
        info.file_bytes,
        drain::bytes_per_sample(info.data_bytes, total)
            .map(|b| format!(", {b} bytes per sample"))
            .unwrap_or_default(),
        info.reason
    )];
    for (name, n) in info.names.iter().zip(&st.samples) {
        lines.push(format!("  {name:<28} {n} samples"));
    }
    if st.excluded_self > 0 {
        lines.push(format!(
            "  left out {} samples of memperf itself (--include-self keeps them)",
            st.excluded_self
        ));
    }
    lines.extend(unwind_lines(info, st));
    lines.extend(loss_lines(st));
    lines.extend(skipped_lines(info, st));
    lines.extend(held_lines(info.session));
    for note in info.notes {
        lines.push(format!("  note: {note}"));
    }
    lines.extend(remap_line(info.session));
    lines.extend(dropped_warning(info, st));
    lines
}

/// How many user stacks were unwound and truncated, and why.
fn unwind_lines(info: &EndInfo<'_>, st: &SessionStats) -> Vec<String> {
    let mut lines = Vec::new();
    if st.unwound == 0 {
        return lines;
    }
    let pct = 100.0 * st.truncated as f64 / st.unwound as f64;
    lines.push(format!(
        "  unwound {} user stacks, {} truncated ({pct:.1}%)",
        st.unwound, st.truncated
    ));
    let Some(u) = info.session.unwinders() else {
        return lines;
    };
    let s = u.stats();
    if s.truncated.total() > 0 {
        lines.push(format!("    truncated because: {}", s.truncated));
    }
    lines.extend(copy_end_lines(&s, st.unwound, info.cfg));
    lines.extend(read_delay_line(&s, &st.read_delay));
    if s.elf_load_failures > 0 {
        let paths: Vec<String> = s
            .elf_load_failure_paths
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        lines.push(format!(
            "    {} executable mappings could not be read: {}",
            s.elf_load_failures,
            paths.join(", ")
        ));
    }
    if s.modules_without_cfi > 0 {
        lines.push(format!(
            "    {} binaries have no unwind tables (frame pointers used there)",
            s.modules_without_cfi
        ));
    }
    lines.extend(jit_cfi_lines(&s));
    lines
}

/// Events lost, in all and by CPU.
fn loss_lines(st: &SessionStats) -> Vec<String> {
    let mut lines = vec![format!(
        "  lost {} events in {} LOST records, {} lost samples, throttled {} times",
        st.lost, st.lost_records, st.lost_samples, st.throttled
    )];
    for (cpu, l) in &st.per_cpu {
        let cpu = if *cpu == u32::MAX {
            "?".to_string()
        } else {
            cpu.to_string()
        };
        lines.push(format!(
            "    cpu {cpu}: lost {} events, {} lost samples, throttled {} times",
            l.lost, l.lost_samples, l.throttled
        ));
    }
    lines
}

/// What was read but skipped: samples of another session's event, malformed records, and
/// bytes past broken ring framing.
fn skipped_lines(info: &EndInfo<'_>, st: &SessionStats) -> Vec<String> {
    let mut lines = Vec::new();
    if st.foreign_ids > 0 {
        lines.push(format!(
            "  {} samples carried the sample id of another perf session's event (the kernel \
             gives software events and tracepoints that fire together the first one's id and \
             time): {} attributed by their tracepoint or as the only software event, {} skipped; \
             record one software event per session, or start memperf after the other session, to \
             keep them all",
            st.foreign_ids,
            st.foreign_attributed,
            st.foreign_ids - st.foreign_attributed
        ));
    }
    if st.malformed > 0 {
        lines.push(format!("  {} malformed records skipped", st.malformed));
    }
    if info.drain.late > 0 {
        lines.push(format!(
            "  {} records handed on after a newer one (of another ring, written more than {} us \
             after their time, 2 ms when the rings were quiet; of their own, overtaken by an \
             interrupt's; or after a round that handed on everything: a ring more than half \
             full, or the last)",
            info.drain.late,
            crate::live::drain::IN_FLIGHT_NS / 1000
        ));
    }
    if info.drain.corrupt_rings > 0 {
        lines.push(format!(
            "  ring buffer framing broke {} times: {} bytes after the broken headers were skipped",
            info.drain.corrupt_rings, info.drain.corrupt_bytes
        ));
    }
    lines
}

/// The mremap moves written as mappings at their new place, when there were any.
fn remap_line(session: &Session) -> Option<String> {
    let r: RemapStats = session.remap_stats()?;
    (r.applied + r.failed + r.unfollowed > 0).then(|| {
        format!(
            "  mremap: {} moves written as MMAP2 records of the mappings at their new place ({} \
             calls failed, {} not followed: enter or exit unseen, or no mapping known at the \
             old address)",
            r.applied, r.failed, r.unfollowed
        )
    })
}

/// The warning when the kernel dropped events, with what to change.
fn dropped_warning(info: &EndInfo<'_>, st: &SessionStats) -> Option<String> {
    if st.lost == 0 && st.lost_samples == 0 {
        return None;
    }
    let pages = info.pages.map_or_else(String::new, |p| {
        let mib = (p * crate::sys::page_size()) as f64 / (1 << 20) as f64;
        format!(" than the {p} pages ({mib:.1} MiB) per CPU of this run")
    });
    let refused = if info.priority_refused {
        "; the reader kept its default priority (a lower nice value needs CAP_SYS_NICE), \
         so busy traced threads filled the rings faster than it emptied them"
    } else {
        ""
    };
    Some(format!(
        "memperf: warning: the kernel dropped {} events because the ring buffers were full; \
         use a bigger -m{pages}, a larger -c period, or a smaller stack copy (--call-graph dwarf,4096){refused}",
        st.lost + st.lost_samples
    ))
}

/// Prints the summary on stderr.
pub fn print_end(info: &EndInfo<'_>) {
    for line in summary_lines(info) {
        crate::output::wrap::eprint(&line);
    }
}

/// What memperf held of the processes it saw (the bound README's "Memory" states): the most
/// processes at once, those dropped without an EXIT record, and the files whose unwind
/// tables it kept.
fn held_lines(session: &Session) -> Vec<String> {
    let procs = session.procs();
    let h = procs.held();
    if h.peak == 0 {
        return Vec::new();
    }
    let mut line = format!(
        "  held the state of at most {} processes at once ({} at the end)",
        h.peak,
        procs.held_now()
    );
    if h.reaped > 0 {
        line.push_str(&format!(
            "; {} exited without an EXIT record (lost, or before the start): dropped once /proc \
             showed them gone",
            h.reaped
        ));
    }
    let mut lines = vec![line];
    if let Some(u) = session.unwinders() {
        let s = u.stats();
        lines.push(format!(
            "  held the unwind tables of {} files ({:.1} MiB; {} evicted, least recently used \
             first, past {} MiB of files no process maps)",
            u.cached_files(),
            s.elf_cache_bytes as f64 / (1 << 20) as f64,
            s.elf_cache_evictions,
            u.elf_unused_budget() >> 20
        ));
    }
    if h.files_left_out > 0 {
        lines.push(format!(
            "  {} files of exited processes left out of the build-id list (at most {} kept)",
            h.files_left_out,
            crate::session::EXITED_FILES_MAX
        ));
    }
    if h.names_forgotten > 0 {
        lines.push(format!(
            "  {} names of exited processes forgotten (the latest {} kept)",
            h.names_forgotten,
            crate::session::EXITED_NAMES_MAX
        ));
    }
    lines
}

/// JIT functions unwound by their jitdump's unwind info, those left out, and the dumps that
/// could not be read to their end.
fn jit_cfi_lines(s: &UnwindStats) -> Vec<String> {
    let mut lines = Vec::new();
    if s.jit_cfi_functions + s.jit_cfi_left_out > 0 {
        let left_out = if s.jit_cfi_left_out > 0 {
            format!(
                "; {} left out (at most {} MiB or {} functions per process)",
                s.jit_cfi_left_out,
                crate::unwind::JIT_CFI_MAX_BYTES >> 20,
                crate::unwind::JIT_CFI_MAX_FUNCTIONS
            )
        } else {
            String::new()
        };
        lines.push(format!(
            "    {} JIT functions unwound by their jitdump's unwind info ({} bytes of CFI, {} \
             reads of the dumps){left_out}",
            s.jit_cfi_functions, s.jit_cfi_bytes, s.jit_dump_reads
        ));
    }
    if let Some(first) = &s.jit_dump_first_problem {
        lines.push(format!(
            "    {} jitdump files not read to their end, first: {first}",
            s.jit_dump_problems
        ));
    }
    lines
}

/// How long after they were sampled the stacks past their copy were unwound (and so read
/// from the live process), one line.
fn read_delay_line(s: &UnwindStats, d: &ReadDelay) -> Option<String> {
    if s.cut_at_copy_end == 0 {
        return None;
    }
    let ms = |q: f64| Some(d.quantile(q)? as f64 / 1e6);
    let (p50, p99) = (ms(0.5)?, ms(0.99)?);
    Some(format!(
        "      read {p50:.1} ms after they were sampled (median; 99% within {p99:.1} ms, the \
         longest {:.1} ms)",
        d.max_ns as f64 / 1e6
    ))
}

/// The checks that rejected recovered frames, as ` (N copy changed, M wrong callee)`.
fn rejections(s: &UnwindStats) -> String {
    let named: Vec<String> = s
        .rejected
        .named()
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(name, n)| format!("{n} {}", name.replace('_', " ")))
        .collect();
    if named.is_empty() {
        String::new()
    } else {
        format!(" ({})", named.join(", "))
    }
}

/// What became of the stacks the copy did not hold to their end: how many the live process
/// finished, and, when more than 5% of all stacks were cut there, why and the copy size
/// that would have held them (or that none would).
fn copy_end_lines(s: &UnwindStats, unwound: u64, cfg: &RecordConfig) -> Vec<String> {
    let mut lines = Vec::new();
    if s.cut_at_copy_end == 0 {
        return lines;
    }
    let copy = match cfg.widest_call_graph() {
        CallGraph::Dwarf { stack_bytes } => stack_bytes,
        _ => 0,
    };
    let copy_words = if cfg.stack_auto {
        "their stack copy".to_string()
    } else {
        format!("the {copy}-byte stack copy")
    };
    lines.push(format!(
        "    {} stacks went past {copy_words}: {} finished from the live process \
         ({} frames, marked {} in the report and script; {} calls confirmed, {} through a \
         register), {} could not be read (the thread had exited), {} rejected by validation{}",
        s.cut_at_copy_end,
        s.recovered,
        s.recovered_frames,
        crate::output::RECOVERED,
        s.recovered_confirmed,
        s.recovered_indirect,
        s.recovery_unreadable,
        s.recovery_rejected,
        rejections(s),
    ));
    if s.cut_at_copy_end * 20 > unwound {
        let pct = 100.0 * s.cut_at_copy_end as f64 / unwound.max(1) as f64;
        let short = s.cut_short_copy;
        if short > 0 {
            lines.push(format!(
                "    {short} stacks ended early in the copy: the kernel stops copying at the \
                 first stack page the thread never touched (a large, partly used buffer on the \
                 stack); no copy size helps there, the live process finishes them while the \
                 thread is still in those frames"
            ));
        }
        if short < s.cut_at_copy_end {
            match s.copy_size_needed() {
                // Some were not finished from the live process: their depth is not known.
                Some(_) if s.cut_unmeasured > 0 => lines.push(format!(
                    "    {pct:.1}% of stacks went past the copy; {} of them the live process \
                     could not finish (the thread had exited or moved on), so how deep they \
                     go is not known, at least {} bytes: a larger copy holds more of them, \
                     --call-graph dwarf,65528 the most",
                    s.cut_unmeasured, s.cut_unmeasured_need
                )),
                Some(size) if size > u64::from(copy) => lines.push(format!(
                    "    {pct:.1}% of stacks went past the copy: --call-graph dwarf,{size} would \
                     have held them all"
                )),
                Some(_) => {}
                None => lines.push(format!(
                    "    {pct:.1}% of stacks went past the copy, some deeper than the kernel's \
                     largest (65528 bytes; the deepest needed {} bytes): the live process \
                     finishes them",
                    s.copy_needed_max
                )),
            }
        }
    }
    lines
}
