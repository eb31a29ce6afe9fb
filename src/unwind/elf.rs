//! ELF files as framehop sees them: PT_LOAD segments, the unwind sections, the segment bias
//! of a mapping, and a cache of loaded files shared by all processes.

use std::io;
use std::ops::Range;
#[cfg(test)]
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use framehop::ExplicitModuleSectionInfo;
use object::read::ReadCache;
use object::{Object, ObjectSection, ObjectSegment, ReadRef};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::mapped::MappedFile;

/// Section bytes handed to framehop; shared by every process that maps the file.
pub(crate) type SectionData = Arc<[u8]>;

/// One PT_LOAD program header: the file range `[offset, offset + filesz)` is loaded at the
/// file-stated address (SVMA) `vaddr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LoadSegment {
    pub offset: u64,
    pub vaddr: u64,
    pub filesz: u64,
}

/// The bias (`avma - svma`, wrapping) of a mapping of `len` bytes of the file at file offset
/// `pgoff`, placed at process address `start`.
///
/// A file offset `o` inside segment `s` has SVMA `o - s.offset + s.vaddr` and AVMA
/// `start + (o - pgoff)`, so `bias = start - (s.vaddr - s.offset + pgoff)`. The segment is the
/// one whose file range overlaps `[pgoff, pgoff + len)` the most: with lld-style segments
/// whose offsets are not page-aligned, the page-rounded `pgoff` also falls inside the
/// preceding segment, and picking that one gives a wrong bias.
pub(crate) fn compute_bias(segs: &[LoadSegment], start: u64, len: u64, pgoff: u64) -> Option<u64> {
    let map_end = pgoff.saturating_add(len);
    let best = segs
        .iter()
        .filter_map(|s| {
            let lo = s.offset.max(pgoff);
            let hi = s.offset.saturating_add(s.filesz).min(map_end);
            hi.checked_sub(lo).filter(|&n| n > 0).map(|n| (n, s))
        })
        // max_by_key keeps the last of equal maxima; prefer the first segment instead.
        .fold(None::<(u64, &LoadSegment)>, |best, cand| match best {
            Some(b) if b.0 >= cand.0 => Some(b),
            _ => Some(cand),
        })?
        .1;
    Some(start.wrapping_sub(best.vaddr.wrapping_sub(best.offset).wrapping_add(pgoff)))
}

/// What unwinding needs from one ELF file.
#[derive(Debug)]
pub(crate) struct ElfInfo {
    pub build_id: Option<Vec<u8>>,
    /// The vaddr of the first PT_LOAD segment (0 for PIE executables and shared libraries).
    pub base_svma: u64,
    /// `e_entry`: where the process (or, for the dynamic loader, the loader) starts; 0 if none.
    pub entry_svma: u64,
    pub segments: Vec<LoadSegment>,
    text_svma: Option<Range<u64>>,
    got_svma: Option<Range<u64>>,
    eh_frame: Option<(Range<u64>, SectionData)>,
    eh_frame_hdr: Option<(Range<u64>, SectionData)>,
    debug_frame: Option<SectionData>,
}

