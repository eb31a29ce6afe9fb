//! Symbolizer tests against real binaries: libc with its libc6-dbg debug file, and small
//! C and Rust programs from `fixtures/symbolize/` compiled into temp dirs.

use std::error::Error;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol};

use super::*;

type TestResult = Result<(), Box<dyn Error>>;

pub(super) const LIBC: &str = "/usr/lib/x86_64-linux-gnu/libc.so.6";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/symbolize")
        .join(name)
}

fn run(cmd: &mut Command) -> Result<(), Box<dyn Error>> {
    let out = cmd.output()?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(format!("{cmd:?} failed: {stderr}").into());
    }
    Ok(())
}

/// Compiles fixture `src` into `dir/out` with `cc` and `flags`.
fn compile_c(dir: &Path, src: &str, out: &str, flags: &[&str]) -> Result<PathBuf, Box<dyn Error>> {
    let exe = dir.join(out);
    run(Command::new("cc")
        .args(flags)
        .arg(fixture(src))
        .arg("-o")
        .arg(&exe))?;
    Ok(exe)
}

/// The SVMA of the first function symbol (symtab, then dynsym) whose name satisfies `pred`.
fn symbol_svma(path: &Path, pred: impl Fn(&str) -> bool) -> Result<u64, Box<dyn Error>> {
    let data = std::fs::read(path)?;
    let obj = object::File::parse(&*data)?;
    obj.symbols()
        .chain(obj.dynamic_symbols())
        .find(|s| s.kind() == object::SymbolKind::Text && s.name().is_ok_and(&pred))
        .map(|s| s.address())
        .ok_or_else(|| format!("no matching symbol in {}", path.display()).into())
}

/// The file offset of `svma` through the PT_LOAD segments of `path`.
fn svma_to_offset(path: &Path, svma: u64) -> Result<u64, Box<dyn Error>> {
    let data = std::fs::read(path)?;
    let obj = object::File::parse(&*data)?;
    obj.segments()
        .find_map(|s| {
            let (off, size) = s.file_range();
            let rel = svma.checked_sub(s.address())?;
            (rel < size).then_some(off + rel)
        })
        .ok_or_else(|| format!("{svma:#x} not in a segment of {}", path.display()).into())
}

/// The file offset of function `name` plus `delta`, read from `path`.
pub(super) fn func_offset(path: &Path, name: &str, delta: u64) -> Result<u64, Box<dyn Error>> {
    svma_to_offset(path, symbol_svma(path, |n| n == name)? + delta)
}

pub(super) fn key(path: &Path) -> ModuleKey<'_> {
    ModuleKey {
        path: path.as_os_str().as_bytes(),
        build_id: None,
        pid: None,
    }
}

pub(super) fn opts(inline: bool, lines: bool, demangle: bool) -> SymbolizeOptions {
    SymbolizeOptions {
        inline,
        lines,
        demangle,
    }
}

fn outer(s: &Symbolized) -> Option<&Frame> {
    s.frames.last()
}

pub(super) fn outer_name(s: &Symbolized) -> Option<&str> {
    outer(s).and_then(|f| f.name.as_deref())
}

/// The function name `addr2line -f` (binutils, which perf runs) gives for `svma`.
fn addr2line_name(path: &Path, svma: u64) -> Result<String, Box<dyn Error>> {
    let out = Command::new("addr2line")
        .arg("-f")
        .arg("-e")
        .arg(path)
        .arg(format!("{svma:#x}"))
        .output()?;
    let text = String::from_utf8(out.stdout)?;
    let name = text.lines().next().ok_or("addr2line printed nothing")?;
    if !out.status.success() || name == "??" {
        return Err(format!("addr2line has no name for {svma:#x} in {}", path.display()).into());
    }
    Ok(name.to_owned())
}

