//! Parse and round-trip tests from bytes built per the kernel ABI.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;

/// Builds record bodies word by word, as the kernel lays them out.
#[derive(Default)]
struct Body(Vec<u8>);

impl Body {
    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_ne_bytes());
        self
    }
    fn u32s(mut self, a: u32, c: u32) -> Self {
        self.0.extend_from_slice(&a.to_ne_bytes());
        self.0.extend_from_slice(&c.to_ne_bytes());
        self
    }
    fn bytes(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(b);
        self
    }
}

fn info(sample_type: u32) -> ParseInfo {
    ParseInfo {
        sample_type: u64::from(sample_type),
        ..ParseInfo::default()
    }
}

/// Splits an encoded record into (type, misc, body) after checking its header size.
fn split(rec: &[u8]) -> (u32, u16, &[u8]) {
    assert!(rec.len() >= 8);
    let ty = u32::from_ne_bytes([rec[0], rec[1], rec[2], rec[3]]);
    let misc = u16::from_ne_bytes([rec[4], rec[5]]);
    let size = u16::from_ne_bytes([rec[6], rec[7]]);
    assert_eq!(usize::from(size), rec.len(), "header size");
    assert_eq!(rec.len() % 8, 0, "record length is 8-aligned");
    (ty, misc, &rec[8..])
}

const MEM_SAMPLE: u32 = b::PERF_SAMPLE_IDENTIFIER
    | b::PERF_SAMPLE_IP
    | b::PERF_SAMPLE_TID
    | b::PERF_SAMPLE_TIME
    | b::PERF_SAMPLE_ADDR
    | b::PERF_SAMPLE_CPU
    | b::PERF_SAMPLE_PERIOD
    | b::PERF_SAMPLE_WEIGHT
    | b::PERF_SAMPLE_DATA_SRC
    | b::PERF_SAMPLE_PHYS_ADDR
    | b::PERF_SAMPLE_DATA_PAGE_SIZE;

