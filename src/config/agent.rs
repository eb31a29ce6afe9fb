//! What `memperf agent` is told to sample, and where to send it.

use std::path::PathBuf;
use std::time::Duration;

use crate::config::record::RecordConfig;

/// A validated `memperf agent` configuration.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// The live run: events, target, stacks, rings, duration.
    pub record: RecordConfig,
    pub interval: Duration,
    pub output: Option<PathBuf>,
    /// OTLP receivers' URLs.
    pub otlp: Vec<String>,
    /// Parca servers' URLs (gRPC).
    pub parca: Vec<String>,
    /// Pyroscope servers' URLs.
    pub pyroscope: Vec<String>,
    pub spool: Option<PathBuf>,
    /// The CA certificates TLS backends are checked against (else the system's).
    pub ca_file: Option<PathBuf>,
    /// The agent's own certificate and key for TLS backends that ask for one (mutual TLS).
    pub client_cert: Option<ClientCert>,
    pub spool_bytes: u64,
    /// Headers every backend is sent (authorization, tenant).
    pub headers: Vec<(String, String)>,
    pub comms: Option<Vec<String>>,
    pub max_stacks: usize,
    pub quiet: bool,
}

/// The agent's own certificate chain and its private key (PEM files), shown to TLS backends
/// that ask for a client certificate.
#[derive(Debug, Clone)]
pub struct ClientCert {
    pub cert: PathBuf,
    pub key: PathBuf,
}
