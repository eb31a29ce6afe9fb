//! Shedding: while the reader is behind (a ring more than half full), the allocation tools
//! hand samples on without unwinding their user stacks, each counted, rather than let the
//! kernel drop events when the ring fills. A lost free reads as a leak and a lost
//! allocation is missing from every total; a stack left out costs only its attribution,
//! and is said. Recordings keep the kernel's drops instead (their stacks are the product).

use super::Session;

/// Whether shedding is allowed, and whether the reader is behind now.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Shed {
    enabled: bool,
    active: bool,
}

impl Session {
    /// Allows shedding (the allocation tools').
    pub fn with_shedding(mut self, enabled: bool) -> Self {
        self.shed.enabled = enabled;
        self
    }

    /// Told by the drain, as it reads, whether the reader is behind: while it is, and
    /// shedding is allowed, user stacks are not unwound (`SessionStats::shed` counts them).
    pub fn set_behind(&mut self, behind: bool) {
        self.shed.active = self.shed.enabled && behind;
    }

    /// Whether the reader is behind now (and shedding allowed).
    pub fn is_behind(&self) -> bool {
        self.shed.active
    }

    /// Whether the next sample's stack is left out.
    pub(super) fn shedding(&self) -> bool {
        self.shed.active
    }
}
