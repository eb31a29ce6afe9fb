//! Unwinding of the user stacks that perf copies (`PERF_SAMPLE_STACK_USER`), online, per
//! process: DWARF CFI through framehop, or frame pointers.
//!
//! The session feeds mapping and process events in (`handle_*`), then calls
//! [`Unwinders::unwind`] per sample. Expected failures are values: a truncated unwind keeps
//! the frames found so far and says why it stopped; unreadable binaries are counted in
//! [`UnwindStats`].

pub(crate) mod confirm;
mod elf;
mod entry;
#[cfg(test)]
mod fixture;
mod fp;
mod jit;
mod jitcfi;
mod live;
mod memo;
mod modules;
#[cfg(test)]
mod mutations;
mod process;
mod settle;
mod stats;
#[cfg(test)]
mod tests;

use std::ops::Range;
use std::path::Path;

use framehop::{CacheNative, MayAllocateDuringUnwind, UnwindRegsNative, Unwinder, UnwinderNative};
use rustc_hash::FxHashMap;

use elf::{ElfCache, SectionData};
pub use jitcfi::{MAX_CFI_BYTES as JIT_CFI_MAX_BYTES, MAX_FUNCTIONS as JIT_CFI_MAX_FUNCTIONS};
#[cfg(test)]
use live::RoundStats;
pub use live::{CodeSite, LiveMemory, ProcessMemory};
use live::{Recovery, RoundReads};
use process::{ProcModule, Process};
use settle::Cut;
pub use stats::{RejectCounts, StackNeed, TruncCounts, UnwindStats};

/// At most this many frames (the instruction pointer included) per stack, as perf's
/// `PERF_MAX_STACK_DEPTH` default.
pub const MAX_FRAMES: usize = 127;

/// How many distinct failing paths [`UnwindStats`] keeps.
pub const FAILED_PATHS_KEPT: usize = 8;

/// The user registers a sample carries (`PERF_SAMPLE_REGS_USER` with IP, SP and BP).
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserRegs {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnwindMode {
    /// DWARF CFI (`.eh_frame`, `.debug_frame`) through framehop; frame pointers where no
    /// module covers an address.
    Dwarf,
    /// The `rbp` chain only.
    FramePointer,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnwindOutcome {
    /// Reached the root frame (`_start`, a thread start, or a null frame pointer).
    Complete,
    /// Stopped early; the frames found so far are kept.
    Truncated(TruncReason),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TruncReason {
    /// No mappings are known for the process; only frame pointers were followed.
    NoProcess,
    /// The unwind needed bytes past the copied stack (raise the stack dump size).
    StackEnd,
    /// An address outside every module with unwind info was reached; frame pointers failed
    /// from there.
    NoUnwindInfo,
    /// A frame led below the stack pointer, to a misaligned frame pointer, or did not advance.
    BadFrame,
    /// [`MAX_FRAMES`] frames were collected.
    MaxDepth,
}

/// A mapping event (PERF_RECORD_MMAP2 / MMAP, or a line of `/proc/PID/maps`).
#[derive(Clone, Copy, Debug)]
pub struct MappingEvent<'a> {
    pub pid: u32,
    pub start: u64,
    pub len: u64,
    pub pgoff: u64,
    /// PROT_EXEC.
    pub exec: bool,
    pub path: &'a [u8],
    /// (major, minor, inode) from MMAP2.
    pub dev_ino: Option<(u32, u32, u64)>,
    /// The build-id from MMAP2 with PERF_RECORD_MISC_MMAP_BUILD_ID.
    pub build_id: Option<&'a [u8]>,
}

/// The module that contains an address, for build-id bookkeeping and symbolization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModuleRef<'a> {
    /// The path as the process mapped it (not prefixed by `/proc/PID/root`).
    pub path: &'a Path,
    /// From the mapping event if it carried one, else from the file.
    pub build_id: Option<&'a [u8]>,
    pub avma_range: Range<u64>,
    /// File offset of `avma_range.start`.
    pub pgoff: u64,
    /// `avma - svma` when the file was loaded; `svma = avma - bias` (wrapping).
    pub bias: Option<u64>,
}

impl ModuleRef<'_> {
    /// The file-stated address of `avma`, when the bias is known.
    pub fn svma(&self, avma: u64) -> Option<u64> {
        self.bias.map(|b| avma.wrapping_sub(b))
    }
}

