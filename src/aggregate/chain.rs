//! Turning a sample's callchain into an interned stack of frame keys: the one walk every
//! stack-keeping handler shares (report's aggregator, the tools).

use perf_event_open_sys::bindings as b;
use rustc_hash::FxHashMap;

use super::jit::JitTimes;
use super::{FpCheck, FrameKey};
use crate::abi::{
    PERF_CONTEXT_GUEST, PERF_CONTEXT_GUEST_KERNEL, PERF_CONTEXT_GUEST_USER, PERF_CONTEXT_HV,
    PERF_CONTEXT_KERNEL, PERF_CONTEXT_MAX, PERF_CONTEXT_USER,
};
use crate::config::report::StackSpace;
use crate::maps::ProcessMaps;
use crate::records::Record;
use crate::session::{Chain, SampleCtx};
use crate::stacks::{CodeAddr, FrameId, FrameTable, StackId, StackTable};

/// The frame and stack tables, and what speeds up filling them.
pub struct StackBook {
    pub frames: FrameTable<FrameKey>,
    pub stacks: StackTable,
    /// Which frames to keep.
    pub space: StackSpace,
    /// Whether any kernel frame was kept.
    pub kernel_frames: bool,
    /// Put a [`FrameKey::Recovered`] mark in each stack whose user frames were partly read
    /// from the live process, before the first such frame (the text report and `memperf
    /// script` show them as recovered; the other outputs want names only).
    pub mark_recovered: bool,
    /// Names JIT frames by the load in effect at the sample's time, where a jitdump placed
    /// several functions at one address (`report` of a recording whose clock allows it).
    pub jit: Option<JitTimes>,
    /// Per event, whether the user frames of its recorded callchains are the kernel's
    /// frame-pointer walk (a file's: `PerfDataFile::walked_by_fp`); empty: every recorded
    /// chain's are (live, where memperf's own unwinds arrive as built chains).
    pub fp_events: Vec<bool>,
    /// Stacks of the kernel's frame-pointer walk, and those cut at a return address that
    /// cannot have been one (outside the process's code, or after no call: [`FpCheck`]):
    /// the frames after it never were.
    pub fp_walked: u64,
    pub fp_cut: u64,
    fp_check: FpCheck,
    /// The time of the sample being walked.
    time: Option<u64>,
    leaf_first: Vec<FrameId>,
    /// Where the user frames begin in `leaf_first`.
    user_start: Option<usize>,
    /// pid → (address, is return address) → frame, valid until a mapping of that process
    /// changes: a system-wide recording's processes map something every few dozen samples,
    /// and each forgot every process's frames.
    memo: FxHashMap<u32, FxHashMap<(u64, bool), FrameId>>,
    /// The memo of the process whose sample is being walked, taken out of `memo`.
    pid_memo: FxHashMap<(u64, bool), FrameId>,
}

/// The process whose addresses a side-band record may give another meaning: one that maps
/// something, execs, is new, or exits. Memos of what an address means forget that
/// process's by this rule (`StackBook`'s, `allocs::frames`').
pub fn remaps(rec: &Record<'_>) -> Option<u32> {
    match *rec {
        Record::Mmap { pid, .. } | Record::Mmap2 { pid, .. } => Some(pid),
        Record::Comm {
            pid, exec: true, ..
        } => Some(pid),
        Record::Fork { pid, ppid, .. } if pid != ppid => Some(pid),
        Record::Exit { pid, tid, .. } if pid == tid => Some(pid),
        _ => None,
    }
}

impl StackBook {
    pub fn new(space: StackSpace) -> StackBook {
        StackBook {
            frames: FrameTable::default(),
            stacks: StackTable::default(),
            space,
            kernel_frames: false,
            mark_recovered: false,
            jit: None,
            fp_events: Vec::new(),
            fp_walked: 0,
            fp_cut: 0,
            fp_check: FpCheck::default(),
            time: None,
            leaf_first: Vec::with_capacity(128),
            user_start: None,
            memo: FxHashMap::default(),
            pid_memo: FxHashMap::default(),
        }
    }

    /// Forgets what a side-band record changes: what addresses meant in the process whose
    /// mappings it changes (an mmap, an exec, a new process, its exit), and, when a jitdump
    /// is mapped, which dump each process maps.
    pub fn side_band(&mut self, rec: &Record<'_>) {
        if let Record::Mmap { filename, .. } | Record::Mmap2 { filename, .. } = *rec
            && crate::jitdump::dump_pid(filename).is_some()
        {
            self.jitdumps_changed();
        }
        if let Some(pid) = remaps(rec) {
            self.mappings_changed(pid);
        }
        self.fp_check.side_band(rec);
    }

    /// Forgets what addresses meant in process `pid`.
    fn mappings_changed(&mut self, pid: u32) {
        self.memo.remove(&pid);
        if let Some(jit) = &mut self.jit {
            jit.mappings_changed(Some(pid));
        }
    }

    /// Forgets which jitdump every process maps: a jitdump file was mapped (perhaps by
    /// another process than the one it is of).
    fn jitdumps_changed(&mut self) {
        if let Some(jit) = &mut self.jit {
            jit.mappings_changed(None);
        }
    }

