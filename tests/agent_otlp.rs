#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `memperf agent --otlp` against a real OpenTelemetry Collector (built by
//! `tests/otelcol/build.sh` from the collector's Go modules, with its OTLP receiver and file
//! exporter), over HTTP and over gRPC, each in the clear and over TLS (a certificate made by
//! `openssl` at test time): the profiles the collector decoded and wrote out carry the
//! fixture's stacks with exact counts and bytes, the labels and the sample types; a
//! collector stopped in the middle of a run and started again loses no window; a server
//! whose certificate no trusted CA signed is refused.

mod common;

use std::collections::BTreeSet;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Variant, built_by, fixture, free_port, memperf, require_perf, scratch, stderr};
use serde_json::Value;

/// A running collector writing the profiles it receives, as JSON lines, to `out`.
struct Collector {
    child: Child,
}

/// How the agent reaches the collector: the receiver's protocol and the URL's scheme.
/// The collector binary (tests/otelcol/build.sh), or `None` where the test skips.
fn collector() -> Option<PathBuf> {
    built_by("tests/otelcol/build.sh", "the collector")
}

#[derive(Clone, Copy, Debug)]
enum Protocol {
    Http,
    Grpc,
    Https,
    Grpcs,
}

impl Protocol {
    fn url(self, port: u16) -> String {
        let scheme = match self {
            Protocol::Http => "http",
            Protocol::Grpc => "grpc",
            Protocol::Https => "https",
            Protocol::Grpcs => "grpcs",
        };
        format!("{scheme}://127.0.0.1:{port}")
    }

    fn receiver(self) -> &'static str {
        match self {
            Protocol::Http | Protocol::Https => "http",
            Protocol::Grpc | Protocol::Grpcs => "grpc",
        }
    }

    fn tls(self) -> bool {
        matches!(self, Protocol::Https | Protocol::Grpcs)
    }

    /// The agent's options for this protocol: over TLS, the test's CA.
    fn agent_args(self, dir: &Path) -> Vec<String> {
        if self.tls() {
            vec![
                "--ca-file".to_string(),
                dir.join("ca.pem").display().to_string(),
            ]
        } else {
            Vec::new()
        }
    }
}

/// A CA (`ca.pem`) and a certificate it signed for 127.0.0.1 (`server.pem`, `server.key`)
/// in `dir`, made with the openssl command.
fn certificates(dir: &Path) {
    if dir.join("client.pem").exists() {
        return;
    }
    let openssl = |args: &[&str]| {
        let o = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "openssl {args:?}: {}", stderr(&o));
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &["-keyout", "ca.key", "-out", "ca.pem", "-days", "1"],
            &["-subj", "/CN=memperf test CA"],
        ]
        .concat(),
    );
    openssl(
        &[
            &["req"][..],
            &ec,
            &["-keyout", "server.key", "-out", "server.csr"],
            &["-subj", "/CN=127.0.0.1"],
        ]
        .concat(),
    );
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "1",
        "-extfile",
        "server.ext",
    ]);
    // The agent's own, for mutual TLS: `client.pem`, `client.key`.
    openssl(
        &[
            &["req"][..],
            &ec,
            &["-keyout", "client.key", "-out", "client.csr"],
            &["-subj", "/CN=memperf agent"],
        ]
        .concat(),
    );
    std::fs::write(
        dir.join("client.ext"),
        "extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "client.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "client.pem",
        "-days",
        "1",
        "-extfile",
        "client.ext",
    ]);
}

impl Collector {
    fn start(bin: &Path, dir: &Path, proto: Protocol, port: u16, out: &Path) -> Collector {
        Collector::start_as(bin, dir, proto, port, out, Trust::Server)
    }

