#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `memperf record` on workloads with known answers, checked through `perf script`.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::*;

const PF_CHAIN: [&str; 5] = ["touch_pages", "pf_level3", "pf_level2", "pf_level1", "main"];

/// Runs `memperf record` to its end: its exit code and its stderr.
fn record_to_end(opts: &[&str], out: &Path, command: &[&str]) -> (Option<i32>, String) {
    let o = record_command(opts, out, command).output().expect("run");
    (o.status.code(), stderr(&o))
}

fn chain_count(samples: &[ScriptSample], chain: &[&str]) -> usize {
    samples.iter().filter(|s| s.has_chain(chain)).count()
}

/// Records the page-fault fixture touching `n` pages and returns perf script's samples.
fn record_faults(variant: Variant, n: u32, opts: &[&str]) -> (Vec<ScriptSample>, String) {
    let dir = scratch();
    let out = dir.path().join("pf.data");
    let prog = fixture("pagefault", variant);
    let mut all = vec!["-e", "page-faults"];
    all.extend_from_slice(opts);
    let o = record(&out, &all, &prog, &[&n.to_string()]);
    (perf_script(&out), stderr(&o))
}

#[test]
fn page_faults_dwarf_stacks_name_the_whole_chain_in_both_builds() {
    if !require_perf("page-fault recording") || !require_perf_tool("page-fault recording") {
        return;
    }
    const N: u32 = 3000;
    for variant in Variant::ALL {
        let (empty, _) = record_faults(variant, 0, &[]);
        let (samples, err) = record_faults(variant, N, &[]);
        assert_eq!(
            chain_count(&samples, &PF_CHAIN),
            N as usize,
            "{variant:?}: samples with the full chain; first sample: {:?}; memperf said: {err}",
            samples.first()
        );
        assert_eq!(
            chain_count(&empty, &PF_CHAIN),
            0,
            "{variant:?}: the empty run touches nothing"
        );
        // The rest are the faults every run has (loader, libc start-up): about as many as
        // in the empty run.
        let extra = samples.len() as i64 - N as i64;
        let base = empty.len() as i64;
        assert!(
            (extra - base).abs() <= 8,
            "{variant:?}: {} samples for {N} pages, empty run {base}",
            samples.len()
        );
        assert!(
            samples.iter().all(|s| s.event == "page-faults"),
            "{variant:?}"
        );
        // The summary and perf agree on the count, and nothing was lost.
        assert_eq!(summary_samples(&err), samples.len() as u64, "{err}");
        assert!(err.contains("lost 0 events"), "{err}");
    }
}

/// The dynamic loader's `_start` has no CFI and frame pointers lead nowhere past it: the
/// unwinder stopped there with an error, and most stacks of a short run (every one taken
/// while the loader runs) were counted as truncated "bad frame" though they were whole.
#[test]
fn stacks_that_end_at_the_loaders_start_are_not_truncated() {
    if !require_perf("loader stacks") {
        return;
    }
    let dir = scratch();
    let out = dir.path().join("ld.data");
    let o = record(
        &out,
        &["-e", "page-faults"],
        &fixture("pagefault", Variant::NoFp),
        &["0"],
    );
    let err = stderr(&o);
    assert!(err.contains("unwound "), "{err}");
    assert!(!err.contains("bad frame"), "{err}");
    let script = run_memperf(&["script", "-i", out.to_str().unwrap()]);
    assert!(script.status.success(), "{}", stderr(&script));
    let samples = parse_perf_script(&String::from_utf8_lossy(&script.stdout));
    // Faults while the loader relocates and maps libc: their stacks end at its `_start`.
    let rooted_in_loader_start = samples
        .iter()
        .filter(|s| s.frames.last().is_some_and(|f| f == "_start"))
        .filter(|s| s.frames.iter().any(|f| f == "_dl_start"))
        .count();
    assert!(rooted_in_loader_start > 0, "{err}");
}