    /// The sample's stack, interned: its callchain (with the user frames the session
    /// unwound), or its instruction pointer alone; `None` when it has no frame.
    pub fn stack_of(&mut self, c: &SampleCtx<'_>, maps: &ProcessMaps, pid: u32) -> Option<StackId> {
        self.leaf_first.clear();
        self.user_start = None;
        self.time = c.sample.time;
        self.pid_memo = self.memo.remove(&pid).unwrap_or_default();
        // Each kind of chain walked by its own copy of the loop: no branch per address.
        match c.callchain() {
            Some(Chain::Recorded(chain)) => {
                let by_fp =
                    (self.fp_events.get(c.ev).copied()).unwrap_or(self.fp_events.is_empty());
                self.walk_chain(chain, maps, pid, by_fp);
            }
            Some(Chain::Built(chain)) => self.walk_chain(chain.copied(), maps, pid, false),
            None => {}
        }
        if self.leaf_first.is_empty()
            && let Some(ip) = c.sample.ip
        {
            let cpumode = u32::from(c.misc) & b::PERF_RECORD_MISC_CPUMODE_MASK;
            if cpumode == b::PERF_RECORD_MISC_KERNEL {
                self.kernel_frame(ip, false);
            } else if cpumode == b::PERF_RECORD_MISC_USER {
                self.user_frame(maps, pid, ip, false);
            }
        }
        if !self.pid_memo.is_empty() {
            self.memo.insert(pid, std::mem::take(&mut self.pid_memo));
        }
        if self.mark_recovered
            && let (Some(first), Some(start)) = (c.recovered, self.user_start)
            && let Some(at) = start.checked_add(first as usize)
            && at < self.leaf_first.len()
        {
            let mark = self.frames.intern(&FrameKey::Recovered);
            self.leaf_first.insert(at, mark);
        }
        self.stacks.intern(self.leaf_first.iter().rev().copied())
    }

    /// Interns a callchain's frames, leaf first, by the context each marker switches to.
    /// `by_fp`: its user frames are the kernel's frame-pointer walk, cut at the first value
    /// that cannot have been a return address ([`FpCheck`]).
    fn walk_chain(
        &mut self,
        chain: impl Iterator<Item = u64>,
        maps: &ProcessMaps,
        pid: u32,
        by_fp: bool,
    ) {
        let mut context = None;
        let mut first_in_context = true;
        let (mut walked, mut cut) = (false, false);
        for addr in chain {
            if addr >= PERF_CONTEXT_MAX {
                context = Some(addr);
                first_in_context = true;
                continue;
            }
            let ret = !first_in_context;
            first_in_context = false;
            match context {
                Some(PERF_CONTEXT_KERNEL) => self.kernel_frame(addr, ret),
                Some(PERF_CONTEXT_USER) if by_fp => {
                    walked = self.space != StackSpace::Kernel;
                    cut = cut || (walked && ret && !self.fp_check.may_return_to(maps, pid, addr));
                    if !cut {
                        self.user_frame(maps, pid, addr, ret);
                    }
                }
                Some(PERF_CONTEXT_USER) => self.user_frame(maps, pid, addr, ret),
                Some(
                    PERF_CONTEXT_HV
                    | PERF_CONTEXT_GUEST
                    | PERF_CONTEXT_GUEST_KERNEL
                    | PERF_CONTEXT_GUEST_USER,
                ) => {}
                _ => {
                    // No marker: decide by address, as perf does for old files.
                    if addr >= 0xffff_8000_0000_0000 {
                        self.kernel_frame(addr, ret);
                    } else {
                        self.user_frame(maps, pid, addr, ret);
                    }
                }
            }
        }
        self.fp_walked += u64::from(walked);
        self.fp_cut += u64::from(cut);
    }

    fn kernel_frame(&mut self, addr: u64, ret: bool) {
        if self.space == StackSpace::User {
            return;
        }
        self.kernel_frames = true;
        let id = self.frames.intern(&FrameKey::Kernel {
            addr: CodeAddr::new(addr, ret),
        });
        self.leaf_first.push(id);
    }

    fn user_frame(&mut self, maps: &ProcessMaps, pid: u32, addr: u64, ret: bool) {
        if self.space == StackSpace::Kernel {
            return;
        }
        if self.user_start.is_none() {
            self.user_start = Some(self.leaf_first.len());
        }
        if let Some(&id) = self.pid_memo.get(&(addr, ret)) {
            self.leaf_first.push(id);
            return;
        }
        let mut key = FrameKey::user(maps, pid, addr, ret);
        if let (FrameKey::Jit { load, .. }, Some(jit), Some(t)) =
            (&mut key, self.jit.as_mut(), self.time)
        {
            *load = jit.load(maps, pid, addr, t);
        }
        let id = self.frames.intern(&key);
        // A frame named by the sample's time is looked up again for the next sample.
        if !matches!(key, FrameKey::Jit { load: Some(_), .. }) {
            self.pid_memo.insert((addr, ret), id);
        }
        self.leaf_first.push(id);
    }
}
