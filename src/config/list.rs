//! What `memperf list` is told to list.

use std::path::PathBuf;

/// What to list, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListConfig {
    /// Every event and tool, or those the filters match.
    Events { filter: Vec<String> },
    /// The capability report, for every tool or for the tools and events named.
    Check { names: Vec<String> },
    /// The allocators in a process's mapped objects.
    AllocatorsOf { pid: u32 },
    /// The allocators in library files.
    AllocatorsIn { files: Vec<PathBuf> },
    /// The USDT probes and functions of one object file.
    ProbesIn { file: PathBuf, filter: Vec<String> },
}
