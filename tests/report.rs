#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `memperf report` on recordings of workloads with known answers: memperf's own files
//! (golden folded output) and files made by `perf record -g` and `--call-graph dwarf`
//! (checked against perf script), plus bad input.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;

const CHAIN_ROOT_FIRST: &str = "main;pf_level1;pf_level2;pf_level3;touch_pages";

fn report(args: &[&str]) -> Output {
    let mut all = vec!["report", "-q"];
    all.extend_from_slice(args);
    run_memperf(&all)
}

fn report_ok(args: &[&str]) -> String {
    let o = report(args);
    assert!(
        o.status.success(),
        "memperf report {args:?}: {}",
        stderr(&o)
    );
    let err = stderr(&o);
    assert!(!err.contains("panicked"), "{err}");
    String::from_utf8(o.stdout).expect("utf-8 report")
}

/// Folded lines as (stack, count).
fn folded(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .map(|l| {
            let (stack, n) = l.rsplit_once(' ').expect("`stack count`");
            (stack.to_string(), n.parse().expect("a count"))
        })
        .collect()
}

fn expected_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/expected")
        .join(name)
}

/// Compares with `fixtures/expected/NAME`, or rewrites it under MEMPERF_BLESS=1.
fn golden(name: &str, actual: &str) {
    let path = expected_path(name);
    if std::env::var_os("MEMPERF_BLESS").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (bless with MEMPERF_BLESS=1)", path.display()));
    assert_eq!(
        actual,
        want,
        "folded output differs from {} (re-bless with MEMPERF_BLESS=1 if intended)",
        path.display()
    );
}

/// Records `fixture N` with memperf and returns the folded lines that contain `needle`.
fn record_and_fold(fixture_name: &str, event: &str, n: u32, needle: &str) -> String {
    let dir = scratch();
    let out = dir.path().join("r.data");
    let prog = fixture(fixture_name, Variant::NoFp);
    // 3000 dwarf samples are 25 MB: more than the default ring (16 MiB per CPU as root), so
    // with the CPUs busy with other tests the recorder could fall behind and lose some. As
    // root, a ring that holds the whole burst makes the count independent of scheduling.
    let mut opts = vec!["-e", event];
    if is_root() {
        opts.extend(["-m", "16384"]);
    }
    let o = record(&out, &opts, &prog, &[&n.to_string()]);
    let err = stderr(&o);
    assert!(err.contains("lost 0 events"), "{err}");
    let text = report_ok(&["--folded", "--event", event, "-i", out.to_str().unwrap()]);
    let mut lines: Vec<&str> = text.lines().filter(|l| l.contains(needle)).collect();
    lines.sort_unstable();
    lines.iter().map(|l| format!("{l}\n")).collect()
}

#[test]
fn golden_folded_stacks_of_the_fixture_workloads() {
    if !require_perf("report goldens") {
        return;
    }
    let pf = record_and_fold("pagefault", "page-faults", 3000, CHAIN_ROOT_FIRST);
    // The whole chain, from the C runtime to the leaf, in every one of the N samples.
    assert_eq!(
        folded(&pf).iter().map(|(_, n)| n).sum::<u64>(),
        3000,
        "{pf}"
    );
    golden("pagefault-nofp.folded", &pf);

    let brk = record_and_fold("brk", "syscalls:sys_enter_brk", 64, "grow_heap");
    assert_eq!(
        folded(&brk).iter().map(|(_, n)| n).sum::<u64>(),
        64,
        "{brk}"
    );
    golden("brk-nofp.folded", &brk);

    let mmap = record_and_fold("mmap", "syscalls:sys_enter_mmap", 40, "map_regions");
    assert_eq!(
        folded(&mmap).iter().map(|(_, n)| n).sum::<u64>(),
        40,
        "{mmap}"
    );
    golden("mmap-nofp.folded", &mmap);
}

/// perf script's samples folded root first from `main` down, for those with the chain.
fn perf_chain_stacks(file: &Path) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for s in perf_script(file) {
        let mut frames: Vec<&str> = s.frames.iter().map(String::as_str).collect();
        frames.reverse();
        let joined = frames.join(";");
        if let Some(at) = joined.find(CHAIN_ROOT_FIRST) {
            *out.entry(joined[at..].to_string()).or_insert(0) += 1;
        }
    }
    out
}

/// memperf's folded stacks from `main` down, for those with the chain.
fn memperf_chain_stacks(text: &str) -> BTreeMap<String, u64> {
    stacks_from(text, CHAIN_ROOT_FIRST)
}

/// memperf's folded stacks from `root` (`main;...`) down, for those that hold it.
fn stacks_from(text: &str, root: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (stack, n) in folded(text) {
        if let Some(at) = stack.find(root) {
            *out.entry(stack[at..].to_string()).or_insert(0) += n;
        }
    }
    out
}

fn perf_record(out: &Path, opts: &[&str], prog: &Path, n: u32) {
    let _turn = recording_turn();
    let o = Command::new("perf")
        .args([
            "record",
            "-q",
            "-e",
            "page-faults",
            "-c",
            "1",
            "-m",
            "4096",
            "-o",
        ])
        .arg(out)
        .args(opts)
        .arg("--")
        .arg(prog)
        .arg(n.to_string())
        .output()
        .expect("run perf record");
    assert!(o.status.success(), "perf record: {}", stderr(&o));
}

#[test]
fn perf_frame_pointer_recording_folds_like_perf_script() {
    if !require_perf("perf -g interop") || !require_perf_tool("perf -g interop") {
        return;
    }
    const N: u32 = 500;
    let dir = scratch();
    let out = dir.path().join("perf-g.data");
    perf_record(&out, &["-g"], &fixture("pagefault", Variant::Fp), N);
    let ours = memperf_chain_stacks(&report_ok(&["--folded", "-i", out.to_str().unwrap()]));
    let perfs = perf_chain_stacks(&out);
    assert_eq!(ours, perfs, "memperf vs perf script on the chain's stacks");
    assert_eq!(ours.values().sum::<u64>(), u64::from(N), "{ours:?}");
}

#[test]
fn perf_dwarf_recording_is_unwound_offline_with_the_full_chain() {
    if !require_perf("perf dwarf interop") || !require_perf_tool("perf dwarf interop") {
        return;
    }
    const N: u32 = 500;
    let dir = scratch();
    let out = dir.path().join("perf-dwarf.data");
    perf_record(
        &out,
        &["--call-graph", "dwarf"],
        &fixture("pagefault", Variant::NoFp),
        N,
    );
    let text = report_ok(&["--folded", "-i", out.to_str().unwrap()]);
    let ours = memperf_chain_stacks(&text);
    let perfs = perf_chain_stacks(&out);
    // Every sample perf kept (it may drop some when its ring fills) carries the whole chain,
    // unwound here from the raw stack bytes of a binary without frame pointers.
    let kept = perf_script(&out)
        .iter()
        .filter(|s| s.has_frame("touch_pages"))
        .count() as u64;
    assert!(kept > 0, "perf kept no sample of the workload");
    assert_eq!(ours.values().sum::<u64>(), kept, "{text}");
    // Stack by stack, kernel frames below the leaf included: the same stacks, as often.
    assert_eq!(ours, perfs, "memperf vs perf script on the chain's stacks");
    for stack in ours.keys() {
        assert!(stack.starts_with(CHAIN_ROOT_FIRST), "{stack}");
    }
    // The text report says the stacks were unwound here.
    let header = report_ok(&["-i", out.to_str().unwrap()]);
    assert!(header.contains("# user stacks unwound here:"), "{header}");
}

