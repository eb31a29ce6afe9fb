//! Pipe-mode perf.data: what `perf record -o -` writes, to a pipe or redirected to a file.
//! A 16-byte header (magic, size 16), then records only. What a file keeps in its attrs
//! section and feature sections arrives as perf's own records instead, before the samples
//! that need it (perf's `tools/perf/util/header.c`, `perf_event__process_attr` and the
//! handlers beside it):
//!
//! - PERF_RECORD_HEADER_ATTR: a `perf_event_attr` of `attr.size` bytes, then the event's ids;
//! - PERF_RECORD_EVENT_UPDATE: `u64 type`, `u64 id`, data; type NAME names the event of `id`;
//! - PERF_RECORD_HEADER_EVENT_TYPE (obsolete): `u64` tracepoint id, `char name[64]`;
//! - PERF_RECORD_HEADER_TRACING_DATA: `u32 size`, and after the record `size` bytes of
//!   tracing data (the TRACING_DATA feature's contents, padded to 8);
//! - PERF_RECORD_HEADER_BUILD_ID: one entry of the BUILD_ID feature;
//! - PERF_RECORD_HEADER_FEATURE: `u64` feature id, then that feature section's contents.
//!
//! The stream is walked once for these; the records are then read again like a file's data
//! section, where the report passes over perf's own record types.

use super::features::{HEADER_BUILD_ID, build_id_entry};
use super::reader::default_event_name;
use super::{
    ATTR_SIZE_VER0, EventDesc, PERF_EVENT_UPDATE__NAME, PERF_RECORD_EVENT_UPDATE,
    PERF_RECORD_HEADER_ATTR, PERF_RECORD_HEADER_BUILD_ID, PERF_RECORD_HEADER_EVENT_TYPE,
    PERF_RECORD_HEADER_FEATURE, PERF_RECORD_HEADER_TRACING_DATA, PIPE_HEADER_SIZE, PerfDataError,
    RawFileRecord, ReadFeatures, RecordIter, attr_from_bytes, le_u32, le_u64,
};

/// `MAX_EVENT_NAME`: the name field of PERF_RECORD_HEADER_EVENT_TYPE.
const MAX_EVENT_NAME: usize = 64;

/// What the header records of a stream describe, gathered in stream order.
#[derive(Default)]
struct StreamHeader {
    events: Vec<EventDesc>,
    features: ReadFeatures,
    /// (sample id, name) from EVENT_UPDATE records of type NAME.
    updated_names: Vec<(u64, String)>,
    /// (tracepoint id, name) from HEADER_EVENT_TYPE records.
    tracepoint_names: Vec<(u64, String)>,
}

/// Reads the events and features of a pipe-mode stream from its records. A record that
/// cannot be read ends the walk (the data read later stops there too, with the same error);
/// a stream that describes no event before that is an error, as is a compressed one.
pub(super) fn read_header_records(
    bytes: &[u8],
) -> Result<(Vec<EventDesc>, ReadFeatures), PerfDataError> {
    let mut h = StreamHeader::default();
    let mut stopped = None;
    for rec in RecordIter::pipe(bytes) {
        match rec {
            Ok(rec) => h.handle(&rec)?,
            Err(e @ PerfDataError::Compressed { .. }) => return Err(e),
            Err(e) => {
                stopped = Some(e);
                break;
            }
        }
    }
    if h.events.is_empty() {
        return Err(PerfDataError::NoEvents(match stopped {
            Some(e) => format!("no PERF_RECORD_HEADER_ATTR record before: {e}"),
            None if bytes.len() as u64 <= PIPE_HEADER_SIZE => {
                "it ends after its 16-byte header".to_string()
            }
            None => format!(
                "no PERF_RECORD_HEADER_ATTR record in its {} bytes",
                bytes.len()
            ),
        }));
    }
    Ok(h.finish())
}

/// A NUL-terminated (or full) string field.
/// The (sample id, name) a PERF_RECORD_EVENT_UPDATE body of type NAME gives; `None` for
/// the other types (unit, scale, cpus).
pub(super) fn event_update_name(body: &[u8]) -> Option<(u64, String)> {
    (body.len() >= 16 && le_u64(body, 0) == PERF_EVENT_UPDATE__NAME)
        .then(|| (le_u64(body, 8), c_string(&body[16..])))
}

