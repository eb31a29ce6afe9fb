//! What the numbers of a run mean: each rule that fires is one finding, a line of evidence
//! and the memperf command that explains it. Errors first (OOM kills), then saturation
//! (reclaim, swapping, pressure, cgroup limits), then utilization and growth.

use super::print::{bytes, count, secs};
use super::{ProcGrowth, Report};
use crate::procfs::CgroupVersion;

/// RSS growth worth a finding.
pub(super) const RSS_GROWTH_MIN: i64 = 8 << 20;
/// Unreclaimable slab growth worth a finding.
const SLAB_GROWTH_MIN: i64 = 16 << 20;

/// One finding: what it is about (a stable name for scripts), the evidence, the next step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Finding {
    pub kind: &'static str,
    pub pid: Option<u32>,
    pub text: String,
    pub next: String,
}

fn finding(kind: &'static str, pid: Option<u32>, text: String, next: String) -> Finding {
    Finding {
        kind,
        pid,
        text,
        next,
    }
}

pub(super) fn find(r: &Report) -> Vec<Finding> {
    let mut out = Vec::new();
    oom_kills(r, &mut out);
    cgroups(r, &mut out);
    reclaim(r, &mut out);
    pressure(r, &mut out);
    for p in &r.procs {
        process(r, p, &mut out);
    }
    memory(r, &mut out);
    out
}

fn per_sec(r: &Report, n: u64) -> String {
    count(n as f64 / r.elapsed.as_secs_f64().max(0.001))
}

fn oom_kills(r: &Report, out: &mut Vec<Finding>) {
    for k in &r.kills {
        let scope = match (&k.cgroup, k.memcg) {
            (Some(cg), _) => format!("memory cgroup {cg} at its limit"),
            (None, true) => "a memory cgroup at its limit".to_string(),
            (None, false) => "the system out of memory".to_string(),
        };
        out.push(finding(
            "oom_kill",
            Some(k.pid),
            format!(
                "OOM kill of PID {} ({}): {scope} (kernel log)",
                k.pid, k.comm
            ),
            "memperf oomkill".to_string(),
        ));
    }
    let counted = r.vmstat.get("oom_kill").copied().unwrap_or(0);
    let named = r.kills.len() as u64;
    if counted > named {
        let why = if r.kmsg_read {
            "not all in the kernel log"
        } else {
            "victims unknown: the kernel log is not readable"
        };
        out.push(finding(
            "oom_kill",
            None,
            format!(
                "{} OOM kills (vmstat oom_kill +{counted}; {why})",
                counted - named
            ),
            "memperf oomkill".to_string(),
        ));
    }
}

