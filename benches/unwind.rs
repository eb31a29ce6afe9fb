//! Unwinding throughput with a warm `Unwinders`: the stack that `fixtures/unwind_dump.c`
//! (built with `-O1 -fomit-frame-pointer`) dumps from main -> level1 -> level2 -> level3 ->
//! leaf, unwound through the executable and glibc by DWARF CFI. The frame-pointer line is the
//! cost of a walk that stops at once: this build has no frame pointers, so it yields one frame
//! (that is the point of DWARF unwinding), not a throughput to compare. Prints samples/s.
#![allow(clippy::expect_used, clippy::unwrap_used, clippy::panic)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use memperf::procfs;
use memperf::unwind::{MappingEvent, UnwindMode, UnwindOutcome, Unwinders, UserRegs};

#[path = "../src/unwind/fixture.rs"]
mod fixture;

fn warm_unwinders(dump: &fixture::Dump, mode: UnwindMode) -> (Unwinders, u32, UserRegs) {
    let pid = dump.get("pid") as u32;
    let mut u = Unwinders::new(mode);
    for m in procfs::parse_maps(&dump.maps) {
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
    let regs = UserRegs {
        ip: dump.get("ip"),
        sp: dump.get("sp"),
        bp: dump.get("bp"),
    };
    (u, pid, regs)
}

/// Unwinds for about a second and prints samples/s and frames per sample.
fn print_rate(name: &str, u: &mut Unwinders, pid: u32, regs: UserRegs, stack: &[u8]) {
    let mut frames = Vec::with_capacity(128);
    let (mut n, start) = (0u64, Instant::now());
    while start.elapsed() < Duration::from_secs(1) {
        for _ in 0..1000 {
            u.unwind(pid, regs, black_box(stack), &mut frames);
        }
        n += 1000;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    println!(
        "{name}: {rate:.0} samples/s, {} frames per sample",
        frames.len()
    );
}

fn bench_unwind(c: &mut Criterion) {
    let dump = fixture::build_and_run(true).unwrap_or_else(|e| panic!("fixture: {e}"));
    let mut group = c.benchmark_group("unwind");
    group.throughput(Throughput::Elements(1));
    for (name, mode) in [
        ("dwarf", UnwindMode::Dwarf),
        ("frame_pointer", UnwindMode::FramePointer),
    ] {
        let (mut u, pid, regs) = warm_unwinders(&dump, mode);
        let mut frames = Vec::with_capacity(128);
        let outcome = u.unwind(pid, regs, &dump.stack, &mut frames);
        if mode == UnwindMode::Dwarf {
            assert_eq!(outcome, UnwindOutcome::Complete, "{frames:x?}");
        }
        print_rate(name, &mut u, pid, regs, &dump.stack);
        group.bench_function(name, |b| {
            b.iter(|| u.unwind(pid, regs, black_box(&dump.stack), &mut frames))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_unwind);
criterion_main!(benches);