/// Why a file could not be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ElfError {
    #[error("cannot read: {0}")]
    Io(#[from] io::Error),
    #[error("not an object file: {0}")]
    NotElf(#[from] object::Error),
    #[error("has no PT_LOAD segments")]
    NoLoadSegments,
    #[error("gave up reading it after {} ms (a hung file system?)", crate::mapped::READ_TIMEOUT.as_millis())]
    TimedOut,
}

fn section<'data, O: Object<'data>>(obj: &O, name: &str) -> Option<(Range<u64>, SectionData)> {
    let s = obj.section_by_name(name)?;
    let data = s.uncompressed_data().ok()?;
    let start = s.address();
    Some((start..start.saturating_add(s.size()), Arc::from(&*data)))
}

fn svma_range<'data, O: Object<'data>>(obj: &O, name: &str) -> Option<Range<u64>> {
    let s = obj.section_by_name(name)?;
    Some(s.address()..s.address().saturating_add(s.size()))
}

impl ElfInfo {
    /// Parses the headers and copies out the unwind sections; nothing else is kept.
    pub(crate) fn parse<'data, R: ReadRef<'data>>(data: R) -> Result<ElfInfo, ElfError> {
        let obj = object::File::parse(data)?;
        let segments: Vec<LoadSegment> = obj
            .segments()
            .map(|s| {
                let (offset, filesz) = s.file_range();
                LoadSegment {
                    offset,
                    vaddr: s.address(),
                    filesz,
                }
            })
            .collect();
        let base_svma = segments.first().ok_or(ElfError::NoLoadSegments)?.vaddr;
        Ok(ElfInfo {
            build_id: obj.build_id().ok().flatten().map(<[u8]>::to_vec),
            base_svma,
            entry_svma: obj.entry(),
            segments,
            text_svma: svma_range(&obj, ".text"),
            got_svma: svma_range(&obj, ".got"),
            eh_frame: section(&obj, ".eh_frame"),
            eh_frame_hdr: section(&obj, ".eh_frame_hdr"),
            debug_frame: section(&obj, ".debug_frame").map(|(_, d)| d),
        })
    }

    /// Reads only the headers and the unwind sections of the regular file at `path`.
    #[cfg(test)]
    pub(crate) fn load(path: &Path) -> Result<ElfInfo, ElfError> {
        let cache = ReadCache::new(crate::mapped::open_regular(path, None)?);
        ElfInfo::parse(&cache)
    }

    pub(crate) fn has_unwind_info(&self) -> bool {
        self.eh_frame.is_some() || self.debug_frame.is_some()
    }

    pub(crate) fn section_info(&self) -> ExplicitModuleSectionInfo<SectionData> {
        let (eh_frame_svma, eh_frame) = split(&self.eh_frame);
        let (eh_frame_hdr_svma, eh_frame_hdr) = split(&self.eh_frame_hdr);
        ExplicitModuleSectionInfo {
            base_svma: self.base_svma,
            text_svma: self.text_svma.clone(),
            text: None,
            stubs_svma: None,
            stub_helper_svma: None,
            got_svma: self.got_svma.clone(),
            unwind_info: None,
            eh_frame_svma,
            eh_frame,
            eh_frame_hdr_svma,
            eh_frame_hdr,
            debug_frame: self.debug_frame.clone(),
            text_segment_svma: None,
            text_segment: None,
        }
    }
}

/// Function extents from a file's `.eh_frame_hdr` search table: the FDE that covers an
/// address starts at its function's entry (`.cold` parts have FDEs of their own).
#[derive(Clone)]
pub(crate) struct FdeTable {
    hdr_svma: u64,
    hdr: SectionData,
    eh_svma: u64,
    eh: SectionData,
}

impl FdeTable {
    /// The table of a file with both sections; `None` without them.
    pub(crate) fn of(info: &ElfInfo) -> Option<FdeTable> {
        let (hdr_r, hdr) = info.eh_frame_hdr.as_ref()?;
        let (eh_r, eh) = info.eh_frame.as_ref()?;
        Some(FdeTable {
            hdr_svma: hdr_r.start,
            hdr: hdr.clone(),
            eh_svma: eh_r.start,
            eh: eh.clone(),
        })
    }

    /// The entry (an SVMA) of the function whose FDE covers `svma`.
    pub(crate) fn function_start(&self, svma: u64) -> Option<u64> {
        use gimli::{BaseAddresses, EhFrame, EhFrameHdr, NativeEndian, UnwindSection};
        let bases = BaseAddresses::default()
            .set_eh_frame_hdr(self.hdr_svma)
            .set_eh_frame(self.eh_svma);
        let hdr = EhFrameHdr::new(&self.hdr, NativeEndian)
            .parse(&bases, 8)
            .ok()?;
        let table = hdr.table()?;
        let mut eh = EhFrame::new(&self.eh, NativeEndian);
        eh.set_address_size(8);
        let fde = table
            .fde_for_address(&eh, &bases, svma, EhFrame::cie_from_offset)
            .ok()?;
        fde.contains(svma).then(|| fde.initial_address())
    }
}

fn split(s: &Option<(Range<u64>, SectionData)>) -> (Option<Range<u64>>, Option<SectionData>) {
    match s {
        Some((r, d)) => (Some(r.clone()), Some(d.clone())),
        None => (None, None),
    }
}

/// Identifies a file across processes: by device and inode when the kernel told us
/// (MMAP2), else by path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum ElfKey {
    DevIno(u32, u32, u64),
    Path(PathBuf),
}

