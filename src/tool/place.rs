//! What a user address lies in, by the session's process table: the file, anonymous
//! memory, the heap or the stack. The fault-location tools (`ffaults`, `fmapfault`,
//! `swapin`) ask it of each fault's `PERF_SAMPLE_ADDR`.

use crate::maps::{ModuleKind, ProcessMaps};

/// How far below its mapping a fault still belongs to a growing `[stack]`.
const STACK_GROWTH: u64 = 128 << 20;

/// What a fault's address lies in.
pub(crate) enum Landed {
    File(Vec<u8>),
    /// Anonymous memory, the heap, the stack: named as the mapping is.
    Anon(&'static str),
    /// Memory with a name but no file of its own: `[vdso]`, anonymous hugetlb memory (which
    /// the kernel backs with an unlinked `/anon_hugepage`).
    Special(Vec<u8>),
    Unknown,
}

/// What `addr` lies in, in `pid`, by the mappings recorded so far.
pub(crate) fn landed(maps: &ProcessMaps, pid: u32, addr: u64) -> Landed {
    let module = match region(maps, pid, addr) {
        Region::Heap => return Landed::Anon("[heap]"),
        Region::Stack => return Landed::Anon("[stack]"),
        Region::Anon => return Landed::Anon("//anon"),
        Region::Unknown => return Landed::Unknown,
        Region::Module(m) => m,
    };
    let info = maps.module(module);
    match info.kind() {
        ModuleKind::File if !info.path.starts_with(b"/anon_hugepage") => {
            Landed::File(info.path.clone())
        }
        _ => Landed::Special(info.path.clone()),
    }
}

/// The mapping an address lies in, without naming it (the resident join keeps one per
/// fault outside allocations, so it must not allocate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Region {
    /// The break's heap.
    Heap,
    /// `[stack]`, or just below it (a growing stack).
    Stack,
    /// Anonymous memory.
    Anon,
    /// A file, or a named special mapping: the module of the process table.
    Module(u32),
    /// No mapping known holds it.
    Unknown,
}

/// The one rule for what `addr` lies in, in `pid`.
pub(crate) fn region(maps: &ProcessMaps, pid: u32, addr: u64) -> Region {
    let module = match maps.mapping_of(pid, addr) {
        Some((_, start, _)) if maps.is_heap(pid, start) => return Region::Heap,
        Some((m, _, _)) => m,
        None => {
            return match maps.mapping_above(pid, addr) {
                Some((m, start))
                    if maps.module(m).path == b"[stack]" && start - addr <= STACK_GROWTH =>
                {
                    Region::Stack
                }
                _ => Region::Unknown,
            };
        }
    };
    let info = maps.module(module);
    match info.kind() {
        ModuleKind::Pseudo if info.path == b"[heap]" => Region::Heap,
        ModuleKind::Pseudo if info.path == b"[stack]" => Region::Stack,
        ModuleKind::Anon => Region::Anon,
        ModuleKind::File | ModuleKind::Pseudo => Region::Module(module),
    }
}
