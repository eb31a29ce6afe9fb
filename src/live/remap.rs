//! The mremap tracepoints a recording of page faults needs: the kernel writes no MMAP2
//! record when mremap(2) moves or grows a mapping (glibc's `realloc` of a large block does),
//! so without them the faults in the moved memory lie in no mapping the session knows.
//! They are added beside fault events that carry addresses, sampled every call without
//! stacks, and named [`REMAP_ENTER`]/[`REMAP_EXIT`]: the session pairs them and makes the
//! MMAP2 record of each move (`session::remaps`); they themselves stay out of the file, its
//! header, its tracing data and the summary ([`is_added`]). System-wide too: mremap is a
//! rare call (a few per second on a busy desktop), so two tracepoints on it cost the rings
//! nothing beside the faults (`benches/mremap-events.sh`).

use crate::config::record::CallGraph;
use crate::config::record::Target;
use crate::events::{self, Period};
use crate::session::{REMAP_ENTER, REMAP_EXIT};

use super::open::{self, ResolvedEvent, Sampling};

const TRACEPOINTS: [(&str, &str); 2] = [
    ("syscalls:sys_enter_mremap", REMAP_ENTER),
    ("syscalls:sys_exit_mremap", REMAP_EXIT),
];

/// Set to `0`, the recorder adds no mremap events (for the benchmark that measures them).
const OFF_VAR: &str = "MEMPERF_FOLLOW_MREMAP";

/// Whether the event named `name` is one the recorder added: not written into the file.
pub(crate) fn is_added(name: &str) -> bool {
    name == REMAP_ENTER || name == REMAP_EXIT
}

/// The names of `events` a user asked for (the added ones left out), for what is printed.
pub(crate) fn names_shown(events: &[ResolvedEvent]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e.spec.name.as_str())
        .filter(|n| !is_added(n))
        .collect()
}

/// Adds the mremap tracepoints to `events` when one of them is a page-fault event (which
/// samples the fault's address) and none is mremap's already. A note when they cannot be
/// opened (no tracefs, a kernel without syscall tracepoints): moves are then not followed.
pub(crate) fn add_events(events: &mut Vec<ResolvedEvent>, target: &Target) -> Option<String> {
    let faults = events.iter().any(|e| open::is_fault_event(&e.spec));
    let present = events.iter().any(|e| {
        TRACEPOINTS
            .iter()
            .any(|(tp, name)| e.spec.name == *tp || e.spec.name == *name)
    });
    if !faults || present || std::env::var(OFF_VAR).is_ok_and(|v| v == "0") {
        return None;
    }
    let list = format!("{},{}", TRACEPOINTS[0].0, TRACEPOINTS[1].0);
    // Their tracefs is not the recording's: the file holds no tracepoint of theirs, so
    // no tracing data for them either.
    let resolved = events::parse_event_list(&list)
        .map_err(anyhow::Error::from)
        .and_then(|specs| open::resolve_events_in(&specs, target));
    let mut added = match resolved {
        Ok((added, _)) => added,
        Err(e) => {
            return Some(format!(
                "mremap moves are not followed ({e:#}): faults in memory mremap moved (a large \
                 realloc) are filed under [no mapping recorded]"
            ));
        }
    };
    for (ev, (_, name)) in added.iter_mut().zip(TRACEPOINTS) {
        ev.spec.name = name.to_string();
        ev.sampling = Some(Sampling {
            call_graph: CallGraph::None,
            regs: 0,
            kernel_chain: false,
            raw: true,
            period: Period::Count(1),
            keep_stack: false,
        });
    }
    events.extend(added);
    None
}
