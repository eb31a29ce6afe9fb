//! Writer/reader tests, interop with the real `perf script` / `perf report` / `perf record`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

use object::{Object, ObjectSegment, SegmentFlags};
use perf_event_open_sys::bindings as b;

use super::*;
use crate::records::{
    self, Mmap2Fields, ParseInfo, Record, Sample, SampleId, encode_comm, encode_finished_round,
    encode_mmap2, encode_sample, parse_record,
};

/// Skips (returns false) with a printed reason, or fails under `MEMPERF_REQUIRE_PERF=1`.
fn skip(reason: &str) -> bool {
    if std::env::var("MEMPERF_REQUIRE_PERF").as_deref() == Ok("1") {
        panic!("MEMPERF_REQUIRE_PERF=1 but: {reason}");
    }
    eprintln!("skipped: {reason}");
    false
}

fn have_perf() -> bool {
    match Command::new("perf").arg("version").output() {
        Ok(o) if o.status.success() => true,
        Ok(o) => skip(&format!(
            "`perf version` failed: {}",
            String::from_utf8_lossy(&o.stderr)
        )),
        Err(e) => skip(&format!("perf is not installed: {e}")),
    }
}

fn run_perf(args: &[&str], file: &Path) -> (String, String, bool) {
    let out = Command::new("perf")
        .args(args)
        .arg("-i")
        .arg(file)
        .output()
        .expect("run perf");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.success(),
    )
}

fn pf_attr() -> perf_event_attr {
    let mut attr = perf_event_attr {
        type_: b::PERF_TYPE_SOFTWARE,
        size: ATTR_SIZE_MAX as u32,
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
    attr.set_exclude_hv(1);
    attr.set_disabled(1);
    attr
}

#[test]
fn attr_bytes_round_trip_all_sizes() {
    let mut attr = pf_attr();
    attr.config2 = 0x1122;
    attr.sig_data = 7;
    attr.config4 = 9;
    attr.clockid = -3;
    attr.sample_max_stack = 127;
    let bytes = attr_to_bytes(&attr);
    assert_eq!(bytes.len(), ATTR_SIZE_MAX);
    assert_eq!(attr_to_bytes(&attr_from_bytes(&bytes).unwrap()), bytes);
    // The bitfield word is at offset 40: disabled (bit 0), exclude_kernel (5), exclude_hv (6),
    // sample_id_all (18).
    assert_eq!(le_u64(&bytes, 40), 1 | (1 << 5) | (1 << 6) | (1 << 18));
    assert_eq!(le_u64(&bytes, 16), 1, "sample_period");
    assert_eq!(le_u64(&bytes, 64), 0x1122, "config2");
    let back = attr_from_bytes(&bytes).unwrap();
    assert_eq!(
        (back.sample_id_all(), back.exclude_kernel(), back.clockid),
        (1, 1, -3)
    );

    // A VER0 attr has no config2 and beyond; bytes past the known fields are ignored.
    let v0 = attr_from_bytes(&bytes[..64]).unwrap();
    assert_eq!(
        (v0.config2, v0.sig_data, v0.sample_type),
        (0, 0, attr.sample_type)
    );
    let mut longer = bytes.clone();
    longer.extend_from_slice(&[0xff; 16]);
    assert_eq!(attr_to_bytes(&attr_from_bytes(&longer).unwrap()), bytes);
    assert!(attr_from_bytes(&bytes[..63]).is_err());

    // Files get the smallest size perf 6.1 reads, unless config3/4 are used.
    assert_eq!(attr_min_size(&pf_attr()), ATTR_SIZE_VER7);
    assert_eq!(attr_min_size(&attr), 144);
}

/// The executable PT_LOAD of an ELF: (p_vaddr, p_offset, p_filesz), entry point.
fn exec_segment(path: &Path) -> ((u64, u64, u64), u64) {
    let data = std::fs::read(path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let seg = file
        .segments()
        .find(|s| matches!(s.flags(), SegmentFlags::Elf { p_flags } if p_flags & 1 != 0))
        .expect("an executable PT_LOAD");
    let (off, size) = seg.file_range();
    ((seg.address(), off, size), file.entry())
}

const PID: u32 = 4242;
const BASE: u64 = 0x5555_0000_0000;

/// Writes a page-faults recording of `nr` samples in /bin/true; returns the file path.
fn write_pf_file(dir: &Path, nr: u64, features: &Features) -> PathBuf {
    let path = dir.join("pf.data");
    let attr = pf_attr();
    let ids = vec![1001, 1002];
    let buf = pf_records(nr, &ParseInfo::from_attr(&attr), &ids);
    let events = vec![EventDesc {
        attr,
        name: "page-faults".into(),
        ids,
    }];
    let mut w = PerfDataWriter::create(&path, events).unwrap();
    // The event's name comes first (an EVENT_UPDATE record), for a file never finished.
    let names = w.data_bytes();
    w.write_record(&buf).unwrap();
    assert_eq!(w.data_bytes() - names, buf.len() as u64);
    let total = w.finish(features).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), total);
    path
}

