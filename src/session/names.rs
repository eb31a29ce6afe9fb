//! Thread names, by tid. A thread's name goes with it; a process's stays after it exits,
//! for the outputs that name what it left behind (leak's outstanding allocations), but
//! only the [`EXITED_NAMES_MAX`] latest: a run of days (`memperf agent`) sees a new process
//! every few seconds, and on a host whose `pid_max` is 4,194,304 (systemd's) every one of
//! them would otherwise keep its name for the rest of the run.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

/// Names of exited processes kept: one short string each (~80 bytes with the table's
/// share), so a few MiB at most however many processes a run sees.
pub const EXITED_NAMES_MAX: usize = 16 << 10;

#[derive(Default)]
pub(super) struct Names {
    by_tid: FxHashMap<u32, Name>,
    /// Exited processes whose names are kept, oldest first, each with its exit's number
    /// (a pid the kernel gave to a new process since is not the one that exited).
    exited: VecDeque<(u32, u64)>,
    exits: u64,
    /// Names of exited processes forgotten past the bound.
    pub forgotten: u64,
}

struct Name {
    name: String,
    /// The number of its process's exit (1 and up), 0 while it runs.
    exit: u64,
}

impl Names {
    /// The name of `tid`.
    pub fn get(&self, tid: u32) -> Option<&str> {
        self.by_tid.get(&tid).map(|n| n.name.as_str())
    }

    /// `tid` is named `name` (a COMM record, or the name a new thread starts with).
    pub fn set(&mut self, tid: u32, name: String) {
        self.by_tid.insert(tid, Name { name, exit: 0 });
    }

    /// A thread that is not its process's leader exited: its name goes.
    pub fn thread_exit(&mut self, tid: u32) {
        self.by_tid.remove(&tid);
    }

    /// Process `pid` exited: its name stays, and the oldest exited process's goes past the
    /// bound.
    pub fn process_exit(&mut self, pid: u32) {
        let Some(n) = self.by_tid.get_mut(&pid) else {
            return;
        };
        if n.exit != 0 {
            return;
        }
        self.exits += 1;
        n.exit = self.exits;
        self.exited.push_back((pid, self.exits));
        while self.exited.len() > EXITED_NAMES_MAX {
            let Some((old, exit)) = self.exited.pop_front() else {
                break;
            };
            if self.by_tid.get(&old).is_some_and(|n| n.exit == exit) {
                self.by_tid.remove(&old);
                self.forgotten += 1;
            }
        }
    }

    /// Names held (threads alive and exited processes).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_tid.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run that sees many more processes than the bound keeps the latest exited ones'
    /// names and every live one's, however many came and went (today's main kept every
    /// exited process's name for the rest of the run).
    #[test]
    fn exited_processes_names_are_bounded_oldest_first() {
        let mut n = Names::default();
        n.set(1, "init".into());
        let total = EXITED_NAMES_MAX as u32 * 3;
        for pid in 100..100 + total {
            n.set(pid, format!("p{pid}"));
            n.process_exit(pid);
        }
        assert_eq!(n.len(), EXITED_NAMES_MAX + 1);
        assert_eq!(n.forgotten, u64::from(total) - EXITED_NAMES_MAX as u64);
        assert_eq!(n.get(1), Some("init"));
        let last = 100 + total - 1;
        assert_eq!(n.get(last), Some(format!("p{last}").as_str()));
        assert_eq!(n.get(100), None);
    }

    /// A pid the kernel gave to a new process keeps the new process's name when the old
    /// one's turn to be forgotten comes.
    #[test]
    fn a_reused_pid_keeps_its_new_name() {
        let mut n = Names::default();
        n.set(7, "old".into());
        n.process_exit(7);
        n.set(7, "new".into());
        for pid in 1000..1000 + EXITED_NAMES_MAX as u32 {
            n.set(pid, "x".into());
            n.process_exit(pid);
        }
        assert_eq!(n.get(7), Some("new"));
        n.thread_exit(7);
        assert_eq!(n.get(7), None);
    }
}
