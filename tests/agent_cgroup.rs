#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `memperf agent -G`: perf's cgroup mode. Two copies of `fixtures/pagefault.c` run, one in a
//! cgroup made for the test and one outside it; the agent limited to that cgroup has the
//! inside copy's exact faults and bytes, under the cgroup's name, and nothing of the other.
//! Copies that exit at once, gone before the agent handles their samples, are still named
//! after the cgroup (the cgroup id each sample carries).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::cgroup::TestCgroup;
use common::{Variant, fixture, have_go, memperf, require_perf, scratch, stderr};

/// `go tool pprof ARGS FILES...` (the profiles merged).
fn pprof(files: &[PathBuf], args: &[&str]) -> String {
    let o = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .args(files)
        .output()
        .unwrap();
    assert!(o.status.success(), "go tool pprof {args:?}: {}", stderr(&o));
    String::from_utf8(o.stdout).unwrap()
}

/// The cumulative value of function `name` in a `-top -cum` table (0 when it is absent).
fn cum(top: &str, name: &str) -> String {
    top.lines()
        .find(|l| l.trim_end().ends_with(&format!(" {name}")))
        .and_then(|l| l.split_whitespace().nth(3))
        .unwrap_or("0")
        .to_string()
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

/// `memperf agent -G groups --output out ARGS -- sh -c script`; its stderr.
fn agent(groups: &str, out: &Path, args: &[&str], script: &str) -> String {
    let o = memperf()
        .args(["agent", "--interval", "0.3", "-G", groups, "--output"])
        .arg(out)
        .args(args)
        .args(["--", "sh", "-c", script])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    err
}

/// `agent` of `fixtures/pagefault.c`'s copies, `inside` faults in `cg` then `outside`
/// outside it.
fn profile_copies(cg: &TestCgroup, groups: &str, out: &Path, inside: u64, outside: u64) -> String {
    let bin = fixture("pagefault", Variant::Fp);
    agent(
        groups,
        out,
        &[],
        &cg.inside_then_outside(&bin, inside, outside),
    )
}

/// Every profile in `files` is `leaf`'s (its file name ends in `-LEAF.pb.gz`).
fn assert_all_named(files: &[PathBuf], leaf: &str, err: &str) {
    assert!(!files.is_empty(), "no profile\n{err}");
    for f in files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.ends_with(&format!("-{leaf}.pb.gz")), "{name}\n{err}");
    }
}

#[test]
fn only_the_cgroups_tasks_are_profiled_under_its_name() {
    if !require_perf("memperf agent -G") || !have_go() {
        return;
    }
    let Some(cg) = TestCgroup::for_test("agent") else {
        return;
    };
    let dir = scratch();
    let out = dir.path().join("profiles");
    let inside = 3000;
    let err = profile_copies(&cg, &cg.name, &out, inside, 1700);
    let files = files_in(&out);
    // Every profile is the cgroup's: none of the outside copy (service `pagefault-fp`).
    assert_all_named(&files, &cg.name, &err);
    let counts = pprof(&files, &["-top", "-cum", "-sample_index=page-faults"]);
    assert_eq!(cum(&counts, "touch_pages"), inside.to_string(), "{counts}");
    let bytes = pprof(
        &files,
        &["-top", "-cum", "-unit=B", "-sample_index=page-faults_bytes"],
    );
    assert_eq!(
        cum(&bytes, "touch_pages"),
        format!("{}B", inside * 4096),
        "{bytes}"
    );
    drop(cg);
}

/// Whether `what` can be run with cgroup ids checked: perf events, Go (for go tool pprof)
/// and a kernel that writes v2 cgroup ids in samples (said when it does not).
fn can_test_cgroup_ids(what: &str) -> bool {
    if !require_perf(what) || !have_go() {
        return false;
    }
    let ids = TestCgroup::ids_name_cgroups();
    if !ids {
        eprintln!("skipped: the kernel writes no v2 cgroup ids in samples here");
    }
    ids
}

/// Twenty copies of `fixtures/pagefault.c` in the cgroup, each gone as soon as it has
/// faulted: with frame-pointer stacks the agent reads its rings every 100 ms, long after.
/// `/proc/PID/cgroup` is gone with the process, so only the cgroup id the kernel wrote in
/// each sample names the cgroup: every fault ships under the cgroup's name, none under the
/// command's (`pagefault-fp`).
#[test]
fn short_lived_processes_ship_under_their_cgroups_name() {
    if !can_test_cgroup_ids("memperf agent -G") {
        return;
    }
    let Some(cg) = TestCgroup::for_test("agent-short") else {
        return;
    };
    let dir = scratch();
    let out = dir.path().join("profiles");
    let (copies, pages) = (20, 50);
    let script = format!(
        "i=0; while [ $i -lt {copies} ]; do sh -c 'echo $$ > {procs} && exec {bin} {pages}' \
         || exit 1; i=$((i+1)); done",
        procs = cg.dir.join("cgroup.procs").display(),
        bin = fixture("pagefault", Variant::Fp).display(),
    );
    let err = agent(&cg.name, &out, &["--call-graph", "fp"], &script);
    let files = files_in(&out);
    assert_all_named(&files, &cg.name, &err);
    let counts = pprof(&files, &["-top", "-cum", "-sample_index=page-faults"]);
    let total = (copies * pages).to_string();
    assert_eq!(cum(&counts, "touch_pages"), total, "{counts}");
    drop(cg);
}

