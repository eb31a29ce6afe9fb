#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `-p` on a process that exits while its parent never reaps it: memperf ends once the
//! target has exited, not when the parent goes (it once ran until then, forever for a
//! parent that never waits).

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// How long the target lives after it is started.
const CHILD_LIVES: Duration = Duration::from_secs(4);
/// How long memperf may take to end after the target's exit.
const ENDS_WITHIN: Duration = Duration::from_secs(6);

/// A parent (`sleep 30`) whose child exits after `CHILD_LIVES` and stays a zombie, as
/// the parent never waits. Killed when dropped.
struct NeglectfulParent {
    parent: Child,
    child_pid: String,
}

impl NeglectfulParent {
    fn start() -> NeglectfulParent {
        let script = format!("sleep {} & echo $!; exec sleep 30", CHILD_LIVES.as_secs());
        let mut parent = Command::new("sh")
            .args(["-c", &script])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the parent");
        let mut line = String::new();
        BufReader::new(parent.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the child's pid");
        let child_pid = line.trim().to_string();
        NeglectfulParent { parent, child_pid }
    }
}

impl Drop for NeglectfulParent {
    fn drop(&mut self) {
        let _ = self.parent.kill();
        let _ = self.parent.wait();
    }
}

/// Runs `memperf ARGS` against a target that becomes a zombie; fails unless memperf ends,
/// successfully, soon after the target's exit.
fn ends_when_the_target_is_a_zombie(args: &[&str]) {
    let _turn = recording_turn();
    let target = NeglectfulParent::start();
    let started = Instant::now();
    let mut child = memperf()
        .args(args)
        .args(["-p", &target.child_pid])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start memperf");
    let deadline = CHILD_LIVES + ENDS_WITHIN;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait memperf") {
            break s;
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "memperf {args:?} -p still ran {:?} after its target's start, {:?} after \
                 the target exited (a zombie its parent never reaps)",
                started.elapsed(),
                started.elapsed().saturating_sub(CHILD_LIVES)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).ok();
    assert!(status.success(), "memperf {args:?}: {status}: {err}");
}

#[test]
fn record_p_ends_when_the_target_exits_unreaped() {
    if !require_perf("record -p on a zombie") {
        return;
    }
    let dir = scratch();
    let out = dir.path().join("z.data");
    let out = out.to_str().unwrap();
    ends_when_the_target_is_a_zombie(&["record", "-e", "page-faults", "-o", out]);
}

#[test]
fn stat_p_ends_when_the_target_exits_unreaped() {
    if !require_perf("stat -p on a zombie") {
        return;
    }
    ends_when_the_target_is_a_zombie(&["stat", "-e", "page-faults"]);
}

#[test]
fn a_tool_p_ends_when_the_target_exits_unreaped() {
    if !require_perf("faults -p on a zombie") {
        return;
    }
    ends_when_the_target_is_a_zombie(&["faults"]);
}
