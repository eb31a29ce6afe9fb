//! Opening the files that processes map.
//!
//! Their paths come from another process's mappings and are untrusted: the file may have
//! been replaced since it was mapped (by a FIFO, whose open for reading blocks until a writer
//! comes, or by a device), deleted (every package upgrade does it), or, in another mount
//! namespace, the path means something else. So a mapped file is reached through
//! `/proc/PID/map_files/` when it can be (the very file the process maps, deleted or not),
//! else through the process's root; it is opened without blocking (`O_NONBLOCK|O_NOCTTY`),
//! used only when it is a regular file, and, when the kernel said which file was mapped
//! (MMAP2's device and inode), only when it is that file.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The device (major, minor) and inode the kernel gave for a mapping.
pub type DevIno = (u32, u32, u64);

/// One mapping of a file by a process.
#[derive(Debug, Clone)]
pub struct MappedFile {
    pub pid: u32,
    pub start: u64,
    pub len: u64,
    /// The path the kernel gave (` (deleted)` appended when the file is gone).
    pub path: PathBuf,
    pub dev_ino: Option<DevIno>,
}

/// Why a path was not opened, besides the open's own errors.
fn refused(path: &Path, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("`{}` {why}", path.display()),
    )
}

/// Opens `path` for reading if it is a regular file, without blocking whatever it is, and,
/// with `expect`, only if it is that device and inode.
pub fn open_regular(path: &Path, expect: Option<DevIno>) -> io::Result<File> {
    // No open at all of what is not a regular file: opening a device can have effects.
    if !std::fs::metadata(path)?.is_file() {
        return Err(refused(path, "is not a regular file"));
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)?;
    checked(file, path, expect)
}

/// `path` as process `pid` sees it (inside its root: a container's absolute symlinks stay
/// in the container), opened as [`open_regular`] opens.
pub fn open_in_process_root(pid: u32, path: &Path, expect: Option<DevIno>) -> io::Result<File> {
    let root = PathBuf::from(format!("/proc/{pid}/root"));
    let file = crate::sys::resolve::open_in_root(&root, path, libc::O_PATH)?;
    // Opened as a path only (a FIFO or a device is not opened for reading at all): check
    // what it is, then open it for reading through the descriptor.
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(refused(path, "is not a regular file"));
    }
    let reopened = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&file)
        ))?;
    checked(reopened, path, expect)
}

/// Checks an opened file: a regular file and, with `expect`, that device and inode.
fn checked(file: File, path: &Path, expect: Option<DevIno>) -> io::Result<File> {
    // The path may have been replaced between the look and the open.
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(refused(path, "is not a regular file"));
    }
    if let Some((maj, min, ino)) = expect
        && ino != 0
        && (meta.ino() != ino || libc::major(meta.dev()) != maj || libc::minor(meta.dev()) != min)
    {
        return Err(refused(
            path,
            "is not the file that was mapped (its device or inode differ): it was replaced",
        ));
    }
    Ok(file)
}

/// The path to read for a file a recording names (`recorded`, as process `pid` mapped it):
/// under `/proc/PID/root` while the process lives and that is the file the process itself
/// would reach, else the recorded path. Returns (the path to read, the recorded path).
pub fn resolve_recorded(recorded: &[u8], pid: Option<u32>) -> (PathBuf, PathBuf) {
    use std::os::unix::ffi::OsStrExt;
    let recorded = PathBuf::from(std::ffi::OsStr::from_bytes(recorded));
    if let Some(pid) = pid
        && recorded.is_absolute()
    {
        let rel = recorded.strip_prefix("/").unwrap_or(&recorded);
        let under_root = Path::new("/proc")
            .join(pid.to_string())
            .join("root")
            .join(rel);
        if under_root.exists() {
            // The kernel resolves an absolute symlink met under /proc/PID/root against our
            // root, not the process's: use the path only when it is the file the process
            // itself would reach (a container cannot point the report at a host file).
            let inside = open_in_process_root(pid, &recorded, None)
                .and_then(|f| f.metadata())
                .ok();
            let plain = std::fs::metadata(&under_root).ok();
            let same = matches!((inside, plain), (Some(a), Some(b)) if (a.dev(), a.ino()) == (b.dev(), b.ino()));
            if same {
                return (under_root, recorded);
            }
            return (PathBuf::from("/proc/self/root/nonexistent"), recorded);
        }
    }
    (recorded.clone(), recorded)
}

/// The whole of a regular file (see [`open_regular`]).
pub fn read_regular(path: &Path) -> io::Result<Vec<u8>> {
    read_regular_at_most(path, u64::MAX)
}

/// The first `max` bytes of a regular file (see [`open_regular`]).
pub fn read_regular_at_most(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let file = open_regular(path, None)?;
    let mut data = Vec::new();
    file.take(max).read_to_end(&mut data)?;
    Ok(data)
}

/// `/proc/PID/map_files/START-END`: the file of a live process's mapping, deleted or
/// replaced or not (root only: the kernel asks for CAP_SYS_ADMIN).
pub fn map_files_path(pid: u32, start: u64, len: u64) -> PathBuf {
    PathBuf::from(format!(
        "/proc/{pid}/map_files/{start:x}-{:x}",
        start.saturating_add(len)
    ))
}

