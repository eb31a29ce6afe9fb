//! The options of `memperf swapin`, as BCC's swapin names them.

use anyhow::Result;
use clap::Args;

use super::tool::{ToolArgs, interval_config};
use crate::config::tool::SwapinConfig;

#[derive(Debug, Clone, Args)]
pub struct SwapinArgs {
    // The positionals come before the flattened options: clap numbers positionals in
    // declaration order, and the command after `--` must be last.
    /// Seconds per interval.
    #[arg(value_name = "INTERVAL", default_value_t = 1.0)]
    pub interval: f64,

    /// Stop after this many intervals.
    #[arg(value_name = "COUNT")]
    pub count: Option<u64>,

    /// No HH:MM:SS line before each interval.
    #[arg(short = 'T', long = "notime")]
    pub notime: bool,

    #[command(flatten)]
    pub common: ToolArgs,
}

impl SwapinArgs {
    /// Checks the interval and count and turns the options into a `SwapinConfig`.
    pub fn into_config(self) -> Result<SwapinConfig> {
        Ok(SwapinConfig {
            tool: interval_config(self.common, self.interval, self.count, "intervals")?,
            notime: self.notime,
        })
    }
}
