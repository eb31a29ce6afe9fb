//! `memperf rss` and `memperf leak --faults` against workloads with known resident pages:
//! three buffers from three named functions touched 100%, 50% and 0% (served by mmap above
//! glibc's M_MMAP_THRESHOLD, and by the brk heap below it), a buffer touched by another
//! thread, and memory no allocator call gives (an anonymous mapping, a file, the break).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::*;

/// Ring pages per CPU: room for a whole run, so that a busy machine loses nothing.
const RING: &str = "4096";

/// One allocation stack of the text report.
#[derive(Debug, Clone, Default)]
struct Row {
    pages: u64,
    live: u64,
    untouched: u64,
    frames: Vec<String>,
    /// (pages, frames leaf first) of each toucher.
    touchers: Vec<(u64, Vec<String>)>,
}

/// The report's rows, and the faults outside allocations by mapping.
fn parse(text: &str) -> (Vec<Row>, HashMap<String, u64>) {
    let mut rows: Vec<Row> = Vec::new();
    let mut outside = HashMap::new();
    let mut in_outside = false;
    for line in text.lines() {
        if line.starts_with("Page faults outside every allocation") {
            in_outside = true;
        } else if in_outside && let Some(rest) = line.strip_prefix('\t') {
            let (n, name) = rest.split_once(" faults in ").unwrap();
            outside.insert(name.to_string(), n.parse().unwrap());
        } else if let Some(rest) = line.strip_prefix("\t\t\t") {
            let t = rows.last_mut().unwrap().touchers.last_mut().unwrap();
            t.1.push(rest.to_string());
        } else if let Some(rest) = line.strip_prefix("\t\ttouched ") {
            let n = rest.split_whitespace().next().unwrap().parse().unwrap();
            rows.last_mut().unwrap().touchers.push((n, Vec::new()));
        } else if let Some(rest) = line.strip_prefix("\t\t") {
            rows.last_mut().unwrap().frames.push(rest.to_string());
        } else if let Some(rest) = line.strip_prefix('\t')
            && rest.contains(" pages resident (")
        {
            let w: Vec<&str> = rest.split_whitespace().collect();
            // `N pages resident (K KiB) in L live allocations of B bytes (U faulted in no page); ...`
            rows.push(Row {
                pages: w[0].parse().unwrap(),
                live: w[6].parse().unwrap(),
                untouched: w[12].trim_start_matches('(').parse().unwrap(),
                ..Row::default()
            });
        }
    }
    (rows, outside)
}

/// The one row whose stack names `frame`.
fn row<'a>(rows: &'a [Row], frame: &str, text: &str) -> &'a Row {
    let found: Vec<&Row> = rows
        .iter()
        .filter(|r| r.frames.iter().any(|f| f == frame))
        .collect();
    assert_eq!(found.len(), 1, "one stack naming {frame} in:\n{text}");
    found[0]
}

