//! What the unwinders count: truncated stacks by reason, the totals the summaries print,
//! and how much of a stack copy each unwind needed.

use std::fmt;

use std::path::PathBuf;

use super::TruncReason;

/// Truncated stacks by reason.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TruncCounts {
    pub no_process: u64,
    pub stack_end: u64,
    pub no_unwind_info: u64,
    pub bad_frame: u64,
    pub max_depth: u64,
}

impl TruncCounts {
    pub fn total(&self) -> u64 {
        self.no_process + self.stack_end + self.no_unwind_info + self.bad_frame + self.max_depth
    }

    /// The counts by name, as stored in a recording's memperf feature section.
    pub fn named(&self) -> [(&'static str, u64); 5] {
        [
            ("no_process", self.no_process),
            ("stack_end", self.stack_end),
            ("no_unwind_info", self.no_unwind_info),
            ("bad_frame", self.bad_frame),
            ("max_depth", self.max_depth),
        ]
    }

    /// The inverse of [`Self::named`]; missing names count 0.
    pub fn from_named(get: impl Fn(&str) -> Option<u64>) -> TruncCounts {
        let g = |n| get(n).unwrap_or(0);
        TruncCounts {
            no_process: g("no_process"),
            stack_end: g("stack_end"),
            no_unwind_info: g("no_unwind_info"),
            bad_frame: g("bad_frame"),
            max_depth: g("max_depth"),
        }
    }

    pub(super) fn count(&mut self, r: TruncReason) {
        let c = match r {
            TruncReason::NoProcess => &mut self.no_process,
            TruncReason::StackEnd => &mut self.stack_end,
            TruncReason::NoUnwindInfo => &mut self.no_unwind_info,
            TruncReason::BadFrame => &mut self.bad_frame,
            TruncReason::MaxDepth => &mut self.max_depth,
        };
        *c += 1;
    }
}

/// `3 stack end, 1 no unwind info` — only the nonzero reasons; `none` when all are zero.
impl fmt::Display for TruncCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts = [
            (self.no_process, "unknown process"),
            (self.stack_end, "stack end"),
            (self.no_unwind_info, "no unwind info"),
            (self.bad_frame, "bad frame"),
            (self.max_depth, "max depth"),
        ];
        let mut first = true;
        for (n, what) in parts.into_iter().filter(|p| p.0 > 0) {
            write!(f, "{}{n} {what}", if first { "" } else { ", " })?;
            first = false;
        }
        if first {
            f.write_str("none")?;
        }
        Ok(())
    }
}

/// What happened so far; print `truncated.total()` of `samples` with `truncated`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnwindStats {
    pub samples: u64,
    pub complete: u64,
    pub truncated: TruncCounts,
    /// Frames produced, the instruction pointer included.
    pub frames: u64,
    /// framehop modules added (one per executable mapping of a loaded file).
    pub modules_loaded: u64,
    /// Executable mappings whose file was missing, unreadable or not an ELF file.
    pub elf_load_failures: u64,
    /// The first [`FAILED_PATHS_KEPT`] distinct paths behind `elf_load_failures`.
    pub elf_load_failure_paths: Vec<PathBuf>,
    /// Files whose build-id differs from the one in the mapping event (not used).
    pub build_id_mismatches: u64,
    /// Loaded files without `.eh_frame` or `.debug_frame`.
    pub modules_without_cfi: u64,
    /// Executable pseudo mappings: `[vdso]`, `//anon`, `anon_inode:*`, `/memfd:*`, ...
    pub skipped_pseudo: u64,
    /// Executable mappings of deleted files.
    pub skipped_deleted: u64,
    /// Mapping events without PROT_EXEC (ignored).
    pub non_exec_ignored: u64,
    pub elf_cache_hits: u64,
    pub elf_cache_misses: u64,
    /// Files given up after [`crate::mapped::READ_TIMEOUT`] (a hung file system).
    pub elf_read_timeouts: u64,
    /// The unwind data the ELF cache holds, and the files it evicted (least recently used,
    /// mapped by no live process) to stay within its budget.
    pub elf_cache_bytes: u64,
    pub elf_cache_evictions: u64,
    /// Stacks whose unwind went past the copy's end (counted in `truncated.stack_end`
    /// unless they were recovered).
    pub cut_at_copy_end: u64,
    /// Of those, stacks whose copy was shorter than asked: the kernel stopped at a stack
    /// page the thread never touched, which no copy size changes.
    pub cut_short_copy: u64,
    /// Of those, stacks finished from the live process ([`Unwinders::set_live`]) and the
    /// frames found there; and the attempts given up: the memory could not be read (the
    /// thread or process was gone) or a recovered frame failed validation.
    pub recovered: u64,
    pub recovered_frames: u64,
    pub recovery_unreadable: u64,
    pub recovery_rejected: u64,
    /// `recovery_rejected` by the check that rejected the stack.
    pub rejected: RejectCounts,
    /// Of `recovered_frames`, those whose call was confirmed to name the callee's function,
    /// and those kept on an indirect call that names no target (see `unwind::confirm`).
    pub recovered_confirmed: u64,
    pub recovered_indirect: u64,
    /// The largest copy size a stack cut at the copy's end needed (of the copies as long as
    /// asked): exact for the recovered ones, at least this for the others; 0 when none was.
    pub copy_needed_max: u64,
    /// Of the stacks cut at the end of a copy as long as asked, those the live process did
    /// not finish (the thread had exited or moved on): how much copy they needed is not
    /// known, only that it was at least `cut_unmeasured_need` (the most of them).
    pub cut_unmeasured: u64,
    pub cut_unmeasured_need: u64,
    /// JIT functions given the unwind info of their process's jitdump
    /// (`JIT_CODE_UNWINDING_INFO`) and its bytes, and those left out (past
    /// [`JIT_CFI_MAX_BYTES`] or [`JIT_CFI_MAX_FUNCTIONS`] per process, or over a file's CFI).
    pub jit_cfi_functions: u64,
    pub jit_cfi_bytes: u64,
    pub jit_cfi_left_out: u64,
    /// Reads of jitdump files, the dumps that could not be read to their end (damage, an
    /// unreadable file), and the first such problem.
    pub jit_dump_reads: u64,
    pub jit_dump_problems: u64,
    pub jit_dump_first_problem: Option<String>,
}

