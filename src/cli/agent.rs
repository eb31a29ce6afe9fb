//! `memperf agent`: the long-running profiler's arguments and their validation.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Args;

use super::{Consume, RecordArgs, UnwindWhen};

pub use crate::config::agent::AgentConfig;

pub const AGENT_EXAMPLES: &str = "\
EXAMPLES:
    memperf agent --output profiles/ --interval 10 --duration 60
        The whole system's page faults, one pprof file per service every 10 s for a
        minute (go tool pprof reads them).
    memperf agent -e page-faults,syscalls:sys_enter_mmap --output /var/lib/memperf
        Faults and mmap bytes, every 60 s, until stopped (SIGINT or SIGTERM).
    memperf agent --otlp grpc://collector:4317 --parca grpc://parca:7070
        Each window to an OpenTelemetry Collector (OTLP over gRPC) and to Parca.
    memperf agent --comm nginx,redis-server --output out/
        Only these commands' samples.
    memperf agent --output out/ -- ./app
        One program, from start to exit.
    memperf agent --otel-memory --otlp http://collector:4318 -- ./app
        A program's OpenTelemetry memory probes (otel_memory:alloc and :free), found in
        its executable or the shared libraries it loads, as alloc_* and inuse_*.
    memperf agent -G system.slice/nginx.service,machine.slice --output out/
        Only the tasks of these cgroups (perf's -G), each CPU's events opened on them.
    memperf agent --pyroscope http://pyroscope:4040 --tenant team-a
        Push to Grafana Pyroscope's push API, as memory:page_faults:count:space:bytes
        and memory:page_faults_bytes:bytes:space:bytes, service_name from the cgroup.

Each window's profiles are named WINDOWSTART_MS-SERVICE.pb.gz. A service is the systemd
unit of a process's cgroup, else its command. Every sample is labelled with its pid and
comm, and every profile with service_name, host, kernel, memperf_version and, in a
container, container_id. At each window's end a line on standard error gives the agent's
own cost (CPU seconds, peak RSS) and what it lost or folded away.

PERMISSIONS: root or CAP_PERFMON for the whole system (the default); your own processes
with -p or a command under perf_event_paranoid <= 2.";

/// Arguments of `memperf agent`.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Events to sample, as `memperf record -e` takes them: page-faults (the default, every
    /// fault, unless --otel-memory is given), syscalls:sys_enter_brk,
    /// syscalls:sys_enter_mmap, syscalls:sys_enter_munmap, allocator probes
    /// (`u:libc:malloc`, `sdt:PATH:otel_memory:alloc`), with perf's terms
    /// (`page-faults/period=100/`).
    #[arg(short = 'e', long = "event", value_name = "EVENTS")]
    pub events: Vec<String>,

    /// Read the OpenTelemetry memory-profiling contract of the program or library at PATH:
    /// its USDT probes otel_memory:alloc(ptr, size, weighted_bytes) and otel_memory:free(ptr),
    /// without BPF, as the sample types alloc_objects (count), alloc_space (the
    /// weighted_bytes, which undo the program's own sampling), inuse_objects and inuse_space
    /// (the blocks not freed at each window's end, by allocation stack). Added to the -e
    /// events (page-faults only if given). Without PATH (or with `auto`), with -p or a
    /// command: the object that carries the probes is found among the target's executable
    /// and shared libraries (those it maps, or a command's executable and the libraries
    /// the loader loads for it), and named on standard error.
    #[arg(
        long = "otel-memory",
        value_name = "PATH",
        num_args = 0..=1,
        default_missing_value = OTEL_MEMORY_AUTO
    )]
    pub otel_memory: Option<PathBuf>,

    /// A tracepoint filter for the events of the `-e` before it, applied by the kernel.
    #[arg(long = "filter", value_name = "EXPR")]
    pub filters: Vec<String>,

    /// The filter of each `-e` value, by its index (set from the parsed command line).
    #[arg(skip)]
    pub filter_of: Vec<Option<String>>,

    /// Existing processes to profile, comma-separated, with their threads (else the whole
    /// system, or the command after `--`).
    #[arg(short = 'p', long = "pid", value_name = "PIDS")]
    pub pid: Option<String>,

    /// Profile only the tasks of these cgroups (comma-separated, relative to the cgroup
    /// file system's root, and their descendants), as perf's -G: the events are opened on
    /// each CPU for each cgroup. Their services are named after the cgroup, unless a
    /// systemd unit inside names them.
    #[arg(short = 'G', long = "cgroup", value_name = "CGROUPS")]
    pub cgroups: Vec<String>,

    /// Keep only the samples of threads with these names (comma-separated commands).
    #[arg(long = "comm", value_name = "COMMS", value_delimiter = ',')]
    pub comms: Vec<String>,

    /// Sample period: one sample every PERIOD events (faults and tracepoints default to 1).
    #[arg(short = 'c', long = "count", value_name = "PERIOD")]
    pub count: Option<u64>,

    /// How user stacks are taken, as `memperf record --call-graph` (`dwarf,auto` unless
    /// given; `fp` costs least).
    #[arg(long = "call-graph", value_name = "MODE")]
    pub call_graph: Option<String>,

    /// Ring buffer size per CPU, in pages (a power of two).
    #[arg(short = 'm', long = "mmap-pages", value_name = "PAGES")]
    pub mmap_pages: Option<usize>,

    /// The window: every SECS seconds the aggregated samples become one profile per
    /// process group and are shipped.
    #[arg(long = "interval", value_name = "SECS", default_value_t = 60.0)]
    pub interval: f64,

    /// Stop after SECS seconds (the last, partial window is shipped too); else run until
    /// SIGINT or SIGTERM, or until the command after `--` exits.
    #[arg(long = "duration", value_name = "SECS")]
    pub duration: Option<f64>,

    /// Write each window's profiles as gzipped pprof files into this directory (created if
    /// missing).
    #[arg(long = "output", value_name = "DIR")]
    pub output: Option<PathBuf>,

    /// Push each window's profiles to an OpenTelemetry Collector (or any OTLP profiles
    /// receiver): `http://HOST:4318` posts protobuf to `/v1development/profiles` (or the
    /// URL's path); `grpc://HOST[:4317]` calls ProfilesService/Export over gRPC (cleartext
    /// HTTP/2); `https://` and `grpcs://` do the same over TLS. Repeatable.
    #[arg(long = "otlp", value_name = "URL")]
    pub otlp: Vec<String>,

    /// Push each window's profiles to a Parca server (or Polar Signals) with
    /// ProfileStoreService/WriteRaw over gRPC: `grpc://HOST[:7070]` or `http://HOST[:7070]`
    /// (cleartext HTTP/2), `grpcs://` or `https://` (TLS). Repeatable.
    #[arg(long = "parca", value_name = "URL")]
    pub parca: Vec<String>,
    /// Push each window's profiles to Grafana Pyroscope over HTTP, as Grafana Alloy does:
    /// `http://HOST:4040` posts to its push API, `/push.v1.PusherService/Push` (under the
    /// URL's path, if it has one). Repeatable.
    #[arg(long = "pyroscope", value_name = "URL")]
    pub pyroscope: Vec<String>,

    /// Where each backend's requests wait while it cannot take them (a directory per
    /// backend inside, kept across restarts: they are sent, oldest first, when it is back).
    /// Without it they wait in memory and what is left at exit is lost (and said).
    #[arg(long = "spool", value_name = "DIR")]
    pub spool: Option<PathBuf>,

    /// The most each backend's spool holds, in MiB; past it the oldest requests are
    /// dropped, and counted.
    #[arg(long = "spool-max-mb", value_name = "MIB", default_value_t = 256)]
    pub spool_max_mb: u64,

    /// Check `https://` and `grpcs://` backends' certificates against the CA certificates of
    /// this PEM file only (else against the system's).
    #[arg(long = "ca-file", value_name = "PEM")]
    pub ca_file: Option<PathBuf>,

    /// Show this certificate (PEM, the agent's own first, then any intermediates) to
    /// `https://` and `grpcs://` backends that ask for one: mutual TLS (else
    /// $MEMPERF_CLIENT_CERT). Needs --client-key.
    #[arg(long = "client-cert", value_name = "PEM")]
    pub client_cert: Option<PathBuf>,

    /// The private key of --client-cert's certificate (PEM; else $MEMPERF_CLIENT_KEY).
    #[arg(long = "client-key", value_name = "PEM")]
    pub client_key: Option<PathBuf>,

    /// Send `Authorization: Bearer TOKEN` to every backend (else $MEMPERF_BEARER_TOKEN).
    #[arg(long = "bearer-token", value_name = "TOKEN")]
    pub bearer_token: Option<String>,

    /// Send HTTP basic authentication, `USER:PASSWORD`, to every backend (else
    /// $MEMPERF_BASIC_AUTH).
    #[arg(long = "basic-auth", value_name = "USER:PASSWORD")]
    pub basic_auth: Option<String>,

    /// Send `X-Scope-OrgID: TENANT` (Grafana Mimir, Loki, Pyroscope multi-tenancy) to every
    /// backend (else $MEMPERF_TENANT).
    #[arg(long = "tenant", value_name = "TENANT")]
    pub tenant: Option<String>,

    /// The most stack nodes and frames one window interns; past it samples are kept without
    /// their stack, and counted in the profile's comments and the window's line.
    #[arg(long = "max-stacks", value_name = "N", default_value_t = 200_000)]
    pub max_stacks: usize,

    /// Print no line per window (errors still go to standard error).
    #[arg(short = 'q', long = "quiet")]
    pub quiet: bool,

    /// The command to run and profile (after `--`); the agent ends when it exits.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