/// The fixture's `NAME new=N` line: the pages its touch made resident (mincore).
fn fixture_new(text: &str, name: &str) -> u64 {
    let prefix = format!("{name} new=");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` line in:\n{text}"))
        .parse()
        .unwrap()
}

/// `memperf ARGS -c "PROG ARGS"`: its standard output (the fixture's lines with it).
fn run(memperf_args: &[&str], prog: &Path, args: &str) -> (String, String) {
    let _turn = recording_turn();
    let cmd = format!("{} {args}", prog.display());
    let mut all: Vec<&str> = memperf_args.to_vec();
    all.extend(["-m", RING, "-c", &cmd]);
    let o = run_memperf(&all);
    let err = stderr(&o);
    assert!(o.status.success(), "memperf {all:?} failed: {err}");
    assert!(!err.contains("lost"), "events were lost: {err}");
    (String::from_utf8(o.stdout).unwrap(), err)
}

#[test]
fn three_buffers_touched_100_50_and_0_percent_give_exact_pages_per_allocation_stack() {
    if !require_perf("rss three buffers") {
        return;
    }
    for variant in Variant::ALL {
        // 256 pages: above M_MMAP_THRESHOLD, glibc maps each buffer on its own.
        let (out, err) = run(&["rss", "-T", "100"], &fixture("rss", variant), "three 256");
        let (rows, _) = parse(&out);
        let full = row(&rows, "alloc_full", &out);
        let half = row(&rows, "alloc_half", &out);
        let none = row(&rows, "alloc_none", &out);
        assert_eq!(
            (full.pages, half.pages, none.pages),
            (256, 128, 0),
            "{variant:?}:\n{out}"
        );
        assert_eq!(
            (fixture_new(&out, "full"), fixture_new(&out, "half")),
            (256, 128)
        );
        assert_eq!((full.live, half.live, none.live), (1, 1, 1));
        assert_eq!(
            (full.untouched, half.untouched, none.untouched),
            (0, 0, 1),
            "the untouched buffer is shown as such:\n{out}"
        );
        for r in [full, half, none] {
            assert_eq!(r.frames.get(1).map(String::as_str), Some("main"), "{out}");
        }
        assert!(err.contains(" 0 without an address"), "{err}");
    }
}

#[test]
fn heap_served_buffers_count_exactly_the_pages_their_touch_faulted() {
    if !require_perf("rss heap buffers") {
        return;
    }
    // 8 pages: below M_MMAP_THRESHOLD, from the brk heap, where malloc's own writes (chunk
    // headers, the top chunk) fault some pages first: those are the heap's, not the buffer's.
    let (out, _) = run(
        &["rss", "-T", "100"],
        &fixture("rss", Variant::NoFp),
        "three 8",
    );
    let (rows, outside) = parse(&out);
    for (func, name) in [
        ("alloc_full", "full"),
        ("alloc_half", "half"),
        ("alloc_none", "none"),
    ] {
        assert_eq!(
            row(&rows, func, &out).pages,
            fixture_new(&out, name),
            "{func}:\n{out}"
        );
    }
    assert!(fixture_new(&out, "full") >= 7, "{out}");
    assert_eq!(row(&rows, "alloc_none", &out).untouched, 1);
    assert!(outside.get("[heap]").copied().unwrap_or(0) > 0, "{out}");
}

#[test]
fn memory_allocated_in_one_function_and_touched_by_another_thread_is_the_allocators() {
    if !require_perf("rss thread") {
        return;
    }
    let (out, _) = run(
        &["rss", "--touchers"],
        &fixture("rss", Variant::NoFp),
        "thread 100",
    );
    let (rows, _) = parse(&out);
    let shared = row(&rows, "alloc_shared", &out);
    assert_eq!(shared.pages, 100, "{out}");
    assert_eq!(fixture_new(&out, "shared"), 100);
    // Every page was touched from the other thread, through memset.
    let total: u64 = shared.touchers.iter().map(|t| t.0).sum();
    assert_eq!(total, 100, "{out}");
    for (_, frames) in &shared.touchers {
        assert!(
            frames.iter().any(|f| f == "toucher_thread"),
            "a toucher without toucher_thread: {frames:?}\n{out}"
        );
        assert!(!frames.iter().any(|f| f == "alloc_shared"), "{out}");
    }
}

#[test]
fn faults_outside_allocations_are_filed_by_mapping() {
    if !require_perf("rss other") {
        return;
    }
    let (out, err) = run(&["rss"], &fixture("rss", Variant::NoFp), "other 10");
    let (_, outside) = parse(&out);
    let path = out
        .lines()
        .find_map(|l| l.strip_prefix("file ").filter(|p| p.starts_with('/')))
        .unwrap_or_else(|| panic!("no file line:\n{out}"));
    // The private file mapping: one write fault per page, nothing else touches the file.
    assert_eq!(outside.get(path), Some(&10), "{out}");
    assert!(outside.get("//anon").copied().unwrap_or(0) >= 10, "{out}");
    assert!(outside.get("[heap]").copied().unwrap_or(0) >= 10, "{out}");
    let counted: u64 = outside.values().sum();
    assert!(
        err.contains(&format!(" {counted} outside every allocation")),
        "the summary counts what the report files: {err}\n{out}"
    );
}

#[test]
fn leak_faults_adds_the_resident_pages_of_each_outstanding_stack() {
    if !require_perf("leak --faults") {
        return;
    }
    let (out, _) = run(
        &["leak", "--faults", "-o", "0", "-T", "100"],
        &fixture("rss", Variant::NoFp),
        "three 256",
    );
    let mut found = HashMap::new();
    let mut last: Option<(u64, u64)> = None;
    for line in out.lines() {
        if let Some(rest) = line.strip_prefix('\t')
            && rest.contains("bytes in")
        {
            let w: Vec<&str> = rest.split_whitespace().collect();
            // `B bytes in N allocations from stack, P pages resident (K KiB), U allocations faulted in no page`
            last = Some((w[7].parse().unwrap(), w[12].parse().unwrap()));
        } else if let Some(frame) = line.strip_prefix("\t\t")
            && let Some(name) = frame.split('\t').nth(1)
            && let Some(func) = name.split('+').next()
            && func.starts_with("alloc_")
        {
            found.insert(func.to_string(), last.unwrap());
        }
    }
    assert_eq!(found.get("alloc_full"), Some(&(256, 0)), "{out}");
    assert_eq!(found.get("alloc_half"), Some(&(128, 0)), "{out}");
    assert_eq!(found.get("alloc_none"), Some(&(0, 1)), "{out}");
}

#[test]
fn folded_flamegraph_and_pprof_weigh_resident_bytes() {
    if !require_perf("rss outputs") {
        return;
    }
    let dir = scratch();
    let prog = fixture("rss", Variant::NoFp);
    let pb = dir.path().join("rss.pb.gz");
    let (out, _) = run(
        &["rss", "--folded", "--pprof", pb.to_str().unwrap()],
        &prog,
        "three 256",
    );
    let weight = |leaf: &str| -> Option<u64> {
        out.lines()
            .find(|l| l.rsplit_once(' ').unwrap().0.ends_with(&format!(";{leaf}")))
            .map(|l| l.rsplit_once(' ').unwrap().1.parse().unwrap())
    };
    assert_eq!(weight("alloc_full"), Some(256 * 4096), "{out}");
    assert_eq!(weight("alloc_half"), Some(128 * 4096), "{out}");
    assert_eq!(
        weight("alloc_none"),
        None,
        "nothing resident, no line:\n{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.contains(";[outside allocations];//anon ")),
        "{out}"
    );

    let svg = dir.path().join("rss.svg");
    let (_, _) = run(
        &["rss", "--flamegraph", svg.to_str().unwrap()],
        &prog,
        "three 256",
    );
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("alloc_full") && text.contains("alloc_half"));
    assert!(!text.contains("alloc_none"), "a 0-byte frame is not drawn");

    if !have_go() {
        return;
    }
    let flat = |index: &str, func: &str| -> Vec<String> {
        // Bytes in bytes, whatever the total's scale; counts as they are.
        let unit = if index.ends_with("_space") {
            "B"
        } else {
            "minimum"
        };
        let top = go_pprof(&pb, &["-top", "-unit", unit, "-sample_index", index]);
        pprof_flat(&top, func)
    };
    assert_eq!(flat("resident_space", "alloc_full"), vec!["1048576B"]);
    assert_eq!(flat("resident_space", "alloc_half"), vec!["524288B"]);
    assert_eq!(flat("resident_pages", "alloc_full"), vec!["256"]);
    assert_eq!(flat("alloc_space", "alloc_none"), vec!["1048576B"]);
    assert_eq!(flat("inuse_space", "alloc_none"), vec!["1048576B"]);
    assert_eq!(flat("inuse_objects", "alloc_half"), vec!["1"]);
    // resident_space is the default sample type.
    let top = go_pprof(&pb, &["-top", "-unit", "B"]);
    assert_eq!(pprof_flat(&top, "alloc_full"), vec!["1048576B"], "{top}");
}

#[test]
fn bad_rss_input_gets_clear_errors() {
    let cases: &[(&[&str], &str)] = &[
        (&["rss"], "give -p PID or -- COMMAND"),
        (&["rss", "-p", "1", "--duration", "0"], "--duration 0"),
        (&["rss", "-c", "/nonexistent/prog"], "not found"),
        (&["rss", "-p", "999999999"], "999999999"),
        (&["leak", "--faults"], "--faults joins page faults"),
        (&["rss", "-i", "/nonexistent/r.data"], "No such file"),
        (&["rss", "-i", "Cargo.toml"], "not a perf.data file"),
        (&["rss", "-i", "r.data", "-p", "1"], "cannot be used with"),
    ];
    for (args, want) in cases {
        let o = run_memperf(args);
        let err = stderr(&o);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // A kernel thread has no user memory to join (kthreadd is pid 2 on Linux).
    if std::fs::read_to_string("/proc/2/comm").is_ok_and(|c| c.trim() == "kthreadd") {
        for tool in ["rss", "leak"] {
            let o = run_memperf(&[tool, "-p", "2"]);
            let err = stderr(&o);
            assert!(!o.status.success(), "{tool}: {err}");
            assert!(
                err.contains("process 2 (kthreadd) has no user memory: a kernel thread"),
                "{tool}: {err}"
            );
        }
    }
}

/// `mem report --by allocation` rows: (samples, the allocation stack's frames leaf first,
/// or the mapping outside allocations).
fn by_allocation_rows(text: &str) -> Vec<(u64, Vec<String>)> {
    let mut rows: Vec<(u64, Vec<String>)> = Vec::new();
    for line in text.lines() {
        if let Some(frame) = line.strip_prefix("\t\t") {
            rows.last_mut().unwrap().1.push(frame.to_string());
        } else if line.starts_with("  ") && line.contains('%') {
            let w: Vec<&str> = line.split_whitespace().collect();
            let place = w[5..].join(" ");
            let place = match place.strip_prefix("outside allocations: ") {
                Some(m) => vec![format!("outside:{m}")],
                None => Vec::new(),
            };
            rows.push((w[2].parse().unwrap(), place));
        }
    }
    rows
}

#[test]
fn rss_writes_a_recording_that_rss_i_and_mem_report_by_allocation_replay_to_the_same_pages() {
    if !require_perf("rss -w, mem report --by allocation") {
        return;
    }
    let dir = scratch();
    let file = dir.path().join("rss.data");
    let f = file.to_str().unwrap();
    let (out, err) = run(
        &["rss", "-T", "100", "-w", f],
        &fixture("rss", Variant::NoFp),
        "three 256",
    );
    assert!(err.contains(&format!("wrote `{f}`")), "{err}");
    // The live join's totals: pages faulted into allocations, faults outside them.
    // Wrapped at 80 columns: its lines joined again.
    let head = unwrapped(&out)
        .into_iter()
        .find(|l| l.starts_with("Resident memory by allocation stack:"))
        .unwrap();
    let num = |before: &str| -> u64 {
        let at = head.find(before).unwrap();
        head[..at]
            .split_whitespace()
            .last()
            .unwrap()
            .parse()
            .unwrap()
    };
    let (faults, inside, outside) = (
        num(" page faults,"),
        num(" pages ("),
        num(" faults outside them"),
    );
    let o = run_memperf(&["mem", "report", "--by", "allocation", "-i", f]);
    let report = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}", stderr(&o));
    let rows = by_allocation_rows(&report);
    let alloc = |func: &str| -> u64 {
        let found: Vec<_> = rows
            .iter()
            .filter(|r| r.1.first().map(String::as_str) == Some(func))
            .collect();
        assert!(found.len() <= 1, "{func}:\n{report}");
        let Some(r) = found.first() else { return 0 };
        assert_eq!(r.1.get(1).map(String::as_str), Some("main"), "{report}");
        r.0
    };
    // Every fault's address, from the file: the pages each named function's buffer
    // faulted in, as the live report and the fixture's mincore count them.
    assert_eq!(
        (
            alloc("alloc_full"),
            alloc("alloc_half"),
            alloc("alloc_none")
        ),
        (256, 128, 0),
        "{report}"
    );
    let sum = |outside: bool| -> u64 {
        rows.iter()
            .filter(|r| r.1.first().is_some_and(|p| p.starts_with("outside:")) == outside)
            .map(|r| r.0)
            .sum()
    };
    // No repeated faults on a page here (each page is written once): samples are pages.
    assert!(err.contains(" 0 repeated on a page"), "{err}");
    assert_eq!(
        (sum(false), sum(true)),
        (inside, outside),
        "{report}\n{out}"
    );
    assert!(
        report.contains(&format!(
            "({faults} samples: {inside} in allocations, {outside} outside them)"
        )),
        "{report}"
    );
    // --by mapping places the same faults by mapping alone: every fault is in a row.
    let o = run_memperf(&["mem", "report", "--by", "mapping", "-i", f]);
    assert!(o.status.success(), "{}", stderr(&o));
    let by_mapping = String::from_utf8_lossy(&o.stdout).into_owned();
    let placed: u64 = by_mapping
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum();
    assert_eq!(placed, faults, "{by_mapping}");
    // rss -i replays the same file into the same join: the live report, line for line.
    let o = run_memperf(&["rss", "-T", "100", "-i", f]);
    assert!(o.status.success(), "{}", stderr(&o));
    let replayed = String::from_utf8_lossy(&o.stdout).into_owned();
    let report_of = |text: &str| -> Vec<String> {
        text.lines()
            .skip_while(|l| !l.starts_with("Resident memory by allocation stack:"))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        report_of(&replayed),
        report_of(&out),
        "replayed:\n{replayed}\nlive:\n{out}"
    );
    // The same file cut short (a copy interrupted): both readers say so, neither panics.
    let cut = dir.path().join("cut.data");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    for args in [
        &["rss", "-i"][..],
        &["mem", "report", "--by", "allocation", "-i"][..],
    ] {
        let o = run_memperf(&[args, &[cut.to_str().unwrap()]].concat());
        let err = stderr(&o);
        assert!(err.contains("` is cut short: the last "), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // perf reads the file: every fault, with its address (the probes have none).
    if require_perf_tool("perf script of rss -w") {
        let o = std::process::Command::new("perf")
            .args(["script", "-F", "sw:event,addr", "-i", f])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let text = String::from_utf8_lossy(&o.stdout);
        let faults_seen = text.lines().filter(|l| l.contains("page-faults")).count();
        assert_eq!(faults_seen as u64, faults, "{text}");
    }
}

