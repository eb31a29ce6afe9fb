#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `memperf diff` on two recordings of `fixtures/diffphases.c` whose phases fault known
//! numbers of pages: the table's deltas are the known differences, the folded output is
//! inferno-diff-folded's on report's folded stacks, the pprof diff reads in `go tool pprof`
//! as `-diff_base` on report's own profiles does, the flame graph colours the grown and the
//! shrunk stacks; bad input gets a clear error.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use common::*;

/// Pages faulted under phase_a and phase_b, before and after.
const BEFORE: (u64, u64) = (300, 500);
const AFTER: (u64, u64) = (700, 200);

fn chain(phase: &str) -> String {
    format!("main;run_phases;{phase};touch_pages")
}

struct Recorded {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    before: PathBuf,
    after: PathBuf,
}

/// Two recordings of the fixture's page faults, BEFORE's sizes then AFTER's, made once for
/// every test of this file (each writes its outputs beside them under its own names).
fn recorded() -> &'static Recorded {
    static ONCE: OnceLock<Recorded> = OnceLock::new();
    ONCE.get_or_init(|| {
        let dir = scratch();
        let prog = fixture("diffphases", Variant::Fp);
        let path = dir.path().to_path_buf();
        let (before, after) = (path.join("before.data"), path.join("after.data"));
        for (out, (a, b)) in [(&before, BEFORE), (&after, AFTER)] {
            record(
                out,
                &["-e", "page-faults"],
                &prog,
                &[&a.to_string(), &b.to_string()],
            );
        }
        Recorded {
            _dir: dir,
            dir: path,
            before,
            after,
        }
    })
}

fn diff(args: &[&str]) -> Output {
    let o = run_memperf(&[&["diff"], args].concat());
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    o
}

fn diff_ok(args: &[&str]) -> String {
    let o = diff(args);
    assert!(o.status.success(), "memperf diff {args:?}: {}", stderr(&o));
    String::from_utf8(o.stdout).unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The table's rows: (before, after, delta, delta%, stack).
fn table_rows(text: &str) -> Vec<(u64, u64, i64, String, String)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim_start().starts_with("before"))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
                f[3].to_string(),
                f[4].to_string(),
            )
        })
        .collect()
}

/// The row of the stack ending in `tail`.
fn row_of<'a>(
    rows: &'a [(u64, u64, i64, String, String)],
    tail: &str,
) -> &'a (u64, u64, i64, String, String) {
    let found: Vec<_> = rows.iter().filter(|r| r.4.ends_with(tail)).collect();
    assert_eq!(found.len(), 1, "one row ending in {tail}: {rows:?}");
    found[0]
}

fn check_phases(text: &str) {
    let rows = table_rows(text);
    let a = row_of(&rows, &chain("phase_a"));
    assert_eq!((a.0, a.1, a.2), (BEFORE.0, AFTER.0, 400), "{text}");
    assert_eq!(a.3, "+133.33%");
    let b = row_of(&rows, &chain("phase_b"));
    assert_eq!((b.0, b.1, b.2), (BEFORE.1, AFTER.1, -300), "{text}");
    assert_eq!(b.3, "-60.00%");
    // Largest change first: the two phases lead, the loader's few faults follow.
    assert_eq!(rows[0].4, a.4);
    assert_eq!(rows[1].4, b.4);
    assert!(
        rows.windows(2).all(|w| w[0].2.abs() >= w[1].2.abs()),
        "{text}"
    );
}

#[test]
fn the_table_shows_the_known_changes_of_each_stack_largest_first() {
    if !require_perf("diff table") {
        return;
    }
    let r = recorded();
    let text = diff_ok(&["-T", "0", s(&r.before), s(&r.after)]);
    assert!(text.starts_with("# memperf diff of page-faults:"), "{text}");
    check_phases(&text);
    // A side may be report's folded stacks or its pprof instead of the recording.
    let folded = r.dir.join("table-before.folded");
    let o = run_memperf(&["report", "-i", s(&r.before), "--folded"]);
    std::fs::write(&folded, &o.stdout).unwrap();
    let pb = r.dir.join("table-after.pb.gz");
    let o = run_memperf(&["report", "-i", s(&r.after), "--pprof", s(&pb)]);
    assert!(o.status.success(), "{}", stderr(&o));
    check_phases(&diff_ok(&["-T", "0", s(&folded), s(&r.after)]));
    check_phases(&diff_ok(&["-T", "0", s(&folded), s(&pb)]));
    // In bytes: a page per fault.
    let text = diff_ok(&["--weight", "bytes", "-T", "3", s(&r.before), s(&r.after)]);
    let rows = table_rows(&text);
    assert_eq!(rows.len(), 3, "{text}");
    let a = row_of(&rows, &chain("phase_a"));
    assert_eq!(a.2, 400 * 4096, "{text}");
}

fn sorted_lines(text: &str) -> Vec<String> {
    let mut v: Vec<String> = text.lines().map(str::to_string).collect();
    v.sort();
    v
}