/// The records of `nr` page faults in /bin/true (COMM, MMAP2, the samples with the sample
/// ids `ids` in turn, FINISHED_ROUND).
fn pf_records(nr: u64, info: &ParseInfo, ids: &[u64]) -> Vec<u8> {
    let true_path = std::fs::canonicalize("/bin/true").unwrap();
    let ((vaddr, off, size), entry) = exec_segment(&true_path);
    let map_start = BASE + (vaddr & !0xfff);
    let sid = |t: u64| SampleId {
        pid: Some(PID),
        tid: Some(PID),
        time: Some(t),
        cpu: Some(0),
        identifier: Some(ids[0]),
        ..SampleId::default()
    };
    let mut buf = Vec::new();
    encode_comm(&mut buf, PID, PID, b"true", true, &sid(1_000_000), info);
    let m = Mmap2Fields {
        pid: PID,
        tid: PID,
        addr: map_start,
        len: ((vaddr + size + 0xfff) & !0xfff) - (vaddr & !0xfff),
        pgoff: off & !0xfff,
        prot: (libc::PROT_READ | libc::PROT_EXEC) as u32,
        flags: libc::MAP_PRIVATE as u32,
        filename: true_path.as_os_str().as_encoded_bytes(),
        ..Mmap2Fields::default()
    };
    encode_mmap2(&mut buf, &m, &sid(1_000_001), info);
    let ip = BASE + entry;
    for i in 0..nr {
        let s = Sample {
            identifier: Some(ids[i as usize % ids.len()]),
            ip: Some(ip),
            pid: Some(PID),
            tid: Some(PID),
            time: Some(2_000_000 + i * 1000),
            cpu: Some(1),
            period: Some(1),
            ..Sample::default()
        };
        let misc = b::PERF_RECORD_MISC_USER as u16;
        encode_sample(&mut buf, misc, &s, info, Some(&[b::PERF_CONTEXT_USER, ip])).unwrap();
    }
    encode_finished_round(&mut buf);
    buf
}

fn test_features() -> Features {
    Features {
        build_ids: vec![BuildIdEntry {
            pid: -1,
            kernel: false,
            build_id: vec![0xab; 20],
            filename: "/nonexistent/libfoo.so".into(),
        }],
        sample_time: Some((2_000_000, 2_004_000)),
        clockid: Some(1),
        memperf_stats: Some(MemperfStats {
            counts: vec![("unwound".into(), 78), ("truncated.bad_frame".into(), 40)],
        }),
        ..Features::from_system(vec!["memperf".into(), "record".into(), "true".into()])
    }
}

#[test]
fn written_file_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let features = test_features();
    let path = write_pf_file(dir.path(), 5, &features);
    let f = PerfDataFile::open(&path).unwrap();
    assert_eq!(f.events.len(), 1);
    assert_eq!(f.events[0].name, "page-faults");
    assert_eq!(f.events[0].ids, vec![1001, 1002]);
    assert_eq!(f.events[0].attr.size, ATTR_SIZE_VER7 as u32);
    assert_eq!(f.features.hostname, features.hostname);
    assert_eq!(f.features.osrelease, features.osrelease);
    assert_eq!(f.features.cmdline, vec!["memperf", "record", "true"]);
    assert_eq!(f.features.build_ids, features.build_ids);
    assert_eq!(f.features.sample_time, Some((2_000_000, 2_004_000)));
    assert_eq!(f.features.event_names, vec!["page-faults"]);
    assert_eq!(f.features.memperf_stats, features.memperf_stats);
    assert!(f.features.undecodable.is_empty());
    let mut samples = 0;
    let mut comms = Vec::new();
    for r in f.records() {
        let r = r.unwrap();
        let idx = f.event_for(r.ty, r.body);
        let rec = parse_record(r.ty, r.misc, r.body, &f.parse_info(idx.unwrap_or(0))).unwrap();
        match rec {
            Record::Sample(s) => {
                samples += 1;
                assert_eq!(s.callchain.unwrap().len(), 2);
                assert_eq!(s.pid, Some(PID));
            }
            Record::Comm { name, .. } => comms.push(name.to_vec()),
            _ => {}
        }
    }
    assert_eq!((samples, comms), (5, vec![b"true".to_vec()]));
}

