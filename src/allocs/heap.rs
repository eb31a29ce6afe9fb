//! The heap analyses of `memperf heap`, kept as the allocation table changes: the peak and
//! what it consisted of, temporary allocations, the size histogram, each stack's churn, and
//! the live bytes over time.
//!
//! The definitions are heaptrack's and memray's, so that their users read the same numbers:
//! - **peak**: the maximum of the running sum of allocated minus freed bytes over every
//!   call in time order (heaptrack's `AccumulatedTraceData`), not over snapshots; each
//!   stack's share is its live bytes at that moment. A tie keeps the earlier moment.
//! - **temporary** (heaptrack): a free that directly follows an allocation, with no other
//!   allocator call (allocation or free) in between, over the whole process, where the freed
//!   block has that allocation's size and stack. heaptrack compares those (its allocation
//!   info index), not the address: in `for (...) p[i] = malloc(n); for (...) free(p[i]);`
//!   the first free counts.
//! - **temporary within N** (memray's `--temporary-allocation-threshold`): freed by the
//!   thread that allocated it before N other allocations of that thread.
//!
//! What each stack had at the peak is kept without copying the per-stack table at every new
//! peak: a stack's value is saved when it next changes after a peak (or at the end), since
//! until then it still is what it was at the peak. Memory is O(stacks + threads × N).

use rustc_hash::FxHashMap;

use super::table::{AllocStack, Space};

/// Allocation sizes by power of two: bucket `i` holds sizes in `[2^(i-1), 2^i)`, bucket 0
/// size 0.
pub const BUCKETS: usize = 65;

/// The bucket of a size.
pub fn bucket(size: u64) -> usize {
    (u64::BITS - size.leading_zeros()) as usize
}

/// One allocation stack's figures over the run.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StackHeap {
    pub allocs: u64,
    pub alloc_bytes: u64,
    pub frees: u64,
    pub live_allocs: u64,
    pub live_bytes: u64,
    /// Live allocations and bytes at the peak.
    pub peak_allocs: u64,
    pub peak_bytes: u64,
    /// heaptrack's temporaries, and memray's within the threshold.
    pub temporary: u64,
    pub temporary_within: u64,
    /// Live when their process exited: leaked, but no longer in the running sum.
    pub exited_allocs: u64,
    pub exited_bytes: u64,
    /// The peak number after which `peak_*` were last brought up to date.
    seen: u64,
}

impl StackHeap {
    /// Live at the end, or when its process exited.
    pub fn leaked_bytes(&self) -> u64 {
        self.live_bytes.saturating_add(self.exited_bytes)
    }

    pub fn leaked_allocs(&self) -> u64 {
        self.live_allocs + self.exited_allocs
    }
}

/// One step of the timeline: the highest live heap bytes of the step (`live`, reached at
/// `time`) and what was live after its last event (`last`, at `last_time`), so that a drop
/// within the step is drawn too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Point {
    pub time: u64,
    pub live: u64,
    pub last_time: u64,
    pub last: u64,
}

impl Point {
    fn at(time: u64, live: u64) -> Point {
        Point {
            time,
            live,
            last_time: time,
            last: live,
        }
    }
}

/// The most timeline points kept; past it, neighbours are merged (keeping each pair's
/// higher point, so the peak is never smoothed away).
const MAX_POINTS: usize = 20_000;

/// One thread's window of recent allocations.
#[derive(Debug, Default)]
struct Window {
    next: u64,
    slots: std::collections::BTreeMap<u64, Option<Block>>,
}

/// A block's owner, for the per-thread temporary window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Block {
    space: Space,
    addr: u64,
}