fn c_string(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

impl StreamHeader {
    fn handle(&mut self, rec: &RawFileRecord<'_>) -> Result<(), PerfDataError> {
        match rec.ty {
            PERF_RECORD_HEADER_ATTR => self.handle_attr(rec)?,
            PERF_RECORD_EVENT_UPDATE => self.handle_event_update(rec.body),
            PERF_RECORD_HEADER_EVENT_TYPE => self.handle_event_type(rec.body),
            PERF_RECORD_HEADER_TRACING_DATA => {
                self.features.tracing_data = Some(rec.payload.to_vec());
            }
            PERF_RECORD_HEADER_BUILD_ID => self.handle_build_id(rec),
            PERF_RECORD_HEADER_FEATURE => self.handle_feature(rec.body),
            _ => {}
        }
        Ok(())
    }

    /// An event: its attr (of the size the attr states; 0 means version 0) and its ids. One
    /// that does not fit its record fails the stream, as a broken attrs section fails a file.
    fn handle_attr(&mut self, rec: &RawFileRecord<'_>) -> Result<(), PerfDataError> {
        let err = |msg: String| PerfDataError::Attr {
            offset: rec.offset,
            msg,
        };
        let size = match le_u32(rec.body, 4) as usize {
            0 => ATTR_SIZE_VER0,
            n => n,
        };
        let attr_bytes = rec.body.get(..size).ok_or_else(|| {
            err(format!(
                "attr of {size} bytes does not fit in its record of {} bytes",
                rec.body.len() + 8
            ))
        })?;
        let attr = attr_from_bytes(attr_bytes).map_err(|e| match e {
            PerfDataError::Attr { msg, .. } => err(msg),
            other => err(other.to_string()),
        })?;
        let ids = rec.body[size..]
            .chunks_exact(8)
            .map(|c| le_u64(c, 0))
            .collect();
        self.events.push(EventDesc {
            name: default_event_name(attr.type_, attr.config),
            attr,
            ids,
        });
        Ok(())
    }

    fn handle_event_update(&mut self, body: &[u8]) {
        self.updated_names.extend(event_update_name(body));
    }

    fn handle_event_type(&mut self, body: &[u8]) {
        if let Some(name) = body.get(8..) {
            let name = &name[..name.len().min(MAX_EVENT_NAME)];
            self.tracepoint_names
                .push((le_u64(body, 0), c_string(name)));
        }
    }

    fn handle_build_id(&mut self, rec: &RawFileRecord<'_>) {
        match build_id_entry(rec.misc, rec.body) {
            Some(e) => self.features.build_ids.push(e),
            None => self.undecodable(HEADER_BUILD_ID),
        }
    }

    /// A feature section, decoded as a file's; BUILD_ID entries add to those of
    /// PERF_RECORD_HEADER_BUILD_ID records.
    fn handle_feature(&mut self, body: &[u8]) {
        let Some(data) = body.get(8..) else {
            return;
        };
        let Ok(bit) = u32::try_from(le_u64(body, 0)) else {
            return;
        };
        let earlier = std::mem::take(&mut self.features.build_ids);
        if self.features.decode(bit, data).is_none() {
            self.undecodable(bit);
        }
        self.features.build_ids.splice(0..0, earlier);
    }

    fn undecodable(&mut self, bit: u32) {
        if !self.features.undecodable.contains(&bit) {
            self.features.undecodable.push(bit);
        }
    }

    /// Names each event by, in rising precedence: its type and config, an obsolete
    /// HEADER_EVENT_TYPE for its tracepoint, the EVENT_DESC feature (in attr order), and the
    /// last EVENT_UPDATE for one of its ids (perf applies them in stream order, and writes
    /// EVENT_UPDATE after the features). `features.event_names` holds the result.
    fn finish(mut self) -> (Vec<EventDesc>, ReadFeatures) {
        use perf_event_open_sys::bindings::PERF_TYPE_TRACEPOINT;
        for e in &mut self.events {
            let tp = self
                .tracepoint_names
                .iter()
                .rfind(|(id, _)| e.attr.type_ == PERF_TYPE_TRACEPOINT && *id == e.attr.config);
            if let Some((_, name)) = tp {
                e.name.clone_from(name);
            }
        }
        for (e, name) in self.events.iter_mut().zip(&self.features.event_names) {
            if !name.is_empty() {
                e.name.clone_from(name);
            }
        }
        for (id, name) in self.updated_names {
            if let Some(e) = self.events.iter_mut().find(|e| e.ids.contains(&id)) {
                e.name = name;
            }
        }
        self.features.event_names = self.events.iter().map(|e| e.name.clone()).collect();
        (self.events, self.features)
    }
}
