//! `memperf agent`: the live recorder run for as long as it is let, its samples aggregated
//! in memory (`aggregate::live`) and, at the end of every window, cut into one profile per
//! process group (`profiles`) and handed to each sink (`sink`).

mod cgroup_ids;
mod groups;
mod otel_memory;
mod parca;
mod profiles;
mod pyroscope;
mod sink;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Result, bail};

use crate::aggregate::live::{LiveEvent, Windowed};
use crate::config::agent::AgentConfig;
use crate::config::report::{Input, Prefix, ReportConfig, ReportOutput};
use crate::events::EventKind;
use crate::live::driver::{Flow, OnSignal, Round};
use crate::live::open::{self, ResolvedEvent};
use crate::live::recorder::{self, Live, Run};
use crate::output::{NameOptions, Resolved, Resolver};
use crate::perfdata::tracing_data::EventFormat;
use crate::records::{Record, Sample};
use crate::session::{Handler, Processes, SampleCtx, Session, SideBand};
use crate::symbolize::{Kallsyms, Symbolizer};
use crate::sys::tracefs::Tracefs;

use cgroup_ids::CgroupIds;
use groups::Groups;
use profiles::{Cut, HostLabels, WindowTimes};
use sink::{DirSink, Encoder, OtlpEncoder, Sink, Window};

use crate::ship::grpc;
use crate::ship::http::Endpoint;
use crate::ship::tls::Tls;
use crate::ship::{Backend, Shipper};

/// Runs the agent until its duration ends, its command exits or it is stopped.
pub fn run(cfg: AgentConfig) -> Result<i32> {
    let mut sinks: Vec<Box<dyn Sink>> = Vec::new();
    if let Some(dir) = &cfg.output {
        sinks.push(Box::new(DirSink::create(dir)?));
    }
    let host = HostLabels::read();
    let (encoders, backends) = remotes(&cfg, &host)?;
    let shipper = if backends.is_empty() {
        None
    } else {
        Some(Shipper::start(backends)?)
    };
    say_nested_cgroups(&cfg);
    let (mut events, tracefs) = open::resolve_events_in(&cfg.record.events, &cfg.record.target)?;
    otel_memory::free_without_stack(&mut events);
    // Each sample says its cgroup, so that a process gone before the agent handles its
    // first sample is still named after its unit or -G cgroup (`/proc/PID/cgroup` is gone).
    let ids = CgroupIds::of_host();
    if ids.is_some() {
        for e in &mut events {
            e.sample_extra |= crate::abi::PERF_SAMPLE_CGROUP;
        }
    }
    let live = live_events(&events, tracefs.as_ref());
    let names: Vec<String> = live.iter().map(|e| e.name.clone()).collect();
    let rcfg = report_config(&cfg);
    let mut agent = Agent {
        win: Windowed::new(&rcfg, &live, cfg.max_stacks),
        cfg: &cfg,
        rcfg: &rcfg,
        names,
        groups: Groups::new(
            cfg.record.cgroups.iter().map(|c| c.path.clone()).collect(),
            ids,
        ),
        host,
        sinks,
        encoders,
        shipper,
        window_start: SystemTime::now(),
        index: 0,
        kallsyms: None,
        symbolizer: None,
        cost: Cost::default(),
        partial_said: std::collections::HashMap::new(),
    };
    let run = Run {
        cfg: &cfg.record,
        write: false,
        events: Some((events, tracefs)),
        keep_processes: true,
        follow_remaps: false,
        tick: Some(cfg.interval),
        on_signal: if cfg.record.command.is_some() {
            OnSignal::Forward
        } else {
            OnSignal::ForwardAndStop
        },
    };
    let mut done = recorder::record(run, &mut agent)?;
    agent.flush(&mut done.session)?;
    if let Some(shipper) = agent.shipper.take() {
        for (name, st) in shipper.finish(SHUTDOWN_GRACE) {
            agent.partial_messages(&name, &st);
            if st.pending > 0 || st.dropped > 0 || st.rejected > 0 || st.taken_in_part > 0 {
                let kept = if cfg.spool.is_some() {
                    "kept in the spool for the next start"
                } else {
                    "lost (no --spool)"
                };
                eprintln!(
                    "memperf agent: {name}: {} requests sent, {} taken in part ({} profiles \
                     rejected), {} not delivered at exit ({kept}), {} dropped past the spool's \
                     bound, {} refused{}",
                    st.sent,
                    st.taken_in_part,
                    st.rejected_profiles,
                    st.pending,
                    st.dropped,
                    st.rejected,
                    st.last_error
                        .map(|e| format!("; last error: {e}"))
                        .unwrap_or_default()
                );
            }
        }
    }
    let ids_note = agent.groups.ids.as_ref().and_then(CgroupIds::note);
    for n in done.notes.iter().chain(&ids_note) {
        eprintln!("memperf agent: note: {n}");
    }
    Ok(done.exit.map_or(0, |e| e.shell_code()))
}

