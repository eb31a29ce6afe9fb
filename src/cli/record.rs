//! `memperf record`: its options, validated into a `RecordConfig`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;

use crate::config::record::*;
use crate::events::{self, EventSpec, Period};
use crate::sys;

use super::parse_id_list;

pub(super) const RECORD_EXAMPLES: &str = "\
EXAMPLES:
    memperf record -e page-faults -a -- sleep 30
        Every page fault on every CPU for 30 seconds, with DWARF-unwound stacks.
    memperf record -e page-faults,syscalls:sys_enter_brk,syscalls:sys_enter_mmap -p 1234
        Faults and heap/mmap growth of process 1234 (all its threads), until Ctrl-C.
    memperf record -e major-faults --call-graph fp -o faults.data -- ./server --port 80
        Major faults of a command, with frame-pointer stacks only.
    memperf record -G system.slice/nginx.service --duration 30
        Page faults of one service's cgroup only (perf's -G), its stacks unwound.
    memperf record -e kmem:kmalloc -a -C 0 --duration 5
        Kernel allocations on CPU 0 for 5 seconds.
    memperf record -e kmem:kmalloc --filter 'bytes_alloc > 65536' -a
        Only the large ones: the kernel drops the others before sampling.
    memperf record -e 'kmem:mm_page_*,page-faults/period=10/' -a
        Every page allocator tracepoint, and one page fault in ten.
    perf script -i memperf.data
        The recording is a perf.data file: perf's own tools read it.

PERMISSIONS:
    Profiling your own processes in user space works with kernel.perf_event_paranoid <= 2.
    System-wide recording (-a, -C), kernel stacks and tracepoints need root, CAP_PERFMON
    (Linux 5.8+) or CAP_SYS_ADMIN, or a lower perf_event_paranoid. Tracepoints need tracefs;
    memperf mounts it at /sys/kernel/tracing when it is missing and it runs as root.";

