//! Event specs resolved against this kernel: tracepoints through tracefs (globs expanded,
//! filters checked against the format's fields), user probes placed (`live::probes`), and
//! the notes that say what a glob became.

use anyhow::{Context, Result, anyhow, bail};
use perf_event_open_sys::bindings::{
    PERF_TYPE_HARDWARE, PERF_TYPE_RAW, PERF_TYPE_SOFTWARE, PERF_TYPE_TRACEPOINT,
};

use super::ResolvedEvent;
use crate::config::record::Target;
use crate::events::{self, EventKind, EventSpec};
use crate::live::probes::quoted;
use crate::perfdata::tracing_data::EventFormat;
use crate::procfs;
use crate::sys::tracefs::Tracefs;

/// Resolves tracepoints through tracefs (mounting it when needed), expands tracepoint globs
/// (`kmem:mm_page_*`) into the events tracefs lists, and names each event by its `name=`
/// label where it has one.
pub fn resolve_events(specs: &[EventSpec]) -> Result<(Vec<ResolvedEvent>, Option<Tracefs>)> {
    resolve_events_in(specs, &Target::SystemWide)
}

/// `resolve_events`, placing user probes (`u:`, `r:`, `sdt:`, see `live::probes`) with
/// library names looked up first in what `target`'s processes map.
pub fn resolve_events_in(
    specs: &[EventSpec],
    target: &Target,
) -> Result<(Vec<ResolvedEvent>, Option<Tracefs>)> {
    let mut tracefs: Option<Tracefs> = None;
    let mut out = Vec::new();
    for spec in specs {
        if let EventKind::Probe(probe) = &spec.kind {
            let pids: Vec<u32> = match target {
                Target::Pids(p) => p.clone(),
                Target::Tids(t) => t.iter().filter_map(|&t| procfs::tgid(t).ok()).collect(),
                _ => Vec::new(),
            };
            let first = out.len();
            let sites = super::super::probes::place(spec, probe, &pids, &mut tracefs)?;
            for (i, (one, placed)) in sites.into_iter().enumerate() {
                let mut ev = resolve_one(&one, &mut tracefs)?;
                ev.probe = Some(placed);
                ev.first_site = (i > 0).then_some(first);
                if let Some(label) = &spec.terms.label {
                    ev.spec.name = label.clone();
                }
                out.push(ev);
            }
            continue;
        }
        let expanded;
        let (from, each): (Option<String>, &[EventSpec]) = match spec.glob() {
            Some((system, name)) => {
                if tracefs.is_none() {
                    tracefs = Some(Tracefs::locate_or_mount().with_context(|| {
                        format!("failed to expand tracepoint glob `{}`", spec.name)
                    })?);
                }
                let tfs = tracefs
                    .as_ref()
                    .ok_or_else(|| anyhow!("tracefs unavailable"))?;
                expanded = expand_glob(spec, system, name, tfs)?;
                (Some(spec.name.clone()), &expanded)
            }
            None => (None, std::slice::from_ref(spec)),
        };
        for spec in each {
            let mut ev = resolve_one(spec, &mut tracefs)?;
            ev.glob = from.clone();
            if let Some(label) = &spec.terms.label {
                ev.spec.name = label.clone();
            }
            out.push(ev);
        }
    }
    Ok((out, tracefs))
}

/// The tracepoints `system:name` (globs) names, each a copy of `spec`; none is an error
/// that names the subsystems (or the events) closest to what was asked.
fn expand_glob(
    spec: &EventSpec,
    system: &str,
    name: &str,
    tfs: &Tracefs,
) -> Result<Vec<EventSpec>> {
    let all = tfs
        .list_events()
        .with_context(|| format!("failed to list the tracepoints for `{}`", spec.name))?;
    let matched: Vec<EventSpec> = all
        .iter()
        .filter_map(|e| e.split_once(':'))
        .filter(|(s, n)| events::glob_match(system, s) && events::glob_match(name, n))
        .map(|(s, n)| {
            let mut one = spec.clone();
            one.name = format!("{s}:{n}");
            one.kind = EventKind::Tracepoint {
                system: s.to_string(),
                name: n.to_string(),
            };
            one
        })
        .collect();
    if matched.is_empty() {
        let mut systems: Vec<String> = all
            .iter()
            .filter_map(|e| Some(e.split_once(':')?.0.to_string()))
            .collect();
        systems.dedup();
        let in_system: Vec<String> = all
            .iter()
            .filter(|e| {
                e.split_once(':')
                    .is_some_and(|(s, _)| events::glob_match(system, s))
            })
            .cloned()
            .collect();
        if in_system.is_empty() {
            let bare: String = system.chars().filter(|c| !"*?[]".contains(*c)).collect();
            let near = events::suggest(&bare, systems);
            let hint = if near.is_empty() {
                "; `memperf list` shows them all".to_string()
            } else {
                format!("; subsystems near it: {}", quoted(&near))
            };
            bail!(
                "no tracepoint subsystem matches `{system}` (in `{}`){hint}",
                spec.name
            );
        }
        let shown: Vec<String> = in_system.iter().take(12).cloned().collect();
        bail!(
            "no tracepoint matches `{}`; {} has {} events, e.g. {}",
            spec.name,
            system,
            in_system.len(),
            quoted(&shown)
        );
    }
    if spec.terms.label.is_some() && matched.len() > 1 {
        bail!(
            "`{}` names {} tracepoints: a `name=` label would give them all one name",
            spec.name,
            matched.len()
        );
    }
    Ok(matched)
}