/// Issue: memperf printed `__libc_start_main@@GLIBC_2.34` and `__default_morecore@GLIBC_2.2.5`
/// where perf prints the function's DWARF name.
#[test]
fn libc_names_carry_no_symbol_version_and_are_perfs() -> TestResult {
    let libc = Path::new(LIBC);
    let mut s = Symbolizer::new(opts(false, false, false));
    let mut name_of = |svma: u64| -> Result<Option<String>, Box<dyn Error>> {
        let at = crate::stacks::CodeAddr::new(svma_to_offset(libc, svma)?, false);
        Ok(outer_name(&s.symbolize(&key(libc), at)).map(str::to_owned))
    };
    // Exported only under versions: named as DWARF names the function.
    for exported in ["__libc_start_main", "__default_morecore"] {
        let svma = symbol_svma(libc, |n| n == exported)?;
        let name = name_of(svma + 1)?;
        assert_eq!(name, Some(addr2line_name(libc, svma + 1)?), "{exported}");
        assert!(name.is_some_and(|n| !n.contains('@')));
    }
    // An unversioned global alias beats a versioned one (`cfree@GLIBC_2.2.5`), without DWARF.
    let free = symbol_svma(libc, |n| n == "free")?;
    assert_eq!(name_of(free)?.as_deref(), Some("free"));
    // No name of any exported function carries a version.
    let data = std::fs::read(libc)?;
    let obj = object::File::parse(&*data)?;
    let mut named = 0;
    for sym in obj.dynamic_symbols() {
        if sym.kind() != object::SymbolKind::Text || sym.is_undefined() {
            continue;
        }
        if let Some(name) = name_of(sym.address())? {
            assert!(!name.contains('@'), "{name} at {:#x}", sym.address());
            named += 1;
        }
    }
    assert!(named > 1000, "only {named} functions named");
    Ok(())
}

/// Every PLT entry (`.plt`, `.plt.sec`, `.plt.got`) is `NAME@plt` with the name `objdump -d`
/// gives it, and an IRELATIVE's (objdump's `*ABS*+0xADDR@plt`) is the IFUNC's at ADDR: they
/// were `@plt`, or named after another entry's relocation, since `.rela.plt` lists the
/// IRELATIVEs after the others while their entries lie among them. The header is `.plt`.
fn assert_plt_names_are_objdumps(path: &Path) -> TestResult {
    let out = Command::new("objdump")
        .args(["-d", "-j", ".plt", "-j", ".plt.sec", "-j", ".plt.got"])
        .arg(path)
        .output()?;
    let text = String::from_utf8(out.stdout)?;
    let data = std::fs::read(path)?;
    let obj = object::File::parse(&*data)?;
    let plt = obj.section_by_name(".plt").ok_or("no .plt")?.address();
    let mut s = Symbolizer::new(opts(false, false, false));
    let mut checked = Vec::new();
    for line in text.lines() {
        let Some((addr, label)) = line.strip_suffix(">:").and_then(|l| l.split_once(" <")) else {
            continue;
        };
        let addr = u64::from_str_radix(addr, 16)?;
        let want: Vec<String> = match label.strip_prefix("*ABS*+0x") {
            _ if addr == plt => vec![".plt".into()],
            Some(ifunc) => ifunc_names(
                &obj,
                u64::from_str_radix(ifunc.trim_end_matches("@plt"), 16)?,
            ),
            None if label.ends_with("@plt") => vec![label.into()],
            None => continue,
        };
        let at = crate::stacks::CodeAddr::new(svma_to_offset(path, addr + 4)?, false);
        let r = s.symbolize(&key(path), at);
        let got = outer_name(&r).ok_or_else(|| format!("{addr:#x} <{label}> unnamed: {r:?}"))?;
        assert!(
            want.iter().any(|w| w == got),
            "{}: {addr:#x} <{label}> named {got}, want one of {want:?}",
            path.display()
        );
        assert_eq!(outer(&r).and_then(|f| f.sym_offset), Some(4));
        checked.push(got.to_owned());
    }
    assert!(
        checked.len() > 1,
        "{}: no PLT entry checked in {text}",
        path.display()
    );
    Ok(())
}

/// `NAME@plt` for each IFUNC symbol at `svma`.
fn ifunc_names(obj: &object::File<'_>, svma: u64) -> Vec<String> {
    obj.symbols()
        .chain(obj.dynamic_symbols())
        .filter(|s| s.address() == svma)
        .filter(|s| matches!(s.flags(), object::SymbolFlags::Elf { st_info, .. } if st_info & 0xf == object::elf::STT_GNU_IFUNC))
        .filter_map(|s| s.name().ok().map(|n| format!("{}@plt", elf::strip_version(n).0)))
        .collect()
}

#[test]
fn libc_plt_entries_are_not_named_after_another_entrys_relocation() -> TestResult {
    assert_plt_names_are_objdumps(Path::new(LIBC))
}