/// `path` inside the root of process `pid` (its mount namespace), when it is there.
pub fn in_root(pid: u32, path: &Path) -> Option<PathBuf> {
    let mut p = PathBuf::from(format!("/proc/{pid}/root"));
    p.push(path.strip_prefix("/").unwrap_or(path));
    p.exists().then_some(p)
}

/// How long reading one mapped file may take (opening it, or parsing its headers and
/// unwind sections) before it is given up: a file on a hung NFS or FUSE mount blocks in the
/// kernel, and the recorder's drain, and with it its stop path, must not wait on it.
pub const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(300);

/// A job for the reading thread.
type Job = Box<dyn FnOnce() + Send>;

thread_local! {
    /// The thread that reads mapped files for this thread (the recorder's drain), while it
    /// answers in time. One long-lived thread, not one per file: each new thread would get a
    /// malloc arena of its own, and the memory of files parsed in it would stay there.
    static READER: std::cell::RefCell<Option<std::sync::mpsc::Sender<Job>>> =
        const { std::cell::RefCell::new(None) };
}

fn reader() -> Option<std::sync::mpsc::Sender<Job>> {
    READER.with(|slot| {
        let mut slot = slot.borrow_mut();
        if slot.is_none() {
            let (tx, rx) = std::sync::mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name("memperf-read".into())
                .spawn(move || {
                    while let Ok(job) = rx.recv() {
                        job();
                    }
                })
                .ok()?;
            *slot = Some(tx);
        }
        slot.clone()
    })
}

/// Runs `f` on the reading thread and waits at most `timeout` for it; `None` when it took
/// longer. That thread is then given up (left to finish or to hang) and the next call gets a
/// new one.
pub fn bounded<T: Send + 'static>(
    timeout: std::time::Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let job: Job = Box::new(move || {
        let _ = tx.send(f());
    });
    // No thread to be had (a process limit): nothing is read rather than risk a hang.
    let worker = reader()?;
    if worker.send(job).is_err() {
        return None;
    }
    match rx.recv_timeout(timeout) {
        Ok(v) => Some(v),
        Err(_) => {
            READER.with(|slot| *slot.borrow_mut() = None);
            None
        }
    }
}

/// Opens the file of mapping `m`: through `map_files` when it can, else through the
/// process's root, else at its path; each way as [`open_regular`] does.
pub fn open(m: &MappedFile) -> io::Result<File> {
    if crate::sys::effective_uid() == 0
        && m.pid != u32::MAX
        && let Ok(f) = open_regular(&map_files_path(m.pid, m.start, m.len), None)
    {
        return Ok(f);
    }
    // A deleted file's path names nothing, or a newer file: only map_files reaches it.
    let path = m
        .path
        .to_str()
        .and_then(|s| s.strip_suffix(" (deleted)"))
        .map_or(m.path.as_path(), Path::new);
    let first = if m.pid != u32::MAX && Path::new(&format!("/proc/{}/root", m.pid)).exists() {
        open_in_process_root(m.pid, path, m.dev_ino)
    } else {
        open_regular(path, m.dev_ino)
    };
    match first {
        // The process exited between finding its root and opening through it (short
        // commands do): the file is still where it was mapped from.
        Err(e) if e.kind() == io::ErrorKind::NotFound => open_regular(path, m.dev_ino),
        other => other,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn mkfifo(p: &Path) {
        let ok = std::process::Command::new("mkfifo")
            .arg(p)
            .status()
            .unwrap();
        assert!(ok.success(), "mkfifo");
    }

    #[test]
    fn fifos_and_devices_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("libfoo.so");
        mkfifo(&fifo);
        // A plain open for reading would wait for a writer forever.
        let e = open_regular(&fifo, None).unwrap_err();
        assert!(e.to_string().contains("is not a regular file"), "{e}");
        let e = read_regular(Path::new("/dev/zero")).unwrap_err();
        assert!(e.to_string().contains("is not a regular file"), "{e}");
    }

    #[test]
    fn a_file_replaced_since_it_was_mapped_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("lib.so");
        std::fs::write(&p, b"first").unwrap();
        let m = std::fs::metadata(&p).unwrap();
        let id = (libc::major(m.dev()), libc::minor(m.dev()), m.ino());
        assert!(open_regular(&p, Some(id)).is_ok());
        // Replaced: a new file (a new inode) at the same path.
        let other = dir.path().join("other");
        std::fs::write(&other, b"second").unwrap();
        std::fs::rename(&other, &p).unwrap();
        let e = open_regular(&p, Some(id)).unwrap_err();
        assert!(e.to_string().contains("it was replaced"), "{e}");
    }

    #[test]
    fn a_deleted_file_is_reached_through_map_files() {
        if crate::sys::effective_uid() != 0 {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("gone.so");
        std::fs::write(&p, vec![7u8; 8192]).unwrap();
        let f = File::open(&p).unwrap();
        let map = crate::sys::map_file(&f).unwrap();
        let start = map.as_ptr() as u64;
        std::fs::remove_file(&p).unwrap();
        let m = MappedFile {
            pid: std::process::id(),
            start,
            len: 8192,
            path: PathBuf::from(format!("{} (deleted)", p.display())),
            dev_ino: None,
        };
        let mut data = Vec::new();
        open(&m).unwrap().read_to_end(&mut data).unwrap();
        assert_eq!(data, vec![7u8; 8192]);
        drop(map);
    }
}
