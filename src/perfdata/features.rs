//! perf.data feature sections (`HEADER_*` in perf's `util/header.h`): encoding and decoding.

use super::{EventDesc, PERF_RECORD_HEADER_BUILD_ID, attr_file_bytes, le_u32, le_u64};

pub use crate::abi::{
    HEADER_ARCH, HEADER_BUILD_ID, HEADER_CLOCK_DATA, HEADER_CLOCKID, HEADER_CMDLINE,
    HEADER_COMPRESSED, HEADER_CPUDESC, HEADER_CPUID, HEADER_EVENT_DESC, HEADER_HOSTNAME,
    HEADER_MEMPERF_RECOVERED, HEADER_MEMPERF_STATS, HEADER_NRCPUS, HEADER_OSRELEASE,
    HEADER_SAMPLE_TIME, HEADER_TOTAL_MEM, HEADER_TRACING_DATA, HEADER_VERSION,
};

const PERF_RECORD_MISC_BUILD_ID_SIZE: u16 = 1 << 15;
/// perf pads strings and build-id file names to this alignment.
const NAME_ALIGN: usize = 64;
/// `struct perf_record_header_build_id` without the file name.
const BUILD_ID_EVENT_SIZE: usize = 36;

/// What the recording machine was; written as feature sections.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Features {
    pub hostname: Option<String>,
    pub osrelease: Option<String>,
    pub version: Option<String>,
    pub arch: Option<String>,
    /// (CPUs available = highest present + 1, CPUs online).
    pub nr_cpus: Option<(u32, u32)>,
    pub cpudesc: Option<String>,
    /// perf's x86 form: `vendor,family,model,stepping`.
    pub cpuid: Option<String>,
    pub total_mem_kb: Option<u64>,
    /// Written as the CMDLINE feature; by perf's convention the first is the program path.
    pub cmdline: Vec<String>,
    /// A blob built by [`super::tracing_data`].
    pub tracing_data: Option<Vec<u8>>,
    pub build_ids: Vec<BuildIdEntry>,
    /// (first, last) sample time.
    pub sample_time: Option<(u64, u64)>,
    /// What perf stores under HEADER_CLOCKID: the clock's resolution in ns.
    pub clockid: Option<u64>,
    pub clock_data: Option<ClockData>,
    pub memperf_stats: Option<MemperfStats>,
    pub recovered_marks: Vec<RecoveredMark>,
}

/// One instant read on two clocks: the samples' clock and the wall clock (perf's
/// HEADER_CLOCK_DATA), so that sample times can be printed as times of day.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockData {
    pub clockid: u32,
    /// Nanoseconds since the epoch.
    pub wall_ns: u64,
    /// The samples' clock at the same instant.
    pub clock_ns: u64,
}

impl ClockData {
    /// The clockid memperf writes for the kernel's default sample clock, which has none.
    pub const KERNEL_DEFAULT: u32 = u32::MAX;

    /// The wall clock now, beside `clock_ns`, the sample clock read at the same instant.
    pub fn now(clockid: u32, clock_ns: u64) -> ClockData {
        let wall_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        ClockData {
            clockid,
            wall_ns,
            clock_ns,
        }
    }

    /// The wall-clock time of sample time `t`, in ns since the epoch.
    pub fn wall_of(&self, t: u64) -> u64 {
        (self.wall_ns as i128 + (t as i128 - self.clock_ns as i128)).max(0) as u64
    }
}

/// Counts only memperf knows, such as the user stacks it unwound while recording and how
/// many were truncated, by reason. Stored as `name value` lines in one perf header string,
/// so that a reader keeps the names it knows and skips the others.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemperfStats {
    pub counts: Vec<(String, u64)>,
}

/// Names of the clock readings in [`MemperfStats`]: (sample clock, CLOCK_MONOTONIC) read
/// together at the start and at the end of a run.
const CLOCK_SYNC: [[&str; 2]; 2] = [
    ["clock_sync.start.sample", "clock_sync.start.monotonic"],
    ["clock_sync.end.sample", "clock_sync.end.monotonic"],
];

/// One event's user stacks as the recorder counted them while recording: unwound, left
/// truncated, and (of those) shed while it was behind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct EventUnwinds {
    pub unwound: u64,
    pub truncated: u64,
    pub shed: u64,
}

