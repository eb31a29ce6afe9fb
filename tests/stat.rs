//! `memperf stat`: the kernel's counts, as perf stat's on the same fixtures; the bytes of
//! sized tracepoints, summed exactly; perf stat's layouts (table, -I, -x, -A, -r).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::{Command, Stdio};

use common::*;

/// `memperf stat ARGS`, its table (on stderr, as perf stat's) when it succeeds.
fn stat(args: &[&str]) -> String {
    let mut all = vec!["stat"];
    all.extend_from_slice(args);
    let o = run_memperf(&all);
    let err = stderr(&o);
    assert!(o.status.success(), "memperf {all:?}: {err}");
    err
}

/// `memperf stat ARGS`' standard error as printed: its table's layout, line by line (the
/// shared `stderr` joins lines it takes for wrapped prose, as indented table rows are).
fn stat_table(args: &[&str]) -> String {
    let mut all = vec!["stat"];
    all.extend_from_slice(args);
    let o = run_memperf(&all);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "memperf {all:?}: {err}");
    err
}

/// `perf stat ARGS` in the C locale (no digit grouping), its table.
fn perf_stat(args: &[&str]) -> String {
    let o = Command::new("perf")
        .arg("stat")
        .args(args)
        .env("LC_ALL", "C")
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert!(o.status.success(), "perf stat {args:?}");
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The CSV fields of `event`'s line.
fn csv<'a>(text: &'a str, event: &str) -> Vec<&'a str> {
    text.lines()
        .map(|l| l.split(',').collect::<Vec<_>>())
        .find(|f| f.get(2) == Some(&event))
        .unwrap_or_else(|| panic!("no `{event}` line in\n{text}"))
}

fn count(text: &str, event: &str) -> u64 {
    csv(text, event)[0].parse().unwrap()
}

fn bytes(text: &str, event: &str) -> u64 {
    let f = csv(text, event);
    assert!(f[6].starts_with("bytes "), "{f:?}");
    f[5].parse().unwrap()
}

/// The CPUs online, from /sys/devices/system/cpu/online (`0-1,4`).
fn online_cpus() -> usize {
    let cpus = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
    cpus.trim()
        .split(',')
        .map(|r| match r.split_once('-') {
            Some((a, b)) => b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1,
            None => 1,
        })
        .sum()
}

fn need_perf() -> bool {
    require_perf("memperf stat") && require_perf_tool("memperf stat")
}

/// Syscall tracepoints count exactly what perf stat counts on the same fixture, and the
/// mapped bytes are the fixture's own to the byte.
#[test]
fn counts_match_perf_stat_and_bytes_are_exact() {
    if !need_perf() {
        return;
    }
    let prog = fixture("mapsizes", Variant::NoFp);
    let p = prog.to_str().unwrap();
    let events = "syscalls:sys_enter_mmap,syscalls:sys_enter_munmap,page-faults";
    let ours = stat(&["-x,", "-e", events, "--", p, "50", "7"]);
    let theirs = perf_stat(&["-x,", "-e", events, "--", p, "50", "7"]);
    for ev in ["syscalls:sys_enter_mmap", "syscalls:sys_enter_munmap"] {
        assert_eq!(
            count(&ours, ev),
            count(&theirs, ev),
            "{ev}\n{ours}\n{theirs}"
        );
    }
    let empty = stat(&["-x,", "-e", events, "--", p, "0", "0"]);
    assert_eq!(
        count(&ours, "syscalls:sys_enter_mmap") - count(&empty, "syscalls:sys_enter_mmap"),
        57
    );
    // 50 maps of 4 KiB and 7 of 32 MiB, beyond what the loader maps in both runs.
    let grown = 50 * 4096 + 7 * (32 << 20);
    for ev in ["syscalls:sys_enter_mmap", "syscalls:sys_enter_munmap"] {
        assert_eq!(bytes(&ours, ev) - bytes(&empty, ev), grown, "{ev}\n{ours}");
    }
    // page-faults has no size: counted, not summed.
    let pf = csv(&ours, "page-faults");
    assert_eq!(pf[5..], ["", ""], "{pf:?}");

    // Page faults: one per page touched; the loader's and the stack's own vary by a few
    // pages between runs with where ASLR puts them (CI once saw 2996 for 3000).
    let pf = fixture("pagefault", Variant::NoFp);
    let n = |pages: &str| {
        count(
            &stat(&[
                "-x,",
                "-e",
                "page-faults",
                "--",
                pf.to_str().unwrap(),
                pages,
            ]),
            "page-faults",
        )
    };
    // The fewest of three runs each: the loader's and the stack's share is the same then.
    let least = |pages: &str| (0..3).map(|_| n(pages)).min().unwrap_or(0) as i64;
    let extra = least("3000") - least("0");
    assert!((extra - 3000).abs() <= 3, "{extra} faults for 3000 pages");
}

