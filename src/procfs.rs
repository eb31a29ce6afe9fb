//! The state of processes that exist when recording starts, read from `/proc`, so that the
//! session can synthesize COMM/MMAP2/FORK records for them (as `perf record` does).

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

/// One line of `/proc/PID/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapEntry {
    pub start: u64,
    pub end: u64,
    /// `r`, `w`, `x`, then `p` (private) or `s` (shared); `-` where a permission is absent.
    pub perms: [u8; 4],
    /// File offset of `start`.
    pub pgoff: u64,
    pub dev_major: u32,
    pub dev_minor: u32,
    pub inode: u64,
    /// The path as the kernel prints it: may contain spaces, keeps a ` (deleted)` suffix,
    /// may be a pseudo path such as `[vdso]`, empty for anonymous memory.
    pub path: Vec<u8>,
}

impl MapEntry {
    pub fn is_exec(&self) -> bool {
        self.perms[2] == b'x'
    }
}

/// The result of parsing a maps file: the entries, and how many lines were malformed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParsedMaps {
    pub entries: Vec<MapEntry>,
    pub malformed_lines: usize,
}

fn proc_path(pid: u32, file: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/{file}"))
}

/// Reads and parses `/proc/PID/maps`. Malformed lines are skipped.
pub fn read_maps(pid: u32) -> io::Result<Vec<MapEntry>> {
    let text = std::fs::read(proc_path(pid, "maps"))?;
    Ok(parse_maps(&text))
}

/// Parses the text of a maps file, skipping malformed lines.
pub fn parse_maps(text: &[u8]) -> Vec<MapEntry> {
    parse_maps_counted(text).entries
}

/// Parses the text of a maps file and counts the malformed lines it skipped.
pub fn parse_maps_counted(text: &[u8]) -> ParsedMaps {
    let mut out = ParsedMaps::default();
    for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        match parse_maps_line(line) {
            Some(e) => out.entries.push(e),
            None => out.malformed_lines += 1,
        }
    }
    out
}

/// Splits off the next space-separated field, skipping leading spaces.
fn field<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let s = trim_start(rest);
    let end = s.iter().position(|&b| b == b' ').unwrap_or(s.len());
    let (f, r) = s.split_at(end);
    *rest = r;
    (!f.is_empty()).then_some(f)
}

fn trim_start(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|&&b| b == b' ' || b == b'\t').count();
    &s[n..]
}

fn hex(s: &[u8]) -> Option<u64> {
    u64::from_str_radix(std::str::from_utf8(s).ok()?, 16).ok()
}

fn split2(s: &[u8], sep: u8) -> Option<(&[u8], &[u8])> {
    let i = s.iter().position(|&b| b == sep)?;
    Some((&s[..i], &s[i + 1..]))
}

/// `start-end perms offset major:minor inode   path`
fn parse_maps_line(line: &[u8]) -> Option<MapEntry> {
    let mut rest = line;
    let (start, end) = split2(field(&mut rest)?, b'-')?;
    let perms: [u8; 4] = field(&mut rest)?.try_into().ok()?;
    let pgoff = hex(field(&mut rest)?)?;
    let (major, minor) = split2(field(&mut rest)?, b':')?;
    let inode = std::str::from_utf8(field(&mut rest)?).ok()?.parse().ok()?;
    let (start, end) = (hex(start)?, hex(end)?);
    if end < start {
        return None;
    }
    Some(MapEntry {
        start,
        end,
        perms,
        pgoff,
        dev_major: u32::try_from(hex(major)?).ok()?,
        dev_minor: u32::try_from(hex(minor)?).ok()?,
        inode,
        path: trim_start(rest).to_vec(),
    })
}