type NativeUnwinder = UnwinderNative<SectionData, MayAllocateDuringUnwind>;
type FhCache = CacheNative<MayAllocateDuringUnwind>;

/// Per-process unwinders plus the state they share: loaded ELF files and framehop's rule cache.
pub struct Unwinders {
    mode: UnwindMode,
    procs: FxHashMap<u32, Process>,
    elf_cache: ElfCache,
    cache: CacheNative<MayAllocateDuringUnwind>,
    stats: UnwindStats,
    /// framehop module additions and removals since `cache` was created; see
    /// [`CACHE_RESET_CHANGES`].
    module_changes: u32,
    /// Where a stack cut at the copy's end is finished, while recording.
    live: Option<Box<dyn LiveMemory>>,
    /// What the live process showed this drain round, shared by its samples.
    round: RoundReads,
    /// The thread of the next stack unwound (see [`Self::set_thread`]).
    tid: Option<u32>,
    /// Call sites of recovered frames confirmed, while modules stay as they are.
    confirmed: settle::Confirmed,
    /// Of the last stack unwound: the index of its first frame found in the live process.
    last_recovered: Option<usize>,
    /// Of the last stack unwound: the copy size it needed (see [`StackNeed`]).
    last_need: Option<StackNeed>,
    /// Whether the last stack unwound went past its copy's end.
    last_past_copy: bool,
    /// Load a mapping's file when a sample of its process is first unwound, not when the
    /// mapping is met.
    lazy: bool,
    /// Walks of this drain round that later samples may stand on.
    memo: memo::WalkMemo,
}

/// framehop keys its rule cache by address and a global `u16` "modules generation" that
/// every module addition or removal bumps. After 65536 changes a stale rule could match
/// again, so the cache is replaced well before that.
const CACHE_RESET_CHANGES: u32 = 30_000;

/// The copied stack: `bytes` start at address `sp`.
pub(crate) struct StackCopy<'a> {
    sp: u64,
    bytes: &'a [u8],
    /// The end of the highest word read so far: how much of the copy the unwind used.
    used_to: std::cell::Cell<u64>,
}

impl<'a> StackCopy<'a> {
    pub(crate) fn new(sp: u64, bytes: &'a [u8]) -> StackCopy<'a> {
        StackCopy {
            sp,
            bytes,
            used_to: std::cell::Cell::new(sp),
        }
    }

    /// The native-endian word at `addr`, if all 8 bytes are inside the copy.
    pub(crate) fn read(&self, addr: u64) -> Option<u64> {
        let word = self.peek(addr)?;
        self.used_to.set(self.used_to.get().max(addr + 8));
        Some(word)
    }

    /// The word at `addr`, as [`Self::read`], without counting it as used.
    pub(crate) fn peek(&self, addr: u64) -> Option<u64> {
        let off = usize::try_from(addr.checked_sub(self.sp)?).ok()?;
        let word = self.bytes.get(off..off.checked_add(8)?)?;
        Some(u64::from_ne_bytes(word.try_into().ok()?))
    }

    /// The bytes of the copy the unwind read, from `sp` to the end of its highest word.
    fn used(&self) -> u64 {
        self.used_to.get() - self.sp
    }

    /// Counts the bytes up to `sp + used` as read (as a walk that read that much would).
    fn set_used(&self, used: u64) {
        self.used_to.set(self.used_to.get().max(self.sp + used));
    }

    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    fn end(&self) -> u64 {
        self.sp.saturating_add(self.bytes.len() as u64)
    }

    /// Why a read at `addr` failed: past the copy, or somewhere a frame should not point.
    pub(crate) fn miss_reason(&self, addr: u64) -> TruncReason {
        if addr >= self.sp && addr.saturating_add(8) > self.end() {
            TruncReason::StackEnd
        } else {
            TruncReason::BadFrame
        }
    }
}

impl Unwinders {
    pub fn new(mode: UnwindMode) -> Unwinders {
        Unwinders {
            mode,
            procs: FxHashMap::default(),
            elf_cache: ElfCache::default(),
            cache: CacheNative::new(),
            stats: UnwindStats::default(),
            module_changes: 0,
            live: None,
            round: RoundReads::default(),
            tid: None,
            confirmed: settle::Confirmed::default(),
            last_recovered: None,
            last_need: None,
            last_past_copy: false,
            lazy: false,
            memo: memo::WalkMemo::default(),
        }
    }

