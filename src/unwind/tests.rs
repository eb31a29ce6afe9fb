//! Unwinding real stacks: the C fixture's dump (both frame-pointer variants), this test
//! process's own mappings, and the failure paths.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use object::{Object, ObjectSymbol, SymbolKind};

use super::fixture::{Dump, build_and_run};
use super::process::{PathKind, path_kind};
use super::*;
use crate::procfs;

const LIBC: &str = "/lib/x86_64-linux-gnu/libc.so.6";

fn feed_maps(u: &mut Unwinders, pid: u32, maps: &[u8]) {
    for m in procfs::parse_maps(maps) {
        u.handle_mmap(&MappingEvent {
            pid,
            start: m.start,
            len: m.end - m.start,
            pgoff: m.pgoff,
            exec: m.is_exec(),
            path: &m.path,
            dev_ino: Some((m.dev_major, m.dev_minor, m.inode)),
            build_id: None,
        });
    }
}

/// Text symbols of an ELF file: (name, address, size).
fn text_symbols(path: &Path, dynamic: bool) -> Vec<(String, u64, u64)> {
    let data = std::fs::read(path).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    let syms: Vec<_> = if dynamic {
        obj.dynamic_symbols().collect()
    } else {
        obj.symbols().collect()
    };
    syms.into_iter()
        .filter(|s| s.kind() == SymbolKind::Text)
        .filter_map(|s| Some((s.name().ok()?.to_string(), s.address(), s.size())))
        .collect()
}

fn symbol_address(syms: &[(String, u64, u64)], name: &str) -> u64 {
    syms.iter()
        .find(|s| s.0 == name)
        .unwrap_or_else(|| panic!("no symbol {name}"))
        .1
}

fn run_fixture(omit_frame_pointer: bool) -> (Dump, UserRegs) {
    let dump = build_and_run(omit_frame_pointer).unwrap_or_else(|e| panic!("fixture: {e}"));
    let regs = UserRegs {
        ip: dump.get("ip"),
        sp: dump.get("sp"),
        bp: dump.get("bp"),
    };
    (dump, regs)
}

fn unwinders_for(dump: &Dump, mode: UnwindMode) -> (Unwinders, u32) {
    let pid = dump.get("pid") as u32;
    let mut u = Unwinders::new(mode);
    feed_maps(&mut u, pid, &dump.maps);
    (u, pid)
}

/// Names of the frames that fall inside the fixture executable, resolved with its symbol
/// table and a bias taken from the address of `main` the fixture printed (independent of
/// the unwinder's own bias computation). Return addresses are looked up at ra - 1.
fn exe_frame_names(dump: &Dump, frames: &[u64]) -> Vec<String> {
    let syms = text_symbols(&dump.exe, false);
    let bias = dump.get("main").wrapping_sub(symbol_address(&syms, "main"));
    frames
        .iter()
        .enumerate()
        .filter_map(|(i, &a)| {
            let svma = if i == 0 { a } else { a - 1 }.wrapping_sub(bias);
            syms.iter()
                .find(|s| s.1 <= svma && svma < s.1 + s.2.max(1))
                .map(|s| s.0.clone())
        })
        .collect()
}

#[test]
fn dwarf_unwinds_fixture_with_and_without_frame_pointers() {
    for omit in [false, true] {
        let (dump, regs) = run_fixture(omit);
        let (mut u, pid) = unwinders_for(&dump, UnwindMode::Dwarf);
        let mut frames = Vec::new();
        let outcome = u.unwind(pid, regs, &dump.stack, &mut frames);
        assert_eq!(
            outcome,
            UnwindOutcome::Complete,
            "omit={omit} frames={frames:x?}"
        );
        assert_eq!(frames[0], regs.ip);
        let names = exe_frame_names(&dump, &frames);
        assert_eq!(
            names,
            ["leaf", "level3", "level2", "level1", "main", "_start"],
            "omit={omit}"
        );
        // Between main and _start: glibc's __libc_start_call_main & co, unwound by CFI.
        let in_libc = frames
            .iter()
            .filter(|&&a| {
                u.module_of(pid, a)
                    .is_some_and(|m| m.path.ends_with("libc.so.6"))
            })
            .count();
        assert!(in_libc >= 1, "omit={omit} frames={frames:x?}");
        assert_eq!(frames.len(), 6 + in_libc);
        let stats = u.stats();
        assert_eq!(
            (stats.samples, stats.complete, stats.truncated.total()),
            (1, 1, 0)
        );
        assert!(stats.modules_loaded >= 3, "{stats:?}"); // exe, libc, ld.so
        assert_eq!(stats.elf_load_failures, 0, "{stats:?}");
    }
}

