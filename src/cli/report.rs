//! `memperf report` and `memperf script`: their options, validated into a `ReportConfig`.

use std::path::PathBuf;
use std::str::FromStr;

use anyhow::{Context, Result, bail};
use clap::Args;

use crate::config::report::*;
use crate::sys;

use super::parse_id_list;

pub(super) const SCRIPT_EXAMPLES: &str = "\
EXAMPLES:
    memperf script | inferno-collapse-perf | inferno-flamegraph > faults.svg
    memperf script -F comm,pid,tid,time,event,trace -i perf.data

Tracepoint payloads are printed through each tracepoint's print fmt, as perf prints them;
one that needs a value the file does not hold is printed as name=0xvalue fields.";

/// Arguments of `memperf script`.
#[derive(Debug, Args)]
pub struct ScriptArgs {
    /// The perf.data file to read: memperf's or perf's, in file mode or pipe mode (`perf
    /// record -o -`). `-` reads standard input to its end, as `perf report -i -` does.
    #[arg(
        short = 'i',
        long = "input",
        value_name = "FILE",
        default_value = "memperf.data"
    )]
    pub input: PathBuf,

    /// Fields to print, comma-separated: comm, pid, tid, cpu, time, period, event, addr,
    /// data_src, weight, ins_lat, trace, ip, sym, symoff, dso (default: comm,tid,cpu,time,period,event,trace,ip,sym,
    /// symoff,dso, as perf script).
    #[arg(short = 'F', long = "fields", value_delimiter = ',', value_enum)]
    pub fields: Vec<ScriptField>,

    /// Only this event.
    #[arg(long = "event", value_name = "EVENT")]
    pub event: Option<String>,

    /// No progress bar.
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

impl ScriptArgs {
    /// A report configuration that prints samples instead of aggregating them.
    pub fn into_config(self) -> Result<ReportConfig> {
        use ScriptField::*;
        let fields = if self.fields.is_empty() {
            vec![
                Comm, Tid, Cpu, Time, Period, Event, Trace, Ip, Sym, Symoff, Dso,
            ]
        } else {
            self.fields
        };
        Ok(ReportConfig {
            event: self.event,
            quiet: self.quiet,
            output: ReportOutput::Script(fields),
            ..ReportConfig::plain(Input::from_arg(self.input))
        })
    }
}

pub(super) const REPORT_EXAMPLES: &str = "\
EXAMPLES:
    memperf report
        Header (events, samples, losses, truncated unwinds) and the top stacks by count.
    memperf report --folded > out.folded
        One line per unique stack, `comm;root;...;leaf count`, for flamegraph.pl or inferno.
    memperf report -i perf.data --folded
        A file made by `perf record -g` or `perf record --call-graph dwarf` (unwound here).
    perf record -o - -e page-faults -g -- ./app | memperf report -i - --folded
        perf's pipe mode, read from standard input (a piped stream saved to a file reads
        with -i FILE too).
    memperf report --folded --event syscalls:sys_enter_brk --comm java --pid 4242
        One event, one command name, one process.
    memperf report --flamegraph all.svg --all-events --weight bytes --max-depth 40
        Every event in one graph, each under a root frame of its name, in bytes; stacks
        deeper than 40 frames cut.
    memperf report --call-tree --event page-faults
        The call tree from main down, as perf report --stdio -g caller prints it.
    memperf report --folded --per-pid --addrs --inline --kernel-annotate
        Per-process stacks, unknown frames as module+offset, inline frames, kernel frames
        marked _[k].

PERMISSIONS:
    Reading the file needs nothing special. Kernel frames are named from /proc/kallsyms,
    which shows addresses only to root (or with kernel.kptr_restrict=0); binaries and debug
    files are read from their recorded paths (through /proc/PID/root while the process lives).";

