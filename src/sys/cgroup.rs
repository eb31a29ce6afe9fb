//! The cgroups perf's cgroup mode (`-G`) opens events on: a name resolved to its directory
//! in the cgroup file system perf events follow (cgroup v2, else v1's `perf_event`
//! hierarchy), and that directory opened for `perf_event_open(PERF_FLAG_PID_CGROUP)`; and
//! the cgroup v2 hierarchy walked for the ids `PERF_SAMPLE_CGROUP` gives samples.

use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// A cgroup events are opened on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup {
    /// Its path as `/proc/PID/cgroup` shows it (`/system.slice/nginx.service`).
    pub path: String,
    /// Its directory.
    pub dir: PathBuf,
}

/// Where the cgroup hierarchy perf events follow is mounted, from `/proc/self/mounts`
/// text: the cgroup2 file system, else the v1 hierarchy with the `perf_event` controller.
pub fn perf_mount(mounts: &str) -> Option<PathBuf> {
    let entries: Vec<Vec<&str>> = mounts
        .lines()
        .map(|l| l.split_whitespace().collect())
        .filter(|f: &Vec<&str>| f.len() >= 4)
        .collect();
    let v2 = entries.iter().find(|f| f[2] == "cgroup2");
    let v1 = entries
        .iter()
        .find(|f| f[2] == "cgroup" && f[3].split(',').any(|o| o == "perf_event"));
    v1.or(v2).map(|f| PathBuf::from(unescape(f[1])))
}

/// The cgroup2 mount, when perf events follow cgroup v2 (no v1 `perf_event` hierarchy is
/// mounted): there a sample's cgroup id (`PERF_SAMPLE_CGROUP`, the v2 cgroup the task is
/// in) names a cgroup in the same terms as `-G` and `/proc/PID/cgroup`'s `0::` line.
pub fn unified_mount(mounts: &str) -> Option<PathBuf> {
    let root = perf_mount(mounts)?;
    let is_v2 = mounts.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() >= 3 && f[2] == "cgroup2" && Path::new(&unescape(f[1])) == root
    });
    is_v2.then_some(root)
}

/// Whether `/proc/cgroups` (`subsys_name hierarchy num_cgroups enabled`) has the
/// `perf_event` controller on a v1 hierarchy (a hierarchy number other than 0), mounted in
/// this mount namespace or not: perf's cgroup ids are then that hierarchy's.
pub fn perf_event_on_v1(proc_cgroups: &str) -> bool {
    proc_cgroups.lines().any(|l| {
        let mut f = l.split_whitespace();
        f.next() == Some("perf_event") && f.next().is_some_and(|h| h != "0")
    })
}

/// The initial cgroup namespace's inode (`PROC_CGROUP_INIT_INO`).
const INITIAL_CGROUP_NS: &str = "cgroup:[4026531835]";

/// Whether this process is in the initial cgroup namespace (so that paths under its
/// cgroup mount are the paths from the hierarchy's root the kernel's records give); a
/// kernel without cgroup namespaces (before 4.6) has only that one.
pub fn in_initial_namespace() -> bool {
    match std::fs::read_link("/proc/self/ns/cgroup") {
        Ok(link) => link.as_os_str() == INITIAL_CGROUP_NS,
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

/// The cgroups under `root`, a cgroup2 mount: each directory's id (its inode number, which
/// is the kernel's cgroup id) and its path as `/proc/PID/cgroup` shows it, the root `/`
/// first; at most `max` of them, and whether more were left out. Symbolic links are not
/// followed; a directory removed during the walk is skipped.
pub fn walk(root: &Path, max: usize) -> (Vec<(u64, String)>, bool) {
    let mut out = Vec::new();
    let mut todo = vec![(root.to_path_buf(), String::from("/"))];
    let mut truncated = false;
    while let Some((dir, path)) = todo.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&dir) else {
            continue;
        };
        out.push((meta.ino(), path.clone()));
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            if out.len() + todo.len() >= max {
                truncated = true;
                break;
            }
            let name = e.file_name();
            let sep = if path == "/" { "" } else { "/" };
            let child = format!("{path}{sep}{}", name.to_string_lossy());
            todo.push((e.path(), child));
        }
    }
    (out, truncated)
}

