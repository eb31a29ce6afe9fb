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
use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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

/// The profiles `memperf agent --otel-memory` wrote into `dir`, checked with `go tool pprof`
/// against the fixture's own totals (its standard output).
fn check_contract_figures(dir: &Path, stdout: &str, err: &str) {
    let own = own_totals(stdout);
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(!files.is_empty(), "no profile: {err}");
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
    // Only the contract's columns, each probe's sites in one: no page faults unless asked
    // for, no column of a second site (`alloc_1`, `free_1`).
    let types = pprof(&files, &["-raw"]);
    assert!(
        types.contains(
            "alloc_objects/count alloc_space/bytes inuse_objects/count inuse_space/bytes\n"
        ),
        "{types}"
    );
    assert!(!types.contains("page-faults"), "{types}");
    // The blocks in use at each window's end: never more than the function keeps, all of
    // them in the windows that end while the fixture holds still. A free at a site not read
    // leaves its block in use; an allocation at one, its block out.
    for func in ["small_blocks", "big_blocks"] {
        let want = |k: &str| own[&(func.to_string(), k.to_string())];
        let mut most = (0, 0);
        for f in &files {
            let f = std::slice::from_ref(f);
            let objects = pprof(
                f,
                &[
                    "-top",
                    "-cum",
                    "-nodefraction=0",
                    "-sample_index=inuse_objects",
                ],
            );
            let space = pprof(
                f,
                &[
                    "-top",
                    "-cum",
                    "-nodefraction=0",
                    "-unit=B",
                    "-sample_index=inuse_space",
                ],
            );
            let objects: u64 = cum_or_zero(&objects, func).parse().unwrap();
            let space: u64 = cum_or_zero(&space, func)
                .trim_end_matches('B')
                .parse()
                .unwrap();
            assert!(
                objects <= want("live") && space <= want("live_weighted"),
                "{err}"
            );
            most = most.max((objects, space));
        }
        assert_eq!(most, (want("live"), want("live_weighted")), "{func}\n{err}");
    }
    // The one block freed that the probes never saw allocated (at the third free site).
    assert!(err.contains(" 1 frees of unknown blocks"), "{err}");
}

/// The cumulative value of function `name` in a `-top -cum` table, 0 when it is absent.
fn cum_or_zero(top: &str, name: &str) -> String {
    top.lines()
        .find(|l| l.trim_end().ends_with(&format!(" {name}")))
        .and_then(|l| l.split_whitespace().nth(3))
        .unwrap_or("0")
        .to_string()
}

/// How many sites (`.note.stapsdt` entries) the probe `otel_memory:NAME` has in `object`,
/// by `readelf -n`.
fn sites(object: &Path, name: &str) -> usize {
    let o = Command::new("readelf")
        .arg("-n")
        .arg(object)
        .output()
        .unwrap();
    assert!(o.status.success(), "readelf -n: {}", stderr(&o));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.trim() == format!("Name: {name}"))
        .count()
}

#[test]
fn the_fixture_fires_each_probe_from_several_sites() {
    // What makes the figures above show a site left out (the probes are inlined).
    let program = fixture("otelmem", Variant::Fp);
    assert_eq!((sites(&program, "alloc"), sites(&program, "free")), (2, 3));
    let build = scratch();
    let (lib, _) = otelmem_as_a_library(build.path());
    assert_eq!((sites(&lib, "alloc"), sites(&lib, "free")), (2, 3));
}

/// `memperf agent --interval 0.2 --call-graph fp --output DIR OTEL_MEMORY -- PROGRAM 3000`.
fn agent_on(program: &Path, otel_memory: &[&OsStr], dir: &Path) -> std::process::Output {
    agent_cmd(program, otel_memory, dir).output().unwrap()
}

/// The command of [`agent_on`].
fn agent_cmd(program: &Path, otel_memory: &[&OsStr], dir: &Path) -> Command {
    let mut cmd = memperf();
    cmd.args([
        "agent",
        "--interval",
        "0.2",
        "--call-graph",
        "fp",
        "--output",
    ])
    .arg(dir)
    .args(otel_memory)
    .arg("--")
    .arg(program)
    .arg("3000");
    cmd
}

