//! Loading one module: its PT_LOAD segments, the best symbol table, its debug file and,
//! when asked, its DWARF.

use std::path::{Path, PathBuf};

use super::Unknown;
use super::dwarf::{Dwarf, DwarfFrame};
use super::elf::{self, LoadSegment, Sym, SymbolTable, Table};
use super::locate::{DebugFile, Locator};
use super::plt;

/// What to load, and from where.
pub(crate) struct LoadRequest<'a> {
    /// The path actually read (maybe under `/proc/PID/root`).
    pub opened: &'a Path,
    /// The path as recorded.
    pub recorded: &'a Path,
    /// The file's bytes, `None` when it could not be read.
    pub data: Option<Vec<u8>>,
    /// The recorded build-id, if any.
    pub build_id: Option<&'a [u8]>,
    /// Load DWARF (for lines or inline frames).
    pub want_dwarf: bool,
}

/// Side results of a load, for the symbolizer's stats.
#[derive(Debug, Default)]
pub(crate) struct LoadReport {
    pub debug_file: Option<PathBuf>,
    pub failures: Vec<String>,
}

/// A loaded module. When `unknown` is set, every lookup in it fails with that reason.
#[derive(Debug)]
pub(crate) struct Module {
    segments: Vec<LoadSegment>,
    /// False when segments come from a debug file (file sizes stripped): offsets are guessed.
    exact_segments: bool,
    symbols: SymbolTable,
    dwarf: Option<Dwarf>,
    /// Without lines or inline frames asked for: the DWARF that names versioned aliases
    /// (`Symbolizer::resolve`), read on the first lookup of one, so that a report reads a
    /// large library's debug information only when a frame needs it.
    names_dwarf: Option<LazyDwarf>,
    pub unknown: Option<Unknown>,
}

/// DWARF read from `path` on first use (the binary, or its debug file found at load).
#[derive(Debug)]
struct LazyDwarf {
    path: PathBuf,
    loaded: std::cell::OnceCell<Result<Dwarf, String>>,
}

impl LazyDwarf {
    fn new(path: &Path) -> LazyDwarf {
        LazyDwarf {
            path: path.to_path_buf(),
            loaded: std::cell::OnceCell::new(),
        }
    }

    /// The DWARF, and on the call that read it and failed, why.
    fn get(&self) -> (Option<&Dwarf>, Option<String>) {
        let fresh = self.loaded.get().is_none();
        let loaded = self.loaded.get_or_init(|| {
            // The file's bytes (libc's debug file: 4 MiB) go before addr2line parses the
            // sections copied out of them, not after: the agent's symbolizer, made afresh
            // every few dozen windows, peaked 4 MiB higher for it.
            let sections = {
                let data = crate::mapped::read_regular(&self.path).map_err(|e| e.to_string())?;
                let obj = object::File::parse(&*data).map_err(|e| e.to_string())?;
                Dwarf::sections(&obj).map(|(s, _)| s)
            };
            sections
                .and_then(Dwarf::from_sections)
                .map_err(|e| format!("failed to load DWARF: {e}"))
        });
        match loaded {
            Ok(d) => (Some(d), None),
            Err(e) => (None, fresh.then(|| format!("{}: {e}", self.path.display()))),
        }
    }
}

impl Module {
    fn unusable(reason: Unknown) -> Module {
        Module {
            segments: Vec::new(),
            exact_segments: true,
            symbols: SymbolTable::default(),
            dwarf: None,
            names_dwarf: None,
            unknown: Some(reason),
        }
    }

    /// Loads a module per the rules in `symbolize`'s module docs.
    pub(crate) fn load(locator: &Locator, req: LoadRequest<'_>) -> (Module, LoadReport) {
        let mut report = LoadReport::default();
        let by_recorded_id = |report: &mut LoadReport, reason: Unknown| match req
            .build_id
            .and_then(|id| locator.by_build_id(id))
        {
            Some(debug) => Module::from_debug_only(debug, req.want_dwarf, report),
            None => Module::unusable(reason),
        };
        let Some(data) = req.data.as_deref() else {
            let m = by_recorded_id(&mut report, Unknown::NoFile);
            return (m, report);
        };
        let obj = match object::File::parse(data) {
            Ok(obj) if obj.format() == object::BinaryFormat::Elf => obj,
            _ => {
                let m = by_recorded_id(&mut report, Unknown::NotElf);
                return (m, report);
            }
        };
        let file_id = elf::build_id(&obj);
        if let Some(recorded) = req.build_id
            && file_id.as_deref() != Some(recorded)
        {
            let m = by_recorded_id(&mut report, Unknown::BuildIdMismatch);
            return (m, report);
        }
        let m = Module::from_binary(locator, &req, &obj, file_id.as_deref(), &mut report);
        (m, report)
    }

