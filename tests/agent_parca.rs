#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `memperf agent --parca` against a ProfileStoreService made of Parca's own generated code
//! (`tests/parca/server.mjs`, installed by `tests/parca/build.sh` from npm: @parca/client's
//! service and messages served by grpc-js, each pprof decoded by pprof-format), which refuses
//! what Parca's server refuses: the series' labels, the fixture's stacks with exact counts
//! and bytes, the sample types and labels, the credentials as gRPC metadata, and no window
//! lost while the server answers UNAVAILABLE.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Variant, built_by, fixture, free_port, memperf, require_perf, scratch, stderr};
use serde_json::Value;

/// The server, writing a JSON line per request to `out`; the first `fail_first` calls are
/// answered UNAVAILABLE.
struct Server {
    child: Child,
}

impl Server {
    fn start(script: &Path, port: u16, out: &Path, fail_first: u32) -> Server {
        let child = Command::new("node")
            .arg(script)
            .arg(port.to_string())
            .arg(out)
            .arg(fail_first.to_string())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the server did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        Server { child }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the server received, added up.
#[derive(Default, Debug)]
struct Seen {
    requests: usize,
    /// The most series one request carried.
    most_series: usize,
    /// Each series label's values.
    labels: BTreeMap<String, BTreeSet<String>>,
    /// Each sample label's values.
    sample_labels: BTreeMap<String, BTreeSet<String>>,
    sample_types: BTreeSet<Vec<(String, String)>>,
    /// (sample type) → the values of stacks holding the function asked for.
    in_function: BTreeMap<String, i64>,
    metadata: BTreeMap<String, BTreeSet<String>>,
    refused: Vec<String>,
    /// A profile without its window's start or length.
    untimed: usize,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

fn read(out: &Path, function: &str) -> Seen {
    let mut seen = Seen::default();
    let text = std::fs::read_to_string(out).unwrap_or_default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap();
        if let Some(r) = v.get("refused") {
            seen.refused.push(r.to_string());
            continue;
        }
        seen.requests += 1;
        for (k, m) in v["metadata"].as_object().unwrap() {
            let m = m.as_str().unwrap().to_string();
            seen.metadata.entry(k.clone()).or_default().insert(m);
        }
        let series = v["series"].as_array().unwrap();
        seen.most_series = seen.most_series.max(series.len());
        for s in series {
            for (k, l) in s["labels"].as_object().unwrap() {
                let l = l.as_str().unwrap().to_string();
                seen.labels.entry(k.clone()).or_default().insert(l);
            }
            for p in s["profiles"].as_array().unwrap() {
                add_profile(p, function, &mut seen);
            }
        }
    }
    seen
}

fn add_profile(p: &Value, function: &str, seen: &mut Seen) {
    let types: Vec<(String, String)> = p["sample_types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let t = strings(t);
            (t[0].clone(), t[1].clone())
        })
        .collect();
    if p["time_nanos"] == "0" || p["duration_nanos"] == "0" {
        seen.untimed += 1;
    }
    for (k, vs) in p["sample_labels"].as_object().unwrap() {
        seen.sample_labels
            .entry(k.clone())
            .or_default()
            .extend(strings(vs));
    }
    for (stack, values) in p["stacks"].as_object().unwrap() {
        if !stack.split(';').any(|f| f == function) {
            continue;
        }
        for ((ty, _), v) in types.iter().zip(values.as_array().unwrap()) {
            *seen.in_function.entry(ty.clone()).or_insert(0) += v.as_i64().unwrap();
        }
    }
    seen.sample_types.insert(types);
}

/// `pagefault-fp PAGES` after a shell's own start, so that a window has two process groups
/// (the shell, the fixture), each profile pruned of the other's frames.
fn fixture_script(pages: i64, then_sleep: &str) -> String {
    format!(
        "{} {pages}; sleep {then_sleep}",
        fixture("pagefault", Variant::Fp).display()
    )
}

#[test]
fn parca_receives_each_groups_pprof_with_exact_stacks_labels_and_sample_types() {
    if !require_perf("memperf agent --parca") {
        return;
    }
    let Some(script) = built_by("tests/parca/build.sh", "the Parca test server") else {
        return;
    };
    let dir = scratch();
    let port = free_port();
    let out = dir.path().join("received.jsonl");
    let server = Server::start(&script, port, &out, 0);
    let pages: i64 = 3000;
    let o = memperf()
        .args(["agent", "--interval", "1", "--parca"])
        .arg(format!("grpc://127.0.0.1:{port}"))
        .args(["--bearer-token", "t0ken", "--tenant", "team-a"])
        .args(["--", "sh", "-c", &fixture_script(pages, "0")])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    drop(server);
    let seen = read(&out, "touch_pages");
    assert!(seen.refused.is_empty(), "{seen:?}\n{err}");
    assert_eq!(
        (
            seen.in_function.get("page-faults"),
            seen.in_function.get("page-faults_bytes")
        ),
        (Some(&pages), Some(&(pages * 4096))),
        "{seen:?}\n{err}"
    );
    assert!(seen.most_series >= 2, "no window had two groups: {seen:?}");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let one = |v: &str| BTreeSet::from([v.to_string()]);
    assert_eq!(seen.labels["__name__"], one("memory"), "{seen:?}");
    assert_eq!(seen.labels["host"], one(host.trim()), "{seen:?}");
    assert_eq!(seen.labels["kernel"], one(kernel.trim()), "{seen:?}");
    assert!(
        seen.labels["service_name"].contains("pagefault-fp"),
        "{seen:?}"
    );
    assert!(seen.labels.contains_key("memperf_version"), "{seen:?}");
    // The samples keep their process; the series' labels are not repeated in them.
    let keys: Vec<&str> = seen.sample_labels.keys().map(String::as_str).collect();
    assert_eq!(keys, ["comm", "pid"], "{seen:?}");
    assert!(seen.sample_labels["comm"].contains("pagefault-fp"));
    let types = |t: &[(&str, &str)]| {
        t.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    assert_eq!(
        seen.sample_types,
        BTreeSet::from([types(&[
            ("page-faults", "count"),
            ("page-faults_bytes", "bytes")
        ])]),
    );
    assert_eq!(seen.untimed, 0, "{seen:?}");
    assert_eq!(seen.metadata["authorization"], one("Bearer t0ken"));
    assert_eq!(seen.metadata["x-scope-orgid"], one("team-a"));
    let url = format!("Parca grpc://127.0.0.1:{port}");
    for l in err.lines().filter(|l| l.contains("failed attempts")) {
        assert!(l.contains(&url), "{l}");
        assert!(
            l.contains(" 0 failed attempts, 0 dropped, 0 refused"),
            "{l}"
        );
    }
    assert!(!err.contains("not delivered"), "{err}");
}

#[test]
fn a_parca_server_answering_unavailable_loses_no_window() {
    if !require_perf("memperf agent --parca") {
        return;
    }
    let Some(script) = built_by("tests/parca/build.sh", "the Parca test server") else {
        return;
    };
    let dir = scratch();
    let port = free_port();
    let out = dir.path().join("received.jsonl");
    let server = Server::start(&script, port, &out, 2);
    let pages: i64 = 2000;
    let o = memperf()
        .args(["agent", "--interval", "0.3", "--parca"])
        .arg(format!("http://127.0.0.1:{port}"))
        .args(["--", "sh", "-c", &fixture_script(pages, "1.5")])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    drop(server);
    let seen = read(&out, "touch_pages");
    assert!(seen.refused.is_empty(), "{seen:?}\n{err}");
    assert_eq!(seen.in_function.get("page-faults"), Some(&pages), "{err}");
    // Both UNAVAILABLE answers were retried, none refused, and every window with a
    // profile arrived.
    let last = err
        .lines()
        .rfind(|l| l.contains("failed attempts"))
        .unwrap();
    assert!(
        last.contains(" 2 failed attempts, 0 dropped, 0 refused"),
        "{err}"
    );
    let windows = err
        .lines()
        .filter(|l| l.starts_with("memperf agent: window ") && !l.contains(" 0 profiles"))
        .count();
    assert_eq!(seen.requests, windows, "{err}");
}
