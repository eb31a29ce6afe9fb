//! The one process table: every process's mappings (for naming frames), its unwinding state
//! (for copied user stacks), its threads' names, and the executable files of the processes
//! that had samples. MMAP, MMAP2, COMM, FORK and EXIT are applied here and nowhere else.

use perf_event_open_sys::bindings as b;
use rustc_hash::{FxHashMap, FxHashSet};

use crate::maps::{MapAttrs, ProcessMaps};
use crate::records::Record;
use crate::unwind::{MappingEvent, Unwinders};

use super::names::Names;

/// Whether a mapping record describes executable memory: the kernel marks a mapping without
/// VM_EXEC with `PERF_RECORD_MISC_MMAP_DATA` and, in MMAP2, gives its protection; a
/// synthesized MMAP2 (perf's or memperf's, from /proc/PID/maps) has the protection too. The
/// protection decides when the record has one, the misc bit otherwise.
pub fn executable(misc: u16, prot: Option<u32>) -> bool {
    match prot {
        Some(p) if p != 0 => p & libc::PROT_EXEC as u32 != 0,
        _ => misc & b::PERF_RECORD_MISC_MMAP_DATA as u16 == 0,
    }
}

/// The process table. Each part is kept only when the session was asked for it.
#[derive(Default)]
pub struct Processes {
    maps: Option<ProcessMaps>,
    pub(super) unwinders: Option<Unwinders>,
    /// Thread names by tid, when kept.
    comms: Option<Names>,
    /// (pid, path) of executable file mappings, and the pids that had samples, when kept
    /// (the recorder's list of files whose build-ids go in the file).
    dsos: Option<Dsos>,
    held: Held,
}

/// How much of the table was held, for the summary: the bound on what memperf keeps per
/// process (see README, "Memory").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Held {
    /// The most processes whose state was held at once.
    pub peak: usize,
    /// Processes dropped because `/proc` showed them gone though no EXIT record came (it
    /// was lost with a full ring, or the process exited before the recording began).
    pub reaped: u64,
    /// Executable files of exited processes left out of the build-id list past
    /// [`EXITED_FILES_MAX`].
    pub files_left_out: u64,
    /// Names of exited processes forgotten past [`super::names::EXITED_NAMES_MAX`].
    pub names_forgotten: u64,
}

/// Files of exited processes that had samples, kept for the build-id list: one path each
/// (~100 bytes), so a recording that sees a million distinct binaries stays within a few MiB.
pub const EXITED_FILES_MAX: usize = 16 << 10;

#[derive(Default)]
struct Dsos {
    /// Executable files of the processes alive now, by pid.
    exec_maps: FxHashSet<(u32, Vec<u8>)>,
    sampled_pids: FxHashSet<u32>,
    /// The files of processes that had samples and exited: one pid each, by path, so that
    /// the table does not grow with every process a long recording sees.
    exited_hits: FxHashMap<Vec<u8>, u32>,
}

impl Processes {
    pub(super) fn new(
        maps: Option<ProcessMaps>,
        unwinders: Option<Unwinders>,
        comms: bool,
        dsos: bool,
    ) -> Processes {
        Processes {
            maps,
            unwinders,
            comms: comms.then(Names::default),
            dsos: dsos.then(Dsos::default),
            held: Held::default(),
        }
    }

    /// Processes whose state is held now (mappings or unwinding state).
    pub fn held_now(&self) -> usize {
        let unwinding = self.unwinders.as_ref().map_or(0, Unwinders::processes);
        let mapped = self.maps.as_ref().map_or(0, ProcessMaps::processes);
        unwinding.max(mapped)
    }

    pub fn held(&self) -> Held {
        Held {
            peak: self.held.peak.max(self.held_now()),
            names_forgotten: self.comms.as_ref().map_or(0, |c| c.forgotten),
            ..self.held
        }
    }

    fn note_held(&mut self) {
        self.held.peak = self.held.peak.max(self.held_now());
    }

    /// Every pid some part of the table holds state for, sorted, into `out`.
    pub(super) fn pids(&self, out: &mut Vec<u32>) {
        out.clear();
        if let Some(u) = &self.unwinders {
            out.extend(u.pids());
        }
        if let Some(m) = &self.maps {
            out.extend(m.pids());
        }
        if let Some(d) = &self.dsos {
            out.extend(d.exec_maps.iter().map(|(pid, _)| *pid));
            out.extend(d.sampled_pids.iter().copied());
        }
        out.sort_unstable();
        out.dedup();
    }

    /// Drops process `pid` as its EXIT record would have: `/proc` showed it gone and every
    /// record it wrote has been handled (see `session::reap`).
    pub(super) fn reap(&mut self, pid: u32) {
        self.exit_process(pid);
        self.held.reaped += 1;
    }

    /// Lets go of the modules no process maps and `held` does not name (see
    /// [`ProcessMaps::forget_unmapped`]).
    pub(super) fn forget_unmapped_modules(&mut self, held: impl IntoIterator<Item = u32>) -> usize {
        self.maps.as_mut().map_or(0, |m| m.forget_unmapped(held))
    }