/// A program calling an IFUNC of its own (an IRELATIVE in `.rela.plt`, listed first), libc
/// functions through `.plt` or `.plt.sec`, and one whose address it also takes (`.plt.got`),
/// linked lazily and with `-z now`, with and without IBT's `.plt.sec`.
#[test]
fn plt_got_plt_sec_and_irelative_entries_are_named() -> TestResult {
    let dir = tempfile::tempdir()?;
    let flavours: [(&str, &[&str]); 4] = [
        ("lazy", &[]),
        ("now", &["-Wl,-z,now"]),
        ("ibt", &["-fcf-protection=full", "-Wl,-z,ibtplt"]),
        (
            "ibtnow",
            &["-fcf-protection=full", "-Wl,-z,ibtplt", "-Wl,-z,now"],
        ),
    ];
    for (name, flags) in flavours {
        let mut all = vec!["-O1"];
        all.extend_from_slice(flags);
        let exe = compile_c(dir.path(), "plt.c", name, &all)?;
        assert_plt_names_are_objdumps(&exe)?;
        let data = std::fs::read(&exe)?;
        let obj = object::File::parse(&*data)?;
        let names: Vec<Box<str>> = plt::plt_symbols(&obj).into_iter().map(|s| s.name).collect();
        for want in [
            "chosen@plt",
            "strlen@plt",
            "printf@plt",
            "puts@plt",
            "__cxa_finalize@plt",
        ] {
            assert!(
                names.iter().any(|n| &**n == want),
                "{name}: no {want} in {names:?}"
            );
        }
    }
    Ok(())
}

fn build_id_of(path: &Path) -> Result<Vec<u8>, Box<dyn Error>> {
    let data = std::fs::read(path)?;
    let obj = object::File::parse(&*data)?;
    elf::build_id(&obj).ok_or_else(|| format!("{} has no build-id", path.display()).into())
}

#[test]
fn symbolizer_can_move_to_another_thread() {
    fn assert_send<T: Send>() {}
    assert_send::<Symbolizer>();
}

#[test]
fn libc_malloc_is_named_from_the_build_id_debug_file() -> TestResult {
    let libc = Path::new(LIBC);
    let off = func_offset(libc, "malloc", 4)?;
    let mut s = Symbolizer::new(opts(false, true, true));
    let r = s.symbolize(&key(libc), crate::stacks::CodeAddr::new(off, false));
    let f = outer(&r).ok_or("no frame")?;
    // With DWARF loaded, the name is DWARF's, as perf and `addr2line -f` print it.
    let svma = symbol_svma(libc, |n| n == "malloc")?;
    assert_eq!(f.name, Some(addr2line_name(libc, svma + 4)?), "{r:?}");
    assert_eq!(f.sym_offset, Some(4));
    assert_eq!(r.unknown, None);
    let file = f.file.as_deref().ok_or("no file")?;
    assert!(file.ends_with("malloc.c"), "{file}");
    assert!(f.line.is_some_and(|l| l > 0));
    let stats = s.stats();
    assert_eq!(stats.debug_files.len(), 1);
    let dbg = &stats.debug_files[0];
    assert!(
        dbg.starts_with("/usr/lib/debug/.build-id"),
        "{}",
        dbg.display()
    );
    assert_eq!(dbg.extension().and_then(|e| e.to_str()), Some("debug"));
    Ok(())
}

#[test]
fn libc_without_dwarf_options_has_no_lines_and_caches_the_module() -> TestResult {
    let libc = Path::new(LIBC);
    let id = build_id_of(libc)?;
    let off = func_offset(libc, "free", 0)?;
    let mut s = Symbolizer::new(opts(false, false, true));
    let k = ModuleKey {
        build_id: Some(&id),
        ..key(libc)
    };
    let r = s.symbolize(&k, crate::stacks::CodeAddr::new(off, false));
    assert!(
        matches!(outer_name(&r), Some("free" | "__libc_free")),
        "{r:?}"
    );
    assert_eq!(outer(&r).and_then(|f| f.file.as_deref()), None);
    let r2 = s.symbolize(&k, crate::stacks::CodeAddr::new(off + 1, true));
    assert_eq!(outer_name(&r2), outer_name(&r));
    assert_eq!(outer(&r2).and_then(|f| f.sym_offset), Some(1));
    let stats = s.stats();
    assert_eq!(
        (stats.lookups, stats.modules_loaded, stats.cache_hits),
        (2, 1, 1)
    );
    Ok(())
}

