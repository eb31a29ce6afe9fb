//! Shedding: while the reader is behind (a ring three quarters full, until it is back under
//! half), the allocation tools hand the samples of their allocating probes on without
//! unwinding their user stacks, each counted, rather than let the kernel drop events when
//! the ring fills. A lost free reads as a leak and a lost allocation is missing from every
//! total; a stack left out costs only where the allocation was made, and is said. Only the
//! events the tool names shed: a stack that decides something (munmap's, whether the
//! allocator called it) or that the tool reports apart (a fault's) is always unwound.
//! Recordings keep the kernel's drops instead (their stacks are the product).

use super::Session;

/// Which events may shed, and whether the reader is behind now.
#[derive(Debug, Default, Clone)]
pub(super) struct Shed {
    /// By event index.
    enabled: Vec<bool>,
    behind: bool,
}

impl Session {
    /// The events (by index) whose stacks may be left out while the reader is behind.
    pub fn with_shedding(mut self, enabled: Vec<bool>) -> Self {
        self.shed.enabled = enabled;
        self
    }

    /// Told by the drain, as it reads, whether the reader is behind: while it is, the user
    /// stacks of the events allowed to shed are not unwound (`SessionStats::shed` counts
    /// them).
    pub fn set_behind(&mut self, behind: bool) {
        self.shed.behind = behind && self.shed.enabled.iter().any(|&e| e);
    }

    /// Whether the reader was behind at the last look (and some event may shed).
    pub fn is_behind(&self) -> bool {
        self.shed.behind
    }

    /// Whether event `ev`'s next stack is left out.
    pub(super) fn sheds(&self, ev: usize) -> bool {
        self.shed.behind && self.shed.enabled.get(ev).copied().unwrap_or(false)
    }
}
