//! `memperf mmapsnoop`: every mmap (and munmap, mremap) with the file it maps, as the
//! book's mmapsnoop prints them. The book's needs kprobes on fd-table functions (one of
//! them gone since 5.11) and skips anonymous memory and descriptors opened before it
//! started; here the syscall tracepoints give the arguments and result, and the session's
//! process table (MMAP2 records) the full path of what got mapped at the returned address.

use std::io::{self, Write};

use anyhow::Result;

use crate::config::tool::SnoopConfig;
use crate::maps::{ModuleKind, ProcessMaps};
use crate::session::{Processes, SampleCtx};
use crate::tool::calls::{Calls, Entered, errno_name};
use crate::tool::{self, Cx, Seen, Tool, Want};

const fn want(name: &'static str, optional: bool) -> Want {
    Want {
        name,
        since: "2.6.33",
        optional,
        filter: None,
    }
}

pub(crate) const WANTS: &[Want] = &[
    want("syscalls:sys_enter_mmap", false),
    want("syscalls:sys_exit_mmap", false),
    want("syscalls:sys_enter_munmap", true),
    want("syscalls:sys_exit_munmap", true),
    want("syscalls:sys_enter_mremap", true),
    want("syscalls:sys_exit_mremap", true),
];
const MMAP: usize = 0;
const MUNMAP: usize = 2;

const ARGS: [&[&str]; 3] = [
    &["addr", "len", "prot", "flags", "fd", "off"],
    &["addr", "len"],
    &["addr", "old_len", "new_len", "flags", "new_addr"],
];

struct Mmapsnoop {
    cfg: SnoopConfig,
    calls: Calls,
    lines: u64,
    /// Memory mremap moved, by pid: (start, end, name). The kernel writes no MMAP2 record
    /// when mremap moves or grows a mapping, so the process table does not know it there.
    moved: rustc_hash::FxHashMap<u32, Vec<(u64, u64, String)>>,
}

impl Mmapsnoop {
    fn name_at(&self, procs: &Processes, pid: u32, addr: u64) -> String {
        let moved = self.moved.get(&pid).into_iter().flatten();
        match moved.into_iter().find(|m| addr >= m.0 && addr < m.1) {
            Some(m) => m.2.clone(),
            None => mapped_at(procs, pid, addr),
        }
    }

    /// `[start, start+len)` is mapped anew or unmapped: what mremap moved there is gone.
    fn forget(&mut self, pid: u32, start: u64, len: u64) {
        let end = start.saturating_add(len);
        if let Some(m) = self.moved.get_mut(&pid) {
            m.retain(|r| r.1 <= start || r.0 >= end);
        }
    }
}

/// `RWE` with `-` for what is not allowed.
fn prot_text(prot: u64) -> String {
    let bit = |b: i32, c: char| if prot & b as u64 != 0 { c } else { '-' };
    [
        bit(libc::PROT_READ, 'R'),
        bit(libc::PROT_WRITE, 'W'),
        bit(libc::PROT_EXEC, 'E'),
    ]
    .iter()
    .collect()
}

/// `S` shared, `P` private, `F` fixed, `A` anonymous, `-` for each that is not.
fn map_text(flags: u64) -> String {
    let bit = |b: i32, c: char| if flags & b as u64 != 0 { c } else { '-' };
    let shared = if flags & libc::MAP_SHARED as u64 != 0 {
        'S'
    } else {
        '-'
    };
    [
        shared,
        bit(libc::MAP_PRIVATE, 'P'),
        bit(libc::MAP_FIXED, 'F'),
        bit(libc::MAP_ANONYMOUS, 'A'),
    ]
    .iter()
    .collect()
}

/// What is mapped at `addr` in `pid`, by the session's table: a path, `//anon`, `[heap]`.
fn mapped_at(procs: &Processes, pid: u32, addr: u64) -> String {
    let maps = procs.maps().unwrap_or(ProcessMaps::empty());
    match maps.mapping_of(pid, addr) {
        Some((_, start, _)) if maps.is_heap(pid, start) => "[heap]".to_string(),
        Some((m, _, _)) => {
            let info = maps.module(m);
            match info.kind() {
                ModuleKind::Anon if info.path.is_empty() => "//anon".to_string(),
                _ => String::from_utf8_lossy(&info.path).into_owned(),
            }
        }
        None => "?".to_string(),
    }
}

