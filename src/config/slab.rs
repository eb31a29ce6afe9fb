//! What `memperf slabratetop` shows, and how it sorts its rows.

use crate::config::tool::ToolConfig;

/// `memperf slabratetop`: its interval and count are the tool's.
#[derive(Debug, Clone)]
pub struct SlabratetopConfig {
    pub tool: ToolConfig,
    /// Do not clear the screen between intervals (`-C`).
    pub noclear: bool,
    /// Rows per screen.
    pub maxrows: usize,
    pub sort: SlabSort,
}

/// How rows are sorted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlabSort {
    Name,
    Count,
    Size,
}
