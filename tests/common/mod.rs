#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Helpers shared by the integration tests: fixture builds, the perf-events gate,
//! running memperf, and reading recordings back through `perf script`.
#![allow(dead_code)]

pub mod cgroup;
pub mod kernel;
pub mod tools;
pub mod user;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, ExitStatus, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Frame-pointer or no-frame-pointer build of a fixture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    Fp,
    NoFp,
}

impl Variant {
    pub const ALL: [Variant; 2] = [Variant::Fp, Variant::NoFp];

    fn flags(self) -> &'static [&'static str] {
        match self {
            Variant::Fp => &["-fno-omit-frame-pointer", "-mno-omit-leaf-frame-pointer"],
            Variant::NoFp => &["-fomit-frame-pointer"],
        }
    }
}

fn build_dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("create a temporary directory"))
        .path()
}

/// Compiles `fixtures/NAME.c` with the system `cc` (once per test process).
pub fn fixture(name: &str, variant: Variant) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<(String, Variant), PathBuf>>> = OnceLock::new();
    let built = BUILT.get_or_init(|| Mutex::new(HashMap::new()));
    let mut built = built.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.get(&(name.to_string(), variant)) {
        return p.clone();
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(format!("{name}.c"));
    let out = build_dir().join(format!("{name}-{variant:?}").to_lowercase());
    let status = Command::new("cc")
        .args(["-O2", "-g", "-fno-optimize-sibling-calls"])
        .args(variant.flags())
        .args(extra_flags(name))
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .arg("-lpthread")
        .status()
        .expect("run cc (install gcc)");
    assert!(status.success(), "cc failed on {}", src.display());
    built.insert((name.to_string(), variant), out.clone());
    out
}

/// Flags one fixture needs beyond the variant's: `deepstack`'s large stack buffer must stay
/// untouched, which stack clash probes (a default of some distributions' compilers) would
/// not leave it.
fn extra_flags(name: &str) -> &'static [&'static str] {
    match name {
        "deepstack" => &["-fno-stack-clash-protection"],
        _ => &[],
    }
}

/// A scratch directory for one test's outputs.
pub fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().expect("create a temporary directory")
}

/// Whether perf events can be opened here. Skips (returns false, printing why)
/// unless MEMPERF_REQUIRE_PERF=1, where it fails the test instead.
pub fn require_perf(what: &str) -> bool {
    match memperf::sys::probe_perf_events() {
        Ok(()) => true,
        Err(why) => {
            if std::env::var("MEMPERF_REQUIRE_PERF").as_deref() == Ok("1") {
                panic!(
                    "{what}: perf events are required (MEMPERF_REQUIRE_PERF=1) but cannot be opened: {why}"
                );
            }
            eprintln!("skipping {what}: cannot open perf events: {why}");
            false
        }
    }
}

/// Whether the `perf` tool is here; required under MEMPERF_REQUIRE_PERF=1.
pub fn require_perf_tool(what: &str) -> bool {
    let ok = Command::new("perf")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        if std::env::var("MEMPERF_REQUIRE_PERF").as_deref() == Ok("1") {
            panic!(
                "{what}: the perf tool is required (MEMPERF_REQUIRE_PERF=1) but is not installed"
            );
        }
        eprintln!("skipping {what}: the perf tool is not installed");
    }
    ok
}

/// Whether the tests run as root (effective uid 0, from /proc/self/status).
/// `kernel.perf_event_paranoid` now.
pub fn perf_event_paranoid() -> i32 {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|t| {
            let uids = t.lines().find_map(|l| l.strip_prefix("Uid:"))?.to_string();
            uids.split_whitespace().nth(1).map(|e| e == "0")
        })
        .unwrap_or(false)
}

pub fn memperf() -> Command {
    Command::new(env!("CARGO_BIN_EXE_memperf"))
}

/// Runs memperf with `args`, returning its output; fails the test if it could not run.
pub fn run_memperf(args: &[&str]) -> Output {
    memperf().args(args).output().expect("run memperf")
}

/// memperf's standard error, its wrapped prose lines joined again (see [`unwrapped`]).
pub fn stderr(o: &Output) -> String {
    joined(&String::from_utf8_lossy(&o.stderr))
}

/// `text` with its wrapped prose lines joined again (see [`unwrapped`]).
pub fn joined(text: &str) -> String {
    let mut s = unwrapped(text).join("\n");
    if text.ends_with('\n') {
        s.push('\n');
    }
    s
}

