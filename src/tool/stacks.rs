//! Counting events by stack, for the stack tools (`faults`, `brkstack`): counts (and bytes)
//! per command (and pid with `-P`) and unwound stack, printed as BCC's stackcount prints
//! them, folded (`-f`), or drawn as a flame graph.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::Path;

use anyhow::{Context, Result};
use rustc_hash::{FxHashMap, FxHashSet};

use super::Cx;
use crate::config::report::StackSpace;
use crate::config::stacks::StackOutput;
use crate::output::{Flame, draw_flamegraph};
use crate::session::{Processes, SampleCtx};
use crate::stacks::StackId;

/// What was counted under one stack.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Weights {
    pub count: u64,
    pub bytes: u64,
}

impl Weights {
    /// Saturating: a corrupted recording's period or size can be near 2^64.
    fn add(&mut self, w: Weights) {
        self.count = self.count.saturating_add(w.count);
        self.bytes = self.bytes.saturating_add(w.bytes);
    }
}

/// Where counts go: the command, the pid (0 unless per pid) and the stack.
pub type Key = (u32, u32, Option<StackId>);

/// Counts per stack.
pub struct StackCounts {
    per_pid: bool,
    space: StackSpace,
    comms: Vec<String>,
    comm_ids: FxHashMap<String, u32>,
    counts: FxHashMap<Key, Weights>,
}

/// A stack named, with its command and pid: what merges by name.
type NamedKey = (String, u32, Vec<(String, bool)>);

/// One stack as printed: its frames named (leaf first, each marked kernel or not).
pub struct NamedStack {
    pub comm: String,
    pub pid: u32,
    pub frames: Vec<(String, bool)>,
    pub weights: Weights,
}

impl StackCounts {
    pub fn new(per_pid: bool, space: StackSpace) -> StackCounts {
        StackCounts {
            per_pid,
            space,
            comms: Vec::new(),
            comm_ids: FxHashMap::default(),
            counts: FxHashMap::default(),
        }
    }

    /// The key of sample `s`: its command, its pid when per pid, its stack.
    pub fn key(&mut self, cx: &mut Cx, s: &SampleCtx<'_>) -> Key {
        let (pid, tid) = (s.sample.pid.unwrap_or(0), s.sample.tid.unwrap_or(0));
        let comm = s.procs.comm(pid, tid).unwrap_or("[unknown]");
        let id = match self.comm_ids.get(comm) {
            Some(&id) => id,
            None => {
                let id = self.comms.len() as u32;
                self.comms.push(comm.to_string());
                self.comm_ids.insert(comm.to_string(), id);
                id
            }
        };
        let stack = cx.stack(s);
        (id, if self.per_pid { pid } else { 0 }, stack)
    }

    pub fn add(&mut self, key: Key, w: Weights) {
        self.counts.entry(key).or_default().add(w);
    }

    /// Every stack named, merged by name (two stacks that differ only in the part left out
    /// with `-U`/`-K`, or in addresses of one function, are one), fewest counts first.
    pub fn named(&self, cx: &mut Cx, procs: &Processes) -> Vec<NamedStack> {
        let mut merged: BTreeMap<NamedKey, Weights> = BTreeMap::new();
        for (&(comm, pid, stack), &w) in &self.counts {
            let mut frames = match stack {
                Some(id) => cx.frame_names(id, procs),
                None => Vec::new(),
            };
            frames.retain(|(_, kernel)| match self.space {
                StackSpace::All => true,
                StackSpace::User => !kernel,
                StackSpace::Kernel => *kernel,
            });
            let comm = self.comms[comm as usize].clone();
            merged.entry((comm, pid, frames)).or_default().add(w);
        }
        let mut out: Vec<NamedStack> = merged
            .into_iter()
            .map(|((comm, pid, frames), weights)| NamedStack {
                comm,
                pid,
                frames,
                weights,
            })
            .collect();
        out.sort_by(|a, b| {
            (a.weights.count, a.weights.bytes)
                .cmp(&(b.weights.count, b.weights.bytes))
                .then_with(|| (&a.comm, a.pid, &a.frames).cmp(&(&b.comm, b.pid, &b.frames)))
        });
        out
    }
}

