//! Walks remembered within a drain round. framehop's walk of a stack is a function of the
//! registers it starts from, the words it reads and the process's modules: given the same
//! three it reads the same addresses in the same order and yields the same frames. A thread
//! that allocates in a loop enters the allocator again and again with the same registers
//! and the same return addresses and saved registers above them, so most of its samples
//! would walk exactly as one before.
//!
//! A walk is kept with every word it read from the copy (address and value), the frames it
//! yielded, its outcome and what it left in its [`Recovery`]. A later sample of the same
//! process whose registers and copy length are the same stands for such a walk only when
//! every one of those words holds the same value in its own copy, the process's modules
//! have not changed since (a mapping, a JIT dump read, exec, fork or exit of the process
//! forgets its walks), and, when the walk read past its copy, the round's live pages are
//! the ones it read ([`RoundReads`](super::live::RoundReads)' epoch): a page read past the
//! copy in this round is shared by every sample of the round anyway, so the walk's reads
//! past the copy would find the same words. Then the walk is not repeated, and its frames
//! and state are handed to `unwind::settle`, whose checks run for this sample as for any
//! other (the copy's top words are read again from the live process for it). A walk that
//! ended in an error its own steps do not explain (where a stub step is tried, reading the
//! copy apart) is never kept.
//!
//! The words compared are all those read, saved registers included, though framehop uses
//! few of them: which ones a walk's result depends on is framehop's to know (a rule may
//! restore the frame pointer that a later rule follows, or compute its frame's size from a
//! word), and a word that differs only costs a walk.

use rustc_hash::FxHashMap;

use super::live::{Recovery, Walked};
use super::{StackCopy, UnwindOutcome, UserRegs};

/// Walks kept at most; past it they are all forgotten.
const MAX_WALKS: usize = 1024;

/// What identifies a walk before its words are compared.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Key {
    pid: u32,
    ip: u64,
    sp: u64,
    bp: u64,
    copy_len: u64,
}

impl Key {
    pub(super) fn new(pid: u32, regs: UserRegs, copy: &StackCopy<'_>) -> Key {
        Key {
            pid,
            ip: regs.ip,
            sp: regs.sp,
            bp: regs.bp,
            copy_len: copy.len(),
        }
    }
}

/// One walk kept.
struct Kept {
    /// Its process's module generation when it was made.
    modules: u64,
    /// The round's page epoch its reads past the copy found.
    epoch: u64,
    /// Every word it read from the copy: (address, value).
    words: Vec<(u64, u64)>,
    frames: Vec<u64>,
    outcome: UnwindOutcome,
    /// How much of the copy it read (`StackCopy::used`).
    used: u64,
    walked: Walked,
}

#[derive(Default)]
pub(super) struct WalkMemo {
    kept: FxHashMap<Key, Kept>,
    /// Each process's module generation: bumped when its modules change, which leaves every
    /// walk of it kept before unused.
    modules: FxHashMap<u32, u64>,
    /// A word buffer for the next walk, reused.
    spare: Vec<(u64, u64)>,
    /// Samples that took a kept walk.
    pub(super) hits: u64,
}

impl WalkMemo {
    /// `pid`'s modules changed (or the process came or went): no walk of it kept holds.
    pub(super) fn forget(&mut self, pid: u32) {
        *self.modules.entry(pid).or_default() += 1;
    }

    fn generation(&self, pid: u32) -> u64 {
        self.modules.get(&pid).copied().unwrap_or(0)
    }

    /// The walk kept for `key`, if it stands for this sample: then `out` holds its frames,
    /// `copy` and `rec` what the walk left in them, and the outcome is returned.
    pub(super) fn replay(
        &mut self,
        key: Key,
        copy: &StackCopy<'_>,
        rec: &Recovery<'_>,
        out: &mut Vec<u64>,
    ) -> Option<UnwindOutcome> {
        let kept = self.kept.get(&key)?;
        if kept.modules != self.generation(key.pid)
            || (kept.walked.went_live() && kept.epoch != rec.round_epoch())
            || !kept.words.iter().all(|&(a, w)| copy.peek(a) == Some(w))
        {
            return None;
        }
        out.clear();
        out.extend_from_slice(&kept.frames);
        copy.set_used(kept.used);
        rec.restore(&kept.walked);
        self.hits += 1;
        Some(kept.outcome)
    }

    /// A buffer for the words of the walk about to be made.
    pub(super) fn words(&mut self) -> Vec<(u64, u64)> {
        let mut w = std::mem::take(&mut self.spare);
        w.clear();
        w.reserve(64);
        w
    }

    /// Keeps the walk just made for `key`, which read `words` of `copy` and yielded `out`.
    pub(super) fn keep(
        &mut self,
        key: Key,
        words: Vec<(u64, u64)>,
        walk: (&[u64], UnwindOutcome),
        copy: &StackCopy<'_>,
        rec: &Recovery<'_>,
    ) {
        if self.kept.len() >= MAX_WALKS && !self.kept.contains_key(&key) {
            self.kept.clear();
        }
        let (frames, outcome) = walk;
        // Its own reads: the copy may hold an earlier walk's of the same sample.
        let used = words
            .iter()
            .map(|&(a, _)| a + 8)
            .max()
            .map_or(0, |end| end - copy.sp);
        let modules = self.generation(key.pid);
        let kept = self.kept.entry(key).or_insert_with(|| Kept {
            modules,
            epoch: 0,
            words: Vec::new(),
            frames: Vec::new(),
            outcome,
            used: 0,
            walked: Walked::default(),
        });
        kept.modules = modules;
        kept.epoch = rec.round_epoch();
        self.spare = std::mem::replace(&mut kept.words, words);
        kept.frames.clear();
        kept.frames.extend_from_slice(frames);
        kept.outcome = outcome;
        kept.used = used;
        rec.walked(&mut kept.walked);
    }

    /// Gives back the buffer of a walk that is not kept.
    pub(super) fn discard(&mut self, words: Vec<(u64, u64)>) {
        self.spare = words;
    }
}
