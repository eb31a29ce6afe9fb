//! Event-spec parsing as perf takes them: `page-faults`, `syscalls:sys_enter_brk`,
//! `cache-misses:pp`, `r1a8`, globs (`kmem:mm_page_*`) and per-event terms
//! (`page-faults/period=10/`, `kmem:kmalloc/call-graph=fp,max-stack=8,name=km/`).
//!
//! This module only understands the syntax and the fixed software and hardware tables; whether
//! a tracepoint exists, and what a glob names, is decided later against tracefs
//! (`sys::tracefs`, `live::open::resolve_events`); a name that is no event here may be
//! looked up among the tracepoints by the caller (`short`, `parse_event_list_with`).

mod patterns;
pub mod short;

pub use patterns::{filter_fields, glob_error, glob_match, is_glob};

use std::fmt;

use perf_event_open_sys::bindings as b;

use crate::config::record::{CallGraph, MAX_STACK_BYTES};

/// What kind of perf event a spec names, with the numbers `perf_event_attr` needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// `PERF_TYPE_SOFTWARE` with a `PERF_COUNT_SW_*` config.
    Software { config: u64 },
    /// `PERF_TYPE_HARDWARE` with a `PERF_COUNT_HW_*` config.
    Hardware { config: u64 },
    /// `rNNNN` (hex), `PERF_TYPE_RAW`.
    Raw { config: u64 },
    /// `system:name`; the id comes from tracefs.
    Tracepoint { system: String, name: String },
    /// A probe on the uprobe PMU (4.17+): `type_` from sysfs, `config` the return-probe bit,
    /// `config1` a pointer to the path (kept alive by its creator), `config2` the file offset.
    Uprobe {
        type_: u32,
        config: u64,
        config1: u64,
        config2: u64,
    },
    /// A user probe (`u:`, `r:`, `sdt:`), placed when the events are resolved
    /// (`live::probes`): it becomes a tracefs probe (a `Tracepoint`) or an `Uprobe`.
    Probe(Box<crate::probes::ProbeSpec>),
}

/// perf's `:u :k :p :pp :ppp` suffixes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Modifiers {
    pub exclude_user: bool,
    pub exclude_kernel: bool,
    pub precise: u8,
}

/// perf's per-event terms (`page-faults/period=10,call-graph=fp/`): what this event does
/// apart from the recording's options.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Terms {
    /// `period=N` or `freq=N`.
    pub period: Option<Period>,
    /// `call-graph=fp|dwarf[,SIZE]|no`, `stack-size=N`.
    pub call_graph: Option<CallGraph>,
    /// `max-stack=N`: at most N frames (kernel and user) in each sample's stack.
    pub max_stack: Option<u16>,
    /// `name=LABEL`: the name the event gets in the recording and reports.
    pub label: Option<String>,
}

/// One parsed event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSpec {
    /// Canonical name as perf prints it, without modifiers: `page-faults`, `kmem:kmalloc`
    /// (a `name=` term's label, once the event is resolved).
    pub name: String,
    pub kind: EventKind,
    pub modifiers: Modifiers,
    pub terms: Terms,
    /// A tracepoint filter (`--filter` after the `-e` that names the event), applied by the
    /// kernel (PERF_EVENT_IOC_SET_FILTER).
    pub filter: Option<String>,
}

/// How often an event samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Period {
    /// One sample every N events (`sample_period`).
    Count(u64),
    /// About N samples per second (`freq = 1`, `sample_freq`).
    Frequency(u64),
}