struct CacheEntry {
    size: u64,
    mtime: Option<SystemTime>,
    info: Result<Arc<ElfInfo>, Arc<ElfError>>,
    /// The section bytes the entry holds.
    bytes: usize,
    /// When it was last asked for (the cache's own clock).
    last_use: u64,
}

/// The unwind data kept for files that no live process maps: past this, the least recently
/// used go. A build or CI host runs thousands of distinct binaries an hour; each would
/// otherwise keep its ~1 MiB of unwind sections for the rest of the recording.
pub(crate) const UNUSED_BYTES_BUDGET: usize = 16 << 20;

/// The most files no live process maps that are kept, whatever their size: a file of a few
/// KiB of unwind tables costs as much again in the entry, its segments and the table, so a
/// budget of bytes alone let a host that runs a fresh small binary every few seconds (a
/// build's test programs, `benches/agent-soak.sh`) keep thousands of them, growing for
/// hours. A file run again after it went is read again (its headers and unwind sections).
pub(crate) const UNUSED_FILES_MAX: usize = 256;

/// `MEMPERF_ELF_CACHE_MB`: another budget (benchmarks use a small one to show eviction).
fn budget_from_env() -> Option<usize> {
    let mb: usize = std::env::var("MEMPERF_ELF_CACHE_MB").ok()?.parse().ok()?;
    Some(mb.max(1) << 20)
}

/// The budget of unwind data kept for files no live process maps.
pub(crate) fn unused_budget() -> usize {
    budget_from_env().unwrap_or(UNUSED_BYTES_BUDGET)
}

impl ElfInfo {
    /// The bytes of the sections it holds.
    pub(crate) fn bytes(&self) -> usize {
        [&self.eh_frame, &self.eh_frame_hdr]
            .iter()
            .filter_map(|s| s.as_ref().map(|(_, d)| d.len()))
            .chain(self.debug_frame.as_ref().map(|d| d.len()))
            .sum::<usize>()
            + std::mem::size_of::<ElfInfo>()
    }

    /// Whether a live process's unwinder still holds its sections (framehop modules share
    /// them): what the cache evicts only when it must.
    fn in_use(&self) -> bool {
        [&self.eh_frame, &self.eh_frame_hdr]
            .iter()
            .filter_map(|s| s.as_ref().map(|(_, d)| d))
            .chain(self.debug_frame.as_ref())
            .any(|d| Arc::strong_count(d) > 1)
    }
}

/// Loaded ELF files keyed by [`ElfKey`]. An entry is valid while the file's size and mtime
/// are unchanged; files that are not ELF are cached too, so a bad file is parsed once. A file
/// that could not be opened is not: the failure belongs to the path (a `/proc/PID/root` that
/// vanished when the process exited), and the same file may open through another path.
#[derive(Default)]
pub(crate) struct ElfCache {
    entries: FxHashMap<ElfKey, CacheEntry>,
    /// Files, and devices, that took longer than [`crate::mapped::READ_TIMEOUT`] once: not
    /// read again, so a hung mount costs the drain one timeout, not one per mapping.
    gave_up: FxHashSet<ElfKey>,
    hung_devices: FxHashSet<(u32, u32)>,
    pub hits: u64,
    pub misses: u64,
    pub timeouts: u64,
    pub evictions: u64,
    /// The bytes every entry holds, and the cache's clock.
    bytes: usize,
    clock: u64,
    budget: usize,
}

