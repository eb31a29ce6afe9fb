//! The leak handler: the session's samples (entry-probe stacks unwound by the session) and
//! its process events become the outstanding table and interned stacks.

use std::io::{self, Write};

use perf_event_open_sys::bindings as b;

use crate::abi::{PERF_CONTEXT_KERNEL, PERF_CONTEXT_MAX, PERF_CONTEXT_USER};
use crate::aggregate::FrameKey;
use crate::maps::ProcessMaps;
use crate::perfdata::tracing_data::FieldFormat;
use crate::records::{Record, Sample};
use crate::session::{Handler, Processes, SampleCtx, SideBand};
use crate::stacks::{FrameId, FrameTable, StackTable};

use super::table::{AllocStack, Args, Entry, Func, Space, Table};

/// How a kernel allocation's size is read.
#[derive(Debug, Clone)]
pub enum KernelSize {
    Field(FieldFormat),
    /// PAGE_SIZE << order.
    PageOrder(FieldFormat),
}

/// What an event's samples mean.
#[derive(Debug, Clone)]
pub enum Role {
    /// Entry of a user allocator function (arguments in DI, SI, DX; the stack when sampled).
    Entry(Func),
    /// Return of a user allocator function (result in AX).
    Return(Func),
    KernelAlloc {
        space: Space,
        addr: FieldFormat,
        size: KernelSize,
    },
    KernelFree {
        space: Space,
        addr: FieldFormat,
    },
    /// A page fault with its address (`--faults`): joined to the allocation that owns it.
    Fault,
    /// Not the table's: the other events of a replayed recording (`replay`), whose samples
    /// the reader takes.
    Other,
}

/// One event as the handler sees it.
#[derive(Debug, Clone)]
pub struct LeakEvent {
    pub role: Role,
    /// Whether its samples carry a stack (else the allocation's stack is not sampled).
    pub stack: bool,
    /// Whether their user stacks are the kernel's frame-pointer walk (`--call-graph fp`), not
    /// memperf's unwind (now, or while the replayed file was recorded).
    pub by_fp: bool,
}

/// Reads a word of another process (posix_memalign's out-pointer).
pub type MemReader = fn(u32, u64) -> io::Result<u64>;

/// The handler.
pub struct LeakSink {
    events: Vec<LeakEvent>,
    pub frames: FrameTable<FrameKey>,
    /// The address each frame was first seen at, for memleak's `0x%016x` column.
    pub frame_addrs: Vec<u64>,
    pub stacks: StackTable,
    pub table: Table,
    pub kernel_frames: bool,
    pub malformed: u64,
    /// Reads of posix_memalign's result that failed.
    pub unread_results: u64,
    /// posix_memalign results read from the stack copied at the return.
    pub results_from_stack: u64,
    /// `-t`: every call as it is seen.
    pub trace: Option<Box<dyn Write>>,
    /// `-s N`: one allocation's stack in N is copied; the weight of a sampled allocation
    /// in the per-stack outputs (1: every stack).
    pub sample_rate: u64,
    /// Every process an allocator call was seen in (`heap` reads one's memory from /proc:
    /// it says so when others allocated too).
    pub spaces: rustc_hash::FxHashSet<u32>,
    /// The process of the last sample: most samples' are the one before's.
    last_space: Option<u32>,
    read_mem: MemReader,
    leaf_first: Vec<FrameId>,
    /// An allocation stack's return addresses, root first, and their frames.
    addrs: Vec<u64>,
    root_first: Vec<FrameId>,
    /// Each process's frames, by address.
    pub frame_memo: super::frames::FrameMemo,
    /// The allocator's own code, to recognise its mapping calls (user mode).
    allocator: Option<AllocatorCode>,
    /// Whether `allocator` is still to be found from the first allocator call (a replay).
    find_allocator: bool,
    /// The recorded allocator object whose file is not here as it was (a replay).
    pub allocator_missing: Option<String>,
    /// The return addresses the return probes took over, per thread.
    hijacked: super::hijacked::HijackedReturns,
    /// Allocation stacks copied but with no frame past the allocator's (not unwound).
    pub stackless: u64,
    /// Allocation stacks the kernel walked by frame pointers (`--call-graph fp`), and those
    /// cut at a value that cannot have been a return address ([`crate::aggregate::FpCheck`]).
    pub fp_stacks: u64,
    pub fp_cut: u64,
    /// The same of the fault stacks (rss's touchers).
    pub fault_fp_stacks: u64,
    pub fault_fp_cut: u64,
    /// Reads the calls before those stacks' return addresses.
    fp_check: crate::aggregate::FpCheck,
    /// The allocation stacks unwound and truncated, once the run has ended
    /// (`allocs::unwinds`).
    pub stack_counts: super::unwinds::StackCounts,
}

