//! PLT entries named as perf names them (`dso__synthesize_plt_symbols` and
//! `dso__synthesize_plt_got_symbols` in perf's `util/symbol-elf.c`): `NAME@plt`.
//!
//! Each entry of `.plt`, `.plt.sec` and `.plt.got` is named by the GOT slot its indirect
//! jump reads, through the dynamic relocation of that slot: a `JUMP_SLOT` or `GLOB_DAT`
//! names its symbol; an `IRELATIVE` (an IFUNC called inside its own object, as libc calls
//! `strlen`) names the IFUNC symbol at its addend (perf since 6.2 does so too; 6.1 prints
//! `@plt` for it, and names the entries after it by the wrong relocations). The entries are not in `.rela.plt`'s
//! order: the linker writes the IRELATIVE relocations after the others, while their
//! entries lie among them, in GOT order. An entry whose slot names nothing is
//! `offset_0xOFF@plt` (its file offset), and the `.plt` header (all of `.plt` beside a
//! `.plt.sec`: the lazy-binding stubs) is `.plt`, as perf prints them. x86-64 only.

use object::{
    Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, RelocationFlags, RelocationTarget,
    SymbolFlags,
};
use std::collections::hash_map::Entry;

use rustc_hash::FxHashMap;

use super::elf::{Sym, strip_version};

const R_X86_64_GLOB_DAT: u32 = object::elf::R_X86_64_GLOB_DAT;
const R_X86_64_JUMP_SLOT: u32 = object::elf::R_X86_64_JUMP_SLOT;
const R_X86_64_IRELATIVE: u32 = object::elf::R_X86_64_IRELATIVE;

/// What the dynamic relocation of one GOT slot says the slot will hold.
enum SlotTarget {
    /// A symbol of `.dynsym`, by index.
    Symbol(usize),
    /// The IFUNC whose resolver is at this address (an `IRELATIVE`'s addend).
    Ifunc(u64),
}

/// The synthesized symbols of the PLT sections of `obj`.
pub(crate) fn plt_symbols(obj: &object::File<'_>) -> Vec<Sym> {
    if obj.architecture() != object::Architecture::X86_64 {
        return Vec::new();
    }
    let namer = Namer {
        obj,
        slots: got_slots(obj),
        ifuncs: ifunc_names(obj),
    };
    let mut out = Vec::new();
    let sec = obj.section_by_name(".plt.sec");
    if let Some(plt) = obj.section_by_name(".plt") {
        if sec.is_some() {
            // Beside `.plt.sec`, `.plt` holds the header and the lazy-binding stubs only.
            out.push(plt_header(&plt, plt.size()));
        } else {
            out.extend(namer.entries(&plt, true));
        }
    }
    for s in [sec, obj.section_by_name(".plt.got")].into_iter().flatten() {
        out.extend(namer.entries(&s, false));
    }
    out
}

fn plt_header(plt: &object::Section<'_, '_>, size: u64) -> Sym {
    Sym {
        start: plt.address(),
        end: plt.address().saturating_add(size.max(1)),
        name: ".plt".into(),
        versioned: false,
    }
}

struct Namer<'a, 'data> {
    obj: &'a object::File<'data>,
    slots: FxHashMap<u64, SlotTarget>,
    ifuncs: FxHashMap<u64, Box<str>>,
}

impl Namer<'_, '_> {
    /// One symbol per entry of `section`; with `header`, an entry that jumps through no
    /// GOT slot (the lazy PLT's first) is `.plt`.
    fn entries(&self, section: &object::Section<'_, '_>, header: bool) -> Vec<Sym> {
        let Ok(data) = section.data() else {
            return Vec::new();
        };
        let size = entry_size(section);
        let (addr, file_off) = (
            section.address(),
            section.file_range().map_or(0, |(o, _)| o),
        );
        let mut out = Vec::new();
        for (i, entry) in data.chunks_exact(size as usize).enumerate() {
            let at = i as u64 * size;
            let start = addr + at;
            let name = match jump_slot(entry, start) {
                Some(slot) => self
                    .name_of(slot)
                    .unwrap_or_else(|| format!("offset_{:#x}@plt", file_off + at).into_boxed_str()),
                None if header && i == 0 => ".plt".into(),
                None => continue,
            };
            out.push(Sym {
                start,
                end: start + size,
                name,
                versioned: false,
            });
        }
        out
    }

