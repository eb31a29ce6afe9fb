//! The memory tools, each made to see what it reports: the kernel is made to do it (an OOM
//! kill in a memory cgroup, ...), and the tool's lines must name it exactly; the same lines
//! come back from the tool's own recording with `-i`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::kernel::MemCgroup;
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
    let o = run_memperf(&["oomkill", "-i", "/nonexistent/x.data"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("/nonexistent/x.data"), "{}", stderr(&o));
    let o = run_memperf(&["oomkill", "-d", "-1"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = run_memperf(&["oomkill", "-m", "3"]);
    assert!(stderr(&o).contains("power of two"), "{}", stderr(&o));
}