fn numeric_dir_entries(dir: &str) -> io::Result<Vec<u32>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if let Some(n) = entry.file_name().to_str().and_then(|s| s.parse().ok()) {
            out.push(n);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// The thread ids of process `pid` (`/proc/PID/task`), sorted.
pub fn threads(pid: u32) -> io::Result<Vec<u32>> {
    numeric_dir_entries(&format!("/proc/{pid}/task"))
}

/// All process ids in `/proc`, sorted.
pub fn all_pids() -> io::Result<Vec<u32>> {
    numeric_dir_entries("/proc")
}

/// `/proc/PID/comm` without the trailing newline.
pub fn comm(pid: u32) -> io::Result<Vec<u8>> {
    let mut c = std::fs::read(proc_path(pid, "comm"))?;
    if c.last() == Some(&b'\n') {
        c.pop();
    }
    Ok(c)
}

fn status_field(pid: u32, name: &[u8]) -> io::Result<u32> {
    let status = std::fs::read(proc_path(pid, "status"))?;
    parse_status_field(&status, name).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "no `{}` line in /proc/{pid}/status",
                String::from_utf8_lossy(name)
            ),
        )
    })
}

fn parse_status_field(status: &[u8], name: &[u8]) -> Option<u32> {
    status.split(|&b| b == b'\n').find_map(|line| {
        let (key, value) = split2(line, b':')?;
        if key != name {
            return None;
        }
        std::str::from_utf8(value).ok()?.trim().parse().ok()
    })
}

/// The process (thread group) id of thread `tid`, from `/proc/TID/status`.
pub fn tgid(tid: u32) -> io::Result<u32> {
    status_field(tid, b"Tgid")
}

/// The parent process id of `pid`, from `/proc/PID/status`.
pub fn ppid(pid: u32) -> io::Result<u32> {
    status_field(pid, b"PPid")
}

/// The threads of `roots` and of every process descending from them that started at or
/// after `born_after` (clock ticks after boot, as [`start_ticks`]): what an inherited event
/// opened on the roots at that time follows, as far as /proc still shows the ancestry.
/// Sorted; processes that exit while /proc is read are left out.
pub fn tree_threads(roots: &[u32], born_after: Option<u64>) -> Vec<u32> {
    let young = |p: u32| born_after.is_none_or(|t| start_ticks(p).is_ok_and(|s| s >= t));
    let mut tree: Vec<u32> = roots.iter().copied().filter(|&p| exists(p)).collect();
    let mut seen: std::collections::HashSet<u32> = tree.iter().copied().collect();
    let mut i = 0;
    while i < tree.len() {
        let Some(kids) = children(tree[i]) else {
            return tree_threads_by_scan(roots, &young);
        };
        i += 1;
        for k in kids {
            if young(k) && seen.insert(k) {
                tree.push(k);
            }
        }
    }
    threads_of(&tree)
}

/// The child processes of every thread of `pid` (`/proc/PID/task/TID/children`, Linux 3.5+
/// with CONFIG_PROC_CHILDREN); `None` where the kernel has no such file.
fn children(pid: u32) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for tid in threads(pid).unwrap_or_default() {
        match std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/children")) {
            Ok(text) => out.extend(
                text.split_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok()),
            ),
            Err(e) if e.kind() == io::ErrorKind::NotFound && exists(tid) => return None,
            Err(_) => {}
        }
    }
    Some(out)
}

/// [`tree_threads`] by every process's parent, where /proc has no `children` files.
fn tree_threads_by_scan(roots: &[u32], young: &dyn Fn(u32) -> bool) -> Vec<u32> {
    let mut tree: std::collections::HashSet<u32> =
        roots.iter().copied().filter(|&p| exists(p)).collect();
    let others: Vec<(u32, u32)> = all_pids()
        .unwrap_or_default()
        .into_iter()
        .filter(|p| !tree.contains(p) && young(*p))
        .filter_map(|p| Some((p, ppid(p).ok()?)))
        .collect();
    // Children may be listed before their parents: repeat until no process joins.
    loop {
        let before = tree.len();
        for &(pid, parent) in &others {
            if tree.contains(&parent) {
                tree.insert(pid);
            }
        }
        if tree.len() == before {
            break;
        }
    }
    threads_of(&tree.into_iter().collect::<Vec<_>>())
}

