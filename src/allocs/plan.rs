//! What allocation tracing opens: the allocator's entry and return probes (user mode), the
//! kmem tracepoints (kernel mode), and with `faults` the page-fault event whose addresses
//! the resident join attributes; the recording they are opened as, and what the handler
//! their samples go to knows of them.

use std::ffi::CString;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use perf_event_open_sys::bindings as b;

use crate::config::leak::{FaultOptions, LeakConfig, LeakTarget, ProbeVia};
use crate::config::record::{CallGraph, RecordConfig, Target};
use crate::events::{EventKind, EventSpec, Modifiers, Period};
use crate::live::open;
use crate::sys;
use crate::sys::tracefs::Tracefs;
use crate::sys::uprobe::{PmuPath, ProbeDef, UprobeAbsence, UprobeGroup, UprobePmu};

use super::sink::{self, LeakEvent, Role};
use super::table::{self, Table};
use super::{kernel, resident};

use crate::abi::{PERF_SAMPLE_CALLCHAIN, PERF_SAMPLE_STACK_USER};
use crate::allocators as probes;

const fn reg(r: u32) -> u64 {
    1u64 << r
}
/// Argument registers of an entry probe (DI, SI, DX) and the stack pointer (twin matching).
const ENTRY_REGS: u64 = reg(b::PERF_REG_X86_DI)
    | reg(b::PERF_REG_X86_SI)
    | reg(b::PERF_REG_X86_DX)
    | reg(b::PERF_REG_X86_SP);
/// The result of a return probe, and the stack pointer after the return (which return
/// slots the kernel took over are gone, `allocs::hijacked`).
const RETURN_REGS: u64 = reg(b::PERF_REG_X86_AX) | reg(b::PERF_REG_X86_SP);
/// The stack copied at posix_memalign's return, where its out-pointer usually points.
const MEMPTR_STACK_BYTES: u32 = 1024;

/// An event to open and what its samples mean.
pub(crate) struct Planned {
    pub spec: EventSpec,
    pub role: Role,
    pub sampling: Option<open::Sampling>,
    pub filter: Option<CString>,
}

/// What the probes need kept alive until the events are closed.
#[derive(Default)]
pub(crate) struct ProbeHold {
    pub group: Option<UprobeGroup>,
    _pmu_paths: Vec<PmuPath>,
}

/// Every event of the run: with `--faults`, the page-fault event first (the first event
/// carries the side band, and its `mmap_data` brings the anonymous mappings the join falls
/// back on), then the allocator's probes or the kernel's tracepoints.
#[allow(clippy::type_complexity)]
pub(crate) fn plan(
    cfg: &LeakConfig,
    hold: &mut ProbeHold,
) -> Result<(Vec<Planned>, Option<Tracefs>, Option<sink::AllocatorCode>)> {
    let (mut planned, tracefs, code) = if cfg.kernel {
        (kernel::plan(cfg)?, None, None)
    } else {
        let path = allocator_path(cfg)?;
        plan_user(cfg, &path, hold)?
    };
    if let Some(f) = &cfg.faults {
        planned.insert(0, fault_event(f));
    }
    Ok((planned, tracefs, code))
}

/// The fixed events of `memperf rss` (and of `leak --faults`), for `memperf list`: the
/// page-fault event beside the allocator's uprobes, which are placed per object.
pub(crate) const RSS_WANTS: [crate::tool::Want; 1] = [crate::tool::Want {
    name: "page-faults",
    since: "2.6.31",
    optional: false,
    filter: None,
}];

/// The page-fault software event, every fault sampled with its address
/// (`PERF_SAMPLE_ADDR`, which the recording's defaults give fault events), and the
/// toucher's stack only when asked for.
fn fault_event(f: &FaultOptions) -> Planned {
    let call_graph = if f.touchers {
        f.call_graph
    } else {
        CallGraph::None
    };
    Planned {
        spec: EventSpec {
            name: "page-faults".to_string(),
            kind: EventKind::Software {
                config: u64::from(b::PERF_COUNT_SW_PAGE_FAULTS),
            },
            modifiers: Modifiers::default(),
            terms: crate::events::Terms {
                period: Some(Period::Count(1)),
                call_graph: Some(call_graph),
                ..Default::default()
            },
            filter: None,
        },
        role: Role::Fault,
        sampling: None,
        filter: None,
    }
}