impl AgentArgs {
    pub fn into_config(self) -> Result<AgentConfig> {
        let interval = super::seconds("--interval", self.interval)?;
        if self.output.is_none()
            && self.otlp.is_empty()
            && self.parca.is_empty()
            && self.pyroscope.is_empty()
        {
            bail!(
                "memperf agent needs somewhere to send its profiles: --output DIR, --otlp URL, \
                 --pyroscope URL or --parca URL"
            );
        }
        for url in &self.otlp {
            let parsed = if crate::ship::grpc::is_grpc(url) {
                crate::ship::grpc::endpoint(url, 4317, false)
            } else {
                crate::ship::http::Endpoint::parse(url, "/")
            };
            parsed.map_err(|e| anyhow::anyhow!("--otlp: {e:#}"))?;
        }
        for url in &self.parca {
            crate::ship::grpc::endpoint(url, 7070, true)
                .map_err(|e| anyhow::anyhow!("--parca: {e:#}"))?;
        }
        for url in &self.pyroscope {
            crate::ship::http::Endpoint::parse(url, "/")
                .map_err(|e| anyhow::anyhow!("--pyroscope: {e:#}"))?;
        }
        let headers = auth_headers(
            self.bearer_token.or_else(|| env("MEMPERF_BEARER_TOKEN")),
            self.basic_auth.or_else(|| env("MEMPERF_BASIC_AUTH")),
            self.tenant.or_else(|| env("MEMPERF_TENANT")),
        )?;
        let client_cert = client_cert(
            self.client_cert
                .or_else(|| env("MEMPERF_CLIENT_CERT").map(PathBuf::from)),
            self.client_key
                .or_else(|| env("MEMPERF_CLIENT_KEY").map(PathBuf::from)),
        )?;
        if self.max_stacks == 0 {
            bail!("--max-stacks must be at least 1");
        }
        if !self.cgroups.is_empty() && self.pid.is_some() {
            bail!("give either -G or -p, not both");
        }
        let cgroups = crate::sys::cgroup::resolve(&self.cgroups)?;
        // Cgroup mode is system-wide (a command after `--` only bounds the run).
        let all = (self.pid.is_none() && self.command.is_empty()) || !cgroups.is_empty();
        let mut events = self.events;
        match &self.otel_memory {
            Some(path) if path.as_os_str() == OTEL_MEMORY_AUTO => {
                let target = if cgroups.is_empty() {
                    OtelTarget::of(self.pid.as_deref(), &self.command)?
                } else {
                    None
                };
                events.extend(found_otel_memory_events(target, events.is_empty())?);
            }
            Some(path) => events.extend(otel_memory_events(path)?),
            None if events.is_empty() => events.push("page-faults".to_string()),
            None => {}
        }
        let record = RecordArgs {
            events,
            filters: self.filters,
            filter_of: self.filter_of,
            include_self: false,
            all_cpus: all,
            cpu: None,
            pid: self.pid,
            // The agent resolves its -G itself (its services are named after them).
            cgroups: Vec::new(),
            tid: None,
            count: self.count,
            freq: None,
            g: false,
            call_graph: self.call_graph,
            unwind: UnwindWhen::Online,
            user_only: false,
            mmap_pages: self.mmap_pages,
            output: PathBuf::from("/dev/null"),
            duration: self.duration,
            quiet: true,
            consume: Consume::All,
            command: self.command,
        };
        let mut record = record.into_config()?;
        record.cgroups = cgroups;
        Ok(AgentConfig {
            record,
            interval,
            output: self.output,
            otlp: self.otlp,
            parca: self.parca,
            pyroscope: self.pyroscope,
            spool: self.spool,
            ca_file: self.ca_file,
            client_cert,
            spool_bytes: self.spool_max_mb.saturating_mul(1 << 20),
            headers,
            comms: (!self.comms.is_empty()).then_some(self.comms),
            max_stacks: self.max_stacks,
            quiet: self.quiet,
        })
    }
}

