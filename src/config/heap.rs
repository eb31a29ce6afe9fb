//! What `memperf heap` is told to trace, analyse and print.

use std::path::PathBuf;
use std::time::Duration;

use crate::config::leak::LeakConfig;

/// What the folded and flame graph outputs weigh.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeapMetric {
    /// Live bytes at the peak.
    Peak,
    /// Temporary allocations (heaptrack's rule), counted.
    Temporary,
    /// Bytes still live at the end.
    Leaked,
    /// Every allocation, counted.
    Allocations,
    /// Bytes allocated over the run.
    AllocatedBytes,
}

/// What `memperf heap` prints on standard output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeapOutput {
    Text,
    Folded,
    Flamegraph(PathBuf),
}

/// A validated `memperf heap` configuration: allocation tracing as leak does it, every
/// call tracked by the heap analyses.
#[derive(Debug, Clone)]
pub struct HeapConfig {
    pub leak: LeakConfig,
    pub duration: Option<Duration>,
    pub output: HeapOutput,
    pub metric: HeapMetric,
    pub pprof: Option<PathBuf>,
    pub timeline: Option<PathBuf>,
    pub timeline_csv: Option<PathBuf>,
    pub temporary_threshold: usize,
    pub top: usize,
    pub write: Option<PathBuf>,
    pub input: Option<PathBuf>,
    /// Reports of the analyses so far, this often, while tracing.
    pub interval: Option<Duration>,
    /// Stop after this many interval reports.
    pub count: Option<u64>,
}
