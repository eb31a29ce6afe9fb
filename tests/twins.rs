#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Exact counts across `--call-graph dwarf,auto`'s resize (the default call graph): the
//! records both openings of an event wrote are kept once (`session::twins`), and no real
//! event is taken for one of them (two hits of one probe, one written by the old fds and
//! the next by the new, once were). And memperf's own child, between its fork and the exec
//! of the command, left out of a system-wide recording.

mod common;

use std::path::Path;
use std::process::Command;

use common::{
    Recording, Variant, fixture, memperf, perf_script, recording_turn, release_held, require_perf,
    run_memperf, scratch, start_held, stderr,
};

/// Ring pages per CPU: 64 MiB hold a whole run at 8 KiB a stack (the copy before it is
/// sized), however long the reader is kept from draining on a busy machine, so that the
/// counts are exact.
const RING: &str = "16384";

/// Calls of the probed function per run: the copy is sized after 2000 stacks, mid-run.
const CALLS: u64 = 8000;

/// Microseconds between two calls of one thread: the run lasts a fifth of a second or more,
/// for the recorder to size the copy while it runs, with calls right before and after.
const PACE: &str = "20";

/// `memperf record -m RING OPTS -o OUT -- PROGRAM ARGS` with `env`; its stderr.
fn record_env(
    out: &Path,
    opts: &[&str],
    (program, args): (&Path, &[&str]),
    env: &[(&str, &str)],
) -> String {
    let _turn = recording_turn();
    let o = memperf()
        .args(["record", "-m", RING])
        .args(opts)
        .arg("-o")
        .arg(out)
        .arg("--")
        .arg(program)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run memperf");
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    err
}

/// Asserts that the summary says `event`'s copy was sized again during the run, and that
/// nothing was lost (else no count could be exact).
fn assert_resized(err: &str, event: &str) {
    let from = format!("note: dwarf,auto: `{event}` copied 8192 bytes, then ");
    assert!(
        err.lines().any(|l| l.trim().starts_with(&from)),
        "`{event}` was not opened again: {err}"
    );
    assert!(
        err.contains("lost 0 events in 0 LOST records, 0 lost samples"),
        "{err}"
    );
}

/// The samples of `event` in `file` whose stack holds `frame`.
fn samples_in(file: &Path, event: &str, frame: &str) -> u64 {
    let o = run_memperf(&[
        "report",
        "--folded",
        "--event",
        event,
        "-i",
        file.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(stack, _)| stack.split(';').any(|f| f == frame))
        .map(|(_, n)| n.parse::<u64>().unwrap())
        .sum()
}

const MALLOC: &str = "u:libc:malloc";

/// Where `malloc_calls_counted_once` records.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scope {
    Command,
    /// `-a`: the probe fires in every process; the kernel keeps the fixture's hits (and
    /// the report counts its own function's).
    SystemWide,
}

/// `repeat malloc T N` under `memperf record -e u:libc:malloc` (`-a` for `scope`), with
/// the old and new fds held enabled together `overlap` ms: every malloc call is there once.
fn malloc_calls_counted_once(threads: u64, scope: Scope, overlap: &str) {
    let prog = fixture("repeat", Variant::NoFp);
    let dir = scratch();
    let out = dir.path().join("malloc.data");
    let all: &[&str] = match scope {
        Scope::Command => &["-e", MALLOC],
        Scope::SystemWide => &["-a", "-e", MALLOC, "--filter", "comm == \"repeat-nofp\""],
    };
    let n = (CALLS / threads).to_string();
    let args = ["malloc", &threads.to_string(), &n, PACE];
    let env = [("MEMPERF_RESIZE_OVERLAP_MS", overlap)];
    let err = record_env(&out, all, (&prog, &args), &env);
    assert_resized(&err, MALLOC);
    assert_eq!(samples_in(&out, MALLOC, "repeat_calls"), CALLS, "{err}");
}

#[test]
fn a_uprobe_hit_after_the_copy_is_resized_is_not_dropped_as_a_twin() {
    if !require_perf("u:libc:malloc across a resize") {
        return;
    }
    // The moment the ioctls take (what broke), and 5 ms with calls written by both.
    malloc_calls_counted_once(1, Scope::Command, "0");
    malloc_calls_counted_once(1, Scope::Command, "5");
}

#[test]
fn uprobe_hits_of_four_threads_are_counted_once_across_a_resize() {
    if !require_perf("u:libc:malloc in four threads across a resize") {
        return;
    }
    malloc_calls_counted_once(4, Scope::Command, "0");
    malloc_calls_counted_once(4, Scope::Command, "5");
}