/// Builds `prog` with `-g`, splits off `prog.debug`, strips `prog` with `strip_flag`, adds
/// the debuglink, then moves the debug file to `debug_dir` (relative to the temp dir).
fn debuglink_prog(
    dir: &Path,
    strip_flag: &str,
    debug_dir: &Path,
) -> Result<(PathBuf, u64), Box<dyn Error>> {
    let prog = compile_c(dir, "debuglink.c", "prog", &["-g", "-O0"])?;
    let off = func_offset(&prog, "debuglink_target", 0)?;
    let dbg = dir.join("prog.debug");
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&prog)
        .arg(&dbg))?;
    run(Command::new("strip").arg(strip_flag).arg(&prog))?;
    run(Command::new("objcopy")
        .arg("--add-gnu-debuglink=prog.debug")
        .arg(&prog)
        .current_dir(dir))?;
    std::fs::create_dir_all(debug_dir)?;
    let target = debug_dir.join("prog.debug");
    if target != dbg {
        std::fs::rename(&dbg, &target)?;
    }
    Ok((prog, off))
}

fn assert_from_debug_file(r: &Symbolized, s: &Symbolizer, debug: &Path) {
    let f = outer(r);
    assert_eq!(
        f.and_then(|f| f.name.as_deref()),
        Some("debuglink_target"),
        "{r:?}"
    );
    let file = f.and_then(|f| f.file.as_deref()).unwrap_or("");
    assert!(file.ends_with("debuglink.c"), "{r:?}");
    assert!(f.and_then(|f| f.line).is_some(), "{r:?}");
    assert_eq!(s.stats().debug_files, vec![debug.to_path_buf()]);
}

#[test]
fn debuglink_in_the_same_directory() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let (prog, off) = debuglink_prog(tmp.path(), "-g", tmp.path())?;
    let mut s = Symbolizer::new(opts(false, true, true));
    let r = s.symbolize(&key(&prog), crate::stacks::CodeAddr::new(off, false));
    assert_from_debug_file(&r, &s, &tmp.path().join("prog.debug"));
    Ok(())
}

#[test]
fn debuglink_in_the_dot_debug_subdirectory_gives_symbols_too() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let sub = tmp.path().join(".debug");
    let (prog, off) = debuglink_prog(tmp.path(), "--strip-all", &sub)?;
    let mut s = Symbolizer::new(opts(false, true, true));
    let r = s.symbolize(&key(&prog), crate::stacks::CodeAddr::new(off, false));
    assert_from_debug_file(&r, &s, &sub.join("prog.debug"));
    Ok(())
}

#[test]
fn debuglink_under_the_global_debug_root() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let root = tmp.path().join("debugroot");
    let rel = tmp.path().strip_prefix("/")?;
    let (prog, off) = debuglink_prog(tmp.path(), "--strip-all", &root.join(rel))?;
    let mut s = Symbolizer::new(opts(false, true, true));
    s.set_debug_root(root.clone());
    let r = s.symbolize(&key(&prog), crate::stacks::CodeAddr::new(off, false));
    assert_from_debug_file(&r, &s, &root.join(rel).join("prog.debug"));
    Ok(())
}

#[test]
fn debuglink_with_a_wrong_crc_is_not_used() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let (prog, off) = debuglink_prog(tmp.path(), "--strip-all", tmp.path())?;
    let dbg = tmp.path().join("prog.debug");
    let mut bytes = std::fs::read(&dbg)?;
    bytes.push(0);
    std::fs::write(&dbg, bytes)?;
    let mut s = Symbolizer::new(opts(false, true, true));
    let r = s.symbolize(&key(&prog), crate::stacks::CodeAddr::new(off, false));
    assert_eq!(r.unknown, Some(Unknown::NoSymbol), "{r:?}");
    assert!(s.stats().debug_files.is_empty());
    Ok(())
}

