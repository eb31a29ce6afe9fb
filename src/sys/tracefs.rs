//! Finding (and when needed mounting) tracefs, and the tracepoint lookups memperf needs.

use std::ffi::CString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::tracefs_absence::why_absent;

const TRACEFS_ROOT: &str = "/sys/kernel/tracing";
const DEBUGFS_ROOT: &str = "/sys/kernel/debug";
const DEBUGFS_TRACING: &str = "/sys/kernel/debug/tracing";

/// Errors from finding tracefs or reading from it.
#[derive(Debug, thiserror::Error)]
pub enum TracefsError {
    #[error("no such tracepoint `{system}:{name}` on this kernel")]
    NoSuchTracepoint { system: String, name: String },
    #[error(
        "permission denied reading {}: tracepoints need root, or CAP_PERFMON (Linux 5.8+) or \
         CAP_SYS_ADMIN; without them, both `sudo sysctl kernel.perf_event_paranoid=-1` and a \
         readable tracefs (`chmod -R o+rX {}` or `mount -o remount,mode=755 {}`)",
        .path.display(), .root.display(), .root.display()
    )]
    PermissionDenied { path: PathBuf, root: PathBuf },
    #[error(
        "tracefs is not mounted and mounting it needs root: run \
         `sudo mount -t tracefs nodev /sys/kernel/tracing`"
    )]
    NotMounted,
    #[error(
        "tracefs is not mounted and mounting it failed (tracefs at {TRACEFS_ROOT}: {tracefs}; \
         debugfs at {DEBUGFS_ROOT}: {debugfs}); is tracing (CONFIG_FTRACE) built into this kernel?"
    )]
    MountFailed {
        tracefs: io::Error,
        debugfs: io::Error,
    },
    #[error(
        "this kernel has no tracefs (/proc/filesystems does not list it): it was built without \
         tracing (CONFIG_FTRACE, and CONFIG_EVENT_TRACING for tracepoints), so no tracepoint or \
         uprobe_events can be used here; perf's software events (`-e page-faults`) can"
    )]
    NotBuiltIn,
    #[error(
        "tracefs is empty: the kernel is locked down for confidentiality ({evidence}), which \
         turns tracing off, so no tracepoint can be used here; perf's software events \
         (`-e page-faults`) can"
    )]
    LockedDown { evidence: String },
    /// The cause is part of the message, not a `source`: anyhow would say it twice.
    #[error("failed to read {}: {cause}", .path.display())]
    Io { path: PathBuf, cause: io::Error },
    #[error("invalid tracepoint id `{text}` in {}", .path.display())]
    BadId { path: PathBuf, text: String },
}

/// A tracefs mount: the directory holding `events/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracefs {
    root: PathBuf,
}

/// Whether `dir/events` is there; a permission error is reported, not treated as absence.
fn has_events(dir: &Path) -> Result<bool, TracefsError> {
    let events = dir.join("events");
    match fs::metadata(&events) {
        Ok(m) => Ok(m.is_dir()),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            Err(TracefsError::PermissionDenied {
                path: events,
                root: dir.to_path_buf(),
            })
        }
        Err(_) => Ok(false),
    }
}

