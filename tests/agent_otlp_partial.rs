#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `memperf agent --otlp` reading OTLP's partial success: a receiver may take a request and
//! answer `ExportProfilesServiceResponse { partial_success { rejected_profiles,
//! error_message } }` (the OTLP specification's "Partial Success"). The OpenTelemetry
//! Collector's receiver never answers one of its own, so a small server here does, over
//! HTTP and over gRPC (h2, as memperf's own client uses it), as the specification words it (the response's protobuf written out by hand: field 1,
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

/// A gRPC server (cleartext HTTP/2) answering every call with status OK and `answer` as its
/// message; counts the calls.
fn serve_grpc(answer: Vec<u8>) -> (u16, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicU64::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            while let Ok((socket, _)) = listener.accept().await {
                let (answer, seen) = (answer.clone(), seen.clone());
                tokio::spawn(async move {
                    let Ok(mut conn) = h2::server::handshake(socket).await else {
                        return;
                    };
                    while let Some(Ok((request, respond))) = conn.accept().await {
                        tokio::spawn(answer_call(request, respond, answer.clone(), seen.clone()));
                    }
                });
            }
        });
    });
    (port, count)
}

/// One call: its message read whole, then `answer` framed, then grpc-status 0.
async fn answer_call(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<bytes::Bytes>,
    answer: Vec<u8>,
    seen: Arc<AtomicU64>,
) {
    assert_eq!(
        request.uri().path(),
        "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export"
    );
    let mut body = request.into_body();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    seen.fetch_add(1, Ordering::SeqCst);
    let head = http::Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .body(())
        .unwrap();
    let mut send = respond.send_response(head, false).unwrap();
    let mut framed = vec![0];
    framed.extend_from_slice(&(answer.len() as u32).to_be_bytes());
    framed.extend_from_slice(&answer);
    send.send_data(framed.into(), false).unwrap();
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    send.send_trailers(trailers).unwrap();
}

#[test]
fn over_grpc_a_partial_success_counts_the_rejected_profiles() {
    if !require_perf("memperf agent --otlp") {
        return;
    }
    const WHY: &str = "2 of the request's profiles carry no sample";
    let (port, calls) = serve_grpc(partial_success(2, WHY));
    let o = memperf()
        .args(["agent", "--interval", "30", "--otlp"])
        .arg(format!("grpc://127.0.0.1:{port}"))
        .arg("--")
        .arg(fixture("pagefault", Variant::Fp))
        .arg("100")
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "{err}");
    assert_eq!(
        err.matches(&format!("answered with a partial success: {WHY}"))
            .count(),
        1,
        "{err}"
    );
    assert!(
        err.contains("0 requests sent, 1 taken in part (2 profiles rejected), 0 not delivered"),
        "{err}"
    );
}
