//! The recorder's handler: every record goes into the perf.data file as it came, except
//! samples whose copied user stack the session unwound, which are re-encoded with the unwound
//! callchain and without the stack bytes.

use std::io;

use crate::perfdata::PerfDataWriter;
use crate::records::{self, ParseInfo};
use crate::session::{Handler, SampleCtx, SideBand};

/// Writes what the session hands it.
pub struct RecordWriter {
    pub writer: PerfDataWriter,
    /// How each event's samples are laid out in the file (after online unwinding, without
    /// the stack and registers).
    out_infos: Vec<ParseInfo>,
    buf: Vec<u8>,
}

impl RecordWriter {
    pub fn new(writer: PerfDataWriter, out_infos: Vec<ParseInfo>) -> RecordWriter {
        RecordWriter {
            writer,
            out_infos,
            buf: Vec::with_capacity(2048),
        }
    }
}

impl Handler for RecordWriter {
    fn sample(&mut self, s: &SampleCtx<'_>) -> io::Result<()> {
        let (Some(chain), Some(info)) = (s.unwound, self.out_infos.get(s.ev)) else {
            return self.writer.write_record(s.bytes);
        };
        self.buf.clear();
        records::encode_sample(&mut self.buf, s.misc, s.sample, info, Some(chain))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        self.writer.write_record(&self.buf)
    }

    fn side_band(&mut self, r: &SideBand<'_>) -> io::Result<()> {
        self.writer.write_record(r.bytes)
    }
}
