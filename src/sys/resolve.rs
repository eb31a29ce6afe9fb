//! Opening a path inside another root (a container's, reached through `/proc/PID/root`) so
//! that its absolute symlinks and `..` stay inside that root. The kernel resolves an
//! absolute symlink met under `/proc/PID/root/...` against the caller's root: a container
//! could point a root-run memperf at any host file. `openat2(RESOLVE_IN_ROOT)` (Linux 5.6+)
//! does the resolution in the kernel; before it, [`walk_in_root`] does the same walk one
//! component at a time.

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path};

/// `struct open_how` (include/uapi/linux/openat2.h).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_IN_ROOT: u64 = 0x10;
/// As the kernel's own limit on symlinks followed in one lookup.
const MAX_SYMLINKS: usize = 40;

fn cstr(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

fn openat(dir: &OwnedFd, name: &OsStr, flags: i32) -> io::Result<OwnedFd> {
    let c = cstr(name)?;
    // SAFETY: a valid directory fd and a NUL-terminated name; the result is checked.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn readlinkat(dir: &OwnedFd, name: &OsStr) -> io::Result<OsString> {
    let c = cstr(name)?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: the buffer is valid for its length; the result is checked.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            c.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
    buf.truncate(n);
    Ok(OsString::from_vec(buf))
}

/// The directory `root`, opened as a place to resolve from.
fn open_root(root: &Path) -> io::Result<OwnedFd> {
    let c = cstr(root.as_os_str())?;
    // SAFETY: a NUL-terminated path; the result is checked.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens `path` for reading (with `flags` added, e.g. `O_NONBLOCK`) as if `root` were `/`.
pub fn open_in_root(root: &Path, path: &Path, flags: i32) -> io::Result<File> {
    let root_fd = open_root(root)?;
    match openat2_in_root(&root_fd, path, flags) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EPERM)) => {
            // Before 5.6 (or a seccomp filter that does not know openat2).
            walk_in_root(&root_fd, path, flags)
        }
        other => other,
    }
}

fn openat2_in_root(root: &OwnedFd, path: &Path, flags: i32) -> io::Result<File> {
    let rel = path.strip_prefix("/").unwrap_or(path);
    let c = cstr(rel.as_os_str())?;
    let how = OpenHow {
        flags: (flags | libc::O_RDONLY | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
    };
    // SAFETY: a valid directory fd, a NUL-terminated path, and `how` points to a struct of
    // the size passed; the result is checked.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// What `openat2(RESOLVE_IN_ROOT)` does, one component at a time: `..` stops at `root`, an
/// absolute symlink starts again from `root`, and at most [`MAX_SYMLINKS`] are followed.
pub fn walk_in_root(root: &OwnedFd, path: &Path, flags: i32) -> io::Result<File> {
    let mut todo: Vec<OsString> = Vec::new();
    push_components(&mut todo, path);
    // The directories walked into below `root`, innermost last.
    let mut dirs: Vec<OwnedFd> = Vec::new();
    let mut links = 0;
    while let Some(name) = todo.pop() {
        if name == ".." {
            dirs.pop();
            continue;
        }
        let parent = dirs.last().unwrap_or(root);
        let fd = openat(parent, &name, libc::O_PATH | libc::O_NOFOLLOW)?;
        let meta = File::from(fd.try_clone()?).metadata()?;
        if meta.file_type().is_symlink() {
            links += 1;
            if links > MAX_SYMLINKS {
                return Err(io::Error::from_raw_os_error(libc::ELOOP));
            }
            let target = readlinkat(parent, &name)?;
            if target.as_bytes().starts_with(b"/") {
                dirs.clear();
            }
            push_components(&mut todo, Path::new(&target));
            continue;
        }
        if todo.is_empty() {
            let file = openat(parent, &name, libc::O_RDONLY | libc::O_NOFOLLOW | flags)?;
            return Ok(File::from(file));
        }
        if !meta.is_dir() {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        dirs.push(fd);
    }
    Err(io::Error::from_raw_os_error(libc::EISDIR))
}

/// Pushes `path`'s components so that the first is popped first.
fn push_components(todo: &mut Vec<OsString>, path: &Path) {
    let parts: Vec<OsString> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect();
    todo.extend(parts.into_iter().rev());
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::io::Read;
    use std::os::unix::fs::symlink;

    use super::*;

    /// A container-like tree: /lib/libfoo.so, links to it, and links that try to leave.
    fn tree() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        std::fs::create_dir_all(r.join("lib/sub")).unwrap();
        std::fs::write(r.join("lib/libfoo.so"), b"inside").unwrap();
        symlink("/lib/libfoo.so", r.join("lib/abs")).unwrap();
        symlink("../libfoo.so", r.join("lib/sub/rel")).unwrap();
        symlink("/etc/hostname", r.join("lib/escape")).unwrap();
        symlink("../../../../../../etc/hostname", r.join("lib/up")).unwrap();
        symlink("/lib/loop2", r.join("lib/loop1")).unwrap();
        symlink("/lib/loop1", r.join("lib/loop2")).unwrap();
        d
    }

    fn read(f: io::Result<File>) -> io::Result<String> {
        let mut s = String::new();
        f?.read_to_string(&mut s)?;
        Ok(s)
    }

    fn check(open: impl Fn(&Path) -> io::Result<File>) {
        assert_eq!(read(open(Path::new("/lib/libfoo.so"))).unwrap(), "inside");
        // An absolute link resolves inside the root, as the container sees it.
        assert_eq!(read(open(Path::new("/lib/abs"))).unwrap(), "inside");
        assert_eq!(read(open(Path::new("/lib/sub/rel"))).unwrap(), "inside");
        assert_eq!(read(open(Path::new("/lib/sub/../abs"))).unwrap(), "inside");
        // Links that would reach the host's /etc/hostname find the root's, which is absent.
        for leaving in ["/lib/escape", "/lib/up", "/../../etc/hostname"] {
            let e = open(Path::new(leaving)).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::NotFound, "{leaving}: {e}");
        }
        let e = open(Path::new("/lib/loop1")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{e}");
    }

    #[test]
    fn paths_resolve_inside_the_root_with_openat2() {
        let d = tree();
        check(|p| open_in_root(d.path(), p, 0));
    }

    #[test]
    fn the_walk_for_older_kernels_resolves_the_same() {
        let d = tree();
        let root = open_root(d.path()).unwrap();
        check(|p| walk_in_root(&root, p, 0));
    }
}
