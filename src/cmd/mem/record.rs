//! `memperf mem record`: the memory events of this machine's PMU (`pmu`), opened through
//! the one recorder as `memperf record` opens its events, with the allocator's calls beside
//! them (the probes `memperf leak` places) so that `mem report --by allocation` can replay
//! the live allocations from the file.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};

use crate::allocs::plan::{self, ProbeHold};
use crate::config::mem::MemRecordConfig;
use crate::config::record::{CallGraph, RecordConfig};
use crate::events::{EventKind, EventSpec, Modifiers, Terms};
use crate::live::driver::OnSignal;
use crate::live::open::{self, Opened, ResolvedEvent};
use crate::live::recorder::{self, Live, Run};
use crate::session::{Handler, SampleCtx};
use crate::sys::tracefs::Tracefs;

use super::pmu::{self, MemEvent};

const DEVICES: &str = "/sys/bus/event_source/devices";

/// The events of `mem record` as the recorder opens them: each one with its PMU's type
/// and config words (`config1` holds Intel's ldlat), its precision and memory sample bits,
/// and the load-latency event in the group of `mem-loads-aux` where the CPU needs it (a
/// leader that counts, never samples: perf's report ungroups it, its samples carry no
/// memory information).
pub(crate) fn resolved(events: &[MemEvent]) -> Result<Vec<ResolvedEvent>> {
    let specs: Vec<EventSpec> = events.iter().map(spec).collect();
    let (mut out, _) = open::resolve_events(&specs)?;
    for (i, m) in events.iter().enumerate() {
        let ev = out
            .get_mut(i)
            .ok_or_else(|| anyhow!("event `{}` was not resolved", m.name))?;
        ev.type_ = m.event.type_;
        ev.config = m.event.config;
        ev.config1 = m.event.config1;
        ev.config2 = m.event.config2;
        ev.sample_extra = m.sample_type;
        ev.counting = m.group_leader_only;
        if i > 0 && events[i - 1].leads_next {
            ev.leader = Some(i - 1);
        }
    }
    Ok(out)
}

/// A memory event as an event spec: a raw hardware event (its PMU's type is set once
/// resolved), precise as the PMU allows, without stacks.
fn spec(m: &MemEvent) -> EventSpec {
    EventSpec {
        name: m.name.clone(),
        kind: EventKind::Raw {
            config: m.event.config,
        },
        modifiers: Modifiers {
            precise: m.precise_ip,
            ..Modifiers::default()
        },
        terms: Terms {
            call_graph: Some(CallGraph::None),
            ..Terms::default()
        },
        filter: None,
    }
}

/// The recording: the memory events, then the allocator's probes (unwound with DWARF).
pub(super) fn record_config(cfg: &MemRecordConfig, specs: Vec<EventSpec>) -> Result<RecordConfig> {
    let cpus = crate::sys::online_cpus().context("failed to list the online CPUs")?;
    Ok(RecordConfig {
        command: cfg.command.clone(),
        call_graph: CallGraph::Dwarf { stack_bytes: 8192 },
        user_only: true,
        mmap_pages: cfg.mmap_pages,
        output: cfg.output.clone(),
        quiet: false,
        ..RecordConfig::internal(specs, cfg.target.clone(), cpus)
    })
}

/// `mem record`'s handler: the file takes every record; this says when events are live.
struct Announce {
    output: PathBuf,
}

impl Handler for Announce {
    fn sample(&mut self, _s: &SampleCtx<'_>) -> std::io::Result<()> {
        Ok(())
    }
}

impl Live for Announce {
    fn started(
        &mut self,
        opened: &Opened,
        child: Option<i32>,
        _: Option<crate::perfdata::ClockData>,
    ) -> Result<()> {
        let names = crate::live::remap::names_shown(&opened.events);
        let whose = child.map_or(String::new(), |c| format!(" of pid {c}"));
        eprintln!(
            "memperf: recording {}{whose} into `{}`",
            names.join(", "),
            self.output.display()
        );
        Ok(())
    }
}

/// `memperf mem record`: the events for this machine's PMU, or why there are none.
pub fn record(cfg: MemRecordConfig) -> Result<i32> {
    let Some(found) = pmu::discover(Path::new(DEVICES), cfg.ldlat) else {
        let facts = crate::sys::diagnose::SystemFacts::read();
        bail!(
            "{}",
            crate::sys::diagnose::no_memory_pmu(
                crate::sys::diagnose::in_virtual_machine(),
                facts.pmu_cpu_present
            )
        );
    };
    let mem = pmu::events(&found, cfg.types, cfg.ldlat, pmu::kernel_version())
        .map_err(|e| anyhow!("cannot sample memory accesses: {e}"))?;
    let mut events = resolved(&mem)?;
    let mut specs: Vec<EventSpec> = events.iter().map(|e| e.spec.clone()).collect();
    // Probes are removed after the events are closed: `hold` is dropped last.
    let mut hold = ProbeHold::default();
    let mut tracefs: Option<Tracefs> = None;
    if let Some(leak) = &cfg.allocations {
        let (planned, tfs, _) = plan::plan(leak, &mut hold)?;
        let pcfg = record_config(&cfg, planned.iter().map(|p| p.spec.clone()).collect())?;
        let (probes, tfs) = plan::resolve(&pcfg, &planned, tfs)?;
        specs.extend(probes.iter().map(|e| e.spec.clone()));
        events.extend(probes);
        tracefs = tfs;
    } else {
        eprintln!(
            "memperf: the allocator's calls are not recorded (-a, several -p PIDs, or \
             --no-allocations): `mem report --by allocation` cannot read this recording"
        );
    }
    let rcfg = record_config(&cfg, specs)?;
    let run = Run {
        cfg: &rcfg,
        write: true,
        events: Some((events, tracefs)),
        keep_processes: false,
        follow_remaps: false,
        tick: None,
        on_signal: OnSignal::Forward,
    };
    let mut announce = Announce {
        output: cfg.output.clone(),
    };
    let done = recorder::record(run, &mut announce)?;
    if let Some(Err(e)) = hold.group.as_mut().map(|g| g.remove_all()) {
        eprintln!("memperf: warning: {e}");
    }
    for note in &done.notes {
        eprintln!("memperf: note: {note}");
    }
    let st = done.session.stats();
    eprintln!(
        "memperf: wrote `{}` ({} bytes, {} samples, {} lost)",
        cfg.output.display(),
        done.file_bytes,
        st.samples.iter().sum::<u64>(),
        done.lost
    );
    Ok(0)
}
