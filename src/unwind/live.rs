//! Finishing an unwind from the live process. The kernel's copy of a user stack ends where
//! the requested size ends, or earlier at the first stack page that was never touched (a
//! large buffer on the stack, partly used, leaves such pages between the leaf and `main`).
//! While recording, the thread is usually still alive and still inside the frames the copy
//! did not reach: their bytes are read from its memory with `process_vm_readv`, a page at
//! a time and only the pages the unwind asks for, and every frame found that way is
//! checked before it is kept (see [`Recovery::validate`]).

use std::cell::{Cell, RefCell};

use rustc_hash::FxHashMap;

/// Stack pages read per sample, at most.
const MAX_PAGES: usize = 32;
/// How far above the sampled stack pointer a recovered frame may lie (the default stack
/// size limit, `ulimit -s`).
const MAX_SPAN: u64 = 8 << 20;
const PAGE: u64 = 4096;
/// Return addresses whose call instruction was checked, per process, before the table is
/// cleared.
const CALL_CACHE_MAX: usize = 1 << 16;

/// Reads another process's memory. The recorder's is [`ProcessMemory`]; tests give a fake.
pub trait LiveMemory {
    /// Reads up to `buf.len()` bytes at `addr` of process `pid`; how many were read.
    fn read(&mut self, pid: u32, addr: u64, buf: &mut [u8]) -> std::io::Result<usize>;

    /// The 16 bytes of code before `ra` in process `pid`, to check that a call instruction
    /// ends there. `None` when they cannot be read. `site` names the place in its file (the
    /// same in every process that maps the file), for a cache.
    fn code_before(&mut self, pid: u32, ra: u64, site: CodeSite) -> Option<[u8; 16]>;
}

/// A live process's memory through `process_vm_readv`. Stack pages are read directly (they
/// are anonymous memory); code is read on `mapped`'s reading thread, bounded in time, since a
/// code page may have to come from a file, and each return address is checked once.
#[derive(Default)]
pub struct ProcessMemory {
    calls: FxHashMap<CodeSite, Option<[u8; 16]>>,
}

/// A return address as a place in a file: the file (its path's hash) and the offset.
pub type CodeSite = (u64, u64);

impl LiveMemory for ProcessMemory {
    fn read(&mut self, pid: u32, addr: u64, buf: &mut [u8]) -> std::io::Result<usize> {
        crate::sys::read_process_memory(pid, addr, buf)
    }

    fn code_before(&mut self, pid: u32, ra: u64, site: CodeSite) -> Option<[u8; 16]> {
        if let Some(c) = self.calls.get(&site) {
            return *c;
        }
        if self.calls.len() >= CALL_CACHE_MAX {
            self.calls.clear();
        }
        let start = ra.checked_sub(16)?;
        let code = crate::mapped::bounded(crate::mapped::READ_TIMEOUT, move || {
            let mut b = [0u8; 16];
            match crate::sys::read_process_memory(pid, start, &mut b) {
                Ok(16) => Some(b),
                _ => None,
            }
        })
        .flatten();
        self.calls.insert(site, code);
        code
    }
}

/// Whether the bytes before a return address end with a call instruction: `call rel32`
/// (E8), or `call r/m64` (FF /2) in any of its encodings (register, memory with or without
/// SIB and displacement, RIP-relative), with or without a REX prefix.
pub fn ends_with_call(code: &[u8; 16]) -> bool {
    let n = code.len();
    if code[n - 5] == 0xe8 {
        return true;
    }
    // FF /2: opcode FF at n-len, ModRM after it; len covers ModRM, SIB and displacement.
    (2..=7).any(|len| {
        let at = n - len;
        code[at] == 0xff && indirect_call_len(&code[at + 1..]) == Some(len)
    })
}

/// The length of `FF /2` with this ModRM (and what follows), opcode included.
fn indirect_call_len(rest: &[u8]) -> Option<usize> {
    let modrm = *rest.first()?;
    if (modrm >> 3) & 7 != 2 {
        return None;
    }
    let md = modrm >> 6;
    let rm = modrm & 7;
    let sib = md != 3 && rm == 4;
    let disp = match md {
        0 if rm == 5 => 4,
        0 if sib && rest.get(1).is_some_and(|s| s & 7 == 5) => 4,
        0 | 3 => 0,
        1 => 1,
        _ => 4,
    };
    Some(2 + usize::from(sib) + disp)
}

/// One sample's reads beyond its copied stack, and what they were for.
pub(crate) struct Recovery<'m> {
    pid: u32,
    sp: u64,
    /// The first address the copy does not hold, and the highest a frame may use.
    lo: u64,
    hi: u64,
    memory: RefCell<&'m mut dyn LiveMemory>,
    pages: RefCell<Vec<(u64, Box<[u8]>)>>,
    /// Frames produced so far, and how many there were at the first read past the copy:
    /// the frames from there on depend on the live process's memory.
    produced: Cell<usize>,
    pub first: Cell<Option<usize>>,
    /// A read was refused (the thread exited, the page is gone, too many pages).
    pub failed: Cell<bool>,
    /// The highest address read past the copy, in this step and in all.
    step_max: Cell<u64>,
    pub max_addr: Cell<u64>,
    steps: RefCell<Vec<u64>>,
}

