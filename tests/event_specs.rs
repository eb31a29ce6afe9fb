//! Event specs as perf takes them: tracepoint globs, per-event terms, kernel filters
//! (`--filter`), and memperf's own samples left out of system-wide recordings.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;

use common::tools::perf_count;
use common::*;

/// The events of a recording, as `perf evlist` names them.
fn evlist(data: &std::path::Path) -> Vec<String> {
    let o = Command::new("perf")
        .args(["evlist", "-i"])
        .arg(data)
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

fn record(args: &[&str]) -> (String, String) {
    let o = run_memperf(args);
    let err = stderr(&o);
    assert!(o.status.success(), "memperf {args:?}: {err}");
    (String::from_utf8_lossy(&o.stdout).into_owned(), err)
}

/// `compaction:*` opens exactly the tracepoints tracefs lists under compaction, and the
/// summary says what the glob became.
#[test]
fn a_glob_opens_every_tracepoint_it_matches() {
    if !require_perf("tracepoint globs") {
        return;
    }
    let dir = scratch();
    let data = dir.path().join("glob.data");
    let (_, err) = record(&[
        "record",
        "-e",
        "compaction:*",
        "-o",
        data.to_str().unwrap(),
        "--",
        "true",
    ]);
    let tracefs = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .iter()
        .map(|r| std::path::Path::new(r).join("events/compaction"))
        .find(|p| p.exists())
        .expect("memperf mounted tracefs");
    let mut want: Vec<String> = std::fs::read_dir(&tracefs)
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().unwrap().is_dir())
        .map(|e| format!("compaction:{}", e.file_name().to_string_lossy()))
        .collect();
    want.sort();
    let mut got = evlist(&data);
    got.sort();
    assert_eq!(got, want);
    assert!(
        err.contains(&format!("`compaction:*` is {} tracepoints: ", want.len())),
        "{err}"
    );
    // A glob that matches nothing names what is near it.
    let o = run_memperf(&[
        "record",
        "-e",
        "compactio:*",
        "-o",
        "/dev/null",
        "--",
        "true",
    ]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("subsystems near it: `compaction`"),
        "{}",
        stderr(&o)
    );
}

/// `syscalls:sys_enter_m*map` is mmap, munmap and mremap (which the fixture does not call):
/// the fixture's own counts, exactly.
#[test]
fn a_glob_of_syscalls_counts_the_fixtures_calls() {
    if !require_perf("tracepoint globs") {
        return;
    }
    let prog = fixture("mapsizes", Variant::NoFp);
    let comm = prog.file_name().unwrap().to_str().unwrap();
    let dir = scratch();
    let data = dir.path().join("mmaps.data");
    let empty = dir.path().join("empty.data");
    for (out, n) in [(&empty, "0"), (&data, "40")] {
        record(&[
            "record",
            "-e",
            "syscalls:sys_enter_m*map",
            "--call-graph",
            "none",
            "-o",
            out.to_str().unwrap(),
            "--",
            prog.to_str().unwrap(),
            n,
            "3",
        ]);
    }
    let names = evlist(&data);
    assert!(
        names.contains(&"syscalls:sys_enter_mmap".to_string()),
        "{names:?}"
    );
    assert!(
        names.contains(&"syscalls:sys_enter_munmap".to_string()),
        "{names:?}"
    );
    for ev in ["syscalls:sys_enter_mmap", "syscalls:sys_enter_munmap"] {
        let extra = perf_count(&data, comm, ev) - perf_count(&empty, comm, ev);
        assert_eq!(extra, 40, "{ev}");
    }
}

