//! The samples left out: memperf's own, recording system-wide, and those of its child
//! between the fork and the exec of the command (`sys::child::GatedChild`), which runs
//! memperf's code under memperf's name.

use crate::records::{Record, Sample};

use super::Session;

impl Session {
    /// Leaves out (and counts) the samples of process `pid`.
    pub fn with_exclude_pid(mut self, pid: Option<u32>) -> Self {
        self.exclude_pid = pid;
        self
    }

    /// Leaves out (and counts with memperf's own) the samples of process `pid` until a COMM
    /// record says it exec'd: memperf's child between its fork and the exec of the command
    /// (`sys::child::GatedChild`), which runs memperf's code under memperf's name.
    pub fn with_exclude_until_exec(mut self, pid: Option<u32>) -> Self {
        self.exclude_until_exec = pid;
        self
    }

    /// Whether `sample` is left out (and counted in `SessionStats::excluded_self`).
    pub(super) fn excluded(&mut self, sample: &Sample<'_>) -> bool {
        let out = sample.pid.is_some()
            && (sample.pid == self.exclude_pid || sample.pid == self.exclude_until_exec);
        if out {
            self.stats.excluded_self += 1;
        }
        out
    }

    /// A COMM record of an exec by memperf's child: its samples are the command's from now.
    pub(super) fn note_exec(&mut self, rec: &Record<'_>) {
        if let Record::Comm {
            pid, exec: true, ..
        } = *rec
            && self.exclude_until_exec == Some(pid)
        {
            self.exclude_until_exec = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use perf_event_open_sys::bindings::{PERF_RECORD_COMM, PERF_RECORD_SAMPLE};
    use rustc_hash::FxHashMap;

    use crate::records::{self, ParseInfo, Sample};
    use crate::session::{Handler, Keep, SampleCtx, Session};

    /// Counts the samples it is handed.
    struct Count(usize);

    impl Handler for Count {
        fn sample(&mut self, _: &SampleCtx<'_>) -> io::Result<()> {
            self.0 += 1;
            Ok(())
        }
    }

    #[test]
    fn memperfs_child_is_left_out_until_it_execs_the_command() {
        #![allow(clippy::unwrap_used)]
        use perf_event_open_sys::bindings as b;
        let mut attr = b::perf_event_attr {
            sample_type: u64::from(b::PERF_SAMPLE_TID | b::PERF_SAMPLE_TIME),
            ..b::perf_event_attr::default()
        };
        attr.set_sample_id_all(1);
        let info = ParseInfo::from_attr(&attr);
        let mut session = Session::new(vec![info], FxHashMap::default(), Keep::default())
            .with_exclude_pid(Some(41))
            .with_exclude_until_exec(Some(42));
        let mut count = Count(0);
        let sample = |session: &mut Session, count: &mut Count, pid: u32| {
            let s = Sample {
                pid: Some(pid),
                tid: Some(pid),
                time: Some(1),
                ..Sample::default()
            };
            let mut buf = Vec::new();
            records::encode_sample(&mut buf, 0, &s, &info, None).unwrap();
            session.handle(PERF_RECORD_SAMPLE, 0, &buf, count).unwrap();
        };
        let comm = |session: &mut Session, count: &mut Count, exec: bool| {
            let sid = records::SampleId {
                pid: Some(42),
                tid: Some(42),
                time: Some(2),
                ..records::SampleId::default()
            };
            let mut buf = Vec::new();
            records::encode_comm(&mut buf, 42, 42, b"memperf", exec, &sid, &info);
            let misc = u16::from_ne_bytes([buf[4], buf[5]]);
            session.handle(PERF_RECORD_COMM, misc, &buf, count).unwrap();
        };
        // Between fork and exec: memperf's code, left out with memperf's own.
        sample(&mut session, &mut count, 42);
        sample(&mut session, &mut count, 41);
        sample(&mut session, &mut count, 7);
        // A thread renamed is no exec.
        comm(&mut session, &mut count, false);
        sample(&mut session, &mut count, 42);
        assert_eq!((count.0, session.stats().excluded_self), (1, 3));
        // The command's samples, once it exec'd, are kept.
        comm(&mut session, &mut count, true);
        sample(&mut session, &mut count, 42);
        sample(&mut session, &mut count, 41);
        assert_eq!((count.0, session.stats().excluded_self), (2, 4));
    }
}