impl Tool for Mmapsnoop {
    fn sample(&mut self, cx: &mut Cx, s: &SampleCtx<'_>) -> io::Result<()> {
        let (pid, tid) = (s.sample.pid.unwrap_or(0), s.sample.tid.unwrap_or(0));
        let time = s.sample.time.unwrap_or(0);
        if s.ev.is_multiple_of(2) {
            let names = ARGS[s.ev / 2];
            let args = names.iter().map(|n| cx.field(s, n).unwrap_or(0)).collect();
            let stack = cx.stack(s);
            self.calls.enter(
                tid,
                Entered {
                    ev: s.ev,
                    time,
                    args,
                    stack,
                },
            );
            return Ok(());
        }
        let Some(call) = self.calls.exit(tid, s.ev - 1) else {
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
        let ret = cx.field_signed(s, "ret").unwrap_or(0);
        let a = &call.args;
        let (prot, map, offs, size, file) = match call.ev {
            MMAP => {
                let file = if ret < 0 {
                    format!("[failed: {}]", errno_name(ret))
                } else {
                    self.forget(pid, ret as u64, a[1]);
                    mapped_at(s.procs, pid, ret as u64)
                };
                let anon = a[3] & libc::MAP_ANONYMOUS as u64 != 0;
                let offs = if anon { 0 } else { a[5] / 1024 };
                (
                    prot_text(a[2]),
                    map_text(a[3]),
                    offs.to_string(),
                    a[1] / 1024,
                    file,
                )
            }
            MUNMAP => {
                let what = self.name_at(s.procs, pid, a[0]);
                let file = if ret < 0 {
                    format!("{what} [failed: {}]", errno_name(ret))
                } else {
                    self.forget(pid, a[0], a[1]);
                    what
                };
                (
                    "---".to_string(),
                    "UNMAP".to_string(),
                    "-".to_string(),
                    a[1] / 1024,
                    file,
                )
            }
            // mremap.
            _ => {
                // What moved: named where it was, or where it is now when it moved (the
                // session moves the mapping in its table before it hands the exit on).
                let file = if ret < 0 {
                    let what = self.name_at(s.procs, pid, a[0]);
                    format!("{what} [failed: {}]", errno_name(ret))
                } else {
                    let what = match self.name_at(s.procs, pid, a[0]) {
                        w if w == "?" => self.name_at(s.procs, pid, ret as u64),
                        w => w,
                    };
                    self.forget(pid, a[0], a[1]);
                    self.forget(pid, ret as u64, a[2]);
                    let end = (ret as u64).saturating_add(a[2]);
                    self.moved
                        .entry(pid)
                        .or_default()
                        .push((ret as u64, end, what.clone()));
                    what
                };
                (
                    "---".to_string(),
                    "REMAP".to_string(),
                    "-".to_string(),
                    a[2] / 1024,
                    file,
                )
            }
        };
        let mut line = String::new();
        if self.cfg.timestamp {
            line.push_str(&format!("{:<9}", cx.time_of_day(call.time)));
        }
        let comm14: String = comm.chars().take(14).collect();
        line.push_str(&format!(
            "{pid:<6} {comm14:<14} {prot:<4} {map:<5} {offs:<8} {size:<8} {file}"
        ));
        writeln!(cx.out, "{line}")?;
        self.lines += 1;
        if self.cfg.tool.stacks {
            cx.write_stack(call.stack, s.procs)?;
        }
        Ok(())
    }

    fn finish(&mut self, _cx: &mut Cx, _procs: &Processes, _seen: &Seen) -> Result<()> {
        let c = &self.calls;
        if c.unreturned + c.unentered > 0 || c.open() > 0 {
            eprintln!(
                "memperf mmapsnoop: not shown: {} calls under way at the start, {} at the end, {} whose return was lost",
                c.unentered,
                c.open(),
                c.unreturned
            );
        }
        Ok(())
    }
}

/// Runs `memperf mmapsnoop`.
pub fn run(cfg: SnoopConfig) -> Result<i32> {
    let mut header = String::new();
    if cfg.timestamp {
        header.push_str(&format!("{:<9}", "TIME"));
    }
    header.push_str(&format!(
        "{:<6} {:<14} {:<4} {:<5} {:<8} {:<8} {}",
        "PID", "COMM", "PROT", "MAP", "OFFS(KB)", "SIZE(KB)", "FILE"
    ));
    let banner = |cx: &mut Cx| -> io::Result<()> {
        if !cx.replay {
            writeln!(
                cx.out,
                "Tracing mmap, munmap and mremap... Hit Ctrl-C to end."
            )?;
        }
        writeln!(cx.out, "{header}")
    };
    let mut tool = Mmapsnoop {
        cfg: cfg.clone(),
        calls: Calls::default(),
        lines: 0,
        moved: Default::default(),
    };
    let out = Box::new(io::BufWriter::new(io::stdout()));
    let seen = tool::run("mmapsnoop", &cfg.tool, WANTS, &mut tool, out, &banner)?;
    tool::print_seen("mmapsnoop", &seen);
    Ok(0)
}
