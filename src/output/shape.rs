//! The stacks folded output and flame graphs draw: one event's, or every event's under a
//! root frame named after it (`--all-events`), each cut at `--max-depth` frames.

use std::collections::BTreeMap;

use super::{Resolved, named};
use crate::aggregate::Aggregate;
use crate::config::report::{ReportConfig, Weight};

/// The frame that stands for the frames cut below `--max-depth`.
pub const CUT_FRAME: &str = "[deeper frames cut]";

/// Named stacks, root first (the event's name, with `--all-events`, then the command), and
/// what shaping them left out.
pub struct Shaped {
    pub stacks: BTreeMap<Vec<String>, u64>,
    /// The events drawn.
    pub events: Vec<usize>,
    /// Events left out of an `--all-events` graph weighed in bytes: they have no size.
    pub no_size: Vec<usize>,
    /// Unique stacks cut at `--max-depth`, and the samples (or bytes) under them.
    pub cut_stacks: u64,
    pub cut_weight: u64,
}

/// The events `--all-events` draws: every one with samples kept; under `--weight bytes`,
/// those without a size are left out (a graph in bytes has no room for counts).
fn events_drawn(
    cfg: &ReportConfig,
    agg: &Aggregate,
    event: Option<usize>,
) -> (Vec<usize>, Vec<usize>) {
    if !cfg.all_events {
        return (event.into_iter().collect(), Vec::new());
    }
    let with_samples =
        (0..agg.stats.kept.len()).filter(|&i| agg.stats.kept.get(i).copied().unwrap_or(0) > 0);
    if cfg.weight == Weight::Count {
        return (with_samples.collect(), Vec::new());
    }
    with_samples.partition(|&i| agg.sized.get(i).copied().unwrap_or(false))
}

/// The stacks to fold or draw.
pub fn shaped_stacks(
    cfg: &ReportConfig,
    agg: &Aggregate,
    res: &Resolved,
    names: &[String],
    event: Option<usize>,
) -> Shaped {
    let (events, no_size) = events_drawn(cfg, agg, event);
    let mut out = Shaped {
        stacks: BTreeMap::new(),
        events: events.clone(),
        no_size,
        cut_stacks: 0,
        cut_weight: 0,
    };
    let per_event: Vec<(Option<&str>, Option<usize>)> = if cfg.all_events {
        events
            .iter()
            .map(|&e| (names.get(e).map(String::as_str), Some(e)))
            .collect()
    } else {
        vec![(None, event)]
    };
    for (root, ev) in per_event {
        // Each stack once, merged by name; it becomes owned strings here only, once.
        for (names, n) in named::named_stacks(cfg, agg, res, ev).iter() {
            // names[0] is the command; the depth counts the frames below it.
            let cut = cfg.max_depth.filter(|&max| names.len() > max + 1);
            let kept = cut.map_or(names.len(), |max| max + 1);
            let mut frames: Vec<String> = Vec::with_capacity(kept + 2);
            frames.extend(root.map(str::to_string));
            frames.extend(names[..kept].iter().map(|s| s.to_string()));
            if cut.is_some() {
                frames.push(CUT_FRAME.to_string());
                out.cut_stacks += 1;
                out.cut_weight += n;
            }
            *out.stacks.entry(frames).or_insert(0) += n;
        }
    }
    out
}

/// `comm;root;...;leaf N` lines, sorted.
pub fn folded_lines(shaped: &Shaped) -> Vec<String> {
    let mut lines: Vec<(String, u64)> = shaped
        .stacks
        .iter()
        .map(|(frames, &n)| (frames.join(";"), n))
        .collect();
    lines.sort();
    lines.into_iter().map(|(l, n)| format!("{l} {n}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folded_lines_sort_as_text() {
        let mut stacks = BTreeMap::new();
        stacks.insert(vec!["b".to_string(), "x".to_string()], 2);
        stacks.insert(vec!["a".to_string()], 1);
        let s = Shaped {
            stacks,
            events: vec![0],
            no_size: Vec::new(),
            cut_stacks: 0,
            cut_weight: 0,
        };
        assert_eq!(folded_lines(&s), ["a 1", "b;x 2"]);
    }
}
