//! `memperf report` and `memperf script`: open the recording, replay it through the session
//! into the aggregator, then hand the aggregate to the chosen output.

use std::io::IsTerminal;

use anyhow::{Context, Result, bail};

use crate::aggregate::{self, Weigher, weighers};
use crate::config::report::{ReportConfig, ReportOutput, ScriptField, StackSpace, Weight};
use crate::output::{self, header, pprof, script};
use crate::perfdata::PerfDataFile;

/// Runs `memperf report` (and `memperf script`).
pub fn run(cfg: ReportConfig) -> Result<i32> {
    // /proc/kallsyms takes ~80 ms to read: read it while the records are. Script payloads
    // name call sites with it even in user space only.
    let trace_syms =
        matches!(&cfg.output, ReportOutput::Script(f) if f.contains(&ScriptField::Trace));
    let kallsyms = (cfg.space != StackSpace::User || trace_syms).then(|| {
        std::thread::spawn(|| {
            std::fs::read_to_string("/proc/kallsyms")
                .ok()
                .map(|t| std::sync::Arc::new(crate::symbolize::Kallsyms::from_text(&t)))
        })
    });
    let file = crate::input::open(&cfg.input)?;
    let names = file.event_names();
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
    check_weights(&cfg, &file, &names, event_filter)?;
    if let ReportOutput::Script(fields) = &cfg.output {
        let kallsyms = kallsyms.and_then(|h| h.join().ok().flatten());
        return run_script(&cfg, fields, &file, &names, event_filter, kallsyms);
    }
    let progress = progress_bar(&cfg, &file);
    let mut on_round = |offset: u64| {
        if let Some(p) = &progress {
            p.set_position(offset);
        }
    };
    let agg = aggregate::read(&cfg, &file, &names, event_filter, None, &mut on_round)
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
    let one_event = matches!(
        cfg.output,
        ReportOutput::Folded | ReportOutput::Flamegraph(_)
    );
    if one_event && event_filter.is_none() && !cfg.all_events && with_samples.len() > 1 {
        let list: Vec<&str> = with_samples.iter().map(|&i| names[i].as_str()).collect();
        bail!(
            "`{}` has samples of {} events ({}); folded stacks and flame graphs mix no events: choose one with --event, or draw each under a root frame of its name with --all-events",
            cfg.input,
            list.len(),
            list.join(", ")
        );
    }
    let kallsyms = kallsyms.and_then(|h| h.join().ok().flatten());
    let resolved = output::resolve(&cfg, &agg, kallsyms);
    let ctx = Written {
        cfg: &cfg,
        file: &file,
        names: &names,
        agg: &agg,
        event: event_filter.or(with_samples.first().copied()),
    };
    write(&ctx, resolved)?;
    Ok(0)
}

/// What every output is written from.
struct Written<'a> {
    cfg: &'a ReportConfig,
    file: &'a PerfDataFile,
    names: &'a [String],
    agg: &'a aggregate::Aggregate,
    /// The event a flame graph draws.
    event: Option<usize>,
}

/// Writes the one output the configuration chose.
fn write(w: &Written<'_>, mut resolved: output::Resolved) -> Result<()> {
    let (cfg, agg, names) = (w.cfg, w.agg, w.names);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    match &cfg.output {
        ReportOutput::Pprof(path) => {
            let weighers = weighers(w.file, names, cfg.weight_field.as_deref());
            let sample_time = w.file.features.sample_time;
            let mut profile = pprof::build(cfg, sample_time, names, &weighers, agg, &resolved);
            // When and where the file was recorded, beside what it lost.
            let when = header::recorded(&cfg.input, w.file);
            if !when.is_empty() {
                pprof::add_comment(&mut profile, &when);
            }
            pprof::write(&profile, path)?;
        }
        // Streamed while the records are read (run_script).
        ReportOutput::Script(_) => {}
        ReportOutput::By(by) => output::write_by(cfg, *by, names, agg, &mut out)?,
        ReportOutput::Timeline(interval) => {
            output::write_timeline(cfg, *interval, names, agg, &mut out)?
        }
        ReportOutput::Flamegraph(fg) => {
            output::write_flamegraph(cfg, fg, w.file, names, w.event, agg, &resolved)?
        }
        ReportOutput::Folded => {
            output::write_folded(cfg, names, w.event, agg, &mut resolved, &mut out)?;
            std::io::Write::flush(&mut out)?;
            header::note_losses(&agg.stats);
        }
        ReportOutput::Text => output::write_text(cfg, w.file, names, agg, &mut resolved, &mut out)?,
        ReportOutput::CallTree(..) => {
            output::write_call_tree(cfg, w.file, names, agg, &resolved, &mut out)?
        }
    }
    std::io::Write::flush(&mut out)?;
    Ok(())
}