    /// With `Trust::Mutual` its TLS receiver asks for a client certificate the test's CA
    /// signed (`client_ca_file`) and refuses a client without one.
    fn start_as(
        bin: &Path,
        dir: &Path,
        proto: Protocol,
        port: u16,
        out: &Path,
        trust: Trust,
    ) -> Collector {
        let config = dir.join(format!(
            "config-{}.yaml",
            out.file_stem().unwrap().to_string_lossy()
        ));
        let tls = if proto.tls() {
            certificates(dir);
            format!(
                "        tls:\n          cert_file: {}\n          key_file: {}\n{}",
                dir.join("server.pem").display(),
                dir.join("server.key").display(),
                match trust {
                    Trust::Server => String::new(),
                    Trust::Mutual => format!(
                        "          client_ca_file: {}\n",
                        dir.join("ca.pem").display()
                    ),
                }
            )
        } else {
            String::new()
        };
        std::fs::write(
            &config,
            format!(
                "receivers:\n  otlp:\n    protocols:\n      {}:\n        endpoint: 127.0.0.1:{port}\n{tls}\
                 exporters:\n  file:\n    path: {}\n    format: json\n\
                 service:\n  telemetry:\n    metrics:\n      level: none\n\
                 \x20 pipelines:\n    profiles:\n      receivers: [otlp]\n      exporters: [file]\n",
                proto.receiver(),
                out.display()
            ),
        )
        .unwrap();
        let child = Command::new(bin)
            .arg("--config")
            .arg(&config)
            .arg("--feature-gates=service.profilesSupport")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the collector did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Collector { child }
    }

    /// Stops it as a service manager would (SIGTERM): it writes out what it holds.
    fn stop(mut self) {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whom the collector's TLS receiver checks: the server only, or the client too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Trust {
    Server,
    Mutual,
}

/// An integer of OTLP JSON: int64 fields are strings, int32 numbers, zero left out.
fn int(v: Option<&Value>) -> i64 {
    match v {
        Some(Value::Number(n)) => n.as_i64().unwrap(),
        Some(Value::String(s)) => s.parse().unwrap(),
        _ => 0,
    }
}

fn list<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// What the collector wrote, added up.
#[derive(Default, Debug)]
struct Seen {
    /// (sample type, unit) → the values of samples whose stack holds `function`.
    in_function: std::collections::BTreeMap<(String, String), i64>,
    /// Resource attributes seen (key=value).
    resource: BTreeSet<String>,
    /// Sample attribute keys, and the values of `process.executable.name`.
    sample_keys: BTreeSet<String>,
    comms: BTreeSet<String>,
    /// Each profile's start time: one a window.
    windows: BTreeSet<i64>,
    /// Each window's `page-faults` count on stacks holding `function`, by its start time.
    faults_by_window: std::collections::BTreeMap<i64, i64>,
    /// Each window's `page-faults` count by the name of the stack's leaf function.
    leaves_by_window: std::collections::BTreeMap<i64, std::collections::BTreeMap<String, i64>>,
}

/// Reads the collector's JSON lines, adding up the samples whose stack holds `function`.
fn read_exported(files: &[PathBuf], function: &str) -> Seen {
    let mut seen = Seen::default();
    for f in files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let v: Value = serde_json::from_str(line).unwrap();
            add_request(&v, function, &mut seen);
        }
    }
    seen
}

fn add_request(v: &Value, function: &str, seen: &mut Seen) {
    let d = &v["dictionary"];
    let strings: Vec<&str> = list(d, "stringTable")
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    let s = |v: Option<&Value>| strings[int(v) as usize].to_string();
    let functions = list(d, "functionTable");
    let locations = list(d, "locationTable");
    let stacks = list(d, "stackTable");
    let attributes = list(d, "attributeTable");
    let holds = |stack: i64| {
        list(&stacks[stack as usize], "locationIndices")
            .iter()
            .any(|l| {
                list(&locations[int(Some(l)) as usize], "lines")
                    .iter()
                    .any(|line| {
                        let f = &functions[int(line.get("functionIndex")) as usize];
                        s(f.get("nameStrindex")) == function
                    })
            })
    };
    // A string is given as itself or by its index in the string table.
    let text = |v: &Value, plain: &str, index: &str| match v.get(plain).and_then(Value::as_str) {
        Some(t) => t.to_string(),
        None => s(v.get(index)),
    };
    for rp in list(v, "resourceProfiles") {
        for a in list(&rp["resource"], "attributes") {
            let key = text(a, "key", "keyStrindex");
            let value = text(&a["value"], "stringValue", "stringValueStrindex");
            seen.resource.insert(format!("{key}={value}"));
        }
        for sp in list(rp, "scopeProfiles") {
            for p in list(sp, "profiles") {
                let st = &p["sampleType"];
                let key = (s(st.get("typeStrindex")), s(st.get("unitStrindex")));
                seen.windows.insert(int(p.get("timeUnixNano")));
                for sample in list(p, "samples") {
                    for ai in list(sample, "attributeIndices") {
                        let a = &attributes[int(Some(ai)) as usize];
                        let k = s(a.get("keyStrindex"));
                        if k == "process.executable.name" {
                            let c = text(&a["value"], "stringValue", "stringValueStrindex");
                            seen.comms.insert(c);
                        }
                        seen.sample_keys.insert(k);
                    }
                    if key.0 == "page-faults" && key.1 == "count" {
                        let leaf = list(
                            &stacks[int(sample.get("stackIndex")) as usize],
                            "locationIndices",
                        )
                        .first()
                        .and_then(|l| list(&locations[int(Some(l)) as usize], "lines").first())
                        .map_or("(none)".to_string(), |line| {
                            let f = &functions[int(line.get("functionIndex")) as usize];
                            s(f.get("nameStrindex"))
                        });
                        let n: i64 = list(sample, "values").iter().map(|x| int(Some(x))).sum();
                        *seen
                            .leaves_by_window
                            .entry(int(p.get("timeUnixNano")))
                            .or_default()
                            .entry(leaf)
                            .or_insert(0) += n;
                    }
                    if holds(int(sample.get("stackIndex"))) {
                        let total: i64 = list(sample, "values").iter().map(|x| int(Some(x))).sum();
                        *seen.in_function.entry(key.clone()).or_insert(0) += total;
                        if key.0 == "page-faults" && key.1 == "count" {
                            *seen
                                .faults_by_window
                                .entry(int(p.get("timeUnixNano")))
                                .or_insert(0) += total;
                        }
                    }
                }
            }
        }
    }
}

