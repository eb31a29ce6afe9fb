#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! What report's outputs say beside the stacks, checked against truths of their own: the
//! SVG's text elements and sizes at inferno's font size, the fixtures' known byte totals,
//! perf script's sample counts and perf report's call tree of the same file.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

/// inferno's layout: the width of an image without --width, the font size, the title's
/// size, the width of a character per pixel of size, and the pad at each side.
const WIDTH: f64 = 1200.0;
const FONT: f64 = 12.0;
const TITLE: f64 = 17.0;
const CHAR: f64 = 0.59;
const XPAD: f64 = 10.0;

fn report_ok(args: &[&str]) -> (String, String) {
    let mut all = vec!["report", "-q"];
    all.extend_from_slice(args);
    let o = run_memperf(&all);
    let err = stderr(&o);
    assert!(o.status.success(), "memperf report {args:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    (String::from_utf8(o.stdout).unwrap(), err)
}

/// A recording of `brk 64` (64 sbrk(8192) calls through main -> brk_level1 -> grow_heap)
/// with its page faults, the program at a path long enough to make the recorded command
/// wider than a flame graph's title.
fn brk_and_faults(dir: &Path) -> PathBuf {
    let long = dir.join(
        "a-directory-whose-name-is-long-enough-to-make-the-command-line-wider-than-a-flame-graph",
    );
    std::fs::create_dir(&long).unwrap();
    let prog = long.join("brk");
    std::fs::copy(fixture("brk", Variant::NoFp), &prog).unwrap();
    let out = dir.join("brk.data");
    record(
        &out,
        &["-e", "page-faults", "-e", "syscalls:sys_enter_brk"],
        &prog,
        &["64"],
    );
    out
}

/// What perf script counts in a recording of [`brk_and_faults`].
struct Counted {
    brks: u64,
    faults: u64,
}

/// [`brk_and_faults`] in a directory of its own (kept while the caller holds it), with
/// perf script's count of the brk calls and of the page faults.
fn counted_brk_and_faults() -> (tempfile::TempDir, PathBuf, Counted) {
    let dir = scratch();
    let data = brk_and_faults(dir.path());
    let counted = Counted {
        brks: perf_count(&data, "syscalls:sys_enter_brk"),
        faults: perf_count(&data, "page-faults"),
    };
    (dir, data, counted)
}

/// perf script's samples of `event` in `file`.
fn perf_count(file: &Path, event: &str) -> u64 {
    perf_script(file)
        .iter()
        .filter(|s| s.event == event)
        .count() as u64
}

/// The text of the SVG element with `id`, entities decoded.
fn svg_text(svg: &str, id: &str) -> String {
    let at = svg
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id}"));
    let start = at + svg[at..].find('>').unwrap() + 1;
    let end = start + svg[start..].find("</text>").unwrap();
    svg[start..end]
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// The weight inferno's hover text gives frame `name`: `<title>name (1,234 UNIT, ...`.
fn frame_weight(svg: &str, name: &str, unit: &str) -> Option<u64> {
    let at = svg.find(&format!("<title>{name} ("))?;
    let rest = &svg[at + name.len() + 9..];
    let (n, after) = rest.split_once(' ')?;
    after
        .starts_with(unit)
        .then(|| n.replace(',', "").parse().ok())?
}

/// The weights of every frame named `name`.
fn frame_weights(svg: &str, name: &str, unit: &str) -> Vec<u64> {
    svg.match_indices(&format!("<title>{name} ("))
        .filter_map(|(at, _)| frame_weight(&svg[at..], name, unit))
        .collect()
}

/// The title fits between `Reset Zoom` and `Search`; the subtitle in the width.
fn assert_fits(svg: &str, width: f64) {
    let title = svg_text(svg, "title");
    let beside = 10.0 * FONT * CHAR + 10.0;
    let title_px = title.chars().count() as f64 * TITLE * CHAR;
    assert!(
        title_px <= width - 2.0 * (XPAD + beside),
        "title of {title_px} px in {width}: {title}"
    );
    let subtitle = svg_text(svg, "subtitle");
    let sub_px = subtitle.chars().count() as f64 * FONT * CHAR;
    assert!(
        sub_px <= width - 2.0 * XPAD,
        "subtitle of {sub_px} px in {width}: {subtitle}"
    );
}

#[test]
fn flame_graphs_in_bytes_say_bytes_count_their_own_event_and_fit_their_width() {
    if !require_perf("flame graph subtitles") {
        return;
    }
    let (_dir, data, Counted { brks, faults }) = counted_brk_and_faults();
    let path = data.to_str().unwrap();
    assert!(brks >= 64 && faults > 0, "{brks} {faults}");

    let (svg, _) = report_ok(&[
        "-i",
        path,
        "--flamegraph",
        "-",
        "--event",
        "syscalls:sys_enter_brk",
        "--weight",
        "bytes",
    ]);
    // The fixture's 64 sbrk(8192): 512 KiB under grow_heap, in bytes on hover.
    assert_eq!(frame_weight(&svg, "grow_heap", "bytes"), Some(64 * 8192));
    let total = frame_weight(&svg, "all", "bytes").expect("the root in bytes");
    let subtitle = svg_text(&svg, "subtitle");
    // Bytes in binary units, then the samples they are in: the brk calls, not all events'.
    let mib = format!("{:.1} KiB in {brks} samples", total as f64 / 1024.0);
    assert!(
        subtitle.starts_with(&format!("memperf: {mib}")),
        "{subtitle}"
    );
    assert!(
        !subtitle.contains(&format!("{total} samples")),
        "{subtitle}"
    );
    // Every sample's user stack was unwound: the truncation count is over the brk calls.
    assert!(
        subtitle.contains(&format!(" of {brks} user stacks truncated")),
        "{subtitle} (brk calls {brks}, faults {faults})"
    );
    // The long command is shortened in the title, the subtitle fits.
    assert_fits(&svg, WIDTH);
    let title = svg_text(&svg, "title");
    assert!(title.starts_with("syscalls:sys_enter_brk: "), "{title}");
    assert!(
        title.contains("...") && title.ends_with("brk 64"),
        "{title}"
    );

    // At 800 pixels the subtitle keeps its first parts.
    let (narrow, _) = report_ok(&[
        "-i",
        path,
        "--flamegraph",
        "-",
        "--event",
        "page-faults",
        "--width",
        "800",
    ]);
    assert_fits(&narrow, 800.0);
    let subtitle = svg_text(&narrow, "subtitle");
    assert!(
        subtitle.starts_with(&format!("memperf: {faults} samples of page-faults; 0 lost")),
        "{subtitle}"
    );
    assert!(
        subtitle.contains(&format!(" of {faults} user stacks truncated")),
        "{subtitle}"
    );
}

#[test]
fn all_events_draws_each_event_under_a_root_of_its_name() {
    if !require_perf("--all-events") {
        return;
    }
    let (_dir, data, Counted { brks, faults }) = counted_brk_and_faults();
    let path = data.to_str().unwrap();

    let (svg, _) = report_ok(&["-i", path, "--flamegraph", "-", "--all-events"]);
    assert_eq!(frame_weight(&svg, "page-faults", "samples"), Some(faults));
    assert_eq!(
        frame_weight(&svg, "syscalls:sys_enter_brk", "samples"),
        Some(brks)
    );
    assert!(
        svg_text(&svg, "subtitle")
            .starts_with(&format!("memperf: {} samples of 2 events", faults + brks)),
        "{}",
        svg_text(&svg, "subtitle")
    );

    // In bytes: a page per fault, the break's growth per brk call.
    let (svg, _) = report_ok(&[
        "-i",
        path,
        "--flamegraph",
        "-",
        "--all-events",
        "--weight",
        "bytes",
    ]);
    assert_eq!(
        frame_weight(&svg, "page-faults", "bytes"),
        Some(faults * 4096)
    );
    assert!(frame_weight(&svg, "syscalls:sys_enter_brk", "bytes").unwrap() >= 64 * 8192);
    assert_eq!(frame_weight(&svg, "grow_heap", "bytes"), Some(64 * 8192));

    // Folded the same way: each line starts with its event.
    let (folded, _) = report_ok(&["-i", path, "--folded", "--all-events"]);
    let mut per_event: BTreeMap<&str, u64> = BTreeMap::new();
    for line in folded.lines() {
        let (stack, n) = line.rsplit_once(' ').unwrap();
        let event = stack.split(';').next().unwrap();
        *per_event.entry(event).or_default() += n.parse::<u64>().unwrap();
    }
    assert_eq!(
        per_event,
        BTreeMap::from([("page-faults", faults), ("syscalls:sys_enter_brk", brks)])
    );
}

#[test]
fn max_depth_cuts_deep_stacks_and_counts_them() {
    if !require_perf("--max-depth") {
        return;
    }
    let dir = scratch();
    let data = dir.path().join("pf.data");
    record(
        &data,
        &["-e", "page-faults"],
        &fixture("pagefault", Variant::NoFp),
        &["300"],
    );
    let path = data.to_str().unwrap();
    let (full, _) = report_ok(&["-i", path, "--flamegraph", "-"]);
    let (cut, _) = report_ok(&["-i", path, "--flamegraph", "-", "--max-depth", "4"]);
    // main is the 4th frame under the command (_start, __libc_start_main,
    // __libc_start_call_main, main): the 300 faults of its chain hang under one cut frame.
    assert_eq!(frame_weight(&full, "pf_level1", "pages"), Some(300));
    assert_eq!(frame_weight(&cut, "pf_level1", "pages"), None);
    let cut_frames = frame_weights(&cut, "[deeper frames cut]", "pages");
    assert!(cut_frames.iter().any(|&n| n >= 300), "{cut_frames:?}");
    let subtitle = svg_text(&cut, "subtitle");
    assert!(subtitle.contains("stacks cut below depth 4"), "{subtitle}");
    let height = |svg: &str| -> u64 {
        let at = svg.find(" height=\"").unwrap() + 9;
        svg[at..at + svg[at..].find('"').unwrap()].parse().unwrap()
    };
    assert!(
        height(&cut) < height(&full),
        "{} {}",
        height(&cut),
        height(&full)
    );
    // Folded: no stack deeper than the command and 4 frames and the cut frame.
    let (folded, err) = report_ok(&["-i", path, "--folded", "--max-depth", "4"]);
    assert!(
        folded
            .lines()
            .all(|l| l.rsplit_once(' ').unwrap().0.split(';').count() <= 6),
        "{folded}"
    );
    assert!(err.contains("stacks cut below depth 4"), "{err}");
}

#[test]
fn text_reports_print_bytes_in_binary_units_in_80_columns() {
    if !require_perf("text report") {
        return;
    }
    let dir = scratch();
    let data = brk_and_faults(dir.path());
    let path = data.to_str().unwrap();
    let (text, _) = report_ok(&[
        "-i",
        path,
        "--event",
        "syscalls:sys_enter_brk",
        "--weight",
        "bytes",
    ]);
    // The 64 sbrk(8192) under grow_heap: 512 KiB.
    let grow = text
        .split("\n\n")
        .find(|stack| stack.contains("grow_heap"))
        .unwrap_or_else(|| panic!("{text}"));
    let weight = grow.lines().last().unwrap().trim();
    assert!(weight.starts_with("512.0 KiB ("), "{grow}");
    for line in text.lines().filter(|l| l.starts_with('#')) {
        assert!(line.chars().count() <= 80, "{} columns: {line}", line.len());
    }
    // The long command is all there, over several lines.
    let header: String = text
        .lines()
        .take_while(|l| l.starts_with('#'))
        .map(|l| l.trim_start_matches('#').trim())
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        header.contains("a-directory-whose-name-is-long-enough"),
        "{header}"
    );

    // Debug files (libc's, from libc6-dbg) only with -v.
    assert!(!text.contains("debug files used"), "{text}");
    let (verbose, _) = report_ok(&["-i", path, "-v"]);
    assert!(verbose.contains("# debug files used:"), "{verbose}");
    for line in verbose.lines().filter(|l| l.starts_with('#')) {
        assert!(line.chars().count() <= 80, "{line}");
    }
}