#[test]
fn the_agent_reads_the_otel_memory_contract_as_alloc_objects_and_alloc_space() {
    if !require_perf("memperf agent --otel-memory") || !have_go() {
        return;
    }
    let program = fixture("otelmem", Variant::Fp);
    let dir = scratch();
    let o = agent_on(
        &program,
        &["--otel-memory".as_ref(), program.as_os_str()],
        dir.path(),
    );
    let err = stderr(&o);
    assert!(o.status.success(), "agent failed: {err}");
    check_contract_figures(dir.path(), &String::from_utf8_lossy(&o.stdout), &err);
}

#[test]
fn without_a_path_the_agent_finds_the_probes_in_the_commands_executable() {
    if !require_perf("memperf agent --otel-memory") || !have_go() {
        return;
    }
    let program = fixture("otelmem", Variant::Fp);
    let dir = scratch();
    let o = agent_on(&program, &["--otel-memory".as_ref()], dir.path());
    let err = stderr(&o);
    assert!(o.status.success(), "agent failed: {err}");
    let canonical = program.canonicalize().unwrap();
    assert!(
        err.contains(&format!(
            "otel_memory:alloc and otel_memory:free found in {}",
            program.display()
        )) || err.contains(&format!("found in {}", canonical.display())),
        "{err}"
    );
    check_contract_figures(dir.path(), &String::from_utf8_lossy(&o.stdout), &err);
}

/// The fixture split in two: the probes' side as `libotelmem.so`, and a program linked
/// against it (found by its RUNPATH), in `dir`.
fn otelmem_as_a_library(dir: &Path) -> (PathBuf, PathBuf) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/otelmem.c");
    let lib = dir.join("libotelmem.so");
    let program = dir.join("otelmem-linked");
    let cc = |args: &[&OsStr]| {
        let o = Command::new("cc")
            .args(["-O2", "-g", "-fno-omit-frame-pointer"])
            .args(args)
            .output()
            .expect("run cc (install gcc)");
        assert!(o.status.success(), "cc {args:?}: {}", stderr(&o));
    };
    cc(&[
        "-DOTELMEM_LIB".as_ref(),
        "-shared".as_ref(),
        "-fPIC".as_ref(),
        "-o".as_ref(),
        lib.as_os_str(),
        src.as_os_str(),
    ]);
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    cc(&[
        "-DOTELMEM_MAIN".as_ref(),
        "-o".as_ref(),
        program.as_os_str(),
        src.as_os_str(),
        "-L".as_ref(),
        dir.as_os_str(),
        "-lotelmem".as_ref(),
        rpath.as_ref(),
    ]);
    (lib, program)
}

#[test]
fn without_a_path_the_agent_finds_the_probes_in_a_shared_library_the_command_loads() {
    if !require_perf("memperf agent --otel-memory") || !have_go() {
        return;
    }
    let build = scratch();
    let (lib, program) = otelmem_as_a_library(build.path());
    let dir = scratch();
    let o = agent_on(&program, &["--otel-memory".as_ref()], dir.path());
    let err = stderr(&o);
    assert!(o.status.success(), "agent failed: {err}");
    assert!(
        err.contains(&format!(
            "otel_memory:alloc and otel_memory:free found in {}",
            lib.display()
        )),
        "{err}"
    );
    check_contract_figures(dir.path(), &String::from_utf8_lossy(&o.stdout), &err);
}

#[test]
fn without_a_path_the_agent_finds_the_probes_of_a_running_process() {
    if !require_perf("memperf agent --otel-memory") {
        return;
    }
    let build = scratch();
    let (lib, program) = otelmem_as_a_library(build.path());
    finds_the_library_of_a_running_process(&lib, Command::new(&program));
}

/// The agent attached with `--otel-memory -p` (no path) to `program` started past its
/// allocations (its first line) and held there, its blocks and `lib` mapped (killed at the
/// end), names `lib` as where it found the probes, through the process's root as every file
/// of a target process is opened.
fn finds_the_library_of_a_running_process(lib: &Path, mut program: Command) {
    let mut child = program
        .args(["10", "60000"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut first)
        .unwrap();
    let dir = scratch();
    let o = memperf()
        .args(["agent", "--duration", "0.3", "--otel-memory", "-p"])
        .arg(child.id().to_string())
        .arg("--output")
        .arg(dir.path())
        .output()
        .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "agent failed: {err}");
    let through_root = format!(
        "/proc/{}/root{}",
        child.id(),
        lib.canonicalize().unwrap().display()
    );
    assert!(
        err.contains(&format!(
            "otel_memory:alloc and otel_memory:free found in {through_root}"
        )),
        "{err}"
    );
}

