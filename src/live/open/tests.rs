#![allow(clippy::unwrap_used)]

use super::*;
use crate::abi::PERF_SAMPLE_REGS_USER;

fn dwarf_attr(regs: u64) -> perf_event_attr {
    let mut attr = perf_event_attr {
        sample_type: PERF_SAMPLE_IP | PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER,
        sample_regs_user: regs,
        sample_stack_user: 8192,
        ..perf_event_attr::default()
    };
    attr.set_exclude_callchain_user(1);
    attr
}

#[test]
fn unwound_samples_are_written_with_a_callchain_and_without_the_stack() {
    let out = output_attr(&dwarf_attr(user_regs_mask_for_unwind()), true, false);
    assert_eq!(out.sample_type, PERF_SAMPLE_IP | PERF_SAMPLE_CALLCHAIN);
    // The copy's size stays, without the bit: the callchain is an unwind, not a kernel walk.
    assert_eq!((out.sample_regs_user, out.sample_stack_user), (0, 8192));
    assert_eq!(out.exclude_callchain_user(), 0);
    // Offline unwinding keeps what was copied.
    let kept = output_attr(&dwarf_attr(user_regs_mask_for_unwind()), false, false);
    assert_eq!(kept.sample_type, dwarf_attr(0).sample_type);
    // A copy that is data (posix_memalign's return) is written as copied.
    let data = output_attr(&dwarf_attr(user_regs_mask_for_unwind()), true, true);
    assert_eq!(data.sample_type, dwarf_attr(0).sample_type);
    assert_eq!(data.sample_stack_user, 8192);
}

#[cfg(target_arch = "x86_64")]
#[test]
fn a_probe_keeps_its_argument_registers_after_online_unwinding() {
    use perf_event_open_sys::bindings as b;
    // memperf leak's entry probes: the arguments (DI, SI) beside unwinding's registers.
    let regs = user_regs_mask_for_unwind() | 1 << b::PERF_REG_X86_DI | 1 << b::PERF_REG_X86_SI;
    let out = output_attr(&dwarf_attr(regs), true, false);
    assert_eq!(
        out.sample_type,
        PERF_SAMPLE_IP | PERF_SAMPLE_REGS_USER | PERF_SAMPLE_CALLCHAIN
    );
    // The whole mask: the sampled values are written in its order.
    assert_eq!((out.sample_regs_user, out.sample_stack_user), (regs, 8192));
}

/// memperf leak's entry probes with `--call-graph fp`: in user mode (the default) the attr
/// asks for the user part of the callchain only; with kernel frames kept it asks for both,
/// and a kernel chain of its own (the kernel tools' tracepoints) is the kernel part alone.
#[test]
fn a_frame_pointer_probe_asks_for_kernel_frames_only_where_they_are_kept() {
    let specs = crate::events::parse_event_list("page-faults").unwrap();
    let (mut events, _) = resolve_events(&specs).unwrap();
    let sampling = |call_graph, kernel_chain| Sampling {
        call_graph,
        regs: 0,
        kernel_chain,
        raw: false,
        period: Period::Count(1),
        keep_stack: false,
    };
    let mut cfg = RecordConfig::internal(specs, Target::Command, vec![0]);
    let mut excludes = |cfg: &RecordConfig, s: Sampling| {
        events[0].sampling = Some(s);
        let a = attr_config(cfg, &events[0], false, 1);
        assert_ne!(a.sample_type & PERF_SAMPLE_CALLCHAIN, 0);
        (a.exclude_callchain_kernel, a.exclude_callchain_user)
    };
    cfg.user_only = true;
    assert_eq!(
        excludes(&cfg, sampling(CallGraph::Fp, false)),
        (true, false)
    );
    cfg.user_only = false;
    assert_eq!(
        excludes(&cfg, sampling(CallGraph::Fp, false)),
        (false, false)
    );
    assert_eq!(
        excludes(&cfg, sampling(CallGraph::None, true)),
        (false, true)
    );
}

/// This thread's id, from /proc (no unsafe outside `sys`).
fn own_tid() -> u32 {
    let link = std::fs::read_link("/proc/thread-self").unwrap();
    link.file_name().unwrap().to_str().unwrap().parse().unwrap()
}