/// `memperf script` prints perf script's layout: on the same file, every sample header is
/// byte for byte perf's, and every frame has perf's address and object.
#[test]
fn script_lines_are_perf_scripts() {
    if !require_perf("script layout") || !require_perf_tool("script layout") {
        return;
    }
    let dir = scratch();
    let out = dir.path().join("pf.data");
    let prog = fixture("pagefault", Variant::NoFp);
    record(&out, &["-e", "page-faults"], &prog, &["50"]);
    let (ours, theirs, _) = both_scripts(out.to_str().unwrap());
    // A frame's address and object; the name may differ where memperf names a return
    // address by its call (`_start` where perf says `_dl_start_user+0x0`).
    let frames = |t: &str| -> Vec<(String, String)> {
        t.lines()
            .filter_map(|l| l.strip_prefix('\t'))
            .map(|l| {
                let l = l.trim_start();
                let addr = l.split(' ').next().unwrap_or("").to_string();
                let dso = l.rsplit_once(" (").map_or("", |(_, d)| d).to_string();
                (addr, dso)
            })
            .collect()
    };
    assert_eq!(script_headers(&ours), script_headers(&theirs));
    assert!(
        script_headers(&ours)
            .iter()
            .any(|h| h.ends_with(" page-faults: "))
    );
    assert_eq!(frames(&ours), frames(&theirs));
    assert!(ours.contains(" touch_pages+0x"), "{ours}");
}

#[test]
fn frame_pointer_mode_breaks_the_chain_without_frame_pointers() {
    if !require_perf("fp recording") || !require_perf_tool("fp recording") {
        return;
    }
    const N: u32 = 500;
    let (fp, _) = record_faults(Variant::Fp, N, &["--call-graph", "fp"]);
    assert_eq!(chain_count(&fp, &PF_CHAIN), N as usize, "fp build, fp mode");
    let (nofp, _) = record_faults(Variant::NoFp, N, &["--call-graph", "fp"]);
    let leaf_samples = nofp
        .iter()
        .filter(|s| s.frames.first().is_some_and(|f| f == "touch_pages"))
        .count();
    assert_eq!(leaf_samples, N as usize, "the leaf is still the sampled ip");
    assert_eq!(
        chain_count(&nofp, &PF_CHAIN),
        0,
        "without frame pointers the kernel's fp walk cannot recover the chain"
    );
}

/// A regression: the kernel samples every software event that carries PERF_SAMPLE_PERIOD,
/// whatever sample_period says, so `-c 100` used to record every fault.
#[test]
fn a_fixed_period_samples_one_event_in_n() {
    if !require_perf("-c PERIOD") || !require_perf_tool("-c PERIOD") {
        return;
    }
    const N: u32 = 3000;
    let (every, _) = record_faults(Variant::NoFp, N, &[]);
    let (one_in_100, _) = record_faults(Variant::NoFp, N, &["-c", "100"]);
    let expected = every.len() / 100;
    assert!(
        (expected.saturating_sub(1)..=expected + 1).contains(&one_in_100.len()),
        "{} faults at period 1, {} samples at period 100",
        every.len(),
        one_in_100.len()
    );
    // Every sample is still a fault of the workload or of its start-up, with a full chain.
    assert!(chain_count(&one_in_100, &PF_CHAIN) >= N as usize / 100 - 1);
    // memperf script prints the period each sample stands for, as perf script does.
    let dir = scratch();
    let out = dir.path().join("c100.data");
    let prog = fixture("pagefault", Variant::NoFp);
    record(&out, &["-e", "page-faults", "-c", "100"], &prog, &["300"]);
    let o = run_memperf(&[
        "script",
        "-q",
        "-F",
        "period,event",
        "-i",
        out.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && !text.is_empty(), "{}", stderr(&o));
    assert!(
        text.lines()
            .all(|l| l.split_whitespace().next() == Some("100")),
        "{text}"
    );
}

#[test]
fn offline_unwinding_keeps_raw_stacks_that_perf_unwinds() {
    if !require_perf("offline recording") || !require_perf_tool("offline recording") {
        return;
    }
    const N: u32 = 300;
    let dir = scratch();
    let out = dir.path().join("off.data");
    let prog = fixture("pagefault", Variant::NoFp);
    record(
        &out,
        &["-e", "page-faults", "--unwind", "offline"],
        &prog,
        &[&N.to_string()],
    );
    let samples = perf_script(&out);
    assert_eq!(
        chain_count(&samples, &PF_CHAIN),
        N as usize,
        "perf's own dwarf unwinding of memperf's raw stacks"
    );
    let online = dir.path().join("on.data");
    record(&online, &["-e", "page-faults"], &prog, &[&N.to_string()]);
    let (off_len, on_len) = (
        std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0),
        std::fs::metadata(&online).map(|m| m.len()).unwrap_or(0),
    );
    assert!(
        on_len * 10 < off_len,
        "online file {on_len} bytes vs offline {off_len} bytes"
    );
}