/// `memperf script`: each kept sample is printed as the session hands it on, so memory
/// holds the unique frames' names, not the samples.
fn run_script(
    cfg: &ReportConfig,
    fields: &[ScriptField],
    file: &PerfDataFile,
    names: &[String],
    event_filter: Option<usize>,
    kallsyms: Option<std::sync::Arc<crate::symbolize::Kallsyms>>,
) -> Result<i32> {
    check_script_fields(cfg, fields, file, names, event_filter)?;
    let tables = script::ScriptTables::new(file);
    // One kallsyms table, shared by the symbolizer and the payloads' call sites.
    let trace = fields.contains(&ScriptField::Trace);
    let input = script::ScriptInput {
        fields,
        file,
        names,
        kallsyms: kallsyms.as_deref().filter(|_| trace),
    };
    let resolver = output::Resolver::new(output::NameOptions::of(cfg), kallsyms.clone());
    let out = Box::new(std::io::BufWriter::new(std::io::stdout().lock()));
    let mut writer = script::ScriptWriter::new(input, &tables, resolver, out);
    let agg = aggregate::read(
        cfg,
        file,
        names,
        event_filter,
        Some(&mut writer),
        &mut |_| {},
    )
    .context("failed to read the records")?;
    header::warn_read_error(&agg.stats);
    let notes = writer.finish()?;
    for note in notes {
        eprintln!("memperf: note: {note}");
    }
    header::note_losses(&agg.stats);
    Ok(0)
}

/// A memory field needs its sample bit in the events printed, as perf script says.
fn check_script_fields(
    cfg: &ReportConfig,
    fields: &[ScriptField],
    file: &PerfDataFile,
    names: &[String],
    event_filter: Option<usize>,
) -> Result<()> {
    use crate::abi::{PERF_SAMPLE_DATA_SRC, PERF_SAMPLE_WEIGHT, PERF_SAMPLE_WEIGHT_STRUCT};
    let needs = [
        (ScriptField::DataSrc, "data_src", PERF_SAMPLE_DATA_SRC),
        (
            ScriptField::Weight,
            "weight",
            PERF_SAMPLE_WEIGHT | PERF_SAMPLE_WEIGHT_STRUCT,
        ),
        (ScriptField::InsLat, "ins_lat", PERF_SAMPLE_WEIGHT_STRUCT),
    ];
    for (field, name, bits) in needs {
        if !fields.contains(&field) {
            continue;
        }
        let without: Vec<&str> = (0..file.events.len())
            .filter(|&i| event_filter.is_none_or(|e| e == i))
            .filter(|&i| file.events[i].attr.sample_type & bits == 0)
            .map(|i| names.get(i).map_or("?", String::as_str))
            .collect();
        if !without.is_empty() {
            bail!(
                "cannot print `{name}`: the samples of {} in `{}` do not carry it (recordings of `memperf mem record` and `perf mem record` do)",
                without.join(", "),
                cfg.input
            );
        }
    }
    Ok(())
}

/// `--weight bytes` needs a size for every event it weighs.
fn check_weights(
    cfg: &ReportConfig,
    file: &PerfDataFile,
    names: &[String],
    event_filter: Option<usize>,
) -> Result<()> {
    if cfg.weight != Weight::Bytes {
        return Ok(());
    }
    let w = weighers(file, names, cfg.weight_field.as_deref());
    if let Some(field) = &cfg.weight_field {
        let formats = crate::aggregate::weigh::event_formats(file);
        if !formats.iter().any(|f| f.field(field).is_some()) {
            let mut known: Vec<String> = formats
                .iter()
                .flat_map(|f| f.fields.iter().map(|x| x.name.clone()))
                .filter(|n| !n.starts_with("common_"))
                .collect();
            known.sort();
            known.dedup();
            anyhow::bail!(
                "--weight-field {field}: no event of this recording has a field `{field}`; its fields: {}",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            );
        }
    }
    let no_size: Vec<&str> = (0..names.len())
        .filter(|&i| event_filter.is_none_or(|e| e == i))
        .filter(|&i| matches!(w[i], Weigher::None))
        .map(|i| names[i].as_str())
        .collect();
    let selected = (0..names.len())
        .filter(|&i| event_filter.is_none_or(|e| e == i))
        .count();
    if !no_size.is_empty() && no_size.len() < selected {
        // As --by does: the events with a size are weighed, the others counted.
        eprintln!(
            "memperf: note: --weight bytes: no size is known for {}; its samples are counted",
            no_size.join(", ")
        );
    } else if !no_size.is_empty() {
        bail!(
            "--weight bytes: no size is known for {}; sizes exist for fault events, \
             syscalls:sys_enter_brk/mmap/munmap, kmem:kmalloc, kmem:kmem_cache_alloc and \
             kmem:mm_page_alloc (choose one with --event)",
            no_size.join(", ")
        );
    }
    Ok(())
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