/// A recording of `specs` on this thread only, on every CPU, into rings of `pages` pages,
/// without side band: what the tests that open events for real (here and in
/// `live::resize`) open.
pub(crate) fn this_thread(
    specs: Vec<EventSpec>,
    call_graph: CallGraph,
    pages: usize,
) -> RecordConfig {
    RecordConfig {
        call_graph,
        user_only: true,
        mmap_pages: Some(pages),
        cmdline: Vec::new(),
        side_band: false,
        ..RecordConfig::internal(
            specs,
            Target::Tids(vec![own_tid()]),
            crate::sys::online_cpus().unwrap(),
        )
    }
}

/// The samples waiting in the rings of event `ev` (`None`: in every ring); every ring is
/// emptied.
pub(crate) fn samples_in(opened: &mut Opened, ev: Option<usize>) -> usize {
    let mut n = 0;
    for (ring, owner) in opened.rings.iter_mut().zip(&opened.ring_events) {
        let mut reader = ring.reader();
        while let Some(rec) = reader.peek() {
            n += usize::from(
                ev.is_none_or(|ev| *owner == Some(ev))
                    && rec.ty == perf_event_open_sys::bindings::PERF_RECORD_SAMPLE,
            );
            reader.consume();
        }
    }
    n
}

/// A group opened for real: a counting leader and a sampling member (software events, as
/// this VM has no PMU; the mem-loads-aux group is opened the same way), on every CPU for
/// this thread. A group is scheduled only with its leader: with the member alone enabled,
/// nothing is sampled; with the leader too, every fault is.
#[test]
fn a_group_opens_with_its_leader_counting_and_its_member_sampling_only_with_it() {
    if !crate::sys::testutil::require_perf("a group of software events") {
        return;
    }
    let specs = crate::events::parse_event_list("task-clock,page-faults").unwrap();
    let (mut events, tracefs) = resolve_events(&specs).unwrap();
    events[0].counting = true;
    events[1].leader = Some(0);
    let cfg = this_thread(specs, CallGraph::None, 8);
    let facts = SystemFacts::read();
    let mut opened = open_all(&cfg, events, tracefs, None, &facts).unwrap();
    let (leader, member) = (&opened.events[0], &opened.events[1]);
    assert_eq!(member.ids.len(), cfg.cpus.len());
    assert_eq!(leader.ids.len(), member.ids.len());
    let (la, ma) = (leader.attr.unwrap(), member.attr.unwrap());
    assert_eq!((la.sample_period, la.freq()), (0, 0));
    assert_eq!(ma.sample_period, 1);
    assert_eq!(side_band_event(&opened.events), 1);
    // Two software events: each has rings of its own, which tell the group's parts apart.
    let enable = |opened: &Opened, ev: usize| {
        for (ring, owner) in opened.rings.iter().zip(&opened.ring_events) {
            if *owner == Some(ev) {
                crate::sys::open::ioc_enable(ring.fd()).unwrap();
            }
        }
    };
    enable(&opened, 1);
    crate::sys::testutil::touch_fresh_pages(64);
    assert_eq!(
        samples_in(&mut opened, Some(1)),
        0,
        "sampled without its leader"
    );
    enable(&opened, 0);
    crate::sys::testutil::touch_fresh_pages(64);
    let n = samples_in(&mut opened, Some(1));
    assert!(
        n >= 64,
        "{n} samples for 64 fresh pages with the group enabled"
    );
    assert_eq!(
        samples_in(&mut opened, Some(0)),
        0,
        "the counting leader sampled"
    );
}

#[test]
fn a_member_of_a_member_is_refused() {
    let specs = crate::events::parse_event_list("page-faults,minor-faults,major-faults").unwrap();
    let (mut events, _) = resolve_events(&specs).unwrap();
    events[1].leader = Some(0);
    events[2].leader = Some(1);
    let e = check_groups(&events).unwrap_err().to_string();
    assert!(e.contains("which is itself in a group"), "{e}");
    events[2].leader = Some(2);
    let e = check_groups(&events).unwrap_err().to_string();
    assert!(e.contains("not opened before it"), "{e}");
}