    /// Lets go of the names of the processes that exited before the last call (see
    /// `Names::forget_exited`).
    pub(super) fn forget_exited_names(&mut self) {
        if let Some(c) = &mut self.comms {
            c.forget_exited();
        }
    }

    /// Every process's mappings, when the session keeps them.
    pub fn maps(&self) -> Option<&ProcessMaps> {
        self.maps.as_ref()
    }

    pub(super) fn take_maps(&mut self) -> Option<ProcessMaps> {
        self.maps.take()
    }

    pub(super) fn put_maps(&mut self, maps: ProcessMaps) {
        self.maps = Some(maps);
    }

    pub fn unwinders(&self) -> Option<&Unwinders> {
        self.unwinders.as_ref()
    }

    /// The name of thread `tid` of `pid`: its own COMM, else its process's.
    pub fn comm(&self, pid: u32, tid: u32) -> Option<&str> {
        let comms = self.comms.as_ref()?;
        comms.get(tid).or_else(|| comms.get(pid))
    }

    /// Executable mappings of processes that had samples: (pid, path).
    pub fn hit_dsos(&self) -> impl Iterator<Item = (u32, &[u8])> {
        self.dsos.iter().flat_map(|d| {
            let live = d
                .exec_maps
                .iter()
                .filter(|(pid, _)| d.sampled_pids.contains(pid))
                .map(|(pid, path)| (*pid, path.as_slice()));
            let exited = d
                .exited_hits
                .iter()
                .map(|(path, pid)| (*pid, path.as_slice()));
            live.chain(exited)
        })
    }

    pub(super) fn sampled(&mut self, pid: u32) {
        if let Some(d) = &mut self.dsos {
            d.sampled_pids.insert(pid);
        }
    }

    /// Applies a side-band record to every part of the table.
    pub(super) fn apply(&mut self, misc: u16, rec: &Record<'_>) {
        match *rec {
            Record::Mmap {
                pid,
                addr,
                len,
                pgoff,
                filename,
                ..
            } => self.mmap(
                MappingEvent {
                    pid,
                    start: addr,
                    len,
                    pgoff,
                    exec: executable(misc, None),
                    path: filename,
                    dev_ino: None,
                    build_id: None,
                },
                MapAttrs::default(),
            ),
            Record::Mmap2 {
                pid,
                addr,
                len,
                pgoff,
                maj,
                min,
                ino,
                ino_generation,
                build_id,
                prot,
                flags,
                filename,
                ..
            } => self.mmap(
                MappingEvent {
                    pid,
                    start: addr,
                    len,
                    pgoff,
                    exec: executable(misc, Some(prot)),
                    path: filename,
                    dev_ino: build_id.is_none().then_some((maj, min, ino)),
                    build_id,
                },
                MapAttrs {
                    prot,
                    flags,
                    maj,
                    min,
                    ino,
                    ino_generation,
                },
            ),
            Record::Comm {
                pid,
                tid,
                name,
                exec,
                ..
            } => self.comm_record(pid, tid, name, exec),
            Record::Fork {
                pid,
                ppid,
                tid,
                ptid,
                ..
            } => self.fork(pid, ppid, tid, ptid),
            // A thread's name goes with it (a pool that churns threads would grow the table
            // for good); a process's stays, within a bound (`session::names`).
            Record::Exit { pid, tid, .. } if pid != tid => {
                if let Some(c) = &mut self.comms {
                    c.thread_exit(tid);
                }
            }
            Record::Exit { pid, tid, .. } if pid == tid => self.exit_process(pid),
            _ => {}
        }
    }

    /// A process exited: its mappings and unwinding state go (its name stays, see above);
    /// of its executable files, those it had samples in stay for the build-id list.
    fn exit_process(&mut self, pid: u32) {
        self.note_held();
        if let Some(c) = &mut self.comms {
            c.process_exit(pid);
        }
        if let Some(m) = &mut self.maps {
            m.exit(pid);
        }
        if let Some(u) = &mut self.unwinders {
            u.handle_exit(pid);
        }
        if let Some(d) = &mut self.dsos {
            let sampled = d.sampled_pids.remove(&pid);
            let mine: Vec<(u32, Vec<u8>)> = d
                .exec_maps
                .iter()
                .filter(|(p, _)| *p == pid)
                .cloned()
                .collect();
            for entry in mine {
                d.exec_maps.remove(&entry);
                if !sampled || d.exited_hits.contains_key(&entry.1) {
                    continue;
                }
                if d.exited_hits.len() < EXITED_FILES_MAX {
                    d.exited_hits.insert(entry.1, pid);
                } else {
                    self.held.files_left_out += 1;
                }
            }
        }
    }

    fn mmap(&mut self, ev: MappingEvent<'_>, attrs: MapAttrs) {
        // The kernel's own mapping ([kernel.kallsyms]_text) has pid -1: kernel frames are
        // named through kallsyms.
        if ev.pid == u32::MAX {
            return;
        }
        if let Some(d) = &mut self.dsos
            && ev.exec
            && !ev.path.starts_with(b"[")
        {
            d.exec_maps.insert((ev.pid, ev.path.to_vec()));
        }
        if let Some(m) = &mut self.maps {
            m.map_with(
                ev.pid,
                (ev.start, ev.len, ev.pgoff),
                ev.path,
                ev.build_id,
                attrs,
            );
        }
        if let Some(u) = &mut self.unwinders {
            u.handle_mmap(&ev);
        }
    }

