//! `memperf heap` against heaptrack, the heap profiler whose definitions it takes, on
//! `fixtures/heap.c`: a known peak made of known stacks, known temporaries and leaked bytes,
//! and a heap kept resident after frees of interleaved blocks, which the fixture counts
//! itself from its own page table. heaptrack runs the fixture under LD_PRELOAD; memperf
//! traces it with uprobes; each metric by allocating function must agree exactly. Rings of
//! 4096 pages per CPU hold a whole run, so that a loaded machine loses nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::*;

/// The fixture's allocating functions: the leaf of every allocation stack it makes.
const FUNCTIONS: [&str; 5] = ["keep", "temp", "pairs", "spike", "frag"];

fn have_heaptrack(what: &str) -> bool {
    let ok = Command::new("heaptrack_print")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        if std::env::var("MEMPERF_REQUIRE_PERF").as_deref() == Ok("1") {
            panic!("{what}: heaptrack is required (scripts/test.sh installs it)");
        }
        eprintln!("skipping {what}: heaptrack is not installed");
    }
    ok
}

/// Sums folded lines by the fixture function they end in (the leaf, or the last frame that
/// is one of the fixture's: heaptrack's lines end `fn (file);` with a trailing `;`).
fn by_function(folded: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in folded.lines() {
        let Some((stack, n)) = line.rsplit_once(' ') else {
            continue;
        };
        let n: u64 = n.trim().parse().unwrap();
        let leaf = stack
            .split(';')
            .map(|f| f.split(" (").next().unwrap().trim())
            .rfind(|f| FUNCTIONS.contains(f));
        if let Some(f) = leaf
            && n > 0
        {
            *out.entry(f.to_string()).or_insert(0) += n;
        }
    }
    out
}

/// heaptrack's figures for the fixture, by metric (`--flamegraph-cost-type`).
fn heaptrack_metrics(dir: &Path, program: &Path) -> BTreeMap<&'static str, BTreeMap<String, u64>> {
    let out = dir.join("ht");
    let o = Command::new("heaptrack")
        .arg("-o")
        .arg(&out)
        .arg(program)
        .output()
        .unwrap();
    assert!(o.status.success(), "heaptrack: {}", stderr(&o));
    let data = dir.join("ht.zst");
    let data = if data.exists() {
        data
    } else {
        dir.join("ht.gz")
    };
    let mut all = BTreeMap::new();
    for metric in ["peak", "temporary", "leaked", "allocations"] {
        let stacks = dir.join(format!("{metric}.txt"));
        let o = Command::new("heaptrack_print")
            .arg(&data)
            .args(["--flamegraph-cost-type", metric, "-F"])
            .arg(&stacks)
            .output()
            .unwrap();
        assert!(o.status.success(), "heaptrack_print: {}", stderr(&o));
        all.insert(
            metric,
            by_function(&std::fs::read_to_string(&stacks).unwrap()),
        );
    }
    all
}

#[test]
fn peak_temporary_leaked_and_allocations_by_stack_agree_with_heaptrack() {
    if !require_perf("heap vs heaptrack") || !have_heaptrack("heap vs heaptrack") {
        return;
    }
    let dir = scratch();
    let program = fixture("heap", Variant::NoFp);
    let heaptrack = heaptrack_metrics(dir.path(), &program);
    let _turn = recording_turn();
    for (metric, option) in [
        ("peak", "peak"),
        ("temporary", "temporary"),
        ("leaked", "leaked"),
        ("allocations", "allocations"),
    ] {
        let o = memperf()
            .args(["heap", "--folded", "--metric", option, "-m", "4096", "--"])
            .arg(&program)
            .output()
            .unwrap();
        assert!(o.status.success(), "memperf heap: {}", stderr(&o));
        let ours = by_function(&String::from_utf8_lossy(&o.stdout));
        assert_eq!(
            ours,
            heaptrack[metric],
            "{metric} by function: memperf (left) and heaptrack (right); memperf said: {}",
            stderr(&o)
        );
    }
    // The fixture's own figures (its header), which heaptrack's must also be.
    assert_eq!(heaptrack["peak"].values().sum::<u64>(), 4_100_000);
    assert_eq!(heaptrack["leaked"].values().sum::<u64>(), 1_033_817);
}

