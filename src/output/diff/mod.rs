//! `memperf diff`: two profiles' stacks side by side, and the outputs of their difference (the
//! table of the stacks that changed most, inferno-diff-folded's `stack before after` lines,
//! a differential flame graph). The pprof diff is `output::diff::pprof`.

pub mod pprof;

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::Result;

/// One stack of either side, with both weights (BEFORE's scaled under `--normalize`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffRow {
    /// `comm;root;...;leaf`, as folded stacks write it.
    pub stack: String,
    pub before: u64,
    pub after: u64,
}

impl DiffRow {
    pub fn delta(&self) -> i128 {
        i128::from(self.after) - i128::from(self.before)
    }
}

/// Every stack of two profiles, sorted by stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diff {
    pub rows: Vec<DiffRow>,
    /// The totals as read, before any scaling.
    pub before_total: u64,
    pub after_total: u64,
    /// BEFORE's weights were scaled by `after_total / before_total`.
    pub normalized: bool,
}

/// Joins two sides' stacks. Under `normalize`, BEFORE's weights are scaled to AFTER's total
/// and truncated, as inferno-diff-folded's `-n` does, so that its output and ours agree.
pub fn join(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
    normalize: bool,
) -> Diff {
    let before_total: u64 = before.values().fold(0u64, |a, &b| a.saturating_add(b));
    let after_total: u64 = after.values().fold(0u64, |a, &b| a.saturating_add(b));
    let scale = (normalize && before_total != after_total && before_total > 0)
        .then(|| after_total as f64 / before_total as f64);
    let mut joined: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for (stack, &n) in before {
        joined.entry(stack).or_default().0 = match scale {
            Some(s) => (n as f64 * s) as u64,
            None => n,
        };
    }
    for (stack, &n) in after {
        joined.entry(stack).or_default().1 = n;
    }
    Diff {
        rows: joined
            .into_iter()
            .map(|(stack, (before, after))| DiffRow {
                stack: stack.to_string(),
                before,
                after,
            })
            .collect(),
        before_total,
        after_total,
        normalized: scale.is_some(),
    }
}

impl Diff {
    /// BEFORE's total as compared (scaled under `--normalize`).
    pub fn compared_before_total(&self) -> u64 {
        self.rows.iter().map(|r| r.before).sum()
    }

    /// The rows largest change first (by |delta|, then by stack), without the unchanged.
    pub fn ranked(&self) -> Vec<&DiffRow> {
        let mut ranked: Vec<&DiffRow> = self.rows.iter().filter(|r| r.delta() != 0).collect();
        ranked.sort_by(|a, b| {
            b.delta()
                .abs()
                .cmp(&a.delta().abs())
                .then_with(|| a.stack.cmp(&b.stack))
        });
        ranked
    }

    /// `stack before after` lines, sorted: inferno-diff-folded's format, which
    /// inferno-flamegraph draws as a differential flame graph.
    pub fn folded_lines(&self) -> Vec<String> {
        self.rows
            .iter()
            .map(|r| format!("{} {} {}", r.stack, r.before, r.after))
            .collect()
    }
}

