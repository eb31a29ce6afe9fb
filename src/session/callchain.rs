//! The callchain a sample is handed on with: the kernel part of its own callchain, then the
//! user frames unwound from its copied stack (finished from the live process while
//! recording), cut at the event's `max-stack=`; and which of its frames were read from the
//! live process, as the unwind found or as a recording's marks say.

use perf_event_open_sys::bindings::{PERF_CONTEXT_MAX, PERF_CONTEXT_USER};

use crate::records::{self, Sample, U64Iter};
use crate::unwind::{UnwindOutcome, UserRegs};

use super::{SampleCtx, Session};

/// The longest callchain handed on for one sample (perf's own default limit is 127 frames;
/// this keeps deep recursion while fitting any re-encoded record in 64 KiB).
pub const MAX_CHAIN_FRAMES: usize = 4096;

impl SampleCtx<'_> {
    /// The callchain to use: the one with the unwound user frames, else the sample's own.
    pub fn callchain(&self) -> Option<Chain<'_>> {
        match (self.unwound, &self.sample.callchain) {
            (Some(c), _) => Some(Chain::Built(c.iter())),
            (None, Some(c)) => Some(Chain::Recorded(c.iter())),
            (None, None) => None,
        }
    }
}

/// The addresses of a callchain, recorded or built by the session.
pub enum Chain<'a> {
    Recorded(U64Iter<'a>),
    Built(std::slice::Iter<'a, u64>),
}

impl Iterator for Chain<'_> {
    type Item = u64;
    fn next(&mut self) -> Option<u64> {
        match self {
            Chain::Recorded(it) => it.next(),
            Chain::Built(it) => it.next().copied(),
        }
    }
}

impl Session {
    /// The deepest stack each event keeps (its `max-stack=` term): user frames unwound
    /// beyond it are cut, as perf's unwinder stops there.
    pub fn with_max_stack(mut self, max: Vec<Option<u16>>) -> Self {
        self.max_stack = max;
        self
    }

    /// The recording's marks of samples whose stacks were finished from the live process
    /// (its memperf feature section), handed on with each such sample.
    pub(super) fn with_recovered_marks(mut self, marks: &[crate::perfdata::RecoveredMark]) -> Self {
        self.recovered_marks = marks.iter().map(|m| ((m.time, m.tid), m.first)).collect();
        self
    }

    /// When `unwind`, builds `self.chain` for `sample` of event `ev`, cut at the event's
    /// `max-stack=`. Returns the index among the user frames of the first one read from
    /// the live process: found by this unwind, else as the recording's marks say.
    pub(super) fn build_chain(
        &mut self,
        ev: usize,
        sample: &Sample<'_>,
        unwind: bool,
    ) -> Option<u32> {
        if unwind {
            let recovered = self.unwind_sample(ev, sample);
            if let Some(&Some(max)) = self.max_stack.get(ev) {
                cut_chain(&mut self.chain, usize::from(max));
            }
            return recovered;
        }
        if self.recovered_marks.is_empty() {
            return None;
        }
        let (Some(time), Some(tid)) = (sample.time, sample.tid) else {
            return None;
        };
        self.recovered_marks.get(&(time, tid)).copied()
    }

