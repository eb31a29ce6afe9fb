//! Finishing an unwind from the live process. The kernel's copy of a user stack ends where
//! the requested size ends, or earlier at the first stack page that was never touched (a
//! large buffer on the stack, partly used, leaves such pages between the leaf and `main`).
//! While recording, the thread is usually still alive and still inside the frames the copy
//! did not reach: their bytes are read from its memory with `process_vm_readv`, a page at
//! a time and only the pages the unwind asks for, once per drain round ([`RoundReads`]),
//! and every frame found that way is checked before it is kept (`unwind::settle`, with
//! `unwind::confirm`).

use std::cell::{Cell, RefCell};
use std::collections::hash_map::Entry;

use rustc_hash::FxHashMap;

/// Stack pages read per sample, at most.
const MAX_PAGES: usize = 32;
/// How far above the sampled stack pointer a recovered frame may lie (the default stack
/// size limit, `ulimit -s`).
const MAX_SPAN: u64 = 8 << 20;
const PAGE: u64 = 4096;
/// Words of the copy's top read again from the live process (see
/// [`Recovery::copy_unchanged`]).
const COPY_TOP: usize = 4;
/// Places in files whose code was read, before the table is cleared.
const CALL_CACHE_MAX: usize = 1 << 16;

/// Reads another process's memory. The recorder's is [`ProcessMemory`]; tests give a fake.
pub trait LiveMemory {
    /// Reads up to `buf.len()` bytes at `addr` of process `pid`; how many were read.
    fn read(&mut self, pid: u32, addr: u64, buf: &mut [u8]) -> std::io::Result<usize>;

    /// The 16 bytes of code at `start` in process `pid`: those before a return address, to
    /// check the call that ends there, or a call's target, to follow a PLT stub. `None` when
    /// they cannot be read. `site` names `start` in its file (the same in every process that
    /// maps the file), for a cache.
    fn code(&mut self, pid: u32, start: u64, site: CodeSite) -> Option<[u8; 16]>;

    /// Thread `tid`'s state now: blocked (in a system call) at a stack pointer, running, or
    /// gone (it exited: its stack may already be another thread's).
    fn thread_now(&mut self, _pid: u32, _tid: u32) -> ThreadNow {
        ThreadNow::Running
    }
}

/// What `/proc/PID/task/TID/syscall` tells of a thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadNow {
    Blocked(u64),
    Running,
    Gone,
}

/// A live process's memory through `process_vm_readv`. Stack pages are read directly (they
/// are anonymous memory); code is read on `mapped`'s reading thread, bounded in time, since a
/// code page may have to come from a file, and each place in a file is read once.
#[derive(Default)]
pub struct ProcessMemory {
    calls: FxHashMap<CodeSite, [u8; 16]>,
    /// Reused for `/proc/PID/task/TID/syscall`.
    text: String,
}

/// A place in a file: the file (`unwind::hash_file`, 0 for memory of no file) and the
/// offset.
pub type CodeSite = (u64, u64);

impl LiveMemory for ProcessMemory {
    fn read(&mut self, pid: u32, addr: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        crate::sys::read_process_memory(pid, addr, buf)
    }

    fn code(&mut self, pid: u32, start: u64, site: CodeSite) -> Option<[u8; 16]> {
        if let Some(c) = self.calls.get(&site) {
            return Some(*c);
        }
        if self.calls.len() >= CALL_CACHE_MAX {
            self.calls.clear();
        }
        let code = crate::mapped::bounded(crate::mapped::READ_TIMEOUT, move || {
            let mut b = [0u8; 16];
            match crate::sys::read_process_memory(pid, start, &mut b) {
                Ok(16) => Some(b),
                _ => None,
            }
        })
        .flatten()?;
        // Memory of no file (site 0: a JIT may rewrite it) is read each time; a read that
        // failed (the process was exiting, a file that did not answer) is tried again.
        if site.0 != 0 {
            self.calls.insert(site, code);
        }
        Some(code)
    }

