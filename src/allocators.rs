//! Where allocator uprobes go: the allocator object of a process or command, its functions'
//! file offsets, and probe sites the kernel can emulate instead of single-stepping. `memperf
//! leak` probes what this finds; `memperf list --allocators` shows it.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use object::{Object, ObjectSegment, ObjectSymbol};

/// What a probed function does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Func {
    Malloc,
    Calloc,
    Realloc,
    PosixMemalign,
    AlignedAlloc,
    Valloc,
    Pvalloc,
    Free,
    Mmap,
    Munmap,
    Mremap,
}

impl Func {
    /// Functions that serve the program's heap (their own mmaps are internal).
    pub fn is_allocator(self) -> bool {
        !matches!(self, Func::Mmap | Func::Munmap | Func::Mremap)
    }

    pub fn is_map_call(self) -> bool {
        matches!(self, Func::Mmap | Func::Munmap | Func::Mremap)
    }
}

/// A probed function: its name in the object, what it does, and how to read its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FuncDef {
    pub symbol: &'static str,
    pub func: Func,
    /// Named tracefs fetch arguments (readable in `uprobe_profile` and usable in filters).
    pub args: &'static [&'static str],
    /// Whether the result (RAX) is needed.
    pub ret: bool,
    /// Whether the allocator must have it.
    pub required: bool,
}

/// memleak's list (BCC) plus mremap (libbpf-tools).
pub const FUNCS: &[FuncDef] = &[
    def("malloc", Func::Malloc, &["size=%di:u64"], true, true),
    def(
        "calloc",
        Func::Calloc,
        &["nmemb=%di:u64", "size=%si:u64"],
        true,
        false,
    ),
    def(
        "realloc",
        Func::Realloc,
        &["ptr=%di:x64", "size=%si:u64"],
        true,
        false,
    ),
    def(
        "posix_memalign",
        Func::PosixMemalign,
        &["memptr=%di:x64", "align=%si:u64", "size=%dx:u64"],
        true,
        false,
    ),
    def(
        "aligned_alloc",
        Func::AlignedAlloc,
        &["align=%di:u64", "size=%si:u64"],
        true,
        false,
    ),
    def(
        "memalign",
        Func::AlignedAlloc,
        &["align=%di:u64", "size=%si:u64"],
        true,
        false,
    ),
    def("valloc", Func::Valloc, &["size=%di:u64"], true, false),
    def("pvalloc", Func::Pvalloc, &["size=%di:u64"], true, false),
    def("free", Func::Free, &["ptr=%di:x64"], false, true),
    def(
        "mmap",
        Func::Mmap,
        &["addr=%di:x64", "len=%si:u64"],
        true,
        false,
    ),
    def(
        "munmap",
        Func::Munmap,
        &["addr=%di:x64", "len=%si:u64"],
        false,
        false,
    ),
    def(
        "mremap",
        Func::Mremap,
        &["old=%di:x64", "old_len=%si:u64", "new_len=%dx:u64"],
        true,
        false,
    ),
];

const fn def(
    symbol: &'static str,
    func: Func,
    args: &'static [&'static str],
    ret: bool,
    required: bool,
) -> FuncDef {
    FuncDef {
        symbol,
        func,
        args,
        ret,
        required,
    }
}

/// A function found in the object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    pub def: FuncDef,
    /// File offset of the function's first instruction (return probes go here).
    pub entry: u64,
    /// The function's size in bytes (its symbol's; 0 when the symbol does not say).
    pub size: u64,
    /// File offset of the entry probe: past a first instruction the kernel would
    /// single-step, when that instruction leaves the arguments and the stack as they are
    /// and the function has no return probe.
    pub probe: u64,
}

/// The object holding the allocator, and its probe sites.
#[derive(Debug, Clone)]
pub struct Allocator {
    pub sites: Vec<Site>,
    /// Functions this object does not have (optional ones; reported once).
    pub missing: Vec<&'static str>,
}

