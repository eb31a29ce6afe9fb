//! The rule that finishes a copy cut in `main`'s frame (`settle::Checks::main_at_cut`), on
//! the fixture's real frames: the walk it accepts, and each walk it must refuse because
//! the frames read past the copy could belong to something that is no longer `main`'s
//! caller (more frames than the main thread's base, a walk that does not end in `_start`,
//! `main` itself past the cut, a callee that is not `main`).

use super::*;
use crate::unwind::live::{Recovery, RoundReads};

/// The fixture's main-thread stack walked whole, and where `main` is in it.
struct Whole {
    dump: Dump,
    regs: UserRegs,
    pid: u32,
    u: Unwinders,
    frames: Vec<u64>,
    in_main: usize,
}

impl Whole {
    fn new() -> Whole {
        let (dump, regs) = run_fixture(true);
        let (mut u, pid) = unwinders_for(&dump, UnwindMode::Dwarf);
        let mut frames = Vec::new();
        let outcome = u.unwind(pid, regs, &dump.stack, &mut frames);
        assert_eq!(outcome, UnwindOutcome::Complete);
        let names = exe_frame_names(&dump, &frames);
        let in_main = names.iter().position(|n| n == "main").expect("main");
        assert!(in_main >= 1, "the fixture samples below main: {names:?}");
        Whole {
            dump,
            regs,
            pid,
            u,
            frames,
            in_main,
        }
    }

    /// The lookup address of the frame at `i` (a return address's call, or the sampled ip).
    fn callee(&self, i: usize) -> u64 {
        if i == 0 {
            self.frames[0]
        } else {
            self.frames[i] - 1
        }
    }

    /// The return addresses past `main`'s frame: the main thread's base.
    fn base(&self) -> Vec<u64> {
        self.frames[self.in_main + 1..].to_vec()
    }

    /// Whether the rule finishes a cut whose callee is the frame at `callee` with the
    /// return addresses `past` read past the copy.
    fn accepts(&mut self, callee: usize, past: &[u64]) -> bool {
        let callee = self.callee(callee);
        let mut live = FakeLive::of(&self.dump, self.dump.stack.clone());
        let copy = StackCopy::new(self.regs.sp, &self.dump.stack);
        let mut round = RoundReads::default();
        let rec = Recovery::new(
            (self.pid, self.pid),
            self.regs.sp,
            copy.end(),
            &mut live,
            &mut round,
        );
        let u = &mut self.u;
        let mut checks = settle::Checks {
            p: u.procs.get(&self.pid).expect("the fixture's process"),
            cache: &mut u.cache,
            confirmed: &mut u.confirmed,
            pid: self.pid,
            rec: &rec,
            copy: &copy,
        };
        checks.main_at_cut(callee, past)
    }
}

#[test]
fn a_cut_in_main_is_finished_only_through_the_main_threads_own_base() {
    let mut w = Whole::new();
    let base = w.base();
    assert_eq!(
        base.len(),
        3,
        "__libc_start_call_main, __libc_start_main, _start"
    );
    let main = w.in_main;
    assert!(w.accepts(main, &base), "main's own base is accepted");

    // A fourth frame: more than the base, so the walk went through something else too.
    let longer = [base[0], base[1], base[1], base[2]];
    assert!(
        !w.accepts(main, &longer),
        "more than three frames past the cut"
    );

    // A walk that ends before `_start` (as a thread's ends at `clone3`'s CFI stop).
    assert!(
        !w.accepts(main, &base[..2]),
        "a walk that does not end in _start"
    );

    // `main` past the cut: an outer `main` (a recursive one) may not be the cut frame's
    // caller.
    let through_main = [w.frames[main], base[1], base[2]];
    assert!(
        !w.accepts(main, &through_main),
        "a frame in main past the cut"
    );

    // A callee that is not `main` (the function `main` called), with main's own base.
    assert!(!w.accepts(main - 1, &base), "a cut frame that is not main");
}