/// Each window's leaf functions holding 50 faults or more.
fn big_leaves(seen: &Seen) -> Vec<(i64, Vec<(&str, i64)>)> {
    seen.leaves_by_window
        .iter()
        .map(|(w, leaves)| {
            let big = leaves
                .iter()
                .filter(|&(_, &n)| n >= 50)
                .map(|(f, &n)| (f.as_str(), n))
                .collect();
            (*w, big)
        })
        .collect()
}

fn page_faults(seen: &Seen) -> (i64, i64) {
    let get = |t: &str, u: &str| {
        seen.in_function
            .get(&(t.to_string(), u.to_string()))
            .copied()
            .unwrap_or(0)
    };
    (
        get("page-faults", "count"),
        get("page-faults_bytes", "bytes"),
    )
}

#[test]
fn the_collector_receives_the_fixtures_exact_stacks_labels_and_sample_types() {
    exact_stacks_labels_and_sample_types(Protocol::Http);
}

#[test]
fn over_grpc_the_collector_receives_the_fixtures_exact_stacks_labels_and_sample_types() {
    exact_stacks_labels_and_sample_types(Protocol::Grpc);
}

#[test]
fn over_https_the_collector_receives_the_fixtures_exact_stacks() {
    exact_stacks_labels_and_sample_types(Protocol::Https);
}

#[test]
fn over_grpc_and_tls_the_collector_receives_the_fixtures_exact_stacks() {
    exact_stacks_labels_and_sample_types(Protocol::Grpcs);
}

/// Without the test's CA the agent trusts the system's only, and sends nothing to a server
/// whose certificate the test's CA signed: each attempt fails, and the exit says why.
#[test]
fn a_server_no_trusted_ca_vouches_for_is_sent_nothing() {
    if !require_perf("memperf agent --otlp") {
        return;
    }
    let Some(bin) = collector() else {
        return;
    };
    let dir = scratch();
    let port = free_port();
    let out = dir.path().join("profiles.json");
    let collector = Collector::start(&bin, dir.path(), Protocol::Grpcs, port, &out);
    let o = memperf()
        .args(["agent", "--interval", "0.3", "--otlp"])
        .arg(Protocol::Grpcs.url(port))
        .arg("--")
        .arg(fixture("pagefault", Variant::Fp))
        .arg("100")
        .output()
        .unwrap();
    let err = stderr(&o);
    collector.stop();
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("1 not delivered at exit") && err.contains("UnknownIssuer"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap_or_default(), "");
}

/// A receiver that asks for a client certificate is sent nothing by an agent without one
/// (each attempt refused by the handshake, said at exit), and takes the fixture's exact
/// stacks from an agent that shows one its CA signed.
#[test]
fn over_mutual_tls_only_an_agent_with_a_client_certificate_is_taken() {
    mutual_tls(Protocol::Https);
}

