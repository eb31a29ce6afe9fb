//! User probes as events (`u:`, `r:`, `sdt:`): exact counts, argument and result sums and
//! stacks of `fixtures/probes.c`, through tracefs and through the uprobe PMU; agreement with
//! `perf probe` + `perf stat` and with `memperf leak`; USDT probes with and without a
//! semaphore; every probe removed on every exit path.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::user::TestUser;
use common::*;

/// probe_add runs N times, probe_alloc 2N times, memperf:plain and memperf:guarded N times.
const N: u64 = 500;

/// Every memperf that places a probe first removes the groups of memperfs that are gone. The
/// lifetime test needs a killed run's probe to stay until its own next start, so it runs alone
/// (write) while the other tests of this file run beside each other (read).
static PROBE_STARTS: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn beside_others() -> std::sync::RwLockReadGuard<'static, ()> {
    PROBE_STARTS.read().unwrap_or_else(|e| e.into_inner())
}

fn probes_fixture() -> std::path::PathBuf {
    fixture("probes", Variant::NoFp)
}

/// A copy of the fixture in `dir`: the probes on it are this test's alone, so it can check
/// that none is left while other tests probe theirs.
fn own_fixture(dir: &tempfile::TempDir, tag: &str) -> std::path::PathBuf {
    let prog = dir.path().join(format!("probes-{tag}"));
    std::fs::copy(probes_fixture(), &prog).unwrap();
    prog
}

/// `memperf stat -e EVENTS -- PROGRAM N` (with `env`): the count of each event, by name.
fn stat_counts(events: &str, program: &Path, env: &[(&str, &str)]) -> Vec<(String, u64)> {
    let _turn = recording_turn();
    let o = memperf()
        .envs(env.iter().copied())
        .args(["stat", "-x", ",", "-e", events, "--"])
        .arg(program)
        .arg(N.to_string())
        .output()
        .expect("run memperf");
    assert!(
        o.status.success(),
        "memperf stat -e {events}: {}",
        stderr(&o)
    );
    // CSV: `count,unit,event,...` on standard error, as perf stat -x prints it.
    stderr(&o)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            Some((f.get(2)?.to_string(), f.first()?.parse().ok()?))
        })
        .collect()
}

fn count_of(counts: &[(String, u64)], name: &str) -> u64 {
    counts
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no count for `{name}` in {counts:?}"))
        .1
}

/// `name=value` fields of the sample lines of `event` in `memperf script` text, summed.
fn field_sum(script: &str, event: &str, field: &str) -> (u64, u64) {
    let (mut n, mut sum) = (0, 0u64);
    let key = format!(" {event}: ");
    for line in script.lines().filter(|l| l.contains(&key)) {
        n += 1;
        let v = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{field}=")))
            .unwrap_or_else(|| panic!("no {field}= in {line}"));
        let v = match v.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).unwrap(),
            None => v.parse().unwrap(),
        };
        sum = sum.wrapping_add(v);
    }
    (n, sum)
}

