//! The binaries the recorded processes map, kept while they are recorded.
//!
//! A report finds a binary by the path its process mapped, after the fact: a program
//! deleted while it ran (a package upgrade, a test that removes its own build) is gone by
//! then, and one replaced at the same path (an install renaming a new build over the old)
//! is another file, whose names would be wrong for the old build's frames. So each
//! executable file is learned once, at the first MMAP2 record that maps it (by its device
//! and inode): it is opened through the process's `/proc/PID/map_files` (the very file it
//! maps, deleted or not; see [`crate::mapped::open`]), its build-id read, and the record
//! written with that build-id instead of the device and inode (the form of perf's
//! `--buildid-mmap`), so that each process's frames are named from its own build; the file
//! is held open. At the end, every file whose path no longer leads to it is copied into the
//! build-id cache (`buildid::cache_dir`), where the report looks for a recorded build-id.
//!
//! Cost and bounds: one open and one read of an ELF header and its notes per distinct file
//! (not per record, not per sample), on the reading thread within
//! [`crate::mapped::READ_TIMEOUT`] (a device whose read timed out is not read again). At most
//! [`max_held`] files are held open, the newest: an older one is let go (a long-lived process
//! still maps it, and its `map_files` reaches it at the end while it lives). The table of
//! files learned is bounded by [`MAX_FILES`].

use std::collections::VecDeque;
use std::fs::File;
use std::path::PathBuf;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::mapped::{DevIno, MappedFile};
use crate::session::SideBand;

/// Files learned at most, before those not held open are forgotten (learned again if mapped
/// again): a recording of days that sees builds come and go stays small.
const MAX_FILES: usize = 16 * 1024;

/// How many files are held open at most: 256, or an eighth of the open-file limit when
/// that is lower (the recorder's own events and rings need the rest).
fn max_held() -> usize {
    let limit = crate::sys::open_files_limit() / 8;
    usize::try_from(limit).unwrap_or(usize::MAX).min(256)
}

/// One executable file, as first mapped.
struct Learned {
    build_id: Option<Box<[u8]>>,
    /// The path of the mapping that first mapped it, as the kernel gave it.
    path: Box<[u8]>,
    /// That mapping, to reach the file through `map_files` at the end when it is not held.
    pid: u32,
    start: u64,
    len: u64,
    file: Option<File>,
}

/// What became of the files learned, for the recording's stats.
#[derive(Debug, Default, Clone, Copy)]
pub struct KeepStats {
    /// Distinct executable files whose build-id was read.
    pub learned: u64,
    /// Files that could not be opened or read in time.
    pub unreadable: u64,
    /// Files let go to stay within the bound on files held open.
    pub released: u64,
    /// Deleted or replaced files copied into the build-id cache at the end.
    pub kept: u64,
    /// Deleted or replaced files of processes with samples that could not be copied.
    pub lost: u64,
}

/// A file of a process with samples, as the end of the recording left it.
pub struct KeptFile {
    pub pid: u32,
    pub path: Vec<u8>,
    pub build_id: Vec<u8>,
}

/// The executable files learned, by device and inode.
pub struct KeptBinaries {
    files: FxHashMap<DevIno, Learned>,
    /// The files held open, oldest first.
    held: VecDeque<DevIno>,
    max_held: usize,
    /// Devices a read timed out on (a hung mount): not read again.
    hung: FxHashSet<(u32, u32)>,
    pub stats: KeepStats,
}

impl Default for KeptBinaries {
    fn default() -> Self {
        KeptBinaries {
            files: FxHashMap::default(),
            held: VecDeque::new(),
            max_held: max_held(),
            hung: FxHashSet::default(),
            stats: KeepStats::default(),
        }
    }
}

/// The path a mapping names, without the ` (deleted)` the kernel appends once it is gone.
fn live_path(path: &[u8]) -> &[u8] {
    path.strip_suffix(b" (deleted)").unwrap_or(path)
}

/// Whether a mapping's path names a file that may be an ELF binary (not `//anon`, a memfd,
/// `[vdso]`...).
fn is_file_path(path: &[u8]) -> bool {
    path.starts_with(b"/")
        && !path.starts_with(b"//anon")
        && !path.starts_with(b"/memfd:")
        && !path.starts_with(b"/dev/")
}

impl KeptBinaries {
    /// The build-id to write in `r` when it is an executable file's MMAP2 with a device and
    /// inode, learning the file on its first mapping.
    pub fn mmap_build_id(&mut self, r: &SideBand<'_>) -> Option<&[u8]> {
        let Some(crate::records::Record::Mmap2 {
            pid,
            addr,
            len,
            maj,
            min,
            ino,
            build_id: None,
            prot,
            filename,
            ..
        }) = r.rec
        else {
            return None;
        };
        let misc = u16::from_ne_bytes([*r.bytes.get(4)?, *r.bytes.get(5)?]);
        let exec = crate::session::executable(misc, Some(*prot));
        if !exec || *pid == u32::MAX || *ino == 0 || !is_file_path(filename) {
            return None;
        }
        let key = (*maj, *min, *ino);
        if !self.files.contains_key(&key) {
            let mapping = MappedFile {
                pid: *pid,
                start: *addr,
                len: *len,
                path: PathBuf::from(
                    <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(live_path(
                        filename,
                    )),
                ),
                dev_ino: Some(key),
            };
            self.learn(key, mapping, filename);
        }
        self.files.get(&key)?.build_id.as_deref()
    }

