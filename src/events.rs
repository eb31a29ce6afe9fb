//! Event-spec parsing as perf takes them: `page-faults`, `syscalls:sys_enter_brk`,
//! `cache-misses:pp`, `r1a8`, globs (`kmem:mm_page_*`) and per-event terms
//! (`page-faults/period=10/`, `kmem:kmalloc/call-graph=fp,max-stack=8,name=km/`).
//!
//! This module only understands the syntax and the fixed software and hardware tables; whether
//! a tracepoint exists, and what a glob names, is decided later against tracefs
//! (`sys::tracefs`, `live::open::resolve_events`); a name that is no event here may be
//! looked up among the tracepoints by the caller (`short`, `parse_event_list_with`).

pub mod short;

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
/// Why glob `pattern` is malformed (a `[` class never closed), `None` when it is not.
pub fn glob_error(pattern: &str) -> Option<String> {
    let b = pattern.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'[' {
            let mut j = i + 1;
            if matches!(b.get(j), Some(b'!' | b'^')) {
                j += 1;
            }
            // A `]` first in the class is one of its characters.
            if b.get(j) == Some(&b']') {
                j += 1;
            }
            match b[j.min(b.len())..].iter().position(|&c| c == b']') {
                Some(k) => i = j + k,
                None => return Some(format!("the `[` at offset {i} is never closed by a `]`")),
            }
        }
        i += 1;
    }
    None
}

pub fn is_glob(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// The fields a tracepoint filter compares (`len >= 1048576 && (flags & 0x20)` names `len`
/// and `flags`): each identifier just before a comparison operator, outside quotes.
pub fn filter_fields(expr: &str) -> Vec<String> {
    let b = expr.as_bytes();
    let mut out = Vec::new();
    let mut last_ident: Option<String> = None;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'"' || c == b'\'' {
            let end = b[i + 1..]
                .iter()
                .position(|&q| q == c)
                .map_or(b.len(), |p| i + 2 + p);
            i = end;
            last_ident = None;
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            last_ident = Some(expr[start..i].to_string());
            continue;
        }
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let op = match (c, b.get(i + 1)) {
            (b'=' | b'!' | b'<' | b'>', Some(b'=')) => 2,
            (b'&', Some(b'&')) | (b'|', Some(b'|')) => {
                last_ident = None;
                i += 2;
                continue;
            }
            (b'<' | b'>' | b'&' | b'~', _) => 1,
            _ => 0,
        };
        if op > 0 {
            if let Some(f) = last_ident.take() {
                out.push(f);
            }
            i += op;
        } else {
            last_ident = None;
            i += 1;
        }
    }
    out.dedup();
    out
}

