//! `memperf leak` against workloads with known answers: exact leaked bytes and counts, the
//! leaking function's callers, frees that cancel, probes removed on every way out.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::*;

/// Ring pages per CPU for the exact-count tests: 64 MiB holds a whole run's samples, so a
/// reader starved by a busy machine cannot make the kernel drop events.
const RING: &str = "16384";

/// One stack of a memleak report: its totals and frame names (leaf first).
#[derive(Debug, Clone)]
struct LeakStack {
    bytes: u64,
    allocs: u64,
    frames: Vec<String>,
}

impl LeakStack {
    fn has(&self, name: &str) -> bool {
        self.frames.iter().any(|f| f == name)
    }
}

/// The reports in memleak's layout: each `[HH:MM:SS] Top N stacks...` block's stacks.
fn parse_reports(text: &str) -> Vec<Vec<LeakStack>> {
    let mut reports: Vec<Vec<LeakStack>> = Vec::new();
    for line in text.lines() {
        if line.starts_with('[') && line.contains("stacks with outstanding allocations:") {
            reports.push(Vec::new());
        } else if let Some(rest) = line.strip_prefix('\t')
            && !rest.starts_with('\t')
            && rest.contains(" bytes in ")
        {
            let words: Vec<&str> = rest.split_whitespace().collect();
            let stack = LeakStack {
                bytes: words[0].parse().unwrap(),
                allocs: words[3].parse().unwrap(),
                frames: Vec::new(),
            };
            reports
                .last_mut()
                .expect("a stack before any report")
                .push(stack);
        } else if let Some(frame) = line.strip_prefix("\t\t") {
            // `0x...\tname+0xoff [module]`
            let name = frame
                .split('\t')
                .nth(1)
                .unwrap_or(frame)
                .split(['+', ' '])
                .next()
                .unwrap_or("")
                .to_string();
            let stacks = reports.last_mut().expect("a frame before any report");
            stacks
                .last_mut()
                .expect("a frame before any stack")
                .frames
                .push(name);
        }
    }
    reports
}

/// The stacks of the last report that name `frame`.
fn stacks_naming(text: &str, frame: &str) -> Vec<LeakStack> {
    let reports = parse_reports(text);
    let last = reports
        .last()
        .unwrap_or_else(|| panic!("no report in:\n{text}"));
    last.iter().filter(|s| s.has(frame)).cloned().collect()
}

/// The probe groups memperf process `pid` created that are still in uprobe_events.
fn leftover_probes(pid: u32) -> Vec<String> {
    let text = std::fs::read_to_string("/sys/kernel/tracing/uprobe_events")
        .or_else(|_| std::fs::read_to_string("/sys/kernel/debug/tracing/uprobe_events"))
        .unwrap_or_default();
    let group = format!(":memperf_{pid}/");
    text.lines()
        .filter(|l| l.contains(&group))
        .map(str::to_string)
        .collect()
}

fn assert_leak_found(out: &str, n: u64, variant: Variant) {
    let leaks = stacks_naming(out, "leaker");
    assert_eq!(leaks.len(), 1, "{variant:?}: one leaking stack in:\n{out}");
    let s = &leaks[0];
    assert_eq!(
        (s.bytes, s.allocs),
        (n * 8192, n),
        "{variant:?}: leaked bytes and count in:\n{out}"
    );
    // The caller chain, leaf first, down to the thread start.
    let want = ["leaker", "leak_level1", "leak_thread", "start_thread"];
    assert_eq!(
        &s.frames[..4],
        &want,
        "{variant:?}: the leak's callers in:\n{out}"
    );
    assert!(
        stacks_naming(out, "churn").is_empty(),
        "{variant:?}: churn frees what it allocates:\n{out}"
    );
}

#[test]
fn leak_command_reports_exactly_the_leaked_blocks_in_both_builds() {
    if !require_perf("memperf leak -c") {
        return;
    }
    let _turn = recording_turn();
    for variant in Variant::ALL {
        let prog = fixture("leak", variant);
        let cmd = format!("{} 100 1000", prog.display());
        let o = run_memperf(&["leak", "-m", RING, "-c", &cmd]);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(o.status.success(), "{}\n{out}", stderr(&o));
        assert!(out.starts_with("Attaching to pid "), "{out}");
        assert!(
            out.contains("leaked 100"),
            "the command's own output: {out}"
        );
        assert_leak_found(&out, 100, variant);
        // glibc's arena reservation for the new thread (an mmap inside malloc) is the
        // allocator's own business, not an outstanding allocation of the program.
        let reports = parse_reports(&out);
        let last = reports.last().unwrap();
        assert!(
            last.iter().all(|s| s.bytes < 64 << 20),
            "no arena reservation in:\n{out}"
        );
    }
}

