#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Files that processes map, as a hostile or busy host leaves them: a library replaced by a
//! FIFO while it is mapped (whose open blocks forever), a binary deleted while it runs. The
//! recorder must end on time and the report must not hang; the deleted binary must still be
//! unwound while its process lives. A FIFO at an output path is refused at once.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const LIB: &str = r#"
#include <stddef.h>
#include <sys/mman.h>
/* Touches one fresh page: the fault's stack goes through this library. */
__attribute__((noinline)) int lib_touch(void) {
    volatile char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 0;
    p[0] = 1;
    munmap((void *)p, 4096);
    return 1;
}
"#;

const PROG: &str = r#"
#include <dlfcn.h>
#include <poll.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    int (*touch)(void) = (int (*)(void))dlsym(h, "lib_touch");
    printf("ready\n");
    fflush(stdout);
    /* Faults through the library until standard input closes. */
    struct pollfd in = { .fd = 0, .events = POLLIN };
    while (poll(&in, 1, 2) == 0)
        touch();
    return 0;
}
"#;

fn cc(dir: &Path, name: &str, src: &str, args: &[&str]) -> std::path::PathBuf {
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, src).unwrap();
    let out = dir.join(name);
    let ok = Command::new("cc")
        .args(["-O2", "-g"])
        .args(args)
        .arg("-o")
        .arg(&out)
        .arg(&c)
        .status()
        .unwrap();
    assert!(ok.success(), "cc {name}");
    out
}

/// Starts `prog lib` and waits for its `ready`.
fn start(prog: &Path, lib: &Path) -> Child {
    let mut child = Command::new(prog)
        .arg(lib)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    child
}

/// Runs `cmd` to its end, killing it and failing the test if it takes longer than a limit
/// far beyond what it should take (a watchdog against a hang, not a timing assertion).
/// Its output is read while it runs: a system-wide report can fill a pipe, and a child
/// blocked writing to a pipe nobody reads would look hung.
fn run_watched(cmd: &mut Command, what: &str) -> std::process::Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let drain = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            r.read_to_end(&mut v).unwrap();
            v
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return std::process::Output {
                status,
                stdout: out.join().unwrap(),
                stderr: err.join().unwrap(),
            };
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{what} hung: {}",
                String::from_utf8_lossy(&err.join().unwrap())
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_library_replaced_by_a_fifo_hangs_neither_the_recorder_nor_the_report() {
    if !require_perf("fifo") {
        return;
    }
    let dir = scratch();
    let lib = cc(dir.path(), "libfoo.so", LIB, &["-shared", "-fPIC"]);
    let prog = cc(dir.path(), "fifo_faulter", PROG, &["-ldl"]);
    let out = dir.path().join("fifo.data");
    let _turn = recording_turn();
    // The recorder runs first and sees the library mapped under its path; then the path
    // becomes a FIFO, as a user who owns the directory can make it.
    let mut rec = memperf()
        .args(["record", "-e", "page-faults", "-a", "--duration", "2"])
        .args(["-m", TEST_RING_PAGES, "-o"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(rec.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert!(line.contains("recording page-faults"), "{line}");
    let mut child = start(&prog, &lib);
    std::fs::remove_file(&lib).unwrap();
    mkfifo(&lib);
    let end = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = rec.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > end {
            let _ = rec.kill();
            panic!("memperf record hung on the FIFO");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    assert!(status.success(), "{rest}");
    // The report names frames while the process still maps the FIFO's path.
    let r = run_watched(
        memperf().args(["report", "-q", "--folded", "-i"]).arg(&out),
        "memperf report",
    );
    assert!(r.status.success(), "{}", stderr(&r));
    let folded = String::from_utf8_lossy(&r.stdout);
    assert!(folded.contains("fifo_faulter;"), "{folded}");
    drop(child.stdin.take());
    child.wait().unwrap();
}

#[test]
fn a_binary_deleted_while_it_runs_is_still_unwound() {
    if !require_perf("deleted binary") || !is_root() {
        return;
    }
    let dir = scratch();
    let lib = cc(
        dir.path(),
        "libdel.so",
        LIB,
        &["-shared", "-fPIC", "-fomit-frame-pointer"],
    );
    let prog = cc(
        dir.path(),
        "del_faulter",
        PROG,
        &["-ldl", "-fomit-frame-pointer"],
    );
    let mut child = start(&prog, &lib);
    // What a package upgrade does to a running program's files.
    std::fs::remove_file(&lib).unwrap();
    std::fs::remove_file(&prog).unwrap();

    let out = dir.path().join("del.data");
    let pid = child.id().to_string();
    // The build-id cache the recorder keeps the deleted files in, for the report.
    let cache = dir.path().join("buildid-cache");
    let o = {
        let _turn = recording_turn();
        run_watched(
            memperf()
                .env("MEMPERF_BUILDID_DIR", &cache)
                .args(["record", "-e", "page-faults", "-p", &pid, "--duration", "2"])
                .args(["-m", TEST_RING_PAGES, "-o"])
                .arg(&out),
            "memperf record",
        )
    };
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    drop(child.stdin.take().map(|mut s| s.write_all(b"\n")));
    child.wait().unwrap();
    // Every sample's user stack was unwound through the deleted library into the deleted
    // program: none is cut at the first frame.
    let samples = summary_samples(&err);
    assert!(samples > 100, "{err}");
    let r = run_memperf(&["report", "-i", out.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&r.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("# user stacks unwound while recording"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("truncated: 0"), "{line}\n{text}");
    // The process is gone and so are its files: the report names their frames from the
    // copies the recorder kept by build-id.
    let f = memperf()
        .env("MEMPERF_BUILDID_DIR", &cache)
        .args(["report", "-q", "--folded", "-i"])
        .arg(&out)
        .output()
        .unwrap();
    let folded = String::from_utf8_lossy(&f.stdout);
    assert!(
        folded.contains("main;lib_touch"),
        "{folded}\n{}",
        stderr(&f)
    );
}

/// A FIFO another user put at an output path (`--flamegraph`, `--pprof`): opening it for
/// writing waits for a reader forever, and `leak`/`rss` opened theirs only after the whole
/// trace. Every output path is checked before anything is read or traced, and opened
/// without blocking: each run ends at once with an error naming the FIFO.
#[test]
fn a_fifo_at_an_output_path_is_refused_at_once() {
    if !require_perf("a recording to report") {
        return;
    }
    let dir = scratch();
    let data = dir.path().join("faults.data");
    record(
        &data,
        &["-e", "page-faults"],
        &fixture("brk", Variant::NoFp),
        &["4"],
    );
    let fifo = dir.path().join("out.fifo");
    mkfifo(&fifo);
    let (data, fifo) = (data.to_str().unwrap(), fifo.to_str().unwrap());
    let runs: [&[&str]; 7] = [
        &["report", "-i", data, "--flamegraph", fifo],
        &["report", "-i", data, "--pprof", fifo],
        &["leak", "--pprof", fifo, "-c", "true"],
        &["rss", "--pprof", fifo, "-c", "true"],
        &["rss", "--flamegraph", fifo, "-c", "true"],
        &["faults", "--flamegraph", fifo, "--", "true"],
        &["brkstack", "--flamegraph", fifo, "--", "true"],
    ];
    for args in runs {
        let start = Instant::now();
        let o = run_watched(memperf().args(args), &format!("memperf {args:?}"));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("is a FIFO, not a regular file"),
            "{args:?}: {err}"
        );
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{args:?} took {:?}",
            start.elapsed()
        );
    }
}
