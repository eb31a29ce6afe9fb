//! `memperf list --check`: the capability report. The settings that decide what perf
//! allows, then each tool (or each tool and event named) tried for real, with the fix.

use std::io::Write;

use anyhow::Result;

use super::super::ToolEvents;
use super::probe::{Avail, Prober};
use crate::sys::diagnose::{describe_paranoid, kptr_restrict_note, no_pmu_reason};
use crate::sys::uprobe::{UprobeGroup, UprobePmu};

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Why there is no uprobe PMU: a kernel older than the PMU, or one built without it (the
/// PMU comes with `CONFIG_UPROBE_EVENTS`), which a kernel's version alone cannot tell apart
/// from the first.
fn no_uprobe_pmu(kernel: Option<[u32; 3]>) -> &'static str {
    match kernel {
        Some(k) if k >= [4, 17, 0] => "no uprobe PMU (built without CONFIG_UPROBE_EVENTS)",
        _ => "no uprobe PMU (Linux 4.17+)",
    }
}

/// Where tracefs is mounted, from the mount table (before memperf mounts it).
fn tracefs_mounts() -> Vec<String> {
    let text = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, dir, fstype) = (f.next()?, f.next()?, f.next()?);
            (fstype == "tracefs").then(|| dir.to_string())
        })
        .collect()
}

fn write_system(out: &mut dyn Write, p: &Prober, mounted_before: &[String]) -> Result<()> {
    let f = &p.facts;
    let row = |out: &mut dyn Write, k: &str, v: String| writeln!(out, "{k:<22} {v}");
    let release = read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_else(|| "unknown".into());
    row(out, "kernel", format!("Linux {release}"))?;
    let paranoid = match f.paranoid {
        Some(_) => format!(
            "{} (root and CAP_PERFMON are not bound by it)",
            describe_paranoid(f)
        ),
        None => "unreadable".to_string(),
    };
    row(out, "perf_event_paranoid", paranoid)?;
    let kptr = match (f.kptr_restrict, kptr_restrict_note(f)) {
        (_, Some(note)) => note,
        (Some(k), None) => format!("{k} (kernel symbols are readable)"),
        (None, None) => "unreadable".to_string(),
    };
    row(out, "kptr_restrict", kptr)?;
    let yes = |b: bool| if b { "yes" } else { "no" };
    row(
        out,
        "caller",
        format!(
            "uid {} euid {}; CapEff: CAP_PERFMON {}, CAP_SYS_ADMIN {}, CAP_IPC_LOCK {} \
             (CAP_BPF is not needed: memperf uses no BPF)",
            f.uid,
            f.euid,
            yes(f.cap_perfmon),
            yes(f.cap_sys_admin),
            yes(f.cap_ipc_lock)
        ),
    )?;
    let tracefs = match (&p.tracefs, mounted_before.first()) {
        (Ok(t), Some(_)) => format!("mounted at {}", t.root().display()),
        (Ok(t), None) => format!("mounted by memperf now at {}", t.root().display()),
        (Err(e), _) => e.to_string(),
    };
    row(out, "tracefs", tracefs)?;
    let pmu = UprobePmu::read().map_or(no_uprobe_pmu(p.kernel).to_string(), |u| {
        format!("uprobe PMU type {}", u.type_)
    });
    let events = match &p.tracefs {
        Ok(t) if UprobeGroup::writable(t) => {
            format!("{}/uprobe_events writable", t.root().display())
        }
        Ok(t) => format!(
            "{}/uprobe_events not writable by the caller",
            t.root().display()
        ),
        Err(_) => "uprobe_events unreachable (no tracefs)".to_string(),
    };
    row(
        out,
        "uprobes",
        format!("{pmu}; {events}; {}", p.uprobes().short()),
    )?;
    let cpu_pmu = if f.pmu_cpu_present {
        "present (/sys/bus/event_source/devices/cpu): hardware events can be opened".to_string()
    } else {
        format!(
            "none: {} (/sys/bus/event_source/devices/cpu is absent{}); hardware events and \
             precise memory sampling cannot be opened, software events and tracepoints can",
            no_pmu_reason(p.in_vm),
            if p.in_vm {
                ", /proc/cpuinfo has the hypervisor flag: a VM without a virtual PMU"
            } else {
                ""
            }
        )
    };
    row(out, "PMU", cpu_pmu)?;
    let mlock = f.mlock_kb.map_or("unreadable".to_string(), |kb| {
        format!("{kb} KiB of ring buffers per user without CAP_IPC_LOCK")
    });
    row(out, "perf_event_mlock_kb", mlock)?;
    let stack = read_trimmed("/proc/sys/kernel/perf_event_max_stack")
        .map_or("unreadable".to_string(), |s| {
            format!("{s} frames in a kernel callchain")
        });
    row(out, "perf_event_max_stack", stack)?;
    let open = match crate::sys::probe_perf_events() {
        Ok(()) => "a task-clock counter opened and closed".to_string(),
        Err(e) => e,
    };
    row(out, "perf_event_open", open)?;
    Ok(())
}

