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
    let out = output_attr(&dwarf_attr(user_regs_mask_for_unwind()), true);
    assert_eq!(out.sample_type, PERF_SAMPLE_IP | PERF_SAMPLE_CALLCHAIN);
    assert_eq!((out.sample_regs_user, out.sample_stack_user), (0, 0));
    assert_eq!(out.exclude_callchain_user(), 0);
    // Offline unwinding keeps what was copied.
    let kept = output_attr(&dwarf_attr(user_regs_mask_for_unwind()), false);
    assert_eq!(kept.sample_type, dwarf_attr(0).sample_type);
}

#[cfg(target_arch = "x86_64")]
#[test]
fn a_probe_keeps_its_argument_registers_after_online_unwinding() {
    use perf_event_open_sys::bindings as b;
    // memperf leak's entry probes: the arguments (DI, SI) beside unwinding's registers.
    let regs = user_regs_mask_for_unwind() | 1 << b::PERF_REG_X86_DI | 1 << b::PERF_REG_X86_SI;
    let out = output_attr(&dwarf_attr(regs), true);
    assert_eq!(
        out.sample_type,
        PERF_SAMPLE_IP | PERF_SAMPLE_REGS_USER | PERF_SAMPLE_CALLCHAIN
    );
    // The whole mask: the sampled values are written in its order.
    assert_eq!((out.sample_regs_user, out.sample_stack_user), (regs, 0));
}