/// brk()'s growth from sys_exit_brk's returns, kmalloc's bytes_alloc behind a filter: the
/// fixtures' own sizes.
#[test]
fn brk_growth_and_filtered_kmalloc_bytes_are_summed() {
    if !need_perf() {
        return;
    }
    let brk = fixture("brk", Variant::NoFp);
    let b = brk.to_str().unwrap();
    let ev = "syscalls:sys_enter_brk";
    // Through a shell that grows its own heap and then execs the fixture: exec moves the
    // break to a new random place, which is not growth.
    let via_sh = |n: &str| {
        stat(&[
            "-x,",
            "-e",
            ev,
            "--",
            "sh",
            "-c",
            &format!("x=$(echo hi); exec {b} {n}"),
        ])
    };
    let ours = via_sh("64");
    let empty = via_sh("0");
    assert_eq!(count(&ours, ev) - count(&empty, ev), 64);
    assert_eq!(
        bytes(&ours, ev) - bytes(&empty, ev),
        64 * 8192,
        "{ours}\n{empty}"
    );

    let pipes = fixture("pipesize", Variant::NoFp);
    let k = stat(&[
        "-x,",
        "-e",
        "kmem:kmalloc",
        "--filter",
        "bytes_alloc > 4096",
        "--",
        pipes.to_str().unwrap(),
        "25",
        "40",
    ]);
    assert_eq!(count(&k, "kmem:kmalloc"), 25, "{k}");
    assert_eq!(bytes(&k, "kmem:kmalloc"), 25 * 8192, "{k}");
    // --no-bytes counts only: the same count, no metric.
    let k = stat(&[
        "-x,",
        "--no-bytes",
        "-e",
        "kmem:kmalloc",
        "--filter",
        "bytes_alloc > 4096",
        "--",
        pipes.to_str().unwrap(),
        "25",
        "40",
    ]);
    assert_eq!(csv(&k, "kmem:kmalloc")[..1], ["25"]);
    assert_eq!(csv(&k, "kmem:kmalloc")[5..], ["", ""]);
}

/// System-wide, a filtered counter counts exactly what its filter keeps: counters are
/// enabled only once the filter is set (memperf's own hits are left out by another).
#[test]
fn system_wide_filters_count_exactly() {
    if !need_perf() || !is_root() {
        return;
    }
    let pipes = fixture("pipesize", Variant::NoFp);
    let comm = pipes.file_name().unwrap().to_str().unwrap();
    let filter = format!("bytes_alloc > 4096 && comm == \"{comm}\"");
    let k = stat(&[
        "-a",
        "-x,",
        "-e",
        "kmem:kmalloc",
        "--filter",
        &filter,
        "--",
        pipes.to_str().unwrap(),
        "25",
        "40",
    ]);
    assert_eq!(count(&k, "kmem:kmalloc"), 25, "{k}");
    assert_eq!(bytes(&k, "kmem:kmalloc"), 25 * 8192, "{k}");
    // A filter nothing passes counts nothing.
    let none = stat(&[
        "-a",
        "-x,",
        "--no-bytes",
        "-e",
        "kmem:kmalloc",
        "--filter",
        "bytes_alloc > 1000000000",
        "--duration",
        "0.3",
    ]);
    assert_eq!(count(&none, "kmem:kmalloc"), 0, "{none}");
}