/// The names of [`EventUnwinds`]' counts in [`MemperfStats`], each followed by
/// `.event.N`.
const EVENT_UNWINDS: [&str; 3] = ["unwound", "truncated", "shed"];

impl MemperfStats {
    pub fn get(&self, name: &str) -> Option<u64> {
        self.counts.iter().find(|(n, _)| n == name).map(|&(_, v)| v)
    }

    /// Keeps event `ev`'s unwinds (a shed count only when there is one).
    pub fn push_event_unwinds(&mut self, ev: usize, u: EventUnwinds) {
        for (name, n) in EVENT_UNWINDS
            .into_iter()
            .zip([u.unwound, u.truncated, u.shed])
        {
            if n > 0 || name != "shed" {
                self.counts.push((format!("{name}.event.{ev}"), n));
            }
        }
    }

    /// Whether the recorder counted its unwinds per event (those before it counted them
    /// for all events together, in `unwound` and `truncated`).
    pub fn has_event_unwinds(&self) -> bool {
        self.counts
            .iter()
            .any(|(n, _)| n.starts_with("unwound.event."))
    }

    /// Event `ev`'s unwinds, each 0 where the recording has no count.
    pub fn event_unwinds(&self, ev: usize) -> EventUnwinds {
        let [unwound, truncated, shed] =
            EVENT_UNWINDS.map(|name| self.get(&format!("{name}.event.{ev}")).unwrap_or(0));
        EventUnwinds {
            unwound,
            truncated,
            shed,
        }
    }

    /// Keeps the sample clock and CLOCK_MONOTONIC read together at the run's start and end
    /// (the clock a jitdump's times are on), each pair where both were read.
    pub fn set_clock_sync(&mut self, start: Option<(u64, u64)>, end: Option<(u64, u64)>) {
        for (names, pair) in CLOCK_SYNC.iter().zip([start, end]) {
            if let Some((sample, monotonic)) = pair {
                self.counts.push((names[0].to_string(), sample));
                self.counts.push((names[1].to_string(), monotonic));
            }
        }
    }

    /// The pairs [`MemperfStats::set_clock_sync`] kept: the start's, and the end's when the
    /// recording has it (else the start's again).
    pub fn clock_sync(&self) -> Option<[(u64, u64); 2]> {
        let pair = |names: &[&str; 2]| Some((self.get(names[0])?, self.get(names[1])?));
        let start = pair(&CLOCK_SYNC[0])?;
        Some([start, pair(&CLOCK_SYNC[1]).unwrap_or(start)])
    }

    fn encode(&self) -> Vec<u8> {
        let text: String = self
            .counts
            .iter()
            .map(|(n, v)| format!("{n} {v}\n"))
            .collect();
        let mut v = Vec::new();
        put_string(&mut v, &text);
        v
    }

    fn decode(text: &str) -> MemperfStats {
        let counts = text
            .lines()
            .filter_map(|l| {
                let (n, v) = l.split_once(' ')?;
                Some((n.to_string(), v.trim().parse().ok()?))
            })
            .collect();
        MemperfStats { counts }
    }
}

/// A sample whose user stack memperf finished from the live process: its time and thread,
/// and the index among its user frames (0 is the sampled instruction) of the first frame
/// read there rather than from the copied stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecoveredMark {
    pub time: u64,
    pub tid: u32,
    pub first: u32,
}

/// `u64 count`, then `{ u64 time; u32 tid; u32 first; }` per mark.
pub(super) fn encode_marks(marks: &[RecoveredMark]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + 16 * marks.len());
    v.extend_from_slice(&(marks.len() as u64).to_ne_bytes());
    for m in marks {
        v.extend_from_slice(&m.time.to_ne_bytes());
        v.extend_from_slice(&m.tid.to_ne_bytes());
        v.extend_from_slice(&m.first.to_ne_bytes());
    }
    v
}

fn decode_marks(s: &mut Sec<'_>) -> Option<Vec<RecoveredMark>> {
    let n = usize::try_from(s.u64()?).ok()?;
    // Each mark takes 16 bytes: a count the section cannot hold is malformed.
    if n > s.b.len() / 16 {
        return None;
    }
    (0..n)
        .map(|_| {
            Some(RecoveredMark {
                time: s.u64()?,
                tid: s.u32()?,
                first: s.u32()?,
            })
        })
        .collect()
}

