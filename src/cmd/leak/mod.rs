//! `memperf leak`: BCC's memleak without BPF.
//!
//! User mode places uprobes on the allocator's functions (tracefs `uprobe_events`, else the
//! uprobe PMU) and opens them as ordinary sampled events through the recorder's own open
//! path; kernel mode opens the kmem tracepoints. Samples go through the one session (online
//! DWARF unwinding of entry-probe stacks, where the return address at the stack pointer keeps
//! the immediate caller) into a handler that keeps the outstanding table in user space.

mod kernel;
mod output;
mod sink;
mod table;

use std::ffi::CString;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use perf_event_open_sys::bindings as b;

use crate::cli::leak::{LeakConfig, LeakTarget, ProbeVia};
use crate::cli::{CallGraph, Consume, RecordConfig, Target, UnwindWhen};
use crate::events::{EventKind, EventSpec, Modifiers, Period};
use crate::live::driver::{self, Driver, Flow, OnSignal, Round, SignalState, StopReason, Until};
use crate::live::{open, synth};
use crate::maps::ProcessMaps;
use crate::records::ParseInfo;
use crate::session::{Keep, Session};
use crate::sys;
use crate::sys::diagnose::SystemFacts;
use crate::sys::tracefs::Tracefs;
use crate::sys::uprobe::{PmuPath, ProbeDef, UprobeGroup, UprobePmu};
use crate::unwind::UnwindMode;

use sink::{LeakEvent, LeakSink, Role};
use table::Table;

pub(crate) use kernel::wants as kernel_wants;

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
/// The result of a return probe.
const RETURN_REGS: u64 = reg(b::PERF_REG_X86_AX);
/// The stack copied at posix_memalign's return, where its out-pointer usually points.
const MEMPTR_STACK_BYTES: u32 = 1024;

/// An event to open and what its samples mean.
struct Planned {
    spec: EventSpec,
    role: Role,
    sampling: open::Sampling,
    filter: Option<CString>,
}

/// What the probes need kept alive until the events are closed.
#[derive(Default)]
struct ProbeHold {
    group: Option<UprobeGroup>,
    _pmu_paths: Vec<PmuPath>,
}

/// Runs `memperf leak`.
pub fn run(cfg: LeakConfig) -> Result<i32> {
    let facts = SystemFacts::read();
    let (target, command) = leak_target(&cfg);
    driver::check_attach(&target)?;
    // Probes are created before the events are opened and removed after they are closed:
    // `hold` is declared first so that it is dropped last, on every path out of here.
    let mut hold = ProbeHold::default();
    let (planned, tracefs, allocator) = if cfg.kernel {
        (kernel::plan(&cfg)?, None, None)
    } else {
        let path = allocator_path(&cfg)?;
        plan_user(&cfg, &path, &mut hold)?
    };
    let rcfg = record_config(&cfg, &planned, &target, command)?;
    let (mut events, tfs_for_tracepoints) = open::resolve_events(&rcfg.events)?;
    for (ev, p) in events.iter_mut().zip(&planned) {
        ev.sampling = Some(p.sampling.clone());
        ev.filter = p.filter.clone();
    }
    let gated = driver::spawn_gated(rcfg.command.as_deref())?;
    let child_pid = gated.as_ref().map(|g| g.pid());
    let signals = SignalState::install()?;
    let opened = open::open_all(
        &rcfg,
        events,
        tracefs.or(tfs_for_tracepoints),
        child_pid,
        &facts,
    )?;

    let (mut session, mut sink) = handler(&cfg, &opened, &planned)?;
    sink.set_allocator(allocator);
    if cfg.trace {
        sink.trace = Some(Box::new(std::io::stdout()));
    }
    if let Target::Pids(pids) = &target {
        let id = opened.events[0].ids.first().copied().unwrap_or(0);
        let side = *session.side_info();
        synth::synthesize(pids, id, &side, &mut session, &mut sink)
            .context("failed to read the target's mappings")?;
    }

    let header = header_line(&cfg, &target, child_pid);
    let mut driver = Driver::new(opened, signals, gated, &target);
    driver.enable()?;
    say(&cfg, &header)?;
    driver.release()?;

    let mut names = output::Names::default();
    let until = Until {
        duration: None,
        tick: Some(cfg.interval),
        on_signal: OnSignal::ForwardAndStop,
    };
    let on_round = interval_reports(&cfg, &mut names);
    if driver.run_until(&mut session, &mut sink, &until, on_round)? == StopReason::Requested {
        driver.signal_child(libc::SIGTERM);
    }
    let done = driver.finish(&mut session, &mut sink)?;
    // Every loss: the LOST records, and what the kernel counted but had no room to report.
    let mut lost = session.stats().lost + session.stats().lost_samples;
    if let Some(counted) = done.kernel_lost {
        lost = lost.max(counted);
    }
    let now = now_ns(done.now, &session);
    // The final report: when tracing ended otherwise than by reaching the count.
    if done.reason != StopReason::Requested && !cfg.folded {
        print_report(&cfg, &sink, session.procs(), &mut names, now, lost)?;
    }
    drop(done.opened);
    let removed = hold.group.as_mut().map(|g| g.remove_all());
    if let Some(Err(e)) = removed {
        eprintln!("memperf: warning: {e}");
    }
    summary(&sink, lost, done.drain.corrupt_bytes);
    write_profiles(&cfg, &mut sink, session, now, lost)?;
    Ok(0)
}