/// A call tree as (path from `main`, percent), for every node whose path holds `main`:
/// memperf's `--call-tree` lines (`PCT%  WEIGHT  NAME` or a chain's `NAME`, two spaces of
/// indent per level).
fn memperf_tree(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    // (indent, path, percent) of the nodes above the current line.
    let mut stack: Vec<(usize, Vec<String>, String)> = Vec::new();
    for line in text
        .lines()
        .skip_while(|l| l.starts_with('#') || l.is_empty())
    {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (numbers, name_part) = line.split_at(22);
        let indent = name_part.len() - name_part.trim_start().len();
        let name = name_part.trim().to_string();
        let pct = numbers
            .split_whitespace()
            .next()
            .map(|p| p.trim_end_matches('%'));
        let (path, pct) = match pct {
            Some(pct) => {
                stack.retain(|(i, _, _)| *i < indent);
                let mut path = stack.last().map(|s| s.1.clone()).unwrap_or_default();
                path.push(name);
                (path, pct.to_string())
            }
            // A chain: the child of the line before, at its indent.
            None => {
                let (_, mut path, pct) = stack.pop().unwrap();
                path.push(name);
                (path, pct)
            }
        };
        stack.push((indent, path.clone(), pct.clone()));
        if let Some(m) = path.iter().position(|f| f == "main") {
            out.insert(path[m..].join(";"), pct);
        }
    }
    out
}

