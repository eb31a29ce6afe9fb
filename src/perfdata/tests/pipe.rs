//! Pipe-mode streams (`perf record -o -`) built per the ABI, real ones from perf, broken ones.

use super::super::features::{HEADER_BUILD_ID, HEADER_TRACING_DATA};
use super::*;

/// `PERF_RECORD_FINISHED_INIT`, `PERF_RECORD_ID_INDEX`.
const FINISHED_INIT: u32 = 82;
const ID_INDEX: u32 = 69;
const PF_IDS: [u64; 2] = [1001, 1002];
const BRK_ID: u64 = 2001;
const BRKS: [u64; 3] = [0x5555_dead_b000, 0x5555_dead_c000, 0x5555_dead_d000];

/// A pipe-mode stream as perf writes it: `struct perf_pipe_file_header`, then records.
struct PipeStream {
    buf: Vec<u8>,
}

impl PipeStream {
    fn new() -> PipeStream {
        let mut buf = PERF_MAGIC.to_vec();
        buf.extend_from_slice(&PIPE_HEADER_SIZE.to_ne_bytes());
        PipeStream { buf }
    }

    fn record(&mut self, ty: u32, body: &[u8]) -> usize {
        let at = self.buf.len();
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(&0u16.to_ne_bytes());
        self.buf
            .extend_from_slice(&u16::try_from(body.len() + 8).unwrap().to_ne_bytes());
        self.buf.extend_from_slice(body);
        at
    }

    /// PERF_RECORD_HEADER_ATTR: the attr as perf 6.1 writes it (VER7, 128 bytes), the ids.
    fn attr(&mut self, e: &EventDesc) {
        let mut body = attr_file_bytes(&e.attr, ATTR_SIZE_VER7);
        e.ids
            .iter()
            .for_each(|id| body.extend_from_slice(&id.to_ne_bytes()));
        self.record(PERF_RECORD_HEADER_ATTR, &body);
    }

    /// PERF_RECORD_HEADER_FEATURE: the feature id, then the section's contents.
    fn feature(&mut self, bit: u32, data: &[u8]) {
        let mut body = u64::from(bit).to_ne_bytes().to_vec();
        body.extend_from_slice(data);
        self.record(PERF_RECORD_HEADER_FEATURE, &body);
    }

    /// PERF_RECORD_EVENT_UPDATE of type NAME (2), the name padded to 8 as perf does.
    fn event_name(&mut self, id: u64, name: &str) {
        let mut body = 2u64.to_ne_bytes().to_vec();
        body.extend_from_slice(&id.to_ne_bytes());
        body.extend_from_slice(name.as_bytes());
        body.resize((body.len() + 1).next_multiple_of(8), 0);
        self.record(PERF_RECORD_EVENT_UPDATE, &body);
    }

    /// PERF_RECORD_HEADER_TRACING_DATA (16 bytes: the size, padding), then the blob padded
    /// to 8, as `perf_event__synthesize_tracing_data` writes them.
    fn tracing_data(&mut self, blob: &[u8]) -> usize {
        let padded = blob.len().next_multiple_of(8);
        let mut body = (padded as u32).to_ne_bytes().to_vec();
        body.extend_from_slice(&[0; 4]);
        let at = self.record(PERF_RECORD_HEADER_TRACING_DATA, &body);
        self.buf.extend_from_slice(blob);
        self.buf.resize(self.buf.len() + padded - blob.len(), 0);
        at
    }
}

/// A made-up but well-formed `sys_enter_brk` format, for tests that need no tracefs.
fn brk_format(id: u64) -> Vec<u8> {
    format!(
        "name: sys_enter_brk\nID: {id}\nformat:\n\
         \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
         \tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
         \tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
         \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
         \tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;\n\
         \tfield:unsigned long brk;\toffset:16;\tsize:8;\tsigned:0;\n\n\
         print fmt: \"brk: 0x%08lx\", ((unsigned long)(REC->brk))\n"
    )
    .into_bytes()
}

