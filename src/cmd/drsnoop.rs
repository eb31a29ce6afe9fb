//! `memperf drsnoop`: every direct reclaim, with its latency and the pages it freed, as
//! BCC's drsnoop prints it, from the vmscan tracepoints, and memory-cgroup reclaim too
//! (a container at its limit reclaims through `mm_vmscan_memcg_reclaim_*`, which BCC's
//! drsnoop does not trace). BCC's drsnoop also needs `CONFIG_KALLSYMS_ALL` for its
//! `vm_zone_stat` lookup; this one does not.

use std::io::{self, Write};

use anyhow::Result;
use rustc_hash::FxHashMap;

use crate::config::tool::DrsnoopConfig;
use crate::session::{Processes, SampleCtx};
use crate::stacks::StackId;
use crate::tool::{self, Cx, Seen, Tool, Want};

pub(crate) const WANTS: &[Want] = &[
    Want {
        name: "vmscan:mm_vmscan_direct_reclaim_begin",
        since: "2.6.36",
        optional: false,
        filter: None,
    },
    Want {
        name: "vmscan:mm_vmscan_direct_reclaim_end",
        since: "2.6.36",
        optional: false,
        filter: None,
    },
    Want {
        name: "vmscan:mm_vmscan_memcg_reclaim_begin",
        since: "2.6.36",
        optional: true,
        filter: None,
    },
    Want {
        name: "vmscan:mm_vmscan_memcg_reclaim_end",
        since: "2.6.36",
        optional: true,
        filter: None,
    },
];

/// A reclaim in progress.
struct Begun {
    time: u64,
    stack: Option<StackId>,
}

struct Drsnoop {
    cfg: DrsnoopConfig,
    /// By (tid, memcg): a memcg reclaim can run inside a direct one's allocation.
    begun: FxHashMap<(u32, bool), Begun>,
    first: Option<u64>,
    /// Ends without their begin (reclaims under way when tracing started).
    unmatched_ends: u64,
    lines: u64,
}

fn uid_of(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    line.split_whitespace().next()?.parse().ok()
}

fn free_kb() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/vmstat").ok()?;
    let pages: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("nr_free_pages "))?
        .trim()
        .parse()
        .ok()?;
    Some(pages * crate::sys::page_size() as u64 / 1024)
}

impl Tool for Drsnoop {
    fn sample(&mut self, cx: &mut Cx, s: &SampleCtx<'_>) -> io::Result<()> {
        let (pid, tid, time) = (
            s.sample.pid.unwrap_or(0),
            s.sample.tid.unwrap_or(0),
            s.sample.time.unwrap_or(0),
        );
        let memcg = s.ev >= 2;
        if s.ev.is_multiple_of(2) {
            let stack = cx.stack(s);
            self.begun.insert((tid, memcg), Begun { time, stack });
            return Ok(());
        }
        let Some(begun) = self.begun.remove(&(tid, memcg)) else {
            self.unmatched_ends += 1;
            return Ok(());
        };
        let comm = tool::comm(s.procs, pid, tid);
        if self
            .cfg
            .tool
            .comm
            .as_ref()
            .is_some_and(|n| !comm.contains(n.as_str()))
        {
            return Ok(());
        }
        let uid = (self.cfg.print_uid || self.cfg.uid.is_some())
            .then(|| uid_of(pid))
            .flatten();
        if self.cfg.uid.is_some_and(|u| uid != Some(u)) {
            return Ok(());
        }
        let first = *self.first.get_or_insert(begun.time);
        let mut line = String::new();
        if self.cfg.timestamp {
            line.push_str(&format!(
                "{:<14.6}",
                begun.time.saturating_sub(first) as f64 / 1e9
            ));
        }
        if self.cfg.print_uid {
            line.push_str(&format!(
                "{:<6}",
                uid.map_or("?".to_string(), |u| u.to_string())
            ));
        }
        let shown = if self.cfg.tool.by_tid() { tid } else { pid };
        let comm14: String = comm.chars().take(14).collect();
        let lat_ms = time.saturating_sub(begun.time) as f64 / 1e6;
        let pages = cx.field(s, "nr_reclaimed").unwrap_or(0);
        line.push_str(&format!("{comm14:<14} {shown:<6} {lat_ms:8.2} {pages:5}"));
        if self.cfg.verbose {
            match (cx.replay, free_kb()) {
                (false, Some(kb)) => line.push_str(&format!(" {kb:10}")),
                _ => line.push_str(&format!(" {:>10}", "-")),
            }
        }
        line.push_str(if memcg { " memcg" } else { " direct" });
        writeln!(cx.out, "{line}")?;
        self.lines += 1;
        if self.cfg.tool.stacks {
            cx.write_stack(begun.stack, s.procs)?;
        }
        Ok(())
    }

    fn finish(&mut self, _cx: &mut Cx, _procs: &Processes, _seen: &Seen) -> Result<()> {
        let open = self.begun.len();
        if open > 0 || self.unmatched_ends > 0 {
            eprintln!(
                "memperf drsnoop: {open} reclaims still running at the end and {} ends without their begin (under way when tracing started) are not shown",
                self.unmatched_ends
            );
        }
        Ok(())
    }
}

/// Runs `memperf drsnoop`.
pub fn run(cfg: DrsnoopConfig) -> Result<i32> {
    let mut header = String::new();
    if cfg.timestamp {
        header.push_str(&format!("{:<14}", "TIME(s)"));
    }
    if cfg.print_uid {
        header.push_str(&format!("{:<6}", "UID"));
    }
    let id = if cfg.tool.by_tid() { "TID" } else { "PID" };
    header.push_str(&format!(
        "{:<14} {id:<6} {:>8} {:>5}",
        "COMM", "LAT(ms)", "PAGES"
    ));
    if cfg.verbose {
        header.push_str(&format!(" {:>10}", "FREE(KB)"));
    }
    header.push_str(" RECLAIM");
    let banner = |cx: &mut Cx| -> io::Result<()> {
        if !cx.replay {
            let memcg = if cx.present[2] {
                " and memory-cgroup"
            } else {
                ""
            };
            writeln!(
                cx.out,
                "Tracing direct{memcg} reclaim... Hit Ctrl-C to end."
            )?;
        }
        writeln!(cx.out, "{header}")
    };
    let mut tool = Drsnoop {
        cfg: cfg.clone(),
        begun: FxHashMap::default(),
        first: None,
        unmatched_ends: 0,
        lines: 0,
    };
    let out = Box::new(io::BufWriter::new(io::stdout()));
    let seen = tool::run("drsnoop", &cfg.tool, WANTS, &mut tool, out, &banner)?;
    tool::print_seen("drsnoop", &seen);
    Ok(0)
}
