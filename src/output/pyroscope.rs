//! Grafana Pyroscope's push API, `push.v1.PusherService/Push` (what Grafana Alloy's
//! `pyroscope.write` sends): a `PushRequest` of series, each a label set and pprof profiles.
//!
//! The messages are Pyroscope's (`api/push/v1/push.proto`, `api/types/v1/types.proto`),
//! written as prost messages with their field numbers. A profile is made fit for Pyroscope's
//! distributor, which refuses a sample type with a `-` in it and makes every string label of
//! a sample a label of a series: sample types become `[A-Za-z0-9_]` names (`page-faults` →
//! `page_faults`, `page_faults_bytes`), the period type is memory's (`space`, `bytes`), and
//! the labels every sample of the profile shares move to the series.

use std::io::Write;

use prost::Message;

use super::pprof::{Profile, ValueType};

#[derive(Clone, PartialEq, Message)]
pub struct PushRequest {
    #[prost(message, repeated, tag = "1")]
    pub series: Vec<RawProfileSeries>,
}

#[derive(Clone, PartialEq, Message)]
pub struct RawProfileSeries {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<LabelPair>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<RawSample>,
}

#[derive(Clone, PartialEq, Message)]
pub struct LabelPair {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct RawSample {
    /// A pprof profile, gzipped or not.
    #[prost(bytes = "vec", tag = "1")]
    pub raw_profile: Vec<u8>,
    #[prost(string, tag = "2")]
    pub id: String,
}

/// The path of the push procedure under a Pyroscope server's base URL.
pub const PUSH_PATH: &str = "/push.v1.PusherService/Push";

/// The profile name (`__name__`) memperf's profiles are filed under: Pyroscope's family of
/// memory profiles, `memory:TYPE:UNIT:space:bytes`.
pub const PROFILE_NAME: &str = "memory";

/// One series: its labels (`__name__`, `service_name`, ...) and its profile.
pub struct Series<'a> {
    pub labels: Vec<(&'a str, String)>,
    pub profile: &'a Profile,
    /// Sample labels left out of the profile: the series carries them.
    pub series_keys: &'a [&'a str],
}

/// The request pushing `series`.
pub fn request(series: &[Series<'_>]) -> PushRequest {
    PushRequest {
        series: series
            .iter()
            .map(|s| RawProfileSeries {
                labels: s
                    .labels
                    .iter()
                    .map(|(k, v)| LabelPair {
                        name: (*k).to_string(),
                        value: v.clone(),
                    })
                    .collect(),
                samples: vec![RawSample {
                    raw_profile: gzip(&for_pyroscope(s.profile, s.series_keys).encode_to_vec()),
                    id: String::new(),
                }],
            })
            .collect(),
    }
}

/// A sample type's name as Pyroscope takes it: `[A-Za-z0-9_]`, the rest `_`.
pub fn sample_type_name(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// `p` with Pyroscope's sample type names and period type, and without the sample labels
/// keyed by `series_keys`.
fn for_pyroscope(p: &Profile, series_keys: &[&str]) -> Profile {
    let mut p = p.clone();
    for i in 0..p.sample_type.len() {
        let old = usize::try_from(p.sample_type[i].r#type).unwrap_or(0);
        let name = sample_type_name(p.string_table.get(old).map_or("", String::as_str));
        p.sample_type[i].r#type = add(&mut p, name);
    }
    if p.period_type.is_none() {
        p.period_type = Some(ValueType {
            r#type: add(&mut p, "space".to_string()),
            unit: add(&mut p, "bytes".to_string()),
        });
    }
    let dropped: Vec<i64> = series_keys
        .iter()
        .filter_map(|k| p.string_table.iter().position(|t| t == k))
        .map(|i| i as i64)
        .collect();
    for s in &mut p.sample {
        s.label.retain(|l| !dropped.contains(&l.key));
    }
    p
}

/// The index of string `s` in `p`'s table, added if missing.
fn add(p: &mut Profile, s: String) -> i64 {
    match p.string_table.iter().position(|t| *t == s) {
        Some(i) => i as i64,
        None => {
            p.string_table.push(s);
            p.string_table.len() as i64 - 1
        }
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing into a Vec cannot fail.
    let _ = enc.write_all(bytes);
    enc.finish().unwrap_or_default()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::output::pprof::{Label, Sample};

    #[test]
    fn sample_types_are_renamed_and_series_labels_leave_the_samples() {
        let p = Profile {
            sample_type: vec![
                ValueType { r#type: 1, unit: 2 },
                ValueType { r#type: 3, unit: 4 },
            ],
            sample: vec![Sample {
                location_id: vec![],
                value: vec![1, 4096],
                label: vec![
                    Label {
                        key: 5,
                        str: 6,
                        ..Label::default()
                    },
                    Label {
                        key: 7,
                        str: 8,
                        ..Label::default()
                    },
                ],
            }],
            string_table: [
                "",
                "page-faults",
                "count",
                "sys_enter_mmap:x",
                "bytes",
                "comm",
                "app",
                "service_name",
                "app",
            ]
            .map(String::from)
            .to_vec(),
            ..Profile::default()
        };
        let q = for_pyroscope(&p, &["service_name", "host"]);
        let name = |i: i64| q.string_table[i as usize].as_str();
        assert_eq!(name(q.sample_type[0].r#type), "page_faults");
        assert_eq!(name(q.sample_type[1].r#type), "sys_enter_mmap_x");
        let period = q.period_type.clone().unwrap();
        assert_eq!((name(period.r#type), name(period.unit)), ("space", "bytes"));
        assert_eq!(q.sample[0].label.len(), 1);
        assert_eq!(name(q.sample[0].label[0].key), "comm");
        // The request decodes back to the same series.
        let req = request(&[Series {
            labels: vec![("__name__", "memory".into())],
            profile: &p,
            series_keys: &[],
        }]);
        let back = PushRequest::decode(req.encode_to_vec().as_slice()).unwrap();
        assert_eq!(back.series[0].labels[0].name, "__name__");
        assert_eq!(&back.series[0].samples[0].raw_profile[..2], b"\x1f\x8b");
    }
}