/// The text report's `  NAME  ...` summary line.
fn summary_line(text: &str, name: &str) -> String {
    // A row wrapped at 80 columns, its continuation lines joined again.
    unwrapped(text)
        .into_iter()
        .find(|l| l.trim_start().starts_with(name))
        .unwrap_or_else(|| panic!("no {name} line in:\n{text}"))
}

#[test]
fn retained_pages_profiles_and_timeline_of_one_run() {
    if !require_perf("heap retained") {
        return;
    }
    let dir = scratch();
    let program = fixture("heap", Variant::Fp);
    let (svg, csv, pb) = (
        dir.path().join("t.svg"),
        dir.path().join("t.csv"),
        dir.path().join("h.pb.gz"),
    );
    let _turn = recording_turn();
    let o = memperf()
        .args(["heap", "-m", "4096", "--timeline"])
        .arg(&svg)
        .arg("--timeline-csv")
        .arg(&csv)
        .arg("--pprof")
        .arg(&pb)
        .arg("--")
        .arg(&program)
        .output()
        .unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(o.status.success(), "memperf heap: {err}");
    // The fixture counted its retained pages from its own page table, while it held still.
    let truth = err
        .lines()
        .find_map(|l| l.strip_prefix("retained "))
        .unwrap_or_else(|| panic!("no fixture line in:\n{err}"));
    let (retained, resident) = truth.split_once(" resident ").unwrap();
    let line = summary_line(&out, "retained");
    assert!(
        line.contains(&format!("of the heap's {resident} resident pages"))
            && line.contains(&format!("and {retained} (")),
        "fixture: {truth}; memperf: {line}"
    );
    assert!(summary_line(&out, "peak").contains("(4100000 B)"), "{out}");
    assert!(
        summary_line(&out, "leaked").contains("(1033817 B) in 111 allocations"),
        "{out}"
    );
    // The timeline's highest live point is the peak, marked.
    let csv = std::fs::read_to_string(&csv).unwrap();
    let top = csv
        .lines()
        .skip(1)
        .filter_map(|l| l.split(',').nth(1)?.parse::<u64>().ok())
        .max();
    assert_eq!(top, Some(4_100_000), "{csv}");
    assert!(
        csv.lines()
            .skip(1)
            .any(|l| l.split(',').nth(2).is_some_and(|r| !r.is_empty()))
    );
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(
        svg.contains("<g id=\"peak\">") && svg.contains(">peak 3.9 MiB at "),
        "{svg}"
    );
    // pprof: go tool pprof reads the sample types Go's heap profiles name.
    if have_go() {
        let inuse = go_pprof(&pb, &["-top", "-sample_index=inuse_space"]);
        assert!(
            pprof_flat(&inuse, "frag").contains(&"960kB".to_string()),
            "{inuse}"
        );
        let alloc = go_pprof(&pb, &["-top", "-sample_index=alloc_objects"]);
        assert_eq!(pprof_flat(&alloc, "spike"), vec!["200"], "{alloc}");
    }
}

