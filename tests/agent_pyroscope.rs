#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `memperf agent --pyroscope` against Pyroscope's own push handler and pprof decoder
//! (`tests/pyroscope/`, built from `github.com/grafana/pyroscope/api` by
//! `tests/pyroscope/build.sh`), which checks each profile by the rules Pyroscope's
//! distributor applies and writes what it received: the fixture's exact faults and bytes on
//! its whole named chain, the series labels, the profile types, tenant and credentials.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Variant, built_by, fixture, free_port, memperf, require_perf, scratch, stderr};
use serde_json::Value;

/// A running push endpoint appending what it receives, as JSON lines, to `out`.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(bin: &Path, out: &Path) -> Server {
        let port = free_port();
        let child = Command::new(bin)
            .arg("-listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("-output")
            .arg(out)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "no server on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Server { child, port }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The fixture's chain, leaf first.
const CHAIN: [&str; 5] = ["touch_pages", "pf_level3", "pf_level2", "pf_level1", "main"];

/// What the server received, added up.
#[derive(Default, Debug)]
struct Received {
    /// Profile type → the values of samples whose stack holds the whole chain.
    on_chain: BTreeMap<String, i64>,
    /// Every series label seen (name=value), and the sample labels' keys.
    labels: BTreeSet<String>,
    sample_keys: BTreeSet<String>,
    comms: BTreeSet<String>,
    pids: BTreeSet<i64>,
    tenants: BTreeSet<String>,
    authorizations: BTreeSet<String>,
    profiles: usize,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

fn read_received(path: &Path) -> Received {
    let mut r = Received::default();
    let text = std::fs::read_to_string(path).unwrap_or_default();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap();
        r.profiles += 1;
        r.tenants.insert(v["tenant"].as_str().unwrap().to_string());
        r.authorizations
            .insert(v["authorization"].as_str().unwrap().to_string());
        for (k, val) in v["labels"].as_object().unwrap() {
            r.labels.insert(format!("{k}={}", val.as_str().unwrap()));
        }
        let types = strings(&v["profile_types"]);
        for s in v["samples"].as_array().into_iter().flatten() {
            let stack = strings(&s["stack"]);
            for (k, val) in s["labels"].as_object().unwrap() {
                r.sample_keys.insert(k.clone());
                if k == "comm" {
                    r.comms.insert(val.as_str().unwrap().to_string());
                }
            }
            for (k, val) in s["nums"].as_object().unwrap() {
                r.sample_keys.insert(k.clone());
                if k == "pid" {
                    r.pids.insert(val.as_i64().unwrap());
                }
            }
            if stack.windows(CHAIN.len()).any(|w| w == CHAIN) {
                for (t, x) in types.iter().zip(s["values"].as_array().unwrap()) {
                    *r.on_chain.entry(t.clone()).or_insert(0) += x.as_i64().unwrap();
                }
            }
        }
    }
    r
}

#[test]
fn pyroscope_receives_the_fixtures_exact_stacks_labels_and_profile_types() {
    if !require_perf("memperf agent --pyroscope") {
        return;
    }
    let Some(bin) = built_by("tests/pyroscope/build.sh", "the Pyroscope endpoint") else {
        return;
    };
    let dir = scratch();
    let out = dir.path().join("received.json");
    let server = Server::start(&bin, &out);
    let pages: i64 = 3000;
    let o = memperf()
        .args(["agent", "--interval", "0.3", "--tenant", "team-a"])
        .args(["--bearer-token", "s3cret", "--pyroscope"])
        .arg(format!("http://127.0.0.1:{}", server.port))
        .arg("--")
        .arg(fixture("pagefault", Variant::Fp))
        .arg(pages.to_string())
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    // Every request was taken: none refused, none left at exit.
    assert!(!err.contains("refused a request"), "{err}");
    assert!(!err.contains("not delivered at exit"), "{err}");
    drop(server);
    let r = read_received(&out);
    assert!(r.profiles > 0, "nothing received\n{err}");
    let on = |t: &str| r.on_chain.get(t).copied().unwrap_or(0);
    assert_eq!(
        (
            on("memory:page_faults:count:space:bytes"),
            on("memory:page_faults_bytes:bytes:space:bytes")
        ),
        (pages, pages * 4096),
        "{r:?}\n{err}"
    );
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    for want in [
        "__name__=memory".to_string(),
        "__delta__=false".to_string(),
        "service_name=pagefault-fp".to_string(),
        format!("host={}", host.trim()),
        format!("kernel={}", kernel.trim()),
        format!("memperf_version={}", env!("CARGO_PKG_VERSION")),
    ] {
        assert!(r.labels.contains(&want), "no {want} in {:?}", r.labels);
    }
    // The process stays on the samples; what the series says is not repeated there.
    assert_eq!(
        r.sample_keys,
        BTreeSet::from(["comm".to_string(), "pid".to_string()]),
        "{r:?}"
    );
    assert!(r.comms.contains("pagefault-fp"), "{r:?}");
    assert!(r.pids.iter().all(|&p| p > 0), "{r:?}");
    assert_eq!(r.tenants, BTreeSet::from(["team-a".to_string()]));
    assert_eq!(
        r.authorizations,
        BTreeSet::from(["Bearer s3cret".to_string()])
    );
}

#[test]
fn a_refused_push_is_counted_and_said() {
    if !require_perf("memperf agent --pyroscope") {
        return;
    }
    let Some(bin) = built_by("tests/pyroscope/build.sh", "the Pyroscope endpoint") else {
        return;
    };
    let dir = scratch();
    let out = dir.path().join("received.json");
    let server = Server::start(&bin, &out);
    // The procedure goes under the URL's path, where this server has nothing: 404.
    let o = memperf()
        .args(["agent", "--interval", "30", "--pyroscope"])
        .arg(format!("http://127.0.0.1:{}/elsewhere/", server.port))
        .arg("--")
        .arg(fixture("pagefault", Variant::Fp))
        .arg("10")
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "http://127.0.0.1:{}/elsewhere/push.v1.PusherService/Push refused a request: 404",
            server.port
        )),
        "{err}"
    );
    assert!(err.contains(" 1 refused"), "{err}");
    drop(server);
    assert_eq!(read_received(&out).profiles, 0);
}
