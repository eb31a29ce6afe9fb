//! Parca (and Polar Signals Cloud): `parca.profilestore.v1alpha1.ProfileStoreService/
//! WriteRaw` over gRPC, one request a window. Each process group is a series: its labels
//! are the group's (`__name__`, `service_name`, `host`, `kernel`, `memperf_version`,
//! `container_id`) and its one sample the group's gzipped pprof, whose samples keep `pid`
//! and `comm`. Parca's server makes one profile of each sample type, named
//! `__name__:TYPE:UNIT:PERIOD_TYPE:PERIOD_UNIT`, so one request carries every event's
//! counts and bytes.

use std::io::Write;

use prost::Message;

use super::profiles::{GroupProfile, HostLabels, group_labels};
use super::sink::{Encoder, Window};
use crate::ship::Request;

/// The method every request calls.
pub(crate) const WRITE_RAW: &str = "/parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw";

/// Parca's port (its gRPC and HTTP API share it) when a URL gives none.
pub(crate) const PARCA_PORT: u16 = 7070;

/// The profiles' `__name__`: what Parca calls the memory profiles it scrapes from Go
/// programs (`memory:alloc_space:bytes:space:bytes`), so memperf's sit beside them.
const NAME: &str = "memory";

#[derive(Clone, PartialEq, Message)]
struct WriteRawRequest {
    #[prost(message, repeated, tag = "2")]
    series: Vec<RawProfileSeries>,
    /// Whether the profiles' addresses were normalized (to the file's); memperf's are not.
    #[prost(bool, tag = "3")]
    normalized: bool,
}

#[derive(Clone, PartialEq, Message)]
struct RawProfileSeries {
    #[prost(message, optional, tag = "1")]
    labels: Option<LabelSet>,
    #[prost(message, repeated, tag = "2")]
    samples: Vec<RawSample>,
}

#[derive(Clone, PartialEq, Message)]
struct LabelSet {
    #[prost(message, repeated, tag = "1")]
    labels: Vec<Label>,
}

#[derive(Clone, PartialEq, Message)]
struct Label {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    value: String,
}

#[derive(Clone, PartialEq, Message)]
struct RawSample {
    #[prost(bytes = "vec", tag = "1")]
    raw_profile: Vec<u8>,
}

/// `--parca URL`: each window as one WriteRaw call.
pub(crate) struct ParcaEncoder {
    pub host: HostLabels,
}

impl Encoder for ParcaEncoder {
    fn encode(&self, w: &Window<'_>) -> Vec<Request> {
        if w.profiles.is_empty() {
            return Vec::new();
        }
        let series = w.profiles.iter().map(|p| self.series(p)).collect();
        let req = WriteRawRequest {
            series,
            normalized: false,
        };
        vec![Request {
            path: WRITE_RAW.to_string(),
            content_type: "application/grpc".to_string(),
            body: req.encode_to_vec(),
        }]
    }
}

impl ParcaEncoder {
    fn series(&self, p: &GroupProfile) -> RawProfileSeries {
        // The group's labels go on the series; its samples have none of them (Parca would
        // keep both, the sample's renamed `exported_service_name`).
        let mut labels = vec![(NAME_LABEL, NAME.to_string())];
        labels.extend(
            group_labels(&p.group, &self.host)
                .into_iter()
                .map(|(k, v)| (k, v.to_string())),
        );
        RawProfileSeries {
            labels: Some(LabelSet {
                labels: labels
                    .into_iter()
                    .map(|(name, value)| Label {
                        name: name.to_string(),
                        value,
                    })
                    .collect(),
            }),
            samples: vec![RawSample {
                raw_profile: gzip(&p.profile.encode_to_vec()),
            }],
        }
    }
}

const NAME_LABEL: &str = "__name__";

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(
        Vec::with_capacity(bytes.len() / 4),
        flate2::Compression::default(),
    );
    // Writing to a Vec cannot fail.
    let _ = enc.write_all(bytes);
    enc.finish().unwrap_or_default()
}
