//! Flame graphs, drawn by inferno: report's (one event, or every event under a root frame
//! of its own) and the tools'.

use anyhow::{Context, Result};

use super::fit;
use super::shape::{Shaped, folded_lines, shaped_stacks};
use super::{Resolved, create_output_file, header, human_bytes};
use crate::aggregate::Aggregate;
use crate::config::report::{FlameConfig, ReportConfig, Weight};
use crate::perfdata::PerfDataFile;

/// The default count name of a flame graph for an event.
fn default_countname(event: &str) -> &'static str {
    match event {
        "page-faults" | "faults" | "minor-faults" | "major-faults" => "pages",
        e if e.contains(':') => "calls",
        _ => "samples",
    }
}

/// Draws the stacks of `event` (or of every event, `--all-events`) as a flame graph.
pub fn write_flamegraph(
    cfg: &ReportConfig,
    fg: &FlameConfig,
    file: &PerfDataFile,
    names: &[String],
    event: Option<usize>,
    agg: &Aggregate,
    res: &Resolved,
) -> Result<()> {
    let shaped = shaped_stacks(cfg, agg, res, names, event);
    note_unsized(&shaped, names);
    let drawn = Drawn::of(cfg, agg, names, &shaped);
    let command = if file.features.cmdline.is_empty() {
        cfg.input.to_string()
    } else {
        file.features.cmdline.join(" ")
    };
    let title = fg
        .title
        .clone()
        .unwrap_or_else(|| format!("{}: {command}", drawn.what));
    let subtitle = fg
        .subtitle
        .clone()
        .unwrap_or_else(|| subtitle(cfg, file, agg, &shaped, &drawn));
    let count_name = fg.countname.clone().unwrap_or_else(|| drawn.unit.clone());
    let flame = Flame {
        output: &fg.output,
        title,
        subtitle,
        count_name,
        width: fg.width,
        colors: &fg.colors,
        inverted: cfg.reverse,
        kernel_names: &res.kernel_names,
    };
    draw_flamegraph(&flame, &folded_lines(&shaped))
}

/// `--all-events --weight bytes` leaves out the events without a size, and says so.
pub(crate) fn note_unsized(shaped: &Shaped, names: &[String]) {
    if shaped.no_size.is_empty() {
        return;
    }
    let list: Vec<&str> = shaped
        .no_size
        .iter()
        .filter_map(|&e| names.get(e).map(String::as_str))
        .collect();
    eprintln!(
        "memperf: note: --weight bytes: left out {} (no size is known; draw it apart with --event)",
        list.join(", ")
    );
}

/// What a graph draws: its events' name, its unit and its totals.
struct Drawn {
    /// The event's name, or `N events` under `--all-events`.
    what: String,
    /// `bytes` when every sample weighs its bytes, else the event's count name.
    unit: String,
    bytes: bool,
    weight: u64,
    samples: u64,
}

impl Drawn {
    fn of(cfg: &ReportConfig, agg: &Aggregate, names: &[String], shaped: &Shaped) -> Drawn {
        let sized = |e: usize| agg.sized.get(e).copied().unwrap_or(false);
        let bytes = cfg.weight == Weight::Bytes
            && !shaped.events.is_empty()
            && shaped.events.iter().all(|&e| sized(e));
        let what = match shaped.events.as_slice() {
            [e] if !cfg.all_events => names.get(*e).cloned().unwrap_or_default(),
            [] if !cfg.all_events => "samples".to_string(),
            all => format!("{} events", all.len()),
        };
        let unit = match shaped.events.as_slice() {
            _ if bytes => "bytes",
            [e] => default_countname(names.get(*e).map_or("", String::as_str)),
            _ => "samples",
        };
        Drawn {
            what,
            unit: unit.to_string(),
            bytes,
            weight: shaped.stacks.values().sum(),
            samples: shaped
                .events
                .iter()
                .map(|&e| agg.stats.kept.get(e).copied().unwrap_or(0))
                .sum(),
        }
    }
}

