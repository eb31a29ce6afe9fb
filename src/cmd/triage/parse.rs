//! Parsers of the text files triage reads: `/proc/meminfo`, `/proc/vmstat` and every other
//! `key value` file, PSI lines, `/proc/swaps`, `/proc/PID/stat`, the memory cgroup files
//! and kernel log records. Each takes the text and returns what it could parse; malformed
//! lines are skipped, never fatal.

use std::collections::BTreeMap;

/// `/proc/meminfo`: each `Key:   123 kB` in bytes (a line without a unit, such as
/// `HugePages_Total`, as it is).
pub(super) fn parse_meminfo(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (key, rest) = l.split_once(':')?;
            let mut words = rest.split_whitespace();
            let n: u64 = words.next()?.parse().ok()?;
            let n = match words.next() {
                Some("kB") => n.saturating_mul(1024),
                _ => n,
            };
            Some((key.trim().to_string(), n))
        })
        .collect()
}

/// `key value` lines: `/proc/vmstat`, v1's `memory.oom_control`, v2's `memory.events` and
/// `memory.stat`.
pub(super) fn parse_keyed(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (key, value) = l.split_once(' ')?;
            Some((key.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

/// One line of a PSI file: the share of time some (or all) tasks stalled, in percent over
/// 10, 60 and 300 s, and the total stall time in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct PsiLine {
    pub avg10: f64,
    pub avg60: f64,
    pub avg300: f64,
    pub total_us: u64,
}

/// `/proc/pressure/memory`: `some` and (since 4.20 for memory) `full`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Psi {
    pub some: PsiLine,
    pub full: Option<PsiLine>,
}

/// `some avg10=0.00 avg60=0.00 avg300=0.00 total=299076` and its `full` line.
pub(super) fn parse_psi(text: &str) -> Option<Psi> {
    let mut some = None;
    let mut full = None;
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let kind = words.next();
        let mut p = PsiLine::default();
        for w in words {
            let Some((k, v)) = w.split_once('=') else {
                continue;
            };
            match k {
                "avg10" => p.avg10 = v.parse().ok()?,
                "avg60" => p.avg60 = v.parse().ok()?,
                "avg300" => p.avg300 = v.parse().ok()?,
                "total" => p.total_us = v.parse().ok()?,
                _ => {}
            }
        }
        match kind {
            Some("some") => some = Some(p),
            Some("full") => full = Some(p),
            _ => {}
        }
    }
    Some(Psi { some: some?, full })
}

/// One line of `/proc/swaps`.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct SwapDevice {
    pub name: String,
    pub kind: String,
    pub size_kb: u64,
    pub used_kb: u64,
    pub priority: i64,
}

/// `/proc/swaps` after its header. A path with spaces is printed by the kernel with `\040`,
/// so fields never contain spaces.
pub(super) fn parse_swaps(text: &str) -> Vec<SwapDevice> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let [name, kind, size, used, prio] = w.as_slice().try_into().ok()?;
            Some(SwapDevice {
                name: name.replace("\\040", " "),
                kind: kind.to_string(),
                size_kb: size.parse().ok()?,
                used_kb: used.parse().ok()?,
                priority: prio.parse().ok()?,
            })
        })
        .collect()
}

/// What triage takes from `/proc/PID/stat`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct ProcStat {
    pub comm: String,
    pub minflt: u64,
    pub majflt: u64,
    pub rss_pages: u64,
}

/// `/proc/PID/stat`: the command is in parentheses and may hold spaces and parentheses, so
/// the fields are counted from the last `)`: state is field 3, minflt 10, majflt 12, rss 24.
pub(super) fn parse_stat(text: &str) -> Option<ProcStat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let fields: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // fields[0] is field 3 (state).
    let field = |n: usize| -> Option<u64> { fields.get(n - 3)?.parse().ok() };
    Some(ProcStat {
        comm,
        minflt: field(10)?,
        majflt: field(12)?,
        rss_pages: field(24)?,
    })
}