/// When nested `-G` cgroups are given, only the outermost is opened: said at start, where
/// the user who launched the agent sees it.
fn say_nested_cgroups(cfg: &AgentConfig) {
    for n in crate::sys::cgroup::outermost(&cfg.record.cgroups).1 {
        eprintln!("memperf agent: note: {n}");
    }
}

/// How long the agent tries, at exit, to deliver what its backends have not taken.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Each network backend's encoder, and the backend (same index).
type Remotes = (Vec<Box<dyn Encoder>>, Vec<Backend>);

/// The network backends: how each wants its windows, and where it is.
fn remotes(cfg: &AgentConfig, host: &HostLabels) -> Result<Remotes> {
    let mut encoders: Vec<Box<dyn Encoder>> = Vec::new();
    let mut backends = Vec::new();
    for (i, url) in cfg.otlp.iter().enumerate() {
        let over_grpc = grpc::is_grpc(url);
        let (ep, name, path, content_type) = if over_grpc {
            let ep = grpc::endpoint(url, sink::OTLP_GRPC_PORT, false)?;
            let name = format!("OTLP {}", grpc::url(&ep));
            (
                ep,
                name,
                sink::OTLP_GRPC_METHOD.to_string(),
                "application/grpc",
            )
        } else {
            let ep = Endpoint::parse(url, sink::OTLP_PATH)?;
            let (name, path) = (format!("OTLP {}", ep.url()), ep.path.clone());
            (ep, name, path, "application/x-protobuf")
        };
        encoders.push(Box::new(OtlpEncoder {
            host: host.clone(),
            path,
            content_type,
        }));
        let backend = backend(cfg, format!("otlp-{i}"), name, ep, cfg.headers.clone())?
            .reading_answers(sink::otlp_partial);
        backends.push(if over_grpc {
            backend.over_grpc()
        } else {
            backend
        });
    }
    for (i, url) in cfg.pyroscope.iter().enumerate() {
        let mut ep = Endpoint::parse(url, "/")?;
        ep.path = pyroscope::push_path(&ep.path);
        encoders.push(Box::new(pyroscope::PyroscopeEncoder {
            host: host.clone(),
            path: ep.path.clone(),
        }));
        let mut headers = cfg.headers.clone();
        headers.extend(
            pyroscope::CONNECT_HEADERS
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        let name = format!("Pyroscope {}", ep.url());
        backends.push(backend(cfg, format!("pyroscope-{i}"), name, ep, headers)?);
    }
    for (i, url) in cfg.parca.iter().enumerate() {
        let ep = grpc::endpoint(url, parca::PARCA_PORT, true)?;
        encoders.push(Box::new(parca::ParcaEncoder { host: host.clone() }));
        let name = format!("Parca {}", grpc::url(&ep));
        let backend = backend(cfg, format!("parca-{i}"), name, ep, cfg.headers.clone())?;
        backends.push(backend.over_grpc());
    }
    Ok((encoders, with_tls(cfg, backends)?))
}

/// A backend, spooled under `--spool`'s directory `spool` (`otlp-0`, `parca-1`, ...) when
/// there is a spool, in memory otherwise.
fn backend(
    cfg: &AgentConfig,
    spool: String,
    name: String,
    ep: Endpoint,
    headers: Vec<(String, String)>,
) -> Result<Backend> {
    let dir = cfg.spool.as_ref().map(|d| d.join(spool));
    Backend::new(name, ep, headers, dir.as_deref(), cfg.spool_bytes)
}

/// TLS for the backends whose URL asks for it (`https`, `grpcs`), trusting `--ca-file`'s
/// certificates or the system's, with `--client-cert`'s certificate shown when asked.
fn with_tls(cfg: &AgentConfig, backends: Vec<Backend>) -> Result<Vec<Backend>> {
    if !backends.iter().any(|b| b.endpoint.tls) {
        if let Some(ca) = &cfg.ca_file {
            bail!(
                "--ca-file `{}` is given, but no backend's URL is https:// or grpcs://",
                ca.display()
            );
        }
        if let Some(c) = &cfg.client_cert {
            bail!(
                "--client-cert `{}` is given, but no backend's URL is https:// or grpcs://",
                c.cert.display()
            );
        }
        return Ok(backends);
    }
    let tls = Tls::new(cfg.ca_file.as_deref(), cfg.client_cert.as_ref())?;
    Ok(backends
        .into_iter()
        .map(|b| {
            if b.endpoint.tls {
                b.with_tls(tls.clone())
            } else {
                b
            }
        })
        .collect())
}

/// The report configuration the aggregation and the pprof encoder take: every stack, by
/// command and pid, with its bytes beside its count.
fn report_config(cfg: &AgentConfig) -> ReportConfig {
    ReportConfig {
        output: ReportOutput::Pprof("-".into()),
        prefix: Prefix::Pid,
        comms: cfg.comms.clone(),
        ..ReportConfig::plain(Input::File("memperf agent".into()))
    }
}

/// Each opened event's name and, for a tracepoint, its format (what its bytes are read from),
/// a probe's later sites counted in its first site's columns.
fn live_events(events: &[ResolvedEvent], tracefs: Option<&Tracefs>) -> Vec<LiveEvent> {
    events
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let format = match (&e.spec.kind, tracefs) {
                (EventKind::Tracepoint { system, name }, Some(t)) => t
                    .format(system, name)
                    .ok()
                    .and_then(|text| EventFormat::parse(&String::from_utf8_lossy(&text))),
                _ => None,
            };
            LiveEvent {
                name: e.spec.name.clone(),
                format,
                period: None,
                column: e.first_site.unwrap_or(i),
            }
        })
        .collect()
}

