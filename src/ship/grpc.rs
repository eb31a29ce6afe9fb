//! gRPC unary calls over HTTP/2, cleartext (h2c with prior knowledge, as gRPC servers take
//! it on a plain port) or over TLS (`ship::tls`, `h2` offered by ALPN): `h2` on a
//! current-thread `tokio` runtime that exists only in the
//! shipping thread and runs only while a call is under way, so the recorder never meets
//! async code. One connection is kept between calls; a kept one that fails before the
//! server answered (it closed it while idle) is replaced once, at once.

use std::future::Future;
use std::io;
use std::time::Duration;

use anyhow::{Result, bail};
use bytes::Bytes;
use h2::client::SendRequest;
use http::{HeaderMap, HeaderName, HeaderValue};

use super::http::Endpoint;
use super::tls::Tls;

/// Whether `url` names a gRPC endpoint (`grpc://HOST[:PORT]`, `grpcs://` over TLS).
pub fn is_grpc(url: &str) -> bool {
    url.starts_with("grpc://") || url.starts_with("grpcs://")
}

/// The host and port of `grpc://HOST[:PORT]` or, over TLS, `grpcs://` (`default_port` if
/// none); `http://` and `https://` too when `http_is_grpc` (a backend that speaks gRPC only,
/// whose users give it an http URL). A path is refused: a gRPC method's path is the
/// service's, not the URL's.
pub fn endpoint(url: &str, default_port: u16, http_is_grpc: bool) -> Result<Endpoint> {
    let (rest, tls) = match url.split_once("://") {
        Some(("grpc", rest)) => (rest, false),
        Some(("grpcs", rest)) => (rest, true),
        Some(("http", rest)) if http_is_grpc => (rest, false),
        Some(("https", rest)) if http_is_grpc => (rest, true),
        Some((scheme, _)) => {
            bail!("`{url}`: unsupported scheme `{scheme}` (use grpc:// or grpcs://)")
        }
        None => bail!("`{url}` is no URL: give grpc://HOST:PORT"),
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains('/') {
        bail!("`{url}`: a gRPC URL takes no path (the service names the method)");
    }
    let has_port = authority.starts_with('[') && authority.contains("]:")
        || !authority.starts_with('[') && authority.contains(':');
    let with_port = if has_port {
        format!("http://{authority}")
    } else {
        format!("http://{authority}:{default_port}")
    };
    let ep = Endpoint::parse(&with_port, "/").map_err(|e| {
        anyhow::anyhow!(
            "{}",
            e.to_string()
                .replace(&with_port, url)
                .replace("http://", "grpc://")
        )
    })?;
    Ok(Endpoint { tls, ..ep })
}

/// `host:port`, an IPv6 address in brackets.
fn authority(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `grpc[s]://host:port`, for messages.
pub fn url(ep: &Endpoint) -> String {
    let scheme = if ep.tls { "grpcs" } else { "grpc" };
    format!("{scheme}://{}", authority(&ep.host, ep.port))
}

/// How a call ended, when the server answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// grpc-status 0, with the response's message (empty when it sent none).
    Ok(Vec<u8>),
    /// Another grpc-status, with its grpc-message.
    Status(u32, String),
    /// No gRPC answer: an HTTP status other than 200 (a proxy's, or no gRPC server).
    Http(u16, String),
}

/// The gRPC status codes a client may retry (the OTLP specification's list, with
/// RESOURCE_EXHAUSTED as HTTP's 429): CANCELLED, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED,
/// ABORTED, OUT_OF_RANGE, UNAVAILABLE, DATA_LOSS.
pub fn retryable(code: u32) -> bool {
    matches!(code, 1 | 4 | 8 | 10 | 11 | 14 | 15)
}

/// A status code's name, for messages.
pub fn code_name(code: u32) -> &'static str {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    NAMES
        .get(code as usize)
        .copied()
        .unwrap_or("(unknown code)")
}

/// A connection to one gRPC server, made when first needed.
pub struct Channel {
    host: String,
    port: u16,
    /// TLS's configuration, for a `grpcs` endpoint.
    tls: Option<Tls>,
    runtime: Option<tokio::runtime::Runtime>,
    conn: Option<SendRequest<Bytes>>,
}

/// What a failed exchange had done: nothing the server could have taken (the kept
/// connection was closed), or maybe something.
enum Fail {
    Unsent(io::Error),
    Sent(io::Error),
}

