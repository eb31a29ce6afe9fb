#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Stacks deeper than the copy: finished from the live process while recording, marked as
//! recovered, and the summary's advice on the copy size.

mod common;

use common::{Variant, fixture, record, require_perf, run_memperf, scratch, stderr};

const PAGES: u64 = 300;

/// `(count, frames root first)` of each folded line whose leaf is `leaf`.
fn stacks_ending_in(folded: &str, leaf: &str) -> Vec<(u64, Vec<String>)> {
    folded
        .lines()
        .filter_map(|l| {
            let (stack, n) = l.rsplit_once(' ')?;
            let frames: Vec<String> = stack.split(';').map(str::to_string).collect();
            let n: u64 = n.parse().ok()?;
            (frames.last().map(String::as_str) == Some(leaf)).then_some((n, frames))
        })
        .collect()
}

fn folded(file: &std::path::Path) -> String {
    let o = run_memperf(&["report", "--folded", "-i", file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    String::from_utf8(o.stdout).unwrap()
}

/// The chain from `main` to `touch_pages` in each mode of the fixture.
fn expected_chain(mode: &str) -> Vec<String> {
    let mut c = vec!["main".to_string()];
    match mode {
        "buffer" => c.extend(["handle_request", "parse_body"].map(String::from)),
        _ => c.extend(std::iter::repeat_n("recurse".to_string(), 40)),
    }
    c.push("touch_pages".to_string());
    c
}

#[test]
fn stacks_past_the_copy_are_finished_from_the_live_process() {
    if !require_perf("stacks deeper than the copy") {
        return;
    }
    let prog = fixture("deepstack", Variant::NoFp);
    let dir = scratch();
    for mode in ["buffer", "deep"] {
        let live = dir.path().join(format!("{mode}.data"));
        let o = record(
            &live,
            &["-e", "page-faults"],
            &prog,
            &[mode, &PAGES.to_string(), "2000"],
        );
        let err = stderr(&o);
        let want = expected_chain(mode);
        let text = folded(&live);
        let touched = stacks_ending_in(&text, "touch_pages");
        let total: u64 = touched.iter().map(|(n, _)| n).sum();
        let whole: u64 = touched
            .iter()
            .filter(|(_, f)| f.ends_with(&want))
            .map(|(n, _)| n)
            .sum();
        assert_eq!((total, whole), (PAGES, PAGES), "{mode}: {text}\n{err}");
        assert!(
            err.contains("finished from the live process"),
            "{mode}: {err}"
        );
        match mode {
            // The buffer's untouched pages stop the copy early: no size would help.
            "buffer" => assert!(err.contains("no copy size helps there"), "{err}"),
            // 40 frames of 512 bytes: about 21 KiB, so 8 KiB is too little.
            _ => assert!(
                err.contains("--call-graph dwarf,2") && err.contains("would have held them all"),
                "{err}"
            ),
        }

        // The text report and memperf script say which frames were recovered.
        let o = run_memperf(&["report", "-i", live.to_str().unwrap()]);
        let report = String::from_utf8_lossy(&o.stdout);
        assert!(report.contains("    main [recovered]\n"), "{report}");
        assert!(report.contains("    touch_pages\n"), "{report}");
        let o = run_memperf(&["script", "-i", live.to_str().unwrap()]);
        let script = String::from_utf8_lossy(&o.stdout);
        let marked = script
            .lines()
            .filter(|l| l.starts_with("# [recovered] the last "))
            .count() as u64;
        assert!(marked >= PAGES, "{mode}: {marked} marked samples");

        // The copy alone (unwound from the file, after the process is gone) does not reach
        // main: the recovered frames are what made the difference.
        let raw = dir.path().join(format!("{mode}-offline.data"));
        record(
            &raw,
            &["-e", "page-faults", "--unwind", "offline"],
            &prog,
            &[mode, &PAGES.to_string(), "0"],
        );
        let text = folded(&raw);
        let touched = stacks_ending_in(&text, "touch_pages");
        let total: u64 = touched.iter().map(|(n, _)| n).sum();
        let with_main = touched
            .iter()
            .filter(|(_, f)| f.iter().any(|x| x == "main"))
            .count();
        assert_eq!((total, with_main), (PAGES, 0), "{mode}: {text}");
    }
}
