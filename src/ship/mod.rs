//! Shipping profiles to backends: each backend's requests queue in its `spool` (a bounded
//! directory or memory) and a thread of their own delivers them over `http` (or as unary
//! `grpc` calls), oldest first, retrying with backoff while a backend is down, so that the
//! recorder's drain never waits on the network.

pub mod grpc;
pub mod http;
pub mod spool;
pub mod tls;

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use http::Endpoint;
use spool::Spool;
use tls::Tls;

/// One request to a backend: where on it, the body's type, the body. For a gRPC backend
/// the path is the method's (`/package.Service/Method`) and the body its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The path and query, from `/`.
    pub path: String,
    pub content_type: String,
    pub body: Vec<u8>,
}

impl Request {
    /// The spooled form: the path and the type on a line each, then the body.
    fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.body.len() + 64);
        out.extend_from_slice(self.path.as_bytes());
        out.push(b'\n');
        out.extend_from_slice(self.content_type.as_bytes());
        out.push(b'\n');
        out.extend_from_slice(&self.body);
        out
    }

    fn from_bytes(b: &[u8]) -> Option<Request> {
        let first = b.iter().position(|&c| c == b'\n')?;
        let second = first + 1 + b[first + 1..].iter().position(|&c| c == b'\n')?;
        Some(Request {
            path: String::from_utf8(b[..first].to_vec()).ok()?,
            content_type: String::from_utf8(b[first + 1..second].to_vec()).ok()?,
            body: b[second + 1..].to_vec(),
        })
    }
}

/// What a backend has done, for the agent's lines.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Requests the backend took.
    pub sent: u64,
    /// Requests it refused for good (a 4xx other than 408 and 429), not retried.
    pub rejected: u64,
    /// Attempts that failed and will be retried.
    pub failed_attempts: u64,
    /// Requests waiting, and those dropped to keep the spool within its bound.
    pub pending: usize,
    pub dropped: u64,
    pub last_error: Option<String>,
    /// Requests the backend took but for some of their profiles (OTLP's partial success),
    /// which are not in `sent`, and how many profiles it rejected in them.
    pub taken_in_part: u64,
    pub rejected_profiles: u64,
    /// The distinct messages of its partial successes, oldest first (at most
    /// `MAX_PARTIAL_MESSAGES`).
    pub partial_messages: Vec<String>,
}

/// The most distinct partial-success messages a backend keeps.
const MAX_PARTIAL_MESSAGES: usize = 32;

/// What a backend said of a request it took: how many of its profiles (or other items) it
/// rejected, and why (OTLP's `partial_success`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partial {
    pub rejected: u64,
    pub message: String,
}

/// Reads a backend's answer to a request it took; `None` when it took all of it.
pub type ReadAnswer = fn(&[u8]) -> Option<Partial>;

impl Stats {
    /// Counts a partial success: a request with rejected items is taken in part, not sent;
    /// one with a message alone (a warning) is sent. Each distinct message is kept once.
    fn partial(&mut self, p: Partial) {
        if p.rejected > 0 {
            self.taken_in_part += 1;
            self.rejected_profiles += p.rejected;
        } else {
            self.sent += 1;
        }
        if !p.message.is_empty()
            && !self.partial_messages.contains(&p.message)
            && self.partial_messages.len() < MAX_PARTIAL_MESSAGES
        {
            self.partial_messages.push(p.message);
        }
    }
}

/// A backend: its endpoint, headers and queue.
pub struct Backend {
    pub name: String,
    pub endpoint: Endpoint,
    pub headers: Vec<(String, String)>,
    spool: Spool,
    backoff: Backoff,
    stats: Arc<Mutex<Stats>>,
    transport: Transport,
    /// TLS's configuration, for an `https` or `grpcs` endpoint.
    tls: Option<Tls>,
    /// What reads the backend's answer to a request it took (OTLP's partial success).
    read_answer: Option<ReadAnswer>,
}

/// How a backend's requests travel.
enum Transport {
    /// An HTTP/1.1 POST each.
    Http,
    /// A unary gRPC call each, on a kept HTTP/2 connection.
    Grpc(grpc::Channel),
}

