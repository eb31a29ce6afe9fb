//! Which process group a process's samples ship in: the service its cgroup names (a
//! systemd unit, else the command), and the container it runs in: from the cgroup id its
//! samples carry (`cgroup_ids`), else from `/proc/PID/cgroup` at its first sample.

use rustc_hash::FxHashMap;

use super::cgroup_ids::CgroupIds;

/// What a process's profile is named and labelled by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Group {
    /// The service: the systemd unit (`nginx` of `nginx.service`), else the command.
    pub service: String,
    /// The container's id (64 hex digits) when a path component of its cgroup holds one.
    pub container: Option<String>,
}

/// The cgroup of each process seen, found at its first sample and again when a sample
/// names another (a process moved after it began, as a service's process forked in its
/// manager's cgroup is, goes by the cgroup it moved to; one that exits before its window
/// ends keeps its service); the processes of no sample in a window are forgotten at its
/// end, so the table holds one window's processes.
#[derive(Default)]
pub(crate) struct Groups {
    by_pid: FxHashMap<u32, Cgroup>,
    /// The cgroups of `-G` (paths as `/proc/PID/cgroup` shows them): a process inside one
    /// and in no systemd unit is named after it.
    named: Vec<String>,
    /// The paths of the cgroup ids samples carry, where the kernel gives them.
    pub ids: Option<CgroupIds>,
}

struct Cgroup {
    unit: Option<String>,
    container: Option<String>,
    seen: bool,
    /// The cgroup id of the sample it was found at, when samples carry one.
    id: Option<u64>,
}

impl Cgroup {
    /// Cgroup `id` at `path` (`/proc/PID/cgroup`'s form), else process `pid`'s in /proc.
    fn read(pid: u32, (id, path): (Option<u64>, Option<&str>), named: &[String]) -> Cgroup {
        let text = match path {
            Some(path) => format!("0::{path}\n"),
            None => std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default(),
        };
        Cgroup {
            unit: service_of(&text).or_else(|| named_of(&text, named)),
            container: container_of(&text),
            seen: true,
            id,
        }
    }
}

impl Groups {
    /// Groups whose processes in the cgroups `named` (`-G`) are named after them.
    /// With `ids`, the cgroup ids samples carry name their cgroups.
    pub fn new(named: Vec<String>, ids: Option<CgroupIds>) -> Groups {
        Groups {
            by_pid: FxHashMap::default(),
            named,
            ids,
        }
    }

    /// Process `pid` had a sample, in cgroup `cgroup` when the sample says: its cgroup is
    /// found if the process is new or the cgroup another.
    pub fn note(&mut self, pid: u32, cgroup: Option<u64>) {
        match self.by_pid.get_mut(&pid) {
            Some(c) if cgroup.is_none() || c.id == cgroup => c.seen = true,
            _ => {
                let ids = self.ids.as_mut();
                let path = ids.zip(cgroup).and_then(|(ids, id)| ids.path(id));
                let c = Cgroup::read(pid, (cgroup, path), &self.named);
                self.by_pid.insert(pid, c);
            }
        }
    }

    /// The group of process `pid` running `comm`.
    pub fn of(&mut self, pid: u32, comm: &str) -> Group {
        self.note(pid, None);
        let c = self.by_pid.get(&pid);
        Group {
            service: c
                .and_then(|c| c.unit.clone())
                .unwrap_or_else(|| comm.to_string()),
            container: c.and_then(|c| c.container.clone()),
        }
    }

    /// At a window's end: forgets the processes it had no sample of.
    pub fn end_window(&mut self) {
        self.by_pid.retain(|_, c| std::mem::take(&mut c.seen));
    }
}

/// The cgroup v2 path of `/proc/PID/cgroup` (`0::PATH`), else the first v1 line's.
fn cgroup_path(text: &str) -> Option<&str> {
    let mut lines = text.lines().filter_map(|l| l.splitn(3, ':').nth(2));
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .or_else(|| lines.next())
}

/// The systemd service unit of a cgroup, without `.service`: the innermost one.
pub(crate) fn service_of(text: &str) -> Option<String> {
    cgroup_path(text)?
        .split('/')
        .rev()
        .find_map(|c| c.strip_suffix(".service"))
        .filter(|s| !s.is_empty())
        .map(|s| s.split('@').next().unwrap_or(s).to_string())
}

/// The name of the innermost cgroup of `named` that holds the process (its last
/// component, without `.service`, `.scope` or `.slice`).
pub(crate) fn named_of(text: &str, named: &[String]) -> Option<String> {
    // Any hierarchy's line: perf follows v1's `perf_event` where it is mounted, else v2.
    let paths: Vec<&str> = text
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .collect();
    let holds = |n: &str| {
        paths
            .iter()
            .any(|p| *p == n || p.strip_prefix(n).is_some_and(|r| r.starts_with('/')))
    };
    named
        .iter()
        .filter(|n| {
            let n = n.trim_end_matches('/');
            n.is_empty() || holds(n)
        })
        .max_by_key(|n| n.len())
        .and_then(|n| n.trim_end_matches('/').rsplit('/').next())
        .map(|c| {
            [".service", ".scope", ".slice"]
                .iter()
                .fold(c, |c, s| c.strip_suffix(s).unwrap_or(c))
                .to_string()
        })
        .filter(|s| !s.is_empty())
}