/// Reads a child's stdout lines on a thread, so a test can wait for a line with a timeout.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn wait_for_line(rx: &mpsc::Receiver<String>, needle: &str, seen: &mut String) {
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("no line with `{needle}` in:\n{seen}"));
        seen.push_str(&line);
        seen.push('\n');
        if line.contains(needle) {
            return;
        }
    }
}

#[test]
fn leak_attached_with_p_sees_what_happens_after_attach() {
    if !require_perf("memperf leak -p") {
        return;
    }
    let _turn = recording_turn();
    for variant in Variant::ALL {
        let mut target = Command::new(fixture("leak", variant))
            .args(["60", "500", "wait"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let pid = target.id().to_string();
        let mut leak = common::memperf()
            .args(["leak", "-m", RING, "-p", &pid])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let rx = lines_of(&mut leak);
        let mut out = String::new();
        wait_for_line(&rx, "Attaching to pid", &mut out);
        // Attached: now let the workload run.
        target.stdin.take().unwrap().write_all(b"go\n").unwrap();
        assert!(target.wait().unwrap().success());
        let status = leak.wait().unwrap();
        out.extend(rx.iter().map(|l| l + "\n"));
        assert!(status.success(), "{out}");
        assert_leak_found(&out, 60, variant);
        assert!(leftover_probes(leak.id()).is_empty());
    }
}

#[test]
fn realloc_posix_memalign_mmap_munmap_and_mremap_are_accounted() {
    if !require_perf("memperf leak accounting") {
        return;
    }
    let _turn = recording_turn();
    let prog = fixture("allocs", Variant::NoFp);
    let o = run_memperf(&["leak", "-m", RING, "-c", prog.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}\n{out}", stderr(&o));
    let page = 4096;
    // aligned() has two call sites: four results through a local variable (read from the
    // stack copied at the return), three through a global array (read from the process).
    let aligned = stacks_naming(&out, "aligned");
    let total = aligned
        .iter()
        .fold((0, 0), |(b, n), s| (b + s.bytes, n + s.allocs));
    assert_eq!(total, (15_000, 5), "{out}");
    assert!(aligned.iter().all(|s| s.frames[0] == "aligned"), "{out}");
    // grow's realloc(q, 0) frees q through the probed free: that free is counted once.
    assert_eq!(traced_counts(&joined(&stderr(&o)))[2], 0, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("4 posix_memalign results read from the stack"),
        "{}",
        stderr(&o)
    );
    for (func, bytes, allocs) in [
        ("grow", 10_000, 1),
        ("mapper", 13 * page, 3),
        ("remapper", 8 * page, 1),
    ] {
        let s = stacks_naming(&out, func);
        assert_eq!(s.len(), 1, "{func}: one stack in:\n{out}");
        assert_eq!(
            (s[0].bytes, s[0].allocs, s[0].frames[0].as_str()),
            (bytes, allocs, func),
            "{func} in:\n{out}"
        );
        assert_eq!(s[0].frames[1], "main", "{func} in:\n{out}");
    }
}

#[test]
fn kernel_mode_shows_kernel_stacks_and_kfree_cancels_kmalloc() {
    if !require_perf("memperf leak kernel mode") {
        return;
    }
    let _turn = recording_turn();
    // 200 eventfds, 50 closed again: 150 eventfd_ctx objects stay allocated while the
    // workload waits on its stdin (kept open by the test).
    let prog = fixture("kleak", Variant::NoFp);
    let cmd = format!("{} 200 50", prog.display());
    let mut leak = common::memperf()
        .args([
            "leak", "-m", RING, "--kernel", "-o", "0", "-c", &cmd, "1", "2",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = lines_of(&mut leak);
    // Child::wait closes stdin first: hold it, or the workload sees EOF and exits early.
    let stdin = leak.stdin.take();
    let status = leak.wait().unwrap();
    drop(stdin);
    let out: String = rx.iter().map(|l| l + "\n").collect();
    assert!(status.success(), "{out}");
    let reports = parse_reports(&out);
    assert_eq!(
        reports.len(),
        2,
        "two reports (interval 1, count 2):\n{out}"
    );
    let ctx: Vec<&LeakStack> = reports[1]
        .iter()
        .filter(|s| s.has("do_eventfd") && s.frames[0].contains("kmalloc"))
        .collect();
    assert_eq!(ctx.len(), 1, "the eventfd_ctx kmalloc stack in:\n{out}");
    assert_eq!(ctx[0].allocs, 150, "{out}");
    assert_eq!(ctx[0].bytes % 150, 0, "{out}");
    assert!(
        ctx[0].has("__x64_sys_eventfd2") || ctx[0].has("__do_sys_eventfd2"),
        "{out}"
    );
    // -z as an in-kernel filter: the 64-byte contexts are no longer seen.
    let o = run_memperf(&[
        "leak", "-m", RING, "--kernel", "-o", "0", "-z", "4096", "-c", &cmd, "1", "1",
    ]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}\n{out}", stderr(&o));
    let last = parse_reports(&out).pop().unwrap();
    assert!(last.iter().all(|s| s.bytes >= 4096 * s.allocs), "{out}");
    assert!(
        !last
            .iter()
            .any(|s| s.has("do_eventfd") && s.frames[0].contains("kmalloc")),
        "{out}"
    );
}

#[test]
fn probes_are_removed_after_sigint_sigterm_and_the_command_exiting() {
    if !require_perf("memperf leak probe cleanup") {
        return;
    }
    let _turn = recording_turn();
    let prog = fixture("leak", Variant::NoFp);
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let cmd = format!("{} 10 10 wait", prog.display());
        let mut leak = common::memperf()
            .args(["leak", "-c", &cmd])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let rx = lines_of(&mut leak);
        let mut out = String::new();
        wait_for_line(&rx, "Attaching to pid", &mut out);
        assert!(
            !leftover_probes(leak.id()).is_empty(),
            "probes exist while tracing"
        );
        // SAFETY-free: kill(2) on a child we own.
        unsafe_free_kill(leak.id(), sig);
        let status = leak.wait().unwrap();
        out.extend(rx.iter().map(|l| l + "\n"));
        assert!(status.success(), "signal {sig}: {out}");
        assert!(
            out.contains("stacks with outstanding allocations"),
            "a final report after signal {sig}:\n{out}"
        );
        assert_eq!(
            leftover_probes(leak.id()),
            Vec::<String>::new(),
            "signal {sig}"
        );
    }
    // The command exiting on its own.
    let cmd = format!("{} 10 10", prog.display());
    let leak = common::memperf()
        .args(["leak", "-c", &cmd])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = leak.id();
    assert!(leak.wait_with_output().unwrap().status.success());
    assert!(leftover_probes(pid).is_empty());
}

/// Sends `sig` to `pid` through the `kill` command (tests keep `unsafe` out).
fn unsafe_free_kill(pid: u32, sig: i32) {
    let st = Command::new("kill")
        .args([format!("-{sig}"), pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
}

#[test]
fn bad_leak_input_gets_clear_errors() {
    if !require_perf("memperf leak bad input") {
        return;
    }
    let expect_err = |args: &[&str], needle: &str| {
        let o = run_memperf(args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    };
    expect_err(&["leak", "-p", "999999999"], "no such process: 999999999");
    let prog = fixture("allocs", Variant::NoFp);
    let prog = prog.to_str().unwrap();
    expect_err(
        &["leak", "-O", "/etc/passwd", "-c", prog],
        "`/etc/passwd` is not an ELF object memperf can probe",
    );
    expect_err(&["leak", "-O", prog, "-c", prog], "has no `malloc`");
    // A statically linked program has no libc to probe.
    let dir = scratch();
    let stat = dir.path().join("static-allocs");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/allocs.c");
    let st = Command::new("cc")
        .args(["-static", "-O2", "-o"])
        .arg(&stat)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success(), "cc -static (libc6-dev's libc.a)");
    expect_err(
        &["leak", "-c", stat.to_str().unwrap()],
        "does not link against libc (statically linked?)",
    );
    expect_err(&["leak", "-c", "/nonexistent/program"], "not found");
}

fn leak_run(args: &[&str]) -> String {
    let o = run_memperf(args);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{args:?}: {}\n{out}", stderr(&o));
    out
}

#[test]
fn trace_show_allocs_and_size_filters_print_what_memleak_prints() {
    if !require_perf("memperf leak -t -a -z -Z") {
        return;
    }
    let _turn = recording_turn();
    let prog = fixture("leak", Variant::NoFp);
    let cmd = format!("{} 40 100", prog.display());
    // Only 8 KiB blocks: the leak, not stdio's buffer, the thread's stack or its TLS.
    let out = leak_run(&[
        "leak", "-m", RING, "-t", "-a", "-z", "8192", "-Z", "8192", "-c", &cmd,
    ]);
    let exited = out
        .lines()
        .filter(|l| l.contains("alloc exited, size = 8192, result = "))
        .count();
    assert_eq!(exited, 40, "-t prints each allocation:\n{out}");
    let addrs = out
        .lines()
        .filter(|l| l.starts_with("\taddr = ") && l.ends_with(" size = 8192"))
        .count();
    assert_eq!(addrs, 40, "-a lists each outstanding block:\n{out}");
    let reports = parse_reports(&out);
    let last = reports.last().unwrap();
    assert_eq!(last.len(), 1, "only the 8 KiB stack passes -z/-Z:\n{out}");
    assert_eq!((last[0].bytes, last[0].allocs), (40 * 8192, 40));
    // --sort count -T 1: the stack with the most allocations, which is the leak.
    let out = leak_run(&["leak", "-m", RING, "--sort", "count", "-T", "1", "-c", &cmd]);
    let last = parse_reports(&out).pop().unwrap();
    assert_eq!(last.len(), 1, "{out}");
    assert_eq!(last[0].allocs, 40, "{out}");
    assert!(
        out.contains("Top 1 stacks with outstanding allocations:"),
        "{out}"
    );
}

#[test]
fn sampled_stacks_keep_exact_totals() {
    if !require_perf("memperf leak -s") {
        return;
    }
    let _turn = recording_turn();
    let prog = fixture("leak", Variant::NoFp);
    let cmd = format!("{} 200 2000", prog.display());
    let totals = |out: &str| -> (u64, u64) {
        let last = parse_reports(out).pop().unwrap();
        last.iter()
            .fold((0, 0), |(b, n), s| (b + s.bytes, n + s.allocs))
    };
    let all = leak_run(&["leak", "-m", RING, "-T", "100", "-c", &cmd]);
    let sampled = leak_run(&["leak", "-m", RING, "-T", "100", "-s", "10", "-c", &cmd]);
    // Every allocation and free is still matched: the outstanding totals are the same.
    assert_eq!(totals(&sampled), totals(&all), "{all}\n---\n{sampled}");
    // Some leaks carry their stack, the others are counted without one.
    let with_stack = stacks_naming(&sampled, "leaker");
    assert_eq!(with_stack.len(), 1, "{sampled}");
    assert!(
        (1..200).contains(&with_stack[0].allocs),
        "one stack in 10 is copied: {sampled}"
    );
    assert!(
        sampled.contains("[stack not sampled: -s 10 copies one stack in 10]"),
        "{sampled}"
    );
    assert!(stacks_naming(&sampled, "churn").is_empty(), "{sampled}");
}

#[test]
fn folded_and_pprof_outputs_weigh_outstanding_bytes() {
    if !require_perf("memperf leak --folded --pprof") {
        return;
    }
    let _turn = recording_turn();
    let prog = fixture("leak", Variant::NoFp);
    let cmd = format!("{} 30 100", prog.display());
    let folded = leak_run(&["leak", "-m", RING, "--folded", "-c", &cmd]);
    let leak_lines: Vec<&str> = folded.lines().filter(|l| l.contains(";leaker ")).collect();
    assert_eq!(leak_lines.len(), 1, "{folded}");
    assert!(
        leak_lines[0].starts_with("leak-nofp;")
            && leak_lines[0].ends_with(";start_thread;leak_thread;leak_level1;leaker 245760"),
        "{folded}"
    );
    assert!(!folded.contains("churn"), "{folded}");
    assert!(
        !folded.contains("Top "),
        "no interval reports in folded output:\n{folded}"
    );
    if !have_go() {
        return;
    }
    let dir = scratch();
    let pb = dir.path().join("leak.pb.gz");
    let o = run_memperf(&[
        "leak",
        "-m",
        RING,
        "--pprof",
        pb.to_str().unwrap(),
        "-c",
        &cmd,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let pprof = |args: &[&str]| go_pprof(&pb, args);
    let raw = pprof(&["-raw"]);
    assert!(
        raw.contains("outstanding/count outstanding_bytes/bytes"),
        "{raw}"
    );
    let leaf = |text: &str| pprof_flat(text, "leaker");
    assert_eq!(leaf(&pprof(&["-top", "-sample_index=0"])), vec!["30"]);
    assert_eq!(leaf(&pprof(&["-top", "-sample_index=1"])), vec!["240kB"]);
}

#[test]
fn the_uprobe_pmu_accounts_like_tracefs() {
    if !require_perf("memperf leak --probe-via pmu") {
        return;
    }
    let _turn = recording_turn();
    let prog = fixture("allocs", Variant::Fp);
    let o = run_memperf(&[
        "leak",
        "-m",
        RING,
        "--probe-via",
        "pmu",
        "-c",
        prog.to_str().unwrap(),
    ]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}\n{out}", stderr(&o));
    assert!(
        stderr(&o).contains("probing through the uprobe PMU"),
        "{}",
        stderr(&o)
    );
    for (func, bytes, allocs) in [("grow", 10_000, 1), ("mapper", 13 * 4096, 3)] {
        let s = stacks_naming(&out, func);
        assert_eq!(s.len(), 1, "{func}: {out}");
        assert_eq!((s[0].bytes, s[0].allocs), (bytes, allocs), "{func}: {out}");
    }
}

#[test]
fn lost_events_are_reported_with_every_report() {
    if !require_perf("memperf leak losses") {
        return;
    }
    let _turn = recording_turn();
    // A one-page ring cannot hold one sample with an 8 KiB stack copy: everything is lost.
    let prog = fixture("leak", Variant::NoFp);
    let cmd = format!("{} 20 100", prog.display());
    let o = run_memperf(&["leak", "-m", "1", "-c", &cmd]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}\n{out}", stderr(&o));
    let warning = out
        .lines()
        .find(|l| l.starts_with("WARNING: ") && l.contains(" events lost (ring buffer full)"))
        .unwrap_or_else(|| panic!("no loss warning in:\n{out}"));
    let n: u64 = warning.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert!(n > 0, "{warning}");
    assert!(
        stderr(&o).contains(&format!("lost {n} events")),
        "{}",
        stderr(&o)
    );
    // A lost event can be a free or an allocation: both ways are said, as the warning does.
    assert!(
        stderr(&o).contains("may be overstated (a lost free looks like a leak) or understated"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn probes_a_killed_run_left_are_removed_at_the_next_start() {
    if !require_perf("memperf leak stale probes") {
        return;
    }
    let _turn = recording_turn();
    let root = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .into_iter()
        .find(|r| std::path::Path::new(r).join("uprobe_events").exists())
        .expect("tracefs with uprobe_events");
    let events = std::path::Path::new(root).join("uprobe_events");
    // A group named after a pid that cannot exist (above any pid_max), as SIGKILL leaves it.
    let libc = std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("/libc.so"))
        .expect("this test links libc")
        .to_string();
    let stale = format!("p:memperf_999999999/stale {libc}:0x0\n");
    std::fs::OpenOptions::new()
        .append(true)
        .open(&events)
        .unwrap()
        .write_all(stale.as_bytes())
        .unwrap();
    assert!(!leftover_probes(999_999_999).is_empty());
    let prog = fixture("allocs", Variant::NoFp);
    let o = run_memperf(&["leak", "-c", prog.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(leftover_probes(999_999_999), Vec::<String>::new());
}

/// The stacks of the last report and the allocations its `Not shown:` lines account for.
fn last_table_totals(out: &str) -> (u64, u64) {
    let shown: u64 = parse_reports(out)
        .last()
        .unwrap_or_else(|| panic!("no report in:\n{out}"))
        .iter()
        .map(|s| s.allocs)
        .sum();
    let last = out
        .rsplit_once("stacks with outstanding allocations:")
        .unwrap()
        .1;
    let not_shown: u64 = last
        .lines()
        .filter_map(|l| l.strip_prefix("Not shown: "))
        .map(|l| l.split_whitespace().next().unwrap().parse::<u64>().unwrap())
        .sum();
    (shown, not_shown)
}

/// The numbers of memperf's "traced A allocations and F frees (B frees of blocks allocated
/// before tracing began); O outstanding" line.
fn traced_counts(err: &str) -> [u64; 4] {
    let line = err
        .lines()
        .find(|l| l.starts_with("memperf: traced "))
        .unwrap_or_else(|| panic!("no traced line in:\n{err}"));
    let nums: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    [nums[0], nums[1], nums[2], nums[3]]
}

/// The summary's `N outstanding at the end`.
fn outstanding_at_the_end(err: &str) -> u64 {
    traced_counts(err)[3]
}

#[test]
fn leak_runs_the_command_after_double_dash_as_every_other_command_does() {
    if !require_perf("memperf leak -- CMD") {
        return;
    }
    let _turn = recording_turn();
    let prog = fixture("leak", Variant::NoFp);
    let prog = prog.to_str().unwrap();
    for args in [
        &["leak", "-m", RING, "--", prog, "25", "100"][..],
        // INTERVAL (and COUNT) still come before the command.
        &["leak", "-m", RING, "30", "--", prog, "25", "100"],
    ] {
        let out = leak_run(args);
        assert!(out.starts_with("Attaching to pid "), "{args:?}: {out}");
        assert!(out.contains("leaked 25"), "the command's own line: {out}");
        assert_leak_found(&out, 25, Variant::NoFp);
    }
    // -p and a command name two targets.
    let o = run_memperf(&["leak", "-p", "1", "--", prog]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn folded_and_pprof_on_standard_output_keep_the_programs_lines_out() {
    if !require_perf("memperf leak --folded > file") {
        return;
    }
    let _turn = recording_turn();
    let prog = fixture("leak", Variant::NoFp);
    let cmd = format!("{} 30 100", prog.display());
    let o = run_memperf(&["leak", "-m", RING, "--folded", "-c", &cmd]);
    let (out, err) = (String::from_utf8_lossy(&o.stdout).into_owned(), stderr(&o));
    assert!(o.status.success(), "{err}");
    // Every line is a stack and its bytes; the program's own line went to stderr.
    for line in out.lines() {
        let (stack, bytes) = line.rsplit_once(' ').unwrap_or(("", ""));
        assert!(
            stack.contains(';') && bytes.parse::<u64>().is_ok(),
            "not a folded line: `{line}` in:\n{out}"
        );
    }
    assert!(out.contains(";leaker 245760"), "{out}");
    assert!(err.contains("leaked 30\n"), "{err}");
    assert!(err.contains("Attaching to pid "), "{err}");
    // A profile on standard output is the profile alone: gzip from its first byte, and
    // nothing after it (go tool pprof reads it whole when it is there).
    let o = run_memperf(&["leak", "-m", RING, "--pprof", "-", "-c", &cmd]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(o.stdout[..2], [0x1f, 0x8b], "not gzip from the first byte");
    assert!(stderr(&o).contains("leaked 30\n"), "{}", stderr(&o));
    if have_go() {
        let dir = scratch();
        let pb = dir.path().join("leak.pb.gz");
        std::fs::write(&pb, &o.stdout).unwrap();
        let top = go_pprof(&pb, &["-top", "-sample_index=0"]);
        assert_eq!(pprof_flat(&top, "leaker"), vec!["30"], "{top}");
    }
}

#[test]
fn a_short_programs_final_report_shows_its_young_leaks() {
    if !require_perf("memperf leak on a short program") {
        return;
    }
    let _turn = recording_turn();
    // `quick`: the program exits right after leaking, its blocks younger than -o's 500 ms.
    let prog = fixture("leak", Variant::NoFp);
    let cmd = format!("{} 40 100 quick", prog.display());
    let o = run_memperf(&["leak", "-m", RING, "-c", &cmd]);
    let (out, err) = (String::from_utf8_lossy(&o.stdout).into_owned(), stderr(&o));
    assert!(o.status.success(), "{err}\n{out}");
    assert_leak_found(&out, 40, Variant::NoFp);
    assert!(!out.contains("Not shown"), "{out}");
    let (shown, not_shown) = last_table_totals(&out);
    assert_eq!(
        (shown, not_shown),
        (outstanding_at_the_end(&err), 0),
        "{out}\n{err}"
    );
    // Folded, the same: the program exited, its leaks are all it left.
    let o = run_memperf(&["leak", "-m", RING, "--folded", "-c", &cmd]);
    let folded = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(folded.contains(";leaker 327680\n"), "{folded}");
}

#[test]
fn the_table_and_the_summary_agree_or_say_what_the_table_leaves_out() {
    if !require_perf("memperf leak totals") {
        return;
    }
    let _turn = recording_turn();
    let prog = fixture("leak", Variant::NoFp);
    // -T 1: the stacks below the top one are counted.
    let cmd = format!("{} 30 100", prog.display());
    let o = run_memperf(&["leak", "-m", RING, "-T", "1", "-c", &cmd]);
    let (out, err) = (String::from_utf8_lossy(&o.stdout).into_owned(), stderr(&o));
    assert!(o.status.success(), "{err}\n{out}");
    let (shown, not_shown) = last_table_totals(&out);
    assert!(not_shown > 0, "{out}");
    assert_eq!(
        shown + not_shown,
        outstanding_at_the_end(&err),
        "{out}\n{err}"
    );
    assert!(out.contains("stacks below the top 1 (-T)"), "{out}");
    // -o 60000 and one report after a second, while the program waits on its standard
    // input (held open here): everything outstanding is younger, and said so.
    let cmd = format!("{} 30 100 wait", prog.display());
    let mut leak = common::memperf()
        .args(["leak", "-m", RING, "-o", "60000", "-c", &cmd, "1", "1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = leak.stdin.take();
    let o = leak.wait_with_output().unwrap();
    drop(stdin);
    let (out, err) = (String::from_utf8_lossy(&o.stdout).into_owned(), stderr(&o));
    assert!(o.status.success(), "{err}\n{out}");
    let (shown, not_shown) = last_table_totals(&out);
    assert_eq!(shown, 0, "{out}");
    assert_eq!(not_shown, outstanding_at_the_end(&err), "{out}\n{err}");
    assert!(out.contains("younger than 60000 ms (-o)"), "{out}");
}

/// Each allocation of `fixtures/handoff.c` gets the block another thread freed a moment
/// before (one arena, no thread cache), so its record depends on one written by the other
/// thread, most often on the other CPU's ring: handed on out of order, a block would be
/// allocated twice and then freed twice. The fixture's 100,000 handed-off blocks are all
/// freed and its 1,000 kept ones are outstanding, exactly.
#[test]
fn blocks_freed_by_one_thread_and_reused_by_another_are_matched_in_order() {
    if !require_perf("memperf leak, cross-thread reuse") {
        return;
    }
    let _turn = recording_turn();
    let prog = fixture("handoff", Variant::NoFp);
    let o = memperf()
        // memperf's own allocator takes the tunables too: harmless, and the fixture must
        // start with them.
        .env(
            "GLIBC_TUNABLES",
            "glibc.malloc.arena_max=1:glibc.malloc.tcache_count=0",
        )
        .args([
            "leak",
            "-m",
            RING,
            "--",
            prog.to_str().unwrap(),
            "100000",
            "1000",
        ])
        .output()
        .expect("run memperf");
    let (out, err) = (String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("handoff rounds 100000 reused 99999 kept 1000"),
        "the allocator did not hand the freed blocks on:\n{err}"
    );
    assert!(!err.contains("lost"), "{err}");
    let [allocs, frees, before, outstanding] = traced_counts(&err);
    assert!(allocs >= 101_000 && frees >= 100_000, "{err}");
    // The dynamic loader's one free of a block of its own before the program starts.
    assert!(before <= 1, "frees of unknown blocks:\n{err}");
    assert_eq!(allocs + before - frees, outstanding, "{err}");
    let kept = stacks_naming(&out, "keep");
    assert_eq!(kept.len(), 1, "{out}");
    assert_eq!((kept[0].bytes, kept[0].allocs), (40_000, 1000), "{out}");
    assert!(stacks_naming(&out, "produce").is_empty(), "{out}");
}
