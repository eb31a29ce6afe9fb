//! Turning a record configuration into open perf events and ring buffers.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;

use anyhow::{Result, anyhow, bail};
use perf_event_open_sys::bindings::perf_event_attr;
use rustc_hash::FxHashMap;

use crate::config::record::{CallGraph, RecordConfig, Target, UnwindWhen};
use crate::events::{EventKind, EventSpec, Period};
use crate::procfs;
use crate::sys::attr::{AttrConfig, X86_REGS_PERF_ALL, user_regs_mask_for_unwind};
use crate::sys::clock::SampleClock;
use crate::sys::diagnose::{EventClass, OpenContext, SystemFacts, explain_open_error};
use crate::sys::open::FORMAT_LOST;
use crate::sys::ring::RingBuffer;
use crate::sys::tracefs::Tracefs;
use crate::sys::uprobe_clash;

// The bindings declare the sample_type bits as u32; attr.sample_type is u64.
use crate::abi::{
    PERF_SAMPLE_ADDR, PERF_SAMPLE_CALLCHAIN, PERF_SAMPLE_CGROUP, PERF_SAMPLE_CPU,
    PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_IP, PERF_SAMPLE_PERIOD, PERF_SAMPLE_RAW,
    PERF_SAMPLE_REGS_USER, PERF_SAMPLE_STACK_USER, PERF_SAMPLE_TID, PERF_SAMPLE_TIME,
};

/// How one event samples when it differs from the recording's defaults (memperf leak: entry
/// probes copy the stack, return and free probes only registers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sampling {
    pub call_graph: CallGraph,
    /// User registers sampled beside those unwinding needs (probe arguments, results).
    pub regs: u64,
    /// Kernel callchain only (PERF_SAMPLE_CALLCHAIN with exclude_callchain_user).
    pub kernel_chain: bool,
    /// The tracepoint payload (PERF_SAMPLE_RAW).
    pub raw: bool,
    pub period: Period,
    /// Whether the stack copy is data the samples carry (posix_memalign's result, stored
    /// through a pointer into it), written to the file as copied: not only what unwinding
    /// reads and the file replaces with the callchain.
    pub keep_stack: bool,
}

/// An event resolved against this kernel, with the attr it is opened with.
pub struct ResolvedEvent {
    pub spec: EventSpec,
    pub type_: u32,
    pub config: u64,
    pub config1: u64,
    pub config2: u64,
    /// Overrides the recording's sampling for this event.
    pub sampling: Option<Sampling>,
    /// An in-kernel tracepoint filter (PERF_EVENT_IOC_SET_FILTER), set on every fd.
    pub filter: Option<std::ffi::CString>,
    /// The glob this event was expanded from (`kmem:mm_page_*`).
    pub glob: Option<String>,
    /// The attr as finally opened (after any fallback), for the file header.
    pub attr: Option<perf_event_attr>,
    pub ids: Vec<u64>,
    /// The user probe this event is opened on (`live::probes`), removed when the last event
    /// holding it is dropped.
    pub probe: Option<std::sync::Arc<super::probes::Placed>>,
    /// Sample bits beyond the recording's (a memory event's data address and source,
    /// weight, physical address and page size).
    pub sample_extra: u64,
    /// The earlier event whose group this one joins (perf's `{leader,member}`): opened with
    /// the leader's fd as group_fd, on each CPU and thread the leader is opened on.
    pub leader: Option<usize>,
    /// Opened only to lead a group, never sampled (Intel's `mem-loads-aux`): a counting
    /// event (sample_period 0) that still describes samples as the others do, so that the
    /// file's events share one sample id layout.
    pub counting: bool,
    /// For a user probe's second and later sites (a USDT probe the compiler placed in several
    /// places, each an event of its own, `NAME_1`...): the index of its first site's event.
    pub first_site: Option<usize>,
}

