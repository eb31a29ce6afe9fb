//! The fault tools (`faults`, `brkstack`, `ffaults`, `fmapfault`, `swapin`; `hfaults` is in
//! tests/huge_pages.rs), each made to see what it reports with a known answer: faults of a
//! known chain, brk calls of known sizes, copy-on-write faults of a file, swap-ins through a
//! swap file and a memory cgroup.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;

use common::kernel::{MemCgroup, Swapfile};
use common::tools::*;
use common::*;

#[test]
fn faults_counts_every_fault_of_a_known_chain() {
    if !require_perf("faults") {
        return;
    }
    const N: u64 = 3000;
    let prog = fixture("pagefault", Variant::NoFp);
    let comm = prog.file_name().unwrap().to_str().unwrap();
    let dir = scratch();
    let data = dir.path().join("faults.data");
    let svg = dir.path().join("faults.svg");
    let n = N.to_string();
    let _turn = recording_turn();
    let (text, err) = run_tool(&[
        "faults",
        "-m",
        TEST_RING_PAGES,
        "-w",
        data.to_str().unwrap(),
        "--flamegraph",
        svg.to_str().unwrap(),
        "--",
        prog.to_str().unwrap(),
        &n,
    ]);
    assert!(
        text.starts_with("Tracing page faults by stack... Hit Ctrl-C to end.\n"),
        "{text}"
    );
    // Exactly one stack goes through touch_pages, with every one of its faults, and its
    // frames in order (leaf first), as stackcount prints them.
    assert_eq!(
        stack_count(&text, "touch_pages", comm),
        [N],
        "{text}\n{err}"
    );
    let st = text
        .split("\n\n")
        .find(|s| s.contains("touch_pages"))
        .unwrap();
    let frames: Vec<&str> = st.lines().map(str::trim).collect();
    assert_eq!(
        frames[..5],
        ["touch_pages", "pf_level3", "pf_level2", "pf_level1", "main"],
        "{st}"
    );
    assert!(
        err.contains("memperf faults: ") && err.contains(", lost 0"),
        "{err}"
    );
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.contains("<svg") && drawn.contains("touch_pages"));

    // Folded, from the recording: the same count under the same chain, root first.
    let (folded, _) = run_tool(&["faults", "-f", "-i", data.to_str().unwrap()]);
    let chain = "main;pf_level1;pf_level2;pf_level3;touch_pages ";
    let line = folded
        .lines()
        .find(|l| l.contains(chain))
        .unwrap_or_default();
    assert!(line.starts_with(&format!("{comm};")), "{folded}");
    assert!(line.ends_with(&format!(" {N}")), "{folded}");
    // The text from the recording is the live text, without the banner.
    let (replayed, _) = run_tool(&["faults", "-i", data.to_str().unwrap()]);
    assert_eq!(replayed, text.split_once('\n').unwrap().1);

    // Per pid, user frames only, one fault in 10 sampled: the count is ten times the
    // samples, and the stack is labelled with the pid.
    let (sampled, _) = run_tool(&[
        "faults",
        "-m",
        TEST_RING_PAGES,
        "-P",
        "-U",
        "-c",
        "10",
        "--",
        prog.to_str().unwrap(),
        &n,
    ]);
    let st = sampled
        .split("\n\n")
        .find(|s| s.contains("touch_pages"))
        .unwrap();
    let counted: u64 = st.lines().last().unwrap().trim().parse().unwrap();
    assert_eq!(counted % 10, 0, "{st}");
    assert!((N - 10..=N + 10).contains(&counted), "{st}");
    assert!(
        st.lines()
            .any(|l| l.trim().starts_with(&format!("{comm} ["))),
        "{st}"
    );
}

