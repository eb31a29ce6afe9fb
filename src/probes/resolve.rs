//! Where a probe goes: the file a target names (a path, a library the target process maps,
//! the system's library of that name, a program in PATH) and a symbol's file offset in it.
//!
//! Only symbols the file defines are probed: an imported function's PLT stub (and the
//! nonzero value an undefined symbol has in a non-PIE executable) is never taken for it.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSymbol, SymbolKind};

/// Where system libraries are looked for when no target process maps the one named.
const LIB_DIRS: &[&str] = &[
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
    "/usr/local/lib",
];

/// Why a target or a symbol could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error(
        "no file `{name}`: no target process maps a library of that name, and there is no \
         lib{name}.so* in {} nor a program `{name}` in PATH (name it by its path)",
        LIB_DIRS.join(", ")
    )]
    NoTarget { name: String },
    #[error("failed to read `{}`: {cause}", .path.display())]
    Read { path: PathBuf, cause: String },
    #[error("`{}` is not an ELF object memperf can probe: {cause}", .path.display())]
    NotElf { path: PathBuf, cause: String },
    /// A missing symbol; the caller words the closest names (`names` is every function).
    #[error("`{}` has no function `{symbol}`", .path.display())]
    Missing {
        path: PathBuf,
        symbol: String,
        names: Vec<String>,
    },
    #[error(
        "`{}` does not define `{symbol}`, it imports it (a probe there would be on its PLT \
         stub, which most calls never reach): probe the library that defines it, e.g. \
         `u:libc:{symbol}`",
        .path.display()
    )]
    Imported { path: PathBuf, symbol: String },
    #[error(
        "`{symbol}` is ambiguous in `{}`: functions at {}; probe one by its address, e.g. `{}`",
        .path.display(), .addrs.iter().map(|a| format!("{a:#x}")).collect::<Vec<_>>().join(", "),
        .addrs.first().map(|a| format!("{a:#x}")).unwrap_or_default()
    )]
    Ambiguous {
        path: PathBuf,
        symbol: String,
        addrs: Vec<u64>,
    },
    #[error("`{symbol}+{offset:#x}` is past the end of `{symbol}` ({size} bytes) in `{}`", .path.display())]
    PastEnd {
        path: PathBuf,
        symbol: String,
        offset: u64,
        size: u64,
    },
    #[error("address {addr:#x} is in no loadable segment of `{}`", .path.display())]
    NotLoaded { path: PathBuf, addr: u64 },
}

/// The file a probe target names. `pids` are the recording's target processes: a library
/// name is first looked for among the files they map (opened through `/proc/PID/root`).
pub fn target_path(name: &str, pids: &[u32]) -> Result<PathBuf, ResolveError> {
    if name.contains('/') {
        let p = Path::new(name);
        // tracefs resolves the path in memperf's own namespace: make it absolute.
        return Ok(std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()));
    }
    for &pid in pids {
        let Ok(maps) = crate::procfs::read_maps(pid) else {
            continue;
        };
        let found = maps.iter().filter(|m| m.is_exec()).find(|m| {
            m.path.starts_with(b"/")
                && crate::allocators::matches_obj(&String::from_utf8_lossy(&m.path), name)
        });
        if let Some(m) = found {
            let path = Path::new(std::ffi::OsStr::from_bytes(&m.path));
            return Ok(Path::new(&format!("/proc/{pid}/root"))
                .join(path.strip_prefix("/").unwrap_or(path)));
        }
    }
    let lib = if name == "c" { "libc" } else { name };
    let lib = lib.strip_prefix("lib").unwrap_or(lib);
    for dir in LIB_DIRS {
        let Ok(rd) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut hits: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|f| f.to_str())
                    .is_some_and(|f| crate::allocators::matches_obj(f, lib) && f.contains(".so"))
            })
            .collect();
        // `libc.so.6` before `libc.so` (a linker script on some systems).
        hits.sort_by_key(|p| std::cmp::Reverse(p.as_os_str().len()));
        if let Some(p) = hits.into_iter().find(|p| is_elf(p)) {
            return Ok(std::fs::canonicalize(&p).unwrap_or(p));
        }
    }
    let in_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    match in_path {
        Some(p) => Ok(std::fs::canonicalize(&p).unwrap_or(p)),
        None => Err(ResolveError::NoTarget {
            name: name.to_string(),
        }),
    }
}

fn is_elf(p: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(p)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == *b"\x7fELF"
}

/// A resolved function site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    /// The file offset of the probed instruction.
    pub offset: u64,
    /// The symbol's ELF address (SVMA) and size.
    pub addr: u64,
    pub size: u64,
}

/// The file's bytes (read through `mapped`, which never blocks on a FIFO).
pub fn read(path: &Path) -> Result<Vec<u8>, ResolveError> {
    crate::mapped::read_regular(path).map_err(|e| ResolveError::Read {
        path: path.to_path_buf(),
        cause: e.to_string(),
    })
}

