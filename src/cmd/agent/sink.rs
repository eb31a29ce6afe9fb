//! Where a window's profiles go. A sink ships one window at a time; a failure is the
//! sink's to count and say, never the end of the agent.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::profiles::{GroupProfile, HostLabels, WindowTimes};
use crate::output::{otlp, pprof};
use crate::ship::Request;

/// One window's profiles.
pub(crate) struct Window<'a> {
    pub times: WindowTimes,
    pub profiles: &'a [GroupProfile],
}

/// A destination of profiles.
pub(crate) trait Sink {
    /// What it is, for messages (`directory out/`, `OTLP http://...`).
    fn describe(&self) -> String;
    /// Ships every profile of `w`.
    fn ship(&mut self, w: &Window<'_>) -> Result<()>;
}

/// `--output DIR`: one gzipped pprof file per profile.
pub(crate) struct DirSink {
    dir: PathBuf,
}

impl DirSink {
    /// The directory `dir`, created if missing.
    pub fn create(dir: &Path) -> Result<DirSink> {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("failed to create the directory `{}`", dir.display()))?;
        Ok(DirSink {
            dir: dir.to_path_buf(),
        })
    }
}

impl Sink for DirSink {
    fn describe(&self) -> String {
        format!("directory `{}`", self.dir.display())
    }

    fn ship(&mut self, w: &Window<'_>) -> Result<()> {
        for p in w.profiles {
            let path = self.dir.join(file_name(w.times.start_unix_ns, p));
            pprof::write_with_labels(&p.profile, &p.labels, &path)?;
        }
        Ok(())
    }
}

/// How a backend wants a window: the requests it is sent.
pub(crate) trait Encoder {
    fn encode(&self, w: &Window<'_>) -> Vec<Request>;
}

/// OTLP profiles over HTTP or gRPC: one `ExportProfilesServiceRequest` a window, each
/// group a resource (service, host, container, kernel), each sample's process in its
/// attributes.
pub(crate) struct OtlpEncoder {
    pub host: HostLabels,
    /// The request path (`/v1development/profiles` unless the URL gave one), or the gRPC
    /// method's (`OTLP_GRPC_METHOD`).
    pub path: String,
    /// `application/x-protobuf` over HTTP, `application/grpc` over gRPC.
    pub content_type: &'static str,
}

/// OTLP's path for profiles while the signal is in development.
pub(crate) const OTLP_PATH: &str = "/v1development/profiles";

/// OTLP's gRPC method for profiles while the signal is in development.
pub(crate) const OTLP_GRPC_METHOD: &str =
    "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export";

/// The port of OTLP over gRPC when a URL gives none.
pub(crate) const OTLP_GRPC_PORT: u16 = 4317;

/// An OTLP receiver's answer to a request it took: its `partial_success`, if any.
pub(crate) fn otlp_partial(answer: &[u8]) -> Option<crate::ship::Partial> {
    crate::output::otlp::partial_success(answer)
        .map(|(rejected, message)| crate::ship::Partial { rejected, message })
}

/// The pprof labels each profile's resource carries instead (left out of the samples), and
/// the sample labels given their OpenTelemetry names.
const OTLP_LABELS: &[(&str, Option<&str>)] = &[
    ("pid", Some("process.pid")),
    ("comm", Some("process.executable.name")),
    ("service_name", None),
    ("host", None),
    ("kernel", None),
    ("memperf_version", None),
    ("container_id", None),
];

impl Encoder for OtlpEncoder {
    fn encode(&self, w: &Window<'_>) -> Vec<Request> {
        if w.profiles.is_empty() {
            return Vec::new();
        }
        let sources: Vec<otlp::Source<'_>> = w
            .profiles
            .iter()
            .map(|p| {
                let mut resource = vec![
                    ("service.name", p.group.service.clone()),
                    ("host.name", self.host.host.clone()),
                    ("os.type", "linux".to_string()),
                    ("os.version", self.host.kernel.clone()),
                    ("telemetry.sdk.name", "memperf".to_string()),
                    ("telemetry.sdk.version", self.host.version.clone()),
                ];
                if let Some(c) = &p.group.container {
                    resource.push(("container.id", c.clone()));
                }
                otlp::Source {
                    resource,
                    profile: &p.profile,
                    rename: OTLP_LABELS,
                }
            })
            .collect();
        let req = otlp::request(&sources, &self.host.version);
        vec![Request {
            path: self.path.clone(),
            content_type: self.content_type.to_string(),
            body: prost::Message::encode_to_vec(&req),
        }]
    }
}

/// `START_MS-SERVICE[-CONTAINER12].pb.gz`: sorted by time, then service, and safe as a
/// file name whatever the service is called.
pub(crate) fn file_name(start_unix_ns: i64, p: &GroupProfile) -> String {
    let mut name = format!("{}-{}", start_unix_ns / 1_000_000, safe(&p.group.service));
    if let Some(c) = &p.group.container {
        name.push('-');
        name.push_str(&safe(&c[..c.len().min(12)]));
    }
    name.push_str(".pb.gz");
    name
}

/// A name's characters outside `[A-Za-z0-9._-]` as `_`, a leading dot too.
fn safe(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.starts_with('.') || out.is_empty() {
        out.insert(0, '_');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::safe;

    #[test]
    fn service_names_become_safe_file_names() {
        assert_eq!(safe("nginx"), "nginx");
        assert_eq!(safe("../etc/passwd"), "_.._etc_passwd");
        assert_eq!(safe("a b/c"), "a_b_c");
        assert_eq!(safe(""), "_");
    }
}
