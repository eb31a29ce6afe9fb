//! Memory cgroups: where their hierarchies are mounted, every cgroup in them, and each one's
//! usage, limit and limit events (v1 `memory.failcnt`/`memory.oom_control`, v2
//! `memory.events`), read at the run's start and end.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::parse::{parse_keyed, parse_limit};
use crate::procfs::CgroupVersion;

/// No more cgroups than this are read per snapshot (a host with more says so).
pub(super) const MAX_CGROUPS: usize = 4096;

/// Where the memory controller's hierarchies are mounted (`/proc/self/mounts`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Mounts {
    pub v1: Option<PathBuf>,
    pub v2: Option<PathBuf>,
}

/// `cgroup` mounts whose options name `memory`, and the `cgroup2` mount whose
/// `cgroup.controllers` has `memory`.
pub(super) fn parse_mounts(text: &str, v2_has_memory: impl Fn(&Path) -> bool) -> Mounts {
    let mut m = Mounts::default();
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let [_, dir, fstype, opts, ..] = w.as_slice() else {
            continue;
        };
        let dir = PathBuf::from(dir.replace("\\040", " "));
        match *fstype {
            "cgroup" if opts.split(',').any(|o| o == "memory") && m.v1.is_none() => {
                m.v1 = Some(dir)
            }
            "cgroup2" if m.v2.is_none() && v2_has_memory(&dir) => m.v2 = Some(dir),
            _ => {}
        }
    }
    m
}

pub(super) fn mounts() -> Mounts {
    let text = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    parse_mounts(&text, |dir| {
        std::fs::read_to_string(dir.join("cgroup.controllers"))
            .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"))
    })
}

/// One memory cgroup at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct CgroupSample {
    pub version: CgroupVersion,
    /// As `/proc/PID/cgroup` shows it (`/` for the root).
    pub path: String,
    pub usage: Option<u64>,
    /// The highest usage the cgroup has had (v1 `memory.max_usage_in_bytes`, v2
    /// `memory.peak`, 5.19+): reclaim at the limit brings usage back down before a run's
    /// end is read.
    pub peak: Option<u64>,
    /// `None`: no limit.
    pub limit: Option<u64>,
    /// Counters that rise when the limit is hit: v1 `failcnt`, `memsw_failcnt`, `oom_kill`
    /// (4.13+) and `pgpgout` from `memory.stat`; v2
    /// `max`, `high`, `oom`, `oom_kill`; v2's `pgscan`/`pgsteal` from `memory.stat`.
    pub events: BTreeMap<String, u64>,
}

/// A cgroup from its files, `read(name)` giving a file's text: the one place that knows
/// which file of which version says what.
pub(super) fn cgroup_from_files(
    version: CgroupVersion,
    path: String,
    read: impl Fn(&str) -> Option<String>,
) -> CgroupSample {
    let num = |name: &str| read(name).and_then(|t| t.trim().parse().ok());
    let mut events = BTreeMap::new();
    let peak = match version {
        CgroupVersion::V1 => num("memory.max_usage_in_bytes"),
        CgroupVersion::V2 => num("memory.peak"),
    };
    let (usage, limit) = match version {
        CgroupVersion::V1 => {
            // With swap accounting the memory+swap counter is charged first: at a common
            // limit it is the one that fails and counts.
            for (file, key) in [
                ("memory.failcnt", "failcnt"),
                ("memory.memsw.failcnt", "memsw_failcnt"),
            ] {
                if let Some(n) = num(file) {
                    events.insert(key.to_string(), n);
                }
            }
            if let Some(t) = read("memory.oom_control") {
                let oc = parse_keyed(&t);
                for key in ["oom_kill", "under_oom"] {
                    if let Some(&n) = oc.get(key) {
                        events.insert(key.to_string(), n);
                    }
                }
            }
            // Pages uncharged: at the limit, what reclaim took back (v1 has no pgscan, and
            // a 6.18 kernel was seen to leave failcnt at 0 while it reclaimed at the limit).
            if let Some(&n) = read("memory.stat")
                .and_then(|t| parse_keyed(&t).get("pgpgout").copied())
                .as_ref()
            {
                events.insert("pgpgout".to_string(), n);
            }
            let limit = read("memory.limit_in_bytes").and_then(|t| parse_limit(&t));
            (num("memory.usage_in_bytes"), limit)
        }
        CgroupVersion::V2 => {
            if let Some(t) = read("memory.events") {
                events.extend(parse_keyed(&t));
            }
            if let Some(t) = read("memory.stat") {
                let st = parse_keyed(&t);
                for key in ["pgscan", "pgsteal"] {
                    if let Some(&n) = st.get(key) {
                        events.insert(key.to_string(), n);
                    }
                }
            }
            let limit = read("memory.max").and_then(|t| parse_limit(&t));
            (num("memory.current"), limit)
        }
    };
    CgroupSample {
        version,
        path,
        usage,
        peak,
        limit,
        events,
    }
}

/// Reads the cgroup at `dir` (`path` below its hierarchy's mount).
pub(super) fn read_cgroup(version: CgroupVersion, root: &Path, path: &str) -> CgroupSample {
    let dir = root.join(path.trim_start_matches('/'));
    cgroup_from_files(version, path.to_string(), |name| {
        std::fs::read_to_string(dir.join(name)).ok()
    })
}

/// Whether a cgroup is at its limit (90% of it or more).
pub(super) fn near_limit(c: &CgroupSample) -> bool {
    matches!((c.usage, c.limit), (Some(u), Some(l)) if u >= l / 10 * 9)
}

