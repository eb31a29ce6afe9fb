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

    /// Forgets what a side-band record changes: the addresses of the process whose
    /// mappings it changes.
    pub fn side_band(&mut self, rec: &Record<'_>) {
        if let Some(pid) = crate::aggregate::remaps(rec) {
            self.by_pid.remove(&pid);
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
}
