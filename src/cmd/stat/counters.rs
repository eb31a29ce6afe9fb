//! Counting events: one fd per CPU (system-wide) or per thread, no sampling, no ring; the
//! kernel's count read with the time the counter was enabled and running.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use anyhow::{Result, anyhow};

use crate::config::record::Target;
use crate::events::Period;
use crate::live::open::{
    ResolvedEvent, event_class, exclude_kernel, explain_open, is_access, open_error, set_filter,
    target_tids,
};
use crate::sys::attr::{AttrConfig, build_attr};
use crate::sys::diagnose::{EventClass, SystemFacts};
use crate::sys::open::{FeatureState, SysOpener, ioc_enable, open_event, read_counter};

const TOTAL_TIME_ENABLED: u64 = 1 << 0;
const TOTAL_TIME_RUNNING: u64 = 1 << 1;

/// What one counter read: its count and the time it was enabled and running (ns).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reading {
    pub value: u64,
    pub enabled: u64,
    pub running: u64,
}

impl Reading {
    pub fn add(&mut self, o: Reading) {
        self.value += o.value;
        self.enabled += o.enabled;
        self.running += o.running;
    }

    /// What was counted since `before` (an interval).
    pub fn since(self, before: Reading) -> Reading {
        Reading {
            value: self.value.saturating_sub(before.value),
            enabled: self.enabled.saturating_sub(before.enabled),
            running: self.running.saturating_sub(before.running),
        }
    }

    /// The count scaled to the whole time enabled (a multiplexed counter ran part of it),
    /// `None` when it never ran.
    pub fn scaled(self) -> Option<f64> {
        if self.running == 0 {
            return (self.enabled == 0 && self.value > 0).then_some(self.value as f64);
        }
        Some(self.value as f64 * self.enabled as f64 / self.running as f64)
    }
}

/// One event's counters.
pub struct Counter {
    /// The fds, with their CPU when counting per CPU.
    pub fds: Vec<(Option<u32>, OwnedFd)>,
    /// Why the kernel cannot count it here (no PMU), when it cannot.
    pub unsupported: Option<String>,
    /// Counted in user space only, after an EACCES on the kernel part.
    pub user_only: bool,
}

/// Everything opened for counting.
pub struct Counters {
    pub events: Vec<Counter>,
    pub notes: Vec<String>,
}

