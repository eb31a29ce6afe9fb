#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Another perf session recording page faults at the same time: the kernel gives software
//! events that fire together one sample's data, so memperf's samples come back with the
//! other session's sample id. They are attributed (here, to the only software event) and
//! counted, never dropped silently.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::*;

#[test]
fn samples_with_another_sessions_id_are_attributed_not_dropped() {
    if !require_perf("foreign ids") || !require_perf_tool("foreign ids") {
        return;
    }
    // One software event beside a tracepoint: attributed as the only software event.
    check_attributed("page-faults,syscalls:sys_enter_mmap", &["page-faults"]);
    // Two software events: each has rings of its own, and the ring tells.
    check_attributed("page-faults,minor-faults", &["page-faults", "minor-faults"]);
}

/// Records `events` with memperf, then runs perf record -a on a 5000-page workload; each of
/// `counted` must have exactly the workload's 5000 faults.
fn check_attributed(events: &str, counted: &[&str]) {
    let dir = scratch();
    let ours = dir.path().join("ours.data");
    let pf = fixture("pagefault", Variant::Fp);
    let _turn = recording_turn();
    // memperf first, perf second: the kernel puts the newest session's event first, and
    // its id goes on memperf's samples.
    let mut rec = memperf()
        .args(["record", "-e", events, "-a", "--duration", "4"])
        .args(["-m", "16384", "-o"])
        .arg(&ours)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(rec.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let perf = Command::new("perf")
        .args(["record", "-q", "-e", "page-faults", "-a", "-o"])
        .arg(dir.path().join("perf.data"))
        .arg("--")
        .arg(&pf)
        .arg("5000")
        .output()
        .unwrap();
    assert!(perf.status.success(), "{}", stderr(&perf));
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    // The summary's prose is wrapped at 80 columns: one message, one line again.
    let rest = joined(&rest);
    assert!(rec.wait().unwrap().success(), "{rest}");

    assert!(rest.contains("lost 0 events"), "{rest}");
    for event in counted {
        let o = run_memperf(&[
            "report",
            "-q",
            "--folded",
            "--event",
            event,
            "-i",
            ours.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let faults: u64 = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| l.contains("pf_level3;touch_pages"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum();
        assert_eq!(faults, 5000, "{events} / {event}: {rest}");
    }
    // When the kernel did give memperf's samples perf's id, the summary says how many and
    // that none was skipped.
    if let Some(l) = rest
        .lines()
        .find(|l| l.contains("another perf session's event"))
    {
        assert!(l.contains(", 0 skipped"), "{l}");
    }
}
