//! Symbolization: file offsets in modules, kernel addresses and JIT addresses to names,
//! with optional file:line and inline frames.
//!
//! The report calls this once per unique (module, address), late. It passes a module
//! (path, optional recorded build-id, optional pid for `/proc/PID/root`) and a **file
//! offset**; this module converts the offset to an SVMA through the ELF's PT_LOAD segments.
//!
//! Module rules:
//! - read `/proc/PID/root/<path>` when a pid is given and that path exists, else `<path>`;
//! - with a recorded build-id that the file does not carry (binary replaced or rebuilt),
//!   the file's symbols are not used: only the debug file found by build-id is, else
//!   [`Unknown::BuildIdMismatch`];
//! - symbols come from `.symtab` of the binary, else of its debug file, else `.dynsym`;
//! - debug files: `/usr/lib/debug/.build-id/NN/REST.debug`, then `.gnu_debuglink` (CRC32
//!   checked) next to the binary, in `.debug/`, and in `/usr/lib/debug/<dir>/`;
//! - names are chosen among the aliases at an address as perf chooses them (unversioned
//!   names first), and never carry a symbol version (`@@GLIBC_2.34`); where DWARF is loaded
//!   the function's DWARF name is used, as perf does: always for a versioned alias
//!   (`__libc_start_main_impl`), and with lines or inline frames for every function;
//! - DWARF is loaded when inline frames or lines are asked for, else on the first lookup
//!   of a versioned name (only the binary's, or the debug file already read for symbols).
//!
//! Modules are cached by recorded build-id, else by (dev, inode, size, mtime); nothing is
//! invalidated during one symbolizer's life.

mod data;
mod demangle;
mod dwarf;
mod elf;
mod jitdump;
mod kallsyms;
mod locate;
pub(crate) use locate::hex;
mod module;
mod perfmap;
mod plt;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod window_tests;

use crate::stacks::CodeAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustc_hash::FxHashMap;

pub(crate) use data::AddrNames;
pub use kallsyms::Kallsyms;
pub use perfmap::PerfMap;

use demangle::maybe_demangle;
use dwarf::DwarfFrame;
use locate::Locator;
use module::{LoadRequest, Module};

/// How much to produce per address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SymbolizeOptions {
    /// Inline frames as separate frames (loads DWARF).
    pub inline: bool,
    /// file:line (loads DWARF).
    pub lines: bool,
    /// Demangle Rust and C++ names.
    pub demangle: bool,
}

/// A module as recorded: path, build-id if known, pid for `/proc/PID/root`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModuleKey<'a> {
    pub path: &'a [u8],
    pub build_id: Option<&'a [u8]>,
    pub pid: Option<u32>,
}

/// One symbolized frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// `None` = unknown.
    pub name: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
    /// An inlined frame (the code is in its caller, the next frame).
    pub inlined: bool,
    /// Address − symbol start, for `sym+0x1a`. For return addresses, the return address
    /// itself (as perf prints it), not the address looked up.
    pub sym_offset: Option<u64>,
}

/// Why an address has no name. Expected misses are values, not errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unknown {
    /// The file (and any debug file by build-id) could not be read.
    NoFile,
    /// The file is not a (complete) ELF file.
    NotElf,
    /// The file at the path has a different build-id than recorded, and no debug file
    /// with the recorded build-id was found.
    BuildIdMismatch,
    /// No symbol encloses the address.
    NoSymbol,
    /// Kernel addresses are hidden (kptr_restrict).
    Hidden,
}

/// The frames for one address. `unknown` is set exactly when the outermost function's name
/// is unknown; `frames` may then still carry a file:line, or be empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbolized {
    /// Outermost last: for inline frames, the innermost inlined frame first, the real
    /// function last.
    pub frames: Vec<Frame>,
    pub unknown: Option<Unknown>,
}

impl Symbolized {
    fn unknown(reason: Unknown) -> Symbolized {
        Symbolized {
            frames: Vec::new(),
            unknown: Some(reason),
        }
    }
}

/// Unknown results by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnknownCounts {
    pub no_file: u64,
    pub not_elf: u64,
    pub build_id_mismatch: u64,
    pub no_symbol: u64,
    pub hidden: u64,
}

