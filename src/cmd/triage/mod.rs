//! `memperf triage`: the USE method for memory (utilization, saturation, errors) in one
//! command, as the article in `../shared/seeds/002_…` walks it with `free`, `vmstat`,
//! `sar -r`, `sar -B`, `swapon` and `dmesg` before recording any stack. It reads `/proc`,
//! the memory cgroup files and the kernel log at the start and the end of a run, turns what
//! changed into findings, and names for each the memperf command that explains it. It opens
//! no perf events.

mod cgroup;
mod findings;
mod parse;
mod print;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use self::cgroup::{CgroupSample, Mounts};
use self::parse::{ProcStat, Psi, SwapDevice};
use crate::config::triage::TriageConfig;
use crate::kmsg::{self, OomKill};
use crate::procfs::MemoryCgroup;

/// One reading of everything triage looks at.
struct Snapshot {
    at: Instant,
    meminfo: BTreeMap<String, u64>,
    vmstat: BTreeMap<String, u64>,
    /// The PSI file, or why there is none.
    psi: Result<Psi, String>,
    procs: HashMap<u32, ProcStat>,
    cgroups: Vec<CgroupSample>,
    cgroups_truncated: bool,
}

fn read_psi() -> Result<Psi, String> {
    match std::fs::read_to_string("/proc/pressure/memory") {
        Ok(t) => parse::parse_psi(&t).ok_or_else(|| "/proc/pressure/memory is malformed".into()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(
            "no PSI here (/proc/pressure/memory: a kernel before 4.20 or without \
                 CONFIG_PSI)"
                .into(),
        ),
        // EOPNOTSUPP: built in but switched off (psi=0 on the kernel command line).
        Err(e) => Err(format!(
            "PSI is off (/proc/pressure/memory: {e}; boot with psi=1)"
        )),
    }
}

fn read_stat(pid: u32) -> Option<ProcStat> {
    parse::parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

impl Snapshot {
    fn take(mounts: &Mounts, pid: Option<u32>) -> Snapshot {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        // Without -p every process is read; with it, only the target.
        let pids = match pid {
            Some(p) => vec![p],
            None => crate::procfs::all_pids().unwrap_or_default(),
        };
        let procs = pids
            .into_iter()
            .filter_map(|p| Some((p, read_stat(p)?)))
            .collect();
        let (cgroups, cgroups_truncated) = cgroup::read_all(mounts);
        Snapshot {
            at: Instant::now(),
            meminfo: parse::parse_meminfo(&read("/proc/meminfo")),
            vmstat: parse::parse_keyed(&read("/proc/vmstat")),
            psi: read_psi(),
            procs,
            cgroups,
            cgroups_truncated,
        }
    }
}

/// A process's RSS and faults over the run.
#[derive(Clone, Debug)]
struct ProcGrowth {
    pid: u32,
    comm: String,
    rss_start: u64,
    /// `None`: it exited during the run.
    rss_end: Option<u64>,
    minflt: u64,
    majflt: u64,
    /// It appeared during the run (counted from 0).
    new: bool,
}

impl ProcGrowth {
    fn growth(&self) -> i64 {
        self.rss_end.unwrap_or(0) as i64 - self.rss_start as i64
    }
}

/// A memory cgroup at the end of the run and what its counters did.
#[derive(Clone, Debug)]
struct CgroupChange {
    end: CgroupSample,
    deltas: BTreeMap<String, u64>,
    /// The `-p` target's cgroup.
    target: bool,
}

/// Everything the run found: what the printers print.
#[derive(Debug)]
struct Report {
    elapsed: Duration,
    interrupted: bool,
    pid: Option<u32>,
    meminfo: BTreeMap<String, u64>,
    /// `Slab` and `SUnreclaim` growth over the run, in bytes.
    slab_delta: i64,
    sunreclaim_delta: i64,
    psi_end: Option<Psi>,
    /// Stall time over the run, µs: some, full.
    psi_stall: Option<(u64, Option<u64>)>,
    vmstat: BTreeMap<&'static str, u64>,
    swaps: Vec<SwapDevice>,
    cgroups: Vec<CgroupChange>,
    target_cgroup: Option<MemoryCgroup>,
    procs: Vec<ProcGrowth>,
    kills: Vec<OomKill>,
    /// Whether the kernel log was read (kills in it are named).
    kmsg_read: bool,
    findings: Vec<findings::Finding>,
    notes: Vec<String>,
}

/// The vmstat counters triage reports, with the prefixes summed into each (older kernels
/// split the scan counters by zone: `pgscan_direct_normal`...).
const VMSTAT: &[(&str, &str)] = &[
    ("pgfault", "pgfault"),
    ("pgmajfault", "pgmajfault"),
    ("pswpin", "pswpin"),
    ("pswpout", "pswpout"),
    ("pgscan_kswapd", "pgscan_kswapd"),
    ("pgscan_direct", "pgscan_direct"),
    ("pgsteal_kswapd", "pgsteal_kswapd"),
    ("pgsteal_direct", "pgsteal_direct"),
    ("allocstall", "allocstall"),
    ("compact_stall", "compact_stall"),
    ("compact_fail", "compact_fail"),
    ("oom_kill", "oom_kill"),
];

fn vmstat_sum(v: &BTreeMap<String, u64>, prefix: &str) -> u64 {
    v.iter()
        .filter(|(k, _)| {
            k.starts_with(prefix) && !k.ends_with("_throttle") && !k.ends_with("_hugepaged")
        })
        .map(|(_, n)| n)
        .sum()
}

fn vmstat_deltas(
    a: &BTreeMap<String, u64>,
    b: &BTreeMap<String, u64>,
) -> BTreeMap<&'static str, u64> {
    VMSTAT
        .iter()
        .map(|&(name, prefix)| {
            let d = vmstat_sum(b, prefix).saturating_sub(vmstat_sum(a, prefix));
            (name, d)
        })
        .collect()
}

/// RSS growth of the target with -p; without, of the 5 processes that grew most (those
/// that appeared during the run count from 0).
fn growth(
    a: &Snapshot,
    b: &Snapshot,
    pid: Option<u32>,
    notes: &mut Vec<String>,
) -> Vec<ProcGrowth> {
    let page = crate::sys::page_size() as u64;
    let me = std::process::id();
    let mut all: Vec<ProcGrowth> = Vec::new();
    let pids: std::collections::BTreeSet<u32> =
        a.procs.keys().chain(b.procs.keys()).copied().collect();
    for p in pids {
        if p == me {
            continue;
        }
        let (start, end) = (a.procs.get(&p), b.procs.get(&p));
        let Some(any) = end.or(start) else { continue };
        let zero = ProcStat::default();
        let s = start.unwrap_or(&zero);
        all.push(ProcGrowth {
            pid: p,
            comm: any.comm.clone(),
            rss_start: s.rss_pages * page,
            rss_end: end.map(|e| e.rss_pages * page),
            minflt: end.map_or(0, |e| e.minflt.saturating_sub(s.minflt)),
            majflt: end.map_or(0, |e| e.majflt.saturating_sub(s.majflt)),
            new: start.is_none(),
        });
    }
    if let Some(p) = pid {
        if let Some(g) = all.iter().find(|g| g.pid == p && g.rss_end.is_none()) {
            notes.push(format!(
                "PID {p} ({}) exited during the run: its RSS and faults at the end are unknown",
                g.comm
            ));
        }
        return all;
    }
    let exited = all.iter().filter(|g| g.rss_end.is_none()).count();
    if exited > 0 {
        notes.push(format!(
            "{exited} processes exited during the run (not ranked)"
        ));
    }
    all.retain(|g| g.rss_end.is_some() && g.growth() > 0);
    all.sort_by_key(|g| (std::cmp::Reverse(g.growth()), g.pid));
    all.truncate(5);
    all
}

fn cgroup_changes(a: &Snapshot, b: &Snapshot, target: Option<&MemoryCgroup>) -> Vec<CgroupChange> {
    let before: HashMap<(crate::procfs::CgroupVersion, &str), &CgroupSample> = a
        .cgroups
        .iter()
        .map(|c| ((c.version, c.path.as_str()), c))
        .collect();
    b.cgroups
        .iter()
        .filter_map(|end| {
            let start = before.get(&(end.version, end.path.as_str()));
            let deltas: BTreeMap<String, u64> = end
                .events
                .iter()
                .map(|(k, &n)| {
                    let was = start.and_then(|s| s.events.get(k)).copied().unwrap_or(0);
                    (k.clone(), n.saturating_sub(was))
                })
                .filter(|&(_, d)| d > 0)
                .collect();
            let is_target = target.is_some_and(|t| t.version == end.version && t.path == end.path);
            (is_target || notable(end, &deltas)).then(|| CgroupChange {
                end: end.clone(),
                deltas,
                target: is_target,
            })
        })
        .collect()
}

/// A cgroup worth listing: one of its limit events rose, or it reclaimed at its limit.
fn notable(end: &CgroupSample, deltas: &BTreeMap<String, u64>) -> bool {
    let rose = |k: &str| deltas.get(k).is_some_and(|&d| d > 0);
    ["failcnt", "memsw_failcnt", "max", "high", "oom", "oom_kill"]
        .iter()
        .any(|k| rose(k))
        || (cgroup::reached_limit(end) && (rose("pgpgout") || rose("pgscan")))
}

/// Waits `d`, or until Ctrl-C/SIGTERM; returns whether it was interrupted.
fn wait(d: Duration) -> Result<bool> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop)).context("failed to handle signals")?;
    }
    let end = Instant::now() + d;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= end {
            return Ok(false);
        }
        std::thread::sleep((end - now).min(Duration::from_millis(100)));
    }
    Ok(true)
}

