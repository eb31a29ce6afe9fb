//! What the session keeps besides the events' layouts: the process table's parts a handler
//! needs (mappings, thread names, the sampled processes' files) and whether to unwind.

use rustc_hash::FxHashMap;

use crate::maps::ProcessMaps;
use crate::perfdata::PerfDataFile;
use crate::unwind::UnwindMode;

/// What the session keeps besides the per-event layouts.
#[derive(Default)]
pub struct Keep {
    /// Unwind copied user stacks in this mode.
    pub unwind: Option<UnwindMode>,
    /// Every process's mappings, for naming user frames (given with the file's build-ids).
    pub maps: Option<ProcessMaps>,
    /// Thread names.
    pub comms: bool,
    /// The executable files of processes that had samples (for the recorder's build-ids).
    pub dsos: bool,
}

impl Keep {
    /// What a reader of a recording that names frames keeps: every process's mappings
    /// (with the file's build-ids) and thread names, and, when `stacks` and the file holds
    /// raw user stacks (perf's `--call-graph dwarf`), DWARF unwinding.
    pub fn replaying(file: &PerfDataFile, stacks: bool) -> Keep {
        use crate::abi::{PERF_SAMPLE_REGS_USER, PERF_SAMPLE_STACK_USER};
        let raw = PERF_SAMPLE_STACK_USER | PERF_SAMPLE_REGS_USER;
        let raw_stacks =
            (0..file.events.len()).any(|i| file.parse_info(i).sample_type & raw == raw);
        let build_ids: FxHashMap<Vec<u8>, Vec<u8>> = file
            .features
            .build_ids
            .iter()
            .filter(|e| !e.kernel)
            .map(|e| (e.filename.as_bytes().to_vec(), e.build_id.clone()))
            .collect();
        Keep {
            unwind: (raw_stacks && stacks).then_some(UnwindMode::Dwarf),
            maps: Some(ProcessMaps::new(build_ids)),
            comms: true,
            dsos: false,
        }
    }
}