#[test]
fn frame_pointer_mode_needs_frame_pointers() {
    let (dump, regs) = run_fixture(false);
    let (mut u, pid) = unwinders_for(&dump, UnwindMode::FramePointer);
    let mut frames = Vec::new();
    u.unwind(pid, regs, &dump.stack, &mut frames);
    let names = exe_frame_names(&dump, &frames);
    assert_eq!(names[..5], ["leaf", "level3", "level2", "level1", "main"]);

    let (dump, regs) = run_fixture(true);
    let (mut fp, pid) = unwinders_for(&dump, UnwindMode::FramePointer);
    let outcome = fp.unwind(pid, regs, &dump.stack, &mut frames);
    let fp_names = exe_frame_names(&dump, &frames);
    assert!(
        matches!(outcome, UnwindOutcome::Truncated(_)),
        "{fp_names:?}"
    );
    let chain = ["level3", "level2", "level1"].map(String::from);
    assert!(!fp_names.windows(3).any(|w| w == chain), "{fp_names:?}");
    let (mut dwarf, _) = unwinders_for(&dump, UnwindMode::Dwarf);
    let mut dwarf_frames = Vec::new();
    dwarf.unwind(pid, regs, &dump.stack, &mut dwarf_frames);
    assert!(frames.len() < dwarf_frames.len());
}

#[test]
fn fixture_libc_address_maps_back_to_malloc() {
    let (dump, _) = run_fixture(true);
    let (u, pid) = unwinders_for(&dump, UnwindMode::Dwarf);
    let malloc = dump.get("malloc");
    let m = u.module_of(pid, malloc).expect("malloc is in a module");
    assert!(m.path.ends_with("libc.so.6"), "{m:?}");
    let want = symbol_address(&text_symbols(Path::new(LIBC), true), "malloc");
    assert_eq!(m.svma(malloc), Some(want));
    assert_eq!(m.build_id.map(<[u8]>::len), Some(20));
}

#[inline(never)]
fn bias_marker_function() -> u64 {
    std::hint::black_box(42)
}

#[test]
fn bias_maps_own_code_and_libc_back_to_symbols() {
    let me = std::process::id();
    let mut u = Unwinders::new(UnwindMode::Dwarf);
    feed_maps(&mut u, me, &std::fs::read("/proc/self/maps").unwrap());
    assert_eq!(bias_marker_function(), 42);

    let here = bias_marker_function as fn() -> u64 as usize as u64;
    let m = u.module_of(me, here).expect("own code is mapped");
    let exe = std::fs::read_link("/proc/self/exe").unwrap();
    let sym = text_symbols(&exe, false)
        .into_iter()
        .find(|s| s.0.contains("bias_marker_function"))
        .expect("marker symbol");
    assert_eq!(m.svma(here), Some(sym.1));

    let malloc = libc::malloc as *const () as usize as u64;
    let m = u.module_of(me, malloc).expect("libc is mapped");
    let want = symbol_address(&text_symbols(Path::new(LIBC), true), "malloc");
    assert_eq!(m.svma(malloc), Some(want));
}

#[test]
fn short_stack_copy_truncates_at_stack_end() {
    let (dump, regs) = run_fixture(true);
    let (mut u, pid) = unwinders_for(&dump, UnwindMode::Dwarf);
    let mut frames = Vec::new();
    let outcome = u.unwind(pid, regs, &dump.stack[..40], &mut frames);
    assert_eq!(
        outcome,
        UnwindOutcome::Truncated(TruncReason::StackEnd),
        "{frames:x?}"
    );
    assert!(!frames.is_empty() && frames[0] == regs.ip);

    let outcome = u.unwind(pid + 1, regs, &dump.stack, &mut frames);
    assert_eq!(outcome, UnwindOutcome::Truncated(TruncReason::NoProcess));
    assert_eq!(frames[0], regs.ip);
    let stats = u.stats();
    assert_eq!((stats.samples, stats.truncated.total()), (2, 2));
    assert_eq!(
        stats.truncated.to_string(),
        "1 unknown process, 1 stack end"
    );
}

