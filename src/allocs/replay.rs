//! The allocator's calls replayed from a recording: the live-allocation table rebuilt in
//! time order, so that a reader of the file can ask, at each sample's time, which live
//! allocation held an address (`Allocations::owner`).
//!
//! A recording holds allocator calls when it was written with the allocator's uprobes
//! (`memperf mem record` and `memperf rss -w` place them as `memperf leak` does): entry
//! probes named after the function (`memperf_PID:malloc`, `uprobe:malloc`) that carry the
//! argument registers, return probes (`..._ret`) that carry the result. Events named so
//! but without those registers (a `perf probe` of malloc reads its arguments into
//! tracepoint fields) are not taken for allocator calls.
//!
//! Nothing here reads the live system: posix_memalign's result, stored through its first
//! argument, cannot be read back from a process that is gone, and is counted instead.

use anyhow::{Context, Result, bail};
use perf_event_open_sys::bindings as b;
use rustc_hash::FxHashMap;

use crate::abi::PERF_SAMPLE_REGS_USER;
use crate::maps::ProcessMaps;
use crate::output::{NameOptions, Resolver};
use crate::perfdata::{EventDesc, PerfDataFile};
use crate::session::order::{self, Slack};
use crate::session::{Keep, SampleCtx, Session, SideBand};
use crate::stacks::FrameId;
use crate::sys::uprobe::GROUP_PREFIX;

use super::resident::{Owned, Resident};
use super::run::Traced;
use super::sink::{LeakEvent, LeakSink, Role};
use super::table::{AllocStack, Table, TableStats};

/// The system part of an allocator probe's event name: memperf's tracefs group, or the
/// uprobe PMU's.
fn probe_system(system: &str) -> bool {
    system == "uprobe"
        || system
            .strip_prefix(GROUP_PREFIX)
            .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|c| c.is_ascii_digit()))
}

/// How a recording's page faults are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Faults {
    /// As accesses the reader places (`mem report --by allocation`).
    Accesses,
    /// Joined to the allocations by the resident join, as `memperf rss` joins them live.
    Joined,
}

/// Whether `ev` is a page-fault software event that samples the fault's address.
fn is_fault_event(ev: &EventDesc) -> bool {
    let a = &ev.attr;
    let faults = [
        b::PERF_COUNT_SW_PAGE_FAULTS,
        b::PERF_COUNT_SW_PAGE_FAULTS_MIN,
        b::PERF_COUNT_SW_PAGE_FAULTS_MAJ,
    ];
    a.type_ == b::PERF_TYPE_SOFTWARE
        && faults.iter().any(|&c| a.config == u64::from(c))
        && a.sample_type & crate::abi::PERF_SAMPLE_ADDR != 0
}

/// What an event of a recording is to the allocation table: an allocator's entry or
/// return, a page fault to join (with `Faults::Joined`), or `Role::Other`.
/// `plan::plan_user` names the probes (`SYMBOL` and `SYMBOL_ret`); entries must carry the
/// argument registers and returns the result's.
pub(crate) fn role_of(name: &str, ev: &EventDesc, faults: Faults) -> Role {
    if faults == Faults::Joined && is_fault_event(ev) {
        return Role::Fault;
    }
    let Some((system, probe)) = name.rsplit_once(':') else {
        return Role::Other;
    };
    if !probe_system(system) {
        return Role::Other;
    }
    let (symbol, ret) = match probe.strip_suffix("_ret") {
        Some(s) => (s, true),
        None => (probe, false),
    };
    let Some(def) = crate::allocators::FUNCS.iter().find(|d| d.symbol == symbol) else {
        return Role::Other;
    };
    let needs: u64 = if ret {
        1 << b::PERF_REG_X86_AX
    } else {
        1 << b::PERF_REG_X86_DI
    };
    let attr = &ev.attr;
    if attr.sample_type & PERF_SAMPLE_REGS_USER == 0 || attr.sample_regs_user & needs == 0 {
        return Role::Other;
    }
    if ret {
        Role::Return(def.func)
    } else {
        Role::Entry(def.func)
    }
}

/// The allocation table of a recording, fed its allocator calls in time order.
pub(crate) struct Allocations {
    sink: LeakSink,
    /// Whether each event of the file is an allocator call.
    is_call: Vec<bool>,
}

/// What the replay counted, for the report's notes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ReplayStats {
    pub table: TableStats,
    /// posix_memalign results that could not be read (the process is gone).
    pub unread_results: u64,
    /// Allocator samples that could not be used (no registers, no event).
    pub malformed: u64,
    /// Allocations without a stack (none was recorded, or it could not be read).
    pub without_stack: u64,
}