/// Arguments of `memperf report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The perf.data file to read: memperf's or perf's, in file mode or pipe mode (`perf
    /// record -o -`). `-` reads standard input to its end, as `perf report -i -` does.
    #[arg(
        short = 'i',
        long = "input",
        value_name = "FILE",
        default_value = "memperf.data"
    )]
    pub input: PathBuf,

    /// Folded stacks: one line per unique stack, `comm;root;...;leaf count`, sorted.
    #[arg(long)]
    pub folded: bool,

    /// Only this event (by the name the file gives it, e.g. page-faults,
    /// syscalls:sys_enter_brk). Required for --folded when the file has several events.
    #[arg(long = "event", value_name = "EVENT")]
    pub event: Option<String>,

    /// Only these processes (comma-separated pids).
    #[arg(long, value_name = "PIDS")]
    pub pid: Option<String>,

    /// Only these threads (comma-separated tids).
    #[arg(long, value_name = "TIDS")]
    pub tid: Option<String>,

    /// Only threads with these command names (comma-separated, exact).
    #[arg(long, value_name = "COMMS")]
    pub comm: Option<String>,

    /// Only samples taken on these CPUs (e.g. `0`, `0,2-3`).
    #[arg(long, value_name = "CPUS")]
    pub cpu: Option<String>,

    /// Only samples between these times, in seconds as perf script prints them
    /// (`START,END`; either side may be empty).
    #[arg(long, value_name = "START,END")]
    pub time: Option<String>,

    /// Only the user-space part of each stack.
    #[arg(long, conflicts_with = "kernel_only")]
    pub user_only: bool,

    /// Only the kernel part of each stack.
    #[arg(long)]
    pub kernel_only: bool,

    /// Start each stack with `comm-PID` instead of `comm`.
    #[arg(long, conflicts_with = "per_tid")]
    pub per_pid: bool,

    /// Start each stack with `comm-PID/TID`.
    #[arg(long)]
    pub per_tid: bool,

    /// Leaf first instead of root first.
    #[arg(long)]
    pub reverse: bool,

    /// Name frames that have no symbol `module+0xOFFSET` (kernel ones
    /// `[kernel.kallsyms]+0xADDR`, ones outside any module `0xADDR`) instead of `[module]`.
    #[arg(long)]
    pub addrs: bool,

    /// Inline functions as frames of their own (reads DWARF).
    #[arg(long)]
    pub inline: bool,

    /// `function (file:line)` for each frame (reads DWARF).
    #[arg(long)]
    pub lines: bool,

    /// Keep Rust and C++ names mangled.
    #[arg(long)]
    pub no_demangle: bool,

    /// Mark kernel frames with a `_[k]` suffix, as FlameGraph's tools do.
    #[arg(long)]
    pub kernel_annotate: bool,

    /// Mark the frames read from the live process while recording (stacks deeper than the
    /// stack copy, finished from the thread's memory) with a ` [recovered]` suffix in folded
    /// and flame graph output, and give pprof samples that have them a `recovered_frames`
    /// label (how many). The text report and `memperf script` always mark them.
    #[arg(long)]
    pub mark_recovered: bool,

    /// Instead of stacks, count samples (and bytes for events with a size, as `--weight
    /// bytes` weighs them) by where the fault address lies (`mapping`: each mapping, the brk
    /// heap as [heap]; `file`: per file, anonymous memory together as //anon, [heap] and
    /// [stack] apart) or by `comm` / `pid`.
    #[arg(long, value_enum, value_name = "KEY", conflicts_with_all = ["folded", "flamegraph"])]
    pub by: Option<ByKey>,

    /// Instead of stacks, counts (and bytes for every event with a size, as `--weight bytes`
    /// weighs them) per event per interval, e.g. `1s`, `100ms`.
    #[arg(long, value_name = "INTERVAL", conflicts_with_all = ["folded", "flamegraph", "by"])]
    pub timeline: Option<String>,

    /// What each sample weighs in stacks: `count` (1), or `bytes`: a page per fault, the
    /// growth of the break for sys_enter_brk, the length for sys_enter_mmap/munmap,
    /// bytes_alloc for kmem:kmalloc and kmem_cache_alloc, PAGE_SIZE << order for
    /// kmem:mm_page_alloc.
    #[arg(long, value_enum, default_value = "count")]
    pub weight: Weight,

    /// Weigh each sample by the value of its tracepoint or probe field NAME (a probe's
    /// argument, e.g. `size` of `u:libc:malloc(size=%di)`), for the events that have one;
    /// the others are weighed as `--weight bytes` weighs them. Implies `--weight bytes`.
    #[arg(long, value_name = "NAME")]
    pub weight_field: Option<String>,

    /// Write a pprof profile (gzip-compressed profile.proto) to FILE (`-` for standard
    /// output): one sample type per event, with bytes beside the count where the event has a
    /// size; read it with `go tool pprof`.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["folded", "flamegraph", "by", "timeline"])]
    pub pprof: Option<PathBuf>,

    /// Write a flame graph (SVG) to FILE (`-` for standard output).
    #[arg(long, value_name = "FILE", conflicts_with = "folded")]
    pub flamegraph: Option<PathBuf>,

    /// Flame graph title (default: the event and the recorded command).
    #[arg(long, requires = "flamegraph")]
    pub title: Option<String>,

    /// Flame graph subtitle (default: the sample and loss counts).
    #[arg(long, requires = "flamegraph")]
    pub subtitle: Option<String>,

    /// What a flame graph counts (default from the event: pages for faults, calls for
    /// tracepoints, samples otherwise).
    #[arg(long, requires = "flamegraph")]
    pub countname: Option<String>,

    /// Flame graph width in pixels (default 1200).
    #[arg(long, requires = "flamegraph", value_name = "PIXELS")]
    pub width: Option<usize>,

    /// Flame graph palette: mem (default), hot, io, red, green, blue, aqua, yellow, purple,
    /// orange, java, js, perl, python, rust, wakeup. Kernel frames are drawn orange apart.
    #[arg(long, requires = "flamegraph", default_value = "mem")]
    pub colors: String,

    /// Fold or draw every event of the recording at once, each event's stacks under a root
    /// frame named after it (without it, a recording of several events needs --event).
    /// With --weight bytes, events without a size are left out, with a note.
    #[arg(long, conflicts_with_all = ["event", "pprof", "by", "timeline"])]
    pub all_events: bool,

    /// Cut stacks deeper than N frames below the command in folded stacks, flame graphs
    /// and the call tree: the frames past the N-th become one `[deeper frames cut]` frame,
    /// and the stacks cut are counted (in the subtitle, the tree's header, or on standard
    /// error for folded stacks). Deep, thin stacks otherwise leave most of a flame graph
    /// empty.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_depth: Option<u32>,

    /// Print a call tree instead of flat stacks, as `perf report --stdio -g caller` (or
    /// `callee`) does: `caller` from each root function down to the leaves, `callee` from
    /// each leaf function up to its callers; each node with its share of the event's
    /// samples (or bytes) and its weight, children heaviest first. Nodes under
    /// --tree-min percent are left out (and counted).
    #[arg(
        long,
        value_enum,
        value_name = "ORDER",
        num_args = 0..=1,
        default_missing_value = "caller",
        conflicts_with_all = ["folded", "flamegraph", "pprof", "by", "timeline", "all_events"]
    )]
    pub call_tree: Option<TreeOrder>,

    /// The call tree's threshold: nodes under this percentage of the event are left out.
    #[arg(
        long,
        value_name = "PERCENT",
        default_value_t = 0.5,
        requires = "call_tree"
    )]
    pub tree_min: f64,

    /// Say more in the text report's header: the debug files read for symbols.
    #[arg(short = 'v', long)]
    pub verbose: bool,

    /// How many stacks the text report shows, most frequent first.
    #[arg(short = 'T', long = "top", value_name = "N", default_value_t = 10)]
    pub top: usize,

    /// No progress bar.
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

