//! The one consumer of records: process tracking, online unwinding, dispatch.
//!
//! Live recording feeds it records from the ring buffers in time order; it keeps
//! the process table (through the unwinders), rewrites samples whose copied user
//! stack it unwound into ordinary callchains, and passes every record on to a
//! sink (the perf.data writer).

use std::io;

use perf_event_open_sys::bindings::{
    PERF_CONTEXT_USER, PERF_RECORD_COMM, PERF_RECORD_EXIT, PERF_RECORD_FORK, PERF_RECORD_LOST,
    PERF_RECORD_LOST_SAMPLES, PERF_RECORD_MMAP, PERF_RECORD_MMAP2, PERF_RECORD_SAMPLE,
    PERF_RECORD_THROTTLE, PERF_RECORD_UNTHROTTLE,
};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::perfdata::PerfDataWriter;
use crate::record::{self, ParseInfo, Record, Sample};
use crate::unwind::{MappingEvent, UnwindOutcome, Unwinders, UserRegs};

/// Where records go once the session has seen them.
pub trait RecordSink {
    fn write_record(&mut self, bytes: &[u8]) -> io::Result<()>;
}

impl RecordSink for PerfDataWriter {
    fn write_record(&mut self, bytes: &[u8]) -> io::Result<()> {
        PerfDataWriter::write_record(self, bytes)
    }
}

/// A sink that keeps nothing (benchmarks, dry runs).
pub struct NullSink;

impl RecordSink for NullSink {
    fn write_record(&mut self, _bytes: &[u8]) -> io::Result<()> {
        Ok(())
    }
}

/// One recorded event as the session sees it.
#[derive(Debug, Clone)]
pub struct SessionEvent {
    pub name: String,
    /// How its samples are laid out in the ring buffer.
    pub ring_info: ParseInfo,
    /// How its samples are laid out in the output (differs after online unwinding).
    pub out_info: ParseInfo,
}

/// The longest callchain written for one sample (perf's own default limit is 127 frames;
/// this keeps deep recursion while fitting any record in 64 KiB).
const MAX_CHAIN_FRAMES: usize = 4096;

/// Counters printed in the end-of-run summary.
#[derive(Debug, Default, Clone)]
pub struct SessionStats {
    pub samples: Vec<u64>,
    /// Events the kernel dropped because a ring buffer was full (PERF_RECORD_LOST).
    pub lost: u64,
    pub lost_records: u64,
    /// Samples dropped by the kernel for other reasons (PERF_RECORD_LOST_SAMPLES).
    pub lost_samples: u64,
    pub throttled: u64,
    pub unthrottled: u64,
    /// Records that could not be parsed (kept out of the file, counted here).
    pub malformed: u64,
    pub unwound: u64,
    pub truncated: u64,
    pub first_time: Option<u64>,
    pub last_time: Option<u64>,
    pub kernel_stacks: bool,
    /// Losses and throttling per CPU (from the records' sample_id trailers).
    pub per_cpu: std::collections::BTreeMap<u32, CpuLosses>,
}

/// What one CPU's ring lost or had throttled.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CpuLosses {
    pub lost: u64,
    pub lost_samples: u64,
    pub throttled: u64,
}

/// The consumer of live records.
pub struct Session {
    events: Vec<SessionEvent>,
    ids: FxHashMap<u64, usize>,
    /// Some when user stacks are unwound while recording.
    unwinders: Option<Unwinders>,
    stats: SessionStats,
    sampled_pids: FxHashSet<u32>,
    exec_maps: FxHashSet<(u32, Vec<u8>)>,
    frames: Vec<u64>,
    chain: Vec<u64>,
    out: Vec<u8>,
}

impl Session {
    pub fn new(
        events: Vec<SessionEvent>,
        ids: FxHashMap<u64, usize>,
        unwinders: Option<Unwinders>,
    ) -> Self {
        let n = events.len();
        Session {
            events,
            ids,
            unwinders,
            stats: SessionStats {
                samples: vec![0; n],
                ..SessionStats::default()
            },
            sampled_pids: FxHashSet::default(),
            exec_maps: FxHashSet::default(),
            frames: Vec::with_capacity(128),
            chain: Vec::with_capacity(256),
            out: Vec::with_capacity(2048),
        }
    }

    pub fn stats(&self) -> &SessionStats {
        &self.stats
    }

    pub fn unwinders(&self) -> Option<&Unwinders> {
        self.unwinders.as_ref()
    }

