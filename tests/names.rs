#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Frame names as perf prints them, where users merge memperf's stacks with perf's: the
//! same `perf record --call-graph dwarf` file folded by memperf and by `perf script |
//! inferno-collapse-perf`; and interpreters' and JITs' frames for real (CPython's `-X perf`,
//! Node's `--perf-basic-prof`, a jitdump written by a fixture).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::*;

fn report_folded(args: &[&str]) -> BTreeMap<String, u64> {
    let o = run_memperf(&[&["report", "-q", "--folded"], args].concat());
    assert!(
        o.status.success(),
        "memperf report {args:?}: {}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    folded(&String::from_utf8(o.stdout).unwrap())
}

/// `stack count` lines, merged by stack.
fn folded(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let (stack, n) = line.rsplit_once(' ').expect("`stack count`");
        *out.entry(stack.to_string()).or_insert(0) += n.parse::<u64>().expect("a count");
    }
    out
}

/// `perf script -i FILE | inferno-collapse-perf`.
fn perf_folded(file: &Path) -> BTreeMap<String, u64> {
    let script = Command::new("perf")
        .args(["script", "-i"])
        .arg(file)
        .stderr(Stdio::null())
        .output()
        .expect("run perf script");
    assert!(script.status.success(), "perf script failed");
    let mut child = Command::new("inferno-collapse-perf")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run inferno-collapse-perf");
    let mut stdin = child.stdin.take().unwrap();
    let text = script.stdout;
    let feeder = std::thread::spawn(move || {
        use std::io::Write;
        stdin.write_all(&text).unwrap();
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    assert!(out.status.success(), "inferno-collapse-perf failed");
    folded(&String::from_utf8(out.stdout).unwrap())
}

/// Issue: `memperf report` printed `__libc_start_main@@GLIBC_2.34` where perf prints
/// `__libc_start_main_impl`, so flame graphs of the two did not merge. On one perf.data,
/// memperf's folded stacks of the workload are perf's, frame for frame, or extend them at
/// the root where memperf recovered more frames.
#[test]
fn perf_dwarf_recording_folds_with_the_names_perf_script_prints() {
    let what = "names as perf prints them";
    if !require_perf(what) || !require_perf_tool(what) || !have_inferno() {
        return;
    }
    let dir = scratch();
    let out = dir.path().join("perf-libc.data");
    let prog = fixture("libcnames", Variant::NoFp);
    {
        let _turn = recording_turn();
        let o = Command::new("perf")
            .args([
                "record",
                "-q",
                "-e",
                "page-faults:u",
                "-c",
                "1",
                "-m",
                "4096",
            ])
            .args(["--call-graph", "dwarf", "-o"])
            .arg(&out)
            .arg("--")
            .arg(&prog)
            .arg("300")
            .output()
            .expect("run perf record");
        assert!(o.status.success(), "perf record: {}", stderr(&o));
    }
    let file = out.to_str().unwrap();
    // perf script shows inline frames and names functions by DWARF: --inline does too.
    let ours = report_folded(&["--inline", "-i", file]);
    let perfs = perf_folded(&out);
    let workload = |stacks: &BTreeMap<String, u64>| -> BTreeMap<String, u64> {
        stacks
            .iter()
            .filter(|(s, _)| s.contains(";main;lc_"))
            .map(|(s, n)| (s.clone(), *n))
            .collect()
    };
    let (mut ours_w, perfs_w) = (workload(&ours), workload(&perfs));
    assert!(
        !perfs_w.is_empty(),
        "perf script has no stack of the workload"
    );
    let total = |m: &BTreeMap<String, u64>| m.values().sum::<u64>();
    assert_eq!(
        total(&ours_w),
        total(&perfs_w),
        "ours {ours_w:#?}\nperf's {perfs_w:#?}"
    );
    for (stack, n) in &perfs_w {
        let (comm, frames) = stack.split_once(';').unwrap();
        let mut left = *n;
        for (mine, have) in ours_w.iter_mut() {
            let (my_comm, my_frames) = mine.split_once(';').unwrap();
            let same = my_comm == comm
                && (my_frames == frames || my_frames.ends_with(&format!(";{frames}")));
            if same {
                let take = left.min(*have);
                *have -= take;
                left -= take;
            }
        }
        assert_eq!(
            left, 0,
            "perf's `{stack} {n}` is not in memperf's {ours:#?}"
        );
    }
    // No symbol version anywhere; PLT entries are `NAME@plt`, as perf names them.
    let versioned = |s: &str| {
        s.split(';')
            .any(|f| f.contains('@') && !f.ends_with("@plt"))
    };
    for stack in ours.keys() {
        assert!(!versioned(stack), "a symbol version in {stack}");
    }
    // The frames, by the names perf gives them, in the default report too.
    let plain = report_folded(&["-i", file]);
    for stacks in [&ours, &plain] {
        let chain = "_start;__libc_start_main_impl;__libc_start_call_main;main;lc_allocate;";
        assert!(
            stacks.keys().any(|s| s.contains(chain)),
            "{chain} in {stacks:#?}"
        );
        assert!(stacks.keys().all(|s| !versioned(s)), "{stacks:#?}");
    }
}

/// The first CPython 3.12 or later: `python3.1N` on PATH, else under pyenv's versions.
fn python_with_perf_support() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = (12..=20)
        .rev()
        .map(|minor| PathBuf::from(format!("python3.{minor}")))
        .collect();
    let home = std::env::var_os("HOME").map(PathBuf::from);
    if let Some(Ok(versions)) = home.map(|h| std::fs::read_dir(h.join(".pyenv/versions"))) {
        for v in versions.flatten() {
            for minor in 12..=20 {
                candidates.push(v.path().join(format!("bin/python3.{minor}")));
            }
        }
    }
    candidates.into_iter().find(|p| {
        Command::new(p)
            .args(["-c", "import sys; sys.exit(sys.version_info < (3, 12))"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// Runs `PROGRAM ARGS` under `memperf record -e page-faults -c 1` in `dir` (where Node
/// leaves its `isolate-*-v8.log`) and returns the folded stacks. The program prints its pid
/// on its first line, whose perf map is removed after.
fn record_interpreter(dir: &Path, program: &Path, args: &[&str]) -> BTreeMap<String, u64> {
    let out = dir.join("interp.data");
    let o = {
        let _turn = recording_turn();
        memperf()
            .args([
                "record",
                "-q",
                "-m",
                TEST_RING_PAGES,
                "-e",
                "page-faults",
                "-c",
                "1",
            ])
            .arg("-o")
            .arg(&out)
            .arg("--")
            .arg(program)
            .args(args)
            .current_dir(dir)
            .output()
            .expect("run memperf record")
    };
    assert!(o.status.success(), "memperf record: {}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let stacks = report_folded(&["-i", out.to_str().unwrap()]);
    if let Some(pid) = stdout
        .lines()
        .next()
        .and_then(|l| l.trim().parse::<u32>().ok())
    {
        let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    }
    stacks
}

/// Whether `stack` (root first, `;`-separated) holds `chain` in that order, not
/// necessarily adjacent.
fn in_order(stack: &str, chain: &[&str]) -> bool {
    let mut frames = stack.split(';');
    chain.iter().all(|want| frames.any(|f| f == *want))
}

/// CPython 3.12's `-X perf` names each Python function's trampoline in
/// `/tmp/perf-PID.map`; the trampolines have no unwind info and no frame pointer, and the
/// stacks stopped at the first `py::` frame (as perf's own do). They reach `Py_RunMain`.
#[test]
fn python_perf_trampolines_are_named_and_reach_py_runmain() {
    let what = "python -X perf";
    if !require_perf(what) {
        return;
    }
    let Some(python) = python_with_perf_support() else {
        eprintln!("skipping {what}: no CPython 3.12 or later (python3.12, ~/.pyenv) here");
        return;
    };
    let dir = scratch();
    let script = dir.path().join("pyfaults.py");
    std::fs::write(
        &script,
        "import os\nprint(os.getpid(), flush=True)\n\
         def py_touch(n):\n    buf = bytearray(n * 4096)\n    return len(buf)\n\
         def py_level1(n):\n    return py_touch(n)\n\
         print(py_level1(2000))\n",
    )
    .unwrap();
    let s = script.to_str().unwrap();
    let stacks = record_interpreter(dir.path(), &python, &["-X", "perf", s]);
    let touch = format!("py::py_touch:{s}");
    let chain = [
        "Py_RunMain",
        &format!("py::<module>:{s}"),
        "_PyEval_EvalFrameDefault",
        &format!("py::py_level1:{s}"),
        "_PyEval_EvalFrameDefault",
        &touch,
        "_PyEval_EvalFrameDefault",
    ];
    let (mut all, mut whole) = (0, 0);
    for (stack, n) in &stacks {
        if stack.split(';').any(|f| f == touch) {
            all += n;
            if in_order(stack, &chain) {
                whole += n;
            }
        }
    }
    assert!(all > 0, "no sample in {touch}: {stacks:#?}");
    // A fault on a new stack page inside a trampoline itself may still stop there.
    assert!(
        whole * 100 >= all * 95,
        "{whole} of {all} reach Py_RunMain: {stacks:#?}"
    );
}

/// Whether `frame` is V8's perf-map name of JS function `name` at `loc`: `JS:~name loc`
/// (Node 20), `LazyCompile:*name loc` (Node 18), with any tier mark.
fn is_js_frame(frame: &str, name: &str, loc: &str) -> bool {
    let Some((kind, rest)) = frame.split_once(':') else {
        return false;
    };
    let rest = rest.trim_start_matches(['~', '*', '^', '+']);
    ["JS", "LazyCompile", "Function"].contains(&kind) && rest == format!("{name} {loc}")
}

const JS_FAULTS: &str = "console.log(process.pid);\n\
function jsTouch(n) {\n  const bufs = [];\n  for (let i = 0; i < n; i++) {\n    const b = new Uint8Array(4096 * 16);\n    for (let j = 0; j < b.length; j += 4096) b[j] = 1;\n    bufs.push(b);\n  }\n  return bufs.length;\n}\n\
function jsLevel1(n) { let s = 0; for (let k = 0; k < 20; k++) s += jsTouch(n); return s; }\n\
console.log(jsLevel1(200));\n";

/// Runs `JS_FAULTS` under node with `flag` in a scratch directory and checks that some
/// stack runs from `node::Start` through `jsLevel1` to `jsTouch`, named. Returns the
/// directory (the jitdump of `--perf-prof` is there) and the recording.
fn node_js_stacks(flag: &str) -> Option<(tempfile::TempDir, PathBuf)> {
    let what = format!("node {flag}");
    if !require_perf(&what) {
        return None;
    }
    let have_node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_node {
        eprintln!("skipping {what}: node is not installed (scripts/test.sh installs nodejs)");
        return None;
    }
    let dir = scratch();
    let script = dir.path().join("jsfaults.js");
    std::fs::write(&script, JS_FAULTS).unwrap();
    let s = script.to_str().unwrap();
    let node = PathBuf::from("node");
    let args = [flag, "--interpreted-frames-native-stack", s];
    let stacks = record_interpreter(dir.path(), &node, &args);
    let (touch_loc, level1_loc) = (format!("{s}:2:17"), format!("{s}:11:18"));
    let whole = stacks.keys().find(|stack| {
        let frames: Vec<&str> = stack.split(';').collect();
        let start = frames.iter().position(|f| *f == "node::Start(int, char**)");
        let level1 = frames
            .iter()
            .position(|f| is_js_frame(f, "jsLevel1", &level1_loc));
        let touch = frames
            .iter()
            .position(|f| is_js_frame(f, "jsTouch", &touch_loc));
        matches!((start, level1, touch), (Some(a), Some(b), Some(c)) if a < b && b < c)
    });
    assert!(
        whole.is_some(),
        "{what}: no stack runs node::Start … jsLevel1 → jsTouch: {:#?}",
        stacks
            .keys()
            .filter(|k| k.contains("jsTouch"))
            .collect::<Vec<_>>()
    );
    let out = dir.path().join("interp.data");
    Some((dir, out))
}

/// Node's `--perf-basic-prof` names JIT-compiled and (with
/// `--interpreted-frames-native-stack`) interpreted JS functions in `/tmp/perf-PID.map`;
/// V8 keeps frame pointers in its code, so the stacks run from the faulting builtin through
/// the JS frames to `node::Start`.
#[test]
fn node_perf_basic_prof_js_frames_reach_node_start() {
    node_js_stacks("--perf-basic-prof");
}

/// Node's `--perf-prof` writes a jitdump (`jit-PID.dump` in its directory) and no perf map:
/// the JS frames are named from the dump, in the report and in `memperf script`, whose dso
/// for them is the dump. Regression: `memperf script` named JIT frames before the process
/// had mapped its dump and never looked again.
#[test]
fn node_perf_prof_jitdump_names_js_frames() {
    let Some((dir, out)) = node_js_stacks("--perf-prof") else {
        return;
    };
    let dump = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "dump"))
        .expect("node --perf-prof wrote no jitdump");
    let name = dump.file_name().unwrap().to_str().unwrap();
    let pid = &name["jit-".len()..name.len() - ".dump".len()];
    assert!(!Path::new(&format!("/tmp/perf-{pid}.map")).exists());
    let o = run_memperf(&["script", "-q", "-i", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    let line = format!("({})", dump.display());
    assert!(
        text.lines()
            .any(|l| l.contains(" JS:") && l.contains("jsTouch") && l.ends_with(&line)),
        "no jsTouch frame from {line} in memperf script"
    );
}

/// Records `jitdump N DIR MODE` (the fixture writes `DIR/jit-PID.dump`) and returns the
/// recording's path, the dump's and memperf record's standard error.
fn record_jitdump(dir: &Path, variant: Variant, n: u32, mode: &str) -> (PathBuf, PathBuf, String) {
    let out = dir.join(format!("jit-{variant:?}.data"));
    let prog = fixture("jitdump", variant);
    let d = dir.to_str().unwrap();
    let o = record(
        &out,
        &["-e", "page-faults", "-c", "1"],
        &prog,
        &[&n.to_string(), d, mode],
    );
    let dumps: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "dump"))
        .collect();
    assert_eq!(dumps.len(), 1, "{dumps:?}");
    let dump = dumps[0].clone();
    (out, dump, stderr(&o))
}

/// `perf record --call-graph dwarf` of `jitdump N DIR MODE` on CLOCK_MONOTONIC (`-k 1`, the
/// jitdump's clock, as perf inject wants), then `perf inject --jit` of it: the two files.
fn perf_record_jitdump(dir: &Path, variant: Variant, n: u32, mode: &str) -> (PathBuf, PathBuf) {
    let (raw, injected) = (dir.join("perf.data"), dir.join("jit.data"));
    {
        let _turn = recording_turn();
        let o = Command::new("perf")
            .args(["record", "-q", "-k", "1", "-e", "page-faults:u", "-c", "1"])
            .args(["-m", "4096", "--call-graph", "dwarf", "-o"])
            .arg(&raw)
            .arg("--")
            .arg(fixture("jitdump", variant))
            .args([&n.to_string(), dir.to_str().unwrap(), mode])
            .output()
            .expect("run perf record");
        assert!(o.status.success(), "perf record: {}", stderr(&o));
    }
    let o = Command::new("perf")
        .args(["inject", "--jit", "-i"])
        .arg(&raw)
        .arg("-o")
        .arg(&injected)
        .output()
        .expect("run perf inject");
    assert!(o.status.success(), "perf inject: {}", stderr(&o));
    (raw, injected)
}

/// The stacks through `main;jd_level1` and the JIT frame, as (frames after the comm, count).
fn jit_stacks(stacks: &BTreeMap<String, u64>) -> Vec<(String, u64)> {
    stacks
        .iter()
        .filter_map(|(s, n)| {
            let (_, frames) = s.split_once(';')?;
            frames
                .contains(";main;jd_level1;")
                .then(|| (frames.to_string(), *n))
        })
        .collect()
}

/// A JIT that writes a jitdump file (as perf inject --jit reads it) has its code named from
/// the JIT_CODE_LOAD record, its line from JIT_CODE_DEBUG_INFO, and the stacks of faults
/// inside that code reach `main`, with or without frame pointers in the rest.
#[test]
fn jitdump_names_jit_code_and_its_stacks_reach_main() {
    if !require_perf("jitdump") {
        return;
    }
    const N: u32 = 200;
    for variant in Variant::ALL {
        let dir = scratch();
        let (out, _, _) = record_jitdump(dir.path(), variant, N, "fp");
        let file = out.to_str().unwrap();
        let stacks = report_folded(&["-i", file]);
        let want =
            "_start;__libc_start_main_impl;__libc_start_call_main;main;jd_level1;jit_touch_pages";
        let jit = jit_stacks(&stacks);
        assert_eq!(
            jit,
            vec![(want.to_string(), u64::from(N))],
            "{variant:?}: {stacks:#?}"
        );
        let lines = report_folded(&["--lines", "-i", file]);
        assert!(
            lines
                .iter()
                .any(|(s, &n)| s.ends_with(";jit_touch_pages (jitted.js:7)") && n == u64::from(N)),
            "{variant:?}: {lines:#?}"
        );
    }
}

/// A jitdump cut inside its JIT_CODE_LOAD record, or swapped for a FIFO, leaves the JIT
/// frame unnamed and says why in the report's header; nothing panics or blocks.
#[test]
fn damaged_jitdump_is_a_counted_problem_not_a_wrong_name() {
    if !require_perf("damaged jitdump") {
        return;
    }
    const N: u32 = 50;
    let dir = scratch();
    let (out, dump, _) = record_jitdump(dir.path(), Variant::Fp, N, "fp");
    let file = out.to_str().unwrap();
    let whole = std::fs::read(&dump).unwrap();
    // Header (40 bytes), JIT_CODE_DEBUG_INFO, then the load: cut 20 bytes into the load.
    let debug_size = u32::from_ne_bytes(whole[44..48].try_into().unwrap()) as usize;
    std::fs::write(&dump, &whole[..40 + debug_size + 20]).unwrap();
    let text = run_memperf(&["report", "-i", file]);
    assert!(text.status.success(), "{}", stderr(&text));
    let text = String::from_utf8(text.stdout).unwrap();
    // The header's line, with the lines it wraps onto (`#   `).
    let problem = text
        .lines()
        .skip_while(|l| !l.contains("problems while reading symbols"))
        .enumerate()
        .take_while(|(i, l)| *i == 0 || l.starts_with("#   "))
        .map(|(_, l)| l.trim_start_matches('#').trim())
        .collect::<Vec<_>>()
        .join(" ");
    assert!(!problem.is_empty(), "no problem reported: {text}");
    assert!(
        problem.contains("jitdump") && problem.contains("truncated"),
        "{problem}"
    );
    let stacks = report_folded(&["-i", file]);
    let jit = jit_stacks(&stacks);
    assert!(
        jit.iter().all(|(s, _)| s.ends_with(";jd_level1;[unknown]")),
        "{jit:#?}"
    );
    assert_eq!(jit.iter().map(|(_, n)| n).sum::<u64>(), u64::from(N));
    // A FIFO where the dump was: refused at once, never waited on.
    std::fs::remove_file(&dump).unwrap();
    common::mkfifo(&dump);
    let stacks = report_folded(&["-i", file]);
    assert_eq!(jit_stacks(&stacks).len(), 1, "{stacks:#?}");
}

/// The `truncated because:` line of `memperf record`'s summary (empty when none was).
fn truncation_reasons(summary: &str) -> &str {
    summary
        .lines()
        .find_map(|l| l.trim().strip_prefix("truncated because: "))
        .unwrap_or("")
}

/// Issue 14: JIT code that keeps no frame pointer (it moves the stack pointer and uses rbp
/// for data) is walked through by the unwind info its jitdump gives it
/// (`JIT_CODE_UNWINDING_INFO`, a hand-built `.eh_frame`): every fault's stack runs from the
/// C function it called back through the JIT function to `main`. Without that record, every
/// walk stops at the JIT frame and is counted truncated.
#[test]
fn jitdump_unwinding_info_walks_through_jit_code_without_a_frame_pointer() {
    let what = "jitdump unwinding info";
    if !require_perf(what) {
        return;
    }
    if !cfg!(target_arch = "x86_64") {
        eprintln!("skipping {what}: the fixture's JIT code is x86-64");
        return;
    }
    const N: u32 = 200;
    let through_jit = |stacks: &BTreeMap<String, u64>| -> Vec<(String, u64)> {
        stacks
            .iter()
            .filter_map(|(s, n)| {
                let (_, frames) = s.split_once(';')?;
                frames
                    .ends_with("jit_call_touch;jd_touch")
                    .then(|| (frames.to_string(), *n))
            })
            .collect()
    };
    let dir = scratch();
    let (out, _, summary) = record_jitdump(dir.path(), Variant::NoFp, N, "cfi");
    let stacks = report_folded(&["-i", out.to_str().unwrap()]);
    let want = "_start;__libc_start_main_impl;__libc_start_call_main;main;jd_level1;\
                jit_call_touch;jd_touch";
    assert_eq!(
        through_jit(&stacks),
        vec![(want.to_string(), u64::from(N))],
        "{stacks:#?}"
    );
    // The fixture wrote the function's records 500 ms after mapping the dump, when the dump
    // had been read once already: the walks that stopped in the function read it again.
    let reads = summary
        .split("1 JIT functions unwound by their jitdump's unwind info (80 bytes of CFI, ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next()?.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no JIT function line: {summary}"));
    assert!(reads >= 2, "{summary}");
    // Faults elsewhere may be cut at the stack copy's end (the exit path); none for want of
    // unwind info.
    assert!(
        !truncation_reasons(&summary).contains("no unwind info"),
        "{summary}"
    );

    let dir = scratch();
    let (out, _, summary) = record_jitdump(dir.path(), Variant::NoFp, N, "nocfi");
    let stacks = report_folded(&["-i", out.to_str().unwrap()]);
    assert_eq!(
        through_jit(&stacks),
        vec![("jit_call_touch;jd_touch".to_string(), u64::from(N))],
        "{stacks:#?}"
    );
    assert!(
        truncation_reasons(&summary)
            .split(", ")
            .any(|r| r == format!("{N} no unwind info")),
        "{summary}"
    );
    assert!(!summary.contains("JIT functions unwound"), "{summary}");
}

/// memperf reads a `perf record --call-graph dwarf` file of the same JIT as `perf inject
/// --jit` makes perf read it: the `.eh_frame` where perf places it. Every stack through
/// `jit_call_touch` that perf script prints after the injection reaches `main`, and memperf's
/// report of the file as recorded (no injection needed) has the same stacks.
#[test]
fn jitdump_unwinding_info_is_read_as_perf_inject_reads_it() {
    let what = "jitdump unwinding info beside perf inject";
    if !require_perf(what) || !require_perf_tool(what) {
        return;
    }
    if !cfg!(target_arch = "x86_64") {
        eprintln!("skipping {what}: the fixture's JIT code is x86-64");
        return;
    }
    let dir = scratch();
    let (raw, injected) = perf_record_jitdump(dir.path(), Variant::NoFp, 100, "cfi");
    let chain = ["jd_touch", "jit_call_touch", "jd_level1", "main"];
    let perfs: Vec<ScriptSample> = perf_script(&injected)
        .into_iter()
        .filter(|s| s.has_frame("jit_call_touch"))
        .collect();
    assert!(
        !perfs.is_empty(),
        "perf script shows no jit_call_touch frame"
    );
    assert!(
        perfs.iter().all(|s| s.has_chain(&chain)),
        "perf inject's stacks: {perfs:#?}"
    );
    let ours = report_folded(&["-i", raw.to_str().unwrap()]);
    let want = "_start;__libc_start_main_impl;__libc_start_call_main;main;jd_level1;\
                jit_call_touch;jd_touch";
    let through: Vec<(&str, u64)> = ours
        .iter()
        .filter(|(s, _)| s.contains("jit_call_touch"))
        .map(|(s, n)| (s.split_once(';').unwrap().1, *n))
        .collect();
    assert_eq!(through, vec![(want, perfs.len() as u64)], "{ours:#?}");
}

/// A JIT that places a second function where the first was (`jitdump N DIR reuse`: two
/// loads of one address, N faults under each) has each sample named by the load in effect
/// when it ran, as `perf inject --jit` names them: in memperf's recording (its clocks read
/// together say where CLOCK_MONOTONIC, the dump's clock, was), and in perf's recording on
/// CLOCK_MONOTONIC (`-k 1`) read as it is, beside perf inject's own reading of it.
#[test]
fn jit_code_at_a_reused_address_is_named_by_the_load_in_effect_when_it_ran() {
    let what = "jitdump names by sample time";
    if !require_perf(what) || !require_perf_tool(what) {
        return;
    }
    if !cfg!(target_arch = "x86_64") {
        eprintln!("skipping {what}: the fixture's JIT code is x86-64");
        return;
    }
    const N: u64 = 150;
    let per_function = |stacks: &BTreeMap<String, u64>| -> Vec<(String, u64)> {
        let mut by: BTreeMap<String, u64> = BTreeMap::new();
        for (s, n) in stacks.iter().filter(|(s, _)| s.contains(";jd_level1;")) {
            *by.entry(s.rsplit(';').next().unwrap().to_string())
                .or_default() += n;
        }
        by.into_iter().collect()
    };
    let want = vec![
        ("jit_touch_again".to_string(), N),
        ("jit_touch_pages".to_string(), N),
    ];
    let dir = scratch();
    let (out, _, _) = record_jitdump(dir.path(), Variant::Fp, N as u32, "reuse");
    let ours = report_folded(&["-i", out.to_str().unwrap()]);
    assert_eq!(per_function(&ours), want, "{ours:#?}");

    let dir = scratch();
    let (raw, injected) = perf_record_jitdump(dir.path(), Variant::Fp, N as u32, "reuse");
    let ours = report_folded(&["-i", raw.to_str().unwrap()]);
    assert_eq!(
        per_function(&ours),
        want,
        "memperf on perf's file: {ours:#?}"
    );
    let samples = perf_script(&injected);
    for (name, n) in &want {
        let named = samples.iter().filter(|s| s.has_frame(name)).count();
        assert_eq!(named as u64, *n, "perf inject names {name}");
    }
}