/// `perf record -q -m 4096 -o - PERF_OPTS -- PROG N`, its stream piped into `memperf report -q
/// -i - REPORT_ARGS` through a tee that keeps a copy in `copy`, which must read the same with
/// `-i COPY`. Returns perf's output (in pipe mode the workload's standard output goes to
/// perf's standard error) and the report.
fn perf_pipe_into_report(
    perf_opts: &[&str],
    (prog, n): (&Path, u32),
    copy: &Path,
    report_args: &[&str],
) -> (Output, String) {
    use std::io::{Read, Write};
    use std::process::Stdio;
    let _turn = recording_turn();
    let mut perf = Command::new("perf")
        .args(["record", "-q", "-m", "4096", "-o", "-"])
        .args(perf_opts)
        .arg("--")
        .arg(prog)
        .arg(n.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run perf record");
    let mut report = memperf()
        .args(["report", "-q", "-i", "-"])
        .args(report_args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run memperf report");
    let (mut from, mut to) = (perf.stdout.take().unwrap(), report.stdin.take().unwrap());
    let mut kept = std::fs::File::create(copy).unwrap();
    let tee = std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = from.read(&mut buf).expect("read perf's stream");
            if n == 0 {
                break;
            }
            kept.write_all(&buf[..n]).unwrap();
            to.write_all(&buf[..n])
                .expect("write memperf's standard input");
        }
    });
    let perf = perf.wait_with_output().expect("wait for perf");
    tee.join().expect("the tee thread");
    let report = report.wait_with_output().expect("wait for memperf");
    assert!(perf.status.success(), "perf record -o -: {}", stderr(&perf));
    assert!(
        report.status.success(),
        "memperf report -i - {report_args:?}: {}",
        stderr(&report)
    );
    let from_stdin = String::from_utf8(report.stdout).unwrap();
    // The stream saved to a file reads as it did through the pipe.
    let from_file = report_ok(&[report_args, &["-i", copy.to_str().unwrap()]].concat());
    assert_eq!(from_stdin, from_file, "-i - and -i {}", copy.display());
    (perf, from_stdin)
}

#[test]
fn perf_pipe_mode_folds_like_file_mode_and_perf_script() {
    let what = "perf -o - -g interop";
    if !require_perf(what) || !require_perf_tool(what) {
        return;
    }
    const N: u32 = 500;
    let dir = scratch();
    let prog = fixture("pagefault", Variant::Fp);
    let copy = dir.path().join("pipe-g.data");
    let opts = ["-e", "page-faults", "-c", "1", "-g"];
    let (_, from_stdin) = perf_pipe_into_report(&opts, (&prog, N), &copy, &["--folded"]);
    let path = copy.to_str().unwrap();
    // perf script reads the stream too: stack by stack, the same as often.
    let ours = memperf_chain_stacks(&from_stdin);
    assert_eq!(ours, perf_chain_stacks(&copy), "memperf vs perf script");
    assert_eq!(ours.values().sum::<u64>(), u64::from(N), "{ours:?}");
    // The same workload recorded by perf in file mode: the same user stacks, as often.
    let file = dir.path().join("file-g.data");
    perf_record(&file, &["-g"], &prog, N);
    let user = |p: &str| memperf_chain_stacks(&report_ok(&["--folded", "--user-only", "-i", p]));
    let from_file_mode = user(file.to_str().unwrap());
    assert_eq!(user(path), from_file_mode);
    assert_eq!(
        from_file_mode,
        BTreeMap::from([(CHAIN_ROOT_FIRST.to_string(), u64::from(N))])
    );
    // The header names the event from the stream and who recorded it.
    let text = report_ok(&["-i", path]);
    assert!(text.contains("# event page-faults: "), "{text}");
    assert!(text.contains("perf record -q -m 4096 -o -"), "{text}");
}

#[test]
fn perf_pipe_mode_dwarf_stacks_are_unwound_offline_with_the_full_chain() {
    let what = "perf -o - dwarf interop";
    if !require_perf(what) || !require_perf_tool(what) {
        return;
    }
    const N: u32 = 500;
    let dir = scratch();
    let copy = dir.path().join("pipe-dwarf.data");
    let opts = ["-e", "page-faults", "-c", "1", "--call-graph", "dwarf"];
    let prog = fixture("pagefault", Variant::NoFp);
    let (_, from_stdin) = perf_pipe_into_report(&opts, (&prog, N), &copy, &["--folded"]);
    // Every sample perf kept (it may drop some when its ring fills, as in file mode) has
    // the whole chain, unwound here from the raw stacks in the stream.
    let ours = memperf_chain_stacks(&from_stdin);
    let kept = perf_script(&copy)
        .iter()
        .filter(|s| s.has_frame("touch_pages"))
        .count() as u64;
    assert!(kept > 0, "perf kept no sample of the workload");
    assert_eq!(ours.values().sum::<u64>(), kept, "{from_stdin}");
    assert_eq!(ours, perf_chain_stacks(&copy), "memperf vs perf script");
    assert!(
        ours.keys().all(|s| s.starts_with(CHAIN_ROOT_FIRST)),
        "{ours:?}"
    );
}

#[test]
fn perf_pipe_mode_tracepoints_use_the_tracing_data_in_the_stream() {
    let what = "perf -o - tracepoint interop";
    if !require_perf(what) || !require_perf_tool(what) {
        return;
    }
    const N: u32 = 64;
    const ENTER: &str = "syscalls:sys_enter_brk";
    const CHAIN: &str = "main;brk_level1;grow_heap";
    let dir = scratch();
    let copy = dir.path().join("pipe-brk.data");
    // DWARF stacks: libc's sbrk and brk keep no frame pointer, and a frame-pointer chain
    // taken in the syscall loses the workload's frames.
    let prog = fixture("brk", Variant::NoFp);
    let opts = [
        "-e",
        ENTER,
        "-e",
        "syscalls:sys_exit_brk",
        "--call-graph",
        "dwarf",
    ];
    // Byte weights read the brk argument and the break sys_exit_brk returned through the
    // tracepoint formats, which only the stream's tracing data gives.
    let weigh = ["--folded", "--event", ENTER, "--weight", "bytes"];
    let (perf, bytes) = perf_pipe_into_report(&opts, (&prog, N), &copy, &weigh);
    let growth = printed_heap_growth(&stderr(&perf));
    assert_eq!(growth, u64::from(N) * 8192);
    assert_eq!(grow_heap_bytes(&bytes, "grow_heap"), growth, "{bytes}");

    // The events by the names the stream gives them; each call once, with its chain.
    let path = copy.to_str().unwrap();
    let counts = report_ok(&["--folded", "--user-only", "--event", ENTER, "-i", path]);
    let ours = stacks_from(&counts, CHAIN);
    assert_eq!(ours.values().sum::<u64>(), u64::from(N), "{counts}");
    // The tracepoint payloads, printed through the stream's print fmts as perf does.
    let o = run_memperf(&["script", "-q", "-i", path]);
    let script = parse_perf_script(&String::from_utf8_lossy(&o.stdout));
    let calls: Vec<&ScriptSample> = script
        .iter()
        .filter(|s| s.event == ENTER && s.has_frame("grow_heap"))
        .collect();
    assert_eq!(calls.len(), N as usize, "{}", stderr(&o));
    assert!(
        calls
            .iter()
            .all(|s| s.header.contains(&format!("{ENTER}: brk: 0x"))),
        "{}",
        calls[0].header
    );

    // The same workload recorded by perf in file mode: the same stacks, as often.
    let file = dir.path().join("file-brk.data");
    let o = {
        let _turn = recording_turn();
        Command::new("perf")
            .args(["record", "-q", "-m", "4096", "-o"])
            .arg(&file)
            .args(opts)
            .arg("--")
            .arg(&prog)
            .arg(N.to_string())
            .output()
            .expect("run perf record")
    };
    assert!(o.status.success(), "perf record: {}", stderr(&o));
    let file = file.to_str().unwrap();
    let from_file_mode = report_ok(&["--folded", "--user-only", "--event", ENTER, "-i", file]);
    assert_eq!(ours, stacks_from(&from_file_mode, CHAIN));
}