#[test]
fn max_depth_stops_at_127_frames() {
    // A frame-pointer chain of 200 frames: at sp + 16 i: saved bp = sp + 16 (i + 1), ra.
    let sp = 0x7000_0000u64;
    let mut stack = Vec::new();
    for i in 0..200u64 {
        stack.extend_from_slice(&(sp + 16 * (i + 1)).to_ne_bytes());
        stack.extend_from_slice(&(0x40_0000 + i).to_ne_bytes());
    }
    let mut u = Unwinders::new(UnwindMode::FramePointer);
    u.handle_exec(1);
    let mut frames = Vec::new();
    let outcome = u.unwind(
        1,
        UserRegs {
            ip: 0x40_1000,
            sp,
            bp: sp,
        },
        &stack,
        &mut frames,
    );
    assert_eq!(outcome, UnwindOutcome::Truncated(TruncReason::MaxDepth));
    assert_eq!(frames.len(), MAX_FRAMES);
}

fn exec_event(pid: u32, start: u64, path: &[u8]) -> MappingEvent<'_> {
    MappingEvent {
        pid,
        start,
        len: 0x1000,
        pgoff: 0,
        exec: true,
        path,
        dev_ino: None,
        build_id: None,
    }
}

#[test]
fn unusable_mappings_are_counted_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.sh");
    std::fs::write(&script, b"#!/bin/sh\nexit 0\n").unwrap();
    let script = script.as_os_str().as_bytes().to_vec();
    let mut u = Unwinders::new(UnwindMode::Dwarf);
    u.handle_mmap(&exec_event(7, 0x10000, b"/nonexistent/memperf/lib.so"));
    u.handle_mmap(&exec_event(7, 0x20000, &script));
    u.handle_mmap(&exec_event(7, 0x30000, b"[vdso]"));
    u.handle_mmap(&exec_event(7, 0x40000, b"//anon"));
    u.handle_mmap(&exec_event(7, 0x50000, b"/usr/lib/x.so (deleted)"));
    u.handle_mmap(&MappingEvent {
        exec: false,
        ..exec_event(7, 0x60000, LIBC.as_bytes())
    });
    let wrong_id = [0u8; 20];
    u.handle_mmap(&MappingEvent {
        build_id: Some(&wrong_id),
        ..exec_event(7, 0x70000, LIBC.as_bytes())
    });

    let s = u.stats();
    assert_eq!(s.elf_load_failures, 2, "{s:?}");
    assert_eq!(s.elf_load_failure_paths.len(), 2);
    assert_eq!(
        s.elf_load_failure_paths[0],
        Path::new("/nonexistent/memperf/lib.so")
    );
    assert_eq!(
        (s.skipped_pseudo, s.skipped_deleted, s.non_exec_ignored),
        (2, 1, 1)
    );
    assert_eq!((s.build_id_mismatches, s.modules_loaded), (1, 0));
    // The mappings are still known, without a bias; the non-exec one is not.
    let m = u.module_of(7, 0x30010).unwrap();
    assert_eq!((m.path, m.bias), (Path::new("[vdso]"), None));
    assert_eq!(
        u.module_of(7, 0x70000).unwrap().build_id,
        Some(&wrong_id[..])
    );
    assert!(u.module_of(7, 0x60000).is_none());
    // A sample whose ip is in a module without unwind info: no CFI, no frame pointer.
    let mut frames = Vec::new();
    let regs = UserRegs {
        ip: 0x10010,
        sp: 0x1000,
        bp: 0x8,
    };
    let outcome = u.unwind(7, regs, &[0u8; 64], &mut frames);
    assert_eq!(outcome, UnwindOutcome::Truncated(TruncReason::NoUnwindInfo));
    assert_eq!(frames, [0x10010]);
}