fn threads_of(procs: &[u32]) -> Vec<u32> {
    let mut tids: Vec<u32> = procs
        .iter()
        .flat_map(|&p| threads(p).unwrap_or_default())
        .collect();
    tids.sort_unstable();
    tids.dedup();
    tids
}

/// When process `pid` started, in clock ticks after boot (`/proc/PID/stat`, field 22).
pub fn start_ticks(pid: u32) -> io::Result<u64> {
    let stat = std::fs::read(proc_path(pid, "stat"))?;
    parse_start_ticks(&stat).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("no start time in /proc/{pid}/stat"),
        )
    })
}

/// Whether process `pid` still runs: some thread of it has not exited. A process that
/// exited and that its parent has not reaped (a zombie, state `Z`, or `X` while it goes)
/// keeps its /proc directory but runs no more; so does a leader thread that exited before
/// the others, which this counts as gone while another thread runs.
pub fn is_running(pid: u32) -> bool {
    let Ok(tids) = threads(pid) else {
        return false;
    };
    tids.iter().any(|&tid| {
        let stat = std::fs::read(format!("/proc/{pid}/task/{tid}/stat"));
        stat.is_ok_and(|s| parse_state(&s).is_some_and(|c| !has_exited(c)))
    })
}

/// Whether process `pid` is a running memperf: it runs (`is_running`) and is named
/// `memperf`, or a name that starts so (a copy kept under another name: a soak's
/// `memperf-soak`, whose live probes the next memperf took for stale ones), or runs this
/// very executable. A pid that a killed memperf had and that another program has since is
/// not one.
pub fn is_memperf(pid: u32) -> bool {
    if !is_running(pid) {
        return false;
    }
    if comm(pid).is_ok_and(|c| c.starts_with(b"memperf")) {
        return true;
    }
    let file = |p: &str| std::fs::metadata(p).map(|m| (m.dev(), m.ino()));
    let theirs = file(&format!("/proc/{pid}/exe"));
    theirs.is_ok() && theirs.ok() == file("/proc/self/exe").ok()
}

/// Whether thread `tid` still runs (its /proc/TID/stat state is not `Z` or `X`).
pub fn thread_running(tid: u32) -> bool {
    let stat = std::fs::read(proc_path(tid, "stat"));
    stat.is_ok_and(|s| parse_state(&s).is_some_and(|c| !has_exited(c)))
}

/// Thread `tid` of `pid` as `/proc/PID/task/TID/syscall` tells it, read into `text` (kept
/// by the caller, so a hot caller allocates once): its stack pointer when it is blocked,
/// `None` while it runs. ENOENT or ESRCH: it has exited.
pub fn blocked_sp(pid: u32, tid: u32, text: &mut String) -> io::Result<Option<u64>> {
    use std::io::Read as _;
    text.clear();
    let path = format!("/proc/{pid}/task/{tid}/syscall");
    std::fs::File::open(path)?.read_to_string(text)?;
    Ok(parse_syscall_sp(text))
}

/// The stack pointer in `/proc/PID/task/TID/syscall`: `NR ARG1..ARG6 SP PC` for a thread
/// in a system call, `-1 SP PC` for one blocked outside any, `running` for one that runs.
pub fn parse_syscall_sp(text: &str) -> Option<u64> {
    let n = text.split_whitespace().count();
    if !matches!(n, 3 | 9) {
        return None;
    }
    let sp = text.split_whitespace().nth(n - 2)?.strip_prefix("0x")?;
    u64::from_str_radix(sp, 16).ok()
}

/// A /proc stat state of a task that has exited: zombie (`Z`) or dead (`X`, `x`).
fn has_exited(state: u8) -> bool {
    matches!(state, b'Z' | b'X' | b'x')
}

