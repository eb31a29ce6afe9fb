//! Tests for `ring`: wrap-around on a fake in-memory ring, corruption, and one live ring.

#![allow(clippy::unwrap_used, clippy::panic)]

use super::*;

/// Writes one record (header + payload) at logical position `pos` of a circular `data` area,
/// wrapping; returns the position after it.
fn put(data: &mut [u8], pos: u64, ty: u32, misc: u16, payload: &[u8]) -> u64 {
    let size = u16::try_from(HEADER_SIZE + payload.len()).unwrap();
    let mut rec = Vec::new();
    rec.extend_from_slice(&ty.to_ne_bytes());
    rec.extend_from_slice(&misc.to_ne_bytes());
    rec.extend_from_slice(&size.to_ne_bytes());
    rec.extend_from_slice(payload);
    let n = data.len() as u64;
    for (i, b) in rec.iter().enumerate() {
        data[((pos + i as u64) % n) as usize] = *b;
    }
    pos + rec.len() as u64
}

/// A record read back: (ty, misc, bytes including the header).
type Rec = (u32, u16, Vec<u8>);

/// Reads every record of a snapshot, returning them, the stored tail and the corrupt flag.
fn drain(data: &[u8], head: u64, tail: u64) -> (Vec<Rec>, u64, bool) {
    let tail_word = AtomicU64::new(tail);
    let mut scratch = Vec::new();
    let mut out = Vec::new();
    let corrupt;
    {
        let mut reader = RingReader::from_parts(data, head, tail, &tail_word, &mut scratch);
        while let Some(rec) = reader.peek() {
            out.push((rec.ty, rec.misc, rec.bytes.to_vec()));
            reader.consume();
        }
        corrupt = reader.corrupt();
    }
    (out, tail_word.load(Ordering::Relaxed), corrupt)
}

#[test]
fn record_wrapping_the_end_is_contiguous() {
    let mut data = vec![0u8; 64];
    let tail = 64 * 3 + 48; // 16 bytes before the end, after a few laps
    let payload: Vec<u8> = (1..=24).collect();
    let head = put(&mut data, tail, 9, 2, &payload);
    let (recs, stored_tail, corrupt) = drain(&data, head, tail);
    assert!(!corrupt);
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].0, 9);
    assert_eq!(recs[0].1, 2);
    assert_eq!(recs[0].2.len(), 32);
    assert_eq!(&recs[0].2[8..], &payload[..]);
    assert_eq!(stored_tail, head);
}

#[test]
fn header_split_by_the_end() {
    let mut data = vec![0u8; 64];
    let tail = 60; // the header itself straddles the end
    let head = put(&mut data, tail, 10, 0, &[7u8; 8]);
    let (recs, stored_tail, corrupt) = drain(&data, head, tail);
    assert!(!corrupt);
    assert_eq!(
        recs,
        vec![(
            10,
            0,
            [&10u32.to_ne_bytes()[..], &[0, 0, 16, 0], &[7u8; 8]].concat()
        )]
    );
    assert_eq!(stored_tail, 76);
}

#[test]
fn every_start_offset_and_size_round_trips() {
    // Property-style: for every 8-aligned start and a mix of record sizes, what is written is
    // what is read, in order, and the tail ends at head.
    for start in (0..128u64).step_by(8) {
        for sizes in [&[8usize, 16, 24][..], &[32, 8, 40, 0], &[64, 32]] {
            let mut data = vec![0u8; 128];
            let tail = 1024 + start;
            let mut head = tail;
            let mut expected = Vec::new();
            for (i, &len) in sizes.iter().enumerate() {
                let payload: Vec<u8> = (0..len).map(|b| (b + i * 31) as u8).collect();
                head = put(&mut data, head, i as u32 + 1, i as u16, &payload);
                expected.push((i as u32 + 1, payload));
            }
            let (recs, stored_tail, corrupt) = drain(&data, head, tail);
            assert!(!corrupt, "start {start} sizes {sizes:?}");
            assert_eq!(stored_tail, head);
            let got: Vec<(u32, Vec<u8>)> = recs
                .into_iter()
                .map(|(t, _, b)| (t, b[8..].to_vec()))
                .collect();
            assert_eq!(got, expected, "start {start} sizes {sizes:?}");
        }
    }
}

