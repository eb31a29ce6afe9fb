//! Writes perf.data files (PERFILE2, file mode). The header is valid from the first byte:
//! it names the attrs and the data section, whose size [`PerfDataWriter::checkpoint`] keeps
//! current as records are flushed, so a recording killed at any moment (SIGKILL, OOM, a full
//! disk) reads up to its last flush; [`PerfDataWriter::finish`] adds the feature sections and
//! the final header.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use super::{
    ATTR_SIZE_MAX, EventDesc, FILE_HEADER_SIZE, Features, MarkLog, PERF_MAGIC, attr_file_bytes,
    attr_min_size,
};
use crate::abi::HEADER_MEMPERF_RECOVERED;

/// PERF_RECORD_EVENT_UPDATE of type NAME: the event of sample id `id` is `name` (NUL
/// terminated, padded to 8 bytes, as perf writes it).
pub(super) fn event_name_record(id: u64, name: &str) -> Vec<u8> {
    let mut body = Vec::with_capacity(24 + name.len());
    body.extend_from_slice(&super::PERF_EVENT_UPDATE__NAME.to_ne_bytes());
    body.extend_from_slice(&id.to_ne_bytes());
    // A record's size is 16 bits: a longer name is cut (EVENT_DESC keeps it whole).
    body.extend_from_slice(&name.as_bytes()[..name.len().min(4096)]);
    body.resize((body.len() + 1).next_multiple_of(8), 0);
    let size = u16::try_from(8 + body.len()).unwrap_or(u16::MAX);
    let mut rec = Vec::with_capacity(usize::from(size));
    rec.extend_from_slice(&crate::abi::PERF_RECORD_EVENT_UPDATE.to_ne_bytes());
    rec.extend_from_slice(&0u16.to_ne_bytes());
    rec.extend_from_slice(&size.to_ne_bytes());
    rec.extend_from_slice(&body);
    rec
}

/// Streams records into a perf.data file; [`PerfDataWriter::finish`] makes it valid.
pub struct PerfDataWriter {
    out: BufWriter<File>,
    attrs_offset: u64,
    attr_size: usize,
    data_offset: u64,
    data_size: u64,
    events: Vec<EventDesc>,
}

impl std::fmt::Debug for PerfDataWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerfDataWriter")
            .field("data_offset", &self.data_offset)
            .field("data_size", &self.data_size)
            .field("events", &self.events)
            .finish()
    }
}

fn section(v: &mut Vec<u8>, offset: u64, size: u64) {
    v.extend_from_slice(&offset.to_ne_bytes());
    v.extend_from_slice(&size.to_ne_bytes());
}

/// Where the header keeps the data section's size.
const DATA_SIZE_OFFSET: u64 = 48;