/// Everything opened for one recording. (`events` is the last field: fields drop in order,
/// and a user probe can be removed only once the fds opened on it are closed.)
pub struct Opened {
    pub rings: Vec<RingBuffer>,
    /// For each ring, the one event whose samples it holds, when it holds one only.
    pub ring_events: Vec<Option<usize>>,
    /// Every event fd that is not the owner of a ring (those stay inside their ring); `None`
    /// once closed (`live::resize` closes the fds it replaced).
    pub fds: Vec<Option<OwnedFd>>,
    /// The kernel's lost counts (PERF_FORMAT_LOST) of the fds closed while recording.
    pub retired_lost: u64,
    pub ids: FxHashMap<u64, usize>,
    /// Notes for the summary (e.g. kernel samples excluded by perf_event_paranoid).
    pub notes: Vec<String>,
    pub tracefs: Option<Tracefs>,
    /// The clock the samples carry (see `sys::clock`), and whether it is CLOCK_MONOTONIC.
    pub clock: SampleClock,
    pub clock_monotonic: bool,
    /// Whether the events carry PERF_FORMAT_LOST (kernel 6.0+).
    pub format_lost: bool,
    /// Where each event fd was opened and which ring it writes to (`live::resize` opens an
    /// event again in the same places).
    pub placements: Vec<Placement>,
    pub events: Vec<ResolvedEvent>,
}

/// One opened event fd: its event, CPU and pid as perf_event_open took them, its ring,
/// and where the fd is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub ev: usize,
    pub cpu: u32,
    pub pid: i32,
    pub ring: usize,
    pub fd: FdSlot,
    /// Whether the fd is in use (`live::resize` disables the fds it replaces).
    pub enabled: bool,
}

/// Where an event fd is kept in [`Opened`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FdSlot {
    /// It owns ring number N (`Opened::rings`).
    Ring(usize),
    /// `Opened::fds[N]`.
    Fd(usize),
}

impl Opened {
    /// The fd a placement names.
    pub fn fd_of(&self, slot: FdSlot) -> Option<std::os::fd::BorrowedFd<'_>> {
        match slot {
            FdSlot::Ring(r) => self.rings.get(r).map(|r| r.fd()),
            FdSlot::Fd(i) => self.fds.get(i).and_then(Option::as_ref).map(|f| f.as_fd()),
        }
    }

    /// Closes the fd of placement `i`, which no longer records (disabled by `live::resize`),
    /// after adding its lost count to `retired_lost`: the fds replaced while recording do not
    /// pile up. Its records already in the ring stay there. A ring's owner stays open (it
    /// holds the ring), and so does a fd whose count cannot be read (the end of the run
    /// reads it again, and says why it failed).
    pub fn retire(&mut self, i: usize) {
        let Some(&Placement {
            fd: FdSlot::Fd(n), ..
        }) = self.placements.get(i)
        else {
            return;
        };
        let Some(slot) = self.fds.get_mut(n) else {
            return;
        };
        if let Some(fd) = slot.as_ref() {
            if self.format_lost {
                match crate::sys::open::read_lost(fd.as_fd()) {
                    Ok(lost) => self.retired_lost += lost,
                    Err(_) => return,
                }
            }
            *slot = None;
        }
    }

    /// The fds open now: the rings' owners, then the others.
    pub fn open_fds(&self) -> impl Iterator<Item = std::os::fd::BorrowedFd<'_>> {
        let owners = self.rings.iter().map(|r| r.fd());
        owners.chain(self.fds.iter().flatten().map(|f| f.as_fd()))
    }
}

pub(crate) fn is_fault_event(spec: &EventSpec) -> bool {
    use perf_event_open_sys::bindings::{
        PERF_COUNT_SW_PAGE_FAULTS, PERF_COUNT_SW_PAGE_FAULTS_MAJ, PERF_COUNT_SW_PAGE_FAULTS_MIN,
    };
    matches!(spec.kind, EventKind::Software { config }
        if config == PERF_COUNT_SW_PAGE_FAULTS as u64
            || config == PERF_COUNT_SW_PAGE_FAULTS_MIN as u64
            || config == PERF_COUNT_SW_PAGE_FAULTS_MAJ as u64)
}