/// `libotelmem.so` and a program that opens it with dlopen (named by `OTELMEM_LIBRARY`)
/// before it allocates, as a program loads a plugin, in `dir`.
fn otelmem_opening_the_library(dir: &Path) -> (PathBuf, PathBuf) {
    let (lib, _) = otelmem_as_a_library(dir);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/otelmem.c");
    let program = dir.join("otelmem-dlopen");
    let o = Command::new("cc")
        .args(["-O2", "-g", "-fno-omit-frame-pointer"])
        .args(["-DOTELMEM_MAIN", "-DOTELMEM_DLOPEN", "-o"])
        .arg(&program)
        .arg(&src)
        .arg("-ldl")
        .output()
        .expect("run cc (install gcc)");
    assert!(o.status.success(), "cc: {}", stderr(&o));
    (lib, program)
}

#[test]
fn a_library_the_command_opens_with_dlopen_is_read_when_named() {
    if !require_perf("memperf agent --otel-memory") || !have_go() {
        return;
    }
    let build = scratch();
    let (lib, program) = otelmem_opening_the_library(build.path());
    let dir = scratch();
    // The probes are placed on the file before the program runs; they fire once it maps it.
    let o = agent_cmd(
        &program,
        &["--otel-memory".as_ref(), lib.as_os_str()],
        dir.path(),
    )
    .env("OTELMEM_LIBRARY", &lib)
    .output()
    .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "agent failed: {err}");
    check_contract_figures(dir.path(), &String::from_utf8_lossy(&o.stdout), &err);
}

#[test]
fn without_a_path_a_command_that_calls_dlopen_is_told_to_name_the_library() {
    let build = scratch();
    let (lib, program) = otelmem_opening_the_library(build.path());
    let o = memperf()
        .args(["agent", "--output", "/tmp", "--otel-memory", "--"])
        .arg(&program)
        .env("OTELMEM_LIBRARY", &lib)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "`{}` calls dlopen, and a library it opens while it runs is not known before it \
             starts",
            program.display()
        )),
        "{err}"
    );
    assert!(err.contains("with --otel-memory PATH"), "{err}");
}

#[test]
fn without_a_path_the_agent_finds_a_library_a_running_process_opened_with_dlopen() {
    if !require_perf("memperf agent --otel-memory") {
        return;
    }
    let build = scratch();
    let (lib, program) = otelmem_opening_the_library(build.path());
    let mut cmd = Command::new(&program);
    cmd.env("OTELMEM_LIBRARY", &lib);
    finds_the_library_of_a_running_process(&lib, cmd);
}

#[test]
fn without_a_path_a_command_without_the_probes_is_refused_clearly() {
    let o = memperf()
        .args(["agent", "--output", "/tmp", "--otel-memory", "--", "true"])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("carries the otel_memory probes; a library opened later with dlopen"),
        "{err}"
    );
    assert!(err.contains("objects of `true`"), "{err}");
    // A script: the programs it starts are not known before it runs.
    let dir = scratch();
    let script = dir.path().join("run.sh");
    std::fs::write(&script, "#!/bin/sh\nexec true\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let o = memperf()
        .args(["agent", "--output", "/tmp", "--otel-memory", "--"])
        .arg(&script)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(stderr(&o).contains("a script?"), "{}", stderr(&o));
    // The whole system: no target to look in.
    let o = memperf()
        .args(["agent", "--output", "/tmp", "--otel-memory"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--otel-memory PATH"), "{}", stderr(&o));
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
    // The events each note names (events that kept one size share a note).
    let named: Vec<&str> = err
        .split("dwarf,auto: ")
        .skip(1)
        .filter_map(|note| note.split_once(" copied ").map(|(names, _)| names))
        .collect();
    assert!(
        named.iter().any(|n| n.contains("otel_memory:alloc`")),
        "{err}"
    );
    assert!(
        !named.iter().any(|n| n.contains("otel_memory:free")),
        "{err}"
    );
}