/// Counters for the report header and end-of-run summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SymbolizeStats {
    /// Calls to `symbolize`, `symbolize_kernel` and `symbolize_jit`.
    pub lookups: u64,
    /// Lookups served by an already loaded module, kallsyms table or perf map.
    pub cache_hits: u64,
    pub unknown: UnknownCounts,
    /// Modules loaded (including unusable ones, which are cached too).
    pub modules_loaded: u64,
    /// Separate debug files used.
    pub debug_files: Vec<PathBuf>,
    /// Malformed data met (bad DWARF, bad kallsyms or perf-map lines): count.
    pub failures: u64,
    /// The first few failure messages.
    pub failure_messages: Vec<String>,
}

const MAX_FAILURE_MESSAGES: usize = 16;

/// Cache key of a loaded module without a recorded build-id.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum FileId {
    File {
        dev: u64,
        ino: u64,
        size: u64,
        mtime: i64,
        mtime_nsec: i64,
    },
    Missing(PathBuf),
}

/// Memo of pid → path → module for modules without a recorded build-id, to stat once.
type PathMemo = FxHashMap<Option<u32>, FxHashMap<Vec<u8>, usize>>;

/// Symbolizes addresses, caching modules, kallsyms and perf maps.
#[derive(Debug)]
pub struct Symbolizer {
    opts: SymbolizeOptions,
    locator: Locator,
    modules: Vec<Module>,
    by_build_id: FxHashMap<Vec<u8>, usize>,
    by_file: FxHashMap<FileId, usize>,
    by_path: PathMemo,
    /// Shared: `memperf script` also names payload call sites with the same table.
    kallsyms: Option<Arc<Kallsyms>>,
    kallsyms_unreadable: bool,
    perf_maps: FxHashMap<u32, Option<PerfMap>>,
    /// jitdump files by the pid that wrote them, with their path (`None`: unreadable).
    jit_dumps: FxHashMap<u32, (Vec<u8>, Option<jitdump::JitDump>)>,
    stats: SymbolizeStats,
}

/// Where a JIT frame's name came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JitSource {
    /// The process's `jit-PID.dump`.
    JitDump,
    /// `/tmp/perf-PID.map`.
    PerfMap,
}

/// The path to read for `key`: under `/proc/PID/root` when that exists (see
/// [`crate::mapped::resolve_recorded`]).
fn resolve_path(key: &ModuleKey<'_>) -> (PathBuf, PathBuf) {
    crate::mapped::resolve_recorded(key.path, key.pid)
}

impl Symbolizer {
    /// A symbolizer with empty caches.
    pub fn new(opts: SymbolizeOptions) -> Symbolizer {
        Symbolizer {
            opts,
            locator: Locator::default(),
            modules: Vec::new(),
            by_build_id: FxHashMap::default(),
            by_file: FxHashMap::default(),
            by_path: PathMemo::default(),
            kallsyms: None,
            kallsyms_unreadable: false,
            perf_maps: FxHashMap::default(),
            jit_dumps: FxHashMap::default(),
            stats: SymbolizeStats::default(),
        }
    }

    /// For a symbolizer kept from one window of `memperf agent` to the next: forgets what
    /// belongs to processes (perf maps and jitdump files, which grow as they run), which
    /// file each process's paths led to, the files found missing, and the counts; keeps the
    /// files loaded. Returns how many files it holds.
    ///
    /// A path is looked up through `/proc/PID/root` while its process lives: one that exits
    /// (or execs) between the look and the open leaves its file missing for that window,
    /// and that answer must not outlive the window, nor name the next window's frames of a
    /// process the kernel gave the same pid (the next lookup of a loaded file costs a stat).
    pub fn next_window(&mut self) -> usize {
        self.perf_maps.clear();
        self.jit_dumps.clear();
        self.by_path.clear();
        self.by_file
            .retain(|id, _| !matches!(id, FileId::Missing(_)));
        self.stats = SymbolizeStats::default();
        self.modules.len()
    }

    /// Uses `kallsyms` (e.g. recorded with the profile) instead of reading `/proc/kallsyms`.
    pub fn set_kallsyms(&mut self, kallsyms: impl Into<Arc<Kallsyms>>) {
        self.kallsyms = Some(kallsyms.into());
        self.kallsyms_unreadable = false;
    }