/// What the agent spent and lost, for its line at each window's end.
#[derive(Default)]
struct Cost {
    cpu: (f64, f64),
    lost: u64,
    samples: u64,
    failed: u64,
}

struct Agent<'c> {
    win: Windowed<'c>,
    cfg: &'c AgentConfig,
    rcfg: &'c ReportConfig,
    names: Vec<String>,
    groups: Groups,
    host: HostLabels,
    sinks: Vec<Box<dyn Sink>>,
    /// Each network backend's encoder, by its index in the shipper.
    encoders: Vec<Box<dyn Encoder>>,
    shipper: Option<Shipper>,
    window_start: SystemTime,
    index: u64,
    kallsyms: Option<Arc<Kallsyms>>,
    /// The symbolizer of the last window, its files loaded (`name_frames`).
    symbolizer: Option<Symbolizer>,
    cost: Cost,
    /// How many of each backend's partial-success messages were said.
    partial_said: std::collections::HashMap<String, usize>,
}

/// The most files a symbolizer kept from window to window holds; past it the next window
/// starts a new one, so that the agent's memory stays bounded on a host whose binaries
/// change.
const MAX_KEPT_FILES: usize = 128;

impl Handler for Agent<'_> {
    fn sample(&mut self, c: &SampleCtx<'_>) -> std::io::Result<()> {
        if let Some(pid) = c.sample.pid {
            self.groups.note(pid, c.sample.cgroup);
        }
        self.win.sample(c)
    }

    fn wants_unwind(&mut self, ev: usize, s: &Sample<'_>, procs: &Processes) -> bool {
        self.win.wants_unwind(ev, s, procs)
    }

    fn side_band(&mut self, r: &SideBand<'_>) -> std::io::Result<()> {
        if let (Some(Record::Cgroup { id, path, .. }), Some(ids)) = (r.rec, &mut self.groups.ids) {
            ids.learn(*id, path);
        }
        self.win.side_band(r)
    }
}

