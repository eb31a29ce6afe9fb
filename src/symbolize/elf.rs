//! ELF facts the symbolizer needs: PT_LOAD segments (file offset → SVMA), the build-id,
//! `.gnu_debuglink`, and a sorted function-symbol table.

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind, SymbolSection};

/// A PT_LOAD segment: file bytes `[offset, offset + file_size)` are mapped at `svma`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LoadSegment {
    pub offset: u64,
    pub file_size: u64,
    pub svma: u64,
    pub mem_size: u64,
}

/// The PT_LOAD segments of a parsed ELF file.
pub(crate) fn load_segments(obj: &object::File<'_>) -> Vec<LoadSegment> {
    obj.segments()
        .map(|seg| {
            let (offset, file_size) = seg.file_range();
            LoadSegment {
                offset,
                file_size,
                svma: seg.address(),
                mem_size: seg.size(),
            }
        })
        .collect()
}

/// Converts a file offset to an SVMA through PT_LOAD segments: an offset within
/// `[p_offset, p_offset + p_filesz)` maps to `p_vaddr + (off − p_offset)`.
pub(crate) fn segments_offset_to_svma(segments: &[LoadSegment], off: u64) -> Option<u64> {
    segments.iter().find_map(|s| {
        let rel = off.checked_sub(s.offset)?;
        (rel < s.file_size).then(|| s.svma.wrapping_add(rel))
    })
}

/// For separate debug files, whose PT_LOAD headers keep addresses but not file sizes
/// (`p_filesz` is 0 after `--only-keep-debug`): assume the usual linker layout where each
/// segment's file offset equals its address minus the first segment's address. A guess,
/// used only when the original binary is gone or was replaced.
pub(crate) fn debug_file_offset_to_svma(segments: &[LoadSegment], off: u64) -> Option<u64> {
    let base = segments.iter().map(|s| s.svma).min()?;
    let svma = base.checked_add(off)?;
    segments
        .iter()
        .any(|s| svma >= s.svma && svma - s.svma < s.mem_size)
        .then_some(svma)
}

/// Converts a file offset to an SVMA through the PT_LOAD segments of the ELF image `elf`.
/// Returns `None` if `elf` does not parse or no segment holds the offset.
#[cfg(test)]
fn file_offset_to_svma(elf: &[u8], off: u64) -> Option<u64> {
    let obj = object::File::parse(elf).ok()?;
    if obj.format() != object::BinaryFormat::Elf {
        return None;
    }
    segments_offset_to_svma(&load_segments(&obj), off)
}

/// The `.note.gnu.build-id` of a parsed file, if any.
pub(crate) fn build_id(obj: &object::File<'_>) -> Option<Vec<u8>> {
    obj.build_id().ok().flatten().map(<[u8]>::to_vec)
}

/// `.gnu_debuglink`: file name and CRC32.
pub(crate) fn debuglink(obj: &object::File<'_>) -> Option<(Vec<u8>, u32)> {
    let (name, crc) = obj.gnu_debuglink().ok().flatten()?;
    Some((name.to_vec(), crc))
}

/// Whether the file carries DWARF line or function information.
pub(crate) fn has_dwarf(obj: &object::File<'_>) -> bool {
    obj.section_by_name(".debug_info")
        .is_some_and(|s| s.kind() != object::SectionKind::UninitializedData && s.size() > 0)
}

/// One function symbol: `[start, end)` in SVMA space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Sym {
    pub start: u64,
    pub end: u64,
    /// Without a symbol version: `__libc_start_main`, never `__libc_start_main@@GLIBC_2.34`.
    pub name: Box<str>,
    /// The name carried a version in the table (`name@VERSION` or `name@@VERSION`): it is
    /// the exported alias of a function whose own name debug information may give.
    pub versioned: bool,
}

/// Function symbols sorted by start address, one per address.
#[derive(Debug, Default)]
pub(crate) struct SymbolTable {
    syms: Vec<Sym>,
}

/// ELF symbol binding, in perf's order of preference among aliases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Binding {
    Global,
    Local,
    Weak,
}

