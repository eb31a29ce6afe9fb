//! Opening perf events with perf's fallback ladder, and the perf ioctls.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use perf_event_open_sys::bindings::{self as b, perf_event_attr};
use perf_event_open_sys::ioctls;

/// Something that can call `perf_event_open`; tests inject fakes to exercise the ladder.
pub trait Opener {
    /// Opens one event; `Err` carries the errno.
    fn open(
        &self,
        attr: &perf_event_attr,
        pid: i32,
        cpu: i32,
        group_fd: i32,
        flags: u64,
    ) -> Result<OwnedFd, i32>;
}

/// The real syscall.
#[derive(Debug, Clone, Copy, Default)]
pub struct SysOpener;

impl Opener for SysOpener {
    fn open(
        &self,
        attr: &perf_event_attr,
        pid: i32,
        cpu: i32,
        group_fd: i32,
        flags: u64,
    ) -> Result<OwnedFd, i32> {
        // The kernel may write the size it supports back into the attr on E2BIG.
        let mut copy = *attr;
        // SAFETY: `copy` is a fully initialised perf_event_attr whose `size` matches its type;
        // the syscall reads it and may write `size` back, both within the struct.
        let fd = unsafe {
            perf_event_open_sys::perf_event_open(&mut copy, pid, cpu, group_fd, flags as _)
        };
        if fd < 0 {
            return Err(io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL));
        }
        // SAFETY: the syscall returned a new file descriptor that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

/// Kernel features found missing so far; later opens skip them without retrying.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeatureState {
    /// `use_clockid` (4.1+): timestamps fall back to perf's clock.
    pub no_clockid: bool,
    /// `mmap2` and `comm_exec` (3.16+): plain MMAP records, no build-id or inode.
    pub no_mmap2: bool,
    /// `PERF_FLAG_FD_CLOEXEC` (3.14+): close-on-exec is set with fcntl instead.
    pub no_cloexec: bool,
    /// `sample_id_all` (2.6.38+): non-sample records carry no pid/tid/time.
    pub no_sample_id_all: bool,
    /// `PERF_FORMAT_LOST` (6.0+): no per-event count of dropped records to read at the end.
    pub no_format_lost: bool,
    /// `PERF_SAMPLE_DATA_PAGE_SIZE` (5.11+): faults weigh the base page size.
    pub no_data_page_size: bool,
    /// `PERF_SAMPLE_CGROUP` and CGROUP records (5.7+): the agent reads a process's cgroup
    /// in /proc instead.
    pub no_cgroup: bool,
}

