//! What `memperf report` and `memperf script` are told to read and print.

use std::path::PathBuf;

/// Fields `memperf script -F` can print.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// PERF_SAMPLE_DATA_SRC, in hex and decoded (`|OP LOAD|LVL L1 hit|...`), as perf.
    DataSrc,
    /// PERF_SAMPLE_WEIGHT, or a WEIGHT_STRUCT's access latency (var1).
    Weight,
    /// A WEIGHT_STRUCT's instruction latency (var2).
    InsLat,
}

/// What a sample weighs in `memperf report`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weight {
    Count,
    Bytes,
}

/// The direction of `memperf report --call-tree`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeOrder {
    /// From the roots (`main`, `_start`) down to the functions that sampled.
    Caller,
    /// From the functions that sampled up to their callers.
    Callee,
}

/// What `memperf report --by` groups samples by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// The call tree of each event, and the threshold in percent.
    CallTree(TreeOrder, f64),
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
    /// Recovered frames marked in every output, not only the text report and script.
    pub mark_recovered: bool,
    pub top: usize,
    pub quiet: bool,
    pub weight: Weight,
    /// `--weight-field`: the payload field each sample weighs, where its event has it.
    pub weight_field: Option<String>,
    /// Folded stacks and flame graphs of every event, each under a root frame of its name.
    pub all_events: bool,
    /// Frames kept below the command in folded stacks, flame graphs and call trees.
    pub max_depth: Option<usize>,
    /// The text report's header names the debug files used.
    pub verbose: bool,
}

impl ReportConfig {
    /// Whether the output is the text report (header and top stacks, or the call tree), the
    /// outputs with room to say what went wrong in them.
    pub fn is_text_report(&self) -> bool {
        matches!(self.output, ReportOutput::Text | ReportOutput::CallTree(..))
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
            mark_recovered: false,
            top: 0,
            quiet: true,
            weight: Weight::Count,
            weight_field: None,
            all_events: false,
            max_depth: None,
            verbose: false,
        }
    }
}
