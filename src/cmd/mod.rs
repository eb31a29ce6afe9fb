//! One module per subcommand.

pub mod agent;
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

use anyhow::Result;

use crate::cli::Command;
use crate::cli::mem::MemAction;
use crate::tool::Want;

/// Runs a parsed command line's subcommand: what the binary does, and what the fuzz
/// targets call to read a recording as each command reads it. Returns the exit code.
pub fn run(command: Command) -> Result<i32> {
    match command {
        Command::Record(args) => args.into_config().and_then(record::run),
        Command::Report(args) => args.into_config().and_then(report::run),
        Command::Script(args) => args.into_config().and_then(report::run),
        Command::Diff(args) => args.into_config().and_then(diff::run),
        Command::Stat(args) => args.into_config().and_then(stat::run),
        Command::Leak(args) => args.into_config().and_then(leak::run),
        Command::Rss(args) => args.into_config().and_then(rss::run),
        Command::Heap(args) => args.into_config().and_then(heap::run),
        Command::Faults(args) => args.into_config().and_then(faults::run),
        Command::Brkstack(args) => args.into_config().and_then(brkstack::run),
        Command::Ffaults(args) => ffaults::run(ffaults::Place::Files, args.into_config()?),
        Command::Fmapfault(args) => ffaults::run(ffaults::Place::CommFiles, args.into_config()?),
        Command::Hfaults(args) => ffaults::run(ffaults::Place::Huge, args.into_config()?),
        Command::Swapin(args) => args.into_config().and_then(swapin::run),
        Command::Drsnoop(args) => args.into_config().and_then(drsnoop::run),
        Command::Vmscan(args) => args.into_config().and_then(vmscan::run),
        Command::Slabratetop(args) => args.into_config().and_then(slabratetop::run),
        Command::Mmapsnoop(args) => args.into_config().and_then(mmapsnoop::run),
        Command::Shmsnoop(args) => args.into_config().and_then(shmsnoop::run),
        Command::Oomkill(args) => args.into_config().and_then(oomkill::run),
        Command::List(args) => args.into_config().and_then(list::run),
        Command::Triage(args) => args.into_config().and_then(triage::run),
        Command::Mem(args) => match args.action {
            MemAction::Record(a) => a.into_config().and_then(mem::record),
            MemAction::Report(a) => a.into_config().and_then(mem::report),
        },
        Command::Agent(args) => args.into_config().and_then(agent::run),
    }
}

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