/// How the text form prints.
pub struct TextOptions {
    /// `    --` between the kernel and the user frames (stackcount's `-d`).
    pub delimited: bool,
    /// A line of bytes under the count, labelled so (`bytes grown`).
    pub bytes_label: Option<&'static str>,
}

/// stackcount's layout: frames leaf first, kernel then user, indented two spaces; the
/// command (`comm [pid]` per pid); the count; a blank line. Fewest first, as BCC.
pub fn write_text(
    out: &mut dyn Write,
    stacks: &[NamedStack],
    opts: &TextOptions,
) -> io::Result<()> {
    for st in stacks {
        let mut in_kernel = st.frames.first().is_some_and(|f| f.1);
        if st.frames.is_empty() {
            writeln!(out, "  [no stack]")?;
        }
        for (name, kernel) in &st.frames {
            if opts.delimited && in_kernel && !kernel {
                writeln!(out, "    --")?;
            }
            in_kernel = *kernel;
            writeln!(out, "  {name}")?;
        }
        if st.pid != 0 {
            writeln!(out, "    {} [{}]", st.comm, st.pid)?;
        } else {
            writeln!(out, "    {}", st.comm)?;
        }
        writeln!(out, "    {}", st.weights.count)?;
        if let Some(label) = opts.bytes_label {
            writeln!(out, "    {} {label}", st.weights.bytes)?;
        }
        writeln!(out)?;
    }
    Ok(())
}

/// `comm;root;...;leaf N` lines, sorted (the input of flamegraph.pl and inferno).
pub fn folded_lines(stacks: &[NamedStack], bytes: bool) -> Vec<String> {
    let mut merged: BTreeMap<String, u64> = BTreeMap::new();
    for st in stacks {
        let mut line = if st.pid != 0 {
            format!("{} [{}]", st.comm, st.pid)
        } else {
            st.comm.clone()
        };
        for (name, _) in st.frames.iter().rev() {
            line.push(';');
            line.push_str(name);
        }
        let n = if bytes {
            st.weights.bytes
        } else {
            st.weights.count
        };
        let sum = merged.entry(line).or_default();
        *sum = sum.saturating_add(n);
    }
    merged
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(l, n)| format!("{l} {n}"))
        .collect()
}

/// Draws the stacks as a flame graph into `path` (`-` for standard output).
pub fn write_flamegraph(
    path: &Path,
    stacks: &[NamedStack],
    bytes: bool,
    title: String,
    subtitle: String,
) -> Result<()> {
    let kernel_names: FxHashSet<String> = stacks
        .iter()
        .flat_map(|s| s.frames.iter().filter(|f| f.1).map(|f| f.0.clone()))
        .collect();
    let flame = Flame {
        output: path,
        title,
        subtitle,
        count_name: if bytes { "bytes" } else { "events" }.to_string(),
        width: None,
        colors: "mem",
        inverted: false,
        kernel_names: &kernel_names,
    };
    draw_flamegraph(&flame, &folded_lines(stacks, bytes))
}

/// A live run's first line: on standard output, or on standard error when standard output
/// carries data (`data`: folded stacks, an SVG). A replay has none.
pub fn banner(cx: &mut Cx, data: bool, line: &str) -> std::io::Result<()> {
    if cx.replay {
        return Ok(());
    }
    if data {
        eprintln!("{line}");
        return Ok(());
    }
    writeln!(cx.out, "{line}")
}

/// `memperf brkstack: 512.0 KiB in 64 events, ...`: a graph weighed in bytes says how
/// many, in binary units, before the events they are in.
fn bytes_subtitle(seen: &str, bytes: u64) -> String {
    let human = crate::output::human_bytes(bytes);
    match seen.split_once(": ") {
        Some((tool, rest)) => format!("{tool}: {human} in {rest}"),
        None => format!("{human}; {seen}"),
    }
}