/// Wake the reader when a quarter of the ring is full. Waking it after every record (the
/// kernel's `wakeup_events = 1`) costs an irq_work and a context switch per sample, which
/// made the kernel side of a fault-heavy recording 1.5x slower than perf's; records that
/// trickle in are still read by the reader's 100 ms poll timeout, or within a millisecond
/// while DWARF stacks may need the live process (`live::driver`'s prompt reading).
pub fn wakeup_watermark(pages: usize) -> u32 {
    let bytes = pages.saturating_mul(crate::sys::page_size()) / 4;
    u32::try_from(bytes).unwrap_or(u32::MAX).max(1)
}

/// The attr configuration of one event in the ring buffer.
pub fn attr_config(
    cfg: &RecordConfig,
    ev: &ResolvedEvent,
    tracking: bool,
    watermark: u32,
) -> AttrConfig {
    let mut sample_type = PERF_SAMPLE_IDENTIFIER
        | PERF_SAMPLE_IP
        | PERF_SAMPLE_TID
        | PERF_SAMPLE_TIME
        | PERF_SAMPLE_CPU;
    if let Some(sampling) = &ev.sampling {
        return sampled_attr_config(cfg, ev, sampling, sample_type, tracking, watermark);
    }
    sample_type |= ev.sample_extra;
    if ev.spec.is_tracepoint() {
        sample_type |= PERF_SAMPLE_RAW;
    }
    if is_fault_event(&ev.spec) {
        // The fault address: which mapping grew. (PERF_SAMPLE_DATA_PAGE_SIZE would be
        // useless here: the kernel walks the page tables before the fault maps the page,
        // so a transparent huge page fault reports 4 KiB.)
        sample_type |= PERF_SAMPLE_ADDR;
    }
    let (mut regs_user, mut stack_user) = (0, 0);
    let mut exclude_callchain_user = false;
    match cfg.call_graph_of(&ev.spec) {
        CallGraph::None => {}
        CallGraph::Fp => sample_type |= PERF_SAMPLE_CALLCHAIN,
        CallGraph::Dwarf { stack_bytes } => {
            sample_type |= PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER;
            regs_user = match cfg.unwind {
                UnwindWhen::Online => user_regs_mask_for_unwind(),
                UnwindWhen::Offline => X86_REGS_PERF_ALL,
            };
            stack_user = stack_bytes;
            if !cfg.user_only {
                // The kernel part still comes from the kernel's own walk.
                sample_type |= PERF_SAMPLE_CALLCHAIN;
                exclude_callchain_user = true;
            }
        }
    }
    let period = if ev.counting {
        Period::Count(0)
    } else {
        period_of(cfg, &ev.spec)
    };
    if matches!(period, Period::Frequency(_)) {
        // Only a frequency makes the period vary. For a fixed period the bit would be wrong:
        // the kernel samples every software and tracepoint event that carries
        // PERF_SAMPLE_PERIOD, whatever sample_period says (perf_swevent_event).
        sample_type |= PERF_SAMPLE_PERIOD;
    }
    let inherit =
        matches!(cfg.target, Target::Pids(_) | Target::Command) && can_inherit(&ev.spec.kind);
    AttrConfig {
        type_: ev.type_,
        config: ev.config,
        config1: ev.config1,
        config2: ev.config2,
        period,
        sample_type,
        regs_user,
        stack_user,
        exclude_callchain_user,
        exclude_callchain_kernel: cfg.user_only,
        exclude_user: ev.spec.modifiers.exclude_user,
        exclude_kernel: ev.spec.modifiers.exclude_kernel,
        exclude_hv: ev.spec.modifiers.exclude_kernel,
        precise_ip: ev.spec.modifiers.precise,
        inherit,
        disabled: true,
        enable_on_exec: cfg.target == Target::Command,
        tracking,
        mmap_data: tracking,
        cgroup_records: cgroup_records(tracking, sample_type),
        use_clockid: true,
        sample_id_all: true,
        wakeup_watermark: watermark,
        // Read at the end: losses the kernel counted but had no room left to report.
        read_format: FORMAT_LOST,
        max_stack: ev.spec.terms.max_stack.unwrap_or(0),
    }
}