fn tracepoint_counts(
    name: &str,
    event: &str,
    func: &str,
    n: u32,
) -> (usize, usize, Vec<ScriptSample>) {
    let dir = scratch();
    let prog = fixture(name, Variant::NoFp);
    let empty = dir.path().join("empty.data");
    record(&empty, &["-e", event], &prog, &["0"]);
    let full = dir.path().join("full.data");
    record(&full, &["-e", event], &prog, &[&n.to_string()]);
    let e = perf_script(&empty);
    let f = perf_script(&full);
    let with_func = f.iter().filter(|s| s.has_frame(func)).count();
    (f.len() - e.len(), with_func, f)
}

#[test]
fn brk_samples_equal_the_calls_and_name_the_caller_through_libc() {
    if !require_perf("brk tracepoint") || !require_perf_tool("brk tracepoint") {
        return;
    }
    const N: u32 = 64;
    let (extra, with_func, samples) =
        tracepoint_counts("brk", "syscalls:sys_enter_brk", "grow_heap", N);
    assert_eq!(extra, N as usize, "brk calls beyond an empty run");
    assert_eq!(
        with_func, N as usize,
        "brk samples with grow_heap on the stack"
    );
    let s = samples
        .iter()
        .find(|s| s.has_frame("grow_heap"))
        .map(|s| s.frames.clone())
        .unwrap_or_default();
    let g = s.iter().position(|f| f == "grow_heap").unwrap_or(0);
    assert!(
        s[..g].iter().any(|f| f.contains("brk")),
        "a libc brk/sbrk frame below grow_heap: {s:?}"
    );
    assert!(
        s.iter().any(|f| f == "brk_level1") && s.iter().any(|f| f == "main"),
        "{s:?}"
    );
    assert!(samples.iter().all(|s| s.event == "syscalls:sys_enter_brk"));
    // perf decodes the tracepoint payload from the file's tracing data.
    assert!(
        samples.iter().any(|s| s.header.contains("brk: 0x")),
        "{:?}",
        samples.first().map(|s| &s.header)
    );
}

#[test]
fn mmap_samples_equal_the_calls_and_name_the_caller_through_libc() {
    if !require_perf("mmap tracepoint") || !require_perf_tool("mmap tracepoint") {
        return;
    }
    const N: u32 = 40;
    let (extra, with_func, samples) =
        tracepoint_counts("mmap", "syscalls:sys_enter_mmap", "map_regions", N);
    assert_eq!(extra, N as usize, "mmap calls beyond an empty run");
    assert_eq!(
        with_func, N as usize,
        "mmap samples with map_regions on the stack"
    );
    let s = samples
        .iter()
        .find(|s| s.has_frame("map_regions"))
        .map(|s| s.frames.clone())
        .unwrap_or_default();
    let g = s.iter().position(|f| f == "map_regions").unwrap_or(0);
    assert!(
        s[..g].iter().any(|f| f.contains("mmap")),
        "a libc mmap frame below map_regions: {s:?}"
    );
}