/// Creates a recording as a tool run by root must: readable by its owner only (0600, as perf
/// does: a recording holds stack bytes, which can hold anything the process had in memory),
/// never through a symbolic link, never over a file that exists (the caller moves an old
/// recording aside first), so that nobody can point the recorder at a file of theirs.
pub fn create_output(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Why an existing path may not be moved aside and replaced by a recording: a symbolic link
/// (it would point the recorder elsewhere), something else than a regular file, or a file
/// another user owns. `None` when it may.
pub fn unsafe_to_replace(meta: &std::fs::Metadata) -> Option<String> {
    let ft = meta.file_type();
    if ft.is_symlink() {
        return Some("it is a symbolic link, which memperf does not write through".to_string());
    }
    if !ft.is_file() {
        return Some("it is not a regular file".to_string());
    }
    let euid = crate::sys::effective_uid();
    if meta.uid() != euid {
        return Some(format!(
            "it belongs to uid {}, not to the user recording (uid {euid})",
            meta.uid()
        ));
    }
    None
}

impl PerfDataWriter {
    /// Creates `path` (see [`create_output`]) and starts a recording in it.
    pub fn create(path: &Path, events: Vec<EventDesc>) -> io::Result<PerfDataWriter> {
        PerfDataWriter::new(create_output(path)?, events)
    }

    /// Writes a valid header (data size 0, no features yet), the id arrays and the attrs
    /// section into `file`, and positions it at the start of the data section.
    pub fn new(file: File, events: Vec<EventDesc>) -> io::Result<PerfDataWriter> {
        let attr_size = events
            .iter()
            .map(|e| attr_min_size(&e.attr))
            .max()
            .unwrap_or(super::ATTR_SIZE_VER7)
            .min(ATTR_SIZE_MAX);
        let out = BufWriter::with_capacity(256 * 1024, file);
        let mut pos = FILE_HEADER_SIZE;
        let mut id_sections = Vec::with_capacity(events.len());
        for e in &events {
            let size = 8 * e.ids.len() as u64;
            id_sections.push((pos, size));
            pos += size;
        }
        let attrs_offset = pos;
        let mut attrs = Vec::new();
        for (e, &(off, size)) in events.iter().zip(&id_sections) {
            attrs.extend_from_slice(&attr_file_bytes(&e.attr, attr_size));
            section(&mut attrs, off, size);
        }
        let data_offset = attrs_offset + attrs.len() as u64;
        let mut w = PerfDataWriter {
            out,
            attrs_offset,
            attr_size,
            data_offset,
            data_size: 0,
            events,
        };
        let header = w.header([0; 4]);
        w.out.write_all(&header)?;
        for e in &w.events {
            for id in &e.ids {
                w.out.write_all(&id.to_ne_bytes())?;
            }
        }
        w.out.write_all(&attrs)?;
        // The events' names are in a feature section written at the end; a recording
        // killed before then names them by these (perf's pipe mode does the same).
        let names: Vec<Vec<u8>> = w
            .events
            .iter()
            .filter(|e| !e.name.is_empty())
            .filter_map(|e| Some(event_name_record(*e.ids.first()?, &e.name)))
            .collect();
        for rec in &names {
            w.write_record(rec)?;
        }
        // The header, attrs and names reach the file now: a recording killed before its
        // first checkpoint still names its events.
        w.out.flush()?;
        Ok(w)
    }

    /// `struct perf_file_header` for the data written so far and these feature bits.
    fn header(&self, bitmap: [u64; 4]) -> Vec<u8> {
        let mut h = Vec::with_capacity(FILE_HEADER_SIZE as usize);
        h.extend_from_slice(&PERF_MAGIC);
        h.extend_from_slice(&FILE_HEADER_SIZE.to_ne_bytes());
        let entry = self.attr_size as u64 + 16;
        h.extend_from_slice(&entry.to_ne_bytes());
        section(&mut h, self.attrs_offset, entry * self.events.len() as u64);
        section(&mut h, self.data_offset, self.data_size);
        section(&mut h, 0, 0); // event_types
        bitmap
            .iter()
            .for_each(|w| h.extend_from_slice(&w.to_ne_bytes()));
        h
    }

    /// Flushes the records written so far and makes the header's data size count them, so
    /// that a recording killed after this reads up to here (memperf reads past it too: see
    /// the reader's recovery of unfinished files). Cheap enough to call once a second.
    pub fn checkpoint(&mut self) -> io::Result<()> {
        self.out.flush()?;
        self.out
            .get_ref()
            .write_all_at(&self.data_size.to_ne_bytes(), DATA_SIZE_OFFSET)
    }

    /// Appends one complete record (header included).
    pub fn write_record(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)?;
        self.data_size += bytes.len() as u64;
        Ok(())
    }

    /// Bytes of records written so far.
    pub fn data_bytes(&self) -> u64 {
        self.data_size
    }

    /// Writes the feature sections after the data, then the final header; syncs the file.
    /// Returns the total file size.
    pub fn finish(self, features: &Features) -> io::Result<u64> {
        self.finish_with_marks(features, None)
    }

    /// [`Self::finish`], the recovered marks' section copied from `marks` (when it holds
    /// any, in place of `features.recovered_marks`).
    pub fn finish_with_marks(
        mut self,
        features: &Features,
        marks: Option<&MarkLog>,
    ) -> io::Result<u64> {
        let mut sections = features.encode(&self.events, self.attr_size);
        let marks = marks.filter(|m| !m.is_empty());
        if marks.is_some() {
            // Its body is streamed from the log below, at its place in bit order.
            sections.retain(|(bit, _)| *bit != HEADER_MEMPERF_RECOVERED);
            sections.push((HEADER_MEMPERF_RECOVERED, Vec::new()));
            sections.sort_by_key(|&(bit, _)| bit);
        }
        let len = |bit: u32, body: &Vec<u8>| match marks {
            Some(m) if bit == HEADER_MEMPERF_RECOVERED => m.section_len(),
            _ => body.len() as u64,
        };
        let table_offset = self.data_offset + self.data_size;
        let mut pos = table_offset + 16 * sections.len() as u64;
        let mut table = Vec::new();
        let mut bitmap = [0u64; 4];
        for (bit, body) in &sections {
            section(&mut table, pos, len(*bit, body));
            pos += len(*bit, body);
            bitmap[(*bit / 64) as usize] |= 1 << (bit % 64);
        }
        self.out.write_all(&table)?;
        for (bit, body) in &sections {
            match marks {
                Some(m) if *bit == HEADER_MEMPERF_RECOVERED => m.write_section(&mut self.out)?,
                _ => self.out.write_all(body)?,
            }
        }

        let h = self.header(bitmap);
        self.out.flush()?;
        let mut file = self.out.into_inner().map_err(|e| e.into_error())?;
        file.seek(SeekFrom::Start(0))?;
        file.write_all(&h)?;
        // A device (`-o /dev/null`) has nothing to make durable, and fsync on it fails.
        if file.metadata()?.is_file() {
            file.sync_all()?;
        }
        Ok(pos)
    }
}
