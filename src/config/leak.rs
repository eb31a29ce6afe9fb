//! What `memperf leak` (and the allocation tracing of `rss`, `heap` and `mem record`) is
//! told to trace and report.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::record::CallGraph;
use crate::sys::CommandStdout;

/// How user probes are placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeVia {
    /// tracefs uprobe_events where it is writable, else the uprobe PMU.
    Auto,
    /// tracefs uprobe_events (3.5+): one kernel consumer per probe, shared by every event.
    Tracefs,
    /// The uprobe PMU (4.17+): a consumer per opened event, for hosts without tracefs.
    Pmu,
}

/// How the report is sorted (memleak --sort).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeakSort {
    Size,
    Count,
}

/// What `memperf leak` traces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeakTarget {
    Pid(u32),
    Command(Vec<OsString>),
    /// Every CPU, kernel allocators.
    System,
}

/// The page faults joined to the allocations (`leak --faults`, `rss`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultOptions {
    /// Copy each fault's user stack (the toucher), with this call graph.
    pub touchers: bool,
    pub call_graph: CallGraph,
}

/// A validated `memperf leak` configuration.
#[derive(Debug, Clone)]
pub struct LeakConfig {
    pub target: LeakTarget,
    /// Where a traced command's standard output goes: standard error when standard output
    /// carries folded stacks or a profile.
    pub command_stdout: CommandStdout,
    /// Kernel allocators (the default without -p or a command).
    pub kernel: bool,
    pub trace: bool,
    pub show_allocs: bool,
    pub older_ms: u64,
    pub sample_rate: u64,
    pub top: usize,
    pub min_size: Option<u64>,
    pub max_size: Option<u64>,
    pub obj: Option<String>,
    pub symbols_prefix: String,
    pub percpu: bool,
    pub combined_only: bool,
    pub sort: LeakSort,
    pub folded: bool,
    pub pprof: Option<PathBuf>,
    pub call_graph: CallGraph,
    /// `--call-graph dwarf,auto` (the default): the allocation stacks' copy starts at
    /// `call_graph`'s size and is learnt from the stacks unwound (`live::resize`).
    pub stack_auto: bool,
    pub max_entries: usize,
    pub mmap_pages: Option<usize>,
    pub probe_via: ProbeVia,
    pub interval: Duration,
    pub count: Option<u64>,
    /// Join page faults to the allocations (`--faults`).
    pub faults: Option<FaultOptions>,
    /// Track the heap analyses of `memperf heap` (memray's temporary threshold).
    pub heap: Option<usize>,
}

impl LeakConfig {
    /// Standard output carries folded stacks or a profile: no text report, header or
    /// command output goes there.
    pub fn data_on_stdout(&self) -> bool {
        self.command_stdout == CommandStdout::Stderr
    }

    /// The allocation tracing another command runs (`rss`, `mem record`): every
    /// allocation of `target`'s libc allocator with its stack, no report options.
    pub fn allocations(target: LeakTarget, call_graph: CallGraph) -> LeakConfig {
        LeakConfig {
            target,
            command_stdout: CommandStdout::Inherit,
            kernel: false,
            trace: false,
            show_allocs: false,
            older_ms: 0,
            sample_rate: 1,
            top: 10,
            min_size: None,
            max_size: None,
            obj: None,
            symbols_prefix: String::new(),
            percpu: false,
            combined_only: true,
            sort: LeakSort::Size,
            folded: false,
            pprof: None,
            call_graph,
            stack_auto: false,
            max_entries: 1_000_000,
            mmap_pages: None,
            probe_via: ProbeVia::Auto,
            interval: Duration::from_secs(1),
            count: None,
            faults: None,
            heap: None,
        }
    }
}