/// Parses `1s`, `250ms`, `2` (seconds) into nanoseconds.
pub fn parse_interval(s: &str) -> Result<u64> {
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = t.strip_suffix("us") {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1e9)
    } else {
        (t, 1e9)
    };
    let v: f64 = num
        .trim()
        .parse()
        .with_context(|| format!("invalid interval `{s}`: expected e.g. 1s, 100ms"))?;
    let ns = (v * scale).round();
    if !ns.is_finite() || ns < 1.0 {
        bail!("invalid interval `{s}`: it must be positive");
    }
    Ok(ns as u64)
}

/// Parses `START,END` in seconds into nanoseconds.
pub fn parse_time_range(s: &str) -> Result<(Option<u64>, Option<u64>)> {
    let Some((a, b)) = s.split_once(',') else {
        bail!("invalid --time `{s}`: expected START,END in seconds (either may be empty)");
    };
    let one = |v: &str| -> Result<Option<u64>> {
        let v = v.trim();
        if v.is_empty() {
            return Ok(None);
        }
        let secs: f64 = v
            .parse()
            .with_context(|| format!("invalid time `{v}` in --time: expected seconds"))?;
        if !secs.is_finite() || secs < 0.0 {
            bail!("invalid time `{v}` in --time: expected seconds >= 0");
        }
        Ok(Some((secs * 1e9).round() as u64))
    };
    let (start, end) = (one(a)?, one(b)?);
    if let (Some(x), Some(y)) = (start, end)
        && x > y
    {
        bail!("invalid --time `{s}`: the start is after the end");
    }
    Ok((start, end))
}

