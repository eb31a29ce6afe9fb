//! JIT code's unwind info, from the jitdump its process writes.
//!
//! A JIT that writes `jit-PID.dump` may precede a function's `JIT_CODE_LOAD` with a
//! `JIT_CODE_UNWINDING_INFO`: the function's `.eh_frame` and `.eh_frame_hdr`, laid out as if
//! placed right after the code rounded up to 8 bytes (`crate::jitdump::Record::Unwinding`).
//! `perf inject --jit` attaches that record to the next load and writes both into the ELF
//! image it makes of the code, at those places. Here each such function becomes a framehop
//! module covering `[code_addr, code_addr + code_size)` whose CFI is that `.eh_frame`, with
//! the sections at the same addresses (the module's SVMAs are its AVMAs), so that a walk
//! goes through JIT code that keeps no frame pointer.
//!
//! The dump is found by its mapping (the JIT maps it executable; [`crate::jitdump::is_dump_of`])
//! and read through [`crate::mapped`], never blocking, each read bounded in time and bytes.
//! It grows while the JIT runs: each read takes the tail after the last whole record, and a
//! walk that stops at code no CFI covers, in a process with a dump, reads the tail again and
//! walks once more when that changed the functions. Reads that change nothing back off:
//! after k of them in a row, one per 2^k such walks (at most 2^10). A dump is read only to
//! unwind by DWARF (frame pointers need no CFI).
//!
//! `perf inject --jit` gives each load its own mapping from the load's time on, so a code
//! range reused by a later load unwinds older samples by the older CFI. Here the CFI in
//! place when a sample is unwound applies: while recording that is the CFI of the code
//! that ran (the JIT wrote the load before running it); a recording replayed reads the
//! whole dump at its mapping, and the last load of a reused range applies to all its
//! samples, as its name does.
//!
//! Kept: at most [`MAX_CFI_BYTES`] of CFI and [`MAX_FUNCTIONS`] functions per process (the
//! others are counted, `jit_cfi_left_out`). A function goes when a later load or move covers
//! its code, when a file is mapped over it, and with its process (exec, exit).

use std::io::{self, Read, Seek, SeekFrom};
use std::ops::Range;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use framehop::{ExplicitModuleSectionInfo, Module, Unwinder};

use super::elf::SectionData;
use super::{MappingEvent, NativeUnwinder, Process, UnwindStats, Unwinders};
use crate::jitdump::{Header, Next, Record, Records};
use crate::mapped::MappedFile;

/// The CFI bytes kept per process, at most.
pub const MAX_CFI_BYTES: usize = 16 << 20;
/// The JIT functions with CFI kept per process, at most (each is a framehop module, and
/// framehop keeps its modules in one sorted vector).
pub const MAX_FUNCTIONS: usize = 16 << 10;
/// The most of a dump read at once.
const MAX_READ: u64 = 16 << 20;
/// Fruitless reads in a row past which the back-off stops growing.
const MAX_BACKOFF_SHIFT: u32 = 10;

/// One JIT function added to the process's unwinder.
#[derive(Clone)]
struct JitFunction {
    code: Range<u64>,
    code_index: u64,
    eh_frame: SectionData,
    eh_frame_hdr: Option<SectionData>,
}

impl JitFunction {
    fn bytes(&self) -> usize {
        self.eh_frame.len() + self.eh_frame_hdr.as_ref().map_or(0, |h| h.len())
    }

