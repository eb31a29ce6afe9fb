//! `memperf mem record` and `memperf mem report`.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::{Args, Subcommand, ValueEnum};

use std::ffi::OsString;

use super::leak::{LeakConfig, LeakTarget};
use super::{CallGraph, Input, Target, parse_id_list};
use crate::config::mem::{Group, Types};

pub use crate::config::mem::{MemRecordConfig, MemReportConfig};

/// Arguments of `memperf mem`.
#[derive(Debug, Args)]
pub struct MemArgs {
    #[command(subcommand)]
    pub action: MemAction,
}

#[derive(Debug, Subcommand)]
pub enum MemAction {
    /// Sample loads and stores with their data addresses, data sources and latencies
    /// (Intel PEBS mem-loads/mem-stores, AMD IBS op, Arm SPE) into a perf.data file.
    #[command(after_help = MEM_EXAMPLES)]
    Record(MemRecordArgs),
    /// perf mem report's table from a recording of memory samples (memperf's or perf's):
    /// weight, memory level, function, data symbol, snoop, TLB, lock; or --by mapping.
    #[command(after_help = MEM_EXAMPLES)]
    Report(MemReportArgs),
}

/// Which accesses to sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MemType {
    Load,
    Store,
}

/// Arguments of `memperf mem record`.
#[derive(Debug, Args)]
pub struct MemRecordArgs {
    /// The accesses to sample: load, store, or both (`-t load,store`, the default).
    #[arg(short = 't', long = "type", value_delimiter = ',', value_enum)]
    pub types: Vec<MemType>,
    /// Sample only loads at least this many cycles long (Intel ldlat, Zen 5 IBS); perf's
    /// default is 30.
    #[arg(long, value_name = "CYCLES", default_value_t = 30)]
    pub ldlat: u32,
    /// The whole system.
    #[arg(short = 'a', long = "all-cpus")]
    pub all_cpus: bool,
    /// These processes (comma-separated).
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pid: Option<String>,
    /// The recording to write.
    #[arg(short = 'o', long, value_name = "FILE", default_value = "memperf.data")]
    pub output: PathBuf,
    /// Do not record the allocator's calls beside the memory samples (recorded by default
    /// for a command or one -p PID, as `memperf leak` probes them: what `mem report --by
    /// allocation` replays).
    #[arg(long = "no-allocations")]
    pub no_allocations: bool,
    /// Ring buffer pages per CPU (a power of two).
    #[arg(short = 'm', long = "mmap-pages", value_name = "PAGES")]
    pub mmap_pages: Option<usize>,
    /// The command to run and sample.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// Arguments of `memperf mem report`.
#[derive(Debug, Args)]
pub struct MemReportArgs {
    /// The recording: memperf's or perf's (`perf mem record`), `-` for standard input.
    #[arg(
        short = 'i',
        long = "input",
        value_name = "FILE",
        default_value = "memperf.data"
    )]
    pub input: PathBuf,
    /// Group the samples by what holds the data address instead of perf's rows: `mapping`
    /// (its file, [heap], [stack], //anon), or `allocation`: the live allocation holding it
    /// at the sample's time, by its allocation stack, else its mapping. `allocation` needs
    /// the allocator calls in the recording (`memperf mem record -- CMD`, `memperf rss -w`)
    /// and takes every sample with a data address (PERF_SAMPLE_ADDR): memory samples, and
    /// page faults, whose address is the faulting one.
    #[arg(long = "by", value_enum, value_name = "WHAT")]
    pub by: Option<MemBy>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MemBy {
    Mapping,
    Allocation,
}

impl MemRecordArgs {
    pub fn into_config(self) -> Result<MemRecordConfig> {
        let targets = usize::from(self.all_cpus)
            + usize::from(self.pid.is_some())
            + usize::from(!self.command.is_empty());
        if targets != 1 {
            bail!("mem record: give one of -a, -p PID or -- COMMAND");
        }
        if self.ldlat == 0 {
            bail!("--ldlat: give a latency of at least 1 cycle");
        }
        super::allocs::check_ring_pages(self.mmap_pages)?;
        let has = |t| self.types.is_empty() || self.types.contains(&t);
        let (target, command, leak_target) = if self.all_cpus {
            (Target::SystemWide, None, None)
        } else if let Some(pids) = &self.pid {
            let pids = parse_id_list(pids, "pid")?;
            let one = (pids.len() == 1).then(|| LeakTarget::Pid(pids[0]));
            (Target::Pids(pids), None, one)
        } else {
            let argv: Vec<OsString> = self.command.iter().map(OsString::from).collect();
            (
                Target::Command,
                Some(argv.clone()),
                Some(LeakTarget::Command(argv)),
            )
        };
        let allocations = leak_target
            .filter(|_| !self.no_allocations)
            .map(|t| LeakConfig {
                mmap_pages: self.mmap_pages,
                ..LeakConfig::allocations(t, CallGraph::Dwarf { stack_bytes: 8192 })
            });
        Ok(MemRecordConfig {
            types: Types {
                loads: has(MemType::Load),
                stores: has(MemType::Store),
            },
            ldlat: self.ldlat,
            output: self.output,
            target,
            command,
            mmap_pages: self.mmap_pages,
            allocations,
        })
    }
}

impl MemReportArgs {
    pub fn into_config(self) -> Result<MemReportConfig> {
        Ok(MemReportConfig {
            input: Input::from_arg(self.input),
            group: match self.by {
                None => Group::Perf,
                Some(MemBy::Mapping) => Group::Mapping,
                Some(MemBy::Allocation) => Group::Allocation,
            },
        })
    }
}

pub(super) const MEM_EXAMPLES: &str = "\
EXAMPLES:
    memperf mem record -- ./app
        Loads slower than 30 cycles and stores of ./app, with their data addresses.
    memperf mem record -t load --ldlat 100 -a -o mem.data
        The whole system's loads of 100 cycles and more (no allocator calls: those are
        recorded for a command or one -p PID).
    memperf mem report -i perf.data
        perf mem report's table, from `perf mem record` or `memperf mem record`.
    memperf mem report --by mapping
        The weight of the accesses by the mapping they touched.
    memperf mem report --by allocation
        Samples, total and average weight by the allocation stack of the live allocation
        each address lay in when sampled (allocator calls replayed from the recording);
        the rest by mapping.
    memperf script -F comm,tid,addr,data_src,weight
        Every sample's data address, data source and weight, as perf script prints them.

PERMISSIONS: a PMU that samples memory (Intel PEBS, AMD IBS, Arm SPE: not in most VMs);
your own processes with perf_event_paranoid <= 2 (data addresses of kernel accesses need
<= 1), root or CAP_PERFMON for -a; the allocator's calls need what memperf leak needs
(root for tracefs uprobes, or CAP_PERFMON with the uprobe PMU on 5.8+), else
--no-allocations.";