#[test]
fn consumed_space_is_handed_back_during_a_long_round() {
    // 1 MiB of 1 KiB records: the tail moves every PUBLISH_EVERY bytes while the reader
    // still reads, never past what it consumed, and reaches the head when it is dropped.
    let mut data = vec![0u8; 1 << 20];
    let tail = 512;
    let mut head = tail;
    let payload = vec![7u8; 1024 - HEADER_SIZE];
    while head + 1024 <= tail + data.len() as u64 {
        head = put(&mut data, head, 9, 0, &payload);
    }
    let tail_word = AtomicU64::new(tail);
    let mut scratch = Vec::new();
    let mut stores = Vec::new();
    {
        let mut r = RingReader::from_parts(&data, head, tail, &tail_word, &mut scratch);
        let mut consumed = tail;
        while r.peek().is_some() {
            r.consume();
            consumed += 1024;
            let t = tail_word.load(Ordering::Acquire);
            assert!(t <= consumed && consumed - t < PUBLISH_EVERY as u64);
            if stores.last() != Some(&t) {
                stores.push(t);
            }
        }
    }
    assert_eq!(stores.len(), (head - tail) as usize / PUBLISH_EVERY + 1);
    assert_eq!(tail_word.load(Ordering::Relaxed), head);
}

#[test]
fn peek_does_not_consume() {
    let mut data = vec![0u8; 64];
    let head = put(&mut data, 0, 1, 0, &[1; 8]);
    let head = put(&mut data, head, 2, 0, &[2; 8]);
    let tail_word = AtomicU64::new(0);
    let mut scratch = Vec::new();
    {
        let mut r = RingReader::from_parts(&data, head, 0, &tail_word, &mut scratch);
        assert_eq!(r.pending_bytes(), 32);
        assert_eq!(r.peek().map(|x| x.ty), Some(1));
        assert_eq!(r.peek().map(|x| x.ty), Some(1));
        r.consume();
        assert_eq!(r.pending_bytes(), 16);
        assert_eq!(r.peek().map(|x| x.ty), Some(2));
        // Not consumed: the tail stops after the first record.
    }
    assert_eq!(tail_word.load(Ordering::Relaxed), 16);
}

#[test]
fn corrupt_headers_stop_reading_without_panicking() {
    // size < 8
    let mut data = vec![0u8; 64];
    data[..8].copy_from_slice(&[9, 0, 0, 0, 0, 0, 4, 0]);
    let (recs, tail, corrupt) = drain(&data, 32, 0);
    assert!(recs.is_empty() && corrupt && tail == 0);

    // size runs past head
    let mut data = vec![0u8; 64];
    put(&mut data, 0, 9, 0, &[0; 40]);
    let (recs, _, corrupt) = drain(&data, 24, 0);
    assert!(recs.is_empty() && corrupt);

    // fewer pending bytes than a header
    let (recs, _, corrupt) = drain(&data, 4, 0);
    assert!(recs.is_empty() && corrupt);

    // head more than a buffer ahead of tail
    let (recs, _, corrupt) = drain(&data, 1000, 0);
    assert!(recs.is_empty() && corrupt);
}

#[test]
fn skip_all_hands_everything_back() {
    let mut data = vec![0u8; 64];
    data[..8].copy_from_slice(&[9, 0, 0, 0, 0, 0, 0, 0]);
    let tail_word = AtomicU64::new(0);
    let mut scratch = Vec::new();
    {
        let mut r = RingReader::from_parts(&data, 40, 0, &tail_word, &mut scratch);
        assert!(r.peek().is_none() && r.corrupt());
        r.skip_all();
        assert_eq!(r.pending_bytes(), 0);
    }
    assert_eq!(tail_word.load(Ordering::Relaxed), 40);
}

#[test]
fn rejects_non_power_of_two() {
    let fd = OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
    let err = RingBuffer::new(fd, 3).err().unwrap();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
}

