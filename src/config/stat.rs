//! What `memperf stat` is told to count.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::record::{RecordConfig, Target};
use crate::events::EventSpec;

/// A validated `memperf stat` configuration.
#[derive(Debug, Clone)]
pub struct StatConfig {
    pub events: Vec<EventSpec>,
    pub target: Target,
    pub cpus: Vec<u32>,
    pub command: Option<Vec<OsString>>,
    pub interval: Option<Duration>,
    /// `-x SEP`: CSV.
    pub separator: Option<String>,
    pub per_cpu: bool,
    pub repeat: u32,
    pub duration: Option<Duration>,
    /// Sum the sized tracepoints' bytes.
    pub bytes: bool,
    pub include_self: bool,
    pub output: Option<PathBuf>,
    pub mmap_pages: Option<usize>,
}

/// The events `memperf stat` counts without `-e`.
pub const DEFAULT_STAT_EVENTS: &str = "task-clock,page-faults,minor-faults,major-faults";

impl StatConfig {
    /// The recording configuration of the sampled side (the summed tracepoints): raw
    /// payloads only, no stacks, no side band.
    pub fn record_config(&self, events: Vec<EventSpec>) -> RecordConfig {
        RecordConfig {
            command: self.command.clone(),
            mmap_pages: self.mmap_pages,
            duration: self.duration,
            include_self: self.include_self,
            side_band: false,
            ..RecordConfig::internal(events, self.target.clone(), self.cpus.clone())
        }
    }
}