#[test]
fn truncated_and_corrupt_pipe_streams_report_what_is_valid() {
    let what = "truncated pipe stream";
    if !require_perf(what) || !require_perf_tool(what) {
        return;
    }
    let dir = scratch();
    let copy = dir.path().join("t-pipe.data");
    let prog = fixture("pagefault", Variant::NoFp);
    let opts = ["-e", "page-faults", "-c", "1"];
    let (_, piped) = perf_pipe_into_report(&opts, (&prog, 2000), &copy, &["--folded"]);
    let full: u64 = folded(&piped).iter().map(|(_, n)| n).sum();
    let bytes = std::fs::read(&copy).unwrap();
    let offsets = record_offsets(&bytes);

    // Cut in the middle of a record: the records before it, then where and how much.
    let mid = offsets[offsets.len() / 2];
    let cut = &bytes[..mid + 20];
    let want = format!("pipe-mode stream is truncated at offset {mid:#x}");
    for o in [
        run_memperf_stdin(&["report", "-q", "--folded", "-i", "-"], cut),
        run_memperf_stdin(&["script", "-q", "-i", "-"], cut),
    ] {
        let err = stderr(&o);
        assert!(o.status.success(), "{err}");
        assert!(
            err.contains(&want) && err.contains("only 20 are left (skipped)"),
            "{err}"
        );
    }
    let o = run_memperf_stdin(&["report", "-q", "--folded", "-i", "-"], cut);
    let part: u64 = folded(&String::from_utf8_lossy(&o.stdout))
        .iter()
        .map(|(_, n)| n)
        .sum();
    assert!(part > 0 && part < full, "{part} of {full}");

    // A record header with size 0 in the middle: the records before it count.
    let mut bad = bytes.clone();
    bad[mid + 6..mid + 8].fill(0);
    let corrupt = dir.path().join("corrupt-pipe.data");
    std::fs::write(&corrupt, &bad).unwrap();
    let text = report_ok(&["-i", corrupt.to_str().unwrap()]);
    assert!(
        text.contains(&format!("record at offset {mid:#x} has size 0")),
        "{text}"
    );

    // Cut inside the first record: nothing describes the events.
    let o = run_memperf_stdin(&["report", "-q", "-i", "-"], &bytes[..40]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("standard input: pipe-mode stream describes no event"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn filters_and_frame_annotations() {
    if !require_perf("report filters") {
        return;
    }
    let dir = scratch();
    let out = dir.path().join("f.data");
    let prog = fixture("pagefault", Variant::NoFp);
    record(&out, &["-e", "page-faults"], &prog, &["200"]);
    let path = out.to_str().unwrap();
    let all = folded(&report_ok(&["--folded", "-i", path]));
    let total: u64 = all.iter().map(|(_, n)| n).sum();
    assert!(total >= 200, "{all:?}");

    // Per-pid prefixes name one process, `comm-PID`.
    let per_pid = folded(&report_ok(&["--folded", "--per-pid", "-i", path]));
    let prefixes: std::collections::BTreeSet<&str> = per_pid
        .iter()
        .map(|(s, _)| s.split(';').next().unwrap())
        .collect();
    assert_eq!(prefixes.len(), 1, "{prefixes:?}");
    let prefix = prefixes.iter().next().unwrap();
    let pid = prefix.rsplit('-').next().unwrap();
    assert!(prefix.starts_with("pagefault-nofp-"), "{prefix}");

    // Filters that match everything or nothing.
    let same = folded(&report_ok(&["--folded", "--pid", pid, "-i", path]));
    assert_eq!(same, all);
    assert!(report_ok(&["--folded", "--pid", "1", "-i", path]).is_empty());
    assert_eq!(
        folded(&report_ok(&[
            "--folded",
            "--comm",
            "pagefault-nofp",
            "-i",
            path
        ])),
        all
    );
    assert!(report_ok(&["--folded", "--comm", "nope", "-i", path]).is_empty());

    // Leaf first.
    let rev = folded(&report_ok(&["--folded", "--reverse", "-i", path]));
    assert!(
        rev.iter()
            .any(|(s, n)| *n == 200 && s.contains("touch_pages;pf_level3;pf_level2;pf_level1;main")),
        "{rev:?}"
    );

    // The exec-time faults have kernel frames: annotated with _[k], and only they.
    let k = folded(&report_ok(&[
        "--folded",
        "--kernel-only",
        "--kernel-annotate",
        "-i",
        path,
    ]));
    let kernel_frames: Vec<&str> = k.iter().flat_map(|(s, _)| s.split(';').skip(1)).collect();
    assert!(!kernel_frames.is_empty(), "{k:?}");
    assert!(kernel_frames.iter().all(|f| f.ends_with("_[k]")), "{k:?}");
    let u = report_ok(&["--folded", "--user-only", "--kernel-annotate", "-i", path]);
    assert!(!u.contains("_[k]"), "{u}");

    // DWARF lines name the fixture's source file for each of its frames.
    let lines = report_ok(&["--folded", "--lines", "--inline", "-i", path]);
    assert!(
        lines.contains("pf_level3 (pagefault.c:") && lines.contains("touch_pages (pagefault.c:"),
        "{lines}"
    );
    // Unnamed frames by module and offset under --addrs.
    let addrs = report_ok(&["--folded", "--addrs", "-i", path]);
    assert!(!addrs.contains("[unknown]"), "{addrs}");

    // The text report: header with the event and its count, then the top stack.
    let text = report_ok(&["-i", path, "-T", "1"]);
    assert!(
        text.contains(&format!("# event page-faults: {total} samples")),
        "{text}"
    );
    assert!(text.contains("    touch_pages\n    pf_level3\n"), "{text}");
    assert!(text.contains("        200 ("), "{text}");
}

#[test]
fn folded_output_needs_one_event_when_the_file_has_several() {
    if !require_perf("multi-event report") {
        return;
    }
    let dir = scratch();
    let out = dir.path().join("two.data");
    let prog = fixture("brk", Variant::NoFp);
    record(
        &out,
        &["-e", "page-faults,syscalls:sys_enter_brk"],
        &prog,
        &["8"],
    );
    let o = report(&["--folded", "-i", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("choose one with --event") && err.contains("syscalls:sys_enter_brk"),
        "{err}"
    );
    let o = report(&["--folded", "--event", "nope", "-i", out.to_str().unwrap()]);
    assert!(stderr(&o).contains("no event `nope`"), "{}", stderr(&o));
}

#[test]
fn bad_files_get_clear_errors() {
    let dir = scratch();
    let empty = dir.path().join("empty.data");
    std::fs::write(&empty, b"").unwrap();
    let garbage = dir.path().join("garbage.data");
    std::fs::write(&garbage, vec![0x5au8; 4096]).unwrap();
    let cases: Vec<(PathBuf, &str)> = vec![
        (empty, "file is empty"),
        (garbage, "not a perf.data file"),
        (dir.path().to_path_buf(), "is a directory"),
        (dir.path().join("missing.data"), "failed to read"),
    ];
    // The cause is said once.
    let o = report(&["-i", dir.path().join("missing.data").to_str().unwrap()]);
    assert_eq!(
        stderr(&o).matches("No such file").count(),
        1,
        "{}",
        stderr(&o)
    );
    for (path, want) in cases {
        let o = report(&["-i", path.to_str().unwrap()]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{}: {err}", path.display());
        assert!(
            err.contains(want),
            "{}: expected `{want}` in {err}",
            path.display()
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn truncated_and_corrupt_recordings_report_what_is_valid() {
    if !require_perf("truncated report") {
        return;
    }
    let dir = scratch();
    let out = dir.path().join("t.data");
    let prog = fixture("pagefault", Variant::NoFp);
    record(&out, &["-e", "page-faults"], &prog, &["2000"]);
    let bytes = std::fs::read(&out).unwrap();
    let full: u64 = folded(&report_ok(&["--folded", "-i", out.to_str().unwrap()]))
        .iter()
        .map(|(_, n)| n)
        .sum();

    // Cut in the middle of the data section: the header still points past the end.
    let cut = dir.path().join("cut.data");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let o = report(&["--folded", "-i", cut.to_str().unwrap()]);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("truncated"), "{err}");
    let part: u64 = folded(&String::from_utf8_lossy(&o.stdout))
        .iter()
        .map(|(_, n)| n)
        .sum();
    assert!(part > 0 && part < full, "{part} of {full}");

    // A record header with size 0 in the middle of the data: the records before it count.
    let mut bad = bytes.clone();
    let data_offset = u64::from_ne_bytes(bad[40..48].try_into().unwrap()) as usize;
    let data_size = u64::from_ne_bytes(bad[48..56].try_into().unwrap()) as usize;
    // Walk the records to one in the middle.
    let mut pos = data_offset;
    while pos < data_offset + data_size / 2 {
        let size = u16::from_ne_bytes([bad[pos + 6], bad[pos + 7]]) as usize;
        pos += size;
    }
    bad[pos + 6] = 0;
    bad[pos + 7] = 0;
    let corrupt = dir.path().join("corrupt.data");
    std::fs::write(&corrupt, &bad).unwrap();
    let o = report(&["-i", corrupt.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        text.contains(&format!("record at offset {pos:#x} has size 0")),
        "{text}"
    );
}

#[test]
fn flame_graphs_name_the_chain_and_draw_kernel_frames_apart() {
    if !require_perf("flame graph") {
        return;
    }
    let dir = scratch();
    let out = dir.path().join("fg.data");
    record(
        &out,
        &["-e", "page-faults"],
        &fixture("pagefault", Variant::NoFp),
        &["300"],
    );
    let path = out.to_str().unwrap();
    let svg_path = dir.path().join("fg.svg");
    report_ok(&["-i", path, "--flamegraph", svg_path.to_str().unwrap()]);
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert!(svg.starts_with("<?xml"), "{}", &svg[..100.min(svg.len())]);
    // Well-formed XML, by Python's parser.
    let xml = Command::new("python3")
        .args([
            "-c",
            "import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])",
        ])
        .arg(&svg_path)
        .output()
        .expect("run python3");
    assert!(
        xml.status.success(),
        "not well-formed XML: {}",
        stderr(&xml)
    );
    // Default count name, title and subtitle from the recording.
    assert!(
        svg.contains("<title>touch_pages (300 pages, "),
        "touch_pages frame"
    );
    assert!(
        svg.contains("<title>pf_level1 (300 pages, "),
        "pf_level1 frame"
    );
    assert!(svg.contains(">page-faults: "), "title names the event");
    assert!(svg.contains("samples of page-faults; 0 lost"), "subtitle");
    // Kernel frames (the exec-time faults) are orange; user frames are not.
    let fill_of = |name: &str| -> Option<String> {
        let at = svg.find(&format!("<title>{name} ("))?;
        let rest = &svg[at..];
        let f = rest.find("fill=\"")? + 6;
        Some(rest[f..f + rest[f..].find('"')?].to_string())
    };
    assert_eq!(
        fill_of("entry_SYSCALL_64_after_hwframe").as_deref(),
        Some("rgb(230,130,40)")
    );
    assert_ne!(fill_of("touch_pages").as_deref(), Some("rgb(230,130,40)"));
    // User frames in inferno's mem palette by default: rgb(0, 190..=240, 0..=210).
    let rgb = |fill: &str| -> (u8, u8, u8) {
        let v: Vec<u8> = fill
            .trim_start_matches("rgb(")
            .trim_end_matches(')')
            .split(',')
            .map(|c| c.trim().parse().unwrap())
            .collect();
        (v[0], v[1], v[2])
    };
    for name in ["touch_pages", "pf_level1", "main"] {
        let (r, g, b) = rgb(&fill_of(name).unwrap());
        assert!(
            r == 0 && (190..=240).contains(&g) && b <= 210,
            "{name} is not in the mem palette: rgb({r},{g},{b})"
        );
    }
    // --colors hot: rgb(205..=255, 0..=230, 0..=55); kernel frames stay orange.
    let hot_path = dir.path().join("hot.svg");
    report_ok(&[
        "-i",
        path,
        "--flamegraph",
        hot_path.to_str().unwrap(),
        "--colors",
        "hot",
    ]);
    let hot = std::fs::read_to_string(&hot_path).unwrap();
    let hot_fill_of = |name: &str| -> Option<String> {
        let at = hot.find(&format!("<title>{name} ("))?;
        let rest = &hot[at..];
        let f = rest.find("fill=\"")? + 6;
        Some(rest[f..f + rest[f..].find('"')?].to_string())
    };
    for name in ["touch_pages", "pf_level1", "main"] {
        let (r, g, b) = rgb(&hot_fill_of(name).unwrap());
        assert!(
            r >= 205 && g <= 230 && b <= 55,
            "{name} is not in the hot palette: rgb({r},{g},{b})"
        );
    }
    assert_eq!(
        hot_fill_of("entry_SYSCALL_64_after_hwframe").as_deref(),
        Some("rgb(230,130,40)")
    );

    // Options, to standard output.
    let o = report_ok(&[
        "-i",
        path,
        "--flamegraph",
        "-",
        "--countname",
        "faults",
        "--title",
        "My faults",
        "--reverse",
        "--width",
        "800",
    ]);
    assert!(o.contains("<title>touch_pages (300 faults, "), "countname");
    assert!(o.contains(">My faults<"), "title");
    assert!(o.contains("width=\"800\""), "width");

    let bad = report(&["-i", path, "--flamegraph", "-", "--colors", "plaid"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("unknown --colors `plaid`"),
        "{}",
        stderr(&bad)
    );
}

#[test]
fn faults_by_mapping_file_comm_and_over_time() {
    if !require_perf("report --by and --timeline") {
        return;
    }
    let dir = scratch();
    let out = dir.path().join("by.data");
    record(
        &out,
        &["-e", "page-faults"],
        &fixture("pagefault", Variant::NoFp),
        &["500"],
    );
    let path = out.to_str().unwrap();
    let total: u64 = folded(&report_ok(&["--folded", "-i", path]))
        .iter()
        .map(|(_, n)| n)
        .sum();
    let rows = |text: &str| -> Vec<(u64, String, String)> {
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty() && !l.contains("samples"))
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let bytes = format!("{} {}", f[2], f[3]);
                (f[0].parse().unwrap(), bytes, f[4..].join(" "))
            })
            .collect()
    };
    // The workload's buffer is one anonymous mapping: exactly its 500 pages, 2000 KiB.
    let by_map = rows(&report_ok(&["--by", "mapping", "-i", path]));
    let (n, bytes, label) = &by_map[0];
    assert_eq!(*n, 500, "{by_map:?}");
    assert_eq!(bytes, "2.0 MiB", "500 pages of 4 KiB");
    assert!(label.starts_with("//anon 0x"), "{label}");
    assert_eq!(by_map.iter().map(|r| r.0).sum::<u64>(), total);
    // Per file, all anonymous memory together; the binary and libc have their faults.
    let by_file = rows(&report_ok(&["--by", "file", "-i", path]));
    assert_eq!(by_file[0].2, "//anon");
    assert!(by_file[0].0 >= 500);
    assert!(
        by_file.iter().any(|r| r.2.ends_with("/pagefault-nofp")),
        "{by_file:?}"
    );
    assert!(
        by_file.iter().any(|r| r.2.contains("libc.so")),
        "{by_file:?}"
    );
    // One command.
    let by_comm = rows(&report_ok(&["--by", "comm", "-i", path]));
    assert_eq!(by_comm.len(), 1);
    assert_eq!(
        (by_comm[0].0, by_comm[0].2.as_str()),
        (total, "pagefault-nofp")
    );
    // A run of well under a minute is one interval of a minute.
    let tl = report_ok(&["--timeline", "60s", "-i", path]);
    let data: Vec<&str> = tl.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(data.len(), 2, "{tl}");
    let f: Vec<&str> = data[1].split_whitespace().collect();
    assert_eq!((f[0], f[1]), ("0.000", total.to_string().as_str()), "{tl}");
    let bad = report(&["--timeline", "0s", "-i", path]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).contains("invalid interval"),
        "{}",
        stderr(&bad)
    );
}

/// `--by mapping` and `--by file` rows as (samples, label).
fn by_rows(text: &str) -> Vec<(u64, String)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty() && !l.contains("samples"))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].parse().unwrap(), f[4..].join(" "))
        })
        .collect()
}

