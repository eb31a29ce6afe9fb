#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Permission errors as an unprivileged user meets them, for real: a user made for the
//! test runs memperf, and each refusal names the rule the kernel actually applied (ptrace
//! access for another user's process, privileges for uprobes, paranoid -1 and a readable
//! tracefs for tracepoints), not a fix that does not work.

mod common;

use common::user::TestUser;
use common::*;

#[test]
fn unprivileged_refusals_name_the_rule_the_kernel_applied() {
    if !is_root() {
        eprintln!("skipping: needs root to create a user");
        return;
    }
    let Some(user) = TestUser::create() else {
        panic!("useradd failed (as root)");
    };
    let paranoid = perf_event_paranoid();
    // memperf mounts tracefs when root finds it absent (a machine just booted has none):
    // after this the user meets the rule for tracepoints, not the missing mount.
    let o = run_memperf(&[
        "record",
        "-o",
        "/dev/null",
        "-e",
        "syscalls:sys_enter_brk",
        "--",
        "true",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        std::path::Path::new("/sys/kernel/tracing/events").exists()
            || std::path::Path::new("/sys/kernel/debug/tracing/events").exists()
    );

    // Another user's process (init): ptrace access decides, not perf_event_paranoid.
    let o = user.sh("$MEMPERF record -o /dev/null -p 1");
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("needs ptrace access"), "{err}");
    assert!(err.contains("it runs as uid 0"), "{err}");
    assert!(!err.contains("sysctl kernel.perf_event_paranoid"), "{err}");

    // Its own process, through uprobes: privileges, whatever paranoid says.
    let o = user.sh("sleep 30 & $MEMPERF leak -p $! 1 1; st=$?; kill $!; exit $st");
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("uprobes"), "{err}");
    assert!(
        err.contains("no kernel.perf_event_paranoid value allows them"),
        "{err}"
    );

    // A tool whose tracepoint is optional runs without it, and says so: hfaults counts
    // hugetlb faults of one's own command with page-fault events alone.
    if paranoid <= 2 {
        let o = user.sh("$MEMPERF hfaults -- true");
        let err = stderr(&o);
        assert!(o.status.success(), "{err}");
        if paranoid > -1 {
            assert!(
                err.contains("going on without `kmem:mm_page_alloc`: tracepoints need root"),
                "{err}"
            );
            assert!(
                err.contains("transparent huge page faults not told apart"),
                "{err}"
            );
        }
    }

    // A tracepoint: privileges, or paranoid -1 with a readable tracefs.
    if paranoid > -1 {
        let o = user.sh("$MEMPERF record -o /tmp/never.data -e syscalls:sys_enter_brk -- true");
        let err = stderr(&o);
        assert!(!o.status.success(), "{err}");
        assert!(err.contains("perf_event_paranoid=-1"), "{err}");
    }
}
