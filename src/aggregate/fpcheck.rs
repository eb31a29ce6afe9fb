//! Whether a return address of the kernel's frame-pointer walk (`--call-graph fp`) can
//! have been one. Through code built without frame pointers the walk follows a register
//! that holds anything and reads the word above it as a return address: a value outside
//! the process's code cannot have been one ([`ProcessMaps::in_code`]), and nor can an
//! address in code that no call instruction ends at (a function pointer read from the
//! heap, for one): a call pushes the address of the instruction after it. The call is read
//! from the module's file on disk, as the unwinder's call-site check reads it
//! (`unwind::confirm`); where that file cannot be read (gone, replaced, JIT code), the
//! address is kept on the first rule alone.

use std::fs::File;
use std::os::unix::fs::FileExt;

use rustc_hash::FxHashMap;

use crate::mapped::DevIno;
use crate::maps::{ModuleInfo, ModuleKind, ProcessMaps};
use crate::records::Record;
use crate::unwind::confirm::CallSite;

/// The bytes read on each side of a return address: the call that ends at it before, and
/// what a return address that no call pushed starts with after.
const SIDE: u64 = 16;
/// Files held open at once; past it, one is closed for each new one (and opened again
/// when met again).
const MAX_OPEN: usize = 64;

/// What each return address of each process was found to be, and the files of the modules
/// whose code was read.
#[derive(Default)]
pub struct FpCheck {
    /// pid → return address in the process's code → whether a call pushed it; forgotten
    /// with the process's mappings ([`FpCheck::side_band`]). Values outside the code are
    /// not kept (garbage, unbounded; `ProcessMaps::in_code` answers them as fast).
    memo: FxHashMap<u32, FxHashMap<u64, bool>>,
    /// Each module's file by (path and build-id, device and inode: another file at the same
    /// path, a container's or an upgrade's, is another key), or `None` when it cannot be
    /// read or is not the file the process mapped.
    files: FxHashMap<(ModuleInfo, DevIno), Option<File>>,
}

impl FpCheck {
    /// Whether `ret`, a return address of the kernel's frame-pointer walk of process `pid`,
    /// can have been one: in the process's code, and, where that code can be read, just
    /// after a call instruction (or at one of the return addresses no call pushes: a signal
    /// handler's return to `rt_sigreturn`, Go's goroutine start).
    pub fn may_return_to(&mut self, maps: &ProcessMaps, pid: u32, ret: u64) -> bool {
        if let Some(&known) = self.memo.get(&pid).and_then(|m| m.get(&ret)) {
            return known;
        }
        if !maps.in_code(pid, ret) {
            return false;
        }
        let can = self.pushed_by_a_call(maps, pid, ret).unwrap_or(true);
        self.memo.entry(pid).or_default().insert(ret, can);
        can
    }

    /// Forgets what the return addresses of the process whose mappings `rec` changes were
    /// found to be (the rule of [`super::remaps`]).
    pub fn side_band(&mut self, rec: &Record<'_>) {
        if let Some(pid) = super::remaps(rec) {
            self.memo.remove(&pid);
        }
    }

    /// Whether the code around `ret` says a call pushed it, read from the file mapped
    /// there; `None` when the 16 bytes before it cannot be read (not all in one mapping of
    /// a file that is still the one mapped).
    fn pushed_by_a_call(&mut self, maps: &ProcessMaps, pid: u32, ret: u64) -> Option<bool> {
        let start = ret.checked_sub(SIDE)?;
        let at = maps.mapping_at(pid, start)?;
        let end = at.end;
        if ret > end || at.module.kind() != ModuleKind::File {
            return None;
        }
        let a = at.attrs;
        let key = (at.module.clone(), (a.maj, a.min, a.ino));
        if !self.files.contains_key(&key)
            && self.files.len() >= MAX_OPEN
            && let Some(old) = self.files.keys().next().cloned()
        {
            self.files.remove(&old);
        }
        let file = self
            .files
            .entry(key)
            .or_insert_with(|| open_module(at.module, a.ino, pid))
            .as_ref()?;
        // The bytes after it, where the mapping and the file have them.
        let want = if ret + SIDE <= end { 2 * SIDE } else { SIDE } as usize;
        let mut code = [0u8; 2 * SIDE as usize];
        let got = read_up_to(file, &mut code[..want], at.pgoff);
        if got < SIDE as usize {
            return None;
        }
        let (before, after) = code.split_at(SIDE as usize);
        let before: &[u8; 16] = before.try_into().ok()?;
        let after = (got == code.len()).then_some(after);
        Some(
            CallSite::decode(before, ret).is_call()
                || after.is_some_and(|a| no_call_returns_to(before, a)),
        )
    }
}