/// The container id in a cgroup's path: a component that is, or ends in, 64 hex digits
/// (`docker-ID.scope`, `cri-containerd-ID.scope`, `/docker/ID`, `/kubepods/.../ID`).
pub(crate) fn container_of(text: &str) -> Option<String> {
    cgroup_path(text)?.split('/').rev().find_map(|c| {
        let c = c.strip_suffix(".scope").unwrap_or(c);
        let id = c.rsplit(['-', ':']).next()?;
        (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "4f1d2c3b4a5968778695a4b3c2d1e0f04f1d2c3b4a5968778695a4b3c2d1e0f0";

    #[test]
    fn a_systemd_unit_names_the_service() {
        assert_eq!(
            service_of("0::/system.slice/nginx.service\n").as_deref(),
            Some("nginx")
        );
        assert_eq!(
            service_of("0::/system.slice/system-getty.slice/getty@tty1.service\n").as_deref(),
            Some("getty")
        );
        assert_eq!(
            service_of("0::/user.slice/user-0.slice/session-3.scope\n"),
            None
        );
        assert_eq!(service_of("0::/\n"), None);
    }

    #[test]
    fn a_cgroup_of_g_names_the_processes_inside_it() {
        let named = vec!["/apps".to_string(), "/apps/web.slice".to_string()];
        let of = |path: &str| named_of(&format!("0::{path}\n"), &named);
        assert_eq!(of("/apps/web.slice/x/y").as_deref(), Some("web"));
        assert_eq!(of("/apps/batch").as_deref(), Some("apps"));
        assert_eq!(of("/apps").as_deref(), Some("apps"));
        assert_eq!(of("/apps2/z"), None);
        assert_eq!(of("/other"), None);
        let v1 = "3:perf_event:/apps/batch\n0::/\n";
        assert_eq!(named_of(v1, &named).as_deref(), Some("apps"));
    }

    #[test]
    fn a_process_gone_from_proc_is_named_by_its_samples_cgroup() {
        use std::os::unix::fs::MetadataExt;
        // A tree standing for the cgroup2 mount; no process has this pid.
        let root = std::env::temp_dir().join(format!("memperf-groups-{}", std::process::id()));
        std::fs::create_dir_all(root.join("batch.slice/job-3")).unwrap_or_default();
        let job = std::fs::metadata(root.join("batch.slice/job-3")).map_or(0, |m| m.ino());
        let root_id = std::fs::metadata(&root).map_or(0, |m| m.ino());
        let ids = CgroupIds::walking(root.clone());
        let _ = std::fs::remove_dir_all(&root);
        let gone = u32::MAX - 7;
        let named = vec!["/batch.slice".to_string()];
        let mut groups = Groups::new(named.clone(), Some(ids));
        groups.note(gone, Some(job));
        assert_eq!(groups.of(gone, "job").service, "batch");
        // Its first sample in the root cgroup, before it moved: named after where it went.
        let moved = gone - 1;
        groups.note(moved, Some(root_id));
        assert_eq!(groups.of(moved, "job").service, "job");
        groups.note(moved, Some(job));
        assert_eq!(groups.of(moved, "job").service, "batch");
        // Without the id, /proc has nothing left: the command names it.
        let mut groups = Groups::new(named, None);
        groups.note(gone, Some(job));
        assert_eq!(groups.of(gone, "job").service, "job");
        let unit = Cgroup::read(gone, (None, Some("/system.slice/nginx.service")), &[]);
        assert_eq!(unit.unit.as_deref(), Some("nginx"));
    }

    #[test]
    fn container_ids_are_found_in_docker_and_kubernetes_paths() {
        let docker = format!("0::/system.slice/docker-{ID}.scope\n");
        assert_eq!(container_of(&docker).as_deref(), Some(ID));
        let kube = format!("0::/kubepods/burstable/pod1234/{ID}\n");
        assert_eq!(container_of(&kube).as_deref(), Some(ID));
        let cri = format!("0::/kubepods.slice/cri-containerd-{ID}.scope\n");
        assert_eq!(container_of(&cri).as_deref(), Some(ID));
        let v1 = format!("12:memory:/docker/{ID}\n11:cpu:/docker/{ID}\n");
        assert_eq!(container_of(&v1).as_deref(), Some(ID));
        assert_eq!(container_of("0::/system.slice/nginx.service\n"), None);
    }
}
