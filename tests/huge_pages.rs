//! `hfaults` against every kind of huge page the kernel makes: hugetlb pages reserved for
//! the test (anonymous MAP_HUGETLB, System V SHM_HUGETLB, a file on a hugetlbfs mounted for
//! the test), transparent huge pages and multi-size THP. In a binary of its own: these
//! tests change global settings (vm.nr_hugepages, the THP modes) that would change the
//! fault counts other tests expect, and they run one at a time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;

use common::kernel::{HugetlbfsMount, Sysctl};
use common::tools::*;
use common::*;

/// One test at a time changes the huge page settings.
static SETTINGS: Mutex<()> = Mutex::new(());

const THP: &str = "/sys/kernel/mm/transparent_hugepage";

/// `@name[key]: N` lines of bpftrace-style maps, as (name, key, N).
fn named_rows(text: &str) -> Vec<(String, String, u64)> {
    let mut rows: Vec<_> = text
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix('@')?.split_once('[')?;
            let (key, n) = rest.rsplit_once("]: ")?;
            Some((name.to_string(), key.to_string(), n.parse().ok()?))
        })
        .collect();
    rows.sort();
    rows
}

/// Reserves `n` huge pages, or says why not (a failure when root must).
fn reserve(n: u64) -> Option<Sysctl> {
    let Some(guard) = Sysctl::set("vm/nr_hugepages", &n.to_string()) else {
        assert!(!is_root(), "root cannot reserve huge pages");
        return None;
    };
    let reserved: u64 = std::fs::read_to_string("/proc/sys/vm/nr_hugepages")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        reserved >= n,
        "the kernel reserved only {reserved} huge pages"
    );
    Some(guard)
}

#[test]
fn hfaults_counts_one_fault_per_huge_page() {
    if !require_perf("hfaults") {
        return;
    }
    let _one = SETTINGS.lock().unwrap_or_else(|e| e.into_inner());
    const H: u64 = 3;
    let Some(_pages) = reserve(4) else {
        return;
    };
    let prog = fixture("filefaults", Variant::NoFp);
    let comm = prog.file_name().unwrap().to_str().unwrap();
    let dir = scratch();
    let file = dir.path().join("small.bin");
    let data = dir.path().join("huge.data");
    let (text, err) = run_tool(&[
        "hfaults",
        "-w",
        data.to_str().unwrap(),
        "-m",
        TEST_RING_PAGES,
        "--",
        prog.to_str().unwrap(),
        file.to_str().unwrap(),
        "10",
        "100",
        &H.to_string(),
    ]);
    assert!(text.starts_with("Tracing Huge Page faults per process... Hit Ctrl-C to end.\n"));
    let pid = text.lines().find_map(|l| l.strip_prefix("pid ")).unwrap();
    // Only the huge pages, one fault each: not the 10 file pages, not the 100 small ones
    // (which filefaults maps with MADV_NOHUGEPAGE: no THP either).
    assert_eq!(
        named_rows(&text),
        [(String::new(), format!("{pid}, {comm}"), H)],
        "{text}\n{err}"
    );
    // From the recording: the MMAP2 record's MAP_HUGETLB says which mapping is huge.
    let (replayed, _) = run_tool(&["hfaults", "-i", data.to_str().unwrap()]);
    assert_eq!(named_rows(&replayed), named_rows(&text));
}

