//! Command-line definitions (clap) and their validation into typed configs.
//!
//! No subcommand sees raw strings: `Cli` is parsed by clap, then each
//! subcommand's arguments are checked and turned into a `*Config` before any
//! work starts.

use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

pub mod agent;
pub mod allocs;
pub mod diff;
pub mod heap;
pub mod leak;
pub mod list;
pub mod mem;
pub mod reclaim;
mod record;
mod report;
pub mod rss;
pub mod slab;
pub mod snoop;
pub mod stacks;
pub mod stat;
pub mod swapin;
pub mod tool;
pub mod triage;
mod values;

pub use crate::config::record::*;
pub use crate::config::report::*;
pub use record::*;
pub use report::*;

/// memperf: a memory profiler for Linux built on perf_event_open, without BPF.
#[derive(Debug, Parser)]
#[command(name = "memperf", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// Parses the process's arguments, exiting with clap's message on error.
    pub fn parse_args() -> Cli {
        use clap::CommandFactory;
        let matches = Cli::command().get_matches();
        Cli::from_matches(&matches).unwrap_or_else(|e| e.exit())
    }

    /// Parses `argv`, as `parse_args` does.
    pub fn try_parse_args<I, T>(argv: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::CommandFactory;
        let matches = Cli::command().try_get_matches_from(argv)?;
        Cli::from_matches(&matches)
    }

    /// As clap derives it, plus what derive cannot say: after which `-e` each `--filter`
    /// came, as perf applies a filter to the events of the `-e` before it.
    fn from_matches(matches: &clap::ArgMatches) -> Result<Cli, clap::Error> {
        use clap::FromArgMatches;
        let mut cli = Cli::from_arg_matches(matches)?;
        match (&mut cli.command, matches.subcommand()) {
            (Command::Record(args), Some(("record", sub))) => {
                args.filter_of = record::filters_by_event(sub);
            }
            (Command::Stat(args), Some(("stat", sub))) => {
                args.filter_of = record::filters_by_event(sub);
            }
            (Command::Agent(args), Some(("agent", sub))) => {
                args.filter_of = record::filters_by_event(sub);
            }
            _ => {}
        }
        Ok(cli)
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Record page faults, tracepoints or other events with their stacks into a perf.data file.
    #[command(after_help = record::RECORD_EXAMPLES)]
    Record(RecordArgs),
    /// Read a perf.data file (memperf's or perf's), unwind and symbolize its stacks, and print
    /// the top stacks or folded stacks for flame graphs.
    #[command(after_help = report::REPORT_EXAMPLES)]
    Report(ReportArgs),
    /// Print every sample as perf script does (header line, then one line per frame), for
    /// stackcollapse-perf.pl, inferno-collapse-perf and other perf-script readers.
    #[command(after_help = report::SCRIPT_EXAMPLES)]
    Script(ScriptArgs),
    /// Compare two profiles of the same event (recordings, folded stacks or pprof): the
    /// stacks that changed most, a differential flame graph, folded stacks with both counts,
    /// or a pprof diff.
    #[command(after_help = diff::DIFF_EXAMPLES)]
    Diff(diff::DiffArgs),
    /// Count events without sampling, as perf stat: totals, per interval (-I), per CPU (-A),
    /// CSV (-x), repeated runs (-r); the bytes of sized memory tracepoints summed.
    #[command(after_help = stat::STAT_EXAMPLES)]
    Stat(stat::StatArgs),
    /// Outstanding allocations by stack, as BCC's memleak prints them, without BPF: user
    /// allocators through uprobes (-p, or a command after --), kernel allocators through
    /// kmem tracepoints.
    #[command(after_help = leak::LEAK_EXAMPLES)]
    Leak(leak::LeakArgs),
    /// Resident memory by allocation stack: page faults joined to the live allocations
    /// that own their addresses (bytes allocated, live, pages faulted in, none faulted in).
    #[command(after_help = rss::RSS_EXAMPLES)]
    Rss(rss::RssArgs),
    /// heaptrack's analyses on a live process, without LD_PRELOAD or a restart: the peak and
    /// what it consisted of, temporary allocations, sizes, churn, the timeline, and how much
    /// resident heap no live allocation holds.
    #[command(after_help = heap::HEAP_EXAMPLES)]
    Heap(heap::HeapArgs),
    /// Page faults by stack: who touched new memory, as the book's faults.bt and
    /// `stackcount t:exceptions:page_fault_user`, with whole DWARF-unwound user stacks.
    #[command(after_help = FAULTS_EXAMPLES)]
    Faults(stacks::FaultsArgs),
    /// brk() calls by stack, with the bytes each stack grew the heap by, as the book's
    /// brkstack.bt, with whole DWARF-unwound user stacks (through libc's sbrk and malloc).
    #[command(after_help = BRKSTACK_EXAMPLES)]
    Brkstack(stacks::BrkstackArgs),
    /// Page faults by the file (or //anon, [heap], [stack]) they land in, as the book's
    /// ffaults.bt, from each fault's address and the process's mappings (no kprobe).
    #[command(after_help = FFAULTS_EXAMPLES)]
    Ffaults(tool::ToolArgs),
    /// Page faults in file mappings by command and file, as the book's fmapfault.
    #[command(after_help = FMAPFAULT_EXAMPLES)]
    Fmapfault(tool::ToolArgs),
    /// Page faults in hugetlb mappings (MAP_HUGETLB, SHM_HUGETLB, hugetlbfs) per process, as
    /// hfaults.bt, without its kprobe on hugetlb_fault; transparent huge page faults apart.
    #[command(after_help = HFAULTS_EXAMPLES)]
    Hfaults(tool::ToolArgs),
    /// Swap-ins per process and interval, as BCC's swapin, from major faults in anonymous
    /// and shmem memory (no swap-in tracepoint exists; BCC needs a kprobe).
    #[command(after_help = SWAPIN_EXAMPLES)]
    Swapin(swapin::SwapinArgs),
    /// Every direct reclaim and memory-cgroup reclaim: latency and pages freed, as BCC's
    /// drsnoop, from the vmscan tracepoints (no kallsyms lookup, memcg limits included).
    #[command(after_help = DRSNOOP_EXAMPLES)]
    Drsnoop(reclaim::DrsnoopArgs),
    /// Time spent reclaiming memory every second (slab shrinking, direct and memory-cgroup
    /// reclaim, kswapd wakeups, page writes), as the book's vmscan.bt, with latency
    /// histograms at the end.
    #[command(after_help = VMSCAN_EXAMPLES)]
    Vmscan(reclaim::VmscanArgs),
    /// Kernel slab allocations per cache, top-like, as BCC's slabratetop, from the kmem
    /// tracepoints (kmem_cache_alloc names its cache; kmalloc by size class).
    #[command(after_help = SLABRATETOP_EXAMPLES)]
    Slabratetop(slab::SlabratetopArgs),
    /// Every mmap, munmap and mremap with the file mapped (full paths, anonymous memory
    /// too), as the book's mmapsnoop, from the syscall tracepoints and MMAP2 records.
    #[command(after_help = MMAPSNOOP_EXAMPLES)]
    Mmapsnoop(snoop::SnoopArgs),
    /// Every System V shared-memory call (shmget, shmat, shmdt, shmctl) with its flags
    /// decoded, as BCC's shmsnoop, from the syscall tracepoints; POSIX shm mappings too.
    #[command(after_help = SHMSNOOP_EXAMPLES)]
    Shmsnoop(snoop::SnoopArgs),
    /// Every OOM kill: the victim, the task that triggered it, its cgroup and its stack
    /// (kernel, and user unwound with DWARF), as BCC's oomkill prints it, from the
    /// oom:mark_victim tracepoint (Linux 4.13+).
    #[command(after_help = OOMKILL_EXAMPLES)]
    Oomkill(tool::ToolArgs),
    /// What can be traced here, and why not: every event memperf knows with its
    /// availability, each tool with the events it needs, the capability report (--check),
    /// and the allocators `memperf leak` would probe (--allocators).
    #[command(after_help = list::LIST_EXAMPLES)]
    List(list::ListArgs),
    /// The USE method for memory in one command: utilization, saturation and errors from
    /// /proc and the kernel log over a few seconds, each finding with the memperf command
    /// to run next (no perf events).
    #[command(after_help = triage::TRIAGE_EXAMPLES)]
    Triage(triage::TriageArgs),
    /// Hardware memory sampling as perf mem, without BPF: loads and stores with their data
    /// addresses, cache levels, snoops, TLB and latency (record), perf mem report's table
    /// with data symbols, or the weight by mapping (report).
    #[command(after_help = mem::MEM_EXAMPLES)]
    Mem(mem::MemArgs),
    /// Run as a continuous profiler: every window (--interval) the aggregated samples become
    /// one pprof profile per process group (service, command), labelled with host, pid,
    /// comm, container, kernel and version, written to a directory.
    #[command(after_help = agent::AGENT_EXAMPLES)]
    Agent(agent::AgentArgs),
}

