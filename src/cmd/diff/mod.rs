//! `memperf diff BEFORE AFTER`: the stacks of one event in two profiles (recordings, folded
//! stacks or pprof), joined by name, and the one output chosen: the table of the stacks
//! that changed most, inferno-diff-folded's lines, a differential flame graph or a pprof
//! diff. Recordings are read as `memperf report` reads them (`aggregate`, `output`).

mod load;

use std::path::Path;
use std::sync::{Arc, OnceLock};

use anyhow::{Result, bail};

use crate::config::diff::{DiffConfig, DiffOutput};
use crate::config::report::Weight;
use crate::output::diff::{self, Diff, TableHead, pprof as diff_pprof};
use crate::output::{self, pprof};
use crate::symbolize::Kallsyms;

use load::{Source, Stacks, same_event};

/// Runs `memperf diff`.
pub fn run(cfg: DiffConfig) -> Result<i32> {
    // Read once, for both sides, and only if a recording has kernel frames to name.
    let kallsyms: OnceLock<Option<Arc<Kallsyms>>> = OnceLock::new();
    let space = cfg.space;
    let get_kallsyms = || {
        kallsyms
            .get_or_init(|| {
                (space != crate::config::report::StackSpace::User)
                    .then(|| std::fs::read_to_string("/proc/kallsyms").ok())
                    .flatten()
                    .map(|t| Arc::new(Kallsyms::from_text(&t)))
            })
            .clone()
    };
    let before = load::open(&cfg.before, &cfg, &get_kallsyms)?;
    let after = load::open(&cfg.after, &cfg, &get_kallsyms)?;
    let event = choose_event(&cfg, (&cfg.before, &before), (&cfg.after, &after))?;
    let b = before.stacks(&cfg.before, event.as_deref(), cfg.weight)?;
    let a = after.stacks(&cfg.after, event.as_deref(), cfg.weight)?;
    for (path, side) in [(&cfg.before, &b), (&cfg.after, &a)] {
        for note in &side.notes {
            eprintln!("memperf: note: {}: {note}", path.display());
        }
    }
    let joined = diff::join(&b.stacks, &a.stacks, cfg.normalize);
    write(&cfg, event.as_deref(), (&b, &a), &joined)?;
    Ok(0)
}

/// The event both sides are compared on: `--event`, else the one event each side has
/// samples of; two different events, or several without `--event`, are refused.
fn choose_event(
    cfg: &DiffConfig,
    before: (&Path, &Source),
    after: (&Path, &Source),
) -> Result<Option<String>> {
    let sides = [(before.0, before.1.events()), (after.0, after.1.events())];
    if let Some(want) = &cfg.event {
        for (path, events) in &sides {
            if let Some(events) = events
                && !events.iter().any(|e| same_event(e, want))
            {
                bail!(
                    "no event `{want}` in `{}`; it has: {}",
                    path.display(),
                    if events.is_empty() {
                        "no samples".to_string()
                    } else {
                        events.join(", ")
                    }
                );
            }
        }
        return Ok(Some(want.clone()));
    }
    for (path, events) in &sides {
        if let Some(events) = events
            && events.len() > 1
        {
            bail!(
                "`{}` has samples of {} events ({}); a diff compares one: choose it with --event",
                path.display(),
                events.len(),
                events.join(", ")
            );
        }
    }
    let one = |i: usize| sides[i].1.as_ref().and_then(|e| e.first().cloned());
    match (one(0), one(1)) {
        (Some(b), Some(a)) if !same_event(&b, &a) => bail!(
            "`{}` is a profile of {b} and `{}` of {a}: a diff compares profiles of the same event",
            before.0.display(),
            after.0.display()
        ),
        (b, a) => Ok(b.or(a)),
    }
}

/// Writes the one output the configuration chose.
fn write(
    cfg: &DiffConfig,
    event: Option<&str>,
    (b, a): (&Stacks, &Stacks),
    d: &Diff,
) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let (before, after) = (
        cfg.before.display().to_string(),
        cfg.after.display().to_string(),
    );
    let unit = a.unit;
    let mut notes = Vec::new();
    for (path, side) in [(&before, b), (&after, a)] {
        notes.extend(side.notes.iter().map(|n| format!("{path}: {n}")));
    }
    match &cfg.output {
        DiffOutput::Table => {
            let head = TableHead {
                before: &before,
                after: &after,
                event,
                unit,
                top: cfg.top,
                notes: &notes,
            };
            diff::write_table(d, &head, &mut out)?;
        }
        DiffOutput::Folded => diff::write_folded(d, &mut out)?,
        DiffOutput::Flamegraph {
            output,
            title,
            width,
        } => {
            let ev = event.unwrap_or("samples");
            let flame = output::Flame {
                output,
                title: title
                    .clone()
                    .unwrap_or_else(|| format!("{ev}: {before} -> {after}")),
                subtitle: subtitle(d, unit),
                count_name: unit.to_string(),
                width: *width,
                colors: "mem",
                inverted: false,
                kernel_names: &rustc_hash::FxHashSet::default(),
            };
            output::draw_flamegraph(&flame, &d.folded_lines())?;
        }
        DiffOutput::Pprof(path) => {
            let name = event.map_or("samples", pprof::short);
            let sample_type = match cfg.weight {
                Weight::Bytes => format!("{name}_bytes"),
                Weight::Count => name.to_string(),
            };
            let mut comments = vec![format!(
                "memperf diff: {after} minus {before} (the base, labelled pprof::base=true)"
            )];
            if d.normalized {
                comments.push(format!(
                    "the base normalized: its {} {unit} scaled to {}",
                    d.before_total, d.after_total
                ));
            }
            comments.extend(notes);
            let head = diff_pprof::DiffProfile {
                sample_type: &sample_type,
                unit: if unit == "bytes" { "bytes" } else { "count" },
                comm_first: a.comm_first && b.comm_first,
                comments: &comments,
            };
            pprof::write(&diff_pprof::build(d, &head), path)?;
        }
    }
    std::io::Write::flush(&mut out)?;
    Ok(())
}

/// The flame graph's subtitle: the totals and what the colours say.
fn subtitle(d: &Diff, unit: &str) -> String {
    let norm = if d.normalized { " (normalized)" } else { "" };
    format!(
        "memperf diff: before {}{norm}, after {} {unit}; widths are after's, red grew, blue shrank",
        d.compared_before_total(),
        d.after_total
    )
}
