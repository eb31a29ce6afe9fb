//! `memperf stat`: its options, validated into a `StatConfig`.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Args;

use super::Target;
use super::record::{parse_cpus, parse_duration, parse_specs, parse_target};

pub use crate::config::stat::{DEFAULT_STAT_EVENTS, StatConfig};

pub(super) const STAT_EXAMPLES: &str = "\
EXAMPLES:
    memperf stat -- ./app
        Task clock and page faults of a command, as perf stat prints them.
    memperf stat -e syscalls:sys_enter_brk -I 1000 -a
        brk() calls on the whole system every second, with the bytes the heaps grew by.
    memperf stat -e page-faults,major-faults,syscalls:sys_enter_mmap -p 1234 --duration 10
        One process for 10 s: faults, and mmap calls with the bytes they mapped.
    memperf stat -e kmem:kmalloc --filter 'bytes_alloc >= 4096' -x, -- ./app
        Large kernel allocations of a command, as CSV.
    memperf stat -r 5 -e 'syscalls:sys_enter_m*map' -- ./app
        Five runs: the mean of each count and its spread.

Counts come from the kernel's counters (read(2), no samples). For the memory tracepoints
whose fields have a size (mmap and munmap `len`, mremap `new_len`, shmget `size`, brk's
growth, kmalloc and kmem_cache_alloc `bytes_alloc`, mm_page_alloc's order, percpu
`bytes_alloc`), memperf also samples the payload (PERF_SAMPLE_RAW, no stacks) and sums the
bytes in user space; the output says which events were summed. --no-bytes counts only.

PERMISSIONS:
    Your own processes' software events work with kernel.perf_event_paranoid <= 2.
    System-wide counting (-a, -C) and tracepoints need root, CAP_PERFMON (Linux 5.8+) or
    CAP_SYS_ADMIN, or a lower perf_event_paranoid; tracepoints need tracefs (mounted by
    memperf when it runs as root).";

/// Arguments of `memperf stat`.
#[derive(Debug, Args)]
pub struct StatArgs {
    /// Events to count, comma-separated, repeatable, as `memperf record -e` takes them
    /// (globs, `name/terms/`, modifiers); default: task-clock (cpu-clock system-wide),
    /// page-faults, minor-faults, major-faults.
    #[arg(short = 'e', long = "event", value_name = "EVENTS")]
    pub events: Vec<String>,

    /// A tracepoint filter for the events of the `-e` before it, applied by the kernel.
    #[arg(long = "filter", value_name = "EXPR")]
    pub filters: Vec<String>,

    /// The filter of each `-e` value, by its index (see `Cli::parse_args`).
    #[arg(skip)]
    pub filter_of: Vec<Option<String>>,

    /// Count memperf's own tracepoint hits in a system-wide run (left out by default).
    #[arg(long = "include-self")]
    pub include_self: bool,

    /// Count on all CPUs, every process (the default when no target is given).
    #[arg(short = 'a', long = "all-cpus")]
    pub all_cpus: bool,

    /// Only these CPUs (e.g. `0`, `0,2-3`).
    #[arg(short = 'C', long = "cpu", value_name = "CPUS")]
    pub cpu: Option<String>,

    /// Existing processes to count, comma-separated; every thread of each, and the threads
    /// and children they start.
    #[arg(short = 'p', long = "pid", value_name = "PIDS", conflicts_with_all = ["tid", "all_cpus"])]
    pub pid: Option<String>,

    /// Existing threads to count, comma-separated.
    #[arg(
        short = 't',
        long = "tid",
        value_name = "TIDS",
        conflicts_with = "all_cpus"
    )]
    pub tid: Option<String>,

    /// Print the counts every MS milliseconds (at least 10), as perf stat -I.
    #[arg(short = 'I', long = "interval-print", value_name = "MS")]
    pub interval: Option<u64>,

    /// CSV output with this separator, as perf stat -x.
    #[arg(short = 'x', long = "field-separator", value_name = "SEP")]
    pub separator: Option<String>,

    /// One line per CPU instead of their sum (with -a or -C).
    #[arg(short = 'A', long = "per-cpu", visible_alias = "no-aggr")]
    pub per_cpu: bool,

    /// Run the command N times and print the mean of each count with its spread.
    #[arg(short = 'r', long = "repeat", value_name = "N", default_value_t = 1)]
    pub repeat: u32,

    /// Stop after this many seconds.
    #[arg(long = "duration", value_name = "SECS")]
    pub duration: Option<f64>,

    /// Count only: do not sample the sized tracepoints to sum their bytes.
    #[arg(long = "no-bytes")]
    pub no_bytes: bool,

    /// Write the counts to FILE instead of standard error.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Ring buffer size per CPU, in pages (a power of two), for the summed events.
    #[arg(short = 'm', long = "mmap-pages", value_name = "PAGES")]
    pub mmap_pages: Option<usize>,

    /// Command to run and count (after `--`); with -a or -C it bounds the run.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

impl StatArgs {
    /// Checks the arguments and turns them into a `StatConfig`.
    pub fn into_config(mut self) -> Result<StatConfig> {
        let cpus = parse_cpus(self.cpu.as_deref())?;
        let has_command = !self.command.is_empty();
        let target = parse_target(
            self.pid.as_deref(),
            self.tid.as_deref(),
            has_command,
            self.all_cpus || self.cpu.is_some(),
        )?;
        if self.events.is_empty() {
            if !self.filters.is_empty() {
                bail!("--filter must follow the -e whose tracepoints it filters");
            }
            // As perf stat: system-wide, the CPUs' clock rather than tasks'.
            self.events.push(if target == Target::SystemWide {
                DEFAULT_STAT_EVENTS.replacen("task-clock", "cpu-clock", 1)
            } else {
                DEFAULT_STAT_EVENTS.to_string()
            });
        }
        let events = parse_specs(&self.events, &self.filters, &mut self.filter_of)?;
        let duration = parse_duration(self.duration)?;
        let interval = match self.interval {
            Some(ms) if ms < 10 => bail!("-I must be at least 10 ms, not {ms}"),
            Some(ms) => Some(super::seconds("-I", ms as f64 / 1000.0)?),
            None => None,
        };
        if self.repeat == 0 {
            bail!("-r must be at least 1");
        }
        if self.repeat > 1 && !has_command {
            bail!("-r runs a command several times: give one after --");
        }
        if self.repeat > 1 && interval.is_some() {
            bail!("-r and -I cannot be used together");
        }
        if self.per_cpu && target != Target::SystemWide {
            bail!("-A counts per CPU: it needs -a or -C");
        }
        if let Some(sep) = &self.separator
            && sep.is_empty()
        {
            bail!("-x needs a separator, e.g. -x,");
        }
        if let Some(m) = self.mmap_pages
            && (m == 0 || !m.is_power_of_two())
        {
            bail!("-m/--mmap-pages must be a power of two, not {m}");
        }
        Ok(StatConfig {
            events,
            target,
            cpus,
            command: has_command.then_some(self.command),
            interval,
            separator: self.separator,
            per_cpu: self.per_cpu,
            repeat: self.repeat,
            duration,
            bytes: !self.no_bytes,
            include_self: self.include_self,
            output: self.output,
            mmap_pages: self.mmap_pages,
        })
    }
}
