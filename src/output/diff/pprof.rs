//! `memperf diff --pprof`: a diff as `go tool pprof -diff_base BEFORE AFTER` represents one:
//! AFTER's samples, and BEFORE's with their values negated and the label
//! `pprof::base=true`, by which pprof knows the base (its percentages are then of the
//! base's total, as with `-diff_base`).

use rustc_hash::FxHashMap;

use super::Diff;
use crate::output::pprof::{Function, Label, Line, Location, Profile, Sample, Strings, ValueType};

/// The label pprof gives the base profile's samples (`-diff_base`), and looks for.
pub const BASE_LABEL: (&str, &str) = ("pprof::base", "true");

/// What the diff profile says besides its stacks.
pub struct DiffProfile<'a> {
    /// The one sample type: the event's short name (`page-faults`, `sys_enter_brk`), with
    /// `_bytes` under `--weight bytes`, as report's pprof names its columns.
    pub sample_type: &'a str,
    /// `count` or `bytes`.
    pub unit: &'a str,
    /// Each stack's first element is its command: a `comm` label, as report's pprof has it,
    /// not a frame.
    pub comm_first: bool,
    /// Lines `go tool pprof -comments` shows.
    pub comments: &'a [String],
}

/// Interns each frame name once as a function and a location of its own (a diff joins
/// stacks by name, so a name is all a frame has).
struct Frames {
    location_of: FxHashMap<String, u64>,
    locations: Vec<Location>,
    functions: Vec<Function>,
}

impl Frames {
    fn location(&mut self, name: &str, strings: &mut Strings) -> u64 {
        if let Some(&id) = self.location_of.get(name) {
            return id;
        }
        let id = self.locations.len() as u64 + 1;
        let name_id = strings.id(name);
        self.functions.push(Function {
            id,
            name: name_id,
            system_name: name_id,
            filename: 0,
            start_line: 0,
        });
        self.locations.push(Location {
            id,
            mapping_id: 0,
            address: 0,
            line: vec![Line {
                function_id: id,
                line: 0,
            }],
            is_folded: false,
        });
        self.location_of.insert(name.to_string(), id);
        id
    }
}

/// The diff as one profile: for each stack, AFTER's weight and BEFORE's negated.
pub fn build(diff: &Diff, head: &DiffProfile<'_>) -> Profile {
    let mut strings = Strings::new();
    let mut p = Profile {
        sample_type: vec![ValueType {
            r#type: strings.id(head.sample_type),
            unit: strings.id(head.unit),
        }],
        ..Profile::default()
    };
    let mut frames = Frames {
        location_of: FxHashMap::default(),
        locations: Vec::new(),
        functions: Vec::new(),
    };
    let comm_key = strings.id("comm");
    let base = Label {
        key: strings.id(BASE_LABEL.0),
        str: strings.id(BASE_LABEL.1),
        ..Label::default()
    };
    for row in &diff.rows {
        let mut names: Vec<&str> = row.stack.split(';').collect();
        let mut labels = Vec::new();
        if head.comm_first && !names.is_empty() {
            let comm = names.remove(0);
            labels.push(Label {
                key: comm_key,
                str: strings.id(comm),
                ..Label::default()
            });
        }
        // pprof's stacks are leaf first.
        let location_id: Vec<u64> = names
            .iter()
            .rev()
            .map(|n| frames.location(n, &mut strings))
            .collect();
        if row.after > 0 {
            p.sample.push(Sample {
                location_id: location_id.clone(),
                value: vec![i64::try_from(row.after).unwrap_or(i64::MAX)],
                label: labels.clone(),
            });
        }
        if row.before > 0 {
            let mut label = labels;
            label.push(base.clone());
            p.sample.push(Sample {
                location_id,
                value: vec![-i64::try_from(row.before).unwrap_or(i64::MAX)],
                label,
            });
        }
    }
    p.location = frames.locations;
    p.function = frames.functions;
    for c in head.comments {
        let id = strings.id(c);
        p.comment.push(id);
    }
    p.string_table = strings.into_table();
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::diff::{Diff, DiffRow};

    #[test]
    fn before_is_negated_and_labelled_as_the_base() {
        let diff = Diff {
            rows: vec![
                DiffRow {
                    stack: "app;main;a".into(),
                    before: 3,
                    after: 5,
                },
                DiffRow {
                    stack: "app;main;b".into(),
                    before: 2,
                    after: 0,
                },
            ],
            before_total: 5,
            after_total: 5,
            normalized: false,
        };
        let head = DiffProfile {
            sample_type: "page-faults",
            unit: "count",
            comm_first: true,
            comments: &[],
        };
        let p = build(&diff, &head);
        let s = |i: i64| p.string_table[i as usize].as_str();
        let values: Vec<(i64, usize, bool)> = p
            .sample
            .iter()
            .map(|x| {
                let base = x
                    .label
                    .iter()
                    .any(|l| s(l.key) == "pprof::base" && s(l.str) == "true");
                (x.value[0], x.location_id.len(), base)
            })
            .collect();
        assert_eq!(values, [(5, 2, false), (-3, 2, true), (-2, 2, true)]);
        // Leaf first; the command is a label, not a frame.
        let leaf = p.sample[0].location_id[0];
        let f = p.location[leaf as usize - 1].line[0].function_id;
        assert_eq!(s(p.function[f as usize - 1].name), "a");
        assert!(p.sample.iter().all(|x| {
            x.label
                .iter()
                .any(|l| s(l.key) == "comm" && s(l.str) == "app")
        }));
    }
}
