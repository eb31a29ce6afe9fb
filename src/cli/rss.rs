//! `memperf rss`: resident memory by allocation stack, validated into an `RssConfig`.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Args;

use super::allocs::AllocArgs;
use super::leak::{FaultOptions, LeakConfig, LeakTarget, check_top_and_entries, command_argv};
use crate::sys::CommandStdout;

pub use crate::config::rss::{RssConfig, RssOutput};

pub const RSS_EXAMPLES: &str = "\
EXAMPLES:
    memperf rss -p 1234 --duration 30
        For 30 s: per allocation stack, the bytes allocated, the bytes still live, the pages
        faulted in (the resident growth it caused) and the allocations that faulted in none; then
        the faults outside every allocation by mapping ([heap] slack, //anon, files, stack).
    memperf rss --flamegraph rss.svg -- ./app --size 10
        Run ./app and draw its allocation stacks weighted by the resident bytes they caused.
    memperf rss --touchers -- ./app
        Under each allocation stack, the stacks of the code that touched its pages.
    memperf rss -p 1234 --duration 60 --pprof rss.pb.gz
        go tool pprof -sample_index=resident_space rss.pb.gz (also alloc_space, inuse_space).
    memperf rss -O jemalloc -- ./app
        An allocator other than libc's, as leak -O takes it.
    memperf rss -w rss.data -- ./app && memperf mem report --by allocation -i rss.data
        Also write the recording; the faults' addresses by allocation stack, from the file.
    memperf rss -i rss.data --folded
        The report of a recording of rss -w, replayed.

With --folded, --flamegraph - or --pprof -, standard output carries the data: the traced
command's standard output goes to standard error.

HOW:
    Every page fault of the target is sampled with its address (PERF_SAMPLE_ADDR) beside
    the allocator's uprobes (as memperf leak places them), and each fault is attributed to
    the live allocation whose range held the address at that moment, else to the mapping
    (MMAP2 records of anonymous and file mappings, the break's [heap]). A page is counted
    once per allocation. glibc's large allocations served by mmap are ordinary allocations
    here; pages the allocator itself writes (chunk headers) fall to the mapping.

PERMISSIONS:
    As memperf leak: root for tracefs uprobe_events (or the uprobe PMU with CAP_PERFMON on
    5.8+), and the page-fault software event (perf_event_paranoid <= 1 for a process of
    your own, else CAP_PERFMON). Linux 4.17+ for the uprobe PMU path; 3.5+ with tracefs.";

/// Arguments of `memperf rss`.
#[derive(Debug, Args)]
pub struct RssArgs {
    /// Trace this process (every thread, and threads created later).
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID",
        conflicts_with_all = ["command", "run"]
    )]
    pub pid: Option<u32>,

    /// Deprecated: give the command after `--` instead. Runs this command and traces it,
    /// split on white space (no quoting).
    #[arg(
        short = 'c',
        long = "command",
        value_name = "COMMAND",
        conflicts_with = "run"
    )]
    pub command: Option<String>,

    /// Stop after this many seconds (default: when the target exits, or at Ctrl-C).
    #[arg(long = "duration", value_name = "SECONDS")]
    pub duration: Option<u64>,

    /// How many allocation stacks the text report shows (the most resident first).
    #[arg(short = 'T', long = "top", value_name = "N", default_value_t = 10)]
    pub top: usize,

    /// Also sample each fault's user stack and show, under each allocation stack, the
    /// stacks that touched its pages (costs a stack copy per fault).
    #[arg(long = "touchers")]
    pub touchers: bool,

    /// Print resident bytes per allocation stack in folded form (`comm;root;...;leaf bytes`)
    /// instead of the text report.
    #[arg(long = "folded", conflicts_with = "flamegraph")]
    pub folded: bool,

    /// Draw a flame graph of the allocation stacks weighted by resident bytes into this SVG
    /// file (`-` for standard output) instead of the text report.
    #[arg(long = "flamegraph", value_name = "FILE")]
    pub flamegraph: Option<PathBuf>,

    /// Also write a gzip-compressed pprof profile: alloc_objects/alloc_space,
    /// inuse_objects/inuse_space and resident_pages/resident_space (the default).
    #[arg(long = "pprof", value_name = "FILE")]
    pub pprof: Option<PathBuf>,

    #[command(flatten)]
    pub alloc: AllocArgs,

    /// The most live allocations kept; more are counted and reported, not kept (their
    /// faults fall to the mapping).
    #[arg(long = "max-entries", value_name = "N", default_value_t = 1_000_000)]
    pub max_entries: usize,

    /// Also write what was traced into this perf.data file: the allocator's probes with
    /// their argument and result registers and unwound stacks, the page faults with their
    /// addresses, the mappings. `memperf mem report --by allocation -i FILE` replays it;
    /// `perf script -i FILE` reads it.
    #[arg(
        short = 'w',
        long = "write",
        value_name = "FILE",
        conflicts_with = "input"
    )]
    pub write: Option<PathBuf>,

    /// Read a recording of `memperf rss -w` instead of tracing: its allocator calls and
    /// page faults are replayed in time order into the same join, for the same report.
    #[arg(
        short = 'i',
        long = "input",
        value_name = "FILE",
        conflicts_with_all = ["pid", "command", "run", "duration", "sample_rate"]
    )]
    pub input: Option<PathBuf>,

    /// The command to run and trace (after --), with its arguments as given.
    #[arg(last = true, value_name = "COMMAND")]
    pub run: Vec<OsString>,
}