impl FeatureState {
    /// Human names of the features dropped, for the end-of-run summary.
    pub fn dropped(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.no_clockid {
            out.push("CLOCK_MONOTONIC timestamps (use_clockid)");
        }
        if self.no_mmap2 {
            out.push("MMAP2 records (mmap2, comm_exec)");
        }
        if self.no_cloexec {
            out.push("close-on-exec at open (PERF_FLAG_FD_CLOEXEC)");
        }
        if self.no_sample_id_all {
            out.push("ids on non-sample records (sample_id_all)");
        }
        if self.no_format_lost {
            out.push("per-event lost counts (PERF_FORMAT_LOST)");
        }
        if self.no_data_page_size {
            out.push("data page sizes (PERF_SAMPLE_DATA_PAGE_SIZE)");
        }
        if self.no_cgroup {
            out.push("cgroup ids in samples (PERF_SAMPLE_CGROUP, 5.7+; cgroups read from /proc)");
        }
        out
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Feature {
    DataPageSize,
    Cgroup,
    FormatLost,
    Clockid,
    Mmap2,
    Cloexec,
    SampleIdAll,
}

/// The order features are dropped in on EINVAL, newest first.
const LADDER: [Feature; 7] = [
    Feature::DataPageSize,
    Feature::FormatLost,
    Feature::Cgroup,
    Feature::Clockid,
    Feature::Mmap2,
    Feature::Cloexec,
    Feature::SampleIdAll,
];

/// Whether the attr (or the open flags) asks for the feature.
fn requested(feature: Feature, attr: &perf_event_attr, features: &FeatureState) -> bool {
    match feature {
        Feature::DataPageSize => attr.sample_type & DATA_PAGE_SIZE != 0,
        Feature::Cgroup => attr.sample_type & SAMPLE_CGROUP != 0 || attr.cgroup() != 0,
        Feature::FormatLost => attr.read_format & FORMAT_LOST != 0,
        Feature::Clockid => attr.use_clockid() != 0,
        Feature::Mmap2 => attr.mmap2() != 0 || attr.comm_exec() != 0,
        Feature::Cloexec => !features.no_cloexec,
        Feature::SampleIdAll => attr.sample_id_all() != 0,
    }
}

fn mark_missing(feature: Feature, features: &mut FeatureState) {
    match feature {
        Feature::DataPageSize => features.no_data_page_size = true,
        Feature::Cgroup => features.no_cgroup = true,
        Feature::FormatLost => features.no_format_lost = true,
        Feature::Clockid => features.no_clockid = true,
        Feature::Mmap2 => features.no_mmap2 = true,
        Feature::Cloexec => features.no_cloexec = true,
        Feature::SampleIdAll => features.no_sample_id_all = true,
    }
}

/// Clears from the attr every feature already known to be missing.
fn apply_missing(attr: &mut perf_event_attr, features: &FeatureState) {
    if features.no_format_lost {
        attr.read_format &= !FORMAT_LOST;
    }
    if features.no_data_page_size {
        attr.sample_type &= !DATA_PAGE_SIZE;
    }
    if features.no_cgroup {
        attr.sample_type &= !SAMPLE_CGROUP;
        attr.set_cgroup(0);
    }
    if features.no_clockid {
        attr.set_use_clockid(0);
        attr.clockid = 0;
    }
    if features.no_mmap2 && (attr.mmap2() != 0 || attr.comm_exec() != 0) {
        attr.set_mmap2(0);
        attr.set_comm_exec(0);
        attr.set_mmap(1);
    }
    if features.no_sample_id_all {
        attr.set_sample_id_all(0);
    }
}

use crate::abi::{
    PERF_SAMPLE_CGROUP as SAMPLE_CGROUP, PERF_SAMPLE_DATA_PAGE_SIZE as DATA_PAGE_SIZE,
};

/// `PERF_FORMAT_LOST`: `read()` returns the records the kernel dropped for the event.
pub const FORMAT_LOST: u64 = 1 << 4;

/// Reads the count of records the kernel dropped for an event opened with
/// `read_format == PERF_FORMAT_LOST` (the value, then the lost count). For an inherited event
/// the count covers every child, since the kernel charges losses to the parent event.
pub fn read_lost(fd: BorrowedFd) -> io::Result<u64> {
    let mut buf = [0u64; 2];
    // SAFETY: `buf` is 16 writable bytes that live across the call; `fd` is open.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), 16) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n != 16 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("read {n} bytes from a perf event, expected 16 (value, lost)"),
        ));
    }
    Ok(buf[1])
}

/// Reads a counting event opened with `read_format` TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING:
/// its value, and the nanoseconds it was enabled and running.
pub fn read_counter(fd: BorrowedFd) -> io::Result<[u64; 3]> {
    let mut buf = [0u64; 3];
    // SAFETY: `buf` is 24 writable bytes that live across the call; `fd` is open.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), 24) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n != 24 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("read {n} bytes from a counter, expected 24 (value, enabled, running)"),
        ));
    }
    Ok(buf)
}

/// Opens an event, dropping features the kernel rejects with EINVAL one at a time
/// (`LADDER`: PERF_SAMPLE_DATA_PAGE_SIZE, PERF_FORMAT_LOST, cgroup ids, then use_clockid, then
/// mmap2, then FD_CLOEXEC, then sample_id_all) and remembering them in `features`.
///
/// On success `attr` is what was actually opened. When every retry fails, `attr` and
/// `features` are restored and the first errno is returned, so one bad event does not mark
/// features missing for the others.
pub fn open_event(
    opener: &dyn Opener,
    attr: &mut perf_event_attr,
    pid: i32,
    cpu: i32,
    features: &mut FeatureState,
) -> Result<OwnedFd, i32> {
    open_event_in(opener, attr, pid, cpu, -1, features)
}

/// `open_event` into the group led by `group_fd` (-1: a group of its own).
pub fn open_event_in(
    opener: &dyn Opener,
    attr: &mut perf_event_attr,
    pid: i32,
    cpu: i32,
    group_fd: i32,
    features: &mut FeatureState,
) -> Result<OwnedFd, i32> {
    open_event_flags(opener, attr, (pid, cpu, group_fd), 0, features)
}