    /// Reads each mapping's file only when a sample of its process is first unwound: the
    /// recorder enables its events before the processes that exist are described, and a
    /// process that never has a sample never costs a file read.
    pub fn set_lazy(&mut self, lazy: bool) {
        self.lazy = lazy;
    }

    /// Finish stacks cut at the copy's end from the live process's memory (`Some`), or
    /// leave them truncated (`None`, the default: a recording read from a file).
    pub fn set_live(&mut self, memory: Option<Box<dyn LiveMemory>>) {
        self.live = memory;
    }

    /// A drain round begins: the stacks of its samples, all taken before now, may share what
    /// is read of the live process from now on (see `unwind::live::RoundReads`).
    pub fn begin_round(&mut self) {
        if self.live.is_some() {
            self.round.begin_round();
        }
    }

    /// How often the live process's pages and threads' states were found read already.
    #[cfg(test)]
    pub(crate) fn round_stats(&self) -> RoundStats {
        self.round.stats
    }

    /// The thread whose stack the next [`Self::unwind_copy`] unwinds: where the live process
    /// finishes it, the thread's stack pointer now tells whether it left the sampled frames.
    pub fn set_thread(&mut self, tid: u32) {
        self.tid = Some(tid);
    }

    /// The index in the last unwound stack of the first frame read from the live process,
    /// when [`Self::set_live`] finished it.
    pub fn last_recovered(&self) -> Option<usize> {
        self.last_recovered
    }

    /// Whether the last stack unwound went past the end of its copy (and so, while
    /// recording, was finished from the live process, or tried to be).
    pub fn last_past_copy(&self) -> bool {
        self.last_past_copy
    }

    /// How much stack copy the last stack unwound needed (`None` in frame-pointer mode).
    pub fn last_need(&self) -> Option<StackNeed> {
        self.last_need
    }

    /// Samples whose walk a kept walk stood for (see `unwind::memo`).
    pub fn walks_reused(&self) -> u64 {
        self.memo.hits
    }

    pub fn mode(&self) -> UnwindMode {
        self.mode
    }

    /// Unwinds one sample. `stack` holds the bytes copied from `regs.sp` (already cut to
    /// `dyn_size`). `out` is cleared, then gets the instruction pointer and the return
    /// addresses (raw, not minus 1), at most [`MAX_FRAMES`].
    pub fn unwind(
        &mut self,
        pid: u32,
        regs: UserRegs,
        stack: &[u8],
        out: &mut Vec<u64>,
    ) -> UnwindOutcome {
        self.unwind_copy(pid, regs, stack, stack.len() as u64, out)
    }

