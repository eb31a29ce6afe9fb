//! The resident join: which live allocation owns an address, and how many pages each
//! allocation stack has faulted in.
//!
//! The allocation table feeds it every allocation and free; page faults ask it, in the same
//! time order (the session hands every record in time order), which live allocation's range
//! holds the faulting address. A fault inside an allocation counts one page of that
//! allocation the first time its page faults (a bitmap per allocation, made at its first
//! fault, so a read fault followed by a write fault on the same page is one page); a fault
//! outside every allocation is the mapping's (`[heap]` arena slack and allocator metadata,
//! `//anon`, a file, `[stack]`), by the session's process table.
//!
//! Memory is O(live allocations) plus O(allocation stacks): an allocation's counters are
//! folded into its stack's totals when it is freed.
//!
//! The API `mem report --by allocation` needs is `Resident::owner` (which live allocation
//! holds an address now) and `region` (which mapping, when none does: `tool::place`'s rule): ask them in time
//! order, as the samples come.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use super::table::{AllocStack, Space};
use crate::maps::ProcessMaps;
pub(crate) use crate::tool::place::{Region, region};

/// One live allocation's range and the pages of it that faulted.
#[derive(Debug)]
struct Live {
    end: u64,
    stack: AllocStack,
    pages: u32,
    bits: Bits,
}

/// Which pages of an allocation faulted: none yet, up to 64 pages inline, a bitmap, or a set
/// of the touched ones.
#[derive(Debug)]
enum Bits {
    None,
    Inline(u64),
    Heap(Box<[u64]>),
    /// The pages touched of an allocation over `DENSE_PAGES` pages: a bitmap of its size
    /// could not be held (a corrupted size in a recording states up to 2^64 bytes).
    Sparse(rustc_hash::FxHashSet<u64>),
}

/// The most pages an allocation's bitmap covers: 32 GiB of 4 KiB pages in 1 MiB.
const DENSE_PAGES: u64 = 1 << 23;

/// A live allocation, as `owner` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Owned {
    pub base: u64,
    pub size: u64,
    pub stack: AllocStack,
}

/// Totals of one allocation stack in one process.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StackTotals {
    /// Every allocation made (freed or not) and its bytes.
    pub allocs: u64,
    pub alloc_bytes: u64,
    /// Allocations still live, and their bytes.
    pub live_allocs: u64,
    pub live_bytes: u64,
    /// Pages faulted into the live allocations.
    pub live_pages: u64,
    /// Pages faulted into allocations since freed.
    pub freed_pages: u64,
    /// Live allocations with at least one page faulted.
    pub touched_live: u64,
}

impl StackTotals {
    /// Every page this stack's allocations faulted in, live or since freed.
    pub fn pages(&self) -> u64 {
        self.live_pages + self.freed_pages
    }
}

/// What the join counted.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct ResidentStats {
    pub faults: u64,
    /// Faults inside a live allocation, on a page it had not faulted before.
    pub in_allocs: u64,
    /// Faults inside a live allocation on a page it had already faulted (a read fault of
    /// the zero page, then the write): not counted again.
    pub repeats: u64,
    /// Faults outside every live allocation, filed by mapping.
    pub in_mappings: u64,
    /// Of those, faults in no mapping the process table knows.
    pub unattributed: u64,
    /// Fault samples without an address (malformed): not attributed.
    pub no_addr: u64,
    /// The most live allocations held at once.
    pub peak_live: u64,
}

/// The join.
#[derive(Debug, Default)]
pub(crate) struct Resident {
    page_shift: u32,
    live: BTreeMap<(Space, u64), Live>,
    per_stack: FxHashMap<(Space, AllocStack), StackTotals>,
    /// Faults outside allocations, per process and region.
    regions: FxHashMap<(Space, Region), u64>,
    /// Pages per (process, allocation stack, toucher stack), when touchers are sampled.
    touchers: FxHashMap<(Space, AllocStack, AllocStack), u64>,
    pub stats: ResidentStats,
}