/// The events `--otel-memory PATH` adds: the contract's two probes in PATH.
fn otel_memory_events(path: &std::path::Path) -> Result<[String; 2]> {
    Ok([
        contract_event(path, "alloc")?,
        contract_event(path, "free")?,
    ])
}

/// The event of the contract's probe `name` in the object at `path`.
fn contract_event(path: &std::path::Path, name: &str) -> Result<String> {
    let text = path.to_str().unwrap_or_default();
    if text.is_empty() || text.contains([':', ',']) {
        bail!(
            "--otel-memory `{}`: the path must be UTF-8 without `:` or `,` (it becomes the \
             event sdt:PATH:otel_memory:alloc)",
            path.display()
        );
    }
    Ok(format!("sdt:{text}:otel_memory:{name}"))
}

/// `--otel-memory` without a path: the contract's probes are looked for in the target's
/// objects.
const OTEL_MEMORY_AUTO: &str = "auto";

/// Where `--otel-memory` looks for the contract's probes by itself.
enum OtelTarget {
    Pids(Vec<u32>),
    Command(OsString),
}

impl OtelTarget {
    /// The target of `-p` or of a command; none for the whole system.
    fn of(pid: Option<&str>, command: &[OsString]) -> Result<Option<OtelTarget>> {
        Ok(match (pid, command.first()) {
            (Some(p), _) => Some(OtelTarget::Pids(super::parse_id_list(p, "pid")?)),
            (None, Some(argv0)) => Some(OtelTarget::Command(argv0.clone())),
            (None, None) => None,
        })
    }

