//! Triage's two outputs: the USE table, the processes and cgroups, and the findings as
//! text; or all of it as one JSON object.

use std::io::{self, Write};
use std::time::Duration;

use serde_json::{Value, json};

use super::Report;
use super::findings::RSS_GROWTH_MIN;
use crate::output::wrap;
use crate::procfs::CgroupVersion;

/// Bytes as KiB, MiB or GiB, signed.
pub(super) fn bytes(n: i64) -> String {
    let a = n.unsigned_abs() as f64;
    let sign = if n < 0 { "-" } else { "" };
    let (v, unit) = if a >= (1u64 << 30) as f64 {
        (a / (1u64 << 30) as f64, "GiB")
    } else if a >= (1u64 << 20) as f64 {
        (a / (1u64 << 20) as f64, "MiB")
    } else {
        (a / 1024.0, "KiB")
    };
    if v < 10.0 && v.fract() != 0.0 {
        format!("{sign}{v:.1} {unit}")
    } else {
        format!("{sign}{v:.0} {unit}")
    }
}

/// A count or rate: 950, 4.6k, 46k, 1.2M.
pub(super) fn count(n: f64) -> String {
    if n >= 1e6 {
        format!("{:.1}M", n / 1e6)
    } else if n >= 1e4 {
        format!("{:.0}k", n / 1e3)
    } else if n >= 1e3 {
        format!("{:.1}k", n / 1e3)
    } else {
        format!("{n:.0}")
    }
}

/// Seconds as a user reads them: 10, 2.5.
pub(super) fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if (s - s.round()).abs() < 0.05 {
        format!("{s:.0}")
    } else {
        format!("{s:.1}")
    }
}

fn version(v: CgroupVersion) -> &'static str {
    match v {
        CgroupVersion::V1 => "v1",
        CgroupVersion::V2 => "v2",
    }
}

fn use_rows(r: &Report) -> Vec<(&'static str, &'static str, String)> {
    let m = |k: &str| r.meminfo.get(k).copied().unwrap_or(0) as i64;
    let v = |k: &str| r.vmstat.get(k).copied().unwrap_or(0);
    let (total, avail) = (m("MemTotal"), m("MemAvailable"));
    let pct = if total > 0 {
        avail as f64 / total as f64 * 100.0
    } else {
        0.0
    };
    let swap = if m("SwapTotal") == 0 {
        "no swap".to_string()
    } else {
        format!(
            "used {} of {} on {} devices",
            bytes(m("SwapTotal") - m("SwapFree")),
            bytes(m("SwapTotal")),
            r.swaps.len()
        )
    };
    let psi = match (r.psi_end, r.psi_stall) {
        (Some(p), Some((some, full))) => format!(
            "some avg10 {:.2}, full avg10 {}; stalled {} ms (some), {} ms (full) in the run",
            p.some.avg10,
            p.full
                .map_or("-".to_string(), |f| format!("{:.2}", f.avg10)),
            some / 1000,
            full.map_or("-".to_string(), |f| (f / 1000).to_string())
        ),
        _ => "not available here".to_string(),
    };
    let kills = if r.kmsg_read {
        format!(
            "{} (vmstat oom_kill +{}, {} in the kernel log)",
            v("oom_kill").max(r.kills.len() as u64),
            v("oom_kill"),
            r.kills.len()
        )
    } else {
        format!(
            "{} (vmstat oom_kill; kernel log not readable)",
            v("oom_kill")
        )
    };
    vec![
        (
            "utilization",
            "memory",
            format!(
                "used {} of {}, available {} ({pct:.0}%)",
                bytes(total - avail),
                bytes(total),
                bytes(avail)
            ),
        ),
        ("utilization", "swap", swap),
        (
            "utilization",
            "slab",
            format!(
                "{} (unreclaimable {}, {} in the run)",
                bytes(m("Slab")),
                bytes(m("SUnreclaim")),
                signed(r.sunreclaim_delta)
            ),
        ),
        ("saturation", "PSI", psi),
        (
            "saturation",
            "reclaim",
            format!(
                "pgscan kswapd +{}, direct +{}; pgsteal +{}; allocation stalls +{}; compaction stalls +{}",
                v("pgscan_kswapd"),
                v("pgscan_direct"),
                v("pgsteal_kswapd") + v("pgsteal_direct"),
                v("allocstall"),
                v("compact_stall")
            ),
        ),
        (
            "saturation",
            "swapping",
            format!("pswpin +{}, pswpout +{} pages", v("pswpin"), v("pswpout")),
        ),
        (
            "saturation",
            "faults",
            format!(
                "pgfault +{} ({}/s), pgmajfault +{}",
                v("pgfault"),
                count(v("pgfault") as f64 / r.elapsed.as_secs_f64().max(0.001)),
                v("pgmajfault")
            ),
        ),
        ("errors", "OOM kills", kills),
    ]
}

