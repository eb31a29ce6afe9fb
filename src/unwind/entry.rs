//! The function a program's `_start` hands the C library as its `main`, read from
//! `_start`'s own code.
//!
//! Why the unwinder wants it: the C library calls `main` through a register
//! (`__libc_start_call_main`'s `call *%rax`), and a call through a register at the copy's
//! cut ties nothing read past the copy to it (`settle`), so a copy that ends inside
//! `main`'s frame (a big `main`, as sqlite3's shell has: 5.4 KiB) left every such stack
//! truncated. When the frame just below the cut is `main` itself, its caller cannot have
//! changed since the sample: `main` is entered once, its return address stays in the same
//! slot until it returns, and the frames above it (`__libc_start_call_main`,
//! `__libc_start_main`, `_start`) are the main thread's base, made once and never left.
//! After `main` returns, the slot holds the return from `exit`'s direct call, which names
//! `exit` and fails the call check. So a register call at the cut whose callee is `main`
//! is as good as a confirmed one.
//!
//! glibc's x86-64 `_start` loads `main` into `%rdi` by the instruction just before its call
//! of `__libc_start_main` (`call *…(%rip)` through the GOT, `call rel32`, or in a static
//! link `addr32 call rel32`), and halts after it:
//!
//! ```text
//! lea  main(%rip),%rdi      48 8d 3d rel32       (PIE, main local)
//! mov  main@GOT(%rip),%rdi  48 8b 3d rel32       (PIE, main from the GOT)
//! mov  $main,%rdi           48 c7 c7 imm32       (non-PIE)
//! mov  $main,%edi           bf imm32             (non-PIE, small code model)
//! call *__libc_start_main@GOTPCREL(%rip) / call __libc_start_main
//! hlt
//! ```
//!
//! Anything else (musl's `_start_c`, Go, a hand-written entry) names no `main`, and the
//! rule does not apply. (Debian's static links have no `.eh_frame_hdr`, so their functions'
//! extents are unknown and no frame past their copies is kept, this rule or not.)

/// How many bytes of `_start` are read: its call comes within its first 48 on every glibc.
pub(super) const START_CODE: usize = 48;

/// The address `_start` passes as `main`, from `code`, `_start`'s first bytes at address
/// `start`; `word` reads a GOT slot of the process. `None` unless the code is the shape
/// above.
pub(super) fn main_passed_by_start(
    code: &[u8],
    start: u64,
    mut word: impl FnMut(u64) -> Option<u64>,
) -> Option<u64> {
    let mut call = first_call_then_hlt(code)?;
    // A static link's `call` is `addr32 call rel32` (ld rewrites the GOT call).
    if call > 0 && code[call - 1] == 0x67 && code[call] == 0xe8 {
        call -= 1;
    }
    // The 4 bytes that end the load, just before the call.
    let tail = u32::from_le_bytes(code.get(call.checked_sub(4)?..call)?.try_into().ok()?);
    if call >= 7 {
        // rip-relative: from the end of the load, which is the call's address.
        let rip_target = start
            .wrapping_add(call as u64)
            .wrapping_add_signed(i64::from(tail as i32));
        match code[call - 7..call - 4] {
            [0x48, 0x8d, 0x3d] => return Some(rip_target),
            [0x48, 0x8b, 0x3d] => return word(rip_target),
            [0x48, 0xc7, 0xc7] => return Some(i64::from(tail as i32) as u64),
            _ => {}
        }
    }
    (call >= 5 && code[call - 5] == 0xbf).then_some(u64::from(tail))
}

/// Where `_start`'s call of `__libc_start_main` begins: the first `call *rel32(%rip)` or
/// `call rel32` followed by `hlt`.
fn first_call_then_hlt(code: &[u8]) -> Option<usize> {
    (0..code.len()).find(|&k| {
        let len = match code[k..] {
            [0xff, 0x15, _, _, _, _, ..] => 6,
            [0xe8, _, _, _, _, ..] => 5,
            _ => return false,
        };
        code.get(k + len) == Some(&0xf4)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Debian's `_start`s: sqlite3 and ls (PIE, `lea`), python3 and cc1 (non-PIE, `mov`).
    const PIE_LEA: [u8; 34] = [
        0x31, 0xed, 0x49, 0x89, 0xd1, 0x5e, 0x48, 0x89, 0xe2, 0x48, 0x83, 0xe4, 0xf0, 0x50, 0x54,
        0x45, 0x31, 0xc0, 0x31, 0xc9, 0x48, 0x8d, 0x3d, 0xd5, 0xe6, 0xff, 0xff, 0xff, 0x15, 0x47,
        0x08, 0x04, 0x00, 0xf4,
    ];
    const NON_PIE_MOV: [u8; 34] = [
        0x31, 0xed, 0x49, 0x89, 0xd1, 0x5e, 0x48, 0x89, 0xe2, 0x48, 0x83, 0xe4, 0xf0, 0x50, 0x54,
        0x45, 0x31, 0xc0, 0x31, 0xc9, 0x48, 0xc7, 0xc7, 0xa0, 0x7c, 0x62, 0x00, 0xff, 0x15, 0x0f,
        0xe4, 0x31, 0x00, 0xf4,
    ];

    #[test]
    fn reads_main_from_glibcs_start() {
        // sqlite3: _start at 0xa780, `lea -0x192b(%rip),%rdi` ending at 0xa79b -> 0x8e70.
        assert_eq!(
            main_passed_by_start(&PIE_LEA, 0xa780, |_| None),
            Some(0x8e70)
        );
        // python3: `mov $0x627ca0,%rdi`.
        assert_eq!(
            main_passed_by_start(&NON_PIE_MOV, 0x627bb0, |_| None),
            Some(0x627ca0)
        );
        // The GOT form reads the slot the load names.
        let mut got = PIE_LEA;
        got[21] = 0x8b;
        let slot = 0xa79bu64.wrapping_add_signed(-0x192b);
        assert_eq!(
            main_passed_by_start(&got, 0xa780, |s| (s == slot).then_some(0x1234)),
            Some(0x1234)
        );
        // `mov $imm32,%edi`, a direct call.
        let small = [
            0x31, 0xed, 0xbf, 0x10, 0x20, 0x40, 0x00, 0xe8, 1, 2, 3, 4, 0xf4,
        ];
        assert_eq!(
            main_passed_by_start(&small, 0x400000, |_| None),
            Some(0x402010)
        );
    }

    #[test]
    fn other_entries_name_no_main() {
        // musl: `call _start_c` with %rdi = %rsp, and no hlt after it.
        let musl = [
            0x48, 0x31, 0xed, 0x48, 0x89, 0xe7, 0x48, 0x8d, 0x35, 1, 2, 3, 4, 0x48, 0x83, 0xe4,
            0xf0, 0xe8, 5, 6, 7, 8,
        ];
        assert_eq!(main_passed_by_start(&musl, 0x1000, |_| None), None);
        // A call with no load of %rdi just before it.
        let mut no_load = PIE_LEA;
        no_load[20..27].fill(0x90);
        assert_eq!(main_passed_by_start(&no_load, 0xa780, |_| None), None);
        assert_eq!(main_passed_by_start(&[], 0, |_| None), None);
        assert_eq!(main_passed_by_start(&PIE_LEA[..20], 0xa780, |_| None), None);
    }
}