impl ElfCache {
    /// The file of mapping `m` (see [`crate::mapped::open`]), loaded once per key while its
    /// size and mtime hold. Opening and parsing each take at most
    /// [`crate::mapped::READ_TIMEOUT`].
    pub(crate) fn get(
        &mut self,
        key: ElfKey,
        m: &MappedFile,
    ) -> Result<Arc<ElfInfo>, Arc<ElfError>> {
        let device = m.dev_ino.map(|(maj, min, _)| (maj, min));
        if self.gave_up.contains(&key) || device.is_some_and(|d| self.hung_devices.contains(&d)) {
            return Err(Arc::new(ElfError::TimedOut));
        }
        let owned = m.clone();
        let opened = crate::mapped::bounded(crate::mapped::READ_TIMEOUT, move || {
            let f = crate::mapped::open(&owned)?;
            let meta = f.metadata()?;
            Ok::<_, io::Error>((f, meta.len(), meta.modified().ok()))
        });
        let (file, size, mtime) = match opened {
            Some(Ok(opened)) => opened,
            Some(Err(e)) => return Err(Arc::new(ElfError::Io(e))),
            None => return Err(self.give_up(key, device)),
        };
        self.clock += 1;
        if let Some(e) = self.entries.get_mut(&key)
            && e.size == size
            && e.mtime == mtime
        {
            self.hits += 1;
            e.last_use = self.clock;
            return e.info.clone();
        }
        self.misses += 1;
        let parsed = crate::mapped::bounded(crate::mapped::READ_TIMEOUT, move || {
            ElfInfo::parse(&ReadCache::new(file))
        });
        let Some(parsed) = parsed else {
            return Err(self.give_up(key, device));
        };
        let info = parsed.map(Arc::new).map_err(Arc::new);
        if !matches!(info.as_ref().map_err(|e| &**e), Err(ElfError::Io(_))) {
            let bytes = info.as_ref().map_or(0, |i| i.bytes());
            let entry = CacheEntry {
                size,
                mtime,
                info: info.clone(),
                bytes,
                last_use: self.clock,
            };
            self.bytes += bytes;
            if let Some(old) = self.entries.insert(key, entry) {
                self.bytes -= old.bytes;
            }
            self.evict();
        }
        info
    }

    /// Drops the least recently used entries that no live process maps until those left
    /// hold at most 3/4 of the budget and 3/4 of [`UNUSED_FILES_MAX`] files (so that
    /// eviction runs once per many loads).
    fn evict(&mut self) {
        if self.budget == 0 {
            self.budget = unused_budget();
        }
        let budget = self.budget;
        let unused = |e: &CacheEntry| !e.info.as_ref().is_ok_and(|i| i.in_use());
        let (unused_bytes, unused_files) = self
            .entries
            .values()
            .filter(|e| unused(e))
            .fold((0, 0), |(b, n), e| (b + e.bytes, n + 1));
        if unused_bytes <= budget && unused_files <= UNUSED_FILES_MAX {
            return;
        }
        let mut old: Vec<(u64, ElfKey, usize)> = self
            .entries
            .iter()
            .filter(|(_, e)| unused(e))
            .map(|(k, e)| (e.last_use, k.clone(), e.bytes))
            .collect();
        old.sort_unstable_by_key(|(t, _, _)| *t);
        let (mut left, mut files) = (unused_bytes, unused_files);
        for (_, key, bytes) in old {
            if left <= budget / 4 * 3 && files <= UNUSED_FILES_MAX / 4 * 3 {
                break;
            }
            self.entries.remove(&key);
            self.bytes -= bytes;
            left -= bytes;
            files -= 1;
            self.evictions += 1;
        }
    }

    /// The bytes the entries hold.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    fn give_up(&mut self, key: ElfKey, device: Option<(u32, u32)>) -> Arc<ElfError> {
        self.timeouts += 1;
        self.gave_up.insert(key);
        if let Some(d) = device {
            self.hung_devices.insert(d);
        }
        Arc::new(ElfError::TimedOut)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used)]
mod tests {
    use super::*;

    fn seg(offset: u64, vaddr: u64, filesz: u64) -> LoadSegment {
        LoadSegment {
            offset,
            vaddr,
            filesz,
        }
    }

