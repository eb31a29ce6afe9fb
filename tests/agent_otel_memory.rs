#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `memperf agent --otel-memory PATH`: a program's OpenTelemetry memory-profiling probes
//! (`otel_memory:alloc(ptr, size, weighted_bytes)`, `otel_memory:free(ptr)`) read without
//! BPF, as pprof's `alloc_objects`, `alloc_space`, `inuse_objects` and `inuse_space`.
//! `fixtures/otelmem.c` allocates from two named functions with known weighted bytes (one
//! of them standing for 8 times its size, as a program that samples its own allocations
//! reports them), frees three blocks in four, and prints its own totals; `go tool pprof`
//! must find exactly those per function.

mod common;

use std::collections::HashMap;
use std::path::PathBuf;

use common::{Variant, fixture, have_go, memperf, require_perf, scratch, stderr};

/// The fixture's own `FUNC allocs A weighted W ...` lines, by function and figure.
fn own_totals(stdout: &str) -> HashMap<(String, String), u64> {
    let mut out = HashMap::new();
    for line in stdout.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some((func, pairs)) = words.split_first() else {
            continue;
        };
        for kv in pairs.chunks(2) {
            if let [k, v] = kv {
                out.insert((func.to_string(), k.to_string()), v.parse().unwrap());
            }
        }
    }
    out
}

/// `go tool pprof ARGS FILES...`.
fn pprof(files: &[PathBuf], args: &[&str]) -> String {
    let o = std::process::Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .args(files)
        .output()
        .unwrap();
    assert!(o.status.success(), "go tool pprof {args:?}: {}", stderr(&o));
    String::from_utf8(o.stdout).unwrap()
}

/// The cumulative value of function `name` in a `-top -cum` table.
fn cum(top: &str, name: &str) -> String {
    top.lines()
        .find(|l| l.trim_end().ends_with(&format!(" {name}")))
        .and_then(|l| l.split_whitespace().nth(3))
        .unwrap_or_else(|| panic!("no {name} in:\n{top}"))
        .to_string()
}

#[test]
fn the_agent_reads_the_otel_memory_contract_as_alloc_objects_and_alloc_space() {
    if !require_perf("memperf agent --otel-memory") || !have_go() {
        return;
    }
    let program = fixture("otelmem", Variant::Fp);
    let dir = scratch();
    let o = memperf()
        .args([
            "agent",
            "--interval",
            "0.2",
            "--call-graph",
            "fp",
            "--output",
        ])
        .arg(dir.path())
        .arg("--otel-memory")
        .arg(&program)
        .arg("--")
        .arg(&program)
        .arg("3000")
        .output()
        .unwrap();
    assert!(o.status.success(), "agent failed: {}", stderr(&o));
    let own = own_totals(&String::from_utf8_lossy(&o.stdout));
    let files: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(!files.is_empty(), "no profile: {}", stderr(&o));
    let objects = pprof(
        &files,
        &[
            "-top",
            "-cum",
            "-nodefraction=0",
            "-sample_index=alloc_objects",
        ],
    );
    let space = pprof(
        &files,
        &[
            "-top",
            "-cum",
            "-nodefraction=0",
            "-unit=B",
            "-sample_index=alloc_space",
        ],
    );
    for func in ["small_blocks", "big_blocks"] {
        let want = |k: &str| own[&(func.to_string(), k.to_string())];
        assert_eq!(cum(&objects, func), want("allocs").to_string(), "{objects}");
        // The weighted bytes, not the sizes: big_blocks' blocks stand for 8 times theirs.
        assert_eq!(
            cum(&space, func),
            format!("{}B", want("weighted")),
            "{space}"
        );
    }
    // Only the contract's columns: no page faults unless asked for.
    let types = pprof(&files, &["-raw"]);
    assert!(
        types.contains("alloc_objects/count alloc_space/bytes"),
        "{types}"
    );
    assert!(!types.contains("page-faults"), "{types}");
}

#[test]
fn a_path_the_event_cannot_hold_is_refused() {
    let o = memperf()
        .args(["agent", "--output", "/tmp", "--otel-memory", "a:b"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--otel-memory `a:b`"), "{}", stderr(&o));
}

#[test]
fn a_free_copies_no_stack() {
    if !require_perf("memperf agent --otel-memory") {
        return;
    }
    let program = fixture("otelmem", Variant::Fp);
    let dir = scratch();
    // The default call graph, dwarf,auto, says what each event's stack copies cost.
    let o = memperf()
        .args(["agent", "--interval", "30", "--output"])
        .arg(dir.path())
        .arg("--otel-memory")
        .arg(&program)
        .arg("--")
        .arg(&program)
        .args(["100", "0"])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "agent failed: {err}");
    assert!(err.contains("otel_memory:alloc` copied"), "{err}");
    assert!(!err.contains("otel_memory:free` copied"), "{err}");
}