#[test]
fn faults_by_mapping_name_the_file_the_heap_and_anonymous_memory() {
    if !require_perf("report --by mapping of file, heap and anonymous memory") {
        return;
    }
    // Distinct counts, so that no row can stand in for another.
    const N: u64 = 37; // pages of a file mapping
    const M: u64 = 23; // pages of the brk heap, grown once by sbrk: the kernel says //anon
    const K: u64 = 41; // pages of an anonymous mmap
    let dir = scratch();
    let out = dir.path().join("maps.data");
    let file = dir.path().join("mapped-file");
    let o = record(
        &out,
        &["-e", "page-faults"],
        &fixture("mappings", Variant::NoFp),
        &[
            &N.to_string(),
            &M.to_string(),
            &K.to_string(),
            file.to_str().unwrap(),
        ],
    );
    // "file N heap M anon K: FILE_ADDR HEAP_ADDR ANON_ADDR"
    let said = String::from_utf8_lossy(&o.stdout).into_owned();
    let addrs: Vec<&str> = said
        .split(": ")
        .nth(1)
        .unwrap_or_else(|| panic!("fixture output: {said}"))
        .split_whitespace()
        .collect();
    let (file_at, heap_at, anon_at) = (addrs[0], addrs[1], addrs[2]);
    let path = out.to_str().unwrap();
    let text = report_ok(&["--by", "mapping", "-i", path]);
    let rows = by_rows(&text);
    let count = |label: &str| -> Vec<u64> {
        rows.iter()
            .filter(|(_, l)| l == label)
            .map(|(n, _)| *n)
            .collect()
    };
    let page = 4096u64;
    let range = |start: &str, pages: u64| {
        let s = u64::from_str_radix(start.trim_start_matches("0x"), 16).unwrap();
        format!("{s:#x}-{:#x}", s + pages * page)
    };
    let file_label = format!("{} {}", file.display(), range(file_at, N));
    assert_eq!(count(&file_label), [N], "{file_label}\n{text}");
    let heap_label = format!("[heap] {}", range(heap_at, M));
    assert_eq!(count(&heap_label), [M], "{heap_label}\n{text}");
    let anon_label = format!("//anon {}", range(anon_at, K));
    assert_eq!(count(&anon_label), [K], "{anon_label}\n{text}");
    // Bytes: a page each.
    assert!(
        text.lines().any(|l| l.ends_with(&heap_label)
            && l.contains(&format!("{:.1} KiB", (M * page) as f64 / 1024.0))),
        "{text}"
    );

    // Per file: the file and the heap alone; the mmap'd pages among all anonymous memory.
    let text = report_ok(&["--by", "file", "-i", path]);
    let rows = by_rows(&text);
    let count = |label: &str| rows.iter().find(|(_, l)| l == label).map(|(n, _)| *n);
    assert_eq!(count(&file.display().to_string()), Some(N), "{text}");
    assert_eq!(count("[heap]"), Some(M), "{text}");
    assert!(count("//anon").is_some_and(|n| n >= K), "{text}");
}

