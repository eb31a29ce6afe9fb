//! Which of a target's objects carry a USDT provider's probes: the executable and shared
//! libraries a running process maps (`/proc/PID/maps`, each read through the process's root),
//! or, for a command not started yet, its executable (found in PATH as `execvp` finds it)
//! and the libraries the dynamic loader would load for it at start (the loader's own
//! `--list`, so that its search rules, `LD_LIBRARY_PATH`, RUNPATH and its cache, are the
//! ones applied). A library opened later with `dlopen` is in neither.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use super::resolve;
use super::usdt;

/// One object that carries some of the probes looked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Carrier {
    pub path: PathBuf,
    /// The probe names of the provider it carries, among those looked for.
    pub names: Vec<String>,
}

/// What was looked at and what carries the probes.
#[derive(Debug, Default)]
pub struct Found {
    /// How many objects were read.
    pub looked_at: usize,
    pub carriers: Vec<Carrier>,
}

/// The objects among `paths` whose notes hold `provider:NAME` for any of `names`.
pub fn carriers(paths: &[PathBuf], provider: &str, names: &[&str]) -> Found {
    let mut found = Found::default();
    for path in paths {
        let Ok(data) = resolve::read(path) else {
            continue;
        };
        let Ok(file) = object::File::parse(&*data) else {
            continue;
        };
        found.looked_at += 1;
        let held: BTreeSet<String> = usdt::notes(&file)
            .into_iter()
            .filter(|n| n.provider == provider && names.contains(&n.name.as_str()))
            .map(|n| n.name)
            .collect();
        if !held.is_empty() {
            found.carriers.push(Carrier {
                path: path.clone(),
                names: held.into_iter().collect(),
            });
        }
    }
    found
}

/// The executable files the processes `pids` map, each file once however many of them map
/// it (one file is one probe site), as paths through the first one's root (so that a
/// container's files are the container's).
pub fn process_objects(pids: &[u32]) -> Result<Vec<PathBuf>> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for &pid in pids {
        add_process_objects(pid, &mut seen, &mut out)?;
    }
    Ok(out)
}

fn add_process_objects(
    pid: u32,
    seen: &mut BTreeSet<(u32, u32, u64)>,
    out: &mut Vec<PathBuf>,
) -> Result<()> {
    let maps = crate::procfs::read_maps(pid)
        .with_context(|| format!("failed to read the mappings of process {pid}"))?;
    for m in maps
        .iter()
        .filter(|m| m.is_exec() && m.path.starts_with(b"/"))
    {
        if !seen.insert((m.dev_major, m.dev_minor, m.inode)) {
            continue;
        }
        let path = Path::new(std::ffi::OsStr::from_bytes(&m.path));
        out.push(
            Path::new(&format!("/proc/{pid}/root")).join(path.strip_prefix("/").unwrap_or(path)),
        );
    }
    Ok(())
}

/// The executable a command names and the libraries the dynamic loader loads for it at
/// start; when the loader cannot list them, the executable alone and why.
pub fn command_objects(argv0: &std::ffi::OsStr) -> Result<(Vec<PathBuf>, Option<String>)> {
    let exe = executable(argv0)?;
    let data = resolve::read(&exe)?;
    let file = object::File::parse(&*data).map_err(|e| {
        anyhow::anyhow!(
            "`{}` is not an ELF file ({e}; a script?): the programs it starts are not looked \
             at, name the binary or library that carries the probes with --otel-memory PATH",
            exe.display()
        )
    })?;
    let mut out = vec![exe.clone()];
    let Some(interp) = interpreter(&file, &data) else {
        return Ok((out, None));
    };
    match loaded_libraries(&interp, &exe) {
        Ok(libs) => {
            out.extend(libs);
            Ok((out, None))
        }
        Err(e) => Ok((out, Some(format!("{e:#}")))),
    }
}