const FAULTS_EXAMPLES: &str = "\
EXAMPLES:
    memperf faults -- ./app
        Every page fault of ./app by stack, printed when it exits.
    memperf faults -p 1234 -d 30 -f > faults.folded
        30 s of one process's faults, folded for a flame graph.
    memperf faults -a -c 100 --flamegraph faults.svg -d 10
        One fault in 100 on the whole system for 10 s, drawn.
    memperf faults --major -P -a
        Major faults (file reads, swap-ins) per process and stack.
    memperf faults -i perf.data
        The same from `memperf record -e page-faults` or `perf record -e page-faults
        --call-graph dwarf`.

PERMISSIONS: your own processes with perf_event_paranoid <= 2 (kernel frames need <= 1);
root or CAP_PERFMON for -a.";

const BRKSTACK_EXAMPLES: &str = "\
EXAMPLES:
    memperf brkstack -- ./app
        Every brk() of ./app by stack, with the bytes each stack grew the heap by.
    memperf brkstack -p 1234 -d 60 -f --bytes > brk.folded
        A minute of one process, folded by bytes grown.
    memperf brkstack -a -w brk.data
        The whole system until Ctrl-C, also saved as a recording (-i brk.data replays it).

PERMISSIONS: root, or CAP_PERFMON with read access to tracefs (syscall tracepoints,
CONFIG_FTRACE_SYSCALLS).";

