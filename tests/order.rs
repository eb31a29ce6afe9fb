#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Records from several CPUs come out in time order: `memperf script` holds each round until
//! the next, as perf does, so it prints no more samples out of order than `perf script` on
//! the same file, whoever recorded it.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::*;

/// Adjacent pairs of samples whose times go backwards in perf-script text.
fn inversions(script: &str) -> usize {
    let times: Vec<f64> = script
        .lines()
        .filter(|l| !l.starts_with('\t'))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_suffix(':').and_then(|t| t.parse::<f64>().ok()))
        })
        .collect();
    times.windows(2).filter(|w| w[1] < w[0]).count()
}

/// Runs the threads fixture (4 threads touching pages on every CPU) under `recorder`.
fn record_threads(recorder: &mut Command) {
    let threads = fixture("threads", Variant::NoFp);
    let _turn = recording_turn();
    let mut child = recorder
        .arg("--")
        .arg(&threads)
        .args(["3", "5000"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the recorder");
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn script_prints_no_more_samples_out_of_order_than_perf_script() {
    if !require_perf("ordering") || !require_perf_tool("ordering") {
        return;
    }
    let dir = scratch();
    let ours = dir.path().join("memperf.data");
    let perfs = dir.path().join("perf.data");
    record_threads(
        memperf()
            .args([
                "record",
                "-q",
                "-a",
                "-e",
                "page-faults",
                // Frame-pointer chains, as perf's -g below: a burst of 20,000 faults in
                // 30 ms with 8 KiB stack copies is 160 MiB, more than two rings hold
                // while a loaded CPU unwinds them, and this test is about order.
                "--call-graph",
                "fp",
                "-m",
                TEST_RING_PAGES,
                "-o",
            ])
            .arg(&ours),
    );
    record_threads(
        Command::new("perf")
            .args([
                "record",
                "-q",
                "-a",
                "-e",
                "page-faults",
                "-c",
                "1",
                "-g",
                "-o",
            ])
            .arg(&perfs),
    );
    for file in [&ours, &perfs] {
        let (mine, theirs, _) = both_scripts(file.to_str().unwrap());
        let (m, p) = (inversions(&mine), inversions(&theirs));
        assert!(
            m <= p,
            "{}: memperf script has {m} samples out of order, perf script {p}",
            file.display()
        );
        assert!(script_headers(&mine).len() >= 20_000, "{}", file.display());
    }
}
