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
    let module = match maps.mapping_of(pid, addr) {
        Some((_, start, _)) if maps.is_heap(pid, start) => return Landed::Anon("[heap]"),
        Some((m, _, _)) => m,
        None => match maps.mapping_above(pid, addr) {
            Some((m, start))
                if maps.module(m).path == b"[stack]" && start - addr <= STACK_GROWTH =>
            {
                return Landed::Anon("[stack]");
            }
            _ => return Landed::Unknown,
        },
    };
    let info = maps.module(module);
    match info.kind() {
        ModuleKind::File if info.path.starts_with(b"/anon_hugepage") => {
            Landed::Special(info.path.clone())
        }
        ModuleKind::File => Landed::File(info.path.clone()),
        ModuleKind::Pseudo if info.path == b"[heap]" => Landed::Anon("[heap]"),
        ModuleKind::Pseudo if info.path == b"[stack]" => Landed::Anon("[stack]"),
        ModuleKind::Pseudo => Landed::Special(info.path.clone()),
        ModuleKind::Anon => Landed::Anon("//anon"),
    }
}
