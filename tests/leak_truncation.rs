//! The allocation tools say how many of their allocation stacks were truncated, and a
//! truncated stack keeps only the frames it had: `fixtures/deepalloc.c` allocates from a
//! stack too deep for any copy or for the live process to finish (its own count of calls),
//! then at the same depth from a shallow one, and `leak`, `heap` and `rss` must count
//! exactly the deep calls as truncated, keep the shallow stacks whole, and never put a
//! deep stack under a root frame it did not have.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;

/// Ring pages per CPU: a whole run's samples, whatever the reader's pace.
const RING: &str = "16384";
const ROUNDS: u64 = 10;
const DEEP: u64 = 20;
const SHALLOW: u64 = 30;

/// The calls the fixture says each phase made.
fn phase_calls(out: &str, phase: &str) -> u64 {
    out.lines()
        .find_map(|l| l.strip_prefix(phase)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {phase} line in {out}"))
}

/// Whether a stack (root first, the command first) is one the fixture can have: the deep
/// phase's frames rootward from `deep_alloc` are `descend`s, then `deep_phase` and `main`
/// (a truncated one stops anywhere on the way), the shallow phase's are `shallow_phase`
/// and `main`, whole.
fn wrong(frames: &[&str]) -> Option<String> {
    let rootward = |i: usize| frames[1..i].iter().rev().copied();
    if let Some(i) = frames.iter().position(|f| *f == "deep_alloc") {
        let up: Vec<&str> = rootward(i).skip_while(|f| *f == "descend").collect();
        let want = ["deep_phase", "main"];
        if up.iter().zip(want).any(|(have, want)| *have != want) {
            return Some(format!("a deep stack with a root it never had: {frames:?}"));
        }
    }
    if let Some(i) = frames.iter().position(|f| *f == "shallow_alloc") {
        let up: Vec<&str> = rootward(i).take(2).collect();
        if up != ["shallow_phase", "main"] {
            return Some(format!("a shallow stack not whole: {frames:?}"));
        }
    }
    None
}

#[test]
fn leak_heap_and_rss_count_the_truncated_allocation_stacks_exactly() {
    if !require_perf("allocation stacks too deep for the copy") {
        return;
    }
    let prog = fixture("deepalloc", Variant::NoFp);
    let args = [ROUNDS.to_string(), DEEP.to_string(), SHALLOW.to_string()];
    let cmd = format!("{} {}", prog.display(), args.join(" "));
    let _turn = recording_turn();

    // leak's folded stacks (outstanding bytes), its summary on stderr.
    let o = run_memperf(&["leak", "-m", RING, "--folded", "-c", &cmd]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    let folded = String::from_utf8_lossy(&o.stdout).into_owned();
    let deep = ROUNDS * DEEP;
    let (truncated, unwound, none) = stack_counts(&err);
    assert_eq!(truncated, deep, "{err}");
    assert_eq!(none, 0, "{err}");
    assert!(unwound >= deep + ROUNDS * SHALLOW, "{err}");
    let (mut deep_seen, mut shallow_seen) = (0, 0);
    for line in folded.lines() {
        let (stack, bytes) = line.rsplit_once(' ').unwrap();
        let bytes: u64 = bytes.parse().unwrap();
        let frames: Vec<&str> = stack.split(';').collect();
        if let Some(w) = wrong(&frames) {
            panic!("{w}\n{folded}");
        }
        if frames.contains(&"deep_alloc") {
            // Truncated: never down to main, and visibly so.
            assert!(!frames.contains(&"main"), "{line}");
            deep_seen += bytes / 64;
        }
        if frames.contains(&"shallow_alloc") {
            shallow_seen += bytes / 48;
        }
    }
    assert_eq!(
        (deep_seen, shallow_seen),
        (deep, ROUNDS * SHALLOW),
        "{folded}"
    );

    // The same counts in heap's and rss's summaries, and in heap's text report.
    for tool in ["heap", "rss"] {
        let o = run_memperf(&[
            tool,
            "-m",
            RING,
            "--",
            prog.to_str().unwrap(),
            &args[0],
            &args[1],
            &args[2],
        ]);
        assert!(o.status.success(), "{tool}: {}", stderr(&o));
        let err = stderr(&o);
        assert_eq!(stack_counts(&err).0, deep, "{tool}: {err}");
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        if tool == "heap" {
            assert_eq!(stack_counts(&out).0, deep, "heap's report:\n{out}");
            assert_eq!(phase_calls(&out, "deep"), deep, "{out}");
        }
    }

    // pprof's comments (go tool pprof -comments) say it too.
    if !have_go() {
        return;
    }
    let dir = scratch();
    let pb = dir.path().join("deep.pb.gz");
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
    let comments = go_pprof(&pb, &["-comments"]);
    assert!(
        comments.contains(&format!("{deep} of ")) && comments.contains("user stacks truncated"),
        "{comments}"
    );
}

/// While the reader is behind, the allocation tools leave stacks out rather than let the
/// kernel drop events: `MEMPERF_BEHIND_BYTES=0` makes the reader count as behind at every
/// record, and `fixtures/mallocbench.c`'s exact 5,000 malloc/free pairs must all be
/// traced, every stack counted as left out and shown as `[no stack]`, nothing lost (the
/// ring holds the whole run, whatever the reader's pace).
#[test]
fn stacks_left_out_while_behind_are_counted_and_no_event_is_lost() {
    if !require_perf("allocation stacks left out while behind") {
        return;
    }
    let prog = fixture("mallocbench", Variant::Fp);
    let _turn = recording_turn();
    for tool in ["leak", "heap", "rss"] {
        let o = memperf()
            .env("MEMPERF_BEHIND_BYTES", "0")
            .args([
                tool,
                "-m",
                RING,
                "--folded",
                "--",
                prog.to_str().unwrap(),
                "5000",
            ])
            .output()
            .expect("run memperf");
        assert!(o.status.success(), "{tool}: {}", stderr(&o));
        let err = joined(&stderr(&o));
        assert!(
            err.contains("traced 5000 allocations and 5000 frees"),
            "{tool}: {err}"
        );
        assert!(!err.contains("lost"), "{tool}: {err}");
        let (truncated, unwound, none) = stack_counts(&err);
        assert_eq!(
            (truncated, unwound, none),
            (5000, 5000, 5000),
            "{tool}: {err}"
        );
        assert!(
            err.contains("(5000 left out while memperf was behind"),
            "{tool}: {err}"
        );
        if tool == "heap" {
            continue; // its folded output is the peak's, of one block
        }
        let folded = String::from_utf8_lossy(&o.stdout).into_owned();
        // rss also files the pages no allocation covers, under `[outside allocations]`.
        assert!(
            folded
                .lines()
                .filter(|l| !l.contains("[outside allocations]"))
                .all(|l| l.contains("[no stack]") && !l.contains("work")),
            "{tool}: {folded}"
        );
    }
}

/// A copy that ends inside `main`'s frame is finished past it: the C library calls `main`
/// through a register, which ties nothing read past the copy to it, except that the callee
/// is the `main` the program's `_start` names, whose caller never changes
/// (`unwind::entry`). `fixtures/bigmain.c`'s 12 KiB main frame puts the default 8 KiB
/// copy's end there: every one of its allocation stacks is whole, none truncated (it lingers
/// a second, so that memperf finds it alive when it reads past the copies).
#[test]
fn a_copy_that_ends_in_mains_frame_is_finished() {
    if !require_perf("allocation stacks cut in main's frame") {
        return;
    }
    let prog = fixture("bigmain", Variant::NoFp);
    let _turn = recording_turn();
    let o = run_memperf(&[
        "leak",
        "-m",
        RING,
        "--folded",
        "--",
        prog.to_str().unwrap(),
        "3000",
        "1000",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    let folded = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(stack_counts(&err).0, 0, "{err}\n{folded}");
    let under_main: u64 = folded
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(stack, _)| stack.contains(";main;grow"))
        .map(|(_, bytes)| bytes.parse::<u64>().unwrap() / 40)
        .sum();
    assert_eq!(under_main, 3000, "{err}\n{folded}");
}

/// Runs memperf with `args`, then `--` and `fixtures/fakefp.c` with `fixture_args` (fake,
/// real, touched pages, decoys).
fn on_fakefp(args: &[&str], fixture_args: &[&str]) -> std::process::Output {
    let prog = fixture("fakefp", Variant::Fp);
    let mut all = args.to_vec();
    all.push("--");
    all.push(prog.to_str().unwrap());
    all.extend_from_slice(fixture_args);
    run_memperf(&all)
}

/// N of `N of M <what> stacks walked by frame pointers were cut`, as the summary says it.
fn fp_cut_count(err: &str, what: &str) -> u64 {
    err.split_once(&format!(" {what} stacks walked by frame pointers were cut"))
        .and_then(|(before, _)| before.split_whitespace().rev().nth(2)?.parse().ok())
        .unwrap_or_else(|| panic!("no count of {what} stacks cut in\n{err}"))
}

/// `--call-graph fp`: the kernel walks frame pointers, and through code built without them
/// it reads whatever the register holds as a frame. `fixtures/fakefp.c` calls malloc 200
/// times with rbp at a made-up frame whose return address lies in no mapping (the walk used
/// to hand it on, `[unknown]` in the outputs: a caller that never was), 100 times with one
/// whose return address is in code that no call ends at (the function it points into was
/// printed), and 300 times from code built with frame pointers. Exactly the 300 made-up
/// ones are cut, counted and said, live and from a `-w` recording, and no stack keeps a
/// frame that was never on the stack. From malloc's entry the walk starts at the caller's
/// frame pointer, which names the caller's caller: the caller comes from the return
/// probe's address, so every stack keeps its allocating function (`through_frame`,
/// `real_alloc`).
#[test]
fn a_frame_pointer_walk_is_cut_where_it_read_no_return_address() {
    if !require_perf("frame-pointer stacks through a made-up frame") {
        return;
    }
    let _turn = recording_turn();
    let o = on_fakefp(
        &["leak", "--call-graph", "fp", "--folded"],
        &["200", "300", "0", "100"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let err = joined(&stderr(&o));
    let folded = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(!folded.contains("[unknown]"), "{folded}");
    // The decoy's return address is in code (named as whatever function holds it) but
    // after no call: cut too, with the 200 outside the code. A cut stack keeps its caller.
    let bytes_under = |want: &dyn Fn(&str) -> bool| -> u64 {
        folded
            .lines()
            .filter_map(|l| l.rsplit_once(' '))
            .filter(|(stack, _)| want(stack))
            .map(|(_, bytes)| bytes.parse::<u64>().unwrap())
            .sum()
    };
    let cut_stacks = bytes_under(&|s| s == "fakefp-fp;through_frame");
    let real_stacks = bytes_under(&|s| s.ends_with(";main;real_alloc"));
    assert_eq!(
        (cut_stacks, real_stacks),
        (200 * 48 + 100 * 64, 300 * 80),
        "{folded}"
    );
    assert_eq!(bytes_under(&|_| true), cut_stacks + real_stacks, "{folded}");
    assert_eq!(fp_cut_count(&err, "allocation"), 300, "{err}");

    // Kept with -w and read back, the same 300 are cut; a recording whose stacks memperf
    // unwound while recording (DWARF, the default) is no frame-pointer walk.
    let dir = scratch();
    let said = "300 of 600 allocation stacks walked by frame pointers were cut";
    for (call_graph, cut) in [("fp", true), ("dwarf", false)] {
        let data = dir.path().join(format!("{call_graph}.data"));
        let data = data.to_str().unwrap();
        let o = on_fakefp(
            &["heap", "--call-graph", call_graph, "-w", data],
            &["200", "300", "0", "100"],
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let o = run_memperf(&["heap", "-i", data]);
        assert!(o.status.success(), "{}", stderr(&o));
        let all = joined(&format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            stderr(&o)
        ));
        assert_eq!(all.contains(said), cut, "{call_graph}: {all}");
        assert_eq!(all.contains("walked by frame pointers"), cut, "{all}");
        // Read back, the stacks keep the caller the return probes named.
        assert!(all.contains("real_alloc"), "{call_graph}: {all}");
    }
}

/// The allocator's own mmaps are left out of the outstanding (glibc's arenas, its large
/// blocks), told apart by a caller in the allocator's code. `fixtures/fakefp.c`'s `map 3`
/// maps 3 pages, kept, with rbp at a made-up frame whose return address lies one byte into
/// malloc, after no call: the walk read as a caller used to file the program's mapping as
/// the allocator's ("1 mmap/munmap/mremap calls made by the allocator itself were left out")
/// and leave it out of the table. The walk is cut there, and the mapping is the program's.
#[test]
fn a_frame_pointer_walk_into_the_allocators_code_leaves_the_programs_mapping_its_own() {
    if !require_perf("frame-pointer stacks of an mmap through a made-up frame") {
        return;
    }
    let _turn = recording_turn();
    let o = on_fakefp(
        &["leak", "--call-graph", "fp", "--folded"],
        &["0", "0", "0", "0", "3"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let err = joined(&stderr(&o));
    let folded = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(
        folded.trim(),
        format!("fakefp-fp;map_through_frame {}", 3 * 4096),
        "{folded}\n{err}"
    );
    assert!(!err.contains("made by the allocator itself"), "{err}");
    assert_eq!(fp_cut_count(&err, "allocation"), 1, "{err}");
}

/// The same cut where the kernel's frame-pointer walk is kept in a recording: `record
/// --call-graph fp` on a probe of malloc, read back by `report` (folded, text, pprof) and
/// `script`. Exactly the fixture's 300 made-up frames are cut and said (200 outside the
/// code, 100 decoys in code after no call); the 300 real calls keep `main`; a DWARF
/// recording of the same says nothing of frame pointers.
#[test]
fn reports_of_a_frame_pointer_recording_cut_it_where_the_walk_read_no_return_address() {
    if !require_perf("frame-pointer stacks through a made-up frame, recorded") {
        return;
    }
    let dir = scratch();
    let said = "300 of 600 user stacks walked by frame pointers were cut where the walk read \
                no return address";
    for (call_graph, fp) in [("fp", true), ("dwarf", false)] {
        let data = dir.path().join(format!("{call_graph}.data"));
        let data = data.to_str().unwrap();
        let o = {
            let _turn = recording_turn();
            on_fakefp(
                &[
                    "record",
                    "--call-graph",
                    call_graph,
                    "-e",
                    "u:libc:malloc",
                    "-o",
                    data,
                ],
                &["200", "300", "0", "100"],
            )
        };
        assert!(o.status.success(), "{}", stderr(&o));

        let o = run_memperf(&["report", "-i", data, "--folded"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let (folded, err) = (String::from_utf8_lossy(&o.stdout).into_owned(), stderr(&o));
        assert!(!folded.contains("[unknown]"), "{call_graph}: {folded}");
        // The decoy's address, named as the function that holds it.
        assert!(!folded.contains("decoy_target"), "{call_graph}: {folded}");
        assert!(!folded.contains("frame_dummy"), "{call_graph}: {folded}");
        assert_eq!(err.contains(said), fp, "{call_graph}: {err}");
        assert_eq!(err.contains("frame pointers"), fp, "{call_graph}: {err}");
        let count = |pred: &dyn Fn(&str) -> bool| -> u64 {
            folded
                .lines()
                .filter_map(|l| l.rsplit_once(' '))
                .filter(|(stack, _)| pred(stack))
                .map(|(_, n)| n.parse::<u64>().unwrap())
                .sum()
        };
        assert_eq!(
            count(&|s| s.contains(";main;")),
            300,
            "{call_graph}: {folded}"
        );
        if fp {
            // Cut at the made-up frames (the 200 outside the code, the 100 decoys in code
            // after no call): the probed function is left, and its caller where the kernel
            // adds the return address at a probed function's first instruction.
            let cut = |s: &str| {
                let frames: Vec<&str> = s.split(';').skip(1).collect();
                frames == ["malloc"] || frames == ["through_frame", "malloc"]
            };
            assert_eq!(count(&cut), 300, "{folded}");
        }

        let o = run_memperf(&["report", "-i", data]);
        assert!(o.status.success(), "{}", stderr(&o));
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        // The header's lines wrap under a `#`.
        let flat: Vec<&str> = text.split_whitespace().filter(|w| *w != "#").collect();
        assert_eq!(
            flat.join(" ").contains(
                "user stacks walked by frame pointers: 600, cut where the walk read no return \
                 address: 300"
            ),
            fp,
            "{call_graph}: {text}"
        );
        assert!(!text.contains("[unknown]"), "{call_graph}: {text}");

        let o = run_memperf(&["script", "-i", data]);
        assert!(o.status.success(), "{}", stderr(&o));
        let script = String::from_utf8_lossy(&o.stdout);
        assert!(!script.contains("[unknown]"), "{call_graph}: {script}");
        assert!(!script.contains("dead0000beef"), "{call_graph}: {script}");
        assert_eq!(
            stderr(&o).contains(said),
            fp,
            "{call_graph}: {}",
            stderr(&o)
        );

        let pb = dir.path().join(format!("{call_graph}.pb.gz"));
        let o = run_memperf(&["report", "-i", data, "--pprof", pb.to_str().unwrap()]);
        assert!(o.status.success(), "{}", stderr(&o));
        let pb = std::fs::read(&pb).unwrap();
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&pb[..]), &mut raw).unwrap();
        let comment = String::from_utf8_lossy(&raw);
        assert_eq!(comment.contains(said), fp, "{call_graph}");
    }
}

/// rss's fault stacks (`--touchers`) are cut by the same rule: `fixtures/fakefp.c` writes
/// to 64 fresh pages of a malloc'd block with rbp at its made-up frame (its return address
/// in no mapping). Every one of the 64 is counted under `touch_fake` with no frame after
/// it, and the summary counts the cut fault stacks (at least those 64: other faults' walks
/// may go through code without frame pointers too).
#[test]
fn rss_cuts_a_fault_stacks_frame_pointer_walk_where_it_read_no_return_address() {
    if !require_perf("fault stacks through a made-up frame") {
        return;
    }
    let _turn = recording_turn();
    let o = on_fakefp(
        &["rss", "--touchers", "--call-graph", "fp"],
        &["0", "0", "64"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let (out, err) = (String::from_utf8_lossy(&o.stdout).into_owned(), stderr(&o));
    assert!(out.contains("touched 64\n"), "{out}");
    let block: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.contains("touched 64 pages from:"))
        .skip(1)
        .take_while(|l| l.starts_with("\t\t\t"))
        .map(str::trim)
        .collect();
    assert_eq!(block, ["touch_fake"], "{out}");
    assert!(fp_cut_count(&err, "fault") >= 64, "{err}");
}