    /// Its executable and shared libraries, what they are and how to name it.
    fn objects(&self) -> Result<Objects> {
        match self {
            OtelTarget::Pids(pids) => {
                let all = crate::probes::carriers::process_objects(pids)?;
                let list: Vec<String> = pids.iter().map(u32::to_string).collect();
                Ok(Objects {
                    paths: all,
                    named: format!("process {}", list.join(", ")),
                    what: "the executable files they map",
                    unseen: LATER_DLOPEN.to_string(),
                    said_unseen: false,
                })
            }
            OtelTarget::Command(argv0) => {
                let (objects, missing) = crate::probes::carriers::command_objects(argv0)?;
                let named = format!("`{}`", argv0.to_string_lossy());
                if let Some(why) = missing {
                    eprintln!(
                        "memperf agent: --otel-memory: the libraries of {named} are not looked \
                         at: {why}"
                    );
                }
                // A program that calls dlopen may keep its probes in a library it opens
                // while it runs: no file names that library before it starts.
                let opens = objects
                    .first()
                    .is_some_and(|exe| crate::probes::carriers::calls_dlopen(exe));
                let unseen = if opens {
                    format!(
                        "{named} calls dlopen, and a library it opens while it runs is not \
                         known before it starts, so it is not looked at: name the one that \
                         carries the probes with --otel-memory PATH (the probes are placed on \
                         the file and fire once the program opens it)"
                    )
                } else {
                    LATER_DLOPEN.to_string()
                };
                Ok(Objects {
                    paths: objects,
                    named,
                    what: "its executable and the shared libraries it loads at start",
                    unseen,
                    said_unseen: opens,
                })
            }
        }
    }
}

/// What `--otel-memory` without a path does not look at.
const LATER_DLOPEN: &str =
    "a library opened later with dlopen is not looked at: name it with --otel-memory PATH";

/// The objects `--otel-memory` looks in.
struct Objects {
    paths: Vec<PathBuf>,
    /// The target, as the messages name it.
    named: String,
    /// What the objects are.
    what: &'static str,
    /// What is not looked at, and how to name it.
    unseen: String,
    /// Whether the target is known to open libraries while it runs: said even when the
    /// probes are found.
    said_unseen: bool,
}