/// The default subtitle: what is drawn, then what was lost, truncated and cut, then when
/// and where it was recorded, most important first, `; `-separated so that
/// [`draw_flamegraph`] can leave out the last parts where the width has no room for them.
fn subtitle(
    cfg: &ReportConfig,
    file: &PerfDataFile,
    agg: &Aggregate,
    shaped: &Shaped,
    d: &Drawn,
) -> String {
    let st = &agg.stats;
    let mut parts = vec![if d.bytes {
        format!(
            "memperf: {} in {} samples of {}",
            human_bytes(d.weight),
            d.samples,
            d.what
        )
    } else {
        format!("memperf: {} samples of {}", d.weight, d.what)
    }];
    parts.push(format!(
        "{} lost, throttled {} times",
        crate::session::lost_once(st.lost, st.lost_samples),
        st.throttled
    ));
    let t = header::events_truncation(st, &shaped.events);
    if t.unwound > 0 {
        let whose = if t.all_events { " (all events')" } else { "" };
        parts.push(format!(
            "{} of {} user stacks{whose} truncated",
            t.truncated, t.unwound
        ));
    }
    if let Some(max) = cfg.max_depth
        && shaped.cut_stacks > 0
    {
        parts.push(format!(
            "{} stacks cut below depth {max} ({})",
            shaped.cut_stacks,
            if d.bytes {
                human_bytes(shaped.cut_weight)
            } else {
                format!("{} {}", shaped.cut_weight, d.unit)
            }
        ));
    }
    let when = header::recorded(&cfg.input, file);
    if !when.is_empty() {
        parts.push(when);
    }
    parts.push("kernel frames in orange".to_string());
    parts.join("; ")
}

/// What a flame graph is drawn with, whoever drew the stacks.
pub struct Flame<'a> {
    /// `-` for standard output.
    pub output: &'a std::path::Path,
    pub title: String,
    pub subtitle: String,
    pub count_name: String,
    pub width: Option<usize>,
    /// inferno's palette name (`mem`, `hot`...).
    pub colors: &'a str,
    /// Leaf-first stacks hanging from the top: an icicle graph of callers.
    pub inverted: bool,
    /// Frame names drawn in orange, as kernel code.
    pub kernel_names: &'a rustc_hash::FxHashSet<String>,
}

/// Draws folded `lines` (`a;b;c N`, sorted) as a flame graph with inferno.
pub fn draw_flamegraph(flame: &Flame<'_>, lines: &[String]) -> Result<()> {
    use inferno::flamegraph::{self, Direction, Options, Palette, color::Color, color::PaletteMap};
    use std::str::FromStr;

    let mut palette_map = PaletteMap::default();
    for k in flame.kernel_names {
        palette_map.insert(
            k,
            Color {
                r: 230,
                g: 130,
                b: 40,
            },
        );
    }
    let mut opts = Options::default();
    opts.colors = Palette::from_str(flame.colors).map_err(|e| anyhow::anyhow!(e))?;
    opts.hash = true;
    opts.deterministic = true;
    opts.palette_map = Some(&mut palette_map);
    // inferno draws one line of each at a fixed size, centred, and clips what is wider
    // than the image: both are made to fit, and the whole subtitle is kept in the notes.
    let width = flame.width.unwrap_or(fit::DEFAULT_WIDTH);
    opts.title = fit::title(&flame.title, width);
    let subtitle = fit::subtitle(&flame.subtitle, width);
    if subtitle != flame.subtitle {
        // `--` may not appear in an XML comment.
        opts.notes = flame.subtitle.replace("--", "- -");
    }
    opts.subtitle = Some(subtitle);
    opts.count_name = flame.count_name.clone();
    opts.image_width = flame.width;
    if flame.inverted {
        opts.direction = Direction::Inverted;
    }
    let lines = lines.iter().map(String::as_str);
    let output = flame.output;
    if output.as_os_str() == "-" {
        let stdout = std::io::stdout();
        flamegraph::from_lines(&mut opts, lines, std::io::BufWriter::new(stdout.lock()))
            .context("failed to draw the flame graph")?;
    } else {
        let f = create_output_file(output)
            .with_context(|| format!("failed to create `{}`", output.display()))?;
        flamegraph::from_lines(&mut opts, lines, std::io::BufWriter::new(f))
            .with_context(|| format!("failed to write `{}`", output.display()))?;
    }
    Ok(())
}
