//! `memperf swapin`: swap-ins per process and interval, as BCC's swapin prints them. No
//! tracepoint marks a swap-in (BCC kprobes `swap_readpage`, renamed `swap_read_folio` in
//! 6.8): a major fault whose address lies in anonymous or shmem memory is one, since such
//! memory can only be read back from swap. One fault can bring in several pages (swap
//! readahead, `vm.page-cluster`), so each interval also shows `/proc/vmstat`'s `pswpin`.

use std::collections::BTreeMap;
use std::io::{self, Write};

use anyhow::Result;

use crate::config::tool::SwapinConfig;
use crate::maps::ProcessMaps;
use crate::session::{Processes, SampleCtx};
use crate::tool::place::{Landed, landed};
use crate::tool::{self, Cx, Seen, Tool, Want};

pub(crate) const WANTS: &[Want] = &[Want {
    name: "major-faults",
    since: "2.6.31",
    optional: false,
    filter: None,
}];

struct Swapin {
    notime: bool,
    /// (pid, comm) → swap-in faults this interval.
    counts: BTreeMap<(u32, String), u64>,
    /// `pswpin` at the interval's start (live only).
    pswpin: Option<u64>,
    /// Major faults in file mappings: page-cache reads, not swap-ins.
    file_faults: u64,
    unresolved: u64,
    total: u64,
    /// The last sample's time, for the interval the run's end cuts short.
    last: Option<u64>,
    /// Whether an interval has had samples since it was printed.
    pending: bool,
}

fn pswpin() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/vmstat").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("pswpin "))
        .and_then(|n| n.trim().parse().ok())
}

/// Memory that only swap can give back: anonymous, or shmem (tmpfs, SysV, memfd).
fn from_swap(l: &Landed) -> Option<bool> {
    match l {
        Landed::Anon(_) => Some(true),
        Landed::Special(p) => Some(p.starts_with(b"/anon_hugepage")),
        Landed::File(p) => Some(
            p.starts_with(b"/dev/shm/") || p.starts_with(b"/SYSV") || p.starts_with(b"/memfd:"),
        ),
        Landed::Unknown => None,
    }
}

impl Tool for Swapin {
    fn sample(&mut self, _cx: &mut Cx, s: &SampleCtx<'_>) -> io::Result<()> {
        let (pid, tid) = (s.sample.pid.unwrap_or(0), s.sample.tid.unwrap_or(0));
        self.last = s.sample.time.or(self.last);
        self.pending = true;
        let Some(addr) = s.sample.addr else {
            self.unresolved += 1;
            return Ok(());
        };
        let maps = s.procs.maps().unwrap_or(ProcessMaps::empty());
        match from_swap(&landed(maps, pid, addr)) {
            Some(true) => {
                let comm = s.procs.comm(pid, tid).unwrap_or("[unknown]").to_string();
                *self.counts.entry((pid, comm)).or_default() += 1;
                self.total += 1;
            }
            Some(false) => self.file_faults += 1,
            None => self.unresolved += 1,
        }
        Ok(())
    }

    fn interval(&mut self, cx: &mut Cx, end: u64, _procs: &Processes) -> io::Result<()> {
        self.pending = false;
        if !self.notime {
            writeln!(cx.out, "{}", cx.time_of_day(end))?;
        }
        writeln!(cx.out, "{:<16} {:<7} COUNT", "COMM", "PID")?;
        let mut rows: Vec<_> = std::mem::take(&mut self.counts).into_iter().collect();
        rows.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        for ((pid, comm), n) in rows {
            let comm: String = comm.chars().take(16).collect();
            writeln!(cx.out, "{comm:<16} {pid:<7} {n}")?;
        }
        if !cx.replay {
            let now = pswpin();
            if let (Some(a), Some(b)) = (self.pswpin, now) {
                writeln!(
                    cx.out,
                    "(swap-in faults; system-wide pswpin +{} pages)",
                    b.saturating_sub(a)
                )?;
            }
            self.pswpin = now;
        }
        writeln!(cx.out)
    }

    fn finish(&mut self, cx: &mut Cx, procs: &Processes, _seen: &Seen) -> Result<()> {
        // The run ended inside an interval that had faults (the traced command exited):
        // print it rather than drop it.
        if self.pending
            && let Some(t) = self.last
        {
            self.interval(cx, t, procs)?;
        }
        crate::output::wrap::eprint(&format!(
            "memperf swapin: {} swap-in faults; {} major faults in file mappings (page-cache \
             reads, not counted); {} at addresses no recorded mapping holds",
            self.total, self.file_faults, self.unresolved
        ));
        Ok(())
    }
}

/// Runs `memperf swapin`.
pub fn run(cfg: SwapinConfig) -> Result<i32> {
    let mut tool = Swapin {
        notime: cfg.notime,
        counts: BTreeMap::new(),
        pswpin: pswpin(),
        file_faults: 0,
        unresolved: 0,
        total: 0,
        last: None,
        pending: false,
    };
    let out = Box::new(io::BufWriter::new(io::stdout()));
    let banner = |cx: &mut Cx| -> io::Result<()> {
        if !cx.replay {
            writeln!(cx.out, "Counting swap ins. Ctrl-C to end.")?;
        }
        Ok(())
    };
    let seen = tool::run("swapin", &cfg.tool, WANTS, &mut tool, out, &banner)?;
    tool::print_seen("swapin", &seen);
    Ok(0)
}