#[derive(Debug)]
pub struct HeapTracker {
    /// memray's threshold: at most this many other allocations of the thread in between.
    pub within: usize,
    stacks: FxHashMap<(Space, AllocStack), StackHeap>,
    pub live_bytes: u64,
    pub live_allocs: u64,
    /// Live when their process exited (leaked; the exit returned them).
    pub exited_bytes: u64,
    pub exited_allocs: u64,
    pub peak_bytes: u64,
    pub peak_time: u64,
    /// How many times a new peak was reached (the peak's number).
    peaks: u64,
    /// Per process, its last allocator call if it was an allocation: its stack and size
    /// (heaptrack's temporary test; heaptrack traces each process on its own, so another
    /// process's calls do not come between).
    last_alloc: FxHashMap<Space, (AllocStack, u64)>,
    /// The mappings cut into more than one piece (by a munmap inside them), by process,
    /// mapping time and stack: how many pieces are left. The last piece's unmap is the free.
    pieces: FxHashMap<(Space, u64, AllocStack), u64>,
    /// Per thread, its last `within + 1` allocations not freed by it since, by sequence
    /// number (memray's window); `None` for one another thread freed, which still takes
    /// its place.
    recent: FxHashMap<u32, Window>,
    /// Where each block in a window is (thread, sequence number): a free finds its own
    /// allocation at once, whatever the threshold (a scan of the window made a threshold of
    /// millions quadratic).
    in_window: FxHashMap<Block, (u32, u64)>,
    pub histogram: [(u64, u64); BUCKETS],
    pub allocs: u64,
    pub alloc_bytes: u64,
    pub frees: u64,
    pub temporary: u64,
    pub temporary_within: u64,
    timeline: Vec<Point>,
    /// Nanoseconds each timeline point stands for; doubles when the points are merged.
    step: u64,
    pub first_time: Option<u64>,
    pub last_time: u64,
    /// The mappings the allocator made for itself (arenas, mmap'd chunks): start → length.
    own_maps: std::collections::BTreeMap<(Space, u64), u64>,
}

impl HeapTracker {
    pub fn new(within: usize) -> HeapTracker {
        HeapTracker {
            within,
            stacks: FxHashMap::default(),
            live_bytes: 0,
            live_allocs: 0,
            exited_bytes: 0,
            exited_allocs: 0,
            peak_bytes: 0,
            peak_time: 0,
            peaks: 0,
            last_alloc: FxHashMap::default(),
            pieces: FxHashMap::default(),
            recent: FxHashMap::default(),
            in_window: FxHashMap::default(),
            histogram: [(0, 0); BUCKETS],
            allocs: 0,
            alloc_bytes: 0,
            frees: 0,
            temporary: 0,
            temporary_within: 0,
            timeline: Vec::new(),
            step: 1_000_000,
            first_time: None,
            last_time: 0,
            own_maps: Default::default(),
        }
    }

    /// The stack's entry, with its peak figures brought up to date first: if a peak came
    /// after its last change, its live figures now are what it had then.
    fn stack(&mut self, space: Space, stack: AllocStack) -> &mut StackHeap {
        let peaks = self.peaks;
        let s = self.stacks.entry((space, stack)).or_default();
        if s.seen < peaks {
            s.peak_allocs = s.live_allocs;
            s.peak_bytes = s.live_bytes;
            s.seen = peaks;
        }
        s
    }

    /// An allocation of `size` bytes at `addr` by thread `tid` became live.
    pub fn alloc(&mut self, b: (Space, u64), tid: u32, size: u64, stack: AllocStack, time: u64) {
        let block = Block {
            space: b.0,
            addr: b.1,
        };
        let s = self.stack(b.0, stack);
        s.allocs += 1;
        s.alloc_bytes = s.alloc_bytes.saturating_add(size);
        s.live_allocs += 1;
        s.live_bytes = s.live_bytes.saturating_add(size);
        self.allocs += 1;
        self.alloc_bytes = self.alloc_bytes.saturating_add(size);
        self.live_allocs += 1;
        self.live_bytes = self.live_bytes.saturating_add(size);
        let h = &mut self.histogram[bucket(size)];
        h.0 += 1;
        h.1 = h.1.saturating_add(size);
        self.last_alloc.insert(b.0, (stack, size));
        self.window_alloc(tid, block);
        if self.live_bytes > self.peak_bytes {
            self.peak_bytes = self.live_bytes;
            self.peak_time = time;
            self.peaks += 1;
        }
        self.note(time);
    }

