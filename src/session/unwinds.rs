//! User stacks unwound and truncated per event, beside the totals: an output that shows one
//! event says how many of that event's stacks were truncated, not of every event's.

use super::SessionStats;

/// User stacks of one event unwound by the session, and those truncated.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Unwinds {
    pub unwound: u64,
    pub truncated: u64,
    /// Of the truncated, those left out while the reader was behind (`shed`).
    pub shed: u64,
}

impl From<crate::perfdata::EventUnwinds> for Unwinds {
    fn from(u: crate::perfdata::EventUnwinds) -> Unwinds {
        Unwinds {
            unwound: u.unwound,
            truncated: u.truncated,
            shed: u.shed,
        }
    }
}

impl From<Unwinds> for crate::perfdata::EventUnwinds {
    fn from(u: Unwinds) -> Self {
        Self {
            unwound: u.unwound,
            truncated: u.truncated,
            shed: u.shed,
        }
    }
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

    /// One stack of event `ev` left out, not unwound, while the reader was behind: counted
    /// unwound and truncated too, as every stack that did not reach its root.
    pub(super) fn count_shed(&mut self, ev: usize) {
        self.count_unwound(ev);
        self.count_truncated(ev);
        self.shed += 1;
        self.event_unwinds(ev).shed += 1;
    }

    fn event_unwinds(&mut self, ev: usize) -> &mut Unwinds {
        if self.unwinds.len() <= ev {
            self.unwinds.resize(ev + 1, Unwinds::default());
        }
        &mut self.unwinds[ev]
    }
}
