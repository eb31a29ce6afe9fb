//! The options of the snoop tools (`mmapsnoop`, `shmsnoop`), as BCC names them.

use anyhow::Result;
use clap::Args;

use super::tool::ToolArgs;
use crate::config::tool::{SnoopConfig, ToolConfig};

#[derive(Debug, Clone, Args)]
pub struct SnoopArgs {
    /// A time column first: HH:MM:SS for mmapsnoop, seconds since the first event for
    /// shmsnoop (as BCC's).
    #[arg(short = 'T', long = "timestamp")]
    pub timestamp: bool,

    /// Only tasks whose command contains NAME.
    #[arg(short = 'n', long = "name", value_name = "NAME")]
    pub name: Option<String>,

    /// The stack of each call (kernel, then user unwound with DWARF) under its line.
    #[arg(long = "stack")]
    pub stack: bool,

    #[command(flatten)]
    pub common: ToolArgs,
}

impl SnoopArgs {
    /// Checks the options and turns them into a `SnoopConfig`.
    pub fn into_config(self) -> Result<SnoopConfig> {
        let tool = ToolConfig {
            stacks: self.stack,
            comm: self.name,
            ..self.common.into_config()?
        };
        Ok(SnoopConfig {
            tool,
            timestamp: self.timestamp,
        })
    }
}
