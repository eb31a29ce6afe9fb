//! `memperf slabratetop`: kernel slab allocations per cache and interval, top-like, as
//! BCC's slabratetop prints them, from `kmem:kmem_cache_alloc` (which names the cache) and
//! `kmem:kmalloc` (labelled by its size class), instead of a kprobe that reads the private
//! `struct kmem_cache` (BCC's refuses kernels from 6.8 on).

use std::collections::BTreeMap;
use std::io::{self, IsTerminal, Write};

use anyhow::Result;

use crate::config::slab::{SlabSort, SlabratetopConfig};
use crate::session::{Processes, SampleCtx};
use crate::tool::{self, Cx, Seen, Tool, Want};

pub(crate) const WANTS: &[Want] = &[
    Want {
        name: "kmem:kmem_cache_alloc",
        since: "2.6.32",
        optional: false,
        filter: None,
    },
    Want {
        name: "kmem:kmalloc",
        since: "2.6.32",
        optional: true,
        filter: None,
    },
];
const KMALLOC: usize = 1;

/// The largest kmalloc served by a slab cache; larger ones come from the page allocator.
const KMALLOC_MAX_CACHE: u64 = 8192;

struct Slabratetop {
    clear: bool,
    maxrows: usize,
    sort: SlabSort,
    /// Cache → (allocations, bytes) this interval.
    rows: BTreeMap<String, (u64, u64)>,
    /// Samples of a kernel whose kmem_cache_alloc has no `name` field (before 6.0).
    unnamed: u64,
    pending: bool,
    last: Option<u64>,
}

impl Tool for Slabratetop {
    fn sample(&mut self, cx: &mut Cx, s: &SampleCtx<'_>) -> io::Result<()> {
        self.pending = true;
        self.last = s.sample.time.or(self.last);
        let bytes = cx.field(s, "bytes_alloc").unwrap_or(0);
        let name = if s.ev == KMALLOC {
            if bytes > KMALLOC_MAX_CACHE {
                "kmalloc-large".to_string()
            } else if bytes >= 1024 && bytes.is_multiple_of(1024) {
                format!("kmalloc-{}k", bytes / 1024)
            } else {
                format!("kmalloc-{bytes}")
            }
        } else {
            match cx.field_str(s, "name") {
                Some(n) => n,
                None => {
                    self.unnamed += 1;
                    "[unnamed cache]".to_string()
                }
            }
        };
        // A corrupted recording's sizes can sum past 2^64: they saturate (fuzz/, tools).
        let row = self.rows.entry(name).or_default();
        row.0 += 1;
        row.1 = row.1.saturating_add(bytes);
        Ok(())
    }

    fn interval(&mut self, cx: &mut Cx, end: u64, _procs: &Processes) -> io::Result<()> {
        self.pending = false;
        if self.clear {
            write!(cx.out, "\x1b[H\x1b[2J")?;
        }
        let mut line = cx.time_of_day(end);
        if !cx.replay
            && let Ok(load) = std::fs::read_to_string("/proc/loadavg")
        {
            line.push_str(&format!(" loadavg: {}", load.trim()));
        }
        writeln!(cx.out, "{line}\n")?;
        writeln!(cx.out, "{:<32} {:>6} {:>10}", "CACHE", "ALLOCS", "BYTES")?;
        let mut rows: Vec<(String, (u64, u64))> =
            std::mem::take(&mut self.rows).into_iter().collect();
        match self.sort {
            SlabSort::Name => {}
            SlabSort::Count => rows.sort_by(|a, b| b.1.0.cmp(&a.1.0).then_with(|| a.0.cmp(&b.0))),
            SlabSort::Size => rows.sort_by(|a, b| b.1.1.cmp(&a.1.1).then_with(|| a.0.cmp(&b.0))),
        }
        for (name, (n, bytes)) in rows.iter().take(self.maxrows) {
            writeln!(cx.out, "{name:<32} {n:>6} {bytes:>10}")?;
        }
        writeln!(cx.out)
    }

    fn finish(&mut self, cx: &mut Cx, procs: &Processes, _seen: &Seen) -> Result<()> {
        if self.pending
            && let Some(t) = self.last
        {
            self.interval(cx, t, procs)?;
        }
        if self.unnamed > 0 {
            eprintln!(
                "memperf slabratetop: {} kmem_cache_alloc events without the cache's name (the `name` field came in Linux 6.0)",
                self.unnamed
            );
        }
        Ok(())
    }
}

/// Runs `memperf slabratetop`.
pub fn run(cfg: SlabratetopConfig) -> Result<i32> {
    let mut tool = Slabratetop {
        clear: !cfg.noclear && io::stdout().is_terminal(),
        maxrows: cfg.maxrows,
        sort: cfg.sort,
        rows: BTreeMap::new(),
        unnamed: 0,
        pending: false,
        last: None,
    };
    let banner = |cx: &mut Cx| -> io::Result<()> {
        if !cx.replay {
            writeln!(cx.out, "Tracing slab allocations... Hit Ctrl-C to end.")?;
        }
        Ok(())
    };
    let out = Box::new(io::BufWriter::new(io::stdout()));
    let seen = tool::run("slabratetop", &cfg.tool, WANTS, &mut tool, out, &banner)?;
    tool::print_seen("slabratetop", &seen);
    Ok(0)
}