    #[cfg(test)]
    fn set_debug_root(&mut self, root: PathBuf) {
        self.locator.debug_root = root;
    }

    fn note_failure(&mut self, msg: String) {
        self.stats.failures += 1;
        if self.stats.failure_messages.len() < MAX_FAILURE_MESSAGES {
            self.stats.failure_messages.push(msg);
        }
    }

    fn count_unknown(&mut self, reason: Option<Unknown>) {
        let c = &mut self.stats.unknown;
        match reason {
            None => {}
            Some(Unknown::NoFile) => c.no_file += 1,
            Some(Unknown::NotElf) => c.not_elf += 1,
            Some(Unknown::BuildIdMismatch) => c.build_id_mismatch += 1,
            Some(Unknown::NoSymbol) => c.no_symbol += 1,
            Some(Unknown::Hidden) => c.hidden += 1,
        }
    }

    /// Symbolizes `file_offset` in `module`. With `is_return_address`, looks up
    /// `file_offset − 1` (the call instruction) and reports that frame.
    pub fn symbolize(&mut self, module: &ModuleKey<'_>, at: CodeAddr) -> Symbolized {
        let (file_offset, is_return_address) = (at.addr(), at.is_return());
        self.stats.lookups += 1;
        let idx = self.module_index(module);
        let result = match self.modules.get(idx) {
            Some(m) => self.resolve(m, file_offset, is_return_address),
            None => (Symbolized::unknown(Unknown::NoFile), None),
        };
        if let Some(Err(msg)) = result.1 {
            self.note_failure(msg);
        }
        self.count_unknown(result.0.unknown);
        result.0
    }

    /// The index of the loaded module for `key`, loading it on first use.
    fn module_index(&mut self, key: &ModuleKey<'_>) -> usize {
        let cached = match key.build_id {
            Some(id) => self.by_build_id.get(id),
            None => self.by_path.get(&key.pid).and_then(|m| m.get(key.path)),
        };
        if let Some(&idx) = cached {
            self.stats.cache_hits += 1;
            return idx;
        }
        let (opened, recorded) = resolve_path(key);
        let meta = std::fs::metadata(&opened).ok().filter(|m| m.is_file());
        let file_id = match &meta {
            Some(m) => FileId::File {
                dev: m.dev(),
                ino: m.ino(),
                size: m.size(),
                mtime: m.mtime(),
                mtime_nsec: m.mtime_nsec(),
            },
            None => FileId::Missing(opened.clone()),
        };
        let known = match key.build_id {
            Some(_) => None,
            None => self.by_file.get(&file_id).copied(),
        };
        let idx = match known {
            Some(idx) => {
                self.stats.cache_hits += 1;
                idx
            }
            None => self.load_module(key, &opened, &recorded, meta.is_some()),
        };
        match key.build_id {
            Some(id) => {
                self.by_build_id.insert(id.to_vec(), idx);
            }
            None => {
                self.by_file.insert(file_id, idx);
                let memo = self.by_path.entry(key.pid).or_default();
                memo.insert(key.path.to_vec(), idx);
            }
        }
        idx
    }

    /// Loads a module and returns its index.
    fn load_module(
        &mut self,
        key: &ModuleKey<'_>,
        opened: &Path,
        recorded: &Path,
        is_file: bool,
    ) -> usize {
        let data = if is_file {
            // Paths come from the recording: a FIFO or a device there must not hang or
            // flood the report.
            crate::mapped::read_regular(opened).ok()
        } else {
            None
        };
        let req = LoadRequest {
            opened,
            recorded,
            data,
            build_id: key.build_id,
            want_dwarf: self.opts.inline || self.opts.lines,
        };
        let (module, report) = Module::load(&self.locator, req);
        self.stats.modules_loaded += 1;
        self.stats.debug_files.extend(report.debug_file);
        for f in report.failures {
            self.note_failure(format!("{}: {f}", opened.display()));
        }
        self.modules.push(module);
        self.modules.len() - 1
    }