#[test]
fn faults_reads_perfs_own_recording() {
    if !require_perf("faults -i perf.data") || !require_perf_tool("faults -i perf.data") {
        return;
    }
    const N: u64 = 2000;
    let prog = fixture("pagefault", Variant::NoFp);
    let dir = scratch();
    let data = dir.path().join("perf.data");
    let st = Command::new("perf")
        .args([
            "record",
            "-q",
            "-e",
            "page-faults",
            "-c",
            "1",
            "--call-graph",
            "dwarf",
            "-m",
            TEST_RING_PAGES,
            "-o",
        ])
        .arg(&data)
        .arg(&prog)
        .arg(N.to_string())
        .status()
        .unwrap();
    assert!(st.success());
    let (folded, err) = run_tool(&["faults", "-f", "-i", data.to_str().unwrap()]);
    let chain = ";main;pf_level1;pf_level2;pf_level3;touch_pages ";
    let total: u64 = folded
        .lines()
        .filter(|l| l.contains(chain))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    // perf loses samples of this burst on a busy machine: the count is what perf itself
    // unwinds through the chain, and the losses are perf's, counted once.
    let perfs = perf_script(&data);
    let through = perfs
        .iter()
        .filter(|s| s.has_chain(&["touch_pages", "pf_level3", "pf_level2", "pf_level1", "main"]))
        .count() as u64;
    assert!(through > 0 && through <= N, "{through}");
    assert_eq!(total, through, "{folded}\n{err}");
    let lost = err
        .split(", lost ")
        .nth(1)
        .and_then(|r| r.split([',', ' ', '\n']).next());
    let lost: u64 = lost.unwrap().parse().unwrap();
    let p = Command::new("perf")
        .args(["script", "--show-lost-events", "-F", "comm", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    let perf_lost: u64 = String::from_utf8_lossy(&p.stdout)
        .lines()
        .filter_map(|l| l.split("PERF_RECORD_LOST lost ").nth(1))
        .map(|n| n.trim().parse::<u64>().unwrap())
        .sum();
    // perf's losses, counted once (its LOST records, not again its LOST_SAMPLES).
    assert_eq!(lost, perf_lost, "{err}");
}

#[test]
fn brkstack_counts_calls_and_bytes_grown_by_stack() {
    if !require_perf("brkstack") {
        return;
    }
    const N: u64 = 64;
    let prog = fixture("brk", Variant::NoFp);
    let comm = prog.file_name().unwrap().to_str().unwrap();
    let dir = scratch();
    let data = dir.path().join("brk.data");
    let n = N.to_string();
    let _turn = recording_turn();
    let (text, err) = run_tool(&[
        "brkstack",
        "-m",
        TEST_RING_PAGES,
        "-w",
        data.to_str().unwrap(),
        "--",
        prog.to_str().unwrap(),
        &n,
    ]);
    // N calls through sbrk from grow_heap, 8 KiB each (the fixture's INCREMENT).
    assert_eq!(
        stack_count(&text, "grow_heap", comm),
        [N, N * 8192],
        "{text}\n{err}"
    );
    let st = text
        .split("\n\n")
        .find(|s| s.contains("grow_heap"))
        .unwrap();
    let frames: Vec<&str> = st.lines().map(str::trim).collect();
    let g = frames.iter().position(|f| *f == "grow_heap").unwrap();
    assert!(frames[..g].iter().any(|f| f.contains("brk")), "{st}");
    assert_eq!(frames[g + 1..g + 3], ["brk_level1", "main"], "{st}");
    assert!(!err.contains("is unknown"), "{err}");

    let (folded, _) = run_tool(&["brkstack", "-f", "--bytes", "-i", data.to_str().unwrap()]);
    let line = folded
        .lines()
        .find(|l| l.contains(";main;brk_level1;grow_heap;"))
        .unwrap_or_default();
    assert!(line.ends_with(&format!(" {}", N * 8192)), "{folded}");
    let (replayed, _) = run_tool(&["brkstack", "-i", data.to_str().unwrap()]);
    // Live, the fixture's own line ("heap grew by") shares standard output.
    let live: Vec<&str> = text
        .lines()
        .skip(1)
        .filter(|l| !l.starts_with("heap grew"))
        .collect();
    assert_eq!(replayed.lines().collect::<Vec<_>>(), live);
}

#[test]
fn ffaults_and_fmapfault_count_the_faults_of_each_file_exactly() {
    if !require_perf("ffaults") {
        return;
    }
    const F: u64 = 150;
    const A: u64 = 400;
    let prog = fixture("filefaults", Variant::NoFp);
    let comm = prog.file_name().unwrap().to_str().unwrap();
    let dir = scratch();
    let file = dir.path().join("mapped.bin");
    let file_s = file.to_str().unwrap();
    let data = dir.path().join("ff.data");
    let (f, a) = (F.to_string(), A.to_string());
    let _turn = recording_turn();
    let (text, err) = run_tool(&[
        "ffaults",
        "-m",
        TEST_RING_PAGES,
        "-w",
        data.to_str().unwrap(),
        "--",
        prog.to_str().unwrap(),
        file_s,
        &f,
        &a,
    ]);
    let rows = map_rows(&text);
    // Every copy-on-write fault of the file, each page once.
    assert!(rows.contains(&(file_s.to_string(), F)), "{text}\n{err}");
    // The anonymous pages, and whatever anonymous memory the loader and libc touched.
    let anon = rows.iter().find(|r| r.0 == "//anon").map_or(0, |r| r.1);
    assert!((A..A + 64).contains(&anon), "{text}");
    // The program's own image and libc are files too.
    assert!(rows.iter().any(|r| r.0 == prog.to_str().unwrap()), "{text}");
    assert!(rows.iter().any(|r| r.0.ends_with("/libc.so.6")), "{text}");
    assert!(err.contains(", lost 0"), "{err}");
    assert!(!err.contains("no recorded mapping"), "{err}");
    // The same from the recording; and per command, file mappings only.
    let (replayed, _) = run_tool(&["ffaults", "-i", data.to_str().unwrap()]);
    assert_eq!(map_rows(&replayed), rows);
    let (by_comm, _) = run_tool(&["fmapfault", "-i", data.to_str().unwrap()]);
    let rows = map_rows(&by_comm);
    assert!(
        rows.contains(&(format!("{comm}, {file_s}"), F)),
        "{by_comm}"
    );
    assert!(
        rows.iter()
            .all(|r| !r.0.contains("//anon") && !r.0.contains('[')),
        "{by_comm}"
    );
}

/// Live, fmapfault counts calls of filemap_fault (`filemap:mm_filemap_fault`, 6.14+) as
/// fmapfault.bt does, naming each file from the MMAP2 records' device and inode; kernels
/// without it count faults by address (as above).
#[test]
fn fmapfault_counts_each_filemap_fault_of_a_file() {
    if !require_perf("fmapfault") {
        return;
    }
    const F: u64 = 120;
    let prog = fixture("filefaults", Variant::NoFp);
    let comm = prog.file_name().unwrap().to_str().unwrap();
    let dir = scratch();
    let file = dir.path().join("cow.bin");
    let file_s = file.to_str().unwrap();
    let data = dir.path().join("fm.data");
    let _turn = recording_turn();
    let (text, err) = run_tool(&[
        "fmapfault",
        "-m",
        TEST_RING_PAGES,
        "-w",
        data.to_str().unwrap(),
        "--",
        prog.to_str().unwrap(),
        file_s,
        &F.to_string(),
        "50",
    ]);
    let rows = map_rows(&text);
    assert!(
        rows.contains(&(format!("{comm}, {file_s}"), F)),
        "{text}\n{err}"
    );
    assert!(!rows.iter().any(|r| r.0.contains("[dev ")), "{text}");
    let by_filemap = !err.contains("by its address instead");
    if by_filemap {
        // Every filemap_fault call the kernel recorded is in a row.
        let calls = perf_count(&data, comm, "filemap:mm_filemap_fault");
        let ours: u64 = rows
            .iter()
            .filter(|r| r.0.starts_with(&format!("{comm}, ")))
            .map(|r| r.1)
            .sum();
        assert_eq!(ours, calls as u64, "{text}");
    }
    let (replayed, _) = run_tool(&["fmapfault", "-i", data.to_str().unwrap()]);
    assert_eq!(map_rows(&replayed), rows);
}

#[test]
fn swapin_counts_the_swap_ins_the_kernel_counts() {
    if !require_perf("swapin") {
        return;
    }
    let must = std::env::var_os("MEMPERF_REQUIRE_PERF").is_some() && is_root();
    let dir = scratch();
    let Some(_swap) = Swapfile::on(dir.path(), 256 << 20) else {
        assert!(
            !must,
            "root cannot switch on a swap file in {}",
            dir.path().display()
        );
        return;
    };
    let Some(cg) = MemCgroup::with_swap("swap", 32 << 20) else {
        assert!(!must, "a memory cgroup is required for the swapin test");
        return;
    };
    let prog = fixture("swapper", Variant::NoFp);
    let comm = prog.file_name().unwrap().to_str().unwrap();
    let data = dir.path().join("swap.data");
    let _turn = recording_turn();
    let mut argv = vec![
        "swapin",
        "-m",
        TEST_RING_PAGES,
        "-w",
        data.to_str().unwrap(),
        "--",
    ];
    let inner = cg.exec_in(&[prog.to_str().unwrap(), "96"]);
    let inner_args: Vec<String> = std::iter::once(inner.get_program())
        .chain(inner.get_args())
        .map(|a| a.to_str().unwrap().to_string())
        .collect();
    argv.extend(inner_args.iter().map(String::as_str));
    let (text, err) = run_tool(&argv);
    let pid: u32 = text
        .lines()
        .find_map(|l| l.strip_prefix("pid "))
        .unwrap()
        .parse()
        .unwrap();
    let readback: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("majflt "))
        .unwrap()
        .parse()
        .unwrap();
    // 96 MiB read back through a 32 MiB limit: most of it came from swap.
    assert!(readback > 1000, "{text}");
    let counted: u64 = text
        .lines()
        .filter(|l| {
            l.split_whitespace().count() == 3
                && l.split_whitespace().nth(1) == Some(&pid.to_string())
        })
        .map(|l| l.split_whitespace().nth(2).unwrap().parse::<u64>().unwrap())
        .sum();
    let file_faults: u64 = err
        .split("swap-in faults; ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    // Every major fault of the reading back is a swap-in but for the program's own file
    // pages (counted apart); a few more swap-ins come from libc's own data before and
    // after it.
    assert!(
        counted + file_faults >= readback && counted <= readback + 64,
        "{counted} swap-in faults, {file_faults} file faults, the kernel counted {readback}: {text}\n{err}"
    );
    assert!(text.contains(&format!("{comm:<16} {pid:<7} ")), "{text}");
    assert!(
        text.contains("(swap-in faults; system-wide pswpin +"),
        "{text}"
    );
    // From the recording: the same rows (not the live pswpin line).
    let (replayed, _) = run_tool(&["swapin", "-T", "-i", data.to_str().unwrap()]);
    let rows = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| l.split_whitespace().count() == 3 && !l.starts_with('('))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(rows(&replayed), rows(&text), "{replayed}");
}

/// A tool replaying a recording refuses the options that choose what is traced live (`-p`
/// was ignored without a word), before it reads the file.
#[test]
fn live_only_options_are_refused_with_input() {
    for (args, option) in [
        (
            &["faults", "-i", "/nonexistent.data", "-p", "1"][..],
            "-p/--pid",
        ),
        (
            &["faults", "-i", "/nonexistent.data", "-C", "0"],
            "-C/--cpu",
        ),
        (
            &["oomkill", "-i", "/nonexistent.data", "-t", "1"],
            "-t/--tid",
        ),
        (
            &["swapin", "-i", "/nonexistent.data", "-d", "1"],
            "-d/--duration",
        ),
    ] {
        let o = run_memperf(args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(&format!("{option} chooses what is traced live")),
            "{args:?}: {err}"
        );
    }
}

/// With `-f` or `--flamegraph -`, standard output is the data alone: the banner and the
/// traced program's own line (`heap grew by ...`) go to standard error.
#[test]
fn folded_and_svg_on_standard_output_keep_the_banner_and_the_programs_lines_out() {
    if !require_perf("brkstack -f") {
        return;
    }
    const N: u64 = 16;
    let prog = fixture("brk", Variant::NoFp);
    let n = N.to_string();
    let _turn = recording_turn();
    for tool in ["brkstack", "faults"] {
        let (folded, err) = run_tool(&[
            tool,
            "-m",
            TEST_RING_PAGES,
            "-f",
            "--",
            prog.to_str().unwrap(),
            &n,
        ]);
        for line in folded.lines() {
            let (stack, count) = line.rsplit_once(' ').unwrap_or(("", ""));
            assert!(
                stack.contains(';') && count.parse::<u64>().is_ok(),
                "{tool}: not a folded line: `{line}` in:\n{folded}"
            );
        }
        assert!(
            err.contains(&format!("heap grew by {}", N * 8192)),
            "{tool}: {err}"
        );
        assert!(err.contains("Hit Ctrl-C to end."), "{tool}: {err}");
        if tool == "brkstack" {
            let line = folded
                .lines()
                .find(|l| l.contains(";main;brk_level1;grow_heap;"))
                .unwrap_or_default();
            assert!(line.ends_with(&format!(" {N}")), "{folded}");
        }
    }
    let o = run_memperf(&[
        "brkstack",
        "-m",
        TEST_RING_PAGES,
        "--flamegraph",
        "-",
        "--",
        prog.to_str().unwrap(),
        &n,
    ]);
    let svg = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(svg.trim_start().starts_with("<?xml"), "{svg}");
    assert!(svg.trim_end().ends_with("</svg>"), "{svg}");
    assert!(
        svg.contains("grow_heap") && !svg.contains("heap grew"),
        "{svg}"
    );
}

/// The fixture's `moved START-END pages N` line: the mapping mremap moved and the pages it
/// touched there.
fn moved_mapping(out: &str) -> (String, u64) {
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("moved "))
        .unwrap_or_else(|| panic!("no `moved` line in {out}"));
    let mut words = line.split_whitespace();
    let range = words.next().unwrap().to_string();
    let pages = words.nth(1).unwrap().parse().unwrap();
    (range, pages)
}