#[test]
fn rss_runs_the_command_after_double_dash_and_keeps_its_lines_out_of_folded_output() {
    if !require_perf("memperf rss -- CMD") {
        return;
    }
    let _turn = recording_turn();
    let prog = fixture("rss", Variant::NoFp);
    let prog = prog.to_str().unwrap();
    // The text report: the fixture's lines share standard output, as memleak's do.
    let o = run_memperf(&["rss", "-m", RING, "-T", "100", "--", prog, "three", "64"]);
    let (err, out) = (stderr(&o), String::from_utf8(o.stdout).unwrap());
    assert!(o.status.success(), "{err}");
    let (rows, _) = parse(&out);
    let full = row(&rows, "alloc_full", &out);
    assert_eq!(full.pages, fixture_new(&out, "full"), "{out}");
    // Folded: standard output is the stacks alone; the fixture's lines go to stderr.
    let o = run_memperf(&["rss", "-m", RING, "--folded", "--", prog, "three", "64"]);
    let (err, out) = (stderr(&o), String::from_utf8(o.stdout).unwrap());
    assert!(o.status.success(), "{err}");
    for line in out.lines() {
        let (stack, bytes) = line.rsplit_once(' ').unwrap_or(("", ""));
        assert!(
            stack.contains(';') && bytes.parse::<u64>().is_ok(),
            "not a folded line: `{line}` in:\n{out}"
        );
    }
    let pages = fixture_new(&err, "full");
    let page = 4096;
    assert!(
        out.lines()
            .any(|l| l.ends_with(&format!(";alloc_full {}", pages * page))),
        "{out}\n{err}"
    );
}