#[test]
fn over_grpc_and_mutual_tls_only_an_agent_with_a_client_certificate_is_taken() {
    mutual_tls(Protocol::Grpcs);
}

fn mutual_tls(proto: Protocol) {
    if !require_perf("memperf agent --otlp") {
        return;
    }
    let Some(bin) = collector() else {
        return;
    };
    let dir = scratch();
    let port = free_port();
    let out = dir.path().join("refused.json");
    let collector = Collector::start_as(&bin, dir.path(), proto, port, &out, Trust::Mutual);
    let o = memperf()
        .args(["agent", "--interval", "0.3", "--otlp"])
        .arg(proto.url(port))
        .args(proto.agent_args(dir.path()))
        .arg("--")
        .arg(fixture("pagefault", Variant::Fp))
        .arg("100")
        .output()
        .unwrap();
    let err = stderr(&o);
    collector.stop();
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("not delivered at exit") && err.contains(CERTIFICATE_REQUIRED),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap_or_default(), "");
    exact_stacks_as(proto, Trust::Mutual);
}

/// What the agent says when a server that asked for a client certificate ends the
/// connection (with an alert the agent may read, CertificateRequired, or before it can: a
/// broken pipe, a closed stream).
const CERTIFICATE_REQUIRED: &str =
    "(the server asked for a client certificate, and none was given: --client-cert, --client-key)";

fn exact_stacks_labels_and_sample_types(proto: Protocol) {
    exact_stacks_as(proto, Trust::Server);
}

fn exact_stacks_as(proto: Protocol, trust: Trust) {
    if !require_perf("memperf agent --otlp") {
        return;
    }
    let Some(bin) = collector() else {
        return;
    };
    let dir = scratch();
    let port = free_port();
    let out = dir.path().join("profiles.json");
    let collector = Collector::start_as(&bin, dir.path(), proto, port, &out, trust);
    let pages = 3000;
    let client: Vec<PathBuf> = match trust {
        Trust::Server => Vec::new(),
        Trust::Mutual => ["--client-cert", "client.pem", "--client-key", "client.key"]
            .iter()
            .enumerate()
            .map(|(i, a)| {
                if i % 2 == 1 {
                    dir.path().join(a)
                } else {
                    PathBuf::from(a)
                }
            })
            .collect(),
    };
    let o = memperf()
        .args(["agent", "--interval", "0.3", "--otlp"])
        .arg(proto.url(port))
        .args(proto.agent_args(dir.path()))
        .args(&client)
        .arg("--")
        .arg(fixture("pagefault", Variant::Fp))
        .arg(pages.to_string())
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    collector.stop();
    let seen = read_exported(&[out], "touch_pages");
    assert_eq!(page_faults(&seen), (pages, pages * 4096), "{seen:?}\n{err}");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    for want in [
        "service.name=pagefault-fp".to_string(),
        format!("host.name={}", host.trim()),
        format!("os.version={}", kernel.trim()),
        "telemetry.sdk.name=memperf".to_string(),
    ] {
        assert!(
            seen.resource.contains(&want),
            "no {want} in {:?}",
            seen.resource
        );
    }
    assert!(seen.sample_keys.contains("process.pid"), "{seen:?}");
    assert!(seen.comms.contains("pagefault-fp"), "{seen:?}");
    // The backend is named by its URL, and no attempt failed or was refused.
    let url = format!("OTLP {}", proto.url(port));
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("failed attempts"))
        .collect();
    assert!(!lines.is_empty(), "{err}");
    for l in lines {
        assert!(l.contains(&url), "{l}");
        assert!(
            l.contains(" 0 failed attempts, 0 dropped, 0 refused"),
            "{l}"
        );
    }
    assert!(!err.contains("not delivered"), "{err}");
}

#[test]
fn a_collector_restarted_mid_run_loses_no_window() {
    restarted_mid_run(Protocol::Http);
}

#[test]
fn over_grpc_a_collector_restarted_mid_run_loses_no_window() {
    restarted_mid_run(Protocol::Grpc);
}