fn cgroups(r: &Report, out: &mut Vec<Finding>) {
    for c in &r.cgroups {
        let cg = &c.end;
        let d = |k: &str| c.deltas.get(k).copied().unwrap_or(0);
        let (hits, counter) = match cg.version {
            CgroupVersion::V1 if d("memsw_failcnt") > d("failcnt") => {
                (d("memsw_failcnt"), "memory.memsw.failcnt")
            }
            CgroupVersion::V1 => (d("failcnt"), "memory.failcnt"),
            CgroupVersion::V2 => (d("max"), "memory.events max"),
        };
        let usage = match (cg.usage, cg.limit) {
            (Some(u), Some(l)) => format!("usage {} of limit {}", bytes(u as i64), bytes(l as i64)),
            (Some(u), None) => format!("usage {}, no limit", bytes(u as i64)),
            _ => "usage unknown".to_string(),
        };
        let whose = if c.target {
            format!(" (PID {}'s)", r.pid.unwrap_or(0))
        } else {
            String::new()
        };
        let ver = match cg.version {
            CgroupVersion::V1 => "v1",
            CgroupVersion::V2 => "v2",
        };
        if hits > 0 {
            let scans = match d("pgscan") {
                0 => String::new(),
                n => format!(", pgscan +{n}"),
            };
            out.push(finding(
                "cgroup_limit",
                r.pid.filter(|_| c.target),
                format!(
                    "memory cgroup {}{whose} ({ver}) hit its limit {} times in {} s ({counter} \
                     +{hits}{scans}): memory-cgroup reclaim, {usage}",
                    cg.path,
                    count(hits as f64),
                    secs(r.elapsed)
                ),
                "memperf drsnoop -d 30".to_string(),
            ));
        } else if super::cgroup::reached_limit(cg) && (d("pgscan") > 0 || d("pgpgout") > 0) {
            let evidence = match d("pgscan") {
                0 => format!("pgpgout +{} pages uncharged", d("pgpgout")),
                n => format!("pgscan +{n}, pgsteal +{}", d("pgsteal")),
            };
            out.push(finding(
                "cgroup_limit",
                r.pid.filter(|_| c.target),
                format!(
                    "memory cgroup {}{whose} ({ver}) is reclaiming at its limit ({evidence} in \
                     {} s, {counter} +0): memory-cgroup reclaim, {usage}",
                    cg.path,
                    secs(r.elapsed)
                ),
                "memperf drsnoop -d 30".to_string(),
            ));
        } else if d("high") > 0 {
            out.push(finding(
                "cgroup_high",
                r.pid.filter(|_| c.target),
                format!(
                    "memory cgroup {}{whose} ({ver}) went over memory.high {} times \
                     (throttled and reclaimed), {usage}",
                    cg.path,
                    d("high")
                ),
                "memperf drsnoop -d 30".to_string(),
            ));
        } else if c.target && super::cgroup::near_limit(cg) {
            out.push(finding(
                "cgroup_near_limit",
                r.pid,
                format!(
                    "memory cgroup {}{whose} ({ver}) is near its limit: {usage}",
                    cg.path
                ),
                "memperf drsnoop -d 30".to_string(),
            ));
        }
        let kills = d("oom_kill");
        let named = r
            .kills
            .iter()
            .any(|k| k.cgroup.as_deref() == Some(cg.path.as_str()));
        if kills > 0 && !named {
            out.push(finding(
                "oom_kill",
                None,
                format!(
                    "memory cgroup {}{whose} ({ver}): {kills} OOM kills (oom_kill +{kills})",
                    cg.path
                ),
                "memperf oomkill".to_string(),
            ));
        }
    }
}

fn reclaim(r: &Report, out: &mut Vec<Finding>) {
    let v = |k: &str| r.vmstat.get(k).copied().unwrap_or(0);
    if v("allocstall") > 0 || v("pgscan_direct") > 0 {
        out.push(finding(
            "direct_reclaim",
            None,
            format!(
                "direct reclaim: {} allocation stalls, pgscan_direct +{} ({}/s), pgsteal_direct +{}",
                v("allocstall"),
                v("pgscan_direct"),
                per_sec(r, v("pgscan_direct")),
                v("pgsteal_direct")
            ),
            "memperf drsnoop -d 30".to_string(),
        ));
    }
    if v("pgscan_kswapd") > 0 {
        out.push(finding(
            "kswapd",
            None,
            format!(
                "kswapd is reclaiming: pgscan_kswapd +{} ({}/s), pgsteal_kswapd +{}",
                v("pgscan_kswapd"),
                per_sec(r, v("pgscan_kswapd")),
                v("pgsteal_kswapd")
            ),
            "memperf vmscan 1 30".to_string(),
        ));
    }
    if v("pswpin") > 0 {
        let next = match r.pid {
            Some(p) => format!("memperf swapin -p {p} 1 30"),
            None => "memperf swapin 1 30".to_string(),
        };
        out.push(finding(
            "swap_in",
            None,
            format!(
                "swap-ins: pswpin +{} pages ({}/s)",
                v("pswpin"),
                per_sec(r, v("pswpin"))
            ),
            next,
        ));
    }
    if v("pswpout") > 0 {
        out.push(finding(
            "swap_out",
            None,
            format!(
                "swap-outs: pswpout +{} pages ({}/s)",
                v("pswpout"),
                per_sec(r, v("pswpout"))
            ),
            "memperf vmscan 1 30".to_string(),
        ));
    }
    if v("compact_stall") > 0 {
        out.push(finding(
            "compaction",
            None,
            format!(
                "{} compaction stalls (compact_fail +{}): allocations waited for contiguous memory",
                v("compact_stall"),
                v("compact_fail")
            ),
            "memperf record -e 'compaction:*' -a --duration 10 && memperf report".to_string(),
        ));
    }
}