    /// `NAME@plt` for the GOT slot at `slot`, if its relocation names a function.
    fn name_of(&self, slot: u64) -> Option<Box<str>> {
        let name = match self.slots.get(&slot)? {
            SlotTarget::Symbol(index) => {
                let table = self.obj.dynamic_symbol_table()?;
                let sym = table.symbol_by_index(object::SymbolIndex(*index)).ok()?;
                strip_version(sym.name().ok()?).0.to_owned()
            }
            SlotTarget::Ifunc(resolver) => self.ifuncs.get(resolver)?.to_string(),
        };
        (!name.is_empty()).then(|| format!("{name}@plt").into_boxed_str())
    }
}

/// The size of one entry: 8 in a `.plt.got` aligned to 8 (without IBT), else 16.
fn entry_size(section: &object::Section<'_, '_>) -> u64 {
    if section.align() == 8 { 8 } else { 16 }
}

/// The GOT slot an entry at `start` jumps through: `[endbr64] [bnd] jmp *disp32(%rip)`.
/// `None` for anything else (the lazy PLT's header, its push-and-jump stubs beside IBT).
fn jump_slot(entry: &[u8], start: u64) -> Option<u64> {
    const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];
    let mut n = 0;
    if entry.starts_with(&ENDBR64) {
        n += ENDBR64.len();
    }
    if entry.get(n) == Some(&0xf2) {
        n += 1;
    }
    if entry.get(n..n + 2)? != [0xff, 0x25] {
        return None;
    }
    let disp = i32::from_le_bytes(entry.get(n + 2..n + 6)?.try_into().ok()?);
    let next = start.checked_add(n as u64 + 6)?;
    Some(next.wrapping_add_signed(i64::from(disp)))
}

/// GOT slot address → what its dynamic relocation (`.rela.plt`, `.rela.dyn`) puts there.
fn got_slots(obj: &object::File<'_>) -> FxHashMap<u64, SlotTarget> {
    let mut slots = FxHashMap::default();
    let Some(relocs) = obj.dynamic_relocations() else {
        return slots;
    };
    for (offset, r) in relocs {
        let RelocationFlags::Elf { r_type } = r.flags() else {
            continue;
        };
        let target = match (r_type, r.target()) {
            (R_X86_64_JUMP_SLOT | R_X86_64_GLOB_DAT, RelocationTarget::Symbol(i)) => {
                SlotTarget::Symbol(i.0)
            }
            (R_X86_64_IRELATIVE, _) => match u64::try_from(r.addend()) {
                Ok(a) => SlotTarget::Ifunc(a),
                Err(_) => continue,
            },
            _ => continue,
        };
        slots.insert(offset, target);
    }
    slots
}

/// Weak, not global, leading underscores: the lesser is the alias kept.
type AliasRank = (bool, bool, usize);

/// The name of each STT_GNU_IFUNC symbol of `.symtab` and `.dynsym`, by address: of
/// aliases, the global over the weak over the local one, then the one with fewer leading
/// underscores (`strnlen` over `__strnlen`; the resolver's own FUNC symbol,
/// `__strnlen_ifunc`, is no IFUNC), then the first in name order.
fn ifunc_names(obj: &object::File<'_>) -> FxHashMap<u64, Box<str>> {
    let mut best: FxHashMap<u64, (AliasRank, Box<str>)> = FxHashMap::default();
    for sym in obj.symbols().chain(obj.dynamic_symbols()) {
        let SymbolFlags::Elf { st_info, .. } = sym.flags() else {
            continue;
        };
        if st_info & 0xf != object::elf::STT_GNU_IFUNC || sym.is_undefined() {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        let name = strip_version(name).0;
        if name.is_empty() {
            continue;
        }
        let underscores = name.bytes().take_while(|&b| b == b'_').count();
        let rank = (sym.is_weak(), !sym.is_global(), underscores);
        let better = |(r, n): &(AliasRank, Box<str>)| (rank, name) < (*r, &**n);
        match best.entry(sym.address()) {
            Entry::Occupied(mut e) => {
                if better(e.get()) {
                    e.insert((rank, name.into()));
                }
            }
            Entry::Vacant(e) => {
                e.insert((rank, name.into()));
            }
        }
    }
    best.into_iter().map(|(a, (_, n))| (a, n)).collect()
}
