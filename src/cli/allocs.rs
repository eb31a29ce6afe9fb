//! The options every command that traces allocations takes (`leak`, `heap`, `rss`): where
//! the allocator is, how stacks are taken and sampled, where probes go, the ring size; one
//! declaration and one check. A command whose help says more of an option (leak's, as
//! memleak's) replaces the help with `mut_arg`.

use anyhow::{Result, bail};
use clap::Args;

use super::CallGraph;
use super::record::parse_record_call_graph;
use crate::config::leak::{LeakConfig, LeakTarget, ProbeVia};

/// The allocator, stack and probe options of `leak`, `heap` and `rss`.
#[derive(Debug, Args)]
pub struct AllocArgs {
    /// The object that holds the allocator: a path, or a library name (`c` for libc, the
    /// default; `jemalloc` for libjemalloc.so).
    #[arg(short = 'O', long = "obj", value_name = "OBJ")]
    pub obj: Option<String>,

    /// A prefix of the allocator's symbol names (`je_` for a prefixed jemalloc).
    #[arg(long = "symbols-prefix", value_name = "PREFIX", default_value = "")]
    pub symbols_prefix: String,

    /// How user stacks are taken: `dwarf,auto` (the default: 8192 bytes copied per
    /// allocation, then what the program's allocation stacks need), `dwarf[,BYTES]` or `fp`.
    #[arg(long = "call-graph", value_name = "MODE", default_value = "dwarf,auto")]
    pub call_graph: String,

    /// Where user probes are placed (as memperf leak).
    #[arg(long = "probe-via", value_enum, default_value = "auto")]
    pub probe_via: ProbeVia,

    /// Copy the stack of one allocation in N (every allocation and free is still matched,
    /// so totals stay exact); folded, flame graph and pprof outputs weight each sampled
    /// allocation by N and leave the unsampled ones out.
    #[arg(
        short = 's',
        long = "sample-rate",
        value_name = "N",
        default_value_t = 1
    )]
    pub sample_rate: u64,

    /// Ring buffer pages per CPU (a power of two).
    #[arg(short = 'm', long = "mmap-pages", value_name = "PAGES")]
    pub mmap_pages: Option<usize>,
}

impl AllocArgs {
    /// The allocation tracing of `memperf COMMAND` on `target` as these options ask, every
    /// other field as [`LeakConfig::allocations`] has it: `-m`, `-s` and `--call-graph`
    /// checked first.
    pub(crate) fn into_leak(self, command: &str, target: LeakTarget) -> Result<LeakConfig> {
        check_ring_pages(self.mmap_pages)?;
        check_sample_rate(self.sample_rate)?;
        let (call_graph, stack_auto) = stack_call_graph(command, &self.call_graph)?;
        Ok(LeakConfig {
            stack_auto,
            obj: self.obj,
            symbols_prefix: self.symbols_prefix,
            mmap_pages: self.mmap_pages,
            sample_rate: self.sample_rate,
            probe_via: self.probe_via,
            ..LeakConfig::allocations(target, call_graph)
        })
    }

    /// Whether `-O` or `--symbols-prefix` names a user-space allocator.
    pub(crate) fn names_allocator(&self) -> bool {
        self.obj.is_some() || !self.symbols_prefix.is_empty()
    }
}

/// `-s N`: one stack copied in N.
fn check_sample_rate(n: u64) -> Result<()> {
    if n == 0 {
        bail!("invalid sample rate 0 for -s: use 1 to take every stack");
    }
    Ok(())
}

/// `-m PAGES`: a power of two pages per CPU.
pub(crate) fn check_ring_pages(pages: Option<usize>) -> Result<()> {
    if let Some(p) = pages
        && (p == 0 || !p.is_power_of_two())
    {
        bail!("invalid -m {p}: the ring buffer size must be a power of two pages");
    }
    Ok(())
}

/// `--call-graph` of a command that reports by allocation stack: any mode that gives stacks;
/// and whether the copy's size is learnt (`dwarf,auto`).
fn stack_call_graph(command: &str, spec: &str) -> Result<(CallGraph, bool)> {
    let (call_graph, auto) = parse_record_call_graph(spec)?;
    if call_graph == CallGraph::None {
        bail!("memperf {command} needs stacks: use --call-graph dwarf or fp");
    }
    Ok((call_graph, auto))
}
