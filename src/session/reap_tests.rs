#![allow(clippy::unwrap_used)]

use std::cell::Cell;

use perf_event_open_sys::bindings as b;
use rustc_hash::FxHashMap;

use super::Reaper;
use crate::maps::ProcessMaps;
use crate::records::{self, Mmap2Fields, ParseInfo, SampleId};
use crate::session::{Handler, Keep, SampleCtx, Session};

/// The process the tests map, which `/proc` shows gone unless `ALIVE` says otherwise.
const PID: u32 = 4242;
const TEXT: u64 = 0x40_0000;

thread_local! {
    static ALIVE: Cell<bool> = const { Cell::new(false) };
}

fn alive(pid: u32) -> bool {
    pid != PID || ALIVE.with(Cell::get)
}

struct Nothing;

impl Handler for Nothing {
    fn sample(&mut self, _: &SampleCtx<'_>) -> std::io::Result<()> {
        Ok(())
    }
}

/// A session keeping mappings, with the program of [`PID`] mapped at [`TEXT`].
fn session_with_mapped_process() -> Session {
    let mut attr = b::perf_event_attr {
        sample_type: u64::from(b::PERF_SAMPLE_TID | b::PERF_SAMPLE_TIME),
        ..b::perf_event_attr::default()
    };
    attr.set_sample_id_all(1);
    let info = ParseInfo::from_attr(&attr);
    let keep = Keep {
        maps: Some(ProcessMaps::default()),
        ..Keep::default()
    };
    let mut session = Session::new(vec![info], FxHashMap::default(), keep);
    let sid = SampleId {
        pid: Some(PID),
        tid: Some(PID),
        time: Some(1),
        ..SampleId::default()
    };
    let m = Mmap2Fields {
        pid: PID,
        tid: PID,
        addr: TEXT,
        len: 0x1000,
        prot: (libc::PROT_READ | libc::PROT_EXEC) as u32,
        filename: b"/usr/bin/pagefault",
        ..Mmap2Fields::default()
    };
    let mut buf = Vec::new();
    records::encode_mmap2(&mut buf, &m, &sid, &info);
    let misc = u16::from_ne_bytes([buf[4], buf[5]]);
    session
        .handle(b::PERF_RECORD_MMAP2, misc, &buf, &mut Nothing)
        .unwrap();
    session
}

fn mapped(session: &Session) -> bool {
    let maps = session.procs().maps().unwrap();
    maps.lookup(PID, TEXT + 0x10).is_some()
}

fn reaper() -> Reaper {
    Reaper {
        alive,
        ..Reaper::new()
    }
}

/// A process `/proc` shows gone keeps its mappings until the drain has handed on every
/// record the rings held when the round after the look began, however many rounds that
/// takes (the drain holds back the last milliseconds of each ring by a clock that may read
/// behind): its last samples are still named by them.
#[test]
fn a_process_found_gone_keeps_its_mappings_until_the_drain_passes_the_look() {
    ALIVE.with(|a| a.set(false));
    let mut session = session_with_mapped_process();
    let mut r = reaper();
    // Round 1 looks: gone. Its records are in the rings read at the start of round 2.
    r.round(&mut session, 1, 1);
    assert!(mapped(&session));
    // Rounds 2 to 5 leave records of round 2's start in a ring.
    for round in 2..=5 {
        r.round(&mut session, round, 1);
        assert!(mapped(&session), "dropped at round {round}");
    }
    assert_eq!(session.procs().held().reaped, 0);
    // Round 6 reads every ring past where round 2 began.
    r.round(&mut session, 6, 2);
    assert!(!mapped(&session));
    assert_eq!(session.procs().held().reaped, 1);
}

/// A pid gone at the look that a new process took before the drain passed it is the new
/// process's: its state stays.
#[test]
fn a_pid_a_new_process_took_is_not_dropped() {
    ALIVE.with(|a| a.set(false));
    let mut session = session_with_mapped_process();
    let mut r = reaper();
    r.round(&mut session, 1, 1);
    ALIVE.with(|a| a.set(true));
    r.round(&mut session, 2, 2);
    assert!(mapped(&session));
    assert_eq!(session.procs().held().reaped, 0);
}
