//! Command-line definitions (clap) and their validation into typed configs.
//!
//! No subcommand sees raw strings: `Cli` is parsed by clap, then each
//! subcommand's arguments are checked and turned into a `*Config` before any
//! work starts.

use std::ffi::OsString;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::events::{self, EventSpec, Period};
use crate::sys;

pub mod leak;

/// memperf: a memory profiler for Linux built on perf_event_open, without BPF.
#[derive(Debug, Parser)]
#[command(name = "memperf", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Record page faults, tracepoints or other events with their stacks into a perf.data file.
    #[command(after_help = RECORD_EXAMPLES)]
    Record(RecordArgs),
    /// Read a perf.data file (memperf's or perf's), unwind and symbolize its stacks, and print
    /// the top stacks or folded stacks for flame graphs.
    #[command(after_help = REPORT_EXAMPLES)]
    Report(ReportArgs),
    /// Print every sample as perf script does (header line, then one line per frame), for
    /// stackcollapse-perf.pl, inferno-collapse-perf and other perf-script readers.
    #[command(after_help = SCRIPT_EXAMPLES)]
    Script(ScriptArgs),
    /// Outstanding allocations by stack, as BCC's memleak prints them, without BPF: user
    /// allocators through uprobes (-p/-c), kernel allocators through kmem tracepoints.
    #[command(after_help = leak::LEAK_EXAMPLES)]
    Leak(leak::LeakArgs),
}

const SCRIPT_EXAMPLES: &str = "\
EXAMPLES:
    memperf script | inferno-collapse-perf | inferno-flamegraph > faults.svg
    memperf script -F comm,pid,tid,time,event,trace -i perf.data

Tracepoint payloads are printed through each tracepoint's print fmt, as perf prints them;
one that needs a value the file does not hold is printed as name=0xvalue fields.";

/// Fields `memperf script -F` can print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScriptField {
    Comm,
    Pid,
    Tid,
    Cpu,
    Time,
    Period,
    Event,
    Addr,
    Trace,
    Ip,
    Sym,
    Symoff,
    Dso,
}

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
    /// trace, ip, sym, symoff, dso (default: comm,tid,cpu,time,period,event,trace,ip,sym,
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

const REPORT_EXAMPLES: &str = "\
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

    /// How many stacks the text report shows, most frequent first.
    #[arg(short = 'T', long = "top", value_name = "N", default_value_t = 10)]
    pub top: usize,

    /// No progress bar.
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

/// What a sample weighs in `memperf report`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Weight {
    Count,
    Bytes,
}

/// What `memperf report --by` groups samples by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ByKey {
    /// Each mapping the fault address falls in (file, //anon, [heap], [stack], huge pages).
    Mapping,
    /// The file behind the mapping (all anonymous memory as //anon).
    File,
    /// The thread's command name.
    Comm,
    /// The process.
    Pid,
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

/// Flame graph settings of `memperf report --flamegraph`.
#[derive(Debug, Clone, PartialEq)]
pub struct FlameConfig {
    pub output: PathBuf,
    pub title: Option<String>,
    pub subtitle: Option<String>,
    pub countname: Option<String>,
    pub width: Option<usize>,
    pub colors: String,
}

/// Which part of each stack a report keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StackSpace {
    All,
    User,
    Kernel,
}

/// What starts each stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prefix {
    Comm,
    Pid,
    Tid,
}

/// Where `memperf report` and `memperf script` read a recording from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A perf.data file, in file mode or pipe mode.
    File(PathBuf),
    /// Standard input (`-i -`), read to its end before the report starts.
    Stdin,
}

impl Input {
    /// `-` is standard input, as for perf; a file named `-` is `./-`.
    pub fn from_arg(path: PathBuf) -> Input {
        if path.as_os_str() == "-" {
            Input::Stdin
        } else {
            Input::File(path)
        }
    }
}

impl std::fmt::Display for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Input::File(p) => p.display().fmt(f),
            Input::Stdin => f.write_str("standard input"),
        }
    }
}