#[test]
fn stripped_binary_names_come_from_dynsym_only() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let prog = compile_c(tmp.path(), "exported.c", "prog", &["-O1", "-rdynamic"])?;
    let exported = func_offset(&prog, "exported_function", 1)?;
    let helper = func_offset(&prog, "static_helper", 1)?;
    run(Command::new("strip").arg("--strip-all").arg(&prog))?;
    let mut s = Symbolizer::new(opts(false, true, true));
    let r = s.symbolize(&key(&prog), crate::stacks::CodeAddr::new(exported, false));
    assert_eq!(outer_name(&r), Some("exported_function"));
    assert_eq!(outer(&r).and_then(|f| f.file.as_deref()), None);
    let r = s.symbolize(&key(&prog), crate::stacks::CodeAddr::new(helper, false));
    assert_eq!(r.unknown, Some(Unknown::NoSymbol), "{r:?}");
    assert!(r.frames.is_empty());
    assert_eq!(s.stats().unknown.no_symbol, 1);
    Ok(())
}

#[test]
fn rust_names_are_demangled_only_when_asked() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let exe = tmp.path().join("demangle_test");
    run(Command::new("rustc")
        .args([
            "-C",
            "debuginfo=1",
            "-C",
            "opt-level=0",
            "--crate-name",
            "demangle_test",
        ])
        .arg(fixture("demangle_test.rs"))
        .arg("-o")
        .arg(&exe))?;
    let svma = symbol_svma(&exe, |n| n.contains("my_module") && n.contains("do_work"))?;
    let off = svma_to_offset(&exe, svma)?;
    let mut s = Symbolizer::new(opts(false, false, true));
    let r = s.symbolize(&key(&exe), crate::stacks::CodeAddr::new(off, false));
    let name = outer_name(&r).ok_or("no name")?;
    assert!(name.contains("my_module::do_work"), "{name}");
    assert!(
        !name.starts_with("_ZN") && !name.starts_with("_R"),
        "{name}"
    );
    let mut raw = Symbolizer::new(opts(false, false, false));
    let r = raw.symbolize(&key(&exe), crate::stacks::CodeAddr::new(off, false));
    let name = outer_name(&r).ok_or("no name")?;
    assert!(name.starts_with("_ZN") || name.starts_with("_R"), "{name}");
    Ok(())
}

#[test]
fn inline_frames_come_innermost_first() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let prog = compile_c(tmp.path(), "inline.c", "prog", &["-O2", "-g"])?;
    let data = std::fs::read(&prog)?;
    let obj = object::File::parse(&*data)?;
    let sym = obj
        .symbols()
        .find(|s| s.name() == Ok("noinline_caller"))
        .ok_or("no noinline_caller")?;
    let start = svma_to_offset(&prog, sym.address())?;
    let mut s = Symbolizer::new(opts(true, true, true));
    let found = (0..sym.size())
        .map(|d| s.symbolize(&key(&prog), crate::stacks::CodeAddr::new(start + d, false)))
        .find(|r| r.frames.len() == 2)
        .ok_or("no address with an inline frame")?;
    let [inner, caller] = &found.frames[..] else {
        return Err("expected two frames".into());
    };
    assert_eq!(inner.name.as_deref(), Some("inlined_callee"));
    assert!(inner.inlined);
    assert_eq!(caller.name.as_deref(), Some("noinline_caller"));
    assert!(!caller.inlined);
    assert!(
        caller
            .file
            .as_deref()
            .is_some_and(|f| f.ends_with("inline.c"))
    );
    // Without `inline`, the same address gives one frame: the caller.
    let mut flat = Symbolizer::new(opts(false, true, true));
    let at = start + caller.sym_offset.ok_or("no sym_offset")?;
    let r = flat.symbolize(&key(&prog), crate::stacks::CodeAddr::new(at, false));
    assert_eq!(r.frames.len(), 1);
    assert_eq!(outer_name(&r), Some("noinline_caller"));
    assert_eq!(outer(&r).and_then(|f| f.line), caller.line);
    Ok(())
}

