//! The options of the stack tools (`faults`, `brkstack`), as BCC's stackcount names them.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Args;

use super::StackSpace;
use super::tool::ToolArgs;
use crate::config::stacks::{
    BrkstackConfig, FaultKind, FaultsConfig, StackOutput, StackToolConfig,
};
use crate::config::tool::ToolConfig;
use crate::sys::CommandStdout;

/// How a stack tool prints its stacks.
#[derive(Debug, Clone, Args)]
pub struct StackToolArgs {
    #[command(flatten)]
    pub common: ToolArgs,

    /// Folded output, one `comm;root;...;leaf count` line per stack (for flamegraph.pl,
    /// inferno, speedscope); a traced command's standard output then goes to standard error.
    #[arg(short = 'f', long = "folded")]
    pub folded: bool,

    /// Also draw the stacks as an SVG flame graph into FILE (`-` for standard output: then
    /// without the text report, and a traced command's standard output goes to standard
    /// error).
    #[arg(long = "flamegraph", value_name = "FILE")]
    pub flamegraph: Option<PathBuf>,

    /// One stack per process: `comm [pid]` instead of `comm`.
    #[arg(short = 'P', long = "per-pid")]
    pub per_pid: bool,

    /// User frames only.
    #[arg(short = 'U', long = "user-stacks-only", conflicts_with = "kernel_only")]
    pub user_only: bool,

    /// Kernel frames only.
    #[arg(short = 'K', long = "kernel-stacks-only")]
    pub kernel_only: bool,

    /// A `--` line between the kernel and the user frames.
    #[arg(long = "delimited")]
    pub delimited: bool,
}

impl StackToolArgs {
    /// Checks the options and turns them into a `StackToolConfig`; `period` is the tool's
    /// `-c` (one event in N sampled).
    pub fn into_config(self, period: Option<u64>) -> Result<StackToolConfig> {
        let space = self.space();
        let output = StackOutput {
            folded: self.folded,
            flamegraph: self.flamegraph,
        };
        // Where a traced command's standard output goes.
        let command_stdout = if output.stdout_carries_data() {
            CommandStdout::Stderr
        } else {
            CommandStdout::Inherit
        };
        let tool = ToolConfig {
            stacks: true,
            period,
            command_stdout,
            ..self.common.into_config()?
        };
        Ok(StackToolConfig {
            tool,
            output,
            per_pid: self.per_pid,
            space,
            delimited: self.delimited,
        })
    }

    fn space(&self) -> StackSpace {
        if self.user_only {
            StackSpace::User
        } else if self.kernel_only {
            StackSpace::Kernel
        } else {
            StackSpace::All
        }
    }
}

/// `memperf faults`: which faults, and how many of them to sample.
#[derive(Debug, Clone, Args)]
pub struct FaultsArgs {
    #[command(flatten)]
    pub stacks: StackToolArgs,

    /// Sample one fault in N (the count printed is then N times the samples); every fault
    /// by default.
    #[arg(short = 'c', long = "count", value_name = "N")]
    pub period: Option<u64>,

    /// Major faults only (the ones that read from a file or swap).
    #[arg(long = "major", conflicts_with = "minor")]
    pub major: bool,

    /// Minor faults only.
    #[arg(long = "minor")]
    pub minor: bool,
}

/// `memperf brkstack`: what to weigh the folded stacks and the flame graph by.
#[derive(Debug, Clone, Args)]
pub struct BrkstackArgs {
    #[command(flatten)]
    pub stacks: StackToolArgs,

    /// Weigh folded stacks and the flame graph by bytes grown instead of calls.
    #[arg(long = "bytes")]
    pub bytes: bool,
}

impl FaultsArgs {
    /// Checks `-c` and the stack options and turns them into a `FaultsConfig`.
    pub fn into_config(self) -> Result<FaultsConfig> {
        if self.period == Some(0) {
            bail!("-c/--count must be at least 1");
        }
        let kind = if self.major {
            FaultKind::Major
        } else if self.minor {
            FaultKind::Minor
        } else {
            FaultKind::All
        };
        Ok(FaultsConfig {
            stacks: self.stacks.into_config(self.period)?,
            kind,
        })
    }
}

impl BrkstackArgs {
    /// Checks the stack options and turns them into a `BrkstackConfig`.
    pub fn into_config(self) -> Result<BrkstackConfig> {
        Ok(BrkstackConfig {
            stacks: self.stacks.into_config(None)?,
            bytes: self.bytes,
        })
    }
}
