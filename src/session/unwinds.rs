//! User stacks unwound and truncated per event, beside the totals: an output that shows one
//! event says how many of that event's stacks were truncated, not of every event's.

use super::SessionStats;

/// User stacks of one event unwound by the session, and those truncated.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Unwinds {
    pub unwound: u64,
    pub truncated: u64,
}

impl SessionStats {
    /// One user stack of event `ev` unwound.
    pub(super) fn count_unwound(&mut self, ev: usize) {
        self.unwound += 1;
        self.event_unwinds(ev).unwound += 1;
    }

    /// One stack of event `ev` truncated.
    pub(super) fn count_truncated(&mut self, ev: usize) {
        self.truncated += 1;
        self.event_unwinds(ev).truncated += 1;
    }

    fn event_unwinds(&mut self, ev: usize) -> &mut Unwinds {
        if self.unwinds.len() <= ev {
            self.unwinds.resize(ev + 1, Unwinds::default());
        }
        &mut self.unwinds[ev]
    }
}
