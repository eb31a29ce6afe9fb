//! What a walk that read the live process keeps. Frames read past the kernel's copy were on
//! the stack at the sample's moment only if the thread had not left them when they were
//! read; every check below looks for evidence that it had, cheapest first, and the first
//! that finds it rejects the frames read past the copy (the stack keeps the copy's frames,
//! truncated, and the check is counted):
//!
//! 1. the walk found a frame past the copy and ended at the thread's start (`_start`, or a
//!    function whose CFI ends the stack, as `clone3`'s does);
//! 2. each step past the copy read higher on the stack than the one before;
//! 3. each recovered return address follows a call that, where it names its target, names
//!    the function its callee frame is in (`unwind::confirm`), the frame unwound last from
//!    the copy included; the call at the cut must name it (a call through a register there
//!    would tie nothing read later to the copy);
//! 4. the frames just below the cut still hold what the kernel copied, read again after the
//!    frames past the copy were read (`Recovery::copy_unchanged`);
//! 5. a thread blocked now (in a system call) has its stack pointer below the cut
//!    (`Recovery::moved_past_cut`, from `/proc/PID/task/TID/syscall`).

use framehop::{FrameAddress, UnwindRegsNative, Unwinder};
use rustc_hash::{FxHashMap, FxHashSet};

use super::confirm::{CallSite, Callee, Verdict, judge, plt_slot};
use super::live::Recovery;
use super::stats::Reject;
use super::{
    CodeSite, ENTRY_CALL_WINDOW, FhCache, ProcModule, Process, StackCopy, TruncReason,
    UnwindOutcome, entry, in_entry_function,
};

/// Call sites confirmed to name their callee's function: (pid, return address, the callee's
/// lookup address), valid while modules stay as they are; and the function each callee
/// address is in, by its place in its file (the entry's distance before it: the same in
/// every process). Both cleared when modules change, and past [`CONFIRMED_MAX`].
#[derive(Default)]
pub(super) struct Confirmed {
    calls: FxHashSet<(u32, u64, u64)>,
    starts: FxHashMap<CodeSite, Option<u64>>,
    /// Each file's `main`, by its distance from the file's entry point (`entry`), keyed by
    /// the file (`ProcModule::path_hash`).
    mains: FxHashMap<u64, Option<u64>>,
}

const CONFIRMED_MAX: usize = 1 << 16;

impl Confirmed {
    pub(super) fn clear(&mut self) {
        self.calls.clear();
        self.starts.clear();
        self.mains.clear();
    }

    fn insert(&mut self, key: (u32, u64, u64)) {
        if self.calls.len() >= CONFIRMED_MAX {
            self.calls.clear();
        }
        self.calls.insert(key);
    }

    /// The entry of the function that holds `pc` in module `m`, looked up once per place.
    fn function_start(&mut self, m: &ProcModule, pc: u64) -> Option<u64> {
        let site = m.site(pc);
        if let Some(&back) = self.starts.get(&site) {
            return back.map(|b| pc.wrapping_sub(b));
        }
        if self.starts.len() >= CONFIRMED_MAX {
            self.starts.clear();
        }
        let start = m.function_start(pc);
        self.starts.insert(site, start.map(|s| pc.wrapping_sub(s)));
        start
    }
}

/// A stack that the copy did not hold to its end: how many bytes it would have needed, and
/// what became of the frames read past it.
pub(super) struct Cut {
    pub needed: u64,
    /// The index of the first frame read from the live process, when they were kept.
    pub recovered: Option<usize>,
    pub unreadable: bool,
    /// The check that rejected them.
    pub rejected: Option<Reject>,
    /// Of the kept frames, calls confirmed and calls through a register.
    pub confirmed: u64,
    pub indirect: u64,
}

/// The state the checks share.
pub(super) struct Checks<'a, 'm> {
    pub p: &'a Process,
    pub cache: &'a mut FhCache,
    pub confirmed: &'a mut Confirmed,
    pub pid: u32,
    pub rec: &'a Recovery<'m>,
    pub copy: &'a StackCopy<'a>,
}

/// Why the frames read past the copy go: a check failed, or (`None`) memory could not be
/// read.
type Failed = Option<Reject>;

