//! Builds and runs `fixtures/unwind_dump.c`, which dumps its registers, maps and stack from
//! inside main -> level1 -> level2 -> level3 -> leaf. Shared by the unwind tests and
//! `benches/unwind.rs` (included there with `#[path]`), so it uses only std and tempfile.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The fixture's dump.
pub struct Dump {
    /// Holds the binary and the dump files.
    pub dir: tempfile::TempDir,
    pub exe: PathBuf,
    /// `name value` pairs from regs.txt: pid, ip, sp, bp, main, level1..3, leaf, malloc.
    pub values: Vec<(String, u64)>,
    pub maps: Vec<u8>,
    pub stack: Vec<u8>,
    /// The executable's data mappings (its GOT among them): start address and bytes.
    pub data: Vec<(u64, Vec<u8>)>,
}

impl Dump {
    pub fn get(&self, name: &str) -> u64 {
        self.values
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |v| v.1)
    }
}

fn fixture_source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/unwind_dump.c")
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Compiles the fixture with `cc -O1` and frame pointers kept or omitted, runs it, and
/// reads its dump.
pub fn build_and_run(omit_frame_pointer: bool) -> Result<Dump, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let exe = dir.path().join("unwind_dump");
    let fp_flag = if omit_frame_pointer {
        "-fomit-frame-pointer"
    } else {
        "-fno-omit-frame-pointer"
    };
    run(Command::new("cc")
        .args(["-O1", "-g", fp_flag, "-o"])
        .arg(&exe)
        .arg(fixture_source()))?;
    run(Command::new(&exe).arg(dir.path()))?;
    let read =
        |name: &str| std::fs::read(dir.path().join(name)).map_err(|e| format!("{name}: {e}"));
    let regs = String::from_utf8(read("regs.txt")?).map_err(|e| e.to_string())?;
    let values = regs
        .lines()
        .filter_map(|l| {
            let (name, value) = l.split_once(' ')?;
            Some((name.to_string(), u64::from_str_radix(value, 16).ok()?))
        })
        .collect();
    let (maps, stack) = (read("maps.txt")?, read("stack.bin")?);
    let (index, mut bytes) = (read("mem.txt")?, read("mem.bin")?.into_iter());
    let data = String::from_utf8_lossy(&index)
        .lines()
        .filter_map(|l| {
            let (a, n) = l.split_once(' ')?;
            let n = usize::from_str_radix(n, 16).ok()?;
            Some((
                u64::from_str_radix(a, 16).ok()?,
                bytes.by_ref().take(n).collect(),
            ))
        })
        .collect();
    Ok(Dump {
        dir,
        exe,
        values,
        maps,
        stack,
        data,
    })
}