/// The same from `perf report --stdio --no-children -g caller`: a node is `--PCT%--NAME`
/// at its marker's column, or a chain's `NAME` at its own; a node's children and chain
/// continue 11 columns right of a marker, at the column of a chain's name.
fn perf_tree(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    // (the column a node's children are at, path, percent)
    let mut nodes: Vec<(usize, Vec<String>, String)> = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() || !line.starts_with(' ') {
            continue;
        }
        let body = line.trim_end();
        if let Some(at) = body.find("--").filter(|&i| body[i + 2..].contains("%--")) {
            let col = at - 1;
            let rest = &body[at + 2..];
            let (pct, name) = rest.split_once("%--").unwrap();
            let parent = nodes.iter().rev().find(|n| n.0 == col);
            let mut path = parent.map(|p| p.1.clone()).unwrap_or_default();
            path.push(name.to_string());
            nodes.push((col + 11, path, pct.to_string()));
        } else {
            let col = body.len() - body.trim_start_matches([' ', '|']).len();
            let name = body[col..].to_string();
            if name.ends_with('%') || name.contains("%  ") {
                // The entry's own line (`100.00%  comm`).
                nodes.clear();
                continue;
            }
            let Some(parent) = nodes.iter().rev().find(|n| n.0 == col).cloned() else {
                continue;
            };
            let mut path = parent.1.clone();
            path.push(name);
            nodes.push((col, path, parent.2.clone()));
        }
        let (_, path, pct) = nodes.last().unwrap();
        if let Some(m) = path.iter().position(|f| f == "main") {
            out.insert(path[m..].join(";"), pct.clone());
        }
    }
    out
}