impl Live for Agent<'_> {
    fn round(&mut self, session: &mut Session, round: Round) -> Result<Flow> {
        if round.tick {
            self.flush(session)?;
            // The window's frames are named and let go of: of the modules, only those
            // mapped now and those the blocks in use name are needed again.
            session.forget_unmapped_modules(self.win.held_modules());
            // Samples are named by their process as they come, and the window that held an
            // exited process's samples is shipped: its name is kept one window more, for a
            // sample read after its EXIT record, then let go of.
            session.forget_exited_names();
            // A process whose EXIT record was lost leaves the session once /proc shows it
            // gone; its blocks in use go with it.
            let maps = session.procs().maps();
            self.win.forget_gone(|pid| {
                !maps.is_some_and(|m| m.holds(pid))
                    && !std::path::Path::new(&format!("/proc/{pid}")).exists()
            });
        }
        Ok(Flow::Continue)
    }
}

impl Agent<'_> {
    /// Ends the window: its profiles go to every sink, and its line is printed.
    fn flush(&mut self, session: &mut Session) -> Result<()> {
        let end = SystemTime::now();
        let mut agg = self.win.take();
        // The session's mappings name the window's frames: lent for the cut, not copied (a
        // host's every process's mappings, each window).
        let lent = session.take_maps();
        let had_maps = lent.is_some();
        agg.maps = lent.unwrap_or_default();
        if agg.book.kernel_frames && self.kallsyms.is_none() {
            self.kallsyms = std::fs::read_to_string("/proc/kallsyms")
                .ok()
                .map(|t| Arc::new(Kallsyms::from_text(&t)));
        }
        let res = self.name_frames(&agg);
        let times = WindowTimes {
            start_unix_ns: unix_ns(self.window_start),
            duration_ns: end
                .duration_since(self.window_start)
                .unwrap_or(Duration::ZERO)
                .as_nanos()
                .try_into()
                .unwrap_or(i64::MAX),
        };
        let cut = Cut {
            rcfg: self.rcfg,
            names: &self.names,
            weighers: self.win.weighers(),
            host: &self.host,
            times,
            inuse: self.win.inuse_stats().is_some(),
            columns: self.win.columns(),
        };
        let samples: u64 = agg.stats.kept.iter().sum();
        let folded = agg.stats.folded;
        let unmapped = agg.stats.unmapped;
        let profiles = profiles::cut(&mut agg, &res, &mut self.groups, &cut);
        if had_maps {
            session.put_maps(std::mem::take(&mut agg.maps));
        }
        // The window's tables and names go before its profiles are encoded.
        drop(agg);
        drop(res);
        self.groups.end_window();
        self.index += 1;
        let window = Window {
            times,
            profiles: &profiles,
        };
        for s in &mut self.sinks {
            if let Err(e) = s.ship(&window) {
                self.cost.failed += 1;
                eprintln!(
                    "memperf agent: window {}: failed to ship to {}: {e:#}",
                    self.index,
                    s.describe()
                );
            }
        }
        if let Some(shipper) = &self.shipper {
            for (i, e) in self.encoders.iter().enumerate() {
                shipper.send(i, e.encode(&window));
            }
        }
        self.window_start = end;
        self.report(session, (samples, folded, unmapped), profiles.len());
        Ok(())
    }

    /// Names the window's frames with the last window's symbolizer: each file's symbols and
    /// debug information are read once, not once a window (which cost more than the
    /// window's samples at a short interval).
    fn name_frames(&mut self, agg: &crate::aggregate::Aggregate) -> Resolved {
        let opts = NameOptions::of(self.rcfg);
        let kept = self
            .symbolizer
            .take()
            .and_then(|mut s| (s.next_window() <= MAX_KEPT_FILES).then_some(s));
        let mut sym = kept.unwrap_or_else(|| crate::output::symbolizer(&opts, None));
        // Read at the first window with kernel frames, which may come after the first.
        if let Some(k) = self.kallsyms.clone().filter(|k| k.malformed_lines() == 0) {
            sym.set_kallsyms(k);
        }
        let mut r = Resolver::reusing(opts, sym);
        r.catch_up(&agg.book.frames, &agg.maps);
        let (res, sym) = r.finish_keeping();
        self.symbolizer = Some(sym);
        res
    }

    /// The window's line: what it saw, lost and folded away, and what the agent cost; the
    /// samples it could not place in a mapping of their process, when there were.
    fn report(&mut self, session: &Session, counts: (u64, u64, u64), profiles: usize) {
        let (samples, folded, unmapped) = counts;
        let st = session.stats();
        let lost = crate::session::lost_once(st.lost, st.lost_samples);
        let (user, sys, max_rss_kib) = crate::sys::self_rusage();
        let c = &mut self.cost;
        let line = format!(
            "memperf agent: window {}: {samples} samples, {profiles} profiles, {} lost, {folded} \
             folded away; agent cpu {:.3} s user {:.3} s sys, max rss {} KiB",
            self.index,
            lost.saturating_sub(c.lost),
            user - c.cpu.0,
            sys - c.cpu.1,
            max_rss_kib,
        );
        let mut line = line;
        if unmapped > 0 {
            line.push_str(&format!(
                "; {unmapped} samples at an address no mapping recorded for their process \
                 holds, named [unknown]"
            ));
        }
        if let Some(u) = self.win.inuse_stats() {
            line.push_str(&format!(
                "; otel_memory: {} blocks in use, {} frees of unknown blocks, {} allocations \
                 untracked past the bound",
                u.live, u.unknown_frees, u.untracked
            ));
        }
        let stats: Vec<_> = self.shipper.iter().flat_map(Shipper::stats).collect();
        for (name, st) in &stats {
            line.push_str(&format!(
                "; {name}: {} sent, {} waiting, {} failed attempts, {} dropped, {} refused",
                st.sent, st.pending, st.failed_attempts, st.dropped, st.rejected
            ));
            if st.taken_in_part > 0 {
                line.push_str(&format!(
                    ", {} taken in part ({} profiles rejected)",
                    st.taken_in_part, st.rejected_profiles
                ));
            }
        }
        c.cpu = (user, sys);
        c.lost = lost;
        c.samples += samples;
        if !self.cfg.quiet {
            eprintln!("{line}");
        }
        for (name, st) in &stats {
            self.partial_messages(name, st);
        }
    }

    /// Says each new message of a backend's partial successes, once (even with --quiet: a
    /// backend rejecting profiles is an error).
    fn partial_messages(&mut self, name: &str, st: &crate::ship::Stats) {
        let said = self.partial_said.entry(name.to_string()).or_default();
        for m in st.partial_messages.iter().skip(*said) {
            eprintln!("memperf agent: {name} answered with a partial success: {m}");
        }
        *said = st.partial_messages.len();
    }
}

fn unix_ns(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos().try_into().unwrap_or(i64::MAX))
}