/// Runs `memperf triage`.
pub fn run(cfg: TriageConfig) -> Result<i32> {
    let mut notes = Vec::new();
    let target_cgroup = match cfg.pid {
        Some(p) => {
            if read_stat(p).is_none() {
                bail!("no process with pid {p} (/proc/{p}/stat cannot be read)");
            }
            let cg = crate::procfs::memory_cgroup(p);
            if cg.is_none() {
                notes.push(format!(
                    "the memory cgroup of PID {p} is unknown (/proc/{p}/cgroup)"
                ));
            }
            cg
        }
        None => None,
    };
    let mounts = cgroup::mounts();
    if mounts.v1.is_none() && mounts.v2.is_none() {
        notes.push("no memory cgroup hierarchy is mounted: cgroups are not checked".into());
    }
    let mut log = kmsg::KernelLog::open();
    let start = Snapshot::take(&mounts, cfg.pid);
    let what = match cfg.pid {
        Some(p) => format!("PID {p} and the system"),
        None => "the system".to_string(),
    };
    eprintln!(
        "memperf triage: watching {what} for {} s... Ctrl-C to end early.",
        print::secs(cfg.duration)
    );
    let interrupted = wait(cfg.duration)?;
    let end = Snapshot::take(&mounts, cfg.pid);
    let logged = log.read_new();
    let kmsg_read = match &log {
        kmsg::KernelLog::Open(_) => true,
        kmsg::KernelLog::Unreadable(why) => {
            notes.push(format!(
                "{why}: OOM kills are counted from /proc/vmstat but not named"
            ));
            false
        }
    };
    if let Some(e) = &logged.error {
        notes.push(e.clone());
    }
    if logged.overwritten {
        notes.push("the kernel log wrapped during the run: some messages were lost".into());
    }
    if let Err(why) = &end.psi {
        notes.push(why.clone());
    }
    if end.cgroups_truncated {
        notes.push(format!(
            "only the first {} memory cgroups were read",
            cgroup::MAX_CGROUPS
        ));
    }
    let m = |s: &Snapshot, k: &str| s.meminfo.get(k).copied().unwrap_or(0) as i64;
    let psi_stall = match (&start.psi, &end.psi) {
        (Ok(a), Ok(b)) => Some((
            b.some.total_us.saturating_sub(a.some.total_us),
            a.full
                .zip(b.full)
                .map(|(x, y)| y.total_us.saturating_sub(x.total_us)),
        )),
        _ => None,
    };
    let mut report = Report {
        elapsed: end.at - start.at,
        interrupted,
        pid: cfg.pid,
        slab_delta: m(&end, "Slab") - m(&start, "Slab"),
        sunreclaim_delta: m(&end, "SUnreclaim") - m(&start, "SUnreclaim"),
        psi_end: end.psi.as_ref().ok().copied(),
        psi_stall,
        vmstat: vmstat_deltas(&start.vmstat, &end.vmstat),
        swaps: parse::parse_swaps(&std::fs::read_to_string("/proc/swaps").unwrap_or_default()),
        cgroups: cgroup_changes(&start, &end, target_cgroup.as_ref()),
        target_cgroup,
        procs: growth(&start, &end, cfg.pid, &mut notes),
        kills: logged.kills,
        kmsg_read,
        meminfo: end.meminfo,
        findings: Vec::new(),
        notes,
    };
    report.findings = findings::find(&report);
    if cfg.json {
        print::json(&report)?;
    } else {
        print::text(&report)?;
    }
    Ok(0)
}