/// The allocator object and its functions' file ranges.
pub struct AllocatorCode {
    /// (device, inode) of the object.
    file: (u64, u64),
    ranges: Vec<std::ops::Range<u64>>,
    /// Whether each module of the process maps is the allocator object.
    is_it: rustc_hash::FxHashMap<u32, bool>,
}

impl AllocatorCode {
    pub fn new(path: &std::path::Path, ranges: Vec<std::ops::Range<u64>>) -> Option<AllocatorCode> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(AllocatorCode {
            file: (m.dev(), m.ino()),
            ranges,
            is_it: rustc_hash::FxHashMap::default(),
        })
    }

    /// The allocator object of a recording, from the address of its probe on an allocator
    /// function (`ip`, in process `pid`): the object mapped there, when its file is here
    /// (the inode and the build-id recorded for it, when they were). `None` while no
    /// mapping holds `ip`; `Some(Err(path))` when the object's file is not here as it was.
    pub fn of_recorded(
        maps: &ProcessMaps,
        pid: u32,
        ip: u64,
    ) -> Option<Result<AllocatorCode, String>> {
        let at = maps.mapping_at(pid, ip)?;
        let (path, recorded) = crate::mapped::resolve_recorded(&at.module.path, Some(pid));
        let code = crate::aggregate::open_module(at.module, at.attrs.ino, pid)
            .is_some()
            .then(|| crate::allocators::load(&path, "").ok())
            .flatten()
            .and_then(|alloc| {
                AllocatorCode::new(&path, crate::allocators::allocator_ranges(&alloc))
            });
        Some(code.ok_or_else(|| recorded.display().to_string()))
    }

    fn contains(&mut self, maps: &ProcessMaps, pid: u32, module: u32, offset: u64) -> bool {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::MetadataExt;
        let file = self.file;
        let is_it = *self.is_it.entry(module).or_insert_with(|| {
            let path = std::path::Path::new(std::ffi::OsStr::from_bytes(&maps.module(module).path));
            let path = crate::mapped::in_root(pid, path).unwrap_or_else(|| path.to_path_buf());
            std::fs::metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == file)
        });
        is_it && self.ranges.iter().any(|r| r.contains(&offset))
    }
}

impl LeakSink {
    pub fn new(events: Vec<LeakEvent>, table: Table, read_mem: MemReader) -> LeakSink {
        LeakSink {
            events,
            frames: FrameTable::default(),
            frame_addrs: Vec::new(),
            stacks: StackTable::default(),
            table,
            kernel_frames: false,
            malformed: 0,
            unread_results: 0,
            results_from_stack: 0,
            trace: None,
            sample_rate: 1,
            spaces: rustc_hash::FxHashSet::default(),
            last_space: None,
            read_mem,
            leaf_first: Vec::with_capacity(128),
            addrs: Vec::with_capacity(128),
            root_first: Vec::with_capacity(128),
            frame_memo: super::frames::FrameMemo::default(),
            allocator: None,
            find_allocator: false,
            allocator_missing: None,
            hijacked: Default::default(),
            stackless: 0,
            fp_stacks: 0,
            fp_cut: 0,
            fault_fp_stacks: 0,
            fault_fp_cut: 0,
            fp_check: Default::default(),
            stack_counts: super::unwinds::StackCounts::default(),
        }
    }

    /// What each event's samples mean.
    pub fn events(&self) -> &[LeakEvent] {
        &self.events
    }

    /// The events, once they are opened (what each one's samples mean).
    pub fn set_events(&mut self, events: Vec<LeakEvent>) {
        self.events = events;
    }

    /// Recognise the mapping calls the allocator makes from its own functions.
    pub fn set_allocator(&mut self, code: Option<AllocatorCode>) {
        self.allocator = code;
    }

    /// A recording's allocator object is found from its first allocator call: the object
    /// its probe sits in (see [`AllocatorCode::of_recorded`]).
    pub fn find_allocator_in_recording(&mut self) {
        self.find_allocator = true;
    }

