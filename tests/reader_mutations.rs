#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Bounded, deterministic fuzzing of the perf.data reader: a real recording, mutated
//! thousands of times (flipped bytes, cut short, broken record sizes), must give errors or
//! partial results and never a panic, in the library and in `memperf report`. Both a file
//! and a pipe-mode stream (`perf record -o -`, whose header arrives as records) are mutated.
//! `fuzz/` has the open-ended libFuzzer target over the same code.

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::process::{Command, Output};

use common::*;
use memperf::perfdata::PerfDataFile;
use memperf::records::parse_record;

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Reads everything the way the report does; returns the records read.
fn read_all(bytes: Vec<u8>) -> usize {
    let Ok(file) = PerfDataFile::from_bytes(bytes) else {
        return 0;
    };
    let mut n = 0;
    for rec in file.records() {
        let Ok(rec) = rec else { break };
        let ev = file.event_for(rec.ty, rec.body);
        let info = file.parse_info(ev.unwrap_or(0));
        let _ = parse_record(rec.ty, rec.misc, rec.body, &info);
        n += 1;
    }
    n
}

fn mutate(rng: &mut Rng, orig: &[u8], offsets: &[usize]) -> Vec<u8> {
    let mut b = orig.to_vec();
    match rng.below(6) {
        0 => {
            for _ in 0..1 + rng.below(8) {
                let i = rng.below(b.len());
                b[i] ^= 1 << rng.below(8);
            }
        }
        1 => b.truncate(rng.below(orig.len())),
        2 => {
            // A record's size field set to anything.
            let at = offsets[rng.below(offsets.len())] + 6;
            let v = rng.next() as u16;
            b[at..at + 2].copy_from_slice(&v.to_ne_bytes());
        }
        3 => {
            // A header field (sizes and offsets of the sections; in a pipe-mode stream, the
            // first attr record) set to anything.
            let at = 8 * (1 + rng.below(13));
            let v = rng.next() >> rng.below(64);
            b[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        }
        4 => {
            // A record's first word set to anything: in a pipe-mode stream, the size of the
            // tracing data, a feature id or an EVENT_UPDATE type.
            let at = (offsets[rng.below(offsets.len())] + 8).min(b.len() - 8);
            let v = rng.next() >> rng.below(64);
            b[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        }
        _ => {
            // A run of garbage inside one record.
            let at = offsets[rng.below(offsets.len())] + rng.below(64);
            for i in at..(at + 1 + rng.below(32)).min(b.len()) {
                b[i] = rng.next() as u8;
            }
        }
    }
    b
}

#[test]
fn mutated_recordings_never_panic() {
    if !require_perf("a recording to mutate") {
        return;
    }
    let dir = scratch();
    let out = dir.path().join("seed.data");
    let prog = fixture("brk", Variant::NoFp);
    // Raw stacks and a tracepoint: every sample field kind the reader parses.
    record(
        &out,
        &[
            "-e",
            "page-faults,syscalls:sys_enter_brk",
            "--unwind",
            "offline",
            "--call-graph",
            "dwarf,1024",
        ],
        &prog,
        &["4"],
    );
    never_panics(dir.path(), &std::fs::read(&out).unwrap());
}

#[test]
fn mutated_pipe_streams_never_panic() {
    let what = "a pipe-mode recording to mutate";
    if !require_perf(what) || !require_perf_tool(what) {
        return;
    }
    let dir = scratch();
    let prog = fixture("brk", Variant::NoFp);
    // The same kinds of samples from perf's pipe mode, with the tracing data in the stream.
    let o = {
        let _turn = recording_turn();
        Command::new("perf")
            .args(["record", "-q", "-c", "1", "-o", "-"])
            .args(["-e", "page-faults,syscalls:sys_enter_brk"])
            .args(["--call-graph", "dwarf,1024", "--"])
            .arg(&prog)
            .arg("4")
            .output()
            .expect("run perf record")
    };
    assert!(o.status.success(), "perf record -o -: {}", stderr(&o));
    assert_eq!(
        o.stdout[8..16],
        16u64.to_ne_bytes(),
        "not a pipe-mode stream"
    );
    assert!(
        record_offsets(&o.stdout)
            .iter()
            .any(|&at| o.stdout[at] == 66),
        "no tracing data record in the stream"
    );
    never_panics(dir.path(), &o.stdout);
}

/// 3000 mutations of `orig` through the reader, and a sample of them through `memperf
/// report` (a pipe-mode stream also on standard input): errors or partial results, never a
/// panic. A mutation that panics is kept in `dir`.
fn never_panics(dir: &Path, orig: &[u8]) {
    let offsets = record_offsets(orig);
    assert!(offsets.len() > 50, "{} records", offsets.len());
    assert_eq!(read_all(orig.to_vec()), offsets.len());
    let pipe = orig[8..16] == 16u64.to_ne_bytes();

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut cli_inputs = Vec::new();
    for i in 0..3000 {
        let m = mutate(&mut rng, orig, &offsets);
        if i % 100 == 0 {
            cli_inputs.push(m.clone());
        }
        let r = catch_unwind(AssertUnwindSafe(|| read_all(m.clone())));
        if r.is_err() {
            let path = dir.join(format!("panic-{i}.data"));
            std::fs::write(&path, &m).unwrap();
            panic!(
                "mutation {i} made the reader panic; input kept at {}",
                path.display()
            );
        }
    }
    // The command line on a sample of them: a report or a clear error, never a panic.
    for (i, m) in cli_inputs.iter().enumerate() {
        let path = dir.join(format!("m{i}.data"));
        std::fs::write(&path, m).unwrap();
        for args in [
            &["report", "-q", "-i"][..],
            &["report", "-q", "--folded", "--event", "page-faults", "-i"],
        ] {
            let mut all = args.to_vec();
            all.push(path.to_str().unwrap());
            check_cli(i, &run_memperf(&all));
        }
        if pipe {
            check_cli(i, &run_memperf_stdin(&["script", "-q", "-i", "-"], m));
        }
    }
}

fn check_cli(i: usize, o: &Output) {
    let err = stderr(o);
    assert!(!err.contains("panicked"), "mutation {i}: {err}");
    assert!(
        matches!(o.status.code(), Some(0 | 2)),
        "mutation {i}: status {:?}: {err}",
        o.status
    );
}

/// One byte of a one-event recording's header: the attrs section's size cut below one
/// attr entry (0x90 → 0x80), so the file describes no event. `report` (text, folded, `--by
/// mapping`) and `script` panicked indexing the per-event counts; it is a clear error.
#[test]
fn an_attrs_section_smaller_than_one_attr_is_an_error_not_a_panic() {
    if !require_perf("a recording to mutate") {
        return;
    }
    let dir = scratch();
    let out = dir.path().join("one.data");
    let prog = fixture("brk", Variant::NoFp);
    record(&out, &["-e", "page-faults"], &prog, &["4"]);
    let mut b = std::fs::read(&out).unwrap();
    let word = |b: &[u8], at: usize| u64::from_ne_bytes(b[at..at + 8].try_into().unwrap());
    let (attr_size, attrs_size) = (word(&b, 16), word(&b, 32));
    assert!(
        attrs_size == attr_size && attr_size > 0x80,
        "{attr_size} {attrs_size}"
    );
    b[32] = 0x80;
    let path = dir.path().join("mutated.data");
    std::fs::write(&path, &b).unwrap();
    let path = path.to_str().unwrap();
    for args in [
        &["report", "-i", path][..],
        &["report", "--folded", "-i", path],
        &["report", "--by", "mapping", "-i", path],
        &["script", "-i", path],
    ] {
        let o = run_memperf(args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("holds no event"), "{args:?}: {err}");
    }
}