    fn thread_now(&mut self, pid: u32, tid: u32) -> ThreadNow {
        match crate::procfs::blocked_sp(pid, tid, &mut self.text) {
            Ok(Some(sp)) => ThreadNow::Blocked(sp),
            Ok(None) => ThreadNow::Running,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ESRCH)) => {
                ThreadNow::Gone
            }
            // Not allowed to look (another user's process): no evidence either way.
            Err(_) => ThreadNow::Running,
        }
    }
}

/// What the live process showed during one drain round: stack pages and each thread's
/// state, read once and shared by every sample of the round. Every sample a round hands on
/// was committed to its ring before the round began (`live::drain::round` reads each ring's
/// head first), so a page read during the round was read after each of those samples was
/// taken, as a page read for one sample alone would be: the checks of `unwind::settle`
/// judge it the same way. Only the copy's top words (`Recovery::copy_unchanged`) are read
/// again for each sample, after the pages past its copy; and a thread's state is used only
/// if it was read after every page of the round (a page read later for another sample of
/// the thread makes the state be read again), as check 5 judges the thread after its frames
/// were read.
///
/// Without rounds (no [`RoundReads::begin_round`], as in tests) each sample reads its own.
#[derive(Default)]
pub(crate) struct RoundReads {
    round: u64,
    /// Bumped whenever the pages read are forgotten: a walk that read pages past its copy
    /// stands for another sample's only within one epoch (`unwind::memo`).
    epoch: u64,
    /// (pid, page address): the page's bytes, or `None` when it could not be read.
    pages: FxHashMap<(u32, u64), Option<Box<[u8]>>>,
    /// Pages read from the live process so far (not found read already).
    reads: u64,
    /// Each thread's state, and `reads` when it was read.
    threads: FxHashMap<(u32, u32), (ThreadNow, u64)>,
    /// Page buffers of earlier rounds, reused.
    spare: Vec<Box<[u8]>>,
    pub(crate) stats: RoundStats,
}

/// How often a page or a thread's state was found already read in the round.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RoundStats {
    pub page_reads: u64,
    pub page_hits: u64,
    pub thread_reads: u64,
    pub thread_hits: u64,
}

/// Pages kept in one round (2 MiB): past it the next sample starts the round's pages afresh
/// (never a sample midway, whose pages are then all of one moment as before).
const ROUND_PAGES_MAX: usize = 512;
/// Page buffers kept for the next round.
const SPARE_MAX: usize = 64;

impl RoundReads {
    /// A drain round begins: what was read before is of an earlier moment.
    pub(crate) fn begin_round(&mut self) {
        self.round += 1;
        self.forget();
    }

    /// Before each sample's walk: without rounds nothing read for another sample is used;
    /// with them, a round that holds nearly [`ROUND_PAGES_MAX`] pages starts afresh (a
    /// sample reads at most [`MAX_PAGES`]).
    fn begin_sample(&mut self) {
        if self.round == 0 || self.pages.len() + MAX_PAGES > ROUND_PAGES_MAX {
            self.forget();
        }
    }

    fn forget(&mut self) {
        self.epoch += 1;
        for (_, page) in self.pages.drain() {
            if let Some(b) = page
                && self.spare.len() < SPARE_MAX
            {
                self.spare.push(b);
            }
        }
        self.threads.clear();
    }

    /// The page at `page` of process `pid`, read from `memory` unless this round read it.
    pub(super) fn page(
        &mut self,
        memory: &mut dyn LiveMemory,
        pid: u32,
        page: u64,
    ) -> Option<&[u8]> {
        let held = match self.pages.entry((pid, page)) {
            Entry::Occupied(e) => {
                self.stats.page_hits += 1;
                e.into_mut()
            }
            Entry::Vacant(e) => {
                self.stats.page_reads += 1;
                self.reads += 1;
                let mut bytes = self
                    .spare
                    .pop()
                    .unwrap_or_else(|| vec![0u8; PAGE as usize].into_boxed_slice());
                let read = match memory.read(pid, page, &mut bytes) {
                    Ok(n) if n == bytes.len() => Some(bytes),
                    _ => None,
                };
                e.insert(read)
            }
        };
        held.as_deref()
    }