#[test]
fn jit_map_names_and_malformed_lines() -> TestResult {
    let pid = 4_000_000_000 + std::process::id() % 1_000_000;
    let path = PathBuf::from(format!("/tmp/perf-{pid}.map"));
    std::fs::write(
        &path,
        "7f00a000 100 jitted_fn\nthis line is bad\n0x7f00b000 0x20 Interpreter::stub\n",
    )?;
    let mut s = Symbolizer::new(SymbolizeOptions::default());
    let mut jit = |pid, addr| s.symbolize_jit(pid, addr, (None, None)).map(|(f, _)| f);
    let a = jit(pid, 0x7f00a010);
    let b = jit(pid, 0x7f00b01f);
    let c = jit(pid, 0x7f00b020);
    let d = jit(pid + 1, 0x7f00a010);
    std::fs::remove_file(&path)?;
    assert_eq!(
        a.as_ref().and_then(|f| f.name.as_deref()),
        Some("jitted_fn")
    );
    assert_eq!(a.and_then(|f| f.sym_offset), Some(0x10));
    assert_eq!(b.and_then(|f| f.name), Some("Interpreter::stub".to_owned()));
    assert_eq!(c, None);
    assert_eq!(d, None);
    assert_eq!(s.stats().failures, 1);
    Ok(())
}

#[test]
fn kernel_symbols_and_hidden_kallsyms() {
    let mut s = Symbolizer::new(SymbolizeOptions::default());
    s.set_kallsyms(Kallsyms::from_text(
        "ffffffff81000000 T _stext\nffffffff81000100 T do_sys_open\n",
    ));
    let r = s.symbolize_kernel(crate::stacks::CodeAddr::new(0xffffffff81000105, true));
    assert_eq!(outer_name(&r), Some("do_sys_open"));
    assert_eq!(outer(&r).and_then(|f| f.sym_offset), Some(5));
    // A return address right after the first symbol's last byte belongs to that symbol.
    assert_eq!(
        outer_name(&s.symbolize_kernel(crate::stacks::CodeAddr::new(0xffffffff81000100, true))),
        Some("_stext")
    );
    assert!(!s.kernel_hidden());
    s.set_kallsyms(Kallsyms::from_text(
        "0000000000000000 T _stext\n0000000000000000 T do_sys_open\n",
    ));
    let r = s.symbolize_kernel(crate::stacks::CodeAddr::new(0xffffffff81000105, false));
    assert_eq!(r.unknown, Some(Unknown::Hidden));
    assert!(s.kernel_hidden());
    assert_eq!(s.stats().unknown.hidden, 1);
}

#[test]
fn real_proc_kallsyms_names_a_kernel_function() -> TestResult {
    let text = std::fs::read_to_string("/proc/kallsyms")?;
    let k = Kallsyms::from_text(&text);
    let mut s = Symbolizer::new(SymbolizeOptions::default());
    if k.is_hidden() {
        assert_eq!(
            s.symbolize_kernel(crate::stacks::CodeAddr::new(0xffffffff81000000, false))
                .unknown,
            Some(Unknown::Hidden)
        );
        return Ok(());
    }
    let line = text
        .lines()
        .find(|l| l.contains(" T do_sys_open") || l.contains(" T __x64_sys_openat"));
    let addr = u64::from_str_radix(
        line.and_then(|l| l.split(' ').next())
            .ok_or("no open syscall symbol")?,
        16,
    )?;
    let r = s.symbolize_kernel(crate::stacks::CodeAddr::new(addr + 1, false));
    let name = outer_name(&r).ok_or("unnamed")?;
    assert!(
        name == "do_sys_open" || name == "__x64_sys_openat",
        "{name}"
    );
    Ok(())
}

#[test]
fn replaced_binary_gives_build_id_mismatch_not_a_wrong_name() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let prog = compile_c(tmp.path(), "exported.c", "prog", &["-O1"])?;
    let off = func_offset(&prog, "exported_function", 0)?;
    let recorded = [0xab_u8; 20];
    let mut s = Symbolizer::new(opts(false, true, true));
    let k = ModuleKey {
        build_id: Some(&recorded),
        ..key(&prog)
    };
    let r = s.symbolize(&k, crate::stacks::CodeAddr::new(off, false));
    assert_eq!(r, Symbolized::unknown(Unknown::BuildIdMismatch));
    // With the file's own build-id recorded, the same lookup succeeds.
    let id = build_id_of(&prog)?;
    let k = ModuleKey {
        build_id: Some(&id),
        ..key(&prog)
    };
    assert_eq!(
        outer_name(&s.symbolize(&k, crate::stacks::CodeAddr::new(off, false))),
        Some("exported_function")
    );
    Ok(())
}

