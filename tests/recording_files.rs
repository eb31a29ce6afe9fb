#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The recording as a root tool must write it and a reader must take it: readable by its
//! owner only, never written through a symbolic link or over another user's file, readable
//! after the recorder was killed or its disk filled up, and the command it started stopped
//! when it cannot go on. Readers refuse devices and foreign streams at once.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// A loop of the page-fault workload that runs until it is stopped; it writes its pid first.
fn endless(dir: &Path) -> (Vec<String>, PathBuf) {
    let pf = fixture("pagefault", Variant::NoFp);
    let pidfile = dir.join("sh.pid");
    let script = format!(
        "echo $$ > {}; while :; do {} 2000 >/dev/null; done",
        pidfile.display(),
        pf.display()
    );
    (vec!["sh".into(), "-c".into(), script], pidfile)
}

fn pid_in(file: &Path) -> i32 {
    std::fs::read_to_string(file)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn alive(pid: i32) -> bool {
    // A zombie still has /proc/PID: look at its state.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|r| !r.trim_start().starts_with('Z'))
    })
}

/// Waits (up to a generous limit, which only guards against a hang) until `what` holds.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `memperf report` and `memperf script` of a file, which must succeed: (report, notes).
fn read_back(file: &Path) -> (String, String) {
    let f = file.to_str().unwrap();
    let r = run_memperf(&["report", "-q", "-i", f]);
    assert!(r.status.success(), "{}", stderr(&r));
    let s = run_memperf(&["script", "-q", "-i", f]);
    assert!(s.status.success(), "{}", stderr(&s));
    assert!(!s.stdout.is_empty());
    (String::from_utf8_lossy(&r.stdout).into_owned(), stderr(&s))
}

/// `read N samples up to byte X` from a note: (N, X).
fn unfinished_note(text: &str) -> (u64, u64) {
    let rest = text
        .split("the recording was not finished: read ")
        .nth(1)
        .unwrap_or_else(|| panic!("no note that the recording was not finished in:\n{text}"));
    let mut words = rest.split_whitespace();
    let num = |w: Option<&str>| -> u64 {
        let w = w.unwrap();
        w.trim_end_matches(|c: char| !c.is_ascii_digit())
            .parse()
            .unwrap()
    };
    let n = num(words.next());
    let x = num(words.nth(4));
    (n, x)
}

#[test]
fn recordings_are_private_and_never_written_through_a_link_or_over_another_users_file() {
    if !require_perf("recording modes") {
        return;
    }
    let dir = scratch();
    let pf = fixture("pagefault", Variant::NoFp);
    let out = dir.path().join("m.data");
    record(&out, &["-q"], &pf, &["10"]);
    assert_eq!(std::fs::metadata(&out).unwrap().mode() & 0o777, 0o600);
    // Again: the first moves aside to .old, as perf does, and the new one is 0600 too.
    record(&out, &["-q"], &pf, &["10"]);
    assert!(dir.path().join("m.data.old").exists());
    assert_eq!(std::fs::metadata(&out).unwrap().mode() & 0o777, 0o600);

    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"keep me").unwrap();
    let link = dir.path().join("link.data");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let o = run_memperf(&["record", "-q", "-o", link.to_str().unwrap(), "--", "true"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("symbolic link"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");

    if is_root() {
        let theirs = dir.path().join("theirs.data");
        std::fs::write(&theirs, b"not yours").unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o644)).unwrap();
        let o = run_memperf(&["record", "-q", "-o", theirs.to_str().unwrap(), "--", "true"]);
        assert!(!o.status.success());
        assert!(
            stderr(&o).contains("belongs to uid 65534"),
            "{}",
            stderr(&o)
        );
        assert_eq!(std::fs::read(&theirs).unwrap(), b"not yours");

        // The derived outputs are not written through another user's link either.
        for (flag, name) in [("--flamegraph", "g.svg"), ("--pprof", "p.pb.gz")] {
            let link = dir.path().join(name);
            std::os::unix::fs::symlink(&victim, &link).unwrap();
            std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
            let o = run_memperf(&[
                "report",
                "-q",
                "-i",
                out.to_str().unwrap(),
                flag,
                link.to_str().unwrap(),
            ]);
            assert!(!o.status.success(), "{flag}");
            assert!(stderr(&o).contains("not written through"), "{}", stderr(&o));
            assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
        }
    }
}

