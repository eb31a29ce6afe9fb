//! `memperf list`: what can be traced here, and why not. Every event memperf knows with its
//! availability (found by opening it), each tool with the events it reads, the capability
//! report (`--check`, in `check`), and the allocators `memperf leak` would probe.

mod check;
mod probe;
mod user_probes;

use std::collections::BTreeSet;
use std::io::{self, Write};
use std::path::Path;

use anyhow::Result;

use crate::allocators::{self, Found};
use crate::config::list::ListConfig;
use crate::events::{self, glob_match};
use probe::{Avail, Prober};

/// Tracepoint subsystems about memory, in the order they are listed (first).
const MEMORY_SYSTEMS: &[&str] = &[
    "kmem",
    "vmscan",
    "oom",
    "compaction",
    "huge_memory",
    "filemap",
    "migrate",
    "percpu",
    "writeback",
    "pagemap",
    "mmap",
    "mmap_lock",
    "swiotlb",
    "cma",
    "ksm",
    "thp",
    "damon",
    "page_pool",
    "page_isolation",
    "hugetlbfs",
    "memcg",
];

/// System calls about memory, whose `syscalls:` tracepoints are listed after the memory
/// subsystems.
const MEMORY_SYSCALLS: &[&str] = &[
    "brk",
    "mmap",
    "munmap",
    "mremap",
    "madvise",
    "process_madvise",
    "mprotect",
    "pkey_mprotect",
    "shmget",
    "shmat",
    "shmdt",
    "shmctl",
    "mlock",
    "mlock2",
    "mlockall",
    "munlock",
    "munlockall",
    "msync",
    "mincore",
    "memfd_create",
    "remap_file_pages",
    "mbind",
    "set_mempolicy",
    "migrate_pages",
    "move_pages",
];

const NAME_WIDTH: usize = 48;

/// Runs `memperf list`; the exit status is `--check`'s verdict.
pub fn run(cfg: ListConfig) -> Result<i32> {
    let mut out = io::BufWriter::new(io::stdout().lock());
    let code = match cfg {
        ListConfig::Events { filter } => {
            list_selected(&mut out, &Prober::new(), &filter)?;
            0
        }
        ListConfig::Check { names } => check::run(&mut out, &Prober::new(), &names)?,
        ListConfig::AllocatorsOf { pid } => {
            let (found, unreadable) = allocators::in_process(pid)?;
            let comm = crate::procfs::comm(pid).unwrap_or_default();
            let comm = String::from_utf8_lossy(&comm).trim().to_string();
            writeln!(
                out,
                "Allocators in the objects process {pid} ({comm}) maps, as `memperf leak -p \
                 {pid}` probes them:"
            )?;
            write_allocators(&mut out, &found, &Prober::new().uprobes())?;
            for (path, why) in &unreadable {
                writeln!(out, "  (not searched: {}: {why})", path.display())?;
            }
            0
        }
        ListConfig::ProbesIn { file, filter } => {
            user_probes::write(&mut out, &file, &filter)?;
            0
        }
        ListConfig::AllocatorsIn { files } => {
            let uprobes = Prober::new().uprobes();
            for f in &files {
                writeln!(out, "Allocators in {}:", f.display())?;
                write_allocators(&mut out, &allocators::in_file(f)?, &uprobes)?;
            }
            0
        }
    };
    out.flush()?;
    Ok(code)
}

/// Whether filter `f` selects event `full` of type `kind` (`sw`, `hw`, `tracepoint`,
/// `uprobe`, `tool`): by type, by tracepoint subsystem (exactly, when `f` names one of
/// `systems`), else as a glob or a substring of the name or its part after the colon.
fn selects(f: &str, full: &str, kind: &str, systems: &BTreeSet<String>) -> bool {
    let types: &[&str] = match kind {
        "sw" => &["sw", "software"],
        "hw" => &["hw", "hardware"],
        "tracepoint" => &["tracepoint", "tracepoints"],
        "uprobe" => &["uprobe", "uprobes"],
        _ => &["tool", "tools"],
    };
    if types.contains(&f) {
        return true;
    }
    let (system, name) = full.split_once(':').unwrap_or(("", full));
    if systems.contains(f) {
        return system == f;
    }
    full.contains(f) || (events::is_glob(f) && (glob_match(f, full) || glob_match(f, name)))
}

fn selected(filter: &[String], full: &str, kind: &str, systems: &BTreeSet<String>) -> bool {
    filter.is_empty() || filter.iter().any(|f| selects(f, full, kind, systems))
}

