#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! glibc creates a thread's arena inside whichever allocator call the thread makes first:
//! when that is free(), which has no return probe, only the stack of the mmap tells that the
//! allocator made it. That mapping is no leak; the program's real leaks still are.

mod common;

use common::*;

#[test]
fn an_arena_made_inside_free_is_not_a_leak() {
    if !require_perf("leak arena") {
        return;
    }
    let prog = fixture("freefirst", Variant::NoFp);
    let cmd = format!("{} 10", prog.display());
    let o = {
        let _turn = recording_turn();
        run_memperf(&["leak", "-c", &cmd])
    };
    let out = String::from_utf8_lossy(&o.stdout);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    // The 64 MiB heap reservation of the thread's arena is not reported, under any stack.
    assert!(!out.contains("67108864 bytes"), "{out}");
    assert!(!out.contains("alloc_new_heap"), "{out}");
    assert!(
        err.contains("made by the allocator itself were left out"),
        "{err}"
    );
    // The real leak, exactly, under its function.
    let (_, after) = out
        .split_once("40960 bytes in 10 allocations from stack")
        .unwrap_or_else(|| panic!("{out}"));
    let first_frame = after.lines().nth(1).unwrap_or("");
    assert!(first_frame.contains("leak_blocks"), "{out}");
}
