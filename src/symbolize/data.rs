//! Names for the addresses of memory samples (`memperf mem report`): the function holding
//! the instruction and the data object holding the address it touched, by ELF symbol
//! (OBJECT symbols of `.data`, `.bss` and the other allocated data sections, as perf's
//! "Data Symbol" column), from a file offset in a mapping.

use std::path::Path;

use object::{Object, ObjectSection, ObjectSymbol, SymbolKind, SymbolSection};
use rustc_hash::FxHashMap;

use super::elf::{self, LoadSegment, SymbolTable, Table};

/// A symbol found for an address: its name and the address's offset in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Named {
    pub name: String,
    pub offset: u64,
}

/// One file's code and data symbols.
struct Image {
    segments: Vec<LoadSegment>,
    code: SymbolTable,
    /// Data objects sorted by start: (start, end, name).
    data: Vec<(u64, u64, Box<str>)>,
}

/// The images of the files met, loaded once each by path; a file that cannot be read or
/// parsed names nothing (its addresses print as perf prints unresolved ones).
#[derive(Default)]
pub(crate) struct AddrNames {
    images: FxHashMap<Vec<u8>, Option<Image>>,
}

impl AddrNames {
    fn image(&mut self, path: &[u8]) -> Option<&Image> {
        self.images
            .entry(path.to_vec())
            .or_insert_with(|| load(path))
            .as_ref()
    }

    /// The function at file offset `off` of `path`.
    pub(crate) fn code(&mut self, path: &[u8], off: u64) -> Option<Named> {
        let img = self.image(path)?;
        let svma = elf::segments_offset_to_svma(&img.segments, off)?;
        let sym = img.code.lookup(svma)?;
        Some(Named {
            name: sym.name.to_string(),
            offset: svma - sym.start,
        })
    }

    /// The data object at file offset `off` of `path` (beyond a segment's file bytes too:
    /// `.bss`, which a mapping of the file covers up to its last page).
    pub(crate) fn data(&mut self, path: &[u8], off: u64) -> Option<Named> {
        let img = self.image(path)?;
        let svma = data_svma(&img.segments, off)?;
        let i = img.data.partition_point(|d| d.0 <= svma).checked_sub(1)?;
        let (start, end, name) = img.data.get(i)?;
        (svma < *end).then(|| Named {
            name: name.to_string(),
            offset: svma - start,
        })
    }
}

/// The SVMA of file offset `off` in the segment that holds it in memory: the last segment
/// starting at or before it whose memory size reaches it.
fn data_svma(segments: &[LoadSegment], off: u64) -> Option<u64> {
    segments
        .iter()
        .filter(|s| s.offset <= off && off - s.offset < s.mem_size.max(s.file_size))
        .max_by_key(|s| s.offset)
        .map(|s| s.svma.wrapping_add(off - s.offset))
}

fn load(path: &[u8]) -> Option<Image> {
    use std::os::unix::ffi::OsStrExt;
    let path = Path::new(std::ffi::OsStr::from_bytes(path));
    let bytes = crate::mapped::read_regular(path).ok()?;
    let obj = object::File::parse(&*bytes).ok()?;
    let mut code = SymbolTable::from_object(&obj, Table::Symtab);
    if code.is_empty() {
        code = SymbolTable::from_object(&obj, Table::Dynsym);
    }
    Some(Image {
        segments: elf::load_segments(&obj),
        code,
        data: data_objects(&obj),
    })
}

/// OBJECT symbols defined in allocated, non-executable sections, one per address (a
/// global name before a local one, as perf prefers), each ending at its size or at the
/// next one.
fn data_objects(obj: &object::File<'_>) -> Vec<(u64, u64, Box<str>)> {
    let mut syms: Vec<(u64, u8, u64, Box<str>)> = Vec::new();
    let all = obj.symbols().chain(obj.dynamic_symbols());
    for sym in all {
        if sym.kind() != SymbolKind::Data || sym.is_undefined() {
            continue;
        }
        let SymbolSection::Section(idx) = sym.section() else {
            continue;
        };
        let Ok(section) = obj.section_by_index(idx) else {
            continue;
        };
        let alloc_data = match section.flags() {
            object::SectionFlags::Elf { sh_flags } => {
                sh_flags & u64::from(object::elf::SHF_ALLOC) != 0
                    && sh_flags & u64::from(object::elf::SHF_EXECINSTR) == 0
            }
            _ => false,
        };
        let Ok(name) = sym.name() else { continue };
        if !alloc_data || name.is_empty() {
            continue;
        }
        let rank = if sym.is_global() { 0 } else { 1 };
        syms.push((sym.address(), rank, sym.size(), name.into()));
    }
    syms.sort();
    syms.dedup_by(|later, first| later.0 == first.0);
    let starts: Vec<u64> = syms.iter().map(|s| s.0).collect();
    syms.into_iter()
        .enumerate()
        .map(|(i, (start, _, size, name))| {
            let next = starts.get(i + 1).copied().unwrap_or(u64::MAX);
            let end = if size > 0 {
                start.saturating_add(size)
            } else {
                next
            };
            (start, end.max(start + 1), name)
        })
        .collect()
}