/// Arguments of `memperf record`.
#[derive(Debug, Args)]
pub struct RecordArgs {
    /// Events to record, comma-separated, repeatable: page-faults (faults), minor-faults,
    /// major-faults, cpu-clock, task-clock, context-switches, cpu-migrations, or a tracepoint
    /// `subsystem:name` (e.g. syscalls:sys_enter_brk, kmem:kmalloc; globs such as
    /// `kmem:mm_page_*`); perf's terms after a name: `page-faults/period=10,name=pf/`
    /// (period, freq, call-graph, stack-size, max-stack, name).
    #[arg(
        short = 'e',
        long = "event",
        value_name = "EVENTS",
        default_value = "page-faults"
    )]
    pub events: Vec<String>,

    /// A tracepoint filter for the events of the `-e` before it, applied by the kernel
    /// (e.g. `bytes_alloc > 65536`, `len >= 1048576 && (flags & 0x20)`): events it rejects
    /// cost no sample, stack copy or ring space.
    #[arg(long = "filter", value_name = "EXPR")]
    pub filters: Vec<String>,

    /// The filter of each `-e` value, by its index (set from the parsed command line's
    /// order: see `Cli::parse_args`).
    #[arg(skip)]
    pub filter_of: Vec<Option<String>>,

    /// Keep memperf's own samples in a system-wide recording (left out by default).
    #[arg(long = "include-self")]
    pub include_self: bool,

    /// Record on all CPUs, every process (the default when no target is given).
    #[arg(short = 'a', long = "all-cpus")]
    pub all_cpus: bool,

    /// Only these CPUs (e.g. `0`, `0,2-3`).
    #[arg(short = 'C', long = "cpu", value_name = "CPUS")]
    pub cpu: Option<String>,

    /// Existing processes to record, comma-separated; every thread of each, including threads
    /// created later.
    #[arg(short = 'p', long = "pid", value_name = "PIDS", conflicts_with_all = ["tid", "all_cpus"])]
    pub pid: Option<String>,

    /// Record only the tasks of these cgroups and their descendants (comma-separated,
    /// relative to the root of the hierarchy perf events follow, or a cgroup directory's
    /// path), as perf's -G: every event is opened on each CPU for each cgroup, so the kernel
    /// samples nothing else. System-wide; a command after `--` only bounds the recording.
    #[arg(
        short = 'G',
        long = "cgroup",
        value_name = "CGROUPS",
        conflicts_with_all = ["pid", "tid"]
    )]
    pub cgroups: Vec<String>,

    /// Existing threads to record, comma-separated (no inheritance to new threads).
    #[arg(
        short = 't',
        long = "tid",
        value_name = "TIDS",
        conflicts_with = "all_cpus"
    )]
    pub tid: Option<String>,

    /// Sample period: record one sample every PERIOD events. Tracepoints and fault events
    /// default to 1 (every event).
    #[arg(
        short = 'c',
        long = "count",
        value_name = "PERIOD",
        conflicts_with = "freq"
    )]
    pub count: Option<u64>,

    /// Sample frequency in Hz (the kernel adjusts the period); cpu-clock and task-clock
    /// default to 4000.
    #[arg(short = 'F', long = "freq", value_name = "HZ")]
    pub freq: Option<u64>,

    /// Record stacks with the default call-graph mode (perf's flag; stacks are recorded
    /// unless --call-graph none).
    #[arg(short = 'g')]
    pub g: bool,

    /// How to record user stacks: `dwarf,auto` (the default, `dwarf` with --unwind offline:
    /// copy the user stack and unwind
    /// it with DWARF CFI, falling back to frame pointers where no CFI covers an address; the
    /// copy starts at 8192 bytes, and the events are opened again with the size the unwinds
    /// show the stacks need, larger at once when stacks go past it), `dwarf[,STACK_BYTES]`
    /// (the same with a fixed copy, 8192 bytes unless given, as perf's), `fp` (frame
    /// pointers, walked by the kernel) or `none`.
    #[arg(long = "call-graph", value_name = "MODE")]
    pub call_graph: Option<String>,

    /// When to unwind dwarf stacks: `online` unwinds while recording and stores only the
    /// resulting callchain (small files); `offline` stores the raw registers and stack bytes
    /// exactly as `perf record --call-graph dwarf` does.
    #[arg(long = "unwind", value_enum, default_value_t = UnwindWhen::Online)]
    pub unwind: UnwindWhen,

    /// Leave kernel stacks out of the samples.
    #[arg(long = "user-only")]
    pub user_only: bool,

    /// Ring buffer size per CPU, in pages (a power of two). The default is sized for
    /// exact-count fault sampling with dwarf stacks.
    #[arg(short = 'm', long = "mmap-pages", value_name = "PAGES")]
    pub mmap_pages: Option<usize>,

    /// Output file.
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FILE",
        default_value = "memperf.data"
    )]
    pub output: PathBuf,

    /// Stop recording after SECS seconds (fractions allowed).
    #[arg(long = "duration", value_name = "SECS")]
    pub duration: Option<f64>,

    /// Print nothing but errors (no start line, no summary).
    #[arg(short = 'q', long = "quiet")]
    pub quiet: bool,

    /// Benchmark aid: `none` only advances the ring tail without parsing, unwinding or
    /// writing (the kernel's own cost per sample); the output file then holds no samples.
    #[arg(long = "consume", value_enum, default_value_t = Consume::All, hide = true)]
    pub consume: Consume,

    /// The command to run and record (after `--`); memperf exits with its status.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// Pairs each `--filter` with the `-e` value before it: the filter of each `-e` value by
/// index (`None` where it has none). A filter before any `-e` belongs to index `usize::MAX`
/// and is reported by `into_config`.
pub(crate) fn filters_by_event(m: &clap::ArgMatches) -> Vec<Option<String>> {
    let events: Vec<usize> = m
        .indices_of("events")
        .map(|i| i.collect())
        .unwrap_or_default();
    let mut out: Vec<Option<String>> = vec![None; events.len().max(1)];
    let (Some(filters), Some(idx)) = (m.get_many::<String>("filters"), m.indices_of("filters"))
    else {
        return out;
    };
    for (f, at) in filters.zip(idx) {
        let Some(ev) = events.iter().rposition(|&e| e < at) else {
            out.push(Some(format!("\0{f}")));
            continue;
        };
        out[ev] = Some(match out[ev].take() {
            Some(prev) => format!("({prev}) && ({f})"),
            None => f.clone(),
        });
    }
    out
}