impl Checks<'_, '_> {
    /// Decides what `out` keeps (see the module's doc); the outcome, and how the copy's end
    /// cut the stack if it did.
    pub(super) fn settle(
        mut self,
        outcome: UnwindOutcome,
        out: &mut Vec<u64>,
    ) -> (UnwindOutcome, Option<Cut>) {
        let rec = self.rec;
        let Some(first) = rec.first.get() else {
            return (outcome, None);
        };
        let needed_to = |addr: u64| addr.saturating_add(8).saturating_sub(rec.sp());
        match self.check(outcome, out, first) {
            Ok((confirmed, indirect)) => {
                let cut = Cut {
                    needed: needed_to(rec.max_addr.get()),
                    recovered: Some(first),
                    unreadable: false,
                    rejected: None,
                    confirmed,
                    indirect,
                };
                (outcome, Some(cut))
            }
            Err(failed) => {
                out.truncate(first.max(1));
                let cut = Cut {
                    needed: needed_to(rec.max_addr.get().max(rec.lo())),
                    recovered: None,
                    unreadable: failed.is_none(),
                    rejected: failed,
                    confirmed: 0,
                    indirect: 0,
                };
                (UnwindOutcome::Truncated(TruncReason::StackEnd), Some(cut))
            }
        }
    }

    fn check(
        &mut self,
        outcome: UnwindOutcome,
        out: &[u64],
        first: usize,
    ) -> Result<(u64, u64), Failed> {
        if self.rec.failed.get() {
            return Err(None);
        }
        // A walk that found no frame past the copy (a zero read where the thread's frames
        // were: it has moved on) finished nothing, unless the copy ended at the stack's root.
        if out.len() <= first && !in_entry_function(self.p, out) {
            return Err(Some(Reject::NothingFound));
        }
        if outcome != UnwindOutcome::Complete || !self.ends_at_root(out) {
            return Err(Some(Reject::NoThreadStart));
        }
        if !self.rec.climbs() {
            return Err(Some(Reject::NotClimbing));
        }
        let (confirmed, indirect, main_at_cut) = self.confirm_calls(out, first)?;
        let kept = (confirmed, indirect);
        if main_at_cut {
            // Past the cut there is only the main thread's base, which does not change while
            // main runs; once main has returned its slot names `exit`. Nothing below the cut
            // has to be read again, and the thread's state says nothing more.
            return Ok(kept);
        }
        match self.rec.copy_unchanged(self.copy) {
            Some(true) => {}
            Some(false) => return Err(Some(Reject::CopyChanged)),
            None => return Err(None),
        }
        match self.rec.moved_past_cut() {
            Some(false) => Ok(kept),
            Some(true) => Err(Some(Reject::MovedOn)),
            None => Err(None),
        }
    }

    /// Whether the last frame is a thread's first: the entry point function of its file,
    /// or a function whose CFI says the stack ends there (its return address undefined).
    /// framehop also ends a walk on a zero return address or a zero frame pointer, which a
    /// stack rewritten since the sample can hold anywhere: those are not a start.
    fn ends_at_root(&mut self, out: &[u64]) -> bool {
        if in_entry_function(self.p, out) {
            return true;
        }
        let address = match out {
            [] => return false,
            [ip] => FrameAddress::from_instruction_pointer(*ip),
            [.., ra] => match FrameAddress::from_return_address(*ra) {
                Some(a) => a,
                None => return false,
            },
        };
        // A frame-pointer rule reads the stack (bp is not 0) and so fails: only a rule that
        // ends the stack without reading it returns Ok(None).
        let mut regs = UnwindRegsNative::new(address.address(), 8, 1);
        let ended = self
            .p
            .unwinder
            .unwind_frame(address, &mut regs, self.cache, &mut |_| Err(()));
        matches!(ended, Ok(None))
    }

    /// Confirms the call before each recovered return address (from `first` on, whose
    /// callee is the last frame the copy gave): how many were confirmed and how many
    /// indirect, and whether the cut was in `main`'s frame (`main_at_cut`), or the check
    /// that failed.
    fn confirm_calls(&mut self, out: &[u64], first: usize) -> Result<(u64, u64, bool), Failed> {
        let (mut confirmed, mut indirect, mut main_at_cut) = (0, 0, false);
        for i in first.max(1)..out.len() {
            let ra = out[i];
            let callee = if i == 1 {
                out[0]
            } else {
                out[i - 1].wrapping_sub(1)
            };
            let key = (self.pid, ra, callee);
            if self.confirmed.calls.contains(&key) {
                confirmed += 1;
                continue;
            }
            match self.judge_frame(ra, callee) {
                Verdict::Confirmed => {
                    self.confirmed.insert(key);
                    confirmed += 1;
                }
                // At the cut, the call is all that ties the frames read later to the copy:
                // one that names no target ties nothing (a later phase's frame through a
                // register call passes every other check), unless its callee is `main`,
                // whose caller never changes (`unwind::entry`).
                Verdict::Indirect if i == first.max(1) => {
                    if !self.main_at_cut(callee, &out[i..]) {
                        return Err(Some(Reject::IndirectAtCut));
                    }
                    main_at_cut = true;
                    indirect += 1;
                }
                Verdict::Indirect => indirect += 1,
                Verdict::NotACall => return Err(Some(Reject::NotACall)),
                Verdict::WrongCallee => return Err(Some(Reject::WrongCallee)),
            }
        }
        Ok((confirmed, indirect, main_at_cut))
    }

