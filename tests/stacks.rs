#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Stacks deeper than the copy: finished from the live process while recording, marked as
//! recovered, and the summary's advice on the copy size.

mod common;

use common::{
    TEST_RING_PAGES, Variant, fixture, memperf, perf_script, record, recording_turn, require_perf,
    run_memperf, scratch, stderr, summary_samples,
};

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
        // A fixed copy: the advice is about its size.
        let o = record(
            &live,
            &["-e", "page-faults", "--call-graph", "dwarf"],
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
        // touch_pages's own frame may open a stack page no caller touched (it lies below
        // the buffer's untouched pages, or past the recursion; where depends on the
        // stack's random start): that fault is real and touch_pages's too.
        assert!(
            total == PAGES || total == PAGES + 1,
            "{mode}: {total} faults in touch_pages: {text}\n{err}"
        );
        assert_eq!(whole, total, "{mode}: {text}\n{err}");
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
        let o = record(
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
        // touch_pages's own stack page, as above (a run on CI had it here: 301).
        assert!(
            (total == PAGES || total == PAGES + 1) && with_main == 0,
            "{mode}: {total} faults, {with_main} under main: {text}\n{}",
            stderr(&o)
        );
    }
}

/// A process that exits right after its deep stacks (the buffer's: no copy size holds them,
/// whatever `dwarf,auto` learns): each is finished from the live process only if it is
/// unwound within milliseconds of being sampled. The recorder reads its rings every
/// millisecond while stacks may need the process; read only when the watermark or the
/// 100 ms poll timeout woke it, the stacks of the process's last tens of milliseconds (up
/// to a sixth of them here) were unwound after it had exited.
#[test]
fn stacks_sampled_just_before_the_process_exits_are_finished() {
    if !require_perf("stacks deeper than the copy, of a process that exits") {
        return;
    }
    let prog = fixture("deepstack", Variant::NoFp);
    let dir = scratch();
    let out = dir.path().join("paced.data");
    // 1000 faults over 0.6 s and more (each pause sleeps a little longer than asked).
    let o = record(
        &out,
        &["-e", "page-faults"],
        &prog,
        &["paced", "1000", "600"],
    );
    let err = stderr(&o);
    let stdout = String::from_utf8_lossy(&o.stdout);
    let touched: u64 = stdout
        .lines()
        .find_map(|l| {
            l.strip_prefix("touched ")?
                .strip_suffix(" pages")?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("the fixture printed no count: {stdout}"));
    assert_eq!(touched, 1000, "{stdout}");
    let want = expected_chain("buffer");
    let text = folded(&out);
    let touched_stacks = stacks_ending_in(&text, "touch_pages");
    let total: u64 = touched_stacks.iter().map(|(n, _)| n).sum();
    let whole: u64 = touched_stacks
        .iter()
        .filter(|(_, f)| f.ends_with(&want))
        .map(|(n, _)| n)
        .sum();
    assert_eq!(total, touched, "{text}\n{err}");
    assert!(
        whole * 100 >= touched * 98,
        "{whole} of {touched} stacks reach main\n{err}"
    );
    // The summary says how soon they were read.
    assert!(
        err.contains("ms after they were sampled (median; 99% within"),
        "{err}"
    );
}

/// `memperf record --call-graph dwarf,auto -e page-faults` of `program args` with `env`.
fn record_auto(
    out: &std::path::Path,
    program: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> String {
    let _turn = recording_turn();
    let o = memperf()
        .args(["record", "-m", TEST_RING_PAGES, "-e", "page-faults"])
        .args(["--call-graph", "dwarf,auto", "-o"])
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

/// The copy sizes the summary says `dwarf,auto` gave page-faults, in order.
fn auto_sizes(err: &str) -> Vec<u32> {
    let line = err
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("note: dwarf,auto: `page-faults` copied ")
        })
        .unwrap_or_else(|| panic!("no dwarf,auto line in: {err}"));
    let sizes = line.split(" (").next().unwrap();
    sizes
        .split(", then ")
        .map(|s| s.split(' ').next().unwrap().parse().unwrap())
        .collect()
}

/// Folded stacks' counts by the last `n` frames, joined.
fn count_ending(folded: &str, tail: &str) -> u64 {
    folded
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(stack, _)| stack.ends_with(tail))
        .map(|(_, n)| n.parse::<u64>().unwrap())
        .sum()
}