    /// The framehop module: the sections where the JIT laid them out, after the code.
    fn module(&self) -> Option<Module<SectionData>> {
        let start = self.code.start;
        let size = self.code.end - start;
        let eh_start = start.checked_add(size.checked_next_multiple_of(8)?)?;
        let eh_end = eh_start.checked_add(self.eh_frame.len() as u64)?;
        let hdr = match &self.eh_frame_hdr {
            Some(h) => Some((eh_end..eh_end.checked_add(h.len() as u64)?, h.clone())),
            None => None,
        };
        let info = ExplicitModuleSectionInfo {
            base_svma: start,
            text_svma: Some(self.code.clone()),
            eh_frame_svma: Some(eh_start..eh_end),
            eh_frame: Some(self.eh_frame.clone()),
            eh_frame_hdr_svma: hdr.as_ref().map(|h| h.0.clone()),
            eh_frame_hdr: hdr.map(|h| h.1),
            ..ExplicitModuleSectionInfo::default()
        };
        Some(Module::new("[jit]".into(), self.code.clone(), start, info))
    }
}

/// The unwinding info read and not yet attached to a load.
#[derive(Clone)]
enum Pending {
    Cfi(SectionData, Option<SectionData>),
    /// Past the budget: the load it precedes is counted as left out.
    LeftOut,
}

/// The dump a process mapped, and how far it was read.
#[derive(Clone)]
struct Source {
    file: MappedFile,
    header: Option<Header>,
    /// The file offset of the first record not read whole.
    offset: u64,
    pending: Option<Pending>,
    reads: u64,
    /// `JIT_CODE_CLOSE` was read, or damage, or the file could not be read: no more reads.
    stopped: bool,
}

/// A process's JIT functions with CFI and the dump they come from.
#[derive(Clone, Default)]
pub(super) struct JitCfi {
    source: Option<Source>,
    /// Sorted by start, non-overlapping.
    functions: Vec<JitFunction>,
    bytes: usize,
    /// Walks that asked for a read since the last one, and fruitless reads in a row.
    asked: u64,
    fruitless: u32,
}

impl JitCfi {
    /// The process mapped its dump at `ev`. Mapped again, the same file is read on from
    /// where it was; another file replaces it.
    pub(super) fn set_source(&mut self, ev: &MappingEvent<'_>) {
        let file = MappedFile {
            pid: ev.pid,
            start: ev.start,
            len: ev.len,
            path: std::path::PathBuf::from(std::ffi::OsStr::from_bytes(ev.path)),
            dev_ino: ev.dev_ino,
        };
        if let Some(src) = self.source.as_mut()
            && src.file.path == file.path
            && src.file.dev_ino == file.dev_ino
        {
            src.file = file;
            return;
        }
        self.source = Some(Source {
            file,
            header: None,
            offset: 0,
            pending: None,
            reads: 0,
            stopped: false,
        });
    }

    /// A forked child keeps the functions (a copy of the parent's memory) but not the
    /// parent's dump: its JIT, if any, writes its own.
    pub(super) fn forget_source(&mut self) {
        self.source = None;
    }

    /// Whether a function with CFI covers `addr`.
    pub(super) fn covers(&self, addr: u64) -> bool {
        self.index(addr).is_some()
    }

    fn index(&self, addr: u64) -> Option<usize> {
        let i = self
            .functions
            .partition_point(|f| f.code.start <= addr)
            .checked_sub(1)?;
        (addr < self.functions[i].code.end).then_some(i)
    }

    /// Whether the dump was never read.
    pub(super) fn unread(&self) -> bool {
        self.source
            .as_ref()
            .is_some_and(|s| s.reads == 0 && !s.stopped)
    }

    /// A walk stopped at code no CFI covers: whether to read the dump's tail now (with the
    /// back-off of the module docs).
    pub(super) fn wants_read(&mut self) -> bool {
        if self.source.as_ref().is_none_or(|s| s.stopped) {
            return false;
        }
        self.asked += 1;
        if self.asked < 1 << self.fruitless.min(MAX_BACKOFF_SHIFT) {
            return false;
        }
        self.asked = 0;
        true
    }

    /// Whether the read [`Self::wants_read`] asked for changed the functions.
    pub(super) fn read_grew(&mut self, grew: bool) {
        self.fruitless = if grew { 0 } else { self.fruitless + 1 };
    }

