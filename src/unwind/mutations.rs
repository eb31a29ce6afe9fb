//! Hostile ELF files, loaded by the unwinder and the symbolizer: a real binary with DWARF,
//! mutated deterministically (section headers pointing past the end or at huge sizes,
//! overlapping sections, truncation, note and build-id sizes, random bytes), must give an
//! error or a partial result, never a panic or a hang.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use super::elf::ElfInfo;
use crate::symbolize::{ModuleKey, SymbolizeOptions, Symbolizer};

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn u16_at(b: &[u8], off: usize) -> usize {
    usize::from(u16::from_le_bytes([b[off], b[off + 1]]))
}

fn u64_at(b: &[u8], off: usize) -> usize {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap()) as usize
}

/// Offsets of the section headers' sh_offset/sh_size fields, of the program headers, and
/// of the ELF header's table fields.
fn interesting_offsets(b: &[u8]) -> Vec<usize> {
    let (shoff, shentsize, shnum) = (u64_at(b, 0x28), u16_at(b, 0x3a), u16_at(b, 0x3c));
    let (phoff, phentsize, phnum) = (u64_at(b, 0x20), u16_at(b, 0x36), u16_at(b, 0x38));
    let mut v = vec![0x20, 0x28, 0x36, 0x38, 0x3a, 0x3c, 0x3e];
    for i in 0..shnum {
        let sh = shoff + i * shentsize;
        v.extend([
            sh + 0x04,
            sh + 0x10,
            sh + 0x18,
            sh + 0x20,
            sh + 0x28,
            sh + 0x38,
        ]);
    }
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        v.extend([ph + 0x08, ph + 0x10, ph + 0x20, ph + 0x28]);
    }
    v.retain(|&o| o + 8 <= b.len());
    v
}

const HOSTILE: [u64; 8] = [
    0,
    1,
    0x7fff_ffff,
    0xffff_ffff,
    u64::MAX,
    u64::MAX / 2,
    1 << 40,
    0x1000,
];

fn mutate(rng: &mut Rng, orig: &[u8], offsets: &[usize]) -> Vec<u8> {
    let mut b = orig.to_vec();
    match rng.below(5) {
        0 => {
            // A table field or a section's offset/size set to something hostile.
            for _ in 0..1 + rng.below(3) {
                let at = offsets[rng.below(offsets.len())];
                let v = HOSTILE[rng.below(HOSTILE.len())].wrapping_add(if rng.below(2) == 0 {
                    0
                } else {
                    orig.len() as u64
                });
                b[at..at + 8].copy_from_slice(&v.to_le_bytes());
            }
        }
        1 => b.truncate(rng.below(orig.len())),
        2 => {
            for _ in 0..1 + rng.below(16) {
                let i = rng.below(b.len());
                b[i] ^= 1 << rng.below(8);
            }
        }
        3 => {
            // A run of random bytes somewhere (notes, CFI, DWARF).
            let start = rng.below(b.len());
            let len = rng.below(256).min(b.len() - start);
            for x in &mut b[start..start + len] {
                *x = rng.next() as u8;
            }
        }
        _ => {
            // One section's bytes copied over another's (overlapping, cyclic DWARF offsets).
            let a = rng.below(b.len());
            let c = rng.below(b.len());
            let len = rng.below(4096).min(b.len() - a.max(c));
            let chunk = b[a..a + len].to_vec();
            b[c..c + len].copy_from_slice(&chunk);
        }
    }
    b
}

/// Loads `path` as the unwinder and as the symbolizer do; panics propagate. Returns whether
/// the unwinder took the file.
fn load_both(path: &Path, rng: &mut Rng) -> bool {
    let loaded = ElfInfo::load(path).map(|i| (i.has_unwind_info(), i.section_info()));
    let mut sym = Symbolizer::new(SymbolizeOptions {
        inline: true,
        lines: true,
        demangle: true,
    });
    let key = ModuleKey {
        path: path.as_os_str().as_encoded_bytes(),
        build_id: None,
        pid: None,
    };
    for _ in 0..4 {
        let off = rng.next() % 0x4000;
        let _ = sym.symbolize(&key, crate::stacks::CodeAddr::new(off, rng.below(2) == 0));
    }
    loaded.is_ok()
}

#[test]
fn mutated_elf_files_never_panic_the_unwinder_or_the_symbolizer() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("pagefault");
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/pagefault.c");
    let ok = std::process::Command::new("cc")
        .args(["-O2", "-g", "-o"])
        .arg(&exe)
        .arg(src)
        .status()
        .unwrap();
    assert!(ok.success());
    let orig = std::fs::read(&exe).unwrap();
    let offsets = interesting_offsets(&orig);
    let mut rng = Rng(0x5eed_e1f0);
    let path = dir.path().join("mutant");
    let mut failures = Vec::new();
    let mut loaded = 0;
    for case in 0..1500 {
        let bytes = mutate(&mut rng, &orig, &offsets);
        std::fs::write(&path, &bytes).unwrap();
        let mut r = Rng(rng.next() | 1);
        match catch_unwind(AssertUnwindSafe(|| load_both(&path, &mut r))) {
            Ok(true) => loaded += 1,
            Ok(false) => {}
            Err(_) => failures.push(case),
        }
    }
    assert!(failures.is_empty(), "panics on mutants {failures:?}");
    // Both kinds of mutant were met: ones the loaders refuse and ones they take.
    assert!((100..1400).contains(&loaded), "{loaded} of 1500 loaded");
}