/// One entry of the BUILD_ID feature.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BuildIdEntry {
    pub pid: i32,
    pub kernel: bool,
    pub build_id: Vec<u8>,
    pub filename: String,
}

/// The features a reader found (absent ones are `None` or empty).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadFeatures {
    pub hostname: Option<String>,
    pub osrelease: Option<String>,
    pub version: Option<String>,
    pub arch: Option<String>,
    pub nr_cpus: Option<(u32, u32)>,
    pub cpudesc: Option<String>,
    pub cpuid: Option<String>,
    pub total_mem_kb: Option<u64>,
    pub cmdline: Vec<String>,
    pub build_ids: Vec<BuildIdEntry>,
    /// Event names from EVENT_DESC, in attr order (of a pipe-mode stream: as its
    /// EVENT_UPDATE records left them).
    pub event_names: Vec<String>,
    pub tracing_data: Option<Vec<u8>>,
    pub sample_time: Option<(u64, u64)>,
    pub clock_data: Option<ClockData>,
    pub memperf_stats: Option<MemperfStats>,
    pub recovered_marks: Vec<RecoveredMark>,
    /// Feature bits that were set but whose section could not be decoded.
    pub undecodable: Vec<u32>,
}

fn read_text(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn trimmed(path: &str) -> Option<String> {
    read_text(path).map(|s| s.trim().to_string())
}

/// The highest CPU number in a sysfs CPU list such as `0-3,8`, and how many CPUs it names.
fn cpu_list_stats(list: &str) -> Option<(u32, u32)> {
    let (mut max, mut count) = (None::<u32>, 0u32);
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?),
            None => {
                let n = part.parse::<u32>().ok()?;
                (n, n)
            }
        };
        count += hi.checked_sub(lo)? + 1;
        max = Some(max.map_or(hi, |m: u32| m.max(hi)));
    }
    Some((max?, count))
}

fn cpuinfo_field<'a>(cpuinfo: &'a str, key: &str) -> Option<&'a str> {
    cpuinfo.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k.trim() == key).then(|| v.trim())
    })
}

impl Features {
    /// Describes this machine from /proc and /sys; what cannot be read stays `None`.
    pub fn from_system(cmdline: Vec<String>) -> Features {
        let cpuinfo = read_text("/proc/cpuinfo").unwrap_or_default();
        let cpuid = (|| {
            let f = |k| cpuinfo_field(&cpuinfo, k);
            Some(format!(
                "{},{},{},{}",
                f("vendor_id")?,
                f("cpu family")?,
                f("model")?,
                f("stepping")?
            ))
        })();
        let nr_cpus = (|| {
            let (max_present, _) = cpu_list_stats(&read_text("/sys/devices/system/cpu/present")?)?;
            let (_, online) = cpu_list_stats(&read_text("/sys/devices/system/cpu/online")?)?;
            Some((max_present + 1, online))
        })();
        let total_mem_kb = read_text("/proc/meminfo").and_then(|m| {
            let v = cpuinfo_field(&m, "MemTotal")?;
            v.trim_end_matches("kB").trim().parse().ok()
        });
        Features {
            hostname: trimmed("/proc/sys/kernel/hostname"),
            osrelease: trimmed("/proc/sys/kernel/osrelease"),
            version: Some(format!("memperf {}", env!("CARGO_PKG_VERSION"))),
            arch: Some(std::env::consts::ARCH.to_string()),
            nr_cpus,
            cpudesc: cpuinfo_field(&cpuinfo, "model name").map(str::to_string),
            cpuid,
            total_mem_kb,
            cmdline,
            ..Features::default()
        }
    }