/// Whether the code at a return address is one that no call pushes but which is a frame's
/// return address all the same: `rt_sigreturn` (`mov $15, %rax` or `%eax`; `syscall`: glibc's
/// and musl's `__restore_rt`, where a signal handler returns), and Go's `goexit` (a NOP,
/// then the call at the address it pushes as every goroutine's first return address).
/// Either lets a rare misread value through (a function whose padding ends in a NOP and
/// which starts with a call; a restorer's address read from memory): never a true frame
/// cut.
fn no_call_returns_to(before: &[u8; 16], after: &[u8]) -> bool {
    const SIGRETURN_RAX: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0, 0, 0, 0x0f, 0x05];
    const SIGRETURN_EAX: [u8; 7] = [0xb8, 0x0f, 0, 0, 0, 0x0f, 0x05];
    after.starts_with(&SIGRETURN_RAX)
        || after.starts_with(&SIGRETURN_EAX)
        || (before[15] == 0x90 && after.first() == Some(&0xe8))
}

/// Reads into `buf` from `at` until it is full or the file ends: how many bytes it read.
fn read_up_to(file: &File, buf: &mut [u8], at: u64) -> usize {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], at + got as u64) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    got
}

/// The file of `module` as process `pid` (the sample's) mapped it, under its root while it
/// lives: a regular file with the inode the mapping named (when it named one; not the
/// device, which btrfs subvolumes and overlayfs report otherwise to `stat`) and the
/// build-id recorded for it (when one was).
pub(crate) fn open_module(module: &ModuleInfo, ino: u64, pid: u32) -> Option<File> {
    use std::os::unix::fs::MetadataExt;
    let (path, _) = crate::mapped::resolve_recorded(&module.path, Some(pid));
    if !crate::buildid::file_matches(&path, module.build_id.as_deref()) {
        return None;
    }
    let file = crate::mapped::open_regular(&path, None).ok()?;
    (ino == 0 || file.metadata().ok()?.ino() == ino).then_some(file)
}

#[cfg(test)]
mod tests {
    use super::no_call_returns_to;

    #[test]
    fn return_addresses_no_call_pushed_are_known() {
        let nops = [0x90u8; 16];
        let mut before = [0xccu8; 16];
        // glibc's __restore_rt, musl's.
        let glibc = [0x48, 0xc7, 0xc0, 0x0f, 0, 0, 0, 0x0f, 0x05, 0x0f];
        assert!(no_call_returns_to(&before, &glibc));
        assert!(no_call_returns_to(
            &before,
            &[0xb8, 0x0f, 0, 0, 0, 0x0f, 0x05]
        ));
        // Another syscall, another register: not.
        assert!(!no_call_returns_to(
            &before,
            &[0x48, 0xc7, 0xc0, 0x0e, 0, 0, 0, 0x0f, 0x05]
        ));
        // Go's goexit+1: a NOP before, a call at it.
        assert!(no_call_returns_to(&nops, &[0xe8, 1, 2, 3, 4]));
        before[15] = 0xc3;
        assert!(!no_call_returns_to(&before, &[0xe8, 1, 2, 3, 4]));
        // Code after 16 nops (the fixture's decoy): not.
        assert!(!no_call_returns_to(&nops, &[0xc3]));
    }
}
