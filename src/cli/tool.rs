//! The options the memory tools share (`oomkill`, ...), as BCC's and perf's name them.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;

use super::{Target, parse_id_list};
use crate::config::tool::ToolConfig;
use crate::sys;

/// Target, duration, stacks and replay options of every memory tool.
#[derive(Debug, Clone, Args)]
pub struct ToolArgs {
    /// Trace these processes only (comma-separated pids).
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pid: Option<String>,

    /// Trace these threads only (comma-separated tids).
    #[arg(short = 't', long = "tid", value_name = "TID", conflicts_with = "pid")]
    pub tid: Option<String>,

    /// The whole system (the default without -p, -t or a command).
    #[arg(short = 'a', long = "all-cpus")]
    pub all_cpus: bool,

    /// Only these CPUs (e.g. 0,2-3).
    #[arg(short = 'C', long = "cpu", value_name = "CPUS")]
    pub cpu: Option<String>,

    /// Stop after this many seconds.
    #[arg(short = 'd', long = "duration", value_name = "SECS")]
    pub duration: Option<f64>,

    /// Also write what the tool saw to FILE, a perf.data recording that `-i` replays.
    #[arg(
        short = 'w',
        long = "write",
        value_name = "FILE",
        conflicts_with = "input"
    )]
    pub write: Option<PathBuf>,

    /// Read a recording (this tool's `-w`, `memperf record`'s or `perf record`'s with the
    /// tool's events) instead of tracing the live system; `-` reads standard input.
    #[arg(short = 'i', long = "input", value_name = "FILE")]
    pub input: Option<PathBuf>,

    /// Ring buffer size per CPU, in pages (a power of two).
    #[arg(short = 'm', long = "mmap-pages", value_name = "PAGES")]
    pub mmap_pages: Option<usize>,

    /// A command to run and trace (after --), with its arguments; with -a, the whole system
    /// while it runs. When standard output carries data (-f, --flamegraph -), the command's
    /// standard output goes to standard error.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

impl ToolArgs {
    /// The first option given that only a live run uses (a replay would ignore it).
    fn live_only_option(&self) -> Option<&'static str> {
        [
            (self.pid.is_some(), "-p/--pid"),
            (self.tid.is_some(), "-t/--tid"),
            (self.all_cpus, "-a/--all-cpus"),
            (self.cpu.is_some(), "-C/--cpu"),
            (self.duration.is_some(), "-d/--duration"),
            (self.mmap_pages.is_some(), "-m/--mmap-pages"),
        ]
        .into_iter()
        .find_map(|(given, name)| given.then_some(name))
    }

    /// The tool configuration, without stacks: the tools that unwind say so on it.
    pub fn into_config(self) -> Result<ToolConfig> {
        if let Some(m) = self.mmap_pages
            && (m == 0 || !m.is_power_of_two())
        {
            bail!("-m/--mmap-pages must be a power of two, not {m}");
        }
        let online = || sys::online_cpus().context("failed to read the online CPUs");
        let cpus = match &self.cpu {
            Some(list) => {
                let wanted = sys::parse_cpu_list(list)
                    .map_err(|e| anyhow::anyhow!("invalid CPU list `{list}` for -C: {e}"))?;
                let on = online()?;
                if let Some(c) = wanted.iter().find(|c| !on.contains(c)) {
                    bail!("CPU {c} given to -C is not online (online: {on:?})");
                }
                wanted
            }
            None => online()?,
        };
        let has_command = !self.command.is_empty();
        if self.input.is_some() && has_command {
            bail!("-i reads a recording: it takes no command to run");
        }
        if self.input.is_some()
            && let Some(live) = self.live_only_option()
        {
            bail!(
                "{live} chooses what is traced live and does not apply to -i (a recording): \
                 leave it out"
            );
        }
        let target = if let Some(p) = &self.pid {
            if has_command {
                bail!("give either -p or a command after --, not both");
            }
            Target::Pids(parse_id_list(p, "pid")?)
        } else if let Some(t) = &self.tid {
            if has_command {
                bail!("give either -t or a command after --, not both");
            }
            Target::Tids(parse_id_list(t, "tid")?)
        } else if has_command && !self.all_cpus && self.cpu.is_none() {
            Target::Command
        } else {
            Target::SystemWide
        };
        let duration = self
            .duration
            .map(|d| super::seconds("-d/--duration", d))
            .transpose()?;
        Ok(ToolConfig {
            target,
            cpus,
            command: has_command.then_some(self.command),
            command_stdout: sys::CommandStdout::Inherit,
            duration,
            stacks: false,
            mmap_pages: self.mmap_pages,
            write: self.write,
            input: self.input,
            interval: None,
            count: None,
            period: None,
            comm: None,
        })
    }
}

/// The configuration of a tool that prints every `interval` seconds, `count` times
/// (`swapin`, `vmscan`, `slabratetop`); `what` names its count's unit in the error.
pub(super) fn interval_config(
    common: ToolArgs,
    interval: f64,
    count: Option<u64>,
    what: &str,
) -> Result<ToolConfig> {
    let interval = super::seconds("the interval", interval)?;
    if count == Some(0) {
        bail!("the count of {what} must be at least 1");
    }
    Ok(ToolConfig {
        interval: Some(interval),
        count,
        ..common.into_config()?
    })
}