    /// The command name of a process (for folded prefixes); `[kernel]` for kernel memory.
    pub fn comm_of(procs: &Processes, space: Space) -> String {
        if space >= super::table::KERNEL_PERCPU {
            return "[kernel]".to_string();
        }
        procs
            .comm(space, space)
            .map_or_else(|| space.to_string(), str::to_string)
    }

    fn handle_side_band(&mut self, rec: &Record<'_>) {
        self.frame_memo.side_band(rec);
        self.fp_check.side_band(rec);
        match *rec {
            // Nothing allocated before the exec is the new program's.
            Record::Comm {
                pid,
                tid,
                exec: true,
                ..
            } => {
                self.hijacked.exited(tid);
                self.table.reset_space(pid);
            }
            Record::Lost { .. } | Record::LostSamples { .. } => self.hijacked.lost(),
            Record::Exit { pid, tid, .. } => {
                self.hijacked.exited(tid);
                self.table.thread_exit(tid);
                if pid == tid {
                    self.table.process_exit(pid);
                }
            }
            _ => {}
        }
    }

    fn handle_sample(&mut self, c: &SampleCtx<'_>) {
        let (ev, s) = (c.ev, c.sample);
        let Some(event) = self.events.get(ev) else {
            self.malformed += 1;
            return;
        };
        let maps = c.procs.maps().unwrap_or(ProcessMaps::empty());
        let (pid, tid, time) = (s.pid.unwrap_or(0), s.tid.unwrap_or(0), s.time.unwrap_or(0));
        let with_stack = event.stack;
        self.table.at(tid, time);
        if self.last_space != Some(pid) && matches!(event.role, Role::Entry(_) | Role::Return(_)) {
            self.last_space = Some(pid);
            self.spaces.insert(pid);
        }
        match event.role.clone() {
            Role::Entry(func) => {
                if self.find_allocator
                    && func.is_allocator()
                    && let Some(ip) = s.ip
                    && let Some(found) = AllocatorCode::of_recorded(maps, pid, ip)
                {
                    self.find_allocator = false;
                    match found {
                        Ok(code) => self.allocator = Some(code),
                        Err(path) => self.allocator_missing = Some(path),
                    }
                }
                if self.has_return_probe(func) {
                    self.note_return_slot(maps, pid, tid, func, s);
                }
                let (stack, fp_walk) = if with_stack {
                    self.user_stack(maps, pid, c)
                } else {
                    (AllocStack::Unsampled, None)
                };
                let allocates = !matches!(func, Func::Free | Func::Munmap);
                if stack == AllocStack::Missing && allocates {
                    self.stackless += 1;
                }
                if let (true, Some(walk)) = (allocates, fp_walk) {
                    self.fp_stacks += 1;
                    self.fp_cut += u64::from(walk.cut);
                }
                let reg = |r: u32| s.regs_user.as_ref().and_then(|regs| regs.get(r));
                let args = Args {
                    a0: reg(b::PERF_REG_X86_DI).unwrap_or(0),
                    a1: reg(b::PERF_REG_X86_SI).unwrap_or(0),
                    a2: reg(b::PERF_REG_X86_DX).unwrap_or(0),
                };
                if let Some(w) = self.trace.as_mut() {
                    let _ = trace_entry(w, pid, tid, time, func, args, &self.table);
                }
                let in_allocator = func.is_map_call() && self.called_by_allocator(maps, pid, c);
                self.table.enter(Entry {
                    tid,
                    space: pid,
                    func,
                    args,
                    time,
                    stack,
                    sp: reg(b::PERF_REG_X86_SP).unwrap_or(0),
                    in_allocator,
                    fp_first: fp_walk.map(|w| w.first_return),
                });
            }
            Role::Return(func) => {
                let mut ret = s
                    .regs_user
                    .as_ref()
                    .and_then(|r| r.get(b::PERF_REG_X86_AX))
                    .unwrap_or(0);
                if func == Func::PosixMemalign {
                    ret = self.memalign_result(pid, tid, ret, s);
                }
                self.add_fp_caller(maps, pid, tid, func, s.ip);
                if let Some(sp) = s.regs_user.as_ref().and_then(|r| r.get(b::PERF_REG_X86_SP)) {
                    self.hijacked.returned(tid, sp);
                }
                let out = self.table.leave(tid, pid, func, ret);
                if let (Some(w), super::table::Returned::Alloc { size, addr }) =
                    (self.trace.as_mut(), out)
                {
                    let _ = writeln!(
                        w,
                        "{pid}/{tid} {}: alloc exited, size = {size}, result = {addr:x}",
                        time_text(time)
                    );
                }
            }
            Role::KernelAlloc { space, addr, size } => {
                let raw = s.raw.unwrap_or(&[]);
                let (Some(ptr), Some(bytes)) = (addr.read(raw), kernel_size(&size, raw)) else {
                    self.malformed += 1;
                    return;
                };
                // A failed allocation (NULL, or pfn -1 for no page) allocates nothing.
                if ptr == 0 || ptr == u64::MAX {
                    self.table.stats.failed_allocs += 1;
                    return;
                }
                let stack = if with_stack {
                    self.kernel_stack(c)
                } else {
                    AllocStack::Unsampled
                };
                self.table.insert_point(space, ptr, bytes, time, stack);
            }
            Role::Fault => self.handle_fault(maps, pid, c, with_stack),
            Role::Other => {}
            Role::KernelFree { space, addr } => {
                let raw = s.raw.unwrap_or(&[]);
                match addr.read(raw) {
                    Some(ptr) => self.table.free_point(space, ptr),
                    None => self.malformed += 1,
                }
            }
        }
    }