/// A candidate before aliases at one address are merged.
struct Candidate {
    start: u64,
    size: u64,
    section_end: Option<u64>,
    binding: Binding,
    /// A NOTYPE label in code rather than a FUNC/IFUNC symbol.
    label: bool,
    versioned: bool,
    name: Box<str>,
}

impl Candidate {
    /// The sort key that puts the alias perf keeps first (`choose_best_symbol` in perf's
    /// `util/symbol.c`): sized over zero-sized, a function over a NOTYPE label, anything
    /// over a weak symbol, a global over a local one, fewer leading underscores, the longer
    /// name; then by name, so that the choice does not depend on table order. One rule of
    /// memperf's own, after the binding: an unversioned name over a versioned one (`free`
    /// over `cfree@GLIBC_2.2.5`, which perf keeps for being longer).
    fn preference(&self) -> impl Ord + '_ {
        let underscores = self.name.bytes().take_while(|&b| b == b'_').count();
        (
            self.size == 0,
            self.label,
            self.binding == Binding::Weak,
            self.binding != Binding::Global,
            self.versioned,
            underscores,
            std::cmp::Reverse(self.name.len()),
            &self.name,
        )
    }
}

/// Splits a symbol version off a `.symtab` name: `__libc_start_main@@GLIBC_2.34` and
/// `__default_morecore@GLIBC_2.2.5` name `__libc_start_main` and `__default_morecore`
/// (the linker writes versioned definitions so; `.dynsym` keeps versions apart). perf
/// never prints the version either.
pub(crate) fn strip_version(name: &str) -> (&str, bool) {
    match name.find('@') {
        Some(at) if at > 0 => {
            let version = name[at + 1..].trim_start_matches('@');
            if version.is_empty() {
                (name, false)
            } else {
                (&name[..at], true)
            }
        }
        _ => (name, false),
    }
}

/// An executable section. By flags, not kind: in a separate debug file `.text` is NOBITS.
fn is_code(s: &object::Section<'_, '_>) -> bool {
    match s.flags() {
        object::SectionFlags::Elf { sh_flags } => {
            sh_flags & u64::from(object::elf::SHF_EXECINSTR) != 0
        }
        _ => s.kind() == object::SectionKind::Text,
    }
}

/// Which table to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Table {
    Symtab,
    Dynsym,
}

impl SymbolTable {
    /// Reads FUNC/IFUNC definitions from `.symtab` or `.dynsym`. Empty when absent.
    pub(crate) fn from_object(obj: &object::File<'_>, table: Table) -> SymbolTable {
        let mut cands: Vec<Candidate> = Vec::new();
        let iter = match table {
            Table::Symtab => obj.symbols(),
            Table::Dynsym => obj.dynamic_symbols(),
        };
        for sym in iter {
            if sym.is_undefined() {
                continue;
            }
            // NOTYPE labels in code count too, as perf takes them: assembly entry points
            // such as ld.so's `_start` and `_dl_start_user` have no FUNC symbol.
            let notype_in_code = sym.kind() == SymbolKind::Unknown
                && matches!(sym.section(), SymbolSection::Section(idx)
                    if obj.section_by_index(idx).is_ok_and(|s| is_code(&s)));
            if sym.kind() != SymbolKind::Text && !notype_in_code {
                continue;
            }
            let Ok(name) = sym.name() else { continue };
            let (name, versioned) = strip_version(name);
            if name.is_empty() {
                continue;
            }
            let section_end = match sym.section() {
                SymbolSection::Section(idx) => obj
                    .section_by_index(idx)
                    .ok()
                    .map(|s| s.address().saturating_add(s.size())),
                _ => None,
            };
            let binding = if sym.is_weak() {
                Binding::Weak
            } else if sym.is_global() {
                Binding::Global
            } else {
                Binding::Local
            };
            cands.push(Candidate {
                start: sym.address(),
                size: sym.size(),
                section_end,
                binding,
                label: notype_in_code,
                versioned,
                name: name.into(),
            });
        }
        SymbolTable::from_candidates(cands)
    }

