//! Each process's mappings as the file's MMAP/MMAP2, FORK, COMM(exec) records describe them,
//! to turn a user address into (module, file offset) at the time of a sample.

use rustc_hash::FxHashMap;

/// A module as recorded: its path and build-id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ModuleInfo {
    pub path: Vec<u8>,
    pub build_id: Option<Vec<u8>>,
}

impl ModuleInfo {
    /// The last path component, for `module+0xoff`.
    pub fn basename(&self) -> String {
        let name = self
            .path
            .rsplit(|&b| b == b'/')
            .next()
            .unwrap_or(&self.path);
        String::from_utf8_lossy(name).into_owned()
    }

    /// Code with no file behind it: anonymous executable memory (JIT), memfd, [vdso]...
    pub fn kind(&self) -> ModuleKind {
        let p = &self.path;
        let anon = [&b"//anon"[..], b"[anon", b"/memfd:", b"/dev/zero"];
        if p.is_empty() || anon.iter().any(|a| p.starts_with(a)) {
            ModuleKind::Anon
        } else if p.starts_with(b"[") {
            ModuleKind::Pseudo
        } else {
            ModuleKind::File
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModuleKind {
    File,
    /// Anonymous executable memory: JIT code, named through /tmp/perf-PID.map.
    Anon,
    /// `[vdso]`, `[vsyscall]`, `[stack]`...
    Pseudo,
}

#[derive(Debug, Clone, Copy)]
struct Mapping {
    start: u64,
    end: u64,
    pgoff: u64,
    module: u32,
    /// Its [`MapAttrs`], interned (in the padding of the struct: no extra bytes).
    attrs: u32,
}

/// What an MMAP2 record says of a mapping besides its range, file offset and path: kept so
/// that a mapping mremap moved is described again at its new place as it was
/// (`session::remaps`). Zero where the record did not say (an MMAP record, a build-id MMAP2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct MapAttrs {
    pub prot: u32,
    pub flags: u32,
    pub maj: u32,
    pub min: u32,
    pub ino: u64,
    pub ino_generation: u64,
}

/// The mapping that holds an address, as [`ProcessMaps::mapping_at`] finds it.
#[derive(Debug, Clone, Copy)]
pub struct MappedAt<'a> {
    pub module: &'a ModuleInfo,
    /// The file offset of the address.
    pub pgoff: u64,
    /// Where the mapping ends.
    pub end: u64,
    pub attrs: MapAttrs,
}

/// Interned modules and every process's mappings.
#[derive(Debug, Default, Clone)]
pub struct ProcessMaps {
    modules: Vec<ModuleInfo>,
    /// The first process seen mapping each module: its `/proc/PID/root` reaches the binary
    /// of a container while the process lives.
    module_pids: Vec<u32>,
    module_ids: FxHashMap<ModuleInfo, u32>,
    by_pid: FxHashMap<u32, Vec<Mapping>>,
    /// Where each process's brk heap is, as far as the mappings tell.
    heaps: FxHashMap<u32, HeapInference>,
    /// Build-ids from the file's BUILD_ID feature, by path.
    feature_build_ids: FxHashMap<Vec<u8>, Vec<u8>>,
    /// pid → the latest module that is that process's jitdump (`jit-PID.dump`): looked up
    /// for JIT frames, which a system-wide recording has in every process it knows no
    /// mapping of, so not by a search of every module.
    dumps: FxHashMap<u32, u32>,
    /// The distinct [`MapAttrs`] of the mappings (few: one per file and protection).
    attrs: Vec<MapAttrs>,
    attr_ids: FxHashMap<MapAttrs, u32>,
    /// Ids of modules and attributes let go of ([`ProcessMaps::forget_unmapped`]), given
    /// to the next new ones.
    free_modules: Vec<u32>,
    free_attrs: Vec<u32>,
}

impl ProcessMaps {
    pub fn new(feature_build_ids: FxHashMap<Vec<u8>, Vec<u8>>) -> ProcessMaps {
        ProcessMaps {
            feature_build_ids,
            ..ProcessMaps::default()
        }
    }

    /// A table with no process in it, for a session that keeps no maps.
    pub fn empty() -> &'static ProcessMaps {
        static EMPTY: std::sync::LazyLock<ProcessMaps> =
            std::sync::LazyLock::new(ProcessMaps::default);
        &EMPTY
    }

    pub fn module(&self, id: u32) -> &ModuleInfo {
        &self.modules[id as usize]
    }

