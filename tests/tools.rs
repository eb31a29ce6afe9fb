//! The memory tools, each made to see what it reports: the kernel is made to do it (an OOM
//! kill in a memory cgroup, ...), and the tool's lines must name it exactly; the same lines
//! come back from the tool's own recording with `-i`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::kernel::{MemCgroup, Swapfile, Sysctl};
use common::*;

/// Starts `memperf ARGS` and waits for the first line of its standard output (the tool's
/// "Tracing..." banner, printed once its events are live).
fn start_tool(args: &[&str]) -> (Child, BufReader<std::process::ChildStdout>) {
    let mut child = memperf()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut banner = String::new();
    out.read_line(&mut banner).unwrap();
    assert!(banner.starts_with("Tracing"), "banner: {banner:?}");
    (child, out)
}

/// Stops a tool with SIGINT, as Ctrl-C does, and returns the rest of its stdout and stderr.
fn stop_tool(mut child: Child, mut out: BufReader<std::process::ChildStdout>) -> (String, String) {
    let st = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}: {err}");
    (rest, err)
}

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
    let mut victim = cg.exec_in(&[hog.to_str().unwrap()]).spawn().unwrap();
    let pid = victim.id();
    let status = victim.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "the hog was not OOM-killed: {status}"
    );
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

/// Runs `memperf ARGS` to its end (a tool tracing a command), returning stdout and stderr.
fn run_tool(args: &[&str]) -> (String, String) {
    let o = run_memperf(args);
    let (out, err) = (String::from_utf8_lossy(&o.stdout).into_owned(), stderr(&o));
    assert!(o.status.success(), "memperf {args:?}: {err}");
    (out, err)
}