#[test]
fn recovered_marks_spilled_to_a_temporary_file_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("marks.data");
    let attr = pf_attr();
    let ids = vec![1001, 1002];
    let buf = pf_records(3, &ParseInfo::from_attr(&attr), &ids);
    let events = vec![EventDesc {
        attr,
        name: "page-faults".into(),
        ids,
    }];
    let mut w = PerfDataWriter::create(&path, events).unwrap();
    w.write_record(&buf).unwrap();
    // Several batches: most of the marks are in the log's file, the last ones in memory.
    let marks: Vec<RecoveredMark> = (0..10_000u64)
        .map(|i| RecoveredMark {
            time: 2_000_000 + i,
            tid: 7 + (i % 3) as u32,
            first: (i % 11) as u32,
        })
        .collect();
    let mut log = MarkLog::new(Some(dir.path()));
    marks.iter().for_each(|m| log.push(*m));
    assert!(log.memory() < 16 * 10_000, "the marks stayed in memory");
    let features = test_features();
    let total = w.finish_with_marks(&features, Some(&log)).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), total);
    let f = PerfDataFile::open(&path).unwrap();
    assert_eq!(f.features.recovered_marks, marks);
    // The sections on either side of it read back too.
    assert_eq!(f.features.memperf_stats, features.memperf_stats);
    assert_eq!(f.features.build_ids, features.build_ids);
}

#[test]
fn perf_script_and_report_read_written_file() {
    if !have_perf() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = write_pf_file(dir.path(), 7, &test_features());
    let (out, err, ok) = run_perf(&["script", "-F", "comm,pid,event,ip", "-G"], &path);
    assert!(ok, "perf script failed: {err}");
    let lines: Vec<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 7, "perf script output:\n{out}\nstderr:\n{err}");
    assert!(
        lines
            .iter()
            .all(|l| l.contains("true") && l.contains("page-faults")),
        "{out}"
    );
    assert!(lines[0].contains(&PID.to_string()), "{out}");

    let (out, err, ok) = run_perf(&["report", "--stdio"], &path);
    assert!(ok, "perf report failed:\n{err}");
    let warnings: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(warnings.is_empty(), "perf report complained:\n{err}");
    assert!(out.contains("page-faults"), "{out}");
    assert!(out.contains("true"), "{out}");
}

/// A `syscalls:sys_enter_brk` event of tracepoint id `id`, with the raw payload.
fn brk_attr(id: u64) -> perf_event_attr {
    let mut attr = perf_event_attr {
        type_: b::PERF_TYPE_TRACEPOINT,
        config: id,
        sample_type: u64::from(
            b::PERF_SAMPLE_IDENTIFIER
                | b::PERF_SAMPLE_TID
                | b::PERF_SAMPLE_TIME
                | b::PERF_SAMPLE_CPU
                | b::PERF_SAMPLE_PERIOD
                | b::PERF_SAMPLE_RAW,
        ),
        ..perf_event_attr::default()
    };
    attr.sample_period = 1;
    attr.set_sample_id_all(1);
    attr
}

/// A `sys_enter_brk(brk)` sample of sample id `ids.0` and tracepoint id `ids.1`.
fn brk_sample(buf: &mut Vec<u8>, info: &ParseInfo, ids: (u64, u64), time: u64, brk: u64) {
    // struct: u16 common_type, u8 flags, u8 preempt_count, i32 common_pid, i32 nr, pad, u64 brk
    let mut raw = Vec::new();
    raw.extend_from_slice(&(ids.1 as u16).to_ne_bytes());
    raw.extend_from_slice(&[0, 0]);
    raw.extend_from_slice(&(PID as i32).to_ne_bytes());
    raw.extend_from_slice(&12i32.to_ne_bytes());
    raw.extend_from_slice(&[0; 4]);
    raw.extend_from_slice(&brk.to_ne_bytes());
    let s = Sample {
        identifier: Some(ids.0),
        pid: Some(PID),
        tid: Some(PID),
        time: Some(time),
        cpu: Some(1),
        period: Some(1),
        raw: Some(&raw),
        ..Sample::default()
    };
    encode_sample(buf, b::PERF_RECORD_MISC_USER as u16, &s, info, None).unwrap();
}