fn restarted_mid_run(proto: Protocol) {
    if !require_perf("memperf agent --otlp") {
        return;
    }
    let Some(bin) = collector() else {
        return;
    };
    let dir = scratch();
    let port = free_port();
    let first = dir.path().join("first.json");
    let second = dir.path().join("second.json");
    let spool = dir.path().join("spool");
    let collector = Collector::start(&bin, dir.path(), proto, port, &first);
    let (rounds, pages) = (8, 250);
    let script = format!(
        "for i in $(seq {rounds}); do {} {pages}; sleep 0.4; done",
        fixture("pagefault", Variant::Fp).display()
    );
    let agent = memperf()
        .args(["agent", "--interval", "0.4", "--spool"])
        .arg(&spool)
        .arg("--otlp")
        .arg(proto.url(port))
        .args(["--", "sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    collector.stop();
    // Windows end while no collector listens: they wait in the spool.
    std::thread::sleep(Duration::from_millis(1500));
    let collector = Collector::start(&bin, dir.path(), proto, port, &second);
    let o = agent.wait_with_output().unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    collector.stop();
    // Which collector wrote which window, and the fixture's faults in each, beside the
    // agent's window lines: a failure says whether a window never reached a collector or a
    // window reached one without some of the fixture's faults.
    let (one, two) = (
        read_exported(std::slice::from_ref(&first), "touch_pages"),
        read_exported(std::slice::from_ref(&second), "touch_pages"),
    );
    let story = format!(
        "touch_pages faults by window start, first collector: {:?}\nsecond collector: {:?}\n\
         leaf functions of the faults by window (50 or more): {:?} {:?}\nagent:\n{err}",
        one.faults_by_window,
        two.faults_by_window,
        big_leaves(&one),
        big_leaves(&two)
    );
    let seen = read_exported(&[first, second], "touch_pages");
    // The outage was seen, and every window with a profile reached the collector.
    assert!(
        err.lines()
            .any(|l| !l.contains(" 0 failed attempts") && l.contains("failed attempts")),
        "{story}"
    );
    let windows = err
        .lines()
        .filter(|l| l.starts_with("memperf agent: window ") && !l.contains(" 0 profiles"))
        .count();
    assert_eq!(seen.windows.len(), windows, "{story}");
    assert_eq!(
        page_faults(&seen),
        (rounds * pages, rounds * pages * 4096),
        "{story}"
    );
    assert_eq!(std::fs::read_dir(spool.join("otlp-0")).unwrap().count(), 0);
}

/// `--otel-memory` through the collector: OpenTelemetry's own memory sample types, with
/// `fixtures/otelmem.c`'s exact allocations and weighted bytes per function.
#[test]
fn the_collector_receives_the_otel_memory_contracts_sample_types() {
    if !require_perf("memperf agent --otlp --otel-memory") {
        return;
    }
    let Some(bin) = collector() else {
        return;
    };
    let dir = scratch();
    let port = free_port();
    let out = dir.path().join("profiles.json");
    let proto = Protocol::Http;
    let collector = Collector::start(&bin, dir.path(), proto, port, &out);
    let program = fixture("otelmem", Variant::Fp);
    let o = memperf()
        .args(["agent", "--interval", "0.2", "--call-graph", "fp", "--otlp"])
        .arg(proto.url(port))
        .arg("--otel-memory")
        .arg(&program)
        .arg("--")
        .arg(&program)
        .arg("2000")
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    collector.stop();
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    // The fixture's `FUNC allocs A weighted W live L live_weighted LW` line.
    let own = |func: &str, what: &str| -> i64 {
        let line = stdout.lines().find(|l| l.starts_with(func)).unwrap();
        let words: Vec<&str> = line.split_whitespace().collect();
        let at = words.iter().position(|w| *w == what).unwrap();
        words[at + 1].parse().unwrap()
    };
    for func in ["small_blocks", "big_blocks"] {
        let seen = read_exported(std::slice::from_ref(&out), func);
        let get = |t: &str, u: &str| {
            seen.in_function
                .get(&(t.to_string(), u.to_string()))
                .copied()
                .unwrap_or(0)
        };
        assert_eq!(
            (get("alloc_objects", "count"), get("alloc_space", "bytes")),
            (own(func, "allocs"), own(func, "weighted")),
            "{seen:?}\n{err}"
        );
        // In use in every window that ends while it holds its blocks: a multiple of them.
        let (objects, space) = (get("inuse_objects", "count"), get("inuse_space", "bytes"));
        assert!(objects > 0 && space > 0, "{seen:?}\n{err}");
        assert_eq!(
            space * own(func, "live"),
            objects * own(func, "live_weighted")
        );
    }
}
