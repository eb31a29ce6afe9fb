//! Opening the events on each CPU and thread, and placing each fd on a ring: one ring per
//! CPU (and per event for software events that need their own, see [`Rings::new`]), every
//! other fd of that CPU redirected to it; an unprivileged user's events opened again
//! without kernel samples, as perf does.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use anyhow::{Context, Result, anyhow};
use perf_event_open_sys::bindings::{PERF_TYPE_SOFTWARE, perf_event_attr};
use rustc_hash::FxHashMap;

use crate::config::record::{RecordConfig, Target};
use crate::sys::attr::build_attr;
use crate::sys::clock::{PerfClock, SampleClock};
use crate::sys::diagnose::{SystemFacts, explain_mmap_error};
use crate::sys::open::{FeatureState, SysOpener, ioc_id, ioc_set_output, open_event_flags};
use crate::sys::ring::RingBuffer;
use crate::sys::tracefs::Tracefs;

use super::{
    FdSlot, Opened, Placement, ResolvedEvent, attr_config, default_mmap_pages, exclude_kernel,
    is_access, open_error, set_filter, side_band_event, wakeup_watermark,
};

/// The rings, fds and ids opened so far, and what every opening shares.
pub(super) struct Rings<'a> {
    cfg: &'a RecordConfig,
    facts: &'a SystemFacts,
    pages: usize,
    features: FeatureState,
    notes: Vec<String>,
    rings: Vec<RingBuffer>,
    ring_events: Vec<Option<usize>>,
    fds: Vec<Option<OwnedFd>>,
    ids: FxHashMap<u64, usize>,
    placements: Vec<Placement>,
    /// This CPU's ring of each group of events (an event's own index, or `SHARED`).
    ring_of: FxHashMap<usize, usize>,
    /// Kernel samples are left out: the user may not have them.
    kernel_excluded: bool,
    /// The kernel's default clock when it can be read, as perf's (see `sys::clock`).
    kernel_clock: Option<PerfClock>,
    /// How many software events there are (see [`Rings::own_ring`]).
    software: usize,
    /// The event whose attr asks for the side band.
    tracker: usize,
    /// `PERF_FLAG_PID_CGROUP` in cgroup mode (-G), where each target is a cgroup
    /// directory's fd; 0 otherwise.
    flags: u64,
    /// In cgroup mode, the cgroup each target fd is, for error messages.
    cgroup_of: FxHashMap<i32, String>,
}

/// The group of the events that share a CPU's ring.
const SHARED: usize = usize::MAX;

/// Where one fd goes: event `ev` on `cpu` for thread `pid`, into the ring of `group`.
#[derive(Clone, Copy)]
struct Slot {
    ev: usize,
    cpu: u32,
    pid: i32,
    group: usize,
}

