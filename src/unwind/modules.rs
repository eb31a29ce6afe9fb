//! The unwinder's side of the session's mapping and process events: an executable mapping
//! becomes a module (its file read once, through the ELF cache), an exec forgets them, a
//! fork copies them.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use framehop::{CacheNative, Module, Unwinder};

use super::elf::{self, ElfKey, SectionData};
use super::process::{
    PathKind, Pending, ProcModule, Process, framehop_module, hash_file, path_kind,
};
use super::{
    CACHE_RESET_CHANGES, FAILED_PATHS_KEPT, MappingEvent, ModuleRef, UnwindMode, Unwinders,
};

impl Unwinders {
    /// An executable mapping becomes a module, replacing the modules it overlaps.
    /// Non-executable mappings are ignored (counted).
    pub fn handle_mmap(&mut self, ev: &MappingEvent) {
        if !ev.exec {
            self.stats.non_exec_ignored += 1;
            return;
        }
        self.memo.forget(ev.pid);
        let avma = ev.start..ev.start.saturating_add(ev.len);
        let path: Arc<Path> = Arc::from(Path::new(OsStr::from_bytes(ev.path)));
        let mut module = ProcModule {
            avma: avma.clone(),
            pgoff: ev.pgoff,
            path: path.clone(),
            build_id: ev.build_id.map(Arc::from),
            bias: None,
            has_cfi: false,
            entry_avma: None,
            pending: None,
            fdes: None,
            path_hash: 0,
        };
        let kind = path_kind(ev.path);
        if kind != PathKind::Pseudo {
            module.path_hash = hash_file(&path, ev.dev_ino, ev.build_id);
        }
        if crate::jitdump::is_dump_of(ev.path, ev.pid) {
            // A JIT's dump, mapped as its marker: not an ELF file; its unwind info is read.
            let proc = self.procs.entry(ev.pid).or_default();
            let changes = proc.remove_overlapping(&avma, true);
            proc.insert(module);
            // Frame pointers need no unwind info.
            if self.mode == UnwindMode::Dwarf {
                proc.jit.set_source(ev);
            }
            self.count_changes(changes);
            if !self.lazy {
                self.read_jit_dump(ev.pid);
            }
            return;
        }
        if self.lazy && kind != PathKind::Pseudo {
            module.pending = Some(Pending {
                dev_ino: ev.dev_ino,
                deleted: kind == PathKind::Deleted,
            });
            let proc = self.procs.entry(ev.pid).or_default();
            let changes = proc.remove_overlapping(&avma, true);
            proc.pending += 1;
            proc.insert(module);
            self.count_changes(changes);
            return;
        }
        let fh_module = match kind {
            PathKind::Pseudo => {
                self.stats.skipped_pseudo += 1;
                None
            }
            // Deleted or replaced since it was mapped (a package upgrade): a live process's
            // file is still reachable through /proc/PID/map_files (root).
            PathKind::Deleted => {
                let m = self.load_module(ev, &path, &mut module);
                if m.is_none() {
                    self.stats.skipped_deleted += 1;
                }
                m
            }
            PathKind::File => self.load_module(ev, &path, &mut module),
        };
        let proc = self.procs.entry(ev.pid).or_default();
        let mut changes = proc.remove_overlapping(&avma, kind != PathKind::Pseudo);
        if let Some(m) = fh_module {
            proc.unwinder.add_module(m);
            module.has_cfi = true;
            self.stats.modules_loaded += 1;
            changes += 1;
        }
        proc.insert(module);
        self.count_changes(changes);
    }

    pub(super) fn count_changes(&mut self, changes: u32) {
        if changes > 0 {
            self.confirmed.clear();
        }
        self.module_changes = self.module_changes.saturating_add(changes);
        if self.module_changes >= CACHE_RESET_CHANGES {
            self.cache = CacheNative::new();
            self.module_changes = 0;
        }
    }

    /// Loads the files of `pid`'s mappings met under [`Self::set_lazy`].
    pub(super) fn load_pending(&mut self, pid: u32) {
        let pending: Vec<(usize, Pending)> = match self.procs.get_mut(&pid) {
            Some(p) if p.pending > 0 => {
                p.pending = 0;
                p.modules
                    .iter_mut()
                    .enumerate()
                    .filter_map(|(i, m)| m.pending.take().map(|x| (i, x)))
                    .collect()
            }
            _ => return,
        };
        self.memo.forget(pid);
        let mut changes = 0;
        for (i, pend) in pending {
            let Some(mut module) = self.procs.get(&pid).and_then(|p| p.modules.get(i)).cloned()
            else {
                continue;
            };
            let path = module.path.clone();
            let build_id = module.build_id.clone();
            let ev = MappingEvent {
                pid,
                start: module.avma.start,
                len: module.avma.end - module.avma.start,
                pgoff: module.pgoff,
                exec: true,
                path: path.as_os_str().as_bytes(),
                dev_ino: pend.dev_ino,
                build_id: build_id.as_deref(),
            };
            let fh = self.load_module(&ev, &path, &mut module);
            if fh.is_none() && pend.deleted {
                self.stats.skipped_deleted += 1;
            }
            let Some(proc) = self.procs.get_mut(&pid) else {
                continue;
            };
            if let Some(m) = fh {
                proc.unwinder.add_module(m);
                module.has_cfi = true;
                self.stats.modules_loaded += 1;
                changes += 1;
            }
            if let Some(slot) = proc.modules.get_mut(i) {
                *slot = module;
            }
        }
        self.count_changes(changes);
    }

