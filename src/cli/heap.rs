//! `memperf heap`: heaptrack's and memray's analyses on a live process, validated into a
//! `HeapConfig`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::Args;

use super::allocs::AllocArgs;
use super::leak::{LeakConfig, LeakTarget, check_top_and_entries};

pub use crate::config::heap::{HeapConfig, HeapMetric, HeapOutput};

pub const HEAP_EXAMPLES: &str = "\
EXAMPLES:
    memperf heap -p 1234 --duration 30
        For 30 s: the peak of live heap bytes and what it consisted of, the temporary
        allocations, the allocations by stack and size, what is still live, and how much of
        the heap's resident memory no live allocation holds (what the allocator keeps).
    memperf heap -- ./app --port 80
        Run ./app under the probes (from its first allocation) until it exits.
    memperf heap -p 1234 5
        Every 5 s, the analyses so far (peak, temporaries, live bytes...), then the final
        report when tracing ends (INTERVAL [COUNT], as memperf leak takes them).
    memperf heap --interval 0.5 -- ./app
        The same every half second, for a command (INTERVAL before the `--`).
    memperf heap -p 1234 --peak --folded > peak.folded
        The peak's live bytes by stack, folded (comm;root;...;leaf bytes).
    memperf heap -- ./app --temporary --flamegraph temp.svg
        The temporary allocations by stack, as a flame graph.
    memperf heap -p 1234 --timeline heap.svg --timeline-csv heap.csv
        Live heap bytes, resident and mapped memory over time, the peak marked.
    memperf heap -p 1234 --pprof heap.pb.gz
        alloc_objects, alloc_space, inuse_objects, inuse_space (go tool pprof, Pyroscope).
    memperf heap -p 1234 -w heap.data && memperf heap -i heap.data
        Also write the recording; the same analyses from it later.

DEFINITIONS (heaptrack's and memray's, so the figures agree with theirs):
    peak       the maximum, over every allocator call in time order, of the bytes
               allocated minus the bytes freed; each stack's share is its live bytes then.
    temporary  heaptrack's: a free that directly follows its own allocation, with no other
               allocator call in between. memray's (--temporary-threshold N, default 1):
               freed by its own thread before N other allocations of that thread.
    leaked     allocated while traced and live at the end.
    retained   resident pages of the heap's mappings ([heap], malloc's arenas and mmap'd
               chunks) that no live allocation overlaps, read from /proc/PID/pagemap while
               the process lives: free memory the allocator keeps, most of which
               malloc_trim(0) would give back. Not a leak.

PERMISSIONS:
    As memperf leak: root for tracefs uprobe_events (or the uprobe PMU with CAP_PERFMON on
    5.8+); /proc/PID/pagemap of the target (ptrace access).";

/// Arguments of `memperf heap`.
#[derive(Debug, Args)]
pub struct HeapArgs {
    /// Trace this process (every thread, and threads created later).
    #[arg(short = 'p', long = "pid", value_name = "PID", conflicts_with_all = ["command", "argv"])]
    pub pid: Option<u32>,

