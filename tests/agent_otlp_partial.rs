#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `memperf agent --otlp` reading OTLP's partial success: a receiver may take a request and
//! answer `ExportProfilesServiceResponse { partial_success { rejected_profiles,
//! error_message } }` (the OTLP specification's "Partial Success"). The OpenTelemetry
//! Collector's receiver never answers one of its own, so a small server here does, over
//! HTTP, as the specification words it (the response's protobuf written out by hand: field 1,
//! a message of field 1 varint and field 2 string). The agent must count those requests as
//! taken in part, with the profiles rejected, never as sent, and say each distinct message
//! once.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use common::{Variant, fixture, memperf, require_perf, stderr};

/// `ExportProfilesServiceResponse { partial_success { rejected_profiles: rejected,
/// error_message: message } }`, encoded.
fn partial_success(rejected: u8, message: &str) -> Vec<u8> {
    let mut inner = vec![0x08, rejected, 0x12, message.len() as u8];
    inner.extend_from_slice(message.as_bytes());
    let mut out = vec![0x0a, inner.len() as u8];
    out.extend_from_slice(&inner);
    out
}

/// A server answering every OTLP/HTTP request with `answer`; counts the requests.
fn serve(answer: Vec<u8>) -> (u16, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicU64::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut length = 0usize;
            let mut path = String::new();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                if path.is_empty() {
                    path = line.clone();
                }
                let lower = line.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
                if line == "\r\n" {
                    break;
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            assert!(path.starts_with("POST /v1development/profiles "), "{path}");
            seen.fetch_add(1, Ordering::SeqCst);
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n",
                answer.len()
            );
            conn.write_all(head.as_bytes()).unwrap();
            conn.write_all(&answer).unwrap();
        }
    });
    (port, count)
}

#[test]
fn a_partial_success_counts_the_rejected_profiles_and_says_its_message_once() {
    if !require_perf("memperf agent --otlp") {
        return;
    }
    const WHY: &str = "profile too old: outside the accepted window";
    let (port, requests) = serve(partial_success(1, WHY));
    let program = fixture("pagefault", Variant::Fp);
    // Two runs apart, so that at least two windows carry a profile.
    let script = format!("{0} 200; sleep 0.5; {0} 200", program.display());
    let o = memperf()
        .args(["agent", "--interval", "0.2", "--otlp"])
        .arg(format!("http://127.0.0.1:{port}"))
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    let n = requests.load(Ordering::SeqCst);
    assert!(n >= 2, "{n} requests: {err}");
    assert_eq!(
        err.matches(&format!("answered with a partial success: {WHY}"))
            .count(),
        1,
        "{err}"
    );
    // Each request the server rejected a profile of is taken in part, none is sent.
    assert!(
        err.contains(&format!(
            "0 requests sent, {n} taken in part ({n} profiles rejected), 0 not delivered"
        )),
        "{n} requests: {err}"
    );
}

#[test]
fn a_partial_success_without_rejected_profiles_is_a_warning_and_sent() {
    if !require_perf("memperf agent --otlp") {
        return;
    }
    const WHY: &str = "sample types unknown to this backend were dropped";
    let (port, requests) = serve(partial_success(0, WHY));
    let o = memperf()
        .args(["agent", "--interval", "30", "--otlp"])
        .arg(format!("http://127.0.0.1:{port}"))
        .arg("--")
        .arg(fixture("pagefault", Variant::Fp))
        .arg("100")
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(requests.load(Ordering::SeqCst), 1, "{err}");
    assert_eq!(
        err.matches(&format!("answered with a partial success: {WHY}"))
            .count(),
        1,
        "{err}"
    );
    // Sent: the exit has nothing to say of it.
    assert!(!err.contains("taken in part"), "{err}");
}