/// The attr configuration of an event with its own sampling (see `Sampling`).
fn sampled_attr_config(
    cfg: &RecordConfig,
    ev: &ResolvedEvent,
    s: &Sampling,
    mut sample_type: u64,
    tracking: bool,
    watermark: u32,
) -> AttrConfig {
    sample_type |= ev.sample_extra;
    if s.raw {
        sample_type |= PERF_SAMPLE_RAW;
    }
    let mut regs_user = s.regs;
    let mut stack_user = 0;
    let mut exclude_callchain_user = false;
    match s.call_graph {
        CallGraph::None => {}
        CallGraph::Fp => sample_type |= PERF_SAMPLE_CALLCHAIN,
        CallGraph::Dwarf { stack_bytes } => {
            regs_user |= user_regs_mask_for_unwind();
            stack_user = stack_bytes;
        }
    }
    if s.kernel_chain {
        sample_type |= PERF_SAMPLE_CALLCHAIN;
        exclude_callchain_user = s.call_graph != CallGraph::Fp;
    }
    if regs_user != 0 {
        sample_type |= PERF_SAMPLE_REGS_USER;
    }
    if stack_user != 0 {
        sample_type |= PERF_SAMPLE_STACK_USER;
    }
    AttrConfig {
        type_: ev.type_,
        config: ev.config,
        config1: ev.config1,
        config2: ev.config2,
        period: s.period,
        sample_type,
        regs_user,
        stack_user,
        exclude_callchain_user,
        exclude_callchain_kernel: !kernel_chain_wanted(cfg, s),
        exclude_user: ev.spec.modifiers.exclude_user,
        exclude_kernel: ev.spec.modifiers.exclude_kernel,
        exclude_hv: ev.spec.modifiers.exclude_kernel,
        precise_ip: ev.spec.modifiers.precise,
        inherit: matches!(cfg.target, Target::Pids(_) | Target::Command)
            && can_inherit(&ev.spec.kind),
        disabled: true,
        enable_on_exec: cfg.target == Target::Command,
        tracking,
        mmap_data: false,
        cgroup_records: cgroup_records(tracking, sample_type),
        use_clockid: true,
        sample_id_all: true,
        wakeup_watermark: watermark,
        read_format: FORMAT_LOST,
        max_stack: ev.spec.terms.max_stack.unwrap_or(0),
    }
}

/// Whether an event with its own sampling asks for the kernel part of its callchain: the
/// kernel chain it samples, or a frame-pointer chain in a recording that keeps kernel
/// frames. The allocation tools' probes in user mode ask for none (a uprobe's sample is
/// taken at the user's registers, so the kernel would write none; asking for it drew
/// the `kptr_restrict` note where kernel addresses are hidden).
fn kernel_chain_wanted(cfg: &RecordConfig, s: &Sampling) -> bool {
    s.kernel_chain || (s.call_graph == CallGraph::Fp && !cfg.user_only)
}

/// Whether the side-band event asks for CGROUP records: when the samples carry cgroup ids
/// (the agent's `sample_extra`), the ids of cgroups made while recording need their paths.
fn cgroup_records(tracking: bool, sample_type: u64) -> bool {
    tracking && sample_type & PERF_SAMPLE_CGROUP != 0
}

/// The kernel cannot inherit a uprobe PMU event: it would read the probe's path (config1)
/// from the new task's memory, and fork fails with EFAULT.
pub fn can_inherit(kind: &EventKind) -> bool {
    !matches!(kind, EventKind::Uprobe { .. })
}