/// The bytes of the folded lines that contain `needle`.
fn grow_heap_bytes(folded_text: &str, needle: &str) -> u64 {
    folded(folded_text)
        .iter()
        .filter(|(s, _)| s.contains(needle))
        .map(|(_, n)| n)
        .sum()
}

/// What the brk fixture says it grew the heap by.
fn printed_heap_growth(text: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix("heap grew by "))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no `heap grew by` line in: {text}"))
}

#[test]
fn byte_weights_of_faults_brk_and_mmap() {
    if !require_perf("byte weights") {
        return;
    }
    let dir = scratch();
    let weigh = |fixture_name: &str, event: &str, n: u32, needle: &str| -> (u64, String) {
        let out = dir.path().join(format!("{fixture_name}.data"));
        let o = record(
            &out,
            &["-e", event],
            &fixture(fixture_name, Variant::NoFp),
            &[&n.to_string()],
        );
        let path = out.to_str().unwrap();
        let lines = report_ok(&["--folded", "--weight", "bytes", "-i", path]);
        let text = report_ok(&["--weight", "bytes", "-i", path]);
        let said = String::from_utf8_lossy(&o.stdout).into_owned();
        (
            grow_heap_bytes(&lines, needle),
            format!("{said}{}\n{text}\n{lines}", stderr(&o)),
        )
    };
    let page = 4096;
    // A page per fault.
    let (pf, text) = weigh("pagefault", "page-faults", 300, CHAIN_ROOT_FIRST);
    assert_eq!(pf, 300 * page, "{text}");
    // mmap: the fixture maps 1, 2, ... N pages.
    let (mm, _) = weigh("mmap", "syscalls:sys_enter_mmap", 40, "map_regions");
    assert_eq!(mm, 40 * 41 / 2 * page);
    // brk: N calls of sbrk(8192) after libc's brk(0) query. The first growth is measured from
    // the break the query returned, which the heap's MMAP2 record gives: the whole growth the
    // workload itself prints, and no call of unknown weight.
    let (brk, text) = weigh("brk", "syscalls:sys_enter_brk", 64, "grow_heap");
    assert_eq!(brk, printed_heap_growth(&text), "{text}");
    assert_eq!(brk, 64 * 8192, "{text}");
    assert!(!text.contains("no earlier break"), "{text}");
    assert!(text.contains("most bytes first"), "{text}");
    // --timeline and --by weigh the same way, the first growth's deferred weight included:
    // the whole run's growth (libc's malloc grows the heap too) in one interval, one process.
    let brk_path = dir.path().join("brk.data");
    let brk_path = brk_path.to_str().unwrap();
    let all: u64 = folded(&report_ok(&[
        "--folded", "--weight", "bytes", "-i", brk_path,
    ]))
    .iter()
    .map(|(_, n)| n)
    .sum();
    let kib = format!("{:.1} KiB", all as f64 / 1024.0);
    assert!(all > brk && all < 1 << 20, "{all}");
    let tl = report_ok(&["--timeline", "60s", "-i", brk_path]);
    let row: Vec<&str> = tl
        .lines()
        .filter(|l| !l.starts_with('#'))
        .nth(1)
        .unwrap_or_else(|| panic!("{tl}"))
        .split_whitespace()
        .collect();
    assert_eq!(format!("{} {}", row[2], row[3]), kib, "{tl}");
    let by = report_ok(&["--by", "pid", "-i", brk_path]);
    assert!(
        by.lines()
            .any(|l| l.contains(&kib) && l.contains("brk-nofp ")),
        "{kib}\n{by}"
    );

    let out = dir.path().join("cpu.data");
    record(
        &out,
        &["-e", "task-clock"],
        &fixture("pagefault", Variant::NoFp),
        &["10"],
    );
    let o = report(&["--weight", "bytes", "-i", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("no size is known for task-clock"),
        "{}",
        stderr(&o)
    );
}

/// perf records no heap MMAP2 without -d; with `sys_exit_brk` recorded beside
/// `sys_enter_brk`, the break each `brk(0)` query returned weighs the growth after it.
#[test]
fn brk_growth_of_a_perf_recording_with_exit_events_is_whole() {
    if !require_perf("perf brk weights") || !require_perf_tool("perf brk weights") {
        return;
    }
    let dir = scratch();
    let out = dir.path().join("perf-brk.data");
    let o = {
        let _turn = recording_turn();
        Command::new("perf")
            .args(["record", "-q", "-m", "4096", "--call-graph", "dwarf", "-o"])
            .arg(&out)
            .args([
                "-e",
                "syscalls:sys_enter_brk",
                "-e",
                "syscalls:sys_exit_brk",
                "--",
            ])
            .arg(fixture("brk", Variant::NoFp))
            .arg("64")
            .output()
            .expect("run perf record")
    };
    assert!(o.status.success(), "perf record: {}", stderr(&o));
    let said = String::from_utf8_lossy(&o.stdout).into_owned();
    let path = out.to_str().unwrap();
    let args = [
        "--weight",
        "bytes",
        "--event",
        "syscalls:sys_enter_brk",
        "-i",
        path,
    ];
    let lines = report_ok(&[&["--folded"][..], &args].concat());
    assert_eq!(
        grow_heap_bytes(&lines, "grow_heap"),
        printed_heap_growth(&said),
        "{said}\n{lines}"
    );
    let text = report_ok(&args);
    assert!(!text.contains("no earlier break"), "{text}");
}

#[test]
fn script_output_folds_like_the_report() {
    if !require_perf("memperf script") {
        return;
    }
    let dir = scratch();
    let out = dir.path().join("s.data");
    record(
        &out,
        &["-e", "page-faults"],
        &fixture("pagefault", Variant::NoFp),
        &["300"],
    );
    let path = out.to_str().unwrap();
    let script = String::from_utf8(run_memperf(&["script", "-q", "-i", path]).stdout).unwrap();
    // perf script's layout, read by the same parser that reads perf's own output.
    let samples = parse_perf_script(&script);
    let mut from_script: BTreeMap<String, u64> = BTreeMap::new();
    for s in &samples {
        let mut frames = vec![s.comm.clone()];
        frames.extend(s.frames.iter().rev().cloned());
        *from_script.entry(frames.join(";")).or_insert(0) += 1;
    }
    // Stacks of named frames fold the same (unnamed ones are compared through inferno, which
    // names them after their module, in the test below).
    let from_report: BTreeMap<String, u64> = folded(&report_ok(&["--folded", "-i", path]))
        .into_iter()
        .filter(|(s, _)| !s.contains('['))
        .collect();
    from_script.retain(|s, _| !s.contains('['));
    assert_eq!(from_script, from_report);
    assert!(from_report.values().sum::<u64>() >= 300);
    assert!(samples.iter().all(|s| s.event == "page-faults"));
    let first = samples.iter().find(|s| s.has_frame("touch_pages")).unwrap();
    assert!(
        first.header.starts_with("pagefault-nofp "),
        "{}",
        first.header
    );
    assert!(script.contains(" touch_pages+0x"), "symbol offsets");
    assert!(script.contains("/pagefault-nofp)"), "dso names");

    // Tracepoint payloads, through each format's print fmt as perf prints them.
    let out = dir.path().join("brk.data");
    record(
        &out,
        &["-e", "syscalls:sys_enter_brk"],
        &fixture("brk", Variant::NoFp),
        &["4"],
    );
    let o = run_memperf(&[
        "script",
        "-q",
        "-F",
        "comm,pid,tid,event,trace",
        "-i",
        out.to_str().unwrap(),
    ]);
    let text = String::from_utf8(o.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() >= 5, "{text}");
    assert!(
        // Without frames, perf pads the command to 16 columns.
        lines.iter().all(|l| l.starts_with("        brk-nofp ")
            && l.contains(" syscalls:sys_enter_brk: brk: 0x")),
        "{text}"
    );
}

/// `memperf script` prints tracepoint payloads through their print fmt: on the same file,
/// every sample header, payload included, is perf script's byte for byte. Except
/// `kmem:mm_page_alloc`'s: its `page=%p` adds the kernel's `vmemmap_base`, which no file
/// holds (perf reads it as 0 and prints the pfn as the page); memperf prints that payload as
/// raw fields and says so.
#[test]
fn script_payloads_are_perf_scripts() {
    if !require_perf("script payloads") || !require_perf_tool("script payloads") {
        return;
    }
    const EVENTS: [&str; 5] = [
        "syscalls:sys_enter_brk",
        "syscalls:sys_enter_mmap",
        "kmem:kmalloc",
        "kmem:kfree",
        "kmem:mm_page_alloc",
    ];
    let dir = scratch();
    let out = dir.path().join("tp.data");
    // The kmem events come from the command's own system calls (exec, mmap, brk).
    let cmd = format!(
        "{} 16; {} 8",
        fixture("brk", Variant::NoFp).display(),
        fixture("mmap", Variant::NoFp).display()
    );
    let events = EVENTS.join(",");
    record(&out, &["-e", &events], Path::new("/bin/sh"), &["-c", &cmd]);
    let (ours, theirs, err) = both_scripts(out.to_str().unwrap());
    let (ours_h, theirs_h) = (script_headers(&ours), script_headers(&theirs));
    assert_eq!(ours_h.len(), theirs_h.len());
    let raw = " kmem:mm_page_alloc: ";
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (o, t) in ours_h.iter().zip(&theirs_h) {
        if let Some(event) = EVENTS.iter().find(|e| o.contains(&format!(" {e}: "))) {
            *seen.entry(event).or_default() += 1;
        }
        match o.split_once(raw) {
            Some((head, fields)) => {
                assert!(t.starts_with(&format!("{head}{raw}page=")), "{o}\n{t}");
                assert!(fields.starts_with("pfn=0x"), "{o}");
            }
            None => assert_eq!(o, t),
        }
    }
    assert_eq!(seen.len(), EVENTS.len(), "{seen:?}");
    assert!(
        err.contains("kmem:mm_page_alloc: ") && err.contains("`vmemmap_base`"),
        "{err}"
    );
    assert!(!err.contains("kmem:kmalloc: "), "{err}");
    // The print fmt did the work: perf's call site names and flag names.
    let kmalloc = ours_h
        .iter()
        .find(|l| l.contains(" kmem:kmalloc: call_site="))
        .unwrap();
    assert!(kmalloc.contains(" gfp_flags=GFP_"), "{kmalloc}");
    if is_root() {
        assert!(!kmalloc.contains("call_site=0x"), "{kmalloc}");
    }
}

/// memperf's recordings keep the kernel's printk formats, so a `const char *` field prints
/// the string it points to, in memperf script as in perf script: `maple_tree:ma_write` (the
/// VMA tree's writes, kernel 6.1+) names the function that wrote.
#[test]
fn const_char_fields_print_their_kernel_strings() {
    const EVENT: &str = "maple_tree:ma_write";
    if !require_perf("printk formats") || !require_perf_tool("printk formats") {
        return;
    }
    let tracefs = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];
    if !tracefs
        .iter()
        .any(|t| Path::new(t).join("events/maple_tree/ma_write").exists())
    {
        eprintln!("skipped: this kernel has no {EVENT} tracepoint (6.1+)");
        return;
    }
    let dir = scratch();
    let out = dir.path().join("ma.data");
    record(
        &out,
        &["-e", EVENT],
        &fixture("mmap", Variant::NoFp),
        &["8"],
    );
    let (ours, theirs, _) = both_scripts(out.to_str().unwrap());
    let (ours, theirs) = (script_headers(&ours), script_headers(&theirs));
    assert_eq!(ours, theirs);
    let writers: Vec<&str> = ours
        .iter()
        .filter_map(|h| h.split_once(&format!("{EVENT}: ")))
        .map(|(_, payload)| payload.split('\t').next().unwrap_or(""))
        .collect();
    assert!(!writers.is_empty(), "{ours:?}");
    // A name (`mas_store_prealloc`), not the string's address.
    assert!(
        writers
            .iter()
            .all(|w| !w.is_empty() && !w.chars().all(|c| c.is_ascii_hexdigit())),
        "{writers:?}"
    );
    assert!(writers.iter().any(|w| w.starts_with("mas_")), "{writers:?}");
}

