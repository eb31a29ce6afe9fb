//! A cgroup made for one test (`-G`'s tests), removed on every way out of it.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// A cgroup of the hierarchy perf events follow (v1's `perf_event` where it is mounted, else
/// cgroup v2), made for one test; dropping it kills what is left in it and removes it.
pub struct TestCgroup {
    pub dir: PathBuf,
    /// Its path under the hierarchy's root, as `-G` takes it.
    pub name: String,
}

impl TestCgroup {
    pub fn new(name: &str) -> Option<TestCgroup> {
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
        let fields: Vec<Vec<&str>> = mounts
            .lines()
            .map(|l| l.split_whitespace().collect())
            .filter(|f: &Vec<&str>| f.len() >= 4)
            .collect();
        let v1 = fields
            .iter()
            .find(|f| f[2] == "cgroup" && f[3].split(',').any(|o| o == "perf_event"));
        let v2 = fields.iter().find(|f| f[2] == "cgroup2");
        let root = PathBuf::from(v1.or(v2)?[1]);
        let name = format!("memperf-test-{name}-{}", std::process::id());
        let dir = root.join(&name);
        if let Err(e) = std::fs::create_dir(&dir) {
            eprintln!("cannot create {}: {e}", dir.display());
            return None;
        }
        Some(TestCgroup { dir, name })
    }

    /// A cgroup inside this one (drop it first: a cgroup with children cannot be removed).
    /// Whether the kernel writes cgroup ids in samples that name v2 cgroups here, as
    /// `memperf agent` uses them (`PERF_SAMPLE_CGROUP`, Linux 5.7+): a cgroup2 mount, the
    /// `perf_event` controller on no v1 hierarchy, and the initial cgroup namespace. Read
    /// here rather than asked of `memperf::sys::cgroup`: a wrong answer there would make the
    /// agent fall back to /proc, and the tests that check the ids must then fail, not skip.
    pub fn ids_name_cgroups() -> bool {
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let controllers = std::fs::read_to_string("/proc/cgroups").unwrap_or_default();
        let v1 = controllers.lines().any(|l| {
            let mut f = l.split_whitespace();
            f.next() == Some("perf_event") && f.next().is_some_and(|h| h != "0")
        });
        let initial = std::fs::read_link("/proc/self/ns/cgroup")
            .map_or(true, |l| l.as_os_str() == "cgroup:[4026531835]");
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut v = release
            .split(['.', '-'])
            .map(|x| x.parse::<u32>().unwrap_or(0));
        let version = (v.next().unwrap_or(0), v.next().unwrap_or(0));
        mounts
            .lines()
            .any(|l| l.split_whitespace().nth(2) == Some("cgroup2"))
            && !v1
            && initial
            && version >= (5, 7)
    }

    /// A cgroup that `dir` will be (made by what the test runs), removed with what is in it
    /// when dropped, if it is there.
    pub fn to_be_made(dir: PathBuf) -> TestCgroup {
        TestCgroup {
            name: String::new(),
            dir,
        }
    }

    pub fn child(&self, leaf: &str) -> TestCgroup {
        let dir = self.dir.join(leaf);
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        TestCgroup {
            dir,
            name: format!("{}/{leaf}", self.name),
        }
    }
}

impl TestCgroup {
    /// A cgroup for a test, or `None` (the test skips) where none can be made; under
    /// `MEMPERF_REQUIRE_PERF=1` that is a failure.
    pub fn for_test(name: &str) -> Option<TestCgroup> {
        let cg = TestCgroup::new(name);
        assert!(
            cg.is_some() || std::env::var("MEMPERF_REQUIRE_PERF").as_deref() != Ok("1"),
            "no cgroup could be made"
        );
        cg
    }

    /// A shell script that runs `bin inside` in this cgroup (its shell moves itself in,
    /// then becomes the program), then `bin outside` where the test runs.
    pub fn inside_then_outside(
        &self,
        bin: &std::path::Path,
        inside: impl std::fmt::Display,
        outside: impl std::fmt::Display,
    ) -> String {
        format!(
            "sh -c 'echo $$ > {procs} && exec {bin} {inside}' && {bin} {outside}",
            procs = self.dir.join("cgroup.procs").display(),
            bin = bin.display(),
        )
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if !self.dir.exists() {
                return;
            }
            let pids = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
            let pids: Vec<&str> = pids.split_whitespace().collect();
            if !pids.is_empty() {
                let _ = Command::new("kill").arg("-9").args(&pids).status();
            }
            match std::fs::remove_dir(&self.dir) {
                Ok(()) => return,
                Err(e) if Instant::now() > deadline => {
                    eprintln!("could not remove {}: {e}", self.dir.display());
                    return;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
}