#[test]
fn parses_memory_sample_with_addr_weight_data_src() {
    let body = Body::default()
        .u64(42) // identifier
        .u64(0x401000) // ip
        .u32s(100, 101)
        .u64(123_456_789) // time
        .u64(0x7fff_0000_1000) // addr
        .u32s(1, 0) // cpu, res
        .u64(1000) // period
        .u64(187) // weight
        .u64(0x6a100142) // data_src
        .u64(0x1_2345_6000) // phys_addr
        .u64(4096); // data page size
    let s = parse_sample(&body.0, &info(MEM_SAMPLE)).unwrap();
    assert_eq!(s.identifier, Some(42));
    assert_eq!(s.ip, Some(0x401000));
    assert_eq!((s.pid, s.tid), (Some(100), Some(101)));
    assert_eq!(s.time, Some(123_456_789));
    assert_eq!(s.addr, Some(0x7fff_0000_1000));
    assert_eq!(s.cpu, Some(1));
    assert_eq!(s.period, Some(1000));
    assert_eq!(s.weight, Some(187));
    assert_eq!(s.data_src, Some(0x6a100142));
    assert_eq!(s.phys_addr, Some(0x1_2345_6000));
    assert_eq!(s.data_page_size, Some(4096));
    assert_eq!(s.code_page_size, None);
    assert_eq!(s.callchain, None);
    assert_eq!(record_identifier(9, &body.0, &info(MEM_SAMPLE)), Some(42));
    assert_eq!(
        record_time(9, &body.0, &info(MEM_SAMPLE)),
        Some(123_456_789)
    );

    // Every truncation names the field that did not fit.
    let err = parse_sample(&body.0[..body.0.len() - 8], &info(MEM_SAMPLE)).unwrap_err();
    assert!(
        matches!(
            err,
            ParseError::Truncated {
                field: "data_page_size",
                ..
            }
        ),
        "{err}"
    );
    let err = parse_sample(&body.0[..60], &info(MEM_SAMPLE)).unwrap_err();
    assert!(
        matches!(
            err,
            ParseError::Truncated {
                field: "weight",
                offset: 56,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn weight_struct_is_read_as_one_word() {
    let st = b::PERF_SAMPLE_IP | b::PERF_SAMPLE_WEIGHT_STRUCT | b::PERF_SAMPLE_DATA_SRC;
    let body = Body::default().u64(1).u64(0x0005_0004_0000_0300).u64(7);
    let s = parse_sample(&body.0, &info(st)).unwrap();
    assert_eq!(s.weight, Some(0x0005_0004_0000_0300));
    assert_eq!(s.data_src, Some(7));
}

#[test]
fn parses_raw_branch_stack_regs_and_stack_user() {
    let st = b::PERF_SAMPLE_TID
        | b::PERF_SAMPLE_CALLCHAIN
        | b::PERF_SAMPLE_RAW
        | b::PERF_SAMPLE_BRANCH_STACK
        | b::PERF_SAMPLE_REGS_USER
        | b::PERF_SAMPLE_STACK_USER;
    let pi = ParseInfo {
        regs_user: (1 << 6) | (1 << 7) | (1 << 8), // bp, sp, ip
        branch_hw_index: true,
        ..info(st)
    };
    let raw = [1u8, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]; // 4 + 12 = 16
    let mut stack = vec![0xaau8; 24];
    stack.extend_from_slice(&[0u8; 8]);
    let body = Body::default()
        .u32s(7, 8)
        .u64(2)
        .u64(b::PERF_CONTEXT_USER)
        .u64(0x1234)
        .bytes(&12u32.to_ne_bytes())
        .bytes(&raw)
        .u64(1) // branch nr
        .u64(99) // hw_idx
        .u64(0x10)
        .u64(0x20)
        .u64(0x30)
        .u64(2) // ABI_64
        .u64(0xb0)
        .u64(0x5000)
        .u64(0x401000)
        .u64(32) // stack size
        .bytes(&stack)
        .u64(24); // dyn_size < size
    let s = parse_sample(&body.0, &pi).unwrap();
    let chain: Vec<u64> = s.callchain.unwrap().iter().collect();
    assert_eq!(chain, vec![b::PERF_CONTEXT_USER, 0x1234]);
    assert_eq!(s.raw, Some(&raw[..]));
    let bs = s.branch_stack.unwrap();
    assert_eq!(bs.len(), 8 + 8 + 24);
    assert_eq!(U64Slice::new(bs).get(1), Some(99));
    let regs = s.regs_user.unwrap();
    assert_eq!(regs.get(6), Some(0xb0));
    assert_eq!(regs.get(7), Some(0x5000));
    assert_eq!(regs.get(8), Some(0x401000));
    assert_eq!(regs.get(0), None);
    let su = s.stack_user.unwrap();
    assert_eq!((su.size, su.dyn_size, su.data.len()), (32, 24, 24));
    assert!(su.data.iter().all(|&b| b == 0xaa));

    // Round trip through the encoder, keeping the parsed values.
    let mut out = Vec::new();
    encode_sample(&mut out, 2, &s, &pi, None).unwrap();
    let (ty, misc, rb) = split(&out);
    assert_eq!((ty, misc), (9, 2));
    assert_eq!(parse_sample(rb, &pi).unwrap(), s);

    // Without hw_index the branch area is 8 bytes shorter: the same bytes do not parse the same.
    let no_hw = ParseInfo {
        branch_hw_index: false,
        ..pi
    };
    assert_ne!(parse_sample(&body.0, &no_hw).ok(), Some(s));
}

#[test]
fn regs_abi_none_has_no_values_and_empty_stack_has_no_dyn_size() {
    let st = b::PERF_SAMPLE_REGS_USER | b::PERF_SAMPLE_STACK_USER | b::PERF_SAMPLE_PERIOD;
    let pi = ParseInfo {
        regs_user: 0xff,
        ..info(st)
    };
    let body = Body::default().u64(5).u64(0).u64(0);
    let s = parse_sample(&body.0, &pi).unwrap();
    assert_eq!(s.regs_user.unwrap().get(3), None);
    assert_eq!(s.stack_user.unwrap().size, 0);
    assert_eq!(s.period, Some(5));
}

#[test]
fn read_group_size_follows_read_format() {
    let pi = ParseInfo {
        read_format: u64::from(
            b::PERF_FORMAT_GROUP | b::PERF_FORMAT_ID | b::PERF_FORMAT_TOTAL_TIME_ENABLED,
        ),
        ..info(b::PERF_SAMPLE_READ | b::PERF_SAMPLE_PERIOD)
    };
    // nr=2, enabled, {value,id} x2, then nothing else.
    let body = Body::default()
        .u64(500)
        .u64(2)
        .u64(10)
        .u64(1)
        .u64(11)
        .u64(2)
        .u64(12);
    let s = parse_sample(&body.0, &pi).unwrap();
    assert_eq!(s.period, Some(500));
    assert_eq!(s.read.unwrap().len(), 48);
    let err = parse_sample(&body.0[..48], &pi).unwrap_err();
    assert!(matches!(err, ParseError::Truncated { field: "read", .. }));
    let huge = Body::default().u64(1).u64(u64::MAX);
    assert!(parse_sample(&huge.0, &pi).is_err());
}

#[test]
fn huge_callchain_count_is_an_error_not_a_panic() {
    let pi = info(b::PERF_SAMPLE_CALLCHAIN);
    for nr in [u64::MAX, u64::MAX / 8 + 1, 3] {
        let body = Body::default().u64(nr).u64(1);
        let err = parse_sample(&body.0, &pi).unwrap_err();
        assert!(err.to_string().contains("callchain"), "{err}");
    }
}

fn sid_info() -> ParseInfo {
    ParseInfo {
        sample_id_all: true,
        ..info(
            b::PERF_SAMPLE_IDENTIFIER
                | b::PERF_SAMPLE_TID
                | b::PERF_SAMPLE_TIME
                | b::PERF_SAMPLE_CPU
                | b::PERF_SAMPLE_IP,
        )
    }
}

fn sid() -> SampleId {
    SampleId {
        pid: Some(10),
        tid: Some(11),
        time: Some(5555),
        cpu: Some(1),
        identifier: Some(77),
        ..SampleId::default()
    }
}

fn parse_encoded<'a>(rec: &'a [u8], pi: &ParseInfo) -> Record<'a> {
    let (ty, misc, body) = split(rec);
    parse_record(ty, misc, body, pi).unwrap()
}

#[test]
fn comm_round_trip_and_trailer() {
    let pi = sid_info();
    assert_eq!(pi.id_trailer_len(), 32);
    let mut out = Vec::new();
    encode_comm(&mut out, 10, 11, b"true", true, &sid(), &pi);
    let rec = parse_encoded(&out, &pi);
    assert_eq!(
        rec,
        Record::Comm {
            pid: 10,
            tid: 11,
            name: b"true",
            exec: true,
            id: sid()
        }
    );
    let (ty, _, body) = split(&out);
    assert_eq!(record_identifier(ty, body, &pi), Some(77));
    assert_eq!(record_time(ty, body, &pi), Some(5555));
    // A name that fills the 8-byte padding exactly still gets its NUL.
    out.clear();
    encode_comm(&mut out, 1, 1, b"abcdefgh", false, &sid(), &pi);
    assert!(matches!(
        parse_encoded(&out, &pi),
        Record::Comm {
            name: b"abcdefgh",
            exec: false,
            ..
        }
    ));
}

#[test]
fn mmap2_round_trip_with_and_without_build_id() {
    let pi = sid_info();
    let m = Mmap2Fields {
        pid: 10,
        tid: 10,
        addr: 0x5555_0000_0000,
        len: 0x4000,
        pgoff: 0x2000,
        maj: 8,
        min: 1,
        ino: 123456,
        ino_generation: 3,
        build_id: None,
        prot: 5,
        flags: 2,
        filename: b"/usr/bin/true",
    };
    for build_id in [None, Some(&[0xab; 20][..])] {
        let m = Mmap2Fields { build_id, ..m };
        let mut out = Vec::new();
        encode_mmap2(&mut out, &m, &sid(), &pi);
        let (ty, misc, _) = split(&out);
        assert_eq!(ty, b::PERF_RECORD_MMAP2);
        assert_eq!(
            u32::from(misc) & b::PERF_RECORD_MISC_USER,
            b::PERF_RECORD_MISC_USER
        );
        let expect_ids = if build_id.is_some() {
            (0, 0, 0, 0)
        } else {
            (8, 1, 123456, 3)
        };
        let Record::Mmap2 {
            pid,
            tid,
            addr,
            len,
            pgoff,
            maj,
            min,
            ino,
            ino_generation,
            build_id: got_id,
            prot,
            flags,
            filename,
            id,
        } = parse_encoded(&out, &pi)
        else {
            panic!("not an mmap2");
        };
        assert_eq!(
            (pid, tid, addr, len, pgoff),
            (m.pid, m.tid, m.addr, m.len, m.pgoff)
        );
        assert_eq!((maj, min, ino, ino_generation), expect_ids);
        assert_eq!(
            (got_id, prot, flags, filename, id),
            (build_id, 5, 2, &b"/usr/bin/true"[..], sid())
        );
    }
}

#[test]
fn fork_exit_finished_round_round_trip() {
    let pi = sid_info();
    let t = TaskFields {
        pid: 3,
        ppid: 2,
        tid: 4,
        ptid: 2,
        time: 99,
    };
    let mut out = Vec::new();
    encode_fork(&mut out, &t, &sid(), &pi);
    assert_eq!(
        parse_encoded(&out, &pi),
        Record::Fork {
            pid: 3,
            ppid: 2,
            tid: 4,
            ptid: 2,
            time: 99,
            id: sid()
        }
    );
    out.clear();
    encode_exit(&mut out, &t, &sid(), &pi);
    assert_eq!(
        parse_encoded(&out, &pi),
        Record::Exit {
            pid: 3,
            ppid: 2,
            tid: 4,
            ptid: 2,
            time: 99,
            id: sid()
        }
    );
    out.clear();
    encode_finished_round(&mut out);
    assert_eq!(out.len(), 8);
    assert_eq!(parse_encoded(&out, &pi), Record::FinishedRound);
    let (ty, _, body) = split(&out);
    assert_eq!(record_identifier(ty, body, &pi), None);
    assert_eq!(record_time(ty, body, &pi), None);
}

#[test]
fn sample_round_trip_with_callchain_override() {
    let pi = sid_info();
    let s = Sample {
        identifier: Some(77),
        ip: Some(0x401234),
        pid: Some(10),
        tid: Some(11),
        time: Some(1),
        cpu: Some(1),
        ..Sample::default()
    };
    let mut out = Vec::new();
    encode_sample(&mut out, 2, &s, &sid_info(), None).unwrap();
    assert_eq!(parse_encoded(&out, &pi), Record::Sample(s));

    let pi = ParseInfo {
        sample_type: pi.sample_type | u64::from(b::PERF_SAMPLE_CALLCHAIN | b::PERF_SAMPLE_ADDR),
        ..pi
    };
    out.clear();
    let chain = [b::PERF_CONTEXT_USER, 0x401234, 0x401100];
    encode_sample(&mut out, 2, &s, &pi, Some(&chain)).unwrap();
    let Record::Sample(got) = parse_encoded(&out, &pi) else {
        panic!("not a sample");
    };
    assert_eq!(got.callchain.unwrap().iter().collect::<Vec<_>>(), chain);
    assert_eq!(got.addr, Some(0), "absent fields are written as 0");
    assert_eq!(got.ip, Some(0x401234));

    // Oversized records are refused and leave the buffer unchanged.
    out.clear();
    let long = vec![1u64; 9000];
    let err = encode_sample(&mut out, 2, &s, &pi, Some(&long)).unwrap_err();
    assert_eq!(err, EncodeError::TooLarge(8 + 6 * 8 + 8 + 72000));
    assert!(out.is_empty());
}

#[test]
fn lost_throttle_and_truncated_trailer() {
    let pi = sid_info();
    let mut body = Body::default().u64(5).u64(1000).0;
    encode_sample_id(&mut body, &sid(), &pi);
    assert_eq!(
        parse_record(b::PERF_RECORD_LOST, 0, &body, &pi).unwrap(),
        Record::Lost {
            id: 5,
            lost: 1000,
            sid: sid()
        }
    );
    let mut body = Body::default().u64(9).u64(5).u64(6).0;
    encode_sample_id(&mut body, &sid(), &pi);
    assert_eq!(
        parse_record(b::PERF_RECORD_UNTHROTTLE, 0, &body, &pi).unwrap(),
        Record::Throttle {
            time: 9,
            id: 5,
            stream_id: 6,
            unthrottle: true,
            sid: sid()
        }
    );
    let err = parse_record(b::PERF_RECORD_LOST, 0, &body[..16], &pi).unwrap_err();
    assert!(
        matches!(
            err,
            ParseError::Truncated {
                field: "sample_id",
                ..
            }
        ),
        "{err}"
    );
    let err = parse_record(b::PERF_RECORD_FORK, 0, &body[..36], &pi).unwrap_err();
    assert!(
        matches!(
            err,
            ParseError::Truncated {
                field: "ppid",
                offset: 4,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        parse_record(200, 0, &[], &pi).unwrap(),
        Record::Other { ty: 200 }
    );
}

#[test]
fn identifier_without_sample_identifier_uses_id_position() {
    let pi = ParseInfo {
        sample_id_all: true,
        ..info(b::PERF_SAMPLE_IP | b::PERF_SAMPLE_TID | b::PERF_SAMPLE_ID | b::PERF_SAMPLE_CPU)
    };
    let sample = Body::default().u64(1).u32s(2, 3).u64(444).u32s(0, 0);
    assert_eq!(record_identifier(9, &sample.0, &pi), Some(444));
    let sid = SampleId {
        id: Some(555),
        ..SampleId::default()
    };
    let mut out = Vec::new();
    encode_comm(&mut out, 1, 1, b"x", false, &sid, &pi);
    let (ty, _, body) = split(&out);
    assert_eq!(record_identifier(ty, body, &pi), Some(555));
}

#[test]
fn parse_info_from_attr() {
    let mut attr = perf_event_attr {
        sample_type: u64::from(b::PERF_SAMPLE_IP | b::PERF_SAMPLE_REGS_USER),
        sample_regs_user: 0x1ff,
        branch_sample_type: u64::from(b::PERF_SAMPLE_BRANCH_HW_INDEX),
        ..perf_event_attr::default()
    };
    attr.set_sample_id_all(1);
    let pi = ParseInfo::from_attr(&attr);
    assert!(pi.sample_id_all && pi.branch_hw_index);
    assert_eq!(pi.regs_user, 0x1ff);
    assert_eq!(
        pi.id_trailer_len(),
        0,
        "IP and REGS_USER are not trailer fields"
    );
}

#[test]
fn parses_mmap_and_lost_samples_without_sample_id_all() {
    let pi = info(b::PERF_SAMPLE_IP | b::PERF_SAMPLE_TIME);
    assert_eq!(pi.id_trailer_len(), 0);
    let body = Body::default()
        .u32s(5, 6)
        .u64(0x7f00_0000_0000)
        .u64(0x2000)
        .u64(0x1000)
        .bytes(b"/lib/libc.so.6\0\0");
    assert_eq!(
        parse_record(b::PERF_RECORD_MMAP, 2, &body.0, &pi).unwrap(),
        Record::Mmap {
            pid: 5,
            tid: 6,
            addr: 0x7f00_0000_0000,
            len: 0x2000,
            pgoff: 0x1000,
            filename: b"/lib/libc.so.6",
            id: SampleId::default()
        }
    );
    assert_eq!(record_time(b::PERF_RECORD_MMAP, &body.0, &pi), None);
    let lost = Body::default().u64(17);
    assert_eq!(
        parse_record(b::PERF_RECORD_LOST_SAMPLES, 0, &lost.0, &pi).unwrap(),
        Record::LostSamples {
            lost: 17,
            sid: SampleId::default()
        }
    );
    let err = parse_record(b::PERF_RECORD_MMAP, 2, &body.0[..20], &pi).unwrap_err();
    assert!(
        matches!(
            err,
            ParseError::Truncated {
                field: "len",
                offset: 16,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn parses_a_cgroup_record_and_a_samples_cgroup_id() {
    // PERF_RECORD_CGROUP: id, the path NUL-terminated and padded to 8 bytes, the trailer.
    let pi = sid_info();
    let mut body = Body::default()
        .u64(4242)
        .bytes(b"/system.slice/a.service\0")
        .0;
    encode_sample_id(&mut body, &sid(), &pi);
    assert_eq!(
        parse_record(b::PERF_RECORD_CGROUP, 0, &body, &pi).unwrap(),
        Record::Cgroup {
            id: 4242,
            path: b"/system.slice/a.service",
            sid: sid()
        }
    );
    assert_eq!(
        record_identifier(b::PERF_RECORD_CGROUP, &body, &pi),
        Some(77)
    );
    assert_eq!(record_time(b::PERF_RECORD_CGROUP, &body, &pi), Some(5555));
    let err = parse_record(b::PERF_RECORD_CGROUP, 0, &body[..36], &pi).unwrap_err();
    assert!(
        matches!(err, ParseError::Truncated { field: "id", .. }),
        "{err}"
    );
    // In a sample the id follows the physical address and precedes the page sizes.
    let pi = info(
        b::PERF_SAMPLE_IP
            | b::PERF_SAMPLE_PHYS_ADDR
            | b::PERF_SAMPLE_CGROUP
            | b::PERF_SAMPLE_DATA_PAGE_SIZE,
    );
    let sample = Body::default()
        .u64(0x401000)
        .u64(0x9000)
        .u64(4242)
        .u64(4096);
    let s = parse_sample(&sample.0, &pi).unwrap();
    assert_eq!(
        (s.phys_addr, s.cgroup, s.data_page_size),
        (Some(0x9000), Some(4242), Some(4096))
    );
}
