//! Parsers of the text files triage reads: `/proc/meminfo`, `/proc/vmstat` and every other
//! `key value` file, PSI lines, `/proc/swaps`, `/proc/PID/stat`, the memory cgroup files.
//! Each takes the text and returns what it could parse; malformed lines are skipped, never
//! fatal. Kernel log records are `crate::kmsg`'s.

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
}