/// Where `symbol` (or a `0x` address) `+offset` is in `data`, the bytes of `path`.
pub fn symbol_site(
    path: &Path,
    data: &[u8],
    symbol: &str,
    offset: u64,
) -> Result<Site, ResolveError> {
    let file = object::File::parse(data).map_err(|e| ResolveError::NotElf {
        path: path.to_path_buf(),
        cause: e.to_string(),
    })?;
    let (addr, size) = match symbol
        .strip_prefix("0x")
        .and_then(|h| u64::from_str_radix(h, 16).ok())
    {
        Some(a) => (a, 0),
        None => find_function(&file, path, symbol)?,
    };
    if size > 0 && offset >= size {
        return Err(ResolveError::PastEnd {
            path: path.to_path_buf(),
            symbol: symbol.to_string(),
            offset,
            size,
        });
    }
    let at = addr + offset;
    let file_off = crate::allocators::file_offset(&file, at).ok_or(ResolveError::NotLoaded {
        path: path.to_path_buf(),
        addr: at,
    })?;
    Ok(Site {
        offset: file_off,
        addr,
        size,
    })
}

/// `name` without a symbol version (`malloc@@GLIBC_2.2.5`).
fn unversioned(name: &str) -> &str {
    name.split('@').next().unwrap_or(name)
}

/// The defined function `symbol` (exactly, or without its version), in `.dynsym` or
/// `.symtab`; aliases at one address are one function.
fn find_function(
    file: &object::File<'_>,
    path: &Path,
    symbol: &str,
) -> Result<(u64, u64), ResolveError> {
    let mut at: Vec<(u64, u64)> = Vec::new();
    let mut imported = false;
    for s in file.dynamic_symbols().chain(file.symbols()) {
        let Ok(name) = s.name() else { continue };
        if name != symbol && unversioned(name) != symbol {
            continue;
        }
        if s.is_undefined() {
            imported = true;
            continue;
        }
        if s.kind() != SymbolKind::Text || s.address() == 0 {
            continue;
        }
        match at.iter_mut().find(|(a, _)| *a == s.address()) {
            Some((_, size)) => *size = (*size).max(s.size()),
            None => at.push((s.address(), s.size())),
        }
    }
    match at.as_slice() {
        [one] => Ok(*one),
        [] if imported => Err(ResolveError::Imported {
            path: path.to_path_buf(),
            symbol: symbol.to_string(),
        }),
        [] => Err(ResolveError::Missing {
            path: path.to_path_buf(),
            symbol: symbol.to_string(),
            names: function_names(file),
        }),
        many => Err(ResolveError::Ambiguous {
            path: path.to_path_buf(),
            symbol: symbol.to_string(),
            addrs: many.iter().map(|(a, _)| *a).collect(),
        }),
    }
}

/// Every function the file defines, unversioned, sorted.
pub fn function_names(file: &object::File<'_>) -> Vec<String> {
    functions(file).into_iter().map(|f| f.0).collect()
}

/// Every function the file defines: (unversioned name, address, size), sorted by name, one
/// entry per name (the largest size where `.dynsym` and `.symtab` differ).
pub fn functions(file: &object::File<'_>) -> Vec<(String, u64, u64)> {
    let mut all: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    for s in file.dynamic_symbols().chain(file.symbols()) {
        if !s.is_definition() || s.kind() != SymbolKind::Text || s.address() == 0 {
            continue;
        }
        let Ok(name) = s.name() else { continue };
        let name = unversioned(name);
        if name.is_empty() {
            continue;
        }
        let e = all
            .entry(name.to_string())
            .or_insert((s.address(), s.size()));
        e.1 = e.1.max(s.size());
    }
    all.into_iter().map(|(n, (a, z))| (n, a, z)).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn libc_by_name_is_the_systems_and_malloc_is_found_with_or_without_its_version() {
        let path = target_path("libc", &[]).unwrap();
        assert_eq!(path, target_path("c", &[]).unwrap());
        assert!(
            crate::allocators::is_libc(&path.to_string_lossy()),
            "{}",
            path.display()
        );
        // Our own process maps it too: -p finds it through /proc/PID/root.
        let own = target_path("libc", &[std::process::id()]).unwrap();
        assert!(
            own.starts_with(format!("/proc/{}/root", std::process::id())),
            "{}",
            own.display()
        );
        let data = read(&path).unwrap();
        let malloc = symbol_site(&path, &data, "malloc", 0).unwrap();
        assert!(malloc.size > 0);
        // An alias at the same address is the same site.
        if let Ok(alias) = symbol_site(&path, &data, "__libc_malloc", 0) {
            assert_eq!(alias.offset, malloc.offset);
        }
        let inside = symbol_site(&path, &data, "malloc", 4).unwrap();
        assert_eq!(inside.offset, malloc.offset + 4);
        assert!(matches!(
            symbol_site(&path, &data, "malloc", malloc.size),
            Err(ResolveError::PastEnd { .. })
        ));
        match symbol_site(&path, &data, "mallocx", 0) {
            Err(ResolveError::Missing { names, .. }) => {
                assert!(names.iter().any(|n| n == "malloc"))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            target_path("no_such_library_xyz", &[]),
            Err(ResolveError::NoTarget { .. })
        ));
    }

    #[test]
    fn an_imported_function_is_not_probed_at_its_plt_stub() {
        let exe = std::env::current_exe().unwrap();
        let data = read(&exe).unwrap();
        // The test binary calls libc's `write` through the PLT (or the GOT): it imports it.
        assert!(matches!(
            symbol_site(&exe, &data, "write", 0),
            Err(ResolveError::Imported { .. })
        ));
    }
}