    /// The jitdump file process `pid` mapped, as a JIT announces one (perf's jitdump: it
    /// maps its `jit-PID.dump` executable); the latest such module when there are several.
    pub fn jitdump_path(&self, pid: u32) -> Option<&[u8]> {
        let id = *self.dumps.get(&pid)?;
        Some(self.module(id).path.as_slice())
    }

    /// The first process that mapped module `id`.
    pub fn module_pid(&self, id: u32) -> u32 {
        self.module_pids[id as usize]
    }

    fn intern(&mut self, pid: u32, path: &[u8], build_id: Option<&[u8]>) -> u32 {
        let build_id = build_id
            .map(<[u8]>::to_vec)
            .or_else(|| self.feature_build_ids.get(path).cloned());
        let info = ModuleInfo {
            path: path.to_vec(),
            build_id,
        };
        if let Some(&id) = self.module_ids.get(&info) {
            return id;
        }
        let id = match self.free_modules.pop() {
            Some(id) => {
                self.modules[id as usize] = info.clone();
                self.module_pids[id as usize] = pid;
                id
            }
            None => {
                self.modules.push(info.clone());
                self.module_pids.push(pid);
                self.modules.len() as u32 - 1
            }
        };
        if let Some(dump_of) = crate::jitdump::dump_pid(path) {
            // The latest dump module of a process is the last one inserted.
            self.dumps.insert(dump_of, id);
        }
        self.module_ids.insert(info, id);
        id
    }

    /// Lets go of the modules no process maps now and `held` does not name, and of the
    /// mapping attributes no mapping has; their ids go to the next new ones. Only for a
    /// caller that holds no other id of this table: `memperf agent` between windows (each
    /// window's frames are named, then let go of; its in-use blocks' frames are `held`). A
    /// host whose binaries change (a fresh build, a copy run and deleted) would otherwise
    /// grow the table by each one for the rest of the run. Returns how many modules went.
    pub fn forget_unmapped(&mut self, held: impl IntoIterator<Item = u32>) -> usize {
        let by_pid = &self.by_pid;
        self.dumps.retain(|pid, _| by_pid.contains_key(pid));
        let mut used = vec![false; self.modules.len()];
        let mut used_attrs = vec![false; self.attrs.len()];
        for m in self.by_pid.values().flatten() {
            used[m.module as usize] = true;
            used_attrs[m.attrs as usize] = true;
        }
        for id in self.dumps.values().copied().chain(held) {
            if let Some(u) = used.get_mut(id as usize) {
                *u = true;
            }
        }
        for &id in &self.free_modules {
            used[id as usize] = true;
        }
        for &id in &self.free_attrs {
            used_attrs[id as usize] = true;
        }
        let mut gone = 0;
        for (id, _) in used.iter().enumerate().filter(|(_, u)| !**u) {
            let info = std::mem::take(&mut self.modules[id]);
            self.module_ids.remove(&info);
            self.free_modules.push(id as u32);
            gone += 1;
        }
        for (id, _) in used_attrs.iter().enumerate().filter(|(_, u)| !**u) {
            self.attr_ids.remove(&self.attrs[id]);
            self.free_attrs.push(id as u32);
        }
        gone
    }

    /// Modules held (mapped, or named by a caller), not counting those let go of.
    pub fn modules_held(&self) -> usize {
        self.modules.len() - self.free_modules.len()
    }

    /// A new mapping replaces whatever it overlaps, as mmap(2) does.
    pub fn map(
        &mut self,
        pid: u32,
        start: u64,
        len: u64,
        pgoff: u64,
        path: &[u8],
        build_id: Option<&[u8]>,
    ) {
        self.map_with(
            pid,
            (start, len, pgoff),
            path,
            build_id,
            MapAttrs::default(),
        );
    }

    /// [`map`](Self::map), keeping what else the record said of the mapping.
    pub fn map_with(
        &mut self,
        pid: u32,
        (start, len, pgoff): (u64, u64, u64),
        path: &[u8],
        build_id: Option<&[u8]>,
        attrs: MapAttrs,
    ) {
        if len == 0 {
            return;
        }
        let end = start.saturating_add(len);
        let module = self.intern(pid, path, build_id);
        let kind = self.modules[module as usize].kind();
        self.heaps
            .entry(pid)
            .or_default()
            .observe(module, kind, path, start, end);
        let attrs = self.intern_attrs(attrs);
        self.place(pid, start, end, pgoff, module, attrs);
    }