#[test]
fn a_recording_of_heap_gives_the_same_figures() {
    if !require_perf("heap -w / -i") {
        return;
    }
    let dir = scratch();
    let program = fixture("heap", Variant::Fp);
    let data = dir.path().join("heap.data");
    let _turn = recording_turn();
    let run = |args: &[&str]| {
        let mut c = memperf();
        c.arg("heap").args(args);
        let o = c.output().unwrap();
        assert!(o.status.success(), "memperf heap {args:?}: {}", stderr(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let live = run(&[
        "--folded",
        "-m",
        "4096",
        "-w",
        data.to_str().unwrap(),
        "--",
        program.to_str().unwrap(),
    ]);
    let replayed = run(&["--folded", "-i", data.to_str().unwrap()]);
    assert_eq!(by_function(&live), by_function(&replayed), "{live}");
    assert_eq!(by_function(&live).values().sum::<u64>(), 4_100_000);
}

#[test]
fn bad_heap_input_is_refused_clearly() {
    let dir = scratch();
    let junk = dir.path().join("junk.data");
    std::fs::write(&junk, b"not a recording").unwrap();
    let o = run_memperf(&["heap", "-i", junk.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("not a perf.data file"),
        "{}",
        stderr(&o)
    );
    let o = run_memperf(&["heap"]);
    assert!(stderr(&o).contains("needs a process"), "{}", stderr(&o));
}

#[test]
fn an_output_that_cannot_be_written_is_named() {
    if !require_perf("heap output error") {
        return;
    }
    for flag in ["--timeline", "--timeline-csv"] {
        let o = run_memperf(&["heap", flag, "/nonexistent/dir/out", "--", "true"]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("/nonexistent/dir/out"),
            "{flag}: {}",
            stderr(&o)
        );
    }
}

/// The bytes of a summary line's `(N B)`.
fn bytes_of(line: &str) -> u64 {
    let n = line.split('(').nth(1).and_then(|r| r.split(' ').next());
    n.and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no (N B) in {line}"))
}

#[test]
fn a_process_that_exited_holds_nothing_at_a_later_peak() {
    // The fixture run twice in a row by a shell: each run peaks at 4100000 B and leaves
    // 1033817 B live when it exits. The exit returns those to the system, so the second
    // run's peak does not stand on the first's leak (heaptrack, per process, says 4100000
    // for each); both leaks are still reported.
    if !require_perf("heap exited process") {
        return;
    }
    let program = fixture("heap", Variant::NoFp);
    let script = format!("{0} 2>/dev/null; {0} 2>/dev/null", program.display());
    let _turn = recording_turn();
    let o = memperf()
        .args(["heap", "-m", "4096", "--call-graph", "fp", "--", "sh", "-c"])
        .arg(&script)
        .output()
        .unwrap();
    assert!(o.status.success(), "memperf heap: {}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let peak = bytes_of(&summary_line(&out, "peak"));
    assert!(
        (4_100_000..4_100_000 + 1_033_817).contains(&peak),
        "peak {peak}:\n{out}"
    );
    assert!(
        bytes_of(&summary_line(&out, "leaked")) >= 2 * 1_033_817,
        "{out}"
    );
    // The shell's first run is a child of it (another pid): its allocations are in the
    // figures, its resident pages are not read, and stderr says so.
    let err = joined(&stderr(&o));
    assert!(
        err.contains(" allocated too (pids ") && err.contains("are not measured"),
        "{err}"
    );
}

/// The states `fixtures/heapsteps.c` passes through, call by call: (peak, live bytes, live
/// blocks) after each of its allocator calls, in order (its header's table).
fn heapsteps_states() -> Vec<(u64, u64, u64)> {
    let calls = std::iter::repeat_n(100_000i64, 10)
        .chain(std::iter::repeat_n(100_000, 30))
        .chain(std::iter::repeat_n(-100_000, 30))
        .chain(std::iter::repeat_n(-100_000, 5));
    let (mut peak, mut live, mut blocks) = (0u64, 0u64, 0u64);
    let mut states = vec![(0, 0, 0)];
    for c in calls {
        live = live.checked_add_signed(c).unwrap();
        blocks = if c > 0 { blocks + 1 } else { blocks - 1 };
        peak = peak.max(live);
        states.push((peak, live, blocks));
    }
    states
}

/// A report's (peak, live bytes, live blocks): its `peak` and `leaked` lines.
fn report_state(report: &str) -> (u64, u64, u64) {
    let leaked = summary_line(report, "leaked");
    let blocks = leaked
        .split(" in ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no block count in {leaked}"));
    (
        bytes_of(&summary_line(report, "peak")),
        bytes_of(&leaked),
        blocks,
    )
}

#[test]
fn interval_reports_follow_the_programs_own_state() {
    // Three phases held 1.5 s each, reports every 0.3 s: every report is a state the fixture
    // passed through (never one it did not), later reports never go back, and each phase's
    // state, which the fixture prints from its own sums, is reported while it holds.
    if !require_perf("heap interval reports") {
        return;
    }
    let program = fixture("heapsteps", Variant::NoFp);
    let _turn = recording_turn();
    let o = memperf()
        .args(["heap", "--interval", "0.3", "-m", "1024", "--"])
        .arg(&program)
        .arg("1500")
        .output()
        .unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(o.status.success(), "memperf heap: {err}");
    let mut reports: Vec<&str> = out.split("\n[").collect();
    let last = reports.pop().unwrap();
    assert!(last.contains("] Heap at the end:"), "{out}");
    assert!(
        reports.len() >= 6,
        "{} interval reports:\n{out}",
        reports.len()
    );
    let states = heapsteps_states();
    let mut at = 0;
    let mut seen = Vec::new();
    for r in &reports {
        assert!(r.contains("] Heap so far:"), "{r}");
        let s = report_state(r);
        let i = states[at..]
            .iter()
            .position(|x| *x == s)
            .unwrap_or_else(|| {
                panic!(
                    "{s:?} is no state the fixture had since {:?}:\n{out}",
                    states[at]
                )
            });
        at += i;
        seen.push(s);
    }
    for phase in err.lines().filter_map(|l| l.strip_prefix("phase ")) {
        let n: Vec<u64> = phase.split(' ').filter_map(|w| w.parse().ok()).collect();
        assert!(
            seen.contains(&(n[0], n[1], n[2])),
            "phase {phase} in no report:\n{out}"
        );
    }
    assert_eq!(
        err.lines().filter(|l| l.starts_with("phase ")).count(),
        3,
        "{err}"
    );
    assert_eq!(report_state(last), (4_000_000, 500_000, 5), "{last}");
    // COUNT ends the run after that many reports, the last of them the final one (leak's).
    let o = memperf()
        .args(["heap", "-m", "1024", "0.3", "2", "--"])
        .arg(&program)
        .arg("1500")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "memperf heap: {}", stderr(&o));
    assert_eq!(out.matches("] Heap so far:").count(), 2, "{out}");
    assert!(!out.contains("Heap at the end"), "{out}");
}

/// The seconds of `at X s` (or `in X s`) in a summary line.
fn seconds_after(line: &str, word: &str) -> f64 {
    line.split_once(&format!(" {word} "))
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no `{word} X s` in {line}"))
}

/// Attached with `-p` to a process that allocated 2,000,000 B before and then waits: its
/// times count from the attach (they counted from the first call seen, or from the boot
/// when there was none), and the pages of the blocks it never saw allocated are not called
/// free memory the allocator keeps (they are live: `fixtures/heapattach.c` keeps them).
#[test]
fn attached_with_p_times_count_from_the_attach_and_unseen_blocks_are_not_called_free() {
    if !require_perf("heap -p") {
        return;
    }
    let _turn = recording_turn();
    let mut target = Command::new(fixture("heapattach", Variant::Fp))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    BufReader::new(target.stdout.take().unwrap())
        .read_line(&mut ready)
        .unwrap();
    assert_eq!(ready, "ready\n");
    let mut heap = memperf()
        .args(["heap", "-m", "1024", "-p", &target.id().to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let err = heap.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(err).lines() {
            let Ok(line) = line else { break };
            all.push_str(&line);
            all.push('\n');
            if line.starts_with("Tracing the heap of pid") {
                let _ = tx.send(());
            }
        }
        all
    });
    if rx.recv_timeout(Duration::from_secs(60)).is_err() {
        let _ = target.kill();
        panic!("memperf never attached:\n{}", reader.join().unwrap());
    }
    target.stdin.take().unwrap().write_all(b"go\n").unwrap();
    assert!(target.wait().unwrap().success());
    let mut out = String::new();
    heap.stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let status = heap.wait().unwrap();
    let err = reader.join().unwrap();
    assert!(status.success(), "{err}");
    // The spike came a second after `go`, which came after the attach.
    let peak = summary_line(&out, "peak");
    assert!(peak.contains("(1000000 B)"), "{out}");
    let peak_at = seconds_after(&peak, "at");
    let run = seconds_after(&summary_line(&out, "HEAP:"), "in");
    assert!(
        (1.0..30.0).contains(&peak_at) && peak_at <= run && run < 30.0,
        "peak at {peak_at} s of {run} s:\n{out}"
    );
    let retained = summary_line(&out, "retained");
    assert!(
        retained.contains("blocks allocated before memperf attached")
            && !retained.contains("not a leak"),
        "{out}"
    );
}

/// The numbers of the summary's `traced A allocations and F frees (B frees of blocks
/// allocated before tracing began); O outstanding` (its lines joined).
fn traced(err: &str) -> Vec<u64> {
    let line = joined(err)
        .lines()
        .find(|l| l.starts_with("memperf: traced "))
        .unwrap_or_else(|| panic!("no traced line in:\n{err}"))
        .to_string();
    line.split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .take(4)
        .collect()
}

/// `fixtures/allocs.c` makes every kind of allocator call: realloc chains and a
/// realloc(q, 0) (glibc frees q through the probed free: once, not twice), posix_memalign
/// results stored into a local variable and into a global array, mmap, munmap, mremap, and
/// a block malloc maps for itself and free unmaps (the allocator's own). Read back from its
/// `-w` recording, it gives the live run's figures: the results stored in the stack copied
/// at posix_memalign's return are in the recording, the allocator's own mappings are known
/// as such, the run lasts until the process's exit. Only the three results stored outside
/// the stack (the global array) cannot be read back: said, and those blocks left out.
#[test]
fn a_recording_of_every_kind_of_allocator_call_gives_the_live_figures() {
    if !require_perf("heap -w / -i of every allocator call") {
        return;
    }
    let dir = scratch();
    let program = fixture("allocs", Variant::NoFp);
    let data = dir.path().join("allocs.data");
    let _turn = recording_turn();
    let run = |args: &[&str]| {
        let o = memperf().arg("heap").args(args).output().unwrap();
        let (out, err) = (String::from_utf8_lossy(&o.stdout), stderr(&o));
        assert!(o.status.success(), "memperf heap {args:?}: {err}");
        (out.into_owned(), joined(&err))
    };
    let (live, live_err) = run(&[
        "-m",
        "1024",
        "-w",
        data.to_str().unwrap(),
        "--",
        program.to_str().unwrap(),
    ]);
    let (replayed, replayed_err) = run(&["-i", data.to_str().unwrap()]);
    for err in [&live_err, &replayed_err] {
        assert!(
            err.contains("2 mmap/munmap/mremap calls made by the allocator itself were left out"),
            "{err}"
        );
        assert!(
            err.contains("4 posix_memalign results read from the stack copied at the return"),
            "{err}"
        );
    }
    assert!(
        replayed_err.contains("3 posix_memalign results are not in the recording"),
        "{replayed_err}"
    );
    // Live: nothing freed was allocated before tracing began. Read back: the two blocks of
    // the global array that were freed are unknown, and the three left out.
    let [allocs, frees, before, outstanding] = traced(&live_err)[..] else {
        panic!("{live_err}")
    };
    assert_eq!(before, 0, "{live_err}");
    assert_eq!(
        traced(&replayed_err),
        vec![allocs - 3, frees, 2, outstanding - 1],
        "{replayed_err}"
    );
    let leaked = |out: &str| bytes_of(&summary_line(out, "leaked"));
    assert_eq!(
        leaked(&replayed),
        leaked(&live) - 3000,
        "{live}\n{replayed}"
    );
    assert_eq!(
        summary_line(&live, "peak"),
        summary_line(&replayed, "peak"),
        "{live}\n{replayed}"
    );
    // The fixture holds still 700 ms after its last call: the run lasts past it.
    for out in [&live, &replayed] {
        let run = seconds_after(&summary_line(out, "HEAP:"), "in");
        assert!((0.7..30.0).contains(&run), "{out}");
    }
    // perf report reads it: it sorted a file of tracepoints alone by their payload, which
    // memperf's probes do not keep, and perf 6.1 crashed (SIGSEGV) on every `heap -w` file.
    if require_perf_tool("perf report of a heap recording") {
        let o = Command::new("perf")
            .args(["report", "--stdio", "-i"])
            .arg(&data)
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "perf report: {:?}\n{}",
            o.status,
            stderr(&o)
        );
        assert!(out.contains("aligned"), "{out}");
    }
    // Cut short (a copy that stopped, a full disk: the feature sections that name the
    // events are gone), what is left is read: the records at the data section's start
    // name the events, and the attrs tell memperf's unwinds from frame-pointer walks.
    let bytes = std::fs::read(&data).unwrap();
    let cut = dir.path().join("cut.data");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let (_, cut_err) = run(&["-i", cut.to_str().unwrap()]);
    assert!(cut_err.contains("is cut short"), "{cut_err}");
    assert!(traced(&cut_err)[0] > 0, "{cut_err}");
    assert!(!cut_err.contains("frame pointers"), "{cut_err}");
}