/// `stack before after` lines.
pub fn write_folded(diff: &Diff, out: &mut dyn Write) -> Result<()> {
    for line in diff.folded_lines() {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// What the table's header says of the two sides.
pub struct TableHead<'a> {
    pub before: &'a str,
    pub after: &'a str,
    /// The event compared, when a side names it.
    pub event: Option<&'a str>,
    /// `samples` or `bytes`.
    pub unit: &'a str,
    /// How many rows (0: all).
    pub top: usize,
    /// What either side lost or left out, one line each.
    pub notes: &'a [String],
}

/// `+12.50%`, `new` where BEFORE had none.
fn delta_percent(r: &DiffRow) -> String {
    if r.before == 0 {
        "new".to_string()
    } else {
        format!("{:+.2}%", 100.0 * r.delta() as f64 / r.before as f64)
    }
}

fn signed(v: i128) -> String {
    if v > 0 {
        format!("+{v}")
    } else {
        v.to_string()
    }
}

/// The stacks that changed most: before, after, delta and delta % (of BEFORE), largest
/// |delta| first.
pub fn write_table(diff: &Diff, head: &TableHead<'_>, out: &mut dyn Write) -> Result<()> {
    let event = head.event.map_or(String::new(), |e| format!(" of {e}"));
    writeln!(
        out,
        "# memperf diff{event}: {} (before) -> {} (after), in {}",
        head.before, head.after, head.unit
    )?;
    let before_total = diff.compared_before_total();
    let total = DiffRow {
        stack: String::new(),
        before: before_total,
        after: diff.after_total,
    };
    writeln!(
        out,
        "# total: before {}, after {}, delta {} ({})",
        before_total,
        diff.after_total,
        signed(total.delta()),
        delta_percent(&total)
    )?;
    for note in head.notes {
        writeln!(out, "# {note}")?;
    }
    if diff.normalized {
        writeln!(
            out,
            "# before normalized: its {} {} scaled to after's total",
            diff.before_total, head.unit
        )?;
    }
    let ranked = diff.ranked();
    let shown = if head.top == 0 {
        ranked.len()
    } else {
        head.top.min(ranked.len())
    };
    writeln!(
        out,
        "# {shown} of {} changed stacks ({} stacks in all), largest change first",
        ranked.len(),
        diff.rows.len()
    )?;
    writeln!(
        out,
        "{:>12} {:>12} {:>12} {:>9}  stack",
        "before", "after", "delta", "delta%"
    )?;
    for r in ranked.into_iter().take(shown) {
        writeln!(
            out,
            "{:>12} {:>12} {:>12} {:>9}  {}",
            r.before,
            r.after,
            signed(r.delta()),
            delta_percent(r),
            r.stack
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(lines: &[(&str, u64)]) -> BTreeMap<String, u64> {
        lines.iter().map(|&(s, n)| (s.to_string(), n)).collect()
    }

    #[test]
    fn stacks_of_either_side_are_joined_and_ranked_by_the_size_of_their_change() {
        let d = join(
            &side(&[("c;main;a", 10), ("c;main;b", 50), ("c;main;same", 7)]),
            &side(&[
                ("c;main;a", 30),
                ("c;main;b", 5),
                ("c;main;new", 1),
                ("c;main;same", 7),
            ]),
            false,
        );
        let order: Vec<(&str, i128)> = d
            .ranked()
            .iter()
            .map(|r| (r.stack.as_str(), r.delta()))
            .collect();
        assert_eq!(
            order,
            [("c;main;b", -45), ("c;main;a", 20), ("c;main;new", 1)]
        );
        assert_eq!(
            d.folded_lines(),
            [
                "c;main;a 10 30",
                "c;main;b 50 5",
                "c;main;new 0 1",
                "c;main;same 7 7"
            ]
        );
        let mut out = Vec::new();
        let head = TableHead {
            before: "b",
            after: "a",
            event: Some("page-faults"),
            unit: "samples",
            top: 0,
            notes: &[],
        };
        write_table(&d, &head, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("before 67, after 43, delta -24 (-35.82%)"),
            "{text}"
        );
        assert!(text.contains("-45   -90.00%  c;main;b"), "{text}");
        assert!(text.contains("+1       new  c;main;new"), "{text}");
    }

    #[test]
    fn normalizing_scales_before_to_after_and_truncates_as_inferno_does() {
        // 3 before, 4 after: each before count is scaled by 4/3 and truncated.
        let d = join(&side(&[("x", 1), ("y", 2)]), &side(&[("x", 4)]), true);
        assert_eq!(d.folded_lines(), ["x 1 4", "y 2 0"]);
        assert!(d.normalized);
        let same = join(&side(&[("x", 4)]), &side(&[("x", 4)]), true);
        assert!(!same.normalized);
        let empty = join(&side(&[]), &side(&[("x", 4)]), true);
        assert_eq!(empty.folded_lines(), ["x 0 4"]);
    }
}
