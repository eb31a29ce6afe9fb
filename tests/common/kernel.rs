//! Guards for tests that make the kernel do something (reclaim, OOM kills): each one undoes
//! its change when dropped, on every path out of the test, a panic included.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A memory cgroup with a limit: v1 (`memory.limit_in_bytes`, swap limited too) where the
/// memory controller is mounted on its own, else v2 (`memory.max`, `memory.swap.max`).
/// Dropping it kills what is left in it and removes it.
pub struct MemCgroup {
    pub dir: PathBuf,
    /// The path a process's `/proc/PID/cgroup` shows for it.
    pub path: String,
}

impl MemCgroup {
    /// Creates `memperf-test-NAME-PID` limited to `limit` bytes; `None` (with the reason on
    /// stderr) when no memory controller can be used here.
    pub fn new(name: &str, limit: u64) -> Option<MemCgroup> {
        MemCgroup::create(name, limit, false)
    }

    /// As [`MemCgroup::new`], but memory beyond the limit may go to swap (memory+swap is
    /// not limited, swappiness is the kernel's default).
    pub fn with_swap(name: &str, limit: u64) -> Option<MemCgroup> {
        MemCgroup::create(name, limit, true)
    }

    fn create(name: &str, limit: u64, swap: bool) -> Option<MemCgroup> {
        let (memsw, swappiness, swap_max) = if swap {
            ("-1".to_string(), "60".to_string(), "max".to_string())
        } else {
            (limit.to_string(), "0".to_string(), "0".to_string())
        };
        let leaf = format!("memperf-test-{name}-{}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/memory");
        let v2 = Path::new("/sys/fs/cgroup");
        let (root, files): (&Path, &[(&str, String)]) = if v1.join("memory.limit_in_bytes").exists()
        {
            (
                v1,
                &[
                    ("memory.limit_in_bytes", limit.to_string()),
                    ("memory.memsw.limit_in_bytes", memsw),
                    ("memory.swappiness", swappiness),
                ],
            )
        } else if std::fs::read_to_string(v2.join("cgroup.controllers"))
            .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"))
        {
            (
                v2,
                &[
                    ("memory.max", limit.to_string()),
                    ("memory.swap.max", swap_max),
                ],
            )
        } else {
            eprintln!("no memory cgroup controller here (v1 nor v2)");
            return None;
        };
        let dir = root.join(&leaf);
        if let Err(e) = std::fs::create_dir(&dir) {
            eprintln!("cannot create {}: {e}", dir.display());
            return None;
        }
        let cg = MemCgroup {
            dir,
            path: format!("/{leaf}"),
        };
        for (file, value) in files {
            let p = cg.dir.join(file);
            // memsw and swap files exist only with swap accounting.
            if p.exists() {
                std::fs::write(&p, value)
                    .unwrap_or_else(|e| panic!("write {value} to {}: {e}", p.display()));
            }
        }
        Some(cg)
    }

    /// A shell command line that moves itself into the cgroup and then execs `argv`.
    pub fn exec_in(&self, argv: &[&str]) -> std::process::Command {
        let mut c = std::process::Command::new("sh");
        c.arg("-c")
            .arg(format!(
                "echo $$ > {}/cgroup.procs && exec \"$@\"",
                self.dir.display()
            ))
            .arg("sh")
            .args(argv);
        c
    }