impl UnwindStats {
    /// The stack copy size that would have held every stack cut at the copy's end (of those
    /// copied as long as asked): the deepest need, rounded up to a KiB and at most the
    /// kernel's largest copy, 65528. `None` when there was none, or even that is too small.
    pub fn copy_size_needed(&self) -> Option<u64> {
        let need = self.copy_needed_max;
        (need > 0 && need <= 65528).then(|| need.div_ceil(1024).saturating_mul(1024).min(65528))
    }
}

/// Why stacks finished from the live process were rejected (kept truncated, with the copy's
/// frames only), one count per check; the first check a stack fails is counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RejectCounts {
    /// The walk past the copy found no frame (the thread's stack there no longer held one).
    pub nothing_found: u64,
    /// The walk did not end at the thread's start (`_start`, or a function whose CFI ends
    /// the stack, as `clone3`'s does).
    pub no_thread_start: u64,
    /// A step past the copy read lower on the stack than the one before.
    pub not_climbing: u64,
    /// A return address with no call instruction before it.
    pub not_a_call: u64,
    /// A call that names another function than the callee's (a frame of a later moment, or
    /// a tail call).
    pub wrong_callee: u64,
    /// The call at the cut (before the first return address read past the copy) goes
    /// through a register: it names no target, so nothing ties the later read to the copy.
    pub indirect_at_cut: u64,
    /// The frames just below the cut changed after the sample: the thread left them.
    pub copy_changed: u64,
    /// The thread, blocked when its frames were checked, had its stack pointer above the
    /// cut: it had returned from the frames the copy ends in.
    pub moved_on: u64,
}

/// One check of [`RejectCounts`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reject {
    NothingFound,
    NoThreadStart,
    NotClimbing,
    NotACall,
    WrongCallee,
    IndirectAtCut,
    CopyChanged,
    MovedOn,
}

impl RejectCounts {
    pub(crate) fn count(&mut self, r: Reject) {
        *match r {
            Reject::NothingFound => &mut self.nothing_found,
            Reject::NoThreadStart => &mut self.no_thread_start,
            Reject::NotClimbing => &mut self.not_climbing,
            Reject::NotACall => &mut self.not_a_call,
            Reject::WrongCallee => &mut self.wrong_callee,
            Reject::IndirectAtCut => &mut self.indirect_at_cut,
            Reject::CopyChanged => &mut self.copy_changed,
            Reject::MovedOn => &mut self.moved_on,
        } += 1;
    }

    /// The counts by name, as the summary prints them and a recording stores them.
    pub fn named(&self) -> [(&'static str, u64); 8] {
        [
            ("copy_changed", self.copy_changed),
            ("moved_on", self.moved_on),
            ("wrong_callee", self.wrong_callee),
            ("indirect_at_cut", self.indirect_at_cut),
            ("not_a_call", self.not_a_call),
            ("no_thread_start", self.no_thread_start),
            ("not_climbing", self.not_climbing),
            ("nothing_found", self.nothing_found),
        ]
    }
}

/// How much of a stack copy one unwind needed: the bytes from the stack pointer to the end
/// of the highest word it read, in the copy or (when the copy ended first) past it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StackNeed {
    pub bytes: u64,
    /// The unwind went past the end of a copy as long as asked: a larger copy would have
    /// held more of it (`bytes` is then exact when the live process finished the stack, a
    /// lower bound otherwise).
    pub cut: bool,
}

/// What the unwinders hold, for the summary's bounds (README, "Memory").
impl super::Unwinders {
    /// The bytes of unwind tables kept for files that no live process maps (past them the
    /// least recently used go).
    pub fn elf_unused_budget(&self) -> usize {
        super::elf::unused_budget()
    }

    /// The processes whose modules are held.
    pub fn processes(&self) -> usize {
        self.procs.len()
    }

    /// The pids of those processes.
    pub fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.procs.keys().copied()
    }
}