    /// Thread `tid`'s state, read from `memory` unless this round read it after the last
    /// page it read.
    pub(super) fn thread_now(
        &mut self,
        memory: &mut dyn LiveMemory,
        pid: u32,
        tid: u32,
    ) -> ThreadNow {
        if let Some(&(now, at)) = self.threads.get(&(pid, tid))
            && at == self.reads
        {
            self.stats.thread_hits += 1;
            return now;
        }
        self.stats.thread_reads += 1;
        let now = memory.thread_now(pid, tid);
        self.threads.insert((pid, tid), (now, self.reads));
        now
    }
}

/// What a walk left in its [`Recovery`], kept with the walk (`unwind::memo`) so that a
/// later sample that walks the same way gets the same state without walking.
#[derive(Clone, Default)]
pub(crate) struct Walked {
    pages: Vec<u64>,
    produced: usize,
    first: Option<usize>,
    failed: bool,
    step_max: u64,
    max_addr: u64,
    steps: Vec<u64>,
    copy_top: [u64; COPY_TOP],
}

impl Walked {
    /// Whether the walk read (or tried to read) past its copy, from the live process.
    pub(crate) fn went_live(&self) -> bool {
        self.first.is_some()
    }
}

/// One sample's reads beyond its copied stack, and what they were for.
pub(crate) struct Recovery<'m> {
    pid: u32,
    tid: u32,
    sp: u64,
    /// The first address the copy does not hold, and the highest a frame may use.
    lo: u64,
    hi: u64,
    memory: RefCell<&'m mut dyn LiveMemory>,
    round: RefCell<&'m mut RoundReads>,
    /// The pages this sample read past its copy (at most [`MAX_PAGES`]).
    pages: RefCell<Vec<u64>>,
    /// Frames produced so far, and how many there were at the first read past the copy:
    /// the frames from there on depend on the live process's memory.
    produced: Cell<usize>,
    pub first: Cell<Option<usize>>,
    /// A read was refused (the thread exited, the page is gone, too many pages).
    pub failed: Cell<bool>,
    /// The highest address read past the copy, in this step and in all.
    step_max: Cell<u64>,
    pub max_addr: Cell<u64>,
    steps: RefCell<Vec<u64>>,
    /// The highest words read from the copy, ascending (0: none yet).
    copy_top: Cell<[u64; COPY_TOP]>,
}

impl<'m> Recovery<'m> {
    /// `task`: the sampled thread's (pid, tid).
    pub(crate) fn new(
        task: (u32, u32),
        sp: u64,
        copy_end: u64,
        memory: &'m mut dyn LiveMemory,
        round: &'m mut RoundReads,
    ) -> Self {
        let (pid, tid) = task;
        round.begin_sample();
        Recovery {
            pid,
            tid,
            sp,
            lo: copy_end,
            hi: sp.saturating_add(MAX_SPAN),
            memory: RefCell::new(memory),
            round: RefCell::new(round),
            pages: RefCell::new(Vec::new()),
            produced: Cell::new(0),
            first: Cell::new(None),
            failed: Cell::new(false),
            step_max: Cell::new(0),
            max_addr: Cell::new(0),
            steps: RefCell::new(Vec::new()),
            copy_top: Cell::new([0; COPY_TOP]),
        }
    }

    pub(crate) fn sp(&self) -> u64 {
        self.sp
    }

    /// The round's page epoch (see [`RoundReads`]'s `epoch`), after this sample began.
    pub(crate) fn round_epoch(&self) -> u64 {
        self.round.borrow().epoch
    }

    /// Copies what the walk left here into `into`.
    pub(crate) fn walked(&self, into: &mut Walked) {
        into.pages.clear();
        into.pages.extend_from_slice(&self.pages.borrow());
        into.produced = self.produced.get();
        into.first = self.first.get();
        into.failed = self.failed.get();
        into.step_max = self.step_max.get();
        into.max_addr = self.max_addr.get();
        into.steps.clear();
        into.steps.extend_from_slice(&self.steps.borrow());
        into.copy_top = self.copy_top.get();
    }