    /// Builds `self.chain`: the kernel part of the sample's callchain, then the user frames
    /// unwound from the copied stack. Returns the index among the user frames of the first
    /// one read from the live process, if any was.
    fn unwind_sample(&mut self, ev: usize, sample: &Sample<'_>) -> Option<u32> {
        let shed = self.sheds(ev);
        self.chain.clear();
        if let Some(cc) = &sample.callchain {
            self.chain.extend(cc.iter());
        }
        self.frames.clear();
        let (Some(regs), Some(stack), Some(pid), true) = (
            sample.regs_user.as_ref(),
            sample.stack_user.as_ref(),
            sample.pid,
            self.procs.unwinders.is_some(),
        ) else {
            return None;
        };
        if regs.abi == 0 {
            // A kernel thread, or a sample taken without user context.
            return None;
        }
        let Some(user) = user_regs(regs) else {
            self.stats.count_truncated(ev);
            return None;
        };
        if shed {
            // The reader is behind: the stack is left out, counted, so that no event is.
            self.stats.count_shed(ev);
            return None;
        }
        let put_back = put_back_returns(
            self.procs.maps(),
            pid,
            user.sp,
            stack.data,
            &self.hijacked,
            &mut self.patched,
        );
        let data = if put_back {
            &self.patched[..]
        } else {
            stack.data
        };
        let unwinders = self.procs.unwinders.as_mut()?;
        unwinders.set_thread(sample.tid.unwrap_or(pid));
        let outcome = unwinders.unwind_copy(pid, user, data, stack.size, &mut self.frames);
        let recovered = unwinders
            .last_recovered()
            .and_then(|i| u32::try_from(i).ok());
        if unwinders.last_past_copy()
            && let (Some(clock), Some(time)) = (self.clock, sample.time)
        {
            self.stats.read_delay.add(clock.now().saturating_sub(time));
        }
        if let (Some(need), Some(d)) = (unwinders.last_need(), self.depths.get_mut(ev)) {
            d.add_at(stack.size, need.bytes, need.cut);
        }
        self.stats.count_unwound(ev);
        if matches!(outcome, UnwindOutcome::Truncated(_)) {
            self.stats.count_truncated(ev);
        }
        if !self.frames.is_empty() {
            self.chain.push(PERF_CONTEXT_USER);
            self.chain.extend_from_slice(&self.frames);
        }
        if self.chain.len() > MAX_CHAIN_FRAMES {
            // Only thousands of kernel frames get here: keep those nearest the leaf.
            self.chain.truncate(MAX_CHAIN_FRAMES);
            self.stats.count_truncated(ev);
        }
        recovered
    }
}

/// Puts back into a copy of `data` (the stack copied from `sp` on) the return addresses a
/// uretprobe took over (`hijacked`: slot address, return address): where the slot lies in
/// the copy and holds another value that can be the trampoline
/// ([`crate::maps::is_uretprobe_trampoline`]). Returns whether `patched` holds the copy to
/// unwind.
fn put_back_returns(
    maps: Option<&crate::maps::ProcessMaps>,
    pid: u32,
    sp: u64,
    data: &[u8],
    hijacked: &[(u64, u64)],
    patched: &mut Vec<u8>,
) -> bool {
    let mut copied = false;
    for &(slot, ret) in hijacked {
        let Some(at) = slot.checked_sub(sp).and_then(|o| usize::try_from(o).ok()) else {
            continue;
        };
        let Some(word) = data.get(at..at.saturating_add(8)) else {
            continue;
        };
        let word = u64::from_ne_bytes(word.try_into().unwrap_or([0; 8]));
        let trampoline =
            word != ret && maps.is_some_and(|m| crate::maps::is_uretprobe_trampoline(m, pid, word));
        if !trampoline {
            continue;
        }
        if !copied {
            patched.clear();
            patched.extend_from_slice(data);
            copied = true;
        }
        patched[at..at + 8].copy_from_slice(&ret.to_ne_bytes());
    }
    copied
}

/// Keeps at most `max` frames of a kernel-then-user chain (context markers not counted).
fn cut_chain(chain: &mut Vec<u64>, max: usize) {
    let mut frames = 0;
    let keep = chain
        .iter()
        .position(|&ip| {
            if ip < PERF_CONTEXT_MAX {
                frames += 1;
            }
            frames > max
        })
        .unwrap_or(chain.len());
    chain.truncate(keep);
    if chain.last().is_some_and(|&ip| ip >= PERF_CONTEXT_MAX) {
        chain.pop();
    }
}

#[cfg(target_arch = "x86_64")]
fn user_regs(regs: &records::Regs<'_>) -> Option<UserRegs> {
    use perf_event_open_sys::bindings::{PERF_REG_X86_BP, PERF_REG_X86_IP, PERF_REG_X86_SP};
    Some(UserRegs {
        ip: regs.get(PERF_REG_X86_IP)?,
        sp: regs.get(PERF_REG_X86_SP)?,
        bp: regs.get(PERF_REG_X86_BP)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_stack_cuts_frames_not_markers() {
        let k = perf_event_open_sys::bindings::PERF_CONTEXT_KERNEL;
        let full = vec![k, 1, 2, PERF_CONTEXT_USER, 3, 4, 5];
        let mut c = full.clone();
        cut_chain(&mut c, 4);
        assert_eq!(c, [k, 1, 2, PERF_CONTEXT_USER, 3, 4]);
        let mut c = full.clone();
        cut_chain(&mut c, 2);
        assert_eq!(c, [k, 1, 2]);
        let mut c = full.clone();
        cut_chain(&mut c, 9);
        assert_eq!(c, full);
    }
}
