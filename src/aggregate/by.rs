//! `--by mapping|file|comm|pid`: what each sample is filed under.

use crate::config::report::ByKey;
use crate::maps::ModuleKind;
use crate::session::Processes;

use super::{comm_of, maps_of};

/// The label of a sample whose address lies in no mapping the records describe.
pub const NO_MAPPING: &str = "[no mapping recorded]";

/// Why `n` samples are filed under [`NO_MAPPING`], for the line under the table.
pub fn no_mapping_note(n: u64) -> String {
    format!(
        "{n} samples under {NO_MAPPING}: their address lies in no mapping the recording's \
         MMAP records describe (memory mremap moved in a recording without memperf's \
         mremap events, such as perf's, or mapped while records were lost)"
    )
}

/// What `--by` files a sample under.
pub(super) struct ByLabel {
    pub(super) name: String,
    /// The mapping's bounds under `--by mapping`, else 0.
    pub(super) start: u64,
    pub(super) end: u64,
}

/// One row of `--by`.
#[derive(Debug, Default, Clone, Copy)]
pub struct ByRow {
    pub samples: u64,
    /// Bytes for events with a size (see `--weight bytes`).
    pub bytes: u64,
    /// The largest end the mapping had, under `--by mapping`.
    pub end: u64,
}

/// Where a sample's data address lies, or who took it, for `--by`: the label, and for
/// `--by mapping` the mapping's bounds.
pub(super) fn label(
    procs: &Processes,
    by: ByKey,
    pid: u32,
    tid: u32,
    addr: Option<u64>,
) -> ByLabel {
    let plain = |name: String| ByLabel {
        name,
        start: 0,
        end: 0,
    };
    match by {
        ByKey::Comm => return plain(comm_of(procs, pid, tid)),
        ByKey::Pid => return plain(format!("{} {pid}", comm_of(procs, pid, tid))),
        ByKey::Mapping | ByKey::File => {}
    }
    let Some(addr) = addr else {
        return plain("[no address recorded]".to_string());
    };
    let maps = maps_of(procs);
    let Some((module, start, end)) = maps.mapping_of(pid, addr) else {
        return plain(NO_MAPPING.to_string());
    };
    let m = maps.module(module);
    let path = String::from_utf8_lossy(&m.path);
    let huge = path.contains("anon_hugepage") || path.starts_with("/dev/hugepages");
    let name = match m.kind() {
        _ if maps.is_heap(pid, start) => "[heap]".to_string(),
        ModuleKind::Anon if !huge => "//anon".to_string(),
        _ => path.into_owned(),
    };
    let name = if huge {
        format!("{name} (huge pages)")
    } else {
        name
    };
    match by {
        ByKey::Mapping => ByLabel { name, start, end },
        _ => plain(name),
    }
}