fn pressure(r: &Report, out: &mut Vec<Finding>) {
    let (Some(psi), Some((some_us, full_us))) = (r.psi_end, r.psi_stall) else {
        return;
    };
    let run_us = r.elapsed.as_micros().max(1) as f64;
    let some = some_us as f64 / run_us * 100.0;
    let full = full_us.map(|f| f as f64 / run_us * 100.0);
    if some >= 5.0 || psi.some.avg10 >= 5.0 {
        let full = full.map_or(String::new(), |f| format!(", all tasks {f:.1}%"));
        out.push(finding(
            "pressure",
            None,
            format!(
                "memory pressure: some tasks stalled {some:.1}% of the run{full} (PSI some avg10 \
                 {:.2})",
                psi.some.avg10
            ),
            "memperf drsnoop -d 30".to_string(),
        ));
    }
}

fn process(r: &Report, p: &ProcGrowth, out: &mut Vec<Finding>) {
    let dur = secs(r.elapsed);
    if p.growth() >= RSS_GROWTH_MIN {
        let since = if p.new {
            " (started during the run)"
        } else {
            ""
        };
        out.push(finding(
            "rss_growth",
            Some(p.pid),
            format!(
                "RSS of PID {} ({}) grew {} in {dur} s{since}, to {}, with {} minor faults/s",
                p.pid,
                p.comm,
                bytes(p.growth()),
                bytes(p.rss_end.unwrap_or(0) as i64),
                per_sec(r, p.minflt)
            ),
            // Which allocation stacks hold the new pages: the first question about growth.
            format!("memperf rss -p {} --duration 30", p.pid),
        ));
    }
    // A target that reads its memory back from disk or swap.
    if r.pid == Some(p.pid) && p.majflt as f64 / r.elapsed.as_secs_f64().max(0.001) >= 10.0 {
        out.push(finding(
            "major_faults",
            Some(p.pid),
            format!(
                "PID {} ({}) had {} major faults in {dur} s ({}/s): reading pages from files or swap",
                p.pid,
                p.comm,
                p.majflt,
                per_sec(r, p.majflt)
            ),
            format!("memperf faults --major -p {} -d 30", p.pid),
        ));
    }
}

fn memory(r: &Report, out: &mut Vec<Finding>) {
    let m = |k: &str| r.meminfo.get(k).copied().unwrap_or(0);
    let (total, avail) = (m("MemTotal"), m("MemAvailable"));
    if total > 0 && avail < total / 10 {
        out.push(finding(
            "low_memory",
            None,
            format!(
                "low memory: MemAvailable {} of {} ({:.0}%)",
                bytes(avail as i64),
                bytes(total as i64),
                avail as f64 / total as f64 * 100.0
            ),
            "memperf faults -a -P -d 10".to_string(),
        ));
    }
    let (swap_total, swap_free) = (m("SwapTotal"), m("SwapFree"));
    if swap_total > 0 && swap_free < swap_total / 10 {
        out.push(finding(
            "swap_full",
            None,
            format!(
                "swap almost full: {} of {} used",
                bytes((swap_total - swap_free) as i64),
                bytes(swap_total as i64)
            ),
            "memperf vmscan 1 30".to_string(),
        ));
    }
    if r.sunreclaim_delta >= SLAB_GROWTH_MIN {
        out.push(finding(
            "slab_growth",
            None,
            format!(
                "kernel slab grew: SUnreclaim +{} in {} s (Slab +{}), to {}",
                bytes(r.sunreclaim_delta),
                secs(r.elapsed),
                bytes(r.slab_delta),
                bytes(m("SUnreclaim") as i64)
            ),
            "memperf slabratetop 1 10 && memperf leak 10 1".to_string(),
        ));
    }
}