    /// Takes the state a kept walk left (this sample's walk would have left the same).
    pub(crate) fn restore(&self, w: &Walked) {
        let mut pages = self.pages.borrow_mut();
        pages.clear();
        pages.extend_from_slice(&w.pages);
        self.produced.set(w.produced);
        self.first.set(w.first);
        self.failed.set(w.failed);
        self.step_max.set(w.step_max);
        self.max_addr.set(w.max_addr);
        let mut steps = self.steps.borrow_mut();
        steps.clear();
        steps.extend_from_slice(&w.steps);
        self.copy_top.set(w.copy_top);
    }

    pub(crate) fn lo(&self) -> u64 {
        self.lo
    }

    /// The word at `addr` (past the copy) from the live process.
    pub(crate) fn read(&self, addr: u64) -> Option<u64> {
        if self.first.get().is_none() {
            self.first.set(Some(self.produced.get()));
        }
        if addr < self.lo || addr.saturating_add(8) > self.hi {
            self.failed.set(true);
            return None;
        }
        let mut word = [0u8; 8];
        // At most two pages: the part of the word in each.
        let split = (PAGE - (addr & (PAGE - 1))).min(8) as usize;
        let (low, high) = word.split_at_mut(split);
        self.fetch(addr, low)?;
        if !high.is_empty() {
            self.fetch(addr + split as u64, high)?;
        }
        self.step_max.set(self.step_max.get().max(addr));
        self.max_addr.set(self.max_addr.get().max(addr));
        Some(u64::from_ne_bytes(word))
    }

    /// Fills `out` from the bytes at `addr`, all in one page.
    fn fetch(&self, addr: u64, out: &mut [u8]) -> Option<()> {
        let page = addr & !(PAGE - 1);
        let off = (addr - page) as usize;
        if self.failed.get() {
            return None;
        }
        let mut pages = self.pages.borrow_mut();
        if !pages.contains(&page) {
            if pages.len() >= MAX_PAGES {
                self.failed.set(true);
                return None;
            }
            pages.push(page);
        }
        let mut memory = self.memory.borrow_mut();
        let mut round = self.round.borrow_mut();
        match round
            .page(&mut **memory, self.pid, page)
            .and_then(|bytes| bytes.get(off..off + out.len()))
        {
            Some(bytes) => {
                out.copy_from_slice(bytes);
                Some(())
            }
            None => {
                self.failed.set(true);
                None
            }
        }
    }

    /// Called after each frame is produced (the frame count so far).
    pub(crate) fn frame_done(&self, frames: usize) {
        self.produced.set(frames);
        if self.first.get().is_some() {
            self.steps.borrow_mut().push(self.step_max.replace(0));
        }
    }

    /// Whether each step past the copy read higher on the stack than the one before (the
    /// CFAs increase): a walk that goes back down is reading something else than frames.
    pub(crate) fn climbs(&self) -> bool {
        let steps = self.steps.borrow();
        let mut last = 0;
        for &m in steps.iter().filter(|&&m| m != 0) {
            if m <= last {
                return false;
            }
            last = m;
        }
        true
    }

    /// A word the walk read from the kernel's copy: the highest few are the outermost
    /// frames the copy holds, the frames just below the cut.
    pub(crate) fn note_copy_read(&self, addr: u64) {
        let mut top = self.copy_top.get();
        if addr > top[0] && !top.contains(&addr) {
            top[0] = addr;
            top.sort_unstable();
            self.copy_top.set(top);
        }
    }

    /// Whether the frames just below the cut are still what the kernel copied: the words
    /// the walk read highest in the copy (return addresses and saved registers, which only
    /// their own frame writes), read again from the live process after the frames past the
    /// copy were read. If one changed (or the walk read none), the thread left that frame
    /// after the sample and the frames read past the copy may be of a later moment. `None`:
    /// the read failed.
    pub(crate) fn copy_unchanged(&self, copy: &super::StackCopy<'_>) -> Option<bool> {
        let top = self.copy_top.get();
        let words = top.iter().copied().filter(|&a| a != 0);
        // A walk that read nothing of the copy links nothing read later to it.
        let Some(lo) = words.clone().next() else {
            return Some(false);
        };
        let hi = top[COPY_TOP - 1].saturating_add(8);
        let mut memory = self.memory.borrow_mut();
        let mut span = [0u8; PAGE as usize];
        let in_one = hi - lo <= PAGE;
        if in_one {
            let buf = &mut span[..(hi - lo) as usize];
            if memory.read(self.pid, lo, buf).ok() != Some(buf.len()) {
                return None;
            }
        }
        for addr in words {
            let now = if in_one {
                let at = (addr - lo) as usize;
                u64::from_ne_bytes(span[at..at + 8].try_into().ok()?)
            } else {
                let mut w = [0u8; 8];
                if memory.read(self.pid, addr, &mut w).ok() != Some(8) {
                    return None;
                }
                u64::from_ne_bytes(w)
            };
            if copy.read(addr) != Some(now) {
                return Some(false);
            }
        }
        Some(true)
    }

