//! The cgroup of each id the kernel writes in the agent's samples (`PERF_SAMPLE_CGROUP`:
//! the inode number of the task's cgroup v2 directory), so that a process gone before the
//! agent handled its first sample is still named after its unit or `-G` cgroup: its
//! `/proc/PID/cgroup` is gone with it. The map is filled by walking the cgroup2 mount at
//! start, told of each cgroup made during the run by its CGROUP record, and walked again,
//! at most every `REWALK_EVERY` (and every twenty times a walk's own time), when an id is
//! unknown. A cgroup removed stays named until the map is full: the samples of its
//! processes may still be queued.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use crate::sys::cgroup;

/// The most cgroups the map holds (a walk reads at most as many directories): a host's
/// cgroups are hundreds to a few thousand.
const MAX_IDS: usize = 65_536;

/// The least time between two walks on an unknown id: a walk reads every directory.
const REWALK_EVERY: Duration = Duration::from_millis(500);

/// A walk again no sooner than this many times the last walk's own time: on a host of tens
/// of thousands of cgroups a walk takes a fifth of a second, and the reader waits for it.
const REWALK_COST_FACTOR: u32 = 20;

/// What the map could not do, for the agent's note at exit.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IdStats {
    /// Ids that neither the map nor a walk knew (their process named from /proc).
    pub unknown: u64,
    /// Cgroups left out past `MAX_IDS` (by a walk, or from CGROUP records).
    pub folded: u64,
    /// Walks made after the first.
    pub rewalks: u64,
}

/// Cgroup ids and their paths, as `/proc/PID/cgroup` shows them (`/system.slice/x.service`).
pub(crate) struct CgroupIds {
    /// The cgroup2 mount.
    root: PathBuf,
    paths: FxHashMap<u64, Box<str>>,
    walked: Instant,
    rewalk_every: Duration,
    /// How long the last walk took.
    walk_took: Duration,
    pub stats: IdStats,
}

impl CgroupIds {
    /// The map of this host's cgroups, where the ids name them: perf events follow cgroup
    /// v2 (`sys::cgroup::unified_mount`, and no v1 hierarchy holds the `perf_event`
    /// controller, mounted here or not: its ids would be another hierarchy's, and name
    /// unrelated v2 directories), and the agent sees the whole hierarchy (its cgroup
    /// namespace is the initial one: the kernel's records give paths from the hierarchy's
    /// root, a walk from the namespace's); `None` elsewhere (the agent reads /proc).
    pub fn of_host() -> Option<CgroupIds> {
        let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
        let controllers = std::fs::read_to_string("/proc/cgroups").unwrap_or_default();
        if cgroup::perf_event_on_v1(&controllers) || !cgroup::in_initial_namespace() {
            return None;
        }
        Some(CgroupIds::walking(cgroup::unified_mount(&mounts)?))
    }

    /// The map of the cgroups under `root`, walked now.
    pub fn walking(root: PathBuf) -> CgroupIds {
        let mut ids = CgroupIds {
            root,
            paths: FxHashMap::default(),
            walked: Instant::now(),
            rewalk_every: REWALK_EVERY,
            walk_took: Duration::ZERO,
            stats: IdStats::default(),
        };
        ids.walk();
        ids
    }

    /// A CGROUP record: cgroup `id` was made at `path`.
    pub fn learn(&mut self, id: u64, path: &[u8]) {
        if self.paths.len() >= MAX_IDS && !self.paths.contains_key(&id) {
            // Cgroups made and removed again (transient units) fill the map: a walk keeps
            // those that still exist.
            self.rewalk();
            if self.paths.len() >= MAX_IDS {
                self.stats.folded += 1;
                return;
            }
        }
        let path = String::from_utf8_lossy(path).into_owned().into_boxed_str();
        self.paths.insert(id, path);
    }

    /// The path of cgroup `id`; an unknown id walks the hierarchy again, unless it was
    /// walked less than `REWALK_EVERY` ago.
    pub fn path(&mut self, id: u64) -> Option<&str> {
        if !self.paths.contains_key(&id) {
            self.rewalk();
        }
        let found = self.paths.get(&id).map(|p| &**p);
        if found.is_none() {
            self.stats.unknown += 1;
        }
        found
    }

    /// Walks again, at most every `rewalk_every` and every `REWALK_COST_FACTOR` times the
    /// last walk's time.
    fn rewalk(&mut self) {
        let every = self
            .rewalk_every
            .max(self.walk_took.saturating_mul(REWALK_COST_FACTOR));
        if self.walked.elapsed() < every {
            return;
        }
        self.stats.rewalks += 1;
        self.walk();
    }

    /// Adds what the hierarchy holds now. Cgroups removed since stay (their ids are not
    /// reused: the kernel's ids carry a generation), for the samples of their processes still
    /// to come, whether a walk or a CGROUP record named them; once they would fill the map,
    /// it becomes what the hierarchy holds now.
    fn walk(&mut self) {
        let began = Instant::now();
        let (found, truncated) = cgroup::walk(&self.root, MAX_IDS);
        if truncated {
            self.stats.folded += 1;
        }
        let found: FxHashMap<u64, Box<str>> = found
            .into_iter()
            .map(|(id, path)| (id, path.into_boxed_str()))
            .collect();
        let gone = self
            .paths
            .keys()
            .filter(|id| !found.contains_key(id))
            .count();
        if found.len() + gone > MAX_IDS {
            self.paths = found;
        } else {
            self.paths.extend(found);
        }
        self.walked = Instant::now();
        self.walk_took = began.elapsed();
    }