/// Where the stream's notable records start.
struct Offsets {
    tracing_data: usize,
    first_sample: usize,
}

/// A recording of `nr` page faults in /bin/true and three brk calls, as perf's pipe mode
/// writes it: the attrs with their ids, the features (EVENT_DESC naming the tracepoint
/// `brk-desc`), the tracing data, build-id records, an EVENT_UPDATE renaming the tracepoint,
/// FINISHED_INIT, then the data (with `aux`, an AUXTRACE record and its payload among it:
/// perf itself refuses one without AUXTRACE_INFO).
fn pipe_recording(nr: u64, td: &[u8], tp_id: u64, aux: bool) -> (Vec<u8>, Offsets) {
    let pf = EventDesc {
        attr: pf_attr(),
        name: "page-faults".into(),
        ids: PF_IDS.to_vec(),
    };
    let tp = EventDesc {
        attr: brk_attr(tp_id),
        name: "brk-desc".into(),
        ids: vec![BRK_ID],
    };
    let mut s = PipeStream::new();
    s.attr(&pf);
    s.attr(&tp);
    let features = Features {
        tracing_data: Some(td.to_vec()),
        ..test_features()
    };
    let mut tracing_data = 0;
    for (bit, data) in features.encode(&[pf, tp.clone()], ATTR_SIZE_VER7) {
        match bit {
            HEADER_TRACING_DATA => tracing_data = s.tracing_data(&data),
            // The BUILD_ID feature is a run of PERF_RECORD_HEADER_BUILD_ID records.
            HEADER_BUILD_ID => s.buf.extend_from_slice(&data),
            _ => s.feature(bit, &data),
        }
    }
    s.record(ID_INDEX, &0u64.to_ne_bytes());
    s.event_name(BRK_ID, "syscalls:sys_enter_brk");
    s.record(FINISHED_INIT, &[]);
    let first_sample = s.buf.len();
    s.buf
        .extend_from_slice(&pf_records(nr, &ParseInfo::from_attr(&pf_attr()), &PF_IDS));
    // struct perf_record_auxtrace: size, offset, reference, idx, tid, cpu, reserved; then
    // `size` bytes of trace that would read as records if they were not skipped.
    if aux {
        let mut body = 24u64.to_ne_bytes().to_vec();
        body.resize(40, 0);
        s.record(PERF_RECORD_AUXTRACE, &body);
        s.buf.extend_from_slice(&[0xff; 24]);
    }
    let info = ParseInfo::from_attr(&tp.attr);
    for (i, &brk) in BRKS.iter().enumerate() {
        brk_sample(
            &mut s.buf,
            &info,
            (BRK_ID, tp_id),
            3_000_000 + i as u64,
            brk,
        );
    }
    encode_finished_round(&mut s.buf);
    let offsets = Offsets {
        tracing_data,
        first_sample,
    };
    (s.buf, offsets)
}

/// (samples per event, perf's own records, AUXTRACE payload sizes) of a file's records.
fn walk(f: &PerfDataFile) -> (Vec<u64>, u64, Vec<usize>) {
    let (mut samples, mut own, mut aux) = (vec![0; f.events.len()], 0, Vec::new());
    for r in f.records() {
        let r = r.unwrap();
        if r.ty >= records::PERF_RECORD_USER_TYPE_START {
            own += 1;
            if r.ty == PERF_RECORD_AUXTRACE {
                aux.push(r.payload.len());
            }
            continue;
        }
        let ev = f.event_for(r.ty, r.body).unwrap();
        if let Record::Sample(s) = parse_record(r.ty, r.misc, r.body, &f.parse_info(ev)).unwrap() {
            samples[ev] += 1;
            assert_eq!(s.pid, Some(PID));
        }
    }
    (samples, own, aux)
}