/// What `memperf report` (or `memperf script`) prints: one output, chosen once.
#[derive(Debug, Clone, PartialEq)]
pub enum ReportOutput {
    /// The header and the top stacks.
    Text,
    /// `comm;root;...;leaf count` lines.
    Folded,
    Flamegraph(FlameConfig),
    /// A gzip-compressed profile.proto, to this path (`-`: standard output).
    Pprof(PathBuf),
    /// `memperf script`: every sample with these fields.
    Script(Vec<ScriptField>),
    /// Samples (and bytes) by mapping, file, command or process.
    By(ByKey),
    /// Samples (and bytes) per event per interval of this many nanoseconds.
    Timeline(u64),
}

/// A validated `memperf report` configuration.
#[derive(Debug, Clone)]
pub struct ReportConfig {
    pub input: Input,
    pub output: ReportOutput,
    pub event: Option<String>,
    pub pids: Option<Vec<u32>>,
    pub tids: Option<Vec<u32>>,
    pub comms: Option<Vec<String>>,
    pub cpus: Option<Vec<u32>>,
    /// Nanoseconds, inclusive.
    pub time: (Option<u64>, Option<u64>),
    pub space: StackSpace,
    pub prefix: Prefix,
    pub reverse: bool,
    pub addrs: bool,
    pub inline: bool,
    pub lines: bool,
    pub demangle: bool,
    pub kernel_annotate: bool,
    pub top: usize,
    pub quiet: bool,
    pub weight: Weight,
}

impl ReportConfig {
    /// Whether the output is the text report (header and top stacks), the one output with
    /// room to say what went wrong in it.
    pub fn is_text_report(&self) -> bool {
        self.output == ReportOutput::Text
    }

    /// Every stack of every event, named plainly: no filter, no annotation, no output file.
    pub fn plain(input: Input) -> ReportConfig {
        ReportConfig {
            input,
            output: ReportOutput::Text,
            event: None,
            pids: None,
            tids: None,
            comms: None,
            cpus: None,
            time: (None, None),
            space: StackSpace::All,
            prefix: Prefix::Comm,
            reverse: false,
            addrs: false,
            inline: false,
            lines: false,
            demangle: true,
            kernel_annotate: false,
            top: 0,
            quiet: true,
            weight: Weight::Count,
        }
    }
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
            top: self.top,
            quiet: self.quiet,
            weight: self.weight,
        })
    }
}

const RECORD_EXAMPLES: &str = "\
EXAMPLES:
    memperf record -e page-faults -a -- sleep 30
        Every page fault on every CPU for 30 seconds, with DWARF-unwound stacks.
    memperf record -e page-faults,syscalls:sys_enter_brk,syscalls:sys_enter_mmap -p 1234
        Faults and heap/mmap growth of process 1234 (all its threads), until Ctrl-C.
    memperf record -e major-faults --call-graph fp -o faults.data -- ./server --port 80
        Major faults of a command, with frame-pointer stacks only.
    memperf record -e kmem:kmalloc -a -C 0 --duration 5
        Kernel allocations on CPU 0 for 5 seconds.
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
    /// `subsystem:name` (e.g. syscalls:sys_enter_brk, kmem:kmalloc).
    #[arg(
        short = 'e',
        long = "event",
        value_name = "EVENTS",
        default_value = "page-faults"
    )]
    pub events: Vec<String>,

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

    /// Record stacks with the default call-graph mode (dwarf).
    #[arg(short = 'g')]
    pub g: bool,

    /// How to record user stacks: `dwarf[,STACK_BYTES]` (copy the stack and unwind it with
    /// DWARF CFI, falling back to frame pointers where no CFI covers an address; default,
    /// 8192 bytes), `fp` (frame pointers, walked by the kernel) or `none`.
    #[arg(long = "call-graph", value_name = "MODE", default_value = "dwarf")]
    pub call_graph: String,

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

/// When dwarf stacks are unwound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum UnwindWhen {
    /// While recording; the file holds callchains only.
    Online,
    /// Later, by the reader; the file holds raw registers and stack bytes.
    Offline,
}

/// What the recorder does with each record (benchmark aid).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Consume {
    /// Parse, unwind and write every record.
    All,
    /// Only advance the ring buffer tail.
    None,
}

/// How user stacks are captured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallGraph {
    None,
    Fp,
    Dwarf { stack_bytes: u32 },
}