/// What each probe samples, as perf reads the recording: an allocation's entry carries its
/// stack (unwound, so a callchain in the file), free's entry only its registers. A stack
/// at free was never used (a freed block keeps its allocation's stack), and copying 8 KiB
/// of it at every free cost the traced thread as much as the allocation's copy.
#[test]
fn free_samples_its_pointer_and_no_stack() {
    if !require_perf("rss -w, perf evlist") || !require_perf_tool("perf evlist -v") {
        return;
    }
    let dir = scratch();
    let file = dir.path().join("rss.data");
    let f = file.to_str().unwrap();
    run(
        &["rss", "-w", f],
        &fixture("rss", Variant::NoFp),
        "three 256",
    );
    let o = std::process::Command::new("perf")
        .args(["evlist", "-v", "-i", f])
        .output()
        .unwrap();
    let v = String::from_utf8_lossy(&o.stdout);
    let attr = |probe: &str| -> String {
        v.lines()
            .find(|l| l.split(':').nth(1) == Some(probe))
            .unwrap_or_else(|| panic!("no `{probe}` event in:\n{v}"))
            .to_string()
    };
    let (malloc, free) = (attr("malloc"), attr("free"));
    assert!(malloc.contains("CALLCHAIN"), "{malloc}");
    assert!(!free.contains("CALLCHAIN"), "{free}");
    assert!(!free.contains("STACK_USER"), "{free}");
    assert!(free.contains("REGS_USER"), "{free}");
}