fn no_process(_: u32, _: u64) -> std::io::Result<u64> {
    Err(std::io::Error::other("a replayed process cannot be read"))
}

impl Allocations {
    /// The allocator calls of `file`, or `None` when it has none.
    pub fn of_file(file: &PerfDataFile, faults: Faults) -> Option<Allocations> {
        let names = file.event_names();
        let mut events = Vec::with_capacity(file.events.len());
        for (i, (name, ev)) in names.iter().zip(&file.events).enumerate() {
            let role = role_of(name, ev, faults);
            let stack = ev.attr.sample_type & crate::abi::PERF_SAMPLE_CALLCHAIN != 0;
            let by_fp = file.walked_by_fp(i);
            events.push(LeakEvent { role, stack, by_fp });
        }
        let is_call: Vec<bool> = events
            .iter()
            .map(|e| !matches!(e.role, Role::Other))
            .collect();
        if !events
            .iter()
            .any(|e| matches!(e.role, Role::Entry(_) | Role::Return(_)))
        {
            return None;
        }
        let mut table = Table::new(usize::MAX, None, None);
        table.resident = Some(Resident::new(crate::sys::page_size() as u64));
        let mut sink = LeakSink::new(events, table, no_process);
        sink.find_allocator_in_recording();
        Some(Allocations { sink, is_call })
    }

    /// Whether some event's samples are joined page faults.
    pub fn joins_faults(&self) -> bool {
        self.sink
            .events()
            .iter()
            .any(|e| matches!(e.role, Role::Fault))
    }

    /// Whether event `ev` is the table's (an allocator call, or a joined page fault): its
    /// samples are not accesses.
    pub fn is_call(&self, ev: usize) -> bool {
        self.is_call.get(ev).copied().unwrap_or(false)
    }

    /// Takes the sample when it is an allocator call; whether it was.
    pub fn sample(&mut self, c: &SampleCtx<'_>) -> bool {
        if !self.is_call(c.ev) {
            return false;
        }
        // The sink keeps no I/O error of its own: a call it cannot use is counted.
        let _ = crate::session::Handler::sample(&mut self.sink, c);
        true
    }

    /// Execs and thread exits: what they end in the table.
    pub fn side_band(&mut self, r: &SideBand<'_>) {
        let _ = crate::session::Handler::side_band(&mut self.sink, r);
    }

    /// The live allocation holding `addr` in process `pid` now.
    pub fn owner(&self, pid: u32, addr: u64) -> Option<Owned> {
        self.sink.table.resident.as_ref()?.owner(pid, addr)
    }

    pub fn stats(&self) -> ReplayStats {
        let without_stack = self.sink.table.resident.as_ref().map_or(0, |r| {
            r.stacks()
                .filter(|(_, s, _)| !matches!(s, AllocStack::Id(_)))
                .map(|(_, _, t)| t.allocs)
                .sum()
        });
        ReplayStats {
            table: self.sink.table.stats.clone(),
            unread_results: self.sink.unread_results,
            malformed: self.sink.malformed,
            without_stack,
        }
    }

    /// Names every allocation stack's frames, as the tools name them, with the process
    /// table the replay ended with.
    pub fn names(&self, maps: &ProcessMaps) -> StackNames {
        let mut r = Resolver::new(NameOptions::plain(), None);
        r.catch_up(&self.sink.frames, maps);
        StackNames {
            names: r.finish().names,
        }
    }

    /// The frames of `stack`, leaf first, as ids `names` can name.
    pub fn frames(&self, stack: AllocStack, ids: &mut Vec<FrameId>) {
        ids.clear();
        if let AllocStack::Id(s) = stack {
            self.sink.stacks.frames(s, ids);
            ids.reverse();
        }
    }
}

/// `memperf rss -i`: the allocator calls and page faults of `file` replayed in time order
/// into the table and its resident join, as the live run feeds them.
pub(crate) fn trace_file(file: &PerfDataFile, input: &str) -> Result<Traced> {
    replay_file(file, input, None)
}

/// The allocator calls of `file` replayed into a table with the heap analyses (memray's
/// temporary `threshold`); page faults are joined when the file has them.
pub(crate) fn trace_heap_file(
    file: &PerfDataFile,
    input: &str,
    threshold: usize,
) -> Result<Traced> {
    replay_file(file, input, Some(threshold))
}