#[test]
fn replaced_libc_falls_back_to_its_debug_file_by_build_id() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let libc = Path::new(LIBC);
    let off = func_offset(libc, "malloc", 2)?;
    let id = build_id_of(libc)?;
    let other = compile_c(tmp.path(), "exported.c", "libc.so.6", &["-O1"])?;
    let mut s = Symbolizer::new(SymbolizeOptions::default());
    let k = ModuleKey {
        build_id: Some(&id),
        ..key(&other)
    };
    let r = s.symbolize(&k, crate::stacks::CodeAddr::new(off, false));
    assert!(
        matches!(outer_name(&r), Some("malloc" | "__libc_malloc")),
        "{r:?}"
    );
    Ok(())
}

#[test]
fn bad_files_are_unknown_values() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let text = tmp.path().join("text");
    std::fs::write(&text, "#!/bin/sh\necho not an elf\n")?;
    let truncated = tmp.path().join("truncated.so");
    std::fs::write(&truncated, &std::fs::read(LIBC)?[..300])?;
    let mut s = Symbolizer::new(opts(true, true, true));
    let missing = tmp.path().join("missing");
    assert_eq!(
        s.symbolize(&key(&missing), crate::stacks::CodeAddr::new(0x1000, false))
            .unknown,
        Some(Unknown::NoFile)
    );
    assert_eq!(
        s.symbolize(&key(&text), crate::stacks::CodeAddr::new(0x10, false))
            .unknown,
        Some(Unknown::NotElf)
    );
    assert_eq!(
        s.symbolize(&key(&truncated), crate::stacks::CodeAddr::new(0x100, true))
            .unknown,
        Some(Unknown::NotElf)
    );
    assert_eq!(
        s.symbolize(
            &key(Path::new("[vdso]")),
            crate::stacks::CodeAddr::new(0x100, true)
        )
        .unknown,
        Some(Unknown::NoFile)
    );
    let libc = Path::new(LIBC);
    assert_eq!(
        s.symbolize(&key(libc), crate::stacks::CodeAddr::new(u64::MAX, true))
            .unknown,
        Some(Unknown::NoSymbol)
    );
    let u = s.stats().unknown;
    assert_eq!((u.no_file, u.not_elf, u.no_symbol), (2, 2, 1));
    Ok(())
}

#[test]
fn pid_root_prefix_is_used_when_present() -> TestResult {
    let libc = Path::new(LIBC);
    let off = func_offset(libc, "malloc", 0)?;
    let mut s = Symbolizer::new(SymbolizeOptions::default());
    let k = ModuleKey {
        pid: Some(std::process::id()),
        ..key(libc)
    };
    assert!(matches!(
        outer_name(&s.symbolize(&k, crate::stacks::CodeAddr::new(off, false))),
        Some("malloc" | "__libc_malloc")
    ));
    // A pid that does not exist falls back to the plain path.
    let k = ModuleKey {
        pid: Some(4_100_000_000),
        ..key(libc)
    };
    assert!(matches!(
        outer_name(&s.symbolize(&k, crate::stacks::CodeAddr::new(off, false))),
        Some("malloc" | "__libc_malloc")
    ));
    assert_eq!(s.stats().modules_loaded, 1);
    Ok(())
}

#[test]
fn compressed_debug_sections_give_lines() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let prog = compile_c(
        tmp.path(),
        "debuglink.c",
        "prog",
        &["-g", "-gz=zlib", "-O0"],
    )?;
    let data = std::fs::read(&prog)?;
    let obj = object::File::parse(&*data)?;
    let info = obj.section_by_name(".debug_info").ok_or("no .debug_info")?;
    let compressed = info.compressed_file_range()?.format != object::CompressionFormat::None;
    assert!(compressed, "cc -gz did not compress .debug_info");
    let off = func_offset(&prog, "debuglink_target", 0)?;
    let mut s = Symbolizer::new(opts(false, true, true));
    let r = s.symbolize(&key(&prog), crate::stacks::CodeAddr::new(off, false));
    assert_eq!(outer_name(&r), Some("debuglink_target"));
    let file = outer(&r).and_then(|f| f.file.as_deref()).unwrap_or("");
    assert!(file.ends_with("debuglink.c"), "{r:?}");
    assert!(s.stats().debug_files.is_empty());
    Ok(())
}