const FFAULTS_EXAMPLES: &str = "\
EXAMPLES:
    memperf ffaults -- ./app
        The faults of ./app per file, anonymous memory as //anon, printed when it exits.
    memperf ffaults -a -d 10
        The whole system for 10 s.
    memperf ffaults -i perf.data
        From `memperf record -e page-faults` or `perf record -e page-faults -d`.

PERMISSIONS: your own processes with perf_event_paranoid <= 2; root or CAP_PERFMON for -a.";

const FMAPFAULT_EXAMPLES: &str = "\
EXAMPLES:
    memperf fmapfault -a -d 10
        Which commands fault in which files, for 10 s.
    memperf fmapfault -p 1234
        One process until Ctrl-C.

PERMISSIONS: your own processes with perf_event_paranoid <= 2; root or CAP_PERFMON for -a.";

const HFAULTS_EXAMPLES: &str = "\
EXAMPLES:
    memperf hfaults
        Huge page faults per process on the whole system, until Ctrl-C.
    memperf hfaults -- ./app
        Those of one command; its transparent huge page faults (@thp, @mthp by size) and
        failed THP allocations (@thp_fallback) apart, from kmem:mm_page_alloc.

PERMISSIONS: your own processes with perf_event_paranoid <= 2; root or CAP_PERFMON for -a;
THP faults apart need root, CAP_PERFMON or perf_event_paranoid -1 (else left out, said so).";