/// Near its limit now, or has been at it (its peak within 5%): with uncharges or scans
/// rising over the run, the sign of reclaim at the limit even when the end's usage is
/// already back below 90% (seen here: 29.8 of 32 MiB after a `dd` through the cgroup).
pub(super) fn reached_limit(c: &CgroupSample) -> bool {
    near_limit(c) || matches!((c.peak, c.limit), (Some(p), Some(l)) if p >= l / 20 * 19)
}

/// Every memory cgroup of both hierarchies (up to `MAX_CGROUPS`), with whether the walk
/// stopped at that bound.
pub(super) fn read_all(m: &Mounts) -> (Vec<CgroupSample>, bool) {
    let mut out = Vec::new();
    let mut truncated = false;
    for (version, root) in [(CgroupVersion::V1, &m.v1), (CgroupVersion::V2, &m.v2)] {
        let Some(root) = root else { continue };
        let mut stack = vec![PathBuf::new()];
        while let Some(rel) = stack.pop() {
            if out.len() >= MAX_CGROUPS {
                truncated = true;
                break;
            }
            let path = format!("/{}", rel.display());
            out.push(read_cgroup(version, root, &path));
            let Ok(entries) = std::fs::read_dir(root.join(&rel)) else {
                continue;
            };
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(rel.join(e.file_name()));
                }
            }
        }
    }
    (out, truncated)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn files(list: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = list
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn v1_files() {
        let cg = cgroup_from_files(
            CgroupVersion::V1,
            "/memperf-test".to_string(),
            files(&[
                ("memory.limit_in_bytes", "33554432\n"),
                ("memory.usage_in_bytes", "33497088\n"),
                ("memory.failcnt", "1187\n"),
                ("memory.memsw.failcnt", "12\n"),
                (
                    "memory.oom_control",
                    "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
                ),
                (
                    "memory.stat",
                    "cache 31457280\nrss 0\npgpgin 1253\npgpgout 1238\n",
                ),
            ]),
        );
        assert_eq!(cg.limit, Some(32 << 20));
        assert_eq!(cg.usage, Some(33497088));
        assert_eq!(cg.events["failcnt"], 1187);
        assert_eq!(cg.events["memsw_failcnt"], 12);
        assert_eq!(cg.events["pgpgout"], 1238);
        assert_eq!(cg.events["oom_kill"], 1);
        // The root: no limit (PAGE_COUNTER_MAX), older kernels without oom_kill.
        let cg = cgroup_from_files(
            CgroupVersion::V1,
            "/".to_string(),
            files(&[
                ("memory.limit_in_bytes", "9223372036854771712\n"),
                ("memory.oom_control", "oom_kill_disable 0\nunder_oom 0\n"),
            ]),
        );
        assert_eq!((cg.limit, cg.usage), (None, None));
        assert!(!cg.events.contains_key("oom_kill"));
    }

    #[test]
    fn a_cgroup_that_reclaimed_back_below_its_limit_still_reached_it() {
        let cg = |usage: &str, peak: &str| {
            cgroup_from_files(
                CgroupVersion::V1,
                "/t".to_string(),
                files(&[
                    ("memory.limit_in_bytes", "33554432\n"),
                    ("memory.usage_in_bytes", usage),
                    ("memory.max_usage_in_bytes", peak),
                ]),
            )
        };
        // 29.8 of 32 MiB at the end, 32 MiB at its peak: reached, not near.
        let back = cg("29761536\n", "33554432\n");
        assert_eq!(back.peak, Some(32 << 20));
        assert!(!near_limit(&back));
        assert!(reached_limit(&back));
        let never = cg("1048576\n", "2097152\n");
        assert!(!reached_limit(&never));
    }

    #[test]
    fn v2_files() {
        let cg = cgroup_from_files(
            CgroupVersion::V2,
            "/system.slice/app.service".to_string(),
            files(&[
                ("memory.max", "max\n"),
                ("memory.current", "1048576\n"),
                (
                    "memory.events",
                    "low 0\nhigh 0\nmax 42\noom 1\noom_kill 1\noom_group_kill 0\n",
                ),
                ("memory.stat", "anon 4096\npgscan 900\npgsteal 850\n"),
            ]),
        );
        assert_eq!((cg.limit, cg.usage), (None, Some(1 << 20)));
        assert_eq!((cg.events["max"], cg.events["oom_kill"]), (42, 1));
        assert_eq!((cg.events["pgscan"], cg.events["pgsteal"]), (900, 850));
        let cg = cgroup_from_files(
            CgroupVersion::V2,
            "/x".to_string(),
            files(&[("memory.max", "67108864\n")]),
        );
        assert_eq!(cg.limit, Some(64 << 20));
    }

    #[test]
    fn mounts_of_each_hierarchy() {
        let text = "cgroup /sys/fs/cgroup/cpu cgroup rw,nosuid,cpu 0 0\n\
                    cgroup /sys/fs/cgroup/memory cgroup rw,nosuid,nodev,noexec,relatime,memory 0 0\n\
                    cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nsdelegate 0 0\n";
        let m = parse_mounts(text, |_| false);
        assert_eq!(m.v1.as_deref(), Some(Path::new("/sys/fs/cgroup/memory")));
        assert_eq!(m.v2, None);
        let m = parse_mounts("cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n", |_| true);
        assert_eq!(m.v2.as_deref(), Some(Path::new("/sys/fs/cgroup")));
        assert_eq!(m.v1, None);
    }
}
