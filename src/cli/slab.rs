//! The options of `memperf slabratetop`, as BCC's slabratetop names them.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use super::tool::{ToolArgs, interval_config};

pub use crate::config::slab::{SlabSort, SlabratetopConfig};

#[derive(Debug, Clone, Args)]
pub struct SlabratetopArgs {
    // Positionals first: the command after `--` must be the last one clap numbers.
    /// Seconds per screen.
    #[arg(value_name = "INTERVAL", default_value_t = 1.0)]
    pub interval: f64,

    /// Stop after this many screens.
    #[arg(value_name = "COUNT")]
    pub count: Option<u64>,

    /// Do not clear the screen between intervals (it is never cleared when standard
    /// output is not a terminal).
    #[arg(short = 'C', long = "noclear")]
    pub noclear: bool,

    /// Rows per screen.
    #[arg(
        short = 'r',
        long = "maxrows",
        value_name = "ROWS",
        default_value_t = 20
    )]
    pub maxrows: usize,

    /// Sort by cache name, allocations or bytes (the default).
    #[arg(short = 's', long = "sort", value_enum, default_value_t = SlabSort::Size)]
    pub sort: SlabSort,

    /// Trace allocations made by these processes only (comma-separated pids).
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pid: Option<String>,

    /// The whole system (the default without -p or a command).
    #[arg(short = 'a', long = "all-cpus")]
    pub all_cpus: bool,

    /// Only these CPUs (e.g. 0,2-3); `-C` is BCC's --noclear here.
    #[arg(long = "cpu", value_name = "CPUS")]
    pub cpu: Option<String>,

    /// Stop after this many seconds.
    #[arg(short = 'd', long = "duration", value_name = "SECS")]
    pub duration: Option<f64>,

    /// Also write what the tool saw to FILE, a perf.data recording that `-i` replays.
    #[arg(
        short = 'w',
        long = "write",
        value_name = "FILE",
        conflicts_with = "input"
    )]
    pub write: Option<PathBuf>,

    /// Read a recording instead of tracing the live system; `-` reads standard input.
    #[arg(short = 'i', long = "input", value_name = "FILE")]
    pub input: Option<PathBuf>,

    /// Ring buffer size per CPU, in pages (a power of two).
    #[arg(short = 'm', long = "mmap-pages", value_name = "PAGES")]
    pub mmap_pages: Option<usize>,

    /// A command to run and trace (after --).
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

impl SlabratetopArgs {
    /// Checks the interval, count and the options every tool shares and turns them into a
    /// `SlabratetopConfig`.
    pub fn into_config(self) -> Result<SlabratetopConfig> {
        // The options every tool shares (slabratetop's `-C` is BCC's, not the CPU list's).
        let common = ToolArgs {
            pid: self.pid,
            tid: None,
            all_cpus: self.all_cpus,
            cpu: self.cpu,
            duration: self.duration,
            write: self.write,
            input: self.input,
            mmap_pages: self.mmap_pages,
            command: self.command,
        };
        Ok(SlabratetopConfig {
            tool: interval_config(common, self.interval, self.count, "screens")?,
            noclear: self.noclear,
            maxrows: self.maxrows,
            sort: self.sort,
        })
    }
}
