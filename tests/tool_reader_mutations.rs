#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The memory tools' `-i` readers on recordings broken as `fuzz/`'s `tools` target broke
//! them: each must end, with an error or what it could read, never a panic or endless
//! intervals. One real `slabratetop -w` recording, edited in place.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::tools::*;
use common::*;
use memperf::perfdata::PerfDataFile;

/// A `slabratetop -w` recording of 200 opens, in `dir`.
fn slab_recording(dir: &Path) -> PathBuf {
    let prog = fixture("openclose", Variant::NoFp);
    let data = dir.join("slab.data");
    let _turn = recording_turn();
    run_tool(&[
        "slabratetop",
        "-m",
        TEST_RING_PAGES,
        "-w",
        data.to_str().unwrap(),
        "--",
        prog.to_str().unwrap(),
        "200",
        "/etc/hostname",
    ]);
    data
}

/// `slabratetop -C -i DATA INTERVAL`, which must end within 20 s without a panic.
fn replay(data: &Path, interval: &str) -> (Option<i32>, u64, String) {
    let args = ["slabratetop", "-C", "-i", data.to_str().unwrap(), interval];
    let (code, lines, err) = run_bounded(&args, Duration::from_secs(20));
    assert!(!err.contains("panicked"), "{err}");
    (code, lines, err)
}

fn set_u64(bytes: &mut [u8], at: usize, v: u64) {
    bytes[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

/// Sets the end of the span `data`'s header states (HEADER_SAMPLE_TIME) to `end`, and the
/// time of its middle sample to `t`; returns the file's bytes.
fn restate(data: &Path, end: impl Fn(u64) -> u64, t: impl Fn(u64) -> u64) -> Vec<u8> {
    let samples = sample_times(data);
    let (first, last) = PerfDataFile::open(data)
        .unwrap()
        .features
        .sample_time
        .unwrap();
    let mut bytes = std::fs::read(data).unwrap();
    let stated = (0..bytes.len() - 16)
        .find(|&i| u64_at(&bytes, i) == first && u64_at(&bytes, i + 8) == last)
        .unwrap();
    set_u64(&mut bytes, stated + 8, end(last));
    let (at, was) = samples[samples.len() / 2];
    set_u64(&mut bytes, at, t(was));
    bytes
}

#[test]
fn a_sample_timed_at_the_clocks_end_ends_no_interval_past_it() {
    if !require_perf("slabratetop -w") {
        return;
    }
    let dir = scratch();
    let data = slab_recording(dir.path());
    // The header states the samples run to the clock's end, and one lies there: the
    // intervals up to it are skipped, and none ends past it.
    let bytes = restate(&data, |_| u64::MAX, |_| u64::MAX - 1);
    std::fs::write(&data, bytes).unwrap();
    let (code, lines, err) = replay(&data, "1");
    assert_eq!(code, Some(0), "{err}");
    assert!(lines < 200, "{lines} lines\n{err}");
    assert!(err.contains("skipped"), "{err}");
}

#[test]
fn a_span_stated_over_decades_prints_no_empty_intervals_across_it() {
    if !require_perf("slabratetop -w") {
        return;
    }
    let dir = scratch();
    let data = slab_recording(dir.path());
    // The header states the samples run about 60 years, and one lies 30 years on: inside
    // that span, 10^9 one-second intervals after the one before it.
    let decades = 1_000_000_000_000_000_000;
    let bytes = restate(&data, |end| end + 2 * decades, |t| t + decades);
    std::fs::write(&data, bytes).unwrap();
    let (code, lines, err) = replay(&data, "1");
    assert_eq!(code, Some(0), "{err}");
    assert!(lines < 200, "{lines} lines\n{err}");
    assert!(err.contains("skipped"), "{err}");
}

#[test]
fn an_interval_under_a_nanosecond_is_refused() {
    if !require_perf("slabratetop -w") {
        return;
    }
    let dir = scratch();
    let data = slab_recording(dir.path());
    let (code, _, err) = replay(&data, "1e-10");
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("the interval 0.0000000001 is under a nanosecond"),
        "{err}"
    );
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(bytes[at..at + 8].try_into().unwrap())
}

/// `fuzz/`'s `tools` target found it (after the session's fixes): a recording whose
/// `bytes_alloc` fields sum past 2^64 made slabratetop's per-cache total overflow. The
/// input is the fuzzer's, less its first byte (which picked `slabratetop -i`).
#[test]
fn cache_sizes_that_sum_past_two_to_the_64_saturate() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/slab-bytes-overflow.data");
    let (code, _, err) = replay(&data, "1");
    assert!(code.is_some(), "{err}");
}

/// `fuzz/`'s `tools` target found it (11:08, this session): a sample whose period field
/// says 2^64 - 1 made `faults --per-pid`'s per-stack count overflow. The input is the
/// fuzzer's, less its first byte (which picked `faults -i --folded --per-pid`).
#[test]
fn fault_counts_that_sum_past_two_to_the_64_saturate() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/faults-period-overflow.data");
    let args = [
        "faults",
        "-i",
        data.to_str().unwrap(),
        "--folded",
        "--per-pid",
    ];
    let (code, _, err) = run_bounded(&args, Duration::from_secs(20));
    assert!(!err.contains("panicked"), "{err}");
    assert!(code.is_some(), "{err}");
}