/// A memory cgroup limit: v1 `memory.limit_in_bytes` (a huge page-rounded number when
/// unlimited) or v2 `memory.max` (`max`). `None` is no limit.
pub(super) fn parse_limit(text: &str) -> Option<u64> {
    let t = text.trim();
    if t == "max" {
        return None;
    }
    // v1 writes PAGE_COUNTER_MAX pages in bytes (9223372036854771712 with 4 KiB pages).
    t.parse().ok().filter(|&n: &u64| n < (1 << 62))
}

/// One record of `/dev/kmsg`: `prio,seq,usec,flags[,...];message` then continuation lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct KmsgRecord {
    pub seq: u64,
    /// Microseconds since boot (CLOCK_MONOTONIC).
    pub usec: u64,
    pub message: String,
}

pub(super) fn parse_kmsg_record(rec: &str) -> Option<KmsgRecord> {
    let (head, rest) = rec.split_once(';')?;
    let mut h = head.split(',');
    let _prio = h.next()?;
    let seq = h.next()?.parse().ok()?;
    let usec = h.next()?.parse().ok()?;
    let message = rest.lines().next().unwrap_or_default().to_string();
    Some(KmsgRecord { seq, usec, message })
}

/// What the kernel log says of one OOM kill.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct OomKill {
    pub pid: u32,
    pub comm: String,
    /// `Memory cgroup out of memory`: the kill was of a cgroup at its limit.
    pub memcg: bool,
    /// From the `oom-kill:` line before it (4.19+): the cgroup whose limit was hit.
    pub cgroup: Option<String>,
    /// Microseconds since boot.
    pub usec: u64,
}

/// `Out of memory: Killed process 1234 (app) total-vm:...` and `Memory cgroup out of
/// memory: Killed process ...` (4.19+; older kernels said `Killed process` on a line of
/// its own after `Kill process ... or sacrifice child`).
pub(super) fn parse_oom_kill(msg: &str) -> Option<OomKill> {
    let at = msg.find("Killed process ")?;
    let rest = &msg[at + "Killed process ".len()..];
    let (pid, rest) = rest.split_once(' ')?;
    let rest = rest.strip_prefix('(')?;
    // A comm may hold `)`: the kernel's next words are ` total-vm:`, else take the last `)`.
    let end = rest.find(") total-vm:").or_else(|| rest.rfind(')'))?;
    Some(OomKill {
        pid: pid.parse().ok()?,
        comm: rest[..end].to_string(),
        memcg: msg.starts_with("Memory cgroup out of memory"),
        cgroup: None,
        usec: 0,
    })
}