/// Whether the object at `path` imports `dlopen` (or `dlmopen`): a program that may open
/// libraries while it runs, which cannot be looked at before it starts.
pub fn calls_dlopen(path: &Path) -> bool {
    use object::{Object, ObjectSymbol};
    let Ok(data) = resolve::read(path) else {
        return false;
    };
    let Ok(file) = object::File::parse(&*data) else {
        return false;
    };
    file.dynamic_symbols()
        .any(|s| s.is_undefined() && matches!(s.name(), Ok("dlopen" | "dlmopen")))
}

/// The file `execvp` runs for `argv0`: itself when it holds a `/`, else the first
/// executable file of that name in PATH.
fn executable(argv0: &std::ffi::OsStr) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if argv0.as_bytes().contains(&b'/') {
        return Ok(PathBuf::from(argv0));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    std::env::split_paths(&path)
        .map(|d| d.join(argv0))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .ok_or_else(|| anyhow::anyhow!("no program `{}` in PATH", Path::new(argv0).display()))
}

/// The program interpreter (PT_INTERP) of a dynamically linked executable.
fn interpreter(file: &object::File<'_>, data: &[u8]) -> Option<PathBuf> {
    use object::elf::PT_INTERP;
    use object::read::elf::ProgramHeader;
    let object::File::Elf64(elf) = file else {
        return None;
    };
    let endian = elf.endian();
    let ph = elf
        .elf_program_headers()
        .iter()
        .find(|ph| ph.p_type(endian) == PT_INTERP)?;
    let bytes = ph.data(endian, data).ok()?;
    let bytes = bytes.split(|&b| b == 0).next()?;
    Some(PathBuf::from(OsString::from_vec(bytes.to_vec())))
}

/// The libraries `interp --list exe` says the loader would load, by their paths.
fn loaded_libraries(interp: &Path, exe: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new(interp)
        .arg("--list")
        .arg(exe)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("failed to run `{} --list`", interp.display()))?;
    if !out.status.success() {
        bail!(
            "`{} --list {}` failed: {}",
            interp.display(),
            exe.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(parse_list(&out.stdout))
}

/// The paths of the loader's `--list` lines: `NAME => PATH (0xADDR)` or `PATH (0xADDR)`
/// (the loader itself); `NAME (0xADDR)` (the vDSO) and `NAME => not found` name no file.
fn parse_list(text: &[u8]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        let line = line.trim_ascii();
        let rest = match line.windows(4).position(|w| w == b" => ") {
            Some(at) => &line[at + 4..],
            None => line,
        };
        let path = match rest.windows(3).rposition(|w| w == b" (0") {
            Some(at) => &rest[..at],
            None => rest,
        };
        if path.starts_with(b"/") {
            out.push(PathBuf::from(OsString::from_vec(path.to_vec())));
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_loaders_list_gives_the_files_it_loads() {
        let text = b"\tlinux-vdso.so.1 (0x00007ffc6a5f1000)\n\
            \tlibotel.so => /tmp/a b/libotel.so (0x00007f0e2c6a0000)\n\
            \tlibgone.so => not found\n\
            \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f0e2c400000)\n\
            \t/lib64/ld-linux-x86-64.so.2 (0x00007f0e2c6b0000)\n";
        assert_eq!(
            parse_list(text),
            [
                "/tmp/a b/libotel.so",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2"
            ]
            .map(PathBuf::from)
        );
    }

    #[test]
    fn a_command_is_found_in_path_with_its_libraries() {
        let (objects, why) = command_objects(std::ffi::OsStr::new("sh")).unwrap();
        assert_eq!(why, None);
        assert!(objects[0].ends_with("sh"), "{objects:?}");
        assert!(
            objects
                .iter()
                .any(|p| crate::allocators::is_libc(&p.to_string_lossy())),
            "{objects:?}"
        );
    }

    #[test]
    fn a_process_maps_its_executable_and_libc_once_each() {
        let objects = process_objects(&[std::process::id(), std::process::id()]).unwrap();
        let libc = objects
            .iter()
            .filter(|p| crate::allocators::is_libc(&p.to_string_lossy()))
            .count();
        assert_eq!(libc, 1, "{objects:?}");
        assert!(carriers(&objects, "otel_memory", &["alloc"]).looked_at >= 2);
    }
}