/// `open_event_in` with `flags` added to the call's (`PERF_FLAG_PID_CGROUP`: `pid` is a
/// cgroup directory's fd).
pub fn open_event_flags(
    opener: &dyn Opener,
    attr: &mut perf_event_attr,
    (pid, cpu, group_fd): (i32, i32, i32),
    flags: u64,
    features: &mut FeatureState,
) -> Result<OwnedFd, i32> {
    let extra = flags;
    let (orig_attr, orig_features) = (*attr, features.clone());
    apply_missing(attr, features);
    let mut first_err = None;
    let mut ladder = LADDER.iter();
    loop {
        let flags = extra
            | if features.no_cloexec {
                0
            } else {
                u64::from(b::PERF_FLAG_FD_CLOEXEC)
            };
        let errno = match opener.open(attr, pid, cpu, group_fd, flags) {
            Ok(fd) => {
                if features.no_cloexec {
                    set_cloexec(&fd);
                }
                return Ok(fd);
            }
            Err(errno) => errno,
        };
        let first = *first_err.get_or_insert(errno);
        let next = ladder.find(|&&f| requested(f, attr, features));
        let Some(&feature) = next.filter(|_| errno == libc::EINVAL) else {
            *attr = orig_attr;
            *features = orig_features;
            return Err(first);
        };
        mark_missing(feature, features);
        apply_missing(attr, features);
    }
}

fn set_cloexec(fd: &OwnedFd) {
    // SAFETY: F_SETFD on a descriptor we own; no memory is passed. A failure only leaves the
    // descriptor inheritable, which is harmless for a profiler fd.
    unsafe {
        libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC);
    }
}

fn check(rc: libc::c_int, what: &str) -> io::Result<()> {
    if rc < 0 {
        let err = io::Error::last_os_error();
        return Err(io::Error::new(
            err.kind(),
            format!("perf ioctl {what} failed: {err}"),
        ));
    }
    Ok(())
}

/// `PERF_EVENT_IOC_ENABLE`.
pub fn ioc_enable(fd: BorrowedFd) -> io::Result<()> {
    // SAFETY: ENABLE takes an integer argument and `fd` is a valid descriptor.
    check(unsafe { ioctls::ENABLE(fd.as_raw_fd(), 0) }, "ENABLE")
}

/// `PERF_EVENT_IOC_DISABLE`.
pub fn ioc_disable(fd: BorrowedFd) -> io::Result<()> {
    // SAFETY: DISABLE takes an integer argument and `fd` is a valid descriptor.
    check(unsafe { ioctls::DISABLE(fd.as_raw_fd(), 0) }, "DISABLE")
}

/// `PERF_EVENT_IOC_SET_OUTPUT`: send `fd`'s records to `target`'s ring buffer.
pub fn ioc_set_output(fd: BorrowedFd, target: BorrowedFd) -> io::Result<()> {
    // SAFETY: SET_OUTPUT takes another descriptor as an integer; both are valid.
    let rc = unsafe { ioctls::SET_OUTPUT(fd.as_raw_fd(), target.as_raw_fd()) };
    check(rc, "SET_OUTPUT")
}

/// `PERF_EVENT_IOC_ID`: the kernel's id for the event, as found in samples.
pub fn ioc_id(fd: BorrowedFd) -> io::Result<u64> {
    let mut id = 0u64;
    // SAFETY: ID writes one u64 through the pointer, which points at `id`.
    check(unsafe { ioctls::ID(fd.as_raw_fd(), &mut id) }, "ID")?;
    Ok(id)
}