    /// A page fault: counted against the live allocation holding its address, else against
    /// the mapping; with a stack, the toucher is kept under the allocation's stack.
    fn handle_fault(&mut self, maps: &ProcessMaps, pid: u32, c: &SampleCtx<'_>, with_stack: bool) {
        let Some(addr) = c.sample.addr else {
            if let Some(r) = self.table.resident.as_mut() {
                r.stats.faults += 1;
                r.stats.no_addr += 1;
            }
            return;
        };
        let toucher = with_stack.then(|| self.toucher_stack(maps, pid, c));
        let Some(r) = self.table.resident.as_mut() else {
            return;
        };
        if let Some(w) = self.trace.as_mut() {
            // -t: each fault and its owner, before the fault is counted.
            let tid = c.sample.tid.unwrap_or(0);
            let t = time_text(c.sample.time.unwrap_or(0));
            let _ = match r.owner(pid, addr) {
                Some(o) => writeln!(
                    w,
                    "{pid}/{tid} {t}: page fault at {addr:x}, in the allocation at {:x} of {}                      bytes",
                    o.base, o.size
                ),
                None => writeln!(
                    w,
                    "{pid}/{tid} {t}: page fault at {addr:x}, in no allocation"
                ),
            };
        }
        if !r.fault(pid, addr, toucher) {
            r.outside(pid, super::resident::region(maps, pid, addr));
        }
    }

    /// At the return of `func` on `tid` (the return probe's address `ret`, the caller's
    /// return address): a frame-pointer stack of the call that did not name the caller
    /// gets it (see [`LeakSink::with_caller`]).
    fn add_fp_caller(
        &mut self,
        maps: &ProcessMaps,
        pid: u32,
        tid: u32,
        func: Func,
        ret: Option<u64>,
    ) {
        // The address is the kernel's, never a value the walk read: but a recording made
        // elsewhere may say anything.
        let Some(ret) = ret.filter(|&r| r != 0 && maps.in_code(pid, r)) else {
            return;
        };
        let Some((&mut stack, first)) = self.table.pending_fp_walk(tid, func) else {
            return;
        };
        if first == ret {
            return;
        }
        let amended = self.with_caller(maps, pid, stack, ret);
        if stack == AllocStack::Missing && amended != AllocStack::Missing {
            // Counted at the entry as an allocation stack with no frame.
            self.stackless = self.stackless.saturating_sub(1);
        }
        if let Some((stack, _)) = self.table.pending_fp_walk(tid, func) {
            *stack = amended;
        }
    }