/// Without `-G`: a unit's cgroup made while the agent runs, known only from the kernel's
/// CGROUP record (it is removed again before the agent reads its rings, so no walk finds
/// it), and ten copies of `fixtures/pagefault.c` that move into it after their first
/// samples (their shell starts outside) and exit at once. Every fault ships under the
/// unit's name (`late` of `late.service`), none under the command's.
#[test]
fn processes_moved_into_a_unit_made_while_running_ship_under_it() {
    if !can_test_cgroup_ids("memperf agent") {
        return;
    }
    let Some(parent) = TestCgroup::for_test("agent-late") else {
        return;
    };
    let unit = parent.dir.join("late.service");
    // Removed with what is left in it on every path, before its parent.
    let unit_guard = TestCgroup::to_be_made(unit.clone());
    let dir = scratch();
    let out = dir.path().join("profiles");
    let (copies, pages) = (10, 50);
    let script = format!(
        "mkdir {unit} || exit 1; i=0; while [ $i -lt {copies} ]; do \
         sh -c 'echo $$ > {unit}/cgroup.procs && exec {bin} {pages}' || exit 1; \
         i=$((i+1)); done; rmdir {unit} || true",
        unit = unit.display(),
        bin = fixture("pagefault", Variant::Fp).display(),
    );
    let o = memperf()
        .args([
            "agent",
            "--interval",
            "0.3",
            "--call-graph",
            "fp",
            "--output",
        ])
        .arg(&out)
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    drop(unit_guard);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    let files = files_in(&out);
    let named = |f: &PathBuf, leaf: &str| f.to_string_lossy().ends_with(&format!("-{leaf}.pb.gz"));
    assert!(
        !files.iter().any(|f| named(f, "pagefault-fp")),
        "{files:?}\n{err}"
    );
    let late: Vec<PathBuf> = files.iter().filter(|f| named(f, "late")).cloned().collect();
    assert!(!late.is_empty(), "{files:?}\n{err}");
    let counts = pprof(&late, &["-top", "-cum", "-sample_index=page-faults"]);
    assert_eq!(
        cum(&counts, "touch_pages"),
        (copies * pages).to_string(),
        "{counts}"
    );
    drop(parent);
}

/// perf's cgroup events match a cgroup's descendants too: with `-G outer,outer/inner` a task
/// of `inner` fires the events opened on both. Each fault is counted once, in the profiles of
/// the innermost cgroup given.
#[test]
fn a_cgroup_inside_another_given_is_counted_once_under_its_own_name() {
    if !require_perf("memperf agent -G") || !have_go() {
        return;
    }
    let Some(outer) = TestCgroup::for_test("agent-nested") else {
        return;
    };
    let inner = outer.child("inner");
    let dir = scratch();
    let out = dir.path().join("profiles");
    let inside = 2000;
    let groups = format!("{},{}", outer.name, inner.name);
    let err = profile_copies(&inner, &groups, &out, inside, 1300);
    drop(inner);
    drop(outer);
    let files = files_in(&out);
    assert!(!files.is_empty(), "no profile\n{err}");
    let inner_files: Vec<PathBuf> = files
        .iter()
        .filter(|f| f.to_string_lossy().ends_with("-inner.pb.gz"))
        .cloned()
        .collect();
    let counts = pprof(&files, &["-top", "-cum", "-sample_index=page-faults"]);
    assert_eq!(cum(&counts, "touch_pages"), inside.to_string(), "{counts}");
    let counts = pprof(&inner_files, &["-top", "-cum", "-sample_index=page-faults"]);
    assert_eq!(cum(&counts, "touch_pages"), inside.to_string(), "{counts}");
    // Said at start, before the first window's line, not at exit.
    let note = err.find("inner` is inside").expect(&err);
    assert!(note < err.find("window 1:").expect(&err), "{err}");
}

#[test]
fn an_unknown_cgroup_is_refused_clearly() {
    let dir = scratch();
    let o = memperf()
        .args(["agent", "-G", "memperf-no-such-cgroup", "--output"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("no cgroup `memperf-no-such-cgroup`"), "{err}");
    let o = memperf()
        .args(["agent", "-G", "x", "-p", "1", "--output"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(stderr(&o).contains("either -G or -p"), "{}", stderr(&o));
}
