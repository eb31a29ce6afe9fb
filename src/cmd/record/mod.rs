//! `memperf record`: the live recorder writing perf.data, with its start line and summary.

mod summary;

use anyhow::Result;

use crate::config::record::RecordConfig;
use crate::live::driver::OnSignal;
use crate::live::open::Opened;
use crate::live::priority::Raised;
use crate::live::recorder::{self, Live, Run};
use crate::session::{Handler, SampleCtx};

pub use crate::live::open::default_mmap_pages;

/// `record`'s own handler: the file takes every record; this only says when events are live.
struct Announce<'a> {
    cfg: &'a RecordConfig,
}

impl Handler for Announce<'_> {
    fn sample(&mut self, _s: &SampleCtx<'_>) -> std::io::Result<()> {
        Ok(())
    }
}

impl Live for Announce<'_> {
    fn started(
        &mut self,
        opened: &Opened,
        child: Option<i32>,
        _clock: Option<crate::perfdata::ClockData>,
    ) -> Result<()> {
        if !self.cfg.quiet {
            summary::print_start(self.cfg, opened, child);
        }
        Ok(())
    }
}

/// Runs `memperf record`; returns the exit code (the command's, when there is one).
pub fn run(cfg: RecordConfig) -> Result<i32> {
    let run = Run {
        cfg: &cfg,
        write: true,
        events: None,
        keep_processes: false,
        follow_remaps: true,
        tick: None,
        on_signal: OnSignal::Forward,
    };
    let done = recorder::record(run, &mut Announce { cfg: &cfg })?;
    if !cfg.quiet {
        summary::print_end(&summary::EndInfo {
            cfg: &cfg,
            session: &done.session,
            drain: &done.drain,
            notes: &done.notes,
            names: &done.names,
            elapsed: done.elapsed,
            file_bytes: done.file_bytes,
            data_bytes: done.data_bytes,
            reason: done.reason.to_string(),
            pages: done.pages,
            priority_refused: done.priority == Raised::Refused,
        });
    }
    Ok(done.exit.map_or(0, |e| e.shell_code()))
}