#[test]
fn call_tree_matches_perf_reports_caller_graph() {
    if !require_perf("--call-tree") {
        return;
    }
    let dir = scratch();
    let data = dir.path().join("pf.data");
    record(
        &data,
        &["-e", "page-faults"],
        &fixture("pagefault", Variant::NoFp),
        &["300"],
    );
    let path = data.to_str().unwrap();
    let (text, _) = report_ok(&["-i", path, "--call-tree", "--tree-min", "0"]);
    let ours = memperf_tree(&text);
    let p = Command::new("perf")
        .args(["report", "--stdio", "--no-children", "-g", "graph,0,caller"])
        .args(["--sort", "comm", "-i", path])
        .output()
        .unwrap();
    assert!(p.status.success(), "{}", stderr(&p));
    let theirs = perf_tree(&String::from_utf8_lossy(&p.stdout));
    let chain = "main;pf_level1;pf_level2;pf_level3;touch_pages";
    for key in ["main", "main;pf_level1", chain] {
        assert!(
            ours.contains_key(key),
            "no {key} in memperf's tree:\n{text}"
        );
        assert!(
            theirs.contains_key(key),
            "no {key} in perf's tree: {theirs:?}"
        );
    }
    // Every node both name, with the same share of the samples.
    let both: Vec<&String> = theirs.keys().filter(|k| ours.contains_key(*k)).collect();
    assert!(both.len() >= 5, "{theirs:?}\n{ours:?}");
    for k in both {
        assert_eq!(ours[k], theirs[k], "{k}\n{text}");
    }
    // The callee tree starts at the leaf: touch_pages, then its callers.
    let (callee, _) = report_ok(&["-i", path, "--call-tree", "callee"]);
    let first = callee
        .lines()
        .find(|l| l.trim_end().ends_with("touch_pages"))
        .unwrap_or_else(|| panic!("{callee}"));
    let after: Vec<&str> = callee
        .lines()
        .skip_while(|l| *l != first)
        .skip(1)
        .take(2)
        .map(str::trim)
        .collect();
    assert_eq!(after, ["pf_level3", "pf_level2"], "{callee}");
}
