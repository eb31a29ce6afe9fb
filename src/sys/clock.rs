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
        clock.offset = clock.measure()?.offset;
        Ok(clock)
    }

    /// The sample clock now, in ns.
    pub fn now(&mut self) -> u64 {
        if self.measured.elapsed() >= REMEASURE_EVERY {
            // A failed measurement keeps the last offset: it drifts by microseconds a second.
            // So does one whose thread was held up between its readings: off by up to half
            // that wait, it could read the clock ahead by more than the drain holds back.
            if let Ok(m) = self.measure()
                && m.span <= TRUSTED_SPAN_NS
            {
                self.offset = m.offset;
            }
            self.measured = Instant::now();
        }
        self.monotonic_to_sample(super::clock_monotonic_ns())
    }

    /// CLOCK_MONOTONIC time `t` on the sample clock.
    pub fn monotonic_to_sample(&self, t: u64) -> u64 {
        (i128::from(t) - i128::from(self.offset)).max(0) as u64
    }

    /// The offset by the best of a few measurements: the one whose two readings of
    /// CLOCK_MONOTONIC are closest (a thread preempted between them, as under load, is off
    /// by half the time it waited).
    fn measure(&mut self) -> io::Result<Measurement> {
        let mut best: Option<Measurement> = None;
        let mut last_err = None;
        for _ in 0..MEASURE_TRIES {
            match self.measure_once() {
                Ok(m) => {
                    if best.is_none_or(|b| m.span < b.span) {
                        best = Some(m);
                    }
                    if m.span <= QUICK_SPAN_NS {
                        break;
                    }
                }
                Err(e) => last_err = Some(e),
            }
        }
        match (best, last_err) {
            (Some(m), _) => Ok(m),
            (None, Some(e)) => Err(e),
            (None, None) => Err(io::Error::other("the sample clock was not measured")),
        }
    }

    /// Maps and unmaps one page between two readings of CLOCK_MONOTONIC and returns their
    /// midpoint minus the time of that page's MMAP record.
    ///
    /// The dummy event records every mapping this thread makes (the allocator's large
    /// blocks, files read), and its ring holds about 70: the ring is emptied first, so that
    /// the page's own record finds room, and the record is found by the page's address. (A
    /// thread that had mapped more than the ring holds since the last measurement read the
    /// newest record the full ring had kept, from up to a second before, and the clock was
    /// behind by that much until the next measurement: 470 ms on every agent run.)
    fn measure_once(&mut self) -> io::Result<Measurement> {
        let mut reader = self.ring.reader();
        reader.skip_all();
        drop(reader);
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
        let stamp = self.stamp_of_mapping(p as u64);
        let t = stamp.ok_or_else(|| {
            io::Error::other("the dummy event recorded no MMAP of the page it watched")
        })?;
        let mid = before / 2 + after / 2;
        Ok(Measurement {
            offset: (i128::from(mid) - i128::from(t)) as i64,
            span: after.saturating_sub(before),
        })
    }

    /// The time of the MMAP record of the mapping at `addr`, reading the ring to its end.
    fn stamp_of_mapping(&mut self, addr: u64) -> Option<u64> {
        let mut stamp = None;
        let mut reader = self.ring.reader();
        while let Some(rec) = reader.peek() {
            let mmap = rec.ty == b::PERF_RECORD_MMAP || rec.ty == b::PERF_RECORD_MMAP2;
            // Header, pid, tid, then the address; with sample_id_all and PERF_SAMPLE_TIME
            // alone, the record ends with its time.
            let at = rec.bytes.get(16..24).and_then(|b| b.try_into().ok());
            if mmap
                && at.map(u64::from_ne_bytes) == Some(addr)
                && let Some(t) = rec.bytes.last_chunk::<8>()
            {
                stamp = Some(u64::from_ne_bytes(*t));
            }
            reader.consume();
        }
        stamp
    }
}

/// One measurement of the offset, and how long it took.
#[derive(Debug, Clone, Copy)]
struct Measurement {
    offset: i64,
    span: u64,
}

/// Measurements taken at most, looking for one that was not interrupted.
const MEASURE_TRIES: usize = 3;
/// A measurement this quick was not interrupted (one takes 5 to 30 us).
const QUICK_SPAN_NS: u64 = 100_000;
/// A measurement that took longer than this replaces none taken before: its error, up to
/// half its span, must stay well within the drain's hold-back (`live::drain::HOLD_BACK_NS`,
/// 2 ms).
const TRUSTED_SPAN_NS: u64 = 500_000;

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
        let Some(clock) = open_clock() else { return };
        // The measurement's own uncertainty: half the time one mmap takes.
        fault_between_readings(clock, 200_000);
    }

    /// The reading thread maps memory of its own between two measurements (the allocator's
    /// large blocks, files read): more MMAP records than the dummy event's ring holds. The
    /// measurement's own record must still be the one it reads, not the newest of those
    /// the full ring kept, which is older by as long as the thread mapped for: the clock
    /// read behind by that much, and the drain's hold-back with it.
    #[test]
    fn a_thread_that_mapped_more_than_the_ring_holds_still_reads_the_clock() {
        let Some(mut clock) = open_clock() else {
            return;
        };
        let page = crate::sys::page_size();
        for _ in 0..500 {
            // SAFETY: a fresh private anonymous mapping, not touched, unmapped at once.
            unsafe {
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    page,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                assert_ne!(p, libc::MAP_FAILED);
                libc::munmap(p, page);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
        clock.measured = Instant::now()
            .checked_sub(REMEASURE_EVERY)
            .unwrap_or_else(Instant::now);
        // Wide of the measurement's uncertainty, well within the 50 ms the thread slept
        // after its last mapping (what a clock read from the newest kept record is off by).
        fault_between_readings(clock, 10_000_000);
    }

    fn open_clock() -> Option<PerfClock> {
        match PerfClock::open() {
            Ok(c) => Some(c),
            Err(e) => {
                assert!(
                    std::env::var_os("MEMPERF_REQUIRE_PERF").is_none(),
                    "cannot open a dummy event: {e}"
                );
                None
            }
        }
    }

    /// Takes a page fault between two readings of `clock` and checks that its sample is
    /// stamped between them, give or take `slack` ns.
    fn fault_between_readings(mut clock: PerfClock, slack: u64) {
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
        for t in times {
            assert!(
                before.saturating_sub(slack) <= t && t <= after + slack,
                "fault at {t} outside [{before}, {after}]"
            );
        }
    }
}