    /// The allocation at `b` (of `size` bytes, from `stack`) was freed by `tid`.
    pub fn free(&mut self, b: (Space, u64), tid: u32, size: u64, stack: AllocStack, time: u64) {
        let block = Block {
            space: b.0,
            addr: b.1,
        };
        let temporary = self.last_alloc.remove(&b.0) == Some((stack, size));
        let within = self.window_free(tid, block);
        let s = self.stack(b.0, stack);
        s.frees += 1;
        s.live_allocs = s.live_allocs.saturating_sub(1);
        s.live_bytes = s.live_bytes.saturating_sub(size);
        s.temporary += u64::from(temporary);
        s.temporary_within += u64::from(within);
        self.frees += 1;
        self.temporary += u64::from(temporary);
        self.temporary_within += u64::from(within);
        self.live_allocs = self.live_allocs.saturating_sub(1);
        self.live_bytes = self.live_bytes.saturating_sub(size);
        self.note(time);
    }

    /// `cut` bytes of the piece at `b` (`piece` bytes) of a mapping made at `born` by
    /// `stack` were unmapped, leaving `left` pieces of it there (0, 1 or 2). The mapping is
    /// one allocation however it is cut: it is freed when its last piece goes, and shrinks
    /// before.
    #[allow(clippy::too_many_arguments)]
    pub fn unmapped(
        &mut self,
        b: (Space, u64),
        tid: u32,
        (piece, cut): (u64, u64),
        born: u64,
        stack: AllocStack,
        left: u64,
        time: u64,
    ) {
        let key = (b.0, born, stack);
        let pieces = self.pieces.remove(&key).unwrap_or(1) - 1 + left;
        if pieces == 0 {
            self.free(b, tid, piece, stack, time);
            return;
        }
        if pieces > 1 {
            self.pieces.insert(key, pieces);
        }
        self.shrink(b.0, stack, cut, time);
    }

    /// `bytes` of a mapped region of `stack` were unmapped (munmap cut it): neither an
    /// allocation nor a whole free.
    pub fn shrink(&mut self, space: Space, stack: AllocStack, bytes: u64, time: u64) {
        let s = self.stack(space, stack);
        s.live_bytes = s.live_bytes.saturating_sub(bytes);
        self.live_bytes = self.live_bytes.saturating_sub(bytes);
        self.last_alloc.remove(&space);
        self.note(time);
    }

    /// A live allocation is gone without a free of its own (its free was lost, and its
    /// address was handed out again).
    pub fn vanish(&mut self, space: Space, stack: AllocStack, size: u64, time: u64) {
        let s = self.stack(space, stack);
        s.live_allocs = s.live_allocs.saturating_sub(1);
        s.live_bytes = s.live_bytes.saturating_sub(size);
        self.live_allocs = self.live_allocs.saturating_sub(1);
        self.live_bytes = self.live_bytes.saturating_sub(size);
        self.note(time);
    }

    /// Leaked bytes and allocations: live at the end, or when their process exited.
    pub fn leaked_bytes(&self) -> u64 {
        self.live_bytes.saturating_add(self.exited_bytes)
    }

    pub fn leaked_allocs(&self) -> u64 {
        self.live_allocs + self.exited_allocs
    }

    /// A process exited: what it still had leaked, and the kernel took it back, so it is no
    /// longer in the running sum (a later process's peak does not stand on it; heaptrack
    /// profiles each process on its own).
    pub fn process_exit(&mut self, space: Space, time: u64) {
        self.end_space(space, time, true);
    }

    /// A process exec'd: what it had allocated is gone (not freed: no temporary, no free).
    pub fn reset_space(&mut self, space: Space, time: u64) {
        self.end_space(space, time, false);
    }