/// The table, -x and -I lines have perf stat's columns: the same widths, the same fields.
#[test]
fn layouts_are_perf_stats() {
    if !need_perf() {
        return;
    }
    let prog = fixture("mapsizes", Variant::NoFp);
    let p = prog.to_str().unwrap();
    let ev = "task-clock,page-faults,syscalls:sys_enter_mmap";
    let args = ["--no-bytes", "-e", ev, "--", p, "5", "1"];
    let ours = stat_table(&args);
    let theirs = perf_stat(&args[1..]);
    // Each event's line: the count ends at the same column, the name starts at the same
    // column, `#` and the line's length are the same.
    let shape = |text: &str, name: &str| {
        let l = text
            .lines()
            .find(|l| l.contains(&format!(" {name} ")))
            .unwrap_or_else(|| panic!("no {name} in\n{text}"));
        (l.find(name).unwrap(), l.find('#'), l.len())
    };
    for name in ["task-clock", "page-faults", "syscalls:sys_enter_mmap"] {
        assert_eq!(
            shape(&ours, name),
            shape(&theirs, name),
            "{name}\n{ours}\n{theirs}"
        );
    }
    assert!(ours.starts_with(&format!("\n Performance counter stats for '{p} 5 1':\n\n")));
    assert!(ours.contains(" seconds time elapsed\n\n"), "{ours}");
    assert!(ours.contains(" seconds user\n"), "{ours}");

    // CSV: the same fields, the runtime and percentage filled in.
    let ours = stat_table(&["-x,", "--no-bytes", "-e", ev, "--", p, "5", "1"]);
    let theirs = perf_stat(&["-x,", "-e", ev, "--", p, "5", "1"]);
    for name in ["task-clock", "page-faults", "syscalls:sys_enter_mmap"] {
        let (a, b) = (csv(&ours, name), csv(&theirs, name));
        assert_eq!(a.len(), b.len(), "{a:?} {b:?}");
        assert_eq!(a[1..3], b[1..3]);
        assert_eq!(a[4], "100.00");
        assert_eq!(a[6], b[6], "the metric's unit");
    }
    assert_eq!(
        count(&ours, "syscalls:sys_enter_mmap"),
        count(&theirs, "syscalls:sys_enter_mmap")
    );
}

/// -I: perf's header, and one line per event and interval, its time first.
#[test]
fn intervals_print_as_perf_stat_does() {
    if !need_perf() || !is_root() {
        return;
    }
    let ours = stat(&[
        "-I",
        "100",
        "-a",
        "-e",
        "page-faults",
        "--",
        "sleep",
        "0.35",
    ]);
    let theirs = perf_stat(&[
        "-I",
        "100",
        "-a",
        "-e",
        "page-faults",
        "--",
        "sleep",
        "0.35",
    ]);
    let header = "#           time             counts unit events";
    assert_eq!(ours.lines().next(), Some(header), "{ours}");
    assert_eq!(theirs.lines().next(), Some(header));
    let rows = |t: &str| -> Vec<(f64, usize, usize)> {
        t.lines()
            .filter(|l| l.contains("page-faults"))
            .map(|l| {
                let time: f64 = l.split_whitespace().next().unwrap().parse().unwrap();
                (time, l.find("page-faults").unwrap(), l.len())
            })
            .collect()
    };
    let (a, b) = (rows(&ours), rows(&theirs));
    // 100, 200, 300 ms and the last 50: four intervals (five when a tick came late on
    // a busy machine, for either tool).
    assert!((4..=5).contains(&a.len()), "{ours}");
    assert!((4..=5).contains(&b.len()), "{theirs}");
    assert_eq!((a[0].1, a[0].2), (b[0].1, b[0].2), "{ours}\n{theirs}");
    assert!(a.windows(2).all(|w| w[0].0 < w[1].0), "{ours}");
    assert!((a[0].0 - 0.1).abs() < 0.05, "{ours}");
    // CSV intervals: time, then perf's fields.
    let ours = stat(&[
        "-I",
        "100",
        "-x,",
        "-a",
        "-e",
        "page-faults",
        "--",
        "sleep",
        "0.25",
    ]);
    let first = ours.lines().next().unwrap();
    let f: Vec<&str> = first.split(',').collect();
    assert_eq!(f.len(), 8, "{first}");
    assert_eq!(f[3], "page-faults");
}

/// -A: one line per CPU; -r: the mean and its spread, the runs counted in the heading.
#[test]
fn per_cpu_and_repeated_runs() {
    if !need_perf() || !is_root() {
        return;
    }
    let n = online_cpus();
    let out = stat(&["-A", "-a", "-x,", "-e", "page-faults", "--", "sleep", "0.1"]);
    let lines: Vec<&str> = out.lines().filter(|l| l.contains("page-faults")).collect();
    assert_eq!(lines.len(), n, "{out}");
    assert!(lines.iter().all(|l| l.starts_with("CPU")), "{out}");

    let prog = fixture("mapsizes", Variant::NoFp);
    let out = stat(&[
        "-r",
        "3",
        "-e",
        "syscalls:sys_enter_mmap",
        "--",
        prog.to_str().unwrap(),
        "10",
        "0",
    ]);
    assert!(out.contains(" (3 runs):"), "{out}");
    assert!(out.contains(" +- "), "{out}");
    assert!(out.contains("seconds time elapsed  ( +-"), "{out}");
    // The same calls every run: no spread on the count.
    let line = out.lines().find(|l| l.contains("sys_enter_mmap")).unwrap();
    assert!(!line.contains("( +-"), "{line}");
    let o = run_memperf(&["stat", "-r", "2", "-a"]);
    assert!(stderr(&o).contains("give one after --"), "{}", stderr(&o));
}