/// `oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,
/// oom_memcg=/cg,task_memcg=/cg,task=hog,pid=1234,uid=0`: the victim's pid and the
/// cgroup whose limit was hit (`oom_memcg`, present only for a memcg OOM).
pub(super) fn parse_oom_context(msg: &str) -> Option<(u32, Option<String>)> {
    let rest = msg.strip_prefix("oom-kill:")?;
    let mut pid = None;
    let mut memcg = None;
    // `nodemask=(null)` and cpusets hold no commas; task= may, so read pid= from the end.
    for kv in rest.split(',') {
        match kv.split_once('=') {
            Some(("oom_memcg", v)) => memcg = Some(v.to_string()),
            Some(("pid", v)) => pid = v.parse().ok(),
            _ => {}
        }
    }
    Some((pid?, memcg))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn meminfo_in_bytes() {
        let m = parse_meminfo(
            "MemTotal:       24684096 kB\nMemAvailable:   23692348 kB\n\
             HugePages_Total:       0\nbad line\nSUnreclaim:        45320 kB\n",
        );
        assert_eq!(m["MemTotal"], 24684096 * 1024);
        assert_eq!(m["SUnreclaim"], 45320 * 1024);
        assert_eq!(m["HugePages_Total"], 0);
        assert_eq!(m.len(), 4);
    }

    #[test]
    fn keyed_files() {
        let v = parse_keyed("pgfault 123\npgscan_direct 7\nnonsense\n");
        assert_eq!((v["pgfault"], v["pgscan_direct"], v.len()), (123, 7, 2));
        // v1 memory.oom_control
        let v = parse_keyed("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n");
        assert_eq!(v["oom_kill"], 2);
        // v2 memory.events
        let v = parse_keyed("low 0\nhigh 0\nmax 17\noom 1\noom_kill 1\noom_group_kill 0\n");
        assert_eq!((v["max"], v["oom_kill"]), (17, 1));
    }

    #[test]
    fn psi_lines() {
        let p = parse_psi(
            "some avg10=1.50 avg60=0.25 avg300=0.00 total=299076\n\
             full avg10=0.75 avg60=0.00 avg300=0.00 total=290051\n",
        )
        .unwrap();
        assert_eq!(p.some.avg10, 1.5);
        assert_eq!(p.some.total_us, 299076);
        assert_eq!(p.full.unwrap().avg10, 0.75);
        // The cpu file before 5.13 had no full line.
        let p = parse_psi("some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n").unwrap();
        assert_eq!((p.some.total_us, p.full), (5, None));
        assert!(parse_psi("").is_none());
        assert!(parse_psi("some avg10=x avg60=0 avg300=0 total=1\n").is_none());
    }

    #[test]
    fn swaps() {
        let s = parse_swaps(
            "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n\
             /swap\\040file\t\t\t\tfile\t\t1048572\t\t2048\t\t-2\n\
             /dev/zram0                              partition\t4194300\t\t0\t\t100\n",
        );
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].name, "/swap file");
        assert_eq!(
            (s[0].size_kb, s[0].used_kb, s[0].priority),
            (1048572, 2048, -2)
        );
        assert_eq!(s[1].kind, "partition");
        assert!(parse_swaps("Filename Type Size Used Priority\n").is_empty());
    }

    #[test]
    fn stat_with_a_hostile_comm() {
        let text = "1234 (a) b (c) S 1 1234 1234 0 -1 4194560 4567 0 12 0 3 1 0 0 20 0 1 0 \
                    100 12345678 2560 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1\n";
        let s = parse_stat(text).unwrap();
        assert_eq!(s.comm, "a) b (c");
        assert_eq!((s.minflt, s.majflt, s.rss_pages), (4567, 12, 2560));
        assert!(parse_stat("1234 (x) S 1 2").is_none());
        assert!(parse_stat("garbage").is_none());
    }

    #[test]
    fn limits_v1_and_v2() {
        assert_eq!(parse_limit("9223372036854771712\n"), None);
        assert_eq!(parse_limit("33554432\n"), Some(32 << 20));
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("garbage"), None);
    }

    #[test]
    fn kmsg_records_and_oom_kills() {
        let r = parse_kmsg_record(
            "3,1234,5678901,-;Memory cgroup out of memory: Killed process 4242 (hog-nofp) \
             total-vm:69924kB, anon-rss:65024kB, file-rss:1280kB, shmem-rss:0kB, UID:0 \
             pgtables:176kB oom_score_adj:0\n SUBSYSTEM=memory\n",
        )
        .unwrap();
        assert_eq!((r.seq, r.usec), (1234, 5678901));
        let k = parse_oom_kill(&r.message).unwrap();
        assert_eq!((k.pid, k.comm.as_str(), k.memcg), (4242, "hog-nofp", true));
        let k =
            parse_oom_kill("Out of memory: Killed process 77 (my) app) total-vm:1kB, anon-rss:0kB")
                .unwrap();
        assert_eq!((k.pid, k.comm.as_str(), k.memcg), (77, "my) app", false));
        // Before 4.19 the victim line had no prefix.
        let k = parse_oom_kill("Killed process 9 (x) total-vm:1kB").unwrap();
        assert_eq!((k.pid, k.memcg), (9, false));
        assert!(parse_oom_kill("oom_reaper: reaped process 4242 (hog)").is_none());
        assert!(parse_kmsg_record("no header").is_none());

        let c = parse_oom_context(
            "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,\
             oom_memcg=/memperf-test-oom-1,task_memcg=/memperf-test-oom-1,task=hog,pid=4242,uid=0",
        );
        assert_eq!(c, Some((4242, Some("/memperf-test-oom-1".to_string()))));
        let c = parse_oom_context(
            "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,\
             global_oom,task_memcg=/,task=x,pid=5,uid=0",
        );
        assert_eq!(c, Some((5, None)));
    }
}