impl Fail {
    fn into_io(self) -> io::Error {
        match self {
            Fail::Unsent(e) | Fail::Sent(e) => e,
        }
    }
}

/// The most of a response's message read (its content is not used).
const MAX_RESPONSE: usize = 64 << 10;

impl Channel {
    /// A channel to `ep`, over TLS with `tls` (which a `grpcs` endpoint needs).
    pub fn new(ep: &Endpoint, tls: Option<Tls>) -> Channel {
        Channel {
            host: ep.host.clone(),
            port: ep.port,
            tls: if ep.tls { tls } else { None },
            runtime: None,
            conn: None,
        }
    }

    /// `grpc[s]://host:port`, for messages.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "grpcs" } else { "grpc" };
        format!("{scheme}://{}", authority(&self.host, self.port))
    }

    /// Calls the unary method at `path` (`/package.Service/Method`) with the encoded
    /// `message` and `headers` (metadata), the whole call bounded by `timeout`.
    pub fn unary(
        &mut self,
        path: &str,
        headers: &[(String, String)],
        message: &[u8],
        timeout: Duration,
    ) -> io::Result<Answer> {
        let head = self.head(path, headers, timeout)?;
        let body = frame(message);
        if self.runtime.is_none() {
            self.runtime = Some(
                tokio::runtime::Builder::new_current_thread()
                    .enable_io()
                    .enable_time()
                    .build()?,
            );
        }
        let Some(rt) = &self.runtime else {
            return Err(io::Error::other("no runtime"));
        };
        let kept = self.conn.take();
        let (host, port, tls) = (self.host.clone(), self.port, self.tls.clone());
        let call = async move {
            if let Some(c) = kept {
                match exchange(c, &head, body.clone()).await {
                    Err(Fail::Unsent(_)) => {}
                    done => return done.map_err(Fail::into_io),
                }
            }
            let c = connect(&host, port, tls.as_ref()).await?;
            exchange(c, &head, body).await.map_err(Fail::into_io)
        };
        let done = rt.block_on(bounded(timeout, call));
        match done {
            Ok((answer, conn)) => {
                self.conn = Some(conn);
                Ok(answer)
            }
            Err(e) => Err(e),
        }
    }

    /// The request's pseudo-headers and metadata.
    fn head(
        &self,
        path: &str,
        headers: &[(String, String)],
        timeout: Duration,
    ) -> io::Result<Head> {
        let authority = authority(&self.host, self.port);
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let uri: http::Uri = format!("{scheme}://{authority}{path}")
            .parse()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{e}")))?;
        let mut map = HeaderMap::new();
        let bad = |e: String| io::Error::new(io::ErrorKind::InvalidInput, e);
        for (k, v) in headers {
            // A request's content type is gRPC's own, whatever the spooled request says.
            if k.eq_ignore_ascii_case("content-type") {
                continue;
            }
            let name = HeaderName::from_bytes(k.to_ascii_lowercase().as_bytes())
                .map_err(|e| bad(format!("header `{k}`: {e}")))?;
            let value = HeaderValue::from_str(v).map_err(|e| bad(format!("header `{k}`: {e}")))?;
            map.append(name, value);
        }
        let fixed = [
            ("content-type", "application/grpc".to_string()),
            ("te", "trailers".to_string()),
            (
                "user-agent",
                format!("memperf/{} grpc-h2", env!("CARGO_PKG_VERSION")),
            ),
            ("grpc-timeout", format!("{}m", timeout.as_millis().max(1))),
        ];
        for (k, v) in fixed {
            let value = HeaderValue::from_str(&v).map_err(|e| bad(e.to_string()))?;
            map.insert(HeaderName::from_static(k), value);
        }
        Ok(Head { uri, headers: map })
    }
}

/// What every attempt of one call sends before its body.
struct Head {
    uri: http::Uri,
    headers: HeaderMap,
}

impl Head {
    fn request(&self) -> http::Request<()> {
        let mut r = http::Request::new(());
        *r.method_mut() = http::Method::POST;
        *r.uri_mut() = self.uri.clone();
        *r.headers_mut() = self.headers.clone();
        r
    }
}

/// A message as gRPC frames it: uncompressed, its length in four big-endian bytes.
fn frame(message: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(message.len() + 5);
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    Bytes::from(out)
}