/// While a probed function runs, its return address on the stack is the kernel's uretprobe
/// trampoline (`[uprobes]`): fault stacks taken inside malloc ended there
/// (`mallocfaults;[uprobes];malloc;_int_malloc 289`), their callers lost, or went on by a
/// frame-pointer guess. The entry probe's copy, made before the takeover, holds the real
/// return address, and the unwind puts it back (`allocs::hijacked`): every fault stack
/// through malloc reaches `alloc_many` and `main` (`fixtures/mallocfaults.c`).
#[test]
fn fault_stacks_inside_a_probed_function_reach_its_callers() {
    if !require_perf("rss --touchers fault stacks inside malloc") {
        return;
    }
    let dir = scratch();
    let data = dir.path().join("rss.data");
    let prog = fixture("mallocfaults", Variant::NoFp);
    {
        let _turn = recording_turn();
        let o = run_memperf(&[
            "rss",
            "--touchers",
            "-w",
            data.to_str().unwrap(),
            "--",
            prog.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let o = run_memperf(&[
        "report",
        "-i",
        data.to_str().unwrap(),
        "--folded",
        "--event",
        "page-faults",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let folded = String::from_utf8_lossy(&o.stdout);
    // The trampoline's own page may take a fault (a leaf there is true); no stack goes on
    // past it.
    assert!(!folded.contains("[uprobes];"), "{folded}");
    let through_malloc: Vec<&str> = folded
        .lines()
        .filter(|l| {
            l.split(';')
                .any(|f| f == "malloc" || f.starts_with("malloc "))
        })
        .collect();
    let faults: u64 = through_malloc
        .iter()
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum();
    // 300 blocks of 5000 B: about 370 new heap pages, most first written by malloc.
    assert!(
        faults >= 200,
        "{faults} faults through malloc in:\n{folded}"
    );
    assert!(
        through_malloc
            .iter()
            .all(|l| l.contains(";main;alloc_many;malloc")),
        "{folded}"
    );
}