/// Errors from parsing an event list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    #[error("empty event list: name at least one event, e.g. `-e page-faults`")]
    EmptyList,
    #[error("empty event name in list `{list}`")]
    EmptyItem { list: String },
    #[error("unknown event `{name}`{}", format_suggestions(.suggestions))]
    Unknown {
        name: String,
        suggestions: Vec<String>,
    },
    #[error(
        "event `{name}` names several tracepoints: {}; give one as system:name",
        list_some(.candidates)
    )]
    Ambiguous {
        name: String,
        candidates: Vec<String>,
    },
    #[error(
        "invalid modifier `{modifier}` on event `{event}`: modifiers are u, k and p (up to ppp)"
    )]
    BadModifier { event: String, modifier: String },
    #[error("modifiers are not supported on tracepoint `{event}`")]
    TracepointModifier { event: String },
    #[error(
        "invalid tracepoint `{event}`: expected `system:name` made of letters, digits, `_` and `-`"
    )]
    BadTracepoint { event: String },
    #[error("invalid raw event `{event}`: expected `r` followed by a hex number, e.g. `r1a8`")]
    BadRaw { event: String },
    #[error("invalid term `{term}` in event `{event}`: {reason}")]
    BadTerm {
        event: String,
        term: String,
        reason: String,
    },
    #[error("unterminated terms in event `{event}`: expected `name/term=value,.../`")]
    UnterminatedTerms { event: String },
    #[error(transparent)]
    Probe(#[from] crate::probes::ProbeSyntaxError),
}

/// The terms perf takes that memperf does too.
const TERMS: &str = "period=N, freq=N, call-graph=fp|dwarf[,SIZE]|no, stack-size=N, \
                     max-stack=N, name=LABEL";

/// The first 12 names, and how many more.
fn list_some(names: &[String]) -> String {
    let shown: Vec<String> = names.iter().take(12).map(|n| format!("`{n}`")).collect();
    match names.len().saturating_sub(12) {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

fn format_suggestions(suggestions: &[String]) -> String {
    if suggestions.is_empty() {
        return "; run `memperf list` to see the events available here".to_string();
    }
    let names: Vec<String> = suggestions.iter().map(|s| format!("`{s}`")).collect();
    format!("; did you mean {}?", names.join(", "))
}

/// (accepted name, canonical name, config) for `PERF_TYPE_SOFTWARE`.
const SOFTWARE: &[(&str, &str, u32)] = &[
    ("page-faults", "page-faults", b::PERF_COUNT_SW_PAGE_FAULTS),
    ("faults", "page-faults", b::PERF_COUNT_SW_PAGE_FAULTS),
    (
        "minor-faults",
        "minor-faults",
        b::PERF_COUNT_SW_PAGE_FAULTS_MIN,
    ),
    (
        "major-faults",
        "major-faults",
        b::PERF_COUNT_SW_PAGE_FAULTS_MAJ,
    ),
    ("cpu-clock", "cpu-clock", b::PERF_COUNT_SW_CPU_CLOCK),
    ("task-clock", "task-clock", b::PERF_COUNT_SW_TASK_CLOCK),
    (
        "context-switches",
        "context-switches",
        b::PERF_COUNT_SW_CONTEXT_SWITCHES,
    ),
    ("cs", "context-switches", b::PERF_COUNT_SW_CONTEXT_SWITCHES),
    (
        "cpu-migrations",
        "cpu-migrations",
        b::PERF_COUNT_SW_CPU_MIGRATIONS,
    ),
    (
        "migrations",
        "cpu-migrations",
        b::PERF_COUNT_SW_CPU_MIGRATIONS,
    ),
    (
        "alignment-faults",
        "alignment-faults",
        b::PERF_COUNT_SW_ALIGNMENT_FAULTS,
    ),
    (
        "emulation-faults",
        "emulation-faults",
        b::PERF_COUNT_SW_EMULATION_FAULTS,
    ),
    ("dummy", "dummy", b::PERF_COUNT_SW_DUMMY),
];

/// (accepted name, canonical name, config) for `PERF_TYPE_HARDWARE`.
const HARDWARE: &[(&str, &str, u32)] = &[
    ("cycles", "cycles", b::PERF_COUNT_HW_CPU_CYCLES),
    ("cpu-cycles", "cycles", b::PERF_COUNT_HW_CPU_CYCLES),
    (
        "instructions",
        "instructions",
        b::PERF_COUNT_HW_INSTRUCTIONS,
    ),
    (
        "cache-references",
        "cache-references",
        b::PERF_COUNT_HW_CACHE_REFERENCES,
    ),
    (
        "cache-misses",
        "cache-misses",
        b::PERF_COUNT_HW_CACHE_MISSES,
    ),
    ("branches", "branches", b::PERF_COUNT_HW_BRANCH_INSTRUCTIONS),
    (
        "branch-instructions",
        "branches",
        b::PERF_COUNT_HW_BRANCH_INSTRUCTIONS,
    ),
    (
        "branch-misses",
        "branch-misses",
        b::PERF_COUNT_HW_BRANCH_MISSES,
    ),
    ("bus-cycles", "bus-cycles", b::PERF_COUNT_HW_BUS_CYCLES),
    ("ref-cycles", "ref-cycles", b::PERF_COUNT_HW_REF_CPU_CYCLES),
];

/// A software or hardware event `parse_event_list` accepts, under its canonical name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Builtin {
    pub name: &'static str,
    /// Its other names (`faults` for `page-faults`).
    pub aliases: Vec<&'static str>,
    /// `Software` or `Hardware`.
    pub kind: EventKind,
}

/// Every software event, then every hardware event, in the tables' order, aliases gathered.
pub fn builtin_events() -> Vec<Builtin> {
    let mut out: Vec<Builtin> = Vec::new();
    for (table, hardware) in [(SOFTWARE, false), (HARDWARE, true)] {
        for &(name, canonical, config) in table {
            if let Some(b) = out.iter_mut().find(|b| b.name == canonical) {
                b.aliases.push(name);
                continue;
            }
            let config = u64::from(config);
            out.push(Builtin {
                name: canonical,
                aliases: Vec::new(),
                kind: if hardware {
                    EventKind::Hardware { config }
                } else {
                    EventKind::Software { config }
                },
            });
        }
    }
    out
}

/// Every software and hardware name `parse_event_list` accepts, aliases included.
pub fn known_names() -> Vec<&'static str> {
    SOFTWARE
        .iter()
        .chain(HARDWARE)
        .map(|&(name, _, _)| name)
        .collect()
}