/// Prints a stack tool's result as its options ask: text (or folded with `-f`), and a
/// flame graph with `--flamegraph`.
pub struct Printer {
    pub folded: bool,
    pub flamegraph: Option<std::path::PathBuf>,
    pub text: TextOptions,
    /// Weigh the folded lines and the flame graph by bytes.
    pub by_bytes: bool,
    pub title: String,
}

impl Printer {
    /// The printer of the outputs `out` asks for; the flame graph's file is checked now, before the tool traces
    /// anything (`output::check_output_path`).
    pub fn new(out: StackOutput, text: TextOptions, title: &str) -> Result<Printer> {
        if let Some(p) = &out.flamegraph {
            crate::output::check_output_path(p)
                .with_context(|| "cannot write the --flamegraph file")?;
        }
        Ok(Printer {
            folded: out.folded,
            flamegraph: out.flamegraph,
            text,
            by_bytes: false,
            title: title.to_string(),
        })
    }

    /// The flame graph goes to standard output, which then carries nothing else.
    fn svg_on_stdout(&self) -> bool {
        self.flamegraph.as_deref() == Some(std::path::Path::new("-"))
    }

    pub fn print(
        &self,
        cx: &mut Cx,
        procs: &Processes,
        counts: &StackCounts,
        seen: &str,
    ) -> Result<()> {
        let stacks = counts.named(cx, procs);
        if self.folded {
            for line in folded_lines(&stacks, self.by_bytes) {
                writeln!(cx.out, "{line}")?;
            }
        } else if !self.svg_on_stdout() {
            write_text(&mut cx.out, &stacks, &self.text)?;
        }
        cx.out.flush()?;
        if let Some(path) = &self.flamegraph {
            let subtitle = if self.by_bytes {
                bytes_subtitle(seen, stacks.iter().map(|s| s.weights.bytes).sum())
            } else {
                seen.to_string()
            };
            write_flamegraph(path, &stacks, self.by_bytes, self.title.clone(), subtitle)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(comm: &str, pid: u32, frames: &[(&str, bool)], count: u64, bytes: u64) -> NamedStack {
        NamedStack {
            comm: comm.to_string(),
            pid,
            frames: frames.iter().map(|&(n, k)| (n.to_string(), k)).collect(),
            weights: Weights { count, bytes },
        }
    }

    #[test]
    fn text_is_stackcounts_layout() {
        let stacks = [
            st("a", 0, &[], 1, 0),
            st(
                "app",
                42,
                &[("exc_page_fault", true), ("touch", false), ("main", false)],
                7,
                8192,
            ),
        ];
        let mut out = Vec::new();
        let opts = TextOptions {
            delimited: true,
            bytes_label: Some("bytes grown"),
        };
        write_text(&mut out, &stacks, &opts).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "  [no stack]\n    a\n    1\n    0 bytes grown\n\n  exc_page_fault\n    --\n  touch\n  main\n    app [42]\n    7\n    8192 bytes grown\n\n"
        );
    }

    #[test]
    fn byte_graphs_say_bytes() {
        assert_eq!(
            bytes_subtitle("memperf brkstack: 64 events, lost 0", 64 * 8192),
            "memperf brkstack: 512.0 KiB in 64 events, lost 0"
        );
    }

    #[test]
    fn folded_is_root_first_and_merged() {
        let stacks = [
            st("app", 0, &[("touch", false), ("main", false)], 3, 30),
            st("app", 0, &[("touch", false), ("main", false)], 2, 0),
            st("sh", 0, &[], 1, 0),
        ];
        assert_eq!(folded_lines(&stacks, false), ["app;main;touch 5", "sh 1"]);
        assert_eq!(folded_lines(&stacks, true), ["app;main;touch 30"]);
    }
}