    /// Removes the functions that overlap `r` from `unwinder`; returns how many went.
    pub(super) fn remove_overlapping(
        &mut self,
        r: &Range<u64>,
        unwinder: &mut NativeUnwinder,
    ) -> u32 {
        // Sorted and disjoint: the ones that overlap are together, found by their ends and
        // starts (every load and every file mapping asks, so no walk over all of them).
        let lo = self.functions.partition_point(|f| f.code.end <= r.start);
        let hi = self.functions.partition_point(|f| f.code.start < r.end);
        if lo >= hi {
            return 0;
        }
        for f in self.functions.drain(lo..hi) {
            unwinder.remove_module(f.code.start);
            self.bytes -= f.bytes();
        }
        (hi - lo) as u32
    }
}

impl Unwinders {
    /// Reads what `pid`'s jitdump gained since the last read; returns the framehop module
    /// changes made.
    pub(super) fn read_jit_dump(&mut self, pid: u32) -> u32 {
        self.memo.forget(pid);
        let Some(p) = self.procs.get_mut(&pid) else {
            return 0;
        };
        let changes = read(p, &mut self.stats);
        self.count_changes(changes);
        changes
    }

    /// After a walk of `pid` that stopped at code no CFI covers, in a process with a
    /// jitdump: reads the dump's tail (with the module docs' back-off). True when that
    /// changed the JIT functions, so that a second walk may get further. (Where the walk
    /// stopped says little: past JIT code without CFI, frame pointers may lead anywhere.)
    pub(super) fn jit_dump_grew(&mut self, pid: u32, out: &[u64]) -> bool {
        let stop = match out {
            [ip] => *ip,
            [.., ra] => ra.wrapping_sub(1),
            [] => return false,
        };
        let Some(p) = self.procs.get_mut(&pid) else {
            return false;
        };
        if p.has_cfi_at(stop) || !p.jit.wants_read() {
            return false;
        }
        let grew = self.read_jit_dump(pid) > 0;
        if let Some(p) = self.procs.get_mut(&pid) {
            p.jit.read_grew(grew);
        }
        grew
    }
}

/// Reads what `p`'s dump gained since the last read and adds the functions it loaded with
/// unwind info. Returns the framehop module changes made.
pub(super) fn read(p: &mut Process, stats: &mut UnwindStats) -> u32 {
    let Some(src) = p.jit.source.as_mut().filter(|s| !s.stopped) else {
        return 0;
    };
    src.reads += 1;
    stats.jit_dump_reads += 1;
    let (file, offset, header) = (src.file.clone(), src.offset, src.header);
    let timeout = crate::mapped::READ_TIMEOUT;
    let data = match crate::mapped::bounded(timeout, move || read_tail(&file, offset)) {
        Some(Ok(data)) => data,
        Some(Err(e)) => return stop(p, stats, &e.to_string()),
        None => {
            let why = format!("gave up reading it after {} ms", timeout.as_millis());
            return stop(p, stats, &why);
        }
    };
    let header = match header.map_or_else(|| Header::parse(&data), Ok) {
        Ok(h) => h,
        // Not written yet: the next read tries again.
        Err(_) if data.len() < 40 => return 0,
        Err(why) => return stop(p, stats, &why),
    };
    // The first read starts at the file's start, the others after the last whole record.
    let start = if offset == 0 { header.size } else { 0 };
    let mut records = Records::at(&data, header.big_endian, start).with_file_offset(offset);
    let mut changes = 0;
    let end = loop {
        match records.next_record() {
            Next::Record(Record::Close) => break Some(None),
            Next::Record(rec) => changes += apply(p, rec, stats),
            // A record larger than a read would never be read whole.
            Next::Incomplete if records.at == start && data.len() as u64 == MAX_READ => {
                let at = offset + start as u64;
                break Some(Some(format!(
                    "a record at offset {at} is larger than {MAX_READ} bytes"
                )));
            }
            Next::Incomplete => break None,
            Next::Damage(why) => break Some(Some(why)),
        }
    };
    if let Some(src) = p.jit.source.as_mut() {
        src.header = Some(header);
        src.offset = offset + records.at as u64;
        src.stopped = end.is_some();
    }
    if let Some(Some(why)) = end {
        stop(p, stats, &why);
    }
    changes
}

