//! The leak handler: what the session passes on (samples with unwound callchains, and the
//! side-band records) becomes the outstanding table and interned stacks.

use std::io::{self, Write};

use perf_event_open_sys::bindings as b;
use rustc_hash::FxHashMap;

use crate::cmd::report::maps::ProcessMaps;
use crate::cmd::report::{CONTEXT_KERNEL, CONTEXT_MAX, CONTEXT_USER, FrameKey};
use crate::perfdata::tracing_data::FieldFormat;
use crate::record::{self, ParseInfo, Record, Sample};
use crate::session::RecordSink;
use crate::stacks::{FrameId, FrameTable, StackId, StackTable};

use super::table::{Args, Entry, Func, NO_STACK, Space, Table, UNSAMPLED};

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
}

/// One event as the handler sees it.
#[derive(Debug, Clone)]
pub struct LeakEvent {
    pub role: Role,
    pub info: ParseInfo,
    /// Whether its samples carry a stack (else the allocation's stack is not sampled).
    pub stack: bool,
}

/// Reads a word of another process (posix_memalign's out-pointer).
pub type MemReader = fn(u32, u64) -> io::Result<u64>;

/// The handler.
pub struct LeakSink {
    events: Vec<LeakEvent>,
    ids: FxHashMap<u64, usize>,
    side: ParseInfo,
    pub maps: ProcessMaps,
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
    read_mem: MemReader,
    leaf_first: Vec<FrameId>,
    comms: FxHashMap<u32, String>,
}

impl LeakSink {
    pub fn new(
        events: Vec<LeakEvent>,
        ids: FxHashMap<u64, usize>,
        side: ParseInfo,
        table: Table,
        read_mem: MemReader,
    ) -> LeakSink {
        LeakSink {
            events,
            ids,
            side,
            maps: ProcessMaps::new(FxHashMap::default()),
            frames: FrameTable::default(),
            frame_addrs: Vec::new(),
            stacks: StackTable::default(),
            table,
            kernel_frames: false,
            malformed: 0,
            unread_results: 0,
            results_from_stack: 0,
            trace: None,
            read_mem,
            leaf_first: Vec::with_capacity(128),
            comms: FxHashMap::default(),
        }
    }

    /// The command name of a process (for folded prefixes); `[kernel]` for kernel memory.
    pub fn comm_of(&self, space: Space) -> String {
        if space >= super::table::KERNEL_PERCPU {
            return "[kernel]".to_string();
        }
        self.comms
            .get(&space)
            .cloned()
            .unwrap_or_else(|| space.to_string())
    }

    fn handle_side_band(&mut self, ty: u32, misc: u16, body: &[u8]) {
        let Ok(rec) = record::parse_record(ty, misc, body, &self.side) else {
            return;
        };
        match rec {
            Record::Mmap {
                pid,
                addr,
                len,
                pgoff,
                filename,
                ..
            } => self.maps.map(pid, addr, len, pgoff, filename, None),
            Record::Mmap2 {
                pid,
                addr,
                len,
                pgoff,
                build_id,
                filename,
                ..
            } => self.maps.map(pid, addr, len, pgoff, filename, build_id),
            Record::Comm {
                pid,
                tid,
                name,
                exec,
                ..
            } => {
                if exec {
                    // Nothing allocated before the exec is the new program's.
                    self.maps.exec(pid);
                    self.table.reset_space(pid);
                }
                if pid == tid {
                    let n = name.split(|&b| b == 0).next().unwrap_or(name);
                    self.comms
                        .insert(pid, String::from_utf8_lossy(n).into_owned());
                }
            }
            Record::Fork { pid, ppid, .. } => self.maps.fork(pid, ppid),
            Record::Exit { tid, .. } => self.table.thread_exit(tid),
            _ => {}
        }
    }

