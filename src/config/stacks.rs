//! What a stack tool (`faults`, `brkstack`) counts and how it prints its stacks, as
//! `tool::stacks::Printer` is told it.

use std::path::{Path, PathBuf};

use crate::config::report::StackSpace;
use crate::config::tool::ToolConfig;

/// The stack tools' outputs beside the text report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackOutput {
    /// Folded lines instead of the text report (`-f`).
    pub folded: bool,
    /// Also an SVG flame graph into this file (`--flamegraph`; `-` for standard output).
    pub flamegraph: Option<PathBuf>,
}

impl StackOutput {
    /// Whether standard output carries data (folded stacks, an SVG) that nothing else may
    /// be written into: the banner and the traced command's output go to standard error.
    pub fn stdout_carries_data(&self) -> bool {
        self.folded || self.flamegraph.as_deref() == Some(Path::new("-"))
    }
}

/// The options every stack tool shares; its `tool` unwinds stacks.
#[derive(Debug, Clone)]
pub struct StackToolConfig {
    pub tool: ToolConfig,
    pub output: StackOutput,
    /// One stack per process (`-P`).
    pub per_pid: bool,
    /// The frames kept (`-U`, `-K`).
    pub space: StackSpace,
    /// A `--` line between the kernel and the user frames.
    pub delimited: bool,
}

/// The faults `memperf faults` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    All,
    Major,
    Minor,
}

/// `memperf faults`: which faults; one in `stacks.tool.period` is sampled.
#[derive(Debug, Clone)]
pub struct FaultsConfig {
    pub stacks: StackToolConfig,
    pub kind: FaultKind,
}

/// `memperf brkstack`.
#[derive(Debug, Clone)]
pub struct BrkstackConfig {
    pub stacks: StackToolConfig,
    /// Weigh folded stacks and the flame graph by bytes grown instead of calls.
    pub bytes: bool,
}