/// The state letter of a /proc stat line (field 3).
fn parse_state(stat: &[u8]) -> Option<u8> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = stat.get(close + 1..)?;
    rest.iter().copied().find(|b| !b.is_ascii_whitespace())
}

fn parse_start_ticks(stat: &[u8]) -> Option<u64> {
    // The command name (field 2) may hold spaces and parentheses: count from the last ')'.
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(stat.get(close + 1..)?).ok()?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The devices (`major:minor`) of the hugetlbfs mounts this process sees, from
/// `/proc/self/mountinfo`: a mapping of a file on one of them is hugetlb memory.
pub fn hugetlbfs_devs() -> Vec<(u32, u32)> {
    std::fs::read("/proc/self/mountinfo")
        .map(|t| parse_hugetlbfs_devs(&t))
        .unwrap_or_default()
}

/// `36 35 0:33 / /dev/hugepages rw,relatime shared:14 - hugetlbfs hugetlbfs rw,pagesize=2M`
fn parse_hugetlbfs_devs(text: &[u8]) -> Vec<(u32, u32)> {
    let text = String::from_utf8_lossy(text);
    text.lines()
        .filter_map(|line| {
            let (head, tail) = line.split_once(" - ")?;
            if tail.split_whitespace().next()? != "hugetlbfs" {
                return None;
            }
            let (maj, min) = head.split_whitespace().nth(2)?.split_once(':')?;
            Some((maj.parse().ok()?, min.parse().ok()?))
        })
        .collect()
}

/// The mappings of `pid` backed by pages larger than the base page (hugetlb memory), from
/// `/proc/PID/smaps` (`KernelPageSize`); costly, so read only for mappings `maps` cannot
/// tell apart (a System V segment made with or without `SHM_HUGETLB`).
pub fn huge_ranges(pid: u32) -> io::Result<Vec<(u64, u64)>> {
    let text = std::fs::read(proc_path(pid, "smaps"))?;
    Ok(parse_huge_ranges(
        &text,
        crate::sys::page_size() as u64 / 1024,
    ))
}

fn parse_huge_ranges(text: &[u8], page_kb: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut cur = None;
    for line in text.split(|&b| b == b'\n') {
        if let Some(e) = parse_maps_line(line) {
            cur = Some((e.start, e.end));
        } else if let Some(v) = line.strip_prefix(b"KernelPageSize:") {
            let kb: Option<u64> = std::str::from_utf8(v)
                .ok()
                .and_then(|v| v.trim().strip_suffix("kB"))
                .and_then(|v| v.trim().parse().ok());
            if let (Some(kb), Some(range)) = (kb, cur.take())
                && kb > page_kb
            {
                out.push(range);
            }
        }
    }
    out
}

/// Whether `/proc/PID` exists.
pub fn exists(pid: u32) -> bool {
    proc_path(pid, "").exists()
}

/// Which hierarchy a process's memory cgroup is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CgroupVersion {
    /// The v1 `memory` controller's own hierarchy.
    V1,
    /// The unified (v2) hierarchy.
    V2,
}

/// A process's memory cgroup: its hierarchy and its path there, as `/proc/PID/cgroup` says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryCgroup {
    pub version: CgroupVersion,
    pub path: String,
}

/// The memory cgroup of `pid` (v1's memory controller, else v2's unified path).
pub fn memory_cgroup(pid: u32) -> Option<MemoryCgroup> {
    parse_memory_cgroup(&std::fs::read_to_string(proc_path(pid, "cgroup")).ok()?)
}

/// The memory cgroup in the text of `/proc/PID/cgroup` (`ID:CONTROLLERS:PATH` lines): the
/// line whose controllers include `memory` (v1), else the unified `0::PATH` line (v2).
pub fn parse_memory_cgroup(text: &str) -> Option<MemoryCgroup> {
    let mut unified = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let path = path.to_string();
        if controllers.split(',').any(|c| c == "memory") {
            return Some(MemoryCgroup {
                version: CgroupVersion::V1,
                path,
            });
        }
        if controllers.is_empty() {
            unified = Some(MemoryCgroup {
                version: CgroupVersion::V2,
                path,
            });
        }
    }
    unified
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used)]
mod tests {

