//! GNU build-ids of ELF files and of the running kernel.
//!
//! Build-ids key the symbolization caches and let `unwind` refuse a file on disk that is not
//! the one a process mapped.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use object::read::ReadCache;
use object::{Object, ReadRef};

use crate::sys::dirat;

/// The `NT_GNU_BUILD_ID` note type.
const NT_GNU_BUILD_ID: u32 = 3;

/// The build-id in the `.note.gnu.build-id` note (or any `PT_NOTE`) of the ELF image `data`.
/// `None` when `data` is not an object file or has no build-id.
pub fn elf_build_id(data: &[u8]) -> Option<Vec<u8>> {
    build_id_of(data)
}

/// Whether the file at `path` is the one whose build-id a recording kept (`want`; any file
/// when none was kept, or an empty one). A prefix of the other matches: some records keep
/// a build-id cut to 20 bytes.
pub fn file_matches(path: &Path, want: Option<&[u8]>) -> bool {
    let Some(want) = want.filter(|b| !b.is_empty()) else {
        return true;
    };
    file_build_id(path)
        .ok()
        .flatten()
        .is_some_and(|have| have.starts_with(want) || want.starts_with(&have))
}

/// The build-id of the ELF file at `path`, reading only the headers and the note.
/// `Ok(None)` when the file is not an object file or has no build-id. Only a regular file is
/// opened, without blocking (see [`crate::mapped::open_regular`]).
pub fn file_build_id(path: &Path) -> io::Result<Option<Vec<u8>>> {
    let file = crate::mapped::open_regular(path, None)?;
    let cache = ReadCache::new(file);
    Ok(build_id_of(&cache))
}

fn build_id_of<'data, R: ReadRef<'data>>(data: R) -> Option<Vec<u8>> {
    let obj = object::File::parse(data).ok()?;
    match obj.build_id() {
        Ok(Some(id)) if !id.is_empty() => Some(id.to_vec()),
        _ => None,
    }
}

/// The running kernel's build-id, from the ELF notes in `/sys/kernel/notes`.
pub fn kernel_build_id() -> Option<Vec<u8>> {
    let notes = std::fs::read("/sys/kernel/notes").ok()?;
    parse_gnu_build_id_note(&notes)
}

/// Finds the GNU build-id in a sequence of ELF notes (`Elf_Nhdr` headers: namesz, descsz,
/// type, each a native-endian u32, then the name and the descriptor, each padded to 4 bytes).
pub fn parse_gnu_build_id_note(mut notes: &[u8]) -> Option<Vec<u8>> {
    while notes.len() >= 12 {
        let namesz = read_u32(notes, 0)? as usize;
        let descsz = read_u32(notes, 4)? as usize;
        let ntype = read_u32(notes, 8)?;
        let name_start = 12usize;
        let desc_start = name_start.checked_add(align4(namesz)?)?;
        let next = desc_start.checked_add(align4(descsz)?)?;
        let name = notes.get(name_start..name_start.checked_add(namesz)?)?;
        let desc = notes.get(desc_start..desc_start.checked_add(descsz)?)?;
        if ntype == NT_GNU_BUILD_ID && name == b"GNU\0" && !desc.is_empty() {
            return Some(desc.to_vec());
        }
        notes = notes.get(next..)?;
    }
    None
}

fn align4(n: usize) -> Option<usize> {
    Some(n.checked_add(3)? & !3)
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let b: [u8; 4] = bytes.get(at..at + 4)?.try_into().ok()?;
    Some(u32::from_ne_bytes(b))
}

/// Lowercase hex, as used in `/usr/lib/debug/.build-id/xx/yyyy.debug` and by `perf buildid-list`.
pub fn to_hex(id: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(id.len() * 2);
    for &b in id {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    s
}

/// perf's build-id cache (`~/.debug`, or `$MEMPERF_BUILDID_DIR`): binaries kept by build-id
/// as `.build-id/NN/REST/elf`, where `perf report` looks for them too.
pub fn cache_dir() -> Option<std::path::PathBuf> {
    if let Some(d) = std::env::var_os("MEMPERF_BUILDID_DIR") {
        return Some(d.into());
    }
    std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".debug"))
}

