//! `--call-graph dwarf,auto`: the size of the user stack copy, learnt while recording.
//!
//! The kernel copies the whole requested size into the ring on every sample (up to the first
//! stack page the thread never touched), and that copy is most of a DWARF recording's cost.
//! The session measures how much of each copy the unwinds read (`session::StackDepth`).
//! After [`LEARN_SAMPLES`] stacks, an event is opened again with the size that held all but
//! one in [`TAIL`] of them, and headroom ([`fit`]); the deepest few (the dynamic loader's at
//! start-up) are finished from the live process (`unwind::live`). When [`GROW_CUTS`] stacks
//! of a window go past the copy it is opened again larger at once, up to the size it
//! started at (deeper stacks are finished from the live process). It never shrinks below a
//! size it had to grow to, and is opened again at most [`MAX_REOPENS`] times.
//!
//! Opening again: the new fds write into the same rings (`SET_OUTPUT`) and are enabled before
//! the old ones are disabled; a record both wrote meanwhile is handed on once, and every
//! record with the event's first id (`Session::add_ids`, `Session::arm_twins`). Where the
//! event is inherited (a command, `-p`), the new one is opened on every thread the old one
//! follows (the targets' process tree as /proc shows it, and every thread the FORK records
//! started), read again until no new thread appears, before the old ones are disabled (if
//! new threads still appear after four reads, the new fds are closed instead, their lost
//! counts kept, and the event keeps its size: the last threads found would have had the old
//! fds only). What is left: a thread started in the instant between the last read and the
//! disabling, whose parent had no new fd yet, is not sampled after it; and a ring's owner
//! that cannot be disabled goes on writing twins once they are no longer looked for. The
//! other replaced fds are closed (`Opened::retire`), their lost counts kept.

use std::os::fd::{AsFd, OwnedFd};

use anyhow::{Context, Result, anyhow, bail};
use perf_event_open_sys::bindings::{
    PERF_TYPE_HARDWARE, PERF_TYPE_HW_CACHE, PERF_TYPE_RAW, PERF_TYPE_SOFTWARE,
    PERF_TYPE_TRACEPOINT, perf_event_attr,
};

use super::open::{FdSlot, Opened, Placement, set_filter};
use crate::config::record::{MAX_STACK_BYTES, RecordConfig, Target};
use crate::procfs;
use crate::session::{Session, StackDepth};
use crate::sys::open::{
    FeatureState, Opener, SysOpener, ioc_disable, ioc_enable, ioc_id, ioc_set_output, open_event,
};

/// Stacks measured before an event's copy is made smaller.
pub(crate) const LEARN_SAMPLES: u64 = 2000;
/// The copy is sized for all but one stack in this many (the deepest few, such as the
/// dynamic loader's at start-up, are finished from the live process).
pub(crate) const TAIL: u64 = 200;
/// Stacks past the copy in one window that make it grow at once.
pub(crate) const GROW_CUTS: u64 = LEARN_SAMPLES / TAIL;
/// The smallest copy `auto` gives.
pub(crate) const MIN_BYTES: u32 = 512;
/// How often one event is opened again, at most.
pub(crate) const MAX_REOPENS: u32 = 8;

/// The copy size for stacks whose unwinds read `need` bytes of it: a quarter again (at least
/// 256 bytes more), in 256-byte steps, within [`MIN_BYTES`] and the kernel's largest. (Every
/// byte is copied on every sample: on the page-fault fixture a 1536-byte copy cost a
/// fifth more than a 1024-byte one.)
pub(crate) fn fit(need: u64) -> u32 {
    let want = need
        .saturating_add((need / 4).max(256))
        .div_ceil(256)
        .saturating_mul(256);
    u32::try_from(want)
        .unwrap_or(u32::MAX)
        .clamp(MIN_BYTES, MAX_STACK_BYTES)
}

/// What an event's copy size should become after `w`, the stacks unwound at `size`;
/// `floor` is the largest size it had to grow to, `max` the largest it may have.
pub(crate) fn decide(size: u32, (floor, max): (u32, u32), w: &StackDepth) -> Option<u32> {
    if w.cut >= GROW_CUTS {
        // `cut_need_max` is exact when the live process finished the stack, else a lower
        // bound: at least double.
        let grown = fit(w.cut_need_max).max(size.saturating_mul(2)).min(max);
        return (grown > size).then_some(grown);
    }
    if w.samples < LEARN_SAMPLES {
        return None;
    }
    let want = fit(w.need_within(TAIL)).max(floor);
    (want <= size / 4 * 3).then_some(want)
}