#[test]
fn pipe_stream_reads_into_the_file_model() {
    let td = tracing_data(b"header_page", b"header_event", &[brk_tp(777)], b"");
    let (bytes, _) = pipe_recording(5, &td, 777, true);
    let f = PerfDataFile::from_bytes(bytes.clone()).unwrap();
    assert!(f.is_pipe());
    let names: Vec<&str> = f.events.iter().map(|e| e.name.as_str()).collect();
    // EVENT_DESC named the tracepoint `brk-desc`; the later EVENT_UPDATE renamed it.
    assert_eq!(names, ["page-faults", "syscalls:sys_enter_brk"]);
    assert_eq!(f.features.event_names, names);
    assert_eq!(f.events[0].ids, PF_IDS);
    assert_eq!(f.events[1].ids, [BRK_ID]);
    assert_eq!(f.events[0].attr.sample_type, pf_attr().sample_type);
    assert_eq!((f.events[1].attr.type_, f.events[1].attr.config), (2, 777));
    let want = test_features();
    assert_eq!(f.features.hostname, want.hostname);
    assert_eq!(f.features.osrelease, want.osrelease);
    assert_eq!(f.features.cmdline, ["memperf", "record", "true"]);
    assert_eq!(f.features.build_ids, want.build_ids);
    assert_eq!(f.features.sample_time, want.sample_time);
    assert_eq!(f.features.memperf_stats, want.memperf_stats);
    assert!(f.features.undecodable.is_empty());
    // The blob as it came, padded to 8; its formats read as a file's do.
    let blob = f.features.tracing_data.as_deref().unwrap();
    assert_eq!(blob.len(), td.len().next_multiple_of(8));
    assert_eq!(&blob[..td.len()], td);
    let formats = tracing_data::parse_event_formats(blob);
    assert_eq!(
        (formats[0].id, formats[0].name.as_str()),
        (777, "sys_enter_brk")
    );

    // Samples map to events by the attrs' ids; the AUXTRACE payload is passed over.
    let (samples, own, aux) = walk(&f);
    assert_eq!(samples, [5, 3]);
    assert_eq!(aux, [24]);
    // 2 attrs, the features, build id, id index, event update, init, aux, 2 rounds.
    assert!(own > 10, "{own}");
    assert_eq!(f.data_end(), bytes.len() as u64);

    // The same stream saved to a file reads the same.
    let dir = tempfile::tempdir().unwrap();
    let from_file = open_bytes(dir.path(), &bytes).unwrap();
    assert_eq!(walk(&from_file), (samples, own, aux));
}

fn brk_tp(id: u64) -> TracepointFormat {
    TracepointFormat {
        system: "syscalls".into(),
        name: "sys_enter_brk".into(),
        format: brk_format(id),
    }
}

#[test]
fn pipe_stream_names_and_empty_sample_time() {
    // One attr, no features: the event is named from its type; a VER0 attr (size 0 means
    // version 0, 64 bytes) with an obsolete HEADER_EVENT_TYPE names a tracepoint.
    let mut s = PipeStream::new();
    let mut attr = brk_attr(42);
    attr.size = 0;
    let mut body = attr_to_bytes(&attr)[..ATTR_SIZE_VER0].to_vec();
    body.extend_from_slice(&9u64.to_ne_bytes());
    s.record(PERF_RECORD_HEADER_ATTR, &body);
    let mut et = 42u64.to_ne_bytes().to_vec();
    et.extend_from_slice(b"syscalls:sys_enter_brk");
    et.resize(8 + 64, 0);
    s.record(PERF_RECORD_HEADER_EVENT_TYPE, &et);
    // SAMPLE_TIME as pipe mode writes it, before any sample: unknown.
    s.feature(21, &[0; 16]);
    let f = PerfDataFile::from_bytes(s.buf).unwrap();
    assert_eq!(f.events[0].name, "syscalls:sys_enter_brk");
    assert_eq!(f.events[0].ids, [9]);
    assert_eq!(f.events[0].attr.sample_type, brk_attr(42).sample_type);
    assert_eq!(f.features.sample_time, None);
}