    fn intern_attrs(&mut self, attrs: MapAttrs) -> u32 {
        if let Some(&id) = self.attr_ids.get(&attrs) {
            return id;
        }
        let id = match self.free_attrs.pop() {
            Some(id) => {
                self.attrs[id as usize] = attrs;
                id
            }
            None => {
                self.attrs.push(attrs);
                self.attrs.len() as u32 - 1
            }
        };
        self.attr_ids.insert(attrs, id);
        id
    }

    /// `[start, end)` of `pid` now holds `module` from `pgoff`, over whatever it overlapped.
    fn place(&mut self, pid: u32, start: u64, end: u64, pgoff: u64, module: u32, attrs: u32) {
        self.unmap(pid, start, end);
        let maps = self.by_pid.entry(pid).or_default();
        let at = maps.partition_point(|m| m.start < start);
        maps.insert(
            at,
            Mapping {
                start,
                end,
                pgoff,
                module,
                attrs,
            },
        );
    }

    /// `[start, end)` of `pid` holds nothing any more: what overlapped it is cut around it.
    fn unmap(&mut self, pid: u32, start: u64, end: u64) {
        let Some(maps) = self.by_pid.get_mut(&pid) else {
            return;
        };
        let mut kept = Vec::with_capacity(maps.len() + 2);
        for m in maps.drain(..) {
            if m.end <= start || m.start >= end {
                kept.push(m);
                continue;
            }
            if m.start < start {
                kept.push(Mapping { end: start, ..m });
            }
            if m.end > end {
                // A corrupted pgoff saturates, as a corrupted end does.
                kept.push(Mapping {
                    start: end,
                    pgoff: m.pgoff.saturating_add(end - m.start),
                    ..m
                });
            }
        }
        kept.sort_by_key(|m| m.start);
        *maps = kept;
    }

    /// exec: the old image is gone.
    pub fn exec(&mut self, pid: u32) {
        self.by_pid.remove(&pid);
        self.heaps.remove(&pid);
    }

    /// exit: the process's mappings go (its modules stay: frames already interned are
    /// named through them), so that a table that sees processes come and go for days stays
    /// the size of the processes alive.
    pub fn exit(&mut self, pid: u32) {
        self.by_pid.remove(&pid);
        self.heaps.remove(&pid);
    }

    /// The processes whose mappings are held.
    pub fn processes(&self) -> usize {
        self.by_pid.len()
    }

    /// Whether the mappings of process `pid` are held.
    pub fn holds(&self, pid: u32) -> bool {
        self.by_pid.contains_key(&pid)
    }