/// The recorder's target for leak's, and the command to start.
fn leak_target(cfg: &LeakConfig) -> (Target, Option<Vec<std::ffi::OsString>>) {
    match &cfg.target {
        LeakTarget::Pid(pid) => (Target::Pids(vec![*pid]), None),
        LeakTarget::Command(argv) => (Target::Command, Some(argv.clone())),
        LeakTarget::System => (Target::SystemWide, None),
    }
}

/// The recording the leak events are opened as: the recorder's targets, rings and
/// online unwinding, with each event's own sampling.
fn record_config(
    cfg: &LeakConfig,
    planned: &[Planned],
    target: &Target,
    command: Option<Vec<std::ffi::OsString>>,
) -> Result<RecordConfig> {
    Ok(RecordConfig {
        events: planned.iter().map(|p| p.spec.clone()).collect(),
        target: target.clone(),
        cpus: sys::online_cpus().context("failed to list the online CPUs")?,
        command,
        period: None,
        call_graph: cfg.call_graph,
        unwind: UnwindWhen::Online,
        user_only: !cfg.kernel,
        mmap_pages: cfg.mmap_pages,
        output: PathBuf::from("/dev/null"),
        duration: None,
        quiet: true,
        consume: Consume::All,
        cmdline: std::env::args().collect(),
        include_self: false,
        side_band: true,
    })
}

/// The session (online unwinding) and the leak handler for the opened events.
fn handler(
    cfg: &LeakConfig,
    opened: &open::Opened,
    planned: &[Planned],
) -> Result<(Session, LeakSink)> {
    let mut infos = Vec::new();
    let mut levents = Vec::new();
    for (ev, p) in opened.events.iter().zip(planned) {
        let attr = ev
            .attr
            .ok_or_else(|| anyhow!("event `{}` was never opened", ev.spec.name))?;
        let stack = attr.sample_type & (PERF_SAMPLE_STACK_USER | PERF_SAMPLE_CALLCHAIN) != 0;
        infos.push(ParseInfo::from_attr(&attr));
        levents.push(LeakEvent {
            role: p.role.clone(),
            stack,
        });
    }
    let dwarf = matches!(cfg.call_graph, CallGraph::Dwarf { .. }) && !cfg.kernel;
    let keep = Keep {
        unwind: dwarf.then_some(UnwindMode::Dwarf),
        maps: Some(ProcessMaps::default()),
        comms: true,
        dsos: false,
    };
    let types = opened
        .events
        .iter()
        .map(|e| crate::session::EventType {
            type_: e.type_,
            config: e.config,
        })
        .collect();
    let session = Session::new(infos, opened.ids.clone(), keep).with_types(types);
    let table = Table::new(cfg.max_entries, cfg.min_size, cfg.max_size);
    let sink = LeakSink::new(levents, table, sys::read_process_u64);
    Ok((session, sink))
}

/// memleak's first line.
fn header_line(cfg: &LeakConfig, target: &Target, child_pid: Option<i32>) -> String {
    let pid = child_pid.map_or_else(|| target_pid(target), |p| p as u32);
    match (&cfg.target, cfg.kernel) {
        (LeakTarget::System, _) => "Attaching to kernel allocators, Ctrl+C to quit.".to_string(),
        (_, true) => format!("Attaching to kernel allocators of pid {pid}, Ctrl+C to quit."),
        _ => format!("Attaching to pid {pid}, Ctrl+C to quit."),
    }
}