fn resolve_one(spec: &EventSpec, tracefs: &mut Option<Tracefs>) -> Result<ResolvedEvent> {
    let (mut config1, mut config2) = (0, 0);
    let (type_, config) = match &spec.kind {
        EventKind::Uprobe {
            type_,
            config,
            config1: c1,
            config2: c2,
        } => {
            (config1, config2) = (*c1, *c2);
            (*type_, *config)
        }
        EventKind::Probe(_) => bail!("probe `{}` was not placed", spec.name),
        EventKind::Software { config } => (PERF_TYPE_SOFTWARE, *config),
        EventKind::Hardware { config } => (PERF_TYPE_HARDWARE, *config),
        EventKind::Raw { config } => (PERF_TYPE_RAW, *config),
        EventKind::Tracepoint { system, name } => {
            if tracefs.is_none() {
                *tracefs = Some(
                    Tracefs::locate_or_mount()
                        .with_context(|| format!("failed to open tracepoint `{}`", spec.name))?,
                );
            }
            let tfs = tracefs
                .as_ref()
                .ok_or_else(|| anyhow!("tracefs unavailable"))?;
            match tfs.event_id(system, name) {
                Ok(id) => (PERF_TYPE_TRACEPOINT, id),
                Err(e) => {
                    let known = tfs.list_events().unwrap_or_default();
                    let near = events::suggest(&spec.name, known);
                    let hint = if near.is_empty() {
                        String::new()
                    } else {
                        format!("; did you mean {}?", quoted(&near))
                    };
                    bail!("failed to open tracepoint `{}`: {e}{hint}", spec.name);
                }
            }
        }
    };
    if let (Some(f), EventKind::Tracepoint { system, name }, Some(tfs)) =
        (&spec.filter, &spec.kind, tracefs.as_ref())
    {
        check_filter(f, spec, system, name, tfs)?;
    }
    let filter = match &spec.filter {
        Some(f) => Some(
            std::ffi::CString::new(f.as_str())
                .map_err(|_| anyhow!("the filter of `{}` has a NUL byte", spec.name))?,
        ),
        None => None,
    };
    Ok(ResolvedEvent {
        spec: spec.clone(),
        type_,
        config,
        config1,
        config2,
        sampling: None,
        filter,
        glob: None,
        attr: None,
        ids: Vec::new(),
        probe: None,
        sample_extra: 0,
        leader: None,
        counting: false,
        first_site: None,
    })
}

/// The fields a filter names must be the tracepoint's (or the generic `common_*`, `comm`,
/// `cpu`): the kernel's EINVAL does not say which one it did not know.
fn check_filter(
    filter: &str,
    spec: &EventSpec,
    system: &str,
    name: &str,
    tfs: &Tracefs,
) -> Result<()> {
    let Ok(text) = tfs.format(system, name) else {
        return Ok(());
    };
    let Some(format) = EventFormat::parse(&String::from_utf8_lossy(&text)) else {
        return Ok(());
    };
    for field in events::filter_fields(filter) {
        let generic = matches!(
            field.as_str(),
            "comm" | "COMM" | "cpu" | "CPU" | "common_cpu"
        );
        if !generic && format.field(&field).is_none() {
            let names: Vec<String> = format
                .fields
                .iter()
                .map(|f| f.name.clone())
                .filter(|n| !n.starts_with("common_"))
                .collect();
            bail!(
                "the filter `{filter}` names `{field}`, which `{}` has not; its fields: {} (and common_pid, comm, cpu)",
                spec.name,
                names.join(", ")
            );
        }
    }
    Ok(())
}

/// What each tracepoint glob expanded to, for the summary.
pub(crate) fn glob_notes(events: &[ResolvedEvent]) -> Vec<String> {
    const SHOWN: usize = 20;
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for ev in events {
        let Some(glob) = &ev.glob else { continue };
        match groups.iter_mut().find(|(g, _)| g == glob) {
            Some((_, names)) => names.push(&ev.spec.name),
            None => groups.push((glob, vec![&ev.spec.name])),
        }
    }
    groups
        .into_iter()
        .map(|(glob, names)| {
            let more = names.len().saturating_sub(SHOWN);
            let mut list = names[..names.len().min(SHOWN)].join(", ");
            if more > 0 {
                list.push_str(&format!(" and {more} more"));
            }
            format!("`{glob}` is {} tracepoints: {list}", names.len())
        })
        .collect()
}