    /// [`Self::unwind`] of a copy for which `requested` bytes were asked (`stack` is
    /// shorter when the kernel stopped early).
    pub fn unwind_copy(
        &mut self,
        pid: u32,
        regs: UserRegs,
        stack: &[u8],
        requested: u64,
        out: &mut Vec<u64>,
    ) -> UnwindOutcome {
        out.clear();
        self.last_recovered = None;
        self.last_need = None;
        self.last_past_copy = false;
        self.load_pending(pid);
        if self.procs.get(&pid).is_some_and(|p| p.jit.unread()) {
            self.read_jit_dump(pid);
        }
        let copy = StackCopy::new(regs.sp, stack);
        let (mut outcome, mut cut) = self.walk(pid, regs, &copy, out);
        if matches!(outcome, UnwindOutcome::Truncated(_)) && self.jit_dump_grew(pid, out) {
            (outcome, cut) = self.walk(pid, regs, &copy, out);
        }
        if let Some(c) = cut.or(match outcome {
            UnwindOutcome::Truncated(TruncReason::StackEnd) => Some(Cut {
                needed: copy.end() + 8 - regs.sp,
                recovered: None,
                unreadable: false,
                rejected: None,
                confirmed: 0,
                indirect: 0,
            }),
            _ => None,
        }) {
            let short = (stack.len() as u64) < requested;
            self.count_cut(&c, out.len(), short);
            self.last_past_copy = true;
            // A short copy ended at a stack page the thread never touched: no copy size
            // holds more, so only what it read counts.
            self.last_need = Some(StackNeed {
                bytes: if short { copy.used() } else { c.needed },
                cut: !short,
            });
        } else if self.mode == UnwindMode::Dwarf {
            self.last_need = Some(StackNeed {
                bytes: copy.used(),
                cut: false,
            });
        }
        self.stats.samples += 1;
        self.stats.frames += out.len() as u64;
        match outcome {
            UnwindOutcome::Complete => self.stats.complete += 1,
            UnwindOutcome::Truncated(r) => self.stats.truncated.count(r),
        }
        outcome
    }

    /// One walk of `pid`'s stack: the outcome, and how the copy's end cut it if it did.
    fn walk(
        &mut self,
        pid: u32,
        regs: UserRegs,
        copy: &StackCopy<'_>,
        out: &mut Vec<u64>,
    ) -> (UnwindOutcome, Option<Cut>) {
        out.clear();
        let mut cut = None;
        let outcome = match (self.procs.get(&pid), self.mode) {
            (None, _) => {
                fp::walk(regs, copy, out);
                UnwindOutcome::Truncated(TruncReason::NoProcess)
            }
            (Some(_), UnwindMode::FramePointer) => fp::walk(regs, copy, out),
            (Some(p), UnwindMode::Dwarf) => match self.live.as_deref_mut() {
                None => dwarf_walk(p, &mut self.cache, regs, copy, None, None, out).0,
                Some(memory) => {
                    let task = (pid, self.tid.take().unwrap_or(pid));
                    let rec = Recovery::new(task, regs.sp, copy.end(), memory, &mut self.round);
                    let key = memo::Key::new(pid, regs, copy);
                    let outcome = match self.memo.replay(key, copy, &rec, out) {
                        Some(outcome) => outcome,
                        None => {
                            let mut words = self.memo.words();
                            let (outcome, plain) = dwarf_walk(
                                p,
                                &mut self.cache,
                                regs,
                                copy,
                                Some(&rec),
                                Some(&mut words),
                                out,
                            );
                            if plain {
                                self.memo.keep(key, words, (out, outcome), copy, &rec);
                            } else {
                                self.memo.discard(words);
                            }
                            outcome
                        }
                    };
                    let checks = settle::Checks {
                        p,
                        cache: &mut self.cache,
                        confirmed: &mut self.confirmed,
                        pid,
                        rec: &rec,
                        copy,
                    };
                    let r = checks.settle(outcome, out);
                    cut = r.1;
                    r.0
                }
            },
        };
        (outcome, cut)
    }

    /// Counts a stack cut at the copy's end; `short` when the copy was shorter than asked
    /// (its size is no measure of the copy size needed).
    fn count_cut(&mut self, c: &Cut, frames: usize, short: bool) {
        let st = &mut self.stats;
        st.cut_at_copy_end += 1;
        if short {
            st.cut_short_copy += 1;
        } else {
            st.copy_needed_max = st.copy_needed_max.max(c.needed);
            if c.recovered.is_none() {
                st.cut_unmeasured += 1;
                st.cut_unmeasured_need = st.cut_unmeasured_need.max(c.needed);
            }
        }
        match c.recovered {
            Some(first) => {
                st.recovered += 1;
                st.recovered_frames += frames.saturating_sub(first) as u64;
                st.recovered_confirmed += c.confirmed;
                st.recovered_indirect += c.indirect;
                self.last_recovered = Some(first);
            }
            None if c.unreadable => st.recovery_unreadable += 1,
            None => {
                st.recovery_rejected += 1;
                if let Some(r) = c.rejected {
                    st.rejected.count(r);
                }
            }
        }
    }

