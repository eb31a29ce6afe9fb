//! `-s N` of the allocation-tracing commands (leak, rss, heap): one stack copied in N, every
//! allocation and free still matched, and the per-stack outputs weighted by N. Checked on
//! `fixtures/sampled.c`, whose calls pick their stack and size from a fixed-seed generator
//! and which prints its own totals per allocating function: the weighted figures must be
//! within a few percent of those (leak, heap), or of the same run's exact text report as go
//! tool pprof reads the weighted profile (rss's resident bytes, which only the page tables
//! know). A free of an unsampled block matched to a sampled one
//! would show as too few outstanding bytes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;

use common::*;

const FUNCTIONS: [&str; 3] = ["small", "medium", "large"];
/// 32 MiB a CPU: the weighted figures are checked against exact ones, so no event may be
/// lost, and at 8 MiB a reader held off the CPU for a moment lost some in about 1 run in 6
/// (as at 9b1cf26: not the stack shedding's doing, which leaves stacks out but cannot make
/// a reader that is not running catch up).
const RING: &str = "8192";
/// One stack copied in five.
const SAMPLE: &str = "5";
/// The sampled figures' largest relative error: the fewest samples behind a figure are the
/// kept blocks of one function, 12,500 of which about 2,500 are sampled (a relative spread
/// of 2 % at one sigma); the draws are fixed, so a run's figures are too.
const TOLERANCE: f64 = 0.06;

/// The tracing runs one at a time: every call of the fixture traps, and three such runs
/// beside each other on a 2-core machine can outrun the reader, and a lost event would
/// spoil the exact figures the weighted ones are compared with (a full test run lost 190).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The fixture's own totals: function → (allocs, bytes, live, live_bytes).
fn truth(stderr: &str) -> BTreeMap<String, [u64; 4]> {
    let mut out = BTreeMap::new();
    for line in stderr.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.len() == 9 && FUNCTIONS.contains(&w[0]) && w[1] == "allocs" {
            let n = |i: usize| w[i].parse::<u64>().unwrap();
            out.insert(w[0].to_string(), [n(2), n(4), n(6), n(8)]);
        }
    }
    assert_eq!(out.len(), 3, "no totals from the fixture in:\n{stderr}");
    out
}

/// Folded lines summed by the fixture's allocating function (the leaf, or the frame below
/// an allocator leaf); anything else is kept under its own leaf.
fn by_function(folded: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in folded.lines() {
        let Some((stack, n)) = line.rsplit_once(' ') else {
            continue;
        };
        let frames: Vec<&str> = stack.split(';').collect();
        let name = frames
            .iter()
            .rev()
            .find(|f| FUNCTIONS.contains(f))
            .or(frames.last())
            .unwrap()
            .to_string();
        *out.entry(name).or_insert(0) += n.parse::<u64>().unwrap();
    }
    out
}

/// Runs memperf on the fixture; (folded stdout by function, the fixture's totals).
fn run(args: &[&str]) -> (BTreeMap<String, u64>, BTreeMap<String, [u64; 4]>) {
    let (got, truth, _) = run_env(args, &[]);
    (got, truth)
}

/// [`run`] with `env` set; its standard error too.
fn run_env(
    args: &[&str],
    env: &[(&str, &str)],
) -> (BTreeMap<String, u64>, BTreeMap<String, [u64; 4]>, String) {
    let prog = fixture("sampled", Variant::NoFp);
    let mut all = args.to_vec();
    all.extend(["-m", RING, "--folded", "--", prog.to_str().unwrap()]);
    let o = memperf()
        .args(&all)
        .envs(env.iter().copied())
        .output()
        .expect("run memperf");
    let err = stderr(&o);
    assert!(o.status.success(), "{all:?}: {err}");
    assert!(!err.contains("lost"), "{all:?} lost events: {err}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        !out.contains("[stack not sampled]"),
        "sampled outputs weight the sampled stacks instead of listing the others:\n{out}"
    );
    (by_function(&out), truth(&err), err)
}