/// Addresses inside libc's exported functions, from a fixed pseudo-random sequence.
fn libc_sample_offsets(n: usize) -> Result<Vec<u64>, Box<dyn Error>> {
    let data = std::fs::read(LIBC)?;
    let obj = object::File::parse(&*data)?;
    let funcs: Vec<(u64, u64)> = obj
        .dynamic_symbols()
        .filter(|s| s.kind() == object::SymbolKind::Text && s.size() > 0)
        .map(|s| (s.address(), s.size()))
        .collect();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut out = Vec::with_capacity(n);
    while out.len() < n && !funcs.is_empty() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let (start, size) = funcs[(x % funcs.len() as u64) as usize];
        out.push(svma_to_offset(Path::new(LIBC), start + (x >> 32) % size)?);
    }
    Ok(out)
}

/// Prints cold (first pass, module load included) and warm (second pass) lookup times.
/// Run: `cargo test --lib --release libc_lookup_speed -- --ignored --nocapture`.
#[test]
#[ignore = "timing, prints numbers only"]
fn libc_lookup_speed() -> TestResult {
    let offsets = libc_sample_offsets(20_000)?;
    let libc = Path::new(LIBC);
    for (label, o) in [
        ("symbols only", opts(false, false, true)),
        ("lines+inline", opts(true, true, true)),
    ] {
        let mut s = Symbolizer::new(o);
        let t0 = std::time::Instant::now();
        s.symbolize(&key(libc), crate::stacks::CodeAddr::new(offsets[0], false));
        let load = t0.elapsed();
        let mut named = 0;
        let mut passes = Vec::new();
        for _ in 0..2 {
            let t = std::time::Instant::now();
            for &off in &offsets {
                named += usize::from(
                    s.symbolize(&key(libc), crate::stacks::CodeAddr::new(off, false))
                        .unknown
                        .is_none(),
                );
            }
            passes.push(t.elapsed().as_secs_f64() * 1e6 / offsets.len() as f64);
        }
        println!(
            "{label}: load {load:?}, cold {:.2} us/addr, warm {:.2} us/addr, named {named}/{}",
            passes[0],
            passes[1],
            2 * offsets.len()
        );
    }
    Ok(())
}

/// The report's convention end to end: an AVMA in this process's libc mapping becomes
/// `avma − start + pgoff` and is symbolized with the process's pid.
#[test]
fn live_avma_through_proc_maps_names_malloc() -> TestResult {
    let avma = libc::malloc as *const () as u64;
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    let (path, off) = maps
        .lines()
        .find_map(|l| {
            let mut f = l.split_ascii_whitespace();
            let (lo, hi) = f.next()?.split_once('-')?;
            let (lo, hi) = (
                u64::from_str_radix(lo, 16).ok()?,
                u64::from_str_radix(hi, 16).ok()?,
            );
            let pgoff = u64::from_str_radix(f.nth(1)?, 16).ok()?;
            let path = f.nth(2)?;
            (lo <= avma && avma < hi).then(|| (path.to_owned(), avma - lo + pgoff))
        })
        .ok_or("malloc's address is in no mapping")?;
    let mut s = Symbolizer::new(SymbolizeOptions::default());
    let k = ModuleKey {
        path: path.as_bytes(),
        build_id: None,
        pid: Some(std::process::id()),
    };
    let r = s.symbolize(&k, crate::stacks::CodeAddr::new(off, false));
    assert!(
        matches!(outer_name(&r), Some("malloc" | "__libc_malloc")),
        "{path}: {r:?}"
    );
    assert_eq!(outer(&r).and_then(|f| f.sym_offset), Some(0));
    Ok(())
}

#[test]
fn notype_labels_in_code_are_named() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let prog = compile_c(tmp.path(), "asm_label.c", "prog", &["-O1"])?;
    let data = std::fs::read(&prog)?;
    let obj = object::File::parse(&*data)?;
    let label = obj
        .symbols()
        .find(|s| s.name() == Ok("asm_label"))
        .ok_or("no asm_label symbol")?;
    assert_eq!(label.kind(), object::SymbolKind::Unknown, "NOTYPE expected");
    let offset = svma_to_offset(&prog, label.address() + 1)?;
    let mut s = Symbolizer::new(opts(false, false, true));
    let r = s.symbolize(&key(&prog), crate::stacks::CodeAddr::new(offset, false));
    assert_eq!(outer_name(&r), Some("asm_label"), "{r:?}");
    Ok(())
}