/// The `-e` lists parsed into specs, each `--filter` given to the tracepoints of the `-e`
/// before it (`filter_of`, from the command line's order; see `filters_by_event`).
pub(crate) fn parse_specs(
    lists: &[String],
    filters: &[String],
    filter_of: &mut Vec<Option<String>>,
) -> Result<Vec<EventSpec>> {
    if let Some(Some(f)) = filter_of
        .iter()
        .find(|f| f.as_ref().is_some_and(|f| f.starts_with('\0')))
    {
        bail!(
            "--filter `{}` must follow the -e whose tracepoints it filters",
            &f[1..]
        );
    }
    if filter_of.is_empty() && !filters.is_empty() {
        // Parsed without the command line's order (a library caller): the last -e.
        *filter_of = vec![None; lists.len()];
        if let Some(last) = filter_of.last_mut() {
            *last = Some(filters.join(") && ("));
        }
    }
    let mut specs = Vec::new();
    let mut tracepoints = TracepointNames::default();
    for (i, list) in lists.iter().enumerate() {
        let mut these = events::parse_event_list_with(list, &mut |n| tracepoints.find(n))?;
        if let Some(Some(filter)) = filter_of.get(i) {
            let mut any = false;
            for spec in these.iter_mut().filter(|s| s.takes_filter()) {
                spec.filter = Some(filter.clone());
                any = true;
            }
            if !any {
                bail!(
                    "--filter `{filter}` follows `-e {list}`, which names no tracepoint: filters apply to tracepoints and user probes only"
                );
            }
        }
        specs.extend(these);
    }
    Ok(specs)
}

/// The kernel's tracepoints, listed from tracefs the first time a name that is no event
/// here is looked up among them (`-e brk`); the one taken is said on standard error.
#[derive(Default)]
struct TracepointNames {
    listed: Option<Vec<String>>,
}

impl TracepointNames {
    fn find(&mut self, short: &str) -> events::short::ShortMatch {
        let listed = self.listed.get_or_insert_with(|| {
            sys::Tracefs::locate_or_mount()
                .ok()
                .and_then(|t| t.list_events().ok())
                .unwrap_or_default()
        });
        let found = events::short::find(short, listed);
        if let events::short::ShortMatch::One { system, name } = &found {
            eprintln!(
                "memperf: event `{short}` is the tracepoint `{system}:{name}` (the one it \
                 matches here; `memperf list` shows the others)"
            );
        }
        found
    }
}

/// `-C CPUS`, checked against the online CPUs; every online CPU without it.
pub(crate) fn parse_cpus(list: Option<&str>) -> Result<Vec<u32>> {
    let online = sys::online_cpus().context("failed to read the online CPUs")?;
    let Some(list) = list else {
        return Ok(online);
    };
    let wanted = sys::parse_cpu_list(list)
        .map_err(|e| anyhow::anyhow!("invalid CPU list `{list}` for -C: {e}"))?;
    if let Some(c) = wanted.iter().find(|c| !online.contains(c)) {
        bail!("CPU {c} given to -C is not online (online: {online:?})");
    }
    Ok(wanted)
}

/// What `-p`, `-t`, a command and `-a`/`-C` together name.
pub(crate) fn parse_target(
    pid: Option<&str>,
    tid: Option<&str>,
    has_command: bool,
    system_wide: bool,
) -> Result<Target> {
    Ok(if let Some(p) = pid {
        if has_command {
            bail!("give either -p or a command after --, not both");
        }
        Target::Pids(parse_id_list(p, "pid")?)
    } else if let Some(t) = tid {
        if has_command {
            bail!("give either -t or a command after --, not both");
        }
        Target::Tids(parse_id_list(t, "tid")?)
    } else if has_command && !system_wide {
        Target::Command
    } else {
        // `-a -- sleep 30`: system-wide for as long as the command runs.
        Target::SystemWide
    })
}

/// `--duration SECS`: a positive number of seconds.
pub(crate) fn parse_duration(secs: Option<f64>) -> Result<Option<Duration>> {
    secs.map(|d| super::seconds("--duration", d)).transpose()
}

/// Parses `--call-graph` as `record` takes it: [`parse_call_graph`]'s modes, or
/// `dwarf,auto` (the DWARF mode at [`AUTO_START_BYTES`], and true).
pub fn parse_record_call_graph(s: &str) -> Result<(CallGraph, bool)> {
    match s.split_once(',') {
        Some(("dwarf", size)) if size.trim() == "auto" => Ok((
            CallGraph::Dwarf {
                stack_bytes: AUTO_START_BYTES,
            },
            true,
        )),
        _ => Ok((parse_call_graph(s)?, false)),
    }
}