    fn from_candidates(mut cands: Vec<Candidate>) -> SymbolTable {
        cands.sort_by(|a, b| (a.start, a.preference()).cmp(&(b.start, b.preference())));
        cands.dedup_by(|later, first| later.start == first.start);
        let mut syms = Vec::with_capacity(cands.len());
        for (i, c) in cands.iter().enumerate() {
            let next_start = cands.get(i + 1).map(|n| n.start);
            let end = if c.size > 0 {
                c.start.saturating_add(c.size)
            } else {
                match (next_start, c.section_end) {
                    (Some(n), Some(e)) => n.min(e),
                    (Some(n), None) => n,
                    (None, Some(e)) => e,
                    (None, None) => c.start.saturating_add(1),
                }
            };
            syms.push(Sym {
                start: c.start,
                end: end.max(c.start.saturating_add(1)),
                name: c.name.clone(),
                versioned: c.versioned,
            });
        }
        SymbolTable { syms }
    }

    /// Adds `extra` symbols where no symbol covers their start (PLT entries).
    pub(crate) fn add_unclaimed(&mut self, extra: Vec<Sym>) {
        let new: Vec<Sym> = extra
            .into_iter()
            .filter(|s| self.lookup(s.start).is_none())
            .collect();
        if !new.is_empty() {
            self.syms.extend(new);
            self.syms.sort_by_key(|s| s.start);
        }
    }

    /// Whether any symbol kept carries a version: the module's debug information then
    /// names those functions (see `Module::symbol_name`).
    pub(crate) fn has_versioned(&self) -> bool {
        self.syms.iter().any(|s| s.versioned)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.syms.len()
    }