    pub fn stats(&self) -> UnwindStats {
        self.stats.clone()
    }
}

/// framehop's walk of one stack. `words`, when given, gets every word read from the copy
/// (address, value). Also returns whether the walk ended without an error framehop's own
/// steps did not explain (so no stub step was tried), the kind [`memo::WalkMemo`] may keep.
fn dwarf_walk(
    p: &Process,
    cache: &mut CacheNative<MayAllocateDuringUnwind>,
    regs: UserRegs,
    stack: &StackCopy<'_>,
    live: Option<&Recovery<'_>>,
    mut words: Option<&mut Vec<(u64, u64)>>,
    out: &mut Vec<u64>,
) -> (UnwindOutcome, bool) {
    let end = stack.end();
    let mut read_stack = |addr: u64| match (stack.read(addr), live) {
        (Some(w), l) => {
            if let Some(l) = l {
                l.note_copy_read(addr);
            }
            if let Some(words) = words.as_deref_mut() {
                words.push((addr, w));
            }
            Ok(w)
        }
        (None, Some(l)) if addr >= end => l.read(addr).ok_or(()),
        (None, _) => Err(()),
    };
    let fh_regs = UnwindRegsNative::new(regs.ip, regs.sp, regs.bp);
    let mut frames = p
        .unwinder
        .iter_frames(regs.ip, fh_regs, cache, &mut read_stack);
    loop {
        match frames.next() {
            Ok(Some(f)) => {
                if out.len() >= MAX_FRAMES {
                    return (UnwindOutcome::Truncated(TruncReason::MaxDepth), true);
                }
                out.push(f.address());
                if let Some(l) = live {
                    l.frame_done(out.len());
                }
            }
            Ok(None) => return (UnwindOutcome::Complete, true),
            Err(_) if in_entry_function(p, out) => return (UnwindOutcome::Complete, true),
            Err(e) => {
                // The stub step reads the copy apart from `words`: such a walk is not kept.
                let walk = jit::Walk { p, cache, stack };
                if let Some(outcome) = jit::walk_past_stubs(walk, regs, out) {
                    return (outcome, false);
                }
                return (UnwindOutcome::Truncated(classify(p, out, stack, e)), false);
            }
        }
    }
}

/// How far into a file's entry point function (`_start`) its call to the C start-up code may
/// return: glibc's crt1 calls `__libc_start_main` 0x1b bytes in, the dynamic loader's
/// `_start` calls `_dl_start` 3 bytes in, musl's `_start` calls `_start_c` about 0x10 in.
pub(super) const ENTRY_CALL_WINDOW: u64 = 64;

/// Whether the last frame found is the entry point function of its file: the root of every
/// stack, which nothing called. Stripped files often have no CFI for it (the dynamic loader
/// has none), and frame pointers lead nowhere from there (the kernel starts a process with
/// rbp 0), so the step past it fails; that is the end of the stack, not a truncation.
fn in_entry_function(p: &Process, out: &[u64]) -> bool {
    let [.., ra] = out else {
        return false;
    };
    let addr = if out.len() == 1 {
        *ra
    } else {
        ra.wrapping_sub(1)
    };
    p.module_index(addr)
        .and_then(|i| p.modules[i].entry_avma)
        .is_some_and(|entry| addr >= entry && addr - entry < ENTRY_CALL_WINDOW)
}

/// Why framehop stopped. framehop falls back to frame pointers for addresses outside every
/// module with CFI, so a failure there is charged to the missing unwind info.
fn classify(p: &Process, out: &[u64], stack: &StackCopy<'_>, e: framehop::Error) -> TruncReason {
    let last = match out {
        [ip] => *ip,
        [.., ra] => ra.wrapping_sub(1),
        [] => return TruncReason::BadFrame,
    };
    let covered = p.has_cfi_at(last);
    match e {
        _ if !covered => TruncReason::NoUnwindInfo,
        framehop::Error::CouldNotReadStack(addr) => stack.miss_reason(addr),
        _ => TruncReason::BadFrame,
    }
}