/// Every kind at once, with the answer the kernel gives: hugetlb faults of three kinds in
/// `@[pid, comm]`, THP faults (as many as /proc/PID/smaps shows backed) in `@thp`, the
/// regions that fell back to small pages in `@thp_fallback`, 64 KiB mTHP faults in `@mthp`.
#[test]
fn hfaults_tells_transparent_huge_page_faults_apart() {
    if !require_perf("hfaults") {
        return;
    }
    let _one = SETTINGS.lock().unwrap_or_else(|e| e.into_inner());
    let (h, s, f, t, m) = (2u64, 1u64, 2u64, 3u64, 8u64);
    let Some(_pages) = reserve(h + s + f + 1) else {
        return;
    };
    let Some(mnt) = HugetlbfsMount::new() else {
        assert!(!is_root(), "root cannot mount hugetlbfs");
        return;
    };
    // THP for madvised regions (it may be `never` here), mTHP of 64 KiB for all anonymous
    // memory where this kernel has it (6.8+).
    let thp_mode = std::fs::read_to_string(format!("{THP}/enabled"));
    let Ok(mode) = thp_mode else {
        eprintln!("skipping: this kernel has no transparent huge pages");
        return;
    };
    let _thp = (!mode.contains("[always]"))
        .then(|| Sysctl::set_path(Path::new(&format!("{THP}/enabled")), "madvise"))
        .flatten();
    let mthp_file = format!("{THP}/hugepages-64kB/enabled");
    let _mthp = Path::new(&mthp_file)
        .exists()
        .then(|| Sysctl::set_path(Path::new(&mthp_file), "always"))
        .flatten();
    let mthp = _mthp.is_some();

    let prog = fixture("hugemix", Variant::NoFp);
    let comm = prog.file_name().unwrap().to_str().unwrap();
    let dir = scratch();
    let data = dir.path().join("thp.data");
    let file = mnt.dir.path().join("huge.bin");
    let (text, err) = run_tool(&[
        "hfaults",
        "-w",
        data.to_str().unwrap(),
        "-m",
        TEST_RING_PAGES,
        "--",
        prog.to_str().unwrap(),
        "-h",
        &h.to_string(),
        "-s",
        &s.to_string(),
        "-t",
        &t.to_string(),
        "-m",
        &m.to_string(),
        "-f",
        file.to_str().unwrap(),
        "-F",
        &f.to_string(),
    ]);
    let pid = text.lines().find_map(|l| l.strip_prefix("pid ")).unwrap();
    let backed: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("thp "))
        .unwrap()
        .parse()
        .unwrap();
    let key = format!("{pid}, {comm}");
    // A THP region whose huge allocation failed falls back to mTHP where enabled, else to
    // small pages; and with mTHP on for all anonymous memory the heap or the stack may get
    // a 64 KiB folio too (by where ASLR put them): the fixture counts the folios it has.
    let fell = t - backed;
    let folios: Option<u64> = text
        .lines()
        .find_map(|l| l.strip_prefix("mthp "))
        .and_then(|n| n.parse().ok());
    let mut want = vec![(String::new(), key.clone(), h + s + f)];
    if backed > 0 {
        want.push(("thp".into(), key.clone(), backed));
    }
    if mthp {
        let folios = folios.expect("the fixture reads /proc/kpageflags as root");
        assert!(
            folios >= m + fell,
            "{folios} 64 KiB folios, fewer than made\n{text}"
        );
        want.push(("mthp".into(), format!("{key}, 64kB"), folios));
    } else if fell > 0 {
        want.push(("thp_fallback".into(), key.clone(), fell));
    }
    want.sort();
    let got: Vec<_> = named_rows(&text)
        .into_iter()
        .filter(|r| r.1.starts_with(&key))
        .collect();
    assert_eq!(got, want, "{text}\n{err}");
    // The same from the recording (the kernel filtered its allocations as it recorded).
    let (replayed, _) = run_tool(&["hfaults", "-i", data.to_str().unwrap()]);
    assert_eq!(named_rows(&replayed), named_rows(&text));
}

/// A process whose huge mappings existed before hfaults attached: their MMAP2 records are
/// made from /proc/PID/maps, which has no MAP_HUGETLB flag; hfaults still knows them (the
/// hugetlbfs mount's device, `/anon_hugepage`, smaps for System V segments).
#[test]
fn hfaults_knows_the_huge_mappings_of_a_running_process() {
    if !require_perf("hfaults") {
        return;
    }
    let _one = SETTINGS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_pages) = reserve(4) else {
        return;
    };
    let Some(mnt) = HugetlbfsMount::new() else {
        assert!(!is_root(), "root cannot mount hugetlbfs");
        return;
    };
    let prog = fixture("hugemix", Variant::NoFp);
    let comm = prog.file_name().unwrap().to_str().unwrap();
    let file = mnt.dir.path().join("early.bin");
    let mut fix = Command::new(&prog)
        .args(["-h", "1", "-s", "1", "-F", "1", "-w", "-f"])
        .arg(&file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut fix_out = BufReader::new(fix.stdout.take().unwrap());
    let mut line = String::new();
    fix_out.read_line(&mut line).unwrap();
    let pid = line.trim().strip_prefix("pid ").unwrap().to_string();
    line.clear();
    fix_out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");

    let (tool, mut out) = start_tool(&["hfaults", "-m", TEST_RING_PAGES, "-p", &pid]);
    fix.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let mut rest = String::new();
    fix_out.read_to_string(&mut rest).unwrap();
    assert!(fix.wait().unwrap().success(), "{rest}");
    // The tool ends with the process it traces.
    let mut text = String::new();
    out.read_to_string(&mut text).unwrap();
    let o = tool.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(
        named_rows(&text),
        [(String::new(), format!("{pid}, {comm}"), 3)],
        "{text}\n{err}"
    );
}
