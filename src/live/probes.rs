//! Placing the user's probes (`u:`, `r:`, `sdt:` specs, `probes`) when the events are
//! resolved: each becomes a tracefs `uprobe_events` probe in the group `memperf_<pid>` (a
//! tracepoint whose payload carries the fetch arguments), or, where `uprobe_events` cannot
//! be written (or `MEMPERF_PROBE_VIA=pmu`), an event on the uprobe PMU (4.17+; no fetch
//! arguments). A `Placed` removes its probe when the last event holding it is dropped; probes
//! of an earlier run killed before it could are removed first (`sys::uprobe::remove_stale`
//! takes the groups whose pid is no running memperf now, never another live memperf's).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};

use crate::events::{self, EventKind, EventSpec};
use crate::probes::resolve::{self, ResolveError};
use crate::probes::{FetchArg, ProbeKind, ProbeSpec, usdt};
use crate::sys::tracefs::Tracefs;
use crate::sys::uprobe::{PmuPath, ProbeDef, UprobeGroup, UprobePmu};

/// What keeps a placed probe alive: its tracefs definition (removed on drop) or the path
/// the uprobe PMU's `config1` points at.
#[derive(Debug)]
pub enum Placed {
    Tracefs(UprobeGroup),
    Pmu(PmuPath),
}

/// Where probes are placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Tracefs,
    Pmu,
}

/// One site a spec resolved to, before it is placed.
struct SiteDef {
    path: PathBuf,
    offset: u64,
    ref_ctr: Option<u64>,
    args: Vec<FetchArg>,
    /// The probe's name in tracefs (before any `_N` that makes it unique).
    base_name: String,
}

/// Places the probe `spec` names; returns one event spec per site (a USDT probe inlined in
/// several places has several), each with what keeps its probe.
pub fn place(
    spec: &EventSpec,
    probe: &ProbeSpec,
    pids: &[u32],
    tracefs: &mut Option<Tracefs>,
) -> Result<Vec<(EventSpec, Arc<Placed>)>> {
    let sites = resolve_sites(probe, pids)
        .with_context(|| format!("failed to place probe `{}`", spec.name))?;
    let via = choose_via(tracefs)?;
    let ret = probe.kind == ProbeKind::Return;
    let mut out = Vec::new();
    for (i, site) in sites.into_iter().enumerate() {
        let name = if i == 0 {
            spec.name.clone()
        } else {
            format!("{}_{i}", spec.name)
        };
        let placed = match via {
            Via::Tracefs => {
                let tfs = tracefs
                    .as_ref()
                    .ok_or_else(|| anyhow!("tracefs unavailable"))?;
                place_tracefs(tfs, &site, ret)
                    .with_context(|| format!("failed to place probe `{}`", spec.name))?
            }
            Via::Pmu => place_pmu(&site, probe, &spec.name)?,
        };
        let mut one = spec.clone();
        one.name = name;
        one.kind = match &placed {
            (Placed::Tracefs(g), tp_name) => EventKind::Tracepoint {
                system: g.name().to_string(),
                name: tp_name.clone(),
            },
            (Placed::Pmu(p), _) => {
                let pmu = UprobePmu::read().ok_or_else(|| anyhow!("no uprobe PMU"))?;
                let ref_ctr_format =
                    Path::new("/sys/bus/event_source/devices/uprobe/format/ref_ctr_offset");
                if site.ref_ctr.is_some() && !ref_ctr_format.exists() {
                    bail!(
                        "probe `{}` is guarded by a semaphore, and this kernel's uprobe PMU has \
                         no reference counter (ref_ctr_offset, 4.20+): the program would never \
                         reach the probe",
                        spec.name
                    );
                }
                EventKind::Uprobe {
                    type_: pmu.type_,
                    config: pmu.config(ret) | site.ref_ctr.map_or(0, |r| r << 32),
                    config1: p.config1(),
                    config2: site.offset,
                }
            }
        };
        out.push((one, Arc::new(placed.0)));
    }
    Ok(out)
}