#[test]
fn perf_report_opens_the_file_without_warnings() {
    if !require_perf("perf report interop") || !require_perf_tool("perf report interop") {
        return;
    }
    let dir = scratch();
    let out = dir.path().join("r.data");
    let prog = fixture("pagefault", Variant::NoFp);
    record(
        &out,
        &["-e", "page-faults,syscalls:sys_enter_brk"],
        &prog,
        &["200"],
    );
    let o = Command::new("perf")
        .args(["report", "--stdio", "-i"])
        .arg(&out)
        .output()
        .expect("run perf report");
    let err = stderr(&o);
    assert!(o.status.success(), "perf report failed: {err}");
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| {
            let l = l.to_lowercase();
            l.contains("warning")
                || l.contains("error")
                || l.contains("corrupt")
                || l.contains("unexpected")
        })
        .collect();
    assert!(warnings.is_empty(), "perf report complained: {warnings:?}");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("touch_pages"),
        "perf report names the workload's frames"
    );
    assert!(
        text.contains("page-faults") && text.contains("syscalls:sys_enter_brk"),
        "both events named"
    );
}

/// Attaches `memperf record -e page-faults -p PID` to the threads fixture (with `env`): its
/// early worker and `T` late threads touch `k` pages each. Asserts that every thread's faults
/// are there, each with a stack that unwinds to start_thread; returns perf script's samples
/// and memperf's summary.
fn attach_to_threads(k: usize, env: &[(&str, &str)]) -> (Vec<ScriptSample>, String) {
    // A recorder of its own beside the other tests' would starve them (see recording_turn).
    let _turn = recording_turn();
    const T: usize = 3;
    let dir = scratch();
    let out = dir.path().join("p.data");
    let prog = fixture("threads", Variant::NoFp);
    let (work, pid) = start_held(
        Command::new(&prog)
            .args([T.to_string(), k.to_string()])
            .envs(env.iter().copied()),
    );
    let rec = Recording::start(
        &["-m", TEST_RING_PAGES, "-e", "page-faults", "-p", &pid],
        &out,
        &[],
    );
    release_held(work);
    // memperf stops by itself once the process is gone.
    let (status, rest) = rec.wait("its target exited");
    assert!(status.success(), "memperf failed: {rest}");
    let samples = perf_script(&out);
    let mut per_tid = std::collections::BTreeMap::new();
    for s in samples.iter().filter(|s| s.has_chain(&["thread_touch"])) {
        *per_tid.entry(s.tid).or_insert(0usize) += 1;
    }
    assert_eq!(
        per_tid.len(),
        T + 1,
        "one early and {T} late threads: {per_tid:?}\n{rest}"
    );
    assert!(
        per_tid.values().all(|&n| n == k),
        "{k} faults in each thread: {per_tid:?}\n{rest}"
    );
    let full = samples
        .iter()
        .filter(|s| s.has_frame("thread_touch") && s.has_frame("start_thread"))
        .count();
    assert_eq!(
        full,
        (T + 1) * k,
        "every thread's stack unwinds to start_thread\n{rest}"
    );
    (samples, rest)
}

#[test]
fn attach_to_a_process_catches_every_thread_including_new_ones() {
    if !require_perf("attach with -p") || !require_perf_tool("attach with -p") {
        return;
    }
    attach_to_threads(150, &[]);
}

#[test]
fn attach_with_dwarf_auto_opens_again_on_every_thread_of_the_process() {
    if !require_perf("attach with -p") || !require_perf_tool("attach with -p") {
        return;
    }
    // The attached process's main thread faults 3000 pages and pauses (the event is opened
    // again with a smaller copy meanwhile, on every thread of the process: the early worker
    // was there before the attach), then that worker and 3 new threads fault 500 pages each.
    let (samples, summary) =
        attach_to_threads(500, &[("THREADS_WARMUP", "3000"), ("THREADS_ATTACH", "1")]);
    let warm = samples
        .iter()
        .filter(|s| s.has_chain(&["warm_up", "main"]))
        .count();
    assert_eq!(warm, 3000, "{summary}");
    let sized = summary
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("note: dwarf,auto: `page-faults` copied 8192 bytes, then ")
        })
        .unwrap_or_else(|| panic!("the copy was not sized again: {summary}"));
    // Decided on the warm-up's faults (and the few others the process takes meanwhile,
    // CI saw 3001), while the process paused: before the workers' 2000.
    let from: u64 = sized
        .split_once(" from stack ")
        .and_then(|(_, rest)| rest.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no `from stack N`: {summary}"));
    assert!(from < 3100, "{summary}");
}