    /// Takes the live allocations of `space` out of the running sum, kept as leaked if
    /// `leaked`.
    fn end_space(&mut self, space: Space, time: u64, leaked: bool) {
        let peaks = self.peaks;
        for (&(s, _), st) in self.stacks.iter_mut() {
            if s != space {
                continue;
            }
            if st.seen < peaks {
                st.peak_allocs = st.live_allocs;
                st.peak_bytes = st.live_bytes;
                st.seen = peaks;
            }
            self.live_bytes = self.live_bytes.saturating_sub(st.live_bytes);
            self.live_allocs = self.live_allocs.saturating_sub(st.live_allocs);
            if leaked {
                st.exited_bytes = st.exited_bytes.saturating_add(st.live_bytes);
                st.exited_allocs += st.live_allocs;
                self.exited_bytes = self.exited_bytes.saturating_add(st.live_bytes);
                self.exited_allocs += st.live_allocs;
            }
            st.live_bytes = 0;
            st.live_allocs = 0;
        }
        self.last_alloc.remove(&space);
        self.pieces.retain(|&(s, _, _), _| s != space);
        // An exit is stamped with the last allocator call's time, not its own: a point
        // there would draw the process's leak as gone from that call on, though it held it
        // until it exited. The running sum drops now; the timeline shows it at the next call.
        if time != 0 && !leaked {
            self.note(time);
        }
    }

    /// The allocator mapped `[start, start+len)` for itself (a new arena, an mmap'd chunk).
    pub fn allocator_mapped(&mut self, space: Space, start: u64, len: u64) {
        // Bounded: a process that maps more than this keeps the newest.
        if self.own_maps.len() >= 65_536 {
            self.own_maps.pop_first();
        }
        self.own_maps.insert((space, start), len);
    }

    /// The allocator unmapped `[start, start+len)`: its mappings starting there are gone.
    pub fn allocator_unmapped(&mut self, space: Space, start: u64, len: u64) {
        let end = start.saturating_add(len);
        let gone: Vec<(Space, u64)> = self
            .own_maps
            .range((space, start)..(space, end))
            .map(|(k, _)| *k)
            .collect();
        for k in gone {
            self.own_maps.remove(&k);
        }
    }

    /// Whether the allocator mapped part of `[start, end)` for itself.
    pub fn allocator_maps_within(&self, space: Space, start: u64, end: u64) -> bool {
        self.own_maps
            .range(..(space, end))
            .next_back()
            .is_some_and(|(&(s, a), &len)| s == space && a.saturating_add(len) > start)
    }

    /// A thread exited: its window of recent allocations goes with it.
    pub fn thread_exit(&mut self, tid: u32) {
        if let Some(w) = self.recent.remove(&tid) {
            for b in w.slots.values().flatten() {
                self.in_window.remove(b);
            }
        }
    }

    /// `block` joins its thread's window; past `within + 1`, the oldest leaves it.
    fn window_alloc(&mut self, tid: u32, block: Block) {
        let w = self.recent.entry(tid).or_default();
        let seq = w.next;
        w.next += 1;
        w.slots.insert(seq, Some(block));
        if w.slots.len() > self.within.saturating_add(1)
            && let Some((_, Some(old))) = w.slots.pop_first()
        {
            self.in_window.remove(&old);
        }
        // The address was still in a window (its free was lost): that place is stale.
        if let Some((t, s)) = self.in_window.insert(block, (tid, seq))
            && let Some(slot) = self.recent.get_mut(&t).and_then(|w| w.slots.get_mut(&s))
        {
            *slot = None;
        }
    }

    /// `block` was freed by `tid`: whether it was in that thread's window (memray's
    /// temporary). Freed by another thread, it leaves no block in its own thread's window
    /// but keeps its place there.
    fn window_free(&mut self, tid: u32, block: Block) -> bool {
        let Some((t, seq)) = self.in_window.remove(&block) else {
            return false;
        };
        let Some(w) = self.recent.get_mut(&t) else {
            return false;
        };
        if t == tid {
            w.slots.remove(&seq).is_some()
        } else {
            if let Some(slot) = w.slots.get_mut(&seq) {
                *slot = None;
            }
            false
        }
    }

    /// Times are taken from `time` on, the sample clock when tracing began, rather than from
    /// the first call (a process attached to may make none for a while).
    pub fn begin_at(&mut self, time: u64) {
        self.first_time = Some(self.first_time.map_or(time, |f| f.min(time)));
    }