/// How many of the samples `perf script` reads in `data` have their address in `range`
/// (`0xSTART-0xEND`) and in a mapping perf names `dso`.
fn perf_addrs_in(data: &std::path::Path, range: &str, dso: &str) -> (u64, String) {
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    let (start, end) = range.split_once('-').unwrap();
    let (start, end) = (hex(start), hex(end));
    let o = Command::new("perf")
        .args(["script", "-F", "addr,dso", "-i"])
        .arg(data)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let n = text
        .lines()
        .filter_map(|l| l.trim().split_once(' '))
        .filter(|(a, d)| {
            let a = u64::from_str_radix(a, 16).unwrap_or(0);
            (start..end).contains(&a) && d.trim() == format!("({dso})")
        })
        .count() as u64;
    (
        n,
        format!(
            "{}{}",
            text.lines().take(5).collect::<Vec<_>>().join("\n"),
            stderr(&o)
        ),
    )
}

/// mremap moves a mapping without an MMAP2 record: the recorder follows the move through
/// mremap's tracepoints and writes the MMAP2 record of the mapping at its new place, so
/// each fault in the moved memory is filed under its anonymous mapping there, by `report
/// --by mapping`, by perf's own `perf script`, by `ffaults` live and `ffaults -i`, exactly
/// as many as the fixture touched pages (on main `report` filed them under `[unmapped]`,
/// perf under `[unknown]`, and ffaults showed them nowhere).
#[test]
fn faults_in_memory_mremap_moved_are_filed_under_its_mapping() {
    if !require_perf("mremap") || !require_perf_tool("mremap") {
        return;
    }
    let prog = fixture("mremapfaults", Variant::NoFp);
    let dir = scratch();
    let data = dir.path().join("mremap.data");
    // Frame-pointer chains, not 8 KiB stack copies: the test is of mappings, and 16,384
    // copies outgrow the test ring when a parallel test slows the reader (CI lost 809).
    let o = record(
        &data,
        &["-e", "page-faults", "--call-graph", "fp"],
        &prog,
        &[],
    );
    let (range, pages) = moved_mapping(&String::from_utf8_lossy(&o.stdout));
    assert_eq!(pages, 16384);
    let (by, _) = run_tool(&["report", "-i", data.to_str().unwrap(), "--by", "mapping"]);
    let row = by
        .lines()
        .find(|l| l.ends_with(&format!("//anon {range}")))
        .unwrap_or_else(|| panic!("no row of //anon {range}:\n{by}"));
    let n: u64 = row.split_whitespace().next().unwrap().parse().unwrap();
    assert_eq!(n, pages, "{by}");
    assert!(!by.contains("[no mapping recorded]"), "{by}");
    // No report lists the mremap events memperf added; the file holds none of them.
    assert!(!by.contains("mremap_e"), "{by}");
    assert!(!stderr(&o).contains("mremap_e"), "{}", stderr(&o));
    let (perf_n, perf_out) = perf_addrs_in(&data, &range, "//anon");
    assert_eq!(perf_n, pages, "{perf_out}");

    let ff = dir.path().join("ff.data");
    let _turn = recording_turn();
    let (live, err) = run_tool(&[
        "ffaults",
        "-m",
        TEST_RING_PAGES,
        "-w",
        ff.to_str().unwrap(),
        "--",
        prog.to_str().unwrap(),
    ]);
    let anon = map_rows(&live)
        .iter()
        .find(|r| r.0 == "//anon")
        .map_or(0, |r| r.1);
    // The moved pages, and the few anonymous pages the loader and libc touch.
    assert!((pages..pages + 64).contains(&anon), "{live}\n{err}");
    assert!(!err.contains("no recorded mapping"), "{err}");
    let (replayed, err) = run_tool(&["ffaults", "-i", ff.to_str().unwrap()]);
    assert_eq!(map_rows(&replayed), map_rows(&live), "{err}");
    assert!(!err.contains("no recorded mapping"), "{err}");
}