/// The contract's events in the one object of the target that carries its probes, said on
/// standard error. None found is an error when nothing else is sampled, else a warning.
fn found_otel_memory_events(target: Option<OtelTarget>, alone: bool) -> Result<Vec<String>> {
    let Some(target) = target else {
        bail!(
            "--otel-memory without a path looks for the probes in the objects of -p's \
             processes or of the command after --: for the whole system or -G, name the \
             binary or library that carries them (--otel-memory PATH)"
        );
    };
    let objects = target.objects()?;
    let named = &objects.named;
    let found =
        crate::probes::carriers::carriers(&objects.paths, "otel_memory", &["alloc", "free"]);
    match found.carriers.as_slice() {
        [] => {
            let what = format!(
                "--otel-memory: none of the {} objects of {named} ({}) carries the \
                 otel_memory probes; {}",
                found.looked_at, objects.what, objects.unseen
            );
            if alone {
                bail!("{what}");
            }
            eprintln!("memperf agent: {what}; sampling the -e events only");
            Ok(Vec::new())
        }
        [one] => {
            let probes: Vec<String> = one
                .names
                .iter()
                .map(|n| format!("otel_memory:{n}"))
                .collect();
            eprintln!(
                "memperf agent: --otel-memory: {} found in {} (one of the {} objects of \
                 {named} looked at){}",
                probes.join(" and "),
                one.path.display(),
                found.looked_at,
                if objects.said_unseen {
                    format!("; {}", objects.unseen)
                } else {
                    String::new()
                }
            );
            let mut events = Vec::new();
            for name in &one.names {
                events.push(contract_event(&one.path, name)?);
            }
            Ok(events)
        }
        many => bail!(
            "--otel-memory: {} objects of {named} carry the otel_memory probes ({}): name the \
             one to read with --otel-memory PATH",
            many.len(),
            many.iter()
                .map(|c| format!("`{}`", c.path.display()))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The client certificate and its key, given both or neither.
fn client_cert(
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
) -> Result<Option<crate::config::agent::ClientCert>> {
    match (cert, key) {
        (Some(cert), Some(key)) => Ok(Some(crate::config::agent::ClientCert { cert, key })),
        (None, None) => Ok(None),
        (Some(_), None) => bail!("--client-cert needs --client-key (its private key)"),
        (None, Some(_)) => bail!("--client-key needs --client-cert (the certificate it signs)"),
    }
}

/// An environment variable's value, when it is set and not empty.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The authorization and tenant headers.
fn auth_headers(
    bearer: Option<String>,
    basic: Option<String>,
    tenant: Option<String>,
) -> Result<Vec<(String, String)>> {
    let mut h = Vec::new();
    let printable = |what: &str, v: &str| -> Result<()> {
        if v.bytes().any(|b| b < 0x20 || b == 0x7f) {
            bail!("{what} holds a control character");
        }
        Ok(())
    };
    match (bearer, basic) {
        (Some(_), Some(_)) => bail!("give a bearer token or basic authentication, not both"),
        (Some(t), None) => {
            printable("the bearer token", &t)?;
            h.push(("Authorization".to_string(), format!("Bearer {t}")));
        }
        (None, Some(b)) => {
            printable("the basic authentication", &b)?;
            if !b.contains(':') {
                bail!("basic authentication is USER:PASSWORD");
            }
            h.push((
                "Authorization".to_string(),
                format!("Basic {}", base64(b.as_bytes())),
            ));
        }
        (None, None) => {}
    }
    if let Some(t) = tenant {
        printable("the tenant", &t)?;
        h.push(("X-Scope-OrgID".to_string(), t));
    }
    Ok(h)
}

/// Standard base64 with padding (RFC 4648), for basic authentication.
fn base64(data: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_rfc_4648s() {
        // RFC 4648's test vectors.
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(i.as_bytes()), o);
        }
    }

    #[test]
    fn auth_headers_are_checked() {
        let h = auth_headers(None, Some("u:p".into()), Some("team-a".into())).unwrap();
        assert_eq!(h[0], ("Authorization".into(), "Basic dTpw".into()));
        assert_eq!(h[1], ("X-Scope-OrgID".into(), "team-a".into()));
        assert!(auth_headers(Some("t".into()), Some("u:p".into()), None).is_err());
        assert!(auth_headers(Some("t\r\nX: y".into()), None, None).is_err());
        assert!(auth_headers(None, Some("nocolon".into()), None).is_err());
    }
}