pub fn event_class(ev: &ResolvedEvent) -> EventClass {
    if ev.probe.is_some() {
        return EventClass::Uprobe;
    }
    match ev.spec.kind {
        EventKind::Software { .. } => EventClass::Software,
        EventKind::Tracepoint { .. } => EventClass::Tracepoint,
        EventKind::Probe(_) => EventClass::Uprobe,
        EventKind::Hardware { .. } | EventKind::Raw { .. } => EventClass::Hardware,
        EventKind::Uprobe { .. } => EventClass::Uprobe,
    }
}

/// The pids to pass to perf_event_open: -1 (all), threads of the pids, or the tids.
pub fn open_targets(cfg: &RecordConfig, child: Option<i32>) -> Result<Vec<i32>> {
    target_tids(&cfg.target, child)
}

/// The pids to pass to perf_event_open for `target`.
pub fn target_tids(target: &Target, child: Option<i32>) -> Result<Vec<i32>> {
    Ok(match target {
        Target::SystemWide => vec![-1],
        Target::Command => vec![child.ok_or_else(|| anyhow!("no command to record"))?],
        Target::Pids(pids) => {
            let mut tids = Vec::new();
            for &pid in pids {
                let threads = procfs::threads(pid)
                    .map_err(|_| anyhow!("no such process: {pid} (given to -p)"))?;
                tids.extend(threads.into_iter().map(|t| t as i32));
            }
            tids
        }
        Target::Tids(tids) => {
            for &t in tids {
                if !procfs::exists(t) && procfs::tgid(t).is_err() {
                    bail!("no such thread: {t} (given to -t)");
                }
            }
            tids.iter().map(|&t| t as i32).collect()
        }
    })
}

/// Opens every (cpu, target, event), one ring per CPU, the other fds redirected to it.
pub fn open_all(
    cfg: &RecordConfig,
    mut events: Vec<ResolvedEvent>,
    tracefs: Option<Tracefs>,
    child: Option<i32>,
    facts: &SystemFacts,
) -> Result<Opened> {
    // In cgroup mode (-G) each target is a cgroup's directory, kept open until the events
    // are; of nested cgroups only the outermost, whose events take the others' samples too.
    let (cgroups, _) = crate::sys::cgroup::outermost(&cfg.cgroups);
    let cgroup_fds = crate::sys::cgroup::open(&cgroups)?;
    let (targets, flags) = if cgroup_fds.is_empty() {
        (open_targets(cfg, child)?, 0)
    } else {
        let fds = cgroup_fds.iter().map(|f| f.as_raw_fd()).collect();
        (fds, crate::abi::PERF_FLAG_PID_CGROUP)
    };
    // (The nested cgroups left out are said at start, by the command: `outermost`.)
    let notes = glob_notes(&events);
    if cfg.target == Target::SystemWide && !cfg.include_self {
        // As perf's --exclude-perf: the kernel drops memperf's own tracepoint hits (the
        // session leaves out its other samples).
        exclude_self(&mut events)?;
    }
    let mut rings = Rings::new(cfg, facts, &events, notes);
    rings.in_cgroups(flags, &targets, &cgroups);
    check_groups(&events)?;
    for &cpu in &cfg.cpus {
        rings.open_cpu(cpu, &targets, &mut events)?;
    }
    if !rings.any() {
        bail!("no event could be opened: every target thread exited before recording started");
    }
    Ok(rings.finish(events, tracefs))
}

/// The event whose attr asks for the side band (MMAP2, COMM, FORK records): the first one
/// that samples (a group's counting leader does not).
pub fn side_band_event(events: &[ResolvedEvent]) -> usize {
    events.iter().position(|e| !e.counting).unwrap_or(0)
}

