//! The frames of the allocation stacks, memoised per process: an allocation-heavy program
//! allocates from a few hundred call sites, millions of times, and looking each return
//! address up in the process's mappings and interning its key cost the leak handler more
//! than everything else it does per allocation but the unwind (callgrind on a replayed
//! sqlite3 run: 8,800 instructions per allocation, 44 % of the handler's). An address means
//! the same frame until a mapping of its process changes, which the side band says, by the
//! one rule `aggregate::StackBook` forgets its own memo by (`aggregate::remaps`).

use rustc_hash::FxHashMap;

use crate::records::Record;
use crate::stacks::FrameId;

/// pid → (address, is return address) → frame.
#[derive(Debug, Default)]
pub struct FrameMemo {
    by_pid: FxHashMap<u32, FxHashMap<(u64, bool), FrameId>>,
    /// The return addresses of the stack [`FrameMemo::stack`] made last, root first, with
    /// their frames, and its process: the next stack of that process mostly shares its outer
    /// frames (an insert loop's allocations all run below the same `main`), and an address
    /// compared with the last stack's costs less than a lookup (5% of the reader's time on
    /// sqlite3's allocation stacks of about 40 frames).
    last: Vec<(u64, FrameId)>,
    last_pid: Option<u32>,
    /// Frames answered from the memo, and looked up.
    pub hits: u64,
    pub misses: u64,
}

impl FrameMemo {
    /// The frame of `addr` in `pid`, from the memo or made by `make` (and kept).
    pub fn frame(
        &mut self,
        pid: u32,
        addr: u64,
        ret: bool,
        make: impl FnOnce() -> FrameId,
    ) -> FrameId {
        let memo = self.by_pid.entry(pid).or_default();
        if let Some(&id) = memo.get(&(addr, ret)) {
            self.hits += 1;
            return id;
        }
        self.misses += 1;
        let id = make();
        memo.insert((addr, ret), id);
        id
    }

    /// The frames of the return addresses `root_first` in `pid`, appended to `out` root
    /// first: as [`FrameMemo::frame`] gives them, those the last stack shares from its
    /// root copied from it.
    pub fn stack(
        &mut self,
        pid: u32,
        root_first: &[u64],
        out: &mut Vec<FrameId>,
        mut make: impl FnMut(u64) -> FrameId,
    ) {
        if self.last_pid != Some(pid) {
            self.last.clear();
            self.last_pid = Some(pid);
        }
        let shared = self
            .last
            .iter()
            .zip(root_first)
            .take_while(|((last, _), addr)| last == *addr)
            .count();
        self.hits += shared as u64;
        self.last.truncate(shared);
        // Looked up leaf first, as the chain gives them: new frames get their ids in the
        // order they always had.
        for &addr in root_first[shared..].iter().rev() {
            let id = self.frame(pid, addr, true, || make(addr));
            self.last.push((addr, id));
        }
        self.last[shared..].reverse();
        out.extend(self.last.iter().map(|&(_, id)| id));
    }

    /// Forgets what a side-band record changes: the addresses of the process whose
    /// mappings it changes.
    pub fn side_band(&mut self, rec: &Record<'_>) {
        if let Some(pid) = crate::aggregate::remaps(rec) {
            self.by_pid.remove(&pid);
            if self.last_pid == Some(pid) {
                self.last.clear();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::SampleId;

    fn mmap2(pid: u32) -> Record<'static> {
        Record::Mmap2 {
            pid,
            tid: pid,
            addr: 0x1000,
            len: 0x1000,
            pgoff: 0,
            maj: 0,
            min: 0,
            ino: 0,
            ino_generation: 0,
            build_id: None,
            prot: 5,
            flags: 2,
            filename: b"/lib/other.so",
            id: SampleId::default(),
        }
    }

    #[test]
    fn a_frame_is_made_once_per_address_until_its_process_maps_something() {
        let mut memo = FrameMemo::default();
        let mut made = 0;
        let mut frame = |memo: &mut FrameMemo, pid, addr| {
            memo.frame(pid, addr, true, || {
                made += 1;
                made
            })
        };
        assert_eq!(frame(&mut memo, 7, 0x1234), 1);
        assert_eq!(frame(&mut memo, 7, 0x1234), 1);
        assert_eq!(frame(&mut memo, 8, 0x1234), 2, "another process's address");
        assert_eq!((memo.hits, memo.misses), (1, 2));
        // A new mapping in process 7 may put other code at the address: looked up again.
        memo.side_band(&mmap2(7));
        assert_eq!(frame(&mut memo, 7, 0x1234), 3);
        // Process 8's frames are still good.
        assert_eq!(frame(&mut memo, 8, 0x1234), 2);
        // A call site is not the frame of the instruction at the same address.
        assert_eq!(memo.frame(8, 0x1234, false, || 9), 9);
    }

    #[test]
    fn a_stack_takes_the_frames_it_shares_with_the_last_until_its_process_maps_something() {
        fn stack(memo: &mut FrameMemo, made: &mut Vec<u64>, pid: u32, addrs: &[u64]) -> Vec<u32> {
            let mut out = Vec::new();
            memo.stack(pid, addrs, &mut out, |a| {
                made.push(a);
                a as FrameId
            });
            out
        }
        let (mut memo, mut made) = (FrameMemo::default(), Vec::new());
        for addrs in [&[1, 2, 3][..], &[1, 2, 4, 5], &[1, 2], &[1, 2, 3]] {
            let ids: Vec<u64> = stack(&mut memo, &mut made, 7, addrs)
                .into_iter()
                .map(u64::from)
                .collect();
            assert_eq!(ids, addrs);
        }
        assert_eq!(made, [3, 2, 1, 5, 4], "each address made once, leaf first");
        // Another process's addresses are its own.
        assert_eq!(stack(&mut memo, &mut made, 8, &[1, 2]), [1, 2]);
        assert_eq!(made, [3, 2, 1, 5, 4, 2, 1]);
        // A new mapping in process 8: its addresses are made again, the shared ones too.
        memo.side_band(&mmap2(8));
        assert_eq!(stack(&mut memo, &mut made, 8, &[1, 2, 3]), [1, 2, 3]);
        assert_eq!(made, [3, 2, 1, 5, 4, 2, 1, 3, 2, 1]);
        assert!(stack(&mut memo, &mut made, 8, &[]).is_empty());
    }
}