    /// Run this command and trace it (split on white space; or give it after `--`).
    #[arg(
        short = 'c',
        long = "command",
        value_name = "COMMAND",
        conflicts_with = "argv"
    )]
    pub command: Option<String>,

    /// Stop after this many seconds (default: when the target exits, or at Ctrl-C).
    #[arg(long = "duration", value_name = "SECONDS")]
    pub duration: Option<f64>,

    /// The peak's live bytes by stack (the default metric of --folded and --flamegraph).
    #[arg(long = "peak", conflicts_with_all = ["temporary", "leaked", "metric"])]
    pub peak: bool,

    /// Temporary allocations by stack, counted (heaptrack's rule).
    #[arg(long = "temporary", conflicts_with_all = ["leaked", "metric"])]
    pub temporary: bool,

    /// Bytes still live at the end, by stack.
    #[arg(long = "leaked", conflicts_with = "metric")]
    pub leaked: bool,

    /// What --folded and --flamegraph weigh.
    #[arg(long = "metric", value_enum)]
    pub metric: Option<HeapMetric>,

    /// Print the chosen metric by stack in folded form (`comm;root;...;leaf N`) instead of
    /// the text report.
    #[arg(long = "folded", conflicts_with = "flamegraph")]
    pub folded: bool,

    /// Draw the chosen metric by stack as a flame graph into this SVG file instead of the
    /// text report.
    #[arg(long = "flamegraph", value_name = "FILE")]
    pub flamegraph: Option<PathBuf>,

    /// Also write a gzip-compressed pprof profile: alloc_objects/alloc_space over the run,
    /// inuse_objects/inuse_space at the end (the peak's contents: --peak --folded or
    /// --flamegraph).
    #[arg(long = "pprof", value_name = "FILE")]
    pub pprof: Option<PathBuf>,

    /// Also draw live heap bytes, resident and mapped memory over time into this SVG file,
    /// the peak marked.
    #[arg(long = "timeline", value_name = "FILE")]
    pub timeline: Option<PathBuf>,

    /// Also write the timeline's data as CSV (seconds, live heap, resident, mapped bytes).
    #[arg(long = "timeline-csv", value_name = "FILE")]
    pub timeline_csv: Option<PathBuf>,

    /// memray's temporary threshold: freed before this many other allocations of the thread.
    #[arg(long = "temporary-threshold", value_name = "N", default_value_t = 1)]
    pub temporary_threshold: usize,

    /// How many stacks each table of the text report shows.
    #[arg(short = 'T', long = "top", value_name = "N", default_value_t = 10)]
    pub top: usize,

    #[command(flatten)]
    pub alloc: AllocArgs,

    /// The most live allocations kept; more are counted and reported, not kept.
    #[arg(long = "max-entries", value_name = "N", default_value_t = 1_000_000)]
    pub max_entries: usize,

    /// Also write what was traced into this perf.data file (`memperf heap -i FILE` replays
    /// it; `perf script -i FILE` reads it).
    #[arg(
        short = 'w',
        long = "write",
        value_name = "FILE",
        conflicts_with = "input"
    )]
    pub write: Option<PathBuf>,

    /// Analyse a recording of `memperf heap -w` (or `rss -w`, `leak`'s probes recorded by
    /// `record`) instead of tracing.
    #[arg(
        short = 'i',
        long = "input",
        value_name = "FILE",
        conflicts_with_all = ["pid", "command", "duration", "argv", "sample_rate"]
    )]
    pub input: Option<PathBuf>,

    /// Seconds between reports of the analyses so far, as `--interval` (default: one report,
    /// when tracing ends).
    #[arg(value_name = "INTERVAL", conflicts_with = "interval_flag")]
    pub interval: Option<f64>,

    /// Number of interval reports before tracing ends (default: until the target exits, the
    /// duration ends or Ctrl-C).
    #[arg(value_name = "COUNT")]
    pub count: Option<u64>,

    /// Seconds between reports of the analyses so far (the INTERVAL argument's long form;
    /// fractions allowed).
    #[arg(long = "interval", value_name = "SECONDS")]
    pub interval_flag: Option<f64>,

    /// The command to run and trace (after `--`).
    #[arg(last = true, value_name = "COMMAND")]
    pub argv: Vec<OsString>,
}

impl HeapArgs {
    fn target(&self) -> Result<LeakTarget> {
        if self.input.is_some() {
            // A recording's processes are its own.
            return Ok(LeakTarget::System);
        }
        if let Some(pid) = self.pid {
            return Ok(LeakTarget::Pid(pid));
        }
        let argv: Vec<OsString> = match &self.command {
            Some(cmd) => cmd.split_whitespace().map(Into::into).collect(),
            None => self.argv.clone(),
        };
        if argv.is_empty() {
            bail!("memperf heap needs a process: give -p PID, -- COMMAND (or -c), or -i FILE");
        }
        Ok(LeakTarget::Command(argv))
    }

    fn metric(&self) -> HeapMetric {
        match (self.temporary, self.leaked, self.metric) {
            (true, _, _) => HeapMetric::Temporary,
            (_, true, _) => HeapMetric::Leaked,
            (_, _, Some(m)) => m,
            _ => HeapMetric::Peak,
        }
    }

    pub fn into_config(self) -> Result<HeapConfig> {
        let target = self.target()?;
        let duration = self
            .duration
            .map(|d| super::seconds("--duration", d))
            .transpose()?;
        let (interval, count) = self.reports()?;
        check_top_and_entries(self.top, self.max_entries)?;
        let metric = self.metric();
        let alloc = self.alloc.into_leak("heap", target)?;
        for (option, path) in [
            ("--pprof", &self.pprof),
            ("--flamegraph", &self.flamegraph),
            ("--timeline", &self.timeline),
            ("--timeline-csv", &self.timeline_csv),
            ("-w", &self.write),
        ] {
            super::check_output(option, path.as_deref())?;
        }
        // Data on standard output (folded stacks, an SVG or a profile to `-`): the traced
        // command's own lines go to standard error instead.
        let dash = |p: &Option<PathBuf>| p.as_deref() == Some(std::path::Path::new("-"));
        let data_on_stdout = self.folded
            || dash(&self.flamegraph)
            || dash(&self.pprof)
            || dash(&self.timeline)
            || dash(&self.timeline_csv);
        let output = match (self.folded, self.flamegraph) {
            (true, _) => HeapOutput::Folded,
            (false, Some(p)) => HeapOutput::Flamegraph(p),
            (false, None) => HeapOutput::Text,
        };
        let leak = LeakConfig {
            command_stdout: if data_on_stdout {
                crate::sys::CommandStdout::Stderr
            } else {
                crate::sys::CommandStdout::Inherit
            },
            top: self.top,
            max_entries: self.max_entries,
            heap: Some(self.temporary_threshold),
            ..alloc
        };
        Ok(HeapConfig {
            leak,
            duration,
            output,
            metric,
            pprof: self.pprof,
            timeline: self.timeline,
            timeline_csv: self.timeline_csv,
            temporary_threshold: self.temporary_threshold,
            top: self.top,
            write: self.write,
            input: self.input,
            interval,
            count,
        })
    }