    /// Looks up one offset in a loaded module; the second value is a DWARF result to
    /// account for (an error message on failure).
    fn resolve(
        &self,
        m: &Module,
        file_offset: u64,
        is_ret: bool,
    ) -> (Symbolized, Option<Result<(), String>>) {
        if let Some(reason) = m.unknown {
            return (Symbolized::unknown(reason), None);
        }
        let lookup_off = if is_ret {
            file_offset.saturating_sub(1)
        } else {
            file_offset
        };
        let Some(probe) = m.offset_to_svma(lookup_off) else {
            return (Symbolized::unknown(Unknown::NoSymbol), None);
        };
        let reported = probe.wrapping_add(u64::from(is_ret && file_offset > 0));
        let sym = m.symbol(probe);
        let mut outer = Frame {
            name: sym.map(|s| maybe_demangle(&s.name, self.opts.demangle)),
            file: None,
            line: None,
            inlined: false,
            sym_offset: sym.map(|s| reported.wrapping_sub(s.start)),
        };
        let versioned = sym.is_some_and(|s| s.versioned);
        if !(self.opts.inline || self.opts.lines || versioned) {
            return (self.combine(outer, Vec::new()), None);
        }
        let (dwarf_frames, status) = match m.dwarf_frames(probe, self.opts.demangle) {
            Some(Ok(f)) => (f, Some(Ok(()))),
            Some(Err(e)) => (Vec::new(), Some(Err(e))),
            None => (Vec::new(), None),
        };
        // With DWARF, the function's name is DWARF's, as perf names it (through addr2line):
        // a versioned symbol is an exported alias (`__libc_start_main@@GLIBC_2.34`) of
        // `__libc_start_main_impl`.
        if let Some(name) = dwarf_frames.last().and_then(|f| f.name.clone()) {
            outer.name = Some(name);
        }
        (self.combine(outer, dwarf_frames), status)
    }

    /// Merges the symbol-table frame with DWARF frames (innermost first) per the options.
    fn combine(&self, mut outer: Frame, dwarf: Vec<DwarfFrame>) -> Symbolized {
        let mut frames = Vec::new();
        if let Some((last, inlined)) = dwarf.split_last() {
            if self.opts.inline {
                for f in inlined {
                    frames.push(Frame {
                        name: f.name.clone(),
                        file: f.file.clone(),
                        line: f.line,
                        inlined: true,
                        sym_offset: None,
                    });
                }
            }
            if outer.name.is_none() {
                outer.name = last.name.clone();
            }
            outer.file = last.file.clone();
            outer.line = last.line;
        }
        if !self.opts.lines {
            for f in frames.iter_mut().chain(std::iter::once(&mut outer)) {
                f.file = None;
                f.line = None;
            }
        }
        let unknown = outer.name.is_none().then_some(Unknown::NoSymbol);
        if outer.name.is_some() || outer.file.is_some() || !frames.is_empty() {
            frames.push(outer);
        }
        Symbolized { frames, unknown }
    }

    fn load_kallsyms(&mut self) {
        if self.kallsyms.is_some() || self.kallsyms_unreadable {
            return;
        }
        match std::fs::read_to_string("/proc/kallsyms") {
            Ok(text) => {
                let k = Kallsyms::from_text(&text);
                if k.malformed_lines() > 0 {
                    let n = k.malformed_lines();
                    self.note_failure(format!("/proc/kallsyms: {n} malformed lines"));
                }
                self.kallsyms = Some(Arc::new(k));
            }
            Err(e) => {
                self.kallsyms_unreadable = true;
                self.note_failure(format!("failed to read /proc/kallsyms: {e}"));
            }
        }
    }

    /// Symbolizes a kernel address through `/proc/kallsyms` (module symbols included).
    pub fn symbolize_kernel(&mut self, at: CodeAddr) -> Symbolized {
        let (addr, is_return_address) = (at.addr(), at.is_return());
        self.stats.lookups += 1;
        if self.kallsyms.is_some() {
            self.stats.cache_hits += 1;
        }
        self.load_kallsyms();
        let probe = if is_return_address {
            addr.saturating_sub(1)
        } else {
            addr
        };
        let result = match &self.kallsyms {
            None => Symbolized::unknown(Unknown::NoFile),
            Some(k) if k.is_hidden() => Symbolized::unknown(Unknown::Hidden),
            Some(k) => match k.lookup(probe) {
                Some(s) => Symbolized {
                    frames: vec![Frame {
                        name: Some(s.name.to_owned()),
                        file: None,
                        line: None,
                        inlined: false,
                        sym_offset: Some(addr - (probe - s.offset)),
                    }],
                    unknown: None,
                },
                None => Symbolized::unknown(Unknown::NoSymbol),
            },
        };
        self.count_unknown(result.unknown);
        result
    }

