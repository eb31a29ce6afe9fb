//! How `memperf slabratetop` sorts its rows.

/// How rows are sorted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlabSort {
    Name,
    Count,
    Size,
}