    /// INTERVAL [COUNT] (or `--interval`), as leak takes them: a positive interval, a count
    /// of at least one, and neither for a recording (`-i`), which has no time to wait for.
    fn reports(&self) -> Result<(Option<Duration>, Option<u64>)> {
        let secs = self.interval.or(self.interval_flag);
        if self.input.is_some() && (secs.is_some() || self.count.is_some()) {
            bail!("INTERVAL and COUNT report while tracing: -i reads a recording at once");
        }
        if secs == Some(0.0) {
            bail!("invalid interval 0: reports need time between them");
        }
        let interval = secs
            .map(|s| super::seconds("the interval", s))
            .transpose()?;
        if self.count == Some(0) {
            bail!("invalid count 0: give at least one report, or leave the count out");
        }
        if self.count.is_some() && interval.is_none() {
            bail!("COUNT needs an interval: memperf heap --interval SECONDS COUNT");
        }
        Ok((interval, self.count))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn parse(args: &[&str]) -> Result<HeapConfig> {
        let mut argv = vec!["memperf", "heap"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv)?.command {
            Command::Heap(a) => a.into_config(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn a_command_after_dashes_or_c_and_the_metric_options() {
        let c = parse(&["--temporary", "--folded", "--", "./app", "a b"]).unwrap();
        assert_eq!(
            c.leak.target,
            LeakTarget::Command(vec!["./app".into(), "a b".into()])
        );
        assert_eq!(
            (c.metric, c.output),
            (HeapMetric::Temporary, HeapOutput::Folded)
        );
        assert_eq!(c.leak.heap, Some(1));
        let c = parse(&["-c", "./app x", "--flamegraph", "p.svg"]).unwrap();
        assert_eq!(c.metric, HeapMetric::Peak);
        assert_eq!(c.output, HeapOutput::Flamegraph("p.svg".into()));
        let c = parse(&["-p", "12", "--metric", "allocations", "--duration", "2.5"]).unwrap();
        assert_eq!(c.leak.target, LeakTarget::Pid(12));
        assert_eq!(c.metric, HeapMetric::Allocations);
        assert_eq!(c.duration, Some(Duration::from_millis(2500)));
    }

    #[test]
    fn bad_heap_options_say_why() {
        let err = |a: &[&str]| parse(a).map(|_| ()).unwrap_err().to_string();
        assert!(err(&[]).contains("needs a process"));
        assert!(err(&["-p", "1", "-T", "0"]).contains("-T 0"));
        assert!(err(&["-p", "1", "--call-graph", "none"]).contains("needs stacks"));
        assert!(err(&["-p", "1", "--duration", "0"]).contains("--duration"));
        assert!(parse(&["-p", "1", "--", "ls"]).is_err());
        assert!(parse(&["-p", "1", "--peak", "--temporary"]).is_err());
        assert!(err(&["-p", "1", "0"]).contains("invalid interval 0"));
        assert!(err(&["-p", "1", "2", "0"]).contains("invalid count 0"));
        assert!(err(&["-p", "1", "-1"]).contains("-1"));
        assert!(err(&["-i", "f", "5"]).contains("-i reads a recording"));
        assert!(parse(&["-p", "1", "2", "--interval", "3"]).is_err());
    }

    #[test]
    fn interval_and_count_as_leak_takes_them() {
        let c = parse(&["-p", "12", "5"]).unwrap();
        assert_eq!((c.interval, c.count), (Some(Duration::from_secs(5)), None));
        let c = parse(&["-p", "12", "2", "3"]).unwrap();
        assert_eq!(
            (c.interval, c.count),
            (Some(Duration::from_secs(2)), Some(3))
        );
        let c = parse(&["--interval", "0.5", "--", "./app"]).unwrap();
        assert_eq!(c.interval, Some(Duration::from_millis(500)));
        assert_eq!(c.leak.target, LeakTarget::Command(vec!["./app".into()]));
        let c = parse(&["1", "2", "--", "./app"]).unwrap();
        assert_eq!(
            (c.interval, c.count),
            (Some(Duration::from_secs(1)), Some(2))
        );
        let c = parse(&["-p", "12"]).unwrap();
        assert_eq!((c.interval, c.count), (None, None));
    }
}