#[test]
fn overlap_replaces_and_process_events_copy_or_forget() {
    let mut u = Unwinders::new(UnwindMode::Dwarf);
    let libc_len = std::fs::metadata(LIBC).unwrap().len();
    let libc = MappingEvent {
        len: libc_len,
        ..exec_event(10, 0x7f00_0000_0000, LIBC.as_bytes())
    };
    u.handle_mmap(&libc);
    assert_eq!(u.stats().modules_loaded, 1);
    assert!(u.module_of(10, 0x7f00_0000_1000).unwrap().bias.is_some());
    // A second exec mapping over the middle of it replaces it.
    let over = MappingEvent {
        start: 0x7f00_0000_1000,
        ..exec_event(10, 0, b"[anon:jit]")
    };
    u.handle_mmap(&over);
    assert_eq!(
        u.module_of(10, 0x7f00_0000_1000).unwrap().path,
        Path::new("[anon:jit]")
    );
    assert!(u.module_of(10, 0x7f00_0000_0000).is_none());

    u.handle_mmap(&libc);
    assert_eq!(u.stats().elf_cache_hits, 1);
    u.handle_fork(11, 10);
    assert_eq!(
        u.module_of(11, 0x7f00_0000_1000).unwrap().path,
        Path::new(LIBC)
    );
    u.handle_exec(11);
    assert!(u.module_of(11, 0x7f00_0000_1000).is_none());
    assert!(u.module_of(10, 0x7f00_0000_1000).is_some());
    u.handle_exit(10);
    assert!(u.module_of(10, 0x7f00_0000_1000).is_none());
    u.handle_fork(12, 99); // unknown parent: nothing to copy
    assert!(u.module_of(12, 0x7f00_0000_1000).is_none());
}

#[test]
fn path_kinds() {
    assert_eq!(path_kind(b"/usr/lib/libc.so.6"), PathKind::File);
    assert_eq!(path_kind(b"/usr/lib/my lib.so"), PathKind::File);
    for p in [
        &b"[vdso]"[..],
        b"[heap]",
        b"//anon",
        b"anon_inode:[perf_event]",
        b"/memfd:x",
        b"",
    ] {
        assert_eq!(
            path_kind(p),
            PathKind::Pseudo,
            "{}",
            String::from_utf8_lossy(p)
        );
    }
    assert_eq!(path_kind(b"/memfd:x (deleted)"), PathKind::Deleted);
}

#[test]
fn rule_cache_is_replaced_before_framehop_generations_wrap() {
    let mut u = Unwinders::new(UnwindMode::Dwarf);
    let ev = MappingEvent {
        len: 0x1000,
        ..exec_event(5, 0x7f00_0000_0000, LIBC.as_bytes())
    };
    // The first mapping adds one module; each remapping removes one and adds one.
    let remaps = CACHE_RESET_CHANGES / 2;
    for _ in 0..remaps {
        u.handle_mmap(&ev);
    }
    assert_eq!(u.module_changes, 2 * remaps - 1);
    u.handle_mmap(&ev);
    assert_eq!(u.module_changes, 0);
    assert_eq!(u.stats().modules_loaded, u64::from(remaps) + 1);
}

/// The dynamic loader's own mappings in this process: (path, load address).
fn loader_of_this_process() -> (std::path::PathBuf, u64) {
    let maps = std::fs::read("/proc/self/maps").unwrap();
    let m = procfs::parse_maps(&maps)
        .into_iter()
        .find(|m| m.path.ends_with(b"ld-linux-x86-64.so.2") && m.pgoff == 0)
        .expect("this test runs through the dynamic loader");
    let path = std::path::PathBuf::from(String::from_utf8(m.path.clone()).unwrap());
    (path, m.start)
}

#[test]
fn a_stack_that_reaches_the_loaders_entry_point_is_complete() {
    // ld.so's `_start` (its ELF entry point) has no CFI, and past it frame pointers lead
    // nowhere (rbp is 0 from exec): that is the root of the stack, not a truncation.
    let (loader, base) = loader_of_this_process();
    let data = std::fs::read(&loader).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    let entry = base + obj.entry();
    // Any function of the loader's, sampled at its first instruction (CFA = rsp + 8), called
    // from `_start` a few bytes in, as `_start` calls `_dl_start`.
    let (_, func, _) = text_symbols(&loader, true)
        .into_iter()
        .find(|s| s.2 > 0)
        .expect("a loader function");
    let sp = 0x7fff_0000_0000u64;
    let mut stack = (entry + 8).to_ne_bytes().to_vec(); // the return address into _start
    stack.extend_from_slice(&1u64.to_ne_bytes()); // argc
    stack.extend_from_slice(&[0u8; 64]);
    let mut u = Unwinders::new(UnwindMode::Dwarf);
    let me = std::process::id();
    feed_maps(&mut u, me, &std::fs::read("/proc/self/maps").unwrap());
    let regs = UserRegs {
        ip: base + func,
        sp,
        bp: 0,
    };
    let mut frames = Vec::new();
    let outcome = u.unwind(me, regs, &stack, &mut frames);
    assert_eq!(frames, vec![base + func, entry + 8]);
    assert_eq!(outcome, UnwindOutcome::Complete);
    assert_eq!((u.stats().complete, u.stats().truncated.total()), (1, 0));
}