/// Parses a comma-separated event list such as `page-faults,syscalls:sys_enter_brk`
/// (commas inside `/terms/` belong to the terms).
pub fn parse_event_list(list: &str) -> Result<Vec<EventSpec>, EventError> {
    parse_event_list_with(list, &mut |_| short::ShortMatch::Nothing)
}

/// As `parse_event_list`, asking `lookup` what a name that is no event here means among
/// the tracepoints (`-e brk`).
pub fn parse_event_list_with(
    list: &str,
    lookup: &mut dyn FnMut(&str) -> short::ShortMatch,
) -> Result<Vec<EventSpec>, EventError> {
    if list.trim().is_empty() {
        return Err(EventError::EmptyList);
    }
    split_list(list)
        .into_iter()
        .map(|item| {
            let item = item.trim();
            if item.is_empty() {
                Err(EventError::EmptyItem {
                    list: list.to_string(),
                })
            } else {
                parse_event(item, lookup)
            }
        })
        .collect()
}

/// Splits at the commas outside `/.../` and, in a probe spec (`u:/lib/libc.so.6:malloc`,
/// whose slashes are a path's), outside its `(arguments)`.
fn split_list(list: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut in_terms, mut parens) = (0, false, 0u32);
    let mut probe = crate::probes::is_probe_item(list);
    for (i, c) in list.char_indices() {
        match c {
            '/' if !probe => in_terms = !in_terms,
            '(' if probe => parens += 1,
            ')' if probe => parens = parens.saturating_sub(1),
            ',' if !in_terms && parens == 0 => {
                out.push(&list[start..i]);
                start = i + 1;
                probe = crate::probes::is_probe_item(&list[start..]);
            }
            _ => {}
        }
    }
    out.push(&list[start..]);
    out
}

