//! One module per subcommand.

pub mod brkstack;
pub mod diff;
pub mod drsnoop;
pub mod faults;
pub mod ffaults;
pub mod heap;
pub mod leak;
pub mod list;
pub mod mem;
pub mod mmapsnoop;
pub mod oomkill;
pub mod record;
pub mod report;
pub mod rss;
pub mod shmsnoop;
pub mod slabratetop;
pub mod stat;
pub mod swapin;
pub mod triage;
pub mod vmscan;

use crate::tool::Want;

/// A memperf command and the fixed events it reads.
#[derive(Debug, Clone)]
pub(crate) struct ToolEvents {
    pub name: &'static str,
    /// How it is run, when it matters (`leak --kernel`): options the command takes.
    pub how: &'static str,
    pub wants: Vec<Want>,
    /// It also places uprobes on the allocator (`rss`): `--check` tries those beside its
    /// events.
    pub uprobes: bool,
}

/// Every command with fixed events, with them: what `memperf list` shows and `--check`
/// tries. The tools keep their own lists; this only gathers them (no command imports
/// another).
pub(crate) fn tools() -> Vec<ToolEvents> {
    let tool = |name, wants: &[Want]| ToolEvents {
        name,
        how: "",
        wants: wants.to_vec(),
        uprobes: false,
    };
    vec![
        tool("faults", &[faults::want("page-faults")]),
        tool("brkstack", brkstack::WANTS),
        tool("ffaults", &ffaults::listed(ffaults::Place::Files)),
        tool("fmapfault", &ffaults::listed(ffaults::Place::CommFiles)),
        tool("hfaults", &ffaults::listed(ffaults::Place::Huge)),
        tool("swapin", swapin::WANTS),
        tool("drsnoop", drsnoop::WANTS),
        tool("vmscan", &vmscan::WANTS),
        tool("slabratetop", slabratetop::WANTS),
        tool("mmapsnoop", mmapsnoop::WANTS),
        tool("shmsnoop", shmsnoop::WANTS),
        tool("oomkill", oomkill::WANTS),
        ToolEvents {
            name: "leak",
            how: "--kernel",
            wants: crate::allocs::kernel::wants(),
            uprobes: false,
        },
        ToolEvents {
            uprobes: true,
            ..tool("rss", &crate::allocs::plan::RSS_WANTS)
        },
        // The allocator's uprobes alone.
        ToolEvents {
            uprobes: true,
            ..tool("heap", &[])
        },
    ]
}