/// One recording at a time per test binary: on a 2-CPU machine, parallel tests that each
/// run a fault-heavy workload and a recorder starve the recorders, whose rings then overflow
/// (the losses are reported, but the tests want exact counts). Hold the guard while recording.
pub fn recording_turn() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Ring pages per CPU for test recordings unless a test sets `-m`: 32 MiB hold a whole
/// 3000-page run with 8 KiB stacks, so exact counts do not depend on the reader being
/// scheduled while a busy machine runs the tests (it once was not, and the ring
/// overflowed). The default ring's headroom is measured by benches/compare-perf.sh.
pub const TEST_RING_PAGES: &str = "8192";

/// `memperf record ... -o OUT -- PROGRAM ARGS`; asserts success.
pub fn record(out: &Path, opts: &[&str], program: &Path, args: &[&str]) -> Output {
    let _turn = recording_turn();
    let ring: &[&str] = if opts.contains(&"-m") {
        &[]
    } else {
        &["-m", TEST_RING_PAGES]
    };
    let o = memperf()
        .arg("record")
        .args(ring)
        .args(opts)
        .arg("-o")
        .arg(out)
        .arg("--")
        .arg(program)
        .args(args)
        .output()
        .expect("run memperf");
    assert!(o.status.success(), "memperf record failed: {}", stderr(&o));
    o
}

/// One sample as `perf script` prints it.
#[derive(Debug, Clone)]
pub struct ScriptSample {
    pub comm: String,
    pub tid: u32,
    pub event: String,
    pub header: String,
    /// Symbol names, leaf first (offsets stripped).
    pub frames: Vec<String>,
}

impl ScriptSample {
    /// Whether `chain` (leaf first) appears in order, each right after the other.
    pub fn has_chain(&self, chain: &[&str]) -> bool {
        self.frames
            .windows(chain.len())
            .any(|w| w.iter().zip(chain).all(|(f, c)| f == c))
    }

    pub fn has_frame(&self, name: &str) -> bool {
        self.frames.iter().any(|f| f == name)
    }
}

/// `memperf script -q` and `perf script` of the same file, as (memperf's text, perf's text,
/// memperf's standard error); fails the test if either fails.
pub fn both_scripts(file: &str) -> (String, String, String) {
    let ours = run_memperf(&["script", "-q", "-i", file]);
    assert!(ours.status.success(), "{}", stderr(&ours));
    let theirs = Command::new("perf")
        .args(["script", "-i", file])
        .output()
        .expect("run perf script");
    assert!(theirs.status.success(), "{}", stderr(&theirs));
    (
        String::from_utf8_lossy(&ours.stdout).into_owned(),
        String::from_utf8_lossy(&theirs.stdout).into_owned(),
        stderr(&ours),
    )
}

/// The sample header lines of perf-script text (frame lines start with a tab).
pub fn script_headers(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.starts_with('\t'))
        .map(str::to_string)
        .collect()
}

/// Runs `perf script -i FILE` and parses its samples; fails the test on errors.
pub fn perf_script(file: &Path) -> Vec<ScriptSample> {
    let o = Command::new("perf")
        .arg("script")
        .arg("-i")
        .arg(file)
        .output()
        .expect("run perf script");
    assert!(o.status.success(), "perf script failed: {}", stderr(&o));
    parse_perf_script(&String::from_utf8_lossy(&o.stdout))
}

/// Parses perf script's default layout: a header line per sample, then frames
/// `\t addr sym+off (dso)`, then a blank line.
pub fn parse_perf_script(text: &str) -> Vec<ScriptSample> {
    let mut out = Vec::new();
    let mut cur: Option<ScriptSample> = None;
    for line in text.lines() {
        if line.trim().is_empty() {
            if let Some(s) = cur.take() {
                out.push(s);
            }
            continue;
        }
        if line.starts_with(char::is_whitespace) {
            if let Some(s) = cur.as_mut() {
                let mut parts = line.split_whitespace();
                let _addr = parts.next();
                let sym = parts.next().unwrap_or("");
                let sym = sym.split("+0x").next().unwrap_or(sym);
                s.frames.push(sym.to_string());
            }
            continue;
        }
        if let Some(s) = cur.take() {
            out.push(s);
        }
        // "comm  tid [cpu] time: period event: ..."; comm may contain spaces but
        // the first all-digit field after it is the tid.
        let fields: Vec<&str> = line.split_whitespace().collect();
        let tid_pos = fields
            .iter()
            .position(|f| f.chars().all(|c| c.is_ascii_digit()) && !f.is_empty());
        let (comm, tid) = match tid_pos {
            Some(p) => (fields[..p].join(" "), fields[p].parse().unwrap_or(0)),
            None => (String::new(), 0),
        };
        let event = fields
            .iter()
            .find(|f| f.ends_with(':') && !f.chars().next().is_some_and(|c| c.is_ascii_digit()))
            .map(|f| f.trim_end_matches(':').to_string())
            .unwrap_or_default();
        cur = Some(ScriptSample {
            comm,
            tid,
            event,
            header: line.to_string(),
            frames: Vec::new(),
        });
    }
    if let Some(s) = cur.take() {
        out.push(s);
    }
    out
}