/// One event line, as perf list prints it, with its availability.
fn write_line(out: &mut dyn Write, name: &str, kind: &str, avail: &str) -> io::Result<()> {
    writeln!(out, "  {name:<NAME_WIDTH$} {kind:<19} {avail}")
}

/// Tracepoints (`system:name`) in groups: the memory subsystems in their order, the memory
/// system calls, then every other subsystem by name.
fn group_tracepoints(all: &[String]) -> Vec<(String, Vec<&str>)> {
    fn add<'a>(groups: &mut Vec<(String, Vec<&'a str>)>, title: String, ev: &'a str) {
        match groups.iter_mut().find(|(t, _)| *t == title) {
            Some((_, v)) => v.push(ev),
            None => groups.push((title, vec![ev])),
        }
    }
    let mut groups: Vec<(String, Vec<&str>)> = Vec::new();
    let memory_call = |name: &str| {
        let call = name
            .strip_prefix("sys_enter_")
            .or_else(|| name.strip_prefix("sys_exit_"));
        call.is_some_and(|c| MEMORY_SYSCALLS.contains(&c))
    };
    for sys in MEMORY_SYSTEMS {
        for ev in all.iter().filter(|e| e.split(':').next() == Some(sys)) {
            add(&mut groups, sys.to_string(), ev);
        }
    }
    for ev in all
        .iter()
        .filter(|e| e.strip_prefix("syscalls:").is_some_and(memory_call))
    {
        add(&mut groups, "syscalls (memory)".to_string(), ev);
    }
    // `all` is sorted: the other subsystems come in name order.
    for ev in all {
        let (sys, name) = ev.split_once(':').unwrap_or(("", ev));
        if MEMORY_SYSTEMS.contains(&sys) || (sys == "syscalls" && memory_call(name)) {
            continue;
        }
        add(&mut groups, sys.to_string(), ev);
    }
    groups
}

