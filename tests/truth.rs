#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Every frame memperf prints was on the stack at the sample's moment: frames finished from
//! the live process after the thread moved on to a later phase at the same depth are
//! rejected, in every output (`fixtures/phases.c`, checked against the chains the program
//! can have).

mod common;

use common::{Variant, fixture, memperf, parse_perf_script, record, require_perf, scratch, stderr};

/// The chains rootward from each phase's own function: phase 1's `process_chunk` was only
/// ever called by `read_in_chunks`, from `encrypt_stream`, from `main`; phase 2's
/// `grow_more` by `descend` (any number of them) or `grow_with_sbrk`, from `main`.
fn is_wrong(root_first: &[String]) -> Option<String> {
    let rootward = |from: usize| root_first[..from].iter().rev().map(String::as_str);
    if let Some(i) = root_first.iter().position(|f| f == "process_chunk") {
        let want = ["read_in_chunks", "encrypt_stream", "main"];
        if rootward(i).zip(want).any(|(have, want)| have != want) {
            return Some(format!("phase 1 under {root_first:?}"));
        }
    }
    if let Some(i) = root_first.iter().position(|f| f == "grow_more") {
        let mut up = rootward(i).skip_while(|f| *f == "descend");
        let want = ["grow_with_sbrk", "main"];
        if up.by_ref().zip(want).any(|(have, want)| have != want) {
            return Some(format!("phase 2 under {root_first:?}"));
        }
    }
    None
}

/// The faults the fixture says each phase took.
fn phase_faults(stdout: &str, phase: &str) -> u64 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(phase)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {phase} line in {stdout}"))
}

/// Wrong stacks in folded text, and the samples under each phase's function.
fn check_folded(text: &str) -> (Vec<String>, u64, u64) {
    let (mut wrong, mut one, mut two) = (Vec::new(), 0, 0);
    for line in text.lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap();
        let n: u64 = n.parse().unwrap();
        let frames: Vec<String> = stack.split(';').skip(1).map(str::to_string).collect();
        wrong.extend(is_wrong(&frames));
        one += n * u64::from(frames.iter().any(|f| f == "process_chunk"));
        two += n * u64::from(frames.iter().any(|f| f == "grow_more"));
    }
    (wrong, one, two)
}

fn memperf_out(args: &[&str]) -> String {
    let o = memperf().args(args).output().unwrap();
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn a_later_phase_at_the_same_depth_never_lends_its_frames() {
    if !require_perf("stacks finished from the live process") {
        return;
    }
    let dir = scratch();
    let (mut recovered, mut deep) = (0, 0);
    // 20 runs, with and without frame pointers: the fixed layout (phase 2's return address
    // lands exactly where phase 1's was), the same through a register call (no call target
    // to check), and randomised ones (phase 2 at any depth over phase 1's frames).
    for run in 0..20u32 {
        let variant = if run < 10 { Variant::NoFp } else { Variant::Fp };
        let prog = fixture("phases", variant);
        let file = dir.path().join(format!("phases-{run}.data"));
        let (seed, indirect) = match run % 3 {
            0 => (0, false),
            1 => (0, true),
            _ => (run, false),
        };
        let o = record_with(&file, &prog, &["1000", "4", &seed.to_string()], indirect);
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let err = stderr(&o);
        let path = file.to_str().unwrap();
        let (wrong, one, two) = check_folded(&memperf_out(&["report", "--folded", "-i", path]));
        assert!(wrong.is_empty(), "run {run}, folded: {wrong:#?}\n{err}");
        // Every fault of each phase is under its own function: a phase's fault under the
        // other's frames would leave its own count short. The kernel's page-fault event can
        // count a fault or two more than the pages (in about 1 run in 50 here, 4,001 events
        // where the thread's own minor fault count, getrusage's, said 4,000), never fewer.
        let faults = (phase_faults(&out, "phase1"), phase_faults(&out, "phase2"));
        assert!(
            one >= faults.0 && two >= faults.1 && one + two <= faults.0 + faults.1 + 2,
            "run {run}: {one} and {two} under the phases for {faults:?}: {err}"
        );
        // The same stacks in memperf script, one sample at a time.
        let script = memperf_out(&["script", "-i", path]);
        for s in parse_perf_script(&script) {
            let root_first: Vec<String> = s.frames.iter().rev().cloned().collect();
            if let Some(w) = is_wrong(&root_first) {
                panic!("run {run}, script: {w}\n{err}");
            }
        }
        let line = err
            .lines()
            .find(|l| l.contains("went past"))
            .unwrap_or_default();
        recovered += line
            .split(": ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
        deep += faults.0;
    }
    eprintln!("{recovered} stacks finished from the live process, of {deep} deep ones");
}

/// `memperf record -e page-faults` of the phases fixture, its second phase's call through a
/// register when `indirect`.
fn record_with(
    file: &std::path::Path,
    prog: &std::path::Path,
    args: &[&str],
    indirect: bool,
) -> std::process::Output {
    let _turn = common::recording_turn();
    let mut cmd = memperf();
    cmd.args([
        "record",
        "-m",
        common::TEST_RING_PAGES,
        "-e",
        "page-faults",
        "-o",
    ])
    .arg(file)
    .arg("--")
    .arg(prog)
    .args(args);
    if indirect {
        cmd.env("PHASES_INDIRECT", "1");
    }
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    o
}

/// `--mark-recovered` shows in folded and pprof output which frames were read from the live
/// process, as the text report and script always do.
#[test]
fn mark_recovered_marks_them_in_folded_and_pprof() {
    if !require_perf("stacks finished from the live process") {
        return;
    }
    let prog = fixture("deepstack", Variant::NoFp);
    let dir = scratch();
    let file = dir.path().join("deep.data");
    record(
        &file,
        &["-e", "page-faults", "--call-graph", "dwarf"],
        &prog,
        &["deep", "200", "1000"],
    );
    let path = file.to_str().unwrap();
    let plain = memperf_out(&["report", "--folded", "-i", path]);
    assert!(!plain.contains("[recovered]"), "{plain}");
    let marked = memperf_out(&["report", "--folded", "--mark-recovered", "-i", path]);
    // Every whole stack of touch_pages was finished from the live process: its frames past
    // the copy are marked, main among them, and the leaf is not.
    let whole: u64 = marked
        .lines()
        .filter(|l| l.contains(";main [recovered];") && l.contains(";touch_pages "))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    assert_eq!(whole, 200, "{marked}");
    assert!(!marked.contains("touch_pages [recovered]"), "{marked}");
    if !common::have_go() {
        return;
    }
    let pb = dir.path().join("deep.pb.gz");
    memperf_out(&[
        "report",
        "--mark-recovered",
        "--pprof",
        pb.to_str().unwrap(),
        "-i",
        path,
    ]);
    let tags = common::go_pprof(&pb, &["-tags"]);
    assert!(tags.contains("recovered_frames"), "{tags}");
    let top = common::go_pprof(&pb, &["-top", "-sample_index=0"]);
    assert!(
        common::pprof_flat(&top, "touch_pages") == vec!["200"],
        "{top}"
    );
}