/// The sample count memperf's summary reports ("wrote N samples").
pub fn summary_samples(stderr: &str) -> u64 {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("memperf: wrote "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no summary line in: {stderr}"))
}

/// Whether `go tool pprof` can run; CI installs golang-go, so it is required there.
pub fn have_go() -> bool {
    let ok = Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("MEMPERF_REQUIRE_PERF").as_deref() != Ok("1"),
            "go is required for the pprof round trip (scripts/test.sh installs golang-go)"
        );
        eprintln!("skipping: go is not installed");
    }
    ok
}

/// `go tool pprof ARGS FILE`'s standard output; fails the test if pprof fails.
pub fn go_pprof(file: &Path, args: &[&str]) -> String {
    let o = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .arg(file)
        .output()
        .expect("run go tool pprof");
    assert!(o.status.success(), "go tool pprof {args:?}: {}", stderr(&o));
    String::from_utf8(o.stdout).unwrap()
}

/// The `flat` column of `go tool pprof -top` rows for function `name`.
pub fn pprof_flat(top: &str, name: &str) -> Vec<String> {
    top.lines()
        .filter(|l| l.trim_end().ends_with(&format!(" {name}")))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect()
}

/// Offsets of every record header of a recording's data: a file's data section, or a
/// pipe-mode stream after its 16-byte header (passing over the tracing data and AUXTRACE
/// payloads that follow their records, as perf's reader does).
pub fn record_offsets(bytes: &[u8]) -> Vec<usize> {
    let u64_at = |at: usize| u64::from_ne_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
    let (start, end) = if u64_at(8) == 16 {
        (16, bytes.len())
    } else {
        (u64_at(40), u64_at(40) + u64_at(48))
    };
    let mut out = Vec::new();
    let mut pos = start;
    while pos + 8 <= end {
        out.push(pos);
        let ty = u32::from_ne_bytes(bytes[pos..pos + 4].try_into().unwrap());
        let size = u16::from_ne_bytes([bytes[pos + 6], bytes[pos + 7]]) as usize;
        if size < 8 {
            break;
        }
        let payload = match ty {
            66 => u32::from_ne_bytes(bytes[pos + 8..pos + 12].try_into().unwrap()) as usize,
            71 => u64_at(pos + 8),
            _ => 0,
        };
        pos += size + payload;
    }
    out
}

/// Runs `memperf ARGS` with `input` on its standard input; fails the test if it could not run.
pub fn run_memperf_stdin(args: &[&str], input: &[u8]) -> Output {
    use std::io::Write;
    let mut child = memperf()
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run memperf");
    let mut stdin = child.stdin.take().expect("memperf's stdin");
    // memperf may stop reading early (a bad header): a broken pipe here is not a failure.
    let _ = stdin.write_all(input);
    drop(stdin);
    child.wait_with_output().expect("wait for memperf")
}

/// Whether inferno's collapser is here; required under MEMPERF_REQUIRE_PERF=1, where
/// scripts/test.sh installs it.
pub fn have_inferno() -> bool {
    let ok = Command::new("inferno-collapse-perf")
        .arg("--help")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("MEMPERF_REQUIRE_PERF").as_deref() != Ok("1"),
            "inferno-collapse-perf is required (scripts/test.sh installs it with cargo)"
        );
        eprintln!("skipping: inferno-collapse-perf is not installed");
    }
    ok
}

/// `memperf record OPTS -o OUT [-- COMMAND]`.
pub fn record_command(opts: &[&str], out: &Path, command: &[&str]) -> Command {
    let mut cmd = memperf();
    cmd.arg("record").args(opts).arg("-o").arg(out);
    if !command.is_empty() {
        cmd.arg("--").args(command);
    }
    cmd
}

