//! The outstanding-allocation table: what memleak keeps in BPF maps, kept in user space.
//!
//! Calls are matched per thread: an entry pushes a pending call, its return pops it. The
//! result of an allocation becomes an outstanding entry keyed by (address space, address);
//! a free removes it. Allocations the allocator makes while serving another call (glibc's
//! mmap of a new heap inside malloc, munmap inside free) are recognised by the pending call
//! beneath them and left out.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

pub use crate::allocators::Func;
use crate::stacks::StackId;

/// An allocation's stack: interned, not sampled (`-s N`), or none at all (unwinding gave
/// no frame). The order (ids first) is the order reports break ties in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AllocStack {
    Id(StackId),
    Unsampled,
    Missing,
}

/// Arguments of a call, from the entry probe's registers (DI, SI, DX).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Args {
    pub a0: u64,
    pub a1: u64,
    pub a2: u64,
}

/// An address space: a process for user allocations, the kernel's for kernel ones.
pub type Space = u32;
/// Kernel slab objects (kmalloc, kmem_cache_alloc), by address.
pub const KERNEL_SLAB: Space = u32::MAX;
/// Kernel pages, by page frame number.
pub const KERNEL_PAGES: Space = u32::MAX - 1;
/// Per-CPU allocations, by address.
pub const KERNEL_PERCPU: Space = u32::MAX - 2;

/// One outstanding allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Alloc {
    pub size: u64,
    pub time: u64,
    pub stack: AllocStack,
}

/// One entry sample.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub tid: u32,
    pub space: Space,
    pub func: Func,
    pub args: Args,
    pub time: u64,
    pub stack: AllocStack,
    pub sp: u64,
    /// Whether the call's stack shows it made from inside an allocator function.
    pub in_allocator: bool,
    /// For a stack the kernel walked by frame pointers: the first return address its walk
    /// gave (0 when none). From the function's entry the walk may skip the caller, which
    /// the return probe names ([`Table::pending_fp_walk`]).
    pub fp_first: Option<u64>,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    func: Func,
    args: Args,
    time: u64,
    stack: AllocStack,
    /// The stack pointer at entry: twin samples of one hit (`-s N`) share it.
    sp: u64,
    /// Made by the allocator while serving another call.
    internal: bool,
    /// See [`Entry::fp_first`].
    fp_first: Option<u64>,
    /// A realloc whose block the probed free freed while it ran (glibc's realloc(p, 0),
    /// musl's move): its return does not free it again.
    freed_inside: bool,
}

/// Counters printed with every report.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TableStats {
    pub allocs: u64,
    pub frees: u64,
    /// Frees of addresses not in the table (allocated before tracing began, or lost).
    pub unknown_frees: u64,
    /// Returns with no matching entry (the entry was filtered or lost).
    pub unmatched_returns: u64,
    /// Entries left without a return (longjmp, lost return, thread exit).
    pub abandoned_calls: u64,
    pub failed_allocs: u64,
    /// mmap/munmap/mremap calls made by the allocator itself, left out.
    pub internal_calls: u64,
    /// Allocations not kept because the table was full.
    pub dropped_full: u64,
    /// Allocations outside -z/-Z.
    pub filtered: u64,
    /// Entries dropped when their process exec'd.
    pub reset_by_exec: u64,
    /// The most outstanding entries held at once.
    pub peak_entries: u64,
}

/// Allocations in mapped regions are ranges (munmap may cut them); heap blocks are points.
#[derive(Debug, Default)]
pub struct Table {
    points: FxHashMap<(Space, u64), Alloc>,
    /// (space, start) → (end, alloc): mmap'd regions.
    ranges: BTreeMap<(Space, u64), (u64, Alloc)>,
    pending: FxHashMap<u32, Vec<Pending>>,
    pub max_entries: usize,
    pub min_size: Option<u64>,
    pub max_size: Option<u64>,
    pub stats: TableStats,
    /// The resident join (`--faults`), told of every allocation that becomes live or dies.
    pub resident: Option<super::resident::Resident>,
    /// The heap analyses (`memperf heap`), told of every allocation that becomes live or
    /// dies, in call order.
    pub heap: Option<super::heap::HeapTracker>,
    /// The thread and sample time of the call being handled (`at`), for `heap`.
    tid: u32,
    time: u64,
}

/// The result of matching a return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Returned {
    Alloc { size: u64, addr: u64 },
    Ignored,
}

