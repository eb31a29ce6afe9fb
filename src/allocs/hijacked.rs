//! The return addresses a uretprobe took over. Once a probed function's entry handlers have
//! run, the kernel replaces the return address on the stack with its trampoline's (the
//! `[uprobes]` page) until the function returns. A stack copied inside the function (a page
//! fault in malloc, the allocator's own mmap, realloc's malloc) holds the trampoline where
//! the caller's return address was: the unwind stopped there, or went on by a frame-pointer
//! guess. The entry's own copy was made before the takeover: its first word is the real
//! return address, at the entry's stack pointer.
//!
//! Kept per thread as (slot address, return address). A return drops its slot and any
//! deeper (the return probe's stack pointer is just above the slot); an entry drops the
//! slots at or below its stack pointer (frames that have returned, their return missed),
//! but a stack twin of the same hit, or a tail call (its copy already holds the
//! trampoline), keeps the slot at its own; an exit or an exec drops the thread's; a loss
//! drops them all, since a missed entry could have reused a slot with a later call's
//! trampoline. The session puts a return address back only where the copy holds, at that
//! slot, a page-aligned value in no mapping the process is known to have but `[uprobes]`
//! (`session::callchain::put_back_returns`).

use rustc_hash::FxHashMap;

/// Slots of one thread: (address, return address).
type Slots = Vec<(u64, u64)>;

#[derive(Default)]
pub(crate) struct HijackedReturns {
    by_tid: FxHashMap<u32, Slots>,
}

impl HijackedReturns {
    /// An entry of a function with a return probe, with its stack pointer (when sampled)
    /// and the return address its copy holds at it (when it was copied: a sampled run copies
    /// some). `keep_at_sp`: a slot already kept at this stack pointer stays (the other twin
    /// of one probe hit, or a tail call whose copy holds the trampoline already).
    pub fn entered(&mut self, tid: u32, sp: Option<u64>, ret: Option<u64>, keep_at_sp: bool) {
        let Some(sp) = sp else {
            // Which slots are still live cannot be told.
            self.by_tid.remove(&tid);
            return;
        };
        let slots = self.by_tid.entry(tid).or_default();
        // Slots below the stack pointer belong to frames that have returned.
        slots.retain(|&(slot, _)| slot > sp || (slot == sp && keep_at_sp));
        if let Some(ret) = ret
            && !slots.iter().any(|&(slot, _)| slot == sp)
        {
            slots.push((sp, ret));
        }
        if slots.is_empty() {
            self.by_tid.remove(&tid);
        }
    }

    /// A function with a return probe returned on `tid`, the stack pointer `sp` after it:
    /// its slot (just below) and any deeper are gone.
    pub fn returned(&mut self, tid: u32, sp: u64) {
        if let Some(slots) = self.by_tid.get_mut(&tid) {
            slots.retain(|&(slot, _)| slot >= sp);
            if slots.is_empty() {
                self.by_tid.remove(&tid);
            }
        }
    }

    pub fn exited(&mut self, tid: u32) {
        self.by_tid.remove(&tid);
    }

    /// Records were lost: a missed entry may have reused any slot.
    pub fn lost(&mut self) {
        self.by_tid.clear();
    }

    /// The live slots of `tid` as (address, return address), added to `out`.
    pub fn of(&self, tid: u32, out: &mut Vec<(u64, u64)>) {
        if let Some(slots) = self.by_tid.get(&tid) {
            out.extend_from_slice(slots);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(h: &HijackedReturns, tid: u32) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        h.of(tid, &mut out);
        out
    }

    #[test]
    fn a_slot_lives_while_its_frame_can() {
        let mut h = HijackedReturns::default();
        // realloc at 0x1000, then malloc inside it at 0xf00.
        h.entered(7, Some(0x1000), Some(0x5555_1234), false);
        h.entered(7, Some(0xf00), Some(0x7777), false);
        assert_eq!(slots(&h, 7), [(0x1000, 0x5555_1234), (0xf00, 0x7777)]);
        // malloc returns (its stack pointer is then just above its slot): realloc's stays.
        h.returned(7, 0xf08);
        assert_eq!(slots(&h, 7), [(0x1000, 0x5555_1234)]);
        h.returned(7, 0x1008);
        assert!(slots(&h, 7).is_empty());
        // A return missed: a new call at the same depth drops the old slot, without a copy
        // too.
        h.entered(7, Some(0x1000), Some(0x5555_1234), false);
        h.entered(7, Some(0x1000), None, false);
        assert!(slots(&h, 7).is_empty());
        // The twins of one probe hit, in either order, or a tail call whose copy holds the
        // trampoline: the slot stays as the first copy gave it.
        h.entered(7, Some(0x1000), Some(0x5555_1234), false);
        h.entered(7, Some(0x1000), None, true);
        assert_eq!(slots(&h, 7), [(0x1000, 0x5555_1234)]);
        h.entered(8, Some(0x2000), None, false);
        h.entered(8, Some(0x2000), Some(0x5555_1234), true);
        assert_eq!(slots(&h, 8), [(0x2000, 0x5555_1234)]);
        // Without a stack pointer, nothing of the thread's is known.
        h.entered(8, None, None, false);
        assert!(slots(&h, 8).is_empty());
        h.exited(7);
        assert!(slots(&h, 7).is_empty());
        h.entered(9, Some(0x3000), Some(0x5555_1234), false);
        h.lost();
        assert!(slots(&h, 9).is_empty());
    }
}