    /// The pids of those processes.
    pub fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.by_pid.keys().copied()
    }

    /// fork: the child starts with the parent's mappings.
    pub fn fork(&mut self, child: u32, parent: u32) {
        if child == parent {
            return;
        }
        if let Some(m) = self.by_pid.get(&parent).cloned() {
            self.by_pid.insert(child, m);
        }
        if let Some(h) = self.heaps.get(&parent).cloned() {
            self.heaps.insert(child, h);
        }
    }

    /// Where the brk heap of `pid` starts, once a mapping showed it.
    pub fn heap_start(&self, pid: u32) -> Option<u64> {
        self.heaps.get(&pid).and_then(|h| h.heap_start)
    }

    /// Whether the mapping of `pid` that starts at `start` is the brk heap.
    pub fn is_heap(&self, pid: u32, start: u64) -> bool {
        self.heaps
            .get(&pid)
            .is_some_and(|h| h.heap_start == Some(start))
    }

    /// The module and the bounds of the mapping holding `addr` in `pid`.
    pub fn mapping_of(&self, pid: u32, addr: u64) -> Option<(u32, u64, u64)> {
        let maps = self.by_pid.get(&pid)?;
        let i = maps.partition_point(|m| m.start <= addr);
        let m = maps.get(i.checked_sub(1)?)?;
        (addr < m.end).then_some((m.module, m.start, m.end))
    }

    /// The module and start of the first mapping of `pid` above `addr` (a stack grows down
    /// from its mapping, so a fault just below `[stack]` is the stack's).
    pub fn mapping_above(&self, pid: u32, addr: u64) -> Option<(u32, u64)> {
        let maps = self.by_pid.get(&pid)?;
        let m = maps.get(maps.partition_point(|m| m.start <= addr))?;
        Some((m.module, m.start))
    }

    /// The mapping of `pid` that holds `addr`: its module, the file offset of `addr`, its
    /// end and what else its record said.
    pub fn mapping_at(&self, pid: u32, addr: u64) -> Option<MappedAt<'_>> {
        let maps = self.by_pid.get(&pid)?;
        let i = maps.partition_point(|m| m.start <= addr);
        let m = maps.get(i.checked_sub(1)?)?;
        (addr < m.end).then(|| MappedAt {
            module: self.module(m.module),
            pgoff: (addr - m.start).saturating_add(m.pgoff),
            end: m.end,
            attrs: self.attrs[m.attrs as usize],
        })
    }

    /// Whether `ret`, a return address of the kernel's frame-pointer walk of process `pid`,
    /// lies in the process's code (the call before it: `ret - 1`). Through code built
    /// without frame pointers the walk follows a register that holds anything, and reads
    /// values that are no return address; one outside every executable mapping cannot have
    /// been a frame, and nothing read after it can be trusted. A mapping whose protection
    /// and flags are both 0 came from a record that did not say (MMAP, not MMAP2); a process
    /// whose mappings are not held gives no evidence either way.
    pub fn in_code(&self, pid: u32, ret: u64) -> bool {
        match self.mapping_at(pid, ret.wrapping_sub(1)) {
            Some(m) => {
                (m.attrs.prot == 0 && m.attrs.flags == 0)
                    || m.attrs.prot & libc::PROT_EXEC as u32 != 0
            }
            None => !self.holds(pid),
        }
    }

    /// The module and file offset of `addr` in `pid`.
    pub fn lookup(&self, pid: u32, addr: u64) -> Option<(u32, u64)> {
        let maps = self.by_pid.get(&pid)?;
        let i = maps.partition_point(|m| m.start <= addr);
        let m = maps.get(i.checked_sub(1)?)?;
        (addr < m.end).then(|| (m.module, (addr - m.start).saturating_add(m.pgoff)))
    }
}

/// How far past the end of the executable's image the kernel may place the start of the
/// brk heap: `arch_randomize_brk` picks a page within 1 GiB of it for 64-bit processes
/// (32 MiB for 32-bit ones), on x86-64 and arm64 alike.
const BRK_RANDOM_RANGE: u64 = 1 << 30;

/// Finds a process's brk heap among its anonymous mappings.
///
/// The kernel names the heap `[heap]` in MMAP2 records only when the break was already above
/// its start (`vma_is_initial_heap` against the old `mm->brk`), so the first growth after exec
/// comes as `//anon`, and a heap grown once is `//anon` for good; `/proc/PID/maps`, read with
/// the current break, names it `[heap]` in synthesized records. The rules, in order:
/// 1. a mapping named `[heap]` starts the heap;
/// 2. the executable is the first file mapped after exec; anonymous mappings that start right
///    at its end before the loader finishes (`[vdso]` is mapped last) are its bss;
/// 3. after that, the first anonymous mapping starting within [`BRK_RANDOM_RANGE`] past the end
///    of the image, or at the bss start (the heap merged into the bss when brk is not
///    randomized), is the heap: mmap places anonymous memory top-down from below the stack,
///    far from the image, unless a program asks for an address there.
#[derive(Debug, Clone, Default)]
struct HeapInference {
    heap_start: Option<u64>,
    exe: Option<u32>,
    image_end: u64,
    bss_start: Option<u64>,
    loader_done: bool,
}

impl HeapInference {
    fn observe(&mut self, module: u32, kind: ModuleKind, path: &[u8], start: u64, end: u64) {
        if path == b"[heap]" {
            self.heap_start = Some(start);
            return;
        }
        match kind {
            ModuleKind::Pseudo => {
                if path == b"[vdso]" && self.exe.is_some() {
                    self.loader_done = true;
                }
            }
            ModuleKind::File => match self.exe {
                None => {
                    self.exe = Some(module);
                    self.image_end = end;
                }
                Some(exe) if exe == module => self.image_end = self.image_end.max(end),
                Some(_) => {}
            },
            ModuleKind::Anon if self.exe.is_none() || self.heap_start.is_some() => {}
            ModuleKind::Anon if !self.loader_done => {
                if start == self.image_end {
                    self.bss_start.get_or_insert(start);
                    self.image_end = end;
                }
            }
            ModuleKind::Anon => {
                let past_image = start >= self.image_end
                    && start - self.image_end < BRK_RANDOM_RANGE
                    && path == b"//anon";
                if past_image || self.bss_start == Some(start) {
                    self.heap_start = Some(start);
                }
            }
        }
    }
}

