//! Which of several functions a JIT placed at one address a sample ran in: by the sample's
//! time and the load times of the process's jitdump, as `perf inject --jit` tells them apart
//! (it writes an MMAP of each load at the load's time). A JIT reuses the memory of code it
//! freed; naming every sample there by the last load put an earlier function's samples
//! under a later function's name.
//!
//! A jitdump's times are CLOCK_MONOTONIC. A recording on that clock (`perf record -k mono`)
//! compares them directly; a memperf recording on the kernel's default clock keeps both
//! clocks read together at its start and end (`MemperfStats::clock_sync`). Any other
//! recording keeps the last load's name.

use rustc_hash::{FxHashMap, FxHashSet};

use crate::jitdump::{LoadTimes, MAX_DUMP_BYTES};
use crate::maps::ProcessMaps;
use crate::perfdata::PerfDataFile;

/// How a recording's sample times map to CLOCK_MONOTONIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToMonotonic {
    /// (sample clock, CLOCK_MONOTONIC) read together at the run's start and end; the offset
    /// between is interpolated (the clocks drift apart by up to 500 ppm under NTP).
    sync: [(u64, u64); 2],
}

impl ToMonotonic {
    const SAME: ToMonotonic = ToMonotonic {
        sync: [(0, 0), (0, 0)],
    };

    /// The mapping a recording allows, if any.
    pub fn of(file: &PerfDataFile) -> Option<ToMonotonic> {
        let monotonic = !file.events.is_empty()
            && file
                .events
                .iter()
                .all(|e| e.attr.use_clockid() == 1 && e.attr.clockid == libc::CLOCK_MONOTONIC);
        if monotonic {
            return Some(ToMonotonic::SAME);
        }
        let sync = file.features.memperf_stats.as_ref()?.clock_sync()?;
        Some(ToMonotonic { sync })
    }

    /// Sample time `t` on CLOCK_MONOTONIC. (The readings come from a file: a product too
    /// large for i128 keeps the start's offset.)
    pub fn at(&self, t: u64) -> u64 {
        let [(s0, m0), (s1, m1)] = self.sync.map(|(s, m)| (i128::from(s), i128::from(m)));
        let (off0, off1) = (m0 - s0, m1 - s1);
        let t = i128::from(t);
        let off = if s1 > s0 {
            let along = (t - s0).clamp(0, s1 - s0);
            (off1 - off0)
                .checked_mul(along)
                .map_or(off0, |d| off0 + d / (s1 - s0))
        } else {
            off0
        };
        (t + off).clamp(0, i128::from(u64::MAX)) as u64
    }
}

/// The load times of each process's jitdump, read once per dump.
#[derive(Debug)]
pub struct JitTimes {
    clock: ToMonotonic,
    /// pid → the dump's path as recorded, and its loads (`None`: unreadable; the
    /// symbolizer says why when it names the frames).
    dumps: FxHashMap<u32, (Vec<u8>, Option<LoadTimes>)>,
    /// The processes whose dump `dumps` holds is still the one they map: until a mapping
    /// changes ([`JitTimes::mappings_changed`]), their mappings are not searched again.
    checked: FxHashSet<u32>,
}

impl JitTimes {
    pub fn new(clock: ToMonotonic) -> JitTimes {
        JitTimes {
            clock,
            dumps: FxHashMap::default(),
            checked: FxHashSet::default(),
        }
    }

    /// Process `pid` mapped or unmapped something (`None`: some process mapped a jitdump):
    /// which dump it maps (every process maps) is looked up again.
    pub fn mappings_changed(&mut self, pid: Option<u32>) {
        match pid {
            Some(pid) => {
                self.checked.remove(&pid);
            }
            None => self.checked.clear(),
        }
    }

    /// For a JIT address of `pid` sampled at time `t`, the time of the load in effect
    /// there, when the process's jitdump placed more than one function at `addr` (see
    /// `LoadTimes::load_at`).
    pub fn load(&mut self, maps: &ProcessMaps, pid: u32, addr: u64, t: u64) -> Option<u64> {
        if self.checked.insert(pid) {
            match maps.jitdump_path(pid) {
                None => {
                    self.dumps.remove(&pid);
                }
                Some(path) if self.dumps.get(&pid).is_none_or(|(p, _)| p != path) => {
                    // Read as the symbolizer reads it: inside the process's root while it
                    // lives, never a FIFO or a device.
                    let (opened, _) = crate::mapped::resolve_recorded(path, Some(pid));
                    let loads = crate::mapped::read_regular_at_most(&opened, MAX_DUMP_BYTES)
                        .ok()
                        .map(|data| LoadTimes::parse(&data));
                    self.dumps.insert(pid, (path.to_vec(), loads));
                }
                Some(_) => {}
            }
        }
        let loads = self.dumps.get(&pid)?.1.as_ref()?;
        if loads.arch_timestamp {
            return None;
        }
        loads.load_at(addr, self.clock.at(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_times_move_to_monotonic_by_an_offset_that_drifts_linearly() {
        // 1 ms apart at the start, 1.1 ms at the end, 1 s later.
        let c = ToMonotonic {
            sync: [
                (5_000_000_000, 5_001_000_000),
                (6_000_000_000, 6_001_100_000),
            ],
        };
        assert_eq!(c.at(5_000_000_000), 5_001_000_000);
        assert_eq!(c.at(5_500_000_000), 5_501_050_000);
        assert_eq!(c.at(6_000_000_000), 6_001_100_000);
        // Outside the run: the nearest end's offset.
        assert_eq!(c.at(4_000_000_000), 4_001_000_000);
        assert_eq!(c.at(7_000_000_000), 7_001_100_000);
        assert_eq!(ToMonotonic::SAME.at(42), 42);
        // Monotonic behind the sample clock, near 0.
        let behind = ToMonotonic {
            sync: [(10, 3), (10, 3)],
        };
        assert_eq!(behind.at(12), 5);
        assert_eq!(behind.at(2), 0);
        // Readings from a crafted file: an end before the start, offsets that would
        // overflow the interpolation. The start's offset, no panic.
        let backwards = ToMonotonic {
            sync: [(100, 150), (50, 0)],
        };
        assert_eq!(backwards.at(120), 170);
        let huge = ToMonotonic {
            sync: [(0, u64::MAX), (u64::MAX, 0)],
        };
        assert_eq!(huge.at(u64::MAX / 2), u64::MAX);
    }
}