/// Tracefs where `uprobe_events` is writable (and not overridden by `MEMPERF_PROBE_VIA`),
/// else the uprobe PMU; removes the stale probes of killed runs first.
fn choose_via(tracefs: &mut Option<Tracefs>) -> Result<Via> {
    let asked = std::env::var("MEMPERF_PROBE_VIA").unwrap_or_default();
    if tracefs.is_none() {
        *tracefs = Tracefs::locate_or_mount().ok();
    }
    let writable = tracefs.as_ref().is_some_and(UprobeGroup::writable);
    match asked.as_str() {
        "" | "auto" | "tracefs" | "pmu" => {}
        other => bail!("MEMPERF_PROBE_VIA is `{other}`: expected tracefs, pmu or auto"),
    }
    if writable && asked != "pmu" {
        if let Some(t) = tracefs.as_ref()
            && let Err(e) = crate::sys::uprobe::remove_stale(t, crate::procfs::is_memperf)
        {
            eprintln!("memperf: warning: stale probes of an earlier run remain: {e}");
        }
        return Ok(Via::Tracefs);
    }
    if asked == "tracefs" {
        bail!(
            "MEMPERF_PROBE_VIA=tracefs: uprobe_events is not writable here (it needs root, \
             tracefs and CONFIG_UPROBE_EVENTS)"
        );
    }
    if UprobePmu::read().is_none() {
        bail!(
            "cannot place uprobes: tracefs uprobe_events is not writable (it needs root, tracefs \
             and CONFIG_UPROBE_EVENTS, 3.5+) and this kernel has no uprobe PMU (4.17+)"
        );
    }
    Ok(Via::Pmu)
}

/// `(Placed, name in tracefs)`.
fn place_tracefs(tfs: &Tracefs, site: &SiteDef, ret: bool) -> Result<(Placed, String)> {
    let mut group = UprobeGroup::new(tfs.clone());
    // Unique in the group: two specs on one symbol, or a run's second resolve.
    let mut name = site.base_name.clone();
    let mut n = 1;
    while tfs.event_id(group.name(), &name).is_ok() {
        name = format!("{}_{n}", site.base_name);
        n += 1;
    }
    let def = ProbeDef {
        name: name.clone(),
        path: site.path.clone(),
        offset: site.offset,
        ret,
        args: site.args.iter().map(|a| a.to_string()).collect(),
    };
    let line = def.line(group.name())?;
    let line = match site.ref_ctr {
        // `path:0xOFF(0xREF)`: the kernel counts the semaphore up while the probe is in use.
        Some(r) => line.replacen(
            &format!(":0x{:x}", site.offset),
            &format!(":0x{:x}(0x{r:x})", site.offset),
            1,
        ),
        None => line,
    };
    group.add_line(&name, &line).map_err(|e| {
        let why = if site.ref_ctr.is_some() {
            " (a probe guarded by a semaphore needs a kernel with uprobe reference counters, 4.20+)"
        } else {
            ""
        };
        anyhow!("{e}{why}")
    })?;
    Ok((Placed::Tracefs(group), name))
}

/// A probe on the uprobe PMU, which carries no fetch arguments: a USDT probe's (from its
/// note) and a return probe's implicit `retval` are left out; arguments the user named are an
/// error.
fn place_pmu(site: &SiteDef, probe: &ProbeSpec, spec: &str) -> Result<(Placed, String)> {
    let implicit = |a: &FetchArg| {
        probe.kind == ProbeKind::Sdt
            || (probe.kind == ProbeKind::Return && a.fetch == "$retval" && a.name == "retval")
    };
    if !site.args.iter().all(implicit) {
        bail!(
            "probe `{spec}`: the uprobe PMU carries no fetch arguments; arguments need tracefs \
             uprobe_events (root and CONFIG_UPROBE_EVENTS)"
        );
    }
    Ok((Placed::Pmu(PmuPath::new(&site.path)?), String::new()))
}

