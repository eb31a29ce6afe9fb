//! The options of the reclaim tools (`drsnoop`, `vmscan`), as BCC and the book name them.

use anyhow::Result;
use clap::Args;

use super::tool::{ToolArgs, interval_config};
use crate::config::tool::{DrsnoopConfig, ToolConfig};

/// `memperf drsnoop`.
#[derive(Debug, Clone, Args)]
pub struct DrsnoopArgs {
    /// A TIME(s) column: seconds since the first reclaim.
    #[arg(short = 'T', long = "timestamp")]
    pub timestamp: bool,

    /// A UID column (the task's real uid, read live).
    #[arg(short = 'U', long = "print-uid")]
    pub print_uid: bool,

    /// Only tasks of this uid (read live).
    #[arg(short = 'u', long = "uid", value_name = "UID")]
    pub uid: Option<u32>,

    /// Only tasks whose command contains NAME.
    #[arg(short = 'n', long = "name", value_name = "NAME")]
    pub name: Option<String>,

    /// A FREE(KB) column: free memory when the reclaim ended (/proc/vmstat, live,
    /// approximate: read when the sample is handled, not when the reclaim ended).
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,

    /// The stack of each reclaim (kernel, then user unwound with DWARF) under its line.
    #[arg(long = "stack")]
    pub stack: bool,

    #[command(flatten)]
    pub common: ToolArgs,
}

/// `memperf vmscan`.
#[derive(Debug, Clone, Args)]
pub struct VmscanArgs {
    // Positionals first: the command after `--` must be the last one clap numbers.
    /// Seconds per line.
    #[arg(value_name = "INTERVAL", default_value_t = 1.0)]
    pub interval: f64,

    /// Stop after this many lines.
    #[arg(value_name = "COUNT")]
    pub count: Option<u64>,

    #[command(flatten)]
    pub common: ToolArgs,
}

impl DrsnoopArgs {
    /// Checks the options and turns them into a `DrsnoopConfig`.
    pub fn into_config(self) -> Result<DrsnoopConfig> {
        let tool = ToolConfig {
            stacks: self.stack,
            comm: self.name,
            ..self.common.into_config()?
        };
        Ok(DrsnoopConfig {
            tool,
            timestamp: self.timestamp,
            print_uid: self.print_uid,
            uid: self.uid,
            verbose: self.verbose,
        })
    }
}

impl VmscanArgs {
    /// Checks the interval and count and turns the options into the tool's `ToolConfig`.
    pub fn into_config(self) -> Result<ToolConfig> {
        interval_config(self.common, self.interval, self.count, "lines")
    }
}