fn signed(n: i64) -> String {
    if n >= 0 {
        format!("+{}", bytes(n))
    } else {
        bytes(n)
    }
}

/// A finding and the command to run next: on one line when it fits, else the finding
/// wrapped and the command whole on a line of its own (it is copied as it is).
fn write_finding(out: &mut dyn Write, text: &str, next: &str) -> io::Result<()> {
    let line = format!("  {text} → {next}");
    if line.chars().count() <= wrap::COLUMNS {
        return writeln!(out, "{line}");
    }
    wrap::write_line(out, &format!("  {text}"))?;
    writeln!(out, "      → {next}")
}

/// The text report.
pub(super) fn text(r: &Report) -> io::Result<()> {
    let mut out = io::BufWriter::new(io::stdout().lock());
    let cut = if r.interrupted {
        " (ended early by a signal)"
    } else {
        ""
    };
    writeln!(out, "memperf triage: {} s{cut}", secs(r.elapsed))?;
    writeln!(out)?;
    writeln!(out, "{:<12} {:<10} VALUE", "USE", "RESOURCE")?;
    for (kind, res, value) in use_rows(r) {
        wrap::write_hanging(&mut out, &format!("{kind:<12} {res:<10} {value}"), 24)?;
    }
    writeln!(out)?;
    let title = if r.pid.is_some() {
        "TARGET"
    } else {
        "TOP PROCESSES BY RSS GROWTH"
    };
    writeln!(out, "{title}")?;
    writeln!(
        out,
        "{:>8} {:<16} {:>10} {:>10} {:>10} {:>8}",
        "PID", "COMM", "RSS", "GROWTH", "MINFLT/s", "MAJFLT"
    )?;
    let per_s = |n: u64| count(n as f64 / r.elapsed.as_secs_f64().max(0.001));
    if r.procs.is_empty() {
        writeln!(out, "{:>8} (no process grew)", "-")?;
    }
    for p in &r.procs {
        let comm: String = p.comm.chars().take(16).collect();
        let rss = p.rss_end.map_or("exited".to_string(), |b| bytes(b as i64));
        let growth = if p.rss_end.is_some() {
            signed(p.growth())
        } else {
            "-".to_string()
        };
        writeln!(
            out,
            "{:>8} {:<16} {:>10} {:>10} {:>10} {:>8}",
            p.pid,
            comm,
            rss,
            growth,
            per_s(p.minflt),
            p.majflt
        )?;
    }
    if !r.cgroups.is_empty() {
        writeln!(out)?;
        writeln!(out, "MEMORY CGROUPS")?;
        for c in &r.cgroups {
            let cg = &c.end;
            let limit = cg.limit.map_or("no limit".to_string(), |l| {
                format!("limit {}", bytes(l as i64))
            });
            let usage = cg.usage.map_or("?".to_string(), |u| bytes(u as i64));
            let deltas: Vec<String> = c.deltas.iter().map(|(k, d)| format!("{k} +{d}")).collect();
            let target = if c.target { " [target]" } else { "" };
            let line = format!(
                "  {} ({}){target}: usage {usage}, {limit}; {}",
                cg.path,
                version(cg.version),
                if deltas.is_empty() {
                    "no limit events".to_string()
                } else {
                    deltas.join(", ")
                }
            );
            wrap::write_line(&mut out, &line)?;
        }
    }
    writeln!(out)?;
    if r.findings.is_empty() {
        let line = format!(
            "No memory problem found in {} s: nothing reclaimed, swapped or OOM-killed, no memory \
             cgroup at its limit, no pressure stalls, no process grew by {} or more.",
            secs(r.elapsed),
            bytes(RSS_GROWTH_MIN)
        );
        wrap::write_line(&mut out, &line)?;
    } else {
        writeln!(out, "FINDINGS")?;
        for f in &r.findings {
            write_finding(&mut out, &f.text, &f.next)?;
        }
    }
    if !r.notes.is_empty() {
        writeln!(out)?;
        writeln!(out, "NOTES")?;
        for n in &r.notes {
            wrap::write_line(&mut out, &format!("  {n}"))?;
        }
    }
    out.flush()
}