/// The file, offset and fetch arguments of each site a spec names.
fn resolve_sites(probe: &ProbeSpec, pids: &[u32]) -> Result<Vec<SiteDef>> {
    let path = resolve::target_path(&probe.target, pids)?;
    let data = resolve::read(&path)?;
    let sanitized = |s: &str| -> String {
        let mut n: String = s
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .take(48)
            .collect();
        if n.starts_with(|c: char| c.is_ascii_digit()) {
            n.insert(0, '_');
        }
        n
    };
    if probe.kind != ProbeKind::Sdt {
        let site = resolve::symbol_site(&path, &data, &probe.symbol, probe.offset)
            .map_err(|e| word_missing(e, &probe.symbol))?;
        let mut base_name = sanitized(&probe.symbol);
        if probe.offset != 0 {
            base_name.push_str(&format!("_{:x}", probe.offset));
        }
        if probe.kind == ProbeKind::Return {
            base_name.push_str("__return");
        }
        return Ok(vec![SiteDef {
            path,
            offset: site.offset,
            ref_ctr: None,
            args: probe.args.clone(),
            base_name,
        }]);
    }
    sdt_sites(probe, &path, &data, &sanitized(&probe.symbol))
}

fn sdt_sites(probe: &ProbeSpec, path: &Path, data: &[u8], base_name: &str) -> Result<Vec<SiteDef>> {
    let file = object::File::parse(data).map_err(|e| {
        anyhow!(
            "`{}` is not an ELF object memperf can probe: {e}",
            path.display()
        )
    })?;
    let notes = usdt::notes(&file);
    let matching: Vec<&usdt::Note> = notes
        .iter()
        .filter(|n| {
            n.name == probe.symbol && probe.provider.as_ref().is_none_or(|p| *p == n.provider)
        })
        .collect();
    if matching.is_empty() {
        let all: Vec<String> = notes
            .iter()
            .map(|n| format!("{}:{}", n.provider, n.name))
            .collect();
        if all.is_empty() {
            bail!(
                "`{}` has no USDT probes (no .note.stapsdt section)",
                path.display()
            );
        }
        let near = events::suggest(&probe.symbol, all.clone());
        let hint = if near.is_empty() {
            format!(
                "; it has {} (`memperf list -x {} --probes`)",
                all.len(),
                path.display()
            )
        } else {
            format!("; did you mean {}?", quoted(&near))
        };
        bail!(
            "`{}` has no USDT probe `{}`{hint}",
            path.display(),
            probe.symbol
        );
    }
    let providers: std::collections::BTreeSet<&str> =
        matching.iter().map(|n| n.provider.as_str()).collect();
    if providers.len() > 1 {
        bail!(
            "USDT probe `{}` exists under providers {}: name one, e.g. `sdt:{}:{}:{}`",
            probe.symbol,
            quoted(&providers.iter().map(|p| p.to_string()).collect::<Vec<_>>()),
            probe.target,
            providers.first().copied().unwrap_or_default(),
            probe.symbol
        );
    }
    let mut out = Vec::new();
    for n in matching {
        let offset = crate::allocators::file_offset(&file, n.pc).ok_or_else(|| {
            anyhow!(
                "USDT probe `{}` at {:#x} is in no loadable segment of `{}`",
                n.name,
                n.pc,
                path.display()
            )
        })?;
        let ref_ctr = match n.semaphore {
            0 => None,
            s => Some(crate::allocators::file_offset(&file, s).ok_or_else(|| {
                anyhow!(
                    "the semaphore of USDT probe `{}` ({s:#x}) is in no loadable segment of `{}`: \
                     the kernel cannot count it",
                    n.name,
                    path.display()
                )
            })?),
        };
        let args = usdt::fetch_args(&n.args, |s| usdt::data_symbol_offset(&file, s))
            .map_err(|e| anyhow!("USDT probe `{}:{}`: {e}", n.provider, n.name))?;
        out.push(SiteDef {
            path: path.to_path_buf(),
            offset,
            ref_ctr,
            args,
            base_name: base_name.to_string(),
        });
    }
    Ok(out)
}

/// A missing symbol with the closest names the file has.
fn word_missing(e: ResolveError, symbol: &str) -> anyhow::Error {
    match e {
        ResolveError::Missing { path, names, .. } => {
            let near = events::suggest(symbol, names);
            let hint = if near.is_empty() {
                format!(
                    "; `memperf list -x {} --probes` lists its functions",
                    path.display()
                )
            } else {
                format!("; did you mean {}?", quoted(&near))
            };
            anyhow!("`{}` has no function `{symbol}`{hint}", path.display())
        }
        other => other.into(),
    }
}

/// Names as a message lists them: `` `a`, `b` ``.
pub(crate) fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}