/// A group's leader comes before its members and leads no group of another's.
pub fn check_groups(events: &[ResolvedEvent]) -> Result<()> {
    for (i, ev) in events.iter().enumerate() {
        let Some(l) = ev.leader else { continue };
        let leader = events.get(l).filter(|_| l < i).ok_or_else(|| {
            anyhow!(
                "event `{}` joins the group of event {l}, which is not opened before it",
                ev.spec.name
            )
        })?;
        if leader.leader.is_some() {
            bail!(
                "event `{}` joins the group of `{}`, which is itself in a group",
                ev.spec.name,
                leader.spec.name
            );
        }
    }
    Ok(())
}

/// As perf's --exclude-perf: a system-wide run's tracepoints get `common_pid != memperf`,
/// so the kernel drops memperf's own hits.
pub fn exclude_self(events: &mut [ResolvedEvent]) -> Result<()> {
    let me = std::process::id();
    for ev in events.iter_mut().filter(|e| e.spec.is_tracepoint()) {
        let own = match &ev.filter {
            Some(f) => format!("({}) && common_pid != {me}", f.to_string_lossy()),
            None => format!("common_pid != {me}"),
        };
        ev.filter = Some(std::ffi::CString::new(own).map_err(|_| anyhow!("a NUL in a filter"))?);
    }
    Ok(())
}

/// Sets the event's tracepoint filter on `fd`, if it has one; the kernel's EINVAL says
/// nothing of why, so the error says what the kernel accepts.
pub fn set_filter(fd: std::os::fd::BorrowedFd<'_>, ev: &ResolvedEvent) -> Result<()> {
    let Some(filter) = &ev.filter else {
        return Ok(());
    };
    if let Err(e) = crate::sys::open::ioc_set_filter(fd, filter) {
        // The kernel says EINVAL, or EPERM, for a filter it cannot parse.
        let code = match e.kind() {
            std::io::ErrorKind::InvalidInput => Some("EINVAL"),
            std::io::ErrorKind::PermissionDenied => Some("EPERM"),
            _ => None,
        };
        let why = match code {
            Some(code) => format!(
                "the kernel rejected it ({code}): compare fields with ==, !=, <, <=, >, >=, \
                 & (bits) or ~ (string glob), join with &&, || and parentheses; numbers \
                 in decimal or 0x hex, strings in double quotes"
            ),
            None => e.to_string(),
        };
        let sent = filter.to_string_lossy();
        let what = match &ev.spec.filter {
            // memperf added its own exclusion to the user's filter.
            Some(user) if *user != sent => format!(
                "`{user}` (sent as `{sent}`: system-wide, memperf leaves itself out; with --include-self it is sent as given)"
            ),
            _ => format!("`{sent}`"),
        };
        bail!(
            "failed to set the filter {what} on event `{}`: {why}",
            ev.spec.name
        );
    }
    Ok(())
}

pub fn exclude_kernel(ac: &mut AttrConfig) {
    ac.exclude_kernel = true;
    ac.exclude_hv = true;
    ac.exclude_callchain_kernel = true;
}

pub fn is_access(errno: i32) -> bool {
    errno == libc::EACCES || errno == libc::EPERM
}

/// Why the kernel refused to open `ev` on (`pid`, `cpu`) (-1: any), in a sentence.
pub fn explain_open(
    errno: i32,
    ev: &ResolvedEvent,
    pid: i32,
    cpu: i32,
    target: &Target,
    facts: &SystemFacts,
) -> String {
    let ctx = OpenContext {
        event: &ev.spec.name,
        class: event_class(ev),
        pid: (pid > 0).then_some(pid),
        cpu: (cpu >= 0).then_some(cpu),
        system_wide: *target == Target::SystemWide,
    };
    if errno == libc::EINVAL
        && let Some(site) = uprobe_site(ev)
    {
        // Beside another tool's probe of the instruction (`sys::uprobe_clash`), not an
        // attr this kernel does not know: the other events opened with the same.
        let inode = site.path.as_ref().and_then(|p| std::fs::metadata(p).ok());
        let logged = uprobe_clash::logged_mismatch(inode.map(|m| m.ino()), site.offset);
        return uprobe_clash::explain_open(&site, logged.as_ref());
    }
    explain_open_error(errno, &ctx, facts)
}