    /// The feature sections to write, in bit order: `(bit, contents)`.
    pub(super) fn encode(&self, events: &[EventDesc], attr_size: usize) -> Vec<(u32, Vec<u8>)> {
        let mut out = Vec::new();
        let mut string = |bit, s: &Option<String>| {
            if let Some(s) = s {
                let mut v = Vec::new();
                put_string(&mut v, s);
                out.push((bit, v));
            }
        };
        string(HEADER_HOSTNAME, &self.hostname);
        string(HEADER_OSRELEASE, &self.osrelease);
        string(HEADER_VERSION, &self.version);
        string(HEADER_ARCH, &self.arch);
        string(HEADER_CPUDESC, &self.cpudesc);
        string(HEADER_CPUID, &self.cpuid);
        if let Some(td) = &self.tracing_data {
            out.push((HEADER_TRACING_DATA, td.clone()));
        }
        out.push((HEADER_BUILD_ID, self.encode_build_ids()));
        if let Some((avail, online)) = self.nr_cpus {
            let mut v = avail.to_ne_bytes().to_vec();
            v.extend_from_slice(&online.to_ne_bytes());
            out.push((HEADER_NRCPUS, v));
        }
        if let Some(kb) = self.total_mem_kb {
            out.push((HEADER_TOTAL_MEM, kb.to_ne_bytes().to_vec()));
        }
        let mut v = (self.cmdline.len() as u32).to_ne_bytes().to_vec();
        self.cmdline.iter().for_each(|s| put_string(&mut v, s));
        out.push((HEADER_CMDLINE, v));
        out.push((HEADER_EVENT_DESC, encode_event_desc(events, attr_size)));
        if let Some((first, last)) = self.sample_time {
            let mut v = first.to_ne_bytes().to_vec();
            v.extend_from_slice(&last.to_ne_bytes());
            out.push((HEADER_SAMPLE_TIME, v));
        }
        if let Some(res) = self.clockid {
            out.push((HEADER_CLOCKID, res.to_ne_bytes().to_vec()));
        }
        if let Some(c) = self.clock_data {
            // struct { u32 version = 1; u32 clockid; u64 wall_clock_ns; u64 clockid_time_ns }
            let mut v = 1u32.to_ne_bytes().to_vec();
            v.extend_from_slice(&c.clockid.to_ne_bytes());
            v.extend_from_slice(&c.wall_ns.to_ne_bytes());
            v.extend_from_slice(&c.clock_ns.to_ne_bytes());
            out.push((HEADER_CLOCK_DATA, v));
        }
        if let Some(m) = &self.memperf_stats {
            out.push((HEADER_MEMPERF_STATS, m.encode()));
        }
        if !self.recovered_marks.is_empty() {
            out.push((
                HEADER_MEMPERF_RECOVERED,
                encode_marks(&self.recovered_marks),
            ));
        }
        out.sort_by_key(|&(bit, _)| bit);
        out
    }

    fn encode_build_ids(&self) -> Vec<u8> {
        let mut v = Vec::new();
        for e in &self.build_ids {
            let name_len = (e.filename.len() + 1).next_multiple_of(NAME_ALIGN);
            let size = BUILD_ID_EVENT_SIZE + name_len;
            let cpumode: u16 = if e.kernel { 1 } else { 2 };
            let id = &e.build_id[..e.build_id.len().min(20)];
            v.extend_from_slice(&PERF_RECORD_HEADER_BUILD_ID.to_ne_bytes());
            v.extend_from_slice(&(cpumode | PERF_RECORD_MISC_BUILD_ID_SIZE).to_ne_bytes());
            v.extend_from_slice(&(size.min(usize::from(u16::MAX)) as u16).to_ne_bytes());
            v.extend_from_slice(&e.pid.to_ne_bytes());
            let mut area = [0u8; 24];
            area[..id.len()].copy_from_slice(id);
            area[20] = id.len() as u8;
            v.extend_from_slice(&area);
            let start = v.len();
            v.extend_from_slice(e.filename.as_bytes());
            v.resize(start + name_len, 0);
        }
        v
    }
}

/// `perf_header_string`: u32 length (NUL included, padded to 64), then the padded bytes.
fn put_string(v: &mut Vec<u8>, s: &str) {
    let len = (s.len() + 1).next_multiple_of(NAME_ALIGN);
    v.extend_from_slice(&(len as u32).to_ne_bytes());
    let start = v.len();
    v.extend_from_slice(s.as_bytes());
    v.resize(start + len, 0);
}

fn encode_event_desc(events: &[EventDesc], attr_size: usize) -> Vec<u8> {
    let mut v = (events.len() as u32).to_ne_bytes().to_vec();
    v.extend_from_slice(&(attr_size as u32).to_ne_bytes());
    for e in events {
        v.extend_from_slice(&attr_file_bytes(&e.attr, attr_size));
        v.extend_from_slice(&(e.ids.len() as u32).to_ne_bytes());
        put_string(&mut v, &e.name);
        e.ids
            .iter()
            .for_each(|id| v.extend_from_slice(&id.to_ne_bytes()));
    }
    v
}