#[test]
fn a_killed_recording_reads_up_to_its_last_record() {
    if !require_perf("killed recording") || !require_perf_tool("killed recording") {
        return;
    }
    let dir = scratch();
    let out = dir.path().join("killed.data");
    let (argv, pidfile) = endless(dir.path());
    let _turn = recording_turn();
    let mut rec = memperf()
        .args(["record", "-q", "-e", "page-faults", "-o"])
        .arg(&out)
        .arg("--")
        .args(&argv)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("a pid file", || pidfile.exists());
    let sh = pid_in(&pidfile);
    // Past the first checkpoint (once a second), with records flushed since.
    wait_until("records", || {
        std::fs::metadata(&out).is_ok_and(|m| m.len() > 4 << 20)
    });
    std::thread::sleep(Duration::from_millis(1500));
    rec.kill().unwrap(); // SIGKILL: nothing of the recorder runs after this
    rec.wait().unwrap();
    let _ = Command::new("kill").arg(sh.to_string()).status();

    let size = std::fs::metadata(&out).unwrap().len();
    let (report, script_notes) = read_back(&out);
    let (n, at) = unfinished_note(&report);
    assert!(n > 1000, "{report}");
    assert!(at > 0 && at <= size, "{at} of {size}");
    assert!(report.contains("pf_level1"), "{report}");
    assert_eq!(unfinished_note(&script_notes), (n, at));

    // perf reads the file too, up to the data size of the last checkpoint.
    let p = Command::new("perf")
        .args(["script", "-i"])
        .arg(&out)
        .output()
        .unwrap();
    let perf_samples = String::from_utf8_lossy(&p.stdout)
        .lines()
        .filter(|l| l.contains("page-faults"))
        .count() as u64;
    assert!(
        perf_samples > 0 && perf_samples <= n,
        "{perf_samples} of {n}"
    );
}

/// A small tmpfs, unmounted however the test ends.
struct SmallDisk(PathBuf);

impl SmallDisk {
    fn mount(dir: &Path) -> Option<SmallDisk> {
        let at = dir.join("small");
        std::fs::create_dir(&at).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=2m", "tmpfs"])
            .arg(&at)
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(SmallDisk(at))
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_stops_the_command_and_leaves_a_readable_file() {
    if !require_perf("full disk") || !is_root() {
        return;
    }
    let dir = scratch();
    let Some(disk) = SmallDisk::mount(dir.path()) else {
        panic!("could not mount a tmpfs as root");
    };
    let out = disk.0.join("full.data");
    let (argv, pidfile) = endless(dir.path());
    let o = {
        let _turn = recording_turn();
        memperf()
            .args(["record", "-e", "page-faults", "--unwind", "offline", "-o"])
            .arg(&out)
            .arg("--")
            .args(&argv)
            .output()
            .unwrap()
    };
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("No space left on device"), "{err}");
    let sh = pid_in(&pidfile);
    assert!(
        err.contains(&format!("stopped the command it started (pid {sh})")),
        "{err}"
    );
    assert!(!alive(sh), "the command {sh} still runs");
    let (report, _) = read_back(&out);
    let (n, _) = unfinished_note(&report);
    assert!(n > 0, "{report}");
}

#[test]
fn a_recording_into_dev_null_finishes() {
    // As with perf, to measure the recorder alone: /dev/null cannot be synced (EINVAL), and
    // must be neither moved aside nor replaced.
    if !require_perf("recording into /dev/null") {
        return;
    }
    let pf = fixture("pagefault", Variant::NoFp);
    let o = record(Path::new("/dev/null"), &[], &pf, &["100"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(summary_samples(&stderr(&o)) >= 100, "{}", stderr(&o));
    let meta = std::fs::metadata("/dev/null").unwrap();
    assert!(std::os::unix::fs::FileTypeExt::is_char_device(
        &meta.file_type()
    ));
    assert!(!Path::new("/dev/null.old").exists());
}

#[test]
fn devices_directories_and_foreign_streams_are_refused_at_once() {
    let o = run_memperf(&["report", "-i", "/dev/zero"]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("`/dev/zero` is a device, not a perf.data file"),
        "{}",
        stderr(&o)
    );
    let dir = scratch();
    let o = run_memperf(&["report", "-i", dir.path().to_str().unwrap()]);
    assert!(stderr(&o).contains("is a directory"), "{}", stderr(&o));

    // A stream of something else: refused on its first bytes, not read to its end.
    let mut child = memperf()
        .args(["report", "-i", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let chunk = vec![b'y'; 1 << 16];
        // Endless unless the reader stops reading: the write then fails (EPIPE).
        while std::io::Write::write_all(&mut stdin, &chunk).is_ok() {}
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(
        stderr(&out).contains("standard input: not a perf.data file (magic \"yyyyyyyy\")"),
        "{}",
        stderr(&out)
    );

    // A valid pipe-mode header, then zeros without end: read record by record, refused at
    // the first impossible one, not read until memory runs out.
    let mut child = memperf()
        .args(["report", "-i", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let mut header = b"PERFILE2".to_vec();
        header.extend_from_slice(&16u64.to_le_bytes());
        let _ = std::io::Write::write_all(&mut stdin, &header);
        let zeros = vec![0u8; 1 << 16];
        while std::io::Write::write_all(&mut stdin, &zeros).is_ok() {}
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("has size 0"), "{}", stderr(&out));

    // Bytes that are not text are shown escaped, not as U+FFFD.
    let bad = dir.path().join("bad.data");
    std::fs::write(&bad, b"\xff\xfe\x00abcdefghij").unwrap();
    let o = run_memperf(&["report", "-i", bad.to_str().unwrap()]);
    assert!(
        stderr(&o).contains(r#"(magic "\xff\xfe\x00abcde")"#),
        "{}",
        stderr(&o)
    );
}