impl Table {
    pub fn new(max_entries: usize, min_size: Option<u64>, max_size: Option<u64>) -> Table {
        Table {
            max_entries,
            min_size,
            max_size,
            ..Table::default()
        }
    }

    /// The call handled next was sampled on `tid` at `time`.
    pub fn at(&mut self, tid: u32, time: u64) {
        self.tid = tid;
        self.time = time;
    }

    pub fn len(&self) -> usize {
        self.points.len() + self.ranges.len()
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Approximate bytes the table holds (entries and hash/tree overhead).
    pub fn memory_bytes(&self) -> usize {
        self.points.capacity() * (std::mem::size_of::<((Space, u64), Alloc)>() + 8)
            + self.ranges.len() * (std::mem::size_of::<((Space, u64), (u64, Alloc))>() + 16)
    }

    fn in_range(&self, size: u64) -> bool {
        self.min_size.is_none_or(|m| size >= m) && self.max_size.is_none_or(|m| size <= m)
    }

    /// A call entered. `e.stack` is the caller's stack (or why there is none).
    pub fn enter(&mut self, e: Entry) {
        let Entry {
            tid,
            space,
            func,
            args,
            time,
            stack,
            sp,
            in_allocator,
            fp_first,
        } = e;
        let calls = self.pending.entry(tid).or_default();
        if let Some(top) = calls.last_mut()
            && top.func == func
            && top.sp == sp
            && sp != 0
        {
            // The twin sample of the same hit (regs-only and stack events on one probe): the
            // call takes the stack twin's stack, whichever came first.
            if top.stack == AllocStack::Unsampled {
                top.stack = stack;
                top.fp_first = fp_first;
            }
            return;
        }
        let internal =
            func.is_map_call() && (in_allocator || calls.iter().any(|c| c.func.is_allocator()));
        if calls.len() >= 64 {
            // Returns never came (longjmp out of a hook): keep the table bounded.
            calls.remove(0);
            self.stats.abandoned_calls += 1;
        }
        calls.push(Pending {
            func,
            args,
            time,
            stack,
            sp,
            internal,
            fp_first,
            freed_inside: false,
        });
        if func == Func::Free {
            // free has no return probe: it completes at entry.
            calls.pop();
            if let Some(realloc) = calls
                .iter_mut()
                .rev()
                .find(|c| c.func == Func::Realloc && c.args.a0 == args.a0 && args.a0 != 0)
            {
                realloc.freed_inside = true;
            }
            self.free_point(space, args.a0);
        } else if func == Func::Munmap {
            calls.pop();
            if internal {
                self.stats.internal_calls += 1;
                if let Some(h) = self.heap.as_mut() {
                    h.allocator_unmapped(space, args.a0, args.a1);
                }
            } else {
                self.unmap(space, args.a0, args.a1);
            }
        }
    }

    /// A call returned on `tid` with `ret` (RAX); `space` is the process.
    pub fn leave(&mut self, tid: u32, space: Space, func: Func, ret: u64) -> Returned {
        let Some(calls) = self.pending.get_mut(&tid) else {
            self.stats.unmatched_returns += 1;
            return Returned::Ignored;
        };
        let Some(pos) = calls.iter().rposition(|c| c.func == func) else {
            self.stats.unmatched_returns += 1;
            return Returned::Ignored;
        };
        let abandoned = calls.len() - 1 - pos;
        let call = calls[pos];
        calls.truncate(pos);
        self.stats.abandoned_calls += abandoned as u64;
        if call.internal {
            self.stats.internal_calls += 1;
            if let (Some(h), Func::Mmap) = (self.heap.as_mut(), call.func)
                && ret != u64::MAX
            {
                h.allocator_mapped(space, ret, call.args.a1);
            }
            return Returned::Ignored;
        }
        self.complete(space, call, ret)
    }

    /// The stack of the call `func` of `tid` that [`Table::leave`] would complete, with the
    /// first return address of its frame-pointer walk, when the kernel walked it so.
    pub fn pending_fp_walk(&mut self, tid: u32, func: Func) -> Option<(&mut AllocStack, u64)> {
        let call = self
            .pending
            .get_mut(&tid)?
            .iter_mut()
            .rev()
            .find(|c| c.func == func)?;
        let first = call.fp_first?;
        Some((&mut call.stack, first))
    }

    /// Whether the last pending call of `tid` is `func` entered at `sp`: a sample at that
    /// entry is its twin (see [`Table::enter`]).
    pub fn pending_top_is(&self, tid: u32, func: Func, sp: u64) -> bool {
        self.pending
            .get(&tid)
            .and_then(|calls| calls.last())
            .is_some_and(|c| c.func == func && c.sp == sp && sp != 0)
    }

    /// posix_memalign's result is written through its first argument: the caller reads it.
    pub fn pending_memptr(&self, tid: u32) -> Option<u64> {
        self.pending
            .get(&tid)?
            .iter()
            .rev()
            .find(|c| c.func == Func::PosixMemalign)
            .map(|c| c.args.a0)
    }

    fn complete(&mut self, space: Space, call: Pending, ret: u64) -> Returned {
        let a = call.args;
        let (size, addr) = match call.func {
            Func::Malloc | Func::Valloc | Func::Pvalloc => (a.a0, ret),
            Func::Calloc => (a.a0.saturating_mul(a.a1), ret),
            Func::AlignedAlloc => (a.a1, ret),
            Func::PosixMemalign => (a.a2, ret),
            Func::Realloc => {
                // realloc(p, 0) frees p, and a moved block is freed: by the probed free in
                // some allocators (glibc's realloc(p, 0), musl's move), seen already (a second
                // free would be counted as one of a block allocated before tracing began).
                if a.a0 != 0 && !call.freed_inside && (ret != 0 || a.a1 == 0) {
                    self.free_point(space, a.a0);
                }
                if a.a1 == 0 && ret == 0 {
                    // A free, not a failed allocation.
                    return Returned::Ignored;
                }
                (a.a1, ret)
            }
            Func::Mmap => {
                if ret == u64::MAX {
                    self.stats.failed_allocs += 1;
                    return Returned::Ignored;
                }
                self.insert_range(space, ret, a.a1, call.time, call.stack);
                return Returned::Alloc {
                    size: a.a1,
                    addr: ret,
                };
            }
            Func::Mremap => {
                if ret == u64::MAX {
                    self.stats.failed_allocs += 1;
                    return Returned::Ignored;
                }
                self.unmap(space, a.a0, a.a1);
                self.insert_range(space, ret, a.a2, call.time, call.stack);
                return Returned::Alloc {
                    size: a.a2,
                    addr: ret,
                };
            }
            Func::Free | Func::Munmap => return Returned::Ignored,
        };
        if addr == 0 {
            self.stats.failed_allocs += 1;
            return Returned::Ignored;
        }
        self.insert_point(space, addr, size, call.time, call.stack);
        Returned::Alloc { size, addr }
    }

    /// Records an allocation of `size` bytes at `addr` (kernel events, and user returns).
    pub fn insert_point(
        &mut self,
        space: Space,
        addr: u64,
        size: u64,
        time: u64,
        stack: AllocStack,
    ) {
        self.stats.allocs += 1;
        if !self.in_range(size) {
            self.stats.filtered += 1;
            // A block reused at this address replaces what was there.
            self.points.remove(&(space, addr));
            if let Some(r) = self.resident.as_mut() {
                r.free(space, addr);
            }
            return;
        }
        if self.len() >= self.max_entries && !self.points.contains_key(&(space, addr)) {
            self.stats.dropped_full += 1;
            return;
        }
        let replaced = self
            .points
            .insert((space, addr), Alloc { size, time, stack });
        if let Some(r) = self.resident.as_mut() {
            r.alloc(space, addr, size, stack);
        }
        if let Some(h) = self.heap.as_mut() {
            // A block handed out again without its free seen: the free was lost.
            if let Some(old) = replaced {
                h.vanish(space, old.stack, old.size, self.time);
            }
            h.alloc((space, addr), self.tid, size, stack, self.time);
        }
        self.note_peak();
    }

    fn note_peak(&mut self) {
        self.stats.peak_entries = self.stats.peak_entries.max(self.len() as u64);
    }

    /// Frees the block at `addr`; NULL is not a free.
    pub fn free_point(&mut self, space: Space, addr: u64) {
        if addr == 0 {
            return;
        }
        self.stats.frees += 1;
        let Some(freed) = self.points.remove(&(space, addr)) else {
            self.stats.unknown_frees += 1;
            return;
        };
        if let Some(r) = self.resident.as_mut() {
            r.free(space, addr);
        }
        if let Some(h) = self.heap.as_mut() {
            h.free((space, addr), self.tid, freed.size, freed.stack, self.time);
        }
    }

    fn insert_range(&mut self, space: Space, start: u64, len: u64, time: u64, stack: AllocStack) {
        self.stats.allocs += 1;
        // A new mapping replaces whatever it overlaps (MAP_FIXED).
        self.cut(space, start, start.saturating_add(len));
        if !self.in_range(len) {
            self.stats.filtered += 1;
            return;
        }
        if self.len() >= self.max_entries {
            self.stats.dropped_full += 1;
            return;
        }
        let end = start.saturating_add(len);
        self.ranges.insert(
            (space, start),
            (
                end,
                Alloc {
                    size: len,
                    time,
                    stack,
                },
            ),
        );
        if let Some(r) = self.resident.as_mut() {
            r.alloc(space, start, len, stack);
        }
        if let Some(h) = self.heap.as_mut() {
            h.alloc((space, start), self.tid, len, stack, self.time);
        }
        self.note_peak();
    }

    /// munmap: removes [addr, addr+len) from the mapped regions, cutting partial overlaps.
    pub fn unmap(&mut self, space: Space, addr: u64, len: u64) {
        self.stats.frees += 1;
        if !self.cut(space, addr, addr.saturating_add(len)) {
            self.stats.unknown_frees += 1;
        }
    }

    /// Removes [start, end) from the ranges of `space`; whether anything overlapped.
    fn cut(&mut self, space: Space, start: u64, end: u64) -> bool {
        let overlapping: Vec<(u64, u64, Alloc)> = self
            .ranges
            .range((space, 0)..(space, end))
            .filter(|(_, (e, _))| *e > start)
            .map(|(&(_, s), &(e, a))| (s, e, a))
            .collect();
        for &(s, e, a) in &overlapping {
            self.ranges.remove(&(space, s));
            if let Some(h) = self.heap.as_mut() {
                // The mapping is freed when its last piece goes; until then only the bytes
                // cut off go.
                let cut = e.min(end) - s.max(start);
                let left = u64::from(s < start) + u64::from(e > end);
                let (tid, now) = (self.tid, self.time);
                h.unmapped((space, s), tid, (a.size, cut), a.time, a.stack, left, now);
            }
            // The join keeps what was cut off as freed; the pieces left start afresh.
            if let Some(r) = self.resident.as_mut() {
                r.free(space, s);
            }
            if s < start {
                let size = start - s;
                self.ranges.insert((space, s), (start, Alloc { size, ..a }));
                if let Some(r) = self.resident.as_mut() {
                    r.remains(space, s, size, a.stack);
                }
            }
            if e > end {
                let size = e - end;
                self.ranges.insert((space, end), (e, Alloc { size, ..a }));
                if let Some(r) = self.resident.as_mut() {
                    r.remains(space, end, size, a.stack);
                }
            }
        }
        !overlapping.is_empty()
    }

    /// An exec replaced the process's image: nothing it allocated before survives.
    pub fn reset_space(&mut self, space: Space) {
        let before = self.len();
        self.points.retain(|(s, _), _| *s != space);
        self.ranges.retain(|(s, _), _| *s != space);
        if let Some(r) = self.resident.as_mut() {
            r.reset_space(space);
        }
        if let Some(h) = self.heap.as_mut() {
            h.reset_space(space, self.time);
        }
        self.stats.reset_by_exec += (before - self.len()) as u64;
    }

    /// A process exited (its main thread's exit): its live allocations leave the heap
    /// analyses' running sum, kept as leaked. The table keeps them for `leak`'s report.
    pub fn process_exit(&mut self, space: Space) {
        if let Some(h) = self.heap.as_mut() {
            h.process_exit(space, self.time);
        }
    }

    /// A thread exited: its pending calls will never return.
    pub fn thread_exit(&mut self, tid: u32) {
        if let Some(h) = self.heap.as_mut() {
            h.thread_exit(tid);
        }
        if let Some(calls) = self.pending.remove(&tid) {
            self.stats.abandoned_calls += calls.len() as u64;
        }
    }

    /// The size of the outstanding block or region starting at `addr`.
    pub fn size_of(&self, space: Space, addr: u64) -> Option<u64> {
        self.points
            .get(&(space, addr))
            .map(|a| a.size)
            .or_else(|| self.ranges.get(&(space, addr)).map(|(_, a)| a.size))
    }

    /// The outstanding heap blocks (not mapped regions) of `space`: (address, size).
    pub fn blocks_of(&self, space: Space) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.points
            .iter()
            .filter(move |((s, _), _)| *s == space)
            .map(|(&(_, a), al)| (a, al.size))
    }