/// A recording killed (SIGKILL) after the fixture's faults: the mremap events stay out of
/// the file, so perf reads it up to its last checkpoint (it could not read a killed file
/// that held tracepoints, whose formats are written at the end), and attributes every
/// fault in the moved memory to it, as `memperf report` does.
#[test]
fn a_killed_recording_of_memory_mremap_moved_reads_in_perf_with_its_mapping() {
    use std::io::BufRead;
    if !require_perf("killed mremap") || !require_perf_tool("killed mremap") {
        return;
    }
    let prog = fixture("mremapfaults", Variant::NoFp);
    let dir = scratch();
    let data = dir.path().join("killed.data");
    let _turn = recording_turn();
    let mut rec = memperf()
        .args([
            "record",
            "-q",
            "-m",
            TEST_RING_PAGES,
            "-e",
            "page-faults",
            // Chains, not stack copies, as in the test above: no loss to spoil the count.
            "--call-graph",
            "fp",
            "-o",
        ])
        .arg(&data)
        .arg("--")
        .arg(&prog)
        .arg("hold")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(rec.stdout.take().unwrap());
    let mut text = String::new();
    while !text.contains("held pid") {
        assert!(out.read_line(&mut text).unwrap() > 0, "{text}");
    }
    let (range, pages) = moved_mapping(&text);
    let held: u32 = text
        .lines()
        .find_map(|l| l.strip_prefix("held pid "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Past a checkpoint (once a second) after the faults were drained.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    rec.kill().unwrap();
    let status = rec.wait().unwrap();
    let _ = Command::new("kill").arg(held.to_string()).status();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );

    let (by, _) = run_tool(&["report", "-i", data.to_str().unwrap(), "--by", "mapping"]);
    let row = by
        .lines()
        .find(|l| l.ends_with(&format!("//anon {range}")))
        .unwrap_or_else(|| panic!("no row of //anon {range}:\n{by}"));
    let n: u64 = row.split_whitespace().next().unwrap().parse().unwrap();
    assert_eq!(n, pages, "{by}");
    let (perf_n, perf_out) = perf_addrs_in(&data, &range, "//anon");
    assert_eq!(perf_n, pages, "{perf_out}");
}