/// The end-of-run summary on stderr: what was traced, what the table held, what was lost.
fn summary(sink: &LeakSink, lost: u64, corrupt_bytes: u64) {
    let s = &sink.table.stats;
    eprintln!(
        "memperf: traced {} allocations and {} frees ({} frees of blocks allocated before \
         tracing began); {} outstanding at the end; the table held at most {} entries (about \
         {} KiB now)",
        s.allocs,
        s.frees,
        s.unknown_frees,
        sink.table.len(),
        s.peak_entries,
        sink.table.memory_bytes() / 1024,
    );
    if sink.results_from_stack > 0 {
        eprintln!(
            "memperf: {} posix_memalign results read from the stack copied at the return",
            sink.results_from_stack
        );
    }
    if s.internal_calls > 0 {
        eprintln!(
            "memperf: {} mmap/munmap/mremap calls made by the allocator itself were left out",
            s.internal_calls
        );
    }
    if lost > 0 || corrupt_bytes > 0 || sink.malformed > 0 {
        eprintln!(
            "memperf: lost {lost} events ({corrupt_bytes} bytes of unreadable ring data, {} \
             malformed records): outstanding figures may be overstated; use a larger -m, or -s",
            sink.malformed
        );
    }
    if s.dropped_full > 0 {
        eprintln!(
            "memperf: {} allocations not tracked: the table was full (raise --max-entries)",
            s.dropped_full
        );
    }
}

fn target_pid(t: &Target) -> u32 {
    match t {
        Target::Pids(p) => p.first().copied().unwrap_or(0),
        _ => 0,
    }
}

/// Header lines go to standard output, as memleak's do, unless it carries folded stacks.
fn say(cfg: &LeakConfig, line: &str) -> Result<()> {
    if cfg.folded || cfg.pprof.as_deref() == Some(Path::new("-")) {
        eprintln!("{line}");
    } else {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}")?;
        out.flush()?;
    }
    Ok(())
}

fn write_profiles(
    cfg: &LeakConfig,
    sink: &mut LeakSink,
    mut session: Session,
    now: u64,
    lost: u64,
) -> Result<()> {
    if !cfg.folded && cfg.pprof.is_none() {
        return Ok(());
    }
    use crate::aggregate::Weigher;
    use crate::output::{self as report_output, pprof};
    let older_ns = if cfg.combined_only {
        0
    } else {
        cfg.older_ms.saturating_mul(1_000_000)
    };
    let maps = session.take_maps().unwrap_or_default();
    let mut agg = output::to_aggregate(sink, session.procs(), maps, now, older_ns, lost);
    let rcfg = report_config(cfg);
    let kallsyms = if agg.book.kernel_frames {
        std::fs::read_to_string("/proc/kallsyms")
            .ok()
            .map(|t| std::sync::Arc::new(crate::symbolize::Kallsyms::from_text(&t)))
    } else {
        None
    };
    let mut res = report_output::resolve(&rcfg, &agg, kallsyms);
    if let Some(path) = &cfg.pprof {
        let names = vec!["outstanding".to_string()];
        let p = pprof::build(&rcfg, None, &names, &[Weigher::Fixed(1)], &agg, &res);
        pprof::write(&p, path)?;
    }
    if cfg.folded {
        // Folded stacks weigh outstanding bytes.
        agg.counts = std::mem::take(&mut agg.bytes);
        let mut out = std::io::stdout().lock();
        report_output::write_folded(&rcfg, &agg, &mut res, &mut out)?;
    }
    Ok(())
}

/// The report configuration the shared printers take.
fn report_config(cfg: &LeakConfig) -> crate::cli::ReportConfig {
    crate::cli::ReportConfig {
        output: match &cfg.pprof {
            Some(p) => crate::cli::ReportOutput::Pprof(p.clone()),
            None => crate::cli::ReportOutput::Folded,
        },
        top: cfg.top,
        weight: crate::cli::Weight::Bytes,
        ..crate::cli::ReportConfig::plain(crate::cli::Input::File(PathBuf::from("memperf leak")))
    }
}

/// The time reports measure allocation age against: the sample clock now, or the newest
/// sample's time when the clock cannot be read.
fn now_ns(now: Option<u64>, session: &Session) -> u64 {
    now.or(session.stats().last_time).unwrap_or(0)
}

/// One report on standard output.
fn print_report(
    cfg: &LeakConfig,
    sink: &LeakSink,
    procs: &crate::session::Processes,
    names: &mut output::Names,
    now: u64,
    lost: u64,
) -> Result<()> {
    let done = output::Completeness {
        lost,
        sample_rate: cfg.sample_rate,
    };
    let mut out = std::io::stdout().lock();
    let maps = procs.maps().unwrap_or(ProcessMaps::empty());
    output::write_report(&mut out, cfg, sink, maps, names, now, &done)
}