/// The dumped process, served as a live process's memory would be: its stack, its data
/// mappings (the GOT) and the code of the files it mapped.
struct FakeLive {
    sp: u64,
    stack: Vec<u8>,
    data: Vec<(u64, Vec<u8>)>,
    /// Executable mappings: start, end, file offset, file.
    code: Vec<(u64, u64, u64, std::path::PathBuf)>,
    /// Whether code reads as it is, or as no-ops (no call before any return address).
    call: bool,
    gone: bool,
    /// The thread's stack pointer now, as if it were blocked in a system call.
    blocked_sp: Option<u64>,
}

impl FakeLive {
    fn of(dump: &Dump, stack: Vec<u8>) -> FakeLive {
        let code = String::from_utf8_lossy(&dump.maps)
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let (range, perms, off, path) = (f.first()?, f.get(1)?, f.get(2)?, f.get(5)?);
                let (a, b) = range.split_once('-')?;
                perms.contains('x').then_some(())?;
                Some((
                    u64::from_str_radix(a, 16).ok()?,
                    u64::from_str_radix(b, 16).ok()?,
                    u64::from_str_radix(off, 16).ok()?,
                    std::path::PathBuf::from(path),
                ))
            })
            .collect();
        FakeLive {
            sp: dump.get("sp"),
            stack,
            data: dump.data.clone(),
            code,
            call: true,
            gone: false,
            blocked_sp: None,
        }
    }

    fn byte(&self, addr: u64) -> u8 {
        if let Some((start, bytes)) = self
            .data
            .iter()
            .find(|(s, b)| addr >= *s && addr - s < b.len() as u64)
        {
            return bytes[(addr - start) as usize];
        }
        // Pages past the dump read as zeros, as the unused top of a stack would.
        let at = addr.checked_sub(self.sp).map(|o| o as usize);
        at.and_then(|o| self.stack.get(o)).copied().unwrap_or(0)
    }
}

impl LiveMemory for FakeLive {
    fn read(&mut self, _pid: u32, addr: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.gone {
            return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        }
        for (i, b) in buf.iter_mut().enumerate() {
            *b = self.byte(addr + i as u64);
        }
        Ok(buf.len())
    }

    fn code(&mut self, _pid: u32, start: u64, _site: CodeSite) -> Option<[u8; 16]> {
        if !self.call {
            return Some([0x90; 16]);
        }
        let (m_start, _, off, path) = self
            .code
            .iter()
            .find(|(s, e, _, _)| start >= *s && start + 16 <= *e)?;
        let bytes = std::fs::read(path).ok()?;
        let at = usize::try_from(start - m_start + off).ok()?;
        bytes.get(at..at + 16)?.try_into().ok()
    }

    fn thread_now(&mut self, _pid: u32, _tid: u32) -> super::live::ThreadNow {
        self.blocked_sp.map_or(
            super::live::ThreadNow::Running,
            super::live::ThreadNow::Blocked,
        )
    }
}

fn live_unwind(call: bool, gone: bool) -> (Vec<u64>, Vec<u64>, UnwindOutcome, Unwinders) {
    let (dump, regs) = run_fixture(true);
    let (mut u, pid) = unwinders_for(&dump, UnwindMode::Dwarf);
    let mut whole = Vec::new();
    assert_eq!(
        u.unwind(pid, regs, &dump.stack, &mut whole),
        UnwindOutcome::Complete
    );
    let mut u = unwinders_for(&dump, UnwindMode::Dwarf).0;
    u.set_live(Some(Box::new(FakeLive {
        call,
        gone,
        ..FakeLive::of(&dump, dump.stack.clone())
    })));
    let mut frames = Vec::new();
    let outcome = u.unwind(pid, regs, &dump.stack[..40], &mut frames);
    (whole, frames, outcome, u)
}