const SWAPIN_EXAMPLES: &str = "\
EXAMPLES:
    memperf swapin
        Swap-in faults per process every second, with the system's pswpin, until Ctrl-C.
    memperf swapin 5 12
        Every 5 s, 12 times.
    memperf swapin -p 1234 -w swap.data
        One process, also saved as a recording (-i swap.data replays it, without pswpin).

A swap-in fault can read several pages (swap readahead, vm.page-cluster): the count is of
faults; pswpin is of pages, system-wide.

PERMISSIONS: your own processes with perf_event_paranoid <= 2; root or CAP_PERFMON for the
whole system (the default).";

const DRSNOOP_EXAMPLES: &str = "\
EXAMPLES:
    memperf drsnoop
        Every direct and memory-cgroup reclaim on the system, until Ctrl-C.
    memperf drsnoop -T -U -v
        With seconds since the first, the uid and free memory.
    memperf drsnoop -n java --stack
        Reclaims of commands containing `java`, with the stack that reclaimed.
    memperf drsnoop -w dr.data -d 600; memperf drsnoop -i dr.data
        Ten minutes saved as a recording, printed again elsewhere.

The last column says which reclaim: `direct` (the system is short of memory) or `memcg`
(the task's memory cgroup is at its limit: what containers hit, and what BCC's drsnoop
does not show).

PERMISSIONS: root, or CAP_PERFMON with read access to tracefs.";

const VMSCAN_EXAMPLES: &str = "\
EXAMPLES:
    memperf vmscan
        A line a second for the whole system, histograms at Ctrl-C.
    memperf vmscan 10 6
        A line every 10 s, six times.
    memperf vmscan -w vm.data -d 3600; memperf vmscan -i vm.data
        An hour saved as a recording, printed again elsewhere.

Sums are in milliseconds with microseconds (the book's vmscan.bt prints whole
milliseconds); WRITEPAGE counts mm_vmscan_write_folio (its name by Linux 6.1) or
mm_vmscan_writepage, whichever the kernel has.

PERMISSIONS: root, or CAP_PERFMON with read access to tracefs.";

const SLABRATETOP_EXAMPLES: &str = "\
EXAMPLES:
    memperf slabratetop
        The caches allocating the most bytes, every second, until Ctrl-C.
    memperf slabratetop -C -s count -r 10 5 3
        Ten rows by allocations, every 5 s, three times, without clearing the screen.
    memperf slabratetop -- ./server
        The allocations of one command (made in its context).

PERMISSIONS: root, or CAP_PERFMON with read access to tracefs.";

const MMAPSNOOP_EXAMPLES: &str = "\
EXAMPLES:
    memperf mmapsnoop
        Every mmap on the system, until Ctrl-C.
    memperf mmapsnoop -T -n java --stack
        With the time, commands containing `java`, each call's stack under its line.
    memperf mmapsnoop -- ./app
        One command's mappings, from its loader's first one.

PROT is R/W/E; MAP is S (shared), P (private), F (fixed), A (anonymous); OFFS and SIZE in
KiB. munmap lines say UNMAP and what was mapped there; mremap lines REMAP and the new size.
A failed call shows its error.

PERMISSIONS: root, or CAP_PERFMON with read access to tracefs (syscall tracepoints,
CONFIG_FTRACE_SYSCALLS).";

const SHMSNOOP_EXAMPLES: &str = "\
EXAMPLES:
    memperf shmsnoop
        Every shared-memory call on the system, until Ctrl-C.
    memperf shmsnoop -T -p 1234
        One process, with seconds since the first call.
    memperf shmsnoop -t 1234 --stack
        One thread (a TID column), each call's stack under its line.