    /// posix_memalign returns 0 and stores the block through its first argument: read it
    /// from the stack copied at the return when it points there (a local variable, as it
    /// was at the return), else from the process now.
    fn memalign_result(&mut self, pid: u32, tid: u32, rax: u64, s: &Sample<'_>) -> u64 {
        if rax != 0 {
            return 0;
        }
        let Some(memptr) = self.table.pending_memptr(tid) else {
            return 0;
        };
        let sp = s.regs_user.as_ref().and_then(|r| r.get(b::PERF_REG_X86_SP));
        if let (Some(sp), Some(stack)) = (sp, &s.stack_user)
            && let Some(off) = memptr.checked_sub(sp).and_then(|o| usize::try_from(o).ok())
            && let Some(bytes) = stack.data.get(off..off.saturating_add(8))
            && let Ok(word) = <[u8; 8]>::try_from(bytes)
        {
            self.results_from_stack += 1;
            return u64::from_le_bytes(word);
        }
        match (self.read_mem)(pid, memptr) {
            Ok(p) => p,
            Err(_) => {
                self.unread_results += 1;
                0
            }
        }
    }

    /// Whether a user frame of the sample (past the probed function) lies in one of the
    /// allocator's own functions. A frame-pointer walk is read only as far as the
    /// frames it read hold return addresses ([`crate::aggregate::FpCheck`]): a value it read
    /// past a function without a frame pointer may point anywhere, the allocator included.
    fn called_by_allocator(&mut self, maps: &ProcessMaps, pid: u32, c: &SampleCtx<'_>) -> bool {
        let by_fp = self.walked_by_fp(c);
        let (Some(code), Some(chain)) = (self.allocator.as_mut(), c.callchain()) else {
            return false;
        };
        let mut in_user = false;
        let mut first = true;
        for ip in chain {
            if ip >= PERF_CONTEXT_MAX {
                in_user = ip == PERF_CONTEXT_USER;
                continue;
            }
            if !in_user {
                continue;
            }
            if std::mem::take(&mut first) {
                continue;
            }
            if by_fp && !self.fp_check.may_return_to(maps, pid, ip) {
                return false;
            }
            // A return address: the call is the instruction before it.
            let Some((module, offset)) = maps.lookup(pid, ip.saturating_sub(1)) else {
                continue;
            };
            if code.contains(maps, pid, module, offset) {
                return true;
            }
        }
        false
    }

    /// The slot whose return address the kernel takes over at this entry of `func` (see
    /// `allocs::hijacked`): at the stack pointer, the address the entry's copy holds there.
    fn note_return_slot(
        &mut self,
        maps: &ProcessMaps,
        pid: u32,
        tid: u32,
        func: Func,
        s: &crate::records::Sample<'_>,
    ) {
        let sp = s.regs_user.as_ref().and_then(|r| r.get(b::PERF_REG_X86_SP));
        let word = s
            .stack_user
            .as_ref()
            .and_then(|st| st.data.get(..8))
            .and_then(|w| <[u8; 8]>::try_from(w).ok())
            .map(u64::from_ne_bytes);
        // A tail call from another probed function: its copy holds that one's trampoline.
        let trampoline = word.is_some_and(|w| crate::maps::is_uretprobe_trampoline(maps, pid, w));
        let twin = sp.is_some_and(|sp| self.table.pending_top_is(tid, func, sp));
        let ret = word.filter(|_| !trampoline);
        self.hijacked.entered(tid, sp, ret, twin || trampoline);
    }

    /// Whether `func` has a return probe: the kernel takes its return address over.
    fn has_return_probe(&self, func: Func) -> bool {
        self.events
            .iter()
            .any(|e| matches!(e.role, Role::Return(f) if f == func))
    }

    /// Whether the sample's user frames are the kernel's frame-pointer walk, not memperf's
    /// unwind: its frames are checked.
    fn walked_by_fp(&self, c: &SampleCtx<'_>) -> bool {
        c.unwound.is_none() && self.events.get(c.ev).is_some_and(|e| e.by_fp)
    }