/// The count line (the first line that is a number) of the text stack holding `frame`.
fn stack_count(text: &str, frame: &str, comm: &str) -> Vec<u64> {
    text.split("\n\n")
        .filter(|st| st.lines().any(|l| l.trim() == frame))
        .filter(|st| st.lines().any(|l| l.trim() == comm))
        .flat_map(|st| {
            st.lines()
                .map(str::trim)
                .filter_map(|l| {
                    l.parse::<u64>()
                        .ok()
                        .or_else(|| l.strip_suffix(" bytes grown")?.parse().ok())
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn faults_counts_every_fault_of_a_known_chain() {
    if !require_perf("faults") {
        return;
    }
    const N: u64 = 3000;
    let prog = fixture("pagefault", Variant::NoFp);
    let comm = prog.file_name().unwrap().to_str().unwrap();
    let dir = scratch();
    let data = dir.path().join("faults.data");
    let svg = dir.path().join("faults.svg");
    let n = N.to_string();
    let _turn = recording_turn();
    let (text, err) = run_tool(&[
        "faults",
        "-m",
        TEST_RING_PAGES,
        "-w",
        data.to_str().unwrap(),
        "--flamegraph",
        svg.to_str().unwrap(),
        "--",
        prog.to_str().unwrap(),
        &n,
    ]);
    assert!(
        text.starts_with("Tracing page faults by stack... Hit Ctrl-C to end.\n"),
        "{text}"
    );
    // Exactly one stack goes through touch_pages, with every one of its faults, and its
    // frames in order (leaf first), as stackcount prints them.
    assert_eq!(
        stack_count(&text, "touch_pages", comm),
        [N],
        "{text}\n{err}"
    );
    let st = text
        .split("\n\n")
        .find(|s| s.contains("touch_pages"))
        .unwrap();
    let frames: Vec<&str> = st.lines().map(str::trim).collect();
    assert_eq!(
        frames[..5],
        ["touch_pages", "pf_level3", "pf_level2", "pf_level1", "main"],
        "{st}"
    );
    assert!(
        err.contains("memperf faults: ") && err.contains(", lost 0"),
        "{err}"
    );
    let drawn = std::fs::read_to_string(&svg).unwrap();
    assert!(drawn.contains("<svg") && drawn.contains("touch_pages"));

    // Folded, from the recording: the same count under the same chain, root first.
    let (folded, _) = run_tool(&["faults", "-f", "-i", data.to_str().unwrap()]);
    let chain = "main;pf_level1;pf_level2;pf_level3;touch_pages ";
    let line = folded
        .lines()
        .find(|l| l.contains(chain))
        .unwrap_or_default();
    assert!(line.starts_with(&format!("{comm};")), "{folded}");
    assert!(line.ends_with(&format!(" {N}")), "{folded}");
    // The text from the recording is the live text, without the banner.
    let (replayed, _) = run_tool(&["faults", "-i", data.to_str().unwrap()]);
    assert_eq!(replayed, text.split_once('\n').unwrap().1);

    // Per pid, user frames only, one fault in 10 sampled: the count is ten times the
    // samples, and the stack is labelled with the pid.
    let (sampled, _) = run_tool(&[
        "faults",
        "-m",
        TEST_RING_PAGES,
        "-P",
        "-U",
        "-c",
        "10",
        "--",
        prog.to_str().unwrap(),
        &n,
    ]);
    let st = sampled
        .split("\n\n")
        .find(|s| s.contains("touch_pages"))
        .unwrap();
    let counted: u64 = st.lines().last().unwrap().trim().parse().unwrap();
    assert_eq!(counted % 10, 0, "{st}");
    assert!((N - 10..=N + 10).contains(&counted), "{st}");
    assert!(
        st.lines()
            .any(|l| l.trim().starts_with(&format!("{comm} ["))),
        "{st}"
    );
}

#[test]
fn faults_reads_perfs_own_recording() {
    if !require_perf("faults -i perf.data") || !require_perf_tool("faults -i perf.data") {
        return;
    }
    const N: u64 = 2000;
    let prog = fixture("pagefault", Variant::NoFp);
    let dir = scratch();
    let data = dir.path().join("perf.data");
    let st = Command::new("perf")
        .args([
            "record",
            "-q",
            "-e",
            "page-faults",
            "-c",
            "1",
            "--call-graph",
            "dwarf",
            "-m",
            TEST_RING_PAGES,
            "-o",
        ])
        .arg(&data)
        .arg(&prog)
        .arg(N.to_string())
        .status()
        .unwrap();
    assert!(st.success());
    let (folded, err) = run_tool(&["faults", "-f", "-i", data.to_str().unwrap()]);
    let chain = ";main;pf_level1;pf_level2;pf_level3;touch_pages ";
    let total: u64 = folded
        .lines()
        .filter(|l| l.contains(chain))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    // perf loses samples of this burst on a busy machine: the count is what perf itself
    // unwinds through the chain, and the losses are perf's, counted once.
    let perfs = perf_script(&data);
    let through = perfs
        .iter()
        .filter(|s| s.has_chain(&["touch_pages", "pf_level3", "pf_level2", "pf_level1", "main"]))
        .count() as u64;
    assert!(through > 0 && through <= N, "{through}");
    assert_eq!(total, through, "{folded}\n{err}");
    let lost = err
        .split(", lost ")
        .nth(1)
        .and_then(|r| r.split([',', ' ', '\n']).next());
    let lost: u64 = lost.unwrap().parse().unwrap();
    let p = Command::new("perf")
        .args(["script", "--show-lost-events", "-F", "comm", "-i"])
        .arg(&data)
        .output()
        .unwrap();
    let perf_lost: u64 = String::from_utf8_lossy(&p.stdout)
        .lines()
        .filter_map(|l| l.split("PERF_RECORD_LOST lost ").nth(1))
        .map(|n| n.trim().parse::<u64>().unwrap())
        .sum();
    // perf's losses, counted once (its LOST records, not again its LOST_SAMPLES).
    assert_eq!(lost, perf_lost, "{err}");
}

#[test]
fn brkstack_counts_calls_and_bytes_grown_by_stack() {
    if !require_perf("brkstack") {
        return;
    }
    const N: u64 = 64;
    let prog = fixture("brk", Variant::NoFp);
    let comm = prog.file_name().unwrap().to_str().unwrap();
    let dir = scratch();
    let data = dir.path().join("brk.data");
    let n = N.to_string();
    let _turn = recording_turn();
    let (text, err) = run_tool(&[
        "brkstack",
        "-m",
        TEST_RING_PAGES,
        "-w",
        data.to_str().unwrap(),
        "--",
        prog.to_str().unwrap(),
        &n,
    ]);
    // N calls through sbrk from grow_heap, 8 KiB each (the fixture's INCREMENT).
    assert_eq!(
        stack_count(&text, "grow_heap", comm),
        [N, N * 8192],
        "{text}\n{err}"
    );
    let st = text
        .split("\n\n")
        .find(|s| s.contains("grow_heap"))
        .unwrap();
    let frames: Vec<&str> = st.lines().map(str::trim).collect();
    let g = frames.iter().position(|f| *f == "grow_heap").unwrap();
    assert!(frames[..g].iter().any(|f| f.contains("brk")), "{st}");
    assert_eq!(frames[g + 1..g + 3], ["brk_level1", "main"], "{st}");
    assert!(!err.contains("is unknown"), "{err}");

    let (folded, _) = run_tool(&["brkstack", "-f", "--bytes", "-i", data.to_str().unwrap()]);
    let line = folded
        .lines()
        .find(|l| l.contains(";main;brk_level1;grow_heap;"))
        .unwrap_or_default();
    assert!(line.ends_with(&format!(" {}", N * 8192)), "{folded}");
    let (replayed, _) = run_tool(&["brkstack", "-i", data.to_str().unwrap()]);
    // Live, the fixture's own line ("heap grew by") shares standard output.
    let live: Vec<&str> = text
        .lines()
        .skip(1)
        .filter(|l| !l.starts_with("heap grew"))
        .collect();
    assert_eq!(replayed.lines().collect::<Vec<_>>(), live);
}

/// `@[key]: N` lines of a bpftrace-style map print, as (key, N).
fn map_rows(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| {
            let (k, n) = l.strip_prefix("@[")?.rsplit_once("]: ")?;
            Some((k.to_string(), n.parse().ok()?))
        })
        .collect()
}

#[test]
fn ffaults_and_fmapfault_count_the_faults_of_each_file_exactly() {
    if !require_perf("ffaults") {
        return;
    }
    const F: u64 = 150;
    const A: u64 = 400;
    let prog = fixture("filefaults", Variant::NoFp);
    let comm = prog.file_name().unwrap().to_str().unwrap();
    let dir = scratch();
    let file = dir.path().join("mapped.bin");
    let file_s = file.to_str().unwrap();
    let data = dir.path().join("ff.data");
    let (f, a) = (F.to_string(), A.to_string());
    let _turn = recording_turn();
    let (text, err) = run_tool(&[
        "ffaults",
        "-m",
        TEST_RING_PAGES,
        "-w",
        data.to_str().unwrap(),
        "--",
        prog.to_str().unwrap(),
        file_s,
        &f,
        &a,
    ]);
    let rows = map_rows(&text);
    // Every copy-on-write fault of the file, each page once.
    assert!(rows.contains(&(file_s.to_string(), F)), "{text}\n{err}");
    // The anonymous pages, and whatever anonymous memory the loader and libc touched.
    let anon = rows.iter().find(|r| r.0 == "//anon").map_or(0, |r| r.1);
    assert!((A..A + 64).contains(&anon), "{text}");
    // The program's own image and libc are files too.
    assert!(rows.iter().any(|r| r.0 == prog.to_str().unwrap()), "{text}");
    assert!(rows.iter().any(|r| r.0.ends_with("/libc.so.6")), "{text}");
    assert!(err.contains(", lost 0"), "{err}");
    assert!(!err.contains("no recorded mapping"), "{err}");
    // The same from the recording; and per command, file mappings only.
    let (replayed, _) = run_tool(&["ffaults", "-i", data.to_str().unwrap()]);
    assert_eq!(map_rows(&replayed), rows);
    let (by_comm, _) = run_tool(&["fmapfault", "-i", data.to_str().unwrap()]);
    let rows = map_rows(&by_comm);
    assert!(
        rows.contains(&(format!("{comm}, {file_s}"), F)),
        "{by_comm}"
    );
    assert!(
        rows.iter()
            .all(|r| !r.0.contains("//anon") && !r.0.contains('[')),
        "{by_comm}"
    );
}

#[test]
fn hfaults_counts_one_fault_per_huge_page() {
    if !require_perf("hfaults") {
        return;
    }
    const H: u64 = 3;
    let Some(_pages) = Sysctl::set("vm/nr_hugepages", "4") else {
        assert!(!is_root(), "root cannot reserve huge pages");
        return;
    };
    let reserved: u64 = std::fs::read_to_string("/proc/sys/vm/nr_hugepages")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        reserved >= H,
        "the kernel reserved only {reserved} huge pages"
    );
    let prog = fixture("filefaults", Variant::NoFp);
    let comm = prog.file_name().unwrap().to_str().unwrap();
    let dir = scratch();
    let file = dir.path().join("small.bin");
    let data = dir.path().join("huge.data");
    let (text, err) = run_tool(&[
        "hfaults",
        "-w",
        data.to_str().unwrap(),
        "-m",
        TEST_RING_PAGES,
        "--",
        prog.to_str().unwrap(),
        file.to_str().unwrap(),
        "10",
        "100",
        &H.to_string(),
    ]);
    assert!(text.starts_with("Tracing Huge Page faults per process... Hit Ctrl-C to end.\n"));
    let pid = text.lines().find_map(|l| l.strip_prefix("pid ")).unwrap();
    // Only the huge pages, one fault each: not the 10 file pages, not the 100 small ones.
    assert_eq!(
        map_rows(&text),
        [(format!("{pid}, {comm}"), H)],
        "{text}\n{err}"
    );
    // From the recording: the MMAP2 record's MAP_HUGETLB says which mapping is huge.
    let (replayed, _) = run_tool(&["hfaults", "-i", data.to_str().unwrap()]);
    assert_eq!(map_rows(&replayed), map_rows(&text));
}

#[test]
fn swapin_counts_the_swap_ins_the_kernel_counts() {
    if !require_perf("swapin") {
        return;
    }
    let must = std::env::var_os("MEMPERF_REQUIRE_PERF").is_some() && is_root();
    let dir = scratch();
    let Some(_swap) = Swapfile::on(dir.path(), 256 << 20) else {
        assert!(
            !must,
            "root cannot switch on a swap file in {}",
            dir.path().display()
        );
        return;
    };
    let Some(cg) = MemCgroup::with_swap("swap", 32 << 20) else {
        assert!(!must, "a memory cgroup is required for the swapin test");
        return;
    };
    let prog = fixture("swapper", Variant::NoFp);
    let comm = prog.file_name().unwrap().to_str().unwrap();
    let data = dir.path().join("swap.data");
    let _turn = recording_turn();
    let mut argv = vec![
        "swapin",
        "-m",
        TEST_RING_PAGES,
        "-w",
        data.to_str().unwrap(),
        "--",
    ];
    let inner = cg.exec_in(&[prog.to_str().unwrap(), "96"]);
    let inner_args: Vec<String> = std::iter::once(inner.get_program())
        .chain(inner.get_args())
        .map(|a| a.to_str().unwrap().to_string())
        .collect();
    argv.extend(inner_args.iter().map(String::as_str));
    let (text, err) = run_tool(&argv);
    let pid: u32 = text
        .lines()
        .find_map(|l| l.strip_prefix("pid "))
        .unwrap()
        .parse()
        .unwrap();
    let readback: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("majflt "))
        .unwrap()
        .parse()
        .unwrap();
    // 96 MiB read back through a 32 MiB limit: most of it came from swap.
    assert!(readback > 1000, "{text}");
    let counted: u64 = text
        .lines()
        .filter(|l| {
            l.split_whitespace().count() == 3
                && l.split_whitespace().nth(1) == Some(&pid.to_string())
        })
        .map(|l| l.split_whitespace().nth(2).unwrap().parse::<u64>().unwrap())
        .sum();
    let file_faults: u64 = err
        .split("swap-in faults; ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .unwrap()
        .parse()
        .unwrap();
    // Every major fault of the reading back is a swap-in but for the program's own file
    // pages (counted apart); a few more swap-ins come from libc's own data before and
    // after it.
    assert!(
        counted + file_faults >= readback && counted <= readback + 64,
        "{counted} swap-in faults, {file_faults} file faults, the kernel counted {readback}: {text}\n{err}"
    );
    assert!(text.contains(&format!("{comm:<16} {pid:<7} ")), "{text}");
    assert!(
        text.contains("(swap-in faults; system-wide pswpin +"),
        "{text}"
    );
    // From the recording: the same rows (not the live pswpin line).
    let (replayed, _) = run_tool(&["swapin", "-T", "-i", data.to_str().unwrap()]);
    let rows = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| l.split_whitespace().count() == 3 && !l.starts_with('('))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(rows(&replayed), rows(&text), "{replayed}");
}

/// `dd` reading a file of `mib` MiB, not in the page cache, inside a memory cgroup of
/// 32 MiB: the kernel must reclaim the cgroup's page cache to let it go on. The file is
/// written and synced outside the cgroup first, so that the cache is clean and reclaim
/// frees pages at once (dirty pages would wait for writeback).
fn dd_in(cg: &MemCgroup, file: &std::path::Path, mib: u32) -> Vec<String> {
    let of = format!("of={}", file.display());
    let count = format!("count={mib}");
    let ok = Command::new("dd")
        .args([
            "if=/dev/zero",
            &of,
            "bs=1M",
            &count,
            "conv=fsync",
            "status=none",
        ])
        .status()
        .unwrap();
    assert!(ok.success());
    // GNU dd's way to drop one file's pages from the cache.
    let inf = format!("if={}", file.display());
    let ok = Command::new("dd")
        .args([&inf, "iflag=nocache", "count=0", "status=none"])
        .status()
        .unwrap();
    assert!(ok.success());
    let c = cg.exec_in(&["dd", &inf, "of=/dev/null", "bs=1M", "status=none"]);
    std::iter::once(c.get_program())
        .chain(c.get_args())
        .map(|a| a.to_str().unwrap().to_string())
        .collect()
}

/// The number of `event` samples of `comm` in a recording, as perf script lists them.
fn perf_count(data: &std::path::Path, comm: &str, event: &str) -> usize {
    let p = Command::new("perf")
        .args(["script", "-F", "comm,event", "-i"])
        .arg(data)
        .output()
        .unwrap();
    String::from_utf8_lossy(&p.stdout)
        .lines()
        .filter(|l| {
            let mut w = l.split_whitespace();
            w.next() == Some(comm) && w.next().is_some_and(|e| e.trim_end_matches(':') == event)
        })
        .count()
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
