//! What the memory tools (`oomkill`, `faults`, `mmapsnoop`, ...) are told to do: the
//! options every tool shares, and each tool's own beside them.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::record::Target;

/// The options every tool shares.
#[derive(Debug, Clone)]
pub struct ToolConfig {
    pub target: Target,
    pub cpus: Vec<u32>,
    pub command: Option<Vec<OsString>>,
    /// Where the command's standard output goes (standard error when the tool's standard
    /// output carries folded stacks or a flame graph).
    pub command_stdout: crate::sys::CommandStdout,
    pub duration: Option<Duration>,
    /// Unwind each sample's user stack (DWARF) and keep its kernel stack.
    pub stacks: bool,
    pub mmap_pages: Option<usize>,
    /// `-w FILE`: also write what the tool saw as a perf.data recording.
    pub write: Option<PathBuf>,
    /// `-i FILE`: read a recording instead of the live system.
    pub input: Option<PathBuf>,
    /// Print every interval, `count` times.
    pub interval: Option<Duration>,
    pub count: Option<u64>,
    /// Sample one event in N (fault tools' `-c`); every event by default.
    pub period: Option<u64>,
    /// `-n NAME`: only processes whose name contains NAME. The tool checks it; the kernel
    /// filters its tracepoints by it too (`comm ~ "*NAME*"`), as BCC does in BPF.
    pub comm: Option<String>,
}

impl ToolConfig {
    /// Whether the tool traces threads (`-t`): its lines then show thread ids, not pids.
    pub fn by_tid(&self) -> bool {
        matches!(self.target, Target::Tids(_))
    }
}

/// `mmapsnoop` and `shmsnoop`: `-n` is the tool's `comm`, `--stack` its `stacks`.
#[derive(Debug, Clone)]
pub struct SnoopConfig {
    pub tool: ToolConfig,
    /// A time column first (`-T`).
    pub timestamp: bool,
}

/// `drsnoop`: `-n` is the tool's `comm`, `--stack` its `stacks`.
#[derive(Debug, Clone)]
pub struct DrsnoopConfig {
    pub tool: ToolConfig,
    /// A TIME(s) column (`-T`).
    pub timestamp: bool,
    /// A UID column (`-U`).
    pub print_uid: bool,
    /// Only tasks of this uid (`-u`).
    pub uid: Option<u32>,
    /// A FREE(KB) column (`-v`).
    pub verbose: bool,
}

/// `swapin`: its interval and count are the tool's.
#[derive(Debug, Clone)]
pub struct SwapinConfig {
    pub tool: ToolConfig,
    /// No HH:MM:SS line before each interval (`-T`).
    pub notime: bool,
}