impl<'m> Recovery<'m> {
    pub(crate) fn new(pid: u32, sp: u64, copy_end: u64, memory: &'m mut dyn LiveMemory) -> Self {
        Recovery {
            pid,
            sp,
            lo: copy_end,
            hi: sp.saturating_add(MAX_SPAN),
            memory: RefCell::new(memory),
            pages: RefCell::new(Vec::new()),
            produced: Cell::new(0),
            first: Cell::new(None),
            failed: Cell::new(false),
            step_max: Cell::new(0),
            max_addr: Cell::new(0),
            steps: RefCell::new(Vec::new()),
        }
    }

    pub(crate) fn sp(&self) -> u64 {
        self.sp
    }

    pub(crate) fn lo(&self) -> u64 {
        self.lo
    }

    /// The word at `addr` (past the copy) from the live process.
    pub(crate) fn read(&self, addr: u64) -> Option<u64> {
        if self.first.get().is_none() {
            self.first.set(Some(self.produced.get()));
        }
        if addr < self.lo || addr.saturating_add(8) > self.hi {
            self.failed.set(true);
            return None;
        }
        let mut word = [0u8; 8];
        for (i, b) in word.iter_mut().enumerate() {
            *b = self.byte(addr + i as u64)?;
        }
        self.step_max.set(self.step_max.get().max(addr));
        self.max_addr.set(self.max_addr.get().max(addr));
        Some(u64::from_ne_bytes(word))
    }

    fn byte(&self, addr: u64) -> Option<u8> {
        let page = addr & !(PAGE - 1);
        let off = (addr - page) as usize;
        let mut pages = self.pages.borrow_mut();
        if let Some((_, bytes)) = pages.iter().find(|(p, _)| *p == page) {
            return bytes.get(off).copied();
        }
        if pages.len() >= MAX_PAGES || self.failed.get() {
            self.failed.set(true);
            return None;
        }
        let mut bytes = vec![0u8; PAGE as usize].into_boxed_slice();
        match self.memory.borrow_mut().read(self.pid, page, &mut bytes) {
            Ok(n) if n == bytes.len() => {}
            _ => {
                self.failed.set(true);
                return None;
            }
        }
        let b = bytes[off];
        pages.push((page, bytes));
        Some(b)
    }

    /// Called after each frame is produced (the frame count so far).
    pub(crate) fn frame_done(&self, frames: usize) {
        self.produced.set(frames);
        if self.first.get().is_some() {
            self.steps.borrow_mut().push(self.step_max.replace(0));
        }
    }

    /// Whether the frames from [`Self::first`] on may be kept: each return address is in
    /// an executable mapping of the process (`site_of` places it) right after a call instruction,
    /// and each step read higher on the stack than the one before (the CFAs increase). The
    /// caller also requires the walk to have ended at the thread's entry.
    pub(crate) fn validate(
        &self,
        frames: &[u64],
        site_of: impl Fn(u64) -> Option<CodeSite>,
    ) -> bool {
        let Some(first) = self.first.get() else {
            return true;
        };
        if self.failed.get() {
            return false;
        }
        let mut memory = self.memory.borrow_mut();
        for &ra in frames.get(first..).unwrap_or(&[]) {
            let Some(site) = site_of(ra) else {
                return false;
            };
            match memory.code_before(self.pid, ra, site) {
                Some(code) if ends_with_call(&code) => {}
                _ => return false,
            }
        }
        let steps = self.steps.borrow();
        let mut last = 0;
        for &m in steps.iter().filter(|&&m| m != 0) {
            if m <= last {
                return false;
            }
            last = m;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_tail(tail: &[u8]) -> [u8; 16] {
        let mut c = [0x90u8; 16];
        c[16 - tail.len()..].copy_from_slice(tail);
        c
    }

    #[test]
    fn recognizes_the_call_encodings_compilers_emit() {
        // call rel32
        assert!(ends_with_call(&with_tail(&[0xe8, 1, 2, 3, 4])));
        // call *%rax, call *%r11 (REX.B)
        assert!(ends_with_call(&with_tail(&[0xff, 0xd0])));
        assert!(ends_with_call(&with_tail(&[0x41, 0xff, 0xd3])));
        // call *0x18(%rax), call *0x100(%rbx)
        assert!(ends_with_call(&with_tail(&[0xff, 0x50, 0x18])));
        assert!(ends_with_call(&with_tail(&[0xff, 0x93, 0, 1, 0, 0])));
        // call *(%rax), call *0x8(%rsp) (SIB)
        assert!(ends_with_call(&with_tail(&[0xff, 0x10])));
        assert!(ends_with_call(&with_tail(&[0xff, 0x54, 0x24, 0x08])));
        // call *disp32(%rip): PLT-less calls through the GOT
        assert!(ends_with_call(&with_tail(&[0xff, 0x15, 1, 2, 3, 4])));
        // call *0x10(,%rax,8) (SIB without base: disp32)
        assert!(ends_with_call(&with_tail(&[
            0xff, 0x14, 0xc5, 0x10, 0, 0, 0
        ])));
    }

    #[test]
    fn rejects_what_is_not_a_call() {
        // nops; jmp *%rax (FF /4); push (FF /6); a ret
        assert!(!ends_with_call(&[0x90; 16]));
        assert!(!ends_with_call(&with_tail(&[0xff, 0xe0])));
        assert!(!ends_with_call(&with_tail(&[0xff, 0x30])));
        assert!(!ends_with_call(&with_tail(&[0xc3])));
        // FF /2 with a ModRM that needs a displacement the bytes do not leave room for.
        assert!(!ends_with_call(&with_tail(&[0xff, 0x90, 1, 2])));
    }
}