#[test]
fn a_short_copy_is_finished_from_the_live_process() {
    let (whole, frames, outcome, u) = live_unwind(true, false);
    assert_eq!(outcome, UnwindOutcome::Complete, "{frames:x?}");
    assert_eq!(frames, whole);
    let first = u.last_recovered().expect("frames were recovered");
    assert!(first >= 1 && first < frames.len(), "{first}");
    assert!(u.last_past_copy());
    let s = u.stats();
    assert_eq!((s.complete, s.truncated.total()), (1, 0));
    assert_eq!((s.cut_at_copy_end, s.recovered), (1, 1));
    assert_eq!(s.recovered_frames, (frames.len() - first) as u64);
    // It needed more than the 40 bytes it had, and no more than the whole dump.
    assert!(s.copy_needed_max > 40 && s.copy_needed_max <= whole.len() as u64 * 4096);
}

#[test]
fn recovered_frames_not_after_a_call_are_dropped() {
    let (whole, frames, outcome, u) = live_unwind(false, false);
    assert_eq!(outcome, UnwindOutcome::Truncated(TruncReason::StackEnd));
    // What the copy alone gives: a prefix of the whole stack, short of it.
    assert!(!frames.is_empty() && frames.len() < whole.len());
    assert_eq!(frames[..], whole[..frames.len()]);
    assert_eq!(u.last_recovered(), None);
    let s = u.stats();
    assert_eq!(
        (s.recovered, s.recovery_rejected, s.recovery_unreadable),
        (0, 1, 0)
    );
    assert_eq!(s.rejected.not_a_call, 1);
    assert_eq!(s.truncated.stack_end, 1);
}

/// Every call of the fixture's stack is confirmed against its callee: the direct calls of
/// main -> level1 -> ... -> leaf, `_start`'s call through the GOT, and the one indirect call
/// (`__libc_start_call_main` calls main through a register).
#[test]
fn recovered_calls_are_confirmed_against_their_callees() {
    let (_, frames, outcome, u) = live_unwind(true, false);
    assert_eq!(outcome, UnwindOutcome::Complete);
    let s = u.stats();
    assert_eq!(
        s.recovered_confirmed + s.recovered_indirect,
        s.recovered_frames
    );
    assert!(s.recovered_confirmed >= 4, "{s:?} {frames:x?}");
    assert!(s.recovered_indirect <= 1, "{s:?}");
}

/// The thread left the frames just below the cut after the sample (the live stack no longer
/// holds what the kernel copied there): what was read past the copy may be of a later
/// moment, and is dropped.
#[test]
fn frames_past_a_copy_whose_top_changed_are_dropped() {
    let (dump, regs) = run_fixture(true);
    let (mut u, pid) = unwinders_for(&dump, UnwindMode::Dwarf);
    let mut live = dump.stack.clone();
    for b in &mut live[..40] {
        *b ^= 0x5a;
    }
    u.set_live(Some(Box::new(FakeLive::of(&dump, live))));
    let mut frames = Vec::new();
    let outcome = u.unwind(pid, regs, &dump.stack[..40], &mut frames);
    assert_eq!(outcome, UnwindOutcome::Truncated(TruncReason::StackEnd));
    assert_eq!(u.last_recovered(), None);
    let s = u.stats();
    assert_eq!((s.recovered, s.recovery_rejected), (0, 1));
    assert_eq!(s.rejected.copy_changed, 1, "{s:?}");
}

#[test]
fn a_process_gone_leaves_the_copy_frames() {
    let (whole, frames, outcome, u) = live_unwind(true, true);
    assert_eq!(outcome, UnwindOutcome::Truncated(TruncReason::StackEnd));
    assert_eq!(frames[..], whole[..frames.len()]);
    let s = u.stats();
    assert_eq!(
        (s.recovered, s.recovery_rejected, s.recovery_unreadable),
        (0, 0, 1)
    );
}

