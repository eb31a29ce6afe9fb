#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Process churn: what memperf keeps of processes that come and go (README, "Memory"), and
//! the stacks of short-lived processes of distinct binaries.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{
    TEST_RING_PAGES, memperf, recording_turn, require_perf, run_memperf, scratch, stderr,
};

/// The summary's `held the state of at most PEAK processes at once (END at the end)` and
/// the processes it dropped without an EXIT record.
fn held(err: &str) -> (u64, u64, u64) {
    let line = err
        .lines()
        .find(|l| l.contains("held the state of at most"))
        .unwrap_or_else(|| panic!("no line on the processes held:\n{err}"));
    let num_after = |tag: &str| -> Option<u64> {
        let rest = &line[line.find(tag)? + tag.len()..];
        rest.split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    let peak = num_after("at most ").unwrap();
    let end = num_after(" at once (").unwrap();
    let reaped = num_after("; ").unwrap_or(0);
    (peak, end, reaped)
}

/// The pids `perf script` shows a FORK or an exec's COMM of and no EXIT of: processes that
/// memperf held state for and whose EXIT record was lost.
fn exits_missing(file: &Path) -> BTreeSet<u32> {
    let o = Command::new("perf")
        .args(["script", "--show-task-events", "-i"])
        .arg(file)
        .output()
        .expect("run perf script");
    assert!(o.status.success(), "perf script failed: {}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    let (mut started, mut exited) = (BTreeSet::new(), BTreeSet::new());
    for line in text.lines() {
        // PERF_RECORD_FORK(pid:tid):(ppid:ptid), PERF_RECORD_EXIT(pid:tid):(ppid:ptid)
        for (tag, set) in [
            ("PERF_RECORD_FORK(", &mut started),
            ("PERF_RECORD_EXIT(", &mut exited),
        ] {
            if let Some(at) = line.find(tag) {
                let ids = &line[at + tag.len()..];
                let ids = &ids[..ids.find(')').unwrap_or(ids.len())];
                if let Some((pid, tid)) = ids.split_once(':')
                    && pid == tid
                {
                    set.insert(pid.parse::<u32>().unwrap());
                }
            }
        }
        // PERF_RECORD_COMM exec: NAME:PID/TID
        if let Some(at) = line.find("PERF_RECORD_COMM exec: ") {
            let ids = line[at..].rsplit(':').next().unwrap_or("");
            if let Some((pid, _)) = ids.trim().split_once('/') {
                started.insert(pid.parse::<u32>().unwrap());
            }
        }
    }
    started.difference(&exited).copied().collect()
}

#[test]
fn processes_whose_exit_record_was_lost_are_dropped() {
    if !require_perf("processes whose EXIT record was lost") {
        return;
    }
    let dir = scratch();
    let out = dir.path().join("lost-exits.data");
    // A one-page ring and 2 KiB stacks: each burst of 100 processes overflows it, and with
    // the samples the kernel drops some of the processes' FORK, COMM and EXIT records. The
    // pause after each burst gives memperf's look at /proc (once a second) time to drop
    // those it was never told had exited.
    let script = "for b in 1 2; do for i in $(seq 100); do /bin/true; done; sleep 1.6; done";
    let o = {
        let _turn = recording_turn();
        memperf()
            .args(["record", "-m", "1", "--call-graph", "dwarf,2048", "-o"])
            .arg(&out)
            .args(["--", "sh", "-c", script])
            .output()
            .expect("run memperf")
    };
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    let (peak, end, reaped) = held(&err);
    let missing = exits_missing(&out);
    assert!(
        !missing.is_empty(),
        "the test lost no EXIT record: it shows nothing\n{err}"
    );
    // Every process whose EXIT the recording lacks was dropped, and nothing is left at the
    // end (the command, whose EXIT came, included); the table never held both bursts.
    assert!(
        reaped >= missing.len() as u64,
        "dropped {reaped} processes, {} EXIT records missing: {missing:?}\n{err}",
        missing.len()
    );
    assert_eq!(end, 0, "{err}");
    assert!(peak < 150, "held {peak} processes at once\n{err}");
}

/// `leaf` touches 16 fresh pages of its own: 16 faults, each under main → mid → leaf.
const CHAIN_SOURCE: &str = r#"
#include <stdio.h>
static char buf[16 * 4096] __attribute__((aligned(4096)));
__attribute__((noinline)) long leaf(long seed) {
    for (int i = 0; i < 16; i++) buf[i * 4096] = (char)(seed + i);
    return buf[4096] + seed;
}
__attribute__((noinline)) long mid(long seed) { return leaf(seed) + 1; }
int main(void) { printf("%ld\n", mid(SEED)); return 0; }
"#;

/// `n` distinct programs (their own build-ids) built from [`CHAIN_SOURCE`] into `dir`.
fn distinct_programs(dir: &Path, n: usize) -> Vec<PathBuf> {
    let src = dir.join("chain.c");
    std::fs::write(&src, CHAIN_SOURCE).unwrap();
    (0..n)
        .map(|i| {
            let bin = dir.join(format!("chain{i}"));
            let st = Command::new("cc")
                .args(["-O0", "-g", "-fno-inline"])
                .arg(format!("-DSEED={}", 1000 + i))
                .arg("-o")
                .arg(&bin)
                .arg(&src)
                .status()
                .expect("run cc");
            assert!(st.success(), "cc failed");
            bin
        })
        .collect()
}

#[test]
fn stacks_of_short_lived_processes_of_distinct_binaries_are_whole() {
    if !require_perf("stacks of short-lived processes") {
        return;
    }
    let dir = scratch();
    let progs = distinct_programs(dir.path(), 4);
    let list: Vec<String> = progs.iter().map(|p| p.display().to_string()).collect();
    const ROUNDS: usize = 50;
    let script = format!(
        "for i in $(seq {ROUNDS}); do for p in {}; do \"$p\" >/dev/null; done; done",
        list.join(" ")
    );
    let out = dir.path().join("short-lived.data");
    let o = {
        let _turn = recording_turn();
        memperf()
            .args(["record", "-m", TEST_RING_PAGES, "-e", "page-faults", "-o"])
            .arg(&out)
            .args(["--", "sh", "-c", &script])
            .output()
            .expect("run memperf")
    };
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("lost 0 events"), "{err}");
    let r = run_memperf(&["report", "--folded", "-i", out.to_str().unwrap()]);
    assert!(r.status.success(), "{}", stderr(&r));
    let folded = String::from_utf8(r.stdout).unwrap();
    // The truth: every run of every program faults 16 times in leaf, called by mid from main.
    let (mut in_leaf, mut whole) = (0u64, 0u64);
    for line in folded.lines() {
        let Some((stack, n)) = line.rsplit_once(' ') else {
            continue;
        };
        let frames: Vec<&str> = stack.split(';').collect();
        if frames.last() != Some(&"leaf") {
            continue;
        }
        let n: u64 = n.parse().unwrap();
        in_leaf += n;
        if frames.ends_with(&["main", "mid", "leaf"]) {
            whole += n;
        }
    }
    let runs = (ROUNDS * progs.len()) as u64;
    assert_eq!(in_leaf, 16 * runs, "{folded}\n{err}");
    assert_eq!(whole, in_leaf, "{folded}\n{err}");
}