fn parse_event(
    item: &str,
    lookup: &mut dyn FnMut(&str) -> short::ShortMatch,
) -> Result<EventSpec, EventError> {
    if crate::probes::is_probe_item(item) {
        let probe = crate::probes::parse(item)?;
        let kind = EventKind::Probe(Box::new(probe));
        return Ok(EventSpec::new(item.to_string(), kind, Modifiers::default()));
    }
    let Some((base, rest)) = item.split_once('/') else {
        return parse_plain(item, lookup);
    };
    let mut spec = parse_plain(base, lookup)?;
    let (terms, after) = rest
        .split_once('/')
        .ok_or_else(|| EventError::UnterminatedTerms {
            event: item.to_string(),
        })?;
    spec.terms = parse_terms(item, terms)?;
    // perf takes modifiers right after the terms: `cycles/period=9/u` (or `:u`).
    let suffix = after.strip_prefix(':').unwrap_or(after);
    if !suffix.is_empty() {
        if spec.is_tracepoint() {
            return Err(EventError::TracepointModifier {
                event: item.to_string(),
            });
        }
        if !is_modifier_string(suffix) {
            return Err(EventError::BadModifier {
                event: item.to_string(),
                modifier: suffix.to_string(),
            });
        }
        spec.modifiers = parse_modifiers(item, suffix)?;
    }
    Ok(spec)
}

/// `period=10,call-graph=dwarf,4096,name=x`: a bare number after `call-graph=dwarf` is its
/// stack size, as in perf's `--call-graph dwarf,4096`.
fn parse_terms(event: &str, text: &str) -> Result<Terms, EventError> {
    let bad = |term: &str, reason: String| EventError::BadTerm {
        event: event.to_string(),
        term: term.to_string(),
        reason,
    };
    let number = |term: &str, v: &str| -> Result<u64, EventError> {
        match v.parse::<u64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(bad(term, format!("`{v}` is not a positive number"))),
        }
    };
    let stack_size = |term: &str, v: &str| -> Result<CallGraph, EventError> {
        let n = number(term, v)?;
        if n > u64::from(MAX_STACK_BYTES) {
            return Err(bad(term, format!("at most {MAX_STACK_BYTES} bytes")));
        }
        Ok(CallGraph::Dwarf {
            stack_bytes: (n as u32).div_ceil(8) * 8,
        })
    };
    let mut terms = Terms::default();
    for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let Some((key, value)) = term.split_once('=') else {
            if term.bytes().all(|c| c.is_ascii_digit())
                && matches!(terms.call_graph, Some(CallGraph::Dwarf { .. }))
            {
                terms.call_graph = Some(stack_size(term, term)?);
                continue;
            }
            return Err(bad(term, format!("expected one of {TERMS}")));
        };
        match key {
            "period" => terms.period = Some(Period::Count(number(term, value)?)),
            "freq" => terms.period = Some(Period::Frequency(number(term, value)?)),
            "call-graph" => {
                terms.call_graph = Some(match value {
                    "fp" => CallGraph::Fp,
                    "dwarf" => CallGraph::Dwarf { stack_bytes: 8192 },
                    "no" | "none" => CallGraph::None,
                    _ => return Err(bad(term, "expected fp, dwarf or no".to_string())),
                })
            }
            "stack-size" => terms.call_graph = Some(stack_size(term, value)?),
            "max-stack" => {
                let n = number(term, value)?;
                terms.max_stack =
                    Some(u16::try_from(n).map_err(|_| bad(term, "at most 65535 frames".into()))?);
            }
            "name" if !value.is_empty() && !value.contains([' ', ',', '/']) => {
                terms.label = Some(value.to_string())
            }
            "name" => {
                return Err(bad(
                    term,
                    "a label without spaces, commas or slashes".into(),
                ));
            }
            _ => return Err(bad(term, format!("unknown term; memperf takes {TERMS}"))),
        }
    }
    Ok(terms)
}