#[test]
fn sigint_leaves_a_complete_file() {
    if !require_perf("SIGINT handling") || !require_perf_tool("SIGINT handling") {
        return;
    }
    // A recorder of its own beside the other tests' would starve them (see recording_turn).
    let _turn = recording_turn();
    let dir = scratch();
    let out = dir.path().join("int.data");
    let rec = Recording::start(&["-e", "page-faults", "-a"], &out, &[]);
    // Some activity to record.
    let prog = fixture("pagefault", Variant::Fp);
    // Other tests run fixtures at the same time: only this run's pid counts.
    let mut run = Command::new(&prog).arg("100").spawn().expect("run");
    let fixture_pid = run.id();
    assert!(run.wait().expect("wait").success());
    rec.interrupt();
    let (status, rest) = rec.wait("SIGINT");
    assert!(status.success(), "{rest}");
    let samples = perf_script(&out);
    let of_fixture: Vec<&ScriptSample> = samples.iter().filter(|s| s.tid == fixture_pid).collect();
    let chains = of_fixture.iter().filter(|s| s.has_chain(&PF_CHAIN)).count();
    assert_eq!(
        chains,
        100,
        "the fixture's 100 faults are in the system-wide file; {} samples of the fixture, first: {:?}; memperf said: {rest}",
        of_fixture.len(),
        of_fixture
            .iter()
            .find(|s| s.frames.iter().any(|f| f == "touch_pages"))
    );
}

#[test]
fn command_exit_status_is_memperfs() {
    if !require_perf("exit status") {
        return;
    }
    let dir = scratch();
    let out = dir.path().join("x.data");
    let (code, err) = record_to_end(&["-q"], &out, &["sh", "-c", "exit 7"]);
    assert_eq!(code, Some(7), "{err}");
}

#[test]
fn bad_input_gets_clear_errors() {
    let dir = scratch();
    let out = dir.path().join("bad.data");
    let out = out.to_str().expect("utf-8 path");
    let cases: &[(&[&str], &str)] = &[
        (
            &["-e", "page-fault", "-o", out, "--", "true"],
            "unknown event `page-fault`; did you mean `page-faults`",
        ),
        (
            &["-p", "999999999", "-o", out],
            "no such process: 999999999",
        ),
        (
            &["-c", "0", "-o", out, "--", "true"],
            "invalid sample period 0",
        ),
        (
            &["-o", "/proc/memperf-no-such-dir/out.data", "--", "true"],
            "failed to create output file",
        ),
        (
            &["--call-graph", "dwarf,99999", "-o", out, "--", "true"],
            "between 8 and 65528",
        ),
    ];
    for (args, want) in cases {
        let mut all = vec!["record"];
        all.extend_from_slice(args);
        let o = run_memperf(&all);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: expected `{want}` in: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn missing_tracepoint_is_named() {
    if !require_perf("tracepoint lookup") {
        return;
    }
    let dir = scratch();
    let out = dir.path().join("t.data");
    let o = memperf()
        .args(["record", "-e", "kmem:no_such_tracepoint", "-o"])
        .arg(&out)
        .args(["--", "true"])
        .output()
        .expect("run");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("kmem:no_such_tracepoint"), "{err}");
    assert!(err.contains("no such tracepoint"), "{err}");
}

#[test]
fn hardware_events_without_a_pmu_are_diagnosed() {
    if std::path::Path::new("/sys/bus/event_source/devices/cpu").exists() {
        eprintln!("skipping: this machine has a CPU PMU, so cache-misses opens");
        return;
    }
    if !require_perf("hardware event diagnosis") {
        return;
    }
    let dir = scratch();
    let out = dir.path().join("hw.data");
    let o = memperf()
        .args(["record", "-e", "cache-misses", "-o"])
        .arg(&out)
        .args(["--", "true"])
        .output()
        .expect("run");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("failed to open event `cache-misses`"), "{err}");
    assert!(err.contains("no hardware PMU"), "{err}");
}

