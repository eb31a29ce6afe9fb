//! `memperf shmsnoop`: every System V shared-memory call, as BCC's shmsnoop prints it,
//! from the syscall tracepoints instead of kprobes on the syscall functions (whose names
//! change with the architecture and the kernel), and POSIX shared memory (a file of
//! `/dev/shm` mapped) from the kernel's MMAP2 records.

use std::io::{self, Write};

use anyhow::Result;

use crate::config::tool::SnoopConfig;
use crate::records::Record;
use crate::session::{Processes, SampleCtx, SideBand};
use crate::tool::calls::{Calls, Entered};
use crate::tool::{self, Cx, Seen, Tool, Want};

const fn want(name: &'static str) -> Want {
    Want {
        name,
        since: "2.6.33",
        optional: false,
        filter: None,
    }
}

pub(crate) const WANTS: &[Want] = &[
    want("syscalls:sys_enter_shmget"),
    want("syscalls:sys_exit_shmget"),
    want("syscalls:sys_enter_shmat"),
    want("syscalls:sys_exit_shmat"),
    want("syscalls:sys_enter_shmdt"),
    want("syscalls:sys_exit_shmdt"),
    want("syscalls:sys_enter_shmctl"),
    want("syscalls:sys_exit_shmctl"),
];
const SYS: [&str; 4] = ["SHMGET", "SHMAT", "SHMDT", "SHMCTL"];
const ARGS: [&[&str]; 4] = [
    &["key", "size", "shmflg"],
    &["shmid", "shmaddr", "shmflg"],
    &["shmaddr"],
    &["shmid", "cmd", "buf"],
];

const SHMGET_FLAGS: &[(&str, u64)] = &[
    ("IPC_CREAT", 0o1000),
    ("IPC_EXCL", 0o2000),
    ("SHM_HUGETLB", 0o4000),
    ("SHM_HUGE_2MB", 21 << 26),
    ("SHM_HUGE_1GB", 30 << 26),
    ("SHM_NORESERVE", 0o10000),
    ("SHM_EXEC", 0o100000),
];
const SHMAT_FLAGS: &[(&str, u64)] = &[
    ("SHM_RDONLY", 0o10000),
    ("SHM_RND", 0o20000),
    ("SHM_REMAP", 0o40000),
    ("SHM_EXEC", 0o100000),
];
const SHMCTL_CMDS: &[(&str, u64)] = &[
    ("IPC_RMID", 0),
    ("IPC_SET", 1),
    ("IPC_STAT", 2),
    ("IPC_INFO", 3),
    ("SHM_LOCK", 11),
    ("SHM_UNLOCK", 12),
    ("SHM_STAT", 13),
    ("SHM_INFO", 14),
    ("SHM_STAT_ANY", 15),
];

/// `0x3a4 (IPC_CREAT|0644)`: the flags by name, what is left (the mode) in octal, as BCC's
/// shmsnoop writes them.
fn flags_text(val: u64, names: &[(&str, u64)]) -> String {
    let mut text = format!("0x{val:x}");
    if val == 0 {
        return text;
    }
    let mut left = val;
    let mut parts: Vec<String> = Vec::new();
    for &(name, bit) in names {
        if val & bit == bit && left & bit != 0 {
            parts.push(name.to_string());
            left &= !bit;
        }
    }
    if left != 0 || parts.is_empty() {
        parts.push(format!("0{left:o}"));
    }
    text.push_str(&format!(" ({})", parts.join("|")));
    text
}

fn args_text(call: usize, a: &[u64]) -> String {
    match call {
        0 => format!(
            "key: 0x{:x}, size: {}, shmflg: {}",
            a[0],
            a[1],
            flags_text(a[2] & 0xffff_ffff, SHMGET_FLAGS)
        ),
        1 => format!(
            "shmid: 0x{:x}, shmaddr: 0x{:x}, shmflg: {}",
            a[0],
            a[1],
            flags_text(a[2] & 0xffff_ffff, SHMAT_FLAGS)
        ),
        2 => format!("shmaddr: 0x{:x}", a[0]),
        _ => {
            let cmd = a[1] & 0xffff_ffff;
            let name = SHMCTL_CMDS.iter().find(|c| c.1 == cmd).map_or("?", |c| c.0);
            format!(
                "shmid: 0x{:x}, cmd: {cmd} ({name}), buf: 0x{:x}",
                a[0], a[2]
            )
        }
    }
}

struct Shmsnoop {
    cfg: SnoopConfig,
    calls: Calls,
    first: Option<u64>,
}

