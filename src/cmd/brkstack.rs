//! `memperf brkstack`: brk() calls by stack (the book's brkstack.bt), with the bytes each
//! stack grew the heap by, from `syscalls:sys_enter_brk` (whose user stack is unwound with
//! DWARF through libc's `sbrk` and `malloc`) and `sys_exit_brk` (the new break).

use std::io;

use anyhow::Result;
use rustc_hash::FxHashMap;

use crate::config::stacks::BrkstackConfig;
use crate::session::{Processes, SampleCtx};
use crate::tool::stacks::{Key, Printer, StackCounts, TextOptions, Weights};
use crate::tool::{self, Cx, Tool, Want};

pub(crate) const WANTS: &[Want] = &[
    Want {
        name: "syscalls:sys_enter_brk",
        since: "2.6.33",
        optional: false,
        filter: None,
    },
    Want {
        name: "syscalls:sys_exit_brk",
        since: "2.6.33",
        optional: true,
        filter: None,
    },
];
const ENTER: usize = 0;

struct Brkstack {
    counts: StackCounts,
    /// The call each thread is in: its key.
    pending: FxHashMap<u32, Key>,
    /// Each process's break, once a return told it.
    breaks: FxHashMap<u32, u64>,
    /// Processes that started while tracing: their first return sets the base (glibc's
    /// first call is `brk(0)`, which grows nothing).
    fresh: rustc_hash::FxHashSet<u32>,
    /// Calls whose growth is unknown: the first call seen in a process that started before
    /// the tool, or a call whose return was not seen.
    unknown_growth: u64,
    printer: Printer,
}

impl Tool for Brkstack {
    fn sample(&mut self, cx: &mut Cx, s: &SampleCtx<'_>) -> io::Result<()> {
        let (pid, tid) = (s.sample.pid.unwrap_or(0), s.sample.tid.unwrap_or(0));
        if s.ev == ENTER {
            let key = self.counts.key(cx, s);
            self.counts.add(key, Weights { count: 1, bytes: 0 });
            if self.pending.insert(tid, key).is_some() {
                self.unknown_growth += 1;
            }
            if !cx.present[1] {
                self.unknown_growth += 1;
            }
            return Ok(());
        }
        // The return: brk gives the new break (the old one when it failed).
        let Some(new) = cx.field(s, "ret") else {
            return Ok(());
        };
        let old = self.breaks.insert(pid, new);
        let Some(key) = self.pending.remove(&tid) else {
            return Ok(());
        };
        match old {
            Some(old) => self.counts.add(
                key,
                Weights {
                    count: 0,
                    bytes: new.saturating_sub(old),
                },
            ),
            None if self.fresh.remove(&pid) => {}
            None => self.unknown_growth += 1,
        }
        Ok(())
    }

    fn side_band(&mut self, _cx: &mut Cx, r: &crate::session::SideBand<'_>) -> io::Result<()> {
        // A new program has a new heap.
        if let Some(crate::records::Record::Comm {
            exec: true, pid, ..
        }) = r.rec
        {
            self.breaks.remove(pid);
            self.fresh.insert(*pid);
        }
        Ok(())
    }

    fn finish(&mut self, cx: &mut Cx, procs: &Processes, seen: &tool::Seen) -> Result<()> {
        self.unknown_growth += self.pending.len() as u64;
        let summary = tool::seen_line("brkstack", seen);
        self.printer.print(cx, procs, &self.counts, &summary)?;
        if self.unknown_growth > 0 {
            eprintln!(
                "memperf brkstack: note: the growth of {} call(s) is unknown (the first call of a process that started before tracing sets its base, or the return was not seen)",
                self.unknown_growth
            );
        }
        Ok(())
    }
}

/// Runs `memperf brkstack`.
pub fn run(cfg: BrkstackConfig) -> Result<i32> {
    let st = &cfg.stacks;
    let text = TextOptions {
        delimited: st.delimited,
        bytes_label: Some("bytes grown"),
    };
    let mut printer = Printer::new(st.output.clone(), text, "brk() by stack")?;
    printer.by_bytes = cfg.bytes;
    let mut tool = Brkstack {
        counts: StackCounts::new(st.per_pid, st.space),
        pending: FxHashMap::default(),
        breaks: FxHashMap::default(),
        fresh: Default::default(),
        unknown_growth: 0,
        printer,
    };
    let out = Box::new(io::BufWriter::new(io::stdout()));
    let data = st.output.stdout_carries_data();
    let banner = |cx: &mut Cx| -> io::Result<()> {
        tool::stacks::banner(cx, data, "Tracing brk() by stack... Hit Ctrl-C to end.")
    };
    let seen = tool::run("brkstack", &st.tool, WANTS, &mut tool, out, &banner)?;
    tool::print_seen("brkstack", &seen);
    Ok(0)
}