    fn comm_record(&mut self, pid: u32, tid: u32, name: &[u8], exec: bool) {
        if exec {
            if let Some(m) = &mut self.maps {
                m.exec(pid);
            }
            if let Some(u) = &mut self.unwinders {
                u.handle_exec(pid);
            }
            if let Some(d) = &mut self.dsos {
                d.exec_maps.retain(|(p, _)| *p != pid);
            }
        }
        if let Some(c) = &mut self.comms {
            c.set(tid, String::from_utf8_lossy(name).into_owned());
        }
    }

    fn fork(&mut self, pid: u32, ppid: u32, tid: u32, ptid: u32) {
        if pid != ppid {
            if let Some(m) = &mut self.maps {
                m.fork(pid, ppid);
            }
            if let Some(u) = &mut self.unwinders {
                u.handle_fork(pid, ppid);
            }
            if let Some(d) = &mut self.dsos {
                let inherited: Vec<_> = d
                    .exec_maps
                    .iter()
                    .filter(|(p, _)| *p == ppid)
                    .map(|(_, path)| (pid, path.clone()))
                    .collect();
                d.exec_maps.extend(inherited);
            }
        }
        // A new thread or process starts with its parent's name.
        if let Some(c) = &mut self.comms
            && let Some(name) = c.get(ptid).map(str::to_string)
        {
            c.set(tid, name);
        }
    }
}

impl super::Session {
    /// Lets go of the modules no process maps now and `held` does not name: for a handler
    /// that holds no other module id (`memperf agent`, between windows). How many went.
    pub fn forget_unmapped_modules(&mut self, held: impl IntoIterator<Item = u32>) -> usize {
        self.procs.forget_unmapped_modules(held)
    }

    /// At a window's end, for a handler that names a process's samples as they come and
    /// ships them by window (`memperf agent`): lets go of the names of the processes that
    /// exited before the last window's end. Without it an exited process's name stays
    /// until [`EXITED_NAMES_MAX`](super::EXITED_NAMES_MAX) later exits push it out, as the
    /// outputs of a whole run need (`record`, `leak`).
    pub fn forget_exited_names(&mut self) {
        self.procs.forget_exited_names();
    }

    /// Gives back the maps [`Session::take_maps`] took, for a handler that names a window's
    /// frames with them while the recording goes on (`memperf agent`), instead of copying them.
    pub fn put_maps(&mut self, maps: ProcessMaps) {
        self.procs.put_maps(maps);
    }
}

#[cfg(test)]
mod tests {
    use super::{Processes, executable};
    use crate::records::{Record, SampleId};
    use perf_event_open_sys::bindings as b;

    /// A run that sees processes come and go for days (`memperf agent`) holds the names of
    /// the live ones and of the latest exited ones only; today's main held every exited
    /// process's name, by pid, for the rest of the run.
    #[test]
    fn names_of_exited_processes_are_bounded() {
        let mut p = Processes::new(None, None, true, false);
        let max = crate::session::EXITED_NAMES_MAX as u32;
        let (first, last) = (1000, 1000 + 3 * max);
        for pid in first..=last {
            let name = format!("p{pid}");
            let id = SampleId::default();
            p.apply(
                0,
                &Record::Comm {
                    pid,
                    tid: pid,
                    name: name.as_bytes(),
                    exec: true,
                    id,
                },
            );
            let (ppid, ptid, time) = (1, 1, 0);
            p.apply(
                0,
                &Record::Exit {
                    pid,
                    ppid,
                    tid: pid,
                    ptid,
                    time,
                    id,
                },
            );
        }
        assert_eq!(p.comm(last, last), Some(format!("p{last}").as_str()));
        assert_eq!(p.comm(first, first), None);
        assert_eq!(p.held().names_forgotten, u64::from(last - first + 1 - max));
    }

    const DATA: u16 = b::PERF_RECORD_MISC_MMAP_DATA as u16;
    const RX: u32 = (libc::PROT_READ | libc::PROT_EXEC) as u32;
    const RW: u32 = (libc::PROT_READ | libc::PROT_WRITE) as u32;

    #[test]
    fn executable_follows_the_protection_then_the_data_bit() {
        // The kernel's MMAP2 records: the two agree.
        assert!(executable(0, Some(RX)));
        assert!(!executable(DATA, Some(RW)));
        // A synthesized record of a data mapping without the misc bit: the protection decides.
        assert!(!executable(0, Some(RW)));
        // MMAP (no protection), or an MMAP2 whose protection is unknown: the misc bit decides.
        assert!(executable(0, None));
        assert!(!executable(DATA, None));
        assert!(executable(0, Some(0)));
        assert!(!executable(DATA, Some(0)));
    }
}