impl Shmsnoop {
    fn line(
        &mut self,
        cx: &mut Cx,
        time: u64,
        id: u32,
        comm: &str,
        [sys, ret, args]: [&str; 3],
    ) -> io::Result<()> {
        if self
            .cfg
            .tool
            .comm
            .as_ref()
            .is_some_and(|n| !comm.contains(n.as_str()))
        {
            return Ok(());
        }
        let mut line = String::new();
        if self.cfg.timestamp {
            let first = *self.first.get_or_insert(time);
            line.push_str(&format!(
                "{:<14.6}",
                time.saturating_sub(first) as f64 / 1e9
            ));
        }
        let comm16: String = comm.chars().take(16).collect();
        line.push_str(&format!("{id:<6} {comm16:<16} {sys:>6} {ret:>16} {args}"));
        writeln!(cx.out, "{line}")
    }
}

impl Tool for Shmsnoop {
    fn sample(&mut self, cx: &mut Cx, s: &SampleCtx<'_>) -> io::Result<()> {
        let (pid, tid) = (s.sample.pid.unwrap_or(0), s.sample.tid.unwrap_or(0));
        let time = s.sample.time.unwrap_or(0);
        if s.ev.is_multiple_of(2) {
            let args = ARGS[s.ev / 2]
                .iter()
                .map(|n| cx.field(s, n).unwrap_or(0))
                .collect();
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
        let ret = cx.field_signed(s, "ret").unwrap_or(0);
        let comm = tool::comm(s.procs, pid, tid);
        let id = if self.cfg.tool.by_tid() { tid } else { pid };
        let text = args_text(call.ev / 2, &call.args);
        self.line(
            cx,
            call.time,
            id,
            &comm,
            [SYS[call.ev / 2], &format!("{ret:x}"), &text],
        )?;
        if self.cfg.tool.stacks {
            cx.write_stack(call.stack, s.procs)?;
        }
        Ok(())
    }

    fn side_band(&mut self, cx: &mut Cx, r: &SideBand<'_>) -> io::Result<()> {
        // POSIX shared memory: shm_open is an open of /dev/shm, then an mmap of the file.
        if let Some(&Record::Mmap2 {
            pid,
            tid,
            addr,
            len,
            filename,
            id,
            ..
        }) = r.rec
            && filename.starts_with(b"/dev/shm/")
            // Records synthesized from /proc for running processes have no time.
            && let Some(time) = id.time.filter(|&t| t > 0)
        {
            let comm = tool::comm(r.procs, pid, tid);
            let shown = if self.cfg.tool.by_tid() { tid } else { pid };
            let path = String::from_utf8_lossy(filename);
            self.line(
                cx,
                time,
                shown,
                &comm,
                [
                    "MMAP",
                    &format!("{addr:x}"),
                    &format!("path: {path}, size: {len}"),
                ],
            )?;
        }
        Ok(())
    }

    fn finish(&mut self, _cx: &mut Cx, _procs: &Processes, _seen: &Seen) -> Result<()> {
        let c = &self.calls;
        if c.unreturned + c.unentered > 0 || c.open() > 0 {
            eprintln!(
                "memperf shmsnoop: not shown: {} calls under way at the start, {} at the end, {} whose return was lost",
                c.unentered,
                c.open(),
                c.unreturned
            );
        }
        Ok(())
    }
}

/// Runs `memperf shmsnoop`.
pub fn run(cfg: SnoopConfig) -> Result<i32> {
    let mut header = String::new();
    if cfg.timestamp {
        header.push_str(&format!("{:<14}", "TIME(s)"));
    }
    let id = if cfg.tool.by_tid() { "TID" } else { "PID" };
    header.push_str(&format!(
        "{id:<6} {:<16} {:>6} {:>16} ARGs",
        "COMM", "SYS", "RET"
    ));
    let banner = |cx: &mut Cx| -> io::Result<()> {
        if !cx.replay {
            writeln!(cx.out, "Tracing shared memory calls... Hit Ctrl-C to end.")?;
        }
        writeln!(cx.out, "{header}")
    };
    let mut tool = Shmsnoop {
        cfg: cfg.clone(),
        calls: Calls::default(),
        first: None,
    };
    let out = Box::new(io::BufWriter::new(io::stdout()));
    let seen = tool::run("shmsnoop", &cfg.tool, WANTS, &mut tool, out, &banner)?;
    tool::print_seen("shmsnoop", &seen);
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_read_as_bccs() {
        assert_eq!(flags_text(0o1600, SHMGET_FLAGS), "0x380 (IPC_CREAT|0600)");
        assert_eq!(flags_text(0, SHMGET_FLAGS), "0x0");
        assert_eq!(flags_text(0o10000, SHMAT_FLAGS), "0x1000 (SHM_RDONLY)");
        assert_eq!(
            flags_text(0o5666 | (21 << 26), SHMGET_FLAGS),
            "0x54000bb6 (IPC_CREAT|SHM_HUGETLB|SHM_HUGE_2MB|0666)"
        );
        assert_eq!(
            args_text(3, &[0x18021, 0, 0]),
            "shmid: 0x18021, cmd: 0 (IPC_RMID), buf: 0x0"
        );
    }
}
