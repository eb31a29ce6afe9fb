//! Past JIT stubs that have no unwind info and keep no frame pointer.
//!
//! framehop unwinds code outside every module with CFI by frame pointers, which is right for
//! JIT code that keeps them (V8's). CPython 3.12's `-X perf` trampolines do not: each is a
//! copy, in anonymous memory, of `sub $8,%rsp; call *%rcx; add $8,%rsp; ret`, so the frame
//! pointer there is whatever the interpreter left in rbp and the walk stopped at the first
//! `py::` frame. Where the frame-pointer step fails at a return address into code without
//! CFI, this tries the one other layout such a stub can have, a stack aligned by one slot:
//! the caller's return address at `sp + 8`, the caller's stack at `sp + 16`, rbp untouched.
//! It is taken only when that return address lies in a module with CFI, so the walk goes
//! on by the caller's own unwind info; otherwise the first walk's failure stands.

use framehop::{FrameAddress, UnwindRegsNative, Unwinder};

use super::{MAX_FRAMES, NativeUnwinder, Process, StackCopy, TruncReason, UnwindOutcome, UserRegs};

/// What the stub step needs of the walk: the process's modules and unwinder, the cache.
pub(super) struct Walk<'a> {
    pub p: &'a Process,
    pub cache: &'a mut framehop::CacheNative<framehop::MayAllocateDuringUnwind>,
    pub stack: &'a StackCopy<'a>,
}

/// Whether `addr` (a lookup address) is code that a module's CFI covers.
fn has_cfi(p: &Process, addr: u64) -> bool {
    p.has_cfi_at(addr)
}

/// Re-walks a stack whose first walk failed at a return address into code without CFI,
/// stepping over stubs as the module docs say. `None` when the first walk did not fail
/// there, or no stub step applied (its frames and failure stand).
pub(super) fn walk_past_stubs(
    w: Walk<'_>,
    regs: UserRegs,
    out: &mut Vec<u64>,
) -> Option<UnwindOutcome> {
    match out.as_slice() {
        [_, .., ra] if !has_cfi(w.p, ra.wrapping_sub(1)) => {}
        _ => return None,
    }
    let unwinder: &NativeUnwinder = &w.p.unwinder;
    let stack = w.stack;
    let mut read = |addr: u64| stack.read(addr).ok_or(());
    let mut fh = UnwindRegsNative::new(regs.ip, regs.sp, regs.bp);
    let mut frames = vec![regs.ip];
    let mut at = FrameAddress::InstructionPointer(regs.ip);
    let mut stepped = false;
    let outcome = loop {
        if frames.len() >= MAX_FRAMES {
            break UnwindOutcome::Truncated(TruncReason::MaxDepth);
        }
        let step = match unwinder.unwind_frame(at, &mut fh, w.cache, &mut read) {
            Ok(step) => step,
            Err(e) => match stub_step(w.p, at, &mut fh, stack) {
                Some(ra) => {
                    stepped = true;
                    Some(ra)
                }
                None if super::in_entry_function(w.p, &frames) => break UnwindOutcome::Complete,
                None => break UnwindOutcome::Truncated(super::classify(w.p, &frames, stack, e)),
            },
        };
        let Some(ra) = step else {
            break UnwindOutcome::Complete;
        };
        let Some(next) = FrameAddress::from_return_address(ra) else {
            break UnwindOutcome::Truncated(TruncReason::BadFrame);
        };
        frames.push(ra);
        at = next;
    };
    if !stepped {
        return None;
    }
    *out = frames;
    Some(outcome)
}

/// The caller of a stub at return address `at` that aligned the stack by one slot: its
/// return address at `sp + 8`, taken only into code with CFI; moves `regs` to the caller.
fn stub_step(
    p: &Process,
    at: FrameAddress,
    regs: &mut UnwindRegsNative,
    stack: &StackCopy<'_>,
) -> Option<u64> {
    if !at.is_return_address() || has_cfi(p, at.address_for_lookup()) {
        return None;
    }
    let sp = regs.sp();
    let ra = stack.read(sp.checked_add(8)?)?;
    if ra == 0 || !has_cfi(p, ra.wrapping_sub(1)) {
        return None;
    }
    regs.set_sp(sp.checked_add(16)?);
    Some(ra)
}