impl Backend {
    /// A backend named `name` (for messages) at `endpoint`, its queue in `spool_dir` (or
    /// memory), at most `spool_bytes`.
    pub fn new(
        name: String,
        endpoint: Endpoint,
        headers: Vec<(String, String)>,
        spool_dir: Option<&std::path::Path>,
        spool_bytes: u64,
    ) -> Result<Backend> {
        let spool = Spool::open(spool_dir, spool_bytes).with_context(|| {
            format!(
                "failed to open the spool directory `{}`",
                spool_dir
                    .map(|d| d.display().to_string())
                    .unwrap_or_default()
            )
        })?;
        let stats = Arc::new(Mutex::new(Stats {
            pending: spool.len(),
            ..Stats::default()
        }));
        Ok(Backend {
            name,
            endpoint,
            headers,
            spool,
            backoff: Backoff::default(),
            stats,
            transport: Transport::Http,
            tls: None,
            read_answer: None,
        })
    }

    /// The same backend, its answers to the requests it took read by `read`.
    pub fn reading_answers(mut self, read: ReadAnswer) -> Backend {
        self.read_answer = Some(read);
        self
    }

    /// The same backend, its requests sent as gRPC calls (each request's path the method).
    pub fn over_grpc(mut self) -> Backend {
        self.transport = Transport::Grpc(grpc::Channel::new(&self.endpoint, self.tls.clone()));
        self
    }

    /// The same backend, over TLS with `tls` if its endpoint says TLS.
    pub fn with_tls(mut self, tls: Tls) -> Backend {
        self.tls = Some(tls);
        if let Transport::Grpc(_) = self.transport {
            return self.over_grpc();
        }
        self
    }

    fn with_stats(&self, f: impl FnOnce(&mut Stats)) {
        let mut s = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut s);
        s.pending = self.spool.len();
        s.dropped = self.spool.dropped;
    }

    fn queue(&mut self, reqs: Vec<Request>) {
        for r in reqs {
            if let Err(e) = self.spool.push(r.to_bytes()) {
                let e = format!("failed to spool a request: {e}");
                self.with_stats(|s| s.last_error = Some(e));
            }
        }
        self.with_stats(|_| {});
    }

    /// Sends what is queued, oldest first, until the queue is empty or an attempt fails.
    fn deliver(&mut self, timeout: Duration) {
        loop {
            let bytes = match self.spool.front() {
                Ok(Some(b)) => b,
                Ok(None) => return,
                Err(e) => {
                    let e = format!("failed to read the spool: {e}");
                    self.with_stats(|s| s.last_error = Some(e));
                    let _ = self.spool.pop();
                    continue;
                }
            };
            let Some(req) = Request::from_bytes(&bytes) else {
                let _ = self.spool.pop();
                self.with_stats(|s| s.rejected += 1);
                continue;
            };
            match self.attempt(&req, timeout) {
                Outcome::Taken(answer) => {
                    let _ = self.spool.pop();
                    self.backoff.reset();
                    let partial = self.read_answer.and_then(|read| read(&answer));
                    self.with_stats(|s| match partial {
                        Some(p) => s.partial(p),
                        None => s.sent += 1,
                    });
                }
                Outcome::Refused(why) => {
                    let _ = self.spool.pop();
                    self.with_stats(|s| {
                        s.rejected += 1;
                        s.last_error = Some(why);
                    });
                }
                Outcome::Retry(why) => {
                    self.backoff.failed();
                    self.with_stats(|s| {
                        s.failed_attempts += 1;
                        s.last_error = Some(why);
                    });
                    return;
                }
            }
        }
    }

    fn attempt(&mut self, req: &Request, timeout: Duration) -> Outcome {
        if let Some(tls) = &self.tls {
            tls.forget_asked();
        }
        // A connection that failed over TLS says when the server asked for a client
        // certificate the agent has not got.
        let explain = |why: String| match &self.tls {
            Some(tls) => tls.explain(why),
            None => why,
        };
        if let Transport::Grpc(ch) = &mut self.transport {
            return call(ch, &self.headers, req, timeout, explain);
        }
        let ep = Endpoint {
            path: req.path.clone(),
            ..self.endpoint.clone()
        };
        let mut headers = self.headers.clone();
        headers.push(("Content-Type".to_string(), req.content_type.clone()));
        match http::post(&ep, self.tls.as_ref(), &headers, &req.body, timeout) {
            Ok(r) if r.is_success() => Outcome::Taken(r.body),
            Ok(r) => by_http_status(&ep.url(), r.status, &r.summary()),
            Err(e) => Outcome::Retry(explain(format!("{}: {e}", ep.url()))),
        }
    }
}

