#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `memperf report`'s memory grows with what it keeps (distinct stacks, frames, binaries),
//! not with the samples it reads: recordings built per the kernel ABI with the same four
//! stacks sampled 10,000 and 110,000 times, whose peak RSS the kernel measures (`wait4`'s
//! `ru_maxrss`, through python3). Reading a mapped recording once kept all of it resident:
//! a 1.3 GB system-wide recording took 1.7 GB.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use memperf::perfdata::{ATTR_SIZE_VER7, EventDesc, Features, PerfDataWriter};
use memperf::records::SampleId;
use memperf::records::{ParseInfo, Sample, encode_comm, encode_finished_round, encode_sample};
use perf_event_open_sys::bindings::{self as b, perf_event_attr};

const PID: u32 = 4321;
const ID: u64 = 7;
/// The stacks' depth: samples of some 500 bytes, as a system-wide recording's are.
const DEPTH: u64 = 56;
/// Samples per round, as a recorder's drain rounds hold them.
const ROUND: u64 = 2000;
const PERF_CONTEXT_USER: u64 = (-512i64) as u64;

fn attr() -> perf_event_attr {
    let mut attr = perf_event_attr {
        type_: b::PERF_TYPE_SOFTWARE,
        size: ATTR_SIZE_VER7 as u32,
        config: b::PERF_COUNT_SW_PAGE_FAULTS.into(),
        sample_type: u64::from(
            b::PERF_SAMPLE_IDENTIFIER
                | b::PERF_SAMPLE_IP
                | b::PERF_SAMPLE_TID
                | b::PERF_SAMPLE_TIME
                | b::PERF_SAMPLE_CPU
                | b::PERF_SAMPLE_PERIOD
                | b::PERF_SAMPLE_CALLCHAIN,
        ),
        ..perf_event_attr::default()
    };
    attr.sample_period = 1;
    attr.set_sample_id_all(1);
    attr.set_exclude_kernel(1);
    attr
}

/// A recording of `samples` page faults of one process, each with one of four user stacks
/// (in no mapping: no binary is read).
fn write_recording(dir: &Path, samples: u64) -> PathBuf {
    let path = dir.join(format!("{samples}.data"));
    let attr = attr();
    let info = ParseInfo::from_attr(&attr);
    let events = vec![EventDesc {
        attr,
        name: "page-faults".into(),
        ids: vec![ID],
    }];
    let mut w = PerfDataWriter::create(&path, events).unwrap();
    let sid = SampleId {
        pid: Some(PID),
        tid: Some(PID),
        time: Some(1),
        cpu: Some(0),
        identifier: Some(ID),
        ..SampleId::default()
    };
    let mut buf = Vec::new();
    encode_comm(&mut buf, PID, PID, b"faulter", true, &sid, &info);
    let chains: Vec<Vec<u64>> = (0..4u64)
        .map(|k| {
            let mut c = vec![PERF_CONTEXT_USER];
            c.extend((0..DEPTH).map(|d| 0x40_0000 + k * 0x1_0000 + d * 0x10));
            c
        })
        .collect();
    for i in 0..samples {
        let chain = &chains[(i % 4) as usize];
        let s = Sample {
            identifier: Some(ID),
            ip: Some(chain[1]),
            pid: Some(PID),
            tid: Some(PID),
            time: Some(1000 + i),
            cpu: Some(0),
            period: Some(1),
            ..Sample::default()
        };
        encode_sample(
            &mut buf,
            b::PERF_RECORD_MISC_USER as u16,
            &s,
            &info,
            Some(chain),
        )
        .unwrap();
        if (i + 1) % ROUND == 0 {
            encode_finished_round(&mut buf);
            w.write_record(&buf).unwrap();
            buf.clear();
        }
    }
    encode_finished_round(&mut buf);
    w.write_record(&buf).unwrap();
    let features = Features {
        sample_time: Some((1000, 1000 + samples)),
        ..Features::from_system(vec!["memperf".into(), "record".into()])
    };
    w.finish(&features).unwrap();
    path
}

/// `memperf report ARGS -i FILE`'s standard output and peak RSS in KiB, as the kernel
/// counts it for the process (file pages mapped in included).
fn report_peak(file: &Path, args: &[&str]) -> (String, u64) {
    let script = "import os, subprocess, sys\n\
                  p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE)\n\
                  out = p.stdout.read()\n\
                  _, status, ru = os.wait4(p.pid, 0)\n\
                  sys.stdout.buffer.write(out)\n\
                  sys.stdout.write(f'\\npeak-rss-kib {ru.ru_maxrss} status {status}\\n')\n";
    let out = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_memperf"))
        .args(["report", "-q", "-i"])
        .arg(file)
        .args(args)
        .output()
        .expect("python3 runs (scripts/test.sh installs it)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (report, tail) = text.rsplit_once("\npeak-rss-kib ").expect("the peak line");
    let mut words = tail.split_whitespace();
    let peak: u64 = words.next().unwrap().parse().unwrap();
    assert_eq!(words.nth(1), Some("0"), "memperf report failed: {text}");
    (report.to_string(), peak)
}

#[test]
fn report_memory_does_not_grow_with_the_samples_read() {
    let dir = common::scratch();
    let small = write_recording(dir.path(), 10_000);
    let large = write_recording(dir.path(), 110_000);
    let grown_file = (std::fs::metadata(&large).unwrap().len()
        - std::fs::metadata(&small).unwrap().len())
        / 1024;
    assert!(
        grown_file > 40 * 1024,
        "the files differ by {grown_file} KiB"
    );
    // --addrs: frames in no mapping are named by their address, so the stacks stay apart.
    for args in [&["--addrs"][..], &["--addrs", "--pprof", "-"]] {
        let (small_out, small_peak) = report_peak(&small, args);
        let (large_out, large_peak) = report_peak(&large, args);
        if args.len() == 1 {
            // The report read every sample and kept four stacks.
            assert!(
                large_out.contains("# event page-faults: 110000 samples"),
                "{large_out}"
            );
            assert_eq!(
                large_out.matches("\n        27500 (25.00%)").count(),
                4,
                "{large_out}"
            );
            assert!(large_out.contains("top 4 of 4 stacks"), "{large_out}");
            assert!(small_out.contains("top 4 of 4 stacks"), "{small_out}");
        }
        // Eleven times the samples, 50 MiB more file: the peak may grow by a window of
        // the file (memperf lets go of it 8 MiB at a time), not by the file.
        let grown = large_peak.saturating_sub(small_peak);
        assert!(
            grown < 24 * 1024,
            "{args:?}: peak RSS {small_peak} KiB for 10,000 samples, {large_peak} KiB for \
             110,000 ({grown} KiB more, the file {grown_file} KiB more)"
        );
    }
}