    /// The function symbol enclosing `svma`.
    pub(crate) fn lookup(&self, svma: u64) -> Option<&Sym> {
        let idx = self
            .syms
            .partition_point(|s| s.start <= svma)
            .checked_sub(1)?;
        let sym = self.syms.get(idx)?;
        (svma < sym.end).then_some(sym)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(start: u64, size: u64, binding: Binding, name: &str) -> Candidate {
        let (name, versioned) = strip_version(name);
        Candidate {
            start,
            size,
            section_end: Some(0x1000),
            binding,
            label: false,
            versioned,
            name: name.into(),
        }
    }

    fn name_at(t: &SymbolTable, svma: u64) -> Option<&str> {
        t.lookup(svma).map(|s| &*s.name)
    }

    #[test]
    fn sized_symbols_do_not_cover_gaps() {
        let t = SymbolTable::from_candidates(vec![
            cand(0x100, 0x10, Binding::Global, "a"),
            cand(0x200, 0x10, Binding::Global, "b"),
        ]);
        assert_eq!(name_at(&t, 0x105), Some("a"));
        assert_eq!(t.lookup(0x110), None);
        assert_eq!(t.lookup(0xff), None);
        assert_eq!(name_at(&t, 0x20f), Some("b"));
    }

    #[test]
    fn zero_size_symbols_end_at_the_next_symbol_or_section_end() {
        let t = SymbolTable::from_candidates(vec![
            cand(0x100, 0, Binding::Global, "a"),
            cand(0x200, 0, Binding::Global, "b"),
        ]);
        assert_eq!(name_at(&t, 0x1ff), Some("a"));
        assert_eq!(name_at(&t, 0xfff), Some("b"));
        assert_eq!(t.lookup(0x1000), None);
    }

    #[test]
    fn aliases_are_chosen_as_perf_chooses_them() {
        let pick = |cands: Vec<Candidate>| {
            let t = SymbolTable::from_candidates(cands);
            assert_eq!(t.len(), 1);
            name_at(&t, 0x100).map(str::to_owned)
        };
        // Global over local, local over weak (perf: non-weak first, then global).
        let t = pick(vec![
            cand(0x100, 0x10, Binding::Weak, "weak_alias"),
            cand(0x100, 0x10, Binding::Local, "local_alias"),
        ]);
        assert_eq!(t.as_deref(), Some("local_alias"));
        let t = pick(vec![
            cand(0x100, 0x10, Binding::Local, "local_alias"),
            cand(0x100, 0x10, Binding::Global, "malloc"),
            cand(0x100, 0x10, Binding::Weak, "weak_alias"),
        ]);
        assert_eq!(t.as_deref(), Some("malloc"));
        // Fewer leading underscores, then the longer name.
        let t = pick(vec![
            cand(0x100, 0x10, Binding::Global, "__libc_malloc"),
            cand(0x100, 0x10, Binding::Global, "malloc"),
        ]);
        assert_eq!(t.as_deref(), Some("malloc"));
        let t = pick(vec![
            cand(0x100, 0x10, Binding::Global, "cfree@GLIBC_2.2.5"),
            cand(0x100, 0x10, Binding::Global, "__libc_free"),
            cand(0x100, 0x10, Binding::Local, "__GI___libc_free"),
            cand(0x100, 0x10, Binding::Global, "free"),
        ]);
        assert_eq!(t.as_deref(), Some("free"));
        let t = pick(vec![
            cand(0x100, 0x10, Binding::Global, "memcpy"),
            cand(0x100, 0x10, Binding::Global, "memmove"),
        ]);
        assert_eq!(t.as_deref(), Some("memmove"));
        // A sized symbol over a zero-sized one, whatever the binding.
        let t = pick(vec![
            cand(0x100, 0, Binding::Global, "label"),
            cand(0x100, 0x10, Binding::Weak, "func"),
        ]);
        assert_eq!(t.as_deref(), Some("func"));
    }

    #[test]
    fn symbol_versions_are_never_part_of_a_name() {
        assert_eq!(
            strip_version("__libc_start_main@@GLIBC_2.34"),
            ("__libc_start_main", true)
        );
        assert_eq!(
            strip_version("__default_morecore@GLIBC_2.2.5"),
            ("__default_morecore", true)
        );
        assert_eq!(strip_version("malloc"), ("malloc", false));
        // Not a version: nothing after the `@`, or nothing before it.
        assert_eq!(strip_version("odd@"), ("odd@", false));
        assert_eq!(strip_version("@@x"), ("@@x", false));
        // glibc's libc.so.6 .symtab: the real function is local, the versioned aliases
        // global; the global alias wins as in perf, named without its version, and is
        // marked so that debug information may name it `__libc_start_main_impl`.
        let t = SymbolTable::from_candidates(vec![
            cand(0x100, 0x10, Binding::Local, "__libc_start_main_alias_2"),
            cand(0x100, 0x10, Binding::Local, "__libc_start_main_impl"),
            cand(
                0x100,
                0x10,
                Binding::Global,
                "__libc_start_main@@GLIBC_2.34",
            ),
            cand(
                0x100,
                0x10,
                Binding::Global,
                "__libc_start_main@GLIBC_2.2.5",
            ),
            cand(
                0x200,
                0x10,
                Binding::Global,
                "__default_morecore@GLIBC_2.2.5",
            ),
        ]);
        let s = t.lookup(0x104);
        assert_eq!(
            s.map(|s| (&*s.name, s.versioned)),
            Some(("__libc_start_main", true))
        );
        assert_eq!(name_at(&t, 0x200), Some("__default_morecore"));
        assert!(t.has_versioned());
    }

    #[test]
    fn offsets_map_through_load_segments() {
        let segs = [
            LoadSegment {
                offset: 0,
                file_size: 0x1000,
                svma: 0,
                mem_size: 0x1000,
            },
            LoadSegment {
                offset: 0x1000,
                file_size: 0x500,
                svma: 0x401000,
                mem_size: 0x500,
            },
        ];
        assert_eq!(segments_offset_to_svma(&segs, 0x1234), Some(0x401234));
        assert_eq!(segments_offset_to_svma(&segs, 0x1500), None);
        assert_eq!(segments_offset_to_svma(&segs, 0x10), Some(0x10));
    }

    #[test]
    fn file_offset_to_svma_rejects_garbage() {
        assert_eq!(file_offset_to_svma(b"not an elf at all", 0), None);
        assert_eq!(file_offset_to_svma(b"\x7fELF\x02\x01\x01", 0), None);
    }
}