fn mount(source: &str, target: &str, fstype: &str) -> io::Result<()> {
    let c = |s: &str| CString::new(s).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e));
    let (source, target, fstype) = (c(source)?, c(target)?, c(fstype)?);
    // SAFETY: all three are valid NUL-terminated strings that outlive the call; `data` is null,
    // which mount(2) accepts.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl Tracefs {
    /// Finds tracefs at `/sys/kernel/tracing` or `/sys/kernel/debug/tracing`; when neither
    /// is there and we are root, mounts tracefs (4.1+), or debugfs on older kernels.
    pub fn locate_or_mount() -> Result<Tracefs, TracefsError> {
        for dir in [TRACEFS_ROOT, DEBUGFS_TRACING] {
            if has_events(Path::new(dir))? {
                return Ok(Tracefs::at(PathBuf::from(dir)));
            }
        }
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err(why_absent().unwrap_or(TracefsError::NotMounted));
        }
        let tracefs = match mount("nodev", TRACEFS_ROOT, "tracefs") {
            Ok(()) if has_events(Path::new(TRACEFS_ROOT))? => {
                return Ok(Tracefs::at(PathBuf::from(TRACEFS_ROOT)));
            }
            Ok(()) => io::Error::new(io::ErrorKind::NotFound, "mounted, but it has no events/"),
            Err(e) => e,
        };
        let debugfs = match mount("nodev", DEBUGFS_ROOT, "debugfs") {
            Ok(()) if has_events(Path::new(DEBUGFS_TRACING))? => {
                return Ok(Tracefs::at(PathBuf::from(DEBUGFS_TRACING)));
            }
            Ok(()) => io::Error::new(io::ErrorKind::NotFound, "mounted, but it has no tracing/"),
            Err(e) => e,
        };
        Err(why_absent().unwrap_or(TracefsError::MountFailed { tracefs, debugfs }))
    }

    /// A tracefs rooted at `root` (tests point this at a fake tree).
    pub fn at(root: PathBuf) -> Tracefs {
        Tracefs { root }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `events/SYSTEM/NAME`, refusing names that could leave `events/`.
    fn event_dir(&self, system: &str, name: &str) -> Option<PathBuf> {
        let ok = |s: &str| !s.is_empty() && s != "." && s != ".." && !s.contains('/');
        (ok(system) && ok(name)).then(|| self.root.join("events").join(system).join(name))
    }

    fn read(&self, path: PathBuf) -> Result<Vec<u8>, TracefsError> {
        fs::read(&path).map_err(|source| match source.kind() {
            io::ErrorKind::PermissionDenied => TracefsError::PermissionDenied {
                path,
                root: self.root.clone(),
            },
            _ => TracefsError::Io {
                path,
                cause: source,
            },
        })
    }

    /// The tracepoint's id, the `config` of a `PERF_TYPE_TRACEPOINT` event.
    pub fn event_id(&self, system: &str, name: &str) -> Result<u64, TracefsError> {
        let missing = || TracefsError::NoSuchTracepoint {
            system: system.to_string(),
            name: name.to_string(),
        };
        let dir = self.event_dir(system, name).ok_or_else(missing)?;
        let path = dir.join("id");
        let bytes = match self.read(path) {
            Err(TracefsError::Io { cause, .. }) if cause.kind() == io::ErrorKind::NotFound => {
                return Err(missing());
            }
            other => other?,
        };
        let text = String::from_utf8_lossy(&bytes);
        text.trim().parse().map_err(|_| TracefsError::BadId {
            path: dir.join("id"),
            text: text.trim().to_string(),
        })
    }

    /// The tracepoint's `format` file (field layout of its raw data).
    pub fn format(&self, system: &str, name: &str) -> io::Result<Vec<u8>> {
        let dir = self.event_dir(system, name).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("no such tracepoint `{system}:{name}`"),
            )
        })?;
        read_with_path(&dir.join("format"))
    }

    /// `events/header_page`.
    pub fn header_page(&self) -> io::Result<Vec<u8>> {
        read_with_path(&self.root.join("events/header_page"))
    }

    /// `printk_formats`: the kernel's format strings by address, which `const char *`
    /// tracepoint fields (`rcu:rcu_utilization`, `maple_tree:ma_write`) point to.
    pub fn printk_formats(&self) -> io::Result<Vec<u8>> {
        read_with_path(&self.root.join("printk_formats"))
    }

    /// `events/header_event`.
    pub fn header_event(&self) -> io::Result<Vec<u8>> {
        read_with_path(&self.root.join("events/header_event"))
    }

    /// Every tracepoint as `system:name`, sorted; lists directories only, reads no ids.
    pub fn list_events(&self) -> io::Result<Vec<String>> {
        let events = self.root.join("events");
        let mut out = Vec::new();
        for system in read_dir_with_path(&events)? {
            let system = system?;
            if !system.file_type()?.is_dir() {
                continue;
            }
            let sys_name = system.file_name().to_string_lossy().into_owned();
            for event in read_dir_with_path(&system.path())? {
                let event = event?;
                if event.file_type()?.is_dir() {
                    out.push(format!(
                        "{sys_name}:{}",
                        event.file_name().to_string_lossy()
                    ));
                }
            }
        }
        out.sort_unstable();
        Ok(out)
    }
}