/// The message of a response's first frame (none where it is compressed, which memperf never
/// asks for, or cut short).
fn unframe(data: &[u8]) -> Vec<u8> {
    match data {
        [0, a, b, c, d, message @ ..] => message
            .get(..u32::from_be_bytes([*a, *b, *c, *d]) as usize)
            .map_or_else(Vec::new, <[u8]>::to_vec),
        _ => Vec::new(),
    }
}

async fn bounded<T>(timeout: Duration, f: impl Future<Output = io::Result<T>>) -> io::Result<T> {
    match tokio::time::timeout(timeout, f).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no answer in {} s", timeout.as_secs_f64()),
        )),
    }
}

fn h2_io(e: h2::Error) -> io::Error {
    if e.is_io() {
        e.into_io()
            .unwrap_or_else(|| io::Error::other("HTTP/2 I/O error"))
    } else {
        io::Error::other(format!("HTTP/2: {e}"))
    }
}

/// A new HTTP/2 connection, over TLS with `tls`, its driver spawned on the runtime (it
/// runs while a call does).
async fn connect(host: &str, port: u16, tls: Option<&Tls>) -> io::Result<SendRequest<Bytes>> {
    let tcp = tokio::net::TcpStream::connect((host, port)).await?;
    tcp.set_nodelay(true)?;
    match tls {
        None => handshake(tcp).await,
        Some(tls) => {
            let stream = tls.h2(host, tcp).await?;
            if stream.get_ref().1.alpn_protocol() != Some(b"h2") {
                return Err(io::Error::other(
                    "the server did not agree to HTTP/2 (ALPN h2) over TLS: no gRPC there?",
                ));
            }
            handshake(stream).await
        }
    }
}

async fn handshake<T>(io: T) -> io::Result<SendRequest<Bytes>>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (send, conn) = h2::client::handshake(io).await.map_err(h2_io)?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(send)
}

/// One call on `send`: the request, its body within the server's flow control, then the
/// response's headers, message and trailers.
async fn exchange(
    send: SendRequest<Bytes>,
    head: &Head,
    mut body: Bytes,
) -> Result<(Answer, SendRequest<Bytes>), Fail> {
    let unsent = |e: h2::Error| Fail::Unsent(h2_io(e));
    let mut send = send.ready().await.map_err(unsent)?;
    let (response, mut stream) = send.send_request(head.request(), false).map_err(unsent)?;
    // Until the server answers, a failure of a kept connection is taken as its having
    // been closed while idle: the request is tried once on a new one.
    let early = |e: h2::Error| Fail::Unsent(h2_io(e));
    stream.reserve_capacity(body.len());
    while !body.is_empty() {
        let n = match std::future::poll_fn(|cx| stream.poll_capacity(cx)).await {
            Some(Ok(n)) => n,
            Some(Err(e)) => return Err(early(e)),
            None => {
                return Err(Fail::Unsent(io::Error::other(
                    "the stream closed before the request was sent",
                )));
            }
        };
        if n == 0 {
            continue;
        }
        let chunk = body.split_to(n.min(body.len()));
        stream.send_data(chunk, body.is_empty()).map_err(early)?;
    }
    let response = response.await.map_err(early)?;
    let sent = |e: h2::Error| Fail::Sent(h2_io(e));
    let (parts, mut recv) = response.into_parts();
    let mut data = Vec::new();
    while let Some(chunk) = recv.data().await {
        let chunk = chunk.map_err(sent)?;
        let _ = recv.flow_control().release_capacity(chunk.len());
        if data.len() < MAX_RESPONSE {
            data.extend_from_slice(&chunk);
        }
    }
    let trailers = recv.trailers().await.map_err(sent)?;
    let answer = answer(
        parts.status.as_u16(),
        &parts.headers,
        trailers.as_ref(),
        &data,
    )
    .map_err(Fail::Sent)?;
    Ok((answer, send))
}

