//! The mremap tracepoints a recording of page faults needs: the kernel writes no MMAP2
//! record when mremap(2) moves or grows a mapping (glibc's `realloc` of a large block does),
//! so without them the faults in the moved memory lie in no mapping the session knows.
//! They are added beside fault events that carry addresses, sampled every call without
//! stacks, and named [`REMAP_ENTER`]/[`REMAP_EXIT`]: the session applies them to its process
//! table and hands them on as side band (`session::remaps`).

use crate::cli::CallGraph;
use crate::cli::Target;
use crate::events::{self, Period};
use crate::session::{REMAP_ENTER, REMAP_EXIT};
use crate::sys::tracefs::Tracefs;

use super::open::{self, ResolvedEvent, Sampling};

const TRACEPOINTS: [(&str, &str); 2] = [
    ("syscalls:sys_enter_mremap", REMAP_ENTER),
    ("syscalls:sys_exit_mremap", REMAP_EXIT),
];

/// Adds the mremap tracepoints to `events` when one of them is a page-fault event (which
/// samples the fault's address) and none is mremap's already. A note when they cannot be
/// opened (no tracefs, a kernel without syscall tracepoints): moves are then not followed.
pub(crate) fn add_events(
    events: &mut Vec<ResolvedEvent>,
    tracefs: &mut Option<Tracefs>,
    target: &Target,
) -> Option<String> {
    let faults = events.iter().any(|e| open::is_fault_event(&e.spec));
    let present = events.iter().any(|e| {
        TRACEPOINTS
            .iter()
            .any(|(tp, name)| e.spec.name == *tp || e.spec.name == *name)
    });
    if !faults || present {
        return None;
    }
    // System-wide, their cost beside every process's faults is not measured yet
    // (tests/foreign_ids.rs lost records with them on a loaded machine, and once without
    // them too): left out there until it is.
    if *target == Target::SystemWide {
        return Some(
            "mremap moves are not followed system-wide: faults in memory mremap moved (a large \
             realloc) are filed under [no mapping recorded]"
                .to_string(),
        );
    }
    let list = format!("{},{}", TRACEPOINTS[0].0, TRACEPOINTS[1].0);
    let resolved = events::parse_event_list(&list)
        .map_err(anyhow::Error::from)
        .and_then(|specs| open::resolve_events_in(&specs, target));
    let (mut added, tfs) = match resolved {
        Ok(r) => r,
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
        });
    }
    if tracefs.is_none() {
        *tracefs = tfs;
    }
    events.extend(added);
    None
}
