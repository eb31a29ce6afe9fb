//! Leak or fragmentation: of the heap's resident pages, how many hold a live allocation and
//! how many hold none (free memory the allocator keeps, which `malloc_trim` would mostly give
//! back), read from the live process's page table.
//!
//! The heap's mappings are `[heap]` (the break), the mappings the allocator made for itself
//! while serving a call (glibc's arenas and mmap'd chunks, seen by the probes), and any
//! anonymous mapping holding a live block. A page is resident when `/proc/PID/pagemap` says
//! present (bit 63); it is held when some live block overlaps it, else retained. The table
//! lags the process by the rings' delay, so a reading is as exact as the process is still.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use crate::allocs::heap::HeapTracker;
use crate::allocs::table::Table;

/// One reading.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Retained {
    /// The sample clock when it was read.
    pub time: u64,
    pub page_size: u64,
    /// Heap mappings looked at.
    pub mappings: u64,
    pub resident_pages: u64,
    /// Resident pages some live allocation overlaps.
    pub held_pages: u64,
    /// Resident pages no live allocation overlaps.
    pub retained_pages: u64,
}

/// One line of /proc/PID/maps that may be heap.
struct Vma {
    start: u64,
    end: u64,
    heap: bool,
    anon_rw: bool,
}

fn parse_maps(text: &str) -> Vec<Vma> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms), Some(_off), Some(_dev), Some(inode)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let path = f.next().unwrap_or("");
        let Some((s, e)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (u64::from_str_radix(s, 16), u64::from_str_radix(e, 16)) else {
            continue;
        };
        out.push(Vma {
            start,
            end,
            heap: path == "[heap]",
            anon_rw: inode == "0" && path.is_empty() && perms.starts_with("rw"),
        });
    }
    out
}

/// Reads the heap of `pid` against the live blocks of the table.
pub fn measure(pid: u32, table: &Table, heap: &HeapTracker, time: u64) -> io::Result<Retained> {
    let page_size = crate::sys::page_size() as u64;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    let pagemap = File::open(format!("/proc/{pid}/pagemap"))?;
    let mut blocks: Vec<(u64, u64)> = table.blocks_of(pid).collect();
    blocks.sort_unstable();
    // What holds a page: a live block, or a live mapping the program made itself (Python's
    // arenas, a thread's stack), which the kernel may merge into one VMA with the
    // allocator's own. Only blocks make a mapping a candidate.
    let mut holders: Vec<(u64, u64)> = blocks.iter().copied().chain(table.ranges_of(pid)).collect();
    holders.sort_unstable();
    let mut r = Retained {
        time,
        page_size,
        ..Retained::default()
    };
    for vma in parse_maps(&maps) {
        let first = blocks.partition_point(|&(a, size)| a.saturating_add(size) <= vma.start);
        let holds_block = blocks.get(first).is_some_and(|&(a, _)| a < vma.end);
        let own = heap.allocator_maps_within(pid, vma.start, vma.end);
        if !(vma.heap || (vma.anon_rw && (own || holds_block))) {
            continue;
        }
        r.mappings += 1;
        let pages = ((vma.end - vma.start) / page_size) as usize;
        let present = present_pages(&pagemap, vma.start / page_size, pages)?;
        let from = holders.partition_point(|&(a, size)| a.saturating_add(size) <= vma.start);
        let held = held_pages(&holders[from..], vma.start, pages, page_size);
        for (p, h) in present.iter().zip(&held) {
            if *p {
                r.resident_pages += 1;
                if *h {
                    r.held_pages += 1;
                } else {
                    r.retained_pages += 1;
                }
            }
        }
    }
    Ok(r)
}

/// Which of `pages` pages from page number `first` are present (pagemap bit 63).
fn present_pages(pagemap: &File, first: u64, pages: usize) -> io::Result<Vec<bool>> {
    let mut out = Vec::with_capacity(pages);
    let mut buf = vec![0u8; 8 * 4096];
    let mut done = 0usize;
    while done < pages {
        let n = (pages - done).min(4096);
        let want = &mut buf[..n * 8];
        let got = pagemap.read_at(want, (first + done as u64) * 8)?;
        if got < n * 8 {
            // The mapping went away while it was read: the rest is not present.
            out.extend(want[..got].chunks_exact(8).map(is_present));
            out.resize(pages, false);
            return Ok(out);
        }
        out.extend(want.chunks_exact(8).map(is_present));
        done += n;
    }
    Ok(out)
}