impl RssArgs {
    pub fn into_config(self) -> Result<RssConfig> {
        let command = command_argv(self.command.as_deref(), self.run)?;
        let target = match (self.pid, command) {
            // A recording's processes are its own; the target only names the report.
            _ if self.input.is_some() => LeakTarget::System,
            (Some(pid), _) => LeakTarget::Pid(pid),
            (None, Some(argv)) => LeakTarget::Command(argv),
            (None, None) => {
                bail!("memperf rss needs a process: give -p PID or -- COMMAND (or -i FILE)")
            }
        };
        if self.duration == Some(0) {
            bail!("invalid --duration 0: give at least 1 second, or leave it out");
        }
        let duration = self
            .duration
            .map(|d| super::seconds("--duration", d as f64))
            .transpose()?;
        check_top_and_entries(self.top, self.max_entries)?;
        let alloc = self.alloc.into_leak("rss", target)?;
        super::check_output("--pprof", self.pprof.as_deref())?;
        super::check_output("--flamegraph", self.flamegraph.as_deref())?;
        let stdout = Some(std::path::Path::new("-"));
        let data_on_stdout =
            self.folded || self.flamegraph.as_deref() == stdout || self.pprof.as_deref() == stdout;
        let output = match (self.folded, self.flamegraph) {
            (true, _) => RssOutput::Folded,
            (false, Some(p)) => RssOutput::Flamegraph(p),
            (false, None) => RssOutput::Text,
        };
        let leak = LeakConfig {
            command_stdout: if data_on_stdout {
                CommandStdout::Stderr
            } else {
                CommandStdout::Inherit
            },
            top: self.top,
            max_entries: self.max_entries,
            faults: Some(FaultOptions {
                touchers: self.touchers,
                call_graph: alloc.call_graph,
            }),
            ..alloc
        };
        Ok(RssConfig {
            leak,
            duration,
            output,
            pprof: self.pprof,
            top: self.top,
            write: self.write,
            input: self.input,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;
    use std::time::Duration;

    fn parse(args: &[&str]) -> Result<RssConfig> {
        let mut argv = vec!["memperf", "rss"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv)?.command {
            Command::Rss(a) => a.into_config(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn rss_options_become_a_leak_run_with_faults() {
        let c = parse(&["-p", "12", "--duration", "30", "--touchers"]).unwrap();
        assert_eq!(c.leak.target, LeakTarget::Pid(12));
        assert_eq!(c.duration, Some(Duration::from_secs(30)));
        assert!(c.leak.faults.is_some_and(|f| f.touchers));
        assert_eq!(c.output, RssOutput::Text);
        assert_eq!(c.write, None);
        let c = parse(&["-c", "./app x", "--flamegraph", "rss.svg", "-w", "r.data"]).unwrap();
        assert_eq!(c.output, RssOutput::Flamegraph("rss.svg".into()));
        assert_eq!(c.write, Some("r.data".into()));
        assert!(c.leak.faults.is_some_and(|f| !f.touchers));
    }

    #[test]
    fn the_command_comes_after_double_dash_and_data_on_stdout_sends_its_output_away() {
        let c = parse(&["--", "./app", "x y"]).unwrap();
        assert_eq!(
            c.leak.target,
            LeakTarget::Command(vec!["./app".into(), "x y".into()])
        );
        assert!(!c.leak.data_on_stdout());
        for data in [&["--folded"][..], &["--flamegraph", "-"], &["--pprof", "-"]] {
            let args: Vec<&str> = data.iter().copied().chain(["--", "./app"]).collect();
            assert!(parse(&args).unwrap().leak.data_on_stdout(), "{data:?}");
        }
        assert!(parse(&["-p", "1", "--", "./app"]).is_err());
        assert!(parse(&["-i", "r.data", "--", "./app"]).is_err());
    }

    #[test]
    fn bad_rss_options_are_refused_with_a_reason() {
        let e = |a: &[&str]| parse(a).unwrap_err().to_string();
        assert!(e(&[]).contains("-p PID or -- COMMAND"));
        assert!(e(&["-p", "1", "--duration", "0"]).contains("--duration 0"));
        assert!(e(&["-p", "1", "-m", "3"]).contains("power of two"));
        assert!(e(&["-c", "  "]).contains("empty command"));
        assert!(parse(&["-p", "1", "--call-graph", "bogus"]).is_err());
        assert!(parse(&["-p", "1", "--folded", "--flamegraph", "x"]).is_err());
        assert!(parse(&["-p", "1", "-i", "r.data"]).is_err());
        assert!(parse(&["-i", "r.data", "-w", "w.data"]).is_err());
        assert_eq!(
            parse(&["-i", "r.data"]).unwrap().input,
            Some("r.data".into())
        );
    }
}
