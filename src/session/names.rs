//! Thread names, by tid. A thread's name goes with it; a process's stays after it exits,
//! for the outputs that name what it left behind (leak's outstanding allocations), but
//! only the [`EXITED_NAMES_MAX`] latest: a run of days sees a new process every few
//! seconds, and on a host whose `pid_max` is 4,194,304 (systemd's) every one of them would
//! otherwise keep its name for the rest of the run. A caller that names a process's samples
//! as they come and is done with them at a window's end (`memperf agent`) keeps fewer:
//! [`Names::forget_exited`] at each window's end.

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
    /// The exits up to which [`Names::forget_exited`] lets go at its next call (the count at
    /// its last one).
    window_mark: u64,
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

    /// At a window's end: lets go of the names of the processes that exited before the last
    /// call, the window before this one. A process's name is kept through the window it
    /// exited in and the next, for the samples read after its EXIT record (a thread's
    /// sample on another CPU's ring read in a later drain round); past that no sample of it
    /// is left to name. Not counted as forgotten: nothing waits for these names.
    pub fn forget_exited(&mut self) {
        while let Some(&(pid, exit)) = self.exited.front()
            && exit <= self.window_mark
        {
            self.exited.pop_front();
            if self.by_tid.get(&pid).is_some_and(|n| n.exit == exit) {
                self.by_tid.remove(&pid);
            }
        }
        self.window_mark = self.exits;
        // A burst of processes leaves the tables as large as its peak: give the memory back
        // once they hold a quarter of it.
        if self.by_tid.capacity() > SHRINK_FLOOR && self.by_tid.len() * 4 < self.by_tid.capacity() {
            self.by_tid.shrink_to(self.by_tid.len() * 2);
        }
        if self.exited.capacity() > SHRINK_FLOOR && self.exited.len() * 4 < self.exited.capacity() {
            self.exited.shrink_to(self.exited.len() * 2);
        }
    }

    /// Names held (threads alive and exited processes).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.by_tid.len()
    }
}

/// The capacity below which [`Names::forget_exited`] does not shrink the tables (a few
/// KiB: not worth reallocating for).
const SHRINK_FLOOR: usize = 1 << 10;

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

    /// Forgotten at each window's end (`memperf agent`), an exited process's name lasts
    /// through the window it exited in and the next, and no longer: the table holds the
    /// live threads and two windows' exits, however many processes came before (the bound
    /// alone kept 16 Ki exited names, about 2 MiB that the agent never used again).
    #[test]
    fn names_forgotten_at_each_window_last_one_window_past_their_exit() {
        let mut n = Names::default();
        n.set(1, "init".into());
        let per_window = 1000u32;
        let mut pid = 100;
        for _ in 0..(3 * EXITED_NAMES_MAX as u32 / per_window) {
            for _ in 0..per_window {
                n.set(pid, format!("p{pid}"));
                n.process_exit(pid);
                pid += 1;
            }
            n.forget_exited();
        }
        // The last window's exits are named still (a late sample of theirs), the one's
        // before it no more.
        let last = pid - 1;
        assert_eq!(n.get(last), Some(format!("p{last}").as_str()));
        assert_eq!(
            n.get(pid - per_window),
            Some(format!("p{}", pid - per_window).as_str())
        );
        assert_eq!(n.get(pid - per_window - 1), None);
        assert_eq!(n.len(), per_window as usize + 1);
        assert_eq!(n.get(1), Some("init"));
        // Nothing was waited for: none counted as forgotten past the bound.
        assert_eq!(n.forgotten, 0);
        // A quiet window after: the last exits go too, the live thread stays, and the
        // tables are given back.
        n.forget_exited();
        n.forget_exited();
        assert_eq!(n.len(), 1);
        assert!(n.by_tid.capacity() <= SHRINK_FLOOR * 2);
        assert_eq!(n.get(1), Some("init"));
    }

    /// A pid the kernel gave to a new process that is still running keeps its name when the
    /// old process's window passes.
    #[test]
    fn a_reused_pid_keeps_its_new_name_past_the_window() {
        let mut n = Names::default();
        n.set(7, "old".into());
        n.process_exit(7);
        n.set(7, "new".into());
        n.forget_exited();
        n.forget_exited();
        assert_eq!(n.get(7), Some("new"));
    }
}
