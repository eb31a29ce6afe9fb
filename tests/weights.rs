#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `--weight bytes` on a recording with events that have a size and events that do not
//! (the README's brk recording, with `sys_exit_brk` beside `sys_enter_brk`): the sized ones
//! are weighed, the others counted, as `--by` does.

mod common;

use common::*;

#[test]
fn weight_bytes_weighs_sized_events_and_counts_the_others() {
    if !require_perf("weights") {
        return;
    }
    let dir = scratch();
    let out = dir.path().join("brk.data");
    record(
        &out,
        &["-e", "syscalls:sys_enter_brk,syscalls:sys_exit_brk"],
        &fixture("brk", Variant::NoFp),
        &["64"],
    );
    let o = run_memperf(&[
        "report",
        "-q",
        "--weight",
        "bytes",
        "-i",
        out.to_str().unwrap(),
    ]);
    // Header lines wrapped to 80 columns, joined again.
    let text = String::from_utf8_lossy(&o.stdout).replace("\n#   ", " ");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no size is known for syscalls:sys_exit_brk; its samples are counted"),
        "{}",
        stderr(&o)
    );
    let (enter, exit) = text
        .split_once("# syscalls:sys_exit_brk:")
        .unwrap_or_else(|| panic!("{text}"));
    assert!(enter.contains("most bytes first"), "{text}");
    assert!(
        exit.contains("most samples (no size is known for this event) first"),
        "{text}"
    );
    // The workload's 64 sbrk(8192) calls: 64 * 8192 bytes entering brk (512.0 KiB),
    // 64 calls returning.
    let weight_under = |section: &str| -> u64 {
        section
            .split("\n\n")
            .filter(|stack| stack.contains("grow_heap"))
            .filter_map(|stack| weight_of(stack.lines().last()?))
            .sum()
    };
    assert_eq!(weight_under(enter), 64 * 8192, "{text}");
    assert_eq!(weight_under(exit), 64, "{text}");
}

/// A text report's weight line, `        512.0 KiB (98.46%)` (bytes in binary units) or
/// `        64 (1.00%)` (samples), as a number.
fn weight_of(line: &str) -> Option<u64> {
    let mut words = line.split_whitespace();
    let n: f64 = words.next()?.parse().ok()?;
    let scale = match words.next()? {
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        _ => 1.0,
    };
    Some((n * scale).round() as u64)
}
