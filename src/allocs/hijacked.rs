//! The return addresses a uretprobe took over. Once a probed function's entry handlers have
//! run, the kernel replaces the return address on the stack with its trampoline's (the
//! `[uprobes]` page) until the function returns. A stack copied inside the function (a page
//! fault in malloc, the allocator's own mmap, realloc's malloc) holds the trampoline where
//! the caller's return address was: the unwind stopped there, or went on by a frame-pointer
//! guess. The entry's own copy was made before the takeover: its first word is the real
//! return address, at the entry's stack pointer.
//!
//! Kept per thread as (slot address, return address, entry time). An entry drops the slots
//! at or below its stack pointer (those frames have returned; one at the same address from
//! the same probe hit, a stack twin's, stays); an exit drops the thread's; a loss drops them
//! all, since a missed entry could have reused a slot with a later call's trampoline. The
//! session puts the return address back only where the copy holds no address of a known
//! mapping at that slot (see `session::Session::put_back_returns`).

use rustc_hash::FxHashMap;

/// Slots of one thread: (address, return address, time of the entry that kept it).
type Slots = Vec<(u64, u64, u64)>;

#[derive(Default)]
pub(crate) struct HijackedReturns {
    by_tid: FxHashMap<u32, Slots>,
}

impl HijackedReturns {
    /// An entry of a function with a return probe, at `time`, with its stack pointer (when
    /// sampled) and the stack copied there (when one was: a sampled run copies some).
    pub fn entered(&mut self, tid: u32, time: u64, sp: Option<u64>, stack: Option<&[u8]>) {
        let Some(sp) = sp else {
            // Which slots are still live cannot be told.
            self.by_tid.remove(&tid);
            return;
        };
        let ret = stack
            .and_then(|s| s.get(..8))
            .and_then(|w| <[u8; 8]>::try_from(w).ok())
            .map(u64::from_ne_bytes);
        let slots = self.by_tid.entry(tid).or_default();
        slots.retain(|&(slot, _, t)| slot > sp || (slot == sp && t == time && ret.is_none()));
        if let Some(ret) = ret {
            slots.push((sp, ret, time));
        }
        if slots.is_empty() {
            self.by_tid.remove(&tid);
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
            out.extend(slots.iter().map(|&(slot, ret, _)| (slot, ret)));
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
        let ret = 0x5555_1234u64.to_ne_bytes();
        // realloc at 0x1000, then malloc inside it at 0xf00.
        h.entered(7, 10, Some(0x1000), Some(&ret));
        h.entered(7, 11, Some(0xf00), Some(&0x7777u64.to_ne_bytes()));
        assert_eq!(slots(&h, 7), [(0x1000, 0x5555_1234), (0xf00, 0x7777)]);
        // Both returned; a new call at realloc's depth drops both, without a copy too.
        h.entered(7, 20, Some(0x1000), None);
        assert!(slots(&h, 7).is_empty());
        // A stack twin of one probe hit (same time, same stack pointer): whichever comes
        // first, the slot stays.
        h.entered(7, 30, Some(0x1000), Some(&ret));
        h.entered(7, 30, Some(0x1000), None);
        assert_eq!(slots(&h, 7), [(0x1000, 0x5555_1234)]);
        h.entered(8, 31, Some(0x2000), None);
        h.entered(8, 31, Some(0x2000), Some(&ret));
        assert_eq!(slots(&h, 8), [(0x2000, 0x5555_1234)]);
        // Without a stack pointer, nothing of the thread's is known.
        h.entered(8, 40, None, None);
        assert!(slots(&h, 8).is_empty());
        h.exited(7);
        assert!(slots(&h, 7).is_empty());
        h.entered(9, 50, Some(0x3000), Some(&ret));
        h.lost();
        assert!(slots(&h, 9).is_empty());
    }
}