/// `MAX_READ` bytes at most of the dump from `offset`.
fn read_tail(file: &MappedFile, offset: u64) -> io::Result<Vec<u8>> {
    let mut f = crate::mapped::open(file)?;
    f.seek(SeekFrom::Start(offset))?;
    let mut data = Vec::new();
    f.take(MAX_READ).read_to_end(&mut data)?;
    Ok(data)
}

/// The dump cannot be read further: counted, the first problem kept.
fn stop(p: &mut Process, stats: &mut UnwindStats, why: &str) -> u32 {
    if let Some(src) = p.jit.source.as_mut() {
        src.stopped = true;
        stats.jit_dump_problems += 1;
        if stats.jit_dump_first_problem.is_none() {
            let path = src.file.path.display();
            stats.jit_dump_first_problem = Some(format!("jitdump {path}: {why}"));
        }
    }
    0
}

/// Applies one record; returns the framehop module changes made.
fn apply(p: &mut Process, rec: Record<'_>, stats: &mut UnwindStats) -> u32 {
    match rec {
        Record::Unwinding {
            eh_frame,
            eh_frame_hdr,
            mapped_size,
        } => {
            let pending = if eh_frame.is_empty() || mapped_size == 0 {
                // Only a header: the JIT says the code has no CFI (frame pointers, then).
                None
            } else if p.jit.bytes + eh_frame.len() + eh_frame_hdr.len() > MAX_CFI_BYTES
                || p.jit.functions.len() >= MAX_FUNCTIONS
            {
                Some(Pending::LeftOut)
            } else {
                let hdr = (!eh_frame_hdr.is_empty()).then(|| Arc::from(eh_frame_hdr));
                Some(Pending::Cfi(Arc::from(eh_frame), hdr))
            };
            if let Some(src) = p.jit.source.as_mut() {
                src.pending = pending;
            }
            0
        }
        Record::Load {
            code_addr,
            code_size,
            code_index,
            ..
        } => {
            let code = code_addr..code_addr.saturating_add(code_size);
            let mut changes = p.jit.remove_overlapping(&code, &mut p.unwinder);
            let pending = p.jit.source.as_mut().and_then(|s| s.pending.take());
            match pending {
                Some(Pending::Cfi(eh_frame, eh_frame_hdr)) => {
                    let f = JitFunction {
                        code,
                        code_index,
                        eh_frame,
                        eh_frame_hdr,
                    };
                    changes += add(p, f, true, stats);
                }
                Some(Pending::LeftOut) => stats.jit_cfi_left_out += 1,
                None => {}
            }
            changes
        }
        Record::Move {
            new_code_addr,
            code_size,
            code_index,
            ..
        } => {
            let Some(i) = p
                .jit
                .functions
                .iter()
                .position(|f| f.code_index == code_index)
            else {
                return 0;
            };
            let mut f = p.jit.functions[i].clone();
            let old = f.code.clone();
            let mut changes = p.jit.remove_overlapping(&old, &mut p.unwinder);
            f.code = new_code_addr..new_code_addr.saturating_add(code_size);
            changes += p.jit.remove_overlapping(&f.code, &mut p.unwinder);
            changes + add(p, f, false, stats)
        }
        Record::DebugInfo { .. } | Record::Close | Record::Other => 0,
    }
}

