#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `memperf list`: what it lists is what the kernel has (tracefs's own directory, the
//! allocators' offsets as nm and readelf give them), and `--check`'s verdicts are the ones
//! the kernel gives root and an unprivileged user for real.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use common::user::TestUser;
use common::*;

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The tracefs memperf found: the root its listing names (`.../events`), as
/// `Tracepoints: kmem (/sys/kernel/tracing/events):`.
fn tracefs_events_dir(out: &str) -> Option<String> {
    let line = out.lines().find(|l| l.starts_with("Tracepoints: "))?;
    let open = line.rfind('(')?;
    Some(line[open + 1..].trim_end_matches("):").to_string())
}

#[test]
fn kmem_lists_exactly_the_kmem_tracepoints_tracefs_has() {
    if !require_perf("memperf list kmem") || !is_root() {
        eprintln!("skipping: tracefs needs root");
        return;
    }
    let o = run_memperf(&["list", "kmem"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let dir = tracefs_events_dir(&out).unwrap_or_else(|| panic!("no tracepoints in:\n{out}"));
    let mut want: Vec<String> = std::fs::read_dir(Path::new(&dir).join("kmem"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().unwrap().is_dir())
        .map(|e| format!("kmem:{}", e.file_name().to_string_lossy()))
        .collect();
    want.sort();
    let got: Vec<String> = out
        .lines()
        .filter(|l| l.contains("[Tracepoint event]"))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect();
    assert_eq!(got, want, "{out}");
    // Root opens them.
    assert!(
        out.lines()
            .filter(|l| l.contains("[Tracepoint event]"))
            .all(|l| l.ends_with("works here")),
        "{out}"
    );
    // The tools that read kmem are named, software events are not (not matched).
    assert!(out.contains("slabratetop: kmem:kmem_cache_alloc"), "{out}");
    assert!(!out.contains("[Software event]"), "{out}");
}

#[test]
fn software_events_work_and_hardware_ones_say_why_not() {
    if !require_perf("memperf list") {
        return;
    }
    let o = run_memperf(&["list", "sw", "hw"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let line = |name: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in:\n{out}"))
            .to_string()
    };
    for sw in [
        "page-faults OR faults",
        "minor-faults",
        "major-faults",
        "cpu-clock",
    ] {
        let l = line(sw);
        assert!(l.contains("[Software event]"), "{l}");
        // Own processes at least, whatever the user and paranoid.
        assert!(l.contains("works") || l.contains("own processes"), "{l}");
    }
    for hw in ["cycles OR cpu-cycles", "cache-misses"] {
        let l = line(hw);
        assert!(l.contains("[Hardware event]"), "{l}");
        if !Path::new("/sys/bus/event_source/devices/cpu").exists() {
            assert!(l.contains("no PMU"), "{l}");
        }
    }
}

#[test]
fn check_as_root_passes_for_the_tools_that_work_and_names_the_kernel() {
    if !require_perf("memperf list --check") || !is_root() {
        eprintln!("skipping: the root report needs root");
        return;
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let o = run_memperf(&["list", "--check", "faults", "mmapsnoop", "oomkill"]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{}", stderr(&o));
    assert!(out.contains(&format!("Linux {}", release.trim())), "{out}");
    assert!(out.contains("perf_event_paranoid"), "{out}");
    for t in ["faults", "mmapsnoop", "oomkill"] {
        assert!(
            out.lines()
                .any(|l| l.trim_start().starts_with(t) && l.ends_with("works here")),
            "{t}: {out}"
        );
    }
    // A hardware event asked for on a machine without a PMU: exit 1, with the reason.
    if !Path::new("/sys/bus/event_source/devices/cpu").exists() {
        let o = run_memperf(&["list", "--check", "cycles"]);
        let out = stdout(&o);
        assert_eq!(o.status.code(), Some(1), "{out}");
        assert!(out.contains("no PMU"), "{out}");
    }
}

/// The commands `list --check` names in its tools section: each row's `NAME [OPTIONS]`
/// (without ` (uprobes)`), and with each option its `fix:` line names outside backticks.
fn commands_named_by_check(out: &str) -> Vec<Vec<String>> {
    let mut named: Vec<Vec<String>> = Vec::new();
    let mut row: Vec<String> = Vec::new();
    let tools = out.split_once("\ntools:\n").map_or("", |(_, t)| t);
    for line in tools.lines().take_while(|l| l.starts_with("  ")) {
        let column = line.get(2..22).unwrap_or("").trim();
        let rest = line.get(22..).unwrap_or("").trim();
        if !column.is_empty() {
            row = column
                .trim_end_matches(" (uprobes)")
                .split_whitespace()
                .map(str::to_string)
                .collect();
            named.push(row.clone());
        } else if let Some(fix) = rest.strip_prefix("fix: ") {
            // Text between backticks is a shell command (sysctl, setcap), not memperf's.
            let plain: String = fix.split('`').step_by(2).collect::<Vec<_>>().join(" ");
            for word in plain.split_whitespace() {
                let opt = word.trim_end_matches([':', ',', '.', ')']);
                if opt.starts_with('-') && opt.len() > 1 {
                    named.push(row.iter().cloned().chain([opt.to_string()]).collect());
                }
            }
        }
    }
    named
}

#[test]
fn every_command_and_option_check_names_is_one_memperf_takes() {
    if !require_perf("memperf list --check names") || !is_root() {
        eprintln!("skipping: the root report needs root");
        return;
    }
    let o = run_memperf(&["list", "--check"]);
    let out = stdout(&o);
    let named = commands_named_by_check(&out);
    assert!(named.len() >= 14, "every tool has a row:\n{out}");
    assert!(named.iter().any(|c| c[0] == "leak"), "{out}");
    for words in &named {
        let argv = ["memperf"]
            .into_iter()
            .chain(words.iter().map(String::as_str));
        if let Err(e) = memperf::cli::Cli::try_parse_args(argv) {
            panic!(
                "`memperf {}` (named by list --check) does not parse: {e}\n{out}",
                words.join(" ")
            );
        }
    }
}

#[test]
fn check_as_an_unprivileged_user_says_tracepoint_tools_need_root() {
    if !require_perf("memperf list --check unprivileged") || !is_root() {
        eprintln!("skipping: needs root to create a user");
        return;
    }
    let Some(user) = TestUser::create() else {
        panic!("useradd failed (as root)");
    };
    let paranoid = perf_event_paranoid();
    if paranoid <= -1 {
        eprintln!("skipping: perf_event_paranoid -1 lets everyone read tracepoints");
        return;
    }
    let o = user.sh("$MEMPERF list --check mmapsnoop");
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{}", stderr(&o));
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with("mmapsnoop"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains("needs root"), "{out}");
    assert!(out.contains("fix: "), "{out}");
    assert!(out.contains("CAP_PERFMON no"), "{out}");
    // Its own page faults it may count: faults works, at least without kernel stacks.
    if paranoid <= 2 {
        let o = user.sh("$MEMPERF list --check faults");
        assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    }
}

/// `nm -D` value of `sym` and the file offset readelf's program headers give it.
fn file_offset_of(lib: &str, sym: &str) -> u64 {
    let nm = Command::new("nm")
        .args(["-D", "--defined-only", lib])
        .output()
        .unwrap();
    let nm = String::from_utf8_lossy(&nm.stdout);
    let vaddr = nm
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[2].split('@').next() == Some(sym))
                .then(|| u64::from_str_radix(f[0], 16).unwrap())
        })
        .unwrap_or_else(|| panic!("nm -D found no {sym} in {lib}"));
    let re = Command::new("readelf").args(["-lW", lib]).output().unwrap();
    let re = String::from_utf8_lossy(&re.stdout);
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    re.lines()
        .filter(|l| l.trim_start().starts_with("LOAD"))
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (off, va, filesz) = (hex(f[1]), hex(f[2]), hex(f[4]));
            (vaddr >= va && vaddr < va + filesz).then(|| vaddr - va + off)
        })
        .unwrap_or_else(|| panic!("{sym} at {vaddr:#x} in no LOAD of {lib}"))
}

#[test]
fn allocators_of_a_running_process_are_at_nm_and_readelf_offsets() {
    let prog = fixture("leak", Variant::NoFp);
    let mut target = Command::new(&prog)
        .args(["1", "1", "wait"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = target.id().to_string();
    // The loader maps libc before main runs; wait until the maps say so.
    let maps = format!("/proc/{pid}/maps");
    while !std::fs::read_to_string(&maps)
        .unwrap_or_default()
        .contains("libc.so")
    {
        std::thread::yield_now();
    }
    let o = run_memperf(&["list", "-p", &pid, "--allocators"]);
    target.stdin.take().unwrap().write_all(b"go\n").unwrap();
    assert!(target.wait().unwrap().success());
    let out = stdout(&o);
    assert!(o.status.success(), "{out}{}", stderr(&o));
    for sym in ["malloc", "free"] {
        let line = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(sym) && l.contains("libc.so.6"))
            .unwrap_or_else(|| panic!("no {sym} in libc.so.6:\n{out}"));
        let f: Vec<&str> = line.split_whitespace().collect();
        let lib = f[2];
        let at = f.iter().position(|w| *w == "offset").unwrap();
        let offset = u64::from_str_radix(f[at + 1].trim_start_matches("0x"), 16).unwrap();
        assert_eq!(offset, file_offset_of(lib, sym), "{line}");
    }
}

#[test]
fn allocators_of_an_unknown_pid_is_a_clear_error() {
    // Beyond pid_max (at most 2^22): no process can have it.
    let o = run_memperf(&["list", "-p", "99999999", "--allocators"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("no such process: 99999999"), "{err}");
}

#[test]
fn check_rss_tries_its_fault_event_and_the_allocator_uprobes() {
    if !require_perf("memperf list --check rss") || !is_root() {
        eprintln!("skipping: the uprobes need root");
        return;
    }
    let o = run_memperf(&["list", "--check", "rss"]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{}", stderr(&o));
    for name in ["rss", "rss (uprobes)"] {
        assert!(
            out.lines().any(|l| l.trim_start().starts_with(name)
                && l.split_whitespace().count() > 1
                && l.ends_with("works here")),
            "{name}: {out}"
        );
    }
    assert!(!out.contains("unknown"), "{out}");
    let o = run_memperf(&["list", "tool"]);
    let out = stdout(&o);
    assert!(
        out.lines()
            .any(|l| l.trim_start() == "rss: page-faults, uprobes on the allocator (works here)"),
        "{out}"
    );
}

/// A malformed glob (`[` never closed) is an error naming it (it listed nothing and exited
/// 0), and a filter that selects nothing says so.
#[test]
fn a_bad_glob_is_an_error_and_a_filter_matching_nothing_says_so() {
    let o = run_memperf(&["list", "zzzz:*["]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("invalid event glob `zzzz:*[`") && err.contains("never closed"),
        "{err}"
    );
    let o = run_memperf(&["list", "zzzz:*"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("No event, tracepoint or tool matches `zzzz:*`."),
        "{}",
        stdout(&o)
    );
    let o = run_memperf(&["list", "page-fa[u]lts"]);
    assert!(stdout(&o).contains("page-faults"), "{}", stdout(&o));
    assert!(!stdout(&o).contains("No event"), "{}", stdout(&o));
}