#[test]
fn broken_pipe_streams_say_where_and_what_was_skipped() {
    let td = tracing_data(b"header_page", b"header_event", &[brk_tp(777)], b"");
    let (good, at) = pipe_recording(5, &td, 777, true);
    let err = |b: &[u8]| {
        PerfDataFile::from_bytes(b.to_vec())
            .unwrap_err()
            .to_string()
    };

    assert_eq!(
        err(&good[..16]),
        "pipe-mode stream describes no event: it ends after its 16-byte header"
    );
    // Cut inside the first attr record: nothing describes the samples.
    assert_eq!(
        err(&good[..100]),
        "pipe-mode stream describes no event: no PERF_RECORD_HEADER_ATTR record before: \
         pipe-mode stream is truncated at offset 0x10: the record there needs 152 bytes, \
         only 84 are left (skipped)"
    );
    let mut no_attr = good[..16].to_vec();
    no_attr.extend_from_slice(&good[at.first_sample..]);
    assert!(err(&no_attr).contains("no PERF_RECORD_HEADER_ATTR record in its"));

    // Cut inside the tracing data: the events are known, the records stop there.
    let cut = at.tracing_data + 16 + 10;
    let f = PerfDataFile::from_bytes(good[..cut].to_vec()).unwrap();
    assert_eq!(f.events.len(), 2);
    assert_eq!(f.features.tracing_data, None);
    let last = f.records().last().unwrap().unwrap_err().to_string();
    let wanted = 16 + td.len().next_multiple_of(8);
    assert_eq!(
        last,
        format!(
            "pipe-mode stream is truncated at offset {:#x}: the record there needs {wanted} \
             bytes, only 26 are left (skipped)",
            at.tracing_data
        )
    );

    // Cut inside the third record of the data: two read, then what was skipped.
    let comm = usize::from(u16::from_ne_bytes([
        good[at.first_sample + 6],
        good[at.first_sample + 7],
    ]));
    let mmap_at = at.first_sample + comm;
    let mmap = usize::from(u16::from_ne_bytes([good[mmap_at + 6], good[mmap_at + 7]]));
    let third = mmap_at + mmap;
    let f = PerfDataFile::from_bytes(good[..third + 12].to_vec()).unwrap();
    let tail: Vec<_> = f.records().skip_while(|r| r.is_ok()).collect();
    match tail.as_slice() {
        [
            Err(PerfDataError::StreamTruncated {
                offset, present, ..
            }),
        ] => assert_eq!((*offset, *present), (third as u64, 12)),
        other => panic!("{other:?}"),
    }
    let read = f.records().filter(|r| r.is_ok()).count();
    let before = PerfDataFile::from_bytes(good[..third].to_vec())
        .unwrap()
        .records()
        .count();
    assert_eq!(read, before);

    // A record of size 0 in the data: the records before it, then the offset.
    let mut bad = good.clone();
    bad[mmap_at + 6..mmap_at + 8].fill(0);
    let f = PerfDataFile::from_bytes(bad).unwrap();
    let errs: Vec<String> = f
        .records()
        .filter_map(Result::err)
        .map(|e| e.to_string())
        .collect();
    assert_eq!(
        errs,
        [format!(
            "record at offset {mmap_at:#x} has size 0 (< 8): file is corrupt"
        )]
    );

    // A malformed attr fails the stream, naming it.
    let mut bad_attr = good.clone();
    bad_attr[16 + 12..16 + 16].copy_from_slice(&4000u32.to_ne_bytes());
    assert_eq!(
        err(&bad_attr),
        "attr at offset 0x10: attr of 4000 bytes does not fit in its record of 152 bytes"
    );

    // zstd-compressed records (`perf record -z`) are refused, with where the first one is.
    let mut z = good[..at.first_sample].to_vec();
    z.extend_from_slice(&81u32.to_ne_bytes());
    z.extend_from_slice(&[0, 0, 16, 0]);
    z.extend_from_slice(&[0x28, 0xb5, 0x2f, 0xfd, 0, 0, 0, 0]);
    assert_eq!(
        err(&z),
        format!(
            "records are zstd-compressed (`perf record -z`, first at offset {:#x}), which \
             memperf cannot read: record without -z",
            at.first_sample
        )
    );

    // Noise over everything after the header never panics.
    let mut x = 0x9e37_79b9u32;
    for start in [16, at.tracing_data, at.first_sample] {
        let mut noise = good.clone();
        for byte in &mut noise[start..] {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *byte = x as u8;
        }
        if let Ok(f) = PerfDataFile::from_bytes(noise) {
            for r in f.records().flatten() {
                let _ = parse_record(r.ty, r.misc, r.body, &f.parse_info(0));
            }
        }
    }
}