impl<'a> Rings<'a> {
    /// Nothing opened yet; the ring size and the sample clock decided.
    pub(super) fn new(
        cfg: &'a RecordConfig,
        facts: &'a SystemFacts,
        events: &[ResolvedEvent],
        notes: Vec<String>,
    ) -> Rings<'a> {
        let pages = cfg
            .mmap_pages
            .unwrap_or_else(|| default_mmap_pages(cfg, facts));
        // (The kernel clock's dummy event asks for MMAP records, which makes the kernel
        // build one for every mmap on the system: a run without side band, `memperf stat`,
        // keeps CLOCK_MONOTONIC.)
        let kernel_clock = if cfg.side_band {
            PerfClock::open().ok()
        } else {
            None
        };
        Rings {
            cfg,
            facts,
            pages,
            features: FeatureState::default(),
            notes,
            rings: Vec::new(),
            ring_events: Vec::new(),
            fds: Vec::new(),
            ids: FxHashMap::default(),
            placements: Vec::new(),
            ring_of: FxHashMap::default(),
            kernel_excluded: false,
            kernel_clock,
            software: events
                .iter()
                .filter(|e| e.type_ == PERF_TYPE_SOFTWARE)
                .count(),
            tracker: side_band_event(events),
            flags: 0,
            cgroup_of: FxHashMap::default(),
        }
    }

    /// Cgroup mode (-G): `targets` are the fds of the directories of `cgroups`, in order.
    pub(super) fn in_cgroups(
        &mut self,
        flags: u64,
        targets: &[i32],
        cgroups: &[crate::sys::cgroup::Cgroup],
    ) {
        self.flags = flags;
        if flags & crate::abi::PERF_FLAG_PID_CGROUP == 0 {
            return;
        }
        self.cgroup_of = targets
            .iter()
            .zip(cgroups)
            .map(|(&fd, c)| (fd, c.path.clone()))
            .collect();
    }

    /// The pid a placement records: the thread's, or -1 (every thread) for a cgroup.
    fn placed_pid(&self, target: i32) -> i32 {
        if self.flags == 0 { target } else { -1 }
    }

    /// Software events that fire together can come back with each other's sample ids (see
    /// SessionStats::foreign_ids): with two or more, each gets rings of its own, so that the
    /// ring tells whose a sample is.
    fn own_ring(&self, e: &ResolvedEvent) -> bool {
        self.software >= 2 && e.type_ == PERF_TYPE_SOFTWARE
    }

    /// Opens every event on `cpu`, for each of `targets`.
    pub(super) fn open_cpu(
        &mut self,
        cpu: u32,
        targets: &[i32],
        events: &mut [ResolvedEvent],
    ) -> Result<()> {
        self.ring_of.clear();
        for &pid in targets {
            self.open_thread(cpu, pid, events)?;
        }
        Ok(())
    }

    /// Opens every event on `cpu` for thread `pid`, a group's members with their leader's
    /// fd as group_fd (a member whose leader's thread exited before it was opened is left
    /// out).
    fn open_thread(&mut self, cpu: u32, pid: i32, events: &mut [ResolvedEvent]) -> Result<()> {
        // This CPU's and thread's fd of each event that leads a group.
        let mut leaders: FxHashMap<usize, i32> = FxHashMap::default();
        for (i, ev) in events.iter_mut().enumerate() {
            let group_fd = match ev.leader {
                Some(l) => match leaders.get(&l) {
                    Some(&fd) => fd,
                    None => continue,
                },
                None => -1,
            };
            let group = if self.own_ring(ev) { i } else { SHARED };
            let slot = Slot {
                ev: i,
                cpu,
                pid,
                group,
            };
            let Some((fd, attr)) = self.open_event(ev, slot, group_fd)? else {
                continue;
            };
            set_filter(fd.as_fd(), ev)?;
            let id = ioc_id(fd.as_fd())
                .with_context(|| format!("failed to read the id of event `{}`", ev.spec.name))?;
            ev.ids.push(id);
            self.ids.insert(id, i);
            leaders.insert(i, fd.as_raw_fd());
            if ev.attr.is_none() {
                ev.attr = Some(attr);
            }
            let placed = Slot {
                pid: self.placed_pid(pid),
                ..slot
            };
            self.place(fd, &ev.spec.name, placed)?;
        }
        Ok(())
    }

    /// Opens `ev` where `slot` says, with the attr it was opened with (after the kernel's
    /// fallbacks); `None` when the `-p` thread exited after it was listed. A user refused
    /// kernel samples gets the event without them, and every event after it too.
    fn open_event(
        &mut self,
        ev: &ResolvedEvent,
        slot: Slot,
        group_fd: i32,
    ) -> Result<Option<(OwnedFd, perf_event_attr)>> {
        let (cfg, facts) = (self.cfg, self.facts);
        let (pid, cpu) = (slot.pid, slot.cpu as i32);
        let mut ac = attr_config(
            cfg,
            ev,
            slot.ev == self.tracker && cfg.side_band,
            wakeup_watermark(self.pages),
        );
        ac.use_clockid = self.kernel_clock.is_none();
        if self.kernel_excluded {
            exclude_kernel(&mut ac);
        }
        let mut attr = build_attr(&ac);
        let (flags, placed) = (self.flags, self.placed_pid(pid));
        let features = &mut self.features;
        let mut open = |attr: &mut perf_event_attr| {
            open_event_flags(&SysOpener, attr, (pid, cpu, group_fd), flags, features)
        };
        let fd = match open(&mut attr) {
            Ok(fd) => fd,
            Err(errno) if is_access(errno) && !ev.spec.is_tracepoint() && !ac.exclude_kernel => {
                // As perf does: an unprivileged user may still sample user space.
                exclude_kernel(&mut ac);
                attr = build_attr(&ac);
                let fd = open(&mut attr)
                    .map_err(|e| open_error(e, ev, placed, cpu, &cfg.target, facts))?;
                self.note_kernel_excluded();
                fd
            }
            Err(libc::ESRCH) if matches!(cfg.target, Target::Pids(_)) => {
                // A thread that exited after we listed it.
                return Ok(None);
            }
            Err(errno) => {
                let e = open_error(errno, ev, placed, cpu, &cfg.target, facts);
                return Err(match self.cgroup_of.get(&pid) {
                    Some(cg) => e.context(format!("in the cgroup `{cg}` (-G)")),
                    None => e,
                });
            }
        };
        Ok(Some((fd, attr)))
    }

    /// The first event opened without kernel samples says so, once.
    fn note_kernel_excluded(&mut self) {
        if self.kernel_excluded {
            return;
        }
        self.kernel_excluded = true;
        self.notes.push(format!(
            "kernel samples and kernel stacks left out: perf_event_paranoid is {} and memperf runs without CAP_PERFMON",
            self.facts
                .paranoid
                .map_or("unknown".to_string(), |p| p.to_string())
        ));
    }

    /// Redirects `fd` (of the event named `name`) to this CPU's ring of its group, or maps
    /// the group's ring on it when it is the first.
    fn place(&mut self, fd: OwnedFd, name: &str, slot: Slot) -> Result<()> {
        let Slot {
            ev,
            cpu,
            pid,
            group,
        } = slot;
        if let Some(&r) = self.ring_of.get(&group) {
            ioc_set_output(fd.as_fd(), self.rings[r].fd()).with_context(|| {
                format!("failed to redirect event `{name}` to the ring buffer of CPU {cpu}")
            })?;
            self.placements.push(Placement {
                ev,
                cpu,
                pid,
                ring: r,
                fd: FdSlot::Fd(self.fds.len()),
                enabled: true,
            });
            self.fds.push(Some(fd));
            return Ok(());
        }
        let pages = self.pages;
        let ring = RingBuffer::new(fd, pages).map_err(|e| {
            let errno = e.raw_os_error().unwrap_or(0);
            anyhow!(
                "failed to map a ring buffer of {pages} pages for CPU {cpu}: {}",
                explain_mmap_error(errno, pages, self.facts)
            )
        })?;
        self.placements.push(Placement {
            ev,
            cpu,
            pid,
            ring: self.rings.len(),
            fd: FdSlot::Ring(self.rings.len()),
            enabled: true,
        });
        self.rings.push(ring);
        self.ring_events.push((group != SHARED).then_some(ev));
        self.ring_of.insert(group, self.rings.len() - 1);
        Ok(())
    }

    /// Whether any ring was mapped (every target thread may have exited first).
    pub(super) fn any(&self) -> bool {
        !self.rings.is_empty()
    }

    /// Everything opened, with the notes of what the kernel lacked or hides.
    pub(super) fn finish(mut self, events: Vec<ResolvedEvent>, tracefs: Option<Tracefs>) -> Opened {
        // Kernel frames are named from /proc/kallsyms, which kptr_restrict may hide.
        let kernel_chains = events.iter().filter_map(|e| e.attr.as_ref()).any(|a| {
            a.sample_type & crate::abi::PERF_SAMPLE_CALLCHAIN != 0
                && a.exclude_callchain_kernel() == 0
                && a.exclude_kernel() == 0
        });
        if kernel_chains && let Some(note) = crate::sys::diagnose::kptr_restrict_note(self.facts) {
            self.notes.push(note);
        }
        let dropped = self.features.dropped();
        if !dropped.is_empty() {
            self.notes.push(format!(
                "this kernel lacks {}; recorded without it",
                dropped.join(", ")
            ));
        }
        let no_clockid = self.features.no_clockid;
        Opened {
            events,
            rings: self.rings,
            ring_events: self.ring_events,
            fds: self.fds,
            retired_lost: 0,
            ids: self.ids,
            clock_monotonic: self.kernel_clock.is_none() && !no_clockid,
            clock: match self.kernel_clock {
                Some(c) => SampleClock::Kernel(c),
                None if !no_clockid => SampleClock::Monotonic,
                None => SampleClock::Unread,
            },
            format_lost: !self.features.no_format_lost,
            notes: self.notes,
            tracefs,
            placements: self.placements,
        }
    }
}