    /// The user part of the sample's callchain, without the probed function itself (the
    /// leaf is the probe site: memleak lists the caller first); and, when the kernel walked
    /// it by frame pointers, what the walk gave (see [`FpWalk`]).
    fn user_stack(
        &mut self,
        maps: &ProcessMaps,
        pid: u32,
        c: &SampleCtx<'_>,
    ) -> (AllocStack, Option<FpWalk>) {
        let Some(chain) = c.callchain() else {
            return (AllocStack::Missing, None);
        };
        let by_fp = self.walked_by_fp(c);
        self.addrs.clear();
        let mut in_user = false;
        let mut first = true;
        let mut cut = false;
        let mut first_return = 0;
        for ip in chain {
            if ip >= PERF_CONTEXT_MAX {
                in_user = ip == PERF_CONTEXT_USER;
                continue;
            }
            if !in_user || cut {
                continue;
            }
            if first {
                first = false;
                continue;
            }
            if first_return == 0 {
                first_return = ip;
            }
            if by_fp && !self.fp_check.may_return_to(maps, pid, ip) {
                cut = true;
                continue;
            }
            self.addrs.push(ip);
        }
        let fp_walk = (by_fp && !first).then_some(FpWalk { cut, first_return });
        self.addrs.reverse();
        self.root_first.clear();
        let (frames, frame_addrs) = (&mut self.frames, &mut self.frame_addrs);
        self.frame_memo
            .stack(pid, &self.addrs, &mut self.root_first, |addr| {
                let key = FrameKey::user(maps, pid, addr, true);
                intern_frame(frames, frame_addrs, key, addr)
            });
        let stack = self
            .stacks
            .intern(self.root_first.iter().copied())
            .map_or(AllocStack::Missing, AllocStack::Id);
        (stack, fp_walk)
    }

    /// `stack` with the caller the return probe names (`ret`, its sample's address: the
    /// return address the call pushed) as its leaf: from a function's entry the kernel's
    /// frame-pointer walk starts at the caller's frame pointer, which names the caller's
    /// caller, so the caller itself was missing (unless the kernel added it: then it is
    /// the walk's first return address, and nothing changes).
    fn with_caller(
        &mut self,
        maps: &ProcessMaps,
        pid: u32,
        stack: AllocStack,
        ret: u64,
    ) -> AllocStack {
        self.root_first.clear();
        match stack {
            AllocStack::Id(id) => self.stacks.frames(id, &mut self.root_first),
            AllocStack::Missing => {}
            AllocStack::Unsampled => return stack,
        }
        let caller = self.user_frame(maps, pid, ret, true);
        self.root_first.push(caller);
        self.stacks
            .intern(self.root_first.iter().copied())
            .map_or(AllocStack::Missing, AllocStack::Id)
    }

    /// The user stack of a fault, its leaf the faulting instruction; a frame-pointer walk
    /// is cut as an allocation's is (see [`crate::aggregate::FpCheck`]) and counted.
    fn toucher_stack(&mut self, maps: &ProcessMaps, pid: u32, c: &SampleCtx<'_>) -> AllocStack {
        let Some(chain) = c.callchain() else {
            return AllocStack::Missing;
        };
        let by_fp = self.walked_by_fp(c);
        self.leaf_first.clear();
        let mut in_user = false;
        let mut first = true;
        let mut cut = false;
        for ip in chain {
            if ip >= PERF_CONTEXT_MAX {
                in_user = ip == PERF_CONTEXT_USER;
                continue;
            }
            if !in_user || cut {
                continue;
            }
            let ret = !std::mem::take(&mut first);
            if ret && by_fp && !self.fp_check.may_return_to(maps, pid, ip) {
                cut = true;
                continue;
            }
            let id = self.user_frame(maps, pid, ip, ret);
            self.leaf_first.push(id);
        }
        if by_fp && !first {
            self.fault_fp_stacks += 1;
            self.fault_fp_cut += u64::from(cut);
        }
        self.intern_leaf_first()
    }

    fn kernel_stack(&mut self, c: &SampleCtx<'_>) -> AllocStack {
        let Some(chain) = c.callchain() else {
            return AllocStack::Missing;
        };
        self.leaf_first.clear();
        let mut in_kernel = false;
        let mut n = 0;
        for ip in chain {
            if ip >= PERF_CONTEXT_MAX {
                in_kernel = ip == PERF_CONTEXT_KERNEL;
                continue;
            }
            if in_kernel {
                let id = self.intern_frame(
                    FrameKey::Kernel {
                        addr: crate::stacks::CodeAddr::new(ip, n > 0),
                    },
                    ip,
                );
                self.leaf_first.push(id);
                n += 1;
            }
        }
        self.kernel_frames |= n > 0;
        self.intern_leaf_first()
    }

    fn intern_leaf_first(&mut self) -> AllocStack {
        self.stacks
            .intern(self.leaf_first.iter().rev().copied())
            .map_or(AllocStack::Missing, AllocStack::Id)
    }

