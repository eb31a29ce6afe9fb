//! Behaviour under kernel settings that are global to the machine: each test changes one
//! setting with a guard that restores it, in a binary of its own so that no other test
//! runs meanwhile.

mod common;

use common::kernel::Sysctl;
use common::*;

/// With kernel symbols hidden even from root (kptr_restrict=2), a recording with kernel
/// stacks says why its kernel frames will be [unknown], and how to fix it.
#[test]
fn hidden_kernel_symbols_are_explained() {
    if !require_perf("kptr_restrict note") || !is_root() {
        return;
    }
    let dir = scratch();
    let out = dir.path().join("k.data");
    let o = out.to_str().unwrap();
    let note = "kernel symbols are hidden (kernel.kptr_restrict=2)";
    {
        let Some(_hidden) = Sysctl::set("kernel/kptr_restrict", "2") else {
            panic!("root cannot set kernel.kptr_restrict");
        };
        let r = run_memperf(&[
            "record",
            "-e",
            "page-faults",
            "--call-graph",
            "fp",
            "-o",
            o,
            "--",
            "true",
        ]);
        assert!(r.status.success(), "{}", stderr(&r));
        assert!(stderr(&r).contains(note), "{}", stderr(&r));
        // User-only stacks need no kernel symbols: no note.
        let r = run_memperf(&[
            "record",
            "-e",
            "page-faults",
            "--call-graph",
            "fp",
            "--user-only",
            "-o",
            o,
            "--",
            "true",
        ]);
        assert!(r.status.success(), "{}", stderr(&r));
        assert!(!stderr(&r).contains(note), "{}", stderr(&r));
    }
    let r = run_memperf(&[
        "record",
        "-e",
        "page-faults",
        "--call-graph",
        "fp",
        "-o",
        o,
        "--",
        "true",
    ]);
    assert!(!stderr(&r).contains("kptr_restrict"), "{}", stderr(&r));
}