fn list_events(out: &mut dyn Write, p: &Prober, filter: &[String]) -> Result<()> {
    let tracepoints = match &p.tracefs {
        Ok(t) => t.list_events().unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    let systems: BTreeSet<String> = tracepoints
        .iter()
        .filter_map(|t| t.split_once(':').map(|(s, _)| s.to_string()))
        .collect();
    writeln!(
        out,
        "Events memperf knows, and whether they work here for uid {} (`memperf list --check` \
         says why not and what to do):",
        p.facts.euid
    )?;
    for (hardware, title) in [(false, "Software events"), (true, "Hardware events")] {
        let mut header = false;
        for b in events::builtin_events() {
            let is_hw = matches!(b.kind, events::EventKind::Hardware { .. });
            let kind = if is_hw { "hw" } else { "sw" };
            let names: Vec<&str> = std::iter::once(b.name)
                .chain(b.aliases.iter().copied())
                .collect();
            if is_hw != hardware || !names.iter().any(|n| selected(filter, n, kind, &systems)) {
                continue;
            }
            if !header {
                writeln!(out, "\n{title}:")?;
                header = true;
            }
            let label = if is_hw {
                "[Hardware event]"
            } else {
                "[Software event]"
            };
            write_line(out, &names.join(" OR "), label, p.builtin(&b).short())?;
        }
    }
    write_tracepoints(out, p, &tracepoints, filter, &systems)?;
    if selected(filter, "malloc", "uprobe", &systems) || filter.iter().any(|f| f == "uprobe") {
        write_own_libc(out, p)?;
    }
    write_tools(out, p, filter, &systems)?;
    Ok(())
}

/// `list FILTER...`: the events the filters select, or a line that says none is.
fn list_selected(out: &mut dyn Write, p: &Prober, filter: &[String]) -> Result<()> {
    let mut listed = Vec::new();
    list_events(&mut listed, p, filter)?;
    out.write_all(&listed)?;
    // Only the heading line: nothing matched.
    if !filter.is_empty() && !listed.trim_ascii_end().contains(&b'\n') {
        writeln!(
            out,
            "\nNo event, tracepoint or tool matches {}.",
            filter
                .iter()
                .map(|f| format!("`{f}`"))
                .collect::<Vec<_>>()
                .join(" or ")
        )?;
    }
    Ok(())
}

fn write_tracepoints(
    out: &mut dyn Write,
    p: &Prober,
    all: &[String],
    filter: &[String],
    systems: &BTreeSet<String>,
) -> Result<()> {
    if let Some(no) = p.tracefs_unavailable() {
        if filter.is_empty()
            || filter
                .iter()
                .any(|f| f.starts_with("tracepoint") || f.contains(':'))
        {
            writeln!(out, "\nTracepoints: {}", no.short())?;
        }
        return Ok(());
    }
    let chosen: Vec<String> = all
        .iter()
        .filter(|t| selected(filter, t, "tracepoint", systems))
        .cloned()
        .collect();
    // Tracepoints open alike: one open says for all (opening thousands would enable each).
    let Some(first) = chosen.first() else {
        return Ok(());
    };
    let avail = p.tracepoint(first, "");
    let root = p
        .tracefs
        .as_ref()
        .map(|t| t.root().display().to_string())
        .unwrap_or_default();
    for (title, evs) in group_tracepoints(&chosen) {
        writeln!(out, "\nTracepoints: {title} ({root}/events):")?;
        for ev in evs {
            write_line(out, ev, "[Tracepoint event]", avail.short())?;
        }
    }
    Ok(())
}

/// The allocators of the C library memperf itself runs with: the uprobe targets every
/// dynamically linked program on this system has.
fn write_own_libc(out: &mut dyn Write, p: &Prober) -> Result<()> {
    let maps = crate::procfs::read_maps(std::process::id()).unwrap_or_default();
    let libc = maps
        .iter()
        .filter(|m| m.is_exec())
        .map(|m| String::from_utf8_lossy(&m.path).into_owned())
        .find(|path| allocators::is_libc(path));
    let Some(libc) = libc else {
        return Ok(());
    };
    writeln!(
        out,
        "\nUprobe targets: the C library's allocators (`memperf list -p PID --allocators` for \
         a process's):"
    )?;
    match allocators::in_file(Path::new(&libc)) {
        Ok(found) => write_allocators(out, &found, &p.uprobes())?,
        Err(e) => writeln!(out, "  {libc}: {e:#}")?,
    }
    Ok(())
}

/// One line per allocator function: its symbol, file and offset (and the entry probe's,
/// when leak moves it past an instruction the kernel would single-step).
fn write_allocators(out: &mut dyn Write, found: &[Found], uprobes: &Avail) -> io::Result<()> {
    if found.is_empty() {
        writeln!(out, "  none found (no malloc and free, prefixed or not)")?;
    }
    for f in found {
        let path = f.path.display();
        for s in &f.alloc.sites {
            let name = format!("{}{}", f.prefix, s.def.symbol);
            let mut at = format!("{path} offset {:#x}", s.entry);
            if s.probe != s.entry {
                at.push_str(&format!(" (entry probe at {:#x})", s.probe));
            }
            writeln!(out, "  {name:<24} [Uprobe]  {at}  {}", f.family())?;
        }
        let leak = match f.prefix {
            "" if f.family() == "libc" => String::new(),
            "" => format!(" -O {path}"),
            p => format!(" -O {path} --symbols-prefix {p}"),
        };
        writeln!(out, "  -> memperf leak{leak}: uprobes {}", uprobes.short())?;
    }
    Ok(())
}

fn write_tools(
    out: &mut dyn Write,
    p: &Prober,
    filter: &[String],
    systems: &BTreeSet<String>,
) -> Result<()> {
    let mut header = false;
    for t in super::tools() {
        let shown = filter.is_empty()
            || filter.iter().any(|f| {
                t.name == f
                    || selects(f, t.name, "tool", systems)
                    || t.wants
                        .iter()
                        .any(|w| selects(f, w.name, "", systems) && f != "tool")
            });
        if !shown {
            continue;
        }
        if !header {
            writeln!(out, "\nTools (the events each reads; * optional):")?;
            header = true;
        }
        let (mut whole, _) = p.tool(&t.wants);
        if t.uprobes && whole.usable() {
            whole = p.uprobes();
        }
        writeln!(out, "  {}", tool_line(&t, &whole))?;
    }
    Ok(())
}

/// `mmapsnoop: syscalls:sys_enter_mmap, syscalls:sys_exit_munmap* (works here)`.
fn tool_line(t: &super::ToolEvents, whole: &Avail) -> String {
    let (name, how) = (t.name, t.how);
    let mut events: Vec<String> = t
        .wants
        .iter()
        .map(|w| format!("{}{}", w.name, if w.optional { "*" } else { "" }))
        .collect();
    if t.uprobes {
        events.push("uprobes on the allocator".to_string());
    }
    let name = if how.is_empty() {
        name.to_string()
    } else {
        format!("{name} {how}")
    };
    format!("{name}: {} ({})", events.join(", "), whole.short())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::tool::Want;

    fn names(v: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
        v.sort();
        v
    }

    #[test]
    fn memory_subsystems_first_then_memory_syscalls_then_the_rest() {
        let all = names(&[
            "block:block_rq_issue",
            "kmem:kmalloc",
            "oom:mark_victim",
            "syscalls:sys_enter_brk",
            "syscalls:sys_enter_read",
            "syscalls:sys_exit_mmap",
            "vmscan:mm_vmscan_kswapd_wake",
            "xfs:xfs_read",
        ]);
        let g = group_tracepoints(&all);
        let titles: Vec<&str> = g.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(
            titles,
            [
                "kmem",
                "vmscan",
                "oom",
                "syscalls (memory)",
                "block",
                "syscalls",
                "xfs"
            ]
        );
        assert_eq!(g[3].1, ["syscalls:sys_enter_brk", "syscalls:sys_exit_mmap"]);
        assert_eq!(g[5].1, ["syscalls:sys_enter_read"]);
        let listed: usize = g.iter().map(|(_, v)| v.len()).sum();
        assert_eq!(listed, all.len());
    }

    #[test]
    fn filters_as_perf_list_takes_them() {
        let systems: BTreeSet<String> = ["kmem", "mmap", "xfs"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        // A subsystem name selects that subsystem only, not every name containing it.
        assert!(selects("kmem", "kmem:kmalloc", "tracepoint", &systems));
        assert!(!selects(
            "kmem",
            "xfs:xfs_kmem_alloc",
            "tracepoint",
            &systems
        ));
        assert!(selects(
            "mmap",
            "mmap:vm_unmapped_area",
            "tracepoint",
            &systems
        ));
        assert!(!selects(
            "mmap",
            "syscalls:sys_enter_mmap",
            "tracepoint",
            &systems
        ));
        // A substring or a glob, of the whole name or of the part after the colon.
        assert!(selects(
            "enter_mm",
            "syscalls:sys_enter_mmap",
            "tracepoint",
            &systems
        ));
        assert!(selects(
            "sys_enter_m*",
            "syscalls:sys_enter_mmap",
            "tracepoint",
            &systems
        ));
        assert!(selects(
            "kmem:mm_page_*",
            "kmem:mm_page_alloc",
            "tracepoint",
            &systems
        ));
        assert!(!selects(
            "kmem:mm_page_*",
            "kmem:kmalloc",
            "tracepoint",
            &systems
        ));
        // Types.
        assert!(selects("sw", "page-faults", "sw", &systems));
        assert!(!selects("sw", "cycles", "hw", &systems));
        assert!(selects("hw", "cycles", "hw", &systems));
        assert!(selected(&[], "anything", "tool", &systems));
    }

    #[test]
    fn lines_have_columns() {
        let mut v = Vec::new();
        write_line(
            &mut v,
            "page-faults OR faults",
            "[Software event]",
            "works here",
        )
        .unwrap();
        let line = String::from_utf8(v).unwrap();
        assert_eq!(line.find("[Software event]"), Some(2 + NAME_WIDTH + 1));
        assert!(line.trim_end().ends_with("works here"));
        let wants = [
            Want {
                name: "syscalls:sys_enter_mmap",
                since: "2.6.33",
                optional: false,
                filter: None,
            },
            Want {
                name: "syscalls:sys_exit_munmap",
                since: "2.6.33",
                optional: true,
                filter: None,
            },
        ];
        let no = Avail::No {
            why: "needs root or CAP_PERFMON".into(),
            fix: String::new(),
        };
        let tool = |name, how, uprobes| super::super::ToolEvents {
            name,
            how,
            wants: wants.to_vec(),
            uprobes,
        };
        assert_eq!(
            tool_line(&tool("mmapsnoop", "", false), &no),
            "mmapsnoop: syscalls:sys_enter_mmap, syscalls:sys_exit_munmap* (needs root or CAP_PERFMON)"
        );
        assert!(
            tool_line(&tool("leak", "--kernel", false), &Avail::Works)
                .starts_with("leak --kernel: ")
        );
        assert!(
            tool_line(&tool("rss", "", true), &Avail::Works)
                .ends_with("syscalls:sys_exit_munmap*, uprobes on the allocator (works here)")
        );
    }
}