/// Where the cache keeps the binary with `build_id`.
pub fn cache_path(dir: &Path, build_id: &[u8]) -> Option<std::path::PathBuf> {
    let (first, rest) = build_id.split_first()?;
    (!rest.is_empty()).then(|| {
        dir.join(".build-id")
            .join(crate::symbolize::hex(&[*first]))
            .join(crate::symbolize::hex(rest))
            .join("elf")
    })
}

/// Keeps a copy of the binary that `file` reads (a deleted one, through
/// `/proc/PID/map_files`) in the build-id cache, so that a report made after its process
/// is gone can still name its frames. Returns the build-id.
pub fn keep_in_cache(file: &Path) -> io::Result<Option<Vec<u8>>> {
    match cache_dir() {
        Some(dir) => keep_in_cache_at(&dir, file),
        None => file_build_id(file),
    }
}

/// [`keep_in_cache`] with the cache in `dir`. The walk down `dir/.build-id/NN/REST` follows
/// no symbolic link and enters no directory that a user other than root or this one owns
/// (one could swap a step for a link to anywhere root may write): it refuses them.
pub fn keep_in_cache_at(dir: &Path, file: &Path) -> io::Result<Option<Vec<u8>>> {
    let Some(id) = file_build_id(file)? else {
        return Ok(None);
    };
    if cache_path(dir, &id).is_some_and(|p| !p.exists()) {
        let src = crate::mapped::open_regular(file, None)?;
        keep_open_at(dir, &id, &src)?;
    }
    Ok(Some(id))
}

/// The build-id of the ELF file open as `file` (read from its headers and notes, whatever
/// its offset), `None` when it is not an object file or has none.
pub fn open_file_build_id(file: &File) -> Option<Vec<u8>> {
    build_id_of(&ReadCache::new(file))
}

/// Keeps the binary open as `src`, whose build-id is `id` (a file held open while it was
/// deleted or replaced), in the build-id cache: a no-op without a cache directory.
pub fn keep_open_in_cache(id: &[u8], src: &File) -> io::Result<()> {
    match cache_dir() {
        Some(dir) => keep_open_at(&dir, id, src),
        None => Ok(()),
    }
}

/// [`keep_open_in_cache`] with the cache in `dir`, walked as [`keep_in_cache_at`] walks it;
/// the whole of `src` is copied from its start.
fn keep_open_at(dir: &Path, id: &[u8], src: &File) -> io::Result<()> {
    use std::io::{Seek, SeekFrom};
    let Some((first, rest)) = id.split_first().filter(|(_, r)| !r.is_empty()) else {
        return Ok(());
    };
    if cache_path(dir, id).is_some_and(|p| p.exists()) {
        return Ok(());
    }
    let parts = [
        ".build-id".to_string(),
        crate::symbolize::hex(&[*first]),
        crate::symbolize::hex(rest),
    ];
    let at = open_cache_dirs(dir, &parts)?;
    // Written aside and renamed: a reader never sees half a binary.
    let tmp = OsStr::new("elf.tmp");
    let mut out = match dirat::create_new_at(&at, tmp, 0o600) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            // Left by a run killed while copying.
            dirat::unlink_at(&at, tmp)?;
            dirat::create_new_at(&at, tmp, 0o600)?
        }
        r => r?,
    };
    let mut src = src;
    src.seek(SeekFrom::Start(0))?;
    io::copy(&mut src, &mut out)?;
    dirat::rename_at(&at, tmp, OsStr::new("elf"))?;
    Ok(())
}

/// Opens `root/parts...`, creating what is missing, one directory at a time: never through
/// a symbolic link, never into a directory owned by a user other than root or this one.
fn open_cache_dirs(root: &Path, parts: &[String]) -> io::Result<File> {
    if !root.exists() {
        std::fs::create_dir_all(root)?;
    }
    let mut dir = dirat::open_dir(root).map_err(|e| refused(root, e))?;
    owned_by_us(&dir, root)?;
    let mut path = root.to_path_buf();
    for part in parts {
        path.push(part);
        let name = OsStr::new(part);
        match dirat::mkdir_at(&dir, name, 0o755) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(refused(&path, e)),
            _ => {}
        }
        dir = dirat::open_dir_at(&dir, name).map_err(|e| refused(&path, e))?;
        owned_by_us(&dir, &path)?;
    }
    Ok(dir)
}

