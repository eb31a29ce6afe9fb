//! What `memperf diff` is told to compare and print.

use std::path::PathBuf;

use crate::config::report::{StackSpace, Weight};

/// What `memperf diff` writes: one output, chosen once.
#[derive(Debug, Clone, PartialEq)]
pub enum DiffOutput {
    /// The stacks that changed most.
    Table,
    /// `stack before after` lines.
    Folded,
    /// A differential flame graph, to this path (`-`: standard output).
    Flamegraph {
        output: PathBuf,
        title: Option<String>,
        width: Option<usize>,
    },
    /// A gzip-compressed profile.proto, to this path (`-`: standard output).
    Pprof(PathBuf),
}

/// A validated `memperf diff` command line.
#[derive(Debug, Clone, PartialEq)]
pub struct DiffConfig {
    pub before: PathBuf,
    pub after: PathBuf,
    pub event: Option<String>,
    pub weight: Weight,
    pub normalize: bool,
    pub space: StackSpace,
    pub comms: Option<Vec<String>>,
    pub output: DiffOutput,
    pub top: usize,
}