fn is_present(entry: &[u8]) -> bool {
    let mut b = [0u8; 8];
    b.copy_from_slice(entry);
    u64::from_ne_bytes(b) & (1 << 63) != 0
}

/// Which pages of the mapping at `start` some block overlaps; `blocks` sorted by address,
/// starting with the first that ends past `start`.
fn held_pages(blocks: &[(u64, u64)], start: u64, pages: usize, page_size: u64) -> Vec<bool> {
    let mut held = vec![false; pages];
    let end = start + pages as u64 * page_size;
    for &(addr, size) in blocks {
        if addr >= end {
            break;
        }
        let (lo, hi) = (addr.max(start), addr.saturating_add(size.max(1)).min(end));
        if lo >= hi {
            continue;
        }
        let (p0, p1) = ((lo - start) / page_size, (hi - 1 - start) / page_size);
        for h in &mut held[p0 as usize..=p1 as usize] {
            *h = true;
        }
    }
    held
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_block_holds_every_page_it_overlaps() {
        let blocks = [(0x1000 + 4000, 200), (0x1000 + 3 * 4096, 1)];
        let held = held_pages(&blocks, 0x1000, 5, 4096);
        assert_eq!(held, vec![true, true, false, true, false]);
    }

    #[test]
    fn heap_and_anonymous_writable_mappings_are_candidates() {
        let maps = "\
55d0a000-55d0b000 r--p 00000000 fe:01 123 /usr/bin/app
55d0c000-55d2d000 rw-p 00000000 00:00 0 [heap]
7f00000000-7f04000000 rw-p 00000000 00:00 0 
7f05000000-7f05001000 r--p 00000000 00:00 0 
";
        let v = parse_maps(maps);
        assert_eq!(v.len(), 4);
        assert!(v[1].heap && v[2].anon_rw && !v[3].anon_rw && !v[0].anon_rw);
    }

    #[test]
    fn this_process_heap_is_measured() {
        // A block of ours, touched: its pages are resident and held.
        let mut t = Table::new(100, None, None);
        let h = HeapTracker::new(1);
        let pid = std::process::id();
        let v = vec![7u8; 64 * 1024];
        let addr = v.as_ptr() as u64;
        t.at(1, 1);
        t.insert_point(
            pid,
            addr,
            v.len() as u64,
            1,
            crate::allocs::table::AllocStack::Missing,
        );
        let r = measure(pid, &t, &h, 5).unwrap();
        assert!(r.held_pages >= 16, "{r:?}");
        assert!(r.resident_pages >= r.held_pages);
        drop(v);
    }

    #[test]
    fn a_live_mapping_of_the_program_holds_its_pages() {
        // The program's own anonymous mapping (Python's arenas, a thread's stack) inside a
        // mapping the allocator also made (the kernel merges neighbouring anonymous VMAs):
        // its pages are in use, not free memory the allocator keeps.
        use crate::allocs::table::{AllocStack, Args, Entry, Func};
        let pid = std::process::id();
        let len = 16 * 4096;
        let mut m = memmap2::MmapMut::map_anon(len).unwrap();
        m.fill(1);
        let start = m.as_ptr() as u64;
        let mut t = Table::new(100, None, None);
        t.enter(Entry {
            tid: 1,
            space: pid,
            func: Func::Mmap,
            args: Args {
                a0: 0,
                a1: len as u64,
                a2: 0,
            },
            time: 1,
            stack: AllocStack::Missing,
            sp: 0,
            in_allocator: false,
            fp_first: None,
        });
        t.leave(1, pid, Func::Mmap, start);
        let mut h = HeapTracker::new(1);
        h.allocator_mapped(pid, start, len as u64);
        let r = measure(pid, &t, &h, 5).unwrap();
        drop(m);
        // Its 16 pages are held; the test process's own [heap] (no block of it in the
        // table) may show as retained.
        assert!(r.held_pages >= 16, "{r:?}");
    }
}