impl Resident {
    pub fn new(page_size: u64) -> Resident {
        Resident {
            page_shift: page_size.max(1).trailing_zeros(),
            ..Resident::default()
        }
    }

    pub fn page_size(&self) -> u64 {
        1 << self.page_shift
    }

    /// An allocation of `size` bytes at `base` became live.
    pub fn alloc(&mut self, space: Space, base: u64, size: u64, stack: AllocStack) {
        self.insert(space, base, size, stack);
        let t = self.per_stack.entry((space, stack)).or_default();
        t.allocs += 1;
        // A corrupted size (a recording's) saturates, as the allocation's end does.
        t.alloc_bytes = t.alloc_bytes.saturating_add(size);
    }

    /// What remains of a region after munmap cut part of it: live again, not allocated
    /// again.
    pub fn remains(&mut self, space: Space, base: u64, size: u64, stack: AllocStack) {
        self.insert(space, base, size, stack);
    }

    fn insert(&mut self, space: Space, base: u64, size: u64, stack: AllocStack) {
        // An allocation at a live one's address replaces it (its free was lost).
        self.free(space, base);
        let t = self.per_stack.entry((space, stack)).or_default();
        t.live_allocs += 1;
        t.live_bytes = t.live_bytes.saturating_add(size);
        self.live.insert(
            (space, base),
            Live {
                end: base.saturating_add(size),
                stack,
                pages: 0,
                bits: Bits::None,
            },
        );
        self.stats.peak_live = self.stats.peak_live.max(self.live.len() as u64);
    }

    /// The allocation at `base` was freed: its counters fold into its stack's.
    pub fn free(&mut self, space: Space, base: u64) {
        let Some(l) = self.live.remove(&(space, base)) else {
            return;
        };
        self.fold(space, base, &l);
    }

    fn fold(&mut self, space: Space, base: u64, l: &Live) {
        let t = self.per_stack.entry((space, l.stack)).or_default();
        let pages = u64::from(l.pages);
        t.live_allocs = t.live_allocs.saturating_sub(1);
        t.live_bytes = t.live_bytes.saturating_sub(l.end - base);
        t.live_pages = t.live_pages.saturating_sub(pages);
        t.freed_pages += pages;
        if pages > 0 {
            t.touched_live = t.touched_live.saturating_sub(1);
        }
    }

    /// The process's image was replaced (exec): nothing it allocated is live.
    pub fn reset_space(&mut self, space: Space) {
        let gone: Vec<(u64, Live)> = self
            .live
            .range((space, 0)..=(space, u64::MAX))
            .map(|(&(_, b), _)| b)
            .collect::<Vec<_>>()
            .into_iter()
            .filter_map(|b| self.live.remove(&(space, b)).map(|l| (b, l)))
            .collect();
        for (b, l) in &gone {
            self.fold(space, *b, l);
        }
    }

    /// The live allocation holding `addr` in `space`, now.
    pub fn owner(&self, space: Space, addr: u64) -> Option<Owned> {
        let (&(_, base), l) = self.live.range((space, 0)..=(space, addr)).next_back()?;
        (addr < l.end).then_some(Owned {
            base,
            size: l.end - base,
            stack: l.stack,
        })
    }

    /// The pages faulted into the live allocation at `base`.
    pub fn pages_of(&self, space: Space, base: u64) -> Option<u32> {
        self.live.get(&(space, base)).map(|l| l.pages)
    }

    /// A page fault at `addr` in `space`, touched from `toucher` (the faulting code's
    /// stack, when sampled). Returns false when no live allocation holds the address: the
    /// caller files it by mapping (`outside`).
    pub fn fault(&mut self, space: Space, addr: u64, toucher: Option<AllocStack>) -> bool {
        self.stats.faults += 1;
        let shift = self.page_shift;
        let Some((&(_, base), l)) = self.live.range_mut((space, 0)..=(space, addr)).next_back()
        else {
            return false;
        };
        if addr >= l.end {
            return false;
        }
        let first = base >> shift;
        let n = ((l.end - 1) >> shift) - first + 1;
        let i = (addr >> shift) - first;
        if !set_page(&mut l.bits, n, i) {
            self.stats.repeats += 1;
            return true;
        }
        l.pages += 1;
        let stack = l.stack;
        let t = self.per_stack.entry((space, stack)).or_default();
        t.live_pages += 1;
        if l.pages == 1 {
            t.touched_live += 1;
        }
        self.stats.in_allocs += 1;
        if let Some(who) = toucher {
            *self.touchers.entry((space, stack, who)).or_default() += 1;
        }
        true
    }