#[test]
fn a_system_wide_uprobe_counts_the_commands_calls_once_across_a_resize() {
    if !require_perf("system-wide u:libc:malloc across a resize") {
        return;
    }
    malloc_calls_counted_once(1, Scope::SystemWide, "0");
    malloc_calls_counted_once(4, Scope::SystemWide, "5");
}

#[test]
fn an_attached_uprobe_counts_every_threads_calls_once_across_a_resize() {
    if !require_perf("u:libc:malloc with -p across a resize") {
        return;
    }
    let _turn = recording_turn();
    let prog = fixture("repeat", Variant::NoFp);
    let dir = scratch();
    let out = dir.path().join("p.data");
    let n = (CALLS / 4).to_string();
    let (work, pid) = start_held(
        Command::new(&prog)
            .args(["malloc", "4", &n, PACE])
            .env("REPEAT_WAIT", "1"),
    );
    let rec = Recording::start(&["-m", RING, "-e", MALLOC, "-p", &pid], &out, &[]);
    release_held(work);
    let (status, err) = rec.wait("its target exited");
    assert!(status.success(), "{err}");
    assert_resized(&err, MALLOC);
    assert_eq!(samples_in(&out, MALLOC, "repeat_calls"), CALLS, "{err}");
}

#[test]
fn a_tracepoint_hit_after_the_copy_is_resized_is_not_dropped_as_a_twin() {
    if !require_perf("syscalls:sys_enter_brk across a resize") {
        return;
    }
    // brk(0) again and again: one payload, one stack, one thread.
    const BRK: &str = "syscalls:sys_enter_brk";
    let prog = fixture("repeat", Variant::NoFp);
    let dir = scratch();
    for overlap in ["0", "5"] {
        let out = dir.path().join(format!("brk-{overlap}.data"));
        let args = ["brk", "1", &CALLS.to_string(), PACE];
        let env = [("MEMPERF_RESIZE_OVERLAP_MS", overlap)];
        let err = record_env(&out, &["-e", BRK], (&prog, &args), &env);
        assert_resized(&err, BRK);
        assert_eq!(samples_in(&out, BRK, "repeat_calls"), CALLS, "{err}");
    }
}

#[test]
fn page_faults_are_counted_once_across_a_resize() {
    if !require_perf("page faults across a resize") {
        return;
    }
    let prog = fixture("pagefault", Variant::NoFp);
    let dir = scratch();
    let pages = 20_000u64;
    for overlap in ["0", "5"] {
        let out = dir.path().join(format!("pf-{overlap}.data"));
        let args = [pages.to_string()];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let env = [("MEMPERF_RESIZE_OVERLAP_MS", overlap)];
        let err = record_env(&out, &["-e", "page-faults"], (&prog, &args), &env);
        assert_resized(&err, "page-faults");
        assert_eq!(
            samples_in(&out, "page-faults", "touch_pages"),
            pages,
            "{err}"
        );
    }
}

#[test]
fn memperfs_child_before_its_exec_is_left_out_of_a_system_wide_recording() {
    if !require_perf("memperf's child in a system-wide recording") {
        return;
    }
    // Its faults between the fork and the exec (under GatedChild::spawn, named memperf)
    // were memperf's own; the command's are all there.
    let prog = fixture("pagefault", Variant::NoFp);
    let dir = scratch();
    let out = dir.path().join("a.data");
    let pages = 3000u64;
    let err = record_env(
        &out,
        &["-a", "-e", "page-faults"],
        (&prog, &[&pages.to_string()]),
        &[],
    );
    let samples = perf_script(&out);
    let chain = ["touch_pages", "pf_level3", "pf_level2", "pf_level1", "main"];
    let command: Vec<_> = samples.iter().filter(|s| s.has_chain(&chain)).collect();
    assert_eq!(command.len() as u64, pages, "{err}");
    // Other memperf processes (other tests') may run meanwhile: the command's pid only.
    let pid = command[0].tid;
    let before_exec: Vec<_> = samples
        .iter()
        .filter(|s| s.tid == pid)
        .filter(|s| {
            s.comm == "memperf"
                || s.frames
                    .iter()
                    .any(|f| f.contains("child_after_fork") || f.contains("GatedChild"))
        })
        .collect();
    assert!(
        before_exec.is_empty(),
        "memperf's child before its exec: {before_exec:?}\n{err}"
    );
}