/// How many bytes to skip at a function's start so that the probe lands on an instruction
/// the kernel emulates (jcc, push), or 0. Only instructions that read registers and memory
/// and set flags are skipped, so the arguments and the stack pointer are intact at the new
/// site and the unwind rule (CFA = rsp + 8) is the same.
pub fn emulatable_skip(code: &[u8]) -> u64 {
    let next_is_emulated = |at: usize| -> bool {
        match code.get(at..) {
            Some([op, ..]) if (0x70..=0x7f).contains(op) => true, // jcc rel8
            Some([0x0f, op, ..]) if (0x80..=0x8f).contains(op) => true, // jcc rel32
            Some([op, ..]) if (0x50..=0x57).contains(op) => true, // push r64
            Some([0x41, op, ..]) if (0x50..=0x57).contains(op) => true, // push r8..r15
            _ => false,
        }
    };
    let skip = match code {
        // test %rdi,%rdi (glibc free)
        [0x48, 0x85, 0xff, ..] => 3,
        // cmpb $imm8, disp32(%rip) (glibc memalign, posix_memalign, valloc, pvalloc)
        [0x80, 0x3d, _, _, _, _, _, ..] => 7,
        _ => return 0,
    };
    if next_is_emulated(skip) {
        skip as u64
    } else {
        0
    }
}

/// Reads the object and finds each function (with `prefix`, e.g. `je_` for jemalloc).
pub fn load(path: &Path, prefix: &str) -> Result<Allocator> {
    let data =
        std::fs::read(path).with_context(|| format!("failed to read `{}`", path.display()))?;
    let file = object::File::parse(&*data).map_err(|e| {
        anyhow::anyhow!(
            "`{}` is not an ELF object memperf can probe: {e}",
            path.display()
        )
    })?;
    sites_in(&file, &data, path, prefix)
}

/// The probe sites of the functions named `prefix` + each of [`FUNCS`] in a parsed object
/// (`data` its bytes); an error when a required one (malloc, free) is not there.
fn sites_in(file: &object::File<'_>, data: &[u8], path: &Path, prefix: &str) -> Result<Allocator> {
    let mut sites: Vec<Site> = Vec::new();
    let mut missing = Vec::new();
    for d in FUNCS {
        let name = format!("{prefix}{}", d.symbol);
        let Some((vaddr, size)) = find_symbol(file, &name) else {
            if d.required {
                bail!(
                    "`{}` has no `{name}`: it is not the allocator's object (name it with -O, and \
                     --symbols-prefix for prefixed allocators such as jemalloc's je_)",
                    path.display()
                );
            }
            missing.push(d.symbol);
            continue;
        };
        let Some(entry) = file_offset(file, vaddr) else {
            bail!(
                "`{}`: `{name}` at {vaddr:#x} is in no loadable segment",
                path.display()
            );
        };
        // Aliases (memalign = aligned_alloc, mmap64 = mmap) share one probe.
        if sites.iter().any(|s| s.entry == entry) {
            continue;
        }
        let code = usize::try_from(entry)
            .ok()
            .and_then(|o| data.get(o..o.saturating_add(16)))
            .unwrap_or(&[]);
        // A return probe replaces the return address at the function's first instruction:
        // an entry probe further in would see the kernel's trampoline instead of the caller.
        // So only functions without one (free, munmap) move their entry probe.
        let skip = if d.ret { 0 } else { emulatable_skip(code) };
        sites.push(Site {
            def: *d,
            entry,
            size,
            probe: entry + skip,
        });
    }
    Ok(Allocator { sites, missing })
}

/// The symbol prefixes of the allocators memperf knows, with their names: the C library's
/// (and any allocator that replaces malloc itself), jemalloc's, tcmalloc's, mimalloc's.
pub const PREFIXES: &[(&str, &str)] = &[
    ("", "malloc"),
    ("je_", "jemalloc"),
    ("tc_", "tcmalloc"),
    ("mi_", "mimalloc"),
];

/// An allocator found in a process's mappings: where the process maps it, the prefix of its
/// symbols (what `memperf leak -O PATH --symbols-prefix PREFIX` takes) and its probe sites.
#[derive(Debug, Clone)]
pub struct Found {
    pub path: PathBuf,
    pub prefix: &'static str,
    pub alloc: Allocator,
}

