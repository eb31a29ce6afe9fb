//! The clock samples are stamped with, read from user space.
//!
//! The kernel stamps samples with `local_clock()` unless an event asks for another clock
//! (`use_clockid`). memperf keeps the kernel's default, as perf does, because of how software
//! events and tracepoints are written: when one fault (or one tracepoint hit) fires the events
//! of two sessions, the kernel prepares the sample once, with the first event's time and clock,
//! and writes it into both rings. A memperf on CLOCK_MONOTONIC beside a `perf record` on the
//! default clock then received samples stamped on perf's clock, milliseconds away from its own
//! MMAP and COMM records after a few hours of uptime: a command's first faults were filed
//! before its exec, under the parent's name and without its mappings.
//!
//! There is no system call that reads `local_clock()`. [`PerfClock`] reads it as the kernel
//! writes it: a dummy event on this thread records an MMAP of a page mapped and unmapped for
//! the purpose; its time, between two readings of CLOCK_MONOTONIC, gives the offset of the two
//! clocks, measured again every second (they drift apart by up to 500 ppm under NTP).

use std::io;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use perf_event_open_sys::bindings::{self as b, perf_event_attr};

use super::open::{Opener, SysOpener};
use super::ring::RingBuffer;

/// How long an offset measurement is trusted.
const REMEASURE_EVERY: Duration = Duration::from_secs(1);

/// The kernel's sample clock, as an offset from CLOCK_MONOTONIC.
pub struct PerfClock {
    ring: RingBuffer,
    /// CLOCK_MONOTONIC minus the sample clock, in ns.
    offset: i64,
    measured: Instant,
}

impl PerfClock {
    /// Opens the dummy event on the calling thread (later readings must come from it too) and
    /// takes a first measurement.
    pub fn open() -> io::Result<PerfClock> {
        let mut attr = perf_event_attr {
            type_: b::PERF_TYPE_SOFTWARE,
            size: std::mem::size_of::<perf_event_attr>() as u32,
            config: u64::from(b::PERF_COUNT_SW_DUMMY),
            sample_type: u64::from(b::PERF_SAMPLE_TIME),
            ..Default::default()
        };
        attr.set_mmap(1);
        attr.set_mmap_data(1);
        attr.set_sample_id_all(1);
        attr.set_exclude_kernel(1);
        attr.set_exclude_hv(1);
        let flags = u64::from(b::PERF_FLAG_FD_CLOEXEC);
        let fd: OwnedFd = SysOpener
            .open(&attr, 0, -1, -1, flags)
            .map_err(io::Error::from_raw_os_error)?;
        let ring = RingBuffer::new(fd, 1)?;
        let mut clock = PerfClock {
            ring,
            offset: 0,
            measured: Instant::now(),
        };
        clock.offset = clock.measure()?;
        Ok(clock)
    }

    /// The sample clock now, in ns.
    pub fn now(&mut self) -> u64 {
        if self.measured.elapsed() >= REMEASURE_EVERY {
            // A failed measurement keeps the last offset: it drifts by microseconds a second.
            if let Ok(off) = self.measure() {
                self.offset = off;
            }
            self.measured = Instant::now();
        }
        self.monotonic_to_sample(super::clock_monotonic_ns())
    }

    /// CLOCK_MONOTONIC time `t` on the sample clock.
    pub fn monotonic_to_sample(&self, t: u64) -> u64 {
        (i128::from(t) - i128::from(self.offset)).max(0) as u64
    }

    /// Maps and unmaps one page between two readings of CLOCK_MONOTONIC and returns their
    /// midpoint minus the MMAP record's time.
    fn measure(&mut self) -> io::Result<i64> {
        let page = super::page_size();
        let before = super::clock_monotonic_ns();
        // SAFETY: a fresh private anonymous mapping, not touched, unmapped at once.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                page,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `p` is the mapping made above, of `page` bytes, and nothing refers to it.
        unsafe {
            libc::munmap(p, page);
        }
        let after = super::clock_monotonic_ns();
        let mut stamp = None;
        let mut reader = self.ring.reader();
        while let Some(rec) = reader.peek() {
            let mmap = rec.ty == b::PERF_RECORD_MMAP || rec.ty == b::PERF_RECORD_MMAP2;
            // With sample_id_all and PERF_SAMPLE_TIME alone, the record ends with its time.
            if mmap && let Some(t) = rec.bytes.last_chunk::<8>() {
                stamp = Some(u64::from_ne_bytes(*t));
            }
            reader.consume();
        }
        drop(reader);
        let t = stamp.ok_or_else(|| {
            io::Error::other("the dummy event recorded no MMAP of the page it watched")
        })?;
        let mid = before / 2 + after / 2;
        Ok((i128::from(mid) - i128::from(t)) as i64)
    }
}

