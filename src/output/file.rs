//! The one opener of the files memperf writes that are not recordings (flame graphs,
//! profiles, `stat -o`), as a tool run by root must: an existing file is overwritten (as
//! perf's outputs are), but never something that is not a regular file (a FIFO another
//! user planted would hang the run: it is refused without blocking, `O_NONBLOCK`), never a
//! file another user owns, and never through a symbolic link another user owns (the
//! kernel's fs.protected_symlinks rule, kept even where that sysctl is off).
//! [`check_output_path`] says the same before a run starts, so that a tool that traces
//! first learns of a bad path before it has traced anything.

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Creates or overwrites the output file `path` (see the module's rules).
pub fn create_output_file(path: &Path) -> io::Result<File> {
    let file = match open(path, libc::O_NOFOLLOW) {
        // The last component is a symbolic link: followed only if it is the user's own.
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            let link = std::fs::symlink_metadata(path)?;
            if let Some(why) = refused(path, &link) {
                return Err(why);
            }
            open(path, 0)?
        }
        // A FIFO that no one reads: the open would have waited for a reader.
        Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
            return Err(not_regular(path, "a FIFO"));
        }
        Err(e) if e.raw_os_error() == Some(libc::EISDIR) => {
            return Err(not_regular(path, "a directory"));
        }
        other => other?,
    };
    let meta = file.metadata()?;
    if let Some(why) = refused(path, &meta) {
        return Err(why);
    }
    if meta.is_file() {
        file.set_len(0)?;
    }
    Ok(file)
}

/// Whether `path` may be written by [`create_output_file`], without opening it: an error
/// that says why not, for a path that exists and may not. `-` (standard output) may.
pub fn check_output_path(path: &Path) -> io::Result<()> {
    if path.as_os_str() == "-" {
        return Ok(());
    }
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(m) => match refused(path, &m) {
            Some(why) => Err(why),
            // The user's own link: what it points to must pass too.
            None if m.file_type().is_symlink() => match std::fs::metadata(path) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e),
                Ok(t) => refused(path, &t).map_or(Ok(()), Err),
            },
            None => Ok(()),
        },
    }
}

/// Opens `path` for writing, created if absent, without truncating it and without waiting
/// for a FIFO's reader.
fn open(path: &Path, flags: i32) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .mode(0o666)
        .custom_flags(flags | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
}

/// Why what `meta` describes may not be written: not a regular file (a character device
/// such as `/dev/null` may: only root makes them), or another user's file or link.
fn refused(path: &Path, meta: &Metadata) -> Option<io::Error> {
    let ft = meta.file_type();
    let kind = if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_file() {
        "a file"
    } else if ft.is_char_device() {
        return None;
    } else if ft.is_fifo() {
        return Some(not_regular(path, "a FIFO"));
    } else if ft.is_dir() {
        return Some(not_regular(path, "a directory"));
    } else if ft.is_socket() {
        return Some(not_regular(path, "a socket"));
    } else {
        return Some(not_regular(path, "a block device"));
    };
    let euid = crate::sys::effective_uid();
    (meta.uid() != euid).then(|| {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "`{}` is {kind} of uid {}, not yours (uid {euid}): not written through",
                path.display(),
                meta.uid()
            ),
        )
    })
}

fn not_regular(path: &Path, kind: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "`{}` is {kind}, not a regular file: not written",
            path.display()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_own_file_is_overwritten_and_a_fifo_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.txt");
        std::fs::write(&p, "an earlier, longer output").unwrap();
        check_output_path(&p).unwrap();
        use std::io::Write;
        create_output_file(&p).unwrap().write_all(b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
        let fifo = dir.path().join("fifo");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        for e in [
            check_output_path(&fifo).unwrap_err(),
            create_output_file(&fifo).unwrap_err(),
        ] {
            assert!(
                e.to_string().contains("is a FIFO, not a regular file"),
                "{e}"
            );
        }
        let e = create_output_file(dir.path()).unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
        create_output_file(Path::new("/dev/null")).unwrap();
    }
}
