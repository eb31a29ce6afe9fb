//! The kernel interface: `perf_event_attr` building, `perf_event_open` with its fallback
//! ladder, ioctls, the mmap ring buffer, tracefs lookups, errno diagnosis and the gated child.
//!
//! This is the only module allowed to use `unsafe`; each block carries a `// SAFETY:` comment.

pub(crate) mod attr;
pub mod cgroup;
pub(crate) mod child;
pub(crate) mod clock;
pub(crate) mod diagnose;
pub mod dirat;
pub(crate) mod open;
pub(crate) mod poll;
pub(crate) mod resolve;
pub(crate) mod ring;
#[cfg(test)]
pub(crate) mod testutil;
pub(crate) mod tracefs;
pub(crate) mod tracefs_absence;
pub(crate) mod uprobe;
pub(crate) mod uprobe_clash;

use std::io;

pub use attr::{
    AttrConfig, X86_REGS_DWARF_MIN, X86_REGS_PERF_ALL, build_attr, user_regs_mask_for_unwind,
};
pub use child::{CommandStdout, ExitStatusInfo, GatedChild, RunningChild};
pub use diagnose::{EventClass, OpenContext, SystemFacts, explain_mmap_error, explain_open_error};
pub use open::{
    FeatureState, Opener, SysOpener, ioc_disable, ioc_enable, ioc_id, ioc_set_filter,
    ioc_set_output, open_event,
};
pub use ring::{RawRecord, RingBuffer, RingReader};
pub use tracefs::{Tracefs, TracefsError};

/// Makes glibc's malloc give large blocks back to the system when they are freed. The
/// recorder holds the unwind sections of every binary it meets (often megabytes each) and
/// drops them when no process maps them; with glibc's default, the threshold above which
/// blocks get their own mapping grows with every large block freed, and later ones come from
/// the heap, whose free holes the process keeps: memory would grow on a host that runs many
/// binaries. Setting the threshold fixes it (and turns its growth off).
pub fn tune_allocator() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets allocator parameters; called before other threads start.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 * 1024);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1024 * 1024);
    }
}

/// The effective user id of this process.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The soft limit on this process's open files (`RLIMIT_NOFILE`); 1024, the usual default,
/// when it cannot be read.
pub fn open_files_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the valid, exclusively borrowed `lim`.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0;
    if ok { lim.rlim_cur } else { 1024 }
}

/// The system page size in bytes (4096 when sysconf fails, which it does not on Linux).
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|&s| s > 0)
        .unwrap_or(4096)
}

/// CLOCK_MONOTONIC in nanoseconds, the clock perf samples use with `use_clockid`.
pub fn clock_monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// Local time of `secs` since the epoch (for memleak's `[HH:MM:SS]`); `tm` is left as it was
/// if the conversion fails.
pub fn localtime(secs: i64, tm: &mut libc::tm) {
    let t: libc::time_t = secs;
    // SAFETY: both pointers are valid for the call; localtime_r writes only to `tm`.
    unsafe {
        libc::localtime_r(&t, tm);
    }
}

/// Reads one native-endian u64 at `addr` in process `pid` (process_vm_readv: the same
/// permission as ptrace, which root and the process's own user without Yama restrictions have).
pub fn read_process_u64(pid: u32, addr: u64) -> io::Result<u64> {
    let mut buf = [0u8; 8];
    match read_process_memory(pid, addr, &mut buf)? {
        8 => Ok(u64::from_ne_bytes(buf)),
        _ => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "short read")),
    }
}

/// Reads up to `buf.len()` bytes at `addr` in process `pid` with process_vm_readv; returns
/// how many were read (fewer when the range runs into an unmapped page). Never blocks on
/// I/O the way reading `/proc/PID/mem` of a file mapping could only if the page must be
/// read from disk; the caller reads anonymous memory (stacks) and code already mapped.
pub fn read_process_memory(pid: u32, addr: u64, buf: &mut [u8]) -> io::Result<usize> {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?;
    // SAFETY: `local` points at `buf`, which is writable for its whole length; the remote
    // iovec is only read by the kernel, which checks it against the other process's
    // address space.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// The calling thread's nice value (Linux keeps one per thread: `PRIO_PROCESS` with 0 is
/// the caller, not its other threads).
pub(crate) fn thread_nice() -> io::Result<i32> {
    // SAFETY: getpriority takes no pointer; errno is the calling thread's own.
    let n = unsafe {
        *libc::__errno_location() = 0;
        libc::getpriority(libc::PRIO_PROCESS, 0)
    };
    // -1 is a nice value too: only errno tells a failure.
    match io::Error::last_os_error() {
        e if n == -1 && e.raw_os_error().is_some_and(|c| c != 0) => Err(e),
        _ => Ok(n),
    }
}

/// Sets the calling thread's nice value (lowering it needs `CAP_SYS_NICE` or `RLIMIT_NICE`).
pub(crate) fn set_thread_nice(nice: i32) -> io::Result<()> {
    // SAFETY: setpriority takes no pointer.
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The online CPUs, from `/sys/devices/system/cpu/online`.
pub fn online_cpus() -> io::Result<Vec<u32>> {
    const PATH: &str = "/sys/devices/system/cpu/online";
    let text = std::fs::read_to_string(PATH)
        .map_err(|e| io::Error::new(e.kind(), format!("failed to read {PATH}: {e}")))?;
    parse_cpu_list(text.trim()).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("failed to parse {PATH}: {e}"),
        )
    })
}