    /// The live mapped regions (mmap) of `space`: (start, length).
    pub fn ranges_of(&self, space: Space) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges
            .range((space, 0)..=(space, u64::MAX))
            .map(|(&(_, s), &(e, _))| (s, e - s))
    }

    /// Every outstanding allocation: (space, address, alloc).
    pub fn iter(&self) -> impl Iterator<Item = (Space, u64, &Alloc)> {
        self.points
            .iter()
            .map(|(&(s, a), al)| (s, a, al))
            .chain(self.ranges.iter().map(|(&(s, a), (_, al))| (s, a, al)))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn args(a0: u64, a1: u64, a2: u64) -> Args {
        Args { a0, a1, a2 }
    }

    fn e(func: Func, args: Args, time: u64, stack: StackId, sp: u64) -> Entry {
        let stack = AllocStack::Id(stack);
        Entry {
            tid: 7,
            space: 1,
            func,
            args,
            time,
            stack,
            sp,
            in_allocator: false,
            fp_first: None,
        }
    }

    fn outstanding(t: &Table) -> Vec<(u64, u64)> {
        let mut v: Vec<(u64, u64)> = t.iter().map(|(_, a, al)| (a, al.size)).collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn malloc_then_free_cancels() {
        let mut t = Table::new(100, None, None);
        t.enter(e(Func::Malloc, args(32, 0, 0), 1, 5, 0x1000));
        assert_eq!(
            t.leave(7, 1, Func::Malloc, 0xa0),
            Returned::Alloc {
                size: 32,
                addr: 0xa0
            }
        );
        assert_eq!(outstanding(&t), vec![(0xa0, 32)]);
        t.enter(e(Func::Free, args(0xa0, 0, 0), 2, 6, 0x1000));
        assert!(t.is_empty());
        assert_eq!(t.stats.frees, 1);
        assert_eq!(t.stats.unknown_frees, 0);
    }

    /// realloc(p, 0) frees p: glibc's through the probed free, inside the call (counted
    /// once, not again at the return as a block from before tracing); an allocator's own
    /// free path, without the probe, at the return. The NULL it returns is no failed
    /// allocation.
    #[test]
    fn realloc_to_zero_frees_once_whoever_frees() {
        for free_inside in [true, false] {
            let mut t = Table::new(100, None, None);
            t.enter(e(Func::Malloc, args(100, 0, 0), 1, 5, 0x1000));
            t.leave(7, 1, Func::Malloc, 0xa0);
            t.enter(e(Func::Realloc, args(0xa0, 0, 0), 2, 5, 0x1000));
            if free_inside {
                t.enter(e(Func::Free, args(0xa0, 0, 0), 3, 6, 0xf00));
            }
            assert_eq!(t.leave(7, 1, Func::Realloc, 0), Returned::Ignored);
            assert!(t.is_empty());
            assert_eq!(
                (t.stats.frees, t.stats.unknown_frees, t.stats.failed_allocs),
                (1, 0, 0),
                "free inside: {free_inside}"
            );
        }
    }

    #[test]
    fn realloc_moves_and_calloc_multiplies() {
        let mut t = Table::new(100, None, None);
        t.enter(e(Func::Calloc, args(1024, 8, 0), 1, 5, 0x1000));
        t.leave(7, 1, Func::Calloc, 0xa0);
        t.enter(e(Func::Realloc, args(0xa0, 100_000, 0), 2, 6, 0x1000));
        t.leave(7, 1, Func::Realloc, 0xb0);
        assert_eq!(outstanding(&t), vec![(0xb0, 100_000)]);
        // realloc(NULL, n) that calls malloc inside: one block, the outer call's.
        t.enter(e(Func::Realloc, args(0, 64, 0), 3, 8, 0x2000));
        t.enter(e(Func::Malloc, args(64, 0, 0), 3, 9, 0x1f00));
        t.leave(7, 1, Func::Malloc, 0xc0);
        t.leave(7, 1, Func::Realloc, 0xc0);
        assert_eq!(outstanding(&t), vec![(0xb0, 100_000), (0xc0, 64)]);
        assert_eq!(
            t.iter().find(|(_, a, _)| *a == 0xc0).unwrap().2.stack,
            AllocStack::Id(8)
        );
    }

    #[test]
    fn mmaps_inside_malloc_are_the_allocators_own() {
        let mut t = Table::new(100, None, None);
        t.enter(e(Func::Malloc, args(200_000, 0, 0), 1, 5, 0x1000));
        t.enter(e(Func::Mmap, args(0, 1 << 30, 0), 1, 6, 0x0f00));
        t.leave(7, 1, Func::Mmap, 0x7f00_0000_0000);
        t.leave(7, 1, Func::Malloc, 0x7f00_0000_0010);
        assert_eq!(outstanding(&t), vec![(0x7f00_0000_0010, 200_000)]);
        assert_eq!(t.stats.internal_calls, 1);
    }

    #[test]
    fn munmap_cuts_mapped_ranges() {
        let mut t = Table::new(100, None, None);
        t.enter(e(Func::Mmap, args(0, 0x4000, 0), 1, 5, 0x1000));
        t.leave(7, 1, Func::Mmap, 0x10000);
        t.enter(e(Func::Munmap, args(0x11000, 0x1000, 0), 2, 6, 0x1000));
        assert_eq!(outstanding(&t), vec![(0x10000, 0x1000), (0x12000, 0x2000)]);
        t.enter(e(Func::Mremap, args(0x12000, 0x2000, 0x8000), 3, 7, 0x1000));
        t.leave(7, 1, Func::Mremap, 0x50000);
        assert_eq!(outstanding(&t), vec![(0x10000, 0x1000), (0x50000, 0x8000)]);
        // A failed mmap is no allocation.
        t.enter(e(Func::Mmap, args(0, 0x1000, 0), 4, 5, 0x1000));
        t.leave(7, 1, Func::Mmap, u64::MAX);
        assert_eq!(t.stats.failed_allocs, 1);
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn a_mapping_cut_in_two_is_one_allocation_freed_once() {
        let mut t = Table::new(100, None, None);
        t.heap = Some(super::super::heap::HeapTracker::new(1));
        // Another mapping of the same stack stays live throughout.
        t.enter(e(Func::Mmap, args(0, 0x1000, 0), 1, 5, 0x1000));
        t.leave(7, 1, Func::Mmap, 0x90000);
        t.enter(e(Func::Mmap, args(0, 0x3000, 0), 2, 5, 0x1000));
        t.leave(7, 1, Func::Mmap, 0x10000);
        // Its middle page, then each piece left: one allocation, freed once (at the last).
        t.enter(e(Func::Munmap, args(0x11000, 0x1000, 0), 3, 6, 0x1000));
        t.enter(e(Func::Munmap, args(0x10000, 0x1000, 0), 4, 6, 0x1000));
        t.enter(e(Func::Munmap, args(0x12000, 0x1000, 0), 5, 6, 0x1000));
        let h = t.heap.as_mut().unwrap();
        assert_eq!(
            (h.allocs, h.frees, h.live_allocs, h.live_bytes),
            (2, 1, 1, 0x1000)
        );
        let s = *h
            .stacks()
            .find(|(_, s, _)| *s == AllocStack::Id(5))
            .unwrap()
            .2;
        assert_eq!(
            (s.allocs, s.frees, s.live_allocs, s.live_bytes),
            (2, 1, 1, 0x1000)
        );
    }

    #[test]
    fn twin_samples_of_one_hit_merge() {
        let mut t = Table::new(100, None, None);
        t.enter(Entry {
            stack: AllocStack::Unsampled,
            ..e(Func::Malloc, args(32, 0, 0), 1, 0, 0x1000)
        });
        t.enter(e(Func::Malloc, args(32, 0, 0), 1, 42, 0x1000));
        t.leave(7, 1, Func::Malloc, 0xa0);
        assert_eq!(t.iter().next().unwrap().2.stack, AllocStack::Id(42));
        assert_eq!(t.stats.unmatched_returns, 0);
    }

    /// A frame-pointer stack's first return address is kept with its call (the twin's,
    /// whose stack the call takes), and the stack can be amended before the return
    /// completes it.
    #[test]
    fn a_frame_pointer_stack_is_amended_before_its_return() {
        let mut t = Table::new(1, None, None);
        t.enter(Entry {
            stack: AllocStack::Unsampled,
            ..e(Func::Malloc, args(32, 0, 0), 1, 0, 0x1000)
        });
        assert!(t.pending_fp_walk(7, Func::Malloc).is_none());
        t.enter(Entry {
            fp_first: Some(0x4010),
            ..e(Func::Malloc, args(32, 0, 0), 1, 42, 0x1000)
        });
        let (stack, first) = t.pending_fp_walk(7, Func::Malloc).unwrap();
        assert_eq!((*stack, first), (AllocStack::Id(42), 0x4010));
        *stack = AllocStack::Id(43);
        assert!(t.pending_fp_walk(7, Func::Calloc).is_none());
        t.leave(7, 1, Func::Malloc, 0xa0);
        assert_eq!(t.iter().next().unwrap().2.stack, AllocStack::Id(43));
    }

    /// The stack twin's stack is kept whichever twin comes first, even when it has no
    /// frame (a frame-pointer walk cut at its first value, whose caller the return adds).
    #[test]
    fn a_stack_twin_without_frames_is_not_replaced_by_the_registers_twin() {
        let mut t = Table::new(1, None, None);
        t.enter(Entry {
            stack: AllocStack::Missing,
            fp_first: Some(0x4010),
            ..e(Func::Malloc, args(32, 0, 0), 1, 0, 0x1000)
        });
        t.enter(Entry {
            stack: AllocStack::Unsampled,
            ..e(Func::Malloc, args(32, 0, 0), 1, 0, 0x1000)
        });
        let (stack, first) = t.pending_fp_walk(7, Func::Malloc).unwrap();
        assert_eq!((*stack, first), (AllocStack::Missing, 0x4010));
    }

    #[test]
    fn size_filters_bounds_and_exec_reset() {
        let mut t = Table::new(2, Some(16), Some(64));
        for (i, size) in [8u64, 16, 64, 65, 32].into_iter().enumerate() {
            t.enter(e(Func::Malloc, args(size, 0, 0), 1, 5, 0x1000 + i as u64));
            t.leave(7, 1, Func::Malloc, 0x100 * (i as u64 + 1));
        }
        assert_eq!(outstanding(&t), vec![(0x200, 16), (0x300, 64)]);
        assert_eq!(t.stats.filtered, 2);
        assert_eq!(t.stats.dropped_full, 1);
        t.reset_space(1);
        assert!(t.is_empty());
        assert_eq!(t.stats.reset_by_exec, 2);
    }

    #[test]
    fn the_join_follows_frees_cuts_and_execs_without_counting_a_cut_as_an_allocation() {
        use crate::allocs::resident::Resident;
        let mut t = Table::new(100, None, None);
        t.resident = Some(Resident::new(4096));
        // A 4-page mmap, every page faulted, then its middle two pages unmapped.
        t.enter(e(Func::Mmap, args(0, 4 * 4096, 0), 1, 5, 0x1000));
        t.leave(7, 1, Func::Mmap, 0x40_000);
        // A malloc'd block, never touched, then freed.
        t.enter(e(Func::Malloc, args(100, 0, 0), 2, 6, 0x1000));
        t.leave(7, 1, Func::Malloc, 0x90_000);
        let r = t.resident.as_mut().unwrap();
        for p in 0..4u64 {
            assert!(r.fault(1, 0x40_000 + p * 4096, None));
        }
        t.unmap(1, 0x41_000, 2 * 4096);
        t.free_point(1, 0x90_000);
        let r = t.resident.as_ref().unwrap();
        let mut all: Vec<_> = r.stacks().map(|(_, s, t)| (s, *t)).collect();
        all.sort_by_key(|a| a.0);
        let (map, block) = (all[0].1, all[1].1);
        assert_eq!((map.allocs, map.alloc_bytes), (1, 4 * 4096));
        // The two pieces left are live again; what they had faulted went with the cut.
        assert_eq!((map.live_allocs, map.live_bytes), (2, 2 * 4096));
        assert_eq!((map.live_pages, map.freed_pages), (0, 4));
        assert_eq!((block.allocs, block.live_allocs, block.pages()), (1, 0, 0));
        assert!(r.owner(1, 0x40_010).is_some());
        assert!(r.owner(1, 0x41_010).is_none());
        t.reset_space(1);
        assert_eq!(t.resident.as_ref().unwrap().live_len(), 0);
    }
}