    /// A fault no live allocation holds, in `region` of `space`.
    pub fn outside(&mut self, space: Space, region: Region) {
        self.stats.in_mappings += 1;
        if region == Region::Unknown {
            self.stats.unattributed += 1;
        }
        *self.regions.entry((space, region)).or_default() += 1;
    }

    /// Every allocation stack's totals.
    pub fn stacks(&self) -> impl Iterator<Item = (Space, AllocStack, &StackTotals)> {
        self.per_stack.iter().map(|(&(s, a), t)| (s, a, t))
    }

    /// Faults outside allocations, per process and region.
    pub fn regions(&self) -> impl Iterator<Item = (Space, Region, u64)> + '_ {
        self.regions.iter().map(|(&(s, r), &n)| (s, r, n))
    }

    /// Pages per toucher stack under each allocation stack.
    pub fn touchers(&self) -> impl Iterator<Item = (Space, AllocStack, AllocStack, u64)> + '_ {
        self.touchers.iter().map(|(&(s, a, t), &n)| (s, a, t, n))
    }

    pub fn live_len(&self) -> usize {
        self.live.len()
    }

    /// Approximate bytes the join holds: live entries, their bitmaps, the totals.
    pub fn memory_bytes(&self) -> usize {
        let bits: usize = self
            .live
            .values()
            .map(|l| match &l.bits {
                Bits::Heap(b) => b.len() * 8,
                Bits::Sparse(s) => s.capacity() * 16,
                _ => 0,
            })
            .sum();
        self.live.len() * (std::mem::size_of::<((Space, u64), Live)>() + 16)
            + bits
            + self.per_stack.capacity()
                * (std::mem::size_of::<((Space, AllocStack), StackTotals)>() + 8)
            + self.touchers.capacity() * 48
    }
}

/// Marks page `i` of `n`; whether it was not marked before.
fn set_page(bits: &mut Bits, n: u64, i: u64) -> bool {
    if i >= n {
        return false;
    }
    if matches!(bits, Bits::None) {
        *bits = if n <= 64 {
            Bits::Inline(0)
        } else if n <= DENSE_PAGES {
            Bits::Heap(vec![0u64; n.div_ceil(64) as usize].into_boxed_slice())
        } else {
            Bits::Sparse(Default::default())
        };
    }
    let (word, bit) = match bits {
        Bits::Sparse(s) => return s.insert(i),
        Bits::Inline(w) => (w, i),
        Bits::Heap(b) => match b.get_mut((i / 64) as usize) {
            Some(w) => (w, i % 64),
            None => return false,
        },
        Bits::None => return false,
    };
    let mask = 1u64 << bit;
    let new = *word & mask == 0;
    *word |= mask;
    new
}