POSIX shared memory (shm_open) is an open of a /dev/shm file and an mmap of it: the mmap
shows as a MMAP line with the file's path and size.

PERMISSIONS: root, or CAP_PERFMON with read access to tracefs (syscall tracepoints,
CONFIG_FTRACE_SYSCALLS).";

const OOMKILL_EXAMPLES: &str = "\
EXAMPLES:
    memperf oomkill
        Every OOM kill on the system, with the trigger's stack, until Ctrl-C.
    memperf oomkill -w oom.data -d 3600
        For an hour, also saved as a recording.
    memperf oomkill -i oom.data
        The same lines from the recording, on another machine (loadavg and cgroup are
        read live only).

PERMISSIONS: root, or CAP_PERFMON with read access to tracefs.";

/// The longest duration or interval any option takes: 100 years. In nanoseconds it fits the
/// u64 sample clock with room to spare, and it can be added to any `Instant`.
pub(crate) const MAX_SECONDS: f64 = 100.0 * 365.25 * 86_400.0;

/// The one parser of a duration or interval option given in seconds (`--duration`, `-d`, a
/// tool's INTERVAL, `-I` in seconds): a positive, finite number of seconds up to
/// `MAX_SECONDS`, else an error that names the option and the value. Nothing saturates: an
/// absurd value is refused before anything starts.
pub(crate) fn seconds(option: &str, secs: f64) -> Result<Duration> {
    if !(secs > 0.0 && secs.is_finite()) {
        bail!("{option} must be a positive number of seconds, not {secs}");
    }
    if secs > MAX_SECONDS {
        bail!("{option} {secs} is too long: at most {MAX_SECONDS} seconds (100 years)");
    }
    let d = Duration::try_from_secs_f64(secs)
        .with_context(|| format!("{option} {secs} is not a duration"))?;
    // A zero interval would never end (`1e-10` rounds to it).
    if d.is_zero() {
        bail!("{option} {secs} is under a nanosecond");
    }
    Ok(d)
}

/// Refuses the output file given to `option` if it could not be written (a FIFO, another
/// user's file: `output::check_output_path`), before anything is read or traced.
pub(crate) fn check_output(option: &str, path: Option<&std::path::Path>) -> Result<()> {
    match path {
        Some(p) => crate::output::check_output_path(p)
            .with_context(|| format!("cannot write the {option} file")),
        None => Ok(()),
    }
}