fn parse_plain(
    item: &str,
    lookup: &mut dyn FnMut(&str) -> short::ShortMatch,
) -> Result<EventSpec, EventError> {
    if let Some((base, suffix)) = item.split_once(':') {
        if let Some((name, kind)) = lookup_fixed(base)? {
            if suffix.contains(':') || !is_modifier_string(suffix) {
                return Err(EventError::BadModifier {
                    event: item.to_string(),
                    modifier: suffix.to_string(),
                });
            }
            let modifiers = parse_modifiers(item, suffix)?;
            return Ok(EventSpec::new(name, kind, modifiers));
        }
        return parse_tracepoint(item, base, suffix);
    }
    if let Some((name, kind)) = lookup_fixed(item)? {
        return Ok(EventSpec::new(name, kind, Modifiers::default()));
    }
    match is_tracepoint_part(item).then(|| lookup(item)) {
        Some(short::ShortMatch::One { system, name }) => {
            parse_tracepoint(&format!("{system}:{name}"), &system, &name)
        }
        Some(short::ShortMatch::Many(candidates)) => Err(EventError::Ambiguous {
            name: item.to_string(),
            candidates,
        }),
        _ => Err(EventError::Unknown {
            name: item.to_string(),
            suggestions: suggest(item, known_names().into_iter().map(String::from)),
        }),
    }
}

/// Software, hardware or raw lookup; `Ok(None)` when the name is none of those.
fn lookup_fixed(name: &str) -> Result<Option<(String, EventKind)>, EventError> {
    if let Some(&(_, canonical, config)) = SOFTWARE.iter().find(|e| e.0 == name) {
        let kind = EventKind::Software {
            config: u64::from(config),
        };
        return Ok(Some((canonical.to_string(), kind)));
    }
    if let Some(&(_, canonical, config)) = HARDWARE.iter().find(|e| e.0 == name) {
        let kind = EventKind::Hardware {
            config: u64::from(config),
        };
        return Ok(Some((canonical.to_string(), kind)));
    }
    if let Some(hex) = name.strip_prefix('r')
        && !hex.is_empty()
        && hex.bytes().all(|c| c.is_ascii_hexdigit())
    {
        let config = u64::from_str_radix(hex, 16).map_err(|_| EventError::BadRaw {
            event: name.to_string(),
        })?;
        let canonical = format!("r{}", hex.to_ascii_lowercase());
        return Ok(Some((canonical, EventKind::Raw { config })));
    }
    Ok(None)
}

fn is_modifier_string(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|c| matches!(c, b'u' | b'k' | b'p'))
}

/// perf's rule: naming any of `u`/`k` excludes the privilege levels not named.
fn parse_modifiers(event: &str, suffix: &str) -> Result<Modifiers, EventError> {
    let user = suffix.contains('u');
    let kernel = suffix.contains('k');
    let precise = suffix.bytes().filter(|&c| c == b'p').count();
    if precise > 3 {
        return Err(EventError::BadModifier {
            event: event.to_string(),
            modifier: suffix.to_string(),
        });
    }
    let any_level = user || kernel;
    Ok(Modifiers {
        exclude_user: any_level && !user,
        exclude_kernel: any_level && !kernel,
        // At most 3, checked above.
        precise: precise as u8,
    })
}

/// Letters, digits, `_`, `-`, and the glob characters `*`, `?`, `[`, `]`.
fn is_tracepoint_part(s: &str) -> bool {
    !s.is_empty()
        && s.bytes().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'*' | b'?' | b'[' | b']')
        })
}

/// Whether a tracepoint name part is a glob.
fn parse_tracepoint(item: &str, system: &str, name: &str) -> Result<EventSpec, EventError> {
    if let Some((_, extra)) = name.split_once(':') {
        if is_tracepoint_part(system) && is_modifier_string(extra) {
            return Err(EventError::TracepointModifier {
                event: item.to_string(),
            });
        }
        return Err(EventError::BadTracepoint {
            event: item.to_string(),
        });
    }
    if !is_tracepoint_part(system) || !is_tracepoint_part(name) {
        return Err(EventError::BadTracepoint {
            event: item.to_string(),
        });
    }
    let kind = EventKind::Tracepoint {
        system: system.to_string(),
        name: name.to_string(),
    };
    Ok(EventSpec::new(item.to_string(), kind, Modifiers::default()))
}