#[test]
fn perf_script_reads_a_built_pipe_stream() {
    if !have_perf() {
        return;
    }
    let Some((id, td)) = brk_from_tracefs() else {
        return;
    };
    let (bytes, _) = pipe_recording(7, &td, id, false);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pipe.data");
    std::fs::write(&path, &bytes).unwrap();
    // perf reads the stream built here as its own: the ABI above is perf's.
    let (out, err, ok) = run_perf(&["script"], &path);
    assert!(ok, "perf script failed: {err}");
    let pf = out.lines().filter(|l| l.contains("page-faults")).count();
    let brk: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("sys_enter_brk"))
        .collect();
    assert_eq!(pf, 7, "{out}\n{err}");
    assert_eq!(brk.len(), 3, "{out}\n{err}");
    for (line, b) in brk.iter().zip(BRKS) {
        assert!(line.contains(&format!("brk: {b:#010x}")), "{line}");
    }
}

#[test]
fn reads_a_real_perf_pipe_stream() {
    if !have_perf() {
        return;
    }
    let out = Command::new("perf")
        .args([
            "record",
            "-q",
            "-e",
            "page-faults",
            "-c",
            "1",
            "-g",
            "-o",
            "-",
        ])
        .args(["--", "true"])
        .output()
        .unwrap();
    if !out.status.success() {
        skip(&format!(
            "perf record -o - failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
        return;
    }
    let f = PerfDataFile::from_bytes(out.stdout).unwrap();
    assert!(f.is_pipe());
    assert_eq!(f.events.len(), 1);
    assert!(
        f.events[0].name.starts_with("page-faults"),
        "{:?}",
        f.events
    );
    assert!(!f.events[0].ids.is_empty());
    assert!(
        f.features.cmdline.iter().any(|a| a == "-o"),
        "{:?}",
        f.features.cmdline
    );
    assert_eq!(f.features.hostname, test_features().hostname);
    assert_eq!(f.features.undecodable, Vec::<u32>::new());
    let (samples, own) = walk_perf(&f);
    assert!(samples > 10, "only {samples} samples");
    assert!(own > 5, "{own} of perf's own records");
}

/// Samples and perf's own records of a recording by perf (other processes' samples
/// included, so no pid is checked).
fn walk_perf(f: &PerfDataFile) -> (u64, u64) {
    let (mut samples, mut own) = (0, 0);
    for r in f.records() {
        let r = r.unwrap();
        if r.ty >= records::PERF_RECORD_USER_TYPE_START {
            own += 1;
            continue;
        }
        let info = f.parse_info(f.event_for(r.ty, r.body).unwrap_or(0));
        if let Ok(Record::Sample(s)) = parse_record(r.ty, r.misc, r.body, &info) {
            assert!(s.callchain.is_some_and(|c| !c.is_empty()));
            samples += 1;
        }
    }
    (samples, own)
}