pub(crate) fn parse_id_list(s: &str, what: &str) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        if part.is_empty() {
            bail!("empty {what} in `{s}`");
        }
        let id: u32 = part
            .parse()
            .with_context(|| format!("invalid {what} `{part}`: expected a number"))?;
        if id == 0 {
            bail!("invalid {what} 0");
        }
        out.push(id);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn call_graph_modes() {
        assert_eq!(parse_call_graph("fp").ok(), Some(CallGraph::Fp));
        assert_eq!(parse_call_graph("none").ok(), Some(CallGraph::None));
        assert_eq!(
            parse_call_graph("dwarf").ok(),
            Some(CallGraph::Dwarf { stack_bytes: 8192 })
        );
        assert_eq!(
            parse_call_graph("dwarf,4000").ok(),
            Some(CallGraph::Dwarf { stack_bytes: 4000 })
        );
        assert_eq!(
            parse_call_graph("dwarf,4001").ok(),
            Some(CallGraph::Dwarf { stack_bytes: 4008 })
        );
        let e = parse_call_graph("dwarf,70000").unwrap_err().to_string();
        assert!(e.contains("65528"), "{e}");
        let e = parse_call_graph("lbr").unwrap_err().to_string();
        assert!(e.contains("unknown --call-graph mode `lbr`"), "{e}");
    }

    fn config(args: &[&str]) -> Result<RecordConfig> {
        let mut argv = vec!["memperf", "record"];
        argv.extend_from_slice(args);
        let cli = Cli::try_parse_args(argv)?;
        match cli.command {
            Command::Record(r) => r.into_config(),
            _ => unreachable!("parsed a record command line"),
        }
    }

    #[test]
    fn dwarf_auto_starts_at_8_kib_and_needs_online_unwinding() {
        let c = config(&["--call-graph", "dwarf,auto", "--", "true"]).unwrap();
        assert!(c.stack_auto);
        assert_eq!(c.call_graph, CallGraph::Dwarf { stack_bytes: 8192 });
        let c = config(&["--call-graph", "dwarf,4096", "--", "true"]).unwrap();
        assert!(!c.stack_auto);
        let e = config(&[
            "--call-graph",
            "dwarf,auto",
            "--unwind",
            "offline",
            "--",
            "true",
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("with --unwind offline give a size"), "{e}");
        let e = config(&["--call-graph", "fp,auto", "--", "true"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--call-graph fp takes no size"), "{e}");
    }

    fn report_config(args: &[&str]) -> Result<ReportConfig> {
        let mut argv = vec!["memperf", "report"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv)?.command {
            Command::Report(r) => r.into_config(),
            _ => unreachable!("parsed a report command line"),
        }
    }

    #[test]
    fn report_time_range_and_lists() {
        let c = report_config(&[
            "--time",
            "1.5,2",
            "--pid",
            "3,4",
            "--per-pid",
            "--user-only",
        ])
        .unwrap();
        assert_eq!(c.time, (Some(1_500_000_000), Some(2_000_000_000)));
        assert_eq!(c.pids, Some(vec![3, 4]));
        assert_eq!((c.prefix, c.space), (Prefix::Pid, StackSpace::User));
        assert_eq!(
            report_config(&["--time", ",7"]).unwrap().time,
            (None, Some(7_000_000_000))
        );
        let e = report_config(&["--time", "5,1"]).unwrap_err().to_string();
        assert!(e.contains("the start is after the end"), "{e}");
        let e = report_config(&["--time", "5"]).unwrap_err().to_string();
        assert!(e.contains("expected START,END"), "{e}");
        assert!(report_config(&["--user-only", "--kernel-only"]).is_err());
    }

    #[test]
    fn report_input_dash_is_standard_input() {
        assert_eq!(report_config(&["-i", "-"]).unwrap().input, Input::Stdin);
        let c = report_config(&["-i", "./-"]).unwrap();
        assert_eq!(c.input, Input::File(PathBuf::from("./-")));
        assert_eq!(
            report_config(&[]).unwrap().input,
            Input::File(PathBuf::from("memperf.data"))
        );
        assert_eq!(Input::Stdin.to_string(), "standard input");
        let script = match Cli::try_parse_from(["memperf", "script", "-i", "-"])
            .unwrap()
            .command
        {
            Command::Script(s) => s.into_config().unwrap(),
            _ => unreachable!("parsed a script command line"),
        };
        assert_eq!(script.input, Input::Stdin);
    }

    #[test]
    fn period_zero_is_rejected() {
        let e = config(&["-c", "0", "--", "true"]).unwrap_err().to_string();
        assert_eq!(e, "invalid sample period 0 for -c: it must be at least 1");
    }

    #[test]
    fn targets() {
        let c = config(&["--", "true"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.target, Target::Command);
        let c = config(&["-a", "--", "sleep", "1"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.target, Target::SystemWide);
        assert!(c.command.is_some());
        let c = config(&["-p", "12,34"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.target, Target::Pids(vec![12, 34]));
        let e = config(&["-p", "x"]).unwrap_err().to_string();
        assert!(e.contains("invalid pid `x`"), "{e}");
        let e = config(&["-m", "3"]).unwrap_err().to_string();
        assert!(e.contains("power of two"), "{e}");
    }
}