    fn handle_sample(&mut self, misc: u16, body: &[u8]) {
        let ev = match body.get(..8).and_then(|b| b.try_into().ok()) {
            Some(id) => self.ids.get(&u64::from_le_bytes(id)).copied(),
            None => None,
        };
        let Some(ev) = ev.or((self.events.len() == 1).then_some(0)) else {
            self.malformed += 1;
            return;
        };
        let info = self.events[ev].info;
        let Ok(Record::Sample(s)) = record::parse_record(b::PERF_RECORD_SAMPLE, misc, body, &info)
        else {
            self.malformed += 1;
            return;
        };
        let (pid, tid, time) = (s.pid.unwrap_or(0), s.tid.unwrap_or(0), s.time.unwrap_or(0));
        match self.events[ev].role.clone() {
            Role::Entry(func) => {
                let stack = if self.events[ev].stack {
                    self.user_stack(pid, &s)
                } else {
                    UNSAMPLED
                };
                let reg = |r: u32| s.regs_user.as_ref().and_then(|regs| regs.get(r));
                let args = Args {
                    a0: reg(b::PERF_REG_X86_DI).unwrap_or(0),
                    a1: reg(b::PERF_REG_X86_SI).unwrap_or(0),
                    a2: reg(b::PERF_REG_X86_DX).unwrap_or(0),
                };
                if let Some(w) = self.trace.as_mut() {
                    let _ = trace_entry(w, pid, tid, time, func, args, &self.table);
                }
                self.table.enter(Entry {
                    tid,
                    space: pid,
                    func,
                    args,
                    time,
                    stack,
                    sp: reg(b::PERF_REG_X86_SP).unwrap_or(0),
                });
            }
            Role::Return(func) => {
                let mut ret = s
                    .regs_user
                    .as_ref()
                    .and_then(|r| r.get(b::PERF_REG_X86_AX))
                    .unwrap_or(0);
                if func == Func::PosixMemalign {
                    ret = self.memalign_result(pid, tid, ret, &s);
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
                let stack = if self.events[ev].stack {
                    self.kernel_stack(&s)
                } else {
                    UNSAMPLED
                };
                self.table.insert_point(space, ptr, bytes, time, stack);
            }
            Role::KernelFree { space, addr } => {
                let raw = s.raw.unwrap_or(&[]);
                match addr.read(raw) {
                    Some(ptr) => self.table.free_point(space, ptr),
                    None => self.malformed += 1,
                }
            }
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

    /// The user part of the sample's callchain, without the probed function itself (the
    /// leaf is the probe site: memleak lists the caller first).
    fn user_stack(&mut self, pid: u32, s: &Sample<'_>) -> StackId {
        let Some(chain) = &s.callchain else {
            return NO_STACK;
        };
        self.leaf_first.clear();
        let mut in_user = false;
        let mut first = true;
        for ip in chain.iter() {
            if ip >= CONTEXT_MAX {
                in_user = ip == CONTEXT_USER;
                continue;
            }
            if !in_user {
                continue;
            }
            if first {
                first = false;
                continue;
            }
            let id = self.user_frame(pid, ip);
            self.leaf_first.push(id);
        }
        self.intern_leaf_first()
    }

    fn kernel_stack(&mut self, s: &Sample<'_>) -> StackId {
        let Some(chain) = &s.callchain else {
            return NO_STACK;
        };
        self.leaf_first.clear();
        let mut in_kernel = false;
        let mut n = 0;
        for ip in chain.iter() {
            if ip >= CONTEXT_MAX {
                in_kernel = ip == CONTEXT_KERNEL;
                continue;
            }
            if in_kernel {
                let id = self.intern_frame(
                    FrameKey::Kernel {
                        addr: ip,
                        ret: n > 0,
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

    fn intern_leaf_first(&mut self) -> StackId {
        self.stacks
            .intern(self.leaf_first.iter().rev().copied())
            .unwrap_or(NO_STACK)
    }

    fn user_frame(&mut self, pid: u32, addr: u64) -> FrameId {
        let key = FrameKey::user(&self.maps, pid, addr, true);
        self.intern_frame(key, addr)
    }

    fn intern_frame(&mut self, key: FrameKey, addr: u64) -> FrameId {
        let id = self.frames.intern(&key);
        if id as usize == self.frame_addrs.len() {
            self.frame_addrs.push(addr);
        }
        id
    }
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
        Func::Free | Func::Munmap => {
            let size = table.size_of(pid, args.a0).unwrap_or(0);
            writeln!(
                w,
                "{pid}/{tid} {t}: free entered, address = {:x}, size = {size}",
                args.a0
            )
        }
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

impl RecordSink for LeakSink {
    fn write_record(&mut self, bytes: &[u8]) -> io::Result<()> {
        let (Some(ty), Some(misc), Some(body)) = (
            bytes
                .get(..4)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_le_bytes),
            bytes
                .get(4..6)
                .and_then(|b| b.try_into().ok())
                .map(u16::from_le_bytes),
            bytes.get(8..),
        ) else {
            self.malformed += 1;
            return Ok(());
        };
        if ty == b::PERF_RECORD_SAMPLE {
            self.handle_sample(misc, body);
        } else {
            self.handle_side_band(ty, misc, body);
        }
        Ok(())
    }
}
