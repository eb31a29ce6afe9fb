//! The options of `memperf diff`, validated into a `DiffConfig`.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Args;

use super::{StackSpace, Weight};

pub use crate::config::diff::{DiffConfig, DiffOutput};

pub(crate) const DIFF_EXAMPLES: &str = "\
EXAMPLES:
    memperf record -e page-faults -o before.data -- ./app
    (change the code)
    memperf record -e page-faults -o after.data -- ./app
    memperf diff before.data after.data
        The stacks whose faults changed most: before, after, delta and delta %, largest
        change first.
    memperf diff before.data after.data --flamegraph diff.svg
        A differential flame graph: AFTER's stacks, red where they grew, blue where they
        shrank (the deeper the colour, the larger the change).
    memperf diff before.data after.data --normalize --folded > diff.folded
        `stack before after` lines, as inferno-diff-folded writes them, BEFORE scaled to
        AFTER's total (its -n); inferno-flamegraph draws them.
    memperf diff before.data after.data --pprof diff.pb.gz && go tool pprof -top diff.pb.gz
        AFTER's samples and BEFORE's negated, labelled pprof::base=true, as `go tool pprof
        -diff_base before.pb.gz after.pb.gz` combines two profiles.
    memperf diff before.folded after.data --event syscalls:sys_enter_brk --weight bytes
        Either side may be a recording (memperf's or perf's), folded stacks (`memperf report
        --folded`, inferno-collapse-*) or a pprof profile (`memperf report --pprof`).

Both sides must be of the same event: a recording of several events needs --event, and two
recordings of different events are refused. What a recording lost is said on stderr.";

/// `memperf diff BEFORE AFTER`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The profile before the change: a perf.data recording, folded stacks, or a pprof
    /// profile (gzip-compressed or not).
    #[arg(value_name = "BEFORE")]
    pub before: PathBuf,

    /// The profile after the change, of any of the same kinds.
    #[arg(value_name = "AFTER")]
    pub after: PathBuf,

    /// The event to compare (by the name the recording gives it, e.g. page-faults,
    /// syscalls:sys_enter_brk; a pprof profile's sample type). Required when a side has
    /// samples of several events.
    #[arg(long = "event", value_name = "EVENT")]
    pub event: Option<String>,

    /// What each sample weighs: `count` (1), or `bytes` for the events with a size (as
    /// `memperf report --weight bytes` weighs them; a pprof side's `EVENT_bytes` column).
    #[arg(long, value_enum, default_value = "count")]
    pub weight: Weight,

    /// Scale BEFORE's counts to AFTER's total before comparing (as inferno-diff-folded's
    /// -n), so that two runs of different lengths compare by share.
    #[arg(short = 'n', long)]
    pub normalize: bool,

    /// Only the user-space part of each stack (recordings).
    #[arg(long, conflicts_with = "kernel_only")]
    pub user_only: bool,

    /// Only the kernel part of each stack (recordings).
    #[arg(long)]
    pub kernel_only: bool,

    /// Only threads with these command names (comma-separated, exact; recordings).
    #[arg(long, value_name = "COMMS")]
    pub comm: Option<String>,

    /// The diff as folded stacks with two counts, `stack before after`, as
    /// inferno-diff-folded writes it.
    #[arg(long, conflicts_with_all = ["flamegraph", "pprof"])]
    pub folded: bool,

    /// Write a differential flame graph (SVG) to FILE (`-` for standard output): AFTER's
    /// stacks, red where they grew, blue where they shrank.
    #[arg(long, value_name = "FILE", conflicts_with = "pprof")]
    pub flamegraph: Option<PathBuf>,

    /// Flame graph title (default: the event and the two files).
    #[arg(long, requires = "flamegraph")]
    pub title: Option<String>,

    /// Flame graph width in pixels (default 1200).
    #[arg(long, requires = "flamegraph", value_name = "PIXELS")]
    pub width: Option<usize>,

    /// Write a pprof profile (gzip-compressed profile.proto) to FILE (`-` for standard
    /// output): AFTER's samples and BEFORE's negated, labelled `pprof::base=true`, as `go tool
    /// pprof -diff_base` represents a diff.
    #[arg(long, value_name = "FILE")]
    pub pprof: Option<PathBuf>,

    /// How many stacks the table shows, largest change first (0: all).
    #[arg(short = 'T', long = "top", value_name = "N", default_value_t = 20)]
    pub top: usize,
}

impl DiffArgs {
    /// Checks the options and the output paths before anything is read.
    pub fn into_config(self) -> Result<DiffConfig> {
        super::check_output("--pprof", self.pprof.as_deref())?;
        super::check_output("--flamegraph", self.flamegraph.as_deref())?;
        if self.width == Some(0) {
            bail!("--width must be at least 1 pixel");
        }
        let output = if let Some(p) = self.pprof {
            DiffOutput::Pprof(p)
        } else if let Some(output) = self.flamegraph {
            DiffOutput::Flamegraph {
                output,
                title: self.title,
                width: self.width,
            }
        } else if self.folded {
            DiffOutput::Folded
        } else {
            DiffOutput::Table
        };
        Ok(DiffConfig {
            before: self.before,
            after: self.after,
            event: self.event,
            weight: self.weight,
            normalize: self.normalize,
            space: if self.user_only {
                StackSpace::User
            } else if self.kernel_only {
                StackSpace::Kernel
            } else {
                StackSpace::All
            },
            comms: self
                .comm
                .map(|s| s.split(',').map(|c| c.trim().to_string()).collect()),
            output,
            top: self.top,
        })
    }
}