#[test]
fn pprof_profiles_open_in_go_tool_pprof() {
    if !require_perf("pprof") || !have_go() {
        return;
    }
    let dir = scratch();
    let out = dir.path().join("p.data");
    record(
        &out,
        &["-e", "page-faults"],
        &fixture("pagefault", Variant::NoFp),
        &["300"],
    );
    let pb = dir.path().join("p.pb.gz");
    report_ok(&["-i", out.to_str().unwrap(), "--pprof", pb.to_str().unwrap()]);
    let pprof = |args: &[&str]| go_pprof(&pb, args);
    let raw = pprof(&["-raw"]);
    assert!(
        raw.contains("page-faults/count page-faults_bytes/bytes"),
        "{raw}"
    );
    assert!(raw.contains("comm:[pagefault-nofp]"), "{raw}");
    // The executable is the first mapping, with its build-id.
    let exe = fixture("pagefault", Variant::NoFp);
    let id: String = memperf::buildid::file_build_id(&exe)
        .unwrap()
        .expect("the fixture has a build-id")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert!(
        raw.contains(&format!("1: 0x0/0x0/0x0 {} {id}", exe.display())),
        "{raw}"
    );
    let leaf = |text: &str| pprof_flat(text, "touch_pages");
    // 300 faults, 300 pages of 4 KiB, all with touch_pages as the leaf.
    assert_eq!(leaf(&pprof(&["-top", "-sample_index=0"])), vec!["300"]);
    assert_eq!(leaf(&pprof(&["-top", "-sample_index=1"])), vec!["1200kB"]);
    let main = pprof(&["-top", "-sample_index=0"]);
    assert!(main.contains("main"), "{main}");

    // With --lines, functions carry their source file and line.
    report_ok(&[
        "-i",
        out.to_str().unwrap(),
        "--lines",
        "--pprof",
        pb.to_str().unwrap(),
    ]);
    let lines = pprof(&["-top", "-lines", "-sample_index=0"]);
    assert!(
        lines
            .lines()
            .any(|l| l.contains(" touch_pages ") && l.contains("pagefault.c:")),
        "{lines}"
    );
}

