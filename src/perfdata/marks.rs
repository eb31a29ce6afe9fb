//! The recovered marks of a recording being written (`HEADER_MEMPERF_RECOVERED`: one per
//! sample whose stack was finished from the live process), kept in an unnamed temporary
//! file as they come rather than in memory: a recording of hours marks millions of samples,
//! 16 bytes each, and the recorder's memory must not grow with them. The section is copied
//! from that file when the recording finishes ([`super::PerfDataWriter::finish_with_marks`]).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use super::RecoveredMark;

/// Marks held in memory before they go to the file (64 KiB).
const BATCH: usize = 4096;

/// Without a temporary file (no directory takes one), at most this many marks are held in
/// memory (16 MiB); the others are counted in [`MarkLog::dropped`].
pub const MAX_IN_MEMORY: usize = 1 << 20;

/// Marks in the section's layout (see `features::encode_marks`): `{ u64 time; u32 tid;
/// u32 first; }` each, the count written in front when the section is.
pub struct MarkLog {
    /// Encoded marks not yet in the file.
    buf: Vec<u8>,
    file: Option<File>,
    /// Whether the file takes more (a write failed: a full disk).
    writable: bool,
    /// Marks in the file.
    in_file: u64,
    /// Whether the file was tried (it is opened at the first full batch).
    tried: bool,
    /// Where the file is made first (the recording's directory), then the temporary one.
    dirs: Vec<std::path::PathBuf>,
    /// Marks that could not be kept; their frames are written all the same, unmarked.
    pub dropped: u64,
}

impl MarkLog {
    /// A log whose file goes in `dir` (the recording's), else in the temporary directory.
    pub fn new(dir: Option<&Path>) -> MarkLog {
        let mut dirs: Vec<_> = dir.map(Path::to_path_buf).into_iter().collect();
        dirs.push(std::env::temp_dir());
        MarkLog {
            buf: Vec::new(),
            file: None,
            writable: false,
            in_file: 0,
            tried: false,
            dirs,
            dropped: 0,
        }
    }

    /// The marks kept.
    pub fn len(&self) -> u64 {
        self.in_file + (self.buf.len() / 16) as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of memory the log holds.
    pub fn memory(&self) -> usize {
        self.buf.capacity()
    }

    pub fn push(&mut self, m: RecoveredMark) {
        if self.tried && !self.writable && self.buf.len() >= 16 * MAX_IN_MEMORY {
            self.dropped += 1;
            return;
        }
        self.buf.extend_from_slice(&m.time.to_ne_bytes());
        self.buf.extend_from_slice(&m.tid.to_ne_bytes());
        self.buf.extend_from_slice(&m.first.to_ne_bytes());
        if self.buf.len() >= 16 * BATCH {
            self.spill();
        }
    }

    /// Moves the batch to the file, opening it the first time; without one (or when a write
    /// fails) the marks stay in memory, up to [`MAX_IN_MEMORY`].
    fn spill(&mut self) {
        if !self.tried {
            self.tried = true;
            self.file = self.dirs.iter().find_map(|d| unnamed_file(d).ok());
            self.writable = self.file.is_some();
        }
        let Some(f) = self.file.as_ref().filter(|_| self.writable) else {
            return;
        };
        match f.write_all_at(&self.buf, 16 * self.in_file) {
            Ok(()) => {
                self.in_file += (self.buf.len() / 16) as u64;
                self.buf.clear();
            }
            // A full disk: what the file holds stays, the rest is held in memory.
            Err(_) => self.writable = false,
        }
    }

    /// The section's size: the count, then the marks.
    pub(super) fn section_len(&self) -> u64 {
        8 + 16 * self.len()
    }

    /// Writes the section: the count, the marks of the file in their order, then those in
    /// memory.
    pub(super) fn write_section(&self, out: &mut impl Write) -> io::Result<()> {
        out.write_all(&self.len().to_ne_bytes())?;
        if self.in_file > 0 {
            let f = self.file.as_ref().ok_or_else(|| {
                io::Error::other("the temporary file of the recovered marks went away")
            })?;
            let mut chunk = vec![0u8; 16 * BATCH];
            let end = 16 * self.in_file;
            let mut at = 0;
            while at < end {
                let n = chunk.len().min((end - at) as usize);
                f.read_exact_at(&mut chunk[..n], at)?;
                out.write_all(&chunk[..n])?;
                at += n as u64;
            }
        }
        out.write_all(&self.buf)
    }
}

/// An unnamed file in `dir` (`O_TMPFILE`): gone with memperf, whatever ends it.
fn unnamed_file(dir: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE)
        .open(dir)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn mark(i: u64) -> RecoveredMark {
        RecoveredMark {
            time: 1_000_000 + i,
            tid: (i % 7) as u32,
            first: (i % 5) as u32,
        }
    }

    #[test]
    fn marks_past_a_batch_go_to_the_file_and_come_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = MarkLog::new(Some(dir.path()));
        let n = 3 * BATCH as u64 + 17;
        for i in 0..n {
            log.push(mark(i));
        }
        assert!(
            log.file.is_some(),
            "no temporary file in {}",
            dir.path().display()
        );
        assert_eq!(log.len(), n);
        // Only the last partial batch is in memory.
        assert_eq!(log.buf.len(), 16 * 17);
        // Nothing is left in the directory: the file has no name.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let mut out = Vec::new();
        log.write_section(&mut out).unwrap();
        assert_eq!(out.len() as u64, log.section_len());
        let expect = crate::perfdata::features::encode_marks(&(0..n).map(mark).collect::<Vec<_>>());
        assert_eq!(out, expect);
    }

    #[test]
    fn without_a_directory_marks_stay_in_memory() {
        let mut log = MarkLog::new(Some(Path::new("/nonexistent/memperf")));
        log.dirs.truncate(1);
        for i in 0..(BATCH as u64 + 1) {
            log.push(mark(i));
        }
        assert!(log.file.is_none());
        assert_eq!(log.len(), BATCH as u64 + 1);
        let mut out = Vec::new();
        log.write_section(&mut out).unwrap();
        assert_eq!(out.len() as u64, log.section_len());
    }
}