fn json_value(r: &Report) -> Value {
    let m = |k: &str| r.meminfo.get(k).copied().unwrap_or(0);
    let psi_line = |p: &super::parse::PsiLine| json!({"avg10": p.avg10, "avg60": p.avg60, "avg300": p.avg300, "total_us": p.total_us});
    json!({
        "duration_s": r.elapsed.as_secs_f64(),
        "interrupted": r.interrupted,
        "pid": r.pid,
        "utilization": {
            "mem_total": m("MemTotal"),
            "mem_available": m("MemAvailable"),
            "mem_used": m("MemTotal").saturating_sub(m("MemAvailable")),
            "mem_free": m("MemFree"),
            "swap_total": m("SwapTotal"),
            "swap_used": m("SwapTotal").saturating_sub(m("SwapFree")),
            "slab": m("Slab"),
            "sunreclaim": m("SUnreclaim"),
            "slab_delta": r.slab_delta,
            "sunreclaim_delta": r.sunreclaim_delta,
            "swaps": r.swaps.iter().map(|s| json!({
                "name": s.name, "type": s.kind, "size": s.size_kb * 1024,
                "used": s.used_kb * 1024, "priority": s.priority,
            })).collect::<Vec<_>>(),
        },
        "saturation": {
            "psi": r.psi_end.map(|p| json!({
                "some": psi_line(&p.some),
                "full": p.full.as_ref().map(psi_line),
                "some_stall_us": r.psi_stall.map(|s| s.0),
                "full_stall_us": r.psi_stall.and_then(|s| s.1),
            })),
            "vmstat_delta": r.vmstat,
        },
        "errors": {
            "oom_kills": r.kills.iter().map(|k| json!({
                "pid": k.pid, "comm": k.comm, "memcg": k.memcg, "cgroup": k.cgroup,
                "uptime_us": k.usec,
            })).collect::<Vec<_>>(),
            "kernel_log_read": r.kmsg_read,
        },
        "processes": r.procs.iter().map(|p| json!({
            "pid": p.pid, "comm": p.comm, "rss_start": p.rss_start, "rss_end": p.rss_end,
            "rss_growth": p.rss_end.map(|_| p.growth()), "minflt": p.minflt,
            "majflt": p.majflt, "new": p.new, "exited": p.rss_end.is_none(),
        })).collect::<Vec<_>>(),
        "target_cgroup": r.target_cgroup.as_ref().map(|c| json!({
            "version": version(c.version), "path": c.path,
        })),
        "cgroups": r.cgroups.iter().map(|c| json!({
            "path": c.end.path, "version": version(c.end.version), "usage": c.end.usage,
            "limit": c.end.limit, "events": c.end.events, "events_delta": c.deltas,
            "target": c.target,
        })).collect::<Vec<_>>(),
        "findings": r.findings.iter().map(|f| json!({
            "kind": f.kind, "pid": f.pid, "text": f.text, "next": f.next,
        })).collect::<Vec<_>>(),
        "notes": r.notes,
    })
}

/// The JSON report: one object, one line.
pub(super) fn json(r: &Report) -> io::Result<()> {
    let mut out = io::stdout().lock();
    serde_json::to_writer(&mut out, &json_value(r))?;
    writeln!(out)?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(bytes(180 << 20), "180 MiB");
        assert_eq!(bytes(3 << 19), "1.5 MiB");
        assert_eq!(bytes(-(2 << 30)), "-2 GiB");
        assert_eq!(bytes(512), "0.5 KiB");
        assert_eq!(count(46_123.0), "46k");
        assert_eq!(count(4_600.0), "4.6k");
        assert_eq!(count(12.4), "12");
        assert_eq!(secs(Duration::from_millis(10_010)), "10");
        assert_eq!(secs(Duration::from_millis(2_500)), "2.5");
    }
}