#[test]
fn a_full_disk_is_a_clear_error() {
    if !require_perf("write errors") {
        return;
    }
    // A recorder of its own beside the other tests' would starve them (see recording_turn).
    let _turn = recording_turn();
    // A 100 KiB file-size limit stands in for a full disk: writes past it fail with EFBIG
    // (SIGXFSZ is ignored so that the write returns the error instead of killing memperf).
    let dir = scratch();
    let out = dir.path().join("full.data");
    let prog = fixture("pagefault", Variant::NoFp);
    let bin = env!("CARGO_BIN_EXE_memperf");
    let script = format!(
        "trap '' XFSZ; ulimit -f 100; exec '{bin}' record -e page-faults -o '{}' -- '{}' 3000",
        out.display(),
        prog.display()
    );
    let o = Command::new("sh")
        .args(["-c", &script])
        .output()
        .expect("run sh");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("failed to write `{}`", out.display()))
            && err.contains("File too large"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn duration_ends_the_recording_and_sends_the_command_sigterm() {
    if !require_perf("--duration") {
        return;
    }
    let _turn = recording_turn();
    let dir = scratch();
    let out = dir.path().join("d.data");
    // With a command: SIGTERM when the time is up, and its status (128 + 15) is memperf's.
    let opts = ["-e", "page-faults", "--duration", "0.5"];
    let (code, err) = record_to_end(&opts, &out, &["sleep", "30"]);
    assert_eq!(code, Some(143), "{err}");
    assert!(err.contains("stopped: --duration elapsed"), "{err}");
    // System-wide: memperf stops by itself.
    let (code, err) = record_to_end(&[&opts[..], &["-a"]].concat(), &out, &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("stopped: --duration elapsed"), "{err}");
}

#[test]
fn sigint_is_forwarded_to_the_command_and_its_status_is_memperfs() {
    if !require_perf("SIGINT forwarding") {
        return;
    }
    let dir = scratch();
    let out = dir.path().join("fwd.data");
    let rec = Recording::start(&["-e", "page-faults"], &out, &["sleep", "30"]);
    // Only memperf gets the signal: the command dies of it only if memperf forwards it.
    rec.interrupt();
    let (status, rest) = rec.wait("SIGINT");
    assert_eq!(status.code(), Some(130), "{rest}");
    assert!(rest.contains("stopped: the command exited"), "{rest}");
}

#[test]
fn consume_none_only_advances_the_rings() {
    if !require_perf("--consume none") {
        return;
    }
    let dir = scratch();
    let out = dir.path().join("none.data");
    let opts = ["-e", "page-faults", "--consume", "none"];
    let (code, err) = record_to_end(&opts, &out, &["sh", "-c", "exit 3"]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("stopped: the command exited"), "{err}");
}

#[test]
fn recording_threads_given_with_t_stops_when_they_exit() {
    if !require_perf("attach with -t") {
        return;
    }
    let dir = scratch();
    let out = dir.path().join("t.data");
    // `cat` runs until its stdin closes: it is alive while the recording starts.
    let mut thread = Command::new("cat")
        .stdin(Stdio::piped())
        .spawn()
        .expect("start cat");
    let tid = thread.id().to_string();
    let rec = Recording::start(&["-e", "page-faults", "-t", &tid], &out, &[]);
    drop(thread.stdin.take());
    assert!(thread.wait().expect("wait cat").success());
    let (status, rest) = rec.wait("its thread exited");
    assert!(status.success(), "{rest}");
    assert!(rest.contains("stopped: every target exited"), "{rest}");
}