    /// The line the agent prints at exit when ids went unnamed.
    pub fn note(&self) -> Option<String> {
        let s = self.stats;
        (s.unknown + s.folded > 0).then(|| {
            format!(
                "cgroup ids: {} processes' ids were in no walk of {} (named from /proc, else \
                 after their command), {} cgroups left out past the bound of {MAX_IDS}, {} \
                 walks again",
                s.unknown,
                self.root.display(),
                s.folded,
                s.rewalks
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// A directory tree standing for a cgroup2 mount, removed at the end.
    struct Tree(PathBuf);

    impl Tree {
        fn new(name: &str) -> Tree {
            let dir = std::env::temp_dir()
                .join(format!("memperf-cgroup-ids-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("system.slice/nginx.service")).unwrap_or_default();
            Tree(dir)
        }

        fn ino(&self, rel: &str) -> u64 {
            std::fs::metadata(self.0.join(rel)).map_or(0, |m| m.ino())
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn the_walk_at_start_names_every_cgroup() {
        let tree = Tree::new("walk");
        let mut ids = CgroupIds::walking(tree.0.clone());
        let nginx = tree.ino("system.slice/nginx.service");
        assert_eq!(ids.path(nginx), Some("/system.slice/nginx.service"));
        assert_eq!(ids.path(tree.ino("")), Some("/"));
        assert_eq!(ids.stats, IdStats::default());
        assert_eq!(ids.note(), None);
    }

    #[test]
    fn a_cgroup_record_names_a_cgroup_made_later() {
        let tree = Tree::new("record");
        let mut ids = CgroupIds::walking(tree.0.clone());
        ids.rewalk_every = Duration::from_secs(3600);
        // Made and removed again before any walk saw it: only its record names it.
        ids.learn(987_654_321, b"/system.slice/run-u7.service");
        assert_eq!(ids.path(987_654_321), Some("/system.slice/run-u7.service"));
        assert_eq!(ids.stats.rewalks, 0);
    }

    #[test]
    fn an_unknown_id_walks_again_at_most_every_interval() {
        let tree = Tree::new("unknown");
        let mut ids = CgroupIds::walking(tree.0.clone());
        ids.rewalk_every = Duration::from_secs(3600);
        std::fs::create_dir(tree.0.join("late")).unwrap_or_default();
        let late = tree.ino("late");
        // Walked too recently: unknown, counted, and the process is named from /proc.
        assert_eq!(ids.path(late), None);
        assert_eq!(ids.stats.unknown, 1);
        assert!(ids.note().is_some_and(|n| n.contains("1 processes' ids")));
        ids.rewalk_every = Duration::ZERO;
        ids.walk_took = Duration::ZERO;
        assert_eq!(ids.path(late), Some("/late"));
        assert_eq!(ids.stats.rewalks, 1);
        // A known id walks nothing.
        assert_eq!(ids.path(late), Some("/late"));
        assert_eq!(ids.stats.rewalks, 1);
        // A cgroup removed keeps its name through the next walk: its processes' samples
        // may still be queued.
        std::fs::remove_dir(tree.0.join("late")).unwrap_or_default();
        ids.walk_took = Duration::ZERO;
        assert_eq!(ids.path(u64::MAX), None);
        assert_eq!(ids.stats.rewalks, 2);
        assert_eq!(ids.path(late), Some("/late"));
    }

    /// A cgroup made and removed during the run, named only by its CGROUP record, is still
    /// named after another id's walk: the walk adds to the map, it does not replace it.
    #[test]
    fn a_walk_keeps_what_cgroup_records_named() {
        let tree = Tree::new("keeps");
        let mut ids = CgroupIds::walking(tree.0.clone());
        ids.learn(987_654_321, b"/system.slice/run-u7.service");
        ids.rewalk_every = Duration::ZERO;
        ids.walk_took = Duration::ZERO;
        std::fs::create_dir(tree.0.join("other.service")).unwrap_or_default();
        let other = tree.ino("other.service");
        assert_eq!(ids.path(other), Some("/other.service"));
        assert_eq!(ids.stats.rewalks, 1);
        assert_eq!(ids.path(987_654_321), Some("/system.slice/run-u7.service"));
    }

    /// A walk that took long keeps the next one away for twenty times as long.
    #[test]
    fn a_slow_walk_spaces_the_next_ones() {
        let tree = Tree::new("slow");
        let mut ids = CgroupIds::walking(tree.0.clone());
        ids.rewalk_every = Duration::ZERO;
        ids.walk_took = Duration::from_secs(60);
        assert_eq!(ids.path(u64::MAX - 1), None);
        assert_eq!(ids.stats.rewalks, 0);
    }
}