    /// Keeps the timeline: one point per step of sample time, the highest of the step.
    fn note(&mut self, time: u64) {
        let first = *self.first_time.get_or_insert(time);
        self.last_time = self.last_time.max(time);
        let slot = time.saturating_sub(first) / self.step;
        match self.timeline.last_mut() {
            Some(p) if p.time.saturating_sub(first) / self.step == slot => {
                // The slot keeps its highest point, at the time it was reached, and its
                // last.
                if self.live_bytes > p.live {
                    p.time = time;
                    p.live = self.live_bytes;
                }
                p.last_time = time;
                p.last = self.live_bytes;
            }
            _ => self.timeline.push(Point::at(time, self.live_bytes)),
        }
        if self.timeline.len() > MAX_POINTS {
            self.merge_points();
        }
    }

    /// Halves the timeline: each pair of neighbouring slots becomes one with the higher.
    fn merge_points(&mut self) {
        self.step = self.step.saturating_mul(2);
        let merged: Vec<Point> = self
            .timeline
            .chunks(2)
            .filter_map(|c| {
                c.iter().copied().reduce(|a, b| {
                    let top = if b.live > a.live { b } else { a };
                    Point {
                        last_time: b.last_time,
                        last: b.last,
                        ..top
                    }
                })
            })
            .collect();
        self.timeline = merged;
    }

    /// The live bytes over time (the highest point of each step, and its last), oldest
    /// first.
    #[cfg(test)]
    pub fn timeline(&self) -> &[Point] {
        &self.timeline
    }

    /// The timeline as (time, live bytes) changes, oldest first: each step's highest point,
    /// then its last where that differs. Between two changes the value holds (a step plot).
    pub fn changes(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::with_capacity(self.timeline.len() * 2);
        for p in &self.timeline {
            out.push((p.time, p.live));
            if p.last_time > p.time && p.last != p.live {
                out.push((p.last_time, p.last));
            }
        }
        out
    }