/// One event whose copy size is learnt.
struct Auto {
    ev: usize,
    size: u32,
    floor: u32,
    /// The size it started at: never more. A copy grown past it for a few deep stacks
    /// (a compiler's, system-wide) multiplies what every sample costs and overflows the
    /// rings; those are finished from the live process instead.
    max: u32,
    /// The stacks unwound at `size` since the last decision.
    window: StackDepth,
    reopens: u32,
    /// Each size the event had, from how many stacks on.
    history: Vec<(u32, u64)>,
    /// Stacks unwound so far.
    seen: u64,
    need_max: u64,
}

/// The `dwarf,auto` sizing of one recording.
pub(crate) struct StackSizer {
    autos: Vec<Auto>,
    /// What inherited events follow; `None`: open again where the first fds were
    /// (system-wide, per CPU; or the given threads).
    tree: Option<Tree>,
    generation: u32,
    /// Sizing is over: every target exited, or an event could not be opened again (why,
    /// for the summary).
    done: bool,
    stopped: Option<String>,
}

/// The threads an inherited event follows: the targets, their descendants that started
/// with or after the recording (a `-p` target's older children were never followed), and
/// every thread the FORK records started (`Session::follow_tasks`: the processes left to
/// init by a parent that exited too).
struct Tree {
    roots: Vec<u32>,
    born_after: Option<u64>,
}

/// Drain rounds after an event is opened again in which records are checked for twins: the
/// round that opened it and the next two, by which the records written before the old fds
/// were disabled are out of the rings (the drain holds back only its last milliseconds).
const TWIN_ROUNDS: u32 = 3;

impl StackSizer {
    /// The sizer for a recording with `--call-graph dwarf,auto`, else `None`. Events with
    /// their own stack size (`/stack-size=N/`), uprobe PMU events (their attr points at the
    /// probe's path) and events in a group keep theirs.
    pub(crate) fn new(
        cfg: &RecordConfig,
        opened: &Opened,
        child: Option<i32>,
        session: &mut Session,
    ) -> Option<Self> {
        // In cgroup mode (`-G`) events stay where they were opened: the copy keeps its
        // first size (deep stacks are finished from the live threads).
        if !cfg.stack_auto || !cfg.cgroups.is_empty() {
            return None;
        }
        let autos: Vec<Auto> = opened
            .events
            .iter()
            .enumerate()
            .filter(|&(i, e)| e.spec.terms.call_graph.is_none() && resizable(opened, i))
            .filter_map(|(ev, e)| {
                let size = e.attr.as_ref()?.sample_stack_user;
                (size > 0).then(|| Auto {
                    ev,
                    size,
                    floor: 0,
                    max: size,
                    window: StackDepth::default(),
                    reopens: 0,
                    history: vec![(size, 0)],
                    seen: 0,
                    need_max: 0,
                })
            })
            .collect();
        if autos.is_empty() {
            return None;
        }
        let roots = match &cfg.target {
            Target::Command => Some(vec![u32::try_from(child?).ok()?]),
            Target::Pids(p) => Some(p.clone()),
            Target::SystemWide | Target::Tids(_) => None,
        };
        let tree = roots.map(|roots| {
            let mut tids: Vec<u32> = opened
                .placements
                .iter()
                .filter_map(|p| u32::try_from(p.pid).ok())
                .collect();
            tids.extend(&roots);
            session.follow_tasks(&tids);
            Tree {
                roots,
                born_after: procfs::start_ticks(std::process::id()).ok(),
            }
        });
        Some(StackSizer {
            autos,
            tree,
            generation: 0,
            done: false,
            stopped: None,
        })
    }

    /// After a drain round: takes what the unwinds needed and opens events again where the
    /// copy size should change. A failure to open stops sizing (the events stay as they
    /// are) and is said in the summary.
    pub(crate) fn round(&mut self, opened: &mut Opened, session: &mut Session) {
        session.end_round();
        if self.done {
            return;
        }
        self.take_depths(session);
        for i in 0..self.autos.len() {
            let a = &mut self.autos[i];
            let decided = decide(a.size, (a.floor, a.max), &a.window);
            if a.window.samples >= LEARN_SAMPLES {
                a.window = StackDepth::default();
            }
            let Some(new) = decided else { continue };
            if a.reopens >= MAX_REOPENS {
                continue;
            }
            let ev = a.ev;
            let to = Reopen {
                ev,
                stack: new,
                tree: self.tree.as_ref(),
                opener: &SysOpener,
            };
            match reopen(opened, session, &to, &mut self.generation) {
                Ok(false) => {
                    // Every target thread has exited: the run is ending.
                    self.done = true;
                    return;
                }
                Ok(true) => {
                    let a = &mut self.autos[i];
                    if new > a.size {
                        a.floor = new;
                    }
                    a.size = new;
                    a.window = StackDepth::default();
                    a.reopens += 1;
                    a.history.push((new, a.seen));
                }
                Err(e) => {
                    let name = &opened.events[ev].spec.name;
                    self.stopped = Some(format!(
                        "dwarf,auto: could not open `{name}` again with a {new}-byte stack copy \
                         ({e:#}); it kept its size"
                    ));
                    self.done = true;
                    return;
                }
            }
        }
    }