/// A mount point as `/proc/mounts` writes it, with `\040` for a space and so on.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .and_then(|d| std::str::from_utf8(d).ok())
            .and_then(|d| u8::from_str_radix(d, 8).ok());
        if b[i] == b'\\'
            && let Some(v) = octal
        {
            out.push(v);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Each comma-separated cgroup of `-G`, relative to the mount (`system.slice/nginx.service`)
/// or as a directory under it (`/sys/fs/cgroup/system.slice`), checked to exist.
pub fn resolve(names: &[String]) -> Result<Vec<Cgroup>> {
    let mounts =
        std::fs::read_to_string("/proc/self/mounts").context("failed to read /proc/self/mounts")?;
    let Some(root) = perf_mount(&mounts) else {
        bail!("no cgroup file system is mounted (cgroup2, or cgroup v1 with perf_event)");
    };
    names
        .iter()
        .flat_map(|n| n.split(','))
        .map(|name| resolve_one(&root, name))
        .collect()
}

fn resolve_one(root: &Path, name: &str) -> Result<Cgroup> {
    let name = name.trim();
    if name.is_empty() {
        bail!("-G: an empty cgroup name");
    }
    let rel = Path::new(name)
        .strip_prefix(root)
        .unwrap_or(Path::new(name))
        .to_string_lossy()
        .trim_matches('/')
        .to_string();
    if rel.split('/').any(|c| c == "..") {
        bail!("-G {name}: a cgroup name may not hold `..`");
    }
    let dir = root.join(&rel);
    if !dir.is_dir() {
        bail!(
            "-G {name}: no cgroup `{}` (no directory {})",
            rel,
            dir.display()
        );
    }
    // One spelling per cgroup (`a//b/.` is `a/b`), so that nesting is told by the path.
    let rel: Vec<&str> = rel
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    let rel = rel.join("/");
    Ok(Cgroup {
        path: format!("/{rel}"),
        dir: root.join(&rel),
    })
}

/// The cgroups events are opened on: each of `cgroups` that is not inside another of them
/// (nor given twice), with a sentence for each left out. An event opened on a cgroup also
/// fires for the tasks of every cgroup below it, so events on both `a` and `a/b` would take
/// each sample of a task in `a/b` twice; `a`'s events alone take it once.
pub fn outermost(cgroups: &[Cgroup]) -> (Vec<Cgroup>, Vec<String>) {
    let mut kept: Vec<Cgroup> = Vec::new();
    let mut notes = Vec::new();
    for (i, c) in cgroups.iter().enumerate() {
        if cgroups[..i].iter().any(|o| o.path == c.path) {
            continue;
        }
        let outer = cgroups
            .iter()
            .filter(|o| o.path != c.path && holds(&o.path, &c.path))
            .min_by_key(|o| o.path.len());
        match outer {
            Some(o) => notes.push(format!(
                "-G: `{}` is inside `{}`: its tasks are sampled once, by the events opened on \
                 `{}` (a cgroup's events also fire for the cgroups below it)",
                c.path, o.path, o.path
            )),
            None => kept.push(c.clone()),
        }
    }
    (kept, notes)
}

/// Whether cgroup `outer` holds cgroup `inner` (or is it): paths as `/proc/PID/cgroup` shows.
fn holds(outer: &str, inner: &str) -> bool {
    let outer = outer.trim_end_matches('/');
    inner == outer
        || inner
            .strip_prefix(outer)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The cgroups' directories, opened for `perf_event_open`.
pub fn open(cgroups: &[Cgroup]) -> Result<Vec<OwnedFd>> {
    cgroups
        .iter()
        .map(|c| {
            std::fs::File::open(&c.dir)
                .map(OwnedFd::from)
                .with_context(|| format!("failed to open the cgroup `{}`", c.dir.display()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_perf_event_controller_on_a_v1_hierarchy_is_seen_in_proc_cgroups() {
        let v2 =
            "#subsys_name\thierarchy\tnum_cgroups\tenabled\ncpu\t1\t1\t1\nperf_event\t0\t1\t1\n";
        assert!(!perf_event_on_v1(v2));
        let v1 = "#subsys_name\thierarchy\tnum_cgroups\tenabled\nperf_event\t9\t4\t1\n";
        assert!(perf_event_on_v1(v1));
        assert!(!perf_event_on_v1(
            "#subsys_name\thierarchy\tnum_cgroups\tenabled\ncpu\t1\t1\t1\n"
        ));
    }

    use super::*;

    #[test]
    fn the_mount_perf_follows_is_found() {
        let v2 = "sysfs /sys sysfs rw 0 0\ncgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n";
        assert_eq!(perf_mount(v2), Some(PathBuf::from("/sys/fs/cgroup")));
        let v1 = "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n\
                  cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n\
                  cgroup /sys/fs/cgroup/perf\\040event cgroup rw,nosuid,perf_event 0 0\n";
        assert_eq!(
            perf_mount(v1),
            Some(PathBuf::from("/sys/fs/cgroup/perf event"))
        );
        assert_eq!(perf_mount("proc /proc proc rw 0 0\n"), None);
    }

    #[test]
    fn cgroup_ids_name_cgroups_only_where_perf_follows_v2() {
        let v2 = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid 0 0\n";
        assert_eq!(unified_mount(v2), Some(PathBuf::from("/sys/fs/cgroup")));
        let hybrid = "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n\
                      cgroup /sys/fs/cgroup/perf_event cgroup rw,perf_event 0 0\n";
        assert_eq!(unified_mount(hybrid), None);
        assert_eq!(unified_mount("proc /proc proc rw 0 0\n"), None);
    }

    #[test]
    fn the_walk_gives_each_directorys_inode_and_path_within_its_bound() {
        let root = std::env::temp_dir().join(format!("memperf-walk-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("a.slice/b.service")).unwrap_or_default();
        std::fs::create_dir_all(root.join("c")).unwrap_or_default();
        std::fs::write(root.join("c/cgroup.procs"), "").unwrap_or_default();
        let ino = |p: &str| std::fs::metadata(root.join(p)).map_or(0, |m| m.ino());
        let expected = [
            (ino(""), "/".to_string()),
            (ino("a.slice"), "/a.slice".to_string()),
            (ino("a.slice/b.service"), "/a.slice/b.service".to_string()),
            (ino("c"), "/c".to_string()),
        ];
        let (mut all, truncated) = walk(&root, 100);
        let (few, cut) = walk(&root, 2);
        let _ = std::fs::remove_dir_all(&root);
        all.sort_by(|a, b| a.1.cmp(&b.1));
        assert_eq!(all, expected);
        assert!(!truncated);
        assert!(cut && few.len() == 2, "{few:?}");
        assert_eq!(few[0], expected[0]);
    }

    #[test]
    fn names_are_taken_relative_to_the_mount_or_under_it() {
        let root = std::env::temp_dir();
        let sub = root.join(format!("memperf-cgroup-test-{}", std::process::id()));
        std::fs::create_dir_all(sub.join("a.service")).unwrap_or_default();
        let leaf = sub.file_name().map(|n| n.to_string_lossy().into_owned());
        let leaf = leaf.unwrap_or_default();
        let by_name = resolve_one(&root, &format!("{leaf}/a.service/"));
        let by_dir = resolve_one(&root, &sub.join("a.service").to_string_lossy());
        let _ = std::fs::remove_dir_all(&sub);
        let by_name = by_name.ok();
        assert_eq!(
            by_name.as_ref().map(|c| c.path.clone()),
            Some(format!("/{leaf}/a.service"))
        );
        assert_eq!(by_name, by_dir.ok());
        assert!(resolve_one(&root, "../etc").is_err());
        assert!(resolve_one(&root, "no-such-cgroup-here").is_err());
    }

    #[test]
    fn only_the_outermost_of_nested_cgroups_is_opened() {
        let cg = |p: &str| Cgroup {
            path: p.to_string(),
            dir: PathBuf::from(format!("/sys/fs/cgroup{p}")),
        };
        let given = [
            cg("/a/b"),
            cg("/ab"),
            cg("/a"),
            cg("/a/b/c"),
            cg("/ab"),
            cg("/c"),
        ];
        let (kept, notes) = outermost(&given);
        let kept: Vec<&str> = kept.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(kept, ["/ab", "/a", "/c"]);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(
            notes[0].starts_with("-G: `/a/b` is inside `/a`"),
            "{notes:?}"
        );
        assert!(
            notes[1].starts_with("-G: `/a/b/c` is inside `/a`"),
            "{notes:?}"
        );
        // The root holds every cgroup.
        let (kept, _) = outermost(&[cg("/a"), cg("/")]);
        assert_eq!(kept, [cg("/")]);
    }
}