/// A bounds-checked reader over one feature section.
struct Sec<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Sec<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4).map(|s| le_u32(s, 0))
    }
    fn u64(&mut self) -> Option<u64> {
        self.take(8).map(|s| le_u64(s, 0))
    }
    fn string(&mut self) -> Option<String> {
        let len = self.u32()? as usize;
        let raw = self.take(len)?;
        let end = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
        Some(String::from_utf8_lossy(&raw[..end]).into_owned())
    }
}

impl ReadFeatures {
    /// Decodes one feature section; returns `None` when it is malformed.
    pub(super) fn decode(&mut self, bit: u32, b: &[u8]) -> Option<()> {
        let mut s = Sec { b, pos: 0 };
        match bit {
            HEADER_TRACING_DATA => self.tracing_data = Some(b.to_vec()),
            HEADER_BUILD_ID => self.build_ids = decode_build_ids(b)?,
            HEADER_HOSTNAME => self.hostname = Some(s.string()?),
            HEADER_OSRELEASE => self.osrelease = Some(s.string()?),
            HEADER_VERSION => self.version = Some(s.string()?),
            HEADER_ARCH => self.arch = Some(s.string()?),
            HEADER_CPUDESC => self.cpudesc = Some(s.string()?),
            HEADER_CPUID => self.cpuid = Some(s.string()?),
            HEADER_NRCPUS => self.nr_cpus = Some((s.u32()?, s.u32()?)),
            HEADER_TOTAL_MEM => self.total_mem_kb = Some(s.u64()?),
            // (0, 0) is "not known": what a pipe-mode stream holds, written before any sample.
            HEADER_SAMPLE_TIME => {
                let t = (s.u64()?, s.u64()?);
                self.sample_time = (t != (0, 0)).then_some(t);
            }
            HEADER_CLOCK_DATA => {
                let (version, clockid) = (s.u32()?, s.u32()?);
                if version >= 1 {
                    self.clock_data = Some(ClockData {
                        clockid,
                        wall_ns: s.u64()?,
                        clock_ns: s.u64()?,
                    });
                }
            }
            HEADER_MEMPERF_STATS => self.memperf_stats = Some(MemperfStats::decode(&s.string()?)),
            HEADER_MEMPERF_RECOVERED => self.recovered_marks = decode_marks(&mut s)?,
            HEADER_CMDLINE => {
                let n = s.u32()?;
                self.cmdline = (0..n).map(|_| s.string()).collect::<Option<_>>()?;
            }
            HEADER_EVENT_DESC => {
                let (n, attr_size) = (s.u32()?, s.u32()? as usize);
                let mut names = Vec::new();
                for _ in 0..n {
                    s.take(attr_size)?;
                    let nr_ids = s.u32()? as usize;
                    names.push(s.string()?);
                    s.take(nr_ids.checked_mul(8)?)?;
                }
                self.event_names = names;
            }
            _ => {}
        }
        Some(())
    }
}

fn decode_build_ids(b: &[u8]) -> Option<Vec<BuildIdEntry>> {
    let mut out = Vec::new();
    let mut s = Sec { b, pos: 0 };
    while s.pos < b.len() {
        let head = s.take(8)?;
        let misc = u16::from_ne_bytes([head[4], head[5]]);
        let size = usize::from(u16::from_ne_bytes([head[6], head[7]]));
        out.push(build_id_entry(misc, s.take(size.checked_sub(8)?)?)?);
    }
    Some(out)
}

/// One `perf_record_header_build_id` from its header's `misc` and the bytes after the
/// header: a BUILD_ID feature entry, or a pipe-mode PERF_RECORD_HEADER_BUILD_ID.
pub(super) fn build_id_entry(misc: u16, body: &[u8]) -> Option<BuildIdEntry> {
    let pid = le_u32(body.get(..4)?, 0) as i32;
    let area = body.get(4..BUILD_ID_EVENT_SIZE - 8)?;
    let name = &body[BUILD_ID_EVENT_SIZE - 8..];
    let id_len = if misc & PERF_RECORD_MISC_BUILD_ID_SIZE != 0 {
        usize::from(area[20]).min(20)
    } else {
        20
    };
    let end = name.iter().position(|&c| c == 0).unwrap_or(name.len());
    Some(BuildIdEntry {
        pid,
        kernel: misc & 7 == 1,
        build_id: area[..id_len].to_vec(),
        filename: String::from_utf8_lossy(&name[..end]).into_owned(),
    })
}