#[track_caller]
fn assert_near(what: &str, got: u64, want: u64) {
    let err = (got as f64 - want as f64).abs() / want as f64;
    assert!(
        err <= TOLERANCE,
        "{what}: weighted {got}, exact {want} ({:.1} % off)",
        err * 100.0
    );
}

#[test]
fn leak_weighs_sampled_outstanding_bytes_to_the_fixtures_totals() {
    let _serial = one_at_a_time();
    if !require_perf("memperf leak -s") {
        return;
    }
    let _turn = recording_turn();
    let (got, truth) = run(&["leak", "-s", SAMPLE]);
    for f in FUNCTIONS {
        assert_near(
            &format!("{f}: outstanding bytes"),
            got.get(f).copied().unwrap_or(0),
            truth[f][3],
        );
    }
}

#[test]
fn heap_weighs_sampled_allocations_to_the_fixtures_totals() {
    let _serial = one_at_a_time();
    if !require_perf("memperf heap -s") {
        return;
    }
    let _turn = recording_turn();
    for (metric, column) in [("allocated-bytes", 1), ("allocations", 0), ("leaked", 3)] {
        let (got, truth) = run(&["heap", "--metric", metric, "-s", SAMPLE]);
        for f in FUNCTIONS {
            assert_near(
                &format!("{f}: {metric}"),
                got.get(f).copied().unwrap_or(0),
                truth[f][column],
            );
        }
    }
}