    /// Symbolizes a JIT address of `pid`: through its jitdump file when it mapped one
    /// (`dump`: the one it mapped so far, if any; a streaming output names JIT frames as
    /// they come, maybe before the process maps its dump), else `/tmp/perf-PID.map`.
    /// Of several functions the dump placed at `addr`, the one loaded at time `load` (see
    /// `aggregate::JitTimes`), else the last.
    pub fn symbolize_jit(
        &mut self,
        pid: u32,
        addr: u64,
        (dump, load): (Option<&[u8]>, Option<u64>),
    ) -> Option<(Frame, JitSource)> {
        self.stats.lookups += 1;
        if let Some(path) = dump {
            if self.jit_dumps.get(&pid).is_some_and(|(p, _)| p == path) {
                self.stats.cache_hits += 1;
            } else {
                let loaded = self.load_jit_dump(pid, path);
                self.jit_dumps.insert(pid, (path.to_vec(), loaded));
            }
        }
        let found = dump
            .and_then(|_| self.jit_dumps.get(&pid))
            .and_then(|(_, d)| d.as_ref()?.lookup(addr, load));
        if let Some(found) = found {
            let lines = self.opts.lines;
            let frame = Frame {
                name: Some(found.name.to_owned()),
                file: found.file.filter(|_| lines).map(str::to_owned),
                line: found.line.filter(|_| lines),
                inlined: false,
                sym_offset: Some(found.offset),
            };
            return Some((frame, JitSource::JitDump));
        }
        self.perf_map_frame(pid, addr)
            .map(|f| (f, JitSource::PerfMap))
    }

    /// Reads the jitdump at `path` (as recorded; under `/proc/PID/root` while the process
    /// lives), counting a failure or damage.
    fn load_jit_dump(&mut self, pid: u32, path: &[u8]) -> Option<jitdump::JitDump> {
        let key = ModuleKey {
            path,
            build_id: None,
            pid: Some(pid),
        };
        let (opened, recorded) = resolve_path(&key);
        match jitdump::JitDump::read(&opened) {
            Ok(dump) => {
                if let Some(why) = &dump.damage {
                    let msg = format!("jitdump {}: {why}", recorded.display());
                    self.note_failure(msg);
                }
                Some(dump)
            }
            Err(e) => {
                self.note_failure(format!("jitdump {}: {e}", recorded.display()));
                None
            }
        }
    }

    /// Symbolizes a JIT address through `/tmp/perf-PID.map`.
    fn perf_map_frame(&mut self, pid: u32, addr: u64) -> Option<Frame> {
        if self.perf_maps.contains_key(&pid) {
            self.stats.cache_hits += 1;
        } else {
            let path = format!("/tmp/perf-{pid}.map");
            let map = std::fs::read_to_string(&path)
                .ok()
                .map(|t| PerfMap::from_text(&t));
            if let Some(n) = map
                .as_ref()
                .map(PerfMap::malformed_lines)
                .filter(|&n| n > 0)
            {
                self.note_failure(format!("{path}: {n} malformed lines"));
            }
            self.perf_maps.insert(pid, map);
        }
        let (name, offset) = self.perf_maps.get(&pid)?.as_ref()?.lookup(addr)?;
        Some(Frame {
            name: Some(name.to_owned()),
            file: None,
            line: None,
            inlined: false,
            sym_offset: Some(offset),
        })
    }

    /// True when kallsyms was read and kptr_restrict hid its addresses.
    pub fn kernel_hidden(&self) -> bool {
        self.kallsyms.as_deref().is_some_and(Kallsyms::is_hidden)
    }

    /// A copy of the counters.
    pub fn stats(&self) -> SymbolizeStats {
        self.stats.clone()
    }
}
