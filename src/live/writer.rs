//! The recorder's handler: every record goes into the perf.data file as it came, except
//! samples whose copied user stack the session unwound, which are re-encoded with the unwound
//! callchain and without the stack bytes.

use std::io;

use crate::live::keep::KeptBinaries;
use crate::perfdata::{MarkLog, PerfDataWriter, RecoveredMark};
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
    /// feature section (readers mark those frames): in a temporary file beside the
    /// recording, not in memory (see `perfdata::MarkLog`).
    pub recovered: MarkLog,
    /// The executable files mapped, learned at their first MMAP2: their records are written
    /// with their build-ids, and the files kept while they are recorded.
    pub kept: KeptBinaries,
}

impl RecordWriter {
    /// Whether event `ev`'s samples are written with the callchain an unwind makes (not
    /// those whose stack copy is kept as data, `Sampling::keep_stack`).
    pub fn wants_unwind(&self, ev: usize) -> bool {
        self.out_infos
            .get(ev)
            .is_some_and(|i| i.sample_type & crate::abi::PERF_SAMPLE_CALLCHAIN != 0)
    }

    /// `dir`: the recording's directory, where the marks' temporary file goes (else the
    /// temporary directory).
    pub fn new(
        writer: PerfDataWriter,
        out_infos: Vec<ParseInfo>,
        dir: Option<&std::path::Path>,
    ) -> RecordWriter {
        RecordWriter {
            writer,
            out_infos,
            buf: Vec::with_capacity(2048),
            recovered: MarkLog::new(dir),
            kept: KeptBinaries::default(),
        }
    }
}

impl Handler for RecordWriter {
    fn sample(&mut self, s: &SampleCtx<'_>) -> io::Result<()> {
        if let (Some(first), Some(time), Some(tid)) = (s.recovered, s.sample.time, s.sample.tid) {
            self.recovered.push(RecoveredMark { time, tid, first });
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
        let build_id = self.kept.mmap_build_id(r);
        if r.canonical_id.is_none() && build_id.is_none() {
            return self.writer.write_record(r.bytes);
        }
        // A record of an event opened again during the run: the file names the event by
        // its first ids only, so the record's id becomes one of them.
        match r.canonical_id {
            Some(id) => renamed(r.bytes, id, &mut self.buf),
            None => {
                self.buf.clear();
                self.buf.extend_from_slice(r.bytes);
            }
        }
        if let Some(build_id) = build_id {
            with_build_id(&mut self.buf, build_id);
        }
        self.writer.write_record(&self.buf)
    }
}

/// Offset of an MMAP2 record's device, inode and generation (header, pid, tid, addr, len,
/// pgoff), the 24 bytes that hold a build-id instead under `PERF_RECORD_MISC_MMAP_BUILD_ID`.
const MMAP2_FILE_ID: std::ops::Range<usize> = 40..64;

/// Turns the MMAP2 record `rec` into its `PERF_RECORD_MISC_MMAP_BUILD_ID` form, with
/// `build_id` (its size byte, 3 bytes of padding, the id padded to 20) where the device and
/// inode were: what the kernel writes for perf's `--buildid-mmap`, so that a reader keys the
/// mapping by the build of the file it mapped, not by a path another file may hold now. An
/// id over 20 bytes does not fit and leaves the record as it was.
fn with_build_id(rec: &mut [u8], build_id: &[u8]) {
    use perf_event_open_sys::bindings::PERF_RECORD_MISC_MMAP_BUILD_ID;
    if build_id.len() > 20 || rec.len() < MMAP2_FILE_ID.end {
        return;
    }
    let mut area = [0u8; 24];
    area[0] = build_id.len() as u8;
    area[4..4 + build_id.len()].copy_from_slice(build_id);
    rec[MMAP2_FILE_ID].copy_from_slice(&area);
    let misc = u16::from_ne_bytes([rec[4], rec[5]]) | PERF_RECORD_MISC_MMAP_BUILD_ID as u16;
    rec[4..6].copy_from_slice(&misc.to_ne_bytes());
}

/// `bytes`, a side-band record of an event opened again, into `out` with `id` (one of the
/// event's first ids) wherever the record names its event: the last word of the sample_id
/// trailer (PERF_SAMPLE_IDENTIFIER), the first word of a LOST record's body, and the `id`
/// after the time in a THROTTLE or UNTHROTTLE record's (perf finds the event by it).
fn renamed(bytes: &[u8], id: u64, out: &mut Vec<u8>) {
    use perf_event_open_sys::bindings::{
        PERF_RECORD_LOST, PERF_RECORD_THROTTLE, PERF_RECORD_UNTHROTTLE,
    };
    out.clear();
    out.extend_from_slice(bytes);
    let n = out.len();
    if n < 16 {
        return;
    }
    out[n - 8..].copy_from_slice(&id.to_ne_bytes());
    let body_id = match u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) {
        PERF_RECORD_LOST => 8..16,
        PERF_RECORD_THROTTLE | PERF_RECORD_UNTHROTTLE => 16..24,
        _ => return,
    };
    // A body too short for its id is written as it came.
    if body_id.end <= n - 8 {
        out[body_id].copy_from_slice(&id.to_ne_bytes());
    }
}

