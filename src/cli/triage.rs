//! The options of `memperf triage`, validated into a `TriageConfig`.

use anyhow::{Result, bail};
use clap::Args;

pub use crate::config::triage::TriageConfig;

/// `memperf triage`.
#[derive(Debug, Clone, Args)]
pub struct TriageArgs {
    /// Focus on this process: its RSS and faults, and its memory cgroup.
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pid: Option<u32>,

    /// Seconds between the first and the last reading (Ctrl-C ends the run early).
    #[arg(
        short = 'd',
        long = "duration",
        value_name = "SECS",
        default_value_t = 10.0
    )]
    pub duration: f64,

    /// The numbers and findings as one JSON object, for scripts and monitoring.
    #[arg(long = "json")]
    pub json: bool,
}

impl TriageArgs {
    /// Checks the options: a positive duration, a pid that is not 0.
    pub fn into_config(self) -> Result<TriageConfig> {
        let duration = super::seconds("-d/--duration", self.duration)?;
        if self.pid == Some(0) {
            bail!("invalid pid 0");
        }
        Ok(TriageConfig {
            pid: self.pid,
            duration,
            json: self.json,
        })
    }
}

pub(crate) const TRIAGE_EXAMPLES: &str = "\
EXAMPLES:
    memperf triage
        10 s of the whole system: memory used, pressure, reclaim, swapping, OOM kills, memory
        cgroups at their limit and the 5 processes whose RSS grew most; each finding with
        the memperf command to run next.
    memperf triage -p 1234 --duration 30
        30 s of one process: its RSS growth, minor and major faults, and its memory cgroup.
    memperf triage --json
        The same numbers and findings as one JSON object.

It reads /proc/meminfo, /proc/vmstat, /proc/pressure/memory, /proc/swaps, /proc/PID/stat,
the memory cgroup files (v1 memory.limit_in_bytes, memory.failcnt, memory.oom_control; v2
memory.max, memory.events) and the kernel log (/dev/kmsg); it opens no perf events.

PERMISSIONS: none for most of it. The kernel log needs root or CAP_SYSLOG when
kernel.dmesg_restrict is 1, and other users' processes may hide their faults: what cannot
be read is said, and the rest is still reported.";