    /// Executable mappings of processes that had samples: (pid, path).
    pub fn hit_dsos(&self) -> impl Iterator<Item = (u32, &[u8])> {
        self.exec_maps
            .iter()
            .filter(|(pid, _)| self.sampled_pids.contains(pid))
            .map(|(pid, path)| (*pid, path.as_slice()))
    }

    /// The layout shared by every event's sample_id trailer.
    pub fn side_info(&self) -> &ParseInfo {
        // Every attr is opened with the same sample_id fields, so the first one serves.
        &self.events[0].ring_info
    }

    /// The timestamp used to order a record, without parsing all of it.
    pub fn record_time(&self, ty: u32, body: &[u8]) -> Option<u64> {
        let info = if ty == PERF_RECORD_SAMPLE {
            &self.events[self.event_of(ty, body)?].ring_info
        } else {
            self.side_info()
        };
        record::record_time(ty, body, info)
    }

    fn event_of(&self, ty: u32, body: &[u8]) -> Option<usize> {
        if self.events.len() == 1 {
            return Some(0);
        }
        let id = record::record_identifier(ty, body, self.side_info())?;
        self.ids.get(&id).copied()
    }

    /// Handles one complete record (header included).
    pub fn handle(
        &mut self,
        ty: u32,
        misc: u16,
        bytes: &[u8],
        sink: &mut dyn RecordSink,
    ) -> io::Result<()> {
        let Some(body) = bytes.get(8..) else {
            self.stats.malformed += 1;
            return Ok(());
        };
        if ty == PERF_RECORD_SAMPLE {
            return self.handle_sample(misc, bytes, body, sink);
        }
        let info = *self.side_info();
        match record::parse_record(ty, misc, body, &info) {
            Ok(rec) => self.handle_side_band(&rec),
            Err(_) if is_kernel_side_band(ty) => {
                self.stats.malformed += 1;
                return Ok(());
            }
            Err(_) => {}
        }
        sink.write_record(bytes)
    }

    fn note_time(&mut self, t: Option<u64>) {
        if let Some(t) = t.filter(|&t| t != 0) {
            self.stats.first_time.get_or_insert(t);
            self.stats.last_time = Some(t);
        }
    }

    fn handle_side_band(&mut self, rec: &Record<'_>) {
        match *rec {
            Record::Mmap {
                pid,
                addr,
                len,
                pgoff,
                filename,
                ..
            } => self.handle_mmap(MappingEvent {
                pid,
                start: addr,
                len,
                pgoff,
                exec: true,
                path: filename,
                dev_ino: None,
                build_id: None,
            }),
            Record::Mmap2 {
                pid,
                addr,
                len,
                pgoff,
                maj,
                min,
                ino,
                build_id,
                prot,
                filename,
                ..
            } => self.handle_mmap(MappingEvent {
                pid,
                start: addr,
                len,
                pgoff,
                exec: prot & libc::PROT_EXEC as u32 != 0,
                path: filename,
                dev_ino: build_id.is_none().then_some((maj, min, ino)),
                build_id,
            }),
            Record::Comm {
                pid, exec: true, ..
            } => {
                if let Some(u) = &mut self.unwinders {
                    u.handle_exec(pid);
                }
                self.exec_maps.retain(|(p, _)| *p != pid);
            }
            Record::Fork { pid, ppid, .. } if pid != ppid => {
                if let Some(u) = &mut self.unwinders {
                    u.handle_fork(pid, ppid);
                }
                let inherited: Vec<_> = self
                    .exec_maps
                    .iter()
                    .filter(|(p, _)| *p == ppid)
                    .map(|(_, path)| (pid, path.clone()))
                    .collect();
                self.exec_maps.extend(inherited);
            }
            Record::Exit { pid, tid, .. } if pid == tid => {
                if let Some(u) = &mut self.unwinders {
                    u.handle_exit(pid);
                }
            }
            Record::Lost { lost, ref sid, .. } => {
                self.stats.lost += lost;
                self.stats.lost_records += 1;
                self.cpu_losses(sid.cpu).lost += lost;
            }
            Record::LostSamples { lost, ref sid } => {
                self.stats.lost_samples += lost;
                self.cpu_losses(sid.cpu).lost_samples += lost;
            }
            Record::Throttle {
                unthrottle,
                ref sid,
                ..
            } => {
                if unthrottle {
                    self.stats.unthrottled += 1;
                } else {
                    self.stats.throttled += 1;
                    self.cpu_losses(sid.cpu).throttled += 1;
                }
            }
            _ => {}
        }
    }

