//! `memperf report` and `memperf script`: open the recording, replay it through the session
//! into the aggregator, then hand the aggregate to the chosen output.

mod input;

use std::io::IsTerminal;

use anyhow::{Context, Result, bail};

use crate::aggregate::{self, Weigher, weighers};
use crate::cli::{ReportConfig, ScriptField, StackSpace, Weight};
use crate::output::{self, header, pprof, script};
use crate::perfdata::PerfDataFile;

/// Runs `memperf report`.
pub fn run(cfg: ReportConfig) -> Result<i32> {
    // /proc/kallsyms takes ~80 ms to read: read it while the records are. Script payloads
    // name call sites with it even in user space only.
    let trace_syms = cfg
        .script
        .as_ref()
        .is_some_and(|f| f.contains(&ScriptField::Trace));
    let kallsyms = (cfg.space != StackSpace::User || trace_syms).then(|| {
        std::thread::spawn(|| {
            std::fs::read_to_string("/proc/kallsyms")
                .ok()
                .map(|t| std::sync::Arc::new(crate::symbolize::Kallsyms::from_text(&t)))
        })
    });
    let file = input::open(&cfg.input)?;
    let names = event_names(&file);
    let event_filter = match &cfg.event {
        Some(want) => Some(names.iter().position(|n| n == want).with_context(|| {
            format!(
                "no event `{want}` in `{}`; it has: {}",
                cfg.input,
                names.join(", ")
            )
        })?),
        None => None,
    };
    if cfg.weight == Weight::Bytes {
        let w = weighers(&file, &names);
        let no_size: Vec<&str> = (0..names.len())
            .filter(|&i| event_filter.is_none_or(|e| e == i))
            .filter(|&i| matches!(w[i], Weigher::None))
            .map(|i| names[i].as_str())
            .collect();
        if !no_size.is_empty() {
            bail!(
                "--weight bytes: no size is known for {}; sizes exist for fault events, \
                 syscalls:sys_enter_brk/mmap/munmap, kmem:kmalloc, kmem:kmem_cache_alloc and \
                 kmem:mm_page_alloc (choose one with --event)",
                no_size.join(", ")
            );
        }
    }
    let progress = progress_bar(&cfg, &file);
    let mut on_round = |offset: u64| {
        if let Some(p) = &progress {
            p.set_position(offset);
        }
    };
    let agg = aggregate::read(&cfg, &file, &names, event_filter, &mut on_round)
        .context("failed to read the records")?;
    if let Some(p) = progress {
        p.finish_and_clear();
    }
    if !cfg.is_text_report() {
        header::warn_read_error(&agg.stats);
    }
    let with_samples: Vec<usize> = (0..names.len())
        .filter(|&i| agg.stats.kept.get(i).copied().unwrap_or(0) > 0)
        .collect();
    if (cfg.folded || cfg.flamegraph.is_some()) && event_filter.is_none() && with_samples.len() > 1
    {
        let list: Vec<&str> = with_samples.iter().map(|&i| names[i].as_str()).collect();
        bail!(
            "`{}` has samples of {} events ({}); folded stacks and flame graphs mix no events: choose one with --event",
            cfg.input,
            list.len(),
            list.join(", ")
        );
    }
    let kallsyms = kallsyms.and_then(|h| h.join().ok().flatten());
    // One table, shared with the symbolizer.
    let payload_syms = kallsyms.as_ref().filter(|_| trace_syms).cloned();
    let mut resolved = output::resolve(&cfg, &agg, kallsyms);
    if let Some(path) = &cfg.pprof {
        let mut profile = pprof::build(
            &cfg,
            file.features.sample_time,
            &names,
            &weighers(&file, &names),
            &agg,
            &resolved,
        );
        // When and where the file was recorded, beside what it lost.
        let when = header::recorded(&cfg.input, &file);
        if !when.is_empty() {
            pprof::add_comment(&mut profile, &when);
        }
        pprof::write(&profile, path)?;
        return Ok(0);
    }
    if let Some(fields) = &cfg.script {
        let input = script::ScriptInput {
            fields,
            file: &file,
            names: &names,
            kallsyms: payload_syms.as_deref(),
        };
        script::print(&input, &agg, &resolved)?;
        header::note_losses(&agg.stats);
        return Ok(0);
    }
    if cfg.by.is_some() || cfg.timeline.is_some() {
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::new(stdout.lock());
        if let Some(by) = cfg.by {
            output::write_by(&cfg, by, &names, &agg, &mut out)?;
        } else if let Some(interval) = cfg.timeline {
            output::write_timeline(&cfg, interval, &names, &agg, &mut out)?;
        }
        std::io::Write::flush(&mut out)?;
        return Ok(0);
    }
    if let Some(fg) = &cfg.flamegraph {
        let event = event_filter.or(with_samples.first().copied());
        output::write_flamegraph(&cfg, fg, &file, &names, event, &agg, &resolved)?;
        return Ok(0);
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if cfg.folded {
        output::write_folded(&cfg, &agg, &mut resolved, &mut out)?;
    } else {
        output::write_text(&cfg, &file, &names, &agg, &mut resolved, &mut out)?;
    }
    std::io::Write::flush(&mut out)?;
    if cfg.folded {
        header::note_losses(&agg.stats);
    }
    Ok(0)
}

/// Event names from the file's EVENT_DESC, else generic ones.
pub fn event_names(file: &PerfDataFile) -> Vec<String> {
    (0..file.events.len())
        .map(|i| {
            file.features
                .event_names
                .get(i)
                .filter(|n| !n.is_empty())
                .cloned()
                .or_else(|| Some(file.events[i].name.clone()).filter(|n| !n.is_empty()))
                .unwrap_or_else(|| format!("event{i}"))
        })
        .collect()
}

fn progress_bar(cfg: &ReportConfig, file: &PerfDataFile) -> Option<indicatif::ProgressBar> {
    if cfg.quiet || !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(file.data_end());
    bar.set_style(
        indicatif::ProgressStyle::with_template("reading {bar:40} {bytes}/{total_bytes} {eta}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    Some(bar)
}
