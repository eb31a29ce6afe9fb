//! `memperf leak`: BCC memleak's options, validated into a `LeakConfig`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use clap::Args;

use super::allocs::AllocArgs;
use crate::sys::CommandStdout;

pub use crate::config::leak::{FaultOptions, LeakConfig, LeakSort, LeakTarget, ProbeVia};

pub const LEAK_EXAMPLES: &str = "\
EXAMPLES:
    memperf leak -p 1234
        Every 5 s, the 10 stacks with the most outstanding bytes in process 1234.
    memperf leak -- ./server --port 8080
        Start the command and trace it from its first allocation (probes enabled at exec);
        the report after it exits shows every allocation it left, however young.
    memperf leak 2 -- ./app
        The same, a report every 2 s (INTERVAL and COUNT come before the `--`).
    memperf leak -p 1234 -o 60000 -T 5 -z 4096 10 3
        Allocations older than a minute, 4 KiB or more, top 5, every 10 s, 3 times.
    memperf leak
        Kernel allocations: kmalloc, kmem_cache_alloc and pages (with --percpu, per-CPU too).
    memperf leak -p 1234 --folded > leaks.folded
        Outstanding bytes per stack, folded, when tracing ends (for flamegraph.pl, inferno).
        With a command (`--folded -- ./app`), its standard output goes to standard error.
    memperf leak -p 1234 -s 100
        Every allocation and free is still accounted; one stack in 100 is copied.

COST (per malloc+free pair on a malloc/free loop, 2-vCPU VM; benches/compare-leak.sh):
    Each probed call traps into the kernel: malloc's entry and return and free's entry
    cost 1.8 us per pair counted, 3.5 us sampled. By default every allocation also copies
    user stack for DWARF unwinding, 8 KiB at first, then what the program's allocation
    stacks need (dwarf,auto); at 8 KiB, 7.2 us per pair (BCC memleak: 14.6 us). With
    -s N allocations and frees are still matched exactly from small register-only samples
    and the stack is copied for one allocation in N: 4.1 us with -s 100 (memleak -s 100,
    which still traps on every call: 12.4 us). Kernel mode (no -p, no command) costs a tracepoint
    and a kernel stack walk per allocation; -s N tracks one allocation in N, as memleak
    does.

PERMISSIONS:
    User mode writes probes into tracefs uprobe_events (root), or opens the uprobe PMU
    (root, or CAP_PERFMON on 5.8+) where uprobe_events cannot be written. Kernel mode
    opens kmem tracepoints: root or CAP_PERFMON, and kernel stacks need kptr_restrict
    to allow reading /proc/kallsyms addresses (root).";

