//! Frame-pointer unwinding inside the copied user stack.

use super::{MAX_FRAMES, StackCopy, TruncReason, UnwindOutcome, UserRegs};

/// Walks the `rbp` chain: at `bp` sits the caller's `bp`, at `bp + 8` the return address.
/// `bp == 0` or a null return address ends the chain normally (`_start` zeroes `rbp`).
/// The first frame is `regs.ip`; a function still in its prologue loses its caller.
pub(crate) fn walk(regs: UserRegs, stack: &StackCopy<'_>, out: &mut Vec<u64>) -> UnwindOutcome {
    out.push(regs.ip);
    let mut bp = regs.bp;
    let mut lowest = regs.sp;
    loop {
        if bp == 0 {
            return UnwindOutcome::Complete;
        }
        if bp < lowest || !bp.is_multiple_of(8) {
            return UnwindOutcome::Truncated(TruncReason::BadFrame);
        }
        let (Some(saved_bp), Some(ra)) = (stack.read(bp), stack.read(bp.wrapping_add(8))) else {
            return UnwindOutcome::Truncated(stack.miss_reason(bp));
        };
        if ra == 0 {
            return UnwindOutcome::Complete;
        }
        if out.len() >= MAX_FRAMES {
            return UnwindOutcome::Truncated(TruncReason::MaxDepth);
        }
        out.push(ra);
        lowest = bp.saturating_add(16);
        bp = saved_bp;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack_of(words: &[u64]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_ne_bytes()).collect()
    }

    #[test]
    fn follows_chain_to_zero_bp() {
        let sp = 0x1000;
        let bytes = stack_of(&[1, 2, 0x1020, 0x400100, 0, 0x400200]);
        // bp = 0x1010: saved bp 0x1020, ra 0x400100; at 0x1020: saved bp 0, ra 0x400200.
        let stack = StackCopy::new(sp, &bytes);
        let regs = UserRegs {
            ip: 0x400000,
            sp,
            bp: 0x1010,
        };
        let mut out = Vec::new();
        assert_eq!(walk(regs, &stack, &mut out), UnwindOutcome::Complete);
        assert_eq!(out, [0x400000, 0x400100, 0x400200]);
    }

    #[test]
    fn bp_below_sp_or_past_copy_truncates() {
        let bytes = stack_of(&[0, 0x2000, 0x400100]);
        let stack = StackCopy::new(0x1000, &bytes);
        let mut out = Vec::new();
        let below = UserRegs {
            ip: 1,
            sp: 0x1000,
            bp: 0x800,
        };
        assert_eq!(
            walk(below, &stack, &mut out),
            UnwindOutcome::Truncated(TruncReason::BadFrame)
        );
        assert_eq!(out, [1]);
        out.clear();
        // bp 0x1008 -> ra 0x400100, then bp 0x2000 is past the 24-byte copy.
        let past = UserRegs {
            ip: 1,
            sp: 0x1000,
            bp: 0x1008,
        };
        assert_eq!(
            walk(past, &stack, &mut out),
            UnwindOutcome::Truncated(TruncReason::StackEnd)
        );
        assert_eq!(out, [1, 0x400100]);
    }

    #[test]
    fn a_loop_is_bad_frame_not_endless() {
        // saved bp points at itself.
        let bytes = stack_of(&[0x1000, 0x400100]);
        let stack = StackCopy::new(0x1000, &bytes);
        let mut out = Vec::new();
        let regs = UserRegs {
            ip: 1,
            sp: 0x1000,
            bp: 0x1000,
        };
        assert_eq!(
            walk(regs, &stack, &mut out),
            UnwindOutcome::Truncated(TruncReason::BadFrame)
        );
        assert_eq!(out, [1, 0x400100]);
    }
}