    /// Adds what the unwinds of the last drain needed to each event's counts (those of a
    /// copy size no longer in use are only counted: they would mislead the next decision).
    /// The driver calls it once more after the final drain, so that the summary counts
    /// every stack.
    pub(crate) fn take_depths(&mut self, session: &mut Session) {
        for a in &mut self.autos {
            let d = session.take_depth(a.ev);
            a.seen += d.samples + d.other_sizes;
            if d.samples == 0 || d.size != u64::from(a.size) {
                continue;
            }
            a.window.merge(&d);
            a.need_max = a.need_max.max(d.need_max).max(d.cut_need_max);
        }
    }

    /// The summary's lines: each event's sizes, and why sizing stopped.
    pub(crate) fn notes(&self, opened: &Opened, session: &Session) -> Vec<String> {
        // An event that never had a stack (an allocator function the program did not call)
        // has nothing to say.
        let spoke: Vec<(&str, &Auto)> = self
            .autos
            .iter()
            .filter(|a| a.seen > 0)
            .map(|a| {
                let name = opened
                    .events
                    .get(a.ev)
                    .map_or("?", |e| e.spec.name.as_str());
                (name, a)
            })
            .collect();
        let mut notes = size_notes(&spoke);
        let twins = session.stats().twins;
        if twins > 0 {
            notes.push(format!(
                "dwarf,auto: {twins} records written by an event's old and new fds while both \
                 were enabled were kept once"
            ));
        }
        notes.extend(self.stopped.clone());
        notes
    }
}

/// One line per event sized again, and one for the events that kept the same first size
/// (an allocation tool's malloc, calloc, realloc and mmap probes: else four lines saying
/// the same).
fn size_notes(spoke: &[(&str, &Auto)]) -> Vec<String> {
    let mut lines: Vec<Vec<(&str, &Auto)>> = Vec::new();
    for &(name, a) in spoke {
        let kept_alike = |l: &&mut Vec<(&str, &Auto)>| {
            let first = l[0].1;
            a.history.len() == 1 && first.history.len() == 1 && first.size == a.size
        };
        match lines.iter_mut().find(kept_alike) {
            Some(line) => line.push((name, a)),
            None => lines.push(vec![(name, a)]),
        }
    }
    lines.iter().map(|line| size_note(line)).collect()
}

/// The sizes the events of `line` had (all the same when there are several), the stacks
/// they unwound and the deepest one's need.
fn size_note(line: &[(&str, &Auto)]) -> String {
    let names: Vec<&str> = line.iter().map(|&(name, _)| name).collect();
    let sizes: Vec<String> = line[0]
        .1
        .history
        .iter()
        .map(|&(size, from)| match from {
            0 => format!("{size} bytes"),
            n => format!("{size} from stack {n} on"),
        })
        .collect();
    format!(
        "dwarf,auto: {} copied {} ({} stacks; the deepest needed {} bytes)",
        event_list(&names),
        sizes.join(", then "),
        line.iter().map(|(_, a)| a.seen).sum::<u64>(),
        line.iter().map(|(_, a)| a.need_max).max().unwrap_or(0)
    )
}