/// Opens a counter for every event on every CPU (`-a`, `-C`) or thread (`-p`, `-t`, the
/// command's pid, inherited by what it starts). A hardware event the machine cannot count
/// (no PMU) is kept as unsupported, with the reason, as perf's `<not supported>`.
pub fn open(
    events: &[ResolvedEvent],
    target: &Target,
    cpus: &[u32],
    child: Option<i32>,
    facts: &SystemFacts,
) -> Result<Counters> {
    let per_cpu = *target == Target::SystemWide;
    let places: Vec<(i32, i32)> = if per_cpu {
        cpus.iter().map(|&c| (-1, c as i32)).collect()
    } else {
        target_tids(target, child)?
            .into_iter()
            .map(|t| (t, -1))
            .collect()
    };
    let opener = SysOpener;
    let mut features = FeatureState::default();
    let mut notes = Vec::new();
    let mut out = Vec::new();
    for ev in events {
        let mut ac = AttrConfig {
            type_: ev.type_,
            config: ev.config,
            config1: ev.config1,
            config2: ev.config2,
            period: Period::Count(0),
            exclude_user: ev.spec.modifiers.exclude_user,
            exclude_kernel: ev.spec.modifiers.exclude_kernel,
            exclude_hv: ev.spec.modifiers.exclude_kernel,
            precise_ip: ev.spec.modifiers.precise,
            inherit: matches!(target, Target::Pids(_) | Target::Command)
                && crate::live::open::can_inherit(&ev.spec.kind),
            // Enabled only once its filter is set (a command's at its exec): a filter set
            // on a running counter lets through what it should not, the hits of its own
            // parsing included.
            disabled: true,
            enable_on_exec: *target == Target::Command,
            read_format: TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING,
            ..AttrConfig::default()
        };
        let mut counter = Counter {
            fds: Vec::new(),
            unsupported: None,
            user_only: false,
        };
        for &(pid, cpu) in &places {
            let mut attr = build_attr(&ac);
            let fd = match open_event(&opener, &mut attr, pid, cpu, &mut features) {
                Ok(fd) => fd,
                Err(errno)
                    if is_access(errno) && !ev.spec.is_tracepoint() && !ac.exclude_kernel =>
                {
                    // As perf stat: an unprivileged user still counts user space (`:u`).
                    exclude_kernel(&mut ac);
                    let mut attr = build_attr(&ac);
                    let fd = open_event(&opener, &mut attr, pid, cpu, &mut features)
                        .map_err(|e| open_error(e, ev, pid, cpu, target, facts))?;
                    counter.user_only = true;
                    fd
                }
                Err(libc::ESRCH) if matches!(target, Target::Pids(_) | Target::Tids(_)) => {
                    // A thread that exited after it was listed.
                    continue;
                }
                Err(errno)
                    if event_class(ev) == EventClass::Hardware
                        && matches!(errno, libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV) =>
                {
                    counter.unsupported = Some(explain_open(errno, ev, pid, cpu, target, facts));
                    counter.fds.clear();
                    break;
                }
                Err(errno) => return Err(open_error(errno, ev, pid, cpu, target, facts)),
            };
            set_filter(fd.as_fd(), ev)?;
            counter.fds.push((per_cpu.then_some(cpu as u32), fd));
        }
        if let Some(why) = &counter.unsupported {
            notes.push(why.clone());
        }
        if counter.user_only {
            notes.push(format!(
                "`{}` counted in user space only: perf_event_paranoid is {} and memperf runs without CAP_PERFMON",
                ev.spec.name,
                facts
                    .paranoid
                    .map_or("unknown".to_string(), |p| p.to_string())
            ));
        }
        out.push(counter);
    }
    if *target != Target::Command {
        for (_, fd) in out.iter().flat_map(|c| &c.fds) {
            ioc_enable(fd.as_fd()).map_err(|e| anyhow!("failed to enable a counter: {e}"))?;
        }
    }
    if out
        .iter()
        .all(|c| c.fds.is_empty() && c.unsupported.is_none())
    {
        anyhow::bail!(
            "no event could be opened: every target thread exited before counting started"
        );
    }
    Ok(Counters { events: out, notes })
}

/// Reads one counter: value, time enabled, time running.
pub fn read(fd: BorrowedFd<'_>) -> io::Result<Reading> {
    let [value, enabled, running] = read_counter(fd)?;
    Ok(Reading {
        value,
        enabled,
        running,
    })
}

/// Where a CPU's counts go: its place in `cpus` with -A, else the one sum.
pub fn slot(cpus: &[u32], per_cpu: bool, cpu: Option<u32>) -> usize {
    match (per_cpu, cpu) {
        (true, Some(c)) => cpus.iter().position(|&x| x == c).unwrap_or(0),
        _ => 0,
    }
}

impl Counters {
    /// Every event's readings now: per CPU (`cpus`' order) when `per_cpu`, else one sum.
    pub fn read_all(&self, cpus: &[u32], per_cpu: bool) -> Result<Vec<Vec<Reading>>> {
        let mut all = Vec::with_capacity(self.events.len());
        for c in &self.events {
            let mut sums = vec![Reading::default(); if per_cpu { cpus.len() } else { 1 }];
            for (cpu, fd) in &c.fds {
                let r = read(fd.as_fd()).map_err(|e| anyhow!("failed to read a counter: {e}"))?;
                sums[slot(cpus, per_cpu, *cpu)].add(r);
            }
            all.push(sums);
        }
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multiplexed_counts_are_scaled_to_the_time_enabled() {
        let r = Reading {
            value: 1000,
            enabled: 400,
            running: 100,
        };
        assert_eq!(r.scaled(), Some(4000.0));
        let never = Reading {
            value: 0,
            enabled: 400,
            running: 0,
        };
        assert_eq!(never.scaled(), None);
        // Software counters of an exited task may report no time at all.
        let untimed = Reading {
            value: 7,
            enabled: 0,
            running: 0,
        };
        assert_eq!(untimed.scaled(), Some(7.0));
    }

    #[test]
    fn intervals_are_differences() {
        let a = Reading {
            value: 10,
            enabled: 100,
            running: 100,
        };
        let b = Reading {
            value: 25,
            enabled: 300,
            running: 250,
        };
        assert_eq!(
            b.since(a),
            Reading {
                value: 15,
                enabled: 200,
                running: 150
            }
        );
    }
}