    #[test]
    fn start_ticks_are_field_22_even_when_the_name_has_parentheses() {
        let stat = b"42 (a) b) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 123456 1000 10";
        assert_eq!(super::parse_start_ticks(stat), Some(123_456));
        assert_eq!(super::parse_start_ticks(b"42 (x) S 1"), None);
        let me = super::start_ticks(std::process::id()).unwrap();
        assert!(me > 0);
        // This test's own process started after boot and is its own tree's root.
        let tids = super::tree_threads(&[std::process::id()], Some(me));
        assert!(tids.contains(&std::process::id()), "{tids:?}");
    }

    #[test]
    fn a_zombie_is_not_running() {
        assert_eq!(super::parse_state(b"42 (a) Z) Z 1 42"), Some(b'Z'));
        assert_eq!(super::parse_state(b"42 (x)"), None);
        assert!(super::is_running(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // Not reaped yet: a zombie once it has exited.
        let t0 = std::time::Instant::now();
        while super::is_running(pid) && t0.elapsed().as_secs() < 10 {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(super::exists(pid), "the zombie keeps its /proc directory");
        assert!(!super::is_running(pid) && !super::thread_running(pid));
        child.wait().unwrap();
    }

    use super::*;

    #[test]
    fn memory_cgroup_v1_before_v2() {
        let hybrid = "9:name=systemd:/\n4:memory:/process_api/00f5\n1:cpu:/\n0::/\n";
        let cg = parse_memory_cgroup(hybrid).expect("v1 line");
        assert_eq!(
            (cg.version, cg.path.as_str()),
            (CgroupVersion::V1, "/process_api/00f5")
        );
        let cg = parse_memory_cgroup("5:cpu,memory:/a:b\n").expect("v1 line");
        assert_eq!(cg.path, "/a:b");
        let cg = parse_memory_cgroup("0::/system.slice/x.service\n").expect("v2 line");
        assert_eq!(
            (cg.version, cg.path.as_str()),
            (CgroupVersion::V2, "/system.slice/x.service")
        );
        assert_eq!(parse_memory_cgroup("garbage\n1:cpu:/\n"), None);
    }

    #[test]
    fn hugetlb_devices_and_ranges() {
        let info = b"22 1 0:21 / /proc rw,nosuid - proc proc rw\n\
36 35 0:33 / /dev/hugepages rw,relatime shared:14 - hugetlbfs hugetlbfs rw,pagesize=2M\n\
40 35 0:45 / /mnt/huge1g rw - hugetlbfs none rw,pagesize=1024M\n";
        assert_eq!(parse_hugetlbfs_devs(info), [(0, 33), (0, 45)]);
        let smaps = b"7f0000000000-7f0000400000 rw-s 00000000 00:10 5 /SYSV00000000 (deleted)\n\
Size:               4096 kB\n\
KernelPageSize:     2048 kB\n\
MMUPageSize:        2048 kB\n\
7f0000400000-7f0000410000 rw-s 00000000 00:01 6 /SYSV00000001 (deleted)\n\
Size:                 64 kB\n\
KernelPageSize:        4 kB\n\
MMUPageSize:           4 kB\n";
        assert_eq!(
            parse_huge_ranges(smaps, 4),
            [(0x7f0000000000, 0x7f0000400000)]
        );
    }

    #[test]
    fn parses_paths_with_spaces_deleted_and_anonymous() {
        let text = b"55d0c0a00000-55d0c0a28000 r--p 00000000 fd:01 1311 /usr/bin/my prog\n\
7f00aa000000-7f00aa022000 r-xp 00022000 08:10 42 /tmp/lib x.so (deleted)\n\
7ffd1c3e0000-7ffd1c401000 rw-p 00000000 00:00 0                          [stack]\n\
7f00ab000000-7f00ab001000 rw-p 00000000 00:00 0 \n";
        let maps = parse_maps_counted(text);
        assert_eq!(maps.malformed_lines, 0);
        let m = &maps.entries;
        assert_eq!(m.len(), 4);
        assert_eq!(m[0].path, b"/usr/bin/my prog");
        assert_eq!(
            (m[0].dev_major, m[0].dev_minor, m[0].inode),
            (0xfd, 1, 1311)
        );
        assert_eq!(m[1].path, b"/tmp/lib x.so (deleted)");
        assert_eq!(
            (m[1].start, m[1].end, m[1].pgoff),
            (0x7f00aa000000, 0x7f00aa022000, 0x22000)
        );
        assert!(m[1].is_exec() && !m[0].is_exec());
        assert_eq!(m[1].perms, *b"r-xp");
        assert_eq!(m[2].path, b"[stack]");
        assert_eq!(m[3].path, b"");
    }

    #[test]
    fn skips_and_counts_malformed_lines() {
        let text =
            b"garbage\n10-20 r-xp 0 08:01 5 /a\n30-2 r-xp 0 08:01 5 /b\n40-50 r-x 0 08:01 5 /c\n";
        let maps = parse_maps_counted(text);
        assert_eq!(maps.entries.len(), 1);
        assert_eq!(maps.entries[0].path, b"/a");
        assert_eq!(maps.malformed_lines, 3);
    }

    #[test]
    fn own_process_is_visible() {
        let me = std::process::id();
        assert!(exists(me));
        assert!(!exists(u32::MAX));
        assert_eq!(tgid(me).unwrap(), me);
        assert_eq!(ppid(me).unwrap(), std::os::unix::process::parent_id());
        assert!(threads(me).unwrap().contains(&me));
        assert!(all_pids().unwrap().contains(&me));
        assert!(!comm(me).unwrap().is_empty());
        assert!(!comm(me).unwrap().ends_with(b"\n"));
        let maps = read_maps(me).unwrap();
        let here = own_process_is_visible as fn() as usize as u64;
        let m = maps
            .iter()
            .find(|m| m.start <= here && here < m.end)
            .unwrap();
        assert!(m.is_exec());
        assert!(m.path.starts_with(b"/"));
    }

    #[test]
    fn status_parser_finds_exact_key() {
        let s = b"Name:\tx\nTgid:\t12\nPPid:\t3\nTracerPid:\t0\n";
        assert_eq!(parse_status_field(s, b"PPid"), Some(3));
        assert_eq!(parse_status_field(s, b"Tgid"), Some(12));
        assert_eq!(parse_status_field(s, b"Pid"), None);
    }

    #[test]
    fn a_memperf_under_another_name_is_one() {
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join("memperf-copy");
        std::fs::copy("/bin/sleep", &copy).unwrap();
        let mut child = std::process::Command::new(&copy).arg("5").spawn().unwrap();
        let pid = child.id();
        // Named after its exec.
        for _ in 0..500 {
            if super::comm(pid).is_ok_and(|c| c.starts_with(b"memperf-copy")) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let found = super::is_memperf(pid);
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(found, "`memperf-copy` (pid {pid}) taken for no memperf");
        assert!(!super::is_memperf(pid), "an exited process is no memperf");
    }

    #[test]
    fn the_stack_pointer_of_a_blocked_thread_is_read_from_proc() {
        let in_call = "7 0x7ffc1 0x1 0xffffffff 0x0 0x0 0x0 0x7ffd2a1b3c40 0x7f0e1c2d3e4f\n";
        assert_eq!(parse_syscall_sp(in_call), Some(0x7ffd_2a1b_3c40));
        assert_eq!(
            parse_syscall_sp("-1 0x7ffd2a1b3c40 0x401000\n"),
            Some(0x7ffd_2a1b_3c40)
        );
        assert_eq!(parse_syscall_sp("running\n"), None);
        assert_eq!(parse_syscall_sp(""), None);
    }
}