/// Event names for a summary line; several of one tracepoint group go by their own names,
/// and so does one of memperf's own probe groups (the allocation tools' probes are all
/// `memperf_PID:`, which says nothing, and the user never named).
fn event_list(names: &[&str]) -> String {
    fn group(name: &str) -> Option<&str> {
        name.split_once(':').map(|(g, _)| g)
    }
    fn memperfs(group: &str) -> bool {
        group
            .strip_prefix("memperf_")
            .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
    }
    let shared = names.len() > 1
        && group(names[0]).is_some()
        && names.iter().all(|n| group(n) == group(names[0]));
    names
        .iter()
        .map(|n| match n.split_once(':') {
            Some((g, own)) if shared || memperfs(g) => format!("`{own}`"),
            _ => format!("`{n}`"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether event `i` may be opened again alone: its attr holds no pointer into memperf's
/// memory (uprobe PMU events hold their path), and it neither leads nor joins a group (a
/// member opened again alone would leave its group; a leader disabled stops its members).
fn resizable(opened: &Opened, i: usize) -> bool {
    let e = &opened.events[i];
    let grouped =
        e.leader.is_some() || e.counting || opened.events.iter().any(|o| o.leader == Some(i));
    !grouped
        && matches!(
            e.type_,
            PERF_TYPE_SOFTWARE
                | PERF_TYPE_TRACEPOINT
                | PERF_TYPE_HARDWARE
                | PERF_TYPE_HW_CACHE
                | PERF_TYPE_RAW
        )
}

/// Fds opened for a new copy size, not yet part of `Opened`.
#[derive(Default)]
struct Fresh {
    fds: Vec<(OwnedFd, Placement)>,
    ids: Vec<u64>,
}

/// What [`reopen`] opens: event `ev` with a `stack`-byte copy, where `tree` says, through
/// `opener` (the syscall; the tests' inject errors).
struct Reopen<'a> {
    ev: usize,
    stack: u32,
    tree: Option<&'a Tree>,
    opener: &'a dyn Opener,
}

/// The threads to open an inherited event on now.
fn tree_tids(tree: &Tree, session: &Session) -> Vec<i32> {
    let mut tids = procfs::tree_threads(&tree.roots, tree.born_after);
    if let Some(f) = session.followed_tasks() {
        tids.extend(f.iter().copied().filter(|&t| procfs::exists(t)));
    }
    tids.sort_unstable();
    tids.dedup();
    tids.into_iter()
        .filter_map(|t| i32::try_from(t).ok())
        .collect()
}

/// Opens event `to.ev` again with a `to.stack`-byte copy in the rings it writes to, enables
/// it, then disables its fds in use until now. The session knows the new ids before any is
/// enabled and looks for twins in the next rounds. Where the event is inherited, threads
/// that appear while the new fds are placed get fds of their own (another generation: a
/// thread that also inherited its parent's new fd writes twins of those) until no more
/// appear, before the old fds are disabled. Returns false when no target thread is left;
/// on an error, the new fds are disabled and closed and the old ones stay in use.
fn reopen(
    opened: &mut Opened,
    session: &mut Session,
    to: &Reopen<'_>,
    generation: &mut u32,
) -> Result<bool> {
    let ev = to.ev;
    let mut attr = opened.events[ev]
        .attr
        .ok_or_else(|| anyhow!("the event was never opened"))?;
    attr.sample_stack_user = to.stack;
    attr.set_disabled(1);
    attr.set_enable_on_exec(0);
    let old: Vec<usize> = (0..opened.placements.len())
        .filter(|&i| opened.placements[i].ev == ev && opened.placements[i].enabled)
        .collect();
    let mut rings: Vec<(u32, usize)> = old
        .iter()
        .map(|&i| (opened.placements[i].cpu, opened.placements[i].ring))
        .collect();
    rings.sort_unstable();
    rings.dedup_by_key(|r| r.0);
    let mut covered: Vec<i32> = match to.tree {
        Some(tree) => tree_tids(tree, session),
        None => old.iter().map(|&i| opened.placements[i].pid).collect(),
    };
    covered.sort_unstable();
    covered.dedup();
    session.arm_twins(TWIN_ROUNDS);
    let mut fresh = Fresh::default();
    let mut pids = covered.clone();
    // At most a few sweeps. A program that starts threads faster than they can be opened
    // on is left as it was: a thread the last sweep found had only the old fds, and
    // disabling them would stop its samples unseen (an allocation tracer would miss its
    // calls); the new fds are disabled and closed instead.
    let mut settled = to.tree.is_none();
    for _ in 0..4 {
        *generation += 1;
        let n = fresh.fds.len();
        let placed = open_on(opened, to.opener, (ev, &attr), (&rings, &pids), &mut fresh);
        if let Err(e) = placed.and_then(|()| {
            let ids: Vec<u64> = fresh.ids[n..].to_vec();
            session.add_ids(ev, &ids, *generation);
            fresh.fds[n..]
                .iter()
                .try_for_each(|(fd, _)| ioc_enable(fd.as_fd()))
                .context("failed to enable a new fd")
        }) {
            give_up(opened, fresh);
            return Err(e);
        }
        let Some(tree) = to.tree else { break };
        pids = tree_tids(tree, session)
            .into_iter()
            .filter(|t| covered.binary_search(t).is_err())
            .collect();
        if pids.is_empty() {
            settled = true;
            break;
        }
        covered.extend(&pids);
        covered.sort_unstable();
    }
    if fresh.fds.is_empty() {
        return Ok(false);
    }
    if !settled {
        give_up(opened, fresh);
        bail!("threads kept starting while it was opened on them");
    }
    if let Some(hold) = overlap_for_tests() {
        std::thread::sleep(hold);
    }
    for &i in &old {
        if let Some(fd) = opened.fd_of(opened.placements[i].fd) {
            // A fd that cannot be disabled is closed all the same (which stops it), unless
            // it owns a ring or its lost count cannot be read: that one goes on writing the
            // twins of the new fd's records, kept once while they are looked for, and after
            // that counted twice; nothing is lost.
            let _ = ioc_disable(fd);
        }
        opened.placements[i].enabled = false;
        // Its records stay in the ring; its lost count is kept. Without this, every
        // generation's fds (threads × CPUs) stayed open to the end of the run.
        opened.retire(i);
    }
    commit(opened, fresh);
    Ok(true)
}

/// Disables and closes the fds of a re-open given up, their lost counts kept as those of
/// the fds a re-open replaces (`Opened::retire`): each sweep's fds were enabled, writing
/// into the rings, until the next sweep failed or found threads still starting.
fn give_up(opened: &mut Opened, mut fresh: Fresh) {
    for (fd, p) in &mut fresh.fds {
        let _ = ioc_disable(fd.as_fd());
        p.enabled = false;
    }
    let first = opened.placements.len();
    commit(opened, fresh);
    for i in first..opened.placements.len() {
        opened.retire(i);
    }
}

/// How long the old and new fds stay enabled together: a moment (the ioctls between), or
/// as long as `MEMPERF_RESIZE_OVERLAP_MS` says, so that the tests see records written by both
/// (tests/stacks.rs).
fn overlap_for_tests() -> Option<std::time::Duration> {
    let ms: u64 = std::env::var("MEMPERF_RESIZE_OVERLAP_MS")
        .ok()?
        .parse()
        .ok()?;
    Some(std::time::Duration::from_millis(ms.min(1000)))
}

/// Keeps the fresh fds in `opened` (the driver reads their losses and closes them at the
/// end).
fn commit(opened: &mut Opened, fresh: Fresh) {
    for (fd, mut p) in fresh.fds {
        p.fd = FdSlot::Fd(opened.fds.len());
        opened.fds.push(Some(fd));
        opened.placements.push(p);
    }
}

/// Opens `attr` for event `ev` on each (CPU, ring) × pid, redirected to that ring.
fn open_on(
    opened: &Opened,
    opener: &dyn Opener,
    (ev, attr): (usize, &perf_event_attr),
    (rings, pids): (&[(u32, usize)], &[i32]),
    fresh: &mut Fresh,
) -> Result<()> {
    let event = &opened.events[ev];
    for &(cpu, ring) in rings {
        let ring_fd = opened
            .rings
            .get(ring)
            .map(|r| r.fd())
            .context("no such ring")?;
        for &pid in pids {
            let mut a = *attr;
            let fd = match open_event(
                opener,
                &mut a,
                pid,
                cpu as i32,
                &mut FeatureState::default(),
            ) {
                Ok(fd) => fd,
                // A thread that exited since the tree was read.
                Err(libc::ESRCH) => continue,
                Err(errno) => bail!(
                    "perf_event_open on CPU {cpu}, pid {pid}: {}{}",
                    std::io::Error::from_raw_os_error(errno),
                    if errno == libc::EMFILE {
                        " (each thread of the target needs a fd per CPU: raise `ulimit -n`)"
                    } else {
                        ""
                    }
                ),
            };
            // The samples of the new fd are read as the event's: a feature the kernel
            // refused now (the ladder drops it) would change their layout.
            if a.sample_type != attr.sample_type {
                bail!(
                    "perf_event_open on CPU {cpu}, pid {pid}: the kernel took the event only \
                     with other sample fields ({:#x}, not {:#x})",
                    a.sample_type,
                    attr.sample_type
                );
            }
            set_filter(fd.as_fd(), event)?;
            let id = ioc_id(fd.as_fd()).context("failed to read the new fd's id")?;
            ioc_set_output(fd.as_fd(), ring_fd).context("failed to redirect the new fd")?;
            fresh.ids.push(id);
            fresh.fds.push((
                fd,
                Placement {
                    ev,
                    cpu,
                    pid,
                    ring,
                    fd: FdSlot::Fd(usize::MAX),
                    enabled: true,
                },
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `samples` stacks needing `need` bytes, `deep` more needing `deep_need`, and `cut`
    /// of those past the copy.
    fn window(samples: u64, need: u64, (deep, deep_need): (u64, u64), cut: u64) -> StackDepth {
        let mut w = StackDepth {
            size: 8192,
            ..StackDepth::default()
        };
        for _ in 0..samples {
            w.add(need, false);
        }
        for i in 0..deep {
            w.add(deep_need, i < cut);
        }
        w
    }

    /// Page faults of this thread on every CPU, sampled with a `stack`-byte copy into rings
    /// of `pages` pages, and a session that knows their ids; `None` where the kernel cannot
    /// open perf events or lacks PERF_FORMAT_LOST (6.0+).
    fn own_faults(stack: u32, pages: usize) -> Option<(Opened, Session)> {
        use crate::config::record::CallGraph;
        use crate::live::open::{open_all, resolve_events, tests::this_thread};
        if !crate::sys::testutil::require_perf("software events opened again") {
            return None;
        }
        let specs = crate::events::parse_event_list("page-faults").unwrap();
        let (events, tracefs) = resolve_events(&specs).unwrap();
        let mut cfg = this_thread(specs, CallGraph::Dwarf { stack_bytes: stack }, pages);
        cfg.stack_auto = true;
        let facts = crate::sys::diagnose::SystemFacts::read();
        let opened = open_all(&cfg, events, tracefs, None, &facts).unwrap();
        if !opened.format_lost {
            eprintln!("skipping: this kernel has no PERF_FORMAT_LOST (6.0+)");
            return None;
        }
        assert_eq!((opened.rings.len(), opened.fds.len()), (cfg.cpus.len(), 0));
        for ring in &opened.rings {
            ioc_enable(ring.fd()).unwrap();
        }
        let infos = vec![crate::records::ParseInfo::default()];
        let session = Session::new(infos, opened.ids.clone(), Default::default());
        Some((opened, session))
    }

    /// A stack copy and a ring (in pages) smaller than one sample with that copy.
    fn copy_past_its_ring() -> (u32, usize) {
        if crate::sys::page_size() <= 4096 {
            (8192, 2)
        } else {
            (MAX_STACK_BYTES, 1)
        }
    }

    /// An event opened again for real: the fds it replaced are closed, generation after
    /// generation, with the samples they dropped still counted, and the new fds sample.
    /// The first generation owns the rings, and stays.
    #[test]
    fn the_fds_an_event_replaced_are_closed_with_their_losses_kept() {
        use crate::live::open::tests::samples_in;
        use crate::sys::open::read_lost;
        use crate::sys::testutil::touch_fresh_pages;
        // A ring smaller than one sample of the first two generations: theirs are lost.
        let (big, pages) = copy_past_its_ring();
        let Some((mut opened, mut session)) = own_faults(big, pages) else {
            return;
        };
        let ncpu = opened.rings.len();
        let mut generation = 0;
        let mut again = |opened: &mut Opened, stack| {
            let to = Reopen {
                ev: 0,
                stack,
                tree: None,
                opener: &SysOpener,
            };
            assert!(reopen(opened, &mut session, &to, &mut generation).unwrap());
        };
        let open_now = |o: &Opened| o.fds.iter().flatten().count();
        // A second generation as large as the first: its 16 samples do not fit either.
        again(&mut opened, big);
        assert_eq!(open_now(&opened), ncpu);
        touch_fresh_pages(16);
        assert_eq!(samples_in(&mut opened, None), 0);
        again(&mut opened, 512);
        assert_eq!(
            open_now(&opened),
            ncpu,
            "the second generation's fds are closed"
        );
        assert!(opened.retired_lost >= 16, "{}", opened.retired_lost);
        assert_eq!(opened.placements.len(), 3 * ncpu);
        for p in &opened.placements {
            // The rings' owners stay open, disabled; the second generation is closed.
            let open = matches!(p.fd, FdSlot::Ring(_)) || p.enabled;
            assert_eq!(opened.fd_of(p.fd).is_some(), open, "{p:?}");
        }
        // The third generation samples, and with a 512-byte copy its samples fit (the rings
        // emptied first, as the work above faults too).
        let retired = opened.retired_lost;
        let lost_now = |opened: &Opened| -> u64 {
            opened
                .placements
                .iter()
                .filter(|p| p.enabled)
                .map(|p| read_lost(opened.fd_of(p.fd).unwrap()).unwrap())
                .sum()
        };
        samples_in(&mut opened, None);
        let before = lost_now(&opened);
        touch_fresh_pages(4);
        assert_eq!(lost_now(&opened), before);
        assert_eq!(opened.retired_lost, retired);
        assert!(samples_in(&mut opened, None) >= 4);
    }

    /// A re-open given up after a sweep (threads kept starting): its fds sampled into the
    /// rings meanwhile, and what they lost is kept when they are closed.
    #[test]
    fn a_given_up_reopens_fds_are_closed_with_their_losses_kept() {
        use crate::sys::testutil::touch_fresh_pages;
        // A ring smaller than one sample: the new fds' samples are lost.
        let (big, pages) = copy_past_its_ring();
        let Some((mut opened, _session)) = own_faults(big, pages) else {
            return;
        };
        let attr = opened.events[0].attr.unwrap();
        let rings: Vec<(u32, usize)> = opened.placements.iter().map(|p| (p.cpu, p.ring)).collect();
        let pids = [opened.placements[0].pid];
        let mut fresh = Fresh::default();
        open_on(&opened, &SysOpener, (0, &attr), (&rings, &pids), &mut fresh).unwrap();
        for (fd, _) in &fresh.fds {
            ioc_enable(fd.as_fd()).unwrap();
        }
        touch_fresh_pages(16);
        give_up(&mut opened, fresh);
        assert!(opened.retired_lost >= 16, "{}", opened.retired_lost);
        assert!(opened.fds.iter().all(Option::is_none));
        assert_eq!(opened.placements.len(), 2 * rings.len());
    }

    /// The syscall, until `left` opens have succeeded; then `errno`.
    struct FailAfter {
        left: std::cell::Cell<usize>,
        errno: i32,
    }

    impl Opener for FailAfter {
        fn open(
            &self,
            attr: &perf_event_attr,
            pid: i32,
            cpu: i32,
            group_fd: i32,
            flags: u64,
        ) -> std::result::Result<OwnedFd, i32> {
            match self.left.get() {
                0 => Err(self.errno),
                n => {
                    self.left.set(n - 1);
                    SysOpener.open(attr, pid, cpu, group_fd, flags)
                }
            }
        }
    }

    /// An open that fails midway (the fd limit, here on the last CPU) leaves the event as it
    /// was: the fds opened before the failure are closed without having been enabled, the
    /// old ones go on sampling with their copy, and the error says what to raise.
    #[test]
    fn an_event_that_cannot_be_opened_again_keeps_its_fds() {
        use crate::live::open::tests::samples_in;
        use crate::sys::testutil::touch_fresh_pages;
        let Some((mut opened, mut session)) = own_faults(8192, 16) else {
            return;
        };
        let placements = opened.placements.clone();
        let fail = FailAfter {
            left: std::cell::Cell::new(opened.rings.len() - 1),
            errno: libc::EMFILE,
        };
        let to = Reopen {
            ev: 0,
            stack: 512,
            tree: None,
            opener: &fail,
        };
        let mut generation = 0;
        let err = reopen(&mut opened, &mut session, &to, &mut generation).unwrap_err();
        let err = format!("{err:#}");
        assert!(err.contains("raise `ulimit -n`"), "{err}");
        assert_eq!(
            fail.left.get(),
            0,
            "the failure came after an open that succeeded"
        );
        // The new fds, never enabled, are kept as placements disabled and closed.
        assert_eq!(opened.placements[..placements.len()], placements);
        assert!(
            opened.placements[placements.len()..]
                .iter()
                .all(|p| !p.enabled)
        );
        assert!(opened.fds.iter().all(Option::is_none));
        assert_eq!(opened.events[0].attr.unwrap().sample_stack_user, 8192);
        // The old fds still sample (a 16-page ring holds 7 of their 8 KiB copies: emptied
        // first, as the faults of the work above may have filled it).
        samples_in(&mut opened, None);
        touch_fresh_pages(4);
        assert!(samples_in(&mut opened, None) >= 4);
    }

    /// An event that had the sizes of `history` and unwound `seen` stacks, the deepest of
    /// which needed `need_max` bytes.
    fn sized(history: &[(u32, u64)], seen: u64, need_max: u64) -> Auto {
        Auto {
            ev: 0,
            size: history.last().unwrap().0,
            floor: 0,
            max: 8192,
            window: StackDepth::default(),
            reopens: 0,
            history: history.to_vec(),
            seen,
            need_max,
        }
    }

    #[test]
    fn the_events_that_kept_their_size_share_one_note() {
        let kept = [(8192, 0)];
        let (malloc, calloc) = (sized(&kept, 420_987, 12_808), sized(&kept, 189, 22_264));
        let realloc = sized(&[(8192, 0), (1024, 2000)], 4000, 900);
        let (mmap, small) = (sized(&kept, 512, 800), sized(&[(4096, 0)], 5, 100));
        let spoke = [
            ("memperf_1:malloc", &malloc),
            ("memperf_1:calloc", &calloc),
            ("memperf_1:realloc", &realloc),
            ("memperf_1:mmap", &mmap),
            ("memperf_1:munmap", &small),
        ];
        assert_eq!(
            size_notes(&spoke),
            [
                "dwarf,auto: `malloc`, `calloc`, `mmap` copied 8192 bytes (421688 stacks; \
                 the deepest needed 22264 bytes)",
                "dwarf,auto: `realloc` copied 8192 bytes, then 1024 from stack 2000 on (4000 \
                 stacks; the deepest needed 900 bytes)",
                "dwarf,auto: `munmap` copied 4096 bytes (5 stacks; the deepest needed 100 \
                 bytes)",
            ]
        );
        // Events of different groups keep their whole names.
        let spoke = [("page-faults", &malloc), ("kmem:kmalloc", &mmap)];
        assert_eq!(
            size_notes(&spoke),
            [
                "dwarf,auto: `page-faults`, `kmem:kmalloc` copied 8192 bytes (421499 stacks; \
              the deepest needed 12808 bytes)"
            ]
        );
    }

    #[test]
    fn fit_adds_headroom_in_256_byte_steps_within_the_kernels_bounds() {
        assert_eq!(fit(0), 512);
        assert_eq!(fit(600), 1024);
        assert_eq!(fit(1024), 1280);
        assert_eq!(fit(1025), 1536);
        assert_eq!(fit(10_000), 12_544);
        assert_eq!(fit(60_000), MAX_STACK_BYTES);
        assert_eq!(fit(u64::MAX), MAX_STACK_BYTES);
    }

    #[test]
    fn shrinks_only_after_enough_stacks_and_by_a_quarter_at_least() {
        let m = 8192;
        assert_eq!(
            decide(8192, (0, m), &window(LEARN_SAMPLES - 1, 600, (0, 0), 0)),
            None
        );
        assert_eq!(
            decide(8192, (0, m), &window(LEARN_SAMPLES, 600, (0, 0), 0)),
            Some(1024)
        );
        // 6400 is not a quarter below 8192: not worth opening again; 6144 is.
        assert_eq!(
            decide(8192, (0, m), &window(LEARN_SAMPLES, 5000, (0, 0), 0)),
            None
        );
        assert_eq!(
            decide(8192, (0, m), &window(LEARN_SAMPLES, 4900, (0, 0), 0)),
            Some(6144)
        );
        // Never below a size the event had to grow to.
        assert_eq!(
            decide(8192, (4096, m), &window(LEARN_SAMPLES, 600, (0, 0), 0)),
            Some(4096)
        );
        assert_eq!(
            decide(4096, (4096, m), &window(LEARN_SAMPLES, 600, (0, 0), 0)),
            None
        );
    }

    #[test]
    fn a_few_deep_stacks_do_not_hold_the_copy_large() {
        // The loader's 5.6 KiB stacks at start-up, 9 of 2000: sized for the others.
        let w = window(LEARN_SAMPLES - 9, 600, (9, 5608), 0);
        assert_eq!(w.need_within(TAIL), 768);
        assert_eq!(decide(8192, (0, 8192), &w), Some(1024));
        // One stack in a hundred is not a few.
        let w = window(LEARN_SAMPLES - 20, 600, (20, 5608), 0);
        assert_eq!(w.need_within(TAIL), 5608);
        assert_eq!(decide(8192, (0, 8192), &w), None);
    }

    #[test]
    fn grows_at_once_when_stacks_go_past_the_copy_up_to_where_it_started() {
        let m = MAX_STACK_BYTES;
        // GROW_CUTS cut stacks are enough, whatever the count; fewer are finished live.
        let w = window(1, 1000, (GROW_CUTS, 1600), GROW_CUTS);
        assert_eq!(decide(1536, (0, m), &w), Some(3072));
        let w = window(1, 1000, (GROW_CUTS, 1600), GROW_CUTS - 1);
        assert_eq!(decide(1536, (0, m), &w), None);
        // An exact need beyond double is met with headroom, within the largest size.
        let w = window(5, 1000, (GROW_CUTS, 9000), GROW_CUTS);
        assert_eq!(decide(1536, (0, m), &w), Some(11_264));
        assert_eq!(decide(1536, (0, 8192), &w), Some(8192));
        assert_eq!(decide(8192, (0, 8192), &w), None);
        let w = window(5, 1000, (GROW_CUTS, 41_000), GROW_CUTS);
        assert_eq!(decide(40_000, (0, m), &w), Some(m));
    }
}
