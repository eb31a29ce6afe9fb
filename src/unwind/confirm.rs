//! Call-site confirmation of frames read from the live process, as HPCToolkit's
//! `confirm_call` and Breakpad's stack scanning do. A return address found past the kernel's
//! copy is kept only when the instruction before it is a call, and, where that call names its
//! target, the target is the function the callee frame is in: a direct `call rel32` (followed
//! through a PLT stub, `jmp *GOT(%rip)`, to the address the GOT holds now), or `call
//! *disp32(%rip)` (the slot read from the live process). A call through a register or through
//! memory a register points at names no target that can be read back: it is accepted on the
//! other checks alone (the copy's top unchanged, frames climbing, the walk ending at the
//! thread's start), and counted. A tail call breaks the rule (the callee is not the function
//! the call named): such a stack is rejected and stays truncated, never wrong.

/// What the 16 bytes before a return address say about the call that pushed it. Each
/// encoding that ends exactly there is one reading: a `call rel32`'s displacement may itself
/// end with bytes that read as an indirect call, so more than one can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct CallSite {
    /// `call rel32` (E8): its target.
    pub direct: Option<u64>,
    /// `call *disp32(%rip)` (FF 15): the address of the slot it calls through.
    pub slot: Option<u64>,
    /// `call r/m64` (FF /2) in another encoding: through a register, or memory a register
    /// points at; no target can be read back.
    pub indirect: bool,
}

impl CallSite {
    /// Reads the bytes `code` that end at return address `ra`.
    pub(crate) fn decode(code: &[u8; 16], ra: u64) -> CallSite {
        let rel = |at: usize| {
            let d = i32::from_le_bytes([code[at], code[at + 1], code[at + 2], code[at + 3]]);
            ra.wrapping_add_signed(i64::from(d))
        };
        let mut site = CallSite::default();
        if code[11] == 0xe8 {
            site.direct = Some(rel(12));
        }
        for len in 2..=7 {
            let at = 16 - len;
            // An FF /2 reading inside a `call rel32`'s displacement is those bytes read
            // twice, not a second call: only one that spans the E8 byte competes with it.
            if site.direct.is_some() && at > 11 {
                continue;
            }
            if code[at] != 0xff || indirect_call_len(&code[at + 1..]) != Some(len) {
                continue;
            }
            if len == 6 && code[at + 1] == 0x15 {
                site.slot = Some(rel(12));
            } else {
                site.indirect = true;
            }
        }
        site
    }

    pub(crate) fn is_call(&self) -> bool {
        self.direct.is_some() || self.slot.is_some() || self.indirect
    }
}

/// The length of `FF /2` with this ModRM (and what follows), opcode included.
fn indirect_call_len(rest: &[u8]) -> Option<usize> {
    let modrm = *rest.first()?;
    if (modrm >> 3) & 7 != 2 {
        return None;
    }
    let md = modrm >> 6;
    let rm = modrm & 7;
    let sib = md != 3 && rm == 4;
    let disp = match md {
        0 if rm == 5 => 4,
        0 if sib && rest.get(1).is_some_and(|s| s & 7 == 5) => 4,
        0 | 3 => 0,
        1 => 1,
        _ => 4,
    };
    Some(2 + usize::from(sib) + disp)
}

/// Whether the bytes before a return address end with a call instruction.
#[cfg(test)]
fn ends_with_call(code: &[u8; 16]) -> bool {
    CallSite::decode(code, 0).is_call()
}

/// The GOT slot a PLT stub at `at` jumps through, from the stub's first bytes: `jmp
/// *disp32(%rip)` (FF 25), after an `endbr64` (F3 0F 1E FA) and a `bnd` prefix (F2) when
/// the stub has them (`.plt`, `.plt.sec`, `.plt.got` entries all start so).
pub(crate) fn plt_slot(code: &[u8; 16], at: u64) -> Option<u64> {
    let mut i = 0;
    if code[..4] == [0xf3, 0x0f, 0x1e, 0xfa] {
        i = 4;
    }
    if code[i] == 0xf2 {
        i += 1;
    }
    if code[i..i + 2] != [0xff, 0x25] {
        return None;
    }
    let d = i32::from_le_bytes([code[i + 2], code[i + 3], code[i + 4], code[i + 5]]);
    let next = at.wrapping_add(i as u64 + 6);
    Some(next.wrapping_add_signed(i64::from(d)))
}