impl ReportArgs {
    /// Checks the arguments and turns them into a `ReportConfig`.
    pub fn into_config(self) -> Result<ReportConfig> {
        if self.flamegraph.is_some()
            && inferno::flamegraph::Palette::from_str(&self.colors).is_err()
        {
            bail!(
                "unknown --colors `{}`: expected mem, hot, io, red, green, blue, aqua, yellow, purple, orange, java, js, perl, python, rust or wakeup",
                self.colors
            );
        }
        let cpus = match &self.cpu {
            Some(list) => Some(
                sys::parse_cpu_list(list)
                    .map_err(|e| anyhow::anyhow!("invalid CPU list `{list}` for --cpu: {e}"))?,
            ),
            None => None,
        };
        let timeline = self.timeline.as_deref().map(parse_interval).transpose()?;
        super::check_output("--pprof", self.pprof.as_deref())?;
        super::check_output("--flamegraph", self.flamegraph.as_deref())?;
        // One output; where several are asked for, this order decides.
        let output = if let Some(p) = self.pprof {
            ReportOutput::Pprof(p)
        } else if let Some(by) = self.by {
            ReportOutput::By(by)
        } else if let Some(t) = timeline {
            ReportOutput::Timeline(t)
        } else if let Some(output) = self.flamegraph {
            ReportOutput::Flamegraph(FlameConfig {
                output,
                title: self.title,
                subtitle: self.subtitle,
                countname: self.countname,
                width: self.width,
                colors: self.colors,
            })
        } else if let Some(order) = self.call_tree {
            if !(0.0..=100.0).contains(&self.tree_min) {
                bail!(
                    "invalid --tree-min {}: expected a percentage from 0 to 100",
                    self.tree_min
                );
            }
            ReportOutput::CallTree(order, self.tree_min)
        } else if self.folded {
            ReportOutput::Folded
        } else {
            ReportOutput::Text
        };
        Ok(ReportConfig {
            input: Input::from_arg(self.input),
            output,
            event: self.event,
            pids: self
                .pid
                .as_deref()
                .map(|s| parse_id_list(s, "pid"))
                .transpose()?,
            tids: self
                .tid
                .as_deref()
                .map(|s| parse_id_list(s, "tid"))
                .transpose()?,
            comms: self
                .comm
                .map(|s| s.split(',').map(|c| c.trim().to_string()).collect()),
            cpus,
            time: match &self.time {
                Some(t) => parse_time_range(t)?,
                None => (None, None),
            },
            space: if self.user_only {
                StackSpace::User
            } else if self.kernel_only {
                StackSpace::Kernel
            } else {
                StackSpace::All
            },
            prefix: if self.per_pid {
                Prefix::Pid
            } else if self.per_tid {
                Prefix::Tid
            } else {
                Prefix::Comm
            },
            reverse: self.reverse,
            addrs: self.addrs,
            inline: self.inline,
            lines: self.lines,
            demangle: !self.no_demangle,
            kernel_annotate: self.kernel_annotate,
            mark_recovered: self.mark_recovered,
            top: self.top,
            quiet: self.quiet,
            weight: if self.weight_field.is_some() {
                Weight::Bytes
            } else {
                self.weight
            },
            weight_field: self.weight_field,
            all_events: self.all_events,
            max_depth: self.max_depth.map(|d| d as usize),
            verbose: self.verbose,
        })
    }
}