/// Parses `fp`, `none`, `dwarf` or `dwarf,SIZE`.
pub fn parse_call_graph(s: &str) -> Result<CallGraph> {
    let (mode, size) = match s.split_once(',') {
        Some((m, sz)) => (m, Some(sz)),
        None => (s, None),
    };
    match (mode, size) {
        ("none", None) => Ok(CallGraph::None),
        ("fp", None) => Ok(CallGraph::Fp),
        ("dwarf", None) => Ok(CallGraph::Dwarf { stack_bytes: 8192 }),
        ("dwarf", Some(sz)) => {
            let n: u32 = sz
                .trim()
                .parse()
                .with_context(|| format!("invalid stack size `{sz}` in --call-graph"))?;
            if n == 0 || n > MAX_STACK_BYTES {
                bail!(
                    "stack size in --call-graph must be between 8 and {MAX_STACK_BYTES} bytes, not {n}"
                );
            }
            // The kernel wants a multiple of 8.
            Ok(CallGraph::Dwarf {
                stack_bytes: n.div_ceil(8) * 8,
            })
        }
        ("none" | "fp", Some(_)) => bail!("--call-graph {mode} takes no size"),
        _ => bail!("unknown --call-graph mode `{s}`: expected fp, dwarf[,SIZE] or none"),
    }
}

impl RecordArgs {
    /// Checks the arguments and turns them into a `RecordConfig`.
    pub fn into_config(mut self) -> Result<RecordConfig> {
        let specs = parse_specs(&self.events, &self.filters, &mut self.filter_of)?;
        let period = match (self.count, self.freq) {
            (Some(0), _) => bail!("invalid sample period 0 for -c: it must be at least 1"),
            (Some(c), _) => Some(Period::Count(c)),
            (None, Some(0)) => bail!("invalid frequency 0 for -F: it must be at least 1 Hz"),
            (None, Some(f)) => Some(Period::Frequency(f)),
            (None, None) => None,
        };
        // The default learns the copy size while recording; unwound later, it is perf's.
        let call_graph = self.call_graph.as_deref().unwrap_or(match self.unwind {
            UnwindWhen::Online => "dwarf,auto",
            UnwindWhen::Offline => "dwarf",
        });
        let (call_graph, stack_auto) = parse_record_call_graph(call_graph)?;
        if self.unwind == UnwindWhen::Offline && !matches!(call_graph, CallGraph::Dwarf { .. }) {
            bail!("--unwind offline only applies to --call-graph dwarf");
        }
        if stack_auto && self.unwind == UnwindWhen::Offline {
            bail!(
                "--call-graph dwarf,auto learns the copy size from the unwinds made while \
                 recording; with --unwind offline give a size (dwarf,SIZE)"
            );
        }
        if let Some(m) = self.mmap_pages
            && (m == 0 || !m.is_power_of_two())
        {
            bail!("-m/--mmap-pages must be a power of two, not {m}");
        }
        let cpus = parse_cpus(self.cpu.as_deref())?;
        let has_command = !self.command.is_empty();
        let cgroups = if self.cgroups.is_empty() {
            Vec::new()
        } else {
            sys::cgroup::resolve(&self.cgroups)?
        };
        // Cgroup mode is system-wide: the cgroups, not a process, bound what is sampled.
        let target = parse_target(
            self.pid.as_deref(),
            self.tid.as_deref(),
            has_command,
            self.all_cpus || self.cpu.is_some() || !cgroups.is_empty(),
        )?;
        let duration = parse_duration(self.duration)?;
        Ok(RecordConfig {
            events: specs,
            target,
            cpus,
            command: has_command.then_some(self.command),
            command_stdout: sys::CommandStdout::Inherit,
            period,
            call_graph,
            unwind: self.unwind,
            user_only: self.user_only,
            mmap_pages: self.mmap_pages,
            output: self.output,
            duration,
            quiet: self.quiet,
            consume: self.consume,
            cmdline: std::env::args().collect(),
            include_self: self.include_self,
            side_band: true,
            stack_auto,
            cgroups,
            shed_stacks: Vec::new(),
        })
    }
}
