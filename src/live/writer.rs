//! The recorder's handler: every record goes into the perf.data file as it came, except
//! samples whose copied user stack the session unwound, which are re-encoded with the unwound
//! callchain and without the stack bytes.

use std::io;

use crate::perfdata::{PerfDataWriter, RecoveredMark};
use crate::records::{self, ParseInfo};
use crate::session::{Handler, SampleCtx, SideBand};

/// Writes what the session hands it.
pub struct RecordWriter {
    pub writer: PerfDataWriter,
    /// How each event's samples are laid out in the file (after online unwinding, without
    /// the stack and registers).
    out_infos: Vec<ParseInfo>,
    buf: Vec<u8>,
    /// The samples whose stacks were finished from the live process, for the file's
    /// feature section (readers mark those frames), at most [`MAX_MARKS`]; the others are
    /// counted (their frames are written all the same, unmarked).
    pub recovered: Vec<RecoveredMark>,
    pub recovered_unmarked: u64,
}

/// Marks kept for one recording (16 MiB): memory stays bounded on a recording of days.
pub const MAX_MARKS: usize = 1 << 20;

impl RecordWriter {
    pub fn new(writer: PerfDataWriter, out_infos: Vec<ParseInfo>) -> RecordWriter {
        RecordWriter {
            writer,
            out_infos,
            buf: Vec::with_capacity(2048),
            recovered: Vec::new(),
            recovered_unmarked: 0,
        }
    }
}

impl Handler for RecordWriter {
    fn sample(&mut self, s: &SampleCtx<'_>) -> io::Result<()> {
        if let (Some(first), Some(time), Some(tid)) = (s.recovered, s.sample.time, s.sample.tid) {
            if self.recovered.len() < MAX_MARKS {
                self.recovered.push(RecoveredMark { time, tid, first });
            } else {
                self.recovered_unmarked += 1;
            }
        }
        let Some(info) = self.out_infos.get(s.ev) else {
            return self.writer.write_record(s.bytes);
        };
        if s.unwound.is_none() && s.corrected_id.is_none() {
            return self.writer.write_record(s.bytes);
        }
        // The id of the event the session attributed the sample to, not the one the kernel
        // wrote, so that readers of the file attribute it the same way.
        let fixed;
        let sample = match s.corrected_id {
            Some(id) => {
                fixed = records::Sample {
                    identifier: Some(id),
                    id: s.sample.id.map(|_| id),
                    ..*s.sample
                };
                &fixed
            }
            None => s.sample,
        };
        self.buf.clear();
        records::encode_sample(&mut self.buf, s.misc, sample, info, s.unwound)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        self.writer.write_record(&self.buf)
    }

    fn side_band(&mut self, r: &SideBand<'_>) -> io::Result<()> {
        let Some(id) = r.canonical_id else {
            return self.writer.write_record(r.bytes);
        };
        // A record of an event opened again during the run: the file names the event by
        // its first ids only, so the record's id becomes one of them. The id is the last
        // word of the sample_id trailer (PERF_SAMPLE_IDENTIFIER), and a LOST record names
        // its event in its first word too.
        self.buf.clear();
        self.buf.extend_from_slice(r.bytes);
        let n = self.buf.len();
        if n >= 16 {
            self.buf[n - 8..].copy_from_slice(&id.to_ne_bytes());
            if u32::from_ne_bytes([r.bytes[0], r.bytes[1], r.bytes[2], r.bytes[3]])
                == perf_event_open_sys::bindings::PERF_RECORD_LOST
            {
                self.buf[8..16].copy_from_slice(&id.to_ne_bytes());
            }
        }
        self.writer.write_record(&self.buf)
    }
}
