//! The two sides of `memperf diff`, each a recording, folded stacks or a pprof profile,
//! told apart by their first bytes, and the stacks of one event from each.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use prost::Message;

use crate::aggregate::{self, Aggregate};
use crate::config::diff::DiffConfig;
use crate::config::report::{Input, ReportConfig, ReportOutput, Weight};
use crate::output::pprof::{Profile, short};
use crate::output::{self, Resolved, header};
use crate::symbolize::Kallsyms;

/// One side, opened.
pub(super) enum Source {
    /// A perf.data file, aggregated (every event) and its frames named.
    Recording(Box<Recording>),
    /// `stack count` lines; the lines that were not are counted.
    Folded {
        stacks: BTreeMap<String, u64>,
        invalid: u64,
    },
    Pprof(Box<Profile>),
}

/// A recording's aggregate, with the names of its frames and events.
pub(super) struct Recording {
    agg: Aggregate,
    names: Vec<String>,
    resolved: Resolved,
    cfg: ReportConfig,
}

/// One side's stacks of the event compared.
pub(super) struct Stacks {
    pub stacks: BTreeMap<String, u64>,
    /// `samples` or `bytes`.
    pub unit: &'static str,
    /// Each stack starts with its command (recordings, and pprof samples with a `comm`
    /// label); folded stacks' first frame may be anything.
    pub comm_first: bool,
    /// What this side lost or left out, for the outputs' headers.
    pub notes: Vec<String>,
}

const PERF_MAGIC: &[u8] = b"PERFILE2";
const GZIP_MAGIC: &[u8] = &[0x1f, 0x8b];

/// Opens `path` as whatever kind of profile it is.
pub(super) fn open(
    path: &Path,
    cfg: &DiffConfig,
    kallsyms: &dyn Fn() -> Option<Arc<Kallsyms>>,
) -> Result<Source> {
    if path.is_dir() {
        bail!("`{}` is a directory, not a profile", path.display());
    }
    let mut head = Vec::with_capacity(8);
    std::fs::File::open(path)
        .and_then(|f| f.take(8).read_to_end(&mut head))
        .with_context(|| format!("failed to open `{}`", path.display()))?;
    if head.is_empty() {
        bail!("`{}` is empty: no stacks to compare", path.display());
    }
    if head.starts_with(PERF_MAGIC) {
        return open_recording(path, cfg, kallsyms);
    }
    let bytes =
        std::fs::read(path).with_context(|| format!("failed to read `{}`", path.display()))?;
    if head.starts_with(GZIP_MAGIC) {
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(bytes.as_slice())
            .read_to_end(&mut raw)
            .with_context(|| {
                format!(
                    "`{}` is gzip-compressed but does not decompress",
                    path.display()
                )
            })?;
        return decode_pprof(&raw)
            .map(|p| Source::Pprof(Box::new(p)))
            .with_context(|| {
                format!(
                    "`{}` is gzip-compressed but not a pprof profile",
                    path.display()
                )
            });
    }
    if !bytes.contains(&0) {
        let (stacks, invalid) = parse_folded(&String::from_utf8_lossy(&bytes));
        if !stacks.is_empty() {
            return Ok(Source::Folded { stacks, invalid });
        }
    }
    decode_pprof(&bytes).map(|p| Source::Pprof(Box::new(p))).map_err(|_| {
        anyhow::anyhow!(
            "`{}` is neither a recording (perf.data), folded stacks (`stack count` lines) nor a pprof profile",
            path.display()
        )
    })
}

fn open_recording(
    path: &Path,
    cfg: &DiffConfig,
    kallsyms: &dyn Fn() -> Option<Arc<Kallsyms>>,
) -> Result<Source> {
    let input = Input::File(path.to_path_buf());
    let rcfg = ReportConfig {
        output: ReportOutput::Folded,
        space: cfg.space,
        comms: cfg.comms.clone(),
        weight: cfg.weight,
        ..ReportConfig::plain(input.clone())
    };
    let file = crate::input::open(&input)?;
    let names = file.event_names();
    let agg = aggregate::read(&rcfg, &file, &names, None, None, &mut |_| {})
        .with_context(|| format!("failed to read the records of `{}`", path.display()))?;
    let resolved = output::resolve(&rcfg, &agg, kallsyms());
    Ok(Source::Recording(Box::new(Recording {
        agg,
        names,
        resolved,
        cfg: rcfg,
    })))
}

/// A profile.proto, checked enough that a random file is not taken for one.
fn decode_pprof(bytes: &[u8]) -> Result<Profile> {
    let p = Profile::decode(bytes)?;
    if p.sample_type.is_empty() || p.string_table.first().is_none_or(|s| !s.is_empty()) {
        bail!("no sample types, or no string table");
    }
    Ok(p)
}