/// A thread that moved on after the sample: past the copy, its stack no longer holds the
/// sampled frames (zeros here, as a stack's unused top). A walk that ends there with no
/// frame found past the copy did not finish the stack: it stays truncated.
#[test]
fn a_walk_that_finds_no_frame_past_the_copy_is_not_finished() {
    let (dump, regs) = run_fixture(true);
    let (mut u, pid) = unwinders_for(&dump, UnwindMode::Dwarf);
    u.set_live(Some(Box::new(FakeLive::of(
        &dump,
        dump.stack[..40].to_vec(),
    ))));
    let mut frames = Vec::new();
    let outcome = u.unwind(pid, regs, &dump.stack[..40], &mut frames);
    assert_eq!(
        outcome,
        UnwindOutcome::Truncated(TruncReason::StackEnd),
        "{frames:x?}"
    );
    assert_eq!(u.last_recovered(), None);
    let s = u.stats();
    assert_eq!(
        (s.recovered, s.recovered_frames, s.recovery_rejected),
        (0, 0, 1)
    );
    assert_eq!(s.cut_unmeasured, 1);
}

#[test]
fn copy_size_suggestions_cover_the_deepest_need() {
    let mut s = UnwindStats::default();
    assert_eq!(s.copy_size_needed(), None);
    for need in [9000, 12000, 20500] {
        s.copy_needed_max = s.copy_needed_max.max(need);
    }
    assert_eq!(s.copy_size_needed(), Some(21504));
    s.copy_needed_max = 65000;
    assert_eq!(s.copy_size_needed(), Some(65528));
    s.copy_needed_max = 70000;
    assert_eq!(s.copy_size_needed(), None);
}

/// A thread blocked now with its stack pointer above the cut returned from the frames the
/// copy ends in: what was read past the copy may be of a later moment. One still below it
/// (in the sampled frames, or deeper) keeps them.
#[test]
fn a_thread_blocked_above_the_cut_has_moved_on() {
    let (dump, regs) = run_fixture(true);
    for (sp_now, kept) in [(regs.sp - 256, true), (regs.sp + 40, false)] {
        let (mut u, pid) = unwinders_for(&dump, UnwindMode::Dwarf);
        u.set_live(Some(Box::new(FakeLive {
            blocked_sp: Some(sp_now),
            ..FakeLive::of(&dump, dump.stack.clone())
        })));
        let mut frames = Vec::new();
        u.unwind(pid, regs, &dump.stack[..40], &mut frames);
        let s = u.stats();
        assert_eq!(
            (s.recovered, s.rejected.moved_on),
            (u64::from(kept), u64::from(!kept)),
            "{sp_now:x}: {s:?}"
        );
    }
}

/// A copy that ends inside `main`'s frame, just short of its return address: the call past
/// the cut goes through a register (`__libc_start_call_main`'s `call *%rax`), which ties
/// nothing to the copy, except that its callee is the `main` the fixture's `_start` names
/// (`unwind::entry`), whose caller never changes. The stack is finished to `_start`.
#[test]
fn a_cut_in_mains_frame_is_finished_through_the_c_librarys_register_call() {
    let (dump, regs) = run_fixture(true);
    let (mut u, pid) = unwinders_for(&dump, UnwindMode::Dwarf);
    let mut whole = Vec::new();
    assert_eq!(
        u.unwind(pid, regs, &dump.stack, &mut whole),
        UnwindOutcome::Complete
    );
    let names = exe_frame_names(&dump, &whole);
    let in_main = names.iter().position(|n| n == "main").expect("main");
    // main's return address, and the slot it sits in.
    let ra = whole[in_main + 1];
    let slot = dump
        .stack
        .chunks_exact(8)
        .position(|w| u64::from_ne_bytes(w.try_into().unwrap()) == ra)
        .expect("main's return address in the dump")
        * 8;
    let mut u = unwinders_for(&dump, UnwindMode::Dwarf).0;
    u.set_live(Some(Box::new(FakeLive::of(&dump, dump.stack.clone()))));
    let mut frames = Vec::new();
    let outcome = u.unwind(pid, regs, &dump.stack[..slot], &mut frames);
    let s = u.stats();
    assert_eq!(outcome, UnwindOutcome::Complete, "{s:?}");
    assert_eq!(frames, whole);
    assert_eq!(u.last_recovered(), Some(in_main + 1));
    assert_eq!(s.rejected.indirect_at_cut, 0);
    assert_eq!(s.recovered_indirect, 1, "{s:?}");
}

