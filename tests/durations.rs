#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Duration and interval arguments: every one goes through `cli::seconds`, which refuses
//! an absurd value (`1e300`, `1e19`) with a clear error before anything starts. They
//! exited 101 on a `Duration` overflow.

mod common;

use std::time::{Duration, Instant};

use common::*;

#[test]
fn absurd_durations_and_intervals_are_clear_errors_not_panics() {
    let cases: [&[&str]; 9] = [
        &[
            "record",
            "--duration",
            "1e300",
            "-o",
            "/nonexistent/x.data",
            "--",
            "true",
        ],
        &["stat", "--duration", "1e300", "--", "true"],
        &["faults", "-d", "1e19"],
        &["oomkill", "--duration", "1e300"],
        &["triage", "-d", "1e300"],
        &["swapin", "1e300", "1"],
        &["vmscan", "1e300"],
        &["leak", "-p", "1", "18446744073709551615"],
        &["rss", "-p", "1", "--duration", "18446744073709551615"],
    ];
    for args in cases {
        let start = Instant::now();
        let o = run_memperf(args);
        let err = stderr(&o);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("is too long: at most"), "{args:?}: {err}");
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{args:?} took long"
        );
    }
}

#[test]
fn a_negative_or_nan_duration_is_refused() {
    let o = run_memperf(&["triage", "--duration=-1"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("must be a positive number of seconds, not -1"));
    let o = run_memperf(&["swapin", "nan"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("positive number of seconds, not NaN"));
}