/// Fails unless directory `dir` (at `path`) belongs to root or to this process's user.
fn owned_by_us(dir: &File, path: &Path) -> io::Result<()> {
    let uid = dir.metadata()?.uid();
    let me = crate::sys::effective_uid();
    if uid == 0 || uid == me {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "refusing the build-id cache directory `{}`: it belongs to user {uid}, not to root \
             or to this user ({me}), who could point it anywhere",
            path.display()
        ),
    ))
}

/// The error of a step of the cache's walk, a symbolic link said as such.
fn refused(path: &Path, e: io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(libc::ELOOP | libc::ENOTDIR) => io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "refusing the build-id cache directory `{}`: it is a symbolic link or no \
                 directory (the cache follows no link)",
                path.display()
            ),
        ),
        _ => io::Error::new(
            e.kind(),
            format!(
                "failed to open the build-id cache directory `{}`: {e}",
                path.display()
            ),
        ),
    }
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used)]
mod tests {
    use super::*;

    const LIBC: &str = "/lib/x86_64-linux-gnu/libc.so.6";

    #[test]
    fn to_hex_is_lowercase_and_padded() {
        assert_eq!(to_hex(&[0x00, 0x0a, 0xff, 0x12]), "000aff12");
        assert_eq!(to_hex(&[]), "");
    }

    #[test]
    fn libc_build_id_names_its_debug_file() {
        let id = file_build_id(Path::new(LIBC))
            .expect("libc is readable")
            .expect("libc has a build-id");
        assert_eq!(id.len(), 20);
        let hex = to_hex(&id);
        let debug = format!("/usr/lib/debug/.build-id/{}/{}.debug", &hex[..2], &hex[2..]);
        assert!(
            Path::new(&debug).exists(),
            "{debug} should exist (libc6-dbg)"
        );
        // The in-memory variant agrees, and so does the debug file itself.
        let data = std::fs::read(LIBC).expect("read libc");
        assert_eq!(elf_build_id(&data), Some(id.clone()));
        assert_eq!(file_build_id(Path::new(&debug)).ok().flatten(), Some(id));
    }

    #[test]
    fn non_elf_has_no_build_id() {
        assert_eq!(elf_build_id(b"#!/bin/sh\necho hi\n"), None);
        assert_eq!(elf_build_id(&[]), None);
        let err = file_build_id(Path::new("/nonexistent/memperf/file"));
        assert!(err.is_err());
    }

    #[test]
    fn kernel_notes_give_a_20_byte_build_id() {
        let id = kernel_build_id().expect("/sys/kernel/notes has a GNU build-id");
        assert_eq!(id.len(), 20);
    }

    #[test]
    fn note_parser_skips_other_notes_and_rejects_truncation() {
        let mut notes = Vec::new();
        // A "Xen" note of type 3 first: must be skipped (wrong name).
        for (name, ntype, desc) in [
            (&b"Xen\0"[..], 3u32, &[9u8; 5][..]),
            (b"GNU\0", 3, &[7u8; 20]),
        ] {
            notes.extend_from_slice(&(name.len() as u32).to_ne_bytes());
            notes.extend_from_slice(&(desc.len() as u32).to_ne_bytes());
            notes.extend_from_slice(&ntype.to_ne_bytes());
            notes.extend_from_slice(name);
            notes.extend_from_slice(desc);
            while notes.len() % 4 != 0 {
                notes.push(0);
            }
        }
        assert_eq!(parse_gnu_build_id_note(&notes), Some(vec![7u8; 20]));
        assert_eq!(parse_gnu_build_id_note(&notes[..notes.len() - 4]), None);
        assert_eq!(parse_gnu_build_id_note(&[1, 2, 3]), None);
    }
}
