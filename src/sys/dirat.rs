//! Working inside a directory held open, one name at a time: what a root process needs to
//! write under a directory that other users may change (a shared build-id cache), where a
//! path walked by name could be swapped for a symlink between two steps.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn cstr(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

fn owned(fd: i32) -> io::Result<File> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Opens directory `path` without following a symlink in its last component.
pub fn open_dir(path: &Path) -> io::Result<File> {
    let c = cstr(path.as_os_str())?;
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: a NUL-terminated path; the result is checked.
    owned(unsafe { libc::open(c.as_ptr(), flags) })
}

/// Opens directory `name` in `dir`, never through a symlink (`ENOTDIR`, as for anything else
/// that is no directory; `ELOOP` on some kernels).
pub fn open_dir_at(dir: &File, name: &OsStr) -> io::Result<File> {
    let c = cstr(name)?;
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: a valid directory fd and a NUL-terminated name; the result is checked.
    owned(unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags) })
}

/// Creates directory `name` in `dir` with `mode`.
pub fn mkdir_at(dir: &File, name: &OsStr, mode: u32) -> io::Result<()> {
    let c = cstr(name)?;
    // SAFETY: a valid directory fd and a NUL-terminated name; the result is checked.
    let r = unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), mode as libc::mode_t) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Creates file `name` in `dir` for writing with `mode`; fails if anything (a symlink
/// included) is there already.
pub fn create_new_at(dir: &File, name: &OsStr, mode: u32) -> io::Result<File> {
    let c = cstr(name)?;
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: a valid directory fd and a NUL-terminated name; the result is checked.
    owned(unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags, mode as libc::c_uint) })
}

/// Renames `from` to `to`, both in `dir`.
pub fn rename_at(dir: &File, from: &OsStr, to: &OsStr) -> io::Result<()> {
    let (f, t) = (cstr(from)?, cstr(to)?);
    let fd = dir.as_raw_fd();
    // SAFETY: a valid directory fd and NUL-terminated names; the result is checked.
    let r = unsafe { libc::renameat(fd, f.as_ptr(), fd, t.as_ptr()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Removes file `name` from `dir`.
pub fn unlink_at(dir: &File, name: &OsStr) -> io::Result<()> {
    let c = cstr(name)?;
    // SAFETY: a valid directory fd and a NUL-terminated name; the result is checked.
    let r = unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_symlink_is_never_opened_as_a_directory() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("real")).unwrap();
        std::os::unix::fs::symlink("real", t.path().join("link")).unwrap();
        let root = open_dir(t.path()).unwrap();
        assert!(open_dir_at(&root, OsStr::new("real")).is_ok());
        let e = open_dir_at(&root, OsStr::new("link")).unwrap_err();
        assert!(
            matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)),
            "{e}"
        );
        assert!(open_dir(&t.path().join("link")).is_err());
        mkdir_at(&root, OsStr::new("new"), 0o700).unwrap();
        let new = open_dir_at(&root, OsStr::new("new")).unwrap();
        create_new_at(&new, OsStr::new("f.tmp"), 0o600).unwrap();
        assert!(create_new_at(&new, OsStr::new("f.tmp"), 0o600).is_err());
        rename_at(&new, OsStr::new("f.tmp"), OsStr::new("f")).unwrap();
        assert!(t.path().join("new/f").is_file());
        unlink_at(&new, OsStr::new("f")).unwrap();
        assert!(!t.path().join("new/f").exists());
    }
}
