//! `memperf report --pprof`: a gzip-compressed profile.proto, for `go tool pprof`.
//!
//! The message types below are profile.proto (github.com/google/pprof, proto/profile.proto)
//! written once as prost messages, field numbers as in the .proto, so that no protoc runs
//! at build time.

use std::io::Write;

use anyhow::{Context, Result};
use prost::Message;
use rustc_hash::FxHashMap;

use crate::config::report::ReportConfig;
use crate::stacks::FrameId;

use super::Resolved;
use crate::aggregate::{Aggregate, FrameKey, Weigher};

#[derive(Clone, PartialEq, Message)]
pub struct Profile {
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    pub period: i64,
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Label {
    #[prost(int64, tag = "1")]
    pub key: i64,
    #[prost(int64, tag = "2")]
    pub str: i64,
    #[prost(int64, tag = "3")]
    pub num: i64,
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Mapping {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    #[prost(int64, tag = "5")]
    pub filename: i64,
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct Location {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    #[prost(uint64, tag = "3")]
    pub address: u64,
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct Line {
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    #[prost(int64, tag = "2")]
    pub line: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Function {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(int64, tag = "2")]
    pub name: i64,
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    #[prost(int64, tag = "4")]
    pub filename: i64,
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}

/// The profile's string table: each string once, `""` first.
#[derive(Default)]
pub(super) struct Strings {
    table: Vec<String>,
    ids: FxHashMap<String, i64>,
}

impl Strings {
    pub(super) fn new() -> Strings {
        let mut s = Strings::default();
        s.id("");
        s
    }

    pub(super) fn id(&mut self, v: &str) -> i64 {
        if let Some(&i) = self.ids.get(v) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(v.to_string());
        self.ids.insert(v.to_string(), i);
        i
    }
}

impl Strings {
    pub(super) fn into_table(self) -> Vec<String> {
        self.table
    }
}

/// The short name pprof shows for an event (`syscalls:sys_enter_brk` → `sys_enter_brk`).
pub(crate) fn short(name: &str) -> &str {
    name.rsplit(':').next().unwrap_or(name)
}

/// A sample's key in the aggregate: (event, prefix, stack).
type Key = (usize, u32, Option<crate::stacks::StackId>);

/// Builds the profile: one sample type per event (count), plus bytes for events with a size.
pub fn build(
    cfg: &ReportConfig,
    sample_time: Option<(u64, u64)>,
    names: &[String],
    weighers: &[Weigher],
    agg: &Aggregate,
    res: &Resolved,
) -> Profile {
    let mut b = Builder {
        cfg,
        agg,
        res,
        p: Profile::default(),
        strings: Strings::new(),
    };
    let cols = b.sample_types(names, weighers);
    // The samples, and the frames they reach: the profile names those alone (a window
    // cut by process group reaches a part of the window's frames, `memperf agent`, and
    // leak's table keeps the frames of blocks freed since).
    let mut keys: Vec<Key> = agg
        .counts
        .keys()
        .copied()
        .filter(|(ev, _, _)| cols.count.contains_key(ev))
        .collect();
    // Samples without a stack last, as they always were.
    keys.sort_unstable_by_key(|&(ev, prefix, stack)| (ev, prefix, stack.is_none(), stack));
    let reached = reached_frames(agg, &keys);
    let mapping_of_module = b.module_mappings(&reached);
    let location_of = b.locations(&reached, &mapping_of_module);
    b.samples(keys, &cols, &location_of);
    let Builder {
        mut p, mut strings, ..
    } = b;
    if let Some((a, b)) = sample_time.or(agg.stats.first_time.zip(agg.stats.last_time)) {
        p.duration_nanos = b.saturating_sub(a) as i64;
    }
    let note = format!("memperf report of {}", cfg.input);
    p.comment.push(strings.id(&note));
    p.comment
        .push(strings.id(&super::header::losses(&agg.stats)));
    p.string_table = strings.into_table();
    p
}

/// Each event's columns: its count's, and its bytes' for an event with a size.
struct Columns {
    count: FxHashMap<usize, usize>,
    bytes: FxHashMap<usize, usize>,
}

/// The profile as it is built, and what it is built from.
struct Builder<'a> {
    cfg: &'a ReportConfig,
    agg: &'a Aggregate,
    res: &'a Resolved,
    p: Profile,
    strings: Strings,
}

impl Builder<'_> {
    /// Sample types: (event, count) and (event, bytes) columns, for the events with samples.
    fn sample_types(&mut self, names: &[String], weighers: &[Weigher]) -> Columns {
        let (p, strings) = (&mut self.p, &mut self.strings);
        let mut cols = Columns {
            count: FxHashMap::default(),
            bytes: FxHashMap::default(),
        };
        for (i, name) in names.iter().enumerate() {
            if self.agg.stats.kept.get(i).copied().unwrap_or(0) == 0 {
                continue;
            }
            cols.count.insert(i, p.sample_type.len());
            p.sample_type.push(ValueType {
                r#type: strings.id(short(name)),
                unit: strings.id("count"),
            });
            if !matches!(weighers.get(i), Some(Weigher::None) | None) {
                // Each column's type is its own: pprof merges columns by type alone, and one
                // profile whose types repeat opens as "empty common sample type list".
                cols.bytes.insert(i, p.sample_type.len());
                p.sample_type.push(ValueType {
                    r#type: strings.id(&format!("{}_bytes", short(name))),
                    unit: strings.id("bytes"),
                });
            }
        }
        cols
    }

    /// One mapping per module a reached frame is in; pprof takes the first mapping as the
    /// main binary: user modules come first, in the order they were mapped (the executable
    /// before its libraries). Each module's mapping id.
    fn module_mappings(&mut self, reached: &[bool]) -> FxHashMap<u32, u64> {
        let (agg, cfg) = (self.agg, self.cfg);
        let mut modules: Vec<u32> = agg
            .book
            .frames
            .iter()
            .filter(|(id, _)| reached[*id as usize])
            .filter_map(|(_, k)| match k {
                FrameKey::User { module, .. } => Some(*module),
                _ => None,
            })
            .collect();
        modules.sort_unstable();
        modules.dedup();
        let mut mapping_of_module = FxHashMap::default();
        for module in modules {
            let next = self.p.mapping.len() as u64 + 1;
            let m = agg.maps.module(module);
            let build_id: String = m
                .build_id
                .as_deref()
                .map(|b| b.iter().map(|x| format!("{x:02x}")).collect())
                .unwrap_or_default();
            self.p.mapping.push(Mapping {
                id: next,
                filename: self.strings.id(&String::from_utf8_lossy(&m.path)),
                build_id: self.strings.id(&build_id),
                has_functions: true,
                has_filenames: cfg.lines,
                has_line_numbers: cfg.lines,
                has_inline_frames: cfg.inline,
                ..Mapping::default()
            });
            mapping_of_module.insert(module, next);
        }
        mapping_of_module
    }

    /// Each reached frame's location id: 1, 2, 3 ... in frame order (Parca refuses ids
    /// with gaps), 0 for the others; the kernel's and JIT code's mappings made as their
    /// frames come.
    fn locations(&mut self, reached: &[bool], mapping_of_module: &FxHashMap<u32, u64>) -> Vec<u64> {
        let agg = self.agg;
        let mut special: FxHashMap<&'static str, u64> = FxHashMap::default();
        let mut functions: FxHashMap<(String, String), u64> = FxHashMap::default();
        let mut location_of = vec![0u64; agg.book.frames.len()];
        for (id, key) in agg.book.frames.iter() {
            if *key == FrameKey::Recovered || !reached[id as usize] {
                continue;
            }
            let mapping_id = match *key {
                FrameKey::User { module, .. } => {
                    mapping_of_module.get(&module).copied().unwrap_or(0)
                }
                FrameKey::Recovered => 0,
                FrameKey::Kernel { .. } | FrameKey::Jit { .. } => {
                    let label = if matches!(key, FrameKey::Kernel { .. }) {
                        "[kernel.kallsyms]"
                    } else {
                        "[jit]"
                    };
                    let (p, strings) = (&mut self.p, &mut self.strings);
                    let next = p.mapping.len() as u64 + 1;
                    *special.entry(label).or_insert_with(|| {
                        p.mapping.push(Mapping {
                            id: next,
                            filename: strings.id(label),
                            has_functions: true,
                            ..Mapping::default()
                        });
                        next
                    })
                }
            };
            let lines = self.location_lines(id, &mut functions);
            let loc = self.p.location.len() as u64 + 1;
            self.p.location.push(Location {
                id: loc,
                mapping_id,
                address: self.res.info[id as usize].addr,
                line: lines,
                is_folded: false,
            });
            location_of[id as usize] = loc;
        }
        location_of
    }

    /// The lines of frame `id`'s location, innermost inline frame first as pprof wants
    /// them (names are outermost first), each with its function, made once per (name,
    /// file) in `functions`.
    fn location_lines(
        &mut self,
        id: FrameId,
        functions: &mut FxHashMap<(String, String), u64>,
    ) -> Vec<Line> {
        let (cfg, res) = (self.cfg, self.res);
        let (p, strings) = (&mut self.p, &mut self.strings);
        let info = &res.info[id as usize];
        let names = &res.names[id as usize];
        let mut lines = Vec::new();
        for (k, name) in names.iter().enumerate().rev() {
            let (src, line) = res
                .lines
                .get(id as usize)
                .and_then(|l| l.get(k))
                .cloned()
                .unwrap_or((None, None));
            // The source file under --lines, else the module for the outermost frame.
            let file_name = match src {
                Some(f) => f,
                None if k + 1 == names.len() => info.dso.clone(),
                None => String::new(),
            };
            // Under --lines the report's names carry ` (file:line)`; pprof has fields for that.
            let name = match (cfg.lines, name.rsplit_once(" (")) {
                (true, Some((plain, rest))) if rest.ends_with(')') => plain,
                _ => name.as_str(),
            };
            let fkey = (name.to_string(), file_name.clone());
            let next = p.function.len() as u64 + 1;
            let fid = *functions.entry(fkey).or_insert_with(|| {
                p.function.push(Function {
                    id: next,
                    name: strings.id(name),
                    system_name: strings.id(name),
                    filename: strings.id(&file_name),
                    start_line: 0,
                });
                next
            });
            lines.push(Line {
                function_id: fid,
                line: line.map_or(0, i64::from),
            });
        }
        lines
    }

    /// Samples: one per (event, comm, stack), root last as pprof lists locations, labelled
    /// with the comm and, for a stack finished from the live process, where that began.
    fn samples(&mut self, keys: Vec<Key>, cols: &Columns, location_of: &[u64]) {
        let (agg, res) = (self.agg, self.res);
        let (p, strings) = (&mut self.p, &mut self.strings);
        let comm_key = strings.id("comm");
        let mut ids: Vec<FrameId> = Vec::new();
        p.sample.reserve_exact(keys.len());
        for key in keys {
            let (ev, prefix, stack) = key;
            let Some(&cc) = cols.count.get(&ev) else {
                continue;
            };
            let mut value = vec![0i64; p.sample_type.len()];
            value[cc] = agg.counts[&key] as i64;
            if let (Some(&bc), Some(&b)) = (cols.bytes.get(&ev), agg.bytes.get(&key)) {
                value[bc] = b as i64;
            }
            ids.clear();
            if let Some(stack) = stack {
                agg.book.stacks.frames(stack, &mut ids);
            }
            let comm = agg.prefixes.get(prefix).map_or("", String::as_str);
            // Room for one label more (the recovered mark's, or the pid `memperf agent`
            // adds), not the four a list grows to: a profile holds a list for each of its
            // samples.
            let mut label = Vec::with_capacity(2);
            label.push(Label {
                key: comm_key,
                str: strings.id(comm),
                ..Label::default()
            });
            // Root first: the frames before the mark were read from the live process.
            if let Some(at) = ids.iter().position(|&f| Some(f) == res.recovered_mark) {
                ids.remove(at);
                label.push(Label {
                    key: strings.id("recovered_frames"),
                    num: at as i64,
                    ..Label::default()
                });
            }
            p.sample.push(Sample {
                location_id: ids
                    .iter()
                    .rev()
                    .map(|&f| location_of.get(f as usize).copied().unwrap_or(0))
                    .collect(),
                value,
                label,
            });
        }
    }
}

/// Which frames (by id) the stacks of `keys` reach.
fn reached_frames(agg: &Aggregate, keys: &[Key]) -> Vec<bool> {
    let mut reached = vec![false; agg.book.frames.len()];
    let mut ids: Vec<FrameId> = Vec::new();
    for &(_, _, stack) in keys {
        let Some(stack) = stack else { continue };
        ids.clear();
        agg.book.stacks.frames(stack, &mut ids);
        for &f in &ids {
            if let Some(r) = reached.get_mut(f as usize) {
                *r = true;
            }
        }
    }
    reached
}

/// Adds a comment line to a built profile (`go tool pprof -comments` shows them).
pub fn add_comment(p: &mut Profile, text: &str) {
    let id = match p.string_table.iter().position(|s| s == text) {
        Some(i) => i,
        None => {
            p.string_table.push(text.to_string());
            p.string_table.len() - 1
        }
    };
    p.comment.push(id as i64);
}

/// The encoded `p` with `labels` added to each of its samples, as if every sample held them:
/// the labels a whole profile shares (`memperf agent`'s service and host) are kept once,
/// not once a sample. With no labels, the bytes are `p.encode_to_vec()`'s.
pub fn encode_with_labels(p: &Profile, labels: &[Label]) -> Vec<u8> {
    use prost::encoding::{self, WireType, int64, message, string};
    let added: usize = labels.iter().map(|l| message::encoded_len(3, l)).sum();
    let mut buf = Vec::with_capacity(p.encoded_len() + added * p.sample.len());
    // Every field in the order of its number, as prost's own encoding writes them.
    for t in &p.sample_type {
        message::encode(1, t, &mut buf);
    }
    for s in &p.sample {
        encoding::encode_key(2, WireType::LengthDelimited, &mut buf);
        encoding::encode_varint((s.encoded_len() + added) as u64, &mut buf);
        // Into a Vec, which grows: encoding cannot fail.
        let _ = s.encode(&mut buf);
        for l in labels {
            message::encode(3, l, &mut buf);
        }
    }
    for m in &p.mapping {
        message::encode(3, m, &mut buf);
    }
    for l in &p.location {
        message::encode(4, l, &mut buf);
    }
    for f in &p.function {
        message::encode(5, f, &mut buf);
    }
    string::encode_repeated(6, &p.string_table, &mut buf);
    let scalar = |tag: u32, v: i64, buf: &mut Vec<u8>| {
        if v != 0 {
            int64::encode(tag, &v, buf);
        }
    };
    scalar(7, p.drop_frames, &mut buf);
    scalar(8, p.keep_frames, &mut buf);
    scalar(9, p.time_nanos, &mut buf);
    scalar(10, p.duration_nanos, &mut buf);
    if let Some(t) = &p.period_type {
        message::encode(11, t, &mut buf);
    }
    scalar(12, p.period, &mut buf);
    int64::encode_packed(13, &p.comment, &mut buf);
    scalar(14, p.default_sample_type, &mut buf);
    buf
}

/// Writes `profile` gzip-compressed to `path` (`-` for standard output).
pub fn write(profile: &Profile, path: &std::path::Path) -> Result<()> {
    write_with_labels(profile, &[], path)
}

/// Writes `profile` gzip-compressed to `path` (`-` for standard output), `labels` added to
/// each sample (see [`encode_with_labels`]).
pub fn write_with_labels(
    profile: &Profile,
    labels: &[Label],
    path: &std::path::Path,
) -> Result<()> {
    let bytes = encode_with_labels(profile, labels);
    let gz = |w: &mut dyn Write| -> std::io::Result<()> {
        let mut enc = flate2::write::GzEncoder::new(w, flate2::Compression::default());
        enc.write_all(&bytes)?;
        enc.finish()?;
        Ok(())
    };
    if path.as_os_str() == "-" {
        let stdout = std::io::stdout();
        gz(&mut stdout.lock()).context("failed to write the profile")
    } else {
        let mut f = super::create_output_file(path)
            .with_context(|| format!("failed to create `{}`", path.display()))?;
        gz(&mut f).with_context(|| format!("failed to write `{}`", path.display()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use prost::Message;

    use super::{Function, Label, Line, Location, Mapping, Profile, Sample, ValueType};

    fn profile() -> Profile {
        Profile {
            sample_type: vec![ValueType { r#type: 1, unit: 2 }],
            sample: vec![
                Sample {
                    location_id: vec![2, 1],
                    value: vec![3],
                    label: vec![Label {
                        key: 3,
                        str: 4,
                        ..Label::default()
                    }],
                },
                Sample {
                    location_id: vec![1],
                    value: vec![-5],
                    label: Vec::new(),
                },
            ],
            mapping: vec![Mapping {
                id: 1,
                filename: 5,
                has_functions: true,
                ..Mapping::default()
            }],
            location: (1..=2)
                .map(|id| Location {
                    id,
                    mapping_id: 1,
                    address: 0x1000 * id,
                    line: vec![Line {
                        function_id: id,
                        line: 7,
                    }],
                    is_folded: false,
                })
                .collect(),
            function: (1..=2)
                .map(|id| Function {
                    id,
                    name: 6,
                    ..Function::default()
                })
                .collect(),
            string_table: [
                "", "faults", "count", "comm", "app", "/bin/app", "f", "service",
            ]
            .map(String::from)
            .to_vec(),
            time_nanos: 11,
            duration_nanos: 12,
            period_type: Some(ValueType { r#type: 1, unit: 2 }),
            period: 1,
            comment: vec![1, 4],
            ..Profile::default()
        }
    }

    /// Without labels the bytes are prost's own (a field added to `Profile` and left out of
    /// the encoder fails here); with labels, the profile decodes as one whose every sample
    /// holds them after its own.
    #[test]
    fn labels_added_at_encoding_are_every_samples() {
        let p = profile();
        assert_eq!(super::encode_with_labels(&p, &[]), p.encode_to_vec());
        let service = Label {
            key: 7,
            str: 1,
            ..Label::default()
        };
        let pid = Label {
            key: 2,
            num: 42,
            ..Label::default()
        };
        let labels = [service, pid];
        let bytes = super::encode_with_labels(&p, &labels);
        let mut want = p.clone();
        for s in &mut want.sample {
            s.label.extend(labels.iter().cloned());
        }
        assert_eq!(Profile::decode(bytes.as_slice()).unwrap(), want);
    }
}