/// Reads a tracefs file. `header_page` and `header_event` answer only a read at offset 0
/// (a second read returns nothing), so the first read must take the whole file: `fs::read`
/// starts with a 32-byte probe and would keep only the first 32 bytes.
fn read_with_path(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let err =
        |e: io::Error| io::Error::new(e.kind(), format!("failed to read {}: {e}", path.display()));
    let mut file = fs::File::open(path).map_err(err)?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match file.read(&mut buf) {
            Ok(0) => return Ok(out),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(err(e)),
        }
    }
}

fn read_dir_with_path(path: &Path) -> io::Result<fs::ReadDir> {
    fs::read_dir(path)
        .map_err(|e| io::Error::new(e.kind(), format!("failed to list {}: {e}", path.display())))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    fn fake_tree() -> (tempfile::TempDir, Tracefs) {
        let dir = tempfile::tempdir().unwrap();
        let events = dir.path().join("events");
        for (sys, name, id) in [
            ("kmem", "kmalloc", "512\n"),
            ("kmem", "kfree", "511\n"),
            ("syscalls", "sys_enter_brk", "77\n"),
            ("broken", "bad_id", "twelve\n"),
        ] {
            let d = events.join(sys).join(name);
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("id"), id).unwrap();
            fs::write(d.join("format"), format!("name: {name}\nID: {id}")).unwrap();
        }
        fs::write(events.join("kmem/enable"), "0\n").unwrap();
        fs::write(events.join("header_page"), "field: u64 timestamp;\n").unwrap();
        fs::write(events.join("header_event"), "# compressed entry header\n").unwrap();
        let t = Tracefs::at(dir.path().to_path_buf());
        (dir, t)
    }

    #[test]
    fn ids_and_files() {
        let (_dir, t) = fake_tree();
        assert_eq!(t.event_id("kmem", "kmalloc").unwrap(), 512);
        assert_eq!(t.event_id("syscalls", "sys_enter_brk").unwrap(), 77);
        assert!(
            t.format("kmem", "kfree")
                .unwrap()
                .starts_with(b"name: kfree\n")
        );
        assert_eq!(t.header_page().unwrap(), b"field: u64 timestamp;\n");
        assert!(t.header_event().unwrap().starts_with(b"# compressed"));
        let err = t.format("kmem", "nope").unwrap_err();
        assert!(err.to_string().contains("kmem/nope/format"), "{err}");
        // Through anyhow, as the commands print errors, the cause is said once.
        let shown = format!("{:#}", anyhow::Error::new(err));
        assert_eq!(shown.matches("No such file").count(), 1, "{shown}");
    }

    #[test]
    fn missing_and_bad_tracepoints() {
        let (_dir, t) = fake_tree();
        let err = t.event_id("kmem", "foo").unwrap_err();
        assert!(matches!(err, TracefsError::NoSuchTracepoint { .. }));
        assert_eq!(
            err.to_string(),
            "no such tracepoint `kmem:foo` on this kernel"
        );
        assert!(matches!(
            t.event_id("..", "..").unwrap_err(),
            TracefsError::NoSuchTracepoint { .. }
        ));
        let err = t.event_id("broken", "bad_id").unwrap_err();
        assert!(
            err.to_string().contains("invalid tracepoint id `twelve`"),
            "{err}"
        );
    }

    #[test]
    fn lists_directories_only() {
        let (_dir, t) = fake_tree();
        assert_eq!(
            t.list_events().unwrap(),
            vec![
                "broken:bad_id",
                "kmem:kfree",
                "kmem:kmalloc",
                "syscalls:sys_enter_brk"
            ]
        );
    }

    #[test]
    fn permission_message() {
        let err = TracefsError::PermissionDenied {
            path: PathBuf::from("/sys/kernel/tracing/events/kmem/kmalloc/id"),
            root: PathBuf::from("/sys/kernel/tracing"),
        };
        let msg = err.to_string();
        assert!(
            msg.starts_with("permission denied reading /sys/kernel/tracing/events/kmem/kmalloc/id")
        );
        assert!(
            msg.contains("CAP_SYS_ADMIN")
                && msg.contains("perf_event_paranoid=-1")
                && msg.contains("mount -o remount,mode=755")
        );
        assert!(
            TracefsError::NotMounted
                .to_string()
                .contains("sudo mount -t tracefs nodev")
        );
    }

    #[test]
    fn live_tracefs() {
        let t = match Tracefs::locate_or_mount() {
            Ok(t) => t,
            Err(e) => {
                let required = std::env::var_os("MEMPERF_REQUIRE_PERF").is_some_and(|v| v == "1");
                assert!(
                    !required,
                    "MEMPERF_REQUIRE_PERF=1 but tracefs is unusable: {e}"
                );
                eprintln!("skipping live tracefs test: {e}");
                return;
            }
        };
        assert!(t.root().join("events").is_dir());
        assert!(t.event_id("syscalls", "sys_enter_brk").unwrap() > 0);
        assert!(
            t.format("kmem", "kmalloc")
                .unwrap()
                .starts_with(b"name: kmalloc")
        );
        assert!(t.list_events().unwrap().iter().any(|e| e == "kmem:kmalloc"));
        // The whole file, not the first read's worth: it names the `data` field last.
        let hp = String::from_utf8(t.header_page().unwrap()).unwrap();
        assert!(hp.contains("field: char data;"), "{hp}");
    }

    /// Unmounts tracefs in a private mount namespace and checks that `locate_or_mount`
    /// mounts it again. The test re-runs itself under `unshare --mount` so the machine's
    /// own mounts are never touched.
    #[test]
    fn mounts_tracefs_when_absent() {
        const INNER: &str = "MEMPERF_TRACEFS_PRIVATE_NS";
        if std::env::var_os(INNER).is_some() {
            for dir in [DEBUGFS_TRACING, TRACEFS_ROOT, DEBUGFS_ROOT] {
                let c = CString::new(dir).unwrap();
                // SAFETY: a valid path string; failure (not mounted) is fine.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
            assert!(
                !has_events(Path::new(TRACEFS_ROOT)).unwrap(),
                "tracefs still mounted"
            );
            let t = Tracefs::locate_or_mount().unwrap();
            assert_eq!(t.root(), Path::new(TRACEFS_ROOT));
            assert!(t.event_id("kmem", "kmalloc").unwrap() > 0);
            return;
        }
        let required = std::env::var_os("MEMPERF_REQUIRE_PERF").is_some_and(|v| v == "1");
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert!(
                !required,
                "MEMPERF_REQUIRE_PERF=1 but the mount test needs root"
            );
            eprintln!("skipping tracefs mount test: needs root");
            return;
        }
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "private"])
            .arg(exe)
            .args(["--exact", "sys::tracefs::tests::mounts_tracefs_when_absent"])
            .args(["--nocapture", "--test-threads=1"])
            .env(INNER, "1")
            .output();
        match out {
            Ok(out) => {
                let stdout = String::from_utf8_lossy(&out.stdout);
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert!(
                    out.status.success(),
                    "inner test failed: {stdout}\n{stderr}"
                );
                // The filter must have matched: a run of zero tests would also succeed.
                assert!(
                    stdout.contains("1 passed"),
                    "inner test did not run: {stdout}"
                );
            }
            Err(e) => {
                assert!(
                    !required,
                    "MEMPERF_REQUIRE_PERF=1 but `unshare` failed to run: {e}"
                );
                eprintln!("skipping tracefs mount test: cannot run `unshare`: {e}");
            }
        }
    }
}