/// Whether `addr` can be the kernel's uretprobe trampoline in process `pid`: the start of
/// a page (the first slot of the `[uprobes]` area) that lies in no mapping the process is
/// known to have (no MMAP record announces that area) or in one named `[uprobes]`.
pub fn is_uretprobe_trampoline(maps: &ProcessMaps, pid: u32, addr: u64) -> bool {
    addr != 0
        && addr & 0xfff == 0
        && maps
            .mapping_at(pid, addr)
            .is_none_or(|at| at.module.path == b"[uprobes]")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh binary every few seconds, each run once and deleted (benches/agent-soak.sh):
    /// forgetting between windows keeps the table the size of what is mapped and held
    /// (today's main kept every binary's module and attributes for the rest of the run),
    /// and a module still mapped or held keeps its id and its path.
    #[test]
    fn modules_no_process_maps_are_forgotten_between_windows() {
        let mut p = ProcessMaps::default();
        let attrs = |ino| MapAttrs {
            prot: 5,
            ino,
            ..MapAttrs::default()
        };
        p.map_with(1, (0x1000, 0x1000, 0), b"/bin/sh", None, attrs(1));
        let sh = p.lookup(1, 0x1000).unwrap().0;
        p.map_with(2, (0x1000, 0x1000, 0), b"/held", None, attrs(2));
        let held = p.lookup(2, 0x1000).unwrap().0;
        p.exit(2);
        for i in 0..1000u32 {
            let pid = 100 + i;
            let path = format!("/tmp/bin.{i}");
            p.map_with(
                pid,
                (0x1000, 0x1000, 0),
                path.as_bytes(),
                None,
                attrs(10 + u64::from(i)),
            );
            assert_eq!(
                p.module(p.lookup(pid, 0x1000).unwrap().0).path,
                path.as_bytes()
            );
            p.exit(pid);
            p.forget_unmapped([held]);
        }
        assert_eq!(p.modules_held(), 2);
        assert!(p.modules.len() <= 3, "{} module slots", p.modules.len());
        assert!(p.attrs.len() <= 3, "{} attribute slots", p.attrs.len());
        assert_eq!(p.module(sh).path, b"/bin/sh");
        assert_eq!(p.module(held).path, b"/held");
        assert_eq!(p.mapping_at(1, 0x1800).unwrap().attrs, attrs(1));
        // Let go of, a module's path interned again gets an id again.
        p.forget_unmapped([]);
        p.map(3, 0x1000, 0x1000, 0, b"/held", None);
        assert_eq!(p.module(p.lookup(3, 0x1000).unwrap().0).path, b"/held");
        assert_eq!(p.modules_held(), 2);
    }

    #[test]
    fn lookup_overlap_fork_and_exec() {
        let mut p = ProcessMaps::default();
        p.map(1, 0x1000, 0x3000, 0, b"/bin/a", None);
        assert_eq!(p.lookup(1, 0x2010), Some((0, 0x1010)));
        // A mapping in the middle splits the old one; the tail keeps its file offset.
        p.map(1, 0x2000, 0x1000, 0x5000, b"/lib/b.so", Some(b"\x01\x02"));
        assert_eq!(p.lookup(1, 0x1010), Some((0, 0x10)));
        assert_eq!(p.lookup(1, 0x2010), Some((1, 0x5010)));
        assert_eq!(p.lookup(1, 0x3010), Some((0, 0x2010)));
        assert_eq!(p.lookup(1, 0x4000), None);
        assert_eq!(p.module(1).build_id.as_deref(), Some(&b"\x01\x02"[..]));
        assert_eq!(p.module(1).basename(), "b.so");
        p.fork(2, 1);
        assert_eq!(p.lookup(2, 0x2010), Some((1, 0x5010)));
        p.exec(1);
        assert_eq!(p.lookup(1, 0x2010), None);
        assert_eq!(p.lookup(2, 0x2010), Some((1, 0x5010)));
        // An exited process's mappings go; the modules its frames name stay.
        p.exit(2);
        assert_eq!(p.lookup(2, 0x2010), None);
        assert!(p.by_pid.is_empty() || !p.by_pid.contains_key(&2));
        assert_eq!(p.module(1).basename(), "b.so");
    }

    #[test]
    fn the_first_brk_growth_is_the_heap_though_the_kernel_calls_it_anon() {
        let mut p = ProcessMaps::default();
        p.map(7, 0x5555_0000_0000, 0x5000, 0, b"/bin/a", None);
        p.map(7, 0x5555_0000_5000, 0x2000, 0x4000, b"/bin/a", None);
        // The loader's bss, right after the image, is not the heap.
        p.map(7, 0x5555_0000_7000, 0x1000, 0, b"//anon", None);
        p.map(7, 0x7f00_0000_0000, 0x20000, 0, b"/lib/ld.so", None);
        // An anonymous mapping of the loader before [vdso]: not the heap either.
        p.map(7, 0x5555_1000_0000, 0x1000, 0, b"//anon", None);
        p.map(7, 0x7f00_0010_0000, 0x2000, 0, b"[vdso]", None);
        // mmap'd memory near the stack is not the heap.
        p.map(7, 0x7f00_0020_0000, 0x3000, 0, b"//anon", None);
        assert!(!p.is_heap(7, 0x5555_0000_7000));
        assert!(!p.is_heap(7, 0x5555_1000_0000));
        assert!(!p.is_heap(7, 0x7f00_0020_0000));
        // The first growth of the break, a randomized distance past the image.
        p.map(7, 0x5555_2000_0000, 0x7000, 0, b"//anon", None);
        assert!(p.is_heap(7, 0x5555_2000_0000));
        // A later anonymous mapping in the same range is not.
        p.map(7, 0x5555_3000_0000, 0x1000, 0, b"//anon", None);
        assert!(!p.is_heap(7, 0x5555_3000_0000));
        p.fork(8, 7);
        assert!(p.is_heap(8, 0x5555_2000_0000));
        p.exec(8);
        assert!(!p.is_heap(8, 0x5555_2000_0000));

        // Named by the kernel or by /proc/PID/maps.
        p.map(9, 0x1000, 0x1000, 0, b"[heap]", None);
        assert!(p.is_heap(9, 0x1000));
    }

    #[test]
    fn a_corrupted_file_offset_saturates_when_split_and_looked_up() {
        // A recording's MMAP2 record with a pgoff near the end of u64 (fuzz/, `tools`).
        let mut p = ProcessMaps::default();
        p.map(1, 0x1000, 0x3000, u64::MAX - 0x10, b"/bin/a", None);
        assert_eq!(p.lookup(1, 0x1000), Some((0, u64::MAX - 0x10)));
        assert_eq!(p.lookup(1, 0x1800), Some((0, u64::MAX)));
        p.map(1, 0x2000, 0x1000, 0, b"/lib/b.so", None);
        assert_eq!(p.lookup(1, 0x3010), Some((0, u64::MAX)));
    }

    #[test]
    fn a_mapping_keeps_what_its_record_said_of_it_where_it_is_split() {
        let mut m = ProcessMaps::default();
        let attrs = MapAttrs {
            prot: 3,
            flags: 2,
            maj: 8,
            min: 1,
            ino: 42,
            ino_generation: 7,
        };
        m.map_with(1, (0x1000, 0x4000, 0x10), b"/lib/a.so", None, attrs);
        m.map(1, 0x2000, 0x1000, 0, b"//anon", None);
        let at = m.mapping_at(1, 0x3800).unwrap();
        assert_eq!(
            (at.module.path.as_slice(), at.pgoff, at.attrs),
            (&b"/lib/a.so"[..], 0x10 + 0x2800, attrs)
        );
        let anon = m.mapping_at(1, 0x2000).unwrap();
        assert_eq!(
            (anon.module.path.as_slice(), anon.attrs),
            (&b"//anon"[..], MapAttrs::default())
        );
        assert!(m.mapping_at(1, 0x5000).is_none() && m.mapping_at(2, 0x1000).is_none());
    }

    #[test]
    fn kinds() {
        let m = |p: &[u8]| ModuleInfo {
            path: p.to_vec(),
            build_id: None,
        };
        assert_eq!(m(b"//anon").kind(), ModuleKind::Anon);
        assert_eq!(m(b"/memfd:jit (deleted)").kind(), ModuleKind::Anon);
        assert_eq!(m(b"[vdso]").kind(), ModuleKind::Pseudo);
        assert_eq!(m(b"/usr/lib/libc.so.6").kind(), ModuleKind::File);
    }
}