impl Found {
    /// What the allocator is: by its prefix, or for unprefixed ones by the file's name.
    pub fn family(&self) -> &'static str {
        let path = self.path.to_string_lossy();
        match self.prefix {
            "" if is_libc(&path) => "libc",
            "" => ["jemalloc", "tcmalloc", "mimalloc"]
                .into_iter()
                .find(|n| path.contains(n))
                .unwrap_or("malloc"),
            p => PREFIXES
                .iter()
                .find(|(q, _)| *q == p)
                .map_or("malloc", |(_, n)| n),
        }
    }
}

/// A mapped file that could not be read, and why.
pub type Unreadable = (PathBuf, String);

/// Every allocator in the executable files process `pid` maps, each file opened inside the
/// process's root and checked against the mapping's device and inode. Also the files that
/// could not be read, with why.
pub fn in_process(pid: u32) -> Result<(Vec<Found>, Vec<Unreadable>)> {
    let maps = crate::procfs::read_maps(pid).with_context(|| format!("no such process: {pid}"))?;
    let mut seen = std::collections::HashSet::new();
    let (mut found, mut unreadable) = (Vec::new(), Vec::new());
    for m in maps
        .iter()
        .filter(|m| m.is_exec() && m.path.starts_with(b"/"))
    {
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(&m.path));
        if !seen.insert(path.clone()) {
            continue;
        }
        let id = Some((m.dev_major, m.dev_minor, m.inode));
        let data = crate::mapped::open_in_process_root(pid, &path, id).and_then(|mut f| {
            let mut data = Vec::new();
            std::io::Read::read_to_end(&mut f, &mut data).map(|_| data)
        });
        let data = match data {
            Ok(d) => d,
            Err(e) => {
                unreadable.push((path, e.to_string()));
                continue;
            }
        };
        let Ok(file) = object::File::parse(&*data) else {
            continue;
        };
        for &(prefix, _) in PREFIXES {
            if let Ok(alloc) = sites_in(&file, &data, &path, prefix) {
                found.push(Found {
                    path: path.clone(),
                    prefix,
                    alloc,
                });
            }
        }
    }
    Ok((found, unreadable))
}

/// The allocators in one object file (`memperf list --allocators PATH`).
pub fn in_file(path: &Path) -> Result<Vec<Found>> {
    let data = crate::mapped::read_regular(path)
        .with_context(|| format!("failed to read `{}`", path.display()))?;
    let file = object::File::parse(&*data)
        .map_err(|e| anyhow::anyhow!("`{}` is not an ELF object: {e}", path.display()))?;
    Ok(PREFIXES
        .iter()
        .filter_map(|&(prefix, _)| {
            let alloc = sites_in(&file, &data, path, prefix).ok()?;
            Some(Found {
                path: path.to_path_buf(),
                prefix,
                alloc,
            })
        })
        .collect())
}

fn find_symbol(file: &object::File<'_>, name: &str) -> Option<(u64, u64)> {
    file.dynamic_symbols()
        .chain(file.symbols())
        .find(|s| s.is_definition() && s.name() == Ok(name) && s.address() != 0)
        .map(|s| (s.address(), s.size()))
}

/// The file ranges of the allocator's own functions (malloc, free...; not mmap and its
/// kin): a mapping call made from inside one is the allocator's, whatever the pending calls
/// say (a thread whose first call is free creates its arena inside free, which has no return
/// probe to mark it pending).
pub fn allocator_ranges(alloc: &Allocator) -> Vec<std::ops::Range<u64>> {
    alloc
        .sites
        .iter()
        .filter(|s| s.def.func.is_allocator() && s.size > 0)
        .map(|s| s.entry..s.entry + s.size)
        .collect()
}

/// vaddr → file offset through the PT_LOAD segment that holds it.
pub(crate) fn file_offset(file: &object::File<'_>, vaddr: u64) -> Option<u64> {
    file.segments().find_map(|seg| {
        let (off, size) = seg.file_range();
        let start = seg.address();
        (vaddr >= start && vaddr < start + size).then(|| vaddr - start + off)
    })
}

/// Whether a mapped path is the C library (`libc.so.6`, `libc-2.31.so`, musl's `libc.so`).
pub fn is_libc(path: &str) -> bool {
    let base = path.rsplit('/').next().unwrap_or(path);
    base.starts_with("libc.so") || (base.starts_with("libc-") && base.ends_with(".so"))
}

