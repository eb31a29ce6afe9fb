//! The perf mmap ring buffer: one control page followed by a power-of-two data area.
//!
//! Reading follows the kernel's protocol: load `data_head` with Acquire, read records between
//! `data_tail` and `data_head`, then store the new `data_tail` with Release. Parsing works on the
//! pending bytes as two slices (before and after the wrap point), so it is tested without the
//! kernel.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use perf_event_open_sys::bindings::perf_event_mmap_page;

/// Size of `perf_event_header`.
const HEADER_SIZE: usize = 8;

/// A perf event fd with its ring buffer mapped.
pub struct RingBuffer {
    fd: OwnedFd,
    map: NonNull<u8>,
    map_len: usize,
    data_offset: usize,
    data_size: usize,
    scratch: Vec<u8>,
}

// SAFETY: the mapping is owned by this value alone and only touched through `&mut self`
// (readers borrow the ring mutably), so moving it to another thread is sound.
unsafe impl Send for RingBuffer {}

impl RingBuffer {
    /// Maps `1 + data_pages` pages of `fd`. `data_pages` must be a power of two. A failed
    /// mmap returns the raw OS error (EPERM/ENOMEM for the locked-memory limit) so callers can
    /// pass `raw_os_error()` to `explain_mmap_error`.
    pub fn new(fd: OwnedFd, data_pages: usize) -> Result<RingBuffer, io::Error> {
        if data_pages == 0 || !data_pages.is_power_of_two() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("ring buffer size must be a power of two pages, got {data_pages}"),
            ));
        }
        let page = super::page_size();
        let too_big = || io::Error::new(io::ErrorKind::InvalidInput, "ring buffer too large");
        let data_size = data_pages.checked_mul(page).ok_or_else(too_big)?;
        let map_len = data_size.checked_add(page).ok_or_else(too_big)?;
        // SAFETY: a fresh shared mapping of the perf fd; the kernel validates the length and
        // we check the result before using it.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let map = NonNull::new(ptr.cast::<u8>()).ok_or_else(io::Error::last_os_error)?;
        Ok(RingBuffer {
            fd,
            map,
            map_len,
            data_offset: page,
            data_size,
            scratch: Vec::new(),
        })
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Size of the data area in bytes.
    pub fn data_size(&self) -> usize {
        self.data_size
    }

    /// Whether the kernel wrote records the reader has not consumed: `data_head` against
    /// `data_tail`, two loads from the control page, no system call.
    pub fn has_data(&self) -> bool {
        let (head, tail) = self.positions();
        head != tail
    }

    /// The kernel's `data_head` and the reader's `data_tail`: how far the ring has been
    /// written and read, in bytes since it was mapped (two loads, no system call).
    pub fn positions(&self) -> (u64, u64) {
        // SAFETY: as in `reader`: both words lie in the control page, mapped while `self`
        // lives, 8-byte aligned, and only accessed atomically.
        let (head, tail) = unsafe {
            (
                control_word(
                    self.map,
                    std::mem::offset_of!(perf_event_mmap_page, data_head),
                ),
                control_word(
                    self.map,
                    std::mem::offset_of!(perf_event_mmap_page, data_tail),
                ),
            )
        };
        (head.load(Ordering::Acquire), tail.load(Ordering::Relaxed))
    }

    /// A snapshot of the records written so far.
    pub fn reader(&mut self) -> RingReader<'_> {
        let map = self.map;
        // SAFETY: data_head and data_tail lie inside the control page, which stays mapped while
        // the returned reader borrows `self`; the mapping is page aligned so both are 8-byte
        // aligned; both are only accessed atomically (the kernel writes data_head, we write
        // data_tail).
        let (head_word, tail_word) = unsafe {
            (
                control_word(map, std::mem::offset_of!(perf_event_mmap_page, data_head)),
                control_word(map, std::mem::offset_of!(perf_event_mmap_page, data_tail)),
            )
        };
        let head = head_word.load(Ordering::Acquire);
        let tail = tail_word.load(Ordering::Relaxed);
        // SAFETY: the data area is `data_size` bytes after the control page, inside the
        // mapping. Between tail and head the kernel does not write until we advance data_tail,
        // which the reader does only past records it consumed and never reads again, and
        // `pending_slices` only hands out that range.
        // `&mut self` keeps other readers away.
        let data = unsafe {
            std::slice::from_raw_parts(map.as_ptr().add(self.data_offset), self.data_size)
        };
        let mut reader = RingReader::from_parts(data, head, tail, tail_word, &mut self.scratch);
        reader.head_word = Some(head_word);
        reader
    }
}