/// What to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Every process on the configured CPUs.
    SystemWide,
    /// These processes (all threads, inherited by new threads and children).
    Pids(Vec<u32>),
    /// These threads only.
    Tids(Vec<u32>),
    /// The command given after `--`, started by memperf.
    Command,
}

/// A validated `memperf record` configuration.
#[derive(Debug, Clone)]
pub struct RecordConfig {
    pub events: Vec<EventSpec>,
    pub target: Target,
    /// CPUs to open events on (every online CPU unless -C).
    pub cpus: Vec<u32>,
    /// The command to run: the target itself, or (with -a/-C) what bounds the recording.
    pub command: Option<Vec<OsString>>,
    /// Overrides each event's default period or frequency.
    pub period: Option<Period>,
    pub call_graph: CallGraph,
    pub unwind: UnwindWhen,
    pub user_only: bool,
    pub mmap_pages: Option<usize>,
    pub output: PathBuf,
    pub duration: Option<Duration>,
    pub quiet: bool,
    pub consume: Consume,
    /// The command line memperf was started with, for the file's CMDLINE feature.
    pub cmdline: Vec<String>,
}

/// The largest user stack copy the kernel accepts (perf: round_down(USHRT_MAX, 8)).
pub const MAX_STACK_BYTES: u32 = 65528;

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

fn parse_id_list(s: &str, what: &str) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        if part.is_empty() {
            bail!("empty {what} in `{s}`");
        }
        let id: u32 = part
            .parse()
            .with_context(|| format!("invalid {what} `{part}`: expected a number"))?;
        if id == 0 {
            bail!("invalid {what} 0");
        }
        out.push(id);
    }
    Ok(out)
}