    fn cpu_losses(&mut self, cpu: Option<u32>) -> &mut CpuLosses {
        self.stats
            .per_cpu
            .entry(cpu.unwrap_or(u32::MAX))
            .or_default()
    }

    fn handle_mmap(&mut self, ev: MappingEvent<'_>) {
        if ev.exec && ev.pid != u32::MAX && !ev.path.starts_with(b"[") {
            self.exec_maps.insert((ev.pid, ev.path.to_vec()));
        }
        if let Some(u) = &mut self.unwinders {
            u.handle_mmap(&ev);
        }
    }

    fn handle_sample(
        &mut self,
        misc: u16,
        bytes: &[u8],
        body: &[u8],
        sink: &mut dyn RecordSink,
    ) -> io::Result<()> {
        let Some(ev) = self.event_of(PERF_RECORD_SAMPLE, body) else {
            self.stats.malformed += 1;
            return Ok(());
        };
        let ring_info = self.events[ev].ring_info;
        let sample = match record::parse_record(PERF_RECORD_SAMPLE, misc, body, &ring_info) {
            Ok(Record::Sample(s)) => s,
            _ => {
                self.stats.malformed += 1;
                return Ok(());
            }
        };
        self.stats.samples[ev] += 1;
        self.note_time(sample.time);
        if let Some(pid) = sample.pid {
            self.sampled_pids.insert(pid);
        }
        if sample.callchain.as_ref().is_some_and(|c| !c.is_empty()) {
            self.stats.kernel_stacks = true;
        }
        if self.unwinders.is_none() || sample.stack_user.is_none() {
            return sink.write_record(bytes);
        }
        self.unwind_sample(&sample);
        let out_info = self.events[ev].out_info;
        self.out.clear();
        if record::encode_sample(&mut self.out, misc, &sample, &out_info, Some(&self.chain))
            .is_err()
        {
            // Only a chain of thousands of frames overflows the 16-bit record size: keep the
            // frames nearest the leaf and count the stack as truncated.
            self.chain.truncate(MAX_CHAIN_FRAMES);
            self.stats.truncated += 1;
            record::encode_sample(&mut self.out, misc, &sample, &out_info, Some(&self.chain))
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        }
        sink.write_record(&self.out)
    }

    /// Builds `self.chain`: the kernel part of the sample's callchain, then the
    /// user frames unwound from the copied stack.
    fn unwind_sample(&mut self, sample: &Sample<'_>) {
        self.chain.clear();
        if let Some(cc) = &sample.callchain {
            self.chain.extend(cc.iter());
        }
        self.frames.clear();
        let (Some(regs), Some(stack), Some(pid), Some(unwinders)) = (
            sample.regs_user.as_ref(),
            sample.stack_user.as_ref(),
            sample.pid,
            self.unwinders.as_mut(),
        ) else {
            return;
        };
        if regs.abi == 0 {
            // A kernel thread, or a sample taken without user context.
            return;
        }
        let Some(user) = user_regs(regs) else {
            self.stats.truncated += 1;
            return;
        };
        let outcome = unwinders.unwind(pid, user, stack.data, &mut self.frames);
        self.stats.unwound += 1;
        if matches!(outcome, UnwindOutcome::Truncated(_)) {
            self.stats.truncated += 1;
        }
        if !self.frames.is_empty() {
            self.chain.push(PERF_CONTEXT_USER);
            self.chain.extend_from_slice(&self.frames);
        }
    }
}

fn is_kernel_side_band(ty: u32) -> bool {
    matches!(
        ty,
        PERF_RECORD_MMAP
            | PERF_RECORD_MMAP2
            | PERF_RECORD_COMM
            | PERF_RECORD_FORK
            | PERF_RECORD_EXIT
            | PERF_RECORD_LOST
            | PERF_RECORD_LOST_SAMPLES
            | PERF_RECORD_THROTTLE
            | PERF_RECORD_UNTHROTTLE
    )
}

#[cfg(target_arch = "x86_64")]
pub(crate) fn user_regs(regs: &record::Regs<'_>) -> Option<UserRegs> {
    use perf_event_open_sys::bindings::{PERF_REG_X86_BP, PERF_REG_X86_IP, PERF_REG_X86_SP};
    Some(UserRegs {
        ip: regs.get(PERF_REG_X86_IP)?,
        sp: regs.get(PERF_REG_X86_SP)?,
        bp: regs.get(PERF_REG_X86_BP)?,
    })
}