    /// Reads the build-id of the file of `mapping` and holds it open.
    fn learn(&mut self, key: DevIno, mapping: MappedFile, raw_path: &[u8]) {
        if self.files.len() >= MAX_FILES {
            let held: FxHashSet<DevIno> = self.held.iter().copied().collect();
            self.files.retain(|k, _| held.contains(k));
        }
        let (pid, start, len) = (mapping.pid, mapping.start, mapping.len);
        let read = if self.hung.contains(&(key.0, key.1)) {
            None
        } else {
            let read = crate::mapped::bounded(crate::mapped::READ_TIMEOUT, move || {
                let file = crate::mapped::open(&mapping)?;
                let id = crate::buildid::open_file_build_id(&file);
                Ok::<_, std::io::Error>((file, id))
            });
            if read.is_none() {
                self.hung.insert((key.0, key.1));
            }
            read
        };
        let (file, build_id) = match read {
            Some(Ok((file, Some(id)))) => (Some(file), Some(id.into_boxed_slice())),
            // Not an ELF file (a jitdump marker, a script's interpreter is mapped instead).
            Some(Ok((_, None))) => (None, None),
            _ => {
                self.stats.unreadable += 1;
                (None, None)
            }
        };
        if build_id.is_some() {
            self.stats.learned += 1;
        }
        if file.is_some() {
            self.held.push_back(key);
            while self.held.len() > self.max_held {
                let Some(old) = self.held.pop_front() else {
                    break;
                };
                if let Some(l) = self.files.get_mut(&old) {
                    l.file = None;
                    self.stats.released += 1;
                }
            }
        }
        self.files.insert(
            key,
            Learned {
                build_id,
                path: raw_path.into(),
                pid,
                start,
                len,
                file,
            },
        );
    }

    /// At the end of the recording: the files learned whose path is one of `hit` (the
    /// executable files of the processes that had samples), each with its build-id; those
    /// whose path no longer leads to them (deleted, or replaced by another file) are first
    /// copied into the build-id cache, each copy within `timeout`.
    pub fn finish(
        &mut self,
        hit: &FxHashSet<Vec<u8>>,
        timeout: std::time::Duration,
    ) -> Vec<KeptFile> {
        let hit: FxHashSet<&[u8]> = hit.iter().map(|p| live_path(p)).collect();
        let mut out = Vec::new();
        let mut hung = false;
        for (&key, l) in &mut self.files {
            let Some(id) = l.build_id.as_deref() else {
                continue;
            };
            let path = live_path(&l.path);
            if !hit.contains(path) {
                continue;
            }
            out.push(KeptFile {
                pid: l.pid,
                path: l.path.to_vec(),
                build_id: id.to_vec(),
            });
            if still_there(path, key) {
                continue;
            }
            let copied = !hung && keep(l, id, timeout, &mut hung);
            if copied {
                self.stats.kept += 1;
            } else {
                self.stats.lost += 1;
            }
            l.file = None;
        }
        out
    }
}

/// Whether `path` still leads to the file `key` (device, inode).
fn still_there(path: &[u8], (maj, min, ino): DevIno) -> bool {
    use std::os::unix::fs::MetadataExt;
    let path =
        std::path::Path::new(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(path));
    std::fs::metadata(path)
        .is_ok_and(|m| m.ino() == ino && libc::major(m.dev()) == maj && libc::minor(m.dev()) == min)
}

/// Copies the file of `l` (with build-id `id`) into the build-id cache: from the file held
/// open, else through its first process's `map_files` while that lives and maps it still.
/// Sets `hung` when the copy took longer than `timeout` (no other is tried then).
fn keep(l: &Learned, id: &[u8], timeout: std::time::Duration, hung: &mut bool) -> bool {
    let src = match &l.file {
        Some(f) => f.try_clone().ok(),
        None => None,
    };
    let id = id.to_vec();
    let via = crate::mapped::map_files_path(l.pid, l.start, l.len);
    let done = crate::mapped::bounded(timeout, move || -> std::io::Result<()> {
        let src = match src {
            Some(f) => f,
            None => {
                let f = crate::mapped::open_regular(&via, None)?;
                // The pid may be another process's now, the address another file's.
                if crate::buildid::open_file_build_id(&f).as_deref() != Some(&id[..]) {
                    return Err(std::io::Error::other("no longer mapped"));
                }
                f
            }
        };
        crate::buildid::keep_open_in_cache(&id, &src)
    });
    match done {
        Some(Ok(())) => true,
        Some(Err(e)) => {
            eprintln!(
                "memperf: warning: failed to keep `{}` in the build-id cache: {e}",
                String::from_utf8_lossy(&l.path)
            );
            false
        }
        None => {
            *hung = true;
            false
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    #[test]
    fn a_path_leads_to_its_file_until_it_is_deleted_or_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("prog");
        std::fs::write(&p, b"one").unwrap();
        let m = std::fs::metadata(&p).unwrap();
        let key = (libc::major(m.dev()), libc::minor(m.dev()), m.ino());
        let raw = format!("{} (deleted)", p.display());
        let path = live_path(raw.as_bytes());
        assert_eq!(path, p.as_os_str().as_encoded_bytes());
        assert!(still_there(path, key));
        // Replaced as installers replace: another file renamed over it.
        let new = dir.path().join("prog.new");
        std::fs::write(&new, b"two").unwrap();
        std::fs::rename(&new, &p).unwrap();
        assert!(!still_there(path, key));
        std::fs::remove_file(&p).unwrap();
        assert!(!still_there(path, key));
    }

    #[test]
    fn only_file_paths_are_learned() {
        assert!(is_file_path(b"/usr/bin/true"));
        for p in [
            &b"//anon"[..],
            b"/memfd:jit (deleted)",
            b"[vdso]",
            b"",
            b"/dev/zero",
        ] {
            assert!(!is_file_path(p), "{}", String::from_utf8_lossy(p));
        }
    }
}
