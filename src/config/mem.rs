//! What `memperf mem record` and `memperf mem report` are told to do.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::config::leak::LeakConfig;
use crate::config::record::Target;
use crate::config::report::Input;

/// Which accesses to sample (`-t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Types {
    pub loads: bool,
    pub stores: bool,
}

/// What `mem report` groups by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// perf mem report's rows.
    Perf,
    /// The mapping holding the data address.
    Mapping,
    /// The live allocation holding it (the recording's allocator calls replayed), else
    /// the mapping.
    Allocation,
}

/// `memperf mem record`, validated.
#[derive(Debug, Clone)]
pub struct MemRecordConfig {
    pub types: Types,
    pub ldlat: u32,
    pub output: PathBuf,
    pub target: Target,
    pub command: Option<Vec<OsString>>,
    pub mmap_pages: Option<usize>,
    /// The allocation tracing recorded beside the samples (a command or one process).
    pub allocations: Option<LeakConfig>,
}

/// `memperf mem report`, validated.
#[derive(Debug, Clone)]
pub struct MemReportConfig {
    pub input: Input,
    pub group: Group,
}