/// One checked thing: its name, what it is, how it does here.
fn write_verdict(out: &mut dyn Write, name: &str, a: &Avail, p: &Prober) -> Result<()> {
    writeln!(out, "  {name:<20} {}", a.short())?;
    if let Some(fix) = a.fix(p.facts.paranoid) {
        writeln!(out, "  {:<20} fix: {fix}", "")?;
    }
    Ok(())
}

/// One tool: as a whole, with the optional events it goes on without.
fn check_tool(
    out: &mut dyn Write,
    p: &Prober,
    t: &ToolEvents,
    failed: &mut Vec<String>,
) -> Result<()> {
    let (whole, each) = p.tool(&t.wants);
    let name = if t.how.is_empty() {
        t.name.to_string()
    } else {
        format!("{} {}", t.name, t.how)
    };
    write_verdict(out, &name, &whole, p)?;
    for (w, a) in t.wants.iter().zip(&each) {
        if w.optional && !a.usable() && whole.usable() {
            writeln!(out, "  {:<20} without {}: {}", "", w.name, a.short())?;
        }
    }
    if !whole.usable() {
        failed.push(name.clone());
    }
    if t.uprobes {
        let a = p.uprobes();
        let name = format!("{name} (uprobes)");
        write_verdict(out, &name, &a, p)?;
        if !a.usable() {
            failed.push(name);
        }
    }
    Ok(())
}

/// The report; 0 when every tool (or everything named) works here, 1 otherwise.
pub(super) fn run(out: &mut dyn Write, p: &Prober, names: &[String]) -> Result<i32> {
    let mounted = tracefs_mounts();
    write_system(out, p, &mounted)?;
    let tools = super::super::tools();
    let mut failed = Vec::new();
    writeln!(out)?;
    if names.is_empty() {
        writeln!(out, "tools:")?;
    }
    if names.is_empty() {
        for t in &tools {
            check_tool(out, p, t, &mut failed)?;
        }
        write_verdict(out, "leak (uprobes)", &p.uprobes(), p)?;
    }
    for n in names {
        if let Some(t) = tools.iter().find(|t| t.name == n) {
            check_tool(out, p, t, &mut failed)?;
            if n == "leak" {
                let a = p.uprobes();
                write_verdict(out, "leak (uprobes)", &a, p)?;
                if !a.usable() {
                    failed.push("leak (uprobes)".to_string());
                }
            }
            continue;
        }
        let a = p.event(n, "");
        write_verdict(out, n, &a, p)?;
        if !a.usable() {
            failed.push(n.clone());
        }
    }
    writeln!(out)?;
    if failed.is_empty() {
        writeln!(out, "everything checked works here")?;
        Ok(0)
    } else {
        writeln!(out, "does not work here: {}", failed.join(", "))?;
        Ok(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_new_enough_for_the_uprobe_pmu_lacks_it_by_its_config() {
        // Linux 6.1 built without CONFIG_UPROBE_EVENTS (benches/kernels.sh's no-uprobes):
        // the version is not the reason.
        let built_without = no_uprobe_pmu(Some([6, 1, 192]));
        assert!(
            built_without.contains("CONFIG_UPROBE_EVENTS"),
            "{built_without}"
        );
        assert!(!built_without.contains("4.17"), "{built_without}");
        assert!(no_uprobe_pmu(Some([4, 14, 0])).contains("4.17+"));
        assert!(no_uprobe_pmu(None).contains("4.17+"));
    }
}