#[test]
fn kmem_byte_weights_agree_with_perf_script() {
    if !require_perf("kmem weights") || !require_perf_tool("kmem weights") {
        return;
    }
    let dir = scratch();
    let out = dir.path().join("kmem.data");
    let turn = recording_turn();
    let o = memperf()
        .args([
            "record",
            "-q",
            "-e",
            "kmem:kmalloc,kmem:mm_page_alloc",
            "-o",
        ])
        .arg(&out)
        .args(["--", "sh", "-c", "ls -R /usr/lib > /dev/null"])
        .output()
        .unwrap();
    drop(turn);
    assert!(o.status.success(), "{}", stderr(&o));
    let path = out.to_str().unwrap();
    // perf decodes each payload with the tracepoint's print format: sum the fields there.
    let perf = Command::new("perf")
        .args(["script", "-i", path])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&perf.stdout);
    let field_sum = |name: &str, f: &dyn Fn(u64) -> u64| -> u64 {
        text.split_whitespace()
            .filter_map(|w| w.strip_prefix(name))
            .filter_map(|v| v.parse::<u64>().ok())
            .map(f)
            .sum()
    };
    let kmalloc = field_sum("bytes_alloc=", &|v| v);
    let pages = field_sum("order=", &|o| 4096 << o);
    assert!(kmalloc > 0 && pages > 0, "kmalloc {kmalloc}, pages {pages}");
    let ours = |event: &str| -> u64 {
        folded(&report_ok(&[
            "--folded", "--weight", "bytes", "--event", event, "-i", path,
        ]))
        .iter()
        .map(|(_, n)| n)
        .sum()
    };
    assert_eq!(ours("kmem:kmalloc"), kmalloc);
    assert_eq!(ours("kmem:mm_page_alloc"), pages);
}