    /// Every stack's figures as they stand now, with what it had at the peak brought up to
    /// date in the copy (for a report while tracing goes on).
    pub fn stacks_now(&self) -> impl Iterator<Item = (Space, AllocStack, StackHeap)> + '_ {
        let peaks = self.peaks;
        self.stacks.iter().map(move |(&(sp, st), h)| {
            let mut h = *h;
            if h.seen < peaks {
                h.peak_allocs = h.live_allocs;
                h.peak_bytes = h.live_bytes;
                h.seen = peaks;
            }
            (sp, st, h)
        })
    }

    /// Every stack's figures, with what it had at the peak brought up to date.
    pub fn stacks(&mut self) -> impl Iterator<Item = (Space, AllocStack, &StackHeap)> {
        let peaks = self.peaks;
        for s in self.stacks.values_mut() {
            if s.seen < peaks {
                s.peak_allocs = s.live_allocs;
                s.peak_bytes = s.live_bytes;
                s.seen = peaks;
            }
        }
        self.stacks.iter().map(|(&(sp, st), h)| (sp, st, h))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const A: AllocStack = AllocStack::Id(1);
    const B: AllocStack = AllocStack::Id(2);

    fn of(t: &mut HeapTracker, stack: AllocStack) -> StackHeap {
        *t.stacks().find(|(_, s, _)| *s == stack).unwrap().2
    }

    #[test]
    fn the_peak_is_the_running_sums_maximum_and_each_stack_keeps_its_share_then() {
        let mut t = HeapTracker::new(1);
        // A: 3 × 100 live; B: 2 × 1000 → peak 2300 at time 5; then B freed, A grows to 500.
        for (i, time) in (0..3).zip(1..) {
            t.alloc((1, 0x100 + i), 7, 100, A, time);
        }
        t.alloc((1, 0x1000), 7, 1000, B, 4);
        t.alloc((1, 0x2000), 7, 1000, B, 5);
        t.free((1, 0x1000), 7, 1000, B, 6);
        t.free((1, 0x2000), 7, 1000, B, 7);
        t.alloc((1, 0x200), 7, 100, A, 8);
        t.alloc((1, 0x201), 7, 100, A, 9);
        assert_eq!((t.peak_bytes, t.peak_time), (2300, 5));
        let (a, b) = (of(&mut t, A), of(&mut t, B));
        assert_eq!((a.peak_allocs, a.peak_bytes, a.live_bytes), (3, 300, 500));
        assert_eq!((b.peak_allocs, b.peak_bytes, b.live_bytes), (2, 2000, 0));
        assert_eq!(t.live_bytes, 500);
    }

    #[test]
    fn the_figures_now_are_the_figures_a_final_report_would_give() {
        let mut t = HeapTracker::new(1);
        t.alloc((1, 1), 7, 10, A, 1);
        t.alloc((1, 2), 7, 20, B, 2);
        t.free((1, 2), 7, 20, B, 3);
        t.alloc((1, 3), 7, 5, A, 4);
        let now: Vec<_> = t.stacks_now().map(|(_, s, h)| (s, h)).collect();
        let a = now.iter().find(|(s, _)| *s == A).unwrap().1;
        assert_eq!((a.peak_bytes, a.live_bytes), (10, 15));
        assert_eq!(a, of(&mut t, A));
    }

    #[test]
    fn a_stack_that_never_changes_after_the_peak_keeps_its_live_figures() {
        let mut t = HeapTracker::new(1);
        t.alloc((1, 1), 7, 10, A, 1);
        t.alloc((1, 2), 7, 20, B, 2);
        assert_eq!(of(&mut t, A).peak_bytes, 10);
        assert_eq!(of(&mut t, B).peak_bytes, 20);
        assert_eq!(t.peak_bytes, 30);
    }

    #[test]
    fn temporaries_by_heaptracks_rule_and_by_memrays_threshold() {
        const C: AllocStack = AllocStack::Id(3);
        let mut t = HeapTracker::new(1);
        // malloc; free: temporary by both.
        t.alloc((1, 1), 7, 8, A, 1);
        t.free((1, 1), 7, 8, A, 2);
        // a = malloc (A); b = malloc (B); free(a); free(b): heaptrack neither (b came between
        // a and its free, and b's free follows a free); memray (threshold 1) both.
        t.alloc((1, 2), 7, 8, A, 3);
        t.alloc((1, 3), 7, 8, B, 4);
        t.free((1, 2), 7, 8, A, 5);
        t.free((1, 3), 7, 8, B, 6);
        // Two others between: memray's threshold 1 says no.
        t.alloc((1, 4), 7, 8, A, 7);
        t.alloc((1, 5), 7, 16, B, 8);
        t.alloc((1, 6), 7, 16, B, 9);
        t.free((1, 4), 7, 8, A, 10);
        // heaptrack compares size and stack, not the address: the free of another block of
        // the same size from the same stack right after an allocation counts.
        t.alloc((1, 20), 7, 32, C, 11);
        t.alloc((1, 21), 7, 32, C, 12);
        t.free((1, 20), 7, 32, C, 13);
        // Freed by another thread: not memray's temporary (heaptrack's is process-wide).
        t.alloc((1, 7), 7, 64, C, 14);
        t.free((1, 7), 9, 64, C, 15);
        let (a, b, c) = (of(&mut t, A), of(&mut t, B), of(&mut t, C));
        assert_eq!((a.temporary, a.temporary_within), (1, 2));
        assert_eq!((b.temporary, b.temporary_within), (0, 1));
        assert_eq!((c.temporary, c.temporary_within), (2, 1));
        assert_eq!((t.temporary, t.temporary_within), (3, 4));
    }

    #[test]
    fn heaptracks_temporary_rule_holds_within_each_process() {
        // Another process's free between an allocation and its free: heaptrack traces each
        // process on its own, so the free still directly follows the allocation.
        let mut t = HeapTracker::new(1);
        t.alloc((1, 0x10), 7, 8, A, 1);
        t.free((2, 0x20), 9, 8, B, 2);
        t.free((1, 0x10), 7, 8, A, 3);
        assert_eq!(of(&mut t, A).temporary, 1);
        assert_eq!(t.temporary, 1);
    }

    #[test]
    fn the_largest_threshold_keeps_every_allocation_of_the_thread() {
        // `--temporary-threshold 18446744073709551615`: the window is unbounded, no overflow.
        let mut t = HeapTracker::new(usize::MAX);
        t.alloc((1, 0x10), 7, 8, A, 1);
        t.alloc((1, 0x20), 7, 8, B, 2);
        t.free((1, 0x10), 7, 8, A, 3);
        assert_eq!(t.temporary_within, 1);
    }

    #[test]
    fn a_drop_within_a_step_is_kept_as_the_steps_last_value() {
        // 1 ms steps: 100 live, then within one step up to 300 and down to 50.
        let mut t = HeapTracker::new(1);
        let ms = 1_000_000;
        t.alloc((1, 1), 7, 100, A, 0);
        t.alloc((1, 2), 7, 200, A, 5 * ms);
        t.free((1, 2), 7, 200, A, 5 * ms + 10);
        t.free((1, 1), 7, 100, A, 5 * ms + 20);
        t.alloc((1, 3), 7, 50, A, 5 * ms + 30);
        assert_eq!(
            t.changes(),
            vec![(0, 100), (5 * ms, 300), (5 * ms + 30, 50)]
        );
    }

    #[test]
    fn the_window_under_a_huge_threshold_finds_each_free_at_once() {
        // 200000 live blocks of one thread freed newest first under an unbounded window:
        // each free is found in its window (memray: all temporary) without a scan of it
        // (which made this 2e10 comparisons).
        let mut t = HeapTracker::new(usize::MAX);
        let n = 200_000u64;
        for i in 0..n {
            t.alloc((1, i), 7, 8, A, i);
        }
        for i in (0..n).rev() {
            t.free((1, i), 7, 8, A, n + i);
        }
        assert_eq!(t.temporary_within, n);
        assert!(t.in_window.is_empty() && t.recent[&7].slots.is_empty());
        // Threshold 1, another thread's free keeps its place: a; b freed by 9; c; free(a)
        // by 7: b and c came between, both still in 7's window, a left it.
        let mut t = HeapTracker::new(1);
        t.alloc((1, 1), 7, 8, A, 1);
        t.alloc((1, 2), 7, 8, A, 2);
        t.free((1, 2), 9, 8, A, 3);
        t.alloc((1, 3), 7, 8, A, 4);
        t.free((1, 1), 7, 8, A, 5);
        assert_eq!(t.temporary_within, 0);
        t.thread_exit(7);
        assert!(t.in_window.is_empty());
    }

    #[test]
    fn sizes_fall_in_power_of_two_buckets() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(1), 1);
        assert_eq!(bucket(2), 2);
        assert_eq!(bucket(3), 2);
        assert_eq!(bucket(4096), 13);
        assert_eq!(bucket(u64::MAX), 64);
        let mut t = HeapTracker::new(1);
        t.alloc((1, 1), 7, 4096, A, 1);
        t.alloc((1, 2), 7, 5000, A, 1);
        assert_eq!(t.histogram[13], (2, 9096));
    }

    #[test]
    fn the_timeline_keeps_the_peak_when_it_is_merged() {
        let mut t = HeapTracker::new(1);
        let ms = 1_000_000;
        for i in 0..(MAX_POINTS as u64 * 3) {
            t.alloc((1, i), 7, 10, A, i * ms);
            if i != 1234 {
                t.free((1, i), 7, 10, A, i * ms + 1);
            } else {
                t.alloc((1, u64::MAX), 7, 1_000_000, B, i * ms + 2);
                t.free((1, u64::MAX), 7, 1_000_000, B, i * ms + 3);
            }
        }
        assert!(t.timeline().len() <= MAX_POINTS);
        // Every step ends at what was live after its last event: the 10 B of block 1234.
        assert_eq!(t.changes().last().map(|c| c.1), Some(10));
        let top = t.timeline().iter().max_by_key(|p| p.live).unwrap();
        assert_eq!(top.live, t.peak_bytes);
        assert_eq!(top.time, t.peak_time);
        assert_eq!(t.peak_bytes, 1_000_010);
    }
}