/// The call's outcome from the response's status, headers and trailers (a response with
/// no message carries grpc-status in its headers: "Trailers-Only").
fn answer(
    status: u16,
    headers: &HeaderMap,
    trailers: Option<&HeaderMap>,
    body: &[u8],
) -> io::Result<Answer> {
    if status != 200 {
        let text = String::from_utf8_lossy(body);
        let first = text
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(200)
            .collect();
        return Ok(Answer::Http(status, first));
    }
    let from = |m: &HeaderMap| m.get("grpc-status").map(|v| (v.clone(), m.clone()));
    let Some((code, meta)) = trailers.and_then(from).or_else(|| from(headers)) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the response carries no grpc-status (no gRPC server there?)",
        ));
    };
    let code: u32 = code
        .to_str()
        .ok()
        .and_then(|c| c.trim().parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "a bad grpc-status"))?;
    if code == 0 {
        return Ok(Answer::Ok(unframe(body)));
    }
    let message = meta
        .get("grpc-message")
        .map(|m| percent_decode(m.as_bytes()))
        .unwrap_or_default();
    Ok(Answer::Status(code, message))
}

/// grpc-message's percent-encoding undone (invalid escapes kept as they are).
fn percent_decode(b: &[u8]) -> String {
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%'
            && let (Some(h), Some(l)) = (
                b.get(i + 1).copied().and_then(hex),
                b.get(i + 2).copied().and_then(hex),
            )
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn grpc_urls_give_host_and_port() {
        let e = endpoint("grpc://127.0.0.1", 4317, false).unwrap();
        assert_eq!((e.host.as_str(), e.port), ("127.0.0.1", 4317));
        let e = endpoint("grpc://collector:9000/", 4317, false).unwrap();
        assert_eq!((e.host.as_str(), e.port), ("collector", 9000));
        let e = endpoint("grpc://[::1]:7", 4317, false).unwrap();
        assert_eq!((e.host.as_str(), e.port), ("::1", 7));
        let e = endpoint("grpc://[::1]", 4317, false).unwrap();
        assert_eq!((e.host.as_str(), e.port), ("::1", 4317));
        let e = endpoint("http://parca:7070", 7070, true).unwrap();
        assert_eq!((e.host.as_str(), e.port, e.tls), ("parca", 7070, false));
        let e = endpoint("https://parca", 7070, true).unwrap();
        assert_eq!(
            (e.port, e.tls, url(&e).as_str()),
            (7070, true, "grpcs://parca:7070")
        );
        assert!(endpoint("grpcs://h:1", 4317, false).unwrap().tls);
        for bad in [
            "http://h:1",
            "grpc://h:1/v1/profiles",
            "grpc://",
            "grpc://h:port",
            "grpc://u@h",
            "h:4317",
        ] {
            assert!(endpoint(bad, 4317, false).is_err(), "{bad}");
        }
        assert!(endpoint("https://h", 1, false).is_err());
        let port = endpoint("grpc://h:x", 1, false).unwrap_err().to_string();
        assert!(port.contains("grpc://h:x"), "{port}");
    }

    #[test]
    fn messages_are_framed_with_their_length() {
        assert_eq!(&frame(b"abc")[..], b"\x00\x00\x00\x00\x03abc");
        assert_eq!(frame(&[7; 70000]).len(), 70005);
        assert_eq!(&frame(&[7; 70000])[..5], &[0, 0, 1, 0x11, 0x70]);
    }

    #[test]
    fn answers_come_from_trailers_or_headers() {
        let mut t = HeaderMap::new();
        t.insert("grpc-status", HeaderValue::from_static("0"));
        let h = HeaderMap::new();
        assert_eq!(
            answer(200, &h, Some(&t), b"").unwrap(),
            Answer::Ok(Vec::new())
        );
        assert_eq!(
            answer(200, &h, Some(&t), &frame(b"\x0a\x02\x08\x01")).unwrap(),
            Answer::Ok(b"\x0a\x02\x08\x01".to_vec())
        );
        assert_eq!(
            answer(200, &h, Some(&t), b"\x00\x00\x00\x00\x09cut").unwrap(),
            Answer::Ok(Vec::new())
        );
        let mut only = HeaderMap::new();
        only.insert("grpc-status", HeaderValue::from_static("3"));
        only.insert(
            "grpc-message",
            HeaderValue::from_static("bad%20profile%3A 100%"),
        );
        assert_eq!(
            answer(200, &only, None, b"").unwrap(),
            Answer::Status(3, "bad profile: 100%".into())
        );
        assert_eq!(
            answer(503, &h, None, b"overloaded\nmore").unwrap(),
            Answer::Http(503, "overloaded".into())
        );
        assert!(answer(200, &h, None, b"").is_err());
        assert!(retryable(14) && retryable(8) && !retryable(3) && !retryable(16));
        assert_eq!(code_name(14), "UNAVAILABLE");
    }
}