/// Runs `memperf script ARGS | inferno-collapse-perf` and returns the folded lines, sorted.
fn script_through_inferno(args: &[&str]) -> Option<Vec<String>> {
    if !common::have_inferno() {
        return None;
    }
    let mut all = vec!["script", "-q"];
    all.extend_from_slice(args);
    let script = run_memperf(&all);
    assert!(script.status.success(), "{}", stderr(&script));
    let mut child = Command::new("inferno-collapse-perf")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&script.stdout).unwrap();
    }
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let mut lines: Vec<String> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    Some(lines)
}

#[test]
fn inferno_folds_memperf_script_into_the_reports_stacks() {
    if !require_perf("memperf script | inferno") {
        return;
    }
    let dir = scratch();
    let faults = dir.path().join("pf.data");
    record(
        &faults,
        &["-e", "page-faults"],
        &fixture("pagefault", Variant::NoFp),
        &["300"],
    );
    let mmaps = dir.path().join("mmap.data");
    record(
        &mmaps,
        &["-e", "syscalls:sys_enter_mmap"],
        &fixture("mmap", Variant::NoFp),
        &["40"],
    );
    for (file, fields) in [
        (&faults, None),
        // For tracepoints the payload fields are left out, as they must be with perf.
        (&mmaps, Some("comm,tid,time,event,ip,sym,dso")),
    ] {
        let path = file.to_str().unwrap();
        let mut args = vec!["-i", path];
        if let Some(f) = fields {
            args.extend(["-F", f]);
        }
        let Some(inferno) = script_through_inferno(&args) else {
            return;
        };
        let mut ours: Vec<String> = report_ok(&["--folded", "-i", path])
            .lines()
            .map(str::to_string)
            .collect();
        ours.sort();
        assert_eq!(inferno, ours, "{path}");
    }
}

/// `unwound X user stacks, Y truncated` from memperf record's summary.
fn summary_unwound(err: &str) -> (u64, u64) {
    let line = err
        .lines()
        .find_map(|l| l.trim().strip_prefix("unwound "))
        .unwrap_or_else(|| panic!("no unwound line in: {err}"));
    let f: Vec<&str> = line.split([' ', ',']).filter(|w| !w.is_empty()).collect();
    // "X user stacks Y truncated (P%)"
    (f[0].parse().unwrap(), f[3].parse().unwrap())
}

#[test]
fn every_output_says_what_was_lost_and_truncated_while_recording() {
    if !require_perf("output headers") {
        return;
    }
    let dir = scratch();
    let out = dir.path().join("h.data");
    let o = record(
        &out,
        &["-e", "page-faults"],
        &fixture("pagefault", Variant::NoFp),
        &["200"],
    );
    let (unwound, truncated) = summary_unwound(&stderr(&o));
    assert!(unwound >= 200, "{}", stderr(&o));
    // The recorder's counts are in the file, in memperf's own feature section.
    let file = memperf::perfdata::PerfDataFile::open(&out).unwrap();
    let stats = file.features.memperf_stats.clone().expect("memperf stats");
    assert_eq!(
        (stats.get("unwound"), stats.get("truncated")),
        (Some(unwound), Some(truncated))
    );
    let path = out.to_str().unwrap();
    let text = report_ok(&["-i", path]);
    assert!(
        text.contains(&format!(
            "# user stacks unwound while recording: {unwound}, truncated: {truncated}"
        )),
        "{text}"
    );
    assert!(text.contains("# recorded 2"), "{text}");
    let losses = format!("# nothing lost; {truncated} of {unwound} user stacks truncated");
    for args in [
        &["--by", "file"][..],
        &["--by", "mapping"],
        &["--timeline", "1s"],
    ] {
        // The header's lines wrapped at 80 columns, joined again.
        let text = report_ok(&[args, &["-i", path]].concat()).replace("\n#   ", " ");
        assert!(text.contains(&losses), "{args:?}: {losses}\n{text}");
    }
    // Folded stacks and script output have no header: one note on standard error.
    for args in [&["report", "-q", "--folded"][..], &["script"]] {
        let o = run_memperf(&[args, &["-i", path]].concat());
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let note = format!("memperf: note: {}", &losses[2..]);
        assert_eq!(
            stderr(&o).contains(&note),
            truncated > 0,
            "{args:?}: {}",
            stderr(&o)
        );
    }
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let svg = report_ok(&["-i", path, "--flamegraph", "-"]);
    assert!(
        svg.contains(&format!(
            "throttled 0 times; {truncated} of {unwound} user stacks truncated; recorded 2"
        )),
        "{svg}"
    );
    assert!(
        svg.contains(&format!(" UTC on {}; kernel frames", hostname.trim())),
        "{svg}"
    );
    // pprof: the comments are strings of the profile's string table.
    let pb = dir.path().join("h.pb.gz");
    report_ok(&["-i", path, "--pprof", pb.to_str().unwrap()]);
    let mut raw = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(std::fs::File::open(&pb).unwrap()),
        &mut raw,
    )
    .unwrap();
    let raw = String::from_utf8_lossy(&raw);
    assert!(raw.contains(&losses[2..]), "{losses}");
    assert!(
        raw.contains(&format!(" UTC on {}", hostname.trim())),
        "{raw}"
    );
    // perf's tools pass over memperf's feature section without a word.
    if require_perf_tool("perf script of memperf stats") {
        for args in [&["script"][..], &["report", "--stdio"]] {
            let o = Command::new("perf")
                .args(args)
                .arg("-i")
                .arg(&out)
                .output()
                .expect("run perf");
            assert!(o.status.success(), "perf {args:?}: {}", stderr(&o));
            assert_eq!(stderr(&o).trim(), "", "perf {args:?} said something");
        }
    }
}