/// Shell-style matching of `name` against `pattern` (`*`, `?`, `[abc]`, `[a-z]`, `[!a]`).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    fn class(p: &[u8], c: u8) -> Option<(bool, usize)> {
        // p starts after '['; returns (matched, length including ']').
        let (neg, mut i) = match p.first() {
            Some(b'!' | b'^') => (true, 1),
            _ => (false, 0),
        };
        let mut hit = false;
        let start = i;
        while i < p.len() && (p[i] != b']' || i == start) {
            if i + 2 < p.len() && p[i + 1] == b'-' && p[i + 2] != b']' {
                hit |= (p[i]..=p[i + 2]).contains(&c);
                i += 3;
            } else {
                hit |= p[i] == c;
                i += 1;
            }
        }
        (i < p.len()).then_some((hit != neg, i + 1))
    }
    fn go(p: &[u8], n: &[u8]) -> bool {
        match p.first() {
            None => n.is_empty(),
            Some(b'*') => (0..=n.len()).any(|k| go(&p[1..], &n[k..])),
            Some(b'?') => !n.is_empty() && go(&p[1..], &n[1..]),
            Some(b'[') => match (n.first(), class(&p[1..], *n.first().unwrap_or(&0))) {
                (Some(_), Some((true, len))) => go(&p[1 + len..], &n[1..]),
                (Some(_), Some((false, _))) | (None, _) => false,
                (Some(&c), None) => c == b'[' && go(&p[1..], &n[1..]),
            },
            Some(&c) => n.first() == Some(&c) && go(&p[1..], &n[1..]),
        }
    }
    go(pattern.as_bytes(), name.as_bytes())
}

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
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    fn one(s: &str) -> EventSpec {
        match parse_event_list(s) {
            Ok(mut v) if v.len() == 1 => v.remove(0),
            other => panic!("expected one event from {s:?}, got {other:?}"),
        }
    }

    #[test]
    fn software_names_and_aliases() {
        let e = one("faults");
        assert_eq!(e.name, "page-faults");
        assert_eq!(e.kind, EventKind::Software { config: 2 });
        assert_eq!(one("cs").name, "context-switches");
        let builtins = builtin_events();
        let pf = builtins.iter().find(|b| b.name == "page-faults").unwrap();
        assert_eq!(pf.aliases, ["faults"]);
        let cycles = builtins.iter().find(|b| b.name == "cycles").unwrap();
        assert_eq!(cycles.aliases, ["cpu-cycles"]);
        assert!(matches!(cycles.kind, EventKind::Hardware { .. }));
        let names: usize = builtins.iter().map(|b| 1 + b.aliases.len()).sum();
        assert_eq!(names, known_names().len());
        assert_eq!(one("migrations").name, "cpu-migrations");
        assert_eq!(one("major-faults").kind, EventKind::Software { config: 6 });
        assert_eq!(one("dummy").kind, EventKind::Software { config: 9 });
        assert!(!e.is_hardware() && !e.is_tracepoint());
    }

    #[test]
    fn probe_specs_keep_their_paths_and_argument_lists_whole() {
        let specs = parse_event_list(
            "u:/lib/x86_64-linux-gnu/libc.so.6:malloc(size=%di,n=%si),r:libc:free,page-faults,sdt:./app:p:n",
        )
        .unwrap();
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "u:/lib/x86_64-linux-gnu/libc.so.6:malloc(size=%di,n=%si)",
                "r:libc:free",
                "page-faults",
                "sdt:./app:p:n"
            ]
        );
        match &specs[0].kind {
            EventKind::Probe(p) => {
                assert_eq!(p.target, "/lib/x86_64-linux-gnu/libc.so.6");
                assert_eq!(p.args.len(), 2);
            }
            other => panic!("{other:?}"),
        }
        assert!(specs[0].takes_filter() && !specs[0].is_tracepoint());
        assert_eq!(specs[1].default_period(), Period::Count(1));
        assert!(matches!(
            parse_event_list("u:libc:malloc(size=%xx)"),
            Err(EventError::Probe(_))
        ));
    }

    #[test]
    fn list_with_tracepoint() {
        let v = parse_event_list("page-faults, syscalls:sys_enter_brk").unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[1].name, "syscalls:sys_enter_brk");
        assert_eq!(
            v[1].kind,
            EventKind::Tracepoint {
                system: "syscalls".into(),
                name: "sys_enter_brk".into()
            }
        );
        assert!(v[1].is_tracepoint());
        // A tracepoint whose name happens to look like a modifier is still a tracepoint.
        assert!(one("kmem:kp").is_tracepoint());
    }

    #[test]
    fn hardware_with_modifiers() {
        let e = one("cache-misses:pp");
        assert_eq!(e.name, "cache-misses");
        assert_eq!(e.kind, EventKind::Hardware { config: 3 });
        assert_eq!(e.modifiers.precise, 2);
        assert!(!e.modifiers.exclude_user && !e.modifiers.exclude_kernel);
        assert!(e.is_hardware());
        assert_eq!(e.full_name(), "cache-misses:pp");

        let u = one("cycles:u");
        assert!(u.modifiers.exclude_kernel && !u.modifiers.exclude_user);
        assert_eq!(u.to_string(), "cycles:u");
        let k = one("page-faults:k");
        assert!(k.modifiers.exclude_user && !k.modifiers.exclude_kernel);
        let uk = one("instructions:ukppp");
        assert_eq!(
            uk.modifiers,
            Modifiers {
                exclude_user: false,
                exclude_kernel: false,
                precise: 3
            }
        );
        assert!(matches!(
            parse_event_list("cycles:pppp"),
            Err(EventError::BadModifier { .. })
        ));
        assert!(matches!(
            parse_event_list("cycles:x"),
            Err(EventError::BadModifier { .. })
        ));
    }

    #[test]
    fn raw_events() {
        let e = one("r1A8");
        assert_eq!(e.kind, EventKind::Raw { config: 0x1a8 });
        assert_eq!(e.name, "r1a8");
        assert!(e.is_hardware());
        assert!(one("r01c2:u").modifiers.exclude_kernel);
        assert!(matches!(
            parse_event_list("r12345678901234567"),
            Err(EventError::BadRaw { .. })
        ));
    }

    #[test]
    fn tracepoint_errors() {
        assert_eq!(
            parse_event_list("kmem:kmalloc:u"),
            Err(EventError::TracepointModifier {
                event: "kmem:kmalloc:u".into()
            })
        );
        for bad in ["kmem:", ":kmalloc", "kmem:../x", "a:b:c"] {
            assert!(
                matches!(parse_event_list(bad), Err(EventError::BadTracepoint { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn empty_lists_and_items() {
        assert_eq!(parse_event_list(""), Err(EventError::EmptyList));
        assert_eq!(parse_event_list("  "), Err(EventError::EmptyList));
        let err = parse_event_list("page-faults,,cs").unwrap_err();
        assert_eq!(
            err.to_string(),
            "empty event name in list `page-faults,,cs`"
        );
    }

    #[test]
    fn unknown_event_message() {
        let err = parse_event_list("page-fault").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown event `page-fault`; did you mean `page-faults`, `major-faults`?"
        );
        let err = parse_event_list("zzzzzzzzzzzzzzzzzzzz").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown event `zzzzzzzzzzzzzzzzzzzz`; run `memperf list` to see the events available here"
        );
    }

    #[test]
    fn suggestions() {
        let tps = [
            "syscalls:sys_enter_brk",
            "syscalls:sys_exit_brk",
            "kmem:kmalloc",
        ]
        .map(String::from);
        assert_eq!(
            suggest("sys_enter_brk", tps.clone()),
            vec!["syscalls:sys_enter_brk", "syscalls:sys_exit_brk"]
        );
        assert_eq!(suggest("kmem:kmaloc", tps.clone()), vec!["kmem:kmalloc"]);
        assert!(suggest("completely-different", tps).is_empty());
        let many = (0..10).map(|i| format!("ev{i}"));
        assert_eq!(suggest("ev", many).len(), 5);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
    }

    #[test]
    fn terms_globs_and_filter_fields() {
        let v = parse_event_list(
            "page-faults/period=10/u,kmem:kmalloc/call-graph=dwarf,4096,max-stack=8,name=km/,kmem:mm_page_*",
        )
        .unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(v[0].terms.period, Some(Period::Count(10)));
        assert!(v[0].modifiers.exclude_kernel);
        assert_eq!(
            v[1].terms.call_graph,
            Some(CallGraph::Dwarf { stack_bytes: 4096 })
        );
        assert_eq!(v[1].terms.max_stack, Some(8));
        assert_eq!(v[1].terms.label.as_deref(), Some("km"));
        assert_eq!(v[2].glob(), Some(("kmem", "mm_page_*")));
        assert_eq!(
            one("cycles/freq=99/").terms.period,
            Some(Period::Frequency(99))
        );
        assert_eq!(
            one("faults/call-graph=fp/").terms.call_graph,
            Some(CallGraph::Fp)
        );
        assert!(matches!(
            parse_event_list("page-faults/perio=1/"),
            Err(EventError::BadTerm { .. })
        ));
        assert!(matches!(
            parse_event_list("page-faults/period=0/"),
            Err(EventError::BadTerm { .. })
        ));
        assert!(matches!(
            parse_event_list("page-faults/period=1"),
            Err(EventError::UnterminatedTerms { .. })
        ));
        assert!(matches!(
            parse_event_list("kmem:kmalloc/period=2/u"),
            Err(EventError::TracepointModifier { .. })
        ));
        assert!(glob_match("mm_page_*", "mm_page_alloc"));
        assert!(glob_match("*mmap*", "sys_enter_mmap"));
        assert!(glob_match("sys_[ex]*_brk", "sys_exit_brk"));
        assert!(glob_match("sys_[!x]*", "sys_enter_brk"));
        assert!(!glob_match("sys_[!e]*", "sys_enter_brk"));
        assert!(glob_match("kmallo?", "kmalloc"));
        assert!(!glob_match("mm_page_*", "kmalloc"));
        assert_eq!(
            filter_fields("len >= 1048576 && (flags & 0x20) || comm == \"a>b\""),
            ["len", "flags", "comm"]
        );
        assert_eq!(filter_fields("!(bytes_alloc<4096)"), ["bytes_alloc"]);
        assert_eq!(filter_fields("name ~ \"dentry*\""), ["name"]);
    }

    #[test]
    fn default_periods() {
        assert_eq!(one("page-faults").default_period(), Period::Count(1));
        assert_eq!(one("minor-faults").default_period(), Period::Count(1));
        assert_eq!(one("cs").default_period(), Period::Count(1));
        assert_eq!(one("kmem:kmalloc").default_period(), Period::Count(1));
        assert_eq!(one("cpu-clock").default_period(), Period::Frequency(4000));
        assert_eq!(one("task-clock").default_period(), Period::Frequency(4000));
        assert_eq!(one("cycles").default_period(), Period::Frequency(4000));
        assert_eq!(one("r1a8").default_period(), Period::Frequency(4000));
    }

    #[test]
    fn known_names_cover_tables() {
        let names = known_names();
        assert!(names.contains(&"page-faults") && names.contains(&"ref-cycles"));
        assert!(names.contains(&"cs"));
        assert_eq!(names.len(), SOFTWARE.len() + HARDWARE.len());
    }
}
