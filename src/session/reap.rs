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
//! A process that `/proc` shows gone at time T wrote every record of its own before T (a
//! sample is written in the context of the task it samples). The drain hands on every
//! record stamped before a round's limit, two milliseconds before the round began
//! (`live::drain::HOLD_BACK_NS`, given to [`Reaper::round`]). So the pid is dropped only at a round whose start is
//! at least that margin past the start of the first round after the look, whose clock
//! reading is later than T; without a clock every round drains all, and the round after
//! the look suffices. A pid that a new process took in the meantime is alive in `/proc`
//! and is not dropped (its FORK record or its exec's COMM record already replaced the old
//! state).

use std::time::{Duration, Instant};

use super::Session;

/// How often the held pids are looked up in `/proc` (one `stat` each).
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// A pid seen gone from `/proc`, waiting for the drain to pass it.
struct Gone {
    pid: u32,
    /// The round of the look.
    round: u64,
    /// The sample clock at the start of the first round after the look: later than the
    /// look itself.
    after: Option<u64>,
}

/// Finds the processes of the table that exited unrecorded and drops them once the drain
/// has handed on every record they wrote.
pub struct Reaper {
    last_look: Option<Instant>,
    rounds: u64,
    gone: Vec<Gone>,
    pids: Vec<u32>,
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
            rounds: 0,
            gone: Vec::new(),
            pids: Vec::new(),
        }
    }

    /// After each drain round; `now` is the sample clock when the round began (`None`
    /// without a clock: the round drained every record), and the round handed on every
    /// record stamped `hold_back_ns` before it.
    pub fn round(&mut self, session: &mut Session, now: Option<u64>, hold_back_ns: u64) {
        self.rounds += 1;
        let round = self.rounds;
        let procs = &mut session.procs;
        self.gone.retain_mut(|g| {
            if g.round >= round {
                return true;
            }
            let drained = match (now, g.after) {
                (None, _) => true,
                (Some(now), None) => {
                    g.after = Some(now);
                    false
                }
                (Some(now), Some(after)) => now.saturating_sub(hold_back_ns) >= after,
            };
            if drained {
                procs.reap(g.pid);
            }
            !drained
        });
        if self.last_look.is_some_and(|t| t.elapsed() < LOOK_EVERY) {
            return;
        }
        self.last_look = Some(Instant::now());
        self.look(session, round);
    }

    /// Looks up every held pid not already waiting; the gone ones wait for the drain.
    fn look(&mut self, session: &Session, round: u64) {
        session.procs.pids(&mut self.pids);
        for &pid in &self.pids {
            // 0: processes of another pid namespace, all under one pid; u32::MAX: the kernel.
            if pid == 0 || pid == u32::MAX || self.gone.iter().any(|g| g.pid == pid) {
                continue;
            }
            if !crate::procfs::exists(pid) {
                self.gone.push(Gone {
                    pid,
                    round,
                    after: None,
                });
            }
        }
    }
}
