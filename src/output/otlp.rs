//! OpenTelemetry profiles (OTLP, `opentelemetry.proto.collector.profiles.v1development`):
//! pprof profiles re-encoded as one `ExportProfilesServiceRequest`, for `memperf agent`'s
//! OTLP push.
//!
//! The messages are the protocol's, written once as prost messages with the field numbers of
//! the collector's own decoder (pdata v1.71, whose `ProfilesDictionary` holds the mappings,
//! locations, functions, stacks, strings and attributes every profile of a request shares,
//! each table's entry 0 the empty value). Each profile has one sample type, so a pprof
//! profile of N columns becomes N OTLP profiles over the same stacks.

use prost::Message;
use rustc_hash::FxHashMap;

use super::pprof;

#[derive(Clone, PartialEq, Message)]
pub struct ExportProfilesServiceRequest {
    #[prost(message, repeated, tag = "1")]
    pub resource_profiles: Vec<ResourceProfiles>,
    #[prost(message, optional, tag = "2")]
    pub dictionary: Option<ProfilesDictionary>,
}

/// The receiver's answer to a request it took: empty, or what it rejected of it.
#[derive(Clone, PartialEq, Message)]
pub struct ExportProfilesServiceResponse {
    #[prost(message, optional, tag = "1")]
    pub partial_success: Option<ExportProfilesPartialSuccess>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ExportProfilesPartialSuccess {
    /// How many profiles of the request the receiver rejected (0 with a message: a warning).
    #[prost(int64, tag = "1")]
    pub rejected_profiles: i64,
    #[prost(string, tag = "2")]
    pub error_message: String,
}

/// The rejected profiles and the message of a response's `partial_success`; `None` when the
/// response has none (everything was taken), is empty (an HTTP answer without a body), or
/// is no such message.
pub fn partial_success(response: &[u8]) -> Option<(u64, String)> {
    let p = ExportProfilesServiceResponse::decode(response)
        .ok()?
        .partial_success?;
    let rejected = u64::try_from(p.rejected_profiles).unwrap_or(0);
    (rejected > 0 || !p.error_message.is_empty()).then_some((rejected, p.error_message))
}

#[derive(Clone, PartialEq, Message)]
pub struct ProfilesDictionary {
    #[prost(message, repeated, tag = "1")]
    pub mapping_table: Vec<Mapping>,
    #[prost(message, repeated, tag = "2")]
    pub location_table: Vec<Location>,
    #[prost(message, repeated, tag = "3")]
    pub function_table: Vec<Function>,
    #[prost(message, repeated, tag = "4")]
    pub link_table: Vec<Link>,
    #[prost(string, repeated, tag = "5")]
    pub string_table: Vec<String>,
    #[prost(message, repeated, tag = "6")]
    pub attribute_table: Vec<KeyValueAndUnit>,
    #[prost(message, repeated, tag = "7")]
    pub stack_table: Vec<Stack>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ResourceProfiles {
    #[prost(message, optional, tag = "1")]
    pub resource: Option<Resource>,
    #[prost(message, repeated, tag = "2")]
    pub scope_profiles: Vec<ScopeProfiles>,
    #[prost(string, tag = "3")]
    pub schema_url: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct Resource {
    #[prost(message, repeated, tag = "1")]
    pub attributes: Vec<KeyValue>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ScopeProfiles {
    #[prost(message, optional, tag = "1")]
    pub scope: Option<InstrumentationScope>,
    #[prost(message, repeated, tag = "2")]
    pub profiles: Vec<Profile>,
    #[prost(string, tag = "3")]
    pub schema_url: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct InstrumentationScope {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub version: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct KeyValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<AnyValue>,
}

#[derive(Clone, PartialEq, Message)]
pub struct AnyValue {
    #[prost(oneof = "Value", tags = "1, 3")]
    pub value: Option<Value>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Value {
    #[prost(string, tag = "1")]
    String(String),
    #[prost(int64, tag = "3")]
    Int(i64),
}

#[derive(Clone, PartialEq, Message)]
pub struct Profile {
    #[prost(message, optional, tag = "1")]
    pub sample_type: Option<ValueType>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
    #[prost(fixed64, tag = "3")]
    pub time_unix_nano: u64,
    #[prost(uint64, tag = "4")]
    pub duration_nano: u64,
    #[prost(message, optional, tag = "5")]
    pub period_type: Option<ValueType>,
    #[prost(int64, tag = "6")]
    pub period: i64,
    #[prost(bytes = "vec", tag = "7")]
    pub profile_id: Vec<u8>,
    #[prost(int32, repeated, tag = "11")]
    pub attribute_indices: Vec<i32>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    #[prost(int32, tag = "1")]
    pub type_strindex: i32,
    #[prost(int32, tag = "2")]
    pub unit_strindex: i32,
}

#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    #[prost(int32, tag = "1")]
    pub stack_index: i32,
    #[prost(int32, repeated, tag = "2")]
    pub attribute_indices: Vec<i32>,
    #[prost(int64, repeated, tag = "4")]
    pub values: Vec<i64>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Mapping {
    #[prost(uint64, tag = "1")]
    pub memory_start: u64,
    #[prost(uint64, tag = "2")]
    pub memory_limit: u64,
    #[prost(uint64, tag = "3")]
    pub file_offset: u64,
    #[prost(int32, tag = "4")]
    pub filename_strindex: i32,
    #[prost(int32, repeated, tag = "5")]
    pub attribute_indices: Vec<i32>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Location {
    #[prost(int32, tag = "1")]
    pub mapping_index: i32,
    #[prost(uint64, tag = "2")]
    pub address: u64,
    #[prost(message, repeated, tag = "3")]
    pub lines: Vec<Line>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Line {
    #[prost(int32, tag = "1")]
    pub function_index: i32,
    #[prost(int64, tag = "2")]
    pub line: i64,
}

#[derive(Clone, PartialEq, Message)]
pub struct Function {
    #[prost(int32, tag = "1")]
    pub name_strindex: i32,
    #[prost(int32, tag = "2")]
    pub system_name_strindex: i32,
    #[prost(int32, tag = "3")]
    pub filename_strindex: i32,
}

#[derive(Clone, PartialEq, Message)]
pub struct Link {
    #[prost(bytes = "vec", tag = "1")]
    pub trace_id: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub span_id: Vec<u8>,
}

#[derive(Clone, PartialEq, Message)]
pub struct KeyValueAndUnit {
    #[prost(int32, tag = "1")]
    pub key_strindex: i32,
    #[prost(message, optional, tag = "2")]
    pub value: Option<AnyValue>,
    #[prost(int32, tag = "3")]
    pub unit_strindex: i32,
}

#[derive(Clone, PartialEq, Message)]
pub struct Stack {
    #[prost(int32, repeated, tag = "1")]
    pub location_indices: Vec<i32>,
}

/// One process group's profile and what its resource is.
pub struct Source<'a> {
    /// The resource's attributes (`service.name`, `host.name`, ...).
    pub resource: Vec<(&'a str, String)>,
    pub profile: &'a pprof::Profile,
    /// pprof label keys renamed as OTLP attributes (`pid` → `process.pid`); others are
    /// kept as they are, and those named `None` left out (they are the resource's).
    pub rename: &'a [(&'a str, Option<&'a str>)],
}

/// The shared tables, each entry once, entry 0 the empty value.
struct Dictionary {
    d: ProfilesDictionary,
    strings: FxHashMap<String, i32>,
    mappings: FxHashMap<(u64, u64, u64, i32), i32>,
    functions: FxHashMap<(i32, i32, i32), i32>,
    locations: FxHashMap<Vec<u8>, i32>,
    stacks: FxHashMap<Vec<i32>, i32>,
    attributes: FxHashMap<(i32, Vec<u8>), i32>,
}

impl Dictionary {
    fn new() -> Dictionary {
        let mut d = Dictionary {
            d: ProfilesDictionary {
                mapping_table: vec![Mapping::default()],
                location_table: vec![Location::default()],
                function_table: vec![Function::default()],
                link_table: vec![Link::default()],
                string_table: Vec::new(),
                attribute_table: vec![KeyValueAndUnit::default()],
                stack_table: vec![Stack::default()],
            },
            strings: FxHashMap::default(),
            mappings: FxHashMap::default(),
            functions: FxHashMap::default(),
            locations: FxHashMap::default(),
            stacks: FxHashMap::default(),
            attributes: FxHashMap::default(),
        };
        d.string("");
        d
    }

    fn string(&mut self, s: &str) -> i32 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.d.string_table.len() as i32;
        self.d.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    fn intern<K: std::hash::Hash + Eq, T>(
        map: &mut FxHashMap<K, i32>,
        table: &mut Vec<T>,
        key: K,
        make: impl FnOnce() -> T,
    ) -> i32 {
        *map.entry(key).or_insert_with(|| {
            table.push(make());
            table.len() as i32 - 1
        })
    }

    fn attribute(&mut self, key: &str, value: Value) -> i32 {
        let k = self.string(key);
        let v = AnyValue { value: Some(value) };
        let bytes = v.encode_to_vec();
        Dictionary::intern(
            &mut self.attributes,
            &mut self.d.attribute_table,
            (k, bytes),
            || KeyValueAndUnit {
                key_strindex: k,
                value: Some(v),
                unit_strindex: 0,
            },
        )
    }
}

/// The index of each of a pprof profile's locations (by id) in the dictionary.
fn add_locations(dict: &mut Dictionary, p: &pprof::Profile) -> FxHashMap<u64, i32> {
    let s = |i: i64| p.string_table.get(i as usize).map_or("", String::as_str);
    let mut mapping_of: FxHashMap<u64, i32> = FxHashMap::default();
    for m in &p.mapping {
        let file = dict.string(s(m.filename));
        let key = (m.memory_start, m.memory_limit, m.file_offset, file);
        let i = Dictionary::intern(&mut dict.mappings, &mut dict.d.mapping_table, key, || {
            Mapping {
                memory_start: m.memory_start,
                memory_limit: m.memory_limit,
                file_offset: m.file_offset,
                filename_strindex: file,
                attribute_indices: Vec::new(),
            }
        });
        mapping_of.insert(m.id, i);
    }
    let mut function_of: FxHashMap<u64, i32> = FxHashMap::default();
    for f in &p.function {
        let key = (
            dict.string(s(f.name)),
            dict.string(s(f.system_name)),
            dict.string(s(f.filename)),
        );
        let i = Dictionary::intern(&mut dict.functions, &mut dict.d.function_table, key, || {
            Function {
                name_strindex: key.0,
                system_name_strindex: key.1,
                filename_strindex: key.2,
            }
        });
        function_of.insert(f.id, i);
    }
    let mut location_of = FxHashMap::default();
    for l in &p.location {
        let loc = Location {
            mapping_index: mapping_of.get(&l.mapping_id).copied().unwrap_or(0),
            address: l.address,
            lines: l
                .line
                .iter()
                .map(|line| Line {
                    function_index: function_of.get(&line.function_id).copied().unwrap_or(0),
                    line: line.line,
                })
                .collect(),
        };
        let key = loc.encode_to_vec();
        let i = Dictionary::intern(&mut dict.locations, &mut dict.d.location_table, key, || loc);
        location_of.insert(l.id, i);
    }
    location_of
}

/// The OTLP profiles of `p` (one per sample type), their tables added to `dict`.
fn profiles_of(dict: &mut Dictionary, src: &Source<'_>, profile_id: u64) -> Vec<Profile> {
    let p = src.profile;
    let s = |i: i64| p.string_table.get(i as usize).map_or("", String::as_str);
    let location_of = add_locations(dict, p);
    // Each sample's stack and attributes once, for every sample type.
    let mut shaped = Vec::with_capacity(p.sample.len());
    for sample in &p.sample {
        let locations: Vec<i32> = sample
            .location_id
            .iter()
            .map(|id| location_of.get(id).copied().unwrap_or(0))
            .collect();
        let stack = Dictionary::intern(
            &mut dict.stacks,
            &mut dict.d.stack_table,
            locations.clone(),
            || Stack {
                location_indices: locations,
            },
        );
        let mut attrs = Vec::new();
        for l in &sample.label {
            let key = s(l.key);
            let key = match src.rename.iter().find(|(from, _)| *from == key) {
                Some((_, Some(to))) => to,
                Some((_, None)) => continue,
                None => key,
            };
            let value = if l.str != 0 {
                Value::String(s(l.str).to_string())
            } else {
                Value::Int(l.num)
            };
            attrs.push(dict.attribute(key, value));
        }
        shaped.push((stack, attrs));
    }
    let mut out = Vec::new();
    for (col, vt) in p.sample_type.iter().enumerate() {
        let samples = p
            .sample
            .iter()
            .zip(&shaped)
            .filter_map(|(sample, (stack, attrs))| {
                let v = *sample.value.get(col)?;
                (v != 0).then(|| Sample {
                    stack_index: *stack,
                    attribute_indices: attrs.clone(),
                    values: vec![v],
                })
            })
            .collect();
        let mut id = profile_id.wrapping_add(col as u64).to_le_bytes().to_vec();
        id.extend_from_slice(&(col as u64 + 1).to_le_bytes());
        out.push(Profile {
            sample_type: Some(ValueType {
                type_strindex: dict.string(s(vt.r#type)),
                unit_strindex: dict.string(s(vt.unit)),
            }),
            samples,
            time_unix_nano: u64::try_from(p.time_nanos).unwrap_or(0),
            duration_nano: u64::try_from(p.duration_nanos).unwrap_or(0),
            period_type: p.period_type.as_ref().map(|pt| ValueType {
                type_strindex: dict.string(s(pt.r#type)),
                unit_strindex: dict.string(s(pt.unit)),
            }),
            period: p.period,
            profile_id: id,
            attribute_indices: Vec::new(),
        });
    }
    out
}

/// One request holding every source's profiles, each source a resource of its own, all
/// sharing one dictionary.
pub fn request(sources: &[Source<'_>], scope_version: &str) -> ExportProfilesServiceRequest {
    let mut dict = Dictionary::new();
    let mut resource_profiles = Vec::new();
    for (i, src) in sources.iter().enumerate() {
        let seed = u64::try_from(src.profile.time_nanos)
            .unwrap_or(0)
            .wrapping_mul(31)
            .wrapping_add(i as u64 * 1_000_003);
        let profiles = profiles_of(&mut dict, src, seed);
        resource_profiles.push(ResourceProfiles {
            resource: Some(Resource {
                attributes: src
                    .resource
                    .iter()
                    .map(|(k, v)| KeyValue {
                        key: (*k).to_string(),
                        value: Some(AnyValue {
                            value: Some(Value::String(v.clone())),
                        }),
                    })
                    .collect(),
            }),
            scope_profiles: vec![ScopeProfiles {
                scope: Some(InstrumentationScope {
                    name: "memperf".to_string(),
                    version: scope_version.to_string(),
                }),
                profiles,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        });
    }
    ExportProfilesServiceRequest {
        resource_profiles,
        dictionary: Some(dict.d),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::output::pprof::{Label, Sample as PSample, ValueType as PValueType};

    #[test]
    fn a_partial_success_gives_its_rejected_profiles_and_message() {
        // partial_success { rejected_profiles: 2, error_message: "old" }, as protoc encodes it.
        assert_eq!(
            partial_success(b"\x0a\x07\x08\x02\x12\x03old"),
            Some((2, "old".to_string()))
        );
        assert_eq!(
            partial_success(b"\x0a\x05\x12\x03old"),
            Some((0, "old".to_string()))
        );
        // Everything taken: no body, an empty message, an empty partial_success.
        for taken in [&b""[..], b"\x0a\x00", b"{}"] {
            assert_eq!(partial_success(taken), None, "{taken:?}");
        }
    }

    /// A pprof profile of two columns and two samples on one location.
    fn two_columns() -> pprof::Profile {
        let strings = [
            "",
            "faults",
            "count",
            "faults_bytes",
            "bytes",
            "main",
            "pid",
        ];
        pprof::Profile {
            sample_type: vec![
                PValueType { r#type: 1, unit: 2 },
                PValueType { r#type: 3, unit: 4 },
            ],
            sample: vec![
                PSample {
                    location_id: vec![1],
                    value: vec![3, 12288],
                    label: vec![Label {
                        key: 6,
                        num: 42,
                        ..Label::default()
                    }],
                },
                PSample {
                    location_id: vec![1],
                    value: vec![0, 0],
                    label: vec![],
                },
            ],
            location: vec![pprof::Location {
                id: 1,
                line: vec![pprof::Line {
                    function_id: 1,
                    line: 0,
                }],
                ..pprof::Location::default()
            }],
            function: vec![pprof::Function {
                id: 1,
                name: 5,
                system_name: 5,
                ..pprof::Function::default()
            }],
            string_table: strings.iter().map(|s| s.to_string()).collect(),
            ..pprof::Profile::default()
        }
    }

    #[test]
    fn each_column_is_a_profile_over_shared_tables_with_empty_first_entries() {
        let p = two_columns();
        let src = Source {
            resource: vec![("service.name", "app".to_string())],
            profile: &p,
            rename: &[("pid", Some("process.pid"))],
        };
        let r = request(&[src], "0.1.0");
        let d = r.dictionary.as_ref().unwrap();
        assert_eq!(d.string_table[0], "");
        assert_eq!(d.stack_table[0], Stack::default());
        assert_eq!(d.location_table[0], Location::default());
        let profiles = &r.resource_profiles[0].scope_profiles[0].profiles;
        assert_eq!(profiles.len(), 2);
        let name = |i: i32| d.string_table[i as usize].as_str();
        assert_eq!(
            name(profiles[0].sample_type.as_ref().unwrap().type_strindex),
            "faults"
        );
        assert_eq!(profiles[1].samples[0].values, vec![12288]);
        // The zero sample is left out; the other's stack is main.
        assert_eq!(profiles[0].samples.len(), 1);
        let stack = &d.stack_table[profiles[0].samples[0].stack_index as usize];
        let loc = &d.location_table[stack.location_indices[0] as usize];
        let f = &d.function_table[loc.lines[0].function_index as usize];
        assert_eq!(name(f.name_strindex), "main");
        let attr = &d.attribute_table[profiles[0].samples[0].attribute_indices[0] as usize];
        assert_eq!(name(attr.key_strindex), "process.pid");
        assert_eq!(attr.value.as_ref().unwrap().value, Some(Value::Int(42)));
        // It decodes as it was written.
        let bytes = r.encode_to_vec();
        assert_eq!(ExportProfilesServiceRequest::decode(&bytes[..]).unwrap(), r);
    }
}
