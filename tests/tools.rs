//! The memory tools, each made to see what it reports: the kernel is made to do it (an OOM
//! kill, reclaim in a memory cgroup, slab allocations, mappings, shared memory), and the
//! tool's lines must name it exactly; the same lines come back from the tool's own
//! recording with `-i`. The fault tools are in tests/fault_tools.rs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Command;
use std::time::Duration;

use common::kernel::MemCgroup;
use common::tools::*;
use common::*;

/// Lines without what only the live system knows (loadavg, cgroup).
fn replayable(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.starts_with("  cgroup:"))
        .map(|l| match l.find(", loadavg:") {
            Some(i) => l[..i].to_string(),
            None => l.to_string(),
        })
        .collect()
}

#[test]
fn oomkill_names_the_victim_the_trigger_and_its_stack() {
    if !require_perf("oomkill") {
        return;
    }
    let Some(cg) = MemCgroup::new("oom", 64 << 20) else {
        assert!(
            std::env::var_os("MEMPERF_REQUIRE_PERF").is_none(),
            "a memory cgroup is required for the oomkill test"
        );
        return;
    };
    let hog = fixture("hog", Variant::NoFp);
    let dir = scratch();
    let data = dir.path().join("oom.data");
    let _turn = recording_turn();
    let (tool, out) = start_tool(&["oomkill", "-w", data.to_str().unwrap()]);
    let pid = common::kernel::oom_kill_hog(&cg, &hog);
    // The sample is drained within the recorder's 100 ms poll.
    std::thread::sleep(Duration::from_millis(500));
    let (live, err) = stop_tool(tool, out);

    let comm = hog.file_name().unwrap().to_str().unwrap();
    let first = live.lines().next().unwrap_or_default();
    let want = format!("Triggered by PID {pid} (\"{comm}\"), OOM kill of PID {pid} (\"{comm}\")");
    assert!(first.contains(&want), "{live}\n{err}");
    assert!(first.contains(", loadavg: "), "{first}");
    // HH:MM:SS first, as BCC's oomkill.
    let time = first.split(' ').next().unwrap();
    assert_eq!(time.len(), 8, "{first}");
    assert_eq!(time.matches(':').count(), 2, "{first}");
    // The trigger's stack: the kernel's OOM path under the fault, then the fixture's frames
    // unwound from its copied user stack (built without frame pointers).
    let frames: Vec<&str> = live.lines().map(str::trim).collect();
    for f in ["out_of_memory", "handle_mm_fault", "main", "_start"] {
        assert!(frames.contains(&f), "no frame {f} in\n{live}");
    }
    assert!(
        frames.iter().any(|f| f.starts_with("grow_until_killed")),
        "no allocating function in\n{live}"
    );
    let at = |f: &str| frames.iter().position(|x| x.starts_with(f)).unwrap();
    assert!(at("out_of_memory") < at("grow_until_killed") && at("grow_until_killed") < at("main"));
    assert!(err.contains("memperf oomkill: 1 events, lost 0"), "{err}");
    // The cgroups are the kernel's report's: the victim's child cgroup, at its limit (its
    // /proc/PID/cgroup, read after the kill, no longer says so).
    let cgroup = format!(
        "  cgroup: task_memcg={0} constraint=CONSTRAINT_MEMCG oom_memcg={0}",
        cg.path
    );
    assert!(
        live.lines().any(|l| l == cgroup),
        "no `{cgroup}` in\n{live}"
    );

    // The recording gives the same lines, and perf reads it.
    let o = run_memperf(&["oomkill", "-i", data.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let replayed = String::from_utf8_lossy(&o.stdout);
    assert_eq!(replayable(&replayed), replayable(&live));
    let p = Command::new("perf")
        .args(["script", "-F", "comm,pid,event,trace", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    // perf pads its columns; compare words.
    let text = String::from_utf8_lossy(&p.stdout);
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        text.contains(&format!(
            "{comm} {pid} oom:mark_victim: pid={pid} comm={comm}"
        )),
        "{text}\n{}",
        stderr(&p)
    );
}

#[test]
fn tools_refuse_bad_input_clearly() {
    let dir = scratch();
    // A recording without the tool's events.
    let data = dir.path().join("faults.data");
    if require_perf("tools input") {
        let o = run_memperf(&[
            "record",
            "-q",
            "-e",
            "page-faults",
            "-o",
            data.to_str().unwrap(),
            "--",
            "true",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let o = run_memperf(&["oomkill", "-i", data.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2));
        let e = stderr(&o);
        assert!(e.contains("has no `oom:mark_victim` events"), "{e}");
        assert!(e.contains("memperf oomkill -w FILE"), "{e}");
    }
    if require_perf("tools input") {
        // A recording of another event: each tool names the event it lacks.
        let brk = dir.path().join("brk.data");
        let o = run_memperf(&[
            "record",
            "-q",
            "-e",
            "syscalls:sys_enter_brk",
            "-o",
            brk.to_str().unwrap(),
            "--",
            "true",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        for (tool, event) in [
            ("faults", "page-faults"),
            ("ffaults", "page-faults"),
            ("hfaults", "page-faults"),
            ("swapin", "major-faults"),
        ] {
            let o = run_memperf(&[tool, "-i", brk.to_str().unwrap()]);
            assert_eq!(o.status.code(), Some(2), "{tool}");
            assert!(
                stderr(&o).contains(&format!("has no `{event}` events")),
                "{tool}: {}",
                stderr(&o)
            );
        }
    }
    for bad in [
        &["faults", "-c", "0"][..],
        &["swapin", "0"],
        &["swapin", "1", "0"],
        &["faults", "-p", "not-a-pid"],
        &["brkstack", "-U", "-K"],
    ] {
        let o = run_memperf(bad);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{bad:?}");
    }
    let o = run_memperf(&["oomkill", "-i", "/nonexistent/x.data"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("/nonexistent/x.data"), "{}", stderr(&o));
    let o = run_memperf(&["oomkill", "-d", "-1"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = run_memperf(&["oomkill", "-m", "3"]);
    assert!(stderr(&o).contains("power of two"), "{}", stderr(&o));
}

#[test]
fn drsnoop_and_vmscan_see_every_memory_cgroup_reclaim() {
    if !require_perf("drsnoop") || !require_perf_tool("drsnoop") {
        return;
    }
    let Some(cg) = MemCgroup::new("reclaim", 32 << 20) else {
        assert!(
            std::env::var_os("MEMPERF_REQUIRE_PERF").is_none(),
            "a memory cgroup is required for the reclaim tests"
        );
        return;
    };
    let dir = scratch();
    let file = dir.path().join("cache.bin");
    let data = dir.path().join("dr.data");
    let _turn = recording_turn();
    let mut argv: Vec<String> = [
        "drsnoop",
        "-T",
        "-m",
        TEST_RING_PAGES,
        "-w",
        data.to_str().unwrap(),
        "--",
    ]
    .map(String::from)
    .to_vec();
    argv.extend(dd_in(&cg, &file, 96));
    let (text, err) = run_tool(&argv.iter().map(String::as_str).collect::<Vec<_>>());
    let lines: Vec<&str> = text.lines().skip(2).collect();
    assert_eq!(
        text.lines()
            .nth(1)
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["TIME(s)", "COMM", "PID", "LAT(ms)", "PAGES", "RECLAIM"]
    );
    // 96 MiB through 32 MiB: reclaims, each of dd, each a memcg one that freed pages.
    assert!(lines.len() >= 4, "{text}\n{err}");
    for l in &lines {
        let w: Vec<&str> = l.split_whitespace().collect();
        assert_eq!((w[1], w[5]), ("dd", "memcg"), "{l}");
        assert!(w[3].parse::<f64>().unwrap() >= 0.0, "{l}");
    }
    let pages: u64 = lines
        .iter()
        .map(|l| l.split_whitespace().nth(4).unwrap().parse::<u64>().unwrap())
        .sum();
    assert!(pages > 0, "{text}");
    // One line per begin/end pair, as perf reads the recording.
    let begins = perf_count(&data, "dd", "vmscan:mm_vmscan_memcg_reclaim_begin");
    let ends = perf_count(&data, "dd", "vmscan:mm_vmscan_memcg_reclaim_end");
    assert_eq!((begins, ends), (lines.len(), lines.len()), "{text}");
    let (replayed, _) = run_tool(&["drsnoop", "-T", "-i", data.to_str().unwrap()]);
    assert_eq!(
        replayed.lines().collect::<Vec<_>>(),
        text.lines().skip(1).collect::<Vec<_>>()
    );

    // vmscan on the same load: memcg reclaim time in some interval, and as many reclaims
    // in its histogram as perf counts pairs in its recording.
    let vm = dir.path().join("vm.data");
    let mut argv: Vec<String> = [
        "vmscan",
        "0.1",
        "-m",
        TEST_RING_PAGES,
        "-w",
        vm.to_str().unwrap(),
        "--",
    ]
    .map(String::from)
    .to_vec();
    argv.extend(dd_in(&cg, &file, 96));
    let (text, err) = run_tool(&argv.iter().map(String::as_str).collect::<Vec<_>>());
    let header = [
        "TIME",
        "S-SLABms",
        "D-RECLAIMms",
        "M-RECLAIMms",
        "KSWAPD",
        "WRITEPAGE",
    ];
    assert_eq!(
        text.lines()
            .nth(1)
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>(),
        header
    );
    let m_reclaim: f64 = text
        .lines()
        .skip(2)
        .take_while(|l| !l.is_empty())
        .map(|l| l.split_whitespace().nth(3).unwrap().parse::<f64>().unwrap())
        .sum();
    assert!(m_reclaim > 0.0, "{text}\n{err}");
    let hist = text.split("@memcg_reclaim_ns:\n").nth(1).unwrap();
    let in_hist: usize = hist
        .lines()
        .take_while(|l| l.starts_with('['))
        .map(|l| {
            l.split(')')
                .nth(1)
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap()
                .parse::<usize>()
                .unwrap()
        })
        .sum();
    let pairs = perf_count(&vm, "dd", "vmscan:mm_vmscan_memcg_reclaim_end");
    assert!(pairs > 0);
    assert_eq!(in_hist, pairs, "{text}");
    let (replayed, _) = run_tool(&["vmscan", "0.1", "-i", vm.to_str().unwrap()]);
    assert_eq!(
        replayed.lines().collect::<Vec<_>>(),
        text.lines().skip(1).collect::<Vec<_>>()
    );
}

#[test]
fn slabratetop_puts_the_cache_a_command_allocates_from_first() {
    if !require_perf("slabratetop") {
        return;
    }
    const N: u64 = 20000;
    let prog = fixture("openclose", Variant::NoFp);
    let dir = scratch();
    let data = dir.path().join("slab.data");
    let _turn = recording_turn();
    let (text, err) = run_tool(&[
        "slabratetop",
        "-m",
        TEST_RING_PAGES,
        "-w",
        data.to_str().unwrap(),
        "--",
        prog.to_str().unwrap(),
        &N.to_string(),
    ]);
    let rows: Vec<(&str, u64, u64)> = text
        .lines()
        .skip_while(|l| !l.starts_with("CACHE"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w[0], w[1].parse().unwrap(), w[2].parse().unwrap())
        })
        .collect();
    // Each open copies its path into a names_cache object (4 KiB): the most bytes, one
    // allocation per open (and some for the loader, which tries many paths).
    let (name, allocs, bytes) = rows[0];
    assert_eq!(name, "names_cache", "{text}\n{err}");
    assert!((N..N + N / 20).contains(&allocs), "{text}");
    assert_eq!(bytes, allocs * 4096, "{text}");
    // Each open also makes a struct file.
    let filp = rows.iter().find(|r| r.0 == "filp").unwrap();
    assert!((N..N + N / 20).contains(&filp.1), "{text}");
    assert!(!text.contains('\x1b'), "no screen clearing into a pipe");
    // The same rows from the recording (its time line has no loadavg).
    let (replayed, _) = run_tool(&["slabratetop", "-i", data.to_str().unwrap()]);
    let table = |t: &str| {
        t.lines()
            .skip_while(|l| !l.starts_with("CACHE"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(table(&replayed), table(&text));
}

/// Cut points of a recording past its header and attrs: inside its data section, just
/// after it (in the feature table), inside the feature sections and one byte short.
fn cut_points(bytes: &[u8]) -> Vec<usize> {
    let u64_at = |at: usize| u64::from_ne_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
    let attrs_end = u64_at(24) + u64_at(32);
    let (data, data_end) = (u64_at(40), u64_at(40) + u64_at(48));
    assert!(attrs_end <= data && data_end < bytes.len());
    vec![
        (data + data_end) / 2,
        data_end + 8,
        (data_end + bytes.len()) / 2,
        bytes.len() - 1,
    ]
}

#[test]
fn a_cut_tool_recording_is_reported_as_cut_short() {
    if !require_perf("tools -w") {
        return;
    }
    let dir = scratch();
    for tool in ["vmscan", "drsnoop"] {
        let data = dir.path().join(format!("{tool}.data"));
        {
            let _turn = recording_turn();
            run_tool(&[tool, "-w", data.to_str().unwrap(), "--", "ls", "/"]);
        }
        let bytes = std::fs::read(&data).unwrap();
        for cut in cut_points(&bytes) {
            let short = dir.path().join(format!("{tool}-{cut}.data"));
            std::fs::write(&short, &bytes[..cut]).unwrap();
            let o = run_memperf(&[tool, "-i", short.to_str().unwrap()]);
            let err = stderr(&o);
            let first = err.lines().next().unwrap_or("");
            assert!(
                first.contains("` is cut short: "),
                "{tool} -i on {cut} of {} bytes: {err}",
                bytes.len()
            );
            assert!(!err.contains("has no `"), "{tool}: {err}");
            assert!(!err.contains("panicked"), "{tool}: {err}");
        }
    }
}

/// Moves the time of the middle sample of `data` far beyond the recording's end, in place.
fn corrupt_one_sample_time(data: &std::path::Path) {
    let samples = sample_times(data);
    assert!(samples.len() > 10, "{} samples", samples.len());
    let (at, t) = samples[samples.len() / 2];
    let mut bytes = std::fs::read(data).unwrap();
    // About 30 years later: 10^9 one-second intervals.
    let far = t + 1_000_000_000_000_000_000;
    bytes[at..at + 8].copy_from_slice(&far.to_ne_bytes());
    std::fs::write(data, bytes).unwrap();
}

#[test]
fn slabratetop_i_prints_no_empty_intervals_up_to_a_corrupted_sample_time() {
    if !require_perf("slabratetop -w") {
        return;
    }
    let prog = fixture("openclose", Variant::NoFp);
    let dir = scratch();
    let data = dir.path().join("slab.data");
    {
        let _turn = recording_turn();
        run_tool(&[
            "slabratetop",
            "-m",
            TEST_RING_PAGES,
            "-w",
            data.to_str().unwrap(),
            "--",
            prog.to_str().unwrap(),
            "200",
        ]);
    }
    corrupt_one_sample_time(&data);
    let args = ["slabratetop", "-C", "-i", data.to_str().unwrap(), "1"];
    let (_, lines, err) = run_bounded(&args, Duration::from_secs(20));
    assert!(lines < 200, "{lines} lines for a run under a second\n{err}");
    assert!(
        err.contains("left out 1 samples timed outside the recording's span"),
        "{err}"
    );
}

#[test]
fn mmapsnoop_prints_every_call_with_what_it_mapped() {
    if !require_perf("mmapsnoop") || !require_perf_tool("mmapsnoop") {
        return;
    }
    let prog = fixture("mapper", Variant::NoFp);
    let comm = prog.file_name().unwrap().to_str().unwrap();
    let dir = scratch();
    let file = dir.path().join("mapped.bin");
    let data = dir.path().join("mmap.data");
    let _turn = recording_turn();
    let (text, err) = run_tool(&[
        "mmapsnoop",
        "-m",
        TEST_RING_PAGES,
        "-w",
        data.to_str().unwrap(),
        "--",
        prog.to_str().unwrap(),
        file.to_str().unwrap(),
    ]);
    let pid = text.lines().find_map(|l| l.strip_prefix("pid ")).unwrap();
    let mine: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(&format!("{pid:<6} ")))
        .collect();
    // The fixture's own calls, in order, after the loader's: the file at its offset, the
    // anonymous memory (which BCC's skips), the failure, the move and the unmap.
    let expected: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("expect "))
        .map(|e| format!("{pid:<6} {comm:<14} {e}"))
        .collect();
    assert_eq!(expected.len(), 5, "{text}");
    assert_eq!(mine[mine.len() - 5..], expected, "{text}\n{err}");
    // With --stack, each line has the call's stack under it: the fixture's failing mmap
    // was called from main.
    let (stacked, _) = run_tool(&[
        "mmapsnoop",
        "--stack",
        "-n",
        comm,
        "--",
        prog.to_str().unwrap(),
        file.to_str().unwrap(),
    ]);
    let failed = format!("{comm:<14} R--  -P--  0        4        [failed: EBADF]\n");
    let after = stacked.split(failed.as_str()).nth(1).unwrap();
    let frames: Vec<&str> = after
        .lines()
        .take_while(|l| l.starts_with("        "))
        .map(str::trim)
        .collect();
    assert!(frames.contains(&"main"), "{stacked}");
    // The loader's mappings of libc are there too, with their full path.
    assert!(
        mine.iter()
            .any(|l| l.ends_with("/libc.so.6") && l.contains(" R-E ")),
        "{text}"
    );
    // From the recording: the same lines (but the fixture's own output).
    let (replayed, _) = run_tool(&["mmapsnoop", "-i", data.to_str().unwrap()]);
    let calls = |t: &str| {
        t.lines()
            .filter(|l| l.starts_with(&format!("{pid:<6} ")))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(calls(&replayed), calls(&text));
    // perf reads the recording: one sys_enter_mmap per mmap line.
    let mmaps = mine
        .iter()
        .filter(|l| !l.contains("UNMAP") && !l.contains("REMAP"))
        .count();
    assert_eq!(perf_count(&data, comm, "syscalls:sys_enter_mmap"), mmaps);
}

/// `-n NAME` becomes a kernel filter on the tracepoints (`comm ~ "*NAME*"`), as BCC's
/// is a BPF one: system-wide, the recording holds the named process's calls and no other.
#[test]
fn mmapsnoop_name_filter_runs_in_the_kernel() {
    if !require_perf("mmapsnoop -n") || !is_root() {
        return;
    }
    let sizes = fixture("mapsizes", Variant::NoFp);
    let mapper = fixture("mapper", Variant::NoFp);
    let name = sizes.file_name().unwrap().to_str().unwrap();
    let other = mapper.file_name().unwrap().to_str().unwrap();
    let dir = scratch();
    let data = dir.path().join("named.data");
    let script = format!(
        "{} 30 2 && {} {}",
        sizes.display(),
        mapper.display(),
        dir.path().join("mapped.bin").display()
    );
    let _turn = recording_turn();
    let (text, err) = run_tool(&[
        "mmapsnoop",
        "-a",
        "-n",
        name,
        "-w",
        data.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let printed = text.lines().filter(|l| l.contains(name)).count();
    let mmaps = text
        .lines()
        .filter(|l| l.contains(name) && !l.contains("UNMAP") && !l.contains("REMAP"))
        .count();
    // 32 of its own, and the loader's before them.
    assert!(mmaps > 32, "{text}\n{err}");
    assert!(printed > mmaps, "its munmaps too\n{text}");
    assert_eq!(perf_count(&data, name, "syscalls:sys_enter_mmap"), mmaps);
    // The kernel dropped everything else: the shell's and the other fixture's calls.
    for comm in [other, "sh"] {
        assert_eq!(
            perf_count(&data, comm, "syscalls:sys_enter_mmap"),
            0,
            "{comm}"
        );
    }
    let p = Command::new("perf")
        .args(["script", "-F", "comm", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    let comms: std::collections::BTreeSet<String> = String::from_utf8_lossy(&p.stdout)
        .lines()
        .map(|l| l.trim().to_string())
        .collect();
    assert_eq!(comms.into_iter().collect::<Vec<_>>(), vec![name], "{err}");
}

#[test]
fn shmsnoop_prints_every_shared_memory_call_as_bcc() {
    if !require_perf("shmsnoop") {
        return;
    }
    let prog = fixture("shmer", Variant::NoFp);
    let comm = prog.file_name().unwrap().to_str().unwrap();
    let dir = scratch();
    let data = dir.path().join("shm.data");
    let _turn = recording_turn();
    let (text, err) = run_tool(&[
        "shmsnoop",
        "-m",
        TEST_RING_PAGES,
        "-w",
        data.to_str().unwrap(),
        "--",
        prog.to_str().unwrap(),
    ]);
    let pid = text.lines().find_map(|l| l.strip_prefix("pid ")).unwrap();
    assert!(
        text.contains("\nPID    COMM                SYS              RET ARGs\n"),
        "{text}"
    );
    let expected: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("expect "))
        .map(|e| {
            let mut w = e.splitn(3, ' ');
            let (sys, ret, args) = (w.next().unwrap(), w.next().unwrap(), w.next().unwrap());
            format!("{pid:<6} {comm:<16} {sys:>6} {ret:>16} {args}")
        })
        .collect();
    assert_eq!(expected.len(), 5);
    let mine: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(&format!("{pid:<6} ")))
        .collect();
    assert_eq!(mine, expected, "{text}\n{err}");
    let (replayed, _) = run_tool(&["shmsnoop", "-i", data.to_str().unwrap()]);
    let calls = |t: &str| {
        t.lines()
            .filter(|l| l.starts_with(&format!("{pid:<6} ")))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(calls(&replayed), calls(&text));
}