/// The atomic u64 at `offset` in the control page.
///
/// # Safety
/// `offset` must be 8-byte aligned and inside the mapping, which must outlive `'a`, and the
/// word must only be accessed atomically.
unsafe fn control_word<'a>(map: NonNull<u8>, offset: usize) -> &'a AtomicU64 {
    // SAFETY: guaranteed by the caller.
    unsafe { AtomicU64::from_ptr(map.as_ptr().add(offset).cast::<u64>()) }
}

impl Drop for RingBuffer {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the region mapped in `new`; no reader can outlive `self`.
        unsafe {
            libc::munmap(self.map.as_ptr().cast(), self.map_len);
        }
    }
}

/// One record, header included, contiguous.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawRecord<'a> {
    pub ty: u32,
    pub misc: u16,
    /// The whole record including its 8-byte header.
    pub bytes: &'a [u8],
}

/// The pending bytes `[tail, head)` of `data` as two slices: up to the end, and the wrapped
/// rest. `None` when head and tail cannot both be right (more pending than the buffer holds).
fn pending_slices(data: &[u8], head: u64, tail: u64) -> Option<(&[u8], &[u8])> {
    let size = data.len();
    let pending = usize::try_from(head.wrapping_sub(tail)).ok()?;
    if size == 0 || pending > size {
        return None;
    }
    let start = usize::try_from(tail % size as u64).ok()?;
    let first_len = pending.min(size - start);
    let first = data.get(start..start + first_len)?;
    let second = data.get(..pending - first_len)?;
    Some((first, second))
}

/// Consumed bytes after which a reader hands the space back to the kernel before its round
/// ends: a round that unwinds megabytes of samples would otherwise leave the kernel only the
/// space that was free when it began, and the kernel drops what does not fit. (Not after
/// every record: the kernel reads `data_tail` on every write, and each store moves its cache
/// line.)
const PUBLISH_EVERY: usize = 64 * 1024;

/// Reads the records of one snapshot; it hands the consumed space back to the kernel as it
/// goes (every [`PUBLISH_EVERY`] bytes) and when dropped.
pub struct RingReader<'a> {
    first: &'a [u8],
    second: &'a [u8],
    tail: &'a AtomicU64,
    /// The kernel's data_head, to tell how full the ring is while the snapshot is read.
    head_word: Option<&'a AtomicU64>,
    start: u64,
    head: u64,
    skipped: bool,
    pos: usize,
    /// `pos` as last stored into `tail`.
    published: usize,
    peeked: Option<usize>,
    scratch: &'a mut Vec<u8>,
    corrupt: bool,
}