    /// Loads the file behind `ev`, fills in `module`'s bias and build-id, and builds the
    /// framehop module when the file has CFI.
    fn load_module(
        &mut self,
        ev: &MappingEvent,
        path: &Path,
        module: &mut ProcModule,
    ) -> Option<Module<SectionData>> {
        let key = match ev.dev_ino {
            Some((maj, min, ino)) if ino != 0 => ElfKey::DevIno(maj, min, ino),
            _ => ElfKey::Path(path.to_path_buf()),
        };
        let mapping = crate::mapped::MappedFile {
            pid: ev.pid,
            start: ev.start,
            len: ev.len,
            path: path.to_path_buf(),
            dev_ino: ev.dev_ino,
        };
        let info = self.elf_cache.get(key, &mapping);
        self.stats.elf_cache_hits = self.elf_cache.hits;
        self.stats.elf_read_timeouts = self.elf_cache.timeouts;
        self.stats.elf_cache_bytes = self.elf_cache.bytes() as u64;
        self.stats.elf_cache_evictions = self.elf_cache.evictions;
        self.stats.elf_cache_misses = self.elf_cache.misses;
        let info = match info {
            Ok(info) => info,
            Err(_) => {
                // A deleted file that could not be reached is counted as skipped_deleted.
                if path_kind(path.as_os_str().as_encoded_bytes()) != PathKind::Deleted {
                    self.count_load_failure(path);
                }
                return None;
            }
        };
        if let (Some(want), Some(have)) = (ev.build_id, info.build_id.as_deref())
            && want != have
        {
            self.stats.build_id_mismatches += 1;
            return None;
        }
        if module.build_id.is_none() {
            module.build_id = info.build_id.as_deref().map(Arc::from);
            module.path_hash = hash_file(path, ev.dev_ino, module.build_id.as_deref());
        }
        let bias = elf::compute_bias(&info.segments, ev.start, ev.len, ev.pgoff)?;
        module.bias = Some(bias);
        module.entry_avma = (info.entry_svma != 0).then(|| info.entry_svma.wrapping_add(bias));
        if !info.has_unwind_info() {
            self.stats.modules_without_cfi += 1;
            return None;
        }
        module.fdes = elf::FdeTable::of(&info);
        Some(framehop_module(&info, path, module.avma.clone(), bias))
    }

    fn count_load_failure(&mut self, path: &Path) {
        self.stats.elf_load_failures += 1;
        let paths = &mut self.stats.elf_load_failure_paths;
        if paths.len() < FAILED_PATHS_KEPT && !paths.iter().any(|p| p == path) {
            paths.push(path.to_path_buf());
        }
    }

    /// The process replaced its image (COMM with the exec flag): forget its modules.
    pub fn handle_exec(&mut self, pid: u32) {
        self.memo.forget(pid);
        self.procs.insert(pid, Process::default());
    }

    /// A new process (not a thread) starts with a copy of its parent's modules.
    pub fn handle_fork(&mut self, child_pid: u32, parent_pid: u32) {
        self.memo.forget(child_pid);
        if let Some(parent) = self.procs.get(&parent_pid) {
            let mut child = parent.clone();
            child.jit.forget_source();
            self.procs.insert(child_pid, child);
        }
    }

    pub fn handle_exit(&mut self, pid: u32) {
        self.memo.forget(pid);
        self.procs.remove(&pid);
    }

    /// The executable mapping of `pid` that contains `addr`.
    pub fn module_of(&self, pid: u32, addr: u64) -> Option<ModuleRef<'_>> {
        let p = self.procs.get(&pid)?;
        let m = &p.modules[p.module_index(addr)?];
        Some(ModuleRef {
            path: &m.path,
            build_id: m.build_id.as_deref(),
            avma_range: m.avma.clone(),
            pgoff: m.pgoff,
            bias: m.bias,
        })
    }

    /// Distinct files loaded or failed (the ELF cache's size).
    pub fn cached_files(&self) -> usize {
        self.elf_cache.len()
    }
}
