//! How a stack tool (`faults`, `brkstack`) prints its stacks, as `tool::stacks::Printer`
//! is told it.

use std::path::PathBuf;

/// The stack tools' outputs beside the text report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackOutput {
    /// Folded lines instead of the text report (`-f`).
    pub folded: bool,
    /// Also an SVG flame graph into this file (`--flamegraph`; `-` for standard output).
    pub flamegraph: Option<PathBuf>,
}