impl<'a> RingReader<'a> {
    /// A reader over a data area with the given head and tail; `tail_word` receives the
    /// consumed position on drop.
    fn from_parts(
        data: &'a [u8],
        head: u64,
        tail: u64,
        tail_word: &'a AtomicU64,
        scratch: &'a mut Vec<u8>,
    ) -> RingReader<'a> {
        let (first, second, corrupt) = match pending_slices(data, head, tail) {
            Some((a, b)) => (a, b, false),
            None => (&data[..0], &data[..0], true),
        };
        RingReader {
            first,
            second,
            tail: tail_word,
            head_word: None,
            start: tail,
            head,
            skipped: false,
            pos: 0,
            published: 0,
            peeked: None,
            scratch,
            corrupt,
        }
    }

    fn total(&self) -> usize {
        self.first.len() + self.second.len()
    }

    /// Copies `out.len()` bytes starting at logical offset `at`; false if out of range.
    fn copy_out(&self, at: usize, out: &mut [u8]) -> bool {
        let Some(end) = at.checked_add(out.len()).filter(|&e| e <= self.total()) else {
            return false;
        };
        let split = self.first.len();
        for (i, byte) in out.iter_mut().enumerate() {
            let p = at + i;
            *byte = if p < split {
                self.first[p]
            } else {
                self.second[p - split]
            };
        }
        debug_assert!(end <= self.total());
        true
    }

    /// The header of the record at logical offset `at`: (type, misc, size), when it is whole
    /// and its size fits between `at` and the snapshot's head.
    fn header_at(&self, at: usize) -> Option<(u32, u16, usize)> {
        let mut header = [0u8; HEADER_SIZE];
        if !self.copy_out(at, &mut header) {
            return None;
        }
        let ty = u32::from_ne_bytes([header[0], header[1], header[2], header[3]]);
        let misc = u16::from_ne_bytes([header[4], header[5]]);
        let size = usize::from(u16::from_ne_bytes([header[6], header[7]]));
        (size >= HEADER_SIZE && size <= self.total() - at).then_some((ty, misc, size))
    }

    /// The next record without consuming it. A record that wraps around the end of the
    /// buffer is copied into the ring's scratch buffer. A malformed header (size < 8, or
    /// running past head) returns `None` and sets the corrupt flag.
    pub fn peek(&mut self) -> Option<RawRecord<'_>> {
        self.peeked = None;
        let remaining = self.pending_bytes();
        if remaining == 0 || self.corrupt {
            return None;
        }
        let Some((ty, misc, size)) = self.header_at(self.pos) else {
            self.corrupt = true;
            return None;
        };
        self.peeked = Some(size);
        let (pos, split) = (self.pos, self.first.len());
        let bytes: &[u8] = if pos + size <= split {
            &self.first[pos..pos + size]
        } else if pos >= split {
            &self.second[pos - split..pos - split + size]
        } else {
            let (head_part, tail_part) = (&self.first[pos..], &self.second[..pos + size - split]);
            self.scratch.clear();
            self.scratch.extend_from_slice(head_part);
            self.scratch.extend_from_slice(tail_part);
            &self.scratch[..]
        };
        Some(RawRecord { ty, misc, bytes })
    }

    /// Hands `f` the last record of the snapshot that the kernel had written before `head` (a
    /// `data_head` read before this snapshot), without consuming any; `None` when there is
    /// none. Only the headers of the records before it are read.
    pub fn with_last_before<R>(
        &mut self,
        head: u64,
        f: impl FnOnce(&RawRecord<'_>) -> R,
    ) -> Option<R> {
        let mut at = self.pos;
        let mut last = None;
        while self.start.wrapping_add(at as u64) < head
            && let Some((_, _, size)) = self.header_at(at)
        {
            last = Some(at);
            at += size;
        }
        let (pos, peeked, corrupt) = (self.pos, self.peeked, self.corrupt);
        self.pos = last?;
        let out = self.peek().map(|rec| f(&rec));
        (self.pos, self.peeked, self.corrupt) = (pos, peeked, corrupt);
        out
    }

    /// Moves past the record last returned by `peek`.
    /// The bytes of the records before it are never read again (`peek`'s borrow has ended
    /// by now), so they may be handed back to the kernel at once.
    pub fn consume(&mut self) {
        if let Some(size) = self.peeked.take() {
            self.pos += size;
            if self.pos - self.published >= PUBLISH_EVERY {
                self.published = self.pos;
                self.tail
                    .store(self.start.wrapping_add(self.pos as u64), Ordering::Release);
            }
        }
    }

    /// Drops everything pending (after corruption, to let the kernel write again).
    pub fn skip_all(&mut self) {
        self.peeked = None;
        self.pos = self.total();
        self.skipped = true;
    }

    /// Bytes between the consumed position and the snapshot's head.
    pub fn pending_bytes(&self) -> usize {
        self.total() - self.pos
    }

    /// Bytes the kernel has written that this reader has not consumed, now: the snapshot's
    /// rest and what was written since (how full the ring is).
    pub fn unread_now(&self) -> usize {
        let consumed = self.start.wrapping_add(self.pos as u64);
        let head = self
            .head_word
            .map_or(self.head, |w| w.load(Ordering::Relaxed));
        usize::try_from(head.wrapping_sub(consumed)).unwrap_or(usize::MAX)
    }

    /// Whether a malformed record header was seen; the caller counts it and usually calls
    /// `skip_all`.
    pub fn corrupt(&self) -> bool {
        self.corrupt
    }
}

impl Drop for RingReader<'_> {
    fn drop(&mut self) {
        let consumed = if self.skipped {
            self.head
        } else {
            self.start.wrapping_add(self.pos as u64)
        };
        self.tail.store(consumed, Ordering::Release);
    }
}

#[cfg(test)]
#[path = "ring_tests.rs"]
mod tests;