    fn pids(&self) -> Vec<i32> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let pids = self.pids();
            if !pids.is_empty() {
                let _ = std::process::Command::new("kill")
                    .arg("-9")
                    .args(pids.iter().map(i32::to_string))
                    .status();
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

/// A `/proc/sys` setting changed for one test and put back when dropped. Settings are global:
/// a test that changes one that others read lives in a test binary of its own.
pub struct Sysctl {
    path: PathBuf,
    old: String,
}

impl Sysctl {
    /// Sets `/proc/sys/NAME` (e.g. `kernel/kptr_restrict`) to `value`; `None` (with the
    /// reason on stderr) when it cannot be written here.
    pub fn set(name: &str, value: &str) -> Option<Sysctl> {
        Sysctl::set_path(&Path::new("/proc/sys").join(name), value)
    }

    /// Sets any such file, a sysfs one too; a file that shows its choices with the current
    /// one in brackets (`always [madvise] never`) gets back the bracketed one.
    pub fn set_path(path: &Path, value: &str) -> Option<Sysctl> {
        let path = path.to_path_buf();
        let old = match std::fs::read_to_string(&path) {
            Ok(v) => match v.split_once('[').and_then(|(_, r)| r.split_once(']')) {
                Some((chosen, _)) => chosen.to_string(),
                None => v.trim().to_string(),
            },
            Err(e) => {
                eprintln!("cannot read {}: {e}", path.display());
                return None;
            }
        };
        if let Err(e) = std::fs::write(&path, value) {
            eprintln!("cannot set {}: {e}", path.display());
            return None;
        }
        Some(Sysctl { path, old })
    }
}

impl Drop for Sysctl {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(&self.path, &self.old) {
            eprintln!(
                "could not restore {} to {}: {e}",
                self.path.display(),
                self.old
            );
        }
    }
}

/// A hugetlbfs file system mounted for one test in a directory of its own, unmounted (and
/// the directory removed) when dropped.
pub struct HugetlbfsMount {
    pub dir: tempfile::TempDir,
}

impl HugetlbfsMount {
    /// `None` (with the reason on stderr) when it cannot be mounted here.
    pub fn new() -> Option<HugetlbfsMount> {
        let dir = tempfile::tempdir().ok()?;
        let st = std::process::Command::new("mount")
            .args(["-t", "hugetlbfs", "memperf-test"])
            .arg(dir.path())
            .status();
        match st {
            Ok(st) if st.success() => Some(HugetlbfsMount { dir }),
            other => {
                eprintln!("cannot mount hugetlbfs: {other:?}");
                None
            }
        }
    }
}

impl Drop for HugetlbfsMount {
    fn drop(&mut self) {
        let st = std::process::Command::new("umount")
            .args(["-l"])
            .arg(self.dir.path())
            .status();
        if !st.is_ok_and(|s| s.success()) {
            eprintln!("could not unmount {}", self.dir.path().display());
        }
    }
}

/// A swap file switched on for one test, switched off and removed when dropped.
pub struct Swapfile {
    path: PathBuf,
}

impl Swapfile {
    /// A swap file of `bytes` in `dir` (which must be on a file system that takes swap
    /// files: ext4, xfs...); `None` (with the reason on stderr) when swapon refuses.
    pub fn on(dir: &Path, bytes: u64) -> Option<Swapfile> {
        let path = dir.join("memperf-test.swap");
        let run = |cmd: &str, args: &[&str]| {
            let o = std::process::Command::new(cmd)
                .args(args)
                .arg(&path)
                .output();
            match o {
                Ok(o) if o.status.success() => true,
                Ok(o) => {
                    eprintln!("{cmd}: {}", String::from_utf8_lossy(&o.stderr).trim());
                    false
                }
                Err(e) => {
                    eprintln!("{cmd}: {e}");
                    false
                }
            }
        };
        let len = bytes.to_string();
        if !run("fallocate", &["-l", &len]) {
            return None;
        }
        let swap = Swapfile { path: path.clone() };
        std::fs::set_permissions(
            &swap.path,
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .ok()?;
        (run("mkswap", &[]) && run("swapon", &[])).then_some(swap)
    }
}

impl Drop for Swapfile {
    fn drop(&mut self) {
        let st = std::process::Command::new("swapoff")
            .arg(&self.path)
            .status();
        if !st.is_ok_and(|s| s.success()) {
            eprintln!("swapoff {} failed", self.path.display());
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Runs `hog` (fixtures/hog.c) in `cg` until the kernel OOM-kills it; its pid.
pub fn oom_kill_hog(cg: &MemCgroup, hog: &Path) -> u32 {
    let mut victim = cg.exec_in(&[hog.to_str().unwrap()]).spawn().unwrap();
    let pid = victim.id();
    let status = victim.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "the hog was not OOM-killed: {status}"
    );
    pid
}