/// How a recording's sample times are read now.
pub enum SampleClock {
    /// The kernel's default clock, read through a dummy event.
    Kernel(PerfClock),
    /// CLOCK_MONOTONIC (`use_clockid`), when the dummy event could not be opened.
    Monotonic,
    /// Neither: a kernel without `use_clockid` whose clock could not be read.
    Unread,
}

/// The sample clock as CLOCK_MONOTONIC minus an offset a [`SampleClock`] measured: a copy
/// that reads the clock where the clock itself is not at hand (the session, timing its
/// unwinds), true to within the drift since the measurement (microseconds a second).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockOffset {
    /// CLOCK_MONOTONIC minus the sample clock, in ns.
    offset: i64,
}

impl ClockOffset {
    /// The sample clock now, in ns.
    pub fn now(self) -> u64 {
        (i128::from(super::clock_monotonic_ns()) - i128::from(self.offset)).max(0) as u64
    }
}

impl SampleClock {
    /// The clock's offset from CLOCK_MONOTONIC as last measured, when it can be read.
    pub fn offset(&self) -> Option<ClockOffset> {
        match self {
            SampleClock::Kernel(c) => Some(ClockOffset { offset: c.offset }),
            SampleClock::Monotonic => Some(ClockOffset { offset: 0 }),
            SampleClock::Unread => None,
        }
    }

    /// CLOCK_MONOTONIC at sample-clock time `t`, a time near now (by the offset last
    /// measured), when the sample clock can be read.
    pub fn monotonic_at(&self, t: u64) -> Option<u64> {
        match self {
            SampleClock::Kernel(c) => Some((i128::from(t) + i128::from(c.offset)).max(0) as u64),
            SampleClock::Monotonic => Some(t),
            SampleClock::Unread => None,
        }
    }

    /// The sample clock now, when it can be read.
    pub fn now(&mut self) -> Option<u64> {
        match self {
            SampleClock::Kernel(c) => Some(c.now()),
            SampleClock::Monotonic => Some(super::clock_monotonic_ns()),
            SampleClock::Unread => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A page fault taken between two readings of the clock is stamped between them: the
    /// offset is the sample clock's (on this VM CLOCK_MONOTONIC was 8.5 ms away from it).
    #[test]
    fn a_fault_is_stamped_between_two_readings() {
        let Ok(mut clock) = PerfClock::open() else {
            assert!(
                std::env::var_os("MEMPERF_REQUIRE_PERF").is_none(),
                "cannot open a dummy event"
            );
            return;
        };
        let mut attr = perf_event_attr {
            type_: b::PERF_TYPE_SOFTWARE,
            size: std::mem::size_of::<perf_event_attr>() as u32,
            config: u64::from(b::PERF_COUNT_SW_PAGE_FAULTS),
            sample_type: u64::from(b::PERF_SAMPLE_TIME),
            ..Default::default()
        };
        attr.__bindgen_anon_1.sample_period = 1;
        attr.set_exclude_kernel(1);
        let fd = SysOpener
            .open(&attr, 0, -1, -1, u64::from(b::PERF_FLAG_FD_CLOEXEC))
            .expect("open a page-fault event on this thread");
        let mut ring = RingBuffer::new(fd, 1).unwrap();
        let page = crate::sys::page_size();
        let before = clock.now();
        // SAFETY: a fresh private anonymous mapping, written once and unmapped.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            std::ptr::write_volatile(p.cast::<u8>(), 1);
            libc::munmap(p, page);
        }
        let after = clock.now();
        let copied = SampleClock::Kernel(clock).offset().map(ClockOffset::now);
        let mut times = Vec::new();
        let mut reader = ring.reader();
        while let Some(rec) = reader.peek() {
            if rec.ty == b::PERF_RECORD_SAMPLE {
                times.push(u64::from_ne_bytes(*rec.bytes.last_chunk::<8>().unwrap()));
            }
            reader.consume();
        }
        assert!(!times.is_empty(), "no fault sample");
        // The offset read elsewhere reads the same clock: later than the fault.
        assert!(
            copied.is_some_and(|c| c + 200_000 >= after),
            "{copied:?} before {after}"
        );
        // The measurement's own uncertainty: half the time one mmap takes.
        let slack = 200_000;
        for t in times {
            assert!(
                before.saturating_sub(slack) <= t && t <= after + slack,
                "fault at {t} outside [{before}, {after}]"
            );
        }
    }
}