/// The report at each interval; the run ends after `-c` of them.
fn interval_reports<'a>(
    cfg: &'a LeakConfig,
    names: &'a mut output::Names,
) -> impl FnMut(&mut Session, &mut LeakSink, Round) -> Result<Flow> + 'a {
    let mut reports = 0u64;
    move |session, sink, round| {
        if !round.tick {
            return Ok(Flow::Continue);
        }
        reports += 1;
        if !cfg.folded {
            let lost = session.stats().lost + session.stats().lost_samples;
            print_report(
                cfg,
                sink,
                session.procs(),
                names,
                now_ns(round.now, session),
                lost,
            )?;
        }
        if cfg.count.is_some_and(|c| reports >= c) {
            return Ok(Flow::Stop);
        }
        Ok(Flow::Continue)
    }
}

/// The allocator object of the target.
fn allocator_path(cfg: &LeakConfig) -> Result<PathBuf> {
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
fn plan_user(
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
    let via_tracefs = match cfg.probe_via {
        ProbeVia::Pmu => None,
        ProbeVia::Auto => tracefs
            .as_ref()
            .filter(|t| UprobeGroup::writable(t))
            .cloned(),
        ProbeVia::Tracefs => Some(
            tracefs
                .as_ref()
                .filter(|t| UprobeGroup::writable(t))
                .cloned()
                .ok_or_else(|| {
                    anyhow!(
                        "--probe-via tracefs: uprobe_events is not writable here (it needs root, \
                         tracefs and CONFIG_UPROBE_EVENTS)"
                    )
                })?,
        ),
    };
    if let Some(t) = &via_tracefs {
        // Probes a killed run left behind would fire (and cost) for nothing.
        if let Err(e) = crate::sys::uprobe::remove_stale(t) {
            eprintln!("memperf: warning: stale probes of an earlier run remain: {e}");
        }
        hold.group = Some(UprobeGroup::new(t.clone()));
    }
    let pmu = if via_tracefs.is_none() {
        eprintln!(
            "memperf: probing through the uprobe PMU: threads and processes started after \
             tracing begins are not traced (the kernel cannot inherit these events)"
        );
        Some(UprobePmu::read().ok_or_else(|| {
            anyhow!(
                "cannot place uprobes: tracefs uprobe_events is not writable (it needs root and \
                 CONFIG_UPROBE_EVENTS) and this kernel has no uprobe PMU (4.17+)"
            )
        })?)
    } else {
        None
    };
    let stack_cg = cfg.call_graph;
    let mut planned = Vec::new();
    for site in &alloc.sites {
        let d = site.def;
        let mut probe = |suffix: &str, ret: bool, offset: u64| -> Result<EventSpec> {
            let name = format!("{}{suffix}", d.symbol);
            if let Some(group) = hold.group.as_mut() {
                group
                    .add(&ProbeDef {
                        name: name.clone(),
                        path: path.to_path_buf(),
                        offset,
                        ret,
                        args: if ret {
                            vec!["ret=$retval:x64".to_string()]
                        } else {
                            d.args.iter().map(|a| a.to_string()).collect()
                        },
                    })
                    .with_context(|| format!("failed to place a uprobe on `{}`", d.symbol))?;
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
            let pmu = pmu.ok_or_else(|| anyhow!("no uprobe PMU"))?;
            let p = PmuPath::new(path)?;
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
            hold._pmu_paths.push(p);
            Ok(spec)
        };
        let entry_stack = if cfg.sample_rate == 1 {
            stack_cg
        } else {
            CallGraph::None
        };
        planned.push(Planned {
            spec: probe("", false, site.probe)?,
            role: sink::Role::Entry(d.func),
            sampling: user_sampling(entry_stack, ENTRY_REGS, 1),
            filter: None,
        });
        let allocates = !matches!(d.func, table::Func::Free | table::Func::Munmap);
        if cfg.sample_rate > 1 && allocates {
            // The twin event: same probe, one hit in N copies the stack.
            let spec = planned
                .last()
                .map(|p: &Planned| p.spec.clone())
                .ok_or_else(|| anyhow!("no entry event"))?;
            planned.push(Planned {
                spec,
                role: sink::Role::Entry(d.func),
                sampling: user_sampling(stack_cg, ENTRY_REGS, cfg.sample_rate),
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
            planned.push(Planned {
                spec: probe("_ret", true, site.entry)?,
                role: sink::Role::Return(d.func),
                sampling: user_sampling(cg, RETURN_REGS, 1),
                filter: None,
            });
        }
    }
    Ok((planned, via_tracefs.or(tracefs), code))
}

fn user_sampling(call_graph: CallGraph, regs: u64, period: u64) -> open::Sampling {
    open::Sampling {
        call_graph,
        regs,
        kernel_chain: false,
        raw: false,
        period: Period::Count(period),
    }
}
