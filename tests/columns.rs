//! Prose fits 80 columns: the summaries, notes and headers every command prints (a
//! terminal's width; they were up to 590 columns) are wrapped by `output::wrap`. Table rows
//! and stacks are data, printed as they are, and left out here: the lines of a stack start
//! with a tab (`leak`'s and `rss`'s, as memleak's), the heap's histogram and tables come
//! after its summary block.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;

/// The lines of `text` over 80 columns (trailing spaces, which a table pads with, apart).
fn too_wide<'a>(lines: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    lines
        .filter(|l| !l.starts_with('\t'))
        .filter(|l| l.trim_end().chars().count() > 80)
        .collect()
}

fn run(args: &[&str]) -> (String, String) {
    let o = run_memperf(args);
    assert!(o.status.success(), "memperf {args:?}: {}", stderr(&o));
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn summaries_notes_and_headers_fit_80_columns() {
    if !require_perf("80 columns") {
        return;
    }
    let dir = scratch();
    let data = dir.path().join("columns.data");
    let data = data.to_str().unwrap();
    let pagefault = fixture("pagefault", Variant::NoFp);
    let pagefault = pagefault.to_str().unwrap();
    let moved = fixture("mremapfaults", Variant::NoFp);
    let moved = moved.to_str().unwrap();
    let _turn = recording_turn();
    let mut wide = Vec::new();
    let mut check = |what: &str, lines: Vec<&str>| {
        for l in too_wide(lines.into_iter()) {
            wide.push(format!("{what}: {} columns: {l}", l.chars().count()));
        }
    };

    // record's start line and summary (its notes, the dwarf,auto sizes, the mremap line).
    let (_, err) = run(&["record", "-o", data, "--", moved]);
    check("record", err.lines().collect());
    // The report's headers: text, --by, --timeline; and the [no mapping recorded] note.
    for args in [
        &[][..],
        &["--by", "mapping"],
        &["--by", "file"],
        &["--timeline", "100ms"],
    ] {
        let (out, err) = run(&[&["report", "-i", data][..], args].concat());
        let header = out.lines().filter(|l| l.starts_with('#'));
        check(
            &format!("report {args:?}"),
            header.chain(err.lines()).collect(),
        );
    }
    let (_, err) = run(&["stat", "-e", "page-faults", "--", pagefault, "2000"]);
    check("stat", err.lines().collect());
    let (out, err) = run(&["leak", "--", &fixture_path("leak"), "10", "100", "quick"]);
    check("leak", out.lines().chain(err.lines()).collect());
    let (out, err) = run(&["rss", "--", &fixture_path("rss"), "three", "100"]);
    check("rss", out.lines().chain(err.lines()).collect());
    // The heap's summary block, up to its first table.
    let (out, err) = run(&["heap", "--", &fixture_path("heap")]);
    let summary = out.lines().take_while(|l| !l.is_empty());
    check("heap", summary.chain(err.lines()).collect());
    for tool in ["faults", "ffaults", "fmapfault", "brkstack", "swapin"] {
        let (_, err) = run(&[tool, "--", moved]);
        check(tool, err.lines().collect());
    }
    let (out, err) = run(&["triage", "--duration", "1"]);
    check("triage", out.lines().chain(err.lines()).collect());
    assert!(wide.is_empty(), "{}", wide.join("\n"));
}

fn fixture_path(name: &str) -> String {
    fixture(name, Variant::NoFp).to_str().unwrap().to_string()
}