#[test]
fn rss_weighs_sampled_resident_bytes_to_the_same_runs_exact_totals() {
    let _serial = one_at_a_time();
    if !require_perf("memperf rss -s") || !have_go() {
        return;
    }
    let _turn = recording_turn();
    let dir = scratch();
    let pb = dir.path().join("rss.pb.gz");
    let prog = fixture("sampled", Variant::NoFp);
    let o = run_memperf(&[
        "rss",
        "-s",
        SAMPLE,
        "-m",
        "8192",
        "-T",
        "1000",
        "--pprof",
        pb.to_str().unwrap(),
        "--",
        prog.to_str().unwrap(),
        "80000",
        "big",
    ]);
    let (text, err) = (String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(o.status.success() && !err.contains("lost"), "{err}");
    // The text report's rows are exact (the unsampled allocations in a row of their own):
    // every resident page of a live allocation, counted once.
    let exact_pages: u64 = text
        .lines()
        .filter_map(|l| l.trim_start().split_once(" pages resident ("))
        .map(|(n, _)| n.parse::<u64>().unwrap())
        .sum();
    assert!(text.contains("[stack not sampled]"), "{text}");
    // go tool pprof reads the weighted profile: its total stands for the same pages.
    let total = |index: &str| -> u64 {
        let top = go_pprof(&pb, &["-top", "-unit=B", &format!("-sample_index={index}")]);
        let line = top
            .lines()
            .find(|l| l.contains(" total"))
            .unwrap_or_else(|| panic!("{top}"));
        let t = line
            .rsplit(" of ")
            .next()
            .unwrap()
            .trim_end_matches(" total")
            .trim();
        t.trim_end_matches('B')
            .parse()
            .unwrap_or_else(|_| panic!("{line}"))
    };
    // Resident pages are sparse: a block placed where a freed one was faults nothing in, so
    // a few thousand blocks own every page and a few hundred sampled ones stand for them (a
    // spread of about 5 % at one sigma); the bound is wider than the others'.
    let (weighted, exact) = (total("resident_space"), exact_pages * 4096);
    let off = (weighted as f64 - exact as f64).abs() / exact as f64;
    assert!(
        exact > 0 && off <= 2.0 * TOLERANCE,
        "resident bytes: weighted {weighted}, exact {exact}"
    );
    let truth = truth(&err);
    let made: u64 = FUNCTIONS.iter().map(|f| truth[*f][1]).sum();
    // alloc_space also holds the few allocations of the program's start-up and exit.
    assert_near("bytes allocated", total("alloc_space"), made);
}

#[test]
fn zero_is_no_sample_rate_for_any_tracing_command() {
    for cmd in ["leak", "rss", "heap"] {
        let o = run_memperf(&[cmd, "-s", "0", "--", "true"]);
        assert!(!o.status.success(), "{cmd} -s 0 ran");
        assert!(
            stderr(&o).contains("invalid sample rate 0"),
            "{cmd}: {}",
            stderr(&o)
        );
    }
}

/// An exact run's figures (`truth`'s column `at`) against the fixture's: the rows sum to the
/// fixture's total, and each function's row equals its own count, except that a stack left
/// out while memperf was behind (said in the summary; a slow debug build on a busy machine
/// sheds some) counts under no function: then each function has at most its count, and the
/// total still holds every allocation.
#[track_caller]
fn assert_exact_by_function(
    got: &BTreeMap<String, u64>,
    truth: &BTreeMap<String, [u64; 4]>,
    at: usize,
    err: &str,
) {
    let total: u64 = got.values().sum();
    let want: u64 = truth.values().map(|t| t[at]).sum();
    assert_eq!(
        total, want,
        "all rows against the fixture's total\n{got:?}\n{err}"
    );
    let (_, _, not_unwound) = stack_counts(err);
    for f in FUNCTIONS {
        let (g, w) = (got.get(f).copied().unwrap_or(0), truth[f][at]);
        if not_unwound == 0 {
            assert_eq!(g, w, "{f}\n{err}");
        } else {
            assert!(g <= w, "{f}: {g} above the fixture's {w}\n{err}");
        }
    }
}

/// The stacks the summary says were left out while memperf was behind (0 when it says none).
fn left_out(err: &str) -> u64 {
    let text = joined(err);
    let Some(at) = text.find(" left out while memperf was behind") else {
        return 0;
    };
    let before = text[..at].rsplit(['(', ' ']).next().unwrap_or("");
    before
        .parse()
        .unwrap_or_else(|_| panic!("no count before `left out` in\n{err}"))
}

/// The copy size of the allocation stacks of an exact run is learnt (`--call-graph
/// dwarf,auto`, the default): after the first stacks the probes are opened again with a
/// smaller copy, both openings writing for 5 ms (`MEMPERF_RESIZE_OVERLAP_MS`), and a record
/// both wrote is counted once: the exact figures equal the fixture's own, allocation for
/// allocation, and the stacks still reach the program's root. A size given (`dwarf,8192`)
/// is kept.
#[test]
fn exact_runs_learn_the_allocation_stacks_copy_and_count_every_allocation() {
    let _serial = one_at_a_time();
    if !require_perf("memperf heap, leak (dwarf,auto)") {
        return;
    }
    let _turn = recording_turn();
    let exact = |args: &[&str]| run_env(args, &[("MEMPERF_RESIZE_OVERLAP_MS", "5")]);
    let learnt = |err: &str| -> Option<u64> {
        let at = err.find("copied 8192 bytes, then ")?;
        err[at..].split_whitespace().nth(4)?.parse().ok()
    };
    let (got, truth, err) = exact(&["heap", "--metric", "allocations"]);
    assert_exact_by_function(&got, &truth, 0, &err);
    let size = learnt(&err).unwrap_or_else(|| panic!("no learnt copy size in:\n{err}"));
    assert!(size < 8192, "{err}");
    assert!(
        err.contains("were kept once"),
        "no records written twice:\n{err}"
    );
    // The learnt copy truncates at most 1% of stacks; stacks left out while memperf was
    // behind are not the copy's doing.
    let (cut, all, _) = stack_counts(&err);
    let cut = cut - left_out(&err);
    assert!(
        all >= 150_000 && cut * 100 <= all,
        "{cut} of {all} truncated by the copy:\n{err}"
    );

    let (got, truth, err) = exact(&["leak"]);
    assert_exact_by_function(&got, &truth, 3, &err);
    assert!(learnt(&err).is_some_and(|s| s < 8192), "{err}");

    let (_, _, err) = exact(&["leak", "--call-graph", "dwarf,8192"]);
    assert!(!err.contains("dwarf,auto"), "{err}");
}
