//! How large each CPU's ring is by default, and the events that need a large one.

use crate::config::record::{CallGraph, RecordConfig};
use crate::events::{EventSpec, Period};
use crate::sys::diagnose::SystemFacts;

/// A sampled event's period: its own `period=` term, else `-c`/`-F`, else its default.
pub fn period_of(cfg: &RecordConfig, spec: &EventSpec) -> Period {
    spec.terms
        .period
        .or(cfg.period)
        .unwrap_or_else(|| spec.default_period())
}

/// Whether some event copies DWARF stacks at every hit (a fixed period, as uprobes,
/// tracepoints and faults have by default): the kernel cannot throttle those, and each
/// hit writes the whole copy, so the traced threads fill the rings as fast as they run
/// (22 KiB a hit every ~7 µs is 3 GB/s a thread) and the kernel drops what the reader
/// has not taken yet.
pub fn dwarf_at_every_hit(cfg: &RecordConfig) -> bool {
    cfg.events.iter().any(|e| {
        matches!(cfg.call_graph_of(e), CallGraph::Dwarf { .. })
            && matches!(period_of(cfg, e), Period::Count(_))
    })
}

/// The ring per CPU that [`dwarf_at_every_hit`] events get: 256 MiB over the CPUs, at
/// least 16 MiB and at most 64 MiB each. 64 MiB holds ~2,700 hits with 24 KiB copies, the
/// burst of 6 threads calling malloc for 30 ms, while the reader is not scheduled (a 16 MiB
/// ring filled in 5 ms; perf's is 512 KiB).
const BURST_RING_TOTAL: usize = 256 << 20;
const BURST_RING_MAX: usize = 64 << 20;
const RING_DWARF: usize = 16 << 20;

/// The default ring size per CPU, in data pages.
pub fn default_mmap_pages(cfg: &RecordConfig, facts: &SystemFacts) -> usize {
    let page = crate::sys::page_size().max(1);
    let privileged = facts.euid == 0 || facts.cap_ipc_lock;
    let wanted_bytes: usize = match cfg.widest_call_graph() {
        CallGraph::Dwarf { .. } if dwarf_at_every_hit(cfg) => {
            (BURST_RING_TOTAL / cfg.cpus.len().max(1)).clamp(RING_DWARF, BURST_RING_MAX)
        }
        // 16 MiB holds about 2,000 samples with 8 KiB stacks: several milliseconds of a
        // fault storm, enough for the reader on the other CPU to keep up.
        CallGraph::Dwarf { .. } => RING_DWARF,
        _ => 4 << 20,
    };
    let mut pages = (wanted_bytes / page).next_power_of_two();
    if !privileged {
        let limit_kb = facts.mlock_kb.unwrap_or(516) as usize;
        let fit = (limit_kb * 1024 / page).saturating_sub(1).max(1);
        let fit = if fit.is_power_of_two() {
            fit
        } else {
            fit.next_power_of_two() / 2
        };
        pages = pages.min(fit.max(1));
    }
    pages
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::events::parse_event_list;

    fn cfg(events: &str, call_graph: CallGraph, cpus: u32) -> RecordConfig {
        let specs = parse_event_list(events).unwrap();
        let mut cfg = super::super::tests::this_thread(specs, call_graph, 1);
        cfg.cpus = (0..cpus).collect();
        cfg.mmap_pages = None;
        cfg
    }

    const DWARF: CallGraph = CallGraph::Dwarf { stack_bytes: 8192 };

    fn mib(pages: usize) -> usize {
        (pages * crate::sys::page_size()) >> 20
    }

    #[test]
    fn stacks_copied_at_every_hit_get_the_burst_ring_over_the_cpus() {
        let root = SystemFacts::default();
        let probe = "u:libc:malloc";
        assert!(dwarf_at_every_hit(&cfg(probe, DWARF, 2)));
        assert_eq!(mib(default_mmap_pages(&cfg(probe, DWARF, 2), &root)), 64);
        assert_eq!(mib(default_mmap_pages(&cfg(probe, DWARF, 8), &root)), 32);
        assert_eq!(mib(default_mmap_pages(&cfg(probe, DWARF, 64), &root)), 16);
        // Sampled at a frequency, the kernel throttles them; frame pointers copy no stack.
        let clock = cfg("cpu-clock", DWARF, 2);
        assert!(!dwarf_at_every_hit(&clock));
        assert_eq!(mib(default_mmap_pages(&clock, &root)), 16);
        let fp = cfg(probe, CallGraph::Fp, 2);
        assert!(!dwarf_at_every_hit(&fp));
        assert_eq!(mib(default_mmap_pages(&fp, &root)), 4);
        let mut freq = cfg(probe, DWARF, 2);
        freq.period = Some(Period::Frequency(100));
        assert!(!dwarf_at_every_hit(&freq));
    }
}