/// `PERF_EVENT_IOC_SET_FILTER`: a tracepoint filter such as `bytes_req > 4096`.
pub fn ioc_set_filter(fd: BorrowedFd, filter: &CStr) -> io::Result<()> {
    // SAFETY: the kernel only reads the NUL-terminated string (it copies it with
    // strndup_user); the `*mut` in the binding's signature is not used for writing.
    let rc = unsafe { ioctls::SET_FILTER(fd.as_raw_fd(), filter.as_ptr().cast_mut()) };
    check(rc, "SET_FILTER")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::os::fd::AsFd;

    /// What one open attempt asked for: (use_clockid, mmap2, comm_exec, mmap, cloexec,
    /// sample_id_all).
    type Attempt = (bool, bool, bool, bool, bool, bool);

    /// A fake kernel: rejects with `errno` any attempt for which `reject` says so.
    struct Fake<F: Fn(&Attempt) -> Option<i32>> {
        reject: F,
        attempts: RefCell<Vec<Attempt>>,
    }

    impl<F: Fn(&Attempt) -> Option<i32>> Fake<F> {
        fn new(reject: F) -> Self {
            Fake {
                reject,
                attempts: RefCell::new(Vec::new()),
            }
        }
    }

    impl<F: Fn(&Attempt) -> Option<i32>> Opener for Fake<F> {
        fn open(
            &self,
            a: &perf_event_attr,
            _: i32,
            _: i32,
            _: i32,
            flags: u64,
        ) -> Result<OwnedFd, i32> {
            let attempt = (
                a.use_clockid() != 0,
                a.mmap2() != 0,
                a.comm_exec() != 0,
                a.mmap() != 0,
                flags & u64::from(b::PERF_FLAG_FD_CLOEXEC) != 0,
                a.sample_id_all() != 0,
            );
            self.attempts.borrow_mut().push(attempt);
            match (self.reject)(&attempt) {
                Some(errno) => Err(errno),
                None => std::fs::File::open("/dev/null")
                    .map(OwnedFd::from)
                    .map_err(|_| libc::EIO),
            }
        }
    }

    fn full_attr() -> perf_event_attr {
        let mut attr = perf_event_attr::default();
        attr.set_use_clockid(1);
        attr.clockid = libc::CLOCK_MONOTONIC;
        attr.set_mmap(1);
        attr.set_mmap2(1);
        attr.set_comm_exec(1);
        attr.set_sample_id_all(1);
        attr
    }

    #[test]
    fn the_cgroup_flag_stays_on_every_rung_of_the_ladder() {
        struct Flags(RefCell<Vec<u64>>);
        impl Opener for Flags {
            fn open(
                &self,
                _: &perf_event_attr,
                _: i32,
                _: i32,
                _: i32,
                flags: u64,
            ) -> Result<OwnedFd, i32> {
                self.0.borrow_mut().push(flags);
                Err(libc::EINVAL)
            }
        }
        let f = Flags(RefCell::new(Vec::new()));
        let mut attr = full_attr();
        let cgroup = crate::abi::PERF_FLAG_PID_CGROUP;
        let r = open_event_flags(
            &f,
            &mut attr,
            (5, 0, -1),
            cgroup,
            &mut FeatureState::default(),
        );
        assert_eq!(r.err(), Some(libc::EINVAL));
        let flags = f.0.into_inner();
        assert!(flags.len() > 1, "{flags:?}");
        assert!(flags.iter().all(|f| f & cgroup != 0), "{flags:?}");
    }

    #[test]
    fn drops_clockid_then_mmap2() {
        // A 3.15-like kernel: no clockid, no mmap2.
        let fake = Fake::new(|a: &Attempt| (a.0 || a.1 || a.2).then_some(libc::EINVAL));
        let mut attr = full_attr();
        let mut features = FeatureState::default();
        let fd = open_event(&fake, &mut attr, 0, -1, &mut features);
        assert!(fd.is_ok());
        assert_eq!(
            *fake.attempts.borrow(),
            vec![
                (true, true, true, true, true, true),
                (false, true, true, true, true, true),
                (false, false, false, true, true, true),
            ]
        );
        assert!(features.no_clockid && features.no_mmap2);
        assert!(!features.no_cloexec && !features.no_sample_id_all);
        // The attr reflects what was opened: plain mmap, no comm_exec, no clockid.
        assert_eq!((attr.use_clockid(), attr.clockid), (0, 0));
        assert_eq!((attr.mmap2(), attr.comm_exec(), attr.mmap()), (0, 0, 1));
        assert_eq!(attr.sample_id_all(), 1);
        assert_eq!(features.dropped().len(), 2);
        assert!(features.dropped()[1].contains("mmap2"));

        // Known missing features are applied up front: one attempt next time.
        fake.attempts.borrow_mut().clear();
        let mut attr = full_attr();
        assert!(open_event(&fake, &mut attr, 0, -1, &mut features).is_ok());
        assert_eq!(fake.attempts.borrow().len(), 1);
    }

    #[test]
    fn drops_cloexec_and_sample_id_all_on_ancient_kernels() {
        let fake = Fake::new(|a: &Attempt| (a.0 || a.1 || a.4 || a.5).then_some(libc::EINVAL));
        let mut attr = full_attr();
        let mut features = FeatureState::default();
        assert!(open_event(&fake, &mut attr, 0, -1, &mut features).is_ok());
        assert_eq!(fake.attempts.borrow().len(), 5);
        assert_eq!(features.dropped().len(), 4);
        assert_eq!(attr.sample_id_all(), 0);
    }

    #[test]
    fn only_requested_features_are_dropped() {
        // mmap2 not requested: the first EINVAL drops clockid, the second sample_id_all is
        // reached without touching mmap2.
        let fake = Fake::new(|a: &Attempt| (a.0 || a.5).then_some(libc::EINVAL));
        let mut attr = full_attr();
        attr.set_mmap2(0);
        attr.set_comm_exec(0);
        let mut features = FeatureState::default();
        assert!(open_event(&fake, &mut attr, 0, -1, &mut features).is_ok());
        assert!(features.no_clockid && features.no_sample_id_all);
        // cloexec was dropped on the way (it is always requested), mmap2 was not.
        assert!(!features.no_mmap2);
    }

    #[test]
    fn a_kernel_before_5_7_opens_without_cgroup_ids() {
        // EINVAL for either cgroup bit: both go, and stay gone for the next opens.
        struct Pre57(RefCell<Vec<(bool, bool)>>);
        impl Opener for Pre57 {
            fn open(
                &self,
                a: &perf_event_attr,
                _: i32,
                _: i32,
                _: i32,
                _: u64,
            ) -> Result<OwnedFd, i32> {
                let asked = (a.sample_type & SAMPLE_CGROUP != 0, a.cgroup() != 0);
                self.0.borrow_mut().push(asked);
                if asked.0 || asked.1 {
                    return Err(libc::EINVAL);
                }
                std::fs::File::open("/dev/null")
                    .map(OwnedFd::from)
                    .map_err(|_| libc::EIO)
            }
        }
        let kernel = Pre57(RefCell::new(Vec::new()));
        let mut attr = full_attr();
        attr.sample_type |= SAMPLE_CGROUP;
        attr.set_cgroup(1);
        let mut features = FeatureState::default();
        assert!(open_event(&kernel, &mut attr, -1, 0, &mut features).is_ok());
        assert_eq!(*kernel.0.borrow(), [(true, true), (false, false)]);
        assert!(features.no_cgroup && !features.no_clockid && !features.no_mmap2);
        assert_eq!((attr.sample_type & SAMPLE_CGROUP, attr.cgroup()), (0, 0));
        assert_eq!(attr.mmap2(), 1);
        assert!(features.dropped()[0].contains("PERF_SAMPLE_CGROUP"));
        kernel.0.borrow_mut().clear();
        let mut attr = full_attr();
        attr.sample_type |= SAMPLE_CGROUP;
        assert!(open_event(&kernel, &mut attr, -1, 1, &mut features).is_ok());
        assert_eq!(*kernel.0.borrow(), [(false, false)]);
    }

    #[test]
    fn non_einval_errors_are_not_retried() {
        let fake = Fake::new(|_: &Attempt| Some(libc::EACCES));
        let mut attr = full_attr();
        let mut features = FeatureState::default();
        assert_eq!(
            open_event(&fake, &mut attr, 0, -1, &mut features).err(),
            Some(libc::EACCES)
        );
        assert_eq!(fake.attempts.borrow().len(), 1);
        assert_eq!(features, FeatureState::default());
    }

    #[test]
    fn exhausted_ladder_restores_state() {
        let fake = Fake::new(|_: &Attempt| Some(libc::EINVAL));
        let mut attr = full_attr();
        let mut features = FeatureState::default();
        assert_eq!(
            open_event(&fake, &mut attr, 0, -1, &mut features).err(),
            Some(libc::EINVAL)
        );
        assert_eq!(fake.attempts.borrow().len(), 5);
        assert_eq!(features, FeatureState::default());
        assert_eq!(attr.mmap2(), 1);
        assert_eq!(attr.use_clockid(), 1);
    }

    #[test]
    fn live_software_counter_and_ioctls() {
        if !crate::sys::testutil::require_perf("a software task-clock counter") {
            return;
        }
        let cfg = crate::sys::attr::AttrConfig {
            type_: b::PERF_TYPE_SOFTWARE,
            config: u64::from(b::PERF_COUNT_SW_TASK_CLOCK),
            disabled: true,
            use_clockid: true,
            sample_id_all: true,
            ..Default::default()
        };
        let mut attr = crate::sys::attr::build_attr(&cfg);
        let mut features = FeatureState::default();
        let fd = open_event(&SysOpener, &mut attr, 0, -1, &mut features).unwrap();
        assert!(features.dropped().is_empty(), "{:?}", features.dropped());
        ioc_enable(fd.as_fd()).unwrap();
        let id = ioc_id(fd.as_fd()).unwrap();
        assert!(id > 0);
        ioc_disable(fd.as_fd()).unwrap();
        // Filters only apply to tracepoints: a software event rejects them.
        assert!(ioc_set_filter(fd.as_fd(), c"common_pid == 1").is_err());
        // CLOEXEC was set at open.
        // SAFETY: F_GETFD on a descriptor we own.
        let fdflags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
        assert_eq!(fdflags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
    }
}