fn replay_file(file: &PerfDataFile, input: &str, heap: Option<usize>) -> Result<Traced> {
    if let Some(note) = file.cut_note(input) {
        eprintln!("memperf: warning: {note}");
    }
    let Some(mut allocs) = Allocations::of_file(file, Faults::Joined) else {
        bail!(
            "`{input}` holds no allocator calls (the uprobes on malloc, free, mmap, ... that \
             `memperf heap -w FILE` and `memperf rss -w FILE` record)"
        );
    };
    allocs.sink.table.heap = heap.map(super::heap::HeapTracker::new);
    if let (Some(heap), Some(c)) = (allocs.sink.table.heap.as_mut(), file.features.clock_data) {
        heap.begin_at(c.clock_ns);
    }
    if heap.is_none() && !allocs.joins_faults() {
        bail!(
            "`{input}` has no page faults with their addresses (`page-faults` with \
             PERF_SAMPLE_ADDR) to join to its allocations; record with `memperf rss -w FILE`"
        );
    }
    let keep = Keep {
        unwind: None,
        maps: Some(ProcessMaps::new(FxHashMap::default())),
        comms: true,
        dsos: false,
    };
    let mut session = Session::for_file(file, keep);
    let read = order::replay(
        file,
        &mut session,
        &mut allocs.sink,
        Slack::OneRound,
        &mut |_| {},
    )
    .with_context(|| format!("failed to read the records of `{input}`"))?;
    if let Some(e) = read.read_error {
        eprintln!("memperf: warning: the records end early: {e}");
    }
    let st = session.stats();
    let malformed = st.malformed;
    if malformed > 0 {
        eprintln!("memperf: warning: {malformed} records could not be parsed and were skipped");
    }
    let lost = st.lost + st.lost_samples;
    // The run ended with its last record (the process's EXIT), not with its last sample.
    let now = st.last_time.unwrap_or(0).max(read.max_time);
    let mut sink = allocs.sink;
    let recorded = super::unwinds::recorded(file, sink.events().len());
    sink.stack_counts = super::unwinds::StackCounts::of(&sink, &recorded);
    super::run::summary(&sink, lost, 0);
    if let Some(path) = &sink.allocator_missing {
        eprintln!(
            "memperf: warning: the allocator `{path}` is not here as it was recorded: the \
             mmap/munmap calls it made itself cannot be told from the program's, and count \
             as the program's"
        );
    }
    if sink.unread_results > 0 {
        eprintln!(
            "memperf: {} posix_memalign results are not in the recording (stored outside the \
             stack copied at the return, the live run read them from the process): those \
             blocks are not in the table",
            sink.unread_results
        );
    }
    Ok(Traced {
        session,
        sink,
        now,
        lost,
        requested: false,
        exited: false,
        _teardown: Default::default(),
    })
}

/// The names of the frames of a replay's allocation stacks.
pub(crate) struct StackNames {
    names: Vec<Vec<String>>,
}

impl StackNames {
    /// The names of a frame, its inlined functions first.
    pub fn of(&self, id: FrameId) -> impl Iterator<Item = &str> {
        self.names
            .get(id as usize)
            .into_iter()
            .flatten()
            .rev()
            .map(String::as_str)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::allocs::table::Func;
    use perf_event_open_sys::bindings::perf_event_attr;

    fn desc(regs: u64) -> EventDesc {
        let attr = perf_event_attr {
            sample_type: if regs == 0 { 0 } else { PERF_SAMPLE_REGS_USER },
            sample_regs_user: regs,
            ..perf_event_attr::default()
        };
        EventDesc {
            attr,
            name: String::new(),
            ids: Vec::new(),
        }
    }

    #[test]
    fn allocator_probes_are_known_by_name_and_registers() {
        let di = desc(1 << b::PERF_REG_X86_DI);
        let ax = desc(1 << b::PERF_REG_X86_AX);
        let entry = |n: &str, d: &EventDesc| match role_of(n, d, Faults::Accesses) {
            Role::Entry(f) => Some((f, false)),
            Role::Return(f) => Some((f, true)),
            _ => None,
        };
        assert_eq!(
            entry("memperf_123:malloc", &di),
            Some((Func::Malloc, false))
        );
        assert_eq!(entry("uprobe:free", &di), Some((Func::Free, false)));
        assert_eq!(
            entry("memperf_123:malloc_ret", &ax),
            Some((Func::Malloc, true))
        );
        // A return without its result register, an entry without its arguments, a probe
        // of someone else's group, a function memperf does not probe: not calls.
        assert_eq!(entry("memperf_123:malloc_ret", &di), None);
        assert_eq!(entry("memperf_123:malloc", &desc(0)), None);
        assert_eq!(entry("probe_libc:malloc", &di), None);
        assert_eq!(entry("memperf_x:malloc", &di), None);
        assert_eq!(entry("uprobe:strlen", &di), None);
        assert_eq!(entry("page-faults", &di), None);
    }
}