/// `stack count` lines as inferno-diff-folded reads them: the count after the last space
/// (a fraction truncated), the stack before it with trailing blanks trimmed; the same stack
/// twice adds up.
pub(super) fn parse_folded(text: &str) -> (BTreeMap<String, u64>, u64) {
    let mut stacks: BTreeMap<String, u64> = BTreeMap::new();
    let mut invalid = 0;
    for line in text.lines() {
        if line.trim().is_empty() {
            continue;
        }
        match folded_line(line) {
            Some((stack, n)) => {
                let e = stacks.entry(stack.to_string()).or_insert(0);
                *e = e.saturating_add(n);
            }
            None => invalid += 1,
        }
    }
    (stacks, invalid)
}

fn folded_line(line: &str) -> Option<(&str, u64)> {
    let at = line.rfind(' ')?;
    let count = line[at + 1..].trim_end();
    let whole = match count.split_once('.') {
        Some((w, frac)) if frac.chars().all(|c| c.is_ascii_digit()) => w,
        Some(_) => return None,
        None => count,
    };
    let n = whole.parse::<u64>().ok()?;
    let stack = line[..at].trim_end();
    (!stack.is_empty()).then_some((stack, n))
}

impl Source {
    /// The events this side has samples of; `None` when it does not say (folded stacks).
    pub fn events(&self) -> Option<Vec<String>> {
        match self {
            Source::Recording(r) => Some(
                (0..r.names.len())
                    .filter(|&i| r.agg.stats.kept.get(i).copied().unwrap_or(0) > 0)
                    .map(|i| r.names[i].clone())
                    .collect(),
            ),
            Source::Folded { .. } => None,
            Source::Pprof(p) => {
                let mut events: Vec<String> = Vec::new();
                for t in &p.sample_type {
                    let name = string(p, t.r#type);
                    let name = if string(p, t.unit) == "bytes" {
                        name.strip_suffix("_bytes").unwrap_or(name)
                    } else {
                        name
                    };
                    if !events.iter().any(|e| e == name) {
                        events.push(name.to_string());
                    }
                }
                Some(events)
            }
        }
    }

    /// The stacks of `event` (the only one when `None`), weighed as `weight` says.
    pub fn stacks(&self, path: &Path, event: Option<&str>, weight: Weight) -> Result<Stacks> {
        match self {
            Source::Recording(r) => recording_stacks(path, r, event, weight),
            Source::Folded { stacks, invalid } => Ok(Stacks {
                stacks: stacks.clone(),
                unit: if weight == Weight::Bytes {
                    "bytes"
                } else {
                    "samples"
                },
                comm_first: false,
                notes: (*invalid > 0)
                    .then(|| format!("{invalid} lines are not `stack count` and were left out"))
                    .into_iter()
                    .collect(),
            }),
            Source::Pprof(p) => pprof_stacks(path, p, event, weight),
        }
    }
}

/// Whether two event names are one event: the same, or the same after the tracepoint
/// system (pprof names `syscalls:sys_enter_brk` `sys_enter_brk`).
pub(super) fn same_event(a: &str, b: &str) -> bool {
    a == b || short(a) == short(b)
}

fn recording_stacks(
    path: &Path,
    r: &Recording,
    event: Option<&str>,
    weight: Weight,
) -> Result<Stacks> {
    let (agg, names) = (&r.agg, &r.names);
    let ev = match event {
        Some(e) => names.iter().position(|n| same_event(n, e)),
        None => (0..names.len()).find(|&i| agg.stats.kept.get(i).copied().unwrap_or(0) > 0),
    };
    let mut notes = Vec::new();
    if header::lost_any(&agg.stats) {
        notes.push(header::losses(&agg.stats));
    }
    if let Some(e) = &agg.stats.read_error {
        notes.push(format!("{e}; the diff covers the records before it"));
    }
    let Some(ev) = ev else {
        return Ok(Stacks {
            stacks: BTreeMap::new(),
            unit: if weight == Weight::Bytes {
                "bytes"
            } else {
                "samples"
            },
            comm_first: true,
            notes,
        });
    };
    let sized = agg.sized.get(ev).copied().unwrap_or(false);
    if weight == Weight::Bytes && !sized {
        bail!(
            "--weight bytes: no size is known for `{}` in `{}`; sizes exist for fault events, \
             syscalls:sys_enter_brk/mmap/munmap, kmem:kmalloc, kmem:kmem_cache_alloc and \
             kmem:mm_page_alloc",
            names[ev],
            path.display()
        );
    }
    let stacks = output::named_stacks(&r.cfg, agg, &r.resolved, Some(ev))
        .into_iter()
        .map(|(frames, n)| (frames.join(";"), n))
        .collect();
    Ok(Stacks {
        stacks,
        unit: if weight == Weight::Bytes {
            "bytes"
        } else {
            "samples"
        },
        comm_first: true,
        notes,
    })
}

/// The string at `i` of the profile's table; a bad index is the empty string.
fn string(p: &Profile, i: i64) -> &str {
    usize::try_from(i)
        .ok()
        .and_then(|i| p.string_table.get(i))
        .map_or("", String::as_str)
}

/// The column of `event` (or of the profile's one event) weighed as `weight` asks.
fn pprof_column(p: &Profile, path: &Path, event: Option<&str>, weight: Weight) -> Result<usize> {
    let types: Vec<(&str, &str)> = p
        .sample_type
        .iter()
        .map(|t| (string(p, t.r#type), string(p, t.unit)))
        .collect();
    let of_event = |name: &str| -> bool {
        match event {
            Some(e) => {
                same_event(name, e)
                    || name
                        .strip_suffix("_bytes")
                        .is_some_and(|n| same_event(n, e))
            }
            None => true,
        }
    };
    let candidates: Vec<usize> = (0..types.len()).filter(|&i| of_event(types[i].0)).collect();
    let bytes = |i: &usize| types[*i].1 == "bytes";
    let pick = match weight {
        Weight::Bytes => candidates.iter().copied().find(|i| bytes(i)),
        Weight::Count => candidates
            .iter()
            .copied()
            .find(|i| !bytes(i))
            .or_else(|| candidates.first().copied()),
    };
    let list = || {
        types
            .iter()
            .map(|(t, u)| format!("{t} ({u})"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    pick.with_context(|| match (event, weight) {
        (_, Weight::Bytes) => format!(
            "--weight bytes: `{}` has no column in bytes{}; its sample types: {}",
            path.display(),
            event.map_or(String::new(), |e| format!(" for `{e}`")),
            list()
        ),
        (Some(e), _) => format!(
            "no event `{e}` in `{}`; its sample types: {}",
            path.display(),
            list()
        ),
        (None, _) => format!("`{}` has no sample types", path.display()),
    })
}

fn pprof_stacks(path: &Path, p: &Profile, event: Option<&str>, weight: Weight) -> Result<Stacks> {
    let col = pprof_column(p, path, event, weight)?;
    let unit = if string(p, p.sample_type[col].unit) == "bytes" {
        "bytes"
    } else {
        "samples"
    };
    let functions: BTreeMap<u64, &str> = p
        .function
        .iter()
        .map(|f| (f.id, string(p, f.name)))
        .collect();
    // Each location's names, outermost inline frame first.
    let mut locations: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for l in &p.location {
        let mut names: Vec<String> = l
            .line
            .iter()
            .rev()
            .map(|line| {
                functions
                    .get(&line.function_id)
                    .copied()
                    .unwrap_or("")
                    .to_string()
            })
            .filter(|n| !n.is_empty())
            .collect();
        if names.is_empty() {
            names.push(format!("{:#x}", l.address));
        }
        locations.insert(l.id, names);
    }
    let mut stacks: BTreeMap<String, u64> = BTreeMap::new();
    let (mut negative, mut unknown, mut with_comm) = (0u64, 0u64, 0usize);
    for s in &p.sample {
        let is_base = s
            .label
            .iter()
            .any(|l| string(p, l.key) == crate::output::diff::pprof::BASE_LABEL.0);
        if is_base {
            bail!(
                "`{}` is itself a diff (its samples are labelled pprof::base): compare the profiles it was made from",
                path.display()
            );
        }
        let v = s.value.get(col).copied().unwrap_or(0);
        if v <= 0 {
            negative += u64::from(v < 0);
            continue;
        }
        let comm = s
            .label
            .iter()
            .find(|l| string(p, l.key) == "comm")
            .map(|l| string(p, l.str));
        let mut frames: Vec<&str> = Vec::new();
        if let Some(c) = comm {
            frames.push(c);
            with_comm += 1;
        }
        for id in s.location_id.iter().rev() {
            match locations.get(id) {
                Some(names) => frames.extend(names.iter().map(String::as_str)),
                None => {
                    unknown += 1;
                    frames.push("[unknown]");
                }
            }
        }
        let e = stacks.entry(frames.join(";")).or_insert(0);
        *e = e.saturating_add(v as u64);
    }
    let mut notes = Vec::new();
    if negative > 0 {
        notes.push(format!(
            "{negative} samples with negative values were left out"
        ));
    }
    if unknown > 0 {
        notes.push(format!(
            "{unknown} frames name no location of the profile ([unknown])"
        ));
    }
    Ok(Stacks {
        comm_first: with_comm > 0 && with_comm == stacks_count(p, col),
        stacks,
        unit,
        notes,
    })
}

/// How many samples have a positive value in column `col`.
fn stacks_count(p: &Profile, col: usize) -> usize {
    p.sample
        .iter()
        .filter(|s| s.value.get(col).copied().unwrap_or(0) > 0)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folded_lines_are_read_as_inferno_reads_them() {
        let (stacks, invalid) = parse_folded("a;b 3\na;b 2\nc;d 1.75\nnot a count\n\nx;y -1\n");
        assert_eq!(stacks.get("a;b"), Some(&5));
        assert_eq!(stacks.get("c;d"), Some(&1));
        assert_eq!(stacks.len(), 2);
        assert_eq!(invalid, 2);
    }
}