    /// Whether the thread, blocked now, has its stack pointer above the cut: it returned
    /// from the frames the copy ends in, and those past it may have been rewritten. `None`:
    /// the thread is gone (its stack may be a new thread's already).
    pub(crate) fn moved_past_cut(&self) -> Option<bool> {
        let mut memory = self.memory.borrow_mut();
        match self
            .round
            .borrow_mut()
            .thread_now(&mut **memory, self.pid, self.tid)
        {
            ThreadNow::Blocked(sp) => Some(sp >= self.lo),
            ThreadNow::Running => Some(false),
            ThreadNow::Gone => None,
        }
    }

    /// 16 bytes of the process's code at `start` (see [`LiveMemory::code`]).
    pub(crate) fn code(&self, start: u64, site: CodeSite) -> Option<[u8; 16]> {
        self.memory.borrow_mut().code(self.pid, start, site)
    }

    /// The word at `addr` of the process, now (a GOT slot).
    pub(crate) fn word(&self, addr: u64) -> Option<u64> {
        let mut w = [0u8; 8];
        match self.memory.borrow_mut().read(self.pid, addr, &mut w) {
            Ok(8) => Some(u64::from_ne_bytes(w)),
            _ => None,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Memory whose every byte is its address's low byte, but for one page that cannot be
    /// read.
    struct Pattern {
        unreadable: Option<u64>,
    }

    impl LiveMemory for Pattern {
        fn read(&mut self, _pid: u32, addr: u64, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.unreadable == Some(addr & !(PAGE - 1)) {
                return Err(std::io::Error::from_raw_os_error(libc::EFAULT));
            }
            for (i, b) in buf.iter_mut().enumerate() {
                *b = (addr + i as u64) as u8;
            }
            Ok(buf.len())
        }

        fn code(&mut self, _pid: u32, _start: u64, _site: CodeSite) -> Option<[u8; 16]> {
            None
        }
    }

    /// The word at `addr`, read past a copy that ends at 0x10800 of a stack at 0x10000, and
    /// whether the read failed.
    fn word_at(addr: u64, unreadable: Option<u64>) -> (Option<u64>, bool, RoundStats) {
        let mut memory = Pattern { unreadable };
        let mut round = RoundReads::default();
        round.begin_round();
        let (word, failed) = {
            let r = Recovery::new((1, 1), 0x10000, 0x10800, &mut memory, &mut round);
            (r.read(addr), r.failed.get())
        };
        (word, failed, round.stats)
    }

    #[test]
    fn a_word_across_two_pages_is_read_from_both() {
        let (word, failed, stats) = word_at(0x10ffc, None);
        let want = u64::from_le_bytes([0xfc, 0xfd, 0xfe, 0xff, 0x00, 0x01, 0x02, 0x03]);
        assert_eq!(word, Some(want));
        assert!(!failed);
        assert_eq!(stats.page_reads, 2);
        // Within one page: one read.
        let (word, _, stats) = word_at(0x10ff8, None);
        assert_eq!(
            word,
            Some(u64::from_le_bytes([
                0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff
            ]))
        );
        assert_eq!(stats.page_reads, 1);
    }

    #[test]
    fn a_word_whose_second_page_cannot_be_read_is_not_read_at_all() {
        let (word, failed, _) = word_at(0x10ffc, Some(0x11000));
        assert_eq!((word, failed), (None, true));
        let (word, failed, _) = word_at(0x10ffc, Some(0x10000));
        assert_eq!((word, failed), (None, true));
    }
}