#[test]
fn folded_output_is_inferno_diff_folded_of_the_reports_folded_stacks() {
    if !require_perf("diff --folded") || !have_inferno() {
        return;
    }
    let r = recorded();
    let mut folded = Vec::new();
    for (data, name) in [(&r.before, "before.folded"), (&r.after, "after.folded")] {
        let path = r.dir.join(name);
        let o = run_memperf(&["report", "-i", s(data), "--folded"]);
        assert!(o.status.success(), "{}", stderr(&o));
        std::fs::write(&path, &o.stdout).unwrap();
        folded.push(path);
    }
    for normalize in [&[][..], &["-n"][..]] {
        let theirs = Command::new("inferno-diff-folded")
            .args(normalize)
            .arg(&folded[0])
            .arg(&folded[1])
            .output()
            .expect("run inferno-diff-folded (scripts/test.sh installs inferno)");
        assert!(theirs.status.success());
        let ours = diff_ok(&[normalize, &["--folded", s(&r.before), s(&r.after)]].concat());
        let theirs = String::from_utf8(theirs.stdout).unwrap();
        assert_eq!(sorted_lines(&ours), sorted_lines(&theirs), "{normalize:?}");
        let a = format!("{} {} {}", chain("phase_a"), BEFORE.0, AFTER.0);
        if normalize.is_empty() {
            assert!(ours.lines().any(|l| l.ends_with(&a)), "{ours}");
        }
    }
}

/// `go tool pprof -top` rows (flat, flat%, sum%, cum, cum%, name), as a set: rows of equal
/// flat value may come in either order.
fn top_rows(top: &str) -> BTreeSet<String> {
    top.lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // sum% depends on the order of equal rows.
            [f[0], f[1], f[3], f[4], &f[5..].join(" ")].join(" ")
        })
        .collect()
}

fn showing(top: &str) -> String {
    top.lines()
        .find(|l| l.starts_with("Showing nodes"))
        .unwrap_or_else(|| panic!("no total in {top}"))
        .to_string()
}

fn cum_of(top: &str, name: &str) -> String {
    top.lines()
        .find(|l| l.trim_end().ends_with(&format!(" {name}")))
        .and_then(|l| l.split_whitespace().nth(3))
        .unwrap_or_else(|| panic!("no {name} in {top}"))
        .to_string()
}