    fn from_binary(
        locator: &Locator,
        req: &LoadRequest<'_>,
        obj: &object::File<'_>,
        file_id: Option<&[u8]>,
        report: &mut LoadReport,
    ) -> Module {
        let mut symbols = SymbolTable::from_object(obj, Table::Symtab);
        let bin_dwarf = elf::has_dwarf(obj);
        let need_debug = symbols.is_empty() || (req.want_dwarf && !bin_dwarf);
        let debug = if need_debug {
            file_id.and_then(|id| locator.by_build_id(id)).or_else(|| {
                let (name, crc) = elf::debuglink(obj)?;
                locator.by_debuglink(req.opened, req.recorded, &name, crc)
            })
        } else {
            None
        };
        let debug_obj = debug
            .as_ref()
            .and_then(|d| object::File::parse(&*d.data).ok());
        if symbols.is_empty()
            && let Some(dobj) = &debug_obj
        {
            symbols = SymbolTable::from_object(dobj, Table::Symtab);
        }
        if symbols.is_empty() {
            symbols = SymbolTable::from_object(obj, Table::Dynsym);
        }
        symbols.add_unclaimed(plt::plt_symbols(obj));
        let mut dwarf = None;
        let mut names_dwarf = None;
        let source = if bin_dwarf {
            Some((obj, req.opened))
        } else {
            debug_obj
                .as_ref()
                .filter(|d| elf::has_dwarf(d))
                .zip(debug.as_ref().map(|d| d.path.as_path()))
        };
        if req.want_dwarf {
            dwarf = source.and_then(|(o, _)| load_dwarf(o, report));
        } else if symbols.has_versioned() {
            names_dwarf = source.map(|(_, path)| LazyDwarf::new(path));
        }
        if debug_obj.is_some() {
            report.debug_file = debug.map(|d| d.path);
        }
        Module {
            segments: elf::load_segments(obj),
            exact_segments: true,
            symbols,
            dwarf,
            names_dwarf,
            unknown: None,
        }
    }

    fn from_debug_only(debug: DebugFile, want_dwarf: bool, report: &mut LoadReport) -> Module {
        let Ok(obj) = object::File::parse(&*debug.data) else {
            return Module::unusable(Unknown::NotElf);
        };
        let symbols = SymbolTable::from_object(&obj, Table::Symtab);
        let has_dwarf = elf::has_dwarf(&obj);
        let dwarf = if want_dwarf && has_dwarf {
            load_dwarf(&obj, report)
        } else {
            None
        };
        let names_dwarf = (!want_dwarf && has_dwarf && symbols.has_versioned())
            .then(|| LazyDwarf::new(&debug.path));
        let module = Module {
            segments: elf::load_segments(&obj),
            exact_segments: false,
            symbols,
            dwarf,
            names_dwarf,
            unknown: None,
        };
        report.debug_file = Some(debug.path);
        module
    }

    /// The SVMA of a file offset in this module.
    pub(crate) fn offset_to_svma(&self, off: u64) -> Option<u64> {
        if self.exact_segments {
            elf::segments_offset_to_svma(&self.segments, off)
        } else {
            elf::debug_file_offset_to_svma(&self.segments, off)
        }
    }

    /// The function symbol enclosing `svma`.
    pub(crate) fn symbol(&self, svma: u64) -> Option<&Sym> {
        self.symbols.lookup(svma)
    }

    /// DWARF frames at `svma`, innermost first; `None` without DWARF.
    pub(crate) fn dwarf_frames(
        &self,
        svma: u64,
        demangle: bool,
    ) -> Option<Result<Vec<DwarfFrame>, String>> {
        let dwarf = match (&self.dwarf, &self.names_dwarf) {
            (Some(d), _) => d,
            (None, Some(lazy)) => match lazy.get() {
                (Some(d), _) => d,
                (None, Some(why)) => return Some(Err(why)),
                (None, None) => return None,
            },
            (None, None) => return None,
        };
        Some(dwarf.frames(svma, demangle).map_err(|e| e.to_string()))
    }
}

fn load_dwarf(obj: &object::File<'_>, report: &mut LoadReport) -> Option<Dwarf> {
    match Dwarf::load(obj) {
        Ok((d, 0)) => Some(d),
        Ok((d, bad)) => {
            let msg = format!("{bad} DWARF sections could not be decompressed");
            report.failures.push(msg);
            Some(d)
        }
        Err(e) => {
            report.failures.push(format!("failed to load DWARF: {e}"));
            None
        }
    }
}