mod main_cut;

/// The samples of one drain round share what is read of the live process (all were taken
/// before the round began, so every read of the round comes after each of them); a new
/// round reads again, and without rounds each sample reads its own.
#[test]
fn the_samples_of_one_round_share_the_live_reads_and_the_next_round_reads_again() {
    let (dump, regs) = run_fixture(true);
    let walk = |u: &mut Unwinders, pid: u32| {
        let mut frames = Vec::new();
        let outcome = u.unwind(pid, regs, &dump.stack[..40], &mut frames);
        assert_eq!(outcome, UnwindOutcome::Complete, "{frames:x?}");
        frames
    };
    let (mut u, pid) = unwinders_for(&dump, UnwindMode::Dwarf);
    u.set_live(Some(Box::new(FakeLive::of(&dump, dump.stack.clone()))));
    u.begin_round();
    let first = walk(&mut u, pid);
    let once = u.round_stats();
    assert!(once.page_reads >= 1 && once.thread_reads == 1, "{once:?}");
    assert_eq!(
        (once.page_hits > 0, once.thread_hits),
        (true, 0),
        "{once:?}"
    );
    // The same stack again in the round: nothing more is read, and the frames are the same.
    assert_eq!(walk(&mut u, pid), first);
    let twice = u.round_stats();
    assert_eq!(
        (twice.page_reads, twice.thread_reads, twice.thread_hits),
        (once.page_reads, 1, 1),
        "{twice:?}"
    );
    // The next round reads the pages and the thread again.
    u.begin_round();
    assert_eq!(walk(&mut u, pid), first);
    let next = u.round_stats();
    assert_eq!(
        (next.page_reads, next.thread_reads),
        (2 * once.page_reads, 2),
        "{next:?}"
    );
    // Without rounds (a session that never begins one) each sample reads its own.
    let (mut u, pid) = unwinders_for(&dump, UnwindMode::Dwarf);
    u.set_live(Some(Box::new(FakeLive::of(&dump, dump.stack.clone()))));
    walk(&mut u, pid);
    walk(&mut u, pid);
    let own = u.round_stats();
    assert_eq!(
        (own.page_reads, own.thread_reads),
        (2 * once.page_reads, 2),
        "{own:?}"
    );
}

/// A thread's state read in a round vouches only for the pages read before it: once a page
/// is read after it (for a later sample of the thread), the state is read again, so that a
/// thread that has since blocked above the cut is seen to have moved on.
#[test]
fn a_threads_state_is_read_again_after_a_later_page() {
    struct Moving {
        now: super::live::ThreadNow,
        pages: u32,
    }
    impl LiveMemory for Moving {
        fn read(&mut self, _pid: u32, _addr: u64, buf: &mut [u8]) -> std::io::Result<usize> {
            self.pages += 1;
            Ok(buf.len())
        }
        fn code(&mut self, _pid: u32, _start: u64, _site: CodeSite) -> Option<[u8; 16]> {
            None
        }
        fn thread_now(&mut self, _pid: u32, _tid: u32) -> super::live::ThreadNow {
            self.now
        }
    }
    use super::live::ThreadNow::{Blocked, Running};
    let mut m = Moving {
        now: Running,
        pages: 0,
    };
    let mut r = super::live::RoundReads::default();
    r.begin_round();
    assert!(r.page(&mut m, 1, 0x1000).is_some());
    assert_eq!(r.thread_now(&mut m, 1, 1), Running);
    // The thread blocks higher up; a page the round already read reads nothing new, and the
    // state read after it stands.
    m.now = Blocked(0x9000);
    assert!(r.page(&mut m, 1, 0x1000).is_some());
    assert_eq!((r.thread_now(&mut m, 1, 1), m.pages), (Running, 1));
    // A page read now is of a later moment than that state: the state is read again.
    assert!(r.page(&mut m, 1, 0x2000).is_some());
    assert_eq!((r.thread_now(&mut m, 1, 1), m.pages), (Blocked(0x9000), 2));
    let s = r.stats;
    assert_eq!((s.thread_reads, s.thread_hits), (2, 1), "{s:?}");
}

mod memo;