/// A `memperf record` running in the background, its start line read.
pub struct Recording {
    child: Child,
    err: BufReader<ChildStderr>,
}

impl Recording {
    pub fn start(opts: &[&str], out: &Path, command: &[&str]) -> Recording {
        let mut cmd = record_command(opts, out, command);
        let mut child = cmd.stderr(Stdio::piped()).spawn().expect("start memperf");
        let mut err = BufReader::new(child.stderr.take().expect("stderr"));
        let mut started = String::new();
        err.read_line(&mut started).expect("start line");
        assert!(started.contains("memperf: recording"), "{started}");
        Recording { child, err }
    }

    /// Sends SIGINT to memperf alone (through `kill`: tests keep `unsafe` out).
    pub fn interrupt(&self) {
        let pid = self.child.id().to_string();
        let st = Command::new("kill").args(["-INT", &pid]).status();
        assert!(st.expect("kill").success());
    }

    /// Its exit status and the rest of its stderr, once it stops (after `why`).
    pub fn wait(mut self, why: &str) -> (ExitStatus, String) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait memperf") {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "memperf did not stop after {why}"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut self.err, &mut rest).ok();
        (status, rest)
    }
}

/// Starts a fixture that prints `ready PID` and then waits for a line on its standard input
/// (`threads` with THREADS_ATTACH, `repeat` with REPEAT_WAIT): the child and the PID.
pub fn start_held(cmd: &mut Command) -> (Child, String) {
    let mut work = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the fixture");
    let mut line = String::new();
    BufReader::new(work.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("ready line");
    let pid = line.trim().strip_prefix("ready ").expect("ready PID");
    (work, pid.to_string())
}

/// Lets a fixture started by [`start_held`] go on, and waits for it to succeed.
pub fn release_held(mut work: Child) {
    use std::io::Write;
    work.stdin
        .take()
        .expect("stdin")
        .write_all(b"go\n")
        .expect("release the workload");
    assert!(work.wait().expect("wait").success());
}

/// Makes a FIFO at `path`.
pub fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

/// The lines of `text` with each prose line that memperf wrapped to 80 columns joined again
/// (`output::wrap`): a line indented 4 columns past the first line of its block (a
/// summary's sub-items go 2 further in), or hanging under a row's label (12 columns or more
/// in), goes on the line before it, one space between.
pub fn unwrapped(text: &str) -> Vec<String> {
    let indent = |l: &str| l.len() - l.trim_start().len();
    let mut out: Vec<String> = Vec::new();
    let mut block = 0;
    for l in text.lines() {
        let i = indent(l);
        let goes_on = i == block + 4 || (i >= 12 && i > block);
        match out.last_mut() {
            Some(last) if goes_on && !l.trim().is_empty() => {
                last.push(' ');
                last.push_str(l.trim_start());
            }
            _ => {
                block = i;
                out.push(l.to_string());
            }
        }
    }
    out
}

/// The path a test peer's build script prints (`tests/otelcol/build.sh` and the like: each
/// builds or installs its server once, cached under ~/.cache/memperf); `None` (the test
/// skips) where it cannot be had, which CI (`MEMPERF_REQUIRE_PERF=1`) does not accept.
pub fn built_by(script: &str, what: &str) -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
    match Command::new(&path).output() {
        Ok(o) if o.status.success() => {
            Some(PathBuf::from(String::from_utf8(o.stdout).unwrap().trim()))
        }
        other => {
            let why = match other {
                Ok(o) => stderr(&o),
                Err(e) => e.to_string(),
            };
            assert!(
                std::env::var("MEMPERF_REQUIRE_PERF").as_deref() != Ok("1"),
                "{script} failed: {why}"
            );
            eprintln!("skipping: {what} could not be built: {why}");
            None
        }
    }
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The (truncated, unwound, not unwound) counts of a summary's `N of M allocation stacks
/// truncated (P%), K of them not unwound at all`.
pub fn stack_counts(err: &str) -> (u64, u64, u64) {
    let text = joined(err);
    let line = text
        .lines()
        .find(|l| l.contains("allocation stacks truncated"))
        .unwrap_or_else(|| panic!("no truncation count in\n{err}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "allocation").unwrap();
    let num = |w: &str| {
        w.trim_matches(|c: char| !c.is_ascii_digit())
            .parse()
            .unwrap()
    };
    let none = words.iter().position(|w| *w == "them").unwrap() - 2;
    (num(words[at - 3]), num(words[at - 1]), num(words[none]))
}
