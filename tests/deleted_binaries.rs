#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Binaries deleted or replaced while they are recorded (a package upgrade, a build that
//! writes over the program it runs): the recorder keeps each file some process maps, by
//! build-id, so that the report names its frames after the file is gone. Each program is
//! `fixtures/delself.c` built without frame pointers (the stacks are DWARF-unwound), whose
//! known answer is its own: exactly N faults under `main → WHO_outer → WHO_middle →
//! WHO_touch`, WHO set at its build.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;

/// Builds `fixtures/delself.c` as `dir/name` with its functions named `who_*`.
fn build(dir: &Path, name: &str, who: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/delself.c");
    let out = dir.join(name);
    let ok = Command::new("cc")
        .args([
            "-O2",
            "-g",
            "-fno-optimize-sibling-calls",
            "-fomit-frame-pointer",
        ])
        .arg(format!("-DWHO={who}"))
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .expect("run cc");
    assert!(ok.success(), "cc delself");
    out
}

/// `memperf ARGS` with the build-id cache in `cache`; asserts success.
fn memperf_in(cache: &Path, args: &[&str]) -> Output {
    let o = memperf()
        .env("MEMPERF_BUILDID_DIR", cache)
        .args(args)
        .output()
        .expect("run memperf");
    assert!(o.status.success(), "memperf {args:?}: {}", stderr(&o));
    o
}

/// The folded report of `data` (only the threads named `comm`, when given), the cache in
/// `cache`.
fn folded(cache: &Path, data: &Path, comm: Option<&str>) -> String {
    let mut args = vec!["report", "-q", "--folded", "-i", data.to_str().unwrap()];
    if let Some(c) = comm {
        args.extend(["--comm", c]);
    }
    String::from_utf8_lossy(&memperf_in(cache, &args).stdout).into_owned()
}

/// The samples of the folded stacks that hold `who`'s whole chain, from `main` down.
fn chain_count(folded: &str, who: &str) -> u64 {
    let chain = format!(";main;{who}_outer;{who}_middle;{who}_touch");
    folded
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(stack, _)| stack.contains(&chain))
        .map(|(_, n)| n.parse::<u64>().unwrap())
        .sum()
}

const RECORD: [&str; 6] = [
    "-e",
    "page-faults",
    "--call-graph",
    "dwarf",
    "-m",
    TEST_RING_PAGES,
];

#[test]
fn a_command_that_deletes_its_own_binary_is_named_from_the_kept_copy() {
    if !require_perf("a deleted command") || !is_root() {
        return;
    }
    let dir = scratch();
    let prog = build(dir.path(), "del_faulter", "del");
    let cache = dir.path().join("cache");
    let data = dir.path().join("del.data");
    let pages = 700u64;
    let n = pages.to_string();
    let o = {
        let _turn = recording_turn();
        let mut args: Vec<&str> = vec!["record"];
        args.extend(RECORD);
        args.extend(["-o", data.to_str().unwrap(), "--"]);
        args.extend([prog.to_str().unwrap(), &n, "unlink"]);
        memperf_in(&cache, &args)
    };
    assert!(!prog.exists(), "the fixture removed itself");
    let f = folded(&cache, &data, None);
    assert_eq!(chain_count(&f, "del"), pages, "{f}\n{}", stderr(&o));
    // `memperf script` names them too.
    let s = memperf_in(&cache, &["script", "-q", "-i", data.to_str().unwrap()]);
    let script = String::from_utf8_lossy(&s.stdout);
    let named = script.lines().filter(|l| l.contains(" del_touch")).count() as u64;
    assert_eq!(named, pages, "{script}");
}

#[test]
fn a_binary_replaced_between_two_runs_names_each_from_its_own_build() {
    if !require_perf("a replaced binary") || !is_root() {
        return;
    }
    let dir = scratch();
    let one = build(dir.path(), "one", "one");
    let two = build(dir.path(), "two", "two");
    // The same code under other names: the same offsets, so a report that read the
    // second build for the first run's frames would name them `two_*`.
    let prog = dir.path().join("prog");
    std::fs::copy(&one, &prog).unwrap();
    let cache = dir.path().join("cache");
    let data = dir.path().join("replaced.data");
    // The second build renamed over the first between the runs, as installers do.
    let script = format!(
        "{p} 300 && mv {two} {p} && {p} 200",
        p = prog.display(),
        two = two.display()
    );
    let o = {
        let _turn = recording_turn();
        let mut args: Vec<&str> = vec!["record"];
        args.extend(RECORD);
        args.extend(["-o", data.to_str().unwrap(), "--", "sh", "-c", &script]);
        memperf_in(&cache, &args)
    };
    let f = folded(&cache, &data, Some("prog"));
    let err = stderr(&o);
    assert_eq!(chain_count(&f, "one"), 300, "{f}\n{err}");
    assert_eq!(chain_count(&f, "two"), 200, "{f}\n{err}");
}

#[test]
fn a_system_wide_recording_names_a_program_that_deleted_its_binary() {
    if !require_perf("a deleted program under -a") || !is_root() {
        return;
    }
    let dir = scratch();
    let prog = build(dir.path(), "delself_a", "sys");
    let cache = dir.path().join("cache");
    let data = dir.path().join("a.data");
    let pages = 500u64;
    // Machine-wide: one such run on the machine at a time, and only the program's own
    // faults (the user-fault tracepoint filtered by its name in the kernel), so that
    // another workload does not flood the rings.
    let o = {
        let _turn = recording_turn();
        let o = Command::new("flock")
            .arg("/tmp/memperf-machine.lock")
            .arg(env!("CARGO_BIN_EXE_memperf"))
            .env("MEMPERF_BUILDID_DIR", &cache)
            .args(["record", "-a", "-e", "exceptions:page_fault_user"])
            .args(["--filter", "comm == \"delself_a\"", "--call-graph", "dwarf"])
            .args(["-m", TEST_RING_PAGES])
            .arg("-o")
            .arg(&data)
            .arg("--")
            .arg(&prog)
            .args([&pages.to_string(), "unlink"])
            .output()
            .expect("run flock memperf");
        assert!(o.status.success(), "{}", stderr(&o));
        o
    };
    assert!(!prog.exists(), "the fixture removed itself");
    let f = folded(&cache, &data, Some("delself_a"));
    assert_eq!(chain_count(&f, "sys"), pages, "{f}\n{}", stderr(&o));
}