    #[test]
    fn bias_for_gnu_ld_page_aligned_segments() {
        // gcc/ld PIE: r-- at 0, r-x at 0x1000, r-- at 0x2000, rw- at 0x2de8/0x3de8.
        let segs = [
            seg(0, 0, 0x6b0),
            seg(0x1000, 0x1000, 0x2a1),
            seg(0x2000, 0x2000, 0x1a4),
            seg(0x2de8, 0x3de8, 0x250),
        ];
        let bias = compute_bias(&segs, 0x5555_5555_5000, 0x1000, 0x1000).unwrap();
        assert_eq!(bias, 0x5555_5555_4000);
        // The rw- mapping of the same file (page-rounded pgoff 0x2000, AVMA of vaddr 0x3000).
        let bias_rw = compute_bias(&segs, 0x5555_5555_7000, 0x2000, 0x2000).unwrap();
        assert_eq!(bias_rw, 0x5555_5555_4000);
    }

    #[test]
    fn bias_for_lld_unaligned_rx_segment() {
        // lld: r-- [0, 0x228a0) at vaddr 0; r-x at offset 0x228a0, vaddr 0x238a0; the r-x
        // mapping starts at the page-rounded pgoff 0x22000, which is also inside the r--
        // segment.
        let segs = [
            seg(0, 0, 0x228a0),
            seg(0x228a0, 0x238a0, 0x5_0000),
            seg(0x728a0, 0x748a0, 0x3000),
        ];
        let start = 0x7f00_0002_3000;
        let bias = compute_bias(&segs, start, 0x51000, 0x22000).unwrap();
        // vaddr 0x238a0 (file offset 0x228a0) is at start + 0x8a0.
        assert_eq!(0x238a0u64.wrapping_add(bias), start + 0x8a0);
        assert_eq!(bias, 0x7f00_0000_0000);
        // The naive choice (first segment containing pgoff) would give bias start - 0x22000.
        assert_ne!(bias, start - 0x22000);
    }

    #[test]
    fn bias_for_non_pie_executable_is_zero() {
        let segs = [seg(0, 0x40_0000, 0x500), seg(0x1000, 0x40_1000, 0x2000)];
        assert_eq!(compute_bias(&segs, 0x40_1000, 0x2000, 0x1000), Some(0));
    }

    #[test]
    fn bias_is_none_when_no_segment_overlaps() {
        let segs = [seg(0, 0, 0x1000)];
        assert_eq!(compute_bias(&segs, 0x7000, 0x1000, 0x5000), None);
        assert_eq!(compute_bias(&[], 0x7000, 0x1000, 0), None);
    }

    #[test]
    fn libc_has_eh_frame_and_segments() {
        let info = ElfInfo::load(Path::new("/lib/x86_64-linux-gnu/libc.so.6")).unwrap();
        assert!(info.has_unwind_info());
        assert_eq!(info.base_svma, 0);
        assert!(info.segments.len() >= 2);
        assert_eq!(info.build_id.as_ref().map(Vec::len), Some(20));
    }

