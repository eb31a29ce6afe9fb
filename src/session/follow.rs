//! The threads an inherited event follows, kept for `live::resize`, which opens the event
//! again on each of them: the targets at the start, then every thread a FORK record starts
//! and none an EXIT record ends (even a process its parent left to init).

use rustc_hash::FxHashSet;

use crate::records::Record;

use super::Session;

impl Session {
    /// Keeps the set of threads the events follow: `tids` now, then every thread a FORK
    /// record starts and none an EXIT record ends (what an inherited event follows, even a
    /// process its parent left to init).
    pub fn follow_tasks(&mut self, tids: &[u32]) {
        self.followed = Some(tids.iter().copied().collect());
    }

    /// The threads the events follow, when [`Session::follow_tasks`] asked for them.
    pub fn followed_tasks(&self) -> Option<&FxHashSet<u32>> {
        self.followed.as_ref()
    }

    /// A FORK record adds its thread to those followed, an EXIT record takes its away.
    pub(super) fn follow(&mut self, rec: &Record<'_>) {
        if let Some(f) = &mut self.followed {
            match *rec {
                Record::Fork { tid, .. } => {
                    f.insert(tid);
                }
                Record::Exit { tid, .. } => {
                    f.remove(&tid);
                }
                _ => {}
            }
        }
    }
}
