//! What `memperf triage` is told to look at.

use std::time::Duration;

/// A validated `memperf triage` command line.
#[derive(Debug, Clone, PartialEq)]
pub struct TriageConfig {
    pub pid: Option<u32>,
    pub duration: Duration,
    pub json: bool,
}
