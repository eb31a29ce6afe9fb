//! What the unwinder knows of each process: its executable mappings as modules (a file's
//! CFI loaded into framehop, or pending until a sample needs it), and how a mapping's path
//! decides whether it gets one.

use std::ops::Range;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use framehop::{Module, Unwinder};

use super::elf::{self, ElfInfo, SectionData};
use super::{CodeSite, NativeUnwinder, jitcfi};

/// One executable mapping of a process.
#[derive(Clone)]
pub(super) struct ProcModule {
    pub(super) avma: Range<u64>,
    pub(super) pgoff: u64,
    pub(super) path: Arc<Path>,
    pub(super) build_id: Option<Arc<[u8]>>,
    pub(super) bias: Option<u64>,
    /// Added to the framehop unwinder (the file loaded and has CFI).
    pub(super) has_cfi: bool,
    /// The file's entry point in the process (`e_entry` + bias), when it has one.
    pub(super) entry_avma: Option<u64>,
    /// Not read yet ([`Unwinders::set_lazy`]): the file is loaded when a sample of the
    /// process is first unwound.
    pub(super) pending: Option<Pending>,
    /// Its functions' extents, for confirming the calls of recovered frames.
    pub(super) fdes: Option<elf::FdeTable>,
    /// Names the file (see [`hash_file`]); with a file offset, a place in the file in any
    /// process. 0 for memory of no file.
    pub(super) path_hash: u64,
}

impl ProcModule {
    /// `avma` as a place in the module's file.
    pub(super) fn site(&self, avma: u64) -> CodeSite {
        (
            self.path_hash,
            avma.wrapping_sub(self.avma.start).wrapping_add(self.pgoff),
        )
    }

    /// The entry of the function that holds `avma`, by the file's FDEs.
    pub(super) fn function_start(&self, avma: u64) -> Option<u64> {
        let bias = self.bias?;
        let start = self
            .fdes
            .as_ref()?
            .function_start(avma.wrapping_sub(bias))?;
        Some(start.wrapping_add(bias))
    }
}

/// What loading a mapping's file later needs from its event.
#[derive(Clone)]
pub(super) struct Pending {
    pub(super) dev_ino: Option<(u32, u32, u64)>,
    pub(super) deleted: bool,
}

#[derive(Clone, Default)]
pub(super) struct Process {
    pub(super) unwinder: NativeUnwinder,
    /// Sorted by `avma.start`, non-overlapping.
    pub(super) modules: Vec<ProcModule>,
    /// Modules whose file is still to be loaded.
    pub(super) pending: usize,
    /// JIT functions with CFI from the process's jitdump.
    pub(super) jit: jitcfi::JitCfi,
}

impl Process {
    pub(super) fn module_index(&self, addr: u64) -> Option<usize> {
        let i = self
            .modules
            .partition_point(|m| m.avma.start <= addr)
            .checked_sub(1)?;
        (addr < self.modules[i].avma.end).then_some(i)
    }

    /// The module that holds `addr`.
    pub(super) fn module_at(&self, addr: u64) -> Option<&ProcModule> {
        self.modules.get(self.module_index(addr)?)
    }

    /// Whether CFI covers `addr` (a lookup address): a file's, or a JIT function's.
    pub(super) fn has_cfi_at(&self, addr: u64) -> bool {
        self.module_index(addr)
            .is_some_and(|i| self.modules[i].has_cfi)
            || self.jit.covers(addr)
    }

    /// Removes the modules that overlap `r` (and, for a file mapped there, the JIT functions);
    /// returns how many framehop modules went.
    pub(super) fn remove_overlapping(&mut self, r: &Range<u64>, file: bool) -> u32 {
        let unwinder = &mut self.unwinder;
        let mut removed = 0;
        let pending = &mut self.pending;
        self.modules.retain(|m| {
            let overlaps = m.avma.start < r.end && r.start < m.avma.end;
            if overlaps && m.has_cfi {
                unwinder.remove_module(m.avma.start);
                removed += 1;
            }
            if overlaps && m.pending.is_some() {
                *pending -= 1;
            }
            !overlaps
        });
        // An anonymous mapping may be the JIT's code space, mapped after the dump was read
        // (a recording replayed, a drain behind the process): its functions stay.
        if file {
            removed += self.jit.remove_overlapping(r, &mut self.unwinder);
        }
        removed
    }

    pub(super) fn insert(&mut self, m: ProcModule) {
        let i = self
            .modules
            .partition_point(|x| x.avma.start < m.avma.start);
        self.modules.insert(i, m);
    }
}

/// Why a mapping gets no module, decided from its path alone.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum PathKind {
    File,
    Pseudo,
    Deleted,
}

pub(super) fn path_kind(path: &[u8]) -> PathKind {
    if path.ends_with(b" (deleted)") {
        PathKind::Deleted
    } else if !path.starts_with(b"/") || path.starts_with(b"//anon") || path.starts_with(b"/memfd:")
    {
        // `[vdso]`, `[heap]`, `anon_inode:*`, empty; `//anon` and memfd have no file to read.
        PathKind::Pseudo
    } else {
        PathKind::File
    }
}

/// Names a file for the caches of code read from processes: its path, device and inode,
/// and build-id where known (a binary rebuilt at the same path is another file). Never 0:
/// 0 names memory of no file, whose code is never cached (a JIT rewrites it).
pub(super) fn hash_file(
    path: &Path,
    dev_ino: Option<(u32, u32, u64)>,
    build_id: Option<&[u8]>,
) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = rustc_hash::FxHasher::default();
    path.hash(&mut h);
    dev_ino.hash(&mut h);
    build_id.hash(&mut h);
    h.finish().max(1)
}

pub(super) fn framehop_module(
    info: &ElfInfo,
    path: &Path,
    avma: Range<u64>,
    bias: u64,
) -> Module<SectionData> {
    let name = String::from_utf8_lossy(path.as_os_str().as_bytes()).into_owned();
    let base_avma = info.base_svma.wrapping_add(bias);
    Module::new(name, avma, base_avma, info.section_info())
}