/// -p counts a running process from the moment memperf attaches, until it exits.
#[test]
fn attaching_to_a_process_counts_what_it_does_next() {
    if !need_perf() {
        return;
    }
    let prog = fixture("mapsizes", Variant::NoFp);
    let mut sh = Command::new("sh")
        .args(["-c", &format!("read x; exec {} 20 2", prog.display())])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = sh.id().to_string();
    let child = memperf()
        .args(["stat", "-x,", "-e", "syscalls:sys_enter_mmap", "-p", &pid])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Counting starts once memperf holds its counter: one fd per CPU for the sampled
    // mmap payloads, then the counter's.
    let cpus = online_cpus();
    let fds = format!("/proc/{}/fd", child.id());
    let perf_fds = || {
        std::fs::read_dir(&fds).map_or(0, |d| {
            d.flatten()
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|l| l.to_string_lossy().contains("perf_event"))
                })
                .count()
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while perf_fds() < cpus + 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "memperf never opened its counter"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    use std::io::Write;
    sh.stdin.take().unwrap().write_all(b"go\n").unwrap();
    sh.wait().unwrap();
    let o = child.wait_with_output().unwrap();
    let ours = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{ours}");
    let theirs = perf_stat(&[
        "-x,",
        "-e",
        "syscalls:sys_enter_mmap",
        "--",
        prog.to_str().unwrap(),
        "20",
        "2",
    ]);
    assert_eq!(
        count(&ours, "syscalls:sys_enter_mmap"),
        count(&theirs, "syscalls:sys_enter_mmap"),
        "{ours}\n{theirs}"
    );
}

/// Bad input: clear errors; an event the machine cannot count: perf's `<not supported>`,
/// with why.
#[test]
fn bad_input_and_unsupported_events() {
    let o = run_memperf(&["stat", "-e", "page-fualts", "--", "true"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("page-faults"), "{}", stderr(&o));
    let o = run_memperf(&["stat", "-p", "999999999", "-e", "page-faults"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("no such process"), "{}", stderr(&o));
    let o = run_memperf(&["stat", "-I", "5", "--", "true"]);
    assert!(stderr(&o).contains("at least 10 ms"), "{}", stderr(&o));
    let o = run_memperf(&["stat", "-A", "--", "true"]);
    assert!(stderr(&o).contains("needs -a or -C"), "{}", stderr(&o));
    if !require_perf("memperf stat") {
        return;
    }
    if !std::path::Path::new("/sys/bus/event_source/devices/cpu").exists() {
        let err = stat(&["-e", "cycles,page-faults", "--", "true"]);
        let line = err.lines().find(|l| l.contains("cycles")).unwrap();
        assert!(line.contains("<not supported>"), "{err}");
        assert!(err.contains("note: "), "{err}");
        assert!(err.to_lowercase().contains("pmu"), "{err}");
    }
}

/// `stat -o FILE` overwrites FILE as perf stat's does, its own earlier output included (it
/// failed with "File exists"); another user's file, or a symbolic link of theirs, is
/// refused, and so is a FIFO, without waiting for a reader.
#[test]
fn stat_output_overwrites_its_own_file_but_not_another_users() {
    if !require_perf("memperf stat") {
        return;
    }
    let dir = scratch();
    let out = dir.path().join("stat.txt");
    let o_arg = out.to_str().unwrap();
    std::fs::write(&out, "x".repeat(100_000)).unwrap();
    for _ in 0..2 {
        stat(&["-e", "page-faults", "-o", o_arg, "--", "true"]);
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(text.contains("page-faults"), "{text}");
        assert!(
            !text.contains('x') && text.len() < 10_000,
            "not overwritten: {text}"
        );
    }
    let nobody = 65534;
    let theirs = dir.path().join("theirs.txt");
    std::fs::write(&theirs, "theirs").unwrap();
    std::os::unix::fs::chown(&theirs, Some(nobody), Some(nobody)).unwrap();
    let link = dir.path().join("link.txt");
    std::os::unix::fs::symlink(&out, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(nobody), Some(nobody)).unwrap();
    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    for (path, why) in [
        (&theirs, "is a file of uid 65534"),
        (&link, "is a symbolic link of uid 65534"),
        (&fifo, "is a FIFO, not a regular file"),
    ] {
        let o = run_memperf(&[
            "stat",
            "-e",
            "page-faults",
            "-o",
            path.to_str().unwrap(),
            "--",
            "true",
        ]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{}: {err}", path.display());
        assert!(err.contains(why), "{}: {err}", path.display());
    }
    assert_eq!(std::fs::read_to_string(&theirs).unwrap(), "theirs");
}