    #[test]
    fn not_an_elf_and_missing_file_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("script.sh");
        std::fs::write(&p, b"#!/bin/sh\n").unwrap();
        assert!(matches!(ElfInfo::load(&p), Err(ElfError::NotElf(_))));
        assert!(matches!(
            ElfInfo::load(&dir.path().join("nope")),
            Err(ElfError::Io(_))
        ));
        let mut cache = ElfCache::default();
        let key = ElfKey::Path(p.clone());
        assert!(cache.get(key.clone(), &mapping(&p)).is_err());
        assert!(cache.get(key, &mapping(&p)).is_err());
        assert_eq!((cache.misses, cache.hits), (1, 1));
    }

    /// A mapping of `path` by a process that is gone (no /proc/PID, no map_files).
    fn mapping(path: &Path) -> MappedFile {
        MappedFile {
            pid: u32::MAX - 1,
            start: 0x1000,
            len: 0x1000,
            path: path.to_path_buf(),
            dev_ino: None,
        }
    }

    /// The race behind a CI failure: `/proc/PID/root/<path>` passed `metadata` and then
    /// failed to open because the command exited in between. A failed open is not cached:
    /// the same file (same key) must still load when it can be opened.
    #[test]
    fn a_file_that_could_not_be_opened_is_not_cached() {
        let exe = std::env::current_exe().unwrap();
        let mut cache = ElfCache::default();
        let key = ElfKey::Path(exe.clone());
        let gone = exe.with_file_name("no-such-file");
        assert!(cache.get(key.clone(), &mapping(&gone)).is_err());
        let info = cache
            .get(key.clone(), &mapping(&exe))
            .expect("the file loads through its path");
        assert!(info.has_unwind_info());
        assert!(cache.get(key, &mapping(&exe)).is_ok());
        assert_eq!((cache.misses, cache.hits), (1, 1));
    }

    /// A file that blocks (a FIFO put in place of a library, read without O_NONBLOCK by a
    /// naive loader) costs at most the read timeout, and is not tried again.
    #[test]
    fn a_file_that_never_answers_is_given_up_once() {
        let slow = || {
            std::thread::sleep(std::time::Duration::from_secs(5));
            1
        };
        assert_eq!(
            crate::mapped::bounded(crate::mapped::READ_TIMEOUT, slow),
            None
        );
        assert_eq!(
            crate::mapped::bounded(crate::mapped::READ_TIMEOUT, || 2),
            Some(2)
        );
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("libfoo.so");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let mut cache = ElfCache::default();
        let e = cache
            .get(ElfKey::Path(fifo.clone()), &mapping(&fifo))
            .unwrap_err();
        assert!(e.to_string().contains("is not a regular file"), "{e}");
    }

    /// Copies of one binary under new inodes, as a build host makes them: the cache keeps
    /// those a live process maps and, of the others, no more than its budget.
    #[test]
    fn files_no_process_maps_are_evicted_past_the_budget() {
        let exe = std::fs::canonicalize("/bin/true").unwrap();
        let one = ElfInfo::load(&exe).unwrap().bytes();
        let mut cache = ElfCache {
            budget: one * 3,
            ..ElfCache::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let mut held = Vec::new();
        for i in 0..10 {
            let copy = dir.path().join(format!("copy{i}"));
            std::fs::copy(&exe, &copy).unwrap();
            let info = cache
                .get(ElfKey::Path(copy.clone()), &mapping(&copy))
                .unwrap();
            // The first two stay mapped by a "process" (a module holds their sections).
            if i < 2 {
                held.push(info.section_info());
            }
        }
        let unused = cache.entries.len() - 2;
        assert!(
            unused * one <= one * 3,
            "{} entries kept",
            cache.entries.len()
        );
        assert_eq!(cache.evictions as usize, 10 - cache.entries.len());
        for i in 0..2 {
            let key = ElfKey::Path(dir.path().join(format!("copy{i}")));
            assert!(
                cache.entries.contains_key(&key),
                "a mapped file was evicted"
            );
        }
        assert_eq!(
            cache.bytes(),
            cache.entries.values().map(|e| e.bytes).sum::<usize>()
        );
        drop(held);
    }

    /// A fresh small binary every few seconds (benches/agent-soak.sh's copies, a build's test
    /// programs): each is a few KiB of unwind tables, far under the budget of bytes, and
    /// no more than [`UNUSED_FILES_MAX`] of them stay once no process maps them (today's
    /// main kept every one until 16 MiB of tables, hours of them).
    #[test]
    fn small_files_no_process_maps_are_bounded_in_number() {
        let exe = std::fs::canonicalize("/bin/true").unwrap();
        let mut cache = ElfCache::default();
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("copy");
        std::fs::copy(&exe, &copy).unwrap();
        let m = mapping(&copy);
        let total = UNUSED_FILES_MAX * 2;
        // One file's data under as many keys as the copies would have (device, inode).
        for i in 0..total {
            let key = ElfKey::DevIno(0, 0, i as u64);
            cache.get(key, &m).unwrap();
            assert!(
                cache.entries.len() <= UNUSED_FILES_MAX,
                "{i}: {}",
                cache.len()
            );
        }
        assert!(cache.bytes() < unused_budget() / 4);
        assert_eq!(cache.evictions as usize, total - cache.len());
        // The most recent stay.
        assert!(
            cache
                .entries
                .contains_key(&ElfKey::DevIno(0, 0, total as u64 - 1))
        );
    }
}
