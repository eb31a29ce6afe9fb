//! Finding separate debug files: by build-id under `/usr/lib/debug/.build-id/`, then by
//! `.gnu_debuglink` (CRC32-checked) next to the binary, in its `.debug/` subdirectory and
//! under `/usr/lib/debug/<dir>/` (GDB's rules).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A debug file found and read.
#[derive(Debug)]
pub(crate) struct DebugFile {
    pub path: PathBuf,
    pub data: Vec<u8>,
}

/// The debug-file search roots.
#[derive(Clone, Debug)]
pub(crate) struct Locator {
    /// Normally `/usr/lib/debug`.
    pub debug_root: PathBuf,
}

impl Default for Locator {
    fn default() -> Locator {
        Locator {
            debug_root: PathBuf::from("/usr/lib/debug"),
        }
    }
}

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    s
}

impl Locator {
    /// `<root>/.build-id/NN/REST.debug`, if present and carrying the same build-id.
    pub(crate) fn by_build_id(&self, build_id: &[u8]) -> Option<DebugFile> {
        let (first, rest) = build_id.split_first()?;
        if rest.is_empty() {
            return None;
        }
        let path = self
            .debug_root
            .join(".build-id")
            .join(hex(&[*first]))
            .join(format!("{}.debug", hex(rest)));
        let cached =
            crate::buildid::cache_dir().and_then(|d| crate::buildid::cache_path(&d, build_id));
        // The debug file, else the binary itself from the build-id cache (a deleted binary
        // the recorder kept).
        [Some(path), cached].into_iter().flatten().find_map(|path| {
            let data = crate::mapped::read_regular(&path).ok()?;
            let obj = object::File::parse(&*data).ok()?;
            if super::elf::build_id(&obj).as_deref() != Some(build_id) {
                return None;
            }
            drop(obj);
            Some(DebugFile { path, data })
        })
    }

    /// The `.gnu_debuglink` target `name` with CRC32 `crc`, for the binary opened at
    /// `opened` (maybe under `/proc/PID/root`) whose recorded path is `recorded`.
    pub(crate) fn by_debuglink(
        &self,
        opened: &Path,
        recorded: &Path,
        name: &[u8],
        crc: u32,
    ) -> Option<DebugFile> {
        let name = Path::new(OsStr::from_bytes(name));
        if name.as_os_str().is_empty() || name.components().count() != 1 {
            return None;
        }
        let dir = opened.parent()?;
        let mut candidates = vec![dir.join(name), dir.join(".debug").join(name)];
        if let Some(rdir) = recorded.parent() {
            let rel = rdir.strip_prefix("/").unwrap_or(rdir);
            candidates.push(self.debug_root.join(rel).join(name));
        }
        candidates
            .into_iter()
            .filter(|c| c != opened)
            .find_map(|path| {
                let data = std::fs::read(&path).ok()?;
                (crc32fast::hash(&data) == crc).then_some(DebugFile { path, data })
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_lowercase_two_digits_per_byte() {
        assert_eq!(hex(&[0x93, 0x0a, 0xff]), "930aff");
    }

    #[test]
    fn build_id_lookup_rejects_short_ids_and_missing_files() {
        let dir = tempfile::tempdir().ok();
        let root = dir.as_ref().map(|d| d.path().to_path_buf());
        let loc = Locator {
            debug_root: root.unwrap_or_else(|| PathBuf::from("/nonexistent")),
        };
        assert!(loc.by_build_id(&[0x12]).is_none());
        assert!(loc.by_build_id(&[0x12, 0x34, 0x56]).is_none());
    }

    #[test]
    fn debuglink_checks_the_crc() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let bin = dir.path().join("prog");
        std::fs::write(&bin, b"binary")?;
        std::fs::create_dir(dir.path().join(".debug"))?;
        std::fs::write(dir.path().join(".debug/prog.debug"), b"debug bytes")?;
        let loc = Locator {
            debug_root: dir.path().join("root"),
        };
        let good = crc32fast::hash(b"debug bytes");
        let found = loc.by_debuglink(&bin, &bin, b"prog.debug", good);
        assert_eq!(
            found.map(|f| f.path),
            Some(dir.path().join(".debug/prog.debug"))
        );
        assert!(
            loc.by_debuglink(&bin, &bin, b"prog.debug", good ^ 1)
                .is_none()
        );
        assert!(
            loc.by_debuglink(&bin, &bin, b"../prog.debug", good)
                .is_none()
        );
        Ok(())
    }
}