/// The recorder's target for leak's, and the command to start.
pub(crate) fn leak_target(cfg: &LeakConfig) -> (Target, Option<Vec<std::ffi::OsString>>) {
    match &cfg.target {
        LeakTarget::Pid(pid) => (Target::Pids(vec![*pid]), None),
        LeakTarget::Command(argv) => (Target::Command, Some(argv.clone())),
        LeakTarget::System => (Target::SystemWide, None),
    }
}

/// The recording the leak events are opened as: the recorder's targets, rings and
/// online unwinding, with each event's own sampling.
pub(crate) fn record_config(
    cfg: &LeakConfig,
    planned: &[Planned],
    target: &Target,
    command: Option<Vec<std::ffi::OsString>>,
) -> Result<RecordConfig> {
    let events = planned.iter().map(|p| p.spec.clone()).collect();
    let cpus = sys::online_cpus().context("failed to list the online CPUs")?;
    Ok(RecordConfig {
        command,
        command_stdout: cfg.command_stdout,
        call_graph: cfg.call_graph,
        user_only: !cfg.kernel,
        mmap_pages: cfg.mmap_pages,
        stack_auto: cfg.stack_auto,
        shed_stacks: planned
            .iter()
            .map(|p| super::unwinds::allocates(&p.role))
            .collect(),
        ..RecordConfig::internal(events, target.clone(), cpus)
    })
}

/// The planned events resolved against this kernel, each with its own sampling and
/// filter, for the recorder (`tracefs` is the one the probes were placed in).
pub(crate) fn resolve(
    rcfg: &RecordConfig,
    planned: &[Planned],
    tracefs: Option<Tracefs>,
) -> Result<(Vec<open::ResolvedEvent>, Option<Tracefs>)> {
    let (mut events, for_tracepoints) = open::resolve_events(&rcfg.events)?;
    for (ev, p) in events.iter_mut().zip(planned) {
        ev.sampling = p.sampling.clone();
        ev.filter = p.filter.clone();
    }
    Ok((events, tracefs.or(for_tracepoints)))
}

/// The leak handler's view of the opened events: each one's role, and whether its samples
/// carry a stack.
pub(crate) fn leak_events(opened: &open::Opened, planned: &[Planned]) -> Result<Vec<LeakEvent>> {
    let mut levents = Vec::new();
    for (ev, p) in opened.events.iter().zip(planned) {
        let attr = ev
            .attr
            .ok_or_else(|| anyhow!("event `{}` was never opened", ev.spec.name))?;
        let stack = attr.sample_type & (PERF_SAMPLE_STACK_USER | PERF_SAMPLE_CALLCHAIN) != 0;
        let by_fp = attr.sample_type & PERF_SAMPLE_STACK_USER == 0
            && attr.sample_type & PERF_SAMPLE_CALLCHAIN != 0
            && attr.exclude_callchain_user() == 0;
        levents.push(LeakEvent {
            role: p.role.clone(),
            stack,
            by_fp,
        });
    }
    Ok(levents)
}

/// The outstanding table of `cfg` (with the resident join when faults are traced).
pub(crate) fn table(cfg: &LeakConfig) -> Table {
    let mut table = Table::new(cfg.max_entries, cfg.min_size, cfg.max_size);
    if cfg.faults.is_some() {
        table.resident = Some(resident::Resident::new(crate::sys::page_size() as u64));
    }
    table.heap = cfg.heap.map(super::heap::HeapTracker::new);
    table
}

/// The allocator object of the target.
pub(crate) fn allocator_path(cfg: &LeakConfig) -> Result<PathBuf> {
    match &cfg.target {
        LeakTarget::Pid(pid) => probes::for_process(*pid, cfg.obj.as_deref()),
        LeakTarget::Command(argv) => {
            let program = find_program(argv.first().map(Path::new).unwrap_or(Path::new("")))?;
            probes::for_command(&program, cfg.obj.as_deref())
        }
        LeakTarget::System => bail!("no user allocator in kernel mode"),
    }
}

/// The program `execvp` will run.
fn find_program(name: &Path) -> Result<PathBuf> {
    if name.as_os_str().as_encoded_bytes().contains(&b'/') {
        if name.exists() {
            return Ok(name.to_path_buf());
        }
        bail!(
            "failed to start the command: `{}` not found",
            name.display()
        );
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            anyhow!(
                "failed to start the command: `{}` not found in PATH",
                name.display()
            )
        })
}

