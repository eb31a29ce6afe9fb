//! Walks kept within a round (`unwind::memo`): a sample whose registers and words read are
//! those of a walk before takes that walk and gets exactly what walking gives; with one word
//! different, in a new round, or after a mapping, it walks.

use super::*;

/// One sample of the fixture's thread, its copy `copy`: the frames, outcome and the state
/// the unwinders keep of it.
type Unwound = (Vec<u64>, UnwindOutcome, Option<usize>, Option<StackNeed>);

fn sample(u: &mut Unwinders, pid: u32, regs: UserRegs, copy: &[u8]) -> Unwound {
    let mut frames = Vec::new();
    let outcome = u.unwind(pid, regs, copy, &mut frames);
    (frames, outcome, u.last_recovered(), u.last_need())
}

fn live(dump: &Dump) -> (Unwinders, u32) {
    let (mut u, pid) = unwinders_for(dump, UnwindMode::Dwarf);
    u.set_live(Some(Box::new(FakeLive::of(dump, dump.stack.clone()))));
    (u, pid)
}

/// Three samples with the same copy in one round: the second and third take the first's
/// walk, finished from the live process, and everything the unwinders say of them (frames,
/// outcome, first recovered frame, copy needed, every count) is what walking each gives.
#[test]
fn a_sample_that_reads_the_same_words_takes_the_walk_and_gets_what_walking_gives() {
    let (dump, regs) = run_fixture(true);
    let copy = &dump.stack[..40];
    let (mut kept, pid) = live(&dump);
    kept.begin_round();
    // Without rounds each sample reads the live process afresh, and walks.
    let (mut walked, _) = live(&dump);
    for n in 1..=3u64 {
        let a = sample(&mut kept, pid, regs, copy);
        let b = sample(&mut walked, pid, regs, copy);
        assert_eq!(a, b);
        assert_eq!(a.1, UnwindOutcome::Complete);
        assert!(a.2.is_some(), "finished from the live process");
        assert_eq!(kept.stats(), walked.stats());
        assert_eq!((kept.walks_reused(), walked.walks_reused()), (n - 1, 0));
    }
    // Whole copies, which the walk reads alone: the same.
    for _ in 0..2 {
        assert_eq!(
            sample(&mut kept, pid, regs, &dump.stack),
            sample(&mut walked, pid, regs, &dump.stack)
        );
    }
    assert_eq!(kept.stats(), walked.stats());
    assert_eq!(kept.walks_reused(), 3);
}

/// The same registers, but a return address the walk reads is another in this copy: it is
/// walked, and gets the other stack.
#[test]
fn a_copy_with_one_word_read_changed_is_walked() {
    let (dump, regs) = run_fixture(true);
    let (mut u, pid) = live(&dump);
    u.begin_round();
    let first = sample(&mut u, pid, regs, &dump.stack);
    assert_eq!(first.1, UnwindOutcome::Complete);
    // The slot of the leaf's return address, pointed elsewhere (to the next caller's).
    let ra = first.0[1];
    let slot = dump
        .stack
        .chunks_exact(8)
        .position(|w| u64::from_ne_bytes(w.try_into().unwrap()) == ra)
        .expect("the leaf's return address in the copy")
        * 8;
    let mut other = dump.stack.clone();
    other[slot..slot + 8].copy_from_slice(&first.0[2].to_ne_bytes());
    let changed = sample(&mut u, pid, regs, &other);
    assert_eq!(u.walks_reused(), 0);
    assert_ne!(changed.0, first.0);
    let (mut fresh, _) = live(&dump);
    assert_eq!(changed, sample(&mut fresh, pid, regs, &other));
}

/// A new round (its live pages read again) forgets the walks that read past their copy;
/// a mapping of the process forgets its walks, even one that changes no unwind information
/// (anonymous code: where a walk stops may be judged by the modules around it), and a
/// mapping of another process does not.
#[test]
fn a_new_round_or_a_mapping_of_the_process_forgets_its_walks() {
    let (dump, regs) = run_fixture(true);
    let copy = &dump.stack[..40];
    let (mut u, pid) = live(&dump);
    u.begin_round();
    let first = sample(&mut u, pid, regs, copy);
    assert!(first.2.is_some(), "finished from the live process");
    assert_eq!(sample(&mut u, pid, regs, copy), first);
    assert_eq!(u.walks_reused(), 1);
    u.begin_round();
    assert_eq!(sample(&mut u, pid, regs, copy), first);
    assert_eq!(u.walks_reused(), 1);
    // A whole copy, read alone: its walk holds in the next round too.
    let whole = sample(&mut u, pid, regs, &dump.stack);
    u.begin_round();
    assert_eq!(sample(&mut u, pid, regs, &dump.stack), whole);
    assert_eq!(u.walks_reused(), 2);
    let anon = |pid| exec_event(pid, 0x7000_0000_0000, b"//anon");
    u.handle_mmap(&anon(pid + 1));
    assert_eq!(sample(&mut u, pid, regs, &dump.stack), whole);
    assert_eq!(u.walks_reused(), 3);
    u.handle_mmap(&anon(pid));
    assert_eq!(sample(&mut u, pid, regs, &dump.stack), whole);
    assert_eq!(u.walks_reused(), 3);
    assert_eq!(sample(&mut u, pid, regs, &dump.stack), whole);
    assert_eq!(u.walks_reused(), 4);
}