/// `page-faults/period=10/` samples one fault in ten while `minor-faults` beside it samples
/// every one: two periods in one recording, as perf script reads it.
#[test]
fn per_event_terms_set_each_events_period_and_name() {
    if !require_perf("event terms") {
        return;
    }
    const N: usize = 100_000;
    let prog = fixture("pagefault", Variant::NoFp);
    let comm = prog.file_name().unwrap().to_str().unwrap();
    let dir = scratch();
    let data = dir.path().join("terms.data");
    let _turn = recording_turn();
    record(&[
        "record",
        "-e",
        "page-faults/period=10,name=tenth/,minor-faults/call-graph=no/",
        "--call-graph",
        "fp",
        "-m",
        TEST_RING_PAGES,
        "-o",
        data.to_str().unwrap(),
        "--",
        prog.to_str().unwrap(),
        &N.to_string(),
    ]);
    assert_eq!(evlist(&data), ["tenth", "minor-faults"]);
    let every = perf_count(&data, comm, "minor-faults");
    let tenth = perf_count(&data, comm, "tenth");
    assert!(every >= N, "{every}");
    // The kernel samples the 10th, 20th... fault; the fixture's command line (exec) may
    // fault before the events are enabled.
    assert!(tenth.abs_diff(every / 10) <= 1, "{tenth} vs {every}");
    let o = Command::new("perf")
        .args(["evlist", "-v", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    let v = String::from_utf8_lossy(&o.stdout);
    let tenth_attr = v.lines().find(|l| l.starts_with("tenth:")).unwrap();
    assert!(tenth_attr.contains("sample_freq }: 10,"), "{tenth_attr}");
    assert!(tenth_attr.contains("CALLCHAIN"), "{tenth_attr}");
    let minor = v.lines().find(|l| l.starts_with("minor-faults:")).unwrap();
    assert!(!minor.contains("CALLCHAIN"), "{minor}");
}

/// `--filter 'len >= 16777216'` keeps exactly the large mmaps: the kernel drops the rest.
#[test]
fn a_filter_keeps_exactly_the_events_it_matches() {
    if !require_perf("tracepoint filters") {
        return;
    }
    let prog = fixture("mapsizes", Variant::NoFp);
    let comm = prog.file_name().unwrap().to_str().unwrap();
    let dir = scratch();
    let data = dir.path().join("big.data");
    let (_, err) = record(&[
        "record",
        "-e",
        "page-faults",
        "-e",
        "syscalls:sys_enter_mmap",
        "--filter",
        "len >= 16777216",
        "-o",
        data.to_str().unwrap(),
        "--",
        prog.to_str().unwrap(),
        "50",
        "7",
    ]);
    assert_eq!(
        perf_count(&data, comm, "syscalls:sys_enter_mmap"),
        7,
        "{err}"
    );
    // The filter went to the tracepoint only; page faults are all there.
    assert!(perf_count(&data, comm, "page-faults") > 0);

    // kmalloc by size: the fixture makes 25 kmallocs of 8 KiB (pipe rings of 128 slots)
    // and 40 of 512 bytes; the loader's and perf's own are 4 KiB at most.
    let pipes = fixture("pipesize", Variant::NoFp);
    let km = dir.path().join("km.data");
    record(&[
        "record",
        "-e",
        "kmem:kmalloc",
        "--filter",
        "bytes_alloc > 4096",
        "--call-graph",
        "none",
        "-o",
        km.to_str().unwrap(),
        "--",
        pipes.to_str().unwrap(),
        "25",
        "40",
    ]);
    let o = Command::new("perf")
        .args(["script", "-F", "trace", "-i"])
        .arg(&km)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    let sizes: Vec<u64> = text
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("bytes_alloc=")?.parse().ok())
        .collect();
    assert_eq!(sizes, vec![8192; 25], "{text}");

    // A field the tracepoint has not: named, with the fields it has.
    let o = run_memperf(&[
        "record",
        "-e",
        "syscalls:sys_enter_mmap",
        "--filter",
        "lenght > 1",
        "-o",
        "/dev/null",
        "--",
        "true",
    ]);
    let err = stderr(&o);
    assert!(!o.status.success());
    assert!(err.contains("names `lenght`"), "{err}");
    assert!(err.contains("addr, len, prot, flags, fd, off"), "{err}");
    // A filter the kernel cannot parse: its EINVAL explained.
    let o = run_memperf(&[
        "record",
        "-e",
        "syscalls:sys_enter_mmap",
        "--filter",
        "len >= >= 1",
        "-o",
        "/dev/null",
        "--",
        "true",
    ]);
    assert!(
        stderr(&o).contains("the kernel rejected it (EINVAL)"),
        "{}",
        stderr(&o)
    );
    // A filter that follows no tracepoint.
    let o = run_memperf(&[
        "record",
        "-e",
        "page-faults",
        "--filter",
        "len > 1",
        "--",
        "true",
    ]);
    assert!(stderr(&o).contains("names no tracepoint"), "{}", stderr(&o));
}

/// A system-wide recording leaves memperf's own samples out (and says how many);
/// `--include-self` keeps them.
#[test]
fn system_wide_recordings_leave_memperf_out() {
    if !require_perf("self exclusion") || !is_root() {
        return;
    }
    let dir = scratch();
    for include in [false, true] {
        let data = dir.path().join(format!("self-{include}.data"));
        let mut args = vec![
            "record",
            "-e",
            "page-faults,syscalls:sys_enter_mmap",
            "-a",
            "--call-graph",
            "none",
            "-o",
            data.to_str().unwrap(),
        ];
        if include {
            args.push("--include-self");
        }
        args.extend(["--", "sleep", "0.5"]);
        let child = memperf()
            .args(&args)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let me = child.id();
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        let p = Command::new("perf")
            .args(["script", "-F", "pid", "-i"])
            .arg(&data)
            .output()
            .unwrap();
        let own = String::from_utf8_lossy(&p.stdout)
            .lines()
            .filter(|l| l.trim() == me.to_string())
            .count();
        if include {
            // memperf faults while it drains its rings and writes the file.
            assert!(own > 0, "{err}");
        } else {
            assert_eq!(own, 0, "{err}");
            assert!(err.contains("samples of memperf itself"), "{err}");
        }
    }
}

/// `-e brk` is no event name: it is `syscalls:sys_enter_brk`, the one tracepoint it
/// matches, said on standard error, and it counts the fixture's own calls exactly; a name
/// several tracepoints match is refused with every candidate.
#[test]
fn a_short_tracepoint_name_is_the_one_it_matches() {
    if !require_perf("short tracepoint names") {
        return;
    }
    let prog = fixture("brk", Variant::NoFp);
    let comm = prog.file_name().unwrap().to_str().unwrap();
    let dir = scratch();
    let data = dir.path().join("brk.data");
    let empty = dir.path().join("empty.data");
    for (out, n) in [(&empty, "0"), (&data, "64")] {
        let (_, err) = record(&[
            "record",
            "--event",
            "brk",
            "--call-graph",
            "none",
            "-o",
            out.to_str().unwrap(),
            "--",
            prog.to_str().unwrap(),
            n,
        ]);
        assert!(
            err.contains("event `brk` is the tracepoint `syscalls:sys_enter_brk`"),
            "{err}"
        );
    }
    assert_eq!(evlist(&data), ["syscalls:sys_enter_brk"]);
    let ev = "syscalls:sys_enter_brk";
    assert_eq!(
        perf_count(&data, comm, ev) - perf_count(&empty, comm, ev),
        64
    );

    let o = run_memperf(&["stat", "-e", "page_fault", "--", "true"]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    // Every candidate is a tracepoint of this kernel whose name holds `page_fault`.
    let listed = err
        .split_once("event `page_fault` names several tracepoints: ")
        .and_then(|(_, rest)| rest.split_once("; give one as system:name"))
        .unwrap_or_else(|| panic!("{err}"))
        .0;
    let candidates: Vec<&str> = listed.split(", ").map(|c| c.trim_matches('`')).collect();
    for want in ["exceptions:page_fault_kernel", "exceptions:page_fault_user"] {
        assert!(candidates.contains(&want), "{want} in {err}");
    }
    for c in &candidates {
        let (system, name) = c.split_once(':').unwrap();
        assert!(name.contains("page_fault"), "{c}");
        let dir = std::path::Path::new("/sys/kernel/tracing/events")
            .join(system)
            .join(name);
        assert!(dir.is_dir(), "{c} is no tracepoint here: {err}");
    }
}