/// An HTTP answer's outcome: a 2xx is taken, a 4xx other than 408 and 429 refused, the
/// rest retried.
fn by_http_status(url: &str, status: u16, summary: &str) -> Outcome {
    if (200..300).contains(&status) {
        Outcome::Taken(Vec::new())
    } else if (400..500).contains(&status) && !matches!(status, 408 | 429) {
        Outcome::Refused(format!("{url} refused a request: {status} {summary}"))
    } else {
        Outcome::Retry(format!("{url}: {status} {summary}"))
    }
}

/// One gRPC call's outcome: status OK is taken, the retryable codes (UNAVAILABLE and the
/// like) retried, any other code a refusal; an HTTP answer that is no gRPC one is judged
/// as an HTTP push's.
fn call(
    ch: &mut grpc::Channel,
    headers: &[(String, String)],
    req: &Request,
    timeout: Duration,
    explain: impl Fn(String) -> String,
) -> Outcome {
    let url = format!("{}{}", ch.url(), req.path);
    match ch.unary(&req.path, headers, &req.body, timeout) {
        Ok(grpc::Answer::Ok(message)) => Outcome::Taken(message),
        Ok(grpc::Answer::Status(code, msg)) if grpc::retryable(code) => {
            Outcome::Retry(format!("{url}: {} {msg}", grpc::code_name(code)))
        }
        Ok(grpc::Answer::Status(code, msg)) => Outcome::Refused(format!(
            "{url} refused a request: {} {msg}",
            grpc::code_name(code)
        )),
        Ok(grpc::Answer::Http(status, summary)) => by_http_status(&url, status, &summary),
        Err(e) => Outcome::Retry(explain(format!("{url}: {e}"))),
    }
}

enum Outcome {
    /// Taken, with the answer's body (an HTTP response's, a gRPC response's message).
    Taken(Vec<u8>),
    Refused(String),
    Retry(String),
}

/// When a failed backend is tried again: 250 ms after the first failure, doubling to 30 s.
#[derive(Default)]
struct Backoff {
    delay: Option<Duration>,
    next: Option<Instant>,
}

const FIRST_RETRY: Duration = Duration::from_millis(250);
const MAX_RETRY: Duration = Duration::from_secs(30);

impl Backoff {
    fn failed(&mut self) {
        let d = self.delay.map_or(FIRST_RETRY, |d| (d * 2).min(MAX_RETRY));
        self.delay = Some(d);
        self.next = Some(Instant::now() + d);
    }

    fn reset(&mut self) {
        *self = Backoff::default();
    }

    fn due(&self, now: Instant) -> bool {
        self.next.is_none_or(|n| now >= n)
    }
}

enum Msg {
    Requests(usize, Vec<Request>),
    Stop(Duration),
}

/// The delivering thread and what its backends have done.
pub struct Shipper {
    tx: Sender<Msg>,
    thread: Option<JoinHandle<()>>,
    stats: Vec<(String, Arc<Mutex<Stats>>)>,
}

/// How long one request may take, each step.
const TIMEOUT: Duration = Duration::from_secs(10);

