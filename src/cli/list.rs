//! `memperf list`'s options: what to list, the capability report, allocator targets.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Args;

pub use crate::config::list::ListConfig;

/// What `memperf list` shows.
#[derive(Debug, Clone, Args)]
pub struct ListArgs {
    /// Show only what matches: a tracepoint subsystem (`kmem`), a glob (`kmem:mm_page_*`), a
    /// substring (`mmap`) or a type (`sw`, `hw`, `tracepoint`, `uprobe`, `tool`); with
    /// --check, the tools or events to check; with --allocators and no -p, library files.
    #[arg(value_name = "FILTER")]
    pub filter: Vec<String>,

    /// The capability report: kernel, perf settings, privileges, tracefs, uprobes, PMU, and
    /// whether each tool (or each one named) works here, with the fix. Exits 1 when
    /// something asked for does not work.
    #[arg(long, conflicts_with_all = ["allocators", "pid"])]
    pub check: bool,

    /// The allocator functions `memperf leak` would probe (uprobe targets), with their file
    /// offsets: in the objects process PID maps (-p), or in the library files named.
    #[arg(long)]
    pub allocators: bool,

    /// The USDT probes (`.note.stapsdt`: provider, name, address, semaphore, arguments) and
    /// the functions of the object file -x names, as `sdt:` and `u:` event specs.
    #[arg(long, requires = "exe", conflicts_with_all = ["check", "allocators"])]
    pub probes: bool,

    /// With --probes: the executable or library to read.
    #[arg(short = 'x', long = "exe", value_name = "FILE", requires = "probes")]
    pub exe: Option<PathBuf>,

    /// With --allocators: the process whose mapped objects to search.
    #[arg(short = 'p', long = "pid", value_name = "PID", requires = "allocators")]
    pub pid: Option<u32>,
}

impl ListArgs {
    pub fn into_config(self) -> Result<ListConfig> {
        if self.check {
            return Ok(ListConfig::Check { names: self.filter });
        }
        if let Some(file) = self.exe {
            return Ok(ListConfig::ProbesIn {
                file,
                filter: self.filter,
            });
        }
        if !self.allocators {
            for f in &self.filter {
                if let Some(why) = crate::events::glob_error(f) {
                    bail!("invalid event glob `{f}`: {why}");
                }
            }
            return Ok(ListConfig::Events {
                filter: self.filter,
            });
        }
        match (self.pid, self.filter.is_empty()) {
            (Some(0), _) => bail!("invalid pid 0"),
            (Some(pid), true) => Ok(ListConfig::AllocatorsOf { pid }),
            (Some(_), false) => {
                bail!("--allocators takes -p PID or library files, not both")
            }
            (None, true) => bail!(
                "--allocators needs a process (-p PID) or a library file, e.g. `memperf list \
                 --allocators /lib/x86_64-linux-gnu/libc.so.6`"
            ),
            (None, false) => Ok(ListConfig::AllocatorsIn {
                files: self.filter.into_iter().map(PathBuf::from).collect(),
            }),
        }
    }
}

pub const LIST_EXAMPLES: &str = "\
EXAMPLES:
    memperf list
        Every event memperf knows (software, hardware, tracepoints grouped by subsystem with
        the memory ones first, the C library's allocators) and every tool with the events
        it reads, each with whether it works here and why not.
    memperf list kmem vmscan
        The kmem and vmscan tracepoints, and the tools that read them.
    memperf list 'syscalls:sys_enter_m*' sw
        A glob, and the software events.
    memperf list --check
        The capability report: kernel, perf_event_paranoid, kptr_restrict, capabilities,
        tracefs, uprobes, PMU, perf_event_mlock_kb, and each tool with the fix when it does
        not work. Exit status 0 when everything works, 1 otherwise.
    memperf list --check mmapsnoop oomkill
        Just those tools (or events): exit status 0 when they work here.
    memperf list -p 1234 --allocators
        The allocator functions (malloc, free, ...; jemalloc's je_*, tcmalloc's tc_*,
        mimalloc's mi_*) in the objects process 1234 maps, with file offsets, as `memperf
        leak` probes them.
    memperf list --allocators /lib/x86_64-linux-gnu/libc.so.6
        The same for a library file.
    memperf list -x /usr/lib/x86_64-linux-gnu/libc.so.6 --probes
        The USDT probes in libc (memory_sbrk_more, memory_arena_new, ...) with their
        arguments and semaphores, and its functions, as `sdt:` and `u:` events take them.
    memperf list -x ./app --probes 'parse*'
        Only the probes and functions that match a glob or contain the text.

PERMISSIONS: none to list. Availability is what the caller may open: it differs for root
and other users. -p PID reads /proc/PID/maps and the mapped files (your own processes, or
root).";

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};

    fn config(args: &[&str]) -> Result<ListConfig> {
        let mut argv = vec!["memperf", "list"];
        argv.extend_from_slice(args);
        match Cli::try_parse_args(argv)?.command {
            Command::List(a) => a.into_config(),
            _ => unreachable!("parsed a list command line"),
        }
    }

    #[test]
    fn list_modes() {
        assert_eq!(
            config(&["kmem", "vmscan"]).unwrap(),
            ListConfig::Events {
                filter: vec!["kmem".into(), "vmscan".into()]
            }
        );
        assert_eq!(
            config(&["--check", "oomkill"]).unwrap(),
            ListConfig::Check {
                names: vec!["oomkill".into()]
            }
        );
        assert_eq!(
            config(&["-p", "12", "--allocators"]).unwrap(),
            ListConfig::AllocatorsOf { pid: 12 }
        );
        assert_eq!(
            config(&["--allocators", "/lib/libc.so.6"]).unwrap(),
            ListConfig::AllocatorsIn {
                files: vec![PathBuf::from("/lib/libc.so.6")]
            }
        );
        assert_eq!(
            config(&["-x", "/bin/app", "--probes", "parse*"]).unwrap(),
            ListConfig::ProbesIn {
                file: PathBuf::from("/bin/app"),
                filter: vec!["parse*".into()]
            }
        );
        assert!(config(&["-x", "/bin/app"]).is_err());
        assert!(config(&["--probes"]).is_err());
        assert!(config(&["-p", "12"]).is_err());
        assert!(config(&["--check", "--allocators"]).is_err());
        let e = config(&["--allocators"]).unwrap_err().to_string();
        assert!(e.contains("needs a process"), "{e}");
        assert!(config(&["-p", "0", "--allocators"]).is_err());
    }
}