/// A region as reports name it.
pub(crate) fn region_name(maps: &ProcessMaps, r: Region) -> String {
    match r {
        Region::Heap => "[heap]".to_string(),
        Region::Stack => "[stack]".to_string(),
        Region::Anon => "//anon".to_string(),
        Region::Module(m) => String::from_utf8_lossy(&maps.module(m).path).into_owned(),
        Region::Unknown => "[unknown]".to_string(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const S: AllocStack = AllocStack::Id(3);

    #[test]
    fn faults_count_distinct_pages_of_the_owning_allocation() {
        let mut r = Resident::new(4096);
        r.alloc(1, 0x10_010, 3 * 4096, S);
        // The block spans four pages: 0x10000..0x14000.
        assert!(r.fault(1, 0x10_010, None));
        assert!(r.fault(1, 0x10_fff, None)); // the same page again
        assert!(r.fault(1, 0x13_00f, None));
        assert!(!r.fault(1, 0x13_010, None)); // one past the end
        assert!(!r.fault(2, 0x10_010, None)); // another process
        let t = *r.stacks().next().unwrap().2;
        assert_eq!(t.live_pages, 2);
        assert_eq!(t.touched_live, 1);
        assert_eq!(r.stats.repeats, 1);
        assert_eq!(r.stats.in_allocs, 2);
        assert_eq!(
            r.owner(1, 0x11_000),
            Some(Owned {
                base: 0x10_010,
                size: 3 * 4096,
                stack: S
            })
        );
        r.free(1, 0x10_010);
        let t = *r.stacks().next().unwrap().2;
        assert_eq!((t.live_allocs, t.live_bytes, t.live_pages), (0, 0, 0));
        assert_eq!((t.allocs, t.alloc_bytes, t.freed_pages), (1, 3 * 4096, 2));
        assert_eq!(t.touched_live, 0);
        assert_eq!(r.live_len(), 0);
        assert_eq!(r.owner(1, 0x11_000), None);
    }

    #[test]
    fn large_allocations_keep_a_bitmap_and_replaced_ones_fold() {
        let mut r = Resident::new(4096);
        r.alloc(1, 0x100_000, 1000 * 4096, S);
        for p in 0..1000u64 {
            r.fault(1, 0x100_000 + p * 4096 + 5, None);
            r.fault(1, 0x100_000 + p * 4096 + 7, None);
        }
        assert_eq!(r.stats.in_allocs, 1000);
        assert_eq!(r.stats.repeats, 1000);
        // A lost free: a new allocation at the same address replaces the old one.
        r.alloc(1, 0x100_000, 4096, AllocStack::Missing);
        let mut all: Vec<_> = r.stacks().map(|(_, s, t)| (s, *t)).collect();
        all.sort_by_key(|a| a.0);
        assert_eq!(all[0].1.freed_pages, 1000);
        assert_eq!(all[0].1.live_allocs, 0);
        assert_eq!(all[1].1.live_allocs, 1);
        r.reset_space(1);
        assert_eq!(r.live_len(), 0);
    }

    #[test]
    fn allocations_of_corrupted_sizes_saturate_and_keep_no_bitmap_of_their_size() {
        // Sizes a recording's corrupted malloc arguments state (fuzz/, `tools`).
        let mut r = Resident::new(4096);
        r.alloc(1, 0x1000, u64::MAX - 0x1000, S);
        r.alloc(1, 0x1000_0000, u64::MAX / 2, S);
        assert!(r.fault(1, 0x2000_0000_0000, None));
        assert!(r.fault(1, 0x2000_0000_0010, None)); // the same page again
        assert_eq!(r.stats.repeats, 1);
        assert!(r.memory_bytes() < 1 << 20, "{}", r.memory_bytes());
        let t = *r.stacks().next().unwrap().2;
        assert_eq!(
            (t.alloc_bytes, t.live_bytes, t.live_pages),
            (u64::MAX, u64::MAX, 1)
        );
    }

    #[test]
    fn touchers_are_counted_per_new_page_and_outside_faults_by_region() {
        let mut r = Resident::new(4096);
        r.alloc(1, 0x1000, 8192, S);
        r.fault(1, 0x1000, Some(AllocStack::Id(9)));
        r.fault(1, 0x1001, Some(AllocStack::Id(9)));
        r.fault(1, 0x2000, Some(AllocStack::Id(8)));
        let mut t: Vec<_> = r.touchers().collect();
        t.sort_unstable();
        assert_eq!(
            t,
            vec![(1, S, AllocStack::Id(8), 1), (1, S, AllocStack::Id(9), 1)]
        );
        r.outside(1, Region::Heap);
        r.outside(1, Region::Unknown);
        assert_eq!(r.stats.in_mappings, 2);
        assert_eq!(r.stats.unattributed, 1);
        assert_eq!(r.stats.faults, 3);
    }
}