/// How one recovered frame's call site compares with its callee.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The call names the callee's function.
    Confirmed,
    /// An indirect call whose target cannot be read back: accepted on the other checks.
    Indirect,
    /// No call instruction ends at the return address.
    NotACall,
    /// The call names another function (a tail call, or a frame of a later moment), or the
    /// callee's function is not known (no FDE covers it) so a direct call cannot be checked.
    WrongCallee,
}

/// What a verdict needs to know of the callee and of the process.
pub(crate) struct Callee {
    /// The callee frame's lookup address (its instruction pointer, or its return address
    /// minus 1), and the entry of the function that holds it, when an FDE covers it.
    pub pc: u64,
    pub entry: Option<u64>,
}

/// Judges the call site `site` against `callee`. `resolve` follows a target through a PLT
/// stub (the address its GOT slot holds, when the target is one); `slot` reads a GOT slot.
pub(crate) fn judge(
    site: &CallSite,
    callee: &Callee,
    mut resolve: impl FnMut(u64) -> Option<u64>,
    mut slot: impl FnMut(u64) -> Option<u64>,
) -> Verdict {
    if !site.is_call() {
        return Verdict::NotACall;
    }
    let names_callee = |t: u64| {
        // The callee is the target's own code (a PLT stub, a function a few bytes in), or
        // the function the target begins.
        (callee.pc >= t && callee.pc - t < 16) || callee.entry == Some(t)
    };
    if let Some(t) = site.direct
        && (names_callee(t) || resolve(t).is_some_and(names_callee))
    {
        return Verdict::Confirmed;
    }
    if let Some(s) = site.slot
        && slot(s).is_some_and(|t| names_callee(t) || resolve(t).is_some_and(names_callee))
    {
        return Verdict::Confirmed;
    }
    if site.indirect {
        Verdict::Indirect
    } else {
        Verdict::WrongCallee
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_tail(tail: &[u8]) -> [u8; 16] {
        let mut c = [0x90u8; 16];
        c[16 - tail.len()..].copy_from_slice(tail);
        c
    }

    #[test]
    fn recognizes_the_call_encodings_compilers_emit() {
        // call rel32
        assert!(ends_with_call(&with_tail(&[0xe8, 1, 2, 3, 4])));
        // call *%rax, call *%r11 (REX.B)
        assert!(ends_with_call(&with_tail(&[0xff, 0xd0])));
        assert!(ends_with_call(&with_tail(&[0x41, 0xff, 0xd3])));
        // call *0x18(%rax), call *0x100(%rbx)
        assert!(ends_with_call(&with_tail(&[0xff, 0x50, 0x18])));
        assert!(ends_with_call(&with_tail(&[0xff, 0x93, 0, 1, 0, 0])));
        // call *(%rax), call *0x8(%rsp) (SIB)
        assert!(ends_with_call(&with_tail(&[0xff, 0x10])));
        assert!(ends_with_call(&with_tail(&[0xff, 0x54, 0x24, 0x08])));
        // call *disp32(%rip): PLT-less calls through the GOT
        assert!(ends_with_call(&with_tail(&[0xff, 0x15, 1, 2, 3, 4])));
        // call *0x10(,%rax,8) (SIB without base: disp32)
        assert!(ends_with_call(&with_tail(&[
            0xff, 0x14, 0xc5, 0x10, 0, 0, 0
        ])));
    }

    #[test]
    fn rejects_what_is_not_a_call() {
        // nops; jmp *%rax (FF /4); push (FF /6); a ret
        assert!(!ends_with_call(&[0x90; 16]));
        assert!(!ends_with_call(&with_tail(&[0xff, 0xe0])));
        assert!(!ends_with_call(&with_tail(&[0xff, 0x30])));
        assert!(!ends_with_call(&with_tail(&[0xc3])));
        // FF /2 with a ModRM that needs a displacement the bytes do not leave room for.
        assert!(!ends_with_call(&with_tail(&[0xff, 0x90, 1, 2])));
    }

    #[test]
    fn decodes_each_calls_target() {
        let ra = 0x1000;
        // call rel32 -0x100: target ra - 0x100.
        let s = CallSite::decode(&with_tail(&[0xe8, 0x00, 0xff, 0xff, 0xff]), ra);
        assert_eq!((s.direct, s.slot, s.indirect), (Some(0xf00), None, false));
        // call *0x20(%rip): the slot at ra + 0x20.
        let s = CallSite::decode(&with_tail(&[0xff, 0x15, 0x20, 0, 0, 0]), ra);
        assert_eq!((s.direct, s.slot, s.indirect), (None, Some(0x1020), false));
        // call *%rax
        let s = CallSite::decode(&with_tail(&[0xff, 0xd0]), ra);
        assert_eq!((s.direct, s.slot, s.indirect), (None, None, true));
        // A call rel32 whose displacement ends in bytes that read as `call *%rax` (FF D0):
        // one direct call, not also an indirect one.
        let s = CallSite::decode(&with_tail(&[0xe8, 0x10, 0x20, 0xff, 0xd0]), ra);
        assert_eq!((s.direct.is_some(), s.indirect), (true, false));
    }

    #[test]
    fn follows_the_plt_stubs_linkers_emit() {
        // .plt.sec with IBT: endbr64; bnd jmp *0x2fe2(%rip)
        let sec = with_head(&[0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25, 0xe2, 0x2f, 0, 0]);
        assert_eq!(plt_slot(&sec, 0x1000), Some(0x1000 + 11 + 0x2fe2));
        // classic lazy .plt: jmp *0x2fe2(%rip); push $0; jmp .plt
        let lazy = with_head(&[0xff, 0x25, 0xe2, 0x2f, 0, 0, 0x68, 0, 0, 0, 0]);
        assert_eq!(plt_slot(&lazy, 0x1000), Some(0x1000 + 6 + 0x2fe2));
        // Not a stub: a function's prologue.
        assert_eq!(
            plt_slot(&with_head(&[0x55, 0x48, 0x89, 0xe5]), 0x1000),
            None
        );
    }

    fn with_head(head: &[u8]) -> [u8; 16] {
        let mut c = [0xccu8; 16];
        c[..head.len()].copy_from_slice(head);
        c
    }

    #[test]
    fn a_call_is_confirmed_only_when_it_names_the_callees_function() {
        let callee = Callee {
            pc: 0x2010,
            entry: Some(0x2000),
        };
        let no = |_| None;
        let direct = |t| CallSite {
            direct: Some(t),
            ..CallSite::default()
        };
        assert_eq!(judge(&direct(0x2000), &callee, no, no), Verdict::Confirmed);
        // Another function: a tail call, or a frame of a later moment.
        assert_eq!(
            judge(&direct(0x3000), &callee, no, no),
            Verdict::WrongCallee
        );
        // Through a PLT stub whose GOT slot holds the callee's entry.
        let plt = |t| (t == 0x500).then_some(0x2000);
        assert_eq!(judge(&direct(0x500), &callee, plt, no), Verdict::Confirmed);
        // The callee is the stub itself (a sample in a PLT entry).
        let in_stub = Callee {
            pc: 0x504,
            entry: None,
        };
        assert_eq!(judge(&direct(0x500), &in_stub, no, no), Verdict::Confirmed);
        // No FDE: the callee's function is not known, a direct call cannot be confirmed.
        let unknown = Callee {
            pc: 0x2010,
            entry: None,
        };
        assert_eq!(
            judge(&direct(0x2000), &unknown, no, no),
            Verdict::WrongCallee
        );
        // call *GOT(%rip): the slot read from the process.
        let got = CallSite {
            slot: Some(0x9000),
            ..CallSite::default()
        };
        let slot = |s| (s == 0x9000).then_some(0x2000);
        assert_eq!(judge(&got, &callee, no, slot), Verdict::Confirmed);
        assert_eq!(judge(&got, &callee, no, no), Verdict::WrongCallee);
        // Through a register: nothing to compare.
        let reg = CallSite {
            indirect: true,
            ..CallSite::default()
        };
        assert_eq!(judge(&reg, &callee, no, no), Verdict::Indirect);
        assert_eq!(
            judge(&CallSite::default(), &callee, no, no),
            Verdict::NotACall
        );
    }
}
