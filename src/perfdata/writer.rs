//! Writes perf.data files (PERFILE2, file mode): header placeholder first, header last.

use std::fs::File;
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::path::Path;

use super::{
    ATTR_SIZE_MAX, EventDesc, FILE_HEADER_SIZE, Features, PERF_MAGIC, attr_file_bytes,
    attr_min_size,
};

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

impl PerfDataWriter {
    /// Creates `path`, writes a placeholder header, the id arrays and the attrs section, and
    /// positions the file at the start of the data section.
    pub fn create(path: &Path, events: Vec<EventDesc>) -> io::Result<PerfDataWriter> {
        let attr_size = events
            .iter()
            .map(|e| attr_min_size(&e.attr))
            .max()
            .unwrap_or(super::ATTR_SIZE_VER7)
            .min(ATTR_SIZE_MAX);
        let mut out = BufWriter::new(File::create(path)?);
        out.write_all(&[0u8; FILE_HEADER_SIZE as usize])?;
        let mut pos = FILE_HEADER_SIZE;
        let mut id_sections = Vec::with_capacity(events.len());
        for e in &events {
            let size = 8 * e.ids.len() as u64;
            for id in &e.ids {
                out.write_all(&id.to_ne_bytes())?;
            }
            id_sections.push((pos, size));
            pos += size;
        }
        let attrs_offset = pos;
        for (e, &(off, size)) in events.iter().zip(&id_sections) {
            let mut v = attr_file_bytes(&e.attr, attr_size);
            section(&mut v, off, size);
            out.write_all(&v)?;
            pos += v.len() as u64;
        }
        Ok(PerfDataWriter {
            out,
            attrs_offset,
            attr_size,
            data_offset: pos,
            data_size: 0,
            events,
        })
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
    pub fn finish(mut self, features: &Features) -> io::Result<u64> {
        let sections = features.encode(&self.events, self.attr_size);
        let table_offset = self.data_offset + self.data_size;
        let mut pos = table_offset + 16 * sections.len() as u64;
        let mut table = Vec::new();
        let mut bitmap = [0u64; 4];
        for (bit, body) in &sections {
            section(&mut table, pos, body.len() as u64);
            pos += body.len() as u64;
            bitmap[(*bit / 64) as usize] |= 1 << (bit % 64);
        }
        self.out.write_all(&table)?;
        for (_, body) in &sections {
            self.out.write_all(body)?;
        }

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

        self.out.flush()?;
        let mut file = self.out.into_inner().map_err(|e| e.into_error())?;
        file.seek(SeekFrom::Start(0))?;
        file.write_all(&h)?;
        file.sync_all()?;
        Ok(pos)
    }
}