fn script(file: &Path) -> String {
    let o = run_memperf(&["script", "-i", file.to_str().unwrap()]);
    assert!(o.status.success(), "memperf script: {}", stderr(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The `uprobe_events` lines that probe `path`.
fn probes_on(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string("/sys/kernel/tracing/uprobe_events")
        .or_else(|_| std::fs::read_to_string("/sys/kernel/debug/tracing/uprobe_events"))
        .unwrap_or_default();
    let p = path.to_string_lossy();
    text.lines()
        .filter(|l| l.contains(p.as_ref()))
        .map(String::from)
        .collect()
}

#[test]
fn entry_and_return_probes_count_exactly_with_argument_and_result_sums_and_stacks() {
    let _beside = beside_others();
    if !require_perf("user probes through tracefs") {
        return;
    }
    let dir = scratch();
    let prog = own_fixture(&dir, "entry");
    let p = prog.display().to_string();
    let add = format!("u:{p}:probe_add");
    let alloc = format!("u:{p}:probe_alloc");
    let counts = stat_counts(&format!("{add},{alloc},r:{p}:probe_add"), &prog, &[]);
    assert_eq!(count_of(&counts, &add), N);
    assert_eq!(count_of(&counts, &alloc), 2 * N);
    assert_eq!(count_of(&counts, &format!("r:{p}:probe_add")), N);
    assert!(probes_on(&prog).is_empty(), "{:?}", probes_on(&prog));
    // A kernel filter on an argument: 16i+1 > 1000 for i >= 63.
    let sized = format!("u:{p}:probe_alloc(size=%di)");
    let _turn = recording_turn();
    let o = memperf()
        .args([
            "stat",
            "-x",
            ",",
            "-e",
            &sized,
            "--filter",
            "size > 1000",
            "--",
        ])
        .arg(&prog)
        .arg(N.to_string())
        .output()
        .unwrap();
    drop(_turn);
    assert!(o.status.success(), "{}", stderr(&o));
    let want = format!("{},,{sized},", 2 * N - 63);
    assert!(
        stderr(&o).lines().any(|l| l.starts_with(&want)),
        "{}",
        stderr(&o)
    );

    let out = dir.path().join("probes.data");
    let entry = format!("u:{p}:probe_add(a=%di,b=arg2:s64)");
    let ret = format!("r:{p}:probe_add");
    let sized = format!("u:{p}:probe_alloc(size=%di)");
    record(
        &out,
        &[
            "--call-graph",
            "dwarf",
            "-e",
            &format!("{entry},{ret},{sized}"),
        ],
        &prog,
        &[&N.to_string()],
    );
    assert!(probes_on(&prog).is_empty(), "{:?}", probes_on(&prog));
    let text = script(&out);
    assert_eq!(field_sum(&text, &entry, "a"), (N, N * (N - 1) / 2));
    assert_eq!(field_sum(&text, &entry, "b"), (N, N));
    assert_eq!(field_sum(&text, &ret, "retval"), (N, N * (N + 1) / 2));
    let bytes: u64 = (0..2 * N).map(|i| 16 * i + 1).sum();
    assert_eq!(field_sum(&text, &sized, "size"), (2 * N, bytes));
    // Entry probes unwind from the probed function; a return probe's stack starts at the
    // caller, where the function returned to.
    let samples = parse_script_stacks(&text);
    let of = |ev: &str| -> Vec<Vec<String>> {
        samples
            .iter()
            .filter(|(e, _)| e == ev)
            .map(|(_, f)| f.clone())
            .collect()
    };
    let entries = of(&entry);
    assert_eq!(entries.len() as u64, N);
    assert!(
        entries
            .iter()
            .all(|f| f.starts_with(&["probe_add".into(), "main".into()])),
        "{:?}",
        entries.first()
    );
    let returns = of(&ret);
    assert_eq!(returns.len() as u64, N);
    assert!(
        returns
            .iter()
            .all(|f| f.first().map(String::as_str) == Some("main")),
        "{:?}",
        returns.first()
    );

    // --weight-field weighs each call site by the argument.
    let o = run_memperf(&[
        "report",
        "-i",
        out.to_str().unwrap(),
        "--folded",
        "--event",
        &sized,
        "--weight-field",
        "size",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let folded = String::from_utf8_lossy(&o.stdout);
    let alloc_bytes: u64 = folded
        .lines()
        .filter(|l| l.contains(";main;probe_alloc "))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(alloc_bytes, bytes, "{folded}");
}

/// (event, frame names) of each sample in `memperf script` text.
fn parse_script_stacks(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for line in text.lines() {
        if line.is_empty() {
            continue;
        }
        if !line.starts_with(char::is_whitespace) {
            // `comm pid [cpu] time: EVENT: payload`
            let ev = line
                .split(": ")
                .nth(1)
                .unwrap_or_default()
                .trim()
                .to_string();
            out.push((ev, Vec::new()));
        } else if let Some((_, frames)) = out.last_mut() {
            let sym = line.split_whitespace().nth(1).unwrap_or_default();
            frames.push(sym.split('+').next().unwrap_or(sym).to_string());
        }
    }
    out
}

#[test]
fn the_uprobe_pmu_counts_and_unwinds_like_tracefs() {
    let _beside = beside_others();
    if !require_perf("user probes through the uprobe PMU") {
        return;
    }
    let prog = probes_fixture();
    let p = prog.display().to_string();
    let env = [("MEMPERF_PROBE_VIA", "pmu")];
    let add = format!("u:{p}:probe_add");
    let guarded = format!("sdt:{p}:memperf:guarded");
    let counts = stat_counts(&format!("{add},r:{p}:probe_add,{guarded}"), &prog, &env);
    assert_eq!(count_of(&counts, &add), N);
    assert_eq!(count_of(&counts, &format!("r:{p}:probe_add")), N);
    // The semaphore through the PMU's ref_ctr_offset.
    assert_eq!(count_of(&counts, &guarded), N);

    let dir = scratch();
    let out = dir.path().join("pmu.data");
    let _turn = recording_turn();
    let o = memperf()
        .envs(env)
        .args([
            "record",
            "-q",
            "-m",
            TEST_RING_PAGES,
            "--call-graph",
            "dwarf",
            "-e",
            &add,
        ])
        .arg("-o")
        .arg(&out)
        .arg("--")
        .arg(&prog)
        .arg(N.to_string())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let samples = parse_script_stacks(&script(&out));
    assert_eq!(samples.len() as u64, N);
    assert!(
        samples
            .iter()
            .all(|(_, f)| f.starts_with(&["probe_add".into(), "main".into()]))
    );
    // Arguments need tracefs: said, not dropped.
    let o = memperf()
        .envs(env)
        .args([
            "stat",
            "-e",
            &format!("u:{p}:probe_add(a=%di)"),
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("the uprobe PMU carries no fetch arguments"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn usdt_probes_with_and_without_a_semaphore_count_and_fetch_their_arguments() {
    let _beside = beside_others();
    if !require_perf("USDT probes") {
        return;
    }
    let prog = probes_fixture();
    let p = prog.display().to_string();
    let plain = format!("sdt:{p}:plain");
    let guarded = format!("sdt:{p}:memperf:guarded");
    let dir = scratch();
    let out = dir.path().join("sdt.data");
    let o = record(
        &out,
        &["-e", &format!("{plain},{guarded}")],
        &prog,
        &[&N.to_string()],
    );
    // The program sees its semaphore up for every call while the probe is on it.
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(&format!("guarded {N}")),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let text = script(&out);
    assert_eq!(field_sum(&text, &plain, "arg1"), (N, N * (N - 1) / 2));
    assert_eq!(field_sum(&text, &plain, "arg2"), (N, 3 * N * (N - 1) / 2));
    assert_eq!(field_sum(&text, &guarded, "arg1"), (N, N * (N - 1) / 2));
    // Without a probe on it, the semaphore stays down.
    let o = Command::new(&prog).arg("7").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        "sum 28 guarded 0"
    );

    let o = run_memperf(&["list", "-x", &p, "--probes"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let list = String::from_utf8_lossy(&o.stdout);
    assert!(list.contains("USDT probes in "), "{list}");
    let line = |needle: &str| {
        list.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no `{needle}` in\n{list}"))
            .to_string()
    };
    assert!(
        line(":memperf:plain ").contains("args: -8@%rdi -8@%rax"),
        "{list}"
    );
    assert!(!line(":memperf:plain ").contains("semaphore"), "{list}");
    assert!(line(":memperf:guarded ").contains("semaphore 0x"), "{list}");
    assert!(
        line(&format!("u:{p}:probe_add ")).contains("[Uprobe]"),
        "{list}"
    );
    // The program imports malloc: it is not among its functions.
    assert!(!list.contains(&format!("u:{p}:malloc ")), "{list}");
}

#[test]
fn stat_on_a_uprobe_agrees_with_perf_stat_on_perf_probe() {
    let _beside = beside_others();
    if !require_perf("memperf stat vs perf stat") || !require_perf_tool("perf probe") {
        return;
    }
    let prog = probes_fixture();
    let p = prog.display().to_string();
    let group = format!("mptest{}", std::process::id());
    let o = Command::new("perf")
        .args([
            "probe",
            "-q",
            "-x",
            &p,
            "-a",
            &format!("{group}:add=probe_add"),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "perf probe: {}", stderr(&o));
    let perf = {
        let _turn = recording_turn();
        Command::new("perf")
            .args(["stat", "-x", ",", "-e", &format!("{group}:add"), "--"])
            .arg(&prog)
            .arg(N.to_string())
            .output()
            .unwrap()
    };
    let _ = Command::new("perf")
        .args(["probe", "-q", "-d", &format!("{group}:*")])
        .status();
    assert!(perf.status.success(), "perf stat: {}", stderr(&perf));
    let perf_count: u64 = stderr(&perf)
        .lines()
        .find(|l| l.contains(&format!("{group}:add")))
        .and_then(|l| l.split(',').next()?.parse().ok())
        .unwrap_or_else(|| panic!("perf stat: {}", stderr(&perf)));
    let add = format!("u:{p}:probe_add");
    let ours = count_of(&stat_counts(&add, &prog, &[]), &add);
    assert_eq!((ours, perf_count), (N, N));
}

#[test]
fn libc_malloc_probes_agree_with_leak() {
    let _beside = beside_others();
    if !require_perf("u:libc:malloc vs memperf leak") {
        return;
    }
    let prog = probes_fixture();
    let dir = scratch();
    let out = dir.path().join("malloc.data");
    let malloc = "u:libc:malloc(size=%di)";
    record(
        &out,
        &["--call-graph", "none", "-e", malloc],
        &prog,
        &[&N.to_string()],
    );
    let (calls, bytes) = field_sum(&script(&out), malloc, "size");
    let leak = {
        let _turn = recording_turn();
        let cmd = format!("{} {N}", prog.display());
        run_memperf(&["leak", "-t", "-c", &cmd])
    };
    assert!(leak.status.success(), "{}", stderr(&leak));
    let text = String::from_utf8_lossy(&leak.stdout);
    let sizes: Vec<u64> = text
        .lines()
        .filter_map(|l| l.split_once(": alloc entered, size = ")?.1.parse().ok())
        .collect();
    assert_eq!(
        (calls, bytes),
        (sizes.len() as u64, sizes.iter().sum::<u64>())
    );
    // The fixture's 2N, and stdio's buffer for its one line.
    assert_eq!(calls, 2 * N + 1);
}

#[test]
fn bad_probe_specs_get_clear_errors() {
    let _beside = beside_others();
    let dir = scratch();
    let prog = own_fixture(&dir, "bad");
    let p = prog.display().to_string();
    let err = |event: &str| -> String {
        let o = run_memperf(&["stat", "-e", event, "--", "true"]);
        assert!(!o.status.success(), "{event} was accepted");
        stderr(&o)
    };
    let e = err(&format!("u:{p}:probe_ad"));
    assert!(
        e.contains("has no function `probe_ad`; did you mean `probe_add`"),
        "{e}"
    );
    // The first probe is placed before the second fails: it is removed all the same.
    let e = err(&format!("u:{p}:probe_add,u:{p}:probe_ad"));
    assert!(e.contains("did you mean `probe_add`"), "{e}");
    let e = err(&format!("u:{p}:malloc"));
    assert!(e.contains("does not define `malloc`, it imports it"), "{e}");
    let e = err(&format!("u:{p}:probe_add+0x4000"));
    assert!(e.contains("past the end of `probe_add`"), "{e}");
    let e = err(&format!("sdt:{p}:plian"));
    assert!(e.contains("did you mean `memperf:plain`"), "{e}");
    let e = err("u:no_such_library_xyz:malloc");
    assert!(e.contains("no file `no_such_library_xyz`"), "{e}");
    let e = err("r:libc:malloc+4");
    assert!(e.contains("takes no `+offset`"), "{e}");
    let e = err("u:libc:malloc(size=%edi)");
    assert!(e.contains("unknown register `%edi`"), "{e}");
    assert!(probes_on(&prog).is_empty());
}

#[test]
fn unprivileged_users_are_told_what_uprobes_need() {
    let _beside = beside_others();
    if !is_root() {
        eprintln!("skipping: needs root to create a test user");
        return;
    }
    let Some(user) = TestUser::create() else {
        eprintln!("skipping: useradd failed");
        return;
    };
    let o = user.sh("\"$MEMPERF\" stat -e u:libc:malloc -- true");
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{e}");
    assert!(
        e.contains("need root, or CAP_PERFMON (Linux 5.8+) or CAP_SYS_ADMIN"),
        "{e}"
    );
}

/// `-:GROUP/NAME` for each line; ignores failures (the probe may be gone already).
fn remove_probe_lines(lines: &[String]) {
    for l in lines {
        if let Some(def) = l.split_whitespace().next()
            && let Some((_, qualified)) = def.split_once(':')
        {
            let _ = std::fs::OpenOptions::new()
                .append(true)
                .open("/sys/kernel/tracing/uprobe_events")
                .and_then(|mut f| {
                    std::io::Write::write_all(&mut f, format!("-:{qualified}\n").as_bytes())
                });
        }
    }
}

#[test]
fn probes_are_removed_on_sigint_and_after_sigkill_at_the_next_start_but_not_a_live_runs() {
    let _alone = PROBE_STARTS.write().unwrap_or_else(|e| e.into_inner());
    if !require_perf("probe lifetime") || !is_root() {
        return;
    }
    // A copy of its own: the probes this test leaves for a while are on no other test's file.
    let dir = scratch();
    let prog = own_fixture(&dir, "lifetime");
    let p = prog.display().to_string();
    let wait_for_probe = |what: &str| {
        for _ in 0..200 {
            if !probes_on(&prog).is_empty() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("{what}: the probe never appeared");
    };
    let start = || {
        memperf()
            .args(["stat", "-a", "-e", &format!("u:{p}:probe_add")])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // SIGINT: memperf stops, prints, and removes its probe.
    let child = start();
    wait_for_probe("SIGINT run");
    // The probe is placed just before memperf takes over SIGINT: let it get there.
    std::thread::sleep(Duration::from_millis(500));
    unsafe_free_kill(child.id(), "INT");
    let o: Output = child.wait_with_output().unwrap();
    assert!(
        probes_on(&prog).is_empty(),
        "after SIGINT: {:?}",
        probes_on(&prog)
    );
    assert!(o.status.success(), "{}", stderr(&o));

    // SIGKILL leaves the probe; a live run's probe must survive the next start, the dead
    // run's must not, nor a group named after a pid that is no memperf now (this test's own:
    // a killed memperf's pid taken by another program).
    let mut child = start();
    wait_for_probe("SIGKILL run");
    unsafe_free_kill(child.id(), "KILL");
    let _ = child.wait();
    let left = probes_on(&prog);
    assert_eq!(left.len(), 1, "{left:?}");
    let offset = left[0].split(':').nth(2).unwrap_or("0x0").to_string();
    let reused = format!("p:memperf_{}/reused_pid {p}:{offset}", std::process::id());
    std::fs::OpenOptions::new()
        .append(true)
        .open("/sys/kernel/tracing/uprobe_events")
        .and_then(|mut f| std::io::Write::write_all(&mut f, format!("{reused}\n").as_bytes()))
        .expect("add a probe of a group whose pid is no memperf");
    let live = start();
    let live_group = format!("memperf_{}/", live.id());
    for _ in 0..200 {
        if probes_on(&prog).iter().any(|l| l.contains(&live_group)) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let counts = stat_counts(&format!("u:{p}:probe_alloc"), &prog, &[]);
    assert_eq!(count_of(&counts, &format!("u:{p}:probe_alloc")), 2 * N);
    let after = probes_on(&prog);
    std::thread::sleep(Duration::from_millis(500));
    unsafe_free_kill(live.id(), "INT");
    let o = live.wait_with_output().unwrap();
    let rest = probes_on(&prog);
    remove_probe_lines(&rest);
    assert_eq!(
        after.len(),
        1,
        "only the live run's probe is left: {after:?}"
    );
    assert!(after[0].contains(&live_group), "{after:?}");
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(rest.is_empty(), "the live run removed its own: {rest:?}");
}

#[test]
fn sigquit_and_sigpipe_end_a_run_and_remove_its_probes() {
    let _beside = beside_others();
    if !require_perf("probe teardown on SIGQUIT") || !is_root() {
        return;
    }
    let dir = scratch();
    let prog = own_fixture(&dir, "quit");
    let p = prog.display().to_string();
    let out = dir.path().join("q.data");
    let runs: [(&str, Vec<String>); 3] = [
        (
            "QUIT",
            vec![
                "record".into(),
                "-a".into(),
                "-o".into(),
                out.display().to_string(),
            ],
        ),
        ("QUIT", vec!["stat".into(), "-a".into()]),
        ("PIPE", vec!["stat".into(), "-a".into()]),
    ];
    for (sig, args) in runs {
        let _ = std::fs::remove_file(&out);
        let child = memperf()
            .args(&args)
            .args(["-e", &format!("u:{p}:probe_add")])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut placed = false;
        for _ in 0..200 {
            placed = !probes_on(&prog).is_empty();
            if placed {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // The probe is placed just before memperf takes over the signals: let it get there.
        std::thread::sleep(Duration::from_millis(500));
        unsafe_free_kill(child.id(), sig);
        let o: Output = child.wait_with_output().unwrap();
        let left = probes_on(&prog);
        remove_probe_lines(&left);
        assert!(placed, "{args:?}: the probe never appeared: {}", stderr(&o));
        assert!(left.is_empty(), "{args:?} after SIG{sig}: {left:?}");
        assert!(
            o.status.code().is_some(),
            "{args:?}: SIG{sig} killed memperf: {}",
            o.status
        );
    }
}

fn unsafe_free_kill(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -{sig} {pid}");
}
