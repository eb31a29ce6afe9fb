//! What `memperf rss` is told to trace and print.

use std::path::PathBuf;
use std::time::Duration;

use crate::config::leak::LeakConfig;

/// What `memperf rss` prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RssOutput {
    Text,
    Folded,
    Flamegraph(PathBuf),
}

/// A validated `memperf rss` configuration: allocation tracing as leak does it, with faults.
#[derive(Debug, Clone)]
pub struct RssConfig {
    pub leak: LeakConfig,
    pub duration: Option<Duration>,
    pub output: RssOutput,
    pub pprof: Option<PathBuf>,
    pub top: usize,
    /// `-w FILE`: also write the recording.
    pub write: Option<PathBuf>,
    /// `-i FILE`: report on a recording instead.
    pub input: Option<PathBuf>,
}