    /// Whether the frame below a cut whose call went through a register is the program's
    /// `main` (the function its `_start` hands the C library), with no more than the main
    /// thread's base read past the copy (`past`, return addresses: `__libc_start_call_main`,
    /// `__libc_start_main`, `_start`), none of them in `main` itself (an outer `main` of a
    /// recursive one, with glibc before 2.34, whose base is two frames), and the last in
    /// `_start` of `main`'s own file: a thread that called `main` through a pointer also
    /// ends its walk within three frames, at `clone3`, and its slot may hold a later call's
    /// return by now.
    pub(super) fn main_at_cut(&mut self, callee_pc: u64, past: &[u64]) -> bool {
        const BASE_FRAMES: usize = 3;
        let Some(&last) = past.last() else {
            return false;
        };
        if past.len() > BASE_FRAMES {
            return false;
        }
        let Some(m) = self.p.module_at(callee_pc) else {
            return false;
        };
        let entry_and_start = (m.entry_avma, self.confirmed.function_start(m, callee_pc));
        let (Some(entry), Some(start)) = entry_and_start else {
            return false;
        };
        if last.wrapping_sub(1).wrapping_sub(entry) >= ENTRY_CALL_WINDOW {
            return false;
        }
        // No frame past the cut in main itself (only main's own mapping can hold one).
        for pc in past.iter().map(|ra| ra.wrapping_sub(1)) {
            if m.avma.contains(&pc) && self.confirmed.function_start(m, pc) == Some(start) {
                return false;
            }
        }
        let key = m.path_hash;
        let from_entry = match self.confirmed.mains.get(&key) {
            Some(&known) => known,
            None => {
                let code = self.start_code(m, entry);
                let rec = self.rec;
                let main = code
                    .and_then(|c| entry::main_passed_by_start(&c, entry, |slot| rec.word(slot)));
                let from_entry = main.map(|a| a.wrapping_sub(entry));
                // A file whose code could not be read is tried again.
                if code.is_some() {
                    self.confirmed.mains.insert(key, from_entry);
                }
                from_entry
            }
        };
        from_entry.is_some_and(|d| entry.wrapping_add(d) == start)
    }

    /// The first bytes of `_start`, at `entry` in module `m`.
    fn start_code(&self, m: &ProcModule, entry: u64) -> Option<[u8; entry::START_CODE]> {
        let mut code = [0u8; entry::START_CODE];
        for (k, chunk) in code.chunks_mut(16).enumerate() {
            let at = entry + 16 * k as u64;
            if !m.avma.contains(&(at + 15)) {
                return None;
            }
            chunk.copy_from_slice(&self.rec.code(at, m.site(at))?);
        }
        Some(code)
    }

    fn judge_frame(&mut self, ra: u64, callee_pc: u64) -> Verdict {
        let (p, rec) = (self.p, self.rec);
        let Some(start) = ra.checked_sub(16) else {
            return Verdict::NotACall;
        };
        // The return address must be in an executable mapping of the process.
        let Some(m) = p.module_at(ra.wrapping_sub(1)) else {
            return Verdict::NotACall;
        };
        let Some(code) = rec.code(start, m.site(start)) else {
            return Verdict::NotACall;
        };
        let site = CallSite::decode(&code, ra);
        let entry = p
            .module_at(callee_pc)
            .and_then(|m| self.confirmed.function_start(m, callee_pc));
        let callee = Callee {
            pc: callee_pc,
            entry,
        };
        let resolve = |t: u64| {
            let m = p.module_at(t)?;
            let stub = rec.code(t, m.site(t))?;
            rec.word(plt_slot(&stub, t)?)
        };
        judge(&site, &callee, resolve, |s| rec.word(s))
    }
}
