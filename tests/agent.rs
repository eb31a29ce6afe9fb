#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `memperf agent`: each window's profiles, one per process group, read back by `go tool
//! pprof` with the fixture's exact fault count and bytes, its labels, and nothing lost
//! when the bound on stacks folds samples away.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::{Variant, fixture, have_go, memperf, require_perf, scratch, stderr};

/// The pages `fixtures/pagefault.c` touches through its named chain.
const PAGES: u64 = 3000;

/// Runs the agent on `pagefault PAGES` with `opts`, writing into `dir`.
fn agent_on_pagefault(dir: &Path, opts: &[&str]) -> Output {
    let o = memperf()
        .args(["agent", "--output"])
        .arg(dir)
        .args(opts)
        .arg("--")
        .arg(fixture("pagefault", Variant::Fp))
        .arg(PAGES.to_string())
        .output()
        .unwrap();
    assert!(o.status.success(), "agent failed: {}", stderr(&o));
    o
}

/// The profiles the agent wrote, in name (time) order.
fn profiles(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no profile in {}", dir.display());
    for f in &files {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.ends_with("-pagefault-fp.pb.gz"), "file {name}");
    }
    files
}

/// `go tool pprof ARGS FILES...` (several profiles are merged).
fn pprof(files: &[PathBuf], args: &[&str]) -> String {
    let o = std::process::Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .args(files)
        .output()
        .unwrap();
    assert!(o.status.success(), "go tool pprof {args:?}: {}", stderr(&o));
    String::from_utf8(o.stdout).unwrap()
}

/// The cumulative value of function `name` in a `-top -cum` table.
fn cum(top: &str, name: &str) -> String {
    top.lines()
        .find(|l| l.trim_end().ends_with(&format!(" {name}")))
        .and_then(|l| l.split_whitespace().nth(3))
        .unwrap_or_else(|| panic!("no {name} in:\n{top}"))
        .to_string()
}

/// The `Total samples = N` of a `-top` table.
fn total(top: &str) -> u64 {
    top.lines()
        .find_map(|l| l.split_once("Total samples = "))
        .and_then(|(_, n)| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no total in:\n{top}"))
}

/// The samples each window line of the agent's standard error counts, summed.
fn window_samples(err: &str) -> u64 {
    err.lines()
        .filter_map(|l| l.strip_prefix("memperf agent: window "))
        .filter_map(|l| l.split_once(": ")?.1.split(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[test]
fn the_agent_writes_the_fixtures_exact_faults_and_labels_per_window() {
    if !require_perf("memperf agent") || !have_go() {
        return;
    }
    let dir = scratch();
    let o = agent_on_pagefault(dir.path(), &["--interval", "0.2"]);
    let err = stderr(&o);
    let files = profiles(dir.path());
    let counts = pprof(&files, &["-top", "-cum", "-sample_index=page-faults"]);
    assert_eq!(cum(&counts, "touch_pages"), PAGES.to_string(), "{counts}");
    assert_eq!(cum(&counts, "pf_level1"), PAGES.to_string(), "{counts}");
    let bytes = pprof(
        &files,
        &["-top", "-cum", "-unit=B", "-sample_index=page-faults_bytes"],
    );
    let page = 4096;
    assert_eq!(cum(&bytes, "touch_pages"), format!("{}B", PAGES * page));
    // Every sample the windows counted is in the files.
    assert_eq!(total(&counts), window_samples(&err), "{err}");
    let tags = pprof(&files, &["-tags"]);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    for want in [
        "comm: Total",
        "pid: Total",
        ": pagefault-fp",
        "service_name: Total",
        "memperf_version: Total",
        host.trim(),
        kernel.trim(),
    ] {
        assert!(tags.contains(want), "no `{want}` in the tags:\n{tags}");
    }
}

#[test]
fn samples_past_the_bound_on_stacks_are_kept_and_counted() {
    if !require_perf("memperf agent") || !have_go() {
        return;
    }
    let dir = scratch();
    let o = agent_on_pagefault(dir.path(), &["--interval", "30", "--max-stacks", "4"]);
    let err = stderr(&o);
    let files = profiles(dir.path());
    let counts = pprof(&files, &["-top", "-sample_index=page-faults"]);
    // Every fault of the run is in the profile, most of them without their stack.
    assert!(total(&counts) >= PAGES, "{counts}");
    assert_eq!(total(&counts), window_samples(&err), "{err}");
    let folded: u64 = err
        .lines()
        .filter_map(|l| {
            l.split_once(" lost, ")?
                .1
                .split(' ')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    assert!(folded >= PAGES - 10, "{err}");
    let comments = pprof(&files, &["-comments"]);
    assert!(
        comments.contains(&format!("{folded} samples of this window past the bound")),
        "{comments}"
    );
}

#[test]
fn an_agent_without_a_destination_says_so() {
    let o = memperf()
        .args(["agent", "--interval", "1"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(stderr(&o).contains("--output DIR"), "{}", stderr(&o));
    let o = memperf()
        .args(["agent", "--output", "/tmp", "--interval", "0"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("--interval must be a positive number"),
        "{}",
        stderr(&o)
    );
}

/// Accepts HTTP requests on a loopback port, answers 200 and keeps each request's head.
fn recording_server() -> (u16, std::sync::mpsc::Receiver<String>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut head = String::new();
            let mut length = 0usize;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
                head.push_str(&line);
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                .unwrap();
            if tx.send(head).is_err() {
                return;
            }
        }
    });
    (port, rx)
}

#[test]
fn credentials_and_the_tenant_reach_the_backend_from_options_and_environment() {
    if !require_perf("memperf agent") {
        return;
    }
    let run = |opts: &[&str], env: &[(&str, &str)]| {
        let (port, heads) = recording_server();
        let o = memperf()
            .args(["agent", "--interval", "30", "--otlp"])
            .arg(format!("http://127.0.0.1:{port}"))
            .args(opts)
            .envs(env.iter().copied())
            .arg("--")
            .arg(fixture("pagefault", Variant::Fp))
            .arg("10")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let head = heads
            .recv_timeout(std::time::Duration::from_secs(10))
            .unwrap();
        assert!(
            head.starts_with("POST /v1development/profiles HTTP/1.1\r\n"),
            "{head}"
        );
        assert!(
            head.contains("Content-Type: application/x-protobuf\r\n"),
            "{head}"
        );
        head
    };
    let head = run(&["--bearer-token", "s3cret", "--tenant", "team-a"], &[]);
    assert!(head.contains("Authorization: Bearer s3cret\r\n"), "{head}");
    assert!(head.contains("X-Scope-OrgID: team-a\r\n"), "{head}");
    // `user:pass` in base64 is dXNlcjpwYXNz.
    let head = run(
        &[],
        &[("MEMPERF_BASIC_AUTH", "user:pass"), ("MEMPERF_TENANT", "b")],
    );
    assert!(
        head.contains("Authorization: Basic dXNlcjpwYXNz\r\n"),
        "{head}"
    );
    assert!(head.contains("X-Scope-OrgID: b\r\n"), "{head}");
}