/// Arguments of `memperf leak`. The allocator and stack options say more here, as
/// memleak's do.
#[derive(Debug, Args)]
#[command(
    mut_arg("obj", |a| a.help(
        "The object that holds the allocator: a path, or a library name as memleak takes it \
         (`c` for libc, the default; `jemalloc` for libjemalloc.so)"
    )),
    mut_arg("sample_rate", |a| a.help(
        "Copy the stack of one allocation in N (allocations and frees are still all matched \
         in user mode; kernel mode tracks one allocation in N, as memleak does)"
    )),
    mut_arg("call_graph", |a| a.help(
        "How user stacks are taken: `dwarf,auto` (the default: 8192 bytes copied per sampled \
         allocation, then as much as the program's allocation stacks need, learnt from the \
         first 2000), `dwarf[,BYTES]` (that many, always) or `fp` (the kernel walks frame \
         pointers; the allocating function's caller is lost at entry probes)"
    )),
    mut_arg("probe_via", |a| a.help(
        "Where user probes are placed: tracefs uprobe_events (cheaper per hit) or the uprobe \
         PMU; by default tracefs when it is writable"
    )),
)]
pub struct LeakArgs {
    /// Trace this process (every thread, and threads created later).
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID",
        conflicts_with_all = ["command", "run"]
    )]
    pub pid: Option<u32>,

    /// Deprecated: give the command after `--` instead. Runs this command and traces it,
    /// split on white space as memleak does (no quoting).
    #[arg(
        short = 'c',
        long = "command",
        value_name = "COMMAND",
        conflicts_with = "run"
    )]
    pub command: Option<String>,

    /// Print each allocation and free as it happens.
    #[arg(short = 't', long = "trace")]
    pub trace: bool,

    /// Print the address and size of each outstanding allocation.
    #[arg(short = 'a', long = "show-allocs")]
    pub show_allocs: bool,

    /// Leave out allocations younger than this (milliseconds).
    #[arg(
        short = 'o',
        long = "older",
        value_name = "OLDER",
        default_value_t = 500
    )]
    pub older: u64,

    /// How many stacks each report shows.
    #[arg(short = 'T', long = "top", value_name = "N", default_value_t = 10)]
    pub top: usize,

    /// Only allocations of at least this many bytes.
    #[arg(short = 'z', long = "min-size", value_name = "BYTES")]
    pub min_size: Option<u64>,

    /// Only allocations of at most this many bytes.
    #[arg(short = 'Z', long = "max-size", value_name = "BYTES")]
    pub max_size: Option<u64>,

    #[command(flatten)]
    pub alloc: AllocArgs,

    /// Kernel mode: also trace the percpu allocator.
    #[arg(long = "percpu")]
    pub percpu: bool,

    /// Trace the kernel's allocators in the context of -p's process or the command instead
    /// of the process's own allocator (without either, kernel mode is the default and traces
    /// every CPU).
    #[arg(long = "kernel")]
    pub kernel: bool,

    /// Per-stack totals only, without the age filter (-o).
    #[arg(long = "combined-only")]
    pub combined_only: bool,

    /// Sort the stacks by outstanding bytes or by allocation count.
    #[arg(long = "sort", value_enum, default_value = "size")]
    pub sort: LeakSort,

    /// Print outstanding bytes per stack in folded form (`comm;root;...;leaf bytes`) when
    /// tracing ends, instead of the interval reports (a traced command's standard output
    /// then goes to standard error).
    #[arg(long = "folded")]
    pub folded: bool,

    /// Write the outstanding allocations as a gzip-compressed pprof profile when tracing ends
    /// (`outstanding/count` and `outstanding_bytes/bytes`; `-` for standard output, and a
    /// traced command's standard output then goes to standard error).
    #[arg(long = "pprof", value_name = "FILE")]
    pub pprof: Option<PathBuf>,

    /// The most outstanding allocations kept (memory is about 60 bytes each); more are
    /// counted and reported, not kept.
    #[arg(long = "max-entries", value_name = "N", default_value_t = 1_000_000)]
    pub max_entries: usize,

    /// Also record page faults with their addresses and show, for each stack, the pages its
    /// outstanding allocations have faulted in since tracing began (and how many of them
    /// faulted in none).
    #[arg(long = "faults")]
    pub faults: bool,

    /// Seconds between reports.
    #[arg(value_name = "INTERVAL", default_value_t = 5)]
    pub interval: u64,

    /// Number of reports before exiting (default: until the target exits or Ctrl-C).
    #[arg(value_name = "COUNT")]
    pub count: Option<u64>,

    /// The command to run and trace (after --), with its arguments as given; the report
    /// after it exits leaves no allocation out for its age (-o).
    #[arg(last = true, value_name = "COMMAND")]
    pub run: Vec<OsString>,
}

/// The command `leak` and `rss` run: the words after `--` as given, or (deprecated) `-c`'s
/// string split on white space; `None` without either.
pub(crate) fn command_argv(
    dash_c: Option<&str>,
    after_dashes: Vec<OsString>,
) -> Result<Option<Vec<OsString>>> {
    if !after_dashes.is_empty() {
        return Ok(Some(after_dashes));
    }
    let Some(cmd) = dash_c else {
        return Ok(None);
    };
    let argv: Vec<OsString> = cmd.split_whitespace().map(OsString::from).collect();
    if argv.is_empty() {
        bail!("empty command given to -c");
    }
    Ok(Some(argv))
}

/// `-T` and `--max-entries` of the allocation-tracing commands (leak, rss, heap).
pub(crate) fn check_top_and_entries(top: usize, max_entries: usize) -> Result<()> {
    if top == 0 {
        bail!("invalid -T 0: show at least one stack");
    }
    if max_entries == 0 {
        bail!("invalid --max-entries 0");
    }
    Ok(())
}