impl Shipper {
    pub fn start(mut backends: Vec<Backend>) -> Result<Shipper> {
        if backends.is_empty() {
            bail!("no backend to ship to");
        }
        let stats = backends
            .iter()
            .map(|b| (b.name.clone(), b.stats.clone()))
            .collect();
        let (tx, rx) = mpsc::channel::<Msg>();
        let thread = std::thread::Builder::new()
            .name("memperf-ship".into())
            .spawn(move || {
                loop {
                    let now = Instant::now();
                    let wait = backends
                        .iter()
                        .filter(|b| !b.spool.is_empty())
                        .filter_map(|b| b.backoff.next)
                        .map(|n| n.saturating_duration_since(now))
                        .min()
                        .unwrap_or(Duration::from_secs(3600));
                    match rx.recv_timeout(wait) {
                        Ok(Msg::Requests(i, reqs)) => {
                            if let Some(b) = backends.get_mut(i) {
                                b.queue(reqs);
                            }
                        }
                        Ok(Msg::Stop(grace)) => return finish(&mut backends, grace),
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => {
                            return finish(&mut backends, Duration::ZERO);
                        }
                    }
                    let now = Instant::now();
                    for b in backends.iter_mut().filter(|b| b.backoff.due(now)) {
                        b.deliver(TIMEOUT);
                    }
                }
            })
            .context("failed to start the shipping thread")?;
        Ok(Shipper {
            tx,
            thread: Some(thread),
            stats,
        })
    }

    /// Queues `reqs` for backend `i`.
    pub fn send(&self, i: usize, reqs: Vec<Request>) {
        let _ = self.tx.send(Msg::Requests(i, reqs));
    }

    /// Each backend's name and counts.
    pub fn stats(&self) -> Vec<(String, Stats)> {
        self.stats
            .iter()
            .map(|(n, s)| {
                (
                    n.clone(),
                    s.lock().unwrap_or_else(|e| e.into_inner()).clone(),
                )
            })
            .collect()
    }

    /// Delivers what is queued, trying for at most `grace`, and stops the thread.
    pub fn finish(mut self, grace: Duration) -> Vec<(String, Stats)> {
        let _ = self.tx.send(Msg::Stop(grace));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.stats()
    }
}

/// The last deliveries: every backend tried until its queue is empty or `grace` is over.
fn finish(backends: &mut [Backend], grace: Duration) {
    let end = Instant::now() + grace;
    loop {
        for b in backends.iter_mut() {
            b.deliver(TIMEOUT.min(grace.max(Duration::from_secs(1))));
        }
        if backends.iter().all(|b| b.spool.is_empty()) || Instant::now() >= end {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_spooled_request_reads_back_whole() {
        let r = Request {
            path: "/ingest?name=a%7Bb%7D&from=1".into(),
            content_type: "application/x-protobuf".into(),
            body: b"\n\x00binary\nbody".to_vec(),
        };
        assert_eq!(Request::from_bytes(&r.to_bytes()), Some(r));
        assert_eq!(Request::from_bytes(b"no newline"), None);
    }

    #[test]
    fn a_partial_success_is_counted_and_its_messages_kept_once() {
        let mut s = Stats::default();
        let p = |rejected, m: &str| Partial {
            rejected,
            message: m.into(),
        };
        s.partial(p(2, "too old"));
        s.partial(p(1, "too old"));
        s.partial(p(0, "a warning"));
        assert_eq!((s.sent, s.taken_in_part, s.rejected_profiles), (1, 2, 3));
        assert_eq!(s.partial_messages, ["too old", "a warning"]);
        for i in 0..100 {
            s.partial(p(1, &i.to_string()));
        }
        assert_eq!(s.partial_messages.len(), MAX_PARTIAL_MESSAGES);
    }

    #[test]
    fn backoff_doubles_to_its_bound_and_resets() {
        let mut b = Backoff::default();
        assert!(b.due(Instant::now()));
        b.failed();
        assert_eq!(b.delay, Some(FIRST_RETRY));
        for _ in 0..20 {
            b.failed();
        }
        assert_eq!(b.delay, Some(MAX_RETRY));
        assert!(!b.due(Instant::now()));
        b.reset();
        assert!(b.due(Instant::now()));
    }
}