/// Parses a CPU list such as `0-1,4` (sysfs) or `-C 0,2-3` (users): sorted, deduplicated.
pub fn parse_cpu_list(s: &str) -> Result<Vec<u32>, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("empty cpu list".to_string());
    }
    let mut cpus = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        let parse = |n: &str| {
            n.trim()
                .parse::<u32>()
                .map_err(|_| format!("invalid cpu `{n}` in cpu list `{s}`"))
        };
        match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (parse(lo)?, parse(hi)?);
                if lo > hi {
                    return Err(format!("invalid cpu range `{part}` in cpu list `{s}`"));
                }
                if hi - lo > 65_536 {
                    return Err(format!("cpu range `{part}` is too large"));
                }
                cpus.extend(lo..=hi);
            }
            None => cpus.push(parse(part)?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Whether perf events can be opened here at all: opens and closes a software task-clock
/// counter on this thread. The error says why not (errno text).
pub fn probe_perf_events() -> Result<(), String> {
    use attr::{AttrConfig, build_attr};
    use open::{Opener, SysOpener};
    use perf_event_open_sys::bindings as b;

    let cfg = AttrConfig {
        type_: b::PERF_TYPE_SOFTWARE,
        config: u64::from(b::PERF_COUNT_SW_TASK_CLOCK),
        exclude_kernel: true,
        exclude_hv: true,
        disabled: true,
        ..AttrConfig::default()
    };
    let attr = build_attr(&cfg);
    SysOpener
        .open(&attr, 0, -1, -1, 0)
        .map(drop)
        .map_err(|errno| {
            format!(
                "perf_event_open failed: {}",
                std::io::Error::from_raw_os_error(errno)
            )
        })
}

/// Maps a whole file read-only. Reading a large perf.data through the page cache this way
/// avoids copying it (1.4 GB of dwarf samples took 2 s of system time with `fs::read`).
pub fn map_file(file: &std::fs::File) -> io::Result<memmap2::Mmap> {
    // SAFETY: the mapping is read-only and private to this process. If another process
    // truncates the file while it is mapped, reads past the new end raise SIGBUS; perf has the
    // same exposure, and recordings are not modified once finished.
    let map = unsafe { memmap2::Mmap::map(file)? };
    let _ = map.advise(memmap2::Advice::Sequential);
    Ok(map)
}

/// Lets go of the pages of `map` in `range` (byte offsets, rounded inwards to whole pages):
/// a recording read front to back then keeps a window of itself resident, not all of it
/// (a 1.3 GB file counted 1.3 GB in the report's RSS). The page cache keeps the pages.
pub fn release_mapped(map: &memmap2::Mmap, range: std::ops::Range<usize>) -> io::Result<()> {
    let page = page_size();
    let start = range.start.next_multiple_of(page);
    let end = range.end.min(map.len()) / page * page;
    if end <= start {
        return Ok(());
    }
    // SAFETY: `map` is memmap2's `Mmap::map`, a read-only MAP_SHARED mapping of a file.
    // MADV_DONTNEED only drops this process's page table entries for it: a later read of
    // the range faults the same bytes in again from the page cache (the file's), so a slice
    // still borrowed from the range reads what it read before, and nothing is freed under it.
    unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start) }
}

/// This process's own user and system seconds and its peak resident set in KiB (the
/// agent's cost, reported in its own metrics).
pub fn self_rusage() -> (f64, f64, u64) {
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid rusage for getrusage to write.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return (0.0, 0.0, 0);
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let max_rss = u64::try_from(ru.ru_maxrss).unwrap_or(0);
    (secs(ru.ru_utime), secs(ru.ru_stime), max_rss)
}

/// The user and system seconds of the children this process waited for (a command's).
pub fn children_rusage() -> (f64, f64) {
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid rusage for getrusage to write.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) } != 0 {
        return (0.0, 0.0);
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(ru.ru_utime), secs(ru.ru_stime))
}

/// Sets `O_NONBLOCK` on the open file description behind `fd` (its duplicates share it).
pub(crate) fn set_nonblocking(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: fcntl with F_GETFL on a borrowed, open descriptor reads its flags only.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: F_SETFL on the same descriptor changes only its status flags.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1,4").unwrap(), vec![0, 1, 4]);
        assert_eq!(parse_cpu_list("3,0-2,2").unwrap(), vec![0, 1, 2, 3]);
        assert_eq!(parse_cpu_list("7\n").unwrap(), vec![7]);
        assert!(parse_cpu_list("").is_err());
        assert!(parse_cpu_list("1,").is_err());
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("a").unwrap_err().contains("invalid cpu `a`"));
    }

    #[test]
    fn this_machine() {
        let ps = page_size();
        assert!(ps >= 4096 && ps.is_power_of_two());
        let cpus = online_cpus().unwrap();
        assert!(cpus.contains(&0));
        let a = clock_monotonic_ns();
        let b = clock_monotonic_ns();
        assert!(a > 0 && b >= a);
    }
}