impl LeakArgs {
    pub fn into_config(self) -> Result<LeakConfig> {
        let target = match (self.pid, command_argv(self.command.as_deref(), self.run)?) {
            (Some(pid), _) => LeakTarget::Pid(pid),
            (None, Some(argv)) => LeakTarget::Command(argv),
            (None, None) => LeakTarget::System,
        };
        if self.interval == 0 {
            bail!("invalid interval 0: reports need at least 1 second between them");
        }
        let interval = super::seconds("the interval", self.interval as f64)?;
        if self.count == Some(0) {
            bail!("invalid count 0: give at least one report, or leave the count out");
        }
        super::check_output("--pprof", self.pprof.as_deref())?;
        if let (Some(lo), Some(hi)) = (self.min_size, self.max_size)
            && lo > hi
        {
            bail!("min size ({lo}) must be at most max size ({hi})");
        }
        check_top_and_entries(self.top, self.max_entries)?;
        let kernel = self.kernel || target == LeakTarget::System;
        if !kernel && self.percpu {
            bail!(
                "--percpu traces kernel allocations: leave out -p and the command, or add --kernel"
            );
        }
        if kernel && self.alloc.names_allocator() {
            bail!(
                "-O and --symbols-prefix name a user-space allocator: give -p or a command after --"
            );
        }
        let alloc = self.alloc.into_leak("leak", target)?;
        if self.faults && kernel {
            bail!("--faults joins page faults to user allocations: give -p or a command after --");
        }
        let data_on_stdout = self.folded || self.pprof.as_deref() == Some(Path::new("-"));
        Ok(LeakConfig {
            command_stdout: if data_on_stdout {
                CommandStdout::Stderr
            } else {
                CommandStdout::Inherit
            },
            kernel,
            trace: self.trace,
            show_allocs: self.show_allocs,
            older_ms: self.older,
            top: self.top,
            min_size: self.min_size,
            max_size: self.max_size,
            percpu: self.percpu,
            combined_only: self.combined_only,
            sort: self.sort,
            folded: self.folded,
            pprof: self.pprof,
            max_entries: self.max_entries,
            interval,
            count: self.count,
            faults: self.faults.then_some(FaultOptions {
                touchers: false,
                call_graph: alloc.call_graph,
            }),
            heap: None,
            ..alloc
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn parse(args: &[&str]) -> Result<LeakConfig> {
        let mut argv = vec!["memperf", "leak"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv)?.command {
            Command::Leak(a) => a.into_config(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn memleak_options_mean_what_they_mean_there() {
        let c = parse(&[
            "-p", "1234", "-o", "60000", "-T", "5", "-z", "4096", "10", "3",
        ])
        .unwrap();
        assert_eq!(c.target, LeakTarget::Pid(1234));
        assert!(!c.kernel);
        assert_eq!(
            (c.older_ms, c.top, c.min_size, c.interval.as_secs(), c.count),
            (60000, 5, Some(4096), 10, Some(3))
        );
        let c = parse(&["-c", "./server --port 8080"]).unwrap();
        assert_eq!(
            c.target,
            LeakTarget::Command(vec!["./server".into(), "--port".into(), "8080".into()])
        );
        let c = parse(&["--percpu"]).unwrap();
        assert!(c.kernel && c.percpu && c.target == LeakTarget::System);
        assert_eq!(c.older_ms, 500);
        assert_eq!(c.interval.as_secs(), 5);
    }

    #[test]
    fn the_command_comes_after_double_dash_with_its_arguments_whole() {
        let c = parse(&["--", "./app", "a b", "-c"]).unwrap();
        assert_eq!(
            c.target,
            LeakTarget::Command(vec!["./app".into(), "a b".into(), "-c".into()])
        );
        assert_eq!((c.interval.as_secs(), c.count), (5, None));
        let c = parse(&["-o", "0", "10", "3", "--", "./app"]).unwrap();
        assert_eq!(c.target, LeakTarget::Command(vec!["./app".into()]));
        assert_eq!(
            (c.older_ms, c.interval.as_secs(), c.count),
            (0, 10, Some(3))
        );
        assert!(!c.data_on_stdout());
        let c = parse(&["--folded", "--", "./app"]).unwrap();
        assert_eq!(c.command_stdout, CommandStdout::Stderr);
        let c = parse(&["--pprof", "-", "-c", "./app"]).unwrap();
        assert!(c.data_on_stdout());
        assert!(parse(&["-p", "1", "--", "./app"]).is_err());
        assert!(parse(&["-c", "./app", "--", "./app"]).is_err());
    }

    #[test]
    fn bad_leak_options_say_why() {
        let err = |a: &[&str]| parse(a).unwrap_err().to_string();
        assert!(err(&["-p", "1", "-s", "0"]).contains("invalid sample rate 0"));
        assert!(err(&["-p", "1", "-z", "10", "-Z", "5"]).contains("min size (10)"));
        assert!(err(&["-p", "1", "--percpu"]).contains("--percpu traces kernel"));
        assert!(err(&["-O", "c"]).contains("give -p or a command after --"));
        assert!(err(&["-p", "1", "0"]).contains("invalid interval 0"));
        assert!(err(&["-p", "1", "--call-graph", "none"]).contains("needs stacks"));
        assert!(parse(&["-p", "1", "-c", "ls"]).is_err());
    }
}