#[test]
fn pprof_diff_reads_in_go_tool_pprof_as_its_diff_base_of_the_reports_profiles() {
    if !require_perf("diff --pprof") || !have_go() {
        return;
    }
    let r = recorded();
    let (bpb, apb) = (r.dir.join("before.pb.gz"), r.dir.join("after.pb.gz"));
    for (data, pb) in [(&r.before, &bpb), (&r.after, &apb)] {
        let o = run_memperf(&["report", "-i", s(data), "--pprof", s(pb)]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    for (weight, index, a, b) in [
        ("count", "page-faults", "400", "-300"),
        ("bytes", "page-faults_bytes", "1600kB", "-1200kB"),
    ] {
        let out = r.dir.join(format!("diff-{weight}.pb.gz"));
        diff_ok(&[
            "--weight",
            weight,
            "--pprof",
            s(&out),
            s(&r.before),
            s(&r.after),
        ]);
        let args = ["-top", "-nodefraction=0", &format!("-sample_index={index}")];
        let ours = go_pprof(&out, &args);
        assert_eq!(cum_of(&ours, "phase_a"), a, "{ours}");
        assert_eq!(cum_of(&ours, "phase_b"), b, "{ours}");
        let base = [&args[..], &["-diff_base", s(&bpb)]].concat();
        let theirs = go_pprof(&apb, &base);
        assert_eq!(showing(&ours), showing(&theirs), "{ours}\n{theirs}");
        assert_eq!(top_rows(&ours), top_rows(&theirs), "{ours}\n{theirs}");
        let comments = go_pprof(&out, &["-comments"]);
        assert!(comments.contains("pprof::base=true"), "{comments}");
    }
}

/// The fill of the frame whose title starts with `title`.
fn fills(svg: &str, title: &str) -> Vec<(String, String)> {
    svg.split("<title>")
        .skip(1)
        .filter(|part| part.starts_with(title))
        .map(|part| {
            let t = part.split("</title>").next().unwrap().to_string();
            let fill = part
                .split("fill=\"")
                .nth(1)
                .and_then(|f| f.split('"').next())
                .unwrap()
                .to_string();
            (t, fill)
        })
        .collect()
}

#[test]
fn flame_graph_draws_the_grown_stack_red_and_the_shrunk_one_blue() {
    if !require_perf("diff --flamegraph") {
        return;
    }
    let r = recorded();
    let svg = r.dir.join("diff.svg");
    diff_ok(&["--flamegraph", s(&svg), s(&r.before), s(&r.after)]);
    let svg = std::fs::read_to_string(&svg).unwrap();
    let total: f64 = svg
        .split("<title>all (")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .map(|n| n.replace(',', "").parse().unwrap())
        .unwrap();
    // inferno gives each stack's leaf its change, in % of AFTER's total.
    let grew = format!("touch_pages ({} samples", AFTER.0);
    let shrank = format!("touch_pages ({} samples", AFTER.1);
    let (g, k) = (fills(&svg, &grew), fills(&svg, &shrank));
    assert_eq!(g.len(), 1, "{g:?}");
    assert_eq!(k.len(), 1, "{k:?}");
    assert!(
        g[0].0
            .ends_with(&format!("; +{:.2}%)", 400.0 * 100.0 / total)),
        "{g:?}"
    );
    assert!(
        k[0].0
            .ends_with(&format!("; -{:.2}%)", 300.0 * 100.0 / total)),
        "{k:?}"
    );
    // Red (255, c, c) for growth, blue (c, c, 255) for shrinking; the larger change deeper.
    let rgb = |f: &str| -> Vec<u32> {
        f.trim_start_matches("rgb(")
            .trim_end_matches(')')
            .split(',')
            .map(|x| x.trim().parse().unwrap())
            .collect()
    };
    let (red, blue) = (rgb(&g[0].1), rgb(&k[0].1));
    assert!(red[0] == 255 && red[1] == red[2] && red[1] < 250, "{red:?}");
    assert!(
        blue[2] == 255 && blue[0] == blue[1] && blue[0] < 250,
        "{blue:?}"
    );
    assert!(red[1] < blue[0], "the larger change is the deeper colour");
}

fn error_of(args: &[&str]) -> String {
    let o = diff(args);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    let err = stderr(&o);
    assert!(err.starts_with("memperf: error: "), "{err}");
    err
}

#[test]
fn bad_inputs_and_different_events_get_clear_errors() {
    if !require_perf("diff errors") {
        return;
    }
    let dir = scratch();
    let d = dir.path();
    let prog = fixture("diffphases", Variant::Fp);
    let faults = d.join("faults.data");
    let minor = d.join("minor.data");
    let both = d.join("both.data");
    record(&faults, &["-e", "page-faults"], &prog, &["10", "10"]);
    record(&minor, &["-e", "minor-faults"], &prog, &["10", "10"]);
    record(
        &both,
        &["-e", "page-faults", "-e", "minor-faults"],
        &prog,
        &["10", "10"],
    );

    let err = error_of(&[s(&faults), s(&minor)]);
    assert!(
        err.contains("page-faults") && err.contains("minor-faults"),
        "{err}"
    );
    assert!(err.contains("same event"), "{err}");
    let err = error_of(&[s(&faults), s(&both)]);
    assert!(err.contains("--event") && err.contains("2 events"), "{err}");
    // --event picks one; one a side lacks is named with what it has.
    diff_ok(&["--event", "page-faults", s(&faults), s(&both)]);
    let err = error_of(&["--event", "minor-faults", s(&faults), s(&both)]);
    assert!(
        err.contains("no event `minor-faults`") && err.contains("it has: page-faults"),
        "{err}"
    );

    let missing = d.join("missing.data");
    let err = error_of(&[s(&missing), s(&faults)]);
    assert!(
        err.contains("missing.data") && err.contains("No such file"),
        "{err}"
    );
    let garbage = d.join("garbage");
    let bytes: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(&garbage, bytes).unwrap();
    let err = error_of(&[s(&faults), s(&garbage)]);
    assert!(err.contains("neither a recording"), "{err}");
    let text = d.join("text");
    std::fs::write(&text, "hello world\nnot folded\n").unwrap();
    let err = error_of(&[s(&text), s(&faults)]);
    assert!(err.contains("neither a recording"), "{err}");
    let empty = d.join("empty");
    std::fs::write(&empty, "").unwrap();
    assert!(error_of(&[s(&empty), s(&faults)]).contains("is empty"));
    let mut cut = std::fs::read(&faults).unwrap();
    cut.truncate(40);
    let cut_path = d.join("cut.data");
    std::fs::write(&cut_path, cut).unwrap();
    error_of(&[s(&faults), s(&cut_path)]);
    let zipped = d.join("zipped.gz");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, b"not a profile").unwrap();
    std::fs::write(&zipped, gz.finish().unwrap()).unwrap();
    assert!(error_of(&[s(&faults), s(&zipped)]).contains("not a pprof profile"));
    // A diff is not compared again.
    let pb = d.join("diff.pb.gz");
    diff_ok(&["--pprof", s(&pb), s(&faults), s(&faults)]);
    assert!(error_of(&[s(&pb), s(&faults)]).contains("itself a diff"));
    // Sizes are refused for an event that has none.
    let exits = d.join("exits.data");
    record(
        &exits,
        &["-e", "syscalls:sys_enter_exit_group"],
        &prog,
        &["1", "1"],
    );
    let err = error_of(&["--weight", "bytes", s(&exits), s(&exits)]);
    assert!(
        err.contains("no size is known for `syscalls:sys_enter_exit_group`"),
        "{err}"
    );
}