/// The user-mode events: an entry (and where needed a return) probe per allocator function.
pub(crate) fn plan_user(
    cfg: &LeakConfig,
    path: &Path,
    hold: &mut ProbeHold,
) -> Result<(Vec<Planned>, Option<Tracefs>, Option<sink::AllocatorCode>)> {
    let alloc = probes::load(path, &cfg.symbols_prefix)?;
    let code = sink::AllocatorCode::new(path, probes::allocator_ranges(&alloc));
    if !alloc.missing.is_empty() {
        eprintln!(
            "memperf: `{}` has no {}; those are not traced",
            path.display(),
            alloc.missing.join(", ")
        );
    }
    let tracefs = Tracefs::locate_or_mount().ok();
    let via_tracefs = probe_via(cfg.probe_via, tracefs.as_ref())?;
    let pmu = match &via_tracefs {
        Some(t) => {
            // Probes a killed run left behind would fire (and cost) for nothing.
            if let Err(e) = crate::sys::uprobe::remove_stale(t, crate::procfs::is_memperf) {
                eprintln!("memperf: warning: stale probes of an earlier run remain: {e}");
            }
            hold.group = Some(UprobeGroup::new(t.clone()));
            None
        }
        None => Some(uprobe_pmu(tracefs.as_ref())?),
    };
    let mut placer = Placer { hold, pmu, path };
    let mut planned = Vec::new();
    for site in &alloc.sites {
        planned.extend(site_events(cfg, site, &mut placer)?);
    }
    Ok((planned, via_tracefs.or(tracefs), code))
}

/// Where the probes are placed: the tracefs group (`Some`) or the uprobe PMU (`None`).
fn probe_via(via: ProbeVia, tracefs: Option<&Tracefs>) -> Result<Option<Tracefs>> {
    let writable = || tracefs.filter(|t| UprobeGroup::writable(t)).cloned();
    Ok(match via {
        ProbeVia::Pmu => None,
        ProbeVia::Auto => writable(),
        ProbeVia::Tracefs => Some(writable().ok_or_else(|| {
            anyhow!(
                "--probe-via tracefs: uprobe_events is not writable here (it needs root, \
                 tracefs and CONFIG_UPROBE_EVENTS)"
            )
        })?),
    })
}

/// The uprobe PMU, said to be the way probes are placed, or why probes cannot be placed.
fn uprobe_pmu(tracefs: Option<&Tracefs>) -> Result<UprobePmu> {
    eprintln!(
        "memperf: probing through the uprobe PMU: threads and processes started after \
         tracing begins are not traced (the kernel cannot inherit these events)"
    );
    UprobePmu::read().ok_or_else(|| {
        let root = crate::sys::effective_uid() == 0;
        let why = UprobeAbsence::classify(root, tracefs).explain();
        anyhow!("cannot place uprobes: {why}")
    })
}

/// Places the probes of one allocator file, in the tracefs group of `hold` when it has one,
/// else through the uprobe PMU.
struct Placer<'a> {
    hold: &'a mut ProbeHold,
    pmu: Option<UprobePmu>,
    path: &'a Path,
}

impl Placer<'_> {
    /// The event of a probe of function `symbol` named `symbol` and `suffix`, at file
    /// offset `offset` (a return probe with `ret`), fetching `args`.
    fn place(
        &mut self,
        (symbol, suffix): (&str, &str),
        ret: bool,
        offset: u64,
        args: Vec<String>,
    ) -> Result<EventSpec> {
        let name = format!("{symbol}{suffix}");
        if let Some(group) = self.hold.group.as_mut() {
            let def = ProbeDef {
                name: name.clone(),
                path: self.path.to_path_buf(),
                offset,
                ret,
                args,
            };
            group
                .add(&def)
                .with_context(|| format!("failed to place a uprobe on `{symbol}`"))?;
            return Ok(EventSpec {
                name: format!("{}:{name}", group.name()),
                kind: EventKind::Tracepoint {
                    system: group.name().to_string(),
                    name,
                },
                modifiers: Modifiers::default(),
                terms: Default::default(),
                filter: None,
            });
        }
        let pmu = self.pmu.ok_or_else(|| anyhow!("no uprobe PMU"))?;
        let p = PmuPath::new(self.path)?;
        let spec = EventSpec {
            name: format!("uprobe:{name}"),
            kind: EventKind::Uprobe {
                type_: pmu.type_,
                config: pmu.config(ret),
                config1: p.config1(),
                config2: offset,
            },
            modifiers: Modifiers::default(),
            terms: Default::default(),
            filter: None,
        };
        self.hold._pmu_paths.push(p);
        Ok(spec)
    }
}

