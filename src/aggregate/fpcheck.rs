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

use crate::maps::{ModuleInfo, ModuleKind, ProcessMaps};
use crate::unwind::confirm::CallSite;

/// The bytes before a return address that are read for the call ending at it.
const CALL_BYTES: u64 = 16;

/// The files of the modules whose code was read, opened once each, and what each call
/// site read said.
#[derive(Default)]
pub struct FpCheck {
    /// Each module (path and build-id: the maps' module ids are reused) → its index here.
    ids: FxHashMap<ModuleInfo, u32>,
    /// Each module's file, or `None` when it cannot be read or is not the file the process
    /// mapped (another build-id).
    files: Vec<Option<File>>,
    /// (module, file offset of the return address) → whether a call ends there; `None`
    /// when the bytes could not be read.
    verdicts: FxHashMap<(u32, u64), Option<bool>>,
}

impl FpCheck {
    /// Whether `ret`, a return address of the kernel's frame-pointer walk of process `pid`,
    /// can have been one: in the process's code, and, where that code can be read, just
    /// after a call instruction.
    pub fn may_return_to(&mut self, maps: &ProcessMaps, pid: u32, ret: u64) -> bool {
        if !maps.in_code(pid, ret) {
            return false;
        }
        self.call_ends_at(maps, pid, ret).unwrap_or(true)
    }

    /// Whether a call instruction ends at `ret`, read from the file mapped there (the 16
    /// bytes before it in the one mapping); `None` when they cannot be read.
    fn call_ends_at(&mut self, maps: &ProcessMaps, pid: u32, ret: u64) -> Option<bool> {
        let start = ret.checked_sub(CALL_BYTES)?;
        let (id, _, end) = maps.mapping_of(pid, start)?;
        if ret > end {
            return None;
        }
        let at = maps.mapping_at(pid, start)?;
        if at.module.kind() != ModuleKind::File {
            return None;
        }
        let module = match self.ids.get(at.module) {
            Some(&m) => m,
            None => {
                let m = self.files.len() as u32;
                self.files.push(open_module(at.module, maps.module_pid(id)));
                self.ids.insert(at.module.clone(), m);
                m
            }
        };
        let files = &self.files;
        *self.verdicts.entry((module, at.pgoff)).or_insert_with(|| {
            let file = files[module as usize].as_ref()?;
            let mut code = [0u8; 16];
            file.read_exact_at(&mut code, at.pgoff).ok()?;
            Some(CallSite::decode(&code, ret).is_call())
        })
    }
}

/// The file of `module` as process `pid` mapped it (under its root while it lives), when
/// it is a regular file and carries the build-id recorded for it.
fn open_module(module: &ModuleInfo, pid: u32) -> Option<File> {
    let (path, _) = crate::mapped::resolve_recorded(&module.path, Some(pid));
    if let Some(want) = &module.build_id {
        let have = crate::buildid::file_build_id(&path).ok().flatten()?;
        if !have.starts_with(want) && !want.starts_with(&have) {
            return None;
        }
    }
    crate::mapped::open_regular(&path, None).ok()
}