#[cfg(test)]
mod tests {
    use perf_event_open_sys::bindings as b;

    use super::renamed;

    fn record(ty: u32, words: &[u64]) -> Vec<u8> {
        let mut r = ty.to_ne_bytes().to_vec();
        r.extend_from_slice(&0u16.to_ne_bytes());
        r.extend_from_slice(
            &u16::try_from(8 + 8 * words.len())
                .unwrap_or(0)
                .to_ne_bytes(),
        );
        for w in words {
            r.extend_from_slice(&w.to_ne_bytes());
        }
        r
    }

    #[test]
    fn a_record_of_an_event_opened_again_names_its_first_id_everywhere() {
        let mut out = Vec::new();
        // THROTTLE: time, id, stream_id, then the trailer (tid, time, identifier here).
        let throttle = record(b::PERF_RECORD_THROTTLE, &[100, 77, 78, 5, 100, 77]);
        renamed(&throttle, 7, &mut out);
        assert_eq!(
            out,
            record(b::PERF_RECORD_THROTTLE, &[100, 7, 78, 5, 100, 7])
        );
        let lost = record(b::PERF_RECORD_LOST, &[77, 3, 100, 77]);
        renamed(&lost, 7, &mut out);
        assert_eq!(out, record(b::PERF_RECORD_LOST, &[7, 3, 100, 7]));
        let exit = record(b::PERF_RECORD_EXIT, &[1, 1, 1, 1, 100, 77]);
        renamed(&exit, 7, &mut out);
        assert_eq!(out, record(b::PERF_RECORD_EXIT, &[1, 1, 1, 1, 100, 7]));
        // Too short to hold its id: only the trailer's word changes.
        let short = record(b::PERF_RECORD_UNTHROTTLE, &[77]);
        renamed(&short, 7, &mut out);
        assert_eq!(out, record(b::PERF_RECORD_UNTHROTTLE, &[7]));
    }

    #[test]
    fn an_mmap2_with_a_device_and_inode_becomes_its_build_id_form() {
        use crate::records::{Mmap2Fields, ParseInfo, SampleId, encode_mmap2};
        let info = ParseInfo::default();
        let sid = SampleId::default();
        let id = [0xabu8; 20];
        let fields = Mmap2Fields {
            pid: 7,
            tid: 7,
            addr: 0x1000,
            len: 0x2000,
            pgoff: 0,
            maj: 8,
            min: 1,
            ino: 1234,
            ino_generation: 5,
            build_id: None,
            prot: libc::PROT_READ as u32 | libc::PROT_EXEC as u32,
            flags: 2,
            filename: b"/usr/bin/prog",
        };
        let mut rec = Vec::new();
        encode_mmap2(&mut rec, &fields, &sid, &info);
        super::with_build_id(&mut rec, &id);
        let mut want = Vec::new();
        let with_id = Mmap2Fields {
            build_id: Some(&id),
            ..fields
        };
        encode_mmap2(&mut want, &with_id, &sid, &info);
        assert_eq!(rec, want);
        // An id that does not fit leaves the record as it was.
        let mut long = Vec::new();
        encode_mmap2(&mut long, &fields, &sid, &info);
        let before = long.clone();
        super::with_build_id(&mut long, &[1u8; 32]);
        assert_eq!(long, before);
    }
}