/// The uprobe `ev` is opened on, when it is one: a tracefs probe (its definition in
/// `uprobe_events`) or a uprobe PMU event (offset in `config2`, reference counter in
/// `config`'s upper half).
fn uprobe_site(ev: &ResolvedEvent) -> Option<uprobe_clash::Site> {
    match &ev.spec.kind {
        EventKind::Tracepoint { system, name } => {
            let tracefs = Tracefs::locate_or_mount().ok()?;
            let text = std::fs::read_to_string(tracefs.root().join("uprobe_events")).ok()?;
            let event = format!("{system}/{name}");
            text.lines()
                .filter_map(uprobe_clash::parse_definition)
                .find(|d| d.event == event)
                .map(|d| d.site)
        }
        EventKind::Uprobe {
            config, config2, ..
        } => Some(uprobe_clash::Site {
            path: match ev.probe.as_deref() {
                Some(super::probes::Placed::Pmu(p)) => Some(p.path()),
                _ => None,
            },
            offset: *config2,
            ref_ctr: Some(config >> 32).filter(|&r| r != 0),
        }),
        _ => None,
    }
}

/// The error of a failed open, with `explain_open`'s reason.
pub fn open_error(
    errno: i32,
    ev: &ResolvedEvent,
    pid: i32,
    cpu: i32,
    target: &Target,
    facts: &SystemFacts,
) -> anyhow::Error {
    anyhow!(
        "failed to open event `{}`: {}",
        ev.spec.name,
        explain_open(errno, ev, pid, cpu, target, facts)
    )
}

/// The attr written to the file for an event: after online unwinding, samples
/// carry a callchain instead of registers and stack bytes (the copy's size is kept). An event that sampled registers
/// of its own beside those unwinding needs (a probe's arguments, `Sampling::regs`) keeps
/// them all: they are what its samples mean; one whose stack copy is data
/// (`Sampling::keep_stack`) keeps it, as copied.
pub fn output_attr(
    opened: &perf_event_attr,
    online_unwind: bool,
    keep_stack: bool,
) -> perf_event_attr {
    let mut attr = *opened;
    if online_unwind && !keep_stack && attr.sample_type & PERF_SAMPLE_STACK_USER != 0 {
        attr.sample_type &= !PERF_SAMPLE_STACK_USER;
        if attr.sample_regs_user & !user_regs_mask_for_unwind() == 0 {
            attr.sample_type &= !PERF_SAMPLE_REGS_USER;
            attr.sample_regs_user = 0;
        }
        attr.sample_type |= PERF_SAMPLE_CALLCHAIN;
        // `sample_stack_user` stays, without the bit: it says that the callchain is an
        // unwind of a copy that size (`PerfDataFile::walked_by_fp`), even in a file whose
        // feature sections were never written. perf reads the bit alone.
        attr.set_exclude_callchain_user(0);
    }
    // The lost count is read by memperf and written as a LOST record; samples never carry it.
    attr.read_format = 0;
    attr
}

/// Checks the period or frequency against what the event needs.
pub fn check_period(cfg: &RecordConfig) -> Result<()> {
    if let Some(Period::Frequency(f)) = &cfg.period
        && let Ok(max) = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        && let Ok(max) = max.trim().parse::<u64>()
        && *f > max
    {
        bail!(
            "frequency {f} Hz is above kernel.perf_event_max_sample_rate ({max}); use -F {max} or less, or -c for a fixed period"
        );
    }
    Ok(())
}

mod resolve;
mod ring_size;
mod rings;
pub use ring_size::{default_mmap_pages, dwarf_at_every_hit, period_of};
use rings::Rings;
#[cfg(test)]
pub(crate) mod tests;

pub(crate) use resolve::glob_notes;
pub use resolve::{resolve_events, resolve_events_in};