#[test]
fn live_page_fault_samples() {
    use crate::events::Period;
    use crate::sys::attr::{AttrConfig, build_attr};
    use crate::sys::open::{FeatureState, SysOpener, open_event};
    use perf_event_open_sys::bindings as b;

    if !crate::sys::testutil::require_perf("a software page-faults event") {
        return;
    }
    let cfg = AttrConfig {
        type_: b::PERF_TYPE_SOFTWARE,
        config: u64::from(b::PERF_COUNT_SW_PAGE_FAULTS),
        period: Period::Count(1),
        sample_type: u64::from(b::PERF_SAMPLE_IP | b::PERF_SAMPLE_TID | b::PERF_SAMPLE_TIME),
        ..AttrConfig::default()
    };
    let mut attr = build_attr(&cfg);
    let mut features = FeatureState::default();
    let fd = open_event(&SysOpener, &mut attr, 0, -1, &mut features).unwrap();
    let mut ring = RingBuffer::new(fd, 8).unwrap();
    assert_eq!(ring.data_size(), 8 * super::super::page_size());
    assert!(!ring.has_data(), "a fresh ring holds records");
    crate::sys::testutil::touch_fresh_pages(64);
    crate::sys::ioc_disable(ring.fd()).unwrap();
    assert!(
        ring.has_data(),
        "the faults' samples are not seen in data_head"
    );

    // SAFETY: getpid and gettid have no preconditions.
    let (pid, tid) = unsafe { (libc::getpid() as u32, libc::gettid() as u32) };
    let mut ours = 0;
    let mut reader = ring.reader();
    while let Some(rec) = reader.peek() {
        if rec.ty == b::PERF_RECORD_SAMPLE {
            // header, ip, pid, tid, time
            assert_eq!(rec.bytes.len(), 32);
            let p = u32::from_ne_bytes(rec.bytes[16..20].try_into().unwrap());
            let t = u32::from_ne_bytes(rec.bytes[20..24].try_into().unwrap());
            assert!(
                p == pid && t == tid,
                "sample from {p}/{t}, expected {pid}/{tid}"
            );
            ours += 1;
        }
        reader.consume();
    }
    assert!(!reader.corrupt());
    assert_eq!(reader.pending_bytes(), 0);
    drop(reader);
    assert!(
        !ring.has_data(),
        "the ring is still seen holding records once read"
    );
    assert!(
        ours >= 64,
        "only {ours} page-fault samples for 64 touched pages"
    );
}

/// The last record an earlier head covered is handed over, a wrapping one too, and none is
/// consumed: the snapshot reads them all again.
#[test]
fn the_last_record_before_an_earlier_head_is_seen_without_being_consumed() {
    let mut data = vec![0u8; 64];
    let tail = 64 * 5 + 40;
    let first = put(&mut data, tail, 1, 0, &[1; 16]);
    let earlier_head = put(&mut data, first, 2, 0, &[2; 8]);
    let head = put(&mut data, earlier_head, 3, 0, &[3; 8]);
    let tail_word = AtomicU64::new(tail);
    let mut scratch = Vec::new();
    {
        let mut r = RingReader::from_parts(&data, head, tail, &tail_word, &mut scratch);
        let last =
            |r: &mut RingReader<'_>, at| r.with_last_before(at, |rec| (rec.ty, rec.bytes.len()));
        assert_eq!(last(&mut r, earlier_head), Some((2, 16)));
        assert_eq!(
            last(&mut r, first),
            Some((1, 24)),
            "the first record wraps the end"
        );
        assert_eq!(last(&mut r, tail), None, "nothing lies before the tail");
        assert_eq!(
            last(&mut r, head + 64),
            Some((3, 16)),
            "no further than the snapshot"
        );
        let mut all = Vec::new();
        while let Some(rec) = r.peek() {
            all.push(rec.ty);
            r.consume();
        }
        assert_eq!(all, [1, 2, 3]);
    }
    assert_eq!(tail_word.load(Ordering::Relaxed), head);
}

/// A broken header past the last good record ends the look there, and the snapshot still
/// hands on the good records (the look does not mark the ring corrupt).
#[test]
fn a_broken_header_ends_the_look_at_the_last_good_record() {
    let mut data = vec![0u8; 64];
    let first = put(&mut data, 0, 1, 0, &[1; 8]);
    let broken = put(&mut data, first, 2, 0, &[2; 8]);
    data[broken as usize + 6] = 4; // a size below the header's own
    let head = broken + 16;
    let tail_word = AtomicU64::new(0);
    let mut scratch = Vec::new();
    let mut r = RingReader::from_parts(&data, head, 0, &tail_word, &mut scratch);
    assert_eq!(r.with_last_before(head, |rec| rec.ty), Some(2));
    assert!(!r.corrupt());
    assert_eq!(r.peek().map(|rec| rec.ty), Some(1));
}