/// Adds `f` to the process's unwinder, unless a file's CFI covers part of its code; counts
/// it when it was `loaded` (not moved).
fn add(p: &mut Process, f: JitFunction, loaded: bool, stats: &mut UnwindStats) -> u32 {
    let over_file = p
        .modules
        .iter()
        .any(|m| m.has_cfi && m.avma.start < f.code.end && f.code.start < m.avma.end);
    let module = (!over_file && f.code.start < f.code.end)
        .then(|| f.module())
        .flatten();
    let Some(module) = module else {
        stats.jit_cfi_left_out += 1;
        return 0;
    };
    p.unwinder.add_module(module);
    if loaded {
        stats.jit_cfi_functions += 1;
        stats.jit_cfi_bytes += f.bytes() as u64;
    }
    p.jit.bytes += f.bytes();
    let i = p
        .jit
        .functions
        .partition_point(|x| x.code.start < f.code.start);
    p.jit.functions.insert(i, f);
    1
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::jitdump::Writer;
    use crate::unwind::UnwindMode;

    /// No such process: the dump is read at its path.
    const PID: u32 = 4_000_000_001;

    fn mapped(u: &mut Unwinders, path: &std::path::Path) {
        u.handle_mmap(&MappingEvent {
            pid: PID,
            start: 0x7000_0000,
            len: 0x1000,
            pgoff: 0,
            exec: true,
            path: path.as_os_str().as_encoded_bytes(),
            dev_ino: None,
            build_id: None,
        });
    }

    fn covers(u: &Unwinders, addr: u64) -> bool {
        u.procs[&PID].jit.covers(addr)
    }

    /// A dump read as it grows: loads with unwinding info become functions, a later load
    /// over one replaces it, a move carries it; a walk stopped in new code reads the tail;
    /// damage stops the reads and is said once.
    #[test]
    fn a_growing_dump_adds_functions_and_damage_stops_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("jit-{PID}.dump"));
        let mut w = Writer::new();
        std::fs::write(&path, &w.0).unwrap();
        let mut u = Unwinders::new(UnwindMode::Dwarf);
        mapped(&mut u, &path);
        let st = u.stats();
        assert_eq!((st.jit_dump_reads, st.jit_cfi_functions), (1, 0));
        assert_eq!(
            u.stats().elf_load_failures,
            0,
            "the marker is not read as ELF"
        );

        w.unwinding(1, &[1; 24], &[2; 20], true);
        w.load(2, (0x10000, 0x24, 1), "a");
        w.load(3, (0x20000, 0x10, 2), "no unwinding info");
        w.unwinding(4, &[], &[2; 20], false);
        w.load(5, (0x30000, 0x10, 3), "only a header");
        std::fs::write(&path, &w.0).unwrap();
        // A walk stopped at covered code reads nothing; one stopped in new code does.
        assert!(u.jit_dump_grew(PID, &[0x10004]));
        assert!(covers(&u, 0x10000) && covers(&u, 0x10023) && !covers(&u, 0x10024));
        assert!(!covers(&u, 0x20000) && !covers(&u, 0x30000));
        let st = u.stats();
        assert_eq!((st.jit_dump_reads, st.jit_cfi_functions), (2, 1));
        assert_eq!(st.jit_cfi_bytes, 44);
        // The marker mapped again: the dump is read on, its functions not added twice.
        mapped(&mut u, &path);
        assert_eq!(u.stats().jit_cfi_functions, 1);
        assert!(covers(&u, 0x10000));

        // Code reused: the later load replaces the function it overlaps; a move carries it.
        w.unwinding(6, &[3; 16], &[], true);
        w.load(7, (0x10010, 0x8, 4), "b");
        w.moved(8, (0x10010, 0x40000, 0x8, 4));
        std::fs::write(&path, &w.0).unwrap();
        assert!(u.jit_dump_grew(PID, &[0x1, 0x40005]));
        assert!(!covers(&u, 0x10000) && !covers(&u, 0x10010) && covers(&u, 0x40007));
        assert_eq!(u.procs[&PID].jit.functions.len(), 1);

        // Reads that do not help back off: one per 2^k asks after k of them.
        let reads = |u: &Unwinders| u.stats().jit_dump_reads;
        let before = reads(&u);
        for _ in 0..7 {
            assert!(!u.jit_dump_grew(PID, &[0x50000]));
        }
        // Asks 1, 2 (after 2 more) and 4 (after 4 more) read: 1 + 2 + 4 = 7 asks.
        assert_eq!(reads(&u) - before, 3);

        // A record whose size is less than its prefix: damage, said once, no more reads.
        let mut bad = w.0.clone();
        bad.extend(0u32.to_ne_bytes());
        bad.extend(8u32.to_ne_bytes());
        bad.extend(0u64.to_ne_bytes());
        std::fs::write(&path, &bad).unwrap();
        u.procs.get_mut(&PID).unwrap().jit.fruitless = 0;
        assert!(!u.jit_dump_grew(PID, &[0x50000]));
        let st = u.stats();
        assert_eq!(st.jit_dump_problems, 1);
        let problem = st.jit_dump_first_problem.unwrap();
        let at = format!("bad record size 8 at offset {}", w.0.len());
        assert!(problem.contains(&at), "{problem}");
        assert!(!u.procs.get_mut(&PID).unwrap().jit.wants_read());
        // The functions read stay; a file mapped over one removes it, an anonymous one not.
        assert!(covers(&u, 0x40000));
        u.handle_mmap(&MappingEvent {
            pid: PID,
            start: 0x40000,
            len: 0x1000,
            pgoff: 0,
            exec: true,
            path: b"//anon",
            dev_ino: None,
            build_id: None,
        });
        assert!(covers(&u, 0x40000));
        u.handle_mmap(&MappingEvent {
            pid: PID,
            start: 0x40000,
            len: 0x1000,
            pgoff: 0,
            exec: true,
            path: b"/nonexistent/lib.so",
            dev_ino: None,
            build_id: None,
        });
        assert!(!covers(&u, 0x40000));
    }

    /// The `.eh_frame` (CIE, one FDE, terminator) of a function of `size` bytes at `code`
    /// that keeps its CFA at rsp+8 but for rsp+48 in `[4, 35)`, with the PC-relative
    /// address of the FDE taken where perf inject places the section: right after the code
    /// rounded up to 8 bytes.
    fn eh_frame(code: u64, size: u64) -> Vec<u8> {
        let mut eh = vec![
            20, 0, 0, 0, 0, 0, 0, 0, 1, b'z', b'R', 0, 1, 0x78, 16, 1, 0x1b,
        ];
        eh.extend([0x0c, 7, 8, 0x90, 1, 0, 0]);
        let fde_at = code + size.next_multiple_of(8) + eh.len() as u64;
        eh.extend(28u32.to_le_bytes());
        eh.extend((eh.len() as u32).to_le_bytes());
        eh.extend(((code as i64 - (fde_at + 8) as i64) as i32).to_le_bytes());
        eh.extend((size as u32).to_le_bytes());
        eh.extend([0, 0x44, 0x0e, 48, 0x40 | 31, 0x0e, 8]);
        eh.extend([0; 9]);
        eh.extend([0; 4]);
        eh
    }

    /// The CFI is read where the JIT laid it out: at the `ret` of the function, the last
    /// byte its FDE covers, the return address is at rsp (a section placed 4 bytes off
    /// would cover no `ret`, and frame pointers would be tried instead).
    #[test]
    fn the_eh_frame_is_placed_after_the_code_rounded_up_to_8() {
        use framehop::{FrameAddress, UnwindRegsNative};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("jit-{PID}.dump"));
        let (code, size) = (0x10000, 36);
        let mut w = Writer::new();
        w.unwinding(1, &eh_frame(code, size), &[], true);
        w.load(2, (code, size, 1), "f");
        std::fs::write(&path, &w.0).unwrap();
        let mut u = Unwinders::new(UnwindMode::Dwarf);
        mapped(&mut u, &path);
        assert!(covers(&u, code + size - 1));
        let sp = 0x7ff0_0000;
        let mut read = |addr: u64| if addr == sp { Ok(0x4242) } else { Err(()) };
        let mut cache = framehop::CacheNative::new();
        let ip = code + size - 1;
        let mut regs = UnwindRegsNative::new(ip, sp, 0);
        let at = FrameAddress::from_instruction_pointer(ip);
        let unwinder = &u.procs[&PID].unwinder;
        let ra = unwinder.unwind_frame(at, &mut regs, &mut cache, &mut read);
        assert_eq!((ra, regs.sp()), (Ok(Some(0x4242)), sp + 8));
    }

    /// Past [`MAX_FUNCTIONS`] per process, functions are counted as left out, not kept; the
    /// loads without unwind info between them cost no walk over the functions kept.
    #[test]
    fn functions_past_the_budget_are_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("jit-{PID}.dump"));
        let mut w = Writer::new();
        let extra = 10;
        for i in 0..(MAX_FUNCTIONS + extra) as u64 {
            w.unwinding(i, &[1; 8], &[], true);
            w.load(i, (0x100_0000 + i * 0x100, 0x10, i), "f");
            w.load(i, (0x9000_0000 + i * 0x100, 0x10, i), "no unwind info");
        }
        std::fs::write(&path, &w.0).unwrap();
        let mut u = Unwinders::new(UnwindMode::Dwarf);
        mapped(&mut u, &path);
        let st = u.stats();
        assert_eq!(st.jit_cfi_functions, MAX_FUNCTIONS as u64);
        assert_eq!(st.jit_cfi_left_out, extra as u64);
        assert_eq!(u.procs[&PID].jit.functions.len(), MAX_FUNCTIONS);
        assert!(covers(&u, 0x100_0000) && !covers(&u, 0x100_0000 + MAX_FUNCTIONS as u64 * 0x100));
    }

    /// A record larger than one read is said, not read again and again.
    #[test]
    fn a_record_larger_than_a_read_stops_the_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("jit-{PID}.dump"));
        let mut w = Writer::new();
        w.load(1, (0x10000, MAX_READ, 1), "huge");
        std::fs::write(&path, &w.0).unwrap();
        let mut u = Unwinders::new(UnwindMode::Dwarf);
        mapped(&mut u, &path);
        let problem = u.stats().jit_dump_first_problem.unwrap();
        assert!(
            problem.contains("a record at offset 40 is larger"),
            "{problem}"
        );
        assert!(!u.procs.get_mut(&PID).unwrap().jit.wants_read());
    }

    /// A dump cut anywhere, or with any byte flipped, is read without a panic; a record cut
    /// at the end is read whole once the JIT finished writing it.
    #[test]
    fn cut_and_corrupt_dumps_never_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("jit-{PID}.dump"));
        let mut w = Writer::new();
        w.unwinding(1, &[1; 24], &[2; 20], true);
        w.load(2, (0x10000, 0x24, 1), "a");
        w.close(3);
        for cut in 0..w.0.len() {
            std::fs::write(&path, &w.0[..cut]).unwrap();
            let mut u = Unwinders::new(UnwindMode::Dwarf);
            mapped(&mut u, &path);
            std::fs::write(&path, &w.0).unwrap();
            u.procs.get_mut(&PID).unwrap().jit.fruitless = 0;
            u.jit_dump_grew(PID, &[0x10000]);
            assert!(covers(&u, 0x10000), "cut at {cut}");
            assert_eq!(u.stats().jit_dump_problems, 0, "cut at {cut}");
        }
        for i in 0..w.0.len() {
            let mut m = w.0.clone();
            m[i] ^= 0xff;
            std::fs::write(&path, &m).unwrap();
            let mut u = Unwinders::new(UnwindMode::Dwarf);
            mapped(&mut u, &path);
            u.jit_dump_grew(PID, &[0x10000]);
        }
    }
}
