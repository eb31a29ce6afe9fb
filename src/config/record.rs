//! What `memperf record` (and every live run built on its recorder) is told to do.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::events::{EventSpec, Period};
use crate::sys;

/// When dwarf stacks are unwound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnwindWhen {
    /// While recording; the file holds callchains only.
    Online,
    /// Later, by the reader; the file holds raw registers and stack bytes.
    Offline,
}

/// What the recorder does with each record (benchmark aid).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// Where the command's standard output goes: memperf's standard error when memperf's
    /// standard output carries data.
    pub command_stdout: sys::CommandStdout,
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
    /// Keep memperf's own samples when recording system-wide.
    pub include_self: bool,
    /// MMAP, COMM and FORK records, and the processes that existed before: what stacks,
    /// files and names need (`memperf stat` sums tracepoint fields and needs none).
    pub side_band: bool,
    /// `--call-graph dwarf,auto`: the DWARF events' stack copy size is learnt while
    /// recording (`live::resize`), starting from `call_graph`'s.
    pub stack_auto: bool,
    /// perf's cgroup mode (`-G`): system-wide events opened on these cgroups' directories,
    /// which count only their tasks (and their descendants').
    pub cgroups: Vec<sys::cgroup::Cgroup>,
    /// By event index, the events whose samples are handed on without their user stacks
    /// (counted) while the reader is behind, instead of letting the rings overflow
    /// (`session::shed`): the allocation tools' allocating probes, whose tables a lost free
    /// or allocation makes wrong. Empty: none.
    pub shed_stacks: Vec<bool>,
}

impl RecordConfig {
    /// A recording another command makes of `events` on `target`, handled in memory: no
    /// file, quiet, every record handed on, stacks (if a caller asks for them) unwound
    /// online, the side band kept, no period, cgroup or stack rule of its own, the command's
    /// standard output left as it is. Callers change what differs with struct update syntax.
    pub fn internal(events: Vec<EventSpec>, target: Target, cpus: Vec<u32>) -> RecordConfig {
        RecordConfig {
            events,
            target,
            cpus,
            command: None,
            command_stdout: sys::CommandStdout::Inherit,
            period: None,
            call_graph: CallGraph::None,
            unwind: UnwindWhen::Online,
            user_only: false,
            mmap_pages: None,
            output: PathBuf::from("/dev/null"),
            duration: None,
            quiet: true,
            consume: Consume::All,
            cmdline: std::env::args().collect(),
            include_self: false,
            side_band: true,
            stack_auto: false,
            cgroups: Vec::new(),
            shed_stacks: Vec::new(),
        }
    }

    /// How `spec`'s user stacks are captured: its `call-graph=` term, else the recording's.
    pub fn call_graph_of(&self, spec: &EventSpec) -> CallGraph {
        spec.terms.call_graph.unwrap_or(self.call_graph)
    }

    /// The call graph of the event that copies the most stack (DWARF first): what the
    /// rings are sized for and whether the recorder unwinds.
    pub fn widest_call_graph(&self) -> CallGraph {
        self.events
            .iter()
            .map(|e| self.call_graph_of(e))
            .max_by_key(|c| match c {
                CallGraph::Dwarf { stack_bytes } => 2 + u64::from(*stack_bytes),
                CallGraph::Fp => 1,
                CallGraph::None => 0,
            })
            .unwrap_or(self.call_graph)
    }
}

/// The largest user stack copy the kernel accepts (perf: round_down(USHRT_MAX, 8)).
pub const MAX_STACK_BYTES: u32 = 65528;

/// The copy size `--call-graph dwarf,auto` starts from, before the unwinds tell how much
/// the stacks need.
pub const AUTO_START_BYTES: u32 = 8192;