/// Whether a mapped path is the object `-O NAME` means: a path, or a library name as BCC
/// takes it (`c` is libc, `jemalloc` is libjemalloc.so*).
pub fn matches_obj(path: &str, obj: &str) -> bool {
    if obj == "c" {
        return is_libc(path);
    }
    let base = path.rsplit('/').next().unwrap_or(path);
    base == obj
        || base.starts_with(&format!("{obj}.so"))
        || base.starts_with(&format!("lib{obj}.so"))
        || base.starts_with(&format!("lib{obj}-"))
}

/// The allocator of a running process: the mapped object `obj` names (default libc), read
/// through `/proc/PID/root` so that containers' files are found.
pub fn for_process(pid: u32, obj: Option<&str>) -> Result<PathBuf> {
    if let Some(o) = obj.filter(|o| o.contains('/')) {
        return Ok(PathBuf::from(o));
    }
    let name = obj.unwrap_or("c");
    // A process started an instant ago (`app & memperf leak -p $!`) may still be in its
    // dynamic loader, which maps the libraries after exec: look again for a while.
    let deadline = std::time::Instant::now() + LOADER_WAIT;
    let found = loop {
        let maps =
            crate::procfs::read_maps(pid).with_context(|| format!("no such process: {pid}"))?;
        if maps.is_empty() {
            let comm = crate::procfs::comm(pid).unwrap_or_default();
            bail!(
                "process {pid} ({}) has no user memory: a kernel thread, or a process that \
                 has exited",
                String::from_utf8_lossy(&comm).trim_end()
            );
        }
        let found = maps
            .iter()
            .filter(|m| m.is_exec())
            .map(|m| String::from_utf8_lossy(&m.path).into_owned())
            .find(|p| p.starts_with('/') && matches_obj(p, name));
        let loading = in_dynamic_loader(&maps) || in_exec(&maps);
        if found.is_some() || !loading || std::time::Instant::now() > deadline {
            break found;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    match found {
        Some(p) => Ok(PathBuf::from(format!("/proc/{pid}/root{p}"))),
        None if obj.is_none() => bail!(
            "process {pid} has no libc mapped (a statically linked program?): name the object \
             that holds its allocator with -O, e.g. -O /proc/{pid}/exe"
        ),
        None => bail!("process {pid} maps no object named `{name}` (given to -O)"),
    }
}

/// How long `for_process` waits for a process's dynamic loader to map its libraries.
const LOADER_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether a process is still in glibc's dynamic loader: the kernel mapped the interpreter
/// (`ld-linux*`, `ld64.so*`, `ld.so*`, or before glibc 2.34 the file those link to,
/// `ld-2.31.so`) at exec, and the loader has not yet mapped libc's code. (musl's interpreter
/// is its libc, which `is_libc` does not name: no wait there.)
/// Whether the process is inside `execve` now: the kernel maps the program (and its loader)
/// into a fresh address space before the vDSO, which it maps last, so a process with no
/// `[vdso]` yet has neither its loader nor its libraries (a static program has the vDSO too,
/// once its exec is done; without one, as with `vdso=0`, the wait just runs to its end).
fn in_exec(maps: &[crate::procfs::MapEntry]) -> bool {
    !maps.iter().any(|m| m.path.as_slice() == b"[vdso]")
}

fn in_dynamic_loader(maps: &[crate::procfs::MapEntry]) -> bool {
    let mapped = |f: fn(&str) -> bool, exec_only: bool| {
        maps.iter().filter(|m| !exec_only || m.is_exec()).any(|m| {
            let path = String::from_utf8_lossy(&m.path);
            f(path.rsplit('/').next().unwrap_or(&path))
        })
    };
    let is_interp: fn(&str) -> bool = |b| {
        b.starts_with("ld-linux")
            || b.starts_with("ld64.so")
            || b.starts_with("ld.so")
            || (b.starts_with("ld-") && b.ends_with(".so") && !b.starts_with("ld-musl"))
    };
    mapped(is_interp, false) && !mapped(is_libc, true)
}

/// The allocator of a command about to run: `-O` as a path, or the libc the command links
/// against, found as the dynamic loader would (memperf's own libc when the names agree).
pub fn for_command(program: &Path, obj: Option<&str>) -> Result<PathBuf> {
    if let Some(o) = obj.filter(|o| o.contains('/')) {
        return Ok(PathBuf::from(o));
    }
    let data = std::fs::read(program)
        .with_context(|| format!("failed to read `{}`", program.display()))?;
    if let Some(interp) = script_interpreter(&data) {
        // A script: the kernel runs its interpreter, whose libc is the one to probe.
        return for_command(&interp, obj);
    }
    let file = object::File::parse(&*data)
        .map_err(|e| anyhow::anyhow!("`{}` is not an ELF program: {e}", program.display()))?;
    let needed = needed_libraries(&file);
    let name = obj.unwrap_or("c");
    let Some(lib) = needed.iter().find(|n| matches_obj(n, name)) else {
        if obj.is_none() {
            bail!(
                "`{}` does not link against libc (statically linked?): name the object that \
                 holds its allocator with -O, e.g. -O {}",
                program.display(),
                program.display()
            );
        }
        bail!(
            "`{}` does not link against `{name}` (given to -O); give its path instead",
            program.display()
        );
    };
    // The loader's search: memperf's own mapping of a library of that name, then the
    // usual directories.
    if let Ok(maps) = crate::procfs::read_maps(std::process::id()) {
        for m in maps.iter().filter(|m| m.is_exec()) {
            let p = String::from_utf8_lossy(&m.path).into_owned();
            if p.rsplit('/').next() == Some(lib.as_str()) {
                return Ok(PathBuf::from(p));
            }
        }
    }
    for dir in [
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib/aarch64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/lib64",
        "/usr/lib64",
        "/lib",
        "/usr/lib",
    ] {
        let p = Path::new(dir).join(lib);
        if p.exists() {
            return Ok(p);
        }
    }
    bail!(
        "cannot find `{lib}`, which `{}` links against: name it with -O PATH",
        program.display()
    )
}

/// The interpreter of a `#!` script (not followed further than one level by the caller's
/// recursion: an interpreter that is itself a script is rare and the kernel allows it too).
fn script_interpreter(data: &[u8]) -> Option<PathBuf> {
    let line = data.strip_prefix(b"#!")?;
    let end = line.iter().position(|&b| b == b'\n').unwrap_or(line.len());
    let text = std::str::from_utf8(&line[..end]).ok()?;
    let interp = text.split_whitespace().next()?;
    Some(PathBuf::from(interp))
}

/// DT_NEEDED entries of a dynamically linked ELF program (64-bit little-endian).
fn needed_libraries(file: &object::File<'_>) -> Vec<String> {
    use object::ObjectSection;
    let (Some(dynamic), Some(dynstr)) = (
        file.section_by_name(".dynamic").and_then(|s| s.data().ok()),
        file.section_by_name(".dynstr").and_then(|s| s.data().ok()),
    ) else {
        return Vec::new();
    };
    let word = |b: &[u8]| b.try_into().map(u64::from_le_bytes).unwrap_or(0);
    dynamic
        .chunks_exact(16)
        .map(|e| (word(&e[..8]), word(&e[8..])))
        .take_while(|&(tag, _)| tag != 0)
        .filter(|&(tag, _)| tag == object::elf::DT_NEEDED as u64)
        .filter_map(|(_, at)| {
            let rest = dynstr.get(usize::try_from(at).ok()?..)?;
            let end = rest.iter().position(|&b| b == 0)?;
            Some(String::from_utf8_lossy(&rest[..end]).into_owned())
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn probe_sites_skip_only_flag_setting_first_instructions() {
        // glibc 2.36 free: test %rdi,%rdi; je ...
        assert_eq!(
            emulatable_skip(&[0x48, 0x85, 0xff, 0x0f, 0x84, 0, 0, 0, 0]),
            3
        );
        assert_eq!(emulatable_skip(&[0x48, 0x85, 0xff, 0x74, 0x10]), 3);
        // posix_memalign: cmpb $0x0,0x140201(%rip); push %r12
        assert_eq!(
            emulatable_skip(&[0x80, 0x3d, 0x01, 0x02, 0x14, 0x00, 0x00, 0x41, 0x54]),
            7
        );
        // malloc: push %r12 is emulated already.
        assert_eq!(emulatable_skip(&[0x41, 0x54, 0x55]), 0);
        // test %rdi,%rdi followed by a mov: not worth moving.
        assert_eq!(emulatable_skip(&[0x48, 0x85, 0xff, 0x48, 0x89, 0xf8]), 0);
        assert_eq!(emulatable_skip(&[]), 0);
    }

    #[test]
    fn a_process_is_in_its_loader_while_ld_so_is_mapped_and_libc_is_not() {
        let line = |path: &str| {
            format!("7f0000000000-7f0000001000 r-xp 00000000 08:01 1 {path}\n").into_bytes()
        };
        let maps = |paths: &[&str]| {
            let text: Vec<u8> = paths.iter().flat_map(|p| line(p)).collect();
            crate::procfs::parse_maps(&text)
        };
        let ld = "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2";
        let libc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
        assert!(in_dynamic_loader(&maps(&["/usr/bin/sleep", ld, "[vdso]"])));
        assert!(!in_dynamic_loader(&maps(&["/usr/bin/sleep", ld, libc])));
        // Before glibc 2.34 the loader's file is ld-VERSION.so, and libc libc-VERSION.so.
        let old_ld = "/lib/x86_64-linux-gnu/ld-2.31.so";
        assert!(in_dynamic_loader(&maps(&["/usr/bin/sleep", old_ld])));
        let old_libc = "/lib/x86_64-linux-gnu/libc-2.31.so";
        assert!(!in_dynamic_loader(&maps(&[
            "/usr/bin/sleep",
            old_ld,
            old_libc
        ])));
        // libc mapped read-only, its code not yet: still loading.
        let mut loading = maps(&["/usr/bin/sleep", ld, libc]);
        loading[2].perms = *b"r--p";
        assert!(in_dynamic_loader(&loading));
        // Static programs and musl (whose loader is its libc) are not waited for.
        assert!(!in_dynamic_loader(&maps(&["/usr/bin/busybox", "[vdso]"])));
        assert!(!in_dynamic_loader(&maps(&[
            "/app",
            "/lib/ld-musl-x86_64.so.1"
        ])));
        // Inside execve: the new program and its stack, no loader and no vDSO yet (CI's
        // permissions test met it as `sleep 30 & memperf leak -p $!`).
        assert!(in_exec(&maps(&["/usr/bin/sleep", "[stack]"])));
        assert!(!in_exec(&maps(&["/usr/bin/busybox", "[stack]", "[vdso]"])));
    }

    #[test]
    fn scripts_are_probed_through_their_interpreter() {
        assert_eq!(
            script_interpreter(b"#!/bin/sh -e\necho hi\n"),
            Some(PathBuf::from("/bin/sh"))
        );
        assert_eq!(script_interpreter(b"\x7fELF"), None);
        let libc = for_command(Path::new("/bin/sh"), None).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("s.sh");
        std::fs::write(&script, "#!/bin/sh\ntrue\n").unwrap();
        assert_eq!(for_command(&script, None).unwrap(), libc);
    }

    #[test]
    fn object_names_as_bcc_takes_them() {
        assert!(is_libc("/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(is_libc("/lib/libc-2.31.so"));
        assert!(!is_libc("/lib/libcap.so.2"));
        assert!(matches_obj("/usr/lib/libjemalloc.so.2", "jemalloc"));
        assert!(matches_obj("/usr/lib/libjemalloc.so.2", "libjemalloc.so.2"));
        assert!(!matches_obj("/usr/lib/libjemalloc.so.2", "tcmalloc"));
    }

    #[test]
    fn this_processs_libc_has_the_allocator() {
        let libc = for_process(std::process::id(), None).unwrap();
        let a = load(&libc, "").unwrap();
        let names: Vec<&str> = a.sites.iter().map(|s| s.def.symbol).collect();
        for f in ["malloc", "free", "calloc", "realloc"] {
            assert!(names.contains(&f), "{names:?}");
        }
        // memalign is aligned_alloc in glibc: one probe.
        assert!(!(names.contains(&"memalign") && names.contains(&"aligned_alloc")));
        let not_elf = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(not_elf.path(), b"not an object").unwrap();
        let err = load(not_elf.path(), "").unwrap_err().to_string();
        assert!(err.contains("is not an ELF object"), "{err}");
    }
}
