//! Running the memory tools in tests: to their end, or started and stopped as Ctrl-C does,
//! and reading their outputs.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};

use super::kernel::MemCgroup;
use super::{memperf, run_memperf, stderr};

/// Starts `memperf ARGS` and waits for the first line of its standard output (the tool's
/// "Tracing..." banner, printed once its events are live).
pub fn start_tool(args: &[&str]) -> (Child, BufReader<std::process::ChildStdout>) {
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
pub fn stop_tool(
    mut child: Child,
    mut out: BufReader<std::process::ChildStdout>,
) -> (String, String) {
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

/// Runs `memperf ARGS` to its end (a tool tracing a command), returning stdout and stderr.
pub fn run_tool(args: &[&str]) -> (String, String) {
    let o = run_memperf(args);
    let (out, err) = (String::from_utf8_lossy(&o.stdout).into_owned(), stderr(&o));
    assert!(o.status.success(), "memperf {args:?}: {err}");
    (out, err)
}

/// The count line (the first line that is a number) of the text stack holding `frame`.
pub fn stack_count(text: &str, frame: &str, comm: &str) -> Vec<u64> {
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

/// `@[key]: N` lines of a bpftrace-style map print, as (key, N).
pub fn map_rows(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| {
            let (k, n) = l.strip_prefix("@[")?.rsplit_once("]: ")?;
            Some((k.to_string(), n.parse().ok()?))
        })
        .collect()
}

/// The number of `event` samples of `comm` in a recording, as perf script lists them.
pub fn perf_count(data: &std::path::Path, comm: &str, event: &str) -> usize {
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

/// `dd` reading a file of `mib` MiB, not in the page cache, inside a memory cgroup of
/// 32 MiB: the kernel must reclaim the cgroup's page cache to let it go on. The file is
/// written and synced outside the cgroup first, so that the cache is clean and reclaim
/// frees pages at once (dirty pages would wait for writeback).
pub fn dd_in(cg: &MemCgroup, file: &std::path::Path, mib: u32) -> Vec<String> {
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

/// Where each sample of the recording `data` states its time: (file offset, time).
pub fn sample_times(data: &std::path::Path) -> Vec<(usize, u64)> {
    use memperf::perfdata::PerfDataFile;
    let file = PerfDataFile::open(data).unwrap();
    file.records()
        .map(Result::unwrap)
        .filter(|r| r.ty == 9)
        .filter_map(|r| {
            let info = file.parse_info(file.event_for(r.ty, r.body)?);
            let t = memperf::records::parse_sample(r.body, &info).ok()?.time?;
            let at = r.bytes.windows(8).position(|w| w == t.to_ne_bytes())?;
            Some((r.offset as usize + at, t))
        })
        .collect()
}

/// Runs `memperf ARGS`, killed after `limit` (a replay printing without end: the test then
/// fails); returns its exit code, the lines of its standard output and its standard error.
pub fn run_bounded(args: &[&str], limit: std::time::Duration) -> (Option<i32>, u64, String) {
    let mut child = memperf()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read on threads, so that a replay printing without end cannot fill a pipe and stall.
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut n = 0u64;
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(k @ 1..) = so.read(&mut buf) {
            n += buf[..k].iter().filter(|&&b| b == b'\n').count() as u64;
        }
        n
    });
    let err = std::thread::spawn(move || {
        let mut e = String::new();
        se.read_to_string(&mut e).ok();
        e
    });
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "memperf {args:?} ran {limit:?} ({} lines)",
                out.join().unwrap()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    (status.code(), out.join().unwrap(), err.join().unwrap())
}