impl RecordArgs {
    /// Checks the arguments and turns them into a `RecordConfig`.
    pub fn into_config(self) -> Result<RecordConfig> {
        let mut specs = Vec::new();
        for list in &self.events {
            specs.extend(events::parse_event_list(list)?);
        }
        let period = match (self.count, self.freq) {
            (Some(0), _) => bail!("invalid sample period 0 for -c: it must be at least 1"),
            (Some(c), _) => Some(Period::Count(c)),
            (None, Some(0)) => bail!("invalid frequency 0 for -F: it must be at least 1 Hz"),
            (None, Some(f)) => Some(Period::Frequency(f)),
            (None, None) => None,
        };
        let call_graph = parse_call_graph(&self.call_graph)?;
        if self.unwind == UnwindWhen::Offline && !matches!(call_graph, CallGraph::Dwarf { .. }) {
            bail!("--unwind offline only applies to --call-graph dwarf");
        }
        if let Some(m) = self.mmap_pages
            && (m == 0 || !m.is_power_of_two())
        {
            bail!("-m/--mmap-pages must be a power of two, not {m}");
        }
        let cpus = match &self.cpu {
            Some(list) => {
                let wanted = sys::parse_cpu_list(list)
                    .map_err(|e| anyhow::anyhow!("invalid CPU list `{list}` for -C: {e}"))?;
                let online = sys::online_cpus().context("failed to read the online CPUs")?;
                if let Some(c) = wanted.iter().find(|c| !online.contains(c)) {
                    bail!("CPU {c} given to -C is not online (online: {online:?})");
                }
                wanted
            }
            None => sys::online_cpus().context("failed to read the online CPUs")?,
        };
        let has_command = !self.command.is_empty();
        let target = if let Some(p) = &self.pid {
            if has_command {
                bail!("give either -p or a command after --, not both");
            }
            Target::Pids(parse_id_list(p, "pid")?)
        } else if let Some(t) = &self.tid {
            if has_command {
                bail!("give either -t or a command after --, not both");
            }
            Target::Tids(parse_id_list(t, "tid")?)
        } else if has_command && !self.all_cpus && self.cpu.is_none() {
            Target::Command
        } else {
            // `-a -- sleep 30`: system-wide for as long as the command runs.
            Target::SystemWide
        };
        let duration = match self.duration {
            Some(d) if !(d > 0.0 && d.is_finite()) => {
                bail!("--duration must be a positive number of seconds, not {d}")
            }
            Some(d) => Some(Duration::from_secs_f64(d)),
            None => None,
        };
        Ok(RecordConfig {
            events: specs,
            target,
            cpus,
            command: has_command.then_some(self.command),
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
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn call_graph_modes() {
        assert_eq!(parse_call_graph("fp").ok(), Some(CallGraph::Fp));
        assert_eq!(parse_call_graph("none").ok(), Some(CallGraph::None));
        assert_eq!(
            parse_call_graph("dwarf").ok(),
            Some(CallGraph::Dwarf { stack_bytes: 8192 })
        );
        assert_eq!(
            parse_call_graph("dwarf,4000").ok(),
            Some(CallGraph::Dwarf { stack_bytes: 4000 })
        );
        assert_eq!(
            parse_call_graph("dwarf,4001").ok(),
            Some(CallGraph::Dwarf { stack_bytes: 4008 })
        );
        let e = parse_call_graph("dwarf,70000").unwrap_err().to_string();
        assert!(e.contains("65528"), "{e}");
        let e = parse_call_graph("lbr").unwrap_err().to_string();
        assert!(e.contains("unknown --call-graph mode `lbr`"), "{e}");
    }

    fn config(args: &[&str]) -> Result<RecordConfig> {
        let mut argv = vec!["memperf", "record"];
        argv.extend_from_slice(args);
        let cli = Cli::try_parse_from(argv)?;
        match cli.command {
            Command::Record(r) => r.into_config(),
            _ => unreachable!("parsed a record command line"),
        }
    }

    fn report_config(args: &[&str]) -> Result<ReportConfig> {
        let mut argv = vec!["memperf", "report"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv)?.command {
            Command::Report(r) => r.into_config(),
            _ => unreachable!("parsed a report command line"),
        }
    }

    #[test]
    fn report_time_range_and_lists() {
        let c = report_config(&[
            "--time",
            "1.5,2",
            "--pid",
            "3,4",
            "--per-pid",
            "--user-only",
        ])
        .unwrap();
        assert_eq!(c.time, (Some(1_500_000_000), Some(2_000_000_000)));
        assert_eq!(c.pids, Some(vec![3, 4]));
        assert_eq!((c.prefix, c.space), (Prefix::Pid, StackSpace::User));
        assert_eq!(
            report_config(&["--time", ",7"]).unwrap().time,
            (None, Some(7_000_000_000))
        );
        let e = report_config(&["--time", "5,1"]).unwrap_err().to_string();
        assert!(e.contains("the start is after the end"), "{e}");
        let e = report_config(&["--time", "5"]).unwrap_err().to_string();
        assert!(e.contains("expected START,END"), "{e}");
        assert!(report_config(&["--user-only", "--kernel-only"]).is_err());
    }

    #[test]
    fn report_input_dash_is_standard_input() {
        assert_eq!(report_config(&["-i", "-"]).unwrap().input, Input::Stdin);
        let c = report_config(&["-i", "./-"]).unwrap();
        assert_eq!(c.input, Input::File(PathBuf::from("./-")));
        assert_eq!(
            report_config(&[]).unwrap().input,
            Input::File(PathBuf::from("memperf.data"))
        );
        assert_eq!(Input::Stdin.to_string(), "standard input");
        let script = match Cli::try_parse_from(["memperf", "script", "-i", "-"])
            .unwrap()
            .command
        {
            Command::Script(s) => s.into_config().unwrap(),
            _ => unreachable!("parsed a script command line"),
        };
        assert_eq!(script.input, Input::Stdin);
    }

    #[test]
    fn period_zero_is_rejected() {
        let e = config(&["-c", "0", "--", "true"]).unwrap_err().to_string();
        assert_eq!(e, "invalid sample period 0 for -c: it must be at least 1");
    }

    #[test]
    fn targets() {
        let c = config(&["--", "true"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.target, Target::Command);
        let c = config(&["-a", "--", "sleep", "1"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.target, Target::SystemWide);
        assert!(c.command.is_some());
        let c = config(&["-p", "12,34"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.target, Target::Pids(vec![12, 34]));
        let e = config(&["-p", "x"]).unwrap_err().to_string();
        assert!(e.contains("invalid pid `x`"), "{e}");
        let e = config(&["-m", "3"]).unwrap_err().to_string();
        assert!(e.contains("power of two"), "{e}");
    }
}
