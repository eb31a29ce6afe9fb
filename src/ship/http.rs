//! A small HTTP/1.1 client over `std::net::TcpStream`: one POST per connection, bounded in
//! time, for pushing profiles to a backend; over TLS (`ship::tls`) for an `https` URL.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use anyhow::{Result, bail};

use super::tls::Tls;

/// Where requests go: `http[s]://HOST[:PORT][/PATH]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    /// The request path, from `/`.
    pub path: String,
    /// Whether the connection is TLS (`https`).
    pub tls: bool,
}

impl Endpoint {
    /// Parses `url`; a URL without a path (or `/`) gets `default_path`.
    pub fn parse(url: &str, default_path: &str) -> Result<Endpoint> {
        let (rest, tls) = match url.split_once("://") {
            Some(("http", rest)) => (rest, false),
            Some(("https", rest)) => (rest, true),
            Some((scheme, _)) => {
                bail!("`{url}`: unsupported scheme `{scheme}` (use http:// or https://)")
            }
            None => bail!("`{url}` is no URL: give http://HOST:PORT"),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.contains('@') {
            bail!("`{url}`: give credentials with --bearer-token or --basic-auth, not in the URL");
        }
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => {
                let port = p
                    .parse::<u16>()
                    .map_err(|_| anyhow::anyhow!("`{url}`: bad port `{p}`"))?;
                (h, port)
            }
            _ => (authority, if tls { 443 } else { 80 }),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            bail!("`{url}` has no host");
        }
        let path = if path.is_empty() || path == "/" {
            default_path.to_string()
        } else {
            path.to_string()
        };
        Ok(Endpoint {
            host: host.to_string(),
            port,
            path,
            tls,
        })
    }

    /// `http[s]://host:port/path`, for messages.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}:{}{}", self.host, self.port, self.path)
    }
}

/// A response's status and the start of its body (for an error message).
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Response {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body's first line, for an error message.
    pub fn summary(&self) -> String {
        let text = String::from_utf8_lossy(&self.body);
        text.lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(200)
            .collect()
    }
}

/// The largest response body read.
const MAX_BODY: u64 = 64 << 10;

/// POSTs `body` to `ep` with `headers`, each step bounded by `timeout`; over TLS (`tls`)
/// when the endpoint is `https`.
pub fn post(
    ep: &Endpoint,
    tls: Option<&Tls>,
    headers: &[(String, String)],
    body: &[u8],
    timeout: Duration,
) -> io::Result<Response> {
    let addr = (ep.host.as_str(), ep.port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address for the host"))?;
    let s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    match (ep.tls, tls) {
        (false, _) => exchange(s, ep, headers, body),
        (true, Some(tls)) => exchange(tls.http1(&ep.host, s)?, ep, headers, body),
        (true, None) => Err(io::Error::other(
            "an https endpoint without a TLS configuration",
        )),
    }
}

/// One request and its response on a fresh connection.
fn exchange(
    mut s: impl Read + Write,
    ep: &Endpoint,
    headers: &[(String, String)],
    body: &[u8],
) -> io::Result<Response> {
    let mut head = format!(
        "POST {} HTTP/1.1\r\nHost: {}:{}\r\nUser-Agent: memperf/{}\r\nContent-Length: {}\r\n\
         Connection: close\r\n",
        ep.path,
        ep.host,
        ep.port,
        env!("CARGO_PKG_VERSION"),
        body.len()
    );
    for (k, v) in headers {
        head.push_str(k);
        head.push_str(": ");
        head.push_str(v);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())?;
    s.write_all(body)?;
    s.flush()?;
    let mut raw = Vec::new();
    s.take(MAX_BODY).read_to_end(&mut raw)?;
    parse_response(&raw)
}

/// The status and body of a response (`HTTP/1.1 200 OK\r\n...\r\n\r\nbody`).
fn parse_response(raw: &[u8]) -> io::Result<Response> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "not an HTTP response");
    let line_end = raw.windows(2).position(|w| w == b"\r\n").ok_or_else(bad)?;
    let line = std::str::from_utf8(&raw[..line_end]).map_err(|_| bad())?;
    let mut parts = line.split(' ');
    if !parts.next().is_some_and(|v| v.starts_with("HTTP/1.")) {
        return Err(bad());
    }
    let status = parts.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    let Some(head_end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(Response {
            status,
            body: Vec::new(),
        });
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
    let body = &raw[head_end + 4..];
    let chunked = head
        .lines()
        .any(|l| l.starts_with("transfer-encoding:") && l.contains("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_vec()
    };
    Ok(Response { status, body })
}

/// A chunked body's data (as much of it as is whole).
fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&b[..eol])
            .ok()
            .and_then(|l| usize::from_str_radix(l.split(';').next()?.trim(), 16).ok());
        let Some(size) = size.filter(|&n| n > 0) else {
            break;
        };
        // A size past the body (even past usize, from a hostile server) ends the data.
        let Some(chunk) = b.get(eol + 2..).and_then(|r| r.get(..size)) else {
            break;
        };
        out.extend_from_slice(chunk);
        b = b
            .get(eol + 2..)
            .and_then(|r| r.get(size.saturating_add(2)..))
            .unwrap_or_default();
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_size_past_the_body_or_past_usize_ends_the_data() {
        assert_eq!(dechunk(b"3\r\nabc\r\n0\r\n\r\n"), b"abc");
        assert_eq!(dechunk(b"3\r\nabc\r\nffffffffffffffff\r\nxyz\r\n"), b"abc");
        assert_eq!(dechunk(b"10\r\nabc"), b"");
    }

    #[test]
    fn urls_give_host_port_and_path() {
        let e = Endpoint::parse("http://127.0.0.1:4318", "/v1development/profiles").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("127.0.0.1", 4318));
        assert_eq!(e.path, "/v1development/profiles");
        let e = Endpoint::parse("http://h/custom/path", "/x").unwrap();
        assert_eq!((e.port, e.path.as_str()), (80, "/custom/path"));
        let e = Endpoint::parse("http://[::1]:9/", "/x").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("::1", 9));
        for bad in [
            "127.0.0.1:4318",
            "ftp://h",
            "http://:80",
            "http://h:port",
            "http://u:p@h",
        ] {
            assert!(Endpoint::parse(bad, "/").is_err(), "{bad}");
        }
        let e = Endpoint::parse("https://h/p", "/").unwrap();
        assert_eq!(
            (e.port, e.tls, e.url().as_str()),
            (443, true, "https://h:443/p")
        );
        assert!(!Endpoint::parse("http://h", "/").unwrap().tls);
    }

    #[test]
    fn responses_give_their_status_and_body() {
        let r = parse_response(b"HTTP/1.1 503 Service Unavailable\r\nA: b\r\n\r\ndown\n").unwrap();
        assert_eq!(r.status, 503);
        assert_eq!(r.summary(), "down");
        assert!(!r.is_success());
        assert!(parse_response(b"SSH-2.0-OpenSSH\r\n").is_err());
        let r = parse_response(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(r.body, b"abcde");
        assert!(parse_response(b"").is_err());
    }
}
