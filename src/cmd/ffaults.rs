//! Where page faults land: `ffaults` (faults per file, the book's ffaults.bt), `fmapfault`
//! (faults in file mappings per command and file, the book's fmapfault) and `hfaults`
//! (faults in hugetlb mappings per process, hfaults.bt). Each page-fault sample carries
//! the faulting address (`PERF_SAMPLE_ADDR`), which the session's process table resolves
//! to the mapping that holds it: what BPF reads from `vma->vm_file` with a kprobe.

use std::collections::BTreeMap;
use std::io::{self, Write};

use anyhow::Result;
use rustc_hash::FxHashMap;

use crate::cli::tool::ToolArgs;
use crate::maps::ProcessMaps;
use crate::records::Record;
use crate::session::{Processes, SampleCtx, SideBand};
use crate::tool::place::{Landed, landed};
use crate::tool::{self, Cx, Seen, Tool, Want};

const WANTS: &[Want] = &[Want {
    name: "page-faults",
    since: "2.6.31",
    optional: false,
}];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// `@[file]`: every fault, by the file (or `//anon`, `[heap]`, `[stack]`) it lands in.
    Files,
    /// `@[comm, file]`: faults in file mappings.
    CommFiles,
    /// `@[pid, comm]`: faults in hugetlb mappings.
    Huge,
}

struct Places {
    place: Place,
    counts: BTreeMap<(String, String), u64>,
    /// hugetlb mappings by pid: (start, end), from MMAP2's MAP_HUGETLB flag or the
    /// `/anon_hugepage` file the kernel backs them with.
    huge: FxHashMap<u32, Vec<(u64, u64)>>,
    /// Faults whose address no known mapping holds.
    unresolved: u64,
    /// Samples without an address (a recording made without PERF_SAMPLE_ADDR).
    no_addr: u64,
}

impl Places {
    fn is_huge(&self, pid: u32, addr: u64) -> bool {
        self.huge
            .get(&pid)
            .is_some_and(|r| r.iter().any(|&(s, e)| addr >= s && addr < e))
    }
}

impl Tool for Places {
    fn sample(&mut self, _cx: &mut Cx, s: &SampleCtx<'_>) -> io::Result<()> {
        let (pid, tid) = (s.sample.pid.unwrap_or(0), s.sample.tid.unwrap_or(0));
        let Some(addr) = s.sample.addr else {
            self.no_addr += 1;
            return Ok(());
        };
        let comm = || s.procs.comm(pid, tid).unwrap_or("[unknown]").to_string();
        let key = match self.place {
            Place::Huge if !self.is_huge(pid, addr) => return Ok(()),
            Place::Huge => (pid.to_string(), comm()),
            _ => {
                let maps = s.procs.maps().unwrap_or(ProcessMaps::empty());
                match (landed(maps, pid, addr), self.place) {
                    (Landed::File(path) | Landed::Special(path), Place::Files) => {
                        (String::from_utf8_lossy(&path).into_owned(), String::new())
                    }
                    (Landed::File(path), _) => {
                        (comm(), String::from_utf8_lossy(&path).into_owned())
                    }
                    (Landed::Anon(name), Place::Files) => (name.to_string(), String::new()),
                    (Landed::Anon(_) | Landed::Special(_), _) => return Ok(()),
                    (Landed::Unknown, _) => {
                        self.unresolved += 1;
                        return Ok(());
                    }
                }
            }
        };
        *self.counts.entry(key).or_default() += 1;
        Ok(())
    }

    fn side_band(&mut self, _cx: &mut Cx, r: &SideBand<'_>) -> io::Result<()> {
        match r.rec {
            Some(&Record::Mmap2 {
                pid,
                addr,
                len,
                flags,
                filename,
                ..
            }) => {
                let ranges = self.huge.entry(pid).or_default();
                let end = addr.saturating_add(len);
                // A new mapping replaces what it overlaps.
                ranges.retain(|&(s, e)| e <= addr || s >= end);
                if flags & libc::MAP_HUGETLB as u32 != 0 || filename.starts_with(b"/anon_hugepage")
                {
                    ranges.push((addr, end));
                }
            }
            Some(&Record::Comm {
                pid, exec: true, ..
            }) => {
                self.huge.remove(&pid);
            }
            Some(&Record::Fork { pid, ppid, .. }) if pid != ppid => {
                if let Some(r) = self.huge.get(&ppid).cloned() {
                    self.huge.insert(pid, r);
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn finish(&mut self, cx: &mut Cx, _procs: &Processes, _seen: &Seen) -> Result<()> {
        // bpftrace's map print: fewest first.
        let mut rows: Vec<(&(String, String), &u64)> = self.counts.iter().collect();
        rows.sort_by(|a, b| a.1.cmp(b.1).then_with(|| a.0.cmp(b.0)));
        writeln!(cx.out)?;
        for ((a, b), n) in rows {
            if b.is_empty() {
                writeln!(cx.out, "@[{a}]: {n}")?;
            } else {
                writeln!(cx.out, "@[{a}, {b}]: {n}")?;
            }
        }
        cx.out.flush()?;
        Ok(())
    }
}

/// Runs `memperf ffaults`, `fmapfault` or `hfaults`.
pub fn run(place: Place, args: ToolArgs) -> Result<i32> {
    let name = match place {
        Place::Files => "ffaults",
        Place::CommFiles => "fmapfault",
        Place::Huge => "hfaults",
    };
    let cfg = args.into_config(false)?;
    let mut tool = Places {
        place,
        counts: BTreeMap::new(),
        huge: FxHashMap::default(),
        unresolved: 0,
        no_addr: 0,
    };
    let out = Box::new(io::BufWriter::new(io::stdout()));
    let banner = |cx: &mut Cx| -> io::Result<()> {
        if cx.replay {
            return Ok(());
        }
        let what = match place {
            Place::Files => "page faults by file",
            Place::CommFiles => "page faults in file mappings by command and file",
            Place::Huge => "Huge Page faults per process",
        };
        writeln!(cx.out, "Tracing {what}... Hit Ctrl-C to end.")
    };
    let seen = tool::run(name, &cfg, WANTS, &mut tool, out, &banner)?;
    tool::print_seen(name, &seen);
    if tool.unresolved > 0 {
        eprintln!(
            "memperf {name}: {} faults at addresses no recorded mapping holds (shown nowhere)",
            tool.unresolved
        );
    }
    if tool.no_addr > 0 {
        eprintln!(
            "memperf {name}: {} samples without a fault address (recorded without PERF_SAMPLE_ADDR: `perf record -d`)",
            tool.no_addr
        );
    }
    Ok(0)
}
