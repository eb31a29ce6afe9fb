//! `memperf leak` beside another tool's uprobe on the same instruction with another reference
//! counter offset. The kernel keeps one uprobe per file and offset and refuses (EINVAL) a
//! second with another counter; BCC's Python tools give every probe a random one
//! (iovisor/bcc#5236), so while memleak-bpfcc traces malloc memperf's probe there is refused
//! (benches/heap-cost.sh met it after a memleak-bpfcc that was still exiting). memperf must
//! say so, not that the kernel is too old. The tests make that other probe themselves, the
//! way BCC does (a uprobe PMU event with the counter in `config`) or as a tracefs definition,
//! on a copy of a statically linked fixture that no other process runs, and remove it on
//! every way out (an fd closed by the kernel whatever ends the test; a definition removed on
//! drop, and one a killed run left removed at the next).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::ffi::CString;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use object::{Object, ObjectSegment, ObjectSymbol};

/// The counter offset the other tool's probe carries (even: the kernel wants it aligned).
const OTHER_REF_CTR: u64 = 0x2;

/// A statically linked copy of fixtures/allocs.c in `dir`: its own malloc, in a file only
/// this test's processes map.
fn static_allocs(dir: &Path) -> PathBuf {
    let out = dir.join("clash-allocs");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/allocs.c");
    let st = Command::new("cc")
        .args(["-static", "-O2", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success(), "cc -static (libc6-dev's libc.a)");
    out
}

/// malloc's file offset in `path`, from its ELF symbol and the segment that loads it.
fn malloc_offset(path: &Path) -> u64 {
    let data = std::fs::read(path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let addr = file
        .symbols()
        .find(|s| s.name() == Ok("malloc"))
        .expect("a malloc symbol")
        .address();
    file.segments()
        .find_map(|seg| {
            let (off, size) = seg.file_range();
            (addr >= seg.address() && addr < seg.address() + size)
                .then(|| addr - seg.address() + off)
        })
        .expect("a segment holding malloc")
}

/// A uprobe opened as BCC opens its probes: an event on the uprobe PMU, its counter offset
/// in `config`'s upper half. The kernel's uprobe lives while the fd is open.
struct PmuProbe {
    _fd: OwnedFd,
}

fn open_pmu_probe(path: &Path, offset: u64, ref_ctr: u64) -> PmuProbe {
    let ty: u32 = std::fs::read_to_string("/sys/bus/event_source/devices/uprobe/type")
        .expect("the uprobe PMU (4.17+)")
        .trim()
        .parse()
        .unwrap();
    let cpath = CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut attr = perf_event_open_sys::bindings::perf_event_attr {
        type_: ty,
        size: std::mem::size_of::<perf_event_open_sys::bindings::perf_event_attr>() as u32,
        config: ref_ctr << 32,
        ..Default::default()
    };
    attr.__bindgen_anon_3.config1 = cpath.as_ptr() as u64;
    attr.__bindgen_anon_4.config2 = offset;
    // SAFETY: attr is initialized and cpath outlives the call, which copies the path.
    let fd = unsafe { perf_event_open_sys::perf_event_open(&mut attr, -1, 0, -1, 0) };
    assert!(
        fd >= 0,
        "open the other tool's uprobe: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: fd was just returned by perf_event_open and is owned by nobody else.
    PmuProbe {
        _fd: unsafe { OwnedFd::from_raw_fd(fd) },
    }
}

fn uprobe_events() -> PathBuf {
    ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .iter()
        .map(|r| Path::new(r).join("uprobe_events"))
        .find(|p| p.exists())
        .expect("tracefs with uprobe_events")
}

fn append(events: &Path, line: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(events)?;
    f.write_all(format!("{line}\n").as_bytes())
}

const TEST_GROUP: &str = "memperfclashtest_";

/// A tracefs probe of this test's own group, removed on drop.
struct Defined {
    events: PathBuf,
    event: String,
}

impl Defined {
    fn place(path: &Path, offset: u64, ref_ctr: u64) -> Defined {
        let events = uprobe_events();
        remove_stale_test_probes(&events);
        let event = format!("{TEST_GROUP}{}/clash", std::process::id());
        let line = format!("p:{event} {}:0x{offset:x}(0x{ref_ctr:x})", path.display());
        append(&events, &line).unwrap_or_else(|e| panic!("write `{line}`: {e}"));
        Defined { events, event }
    }
}

impl Drop for Defined {
    fn drop(&mut self) {
        let _ = append(&self.events, &format!("-:{}", self.event));
    }
}

/// Definitions of this test's group whose process is gone: a run killed before its drops.
fn remove_stale_test_probes(events: &Path) {
    let text = std::fs::read_to_string(events).unwrap_or_default();
    for line in text.lines() {
        let Some(event) = line
            .split_whitespace()
            .next()
            .and_then(|w| w.split_once(':'))
        else {
            continue;
        };
        let Some(pid) = event
            .1
            .strip_prefix(TEST_GROUP)
            .and_then(|r| r.split('/').next())
        else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            let _ = append(events, &format!("-:{}", event.1));
        }
    }
}

/// `memperf leak -O PROG -c PROG`: malloc's probes in the fixture itself.
fn leak_on(prog: &Path) -> Output {
    let p = prog.to_str().unwrap();
    let _turn = recording_turn();
    run_memperf(&["leak", "-O", p, "-c", p])
}

/// Probe lines of any memperf group at `offset` of `prog`: what memperf left behind.
fn memperf_probes_on(prog: &Path, offset: u64) -> Vec<String> {
    let text = std::fs::read_to_string(uprobe_events()).unwrap_or_default();
    let name = prog.to_str().unwrap();
    text.lines()
        .filter(|l| l.contains(":memperf_") || l.starts_with("p:memperf_"))
        .filter(|l| l.contains(name) && l.contains(&format!("{offset:016x}")))
        .map(str::to_string)
        .collect()
}

fn ready(what: &str) -> bool {
    if !require_perf(what) {
        return false;
    }
    if !is_root() {
        assert!(
            std::env::var("MEMPERF_REQUIRE_PERF").as_deref() != Ok("1"),
            "{what}: uprobes need root"
        );
        eprintln!("skipping {what}: uprobes need root");
        return false;
    }
    true
}

#[test]
fn another_tools_probe_with_a_reference_counter_is_named_when_the_kernel_refuses_ours() {
    if !ready("uprobe clash at open") {
        return;
    }
    let dir = scratch();
    let prog = static_allocs(dir.path());
    let offset = malloc_offset(&prog);
    let refused = {
        let _other = open_pmu_probe(&prog, offset, OTHER_REF_CTR);
        leak_on(&prog)
    };
    let err = stderr(&refused);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    // The kernel's own record of the refusal gives the other probe's counter.
    assert!(
        err.contains(&format!(
            "refused the uprobe at `{}` at 0x{offset:x} (EINVAL): another tool has a uprobe at \
             that instruction with reference counter offset 0x{OTHER_REF_CTR:x}",
            prog.display()
        )),
        "{err}"
    );
    assert!(err.contains("iovisor/bcc#5236"), "{err}");
    assert!(!err.contains("too old"), "{err}");
    assert!(memperf_probes_on(&prog, offset).is_empty());
    // Once the other probe is gone, the same run traces.
    let after = leak_on(&prog);
    assert!(after.status.success(), "{}", stderr(&after));
}

#[test]
fn another_tools_tracefs_definition_at_the_instruction_is_named() {
    if !ready("uprobe clash at definition") {
        return;
    }
    let dir = scratch();
    let prog = static_allocs(dir.path());
    let offset = malloc_offset(&prog);
    let (refused, event) = {
        let other = Defined::place(&prog, offset, OTHER_REF_CTR);
        (leak_on(&prog), other.event.clone())
    };
    let err = stderr(&refused);
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "tracefs refuses a probe at `{}` at 0x{offset:x} with no reference counter (EINVAL): \
             tracefs probe `{event}` (reference counter offset 0x{OTHER_REF_CTR:x}) is at that instruction",
            prog.display()
        )),
        "{err}"
    );
    assert!(memperf_probes_on(&prog, offset).is_empty());
    let text = std::fs::read_to_string(uprobe_events()).unwrap();
    assert!(!text.contains(&event), "the test's probe was left:\n{text}");
}
