#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `memperf record -G`: perf's cgroup mode. Two copies of `fixtures/pagefault.c` run, one in
//! a cgroup made for the test (removed on every way out) and one outside it; `perf script`
//! reads from the recording exactly the inside copy's faults on `touch_pages`, and none of
//! the other's.

mod common;

use std::process::Command;

use common::cgroup::TestCgroup;
use common::{
    Variant, fixture, memperf, perf_script, require_perf, require_perf_tool, scratch, stderr,
};

/// `memperf record -G groups -o out` of `fixtures/pagefault.c`'s copies, `inside` faults in
/// `cg` then `outside` outside it; its stderr.
fn record_copies(
    cg: &TestCgroup,
    groups: &str,
    out: &std::path::Path,
    inside: usize,
    outside: usize,
) -> String {
    let bin = fixture("pagefault", Variant::Fp);
    let script = cg.inside_then_outside(&bin, inside, outside);
    let o = memperf()
        .args(["record", "--call-graph", "fp", "-G", groups, "-o"])
        .arg(out)
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    err
}

/// The samples with `touch_pages` on their stack.
fn touching(samples: &[common::ScriptSample]) -> usize {
    samples
        .iter()
        .filter(|s| s.frames.iter().any(|f| f == "touch_pages"))
        .count()
}

#[test]
fn only_the_cgroups_tasks_are_recorded() {
    if !require_perf("memperf record -G") || !require_perf_tool("memperf record -G") {
        return;
    }
    let Some(cg) = TestCgroup::for_test("record") else {
        return;
    };
    let dir = scratch();
    let out = dir.path().join("cgroup.data");
    let inside = 3000;
    let err = record_copies(&cg, &cg.name, &out, inside, 1700);
    drop(cg);
    let samples = perf_script(&out);
    assert_eq!(touching(&samples), inside, "{err}");
    // Nothing of the test's own processes (the shells, the outside copy before its touches).
    let tids: std::collections::BTreeSet<u32> = samples.iter().map(|s| s.tid).collect();
    assert_eq!(tids.len(), 1, "{tids:?}\n{err}");
}

/// perf's cgroup events match a cgroup's descendants too: with `-G outer,outer/inner` a task
/// of `inner` fires the events opened on both. Each fault is recorded once, and memperf says
/// that `inner` is recorded through `outer`'s events.
#[test]
fn a_cgroup_inside_another_given_is_recorded_once() {
    if !require_perf("memperf record -G") || !require_perf_tool("memperf record -G") {
        return;
    }
    let Some(outer) = TestCgroup::for_test("record-nested") else {
        return;
    };
    let inner = outer.child("inner");
    let dir = scratch();
    let out = dir.path().join("cgroup.data");
    let inside = 2000;
    let groups = format!("{},{}", outer.name, inner.name);
    let err = record_copies(&inner, &groups, &out, inside, 1300);
    drop(inner);
    drop(outer);
    assert_eq!(touching(&perf_script(&out)), inside, "{err}");
    // Said at start (after the start line), not in the summary at the end.
    let note = err.find("inner` is inside").expect(&err);
    assert!(note < err.find("memperf: wrote").expect(&err), "{err}");
}

#[test]
fn record_refuses_an_unknown_cgroup_and_one_beside_pids() {
    let dir = scratch();
    let out = dir.path().join("x.data");
    let o = memperf()
        .args(["record", "-G", "memperf-no-such-cgroup", "-o"])
        .arg(&out)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("no cgroup `memperf-no-such-cgroup`"), "{err}");
    assert!(!out.exists());
    let o = Command::new(env!("CARGO_BIN_EXE_memperf"))
        .args(["record", "-G", "x", "-p", "1", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(stderr(&o).contains("cannot be used with"), "{}", stderr(&o));
}