fn tracefs() -> Option<PathBuf> {
    let t = Path::new("/sys/kernel/tracing");
    if !t.join("events").exists() {
        let _ = Command::new("mount")
            .args(["-t", "tracefs", "nodev"])
            .arg(t)
            .status();
    }
    t.join("events/syscalls/sys_enter_brk/id")
        .exists()
        .then(|| t.to_path_buf())
}

/// `syscalls:sys_enter_brk`'s id here and a TRACING_DATA blob with its format, from tracefs;
/// `None` (skipped, with the reason) where tracefs does not have it.
fn brk_from_tracefs() -> Option<(u64, Vec<u8>)> {
    let Some(t) = tracefs() else {
        skip("tracefs with syscalls:sys_enter_brk is not available");
        return None;
    };
    let ev = t.join("events");
    let id: u64 = std::fs::read_to_string(ev.join("syscalls/sys_enter_brk/id"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let td = tracing_data(
        &std::fs::read(ev.join("header_page")).unwrap(),
        &std::fs::read(ev.join("header_event")).unwrap(),
        &[TracepointFormat {
            system: "syscalls".into(),
            name: "sys_enter_brk".into(),
            format: std::fs::read(ev.join("syscalls/sys_enter_brk/format")).unwrap(),
        }],
        PRINTK,
    );
    Some((id, td))
}

/// Printk formats as tracefs lists them; perf must still read the blob's layout past them.
const PRINTK: &[u8] =
    b"0xffffffff8281a424 : \"Start context switch\"\n0xffffffff82521880 : \"mt_find\"\n";

#[test]
fn the_tracing_data_carries_the_printk_formats() {
    let td = tracing_data(b"page", b"event", &[], PRINTK);
    assert_eq!(
        crate::perfdata::tracing_data::parse_printk_formats(&td),
        [
            (0xffff_ffff_8281_a424, "Start context switch".to_string()),
            (0xffff_ffff_8252_1880, "mt_find".to_string()),
        ]
    );
    // The saved cmdlines' size (none) ends the blob.
    assert!(td.ends_with(&[0; 8]));
    assert!(td[..td.len() - 8].ends_with(PRINTK));
}

#[test]
fn perf_script_decodes_tracepoint_fields() {
    if !have_perf() {
        return;
    }
    let Some((id, td)) = brk_from_tracefs() else {
        return;
    };
    let attr = brk_attr(id);
    let info = ParseInfo::from_attr(&attr);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tp.data");
    let events = vec![EventDesc {
        attr,
        name: "syscalls:sys_enter_brk".into(),
        ids: vec![7],
    }];
    let mut w = PerfDataWriter::create(&path, events).unwrap();
    let mut buf = Vec::new();
    let sid = SampleId {
        pid: Some(PID),
        tid: Some(PID),
        time: Some(1),
        cpu: Some(0),
        identifier: Some(7),
        ..SampleId::default()
    };
    encode_comm(&mut buf, PID, PID, b"brker", true, &sid, &info);
    let brks = [0x5555_dead_b000u64, 0x5555_dead_c000, 0x5555_dead_d000];
    for (i, &brk) in brks.iter().enumerate() {
        brk_sample(&mut buf, &info, (7, id), 1_000_000_000 + i as u64, brk);
    }
    w.write_record(&buf).unwrap();
    let features = Features {
        tracing_data: Some(td.clone()),
        ..test_features()
    };
    w.finish(&features).unwrap();
    assert_eq!(
        PerfDataFile::open(&path).unwrap().features.tracing_data,
        Some(td)
    );

    let (out, err, ok) = run_perf(&["script"], &path);
    assert!(ok, "perf script failed: {err}");
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("sys_enter_brk"))
        .collect();
    assert_eq!(lines.len(), 3, "perf script output:\n{out}\nstderr:\n{err}");
    for (line, brk) in lines.iter().zip(brks) {
        assert!(line.contains(&format!("brk: {brk:#010x}")), "{line}");
        assert!(line.contains("brker"), "{line}");
    }
    assert!(
        !err.to_lowercase().contains("warning"),
        "perf script complained:\n{err}"
    );
}

#[test]
fn reads_a_real_perf_record_file() {
    if !have_perf() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("perf.data");
    let out = Command::new("perf")
        .args(["record", "-q", "-e", "page-faults", "-c", "1", "-g", "-o"])
        .arg(&path)
        .args(["--", "true"])
        .output()
        .unwrap();
    if !out.status.success() {
        skip(&format!(
            "perf record failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
        return;
    }
    let f = PerfDataFile::open(&path).unwrap();
    assert_eq!(f.events.len(), 1);
    assert!(
        f.events[0].name.starts_with("page-faults"),
        "{:?}",
        f.events
    );
    assert!(!f.features.cmdline.is_empty());
    assert_eq!(f.features.hostname, test_features().hostname);
    let (mut samples, mut comm_true, mut errors) = (0, 0, Vec::new());
    for r in f.records() {
        let r = r.unwrap();
        if r.ty >= records::PERF_RECORD_USER_TYPE_START {
            continue;
        }
        let info = f.parse_info(f.event_for(r.ty, r.body).unwrap_or(0));
        match parse_record(r.ty, r.misc, r.body, &info) {
            Ok(Record::Sample(s)) => {
                samples += 1;
                assert!(s.callchain.is_some_and(|c| !c.is_empty()));
            }
            Ok(Record::Comm { name: b"true", .. }) => comm_true += 1,
            Ok(_) => {}
            Err(e) => errors.push(format!("at {:#x}: {e}", r.offset)),
        }
    }
    assert!(errors.is_empty(), "{errors:?}");
    assert!(samples > 10, "only {samples} samples");
    assert!(comm_true >= 1, "no COMM true");
}

fn open_bytes(dir: &Path, bytes: &[u8]) -> Result<PerfDataFile, PerfDataError> {
    let p = dir.join("x.data");
    std::fs::write(&p, bytes).unwrap();
    PerfDataFile::open(&p)
}

#[test]
fn reader_reports_broken_files_without_panicking() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(write_pf_file(dir.path(), 5, &Features::default())).unwrap();
    let data_off = le_u64(&good, 40) as usize;
    let data_size = le_u64(&good, 48) as usize;

    let e = open_bytes(dir.path(), &[]).unwrap_err();
    assert!(matches!(e, PerfDataError::Empty), "{e}");
    let e = PerfDataFile::open(dir.path()).unwrap_err();
    assert!(e.to_string().contains("failed to read"), "{e}");
    let e = open_bytes(dir.path(), b"hello world, not perf data").unwrap_err();
    assert_eq!(e.to_string(), "not a perf.data file (magic \"hello wo\")");
    let e = open_bytes(dir.path(), b"2ELIFREP").unwrap_err();
    assert!(matches!(e, PerfDataError::BigEndian), "{e}");
    let e = open_bytes(dir.path(), &good[..60]).unwrap_err();
    assert!(matches!(e, PerfDataError::TooSmall(60)), "{e}");

    // A header whose data size was never set (the recorder was killed before any
    // checkpoint): the records are read from the data section on.
    let mut unfinished = good.clone();
    unfinished[48..56].fill(0);
    let f = open_bytes(dir.path(), &unfinished).unwrap();
    assert!(f.is_unfinished());
    let first: Vec<_> = f.records().take(2).collect();
    assert!(first.iter().all(|r| r.is_ok()), "{first:?}");
    // Nothing after the attrs: an empty recording, not an unfinished one.
    let mut empty = good[..data_off].to_vec();
    empty[48..56].fill(0);
    let e = open_bytes(dir.path(), &empty).unwrap_err();
    assert_eq!(
        e.to_string(),
        "data size is 0: the recording was not finished"
    );

    // Feature bit 27 alone, in a header that lost the others, is damage, not compression.
    let mut bit_alone = good.clone();
    bit_alone[72..104].fill(0);
    bit_alone[72 + 3] |= 1 << 3;
    assert!(open_bytes(dir.path(), &bit_alone).is_ok());

    // Random feature bits (bit 27 among them) with no compression section that says zstd:
    // damage, not compression.
    let mut random_bits = good.clone();
    random_bits[72..80].copy_from_slice(&0x5a3c_9e17_0fd8_2b6d_u64.to_le_bytes());
    if let Err(e) = open_bytes(dir.path(), &random_bits) {
        assert!(!e.to_string().contains("zstd"), "{e}");
    }

    // A real `perf record -z` file: bit 27 and its section saying zstd.
    if have_perf() {
        let z = dir.path().join("z.data");
        let ok = Command::new("perf")
            .args(["record", "-q", "-z", "-e", "page-faults", "-o"])
            .arg(&z)
            .args(["--", "true"])
            .output()
            .unwrap()
            .status
            .success();
        if ok {
            let e = PerfDataFile::open(&z).unwrap_err();
            assert_eq!(
                e.to_string(),
                "records are zstd-compressed (`perf record -z`), which memperf cannot read: record without -z"
            );
        }
    }

    // Truncated inside the third record (the event's name, then a COMM, then this one):
    // two records read, then the loss is reported.
    let first_len = u16::from_ne_bytes([good[data_off + 6], good[data_off + 7]]) as usize;
    let second = data_off + first_len;
    let second_len = u16::from_ne_bytes([good[second + 6], good[second + 7]]) as usize;
    let cut = second + second_len + 12;
    let f = open_bytes(dir.path(), &good[..cut]).unwrap();
    let results: Vec<_> = f.records().collect();
    assert_eq!(results.len(), 3);
    assert!(results[..2].iter().all(|r| r.is_ok()));
    let expect_skipped = (data_off + data_size - (second + second_len)) as u64;
    match &results[2] {
        Err(PerfDataError::Truncated { offset, skipped }) => {
            assert_eq!(
                (*offset, *skipped),
                ((second + second_len) as u64, expect_skipped)
            );
        }
        other => panic!("{other:?}"),
    }

    // Garbage: a record header claiming 4 bytes.
    let mut garbage = good.clone();
    garbage[second + 6..second + 8].copy_from_slice(&4u16.to_ne_bytes());
    let f = open_bytes(dir.path(), &garbage).unwrap();
    let errs: Vec<String> = f
        .records()
        .filter_map(|r| r.err())
        .map(|e| e.to_string())
        .collect();
    assert_eq!(
        errs,
        vec![format!(
            "record at offset {second:#x} has size 4 (< 8): file is corrupt"
        )]
    );

    // Random bytes over the whole data section never panic.
    let mut noise = good.clone();
    let mut x = 0x1234_5678u32;
    for byte in &mut noise[data_off..data_off + data_size] {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *byte = x as u8;
    }
    if let Ok(f) = open_bytes(dir.path(), &noise) {
        for r in f.records().flatten() {
            let _ = parse_record(r.ty, r.misc, r.body, &f.parse_info(0));
        }
    }
}

mod pipe;

#[test]
fn a_file_cut_in_its_feature_sections_says_it_is_cut_short() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_pf_file(dir.path(), 5, &test_features());
    let bytes = std::fs::read(&path).unwrap();
    let whole = PerfDataFile::from_bytes(bytes.clone()).unwrap();
    assert_eq!(whole.cut_note("f"), None);
    // One byte short: the last feature section ends beyond the file; the data is whole.
    let short = PerfDataFile::from_bytes(bytes[..bytes.len() - 1].to_vec()).unwrap();
    assert_eq!(short.missing_data_bytes, 0);
    let note = short.cut_note("f").unwrap();
    assert!(note.starts_with("`f` is cut short: 1 of its "), "{note}");
    // Cut right after the data section: every feature section is gone.
    let end = (whole.data_end() + 8) as usize;
    let bare = PerfDataFile::from_bytes(bytes[..end].to_vec()).unwrap();
    let note = bare.cut_note("f").unwrap();
    assert!(
        note.contains("feature sections end beyond the end of the file"),
        "{note}"
    );
}

/// A recorder killed before it wrote the feature sections (where EVENT_DESC names the
/// events) left its events named all the same: by the EVENT_UPDATE records the writer puts
/// first in the data section, as perf's pipe mode does. Without them a replay could not
/// tell the allocator probes apart (`type2:0x916`).
#[test]
fn a_recording_killed_before_its_feature_sections_still_names_its_events() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed.data");
    let attr = pf_attr();
    let ids = vec![1001, 1002];
    let buf = pf_records(3, &ParseInfo::from_attr(&attr), &ids);
    let events = vec![EventDesc {
        attr,
        name: "memperf_1:malloc".into(),
        ids,
    }];
    let mut w = PerfDataWriter::create(&path, events).unwrap();
    w.write_record(&buf).unwrap();
    w.checkpoint().unwrap();
    drop(w);
    let f = PerfDataFile::open(&path).unwrap();
    assert!(f.features.event_names.is_empty());
    assert_eq!(f.event_names(), ["memperf_1:malloc"]);
    // The records after the names are read as they were written.
    let samples = f
        .records()
        .filter(|r| r.as_ref().is_ok_and(|r| r.ty == b::PERF_RECORD_SAMPLE))
        .count();
    assert_eq!(samples, 3);
}