/// The events of one allocator function: its entry probe (with `-s N`, a twin of it that
/// copies the stack one hit in N), and its return probe where the result is needed.
fn site_events(cfg: &LeakConfig, site: &probes::Site, placer: &mut Placer) -> Result<Vec<Planned>> {
    let d = &site.def;
    // `--call-graph dwarf` copies 8192 bytes at each allocation, as `record` starts. Smaller
    // copies cost the traced program less but not the reader: on benches/heap-cost.sh's
    // sqlite3 workload (20,000 rows; stacks about 12 KiB deep, 5.4 KiB of them the shell's
    // `main`, which libc calls through a register, so a copy that ends in `main`'s frame is
    // never finished from the live process) 2 KiB took heap to 1.9x the uprobe floor
    // against 8 KiB's 2.4x (release build), but each stack the live process finishes costs
    // the reader its reads: it fell behind and left 71% of the stacks out (`session::shed`)
    // where 8 KiB left none out (before shedding, it lost events instead).
    let stack_cg = cfg.call_graph;
    let entry_stack = if cfg.sample_rate == 1 && entry_needs_stack(d.func) {
        stack_cg
    } else {
        CallGraph::None
    };
    let args = d.args.iter().map(|a| a.to_string()).collect();
    let entry = placer.place((d.symbol, ""), false, site.probe, args)?;
    let mut events = vec![Planned {
        spec: entry.clone(),
        role: sink::Role::Entry(d.func),
        sampling: Some(user_sampling(entry_stack, ENTRY_REGS, 1)),
        filter: None,
    }];
    let allocates = !matches!(d.func, table::Func::Free | table::Func::Munmap);
    if cfg.sample_rate > 1 && allocates {
        // The twin event: same probe, one hit in N copies the stack.
        events.push(Planned {
            spec: entry,
            role: sink::Role::Entry(d.func),
            sampling: Some(user_sampling(stack_cg, ENTRY_REGS, cfg.sample_rate)),
            filter: None,
        });
    }
    if d.ret {
        // posix_memalign's result is stored through its first argument, most often a
        // variable in the caller's frame: a small copy of the stack at the return holds
        // it as it was then.
        let cg = if d.func == table::Func::PosixMemalign {
            CallGraph::Dwarf {
                stack_bytes: MEMPTR_STACK_BYTES,
            }
        } else {
            CallGraph::None
        };
        let ret = vec!["ret=$retval:x64".to_string()];
        let mut spec = placer.place((d.symbol, "_ret"), true, site.entry, ret)?;
        // Its own copy, or none: `dwarf,auto` sizes the allocation stacks only.
        spec.terms.call_graph = Some(cg);
        events.push(Planned {
            spec,
            role: sink::Role::Return(d.func),
            sampling: Some(open::Sampling {
                // The copy is what the result is read from: a recording keeps it, so that
                // a replay reads the result as the live run did.
                keep_stack: d.func == table::Func::PosixMemalign,
                ..user_sampling(cg, RETURN_REGS, 1)
            }),
            filter: None,
        });
    }
    Ok(events)
}

/// Whether an entry probe's samples need the caller's stack: an allocation's is its stack,
/// munmap's tells whether the allocator itself unmaps (`LeakSink::called_by_allocator`);
/// free's is never used (a freed block keeps its allocation's stack), and copying 8 KiB of
/// stack at every free cost the traced thread as much as the allocation's copy (half of
/// the time above the probes' own in calloc/free pairs) and the reader an unwind each.
fn entry_needs_stack(func: table::Func) -> bool {
    func != table::Func::Free
}

fn user_sampling(call_graph: CallGraph, regs: u64, period: u64) -> open::Sampling {
    open::Sampling {
        call_graph,
        regs,
        kernel_chain: false,
        raw: false,
        period: Period::Count(period),
        keep_stack: false,
    }
}