    /// A user frame (`ret`: a return address, named by its call), through the memo.
    fn user_frame(&mut self, maps: &ProcessMaps, pid: u32, addr: u64, ret: bool) -> FrameId {
        let (frames, frame_addrs) = (&mut self.frames, &mut self.frame_addrs);
        self.frame_memo.frame(pid, addr, ret, || {
            intern_frame(
                frames,
                frame_addrs,
                FrameKey::user(maps, pid, addr, ret),
                addr,
            )
        })
    }

    fn intern_frame(&mut self, key: FrameKey, addr: u64) -> FrameId {
        intern_frame(&mut self.frames, &mut self.frame_addrs, key, addr)
    }
}

/// What the kernel's frame-pointer walk of an allocation stack gave.
#[derive(Debug, Clone, Copy)]
struct FpWalk {
    /// Cut at a value that is no return address.
    cut: bool,
    /// The first return address it read (0: none), to tell whether it named the caller.
    first_return: u64,
}

/// Interns a frame, noting the address it was first seen at.
fn intern_frame(
    frames: &mut FrameTable<FrameKey>,
    frame_addrs: &mut Vec<u64>,
    key: FrameKey,
    addr: u64,
) -> FrameId {
    let id = frames.intern(&key);
    if id as usize == frame_addrs.len() {
        frame_addrs.push(addr);
    }
    id
}

fn kernel_size(size: &KernelSize, raw: &[u8]) -> Option<u64> {
    match size {
        KernelSize::Field(f) => f.read(raw),
        KernelSize::PageOrder(f) => f
            .read(raw)
            .map(|order| (crate::sys::page_size() as u64) << order.min(20)),
    }
}

fn time_text(ns: u64) -> String {
    format!("{}.{:06}", ns / 1_000_000_000, ns % 1_000_000_000 / 1000)
}

/// memleak -t's lines: `alloc entered, size = N`, `free entered, address = X, size = N`.
fn trace_entry(
    w: &mut dyn Write,
    pid: u32,
    tid: u32,
    time: u64,
    func: Func,
    args: Args,
    table: &Table,
) -> io::Result<()> {
    let t = time_text(time);
    match func {
        Func::Free => {
            let size = table.size_of(pid, args.a0).unwrap_or(0);
            writeln!(
                w,
                "{pid}/{tid} {t}: free entered, address = {:x}, size = {size}",
                args.a0
            )
        }
        // Not memleak's free line: an unmap may be the allocator's own, or cut a mapping.
        Func::Munmap => writeln!(
            w,
            "{pid}/{tid} {t}: munmap entered, address = {:x}, length = {}",
            args.a0, args.a1
        ),
        Func::Calloc => writeln!(
            w,
            "{pid}/{tid} {t}: alloc entered, size = {}",
            args.a0.saturating_mul(args.a1)
        ),
        Func::AlignedAlloc | Func::Realloc => {
            writeln!(w, "{pid}/{tid} {t}: alloc entered, size = {}", args.a1)
        }
        Func::PosixMemalign | Func::Mremap => {
            writeln!(w, "{pid}/{tid} {t}: alloc entered, size = {}", args.a2)
        }
        Func::Mmap => writeln!(w, "{pid}/{tid} {t}: alloc entered, size = {}", args.a1),
        Func::Malloc | Func::Valloc | Func::Pvalloc => {
            writeln!(w, "{pid}/{tid} {t}: alloc entered, size = {}", args.a0)
        }
    }
}

impl Handler for LeakSink {
    fn sample(&mut self, c: &SampleCtx<'_>) -> io::Result<()> {
        self.handle_sample(c);
        Ok(())
    }

    /// Only entry probes' stacks are the allocation's; a return probe's copied stack is
    /// kept for posix_memalign's result, not unwound.
    fn wants_unwind(&mut self, ev: usize, _s: &Sample<'_>, _procs: &Processes) -> bool {
        self.events
            .get(ev)
            .is_some_and(|e| matches!(e.role, Role::Entry(_) | Role::Fault))
    }

    fn side_band(&mut self, r: &SideBand<'_>) -> io::Result<()> {
        if let Some(rec) = r.rec {
            self.handle_side_band(rec);
        }
        Ok(())
    }

    fn hijacked_returns(&self, tid: u32, out: &mut Vec<(u64, u64)>) {
        self.hijacked.of(tid, out);
    }
}