#[test]
fn dwarf_auto_shrinks_the_copy_and_follows_every_thread() {
    if !require_perf("--call-graph dwarf,auto") {
        return;
    }
    // The main thread touches 3000 pages while a worker waits; the events are opened again
    // with a smaller copy during the fixture's pause; then that worker (a thread from
    // before) and 3 new ones touch 500 pages each.
    let prog = fixture("threads", Variant::NoFp);
    let dir = scratch();
    let out = dir.path().join("auto.data");
    let err = record_auto(&out, &prog, &["3", "500"], &[("THREADS_WARMUP", "3000")]);
    let sizes = auto_sizes(&err);
    assert!(
        sizes.len() >= 2 && sizes[0] == 8192 && sizes[1] < 4096,
        "{sizes:?}: {err}"
    );
    // The note counts every stack unwound, of every size and of the last drain too.
    let number_after = |prefix: &str| -> u64 {
        err.lines()
            .find_map(|l| l.trim().strip_prefix(prefix))
            .and_then(|rest| rest.split(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no `{prefix}`: {err}"))
    };
    let noted: u64 = err
        .lines()
        .find_map(|l| l.split_once(" on (").map(|(_, rest)| rest))
        .and_then(|rest| rest.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no stack count in the note: {err}"));
    assert_eq!(noted, number_after("unwound "), "{err}");
    let text = folded(&out);
    assert_eq!(count_ending(&text, ";main;warm_up"), 3000, "{text}");
    assert_eq!(
        count_ending(&text, ";early_worker;thread_touch"),
        500,
        "{text}"
    );
    assert_eq!(
        count_ending(&text, ";late_worker;thread_touch"),
        1500,
        "{text}"
    );
    // The file names every sample's event by its first ids: perf reads them all as
    // page-faults.
    let samples = perf_script(&out);
    assert_eq!(samples.len() as u64, summary_samples(&err), "{err}");
    assert!(samples.iter().all(|s| s.event == "page-faults"));
}

#[test]
fn dwarf_auto_keeps_once_what_both_openings_wrote() {
    if !require_perf("--call-graph dwarf,auto") {
        return;
    }
    // Old and new fds stay enabled together for 5 ms while the fixture faults: every
    // fault in that time is written twice, and must be counted once.
    let prog = fixture("pagefault", Variant::NoFp);
    let dir = scratch();
    let out = dir.path().join("twins.data");
    let pages = 100_000u64;
    let err = record_auto(
        &out,
        &prog,
        &[&pages.to_string()],
        &[("MEMPERF_RESIZE_OVERLAP_MS", "5")],
    );
    let sizes = auto_sizes(&err);
    assert!(sizes.len() >= 2 && sizes[1] < 8192, "{sizes:?}: {err}");
    let twins: u64 = err
        .lines()
        .find_map(|l| {
            let rest = l.trim().strip_prefix("note: dwarf,auto: ")?;
            let (n, tail) = rest.split_once(' ')?;
            tail.starts_with("records written by")
                .then(|| n.parse().ok())
                .flatten()
        })
        .unwrap_or(0);
    assert!(twins > 0, "no record was written twice: {err}");
    let text = folded(&out);
    let whole = count_ending(&text, ";main;pf_level1;pf_level2;pf_level3;touch_pages");
    // Exact unless the rings overflowed (a loaded machine): then never more than the
    // faults, and no fewer than the faults less what was lost.
    let lost: u64 = err
        .lines()
        .find_map(|l| l.trim().strip_prefix("lost "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        whole <= pages && whole + lost >= pages,
        "{whole} of {pages} (lost {lost}): {text}\n{err}"
    );
}

#[test]
fn dwarf_auto_grows_the_copy_again_when_stacks_go_past_it() {
    if !require_perf("--call-graph dwarf,auto") {
        return;
    }
    // 3000 faults under main -> recurse -> touch_pages shrink the copy; 3000 more under 10
    // frames of 512 bytes (about 5 KiB) go past it and are finished from the live process,
    // and the copy grows back (never past its start) to hold the last 3000.
    let prog = fixture("deepstack", Variant::NoFp);
    let dir = scratch();
    let out = dir.path().join("grow.data");
    let err = record_auto(&out, &prog, &["grow", "3000", "500"], &[]);
    let sizes = auto_sizes(&err);
    assert!(
        sizes.len() >= 3 && sizes[0] == 8192 && sizes[1] < 4096 && sizes[2] > sizes[1],
        "{sizes:?}: {err}"
    );
    assert!(sizes.iter().all(|&s| s <= 8192), "{sizes:?}");
    let text = folded(&out);
    let chain = |depth: usize| {
        let mut c = vec!["main".to_string()];
        c.extend(std::iter::repeat_n("recurse".to_string(), depth));
        c.push("touch_pages".to_string());
        c
    };
    let touched = stacks_ending_in(&text, "touch_pages");
    for (depth, n) in [(1, 3000), (10, 6000)] {
        let whole: u64 = touched
            .iter()
            .filter(|(_, f)| f.ends_with(&chain(depth)))
            .map(|(n, _)| n)
            .sum();
        assert_eq!(whole, n, "depth {depth}: {text}\n{err}");
    }
    // The last 3000 fitted the grown copy: at most the 3000 before (and a few of the
    // loader's) went past one.
    let past: u64 = err
        .lines()
        .find_map(|l| l.trim().split_once(" stacks went past their stack copy"))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of stacks past the copy: {err}"));
    assert!((10..3100).contains(&past), "{past}: {err}");
}
