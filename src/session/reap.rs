//! Dropping the state of processes whose EXIT record never came.
//!
//! The process table frees a process's mappings and unwinding state at its EXIT record. A
//! busy system-wide recording loses records when a ring fills (the kernel drops side-band
//! records with the samples, counted in LOST records), and a process described from `/proc`
//! at the start may exit before the events are enabled: either way no EXIT comes, and
//! without this every such process would keep its state (its framehop modules, which in
//! turn keep their files' unwind tables in the ELF cache) for the rest of the run. A
//! recording of a host that starts thousands of short-lived processes grew by ~130 KiB/s.
//!
//! While recording, [`Reaper`] looks at `/proc` once a second for every pid the table holds
//! and drops those that are gone, as their EXIT would have. The rule that keeps a later
//! sample from finding its process gone:
//!
//! A process that `/proc` shows gone wrote every record of its own before the look (a
//! sample is written in the context of the task it samples), so each of them lies below
//! where the kernel had written its ring when the next drain round began. The pid is
//! dropped once the drain has read every ring past that point (`live::drain::Passed`:
//! the driver's round numbers, given to [`Reaper::round`]). This does not lean on the
//! sample clock: the drain holds back the records stamped in its last milliseconds by the
//! clock as read, and a clock read behind (470 ms, while its measurement was broken) held
//! a process's last samples in the rings past a reap timed by it: they were handed on
//! with no mapping of their process, named `[unknown]`.
//!
//! A pid that a new process took in the meantime is alive in `/proc` again when the drain
//! has passed the look, and is not dropped: its FORK record (or its exec's COMM record)
//! replaced the old process's state, or will.

use std::time::{Duration, Instant};

use super::Session;

/// How often the held pids are looked up in `/proc` (one `stat` each).
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// A pid seen gone from `/proc`, waiting for the drain to pass it.
struct Gone {
    pid: u32,
    /// The first drain round that began after the look: once it is passed, every record
    /// the process wrote has been handed on.
    after: u64,
}

/// Finds the processes of the table that exited unrecorded and drops them once the drain
/// has handed on every record they wrote.
pub struct Reaper {
    last_look: Option<Instant>,
    gone: Vec<Gone>,
    pids: Vec<u32>,
    /// Whether a pid is alive (`/proc/PID` exists); the tests' own.
    alive: fn(u32) -> bool,
}

impl Default for Reaper {
    fn default() -> Self {
        Reaper::new()
    }
}

impl Reaper {
    pub fn new() -> Reaper {
        Reaper {
            last_look: None,
            gone: Vec::new(),
            pids: Vec::new(),
            alive: crate::procfs::exists,
        }
    }

    /// After drain round number `round`, when every record the rings held at the start of
    /// round `passed` has been handed on (`live::drain::Passed`).
    pub fn round(&mut self, session: &mut Session, round: u64, passed: u64) {
        let procs = &mut session.procs;
        let alive = self.alive;
        self.gone.retain(|g| {
            if passed < g.after {
                return true;
            }
            if !alive(g.pid) {
                procs.reap(g.pid);
            }
            false
        });
        if self.last_look.is_some_and(|t| t.elapsed() < LOOK_EVERY) {
            return;
        }
        self.last_look = Some(Instant::now());
        self.look(session, round + 1);
    }

    /// Looks up every held pid not already waiting; the gone ones wait for the drain to
    /// pass round `after`, the next to begin.
    fn look(&mut self, session: &Session, after: u64) {
        session.procs.pids(&mut self.pids);
        for &pid in &self.pids {
            // 0: processes of another pid namespace, all under one pid; u32::MAX: the kernel.
            if pid == 0 || pid == u32::MAX || self.gone.iter().any(|g| g.pid == pid) {
                continue;
            }
            if !(self.alive)(pid) {
                self.gone.push(Gone { pid, after });
            }
        }
    }
}

#[cfg(test)]
#[path = "reap_tests.rs"]
mod tests;