impl EventSpec {
    /// An event without terms or filter.
    pub fn new(name: String, kind: EventKind, modifiers: Modifiers) -> EventSpec {
        EventSpec {
            name,
            kind,
            modifiers,
            terms: Terms::default(),
            filter: None,
        }
    }

    /// A tracepoint whose system or name is a glob, to expand against tracefs.
    pub fn glob(&self) -> Option<(&str, &str)> {
        match &self.kind {
            EventKind::Tracepoint { system, name } if is_glob(system) || is_glob(name) => {
                Some((system, name))
            }
            _ => None,
        }
    }

    pub fn is_tracepoint(&self) -> bool {
        matches!(self.kind, EventKind::Tracepoint { .. })
    }

    /// Whether `--filter` applies: tracepoints, and user probes (their fetch arguments are
    /// fields; placed through tracefs, a probe is a tracepoint).
    pub fn takes_filter(&self) -> bool {
        matches!(
            self.kind,
            EventKind::Tracepoint { .. } | EventKind::Probe(_)
        )
    }

    /// Hardware or raw PMU events; these need a CPU PMU.
    pub fn is_hardware(&self) -> bool {
        matches!(
            self.kind,
            EventKind::Hardware { .. } | EventKind::Raw { .. }
        )
    }

    /// Every event for events that are rare and meaningful one by one; 4000 Hz for clocks and
    /// hardware counters.
    pub fn default_period(&self) -> Period {
        match self.kind {
            EventKind::Tracepoint { .. } | EventKind::Uprobe { .. } | EventKind::Probe(_) => {
                Period::Count(1)
            }
            EventKind::Hardware { .. } | EventKind::Raw { .. } => Period::Frequency(4000),
            EventKind::Software { config } => {
                let clock = config == u64::from(b::PERF_COUNT_SW_CPU_CLOCK)
                    || config == u64::from(b::PERF_COUNT_SW_TASK_CLOCK);
                if clock {
                    Period::Frequency(4000)
                } else {
                    Period::Count(1)
                }
            }
        }
    }

    /// The name with its modifiers, as perf prints it: `cycles:upp`.
    pub fn full_name(&self) -> String {
        let m = &self.modifiers;
        let mut suffix = String::new();
        if m.exclude_kernel && !m.exclude_user {
            suffix.push('u');
        }
        if m.exclude_user && !m.exclude_kernel {
            suffix.push('k');
        }
        for _ in 0..m.precise {
            suffix.push('p');
        }
        if suffix.is_empty() {
            self.name.clone()
        } else {
            format!("{}:{suffix}", self.name)
        }
    }
}

impl fmt::Display for EventSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.full_name())
    }
}

/// The candidates closest to `unknown` by edit distance, best first, at most 5.
///
/// For `system:name` candidates the bare `name` is compared too, so `sys_enter_brk` finds
/// `syscalls:sys_enter_brk`.
pub fn suggest(unknown: &str, candidates: impl IntoIterator<Item = String>) -> Vec<String> {
    let len = unknown.chars().count();
    let limit = (len / 2).max(2);
    let mut scored: Vec<(usize, String)> = candidates
        .into_iter()
        .filter_map(|cand| {
            let mut d = edit_distance(unknown, &cand);
            if !unknown.contains(':')
                && let Some((_, bare)) = cand.split_once(':')
            {
                d = d.min(edit_distance(unknown, bare));
            }
            (d <= limit && cand != unknown).then_some((d, cand))
        })
        .collect();
    scored.sort();
    scored.dedup_by(|a, b| a.1 == b.1);
    scored.into_iter().take(5).map(|(_, c)| c).collect()
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let subst = prev[j] + usize::from(ca != cb);
            cur[j + 1] = subst.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests;
